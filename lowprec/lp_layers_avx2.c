/* lp_layers_avx2 — AVX2 row kernels of Range EvoNorm (lp_layers.h) and the
 * pair-grid helpers of the conv shift path (lp_simd.h), built with
 * -mavx2 -mfma and called only through the kernel tables of the levels
 * from AVX2 up (lp_kern_x86.c).
 * The forward follows the scalar twin operation by operation (true
 * division by 6, no FMA), so it gives the same floats.  The backward sums
 * up to 64 values per lane block in float and the blocks in double (the
 * twin sums everything in double): sums agree to ~1e-7 relative.  Tails
 * (n % 8) run the scalar twin. */
#include <immintrin.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"

void lp_ren_row_fwd_avx2(float *o, const float *x, size_t n, float v, float sc, float gamma,
                         float beta)
{
    const __m256 vv = _mm256_set1_ps(v), six = _mm256_set1_ps(6.0f), half = _mm256_set1_ps(0.5f);
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 vsc = _mm256_set1_ps(sc), vg = _mm256_set1_ps(gamma), vb = _mm256_set1_ps(beta);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        __m256 t = _mm256_add_ps(_mm256_div_ps(_mm256_mul_ps(xv, vv), six), half);
        t = _mm256_min_ps(_mm256_max_ps(t, zero), one); /* NaN -> 0, as the twin */
        __m256 nrm = _mm256_mul_ps(xv, t);
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(nrm, vsc), vg), vb));
    }
    if (i < n)
        lp_ren_row_fwd_ref(o + i, x + i, n - i, v, sc, gamma, beta);
}

static inline __m256d s_pd_sum8(__m256 a)
{
    return _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                         _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
}

static inline double s_hsum_pd(__m256d a)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

void lp_ren_row_bwd_avx2(float *dx, double sums[3], const float *x, const float *g, size_t n,
                         float v, float sc, float gamma)
{
    const __m256 vv = _mm256_set1_ps(v), six = _mm256_set1_ps(6.0f), half = _mm256_set1_ps(0.5f);
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 vsc = _mm256_set1_ps(sc), vg = _mm256_set1_ps(gamma);
    __m256d dg = _mm256_setzero_pd(), dgn = dg, dvx = dg;
    size_t i = 0;
    while (i + 8 <= n) {
        __m256 bg = zero, bgn = zero, bvx = zero;
        const size_t end = i + 64 <= n ? i + 64 : n;
        for (; i + 8 <= end; i += 8) {
            __m256 xv = _mm256_loadu_ps(x + i), gv = _mm256_loadu_ps(g + i);
            __m256 xv6 = _mm256_div_ps(_mm256_mul_ps(xv, vv), six);
            __m256 t = _mm256_add_ps(xv6, half);
            __m256 in = _mm256_and_ps(_mm256_cmp_ps(t, zero, _CMP_GE_OQ),
                                      _mm256_cmp_ps(t, one, _CMP_LE_OQ));
            __m256 h = _mm256_min_ps(_mm256_max_ps(t, zero), one);
            __m256 nrm = _mm256_mul_ps(xv, h);
            __m256 dn = _mm256_mul_ps(_mm256_mul_ps(gv, vsc), vg);
            bg = _mm256_add_ps(bg, gv);
            bgn = _mm256_add_ps(bgn, _mm256_mul_ps(gv, nrm));
            bvx = _mm256_add_ps(bvx, _mm256_and_ps(in, _mm256_mul_ps(_mm256_mul_ps(dn, xv), xv)));
            if (dx)
                _mm256_storeu_ps(dx + i, _mm256_mul_ps(dn, _mm256_add_ps(h, _mm256_and_ps(in, xv6))));
        }
        dg = _mm256_add_pd(dg, s_pd_sum8(bg));
        dgn = _mm256_add_pd(dgn, s_pd_sum8(bgn));
        dvx = _mm256_add_pd(dvx, s_pd_sum8(bvx));
    }
    sums[0] += s_hsum_pd(dg);
    sums[1] += s_hsum_pd(dgn);
    sums[2] += s_hsum_pd(dvx);
    if (i < n)
        lp_ren_row_bwd_ref(dx ? dx + i : NULL, sums, x + i, g + i, n - i, v, sc, gamma);
}

void lp_pair_plane_avx2(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                        const uint8_t *r0, const uint8_t *r1, int H, int W)
{
    const int pad = (V - 1) / 2;
    for (int h = 0; h < H; h++) {
        const size_t o = (size_t)h * W;
        int w = 0;
        for (; w + 8 <= W; w += 8) {
            __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r0 + o + w)));
            __m256i b = r1 ? _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r1 + o + w)))
                           : _mm256_setzero_si256();
            const __m256i pr = _mm256_or_si256(a, _mm256_slli_epi32(b, 16));
            for (int v = 0; v < V; v++)
                _mm256_storeu_si256((__m256i *)(dst + (size_t)v * vstride + o + w), pr);
            if (chs) {
                int32_t *c = chs + (size_t)h * ldc + w;
                _mm256_storeu_si256((__m256i *)c,
                                    _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)c),
                                                     _mm256_add_epi32(a, b)));
            }
        }
        for (; w < W; w++) { /* the twin's element, without its wrap test */
            uint8_t v0 = r0[o + w], v1 = r1 ? r1[o + w] : 0;
            for (int v = 0; v < V; v++)
                dst[(size_t)v * vstride + o + w] = lp_pair(v0, v1);
            if (chs)
                chs[(size_t)h * ldc + w] += v0 + v1;
        }
        for (int v = 0; v < V; v++) { /* the wrap columns of each variant */
            const int dx = v - pad, z0 = dx < 0 ? W + dx : 0, z1 = dx < 0 ? W : dx;
            for (int z = z0 < 0 ? 0 : z0; z < (z1 > W ? W : z1); z++)
                dst[(size_t)v * vstride + o + z] = 0;
        }
    }
}

void lp_tap_sum_row_avx2(double *t, const int32_t *s, const int *off, int T, double c, size_t n)
{
    const __m256d vc = _mm256_set1_pd(c);
    size_t w = 0;
    for (; w + 8 <= n; w += 8) {
        __m256i acc = _mm256_setzero_si256();
        for (int k = 0; k < T; k++)
            acc = _mm256_add_epi32(acc, _mm256_loadu_si256((const __m256i *)(s + w + off[k])));
        _mm256_storeu_pd(t + w, _mm256_mul_pd(vc, _mm256_cvtepi32_pd(_mm256_castsi256_si128(acc))));
        _mm256_storeu_pd(t + w + 4,
                         _mm256_mul_pd(vc, _mm256_cvtepi32_pd(_mm256_extracti128_si256(acc, 1))));
    }
    if (w < n)
        lp_tap_sum_row_ref(t + w, s + w, off, T, c, n - w);
}

size_t lp_find_eq_avx2(const float *x, size_t n, float v)
{
    const __m256 vv = _mm256_set1_ps(v);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ));
        if (m)
            return i + (size_t)__builtin_ctz((unsigned)m);
    }
    return i + lp_find_eq_ref(x + i, n - i, v);
}

void lp_minmax_u8_avx2(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n)
{
    size_t i = 0;
    uint8_t a = q[0], b = q[0];
    if (n >= 32) {
        __m256i vmn = _mm256_loadu_si256((const __m256i *)q), vmx = vmn;
        for (i = 32; i + 32 <= n; i += 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(q + i));
            vmn = _mm256_min_epu8(vmn, v);
            vmx = _mm256_max_epu8(vmx, v);
        }
        uint8_t ta[32], tb[32];
        _mm256_storeu_si256((__m256i *)ta, vmn);
        _mm256_storeu_si256((__m256i *)tb, vmx);
        for (int j = 0; j < 32; j++) {
            a = ta[j] < a ? ta[j] : a;
            b = tb[j] > b ? tb[j] : b;
        }
    }
    if (i < n) {
        uint8_t ta, tb;
        lp_minmax_u8_ref(&ta, &tb, q + i, n - i);
        a = ta < a ? ta : a;
        b = tb > b ? tb : b;
    }
    *mn = a;
    *mx = b;
}

size_t lp_find_u8_avx2(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi)
{
    const __m256i vlo = _mm256_set1_epi8((char)lo), vhi = _mm256_set1_epi8((char)hi);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(q + i));
        /* lo <= v <= hi  <=>  max(v, lo) == v and min(v, hi) == v */
        __m256i in = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(v, vlo), v),
                                      _mm256_cmpeq_epi8(_mm256_min_epu8(v, vhi), v));
        unsigned m = (unsigned)_mm256_movemask_epi8(in);
        if (m)
            return i + (size_t)__builtin_ctz(m);
    }
    return i + lp_find_u8_ref(q + i, n - i, lo, hi);
}
