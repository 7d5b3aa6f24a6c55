/* lp_bf16_avx512bf16 — AVX-512 BF16 kernels behind lp_bf16.h, built with the
 * AVX-512 and BF16 flags and called only when lp_bf16_supported().
 *
 * lp_shiftdot_bf16_avx512bf16: the tile of nn's FP32 shiftdot (4 rows of A
 * x 6 shifted rows of B, 24 zmm accumulators, reduced over j), on bf16:
 * each vdpbf16ps takes 32 values of a row (16 lanes of two consecutive
 * pixels) and adds the two exact products of each lane into FP32: twice
 * the products of an FP32 FMA per instruction and half the bytes loaded.
 * Tails (n % 32) use masked loads (zero-fill).  Fixed summation order.
 */
#include <immintrin.h>
#include <string.h>

#include "lowprec/lp_bf16.h"

void lp_bf16_row_avx512bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i += 32) {
        /* tails masked: nothing read or written past n */
        const size_t left = n - i;
        const __mmask16 klo = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        const __mmask16 khi =
            left >= 32 ? (__mmask16)0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1u);
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(khi, src + i + 16),
                                         _mm512_maskz_loadu_ps(klo, src + i));
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)klo | (__mmask32)khi << 16, (__m512i)h);
    }
}

void lp_bf16_codes_row_avx512bf16(uint16_t *dst, const uint8_t *q, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const size_t left = n - i;
        const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, q + i)));
        /* exact: the low 16 bits of an integer 0..255 as float are zero */
        __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
        _mm256_mask_storeu_epi16(dst + i, k, h);
    }
}

#define S_DM 4 /* rows of A per tile */
#define S_DK 6 /* shifted rows of B per tile */

#define S_DOT(c, a) \
    do { \
        c##0 = _mm512_dpbf16_ps(c##0, a, b0); \
        c##1 = _mm512_dpbf16_ps(c##1, a, b1); \
        c##2 = _mm512_dpbf16_ps(c##2, a, b2); \
        c##3 = _mm512_dpbf16_ps(c##3, a, b3); \
        c##4 = _mm512_dpbf16_ps(c##4, a, b4); \
        c##5 = _mm512_dpbf16_ps(c##5, a, b5); \
    } while (0)
#define S_STORE(row, c) \
    do { \
        float *d_ = D + (size_t)(m0 + (row)) * ldd + (size_t)k0; \
        float v_[S_DK] = {_mm512_reduce_add_ps(c##0), _mm512_reduce_add_ps(c##1), \
                          _mm512_reduce_add_ps(c##2), _mm512_reduce_add_ps(c##3), \
                          _mm512_reduce_add_ps(c##4), _mm512_reduce_add_ps(c##5)}; \
        for (int q_ = 0; q_ < kr; q_++) \
            d_[q_] += v_[q_]; \
    } while (0)

static inline __m512bh s_ld(const uint16_t *p, __mmask32 k, int full)
{
    return (__m512bh)(full ? _mm512_loadu_si512((const void *)p) : _mm512_maskz_loadu_epi16(k, p));
}

/* One step of 32 values (full) or the masked tail. */
#define S_STEP(full, k) \
    do { \
        __m512bh b0 = s_ld(B0 + j, k, full), b1 = s_ld(B1 + j, k, full); \
        __m512bh b2 = s_ld(B2 + j, k, full), b3 = s_ld(B3 + j, k, full); \
        __m512bh b4 = s_ld(B4 + j, k, full), b5 = s_ld(B5 + j, k, full); \
        __m512bh a = s_ld(A0 + j, k, full); \
        S_DOT(p, a); \
        a = s_ld(A1 + j, k, full); \
        S_DOT(q, a); \
        a = s_ld(A2 + j, k, full); \
        S_DOT(r, a); \
        a = s_ld(A3 + j, k, full); \
        S_DOT(s, a); \
    } while (0)

void lp_shiftdot_bf16_avx512bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                                 const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                                 size_t n)
{
    const int K = nch * T;
    const size_t nf = n & ~(size_t)31;
    const __mmask32 tail = (__mmask32)((1ull << (n - nf)) - 1u);
    for (int k0 = 0; k0 < K; k0 += S_DK) {
        const int kr = K - k0 < S_DK ? K - k0 : S_DK;
        const uint16_t *bp[S_DK];
        for (int q = 0; q < S_DK; q++) {
            int k = k0 + (q < kr ? q : 0); /* unused lanes repeat a valid row */
            bp[q] = B + (size_t)(k / T) * ldb + toff[k % T];
        }
        const uint16_t *B0 = bp[0], *B1 = bp[1], *B2 = bp[2], *B3 = bp[3], *B4 = bp[4];
        const uint16_t *B5 = bp[5];
        for (int m0 = 0; m0 < M; m0 += S_DM) {
            const int mr = M - m0 < S_DM ? M - m0 : S_DM;
            const uint16_t *A0 = A + (size_t)m0 * lda;
            const uint16_t *A1 = mr > 1 ? A0 + lda : A0, *A2 = mr > 2 ? A0 + 2 * lda : A0;
            const uint16_t *A3 = mr > 3 ? A0 + 3 * lda : A0;
            __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
            __m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;
            __m512 r0 = p0, r1 = p0, r2 = p0, r3 = p0, r4 = p0, r5 = p0;
            __m512 s0 = p0, s1 = p0, s2 = p0, s3 = p0, s4 = p0, s5 = p0;
            size_t j = 0;
            for (; j < nf; j += 32)
                S_STEP(1, 0);
            if (tail)
                S_STEP(0, tail);
            S_STORE(0, p);
            if (mr > 1)
                S_STORE(1, q);
            if (mr > 2)
                S_STORE(2, r);
            if (mr > 3)
                S_STORE(3, s);
        }
    }
}
