/* lp_pack_avx2 — AVX2 kernels of lp_gemm_pack_b's whole-group layouts
 * (contracts in lp_simd.h): an 8 x 8 transpose of 32-bit words for a
 * transposed view (packed row block by row block: the stores stream), and
 * the byte interleave of four rows, 32 columns a step.
 * Edges go to the scalar twins.  Called through the kernel table of the
 * x86 levels from AVX2 up (lp_kern_x86.c). */
#include <immintrin.h>

#include "lowprec/lp_simd.h"

/* Row n + i of the 8 columns: words k4 .. k4 + 7. */
#define S_LOAD(i) _mm256_loadu_si256((const __m256i *)(B + (ptrdiff_t)(n + (i)) * cs + 4 * k4))

/* Packed row k4 + c gets the low halves of u (rows 0-3) and v (rows 4-7),
 * row k4 + c + 4 their high halves. */
#define S_STORE(c, u, v)                                                                  \
    do {                                                                                  \
        _mm256_storeu_si256((__m256i *)(Bp + ((size_t)(k4 + (c)) * Np + (size_t)n) * 4),  \
                            _mm256_permute2x128_si256(u, v, 0x20));                       \
        _mm256_storeu_si256((__m256i *)(Bp + ((size_t)(k4 + (c) + 4) * Np + (size_t)n) * 4), \
                            _mm256_permute2x128_si256(u, v, 0x31));                       \
    } while (0)

/* Words [k4, k4+8) of the 8 columns n.. into packed rows k4..k4+7: word
 * pairs of row pairs (unpack epi32), then word c of four rows (unpack
 * epi64; c and c + 4 in the two 128-bit lanes), then the lanes of rows 0-3
 * and 4-7 joined. */
static inline __attribute__((always_inline)) void
s_t8x8(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int k4, int n, int Np)
{
    const __m256i r0 = S_LOAD(0), r1 = S_LOAD(1), r2 = S_LOAD(2), r3 = S_LOAD(3);
    const __m256i r4 = S_LOAD(4), r5 = S_LOAD(5), r6 = S_LOAD(6), r7 = S_LOAD(7);
    const __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1);
    const __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3);
    const __m256i t4 = _mm256_unpacklo_epi32(r4, r5), t5 = _mm256_unpackhi_epi32(r4, r5);
    const __m256i t6 = _mm256_unpacklo_epi32(r6, r7), t7 = _mm256_unpackhi_epi32(r6, r7);
    S_STORE(0, _mm256_unpacklo_epi64(t0, t2), _mm256_unpacklo_epi64(t4, t6));
    S_STORE(1, _mm256_unpackhi_epi64(t0, t2), _mm256_unpackhi_epi64(t4, t6));
    S_STORE(2, _mm256_unpacklo_epi64(t1, t3), _mm256_unpacklo_epi64(t5, t7));
    S_STORE(3, _mm256_unpackhi_epi64(t1, t3), _mm256_unpackhi_epi64(t5, t7));
}
#undef S_LOAD
#undef S_STORE

void lp_pack_b_t_avx2(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int K4, int N, int Np)
{
    const int N8 = N & ~7, K8 = K4 & ~7;
    for (int k4 = 0; k4 < K8; k4 += 8)
        for (int n = 0; n < N8; n += 8)
            s_t8x8(Bp, B, cs, k4, n, Np);
    if (K8 < K4)
        lp_pack_b_t_ref(Bp + (size_t)K8 * Np * 4, B + 4 * K8, cs, K4 - K8, N8, Np);
    if (N8 < N)
        lp_pack_b_t_ref(Bp + (size_t)N8 * 4, B + (ptrdiff_t)N8 * cs, cs, K4, N - N8, Np);
}

void lp_pack_b_4rows_avx2(uint8_t *dst, const uint8_t *r0, ptrdiff_t rs, int N)
{
    const uint8_t *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
    int n = 0;
    for (; n + 32 <= N; n += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(r0 + n));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(r1 + n));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(r2 + n));
        const __m256i d = _mm256_loadu_si256((const __m256i *)(r3 + n));
        /* within 128-bit lanes: ab/cd byte pairs, then words of columns
         * 0-3, 4-7, 8-11, 12-15 (lane 0) and 16-19 ... 28-31 (lane 1) */
        const __m256i ab0 = _mm256_unpacklo_epi8(a, b), ab1 = _mm256_unpackhi_epi8(a, b);
        const __m256i cd0 = _mm256_unpacklo_epi8(c, d), cd1 = _mm256_unpackhi_epi8(c, d);
        const __m256i w0 = _mm256_unpacklo_epi16(ab0, cd0), w1 = _mm256_unpackhi_epi16(ab0, cd0);
        const __m256i w2 = _mm256_unpacklo_epi16(ab1, cd1), w3 = _mm256_unpackhi_epi16(ab1, cd1);
        __m256i *o = (__m256i *)(dst + 4 * (size_t)n);
        _mm256_storeu_si256(o, _mm256_permute2x128_si256(w0, w1, 0x20));
        _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(w2, w3, 0x20));
        _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(w0, w1, 0x31));
        _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(w2, w3, 0x31));
    }
    if (n < N)
        lp_pack_b_4rows_ref(dst + 4 * (size_t)n, r0 + n, rs, N - n);
}
