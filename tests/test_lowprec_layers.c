/* test_lowprec_layers — 8-bit layer kernels (lowprec/lp_layers.h).
 *
 * - conv2d / linear: the integer forward and input gradient equal the
 *   fake-quant float path (same codes, plain FP32 loops) to float rounding:
 *   |int - fq| <= 1e-5*max|fq| + 1e-5*|fq|; weight/bias gradients (FP32 sgemm
 *   on dequantized codes vs plain loops) likewise; train and eval modes;
 *   padded borders, strides, 1x1 kernels, sizes not multiples of 4/16; at
 *   every CPU level and through both conv paths (shift, im2col), whose
 *   forwards agree bit for bit; with FP32 and with bf16 weight gradients
 *   (lp_bf16.h), the bf16 ones also against the exact gradient.
 * - Range EvoNorm: chunk arithmetic for T not divisible by 16; the
 *   quantizer-free core's backward against central finite differences of an
 *   independent double-precision forward; with quantizers on, forward and
 *   backward equal the core applied to the quantized inputs (straight-
 *   through estimator), bit for bit.
 * - residual add against its fake-quant definition. */
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
#include "lowprec/lp_bf16.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_cpu.h"
#include "nn/nn_core.h"

static void s_fill(nn_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * nn_rng_uniform(r);
}

static void s_close(const float *got, const float *ref, size_t n, const char *what)
{
    float mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmaxf(mx, fabsf(ref[i]));
    for (size_t i = 0; i < n; i++) {
        float tol = 1e-5f * mx + 1e-5f * fabsf(ref[i]);
        if (!(fabsf(got[i] - ref[i]) <= tol))
            fail_msg("%s[%zu]: got %.9g, fake-quant %.9g (tol %.3g)", what, i, got[i], ref[i],
                     tol);
    }
}

static void s_conv_case(int N, int C, int H, int W, int OC, int K, int stride, int pad, int bias,
                        int train)
{
    nn_rng r;
    nn_rng_seed(&r, (uint64_t)(N * 1000 + C * 100 + H + K + stride + train));
    nn_conv_dims d = nn_conv_dims_make(N, C, H, W, OC, K, stride, pad);
    size_t xn = (size_t)N * C * H * W, wn = (size_t)OC * C * K * K,
           on = (size_t)N * OC * d.OH * d.OW;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *b = nn_xmalloc((size_t)OC * 4);
    float *o1 = nn_xmalloc(on * 4), *o2 = nn_xmalloc(on * 4), *g = nn_xmalloc(on * 4);
    float *dx1 = nn_xmalloc(xn * 4), *dx2 = nn_xmalloc(xn * 4);
    float *dw1 = nn_xcalloc(wn, 4), *dw2 = nn_xcalloc(wn, 4);
    float *db1 = nn_xcalloc((size_t)OC, 4), *db2 = nn_xcalloc((size_t)OC, 4);
    s_fill(&r, x, xn, -1.5f, 2.0f);
    s_fill(&r, w, wn, -0.4f, 0.3f);
    s_fill(&r, b, (size_t)OC, -0.2f, 0.2f);
    s_fill(&r, g, on, -0.01f, 0.02f);
    uint8_t *saved = nn_xmalloc(lp_conv2d_saved_bytes(&d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_conv2d_scratch_bytes(&d));
    float *fqs = nn_xmalloc(lp_conv2d_fq_scratch_floats(&d) * 4);
    float run1[2] = {-1.0f, 1.0f}, run2[2] = {-1.0f, 1.0f};
    lp_mode mode = {train, 777};
    lp_conv2d_forward(o1, &sv, run1, x, w, bias ? b : NULL, &d, mode, scratch);
    lp_conv2d_forward_fq(o2, run2, x, w, bias ? b : NULL, &d, mode, fqs);
    assert_true(run1[0] == run2[0] && run1[1] == run2[1]);
    if (train)
        assert_true(run1[0] != -1.0f);
    s_close(o1, o2, on, "conv out");
    lp_conv2d_backward(dx1, dw1, bias ? db1 : NULL, g, &sv, &d, 4242, scratch);
    lp_conv2d_backward_fq(dx2, dw2, bias ? db2 : NULL, g, x, sv.xp, w, &d, mode, 4242, fqs);
    s_close(dx1, dx2, xn, "conv din");
    s_close(dw1, dw2, wn, "conv dw");
    if (bias)
        s_close(db1, db2, (size_t)OC, "conv db");
    /* adding in place: the bits of the gradient added to what din held */
    if (lp_conv2d_din_adds(&d)) {
        float *base = nn_xmalloc(xn * 4);
        s_fill(&r, base, xn, -0.05f, 0.05f);
        memcpy(dx2, base, xn * 4);
        lp_conv2d_backward_add(dx2, NULL, NULL, g, &sv, &d, 4242, scratch);
        for (size_t i = 0; i < xn; i++)
            if (memcmp(&dx2[i], &(float){base[i] + dx1[i]}, 4) != 0)
                fail_msg("conv din added at %zu: %.9g, not %.9g + %.9g", i, dx2[i], base[i],
                         dx1[i]);
        free(base);
    }
    /* a different gradient seed changes din (the quantizer is really used) */
    lp_conv2d_backward(dx2, NULL, NULL, g, &sv, &d, 4243, scratch);
    assert_true(memcmp(dx1, dx2, xn * 4) != 0);
    free(x); free(w); free(b); free(o1); free(o2); free(g); free(dx1); free(dx2);
    free(dw1); free(dw2); free(db1); free(db2); free(saved); free(scratch); free(fqs);
}

/* Every CPU level, and the stride-1 "same" convs both through the shift
 * path and through the im2col path. */
static void test_conv_matches_fake_quant(void **state)
{
    (void)state;
    char err[256];
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        for (int wg = 0; wg < 4; wg++) {
            const int im2col = wg & 1;
            /* weight gradients in FP32, and in bf16 where the CPU has it
             * (the fake-quant twin then rounds its dout to bf16 too) */
            if (lp_wgrad_set(wg < 2 ? LP_WGRAD_FP32 : LP_WGRAD_BF16, err, sizeof err) != 0)
                continue;
            lp_conv2d_force_im2col(im2col);
            s_conv_case(3, 5, 7, 6, 9, 3, 1, 1, 1, 1);
            s_conv_case(2, 4, 9, 9, 8, 3, 2, 1, 0, 1);
            s_conv_case(2, 6, 8, 8, 17, 1, 2, 0, 0, 1);
            s_conv_case(2, 3, 5, 5, 4, 3, 1, 0, 1, 0); /* eval */
            s_conv_case(1, 16, 8, 8, 16, 3, 1, 1, 0, 1);
            s_conv_case(2, 1, 28, 28, 16, 3, 1, 1, 0, 1);
            s_conv_case(3, 7, 5, 9, 5, 5, 1, 2, 1, 1);  /* 5x5 same, odd channels */
            s_conv_case(2, 3, 1, 1, 6, 3, 1, 1, 1, 1);  /* 1x1 image: centre tap only */
            s_conv_case(13, 4, 4, 4, 3, 3, 1, 1, 0, 1); /* several chunks of samples */
            s_conv_case(17, 16, 32, 32, 4, 3, 1, 1, 1, 1); /* two weight-gradient chunks */
        }
    }
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
    lp_conv2d_force_im2col(0);
    nn_cpu_force("auto");
}

/* The bf16 weight gradient against the exact one (double, on the same
 * dequantized codes and the full-precision dout): only dout is rounded, so
 * |dw - exact| <= 2^-8 * sum |g x| per entry (2^-9 from the rounding, the
 * rest for FP32 sums); the FP32 path is within 1e-5 of it, and the two
 * differ (bf16 is really used).  Shifted grids (stride-1 same convs) and
 * the im2col of the codes (strided, 1x1). */
static void s_wgrad_case(int N, int C, int H, int W, int OC, int K, int stride, int pad)
{
    char err[256];
    nn_rng r;
    nn_rng_seed(&r, (uint64_t)(24 + N + C + K + stride));
    nn_conv_dims d = nn_conv_dims_make(N, C, H, W, OC, K, stride, pad);
    const int T = K * K, CK = C * T, P = H * W, OP = d.OH * d.OW;
    size_t xn = (size_t)N * C * P, wn = (size_t)OC * CK, on = (size_t)N * OC * OP;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *o = nn_xmalloc(on * 4);
    float *g = nn_xmalloc(on * 4), *dwb = nn_xcalloc(wn, 4), *dwf = nn_xcalloc(wn, 4);
    float *xd = nn_xmalloc(xn * 4);
    s_fill(&r, x, xn, -1.2f, 2.0f);
    s_fill(&r, w, wn, -0.4f, 0.4f);
    s_fill(&r, g, on, -0.03f, 0.02f);
    uint8_t *saved = nn_xmalloc(lp_conv2d_saved_bytes(&d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_conv2d_scratch_bytes(&d));
    float run[2] = {0, 0};
    lp_conv2d_forward(o, &sv, run, x, w, NULL, &d, (lp_mode){1, 5}, scratch);
    lp_dequantize(xd, sv.xq, xn, sv.xp);
    assert_int_equal(lp_wgrad_set(LP_WGRAD_BF16, err, sizeof err), 0);
    lp_conv2d_backward(NULL, dwb, NULL, g, &sv, &d, 6, scratch);
    assert_int_equal(lp_wgrad_set(LP_WGRAD_FP32, err, sizeof err), 0);
    lp_conv2d_backward(NULL, dwf, NULL, g, &sv, &d, 6, scratch);
    lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
    int differ = 0;
    for (int oc = 0; oc < OC; oc++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) {
                const int kh = t / K, kw = t % K;
                double e = 0, mag = 0;
                for (int n = 0; n < N; n++)
                    for (int oh = 0; oh < d.OH; oh++)
                        for (int ow = 0; ow < d.OW; ow++) {
                            int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            double gv = g[((size_t)n * OC + oc) * OP + (size_t)oh * d.OW + ow];
                            double xv = xd[((size_t)n * C + c) * P + (size_t)ih * W + iw];
                            e += gv * xv;
                            mag += fabs(gv * xv);
                        }
                const size_t i = (size_t)oc * CK + (size_t)c * T + t;
                if (!(fabs(dwb[i] - e) <= ldexp(mag, -8)))
                    fail_msg("K=%d s=%d: bf16 dw[%zu] = %.9g, exact %.9g (budget %.3g)", K, stride,
                             i, dwb[i], e, ldexp(mag, -8));
                if (!(fabs(dwf[i] - e) <= 1e-5 * mag))
                    fail_msg("K=%d s=%d: fp32 dw[%zu] = %.9g, exact %.9g", K, stride, i, dwf[i], e);
                differ += dwb[i] != dwf[i];
            }
    assert_true(differ > 0);
    free(x); free(w); free(o); free(g); free(dwb); free(dwf); free(xd); free(saved); free(scratch);
}

/* ... with vdpbf16ps, then on the AMX-BF16 tiles (the tile model). */
static void test_conv_wgrad_bf16(void **state)
{
    (void)state;
    if (!lp_bf16_supported())
        skip();
    for (int model = 0; model < 2; model++) {
        lp_tile_force_model(model);
        s_wgrad_case(9, 6, 11, 13, 5, 3, 1, 1); /* shifted grids, two chunks */
        s_wgrad_case(3, 3, 7, 9, 4, 5, 1, 2);   /* 5x5 same */
        s_wgrad_case(4, 5, 9, 9, 7, 3, 2, 1);   /* strided: im2col of the codes */
        s_wgrad_case(3, 8, 8, 8, 6, 1, 2, 0);   /* 1x1 stride 2 (resnet shortcut) */
        s_wgrad_case(2, 4, 6, 6, 3, 3, 1, 0);   /* valid conv, stride 1 */
        s_wgrad_case(2, 20, 8, 8, 36, 3, 1, 1); /* past one tile block both ways */
        assert_int_equal(lp_tile_model_faults(), 0);
    }
    lp_tile_force_model(0);
}

/* The shift and im2col paths of the forward give the same floats at every
 * level (pairs at portable/AVX2, quads at AVX-512 VNNI): the same exact
 * integer sums through the same double expression. */
static void test_conv_paths_identical(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 21);
    nn_conv_dims d = nn_conv_dims_make(3, 6, 9, 7, 10, 3, 1, 1);
    size_t xn = (size_t)d.N * d.C * d.H * d.W, wn = (size_t)d.OC * d.C * 9,
           on = (size_t)d.N * d.OC * d.OH * d.OW;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *b = nn_xmalloc((size_t)d.OC * 4);
    float *o1 = nn_xmalloc(on * 4), *o2 = nn_xmalloc(on * 4);
    s_fill(&r, x, xn, -1.0f, 2.5f);
    s_fill(&r, w, wn, -0.3f, 0.4f);
    s_fill(&r, b, (size_t)d.OC, -0.2f, 0.2f);
    uint8_t *saved = nn_xmalloc(lp_conv2d_saved_bytes(&d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_conv2d_scratch_bytes(&d));
    lp_mode mode = {1, 31};
    float run[2] = {0, 0};
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        lp_conv2d_force_im2col(0);
        lp_conv2d_forward(o1, &sv, run, x, w, b, &d, mode, scratch);
        lp_conv2d_force_im2col(1);
        lp_conv2d_forward(o2, &sv, run, x, w, b, &d, mode, scratch);
        assert_memory_equal(o1, o2, on * 4);
    }
    lp_conv2d_force_im2col(0);
    nn_cpu_force("auto");
    free(x); free(w); free(b); free(o1); free(o2); free(saved); free(scratch);
}

/* Forward and input gradient of one stride-1 same conv, written to o / dx. */
static void s_conv_fwd_bwd(float *o, float *dx, const nn_conv_dims *d, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    size_t xn = (size_t)d->N * d->C * d->H * d->W, wn = (size_t)d->OC * d->C * d->KH * d->KW,
           on = (size_t)d->N * d->OC * d->OH * d->OW;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *g = nn_xmalloc(on * 4);
    s_fill(&r, x, xn, -1.0f, 2.5f);
    s_fill(&r, w, wn, -0.3f, 0.4f);
    s_fill(&r, g, on, -0.02f, 0.01f);
    uint8_t *saved = nn_xmalloc(lp_conv2d_saved_bytes(d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_conv2d_scratch_bytes(d));
    float run[2] = {0, 0};
    lp_conv2d_forward(o, &sv, run, x, w, NULL, d, (lp_mode){1, 41}, scratch);
    lp_conv2d_backward(dx, NULL, NULL, g, &sv, d, 43, scratch);
    free(x); free(w); free(g); free(saved); free(scratch);
}

static void s_linear_case(int N, int F, int OF, int train);

static void s_tile_model_clean(void)
{
    assert_int_equal(lp_tile_model_faults(), 0);
}

/* The AMX paths (the tile layout of the shift path, lp_gemm on tiles for
 * im2col convs and linear layers, and where the level has AVX-512 BF16 the
 * bf16 weight gradients on TDPBF16PS), run on the software tile model at
 * every level, give the same floats as the level's own paths, forward and
 * input gradient, and match the fake-quant twins (weight gradients too);
 * no tile rule broken. */
static void test_tile_model_layers(void **state)
{
    (void)state;
    static const int cs[][8] = {/* N, C, H, W, OC, K, stride, pad */
                                {3, 6, 9, 7, 10, 3, 1, 1},  {2, 16, 8, 8, 16, 3, 1, 1},
                                {1, 1, 28, 28, 16, 3, 1, 1}, {2, 32, 8, 8, 40, 3, 1, 1},
                                {3, 7, 5, 9, 5, 5, 1, 2},   {13, 4, 4, 4, 3, 3, 1, 1},
                                {2, 3, 1, 1, 6, 3, 1, 1},   {2, 16, 9, 9, 32, 3, 2, 1},
                                {3, 16, 8, 8, 32, 1, 2, 0}, {2, 5, 6, 7, 4, 3, 1, 0}};
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0 || lp_kern()->tilegemm)
            continue; /* levels with tile kernels of their own: test_lowprec_tile */
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            const int *c = cs[i];
            nn_conv_dims d = nn_conv_dims_make(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
            size_t xn = (size_t)d.N * d.C * d.H * d.W, on = (size_t)d.N * d.OC * d.OH * d.OW;
            float *o1 = nn_xmalloc(on * 4), *o2 = nn_xmalloc(on * 4);
            float *dx1 = nn_xmalloc(xn * 4), *dx2 = nn_xmalloc(xn * 4);
            s_conv_fwd_bwd(o1, dx1, &d, 50 + i);
            lp_tile_force_model(1);
            s_conv_fwd_bwd(o2, dx2, &d, 50 + i);
            s_tile_model_clean();
            for (size_t k = 0; k < on; k++)
                if (o1[k] != o2[k])
                    fail_msg("%s case %zu: out[%zu] = %.9g with tiles, %.9g without",
                             nn_cpu_name((nn_cpu_t)lv), i, k, o2[k], o1[k]);
            for (size_t k = 0; k < xn; k++)
                if (dx1[k] != dx2[k])
                    fail_msg("%s case %zu: din[%zu] = %.9g with tiles, %.9g without",
                             nn_cpu_name((nn_cpu_t)lv), i, k, dx2[k], dx1[k]);
            s_conv_case(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], 1, 1);
            s_tile_model_clean();
            lp_tile_force_model(0);
            free(o1); free(o2); free(dx1); free(dx2);
        }
        lp_tile_force_model(1);
        s_linear_case(5, 64, 10, 1);
        s_linear_case(32, 33, 17, 1);
        s_tile_model_clean();
        lp_tile_force_model(0);
    }
    nn_cpu_force("auto");
}

/* Runs fn with the kernel table of every level this CPU has (the kernels
 * are reached through the tables, so each architecture's are tested). */
static void s_each_level(void (*fn)(const lp_kern_t *k))
{
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        fn(lp_kern());
    }
    nn_cpu_force("auto");
}

/* The pair-grid helpers of the shift path: AVX2 (the level's table) against the twins, exact,
 * over tails (W around multiples of 8), 1 to 5 variants (with their wrap
 * columns), several rows, with and without a second row of codes. */
static void s_pair_rows(const lp_kern_t *kt)
{
    nn_rng r;
    nn_rng_seed(&r, 22);
    enum { MAXW = 21, H = 3, VS = MAXW * H + 7, LDC = MAXW + 4 };
    for (int W = 1; W <= MAXW; W++)
        for (int V = 1; V <= 5; V += 2)
            for (int two = 0; two < 2; two++) {
                uint8_t r0[MAXW * H], r1[MAXW * H];
                uint32_t d0[5 * VS], d1[5 * VS];
                int32_t c0[H * LDC + 20], c1[H * LDC + 20];
                double t0[MAXW], t1[MAXW];
                for (int i = 0; i < W * H; i++) {
                    r0[i] = (uint8_t)nn_rng_below(&r, 256);
                    r1[i] = (uint8_t)nn_rng_below(&r, 256);
                }
                for (int i = 0; i < H * LDC + 20; i++)
                    c0[i] = c1[i] = (int32_t)nn_rng_below(&r, 1000);
                memset(d0, 0xab, sizeof d0);
                memset(d1, 0xab, sizeof d1);
                lp_pair_plane_ref(d0, VS, V, c0 + 10, LDC, r0, two ? r1 : NULL, H, W);
                kt->pair_plane(d1, VS, V, c1 + 10, LDC, r0, two ? r1 : NULL, H, W);
                assert_memory_equal(d0, d1, sizeof d0);
                assert_memory_equal(c0, c1, sizeof c0);
                const int pad = (V - 1) / 2;
                for (int v = 0; v < V; v++)
                    for (int i = 0; i < W * H; i++) {
                        const int w = i % W, dx = v - pad;
                        const int wrap = dx < 0 ? w >= W + dx : w < dx;
                        assert_true(d0[v * VS + i] ==
                                    (wrap ? 0u : lp_pair(r0[i], two ? r1[i] : 0)));
                    }
                assert_true(d0[W * H] == 0xabababab); /* nothing past the plane */
                memset(d1, 0xab, sizeof d1);
                kt->pair_plane(d1, VS, V, NULL, LDC, r0, two ? r1 : NULL, H, W);
                assert_memory_equal(d0, d1, sizeof d0); /* no channel sums */
                const int off[9] = {-10, -9, -8, -1, 0, 1, 8, 9, 10};
                lp_tap_sum_row_ref(t0, c0 + 10, off, 9, 0.37, (size_t)W);
                kt->tap_sum_row(t1, c0 + 10, off, 9, 0.37, (size_t)W);
                assert_memory_equal(t0, t1, (size_t)W * sizeof(double));
            }
}

static void test_pair_rows(void **state)
{
    (void)state;
    s_each_level(s_pair_rows);
}

/* The quad-grid helpers of the VNNI shift path against their twins, exact,
 * over tails (n around multiples of 16) and missing channel rows. */
static void s_quad_rows(const lp_kern_t *kt)
{
    nn_rng r;
    nn_rng_seed(&r, 23);
    for (size_t n = 1; n <= 40; n++)
        for (int have = 1; have <= 4; have++) {
            uint8_t rows[4][40];
            const uint8_t *rp[4];
            uint32_t d0[40], d1[40];
            int32_t c0[60], c1[60], s0[40], s1[40];
            for (int l = 0; l < 4; l++) {
                for (size_t i = 0; i < n; i++)
                    rows[l][i] = (uint8_t)nn_rng_below(&r, 256);
                rp[l] = l < have ? rows[l] : NULL;
            }
            for (int i = 0; i < 60; i++)
                c0[i] = c1[i] = (int32_t)nn_rng_below(&r, 1000);
            lp_quad_row_ref(d0, c0 + 10, rp, n);
            memset(d1, 0xAB, sizeof d1);
            kt->quad_row(d1, c1 + 10, rp, n);
            assert_memory_equal(d0, d1, n * 4);
            if (n < 40) /* masked tails write nothing past n */
                assert_int_equal(d1[n], 0xABABABABu);
            assert_memory_equal(c0, c1, sizeof c0);
            memset(d1, 0, sizeof d1);
            kt->quad_row(d1, NULL, rp, n);
            assert_memory_equal(d0, d1, n * 4);
            const int off[9] = {-10, -9, -8, -1, 0, 1, 8, 9, 10};
            lp_tap_isum_row_ref(s0, c0 + 10, off, 9, n);
            memset(s1, 0xAB, sizeof s1);
            kt->tap_isum_row(s1, c0 + 10, off, 9, n);
            assert_memory_equal(s0, s1, n * 4);
            if (n < 40)
                assert_int_equal((uint32_t)s1[n], 0xABABABABu);
        }
}

static void test_quad_rows(void **state)
{
    (void)state;
    s_each_level(s_quad_rows);
}

static void test_conv_saved_bytes(void **state)
{
    (void)state;
    nn_conv_dims d = nn_conv_dims_make(32, 16, 32, 32, 16, 3, 1, 1);
    size_t fp32 = (size_t)32 * 16 * 32 * 32 * sizeof(float);
    assert_int_equal(lp_conv2d_saved_bytes(&d), (size_t)32 * 16 * 32 * 32 + 16 * 16 * 9);
    assert_true(lp_conv2d_saved_bytes(&d) * 3 < fp32);
}

static void s_linear_case(int N, int F, int OF, int train)
{
    nn_rng r;
    nn_rng_seed(&r, (uint64_t)(N + F + OF));
    size_t xn = (size_t)N * F, wn = (size_t)OF * F, on = (size_t)N * OF;
    float *x = nn_xmalloc(xn * 4), *w = nn_xmalloc(wn * 4), *b = nn_xmalloc((size_t)OF * 4);
    float *o1 = nn_xmalloc(on * 4), *o2 = nn_xmalloc(on * 4), *g = nn_xmalloc(on * 4);
    float *dx1 = nn_xmalloc(xn * 4), *dx2 = nn_xmalloc(xn * 4);
    float *dw1 = nn_xcalloc(wn, 4), *dw2 = nn_xcalloc(wn, 4);
    float *db1 = nn_xcalloc((size_t)OF, 4), *db2 = nn_xcalloc((size_t)OF, 4);
    s_fill(&r, x, xn, -1, 3);
    s_fill(&r, w, wn, -0.3f, 0.3f);
    s_fill(&r, b, (size_t)OF, -0.1f, 0.1f);
    s_fill(&r, g, on, -0.1f, 0.1f);
    uint8_t *saved = nn_xmalloc(lp_linear_saved_bytes(N, F, OF));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *scratch = nn_xalloc_aligned(lp_linear_scratch_bytes(N, F, OF));
    float *fqs = nn_xmalloc(lp_linear_fq_scratch_floats(N, F, OF) * 4);
    float run1[2] = {0, 0}, run2[2] = {0, 0};
    lp_mode mode = {train, 99};
    lp_linear_forward(o1, &sv, run1, x, w, b, N, F, OF, mode, scratch);
    lp_linear_forward_fq(o2, run2, x, w, b, N, F, OF, mode, fqs);
    s_close(o1, o2, on, "linear out");
    lp_linear_backward(dx1, dw1, db1, g, &sv, N, F, OF, 5, scratch);
    lp_linear_backward_fq(dx2, dw2, db2, g, x, sv.xp, w, N, F, OF, mode, 5, fqs);
    s_close(dx1, dx2, xn, "linear din");
    s_close(dw1, dw2, wn, "linear dw");
    s_close(db1, db2, (size_t)OF, "linear db");
    free(x); free(w); free(b); free(o1); free(o2); free(g); free(dx1); free(dx2);
    free(dw1); free(dw2); free(db1); free(db2); free(saved); free(scratch); free(fqs);
}

static void test_linear_matches_fake_quant(void **state)
{
    (void)state;
    s_linear_case(5, 64, 10, 1);
    s_linear_case(32, 33, 17, 1);
    s_linear_case(3, 7, 70, 0);
}

/* ---- Range EvoNorm ------------------------------------------------------ */

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
    s_fill(&r, gam, C, 0.5f, 1.5f);
    s_fill(&r, bet, C, -0.5f, 0.5f);
    s_fill(&r, v, C, 0.5f, 2.0f);
    for (size_t i = 0; i < n; i++) {
        int ch = (int)(i / HW) % C;
        do /* stay away from the hardsigmoid kinks |v x| = 3 */
            x[i] = 4.0f * nn_rng_normal(&r);
        while (fabsf(fabsf(v[ch] * x[i]) - 3.0f) < 0.05f);
    }
    s_fill(&r, rr, n, -1, 1);
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
        s_fill(&r, x, n, -6.0f, 6.0f);
        s_fill(&r, g, n, -0.1f, 0.1f);
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
    s_each_level(s_ren_rows);
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
    s_each_level(s_ren_row_edges);
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
    s_each_level(s_ren_row_sweep);
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
    s_each_level(s_find_eq);
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
    s_each_level(s_u8_chunk_kernels);
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
    s_fill(&r, x, n, lo, hi);
    s_fill(&r, g, n, -0.01f, 0.01f);
    s_fill(&r, gam, C, 0.5f, 1.5f);
    s_fill(&r, bet, C, -0.2f, 0.2f);
    s_fill(&r, v, C, 0.8f, 1.2f);
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
    s_fill(&r, x, n, -2, 3);
    s_fill(&r, x, (size_t)cg * HW, 8, 9); /* sample 0, group 0: above every code */
    s_fill(&r, g, n, -0.01f, 0.01f);
    s_fill(&r, gam, C, 0.5f, 1.5f);
    s_fill(&r, bet, C, -0.2f, 0.2f);
    s_fill(&r, v, C, 0.8f, 1.2f);
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

static void test_add(void **state)
{
    (void)state;
    enum { N = 4, PER = 37, NN = N * PER };
    nn_rng r;
    nn_rng_seed(&r, 23);
    float a[NN], b[NN], out[NN], fa[NN], fb[NN], g[NN], da[NN], db[NN], gf[NN];
    uint8_t codes[NN];
    s_fill(&r, a, NN, -1, 1);
    s_fill(&r, b, NN, -3, 0.5f);
    s_fill(&r, g, NN, -0.1f, 0.2f);
    float ra[2] = {0, 0}, rb[2] = {0, 0}, ra2[2] = {0, 0}, rb2[2] = {0, 0};
    lp_mode mode = {1, 5};
    lp_add_forward(out, ra, rb, a, b, N, PER, mode, codes);
    lp_qparams pa = lp_act_qparams(ra2, a, N, PER, 1), pb = lp_act_qparams(rb2, b, N, PER, 1);
    lp_fake_quant(fa, a, NN, pa, 1, 5);
    lp_fake_quant(fb, b, NN, pb, 1, 5 ^ 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < NN; i++)
        assert_true(out[i] == fa[i] + fb[i]);
    assert_true(ra[0] == ra2[0] && rb[1] == rb2[1]);
    lp_add_backward(da, db, g, NN, 6, codes);
    lp_fake_quant(gf, g, NN, lp_tensor_qparams(g, NN), 1, 6);
    assert_memory_equal(da, gf, sizeof da);
    assert_memory_equal(db, gf, sizeof db);
    assert_int_equal(lp_add_saved_bytes(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_matches_fake_quant),
        cmocka_unit_test(test_conv_paths_identical),
        cmocka_unit_test(test_tile_model_layers),
        cmocka_unit_test(test_conv_wgrad_bf16),
        cmocka_unit_test(test_pair_rows),
        cmocka_unit_test(test_quad_rows),
        cmocka_unit_test(test_conv_saved_bytes),
        cmocka_unit_test(test_linear_matches_fake_quant),
        cmocka_unit_test(test_ren_chunks),
        cmocka_unit_test(test_ren_finite_differences),
        cmocka_unit_test(test_ren_rows),
        cmocka_unit_test(test_ren_row_edges),
        cmocka_unit_test(test_ren_row_sweep),
        cmocka_unit_test(test_find_eq),
        cmocka_unit_test(test_u8_chunk_kernels),
        cmocka_unit_test(test_ren_quantized_is_ste),
        cmocka_unit_test(test_ren_degenerate_group),
        cmocka_unit_test(test_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
