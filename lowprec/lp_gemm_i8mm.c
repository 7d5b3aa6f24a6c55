/* lp_gemm_i8mm — lp_shiftgemm on UMMLA (vmmlaq_u32, the Armv8.6 int8
 * matrix multiply; this file alone is built with -march=...+i8mm and runs
 * only at the I8MM level, lp_kern_arm.c).
 *
 * UMMLA multiplies a 2x8 byte matrix by the transpose of another: four
 * 8-byte dot products into a 2x2 block of u32 sums.  A pair lane (lo | hi
 * << 16, codes 0..255) read as bytes is (lo, 0, hi, 0), so an 8-byte row
 * made of the lanes of two K steps gives the sum of both steps' pair
 * products, exact in u32 as on UDOT (lp_gemm_dotprod.c).  Both operands
 * are unsigned codes, so the u8 x u8 form (UMMLA), not USMMLA.
 *
 * Packing, once per call: the two steps of an 8-byte row are (p, t) and
 * (p + 1, t) -- two grid rows at the same shift -- so the grid's rows 2q
 * and 2q+1 interleaved lane by lane (a 64-bit column each) are UMMLA's
 * right operand at every shift, loaded as they are in the inner loop.  B
 * is packed so (only the columns the taps read: the union of [toff[t],
 * toff[t] + n16), gaps dropped) into a per-thread buffer, and A into rows
 * of (step (2q, t), step (2q+1, t)) per 4-row tile.  An odd last grid row
 * pairs with zeros.  The sums are exact integers, so this pairing gives
 * the twin's S.  Register tile 4 rows x 16 columns: 16 accumulators of
 * 2x2, per step pair 2 A loads, 8 B loads and 16 UMMLA (256 pair
 * products), no shuffles; the loops are unrolled so that the accumulators
 * stay in registers.  The last n % 16 columns run lp_shiftgemm_blk on the
 * unpacked operands.
 */
#include <arm_neon.h>
#include <pthread.h>
#include <stdlib.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd_arm.h"
#include "nn/nn_core.h"

/* S rows 0..rows-1 (rows <= 4), columns j..j+15 = the tile's blocks: acc[r][c]
 * holds rows (2r, 2r+1) x columns (2c, 2c+1), lanes (2r, 2c) (2r, 2c+1)
 * (2r+1, 2c) (2r+1, 2c+1) */
static inline void s_store(int32_t *S, size_t ldc, uint32x4_t acc[2][8], int rows, size_t j)
{
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

#define S_TMAX 64 /* most taps of the packed path (the conv takes <= 49) */

/* Per-thread packing buffer, freed when its thread ends. */
static pthread_key_t  s_key;
static pthread_once_t s_key_once = PTHREAD_ONCE_INIT;

static void s_key_make(void)
{
    if (pthread_key_create(&s_key, free) != 0)
        abort();
}

typedef struct {
    size_t cap;
    uint32_t lanes[]; /* cap */
} s_buf;

static uint32_t *s_scratch(size_t lanes)
{
    pthread_once(&s_key_once, s_key_make);
    s_buf *b = pthread_getspecific(s_key);
    if (!b || b->cap < lanes) {
        free(b);
        b = nn_xmalloc(sizeof *b + lanes * sizeof(uint32_t));
        if (pthread_setspecific(s_key, b) != 0)
            abort(); /* (ENOMEM only: the key is valid) */
        b->cap = lanes;
    }
    return b->lanes;
}

/* The union of the taps' column ranges [toff[t], toff[t] + w): up to T
 * intervals lo[i]..hi[i] (sorted, disjoint, not adjacent); pos[t] = where
 * toff[t] lands in the packed columns.  Returns the packed length. */
static size_t s_intervals(long *lo, long *hi, int *ni, size_t *pos, const int *toff, int T,
                          size_t w)
{
    long s[S_TMAX];
    for (int t = 0; t < T; t++) { /* insertion sort */
        int i = t;
        for (; i > 0 && s[i - 1] > toff[t]; i--)
            s[i] = s[i - 1];
        s[i] = toff[t];
    }
    int n = 0;
    for (int t = 0; t < T; t++) {
        if (n && s[t] <= hi[n - 1])
            hi[n - 1] = s[t] + (long)w > hi[n - 1] ? s[t] + (long)w : hi[n - 1];
        else
            lo[n] = s[t], hi[n] = s[t] + (long)w, n++;
    }
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)(hi[i] - lo[i]);
    for (int t = 0; t < T; t++) {
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            if (toff[t] >= lo[i] && toff[t] < hi[i]) {
                pos[t] = at + (size_t)(toff[t] - lo[i]);
                break;
            }
            at += (size_t)(hi[i] - lo[i]);
        }
    }
    *ni = n;
    return len;
}

/* dst (2 * count lanes) = rows r0, r1 (r1 NULL: zeros) interleaved */
static void s_zip_rows(uint32_t *dst, const uint32_t *r0, const uint32_t *r1, size_t count)
{
    size_t c = 0;
    for (; c + 4 <= count; c += 4) {
        const uint32x4_t x0 = vld1q_u32(r0 + c), x1 = r1 ? vld1q_u32(r1 + c) : vdupq_n_u32(0);
        vst1q_u32(dst + 2 * c, vzip1q_u32(x0, x1));
        vst1q_u32(dst + 2 * c + 4, vzip2q_u32(x0, x1));
    }
    for (; c < count; c++) {
        dst[2 * c] = r0[c];
        dst[2 * c + 1] = r1 ? r1[c] : 0;
    }
}

/* Bi (np2 rows of 2 * len lanes) = grid row pairs over the intervals */
static void s_pack_b(uint32_t *Bi, const uint32_t *B, size_t ldb, int np, const long *lo,
                     const long *hi, int ni, size_t len)
{
    for (int q = 0; 2 * q < np; q++) {
        const uint32_t *r0 = B + (size_t)(2 * q) * ldb;
        const uint32_t *r1 = 2 * q + 1 < np ? r0 + ldb : NULL;
        uint32_t *d = Bi + (size_t)q * 2 * len;
        for (int i = 0; i < ni; i++) {
            s_zip_rows(d, r0 + lo[i], r1 ? r1 + lo[i] : NULL, (size_t)(hi[i] - lo[i]));
            d += 2 * (size_t)(hi[i] - lo[i]);
        }
    }
}

/* Ai: per 4-row tile, per (q, t) the 8 lanes a(m, (2q,t)), a(m, (2q+1,t))
 * for m = m0..m0+3, from Ap (lp_shiftgemm's packing) */
static void s_pack_a(uint32_t *Ai, const uint32_t *Ap, int M, int np, int T)
{
    const size_t K2 = (size_t)np * T;
    const int np2 = (np + 1) / 2;
    for (int m0 = 0; m0 < M; m0 += 4) {
        const uint32_t *a = Ap + (size_t)(m0 / 4) * K2 * 4;
        for (int q = 0; q < np2; q++)
            for (int t = 0; t < T; t++, Ai += 8) {
                const uint32x4_t k0 = vld1q_u32(a + ((size_t)(2 * q) * T + t) * 4);
                const uint32x4_t k1 = 2 * q + 1 < np
                                          ? vld1q_u32(a + ((size_t)(2 * q + 1) * T + t) * 4)
                                          : vdupq_n_u32(0);
                vst1q_u32(Ai, vzip1q_u32(k0, k1));
                vst1q_u32(Ai + 4, vzip2q_u32(k0, k1));
            }
    }
}

/* S rows m0..m0+rows-1 (rows <= 4), columns j..j+15, from the packed
 * operands: a the tile's (q, t) blocks, Bi rows of ldi lanes */
static void s_tile16p(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *Bi,
                      size_t ldi, int np2, const size_t *pos, int T, size_t j)
{
    uint32x4_t acc[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            acc[r][c] = vdupq_n_u32(0);
    for (int q = 0; q < np2; q++)
        for (int t = 0; t < T; t++, a += 8) {
            const uint32_t *b = Bi + (size_t)q * ldi + 2 * (pos[t] + j);
            const uint8x16_t ar0 = vreinterpretq_u8_u32(vld1q_u32(a));
            const uint8x16_t ar1 = vreinterpretq_u8_u32(vld1q_u32(a + 4));
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const uint8x16_t bc = vreinterpretq_u8_u32(vld1q_u32(b + 4 * c));
                acc[0][c] = vmmlaq_u32(acc[0][c], ar0, bc);
                acc[1][c] = vmmlaq_u32(acc[1][c], ar1, bc);
            }
        }
    s_store(S, ldc, acc, rows, j);
}

void lp_shiftgemm_i8mm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       size_t ldb, int np, const int *toff, int T, size_t n)
{
    const size_t n16 = n / 16 * 16;
    if (T > S_TMAX) { /* (no conv has that many taps) */
        lp_shiftgemm_dotprod(S, ldc, Ap, M, B, ldb, np, toff, T, n);
        return;
    }
    if (n16 == 0) {
        lp_shiftgemm_blk(S, ldc, Ap, M, B, ldb, np, toff, T, n);
        return;
    }
    long lo[S_TMAX], hi[S_TMAX];
    size_t pos[S_TMAX];
    int ni;
    const size_t len = s_intervals(lo, hi, &ni, pos, toff, T, n16);
    const int np2 = (np + 1) / 2;
    const size_t alanes = (size_t)((M + 3) / 4) * np2 * T * 8, ldi = 2 * len;
    uint32_t *Ai = s_scratch(alanes + (size_t)np2 * ldi);
    uint32_t *Bi = Ai + alanes;
    s_pack_a(Ai, Ap, M, np, T);
    s_pack_b(Bi, B, ldb, np, lo, hi, ni, len);
    for (int m0 = 0; m0 < M; m0 += 4) {
        const uint32_t *a = Ai + (size_t)(m0 / 4) * np2 * T * 8;
        const int rows = M - m0 < 4 ? M - m0 : 4;
        for (size_t j = 0; j < n16; j += 16)
            s_tile16p(S + (size_t)m0 * ldc, ldc, a, rows, Bi, ldi, np2, pos, T, j);
    }
    if (n16 < n) /* the last columns, on the rest of each row */
        lp_shiftgemm_blk(S + n16, ldc, Ap, M, B + n16, ldb, np, toff, T, n - n16);
}
