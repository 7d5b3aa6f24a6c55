/* bench_precision — FP32 vs 8-bit training step, one run, same threads.
 *
 * For a model (built-in names cnn, resnet20, vgg11 on 3x32x32 inputs; mlp,
 * an MLP 30 -> 256 -> 256 -> 2 with ReLU on tabular 30x1x1 inputs; or a
 * model file FILE.yaml, 3x32x32 unless its `input:` says otherwise, through
 * node/node_modelfile.h), batch 32, at every CPU level
 * this CPU supports (nn_cpu.h; FP32 and int8 kernels at the same level) and
 * with each weight-gradient arithmetic the level has (bf16 where AVX-512
 * BF16 is there, fp32): median ms per training step (forward + backward +
 * SGD update) with the FP32 ops and with the int8 ops (lowprec/lp_model.h),
 * and the int8/fp32 ratio of the medians and as the median of the per-turn
 * ratios (goals, resnet20, 1 thread: <= 0.7 at avx512vnni, <= 0.85 at
 * avx2); once per model the saved-activation and prepared-byte ratios.
 * Also prints the OpenBLAS core that ran.  BENCH_ONLY=int8|fp32 runs only
 * that model's steps (2*steps of them, nothing timed), for profilers, with
 * the default weight-gradient arithmetic only.
 * Each configuration runs at several thread counts side by side (the
 * threads argument: a comma list, "all" = the CPUs this process may use;
 * default 1,2,all), interleaved turn by turn, with the int8 and FP32
 * speed-ups over the first count.
 * Usage: bench_precision [steps (default 10)] [threads (default 1,2,all)]
 *                        [model: cnn | mlp | resnet20 | vgg11 | FILE.yaml
 *                         (default cnn, mlp, resnet20)] [level]
 *        (or --threads LIST anywhere, e.g. --threads 1,2,4,8,16, in place of
 *        the threads argument: the positional ones shift up). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowprec/lp_bf16.h"
#include "nn/nn_cpu.h"
#include "lowprec/lp_model.h"
#include "bench/bench_batch.h"
#include "nn/nn_model.h"
#include "nn/nn_optim.h"
#include "nn/nn_pool.h"
#include "node/node_common.h"
#include "node/node_modelfile.h"

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

/* What to build: a built-in name, the MLP or a parsed model file. */
typedef struct {
    const char *name;
    node_mf    *mf;          /* a model file, or NULL */
    int         c, h, w, classes;
} s_spec;

/* The benchmark MLP: 30 -> 256 -> 256 -> classes with ReLU (tabular). */
static int s_build_mlp(nn_model *m, const void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    int x = nn_b_linear(m, "fc1", nn_model_input_slot(m), 256, 1);
    x = nn_b_relu(m, "fc1.relu", x);
    x = nn_b_linear(m, "fc2", x, 256, 1);
    x = nn_b_relu(m, "fc2.relu", x);
    nn_b_linear(m, "fc3", x, nn_model_cfg(m)->classes, 1);
    return 0;
}

/* Fills *sp for argument `name`; exits with a message on a bad file. */
static void s_spec_open(s_spec *sp, const char *name)
{
    *sp = (s_spec){.name = name, .c = 3, .h = 32, .w = 32, .classes = 10};
    size_t n = strlen(name);
    if (strcmp(name, "mlp") == 0) {
        *sp = (s_spec){.name = name, .c = 30, .h = 1, .w = 1, .classes = 2};
        return;
    }
    if (n < 5 || (strcmp(name + n - 5, ".yaml") != 0 && strcmp(name + n - 4, ".yml") != 0))
        return;
    char err[512];
    FILE *fp = fopen(name, "rb");
    char *buf = malloc(NODE_MF_MAX_BYTES + 1);
    size_t len = fp ? fread(buf, 1, NODE_MF_MAX_BYTES + 1, fp) : 0;
    if (fp)
        fclose(fp);
    if (!fp || len > NODE_MF_MAX_BYTES) {
        fprintf(stderr, "%s: %s\n", name, fp ? "larger than the model-file limit" : "cannot read");
        exit(1);
    }
    sp->mf = node_mf_parse(buf, len, name, err, sizeof err);
    free(buf);
    if (!sp->mf) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    if (sp->mf->in_c > 0) {
        sp->c = sp->mf->in_c;
        sp->h = sp->mf->in_h;
        sp->w = sp->mf->in_w;
    }
}

static void s_open(s_run *r, const s_spec *sp, const nn_factory *f, int batch, int steps)
{
    char err[256];
    nn_model_config cfg = {.in_c = sp->c, .in_h = sp->h, .in_w = sp->w, .classes = sp->classes,
                           .factory = f};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", sp->mf ? "file" : sp->name);
    if (sp->mf) {
        cfg.build = node_mf_build;
        cfg.build_ctx = sp->mf;
    } else if (strcmp(sp->name, "mlp") == 0) {
        cfg.build = s_build_mlp;
    }
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

#define S_MAXT 8 /* thread counts per run */

/* The thread counts to compare: argument "1,2,all" style ("all": the CPUs
 * this process may use, node_threads_auto), duplicates dropped. */
static int s_threads_list(const char *arg, int *thr)
{
    int n = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *tok = strtok(buf, ","); tok && n < S_MAXT; tok = strtok(NULL, ",")) {
        int t = strcmp(tok, "all") == 0 ? node_threads_auto() : atoi(tok);
        int dup = t < 1;
        for (int i = 0; i < n; i++)
            dup |= thr[i] == t;
        if (!dup)
            thr[n++] = t;
    }
    if (n == 0)
        thr[n++] = 1;
    return n;
}

static void s_set_threads(int t)
{
    openblas_set_num_threads(t);
    nn_pool_set_threads(t);
}

/* One configuration (CPU level, weight-gradient arithmetic) at nth thread
 * counts thr[]: both models built after the level is set (kernel paths and
 * scratch depend on it), then taking turns: each turn runs, for every
 * thread count, two steps of one model and only the second is timed (the
 * first refills the caches the other model evicted: timing alternate single
 * steps made the base FP32 step look 50% slower than alone), so a busy
 * neighbour on a shared machine slows every column alike; one warm-up turn.
 * One row per thread count; "x1T" is the speed-up of the int8 (and FP32)
 * step over the first count's. */
static void s_config(const s_spec *sp, const char *level, const char *wgrad, int batch, int steps,
                     int first, const int *thr, int nth)
{
    const char *arch = sp->name;
    s_run f, q;
    s_open(&f, sp, NULL, batch, steps);
    s_open(&q, sp, &lp_factory_int8, batch, steps);
    float *x;
    uint8_t *y;
    bench_random_batch(batch, sp->c * sp->h * sp->w, &x, &y);
    for (int i = 0; i < batch; i++)
        y[i] = (uint8_t)(y[i] % sp->classes);
    double *tf = malloc((size_t)steps * nth * sizeof *tf);
    double *tq = malloc((size_t)steps * nth * sizeof *tq);
    double *pr = malloc((size_t)steps * nth * sizeof *pr);
    const char *only = getenv("BENCH_ONLY"); /* "int8" or "fp32": one model, for perf */
    s_set_threads(thr[0]);
    for (int i = 0; only && i < 2 * steps; i++)
        s_step(strcmp(only, "int8") == 0 ? &q : &f, x, y, batch);
    for (int i = 0; !only && i < steps + 1; i++)
        for (int k = 0; k < nth; k++) {
            s_set_threads(thr[k]);
            s_step(&f, x, y, batch);
            double a = s_step(&f, x, y, batch);
            s_step(&q, x, y, batch);
            double b = s_step(&q, x, y, batch);
            if (i >= 1) {
                tf[k * steps + i - 1] = a;
                tq[k * steps + i - 1] = b;
                pr[k * steps + i - 1] = b / a;
            }
        }
    size_t af = nn_model_activation_bytes(f.m, batch), aq = nn_model_activation_bytes(q.m, batch);
    if (first)
        printf("%s: saved activations int8/fp32 %.3f (%zu / %zu B), prepared %.3f\n", arch,
               (double)aq / af, aq, af,
               (double)nn_model_prepared_bytes(q.m) / nn_model_prepared_bytes(f.m));
    double mf1 = 0, mq1 = 0;
    for (int k = 0; k < nth; k++) {
        double mf = 1000 * s_median(tf + k * steps, steps);
        double mq = 1000 * s_median(tq + k * steps, steps);
        double mr = s_median(pr + k * steps, steps);
        if (k == 0) {
            mf1 = mf;
            mq1 = mq;
        }
        printf("%-9s %-11s %-5s %3d %9.3f %9.3f %8.3f %8.3f %8.3f %8.3f\n", arch, level, wgrad,
               thr[k], mf, mq, mq / mf, mr, mq1 / mq, mf1 / mf);
    }
    fflush(stdout);
    s_set_threads(thr[0]);
    free(tf);
    free(tq);
    free(pr);
    free(x);
    free(y);
    s_close(&f);
    s_close(&q);
}

/* Drops "--threads LIST" (or "--threads=LIST") from argv and returns LIST
 * (NULL when absent): the same list as the second positional argument. */
static const char *s_threads_flag(int *argc, char **argv)
{
    const char *list = NULL;
    int k = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < *argc)
            list = argv[++i];
        else if (strncmp(argv[i], "--threads=", 10) == 0)
            list = argv[i] + 10;
        else
            argv[k++] = argv[i];
    }
    *argc = k;
    return list;
}

int main(int argc, char **argv)
{
    const char *tflag = s_threads_flag(&argc, argv);
    if (tflag) { /* --threads given: the positional list is not */
        static char *args[8];
        int k = 0;
        for (int i = 0; i < argc && k < 8; i++) {
            args[k++] = argv[i];
            if (i == 1 && k < 8)
                args[k++] = (char *)tflag;
        }
        if (argc == 1 && k < 8) {
            args[k++] = "10";
            args[k++] = (char *)tflag;
        }
        argc = k;
        argv = args;
    }
    int steps = argc > 1 ? atoi(argv[1]) : 10, thr[S_MAXT];
    const int nth = s_threads_list(argc > 2 ? argv[2] : "1,2,all", thr);
    const int batch = 32;
    if (steps < 1)
        steps = 1;
    printf("CPU best level %s%s, OpenBLAS core %s, threads", nn_cpu_name(nn_cpu_best()),
           lp_bf16_supported() ? " + AVX-512 BF16" : "", openblas_get_corename());
    for (int k = 0; k < nth; k++)
        printf("%s%d", k ? "," : " ", thr[k]);
    printf(" (all: %d), batch %d, median of %d steps (images 3x32x32, mlp 30x1x1)\n",
           node_threads_auto(), batch, steps);
    printf("%-9s %-11s %-5s %3s %9s %9s %8s %8s %8s %8s\n", "model", "level", "wgrad", "thr",
           "fp32 ms", "int8 ms", "int8/fp32", "(turns)", "int8 x1T", "fp32 x1T");
    static const char *defaults[3] = {"cnn", "mlp", "resnet20"};
    const char *one[1] = {argc > 3 ? argv[3] : NULL};
    const char **archs = argc > 3 ? one : defaults;
    int narch = argc > 3 ? 1 : 3;
    char err[256];
    for (int a = 0; a < narch; a++) {
        s_spec sp;
        s_spec_open(&sp, archs[a]);
        int first = 1;
        for (int l = NN_CPU_LEVELS - 1; l >= 0; l--) {
            const char *lv = nn_cpu_name((nn_cpu_t)l);
            if (argc > 4 && strcmp(argv[4], lv) != 0)
                continue;
            if (nn_cpu_force(lv) != 0) {
                if (a == 0 || argc > 3)
                    printf("# level %s: not available on this CPU, skipped\n", lv);
                continue;
            }
            for (int wg = LP_WGRAD_BF16; wg >= LP_WGRAD_FP32; wg--) {
                if (lp_wgrad_set((lp_wgrad_t)wg, err, sizeof err) != 0)
                    continue;
                if (getenv("BENCH_ONLY") && wg == LP_WGRAD_FP32 && lp_bf16_supported())
                    continue; /* profiling: the default arithmetic only */
                s_config(&sp, lv, lp_wgrad_name(), batch, steps, first, thr, nth);
                first = 0;
            }
        }
        nn_cpu_force("auto");
        lp_wgrad_set(LP_WGRAD_AUTO, err, sizeof err);
        node_mf_destroy(&sp.mf);
    }
    return 0;
}
