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

typedef float s_f32x4 __attribute__((vector_size(16)));
typedef int32_t s_i32x4 __attribute__((vector_size(16)));
typedef uint32_t s_u32x4 __attribute__((vector_size(16)));
typedef uint8_t s_u8x4 __attribute__((vector_size(4)));

#define S_RNE 12582912.0f /* 1.5 * 2^23: t + S_RNE - S_RNE rounds t to an integer */

static inline s_f32x4 s_load(const float *x)
{
    s_f32x4 v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* lanes of a where m is set, else of b */
static inline s_f32x4 s_pick(s_i32x4 m, s_f32x4 a, s_f32x4 b)
{
    return (s_f32x4)(((s_i32x4)a & m) | ((s_i32x4)b & ~m));
}

/* lp_quant.c's s_code on 4 lanes: NaN and t <= 0 give 0, t >= 255 gives
 * 255, otherwise t rounded to nearest even */
static inline void s_codes(uint8_t *q, s_f32x4 t)
{
    const s_f32x4 zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
    const s_f32x4 rne = {S_RNE, S_RNE, S_RNE, S_RNE};
    t = s_pick(t > zero, t, zero);
    t = s_pick(t < top, t, top);
    t = (t + rne) - rne;
    const s_u8x4 c = __builtin_convertvector(__builtin_convertvector(t, s_i32x4), s_u8x4);
    memcpy(q, &c, sizeof c);
}

/* The Weyl values i * LP_WEYL + k1 of lanes i..i+3, stepped by adds */
static inline s_u32x4 s_weyl(uint32_t i, uint32_t k1)
{
    const s_u32x4 x = {i, i + 1, i + 2, i + 3};
    return x * LP_WEYL + k1;
}

#define S_WEYL_STEP (4u * LP_WEYL) /* 4 lanes on */

/* the noise of the lanes whose Weyl values are w (lp_noise_bits, then
 * lp_quant.c's u) */
static inline s_f32x4 s_noise(s_u32x4 w, uint32_t k2)
{
    s_u32x4 x = w ^ k2;
    x ^= x >> 16;
    x *= LP_HASH_M1;
    x ^= x >> 15;
    x *= LP_HASH_M2;
    x ^= x >> 16;
    const s_f32x4 u = __builtin_convertvector((s_i32x4)(x >> 8), s_f32x4);
    return u * (1.0f / 16777216.0f) - 0.5f;
}

static inline s_f32x4 s_values(const uint8_t *q, lp_qparams p)
{
    s_u8x4 c;
    memcpy(&c, q, sizeof c);
    const s_f32x4 v = __builtin_convertvector(c, s_f32x4) * p.scale;
    return v + p.min;
}

/* The twin keeps the first element of the least (greatest) value: each
 * lane keeps its first, with its index, all lanes starting from x[0]
 * (a NaN there stays, as in the twin); the lanes are folded by value,
 * then index, so a zero's sign is the twin's too. */
static float s_fold(s_f32x4 v, s_i32x4 at, int least)
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
    s_f32x4 a = {x[0], x[0], x[0], x[0]}, b = a;
    s_i32x4 ai = {0, 0, 0, 0}, bi = ai, at = {0, 1, 2, 3};
    size_t i = 0;
    for (; i + 4 <= n; i += 4, at += 4) {
        const s_f32x4 v = s_load(x + i);
        const s_i32x4 lt = v < a, gt = v > b;
        a = s_pick(lt, v, a);
        ai = (at & lt) | (ai & ~lt);
        b = s_pick(gt, v, b);
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
        s_codes(q + i, (s_load(x + i) - p.min) / p.scale);
    lp_quantize_ref(q + i, x + i, n - i, p);
}

void lp_quantize_sr_blk(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    s_u32x4 w = s_weyl(first, k1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4, w += S_WEYL_STEP) {
        const s_f32x4 t = (s_load(x + i) - p.min) / p.scale;
        s_codes(q + i, t + s_noise(w, k2));
    }
    lp_quantize_sr_ref(q + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}

void lp_dequantize_blk(float *x, const uint8_t *q, size_t n, lp_qparams p)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const s_f32x4 v = s_values(q + i, p);
        memcpy(x + i, &v, sizeof v);
    }
    lp_dequantize_ref(x + i, q + i, n - i, p);
}

void lp_fake_quant_sr_blk(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    s_u32x4 w = s_weyl(first, k1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4, w += S_WEYL_STEP) {
        uint8_t c[4];
        const s_f32x4 t = (s_load(x + i) - p.min) / p.scale;
        s_codes(c, t + s_noise(w, k2));
        const s_f32x4 v = s_values(c, p);
        memcpy(y + i, &v, sizeof v);
        if (q)
            memcpy(q + i, c, sizeof c);
    }
    lp_fake_quant_sr_ref(y + i, q ? q + i : NULL, x + i, n - i, p, seed, (uint32_t)(first + i));
}

void lp_fake_quant_sr_add_blk(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first)
{
    uint32_t k1, k2;
    lp_seed_keys(seed, &k1, &k2);
    s_u32x4 w = s_weyl(first, k1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4, w += S_WEYL_STEP) {
        uint8_t c[4];
        const s_f32x4 t = (s_load(x + i) - p.min) / p.scale;
        s_codes(c, t + s_noise(w, k2));
        const s_f32x4 v = s_load(y + i) + s_values(c, p);
        memcpy(y + i, &v, sizeof v);
    }
    lp_fake_quant_sr_add_ref(y + i, x + i, n - i, p, seed, (uint32_t)(first + i));
}
