/* test_lowprec_gemm — the exact integer GEMM (lowprec/lp_gemm.h).
 * Every CPU level must reproduce lp_gemm_u8u8_ref bit for bit on awkward
 * shapes (M, N, K not multiples of 4/8/16/64), strided packing views and
 * extreme codes (all 255: the largest sums); the affine correction must give
 * the real product of dequantized matrices to float rounding.  The shifted-
 * row GEMM on int16 pairs and the row correction likewise, level by level. */
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
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_core.h"


typedef struct {
    int M, N, K;
} shape;

static void s_fill(nn_rng *r, uint8_t *a, size_t n, int mode)
{
    for (size_t i = 0; i < n; i++)
        a[i] = mode == 1 ? 255 : mode == 2 ? 0 : (uint8_t)nn_rng_below(r, 256);
}

/* C = A * B from packed Ap, Bp at the level now forced: every entry against
 * ref (M, N), the columns past N untouched, the column sums of B. */
static void s_check_product(int32_t *C, const int32_t *ref, int32_t *cols, const int8_t *Ap,
                            const uint8_t *Bp, const uint8_t *B, shape s, int ldc,
                            const char *name)
{
    const int M = s.M, N = s.N, K = s.K;
    memset(C, 0x5a, (size_t)M * ldc * sizeof(int32_t));
    memset(cols, 0x5a, (size_t)N * sizeof(int32_t));
    lp_gemm_u8u8(C, ldc, Ap, Bp, M, N, K, cols);
    assert_int_equal(lp_tile_model_faults(), 0);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++)
            if (C[(size_t)m * ldc + n] != ref[(size_t)m * N + n])
                fail_msg("%s M=%d N=%d K=%d: C[%d][%d] = %d, ref %d", name, M, N, K, m, n,
                         C[(size_t)m * ldc + n], ref[(size_t)m * N + n]);
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
    /* every level, then (lv == NN_CPU_LEVELS) the AMX path on the tile model */
    for (int lv = 0; lv <= NN_CPU_LEVELS; lv++) {
        const char *name = lv < NN_CPU_LEVELS ? nn_cpu_name((nn_cpu_t)lv) : "tile model";
        if (lv < NN_CPU_LEVELS && nn_cpu_force(name) != 0)
            continue;
        lp_tile_force_model(lv == NN_CPU_LEVELS);
        int32_t *runrows = nn_xmalloc((size_t)M * sizeof(int32_t));
        for (int run = 0; run < 2; run++) { /* run: packed for this level only, over stale bytes */
            memset(Ap, 0x5a, lp_gemm_pack_a_bytes(M, K));
            void (*pack)(int8_t *, int32_t *, const uint8_t *, ptrdiff_t, ptrdiff_t, int, int) =
                run ? lp_gemm_pack_a_run : lp_gemm_pack_a;
            if (transposed_views)
                pack(Ap, runrows, At, 1, M, M, K);
            else
                pack(Ap, runrows, A, K, 1, M, K);
            assert_memory_equal(runrows, rows, (size_t)M * sizeof(int32_t));
            s_check_product(C, ref, cols, Ap, Bp, B, s, ldc, name);
        }
        free(runrows);
        lp_tile_force_model(0);
    }
    nn_cpu_force("auto");
    free(A); free(B); free(At); free(Bt); free(ref); free(C); free(rows); free(cols);
    free(Ap); free(Bp);
}

static void test_levels_available(void **state)
{
    (void)state;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++)
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            print_message("skipping %s: not supported by this CPU\n", nn_cpu_name((nn_cpu_t)lv));
    assert_int_equal(nn_cpu_force("nonsense"), -1);
    assert_int_equal(nn_cpu_force("portable"), 0);
    assert_int_equal(nn_cpu_level(), NN_CPU_PORTABLE);
    nn_cpu_force("auto");
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

/* The shifted-row GEMM on int16 pairs: every level against a direct sum over
 * the codes (not through the pair lanes), over tile and mask tails (M not a
 * multiple of 4, n around multiples of 8 and 24), negative and positive
 * shifts, all-255 codes, and nothing written past n. */
static void test_shiftgemm(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 14);
    static const int Ms[] = {1, 3, 4, 5, 9};
    static const size_t ns[] = {1, 7, 8, 9, 23, 24, 25, 31, 32, 33, 97};
    const size_t margin = 40;
    for (int T = 1; T <= 9; T += 8)
        for (int np = 1; np <= 3; np += 2)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int mode = 0; mode < 2; mode++) {
                        const int M = Ms[mi], K2 = np * T;
                        const size_t n = ns[ni], ldb = n + 2 * margin + 3, ldc = n + 5;
                        int toff[9];
                        for (int t = 0; t < T; t++)
                            toff[t] = T == 1 ? -7 : (t / 3 - 1) * 13 + (t % 3 - 1);
                        /* codes: b (2*np, ldb), a (M, 2*np, T) */
                        uint8_t *b = nn_xmalloc((size_t)2 * np * ldb);
                        uint8_t *a = nn_xmalloc((size_t)M * 2 * np * T);
                        s_fill(&r, b, (size_t)2 * np * ldb, mode);
                        s_fill(&r, a, (size_t)M * 2 * np * T, mode);
                        uint32_t *grid = nn_xmalloc((size_t)np * ldb * 4);
                        for (int p = 0; p < np; p++)
                            for (size_t j = 0; j < ldb; j++)
                                grid[(size_t)p * ldb + j] = lp_pair(b[(2 * (size_t)p) * ldb + j],
                                                                    b[(2 * (size_t)p + 1) * ldb + j]);
                        uint32_t *Ap = nn_xcalloc(lp_shift_pack_lanes(M, K2), 4);
                        for (int m = 0; m < M; m++)
                            for (int p = 0; p < np; p++)
                                for (int t = 0; t < T; t++) {
                                    const uint8_t *am = a + (size_t)m * 2 * np * T;
                                    Ap[(size_t)(m / 4) * K2 * 4 + ((size_t)p * T + t) * 4 + m % 4] =
                                        lp_pair(am[(2 * p) * T + t], am[(2 * p + 1) * T + t]);
                                }
                        const uint32_t *B = grid + margin;
                        int32_t *S = nn_xmalloc((size_t)M * ldc * 4);
                        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
                            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                                continue;
                            memset(S, 0x5a, (size_t)M * ldc * 4);
                            lp_shiftgemm(S, ldc, Ap, M, B, ldb, np, toff, T, n);
                            for (int m = 0; m < M; m++) {
                                for (size_t j = 0; j < n; j++) {
                                    int32_t e = 0;
                                    for (int c = 0; c < 2 * np; c++)
                                        for (int t = 0; t < T; t++)
                                            e += (int32_t)a[((size_t)m * 2 * np + c) * T + t] *
                                                 b[(size_t)c * ldb + margin + toff[t] + j];
                                    if (S[(size_t)m * ldc + j] != e)
                                        fail_msg("%s M=%d np=%d T=%d n=%zu: S[%d][%zu] = %d, want %d",
                                                 nn_cpu_name((nn_cpu_t)lv), M, np, T, n, m, j,
                                                 S[(size_t)m * ldc + j], e);
                                }
                                for (size_t j = n; j < ldc; j++)
                                    assert_int_equal((uint32_t)S[(size_t)m * ldc + j], 0x5a5a5a5au);
                            }
                        }
                        nn_cpu_force("auto");
                        free(b); free(a); free(grid); free(Ap); free(S);
                    }
}

/* The shifted-row GEMM at even and odd K2 = np*T whose consecutive steps
 * cross from one pair row to the next (the I8MM kernel takes steps two at a
 * time): every level against the twin, lane by lane. */
static void test_shiftgemm_step_pairs(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 15);
    static const int shapes[][2] = {{2, 3}, {3, 2}, {2, 9}, {5, 1}, {4, 1}};
    const int M = 7, margin = 20;
    const size_t n = 37, ldb = n + 2 * margin, ldc = n + 3;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int np = shapes[s][0], T = shapes[s][1], K2 = np * T;
        int toff[9];
        for (int t = 0; t < T; t++)
            toff[t] = t * 3 - margin / 2;
        uint32_t *grid = nn_xmalloc((size_t)np * ldb * 4);
        uint32_t *Ap = nn_xcalloc(lp_shift_pack_lanes(M, K2), 4);
        for (size_t i = 0; i < (size_t)np * ldb; i++)
            grid[i] = lp_pair((uint8_t)nn_rng_below(&r, 256), (uint8_t)nn_rng_below(&r, 256));
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K2; k++)
                Ap[(size_t)(m / 4) * K2 * 4 + (size_t)k * 4 + m % 4] =
                    lp_pair((uint8_t)nn_rng_below(&r, 256), (uint8_t)nn_rng_below(&r, 256));
        const uint32_t *B = grid + margin;
        int32_t *want = nn_xmalloc((size_t)M * ldc * 4), *S = nn_xmalloc((size_t)M * ldc * 4);
        memset(want, 0x5a, (size_t)M * ldc * 4);
        lp_shiftgemm_ref(want, ldc, Ap, M, B, ldb, np, toff, T, n);
        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                continue;
            memset(S, 0x5a, (size_t)M * ldc * 4);
            lp_shiftgemm(S, ldc, Ap, M, B, ldb, np, toff, T, n);
            for (size_t i = 0; i < (size_t)M * ldc; i++)
                if (S[i] != want[i])
                    fail_msg("%s np=%d T=%d: S[%zu][%zu] = %d, want %d",
                             nn_cpu_name((nn_cpu_t)lv), np, T, i / ldc, i % ldc, S[i], want[i]);
        }
        nn_cpu_force("auto");
        free(grid); free(Ap); free(want); free(S);
    }
}

/* The shifted-row GEMM whose taps read separate column ranges (shifts far
 * apart, as the conv's kernel-column variants are: the I8MM level packs
 * only the union of the ranges), unsorted and repeated shifts, and more
 * taps than that packing takes (65): every level against the twin. */
static void test_shiftgemm_tap_ranges(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 16);
    enum { TMAXT = 65 };
    static const int Ts[] = {3, 4, TMAXT};
    const int M = 6, np = 3;
    const size_t n = 53, ldc = n + 3;
    for (size_t s = 0; s < sizeof Ts / sizeof Ts[0]; s++) {
        const int T = Ts[s], K2 = np * T;
        int toff[TMAXT];
        for (int t = 0; t < T; t++) /* 0, 200 and 90 apart, and -5 repeated */
            toff[t] = T == 3 ? (int[]){200, -5, 90}[t] : T == 4 ? (int[]){-5, 300, -5, 40}[t]
                                                               : (t * 37) % 101 - 50;
        const size_t ldb = n + 400; /* B = grid + 60: reads columns 10 .. 412 */
        uint32_t *grid = nn_xmalloc((size_t)np * ldb * 4);
        uint32_t *Ap = nn_xcalloc(lp_shift_pack_lanes(M, K2), 4);
        for (size_t i = 0; i < (size_t)np * ldb; i++)
            grid[i] = lp_pair((uint8_t)nn_rng_below(&r, 256), (uint8_t)nn_rng_below(&r, 256));
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K2; k++)
                Ap[(size_t)(m / 4) * K2 * 4 + (size_t)k * 4 + m % 4] =
                    lp_pair((uint8_t)nn_rng_below(&r, 256), (uint8_t)nn_rng_below(&r, 256));
        const uint32_t *B = grid + 60;
        int32_t *want = nn_xmalloc((size_t)M * ldc * 4), *S = nn_xmalloc((size_t)M * ldc * 4);
        memset(want, 0x5a, (size_t)M * ldc * 4);
        lp_shiftgemm_ref(want, ldc, Ap, M, B, ldb, np, toff, T, n);
        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                continue;
            memset(S, 0x5a, (size_t)M * ldc * 4);
            lp_shiftgemm(S, ldc, Ap, M, B, ldb, np, toff, T, n);
            for (size_t i = 0; i < (size_t)M * ldc; i++)
                if (S[i] != want[i])
                    fail_msg("%s T=%d: S[%zu][%zu] = %d, want %d", nn_cpu_name((nn_cpu_t)lv), T,
                             i / ldc, i % ldc, S[i], want[i]);
        }
        nn_cpu_force("auto");
        free(grid); free(Ap); free(want); free(S);
    }
}

/* The shifted-row GEMM on byte quads (vpdpbusd at AVX-512 VNNI): every
 * level against a direct sum over the codes, after restoring the 128 shift
 * of A (S + 128 * the b codes read), over tile and mask tails (n around
 * multiples of 16 and 64), negative shifts, all-255 codes (mode 1), and
 * nothing written past n. */
static void test_shiftgemm_quads(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 16);
    static const int Ms[] = {1, 4, 5, 9};
    static const size_t ns[] = {1, 15, 16, 17, 63, 64, 65, 130};
    const size_t margin = 40;
    for (int T = 1; T <= 9; T += 8)
        for (int nq = 1; nq <= 2; nq++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int mode = 0; mode < 2; mode++) {
                        const int M = Ms[mi], K = nq * T, C = 4 * nq;
                        const size_t n = ns[ni], ldb = n + 2 * margin + 3, ldc = n + 5;
                        int toff[9];
                        for (int t = 0; t < T; t++)
                            toff[t] = T == 1 ? -7 : (t / 3 - 1) * 13 + (t % 3 - 1);
                        uint8_t *b = nn_xmalloc((size_t)C * ldb);
                        uint8_t *a = nn_xmalloc((size_t)M * C * T);
                        s_fill(&r, b, (size_t)C * ldb, mode);
                        s_fill(&r, a, (size_t)M * C * T, mode);
                        uint32_t *grid = nn_xmalloc((size_t)nq * ldb * 4);
                        for (int p = 0; p < nq; p++)
                            for (size_t j = 0; j < ldb; j++) {
                                const uint8_t *bc = b + (size_t)4 * p * ldb + j;
                                grid[(size_t)p * ldb + j] =
                                    lp_quad(bc[0], bc[ldb], bc[2 * ldb], bc[3 * ldb]);
                            }
                        uint32_t *Ap = nn_xcalloc(lp_shift_pack_lanes(M, K), 4);
                        for (int m = 0; m < M; m++)
                            for (int p = 0; p < nq; p++)
                                for (int t = 0; t < T; t++) {
                                    const uint8_t *am = a + ((size_t)m * C + 4 * p) * T + t;
                                    Ap[(size_t)(m / 4) * K * 4 + ((size_t)p * T + t) * 4 + m % 4] =
                                        lp_quad_s8(am[0], am[T], am[2 * T], am[3 * T]);
                                }
                        const uint32_t *B = grid + margin;
                        int32_t *S = nn_xmalloc((size_t)M * ldc * 4);
                        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
                            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                                continue;
                            memset(S, 0x5a, (size_t)M * ldc * 4);
                            lp_shiftgemm_q(S, ldc, Ap, M, B, ldb, nq, toff, T, n);
                            for (int m = 0; m < M; m++) {
                                for (size_t j = 0; j < n; j++) {
                                    int32_t e = 0, sb = 0;
                                    for (int c = 0; c < C; c++)
                                        for (int t = 0; t < T; t++) {
                                            int32_t bv = b[(size_t)c * ldb + margin + toff[t] + j];
                                            e += (int32_t)a[((size_t)m * C + c) * T + t] * bv;
                                            sb += bv;
                                        }
                                    int32_t got = S[(size_t)m * ldc + j] + 128 * sb;
                                    if (got != e)
                                        fail_msg("%s M=%d nq=%d T=%d n=%zu: S[%d][%zu] + 128 SB = %d, want %d",
                                                 nn_cpu_name((nn_cpu_t)lv), M, nq, T, n, m, j, got, e);
                                }
                                for (size_t j = n; j < ldc; j++)
                                    assert_int_equal((uint32_t)S[(size_t)m * ldc + j], 0x5a5a5a5au);
                            }
                        }
                        nn_cpu_force("auto");
                        free(b); free(a); free(grid); free(Ap); free(S);
                    }
}

/* The quad correction restores the shift exactly and then gives the floats
 * of the pair correction on the unshifted sums, at every level. */
static void test_dequant_row_quads(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 17);
    enum { n = 53 };
    int32_t S[n], SB[n], St[n];
    double t[n], base[n];
    float ref[n], got[n];
    const double c = 2.1e-5, cb = -0.013;
    for (size_t i = 0; i < n; i++) {
        SB[i] = (int32_t)nn_rng_below(&r, 255 * 36 + 1);
        St[i] = (int32_t)nn_rng_below(&r, 255 * 255 * 36);
        S[i] = St[i] - 128 * SB[i];
        t[i] = cb * SB[i];
        base[i] = 0.37 - 0.02 * (double)(i % 5);
    }
    lp_dequant_row_ref(ref, St, t, c, base, n);
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        for (size_t len = 0; len <= n; len++) {
            memset(got, 0x7f, sizeof got);
            lp_dequant_row_q(got, S, SB, c, cb, base, len);
            assert_memory_equal(got, ref, len * sizeof(float));
            for (size_t i = len; i < n; i++)
                assert_int_equal(((uint8_t *)&got[i])[0], 0x7f);
        }
    }
    nn_cpu_force("auto");
}

/* The row correction: every level gives the floats of the scalar twin. */
static void test_dequant_row(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 15);
    const size_t n = 37;
    int32_t S[37];
    double t[37], base[37];
    float ref[37], got[37];
    for (size_t i = 0; i < n; i++) {
        S[i] = (int32_t)nn_rng_below(&r, 40000000) - 1000000;
        t[i] = (nn_rng_uniform(&r) - 0.5) * 3.7;
        base[i] = -0.731 + 0.01 * (double)(i % 3);
    }
    const double c = 1.3e-5;
    lp_dequant_row_ref(ref, S, t, c, base, n);
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        for (size_t len = 0; len <= n; len++) {
            memset(got, 0x7f, sizeof got);
            lp_dequant_row(got, S, t, c, base, len);
            assert_memory_equal(got, ref, len * sizeof(float));
            for (size_t i = len; i < n; i++)
                assert_int_equal(((uint8_t *)&got[i])[0], 0x7f);
        }
    }
    nn_cpu_force("auto");
}

/* The linear layer's row correction: every level gives the floats of the
 * scalar twin, with and without a bias, at every length around the
 * vector steps; nothing past the row. */
static void test_dequant_lin(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 16);
    const size_t n = 37;
    int32_t S[37];
    double tw[37];
    float bias[37], ref[37], got[37];
    for (size_t i = 0; i < n; i++) {
        S[i] = (int32_t)nn_rng_below(&r, 40000000) - 1000000;
        tw[i] = (nn_rng_uniform(&r) - 0.5) * 3.7;
        bias[i] = (float)(nn_rng_uniform(&r) - 0.5);
    }
    const double c = 1.3e-5, tx = -0.377, t4 = 0.0731;
    for (int b = 0; b < 2; b++)
        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                continue;
            for (size_t len = 0; len <= n; len++) {
                memset(got, 0x7f, sizeof got);
                lp_dequant_lin_ref(ref, S, tw, c, tx, t4, b ? bias : NULL, len);
                lp_dequant_lin(got, S, tw, c, tx, t4, b ? bias : NULL, len);
                assert_memory_equal(got, ref, len * sizeof(float));
                for (size_t i = len; i < n; i++)
                    assert_int_equal(((uint8_t *)&got[i])[0], 0x7f);
            }
            /* the twin's order: ((c*S + tw) + tx) + t4, one rounding */
            float one;
            lp_dequant_lin(&one, S, tw, c, tx, t4, NULL, 1);
            assert_true(one == (float)(c * S[0] + tw[0] + tx + t4));
        }
    nn_cpu_force("auto");
}

/* Rows sharing one base row: the floats of the twin row by row, at every
 * level, for widths around the 8-lane blocks; nothing past the rows. */
static void test_dequant_rows(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 16);
    enum { MAXW = 19, ROWS = 5, NV = MAXW * ROWS };
    int32_t S[NV];
    double t[NV], base[MAXW];
    float ref[NV + 4], got[NV + 4];
    for (size_t i = 0; i < NV; i++) {
        S[i] = (int32_t)nn_rng_below(&r, 40000000) - 1000000;
        t[i] = (nn_rng_uniform(&r) - 0.5) * 3.7;
    }
    for (size_t i = 0; i < MAXW; i++)
        base[i] = -0.731 + 0.013 * (double)i;
    const double c = 1.3e-5;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        for (size_t W = 1; W <= MAXW; W++)
            for (int rows = 0; rows <= ROWS; rows++) {
                for (int k = 0; k < rows; k++)
                    lp_dequant_row_ref(ref + (size_t)k * W, S + (size_t)k * W, t + (size_t)k * W,
                                       c, base, W);
                memset(got, 0x7f, sizeof got);
                lp_dequant_rows(got, S, t, c, base, W, rows);
                assert_memory_equal(got, ref, (size_t)rows * W * sizeof(float));
                assert_int_equal(((uint8_t *)&got[(size_t)rows * W])[0], 0x7f);
            }
    }
    nn_cpu_force("auto");
}

/* The packing of A against its element-by-element twin: every byte of the
 * three layouts and the row sums, row-major and transposed views, shapes
 * with K not a multiple of 4 and M not a multiple of 4/8/16. */
static void test_pack_a_twin(void **state)
{
    (void)state;
    static const int shp[][2] = {{1, 1}, {3, 5}, {8, 4}, {17, 30}, {64, 129}, {130, 66}, {33, 256}};
    nn_rng r;
    nn_rng_seed(&r, 11);
    for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++) {
        const int M = shp[i][0], K = shp[i][1];
        const size_t bytes = lp_gemm_pack_a_bytes(M, K);
        uint8_t *A = nn_xmalloc((size_t)M * K);
        s_fill(&r, A, (size_t)M * K, 0);
        int8_t *P = nn_xmalloc(bytes), *Q = nn_xmalloc(bytes);
        int32_t *sp = nn_xmalloc((size_t)M * 4), *sq = nn_xmalloc((size_t)M * 4);
        for (int t = 0; t < 2; t++) {
            const ptrdiff_t rs = t ? 1 : K, cs = t ? M : 1; /* t: A read as a transposed view */
            memset(P, 0x5a, bytes);
            memset(Q, 0xa5, bytes);
            lp_gemm_pack_a(P, sp, A, rs, cs, M, K);
            lp_gemm_pack_a_ref(Q, sq, A, rs, cs, M, K);
            assert_memory_equal(P, Q, bytes);
            assert_memory_equal(sp, sq, (size_t)M * 4);
        }
        free(A);
        free(P);
        free(Q);
        free(sp);
        free(sq);
    }
}

/* The packing of B at every level against the layout built byte by byte
 * (code k of column n at [(k/4 * Np + n) * 4 + k%4], zeros past K and N):
 * row-major and transposed views, shapes with edges on every side of the
 * 8 x 8 and 32-column kernels, over stale bytes. */
static void test_pack_b_twin(void **state)
{
    (void)state;
    static const int shp[][2] = {{1, 1}, {5, 3}, {30, 256}, {32, 64}, {36, 45}, {256, 2},
                                 {67, 129}, {256, 256}};
    nn_rng r;
    nn_rng_seed(&r, 12);
    for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++) {
        const int K = shp[i][0], N = shp[i][1], Np = lp_gemm_np(N);
        const size_t bytes = lp_gemm_pack_b_bytes(K, N);
        uint8_t *B = nn_xmalloc((size_t)K * N), *P = nn_xmalloc(bytes), *Q = nn_xmalloc(bytes);
        s_fill(&r, B, (size_t)K * N, 0);
        memset(Q, 0, bytes);
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                Q[((size_t)(k / 4) * Np + n) * 4 + k % 4] = B[(size_t)k * N + n];
        uint8_t *Bt = nn_xmalloc((size_t)K * N);
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                Bt[(size_t)n * K + k] = B[(size_t)k * N + n];
        for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
                continue;
            for (int t = 0; t < 2; t++) { /* t: B read as a transposed view */
                memset(P, 0x5a, bytes);
                if (t)
                    lp_gemm_pack_b(P, Bt, 1, K, K, N);
                else
                    lp_gemm_pack_b(P, B, N, 1, K, N);
                assert_memory_equal(P, Q, bytes);
            }
        }
        nn_cpu_force("auto");
        free(B), free(Bt), free(P), free(Q);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_available),
        cmocka_unit_test(test_pack_a_twin),
        cmocka_unit_test(test_pack_b_twin),
        cmocka_unit_test(test_awkward_shapes),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_affine_correction),
        cmocka_unit_test(test_shiftgemm),
        cmocka_unit_test(test_shiftgemm_step_pairs),
        cmocka_unit_test(test_shiftgemm_tap_ranges),
        cmocka_unit_test(test_dequant_row),
        cmocka_unit_test(test_dequant_lin),
        cmocka_unit_test(test_dequant_rows),
        cmocka_unit_test(test_shiftgemm_quads),
        cmocka_unit_test(test_dequant_row_quads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
