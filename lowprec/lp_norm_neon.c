/* lp_norm_neon — the Range EvoNorm rows (lp_layers.h) on NEON, for the
 * kernel tables of the ARM levels (lp_kern_arm.c).
 *
 * Owns:    lp_ren_row_fwd_neon, lp_ren_row_bwd_neon.  The forward follows
 *          the scalar twin operation by operation (nothing contracted; a
 *          NaN t gives h = 0 as the twin's compare does), but for x*v/6,
 *          whose twin's result comes without a divide (s_xv6), so it
 *          gives the same floats.  The backward keeps the portable level's
 *          order of sums (lp_norm_blk.c): 4 lanes, float sums of 64 values
 *          per lane (blocks of 256 from the row's start), each block
 *          widened and added to double lanes, the lanes folded as
 *          (l0 + l1) + (l2 + l3); 8 values a step still add to each lane
 *          in index order.  So its sums are the portable level's bit for
 *          bit (to ~1e-7 relative of the twin's all-double sums, as at the
 *          x86 levels) and dx is the twin's.  Tails (n % 4) run the twins.
 *          The chunk ranges' searches lp_find_eq_neon, lp_minmax_u8_neon,
 *          lp_find_u8_neon: the twins' results (first index; min and max).
 * Callers: the ARM levels' kernel tables; tests through the tables.
 */
#include <arm_neon.h>

#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h" /* the chunk searches' twins */
#include "lowprec/lp_simd_arm.h"

/* the twin's hardsigmoid clamp: NaN and t <= 0 give 0, t >= 1 gives 1 */
static inline float32x4_t s_clamp01(float32x4_t t)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    t = vbslq_f32(vcgtq_f32(t, zero), t, zero);
    return vminq_f32(t, vdupq_n_f32(1.0f));
}

/* x*v/6 of 4 lanes: a = x*v rounded as the twin's, then a/6 without a
 * divide (FDIV, one in 4 elements, bounded the loops: ~9 cycles an element
 * on Neoverse N1 in llvm-mca): q0 = a*y with y = RN(1/6), the residual
 * r = a - 6*q0 exact in one FMLS, q = q0 + r*y in one FMLA.  Checked on
 * every one of the 2^32 floats a (bench/div6_check.c): q is the correctly
 * rounded a/6 (the twin's bits) but for |a| < 2^-125, where both are below
 * 2^-127 and neither changes 1/2 + q nor (1/2 + q) + q, the only uses of
 * it; a = +-inf (r NaN) keeps q0 = a*y = +-inf, a NaN stays NaN. */
static inline float32x4_t s_xv6(float32x4_t x, float32x4_t v)
{
    const float32x4_t y = vdupq_n_f32(1.0f / 6.0f);
    const float32x4_t a = vmulq_f32(x, v), q0 = vmulq_f32(a, y);
    const float32x4_t r = vfmsq_f32(a, q0, vdupq_n_f32(6.0f));
    return vbslq_f32(vceqq_f32(r, r), vfmaq_f32(q0, r, y), q0);
}

/* o (4) = the twin's output of x (4) */
static inline void s_fwd4(float *o, const float *x, float32x4_t v, float32x4_t sc,
                          float32x4_t gamma, float32x4_t beta)
{
    const float32x4_t xv = vld1q_f32(x);
    const float32x4_t t = s_clamp01(vaddq_f32(s_xv6(xv, v), vdupq_n_f32(0.5f)));
    const float32x4_t out = vmulq_f32(vmulq_f32(vmulq_f32(xv, t), sc), gamma);
    vst1q_f32(o, vaddq_f32(out, beta));
}

void lp_ren_row_fwd_neon(float *o, const float *x, size_t n, float v, float sc, float gamma,
                         float beta)
{
    const float32x4_t vv = vdupq_n_f32(v), vsc = vdupq_n_f32(sc);
    const float32x4_t vg = vdupq_n_f32(gamma), vb = vdupq_n_f32(beta);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s_fwd4(o + i, x + i, vv, vsc, vg, vb);
        s_fwd4(o + i + 4, x + i + 4, vv, vsc, vg, vb);
    }
    if (i + 4 <= n) {
        s_fwd4(o + i, x + i, vv, vsc, vg, vb);
        i += 4;
    }
    if (i < n)
        lp_ren_row_fwd_ref(o + i, x + i, n - i, v, sc, gamma, beta);
}

/* the float sums of one block's lanes */
typedef struct {
    float32x4_t g, gn, vx;
} s_bsums;

/* 4 values of the backward: the block sums (+=, lane order) and dx (4,
 * may be NULL) */
static inline void s_bwd4(s_bsums *b, float *dx, const float *x, const float *g, float32x4_t v,
                          float32x4_t scg_sc, float32x4_t scg_g)
{
    const float32x4_t xv = vld1q_f32(x), gv = vld1q_f32(g);
    const float32x4_t xv6 = s_xv6(xv, v), t = vaddq_f32(xv6, vdupq_n_f32(0.5f));
    const uint32x4_t in = vandq_u32(vcgeq_f32(t, vdupq_n_f32(0.0f)),
                                    vcleq_f32(t, vdupq_n_f32(1.0f)));
    const float32x4_t h = s_clamp01(t), nrm = vmulq_f32(xv, h);
    const float32x4_t dn = vmulq_f32(vmulq_f32(gv, scg_sc), scg_g);
    b->g = vaddq_f32(b->g, gv);
    b->gn = vaddq_f32(b->gn, vmulq_f32(gv, nrm));
    const float32x4_t dvx = vmulq_f32(vmulq_f32(dn, xv), xv);
    b->vx = vaddq_f32(b->vx, vreinterpretq_f32_u32(vandq_u32(in, vreinterpretq_u32_f32(dvx))));
    if (dx) {
        const float32x4_t k = vreinterpretq_f32_u32(vandq_u32(in, vreinterpretq_u32_f32(xv6)));
        vst1q_f32(dx, vmulq_f32(dn, vaddq_f32(h, k)));
    }
}

/* d (2 double vectors) += the block sums of a's lanes, widened */
static inline void s_widen_add(float64x2_t d[2], float32x4_t a)
{
    d[0] = vaddq_f64(d[0], vcvt_f64_f32(vget_low_f32(a)));
    d[1] = vaddq_f64(d[1], vcvt_high_f64_f32(a));
}

static inline double s_fold(const float64x2_t d[2])
{
    return vaddvq_f64(d[0]) + vaddvq_f64(d[1]);
}

void lp_ren_row_bwd_neon(float *dx, double sums[3], const float *x, const float *g, size_t n,
                         float v, float sc, float gamma)
{
    const float32x4_t vv = vdupq_n_f32(v), vsc = vdupq_n_f32(sc), vg = vdupq_n_f32(gamma);
    float64x2_t dg[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)}, dgn[2] = {dg[0], dg[0]};
    float64x2_t dvx[2] = {dg[0], dg[0]};
    size_t i = 0;
    while (i + 4 <= n) {
        s_bsums b = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
        const size_t end = i + 256 <= n ? i + 256 : n; /* 64 values per lane */
        for (; i + 8 <= end; i += 8) {
            s_bwd4(&b, dx ? dx + i : NULL, x + i, g + i, vv, vsc, vg);
            s_bwd4(&b, dx ? dx + i + 4 : NULL, x + i + 4, g + i + 4, vv, vsc, vg);
        }
        if (i + 4 <= end) {
            s_bwd4(&b, dx ? dx + i : NULL, x + i, g + i, vv, vsc, vg);
            i += 4;
        }
        s_widen_add(dg, b.g);
        s_widen_add(dgn, b.gn);
        s_widen_add(dvx, b.vx);
    }
    sums[0] += s_fold(dg);
    sums[1] += s_fold(dgn);
    sums[2] += s_fold(dvx);
    if (i < n)
        lp_ren_row_bwd_ref(dx ? dx + i : NULL, sums, x + i, g + i, n - i, v, sc, gamma);
}

/* ---- the chunk ranges' searches (lp_layers.h) -------------------------------
 * 16 elements a step; a step with a hit hands those 16 to the twin, which
 * finds the first. */

size_t lp_find_eq_neon(const float *x, size_t n, float v)
{
    const float32x4_t vv = vdupq_n_f32(v);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint32x4_t m = vorrq_u32(vorrq_u32(vceqq_f32(vld1q_f32(x + i), vv),
                                                 vceqq_f32(vld1q_f32(x + i + 4), vv)),
                                       vorrq_u32(vceqq_f32(vld1q_f32(x + i + 8), vv),
                                                 vceqq_f32(vld1q_f32(x + i + 12), vv)));
        if (vmaxvq_u32(m))
            return i + lp_find_eq_ref(x + i, 16, v);
    }
    return i + lp_find_eq_ref(x + i, n - i, v);
}

void lp_minmax_u8_neon(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n)
{
    size_t i = 0;
    uint8_t a = q[0], b = q[0];
    if (n >= 16) {
        uint8x16_t vmn = vld1q_u8(q), vmx = vmn;
        for (i = 16; i + 16 <= n; i += 16) {
            const uint8x16_t v = vld1q_u8(q + i);
            vmn = vminq_u8(vmn, v);
            vmx = vmaxq_u8(vmx, v);
        }
        a = vminvq_u8(vmn);
        b = vmaxvq_u8(vmx);
    }
    for (; i < n; i++) {
        a = q[i] < a ? q[i] : a;
        b = q[i] > b ? q[i] : b;
    }
    *mn = a;
    *mx = b;
}

size_t lp_find_u8_neon(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi)
{
    const uint8x16_t vlo = vdupq_n_u8(lo), vhi = vdupq_n_u8(hi);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8x16_t v = vld1q_u8(q + i);
        if (vmaxvq_u8(vandq_u8(vcgeq_u8(v, vlo), vcleq_u8(v, vhi))))
            return i + lp_find_u8_ref(q + i, 16, lo, hi);
    }
    return i + lp_find_u8_ref(q + i, n - i, lo, hi);
}
