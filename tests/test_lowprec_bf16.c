/* test_lowprec_bf16 — bf16 weight gradients (lowprec/lp_bf16.h).
 *
 * - lp_bf16_from_f32 against the definition (round to nearest even on the
 *   16 dropped bits, computed here in double), on ties, carries into the
 *   exponent, subnormals (flushed to signed zero), inf and NaN; the AVX-512
 *   BF16 row converters give the twin's bits; integer codes are exact.
 * - lp_shiftdot_bf16 against its twin within its budget (2^-16 * sum |a b|
 *   per entry), over tails (n around multiples of 32), shifts both ways,
 *   row counts not multiples of the tile, and accumulation (+=).
 * - The --wgrad choice: auto follows the CPU, bf16 is refused with a message
 *   at a level without BF16, fp32 always works.
 * Tests that call the BF16 kernels directly skip where the CPU lacks them. */
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
#include "lowprec/lp_kern.h"
#include "nn/nn_cpu.h"
#include "nn/nn_core.h"

static float s_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 bits by the definition: the nearest bf16 value in double, ties to
 * the even significand. */
static uint16_t s_def_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    /* the next bf16 magnitude in double (2^128 past the largest: infinity) */
    double ulp = ldexp(1.0, (int)((lo >> 23) & 0xFFu) - 127 - 7);
    double vhi = (double)s_f(lo) + copysign(ulp, (double)f);
    double dl = fabs((double)s_f(lo) - f), dh = fabs(vhi - f);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static void test_convert(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 31);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)nn_rng_next(&r);
        if ((u & 0x7F800000u) == 0x7F800000u || (u & 0x7F800000u) == 0)
            continue; /* specials below */
        float f = s_f(u);
        uint16_t h = lp_bf16_from_f32(f);
        if (h != s_def_bf16(f))
            fail_msg("bf16(%a) = 0x%04x, want 0x%04x", (double)f, h, s_def_bf16(f));
    }
    /* ties: to even, down and up */
    assert_int_equal(lp_bf16_from_f32(s_f(0x3F808000u)), 0x3F80);
    assert_int_equal(lp_bf16_from_f32(s_f(0x3F818000u)), 0x3F82);
    /* carry into the exponent, and to infinity */
    assert_int_equal(lp_bf16_from_f32(s_f(0x3FFFFFFFu)), 0x4000);
    assert_int_equal(lp_bf16_from_f32(s_f(0x7F7FFFFFu)), 0x7F80);
    /* subnormals flush to a signed zero, as vcvtne2ps2bf16 */
    assert_int_equal(lp_bf16_from_f32(s_f(0x00400000u)), 0x0000);
    assert_int_equal(lp_bf16_from_f32(s_f(0x80000001u)), 0x8000);
    assert_int_equal(lp_bf16_from_f32(INFINITY), 0x7F80);
    assert_int_equal(lp_bf16_from_f32(-INFINITY), 0xFF80);
    assert_true(isnan(lp_bf16_to_f32(lp_bf16_from_f32(NAN))));
    assert_true(isnan(lp_bf16_to_f32(lp_bf16_from_f32(s_f(0x7F800001u))))); /* stays NaN */
    for (int q = 0; q < 256; q++) {
        uint8_t c = (uint8_t)q;
        uint16_t h;
        lp_bf16_codes_row_ref(&h, &c, 1);
        assert_true(lp_bf16_to_f32(h) == (float)q); /* codes are exact */
    }
}

static void s_need_bf16(void)
{
    if (!lp_bf16_supported())
        skip();
}

/* The SIMD converters give the twin's bits, at every length. */
static void test_convert_rows(void **state)
{
    (void)state;
    s_need_bf16();
    nn_rng r;
    nn_rng_seed(&r, 32);
    enum { n = 101 };
    float x[n];
    uint8_t q[n];
    uint16_t a[n], b[n];
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((nn_rng_uniform(&r) - 0.5) * pow(2.0, (double)nn_rng_below(&r, 60) - 30));
        q[i] = (uint8_t)nn_rng_below(&r, 256);
    }
    x[3] = s_f(0x00400000u); /* subnormal */
    x[7] = s_f(0x3F808000u); /* tie */
    for (size_t len = 0; len <= n; len++) {
        lp_bf16_row_ref(a, x, len);
        memset(b, 0xAB, sizeof b);
        lp_kern()->bf16_row(b, x, len);
        assert_memory_equal(a, b, len * 2);
        assert_int_equal(len < n ? b[len] : 0xABAB, 0xABAB); /* nothing past len */
        lp_bf16_codes_row_ref(a, q, len);
        lp_kern()->bf16_codes_row(b, q, len);
        assert_memory_equal(a, b, len * 2);
    }
}

/* The kernel against the twin: |kernel - twin| <= 2^-16 * sum_j |a b| per
 * entry, on data of mixed signs and magnitudes; accumulation into D. */
static void test_shiftdot(void **state)
{
    (void)state;
    s_need_bf16();
    nn_rng r;
    nn_rng_seed(&r, 33);
    static const int Ms[] = {1, 3, 4, 6};
    static const size_t ns[] = {1, 31, 32, 33, 64, 95, 1000};
    const size_t margin = 40;
    for (int T = 1; T <= 9; T += 8)
        for (int nch = 1; nch <= 3; nch += 2)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int M = Ms[mi], K = nch * T;
                    const size_t n = ns[ni], lda = n + 3, ldb = n + 2 * margin + 1;
                    int toff[9];
                    for (int t = 0; t < T; t++)
                        toff[t] = T == 1 ? -5 : (t / 3 - 1) * 13 + (t % 3 - 1);
                    uint16_t *A = nn_xmalloc((size_t)M * lda * 2);
                    uint16_t *B = nn_xmalloc((size_t)nch * ldb * 2);
                    for (size_t i = 0; i < (size_t)M * lda; i++)
                        A[i] = lp_bf16_from_f32((float)((nn_rng_uniform(&r) - 0.5) * 1e-3));
                    for (size_t i = 0; i < (size_t)nch * ldb; i++)
                        B[i] = lp_bf16_from_f32((float)nn_rng_below(&r, 256));
                    float *D0 = nn_xmalloc((size_t)M * K * 4), *D1 = nn_xmalloc((size_t)M * K * 4);
                    for (size_t i = 0; i < (size_t)M * K; i++)
                        D0[i] = D1[i] = (float)i * 0.25f; /* += is tested too */
                    lp_shiftdot_bf16_ref(D0, (size_t)K, A, lda, M, B + margin, ldb, nch, toff, T, n);
                    lp_kern()->shiftdot_bf16(D1, (size_t)K, A, lda, M, B + margin, ldb, nch,
                                                toff, T, n);
                    for (int m = 0; m < M; m++)
                        for (int k = 0; k < K; k++) {
                            double mag = 0;
                            const uint16_t *b = B + margin + (size_t)(k / T) * ldb + toff[k % T];
                            for (size_t j = 0; j < n; j++)
                                mag += fabs((double)lp_bf16_to_f32(A[(size_t)m * lda + j]) *
                                            lp_bf16_to_f32(b[j]));
                            double got = D1[(size_t)m * K + k], ref = D0[(size_t)m * K + k];
                            double tol = mag * ldexp(1.0, -16) + fabs(ref) * 1e-7;
                            if (!(fabs(got - ref) <= tol))
                                fail_msg("M=%d nch=%d T=%d n=%zu D[%d][%d] = %.9g, twin %.9g (tol %.3g)",
                                         M, nch, T, n, m, k, got, ref, tol);
                        }
                    free(A); free(B); free(D0); free(D1);
                }
}

static void test_wgrad_choice(void **state)
{
    (void)state;
    char err[256] = "";
    lp_wgrad_t w;
    assert_int_equal(lp_wgrad_parse("bf16", &w), 0);
    assert_int_equal(w, LP_WGRAD_BF16);
    assert_int_equal(lp_wgrad_parse("fp16", &w), -1);
    assert_int_equal(lp_wgrad_parse(NULL, &w), -1);
    assert_int_equal(lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err), 0);
    assert_int_equal(lp_wgrad_bf16(), lp_bf16_supported());
    assert_int_equal(lp_wgrad_set(LP_WGRAD_FP32, err, sizeof err), 0);
    assert_false(lp_wgrad_bf16());
    assert_string_equal(lp_wgrad_name(), "fp32");
    /* a level without BF16 refuses bf16 by name and keeps the choice */
    assert_int_equal(nn_cpu_force("portable"), 0);
    assert_int_equal(lp_wgrad_set(LP_WGRAD_BF16, err, sizeof err), -1);
    assert_non_null(strstr(err, "no AVX-512 BF16"));
    assert_non_null(strstr(err, "portable"));
    assert_false(lp_wgrad_bf16());
    assert_int_equal(lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err), 0);
    assert_false(lp_wgrad_bf16()); /* auto at the portable level: fp32 */
    nn_cpu_force("auto");
    if (lp_bf16_supported()) {
        assert_int_equal(lp_wgrad_set(LP_WGRAD_BF16, err, sizeof err), 0);
        assert_true(lp_wgrad_bf16());
    }
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
}

int main(void)
{
    printf("lowprec level %s, AVX-512 BF16 %s\n", nn_cpu_name(nn_cpu_level()),
           lp_bf16_supported() ? "yes" : "no (kernel tests skip)");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_convert_rows),
        cmocka_unit_test(test_shiftdot),
        cmocka_unit_test(test_wgrad_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
