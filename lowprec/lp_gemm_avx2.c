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

/* ---- shifted-row GEMM on int16 pairs (lp_gemm.h) ---------------------------
 * Tile: 4 rows (one packed m-tile) x 16 columns: 8 int32 accumulators,
 * 2 B vectors, 1 broadcast and the vpmaddwd result (vpmaddwd does not
 * accumulate, so a 4 x 24 tile would need 17 ymm and spills one
 * accumulator through memory on every step).  Column tails use vpmaskmovd
 * (masked lanes are neither read nor written). */

static inline __m256i s_lane_mask(size_t w, size_t lo)
{
    size_t rem = w > lo ? w - lo : 0;
    int r = rem >= 8 ? 8 : (int)rem;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define S_MADD2(c, a) \
    do { \
        c##0 = _mm256_add_epi32(c##0, _mm256_madd_epi16(a, b0)); \
        c##1 = _mm256_add_epi32(c##1, _mm256_madd_epi16(a, b1)); \
    } while (0)
#define S_STORE2(o, c) \
    do { \
        if (full) { \
            _mm256_storeu_si256((__m256i *)(o), c##0); \
            _mm256_storeu_si256((__m256i *)((o) + 8), c##1); \
        } else { \
            _mm256_maskstore_epi32((int *)(o), k0, c##0); \
            _mm256_maskstore_epi32((int *)((o) + 8), k1, c##1); \
        } \
    } while (0)

static inline __attribute__((always_inline)) void
s_shift_tile(int32_t *S, size_t ldc, int mr, const uint32_t *A, const uint32_t *B, size_t ldb,
             int np, const int *toff, int T, size_t w, const int full)
{
    const __m256i k0 = s_lane_mask(w, 0), k1 = s_lane_mask(w, 8);
    __m256i p0 = _mm256_setzero_si256(), p1 = p0;
    __m256i q0 = p0, q1 = p0;
    __m256i r0 = p0, r1 = p0;
    __m256i s0 = p0, s1 = p0;
    for (int p = 0; p < np; p++) {
        const uint32_t *bp = B + (size_t)p * ldb;
        for (int t = 0; t < T; t++) {
            const int *b = (const int *)(bp + toff[t]);
            __m256i b0, b1;
            if (full) {
                b0 = _mm256_loadu_si256((const __m256i *)b);
                b1 = _mm256_loadu_si256((const __m256i *)(b + 8));
            } else {
                b0 = _mm256_maskload_epi32(b, k0);
                b1 = _mm256_maskload_epi32(b + 8, k1);
            }
            __m256i a = _mm256_set1_epi32((int)A[0]);
            S_MADD2(p, a);
            a = _mm256_set1_epi32((int)A[1]);
            S_MADD2(q, a);
            a = _mm256_set1_epi32((int)A[2]);
            S_MADD2(r, a);
            a = _mm256_set1_epi32((int)A[3]);
            S_MADD2(s, a);
            A += 4;
        }
    }
    S_STORE2(S, p);
    if (mr > 1)
        S_STORE2(S + ldc, q);
    if (mr > 2)
        S_STORE2(S + 2 * ldc, r);
    if (mr > 3)
        S_STORE2(S + 3 * ldc, s);
}

void lp_shiftgemm_avx2(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       size_t ldb, int np, const int *toff, int T, size_t n)
{
    const size_t K2 = (size_t)np * (size_t)T, tw = 16;
    for (size_t j0 = 0; j0 < n; j0 += tw) {
        const size_t w = n - j0 < tw ? n - j0 : tw;
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mr = M - m0 < 4 ? M - m0 : 4;
            const uint32_t *A = Ap + (size_t)(m0 / 4) * K2 * 4;
            if (w == tw)
                s_shift_tile(S + (size_t)m0 * ldc + j0, ldc, mr, A, B + j0, ldb, np, toff, T, w,
                             1);
            else
                s_shift_tile(S + (size_t)m0 * ldc + j0, ldc, mr, A, B + j0, ldb, np, toff, T, w,
                             0);
        }
    }
}

/* out = (float)(c*S + t + base) in double: the same three roundings as the
 * scalar twin (mul, add, add; no FMA), then one to float. */
void lp_dequant_row_avx2(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t n)
{
    const __m256d vc = _mm256_set1_pd(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i s = _mm256_loadu_si256((const __m256i *)(S + i));
        __m256d lo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(s));
        __m256d hi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(s, 1));
        lo = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(vc, lo), _mm256_loadu_pd(t + i)),
                           _mm256_loadu_pd(base + i));
        hi = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(vc, hi), _mm256_loadu_pd(t + i + 4)),
                           _mm256_loadu_pd(base + i + 4));
        __m256 f = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
        _mm256_storeu_ps(out + i, f);
    }
    for (; i < n; i++)
        out[i] = (float)(c * S[i] + t[i] + base[i]);
}
