/* lp_quant_neon — NEON versions of lp_quant kernels (4 floats per vector,
 * 16 per step): quantize, stochastic quantize, dequantize, min/max and the
 * fused stochastic fake-quantizers (lp_fake_quant_sr, _add).  The twins'
 * operations in the same order (no FMA), so codes and values are
 * bit-identical; the tails run the scalar twins.  Called through the
 * kernel tables of the ARM levels (lp_kern_arm.c). */
#include <arm_neon.h>

#include "lowprec/lp_simd.h" /* lp_hash32's constants, LP_WEYL, lp_seed_keys */
#include "lowprec/lp_simd_arm.h"

/* t = (x - min) / scale, then lp_quant.c's s_code: NaN and t <= 0 give 0,
 * t >= 255 gives 255, otherwise round to nearest even (FCVTNU). */
static inline uint32x4_t s_codes4(float32x4_t x, float32x4_t mn, float32x4_t sc)
{
    float32x4_t t = vdivq_f32(vsubq_f32(x, mn), sc);
    t = vbslq_f32(vcgtq_f32(t, vdupq_n_f32(0.0f)), t, vdupq_n_f32(0.0f));
    t = vminq_f32(t, vdupq_n_f32(255.0f));
    return vcvtnq_u32_f32(t);
}

void lp_quantize_neon(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    const float32x4_t mn = vdupq_n_f32(p.min), sc = vdupq_n_f32(p.scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16x8_t lo = vcombine_u16(vmovn_u32(s_codes4(vld1q_f32(x + i), mn, sc)),
                                     vmovn_u32(s_codes4(vld1q_f32(x + i + 4), mn, sc)));
        uint16x8_t hi = vcombine_u16(vmovn_u32(s_codes4(vld1q_f32(x + i + 8), mn, sc)),
                                     vmovn_u32(s_codes4(vld1q_f32(x + i + 12), mn, sc)));
        vst1q_u8(q + i, vcombine_u8(vmovn_u16(lo), vmovn_u16(hi)));
    }
    if (i < n)
        lp_quantize_ref(q + i, x + i, n - i, p);
}

void lp_dequantize_neon(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    const float32x4_t mn = vdupq_n_f32(p.min), sc = vdupq_n_f32(p.scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint8x16_t b = vld1q_u8(q + i);
        uint16x8_t w[2] = {vmovl_u8(vget_low_u8(b)), vmovl_u8(vget_high_u8(b))};
        for (int h = 0; h < 2; h++) {
            float32x4_t f0 = vcvtq_f32_u32(vmovl_u16(vget_low_u16(w[h])));
            float32x4_t f1 = vcvtq_f32_u32(vmovl_u16(vget_high_u16(w[h])));
            vst1q_f32(x + i + 8 * h, vaddq_f32(vmulq_f32(f0, sc), mn));
            vst1q_f32(x + i + 8 * h + 4, vaddq_f32(vmulq_f32(f1, sc), mn));
        }
    }
    if (i < n)
        lp_dequantize_ref(x + i, q + i, n - i, p);
}

/* lp_minmax on FMIN/FMAX: four vectors of partial extremes, folded, then
 * the last values in order.  The min and max of the same set as the twin's
 * (the order does not matter to min/max of non-NaN floats; a zero may come
 * back with the other sign, which compares equal). */
void lp_minmax_neon(float *mn, float *mx, const float *x, size_t n)
{
    size_t i = 0;
    float a = x[0], b = x[0];
    if (n >= 16) {
        float32x4_t n0 = vld1q_f32(x), n1 = vld1q_f32(x + 4), n2 = vld1q_f32(x + 8);
        float32x4_t n3 = vld1q_f32(x + 12), m0 = n0, m1 = n1, m2 = n2, m3 = n3;
        for (i = 16; i + 16 <= n; i += 16) {
            const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
            const float32x4_t v2 = vld1q_f32(x + i + 8), v3 = vld1q_f32(x + i + 12);
            n0 = vminq_f32(n0, v0);
            m0 = vmaxq_f32(m0, v0);
            n1 = vminq_f32(n1, v1);
            m1 = vmaxq_f32(m1, v1);
            n2 = vminq_f32(n2, v2);
            m2 = vmaxq_f32(m2, v2);
            n3 = vminq_f32(n3, v3);
            m3 = vmaxq_f32(m3, v3);
        }
        a = vminvq_f32(vminq_f32(vminq_f32(n0, n1), vminq_f32(n2, n3)));
        b = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m0, m1), vmaxq_f32(m2, m3)));
    }
    for (; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *mn = a;
    *mx = b;
}

/* lp_quantize_sr on NEON: lp_noise_bits of 4 lanes at once (the Weyl
 * values stepped by 4*LP_WEYL, the hash in 32-bit lanes: MUL wraps as the
 * scalar product does), u and t in the twin's order; codes as s_codes4. */
static inline uint32x4_t s_sr4(const float *x, uint32x4_t w, uint32x4_t k2, float32x4_t mn,
                               float32x4_t sc)
{
    uint32x4_t h = veorq_u32(w, k2);
    h = veorq_u32(h, vshrq_n_u32(h, 16));
    h = vmulq_u32(h, vdupq_n_u32(LP_HASH_M1));
    h = veorq_u32(h, vshrq_n_u32(h, 15));
    h = vmulq_u32(h, vdupq_n_u32(LP_HASH_M2));
    h = veorq_u32(h, vshrq_n_u32(h, 16));
    const float32x4_t u = vsubq_f32(
        vmulq_f32(vcvtq_f32_u32(vshrq_n_u32(h, 8)), vdupq_n_f32(1.0f / 16777216.0f)),
        vdupq_n_f32(0.5f));
    float32x4_t t = vaddq_f32(vdivq_f32(vsubq_f32(vld1q_f32(x), mn), sc), u);
    t = vbslq_f32(vcgtq_f32(t, vdupq_n_f32(0.0f)), t, vdupq_n_f32(0.0f));
    t = vminq_f32(t, vdupq_n_f32(255.0f));
    return vcvtnq_u32_f32(t);
}

/* The Weyl values of lanes first .. first + 3 under key k1 */
static inline uint32x4_t s_weyl4(uint32_t first, uint32_t k1)
{
    static const uint32_t lane[4] = {0, 1, 2, 3};
    return vaddq_u32(vdupq_n_u32(first * LP_WEYL + k1),
                     vmulq_u32(vld1q_u32(lane), vdupq_n_u32(LP_WEYL)));
}

void lp_quantize_sr_neon(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                         uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const float32x4_t mn = vdupq_n_f32(p.min), sc = vdupq_n_f32(p.scale);
    const uint32x4_t vk2 = vdupq_n_u32(k2), s4 = vdupq_n_u32(4u * LP_WEYL);
    uint32x4_t w = s_weyl4(first, k1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32x4_t c[4];
        for (int v = 0; v < 4; v++, w = vaddq_u32(w, s4))
            c[v] = s_sr4(x + i + 4 * v, w, vk2, mn, sc);
        const uint16x8_t lo = vcombine_u16(vmovn_u32(c[0]), vmovn_u32(c[1]));
        const uint16x8_t hi = vcombine_u16(vmovn_u32(c[2]), vmovn_u32(c[3]));
        vst1q_u8(q + i, vcombine_u8(vmovn_u16(lo), vmovn_u16(hi)));
    }
    if (i < n)
        lp_quantize_sr_ref(q + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}

/* The fused stochastic quantize + dequantize (+ add): s_sr4's codes, their
 * values code * scale + min (two roundings, as lp_dequantize_ref); the
 * codes kept in q when it is not NULL.  add: y = y + value. */
static inline void s_fq16(float *y, uint8_t *q, const float *x, uint32x4_t *w, uint32x4_t k2,
                          float32x4_t mn, float32x4_t sc, int add)
{
    const uint32x4_t s4 = vdupq_n_u32(4u * LP_WEYL);
    uint32x4_t c[4];
    for (int v = 0; v < 4; v++, *w = vaddq_u32(*w, s4)) {
        c[v] = s_sr4(x + 4 * v, *w, k2, mn, sc);
        const float32x4_t val = vaddq_f32(vmulq_f32(vcvtq_f32_u32(c[v]), sc), mn);
        vst1q_f32(y + 4 * v, add ? vaddq_f32(vld1q_f32(y + 4 * v), val) : val);
    }
    if (q) {
        const uint16x8_t lo = vcombine_u16(vmovn_u32(c[0]), vmovn_u32(c[1]));
        const uint16x8_t hi = vcombine_u16(vmovn_u32(c[2]), vmovn_u32(c[3]));
        vst1q_u8(q, vcombine_u8(vmovn_u16(lo), vmovn_u16(hi)));
    }
}

void lp_fake_quant_sr_neon(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                           uint64_t seed, uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const float32x4_t mn = vdupq_n_f32(p.min), sc = vdupq_n_f32(p.scale);
    const uint32x4_t vk2 = vdupq_n_u32(k2);
    uint32x4_t w = s_weyl4(first, k1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        s_fq16(y + i, q ? q + i : NULL, x + i, &w, vk2, mn, sc, 0);
    if (i < n)
        lp_fake_quant_sr_ref(y + i, q ? q + i : NULL, x + i, n - i, p, seed,
                             (uint32_t)(first + i));
}

void lp_fake_quant_sr_add_neon(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                               uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    const float32x4_t mn = vdupq_n_f32(p.min), sc = vdupq_n_f32(p.scale);
    const uint32x4_t vk2 = vdupq_n_u32(k2);
    uint32x4_t w = s_weyl4(first, k1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        s_fq16(y + i, NULL, x + i, &w, vk2, mn, sc, 1);
    if (i < n)
        lp_fake_quant_sr_add_ref(y + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}
