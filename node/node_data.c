/* node_data — see node_data.h. */
#include "node/node_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_safetensors.h"

#define S_META_MAX ((size_t)4 << 20)

int node_data_per_site(const char *spec)
{
    return strstr(spec, "{rank}") != NULL;
}

int node_data_spec_for(const char *spec, int rank, char *out, size_t len, char *err,
                       size_t errlen)
{
    size_t n = 0;
    for (const char *p = spec; *p;) {
        char piece[24];
        const char *add = piece;
        size_t al;
        if (!strncmp(p, "{rank}", 6)) {
            snprintf(piece, sizeof piece, "%d", rank);
            al = strlen(piece);
            p += 6;
        } else {
            add = p++;
            al = 1;
        }
        if (n + al >= len)
            return nn_errf(err, errlen, "data set '%s': too long with rank %d", spec, rank);
        memcpy(out + n, add, al);
        n += al;
    }
    out[n] = 0;
    return 0;
}

/* One spec's sets; the count of skipped files reported on stderr. */
static int s_read_one(const node_model_opts *o, const char *spec, nn_dataset *tr,
                      nn_dataset *te, char *err, size_t errlen)
{
    nn_data_opts no = {.image_h = o->image_h, .image_w = o->image_w, .skip_bad = o->skip_bad,
                       .nchw = o->nchw};
    if (nn_data_load_opts(spec, &no, tr, te, err, errlen) != 0)
        return -1;
    if (no.skipped)
        fprintf(stderr, "lpgossip: %s: skipped %zu files that are not readable images "
                "(--skip-bad)\n", spec, no.skipped);
    return 0;
}

/* Every rank's own sets joined, each rank's training samples a site. */
static int s_read_sites(const node_model_opts *o, int first, int k, node_data *d, char *err,
                        size_t errlen)
{
    char spec[sizeof o->data + 64], e[1024];
    d->site_off = nn_xcalloc((size_t)k, sizeof *d->site_off);
    d->site_n = nn_xcalloc((size_t)k, sizeof *d->site_n);
    d->site_first = first;
    d->sites = k;
    for (int i = 0; i < k; i++) {
        nn_dataset tr, te;
        if (node_data_spec_for(o->data, first + i, spec, sizeof spec, err, errlen) != 0 ||
            s_read_one(o, spec, &tr, &te, err, errlen) != 0)
            return -1;
        d->site_off[i] = d->train.n;
        d->site_n[i] = tr.n;
        int rc = nn_dataset_append(&d->train, &tr, e, sizeof e);
        if (rc == 0)
            rc = nn_dataset_append(&d->test, &te, e, sizeof e);
        nn_dataset_free(&tr);
        nn_dataset_free(&te);
        if (rc != 0)
            return nn_errf(err, errlen, "%s (rank %d's data): %s", spec, first + i, e);
    }
    return 0;
}

int node_data_read(const node_model_opts *o, int first, int k, node_data *d, char *err,
                   size_t errlen)
{
    int rc;
    if (node_data_per_site(o->data)) {
        rc = s_read_sites(o, first, k, d, err, errlen);
    } else {
        rc = s_read_one(o, o->data, &d->train, &d->test, err, errlen);
    }
    if (rc != 0)
        return -1;
    if (o->classes > 0) { /* sites agree on the count though one lacks a class */
        if (d->train.classes > o->classes || d->test.classes > o->classes)
            return nn_errf(err, errlen, "%s: %d classes, more than --classes %d", o->data,
                           d->train.classes > d->test.classes ? d->train.classes
                                                              : d->test.classes, o->classes);
        if (d->train.class_names && d->train.classes != o->classes)
            return nn_errf(err, errlen, "%s: %d named classes, not --classes %d", o->data,
                           d->train.classes, o->classes);
        d->train.classes = d->test.classes = o->classes;
    }
    d->mean = nn_xcalloc((size_t)d->train.c, sizeof *d->mean);
    d->std = nn_xcalloc((size_t)d->train.c, sizeof *d->std);
    nn_data_norm_stats(&d->train, d->mean, d->std);
    return 0;
}

/* Site shards: every sample of a rank's own data, or a seeded random
 * subset of `subset` of them. */
static int s_site_shards(long subset, long seed, const node_data *d, int nodes,
                         uint32_t **shard, size_t *count, char *err, size_t errlen)
{
    for (int i = 0; i < d->sites; i++) {
        int r = d->site_first + i;
        if (r >= nodes)
            return nn_errf(err, errlen, "rank %d outside the %d nodes", r, nodes);
        size_t n = d->site_n[i], m = subset > 0 && (size_t)subset < n ? (size_t)subset : n;
        if (n > UINT32_MAX || d->site_off[i] > UINT32_MAX - n)
            return nn_errf(err, errlen, "rank %d: too many samples", r);
        uint32_t *s = nn_xmalloc((n ? n : 1) * sizeof *s);
        for (size_t j = 0; j < n; j++)
            s[j] = (uint32_t)(d->site_off[i] + j);
        if (m < n) {
            nn_rng rng;
            nn_rng_seed(&rng, nn_seed_derive((uint64_t)seed, (uint64_t)r));
            nn_rng_shuffle_u32(&rng, s, n);
        }
        shard[r] = s;
        count[r] = m;
    }
    return 0;
}

int node_data_shards(const node_model_opts *o, long subset, long seed, const node_data *d,
                     int nodes, uint32_t **shard, size_t *count, char *err, size_t errlen)
{
    for (int r = 0; r < nodes; r++) {
        shard[r] = NULL;
        count[r] = 0;
    }
    if (d->site_n)
        return s_site_shards(subset, seed, d, nodes, shard, count, err, errlen);
    if (!(o->dirichlet > 0) || nodes == 1)
        return 1;
    size_t n = subset > 0 && (size_t)subset < d->train.n ? (size_t)subset : d->train.n;
    return nn_partition_dirichlet(d->train.y, n, d->train.classes, nodes, o->dirichlet,
                                  (uint64_t)seed, shard, count, err, errlen);
}

void node_data_ident(const node_model_opts *o, char *buf, size_t len)
{
    char a[48] = "", b[48] = "", c[32] = "";
    if (o->dirichlet > 0)
        snprintf(a, sizeof a, ",partition=dirichlet:%.17g", o->dirichlet);
    if (o->image_h > 0)
        snprintf(b, sizeof b, ",image_size=%dx%d", o->image_h, o->image_w);
    if (o->classes > 0)
        snprintf(c, sizeof c, ",classes=%d", o->classes);
    snprintf(buf, len, "%s%s%s%s%s", a, b, c, o->skip_bad ? ",skip_bad" : "",
             o->nchw ? ",nchw" : "");
    if (buf[0] == ',')
        memmove(buf, buf + 1, strlen(buf));
}

/* ---- model-file metadata --------------------------------------------------- */

static char *s_floats(const float *v, int n)
{
    char *s = nn_xmalloc((size_t)n * 18 + 1), *p = s;
    *p = 0;
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%.9g", i ? "," : "", (double)v[i]);
    return s;
}

int node_data_meta_make(node_data_meta *m, const node_model_opts *o, const node_data *d,
                        const char **kv)
{
    memset(m, 0, sizeof *m);
    int n = 0;
    if (d && d->train.class_names) {
        size_t len = 1;
        for (int k = 0; k < d->train.classes; k++)
            len += strlen(d->train.class_names[k]) + 1;
        m->names = nn_xmalloc(len);
        char *p = m->names;
        for (int k = 0; k < d->train.classes; k++) {
            const char *s = d->train.class_names[k];
            for (; *s; s++) /* one name per line */
                *p++ = *s == '\n' || *s == '\r' ? ' ' : *s;
            *p++ = '\n';
        }
        p[-1] = 0;
        kv[n++] = "class_names";
        kv[n++] = m->names;
    }
    if (d && d->train.xf) {
        kv[n++] = "input_type";
        kv[n++] = "float";
    }
    if (d && d->mean) {
        m->mean = s_floats(d->mean, d->train.c);
        m->std = s_floats(d->std, d->train.c);
        kv[n++] = "norm_mean";
        kv[n++] = m->mean;
        kv[n++] = "norm_std";
        kv[n++] = m->std;
    }
    if (o->image_h > 0) {
        snprintf(m->image, sizeof m->image, "%dx%d", o->image_h, o->image_w);
        kv[n++] = "image_size";
        kv[n++] = m->image;
    }
    if (o->nchw) {
        snprintf(m->nchw, sizeof m->nchw, "1");
        kv[n++] = "nchw";
        kv[n++] = m->nchw;
    }
    kv[n] = NULL;
    return n;
}

void node_data_meta_free(node_data_meta *m)
{
    free(m->names);
    free(m->mean);
    free(m->std);
    memset(m, 0, sizeof *m);
}

int node_data_opts_from_file(const char *path, node_model_opts *o, char *err, size_t errlen)
{
    char v[64], e[256];
    if (nn_safetensors_meta(path, "image_size", v, sizeof v, e, sizeof e) == 0 &&
        (sscanf(v, "%dx%d", &o->image_h, &o->image_w) != 2 || o->image_h < 1 ||
         o->image_w < 1 || o->image_h > 16384 || o->image_w > 16384))
        return nn_errf(err, errlen, "%s: bad metadata image_size '%s'", path, v);
    if (nn_safetensors_meta(path, "nchw", v, sizeof v, e, sizeof e) == 0)
        o->nchw = !strcmp(v, "1");
    return 0;
}

/* n comma-separated floats of s into a new array; NULL if malformed. */
static float *s_parse_floats(const char *s, int n)
{
    float *v = nn_xmalloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtof(s, &end);
        if (end == s || !(v[i] == v[i]) || *end != (i + 1 < n ? ',' : 0)) {
            free(v);
            return NULL;
        }
        s = end + (i + 1 < n);
    }
    return v;
}

/* The class names (one per line) of a model file, if recorded. */
static int s_info_names(const char *path, node_data_info *in, char *buf, char *err,
                        size_t errlen)
{
    char e[256];
    if (nn_safetensors_meta(path, "class_names", buf, S_META_MAX, e, sizeof e) != 0)
        return 0;
    in->names = nn_xcalloc((size_t)in->classes, sizeof *in->names);
    char *p = buf;
    for (int k = 0; k < in->classes; k++) {
        char *nl = strchr(p, '\n');
        if ((k + 1 < in->classes) != (nl != NULL))
            return nn_errf(err, errlen, "%s: metadata class_names does not hold %d names", path,
                           in->classes);
        if (nl)
            *nl = 0;
        in->names[k] = nn_xstrdup(p);
        p = nl ? nl + 1 : p;
    }
    return 0;
}

int node_data_info_read(const char *path, node_data_info *in, char *err, size_t errlen)
{
    char v[64], e[256];
    memset(in, 0, sizeof *in);
    if (nn_safetensors_meta(path, "input_shape", v, sizeof v, err, errlen) != 0 ||
        nn_safetensors_meta(path, "data", in->data, sizeof in->data, err, errlen) != 0)
        return -1;
    if (sscanf(v, "%d,%d,%d", &in->c, &in->h, &in->w) != 3 || in->c < 1 || in->h < 1 ||
        in->w < 1 || in->c > 65536 || in->h > 16384 || in->w > 16384)
        return nn_errf(err, errlen, "%s: bad metadata input_shape '%s'", path, v);
    if (nn_safetensors_meta(path, "classes", v, sizeof v, err, errlen) != 0)
        return -1;
    in->classes = atoi(v);
    if (in->classes < 1 || in->classes > 256)
        return nn_errf(err, errlen, "%s: bad metadata classes '%s'", path, v);
    if (nn_safetensors_meta(path, "input_type", v, sizeof v, e, sizeof e) == 0)
        in->is_float = !strcmp(v, "float");
    char *buf = nn_xmalloc(S_META_MAX);
    int rc = s_info_names(path, in, buf, err, errlen);
    if (rc == 0 && nn_safetensors_meta(path, "norm_mean", buf, S_META_MAX, e, sizeof e) == 0) {
        in->mean = s_parse_floats(buf, in->c);
        if (nn_safetensors_meta(path, "norm_std", buf, S_META_MAX, e, sizeof e) == 0)
            in->std = s_parse_floats(buf, in->c);
        if (!in->mean || !in->std)
            rc = nn_errf(err, errlen, "%s: metadata norm_mean/norm_std do not hold %d numbers",
                         path, in->c);
        for (int i = 0; rc == 0 && i < in->c; i++)
            if (!(in->std[i] > 0))
                rc = nn_errf(err, errlen, "%s: metadata norm_std[%d] is not positive", path, i);
    }
    free(buf);
    if (rc != 0)
        node_data_info_free(in);
    return rc;
}

void node_data_info_free(node_data_info *in)
{
    for (int k = 0; in->names && k < in->classes; k++)
        free(in->names[k]);
    free(in->names);
    free(in->mean);
    free(in->std);
    memset(in, 0, sizeof *in);
}

const char *node_data_info_class(const node_data_info *in, int k, char *buf, size_t len)
{
    if (in->names && k >= 0 && k < in->classes)
        return in->names[k];
    snprintf(buf, len, "%d", k);
    return buf;
}
