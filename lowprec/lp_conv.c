/* lp_conv — the 8-bit conv2d: forward, input gradient and their scratch
 * sizes, and the fake-quant twin (lp_layers.h).
 *
 * Owns:    the choice of path per conv: the shift path (stride-1 "same"
 *          convs: shifted rows of pair or quad grids, no im2col;
 *          lp_conv_shift.c) or the im2col path here (lp_gemm per sample);
 *          the affine correction's tables both paths build (tap ranges,
 *          tap prefix sums, row classes and their base rows); the scratch
 *          sizes; the fake-quant conv.
 * Exposes: the conv2d functions of lp_layers.h (the weight and bias
 *          gradients come from lp_conv_wgrad.c, the shift path from
 *          lp_conv_shift.c, both through lp_conv.h); the correction tables
 *          to lp_conv_shift.c (lp_conv.h).
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
#include "lowprec/lp_layer_common.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_pool.h"

/* ---- conv2d ------------------------------------------------------------ */

size_t lp_conv2d_saved_bytes(const nn_conv_dims *d)
{
    return (size_t)d->N * d->C * d->H * d->W + (size_t)d->OC * d->C * d->KH * d->KW;
}

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

/* Output rows whose taps cover the same kernel rows [h0, h1) share their
 * correction terms ("row classes"); as oh grows h0 and h1 only decrease, so
 * classes are runs of rows and there are at most 2*KH + 1 (and <= OH). */
int lp_conv_max_classes(int OH, int KH)
{
    return 2 * KH + 1 < OH ? 2 * KH + 1 : OH;
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
    si += LP_ALIGN64((size_t)d->OC * lp_conv_max_classes(d->OH, d->KH) * d->OW * sizeof(double));
    si += LP_ALIGN64((size_t)d->OH * sizeof(int));
    si += (size_t)lp_conv_parts(d, s_i2c_fwd_part(d)) * s_i2c_fwd_part(d);
    size_t ss = lp_conv_shift_bytes(d->N, d->C, d->OC, d->H, d->W, d->KH, d->pad);
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
                lp_conv_shift_bytes(d->N, d->OC, d->C, d->H, d->W, d->KH, d->pad);
    b += bi > bs ? bi : bs;
    b = b > bw ? b : bw;
    return (s > b ? s : b) + 64;
}

/* valid tap range of output row o: [lo, hi) of kernel index */
void lp_conv_tap_range(int o, int stride, int pad, int K, int In, int *lo, int *hi)
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

/* pre (M, K+1, K+1) = 2-D prefix sums over (kh, kw) of sum_c a[m][c][kh][kw],
 * for kernel codes a (M, nch, K, K): the sum of a row's codes over any
 * rectangle of taps is four lookups (S_RECT). */
void lp_conv_tap_prefix_rows(int32_t *pre, const uint8_t *a, int m0, int m1, int nch, int KH,
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
    lp_conv_tap_prefix_rows(pre, a, 0, M, nch, KH, KW);
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
int lp_conv_row_classes(int *hcls, const int *rh, int OH, int KH)
{
    int nh = 0;
    for (int oh = 0; oh < OH; oh++) {
        if (oh > 0 && (rh[2 * oh] != rh[2 * oh - 2] || rh[2 * oh + 1] != rh[2 * oh - 1]))
            nh++;
        hcls[oh] = nh;
    }
    nh++;
    assert(nh <= lp_conv_max_classes(OH, KH));
    return nh;
}

/* Rows [m0, m1) of s_base_rows' bases, the classes hcls (nh) given. */
void lp_conv_base_rows_of(double *bases, const int *hcls, int nh, const int32_t *pre,
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
    const int nh = lp_conv_row_classes(hcls, rh, OH, KH);
    lp_conv_base_rows_of(bases, hcls, nh, pre, rh, rw, 0, M, OH, OW, KH, KW, nch, cSA, cK, bias);
    return nh;
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
        lp_conv_shift(out, sv->xq, sv->xp, sv->wq, sv->wp, bq, N, C, OC, d->H, d->W, KH, d->pad,
                      0, sp);
        return;
    }
    int8_t *Ap = lp_take(&sp, lp_gemm_pack_a_bytes(OC, CK));
    int32_t *pre = lp_take(&sp, (size_t)OC * PS * 4);
    int *rh = lp_take(&sp, (size_t)(OH + OW) * 2 * sizeof(int)), *rw = rh + 2 * OH;
    double *bases = lp_take(&sp, (size_t)OC * lp_conv_max_classes(OH, KH) * OW * sizeof(double));
    int *hcls = lp_take(&sp, (size_t)OH * sizeof(int));

    lp_gemm_pack_a(Ap, NULL, sv->wq, CK, 1, OC, CK);
    s_tap_prefix(pre, sv->wq, OC, C, KH, KW);
    for (int oh = 0; oh < OH; oh++)
        lp_conv_tap_range(oh, d->stride, d->pad, KH, d->H, &rh[2 * oh], &rh[2 * oh + 1]);
    for (int ow = 0; ow < OW; ow++)
        lp_conv_tap_range(ow, d->stride, d->pad, KW, d->W, &rw[2 * ow], &rw[2 * ow + 1]);

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
        lp_conv_shift(din, gq, gp, wf, sv->wp, NULL, N, OC, C, H, W, KH, d->pad, add, sp);
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
