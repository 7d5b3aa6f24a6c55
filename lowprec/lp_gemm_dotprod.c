/* lp_gemm_dotprod — lp_shiftgemm on UDOT (vdotq_laneq_u32, Armv8.2 dot
 * product; this file alone is built with -march=armv8.2-a+dotprod and runs
 * only at the DOTPROD level and above, lp_kern_arm.c).
 *
 * A pair lane lo | hi << 16 with codes 0..255 is, as bytes, (lo, 0, hi, 0):
 * the four-byte dot product of an A lane and a B lane is a_lo b_lo + a_hi
 * b_hi, the pair product, in unsigned 32-bit sums that never wrap (at most
 * 2 * 255 * 255 * K2 < 2^31 for K2 <= LP_GEMM_MAX_K / 2).  So the kernel
 * reads the pair grid and packed A as they are, and the sums are exact.
 * Register tile: the 4 rows of a packed A block (one 128-bit load per K
 * step, a lane each) x 16 columns (4 vectors): 16 accumulators. */
#include <arm_neon.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd_arm.h"

/* S rows m0..m0+rows-1 (rows <= 4), columns j..j+15 */
static void s_tile16(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *B,
                     size_t ldb, int np, const int *toff, int T, size_t j)
{
    uint32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            acc[r][v] = vdupq_n_u32(0);
    for (int p = 0; p < np; p++)
        for (int t = 0; t < T; t++, a += 4) {
            const uint32_t *b = B + (size_t)p * ldb + toff[t] + j;
            const uint8x16_t av = vreinterpretq_u8_u32(vld1q_u32(a));
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const uint8x16_t bv = vreinterpretq_u8_u32(vld1q_u32(b + 4 * v));
                acc[0][v] = vdotq_laneq_u32(acc[0][v], bv, av, 0);
                acc[1][v] = vdotq_laneq_u32(acc[1][v], bv, av, 1);
                acc[2][v] = vdotq_laneq_u32(acc[2][v], bv, av, 2);
                acc[3][v] = vdotq_laneq_u32(acc[3][v], bv, av, 3);
            }
        }
    /* r runs to 4 (unrolled) so that acc stays in registers: a runtime
     * bound on r made GCC keep acc on the stack, stored every K step */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            if (r < rows)
                vst1q_s32(S + (size_t)r * ldc + j + 4 * v, vreinterpretq_s32_u32(acc[r][v]));
}

void lp_shiftgemm_dotprod(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                          size_t ldb, int np, const int *toff, int T, size_t n)
{
    lp_shiftgemm_tiles16(s_tile16, S, ldc, Ap, M, B, ldb, np, toff, T, n);
}
