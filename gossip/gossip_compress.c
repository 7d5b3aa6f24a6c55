/* gossip_compress — see gossip_compress.h.
 *
 * Dimension legend: n numel of one tensor, k values kept, B = GOSSIP_QBLOCK.
 */
#include "gossip/gossip_compress.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- spec parsing: one row per compressor ------------------------------- */

enum { S_ARG_NONE, S_ARG_FRACTION, S_ARG_LEVELS };

typedef struct {
    const char *name;
    int         is_sparsifier;
    int         kind;      /* gossip_sparse_kind or gossip_quant_kind */
    int         arg;
    const char *usage;
} s_entry;

static const s_entry s_table[] = {
    { "identity", 0, GOSSIP_QUANT_NONE,   S_ARG_NONE,     "identity" },
    { "topk",     1, GOSSIP_SPARSE_TOPK,  S_ARG_FRACTION, "topk:F" },
    { "randk",    1, GOSSIP_SPARSE_RANDK, S_ARG_FRACTION, "randk:F" },
    { "q8",       0, GOSSIP_QUANT_Q8,     S_ARG_NONE,     "q8" },
    { "qsgd",     0, GOSSIP_QUANT_QSGD,   S_ARG_LEVELS,   "qsgd:S" },
};
#define S_NTABLE (sizeof s_table / sizeof s_table[0])

static int s_known(char *err, size_t errlen, const char *what, const char *tok)
{
    char list[160] = "";
    for (size_t i = 0; i < S_NTABLE; i++) {
        strncat(list, s_table[i].usage, sizeof list - strlen(list) - 1);
        if (i + 1 < S_NTABLE)
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return nn_errf(err, errlen, "compressor: %s '%s' (known: %s; combine as SPARSIFIER+QUANTIZER)",
                   what, tok, list);
}

/* Parses one token "name[:arg]" into c. */
static int s_parse_token(gossip_compressor *c, const char *tok, int position, int ntok,
                         char *err, size_t errlen)
{
    char name[32];
    const char *colon = strchr(tok, ':');
    size_t nlen = colon ? (size_t)(colon - tok) : strlen(tok);
    if (nlen == 0 || nlen >= sizeof name)
        return s_known(err, errlen, "bad part", tok);
    memcpy(name, tok, nlen);
    name[nlen] = 0;
    const s_entry *e = NULL;
    for (size_t i = 0; i < S_NTABLE; i++)
        if (strcmp(s_table[i].name, name) == 0)
            e = &s_table[i];
    if (!e)
        return s_known(err, errlen, "unknown compressor", tok);
    if (strcmp(e->name, "identity") == 0 && ntok != 1)
        return nn_errf(err, errlen, "compressor: 'identity' cannot be combined with anything");
    if (e->is_sparsifier && position != 0)
        return nn_errf(err, errlen, "compressor: sparsifier '%s' must come first (SPARSIFIER+QUANTIZER)", tok);
    if (!e->is_sparsifier && position == 0 && ntok == 2)
        return nn_errf(err, errlen, "compressor: '%s' is a quantizer; the first part of A+B must be a sparsifier (topk, randk)", tok);
    if (e->arg == S_ARG_NONE && colon)
        return nn_errf(err, errlen, "compressor: '%s' takes no argument", name);
    if (e->arg != S_ARG_NONE && !colon)
        return nn_errf(err, errlen, "compressor: '%s' needs an argument, as in %s", name, e->usage);
    if (e->arg == S_ARG_FRACTION) {
        char *end;
        double f = strtod(colon + 1, &end);
        if (end == colon + 1 || *end || !(f > 0.0 && f <= 1.0))
            return nn_errf(err, errlen, "compressor: fraction in '%s' must be a number in (0, 1]", tok);
        c->sparse = (gossip_sparse_kind)e->kind;
        c->fraction = f;
    } else {
        if (e->arg == S_ARG_LEVELS) {
            char *end;
            long s = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || s < 1 || s > 127)
                return nn_errf(err, errlen, "compressor: levels in '%s' must be an integer in 1..127", tok);
            c->levels = (int)s;
        }
        c->quant = (gossip_quant_kind)e->kind;
    }
    return 0;
}

int gossip_compressor_parse(gossip_compressor *c, const char *spec, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!spec || !*spec)
        return nn_errf(err, errlen, "compressor: empty spec (use identity, topk:F, randk:F, q8, qsgd:S or A+B)");
    char buf[128];
    if (strlen(spec) >= sizeof buf)
        return nn_errf(err, errlen, "compressor: spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *plus = strchr(buf, '+');
    int ntok = plus ? 2 : 1;
    if (plus) {
        *plus = 0;
        if (strchr(plus + 1, '+'))
            return nn_errf(err, errlen, "compressor: '%s' has more than two parts", spec);
    }
    if (s_parse_token(c, buf, 0, ntok, err, errlen) < 0)
        return -1;
    if (plus && s_parse_token(c, plus + 1, 1, ntok, err, errlen) < 0)
        return -1;
    /* canonical form */
    char sp[40] = "", qu[24] = "";
    if (c->sparse == GOSSIP_SPARSE_TOPK)
        snprintf(sp, sizeof sp, "topk:%g", c->fraction);
    else if (c->sparse == GOSSIP_SPARSE_RANDK)
        snprintf(sp, sizeof sp, "randk:%g", c->fraction);
    if (c->quant == GOSSIP_QUANT_Q8)
        snprintf(qu, sizeof qu, "q8");
    else if (c->quant == GOSSIP_QUANT_QSGD)
        snprintf(qu, sizeof qu, "qsgd:%d", c->levels);
    if (!*sp && !*qu)
        snprintf(c->spec, sizeof c->spec, "identity");
    else
        snprintf(c->spec, sizeof c->spec, "%s%s%s", sp, (*sp && *qu) ? "+" : "", qu);
    return 0;
}

size_t gossip_compressor_k(const gossip_compressor *c, size_t numel)
{
    if (c->sparse == GOSSIP_SPARSE_NONE)
        return numel;
    size_t k = (size_t)floor((double)numel * c->fraction);
    if (k < 1)
        k = 1;
    if (k > numel)
        k = numel;
    return k;
}

uint8_t gossip_compressor_block_type(const gossip_compressor *c)
{
    int q = c->quant != GOSSIP_QUANT_NONE;
    if (c->sparse == GOSSIP_SPARSE_NONE)
        return q ? GOSSIP_BLK_DENSE_Q8 : GOSSIP_BLK_DENSE_F32;
    return q ? GOSSIP_BLK_SPARSE_Q8 : GOSSIP_BLK_SPARSE_F32;
}

/* ---- output buffers ---------------------------------------------------- */

void gossip_compressed_init(gossip_compressed *out, const nn_arena *layout)
{
    memset(out, 0, sizeof *out);
    size_t total = layout->numel, maxv = 1, nsc = 0;
    for (size_t v = 0; v < layout->nviews; v++) {
        if (layout->views[v].numel > maxv)
            maxv = layout->views[v].numel;
        nsc += (layout->views[v].numel + GOSSIP_QBLOCK - 1) / GOSSIP_QBLOCK;
    }
    out->nblocks = layout->nviews;
    out->blocks = nn_xcalloc(layout->nviews ? layout->nviews : 1, sizeof *out->blocks);
    out->idx = nn_xcalloc(total ? total : 1, sizeof *out->idx);
    out->f32 = nn_xcalloc(total ? total : 1, sizeof *out->f32);
    out->q = nn_xcalloc(total ? total : 1, sizeof *out->q);
    out->scales = nn_xcalloc(nsc ? nsc : 1, sizeof *out->scales);
    out->keys = nn_xcalloc(maxv, sizeof *out->keys);
    out->mark = nn_xcalloc(maxv, sizeof *out->mark);
    out->tmp = nn_xcalloc(maxv, sizeof *out->tmp);
}

void gossip_compressed_free(gossip_compressed *out)
{
    free(out->blocks);
    free(out->idx);
    free(out->f32);
    free(out->q);
    free(out->scales);
    free(out->keys);
    free(out->mark);
    free(out->tmp);
    memset(out, 0, sizeof *out);
}

/* ---- top-k ------------------------------------------------------------- */

/* |v| as an order-preserving integer: for non-negative floats the IEEE bit
 * pattern orders like the value; NaN patterns sort above +Inf. */
static inline uint32_t s_magkey(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}

/* Value of rank r (0-based, ascending) of a[0..n); reorders a.  3-way
 * partition so runs of equal keys (zeros!) cost one pass. */
static uint32_t s_select(uint32_t *a, size_t n, size_t r)
{
    size_t lo = 0, hi = n;
    uint64_t st = 0x9e3779b97f4a7c15ULL;
    while (hi - lo > 1) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t p = a[lo + (size_t)((st >> 33) % (hi - lo))];
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            uint32_t x = a[i];
            if (x < p) {
                a[i++] = a[lt];
                a[lt++] = x;
            } else if (x > p) {
                a[i] = a[--gt];
                a[gt] = x;
            } else {
                i++;
            }
        }
        if (r < lt)
            hi = lt;
        else if (r >= gt)
            lo = gt;
        else
            return p;
    }
    return a[lo];
}

void gossip_topk(const float *v, size_t n, size_t k, uint32_t *idx, uint32_t *keys)
{
    assert(k >= 1 && k <= n);
    for (size_t i = 0; i < n; i++)
        keys[i] = s_magkey(v[i]);
    uint32_t thr = s_select(keys, n, n - k);
    size_t above = 0;
    for (size_t i = 0; i < n; i++)
        above += s_magkey(v[i]) > thr;
    assert(above < k + 1);
    size_t ties = k - above, m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = s_magkey(v[i]);
        if (key > thr || (key == thr && ties > 0)) {
            if (key == thr)
                ties--;
            idx[m++] = (uint32_t)i;
        }
    }
    assert(m == k);
}

typedef struct {
    uint32_t key, i;
} s_keyidx;

static int s_cmp_keyidx(const void *a, const void *b)
{
    const s_keyidx *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

static int s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y);
}

void gossip_topk_ref(const float *v, size_t n, size_t k, uint32_t *idx)
{
    s_keyidx *t = nn_xmalloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        t[i].key = s_magkey(v[i]);
        t[i].i = (uint32_t)i;
    }
    qsort(t, n, sizeof *t, s_cmp_keyidx);
    for (size_t i = 0; i < k; i++)
        idx[i] = t[i].i;
    qsort(idx, k, sizeof *idx, s_cmp_u32);
    free(t);
}

/* ---- rand-k (Floyd's sampling, then a scan gives increasing order) ----- */

void gossip_randk(nn_rng *rng, size_t n, size_t k, uint32_t *idx, uint8_t *mark)
{
    assert(k >= 1 && k <= n && n <= UINT32_MAX);
    for (size_t j = n - k; j < n; j++) {
        size_t t = nn_rng_below(rng, (uint32_t)(j + 1));
        if (mark[t])
            mark[j] = 1;
        else
            mark[t] = 1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (mark[i]) {
            mark[i] = 0;
            idx[m++] = (uint32_t)i;
        }
    assert(m == k);
}

/* ---- quantizers -------------------------------------------------------- */

int gossip_q8_quantize(const float *v, size_t n, int8_t *q, float *scales)
{
    for (size_t b0 = 0, s = 0; b0 < n; b0 += GOSSIP_QBLOCK, s++) {
        size_t b1 = b0 + GOSSIP_QBLOCK < n ? b0 + GOSSIP_QBLOCK : n;
        float m = 0.0f;
        for (size_t i = b0; i < b1; i++) {
            if (!isfinite(v[i]))
                return -1;
            float a = fabsf(v[i]);
            m = a > m ? a : m;
        }
        float scale = m / 127.0f;
        if (scale > FLT_MAX / 127.0f) /* the decoder refuses such scales */
            return -1;
        scales[s] = scale;
        if (scale == 0.0f) {
            memset(q + b0, 0, b1 - b0);
            continue;
        }
        for (size_t i = b0; i < b1; i++) {
            long c = lrintf(v[i] / scale);
            c = c > 127 ? 127 : (c < -127 ? -127 : c);
            q[i] = (int8_t)c;
        }
    }
    return 0;
}

int gossip_qsgd_quantize(const float *v, size_t n, int levels, nn_rng *rng, int8_t *q, float *scales)
{
    assert(levels >= 1 && levels <= 127);
    for (size_t b0 = 0, s = 0; b0 < n; b0 += GOSSIP_QBLOCK, s++) {
        size_t b1 = b0 + GOSSIP_QBLOCK < n ? b0 + GOSSIP_QBLOCK : n;
        double ss = 0.0;
        for (size_t i = b0; i < b1; i++) {
            if (!isfinite(v[i]))
                return -1;
            ss += (double)v[i] * v[i];
        }
        float scale = (float)(sqrt(ss) / levels);
        if (!isfinite(scale) || scale > FLT_MAX / 127.0f)
            return -1;
        scales[s] = scale;
        if (scale == 0.0f) {
            memset(q + b0, 0, b1 - b0);
            continue;
        }
        for (size_t i = b0; i < b1; i++) {
            double r = fabs((double)v[i]) / scale;
            int l;
            if (r >= levels) {
                l = levels;
            } else {
                l = (int)r;
                if ((double)nn_rng_uniform(rng) < r - l)
                    l++;
            }
            q[i] = (int8_t)(v[i] < 0 ? -l : l);
        }
    }
    return 0;
}

/* ---- whole layout ------------------------------------------------------ */

int gossip_compress(const gossip_compressor *c, const nn_arena *layout, const float *v,
                    nn_rng *rng, gossip_compressed *out, char *err, size_t errlen)
{
    assert(out->nblocks == layout->nviews);
    size_t soff = 0;
    for (size_t b = 0; b < layout->nviews; b++) {
        const nn_view *view = &layout->views[b];
        size_t n = view->numel, off = view->offset;
        const float *src = v + off;
        size_t k = gossip_compressor_k(c, n);
        gossip_cblock *blk = &out->blocks[b];
        memset(blk, 0, sizeof *blk);
        blk->type = gossip_compressor_block_type(c);
        blk->numel = (uint32_t)n;
        blk->k = (uint32_t)k;
        const float *vals = src; /* the k values to carry */
        if (c->sparse != GOSSIP_SPARSE_NONE) {
            uint32_t *idx = out->idx + off;
            if (c->sparse == GOSSIP_SPARSE_TOPK)
                gossip_topk(src, n, k, idx, out->keys);
            else
                gossip_randk(rng, n, k, idx, out->mark);
            for (size_t i = 0; i < k; i++)
                out->tmp[i] = src[idx[i]];
            vals = out->tmp;
            blk->idx = idx;
        }
        int rc = 0;
        switch (c->quant) {
        case GOSSIP_QUANT_NONE:
            for (size_t i = 0; i < k; i++)
                if (!isfinite(vals[i]))
                    rc = -1;
            memcpy(out->f32 + off, vals, k * sizeof *vals);
            blk->f32 = out->f32 + off;
            break;
        case GOSSIP_QUANT_Q8:
            rc = gossip_q8_quantize(vals, k, out->q + off, out->scales + soff);
            break;
        case GOSSIP_QUANT_QSGD:
            rc = gossip_qsgd_quantize(vals, k, c->levels, rng, out->q + off, out->scales + soff);
            break;
        }
        if (c->quant != GOSSIP_QUANT_NONE) {
            blk->q = out->q + off;
            blk->scales = out->scales + soff;
        }
        if (rc < 0)
            return nn_errf(err, errlen, "compress %s: tensor '%s' holds NaN or Inf (diverged?)",
                           c->spec, view->name);
        soff += (n + GOSSIP_QBLOCK - 1) / GOSSIP_QBLOCK;
    }
    return 0;
}
