/* node_common — see node_common.h. */
#include "node/node_common.h"

#include <assert.h>
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowprec/lp_model.h"
#include "node/node_modelio.h"
#include "nn/nn_pool.h"
#include "nn/nn_safetensors.h"
#include "node/node_data.h"

static const char *const s_arch_names[] = {"cnn", "resnet20", "vgg11"};
static const char *const s_norm_names[] = {"evonorm", "batchnorm", "none"};
static const char *const s_prec_names[] = {"fp32", "int8", "fakequant"};
#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *node_arch_name(node_arch a)
{
    if (a == NODE_ARCH_FILE)
        return "file";
    assert((size_t)a < S_COUNT(s_arch_names));
    return s_arch_names[a];
}

const char *node_norm_name(nn_norm_kind n)
{
    assert((size_t)n < S_COUNT(s_norm_names));
    return s_norm_names[n];
}

const char *node_precision_name(node_precision p)
{
    assert((size_t)p < S_COUNT(s_prec_names));
    return s_prec_names[p];
}

/* Index of s in names[0..n), or -1 with a message listing them. */
static int s_lookup(const char *flag, const char *s, const char *const *names, size_t n,
                    char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return (int)i;
    char list[128] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 i ? (i + 1 == n ? " or " : ", ") : "", names[i]);
    return nn_errf(err, errlen, "%s '%s': expected %s", flag, s, list);
}

/* The parser of one enum named by `names`. */
#define S_ENUM_PARSER(fn, type, names)                                                     \
    int fn(const char *flag, const char *s, type *out, char *err, size_t errlen)           \
    {                                                                                      \
        int i = s_lookup(flag, s, names, S_COUNT(names), err, errlen);                     \
        if (i >= 0)                                                                        \
            *out = (type)i;                                                                \
        return i < 0 ? -1 : 0;                                                             \
    }

S_ENUM_PARSER(node_arch_parse, node_arch, s_arch_names)
S_ENUM_PARSER(node_norm_parse, nn_norm_kind, s_norm_names)
S_ENUM_PARSER(node_precision_parse, node_precision, s_prec_names)

void node_model_opts_defaults(node_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = NODE_ARCH_CNN;
    snprintf(o->data, sizeof o->data, "fashion-mnist");
    o->norm = NN_NORM_EVONORM;
    o->precision = NODE_PREC_FP32;
    o->augment = -1;
    o->groups = 8;
}

int node_data_load(const node_model_opts *o, node_data *d, char *err, size_t errlen)
{
    return node_data_load_ranks(o, 0, 1, d, err, errlen);
}

int node_data_load_ranks(const node_model_opts *o, int first, int k, node_data *d, char *err,
                         size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (node_data_read(o, first, k, d, err, errlen) != 0) {
        node_data_free(d);
        return -1;
    }
    int pad_to = o->pad_to;
    if (pad_to == 0 && o->model == NODE_ARCH_VGG11 && d->train.h < 32)
        pad_to = 32; /* vgg11's five pools need 32x32 */
    if (pad_to && (pad_to < d->train.h || pad_to < d->train.w)) {
        node_data_free(d);
        return nn_errf(err, errlen, "--pad-to %d is smaller than the %dx%d images", pad_to,
                       d->train.h, d->train.w);
    }
    int augment = o->augment;
    if (augment < 0) /* auto: the deeper models train long enough to profit */
        augment = o->model == NODE_ARCH_RESNET20 || o->model == NODE_ARCH_VGG11;
    if (o->model == NODE_ARCH_FILE) { /* what the model file says: input size, augment: */
        int pad = pad_to, aug = augment;
        node_model_data_hints(o, d->train.h, d->train.w, &pad, &aug);
        pad_to = o->pad_to ? pad_to : pad;
        augment = o->augment >= 0 ? augment : aug;
    }
    if (d->train.h == 1 && d->train.w == 1)
        augment = 0; /* a table: nothing to crop or flip */
    d->aug_train = (nn_augment){.crop_pad = augment ? 2 : 0, .hflip = augment, .pad_to = pad_to};
    if (augment && d->train.h >= 32)
        d->aug_train.crop_pad = 4;
    d->aug_eval = (nn_augment){.pad_to = pad_to};
    if (nn_augment_check(&d->train, &d->aug_train, err, errlen) != 0) {
        node_data_free(d);
        return -1;
    }
    d->in_c = d->train.c;
    nn_data_out_shape(&d->train, &d->aug_eval, &d->in_h, &d->in_w);
    return 0;
}

void node_data_free(node_data *d)
{
    nn_dataset_free(&d->train);
    nn_dataset_free(&d->test);
    free(d->mean);
    free(d->std);
    free(d->site_off);
    free(d->site_n);
    memset(d, 0, sizeof *d);
}

nn_model *node_model_build(const node_model_opts *o, int in_c, int in_h, int in_w, int classes,
                           char *err, size_t errlen)
{
    nn_model_config cfg = {.in_c = in_c, .in_h = in_h, .in_w = in_w, .classes = classes,
                           .groups = o->groups, .zero_init_residual = o->zero_init_residual};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", node_arch_name(o->model));
    cfg.norm = o->norm;
    cfg.factory = lp_factory_by_name(node_precision_name(o->precision)); /* NULL = fp32 */
    node_mf *mf = NULL;
    if (o->model == NODE_ARCH_FILE) { /* a model file: its graph through node_mf_build */
        if (!(mf = node_model_mf(o, err, errlen)))
            return NULL;
        cfg.build = node_mf_build;
        cfg.build_ctx = mf;
    }
    nn_model *m = nn_model_new(&cfg, err, errlen);
    node_mf_destroy(&mf);
    return m;
}

double node_evaluate(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                     double *loss_out)
{
    return node_evaluate_tick(m, d, set, batch, loss_out, NULL, NULL);
}

double node_evaluate_tick(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                          double *loss_out, void (*tick)(void *arg), void *arg)
{
    return node_evaluate_sub(m, d, set, NULL, set->n, batch, loss_out, tick, arg);
}

double node_evaluate_sub(nn_model *m, const node_data *d, const nn_dataset *set,
                         const uint32_t *sub, size_t n, int batch, double *loss_out,
                         void (*tick)(void *arg), void *arg)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    size_t per = (size_t)cfg->in_c * (size_t)cfg->in_h * (size_t)cfg->in_w;
    float *x = nn_xalloc_aligned((size_t)batch * per * sizeof(float));
    uint8_t *y = nn_xmalloc((size_t)batch);
    uint32_t *idx = nn_xmalloc((size_t)batch * sizeof *idx);
    size_t correct = 0;
    double loss = 0;
    if (!sub || n > set->n)
        n = set->n;
    for (size_t start = 0; start < n; start += (size_t)batch) {
        int N = (int)(n - start < (size_t)batch ? n - start : (size_t)batch);
        for (int i = 0; i < N; i++)
            idx[i] = sub ? sub[start + (size_t)i] : (uint32_t)(start + (size_t)i);
        nn_data_batch(set, idx, N, d->mean, d->std, &d->aug_eval, NULL, x, y);
        loss += (double)nn_model_forward(m, x, y, N, 0) * N;
        correct += (size_t)nn_model_correct(m, y, N);
        if (tick)
            tick(arg);
    }
    free(x);
    free(y);
    free(idx);
    if (loss_out)
        *loss_out = n ? loss / (double)n : 0;
    return n ? (double)correct / (double)n : 0;
}

static int s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

uint32_t *node_eval_subset(size_t set_n, size_t n)
{
    if (n == 0 || n >= set_n)
        return NULL;
    uint32_t *p = nn_xmalloc(set_n * sizeof *p);
    for (size_t i = 0; i < set_n; i++)
        p[i] = (uint32_t)i;
    nn_rng r;
    nn_rng_seed(&r, 0x6576616c); /* a constant: the same subset on every node */
    for (size_t i = 0; i < n; i++) { /* the first n of a Fisher-Yates shuffle */
        size_t j = i + (size_t)nn_rng_below(&r, (uint32_t)(set_n - i));
        uint32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    qsort(p, n, sizeof *p, s_cmp_u32);
    return p;
}

int node_model_save(const char *path, nn_model *m, const node_model_opts *o, char *err,
                    size_t errlen)
{
    return node_model_save_data(path, m, o, NULL, err, errlen);
}

int node_model_save_data(const char *path, nn_model *m, const node_model_opts *o,
                         const node_data *d, char *err, size_t errlen)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    char shape[64], classes[16], groups[16];
    snprintf(shape, sizeof shape, "%d,%d,%d", cfg->in_c, cfg->in_h, cfg->in_w);
    snprintf(classes, sizeof classes, "%d", cfg->classes);
    snprintf(groups, sizeof groups, "%d", o->groups);
    const nn_arena *arenas[2] = {nn_model_params(m), nn_model_buffers(m)};
    int narenas = nn_model_buffers(m)->nviews ? 2 : 1;
    char e[512], crc[16];
    for (int k = 0; k < 2; k++) /* a non-finite model is never a result */
        if (nn_arena_check_finite(arenas[k], NULL, NULL, e, sizeof e) != 0)
            return nn_errf(err, errlen, "model %s not written: %s", path, e);
    uint32_t c = 0;
    for (int k = 0; k < narenas; k++)
        c = nn_safetensors_crc32(c, arenas[k]);
    snprintf(crc, sizeof crc, "%08x", (unsigned)c);
    const char *meta[18 + 4 + NODE_DATA_META_KV] = {"format", "lpgossip-model-1",
                          "model", node_arch_name(o->model),
                          "norm", node_norm_name(o->norm), "precision",
                          node_precision_name(o->precision), "data", o->data, "input_shape", shape,
                          "classes", classes, "groups", groups, "crc32", crc, NULL};
    size_t k = 18;
    if (o->model == NODE_ARCH_FILE) { /* the graph travels with the weights */
        meta[k] = "model_file", meta[k + 1] = o->model_path;
        meta[k + 2] = "model_yaml", meta[k + 3] = o->model_yaml;
        k += 4;
    }
    node_data_meta dm; /* class names, normalisation, reader flags */
    node_data_meta_make(&dm, o, d, meta + k);
    int rc = nn_safetensors_save(path, arenas, narenas, meta, err, errlen);
    node_data_meta_free(&dm);
    return rc;
}

int node_model_opts_from_file(const char *path, node_model_opts *o, char *err, size_t errlen)
{
    char fmt[64], groups[16], model[32], norm[32], prec[32], what[600];
    node_model_opts_defaults(o);
    if (nn_safetensors_meta(path, "format", fmt, sizeof fmt, err, errlen) != 0)
        return -1;
    if (strcmp(fmt, "lpgossip-model-1") != 0)
        return nn_errf(err, errlen, "%s: not an lpgossip model file (format '%s')", path, fmt);
    if (nn_safetensors_meta(path, "model", model, sizeof model, err, errlen) ||
        nn_safetensors_meta(path, "norm", norm, sizeof norm, err, errlen) ||
        nn_safetensors_meta(path, "precision", prec, sizeof prec, err, errlen) ||
        nn_safetensors_meta(path, "data", o->data, sizeof o->data, err, errlen) ||
        nn_safetensors_meta(path, "groups", groups, sizeof groups, err, errlen))
        return -1;
    snprintf(what, sizeof what, "%s: metadata", path);
    if (!strcmp(model, "file")) { /* a model file's graph, carried as model_yaml */
        char *yaml = nn_xmalloc(sizeof o->model_yaml), name[600];
        snprintf(name, sizeof name, "%s (model_yaml)", path);
        int bad = nn_safetensors_meta(path, "model_yaml", yaml, sizeof o->model_yaml, err,
                                      errlen) != 0 ||
                  node_model_opt_set_text(o, name, yaml, strlen(yaml), err, errlen) != 0;
        free(yaml);
        if (bad)
            return -1;
    } else if (node_arch_parse(what, model, &o->model, err, errlen)) {
        return -1;
    }
    if (node_norm_parse(what, norm, &o->norm, err, errlen) ||
        node_precision_parse(what, prec, &o->precision, err, errlen))
        return -1;
    o->groups = atoi(groups);
    if (o->groups <= 0)
        return nn_errf(err, errlen, "%s: bad metadata groups '%s'", path, groups);
    return node_data_opts_from_file(path, o, err, errlen);
}

int node_model_load(const char *path, nn_model *m, char *err, size_t errlen)
{
    nn_arena *arenas[2] = {nn_model_params(m), nn_model_buffers(m)};
    int narenas = nn_model_buffers(m)->nviews ? 2 : 1;
    if (nn_safetensors_load(path, arenas, narenas, err, errlen) != 0)
        return -1;
    char want[32], e[512], have[16];
    if (nn_safetensors_meta(path, "crc32", want, sizeof want, e, sizeof e) != 0)
        return 0; /* written before model checksums */
    uint32_t c = 0;
    for (int k = 0; k < narenas; k++)
        c = nn_safetensors_crc32(c, arenas[k]);
    snprintf(have, sizeof have, "%08x", (unsigned)c);
    if (strcmp(have, want) != 0)
        return nn_errf(err, errlen, "%s: checksum mismatch (crc32 %s recorded, %s computed): the "
                       "model file is corrupt or was edited", path, want, have);
    return 0;
}

void node_avg_init(node_avg *a, nn_model *like)
{
    a->np = nn_model_params(like)->numel;
    a->nb = nn_model_buffers(like)->numel;
    a->sum = nn_xcalloc(a->np + a->nb, sizeof *a->sum);
    a->n = 0;
}

void node_avg_add(node_avg *a, nn_model *m)
{
    const nn_arena *p = nn_model_params(m), *b = nn_model_buffers(m);
    assert(p->numel == a->np && b->numel == a->nb);
    for (size_t k = 0; k < a->np; k++)
        a->sum[k] += p->data[k];
    for (size_t k = 0; k < a->nb; k++)
        a->sum[a->np + k] += b->data[k];
    a->n++;
}

double node_avg_param(const node_avg *a, size_t k)
{
    return a->sum[k] / a->n;
}

void node_avg_write(const node_avg *a, nn_model *dst)
{
    nn_arena *p = nn_model_params(dst), *b = nn_model_buffers(dst);
    assert(a->n > 0 && p->numel == a->np && b->numel == a->nb);
    for (size_t k = 0; k < a->np; k++)
        p->data[k] = (float)(a->sum[k] / a->n);
    for (size_t k = 0; k < a->nb; k++)
        b->data[k] = (float)(a->sum[a->np + k] / a->n);
}

void node_avg_free(node_avg *a)
{
    free(a->sum);
    a->sum = NULL;
}

void node_set_threads(int threads)
{
    if (threads > 0) {
        openblas_set_num_threads(threads);
        nn_pool_set_threads(threads);
    }
}

int node_parse_threads(const char *s, long *out, char *err, size_t errlen)
{
    if (s && strcmp(s, "auto") == 0) {
        *out = 0;
        return 0;
    }
    if (!s || !*s || strspn(s, "0123456789") != strlen(s))
        return nn_errf(err, errlen, "--threads '%s': expected an integer in [1, 256] or auto",
                       s ? s : "");
    return node_parse_int("--threads", s, 1, 256, out, err, errlen);
}

int node_quota_cpus(long long quota, long long period)
{
    if (quota < 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

int node_cpu_max_cpus(const char *text)
{
    long long q, p;
    if (!text || strncmp(text, "max", 3) == 0 || sscanf(text, "%lld %lld", &q, &p) != 2)
        return 0;
    return node_quota_cpus(q, p);
}

/* The first line of file `path` into buf (NUL-terminated); -1 if unreadable. */
static int s_read_line(const char *path, char *buf, size_t len)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    int ok = fgets(buf, (int)len, fp) != NULL;
    fclose(fp);
    return ok ? 0 : -1;
}

/* CPUs of this process's cgroup quota, 0 for none or unknown: v2 (the
 * process's own cgroup, then the root of the mounted tree), then v1. */
static int s_cgroup_cpus(void)
{
    char line[512], path[700], own[512] = "";
    FILE *fp = fopen("/proc/self/cgroup", "r");
    while (fp && fgets(line, sizeof line, fp))
        if (strncmp(line, "0::", 3) == 0) { /* v2: "0::/path" */
            snprintf(own, sizeof own, "%s", line + 3);
            own[strcspn(own, "\n")] = 0;
        }
    if (fp)
        fclose(fp);
    if (own[0] && strcmp(own, "/") != 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", own);
        if (s_read_line(path, line, sizeof line) == 0)
            return node_cpu_max_cpus(line);
    }
    if (s_read_line("/sys/fs/cgroup/cpu.max", line, sizeof line) == 0)
        return node_cpu_max_cpus(line);
    char per[64];
    const char *dirs[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dirs[i]);
        if (s_read_line(path, line, sizeof line) != 0)
            continue;
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dirs[i]);
        if (s_read_line(path, per, sizeof per) != 0)
            continue;
        return node_quota_cpus(atoll(line), atoll(per));
    }
    return 0;
}

int node_threads_auto(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1 : (int)c;
    }
    const int q = s_cgroup_cpus();
    if (q > 0 && q < n)
        n = q;
    /* a count set for this process's OpenBLAS (multi-process runs set 1)
     * is a cap too */
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    const int e = env ? atoi(env) : 0;
    if (e > 0 && e < n)
        n = e;
    return n > 256 ? 256 : n;
}

int node_parse_int(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                   size_t errlen)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi)
        return nn_errf(err, errlen, "%s '%s': expected an integer in [%ld, %ld]", flag,
                       s ? s : "", lo, hi);
    *out = v;
    return 0;
}

int node_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                      char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || errno || !(v >= lo && v <= hi))
        return nn_errf(err, errlen, "%s '%s': expected a number in [%g, %g]", flag,
                       s ? s : "", lo, hi);
    *out = v;
    return 0;
}

void node_fmt_duration(char *buf, size_t len, double seconds)
{
    if (!(seconds >= 0) || seconds > 1e7)
        seconds = 0;
    long s = lround(seconds);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm%02lds", s / 3600, s / 60 % 60, s % 60);
    else if (s >= 60)
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, len, "%lds", s);
}
