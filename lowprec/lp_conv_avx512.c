/* lp_conv_avx512 — AVX-512 VNNI kernels of the integer shift-path
 * convolution on byte quads (lp_conv_shift.c; contracts in lp_gemm.h and
 * lp_simd.h).  Built with the AVX-512 flags and called only through the
 * kernel tables of the AVX-512 VNNI levels (lp_kern_x86.c); each has a scalar twin (_ref) that
 * gives the same integers and the same floats.
 *
 * lp_shiftgemm_q_avx512: a tile is 4 rows (one packed m-tile) x 64 columns,
 * 16 zmm accumulators; per (quad row, tap) 4 loads of B (shifted by the
 * tap's offset), 4 broadcasts of A and 16 vpdpbusd, each 64 exact u8 x s8
 * products accumulated in int32: 4x the products of AVX2's vpmaddwd, with
 * the add folded in.  Column tails are masked (loads zero-fill, stores skip).
 */
#include <immintrin.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"

/* Lanes [0, min(16, w - lo)) of a 16-lane vector. */
static inline __mmask16 s_mask(size_t w, size_t lo)
{
    size_t rem = w > lo ? w - lo : 0;
    return rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u);
}

#define S_DP4(c, a) \
    do { \
        c##0 = _mm512_dpbusd_epi32(c##0, b0, a); \
        c##1 = _mm512_dpbusd_epi32(c##1, b1, a); \
        c##2 = _mm512_dpbusd_epi32(c##2, b2, a); \
        c##3 = _mm512_dpbusd_epi32(c##3, b3, a); \
    } while (0)
#define S_ST4(o, c) \
    do { \
        _mm512_mask_storeu_epi32((o), k0, c##0); \
        _mm512_mask_storeu_epi32((o) + 16, k1, c##1); \
        _mm512_mask_storeu_epi32((o) + 32, k2, c##2); \
        _mm512_mask_storeu_epi32((o) + 48, k3, c##3); \
    } while (0)

/* Rows [0, mr) x columns [0, w) of one tile (w <= 64; full: w == 64). */
static inline __attribute__((always_inline)) void
s_qtile(int32_t *S, size_t ldc, int mr, const uint32_t *A, const uint32_t *B, size_t ldb, int nq,
        const int *toff, int T, size_t w, const int full)
{
    const __mmask16 k0 = s_mask(w, 0), k1 = s_mask(w, 16), k2 = s_mask(w, 32), k3 = s_mask(w, 48);
    __m512i p0 = _mm512_setzero_si512(), p1 = p0, p2 = p0, p3 = p0;
    __m512i q0 = p0, q1 = p0, q2 = p0, q3 = p0;
    __m512i r0 = p0, r1 = p0, r2 = p0, r3 = p0;
    __m512i s0 = p0, s1 = p0, s2 = p0, s3 = p0;
    for (int p = 0; p < nq; p++) {
        const uint32_t *bp = B + (size_t)p * ldb;
        for (int t = 0; t < T; t++) {
            const uint32_t *b = bp + toff[t];
            __m512i b0, b1, b2, b3;
            if (full) {
                b0 = _mm512_loadu_si512((const void *)b);
                b1 = _mm512_loadu_si512((const void *)(b + 16));
                b2 = _mm512_loadu_si512((const void *)(b + 32));
                b3 = _mm512_loadu_si512((const void *)(b + 48));
            } else {
                b0 = _mm512_maskz_loadu_epi32(k0, b);
                b1 = _mm512_maskz_loadu_epi32(k1, b + 16);
                b2 = _mm512_maskz_loadu_epi32(k2, b + 32);
                b3 = _mm512_maskz_loadu_epi32(k3, b + 48);
            }
            __m512i a = _mm512_set1_epi32((int)A[0]);
            S_DP4(p, a);
            a = _mm512_set1_epi32((int)A[1]);
            S_DP4(q, a);
            a = _mm512_set1_epi32((int)A[2]);
            S_DP4(r, a);
            a = _mm512_set1_epi32((int)A[3]);
            S_DP4(s, a);
            A += 4;
        }
    }
    S_ST4(S, p);
    if (mr > 1)
        S_ST4(S + ldc, q);
    if (mr > 2)
        S_ST4(S + 2 * ldc, r);
    if (mr > 3)
        S_ST4(S + 3 * ldc, s);
}

void lp_shiftgemm_q_avx512(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                           size_t ldb, int nq, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nq * (size_t)T, tw = 64;
    for (size_t j0 = 0; j0 < n; j0 += tw) {
        const size_t w = n - j0 < tw ? n - j0 : tw;
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mr = M - m0 < 4 ? M - m0 : 4;
            const uint32_t *A = Ap + (size_t)(m0 / 4) * K * 4;
            int32_t *o = S + (size_t)m0 * ldc + j0;
            if (w == tw)
                s_qtile(o, ldc, mr, A, B + j0, ldb, nq, toff, T, w, 1);
            else
                s_qtile(o, ldc, mr, A, B + j0, ldb, nq, toff, T, w, 0);
        }
    }
}

/* 16 codes of row r from w (k: the lanes to read; NULL rows are zero). */
static inline __m512i s_ld16(const uint8_t *r, size_t w, __mmask16 k)
{
    return r ? _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, r + w)) : _mm512_setzero_si512();
}

void lp_quad_row_avx512(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n)
{
    for (size_t w = 0; w < n; w += 16) {
        const __mmask16 k = s_mask(n - w, 0); /* tails masked, nothing read or written past n */
        __m512i c0 = s_ld16(r[0], w, k), c1 = s_ld16(r[1], w, k);
        __m512i c2 = s_ld16(r[2], w, k), c3 = s_ld16(r[3], w, k);
        __m512i q = _mm512_or_si512(_mm512_or_si512(c0, _mm512_slli_epi32(c1, 8)),
                                    _mm512_or_si512(_mm512_slli_epi32(c2, 16),
                                                    _mm512_slli_epi32(c3, 24)));
        _mm512_mask_storeu_epi32(dst + w, k, q);
        if (chs) {
            __m512i s = _mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3));
            _mm512_mask_storeu_epi32(chs + w, k,
                                     _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, chs + w), s));
        }
    }
}

void lp_tap_isum_row_avx512(int32_t *sb, const int32_t *s, const int *off, int T, size_t n)
{
    for (size_t w = 0; w < n; w += 16) {
        const __mmask16 k = s_mask(n - w, 0);
        __m512i acc = _mm512_setzero_si512();
        for (int t = 0; t < T; t++)
            acc = _mm512_add_epi32(acc, _mm512_maskz_loadu_epi32(k, s + w + off[t]));
        _mm512_mask_storeu_epi32(sb + w, k, acc);
    }
}

/* The twin's order: (c*(S + 128*SB) + cb*SB) + base, no FMA, one rounding
 * to float at the end. */
void lp_dequant_row_q_avx512(float *out, const int32_t *S, const int32_t *SB, double c,
                             double cb, const double *base, size_t n)
{
    const __m512d vc = _mm512_set1_pd(c), vb = _mm512_set1_pd(cb);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = s_mask(n - i, 0);
        const __mmask8 klo = (__mmask8)k, khi = (__mmask8)(k >> 8);
        __m512i sb = _mm512_maskz_loadu_epi32(k, SB + i);
        __m512i s = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, S + i), _mm512_slli_epi32(sb, 7));
        __m512d slo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(s));
        __m512d shi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(s, 1));
        __m512d blo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(sb));
        __m512d bhi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(sb, 1));
        slo = _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(vc, slo), _mm512_mul_pd(vb, blo)),
                            _mm512_maskz_loadu_pd(klo, base + i));
        shi = _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(vc, shi), _mm512_mul_pd(vb, bhi)),
                            _mm512_maskz_loadu_pd(khi, base + i + 8));
        _mm256_mask_storeu_ps(out + i, klo, _mm512_cvtpd_ps(slo));
        _mm256_mask_storeu_ps(out + i + 8, khi, _mm512_cvtpd_ps(shi));
    }
}
