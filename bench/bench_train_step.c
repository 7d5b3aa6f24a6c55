/* bench_train_step — ms per training step (forward, backward, SGD update;
 * batch 32) of resnet20 on 1x28x28 and 3x32x32 inputs with 1, 2 and all
 * threads (the CPUs this process may use; BLAS and the layer pool), FP32
 * and int8 (lowprec/) side by side with the int8 speed-up over 1 thread,
 * next to PyTorch for exactly the same architecture
 * (bench/torch_resnet20.py, run with /usr/bin/python3 when Debian's
 * python3-torch is installed; skipped with a message otherwise).
 * Prints ratio = ours (FP32) / PyTorch (lower is better; the goal is <= 0.8 for
 * 3x32x32 with 1 thread).  Medians of repeated steps. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_batch.h"
#include "nn/nn_model.h"
#include "lowprec/lp_model.h"
#include "nn/nn_optim.h"
#include "nn/nn_pool.h"
#include "node/node_common.h"

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_ours(const char *arch, const nn_factory *f, int c, int h, int w, int batch,
                     int steps)
{
    char err[256];
    nn_model_config cfg = {.in_c = c, .in_h = h, .in_w = w, .classes = 10, .factory = f};
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
    float *x;
    uint8_t *y;
    bench_random_batch(batch, (size_t)c * h * w, &x, &y);
    double *t = malloc((size_t)steps * sizeof *t);
    for (int i = 0; i < steps + 3; i++) {
        double t0 = nn_now();
        nn_model_forward(m, x, y, batch, 1);
        nn_model_backward(m);
        nn_sgd_step(&sgd, nn_model_params(m)->data, nn_model_grads(m)->data, 0.01f);
        if (i >= 3)
            t[i - 3] = nn_now() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, s_cmp);
    double med = 1000 * t[steps / 2];
    free(t);
    free(x);
    free(y);
    nn_sgd_free(&sgd);
    nn_model_destroy(&m);
    return med;
}

static double s_torch(int c, int h, int w, int threads, int batch, int steps)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 bench/torch_resnet20.py --input %dx%dx%d --threads %d "
             "--batch %d --steps %d 2>/dev/null", c, h, w, threads, batch, steps);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    double ms = -1;
    char line[256];
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "ms_per_step %lf", &ms) == 1)
            break;
    pclose(p);
    return ms;
}

int main(int argc, char **argv)
{
    /* OpenBLAS picks its kernels from the CPU unless OPENBLAS_CORETYPE
     * forces a core (some managed machines set Haswell): say which ran. */
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (forced)
        printf("OpenBLAS core: %s (forced by OPENBLAS_CORETYPE=%s)\n", openblas_get_corename(),
               forced);
    else
        printf("OpenBLAS core: %s (detected)\n", openblas_get_corename());
    int steps = argc > 1 ? atoi(argv[1]) : 15, batch = 32;
    int have_torch = system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
    if (!have_torch)
        printf("PyTorch comparison skipped: /usr/bin/python3 cannot import torch "
               "(apt-get install python3-torch)\n");
    printf("%-10s %-8s %7s %12s %12s %9s %8s %12s %8s\n", "model", "input", "threads",
           "ours ms", "int8 ms", "int8/fp32", "int8 x1T", "torch ms", "ratio");
    static const int shapes[2][3] = {{1, 28, 28}, {3, 32, 32}};
    const int all = node_threads_auto(), counts[3] = {1, 2, all};
    for (int s = 0; s < 2; s++) {
        double q1 = 0;
        for (int k = 0; k < 3; k++) {
            const int threads = counts[k];
            if (k == 2 && all <= 2)
                break;
            openblas_set_num_threads(threads);
            nn_pool_set_threads(threads);
            const int *sh = shapes[s];
            double ours = s_ours("resnet20", NULL, sh[0], sh[1], sh[2], batch, steps);
            double q = s_ours("resnet20", &lp_factory_int8, sh[0], sh[1], sh[2], batch, steps);
            double theirs = have_torch ? s_torch(sh[0], sh[1], sh[2], threads, batch, steps) : -1;
            if (k == 0)
                q1 = q;
            char in[32], tm[32] = "-", ratio[32] = "-";
            snprintf(in, sizeof in, "%dx%dx%d", sh[0], sh[1], sh[2]);
            if (theirs > 0) {
                snprintf(tm, sizeof tm, "%.2f", theirs);
                snprintf(ratio, sizeof ratio, "%.3f", ours / theirs);
            }
            printf("%-10s %-8s %7d %12.2f %12.2f %9.3f %8.3f %12s %8s\n", "resnet20", in,
                   threads, ours, q, q / ours, q1 / q, tm, ratio);
            fflush(stdout);
        }
    }
    return 0;
}
