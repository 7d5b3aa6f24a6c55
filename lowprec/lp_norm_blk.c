/* lp_norm_blk — the portable level's Range EvoNorm rows (lp_layers.h) on
 * GNU C generic vectors of 4 lanes (SSE2, NEON, ...; scalar code where a
 * target has no vector unit), no intrinsics.
 *
 * Owns:    lp_ren_row_fwd_blk, lp_ren_row_bwd_blk.  The forward follows the
 *          scalar twin operation by operation (true division by 6, no FMA:
 *          ISO C mode does not contract), so it gives the same floats.  The
 *          backward sums up to 64 values per lane in float, then the blocks
 *          in double (the twin sums everything in double), as the x86
 *          levels do: sums agree to ~1e-7 relative, dx bit for bit.  Tails
 *          (n % 4) run the twins.
 * Callers: the kernel table's portable entry (lp_kern.c).
 */
#include <string.h>

#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_vec.h"

/* lanes of a where m is set, else 0 */
static inline nn_f32x4 s_keep(nn_i32x4 m, nn_f32x4 a)
{
    return (nn_f32x4)((nn_i32x4)a & m);
}

/* the twin's hardsigmoid clamp: NaN and t <= 0 give 0, t >= 1 gives 1 */
static inline nn_f32x4 s_clamp01(nn_f32x4 t)
{
    const nn_f32x4 one = {1, 1, 1, 1};
    t = s_keep(t > 0.0f, t);
    const nn_i32x4 below = t < one;
    return (nn_f32x4)(((nn_i32x4)t & below) | ((nn_i32x4)one & ~below));
}

void lp_ren_row_fwd_blk(float *o, const float *x, size_t n, float v, float sc, float gamma,
                        float beta)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const nn_f32x4 xv = nn_vec_ld(x + i);
        const nn_f32x4 t = s_clamp01(xv * v / 6.0f + 0.5f);
        const nn_f32x4 out = (xv * t) * sc * gamma + beta;
        memcpy(o + i, &out, sizeof out);
    }
    if (i < n)
        lp_ren_row_fwd_ref(o + i, x + i, n - i, v, sc, gamma, beta);
}

/* (by pointer: a 32-byte vector argument would depend on AVX's ABI) */
static inline double s_sum(const nn_f64x4 *a)
{
    return ((*a)[0] + (*a)[1]) + ((*a)[2] + (*a)[3]);
}

void lp_ren_row_bwd_blk(float *dx, double sums[3], const float *x, const float *g, size_t n,
                        float v, float sc, float gamma)
{
    nn_f64x4 dg = {0}, dgn = {0}, dvx = {0};
    size_t i = 0;
    while (i + 4 <= n) {
        nn_f32x4 bg = {0}, bgn = {0}, bvx = {0};
        const size_t end = i + 256 <= n ? i + 256 : n; /* 64 values per lane */
        for (; i + 4 <= end; i += 4) {
            const nn_f32x4 xv = nn_vec_ld(x + i), gv = nn_vec_ld(g + i);
            const nn_f32x4 xv6 = xv * v / 6.0f, t = xv6 + 0.5f;
            const nn_i32x4 in = (t >= 0.0f) & (t <= 1.0f);
            const nn_f32x4 h = s_clamp01(t), nrm = xv * h, dn = gv * sc * gamma;
            bg += gv;
            bgn += gv * nrm;
            bvx += s_keep(in, dn * xv * xv);
            if (dx) {
                const nn_f32x4 d = dn * (h + s_keep(in, xv6));
                memcpy(dx + i, &d, sizeof d);
            }
        }
        dg += __builtin_convertvector(bg, nn_f64x4);
        dgn += __builtin_convertvector(bgn, nn_f64x4);
        dvx += __builtin_convertvector(bvx, nn_f64x4);
    }
    sums[0] += s_sum(&dg);
    sums[1] += s_sum(&dgn);
    sums[2] += s_sum(&dvx);
    if (i < n)
        lp_ren_row_bwd_ref(dx ? dx + i : NULL, sums, x + i, g + i, n - i, v, sc, gamma);
}
