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
 * - the conv shift path's pair- and quad-grid row kernels of every level
 *   against their scalar twins.
 * - residual add against its fake-quant definition.
 * Range EvoNorm and its kernels: test_lowprec_ren.c. */
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
#include "tests/tk_lp.h"


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
    tk_lp_uniform(&r, x, xn, -1.5f, 2.0f);
    tk_lp_uniform(&r, w, wn, -0.4f, 0.3f);
    tk_lp_uniform(&r, b, (size_t)OC, -0.2f, 0.2f);
    tk_lp_uniform(&r, g, on, -0.01f, 0.02f);
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
        tk_lp_uniform(&r, base, xn, -0.05f, 0.05f);
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
    tk_lp_uniform(&r, x, xn, -1.2f, 2.0f);
    tk_lp_uniform(&r, w, wn, -0.4f, 0.4f);
    tk_lp_uniform(&r, g, on, -0.03f, 0.02f);
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
    tk_lp_uniform(&r, x, xn, -1.0f, 2.5f);
    tk_lp_uniform(&r, w, wn, -0.3f, 0.4f);
    tk_lp_uniform(&r, b, (size_t)d.OC, -0.2f, 0.2f);
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
    tk_lp_uniform(&r, x, xn, -1.0f, 2.5f);
    tk_lp_uniform(&r, w, wn, -0.3f, 0.4f);
    tk_lp_uniform(&r, g, on, -0.02f, 0.01f);
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
    tk_lp_each_level(s_pair_rows);
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
    tk_lp_each_level(s_quad_rows);
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
    tk_lp_uniform(&r, x, xn, -1, 3);
    tk_lp_uniform(&r, w, wn, -0.3f, 0.3f);
    tk_lp_uniform(&r, b, (size_t)OF, -0.1f, 0.1f);
    tk_lp_uniform(&r, g, on, -0.1f, 0.1f);
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


static void test_add(void **state)
{
    (void)state;
    enum { N = 4, PER = 37, NN = N * PER };
    nn_rng r;
    nn_rng_seed(&r, 23);
    float a[NN], b[NN], out[NN], fa[NN], fb[NN], g[NN], da[NN], db[NN], gf[NN];
    uint8_t codes[NN];
    tk_lp_uniform(&r, a, NN, -1, 1);
    tk_lp_uniform(&r, b, NN, -3, 0.5f);
    tk_lp_uniform(&r, g, NN, -0.1f, 0.2f);
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
        cmocka_unit_test(test_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
