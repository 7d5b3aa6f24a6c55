/* test_nn_pool — the persistent worker pool (nn/nn_pool.h) and the int8
 * kernels that split over it: every share runs once, a busy pool runs a
 * second caller's shares inline, and the threaded int8 conv (forward, input
 * and bias gradients, shift and im2col paths), stochastic rounding,
 * dequantization, batch and whole-tensor ranges and Range EvoNorm give the
 * same bits at 2 and 3 threads as at 1 (the weight gradients, split by
 * samples with per-thread sums: the same bits at the same count, and
 * within FP32 rounding of 1 thread's), while a deliberately broken split
 * is caught; the same for the AMX tile paths (the shift and im2col convs,
 * the int8 linear layer's GEMMs, the bf16 weight-gradient dot) run on the
 * tile model, each worker on its own tiles; the SGD update and a model's
 * gradient accumulation (a slot read twice) split by elements; and the
 * parsing behind --threads auto. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_quant.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_core.h"
#include "nn/nn_cpu.h"
#include "nn/nn_layers.h"
#include "nn/nn_model.h"
#include "nn/nn_optim.h"
#include "nn/nn_pool.h"
#include "node/node_common.h"

/* ---- the pool ------------------------------------------------------------ */

typedef struct {
    int hits[NN_POOL_MAX_THREADS];
    int bad;
} s_count;

static void s_count_fn(void *ctx, int t, int nt)
{
    s_count *c = ctx;
    if (t < 0 || t >= nt)
        c->bad = 1;
    else
        __atomic_add_fetch(&c->hits[t], 1, __ATOMIC_RELAXED);
}

static void test_every_share_once(void **state)
{
    (void)state;
    nn_pool_set_threads(3);
    assert_int_equal(nn_pool_threads(), 3);
    for (int rep = 0; rep < 200; rep++)
        for (int nt = 1; nt <= 7; nt++) { /* past the workers: the caller takes the rest */
            s_count c = {{0}, 0};
            nn_pool_run(nt, s_count_fn, &c);
            assert_int_equal(c.bad, 0);
            for (int t = 0; t < NN_POOL_MAX_THREADS; t++)
                assert_int_equal(c.hits[t], t < nt ? 1 : 0);
        }
    nn_pool_set_threads(0);
}

/* A share that calls the pool again: the pool is busy, so the inner call
 * runs all its shares on that thread. */
static void s_nested_fn(void *ctx, int t, int nt)
{
    (void)nt;
    s_count *c = ctx;
    s_count inner = {{0}, 0};
    nn_pool_run(3, s_count_fn, &inner);
    int ok = inner.hits[0] == 1 && inner.hits[1] == 1 && inner.hits[2] == 1 && !inner.bad;
    c->hits[t] = ok ? 1 : -1;
}

static void test_busy_pool_runs_inline(void **state)
{
    (void)state;
    nn_pool_set_threads(2);
    s_count c = {{0}, 0};
    nn_pool_run(2, s_nested_fn, &c);
    assert_int_equal(c.hits[0], 1);
    assert_int_equal(c.hits[1], 1);
    nn_pool_set_threads(0);
}

static void test_share_partitions(void **state)
{
    (void)state;
    const size_t ns[] = {0, 1, 5, 63, 64, 65, 1000, 4097};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int nt = 1; nt <= 5; nt++)
            for (size_t align = 1; align <= 64; align *= 4) {
                size_t at = 0;
                for (int t = 0; t < nt; t++) {
                    size_t lo, hi;
                    nn_pool_share(ns[i], t, nt, align, &lo, &hi);
                    assert_true(lo == at && hi >= lo);
                    assert_true(t + 1 == nt || hi % align == 0);
                    at = hi;
                }
                assert_true(at == ns[i]);
            }
}

/* ---- the int8 kernels at 1, 2, 3 threads ---------------------------------- */

static void s_fill(nn_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * nn_rng_uniform(r);
}

typedef struct {
    float *out, *din, *dw, *db;
} s_conv_res;

/* One forward + backward of the int8 conv at `threads`, into fresh buffers
 * (out and din start as NaN: an element no share writes shows). */
static s_conv_res s_conv_run(const nn_conv_dims *d, const float *x, const float *w,
                             const float *b, const float *g, int threads)
{
    nn_pool_set_threads(threads);
    const size_t xn = (size_t)d->N * d->C * d->H * d->W, wn = (size_t)d->OC * d->C * d->KH * d->KW;
    const size_t on = (size_t)d->N * d->OC * d->OH * d->OW;
    s_conv_res r = {nn_xmalloc(on * 4), nn_xmalloc(xn * 4), nn_xcalloc(wn, 4),
                    nn_xcalloc((size_t)d->OC, 4)};
    memset(r.out, 0xff, on * 4);
    memset(r.din, 0xff, xn * 4);
    uint8_t *saved = nn_xmalloc(lp_conv2d_saved_bytes(d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_conv2d_scratch_bytes(d));
    float run[2] = {0, 0};
    lp_conv2d_forward(r.out, &sv, run, x, w, b, d, (lp_mode){1, 5}, scratch);
    lp_conv2d_backward(r.din, r.dw, r.db, g, &sv, d, 6, scratch);
    free(saved);
    free(scratch);
    nn_pool_set_threads(0);
    return r;
}

static void s_conv_free(s_conv_res *r)
{
    free(r->out);
    free(r->din);
    free(r->dw);
    free(r->db);
}

enum { S_OUT = 1, S_DIN = 2, S_DW = 4, S_DB = 8 };

/* A conv case at `threads` against 1 thread: which of out, din, dw, db
 * differ in any bit (S_* mask), for the current weight-gradient
 * arithmetic.  dw is split by samples everywhere (per-thread partial
 * sums: lp_conv_wgrad.c's parts, nn's batch-split conv): the same bits for
 * the same count, and across counts the same within FP32 rounding (checked
 * here). */
static int s_conv_diff(int N, int C, int H, int OC, int K, int stride, int pad, int threads)
{
    nn_rng r;
    nn_rng_seed(&r, (uint64_t)(N * 7 + C + H + K));
    nn_conv_dims d = nn_conv_dims_make(N, C, H, H, OC, K, stride, pad);
    const size_t xn = (size_t)N * C * H * H, wn = (size_t)OC * C * K * K;
    const size_t on = (size_t)N * OC * d.OH * d.OW;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *b = nn_xmalloc((size_t)OC * 4);
    float *g = nn_xmalloc(on * 4);
    s_fill(&r, x, xn, -1.0f, 2.0f);
    s_fill(&r, w, wn, -0.4f, 0.4f);
    s_fill(&r, b, (size_t)OC, -0.1f, 0.1f);
    s_fill(&r, g, on, -0.03f, 0.02f);
    s_conv_res one = s_conv_run(&d, x, w, b, g, 1), many = s_conv_run(&d, x, w, b, g, threads);
    int diff = (memcmp(one.out, many.out, on * 4) ? S_OUT : 0) |
               (memcmp(one.din, many.din, xn * 4) ? S_DIN : 0) |
               (memcmp(one.db, many.db, (size_t)OC * 4) ? S_DB : 0);
    s_conv_res again = s_conv_run(&d, x, w, b, g, threads);
    if (memcmp(again.dw, many.dw, wn * 4))
        diff |= S_DW;
    for (size_t i = 0; i < wn; i++)
        if (!(fabsf(many.dw[i] - one.dw[i]) <= 1e-5f * (1 + fabsf(one.dw[i]))))
            diff |= S_DW;
    s_conv_free(&again);
    s_conv_free(&one);
    s_conv_free(&many);
    free(x);
    free(w);
    free(b);
    free(g);
    return diff;
}

/* The conv cases: the shift path, im2col (strided, wide, 1x1 strided). */
static const int s_cases[][7] = {
    {8, 16, 32, 16, 3, 1, 1},  /* shift path, one sample a chunk */
    {11, 12, 8, 20, 3, 1, 1},  /* several samples a chunk, a tail */
    {6, 8, 12, 16, 3, 2, 1},   /* strided: im2col, too little work to split */
    {13, 16, 16, 32, 3, 2, 1}, /* strided: im2col split over samples */
    {5, 136, 6, 12, 3, 1, 1},  /* over the shift path's channels: im2col */
    {14, 32, 16, 64, 1, 2, 0}, /* 1x1 strided shortcut */
    {32, 16, 8, 16, 3, 1, 1},  /* shift path, 3 chunks of 11: 4 of 8 on 2 threads */
    {1, 64, 16, 64, 3, 1, 1},  /* shift path, one chunk: only the kernel rows split */
};
#define S_NCASES (sizeof s_cases / sizeof s_cases[0])

static int s_case_diff(size_t i, int threads)
{
    const int *c = s_cases[i];
    return s_conv_diff(c[0], c[1], c[2], c[3], c[4], c[5], c[6], threads);
}

static void test_conv_threads_identical(void **state)
{
    (void)state;
    char err[256];
    for (int wg = LP_WGRAD_FP32; wg <= LP_WGRAD_BF16; wg++) {
        if (lp_wgrad_set((lp_wgrad_t)wg, err, sizeof err) != 0)
            continue;
        for (size_t i = 0; i < S_NCASES; i++)
            for (int t = 2; t <= 3; t++) {
                const int diff = s_case_diff(i, t);
                if (diff)
                    fail_msg("conv case %zu (%s): %d threads differ from 1 (mask %d)", i,
                             lp_wgrad_name(), t, diff);
            }
    }
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
}

static void test_quant_threads_identical(void **state)
{
    (void)state;
    const size_t n = 300001; /* odd: a tail in the last share */
    nn_rng r;
    nn_rng_seed(&r, 77);
    float *x = nn_xmalloc(n * 4), *y1 = nn_xmalloc(n * 4), *y = nn_xmalloc(n * 4);
    uint8_t *q1 = nn_xmalloc(n), *q = nn_xmalloc(n), *qr = nn_xmalloc(n);
    s_fill(&r, x, n, -3.0f, 5.0f);
    const lp_qparams p = lp_qparams_from_range(-3.0f, 5.0f);
    lp_quantize_sr_ref(qr, x, n, p, 99, 12345);
    float mn1 = 0, mx1 = 0;
    for (int t = 1; t <= 3; t++) {
        nn_pool_set_threads(t);
        lp_quantize_sr(q, x, n, p, 99, 12345);
        assert_memory_equal(q, qr, n);
        lp_dequantize(y, q, n, p);
        if (t == 1)
            memcpy(y1, y, n * 4);
        assert_memory_equal(y, y1, n * 4);
        lp_fake_quant_sr(y, q, x, n, p, 99, 12345);
        assert_memory_equal(q, qr, n);
        assert_memory_equal(y, y1, n * 4);
        memcpy(y, x, n * 4);
        lp_fake_quant_sr_add(y, x, n, p, 99, 12345);
        for (size_t i = 0; i < n; i += 997)
            assert_true(y[i] == x[i] + y1[i]);
        if (t == 1)
            memcpy(q1, q, n);
        float mn, mx;
        lp_batch_range(&mn, &mx, x, 30, n / 30);
        if (t == 1) {
            mn1 = mn;
            mx1 = mx;
        }
        assert_true(mn == mn1 && mx == mx1);
        /* the whole-tensor range: that of the plain twin */
        float rmn, rmx;
        lp_minmax_ref(&rmn, &rmx, x, n);
        const lp_qparams tp = lp_tensor_qparams(x, n), rp = lp_qparams_from_range(rmn, rmx);
        assert_true(tp.min == rp.min && tp.scale == rp.scale);
    }
    nn_pool_set_threads(0);
    free(x); free(y1); free(y); free(q1); free(q); free(qr);
}

/* Range EvoNorm forward (the range pass and the output pass split over
 * (sample, group) pairs) and backward (samples, per-thread parameter
 * sums) at `threads` against 1 thread: a mask of what differs (1: the
 * scales s, 2: out, 4: dx, in any bit; 8: the parameter gradients, in any
 * bit between two runs at `threads`, or beyond FP32 rounding from 1
 * thread's). */
static int s_ren_diff(int threads)
{
    const int N = 8, C = 32, HW = 256, G = 8;
    const size_t n = (size_t)N * C * HW;
    nn_rng r;
    nn_rng_seed(&r, 5);
    float *x = nn_xmalloc(n * 4), *g = nn_xmalloc(n * 4), *o[3], *dx[3], s[3][64];
    float gam[32], bet[32], v[32], dp[3][3][32];
    s_fill(&r, x, n, -1.0f, 2.0f);
    s_fill(&r, g, n, -0.01f, 0.01f);
    s_fill(&r, gam, C, 0.5f, 1.5f);
    s_fill(&r, bet, C, -0.2f, 0.2f);
    s_fill(&r, v, C, 0.8f, 1.2f);
    uint8_t *saved = nn_xmalloc(lp_ren_saved_bytes(N, C, HW, G));
    float *scratch = nn_xmalloc(lp_ren_scratch_floats(N, C, HW) * 4);
    for (int k = 0; k < 3; k++) {
        nn_pool_set_threads(k ? threads : 1);
        o[k] = nn_xmalloc(n * 4);
        dx[k] = nn_xmalloc(n * 4);
        memset(saved, 0xff, lp_ren_saved_bytes(N, C, HW, G)); /* NaN where nothing writes */
        lp_ren_saved sv = {saved, {0, 0}, (float *)(void *)(saved + n), NULL};
        sv.sq = sv.s + N * G;
        float run[2] = {0, 0};
        memset(dp[k], 0, sizeof dp[k]);
        lp_range_evonorm_forward(o[k], &sv, run, x, gam, bet, v, N, C, HW, G, (lp_mode){1, 31},
                                 scratch);
        memcpy(s[k], sv.s, (size_t)N * G * 4);
        lp_range_evonorm_backward(dx[k], dp[k][0], dp[k][1], dp[k][2], g, &sv, gam, v, N, C, HW,
                                  G, 9, scratch);
    }
    nn_pool_set_threads(0);
    int diff = (memcmp(s[0], s[1], (size_t)N * G * 4) ? 1 : 0) |
               (memcmp(o[0], o[1], n * 4) ? 2 : 0) | (memcmp(dx[0], dx[1], n * 4) ? 4 : 0) |
               (memcmp(dp[1], dp[2], sizeof dp[1]) ? 8 : 0);
    for (int a = 0; a < 3; a++)
        for (int ch = 0; ch < C; ch++)
            if (!(fabsf(dp[1][a][ch] - dp[0][a][ch]) <= 1e-5f * (1 + fabsf(dp[0][a][ch]))))
                diff |= 8;
    for (int k = 0; k < 3; k++) {
        free(o[k]);
        free(dx[k]);
    }
    free(x); free(g); free(saved); free(scratch);
    return diff;
}

static void test_ren_threads_identical(void **state)
{
    (void)state;
    for (int t = 2; t <= 3; t++)
        assert_int_equal(s_ren_diff(t), 0);
}

/* The comparisons above catch a wrong split: with nn_pool_share broken on
 * purpose (a gap between shares), every newly split kernel gives other
 * bits at 2 and 3 threads than at 1. */
static void test_broken_split_caught(void **state)
{
    (void)state;
    char err[256];
    nn_pool_fault(1);
    assert_int_equal(lp_wgrad_set(LP_WGRAD_FP32, err, sizeof err), 0);
    for (int t = 2; t <= 3; t++) {
        /* the im2col forward and input gradient (strided; wide channels) */
        assert_true((s_case_diff(3, t) & (S_OUT | S_DIN)) == (S_OUT | S_DIN));
        assert_true((s_case_diff(4, t) & (S_OUT | S_DIN)) == (S_OUT | S_DIN));
        /* the FP32 weight gradient on the shift geometry */
        assert_true(s_case_diff(0, t) & S_DW);
        /* the shift conv's chunks, re-chunked to split evenly */
        assert_true((s_case_diff(6, t) & (S_OUT | S_DIN)) == (S_OUT | S_DIN));
        /* the shift conv's kernel rows (lanes, prefix sums, bases), the
         * flipped kernel of the input gradient, the final dw update */
        assert_true(s_case_diff(7, t) == (S_OUT | S_DIN | S_DW));
        /* Range EvoNorm's range pass; its backward's samples */
        assert_true(s_ren_diff(t) & 1);
        assert_true(s_ren_diff(t) & 4);
        /* the whole-tensor min/max: the minimum where share 1 starts */
        const size_t n = 300001;
        float *x = nn_xmalloc(n * 4);
        nn_rng r;
        nn_rng_seed(&r, 78);
        s_fill(&r, x, n, -3.0f, 5.0f);
        size_t lo, hi;
        nn_pool_fault(0);
        nn_pool_share(n, 1, t, 64, &lo, &hi);
        nn_pool_fault(1);
        x[lo] = -7.0f;
        nn_pool_set_threads(t);
        assert_true(lp_tensor_qparams(x, n).min != -7.0f);
        nn_pool_set_threads(0);
        free(x);
    }
    nn_pool_fault(0);
    /* the bf16 weight gradient's per-sample rows (the im2col of the codes,
     * the ones rows) and the bias gradient's channels, where bf16 runs */
    if (lp_wgrad_set(LP_WGRAD_BF16, err, sizeof err) == 0) {
        nn_pool_fault(1);
        for (int t = 2; t <= 3; t++) {
            assert_true(s_case_diff(3, t) & S_DW); /* strided: lowered rows */
            assert_true(s_case_diff(5, t) & S_DW); /* 1x1 strided */
            assert_true(s_case_diff(0, t) & S_DB); /* bias channels */
            assert_true(s_case_diff(7, t) & S_DW); /* grids, final dw update */
        }
        nn_pool_fault(0);
        assert_int_equal(s_case_diff(3, 2), 0);
    }
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
    /* and the same cases pass again once the split is right */
    assert_int_equal(s_case_diff(3, 2), 0);
    assert_int_equal(s_ren_diff(2), 0);
}

/* ---- the AMX tile paths at 1, 2, 3 threads (on the tile model) ----------- */

/* One forward + backward of the int8 linear layer (N, F) -> (N, OF) at
 * `threads`: out and din (NaN where nothing writes; the scratch filled
 * with junk first, so a GEMM column no share computes shows). */
static void s_lin_run(float *out, float *din, const float *x, const float *w, const float *b,
                      const float *g, int N, int F, int OF, int threads)
{
    nn_pool_set_threads(threads);
    uint8_t *saved = nn_xmalloc(lp_linear_saved_bytes(N, F, OF));
    lp_qsaved sv = {saved, {0, 0}, saved + (size_t)N * F, {0, 0}};
    const size_t sb = lp_linear_scratch_bytes(N, F, OF);
    void *scratch = nn_xalloc_aligned(sb);
    memset(scratch, 0x55, sb);
    memset(out, 0xff, (size_t)N * OF * 4);
    memset(din, 0xff, (size_t)N * F * 4);
    float run[2] = {0, 0};
    lp_linear_forward(out, &sv, run, x, w, b, N, F, OF, (lp_mode){1, 3}, scratch);
    memset(scratch, 0x55, sb);
    lp_linear_backward(din, NULL, NULL, g, &sv, N, F, OF, 4, scratch);
    free(saved);
    free(scratch);
    nn_pool_set_threads(0);
}

/* The linear layer at `threads` against 1 thread: 1 when out differs in
 * any bit, 2 when din does.  Large enough for 3 threads in both GEMMs. */
static int s_lin_diff(int threads)
{
    const int N = 32, F = 300, OF = 100;
    nn_rng r;
    nn_rng_seed(&r, 41);
    float *x = nn_xmalloc((size_t)N * F * 4), *w = nn_xmalloc((size_t)OF * F * 4);
    float *b = nn_xmalloc((size_t)OF * 4), *g = nn_xmalloc((size_t)N * OF * 4);
    float *o[2], *dx[2];
    s_fill(&r, x, (size_t)N * F, -1.0f, 2.0f);
    s_fill(&r, w, (size_t)OF * F, -0.3f, 0.3f);
    s_fill(&r, b, (size_t)OF, -0.1f, 0.1f);
    s_fill(&r, g, (size_t)N * OF, -0.02f, 0.03f);
    for (int k = 0; k < 2; k++) {
        o[k] = nn_xmalloc((size_t)N * OF * 4);
        dx[k] = nn_xmalloc((size_t)N * F * 4);
        s_lin_run(o[k], dx[k], x, w, b, g, N, F, OF, k ? threads : 1);
    }
    const int diff = (memcmp(o[0], o[1], (size_t)N * OF * 4) ? 1 : 0) |
                     (memcmp(dx[0], dx[1], (size_t)N * F * 4) ? 2 : 0);
    for (int k = 0; k < 2; k++) {
        free(o[k]);
        free(dx[k]);
    }
    free(x); free(w); free(b); free(g);
    return diff;
}

/* lp_shiftdot_bf16 (on tiles: rows of A split in blocks of 16) at
 * `threads` against 1 thread: 1 when D differs in any bit. */
static int s_dot_diff(int threads)
{
    const int M = 48, nch = 16, T = 3;
    const size_t n = 1000, ldb = n + 8;
    const int toff[3] = {0, 3, 8};
    uint16_t *A = nn_xmalloc((size_t)M * n * 2), *B = nn_xmalloc((size_t)nch * ldb * 2);
    float *D[2];
    nn_rng r;
    nn_rng_seed(&r, 42);
    for (size_t i = 0; i < (size_t)M * n; i++)
        A[i] = lp_bf16_from_f32(nn_rng_uniform(&r) - 0.5f);
    for (size_t i = 0; i < (size_t)nch * ldb; i++)
        B[i] = lp_bf16_from_f32((float)(int)(nn_rng_uniform(&r) * 255.0f));
    for (int k = 0; k < 2; k++) {
        D[k] = nn_xcalloc((size_t)M * nch * T, 4);
        nn_pool_set_threads(k ? threads : 1);
        lp_shiftdot_bf16(D[k], (size_t)nch * T, A, n, M, B, ldb, nch, toff, T, n);
    }
    nn_pool_set_threads(0);
    const int diff = memcmp(D[0], D[1], (size_t)M * nch * T * 4) ? 1 : 0;
    free(D[0]); free(D[1]); free(A); free(B);
    return diff;
}

/* The conv cases that reach the tiles: the shift path (one and several
 * samples a chunk) and the im2col path (strided; wide channels). */
static const size_t s_tile_cases[] = {0, 1, 3, 4};

/* Every level this CPU runs: with the tile paths forced onto the model
 * (the AMX level's own kernels where it has them), 2 and 3 threads give
 * the bits of 1, and no run broke a tile rule. */
static void test_tile_threads_identical(void **state)
{
    (void)state;
    char err[256];
    /* the bf16 weight gradients where this CPU has them (the dot alone
     * below everywhere) */
    (void)lp_wgrad_set(LP_WGRAD_BF16, err, sizeof err);
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        lp_tile_force_model(1);
        for (int t = 2; t <= 3; t++) {
            for (size_t i = 0; i < sizeof s_tile_cases / sizeof *s_tile_cases; i++) {
                const int diff = s_case_diff(s_tile_cases[i], t);
                if (diff)
                    fail_msg("%s, tiles: conv case %zu (%s): %d threads differ from 1 (mask %d)",
                             nn_cpu_name((nn_cpu_t)lv), s_tile_cases[i], lp_wgrad_name(), t,
                             diff);
            }
            const int ldiff = s_lin_diff(t);
            if (ldiff)
                fail_msg("%s, tiles: linear at %d threads differs from 1 (mask %d)",
                         nn_cpu_name((nn_cpu_t)lv), t, ldiff);
            if (s_dot_diff(t))
                fail_msg("%s, tiles: bf16 dot at %d threads differs from 1",
                         nn_cpu_name((nn_cpu_t)lv), t);
        }
        assert_int_equal(lp_tile_model_faults(), 0);
        lp_tile_force_model(0);
        /* the linear layer split on the level's own GEMM, too */
        for (int t = 2; t <= 3; t++)
            assert_int_equal(s_lin_diff(t), 0);
    }
    nn_cpu_force("auto");
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
}

/* ... and the comparisons catch a wrong split of each tile path. */
static void test_tile_broken_split_caught(void **state)
{
    (void)state;
    char err[256];
    lp_tile_force_model(1);
    nn_pool_fault(1);
    for (int t = 2; t <= 3; t++) {
        assert_true(s_case_diff(0, t) & S_OUT);                          /* shift path */
        assert_true((s_case_diff(3, t) & (S_OUT | S_DIN)) == (S_OUT | S_DIN)); /* im2col */
        assert_int_equal(s_lin_diff(t), 3);
        assert_int_equal(s_dot_diff(t), 1);
    }
    nn_pool_fault(0);
    assert_int_equal(s_case_diff(0, 2), 0);
    assert_int_equal(s_lin_diff(2), 0);
    assert_int_equal(s_dot_diff(2), 0);
    assert_int_equal(lp_tile_model_faults(), 0);
    lp_tile_force_model(0);
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
}

/* ---- the SGD update and the gradient accumulation at 1, 2, 3 threads ----- */

/* The SGD update (nn_sgd_step_at) of n parameters at `threads`, kind 0:
 * Nesterov, 1: plain momentum, 2: quasi-global momentum, two steps, against
 * the update written out here: 0 when every parameter and momentum value
 * has the same bits. */
static int s_sgd_diff(int kind, int threads)
{
    const size_t n = 200003;
    nn_arena lay;
    nn_arena_init(&lay);
    const int shape[1] = {(int)n};
    nn_arena_add(&lay, "p", 1, shape);
    nn_arena_alloc(&lay);
    nn_sgd_config cfg = nn_sgd_defaults();
    cfg.nesterov = kind != 1;
    cfg.qgm = kind == 2;
    nn_sgd sgd;
    nn_sgd_init(&sgd, &lay, &cfg);
    float *x = nn_xmalloc(n * 4), *g = nn_xmalloc(n * 4), *rx = nn_xmalloc(n * 4);
    float *rb = nn_xcalloc(n, 4);
    nn_rng r;
    nn_rng_seed(&r, 41);
    s_fill(&r, x, n, -1.0f, 1.0f);
    s_fill(&r, g, n, -0.1f, 0.1f);
    s_fill(&r, sgd.mom.data, n, -0.05f, 0.05f);
    memcpy(rx, x, n * 4);
    memcpy(rb, sgd.mom.data, n * 4);
    const float mu = cfg.momentum, wd = cfg.weight_decay, lr = 0.05f;
    nn_pool_set_threads(threads);
    for (int step = 0; step < 2; step++) {
        nn_sgd_step(&sgd, x, g, lr);
        for (size_t i = 0; i < n; i++) {
            const float d = g[i] + wd * rx[i];
            const float v = mu * rb[i] + d;
            if (kind != 2)
                rb[i] = v;
            rx[i] -= lr * (cfg.nesterov ? d + mu * v : v);
        }
    }
    nn_pool_set_threads(0);
    const int diff = memcmp(x, rx, n * 4) != 0 || memcmp(sgd.mom.data, rb, n * 4) != 0;
    nn_sgd_free(&sgd);
    nn_arena_free(&lay);
    free(x); free(g); free(rx); free(rb);
    return diff;
}

/* x -> norm n -> relu r -> relu a; add(r, a) -> gap -> linear: r's
 * gradient is the sum of two consumers' (nn_model_din_done's accumulation,
 * 32*16*16*16 values), read back through n's gradient (the norm's
 * parameters make the gradients flow down to it). */
static int s_twice_n; /* n's slot */

static int s_build_twice(nn_model *m, const void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    s_twice_n = nn_b_norm(m, "n", nn_model_input_slot(m), 0);
    const int r = nn_b_relu(m, "r", s_twice_n);
    const int a = nn_b_relu(m, "a", r);
    const int s = nn_b_add(m, "s", r, a);
    nn_b_linear(m, "fc", nn_b_gap(m, "gap", s), nn_model_cfg(m)->classes, 1);
    return 0;
}

/* One forward and backward of s_build_twice's model at `threads`: 0 when
 * n's gradient (relu' times r's) has the same bits as at 1 thread. */
static int s_twice_diff(int threads)
{
    enum { N = 32, C = 16, H = 16 };
    const size_t n = (size_t)N * C * H * H;
    nn_model_config cfg = {.in_c = C, .in_h = H, .in_w = H, .classes = 4,
                           .build = s_build_twice};
    snprintf(cfg.arch, sizeof cfg.arch, "twice");
    float *x = nn_xmalloc(n * 4), *d[2];
    uint8_t y[N];
    nn_rng r;
    nn_rng_seed(&r, 43);
    s_fill(&r, x, n, -0.2f, 1.0f);
    for (int i = 0; i < N; i++)
        y[i] = (uint8_t)(i % 4);
    for (int k = 0; k < 2; k++) {
        char err[256];
        nn_model *m = nn_model_new(&cfg, err, sizeof err);
        assert_non_null(m);
        nn_model_init_params(m, 7);
        nn_model_prepare(m, N);
        nn_pool_set_threads(k ? threads : 1);
        nn_model_forward(m, x, y, N, 1);
        nn_model_backward(m);
        nn_pool_set_threads(0);
        d[k] = nn_xmalloc(n * 4);
        memcpy(d[k], nn_model_dout(m, s_twice_n), n * 4);
        nn_model_destroy(&m);
    }
    const int diff = memcmp(d[0], d[1], n * 4) != 0;
    free(d[0]); free(d[1]); free(x);
    return diff;
}

static void test_elementwise_threads_identical(void **state)
{
    (void)state;
    for (int t = 1; t <= 3; t++) {
        for (int kind = 0; kind < 3; kind++)
            assert_int_equal(s_sgd_diff(kind, t), 0);
        assert_int_equal(s_twice_diff(t), 0);
    }
    /* a broken split (a gap no share covers) is caught */
    nn_pool_fault(1);
    for (int t = 2; t <= 3; t++) {
        for (int kind = 0; kind < 3; kind++)
            assert_int_equal(s_sgd_diff(kind, t), 1);
        assert_int_equal(s_twice_diff(t), 1);
    }
    nn_pool_fault(0);
}

/* --threads auto (node_common.h): cgroup quotas round up, "max" and junk
 * are no quota, the flag takes a count or "auto" and nothing else. */
static void test_threads_auto(void **state)
{
    (void)state;
    assert_int_equal(node_cpu_max_cpus("max 100000\n"), 0);
    assert_int_equal(node_cpu_max_cpus("150000 100000\n"), 2);
    assert_int_equal(node_cpu_max_cpus("100000 100000"), 1);
    assert_int_equal(node_cpu_max_cpus("5000 100000"), 1);
    assert_int_equal(node_cpu_max_cpus("800000 100000"), 8);
    assert_int_equal(node_cpu_max_cpus("garbage"), 0);
    assert_int_equal(node_cpu_max_cpus(""), 0);
    assert_int_equal(node_quota_cpus(-1, 100000), 0); /* v1: no quota */
    assert_int_equal(node_quota_cpus(250000, 100000), 3);
    assert_int_equal(node_quota_cpus(100000, 0), 0);
    char err[128];
    long t = -1;
    assert_int_equal(node_parse_threads("auto", &t, err, sizeof err), 0);
    assert_int_equal(t, 0);
    assert_int_equal(node_parse_threads("3", &t, err, sizeof err), 0);
    assert_int_equal(t, 3);
    assert_int_equal(node_parse_threads("0", &t, err, sizeof err), -1);
    assert_int_equal(node_parse_threads("-2", &t, err, sizeof err), -1);
    assert_int_equal(node_parse_threads("two", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "--threads"));
    assert_int_equal(node_parse_threads("", &t, err, sizeof err), -1);
    const int n = node_threads_auto();
    assert_true(n >= 1 && n <= 256);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_share_once),
        cmocka_unit_test(test_busy_pool_runs_inline),
        cmocka_unit_test(test_share_partitions),
        cmocka_unit_test(test_conv_threads_identical),
        cmocka_unit_test(test_quant_threads_identical),
        cmocka_unit_test(test_ren_threads_identical),
        cmocka_unit_test(test_broken_split_caught),
        cmocka_unit_test(test_tile_threads_identical),
        cmocka_unit_test(test_tile_broken_split_caught),
        cmocka_unit_test(test_elementwise_threads_identical),
        cmocka_unit_test(test_threads_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
