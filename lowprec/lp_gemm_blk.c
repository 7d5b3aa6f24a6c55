/* lp_gemm_blk — the portable level's pair shift GEMM: lp_shiftgemm_ref's
 * sums as blocked loops that compilers vectorize with the baseline vector
 * unit of any target (SSE2, NEON, ...), no intrinsics.
 *
 * Owns:    lp_shiftgemm_blk.  Register-sized tiles: the 4 rows of a packed
 *          A block x LP_BLK_J columns of int32 sums; per K step the B lanes
 *          of the tile are split once into their two codes (uint16), then
 *          each row adds a_lo b_lo + a_hi b_hi to its sums: 16-bit
 *          products (codes 0..255: at most 65025) widened into int32
 *          sums.  Integer sums, so bit-identical to the twin in any order.
 * Callers: the kernel table's portable entry (lp_kern.c), which every
 *          level without a SIMD shift GEMM of its own keeps.
 */
#include <string.h>

#include "lowprec/lp_gemm.h"

#define LP_BLK_J 16

/* S rows of one packed A block (rows <= 4), columns j0..j0+w-1 (w <= 16) */
static void s_tile(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *B,
                   size_t ldb, int np, const int *toff, int T, size_t j0, size_t w)
{
    int32_t acc[4][LP_BLK_J];
    memset(acc, 0, sizeof acc);
    for (int p = 0; p < np; p++)
        for (int t = 0; t < T; t++, a += 4) {
            const uint32_t *b = B + (size_t)p * ldb + toff[t] + j0;
            uint16_t bl[LP_BLK_J], bh[LP_BLK_J];
            if (w == LP_BLK_J) {
                for (int j = 0; j < LP_BLK_J; j++) {
                    bl[j] = (uint16_t)(b[j] & 0xFFFF);
                    bh[j] = (uint16_t)(b[j] >> 16);
                }
            } else {
                for (size_t j = 0; j < LP_BLK_J; j++) {
                    const uint32_t v = j < w ? b[j] : 0;
                    bl[j] = (uint16_t)(v & 0xFFFF);
                    bh[j] = (uint16_t)(v >> 16);
                }
            }
            for (int r = 0; r < 4; r++) {
                const uint16_t al = (uint16_t)(a[r] & 0xFFFF), ah = (uint16_t)(a[r] >> 16);
                for (int j = 0; j < LP_BLK_J; j++) {
                    /* codes 0..255: each product fits 16 bits (16-bit
                     * multiplies, e.g. pmullw on SSE2), the sum is widened */
                    const uint16_t p1 = (uint16_t)(al * bl[j]), p2 = (uint16_t)(ah * bh[j]);
                    acc[r][j] += (int32_t)p1 + (int32_t)p2;
                }
            }
        }
    for (int r = 0; r < rows; r++)
        memcpy(S + (size_t)r * ldc + j0, acc[r], w * sizeof(int32_t));
}

void lp_shiftgemm_blk(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                      size_t ldb, int np, const int *toff, int T, size_t n)
{
    const size_t K2 = (size_t)np * T;
    for (int m0 = 0; m0 < M; m0 += 4) {
        const uint32_t *a = Ap + (size_t)(m0 / 4) * K2 * 4;
        const int rows = M - m0 < 4 ? M - m0 : 4;
        for (size_t j0 = 0; j0 < n; j0 += LP_BLK_J)
            s_tile(S + (size_t)m0 * ldc, ldc, a, rows, B, ldb, np, toff, T, j0,
                   n - j0 < LP_BLK_J ? n - j0 : LP_BLK_J);
    }
}
