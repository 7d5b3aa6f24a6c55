/* lp_conv_wgrad — the weight and bias gradients of the 8-bit conv2d.
 *
 * Owns:    the three ways the weight gradient is taken from the
 *          full-precision dout and the saved input codes ("gradient
 *          bifurcation"): in bf16 on the codes where the CPU has it
 *          (shifted grids on stride-1 same convs, an im2col of the codes
 *          otherwise), in FP32 on shifted grids the codes are dequantized
 *          into (stride-1 same convs), or through nn's FP32 conv backward on
 *          chunks of dequantized codes; the bias gradient; their scratch.
 * Exposes: lp_conv_wgrad, lp_conv_wgrad_bytes (lp_conv.h).
 * Callers: lp_conv.c (lp_conv2d_backward, lp_conv2d_scratch_bytes).
 *
 * Threads: the bf16 and the FP32 weight gradients on the codes split by
 * samples: at nt > 1 threads, share t takes samples [N t/nt, N (t+1)/nt)
 * whole, from its grids through its dots into sums of its own (a "part" of
 * the scratch), so each sample's rows stay on the core that wrote them; the
 * parts' sums are added in part order, then dw is updated.  The same bits
 * for a given thread count; at one thread those of a single pass over the
 * chunks (the sums of nt parts differ from it by FP32 rounding).
 */
#include "lowprec/lp_conv.h"

#include <string.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_kern.h"
#include "lowprec/lp_layer_common.h"
#include "nn/nn_pool.h"

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
    if (lp_conv_shift_geom(d))
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
    const size_t T = (size_t)d->KH * d->KW, shift = (size_t)lp_conv_shift_geom(d);
    const size_t rows = shift ? (size_t)d->C + 1 : (size_t)d->C * T + T;
    return LP_ALIGN64((rows + (size_t)d->OC) * cs * 2) + LP_ALIGN64((size_t)d->OC * (d->C + 1) * T * 4);
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
    if (!lp_conv_shift_geom(d))
        return 0;
    const size_t rows = (size_t)d->C * (2 * (size_t)d->pad + 1) + (size_t)d->OC;
    return LP_ALIGN64(rows * s_wgrad_f32_vlen(d) * 4) +
           LP_ALIGN64((size_t)d->OC * d->C * d->KH * d->KW * 4);
}

/* Parts 1..nt-1's sums (n floats at byte offset `off` of each part of
 * `part` bytes) added to part 0's, in part order. */
static float *s_sum_parts(unsigned char *scratch, size_t part, size_t off, size_t n, int nt)
{
    float *D = (float *)(void *)(scratch + off);
    for (int t = 1; t < nt; t++) {
        const float *Dt = (const float *)(const void *)(scratch + (size_t)t * part + off);
        for (size_t i = 0; i < n; i++)
            D[i] += Dt[i];
    }
    return D;
}

/* A weight gradient split by samples: part t's sums over its samples. */
typedef struct {
    const float *dout;
    const lp_qsaved *sv;
    const nn_conv_dims *d;
    unsigned char *scratch;
    size_t part;
    void (*range)(const void *job, unsigned char *sp, int s0, int s1);
} s_parts_job;

static void s_parts_worker(void *arg, int t, int nt)
{
    const s_parts_job *j = arg;
    size_t s0, s1;
    nn_pool_share((size_t)j->d->N, t, nt, 1, &s0, &s1);
    j->range(j, j->scratch + (size_t)t * j->part, (int)s0, (int)s1);
}

/* Runs j's samples in parts over the pool (one part, the whole batch, on
 * one thread) for a gradient of `work` products, and returns the sums (n
 * floats at byte offset `at` of a part) of all parts, in part 0. */
static float *s_parts_run(s_parts_job *j, size_t work, size_t at, size_t n)
{
    const int nt = lp_conv_threads(j->d, j->part, work);
    if (nt == 1)
        j->range(j, j->scratch, 0, j->d->N);
    else
        nn_pool_run(nt, s_parts_worker, j);
    return s_sum_parts(j->scratch, j->part, at, n, nt);
}

/* Samples per chunk of the weight gradient: about 1 MB of dequantized
 * input (at least one sample). */
static int s_wgrad_nb(const nn_conv_dims *d)
{
    const size_t xper = (size_t)d->C * d->H * d->W;
    size_t nw = ((size_t)1 << 18) / xper;
    return nw < 1 ? 1 : nw > (size_t)d->N ? d->N : (int)nw;
}


typedef struct {
    uint16_t *gx, *gg;
    const uint8_t *xq;
    const float *dout;
    const nn_conv_dims *d;
    size_t ld; /* lanes from one row to the next */
    int n0, cnt;
} s_grids_job;

/* Thread t's rows of the C + OC grid rows (input channels, then gradient
 * channels): each row zeroed and filled by one thread. */
static void s_grids_worker(void *arg, int t, int nt)
{
    const s_grids_job *jb = arg;
    const nn_conv_dims *d = jb->d;
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, pad = d->pad, Wp = W + 2 * pad;
    const size_t plane = (size_t)(H + 2 * pad) * Wp, cs = (size_t)jb->cnt * plane;
    const size_t P = (size_t)H * W;
    const lp_kern_t *k = lp_kern(); /* resolved once, not per row */
    size_t r0, r1;
    nn_pool_share((size_t)C + OC, t, nt, 1, &r0, &r1);
    for (size_t r = r0; r < r1; r++) {
        const int x = r < (size_t)C, c = x ? (int)r : (int)r - C, nch = x ? C : OC;
        uint16_t *row = (x ? jb->gx : jb->gg) + (size_t)c * jb->ld;
        memset(row, 0, cs * 2);
        for (int j = 0; j < jb->cnt; j++) {
            const size_t at = (size_t)j * plane + (size_t)pad * Wp + pad;
            const size_t src = ((size_t)(jb->n0 + j) * nch + c) * P;
            for (int h = 0; h < H; h++) {
                if (x)
                    k->bf16_codes_row(row + at + (size_t)h * Wp, jb->xq + src + (size_t)h * W,
                                      (size_t)W);
                else
                    k->bf16_row(row + at + (size_t)h * Wp, jb->dout + src + (size_t)h * W,
                                (size_t)W);
            }
        }
    }
}

/* The bf16 grids of one chunk: samples [n0, n0+cnt) of the codes xq
 * (N, C, H, W) and of dout (N, OC, H, W), each plane (Hp, Wp) zero-bordered
 * with the image at (pad, pad), channel rows of cs = cnt*Hp*Wp values, ld
 * lanes apart.  Overwrites gx (C rows) and gg (OC rows).  Rows split over
 * the pool. */
static void s_bf16_grids(uint16_t *gx, uint16_t *gg, size_t ld, const uint8_t *xq,
                         const float *dout, const nn_conv_dims *d, int n0, int cnt)
{
    s_grids_job jb = {gx, gg, xq, dout, d, ld, n0, cnt};
    const size_t work = ((size_t)d->C + d->OC) * cnt * d->H * d->W;
    int nt = nn_pool_threads();
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 14))
        nt--;
    nn_pool_run(nt, s_grids_worker, &jb);
}

typedef struct {
    uint16_t *col, *gg;
    const uint8_t *xq;
    const float *dout;
    const nn_conv_dims *d;
    const uint16_t *tab; /* bf16 of each code (lowered geometry) */
    size_t per, ld;      /* columns a sample; lanes from one row to the next */
    int n0;
} s_low_job;

/* The ones rows of a bf16 chunk of cnt samples (1.0 where the image, or
 * the tap, is): one grid on the shift geometry, one row per tap (ld lanes
 * apart) otherwise, per columns a sample.  They depend on the geometry
 * only: a part builds them once for its largest chunk, a smaller one reads
 * their first columns. */
static void s_bf16_ones(uint16_t *ones, const nn_conv_dims *d, size_t per, size_t ld, int cnt,
                        int shift)
{
    const int H = d->H, W = d->W, KH = d->KH, KW = d->KW, OH = d->OH, OW = d->OW;
    const int S = d->stride, pad = d->pad, Wp = W + 2 * pad;
    for (int j = 0; j < cnt; j++) {
        if (shift) {
            uint16_t *o = ones + (size_t)j * per;
            memset(o, 0, per * 2);
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                    o[(size_t)(pad + h) * Wp + pad + w] = 0x3F80;
            continue;
        }
        for (int t = 0; t < KH * KW; t++) {
            uint16_t *o = ones + (size_t)t * ld + (size_t)j * per;
            for (int oh = 0; oh < OH; oh++) {
                const int ih = oh * S - pad + t / KW;
                for (int ow = 0; ow < OW; ow++) {
                    const int iw = ow * S - pad + t % KW;
                    o[(size_t)oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W ? 0x3F80 : 0;
                }
            }
        }
    }
}

/* Sample j of a bf16 chunk off the shift geometry: its columns of the
 * lowered rows col (C*T rows) and gg (OC rows), ld lanes apart.  Writes
 * only sample j's columns. */
static void s_bf16_sample(const s_low_job *jb, int j)
{
    const nn_conv_dims *d = jb->d;
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, KH = d->KH, KW = d->KW;
    const int OH = d->OH, OW = d->OW, S = d->stride, pad = d->pad;
    const size_t ld = jb->ld, P = (size_t)OH * OW;
    const int n = jb->n0 + j;
    for (int c = 0; c < C; c++) {
        const uint8_t *x = jb->xq + ((size_t)n * C + c) * H * W;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                uint16_t *dst = jb->col + ((size_t)(c * KH + kh) * KW + kw) * ld + (size_t)j * P;
                for (int oh = 0; oh < OH; oh++) {
                    const int ih = oh * S - pad + kh;
                    for (int ow = 0; ow < OW; ow++) {
                        const int iw = ow * S - pad + kw;
                        dst[(size_t)oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W
                                                        ? jb->tab[x[(size_t)ih * W + iw]]
                                                        : 0;
                    }
                }
            }
    }
    void (*f32_row)(uint16_t *, const float *, size_t) = lp_kern()->bf16_row;
    for (int oc = 0; oc < OC; oc++)
        f32_row(jb->gg + (size_t)oc * ld + (size_t)j * P, jb->dout + ((size_t)n * OC + oc) * P, P);
}

typedef struct {
    const s_low_job *jb;
    int cnt;
} s_low_run;

static void s_bf16_sample_worker(void *arg, int t, int nt)
{
    const s_low_run *r = arg;
    size_t j0, j1;
    nn_pool_share((size_t)r->cnt, t, nt, 1, &j0, &j1);
    for (size_t j = j0; j < j1; j++)
        s_bf16_sample(r->jb, (int)j);
}

/* The per-sample rows of one bf16 chunk off the shift geometry (samples
 * [n0, n0+cnt)): the im2col of the codes col (C*T rows) with padded taps 0
 * and gg (OC rows) the dout of the same pixels, rows ld lanes apart.
 * Overwrites their first cnt*per columns; samples split over the pool
 * (each sample's columns one thread's: the same bits for any thread
 * count). */
static void s_bf16_chunk_rows(uint16_t *col, uint16_t *gg, size_t ld, const uint8_t *xq,
                              const float *dout, const nn_conv_dims *d, int n0, int cnt)
{
    uint16_t tab[256]; /* bf16 of each code, exact */
    for (int q = 0; q < 256; q++)
        tab[q] = lp_bf16_from_f32((float)q);
    const size_t per = s_wgrad_bf16_cols(d), T = (size_t)d->KH * d->KW;
    s_low_job jb = {col, gg, xq, dout, d, tab, per, ld, n0};
    s_low_run r = {&jb, cnt};
    const size_t work = (((size_t)d->C + 1) * T + d->OC) * cnt * per;
    int nt = nn_pool_threads();
    nt = nt > cnt ? cnt : nt;
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 14))
        nt--;
    nn_pool_run(nt < 1 ? 1 : nt, s_bf16_sample_worker, &r);
}

typedef struct {
    float *dw;
    const float *D, *E; /* E: NULL on the FP32 path */
    double sx, mx;
    size_t rows;        /* rows of T taps: OC (bf16: C*T each) or OC*C (FP32) */
    int CT, T, K;
} s_dw_job;

/* Thread t's rows of the final dw update: bf16, dw[oc][k] += sx*D[oc][k] +
 * mx*E[oc][k % T] (rows of C*T); FP32, dw[r][kh*K + kw] += D[r][kw*K + kh]
 * (the sums in variant order, rows of T).  Each row one thread's. */
static void s_dw_worker(void *arg, int t, int nt)
{
    const s_dw_job *j = arg;
    size_t r0, r1;
    nn_pool_share(j->rows, t, nt, 1, &r0, &r1);
    for (size_t r = r0; r < r1; r++) {
        if (j->E) {
            const size_t CT = (size_t)j->CT;
            for (size_t k = 0; k < CT; k++)
                j->dw[r * CT + k] += (float)(j->sx * j->D[r * CT + k] +
                                             j->mx * j->E[r * (size_t)j->T + k % (size_t)j->T]);
        } else {
            const int K = j->K;
            for (int u = 0; u < j->T; u++)
                j->dw[r * (size_t)j->T + (size_t)(u % K) * K + u / K] += j->D[r * (size_t)j->T + u];
        }
    }
}

/* The final dw update of s_dw_worker over the pool (rows of one thread:
 * the same bits for any thread count). */
static void s_dw_run(s_dw_job *j)
{
    const size_t work = j->rows * (size_t)(j->E ? j->CT : j->T);
    int nt = nn_pool_threads();
    nt = (size_t)nt > j->rows ? (int)j->rows : nt;
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 13))
        nt--;
    nn_pool_run(nt < 1 ? 1 : nt, s_dw_worker, j);
}

/* Byte offset of the sums in a part of s_wgrad_bf16 (after the rows). */
static size_t s_bf16_sums_at(const nn_conv_dims *d)
{
    const size_t cs = (size_t)s_wgrad_bf16_nb(d) * s_wgrad_bf16_cols(d);
    const size_t T = (size_t)d->KH * d->KW, shift = (size_t)lp_conv_shift_geom(d);
    const size_t rows = shift ? (size_t)d->C + 1 : (size_t)d->C * T + T;
    return LP_ALIGN64((rows + (size_t)d->OC) * cs * 2);
}

/* Samples [s0, s1) of s_wgrad_bf16 into the sums D (OC, C*T) and E (OC, T)
 * of the part at sp (zeroed first), chunk by chunk. */
static void s_bf16_range(const void *job, unsigned char *sp, int s0, int s1)
{
    const s_parts_job *jb = job;
    const nn_conv_dims *d = jb->d;
    const int C = d->C, OC = d->OC, W = d->W, KW = d->KW, pad = d->pad;
    const int T = d->KH * KW, nb = s_wgrad_bf16_nb(d), shift = lp_conv_shift_geom(d);
    const int Wp = W + 2 * pad, nx = shift ? C : C * T, n1 = shift ? 1 : T;
    const size_t per = s_wgrad_bf16_cols(d), jlo = shift ? (size_t)pad * Wp + pad : 0;
    uint16_t *gx = (uint16_t *)(void *)sp;
    float *D = (float *)(void *)(sp + s_bf16_sums_at(d)), *E = D + (size_t)OC * C * T;
    static const int zero = 0;
    int toff[LP_SHIFT_TMAX];
    for (int t = 0; shift && t < T; t++)
        toff[t] = (t / KW - pad) * Wp + (t % KW - pad);
    memset(D, 0, (size_t)OC * (C + 1) * T * 4);
    /* rows ld lanes apart whatever the chunk's size, so the ones rows are
     * built once, for the largest chunk, and every chunk reads them */
    const size_t ld = (size_t)nb * per;
    uint16_t *ones = gx + (size_t)nx * ld, *gg = ones + (size_t)n1 * ld;
    s_bf16_ones(ones, d, per, ld, s1 - s0 < nb ? s1 - s0 : nb, shift);
    for (int n0 = s0; n0 < s1; n0 += nb) {
        const int cnt = s1 - n0 < nb ? s1 - n0 : nb;
        const size_t n = (size_t)cnt * per - 2 * jlo;
        if (shift) {
            s_bf16_grids(gx, gg, ld, jb->sv->xq, jb->dout, d, n0, cnt);
            lp_shiftdot_bf16(D, (size_t)C * T, gg + jlo, ld, OC, gx + jlo, ld, C, toff, T, n);
            lp_shiftdot_bf16(E, (size_t)T, gg + jlo, ld, OC, ones + jlo, ld, 1, toff, T, n);
        } else {
            s_bf16_chunk_rows(gx, gg, ld, jb->sv->xq, jb->dout, d, n0, cnt);
            lp_shiftdot_bf16(D, (size_t)C * T, gg, ld, OC, gx, ld, C * T, &zero, 1, n);
            lp_shiftdot_bf16(E, (size_t)T, gg, ld, OC, ones, ld, T, &zero, 1, n);
        }
    }
}

/* dw (OC, C, KH, KW) += the conv weight gradient in bf16 (lp_bf16.h): with
 * x = sx*q + mx inside the image,
 *   dw[oc][c][t] += sx * D[oc][c][t] + mx * E[oc][t],
 *   D = sum_j bf16(g[oc][j]) q[c][tap t of j],  E = sum_j bf16(g[oc][j]) [tap t inside],
 * E read from rows of ones over the image (zero in the padding).  Stride-1
 * same convs read shifted rows of zero-bordered grids (one ones grid);
 * others an im2col of the codes (one ones row per tap).  Only dout is
 * rounded (the codes are exact in bf16); sums in FP32.  Samples split over
 * the pool in parts (top of the file).  Scratch: lp_conv_wgrad_bytes(d). */
static void s_wgrad_bf16(float *dw, const float *dout, const lp_qsaved *sv, const nn_conv_dims *d,
                         void *scratch)
{
    const int C = d->C, OC = d->OC, T = d->KH * d->KW;
    const size_t nsum = (size_t)OC * (C + 1) * T;
    s_parts_job j = {dout, sv, d, scratch, s_wgrad_bf16_bytes(d), s_bf16_range};
    float *D = s_parts_run(&j, nsum * (size_t)d->N * s_wgrad_bf16_cols(d), s_bf16_sums_at(d), nsum);
    s_dw_job dj = {dw, D, D + (size_t)OC * C * T, sv->xp.scale, sv->xp.min, (size_t)OC, C * T,
                   T, d->KW};
    s_dw_run(&dj);
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

typedef struct {
    float *gx, *gg;
    size_t vlen;
    const lp_qsaved *sv;
    const float *dout;
    const nn_conv_dims *d;
    int n0, cnt;
} s_f32_job;

/* Row r of s_f32_grids: input channel r (its V variants) for r < C, else
 * gradient channel r - C. */
static void s_f32_grid_row(const s_f32_job *jb, int r)
{
    const nn_conv_dims *d = jb->d;
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, pad = d->pad, V = 2 * pad + 1;
    const size_t P = (size_t)H * W, J0 = (size_t)pad + (size_t)pad * W, vlen = jb->vlen;
    const size_t srow = (size_t)(H + pad) * W;
    if (r >= C) {
        const int oc = r - C;
        s_f32_zero_pads(jb->gg + (size_t)oc * vlen, vlen, jb->cnt, H, W, pad);
        for (int j = 0; j < jb->cnt; j++)
            memcpy(jb->gg + (size_t)oc * vlen + J0 + (size_t)j * srow,
                   jb->dout + ((size_t)(jb->n0 + j) * OC + oc) * P, P * sizeof(float));
        return;
    }
    const int c = r;
    for (int v = 0; v < V; v++)
        s_f32_zero_pads(jb->gx + ((size_t)c * V + v) * vlen, vlen, jb->cnt, H, W, pad);
    for (int j = 0; j < jb->cnt; j++) {
        float *g0 = jb->gx + (size_t)c * V * vlen + J0 + (size_t)j * srow;
        float *gc = g0 + (size_t)pad * vlen; /* dx = 0: the plane as it is */
        lp_kern()->dequantize(gc, jb->sv->xq + ((size_t)(jb->n0 + j) * C + c) * P, P,
                              jb->sv->xp);
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
}

static void s_f32_grids_worker(void *arg, int t, int nt)
{
    const s_f32_job *jb = arg;
    size_t r0, r1;
    nn_pool_share((size_t)jb->d->C + jb->d->OC, t, nt, 1, &r0, &r1);
    for (size_t r = r0; r < r1; r++)
        s_f32_grid_row(jb, (int)r);
}

/* The FP32 grids of one chunk (samples [n0, n0 + cnt)) in s_shift_grid's
 * layout, in floats: gx (C rows of V = 2 pad + 1 variants of vlen lanes)
 * the dequantized codes, variant v (column shift dx = v - pad) with the
 * columns zeroed that only a read wrapping into the neighbouring row
 * reaches; gg (OC rows of vlen) dout.  Image rows are W lanes (no pad
 * columns) and samples share their pad rows, so the shifted dot runs over
 * (H + pad) * W lanes a sample instead of (H + 2 pad) * (W + 2 pad): 72
 * instead of 100 on resnet20's 8x8 images.  Overwrites both; channel rows
 * split over the pool (each row one thread's). */
static void s_f32_grids(float *gx, float *gg, size_t vlen, const lp_qsaved *sv,
                        const float *dout, const nn_conv_dims *d, int n0, int cnt)
{
    s_f32_job jb = {gx, gg, vlen, sv, dout, d, n0, cnt};
    const size_t work = ((size_t)d->C * (2 * d->pad + 1) + d->OC) * cnt * d->H * d->W;
    int nt = nn_pool_threads();
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 14))
        nt--;
    nn_pool_run(nt, s_f32_grids_worker, &jb);
}

typedef struct {
    float *D;
    const float *A, *B;
    size_t ldd, lda, ldb, n;
    const int *toff;
    int M, nch, T;
} s_f32_dot_job;

/* Thread t's rows of the FP32 shifted dot: rows [m0, m1) in multiples of
 * 4 (every level's row tile; a row's sums never depend on its tile
 * mates), so each row's sums are those of one call. */
static void s_f32_dot_worker(void *arg, int t, int nt)
{
    const s_f32_dot_job *j = arg;
    size_t m0, m1;
    nn_pool_share((size_t)j->M, t, nt, 4, &m0, &m1);
    if (m1 > m0)
        nn_shiftdot(j->D + m0 * j->ldd, j->ldd, j->A + m0 * j->lda, j->lda, (int)(m1 - m0), j->B,
                    j->ldb, j->nch, j->toff, j->T, j->n);
}

/* nn_shiftdot split over the pool by rows of A (and D). */
static void s_f32_dot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                      size_t ldb, int nch, const int *toff, int T, size_t n)
{
    const size_t work = (size_t)M * nch * T * n;
    int nt = nn_pool_threads();
    nt = nt > M / 4 ? M / 4 : nt;
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 18))
        nt--;
    s_f32_dot_job j = {D, A, B, ldd, lda, ldb, n, toff, M, nch, T};
    nn_pool_run(nt < 1 ? 1 : nt, s_f32_dot_worker, &j);
}

/* Byte offset of the sums in a part of s_wgrad_f32 (after the grids). */
static size_t s_f32_sums_at(const nn_conv_dims *d)
{
    return LP_ALIGN64(((size_t)d->C * (2 * (size_t)d->pad + 1) + (size_t)d->OC) *
                      s_wgrad_f32_vlen(d) * 4);
}

/* Samples [s0, s1) of s_wgrad_f32 into the sums Dt (OC*C, T in variant
 * order) of the part at sp (zeroed first), chunk by chunk. */
static void s_f32_range(const void *job, unsigned char *sp, int s0, int s1)
{
    const s_parts_job *jb = job;
    const nn_conv_dims *d = jb->d;
    const int C = d->C, OC = d->OC, H = d->H, W = d->W, K = d->KH, pad = d->pad;
    const int T = K * K, V = 2 * pad + 1, nb = s_wgrad_bf16_nb(d);
    const size_t vlen = s_wgrad_f32_vlen(d), J0 = (size_t)pad + (size_t)pad * W;
    float *gx = (float *)(void *)sp, *gg = gx + (size_t)C * V * vlen;
    float *Dt = (float *)(void *)(sp + s_f32_sums_at(d));
    /* tap (kh, kw) reads variant kw, shifted by rows and columns; the taps
     * go variant by variant (u = kw*K + kh), so the rows nn's dot reads
     * together are one variant W lanes apart (a read stream the others
     * follow in L1), not three variants; Dt holds the sums in that order */
    int toff[LP_SHIFT_TMAX];
    for (int u = 0; u < T; u++)
        toff[u] = (int)((size_t)(u / K) * vlen) + (u % K - pad) * W + (u / K - pad);
    memset(Dt, 0, (size_t)OC * C * T * 4);
    for (int n0 = s0; n0 < s1; n0 += nb) {
        const int cnt = s1 - n0 < nb ? s1 - n0 : nb;
        const size_t n = ((size_t)cnt * (H + pad) - pad) * W;
        s_f32_grids(gx, gg, vlen, jb->sv, jb->dout, d, n0, cnt);
        s_f32_dot(Dt, (size_t)C * T, gg + J0, vlen, OC, gx + J0, (size_t)V * vlen, C, toff, T, n);
    }
}

/* dw (OC, C, K, K) += the FP32 weight gradient of a stride-1 same conv:
 * nn's shifted dot (nn_shiftdot) on grids the saved codes are dequantized
 * straight into (no dequantized copy of the input), in the shift path's
 * layout (s_f32_grids).  Samples split over the pool in parts (top of the
 * file).  Scratch: lp_conv_wgrad_bytes(d). */
static void s_wgrad_f32(float *dw, const float *dout, const lp_qsaved *sv, const nn_conv_dims *d,
                        void *scratch)
{
    const int C = d->C, OC = d->OC, K = d->KH, T = K * K;
    const size_t nsum = (size_t)OC * C * T;
    s_parts_job j = {dout, sv, d, scratch, s_wgrad_f32_bytes(d), s_f32_range};
    float *Dt = s_parts_run(&j, nsum * (size_t)d->N * d->H * d->W, s_f32_sums_at(d), nsum);
    s_dw_job dj = {dw, Dt, NULL, 0, 0, (size_t)OC * C, C * T, T, K};
    s_dw_run(&dj);
}

typedef struct {
    float *db;
    const float *dout;
    int N, OC, P;
} s_bias_job;

/* Thread t's channels of the bias gradient, every sample in order. */
static void s_bias_worker(void *arg, int t, int nt)
{
    const s_bias_job *j = arg;
    size_t o0, o1;
    nn_pool_share((size_t)j->OC, t, nt, 1, &o0, &o1);
    for (size_t oc = o0; oc < o1; oc++)
        for (int n = 0; n < j->N; n++) {
            const float *g = j->dout + ((size_t)n * j->OC + oc) * j->P;
            float s = 0;
            for (int p = 0; p < j->P; p++)
                s += g[p];
            j->db[oc] += s;
        }
}

/* db (OC) += sum of dout over samples and pixels: per channel a pixel sum
 * per sample, added sample by sample.  Channels split over the pool (each
 * channel one thread's: the same bits for any thread count). */
static void s_bias_grad(float *db, const float *dout, int N, int OC, int P)
{
    s_bias_job j = {db, dout, N, OC, P};
    int nt = nn_pool_threads();
    nt = nt > OC ? OC : nt;
    while (nt > 1 && (size_t)N * OC * P / (size_t)nt < ((size_t)1 << 15))
        nt--;
    nn_pool_run(nt < 1 ? 1 : nt, s_bias_worker, &j);
}

size_t lp_conv_wgrad_bytes(const nn_conv_dims *d)
{
    /* a chunk of dequantized input + nn's scratch ... */
    nn_conv_dims dc = *d;
    dc.N = s_wgrad_nb(d);
    size_t bw = LP_ALIGN64((size_t)dc.N * d->C * d->H * d->W * sizeof(float)) +
                LP_ALIGN64(nn_conv_scratch_floats(&dc) * sizeof(float));
    /* ... or the weight gradients built from the codes (bf16, FP32) */
    size_t bb = s_wgrad_bf16_bytes(d), bf = s_wgrad_f32_bytes(d);
    bb *= (size_t)lp_conv_parts(d, bb); /* the threads' parts */
    bf *= (size_t)lp_conv_parts(d, bf);
    bw = bw > bb ? bw : bb;
    bw = bw > bf ? bw : bf;
    return bw;
}

/* dw and db (either may be NULL) += the gradients through nn's FP32 conv
 * backward (no din) on the dequantized codes, in chunks of nw samples: the
 * dequantized chunk is still in cache when the conv reads it, and the
 * scratch stays small.  db alone: s_bias_grad. */
static void s_wgrad_nn(float *dw, float *db, const float *dout, const lp_qsaved *sv,
                       const nn_conv_dims *d, void *scratch)
{
    const int N = d->N, OC = d->OC, P = d->OH * d->OW;
    const size_t xper = (size_t)d->C * d->H * d->W;
    if (!dw) {
        s_bias_grad(db, dout, N, OC, P);
        return;
    }
    const int nw = s_wgrad_nb(d);
    nn_conv_dims dc = *d;
    dc.N = nw;
    unsigned char *wsp = (unsigned char *)scratch;
    float *xf = lp_take(&wsp, (size_t)nw * xper * sizeof(float));
    float *nscr = lp_take(&wsp, nn_conv_scratch_floats(&dc) * sizeof(float));
    for (int n0 = 0; n0 < N; n0 += nw) {
        dc.N = N - n0 < nw ? N - n0 : nw;
        lp_dequantize(xf, sv->xq + (size_t)n0 * xper, (size_t)dc.N * xper, sv->xp);
        nn_conv2d_backward(NULL, dw, db, dout + (size_t)n0 * OC * P, xf, NULL, &dc, nscr);
    }
}

void lp_conv_wgrad(float *dw, float *db, const float *dout, const lp_qsaved *sv,
                   const nn_conv_dims *d, void *scratch)
{
    /* bf16 on the codes where the CPU has it (s_wgrad_bf16); else FP32,
     * straight from the codes on the shift geometry (s_wgrad_f32), through
     * nn's FP32 conv backward on the dequantized codes otherwise */
    if (dw && (s_wgrad_bf16_on(d) || lp_conv_shift_geom(d))) {
        if (s_wgrad_bf16_on(d))
            s_wgrad_bf16(dw, dout, sv, d, scratch);
        else
            s_wgrad_f32(dw, dout, sv, d, scratch);
        if (db)
            s_bias_grad(db, dout, d->N, d->OC, d->OH * d->OW);
    } else if (dw || db) {
        s_wgrad_nn(dw, db, dout, sv, d, scratch);
    }
}
