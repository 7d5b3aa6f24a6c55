/* nn_layers_avx2 — AVX2+FMA plane kernels for the norms (see
 * nn_layers_simd.h).  Built with -mavx2 -mfma; called only after a run-time
 * check.  The sigmoid uses an exp built from a Cody-Waite range reduction
 * and a degree-6 polynomial (relative error ~2 ulp; input clamped to
 * [-87.3, 88]); results agree with the scalar expf path to ~1e-6 relative.
 * Tails (n % 8) go through masked loads/stores, so any n works.
 */
#include "nn/nn_layers_simd.h"

#include <immintrin.h>
#include <stdint.h>

static inline __m256i s_tail_mask(size_t rem)
{
    /* lanes [0, rem) active */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem), idx);
}

static inline __m256 s_exp(__m256 x)
{
    const __m256 hi = _mm256_set1_ps(88.0f); /* 2^n stays finite: n <= 127 */
    const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    /* x = n ln2 + r, |r| <= ln2/2 */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* scale by 2^n; n in [-126, 127] after the clamp */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* sigmoid(u) = 1 / (1 + exp(-u)) */
static inline __m256 s_sigmoid(__m256 u)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, s_exp(_mm256_sub_ps(_mm256_setzero_ps(), u))));
}

static inline float s_hsum(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

static inline __m256 s_load(const float *p, size_t rem)
{
    return rem >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, s_tail_mask(rem));
}

static inline void s_store(float *p, __m256 v, size_t rem)
{
    if (rem >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, s_tail_mask(rem), v);
}

float nn_avx2_sum(const float *x, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    }
    for (; i < n; i += 8)
        a0 = _mm256_add_ps(a0, s_load(x + i, n - i));
    return s_hsum(_mm256_add_ps(a0, a1));
}

float nn_avx2_sqdev(const float *x, size_t n, float mean)
{
    const __m256 m = _mm256_set1_ps(mean);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m);
        a0 = _mm256_fmadd_ps(d0, d0, a0);
        a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    for (; i < n; i += 8) {
        size_t rem = n - i;
        /* masked-off lanes load 0; zero their deviation too */
        __m256 d = _mm256_sub_ps(s_load(x + i, rem), m);
        if (rem < 8)
            d = _mm256_and_ps(d, _mm256_castsi256_ps(s_tail_mask(rem)));
        a0 = _mm256_fmadd_ps(d, d, a0);
    }
    return s_hsum(_mm256_add_ps(a0, a1));
}

void nn_avx2_evo_fwd(float *o, const float *x, size_t n, float v, float sc, float bc)
{
    const __m256 vv = _mm256_set1_ps(v), s = _mm256_set1_ps(sc), b = _mm256_set1_ps(bc);
    for (size_t i = 0; i < n; i += 8) {
        size_t rem = n - i;
        __m256 xi = s_load(x + i, rem);
        __m256 num = _mm256_mul_ps(xi, s_sigmoid(_mm256_mul_ps(vv, xi)));
        s_store(o + i, _mm256_fmadd_ps(num, s, b), rem);
    }
}

void nn_avx2_evo_bwd_sums(float sums[4], const float *x, const float *dy, size_t n, float v)
{
    const __m256 vv = _mm256_set1_ps(v), one = _mm256_set1_ps(1.0f);
    __m256 sx = _mm256_setzero_ps(), sdb = _mm256_setzero_ps();
    __m256 sdyn = _mm256_setzero_ps(), sdv = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 8) {
        size_t rem = n - i;
        __m256 xi = s_load(x + i, rem), g = s_load(dy + i, rem); /* 0 in masked lanes */
        __m256 sg = s_sigmoid(_mm256_mul_ps(vv, xi));
        __m256 num = _mm256_mul_ps(xi, sg);
        sx = _mm256_add_ps(sx, xi);
        sdb = _mm256_add_ps(sdb, g);
        sdyn = _mm256_fmadd_ps(g, num, sdyn);
        /* dy * x^2 sg (1-sg) = dy * num * x * (1-sg) */
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(g, num), _mm256_mul_ps(xi, _mm256_sub_ps(one, sg)));
        sdv = _mm256_add_ps(sdv, t);
    }
    sums[0] += s_hsum(sx);
    sums[1] += s_hsum(sdb);
    sums[2] += s_hsum(sdyn);
    sums[3] += s_hsum(sdv);
}

void nn_avx2_evo_bwd_dx(float *dx, const float *x, const float *dy, size_t n, float v, float gi,
                        float k, float mean)
{
    const __m256 vv = _mm256_set1_ps(v), one = _mm256_set1_ps(1.0f), g_i = _mm256_set1_ps(gi);
    const __m256 kk = _mm256_set1_ps(k), m = _mm256_set1_ps(mean);
    for (size_t i = 0; i < n; i += 8) {
        size_t rem = n - i;
        __m256 xi = s_load(x + i, rem), g = s_load(dy + i, rem);
        __m256 vx = _mm256_mul_ps(vv, xi);
        __m256 sg = s_sigmoid(vx);
        /* sg + v x sg (1-sg) = sg * (1 + vx (1-sg)) */
        __m256 dnum = _mm256_mul_ps(sg, _mm256_fmadd_ps(vx, _mm256_sub_ps(one, sg), one));
        __m256 r = _mm256_mul_ps(_mm256_mul_ps(g, g_i), dnum);
        r = _mm256_fmadd_ps(kk, _mm256_sub_ps(xi, m), r);
        s_store(dx + i, r, rem);
    }
}

static inline void s_im2col_row(float *o, const float *row, int off, int n, int lo, int hi)
{
    int i = 0;
    for (; i < lo; i++)
        o[i] = 0.0f;
    for (; i + 8 <= hi; i += 8)
        _mm256_storeu_ps(o + i, _mm256_loadu_ps(row + (i + off)));
    for (; i < hi; i++) /* scalar tail: masked stores are slow on some CPUs */
        o[i] = row[i + off];
    for (; i < n; i++)
        o[i] = 0.0f;
}

void nn_avx2_im2col_plane(float *dst, const float *plane, int W, int OH, int OW, int oh_lo,
                          int oh_hi, int ow_lo, int ow_hi, int hoff, int woff)
{
    for (int oh = 0; oh < oh_lo; oh++)
        s_im2col_row(dst + (size_t)oh * OW, plane, 0, OW, 0, 0);
    for (int oh = oh_lo; oh < oh_hi; oh++)
        s_im2col_row(dst + (size_t)oh * OW, plane + (size_t)(oh + hoff) * W, woff, OW, ow_lo,
                     ow_hi);
    for (int oh = oh_hi; oh < OH; oh++)
        s_im2col_row(dst + (size_t)oh * OW, plane, 0, OW, 0, 0);
}

void nn_avx2_col2im_plane(float *plane, const float *src, int W, int OW, int oh_lo, int oh_hi,
                          int ow_lo, int ow_hi, int hoff, int woff)
{
    for (int oh = oh_lo; oh < oh_hi; oh++) {
        float *y = plane + (size_t)(oh + hoff) * W;
        const float *x = src + (size_t)oh * OW;
        int i = ow_lo;
        for (; i + 8 <= ow_hi; i += 8)
            _mm256_storeu_ps(y + (i + woff),
                             _mm256_add_ps(_mm256_loadu_ps(y + (i + woff)), _mm256_loadu_ps(x + i)));
        for (; i < ow_hi; i++)
            y[i + woff] += x[i];
    }
}

/* The even and odd floats of x[0..16), in order. */
static inline void s_deinterleave(const float *x, __m256 *even, __m256 *odd)
{
    const __m256 lo = _mm256_loadu_ps(x), hi = _mm256_loadu_ps(x + 8);
    /* within 128-bit lanes: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6; the 64-bit
     * permute puts the halves in order */
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* The first n (<= 8) lanes set */
static inline __m256i s_lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 windows at r0, r1 (the first w of them real, 1 <= w <= 8; the rows'
 * floats past 2w neither read nor written): the twin's three strict
 * comparisons in its order (_CMP_GT_OQ is false on NaN, as the twin's >). */
static inline void s_pool8(float *o, uint32_t *am, const float *r0, const float *r1, __m256i idx,
                           __m256i dw, int w)
{
    __m256 a, b, c, d;
    if (w == 8) {
        s_deinterleave(r0, &a, &b);
        s_deinterleave(r1, &c, &d);
    } else {
        const __m256i m0 = s_lanes(2 * w), m1 = s_lanes(2 * w - 8);
        float t0[16], t1[16];
        _mm256_storeu_ps(t0, _mm256_maskload_ps(r0, m0));
        _mm256_storeu_ps(t0 + 8, _mm256_maskload_ps(r0 + 8, m1));
        _mm256_storeu_ps(t1, _mm256_maskload_ps(r1, m0));
        _mm256_storeu_ps(t1 + 8, _mm256_maskload_ps(r1 + 8, m1));
        s_deinterleave(t0, &a, &b);
        s_deinterleave(t1, &c, &d);
    }
    __m256i off = _mm256_setzero_si256();
    __m256 m = _mm256_cmp_ps(b, a, _CMP_GT_OQ);
    __m256 bv = _mm256_blendv_ps(a, b, m);
    off = _mm256_blendv_epi8(off, _mm256_set1_epi32(1), _mm256_castps_si256(m));
    m = _mm256_cmp_ps(c, bv, _CMP_GT_OQ);
    bv = _mm256_blendv_ps(bv, c, m);
    off = _mm256_blendv_epi8(off, dw, _mm256_castps_si256(m));
    m = _mm256_cmp_ps(d, bv, _CMP_GT_OQ);
    bv = _mm256_blendv_ps(bv, d, m);
    off = _mm256_blendv_epi8(off, _mm256_add_epi32(dw, _mm256_set1_epi32(1)),
                             _mm256_castps_si256(m));
    const __m256i at = _mm256_add_epi32(idx, off);
    if (w == 8) {
        _mm256_storeu_ps(o, bv);
        _mm256_storeu_si256((__m256i *)am, at);
        return;
    }
    const __m256i mw = s_lanes(w);
    _mm256_maskstore_ps(o, mw, bv);
    _mm256_maskstore_epi32((int *)am, mw, at);
}

/* 8 windows a step, the last (1..7) windows of a row masked */
void nn_avx2_maxpool2_row(float *o, uint32_t *am, const float *r0, const float *r1,
                          uint32_t base, uint32_t W, size_t ow)
{
    const __m256i step = _mm256_set1_epi32(16), dw = _mm256_set1_epi32((int)W);
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)base),
                                   _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    size_t k = 0;
    for (; k + 8 <= ow; k += 8, idx = _mm256_add_epi32(idx, step))
        s_pool8(o + k, am + k, r0 + 2 * k, r1 + 2 * k, idx, dw, 8);
    if (k < ow)
        s_pool8(o + k, am + k, r0 + 2 * k, r1 + 2 * k, idx, dw, (int)(ow - k));
}
