/* lp_conv_neon — the conv shift path's pair-grid helpers (lp_simd.h) on
 * NEON, for the kernel tables of the ARM levels (lp_kern_arm.c).
 *
 * Owns:    lp_pair_plane_neon (8 pixels a step: the codes widened to u16
 *          and interleaved, r0 low and r1 high, which are the pair lanes;
 *          every variant gets the same lanes, then its wrap columns are
 *          zeroed, as lp_pair_plane_avx2 does) and lp_tap_sum_row_neon
 *          (the taps' int32 sums 4 lanes at a time, then c * sum in double,
 *          one rounding).  Integer sums and the same double product: the
 *          twins' results.  Tails run the twins' element code.
 * Callers: the ARM levels' kernel tables; tests through the tables.
 */
#include <arm_neon.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_simd_arm.h"

/* the wrap columns of every variant of row o (lp_pair_plane's contract) */
static void s_zero_wraps(uint32_t *dst, size_t vstride, int V, size_t o, int W)
{
    const int pad = (V - 1) / 2;
    for (int v = 0; v < V; v++) {
        const int dx = v - pad, z0 = dx < 0 ? W + dx : 0, z1 = dx < 0 ? W : dx;
        for (int z = z0 < 0 ? 0 : z0; z < (z1 > W ? W : z1); z++)
            dst[(size_t)v * vstride + o + z] = 0;
    }
}

void lp_pair_plane_neon(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                        const uint8_t *r0, const uint8_t *r1, int H, int W)
{
    for (int h = 0; h < H; h++) {
        const size_t o = (size_t)h * W;
        int w = 0;
        for (; w + 8 <= W; w += 8) {
            const uint16x8_t a = vmovl_u8(vld1_u8(r0 + o + w));
            const uint16x8_t b = r1 ? vmovl_u8(vld1_u8(r1 + o + w)) : vdupq_n_u16(0);
            const uint32x4_t lo = vreinterpretq_u32_u16(vzip1q_u16(a, b));
            const uint32x4_t hi = vreinterpretq_u32_u16(vzip2q_u16(a, b));
            for (int v = 0; v < V; v++) {
                vst1q_u32(dst + (size_t)v * vstride + o + w, lo);
                vst1q_u32(dst + (size_t)v * vstride + o + w + 4, hi);
            }
            if (chs) {
                int32_t *c = chs + (size_t)h * ldc + w;
                const uint16x8_t s = vaddq_u16(a, b); /* <= 510 */
                vst1q_s32(c, vaddq_s32(vld1q_s32(c),
                                       vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(s)))));
                vst1q_s32(c + 4, vaddq_s32(vld1q_s32(c + 4),
                                           vreinterpretq_s32_u32(vmovl_high_u16(s))));
            }
        }
        for (; w < W; w++) { /* the twin's element, without its wrap test */
            const uint8_t v0 = r0[o + w], v1 = r1 ? r1[o + w] : 0;
            for (int v = 0; v < V; v++)
                dst[(size_t)v * vstride + o + w] = lp_pair(v0, v1);
            if (chs)
                chs[(size_t)h * ldc + w] += v0 + v1;
        }
        s_zero_wraps(dst, vstride, V, o, W);
    }
}

void lp_tap_sum_row_neon(double *t, const int32_t *s, const int *off, int T, double c, size_t n)
{
    const float64x2_t vc = vdupq_n_f64(c);
    size_t w = 0;
    for (; w + 4 <= n; w += 4) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int k = 0; k < T; k++)
            acc = vaddq_s32(acc, vld1q_s32(s + (ptrdiff_t)w + off[k]));
        vst1q_f64(t + w, vmulq_f64(vc, vcvtq_f64_s64(vmovl_s32(vget_low_s32(acc)))));
        vst1q_f64(t + w + 2, vmulq_f64(vc, vcvtq_f64_s64(vmovl_high_s32(acc))));
    }
    if (w < n)
        lp_tap_sum_row_ref(t + w, s + w, off, T, c, n - w);
}
