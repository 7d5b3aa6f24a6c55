/* lp_gemm_neon — the GEMMs' dequantization rows (lp_gemm.h) on NEON, for
 * the kernel tables of the ARM levels (lp_kern_arm.c).
 *
 * Owns:    lp_dequant_row_neon, lp_dequant_rows_neon: out = (float)(c*S +
 *          t + base) in double, two lanes a vector, the twin's operations
 *          in its order (S widened exactly, no FMA, one rounding to float
 *          at the end), so the same floats.  Tails run the twin.
 * Callers: the ARM levels' kernel tables; tests through the tables.
 */
#include <arm_neon.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd_arm.h"

/* 2 lanes: (c*S + t) + base, S exact in double */
static inline float64x2_t s_row2(int32x2_t s, const double *t, const double *base,
                                 float64x2_t c)
{
    const float64x2_t v = vmulq_f64(c, vcvtq_f64_s64(vmovl_s32(s)));
    return vaddq_f64(vaddq_f64(v, vld1q_f64(t)), vld1q_f64(base));
}

static void s_dequant_row(float *out, const int32_t *S, const double *t, float64x2_t vc,
                          double c, const double *base, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const int32x4_t s = vld1q_s32(S + i);
        const float64x2_t lo = s_row2(vget_low_s32(s), t + i, base + i, vc);
        const float64x2_t hi = s_row2(vget_high_s32(s), t + i + 2, base + i + 2, vc);
        vst1q_f32(out + i, vcvt_high_f32_f64(vcvt_f32_f64(lo), hi));
    }
    if (i < n)
        lp_dequant_row_ref(out + i, S + i, t + i, c, base + i, n - i);
}

void lp_dequant_row_neon(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t n)
{
    s_dequant_row(out, S, t, vdupq_n_f64(c), c, base, n);
}

void lp_dequant_rows_neon(float *out, const int32_t *S, const double *t, double c,
                          const double *base, size_t W, int rows)
{
    const float64x2_t vc = vdupq_n_f64(c);
    for (int r = 0; r < rows; r++)
        s_dequant_row(out + (size_t)r * W, S + (size_t)r * W, t + (size_t)r * W, vc, c, base, W);
}
