/* bench_precision — FP32 vs 8-bit training step, one run, same threads.
 *
 * For resnet20 and vgg11 on 3x32x32 inputs, batch 32: median ms per
 * training step (forward + backward + SGD update) with the FP32 ops and with
 * the int8 ops (lowprec/lp_model.h), the saved-activation bytes
 * (nn_model_activation_bytes) and the bytes nn_model_prepare allocated, and
 * the int8/fp32 ratios (goal: step <= 0.7 for resnet20 with 1 thread).
 * Usage: bench_precision [steps (default 10)] [threads (default 1)]. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowprec/lp_cpu.h"
#include "lowprec/lp_model.h"
#include "nn/nn_model.h"
#include "nn/nn_optim.h"

typedef struct {
    double ms;
    size_t act, prep;
} s_result;

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static s_result s_run(const char *arch, const nn_factory *f, int batch, int steps)
{
    char err[256];
    nn_model_config cfg = {.in_c = 3, .in_h = 32, .in_w = 32, .classes = 10, .factory = f};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", arch);
    nn_model *m = nn_model_new(&cfg, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    nn_model_init_params(m, 1);
    nn_model_prepare(m, batch);
    nn_sgd sgd;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&sgd, nn_model_params(m), &sc);
    size_t nx = (size_t)batch * 3 * 32 * 32;
    float *x = malloc(nx * sizeof *x);
    uint8_t *y = malloc((size_t)batch);
    nn_rng r;
    nn_rng_seed(&r, 3);
    for (size_t i = 0; i < nx; i++)
        x[i] = nn_rng_normal(&r);
    for (int i = 0; i < batch; i++)
        y[i] = (uint8_t)nn_rng_below(&r, 10);
    double *t = malloc((size_t)steps * sizeof *t);
    for (int i = 0; i < steps + 2; i++) {
        double t0 = nn_now();
        nn_model_forward(m, x, y, batch, 1);
        nn_model_backward(m);
        nn_sgd_step(&sgd, nn_model_params(m)->data, nn_model_grads(m)->data, 0.01f);
        if (i >= 2)
            t[i - 2] = nn_now() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, s_cmp);
    s_result res = {1000 * t[steps / 2], nn_model_activation_bytes(m, batch),
                    nn_model_prepared_bytes(m)};
    free(t);
    free(x);
    free(y);
    nn_sgd_free(&sgd);
    nn_model_destroy(&m);
    return res;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10, threads = argc > 2 ? atoi(argv[2]) : 1;
    const int batch = 32;
    if (steps < 1)
        steps = 1;
    openblas_set_num_threads(threads);
    printf("lowprec level %s, OpenBLAS %s, %d thread(s), batch %d, 3x32x32, median of %d steps\n",
           lp_cpu_name(lp_cpu_level()), openblas_get_corename(), threads, batch, steps);
    printf("%-9s %-5s %10s %14s %14s\n", "model", "prec", "ms/step", "saved act B", "prepared B");
    static const char *archs[2] = {"resnet20", "vgg11"};
    for (int a = 0; a < 2; a++) {
        s_result f = s_run(archs[a], NULL, batch, steps);
        printf("%-9s %-5s %10.2f %14zu %14zu\n", archs[a], "fp32", f.ms, f.act, f.prep);
        fflush(stdout);
        s_result q = s_run(archs[a], &lp_factory_int8, batch, steps);
        printf("%-9s %-5s %10.2f %14zu %14zu\n", archs[a], "int8", q.ms, q.act, q.prep);
        printf("%-9s ratio int8/fp32: step %.3f, saved activations %.3f, prepared %.3f\n",
               archs[a], q.ms / f.ms, (double)q.act / f.act, (double)q.prep / f.prep);
        fflush(stdout);
    }
    return 0;
}
