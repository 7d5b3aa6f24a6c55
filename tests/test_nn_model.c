/* test_nn_model — the op graph as a whole: resnet20 forward and backward
 * against PyTorch (tests/fixtures/make_resnet20_golden.py), whole-model
 * gradients against central finite differences, the optimizer's formulas,
 * learning-rate schedules, and "no allocation inside a training step". */
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/nn_model.h"
#include "nn/nn_optim.h"
#include "nn/nn_safetensors.h"

/* C twin of fixture_value() in tests/fixtures/make_resnet20_golden.py. */
static double s_fixture_value(const nn_view *v, size_t i)
{
    unsigned long h = 0;
    for (const unsigned char *p = (const unsigned char *)v->name; *p; p++)
        h = (h * 131 + *p) % 1000003;
    double phase = (double)(h % 1000) / 1000.0 * 2.0 * M_PI;
    double s = sin(0.61 * (double)i + phase);
    size_t len = strlen(v->name);
    if (v->ndim == 4)
        return sqrt(2.0 / (v->shape[0] * v->shape[2] * v->shape[3])) * 1.4 * s;
    if (v->ndim == 2)
        return 1.0 / sqrt((double)v->shape[1]) * 1.4 * s;
    if (len > 5 && strcmp(v->name + len - 5, ".bias") == 0)
        return 0.1 * s;
    return 1.0 + 0.1 * s;
}

static int s_close(double a, double ref, double atol, double rtol)
{
    return fabs(a - ref) <= atol + rtol * fabs(ref);
}

static void test_resnet20_matches_pytorch(void **state)
{
    (void)state;
    char err[512];
    nn_model_config cfg = {.arch = "resnet20", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    assert_non_null(m);
    nn_arena *P = nn_model_params(m), *G = nn_model_grads(m);
    assert_int_equal(P->numel, 272970); /* as PyTorch counts it */
    for (size_t v = 0; v < P->nviews; v++) {
        float *p = nn_arena_ptr(P, (int)v);
        for (size_t i = 0; i < P->views[v].numel; i++)
            p[i] = (float)s_fixture_value(&P->views[v], i);
    }
    /* The fixture: input, labels, logits, loss and grad.<name> per parameter. */
    nn_arena fx;
    nn_arena_init(&fx);
    int vin = nn_arena_add(&fx, "input", 4, (int[]){2, 1, 28, 28});
    int vlab = nn_arena_add(&fx, "labels", 1, (int[]){2});
    int vlog = nn_arena_add(&fx, "logits", 2, (int[]){2, 10});
    int vloss = nn_arena_add(&fx, "loss", 1, (int[]){1});
    for (size_t v = 0; v < P->nviews; v++) {
        char name[NN_NAME_MAX + 8];
        snprintf(name, sizeof name, "grad.%s", P->views[v].name);
        nn_arena_add(&fx, name, P->views[v].ndim, P->views[v].shape);
    }
    nn_arena_alloc(&fx);
    nn_arena *arenas[1] = {&fx};
    int rc = nn_safetensors_load("tests/fixtures/resnet20_golden.safetensors", arenas, 1, err,
                                 sizeof err);
    if (rc != 0)
        fail_msg("fixture: %s", err);
    uint8_t labels[2];
    for (int i = 0; i < 2; i++)
        labels[i] = (uint8_t)nn_arena_ptr(&fx, vlab)[i];
    nn_model_prepare(m, 2);
    float loss = nn_model_forward(m, nn_arena_ptr(&fx, vin), labels, 2, 1);
    const float *lg = nn_model_logits(m), *ref = nn_arena_ptr(&fx, vlog);
    for (int i = 0; i < 20; i++)
        if (!s_close(lg[i], ref[i], 1e-4, 1e-3))
            fail_msg("logit %d: %.7f vs PyTorch %.7f", i, lg[i], ref[i]);
    assert_true(s_close(loss, nn_arena_ptr(&fx, vloss)[0], 1e-5, 1e-4));
    nn_model_backward(m);
    /* Gradients: every element within atol + rtol*|ref|, atol scaled to the
     * tensor's own magnitude (float32 vs float64 through 20 layers). */
    for (size_t v = 0; v < P->nviews; v++) {
        const float *g = nn_arena_ptr(G, (int)v), *gr = nn_arena_ptr(&fx, (int)v + 4);
        size_t n = P->views[v].numel;
        double maxref = 0;
        for (size_t i = 0; i < n; i++)
            maxref = fmax(maxref, fabs(gr[i]));
        for (size_t i = 0; i < n; i++)
            if (!s_close(g[i], gr[i], 1e-3 * maxref + 1e-7, 1e-2))
                fail_msg("grad %s[%zu]: %.7g vs PyTorch %.7g (max |ref| %.3g)", P->views[v].name,
                         i, g[i], gr[i], maxref);
    }
    nn_arena_free(&fx);
    nn_model_destroy(&m);
}

/* Loss of the model at its current parameters for a fixed batch. */
static double s_loss(nn_model *m, const float *x, const uint8_t *y, int N)
{
    return nn_model_forward(m, x, y, N, 1);
}

/* Central differences on a sample of parameters of a whole model. */
static void s_check_model_grads(const char *arch, nn_norm_kind norm, int c, int h, int w)
{
    char err[256];
    nn_model_config cfg = {.in_c = c, .in_h = h, .in_w = w, .classes = 5, .norm = norm};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", arch);
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    assert_non_null(m);
    nn_model_init_params(m, 42);
    const int N = 3;
    nn_model_prepare(m, N);
    nn_rng r;
    nn_rng_seed(&r, 7);
    size_t nx = (size_t)N * c * h * w;
    float *x = malloc(nx * sizeof *x);
    for (size_t i = 0; i < nx; i++)
        x[i] = nn_rng_normal(&r);
    uint8_t y[3] = {0, 3, 4};
    nn_arena *P = nn_model_params(m), *G = nn_model_grads(m);
    /* Perturb gamma/beta/v of norms so they are not at their init values. */
    for (size_t i = 0; i < P->numel; i++)
        P->data[i] += 0.05f * nn_rng_normal(&r);
    s_loss(m, x, y, N);
    nn_model_backward(m);
    float *g = malloc(P->numel * sizeof *g);
    memcpy(g, G->data, P->numel * sizeof *g);
    int checked = 0, skipped = 0;
    for (size_t v = 0; v < P->nviews; v++) {
        /* Three entries of every tensor. */
        for (int t = 0; t < 3; t++) {
            size_t i = P->views[v].offset + nn_rng_below(&r, (uint32_t)P->views[v].numel);
            float orig = P->data[i];
            double fd[2];
            for (int k = 0; k < 2; k++) {
                const float hstep = k ? 1e-3f : 2e-3f;
                P->data[i] = orig + hstep;
                double lp = s_loss(m, x, y, N);
                P->data[i] = orig - hstep;
                double lm = s_loss(m, x, y, N);
                P->data[i] = orig;
                fd[k] = (lp - lm) / (2.0 * hstep);
            }
            /* Max-pool and ReLU switch inside the step: there the two
             * differences disagree and the entry says nothing. */
            if (!s_close(fd[0], fd[1], 3e-4, 2e-2)) {
                skipped++;
                continue;
            }
            if (!s_close(g[i], fd[1], 5e-4, 3e-2))
                fail_msg("%s/%d: d loss / d %s[%zu] = %.6g, finite difference %.6g", arch,
                         (int)norm, P->views[v].name, i - P->views[v].offset, g[i], fd[1]);
            checked++;
        }
    }
    assert_true(checked >= 9);
    if (skipped * 5 > checked + skipped)
        fail_msg("%s: %d of %d entries non-smooth", arch, skipped, checked + skipped);
    free(g);
    free(x);
    nn_model_destroy(&m);
}

static void test_cnn_grads_evonorm(void **state)
{
    (void)state;
    s_check_model_grads("cnn", NN_NORM_EVONORM, 1, 8, 8);
}

static void test_cnn_grads_batchnorm(void **state)
{
    (void)state;
    s_check_model_grads("cnn", NN_NORM_BATCHNORM, 2, 8, 12);
}

static void test_resnet20_grads_small(void **state)
{
    (void)state;
    s_check_model_grads("resnet20", NN_NORM_EVONORM, 3, 8, 8);
}

static void test_unknown_arch_and_bad_shapes(void **state)
{
    (void)state;
    char err[256];
    nn_model_config cfg = {.arch = "resnet56", .in_c = 1, .in_h = 28, .in_w = 28, .classes = 10};
    assert_null(nn_model_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "unknown model 'resnet56'"));
    snprintf(cfg.arch, sizeof cfg.arch, "vgg11");
    assert_null(nn_model_new(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "32x32"));
    cfg.in_h = cfg.in_w = 32;
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    assert_non_null(m);
    nn_model_destroy(&m);
    assert_null(m);
}

/* After the first step, a training step allocates nothing: the heap in use
 * is the same after every further step. */
static void test_no_allocation_in_step(void **state)
{
    (void)state;
    char err[256];
    nn_model_config cfg = {.arch = "resnet20", .in_c = 1, .in_h = 8, .in_w = 8, .classes = 10};
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    nn_model_init_params(m, 1);
    nn_model_prepare(m, 4);
    nn_sgd sgd;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&sgd, nn_model_params(m), &sc);
    float x[4 * 64];
    for (int i = 0; i < 4 * 64; i++)
        x[i] = sinf((float)i);
    uint8_t y[4] = {1, 2, 3, 4};
    size_t used = 0;
    for (int step = 0; step < 4; step++) {
        nn_model_forward(m, x, y, 4, 1);
        nn_model_backward(m);
        nn_sgd_step(&sgd, nn_model_params(m)->data, nn_model_grads(m)->data, 0.01f);
        struct mallinfo2 mi = mallinfo2();
        if (step == 1)
            used = mi.uordblks;
        else if (step > 1)
            assert_int_equal(mi.uordblks, used);
    }
    nn_sgd_free(&sgd);
    nn_model_destroy(&m);
}

static void test_sgd_nesterov_formula(void **state)
{
    (void)state;
    nn_arena a;
    nn_arena_init(&a);
    nn_arena_add(&a, "w", 1, (int[]){3});
    nn_arena_alloc(&a);
    float x[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, 0.2f, -0.3f};
    double xd[3] = {1.0, -2.0, 0.5}, buf[3] = {0, 0, 0};
    nn_sgd s;
    nn_sgd_config c = {.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = 1};
    nn_sgd_init(&s, &a, &c);
    for (int step = 0; step < 5; step++) {
        nn_sgd_step(&s, x, g, 0.1f);
        for (int i = 0; i < 3; i++) { /* PyTorch's SGD(nesterov=True) */
            double d = g[i] + 0.01 * xd[i];
            buf[i] = 0.9 * buf[i] + d;
            xd[i] -= 0.1 * (d + 0.9 * buf[i]);
        }
    }
    for (int i = 0; i < 3; i++)
        assert_true(s_close(x[i], xd[i], 1e-6, 1e-5));
    nn_sgd_free(&s);
    nn_arena_free(&a);
}

static void test_qgm_momentum_update(void **state)
{
    (void)state;
    nn_arena a;
    nn_arena_init(&a);
    nn_arena_add(&a, "w", 1, (int[]){2});
    nn_arena_alloc(&a);
    nn_sgd s;
    nn_sgd_config c = {.momentum = 0.9f, .weight_decay = 0, .nesterov = 0, .qgm = 1,
                       .qgm_beta = 0.9f};
    nn_sgd_init(&s, &a, &c);
    float x[2] = {1, 2}, g[2] = {1, -1};
    nn_sgd_step(&s, x, g, 0.5f);     /* m = 0: plain step, x = {0.5, 2.5} */
    assert_true(s_close(x[0], 0.5, 1e-7, 0) && s_close(x[1], 2.5, 1e-7, 0));
    float mixed[2] = {0.6f, 2.2f};   /* pretend gossip moved x */
    nn_sgd_after_mix(&s, mixed);     /* m = 0.1 * (x_t - x_{t+1}) / lr */
    assert_true(s_close(s.mom.data[0], 0.1 * (1 - 0.6) / 0.5, 1e-6, 0));
    assert_true(s_close(s.mom.data[1], 0.1 * (2 - 2.2) / 0.5, 1e-6, 0));
    nn_sgd_free(&s);
    nn_arena_free(&a);
}

static void test_lr_schedule(void **state)
{
    (void)state;
    nn_lr_schedule s = {.base_lr = 0.1f, .warmup_epochs = 1, .gamma = 0.1f};
    char err[128];
    assert_int_equal(nn_lr_parse_milestones(&s, "3,6", err, sizeof err), 0);
    assert_true(s_close(nn_lr_at(&s, 0), 0.01, 1e-7, 0));
    assert_true(s_close(nn_lr_at(&s, 0.5), 0.055, 1e-7, 1e-6));
    assert_true(s_close(nn_lr_at(&s, 1), 0.1, 1e-7, 0));
    assert_true(s_close(nn_lr_at(&s, 3), 0.01, 1e-8, 1e-6));
    assert_true(s_close(nn_lr_at(&s, 7), 0.001, 1e-9, 1e-6));
    assert_int_equal(nn_lr_parse_milestones(&s, "5,2", err, sizeof err), -1);
    assert_non_null(strstr(err, "increase"));
    assert_int_equal(nn_lr_parse_milestones(&s, "x", err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet20_matches_pytorch),
        cmocka_unit_test(test_cnn_grads_evonorm),
        cmocka_unit_test(test_cnn_grads_batchnorm),
        cmocka_unit_test(test_resnet20_grads_small),
        cmocka_unit_test(test_unknown_arch_and_bad_shapes),
        cmocka_unit_test(test_no_allocation_in_step),
        cmocka_unit_test(test_sgd_nesterov_formula),
        cmocka_unit_test(test_qgm_momentum_update),
        cmocka_unit_test(test_lr_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
