/* test_lowprec_tile — the AMX tile GEMM (lowprec/lp_tile.h).
 *
 * - The kernel's own sequence of tile operations, run on the software tile
 *   model, equals the plain twin exactly (int32) over shapes that hit
 *   every branch: rows below, at and past 16 and 32 (the buffered row
 *   blocks), columns from 1 to non-multiples of 32 (the last block moved
 *   back to end at n; 16-column blocks; B copied for n < 16), depths with every tile depth kr (R = 1, 3, 12, 16,
 *   20, 24, 48), one and several groups, negative group offsets.  B and S
 *   are allocated to exactly what the contract lets the kernel touch, so
 *   the sanitizer build catches a tile load or store past it.
 * - The model enforces the hardware's rules: shapes that do not agree,
 *   tiles that are not distinct, a bad configuration and a tile used
 *   before configuration are refused, and a valid product is computed.
 * - The bf16 weight-gradient dot on tiles (TDPBF16PS), on the model,
 *   against its twin within the stated 2^-14 budget: rows and channels
 *   past one and two blocks, column tails and several 512-column chunks,
 *   one to nine taps with negative offsets; B allocated to exactly what
 *   may be read.
 * - The start-up check accepts the kernel on the model and refuses a
 *   kernel with one wrong sum or one that dies of SIGILL, in a child.
 * - On a CPU with AMX (the level is then supported) the kernel passes its
 *   start-up check and the real tiles give the same sums; elsewhere that
 *   test skips, saying so. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "lowprec/lp_kern.h"
#include "lowprec/lp_bf16.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_core.h"
#include "nn/nn_cpu.h"

typedef int (*s_gemm_fn)(int32_t *, size_t, const uint32_t *, int, const uint32_t *,
                         const ptrdiff_t *, int, int, size_t, size_t);

static int s_run_dispatch(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                          const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    lp_tilegemm(S, ldc, Ap, M, B, goff, G, R, rs, n);
    return 0;
}

/* One random case: returns after comparing every sum with the twin. */
static void s_case(s_gemm_fn fn, const char *what, int M, int G, int R, size_t rs, size_t n,
                   size_t ldc, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    ptrdiff_t goff[8], lo = 0, hi = 0;
    for (int g = 0; g < G; g++) {
        goff[g] = (ptrdiff_t)((uint32_t)nn_rng_next(&r) % 64) - 32;
        ptrdiff_t a = goff[g], b = goff[g] + (ptrdiff_t)((size_t)(R - 1) * rs + n);
        lo = g == 0 || a < lo ? a : lo;
        hi = g == 0 || b > hi ? b : hi;
    }
    /* B: exactly the lanes [lo, hi) the contract allows to be read */
    const size_t nb = (size_t)(hi - lo), na = lp_tile_pack_lanes(M, G, R);
    uint32_t *bbuf = nn_xmalloc(nb * 4), *Ap = nn_xcalloc(na, 4);
    for (size_t i = 0; i < nb; i++)
        bbuf[i] = (uint32_t)nn_rng_next(&r);
    for (int m = 0; m < M; m++)
        for (int g = 0; g < G; g++)
            for (int k = 0; k < R; k++)
                Ap[lp_tile_a_at(M, R, m, g, k)] = (uint32_t)nn_rng_next(&r);
    const uint32_t *B = bbuf - lo;
    const size_t sn = (size_t)(M - 1) * ldc + n; /* the last row ends at column n */
    int32_t *S = nn_xmalloc(sn * 4), *E = nn_xmalloc(sn * 4);
    memset(S, 0x5a, sn * 4);
    memcpy(E, S, sn * 4);
    lp_tilegemm_ref(E, ldc, Ap, M, B, goff, G, R, rs, n);
    if (fn(S, ldc, Ap, M, B, goff, G, R, rs, n) != 0)
        fail_msg("%s M=%d G=%d R=%d n=%zu: tile fault: %s", what, M, G, R, n, lp_tile_emu_fault());
    for (size_t i = 0; i < sn; i++)
        if (S[i] != E[i])
            fail_msg("%s M=%d G=%d R=%d rs=%zu n=%zu ldc=%zu: S[%zu][%zu] = %d, twin %d", what, M,
                     G, R, rs, n, ldc, i / ldc, i % ldc, S[i], E[i]);
    free(bbuf); free(Ap); free(S); free(E);
}

static void s_sweep(s_gemm_fn fn, const char *what)
{
    static const int Ms[] = {1, 5, 16, 17, 31, 32, 33, 48, 70};
    static const int Rs[] = {1, 3, 12, 16, 20, 24, 48};
    static const size_t ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 47, 64, 100, 257};
    uint64_t seed = 1;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Rs / sizeof *Rs; b++)
            for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
                const int M = Ms[a], R = Rs[b], G = 1 + (int)((a + b + c) % 3);
                const size_t n = ns[c], rs = n + (c % 2 ? 1 : 40), ldc = n + (a % 2 ? 0 : 7);
                s_case(fn, what, M, G, R, rs, n, ldc, seed++);
            }
    s_case(fn, what, 64, 3, 48, 1100, 1057, 1100, 99); /* a resnet20-sized call */
}

static void test_tile_model_matches_twin(void **state)
{
    (void)state;
    s_sweep(lp_tilegemm_emu, "tile model");
}

static void test_tile_amx_matches_twin(void **state)
{
    (void)state;
    if (nn_cpu_force("amx") != 0) {
        print_message("skipping amx: not supported by this CPU (or the kernel refused the "
                      "tile state)\n");
        skip();
    }
    /* a kernel that fails its start-up check here is a bug to see, not
     * a fallback to take quietly */
    assert_int_equal(lp_tile_ready(), 1);
    s_sweep(s_run_dispatch, "amx");
    nn_cpu_force("auto");
}

/* One TDPBSUD on the model after loading a configuration: tiles c, a, b
 * with (rows, colsb) shapes; returns what lp_tile_emu_check returns. */
static int s_dp(int c, int a, int b, int cr, int cc, int ar, int ac, int br, int bc)
{
    uint8_t cfg[64] = {1};
    int sh[3][3] = {{c, cr, cc}, {a, ar, ac}, {b, br, bc}};
    for (int i = 0; i < 3; i++) {
        cfg[16 + 2 * sh[i][0]] = (uint8_t)sh[i][2];
        cfg[48 + sh[i][0]] = (uint8_t)sh[i][1];
    }
    return lp_tile_emu_check(cfg, c, a, b, 0);
}

static void test_tile_model_rules(void **state)
{
    (void)state;
    assert_int_equal(s_dp(0, 4, 6, 16, 64, 16, 48, 12, 64), 0);
    assert_int_equal(lp_tile_emu_fault()[0], 0);
    /* A's depth (colsb / 4 = 12) against B's 16 rows */
    assert_int_equal(s_dp(0, 4, 6, 16, 64, 16, 48, 16, 64), -1);
    assert_non_null(strstr(lp_tile_emu_fault(), "#UD"));
    /* C's rows against A's */
    assert_int_equal(s_dp(0, 4, 6, 8, 64, 16, 64, 16, 64), -1);
    /* C's columns against B's */
    assert_int_equal(s_dp(0, 4, 6, 16, 32, 16, 64, 16, 64), -1);
    /* the same tile twice */
    assert_int_equal(s_dp(4, 4, 6, 16, 64, 16, 64, 16, 64), -1);
    /* a tile left unconfigured (b = 7) */
    assert_int_equal(s_dp(0, 4, 6, 16, 64, 16, 64, 16, 64), 0);
    uint8_t cfg[64] = {1};
    cfg[16] = 64;
    cfg[48] = 16;
    assert_int_equal(lp_tile_emu_check(cfg, 0, 4, 6, 0), -1);
    assert_non_null(strstr(lp_tile_emu_fault(), "not configured"));
    /* TDPBF16PS checks the same shapes */
    uint8_t okc[64] = {1}, badc[64] = {1};
    for (int t = 0; t < 8; t += 2) {
        okc[16 + 2 * t] = badc[16 + 2 * t] = 64;
        okc[48 + t] = badc[48 + t] = 16;
    }
    badc[48 + 6] = 8; /* B: 8 pair rows against A's 16 */
    assert_int_equal(lp_tile_emu_check(okc, 0, 4, 6, 1), 0);
    assert_int_equal(lp_tile_emu_check(badc, 0, 4, 6, 1), -1);
    assert_non_null(strstr(lp_tile_emu_fault(), "TDPBF16PS"));
    /* configurations LDTILECFG refuses: palette 2, 17 rows, 65 bytes */
    uint8_t bad[3][64] = {{2}, {1}, {1}};
    bad[1][16] = 64, bad[1][48] = 17;
    bad[2][16] = 65, bad[2][48] = 16;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lp_tile_emu_check(bad[i], 0, 4, 6, 0), -1);
        assert_non_null(strstr(lp_tile_emu_fault(), "#GP"));
    }
}

static void s_model_fn(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    if (lp_tilegemm_emu(S, ldc, Ap, M, B, goff, G, R, rs, n) != 0)
        abort();
}

static void s_wrong_fn(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    lp_tilegemm_ref(S, ldc, Ap, M, B, goff, G, R, rs, n);
    S[ldc * (size_t)(M - 1) + n - 1] ^= 1; /* one sum off by one bit */
}

static void s_dying_fn(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    (void)S, (void)ldc, (void)Ap, (void)M, (void)B, (void)goff, (void)G, (void)R, (void)rs, (void)n;
    raise(SIGILL); /* what a tile instruction does without the tile state */
}

/* The start-up check (run in a forked child) accepts the kernel's sequence
 * on the model and refuses a kernel with one wrong sum or one that dies;
 * the calling process lives on either way. */
static void test_tile_selfcheck(void **state)
{
    (void)state;
    assert_int_equal(lp_tile_selfcheck(s_model_fn), 1);
    assert_int_equal(lp_tile_selfcheck(s_wrong_fn), 0);
    assert_int_equal(lp_tile_selfcheck(s_dying_fn), 0);
    if (!lp_kern()->tilegemm) /* no tile kernel at this level (none off x86) */
        assert_int_equal(lp_tile_ready(), 0);
}

/* ---- bf16 dot ------------------------------------------------------------ */

typedef int (*s_dot_fn)(float *, size_t, const uint16_t *, size_t, int, const uint16_t *, size_t,
                        int, const int *, int, size_t);

static int s_dot_dispatch(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                          const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n)
{
    lp_tiledot_bf16(D, ldd, A, lda, M, B, ldb, nch, toff, T, n);
    return 0;
}

/* One case against the twin within 2^-14 * sum |A B| per entry; B holds
 * exactly the values the contract lets the kernel read. */
static void s_dot_case(s_dot_fn fn, const char *what, int M, int nch, int T, size_t n,
                       uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    int toff[9];
    int lo = 0, hi = 0;
    for (int t = 0; t < T; t++) {
        toff[t] = (int)nn_rng_below(&r, 9) - 4;
        lo = t == 0 || toff[t] < lo ? toff[t] : lo;
        hi = t == 0 || toff[t] > hi ? toff[t] : hi;
    }
    const size_t lda = n + 3, ldb = n + (size_t)(hi - lo) + 5;
    const size_t nb = (size_t)(nch - 1) * ldb + (size_t)(hi - lo) + n, ldd = (size_t)nch * T + 2;
    uint16_t *A = nn_xmalloc((size_t)M * lda * 2), *bbuf = nn_xmalloc(nb * 2);
    for (size_t i = 0; i < (size_t)M * lda; i++)
        A[i] = lp_bf16_from_f32(nn_rng_uniform(&r) - 0.4f);
    for (size_t i = 0; i < nb; i++)
        bbuf[i] = lp_bf16_from_f32((float)nn_rng_below(&r, 256)); /* codes: exact */
    const uint16_t *B = bbuf - lo;
    const size_t dn = (size_t)M * ldd;
    float *D = nn_xmalloc(dn * 4), *E = nn_xmalloc(dn * 4);
    for (size_t i = 0; i < dn; i++)
        D[i] = E[i] = (float)(i % 7) - 3.0f; /* accumulated into */
    lp_shiftdot_bf16_ref(E, ldd, A, lda, M, B, ldb, nch, toff, T, n);
    if (fn(D, ldd, A, lda, M, B, ldb, nch, toff, T, n) != 0)
        fail_msg("%s M=%d nch=%d T=%d n=%zu: tile fault: %s", what, M, nch, T, n,
                 lp_tile_emu_fault());
    for (int m = 0; m < M; m++)
        for (int c = 0; c < nch; c++)
            for (int t = 0; t < T; t++) {
                double mag = 0;
                for (size_t j = 0; j < n; j++)
                    mag += fabs((double)lp_bf16_to_f32(A[(size_t)m * lda + j]) *
                                lp_bf16_to_f32(B[(size_t)c * ldb + toff[t] + j]));
                const size_t i = (size_t)m * ldd + (size_t)c * T + t;
                if (!(fabs((double)D[i] - E[i]) <= ldexp(mag, -14) + 1e-6))
                    fail_msg("%s M=%d nch=%d T=%d n=%zu: D[%d][%d][%d] = %.9g, twin %.9g "
                             "(budget %.3g)", what, M, nch, T, n, m, c, t, D[i], E[i],
                             ldexp(mag, -14));
            }
    for (int m = 0; m < M; m++) /* the two columns past nch*T untouched */
        for (size_t i = (size_t)nch * T; i < ldd; i++)
            assert_true(D[(size_t)m * ldd + i] == E[(size_t)m * ldd + i]);
    free(A); free(bbuf); free(D); free(E);
}

static void s_dot_sweep(s_dot_fn fn, const char *what)
{
    static const int Ms[] = {1, 16, 17, 33, 64};
    static const int Cs[] = {1, 3, 16, 19, 40};
    static const size_t ns[] = {1, 31, 32, 33, 100, 600, 1100};
    uint64_t seed = 5;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Cs / sizeof *Cs; b++)
            for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
                s_dot_case(fn, what, Ms[a], Cs[b], (int)(1 + (a + b + c) % 3 * 4), ns[c], seed++);
}

static void test_tiledot_model_matches_twin(void **state)
{
    (void)state;
    s_dot_sweep(lp_tiledot_bf16_emu, "bf16 tile model");
}

static void test_tiledot_amx_matches_twin(void **state)
{
    (void)state;
    if (nn_cpu_force("amx") != 0 || !lp_bf16_supported()) {
        print_message("skipping amx bf16: not supported by this CPU\n");
        nn_cpu_force("auto");
        skip();
    }
    assert_int_equal(lp_tile_bf16_ready(), 1);
    s_dot_sweep(s_dot_dispatch, "amx bf16");
    nn_cpu_force("auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_model_matches_twin),
        cmocka_unit_test(test_tile_model_rules),
        cmocka_unit_test(test_tile_selfcheck),
        cmocka_unit_test(test_tile_amx_matches_twin),
        cmocka_unit_test(test_tiledot_model_matches_twin),
        cmocka_unit_test(test_tiledot_amx_matches_twin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
