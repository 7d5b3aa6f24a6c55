/* nn_conv — 2-D convolution, forward and backward (declared in nn_layers.h).
 *
 * Owns:    the im2col/col2im lowering and its OpenBLAS sgemm calls, the
 *          im2col-free "shift" path (kernels of nn_conv_avx512.c, or their
 *          AVX2+FMA twins in nn_conv_avx2.c on CPUs without AVX-512) and the
 *          "lowered" path (im2col + the AVX-512 kernels instead of sgemm;
 *          every non-1x1-stride-1 conv on AVX-512 CPUs; on AVX2 CPUs the
 *          AVX2 kernels were not faster than OpenBLAS there, so those convs
 *          keep sgemm: bench/bench_layers.c), the batch-split thread
 *          helper (nn_par_run, nn_layers_set_threads: over nn_pool.h), plus the direct-loop
 *          _ref twins the tests compare against.
 * Exposes: nn_conv_dims_make, nn_conv_scratch_floats, nn_conv2d_forward/
 *          backward (+ _ref), and the *_nb variants that take the chunk size
 *          explicitly (benchmarks and tests).
 * Callers: nn_model_ops.c (conv op), lowprec/ (weight-gradient path), tests,
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
 *
 * Im2col-free path ("shift" path; CPUs with AVX-512 or AVX2+FMA, stride 1,
 * "same" padding 2*pad == K-1, K > 1 — every 3x3 stride-1 conv of
 * resnet20/vgg).
 * A chunk of nb samples is copied into a zero-bordered grid (C, nb, Hp, Wp),
 * Hp = H+2*pad, Wp = W+2*pad, channel stride cs = nb*Hp*Wp.  Output pixel
 * (oh, ow) of sample j sits at grid index j*Hp*Wp + (pad+oh)*Wp + pad+ow and
 * tap (kh, kw) reads the input grid at that index + toff, toff =
 * (kh-pad)*Wp + (kw-pad): the lowered matrix is never built, the kernels of
 * nn_conv_avx512.c / nn_conv_avx2.c read the shifted grid rows directly (pad
 * columns produce garbage outputs that are never copied out, ~6-36% extra
 * arithmetic: 36% at 8x8).
 *   forward:  gout (OC, cs) = shiftgemm(w, gin), copied to NCHW (+ bias);
 *   backward: gG (OC, cs) = dout in grid form (zero borders),
 *             dw[oc][c,kh,kw] += sum_j gG[oc][j] * gin[c][j + toff]   (shiftdot)
 *             gdin (C, cs) = shiftgemm(flipped w^T, gG)  — the input gradient
 *             of a "same" stride-1 conv is the same conv of dout with the
 *             kernel flipped and in/out channels swapped — copied to din.
 * Every grid read stays inside [0, nb*Hp*Wp) (the kernels only compute the
 * columns from the first to the last real pixel), so no slack is needed.
 * nb: nn_conv_chunk picks >= NN_SHIFT_COLS grid columns per chunk.
 */
#include "nn/nn_layers.h"
#include "nn/nn_kern.h"
#include "nn/nn_layers_simd.h"
#include "nn/nn_pool.h"

#include <assert.h>
#include <string.h>

#include <cblas.h>

/* Target columns per chunk (nb*P); see bench/bench_layers.c. */
#ifndef NN_CONV_COLS
#define NN_CONV_COLS 1024
#endif
/* Target grid columns per chunk (nb*Hp*Wp) of the shift path. */
#ifndef NN_SHIFT_COLS
#define NN_SHIFT_COLS 1024
#endif
/* Most taps (KH*KW) the shift path takes. */
#define NN_SHIFT_TMAX 49

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

/* Geometry the shift path can take (whether or not the CPU can run it). */
static int s_shift_ok(const nn_conv_dims *d)
{
    return d->stride == 1 && d->KH == d->KW && d->KH > 1 && 2 * d->pad == d->KH - 1 &&
           d->KH * d->KW <= NN_SHIFT_TMAX;
}

/* The shift path where the kernel table says it pays (nn_kern.h:
 * shift_maxc, from the channel counts the level's kernels fit). */
static int s_use_shift(const nn_conv_dims *d)
{
    const int maxc = nn_kern()->shift_maxc;
    return s_shift_ok(d) && d->C <= maxc && d->OC <= maxc;
}

/* Every other conv but the 1x1 stride-1 one: im2col + the shifted GEMM
 * (with T = 1) instead of OpenBLAS ("lowered" path), where the kernel
 * table says it pays (the AVX-512 kernels). */
static int s_use_lowered(const nn_conv_dims *d)
{
    return !s_shift_ok(d) && !s_is_pointwise(d) && nn_kern()->lowered;
}

static size_t s_plane(const nn_conv_dims *d)
{
    return (size_t)(d->H + 2 * d->pad) * (size_t)(d->W + 2 * d->pad);
}

static size_t s_round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

size_t nn_shift_pack_size(int M, int K)
{
    return (size_t)((M + 3) / 4) * 4 * (size_t)K;
}

/* Floats of the packed-weight area at the start of a thread's scratch (any
 * of the three pack modes of s_shift_pack). */
static size_t s_pack_area(const nn_conv_dims *d)
{
    const int T = d->KH * d->KW, CK = d->C * T;
    size_t pa = nn_shift_pack_size(d->OC, CK), pb = nn_shift_pack_size(d->C, d->OC * T);
    size_t pc = nn_shift_pack_size(CK, d->OC);
    pa = pa > pb ? pa : pb;
    return s_round16(pa > pc ? pa : pc);
}

/* Floats one thread of the kernel paths needs with chunk nb: the pack area,
 * then
 *   shift path:   grids gin (C), gG/gout (OC), gdin (C), cs = nb*Hp*Wp each;
 *   lowered path: col (CK, nb*P) (also dcol), G/tmp (OC, nb*P). */
static size_t s_kern_scratch(const nn_conv_dims *d, int nb)
{
    if (s_shift_ok(d)) {
        size_t cs = (size_t)nb * s_plane(d);
        return s_pack_area(d) + s_round16((size_t)d->C * cs) + s_round16((size_t)d->OC * cs) +
               (size_t)d->C * cs;
    }
    size_t CK = (size_t)d->C * d->KH * d->KW, cols = (size_t)nb * (size_t)d->OH * (size_t)d->OW;
    return s_pack_area(d) + s_round16(CK * cols) + (size_t)d->OC * cols;
}

/* Per-thread scratch of the kernel paths: s_kern_scratch plus a private dw
 * (OC*CK) for the threaded backward. */
static size_t s_shift_thread_floats(const nn_conv_dims *d, int nb)
{
    return s_round16(s_kern_scratch(d, nb)) +
           s_round16((size_t)d->OC * d->C * d->KH * d->KW);
}

int nn_conv_chunk(const nn_conv_dims *d)
{
    if (s_is_pointwise(d))
        return 1;
    if (s_use_shift(d)) {
        size_t pl = s_plane(d);
        int nb = (int)((NN_SHIFT_COLS + pl - 1) / pl);
        return nb < 1 ? 1 : nb > d->N ? d->N : nb;
    }
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
    size_t n = CK * cols + (nb > 1 ? (size_t)d->OC * cols : 0);
    /* the kernel paths' per-thread areas only where this CPU takes them
     * (vgg11's 512-channel convs on AVX2 CPUs: 4 private dw copies, 38 MB) */
    if (s_use_shift(d) || s_use_lowered(d)) {
        size_t sh = (size_t)NN_PAR_MAX_THREADS * s_shift_thread_floats(d, nb);
        n = sh > n ? sh : n;
    }
    return n;
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
    void (*const plane_fn)(float *, const float *, int, int, int, int, int, int, int, int, int) =
        nn_kern()->im2col_plane;
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
                    if (s == 1 && plane_fn) {
                        plane_fn(dst, plane, W, OH, OW, oh_lo, oh_hi, ow_lo, ow_hi,
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
    void (*const plane_fn)(float *, const float *, int, int, int, int, int, int, int, int) =
        nn_kern()->col2im_plane;
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
                    if (s == 1 && plane_fn) {
                        plane_fn(plane, src, W, OW, oh_lo, oh_hi, ow_lo, ow_hi,
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

/* ---- threads ------------------------------------------------------------------
 * Batch-split parallelism for the non-BLAS kernels: nn_par_run(nt, fn, arg)
 * runs fn(arg, t, nt) for t in [0, nt), t = 0 on the calling thread and the
 * others on the persistent workers of nn_pool.h (no thread is created per
 * call), so a kernel stays a plain call with no state left behind.  Work splits and reductions
 * depend only on nt: results are deterministic for a given thread count. */

void nn_layers_set_threads(int n)
{
    nn_pool_set_threads(n);
}

int nn_par_threads(void)
{
    int n = nn_pool_threads();
    return n > NN_PAR_MAX_THREADS ? NN_PAR_MAX_THREADS : n;
}

void nn_par_run(int nt, nn_par_fn fn, void *arg)
{
    assert(nt >= 1 && nt <= NN_PAR_MAX_THREADS);
    nn_pool_run(nt, fn, arg);
}

/* ---- shift path ------------------------------------------------------------ */

/* grid (nch, nb, Hp, Wp), channel stride cs: src[j][c] (nb, nch, H, W) at
 * offset (p, p) of plane (c, j), zeros around it (overwritten). */
static void s_to_grid(float *grid, size_t cs, const float *src, int nb, int nch, int H, int W,
                      int p)
{
    const size_t Wp = (size_t)W + 2 * (size_t)p, plane = ((size_t)H + 2 * (size_t)p) * Wp;
    for (int c = 0; c < nch; c++)
        for (int j = 0; j < nb; j++) {
            float *g = grid + (size_t)c * cs + (size_t)j * plane;
            const float *x = src + ((size_t)j * nch + c) * (size_t)H * W;
            memset(g, 0, sizeof(float) * (p * Wp + p));
            for (int h = 0; h < H; h++) {
                float *row = g + (p + (size_t)h) * Wp + p;
                memcpy(row, x + (size_t)h * W, sizeof(float) * (size_t)W);
                memset(row + W, 0, sizeof(float) * 2 * (size_t)p);
            }
            memset(g + (p + (size_t)H) * Wp + p, 0, sizeof(float) * (p * Wp - p));
        }
}

/* dst (nb, nch, H, W) = the data part of grid (+ bias[c] if bias), overwritten. */
static void s_from_grid(float *dst, const float *grid, size_t cs, int nb, int nch, int H, int W,
                        int p, const float *bias)
{
    const size_t Wp = (size_t)W + 2 * (size_t)p, plane = ((size_t)H + 2 * (size_t)p) * Wp;
    for (int j = 0; j < nb; j++)
        for (int c = 0; c < nch; c++) {
            const float *g = grid + (size_t)c * cs + (size_t)j * plane + p * Wp + p;
            float *o = dst + ((size_t)j * nch + c) * (size_t)H * W;
            const float bv = bias ? bias[c] : 0.0f;
            for (int h = 0; h < H; h++) {
                const float *gr = g + (size_t)h * Wp;
                float *orow = o + (size_t)h * W;
                if (bias)
                    for (int w = 0; w < W; w++)
                        orow[w] = gr[w] + bv;
                else
                    memcpy(orow, gr, sizeof(float) * (size_t)W);
            }
        }
}

static void s_shift_toff(int *toff, const nn_conv_dims *d)
{
    const int K = d->KH, p = d->pad, Wp = d->W + 2 * p;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++)
            toff[kh * K + kw] = (kh - p) * Wp + (kw - p);
}

/* Ap = packed A (M, K) of the weights w (OC, C, KH, KW), T = KH*KW:
 *   mode 0: A(oc, k) = w[oc*CK + k]                        (M = OC, K = CK);
 *   mode 1: A(c, oc*T + t) = w[oc][c][T-1-t], flipped       (M = C, K = OC*T);
 *   mode 2: A(k, oc) = w[oc*CK + k], transposed             (M = CK, K = OC). */
static void s_shift_pack(float *Ap, const float *w, const nn_conv_dims *d, int mode)
{
    const int T = d->KH * d->KW, C = d->C, OC = d->OC, CK = C * T;
    const int M = mode == 0 ? OC : mode == 1 ? C : CK;
    const int K = mode == 0 ? CK : mode == 1 ? OC * T : OC;
    const int Mp = (M + 3) / 4 * 4;
    for (int m = 0; m < Mp; m++)
        for (int k = 0; k < K; k++) {
            float v = 0.0f;
            if (m < M) {
                if (mode == 1) {
                    int oc = k / T, t = k % T;
                    v = w[((size_t)oc * C + m) * T + (size_t)(T - 1 - t)];
                } else if (mode == 2) {
                    v = w[(size_t)k * CK + m];
                } else {
                    v = w[(size_t)m * K + k];
                }
            }
            Ap[(size_t)(m / 4) * K * 4 + (size_t)k * 4 + (size_t)(m % 4)] = v;
        }
}

/* Lowered path, forward of samples [n_lo, n_hi): col = im2col, tmp (OC,
 * cols) = w @ col, scattered to NCHW (+ bias).  Ap holds pack mode 0. */
static void s_low_forward_range(float *out, const float *in, const float *b,
                                const nn_conv_dims *d, float *scratch, const float *Ap, int nb,
                                int n_lo, int n_hi)
{
    const int OC = d->OC, CK = d->C * d->KH * d->KW;
    const size_t P = (size_t)d->OH * d->OW, in_n = (size_t)d->C * d->H * d->W, out_n = OC * P;
    float *col = scratch + s_pack_area(d), *tmp = col + s_round16((size_t)CK * nb * P);
    static const int zero = 0;
    const nn_kern_t *kern = nn_kern();
    for (int n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int m = n_hi - n0 < nb ? n_hi - n0 : nb;
        const size_t cols = (size_t)m * P;
        s_im2col(col, in + (size_t)n0 * in_n, m, d);
        kern->shiftgemm(tmp, cols, Ap, OC, col, cols, CK, &zero, 1, cols);
        for (int j = 0; j < m; j++)
            for (int oc = 0; oc < OC; oc++) {
                const float *t = tmp + (size_t)oc * cols + (size_t)j * P;
                float *o = out + (size_t)(n0 + j) * out_n + (size_t)oc * P;
                const float bv = b ? b[oc] : 0.0f;
                for (size_t q = 0; q < P; q++)
                    o[q] = t[q] + bv;
            }
    }
}

/* Lowered path, backward of samples [n_lo, n_hi): dw +=, din (if not NULL)
 * overwritten via dcol = w^T @ G and col2im.  Ap holds pack mode 2. */
static void s_low_backward_range(float *din, float *dw, const float *dout, const float *in,
                                 const nn_conv_dims *d, float *scratch, const float *Ap, int nb,
                                 int n_lo, int n_hi)
{
    const int OC = d->OC, CK = d->C * d->KH * d->KW;
    const size_t P = (size_t)d->OH * d->OW, in_n = (size_t)d->C * d->H * d->W, out_n = OC * P;
    float *col = scratch + s_pack_area(d), *G = col + s_round16((size_t)CK * nb * P);
    static const int zero = 0;
    const nn_kern_t *kern = nn_kern();
    for (int n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int m = n_hi - n0 < nb ? n_hi - n0 : nb;
        const size_t cols = (size_t)m * P;
        for (int j = 0; j < m; j++)
            for (int oc = 0; oc < OC; oc++)
                memcpy(G + (size_t)oc * cols + (size_t)j * P,
                       dout + (size_t)(n0 + j) * out_n + (size_t)oc * P, sizeof(float) * P);
        s_im2col(col, in + (size_t)n0 * in_n, m, d);
        /* forward: out = w @ col  =>  dw += G @ col^T, dcol = w^T @ G */
        kern->shiftdot(dw, (size_t)CK, G, cols, OC, col, cols, CK, &zero, 1, cols);
        if (!din)
            continue;
        kern->shiftgemm(col, cols, Ap, CK, G, cols, OC, &zero, 1, cols);
        s_col2im(din + (size_t)n0 * in_n, col, m, d);
    }
}

/* Forward of samples [n_lo, n_hi) in chunks of nb, with scratch of
 * s_shift_scratch(d, nb) floats whose packed-weight area already holds
 * s_shift_pack(.., 0). */
static void s_shift_forward_range(float *out, const float *in, const float *b,
                                  const nn_conv_dims *d, float *scratch, const float *Ap, int nb,
                                  int n_lo, int n_hi)
{
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, p = d->pad, T = d->KH * d->KW;
    const size_t plane = s_plane(d), in_n = (size_t)C * H * W, out_n = (size_t)OC * H * W;
    const size_t jlo = (size_t)p * (W + 2 * p) + p;
    int toff[NN_SHIFT_TMAX];
    s_shift_toff(toff, d);
    const nn_kern_t *kern = nn_kern();
    float *gin = scratch + s_pack_area(d);
    float *gout = gin + s_round16((size_t)C * nb * plane);
    for (int n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int m = n_hi - n0 < nb ? n_hi - n0 : nb;
        const size_t cs = (size_t)m * plane;
        s_to_grid(gin, cs, in + (size_t)n0 * in_n, m, C, H, W, p);
        kern->shiftgemm(gout + jlo, cs, Ap, OC, gin + jlo, cs, C, toff, T, cs - 2 * jlo);
        s_from_grid(out + (size_t)n0 * out_n, gout, cs, m, OC, H, W, p, b);
    }
}

/* Backward of samples [n_lo, n_hi): dw +=, din (if not NULL) overwritten;
 * Ap holds s_shift_pack(.., 1) when din is wanted. */
static void s_shift_backward_range(float *din, float *dw, const float *dout, const float *in,
                                   const nn_conv_dims *d, float *scratch, const float *Ap, int nb,
                                   int n_lo, int n_hi)
{
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, p = d->pad, T = d->KH * d->KW;
    const size_t plane = s_plane(d), in_n = (size_t)C * H * W, out_n = (size_t)OC * H * W;
    const size_t jlo = (size_t)p * (W + 2 * p) + p;
    int toff[NN_SHIFT_TMAX];
    s_shift_toff(toff, d);
    const nn_kern_t *kern = nn_kern();
    float *gin = scratch + s_pack_area(d);
    float *gG = gin + s_round16((size_t)C * nb * plane);
    float *gdin = gG + s_round16((size_t)OC * nb * plane);
    for (int n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int m = n_hi - n0 < nb ? n_hi - n0 : nb;
        const size_t cs = (size_t)m * plane, n = cs - 2 * jlo;
        s_to_grid(gin, cs, in + (size_t)n0 * in_n, m, C, H, W, p);
        s_to_grid(gG, cs, dout + (size_t)n0 * out_n, m, OC, H, W, p);
        /* forward: gout[oc][j] = sum w[oc][c][t] gin[c][j + toff[t]]
         * => dw[oc][c][t] += sum_j dout[oc][j] gin[c][j + toff[t]] */
        kern->shiftdot(dw, (size_t)C * T, gG + jlo, cs, OC, gin + jlo, cs, C, toff, T, n);
        if (!din)
            continue;
        /* => din[c][j] = sum_{oc,t} w[oc][c][t] dout[oc][j - toff[t]] */
        kern->shiftgemm(gdin + jlo, cs, Ap, C, gG + jlo, cs, OC, toff, T, n);
        s_from_grid(din + (size_t)n0 * in_n, gdin, cs, m, C, H, W, p, NULL);
    }
}

typedef struct {
    const nn_conv_dims *d;
    float *out, *din, *dw;
    const float *in, *b, *dout, *Ap;
    float *scratch;
    int nb, backward, lowered;
} s_shift_job;

/* Thread t of nt takes samples [N*t/nt, N*(t+1)/nt) with its own scratch
 * slice; in backward every thread but a lone one accumulates into its
 * private dw (zeroed here), summed by the caller in thread order. */
static void s_shift_worker(void *arg, int t, int nt)
{
    const s_shift_job *j = arg;
    const int N = j->d->N;
    const int lo = (int)((long long)N * t / nt), hi = (int)((long long)N * (t + 1) / nt);
    const size_t per = s_shift_thread_floats(j->d, j->nb);
    float *sc = j->scratch + (size_t)t * per;
    if (!j->backward) {
        if (j->lowered)
            s_low_forward_range(j->out, j->in, j->b, j->d, sc, j->Ap, j->nb, lo, hi);
        else
            s_shift_forward_range(j->out, j->in, j->b, j->d, sc, j->Ap, j->nb, lo, hi);
        return;
    }
    float *dw = j->dw;
    if (nt > 1) {
        size_t nw = (size_t)j->d->OC * j->d->C * j->d->KH * j->d->KW;
        dw = sc + s_round16(s_kern_scratch(j->d, j->nb));
        memset(dw, 0, sizeof(float) * nw);
    }
    if (j->lowered)
        s_low_backward_range(j->din, dw, j->dout, j->in, j->d, sc, j->Ap, j->nb, lo, hi);
    else
        s_shift_backward_range(j->din, dw, j->dout, j->in, j->d, sc, j->Ap, j->nb, lo, hi);
}

static void s_shift_run(s_shift_job *j)
{
    const nn_conv_dims *d = j->d;
    int nt = nn_par_threads();
    if (nt > d->N)
        nt = d->N;
    const size_t per = s_shift_thread_floats(d, j->nb);
    /* packed weights live in thread 0's slice; every thread reads them */
    float *Ap = j->scratch;
    j->Ap = Ap;
    nn_par_run(nt, s_shift_worker, j);
    if (j->backward && nt > 1) {
        const size_t nw = (size_t)d->OC * d->C * d->KH * d->KW;
        const size_t off = s_round16(s_kern_scratch(d, j->nb));
        for (int t = 0; t < nt; t++) {
            const float *part = j->scratch + (size_t)t * per + off;
            for (size_t i = 0; i < nw; i++)
                j->dw[i] += part[i];
        }
    }
}

static void s_shift_forward(float *out, const float *in, const float *w, const float *b,
                            const nn_conv_dims *d, float *scratch, int nb)
{
    s_shift_pack(scratch, w, d, 0);
    s_shift_job j = {.d = d, .out = out, .in = in, .b = b, .scratch = scratch, .nb = nb,
                     .lowered = !s_shift_ok(d)};
    s_shift_run(&j);
}

static void s_shift_backward(float *din, float *dw, const float *dout, const float *in,
                             const float *w, const nn_conv_dims *d, float *scratch, int nb)
{
    const int lowered = !s_shift_ok(d);
    if (din)
        s_shift_pack(scratch, w, d, lowered ? 2 : 1);
    s_shift_job j = {.d = d, .din = din, .dw = dw, .dout = dout, .in = in, .scratch = scratch,
                     .nb = nb, .backward = 1, .lowered = lowered};
    s_shift_run(&j);
}

void nn_shiftgemm_ref(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                      int nch, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nch * T;
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int c = 0; c < nch; c++)
                for (int t = 0; t < T; t++) {
                    size_t k = (size_t)c * T + t;
                    acc += Ap[(size_t)(m / 4) * K * 4 + k * 4 + (size_t)(m % 4)] *
                           (B + (size_t)c * ldb + toff[t])[j];
                }
            C[(size_t)m * ldc + j] = acc;
        }
}

void nn_shiftdot_ref(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                     size_t ldb, int nch, const int *toff, int T, size_t n)
{
    for (int m = 0; m < M; m++)
        for (int c = 0; c < nch; c++)
            for (int t = 0; t < T; t++) {
                float acc = 0.0f;
                for (size_t j = 0; j < n; j++)
                    acc += A[(size_t)m * lda + j] * (B + (size_t)c * ldb + toff[t])[j];
                D[(size_t)m * ldd + (size_t)c * T + t] += acc;
            }
}

void nn_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                 size_t ldb, int nch, const int *toff, int T, size_t n)
{
    nn_kern()->shiftdot(D, ldd, A, lda, M, B, ldb, nch, toff, T, n);
}

/* ---- im2col path ------------------------------------------------------------ */

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
    if (s_use_shift(d) || s_use_lowered(d)) {
        s_shift_forward(out, in, w, b, d, scratch, nb);
        return;
    }
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
    if (s_use_shift(d) || s_use_lowered(d)) {
        s_shift_backward(din, dw, dout, in, w, d, scratch, nb);
        return;
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
