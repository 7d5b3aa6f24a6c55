/* test_nn_layers — the FP32 layer kernels of nn/nn_layers.h other than
 * convolution (test_nn_conv.c): linear, EvoNorm-S0, BatchNorm, ReLU and
 * add, dropout, pooling, softmax cross-entropy.
 *
 * Every forward is compared with an independent double-precision reference
 * written here (direct loops), and, for linear, with the library's float
 * _ref twin.  Every backward is compared with central finite differences
 * of loss = sum(out * R) (R random), computed in double through the double
 * reference forwards; linear backward also against its _ref twin.  The
 * header's conventions are checked on the way: parameter gradients
 * accumulate (+=, buffers start non-zero), din is overwritten (buffers
 * start as NaN), scratch may hold garbage (NaN).  Numeric checks are
 * |a - b| <= atol + rtol * |ref|.  The AVX2 kernels and the portable
 * scalar paths (forced through nn_cpu_force) are both checked.
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
        float *in = tk_randn(&r, ni, 1.0f), *w = tk_randn(&r, nw, 0.5f), *b = tk_randn(&r, OF, 1.0f);
        float *R = tk_randn(&r, no, 1.0f);
        lin_ctx c = {N, F, OF, tk_to_double(in, ni), tk_to_double(w, nw), tk_to_double(b, OF),
                     tk_to_double(R, no)};
        /* forward vs twin vs double */
        float *out = tk_fill(no, NAN), *out_r = tk_fill(no, NAN);
        nn_linear_forward(out, in, w, b, N, F, OF);
        nn_linear_forward_ref(out_r, in, w, b, N, F, OF);
        tk_close_f("linear forward", out, out_r, no, 1e-5, 1e-5);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OF; o++) {
                double a = c.b[o];
                for (int f = 0; f < F; f++)
                    a += c.in[(size_t)n * F + f] * c.w[(size_t)o * F + f];
                assert_true(fabs(out[(size_t)n * OF + o] - a) <= 1e-5 + 1e-5 * fabs(a));
            }
        nn_linear_forward(out, in, w, NULL, N, F, OF);
        nn_linear_forward_ref(out_r, in, w, NULL, N, F, OF);
        tk_close_f("linear forward (no bias)", out, out_r, no, 1e-5, 1e-5);
        /* backward */
        float *dw0 = tk_randn(&r, nw, 1.0f), *db0 = tk_randn(&r, OF, 1.0f);
        float *din = tk_fill(ni, NAN), *dw = tk_copy(dw0, nw), *db = tk_copy(db0, OF);
        float *din_r = tk_fill(ni, NAN), *dw_r = tk_copy(dw0, nw), *db_r = tk_copy(db0, OF);
        nn_linear_backward(din, dw, db, R, in, w, N, F, OF);
        nn_linear_backward_ref(din_r, dw_r, db_r, R, in, w, N, F, OF);
        tk_close_f("linear din", din, din_r, ni, 1e-5, 1e-4);
        tk_close_f("linear dw", dw, dw_r, nw, 1e-5, 1e-4);
        tk_close_f("linear db", db, db_r, OF, 1e-5, 1e-4);
        tk_fd_check("linear din", s_lin_loss, &c, c.in, ni, din, NULL, 1e-3, 1e-4, 1e-3);
        tk_fd_check("linear dw", s_lin_loss, &c, c.w, nw, dw, dw0, 1e-3, 1e-4, 1e-3);
        tk_fd_check("linear db", s_lin_loss, &c, c.b, OF, db, db0, 1e-3, 1e-4, 1e-3);
        /* din == NULL, db == NULL */
        memcpy(dw, dw0, sizeof(float) * nw);
        nn_linear_backward(NULL, dw, NULL, R, in, w, N, F, OF);
        tk_close_f("linear dw (no din)", dw, dw_r, nw, 1e-5, 1e-4);
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
        float *in = tk_randn(&r, n, 1.5f), *gamma = tk_randn(&r, C, 1.0f);
        float *beta = tk_randn(&r, C, 1.0f), *v = tk_randn(&r, C, 1.0f), *R = tk_randn(&r, n, 1.0f);
        for (size_t i = 0; i < n; i++) /* a per-sample offset: mean must be removed */
            in[i] += (float)(i / ((size_t)C * HW)) * 0.5f;
        evo_ctx c = {N, C, HW, G, tk_to_double(in, n), tk_to_double(gamma, C), tk_to_double(beta, C),
                     tk_to_double(v, C), tk_to_double(R, n)};
        double *outd = nn_xmalloc(sizeof(double) * n), *istdd = nn_xmalloc(sizeof(double) * N * G);
        s_evo_fwd_d(outd, istdd, &c);
        float *out = tk_fill(n, NAN), *istd = tk_fill((size_t)N * G, NAN);
        nn_evonorm_s0_forward(out, istd, in, gamma, beta, v, N, C, HW, G);
        tk_close_d("evonorm out", out, outd, n, 1e-5, 1e-4);
        tk_close_d("evonorm istd", istd, istdd, (size_t)N * G, 0.0, 1e-5);

        float *dg0 = tk_randn(&r, C, 1.0f), *db0 = tk_randn(&r, C, 1.0f), *dv0 = tk_randn(&r, C, 1.0f);
        float *din = tk_fill(n, NAN), *dg = tk_copy(dg0, C), *db = tk_copy(db0, C), *dv = tk_copy(dv0, C);
        nn_evonorm_s0_backward(din, dg, db, dv, R, in, istd, gamma, v, N, C, HW, G);
        tk_fd_check("evonorm din", s_evo_loss, &c, c.in, n, din, NULL, 1e-3, 1e-4, 2e-3);
        tk_fd_check("evonorm dgamma", s_evo_loss, &c, c.gamma, C, dg, dg0, 1e-3, 1e-4, 1e-3);
        tk_fd_check("evonorm dbeta", s_evo_loss, &c, c.beta, C, db, db0, 1e-3, 1e-4, 1e-3);
        tk_fd_check("evonorm dv", s_evo_loss, &c, c.v, C, dv, dv0, 1e-3, 1e-4, 1e-3);
        /* the plain twins agree with the tuned (SIMD) kernels */
        float *out_r = tk_fill(n, NAN), *istd_r = tk_fill((size_t)N * G, NAN);
        nn_evonorm_s0_forward_ref(out_r, istd_r, in, gamma, beta, v, N, C, HW, G);
        tk_close_f("evonorm out (ref twin)", out, out_r, n, 1e-5, 1e-5);
        tk_close_f("evonorm istd (ref twin)", istd, istd_r, (size_t)N * G, 0.0, 1e-5);
        float *din_r = tk_fill(n, NAN), *dg_r = tk_copy(dg0, C), *db_r = tk_copy(db0, C);
        float *dv_r = tk_copy(dv0, C);
        nn_evonorm_s0_backward_ref(din_r, dg_r, db_r, dv_r, R, in, istd, gamma, v, N, C, HW, G);
        tk_close_f("evonorm din (ref twin)", din, din_r, n, 1e-5, 1e-4);
        tk_close_f("evonorm dgamma (ref twin)", dg, dg_r, C, 1e-5, 1e-4);
        tk_close_f("evonorm dbeta (ref twin)", db, db_r, C, 1e-5, 1e-4);
        tk_close_f("evonorm dv (ref twin)", dv, dv_r, C, 1e-5, 1e-4);
        free(out_r), free(istd_r), free(din_r), free(dg_r), free(db_r), free(dv_r);
        /* din == NULL still accumulates the parameter gradients */
        float *dg2 = tk_copy(dg0, C), *db2 = tk_copy(db0, C), *dv2 = tk_copy(dv0, C);
        nn_evonorm_s0_backward(NULL, dg2, db2, dv2, R, in, istd, gamma, v, N, C, HW, G);
        tk_close_f("evonorm dgamma (no din)", dg2, dg, C, 0.0, 0.0);
        tk_close_f("evonorm dv (no din)", dv2, dv, C, 0.0, 0.0);
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
        float *in = tk_randn(&r, n, 2.0f), *gamma = tk_randn(&r, C, 1.0f);
        float *beta = tk_randn(&r, C, 1.0f), *R = tk_randn(&r, n, 1.0f);
        for (size_t i = 0; i < n; i++)
            in[i] += 3.0f;
        bn_ctx c = {N, C, HW, tk_to_double(in, n), tk_to_double(gamma, C), tk_to_double(beta, C),
                    tk_to_double(R, n)};
        double *outd = nn_xmalloc(sizeof(double) * n), meand[8], vard[8];
        s_bn_fwd_d(outd, meand, vard, &c);
        float *out = tk_fill(n, NAN), smean[8], sistd[8], rm[8], rv[8];
        for (int i = 0; i < C; i++)
            rm[i] = 0.5f, rv[i] = 2.0f;
        nn_batchnorm_forward_train(out, smean, sistd, rm, rv, in, gamma, beta, N, C, HW);
        tk_close_d("bn out", out, outd, n, 1e-5, 1e-4);
        for (int i = 0; i < C; i++) {
            double want_rm = 0.9 * 0.5 + 0.1 * meand[i];
            double want_rv = 0.9 * 2.0 + 0.1 * vard[i] * (double)M / (double)(M - 1);
            assert_true(fabs(rm[i] - want_rm) <= 1e-5 + 1e-5 * fabs(want_rm));
            assert_true(fabs(rv[i] - want_rv) <= 1e-5 + 1e-5 * fabs(want_rv));
            assert_true(fabs(sistd[i] - 1.0 / sqrt(vard[i] + 1e-5)) <= 1e-5 * sistd[i]);
        }
        /* eval uses the running statistics */
        float *oute = tk_fill(n, NAN);
        nn_batchnorm_forward_eval(oute, in, rm, rv, gamma, beta, N, C, HW);
        for (size_t k = 0; k < n; k++) {
            int ch = (int)((k / (size_t)HW) % (size_t)C);
            double want = ((double)in[k] - rm[ch]) / sqrt((double)rv[ch] + 1e-5) * gamma[ch] + beta[ch];
            assert_true(fabs(oute[k] - want) <= 1e-5 + 1e-5 * fabs(want));
        }
        /* backward through the batch statistics */
        float *dg0 = tk_randn(&r, C, 1.0f), *db0 = tk_randn(&r, C, 1.0f);
        float *din = tk_fill(n, NAN), *dg = tk_copy(dg0, C), *db = tk_copy(db0, C);
        nn_batchnorm_backward(din, dg, db, R, in, smean, sistd, gamma, N, C, HW);
        tk_fd_check("bn din", s_bn_loss, &c, c.in, n, din, NULL, 1e-3, 1e-4, 2e-3);
        tk_fd_check("bn dgamma", s_bn_loss, &c, c.gamma, C, dg, dg0, 1e-3, 1e-4, 1e-3);
        tk_fd_check("bn dbeta", s_bn_loss, &c, c.beta, C, db, db0, 1e-3, 1e-4, 1e-3);
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
    float *a = tk_randn(&r, n, 1.0f), *b = tk_randn(&r, n, 1.0f), *dy = tk_randn(&r, n, 1.0f);
    float *out = tk_fill(n, NAN), *din = tk_fill(n, NAN);
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
    float *x = tk_randn(&r, n, 1.0f), *R = tk_randn(&r, n, 1.0f);
    float *out = tk_fill(n, NAN), *out2 = tk_fill(n, NAN), *din = tk_fill(n, NAN);
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
    tk_fd_check("dropout din", s_dropout_loss, &c, xd, n, din, NULL, 1e-3, 1e-5, 1e-5);
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
        float *in = tk_randn(&r, ni, 1.0f), *R = tk_randn(&r, no, 1.0f);
        float *out = tk_fill(no, NAN), *din = tk_fill(ni, NAN);
        uint32_t *am = nn_xmalloc(sizeof(uint32_t) * no);
        for (int mx = 0; mx < 2; mx++) {
            pool_ctx c = {N, C, H, W, K, S, mx, tk_to_double(in, ni), tk_to_double(R, no)};
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
            tk_fd_check(mx ? "maxpool din" : "avgpool din", s_pool_loss, &c, c.in, ni, din, NULL,
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

/* The 2x2/stride-2 path against its twin at the CPU level (the level's row
 * kernel): values and argmax, with ties (codes on a coarse grid), odd sizes
 * (the last row/column unused), rows longer than a vector and NaN. */
static void test_maxpool_twin(void **state)
{
    (void)state;
    static const int hw[][2] = {{2, 2}, {8, 6}, {7, 9}, {16, 16}, {6, 34}, {5, 41}};
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
        for (size_t i = ni / 7; i < ni; i += ni / 5)
            in[i] = NAN; /* a few, in the vector body and tails */
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
    float *in = tk_randn(&r, (size_t)N * C * HW, 1.0f), *dy = tk_randn(&r, (size_t)N * C, 1.0f);
    float out[12], *din = tk_fill((size_t)N * C * HW, NAN);
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
    float *z = tk_randn(&r, (size_t)N * K, 3.0f);
    uint8_t y[5] = {0, 9, 3, 3, 7};
    /* large logits: naive exp would overflow */
    z[0] = 1e4f;
    z[1] = 9990.0f;
    z[K + 2] = -1e4f;
    z[2 * K + 3] = 500.0f;
    z[3 * K + 3] = -800.0f;
    xent_ctx c = {N, K, tk_to_double(z, (size_t)N * K), y};
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
    tk_fd_check("xent dlogits", s_xent_loss, &c, c.z, (size_t)N * K, dz, NULL, 1e-3, 1e-5, 1e-3);
    free(z), free(c.z);
}

/* The portable scalar paths (taken on CPUs without AVX2) pass the same checks. */
static void test_scalar_paths(void **state)
{
    assert_int_equal(nn_cpu_force("portable"), 0);
    assert_int_equal(nn_cpu_level(), NN_CPU_PORTABLE);
    test_evonorm(state);
    test_evonorm_saturation(state);
    nn_cpu_force("auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
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
        cmocka_unit_test(test_scalar_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
