/* lp_gemm_pairs_avx512bw — the int16-pair shifted-row GEMM (lp_shiftgemm,
 * lp_gemm.h) on 512-bit registers, for CPUs with AVX-512 BW but no VNNI
 * (the "avx512" level; AVX-512 VNNI runs byte quads instead).
 *
 * Owns:    lp_shiftgemm_avx512bw and the correction of its rows
 *          (lp_dequant_row_avx512bw, lp_dequant_rows_avx512bw).
 * Exposes: them through lp_simd.h, for the kernel table (lp_kern_x86.c).
 * Callers: lp_shiftgemm, lp_dequant_row(s) at the avx512 level.
 *
 * A tile is 4 rows x 32 columns in 8 zmm accumulators; every (pair row,
 * tap) step loads two vectors of B at the tap's offset and broadcasts one
 * pair lane of A per row: vpmaddwd, then vpaddd.  Integer sums: the same
 * values as lp_shiftgemm_ref and the AVX2 kernel.  Built without -mavx512vnni
 * so the compiler cannot fuse the pair into vpdpwssd. */
#include <immintrin.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"

#define S_MADD(c, a) \
    do { \
        c##0 = _mm512_add_epi32(c##0, _mm512_madd_epi16(a, b0)); \
        c##1 = _mm512_add_epi32(c##1, _mm512_madd_epi16(a, b1)); \
    } while (0)
#define S_STORE(o, c) \
    do { \
        _mm512_mask_storeu_epi32((o), k0, c##0); \
        _mm512_mask_storeu_epi32((o) + 16, k1, c##1); \
    } while (0)

/* S rows [0, mr) (of ldc), columns [0, w) (w <= 32) = the shifted dot of
 * packed A (an m-tile of 4 rows: lanes A[k*4 + r]) with B (np pair rows of
 * ldb lanes, tap t at toff[t]).  Overwrites those lanes of S only. */
static inline __attribute__((always_inline)) void
s_tile(int32_t *S, size_t ldc, int mr, const uint32_t *A, const uint32_t *B, size_t ldb, int np,
       const int *toff, int T, size_t w)
{
    const __mmask16 k0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);
    const __mmask16 k1 = w >= 32 ? (__mmask16)0xFFFF
                                 : w <= 16 ? (__mmask16)0 : (__mmask16)((1u << (w - 16)) - 1u);
    __m512i p0 = _mm512_setzero_si512(), p1 = p0, q0 = p0, q1 = p0;
    __m512i r0 = p0, r1 = p0, s0 = p0, s1 = p0;
    for (int p = 0; p < np; p++) {
        const uint32_t *bp = B + (size_t)p * ldb;
        for (int t = 0; t < T; t++) {
            const int *b = (const int *)(bp + toff[t]);
            const __m512i b0 = _mm512_maskz_loadu_epi32(k0, b);
            const __m512i b1 = _mm512_maskz_loadu_epi32(k1, b + 16);
            __m512i a = _mm512_set1_epi32((int)A[0]);
            S_MADD(p, a);
            a = _mm512_set1_epi32((int)A[1]);
            S_MADD(q, a);
            a = _mm512_set1_epi32((int)A[2]);
            S_MADD(r, a);
            a = _mm512_set1_epi32((int)A[3]);
            S_MADD(s, a);
            A += 4;
        }
    }
    S_STORE(S, p);
    if (mr > 1)
        S_STORE(S + ldc, q);
    if (mr > 2)
        S_STORE(S + 2 * ldc, r);
    if (mr > 3)
        S_STORE(S + 3 * ldc, s);
}

void lp_shiftgemm_avx512bw(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                           size_t ldb, int np, const int *toff, int T, size_t n)
{
    const size_t K2 = (size_t)np * (size_t)T, tw = 32;
    for (size_t j0 = 0; j0 < n; j0 += tw) {
        const size_t w = n - j0 < tw ? n - j0 : tw;
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mr = M - m0 < 4 ? M - m0 : 4;
            s_tile(S + (size_t)m0 * ldc + j0, ldc, mr, Ap + (size_t)(m0 / 4) * K2 * 4, B + j0,
                   ldb, np, toff, T, w);
        }
    }
}

/* out = (float)(c*S + t + base) in double, 8 values a step: the same three
 * roundings as lp_dequant_row_ref (mul, add, add; no FMA), then one to
 * float; the tail runs the twin. */
static inline __attribute__((always_inline)) void
s_dequant_row(float *out, const int32_t *S, const double *t, __m512d vc, double c,
              const double *base, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d v = _mm512_cvtepi32_pd(_mm256_loadu_si256((const __m256i *)(S + i)));
        v = _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(vc, v), _mm512_loadu_pd(t + i)),
                          _mm512_loadu_pd(base + i));
        _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(v));
    }
    lp_dequant_row_ref(out + i, S + i, t + i, c, base + i, n - i);
}

void lp_dequant_row_avx512bw(float *out, const int32_t *S, const double *t, double c,
                             const double *base, size_t n)
{
    s_dequant_row(out, S, t, _mm512_set1_pd(c), c, base, n);
}

void lp_dequant_rows_avx512bw(float *out, const int32_t *S, const double *t, double c,
                              const double *base, size_t W, int rows)
{
    const __m512d vc = _mm512_set1_pd(c);
    for (int r = 0; r < rows; r++)
        s_dequant_row(out + (size_t)r * W, S + (size_t)r * W, t + (size_t)r * W, vc, c, base, W);
}
