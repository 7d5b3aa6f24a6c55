/* lp_quant_avx512 — AVX-512 versions of the lp_quant kernels (16 floats per
 * step; called at the avx512 level and above: AVX-512 F/BW/VL only, no VNNI
 * instruction).  Same operation order as the _ref twins in lp_quant.c, so
 * codes and values are bit-identical; the tails run the scalar reference. */
#include <immintrin.h>

#include "lowprec/lp_simd.h"

void lp_minmax_avx512(float *mn, float *mx, const float *x, size_t n)
{
    size_t i = 0;
    float a = x[0], b = x[0];
    if (n >= 16) {
        __m512 vmn = _mm512_loadu_ps(x), vmx = vmn;
        for (i = 16; i + 16 <= n; i += 16) {
            __m512 v = _mm512_loadu_ps(x + i);
            vmn = _mm512_min_ps(vmn, v);
            vmx = _mm512_max_ps(vmx, v);
        }
        a = _mm512_reduce_min_ps(vmn);
        b = _mm512_reduce_max_ps(vmx);
    }
    for (; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *mn = a;
    *mx = b;
}

static inline __m128i s_codes16(__m512 t)
{
    t = _mm512_max_ps(t, _mm512_setzero_ps());
    t = _mm512_min_ps(t, _mm512_set1_ps(255.0f));
    return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t));
}

void lp_quantize_avx512(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    const __m512 vmin = _mm512_set1_ps(p.min), vs = _mm512_set1_ps(p.scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmin), vs);
        _mm_storeu_si128((__m128i *)(q + i), s_codes16(t));
    }
    if (i < n)
        lp_quantize_ref(q + i, x + i, n - i, p);
}

static inline __m512i s_hash(__m512i h)
{
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)LP_HASH_M1));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)LP_HASH_M2));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    return h;
}

/* Weyl values (first + l)*LP_WEYL + k1 of the 16 lanes l (then stepped by
 * adds). */
static inline __m512i s_weyl16(uint32_t first, uint32_t k1)
{
    return _mm512_add_epi32(
        _mm512_set1_epi32((int)(first * LP_WEYL + k1)),
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                             15),
                           _mm512_set1_epi32((int)LP_WEYL)));
}

/* 4 x 16 int32 codes (<= 255; negative ones saturate to 0) -> 64 bytes in
 * order (the packs interleave the 128-bit lanes; one permute restores). */
static inline void s_store64(uint8_t *q, __m512i a, __m512i b, __m512i c, __m512i d)
{
    __m512i v = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
    v = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
    _mm512_storeu_si512((void *)q, v);
}

/* Stochastically rounded codes of 16 floats at x (wv: their Weyl values),
 * as int32, negative for t < -1/2 and NaN (s_store64's packs make them 0).
 * The twin's noise u = (h>>8)*2^-24 - 1/2 is exactly k*2^-24 with the
 * integer k = (h>>8) - 2^23, so fma(k, 2^-24, t) rounds t + u once, as the
 * twin's t + u does; vminps(255, t) then the conversion: the twin's clamp. */
static inline __m512i s_sr16(const float *x, __m512i wv, __m512i vk2, __m512 vmin, __m512 vs)
{
    __m512i h = s_hash(_mm512_xor_si512(wv, vk2));
    __m512i k = _mm512_sub_epi32(_mm512_srli_epi32(h, 8), _mm512_set1_epi32(1 << 23));
    __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(x), vmin), vs);
    t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(k), _mm512_set1_ps(1.0f / 16777216.0f), t);
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_set1_ps(255.0f), t));
}

void lp_quantize_sr_avx512(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                           uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const __m512 vmin = _mm512_set1_ps(p.min), vs = _mm512_set1_ps(p.scale);
    const __m512i vk2 = _mm512_set1_epi32((int)k2);
    __m512i wv = s_weyl16(first, k1);
    const __m512i s16 = _mm512_set1_epi32((int)(16u * LP_WEYL));
    const __m512i s32 = _mm512_add_epi32(s16, s16), s48 = _mm512_add_epi32(s32, s16);
    const __m512i s64 = _mm512_add_epi32(s32, s32);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i c0 = s_sr16(x + i, wv, vk2, vmin, vs);
        __m512i c1 = s_sr16(x + i + 16, _mm512_add_epi32(wv, s16), vk2, vmin, vs);
        __m512i c2 = s_sr16(x + i + 32, _mm512_add_epi32(wv, s32), vk2, vmin, vs);
        __m512i c3 = s_sr16(x + i + 48, _mm512_add_epi32(wv, s48), vk2, vmin, vs);
        s_store64(q + i, c0, c1, c2, c3);
        wv = _mm512_add_epi32(wv, s64);
    }
    for (; i + 16 <= n; i += 16) { /* the 0 clamp by hand, 255 holds already */
        __m512i c = _mm512_max_epi32(s_sr16(x + i, wv, vk2, vmin, vs), _mm512_setzero_si512());
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtusepi32_epi8(c));
        wv = _mm512_add_epi32(wv, s16);
    }
    if (i < n)
        lp_quantize_sr_ref(q + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}

/* lp_fake_quant_sr's body: 16 values a step, the codes of s_sr16 (the 0
 * clamp by vpmaxsd), their values as in lp_dequantize_avx512 (mul, then
 * add: no FMA); add: y += them; q (may be NULL): the codes. */
static inline __attribute__((always_inline)) void
s_fq_sr(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
        uint32_t first, const int add)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const __m512 vmin = _mm512_set1_ps(p.min), vs = _mm512_set1_ps(p.scale);
    const __m512i vk2 = _mm512_set1_epi32((int)k2), zero = _mm512_setzero_si512();
    __m512i wv = s_weyl16(first, k1);
    const __m512i s16 = _mm512_set1_epi32((int)(16u * LP_WEYL));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i c = _mm512_max_epi32(s_sr16(x + i, wv, vk2, vmin, vs), zero);
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c), vs), vmin);
        if (add)
            v = _mm512_add_ps(_mm512_loadu_ps(y + i), v);
        _mm512_storeu_ps(y + i, v);
        if (q)
            _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtusepi32_epi8(c));
        wv = _mm512_add_epi32(wv, s16);
    }
    if (i < n) {
        if (add)
            lp_fake_quant_sr_add_ref(y + i, x + i, n - i, p, seed, (uint32_t)(first + i));
        else
            lp_fake_quant_sr_ref(y + i, q ? q + i : NULL, x + i, n - i, p, seed,
                                 (uint32_t)(first + i));
    }
}

void lp_fake_quant_sr_avx512(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                             uint64_t seed, uint32_t first)
{
    s_fq_sr(y, q, x, n, p, seed, first, 0);
}

void lp_fake_quant_sr_add_avx512(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                                 uint32_t first)
{
    s_fq_sr(y, NULL, x, n, p, seed, first, 1);
}

void lp_dequantize_avx512(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    const __m512 vmin = _mm512_set1_ps(p.min), vs = _mm512_set1_ps(p.scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i k = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(k), vs);
        _mm512_storeu_ps(x + i, _mm512_add_ps(v, vmin));
    }
    if (i < n)
        lp_dequantize_ref(x + i, q + i, n - i, p);
}
