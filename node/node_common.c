/* node_common — see node_common.h. */
#include "node/node_common.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lowprec/lp_model.h"
#include "nn/nn_safetensors.h"

void node_model_opts_defaults(node_model_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "cnn");
    snprintf(o->data, sizeof o->data, "fashion-mnist");
    snprintf(o->norm, sizeof o->norm, "evonorm");
    snprintf(o->precision, sizeof o->precision, "fp32");
    o->augment = -1;
    o->groups = 8;
}

int node_data_load(const node_model_opts *o, node_data *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (nn_data_load(o->data, &d->train, &d->test, err, errlen) != 0)
        return -1;
    if (d->train.c > 4) {
        node_data_free(d);
        return nn_errf(err, errlen, "%s: %d channels, at most 4 supported", o->data, d->train.c);
    }
    nn_data_norm_stats(&d->train, d->mean, d->std);
    int pad_to = o->pad_to;
    if (pad_to == 0 && strcmp(o->model, "vgg11") == 0 && d->train.h < 32)
        pad_to = 32; /* vgg11's five pools need 32x32 */
    if (pad_to && (pad_to < d->train.h || pad_to < d->train.w)) {
        node_data_free(d);
        return nn_errf(err, errlen, "--pad-to %d is smaller than the %dx%d images", pad_to,
                       d->train.h, d->train.w);
    }
    int augment = o->augment;
    if (augment < 0) /* auto: the deeper models train long enough to profit */
        augment = strcmp(o->model, "cnn") != 0;
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
}

nn_model *node_model_build(const node_model_opts *o, int in_c, int in_h, int in_w, int classes,
                           char *err, size_t errlen)
{
    nn_model_config cfg = {.in_c = in_c, .in_h = in_h, .in_w = in_w, .classes = classes,
                           .groups = o->groups, .zero_init_residual = o->zero_init_residual};
    snprintf(cfg.arch, sizeof cfg.arch, "%s", o->model);
    if (strcmp(o->norm, "evonorm") == 0)
        cfg.norm = NN_NORM_EVONORM;
    else if (strcmp(o->norm, "batchnorm") == 0)
        cfg.norm = NN_NORM_BATCHNORM;
    else if (strcmp(o->norm, "none") == 0)
        cfg.norm = NN_NORM_NONE;
    else {
        nn_errf(err, errlen, "--norm '%s': expected evonorm, batchnorm or none", o->norm);
        return NULL;
    }
    if (!lp_precision_known(o->precision)) {
        nn_errf(err, errlen, "--precision '%s': expected fp32, int8 or fakequant", o->precision);
        return NULL;
    }
    cfg.factory = lp_factory_by_name(o->precision); /* NULL = fp32 */
    return nn_model_new(&cfg, err, errlen);
}

double node_evaluate(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                     double *loss_out)
{
    return node_evaluate_tick(m, d, set, batch, loss_out, NULL, NULL);
}

double node_evaluate_tick(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                          double *loss_out, void (*tick)(void *arg), void *arg)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    size_t per = (size_t)cfg->in_c * (size_t)cfg->in_h * (size_t)cfg->in_w;
    float *x = nn_xalloc_aligned((size_t)batch * per * sizeof(float));
    uint8_t *y = nn_xmalloc((size_t)batch);
    uint32_t *idx = nn_xmalloc((size_t)batch * sizeof *idx);
    size_t correct = 0;
    double loss = 0;
    for (size_t start = 0; start < set->n; start += (size_t)batch) {
        int N = (int)(set->n - start < (size_t)batch ? set->n - start : (size_t)batch);
        for (int i = 0; i < N; i++)
            idx[i] = (uint32_t)(start + (size_t)i);
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
        *loss_out = set->n ? loss / (double)set->n : 0;
    return set->n ? (double)correct / (double)set->n : 0;
}

int node_model_save(const char *path, nn_model *m, const node_model_opts *o, char *err,
                    size_t errlen)
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
    const char *meta[] = {"format", "lpgossip-model-1", "model", o->model, "norm", o->norm,
                          "precision", o->precision, "data", o->data, "input_shape", shape,
                          "classes", classes, "groups", groups, "crc32", crc, NULL};
    return nn_safetensors_save(path, arenas, narenas, meta, err,
                               errlen);
}

int node_model_opts_from_file(const char *path, node_model_opts *o, char *err, size_t errlen)
{
    char fmt[64], groups[16];
    node_model_opts_defaults(o);
    if (nn_safetensors_meta(path, "format", fmt, sizeof fmt, err, errlen) != 0)
        return -1;
    if (strcmp(fmt, "lpgossip-model-1") != 0)
        return nn_errf(err, errlen, "%s: not an lpgossip model file (format '%s')", path, fmt);
    if (nn_safetensors_meta(path, "model", o->model, sizeof o->model, err, errlen) ||
        nn_safetensors_meta(path, "norm", o->norm, sizeof o->norm, err, errlen) ||
        nn_safetensors_meta(path, "precision", o->precision, sizeof o->precision, err, errlen) ||
        nn_safetensors_meta(path, "data", o->data, sizeof o->data, err, errlen) ||
        nn_safetensors_meta(path, "groups", groups, sizeof groups, err, errlen))
        return -1;
    o->groups = atoi(groups);
    if (o->groups <= 0)
        return nn_errf(err, errlen, "%s: bad metadata groups '%s'", path, groups);
    return 0;
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

void node_set_threads(int threads)
{
    if (threads > 0)
        openblas_set_num_threads(threads);
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
