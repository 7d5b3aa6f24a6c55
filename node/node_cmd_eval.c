/* node_cmd_eval — `lpgossip eval`: test accuracy of a model file, or of the
 * element-wise average of several (the paper's metric for a decentralized
 * run: every node's parameters averaged, then evaluated once). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_cmds.h"
#include "node/node_common.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip eval MODEL.safetensors [options]\n"
"       lpgossip eval --average A.safetensors B.safetensors ... [options]\n"
"Prints the test accuracy of a model written by `lpgossip train --save` or by\n"
"a node; with --average, of the element-wise mean of all the models' parameters\n"
"(and buffers). A model file that is invalid or holds a non-finite value is\n"
"refused (exit 2).\n"
"  --average           evaluate the mean of the models given\n"
"  --data SPEC         fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR\n"
"                      [the data set recorded in the model file]\n"
"  --batch B           evaluation batch, as the training commands' --batch (int8\n"
"                      Range EvoNorm quantizes its scale over a batch)  [32]\n"
"  --threads T         BLAS threads                            [1]\n"
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

int node_cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"average", no_argument, 0, 'a'},
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *data = NULL;
    long batch = 32, threads = 1; /* the training commands' defaults */
    int average = 0, json = 0, c;
    char err[1024];
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data = optarg; break;
        case 'b':
            if (node_parse_int("--batch", optarg, 1, 65536, &batch, err, sizeof err)) {
                fprintf(stderr, "lpgossip eval: %s\n", err);
                return 2;
            }
            break;
        case 't':
            if (node_parse_int("--threads", optarg, 1, 256, &threads, err, sizeof err)) {
                fprintf(stderr, "lpgossip eval: %s\n", err);
                return 2;
            }
            break;
        case 'a': average = 1; break;
        case 'j': json = 1; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
    }
    int nfiles = argc - optind;
    if (nfiles < 1 || (!average && nfiles != 1)) {
        fprintf(stderr, "lpgossip eval: %s\n",
                nfiles < 1 ? "no model file given" : "several model files need --average");
        s_usage(stderr);
        return 2;
    }
    char **files = argv + optind;
    node_set_threads((int)threads);
    node_model_opts mo;
    if (node_model_opts_from_file(files[0], &mo, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        return 2;
    }
    for (int i = 1; i < nfiles; i++) {
        node_model_opts other;
        if (node_model_opts_from_file(files[i], &other, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip eval: %s\n", err);
            return 2;
        }
        if (other.model != mo.model || other.norm != mo.norm || other.groups != mo.groups ||
            strcmp(other.model_yaml, mo.model_yaml) != 0) { /* model files: the same graph */
            fprintf(stderr, "lpgossip eval: %s is a %s/%s model but %s is %s/%s: cannot "
                    "average\n", files[i], node_arch_name(other.model),
                    node_norm_name(other.norm), files[0], node_arch_name(mo.model),
                    node_norm_name(mo.norm));
            return 2;
        }
    }
    if (data)
        snprintf(mo.data, sizeof mo.data, "%s", data);
    node_data d;
    if (node_data_load(&mo, &d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip eval: %s\n", err);
        return 1;
    }
    int rc = 1;
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
    nn_model_prepare(m, (int)batch);
    double loss, acc = node_evaluate(m, &d, &d.test, (int)batch, &loss);
    if (json)
        printf("{\"models\":%d,\"test_acc\":%.6f,\"test_loss\":%.6f,\"samples\":%zu}\n", nfiles,
               acc, loss, d.test.n);
    else
        printf("%s%s: test accuracy %.2f%% (loss %.4f) on %zu %s test samples\n",
               nfiles > 1 ? "average of " : "", nfiles > 1 ? "models" : files[0], 100 * acc, loss,
               d.test.n, d.test.name);
    rc = 0;
done:
    nn_model_destroy(&m);
    node_data_free(&d);
    return rc;
}
