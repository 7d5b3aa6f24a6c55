/* nn_layers_blk — the portable level's plane kernels on GNU C generic
 * vectors, the baseline vector unit of any target (SSE2, NEON, ...;
 * scalar code where there is none), no intrinsics.
 *
 * Owns:    nn_maxpool2_row_blk: nn_maxpool2_row_ref's windows 4 at a time,
 *          the twin's three strict comparisons in its order (a float
 *          vector > is false on NaN, as the twin's), so values and indices
 *          are the twin's bit for bit; the last 1..3 windows run the twin.
 * Callers: the kernel table's portable entry (nn_kern.c), which the
 *          aarch64 levels keep.
 */
#include <string.h>

#include "nn/nn_layers_simd.h"
#include "nn/nn_vec.h"

/* The even and odd floats of x[0..8), in order */
static inline void s_deinterleave(const float *x, nn_f32x4 *even, nn_f32x4 *odd)
{
    const nn_f32x4 lo = nn_vec_ld(x), hi = nn_vec_ld(x + 4);
    *even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
    *odd = __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
}

/* lanes of a where m is set, else of b */
static inline nn_i32x4 s_pick_i(nn_i32x4 m, nn_i32x4 a, nn_i32x4 b)
{
    return (a & m) | (b & ~m);
}

void nn_maxpool2_row_blk(float *o, uint32_t *am, const float *r0, const float *r1,
                         uint32_t base, uint32_t W, size_t ow)
{
    const int32_t w = (int32_t)W;
    const nn_i32x4 one = {1, 1, 1, 1}, dw = {w, w, w, w}, dw1 = dw + 1;
    nn_i32x4 idx = (nn_i32x4){0, 2, 4, 6} + (int32_t)base;
    size_t k = 0;
    for (; k + 4 <= ow; k += 4, idx += 8) {
        nn_f32x4 a, b, c, d;
        s_deinterleave(r0 + 2 * k, &a, &b);
        s_deinterleave(r1 + 2 * k, &c, &d);
        nn_i32x4 m = b > a;
        nn_f32x4 bv = nn_vec_pick(m, b, a);
        nn_i32x4 off = m & one;
        m = c > bv;
        bv = nn_vec_pick(m, c, bv);
        off = s_pick_i(m, dw, off);
        m = d > bv;
        bv = nn_vec_pick(m, d, bv);
        off = s_pick_i(m, dw1, off);
        const nn_i32x4 at = idx + off;
        memcpy(o + k, &bv, sizeof bv);
        memcpy(am + k, &at, sizeof at);
    }
    if (k < ow)
        nn_maxpool2_row_ref(o + k, am + k, r0 + 2 * k, r1 + 2 * k, base + (uint32_t)(2 * k), W,
                            ow - k);
}
