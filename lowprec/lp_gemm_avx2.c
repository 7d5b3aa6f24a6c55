/* lp_gemm_avx2 — AVX2 micro-kernels for lp_gemm_u8u8 (layouts in
 * lp_gemm.h) and the shifted-row GEMM, for CPUs without VNNI.
 *
 * lp_gemm_kernel_avx2: vpmaddubsw (u8 x s8) saturates on full bytes, so
 * the products go through vpmaddwd on int16: every 32-bit group of 4 codes
 * of B splits into its even bytes (b0, b2) and odd bytes (b1, b3) as int16
 * (vpand, vpsrlw: shared by the 4 rows of a tile), packed A holds the codes
 * unshifted as the matching int16 pairs (a0, a2), (a1, a3), and
 * vpmaddwd(even, A02) + vpmaddwd(odd, A13) is the 4-term dot product,
 * exactly (each product <= 255*255).  A tile is 4 rows x 16 columns: 8
 * accumulators, 4 split B vectors, 2 broadcasts, 1 product; K is blocked
 * (S_KB).  Column sums of B come from a separate pass (vpmaddubsw against
 * ones, exact: 4*255). */
#include <immintrin.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"

#define MR 4

/* Rows [mb, mb+4) x columns [nb, nb+16) over the k4 groups [k0, k1):
 * C = the partial sums (first block) or C += them. */
static inline __attribute__((always_inline)) void
s_tile(int32_t *C, int ldc, const uint32_t *A16, const uint8_t *Bp, int K4, int Np, int k0,
       int k1, int M, int N, int mb, int nb, int acc)
{
    __m256i p0 = _mm256_setzero_si256(), p1 = p0, q0 = p0, q1 = p0;
    __m256i r0 = p0, r1 = p0, s0 = p0, s1 = p0;
    const __m256i lo8 = _mm256_set1_epi16(0x00FF);
    const uint8_t *b = Bp + ((size_t)k0 * Np + nb) * 4;
    const uint32_t *a = A16 + ((size_t)(mb / MR) * K4 + k0) * MR * 2;
#define S_ROW(c, r)                                                                        \
    do {                                                                                   \
        __m256i ae = _mm256_set1_epi32((int)a[2 * (r)]);                                  \
        __m256i ao = _mm256_set1_epi32((int)a[2 * (r) + 1]);                              \
        c##0 = _mm256_add_epi32(c##0, _mm256_madd_epi16(e0, ae));                          \
        c##0 = _mm256_add_epi32(c##0, _mm256_madd_epi16(o0, ao));                          \
        c##1 = _mm256_add_epi32(c##1, _mm256_madd_epi16(e1, ae));                          \
        c##1 = _mm256_add_epi32(c##1, _mm256_madd_epi16(o1, ao));                          \
    } while (0)
    for (int k4 = k0; k4 < k1; k4++) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)b);
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(b + 32));
        __m256i e0 = _mm256_and_si256(v0, lo8), o0 = _mm256_srli_epi16(v0, 8);
        __m256i e1 = _mm256_and_si256(v1, lo8), o1 = _mm256_srli_epi16(v1, 8);
        S_ROW(p, 0);
        S_ROW(q, 1);
        S_ROW(r, 2);
        S_ROW(s, 3);
        b += (size_t)Np * 4;
        a += MR * 2;
    }
#undef S_ROW
    const int ncols = N - nb < 16 ? N - nb : 16;
    __m256i rows[MR][2] = {{p0, p1}, {q0, q1}, {r0, r1}, {s0, s1}};
    for (int r = 0; r < MR && mb + r < M; r++) {
        int32_t *dst = C + (size_t)(mb + r) * ldc + nb;
        int32_t tmp[16];
        int32_t *o = ncols == 16 ? dst : tmp;
        if (acc && ncols < 16)
            memcpy(tmp, dst, (size_t)ncols * sizeof(int32_t));
        if (acc) {
            rows[r][0] = _mm256_add_epi32(rows[r][0], _mm256_loadu_si256((const __m256i *)o));
            rows[r][1] =
                _mm256_add_epi32(rows[r][1], _mm256_loadu_si256((const __m256i *)(o + 8)));
        }
        _mm256_storeu_si256((__m256i *)o, rows[r][0]);
        _mm256_storeu_si256((__m256i *)(o + 8), rows[r][1]);
        if (o == tmp)
            memcpy(dst, tmp, (size_t)ncols * sizeof(int32_t));
    }
}

/* k4 groups per block: the A block (Mp x S_KB pairs of lanes) stays in L2
 * and the B panel of a 16-column tile (S_KB * 64 bytes) in L1 while every
 * row block runs over it; without the blocking A was streamed from memory
 * once per 16 columns (vgg11's 512-channel convs: 4.7 MB per pass). */
#define S_KB 64

void lp_gemm_kernel_avx2(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                         int K, int32_t *colsum)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M), Np = lp_gemm_np(N);
    const uint32_t *A16 = (const uint32_t *)(const void *)(Ap + (size_t)K4 * Mp * 4);
    if (colsum) {
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        for (int nb = 0; nb < Np; nb += 8) {
            __m256i cs = _mm256_setzero_si256();
            const uint8_t *b = Bp + (size_t)nb * 4;
            for (int k4 = 0; k4 < K4; k4++, b += (size_t)Np * 4)
                cs = _mm256_add_epi32(
                    cs, _mm256_madd_epi16(
                            _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)b), ones8),
                            ones16));
            int32_t tmp[8];
            _mm256_storeu_si256((__m256i *)tmp, cs);
            memcpy(colsum + nb, tmp, (size_t)(N - nb < 8 ? N - nb : 8) * sizeof(int32_t));
            if (N - nb <= 8)
                break;
        }
    }
    for (int k0 = 0; k0 < K4; k0 += S_KB) {
        const int k1 = K4 - k0 < S_KB ? K4 : k0 + S_KB;
        for (int nb = 0; nb < Np; nb += 16)
            for (int mb = 0; mb < Mp; mb += MR)
                s_tile(C, ldc, A16, Bp, K4, Np, k0, k1, M, N, mb, nb, k0 > 0);
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
static inline __attribute__((always_inline)) void
s_dequant_row(float *out, const int32_t *S, const double *t, __m256d vc, double c,
              const double *base, size_t n)
{
    size_t i = 0;
    /* 4 values a step: the int32 loads and float stores are 128-bit, so no
     * lane extract or insert (on 8-value steps they cost as much as the
     * arithmetic) */
    for (; i + 4 <= n; i += 4) {
        __m256d v = _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)(S + i)));
        v = _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(vc, v), _mm256_loadu_pd(t + i)),
                          _mm256_loadu_pd(base + i));
        _mm_storeu_ps(out + i, _mm256_cvtpd_ps(v));
    }
    for (; i < n; i++)
        out[i] = (float)(c * S[i] + t[i] + base[i]);
}

void lp_dequant_row_avx2(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t n)
{
    s_dequant_row(out, S, t, _mm256_set1_pd(c), c, base, n);
}

/* lp_dequant_lin (lp_gemm.h): the twin's mul and three adds in double, 4
 * values a step (128-bit int32 loads and float stores, as s_dequant_row). */
void lp_dequant_lin_avx2(float *out, const int32_t *S, const double *tw, double c, double tx,
                         double t4, const float *bias, size_t n)
{
    const __m256d vc = _mm256_set1_pd(c), vx = _mm256_set1_pd(tx), v4 = _mm256_set1_pd(t4);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d v = _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)(S + j)));
        v = _mm256_add_pd(_mm256_mul_pd(vc, v), _mm256_loadu_pd(tw + j));
        v = _mm256_add_pd(_mm256_add_pd(v, vx), v4);
        __m128 f = _mm256_cvtpd_ps(v);
        if (bias)
            f = _mm_add_ps(f, _mm_loadu_ps(bias + j));
        _mm_storeu_ps(out + j, f);
    }
    lp_dequant_lin_ref(out + j, S + j, tw + j, c, tx, t4, bias ? bias + j : NULL, n - j);
}

void lp_dequant_rows_avx2(float *out, const int32_t *S, const double *t, double c,
                          const double *base, size_t W, int rows)
{
    const __m256d vc = _mm256_set1_pd(c);
    for (int r = 0; r < rows; r++)
        s_dequant_row(out + (size_t)r * W, S + (size_t)r * W, t + (size_t)r * W, vc, c, base, W);
}
