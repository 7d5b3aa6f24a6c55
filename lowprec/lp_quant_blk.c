/* lp_quant_blk — the portable level's quantization kernels: lp_quant's
 * twins on GNU C generic vectors of 4 lanes (16 bytes: SSE2, NEON, ...;
 * scalar code on a target without a vector unit), no intrinsics.
 *
 * Owns:    lp_minmax_blk, lp_quantize_blk, lp_quantize_sr_blk,
 *          lp_dequantize_blk, lp_fake_quant_sr_blk, lp_fake_quant_sr_add_blk.
 *          The twins' operations in the same order on each lane (no FMA:
 *          ISO C mode does not contract), so codes and values are
 *          bit-identical; rounding to nearest even is the add and subtract
 *          of 1.5 * 2^23 (exact for the clamped 0..255), the noise the same
 *          counter hash (lp_simd.h) per lane, its Weyl values stepped by
 *          adds; the tails run the twins.
 * Callers: the kernel table's portable entry (lp_kern.c), which every
 *          level without SIMD versions of its own keeps.
 */
#include <string.h>

#include "lowprec/lp_quant.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_vec.h"

#define S_RNE 12582912.0f /* 1.5 * 2^23: t + S_RNE - S_RNE rounds t to an integer */

/* lp_quant.c's s_code on 4 lanes: NaN and t <= 0 give 0, t >= 255 gives
 * 255, otherwise t rounded to nearest even */
static inline void s_codes(uint8_t *q, nn_f32x4 t)
{
    const nn_f32x4 zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
    const nn_f32x4 rne = {S_RNE, S_RNE, S_RNE, S_RNE};
    t = nn_vec_pick(t > zero, t, zero);
    t = nn_vec_pick(t < top, t, top);
    t = (t + rne) - rne;
    const nn_u8x4 c = __builtin_convertvector(__builtin_convertvector(t, nn_i32x4), nn_u8x4);
    memcpy(q, &c, sizeof c);
}

/* The Weyl values i * LP_WEYL + k1 of lanes i..i+3, stepped by adds */
static inline nn_u32x4 s_weyl(uint32_t i, uint32_t k1)
{
    const nn_u32x4 x = {i, i + 1, i + 2, i + 3};
    return x * LP_WEYL + k1;
}

#define S_WEYL_STEP (4u * LP_WEYL) /* 4 lanes on */

/* the noise of the lanes whose Weyl values are w (lp_noise_bits, then
 * lp_quant.c's u) */
static inline nn_f32x4 s_noise(nn_u32x4 w, uint32_t k2)
{
    nn_u32x4 x = w ^ k2;
    x ^= x >> 16;
    x *= LP_HASH_M1;
    x ^= x >> 15;
    x *= LP_HASH_M2;
    x ^= x >> 16;
    const nn_f32x4 u = __builtin_convertvector((nn_i32x4)(x >> 8), nn_f32x4);
    return u * (1.0f / 16777216.0f) - 0.5f;
}

static inline nn_f32x4 s_values(const uint8_t *q, lp_qparams p)
{
    nn_u8x4 c;
    memcpy(&c, q, sizeof c);
    const nn_f32x4 v = __builtin_convertvector(c, nn_f32x4) * p.scale;
    return v + p.min;
}

/* The twin keeps the first element of the least (greatest) value: each
 * lane keeps its first, with its index, all lanes starting from x[0]
 * (a NaN there stays, as in the twin); the lanes are folded by value,
 * then index, so a zero's sign is the twin's too. */
static float s_fold(nn_f32x4 v, nn_i32x4 at, int least)
{
    float r = v[0];
    int32_t ri = at[0];
    for (int l = 1; l < 4; l++)
        if ((least ? v[l] < r : v[l] > r) || (v[l] == r && at[l] < ri)) {
            r = v[l];
            ri = at[l];
        }
    return r;
}

void lp_minmax_blk(float *mn, float *mx, const float *x, size_t n)
{
    if (n < 8 || n > INT32_MAX) {
        lp_minmax_ref(mn, mx, x, n);
        return;
    }
    nn_f32x4 a = {x[0], x[0], x[0], x[0]}, b = a;
    nn_i32x4 ai = {0, 0, 0, 0}, bi = ai, at = {0, 1, 2, 3};
    size_t i = 0;
    for (; i + 4 <= n; i += 4, at += 4) {
        const nn_f32x4 v = nn_vec_ld(x + i);
        const nn_i32x4 lt = v < a, gt = v > b;
        a = nn_vec_pick(lt, v, a);
        ai = (at & lt) | (ai & ~lt);
        b = nn_vec_pick(gt, v, b);
        bi = (at & gt) | (bi & ~gt);
    }
    float lo = s_fold(a, ai, 1), hi = s_fold(b, bi, 0);
    for (; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *mn = lo;
    *mx = hi;
}

void lp_quantize_blk(uint8_t *q, const float *x, size_t n, lp_qparams p)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        s_codes(q + i, (nn_vec_ld(x + i) - p.min) / p.scale);
    lp_quantize_ref(q + i, x + i, n - i, p);
}

/* What the stochastic-rounding kernels do with their codes */
enum { S_CODES, S_VALUES, S_ADD };

/* The whole 4-lane groups of x (n): stochastic codes into q (S_CODES;
 * S_VALUES: q may be NULL) and their values into y (S_VALUES), or added
 * to y (S_ADD).  The count done: the caller's twin takes the rest. */
static size_t s_sr_lanes(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                         uint64_t seed, uint32_t first, int what)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    nn_u32x4 w = s_weyl(first, k1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4, w += S_WEYL_STEP) {
        uint8_t c[4];
        const nn_f32x4 t = (nn_vec_ld(x + i) - p.min) / p.scale;
        s_codes(c, t + s_noise(w, k2));
        if (q)
            memcpy(q + i, c, sizeof c);
        if (what == S_CODES)
            continue;
        const nn_f32x4 v = what == S_ADD ? nn_vec_ld(y + i) + s_values(c, p) : s_values(c, p);
        memcpy(y + i, &v, sizeof v);
    }
    return i;
}

void lp_quantize_sr_blk(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first)
{
    const size_t i = s_sr_lanes(NULL, q, x, n, p, seed, first, S_CODES);
    lp_quantize_sr_ref(q + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}

void lp_dequantize_blk(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const nn_f32x4 v = s_values(q + i, p);
        memcpy(x + i, &v, sizeof v);
    }
    lp_dequantize_ref(x + i, q + i, n - i, p);
}

void lp_fake_quant_sr_blk(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first)
{
    const size_t i = s_sr_lanes(y, q, x, n, p, seed, first, S_VALUES);
    lp_fake_quant_sr_ref(y + i, q ? q + i : NULL, x + i, n - i, p, seed, (uint32_t)(first + i));
}

void lp_fake_quant_sr_add_blk(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first)
{
    const size_t i = s_sr_lanes(y, NULL, x, n, p, seed, first, S_ADD);
    lp_fake_quant_sr_add_ref(y + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}
