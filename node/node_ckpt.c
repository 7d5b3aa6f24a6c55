/* node_ckpt — see node_ckpt.h. */
#include "node/node_ckpt.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_safetensors.h"

#define S_FORMAT  "lpgossip-ckpt"
#define S_VERSION "1"

/* The tensors of a checkpoint: arena k is saved with prefix pre[k]. */
typedef struct {
    int        n;
    nn_arena  *a;      /* n shallow or owned arenas */
    char     **pre;    /* n owned prefixes */
    float    **live;   /* n: where the values live in the running node */
} s_parts;

static void s_add(s_parts *p, const nn_arena *layout, float *live, const char *prefix)
{
    p->a[p->n] = *layout; /* shallow: views shared, data set below */
    p->a[p->n].data = live;
    p->pre[p->n] = nn_xstrdup(prefix);
    p->live[p->n] = live;
    p->n++;
}

static void s_parts_make(s_parts *p, const node_ckpt *c)
{
    int nv = c->g ? gossip_node_nvec(c->g) : 0;
    int cap = 4 + nv;
    p->n = 0;
    p->a = nn_xcalloc((size_t)cap, sizeof *p->a);
    p->pre = nn_xcalloc((size_t)cap, sizeof *p->pre);
    p->live = nn_xcalloc((size_t)cap, sizeof *p->live);
    s_add(p, c->layout, c->x, "x.");
    s_add(p, c->layout, c->sgd->mom.data, "momentum.");
    if (c->sgd->prev.numel)
        s_add(p, c->layout, c->sgd->prev.data, "qgm_prev.");
    for (int k = 0; k < nv; k++) {
        char name[48], pre[64];
        const float *v = gossip_node_vec(c->g, k, name, sizeof name);
        snprintf(pre, sizeof pre, "gossip.%s.", name);
        s_add(p, c->layout, (float *)v, pre); /* only read by save; load copies via import */
    }
    if (c->buffers && c->buffers->nviews)
        s_add(p, c->buffers, c->buffers->data, "buffers.");
}

static void s_parts_free(s_parts *p)
{
    for (int k = 0; k < p->n; k++)
        free(p->pre[k]);
    free(p->a);
    free(p->pre);
    free(p->live);
}

static void s_rng_fmt(const nn_rng *r, char *buf, size_t len)
{
    snprintf(buf, len, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, r->s[0], r->s[1],
             r->s[2], r->s[3]);
}

static int s_rng_parse(const char *s, nn_rng *r)
{
    if (strlen(s) != 64)
        return -1;
    for (int w = 0; w < 4; w++) {
        uint64_t v = 0;
        for (int k = 0; k < 16; k++) {
            char ch = s[w * 16 + k];
            int dgt = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (dgt < 0)
                return -1;
            v = v << 4 | (uint64_t)dgt;
        }
        r->s[w] = v;
    }
    return 0;
}

int node_ckpt_save(const char *path, const node_ckpt *c, uint64_t iter, char *err, size_t errlen)
{
    uint64_t H = c->gossip_every ? c->gossip_every : 1;
    if (c->g && gossip_node_iter(c->g) != iter / H)
        return nn_errf(err, errlen, "checkpoint %s: iteration %llu (gossip round %llu) but the gossip state is at round %llu",
                       path, (unsigned long long)iter, (unsigned long long)(iter / H),
                       (unsigned long long)gossip_node_iter(c->g));
    char s_iter[32], s_psi[64], s_rm[80], s_ra[80], s_rc[80], s_pos[32], s_lr[64], s_every[32];
    gossip_node_state gs = {iter / H, 1.0, {{0, 0, 0, 0}}};
    if (c->g)
        gossip_node_export(c->g, &gs);
    nn_rng zero = {{0, 0, 0, 0}};
    snprintf(s_iter, sizeof s_iter, "%llu", (unsigned long long)iter);
    snprintf(s_psi, sizeof s_psi, "%a", gs.psi);
    s_rng_fmt(c->model_rng ? c->model_rng : &zero, s_rm, sizeof s_rm);
    s_rng_fmt(c->aug_rng ? c->aug_rng : &zero, s_ra, sizeof s_ra);
    s_rng_fmt(&gs.rng, s_rc, sizeof s_rc);
    snprintf(s_pos, sizeof s_pos, "%llu",
             (unsigned long long)(c->sampler ? nn_sampler_position(c->sampler) : 0));
    snprintf(s_lr, sizeof s_lr, "%a", (double)c->sgd->last_lr);
    snprintf(s_every, sizeof s_every, "%llu", (unsigned long long)H);
    const char *meta[2 * (10 + NODE_CKPT_MAX_IDENT) + 1];
    int m = 0;
    const char *fixed[] = {"format", S_FORMAT, "version", S_VERSION, "iter", s_iter,
                           "psi", s_psi, "rng_model", s_rm, "rng_aug", s_ra,
                           "rng_comp", s_rc, "sampler_pos", s_pos, "sgd_last_lr", s_lr,
                           "gossip_every", s_every};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        meta[m++] = fixed[k];
    for (int k = 0; c->ident && c->ident[k]; k += 2) {
        assert(k / 2 < NODE_CKPT_MAX_IDENT && c->ident[k + 1]);
        meta[m++] = c->ident[k];
        meta[m++] = c->ident[k + 1];
    }
    meta[m] = NULL;
    s_parts p;
    s_parts_make(&p, c);
    const nn_arena **arenas = nn_xcalloc((size_t)p.n, sizeof *arenas);
    for (int k = 0; k < p.n; k++)
        arenas[k] = &p.a[k];
    int rc = nn_safetensors_save_prefixed(path, arenas, (const char *const *)p.pre, p.n, meta,
                                          err, errlen);
    free(arenas);
    s_parts_free(&p);
    return rc;
}

static int s_meta(const char *path, const char *key, char *val, size_t len, char *err,
                  size_t errlen)
{
    char e[512];
    if (nn_safetensors_meta(path, key, val, len, e, sizeof e) != 0)
        return nn_errf(err, errlen, "checkpoint %s: %s", path, e);
    return 0;
}

static int s_u64(const char *path, const char *key, const char *s, uint64_t *out, char *err,
                 size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return nn_errf(err, errlen, "checkpoint %s: metadata %s = '%s' is not an unsigned integer",
                       path, key, s);
    *out = (uint64_t)v;
    return 0;
}

static int s_dbl(const char *path, const char *key, const char *s, double *out, char *err,
                 size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return nn_errf(err, errlen, "checkpoint %s: metadata %s = '%s' is not a number", path,
                       key, s);
    *out = v;
    return 0;
}

int node_ckpt_load(const char *path, node_ckpt *c, uint64_t *iter, char *err, size_t errlen)
{
    char val[512], e[512];
    /* 1. is it a checkpoint at all (this also validates the whole header) */
    if (nn_safetensors_meta(path, "format", val, sizeof val, e, sizeof e) != 0)
        return nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
    if (strcmp(val, S_FORMAT) != 0)
        return nn_errf(err, errlen, "cannot resume from %s: format '%s' is not an lpgossip checkpoint",
                       path, val);
    if (s_meta(path, "version", val, sizeof val, err, errlen) != 0)
        return -1;
    if (strcmp(val, S_VERSION) != 0)
        return nn_errf(err, errlen, "cannot resume from %s: checkpoint version %s, this lpgossip reads %s",
                       path, val, S_VERSION);
    /* 2. same run? */
    for (int k = 0; c->ident && c->ident[k]; k += 2) {
        if (nn_safetensors_meta(path, c->ident[k], val, sizeof val, e, sizeof e) != 0)
            return nn_errf(err, errlen, "cannot resume from %s: it does not record '%s' (%s)",
                           path, c->ident[k], e);
        if (strcmp(val, c->ident[k + 1]) != 0)
            return nn_errf(err, errlen, "cannot resume from %s: it was written with %s '%s', this run has "
                           "'%s' (resume with the same flags and topology)",
                           path, c->ident[k], val, c->ident[k + 1]);
    }
    /* 2b. the same rounds per iteration (absent in files of before
     * --gossip-every: 1) */
    uint64_t every = 1, H = c->gossip_every ? c->gossip_every : 1;
    if (nn_safetensors_meta(path, "gossip_every", val, sizeof val, e, sizeof e) == 0 &&
        s_u64(path, "gossip_every", val, &every, err, errlen) != 0)
        return -1;
    if (every != H)
        return nn_errf(err, errlen, "cannot resume from %s: it was written with --gossip-every "
                       "%llu, this run has %llu", path, (unsigned long long)every,
                       (unsigned long long)H);
    /* 3. scalars */
    uint64_t it, pos;
    double psi, lr;
    nn_rng rm, ra, rcomp;
    char buf[128];
    if (s_meta(path, "iter", buf, sizeof buf, err, errlen) || s_u64(path, "iter", buf, &it, err, errlen) ||
        s_meta(path, "sampler_pos", buf, sizeof buf, err, errlen) ||
        s_u64(path, "sampler_pos", buf, &pos, err, errlen) ||
        s_meta(path, "psi", buf, sizeof buf, err, errlen) || s_dbl(path, "psi", buf, &psi, err, errlen) ||
        s_meta(path, "sgd_last_lr", buf, sizeof buf, err, errlen) ||
        s_dbl(path, "sgd_last_lr", buf, &lr, err, errlen))
        return -1;
    static const char *rk[3] = {"rng_model", "rng_aug", "rng_comp"};
    nn_rng *rr[3] = {&rm, &ra, &rcomp};
    for (int k = 0; k < 3; k++) {
        if (s_meta(path, rk[k], buf, sizeof buf, err, errlen) != 0)
            return -1;
        if (s_rng_parse(buf, rr[k]) != 0)
            return nn_errf(err, errlen, "checkpoint %s: metadata %s = '%s' is not 64 hex digits", path,
                           rk[k], buf);
    }
    /* 4. tensors into temporaries */
    s_parts p;
    s_parts_make(&p, c);
    nn_arena *tmp = nn_xcalloc((size_t)p.n, sizeof *tmp);
    nn_arena **ptrs = nn_xcalloc((size_t)p.n, sizeof *ptrs);
    for (int k = 0; k < p.n; k++) {
        nn_arena_init(&tmp[k]);
        nn_arena_clone_layout(&tmp[k], &p.a[k]);
        ptrs[k] = &tmp[k];
    }
    int rc = nn_safetensors_load_prefixed(path, ptrs, (const char *const *)p.pre, p.n, e, sizeof e);
    if (rc != 0)
        nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
    /* 5. gossip state first (the only step that can still refuse), then the rest */
    int first_g = 2 + (c->sgd->prev.numel ? 1 : 0);
    if (rc == 0 && c->g) {
        int nv = gossip_node_nvec(c->g);
        const float **vec = nn_xcalloc((size_t)(nv ? nv : 1), sizeof *vec);
        for (int k = 0; k < nv; k++)
            vec[k] = tmp[first_g + k].data;
        gossip_node_state gs = {it / H, psi, rcomp};
        if (gossip_node_import(c->g, &gs, vec, e, sizeof e) != 0)
            rc = nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
        free(vec);
    }
    if (rc == 0) {
        int nv = c->g ? gossip_node_nvec(c->g) : 0;
        for (int k = 0; k < p.n; k++) {
            if (k >= first_g && k < first_g + nv)
                continue; /* imported above */
            memcpy(p.live[k], tmp[k].data, tmp[k].numel * sizeof(float));
        }
        if (c->model_rng)
            *c->model_rng = rm;
        if (c->aug_rng)
            *c->aug_rng = ra;
        if (c->sampler)
            nn_sampler_seek(c->sampler, pos);
        c->sgd->last_lr = (float)lr;
        *iter = it;
    }
    for (int k = 0; k < p.n; k++)
        nn_arena_free(&tmp[k]);
    free(tmp);
    free(ptrs);
    s_parts_free(&p);
    return rc;
}
