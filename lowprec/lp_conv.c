/* lp_conv — the 8-bit conv2d: forward, input gradient and their scratch
 * sizes, and the fake-quant twin (lp_layers.h).
 *
 * Owns:    the integer conv forward and input gradient, on two paths: the
 *          shift path (stride-1 "same" convs: shifted rows of pair or quad
 *          grids, no im2col) and the im2col path (lp_gemm per sample), with
 *          their affine corrections; the shift path's row kernels' scalar
 *          twins (lp_pair_plane_ref, lp_tap_sum_row_ref, lp_quad_row_ref,
 *          lp_tap_isum_row_ref); the fake-quant conv.
 * Exposes: the conv2d functions of lp_layers.h (the weight and bias
 *          gradients come from lp_conv_wgrad.c through lp_conv.h).
 * Callers: lp_model.c, tests, bench.
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
#include <string.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_conv.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_kern.h"
#include "lowprec/lp_layer_common.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_pool.h"

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
int lp_conv_shift_geom(const nn_conv_dims *d)
{
    return d->stride == 1 && d->KH == d->KW && d->KH >= 2 && 2 * d->pad == d->KH - 1 &&
           d->KH * d->KW <= LP_SHIFT_TMAX;
}

static int s_use_shift(const nn_conv_dims *d)
{
    if (s_force_im2col || !lp_conv_shift_geom(d))
        return 0;
    return (d->C <= LP_SHIFT_MAXC && d->OC <= LP_SHIFT_MAXC) || d->H * d->W < 16;
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
/* Bytes of one thread's part of s_shift_conv scratch: the grid, the channel
 * sums and the GEMM sums of a chunk, and the dequant row sums. */
static size_t s_shift_thread_bytes(int N, int nch, int M, int H, int W, int K, int pad)
{
    const int np = (nch + 1) / 2, nq = (nch + 3) / 4, nb = s_shift_nb(N, H, W, pad);
    const size_t cs = (size_t)nb * (H + 2 * pad) * (W + 2 * pad), vlen = s_vlen(nb, H, W, pad);
    const size_t gp = (size_t)np * K * vlen, gt = (size_t)nq * K * (vlen + 1);
    size_t s = 0;
    s += LP_ALIGN64((gp > gt ? gp : gt) * 4);
    s += LP_ALIGN64(cs * 4);
    s += LP_ALIGN64((size_t)M * vlen * 4);
    s += LP_ALIGN64((size_t)H * W * sizeof(double));
    s += LP_ALIGN64((size_t)H * W * sizeof(float)); /* a plane, when adding */
    return s;
}

/* Threads s_shift_conv may use: its chunks of samples, at most
 * LP_CONV_MAX_THREADS (the thread parts its scratch holds). */
static int s_shift_threads(int N, int H, int W, int pad)
{
    const int nb = s_shift_nb(N, H, W, pad), chunks = (N + nb - 1) / nb;
    int nt = nn_pool_threads();
    nt = nt > LP_CONV_MAX_THREADS ? LP_CONV_MAX_THREADS : nt;
    return nt > chunks ? chunks : nt;
}

/* Samples per chunk when nt threads run s_shift_conv: s_shift_nb's, made
 * smaller where its chunks would not split evenly (3 chunks of resnet20's
 * 8x8 stage on 2 threads ran 2 on one thread): the fewest chunks that are
 * a multiple of nt, as long as that stays within twice the count.  The
 * floats of a sample do not depend on its chunk (integer sums, then
 * per-sample dequantization). */
static int s_shift_nb_at(int N, int H, int W, int pad, int nt)
{
    const int nb = s_shift_nb(N, H, W, pad), chunks = (N + nb - 1) / nb;
    if (nt <= 1 || chunks % nt == 0)
        return nb;
    const int want = (chunks + nt - 1) / nt * nt;
    if (want > 2 * chunks || want > N)
        return nb;
    return (N + want - 1) / want;
}

static size_t s_shift_conv_bytes(int N, int nch, int M, int H, int W, int K, int pad)
{
    const int np = (nch + 1) / 2, nq = (nch + 3) / 4, T = K * K, nb = s_shift_nb(N, H, W, pad);
    const size_t ap = lp_shift_pack_lanes(M, np * T), at = lp_tile_pack_lanes(M, K, nq * K);
    const int parts = LP_CONV_MAX_THREADS < (N + nb - 1) / nb ? LP_CONV_MAX_THREADS
                                                              : (N + nb - 1) / nb;
    size_t s = 0;
    s += LP_ALIGN64((ap > at ? ap : at) * 4);
    s += LP_ALIGN64((size_t)M * (K + 1) * (K + 1) * 4);
    s += LP_ALIGN64((size_t)(H + W) * 2 * sizeof(int));
    s += LP_ALIGN64((size_t)M * s_max_classes(H, K) * W * sizeof(double));
    s += LP_ALIGN64((size_t)H * sizeof(int));
    return s + (size_t)parts * s_shift_thread_bytes(N, nch, M, H, W, K, pad);
}

/* Bytes of one thread's part of the forward: packed B, sums, column sums. */
static size_t s_i2c_fwd_part(const nn_conv_dims *d)
{
    const int CK = d->C * d->KH * d->KW, P = d->OH * d->OW;
    return LP_ALIGN64(lp_gemm_pack_b_bytes(CK, P)) + LP_ALIGN64((size_t)d->OC * P * 4) +
           LP_ALIGN64((size_t)lp_gemm_np(P) * 4) + LP_ALIGN64((size_t)P * sizeof(double));
}

/* Bytes of one thread's part of the input gradient. */
static size_t s_i2c_bwd_part(const nn_conv_dims *d)
{
    const int CK = d->C * d->KH * d->KW, P = d->OH * d->OW;
    return LP_ALIGN64(lp_gemm_pack_b_bytes(d->OC, P)) + LP_ALIGN64((size_t)CK * P * 4) +
           LP_ALIGN64((size_t)lp_gemm_np(P) * 4) + LP_ALIGN64((size_t)P * sizeof(double));
}

int lp_conv_parts(const nn_conv_dims *d, size_t part)
{
    size_t n = d->N < LP_CONV_MAX_THREADS ? (size_t)d->N : LP_CONV_MAX_THREADS;
    const size_t fit = LP_CONV_PARTS_BYTES / (part ? part : 1);
    n = n < fit ? n : fit;
    return n < 1 ? 1 : (int)n;
}

int lp_conv_threads(const nn_conv_dims *d, size_t part, size_t work)
{
    int nt = nn_pool_threads(), parts = lp_conv_parts(d, part);
    nt = nt > parts ? parts : nt;
    while (nt > 1 && work / (size_t)nt < LP_CONV_MIN_WORK)
        nt--;
    return nt < 1 ? 1 : nt;
}

size_t lp_conv2d_scratch_bytes(const nn_conv_dims *d)
{
    const int CK = d->C * d->KH * d->KW, P = d->OH * d->OW;
    /* forward: bias, then the im2col path or the shift path */
    size_t s = LP_ALIGN64((size_t)d->OC * 5), si = 0;
    si += LP_ALIGN64(lp_gemm_pack_a_bytes(d->OC, CK));
    si += LP_ALIGN64((size_t)d->OC * (d->KH + 1) * (d->KW + 1) * 4);
    si += LP_ALIGN64((size_t)(d->OH + d->OW) * 2 * sizeof(int));
    si += LP_ALIGN64((size_t)d->OC * s_max_classes(d->OH, d->KH) * d->OW * sizeof(double));
    si += LP_ALIGN64((size_t)d->OH * sizeof(int));
    si += (size_t)lp_conv_parts(d, s_i2c_fwd_part(d)) * s_i2c_fwd_part(d);
    size_t ss = s_shift_conv_bytes(d->N, d->C, d->OC, d->H, d->W, d->KH, d->pad);
    s += si > ss ? si : ss;
    /* backward, weight gradient (lp_conv_wgrad.c) */
    const size_t bw = lp_conv_wgrad_bytes(d);
    /* backward, input gradient: gradient codes, then either path */
    size_t b = LP_ALIGN64((size_t)d->N * d->OC * P), bi = 0;
    bi += LP_ALIGN64(lp_gemm_pack_a_bytes(CK, d->OC));
    bi += LP_ALIGN64((size_t)CK * 4);
    bi += LP_ALIGN64((size_t)(d->KH + d->KW) * 2 * sizeof(int));
    bi += (size_t)lp_conv_parts(d, s_i2c_bwd_part(d)) * s_i2c_bwd_part(d);
    size_t bs = LP_ALIGN64((size_t)d->OC * CK) +
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
    const lp_kern_t *k = lp_kern();
    s_conv_rows r = {k->quads,        0,           0,
                     k->pair_plane,   k->quad_row, k->tap_sum_row,
                     k->tap_isum_row, k->dequant_rows, k->dequant_row_q};
    if (lp_tile_ready() || lp_tile_model_forced()) {
        r.quad = r.tile = 1;
        r.model = !lp_tile_ready();
    }
    return r;
}

/* pre (M, K+1, K+1) = 2-D prefix sums over (kh, kw) of sum_c a[m][c][kh][kw],
 * for kernel codes a (M, nch, K, K): the sum of a row's codes over any
 * rectangle of taps is four lookups (S_RECT). */
static void s_tap_prefix_rows(int32_t *pre, const uint8_t *a, int m0, int m1, int nch, int KH,
                              int KW)
{
    const size_t PS = (size_t)(KH + 1) * (KW + 1), CK = (size_t)nch * KH * KW;
    for (int m = m0; m < m1; m++) {
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

static void s_tap_prefix(int32_t *pre, const uint8_t *a, int M, int nch, int KH, int KW)
{
    s_tap_prefix_rows(pre, a, 0, M, nch, KH, KW);
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
static int s_row_classes(int *hcls, const int *rh, int OH, int KH)
{
    int nh = 0;
    for (int oh = 0; oh < OH; oh++) {
        if (oh > 0 && (rh[2 * oh] != rh[2 * oh - 2] || rh[2 * oh + 1] != rh[2 * oh - 1]))
            nh++;
        hcls[oh] = nh;
    }
    nh++;
    assert(nh <= s_max_classes(OH, KH));
    return nh;
}

/* Rows [m0, m1) of s_base_rows' bases, the classes hcls (nh) given. */
static void s_base_rows_of(double *bases, const int *hcls, int nh, const int32_t *pre,
                           const int *rh, const int *rw, int m0, int m1, int OH, int OW, int KH,
                           int KW, int nch, double cSA, double cK, const float *bias)
{
    const size_t PS = (size_t)(KH + 1) * (KW + 1);
    for (int m = m0; m < m1; m++) {
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
}

static int s_base_rows(double *bases, int *hcls, const int32_t *pre, const int *rh,
                       const int *rw, int M, int OH, int OW, int KH, int KW, int nch, double cSA,
                       double cK, const float *bias)
{
    const int nh = s_row_classes(hcls, rh, OH, KH);
    s_base_rows_of(bases, hcls, nh, pre, rh, rw, 0, M, OH, OW, KH, KW, nch, cSA, cK, bias);
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

static s_shift_geo s_geo(const s_conv_rows *rows, int N, int nch, int H, int W, int K, int pad,
                         int nt)
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
    g.nb = s_shift_nb_at(N, H, W, pad, nt);
    g.V = 2 * pad + 1;
    g.vlen = s_vlen(g.nb, H, W, pad);
    g.ldb = (size_t)g.V * (g.vlen + (rows->tile ? 1 : 0));
    g.J0 = (size_t)pad + (size_t)pad * W;
    g.plane = (size_t)(H + 2 * pad) * (W + 2 * pad);
    return g;
}

/* Rows [m0, m1) of Ap (M, np*T), the lanes of the kernel codes a (M, nch,
 * T): pairs (lp_pair) or quads shifted to signed bytes (lp_quad_s8),
 * m-tiles of 4 (tap t = kh*K + kw of lane row p: lane p*T + t), or in the
 * tile layout (group kh, row p*K + kw; lp_tile.h).  Writes those rows'
 * lanes only: Ap is zeroed first by the caller (rows past M and channels
 * past nch stay zero). */
static void s_shift_pack_rows(uint32_t *Ap, const uint8_t *a, int m0, int m1, int M, int nch,
                              const s_shift_geo *g)
{
    const int T = g->T, K2 = g->np * T, K = g->K;
    for (int m = m0; m < m1; m++)
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

/* y[i] += x[i], i < n (a plane in L1: the compiler's vectors). */
static void s_add_plane(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* out rows of sample j of a chunk from its sums Sm (M, vlen): the affine
 * correction with SB = the channel sums chs over the taps inside the image
 * (ctoff), restoring the quads' 128 shift first.  sb: scratch of H*W
 * doubles.  Overwrites out (M, H, W); with `plane` (scratch of H*W floats)
 * adds to it instead: each channel's values made there, then out += them,
 * one rounding each, the floats of overwriting a temporary and adding it. */
static void s_shift_dequant(float *out, const int32_t *Sm, const int32_t *chs, const int *ctoff,
                            double cS, double cSB, const double *bases, const int *hcls, int nh,
                            int M, int j, const s_shift_geo *g, const s_conv_rows *rows,
                            double *sb, float *plane)
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
        float *o = plane ? plane : out + (size_t)m * P;
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
        if (plane)
            s_add_plane(out + (size_t)m * P, plane, P);
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

typedef struct {
    uint32_t *Ap;
    int32_t *pre;
    double *bases;
    const uint8_t *a;
    const float *bias;
    const int *hcls, *rh, *rw;
    const s_shift_geo *g;
    int M, nch, nh;
    double cSA, cK;
} s_prep_job;

/* Thread t's kernel rows of s_shift_conv's preparation: packed lanes,
 * tap prefix sums and correction bases of rows [m0, m1), each row one
 * thread's. */
static void s_prep_worker(void *arg, int t, int nt)
{
    const s_prep_job *j = arg;
    const int K = j->g->K;
    size_t m0, m1;
    nn_pool_share((size_t)j->M, t, nt, 1, &m0, &m1);
    if (m1 <= m0)
        return;
    s_shift_pack_rows(j->Ap, j->a, (int)m0, (int)m1, j->M, j->nch, j->g);
    s_tap_prefix_rows(j->pre, j->a, (int)m0, (int)m1, j->nch, K, K);
    s_base_rows_of(j->bases, j->hcls, j->nh, j->pre, j->rh, j->rw, (int)m0, (int)m1, j->g->H,
                   j->g->W, K, K, j->nch, j->cSA, j->cK, j->bias);
}

/* Threads of the preparation: a kernel row's work is about nch*T lanes
 * and H*W bases; fewer threads for small kernels. */
static int s_prep_threads(int M, int nch, const s_shift_geo *g)
{
    const size_t work = (size_t)M * ((size_t)nch * g->T * 2 + (size_t)g->H * g->W);
    int nt = nn_pool_threads();
    nt = nt > M ? M : nt;
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 13))
        nt--;
    return nt < 1 ? 1 : nt;
}

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) with the kernel codes a (M, nch, K, K), in real
 * values: sum over the taps inside the image of (sa*a + ma)(sb*b + mb),
 * plus bias[m] (may be NULL).  Overwrites out.  Scratch:
 * s_shift_conv_bytes(N, nch, M, H, W, K, pad).  Pairs and vpmaddwd at the
 * portable and AVX2 levels, quads and vpdpbusd at AVX-512 VNNI: the same
 * floats either way. */
/* The sample-independent part of a shift conv, shared by its threads. */
typedef struct {
    float *out;
    const uint8_t *b;
    const uint32_t *Ap;
    const double *bases;
    const int *hcls;
    unsigned char *parts; /* thread t's scratch at t * part */
    size_t part;
    s_shift_geo g;
    s_conv_rows rows;
    int N, nch, M, nh;
    int add; /* out += the conv, not out = */
    int toff[LP_SHIFT_TMAX], ctoff[LP_SHIFT_TMAX];
    double cS, cSB;
} s_shift_job;

/* Thread t of nt: chunks [nc*t/nt, nc*(t+1)/nt) of nb samples each, in its
 * own scratch part; every sample's floats are those of one thread. */
static void s_shift_worker(void *arg, int t, int nt)
{
    const s_shift_job *j = arg;
    const s_shift_geo *g = &j->g;
    const int H = g->H, W = g->W, pad = g->pad, M = j->M;
    unsigned char *sp = j->parts + (size_t)t * j->part;
    uint32_t *grid = lp_take(&sp, (size_t)g->np * g->ldb * 4);
    int32_t *chs = lp_take(&sp, (size_t)g->nb * g->plane * 4);
    int32_t *Sm = lp_take(&sp, (size_t)M * g->vlen * 4);
    double *tx = lp_take(&sp, (size_t)H * W * sizeof(double));
    float *plane = j->add ? lp_take(&sp, (size_t)H * W * sizeof(float)) : NULL;
    size_t c0, c1;
    nn_pool_share((size_t)(j->N + g->nb - 1) / g->nb, t, nt, 1, &c0, &c1);
    for (int n0 = (int)c0 * g->nb; n0 < (int)c1 * g->nb && n0 < j->N; n0 += g->nb) {
        const int cnt = j->N - n0 < g->nb ? j->N - n0 : g->nb;
        s_shift_grid(grid, chs, j->b, j->nch, n0, cnt, g, &j->rows);
        /* only the real pixels' sums are computed (rows of W, not Wp) */
        const size_t n = ((size_t)cnt * (H + pad) - pad) * W;
        if (j->rows.tile)
            s_shift_tilegemm(Sm + g->J0, j->Ap, M, grid + g->J0, g, &j->rows, n);
        else if (j->rows.quad)
            lp_shiftgemm_q(Sm + g->J0, g->vlen, j->Ap, M, grid + g->J0, g->ldb, g->np, j->toff,
                           g->T, n);
        else
            lp_shiftgemm(Sm + g->J0, g->vlen, j->Ap, M, grid + g->J0, g->ldb, g->np, j->toff,
                         g->T, n);
        for (int s = 0; s < cnt; s++)
            s_shift_dequant(j->out + (size_t)(n0 + s) * M * H * W, Sm, chs, j->ctoff, j->cS,
                            j->cSB, j->bases, j->hcls, j->nh, M, s, g, &j->rows, tx, plane);
    }
}

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) with the kernel codes a (M, nch, K, K), in real
 * values: sum over the taps inside the image of (sa*a + ma)(sb*b + mb),
 * plus bias[m] (may be NULL).  Overwrites out.  Scratch:
 * s_shift_conv_bytes(N, nch, M, H, W, K, pad).  Pairs and vpmaddwd at the
 * portable and AVX2 levels, quads and vpdpbusd at AVX-512 VNNI: the same
 * floats either way.  Chunks of samples split over the threads of
 * nn_pool.h: the same floats for any thread count.  add: out += the conv
 * (s_shift_dequant). */
static void s_shift_conv(float *out, const uint8_t *b, lp_qparams bqp, const uint8_t *a,
                         lp_qparams aqp, const float *bias, int N, int nch, int M, int H, int W,
                         int K, int pad, int add, void *scratch)
{
    s_shift_job j = {.out = out, .b = b, .N = N, .nch = nch, .M = M, .add = add};
    j.rows = s_rows();
    const int nt = s_shift_threads(N, H, W, pad);
    j.g = s_geo(&j.rows, N, nch, H, W, K, pad, nt);
    const s_shift_geo *g = &j.g;
    const int T = g->T, K2 = g->np * T, Wp = W + 2 * pad;
    const size_t PS = (size_t)(K + 1) * (K + 1);
    unsigned char *sp = (unsigned char *)scratch;
    uint32_t *Ap = lp_take(&sp, (g->tile ? lp_tile_pack_lanes(M, K, g->np * K)
                                        : lp_shift_pack_lanes(M, K2)) * 4);
    int32_t *pre = lp_take(&sp, (size_t)M * PS * 4);
    int *rh = lp_take(&sp, (size_t)(H + W) * 2 * sizeof(int)), *rw = rh + 2 * H;
    double *bases = lp_take(&sp, (size_t)M * s_max_classes(H, K) * W * sizeof(double));
    int *hcls = lp_take(&sp, (size_t)H * sizeof(int));

    memset(Ap, 0, (g->tile ? lp_tile_pack_lanes(M, K, K2 / K) : lp_shift_pack_lanes(M, K2)) * 4);
    for (int o = 0; o < H; o++)
        s_tap_range(o, 1, pad, K, H, &rh[2 * o], &rh[2 * o + 1]);
    for (int o = 0; o < W; o++)
        s_tap_range(o, 1, pad, K, W, &rw[2 * o], &rw[2 * o + 1]);
    /* tap (kh, kw) reads variant kw, shifted by rows and columns; ctoff the
     * same taps in the zero-bordered (Wp-wide) grid of channel sums */
    assert(T <= LP_SHIFT_TMAX);
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            j.toff[kh * K + kw] = (int)((size_t)kw * g->vlen) + (kh - pad) * W + (kw - pad);
            j.ctoff[kh * K + kw] = (kh - pad) * Wp + (kw - pad);
        }
    const double sa = aqp.scale, ma = aqp.min, sb = bqp.scale, mb = bqp.min;
    const double cSA = sa * mb, cK = ma * mb;
    j.cS = sa * sb;
    j.cSB = ma * sb;
    j.nh = s_row_classes(hcls, rh, H, K);
    /* the kernel rows' lanes, prefix sums and bases, split by rows */
    s_prep_job pj = {Ap, pre, bases, a, bias, hcls, rh, rw, g, M, nch, j.nh, cSA, cK};
    nn_pool_run(s_prep_threads(M, nch, g), s_prep_worker, &pj);
    j.Ap = Ap;
    j.bases = bases;
    j.hcls = hcls;
    j.parts = sp;
    j.part = s_shift_thread_bytes(N, nch, M, H, W, K, pad);
    /* on the tile path (AMX, or its model) each thread runs the tile
     * kernel on its own tiles */
    nn_pool_run(nt, s_shift_worker, &j);
}

/* ---- im2col path: samples split over the pool ------------------------------
 * Every sample's GEMM, correction and output (or col2im into its own din
 * plane) are one thread's, in its own part of the scratch (packed B, the
 * int32 sums, the column sums): the same floats for any thread count. */

/* The per-sample part of the im2col path shared by its threads. */
typedef struct {
    float *out;            /* forward: out (N, OC, P); input gradient: din */
    const uint8_t *codes;  /* forward: the input codes; input gradient: gq */
    const int8_t *Ap;      /* packed weights */
    const int32_t *SWc;    /* input gradient: weight code sums per ck */
    const double *bases;   /* forward: correction base rows */
    const int *hcls, *rh;  /* forward: row classes; input gradient: tap ranges */
    const nn_conv_dims *d;
    unsigned char *parts;  /* thread t's scratch at t * part */
    size_t part;
    double cS, cT;         /* factors of the sums and of the column sums */
    double sw, mw, mg;     /* input gradient: weight scale and min, gradient min */
    int nh;
} s_i2c_job;

/* Threads of an im2col pass whose thread parts are `part` bytes: at most
 * its parts, fewer when there is little work.  On the tile GEMM every
 * thread configures its own tiles (lp_tile.h); lp_tile_ready() is asked
 * here first, on the calling thread. */
static int s_i2c_threads(const nn_conv_dims *d, size_t part)
{
    (void)lp_tile_ready();
    return lp_conv_threads(d, part, (size_t)d->N * d->OC * d->C * d->KH * d->KW * d->OH * d->OW);
}

/* Thread t's samples of the im2col forward: im2col of the codes, the GEMM
 * S = wq xq_col, out = cS*S + cT*SX(p) + base(oc, p). */
static void s_i2c_fwd_worker(void *arg, int t, int nt)
{
    const s_i2c_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int OC = d->OC, OH = d->OH, OW = d->OW, CK = d->C * d->KH * d->KW, P = OH * OW;
    const size_t xper = (size_t)d->C * d->H * d->W;
    unsigned char *sp = j->parts + (size_t)t * j->part;
    uint8_t *Bp = lp_take(&sp, lp_gemm_pack_b_bytes(CK, P));
    int32_t *Cm = lp_take(&sp, (size_t)OC * P * 4);
    int32_t *SX = lp_take(&sp, (size_t)lp_gemm_np(P) * 4);
    double *tSX = lp_take(&sp, (size_t)P * sizeof(double));
    size_t n0, n1;
    nn_pool_share((size_t)d->N, t, nt, 1, &n0, &n1);
    if (n1 <= n0)
        return;
    memset(Bp, 0, lp_gemm_pack_b_bytes(CK, P));
    for (size_t n = n0; n < n1; n++) {
        s_im2col_b4(Bp, j->codes + n * xper, d);
        lp_gemm_u8u8(Cm, P, j->Ap, Bp, OC, P, CK, SX);
        float *o = j->out + n * OC * P;
        for (int p = 0; p < P; p++)
            tSX[p] = j->cT * SX[p];
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                lp_dequant_row(o + (size_t)oc * P + (size_t)oh * OW,
                               Cm + (size_t)oc * P + (size_t)oh * OW, tSX + (size_t)oh * OW,
                               j->cS, j->bases + ((size_t)oc * j->nh + j->hcls[oh]) * OW,
                               (size_t)OW);
    }
}

void lp_conv2d_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, const nn_conv_dims *d, lp_mode mode,
                       void *scratch)
{
    const int N = d->N, C = d->C, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = C * KH * KW;
    const size_t xper = (size_t)C * d->H * d->W, PS = (size_t)(KH + 1) * (KW + 1);
    unsigned char *sp = (unsigned char *)scratch;
    unsigned char *bpart = lp_take(&sp, (size_t)OC * 5);
    float *bq = (float *)(void *)bpart;
    uint8_t *bcodes = bpart + (size_t)OC * 4;

    const lp_operands ops = {in, N, xper, w, (size_t)OC * CK, b, (size_t)OC};
    (void)lp_layer_quantize(sv, NULL, NULL, bq, bcodes, run_range, &ops, mode);
    if (s_use_shift(d)) {
        s_shift_conv(out, sv->xq, sv->xp, sv->wq, sv->wp, bq, N, C, OC, d->H, d->W, KH, d->pad, 0,
                     sp);
        return;
    }
    int8_t *Ap = lp_take(&sp, lp_gemm_pack_a_bytes(OC, CK));
    int32_t *pre = lp_take(&sp, (size_t)OC * PS * 4);
    int *rh = lp_take(&sp, (size_t)(OH + OW) * 2 * sizeof(int)), *rw = rh + 2 * OH;
    double *bases = lp_take(&sp, (size_t)OC * s_max_classes(OH, KH) * OW * sizeof(double));
    int *hcls = lp_take(&sp, (size_t)OH * sizeof(int));

    lp_gemm_pack_a(Ap, NULL, sv->wq, CK, 1, OC, CK);
    s_tap_prefix(pre, sv->wq, OC, C, KH, KW);
    for (int oh = 0; oh < OH; oh++)
        s_tap_range(oh, d->stride, d->pad, KH, d->H, &rh[2 * oh], &rh[2 * oh + 1]);
    for (int ow = 0; ow < OW; ow++)
        s_tap_range(ow, d->stride, d->pad, KW, d->W, &rw[2 * ow], &rw[2 * ow + 1]);

    const double sw = sv->wp.scale, mw = sv->wp.min, sx = sv->xp.scale, mx = sv->xp.min;
    const double cSX = mw * sx, cSW = sw * mx, cK = mw * mx;
    const int nh = s_base_rows(bases, hcls, pre, rh, rw, OC, OH, OW, KH, KW, C, cSW, cK, bq);
    s_i2c_job j = {.out = out, .codes = sv->xq, .Ap = Ap, .bases = bases, .hcls = hcls, .d = d,
                   .parts = sp, .part = s_i2c_fwd_part(d), .cS = sw * sx, .cT = cSX, .nh = nh};
    nn_pool_run(s_i2c_threads(d, j.part), s_i2c_fwd_worker, &j);
}

/* Sample n's input gradient: dcol = wq^T gq_n, its correction, col2im
 * into its own din plane (zeroed first). */
static void s_dgrad_sample(const s_i2c_job *j, size_t n, uint8_t *Bp, int32_t *Cm, int32_t *SG,
                           double *tSG)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OW = d->OW, CK = C * KH * KW, P = d->OH * OW, S = d->stride, pad = d->pad;
    const int *rh = j->rh, *rw = j->rh + 2 * KH;
    const size_t xper = (size_t)C * H * W;
    lp_gemm_pack_b(Bp, j->codes + n * OC * P, P, 1, OC, P);
    lp_gemm_u8u8(Cm, P, j->Ap, Bp, CK, P, OC, SG);
    for (int p = 0; p < P; p++)
        tSG[p] = j->cT * SG[p];
    float *dx = j->out + n * xper;
    memset(dx, 0, xper * sizeof(float));
    const double cS = j->cS;
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                int ck = (c * KH + kh) * KW + kw;
                double base = j->sw * j->mg * j->SWc[ck] + (double)OC * j->mw * j->mg;
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

/* Thread t's samples of the im2col input gradient. */
static void s_dgrad_worker(void *arg, int t, int nt)
{
    const s_i2c_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int CK = d->C * d->KH * d->KW, P = d->OH * d->OW;
    unsigned char *sp = j->parts + (size_t)t * j->part;
    uint8_t *Bp = lp_take(&sp, lp_gemm_pack_b_bytes(d->OC, P));
    int32_t *Cm = lp_take(&sp, (size_t)CK * P * 4);
    int32_t *SG = lp_take(&sp, (size_t)lp_gemm_np(P) * 4);
    double *tSG = lp_take(&sp, (size_t)P * sizeof(double));
    size_t n0, n1;
    nn_pool_share((size_t)d->N, t, nt, 1, &n0, &n1);
    for (size_t n = n0; n < n1; n++)
        s_dgrad_sample(j, n, Bp, Cm, SG, tSG);
}

/* din (N, C, H, W) = the im2col path's input gradient from the gradient
 * codes gq (N, OC, OH, OW) with qparams gp: per sample the GEMM
 * dcol = wq^T gq (lp_gemm), its affine correction, then col2im.  Scratch
 * carved from sp. */
static void s_dgrad_im2col(float *din, const uint8_t *gq, lp_qparams gp, const lp_qsaved *sv,
                           const nn_conv_dims *d, unsigned char *sp)
{
    const int H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, CK = d->C * KH * KW, S = d->stride, pad = d->pad;
    int8_t *Ap = lp_take(&sp, lp_gemm_pack_a_bytes(CK, OC));
    int32_t *SWc = lp_take(&sp, (size_t)CK * 4);
    int *rh = lp_take(&sp, (size_t)(KH + KW) * 2 * sizeof(int));
    lp_gemm_pack_a(Ap, SWc, sv->wq, 1, CK, CK, OC); /* A(ck, oc) = wq[oc][ck] */
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
    const double sw = sv->wp.scale, mw = sv->wp.min, sg = gp.scale, mg = gp.min;
    s_i2c_job j = {.out = din, .codes = gq, .Ap = Ap, .SWc = SWc, .rh = rh, .d = d, .parts = sp,
                   .part = s_i2c_bwd_part(d), .cS = sw * sg, .cT = mw * sg, .sw = sw, .mw = mw,
                   .mg = mg};
    nn_pool_run(s_i2c_threads(d, j.part), s_dgrad_worker, &j);
}

typedef struct {
    uint8_t *wf;
    const uint8_t *wq;
    int OC, C, T;
} s_flip_job;

static void s_flip_worker(void *arg, int t, int nt)
{
    const s_flip_job *j = arg;
    const int OC = j->OC, C = j->C, T = j->T;
    size_t c0, c1;
    nn_pool_share((size_t)C, t, nt, 1, &c0, &c1);
    for (size_t c = c0; c < c1; c++)
        for (int oc = 0; oc < OC; oc++)
            for (int k = 0; k < T; k++)
                j->wf[(c * OC + oc) * T + k] = j->wq[((size_t)oc * C + c) * T + T - 1 - k];
}

/* wf (C, OC, T) = the kernel codes wq (OC, C, T) with the taps flipped and
 * the channels swapped: wf[c][oc][t] = wq[oc][c][T-1-t].  Overwrites wf;
 * rows c split over the pool. */
static void s_flip_kernel(uint8_t *wf, const uint8_t *wq, int OC, int C, int T)
{
    s_flip_job j = {wf, wq, OC, C, T};
    int nt = nn_pool_threads();
    nt = nt > C ? C : nt;
    while (nt > 1 && (size_t)OC * C * T / (size_t)nt < ((size_t)1 << 13))
        nt--;
    nn_pool_run(nt < 1 ? 1 : nt, s_flip_worker, &j);
}

/* lp_conv2d_backward; add: din += the input gradient (the shift path only). */
static void s_backward(float *din, float *dw, float *db, const float *dout, const lp_qsaved *sv,
                       const nn_conv_dims *d, uint64_t seed, int add, void *scratch)
{
    const int N = d->N, C = d->C, H = d->H, W = d->W, OC = d->OC, KH = d->KH, KW = d->KW;
    const int CK = C * KH * KW, P = d->OH * d->OW;
    unsigned char *sp = (unsigned char *)scratch;

    /* weight and bias gradients from the full-precision dout (bifurcation) */
    lp_conv_wgrad(dw, db, dout, sv, d, sp);
    if (!din)
        return;
    /* input gradient: int8 conv^T on the stochastically quantized dout */
    const size_t gn = (size_t)N * OC * P;
    uint8_t *gq = lp_take(&sp, gn);
    lp_qparams gp = lp_tensor_qparams(dout, gn);
    lp_quantize_sr(gq, dout, gn, gp, seed, 0);
    if (s_use_shift(d)) {
        /* din = the same conv of the gradient codes with the kernel
         * flipped and the channels swapped: wf[c][oc][t] = wq[oc][c][T-1-t] */
        uint8_t *wf = lp_take(&sp, (size_t)OC * CK);
        s_flip_kernel(wf, sv->wq, OC, C, KH * KW);
        s_shift_conv(din, gq, gp, wf, sv->wp, NULL, N, OC, C, H, W, KH, d->pad, add, sp);
        return;
    }
    assert(!add);
    s_dgrad_im2col(din, gq, gp, sv, d, sp);
}

void lp_conv2d_backward(float *din, float *dw, float *db, const float *dout,
                        const lp_qsaved *sv, const nn_conv_dims *d, uint64_t seed,
                        void *scratch)
{
    s_backward(din, dw, db, dout, sv, d, seed, 0, scratch);
}

int lp_conv2d_din_adds(const nn_conv_dims *d)
{
    return s_use_shift(d);
}

void lp_conv2d_backward_add(float *din, float *dw, float *db, const float *dout,
                            const lp_qsaved *sv, const nn_conv_dims *d, uint64_t seed,
                            void *scratch)
{
    assert(din && s_use_shift(d));
    s_backward(din, dw, db, dout, sv, d, seed, 1, scratch);
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
    const lp_operands ops = {in, N, xper, w, (size_t)OC * CK, b, (size_t)OC};
    (void)lp_layer_quantize(NULL, xf, wf, bf, NULL, run_range, &ops, mode);
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
    lp_param_fq(wf, w, (size_t)OC * CK);
    const size_t gn = (size_t)N * OC * P;
    lp_fake_quant(gf, dout, gn, lp_tensor_qparams(dout, gn), 1, seed);
    if (din)
        memset(din, 0, (size_t)N * xper * sizeof(float));
    const int wb16 = lp_wgrad_bf16(); /* the weight gradient sees bf16(dout) */
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

