/* test_lowprec_gemm — the exact integer GEMM (lowprec/lp_gemm.h).
 * Every CPU level must reproduce lp_gemm_u8u8_ref bit for bit on awkward
 * shapes (M, N, K not multiples of 4/8/16/64), strided packing views and
 * extreme codes (all 255: the largest sums); the affine correction must give
 * the real product of dequantized matrices to float rounding. */
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

#include "lowprec/lp_cpu.h"
#include "lowprec/lp_gemm.h"
#include "nn/nn_core.h"

static const char *s_levels[] = {"portable", "avx2", "avx512vnni"};

typedef struct {
    int M, N, K;
} shape;

static void s_fill(nn_rng *r, uint8_t *a, size_t n, int mode)
{
    for (size_t i = 0; i < n; i++)
        a[i] = mode == 1 ? 255 : mode == 2 ? 0 : (uint8_t)nn_rng_below(r, 256);
}

static void s_check_shape(nn_rng *r, shape s, int mode, int transposed_views)
{
    const int M = s.M, N = s.N, K = s.K, ldc = N + 3;
    uint8_t *A = nn_xmalloc((size_t)M * K), *B = nn_xmalloc((size_t)K * N);
    uint8_t *At = nn_xmalloc((size_t)M * K), *Bt = nn_xmalloc((size_t)K * N);
    s_fill(r, A, (size_t)M * K, mode);
    s_fill(r, B, (size_t)K * N, mode == 1 ? 1 : 0);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            At[(size_t)k * M + m] = A[(size_t)m * K + k];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++)
            Bt[(size_t)n * K + k] = B[(size_t)k * N + n];
    int32_t *ref = nn_xmalloc((size_t)M * N * sizeof(int32_t));
    int32_t *C = nn_xmalloc((size_t)M * ldc * sizeof(int32_t));
    int32_t *rows = nn_xmalloc((size_t)M * sizeof(int32_t)), *cols = nn_xmalloc(N * sizeof(int32_t));
    int8_t *Ap = nn_xmalloc(lp_gemm_pack_a_bytes(M, K));
    uint8_t *Bp = nn_xmalloc(lp_gemm_pack_b_bytes(K, N));
    lp_gemm_u8u8_ref(ref, A, B, M, N, K);
    if (transposed_views) {
        lp_gemm_pack_a(Ap, rows, At, 1, M, M, K);
        lp_gemm_pack_b(Bp, Bt, 1, K, K, N);
    } else {
        lp_gemm_pack_a(Ap, rows, A, K, 1, M, K);
        lp_gemm_pack_b(Bp, B, N, 1, K, N);
    }
    for (int m = 0; m < M; m++) {
        int32_t t = 0;
        for (int k = 0; k < K; k++)
            t += A[(size_t)m * K + k];
        assert_int_equal(rows[m], t);
    }
    for (int lv = 0; lv < 3; lv++) {
        if (lp_cpu_force(s_levels[lv]) != 0)
            continue;
        memset(C, 0x5a, (size_t)M * ldc * sizeof(int32_t));
        lp_gemm_u8u8(C, ldc, Ap, Bp, M, N, K, cols);
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++)
                if (C[(size_t)m * ldc + n] != ref[(size_t)m * N + n])
                    fail_msg("%s M=%d N=%d K=%d: C[%d][%d] = %d, ref %d", s_levels[lv], M, N,
                             K, m, n, C[(size_t)m * ldc + n], ref[(size_t)m * N + n]);
            for (int n = N; n < ldc; n++) /* beyond N untouched */
                assert_int_equal((uint32_t)C[(size_t)m * ldc + n], 0x5a5a5a5au);
        }
        for (int n = 0; n < N; n++) {
            int32_t t = 0;
            for (int k = 0; k < K; k++)
                t += B[(size_t)k * N + n];
            assert_int_equal(cols[n], t);
        }
    }
    lp_cpu_force("auto");
    free(A); free(B); free(At); free(Bt); free(ref); free(C); free(rows); free(cols);
    free(Ap); free(Bp);
}

static void test_levels_available(void **state)
{
    (void)state;
    for (int lv = 0; lv < 3; lv++)
        if (lp_cpu_force(s_levels[lv]) != 0)
            print_message("skipping %s: not supported by this CPU\n", s_levels[lv]);
    assert_int_equal(lp_cpu_force("nonsense"), -1);
    assert_int_equal(lp_cpu_force("portable"), 0);
    assert_int_equal(lp_cpu_level(), LP_CPU_PORTABLE);
    lp_cpu_force("auto");
}

static void test_awkward_shapes(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 11);
    const shape shapes[] = {{1, 1, 1},   {3, 5, 7},    {8, 16, 4},   {9, 17, 3},
                            {7, 33, 65}, {17, 31, 27}, {13, 49, 27}, {16, 100, 144},
                            {33, 47, 130}, {64, 64, 576}, {10, 2, 64}, {2, 65, 5}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        s_check_shape(&r, shapes[i], 0, 0);
        s_check_shape(&r, shapes[i], 0, 1);
    }
}

static void test_extremes(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 12);
    const shape big = {9, 21, tk_quick() ? 3001 : LP_GEMM_MAX_K};
    s_check_shape(&r, big, 1, 0);          /* all 255: 255*255*K */
    s_check_shape(&r, (shape){5, 19, 77}, 2, 0); /* A all 0 (a' = -128) */
}

/* Real products: dequantized A * B through the affine correction. */
static void test_affine_correction(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 13);
    const int M = 11, N = 23, K = 301;
    uint8_t *A = nn_xmalloc((size_t)M * K), *B = nn_xmalloc((size_t)K * N);
    s_fill(&r, A, (size_t)M * K, 0);
    s_fill(&r, B, (size_t)K * N, 0);
    lp_qparams pa = {0.013f, -1.7f}, pb = {0.002f, -0.25f};
    int32_t C[11 * 23], rows[11], cols[23];
    int8_t *Ap = nn_xmalloc(lp_gemm_pack_a_bytes(M, K));
    uint8_t *Bp = nn_xmalloc(lp_gemm_pack_b_bytes(K, N));
    lp_gemm_pack_a(Ap, rows, A, K, 1, M, K);
    lp_gemm_pack_b(Bp, B, N, 1, K, N);
    lp_gemm_u8u8(C, N, Ap, Bp, M, N, K, cols);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double exact = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                float a = (float)A[(size_t)m * K + k] * pa.scale + pa.min;
                float b = (float)B[(size_t)k * N + n] * pb.scale + pb.min;
                exact += (double)a * b;
                mag += fabs((double)a * b);
            }
            float got = lp_gemm_dequant(C[m * N + n], rows[m], cols[n], K, pa, pb);
            /* dequantized entries are floats: their own rounding is part of
             * the fake-quant value too, so compare with 1e-6 relative to the
             * magnitude sum */
            assert_true(fabs(got - exact) <= 1e-6 * mag + 1e-7);
        }
    free(A); free(B); free(Ap); free(Bp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_available),
        cmocka_unit_test(test_awkward_shapes),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_affine_correction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
