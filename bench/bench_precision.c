/* bench_precision — FP32 vs 8-bit training step, one run, same threads.
 *
 * For resnet20 and vgg11 on 3x32x32 inputs, batch 32: median ms per
 * training step (forward + backward + SGD update) with the FP32 ops and with
 * the int8 ops (lowprec/lp_model.h), the saved-activation bytes
 * (nn_model_activation_bytes) and the bytes nn_model_prepare allocated, and
 * the int8/fp32 ratios (goal: step <= 0.7 for resnet20 with 1 thread).
 * The two models take turns (two steps each, the second timed), so a busy
 * neighbour on a shared machine slows both alike; the ratio is given of the
 * medians and as the median of the per-turn ratios.
 * Usage: bench_precision [steps (default 10)] [threads (default 1)]
 *                        [model: resnet20 | vgg11 (default both)]. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_cpu.h"
#include "lowprec/lp_model.h"
#include "bench/bench_batch.h"
#include "nn/nn_model.h"
#include "nn/nn_optim.h"

typedef struct {
    nn_model *m;
    nn_sgd sgd;
    double *t;
} s_run;

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void s_open(s_run *r, const char *arch, const nn_factory *f, int batch, int steps)
{
    char err[256];
    nn_model_config cfg = {.in_c = 3, .in_h = 32, .in_w = 32, .classes = 10, .factory = f};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", arch);
    r->m = nn_model_new(&cfg, err, sizeof err);
    if (!r->m) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    nn_model_init_params(r->m, 1);
    nn_model_prepare(r->m, batch);
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&r->sgd, nn_model_params(r->m), &sc);
    r->t = malloc((size_t)steps * sizeof *r->t);
}

/* One training step (forward, backward, SGD update); returns seconds. */
static double s_step(s_run *r, const float *x, const uint8_t *y, int batch)
{
    double t0 = nn_now();
    nn_model_forward(r->m, x, y, batch, 1);
    nn_model_backward(r->m);
    nn_sgd_step(&r->sgd, nn_model_params(r->m)->data, nn_model_grads(r->m)->data, 0.01f);
    return nn_now() - t0;
}

static double s_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, s_cmp);
    return t[n / 2];
}

static void s_close(s_run *r)
{
    free(r->t);
    nn_sgd_free(&r->sgd);
    nn_model_destroy(&r->m);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10, threads = argc > 2 ? atoi(argv[2]) : 1;
    const int batch = 32;
    if (steps < 1)
        steps = 1;
    openblas_set_num_threads(threads);
    printf("lowprec level %s, OpenBLAS %s, %d thread(s), batch %d, 3x32x32, median of %d steps\n",
           nn_cpu_name(nn_cpu_level()), openblas_get_corename(), threads, batch, steps);
    printf("%-9s %-5s %10s %14s %14s\n", "model", "prec", "ms/step", "saved act B", "prepared B");
    static const char *archs[2] = {"resnet20", "vgg11"};
    for (int a = 0; a < 2; a++) {
        if (argc > 3 && strcmp(argv[3], archs[a]) != 0)
            continue;
        s_run f, q;
        s_open(&f, archs[a], NULL, batch, steps);
        s_open(&q, archs[a], &lp_factory_int8, batch, steps);
        float *x;
        uint8_t *y;
        bench_random_batch(batch, 3 * 32 * 32, &x, &y);
        /* the two models take turns, so that a busy neighbour on a shared
         * machine slows both alike: each turn is two steps of one model and
         * only the second is timed (the first refills the caches the other
         * model evicted: timing alternate single steps made the base FP32
         * step look 50% slower than alone); one warm-up turn each */
        double *pr = malloc((size_t)steps * sizeof *pr);
        for (int i = 0; i < steps + 1; i++) {
            s_step(&f, x, y, batch);
            double tf = s_step(&f, x, y, batch);
            s_step(&q, x, y, batch);
            double tq = s_step(&q, x, y, batch);
            if (i >= 1) {
                f.t[i - 1] = tf;
                q.t[i - 1] = tq;
                pr[i - 1] = tq / tf;
            }
        }
        double mf = 1000 * s_median(f.t, steps), mq = 1000 * s_median(q.t, steps);
        double mr = s_median(pr, steps);
        size_t af = nn_model_activation_bytes(f.m, batch), aq = nn_model_activation_bytes(q.m, batch);
        size_t pf = nn_model_prepared_bytes(f.m), pq = nn_model_prepared_bytes(q.m);
        printf("%-9s %-5s %10.2f %14zu %14zu\n", archs[a], "fp32", mf, af, pf);
        printf("%-9s %-5s %10.2f %14zu %14zu\n", archs[a], "int8", mq, aq, pq);
        printf("%-9s ratio int8/fp32: step %.3f (median of turn pairs %.3f), saved activations "
               "%.3f, prepared %.3f\n",
               archs[a], mq / mf, mr, (double)aq / af, (double)pq / pf);
        fflush(stdout);
        free(pr);
        free(x);
        free(y);
        s_close(&f);
        s_close(&q);
    }
    return 0;
}
