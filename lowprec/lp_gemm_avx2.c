/* lp_gemm_avx2 — AVX2 micro-kernel for lp_gemm_u8u8 (layouts in lp_gemm.h),
 * for CPUs without VNNI.  vpmaddubsw (u8 x s8 -> saturating s16 pairs)
 * could overflow with full bytes, so B is split into nibbles: both
 * lo*a0 + lo*a1 and hi*a0 + hi*a1 stay within 2*15*128; vpmaddwd then adds
 * pairs into int32 with weights 1 (lo) and 16 (hi): exact.  A tile is
 * 4 rows x 16 columns (two ymm per row). */
#include <immintrin.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"

#define MR 4

static inline __attribute__((always_inline)) int32_t s_ld32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void
s_tile(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int Mp, int Np, int K4, int M,
       int N, int mb, int nb, int32_t *csblk, int32_t *colsum, const int first)
{
    __m256i acc[MR][2], cs[2];
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    cs[0] = cs[1] = _mm256_setzero_si256();
    const __m256i nib = _mm256_set1_epi8(0x0F), ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1), sixteen16 = _mm256_set1_epi16(16);
    const uint8_t *b = Bp + (size_t)nb * 4;
    const int8_t *a = Ap + (size_t)mb * 4;
    for (int k4 = 0; k4 < K4; k4++) {
        __m256i lo[2], hi[2];
        for (int u = 0; u < 2; u++) {
            __m256i bv = _mm256_loadu_si256((const __m256i *)(b + 32 * u));
            lo[u] = _mm256_and_si256(bv, nib);
            hi[u] = _mm256_and_si256(_mm256_srli_epi16(bv, 4), nib);
            if (first)
                cs[u] = _mm256_add_epi32(
                    cs[u], _mm256_madd_epi16(_mm256_maddubs_epi16(bv, ones8), ones16));
        }
        for (int r = 0; r < MR; r++) {
            __m256i av = _mm256_set1_epi32(s_ld32(a + 4 * r));
            for (int u = 0; u < 2; u++) {
                __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[u], av), ones16);
                __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[u], av), sixteen16);
                acc[r][u] = _mm256_add_epi32(acc[r][u], _mm256_add_epi32(pl, ph));
            }
        }
        b += (size_t)Np * 4;
        a += (size_t)Mp * 4;
    }
    for (int u = 0; u < 2; u++) {
        if (first)
            _mm256_storeu_si256((__m256i *)(csblk + 8 * u), cs[u]);
        else
            cs[u] = _mm256_loadu_si256((const __m256i *)(csblk + 8 * u));
    }
    int ncols = N - nb < 16 ? N - nb : 16;
    if (first && colsum)
        memcpy(colsum + nb, csblk, (size_t)ncols * sizeof(int32_t));
    for (int r = 0; r < MR && mb + r < M; r++) {
        int32_t tmp[16];
        int32_t *dst = C + (size_t)(mb + r) * ldc + nb;
        int32_t *out = ncols == 16 ? dst : tmp;
        for (int u = 0; u < 2; u++)
            _mm256_storeu_si256((__m256i *)(out + 8 * u),
                                _mm256_add_epi32(acc[r][u], _mm256_slli_epi32(cs[u], 7)));
        if (out == tmp)
            memcpy(dst, tmp, (size_t)ncols * sizeof(int32_t));
    }
}

void lp_gemm_kernel_avx2(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                         int K, int32_t *colsum)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M), Np = lp_gemm_np(N);
    int32_t csblk[16];
    for (int nb = 0; nb < Np; nb += 16) {
        s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, 0, nb, csblk, colsum, 1);
        for (int mb = MR; mb < Mp; mb += MR)
            s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, mb, nb, csblk, colsum, 0);
    }
}
