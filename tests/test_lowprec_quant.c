/* test_lowprec_quant — the 8-bit quantizers (lowprec/lp_quant.h).
 *
 * Error budgets checked here (named, as in STYLE):
 *   ROUND_TRIP  nearest:    |x - deq(q(x))| <= scale/2 + 1e-6*(|min|+|max|)
 *                            for x inside [min, max];
 *   SR_BRACKET  stochastic: deq lands on one of the two grid points around x;
 *   SR_BIAS     the mean of T draws (independent seeds) is within
 *               5 sigma = 5*scale/(2*sqrt(T)) of x (sigma <= scale/2 / sqrt(T)).
 * Every SIMD level the CPU has must give codes bit-identical to the _ref. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/tk.h"

#include "nn/nn_cpu.h"
#include "lowprec/lp_quant.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_core.h"


static void s_fill(nn_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * nn_rng_uniform(r);
}

static void test_qparams(void **state)
{
    (void)state;
    lp_qparams p = lp_qparams_from_range(-1.0f, 1.55f);
    assert_true(p.scale == (1.55f - -1.0f) / 255.0f);
    assert_true(p.min == -1.0f);
    p = lp_qparams_from_range(0.25f, 0.25f); /* constant tensor */
    assert_true(p.scale == LP_MIN_SCALE);
    float x = 0.25f;
    uint8_t q;
    lp_quantize_ref(&q, &x, 1, p);
    assert_int_equal(q, 0);
}

static void test_round_trip_budget(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 1);
    enum { N = 4099 };
    float *x = nn_xmalloc(N * sizeof(float)), *y = nn_xmalloc(N * sizeof(float));
    uint8_t *q = nn_xmalloc(N);
    const float ranges[][2] = {{-1, 1}, {0, 1e-3f}, {-300, 20}, {5, 6}};
    for (size_t t = 0; t < sizeof ranges / sizeof ranges[0]; t++) {
        s_fill(&r, x, N, ranges[t][0], ranges[t][1]);
        float mn, mx;
        lp_minmax_ref(&mn, &mx, x, N);
        lp_qparams p = lp_qparams_from_range(mn, mx);
        lp_quantize(q, x, N, p);
        lp_dequantize(y, q, N, p);
        float budget = 0.5f * p.scale + 1e-6f * (fabsf(mn) + fabsf(mx));
        float worst = 0;
        for (size_t i = 0; i < N; i++)
            worst = fmaxf(worst, fabsf(x[i] - y[i]));
        assert_true(worst <= budget);
        assert_true(worst > 0.25f * p.scale); /* the test can see errors */
        /* min maps to 0, max to 255 */
        uint8_t qa, qb;
        lp_quantize_ref(&qa, &mn, 1, p);
        lp_quantize_ref(&qb, &mx, 1, p);
        assert_int_equal(qa, 0);
        assert_int_equal(qb, 255);
    }
    /* values outside the range clamp */
    lp_qparams p = lp_qparams_from_range(-1, 1);
    float out[3] = {-5.0f, 7.0f, NAN};
    uint8_t qo[3];
    lp_quantize_ref(qo, out, 3, p);
    assert_int_equal(qo[0], 0);
    assert_int_equal(qo[1], 255);
    assert_int_equal(qo[2], 0);
    free(x);
    free(y);
    free(q);
}

static void test_ties_to_even(void **state)
{
    (void)state;
    lp_qparams p = {1.0f, 0.0f}; /* exact grid: t = x */
    float x[4] = {0.5f, 1.5f, 2.5f, 254.5f};
    uint8_t q[4];
    lp_quantize_ref(q, x, 4, p);
    assert_int_equal(q[0], 0);
    assert_int_equal(q[1], 2);
    assert_int_equal(q[2], 2);
    assert_int_equal(q[3], 254);
}

static void test_sr_noise(void **state)
{
    (void)state;
    double s = 0;
    enum { T = 100000 };
    for (uint32_t i = 0; i < T; i++) {
        float u = lp_sr_noise(42, i);
        assert_true(u >= -0.5f && u < 0.5f);
        s += u;
    }
    /* sd of U(-1/2,1/2) is 0.2887: mean within 5 sigma */
    assert_true(fabs(s / T) < 5 * 0.2887 / sqrt(T));
    assert_true(lp_sr_noise(1, 7) != lp_sr_noise(2, 7));
}

static void test_sr_unbiased(void **state)
{
    (void)state;
    lp_qparams p = lp_qparams_from_range(-2.0f, 3.0f);
    const int T = tk_quick() ? 400 : 4000;
    const float xs[] = {-2.0f, -1.99f, 0.0f, 0.1234567f, 1.0f + 0.5f * p.scale, 2.9999f, 3.0f};
    for (size_t j = 0; j < sizeof xs / sizeof xs[0]; j++) {
        double sum = 0;
        float lo = floorf((xs[j] - p.min) / p.scale), hi = lo + 1;
        for (int t = 0; t < T; t++) {
            uint8_t q;
            float y;
            lp_quantize_sr(&q, &xs[j], 1, p, (uint64_t)t * 7919u + 13u, 5);
            lp_dequantize(&y, &q, 1, p);
            /* SR_BRACKET */
            assert_true(q == (uint8_t)fminf(lo, 255) || q == (uint8_t)fminf(hi, 255));
            sum += y;
        }
        double tol = 5.0 * p.scale / (2.0 * sqrt((double)T)) + 1e-6;
        assert_true(fabs(sum / T - xs[j]) <= tol); /* SR_BIAS */
    }
}

static void test_sr_pieces(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 3);
    enum { N = 1000 };
    float x[N];
    uint8_t a[N], b[N];
    s_fill(&r, x, N, -1, 1);
    lp_qparams p = lp_qparams_from_range(-1, 1);
    lp_quantize_sr(a, x, N, p, 99, 0);
    lp_quantize_sr(b, x, 333, p, 99, 0);
    lp_quantize_sr(b + 333, x + 333, N - 333, p, 99, 333);
    assert_memory_equal(a, b, N);
    lp_quantize_sr(b, x, N, p, 100, 0); /* another seed differs */
    assert_true(memcmp(a, b, N) != 0);
}

/* The fused quantize + dequantize (+ add) at the current level: the
 * twin's floats and codes, which are lp_quantize_sr's codes and
 * lp_dequantize's values of them.  y0, y1 (n floats), q0, q1 (n): scratch. */
static void s_check_fused(const float *x, size_t n, lp_qparams p, float *y0, float *y1,
                          uint8_t *q0, uint8_t *q1)
{
    lp_fake_quant_sr_ref(y0, q0, x, n, p, 4321, 13);
    lp_fake_quant_sr(y1, q1, x, n, p, 4321, 13);
    assert_memory_equal(y0, y1, n * sizeof(float));
    assert_memory_equal(q0, q1, n);
    lp_fake_quant_sr(y1, NULL, x, n, p, 4321, 13);
    assert_memory_equal(y0, y1, n * sizeof(float));
    lp_quantize_sr_ref(q1, x, n, p, 4321, 13);
    assert_memory_equal(q0, q1, n);
    lp_dequantize_ref(y1, q1, n, p);
    assert_memory_equal(y0, y1, n * sizeof(float));
    /* add: y = base + value, base = the input itself (a finite-or-not mix) */
    for (size_t i = 0; i < n; i++)
        y0[i] = y1[i] = 0.5f * x[i];
    lp_fake_quant_sr_add_ref(y0, x, n, p, 77, 3);
    lp_fake_quant_sr_add(y1, x, n, p, 77, 3);
    assert_memory_equal(y0, y1, n * sizeof(float));
    lp_quantize_sr_ref(q1, x, n, p, 77, 3);
    for (size_t i = 0; i < n; i++) {
        float v;
        lp_dequantize_ref(&v, &q1[i], 1, p);
        float e = 0.5f * x[i] + v;
        assert_true(memcmp(&e, &y0[i], sizeof e) == 0);
    }
}

/* Every level the CPU has gives exactly the reference's results. */
static void test_dispatch_identical(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 5);
    enum { MAXN = 3000 };
    float *x = nn_xmalloc(MAXN * sizeof(float)), *y0 = nn_xmalloc(MAXN * sizeof(float)),
          *y1 = nn_xmalloc(MAXN * sizeof(float));
    uint8_t *q0 = nn_xmalloc(MAXN), *q1 = nn_xmalloc(MAXN);
    const size_t sizes[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 2999};
    int tested = 0;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0) {
            print_message("skipping %s: not supported by this CPU\n", nn_cpu_name((nn_cpu_t)lv));
            continue;
        }
        tested++;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            s_fill(&r, x, n, -3, 2);
            if (n > 10) {
                x[3] = -7.0f; /* outside the range */
                x[5] = 9.0f;
            }
            lp_qparams p = lp_qparams_from_range(-2.5f, 1.5f);
            if (n > 12) { /* exact ties (t = k + 1/2) */
                x[7] = p.min + 10.5f * p.scale;
                x[9] = p.min + 11.5f * p.scale;
            }
            float a0, b0, a1, b1;
            lp_minmax_ref(&a0, &b0, x, n);
            lp_minmax(&a1, &b1, x, n);
            assert_true(a0 == a1 && b0 == b1);
            lp_quantize_ref(q0, x, n, p);
            lp_quantize(q1, x, n, p);
            assert_memory_equal(q0, q1, n);
            lp_quantize_sr_ref(q0, x, n, p, 1234, 77);
            lp_quantize_sr(q1, x, n, p, 1234, 77);
            assert_memory_equal(q0, q1, n);
            lp_dequantize_ref(y0, q0, n, p);
            lp_dequantize(y1, q0, n, p);
            assert_memory_equal(y0, y1, n * sizeof(float));
            s_check_fused(x, n, p, y0, y1, q0, q1);
        }
    }
    nn_cpu_force("auto");
    assert_true(tested >= 1);
    free(x);
    free(y0);
    free(y1);
    free(q0);
    free(q1);
}

/* Values at the edges of the clamp (NaN, infinities, t far beyond 2^31 or
 * below -2^31, t in (-1/2, 0), t just above 255, exact ties) give the
 * reference's codes at every level, in every lane position (the SIMD
 * kernels clamp through the saturating packs). */
static void test_dispatch_edges(void **state)
{
    (void)state;
    lp_qparams p = lp_qparams_from_range(-1.0f, 1.0f);
    const float e[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 3e9f * p.scale,
                       -3e9f * p.scale, p.min - 0.25f * p.scale, p.min - 0.5f * p.scale,
                       p.min + 255.4f * p.scale, p.min + 255.6f * p.scale, 1.0f, -1.0f,
                       p.min + 254.5f * p.scale, -0.0f, 0.0f, p.min - 0.75f * p.scale};
    enum { NE = sizeof e / sizeof e[0], N = 4 * 64 + 16 + 5 }; /* 64-, 16- and 1-value steps */
    float x[N], y0[N], y1[N];
    uint8_t q0[N], q1[N];
    int tested = 0;
    for (size_t i = 0; i < N; i++)
        x[i] = e[(i * 7 + i / NE) % NE];
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        tested++;
        lp_quantize_ref(q0, x, N, p);
        lp_quantize(q1, x, N, p);
        assert_memory_equal(q0, q1, N);
        for (uint64_t seed = 0; seed < 4; seed++) {
            lp_quantize_sr_ref(q0, x, N, p, seed, (uint32_t)seed * 5);
            lp_quantize_sr(q1, x, N, p, seed, (uint32_t)seed * 5);
            assert_memory_equal(q0, q1, N);
        }
        lp_dequantize_ref(y0, q0, N, p);
        lp_dequantize(y1, q0, N, p);
        assert_memory_equal(y0, y1, sizeof y0);
        uint8_t q2[N], q3[N];
        float y2[N], y3[N];
        s_check_fused(x, N, p, y2, y3, q2, q3);
    }
    nn_cpu_force("auto");
    assert_true(tested >= 1);
    for (size_t i = 0; i < N; i++) {
        if (isnan(x[i]) || x[i] < p.min)
            assert_int_equal(q0[i], 0);
        if (x[i] > 1.0f)
            assert_int_equal(q0[i], 255);
    }
}

/* x (n) from the values e (ne): every lane position, and past the first
 * ne only the zeros and the NaN, so the extremes are often zeros */
static void s_mix(float *x, size_t n, const float *e, size_t ne, size_t shift)
{
    for (size_t i = 0; i < n; i++) {
        float v = e[(i * 3 + shift) % ne];
        x[i] = i >= ne && fabsf(v) > 0.5f ? 0.0f * v : v;
    }
}

/* min and max the twin's (a sequential scan that keeps the first of equal
 * values): at every level with zeros of both signs as the extremes in any
 * lane, the portable kernel bit for bit and also with NaNs at the start
 * (which the twin keeps) and elsewhere (which it skips; the x86 levels'
 * max/min instructions do not, and the callers never pass NaNs: a
 * non-finite step is refused before it is quantized); lengths around the
 * vector steps. */
/* Every length up to 75 and lane shift of the values e (ne) against the
 * twin: lv < 0 the portable kernel directly, else the level's */
static int s_minmax_cases(int lv, const float *e, size_t ne)
{
    enum { N = 75 };
    float x[N];
    int cases = 0;
    for (size_t n = 1; n <= N; n += n < 20 ? 1 : 7)
        for (size_t shift = 0; shift < ne; shift++) {
            s_mix(x, n, e, ne, shift);
            float a0, b0, a1, b1;
            lp_minmax_ref(&a0, &b0, x, n);
            if (lv < 0)
                lp_minmax_blk(&a1, &b1, x, n);
            else
                lp_minmax(&a1, &b1, x, n);
            /* the portable kernel bit for bit, the SIMD levels by value
             * (their min/max instructions pick either zero of a pair) */
            if (lv < 0 ? memcmp(&a0, &a1, 4) || memcmp(&b0, &b1, 4) : a0 != a1 || b0 != b1)
                fail_msg("%s n=%zu shift=%zu: min %g (twin %g), max %g (twin %g)",
                         lv < 0 ? "blk" : nn_cpu_name((nn_cpu_t)lv), n, shift, a1, a0, b1, b0);
            cases++;
        }
    return cases;
}

static void test_minmax_edges(void **state)
{
    (void)state;
    /* NaN last: the SIMD levels take all but the last value */
    const float mixed[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -0.0f, 0.0f, 3.0f, -2.0f, NAN};
    const size_t nm = sizeof mixed / sizeof *mixed;
    int cases = s_minmax_cases(-1, mixed, nm);
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++)
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) == 0)
            cases += s_minmax_cases(lv, mixed, nm - 1);
    /* zeros of both signs as the least (greatest) value, first met in
     * several lanes at several places: the portable kernel bit for bit */
    nn_rng r;
    nn_rng_seed(&r, 31);
    float x[64];
    for (int k = 0; k < 2000; k++, cases++) {
        const size_t n = 8 + nn_rng_below(&r, 57);
        const float sign = k % 2 ? -1.0f : 1.0f;
        for (size_t i = 0; i < n; i++) {
            const uint32_t c = nn_rng_below(&r, 6);
            x[i] = c < 2 ? sign * (float)(c + 1) : c < 4 ? 0.0f : -0.0f;
        }
        float a0, b0, a1, b1;
        lp_minmax_ref(&a0, &b0, x, n);
        lp_minmax_blk(&a1, &b1, x, n);
        if (memcmp(&a0, &a1, 4) || memcmp(&b0, &b1, 4))
            fail_msg("blk case %d (n=%zu): min %g (twin %g), max %g (twin %g)", k, n, a1, a0,
                     b1, b0);
    }
    nn_cpu_force("auto");
    assert_true(cases > 0);
}

static void test_fake_quant(void **state)
{
    (void)state;
    float x[50], y[50], z[50];
    uint8_t q[50];
    nn_rng r;
    nn_rng_seed(&r, 9);
    s_fill(&r, x, 50, -1, 1);
    lp_qparams p = lp_tensor_qparams(x, 50);
    lp_fake_quant(y, x, 50, p, 1, 17);
    lp_quantize_sr(q, x, 50, p, 17, 0);
    lp_dequantize(z, q, 50, p);
    assert_memory_equal(y, z, sizeof y);
}

static void test_activation_range(void **state)
{
    (void)state;
    /* two samples of 3: sample mins -1, -3; maxes 2, 4 */
    const float x[6] = {-1, 0, 2, 4, -3, 1};
    float mn, mx;
    lp_batch_range(&mn, &mx, x, 2, 3);
    assert_true(mn == -2.0f && mx == 3.0f);
    float run[2] = {0, 0};
    lp_qparams p = lp_act_qparams(run, x, 2, 3, 1);
    assert_true(p.min == -2.0f && p.scale == 5.0f / 255.0f);
    assert_true(fabsf(run[0] - 0.9f * -2.0f) < 1e-7f && fabsf(run[1] - 2.7f) < 1e-6f);
    lp_act_qparams(run, x, 2, 3, 1);
    assert_true(fabsf(run[0] - (0.1f * -1.8f + 0.9f * -2.0f)) < 1e-6f);
    lp_qparams e = lp_act_qparams(run, NULL, 2, 3, 0); /* eval: running range */
    assert_true(e.min == run[0]);
    assert_true(fabsf(e.scale - (run[1] - run[0]) / 255.0f) < 1e-9f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qparams),          cmocka_unit_test(test_round_trip_budget),
        cmocka_unit_test(test_ties_to_even),     cmocka_unit_test(test_sr_noise),
        cmocka_unit_test(test_sr_unbiased),      cmocka_unit_test(test_sr_pieces),
        cmocka_unit_test(test_dispatch_identical), cmocka_unit_test(test_dispatch_edges),
        cmocka_unit_test(test_minmax_edges),
        cmocka_unit_test(test_fake_quant),
        cmocka_unit_test(test_activation_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
