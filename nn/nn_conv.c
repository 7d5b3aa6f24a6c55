/* nn_conv — 2-D convolution, forward and backward (declared in nn_layers.h).
 *
 * Owns:    the im2col/col2im lowering and its OpenBLAS sgemm calls, plus the
 *          direct-loop _ref twins the tests compare against.
 * Exposes: nn_conv_dims_make, nn_conv_scratch_floats, nn_conv2d_forward/
 *          backward (+ _ref), and the *_nb variants that take the chunk size
 *          explicitly (benchmarks and tests).
 * Callers: nn_model.c (conv op), lowprec/ (weight-gradient path), tests,
 *          bench/bench_layers.c.
 *
 * Dimension legend: N batch, C in channels, OC out channels, H W input,
 * OH OW output, KH KW kernel, P = OH*OW output pixels per sample,
 * CK = C*KH*KW (rows of the lowered matrix), nb samples per chunk.
 *
 * Layout.  The batch is processed in chunks of nb samples.  A chunk is lowered
 * into col (CK, nb*P): row (c,kh,kw), column (j,oh,ow) holds
 * in[j][c][oh*stride-pad+kh][ow*stride-pad+kw] (0 outside the image).
 *   forward:  tmp (OC, nb*P) = w (OC, CK) @ col, then scattered to NCHW
 *             (+ bias).  With nb == 1 the sgemm writes NCHW directly.
 *   backward: doutm (OC, nb*P) gathered from dout (nb == 1: dout itself),
 *             dw (OC, CK) += doutm @ col^T              (one sgemm)
 *             dcol (CK, nb*P) = w^T @ doutm             (into col's storage)
 *             din = col2im(dcol).
 * A 1x1 kernel with stride 1 and no padding skips the lowering entirely: the
 * input plane (C, H*W) of one sample already is col.
 * At stride 1 the lowering and col2im go through the AVX2 plane kernels of
 * nn_layers_avx2.c when the CPU has AVX2 (scalar loops otherwise).
 * nb is chosen so that a chunk has at least NN_CONV_COLS columns: wide enough
 * for an efficient sgemm, small enough that col stays in cache
 * (bench/bench_layers.c measures the alternatives).
 */
#include "nn/nn_layers.h"
#include "nn/nn_layers_simd.h"

#include <assert.h>
#include <string.h>

#include <cblas.h>

/* Target columns per chunk (nb*P); see bench/bench_layers.c. */
#ifndef NN_CONV_COLS
#define NN_CONV_COLS 1024
#endif

nn_conv_dims nn_conv_dims_make(int N, int C, int H, int W, int OC, int K, int stride, int pad)
{
    nn_conv_dims d;
    assert(N > 0 && C > 0 && H > 0 && W > 0 && OC > 0 && K > 0 && stride > 0 && pad >= 0);
    d.N = N;
    d.C = C;
    d.H = H;
    d.W = W;
    d.OC = OC;
    d.KH = K;
    d.KW = K;
    d.stride = stride;
    d.pad = pad;
    d.OH = (H + 2 * pad - K) / stride + 1;
    d.OW = (W + 2 * pad - K) / stride + 1;
    assert(H + 2 * pad >= K && W + 2 * pad >= K);
    return d;
}

static int s_is_pointwise(const nn_conv_dims *d)
{
    return d->KH == 1 && d->KW == 1 && d->stride == 1 && d->pad == 0;
}

int nn_conv_chunk(const nn_conv_dims *d)
{
    if (s_is_pointwise(d))
        return 1;
    int P = d->OH * d->OW;
    int nb = (NN_CONV_COLS + P - 1) / P;
    if (nb < 1)
        nb = 1;
    if (nb > d->N)
        nb = d->N;
    return nb;
}

size_t nn_conv_scratch_floats_nb(const nn_conv_dims *d, int nb)
{
    if (s_is_pointwise(d))
        return 0;
    assert(nb >= 1);
    if (nb > d->N)
        nb = d->N;
    size_t P = (size_t)d->OH * (size_t)d->OW;
    size_t CK = (size_t)d->C * (size_t)d->KH * (size_t)d->KW;
    size_t cols = (size_t)nb * P;
    return CK * cols + (nb > 1 ? (size_t)d->OC * cols : 0);
}

size_t nn_conv_scratch_floats(const nn_conv_dims *d)
{
    return nn_conv_scratch_floats_nb(d, nn_conv_chunk(d));
}

/* Valid output range [lo, hi) along one axis for kernel offset k: the
 * outputs o with 0 <= o*s - pad + k < n. */
static void s_valid_range(int n, int on, int s, int pad, int k, int *lo, int *hi)
{
    int a = pad - k; /* need o*s >= a */
    int l = a <= 0 ? 0 : (a + s - 1) / s;
    int b = n + pad - k; /* need o*s < b */
    int h = b <= 0 ? 0 : (b + s - 1) / s;
    if (h > on)
        h = on;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

/* col (CK, nb*P) = lowering of in (nb, C, H, W), overwritten. */
static void s_im2col(float *col, const float *in, int nb, const nn_conv_dims *d)
{
    const int C = d->C, H = d->H, W = d->W, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, s = d->stride, pad = d->pad;
    const size_t P = (size_t)OH * OW, cols = (size_t)nb * P;
    const int avx2 = nn_simd_have_avx2();
    for (int c = 0; c < C; c++) {
        for (int kh = 0; kh < KH; kh++) {
            int oh_lo, oh_hi;
            s_valid_range(H, OH, s, pad, kh, &oh_lo, &oh_hi);
            for (int kw = 0; kw < KW; kw++) {
                int ow_lo, ow_hi;
                s_valid_range(W, OW, s, pad, kw, &ow_lo, &ow_hi);
                float *row = col + ((size_t)(c * KH + kh) * KW + kw) * cols;
                for (int j = 0; j < nb; j++) {
                    const float *plane = in + ((size_t)j * C + c) * H * W;
                    float *dst = row + (size_t)j * P;
                    if (s == 1 && avx2) {
                        nn_avx2_im2col_plane(dst, plane, W, OH, OW, oh_lo, oh_hi, ow_lo, ow_hi,
                                             kh - pad, kw - pad);
                        continue;
                    }
                    if (oh_lo > 0)
                        memset(dst, 0, sizeof(float) * (size_t)oh_lo * OW);
                    for (int oh = oh_lo; oh < oh_hi; oh++) {
                        float *o = dst + (size_t)oh * OW;
                        const float *irow = plane + (size_t)(oh * s - pad + kh) * W;
                        const int off = kw - pad; /* iw = ow*s + off */
                        for (int ow = 0; ow < ow_lo; ow++)
                            o[ow] = 0.0f;
                        if (s == 1) {
                            if (ow_hi > ow_lo)
                                memcpy(o + ow_lo, irow + ow_lo + off,
                                       sizeof(float) * (size_t)(ow_hi - ow_lo));
                        } else {
                            for (int ow = ow_lo; ow < ow_hi; ow++)
                                o[ow] = irow[ow * s + off];
                        }
                        for (int ow = ow_hi; ow < OW; ow++)
                            o[ow] = 0.0f;
                    }
                    if (oh_hi < OH)
                        memset(dst + (size_t)oh_hi * OW, 0, sizeof(float) * (size_t)(OH - oh_hi) * OW);
                }
            }
        }
    }
}

/* din (nb, C, H, W) = col2im(dcol (CK, nb*P)), overwritten. */
static void s_col2im(float *din, const float *dcol, int nb, const nn_conv_dims *d)
{
    const int C = d->C, H = d->H, W = d->W, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, s = d->stride, pad = d->pad;
    const size_t P = (size_t)OH * OW, cols = (size_t)nb * P;
    const int avx2 = nn_simd_have_avx2();
    memset(din, 0, sizeof(float) * (size_t)nb * C * H * W);
    for (int c = 0; c < C; c++) {
        for (int kh = 0; kh < KH; kh++) {
            int oh_lo, oh_hi;
            s_valid_range(H, OH, s, pad, kh, &oh_lo, &oh_hi);
            for (int kw = 0; kw < KW; kw++) {
                int ow_lo, ow_hi;
                s_valid_range(W, OW, s, pad, kw, &ow_lo, &ow_hi);
                const float *row = dcol + ((size_t)(c * KH + kh) * KW + kw) * cols;
                for (int j = 0; j < nb; j++) {
                    float *plane = din + ((size_t)j * C + c) * H * W;
                    const float *src = row + (size_t)j * P;
                    if (s == 1 && avx2) {
                        nn_avx2_col2im_plane(plane, src, W, OW, oh_lo, oh_hi, ow_lo, ow_hi,
                                             kh - pad, kw - pad);
                        continue;
                    }
                    for (int oh = oh_lo; oh < oh_hi; oh++) {
                        const float *o = src + (size_t)oh * OW;
                        float *irow = plane + (size_t)(oh * s - pad + kh) * W;
                        const int off = kw - pad; /* iw = ow*s + off */
                        if (s == 1) {
                            for (int ow = ow_lo; ow < ow_hi; ow++)
                                irow[ow + off] += o[ow];
                        } else {
                            for (int ow = ow_lo; ow < ow_hi; ow++)
                                irow[ow * s + off] += o[ow];
                        }
                    }
                }
            }
        }
    }
}

void nn_conv2d_forward_nb(float *out, const float *in, const float *w, const float *b,
                          const nn_conv_dims *d, float *scratch, int nb)
{
    const int N = d->N, OC = d->OC;
    const int CK = d->C * d->KH * d->KW;
    const size_t P = (size_t)d->OH * d->OW;
    const size_t in_n = (size_t)d->C * d->H * d->W, out_n = (size_t)OC * P;
    const int pointwise = s_is_pointwise(d);
    if (pointwise)
        nb = 1;
    assert(nb >= 1);
    if (nb > N)
        nb = N;
    float *col = scratch;
    float *tmp = scratch + (size_t)CK * nb * P;
    for (int n0 = 0; n0 < N; n0 += nb) {
        int m = N - n0 < nb ? N - n0 : nb;
        const size_t cols = (size_t)m * P;
        const float *B = pointwise ? in + (size_t)n0 * in_n : col;
        if (!pointwise)
            s_im2col(col, in + (size_t)n0 * in_n, m, d);
        if (m == 1) {
            float *o = out + (size_t)n0 * out_n;
            float beta = 0.0f;
            if (b) {
                for (int oc = 0; oc < OC; oc++)
                    for (size_t p = 0; p < P; p++)
                        o[oc * P + p] = b[oc];
                beta = 1.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, (int)P, CK, 1.0f, w, CK,
                        B, (int)P, beta, o, (int)P);
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, (int)cols, CK, 1.0f, w,
                        CK, B, (int)cols, 0.0f, tmp, (int)cols);
            for (int j = 0; j < m; j++) {
                float *o = out + (size_t)(n0 + j) * out_n;
                for (int oc = 0; oc < OC; oc++) {
                    const float *t = tmp + (size_t)oc * cols + (size_t)j * P;
                    float *oo = o + (size_t)oc * P;
                    const float bv = b ? b[oc] : 0.0f;
                    for (size_t p = 0; p < P; p++)
                        oo[p] = t[p] + bv;
                }
            }
        }
    }
}

void nn_conv2d_forward(float *out, const float *in, const float *w, const float *b,
                       const nn_conv_dims *d, float *scratch)
{
    nn_conv2d_forward_nb(out, in, w, b, d, scratch, nn_conv_chunk(d));
}

void nn_conv2d_backward_nb(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, const nn_conv_dims *d, float *scratch, int nb)
{
    const int N = d->N, OC = d->OC;
    const int CK = d->C * d->KH * d->KW;
    const size_t P = (size_t)d->OH * d->OW;
    const size_t in_n = (size_t)d->C * d->H * d->W, out_n = (size_t)OC * P;
    const int pointwise = s_is_pointwise(d);
    if (pointwise)
        nb = 1;
    assert(nb >= 1);
    if (nb > N)
        nb = N;
    float *col = scratch;
    float *doutm = scratch + (size_t)CK * nb * P;

    /* db[oc] += sum over n, p of dout[n][oc][p] */
    if (db) {
        for (int n = 0; n < N; n++)
            for (int oc = 0; oc < OC; oc++) {
                const float *g = dout + (size_t)n * out_n + (size_t)oc * P;
                float s = 0.0f;
                for (size_t p = 0; p < P; p++)
                    s += g[p];
                db[oc] += s;
            }
    }
    for (int n0 = 0; n0 < N; n0 += nb) {
        int m = N - n0 < nb ? N - n0 : nb;
        const size_t cols = (size_t)m * P;
        const float *G;
        if (m == 1) {
            G = dout + (size_t)n0 * out_n;
        } else {
            for (int j = 0; j < m; j++)
                for (int oc = 0; oc < OC; oc++)
                    memcpy(doutm + (size_t)oc * cols + (size_t)j * P,
                           dout + (size_t)(n0 + j) * out_n + (size_t)oc * P, sizeof(float) * P);
            G = doutm;
        }
        const float *X = pointwise ? in + (size_t)n0 * in_n : col;
        if (!pointwise)
            s_im2col(col, in + (size_t)n0 * in_n, m, d);
        /* forward: out = w @ col  =>  dw += dout @ col^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, CK, (int)cols, 1.0f, G,
                    (int)cols, X, (int)cols, 1.0f, dw, CK);
        if (!din)
            continue;
        /* dcol = w^T @ dout; din = col2im(dcol) */
        float *dst = pointwise ? din + (size_t)n0 * in_n : col;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CK, (int)cols, OC, 1.0f, w, CK, G,
                    (int)cols, 0.0f, dst, (int)cols);
        if (!pointwise)
            s_col2im(din + (size_t)n0 * in_n, col, m, d);
    }
}

void nn_conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, const nn_conv_dims *d, float *scratch)
{
    nn_conv2d_backward_nb(din, dw, db, dout, in, w, d, scratch, nn_conv_chunk(d));
}

/* ---- direct-loop twins ---------------------------------------------------- */

void nn_conv2d_forward_ref(float *out, const float *in, const float *w, const float *b,
                           const nn_conv_dims *d)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, s = d->stride, pad = d->pad;
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    float acc = b ? b[oc] : 0.0f;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++) {
                            int ih = oh * s - pad + kh;
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int kw = 0; kw < KW; kw++) {
                                int iw = ow * s - pad + kw;
                                if (iw < 0 || iw >= W)
                                    continue;
                                acc += in[(((size_t)n * C + c) * H + ih) * W + iw] *
                                       w[(((size_t)oc * C + c) * KH + kh) * KW + kw];
                            }
                        }
                    out[(((size_t)n * OC + oc) * OH + oh) * OW + ow] = acc;
                }
}

void nn_conv2d_backward_ref(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, const nn_conv_dims *d)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, s = d->stride, pad = d->pad;
    if (din)
        memset(din, 0, sizeof(float) * (size_t)N * C * H * W);
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    /* out[n][oc][oh][ow] = b[oc] + sum in[..] * w[..] */
                    float g = dout[(((size_t)n * OC + oc) * OH + oh) * OW + ow];
                    if (db)
                        db[oc] += g;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++) {
                            int ih = oh * s - pad + kh;
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int kw = 0; kw < KW; kw++) {
                                int iw = ow * s - pad + kw;
                                if (iw < 0 || iw >= W)
                                    continue;
                                size_t ii = (((size_t)n * C + c) * H + ih) * W + iw;
                                size_t wi = (((size_t)oc * C + c) * KH + kh) * KW + kw;
                                dw[wi] += g * in[ii];
                                if (din)
                                    din[ii] += g * w[wi];
                            }
                        }
                }
}
