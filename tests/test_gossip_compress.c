/* test_gossip_compress — compressor specs and kernels.
 *
 * topk against its sort-based _ref twin (ties to the lower index, zeros,
 * NaN, a 273k vector), randk (distinct, increasing, seeded, uniform), q8
 * round-trip error <= scale/2, QSGD unbiased over many draws, spec parsing
 * (canonical names, every malformed spec rejected with a reason).
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
    static const char *specs[] = { "identity", "q8", "qsgd:8", "topk:0.1", "topk:0.1+q8", "randk:0.1+qsgd:2" };
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        assert_int_equal(gossip_compressor_parse(&c, specs[s], err, sizeof err), 0);
        assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), 0);
        for (size_t b = 0; b < 2; b++) {
            assert_int_equal(out.blocks[b].type, gossip_compressor_block_type(&c));
            assert_int_equal(out.blocks[b].numel, L.views[b].numel);
            assert_int_equal(out.blocks[b].k, gossip_compressor_k(&c, L.views[b].numel));
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
        cmocka_unit_test(test_randk),
        cmocka_unit_test(test_q8_roundtrip),
        cmocka_unit_test(test_qsgd_unbiased),
        cmocka_unit_test(test_compress_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
