/* lp_gemm_blk — the portable level's pair shift GEMM: lp_shiftgemm_ref's
 * sums as blocked loops that compilers vectorize with the baseline vector
 * unit of any target (SSE2, NEON, ...), no intrinsics.
 *
 * Owns:    lp_shiftgemm_blk.  Register-sized tiles: the 4 rows of a packed
 *          A block x LP_BLK_J columns of int32 sums in generic 16-byte
 *          vectors; per K step each row multiplies its code pair into the
 *          B lanes as u16 halves (codes 0..255: at most 65025, exact in 16
 *          bits) and adds both halves of each lane, widened, to its sums.
 *          Integer sums, so bit-identical to the twin in any order.
 * Callers: the kernel table's portable entry (lp_kern.c), which every
 *          level without a SIMD shift GEMM of its own keeps.
 */
#include <string.h>

#include "lowprec/lp_gemm.h"

/* GNU C generic vectors of the baseline vector width (16 bytes: SSE2,
 * NEON, ...; scalar code where a target has none), no intrinsics */
typedef uint16_t s_u16x8 __attribute__((vector_size(16)));
typedef uint32_t s_u32x4 __attribute__((vector_size(16)));

#define LP_BLK_J 8

/* acc += the pair products of the 4 B lanes v with the code pair of a:
 * the u32 lanes seen as u16 halves multiply lane by lane (codes 0..255:
 * each product fits 16 bits; a 16-bit multiply, e.g. pmullw), then the
 * two halves of each u32 lane are added, widened.  Either byte order
 * pairs the halves alike. */
static inline s_u32x4 s_pairs(s_u32x4 acc, s_u32x4 av, s_u32x4 v)
{
    const s_u32x4 p = (s_u32x4)((s_u16x8)av * (s_u16x8)v);
    return acc + (p & 0xFFFF) + (p >> 16);
}

/* The 8 B lanes at b (w of them; the rest 0) */
static inline void s_load(s_u32x4 v[2], const uint32_t *b, size_t w)
{
    if (w == LP_BLK_J) {
        memcpy(v, b, 2 * sizeof *v);
        return;
    }
    uint32_t lanes[LP_BLK_J] = {0};
    memcpy(lanes, b, w * sizeof *b);
    memcpy(v, lanes, 2 * sizeof *v);
}

/* S rows of one packed A block (rows <= 4), columns j0..j0+w-1 (w <= 8);
 * the 8 sums of each row in named variables, so they stay in registers */
static void s_tile(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *B,
                   size_t ldb, int np, const int *toff, int T, size_t j0, size_t w)
{
    s_u32x4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0},
            c31 = {0};
    for (int p = 0; p < np; p++)
        for (int t = 0; t < T; t++, a += 4) {
            s_u32x4 v[2];
            s_load(v, B + (size_t)p * ldb + toff[t] + j0, w);
            const s_u32x4 a0 = {a[0], a[0], a[0], a[0]}, a1 = {a[1], a[1], a[1], a[1]};
            const s_u32x4 a2 = {a[2], a[2], a[2], a[2]}, a3 = {a[3], a[3], a[3], a[3]};
            c00 = s_pairs(c00, a0, v[0]);
            c01 = s_pairs(c01, a0, v[1]);
            c10 = s_pairs(c10, a1, v[0]);
            c11 = s_pairs(c11, a1, v[1]);
            c20 = s_pairs(c20, a2, v[0]);
            c21 = s_pairs(c21, a2, v[1]);
            c30 = s_pairs(c30, a3, v[0]);
            c31 = s_pairs(c31, a3, v[1]);
        }
    const s_u32x4 acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
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
