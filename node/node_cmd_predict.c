/* node_cmd_predict — `lpgossip predict`: the class of each input by a
 * model file.
 *
 * Rebuilds the model from the file (node_model_opts_from_file,
 * node_model_build), reads images (PNG/JPEG, converted to the model's
 * channels; resized to the recorded --image-size, or to the model's input
 * when larger; centred in the input when smaller, as training's --pad-to)
 * or the rows of a CSV table, normalises them with the mean and std the
 * file records, and prints one line per input: the input, the most
 * probable class's name and its probability (or one JSON object per line).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_cmds.h"
#include "node/node_common.h"
#include "node/node_data.h"

#define S_BATCH 32

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip predict MODEL.safetensors IMAGE... [options]\n"
"       lpgossip predict MODEL.safetensors --data csv:FILE[,label=COLUMN] [options]\n"
"Prints, for each image (PNG, JPEG) or table row, the most probable class and\n"
"its probability: one line per input, INPUT<TAB>CLASS<TAB>PROBABILITY.  A CSV\n"
"table has the model's feature columns (a label column besides is ignored).\n"
"  --data csv:FILE     predict the rows of FILE\n"
"  --threads T         BLAS threads                            [1]\n"
"  --json              one JSON object per line instead\n"
"  -h, --help\n");
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

typedef struct {
    nn_model       *m;
    node_data_info  info;
    int             json;
} s_pred;

/* Runs the model on set d[0..n) in batches; names[i] labels input i. */
static void s_run(s_pred *p, const nn_dataset *d, const nn_augment *aug,
                  const char *const *names, const size_t *lines)
{
    size_t per = (size_t)p->info.c * (size_t)p->info.h * (size_t)p->info.w;
    float *x = nn_xalloc_aligned(S_BATCH * per * sizeof(float));
    uint32_t idx[S_BATCH];
    char nb[32], in[4200];
    for (size_t s = 0; s < d->n; s += S_BATCH) {
        int N = (int)(d->n - s < S_BATCH ? d->n - s : S_BATCH);
        for (int i = 0; i < N; i++)
            idx[i] = (uint32_t)(s + (size_t)i);
        nn_data_batch(d, idx, N, p->info.mean, p->info.std, aug, NULL, x, NULL);
        nn_model_forward(p->m, x, NULL, N, 0);
        const float *pr = nn_model_probs(p->m);
        for (int i = 0; i < N; i++) {
            const float *q = pr + (size_t)i * (size_t)p->info.classes;
            int best = 0;
            for (int k = 1; k < p->info.classes; k++)
                best = q[k] > q[best] ? k : best;
            if (lines)
                snprintf(in, sizeof in, "%s:%zu", names[0], lines[s + (size_t)i]);
            else
                snprintf(in, sizeof in, "%s", names[s + (size_t)i]);
            const char *cls = node_data_info_class(&p->info, best, nb, sizeof nb);
            if (p->json) {
                printf("{\"input\":");
                s_json_str(in);
                printf(",\"class\":");
                s_json_str(cls);
                printf(",\"index\":%d,\"prob\":%.6f}\n", best, (double)q[best]);
            } else {
                printf("%s\t%s\t%.4f\n", in, cls, (double)q[best]);
            }
        }
    }
    free(x);
}

/* The images as one set shaped for the model (see the top comment). */
static int s_images(s_pred *p, const node_model_opts *mo, char **files, int n, nn_dataset *d,
                    nn_augment *aug, char *err, size_t errlen)
{
    const node_data_info *in = &p->info;
    if (in->c != 1 && in->c != 3)
        return nn_errf(err, errlen, "the model takes %d channels: not images", in->c);
    if (in->is_float)
        return nn_errf(err, errlen, "the model was trained on float samples (npz or CSV), "
                       "not on image files");
    memset(d, 0, sizeof *d);
    int th = mo->image_h, tw = mo->image_w;
    for (int i = 0; i < n; i++) {
        uint8_t *px;
        int c, h, w;
        if (nn_image_read(files[i], in->c, th, tw, &px, &c, &h, &w, err, errlen) != 0)
            return -1;
        if (!th && (h > in->h || w > in->w)) { /* larger than the model: resize */
            free(px);
            th = in->h;
            tw = in->w;
            if (nn_image_read(files[i], in->c, th, tw, &px, &c, &h, &w, err, errlen) != 0)
                return -1;
        }
        if (d->n && (h != d->h || w != d->w)) {
            free(px);
            return nn_errf(err, errlen, "%s is %dx%d, %s %dx%d: one size per run", files[i],
                           h, w, files[0], d->h, d->w);
        }
        nn_dataset one = {.n = 1, .c = c, .h = h, .w = w, .classes = 1, .x = px,
                          .y = (uint8_t[1]){0}};
        nn_dataset_append(d, &one, err, errlen);
        free(px);
    }
    *aug = (nn_augment){0};
    if (d->h != in->h || d->w != in->w) {
        if (in->h != in->w || d->h > in->h || d->w > in->w)
            return nn_errf(err, errlen, "images are %dx%d, the model takes %dx%d", d->h, d->w,
                           in->h, in->w);
        aug->pad_to = in->h;
    }
    return 0;
}

static int s_predict(s_pred *p, const node_model_opts *mo, const char *data, char **files,
                     int n, char *err, size_t errlen)
{
    nn_dataset d = {0};
    nn_augment aug = {0};
    size_t *lines = NULL;
    int rc;
    if (data) {
        if (strncmp(data, "csv:", 4) != 0)
            return nn_errf(err, errlen, "--data '%s': predict reads csv:FILE[,label=COLUMN]",
                           data);
        char path[4096];
        const char *l = strstr(data, ",label=");
        snprintf(path, sizeof path, "%.*s", (int)(l ? (size_t)(l - data - 4) : strlen(data + 4)),
                 data + 4);
        if (p->info.h != 1 || p->info.w != 1)
            return nn_errf(err, errlen, "the model takes %dx%dx%d images, not table rows",
                           p->info.c, p->info.h, p->info.w);
        rc = nn_data_load_csv_rows(path, l ? l + 7 : NULL, p->info.c, &d, &lines, err, errlen);
        const char *nm[1] = {path};
        if (rc == 0)
            s_run(p, &d, NULL, nm, lines);
    } else {
        rc = s_images(p, mo, files, n, &d, &aug, err, errlen);
        if (rc == 0)
            s_run(p, &d, &aug, (const char *const *)files, NULL);
    }
    free(lines);
    nn_dataset_free(&d);
    return rc;
}

int node_cmd_predict(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"threads", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *data = NULL;
    long threads = 1;
    int c;
    s_pred p = {0};
    char err[1024];
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data = optarg; break;
        case 't':
            if (node_parse_int("--threads", optarg, 1, 256, &threads, err, sizeof err)) {
                fprintf(stderr, "lpgossip predict: %s\n", err);
                return 2;
            }
            break;
        case 'j': p.json = 1; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
    }
    int n = argc - optind - 1;
    if (n < 0 || (n == 0) == !data) {
        fprintf(stderr, "lpgossip predict: %s\n", n < 0 ? "no model file given"
                : data ? "give images or --data, not both" : "nothing to predict");
        s_usage(stderr);
        return 2;
    }
    const char *model = argv[optind];
    node_set_threads((int)threads);
    node_model_opts mo;
    if (node_model_opts_from_file(model, &mo, err, sizeof err) != 0 ||
        node_data_info_read(model, &p.info, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip predict: %s\n", err);
        return 2;
    }
    int rc = 2;
    if (!p.info.mean) {
        fprintf(stderr, "lpgossip predict: %s records no input normalisation (written by an "
                "older version): `lpgossip eval` still reads it\n", model);
        goto done;
    }
    p.m = node_model_build(&mo, p.info.c, p.info.h, p.info.w, p.info.classes, err, sizeof err);
    if (!p.m || node_model_load(model, p.m, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip predict: %s\n", err);
        goto done;
    }
    nn_model_prepare(p.m, S_BATCH);
    rc = 1;
    if (s_predict(&p, &mo, data, argv + optind + 1, n, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip predict: %s\n", err);
        goto done;
    }
    rc = 0;
done:
    nn_model_destroy(&p.m);
    node_data_info_free(&p.info);
    return rc;
}
