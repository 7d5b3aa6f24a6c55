/* lp_quant_avx2 — AVX2 versions of the lp_quant kernels (8 floats per
 * vector).  Same operation order as the _ref twins in lp_quant.c, so codes
 * and values are bit-identical; the tails run the scalar reference. */
#include <immintrin.h>

#include "lowprec/lp_simd.h"

/* Four independent min/max chains over blocks of 32 (one chain waited on
 * vminps' latency every 8 values), merged before the last blocks of 8.
 * min and max of a set are order-free (the twin compares with < and >:
 * equal results for non-NaN inputs, which is what callers pass). */
void lp_minmax_avx2(float *mn, float *mx, const float *x, size_t n)
{
    size_t i = 0;
    float a = x[0], b = x[0];
    if (n >= 8) {
        __m256 vmn = _mm256_loadu_ps(x), vmx = vmn;
        i = 8;
        if (n >= 40) {
            __m256 n1 = _mm256_loadu_ps(x + 8), n2 = _mm256_loadu_ps(x + 16);
            __m256 n3 = _mm256_loadu_ps(x + 24), m1 = n1, m2 = n2, m3 = n3;
            for (i = 32; i + 32 <= n; i += 32) {
                __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
                __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
                vmn = _mm256_min_ps(vmn, v0);
                vmx = _mm256_max_ps(vmx, v0);
                n1 = _mm256_min_ps(n1, v1);
                m1 = _mm256_max_ps(m1, v1);
                n2 = _mm256_min_ps(n2, v2);
                m2 = _mm256_max_ps(m2, v2);
                n3 = _mm256_min_ps(n3, v3);
                m3 = _mm256_max_ps(m3, v3);
            }
            vmn = _mm256_min_ps(_mm256_min_ps(vmn, n1), _mm256_min_ps(n2, n3));
            vmx = _mm256_max_ps(_mm256_max_ps(vmx, m1), _mm256_max_ps(m2, m3));
        }
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            vmn = _mm256_min_ps(vmn, v);
            vmx = _mm256_max_ps(vmx, v);
        }
        float ta[8], tb[8];
        _mm256_storeu_ps(ta, vmn);
        _mm256_storeu_ps(tb, vmx);
        for (int j = 0; j < 8; j++) {
            a = ta[j] < a ? ta[j] : a;
            b = tb[j] > b ? tb[j] : b;
        }
    }
    for (; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *mn = a;
    *mx = b;
}

/* The twin's clamp to [0, 255] and round, in two instructions: vminps
 * with 255 first (its second operand, t, is what a NaN passes on), then
 * vcvtps2dq; below 0 the unsigned saturation of s_store32's packs clamps
 * (a negative or NaN t converts to a negative int32, which packs to 0: the
 * twin's max(t, 0) -> 0; t in (-1/2, 0) rounds to 0 either way). */
static inline __m256i s_clamp_round(__m256 t)
{
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_set1_ps(255.0f), t));
}

/* 4 x 8 int32 codes (<= 255; negative ones saturate to 0) -> 32 bytes in
 * order. */
static inline void s_store32(uint8_t *q, __m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packus_epi32(a, b);
    __m256i cd = _mm256_packus_epi32(c, d);
    __m256i v = _mm256_packus_epi16(ab, cd);
    v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, v);
}

/* codes of 8 floats at x, nearest */
static inline __m256i s_q8(const float *x, __m256 vmin, __m256 vs)
{
    return s_clamp_round(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmin), vs));
}

void lp_quantize_avx2(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    const __m256 vmin = _mm256_set1_ps(p.min), vs = _mm256_set1_ps(p.scale);
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        s_store32(q + i, s_q8(x + i, vmin, vs), s_q8(x + i + 8, vmin, vs),
                  s_q8(x + i + 16, vmin, vs), s_q8(x + i + 24, vmin, vs));
    if (i < n)
        lp_quantize_ref(q + i, x + i, n - i, p);
}

static inline __m256i s_hash(__m256i h)
{
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)LP_HASH_M1));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)LP_HASH_M2));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    return h;
}

/* stochastically rounded codes of 8 floats at x; wv: their Weyl values.
 * The twin's noise u = (h>>8)*2^-24 - 1/2 is exactly k*2^-24 with the
 * integer k = (h>>8) - 2^23 (|k| <= 2^23: exact as a float), so
 * fma(k, 2^-24, t) rounds t + u once, as the twin's t + u does. */
static inline __m256i s_sr8(const float *x, __m256i wv, __m256i vk2, __m256 vmin, __m256 vs)
{
    const __m256 two24 = _mm256_set1_ps(1.0f / 16777216.0f);
    __m256i h = s_hash(_mm256_xor_si256(wv, vk2));
    __m256i k = _mm256_sub_epi32(_mm256_srli_epi32(h, 8), _mm256_set1_epi32(1 << 23));
    __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmin), vs);
    return s_clamp_round(_mm256_fmadd_ps(_mm256_cvtepi32_ps(k), two24, t));
}

void lp_quantize_sr_avx2(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                         uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const __m256 vmin = _mm256_set1_ps(p.min), vs = _mm256_set1_ps(p.scale);
    const __m256i vk2 = _mm256_set1_epi32((int)k2);
    /* Weyl values (first + i)*LP_WEYL + k1 of the 8 lanes, stepped by adds */
    __m256i wv = _mm256_add_epi32(
        _mm256_set1_epi32((int)(first * LP_WEYL + k1)),
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                           _mm256_set1_epi32((int)LP_WEYL)));
    const __m256i s8 = _mm256_set1_epi32((int)(8u * LP_WEYL));
    const __m256i s16 = _mm256_add_epi32(s8, s8), s24 = _mm256_add_epi32(s16, s8);
    const __m256i s32 = _mm256_add_epi32(s16, s16);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c0 = s_sr8(x + i, wv, vk2, vmin, vs);
        __m256i c1 = s_sr8(x + i + 8, _mm256_add_epi32(wv, s8), vk2, vmin, vs);
        __m256i c2 = s_sr8(x + i + 16, _mm256_add_epi32(wv, s16), vk2, vmin, vs);
        __m256i c3 = s_sr8(x + i + 24, _mm256_add_epi32(wv, s24), vk2, vmin, vs);
        s_store32(q + i, c0, c1, c2, c3);
        wv = _mm256_add_epi32(wv, s32);
    }
    if (i < n)
        lp_quantize_sr_ref(q + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}

void lp_dequantize_avx2(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    const __m256 vmin = _mm256_set1_ps(p.min), vs = _mm256_set1_ps(p.scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(k), vs);
        _mm256_storeu_ps(x + i, _mm256_add_ps(v, vmin));
    }
    if (i < n)
        lp_dequantize_ref(x + i, q + i, n - i, p);
}

/* lp_fake_quant_sr's body: 8 values a step, the codes as in
 * lp_quantize_sr_avx2 (vmaxepi32 with 0 takes the packs' place), their
 * values as in lp_dequantize_avx2 (mul, then add: no FMA); add: y += them;
 * q (may be NULL): the codes. */
static inline __attribute__((always_inline)) void
s_fq_sr(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
        uint32_t first, const int add)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const __m256 vmin = _mm256_set1_ps(p.min), vs = _mm256_set1_ps(p.scale);
    const __m256 two24 = _mm256_set1_ps(1.0f / 16777216.0f);
    const __m256i vk2 = _mm256_set1_epi32((int)k2), zero = _mm256_setzero_si256();
    __m256i wv = _mm256_add_epi32(
        _mm256_set1_epi32((int)(first * LP_WEYL + k1)),
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                           _mm256_set1_epi32((int)LP_WEYL)));
    const __m256i s8 = _mm256_set1_epi32((int)(8u * LP_WEYL));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = s_hash(_mm256_xor_si256(wv, vk2));
        __m256i k = _mm256_sub_epi32(_mm256_srli_epi32(h, 8), _mm256_set1_epi32(1 << 23));
        __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmin), vs);
        __m256i c = _mm256_max_epi32(s_clamp_round(_mm256_fmadd_ps(_mm256_cvtepi32_ps(k), two24, t)),
                                     zero);
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), vs), vmin);
        if (add)
            v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
        _mm256_storeu_ps(y + i, v);
        if (q) {
            __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
            _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(w, w));
        }
        wv = _mm256_add_epi32(wv, s8);
    }
    if (i < n) {
        if (add)
            lp_fake_quant_sr_add_ref(y + i, x + i, n - i, p, seed, (uint32_t)(first + i));
        else
            lp_fake_quant_sr_ref(y + i, q ? q + i : NULL, x + i, n - i, p, seed,
                                 (uint32_t)(first + i));
    }
}

void lp_fake_quant_sr_avx2(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                           uint64_t seed, uint32_t first)
{
    s_fq_sr(y, q, x, n, p, seed, first, 0);
}

void lp_fake_quant_sr_add_avx2(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                               uint32_t first)
{
    s_fq_sr(y, NULL, x, n, p, seed, first, 1);
}
