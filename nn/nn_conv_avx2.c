/* nn_conv_avx2 — AVX2+FMA twins of the "shifted GEMM" kernels of
 * nn_conv_avx512.c, for CPUs without AVX-512 (declared in nn_layers_simd.h).
 *
 * Owns:    nn_avx2_shiftgemm (forward and input-gradient products) and
 *          nn_avx2_shiftdot (weight-gradient products).  Built with
 *          -mavx2 -mfma; nn_conv.c calls them through the kernel table
 *          (nn_kern.h), whose x86 builder puts them in the AVX2 level's.  Their scalar twins
 *          (nn_shiftgemm_ref, nn_shiftdot_ref) live in nn_conv.c; the
 *          contract (grid, toff, packed A) is the one in nn_layers_simd.h.
 *
 * Register budget: 16 ymm.
 *   shiftgemm tile: 4 output rows (one packed m-tile of A) x 24 columns:
 *     12 accumulators, 3 B vectors, 1 broadcast of A.  Per k: 3 loads of B,
 *     4 broadcasts, 12 FMAs.
 *   shiftdot tile: 4 rows of A x 3 shifted rows of B (12 (m, k) pairs),
 *     reduced over j: per 8 columns 4 loads of A, 3 of B, 12 FMAs.
 * Column tails use vmaskmovps loads (masked lanes are neither read nor
 * faulted) and stores, so any n works and nothing past n is touched.
 * Summation order is fixed (deterministic); it differs from the scalar
 * twins only by rounding.
 */
#include "nn/nn_layers_simd.h"

#include <immintrin.h>

static inline __m256i s_mask(size_t w, size_t lo)
{
    /* lanes j with lo + j < w active */
    size_t rem = w > lo ? w - lo : 0;
    int r = rem >= 8 ? 8 : (int)rem;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), idx);
}

/* ---- shiftgemm ------------------------------------------------------------ */

#define S_NV 3 /* ymm vectors per tile row: 24 columns */

#define S_ROW_FMA(c, a) \
    do { \
        c##0 = _mm256_fmadd_ps(a, b0, c##0); \
        c##1 = _mm256_fmadd_ps(a, b1, c##1); \
        c##2 = _mm256_fmadd_ps(a, b2, c##2); \
    } while (0)
#define S_ROW_STORE(o, c) \
    do { \
        if (full) { \
            _mm256_storeu_ps((o), c##0); \
            _mm256_storeu_ps((o) + 8, c##1); \
            _mm256_storeu_ps((o) + 16, c##2); \
        } else { \
            _mm256_maskstore_ps((o), k0, c##0); \
            _mm256_maskstore_ps((o) + 8, k1, c##1); \
            _mm256_maskstore_ps((o) + 16, k2, c##2); \
        } \
    } while (0)

/* One tile: rows [0, mr) of C, columns [0, w) (w <= 24; full: w == 24).
 * Named registers: arrays of __m256 make GCC spill them. */
static inline __attribute__((always_inline)) void
s_gemm_tile(float *C, size_t ldc, int mr, const float *A, const float *B, size_t ldb, int nch,
            const int *toff, int T, size_t w, const int full)
{
    const __m256i k0 = s_mask(w, 0), k1 = s_mask(w, 8), k2 = s_mask(w, 16);
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0;
    __m256 q0 = p0, q1 = p0, q2 = p0;
    __m256 r0 = p0, r1 = p0, r2 = p0;
    __m256 s0 = p0, s1 = p0, s2 = p0;
    for (int c = 0; c < nch; c++) {
        const float *bc = B + (size_t)c * ldb;
        for (int t = 0; t < T; t++) {
            const float *b = bc + toff[t];
            __m256 b0, b1, b2;
            if (full) {
                b0 = _mm256_loadu_ps(b);
                b1 = _mm256_loadu_ps(b + 8);
                b2 = _mm256_loadu_ps(b + 16);
            } else {
                b0 = _mm256_maskload_ps(b, k0);
                b1 = _mm256_maskload_ps(b + 8, k1);
                b2 = _mm256_maskload_ps(b + 16, k2);
            }
            __m256 a = _mm256_broadcast_ss(A);
            S_ROW_FMA(p, a);
            a = _mm256_broadcast_ss(A + 1);
            S_ROW_FMA(q, a);
            a = _mm256_broadcast_ss(A + 2);
            S_ROW_FMA(r, a);
            a = _mm256_broadcast_ss(A + 3);
            S_ROW_FMA(s, a);
            A += 4;
        }
    }
    S_ROW_STORE(C, p);
    if (mr > 1)
        S_ROW_STORE(C + ldc, q);
    if (mr > 2)
        S_ROW_STORE(C + 2 * ldc, r);
    if (mr > 3)
        S_ROW_STORE(C + 3 * ldc, s);
}

void nn_avx2_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                       int nch, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nch * (size_t)T;
    const size_t tw = 8 * S_NV;
    for (size_t j0 = 0; j0 < n; j0 += tw) {
        const size_t w = n - j0 < tw ? n - j0 : tw;
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mr = M - m0 < 4 ? M - m0 : 4;
            const float *A = Ap + (size_t)(m0 / 4) * K * 4;
            if (w == tw)
                s_gemm_tile(C + (size_t)m0 * ldc + j0, ldc, mr, A, B + j0, ldb, nch, toff, T, w, 1);
            else
                s_gemm_tile(C + (size_t)m0 * ldc + j0, ldc, mr, A, B + j0, ldb, nch, toff, T, w, 0);
        }
    }
}

/* ---- shiftdot ------------------------------------------------------------- */

#define S_DM 4 /* rows of A per tile */
#define S_DK 3 /* shifted rows of B per tile */

#define S_DOT_FMA(c, a) \
    do { \
        c##0 = _mm256_fmadd_ps(a, b0, c##0); \
        c##1 = _mm256_fmadd_ps(a, b1, c##1); \
        c##2 = _mm256_fmadd_ps(a, b2, c##2); \
    } while (0)

static inline float s_hsum(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

#define S_DOT_STORE(row, c) \
    do { \
        float *d_ = D + (size_t)(m0 + (row)) * ldd + (size_t)k0; \
        float v_[S_DK] = {s_hsum(c##0), s_hsum(c##1), s_hsum(c##2)}; \
        for (int q_ = 0; q_ < kr; q_++) \
            d_[q_] += v_[q_]; \
    } while (0)

void nn_avx2_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                      size_t ldb, int nch, const int *toff, int T, size_t n)
{
    const int K = nch * T;
    const size_t nf = n & ~(size_t)7;
    const __m256i tail = s_mask(n - nf, 0);
    for (int k0 = 0; k0 < K; k0 += S_DK) {
        const int kr = K - k0 < S_DK ? K - k0 : S_DK;
        const float *bp[S_DK];
        for (int q = 0; q < S_DK; q++) {
            int k = k0 + (q < kr ? q : 0); /* unused lanes repeat a valid row */
            bp[q] = B + (size_t)(k / T) * ldb + toff[k % T];
        }
        const float *B0 = bp[0], *B1 = bp[1], *B2 = bp[2];
        for (int m0 = 0; m0 < M; m0 += S_DM) {
            const int mr = M - m0 < S_DM ? M - m0 : S_DM;
            const float *A0 = A + (size_t)m0 * lda;
            const float *A1 = mr > 1 ? A0 + lda : A0, *A2 = mr > 2 ? A0 + 2 * lda : A0;
            const float *A3 = mr > 3 ? A0 + 3 * lda : A0;
            __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0;
            __m256 q0 = p0, q1 = p0, q2 = p0;
            __m256 r0 = p0, r1 = p0, r2 = p0;
            __m256 s0 = p0, s1 = p0, s2 = p0;
            size_t j = 0;
            for (; j < nf; j += 8) {
                __m256 b0 = _mm256_loadu_ps(B0 + j), b1 = _mm256_loadu_ps(B1 + j);
                __m256 b2 = _mm256_loadu_ps(B2 + j);
                __m256 a = _mm256_loadu_ps(A0 + j);
                S_DOT_FMA(p, a);
                a = _mm256_loadu_ps(A1 + j);
                S_DOT_FMA(q, a);
                a = _mm256_loadu_ps(A2 + j);
                S_DOT_FMA(r, a);
                a = _mm256_loadu_ps(A3 + j);
                S_DOT_FMA(s, a);
            }
            if (j < n) {
                __m256 b0 = _mm256_maskload_ps(B0 + j, tail);
                __m256 b1 = _mm256_maskload_ps(B1 + j, tail);
                __m256 b2 = _mm256_maskload_ps(B2 + j, tail);
                __m256 a = _mm256_maskload_ps(A0 + j, tail);
                S_DOT_FMA(p, a);
                a = _mm256_maskload_ps(A1 + j, tail);
                S_DOT_FMA(q, a);
                a = _mm256_maskload_ps(A2 + j, tail);
                S_DOT_FMA(r, a);
                a = _mm256_maskload_ps(A3 + j, tail);
                S_DOT_FMA(s, a);
            }
            S_DOT_STORE(0, p);
            if (mr > 1)
                S_DOT_STORE(1, q);
            if (mr > 2)
                S_DOT_STORE(2, r);
            if (mr > 3)
                S_DOT_STORE(3, s);
        }
    }
}
