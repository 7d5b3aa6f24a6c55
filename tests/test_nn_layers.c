/* test_nn_layers — the FP32 layer kernels of nn/nn_layers.h.
 *
 * Every forward is compared with an independent double-precision reference
 * written here (direct loops), and, for conv and linear, with the library's
 * float _ref twins.  Every backward is compared with central finite
 * differences of loss = sum(out * R) (R random), computed in double through
 * the double reference forwards; conv and linear backward also against their
 * _ref twins.  The header's conventions are checked on the way: parameter
 * gradients accumulate (+=, buffers start non-zero), din is overwritten
 * (buffers start as NaN), scratch may hold garbage (NaN).
 * Numeric checks are |a - b| <= atol + rtol * |ref|.  The AVX2 kernels and
 * the portable scalar paths (forced through nn_cpu_force) are both
 * checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/tk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_kern.h"
#include "nn/nn_core.h"
#include "nn/nn_layers.h"
#include "nn/nn_layers_simd.h"

/* ---- helpers ---------------------------------------------------------------- */

static float *s_randn(nn_rng *r, size_t n, float scale)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = nn_rng_normal(r) * scale;
    return p;
}

static float *s_fill(size_t n, float v)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

static float *s_copy(const float *a, size_t n)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    memcpy(p, a, sizeof(float) * n);
    return p;
}

static double *s_to_double(const float *a, size_t n)
{
    double *p = nn_xmalloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = a[i];
    return p;
}

/* Fails (with a message naming what) unless every |got-want| <= atol+rtol*|want|. */
static void s_close_f(const char *what, const float *got, const float *want, size_t n, double atol,
                      double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s[%zu]: got %.9g want %.9g (atol %g rtol %g)", what, i, g, w, atol, rtol);
    }
}

static void s_close_d(const char *what, const float *got, const double *want, size_t n,
                      double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s[%zu]: got %.9g want %.9g (atol %g rtol %g)", what, i, g, w, atol, rtol);
    }
}

/* Central finite differences of loss() with respect to every entry of x
 * (which loss() reads), compared with the analytic gradient g.  g_base is
 * what g held before the backward call (accumulation check) or NULL. */
typedef double (*s_loss_fn)(void *ctx);

static void s_fd_check(const char *what, s_loss_fn loss, void *ctx, double *x, size_t n,
                       const float *g, const float *g_base, double h, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * h);
        double an = (double)g[i] - (g_base ? (double)g_base[i] : 0.0);
        if (!(fabs(an - fd) <= atol + rtol * fabs(fd)))
            fail_msg("%s grad[%zu]: analytic %.9g finite-diff %.9g", what, i, an, fd);
    }
}

/* ---- conv2d ------------------------------------------------------------------ */

typedef struct {
    nn_conv_dims d;
    double *in, *w, *b, *R; /* b may be NULL */
} conv_ctx;

static void s_conv_fwd_d(double *out, const conv_ctx *c)
{
    const nn_conv_dims *d = &c->d;
    for (int n = 0; n < d->N; n++)
        for (int oc = 0; oc < d->OC; oc++)
            for (int oh = 0; oh < d->OH; oh++)
                for (int ow = 0; ow < d->OW; ow++) {
                    double acc = c->b ? c->b[oc] : 0.0;
                    for (int ci = 0; ci < d->C; ci++)
                        for (int kh = 0; kh < d->KH; kh++)
                            for (int kw = 0; kw < d->KW; kw++) {
                                int ih = oh * d->stride - d->pad + kh;
                                int iw = ow * d->stride - d->pad + kw;
                                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W)
                                    continue;
                                acc += c->in[(((size_t)n * d->C + ci) * d->H + ih) * d->W + iw] *
                                       c->w[(((size_t)oc * d->C + ci) * d->KH + kh) * d->KW + kw];
                            }
                    out[(((size_t)n * d->OC + oc) * d->OH + oh) * d->OW + ow] = acc;
                }
}

static double s_conv_loss(void *ctx)
{
    conv_ctx *c = ctx;
    size_t no = (size_t)c->d.N * c->d.OC * c->d.OH * c->d.OW;
    double *out = nn_xmalloc(sizeof(double) * no);
    s_conv_fwd_d(out, c);
    double l = 0.0;
    for (size_t i = 0; i < no; i++)
        l += out[i] * c->R[i];
    free(out);
    return l;
}

static nn_conv_dims s_dims(int N, int C, int H, int W, int OC, int KH, int KW, int s, int p)
{
    nn_conv_dims d = nn_conv_dims_make(N, C, H, W, OC, KH, s, p);
    d.KW = KW;
    d.OW = (W + 2 * p - KW) / s + 1;
    return d;
}

static const struct {
    int N, C, H, W, OC, KH, KW, s, p;
} conv_cases[] = {
    {3, 3, 7, 7, 4, 3, 3, 1, 1},  /* 3x3 same */
    {3, 2, 8, 6, 3, 3, 3, 2, 1},  /* stride 2, non-square input */
    {2, 3, 7, 5, 2, 3, 3, 2, 0},  /* stride 2, no padding, odd sizes */
    {3, 4, 5, 6, 5, 1, 1, 1, 0},  /* pointwise fast path */
    {3, 4, 8, 8, 6, 1, 1, 2, 0},  /* 1x1 stride-2 shortcut */
    {2, 2, 6, 7, 3, 3, 2, 1, 1},  /* non-square kernel */
    {2, 3, 4, 4, 2, 5, 5, 1, 2},  /* kernel larger than half the image */
    {2, 2, 9, 9, 3, 3, 3, 3, 1},  /* stride 3 */
    {5, 3, 4, 4, 4, 3, 3, 1, 1},  /* many samples per chunk */
    {2, 3, 6, 9, 5, 5, 5, 1, 2},  /* 5x5 same (shift path), non-square input */
    {3, 2, 1, 1, 3, 3, 3, 1, 1},  /* 3x3 same on a 1x1 image: only the centre tap */
};

static void test_conv_forward(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 11);
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        nn_conv_dims d = s_dims(conv_cases[t].N, conv_cases[t].C, conv_cases[t].H,
                                conv_cases[t].W, conv_cases[t].OC, conv_cases[t].KH,
                                conv_cases[t].KW, conv_cases[t].s, conv_cases[t].p);
        size_t ni = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.OC * d.C * d.KH * d.KW;
        size_t no = (size_t)d.N * d.OC * d.OH * d.OW;
        float *in = s_randn(&r, ni, 1.0f), *w = s_randn(&r, nw, 0.5f), *b = s_randn(&r, d.OC, 1.0f);
        float *ref = s_fill(no, NAN);
        double *refd = nn_xmalloc(sizeof(double) * no);
        for (int with_b = 0; with_b < 2; with_b++) {
            conv_ctx c = {d, s_to_double(in, ni), s_to_double(w, nw),
                          with_b ? s_to_double(b, d.OC) : NULL, NULL};
            s_conv_fwd_d(refd, &c);
            nn_conv2d_forward_ref(ref, in, w, with_b ? b : NULL, &d);
            s_close_d("conv_forward_ref", ref, refd, no, 1e-5, 1e-5);
            /* default chunking and explicit chunk sizes, incl. non-divisors */
            for (int nb = 0; nb <= d.N + 1; nb++) {
                size_t ns = nb == 0 ? nn_conv_scratch_floats(&d) : nn_conv_scratch_floats_nb(&d, nb);
                float *scratch = s_fill(ns, NAN);
                float *out = s_fill(no, NAN);
                if (nb == 0)
                    nn_conv2d_forward(out, in, w, with_b ? b : NULL, &d, scratch);
                else
                    nn_conv2d_forward_nb(out, in, w, with_b ? b : NULL, &d, scratch, nb);
                s_close_f("conv_forward", out, ref, no, 1e-5, 1e-4);
                free(scratch);
                free(out);
            }
            free(c.in);
            free(c.w);
            free(c.b);
        }
        free(in);
        free(w);
        free(b);
        free(ref);
        free(refd);
    }
}

static void test_conv_backward(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 12);
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        nn_conv_dims d = s_dims(conv_cases[t].N, conv_cases[t].C, conv_cases[t].H,
                                conv_cases[t].W, conv_cases[t].OC, conv_cases[t].KH,
                                conv_cases[t].KW, conv_cases[t].s, conv_cases[t].p);
        size_t ni = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.OC * d.C * d.KH * d.KW;
        size_t no = (size_t)d.N * d.OC * d.OH * d.OW;
        float *in = s_randn(&r, ni, 1.0f), *w = s_randn(&r, nw, 0.5f), *b = s_randn(&r, d.OC, 1.0f);
        float *R = s_randn(&r, no, 1.0f);
        float *dw0 = s_randn(&r, nw, 1.0f), *db0 = s_randn(&r, d.OC, 1.0f);

        /* reference twin */
        float *din_r = s_fill(ni, NAN), *dw_r = s_copy(dw0, nw), *db_r = s_copy(db0, d.OC);
        nn_conv2d_backward_ref(din_r, dw_r, db_r, R, in, w, &d);

        /* finite differences on the reference twin's gradients */
        conv_ctx c = {d, s_to_double(in, ni), s_to_double(w, nw), s_to_double(b, d.OC),
                      s_to_double(R, no)};
        s_fd_check("conv din", s_conv_loss, &c, c.in, ni, din_r, NULL, 1e-3, 1e-4, 1e-3);
        s_fd_check("conv dw", s_conv_loss, &c, c.w, nw, dw_r, dw0, 1e-3, 1e-4, 1e-3);
        s_fd_check("conv db", s_conv_loss, &c, c.b, d.OC, db_r, db0, 1e-3, 1e-4, 1e-3);

        for (int nb = 0; nb <= d.N + 1; nb++) {
            size_t ns = nb == 0 ? nn_conv_scratch_floats(&d) : nn_conv_scratch_floats_nb(&d, nb);
            for (int with_din = 0; with_din < 2; with_din++) {
                float *scratch = s_fill(ns, NAN);
                float *din = s_fill(ni, NAN), *dw = s_copy(dw0, nw), *db = s_copy(db0, d.OC);
                float *dinp = with_din ? din : NULL;
                if (nb == 0)
                    nn_conv2d_backward(dinp, dw, db, R, in, w, &d, scratch);
                else
                    nn_conv2d_backward_nb(dinp, dw, db, R, in, w, &d, scratch, nb);
                if (with_din)
                    s_close_f("conv din", din, din_r, ni, 1e-5, 1e-4);
                else
                    for (size_t i = 0; i < ni; i++)
                        assert_true(isnan(din[i])); /* untouched */
                s_close_f("conv dw", dw, dw_r, nw, 1e-4, 1e-4);
                s_close_f("conv db", db, db_r, d.OC, 1e-4, 1e-4);
                free(scratch);
                free(din);
                free(dw);
                free(db);
            }
        }
        /* db == NULL leaves the bias alone and still gives dw */
        {
            float *scratch = s_fill(nn_conv_scratch_floats(&d), NAN);
            float *dw = s_copy(dw0, nw);
            nn_conv2d_backward(NULL, dw, NULL, R, in, w, &d, scratch);
            s_close_f("conv dw (no db)", dw, dw_r, nw, 1e-4, 1e-4);
            free(scratch);
            free(dw);
        }
        free(c.in);
        free(c.w);
        free(c.b);
        free(c.R);
        free(in);
        free(w);
        free(b);
        free(R);
        free(dw0);
        free(db0);
        free(din_r);
        free(dw_r);
        free(db_r);
    }
}

/* The resnet20 shapes at a small batch: tuned path against the twin. */
static void test_conv_resnet_shapes(void **state)
{
    (void)state;
    static const int cs[][5] = {{3, 16, 32, 3, 1},  {16, 16, 32, 3, 1}, {16, 32, 32, 3, 2},
                                {32, 32, 16, 3, 1}, {32, 64, 16, 3, 2}, {64, 64, 8, 3, 1},
                                {16, 32, 32, 1, 2}, {32, 64, 16, 1, 2}};
    nn_rng r;
    nn_rng_seed(&r, 13);
    const int N = 2;
    for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
        if (tk_quick() && t % 2)
            continue;
        int K = cs[t][3];
        nn_conv_dims d = nn_conv_dims_make(N, cs[t][0], cs[t][2], cs[t][2], cs[t][1], K, cs[t][4],
                                           K == 3 ? 1 : 0);
        size_t ni = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.OC * d.C * d.KH * d.KW;
        size_t no = (size_t)d.N * d.OC * d.OH * d.OW;
        float *in = s_randn(&r, ni, 1.0f), *w = s_randn(&r, nw, 0.1f), *R = s_randn(&r, no, 1.0f);
        float *out = s_fill(no, NAN), *out_r = s_fill(no, NAN);
        float *scratch = s_fill(nn_conv_scratch_floats(&d), NAN);
        nn_conv2d_forward(out, in, w, NULL, &d, scratch);
        nn_conv2d_forward_ref(out_r, in, w, NULL, &d);
        s_close_f("resnet conv forward", out, out_r, no, 1e-4, 1e-4);
        float *din = s_fill(ni, NAN), *din_r = s_fill(ni, NAN);
        float *dw = s_fill(nw, 0.0f), *dw_r = s_fill(nw, 0.0f);
        nn_conv2d_backward(din, dw, NULL, R, in, w, &d, scratch);
        nn_conv2d_backward_ref(din_r, dw_r, NULL, R, in, w, &d);
        s_close_f("resnet conv din", din, din_r, ni, 1e-4, 1e-4);
        s_close_f("resnet conv dw", dw, dw_r, nw, 1e-3, 1e-4);
        free(in);
        free(w);
        free(R);
        free(out);
        free(out_r);
        free(scratch);
        free(din);
        free(din_r);
        free(dw);
        free(dw_r);
    }
}

/* The shifted-GEMM kernels of the im2col-free conv path: the _ref twins
 * against a double reference written here, and the AVX2 and AVX-512 kernels
 * (when the CPU has them) against the twins, over tile and vector tails (M
 * not a multiple of 4, n around multiples of 8, 16, 24 and 96, K not a
 * multiple of 3 or 6). */
typedef struct {
    nn_cpu_t level; /* the level the kernels need */
    void (*gemm)(float *, size_t, const float *, int, const float *, size_t, int, const int *,
                 int, size_t);
    void (*dot)(float *, size_t, const float *, size_t, int, const float *, size_t, int,
                const int *, int, size_t);
    const char *gemm_name, *dot_name;
} s_shift_impl;

/* The kernels of every level this CPU has, taken from the levels' tables
 * (the portable blocked ones, then each architecture's own); returns how
 * many. */
static int s_shift_impls_fill(s_shift_impl out[NN_CPU_LEVELS])
{
    static char names[NN_CPU_LEVELS][2][40];
    int n = 0;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        snprintf(names[n][0], sizeof names[n][0], "%s shiftgemm", nn_cpu_name((nn_cpu_t)lv));
        snprintf(names[n][1], sizeof names[n][1], "%s shiftdot", nn_cpu_name((nn_cpu_t)lv));
        out[n] = (s_shift_impl){(nn_cpu_t)lv, nn_kern()->shiftgemm, nn_kern()->shiftdot,
                                names[n][0], names[n][1]};
        n++;
    }
    nn_cpu_force("auto");
    return n;
}

static void test_shift_kernels(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 14);
    static const int Ms[] = {1, 3, 4, 5, 9};
    static const size_t ns[] = {1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 95, 96, 97, 200};
    static const int Ts[] = {1, 9};
    const size_t margin = 40; /* grid floats readable before and after */
    s_shift_impl impls[NN_CPU_LEVELS];
    const int nimpl = s_shift_impls_fill(impls);
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (int nch = 1; nch <= 3; nch += 2)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int T = Ts[ti], M = Ms[mi], K = nch * T;
                    const size_t n = ns[ni], ldb = n + 2 * margin + 3, ldc = n + 5;
                    int toff[9];
                    for (int t = 0; t < T; t++) /* shifts in [-margin, margin] */
                        toff[t] = T == 1 ? -7 : (t / 3 - 1) * 13 + (t % 3 - 1);
                    float *grid = s_randn(&r, (size_t)nch * ldb, 1.0f);
                    const float *B = grid + margin;
                    float *w = s_randn(&r, (size_t)M * K, 1.0f);
                    float *Ap = s_fill(nn_shift_pack_size(M, K), 0.0f);
                    for (int m = 0; m < M; m++)
                        for (int k = 0; k < K; k++)
                            Ap[(size_t)(m / 4) * K * 4 + (size_t)k * 4 + m % 4] = w[(size_t)m * K + k];
                    float *A = s_randn(&r, (size_t)M * ldc, 1.0f);
                    /* double references */
                    double *cd = nn_xmalloc(sizeof(double) * (size_t)M * n);
                    double *dd = nn_xmalloc(sizeof(double) * (size_t)M * K);
                    for (int m = 0; m < M; m++) {
                        for (size_t j = 0; j < n; j++) {
                            double a = 0.0;
                            for (int k = 0; k < K; k++)
                                a += (double)w[(size_t)m * K + k] *
                                     B[(size_t)(k / T) * ldb + toff[k % T] + j];
                            cd[(size_t)m * n + j] = a;
                        }
                        for (int k = 0; k < K; k++) {
                            double a = 0.5; /* D starts at 0.5: shiftdot accumulates */
                            for (size_t j = 0; j < n; j++)
                                a += (double)A[(size_t)m * ldc + j] *
                                     B[(size_t)(k / T) * ldb + toff[k % T] + j];
                            dd[(size_t)m * K + k] = a;
                        }
                    }
                    float *c_ref = s_fill((size_t)M * ldc, NAN), *d_ref = s_fill((size_t)M * K, 0.5f);
                    nn_shiftgemm_ref(c_ref, ldc, Ap, M, B, ldb, nch, toff, T, n);
                    nn_shiftdot_ref(d_ref, (size_t)K, A, ldc, M, B, ldb, nch, toff, T, n);
                    for (int m = 0; m < M; m++) {
                        s_close_d("shiftgemm_ref", c_ref + (size_t)m * ldc, cd + (size_t)m * n, n,
                                  1e-5, 1e-5);
                        for (size_t j = n; j < ldc; j++) /* nothing past n written */
                            assert_true(isnan(c_ref[(size_t)m * ldc + j]));
                    }
                    s_close_d("shiftdot_ref", d_ref, dd, (size_t)M * K, 1e-4, 1e-5);
                    for (int kv = 0; kv < nimpl; kv++) {
                        const s_shift_impl *ki = &impls[kv];
                        float *c = s_fill((size_t)M * ldc, NAN), *dv = s_fill((size_t)M * K, 0.5f);
                        ki->gemm(c, ldc, Ap, M, B, ldb, nch, toff, T, n);
                        ki->dot(dv, (size_t)K, A, ldc, M, B, ldb, nch, toff, T, n);
                        for (int m = 0; m < M; m++) {
                            s_close_f(ki->gemm_name, c + (size_t)m * ldc,
                                      c_ref + (size_t)m * ldc, n, 1e-5, 1e-5);
                            for (size_t j = n; j < ldc; j++)
                                assert_true(isnan(c[(size_t)m * ldc + j]));
                        }
                        s_close_f(ki->dot_name, dv, d_ref, (size_t)M * K, 1e-4, 1e-5);
                        free(c);
                        free(dv);
                    }
                    free(grid);
                    free(w);
                    free(Ap);
                    free(A);
                    free(cd);
                    free(dd);
                    free(c_ref);
                    free(d_ref);
                }
}

/* Batch split over threads (nn_layers_set_threads): conv and EvoNorm give
 * the 1-thread results to float rounding, and bitwise the same results on
 * every run with the same thread count (deterministic reductions). */
static void test_threads(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 15);
    static const int cs[][5] = {{4, 8, 10, 3, 1}, {4, 8, 10, 3, 2}, {4, 8, 10, 1, 2}};
    const int N = 5;
    for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
        int K = cs[t][3];
        nn_conv_dims d = nn_conv_dims_make(N, cs[t][0], cs[t][2], cs[t][2], cs[t][1], K, cs[t][4],
                                           K == 3 ? 1 : 0);
        size_t ni = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.OC * d.C * d.KH * d.KW;
        size_t no = (size_t)d.N * d.OC * d.OH * d.OW;
        float *in = s_randn(&r, ni, 1.0f), *w = s_randn(&r, nw, 0.3f), *R = s_randn(&r, no, 1.0f);
        float *out[3], *din[3], *dw[3];
        for (int run = 0; run < 3; run++) { /* threads 1, 2, 2 */
            nn_layers_set_threads(run == 0 ? 1 : 2);
            float *scratch = s_fill(nn_conv_scratch_floats(&d), NAN);
            out[run] = s_fill(no, NAN);
            din[run] = s_fill(ni, NAN);
            dw[run] = s_fill(nw, 0.25f);
            nn_conv2d_forward(out[run], in, w, NULL, &d, scratch);
            nn_conv2d_backward(din[run], dw[run], NULL, R, in, w, &d, scratch);
            free(scratch);
        }
        s_close_f("threaded conv out", out[1], out[0], no, 1e-5, 1e-5);
        s_close_f("threaded conv din", din[1], din[0], ni, 1e-5, 1e-5);
        s_close_f("threaded conv dw", dw[1], dw[0], nw, 1e-4, 1e-5);
        assert_memory_equal(out[1], out[2], no * sizeof(float));
        assert_memory_equal(din[1], din[2], ni * sizeof(float));
        assert_memory_equal(dw[1], dw[2], nw * sizeof(float));
        for (int run = 0; run < 3; run++)
            free(out[run]), free(din[run]), free(dw[run]);
        free(in), free(w), free(R);
    }
    {
        const int C = 16, HW = 256, G = 4; /* above the threading cutoff */
        size_t n = (size_t)N * C * HW;
        float *x = s_randn(&r, n, 1.0f), *dy = s_randn(&r, n, 1.0f);
        float *gamma = s_randn(&r, C, 1.0f), *beta = s_randn(&r, C, 1.0f), *v = s_randn(&r, C, 1.0f);
        float *out[3], *din[3], *dp[3], istd[3][5 * 4];
        for (int run = 0; run < 3; run++) {
            nn_layers_set_threads(run == 0 ? 1 : 2);
            out[run] = s_fill(n, NAN);
            din[run] = s_fill(n, NAN);
            dp[run] = s_fill(3 * (size_t)C, 0.5f);
            nn_evonorm_s0_forward(out[run], istd[run], x, gamma, beta, v, N, C, HW, G);
            nn_evonorm_s0_backward(din[run], dp[run], dp[run] + C, dp[run] + 2 * C, dy, x,
                                   istd[run], gamma, v, N, C, HW, G);
        }
        assert_memory_equal(out[1], out[0], n * sizeof(float)); /* no cross-sample sums */
        assert_memory_equal(din[1], din[0], n * sizeof(float));
        s_close_f("threaded evonorm dparams", dp[1], dp[0], 3 * (size_t)C, 1e-4, 1e-5);
        assert_memory_equal(dp[1], dp[2], 3 * (size_t)C * sizeof(float));
        for (int run = 0; run < 3; run++)
            free(out[run]), free(din[run]), free(dp[run]);
        free(x), free(dy), free(gamma), free(beta), free(v);
    }
    nn_layers_set_threads(0);
}

/* ---- linear -------------------------------------------------------------------- */

typedef struct {
    int N, F, OF;
    double *in, *w, *b, *R;
} lin_ctx;

static double s_lin_loss(void *ctx)
{
    lin_ctx *c = ctx;
    double l = 0.0;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OF; o++) {
            double a = c->b[o];
            for (int f = 0; f < c->F; f++)
                a += c->in[(size_t)n * c->F + f] * c->w[(size_t)o * c->F + f];
            l += a * c->R[(size_t)n * c->OF + o];
        }
    return l;
}

static void test_linear(void **state)
{
    (void)state;
    static const int cases[][3] = {{4, 7, 3}, {1, 5, 10}, {9, 64, 10}};
    nn_rng r;
    nn_rng_seed(&r, 21);
    for (size_t t = 0; t < 3; t++) {
        const int N = cases[t][0], F = cases[t][1], OF = cases[t][2];
        size_t ni = (size_t)N * F, nw = (size_t)OF * F, no = (size_t)N * OF;
        float *in = s_randn(&r, ni, 1.0f), *w = s_randn(&r, nw, 0.5f), *b = s_randn(&r, OF, 1.0f);
        float *R = s_randn(&r, no, 1.0f);
        lin_ctx c = {N, F, OF, s_to_double(in, ni), s_to_double(w, nw), s_to_double(b, OF),
                     s_to_double(R, no)};
        /* forward vs twin vs double */
        float *out = s_fill(no, NAN), *out_r = s_fill(no, NAN);
        nn_linear_forward(out, in, w, b, N, F, OF);
        nn_linear_forward_ref(out_r, in, w, b, N, F, OF);
        s_close_f("linear forward", out, out_r, no, 1e-5, 1e-5);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OF; o++) {
                double a = c.b[o];
                for (int f = 0; f < F; f++)
                    a += c.in[(size_t)n * F + f] * c.w[(size_t)o * F + f];
                assert_true(fabs(out[(size_t)n * OF + o] - a) <= 1e-5 + 1e-5 * fabs(a));
            }
        nn_linear_forward(out, in, w, NULL, N, F, OF);
        nn_linear_forward_ref(out_r, in, w, NULL, N, F, OF);
        s_close_f("linear forward (no bias)", out, out_r, no, 1e-5, 1e-5);
        /* backward */
        float *dw0 = s_randn(&r, nw, 1.0f), *db0 = s_randn(&r, OF, 1.0f);
        float *din = s_fill(ni, NAN), *dw = s_copy(dw0, nw), *db = s_copy(db0, OF);
        float *din_r = s_fill(ni, NAN), *dw_r = s_copy(dw0, nw), *db_r = s_copy(db0, OF);
        nn_linear_backward(din, dw, db, R, in, w, N, F, OF);
        nn_linear_backward_ref(din_r, dw_r, db_r, R, in, w, N, F, OF);
        s_close_f("linear din", din, din_r, ni, 1e-5, 1e-4);
        s_close_f("linear dw", dw, dw_r, nw, 1e-5, 1e-4);
        s_close_f("linear db", db, db_r, OF, 1e-5, 1e-4);
        s_fd_check("linear din", s_lin_loss, &c, c.in, ni, din, NULL, 1e-3, 1e-4, 1e-3);
        s_fd_check("linear dw", s_lin_loss, &c, c.w, nw, dw, dw0, 1e-3, 1e-4, 1e-3);
        s_fd_check("linear db", s_lin_loss, &c, c.b, OF, db, db0, 1e-3, 1e-4, 1e-3);
        /* din == NULL, db == NULL */
        memcpy(dw, dw0, sizeof(float) * nw);
        nn_linear_backward(NULL, dw, NULL, R, in, w, N, F, OF);
        s_close_f("linear dw (no din)", dw, dw_r, nw, 1e-5, 1e-4);
        free(in), free(w), free(b), free(R), free(out), free(out_r);
        free(dw0), free(db0), free(din), free(dw), free(db), free(din_r), free(dw_r), free(db_r);
        free(c.in), free(c.w), free(c.b), free(c.R);
    }
}

/* ---- EvoNorm-S0 ------------------------------------------------------------------- */

typedef struct {
    int N, C, HW, G;
    double *in, *gamma, *beta, *v, *R;
} evo_ctx;

/* out = x * sigmoid(v x) / sqrt(var_group + 1e-5) * gamma + beta, in double. */
static double s_evo_fwd_d(double *out, double *istd_out, const evo_ctx *c)
{
    const int cpg = c->C / c->G;
    const size_t gsz = (size_t)cpg * c->HW;
    double l = 0.0;
    for (int n = 0; n < c->N; n++)
        for (int g = 0; g < c->G; g++) {
            const size_t base = ((size_t)n * c->C + (size_t)g * cpg) * c->HW;
            double mean = 0.0, var = 0.0;
            for (size_t i = 0; i < gsz; i++)
                mean += c->in[base + i];
            mean /= (double)gsz;
            for (size_t i = 0; i < gsz; i++)
                var += (c->in[base + i] - mean) * (c->in[base + i] - mean);
            var /= (double)gsz;
            double istd = 1.0 / sqrt(var + 1e-5);
            if (istd_out)
                istd_out[(size_t)n * c->G + g] = istd;
            for (size_t i = 0; i < gsz; i++) {
                int ch = g * cpg + (int)(i / (size_t)c->HW);
                double x = c->in[base + i];
                double o = x / (1.0 + exp(-c->v[ch] * x)) * istd * c->gamma[ch] + c->beta[ch];
                if (out)
                    out[base + i] = o;
                if (c->R)
                    l += o * c->R[base + i];
            }
        }
    return l;
}

static double s_evo_loss(void *ctx)
{
    return s_evo_fwd_d(NULL, NULL, ctx);
}

static void test_evonorm(void **state)
{
    (void)state;
    static const int cases[][4] = {{2, 4, 6, 2}, {3, 6, 5, 1}, {2, 4, 9, 4}, {2, 16, 16, 8},
                                   {2, 4, 37, 2}};
    nn_rng r;
    nn_rng_seed(&r, 31);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int N = cases[t][0], C = cases[t][1], HW = cases[t][2], G = cases[t][3];
        const size_t n = (size_t)N * C * HW;
        float *in = s_randn(&r, n, 1.5f), *gamma = s_randn(&r, C, 1.0f);
        float *beta = s_randn(&r, C, 1.0f), *v = s_randn(&r, C, 1.0f), *R = s_randn(&r, n, 1.0f);
        for (size_t i = 0; i < n; i++) /* a per-sample offset: mean must be removed */
            in[i] += (float)(i / ((size_t)C * HW)) * 0.5f;
        evo_ctx c = {N, C, HW, G, s_to_double(in, n), s_to_double(gamma, C), s_to_double(beta, C),
                     s_to_double(v, C), s_to_double(R, n)};
        double *outd = nn_xmalloc(sizeof(double) * n), *istdd = nn_xmalloc(sizeof(double) * N * G);
        s_evo_fwd_d(outd, istdd, &c);
        float *out = s_fill(n, NAN), *istd = s_fill((size_t)N * G, NAN);
        nn_evonorm_s0_forward(out, istd, in, gamma, beta, v, N, C, HW, G);
        s_close_d("evonorm out", out, outd, n, 1e-5, 1e-4);
        s_close_d("evonorm istd", istd, istdd, (size_t)N * G, 0.0, 1e-5);

        float *dg0 = s_randn(&r, C, 1.0f), *db0 = s_randn(&r, C, 1.0f), *dv0 = s_randn(&r, C, 1.0f);
        float *din = s_fill(n, NAN), *dg = s_copy(dg0, C), *db = s_copy(db0, C), *dv = s_copy(dv0, C);
        nn_evonorm_s0_backward(din, dg, db, dv, R, in, istd, gamma, v, N, C, HW, G);
        s_fd_check("evonorm din", s_evo_loss, &c, c.in, n, din, NULL, 1e-3, 1e-4, 2e-3);
        s_fd_check("evonorm dgamma", s_evo_loss, &c, c.gamma, C, dg, dg0, 1e-3, 1e-4, 1e-3);
        s_fd_check("evonorm dbeta", s_evo_loss, &c, c.beta, C, db, db0, 1e-3, 1e-4, 1e-3);
        s_fd_check("evonorm dv", s_evo_loss, &c, c.v, C, dv, dv0, 1e-3, 1e-4, 1e-3);
        /* the plain twins agree with the tuned (SIMD) kernels */
        float *out_r = s_fill(n, NAN), *istd_r = s_fill((size_t)N * G, NAN);
        nn_evonorm_s0_forward_ref(out_r, istd_r, in, gamma, beta, v, N, C, HW, G);
        s_close_f("evonorm out (ref twin)", out, out_r, n, 1e-5, 1e-5);
        s_close_f("evonorm istd (ref twin)", istd, istd_r, (size_t)N * G, 0.0, 1e-5);
        float *din_r = s_fill(n, NAN), *dg_r = s_copy(dg0, C), *db_r = s_copy(db0, C);
        float *dv_r = s_copy(dv0, C);
        nn_evonorm_s0_backward_ref(din_r, dg_r, db_r, dv_r, R, in, istd, gamma, v, N, C, HW, G);
        s_close_f("evonorm din (ref twin)", din, din_r, n, 1e-5, 1e-4);
        s_close_f("evonorm dgamma (ref twin)", dg, dg_r, C, 1e-5, 1e-4);
        s_close_f("evonorm dbeta (ref twin)", db, db_r, C, 1e-5, 1e-4);
        s_close_f("evonorm dv (ref twin)", dv, dv_r, C, 1e-5, 1e-4);
        free(out_r), free(istd_r), free(din_r), free(dg_r), free(db_r), free(dv_r);
        /* din == NULL still accumulates the parameter gradients */
        float *dg2 = s_copy(dg0, C), *db2 = s_copy(db0, C), *dv2 = s_copy(dv0, C);
        nn_evonorm_s0_backward(NULL, dg2, db2, dv2, R, in, istd, gamma, v, N, C, HW, G);
        s_close_f("evonorm dgamma (no din)", dg2, dg, C, 0.0, 0.0);
        s_close_f("evonorm dv (no din)", dv2, dv, C, 0.0, 0.0);
        free(in), free(gamma), free(beta), free(v), free(R), free(outd), free(istdd);
        free(out), free(istd), free(dg0), free(db0), free(dv0), free(din), free(dg), free(db);
        free(dv), free(dg2), free(db2), free(dv2);
        free(c.in), free(c.gamma), free(c.beta), free(c.v), free(c.R);
    }
}

/* Large inputs: sigmoid saturates without producing inf/NaN. */
static void test_evonorm_saturation(void **state)
{
    (void)state;
    const int N = 1, C = 2, HW = 4, G = 1;
    float in[8] = {-200.0f, 150.0f, 90.0f, -100.0f, 1e3f, -1e3f, 0.0f, 3.0f};
    float gamma[2] = {1.0f, 2.0f}, beta[2] = {0.0f, 1.0f}, v[2] = {1.0f, -1.0f};
    float out[8], istd[1], din[8], dg[2] = {0}, db[2] = {0}, dv[2] = {0}, dy[8];
    for (int i = 0; i < 8; i++)
        dy[i] = 1.0f;
    nn_evonorm_s0_forward(out, istd, in, gamma, beta, v, N, C, HW, G);
    nn_evonorm_s0_backward(din, dg, db, dv, dy, in, istd, gamma, v, N, C, HW, G);
    for (int i = 0; i < 8; i++) {
        assert_true(isfinite(out[i]));
        assert_true(isfinite(din[i]));
    }
    for (int i = 0; i < 2; i++)
        assert_true(isfinite(dg[i]) && isfinite(dv[i]) && isfinite(db[i]));
}

/* ---- BatchNorm -------------------------------------------------------------------- */

typedef struct {
    int N, C, HW;
    double *in, *gamma, *beta, *R;
} bn_ctx;

static double s_bn_fwd_d(double *out, double *mean_o, double *var_o, const bn_ctx *c)
{
    const double M = (double)c->N * c->HW;
    double l = 0.0;
    for (int ch = 0; ch < c->C; ch++) {
        double mean = 0.0, var = 0.0;
        for (int n = 0; n < c->N; n++)
            for (int i = 0; i < c->HW; i++)
                mean += c->in[((size_t)n * c->C + ch) * c->HW + i];
        mean /= M;
        for (int n = 0; n < c->N; n++)
            for (int i = 0; i < c->HW; i++) {
                double dl = c->in[((size_t)n * c->C + ch) * c->HW + i] - mean;
                var += dl * dl;
            }
        var /= M;
        if (mean_o)
            mean_o[ch] = mean, var_o[ch] = var;
        for (int n = 0; n < c->N; n++)
            for (int i = 0; i < c->HW; i++) {
                size_t k = ((size_t)n * c->C + ch) * c->HW + i;
                double o = (c->in[k] - mean) / sqrt(var + 1e-5) * c->gamma[ch] + c->beta[ch];
                if (out)
                    out[k] = o;
                if (c->R)
                    l += o * c->R[k];
            }
    }
    return l;
}

static double s_bn_loss(void *ctx)
{
    return s_bn_fwd_d(NULL, NULL, NULL, ctx);
}

static void test_batchnorm(void **state)
{
    (void)state;
    static const int cases[][3] = {{4, 3, 5}, {2, 2, 9}, {1, 3, 6}};
    nn_rng r;
    nn_rng_seed(&r, 41);
    for (size_t t = 0; t < 3; t++) {
        const int N = cases[t][0], C = cases[t][1], HW = cases[t][2];
        const size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
        float *in = s_randn(&r, n, 2.0f), *gamma = s_randn(&r, C, 1.0f);
        float *beta = s_randn(&r, C, 1.0f), *R = s_randn(&r, n, 1.0f);
        for (size_t i = 0; i < n; i++)
            in[i] += 3.0f;
        bn_ctx c = {N, C, HW, s_to_double(in, n), s_to_double(gamma, C), s_to_double(beta, C),
                    s_to_double(R, n)};
        double *outd = nn_xmalloc(sizeof(double) * n), meand[8], vard[8];
        s_bn_fwd_d(outd, meand, vard, &c);
        float *out = s_fill(n, NAN), smean[8], sistd[8], rm[8], rv[8];
        for (int i = 0; i < C; i++)
            rm[i] = 0.5f, rv[i] = 2.0f;
        nn_batchnorm_forward_train(out, smean, sistd, rm, rv, in, gamma, beta, N, C, HW);
        s_close_d("bn out", out, outd, n, 1e-5, 1e-4);
        for (int i = 0; i < C; i++) {
            double want_rm = 0.9 * 0.5 + 0.1 * meand[i];
            double want_rv = 0.9 * 2.0 + 0.1 * vard[i] * (double)M / (double)(M - 1);
            assert_true(fabs(rm[i] - want_rm) <= 1e-5 + 1e-5 * fabs(want_rm));
            assert_true(fabs(rv[i] - want_rv) <= 1e-5 + 1e-5 * fabs(want_rv));
            assert_true(fabs(sistd[i] - 1.0 / sqrt(vard[i] + 1e-5)) <= 1e-5 * sistd[i]);
        }
        /* eval uses the running statistics */
        float *oute = s_fill(n, NAN);
        nn_batchnorm_forward_eval(oute, in, rm, rv, gamma, beta, N, C, HW);
        for (size_t k = 0; k < n; k++) {
            int ch = (int)((k / (size_t)HW) % (size_t)C);
            double want = ((double)in[k] - rm[ch]) / sqrt((double)rv[ch] + 1e-5) * gamma[ch] + beta[ch];
            assert_true(fabs(oute[k] - want) <= 1e-5 + 1e-5 * fabs(want));
        }
        /* backward through the batch statistics */
        float *dg0 = s_randn(&r, C, 1.0f), *db0 = s_randn(&r, C, 1.0f);
        float *din = s_fill(n, NAN), *dg = s_copy(dg0, C), *db = s_copy(db0, C);
        nn_batchnorm_backward(din, dg, db, R, in, smean, sistd, gamma, N, C, HW);
        s_fd_check("bn din", s_bn_loss, &c, c.in, n, din, NULL, 1e-3, 1e-4, 2e-3);
        s_fd_check("bn dgamma", s_bn_loss, &c, c.gamma, C, dg, dg0, 1e-3, 1e-4, 1e-3);
        s_fd_check("bn dbeta", s_bn_loss, &c, c.beta, C, db, db0, 1e-3, 1e-4, 1e-3);
        free(in), free(gamma), free(beta), free(R), free(outd), free(out), free(oute);
        free(dg0), free(db0), free(din), free(dg), free(db);
        free(c.in), free(c.gamma), free(c.beta), free(c.R);
    }
}

/* ---- elementwise, pooling ---------------------------------------------------------- */

static void test_relu_add(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 51);
    const size_t n = 257;
    float *a = s_randn(&r, n, 1.0f), *b = s_randn(&r, n, 1.0f), *dy = s_randn(&r, n, 1.0f);
    float *out = s_fill(n, NAN), *din = s_fill(n, NAN);
    nn_relu_forward(out, a, n);
    nn_relu_backward(din, dy, a, n);
    for (size_t i = 0; i < n; i++) {
        assert_true(out[i] == (a[i] > 0.0f ? a[i] : 0.0f));
        assert_true(din[i] == (a[i] > 0.0f ? dy[i] : 0.0f));
    }
    nn_add_forward(out, a, b, n);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == a[i] + b[i]);
    free(a), free(b), free(dy), free(out), free(din);
}

/* Dropout: the mask keeps about 1-p of the values, out = in * mask / (1-p),
 * the same seed gives the same mask, and din against finite differences of
 * sum(R * out) for that mask. */
typedef struct {
    const uint8_t *mask;
    double *in, *R, scale;
    size_t n;
} dropout_ctx;

static double s_dropout_loss(void *ctx)
{
    dropout_ctx *c = ctx;
    double l = 0.0;
    for (size_t i = 0; i < c->n; i++)
        l += c->mask[i] ? c->R[i] * c->in[i] * c->scale : 0.0;
    return l;
}

static void test_dropout(void **state)
{
    (void)state;
    const size_t n = 4000;
    const float p = 0.25f;
    nn_rng r, r1, r2;
    nn_rng_seed(&r, 61);
    float *x = s_randn(&r, n, 1.0f), *R = s_randn(&r, n, 1.0f);
    float *out = s_fill(n, NAN), *out2 = s_fill(n, NAN), *din = s_fill(n, NAN);
    uint8_t *mask = malloc(n), *mask2 = malloc(n);
    nn_rng_seed(&r1, 5);
    nn_rng_seed(&r2, 5);
    nn_dropout_forward(out, mask, x, n, p, &r1);
    nn_dropout_forward(out2, mask2, x, n, p, &r2);
    assert_memory_equal(mask, mask2, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        kept += mask[i];
        assert_true(out[i] == (mask[i] ? x[i] * (1.0f / (1.0f - p)) : 0.0f));
    }
    assert_true(fabs((double)kept / (double)n - 0.75) < 0.03);
    nn_dropout_backward(din, R, mask, n, p);
    double *xd = malloc(n * sizeof *xd), *Rd = malloc(n * sizeof *Rd);
    for (size_t i = 0; i < n; i++)
        xd[i] = x[i], Rd[i] = R[i];
    dropout_ctx c = {mask, xd, Rd, 1.0 / (1.0 - (double)p), n};
    s_fd_check("dropout din", s_dropout_loss, &c, xd, n, din, NULL, 1e-3, 1e-5, 1e-5);
    free(x), free(R), free(out), free(out2), free(din), free(mask), free(mask2), free(xd),
        free(Rd);
}

typedef struct {
    int N, C, H, W, K, S, max;
    double *in, *R;
} pool_ctx;

static double s_pool_loss(void *ctx)
{
    pool_ctx *c = ctx;
    const int OH = (c->H - c->K) / c->S + 1, OW = (c->W - c->K) / c->S + 1;
    double l = 0.0;
    for (int p = 0; p < c->N * c->C; p++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double acc = c->max ? -INFINITY : 0.0;
                for (int kh = 0; kh < c->K; kh++)
                    for (int kw = 0; kw < c->K; kw++) {
                        double x = c->in[((size_t)p * c->H + oh * c->S + kh) * c->W + ow * c->S + kw];
                        acc = c->max ? (x > acc ? x : acc) : acc + x;
                    }
                if (!c->max)
                    acc /= (double)(c->K * c->K);
                l += acc * c->R[((size_t)p * OH + oh) * OW + ow];
            }
    return l;
}

static void test_pooling(void **state)
{
    (void)state;
    static const int cases[][6] = {{2, 3, 6, 6, 2, 2}, {1, 2, 7, 5, 3, 2}, {2, 1, 5, 5, 2, 1}};
    nn_rng r;
    nn_rng_seed(&r, 61);
    for (size_t t = 0; t < 3; t++) {
        const int N = cases[t][0], C = cases[t][1], H = cases[t][2], W = cases[t][3];
        const int K = cases[t][4], S = cases[t][5];
        const int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
        const size_t ni = (size_t)N * C * H * W, no = (size_t)N * C * OH * OW;
        float *in = s_randn(&r, ni, 1.0f), *R = s_randn(&r, no, 1.0f);
        float *out = s_fill(no, NAN), *din = s_fill(ni, NAN);
        uint32_t *am = nn_xmalloc(sizeof(uint32_t) * no);
        for (int mx = 0; mx < 2; mx++) {
            pool_ctx c = {N, C, H, W, K, S, mx, s_to_double(in, ni), s_to_double(R, no)};
            /* forward: loss of the float output equals the double loss */
            if (mx)
                nn_maxpool_forward(out, am, in, N, C, H, W, K, S);
            else
                nn_avgpool_forward(out, in, N, C, H, W, K, S);
            double l = 0.0;
            for (size_t i = 0; i < no; i++)
                l += (double)out[i] * R[i];
            double ld = s_pool_loss(&c);
            assert_true(fabs(l - ld) <= 1e-5 + 1e-5 * fabs(ld));
            if (mx) {
                for (size_t i = 0; i < no; i++) {
                    size_t pl = i / (size_t)(OH * OW);
                    assert_true(am[i] < (uint32_t)(H * W));
                    assert_true(in[pl * H * W + am[i]] == out[i]);
                }
                nn_maxpool_backward(din, R, am, N, C, H, W, K, S);
            } else {
                nn_avgpool_backward(din, R, N, C, H, W, K, S);
            }
            s_fd_check(mx ? "maxpool din" : "avgpool din", s_pool_loss, &c, c.in, ni, din, NULL,
                       1e-4, 1e-4, 1e-3);
            free(c.in), free(c.R);
        }
        free(in), free(R), free(out), free(din), free(am);
    }
}

/* Ties: the first maximum (in window scan order) receives the gradient. */
static void test_maxpool_ties(void **state)
{
    (void)state;
    float in[4] = {1.0f, 1.0f, 1.0f, 1.0f}, out[1], dy[1] = {2.0f}, din[4];
    uint32_t am[1];
    nn_maxpool_forward(out, am, in, 1, 1, 2, 2, 2, 2);
    assert_int_equal(am[0], 0);
    nn_maxpool_backward(din, dy, am, 1, 1, 2, 2, 2, 2);
    assert_true(din[0] == 2.0f && din[1] == 0.0f && din[2] == 0.0f && din[3] == 0.0f);
}

/* The 2x2/stride-2 path against its twin: values and argmax, with ties
 * (codes on a coarse grid), odd sizes (the last row/column unused) and NaN. */
static void test_maxpool_twin(void **state)
{
    (void)state;
    static const int hw[][2] = {{2, 2}, {8, 6}, {7, 9}, {16, 16}};
    nn_rng r;
    nn_rng_seed(&r, 5);
    for (size_t t = 0; t < sizeof hw / sizeof hw[0]; t++) {
        const int N = 2, C = 3, H = hw[t][0], W = hw[t][1], OH = H / 2, OW = W / 2;
        const size_t ni = (size_t)N * C * H * W, no = (size_t)N * C * OH * OW;
        float *in = nn_xmalloc(ni * sizeof *in), *a = nn_xmalloc(no * sizeof *a);
        float *b = nn_xmalloc(no * sizeof *b);
        uint32_t *ia = nn_xmalloc(no * sizeof *ia), *ib = nn_xmalloc(no * sizeof *ib);
        for (size_t i = 0; i < ni; i++)
            in[i] = (float)nn_rng_below(&r, 4) - 1.0f; /* many ties */
        in[ni / 2] = NAN;
        nn_maxpool_forward(a, ia, in, N, C, H, W, 2, 2);
        nn_maxpool_forward_ref(b, ib, in, N, C, H, W, 2, 2);
        assert_memory_equal(a, b, no * sizeof *a);
        assert_memory_equal(ia, ib, no * sizeof *ia);
        free(in), free(a), free(b), free(ia), free(ib);
    }
}

static void test_gap(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 71);
    const int N = 3, C = 4, HW = 10;
    float *in = s_randn(&r, (size_t)N * C * HW, 1.0f), *dy = s_randn(&r, (size_t)N * C, 1.0f);
    float out[12], *din = s_fill((size_t)N * C * HW, NAN);
    nn_gap_forward(out, in, N, C, HW);
    nn_gap_backward(din, dy, N, C, HW);
    for (int p = 0; p < N * C; p++) {
        double s = 0.0;
        for (int i = 0; i < HW; i++)
            s += in[p * HW + i];
        assert_true(fabs(out[p] - s / HW) <= 1e-6 + 1e-5 * fabs(s / HW));
        /* out is linear: d(sum out*dy)/d in = dy / HW exactly */
        for (int i = 0; i < HW; i++)
            assert_true(fabs(din[p * HW + i] - dy[p] / HW) <= 1e-7);
    }
    free(in), free(dy), free(din);
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

typedef struct {
    int N, K;
    double *z;
    const uint8_t *y;
} xent_ctx;

static double s_xent_loss(void *ctx)
{
    xent_ctx *c = ctx;
    double l = 0.0;
    for (int n = 0; n < c->N; n++) {
        const double *z = c->z + (size_t)n * c->K;
        double mx = z[0], s = 0.0;
        for (int k = 1; k < c->K; k++)
            mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < c->K; k++)
            s += exp(z[k] - mx);
        l += log(s) + mx - z[c->y[n]];
    }
    return l / c->N;
}

static void test_softmax_xent(void **state)
{
    (void)state;
    nn_rng r;
    nn_rng_seed(&r, 81);
    const int N = 5, K = 10;
    float *z = s_randn(&r, (size_t)N * K, 3.0f);
    uint8_t y[5] = {0, 9, 3, 3, 7};
    /* large logits: naive exp would overflow */
    z[0] = 1e4f;
    z[1] = 9990.0f;
    z[K + 2] = -1e4f;
    z[2 * K + 3] = 500.0f;
    z[3 * K + 3] = -800.0f;
    xent_ctx c = {N, K, s_to_double(z, (size_t)N * K), y};
    float probs[50], dz[50];
    float loss = nn_softmax_xent_forward(probs, z, y, N, K);
    double want = s_xent_loss(&c);
    assert_true(isfinite(loss));
    assert_true(fabs(loss - want) <= 1e-4 + 1e-5 * fabs(want));
    for (int n = 0; n < N; n++) {
        double s = 0.0;
        for (int k = 0; k < K; k++) {
            assert_true(isfinite(probs[n * K + k]) && probs[n * K + k] >= 0.0f);
            s += probs[n * K + k];
        }
        assert_true(fabs(s - 1.0) <= 1e-5);
    }
    nn_softmax_xent_backward(dz, probs, y, N, K);
    s_fd_check("xent dlogits", s_xent_loss, &c, c.z, (size_t)N * K, dz, NULL, 1e-3, 1e-5, 1e-3);
    free(z), free(c.z);
}

/* The conv paths of every level below the best (taken on CPUs that stop
 * there) pass the same checks: on x86 AVX2 and AVX-512, on ARM NEON and
 * dot product. */
static void test_lower_paths(void **state)
{
    const nn_cpu_t best = nn_cpu_best();
    for (int lv = 1; lv < (int)best; lv++) {
        assert_int_equal(nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)), 0);
        assert_int_equal(nn_cpu_level(), lv);
        test_conv_forward(state);
        test_conv_backward(state);
        test_conv_resnet_shapes(state);
        test_threads(state);
    }
    nn_cpu_force("auto");
}

/* The portable scalar paths (taken on CPUs without AVX2) pass the same checks. */
static void test_scalar_paths(void **state)
{
    assert_int_equal(nn_cpu_force("portable"), 0);
    assert_int_equal(nn_cpu_level(), NN_CPU_PORTABLE);
    test_conv_forward(state);
    test_conv_backward(state);
    test_evonorm(state);
    test_evonorm_saturation(state);
    nn_cpu_force("auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_forward),
        cmocka_unit_test(test_conv_backward),
        cmocka_unit_test(test_conv_resnet_shapes),
        cmocka_unit_test(test_shift_kernels),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_evonorm),
        cmocka_unit_test(test_evonorm_saturation),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_relu_add),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_maxpool_ties),
        cmocka_unit_test(test_maxpool_twin),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_lower_paths),
        cmocka_unit_test(test_scalar_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
