/* lp_gemm_blk — the portable level's GEMMs: lp_shiftgemm_ref's and
 * lp_gemm_u8u8_ref's sums as blocked loops on GNU C generic vectors, the
 * baseline vector unit of any target (SSE2, NEON, ...; scalar code where
 * there is none), no intrinsics.
 *
 * The one exception: the pair products of both GEMMs are SSE2's pmaddwd
 * where the target has it (every x86-64; the generic lanes elsewhere), as
 * the compiler does not find it in the generic form.
 *
 * Owns:    lp_gemm_kernel_blk.  The packed general GEMM in 4x4 tiles: 16-bit
 *          products of the signed A and unsigned B bytes (they fit), their
 *          pairs added widened, the two pair sums of a column combined at
 *          the end.  Integer sums, bit-identical to the twin.
 *          lp_shiftgemm_blk; lp_shiftgemm_tiles16, the SIMD levels' driver
 *          around their 4x16 tiles.  Register-sized tiles: the 4 rows of a packed
 *          A block x LP_BLK_J columns of int32 sums in generic 16-byte
 *          vectors; per K step each row multiplies its code pair into the
 *          B lanes as u16 halves (codes 0..255: at most 65025, exact in 16
 *          bits) and adds both halves of each lane, widened, to its sums.
 *          Integer sums, so bit-identical to the twin in any order.
 *          lp_pair_plane_blk, the shift GEMM's B operand: each row's pair
 *          lanes built once in a loop the compiler vectorizes (the dx = 0
 *          variant), copied to the other column-shift variants, whose
 *          wrapped columns are then cleared; the twin's words.
 * Callers: the kernel table's portable entry (lp_kern.c), which every
 *          level without a SIMD shift GEMM of its own keeps.
 */
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_vec.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define LP_BLK_J 8

/* acc += the pair products of the 4 B lanes v with the code pair of a:
 * the u32 lanes seen as u16 halves multiply lane by lane (codes 0..255:
 * each product fits 16 bits; a 16-bit multiply, e.g. pmullw), then the
 * two halves of each u32 lane are added, widened.  Either byte order
 * pairs the halves alike. */
static inline nn_u32x4 s_pairs(nn_u32x4 acc, nn_u32x4 av, nn_u32x4 v)
{
#if defined(__SSE2__)
    /* x86-64's baseline vector unit does all of it in one instruction
     * (pmaddwd: the codes are non-negative int16, each pair sum at most
     * 130050); the same sums. */
    return acc + (nn_u32x4)_mm_madd_epi16((__m128i)av, (__m128i)v);
#else
    const nn_u32x4 p = (nn_u32x4)((nn_u16x8)av * (nn_u16x8)v);
    return acc + (p & 0xFFFF) + (p >> 16);
#endif
}

/* The 8 B lanes at b (w of them; the rest 0) in v0, v1 */
static inline void s_load(nn_u32x4 *v0, nn_u32x4 *v1, const uint32_t *b, size_t w)
{
    if (w == LP_BLK_J) {
        memcpy(v0, b, sizeof *v0);
        memcpy(v1, b + 4, sizeof *v1);
        return;
    }
    uint32_t lanes[LP_BLK_J] = {0};
    memcpy(lanes, b, w * sizeof *b);
    memcpy(v0, lanes, sizeof *v0);
    memcpy(v1, lanes + 4, sizeof *v1);
}

/* S rows of one packed A block (rows <= 4), columns j0..j0+w-1 (w <= 8);
 * the 8 sums of each row in named variables, so they stay in registers.
 * Inlined, so that the full tiles (w == LP_BLK_J, a constant) load B
 * straight into registers, with no branch in the K loop. */
static inline __attribute__((always_inline)) void s_tile(int32_t *S, size_t ldc, const uint32_t *a, int rows, const uint32_t *B,
                   size_t ldb, int np, const int *toff, int T, size_t j0, size_t w)
{
    nn_u32x4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0},
            c31 = {0};
    for (int p = 0; p < np; p++)
        for (int t = 0; t < T; t++, a += 4) {
            nn_u32x4 v0, v1;
            s_load(&v0, &v1, B + (size_t)p * ldb + toff[t] + j0, w);
            const nn_u32x4 a0 = {a[0], a[0], a[0], a[0]}, a1 = {a[1], a[1], a[1], a[1]};
            const nn_u32x4 a2 = {a[2], a[2], a[2], a[2]}, a3 = {a[3], a[3], a[3], a[3]};
            c00 = s_pairs(c00, a0, v0);
            c01 = s_pairs(c01, a0, v1);
            c10 = s_pairs(c10, a1, v0);
            c11 = s_pairs(c11, a1, v1);
            c20 = s_pairs(c20, a2, v0);
            c21 = s_pairs(c21, a2, v1);
            c30 = s_pairs(c30, a3, v0);
            c31 = s_pairs(c31, a3, v1);
        }
    const nn_u32x4 acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
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
        size_t j0 = 0;
        for (; j0 + LP_BLK_J <= n; j0 += LP_BLK_J)
            s_tile(S + (size_t)m0 * ldc, ldc, a, rows, B, ldb, np, toff, T, j0, LP_BLK_J);
        if (j0 < n)
            s_tile(S + (size_t)m0 * ldc, ldc, a, rows, B, ldb, np, toff, T, j0, n - j0);
    }
}

void lp_shiftgemm_tiles16(lp_shift_tile16_fn *tile, int32_t *S, size_t ldc, const uint32_t *Ap,
                          int M, const uint32_t *B, size_t ldb, int np, const int *toff, int T,
                          size_t n)
{
    const size_t K2 = (size_t)np * T, n16 = n / 16 * 16;
    for (int m0 = 0; m0 < M; m0 += 4) {
        const uint32_t *a = Ap + (size_t)(m0 / 4) * K2 * 4;
        const int rows = M - m0 < 4 ? M - m0 : 4;
        for (size_t j = 0; j < n16; j += 16)
            tile(S + (size_t)m0 * ldc, ldc, a, rows, B, ldb, np, toff, T, j);
    }
    if (n16 < n) /* the last columns, on the rest of each row */
        lp_shiftgemm_blk(S + n16, ldc, Ap, M, B + n16, ldb, np, toff, T, n - n16);
}

/* ---- the general GEMM (lp_gemm_u8u8's packed layout) ------------------ */

static inline nn_i16x8 s_wide_i8(const int8_t *p)
{
    nn_i8x8 v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, nn_i16x8);
}

static inline nn_i16x8 s_wide_u8(const uint8_t *p)
{
    nn_u8x8 v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, nn_i16x8);
}

/* lane i = a[2i] b[2i] + a[2i+1] b[2i+1]: each product fits 16 bits
 * (|a| <= 128, b <= 255), its halves sign-extended and added */
static inline nn_i32x4 s_madd(nn_i16x8 a, nn_i16x8 b)
{
#if defined(__SSE2__)
    return (nn_i32x4)_mm_madd_epi16((__m128i)a, (__m128i)b); /* pmaddwd */
#else
    const nn_u32x4 p = (nn_u32x4)(a * b);
    return ((nn_i32x4)(p << 16) >> 16) + ((nn_i32x4)p >> 16);
#endif
}

/* C rows m..m+rows-1 (rows <= 4), columns n..n+w-1 (w <= 4) += the 4x4
 * tile's products: per K quad, the 4 rows' A bytes (16, contiguous) and
 * the 4 columns' B bytes (16) widened to 16 bits; each row's quad is
 * repeated over both column halves, and the pair sums of a column kept in
 * two lanes until the end */
static void s_gemm_tile(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int Mp,
                        int Np, int K4, int m, int n, int rows, int w)
{
    nn_i32x4 c[4][2];
    memset(c, 0, sizeof c);
    for (int k4 = 0; k4 < K4; k4++) {
        const int8_t *a = Ap + ((size_t)k4 * Mp + m) * 4;
        const uint8_t *b = Bp + ((size_t)k4 * Np + n) * 4;
        const nn_i32x4 a01 = (nn_i32x4)s_wide_i8(a), a23 = (nn_i32x4)s_wide_i8(a + 8);
        const nn_i16x8 b01 = s_wide_u8(b), b23 = s_wide_u8(b + 8);
        const nn_i16x8 ar[4] = {(nn_i16x8)__builtin_shufflevector(a01, a01, 0, 1, 0, 1),
                               (nn_i16x8)__builtin_shufflevector(a01, a01, 2, 3, 2, 3),
                               (nn_i16x8)__builtin_shufflevector(a23, a23, 0, 1, 0, 1),
                               (nn_i16x8)__builtin_shufflevector(a23, a23, 2, 3, 2, 3)};
        for (int r = 0; r < 4; r++) {
            c[r][0] += s_madd(ar[r], b01);
            c[r][1] += s_madd(ar[r], b23);
        }
    }
    for (int r = 0; r < rows; r++) {
        const nn_i32x4 s = __builtin_shufflevector(c[r][0], c[r][1], 0, 2, 4, 6) +
                          __builtin_shufflevector(c[r][0], c[r][1], 1, 3, 5, 7);
        int32_t *out = C + (size_t)(m + r) * ldc + n;
        for (int j = 0; j < w; j++)
            out[j] += s[j];
    }
}

void lp_gemm_kernel_blk(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                        int K, int32_t *colsum)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M), Np = lp_gemm_np(N);
    /* column sums first: they also restore the 128 shift of A */
    for (int n = 0; n < N; n++) {
        int32_t s = 0;
        for (int k4 = 0; k4 < K4; k4++) {
            const uint8_t *b = Bp + ((size_t)k4 * Np + n) * 4;
            s += b[0] + b[1] + b[2] + b[3];
        }
        for (int m = 0; m < M; m++)
            C[(size_t)m * ldc + n] = 128 * s;
        if (colsum)
            colsum[n] = s;
    }
    for (int m = 0; m < M; m += 4)
        for (int n = 0; n < N; n += 4)
            s_gemm_tile(C, ldc, Ap, Bp, Mp, Np, K4, m, n, M - m < 4 ? M - m : 4,
                        N - n < 4 ? N - n : 4);
}

/* ---- the shift GEMM's pair planes (lp_pair_plane_ref's words) --------- */

/* dst[w] = the pair lanes of r0, r1 (r1 may be NULL: high codes 0), w < W;
 * chs[w] += their codes (chs may be NULL) */
static void s_pair_row(uint32_t *dst, int32_t *chs, const uint8_t *r0, const uint8_t *r1, int W)
{
    if (r1)
        for (int w = 0; w < W; w++)
            dst[w] = lp_pair(r0[w], r1[w]);
    else
        for (int w = 0; w < W; w++)
            dst[w] = r0[w];
    if (chs && r1)
        for (int w = 0; w < W; w++)
            chs[w] += r0[w] + r1[w];
    else if (chs)
        for (int w = 0; w < W; w++)
            chs[w] += r0[w];
}

void lp_pair_plane_blk(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W)
{
    const int pad = (V - 1) / 2;
    for (int h = 0; h < H; h++) {
        const size_t i = (size_t)h * W;
        uint32_t *row = dst + (size_t)pad * vstride + i; /* dx = 0: nothing wraps */
        s_pair_row(row, chs ? chs + (size_t)h * ldc : NULL, r0 + i, r1 ? r1 + i : NULL, W);
        for (int v = 0; v < V; v++) {
            const int dx = v - pad;
            if (dx == 0)
                continue;
            uint32_t *d = dst + (size_t)v * vstride + i;
            memcpy(d, row, (size_t)W * sizeof *d);
            /* the columns a read wrapping into the next row reaches */
            const int lo = dx < 0 ? (W + dx > 0 ? W + dx : 0) : 0;
            const int hi = dx < 0 ? W : (dx < W ? dx : W);
            if (hi > lo)
                memset(d + lo, 0, (size_t)(hi - lo) * sizeof *d);
        }
    }
}
