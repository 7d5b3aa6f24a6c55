/* lp_gemm_avx512 — AVX-512 VNNI micro-kernel for lp_gemm_u8u8 (layouts in
 * lp_gemm.h).  A tile is 8 rows x 16*U columns held in 8*U zmm accumulators;
 * every k4 step loads U vectors of B (16 columns x 4 k) and broadcasts 4
 * bytes of A per row: one vpdpbusd per row and vector.  The packed panel of
 * B for a column block (K*16*U bytes) stays in L1 while all row blocks run
 * over it.  Column sums of B come from one more vpdpbusd against ones in
 * the first row block and restore the 128 shift of A at the store.
 * Also the linear layer's row correction (lp_dequant_lin_avx512). */
#include <immintrin.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"

#define MR 8

static inline __attribute__((always_inline)) int32_t s_ld32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void
s_tile(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int Mp, int Np, int K4, int M,
       int N, int mb, int nb, const int U, int32_t *csblk, int32_t *colsum, const int first)
{
    __m512i acc[MR][4], cs[4];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 8")
        for (int u = 0; u < U; u++)
            acc[r][u] = _mm512_setzero_si512();
    _Pragma("GCC unroll 8")
    for (int u = 0; u < U; u++)
        cs[u] = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi8(1);
    const uint8_t *b = Bp + (size_t)nb * 4;
    const int8_t *a = Ap + (size_t)mb * 4;
    for (int k4 = 0; k4 < K4; k4++) {
        __m512i bv[4];
        _Pragma("GCC unroll 8")
        for (int u = 0; u < U; u++)
            bv[u] = _mm512_loadu_si512((const void *)(b + 64 * u));
        _Pragma("GCC unroll 8")
        for (int r = 0; r < MR; r++) {
            __m512i av = _mm512_set1_epi32(s_ld32(a + 4 * r));
            _Pragma("GCC unroll 8")
            for (int u = 0; u < U; u++)
                acc[r][u] = _mm512_dpbusd_epi32(acc[r][u], bv[u], av);
        }
        if (first)
            _Pragma("GCC unroll 8")
            for (int u = 0; u < U; u++)
                cs[u] = _mm512_dpbusd_epi32(cs[u], bv[u], ones);
        b += (size_t)Np * 4;
        a += (size_t)Mp * 4;
    }
    _Pragma("GCC unroll 8")
    for (int u = 0; u < U; u++) {
        int left = N - (nb + 16 * u);
        __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        if (first) {
            _mm512_storeu_si512((void *)(csblk + 16 * u), cs[u]);
            if (colsum)
                _mm512_mask_storeu_epi32(colsum + nb + 16 * u, mask, cs[u]);
        } else {
            cs[u] = _mm512_loadu_si512((const void *)(csblk + 16 * u));
        }
        __m512i corr = _mm512_slli_epi32(cs[u], 7);
        _Pragma("GCC unroll 8") /* constant indices: acc stays in registers */
        for (int r = 0; r < MR; r++)
            if (mb + r < M)
                _mm512_mask_storeu_epi32(C + (size_t)(mb + r) * ldc + nb + 16 * u, mask,
                                         _mm512_add_epi32(acc[r][u], corr));
    }
}

void lp_gemm_kernel_avx512(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M,
                           int N, int K, int32_t *colsum)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M), Np = lp_gemm_np(N);
    int32_t csblk[64];
    int nb = 0;
    for (; nb + 32 <= Np; nb += 32) {
        s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, 0, nb, 2, csblk, colsum, 1);
        for (int mb = MR; mb < Mp; mb += MR)
            s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, mb, nb, 2, csblk, colsum, 0);
    }
    if (nb < Np) { /* one 16-column block left */
        s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, 0, nb, 1, csblk, colsum, 1);
        for (int mb = MR; mb < Mp; mb += MR)
            s_tile(C, ldc, Ap, Bp, Mp, Np, K4, M, N, mb, nb, 1, csblk, colsum, 0);
    }
}

/* lp_dequant_lin (lp_gemm.h) on 8 values a step: int32 in a ymm, the
 * twin's mul and three adds on 8 doubles, one rounding to float. */
void lp_dequant_lin_avx512(float *out, const int32_t *S, const double *tw, double c, double tx,
                           double t4, const float *bias, size_t n)
{
    const __m512d vc = _mm512_set1_pd(c), vx = _mm512_set1_pd(tx), v4 = _mm512_set1_pd(t4);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d v = _mm512_cvtepi32_pd(_mm256_loadu_si256((const __m256i *)(S + j)));
        v = _mm512_add_pd(_mm512_mul_pd(vc, v), _mm512_loadu_pd(tw + j));
        v = _mm512_add_pd(_mm512_add_pd(v, vx), v4);
        __m256 f = _mm512_cvtpd_ps(v);
        if (bias)
            f = _mm256_add_ps(f, _mm256_loadu_ps(bias + j));
        _mm256_storeu_ps(out + j, f);
    }
    lp_dequant_lin_ref(out + j, S + j, tw + j, c, tx, t4, bias ? bias + j : NULL, n - j);
}
