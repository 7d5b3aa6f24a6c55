/* test_lowprec_ren — the 8-bit Range EvoNorm (lowprec/lp_layers.h) and its
 * row and chunk kernels.
 *
 * - Range EvoNorm: chunk arithmetic for T not divisible by 16; the
 *   quantizer-free core's backward against central finite differences of an
 *   independent double-precision forward; with quantizers on, forward and
 *   backward equal the core applied to the quantized inputs (straight-
 *   through estimator), bit for bit; a group clamped to one code stays
 *   within a bounded factor of the float layer.
 * - the row kernels, the chunk arg-max/min search and the code-range
 *   kernels of every level against their scalar twins: tails, edge values,
 *   floats of every exponent. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lowprec/lp_kern.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_cpu.h"
#include "nn/nn_core.h"
#include "tests/tk_lp.h"

static void test_ren_chunks(void **state)
{
    (void)state;
    const int Ts[] = {16, 32, 48, 392, 100, 1023, 17};
    for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) {
        int T = Ts[t], next = 0, lmin = 1 << 30, lmax = 0;
        for (int j = 0; j < 16; j++) {
            int st, len;
            lp_ren_chunk(T, j, &st, &len);
            assert_int_equal(st, next); /* contiguous, in order */
            next = st + len;
            lmin = len < lmin ? len : lmin;
            lmax = len > lmax ? len : lmax;
            if (j > 0 && j <= T % 16 - 1)
                assert_true(len == T / 16 + 1); /* the first T%16 are longer */
        }
        assert_int_equal(next, T);
        assert_true(lmax - lmin <= 1);
    }
    int st, len;
    lp_ren_chunk(392, 7, &st, &len); /* 392 = 16*24 + 8 */
    assert_int_equal(st, 7 * 25);
    assert_int_equal(len, 25);
    lp_ren_chunk(392, 8, &st, &len);
    assert_int_equal(st, 8 * 25);
    assert_int_equal(len, 24);
}

/* Independent double-precision Range EvoNorm without quantizers; returns
 * the loss sum(out * r). */
static double s_ren_loss(const double *x, const double *gam, const double *bet, const double *v,
                         const float *r, int N, int C, int HW, int G)
{
    int cg = C / G, T = cg * HW;
    double L = T / 16.0, c = 0.5 * 0.35 * (1 + sqrt(M_PI * log(4.0))) / sqrt(2 * log(L));
    double loss = 0;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const double *xg = x + ((size_t)n * C + (size_t)g * cg) * HW;
            double smx = 0, smn = 0;
            int pos = 0;
            for (int j = 0; j < 16; j++) {
                int len = T / 16 + (j < T % 16);
                double mx = xg[pos], mn = xg[pos];
                for (int i = pos; i < pos + len; i++) {
                    mx = fmax(mx, xg[i]);
                    mn = fmin(mn, xg[i]);
                }
                smx += mx;
                smn += mn;
                pos += len;
            }
            double s = 1.0 / ((smx / 16 - smn / 16) * c + 1e-5);
            for (int ch = g * cg; ch < (g + 1) * cg; ch++)
                for (int i = 0; i < HW; i++) {
                    size_t k = ((size_t)n * C + ch) * HW + i;
                    double h = fmin(fmax(x[k] * v[ch] / 6 + 0.5, 0), 1);
                    loss += (x[k] * h * s * gam[ch] + bet[ch]) * r[k];
                }
        }
    return loss;
}

static void s_ren_fd_case(void)
{
    const int N = 2, C = 8, HW = 10, G = 2; /* T = 40: chunks of 3 and 2 */
    const size_t n = (size_t)N * C * HW;
    nn_rng r;
    nn_rng_seed(&r, 21);
    float x[160], rr[160], gam[8], bet[8], v[8], out[160], s[4], sq[4];
    float dx[160], dgam[8] = {0}, dbet[8] = {0}, dv[8] = {0};
    tk_lp_uniform(&r, gam, C, 0.5f, 1.5f);
    tk_lp_uniform(&r, bet, C, -0.5f, 0.5f);
    tk_lp_uniform(&r, v, C, 0.5f, 2.0f);
    for (size_t i = 0; i < n; i++) {
        int ch = (int)(i / HW) % C;
        do /* stay away from the hardsigmoid kinks |v x| = 3 */
            x[i] = 4.0f * nn_rng_normal(&r);
        while (fabsf(fabsf(v[ch] * x[i]) - 3.0f) < 0.05f);
    }
    tk_lp_uniform(&r, rr, n, -1, 1);
    lp_ren_core_forward(out, s, sq, x, gam, bet, v, N, C, HW, G, 0);
    lp_ren_core_backward(dx, dgam, dbet, dv, rr, x, s, sq, gam, v, N, C, HW, G);
    double xd[160], gd[8], bd[8], vd[8];
    for (size_t i = 0; i < n; i++)
        xd[i] = x[i];
    for (int c = 0; c < C; c++) {
        gd[c] = gam[c];
        bd[c] = bet[c];
        vd[c] = v[c];
    }
    const double h = 1e-5;
    double *vars[4] = {xd, gd, bd, vd};
    const float *an[4] = {dx, dgam, dbet, dv};
    const size_t cnt[4] = {n, (size_t)C, (size_t)C, (size_t)C};
    const char *names[4] = {"dx", "dgamma", "dbeta", "dv"};
    int nonzero_range_grads = 0;
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < cnt[k]; i++) {
            double keep = vars[k][i];
            vars[k][i] = keep + h;
            double lp = s_ren_loss(xd, gd, bd, vd, rr, N, C, HW, G);
            vars[k][i] = keep - h;
            double lm = s_ren_loss(xd, gd, bd, vd, rr, N, C, HW, G);
            vars[k][i] = keep;
            double fd = (lp - lm) / (2 * h);
            if (fabs(an[k][i] - fd) > 2e-3 * fabs(fd) + 2e-4)
                fail_msg("%s[%zu]: analytic %.7g, finite difference %.7g", names[k], i,
                         an[k][i], fd);
            if (k == 0 && fabs(fd) > 1e-3)
                nonzero_range_grads++;
        }
    assert_true(nonzero_range_grads > 20);
}

/* With quantizers on: forward = core(deq(xq), Q(params), quant_s = 1) and
 * backward = core backward with deq(SR(dout)): the straight-through
 * estimator, bit for bit. */
/* at every CPU level (the core dispatches its row kernels) */
static void test_ren_finite_differences(void **state)
{
    (void)state;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++)
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) == 0)
            s_ren_fd_case();
    nn_cpu_force("auto");
}

/* The row kernels of every level against their scalar twins: forward and dx
 * bit for bit, backward sums to 1e-6 relative (float blocks of 64 vs
 * double); the ARM levels' sums are the portable level's bit for bit (the
 * same 4-lane order), over tails (n around multiples of 8 and 64) and
 * values on both sides of the hardsigmoid's ends. */
static void s_ren_rows(const lp_kern_t *kt)
{
    nn_rng r;
    nn_rng_seed(&r, 23);
    static const size_t ns[] = {1, 7, 8, 9, 63, 64, 65, 200, 1024};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const size_t n = ns[k];
        float *x = nn_xmalloc(n * 4), *g = nn_xmalloc(n * 4);
        float *o1 = nn_xmalloc(n * 4), *o2 = nn_xmalloc(n * 4);
        tk_lp_uniform(&r, x, n, -6.0f, 6.0f);
        tk_lp_uniform(&r, g, n, -0.1f, 0.1f);
        const float v = 1.3f, sc = 0.77f, gam = -1.1f, bet = 0.2f;
        lp_ren_row_fwd_ref(o1, x, n, v, sc, gam, bet);
        kt->ren_row_fwd(o2, x, n, v, sc, gam, bet);
        assert_memory_equal(o1, o2, n * 4);
        double s1[3] = {0.5, 0.5, 0.5}, s2[3] = {0.5, 0.5, 0.5};
        lp_ren_row_bwd_ref(o1, s1, x, g, n, v, sc, gam);
        kt->ren_row_bwd(o2, s2, x, g, n, v, sc, gam);
        assert_memory_equal(o1, o2, n * 4);
#if defined(__aarch64__)
        if (kt->ren_row_bwd != lp_ren_row_bwd_ref) {
            double s3[3] = {0.5, 0.5, 0.5};
            lp_ren_row_bwd_blk(NULL, s3, x, g, n, v, sc, gam);
            assert_memory_equal(s2, s3, sizeof s3);
        }
#endif
        double mag[3] = {0, 0, 0};
        for (size_t i = 0; i < n; i++) {
            mag[0] += fabs(g[i]);
            mag[1] += fabs(g[i] * x[i]);
            mag[2] += fabs(g[i] * sc * gam * x[i] * x[i]);
        }
        for (int q = 0; q < 3; q++)
            assert_true(fabs(s1[q] - s2[q]) <= 1e-6 * mag[q] + 1e-12);
        free(x); free(g); free(o1); free(o2);
    }
}

static void test_ren_rows(void **state)
{
    (void)state;
    tk_lp_each_level(s_ren_rows);
}

/* The row kernels at the edges: the hardsigmoid's ends exactly (t = 0 and
 * t = 1), NaN, infinities, zeros of both signs and huge values in every
 * lane position: forward and dx the twins' bits at every level. */
static void s_ren_row_edges(const lp_kern_t *kt)
{
    const float e[] = {3.0f, -3.0f, NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3e38f, -3e38f,
                       1e-40f, 2.9999998f, -2.9999998f, 0.5f, -1.25f};
    enum { NE = sizeof e / sizeof e[0], N = 256 + 64 + 13 };
    float x[N], g[N], o1[N], o2[N];
    for (size_t i = 0; i < N; i++) {
        x[i] = e[(i * 5 + i / NE) % NE];
        g[i] = (float)((int)(i % 9) - 4) * 0.03125f;
    }
    const float v = 1.0f, sc = 0.77f, gam = -1.1f, bet = 0.2f;
    lp_ren_row_fwd_ref(o1, x, N, v, sc, gam, bet);
    kt->ren_row_fwd(o2, x, N, v, sc, gam, bet);
    assert_memory_equal(o1, o2, sizeof o1);
    double s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0};
    lp_ren_row_bwd_ref(o1, s1, x, g, N, v, sc, gam);
    kt->ren_row_bwd(o2, s2, x, g, N, v, sc, gam);
    assert_memory_equal(o1, o2, sizeof o1);
}

static void test_ren_row_edges(void **state)
{
    (void)state;
    tk_lp_each_level(s_ren_row_edges);
}

/* The rows over floats of every exponent and sign: 2^32 / 4099 bit patterns
 * (all finite magnitudes, subnormals, infinities, NaNs) as x, with v = 1 and
 * v = 1.3: forward and dx the twins' bits at every level (the ARM rows
 * divide by 6 without a divide). */
static void s_ren_row_sweep(const lp_kern_t *kt)
{
    enum { N = 4096 };
    float *x = nn_xmalloc(N * 4), *g = nn_xmalloc(N * 4);
    float *o1 = nn_xmalloc(N * 4), *o2 = nn_xmalloc(N * 4);
    uint32_t bits = 7;
    for (int round = 0; round < 256; round++) {
        for (size_t i = 0; i < N; i++, bits += 4099u) {
            memcpy(&x[i], &bits, 4);
            g[i] = (float)((int)(i % 7) - 3) * 0.25f;
        }
        const float v = round % 2 ? 1.3f : 1.0f;
        lp_ren_row_fwd_ref(o1, x, N, v, 0.77f, -1.1f, 0.2f);
        kt->ren_row_fwd(o2, x, N, v, 0.77f, -1.1f, 0.2f);
        assert_memory_equal(o1, o2, N * 4);
        double s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0};
        lp_ren_row_bwd_ref(o1, s1, x, g, N, v, 0.77f, -1.1f);
        kt->ren_row_bwd(o2, s2, x, g, N, v, 0.77f, -1.1f);
        assert_memory_equal(o1, o2, N * 4);
    }
    free(x); free(g); free(o1); free(o2);
}

static void test_ren_row_sweep(void **state)
{
    (void)state;
    tk_lp_each_level(s_ren_row_sweep);
}

/* The first-index search of the chunk arg-max/min: every level's against its twin
 * on every position of the first match, repeated values and no match. */
static void s_find_eq(const lp_kern_t *kt)
{
    float x[70];
    for (size_t n = 0; n <= 70; n++)
        for (size_t at = 0; at <= n; at++) {
            for (size_t i = 0; i < n; i++)
                x[i] = (float)(i % 5);
            for (size_t i = at; i < n; i++)
                x[i] = i % 2 ? 9.0f : x[i]; /* 9 first at the first odd i >= at */
            assert_int_equal(kt->find_eq(x, n, 9.0f), lp_find_eq_ref(x, n, 9.0f));
            assert_int_equal(kt->find_eq(x, n, 3.0f), lp_find_eq_ref(x, n, 3.0f));
            assert_int_equal(kt->find_eq(x, n, -1.0f), n);
        }
}

static void test_find_eq(void **state)
{
    (void)state;
    tk_lp_each_level(s_find_eq);
}

/* The code kernels of the chunk ranges: every level's against the twins on every
 * length around the 32-byte blocks and every position of the extremes /
 * of the first match, with repeated values and no match. */
static void s_u8_chunk_kernels(const lp_kern_t *kt)
{
    uint8_t q[100];
    for (size_t n = 1; n <= 100; n++)
        for (size_t at = 0; at < n; at++) {
            for (size_t i = 0; i < n; i++)
                q[i] = (uint8_t)(100 + i % 7);
            q[at] = 250;
            q[n - 1 - at] = 3;
            uint8_t a0, b0, a1, b1;
            lp_minmax_u8_ref(&a0, &b0, q, n);
            kt->minmax_u8(&a1, &b1, q, n);
            assert_true(a0 == a1 && b0 == b1);
            assert_int_equal(a0, 3);
            if (n - 1 - at != at)
                assert_int_equal(b0, 250);
            const uint8_t lo[4] = {250, 0, 104, 200}, hi[4] = {255, 3, 105, 220};
            for (int k = 0; k < 4; k++) {
                size_t r = lp_find_u8_ref(q, n, lo[k], hi[k]);
                assert_int_equal(kt->find_u8(q, n, lo[k], hi[k]), r);
                for (size_t i = 0; i < r; i++)
                    assert_true(q[i] < lo[k] || q[i] > hi[k]);
            }
            assert_int_equal(kt->find_u8(q, n, 200, 220), n);
        }
}

static void test_u8_chunk_kernels(void **state)
{
    (void)state;
    tk_lp_each_level(s_u8_chunk_kernels);
}

/* The integer Range EvoNorm (chunk ranges from the codes) against the
 * float core on the fake-quantized values, bit for bit, at the level
 * given; [lo, hi): the input's range (a narrow one far from 0 maps several
 * codes to one float, where the first arg-max is the first of the codes
 * with the maximum's value). */
static void s_ren_ste_case(const char *level, float lo, float hi)
{
    assert_int_equal(nn_cpu_force(level), 0);
    const int N = 3, C = 16, HW = 49, G = 8; /* T = 98: not divisible by 16 */
    const size_t n = (size_t)N * C * HW;
    nn_rng r;
    nn_rng_seed(&r, 22);
    float *x = nn_xmalloc(n * 4), *g = nn_xmalloc(n * 4), *o1 = nn_xmalloc(n * 4),
          *o2 = nn_xmalloc(n * 4), *dx1 = nn_xmalloc(n * 4), *dx2 = nn_xmalloc(n * 4);
    float *xf = nn_xmalloc(n * 4), *gf = nn_xmalloc(n * 4);
    float gam[16], bet[16], v[16], gq[16], bq[16], vq[16];
    float dg1[16] = {0}, db1[16] = {0}, dv1[16] = {0}, dg2[16] = {0}, db2[16] = {0},
          dv2[16] = {0};
    float s2[24], sq2[24];
    tk_lp_uniform(&r, x, n, lo, hi);
    tk_lp_uniform(&r, g, n, -0.01f, 0.01f);
    tk_lp_uniform(&r, gam, C, 0.5f, 1.5f);
    tk_lp_uniform(&r, bet, C, -0.2f, 0.2f);
    tk_lp_uniform(&r, v, C, 0.8f, 1.2f);
    uint8_t *saved = nn_xmalloc(lp_ren_saved_bytes(N, C, HW, G));
    lp_ren_saved sv = {saved, {0, 0}, (float *)(void *)(saved + n), NULL};
    sv.sq = sv.s + N * G;
    float *scratch = nn_xmalloc(lp_ren_scratch_floats(N, C, HW) * 4);
    float run[2] = {0, 0};
    lp_mode mode = {1, 31};
    lp_range_evonorm_forward(o1, &sv, run, x, gam, bet, v, N, C, HW, G, mode, scratch);
    lp_range_evonorm_backward(dx1, dg1, db1, dv1, g, &sv, gam, v, N, C, HW, G, 32, scratch);
    /* the same by hand */
    lp_qparams xp;
    lp_batch_range(&xp.min, &xp.scale, x, N, (size_t)C * HW);
    xp = lp_qparams_from_range(xp.min, xp.scale);
    assert_true(xp.min == sv.xp.min && xp.scale == sv.xp.scale);
    lp_fake_quant(xf, x, n, xp, 1, 31);
    lp_fake_quant(gq, gam, C, lp_tensor_qparams(gam, C), 0, 0);
    lp_fake_quant(bq, bet, C, lp_tensor_qparams(bet, C), 0, 0);
    lp_fake_quant(vq, v, C, lp_tensor_qparams(v, C), 0, 0);
    lp_ren_core_forward(o2, s2, sq2, xf, gq, bq, vq, N, C, HW, G, 1);
    assert_memory_equal(o1, o2, n * 4);
    assert_memory_equal(sv.sq, sq2, sizeof sq2);
    /* s really is quantized: at most 256 levels, values moved */
    int moved = 0;
    for (int i = 0; i < N * G; i++)
        moved += s2[i] != sq2[i];
    assert_true(moved > 0 || hi - lo < 0.01f);
    lp_fake_quant(gf, g, n, lp_tensor_qparams(g, n), 1, 32);
    lp_ren_core_backward(dx2, dg2, db2, dv2, gf, xf, s2, sq2, gq, vq, N, C, HW, G);
    assert_memory_equal(dx1, dx2, n * 4);
    assert_memory_equal(dg1, dg2, sizeof dg1);
    assert_memory_equal(db1, db2, sizeof db1);
    assert_memory_equal(dv1, dv2, sizeof dv1);
    free(x); free(g); free(o1); free(o2); free(dx1); free(dx2); free(xf); free(gf);
    free(saved); free(scratch);
    nn_cpu_force("auto");
}

static void test_ren_quantized_is_ste(void **state)
{
    (void)state;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        const char *name = nn_cpu_name((nn_cpu_t)lv);
        if (nn_cpu_force(name) != 0)
            continue;
        s_ren_ste_case(name, -2, 3);
        s_ren_ste_case(name, 1000.0f, 1000.002f); /* 16 codes per float */
    }
    nn_cpu_force("auto");
}

static float s_maxabs(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(isfinite(x[i]));
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    }
    return m;
}

/* The int8 blow-up: one sample's group lies above the batch's mean
 * per-sample maximum, so all its values are clamped to code 255 and its
 * range R was 0: s = 1/1e-5 = 1e5, an output 1e5 times the input and an
 * input gradient ~1e9 larger than the float layer's.  R is floored at
 * qstep/(c sqrt 12) (lp_layers.h): s <= sqrt(12)/qstep, the output's gain
 * is bounded by it, and output and gradients stay within a bounded factor
 * of the float Range EvoNorm on the unquantized input (max |out|, |din|,
 * |dgamma|: measured 14x, 10x, 15x, bound 20x; the clamp itself loses the
 * group's true range of 1.0; the old code: 1.0e4x, 7600x, 1.1e4x).  The
 * integer layer and the fake-quant core with the floor agree bit for bit. */
static void test_ren_degenerate_group(void **state)
{
    (void)state;
    const int N = 4, C = 16, HW = 49, G = 8, cg = C / G;
    const size_t n = (size_t)N * C * HW;
    nn_rng r;
    nn_rng_seed(&r, 24);
    float *x = nn_xmalloc(n * 4), *g = nn_xmalloc(n * 4), *o1 = nn_xmalloc(n * 4),
          *o2 = nn_xmalloc(n * 4), *dx1 = nn_xmalloc(n * 4), *dx2 = nn_xmalloc(n * 4),
          *oref = nn_xmalloc(n * 4), *dxref = nn_xmalloc(n * 4), *xf = nn_xmalloc(n * 4),
          *gf = nn_xmalloc(n * 4);
    float gam[16], bet[16], v[16], gq[16], bq[16], vq[16], s2[32], sq2[32], sr[32], sqr[32];
    float dg[3][16] = {{0}}, db[3][16] = {{0}}, dv[3][16] = {{0}};
    tk_lp_uniform(&r, x, n, -2, 3);
    tk_lp_uniform(&r, x, (size_t)cg * HW, 8, 9); /* sample 0, group 0: above every code */
    tk_lp_uniform(&r, g, n, -0.01f, 0.01f);
    tk_lp_uniform(&r, gam, C, 0.5f, 1.5f);
    tk_lp_uniform(&r, bet, C, -0.2f, 0.2f);
    tk_lp_uniform(&r, v, C, 0.8f, 1.2f);
    uint8_t *saved = nn_xmalloc(lp_ren_saved_bytes(N, C, HW, G));
    lp_ren_saved sv = {saved, {0, 0}, (float *)(void *)(saved + n), NULL};
    sv.sq = sv.s + N * G;
    float *scratch = nn_xmalloc(lp_ren_scratch_floats(N, C, HW) * 4);
    float run[2] = {0, 0};
    lp_mode mode = {1, 41};
    lp_range_evonorm_forward(o1, &sv, run, x, gam, bet, v, N, C, HW, G, mode, scratch);
    lp_range_evonorm_backward(dx1, dg[0], db[0], dv[0], g, &sv, gam, v, N, C, HW, G, 42,
                              scratch);
    const float qstep = sv.xp.scale, cap = 3.4641016f / qstep;
    for (int i = 0; i < cg * HW; i++) /* the case: the whole group on code 255 */
        assert_int_equal(sv.xq[i], 255);
    assert_true(sv.s[0] <= cap && sv.s[0] > 0.9f * cap); /* floored (old: 1e5) */
    for (int i = 1; i < N * G; i++)
        assert_true(sv.s[i] < 0.2f * cap); /* the others are far from the floor */
    /* gain bound: |out - beta| <= |gamma| |x| s, s <= cap (sq: 1% for Q(s)) */
    float xmax = fabsf(sv.xp.min) + 255 * qstep;
    assert_true(s_maxabs(o1, n) <= 0.2f + 1.5f * xmax * cap * 1.01f);
    /* the float layer on the unquantized input */
    lp_ren_core_forward(oref, sr, sqr, x, gam, bet, v, N, C, HW, G, 0);
    lp_ren_core_backward(dxref, dg[2], db[2], dv[2], g, x, sr, sqr, gam, v, N, C, HW, G);
    float om = s_maxabs(o1, n), omr = s_maxabs(oref, n);
    float dm = s_maxabs(dx1, n), dmr = s_maxabs(dxref, n);
    float gm = s_maxabs(dg[0], 16), gmr = s_maxabs(dg[2], 16);
    print_message("degenerate group: max|out| %g (float %g), max|din| %g (float %g), "
                  "max|dgamma| %g (float %g), s %g (cap %g)\n", om, omr, dm, dmr, gm, gmr,
                  sv.s[0], cap);
    assert_true(om <= 20 * omr && dm <= 20 * dmr && gm <= 20 * gmr);
    /* the fake-quant core with the floor: bit for bit */
    lp_fake_quant(xf, x, n, sv.xp, 1, 41);
    lp_fake_quant(gq, gam, C, lp_tensor_qparams(gam, C), 0, 0);
    lp_fake_quant(bq, bet, C, lp_tensor_qparams(bet, C), 0, 0);
    lp_fake_quant(vq, v, C, lp_tensor_qparams(v, C), 0, 0);
    lp_ren_core_forward_q(o2, s2, sq2, xf, gq, bq, vq, N, C, HW, G, 1, qstep);
    assert_memory_equal(o1, o2, n * 4);
    lp_fake_quant(gf, g, n, lp_tensor_qparams(g, n), 1, 42);
    lp_ren_core_backward_q(dx2, dg[1], db[1], dv[1], gf, xf, s2, sq2, gq, vq, N, C, HW, G, qstep);
    assert_memory_equal(dx1, dx2, n * 4);
    assert_memory_equal(dg[0], dg[1], sizeof dg[0]);
    assert_memory_equal(dv[0], dv[1], sizeof dv[0]);
    /* the case is real: the core without the floor (the old layer, bit for
     * bit) on the same codes gives s = 1e5 and ~1e4 times the float output */
    lp_ren_core_forward(o2, s2, sq2, xf, gq, bq, vq, N, C, HW, G, 1);
    assert_true(s2[0] > 0.99e5f && s_maxabs(o2, n) > 1000 * omr);
    free(x); free(g); free(o1); free(o2); free(dx1); free(dx2); free(oref); free(dxref);
    free(xf); free(gf); free(saved); free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ren_chunks),
        cmocka_unit_test(test_ren_finite_differences),
        cmocka_unit_test(test_ren_rows),
        cmocka_unit_test(test_ren_row_edges),
        cmocka_unit_test(test_ren_row_sweep),
        cmocka_unit_test(test_find_eq),
        cmocka_unit_test(test_u8_chunk_kernels),
        cmocka_unit_test(test_ren_quantized_is_ste),
        cmocka_unit_test(test_ren_degenerate_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
