/* test_lowprec_model — 8-bit models (lowprec/lp_model.h) and the memory
 * sharing of nn_model_prepare.
 *
 * - Integer path vs fake-quant path, whole model, layer by layer: a model
 *   built with lp_factory_int8_checked runs, in every conv / linear / norm,
 *   the integer kernels and the fake-quant twins on the same input (same
 *   codes, same seeds) and passes the integer result on.  Budget per tensor:
 *   |int - fq| <= B*(1e-5*max|fq| + 1e-5*|fq|) with B = 1 for op outputs
 *   (forward, train and eval) and B = 4 for input and parameter gradients
 *   (the fake-quant twins sum up to C*K*K = 2304 products in float, one by
 *   one; measured up to 1.3 on vgg11).  cnn 1x28x28, resnet20 1x28x28 and
 *   3x32x32, vgg11 3x32x32 (small batches).
 * - End to end, two separate models (int8 and fakequant, same init seed, so
 *   same stochastic-rounding seeds): logits agree to float rounding unless
 *   float rounding moved a value across a rounding boundary of a later
 *   quantizer, which then differs by one code step (1/255 of the range);
 *   budget |int - fq| <= 2e-2*max|fq| for logits and 1e-1*max|g| for the
 *   gradient vector (measured <= 0.9% and 3%).
 * - A short int8 training run of the cnn on a synthetic separable problem
 *   lowers the loss clearly (final < 0.5 * first).
 * - nn_model_activation_bytes(int8) / (fp32) <= 0.35 for resnet20 batch 32;
 *   the int8 model's prepared bytes (shared activation storage) are below
 *   fp32's.
 * - Parameter names, shapes and offsets identical between fp32 and int8
 *   models (files and gossip layouts interchangeable); the running input
 *   ranges are model buffers and drive evaluation.
 * - lp_factory_by_name.
 * LPGOSSIP_QUICK=1 shrinks batches (sanitizer runs). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/tk.h"

#include "lowprec/lp_model.h"
#include "nn/nn_model.h"
#include "nn/nn_optim.h"

static nn_model *s_model(const char *arch, int c, int hw, const nn_factory *f, int N)
{
    char err[256];
    nn_model_config cfg = {.in_c = c, .in_h = hw, .in_w = hw, .classes = 10, .factory = f};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", arch);
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    nn_model_init_params(m, 7);
    if (N > 0)
        nn_model_prepare(m, N);
    return m;
}

static float *s_input(int N, int c, int hw, uint64_t seed, uint8_t *labels)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    size_t n = (size_t)N * c * hw * hw;
    float *x = nn_xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = nn_rng_normal(&r);
    for (int i = 0; i < N; i++)
        labels[i] = (uint8_t)nn_rng_below(&r, 10);
    return x;
}

/* ---- layer-by-layer integer vs fake-quant ------------------------------- */

static void s_checked(const char *arch, int c, int hw, int N)
{
    nn_model *m = s_model(arch, c, hw, &lp_factory_int8_checked, N);
    uint8_t y[64];
    float *x = s_input(N, c, hw, 11, y);
    for (int step = 0; step < 2; step++) {
        float loss = nn_model_forward(m, x, y, N, 1);
        assert_true(isfinite(loss));
        float ef = lp_model_check_error(m, LP_CHECK_FORWARD);
        nn_model_backward(m);
        float ed = lp_model_check_error(m, LP_CHECK_DIN);
        float ep = lp_model_check_error(m, LP_CHECK_DPARAM);
        if (!(ef <= 1.0f) || !(ed <= 4.0f) || !(ep <= 4.0f))
            fail_msg("%s %dx%dx%d step %d: forward %.3g (budget 1), din %.3g, dparam %.3g "
                     "(budget 4)", arch, c, hw, hw, step, ef, ed, ep);
        /* a real step, so the second one sees other weights */
        nn_arena *p = nn_model_params(m), *g = nn_model_grads(m);
        for (size_t i = 0; i < p->numel; i++)
            p->data[i] -= 0.05f * g->data[i];
    }
    nn_model_forward(m, x, NULL, N, 0);
    float ee = lp_model_check_error(m, LP_CHECK_FORWARD);
    if (!(ee <= 1.0f))
        fail_msg("%s eval forward: %.3g (budget 1)", arch, ee);
    free(x);
    nn_model_destroy(&m);
}

static void test_checked_cnn(void **state)
{
    (void)state;
    s_checked("cnn", 1, 28, tk_quick() ? 2 : 4);
}

static void test_checked_resnet20_28(void **state)
{
    (void)state;
    s_checked("resnet20", 1, 28, tk_quick() ? 2 : 4);
}

static void test_checked_resnet20_32(void **state)
{
    (void)state;
    s_checked("resnet20", 3, 32, tk_quick() ? 1 : 4);
}

static void test_checked_vgg11(void **state)
{
    (void)state;
    s_checked("vgg11", 3, 32, tk_quick() ? 1 : 2);
}

/* ---- end to end: two models ------------------------------------------------ */

static float s_maxabs(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static void s_close_rel(const float *a, const float *ref, size_t n, float rel, const char *what)
{
    float tol = rel * s_maxabs(ref, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - ref[i]) <= tol))
            fail_msg("%s[%zu]: int8 %.7g, fakequant %.7g (tol %.3g)", what, i, a[i], ref[i], tol);
}

static void s_end_to_end(const char *arch, int c, int hw, int N)
{
    nn_model *a = s_model(arch, c, hw, &lp_factory_int8, N);
    nn_model *b = s_model(arch, c, hw, &lp_factory_fakequant, N);
    uint8_t y[64];
    float *x = s_input(N, c, hw, 5, y);
    float la = nn_model_forward(a, x, y, N, 1), lb = nn_model_forward(b, x, y, N, 1);
    assert_true(fabsf(la - lb) <= 1e-2f * lb);
    s_close_rel(nn_model_logits(a), nn_model_logits(b), (size_t)N * 10, 2e-2f, "train logits");
    nn_model_backward(a);
    nn_model_backward(b);
    s_close_rel(nn_model_grads(a)->data, nn_model_grads(b)->data, nn_model_grads(a)->numel,
                1e-1f, "grads");
    nn_model_forward(a, x, NULL, N, 0);
    nn_model_forward(b, x, NULL, N, 0);
    s_close_rel(nn_model_logits(a), nn_model_logits(b), (size_t)N * 10, 2e-2f, "eval logits");
    free(x);
    nn_model_destroy(&a);
    nn_model_destroy(&b);
}

static void test_end_to_end(void **state)
{
    (void)state;
    int N = tk_quick() ? 2 : 4;
    s_end_to_end("cnn", 1, 28, N);
    s_end_to_end("resnet20", 1, 28, N);
    if (!tk_quick())
        s_end_to_end("resnet20", 3, 32, N);
}

/* ---- training --------------------------------------------------------------- */

/* 4 classes; class k = a fixed random template + noise. */
static void s_batch(nn_rng *r, const float *tmpl, float *x, uint8_t *y, int N, size_t per)
{
    for (int n = 0; n < N; n++) {
        y[n] = (uint8_t)nn_rng_below(r, 4);
        for (size_t i = 0; i < per; i++)
            x[(size_t)n * per + i] = tmpl[y[n] * per + i] + 0.5f * nn_rng_normal(r);
    }
}

static void test_int8_cnn_learns(void **state)
{
    (void)state;
    const int N = 16, hw = 12, steps = tk_quick() ? 25 : 40;
    const size_t per = (size_t)hw * hw;
    nn_model *m = s_model("cnn", 1, hw, &lp_factory_int8, N);
    nn_sgd sgd;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&sgd, nn_model_params(m), &sc);
    nn_rng r;
    nn_rng_seed(&r, 99);
    float *tmpl = nn_xmalloc(4 * per * sizeof *tmpl), *x = nn_xmalloc(N * per * sizeof *x);
    uint8_t y[16];
    for (size_t i = 0; i < 4 * per; i++)
        tmpl[i] = nn_rng_normal(&r);
    double first = 0, last = 0;
    for (int t = 0; t < steps; t++) {
        s_batch(&r, tmpl, x, y, N, per);
        float loss = nn_model_forward(m, x, y, N, 1);
        assert_true(isfinite(loss));
        if (t < 5)
            first += loss / 5.0;
        if (t >= steps - 5)
            last += loss / 5.0;
        nn_model_backward(m);
        nn_sgd_step(&sgd, nn_model_params(m)->data, nn_model_grads(m)->data, 0.02f);
    }
    if (!(last < 0.5 * first))
        fail_msg("int8 cnn did not learn: mean loss %.4f over the first 5 steps, %.4f over "
                 "the last 5", first, last);
    /* evaluation uses the running ranges: the trained model classifies */
    s_batch(&r, tmpl, x, y, N, per);
    nn_model_forward(m, x, NULL, N, 0);
    assert_true(nn_model_correct(m, y, N) >= N * 3 / 4);
    nn_sgd_free(&sgd);
    free(tmpl);
    free(x);
    nn_model_destroy(&m);
}

/* ---- memory ----------------------------------------------------------------- */

static void test_memory(void **state)
{
    (void)state;
    nn_model *f = s_model("resnet20", 3, 32, NULL, 0);
    nn_model *q = s_model("resnet20", 3, 32, &lp_factory_int8, 0);
    size_t af = nn_model_activation_bytes(f, 32), aq = nn_model_activation_bytes(q, 32);
    double ratio = (double)aq / (double)af;
    print_message("resnet20 3x32x32 batch 32: saved activations fp32 %zu B, int8 %zu B (%.3f)\n",
                  af, aq, ratio);
    assert_true(ratio <= 0.35);
    nn_model_prepare(f, 32);
    nn_model_prepare(q, 32);
    size_t pf = nn_model_prepared_bytes(f), pq = nn_model_prepared_bytes(q);
    print_message("prepared: fp32 %zu B, int8 %zu B (%.3f)\n", pf, pq, (double)pq / pf);
    assert_true(pf > af);
    assert_true(pq < pf);
    nn_model_destroy(&f);
    nn_model_destroy(&q);
}

/* Sharing storage must not change results: the int8 model (shared slots)
 * and the checked model (every input kept) give the same logits bit for
 * bit, since the checked model passes the integer results on. */
static void test_shared_storage_same_result(void **state)
{
    (void)state;
    const int N = 2;
    nn_model *a = s_model("resnet20", 1, 28, &lp_factory_int8, N);
    nn_model *b = s_model("resnet20", 1, 28, &lp_factory_int8_checked, N);
    uint8_t y[2];
    float *x = s_input(N, 1, 28, 3, y);
    for (int step = 0; step < 2; step++) {
        nn_model_forward(a, x, y, N, 1);
        nn_model_forward(b, x, y, N, 1);
        assert_memory_equal(nn_model_logits(a), nn_model_logits(b), N * 10 * sizeof(float));
        nn_model_backward(a);
        nn_model_backward(b);
        assert_memory_equal(nn_model_grads(a)->data, nn_model_grads(b)->data,
                            nn_model_grads(a)->numel * sizeof(float));
    }
    free(x);
    nn_model_destroy(&a);
    nn_model_destroy(&b);
}

/* ---- layouts, buffers, names ------------------------------------------------ */

static void test_same_param_layout(void **state)
{
    (void)state;
    static const struct { const char *arch; int c, hw; } cases[] = {
        {"cnn", 1, 28}, {"resnet20", 1, 28}, {"resnet20", 3, 32}, {"vgg11", 3, 32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nn_model *f = s_model(cases[i].arch, cases[i].c, cases[i].hw, NULL, 0);
        nn_model *q = s_model(cases[i].arch, cases[i].c, cases[i].hw, &lp_factory_int8, 0);
        nn_model *z = s_model(cases[i].arch, cases[i].c, cases[i].hw, &lp_factory_fakequant, 0);
        assert_true(nn_arena_same_layout(nn_model_params(f), nn_model_params(q)));
        assert_true(nn_arena_same_layout(nn_model_params(f), nn_model_params(z)));
        /* the same initial values in every precision */
        const nn_arena *pf = nn_model_params(f), *pq = nn_model_params(q);
        for (size_t v = 0; v < pf->nviews; v++) {
            const float *a = nn_arena_ptr(pf, (int)v), *b = nn_arena_ptr(pq, (int)v);
            for (size_t k = 0; k < pf->views[v].numel; k++)
                assert_true(a[k] == b[k]);
        }
        nn_model_destroy(&f);
        nn_model_destroy(&q);
        nn_model_destroy(&z);
    }
}

/* zero_init_residual zeroes gamma of every resnet20 block's last norm (and
 * nothing else) in every precision; off, those gammas start at 1. */
static void test_zero_init_residual(void **state)
{
    (void)state;
    const nn_factory *fs[3] = {NULL, &lp_factory_int8, &lp_factory_fakequant};
    for (int i = 0; i < 3; i++) {
        char err[256];
        nn_model *m[2];
        for (int z = 0; z < 2; z++) {
            nn_model_config cfg = {.in_c = 1, .in_h = 28, .in_w = 28, .classes = 10,
                                   .factory = fs[i], .zero_init_residual = z};
            snprintf(cfg.arch, sizeof cfg.arch, "resnet20");
            m[z] = nn_model_new(&cfg, err, sizeof err);
            if (!m[z])
                fail_msg("%s", err);
            nn_model_init_params(m[z], 7);
        }
        const nn_arena *p0 = nn_model_params(m[0]), *p1 = nn_model_params(m[1]);
        int zeroed_views = 0;
        for (size_t v = 0; v < p0->nviews; v++) {
            const float *a = nn_arena_ptr(p0, (int)v), *b = nn_arena_ptr(p1, (int)v);
            int last_norm = strstr(p0->views[v].name, ".norm2.weight") != NULL;
            zeroed_views += last_norm;
            for (size_t k = 0; k < p0->views[v].numel; k++) {
                if (last_norm) {
                    assert_true(a[k] == 1.0f);
                    assert_true(b[k] == 0.0f);
                } else {
                    assert_true(a[k] == b[k]);
                }
            }
        }
        assert_int_equal(zeroed_views, 9);   /* 3 stages x 3 blocks */
        nn_model_destroy(&m[0]);
        nn_model_destroy(&m[1]);
    }
}

static void test_running_ranges_drive_eval(void **state)
{
    (void)state;
    const int N = 4;
    nn_model *m = s_model("cnn", 1, 28, &lp_factory_int8, N);
    int v = nn_arena_find(nn_model_buffers(m), "conv1.act_range");
    assert_true(v >= 0);
    assert_int_equal(nn_model_buffers(m)->views[v].numel, 2);
    uint8_t y[4];
    float *x = s_input(N, 1, 28, 8, y);
    nn_model_forward(m, x, y, N, 1);
    float *rr = nn_arena_ptr(nn_model_buffers(m), v);
    /* one update from 0: run = 0.9 * batch range of a standard normal input */
    assert_true(rr[0] < -1.0f && rr[1] > 1.0f);
    nn_model_forward(m, x, NULL, N, 0);
    float before[40], again[40];
    memcpy(before, nn_model_logits(m), sizeof before);
    nn_model_forward(m, x, NULL, N, 0);   /* eval is deterministic, ranges fixed */
    assert_memory_equal(before, nn_model_logits(m), sizeof before);
    rr[1] *= 0.5f;
    nn_model_forward(m, x, NULL, N, 0);
    memcpy(again, nn_model_logits(m), sizeof again);
    assert_memory_not_equal(before, again, sizeof before);
    free(x);
    nn_model_destroy(&m);
}

static void test_factory_by_name(void **state)
{
    (void)state;
    assert_null(lp_factory_by_name("fp32"));
    assert_ptr_equal(lp_factory_by_name("int8"), &lp_factory_int8);
    assert_ptr_equal(lp_factory_by_name("fakequant"), &lp_factory_fakequant);
    assert_null(lp_factory_by_name("int4"));
    assert_null(lp_factory_by_name(NULL));
    assert_string_equal(lp_factory_int8.name, "int8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_factory_by_name),
        cmocka_unit_test(test_same_param_layout),
        cmocka_unit_test(test_zero_init_residual),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_running_ranges_drive_eval),
        cmocka_unit_test(test_shared_storage_same_result),
        cmocka_unit_test(test_checked_cnn),
        cmocka_unit_test(test_checked_resnet20_28),
        cmocka_unit_test(test_checked_resnet20_32),
        cmocka_unit_test(test_checked_vgg11),
        cmocka_unit_test(test_end_to_end),
        cmocka_unit_test(test_int8_cnn_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
