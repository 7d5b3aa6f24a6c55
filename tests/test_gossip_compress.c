/* test_gossip_compress — compressor specs and kernels.
 *
 * topk against its sort-based _ref twin (ties to the lower index, zeros,
 * NaN, a 273k vector), randk (distinct, increasing, seeded, uniform), q8
 * round-trip error <= scale/2, QSGD unbiased over many draws, spec parsing
 * (canonical names, options, +deflate, every malformed spec rejected with a
 * reason).  DGC: the selected count lies in [0.8k, 1.3k] on random tensors
 * of many sizes and distributions (ties, zeros, tiny tensors), equals its
 * _ref twin bit for bit, is reproducible from the seed, never leaves a
 * larger magnitude behind; the warm-up density schedule.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gossip/gossip_compress.h"
#include "nn/nn_core.h"

static void test_parse(void **state)
{
    (void)state;
    static const char *good[][2] = {
        { "identity", "identity" },       { "topk:0.01", "topk:0.01" },
        { "q8", "q8" },                   { "topk:0.01+q8", "topk:0.01+q8" },
        { "randk:0.01", "randk:0.01" },   { "qsgd:16", "qsgd:16" },
        { "randk:0.5+qsgd:4", "randk:0.5+qsgd:4" }, { "topk:1", "topk:1" },
        { "dgc:0.01", "dgc:0.01" },       { "dgc:0.001,warmup=4+q8", "dgc:0.001,warmup=4+q8" },
        { "dgc:0.01,warmup=0", "dgc:0.01" }, { "dgc:0.010+q8+deflate", "dgc:0.01+q8+deflate" },
        { "topk:0.01,rdecay=0.9", "topk:0.01,rdecay=0.9" },
        { "topk:0.01,rdecay=0.90+q8", "topk:0.01,rdecay=0.9+q8" },
        { "topk:0.01,rdecay=0+qsgd:4+deflate", "topk:0.01,rdecay=0+qsgd:4+deflate" },
        { "identity+deflate", "identity+deflate" }, { "q8+deflate", "q8+deflate" },
        { "randk:0.1+qsgd:4+deflate", "randk:0.1+qsgd:4+deflate" },
    };
    gossip_compressor c;
    char err[256];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(gossip_compressor_parse(&c, good[i][0], err, sizeof err), 0);
        assert_string_equal(c.spec, good[i][1]);
    }
    assert_int_equal(gossip_compressor_parse(&c, "topk:0.01+q8", err, sizeof err), 0);
    assert_int_equal(c.sparse, GOSSIP_SPARSE_TOPK);
    assert_int_equal(c.quant, GOSSIP_QUANT_Q8);
    assert_int_equal(gossip_compressor_block_type(&c), GOSSIP_BLK_SPARSE_Q8);
    assert_int_equal(gossip_compressor_k(&c, 273000), 2730);
    assert_int_equal(gossip_compressor_k(&c, 16), 1); /* max(1, floor) */
    assert_int_equal(c.deflate, 0);
    assert_int_equal(c.mask_momentum, 0);
    assert_true(c.rdecay == 1.0);
    assert_int_equal(gossip_compressor_parse(&c, "dgc:0.001,warmup=4+q8+deflate", err, sizeof err), 0);
    assert_int_equal(c.sparse, GOSSIP_SPARSE_DGC);
    assert_int_equal(c.warmup, 4);
    assert_int_equal(c.deflate, 1);
    assert_int_equal(c.mask_momentum, 1);
    assert_int_equal(gossip_compressor_block_type(&c), GOSSIP_BLK_SPARSE_Q8);
    size_t lo, hi;
    gossip_compressor_k_range(&c, 273000, &lo, &hi); /* k = 273 */
    assert_int_equal(lo, 219); /* ceil(218.4) */
    assert_int_equal(hi, 354); /* floor(354.9) */
    gossip_compressor_k_range(&c, 16, &lo, &hi);   /* k = 1 */
    assert_int_equal(lo, 1);
    assert_int_equal(hi, 1);
    assert_int_equal(gossip_compressor_parse(&c, "topk:0.01,rdecay=0.25", err, sizeof err), 0);
    assert_true(c.rdecay == 0.25);
    gossip_compressor_k_range(&c, 273000, &lo, &hi);
    assert_int_equal(lo, 2730);
    assert_int_equal(hi, 2730);
    static const char *bad[][2] = {
        { "", "empty" },
        { "foo", "unknown compressor" },
        { "topk", "needs an argument" },
        { "topk:0", "(0, 1]" },
        { "topk:1.5", "(0, 1]" },
        { "topk:abc", "(0, 1]" },
        { "q8+topk:0.1", "sparsifier" },
        { "q8+q8", "quantizer" },
        { "qsgd:0", "1..127" },
        { "qsgd:200", "1..127" },
        { "q8:3", "takes no argument" },
        { "identity+q8", "cannot be combined" },
        { "topk:0.1+q8+q8", "more than two" },
        { "topk:0.1+randk:0.1", "must come first" },
        { "deflate", "suffix" },
        { "+deflate", "follows a compressor" },
        { "deflate+q8", "last part" },
        { "q8+deflate+deflate", "last part" },
        { "topk:0.1+deflate+q8", "last part" },
        { "dgc", "needs an argument" },
        { "dgc:0", "(0, 1]" },
        { "dgc:2+q8", "(0, 1]" },
        { "q8+dgc:0.1", "must be a sparsifier" },
        { "topk:0.1,rdecay=1", "[0, 1)" },
        { "topk:0.1,rdecay=-0.5", "[0, 1)" },
        { "topk:0.1,rdecay=", "[0, 1)" },
        { "topk:0.1,rdecay=0.5x", "[0, 1)" },
        { "topk:0.1,rdecay", "needs a value" },
        { "topk:0.1,warmup=2", "unknown option 'warmup=2'" },
        { "dgc:0.1,rdecay=0.5", "unknown option 'rdecay=0.5'" },
        { "dgc:0.1,warmup=-1", "0..1000" },
        { "dgc:0.1,warmup=1.5", "0..1000" },
        { "dgc:0.1,warmup=2,warmup=3", "given twice" },
        { "randk:0.1,rdecay=0.5", "takes no options" },
        { "q8,rdecay=0.5", "takes no options" },
        { "topk:0.1,", "unknown option" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(gossip_compressor_parse(&c, bad[i][0], err, sizeof err), -1);
        if (!strstr(err, bad[i][1]))
            fail_msg("spec '%s': error '%s' lacks '%s'", bad[i][0], err, bad[i][1]);
    }
}

static void s_check_topk(const float *v, size_t n, size_t k)
{
    uint32_t *a = nn_xmalloc(k * sizeof *a), *b = nn_xmalloc(k * sizeof *b);
    uint32_t *keys = nn_xmalloc(n * sizeof *keys);
    gossip_topk(v, n, k, a, keys);
    gossip_topk_ref(v, n, k, b);
    assert_memory_equal(a, b, k * sizeof *a);
    for (size_t i = 1; i < k; i++)
        assert_true(a[i] > a[i - 1]);
    free(a);
    free(b);
    free(keys);
}

static void test_topk_matches_ref(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 1);
    float v[1000];
    /* distinct values */
    for (int i = 0; i < 1000; i++)
        v[i] = nn_rng_normal(&r);
    for (size_t k = 1; k <= 1000; k = k * 3 + 1)
        s_check_topk(v, 1000, k);
    /* heavy ties: magnitudes from {0, 1, 2}, both signs */
    for (int i = 0; i < 1000; i++)
        v[i] = (float)((int)nn_rng_below(&r, 3)) * (nn_rng_below(&r, 2) ? 1.0f : -1.0f);
    for (size_t k = 1; k <= 1000; k = k * 2 + 1)
        s_check_topk(v, 1000, k);
    /* one histogram bucket holds everything (|v| in [1, 1.0625)), an odd
     * count, and infinities above it */
    for (int i = 0; i < 999; i++)
        v[i] = (1.0f + (float)nn_rng_below(&r, 1000) * 6e-5f) * (i % 2 ? 1.0f : -1.0f);
    for (size_t k = 1; k <= 999; k = k * 3 + 2)
        s_check_topk(v, 999, k);
    v[17] = INFINITY;
    v[400] = -INFINITY;
    for (size_t k = 1; k <= 999; k = k * 5 + 1)
        s_check_topk(v, 999, k);
    /* all zero (includes -0.0f) */
    for (int i = 0; i < 1000; i++)
        v[i] = (i % 2) ? 0.0f : -0.0f;
    s_check_topk(v, 1000, 10);
    /* explicit tie case: |v| = 5 at 3, 7, 9; k = 2 keeps 3 and 7 */
    float w[12] = { 1, 2, 3, -5, 0, 0, 0, 5, 0, -5, 4, 1 };
    uint32_t idx[3], keys[12];
    gossip_topk(w, 12, 2, idx, keys);
    assert_int_equal(idx[0], 3);
    assert_int_equal(idx[1], 7);
    gossip_topk(w, 12, 3, idx, keys);
    assert_int_equal(idx[2], 9);
    /* NaN counts as the largest */
    w[5] = NAN;
    gossip_topk(w, 12, 1, idx, keys);
    assert_int_equal(idx[0], 5);
    /* a model-sized vector */
    size_t n = 273000;
    float *big = nn_xmalloc(n * sizeof *big);
    for (size_t i = 0; i < n; i++)
        big[i] = nn_rng_normal(&r) * (i % 7 == 0 ? 0.0f : 1.0f);
    double t0 = nn_now();
    uint32_t *bi = nn_xmalloc(2730 * sizeof *bi), *bk = nn_xmalloc(n * sizeof *bk);
    gossip_topk(big, n, 2730, bi, bk);
    double t1 = nn_now();
    printf("  topk 2730 of 273000: %.2f ms\n", (t1 - t0) * 1e3);
    s_check_topk(big, n, 2730);
    s_check_topk(big, n, n / 2); /* k past the zeros */
    free(bi);
    free(bk);
    free(big);
}

/* ---- DGC ------------------------------------------------------------------ */

/* |v| as the kernels order it (NaN-free inputs here). */
static float s_mag(float v)
{
    return fabsf(v);
}

/* Checks one selection: count within [0.8k, 1.3k], strictly increasing
 * indices below n, and no unselected magnitude above a selected one. */
static void s_check_dgc_sel(const float *v, size_t n, size_t k, const uint32_t *idx, size_t m,
                            uint8_t *mark, const char *label)
{
    if (!(10 * m >= 8 * k && 10 * m <= 13 * k))
        fail_msg("%s: n %zu k %zu: %zu selected, outside [0.8k, 1.3k]", label, n, k, m);
    float minsel = INFINITY, maxout = -1.0f;
    for (size_t i = 0; i < m; i++) {
        assert_true(idx[i] < n);
        if (i)
            assert_true(idx[i] > idx[i - 1]);
        mark[idx[i]] = 1;
        minsel = fminf(minsel, s_mag(v[idx[i]]));
    }
    for (size_t i = 0; i < n; i++) {
        if (!mark[i])
            maxout = fmaxf(maxout, s_mag(v[i]));
        mark[i] = 0;
    }
    if (!(maxout <= minsel))
        fail_msg("%s: n %zu k %zu: unselected |v| %g above selected %g", label, n, k, (double)maxout,
                 (double)minsel);
}

/* Fills v[0..n) with distribution `dist`. */
static void s_fill_dist(float *v, size_t n, int dist, nn_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        float g = nn_rng_normal(r);
        switch (dist) {
        case 0: v[i] = g; break;                                        /* normal */
        case 1: v[i] = nn_rng_uniform(r) - 0.5f; break;                  /* uniform */
        case 2: v[i] = g / (fabsf(nn_rng_normal(r)) + 1e-3f); break;     /* heavy tails */
        case 3: v[i] = (float)((int)nn_rng_below(r, 5) - 2); break;      /* heavy ties */
        case 4: v[i] = nn_rng_below(r, 50) ? 0.0f : g; break;            /* 98% zeros */
        case 5: v[i] = 0.0f; break;                                      /* all zero */
        case 6: v[i] = expf(8.0f * g) * (nn_rng_below(r, 2) ? 1.0f : -1.0f); break; /* log-normal */
        default: v[i] = (float)(i % 7) * 0.5f; break;                   /* periodic ties */
        }
    }
}

static void test_dgc_count_bounds(void **state)
{
    (void)state;
    static const size_t sizes[] = { 1, 2, 5, 16, 100, 256, 257, 300, 1000, 4096, 9216, 36864, 100000 };
    static const double dens[] = { 0.001, 0.01, 0.05, 0.1, 0.3, 0.9, 1.0 };
    enum { NDIST = 8, REPS = 6 };
    size_t nmax = 100000;
    float *v = nn_xmalloc(nmax * sizeof *v);
    uint32_t *a = nn_xmalloc(nmax * sizeof *a), *b = nn_xmalloc(nmax * sizeof *b);
    uint32_t *keys = nn_xmalloc(nmax * sizeof *keys);
    uint8_t *mark = nn_xcalloc(nmax, 1);
    nn_rng data;
    nn_rng_seed(&data, 21);
    size_t how[3] = { 0 }, cases = 0, big = 0, big_thr = 0;
    double worst_lo = 10, worst_hi = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int dist = 0; dist < NDIST; dist++)
            for (size_t di = 0; di < sizeof dens / sizeof dens[0]; di++)
                for (int rep = 0; rep < (sizes[si] > 10000 ? 2 : REPS); rep++) {
                    size_t n = sizes[si];
                    size_t k = (size_t)floor((double)n * dens[di]);
                    k = k < 1 ? 1 : k;
                    s_fill_dist(v, n, dist, &data);
                    nn_rng r1, r2;
                    nn_rng_seed(&r1, 1000 + (uint64_t)rep);
                    r2 = r1;
                    int h1, h2;
                    size_t m1 = gossip_dgc_select(v, n, k, &r1, a, keys, &h1);
                    size_t m2 = gossip_dgc_select_ref(v, n, k, &r2, b, &h2);
                    char label[96];
                    snprintf(label, sizeof label, "dist %d density %g rep %d", dist, dens[di], rep);
                    s_check_dgc_sel(v, n, k, a, m1, mark, label);
                    /* the _ref twin: same count, indices, outcome and draws */
                    assert_int_equal(m1, m2);
                    assert_int_equal(h1, h2);
                    assert_memory_equal(a, b, m1 * sizeof *a);
                    assert_memory_equal(&r1, &r2, sizeof r1);
                    how[h1]++;
                    cases++;
                    if (n >= 4096 && dist != 5 && dist != 3) { /* sampled, not all ties */
                        big++;
                        big_thr += h1 == GOSSIP_DGC_THRESHOLD;
                    }
                    double q = (double)m1 / (double)k;
                    worst_lo = q < worst_lo ? q : worst_lo;
                    worst_hi = q > worst_hi ? q : worst_hi;
                }
    printf("  dgc: %zu random tensors (%zu sizes 1..100000, %d distributions, %zu densities): "
           "count/k in [%.3f, %.3f]; threshold %zu, top-k of candidates %zu, exact %zu\n",
           cases, sizeof sizes / sizeof sizes[0], NDIST, sizeof dens / sizeof dens[0], worst_lo,
           worst_hi, how[GOSSIP_DGC_THRESHOLD], how[GOSSIP_DGC_CANDIDATES], how[GOSSIP_DGC_EXACT]);
    printf("  dgc: n >= 4096 without mass ties: the sampled threshold landed in bounds in %zu of %zu\n",
           big_thr, big);
    assert_true(how[GOSSIP_DGC_THRESHOLD] > 0 && how[GOSSIP_DGC_CANDIDATES] > 0 && how[GOSSIP_DGC_EXACT] > 0);

    /* reproducible: the same seed gives the same selection; the threshold
     * path on a large normal tensor (sample 1000 of 100000, k/n = 0.1) */
    size_t n = 100000, k = 10000;
    s_fill_dist(v, n, 0, &data);
    nn_rng r1, r2;
    nn_rng_seed(&r1, 5);
    nn_rng_seed(&r2, 5);
    int h;
    size_t m1 = gossip_dgc_select(v, n, k, &r1, a, keys, &h);
    size_t m2 = gossip_dgc_select(v, n, k, &r2, b, keys, NULL);
    assert_int_equal(m1, m2);
    assert_memory_equal(a, b, m1 * sizeof *a);
    assert_int_equal(h, GOSSIP_DGC_THRESHOLD);
    assert_int_equal(gossip_dgc_samples(100000), 1000);
    assert_int_equal(gossip_dgc_samples(25601), 257);
    assert_int_equal(gossip_dgc_samples(300), 256);
    free(v);
    free(a);
    free(b);
    free(keys);
    free(mark);
}

static void test_dgc_warmup_schedule(void **state)
{
    (void)state;
    gossip_compressor c, cur;
    char err[256];
    assert_int_equal(gossip_compressor_parse(&c, "dgc:0.001,warmup=4+q8", err, sizeof err), 0);
    /* DGC's schedule: 25%, then x (0.004)^(1/4) per epoch, D from epoch 4 */
    double prev = 1.0;
    for (uint64_t e = 0; e < 4; e++) {
        double d = gossip_compressor_density(&c, e);
        double want = 0.25 * pow(0.001 / 0.25, (double)e / 4.0);
        printf("  dgc:0.001,warmup=4 epoch %llu: density %.6g\n", (unsigned long long)e, d);
        assert_true(fabs(d - want) <= 1e-12 * want);
        assert_true(d < prev);
        prev = d;
    }
    assert_true(gossip_compressor_density(&c, 0) == 0.25);
    assert_true(gossip_compressor_density(&c, 4) == 0.001);
    assert_true(gossip_compressor_density(&c, 1000) == 0.001);
    gossip_compressor_at_epoch(&cur, &c, 1);
    assert_true(cur.fraction == gossip_compressor_density(&c, 1));
    assert_int_equal(gossip_compressor_k(&cur, 36864), (size_t)floor(36864 * cur.fraction));
    assert_string_equal(cur.spec, c.spec);
    /* one warm-up epoch: 25% in epoch 0, then D */
    assert_int_equal(gossip_compressor_parse(&c, "dgc:0.01,warmup=1", err, sizeof err), 0);
    assert_true(gossip_compressor_density(&c, 0) == 0.25);
    assert_true(gossip_compressor_density(&c, 1) == 0.01);
    /* D >= 25%: nothing to warm up */
    assert_int_equal(gossip_compressor_parse(&c, "dgc:0.5,warmup=3", err, sizeof err), 0);
    assert_true(gossip_compressor_density(&c, 0) == 0.5);
    /* no warm-up, other compressors */
    assert_int_equal(gossip_compressor_parse(&c, "dgc:0.01", err, sizeof err), 0);
    assert_true(gossip_compressor_density(&c, 0) == 0.01);
    assert_int_equal(gossip_compressor_parse(&c, "topk:0.02", err, sizeof err), 0);
    assert_true(gossip_compressor_density(&c, 0) == 0.02);
    assert_int_equal(gossip_compressor_parse(&c, "q8", err, sizeof err), 0);
    assert_true(gossip_compressor_density(&c, 0) == 1.0);
}

static void test_randk(void **state)
{
    (void)state;
    nn_rng r, r2;
    nn_rng_seed(&r, 7);
    nn_rng_seed(&r2, 7);
    enum { N = 50, K = 5, DRAWS = 20000 };
    uint32_t idx[K], idx2[K];
    uint8_t mark[N] = { 0 };
    int count[N] = { 0 };
    for (int d = 0; d < DRAWS; d++) {
        gossip_randk(&r, N, K, idx, mark);
        gossip_randk(&r2, N, K, idx2, mark);
        assert_memory_equal(idx, idx2, sizeof idx); /* seeded */
        for (int i = 0; i < K; i++) {
            assert_true(idx[i] < N);
            if (i)
                assert_true(idx[i] > idx[i - 1]);
            count[idx[i]]++;
        }
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(mark[i], 0);
    /* each index expected DRAWS*K/N = 2000 times, sd ~ 42 */
    for (int i = 0; i < N; i++)
        assert_true(abs(count[i] - DRAWS * K / N) < 250);
    uint32_t all[N];
    gossip_randk(&r, N, N, all, mark); /* k = n: everything */
    for (int i = 0; i < N; i++)
        assert_int_equal(all[i], i);
}

static void test_q8_roundtrip(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 3);
    size_t n = 1500; /* 3 blocks, the last partial */
    float *v = nn_xmalloc(n * sizeof *v);
    int8_t *q = nn_xmalloc(n);
    float sc[3];
    for (size_t i = 0; i < n; i++)
        v[i] = nn_rng_normal(&r) * (i < 512 ? 100.0f : 0.01f);
    v[700] = 0.0f;
    for (size_t i = 1024; i < n; i++) /* an all-zero block */
        v[i] = 0.0f;
    assert_int_equal(gossip_q8_quantize(v, n, q, sc), 0);
    assert_true(sc[2] == 0.0f);
    for (size_t i = 0; i < n; i++) {
        float s = sc[i / GOSSIP_QBLOCK];
        float back = gossip_dequant(q[i], s);
        assert_true(q[i] >= -127 && q[i] <= 127);
        /* budget: half a step, plus float rounding of v/scale */
        if (!(fabsf(back - v[i]) <= 0.5f * s * (1.0f + 1e-5f)))
            fail_msg("q8 value %zu: %g -> %g, scale %g", i, (double)v[i], (double)back, (double)s);
    }
    assert_true(gossip_dequant(q[700], sc[1]) == 0.0f);
    v[3] = INFINITY;
    assert_int_equal(gossip_q8_quantize(v, n, q, sc), -1);
    v[3] = NAN;
    assert_int_equal(gossip_q8_quantize(v, n, q, sc), -1);
    free(v);
    free(q);
}

static void test_qsgd_unbiased(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 11);
    enum { N = 600, DRAWS = 20000, S = 4 };
    float v[N], sc[2];
    int8_t q[N];
    double *mean = nn_xcalloc(N, sizeof *mean);
    for (int i = 0; i < N; i++)
        v[i] = nn_rng_normal(&r);
    for (int d = 0; d < DRAWS; d++) {
        assert_int_equal(gossip_qsgd_quantize(v, N, S, &r, q, sc), 0);
        for (int i = 0; i < N; i++) {
            assert_true(abs(q[i]) <= S);
            mean[i] += gossip_dequant(q[i], sc[i / GOSSIP_QBLOCK]);
        }
    }
    int fails = 0;
    for (int i = 0; i < N; i++) {
        mean[i] /= DRAWS;
        float s = sc[i / GOSSIP_QBLOCK];
        /* per draw the error is within one step s, variance <= s^2/4 */
        double tol = 5.0 * 0.5 * s / sqrt((double)DRAWS);
        fails += fabs(mean[i] - v[i]) > tol;
    }
    assert_int_equal(fails, 0);
    free(mean);
}

static void test_compress_layout(void **state)
{
    (void)state;
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "a", 2, (int[]){ 30, 40 });
    nn_arena_add(&L, "b", 1, (int[]){ 5 });
    nn_arena_alloc(&L);
    nn_rng r;
    nn_rng_seed(&r, 2);
    for (size_t i = 0; i < L.numel; i++)
        L.data[i] = nn_rng_normal(&r);
    gossip_compressed out;
    gossip_compressed_init(&out, &L);
    gossip_compressor c;
    char err[256];
    static const char *specs[] = { "identity", "q8", "qsgd:8", "topk:0.1", "topk:0.1+q8", "randk:0.1+qsgd:2",
                                   "dgc:0.1", "dgc:0.01+q8", "topk:0.1,rdecay=0.5+q8+deflate" };
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        assert_int_equal(gossip_compressor_parse(&c, specs[s], err, sizeof err), 0);
        assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), 0);
        for (size_t b = 0; b < 2; b++) {
            assert_int_equal(out.blocks[b].type, gossip_compressor_block_type(&c));
            assert_int_equal(out.blocks[b].numel, L.views[b].numel);
            size_t lo, hi;
            gossip_compressor_k_range(&c, L.views[b].numel, &lo, &hi);
            assert_in_range(out.blocks[b].k, lo, hi);
        }
        if (c.sparse == GOSSIP_SPARSE_TOPK && c.quant == GOSSIP_QUANT_NONE) /* values are exact */
            for (size_t i = 0; i < out.blocks[0].k; i++)
                assert_true(out.blocks[0].f32[i] == L.data[out.blocks[0].idx[i]]);
    }
    L.data[1203] = NAN; /* in tensor b, always sent by topk:1 */
    assert_int_equal(gossip_compressor_parse(&c, "topk:1", err, sizeof err), 0);
    assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "'b'"));
    gossip_compressed_free(&out);
    nn_arena_free(&L);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_topk_matches_ref),
        cmocka_unit_test(test_dgc_count_bounds),
        cmocka_unit_test(test_dgc_warmup_schedule),
        cmocka_unit_test(test_randk),
        cmocka_unit_test(test_q8_roundtrip),
        cmocka_unit_test(test_qsgd_unbiased),
        cmocka_unit_test(test_compress_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
