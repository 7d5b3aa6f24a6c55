/* lp_quant — see lp_quant.h.  Scalar reference kernels, run-time dispatch
 * through the kernel table (lp_kern.h: the SIMD versions in
 * lp_quant_<isa>.c) and the range helpers.  The portable path of every
 * kernel is its _ref. */
#include "lowprec/lp_quant.h"

#include <assert.h>
#include <math.h>

#include "lowprec/lp_kern.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_pool.h"

lp_qparams lp_qparams_from_range(float min, float max)
{
    lp_qparams p;
    float s = (max - min) / 255.0f;
    p.scale = s > LP_MIN_SCALE ? s : LP_MIN_SCALE;
    p.min = min;
    return p;
}

float lp_sr_noise(uint64_t seed, uint32_t index)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    uint32_t h = lp_noise_bits(index, k1, k2);
    return (float)(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
}

/* clamp to [0,255] exactly as vmaxps(t,0) / vminps(t,255) do (NaN -> 0),
 * then round to nearest even as vcvtps2dq does under the default MXCSR. */
static inline uint8_t s_code(float t)
{
    t = t > 0.0f ? t : 0.0f;
    t = t < 255.0f ? t : 255.0f;
    return (uint8_t)(int)rintf(t);
}

void lp_minmax_ref(float *mn, float *mx, const float *x, size_t n)
{
    assert(n > 0);
    float a = x[0], b = x[0];
    for (size_t i = 1; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *mn = a;
    *mx = b;
}

void lp_quantize_ref(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    for (size_t i = 0; i < n; i++)
        q[i] = s_code((x[i] - p.min) / p.scale);
}

void lp_quantize_sr_ref(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    for (size_t i = 0; i < n; i++) {
        uint32_t h = lp_noise_bits((uint32_t)(first + i), k1, k2);
        float u = (float)(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
        float t = (x[i] - p.min) / p.scale;
        t = t + u;
        q[i] = s_code(t);
    }
}

void lp_dequantize_ref(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    for (size_t i = 0; i < n; i++) {
        float v = (float)q[i] * p.scale; /* separate statements: no FMA */
        x[i] = v + p.min;
    }
}

void lp_fake_quant_sr_ref(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t k;
        lp_quantize_sr_ref(&k, &x[i], 1, p, seed, (uint32_t)(first + i));
        lp_dequantize_ref(&y[i], &k, 1, p);
        if (q)
            q[i] = k;
    }
}

void lp_fake_quant_sr_add_ref(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t k;
        float v;
        lp_quantize_sr_ref(&k, &x[i], 1, p, seed, (uint32_t)(first + i));
        lp_dequantize_ref(&v, &k, 1, p);
        y[i] = y[i] + v;
    }
}

/* ---- dispatch (lp_kern.h) ------------------------------------------------ */

void lp_minmax(float *mn, float *mx, const float *x, size_t n)
{
    assert(n > 0);
    lp_kern()->minmax(mn, mx, x, n);
}

void lp_quantize(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    lp_kern()->quantize(q, x, n, p);
}

/* ---- threads (nn_pool.h) ---------------------------------------------------
 * The element-wise kernels split n into pieces of whole 64-element blocks,
 * one per thread; element i keeps its noise index first + i, so the codes
 * and values are those of one call for any thread count. */

typedef enum { S_Q_SR, S_DEQ, S_FQ_SR, S_FQ_SR_ADD } s_elt_kind;

typedef struct {
    s_elt_kind kind;
    float *y;
    uint8_t *q;
    const float *x;
    const uint8_t *qin;
    size_t n;
    lp_qparams p;
    uint64_t seed;
    uint32_t first;
} s_elt_job;

/* Elements per thread below which one thread does the work. */
#define S_ELT_MIN ((size_t)1 << 15)

static void s_elt_worker(void *arg, int t, int nt)
{
    const s_elt_job *j = arg;
    const lp_kern_t *k = lp_kern();
    size_t lo, hi;
    nn_pool_share(j->n, t, nt, 64, &lo, &hi);
    if (hi <= lo)
        return;
    const size_t m = hi - lo;
    const uint32_t f = j->first + (uint32_t)lo;
    switch (j->kind) {
    case S_Q_SR: k->quantize_sr(j->q + lo, j->x + lo, m, j->p, j->seed, f); break;
    case S_DEQ: k->dequantize(j->y + lo, j->qin + lo, m, j->p); break;
    case S_FQ_SR:
        k->fake_quant_sr(j->y + lo, j->q ? j->q + lo : NULL, j->x + lo, m, j->p, j->seed, f);
        break;
    case S_FQ_SR_ADD: k->fake_quant_sr_add(j->y + lo, j->x + lo, m, j->p, j->seed, f); break;
    }
}

static void s_elt_run(s_elt_job *j)
{
    int nt = nn_pool_threads();
    while (nt > 1 && j->n / (size_t)nt < S_ELT_MIN)
        nt--;
    nn_pool_run(nt, s_elt_worker, j);
}

void lp_quantize_sr(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                    uint32_t first)
{
    s_elt_job j = {.kind = S_Q_SR, .q = q, .x = x, .n = n, .p = p, .seed = seed, .first = first};
    s_elt_run(&j);
}

void lp_dequantize(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    s_elt_job j = {.kind = S_DEQ, .y = x, .qin = q, .n = n, .p = p};
    s_elt_run(&j);
}

void lp_fake_quant_sr(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                      uint64_t seed, uint32_t first)
{
    s_elt_job j = {.kind = S_FQ_SR, .y = y, .q = q, .x = x, .n = n, .p = p, .seed = seed,
                   .first = first};
    s_elt_run(&j);
}

void lp_fake_quant_sr_add(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                          uint32_t first)
{
    s_elt_job j = {.kind = S_FQ_SR_ADD, .y = y, .x = x, .n = n, .p = p, .seed = seed,
                   .first = first};
    s_elt_run(&j);
}

/* ---- helpers ----------------------------------------------------------- */

void lp_dequantize_lut(float *lut, lp_qparams p)
{
    for (int k = 0; k < 256; k++) {
        uint8_t q = (uint8_t)k;
        lp_dequantize_ref(&lut[k], &q, 1, p);
    }
}

void lp_fake_quant(float *y, const float *x, size_t n, lp_qparams p, int stochastic,
                   uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t k;
        if (stochastic)
            lp_quantize_sr_ref(&k, &x[i], 1, p, seed, (uint32_t)i);
        else
            lp_quantize_ref(&k, &x[i], 1, p);
        lp_dequantize_ref(&y[i], &k, 1, p);
    }
}

typedef struct {
    float mn[NN_POOL_MAX_THREADS], mx[NN_POOL_MAX_THREADS];
    const float *x;
    size_t n;
} s_minmax_job;

/* Thread t's piece of the whole-tensor min/max: whole 64-element blocks. */
static void s_minmax_worker(void *arg, int t, int nt)
{
    s_minmax_job *j = arg;
    size_t lo, hi;
    nn_pool_share(j->n, t, nt, 64, &lo, &hi);
    if (hi > lo)
        lp_kern()->minmax(&j->mn[t], &j->mx[t], j->x + lo, hi - lo);
}

/* The min and max of x (n > 0) split over the pool: the pieces' extremes
 * combined in piece order with the kernels' compare (x < a, x > b); a min
 * or max is the same number whichever piece holds it (signed zeros aside,
 * whose sign no code or value depends on), so any thread count gives the
 * range of one call. */
static void s_minmax_split(float *mn, float *mx, const float *x, size_t n)
{
    int nt = nn_pool_threads();
    while (nt > 1 && n / (size_t)nt < S_ELT_MIN)
        nt--;
    if (nt == 1) {
        lp_minmax(mn, mx, x, n);
        return;
    }
    s_minmax_job j = {.x = x, .n = n};
    nn_pool_run(nt, s_minmax_worker, &j);
    float a = 0, b = 0;
    int any = 0;
    for (int t = 0; t < nt; t++) {
        size_t lo, hi;
        nn_pool_share(n, t, nt, 64, &lo, &hi);
        if (hi <= lo)
            continue;
        a = !any || j.mn[t] < a ? j.mn[t] : a;
        b = !any || j.mx[t] > b ? j.mx[t] : b;
        any = 1;
    }
    *mn = a;
    *mx = b;
}

lp_qparams lp_tensor_qparams(const float *x, size_t n)
{
    float mn, mx;
    s_minmax_split(&mn, &mx, x, n);
    return lp_qparams_from_range(mn, mx);
}

typedef struct {
    float *mn, *mx; /* (N) per-sample min and max */
    const float *x;
    size_t per;
    int N;
} s_range_job;

static void s_range_worker(void *arg, int t, int nt)
{
    const s_range_job *j = arg;
    size_t lo, hi;
    nn_pool_share((size_t)j->N, t, nt, 1, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        lp_minmax(&j->mn[i], &j->mx[i], j->x + i * j->per, j->per);
}

/* Samples per call whose ranges a stack buffer holds; more go in rounds. */
#define S_RANGE_MAXN 256

void lp_batch_range(float *mn, float *mx, const float *x, int N, size_t per)
{
    assert(N > 0 && per > 0);
    double smin = 0.0, smax = 0.0;
    float a[S_RANGE_MAXN], b[S_RANGE_MAXN];
    for (int i0 = 0; i0 < N; i0 += S_RANGE_MAXN) {
        const int cnt = N - i0 < S_RANGE_MAXN ? N - i0 : S_RANGE_MAXN;
        s_range_job j = {a, b, x + (size_t)i0 * per, per, cnt};
        int nt = nn_pool_threads();
        nt = nt > cnt ? cnt : nt;
        while (nt > 1 && (size_t)cnt * per / (size_t)nt < S_ELT_MIN)
            nt--;
        nn_pool_run(nt, s_range_worker, &j);
        for (int i = 0; i < cnt; i++) { /* in sample order: any thread count */
            smin += a[i];
            smax += b[i];
        }
    }
    *mn = (float)(smin / N);
    *mx = (float)(smax / N);
}

lp_qparams lp_act_qparams(float *run_range, const float *x, int N, size_t per, int train)
{
    if (!train)
        return lp_qparams_from_range(run_range[0], run_range[1]);
    float mn, mx;
    lp_batch_range(&mn, &mx, x, N, per);
    run_range[0] = 0.1f * run_range[0] + 0.9f * mn;
    run_range[1] = 0.1f * run_range[1] + 0.9f * mx;
    return lp_qparams_from_range(mn, mx);
}
