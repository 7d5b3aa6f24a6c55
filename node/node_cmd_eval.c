/* node_cmd_eval — `lpgossip eval`: test accuracy of a model file, or of the
 * element-wise average of several (the paper's metric for a decentralized
 * run: every node's parameters averaged, then evaluated once). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_cmds.h"
#include "node/node_common.h"
#include "node/node_data.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip eval MODEL.safetensors [options]\n"
"       lpgossip eval --average A.safetensors B.safetensors ... [options]\n"
"Prints the test accuracy of a model written by `lpgossip train --save` or by\n"
"a node; with --average, of the element-wise mean of all the models' parameters\n"
"(and buffers). A model file that is invalid or holds a non-finite value is\n"
"refused (exit 2).  Then per class: accuracy and the confusion matrix (rows:\n"
"true class, columns: predicted), with the class names the file records.\n"
"The input normalisation recorded in the model file is applied.\n"
"  --average           evaluate the mean of the models given\n"
"  --data SPEC         fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR\n"
"                      [the data set recorded in the model file]\n"
"  --batch B           evaluation batch, as the training commands' --batch (int8\n"
"                      Range EvoNorm quantizes its scale over a batch)  [32]\n"
"  --threads T         BLAS threads                            [1]\n"
"  --subset N          only N test samples: the fixed subset the nodes'\n"
"                      progress evaluations (--eval-subset N) use  [all]\n"
"  --json              print one JSON object instead of text\n"
"  -h, --help\n");
}

/* Loads the models one after another into m, accumulating their mean.  A
 * model holding a non-finite value is refused by name: it would poison the
 * average (and means nothing on its own). */
static int s_load_average(nn_model *m, char **paths, int n, char *err, size_t errlen)
{
    node_avg a;
    node_avg_init(&a, m);
    int rc = -1;
    char e[512];
    for (int i = 0; i < n; i++) {
        if (node_model_load(paths[i], m, err, errlen) != 0)
            goto done;
        if (nn_arena_check_finite(nn_model_params(m), paths[i], NULL, e, sizeof e) != 0 ||
            nn_arena_check_finite(nn_model_buffers(m), paths[i], NULL, e, sizeof e) != 0) {
            nn_errf(err, errlen, "%s: refusing a non-finite model%s", e,
                    n > 1 ? " (leave it out of --average)" : "");
            goto done;
        }
        node_avg_add(&a, m);
    }
    node_avg_write(&a, m);
    rc = 0;
done:
    node_avg_free(&a);
    return rc;
}

/* Accuracy, loss and the confusion matrix conf[true * classes + predicted]
 * over the test samples sub[0..n) (all of them when sub is NULL; one pass,
 * accuracy as node_evaluate). */
static double s_eval(nn_model *m, const node_data *d, int batch, const uint32_t *sub,
                     size_t n, double *loss_out, size_t *conf)
{
    const nn_dataset *set = &d->test;
    int K = nn_model_cfg(m)->classes;
    size_t per = (size_t)d->in_c * (size_t)d->in_h * (size_t)d->in_w, correct = 0;
    float *x = nn_xalloc_aligned((size_t)batch * per * sizeof(float));
    uint8_t *y = nn_xmalloc((size_t)batch);
    uint32_t *idx = nn_xmalloc((size_t)batch * sizeof *idx);
    double loss = 0;
    for (size_t start = 0; start < n; start += (size_t)batch) {
        int N = (int)(n - start < (size_t)batch ? n - start : (size_t)batch);
        for (int i = 0; i < N; i++)
            idx[i] = sub ? sub[start + (size_t)i] : (uint32_t)(start + (size_t)i);
        nn_data_batch(set, idx, N, d->mean, d->std, &d->aug_eval, NULL, x, y);
        loss += (double)nn_model_forward(m, x, y, N, 0) * N;
        correct += (size_t)nn_model_correct(m, y, N);
        const float *lg = nn_model_logits(m);
        for (int i = 0; i < N; i++) {
            const float *q = lg + (size_t)i * (size_t)K;
            int best = 0;
            for (int k = 1; k < K; k++)
                best = q[k] > q[best] ? k : best;
            if (y[i] < K)
                conf[(size_t)y[i] * (size_t)K + (size_t)best]++;
        }
    }
    free(x);
    free(y);
    free(idx);
    *loss_out = n ? loss / (double)n : 0;
    return n ? (double)correct / (double)n : 0;
}

static void s_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* Per-class accuracy and the confusion matrix, after the summary. */
static void s_print_classes(const node_data_info *in, int K, const size_t *conf, int json)
{
    char nb[32];
    if (json) {
        printf(",\"per_class\":[");
        for (int k = 0; k < K; k++) {
            size_t n = 0;
            for (int j = 0; j < K; j++)
                n += conf[(size_t)k * (size_t)K + (size_t)j];
            printf("%s{\"class\":", k ? "," : "");
            s_json_str(node_data_info_class(in, k, nb, sizeof nb));
            printf(",\"samples\":%zu,\"acc\":%.6f}", n,
                   n ? (double)conf[(size_t)k * (size_t)K + (size_t)k] / (double)n : 0.0);
        }
        printf("],\"confusion\":[");
        for (int k = 0; k < K; k++) {
            printf("%s[", k ? "," : "");
            for (int j = 0; j < K; j++)
                printf("%s%zu", j ? "," : "", conf[(size_t)k * (size_t)K + (size_t)j]);
            printf("]");
        }
        printf("]}\n");
        return;
    }
    printf("per class (rows: true class, columns: predicted class, in this order):\n");
    for (int k = 0; k < K; k++) {
        size_t n = 0;
        for (int j = 0; j < K; j++)
            n += conf[(size_t)k * (size_t)K + (size_t)j];
        printf("  %-20s %6.2f%% of %6zu |", node_data_info_class(in, k, nb, sizeof nb),
               n ? 100.0 * (double)conf[(size_t)k * (size_t)K + (size_t)k] / (double)n : 0.0, n);
        for (int j = 0; j < K; j++)
            printf(" %zu", conf[(size_t)k * (size_t)K + (size_t)j]);
        printf("\n");
    }
}

/* The options of files[0]; the others must be of the same model. */
static int s_models_opts(char **files, int nfiles, node_model_opts *mo, char *err,
                         size_t errlen)
{
    if (node_model_opts_from_file(files[0], mo, err, errlen) != 0)
        return -1;
    for (int i = 1; i < nfiles; i++) {
        node_model_opts other;
        if (node_model_opts_from_file(files[i], &other, err, errlen) != 0)
            return -1;
        if (other.model != mo->model || other.norm != mo->norm || other.groups != mo->groups ||
            strcmp(other.model_yaml, mo->model_yaml) != 0) /* model files: the same graph */
            return nn_errf(err, errlen, "%s is a %s/%s model but %s is %s/%s: cannot average",
                           files[i], node_arch_name(other.model), node_norm_name(other.norm),
                           files[0], node_arch_name(mo->model), node_norm_name(mo->norm));
    }
    return 0;
}

/* The normalisation recorded in the model file, when it fits the data. */
static void s_recorded_norm(const node_data_info *in, node_data *d)
{
    if (!in->mean || in->c != d->train.c)
        return;
    memcpy(d->mean, in->mean, (size_t)in->c * sizeof *d->mean);
    memcpy(d->std, in->std, (size_t)in->c * sizeof *d->std);
}

/* The command line of eval. */
typedef struct {
    const char *data;
    long        batch, threads, subset;
    int         average, json;
} s_eval_args;

/* Parses argv into *a; -1: go on (files from optind), else the exit code. */
static int s_eval_parse(int argc, char **argv, s_eval_args *a)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"average", no_argument, 0, 'a'},
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {"subset", required_argument, 0, 's'}, {0, 0, 0, 0},
    };
    /* the training commands' defaults */
    *a = (s_eval_args){.data = NULL, .batch = 32, .threads = 1, .subset = 0};
    char err[1024];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': a->data = optarg; break;
        case 'b': bad = node_parse_int("--batch", optarg, 1, 65536, &a->batch, err, sizeof err); break;
        case 't': bad = node_parse_int("--threads", optarg, 1, 256, &a->threads, err, sizeof err); break;
        case 's': bad = node_parse_int("--subset", optarg, 1, 1L << 40, &a->subset, err, sizeof err); break;
        case 'a': a->average = 1; break;
        case 'j': a->json = 1; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "lpgossip eval: %s\n", err);
            return 2;
        }
    }
    int nfiles = argc - optind;
    if (nfiles < 1 || (!a->average && nfiles != 1)) {
        fprintf(stderr, "lpgossip eval: %s\n",
                nfiles < 1 ? "no model file given" : "several model files need --average");
        s_usage(stderr);
        return 2;
    }
    return -1;
}

int node_cmd_eval(int argc, char **argv)
{
    s_eval_args a;
    int rc = s_eval_parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    char err[1024];
    int nfiles = argc - optind;
    char **files = argv + optind;
    node_set_threads((int)a.threads);
    node_model_opts mo;
    if (s_models_opts(files, nfiles, &mo, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        return 2;
    }
    if (a.data)
        snprintf(mo.data, sizeof mo.data, "%s", a.data);
    node_data d;
    node_data_info info;
    if (node_data_info_read(files[0], &info, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        return 2;
    }
    if (node_data_load(&mo, &d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        node_data_info_free(&info);
        return 1;
    }
    s_recorded_norm(&info, &d);
    size_t *conf = NULL;
    rc = 1;
    nn_model *m = node_model_build(&mo, d.in_c, d.in_h, d.in_w, d.test.classes, err, sizeof err);
    if (!m) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        goto done;
    }
    if (s_load_average(m, files, nfiles, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        rc = 2; /* a bad model file */
        goto done;
    }
    nn_model_prepare(m, (int)a.batch);
    int K = nn_model_cfg(m)->classes;
    conf = nn_xcalloc((size_t)K * (size_t)K, sizeof *conf);
    size_t n = d.test.n;
    uint32_t *sub = node_eval_subset(n, (size_t)a.subset);
    n = sub ? (size_t)a.subset : n;
    double loss, acc = s_eval(m, &d, (int)a.batch, sub, n, &loss, conf);
    free(sub);
    if (a.json)
        printf("{\"models\":%d,\"test_acc\":%.6f,\"test_loss\":%.6f,\"samples\":%zu", nfiles,
               acc, loss, n);
    else
        printf("%s%s: test accuracy %.2f%% (loss %.4f) on %zu %s test samples\n",
               nfiles > 1 ? "average of " : "", nfiles > 1 ? "models" : files[0], 100 * acc, loss,
               n, d.test.name);
    s_print_classes(&info, K, conf, a.json);
    rc = 0;
done:
    free(conf);
    node_data_info_free(&info);
    nn_model_destroy(&m);
    node_data_free(&d);
    return rc;
}
