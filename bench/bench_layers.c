/* bench_layers — timing of the FP32 layer kernels at the resnet20 shapes.
 *
 * For every resnet20 convolution at batch 32 (3x32x32 input, 16/32/64
 * channels, 1x1 stride-2 shortcuts) prints ms per forward and per backward
 * (din + dw) and GFLOP/s, for the default chunking (nn_conv_chunk) and for
 * explicit chunk sizes nb (samples lowered into one sgemm), so the choice in
 * nn_conv.c can be re-checked on a new machine.  Then the norms and the whole
 * conv+norm work of one resnet20 training step.
 * Usage: build/bench/bench_layers [reps]   (OPENBLAS_NUM_THREADS=1)
 * No pass/fail: numbers only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"
#include "nn/nn_layers.h"

static float *s_rand(nn_rng *r, size_t n, float scale)
{
    float *p = nn_xalloc_aligned(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = nn_rng_normal(r) * scale;
    return p;
}

typedef struct {
    int C, OC, H, K, S, P, count; /* count: how many times resnet20 uses it */
} shape;

static const shape shapes[] = {
    {3, 16, 32, 3, 1, 1, 1},  {16, 16, 32, 3, 1, 1, 6}, {16, 32, 32, 3, 2, 1, 1},
    {32, 32, 16, 3, 1, 1, 5}, {32, 64, 16, 3, 2, 1, 1}, {64, 64, 8, 3, 1, 1, 5},
    {16, 32, 32, 1, 2, 0, 1}, {32, 64, 16, 1, 2, 0, 1},
};

/* Best-of-reps time in ms of fwd (mode 0) or bwd (mode 1) with chunk nb
 * (0 = default). */
static double s_time_conv(const nn_conv_dims *d, int nb, int mode, int reps, float *out,
                          const float *in, const float *w, float *din, float *dw,
                          const float *dout, float *scratch)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = nn_now();
        if (mode == 0) {
            if (nb)
                nn_conv2d_forward_nb(out, in, w, NULL, d, scratch, nb);
            else
                nn_conv2d_forward(out, in, w, NULL, d, scratch);
        } else {
            if (nb)
                nn_conv2d_backward_nb(din, dw, NULL, dout, in, w, d, scratch, nb);
            else
                nn_conv2d_backward(din, dw, NULL, dout, in, w, d, scratch);
        }
        double t = (nn_now() - t0) * 1e3;
        if (t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1)
        reps = 1;
    const int N = 32;
    nn_rng r;
    nn_rng_seed(&r, 1);
    static const int nbs[] = {1, 2, 4, 8, 16, 32};
    const int nnb = (int)(sizeof nbs / sizeof nbs[0]);
    double step_conv_ms = 0.0, step_flop = 0.0;

    printf("conv2d, batch %d, best of %d (ms, GFLOP/s); backward = din + dw\n", N, reps);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const shape *s = &shapes[t];
        nn_conv_dims d = nn_conv_dims_make(N, s->C, s->H, s->H, s->OC, s->K, s->S, s->P);
        size_t ni = (size_t)N * d.C * d.H * d.W, nw = (size_t)d.OC * d.C * d.KH * d.KW;
        size_t no = (size_t)N * d.OC * d.OH * d.OW;
        size_t ns = 0;
        for (int i = 0; i < nnb; i++) {
            size_t k = nn_conv_scratch_floats_nb(&d, nbs[i]);
            ns = k > ns ? k : ns;
        }
        float *in = s_rand(&r, ni, 1.0f), *w = s_rand(&r, nw, 0.1f), *dout = s_rand(&r, no, 1.0f);
        float *out = s_rand(&r, no, 0.0f), *din = s_rand(&r, ni, 0.0f), *dw = s_rand(&r, nw, 0.0f);
        float *scratch = s_rand(&r, ns, 0.0f);
        double flop = 2.0 * N * d.OC * d.OH * d.OW * (double)d.C * d.KH * d.KW;
        /* the stem's din is not needed in a real step, but is timed here */
        printf("%2d->%2d %2dx%-2d k%d s%d (default nb=%2d, scratch %.1f MB):\n", s->C, s->OC, s->H,
               s->H, s->K, s->S, nn_conv_chunk(&d),
               (double)nn_conv_scratch_floats(&d) * 4.0 / 1e6);
        for (int i = -1; i < nnb; i++) {
            int nb = i < 0 ? 0 : nbs[i];
            if (i >= 0 && (nb > N || (d.KH == 1 && d.stride == 1 && d.pad == 0)))
                break;
            double f = s_time_conv(&d, nb, 0, reps, out, in, w, din, dw, dout, scratch);
            double b = s_time_conv(&d, nb, 1, reps, out, in, w, din, dw, dout, scratch);
            char label[16];
            if (i < 0)
                snprintf(label, sizeof label, "default");
            else
                snprintf(label, sizeof label, "%d", nb);
            printf("   nb=%-7s fwd %7.3f ms %6.1f GF/s   bwd %7.3f ms %6.1f GF/s   f+b %7.3f ms\n",
                   label, f, flop / f / 1e6, b, 2 * flop / b / 1e6, f + b);
            if (i < 0) {
                step_conv_ms += s->count * (f + b);
                step_flop += s->count * 3 * flop;
            }
        }
        free(in), free(w), free(dout), free(out), free(din), free(dw), free(scratch);
    }
    printf("resnet20 step, all convs (fwd+bwd, default nb): %.2f ms, %.1f GF/s\n", step_conv_ms,
           step_flop / step_conv_ms / 1e6);

    /* norms at the resnet20 activation shapes */
    static const int ns_[][3] = {{16, 32, 32}, {32, 16, 16}, {64, 8, 8}};
    static const int ncount[] = {7, 7, 7}; /* norms per stage incl. stem/shortcut */
    double norm_ms = 0.0;
    printf("norms, batch %d (ms fwd / bwd):\n", N);
    for (int t = 0; t < 3; t++) {
        const int C = ns_[t][0], HW = ns_[t][1] * ns_[t][2], G = 8;
        size_t n = (size_t)N * C * HW;
        float *x = s_rand(&r, n, 1.0f), *y = s_rand(&r, n, 0.0f), *dy = s_rand(&r, n, 1.0f);
        float *dx = s_rand(&r, n, 0.0f), *g = s_rand(&r, C, 1.0f), *b = s_rand(&r, C, 1.0f);
        float *v = s_rand(&r, C, 1.0f), *dg = s_rand(&r, C, 0.0f), *db = s_rand(&r, C, 0.0f);
        float *dv = s_rand(&r, C, 0.0f), *istd = s_rand(&r, (size_t)N * G, 0.0f);
        float *sm = s_rand(&r, C, 0.0f), *si = s_rand(&r, C, 0.0f), *rm = s_rand(&r, C, 0.0f);
        float *rv = s_rand(&r, C, 0.0f);
        double ef = 1e30, eb = 1e30, bf = 1e30, bb = 1e30;
        for (int k = 0; k < reps; k++) {
            double t0 = nn_now();
            nn_evonorm_s0_forward(y, istd, x, g, b, v, N, C, HW, G);
            double t1 = nn_now();
            nn_evonorm_s0_backward(dx, dg, db, dv, dy, x, istd, g, v, N, C, HW, G);
            double t2 = nn_now();
            nn_batchnorm_forward_train(y, sm, si, rm, rv, x, g, b, N, C, HW);
            double t3 = nn_now();
            nn_batchnorm_backward(dx, dg, db, dy, x, sm, si, g, N, C, HW);
            double t4 = nn_now();
            ef = fmin(ef, (t1 - t0) * 1e3);
            eb = fmin(eb, (t2 - t1) * 1e3);
            bf = fmin(bf, (t3 - t2) * 1e3);
            bb = fmin(bb, (t4 - t3) * 1e3);
        }
        printf("  C=%2d %2dx%-2d  evonorm-s0 %6.3f / %6.3f   batchnorm %6.3f / %6.3f\n", C,
               ns_[t][1], ns_[t][2], ef, eb, bf, bb);
        norm_ms += ncount[t] * (ef + eb);
        free(x), free(y), free(dy), free(dx), free(g), free(b), free(v), free(dg), free(db);
        free(dv), free(istd), free(sm), free(si), free(rm), free(rv);
    }
    printf("resnet20 step, all evonorms (fwd+bwd): %.2f ms\n", norm_ms);
    printf("resnet20 step, convs + evonorms: %.2f ms\n", step_conv_ms + norm_ms);
    return 0;
}
