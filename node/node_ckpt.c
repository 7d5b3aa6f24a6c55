/* node_ckpt — see node_ckpt.h. */
#include "node/node_ckpt.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "nn/nn_safetensors.h"

#define S_FORMAT  "lpgossip-ckpt"
#define S_VERSION "2"

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

/* "COUNT:FNV" of the parts' prefixes (what state the file holds), and a
 * readable list of them (truncated) for messages. */
static void s_parts_sig(const s_parts *p, char sig[40], char *list, size_t listlen)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t used = 0;
    list[0] = '\0';
    for (int k = 0; k < p->n; k++) {
        for (const char *c = p->pre[k]; *c; c++) {
            h ^= (unsigned char)*c;
            h *= 0x100000001b3ULL;
        }
        if (used + 2 < listlen) {
            int w = snprintf(list + used, listlen - used, "%s%s", k ? " " : "", p->pre[k]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    snprintf(sig, 40, "%d:%016" PRIx64, p->n, h);
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

/* ---- identity, digests, checksum -------------------------------------- */

static uint64_t s_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t k = 0; k < n; k++) {
        h ^= b[k];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define S_FNV_INIT 0xcbf29ce484222325ULL

/* FNV-1a 64 of the file's bytes into hex[17]. */
static int s_file_digest(const char *what, const char *path, char hex[17], char *err,
                         size_t errlen)
{
    char why[1200];
    FILE *f = nn_fopen_regular(path, NULL, why, sizeof why);
    if (!f)
        return nn_errf(err, errlen, "cannot read the %s %s", what, why); /* why: "PATH: ..." */
    uint64_t h = S_FNV_INIT;
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        h = s_fnv(h, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return nn_errf(err, errlen, "cannot read the %s %s", what, path);
    snprintf(hex, 17, "%016" PRIx64, h);
    return 0;
}

/* Appends the pair key, printf(fmt, ...) to id (key: a string literal). */
__attribute__((format(printf, 5, 6)))
static void s_ident_add(node_ckpt_ident *id, size_t *used, int *m, const char *key,
                        const char *fmt, ...)
{
    assert(*m / 2 < NODE_CKPT_MAX_IDENT);
    char *dst = id->buf + *used;
    size_t room = sizeof id->buf - *used;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    assert(len >= 0 && (size_t)len < room); /* our own buffer, values bounded below */
    *used += (size_t)len + 1;
    id->kv[(*m)++] = key;
    id->kv[(*m)++] = dst;
    id->kv[*m] = NULL;
}

/* The shortest %g text that reads back as v exactly. */
static void s_fmt_double(double v, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

int node_ckpt_ident_make(node_ckpt_ident *id, const node_ckpt_run *run, char *err,
                         size_t errlen)
{
    char digest[17], eta[32], skew[32];
    s_fmt_double(run->eta, eta, sizeof eta);
    s_fmt_double(run->skew, skew, sizeof skew);
    char init[17] = "";
    if (s_file_digest("topology file", run->topology_path, digest, err, errlen) != 0 ||
        (run->init_path && run->init_path[0] &&
         s_file_digest("--init file", run->init_path, init, err, errlen) != 0))
        return -1;
    size_t used = 0;
    int m = 0;
    memset(id, 0, sizeof *id);
    s_ident_add(id, &used, &m, "model", "%.60s", run->model);
    s_ident_add(id, &used, &m, "norm", "%.60s", run->norm);
    s_ident_add(id, &used, &m, "precision", "%.60s", run->precision);
    s_ident_add(id, &used, &m, "data", "%.500s", run->data);
    s_ident_add(id, &used, &m, "groups", "%d", run->groups);
    s_ident_add(id, &used, &m, "layout", "%08x", (unsigned)run->layout);
    s_ident_add(id, &used, &m, "algo", "%.60s", run->algo);
    s_ident_add(id, &used, &m, "compressor", "%.200s", run->compressor);
    s_ident_add(id, &used, &m, "eta", "%s", eta);
    s_ident_add(id, &used, &m, "push_sum", "%s", run->push_sum ? "on" : "off");
    s_ident_add(id, &used, &m, "skew", "%s", skew);
    s_ident_add(id, &used, &m, "train_subset", "%ld", run->train_subset);
    s_ident_add(id, &used, &m, "topology", "%.500s (%d nodes)", run->topology_path, run->nodes);
    s_ident_add(id, &used, &m, "topology_digest", "%s", digest);
    s_ident_add(id, &used, &m, "rank", "%d", run->rank);
    s_ident_add(id, &used, &m, "seed", "%ld", run->seed);
    s_ident_add(id, &used, &m, "batch", "%ld", run->batch);
    if (run->model_digest && run->model_digest[0])
        s_ident_add(id, &used, &m, "model_digest", "%.16s", run->model_digest);
    if (init[0])
        s_ident_add(id, &used, &m, "init_digest", "%s", init);
    if (run->data_opts && run->data_opts[0])
        s_ident_add(id, &used, &m, "data_opts", "%.200s", run->data_opts);
    return 0;
}

/* FNV-1a 64 over the identity pairs (key NUL value NUL ...), hex[17]. */
static void s_run_digest(const char *const *ident, char hex[17])
{
    uint64_t h = S_FNV_INIT;
    for (int k = 0; ident && ident[k]; k++)
        h = s_fnv(h, ident[k], strlen(ident[k]) + 1);
    snprintf(hex, 17, "%016" PRIx64, h);
}

/* What a differing identity key means, for the message. */
static const char *s_ident_hint(const char *key)
{
    if (!strcmp(key, "topology_digest"))
        return " (the topology file's contents changed since the checkpoint was written)";
    if (!strcmp(key, "model_digest"))
        return " (the model file's contents changed since the checkpoint was written)";
    if (!strcmp(key, "skew") || !strcmp(key, "train_subset") || !strcmp(key, "seed") ||
        !strcmp(key, "data_opts"))
        return " (another data partition)";
    return "";
}

/* The state metadata covered by the checksum, in order. */
static const char *const s_crc_keys[] = {"iter", "psi", "rng_model", "rng_aug", "rng_comp",
                                         "sampler_pos", "sgd_last_lr", "gossip_every",
                                         "run_digest", "parts"};
#define S_NCRC_KEYS (sizeof s_crc_keys / sizeof *s_crc_keys)

/* CRC-32 of the arenas' views (bytes as in the file) and then of the
 * values vals[0..S_NCRC_KEYS), each with its NUL. */
static uint32_t s_crc(const nn_arena *a, int n, const char *const *vals)
{
    uint32_t crc = 0;
    for (int k = 0; k < n; k++)
        crc = nn_safetensors_crc32(crc, &a[k]);
    for (size_t k = 0; k < S_NCRC_KEYS; k++)
        crc = (uint32_t)crc32(crc, (const unsigned char *)vals[k], (uInt)strlen(vals[k]) + 1);
    return crc;
}

/* The state must be finite to be saved (a checkpoint is what a resumed
 * node trusts). */
static int s_parts_finite(const s_parts *p, const char *path, char *err, size_t errlen)
{
    char e[512];
    for (int k = 0; k < p->n; k++)
        if (nn_arena_check_finite(&p->a[k], NULL, p->pre[k], e, sizeof e) != 0)
            return nn_errf(err, errlen, "checkpoint %s not written (the previous one is kept): "
                           "%s", path, e);
    return 0;
}

int node_ckpt_save(const char *path, const node_ckpt *c, uint64_t iter, char *err, size_t errlen)
{
    uint64_t H = c->gossip_every ? c->gossip_every : 1;
    if (c->g && gossip_node_iter(c->g) != iter / H)
        return nn_errf(err, errlen, "checkpoint %s: iteration %llu (gossip round %llu) but the gossip state is at round %llu",
                       path, (unsigned long long)iter, (unsigned long long)(iter / H),
                       (unsigned long long)gossip_node_iter(c->g));
    char s_iter[32], s_psi[64], s_rm[80], s_ra[80], s_rc[80], s_pos[32], s_lr[64], s_every[32],
         s_digest[17], s_crc32[16];
    gossip_node_state gs = {iter / H, 1.0, {{0, 0, 0, 0}}};
    if (c->g)
        gossip_node_export(c->g, &gs);
    if (!isfinite(gs.psi) || !isfinite(c->sgd->last_lr))
        return nn_errf(err, errlen, "checkpoint %s not written (the previous one is kept): psi "
                       "%g, learning rate %g", path, gs.psi, (double)c->sgd->last_lr);
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
    s_run_digest(c->ident, s_digest);
    s_parts p;
    s_parts_make(&p, c);
    if (s_parts_finite(&p, path, err, errlen) != 0) {
        s_parts_free(&p);
        return -1;
    }
    char s_sig[40], list[8];
    s_parts_sig(&p, s_sig, list, sizeof list);
    const char *crc_vals[S_NCRC_KEYS] = {s_iter, s_psi, s_rm, s_ra, s_rc, s_pos, s_lr, s_every,
                                         s_digest, s_sig};
    snprintf(s_crc32, sizeof s_crc32, "%08x", (unsigned)s_crc(p.a, p.n, crc_vals));
    const char *meta[2 * (13 + NODE_CKPT_MAX_IDENT) + 1];
    int m = 0;
    const char *fixed[] = {"format", S_FORMAT, "version", S_VERSION, "iter", s_iter,
                           "psi", s_psi, "rng_model", s_rm, "rng_aug", s_ra,
                           "rng_comp", s_rc, "sampler_pos", s_pos, "sgd_last_lr", s_lr,
                           "gossip_every", s_every, "run_digest", s_digest, "parts", s_sig,
                           "crc32", s_crc32};
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        meta[m++] = fixed[k];
    for (int k = 0; c->ident && c->ident[k]; k += 2) {
        assert(k / 2 < NODE_CKPT_MAX_IDENT && c->ident[k + 1]);
        meta[m++] = c->ident[k];
        meta[m++] = c->ident[k + 1];
    }
    meta[m] = NULL;
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

/* Steps 1 and 2 of node_ckpt_load: a checkpoint of this version, of this
 * run (the identity pairs).  0, or -1 with a message. */
static int s_check_identity(const char *path, const node_ckpt *c, char *err, size_t errlen)
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
    if (!strcmp(val, "1"))
        return nn_errf(err, errlen, "cannot resume from %s: checkpoint version 1 (written by an "
                       "older lpgossip, without checksum or run digest); this lpgossip reads "
                       "version %s: start the run afresh", path, S_VERSION);
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
                           "'%s'%s (resume with the same flags and topology)",
                           path, c->ident[k], val, c->ident[k + 1], s_ident_hint(c->ident[k]));
    }
    return 0;
}

/* The checksummed scalars of a checkpoint, indexed like s_crc_keys. */
enum { V_ITER, V_PSI, V_RM, V_RA, V_RC, V_POS, V_LR, V_EVERY, V_DIGEST, V_PARTS };

/* The scalar state of a checkpoint, read and checked by s_read_scalars. */
typedef struct {
    char     sv[S_NCRC_KEYS][128]; /* the values as written, for the checksum */
    char     crc_txt[32];          /* the recorded crc32 */
    uint64_t H;                    /* this run's gossip_every, at least 1 */
    uint64_t it, pos;              /* iter, sampler_pos */
    double   psi, lr;              /* psi, sgd_last_lr */
    nn_rng   rm, ra, rcomp;        /* rng_model, rng_aug, rng_comp */
} s_scalars;

/* Step 3 of node_ckpt_load: the scalars, kept as written for the checksum;
 * checks the run digest, gossip_every, iter, psi, lr and the rng states. */
static int s_read_scalars(const char *path, const node_ckpt *c, s_scalars *s, char *err,
                          size_t errlen)
{
    char want_digest[17];
    for (size_t k = 0; k < S_NCRC_KEYS; k++)
        if (s_meta(path, s_crc_keys[k], s->sv[k], sizeof s->sv[k], err, errlen) != 0)
            return -1;
    if (s_meta(path, "crc32", s->crc_txt, sizeof s->crc_txt, err, errlen) != 0)
        return -1;
    s_run_digest(c->ident, want_digest);
    if (strcmp(s->sv[V_DIGEST], want_digest) != 0)
        return nn_errf(err, errlen, "cannot resume from %s: its run digest %s differs from this "
                       "run's %s (the run is defined by other values: another lpgossip version, "
                       "or edited metadata)", path, s->sv[V_DIGEST], want_digest);
    uint64_t every;
    s->H = c->gossip_every ? c->gossip_every : 1;
    if (s_u64(path, "gossip_every", s->sv[V_EVERY], &every, err, errlen) != 0)
        return -1;
    if (every != s->H)
        return nn_errf(err, errlen, "cannot resume from %s: it was written with --gossip-every "
                       "%llu, this run has %llu", path, (unsigned long long)every,
                       (unsigned long long)s->H);
    if (s_u64(path, "iter", s->sv[V_ITER], &s->it, err, errlen) ||
        s_u64(path, "sampler_pos", s->sv[V_POS], &s->pos, err, errlen) ||
        s_dbl(path, "psi", s->sv[V_PSI], &s->psi, err, errlen) ||
        s_dbl(path, "sgd_last_lr", s->sv[V_LR], &s->lr, err, errlen))
        return -1;
    if (c->max_iter && s->it > c->max_iter)
        return nn_errf(err, errlen, "cannot resume from %s: it records iteration %llu, beyond the "
                       "%llu iterations of this run", path, (unsigned long long)s->it,
                       (unsigned long long)c->max_iter);
    if (!isfinite(s->psi) || !(s->psi > 0) || !isfinite(s->lr))
        return nn_errf(err, errlen, "cannot resume from %s: psi %g and learning rate %g must be "
                       "finite (psi positive)", path, s->psi, s->lr);
    static const int rk[3] = {V_RM, V_RA, V_RC};
    nn_rng *rr[3] = {&s->rm, &s->ra, &s->rcomp};
    for (int k = 0; k < 3; k++)
        if (s_rng_parse(s->sv[rk[k]], rr[k]) != 0)
            return nn_errf(err, errlen, "checkpoint %s: metadata %s = '%s' is not 64 hex digits", path,
                           s_crc_keys[rk[k]], s->sv[rk[k]]);
    return 0;
}

/* Step 4: makes the state parts this run needs into *p and checks that the
 * file holds the same set (its signature file_sig).  On failure p is freed. */
static int s_check_parts(const char *path, const node_ckpt *c, const char *file_sig, s_parts *p,
                         char *err, size_t errlen)
{
    s_parts_make(p, c);
    char sig[40], list[256];
    s_parts_sig(p, sig, list, sizeof list);
    if (strcmp(sig, file_sig) != 0) {
        s_parts_free(p);
        return nn_errf(err, errlen, "cannot resume from %s: it holds another set of state "
                       "tensors (%s) than this run needs (%s: %s): another --qgm, --no-gossip "
                       "or gossip state", path, file_sig, sig, list);
    }
    return 0;
}

/* Step 5: lays out tmp[0..p->n) like the parts (the caller frees them, also
 * on failure), loads the tensors into them, checks checksum and finiteness. */
static int s_load_tensors(const char *path, const s_parts *p, const s_scalars *s, nn_arena *tmp,
                          char *err, size_t errlen)
{
    char e[512];
    nn_arena **ptrs = nn_xcalloc((size_t)p->n, sizeof *ptrs);
    for (int k = 0; k < p->n; k++) {
        nn_arena_init(&tmp[k]);
        nn_arena_clone_layout(&tmp[k], &p->a[k]);
        ptrs[k] = &tmp[k];
    }
    int rc = nn_safetensors_load_prefixed(path, ptrs, (const char *const *)p->pre, p->n, e,
                                          sizeof e);
    free(ptrs);
    if (rc != 0)
        return nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
    const char *vals[S_NCRC_KEYS];
    for (size_t k = 0; k < S_NCRC_KEYS; k++)
        vals[k] = s->sv[k];
    char have_crc[16];
    snprintf(have_crc, sizeof have_crc, "%08x", (unsigned)s_crc(tmp, p->n, vals));
    if (strcmp(have_crc, s->crc_txt) != 0)
        return nn_errf(err, errlen, "cannot resume from %s: checksum mismatch (crc32 %s "
                       "recorded, %s computed): the file is corrupt or was edited", path,
                       s->crc_txt, have_crc);
    for (int k = 0; k < p->n; k++)
        if (nn_arena_check_finite(&tmp[k], NULL, p->pre[k], e, sizeof e) != 0)
            return nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
    return 0;
}

/* Step 6: the gossip state first (the only step that can still refuse),
 * then the rest of tmp into the live node, the rngs, sampler, lr, *iter. */
static int s_apply(const char *path, node_ckpt *c, const s_parts *p, const nn_arena *tmp,
                   const s_scalars *s, uint64_t *iter, char *err, size_t errlen)
{
    int first_g = 2 + (c->sgd->prev.numel ? 1 : 0);
    int nv = c->g ? gossip_node_nvec(c->g) : 0;
    if (c->g) {
        char e[512];
        const float **vec = nn_xcalloc((size_t)(nv ? nv : 1), sizeof *vec);
        for (int k = 0; k < nv; k++)
            vec[k] = tmp[first_g + k].data;
        gossip_node_state gs = {s->it / s->H, s->psi, s->rcomp};
        int rc = gossip_node_import(c->g, &gs, vec, e, sizeof e);
        free(vec);
        if (rc != 0)
            return nn_errf(err, errlen, "cannot resume from %s: %s", path, e);
    }
    for (int k = 0; k < p->n; k++) {
        if (k >= first_g && k < first_g + nv)
            continue; /* imported above */
        memcpy(p->live[k], tmp[k].data, tmp[k].numel * sizeof(float));
    }
    if (c->model_rng)
        *c->model_rng = s->rm;
    if (c->aug_rng)
        *c->aug_rng = s->ra;
    if (c->sampler)
        nn_sampler_seek(c->sampler, s->pos);
    c->sgd->last_lr = (float)s->lr;
    *iter = s->it;
    return 0;
}

int node_ckpt_load(const char *path, node_ckpt *c, uint64_t *iter, char *err, size_t errlen)
{
    if (s_check_identity(path, c, err, errlen) != 0)
        return -1;
    s_scalars s;
    if (s_read_scalars(path, c, &s, err, errlen) != 0)
        return -1;
    s_parts p;
    if (s_check_parts(path, c, s.sv[V_PARTS], &p, err, errlen) != 0)
        return -1;
    nn_arena *tmp = nn_xcalloc((size_t)p.n, sizeof *tmp);
    int rc = s_load_tensors(path, &p, &s, tmp, err, errlen);
    if (rc == 0)
        rc = s_apply(path, c, &p, tmp, &s, iter, err, errlen);
    for (int k = 0; k < p.n; k++)
        nn_arena_free(&tmp[k]);
    free(tmp);
    s_parts_free(&p);
    return rc;
}
