/* lp_norm — Range EvoNorm (B0 with a range-based scale) for 8-bit training
 * (lp_layers.h).
 *
 * Owns:    the Range EvoNorm core on floats or on uint8 codes (read one group
 *          at a time, never a whole dequantized tensor): the per-group
 *          range over 16 chunks, its floor at the quantization step, the
 *          forward and backward rows; the row kernels' scalar twins
 *          (lp_ren_row_*_ref, lp_find_eq_ref, lp_minmax_u8_ref,
 *          lp_find_u8_ref); the integer op that quantizes its input,
 *          parameters and incoming gradient around the core.
 * Exposes: the lp_ren_* and lp_range_evonorm_* functions of lp_layers.h.
 * Callers: lp_model.c, tests, bench.
 */
#include "lowprec/lp_layers.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "lowprec/lp_kern.h"
#include "lowprec/lp_layer_common.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_pool.h"

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

/* Threads whose parameter-gradient sums the backward's scratch holds (the
 * sample split of s_ren_backward; thread 0 sums into the gradients). */
#define S_REN_PARTS 16

size_t lp_ren_scratch_floats(int N, int C, int HW)
{
    size_t n = (size_t)N * C * HW;
    return 2 * (size_t)C * HW + (n + 3) / 4 + 3 * (size_t)C + 3 * (size_t)C * (S_REN_PARTS - 1);
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

size_t lp_find_eq_ref(const float *x, size_t n, float v)
{
    size_t i = 0;
    while (i < n && x[i] != v)
        i++;
    return i;
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

/* Threads of a Range EvoNorm pass (nn_pool.h): at most G (thread t uses
 * group buffer slot t, 2T floats, of the 2*C*HW of scratch), fewer when
 * there is little work. */
static int s_ren_threads(int N, int C, int HW, int G)
{
    int nt = nn_pool_threads();
    nt = nt > G ? G : nt;
    while (nt > 1 && (size_t)N * C * HW / (size_t)nt < ((size_t)1 << 14))
        nt--;
    return nt < 1 ? 1 : nt;
}

typedef struct {
    float *out;
    const float *sq;
    s_vals x;
    const float *gamma, *beta, *v;
    int N, C, HW, G;
    float *buf;
} s_ren_fwd_job;

/* Thread t's (sample, group) pairs of the forward's output pass. */
static void s_ren_fwd_worker(void *arg, int t, int nt)
{
    const s_ren_fwd_job *j = arg;
    const lp_kern_t *kern = lp_kern();
    const int C = j->C, HW = j->HW, G = j->G, cg = C / G, T = cg * HW;
    float *buf = j->buf ? j->buf + (size_t)2 * T * t : NULL;
    size_t p0, p1;
    nn_pool_share((size_t)j->N * G, t, nt, 1, &p0, &p1);
    for (size_t p = p0; p < p1; p++) {
        const int n = (int)(p / (size_t)G), g = (int)(p % (size_t)G);
        const size_t off = ((size_t)n * C + (size_t)g * cg) * HW;
        const float *xg = s_vals_at(j->x, off, (size_t)T, buf);
        for (int k = 0; k < cg; k++) {
            const int ch = g * cg + k;
            kern->ren_row_fwd(j->out + off + (size_t)k * HW, xg + (size_t)k * HW, (size_t)HW,
                              j->v[ch], j->sq[n * G + g], j->gamma[ch], j->beta[ch]);
        }
    }
}

typedef struct {
    float *s;
    s_vals x;
    const float *lut; /* the codes' values when x is codes */
    int N, C, HW, G;
    float c, rmin;
} s_ren_range_job;

/* Thread t's (sample, group) pairs of the forward's range pass: each
 * group's R from its 16 chunk ranges, s = 1 / (R*c + eps); every pair is
 * one thread's, so s is that of one call for any thread count. */
static void s_ren_range_worker(void *arg, int t, int nt)
{
    const s_ren_range_job *j = arg;
    const lp_kern_t *kern = lp_kern();
    const int C = j->C, HW = j->HW, G = j->G, cg = C / G, T = cg * HW;
    size_t p0, p1;
    nn_pool_share((size_t)j->N * G, t, nt, 1, &p0, &p1);
    for (size_t p = p0; p < p1; p++) {
        const int n = (int)(p / (size_t)G), g = (int)(p % (size_t)G);
        const size_t off = ((size_t)n * C + (size_t)g * cg) * HW;
        float smax = 0, smin = 0;
        for (int k = 0; k < 16; k++) {
            int st, len;
            lp_ren_chunk(T, k, &st, &len);
            float mn, mx;
            if (j->x.f) {
                kern->minmax(&mn, &mx, j->x.f + off + st, (size_t)len);
            } else { /* the values of the extreme codes (monotone) */
                uint8_t a, b;
                kern->minmax_u8(&a, &b, j->x.q + off + st, (size_t)len);
                mn = j->lut[a];
                mx = j->lut[b];
            }
            smax += mx;
            smin += mn;
        }
        float R = smax / 16.0f - smin / 16.0f;
        R = R < j->rmin ? j->rmin : R;
        j->s[p] = 1.0f / (R * j->c + 1e-5f);
    }
}

/* lp_ren_core_forward on x in either form; buf: 2*C*HW floats when x is
 * codes (a slot per thread of the output pass, split over the pool);
 * qstep: the quantization step of x (s_range_floor; 0: none). */
static void s_ren_forward(float *out, float *s, float *sq, s_vals x, const float *gamma,
                          const float *beta, const float *v, int N, int C, int HW, int G,
                          int quant_s, float qstep, float *buf)
{
    assert(G > 0 && C % G == 0);
    const int cg = C / G, T = cg * HW;
    assert(T >= 32);
    const float c = s_range_c(T), rmin = s_range_floor(qstep, c);
    s_ren_range_job rj = {s, x, NULL, N, C, HW, G, c, rmin};
    float lut[256];
    if (!x.f) {
        lp_dequantize_lut(lut, x.p);
        rj.lut = lut;
    }
    nn_pool_run(s_ren_threads(N, C, HW, G), s_ren_range_worker, &rj);
    if (quant_s)
        lp_fake_quant(sq, s, (size_t)N * G, lp_tensor_qparams(s, (size_t)N * G), 0, 0);
    else
        memcpy(sq, s, (size_t)N * G * sizeof(float));
    s_ren_fwd_job j = {out, sq, x, gamma, beta, v, N, C, HW, G, buf};
    nn_pool_run(s_ren_threads(N, C, HW, G), s_ren_fwd_worker, &j);
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
    const lp_kern_t *kern = lp_kern();
    if (x.f) {
        /* the chunk's max and min (SIMD), then the first index holding each
         * (same as a running strict comparison; never NaN here) */
        float cmn, cmx;
        lp_minmax(&cmn, &cmx, xg + st, len);
        *amax = st + kern->find_eq(xg + st, len, cmx);
        *amin = st + kern->find_eq(xg + st, len, cmn);
        return;
    }
    const uint8_t *q = x.q + off + st;
    uint8_t a, b;
    kern->minmax_u8(&a, &b, q, len);
    int lo = b, hi = a;
    while (lo > 0 && lut[lo - 1] == lut[b])
        lo--;
    while (hi < 255 && lut[hi + 1] == lut[a])
        hi++;
    *amax = st + kern->find_u8(q, len, (uint8_t)lo, 255);
    *amin = st + kern->find_u8(q, len, 0, (uint8_t)hi);
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

typedef struct {
    float *dx, *dgamma, *dbeta, *dv;
    s_vals gv, x;
    const float *s, *sq, *gamma, *v, *lut;
    int N, C, HW, G;
    float c, rmin, *buf;
    float *part; /* the sample split: thread t >= 1's sums at part + 3C(t-1) */
} s_ren_bwd_job;

/* The backward of sample n's group gr: dx (where asked) and the group's
 * channels' dgamma, dbeta, dv sums added to dgam, dbet, dv; buf: this
 * thread's 2T slot (codes) or NULL. */
static void s_ren_bwd_group(const s_ren_bwd_job *j, int n, int gr, float *buf, float *dgam,
                            float *dbet, float *dv)
{
    const lp_kern_t *kern = lp_kern();
    const int C = j->C, HW = j->HW, G = j->G, cg = C / G, T = cg * HW;
    const size_t off = ((size_t)n * C + (size_t)gr * cg) * HW;
    const float *xg = s_vals_at(j->x, off, (size_t)T, buf);
    const float *gg = s_vals_at(j->gv, off, (size_t)T, buf ? buf + T : NULL);
    float *dg = j->dx ? j->dx + off : NULL;
    const float sc = j->sq[n * G + gr];
    double dsq = 0;
    for (int k = 0; k < cg; k++) {
        const int ch = gr * cg + k;
        const size_t ro = (size_t)k * HW;
        /* sums: dout, dout*nrm, dnrm*x*x over the values where h' != 0 */
        double sums[3] = {0, 0, 0};
        kern->ren_row_bwd(dg ? dg + ro : NULL, sums, xg + ro, gg + ro, (size_t)HW, j->v[ch], sc,
                          j->gamma[ch]);
        dgam[ch] += (float)(sums[1] * sc);
        dbet[ch] += (float)sums[0];
        dv[ch] += (float)(sums[2] / 6.0);
        dsq += sums[1] * j->gamma[ch];
    }
    if (!j->dx)
        return;
    /* s = 1/(R c + eps): ds/dR = -c s^2; R = mean(max) - mean(min) */
    const float sv = j->s[n * G + gr];
    const float dR = (float)(dsq * -(double)j->c * sv * sv);
    s_ren_range_grad(dg, dR, j->rmin, j->x, xg, off, T, j->lut);
}

/* Thread t's groups [g0, g1) of the backward, every sample in order: a
 * channel's dgamma, dbeta, dv sums run over the samples as in one thread. */
static void s_ren_bwd_worker(void *arg, int t, int nt)
{
    const s_ren_bwd_job *j = arg;
    float *buf = j->buf ? j->buf + (size_t)2 * (j->C / j->G) * j->HW * t : NULL;
    size_t g0, g1;
    nn_pool_share((size_t)j->G, t, nt, 1, &g0, &g1);
    for (int n = 0; n < j->N; n++)
        for (int gr = (int)g0; gr < (int)g1; gr++)
            s_ren_bwd_group(j, n, gr, buf, j->dgamma, j->dbeta, j->dv);
}

/* Thread t's samples of the backward, every group: the samples' rows stay
 * on the core that wrote them (nn_pool.h); thread 0 sums the parameter
 * gradients into them, thread t >= 1 into its part (zeroed here). */
static void s_ren_bwd_sample_worker(void *arg, int t, int nt)
{
    const s_ren_bwd_job *j = arg;
    const size_t C = (size_t)j->C;
    float *buf = j->buf ? j->buf + (size_t)2 * (j->C / j->G) * j->HW * t : NULL;
    float *dg = j->dgamma, *db = j->dbeta, *dv = j->dv;
    if (t > 0) {
        dg = j->part + 3 * C * (size_t)(t - 1), db = dg + C, dv = db + C;
        memset(dg, 0, 3 * C * sizeof(float));
    }
    size_t n0, n1;
    nn_pool_share((size_t)j->N, t, nt, 1, &n0, &n1);
    for (size_t n = n0; n < n1; n++)
        for (int gr = 0; gr < j->G; gr++)
            s_ren_bwd_group(j, (int)n, gr, buf, dg, db, dv);
}

/* lp_ren_core_backward on g and x in either form; buf: 2*C*HW floats when
 * they are codes (a 2T slot per thread); qstep as s_ren_forward's.  part:
 * 3C(S_REN_PARTS - 1) floats, or NULL: with it the threads split the
 * samples (the same bits for a given count; at one thread the group
 * split's), without it the groups (the same bits for any count). */
static void s_ren_backward(float *dx, float *dgamma, float *dbeta, float *dv, s_vals gv,
                           s_vals x, const float *s, const float *sq, const float *gamma,
                           const float *v, int N, int C, int HW, int G, float qstep, float *buf,
                           float *part)
{
    const int cg = C / G, T = cg * HW;
    const float c = s_range_c(T), rmin = s_range_floor(qstep, c);
    float lut[256];
    if (!x.f)
        lp_dequantize_lut(lut, x.p);
    s_ren_bwd_job j = {dx, dgamma, dbeta, dv, gv, x, s, sq, gamma, v, lut, N, C, HW, G,
                       c, rmin, buf, part};
    int nt = s_ren_threads(N, C, HW, G);
    nt = part && nt > S_REN_PARTS ? S_REN_PARTS : nt;
    nt = part && nt > N ? N : nt;
    if (!part || nt == 1) {
        nn_pool_run(nt, s_ren_bwd_worker, &j);
        return;
    }
    nn_pool_run(nt, s_ren_bwd_sample_worker, &j);
    for (int t = 1; t < nt; t++) { /* the parts' sums, in thread order */
        const float *p = part + 3 * (size_t)C * (size_t)(t - 1);
        for (int ch = 0; ch < C; ch++) {
            dgamma[ch] += p[ch];
            dbeta[ch] += p[C + ch];
            dv[ch] += p[2 * C + ch];
        }
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
    s_ren_backward(dx, dgamma, dbeta, dv, gv, xv, s, sq, gamma, v, N, C, HW, G, qstep, NULL,
                   NULL);
}

/* scratch: [2*C*HW floats: group buffers | N*C*HW codes | gamma, beta, v (3C) |
 * the backward's per-thread sums 3C(S_REN_PARTS - 1)] */
void lp_range_evonorm_forward(float *out, lp_ren_saved *sv, float *run_range, const float *in,
                              const float *gamma, const float *beta, const float *v, int N,
                              int C, int HW, int G, lp_mode mode, float *scratch)
{
    const size_t n = (size_t)N * C * HW, per = (size_t)C * HW;
    float *buf = scratch, *gq = buf + 2 * per + (n + 3) / 4, *bq = gq + C, *vq = bq + C;
    sv->xp = lp_act_qparams(run_range, in, N, per, mode.train);
    lp_quant_act(sv->xq, in, n, sv->xp, mode);
    lp_param_fq(gq, gamma, (size_t)C);
    lp_param_fq(bq, beta, (size_t)C);
    lp_param_fq(vq, v, (size_t)C);
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
    lp_param_fq(gq, gamma, (size_t)C);
    lp_param_fq(vq, v, (size_t)C);
    s_vals gv = {NULL, codes, gp}, xv = {NULL, sv->xq, sv->xp};
    s_ren_backward(din, dgamma, dbeta, dv, gv, xv, sv->s, sv->sq, gq, vq, N, C, HW, G,
                   sv->xp.scale, buf, gq + 3 * (size_t)C);
}

