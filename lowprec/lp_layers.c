/* lp_layers — see lp_layers.h.
 *
 * Integer conv forward, per sample (orientation chosen for vpdpbusd: the
 * weights are the broadcast operand, the im2col codes the vector operand,
 * so the output comes out as (OC, P) = NCHW with no transpose):
 *   S[oc][p] = sum_k wq[oc][k] * xq_col[k][p]                (lp_gemm, exact)
 *   out = sw*sx*S + sw*mx*SWv(oc,p) + mw*sx*SX(p) + mw*mx*Kv(p) + Q(b)[oc]
 * where SX(p) = sum_k xq_col[k][p] (padded taps hold code 0), SWv(oc,p) the
 * sum of weight codes over the taps of p that fall inside the image (zero
 * padding is a real 0, not a code: border pixels see fewer taps) and Kv(p)
 * their number.  SWv comes from a per-channel 2-D prefix sum over (kh, kw).
 * The combination is evaluated in double and rounded once.
 * Input gradient: dcol[ck][p] = sum_oc wq[oc][ck] * gq[oc][p] likewise (all
 * K = OC terms valid), then col2im. */
#include "lowprec/lp_layers.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_cpu.h"

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

static void *s_take(unsigned char **p, size_t bytes)
{
    void *r = *p;
    *p += ALIGN64(bytes);
    return r;
}

/* Quantized copy of a parameter tensor (nearest, its own min/max) as floats. */
static void s_param_fq(float *dst, const float *src, size_t n)
{
    lp_fake_quant(dst, src, n, lp_tensor_qparams(src, n), 0, 0);
}

static void s_quant_act(uint8_t *q, const float *x, size_t n, lp_qparams p, lp_mode mode)
{
    if (mode.train)
        lp_quantize_sr(q, x, n, p, mode.seed, 0);
    else
        lp_quantize(q, x, n, p);
}

/* ---- conv2d ------------------------------------------------------------ */

size_t lp_conv2d_saved_bytes(const nn_conv_dims *d)
{
    return (size_t)d->N * d->C * d->H * d->W + (size_t)d->OC * d->C * d->KH * d->KW;
}

/* ---- shift path (stride-1 "same" convs, every level) ------------------------
 * The integer twin of nn's im2col-free convolution (nn_conv.c): codes of nb
 * samples go into a zero-bordered grid of int16 channel pairs (portable and
 * AVX2: lp_shiftgemm, vpmaddwd) or byte quads (AVX-512 VNNI: lp_shiftgemm_q,
 * vpdpbusd; lp_gemm.h), and the GEMM reads the shifted rows directly:
 *   S[m][j] = sum_{c, t} a[m][c][t] * b[c][j + toff[t]]
 * (no im2col, no col2im; pad columns produce unused sums).  The forward is
 * the conv of the input codes with the weight codes (m = oc); the input
 * gradient of a stride-1 same conv is the same conv of the gradient codes
 * with the kernel flipped and the channels swapped (m = c), so both use
 * s_shift_conv.  Border pixels see fewer taps: the affine correction uses
 * SB(p) = sum of the codes b over the taps inside the image (pad codes are
 * 0) and SA(m, p) = the sum of a over the same taps (2-D prefix sums over
 * the kernel), exactly as the im2col path.  Quads hold the weight codes
 * shifted by -128 (vpdpbusd multiplies u8 by s8); the correction adds
 * 128*SB back in int32 before the same double arithmetic, so every level
 * gives the same floats.  (Before the quads, the AVX-512 level used im2col +
 * vpdpbusd here: resnet20's int8 step was 1.31x the FP32 step on an EPYC
 * Zen 4, 0.75x with them.) */

#define LP_SHIFT_TMAX 49 /* most taps (K*K) the shift path takes */

static int s_force_im2col;

void lp_conv2d_force_im2col(int on)
{
    s_force_im2col = on;
}

/* Channel counts up to which the shift path's tile working set (4 rows of
 * packed weight pairs + the shifted pair rows of 16 columns) stays in a 32 KB
 * L1; above, the im2col path was faster on EPYC Zen 3 (vgg11's 128->256 to
 * 512->512 convs at 8x8 and 4x4: 1.2-1.9x), except on images under 16
 * pixels, where im2col's per-sample GEMMs are mostly column padding. */
#define LP_SHIFT_MAXC 128

/* Stride-1 "same" geometry (K x K, pad (K-1)/2, K >= 2): shifted rows. */
static int s_shift_geom(const nn_conv_dims *d)
{
    return d->stride == 1 && d->KH == d->KW && d->KH >= 2 && 2 * d->pad == d->KH - 1 &&
           d->KH * d->KW <= LP_SHIFT_TMAX;
}

static int s_use_shift(const nn_conv_dims *d)
{
    if (s_force_im2col || !s_shift_geom(d))
        return 0;
    return (d->C <= LP_SHIFT_MAXC && d->OC <= LP_SHIFT_MAXC) || d->H * d->W < 16;
}

/* True when the conv weight gradients are bf16 now (lp_bf16.h): every
 * conv, through shifted grids (stride-1 same) or an im2col of the codes. */
static int s_wgrad_bf16_on(const nn_conv_dims *d)
{
    (void)d;
    return lp_wgrad_bf16();
}

/* Columns per chunk of the bf16 weight gradient: a grid plane (Hp*Wp) per
 * sample on the shift geometry, else the OH*OW output pixels. */
static size_t s_wgrad_bf16_cols(const nn_conv_dims *d)
{
    if (s_shift_geom(d))
        return (size_t)(d->H + 2 * d->pad) * (d->W + 2 * d->pad);
    return (size_t)d->OH * d->OW;
}

/* Samples per chunk of the bf16 weight gradient: >= 4096 columns. */
static int s_wgrad_bf16_nb(const nn_conv_dims *d)
{
    const size_t per = s_wgrad_bf16_cols(d);
    int nb = (int)((4096 + per - 1) / per);
    return nb < 1 ? 1 : nb > d->N ? d->N : nb;
}

/* Scratch of s_wgrad_bf16: input rows (C on the shift geometry, C*T lowered),
 * OC gradient rows and T rows of ones (one on the shift geometry), then
 * the FP32 sums D (OC, C*T) and E (OC, T). */
static size_t s_wgrad_bf16_bytes(const nn_conv_dims *d)
{
    const size_t cs = (size_t)s_wgrad_bf16_nb(d) * s_wgrad_bf16_cols(d);
    const size_t T = (size_t)d->KH * d->KW, shift = (size_t)s_shift_geom(d);
    const size_t rows = shift ? (size_t)d->C + 1 : (size_t)d->C * T + T;
    return ALIGN64((rows + (size_t)d->OC) * cs * 2) + ALIGN64((size_t)d->OC * (d->C + 1) * T * 4);
}

/* Lanes of one row of s_wgrad_f32's grids (s_shift_grid's layout with nb
 * samples: pad lanes, pad zero rows, nb samples of H rows of W + pad zero
 * rows, pad lanes). */
static size_t s_wgrad_f32_vlen(const nn_conv_dims *d)
{
    const size_t nb = (size_t)s_wgrad_bf16_nb(d), pad = (size_t)d->pad;
    return 2 * pad + (pad + nb * ((size_t)d->H + pad)) * (size_t)d->W;
}

/* Scratch of s_wgrad_f32 (shift geometry only): C rows of 2 pad + 1 column-
 * shift variants and OC rows, s_wgrad_f32_vlen floats each. */
static size_t s_wgrad_f32_bytes(const nn_conv_dims *d)
{
    if (!s_shift_geom(d))
        return 0;
    const size_t rows = (size_t)d->C * (2 * (size_t)d->pad + 1) + (size_t)d->OC;
    return ALIGN64(rows * s_wgrad_f32_vlen(d) * 4) +
           ALIGN64((size_t)d->OC * d->C * d->KH * d->KW * 4);
}

/* Samples per chunk of the shift path: >= 1024 grid columns. */
static int s_shift_nb(int N, int H, int W, int pad)
{
    size_t plane = (size_t)(H + 2 * pad) * (W + 2 * pad);
    int nb = (int)((1024 + plane - 1) / plane);
    return nb < 1 ? 1 : nb > N ? N : nb;
}

/* Output rows whose taps cover the same kernel rows [h0, h1) share their
 * correction terms ("row classes"); as oh grows h0 and h1 only decrease, so
 * classes are runs of rows and there are at most 2*KH + 1 (and <= OH). */
static int s_max_classes(int OH, int KH)
{
    return 2 * KH + 1 < OH ? 2 * KH + 1 : OH;
}

/* Bytes of s_shift_conv scratch: M output rows, nch input channels. */
/* Lanes of one variant of a pair row (see s_shift_conv): pad lanes, pad
 * zero rows, nb samples of H rows + pad zero rows, pad lanes; rows of W. */
static size_t s_vlen(int nb, int H, int W, int pad)
{
    return (size_t)2 * pad + ((size_t)pad + (size_t)nb * (H + pad)) * W;
}

/* (The pair layout's rows and packed A are the largest of the three
 * layouts, except the tile layout's grid for one quad row and its packed A
 * for M not a multiple of 16: the max of the two is taken.) */
static size_t s_shift_conv_bytes(int N, int nch, int M, int H, int W, int K, int pad)
{
    const int np = (nch + 1) / 2, nq = (nch + 3) / 4, T = K * K, nb = s_shift_nb(N, H, W, pad);
    const size_t cs = (size_t)nb * (H + 2 * pad) * (W + 2 * pad), vlen = s_vlen(nb, H, W, pad);
    const size_t ap = lp_shift_pack_lanes(M, np * T), at = lp_tile_pack_lanes(M, K, nq * K);
    const size_t gp = (size_t)np * K * vlen, gt = (size_t)nq * K * (vlen + 1);
    size_t s = 0;
    s += ALIGN64((ap > at ? ap : at) * 4);
    s += ALIGN64((size_t)M * (K + 1) * (K + 1) * 4);
    s += ALIGN64((size_t)(H + W) * 2 * sizeof(int));
    s += ALIGN64((gp > gt ? gp : gt) * 4);
    s += ALIGN64(cs * 4);
    s += ALIGN64((size_t)M * vlen * 4);
    s += ALIGN64((size_t)H * W * sizeof(double));
    s += ALIGN64((size_t)M * s_max_classes(H, K) * W * sizeof(double));
    s += ALIGN64((size_t)H * sizeof(int));
    return s;
}

/* Samples per chunk of the weight gradient: about 1 MB of dequantized
 * input (at least one sample). */
static int s_wgrad_nb(const nn_conv_dims *d)
{
    const size_t xper = (size_t)d->C * d->H * d->W;
    size_t nw = ((size_t)1 << 18) / xper;
    return nw < 1 ? 1 : nw > (size_t)d->N ? d->N : (int)nw;
}

size_t lp_conv2d_scratch_bytes(const nn_conv_dims *d)
{
    const int CK = d->C * d->KH * d->KW, P = d->OH * d->OW, Pp = lp_gemm_np(P);
    /* forward: bias, then the im2col path or the shift path */
    size_t s = ALIGN64((size_t)d->OC * 5), si = 0;
    si += ALIGN64(lp_gemm_pack_a_bytes(d->OC, CK));
    si += ALIGN64(lp_gemm_pack_b_bytes(CK, P));
    si += ALIGN64((size_t)d->OC * P * 4);
    si += ALIGN64((size_t)Pp * 4);
    si += ALIGN64((size_t)d->OC * (d->KH + 1) * (d->KW + 1) * 4);
    si += ALIGN64((size_t)(d->OH + d->OW) * 2 * sizeof(int));
    si += ALIGN64((size_t)P * sizeof(double));
    si += ALIGN64((size_t)d->OC * s_max_classes(d->OH, d->KH) * d->OW * sizeof(double));
    si += ALIGN64((size_t)d->OH * sizeof(int));
    size_t ss = s_shift_conv_bytes(d->N, d->C, d->OC, d->H, d->W, d->KH, d->pad);
    s += si > ss ? si : ss;
    /* backward, weight gradient: a chunk of dequantized input + nn's scratch */
    nn_conv_dims dc = *d;
    dc.N = s_wgrad_nb(d);
    size_t bw = ALIGN64((size_t)dc.N * d->C * d->H * d->W * sizeof(float)) +
                ALIGN64(nn_conv_scratch_floats(&dc) * sizeof(float));
    /* ... or the weight gradients built from the codes (bf16, FP32) */
    size_t bb = s_wgrad_bf16_bytes(d), bf = s_wgrad_f32_bytes(d);
    bw = bw > bb ? bw : bb;
    bw = bw > bf ? bw : bf;
    /* backward, input gradient: gradient codes, then either path */
    size_t b = ALIGN64((size_t)d->N * d->OC * P), bi = 0;
    bi += ALIGN64(lp_gemm_pack_a_bytes(CK, d->OC));
    bi += ALIGN64((size_t)CK * 4);
    bi += ALIGN64(lp_gemm_pack_b_bytes(d->OC, P));
    bi += ALIGN64((size_t)CK * P * 4);
    bi += ALIGN64((size_t)Pp * 4);
    bi += ALIGN64((size_t)P * sizeof(double));
    bi += ALIGN64((size_t)(d->KH + d->KW) * 2 * sizeof(int));
    size_t bs = ALIGN64((size_t)d->OC * CK) +
                s_shift_conv_bytes(d->N, d->OC, d->C, d->H, d->W, d->KH, d->pad);
    b += bi > bs ? bi : bs;
    b = b > bw ? b : bw;
    return (s > b ? s : b) + 64;
}

/* valid tap range of output row o: [lo, hi) of kernel index */
static void s_tap_range(int o, int stride, int pad, int K, int In, int *lo, int *hi)
{
    int first = o * stride - pad;
    *lo = first < 0 ? -first : 0;
    *hi = In - first < K ? In - first : K;
    if (*hi < *lo)
        *hi = *lo;
}

/* codes of sample x (C,H,W) -> packed B (K4, Pp, 4); padded taps code 0.
 * Positions k >= CK and p >= P must already be zero. */
static void s_im2col_b4(uint8_t *Bp, const uint8_t *x, const nn_conv_dims *d)
{
    const int C = d->C, H = d->H, W = d->W, KH = d->KH, KW = d->KW, S = d->stride;
    const int pad = d->pad, OH = d->OH, OW = d->OW, Pp = lp_gemm_np(OH * OW);
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                int ck = (c * KH + kh) * KW + kw;
                uint8_t *dst = Bp + (size_t)(ck >> 2) * Pp * 4 + (ck & 3);
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * S - pad + kh;
                    uint8_t *drow = dst + (size_t)oh * OW * 4;
                    if (ih < 0 || ih >= H) {
                        for (int ow = 0; ow < OW; ow++)
                            drow[4 * ow] = 0;
                        continue;
                    }
                    const uint8_t *srow = x + ((size_t)c * H + ih) * W;
                    int iw = -pad + kw;
                    if (S == 1 && iw >= 0 && iw + OW <= W) {
                        for (int ow = 0; ow < OW; ow++)
                            drow[4 * ow] = srow[iw + ow];
                    } else {
                        for (int ow = 0; ow < OW; ow++, iw += S)
                            drow[4 * ow] = (iw >= 0 && iw < W) ? srow[iw] : 0;
                    }
                }
            }
}

void lp_pair_plane_ref(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W)
{
    const int pad = (V - 1) / 2;
    for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++) {
            const size_t i = (size_t)h * W + w;
            uint8_t v0 = r0[i], v1 = r1 ? r1[i] : 0;
            for (int v = 0; v < V; v++) {
                const int dx = v - pad, wrap = dx < 0 ? w >= W + dx : w < dx;
                dst[(size_t)v * vstride + i] = wrap ? 0 : lp_pair(v0, v1);
            }
            if (chs)
                chs[(size_t)h * ldc + w] += v0 + v1;
        }
}

void lp_tap_sum_row_ref(double *t, const int32_t *s, const int *off, int T, double c, size_t n)
{
    for (size_t w = 0; w < n; w++) {
        int32_t sum = 0;
        for (int k = 0; k < T; k++)
            sum += s[(ptrdiff_t)w + off[k]];
        t[w] = c * sum;
    }
}

void lp_quad_row_ref(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n)
{
    for (size_t w = 0; w < n; w++) {
        uint8_t c[4];
        for (int l = 0; l < 4; l++)
            c[l] = r[l] ? r[l][w] : 0;
        dst[w] = lp_quad(c[0], c[1], c[2], c[3]);
        if (chs)
            chs[w] += c[0] + c[1] + c[2] + c[3];
    }
}

void lp_tap_isum_row_ref(int32_t *sb, const int32_t *s, const int *off, int T, size_t n)
{
    for (size_t w = 0; w < n; w++) {
        int32_t sum = 0;
        for (int k = 0; k < T; k++)
            sum += s[(ptrdiff_t)w + off[k]];
        sb[w] = sum;
    }
}

/* The row kernels s_shift_conv uses at the current CPU level. */
typedef struct {
    int quad; /* 1: byte quads (lp_shiftgemm_q), 0: int16 pairs */
    int tile; /* 1: quads in the tile layout (lp_tilegemm; quad is 1 too) */
    int model; /* 1: the tile kernel on the software model (tests) */
    void (*pair_plane)(uint32_t *, size_t, int, int32_t *, size_t, const uint8_t *,
                       const uint8_t *, int, int);
    void (*quad_row)(uint32_t *, int32_t *, const uint8_t *const[4], size_t);
    void (*tap_sum_row)(double *, const int32_t *, const int *, int, double, size_t);
    void (*tap_isum_row)(int32_t *, const int32_t *, const int *, int, size_t);
    void (*dequant_rows)(float *, const int32_t *, const double *, double, const double *,
                         size_t, int);
    void (*dequant_row_q)(float *, const int32_t *, const int32_t *, double, double,
                          const double *, size_t);
} s_conv_rows;

static s_conv_rows s_rows(void)
{
    s_conv_rows r = {0, 0, 0, lp_pair_plane_ref, lp_quad_row_ref, lp_tap_sum_row_ref,
                     lp_tap_isum_row_ref, lp_dequant_rows_ref, lp_dequant_row_q_ref};
    if (nn_cpu_level() >= NN_CPU_AVX2) {
        r.pair_plane = lp_pair_plane_avx2;
        r.tap_sum_row = lp_tap_sum_row_avx2;
        r.dequant_rows = lp_dequant_rows_avx2;
    }
    if (nn_cpu_level() >= NN_CPU_AVX512VNNI) {
        r.quad = 1;
        r.quad_row = lp_quad_row_avx512;
        r.tap_isum_row = lp_tap_isum_row_avx512;
        r.dequant_row_q = lp_dequant_row_q_avx512;
    }
    if (lp_tile_ready() || lp_tile_model_forced()) {
        r.quad = r.tile = 1;
        r.model = !lp_tile_ready();
    }
    return r;
}

/* pre (M, K+1, K+1) = 2-D prefix sums over (kh, kw) of sum_c a[m][c][kh][kw],
 * for kernel codes a (M, nch, K, K): the sum of a row's codes over any
 * rectangle of taps is four lookups (S_RECT). */
static void s_tap_prefix(int32_t *pre, const uint8_t *a, int M, int nch, int KH, int KW)
{
    const size_t PS = (size_t)(KH + 1) * (KW + 1), CK = (size_t)nch * KH * KW;
    for (int m = 0; m < M; m++) {
        int32_t *ps = pre + (size_t)m * PS;
        memset(ps, 0, PS * 4);
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                int32_t t = 0;
                for (int c = 0; c < nch; c++)
                    t += a[(size_t)m * CK + (size_t)(c * KH + kh) * KW + kw];
                ps[(kh + 1) * (KW + 1) + kw + 1] =
                    t + ps[kh * (KW + 1) + kw + 1] + ps[(kh + 1) * (KW + 1) + kw] -
                    ps[kh * (KW + 1) + kw];
            }
    }
}

/* sum of the codes of the prefix table ps over taps [h0,h1) x [w0,w1) */
#define S_RECT(ps, KW, h0, h1, w0, w1) \
    ((ps)[(h1) * ((KW) + 1) + (w1)] - (ps)[(h0) * ((KW) + 1) + (w1)] - \
     (ps)[(h1) * ((KW) + 1) + (w0)] + (ps)[(h0) * ((KW) + 1) + (w0)])

/* bases (M, nh, OW): the per-column correction base of each row class,
 *   cSA * SA + cK * nch*(h1-h0)*(w1-w0) + bias[m],
 * SA = the codes of kernel row m over the taps [h0,h1) x [w0,w1) of the
 * column (prefix sums pre, tap ranges rh, rw); hcls (OH) = class of each
 * output row.  Returns nh.  Overwrites bases and hcls. */
static int s_base_rows(double *bases, int *hcls, const int32_t *pre, const int *rh,
                       const int *rw, int M, int OH, int OW, int KH, int KW, int nch, double cSA,
                       double cK, const float *bias)
{
    int nh = 0;
    for (int oh = 0; oh < OH; oh++) {
        if (oh > 0 && (rh[2 * oh] != rh[2 * oh - 2] || rh[2 * oh + 1] != rh[2 * oh - 1]))
            nh++;
        hcls[oh] = nh;
    }
    nh++;
    assert(nh <= s_max_classes(OH, KH));
    const size_t PS = (size_t)(KH + 1) * (KW + 1);
    for (int m = 0; m < M; m++) {
        const int32_t *ps = pre + (size_t)m * PS;
        const double bm = bias ? bias[m] : 0.0;
        for (int oh = 0; oh < OH; oh++) {
            if (oh > 0 && hcls[oh] == hcls[oh - 1])
                continue;
            const int h0 = rh[2 * oh], h1 = rh[2 * oh + 1];
            double *b = bases + ((size_t)m * nh + hcls[oh]) * OW;
            for (int ow = 0; ow < OW; ow++) {
                const int w0 = rw[2 * ow], w1 = rw[2 * ow + 1];
                b[ow] = cSA * S_RECT(ps, KW, h0, h1, w0, w1) +
                        cK * ((double)nch * (h1 - h0) * (w1 - w0)) + bm;
            }
        }
    }
    return nh;
}

/* Geometry of one s_shift_conv call: L codes per 32-bit lane (2: int16
 * pairs, 4: byte quads), np lane rows of the grid, V column-shift variants
 * of each, vlen lanes per variant, J0 the first data lane of a variant,
 * ldb lanes per lane row: V*vlen, or V*(vlen + 1) in the tile layout,
 * where tap (kh, kw) of lane row p is row p*K + kw at stride vlen + 1 of
 * kernel row kh's group (lp_tile.h; the last V lanes of a row unused). */
typedef struct {
    int L, np, T, K, pad, H, W, nb, V, tile;
    size_t vlen, ldb, J0, plane;
} s_shift_geo;

static s_shift_geo s_geo(const s_conv_rows *rows, int N, int nch, int H, int W, int K, int pad)
{
    s_shift_geo g;
    g.L = rows->quad ? 4 : 2;
    g.tile = rows->tile;
    g.np = (nch + g.L - 1) / g.L;
    g.T = K * K;
    g.K = K;
    g.pad = pad;
    g.H = H;
    g.W = W;
    g.nb = s_shift_nb(N, H, W, pad);
    g.V = 2 * pad + 1;
    g.vlen = s_vlen(g.nb, H, W, pad);
    g.ldb = (size_t)g.V * (g.vlen + (rows->tile ? 1 : 0));
    g.J0 = (size_t)pad + (size_t)pad * W;
    g.plane = (size_t)(H + 2 * pad) * (W + 2 * pad);
    return g;
}

/* Ap (M, np*T) lanes of the kernel codes a (M, nch, T): pairs (lp_pair) or
 * quads shifted to signed bytes (lp_quad_s8), m-tiles of 4 (tap t = kh*K +
 * kw of lane row p: lane p*T + t), or in the tile layout (group kh, row
 * p*K + kw; lp_tile.h), rows past M and channels past nch zero.
 * Overwrites Ap. */
static void s_shift_pack_a(uint32_t *Ap, const uint8_t *a, int M, int nch, const s_shift_geo *g)
{
    const int T = g->T, K2 = g->np * T, K = g->K;
    memset(Ap, 0, (g->tile ? lp_tile_pack_lanes(M, K, K2 / K) : lp_shift_pack_lanes(M, K2)) * 4);
    for (int m = 0; m < M; m++)
        for (int p = 0; p < g->np; p++)
            for (int t = 0; t < T; t++) {
                const uint8_t *am = a + (size_t)m * nch * T;
                uint8_t c[4] = {0, 0, 0, 0}; /* padding channels meet b codes of 0 */
                for (int l = 0; l < g->L; l++)
                    if (g->L * p + l < nch)
                        c[l] = am[(size_t)(g->L * p + l) * T + t];
                const size_t at = g->tile ? lp_tile_a_at(M, K2 / K, m, t / K, p * K + t % K)
                                          : (size_t)(m / 4) * K2 * 4 + ((size_t)p * T + t) * 4 + m % 4;
                Ap[at] = g->L == 4 ? lp_quad_s8(c[0], c[1], c[2], c[3]) : lp_pair(c[0], c[1]);
            }
}

/* The grid of samples [n0, n0+cnt) of the codes b (N, nch, H, W): np lane
 * rows, each in V copies; copy v (column shift dx = v - pad) has the columns
 * zeroed that only a read wrapping into the neighbouring row reaches (the
 * last -dx, or the first dx), so a tap reads zeros exactly where the image
 * has none; the pad rows above, between and below the samples are zero.
 * chs (cnt, Hp, Wp) = per-pixel sums of the codes over the channels,
 * zero-bordered.  Overwrites grid and chs. */
static void s_shift_grid(uint32_t *grid, int32_t *chs, const uint8_t *b, int nch, int n0,
                         int cnt, const s_shift_geo *g, const s_conv_rows *rows)
{
    const int H = g->H, W = g->W, pad = g->pad, Wp = W + 2 * pad;
    const size_t P = (size_t)H * W, xper = (size_t)nch * P;
    memset(chs, 0, (size_t)cnt * g->plane * 4);
    for (int p = 0; p < g->np; p++)
        for (int v = 0; v < g->V; v++) {
            uint32_t *gv = grid + (size_t)p * g->ldb + (size_t)v * g->vlen;
            memset(gv, 0, g->J0 * 4);
            for (int j = 0; j < cnt; j++)
                memset(gv + g->J0 + ((size_t)j * (H + pad) + H) * W, 0, (size_t)pad * W * 4);
            size_t end = g->J0 + (size_t)cnt * (H + pad) * W;
            memset(gv + end, 0, (g->vlen - end) * 4);
        }
    for (int j = 0; j < cnt; j++) {
        const uint8_t *x = b + (size_t)(n0 + j) * xper;
        for (int p = 0; p < g->np; p++) {
            const uint8_t *xr[4] = {NULL, NULL, NULL, NULL};
            for (int l = 0; l < g->L; l++)
                if (g->L * p + l < nch)
                    xr[l] = x + (size_t)(g->L * p + l) * P;
            uint32_t *gp = grid + (size_t)p * g->ldb + g->J0 + (size_t)j * (H + pad) * W;
            if (g->L == 2) { /* the plane in every variant, one call */
                rows->pair_plane(gp, g->vlen, g->V,
                                 chs + (size_t)j * g->plane + (size_t)pad * Wp + pad,
                                 (size_t)Wp, xr[0], xr[1], H, W);
                continue;
            }
            for (int h = 0; h < H; h++) {
                const uint8_t *r[4];
                for (int l = 0; l < 4; l++)
                    r[l] = xr[l] ? xr[l] + (size_t)h * W : NULL;
                int32_t *ch = chs + (size_t)j * g->plane + (size_t)(pad + h) * Wp + pad;
                for (int v = 0; v < g->V; v++) {
                    const int dx = v - pad;
                    uint32_t *gv = gp + (size_t)h * W + (size_t)v * g->vlen;
                    rows->quad_row(gv, dx ? NULL : ch, r, (size_t)W);
                    const int z0 = dx < 0 ? W + dx : 0, z1 = dx < 0 ? W : dx;
                    for (int w = z0 < 0 ? 0 : z0; w < (z1 > W ? W : z1); w++)
                        gv[w] = 0;
                }
            }
        }
    }
}

/* out rows of sample j of a chunk from its sums Sm (M, vlen): the affine
 * correction with SB = the channel sums chs over the taps inside the image
 * (ctoff), restoring the quads' 128 shift first.  sb: scratch of H*W
 * doubles.  Overwrites out (M, H, W). */
static void s_shift_dequant(float *out, const int32_t *Sm, const int32_t *chs, const int *ctoff,
                            double cS, double cSB, const double *bases, const int *hcls, int nh,
                            int M, int j, const s_shift_geo *g, const s_conv_rows *rows,
                            double *sb)
{
    const int H = g->H, W = g->W, pad = g->pad, Wp = W + 2 * pad, T = g->T;
    const size_t P = (size_t)H * W;
    const int32_t *cj = chs + (size_t)j * g->plane + (size_t)pad * Wp + pad;
    int32_t *isb = (int32_t *)(void *)sb;
    for (int h = 0; h < H; h++) {
        if (rows->quad)
            rows->tap_isum_row(isb + (size_t)h * W, cj + (size_t)h * Wp, ctoff, T, (size_t)W);
        else
            rows->tap_sum_row(sb + (size_t)h * W, cj + (size_t)h * Wp, ctoff, T, cSB, (size_t)W);
    }
    for (int m = 0; m < M; m++) {
        const int32_t *Sr = Sm + (size_t)m * g->vlen + g->J0 + (size_t)j * (H + pad) * W;
        float *o = out + (size_t)m * P;
        for (int h = 0; h < H;) {
            const double *base = bases + ((size_t)m * nh + hcls[h]) * W;
            const size_t off = (size_t)h * W;
            int h1 = h + 1; /* the run of rows of h's class (they share base) */
            while (h1 < H && hcls[h1] == hcls[h])
                h1++;
            if (rows->quad) {
                for (int k = 0; k < h1 - h; k++)
                    rows->dequant_row_q(o + off + (size_t)k * W, Sr + off + (size_t)k * W,
                                        isb + off + (size_t)k * W, cS, cSB, base, (size_t)W);
            } else {
                rows->dequant_rows(o + off, Sr + off, sb + off, cS, base, (size_t)W, h1 - h);
            }
            h = h1;
        }
    }
}

/* The sums of lp_shiftgemm_q from the tile layout: K groups (kernel rows
 * kh, at offset (kh - pad)*W - pad) of np*K rows at stride vlen + 1
 * (s_shift_geo). */
static void s_shift_tilegemm(int32_t *S, const uint32_t *Ap, int M, const uint32_t *B,
                             const s_shift_geo *g, const s_conv_rows *rows, size_t n)
{
    ptrdiff_t goff[LP_SHIFT_TMAX];
    for (int kh = 0; kh < g->K; kh++)
        goff[kh] = (ptrdiff_t)(kh - g->pad) * g->W - g->pad;
    const int R = g->np * g->K;
    if (!rows->model)
        lp_tilegemm(S, g->vlen, Ap, M, B, goff, g->K, R, g->vlen + 1, n);
    else /* a broken tile rule is counted by the model */
        (void)lp_tilegemm_emu(S, g->vlen, Ap, M, B, goff, g->K, R, g->vlen + 1, n);
}

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) with the kernel codes a (M, nch, K, K), in real
 * values: sum over the taps inside the image of (sa*a + ma)(sb*b + mb),
 * plus bias[m] (may be NULL).  Overwrites out.  Scratch:
 * s_shift_conv_bytes(N, nch, M, H, W, K, pad).  Pairs and vpmaddwd at the
 * portable and AVX2 levels, quads and vpdpbusd at AVX-512 VNNI: the same
 * floats either way. */
static void s_shift_conv(float *out, const uint8_t *b, lp_qparams bqp, const uint8_t *a,
                         lp_qparams aqp, const float *bias, int N, int nch, int M, int H, int W,
                         int K, int pad, void *scratch)
{
    const s_conv_rows rows = s_rows();
    const s_shift_geo g = s_geo(&rows, N, nch, H, W, K, pad);
    const int T = g.T, K2 = g.np * T, Wp = W + 2 * pad;
    const size_t PS = (size_t)(K + 1) * (K + 1);
    unsigned char *sp = (unsigned char *)scratch;
    uint32_t *Ap = s_take(&sp, (g.tile ? lp_tile_pack_lanes(M, K, g.np * K)
                                       : lp_shift_pack_lanes(M, K2)) * 4);
    int32_t *pre = s_take(&sp, (size_t)M * PS * 4);
    int *rh = s_take(&sp, (size_t)(H + W) * 2 * sizeof(int)), *rw = rh + 2 * H;
    uint32_t *grid = s_take(&sp, (size_t)g.np * g.ldb * 4);
    int32_t *chs = s_take(&sp, (size_t)g.nb * g.plane * 4);
    int32_t *Sm = s_take(&sp, (size_t)M * g.vlen * 4);
    double *tx = s_take(&sp, (size_t)H * W * sizeof(double));
    double *bases = s_take(&sp, (size_t)M * s_max_classes(H, K) * W * sizeof(double));
    int *hcls = s_take(&sp, (size_t)H * sizeof(int));

    s_shift_pack_a(Ap, a, M, nch, &g);
    s_tap_prefix(pre, a, M, nch, K, K);
    for (int o = 0; o < H; o++)
        s_tap_range(o, 1, pad, K, H, &rh[2 * o], &rh[2 * o + 1]);
    for (int o = 0; o < W; o++)
        s_tap_range(o, 1, pad, K, W, &rw[2 * o], &rw[2 * o + 1]);
    /* tap (kh, kw) reads variant kw, shifted by rows and columns; ctoff the
     * same taps in the zero-bordered (Wp-wide) grid of channel sums */
    int toff[LP_SHIFT_TMAX], ctoff[LP_SHIFT_TMAX];
    assert(T <= LP_SHIFT_TMAX);
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            toff[kh * K + kw] = (int)((size_t)kw * g.vlen) + (kh - pad) * W + (kw - pad);
            ctoff[kh * K + kw] = (kh - pad) * Wp + (kw - pad);
        }
    const double sa = aqp.scale, ma = aqp.min, sb = bqp.scale, mb = bqp.min;
    const double cS = sa * sb, cSB = ma * sb, cSA = sa * mb, cK = ma * mb;
    const int nh = s_base_rows(bases, hcls, pre, rh, rw, M, H, W, K, K, nch, cSA, cK, bias);

    for (int n0 = 0; n0 < N; n0 += g.nb) {
        const int cnt = N - n0 < g.nb ? N - n0 : g.nb;
        s_shift_grid(grid, chs, b, nch, n0, cnt, &g, &rows);
        /* only the real pixels' sums are computed (rows of W, not Wp) */
        const size_t n = ((size_t)cnt * (H + pad) - pad) * W;
        if (rows.tile)
            s_shift_tilegemm(Sm + g.J0, Ap, M, grid + g.J0, &g, &rows, n);
        else if (rows.quad)
            lp_shiftgemm_q(Sm + g.J0, g.vlen, Ap, M, grid + g.J0, g.ldb, g.np, toff, T, n);
        else
            lp_shiftgemm(Sm + g.J0, g.vlen, Ap, M, grid + g.J0, g.ldb, g.np, toff, T, n);
        for (int j = 0; j < cnt; j++)
            s_shift_dequant(out + (size_t)(n0 + j) * M * H * W, Sm, chs, ctoff, cS, cSB, bases,
                            hcls, nh, M, j, &g, &rows, tx);
    }
}

void lp_conv2d_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, const nn_conv_dims *d, lp_mode mode,
                       void *scratch)
{
    const int N = d->N, C = d->C, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = C * KH * KW, P = OH * OW;
    const size_t xper = (size_t)C * d->H * d->W, PS = (size_t)(KH + 1) * (KW + 1);
    unsigned char *sp = (unsigned char *)scratch;
    unsigned char *bpart = s_take(&sp, (size_t)OC * 5);
    float *bq = (float *)(void *)bpart;
    uint8_t *bcodes = bpart + (size_t)OC * 4;

    sv->xp = lp_act_qparams(run_range, in, N, xper, mode.train);
    s_quant_act(sv->xq, in, (size_t)N * xper, sv->xp, mode);
    sv->wp = lp_tensor_qparams(w, (size_t)OC * CK);
    lp_quantize(sv->wq, w, (size_t)OC * CK, sv->wp);
    if (b) {
        lp_qparams bp = lp_tensor_qparams(b, (size_t)OC);
        lp_quantize(bcodes, b, (size_t)OC, bp);
        lp_dequantize(bq, bcodes, (size_t)OC, bp);
    } else {
        memset(bq, 0, (size_t)OC * sizeof(float));
    }
    if (s_use_shift(d)) {
        s_shift_conv(out, sv->xq, sv->xp, sv->wq, sv->wp, bq, N, C, OC, d->H, d->W, KH, d->pad,
                     sp);
        return;
    }
    int8_t *Ap = s_take(&sp, lp_gemm_pack_a_bytes(OC, CK));
    uint8_t *Bp = s_take(&sp, lp_gemm_pack_b_bytes(CK, P));
    int32_t *Cm = s_take(&sp, (size_t)OC * P * 4);
    int32_t *SX = s_take(&sp, (size_t)lp_gemm_np(P) * 4);
    int32_t *pre = s_take(&sp, (size_t)OC * PS * 4);
    int *rh = s_take(&sp, (size_t)(OH + OW) * 2 * sizeof(int)), *rw = rh + 2 * OH;
    double *tSX = s_take(&sp, (size_t)P * sizeof(double));
    double *bases = s_take(&sp, (size_t)OC * s_max_classes(OH, KH) * OW * sizeof(double));
    int *hcls = s_take(&sp, (size_t)OH * sizeof(int));

    lp_gemm_pack_a(Ap, NULL, sv->wq, CK, 1, OC, CK);
    s_tap_prefix(pre, sv->wq, OC, C, KH, KW);
    for (int oh = 0; oh < OH; oh++)
        s_tap_range(oh, d->stride, d->pad, KH, d->H, &rh[2 * oh], &rh[2 * oh + 1]);
    for (int ow = 0; ow < OW; ow++)
        s_tap_range(ow, d->stride, d->pad, KW, d->W, &rw[2 * ow], &rw[2 * ow + 1]);

    const double sw = sv->wp.scale, mw = sv->wp.min, sx = sv->xp.scale, mx = sv->xp.min;
    const double cS = sw * sx, cSX = mw * sx, cSW = sw * mx, cK = mw * mx;
    const int nh = s_base_rows(bases, hcls, pre, rh, rw, OC, OH, OW, KH, KW, C, cSW, cK, bq);
    memset(Bp, 0, lp_gemm_pack_b_bytes(CK, P));
    for (int n = 0; n < N; n++) {
        s_im2col_b4(Bp, sv->xq + (size_t)n * xper, d);
        lp_gemm_u8u8(Cm, P, Ap, Bp, OC, P, CK, SX);
        float *o = out + (size_t)n * OC * P;
        for (int p = 0; p < P; p++)
            tSX[p] = cSX * SX[p];
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                lp_dequant_row(o + (size_t)oc * P + (size_t)oh * OW,
                               Cm + (size_t)oc * P + (size_t)oh * OW, tSX + (size_t)oh * OW, cS,
                               bases + ((size_t)oc * nh + hcls[oh]) * OW, (size_t)OW);
    }
}

/* The bf16 grids of one chunk: samples [n0, n0+cnt) of the codes xq
 * (N, C, H, W) and of dout (N, OC, H, W), each plane (Hp, Wp) zero-bordered
 * with the image at (pad, pad), channel rows of cs = cnt*Hp*Wp values.
 * Overwrites gx (C, cs) and gg (OC, cs). */
static void s_bf16_grids(uint16_t *gx, uint16_t *gg, const uint8_t *xq, const float *dout,
                         const nn_conv_dims *d, int n0, int cnt)
{
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, pad = d->pad, Wp = W + 2 * pad;
    const size_t plane = (size_t)(H + 2 * pad) * Wp, cs = (size_t)cnt * plane, P = (size_t)H * W;
    const int simd = lp_bf16_supported(); /* resolved once, not per row */
    void (*codes_row)(uint16_t *, const uint8_t *, size_t) =
        simd ? lp_bf16_codes_row_avx512bf16 : lp_bf16_codes_row_ref;
    void (*f32_row)(uint16_t *, const float *, size_t) =
        simd ? lp_bf16_row_avx512bf16 : lp_bf16_row_ref;
    memset(gx, 0, (size_t)C * cs * 2);
    memset(gg, 0, (size_t)OC * cs * 2);
    for (int j = 0; j < cnt; j++) {
        const size_t at = (size_t)j * plane + (size_t)pad * Wp + pad;
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                codes_row(gx + (size_t)c * cs + at + (size_t)h * Wp,
                                  xq + ((size_t)(n0 + j) * C + c) * P + (size_t)h * W, (size_t)W);
        for (int oc = 0; oc < OC; oc++)
            for (int h = 0; h < H; h++)
                f32_row(gg + (size_t)oc * cs + at + (size_t)h * Wp,
                            dout + ((size_t)(n0 + j) * OC + oc) * P + (size_t)h * W, (size_t)W);
    }
}

/* The bf16 rows of one lowered chunk: the im2col of the codes of samples
 * [n0, n0+cnt), col (C*T, cs) with padded taps 0, cs = cnt*OH*OW, and gg
 * (OC, cs) the dout of the same pixels.  Overwrites both. */
static void s_bf16_lowered(uint16_t *col, uint16_t *gg, const uint8_t *xq, const float *dout,
                           const nn_conv_dims *d, int n0, int cnt)
{
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, S = d->stride, pad = d->pad;
    const size_t P = (size_t)OH * OW, cs = (size_t)cnt * P;
    uint16_t tab[256]; /* bf16 of each code, exact */
    for (int q = 0; q < 256; q++)
        tab[q] = lp_bf16_from_f32((float)q);
    void (*f32_row)(uint16_t *, const float *, size_t) =
        lp_bf16_supported() ? lp_bf16_row_avx512bf16 : lp_bf16_row_ref;
    for (int j = 0; j < cnt; j++) {
        for (int c = 0; c < C; c++) {
            const uint8_t *x = xq + ((size_t)(n0 + j) * C + c) * H * W;
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    uint16_t *dst = col + ((size_t)(c * KH + kh) * KW + kw) * cs + (size_t)j * P;
                    for (int oh = 0; oh < OH; oh++) {
                        const int ih = oh * S - pad + kh;
                        for (int ow = 0; ow < OW; ow++) {
                            const int iw = ow * S - pad + kw;
                            dst[(size_t)oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W
                                                            ? tab[x[(size_t)ih * W + iw]]
                                                            : 0;
                        }
                    }
                }
        }
        for (int oc = 0; oc < OC; oc++)
            f32_row(gg + (size_t)oc * cs + (size_t)j * P, dout + ((size_t)(n0 + j) * OC + oc) * P,
                    P);
    }
}

/* dw (OC, C, KH, KW) += the conv weight gradient in bf16 (lp_bf16.h): with
 * x = sx*q + mx inside the image,
 *   dw[oc][c][t] += sx * D[oc][c][t] + mx * E[oc][t],
 *   D = sum_j bf16(g[oc][j]) q[c][tap t of j],  E = sum_j bf16(g[oc][j]) [tap t inside],
 * E read from rows of ones over the image (zero in the padding).  Stride-1
 * same convs read shifted rows of zero-bordered grids (one ones grid);
 * others an im2col of the codes (one ones row per tap).  Only dout is
 * rounded (the codes are exact in bf16); sums in FP32.  Scratch:
 * s_wgrad_bf16_bytes(d). */
static void s_wgrad_bf16(float *dw, const float *dout, const lp_qsaved *sv, const nn_conv_dims *d,
                         void *scratch)
{
    const int N = d->N, C = d->C, OC = d->OC, H = d->H, W = d->W, KW = d->KW, pad = d->pad;
    const int T = d->KH * KW, nb = s_wgrad_bf16_nb(d), shift = s_shift_geom(d);
    const int Wp = W + 2 * pad, nx = shift ? C : C * T, n1 = shift ? 1 : T;
    const size_t per = s_wgrad_bf16_cols(d), jlo = shift ? (size_t)pad * Wp + pad : 0;
    unsigned char *sp = (unsigned char *)scratch;
    uint16_t *gx = s_take(&sp, ((size_t)nx + n1 + OC) * nb * per * 2);
    float *D = s_take(&sp, (size_t)OC * (C + 1) * T * 4), *E = D + (size_t)OC * C * T;
    static const int zero = 0;
    int toff[LP_SHIFT_TMAX];
    for (int t = 0; shift && t < T; t++)
        toff[t] = (t / KW - pad) * Wp + (t % KW - pad);
    memset(D, 0, (size_t)OC * (C + 1) * T * 4);
    for (int n0 = 0; n0 < N; n0 += nb) {
        const int cnt = N - n0 < nb ? N - n0 : nb;
        const size_t cs = (size_t)cnt * per, n = cs - 2 * jlo;
        uint16_t *ones = gx + (size_t)nx * cs, *gg = ones + (size_t)n1 * cs;
        memset(ones, 0, (size_t)n1 * cs * 2);
        for (int j = 0; j < cnt; j++) /* 1.0 where the image (or the tap) is */
            for (int t = 0; t < n1; t++)
                for (int oh = 0; oh < (shift ? H : d->OH); oh++)
                    for (int ow = 0; ow < (shift ? W : d->OW); ow++) {
                        const int ih = oh * d->stride - pad + t / KW;
                        const int iw = ow * d->stride - pad + t % KW;
                        if (shift)
                            ones[(size_t)j * per + (size_t)(pad + oh) * Wp + pad + ow] = 0x3F80;
                        else if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                            ones[(size_t)t * cs + (size_t)j * per + (size_t)oh * d->OW + ow] =
                                0x3F80;
                    }
        if (shift) {
            s_bf16_grids(gx, gg, sv->xq, dout, d, n0, cnt);
            lp_shiftdot_bf16(D, (size_t)C * T, gg + jlo, cs, OC, gx + jlo, cs, C, toff, T, n);
            lp_shiftdot_bf16(E, (size_t)T, gg + jlo, cs, OC, ones + jlo, cs, 1, toff, T, n);
        } else {
            s_bf16_lowered(gx, gg, sv->xq, dout, d, n0, cnt);
            lp_shiftdot_bf16(D, (size_t)C * T, gg, cs, OC, gx, cs, C * T, &zero, 1, n);
            lp_shiftdot_bf16(E, (size_t)T, gg, cs, OC, ones, cs, T, &zero, 1, n);
        }
    }
    const double sx = sv->xp.scale, mx = sv->xp.min;
    for (int oc = 0; oc < OC; oc++)
        for (int k = 0; k < C * T; k++)
            dw[(size_t)oc * C * T + k] +=
                (float)(sx * D[(size_t)oc * C * T + k] + mx * E[(size_t)oc * T + k % T]);
}

/* Zeroes the lanes of a grid row (vlen lanes, s_shift_grid's layout with
 * cnt samples) that no image row overwrites: the leading J0, the pad rows
 * after each sample, the rest after the last. */
static void s_f32_zero_pads(float *row, size_t vlen, int cnt, int H, int W, int pad)
{
    const size_t J0 = (size_t)pad + (size_t)pad * W, srow = (size_t)(H + pad) * W;
    const size_t end = J0 + (size_t)cnt * srow;
    memset(row, 0, J0 * sizeof(float));
    for (int j = 0; j < cnt; j++)
        memset(row + J0 + (size_t)j * srow + (size_t)H * W, 0, (size_t)pad * W * sizeof(float));
    memset(row + end, 0, (vlen - end) * sizeof(float));
}

/* The FP32 grids of one chunk (samples [n0, n0 + cnt)) in s_shift_grid's
 * layout, in floats: gx (C rows of V = 2 pad + 1 variants of vlen lanes)
 * the dequantized codes, variant v (column shift dx = v - pad) with the
 * columns zeroed that only a read wrapping into the neighbouring row
 * reaches; gg (OC rows of vlen) dout.  Image rows are W lanes (no pad
 * columns) and samples share their pad rows, so the shifted dot runs over
 * (H + pad) * W lanes a sample instead of (H + 2 pad) * (W + 2 pad): 72
 * instead of 100 on resnet20's 8x8 images.  Overwrites both. */
static void s_f32_grids(float *gx, float *gg, size_t vlen, const lp_qsaved *sv,
                        const float *dout, const nn_conv_dims *d, int n0, int cnt)
{
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, pad = d->pad, V = 2 * pad + 1;
    const size_t P = (size_t)H * W, J0 = (size_t)pad + (size_t)pad * W;
    const size_t srow = (size_t)(H + pad) * W;
    for (int r = 0; r < C * V; r++)
        s_f32_zero_pads(gx + (size_t)r * vlen, vlen, cnt, H, W, pad);
    for (int r = 0; r < OC; r++)
        s_f32_zero_pads(gg + (size_t)r * vlen, vlen, cnt, H, W, pad);
    for (int j = 0; j < cnt; j++) {
        for (int c = 0; c < C; c++) {
            float *g0 = gx + (size_t)c * V * vlen + J0 + (size_t)j * srow;
            float *gc = g0 + (size_t)pad * vlen; /* dx = 0: the plane as it is */
            lp_dequantize(gc, sv->xq + ((size_t)(n0 + j) * C + c) * P, P, sv->xp);
            for (int v = 0; v < V; v++) {
                const int dx = v - pad;
                if (!dx)
                    continue;
                float *gv = g0 + (size_t)v * vlen;
                memcpy(gv, gc, P * sizeof(float));
                const int z0 = dx < 0 ? W + dx : 0, z1 = dx < 0 ? W : dx;
                for (int h = 0; h < H; h++)
                    for (int w = z0 < 0 ? 0 : z0; w < (z1 > W ? W : z1); w++)
                        gv[(size_t)h * W + w] = 0.0f;
            }
        }
        for (int oc = 0; oc < OC; oc++)
            memcpy(gg + (size_t)oc * vlen + J0 + (size_t)j * srow,
                   dout + ((size_t)(n0 + j) * OC + oc) * P, P * sizeof(float));
    }
}

/* dw (OC, C, K, K) += the FP32 weight gradient of a stride-1 same conv:
 * nn's shifted dot (nn_shiftdot) on grids the saved codes are dequantized
 * straight into (no dequantized copy of the input), in the shift path's
 * layout (s_f32_grids).  Scratch: s_wgrad_f32_bytes(d). */
static void s_wgrad_f32(float *dw, const float *dout, const lp_qsaved *sv, const nn_conv_dims *d,
                        void *scratch)
{
    const int N = d->N, C = d->C, OC = d->OC, H = d->H, W = d->W, K = d->KH, pad = d->pad;
    const int T = K * K, V = 2 * pad + 1, nb = s_wgrad_bf16_nb(d);
    const size_t vlen = s_wgrad_f32_vlen(d), J0 = (size_t)pad + (size_t)pad * W;
    unsigned char *sp = (unsigned char *)scratch;
    float *gx = s_take(&sp, ((size_t)C * V + (size_t)OC) * vlen * 4);
    float *gg = gx + (size_t)C * V * vlen;
    float *Dt = s_take(&sp, (size_t)OC * C * T * 4);
    /* tap (kh, kw) reads variant kw, shifted by rows and columns; the taps
     * go variant by variant (u = kw*K + kh), so the rows nn's dot reads
     * together are one variant W lanes apart (a read stream the others
     * follow in L1), not three variants; Dt holds the sums in that order */
    int toff[LP_SHIFT_TMAX];
    for (int u = 0; u < T; u++)
        toff[u] = (int)((size_t)(u / K) * vlen) + (u % K - pad) * W + (u / K - pad);
    memset(Dt, 0, (size_t)OC * C * T * 4);
    for (int n0 = 0; n0 < N; n0 += nb) {
        const int cnt = N - n0 < nb ? N - n0 : nb;
        const size_t n = ((size_t)cnt * (H + pad) - pad) * W;
        s_f32_grids(gx, gg, vlen, sv, dout, d, n0, cnt);
        nn_shiftdot(Dt, (size_t)C * T, gg + J0, vlen, OC, gx + J0, (size_t)V * vlen, C, toff, T,
                    n);
    }
    for (size_t r = 0; r < (size_t)OC * C; r++)
        for (int u = 0; u < T; u++)
            dw[r * T + (size_t)(u % K) * K + u / K] += Dt[r * T + u];
}

/* db (OC) += sum of dout over samples and pixels. */
static void s_bias_grad(float *db, const float *dout, int N, int OC, int P)
{
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++) {
            const float *g = dout + ((size_t)n * OC + oc) * P;
            float t = 0;
            for (int p = 0; p < P; p++)
                t += g[p];
            db[oc] += t;
        }
}

void lp_conv2d_backward(float *din, float *dw, float *db, const float *dout,
                        const lp_qsaved *sv, const nn_conv_dims *d, uint64_t seed,
                        void *scratch)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = C * KH * KW, P = OH * OW, S = d->stride;
    const int pad = d->pad;
    const size_t xper = (size_t)C * H * W;
    unsigned char *sp = (unsigned char *)scratch;

    /* weight and bias gradients from the full-precision dout (bifurcation):
     * bf16 on the codes where the CPU has it (s_wgrad_bf16); else FP32,
     * straight from the codes on the shift geometry (s_wgrad_f32), through
     * nn's FP32 conv backward (no din) on the dequantized codes otherwise */
    if (dw && (s_wgrad_bf16_on(d) || s_shift_geom(d))) {
        if (s_wgrad_bf16_on(d))
            s_wgrad_bf16(dw, dout, sv, d, sp);
        else
            s_wgrad_f32(dw, dout, sv, d, sp);
        if (db)
            s_bias_grad(db, dout, N, OC, P);
    } else if (dw || db) {
        const int nw = s_wgrad_nb(d);
        nn_conv_dims dc = *d;
        dc.N = nw;
        unsigned char *wsp = sp;
        float *xf = s_take(&wsp, (size_t)nw * xper * sizeof(float));
        float *nscr = s_take(&wsp, nn_conv_scratch_floats(&dc) * sizeof(float));
        if (dw) {
            /* in chunks of nw samples: the dequantized chunk is still in
             * cache when the conv reads it, and the scratch stays small */
            for (int n0 = 0; n0 < N; n0 += nw) {
                dc.N = N - n0 < nw ? N - n0 : nw;
                lp_dequantize(xf, sv->xq + (size_t)n0 * xper, (size_t)dc.N * xper, sv->xp);
                nn_conv2d_backward(NULL, dw, db, dout + (size_t)n0 * OC * P, xf, NULL, &dc, nscr);
            }
        } else {
            s_bias_grad(db, dout, N, OC, P);
        }
    }
    if (!din)
        return;
    /* input gradient: int8 conv^T on the stochastically quantized dout */
    const size_t gn = (size_t)N * OC * P;
    uint8_t *gq = s_take(&sp, gn);
    lp_qparams gp = lp_tensor_qparams(dout, gn);
    lp_quantize_sr(gq, dout, gn, gp, seed, 0);
    if (s_use_shift(d)) {
        /* din = the same conv of the gradient codes with the kernel
         * flipped and the channels swapped: wf[c][oc][t] = wq[oc][c][T-1-t] */
        const int T = KH * KW;
        uint8_t *wf = s_take(&sp, (size_t)OC * CK);
        for (int oc = 0; oc < OC; oc++)
            for (int c = 0; c < C; c++)
                for (int t = 0; t < T; t++)
                    wf[((size_t)c * OC + oc) * T + t] = sv->wq[((size_t)oc * C + c) * T + T - 1 - t];
        s_shift_conv(din, gq, gp, wf, sv->wp, NULL, N, OC, C, H, W, KH, pad, sp);
        return;
    }
    int8_t *Ap = s_take(&sp, lp_gemm_pack_a_bytes(CK, OC));
    int32_t *SWc = s_take(&sp, (size_t)CK * 4);
    uint8_t *Bp = s_take(&sp, lp_gemm_pack_b_bytes(OC, P));
    int32_t *Cm = s_take(&sp, (size_t)CK * P * 4);
    int32_t *SG = s_take(&sp, (size_t)lp_gemm_np(P) * 4);
    double *tSG = s_take(&sp, (size_t)P * sizeof(double));
    int *rh = s_take(&sp, (size_t)(KH + KW) * 2 * sizeof(int)), *rw = rh + 2 * KH;
    lp_gemm_pack_a(Ap, SWc, sv->wq, 1, CK, CK, OC); /* A(ck, oc) = wq[oc][ck] */
    const double sw = sv->wp.scale, mw = sv->wp.min, sg = gp.scale, mg = gp.min;
    const double cS = sw * sg, cSG = mw * sg;
    /* rows / columns of the output a tap kh / kw reads inside the image */
    for (int k = 0; k < KH + KW; k++) {
        int kk = k < KH ? k : k - KH, O = k < KH ? OH : OW, In = k < KH ? H : W;
        int lo = 0, hi = 0;
        while (lo < O && lo * S - pad + kk < 0)
            lo++;
        hi = lo;
        while (hi < O && hi * S - pad + kk < In)
            hi++;
        rh[2 * k] = lo;
        rh[2 * k + 1] = hi;
    }
    for (int n = 0; n < N; n++) {
        lp_gemm_pack_b(Bp, gq + (size_t)n * OC * P, P, 1, OC, P);
        lp_gemm_u8u8(Cm, P, Ap, Bp, CK, P, OC, SG);
        for (int p = 0; p < P; p++)
            tSG[p] = cSG * SG[p];
        float *dx = din + (size_t)n * xper;
        memset(dx, 0, xper * sizeof(float));
        for (int c = 0; c < C; c++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    int ck = (c * KH + kh) * KW + kw;
                    double base = sw * mg * SWc[ck] + (double)OC * mw * mg;
                    const int32_t *crow = Cm + (size_t)ck * P;
                    /* output columns whose tap kw falls inside the image */
                    int ow0 = rw[2 * kw], ow1 = rw[2 * kw + 1];
                    if (ow1 <= ow0)
                        continue;
                    for (int oh = rh[2 * kh]; oh < rh[2 * kh + 1]; oh++) {
                        int ih = oh * S - pad + kh;
                        float *xrow = dx + ((size_t)c * H + ih) * W + (ow0 * S - pad + kw);
                        const int32_t *cr = crow + (size_t)oh * OW;
                        const double *tg = tSG + (size_t)oh * OW;
                        if (S == 1)
                            for (int ow = ow0; ow < ow1; ow++)
                                xrow[ow - ow0] += (float)(cS * cr[ow] + tg[ow] + base);
                        else
                            for (int ow = ow0; ow < ow1; ow++)
                                xrow[(ow - ow0) * S] += (float)(cS * cr[ow] + tg[ow] + base);
                    }
                }
    }
}

/* ---- conv2d, fake-quant twin -------------------------------------------- */

size_t lp_conv2d_fq_scratch_floats(const nn_conv_dims *d)
{
    return (size_t)d->N * d->C * d->H * d->W + (size_t)d->OC * d->C * d->KH * d->KW + d->OC +
           (size_t)d->N * d->OC * d->OH * d->OW;
}

void lp_conv2d_forward_fq(float *out, float *run_range, const float *in, const float *w,
                          const float *b, const nn_conv_dims *d, lp_mode mode, float *scratch)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = C * KH * KW;
    const size_t xper = (size_t)C * H * W;
    float *xf = scratch, *wf = xf + (size_t)N * xper, *bf = wf + (size_t)OC * CK;
    lp_qparams xp = lp_act_qparams(run_range, in, N, xper, mode.train);
    lp_fake_quant(xf, in, (size_t)N * xper, xp, mode.train, mode.seed);
    s_param_fq(wf, w, (size_t)OC * CK);
    if (b)
        s_param_fq(bf, b, (size_t)OC);
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    float t = 0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * d->stride - d->pad + kh;
                                int iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                t += xf[(size_t)n * xper + ((size_t)c * H + ih) * W + iw] *
                                     wf[(size_t)oc * CK + (c * KH + kh) * KW + kw];
                            }
                    out[(((size_t)n * OC + oc) * OH + oh) * OW + ow] = t + (b ? bf[oc] : 0.0f);
                }
}

void lp_conv2d_backward_fq(float *din, float *dw, float *db, const float *dout, const float *in,
                           lp_qparams xp, const float *w, const nn_conv_dims *d, lp_mode mode,
                           uint64_t seed, float *scratch)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = C * KH * KW, P = OH * OW;
    const size_t xper = (size_t)C * H * W;
    float *xf = scratch, *wf = xf + (size_t)N * xper, *gf = wf + (size_t)OC * CK + OC;
    lp_fake_quant(xf, in, (size_t)N * xper, xp, mode.train, mode.seed);
    s_param_fq(wf, w, (size_t)OC * CK);
    const size_t gn = (size_t)N * OC * P;
    lp_fake_quant(gf, dout, gn, lp_tensor_qparams(dout, gn), 1, seed);
    if (din)
        memset(din, 0, (size_t)N * xper * sizeof(float));
    const int wb16 = s_wgrad_bf16_on(d); /* the weight gradient sees bf16(dout) */
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    size_t o = (((size_t)n * OC + oc) * OH + oh) * OW + ow;
                    const float gw = wb16 ? lp_bf16_to_f32(lp_bf16_from_f32(dout[o])) : dout[o];
                    if (db)
                        db[oc] += dout[o];
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * d->stride - d->pad + kh;
                                int iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                size_t xi = (size_t)n * xper + ((size_t)c * H + ih) * W + iw;
                                size_t wi = (size_t)oc * CK + (c * KH + kh) * KW + kw;
                                if (dw)
                                    dw[wi] += gw * xf[xi];
                                if (din)
                                    din[xi] += gf[o] * wf[wi];
                            }
                }
}

/* ---- linear ------------------------------------------------------------ */

size_t lp_linear_saved_bytes(int N, int F, int OF)
{
    return (size_t)N * F + (size_t)OF * F;
}

/* packed weights: (OF, F) in forward, (F, OF) in backward */
static size_t s_lin_apack(int F, int OF)
{
    size_t a = lp_gemm_pack_a_bytes(OF, F), b = lp_gemm_pack_a_bytes(F, OF);
    return a > b ? a : b;
}

size_t lp_linear_scratch_bytes(int N, int F, int OF)
{
    const int mx = F > OF ? F : OF;
    size_t s = 0;
    s += ALIGN64(s_lin_apack(F, OF));
    s += ALIGN64(lp_gemm_pack_b_bytes(mx, N));
    s += ALIGN64((size_t)mx * N * 4);
    s += ALIGN64((size_t)mx * 4);
    s += ALIGN64((size_t)lp_gemm_np(N) * 4);
    s += ALIGN64((size_t)N * OF);
    s += ALIGN64((size_t)N * F * sizeof(float));
    s += ALIGN64((size_t)OF * 5);
    return s + 64;
}

void lp_linear_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, int N, int F, int OF, lp_mode mode,
                       void *scratch)
{
    const int mx_ = F > OF ? F : OF;
    unsigned char *sp = (unsigned char *)scratch;
    int8_t *Ap = s_take(&sp, s_lin_apack(F, OF));
    uint8_t *Bp = s_take(&sp, lp_gemm_pack_b_bytes(mx_, N));
    int32_t *Cm = s_take(&sp, (size_t)mx_ * N * 4);
    int32_t *SW = s_take(&sp, (size_t)mx_ * 4);
    int32_t *SX = s_take(&sp, (size_t)lp_gemm_np(N) * 4);
    (void)s_take(&sp, (size_t)N * OF);
    (void)s_take(&sp, (size_t)N * F * sizeof(float));
    unsigned char *bpart = s_take(&sp, (size_t)OF * 5);
    float *bq = (float *)(void *)bpart;
    uint8_t *bcodes = bpart + (size_t)OF * 4;

    sv->xp = lp_act_qparams(run_range, in, N, (size_t)F, mode.train);
    s_quant_act(sv->xq, in, (size_t)N * F, sv->xp, mode);
    sv->wp = lp_tensor_qparams(w, (size_t)OF * F);
    lp_quantize(sv->wq, w, (size_t)OF * F, sv->wp);
    if (b) {
        lp_qparams bp = lp_tensor_qparams(b, (size_t)OF);
        lp_quantize(bcodes, b, (size_t)OF, bp);
        lp_dequantize(bq, bcodes, (size_t)OF, bp);
    } else {
        memset(bq, 0, (size_t)OF * sizeof(float));
    }
    /* C (OF, N) = wq (OF, F) * xq^T (F, N) */
    lp_gemm_pack_a(Ap, SW, sv->wq, F, 1, OF, F);
    lp_gemm_pack_b(Bp, sv->xq, 1, F, F, N);
    lp_gemm_u8u8(Cm, N, Ap, Bp, OF, N, F, SX);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++)
            out[(size_t)n * OF + o] =
                lp_gemm_dequant(Cm[(size_t)o * N + n], SW[o], SX[n], F, sv->wp, sv->xp) + bq[o];
}

void lp_linear_backward(float *din, float *dw, float *db, const float *dout, const lp_qsaved *sv,
                        int N, int F, int OF, uint64_t seed, void *scratch)
{
    const int mx_ = F > OF ? F : OF;
    unsigned char *sp = (unsigned char *)scratch;
    int8_t *Ap = s_take(&sp, s_lin_apack(F, OF));
    uint8_t *Bp = s_take(&sp, lp_gemm_pack_b_bytes(mx_, N));
    int32_t *Cm = s_take(&sp, (size_t)mx_ * N * 4);
    int32_t *SWc = s_take(&sp, (size_t)mx_ * 4);
    int32_t *SG = s_take(&sp, (size_t)lp_gemm_np(N) * 4);
    uint8_t *gq = s_take(&sp, (size_t)N * OF);
    float *xf = s_take(&sp, (size_t)N * F * sizeof(float));

    if (db)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OF; o++)
                db[o] += dout[(size_t)n * OF + o];
    if (dw) {
        lp_dequantize(xf, sv->xq, (size_t)N * F, sv->xp);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OF, F, N, 1.0f, dout, OF, xf, F,
                    1.0f, dw, F);
    }
    if (!din)
        return;
    lp_qparams gp = lp_tensor_qparams(dout, (size_t)N * OF);
    lp_quantize_sr(gq, dout, (size_t)N * OF, gp, seed, 0);
    /* C (F, N) = wq^T (F, OF) * gq^T (OF, N) */
    lp_gemm_pack_a(Ap, SWc, sv->wq, 1, F, F, OF);
    lp_gemm_pack_b(Bp, gq, 1, OF, OF, N);
    lp_gemm_u8u8(Cm, N, Ap, Bp, F, N, OF, SG);
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++)
            din[(size_t)n * F + f] =
                lp_gemm_dequant(Cm[(size_t)f * N + n], SWc[f], SG[n], OF, sv->wp, gp);
}

size_t lp_linear_fq_scratch_floats(int N, int F, int OF)
{
    return (size_t)N * F + (size_t)OF * F + OF + (size_t)N * OF;
}

void lp_linear_forward_fq(float *out, float *run_range, const float *in, const float *w,
                          const float *b, int N, int F, int OF, lp_mode mode, float *scratch)
{
    float *xf = scratch, *wf = xf + (size_t)N * F, *bf = wf + (size_t)OF * F;
    lp_qparams xp = lp_act_qparams(run_range, in, N, (size_t)F, mode.train);
    lp_fake_quant(xf, in, (size_t)N * F, xp, mode.train, mode.seed);
    s_param_fq(wf, w, (size_t)OF * F);
    if (b)
        s_param_fq(bf, b, (size_t)OF);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++) {
            float t = 0;
            for (int f = 0; f < F; f++)
                t += xf[(size_t)n * F + f] * wf[(size_t)o * F + f];
            out[(size_t)n * OF + o] = t + (b ? bf[o] : 0.0f);
        }
}

void lp_linear_backward_fq(float *din, float *dw, float *db, const float *dout, const float *in,
                           lp_qparams xp, const float *w, int N, int F, int OF, lp_mode mode,
                           uint64_t seed, float *scratch)
{
    float *xf = scratch, *wf = xf + (size_t)N * F, *gf = wf + (size_t)OF * F + OF;
    lp_fake_quant(xf, in, (size_t)N * F, xp, mode.train, mode.seed);
    s_param_fq(wf, w, (size_t)OF * F);
    lp_fake_quant(gf, dout, (size_t)N * OF, lp_tensor_qparams(dout, (size_t)N * OF), 1, seed);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OF; o++) {
            float g = dout[(size_t)n * OF + o];
            if (db)
                db[o] += g;
            if (dw)
                for (int f = 0; f < F; f++)
                    dw[(size_t)o * F + f] += g * xf[(size_t)n * F + f];
        }
        if (din)
            for (int f = 0; f < F; f++) {
                float t = 0;
                for (int o = 0; o < OF; o++)
                    t += gf[(size_t)n * OF + o] * wf[(size_t)o * F + f];
                din[(size_t)n * F + f] = t;
            }
    }
}

/* ---- Range EvoNorm ------------------------------------------------------ */

void lp_ren_chunk(int T, int j, int *start, int *len)
{
    assert(T >= 16 && j >= 0 && j < 16);
    int L = T / 16, r = T % 16;
    *start = j * L + (j < r ? j : r);
    *len = L + (j < r ? 1 : 0);
}

/* c(L) = 0.5*0.35*(1 + sqrt(pi*ln 4)) / sqrt(2 ln L), L = T/16 (mean chunk
 * length when T is not a multiple of 16), in double as the reference. */
static float s_range_c(int T)
{
    double L = (double)T / 16.0;
    return (float)(0.5 * 0.35 * (1.0 + sqrt(M_PI * log(4.0))) / sqrt(2.0 * log(L)));
}

/* The floor of a group's range R when its values are quantized with step
 * qstep: sigma = R*c (the range's estimate of the standard deviation) is
 * never taken below the standard deviation of the quantization noise,
 * qstep/sqrt(12).  Below that the range is not resolved: a group whose
 * values all fell on one code (clamped at 0 or 255 by the batch range, or
 * a near-constant group) had R = 0, s = 1/1e-5 = 1e5, an output 1e5 times
 * its input and d s/d R = -c s^2 ~ 1e9 (the int8 blow-up).  With the floor
 * s <= sqrt(12)/qstep and d s/d R = 0 there (the max's flat side).  qstep 0
 * (float input): no floor.  Normal groups span many codes, R*c >> qstep,
 * so they are untouched (bit-identical). */
static float s_range_floor(float qstep, float c)
{
    return qstep > 0.0f ? qstep / (c * 3.46410162f) : 0.0f;
}

size_t lp_ren_saved_bytes(int N, int C, int HW, int G)
{
    return (size_t)N * C * HW + 2 * (size_t)N * G * sizeof(float);
}

size_t lp_ren_scratch_floats(int N, int C, int HW)
{
    size_t n = (size_t)N * C * HW;
    return 2 * (size_t)C * HW + (n + 3) / 4 + 3 * (size_t)C;
}

/* ---- Range EvoNorm row kernels (one channel row of n values) -------------- */

void lp_ren_row_fwd_ref(float *o, const float *x, size_t n, float v, float sc, float gamma,
                        float beta)
{
    for (size_t i = 0; i < n; i++) {
        float t = x[i] * v / 6.0f + 0.5f;
        t = t > 0.0f ? (t < 1.0f ? t : 1.0f) : 0.0f;
        float nrm = x[i] * t;
        o[i] = nrm * sc * gamma + beta;
    }
}

void lp_ren_row_bwd_ref(float *dx, double sums[3], const float *x, const float *g, size_t n,
                        float v, float sc, float gamma)
{
    for (size_t i = 0; i < n; i++) {
        /* forward: t = x*v/6 + 1/2; h = clamp(t,0,1); nrm = x*h;
         *          out = nrm*sq*gamma + beta */
        float xi = x[i], gi = g[i];
        float t = xi * v / 6.0f + 0.5f;
        int inside = t >= 0.0f && t <= 1.0f; /* torch clamp passes ends */
        float h = t > 0.0f ? (t < 1.0f ? t : 1.0f) : 0.0f;
        float nrm = xi * h;
        sums[0] += gi;
        sums[1] += (double)gi * nrm;
        float dn = gi * sc * gamma;
        /* dnrm/dx = h + x*h'*v, dnrm/dv = x*h'*x, h' = 1/6 inside */
        if (inside)
            sums[2] += (double)dn * xi * xi;
        if (dx)
            dx[i] = dn * (h + (inside ? xi * v / 6.0f : 0.0f));
    }
}

static void s_ren_row_fwd(float *o, const float *x, size_t n, float v, float sc, float gamma,
                          float beta)
{
    if (nn_cpu_level() >= NN_CPU_AVX2)
        lp_ren_row_fwd_avx2(o, x, n, v, sc, gamma, beta);
    else
        lp_ren_row_fwd_ref(o, x, n, v, sc, gamma, beta);
}

static void s_ren_row_bwd(float *dx, double sums[3], const float *x, const float *g, size_t n,
                          float v, float sc, float gamma)
{
    if (nn_cpu_level() >= NN_CPU_AVX2)
        lp_ren_row_bwd_avx2(dx, sums, x, g, n, v, sc, gamma);
    else
        lp_ren_row_bwd_ref(dx, sums, x, g, n, v, sc, gamma);
}

size_t lp_find_eq_ref(const float *x, size_t n, float v)
{
    size_t i = 0;
    while (i < n && x[i] != v)
        i++;
    return i;
}

static size_t s_find_eq(const float *x, size_t n, float v)
{
    return nn_cpu_level() >= NN_CPU_AVX2 ? lp_find_eq_avx2(x, n, v) : lp_find_eq_ref(x, n, v);
}

void lp_minmax_u8_ref(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n)
{
    assert(n > 0);
    uint8_t a = q[0], b = q[0];
    for (size_t i = 1; i < n; i++) {
        a = q[i] < a ? q[i] : a;
        b = q[i] > b ? q[i] : b;
    }
    *mn = a;
    *mx = b;
}

size_t lp_find_u8_ref(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi)
{
    size_t i = 0;
    while (i < n && (q[i] < lo || q[i] > hi))
        i++;
    return i;
}

static void s_minmax_u8(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n)
{
    if (nn_cpu_level() >= NN_CPU_AVX2)
        lp_minmax_u8_avx2(mn, mx, q, n);
    else
        lp_minmax_u8_ref(mn, mx, q, n);
}

static size_t s_find_u8(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi)
{
    return nn_cpu_level() >= NN_CPU_AVX2 ? lp_find_u8_avx2(q, n, lo, hi)
                                         : lp_find_u8_ref(q, n, lo, hi);
}

/* A tensor the Range EvoNorm core reads: floats, or uint8 codes with their
 * qparams.  Codes are dequantized one group at a time into an L1/L2 buffer
 * (the floats lp_dequantize gives, so both forms give the same results):
 * the integer op never writes a whole dequantized tensor. */
typedef struct {
    const float *f;   /* the floats, or NULL */
    const uint8_t *q; /* else the codes */
    lp_qparams p;
} s_vals;

/* Values [off, off + n) of v as floats: into v.f, or buf (n) filled. */
static const float *s_vals_at(s_vals v, size_t off, size_t n, float *buf)
{
    if (v.f)
        return v.f + off;
    lp_dequantize(buf, v.q + off, n, v.p);
    return buf;
}

/* lp_ren_core_forward on x in either form; buf: T floats when x is codes;
 * qstep: the quantization step of x (s_range_floor; 0: none). */
static void s_ren_forward(float *out, float *s, float *sq, s_vals x, const float *gamma,
                          const float *beta, const float *v, int N, int C, int HW, int G,
                          int quant_s, float qstep, float *buf)
{
    assert(G > 0 && C % G == 0);
    const int cg = C / G, T = cg * HW;
    assert(T >= 32);
    const float c = s_range_c(T), rmin = s_range_floor(qstep, c);
    float lut[256];
    if (!x.f)
        lp_dequantize_lut(lut, x.p);
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const size_t off = ((size_t)n * C + (size_t)g * cg) * HW;
            float smax = 0, smin = 0;
            for (int j = 0; j < 16; j++) {
                int st, len;
                lp_ren_chunk(T, j, &st, &len);
                float mn, mx;
                if (x.f) {
                    lp_minmax(&mn, &mx, x.f + off + st, (size_t)len);
                } else { /* the values of the extreme codes (monotone) */
                    uint8_t a, b;
                    s_minmax_u8(&a, &b, x.q + off + st, (size_t)len);
                    mn = lut[a];
                    mx = lut[b];
                }
                smax += mx;
                smin += mn;
            }
            float R = smax / 16.0f - smin / 16.0f;
            R = R < rmin ? rmin : R;
            s[n * G + g] = 1.0f / (R * c + 1e-5f);
        }
    if (quant_s)
        lp_fake_quant(sq, s, (size_t)N * G, lp_tensor_qparams(s, (size_t)N * G), 0, 0);
    else
        memcpy(sq, s, (size_t)N * G * sizeof(float));
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const size_t off = ((size_t)n * C + (size_t)g * cg) * HW;
            const float *xg = s_vals_at(x, off, (size_t)T, buf);
            for (int k = 0; k < cg; k++) {
                const int ch = g * cg + k;
                s_ren_row_fwd(out + off + (size_t)k * HW, xg + (size_t)k * HW, (size_t)HW, v[ch],
                              sq[n * G + g], gamma[ch], beta[ch]);
            }
        }
}

/* The first arg-max and arg-min of the chunk [st, st + len) of the group
 * at off: xg (the group's values) when x is floats; from the codes when x
 * is codes, with lut their values: the extremes are the values of the
 * extreme codes a, b, and a value equals lut[b] exactly for the codes
 * from the first one with that value up to b (lut is non-decreasing), so
 * the first such code is the first index holding the maximum (likewise
 * below for the minimum), as the scan of the values finds it. */
static void s_chunk_argext(size_t *amax, size_t *amin, s_vals x, const float *xg, size_t off,
                           size_t st, size_t len, const float lut[256])
{
    if (x.f) {
        /* the chunk's max and min (SIMD), then the first index holding each
         * (same as a running strict comparison; never NaN here) */
        float cmn, cmx;
        lp_minmax(&cmn, &cmx, xg + st, len);
        *amax = st + s_find_eq(xg + st, len, cmx);
        *amin = st + s_find_eq(xg + st, len, cmn);
        return;
    }
    const uint8_t *q = x.q + off + st;
    uint8_t a, b;
    s_minmax_u8(&a, &b, q, len);
    int lo = b, hi = a;
    while (lo > 0 && lut[lo - 1] == lut[b])
        lo--;
    while (hi < 255 && lut[hi + 1] == lut[a])
        hi++;
    *amax = st + s_find_u8(q, len, (uint8_t)lo, 255);
    *amin = st + s_find_u8(q, len, 0, (uint8_t)hi);
}

/* The range term of the input gradient of one group: R's gradient dR goes
 * to the first arg-max (+dR/16) and arg-min (-dR/16) of each chunk.  R is
 * recomputed from the extremes, as the forward summed them; below the
 * floor rmin (s_range_floor) R was replaced by rmin and gets no gradient. */
static void s_ren_range_grad(float *dg, float dR, float rmin, s_vals x, const float *xg,
                             size_t off, int T, const float lut[256])
{
    size_t amax[16], amin[16];
    float smax = 0, smin = 0;
    for (int j = 0; j < 16; j++) {
        int st, len;
        lp_ren_chunk(T, j, &st, &len);
        s_chunk_argext(&amax[j], &amin[j], x, xg, off, (size_t)st, (size_t)len, lut);
        smax += xg[amax[j]];
        smin += xg[amin[j]];
    }
    if (smax / 16.0f - smin / 16.0f < rmin)
        return;
    for (int j = 0; j < 16; j++) {
        dg[amax[j]] += dR / 16.0f;
        dg[amin[j]] -= dR / 16.0f;
    }
}

/* lp_ren_core_backward on g and x in either form; buf: 2*T floats when
 * they are codes; qstep as s_ren_forward's. */
static void s_ren_backward(float *dx, float *dgamma, float *dbeta, float *dv, s_vals gv,
                           s_vals x, const float *s, const float *sq, const float *gamma,
                           const float *v, int N, int C, int HW, int G, float qstep, float *buf)
{
    const int cg = C / G, T = cg * HW;
    const float c = s_range_c(T), rmin = s_range_floor(qstep, c);
    float lut[256];
    if (!x.f)
        lp_dequantize_lut(lut, x.p);
    for (int n = 0; n < N; n++)
        for (int gr = 0; gr < G; gr++) {
            const size_t off = ((size_t)n * C + (size_t)gr * cg) * HW;
            const float *xg = s_vals_at(x, off, (size_t)T, buf);
            const float *gg = s_vals_at(gv, off, (size_t)T, buf + T);
            float *dg = dx ? dx + off : NULL;
            const float sc = sq[n * G + gr];
            double dsq = 0;
            for (int k = 0; k < cg; k++) {
                const int ch = gr * cg + k;
                const size_t ro = (size_t)k * HW;
                /* sums: dout, dout*nrm, dnrm*x*x over the values where h' != 0 */
                double sums[3] = {0, 0, 0};
                s_ren_row_bwd(dg ? dg + ro : NULL, sums, xg + ro, gg + ro, (size_t)HW, v[ch], sc,
                              gamma[ch]);
                dgamma[ch] += (float)(sums[1] * sc);
                dbeta[ch] += (float)sums[0];
                dv[ch] += (float)(sums[2] / 6.0);
                dsq += sums[1] * gamma[ch];
            }
            if (!dx)
                continue;
            /* s = 1/(R c + eps): ds/dR = -c s^2; R = mean(max) - mean(min) */
            const float sv = s[n * G + gr];
            const float dR = (float)(dsq * -(double)c * sv * sv);
            s_ren_range_grad(dg, dR, rmin, x, xg, off, T, lut);
        }
}

void lp_ren_core_forward(float *out, float *s, float *sq, const float *x, const float *gamma,
                         const float *beta, const float *v, int N, int C, int HW, int G,
                         int quant_s)
{
    lp_ren_core_forward_q(out, s, sq, x, gamma, beta, v, N, C, HW, G, quant_s, 0.0f);
}

void lp_ren_core_forward_q(float *out, float *s, float *sq, const float *x, const float *gamma,
                           const float *beta, const float *v, int N, int C, int HW, int G,
                           int quant_s, float qstep)
{
    s_vals xv = {x, NULL, {0, 0}};
    s_ren_forward(out, s, sq, xv, gamma, beta, v, N, C, HW, G, quant_s, qstep, NULL);
}

void lp_ren_core_backward(float *dx, float *dgamma, float *dbeta, float *dv, const float *g,
                          const float *x, const float *s, const float *sq, const float *gamma,
                          const float *v, int N, int C, int HW, int G)
{
    lp_ren_core_backward_q(dx, dgamma, dbeta, dv, g, x, s, sq, gamma, v, N, C, HW, G, 0.0f);
}

void lp_ren_core_backward_q(float *dx, float *dgamma, float *dbeta, float *dv, const float *g,
                            const float *x, const float *s, const float *sq, const float *gamma,
                            const float *v, int N, int C, int HW, int G, float qstep)
{
    s_vals gv = {g, NULL, {0, 0}}, xv = {x, NULL, {0, 0}};
    s_ren_backward(dx, dgamma, dbeta, dv, gv, xv, s, sq, gamma, v, N, C, HW, G, qstep, NULL);
}

/* scratch: [2*C*HW floats: group buffers | N*C*HW codes | gamma, beta, v (3C)] */
void lp_range_evonorm_forward(float *out, lp_ren_saved *sv, float *run_range, const float *in,
                              const float *gamma, const float *beta, const float *v, int N,
                              int C, int HW, int G, lp_mode mode, float *scratch)
{
    const size_t n = (size_t)N * C * HW, per = (size_t)C * HW;
    float *buf = scratch, *gq = buf + 2 * per + (n + 3) / 4, *bq = gq + C, *vq = bq + C;
    sv->xp = lp_act_qparams(run_range, in, N, per, mode.train);
    s_quant_act(sv->xq, in, n, sv->xp, mode);
    s_param_fq(gq, gamma, (size_t)C);
    s_param_fq(bq, beta, (size_t)C);
    s_param_fq(vq, v, (size_t)C);
    s_vals xv = {NULL, sv->xq, sv->xp};
    s_ren_forward(out, sv->s, sv->sq, xv, gq, bq, vq, N, C, HW, G, 1, sv->xp.scale, buf);
}

void lp_range_evonorm_backward(float *din, float *dgamma, float *dbeta, float *dv,
                               const float *dout, const lp_ren_saved *sv, const float *gamma,
                               const float *v, int N, int C, int HW, int G, uint64_t seed,
                               float *scratch)
{
    const size_t n = (size_t)N * C * HW, per = (size_t)C * HW;
    float *buf = scratch, *gq = buf + 2 * per + (n + 3) / 4, *vq = gq + 2 * (size_t)C;
    uint8_t *codes = (uint8_t *)(void *)(buf + 2 * per);
    lp_qparams gp = lp_tensor_qparams(dout, n);
    lp_quantize_sr(codes, dout, n, gp, seed, 0);
    s_param_fq(gq, gamma, (size_t)C);
    s_param_fq(vq, v, (size_t)C);
    s_vals gv = {NULL, codes, gp}, xv = {NULL, sv->xq, sv->xp};
    s_ren_backward(din, dgamma, dbeta, dv, gv, xv, sv->s, sv->sq, gq, vq, N, C, HW, G,
                   sv->xp.scale, buf);
}

/* ---- quantized residual add -------------------------------------------- */

void lp_add_forward(float *out, float *run_a, float *run_b, const float *a, const float *b, int N,
                    size_t per, lp_mode mode, uint8_t *codes)
{
    const size_t n = (size_t)N * per;
    lp_qparams pa = lp_act_qparams(run_a, a, N, per, mode.train);
    lp_qparams pb = lp_act_qparams(run_b, b, N, per, mode.train);
    lp_mode mb = mode;
    mb.seed = mode.seed ^ 0x9e3779b97f4a7c15ULL; /* the second input's own noise */
    if (mode.train) { /* quantize and dequantize in one pass, no codes */
        lp_fake_quant_sr(out, NULL, a, n, pa, mode.seed, 0);
        lp_fake_quant_sr_add(out, b, n, pb, mb.seed, 0);
        return;
    }
    s_quant_act(codes, a, n, pa, mode);
    lp_dequantize(out, codes, n, pa);
    s_quant_act(codes, b, n, pb, mb);
    float lut[256];
    lp_dequantize_lut(lut, pb);
    for (size_t i = 0; i < n; i++)
        out[i] = out[i] + lut[codes[i]];
}

void lp_add_backward(float *da, float *db, const float *dout, size_t n, uint64_t seed,
                     uint8_t *codes)
{
    (void)codes; /* not needed since the quantization is fused */
    float *first = da ? da : db;
    if (!first)
        return;
    lp_fake_quant_sr(first, NULL, dout, n, lp_tensor_qparams(dout, n), seed, 0);
    if (da && db)
        memcpy(db, da, n * sizeof(float));
}
