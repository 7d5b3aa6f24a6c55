/* node_modelio — see node_modelio.h. */
#include "node/node_modelio.h"

#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/nn_safetensors.h"

static int s_ends_with(const char *s, const char *suffix)
{
    size_t l = strlen(s), k = strlen(suffix);
    return l >= k && !strcmp(s + l - k, suffix);
}

int node_model_opt_set_text(node_model_opts *o, const char *name, const char *yaml, size_t len,
                            char *err, size_t errlen)
{
    if (len > NODE_MF_MAX_BYTES || memchr(yaml, 0, len))
        return nn_errf(err, errlen, "%s: %s", name, len > NODE_MF_MAX_BYTES
                       ? "more than 65536 bytes: too large for a model file"
                       : "holds a NUL byte: not a model file");
    node_mf *mf = node_mf_parse(yaml, len, name, err, errlen);
    if (!mf)
        return -1;
    int rc = 0;
    if (mf->in_c && mf->in_h && mf->in_w) /* the whole input is known: check now */
        rc = node_mf_check_shapes(mf, mf->in_c, mf->in_h, mf->in_w, 0, err, errlen);
    node_mf_destroy(&mf);
    if (rc != 0)
        return -1;
    o->model = NODE_ARCH_FILE;
    snprintf(o->model_path, sizeof o->model_path, "%s", name);
    memcpy(o->model_yaml, yaml, len);
    o->model_yaml[len] = 0;
    return 0;
}

int node_model_opt_set(node_model_opts *o, const char *flag, const char *value, char *err,
                       size_t errlen)
{
    struct stat st;
    if (node_arch_parse(flag, value, &o->model, err, errlen) == 0) {
        o->model_path[0] = o->model_yaml[0] = 0; /* a built-in name wins over a file */
        return 0;
    }
    int is_file = s_ends_with(value, ".yaml") || s_ends_with(value, ".yml") ||
                  (stat(value, &st) == 0 && S_ISREG(st.st_mode));
    if (!is_file) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, ", or a model file FILE.yaml (docs/models.md)");
        return -1;
    }
    if (strlen(value) >= sizeof o->model_path)
        return nn_errf(err, errlen, "%s: path too long", flag);
    FILE *f = fopen(value, "rb");
    if (!f)
        return nn_errf(err, errlen, "%s %s: cannot open: %s", flag, value, strerror(errno));
    char *buf = nn_xmalloc(NODE_MF_MAX_BYTES + 1);
    size_t len = fread(buf, 1, NODE_MF_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc = bad ? nn_errf(err, errlen, "%s %s: read error", flag, value)
                 : node_model_opt_set_text(o, value, buf, len, err, errlen);
    free(buf);
    return rc;
}

node_mf *node_model_mf(const node_model_opts *o, char *err, size_t errlen)
{
    if (o->model != NODE_ARCH_FILE) {
        nn_errf(err, errlen, "model %s is not a model file", node_arch_name(o->model));
        return NULL;
    }
    return node_mf_parse(o->model_yaml, strlen(o->model_yaml), o->model_path, err, errlen);
}

const char *node_model_label(const node_model_opts *o)
{
    return o->model == NODE_ARCH_FILE ? o->model_path : node_arch_name(o->model);
}

void node_model_digest(const node_model_opts *o, char hex[17])
{
    hex[0] = 0;
    if (o->model != NODE_ARCH_FILE)
        return;
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64, as the topology's digest */
    for (const unsigned char *p = (const unsigned char *)o->model_yaml; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    snprintf(hex, 17, "%016" PRIx64, h);
}

void node_model_data_hints(const node_model_opts *o, int img_h, int img_w, int *pad_to,
                           int *augment)
{
    char err[512];
    node_mf *mf = o->model == NODE_ARCH_FILE ? node_model_mf(o, err, sizeof err) : NULL;
    if (!mf)
        return; /* built-in, or an error node_model_build reports */
    if (mf->in_h && mf->in_h == mf->in_w && mf->in_h > img_h && mf->in_w > img_w &&
        img_h > 1)
        *pad_to = mf->in_h;
    if (mf->augment >= 0)
        *augment = mf->augment;
    node_mf_destroy(&mf);
}

int node_model_file_error(const node_model_opts *o, const char *err)
{
    size_t l = strlen(o->model_path);
    return o->model == NODE_ARCH_FILE && l && !strncmp(err, o->model_path, l) && err[l] == ':';
}

int node_model_init_from(nn_model *m, const char *path, const char *skip, size_t *loaded,
                         char *err, size_t errlen)
{
    nn_arena *p = nn_model_params(m), *b = nn_model_buffers(m);
    unsigned char *want = nn_xmalloc(p->nviews + 1);
    regex_t re;
    int rc = 0;
    if (skip) {
        int e = regcomp(&re, skip, REG_EXTENDED | REG_NOSUB);
        if (e != 0) {
            char why[128];
            regerror(e, &re, why, sizeof why);
            free(want);
            return nn_errf(err, errlen, "--init-skip '%s': %s", skip, why);
        }
    }
    for (size_t v = 0; v < p->nviews; v++)
        want[v] = !skip || regexec(&re, p->views[v].name, 0, NULL, 0) != 0;
    size_t np = 0, nb = 0;
    rc = nn_safetensors_load_weights(path, p, want, 1, &np, err, errlen);
    if (rc == 0 && b->nviews) { /* buffers the file holds (BatchNorm statistics) */
        unsigned char *bw = nn_xmalloc(b->nviews);
        for (size_t v = 0; v < b->nviews; v++)
            bw[v] = !skip || regexec(&re, b->views[v].name, 0, NULL, 0) != 0;
        rc = nn_safetensors_load_weights(path, b, bw, 0, &nb, err, errlen);
        free(bw);
    }
    if (skip)
        regfree(&re);
    free(want);
    char e[512];
    for (int k = 0; rc == 0 && k < 2; k++) /* a non-finite weight is no start */
        if (nn_arena_check_finite(k ? b : p, NULL, NULL, e, sizeof e) != 0)
            rc = nn_errf(err, errlen, "%s: %s", path, e);
    if (rc == 0 && loaded)
        *loaded = np + nb;
    return rc;
}
