/* lp_gemm_i8mm — lp_shiftgemm on UMMLA (vmmlaq_u32, the Armv8.6 int8
 * matrix multiply; this file alone is built with -march=...+i8mm and runs
 * only at the I8MM level, lp_kern_arm.c).
 *
 * UMMLA multiplies a 2x8 byte matrix by the transpose of another: four
 * 8-byte dot products into a 2x2 block of u32 sums.  A pair lane (lo | hi
 * << 16, codes 0..255) read as bytes is (lo, 0, hi, 0), so an 8-byte row
 * made of the lanes of two consecutive K steps k, k+1 gives the sum of both
 * steps' pair products, exact in u32 as on UDOT (lp_gemm_dotprod.c).  Both
 * operands are unsigned codes, so the u8 x u8 form (UMMLA), not USMMLA.
 * Packing, in registers: two A loads (steps k, k+1 of the 4-row tile) zip
 * into rows (m, m+1) and (m+2, m+3); two B loads (steps k, k+1, 4 columns)
 * zip into column pairs (j, j+1) and (j+2, j+3).  An odd last step pairs
 * with zeros.  Register tile 4 rows x 16 columns: 16 accumulators of 2x2,
 * 16 UMMLA per step pair (32 pair products each, 256 in all); the loops
 * are unrolled so that the accumulators stay in registers.
 */
#include <arm_neon.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd_arm.h"

/* acc[r][c]: rows (2r, 2r+1) x columns (2c, 2c+1) of the tile; b0/b1 the
 * grid rows of steps k and k+1 at the tile's first column (b1 NULL: zeros) */
static inline void s_step(uint32x4_t acc[2][8], uint32x4_t a0, uint32x4_t a1,
                          const uint32_t *b0, const uint32_t *b1)
{
    const uint8x16_t ar0 = vreinterpretq_u8_u32(vzip1q_u32(a0, a1));
    const uint8x16_t ar1 = vreinterpretq_u8_u32(vzip2q_u32(a0, a1));
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const uint32x4_t x0 = vld1q_u32(b0 + 4 * v);
        const uint32x4_t x1 = b1 ? vld1q_u32(b1 + 4 * v) : vdupq_n_u32(0);
        const uint8x16_t c0 = vreinterpretq_u8_u32(vzip1q_u32(x0, x1));
        const uint8x16_t c1 = vreinterpretq_u8_u32(vzip2q_u32(x0, x1));
        acc[0][2 * v] = vmmlaq_u32(acc[0][2 * v], ar0, c0);
        acc[0][2 * v + 1] = vmmlaq_u32(acc[0][2 * v + 1], ar0, c1);
        acc[1][2 * v] = vmmlaq_u32(acc[1][2 * v], ar1, c0);
        acc[1][2 * v + 1] = vmmlaq_u32(acc[1][2 * v + 1], ar1, c1);
    }
}

/* S rows m0..m0+rows-1 (rows <= 4), columns j..j+15 */
static void s_tile16(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *B,
                     size_t ldb, int np, const int *toff, int T, size_t j)
{
    uint32x4_t acc[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            acc[r][c] = vdupq_n_u32(0);
    const size_t K2 = (size_t)np * T;
    size_t k = 0;
    int p = 0, t = 0;
    for (; k + 1 < K2; k += 2, a += 8) {
        const uint32_t *b0 = B + (size_t)p * ldb + toff[t] + j;
        if (++t == T) t = 0, p++;
        const uint32_t *b1 = B + (size_t)p * ldb + toff[t] + j;
        if (++t == T) t = 0, p++;
        s_step(acc, vld1q_u32(a), vld1q_u32(a + 4), b0, b1);
    }
    if (k < K2)
        s_step(acc, vld1q_u32(a), vdupq_n_u32(0), B + (size_t)p * ldb + toff[t] + j, NULL);
    /* block (r, c) lanes: (2r, 2c) (2r, 2c+1) (2r+1, 2c) (2r+1, 2c+1) */
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const uint64x2_t lo = vreinterpretq_u64_u32(acc[r][2 * v]);
            const uint64x2_t hi = vreinterpretq_u64_u32(acc[r][2 * v + 1]);
            if (2 * r < rows)
                vst1q_s32(S + (size_t)(2 * r) * ldc + j + 4 * v,
                          vreinterpretq_s32_u64(vzip1q_u64(lo, hi)));
            if (2 * r + 1 < rows)
                vst1q_s32(S + (size_t)(2 * r + 1) * ldc + j + 4 * v,
                          vreinterpretq_s32_u64(vzip2q_u64(lo, hi)));
        }
}

void lp_shiftgemm_i8mm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       size_t ldb, int np, const int *toff, int T, size_t n)
{
    lp_shiftgemm_tiles16(s_tile16, S, ldc, Ap, M, B, ldb, np, toff, T, n);
}
