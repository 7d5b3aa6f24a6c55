/* nn_conv_avx512 — AVX-512 "shifted GEMM" kernels behind the im2col-free
 * stride-1 convolution of nn_conv.c (declared in nn_layers_simd.h).
 *
 * Owns:    nn_avx512_shiftgemm (forward and input-gradient products) and
 *          nn_avx512_shiftdot (weight-gradient products).  Built with the
 *          AVX-512 flags; nn_conv.c calls them through the kernel table
 *          (nn_kern.h), whose x86 builder puts them in the tables of the
 *          AVX-512 levels.  Their scalar twins
 *          (nn_shiftgemm_ref, nn_shiftdot_ref) live in nn_conv.c.
 *
 * Both kernels read a "grid": nch rows (channels) of ldb floats, and treat
 * row c shifted by toff[t] as the row k = c*T + t of a virtual lowered
 * matrix, so no im2col copy is ever made.  The caller guarantees that every
 * B[c*ldb + toff[t] + j] with 0 <= j < n is readable and finite.
 * Tiles: shiftgemm 4 output rows x 96 columns (24 zmm accumulators);
 * shiftdot 4 x 6 (m, k) pairs reduced over j.  Tails use masked loads and
 * stores, so any n works.  Summation order is fixed (deterministic).
 */
#include "nn/nn_layers_simd.h"

#include <immintrin.h>

#define S_NV 6 /* zmm vectors per shiftgemm tile row */

/* One tile: rows [0, mr) of C, columns [0, w) (w <= 96; full: w == 96).
 * Written with named registers: arrays of __m512 make GCC spill them. */
#define S_ROW_FMA(c, a) \
    do { \
        c##0 = _mm512_fmadd_ps(a, b0, c##0); \
        c##1 = _mm512_fmadd_ps(a, b1, c##1); \
        c##2 = _mm512_fmadd_ps(a, b2, c##2); \
        c##3 = _mm512_fmadd_ps(a, b3, c##3); \
        c##4 = _mm512_fmadd_ps(a, b4, c##4); \
        c##5 = _mm512_fmadd_ps(a, b5, c##5); \
    } while (0)
#define S_ROW_STORE(o, c) \
    do { \
        if (full) { \
            _mm512_storeu_ps((o), c##0); \
            _mm512_storeu_ps((o) + 16, c##1); \
            _mm512_storeu_ps((o) + 32, c##2); \
            _mm512_storeu_ps((o) + 48, c##3); \
            _mm512_storeu_ps((o) + 64, c##4); \
            _mm512_storeu_ps((o) + 80, c##5); \
        } else { \
            _mm512_mask_storeu_ps((o), k0, c##0); \
            _mm512_mask_storeu_ps((o) + 16, k1, c##1); \
            _mm512_mask_storeu_ps((o) + 32, k2, c##2); \
            _mm512_mask_storeu_ps((o) + 48, k3, c##3); \
            _mm512_mask_storeu_ps((o) + 64, k4, c##4); \
            _mm512_mask_storeu_ps((o) + 80, k5, c##5); \
        } \
    } while (0)

static inline __mmask16 s_mask(size_t w, size_t lo)
{
    size_t rem = w > lo ? w - lo : 0;
    return rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u);
}

static inline __attribute__((always_inline)) void
s_gemm_tile(float *C, size_t ldc, int mr, const float *A, const float *B, size_t ldb, int nch,
            const int *toff, int T, size_t w, int full)
{
    const __mmask16 k0 = s_mask(w, 0), k1 = s_mask(w, 16), k2 = s_mask(w, 32);
    const __mmask16 k3 = s_mask(w, 48), k4 = s_mask(w, 64), k5 = s_mask(w, 80);
    __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
    __m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;
    __m512 r0 = p0, r1 = p0, r2 = p0, r3 = p0, r4 = p0, r5 = p0;
    __m512 s0 = p0, s1 = p0, s2 = p0, s3 = p0, s4 = p0, s5 = p0;
    for (int c = 0; c < nch; c++) {
        const float *bc = B + (size_t)c * ldb;
        for (int t = 0; t < T; t++) {
            const float *b = bc + toff[t];
            __m512 b0, b1, b2, b3, b4, b5;
            if (full) {
                b0 = _mm512_loadu_ps(b);
                b1 = _mm512_loadu_ps(b + 16);
                b2 = _mm512_loadu_ps(b + 32);
                b3 = _mm512_loadu_ps(b + 48);
                b4 = _mm512_loadu_ps(b + 64);
                b5 = _mm512_loadu_ps(b + 80);
            } else {
                b0 = _mm512_maskz_loadu_ps(k0, b);
                b1 = _mm512_maskz_loadu_ps(k1, b + 16);
                b2 = _mm512_maskz_loadu_ps(k2, b + 32);
                b3 = _mm512_maskz_loadu_ps(k3, b + 48);
                b4 = _mm512_maskz_loadu_ps(k4, b + 64);
                b5 = _mm512_maskz_loadu_ps(k5, b + 80);
            }
            __m512 a = _mm512_set1_ps(A[0]);
            S_ROW_FMA(p, a);
            a = _mm512_set1_ps(A[1]);
            S_ROW_FMA(q, a);
            a = _mm512_set1_ps(A[2]);
            S_ROW_FMA(r, a);
            a = _mm512_set1_ps(A[3]);
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

void nn_avx512_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                         int nch, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nch * (size_t)T;
    const size_t tw = 16 * S_NV;
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

#define S_DM 4 /* rows of A per shiftdot tile */
#define S_DK 6 /* shifted rows of B per shiftdot tile */

#define S_DOT_FMA(c, a) \
    do { \
        c##0 = _mm512_fmadd_ps(a, b0, c##0); \
        c##1 = _mm512_fmadd_ps(a, b1, c##1); \
        c##2 = _mm512_fmadd_ps(a, b2, c##2); \
        c##3 = _mm512_fmadd_ps(a, b3, c##3); \
        c##4 = _mm512_fmadd_ps(a, b4, c##4); \
        c##5 = _mm512_fmadd_ps(a, b5, c##5); \
    } while (0)
#define S_DOT_STORE(row, c) \
    do { \
        float *d_ = D + (size_t)(m0 + (row)) * ldd + (size_t)k0; \
        float v_[S_DK] = {_mm512_reduce_add_ps(c##0), _mm512_reduce_add_ps(c##1), \
                          _mm512_reduce_add_ps(c##2), _mm512_reduce_add_ps(c##3), \
                          _mm512_reduce_add_ps(c##4), _mm512_reduce_add_ps(c##5)}; \
        for (int q_ = 0; q_ < kr; q_++) \
            d_[q_] += v_[q_]; \
    } while (0)

void nn_avx512_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                        size_t ldb, int nch, const int *toff, int T, size_t n)
{
    const int K = nch * T;
    const size_t nf = n & ~(size_t)15;
    const __mmask16 tail = (__mmask16)((1u << (n - nf)) - 1u);
    for (int k0 = 0; k0 < K; k0 += S_DK) {
        const int kr = K - k0 < S_DK ? K - k0 : S_DK;
        const float *bp[S_DK];
        for (int q = 0; q < S_DK; q++) {
            int k = k0 + (q < kr ? q : 0); /* unused lanes repeat a valid row */
            bp[q] = B + (size_t)(k / T) * ldb + toff[k % T];
        }
        const float *B0 = bp[0], *B1 = bp[1], *B2 = bp[2], *B3 = bp[3], *B4 = bp[4], *B5 = bp[5];
        for (int m0 = 0; m0 < M; m0 += S_DM) {
            const int mr = M - m0 < S_DM ? M - m0 : S_DM;
            const float *A0 = A + (size_t)m0 * lda;
            const float *A1 = mr > 1 ? A0 + lda : A0, *A2 = mr > 2 ? A0 + 2 * lda : A0;
            const float *A3 = mr > 3 ? A0 + 3 * lda : A0;
            __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
            __m512 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;
            __m512 r0 = p0, r1 = p0, r2 = p0, r3 = p0, r4 = p0, r5 = p0;
            __m512 s0 = p0, s1 = p0, s2 = p0, s3 = p0, s4 = p0, s5 = p0;
            size_t j = 0;
            for (; j < nf; j += 16) {
                __m512 b0 = _mm512_loadu_ps(B0 + j), b1 = _mm512_loadu_ps(B1 + j);
                __m512 b2 = _mm512_loadu_ps(B2 + j), b3 = _mm512_loadu_ps(B3 + j);
                __m512 b4 = _mm512_loadu_ps(B4 + j), b5 = _mm512_loadu_ps(B5 + j);
                __m512 a = _mm512_loadu_ps(A0 + j);
                S_DOT_FMA(p, a);
                a = _mm512_loadu_ps(A1 + j);
                S_DOT_FMA(q, a);
                a = _mm512_loadu_ps(A2 + j);
                S_DOT_FMA(r, a);
                a = _mm512_loadu_ps(A3 + j);
                S_DOT_FMA(s, a);
            }
            if (tail) {
                __m512 b0 = _mm512_maskz_loadu_ps(tail, B0 + j);
                __m512 b1 = _mm512_maskz_loadu_ps(tail, B1 + j);
                __m512 b2 = _mm512_maskz_loadu_ps(tail, B2 + j);
                __m512 b3 = _mm512_maskz_loadu_ps(tail, B3 + j);
                __m512 b4 = _mm512_maskz_loadu_ps(tail, B4 + j);
                __m512 b5 = _mm512_maskz_loadu_ps(tail, B5 + j);
                __m512 a = _mm512_maskz_loadu_ps(tail, A0 + j);
                S_DOT_FMA(p, a);
                a = _mm512_maskz_loadu_ps(tail, A1 + j);
                S_DOT_FMA(q, a);
                a = _mm512_maskz_loadu_ps(tail, A2 + j);
                S_DOT_FMA(r, a);
                a = _mm512_maskz_loadu_ps(tail, A3 + j);
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
