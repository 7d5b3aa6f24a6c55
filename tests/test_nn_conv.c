/* test_nn_conv — the FP32 convolution kernels of nn/nn_layers.h.
 *
 * Every forward is compared with an independent double-precision reference
 * written here (direct loops) and with the library's float _ref twin;
 * every backward with central finite differences of loss = sum(out * R)
 * (R random), computed in double through the double reference forward, and
 * with the _ref twins.  The header's conventions are checked on the way:
 * parameter gradients accumulate (+=, buffers start non-zero), din is
 * overwritten (buffers start as NaN), scratch may hold garbage (NaN).
 * The shift kernels and the thread split are checked at every CPU level,
 * the portable scalar paths forced through nn_cpu_force.  The other
 * layers: test_nn_layers.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/tk.h"
#include "tests/tk_num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_kern.h"
#include "nn/nn_core.h"
#include "nn/nn_layers.h"
#include "nn/nn_layers_simd.h"

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
        float *in = tk_randn(&r, ni, 1.0f), *w = tk_randn(&r, nw, 0.5f), *b = tk_randn(&r, d.OC, 1.0f);
        float *ref = tk_fill(no, NAN);
        double *refd = nn_xmalloc(sizeof(double) * no);
        for (int with_b = 0; with_b < 2; with_b++) {
            conv_ctx c = {d, tk_to_double(in, ni), tk_to_double(w, nw),
                          with_b ? tk_to_double(b, d.OC) : NULL, NULL};
            s_conv_fwd_d(refd, &c);
            nn_conv2d_forward_ref(ref, in, w, with_b ? b : NULL, &d);
            tk_close_d("conv_forward_ref", ref, refd, no, 1e-5, 1e-5);
            /* default chunking and explicit chunk sizes, incl. non-divisors */
            for (int nb = 0; nb <= d.N + 1; nb++) {
                size_t ns = nb == 0 ? nn_conv_scratch_floats(&d) : nn_conv_scratch_floats_nb(&d, nb);
                float *scratch = tk_fill(ns, NAN);
                float *out = tk_fill(no, NAN);
                if (nb == 0)
                    nn_conv2d_forward(out, in, w, with_b ? b : NULL, &d, scratch);
                else
                    nn_conv2d_forward_nb(out, in, w, with_b ? b : NULL, &d, scratch, nb);
                tk_close_f("conv_forward", out, ref, no, 1e-5, 1e-4);
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
        float *in = tk_randn(&r, ni, 1.0f), *w = tk_randn(&r, nw, 0.5f), *b = tk_randn(&r, d.OC, 1.0f);
        float *R = tk_randn(&r, no, 1.0f);
        float *dw0 = tk_randn(&r, nw, 1.0f), *db0 = tk_randn(&r, d.OC, 1.0f);

        /* reference twin */
        float *din_r = tk_fill(ni, NAN), *dw_r = tk_copy(dw0, nw), *db_r = tk_copy(db0, d.OC);
        nn_conv2d_backward_ref(din_r, dw_r, db_r, R, in, w, &d);

        /* finite differences on the reference twin's gradients */
        conv_ctx c = {d, tk_to_double(in, ni), tk_to_double(w, nw), tk_to_double(b, d.OC),
                      tk_to_double(R, no)};
        tk_fd_check("conv din", s_conv_loss, &c, c.in, ni, din_r, NULL, 1e-3, 1e-4, 1e-3);
        tk_fd_check("conv dw", s_conv_loss, &c, c.w, nw, dw_r, dw0, 1e-3, 1e-4, 1e-3);
        tk_fd_check("conv db", s_conv_loss, &c, c.b, d.OC, db_r, db0, 1e-3, 1e-4, 1e-3);

        for (int nb = 0; nb <= d.N + 1; nb++) {
            size_t ns = nb == 0 ? nn_conv_scratch_floats(&d) : nn_conv_scratch_floats_nb(&d, nb);
            for (int with_din = 0; with_din < 2; with_din++) {
                float *scratch = tk_fill(ns, NAN);
                float *din = tk_fill(ni, NAN), *dw = tk_copy(dw0, nw), *db = tk_copy(db0, d.OC);
                float *dinp = with_din ? din : NULL;
                if (nb == 0)
                    nn_conv2d_backward(dinp, dw, db, R, in, w, &d, scratch);
                else
                    nn_conv2d_backward_nb(dinp, dw, db, R, in, w, &d, scratch, nb);
                if (with_din)
                    tk_close_f("conv din", din, din_r, ni, 1e-5, 1e-4);
                else
                    for (size_t i = 0; i < ni; i++)
                        assert_true(isnan(din[i])); /* untouched */
                tk_close_f("conv dw", dw, dw_r, nw, 1e-4, 1e-4);
                tk_close_f("conv db", db, db_r, d.OC, 1e-4, 1e-4);
                free(scratch);
                free(din);
                free(dw);
                free(db);
            }
        }
        /* db == NULL leaves the bias alone and still gives dw */
        {
            float *scratch = tk_fill(nn_conv_scratch_floats(&d), NAN);
            float *dw = tk_copy(dw0, nw);
            nn_conv2d_backward(NULL, dw, NULL, R, in, w, &d, scratch);
            tk_close_f("conv dw (no db)", dw, dw_r, nw, 1e-4, 1e-4);
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
        float *in = tk_randn(&r, ni, 1.0f), *w = tk_randn(&r, nw, 0.1f), *R = tk_randn(&r, no, 1.0f);
        float *out = tk_fill(no, NAN), *out_r = tk_fill(no, NAN);
        float *scratch = tk_fill(nn_conv_scratch_floats(&d), NAN);
        nn_conv2d_forward(out, in, w, NULL, &d, scratch);
        nn_conv2d_forward_ref(out_r, in, w, NULL, &d);
        tk_close_f("resnet conv forward", out, out_r, no, 1e-4, 1e-4);
        float *din = tk_fill(ni, NAN), *din_r = tk_fill(ni, NAN);
        float *dw = tk_fill(nw, 0.0f), *dw_r = tk_fill(nw, 0.0f);
        nn_conv2d_backward(din, dw, NULL, R, in, w, &d, scratch);
        nn_conv2d_backward_ref(din_r, dw_r, NULL, R, in, w, &d);
        tk_close_f("resnet conv din", din, din_r, ni, 1e-4, 1e-4);
        tk_close_f("resnet conv dw", dw, dw_r, nw, 1e-3, 1e-4);
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
                    float *grid = tk_randn(&r, (size_t)nch * ldb, 1.0f);
                    const float *B = grid + margin;
                    float *w = tk_randn(&r, (size_t)M * K, 1.0f);
                    float *Ap = tk_fill(nn_shift_pack_size(M, K), 0.0f);
                    for (int m = 0; m < M; m++)
                        for (int k = 0; k < K; k++)
                            Ap[(size_t)(m / 4) * K * 4 + (size_t)k * 4 + m % 4] = w[(size_t)m * K + k];
                    float *A = tk_randn(&r, (size_t)M * ldc, 1.0f);
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
                    float *c_ref = tk_fill((size_t)M * ldc, NAN), *d_ref = tk_fill((size_t)M * K, 0.5f);
                    nn_shiftgemm_ref(c_ref, ldc, Ap, M, B, ldb, nch, toff, T, n);
                    nn_shiftdot_ref(d_ref, (size_t)K, A, ldc, M, B, ldb, nch, toff, T, n);
                    for (int m = 0; m < M; m++) {
                        tk_close_d("shiftgemm_ref", c_ref + (size_t)m * ldc, cd + (size_t)m * n, n,
                                  1e-5, 1e-5);
                        for (size_t j = n; j < ldc; j++) /* nothing past n written */
                            assert_true(isnan(c_ref[(size_t)m * ldc + j]));
                    }
                    tk_close_d("shiftdot_ref", d_ref, dd, (size_t)M * K, 1e-4, 1e-5);
                    for (int kv = 0; kv < nimpl; kv++) {
                        const s_shift_impl *ki = &impls[kv];
                        float *c = tk_fill((size_t)M * ldc, NAN), *dv = tk_fill((size_t)M * K, 0.5f);
                        ki->gemm(c, ldc, Ap, M, B, ldb, nch, toff, T, n);
                        ki->dot(dv, (size_t)K, A, ldc, M, B, ldb, nch, toff, T, n);
                        for (int m = 0; m < M; m++) {
                            tk_close_f(ki->gemm_name, c + (size_t)m * ldc,
                                      c_ref + (size_t)m * ldc, n, 1e-5, 1e-5);
                            for (size_t j = n; j < ldc; j++)
                                assert_true(isnan(c[(size_t)m * ldc + j]));
                        }
                        tk_close_f(ki->dot_name, dv, d_ref, (size_t)M * K, 1e-4, 1e-5);
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
        float *in = tk_randn(&r, ni, 1.0f), *w = tk_randn(&r, nw, 0.3f), *R = tk_randn(&r, no, 1.0f);
        float *out[3], *din[3], *dw[3];
        for (int run = 0; run < 3; run++) { /* threads 1, 2, 2 */
            nn_layers_set_threads(run == 0 ? 1 : 2);
            float *scratch = tk_fill(nn_conv_scratch_floats(&d), NAN);
            out[run] = tk_fill(no, NAN);
            din[run] = tk_fill(ni, NAN);
            dw[run] = tk_fill(nw, 0.25f);
            nn_conv2d_forward(out[run], in, w, NULL, &d, scratch);
            nn_conv2d_backward(din[run], dw[run], NULL, R, in, w, &d, scratch);
            free(scratch);
        }
        tk_close_f("threaded conv out", out[1], out[0], no, 1e-5, 1e-5);
        tk_close_f("threaded conv din", din[1], din[0], ni, 1e-5, 1e-5);
        tk_close_f("threaded conv dw", dw[1], dw[0], nw, 1e-4, 1e-5);
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
        float *x = tk_randn(&r, n, 1.0f), *dy = tk_randn(&r, n, 1.0f);
        float *gamma = tk_randn(&r, C, 1.0f), *beta = tk_randn(&r, C, 1.0f), *v = tk_randn(&r, C, 1.0f);
        float *out[3], *din[3], *dp[3], istd[3][5 * 4];
        for (int run = 0; run < 3; run++) {
            nn_layers_set_threads(run == 0 ? 1 : 2);
            out[run] = tk_fill(n, NAN);
            din[run] = tk_fill(n, NAN);
            dp[run] = tk_fill(3 * (size_t)C, 0.5f);
            nn_evonorm_s0_forward(out[run], istd[run], x, gamma, beta, v, N, C, HW, G);
            nn_evonorm_s0_backward(din[run], dp[run], dp[run] + C, dp[run] + 2 * C, dy, x,
                                   istd[run], gamma, v, N, C, HW, G);
        }
        assert_memory_equal(out[1], out[0], n * sizeof(float)); /* no cross-sample sums */
        assert_memory_equal(din[1], din[0], n * sizeof(float));
        tk_close_f("threaded evonorm dparams", dp[1], dp[0], 3 * (size_t)C, 1e-4, 1e-5);
        assert_memory_equal(dp[1], dp[2], 3 * (size_t)C * sizeof(float));
        for (int run = 0; run < 3; run++)
            free(out[run]), free(din[run]), free(dp[run]);
        free(x), free(dy), free(gamma), free(beta), free(v);
    }
    nn_layers_set_threads(0);
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
        cmocka_unit_test(test_lower_paths),
        cmocka_unit_test(test_scalar_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
