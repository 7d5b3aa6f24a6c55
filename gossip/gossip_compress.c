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
enum { S_OPT_NONE = 0, S_OPT_RDECAY, S_OPT_WARMUP };

typedef struct {
    const char *name;
    int         is_sparsifier;
    int         kind;      /* gossip_sparse_kind or gossip_quant_kind */
    int         arg;
    int         opt;       /* the one option it takes, S_OPT_* */
    const char *usage;
} s_entry;

static const s_entry s_table[] = {
    { "identity", 0, GOSSIP_QUANT_NONE,   S_ARG_NONE,     S_OPT_NONE,   "identity" },
    { "topk",     1, GOSSIP_SPARSE_TOPK,  S_ARG_FRACTION, S_OPT_RDECAY, "topk:F[,rdecay=B]" },
    { "randk",    1, GOSSIP_SPARSE_RANDK, S_ARG_FRACTION, S_OPT_NONE,   "randk:F" },
    { "dgc",      1, GOSSIP_SPARSE_DGC,   S_ARG_FRACTION, S_OPT_WARMUP, "dgc:D[,warmup=E]" },
    { "q8",       0, GOSSIP_QUANT_Q8,     S_ARG_NONE,     S_OPT_NONE,   "q8" },
    { "qsgd",     0, GOSSIP_QUANT_QSGD,   S_ARG_LEVELS,   S_OPT_NONE,   "qsgd:S" },
};
#define S_NTABLE (sizeof s_table / sizeof s_table[0])

static int s_known(char *err, size_t errlen, const char *what, const char *tok)
{
    char list[200] = "";
    for (size_t i = 0; i < S_NTABLE; i++) {
        strncat(list, s_table[i].usage, sizeof list - strlen(list) - 1);
        if (i + 1 < S_NTABLE)
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return nn_errf(err, errlen, "compressor: %s '%s' (known: %s; combine as SPARSIFIER+QUANTIZER, "
                   "then +deflate)", what, tok, list);
}

/* Parses the ",key=value" options of token `tok` (opts points at the first
 * ','; the options end at the end of the string). */
static int s_parse_opts(gossip_compressor *c, const s_entry *e, const char *opts, const char *tok,
                        char *err, size_t errlen)
{
    static const char *names[] = { "", "rdecay", "warmup" };
    int seen = 0;
    while (*opts == ',') {
        const char *key = opts + 1, *eq = strchr(key, '='), *end = strchr(key, ',');
        if (!end)
            end = key + strlen(key);
        size_t klen = eq && eq < end ? (size_t)(eq - key) : (size_t)(end - key);
        if (e->opt == S_OPT_NONE || klen != strlen(names[e->opt]) || strncmp(key, names[e->opt], klen))
            return nn_errf(err, errlen, "compressor: unknown option '%.*s' in '%s' (%s)", (int)(end - key),
                           key, tok, e->opt == S_OPT_NONE ? "it takes no options" : e->usage);
        if (!eq || eq > end)
            return nn_errf(err, errlen, "compressor: option '%.*s' in '%s' needs a value, as in %s",
                           (int)(end - key), key, tok, e->usage);
        if (seen++)
            return nn_errf(err, errlen, "compressor: option '%s' given twice in '%s'", names[e->opt], tok);
        char val[32], *stop;
        size_t vlen = (size_t)(end - eq - 1);
        int ok = vlen > 0 && vlen < sizeof val;
        if (ok) {
            memcpy(val, eq + 1, vlen);
            val[vlen] = 0;
        }
        if (e->opt == S_OPT_RDECAY) {
            double b = ok ? strtod(val, &stop) : -1.0;
            if (!ok || stop == val || *stop || !(b >= 0.0 && b < 1.0))
                return nn_errf(err, errlen, "compressor: rdecay in '%s' must be a number in [0, 1) "
                               "(1 would be plain error feedback: leave it out)", tok);
            c->rdecay = b;
        } else {
            long w = ok ? strtol(val, &stop, 10) : -1;
            if (!ok || stop == val || *stop || w < 0 || w > 1000)
                return nn_errf(err, errlen, "compressor: warmup in '%s' must be a whole number of "
                               "epochs in 0..1000", tok);
            c->warmup = (int)w;
        }
        opts = end;
    }
    return 0;
}

/* Parses one token "name[:arg][,key=value]" into c. */
static int s_parse_token(gossip_compressor *c, const char *tok, int position, int ntok,
                         char *err, size_t errlen)
{
    char name[32];
    const char *colon = strchr(tok, ':');
    const char *comma = strchr(tok, ',');
    if (colon && comma && comma < colon)
        colon = NULL;
    size_t nlen = colon ? (size_t)(colon - tok) : comma ? (size_t)(comma - tok) : strlen(tok);
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
        return nn_errf(err, errlen, "compressor: 'identity' cannot be combined with anything but +deflate");
    if (e->is_sparsifier && position != 0)
        return nn_errf(err, errlen, "compressor: sparsifier '%s' must come first (SPARSIFIER+QUANTIZER)", tok);
    if (!e->is_sparsifier && position == 0 && ntok == 2)
        return nn_errf(err, errlen, "compressor: '%s' is a quantizer; the first part of A+B must be a sparsifier (topk, randk, dgc)", tok);
    if (e->arg == S_ARG_NONE && colon)
        return nn_errf(err, errlen, "compressor: '%s' takes no argument", name);
    if (e->arg != S_ARG_NONE && !colon)
        return nn_errf(err, errlen, "compressor: '%s' needs an argument, as in %s", name, e->usage);
    char arg[32] = "";
    if (colon) {
        size_t alen = comma ? (size_t)(comma - colon - 1) : strlen(colon + 1);
        if (alen >= sizeof arg)
            alen = sizeof arg - 1; /* rejected below: the number does not end */
        memcpy(arg, colon + 1, alen);
        arg[alen] = 0;
    }
    size_t arglen = colon ? (comma ? (size_t)(comma - colon - 1) : strlen(colon + 1)) : 0;
    if (e->arg == S_ARG_FRACTION) {
        char *end;
        double f = strtod(arg, &end);
        if (end == arg || *end || arglen != strlen(arg) || !(f > 0.0 && f <= 1.0))
            return nn_errf(err, errlen, "compressor: fraction in '%s' must be a number in (0, 1]", tok);
        c->sparse = (gossip_sparse_kind)e->kind;
        c->fraction = f;
    } else {
        if (e->arg == S_ARG_LEVELS) {
            char *end;
            long s = strtol(arg, &end, 10);
            if (end == arg || *end || arglen != strlen(arg) || s < 1 || s > 127)
                return nn_errf(err, errlen, "compressor: levels in '%s' must be an integer in 1..127", tok);
            c->levels = (int)s;
        }
        c->quant = (gossip_quant_kind)e->kind;
    }
    return comma ? s_parse_opts(c, e, comma, tok, err, errlen) : 0;
}

int gossip_compressor_parse(gossip_compressor *c, const char *spec, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->rdecay = 1.0;
    if (!spec || !*spec)
        return nn_errf(err, errlen, "compressor: empty spec (use identity, topk:F, randk:F, dgc:D, q8, qsgd:S or A+B, optionally +deflate)");
    char buf[128];
    if (strlen(spec) >= sizeof buf)
        return nn_errf(err, errlen, "compressor: spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *last = strrchr(buf, '+');
    if (last && !strcmp(last + 1, "deflate")) {
        c->deflate = 1;
        *last = 0;
        if (!*buf)
            return nn_errf(err, errlen, "compressor: '+deflate' follows a compressor, as in q8+deflate");
    } else if (!strcmp(buf, "deflate")) {
        return nn_errf(err, errlen, "compressor: 'deflate' is a suffix: write identity+deflate, q8+deflate, ...");
    }
    if (strstr(buf, "deflate"))
        return nn_errf(err, errlen, "compressor: 'deflate' in '%s' must be the last part, once (as in topk:0.01+q8+deflate)", spec);
    char *plus = strchr(buf, '+');
    int ntok = plus ? 2 : 1;
    if (plus) {
        *plus = 0;
        if (strchr(plus + 1, '+'))
            return nn_errf(err, errlen, "compressor: '%s' has more than two parts before +deflate", spec);
    }
    if (s_parse_token(c, buf, 0, ntok, err, errlen) < 0)
        return -1;
    if (plus && s_parse_token(c, plus + 1, 1, ntok, err, errlen) < 0)
        return -1;
    c->mask_momentum = c->sparse == GOSSIP_SPARSE_DGC;
    /* canonical form */
    static const char *sname[] = { "", "topk", "randk", "dgc" };
    char sp[64] = "", qu[24] = "";
    if (c->sparse != GOSSIP_SPARSE_NONE) {
        int n = snprintf(sp, sizeof sp, "%s:%g", sname[c->sparse], c->fraction);
        if (c->rdecay < 1.0)
            snprintf(sp + n, sizeof sp - (size_t)n, ",rdecay=%g", c->rdecay);
        else if (c->warmup > 0)
            snprintf(sp + n, sizeof sp - (size_t)n, ",warmup=%d", c->warmup);
    }
    if (c->quant == GOSSIP_QUANT_Q8)
        snprintf(qu, sizeof qu, "q8");
    else if (c->quant == GOSSIP_QUANT_QSGD)
        snprintf(qu, sizeof qu, "qsgd:%d", c->levels);
    char canon[160];
    if (!*sp && !*qu)
        snprintf(canon, sizeof canon, "identity");
    else
        snprintf(canon, sizeof canon, "%s%s%s", sp, (*sp && *qu) ? "+" : "", qu);
    if (c->deflate)
        strncat(canon, "+deflate", sizeof canon - strlen(canon) - 1);
    if (strlen(canon) >= sizeof c->spec)
        return nn_errf(err, errlen, "compressor: canonical form '%s' of '%s' is too long", canon, spec);
    memcpy(c->spec, canon, strlen(canon) + 1);
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

void gossip_compressor_k_range(const gossip_compressor *c, size_t numel, size_t *lo, size_t *hi)
{
    size_t k = gossip_compressor_k(c, numel);
    *lo = *hi = k;
    if (c->sparse == GOSSIP_SPARSE_DGC) {
        *lo = (8 * k + 9) / 10;
        *hi = 13 * k / 10;
    }
}

/* y with y^e = a (0 < a < 1, e >= 1) by bisection: only IEEE multiplications
 * and comparisons, so the same y on every machine (pow() is not required to
 * be correctly rounded). */
static double s_root(double a, int e)
{
    double lo = a, hi = 1.0;
    for (int it = 0; it < 200; it++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        double p = 1.0;
        for (int i = 0; i < e; i++)
            p *= mid;
        if (p < a)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

#define S_DGC_START 0.25 /* warm-up starts at 25% density (DGC: 75% sparsity) */

double gossip_compressor_density(const gossip_compressor *c, uint64_t epoch)
{
    if (c->sparse == GOSSIP_SPARSE_NONE)
        return 1.0;
    if (c->sparse != GOSSIP_SPARSE_DGC || c->warmup == 0 || epoch >= (uint64_t)c->warmup ||
        c->fraction >= S_DGC_START)
        return c->fraction;
    double y = s_root(c->fraction / S_DGC_START, c->warmup), d = S_DGC_START;
    for (uint64_t i = 0; i < epoch; i++)
        d *= y;
    return d > c->fraction ? d : c->fraction;
}

void gossip_compressor_at_epoch(gossip_compressor *cur, const gossip_compressor *c, uint64_t epoch)
{
    *cur = *c;
    if (c->sparse != GOSSIP_SPARSE_NONE)
        cur->fraction = gossip_compressor_density(c, epoch);
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

/* The top-k threshold by histogram: keys counted by their top 11 bits (a
 * float magnitude's exponent and 3 mantissa bits, 1/8 octave a bucket),
 * in two interleaved histograms so that runs of one bucket do not wait
 * on each other's stores; the rank is found in one bucket, and s_select
 * finishes among that bucket's keys. */
enum { S_SHIFT = 20, S_NB = 1 << (31 - S_SHIFT) };

static void s_hist_add(uint32_t h[2][S_NB], const uint32_t *keys, size_t c)
{
    size_t j = 0;
    for (; j + 2 <= c; j += 2) {
        h[0][keys[j] >> S_SHIFT]++;
        h[1][keys[j + 1] >> S_SHIFT]++;
    }
    if (j < c)
        h[0][keys[j] >> S_SHIFT]++;
}

/* The bucket that holds the k-th largest key: *hi = the keys in the
 * buckets above it (< k), *cnt = the keys in it. */
static uint32_t s_rank_bucket(uint32_t h[2][S_NB], size_t k, size_t *hi, size_t *cnt)
{
    size_t above = 0;
    uint32_t b = S_NB - 1;
    while (above + h[0][b] + h[1][b] < k)
        above += h[0][b] + h[1][b], b--;
    *hi = above;
    *cnt = (size_t)h[0][b] + h[1][b];
    return b;
}

/* The threshold among the cnt keys bk of the rank's bucket (reordered),
 * *above (the keys above the bucket) += those above the threshold. */
static uint32_t s_bucket_select(uint32_t *bk, size_t cnt, size_t k, size_t *above)
{
    const uint32_t thr = s_select(bk, cnt, cnt - (k - *above));
    for (size_t j = 0; j < cnt; j++)
        *above += bk[j] > thr;
    return thr;
}

/* The key of rank c - k (ascending) among keys[0..c), the top-k
 * threshold; reorders keys (the rank's bucket gathered to the front).
 * *above gets the count of keys greater than it. */
static uint32_t s_threshold(uint32_t *keys, size_t c, size_t k, size_t *above)
{
    uint32_t h[2][S_NB];
    memset(h, 0, sizeof h);
    s_hist_add(h, keys, c);
    size_t cnt;
    const uint32_t b = s_rank_bucket(h, k, above, &cnt);
    size_t m = 0;
    for (size_t j = 0; j < c; j++)
        if (keys[j] >> S_SHIFT == b)
            keys[m++] = keys[j];
    return s_bucket_select(keys, m, k, above);
}

/* Writes to idx, in order, the k of v's positions cand[0..c) (cand ==
 * NULL: 0..c-1) whose magnitude key is above thr, or equal to it for the
 * first k - above of those. */
static void s_emit(const float *v, const uint32_t *cand, size_t c, size_t k, uint32_t thr,
                   size_t above, uint32_t *idx)
{
    assert(above < k + 1);
    size_t ties = k - above, m = 0;
    for (size_t j = 0; j < c; j++) {
        uint32_t i = cand ? cand[j] : (uint32_t)j;
        uint32_t key = s_magkey(v[i]);
        if (key > thr || (key == thr && ties > 0)) {
            if (key == thr)
                ties--;
            idx[m++] = i;
        }
    }
    assert(m == k);
}

/* Top-k of the candidates cand[0..c) of v (cand == NULL: all of 0..c-1),
 * ties to the lower index, written increasing to idx.  idx may equal cand
 * (each output position is at or before the candidate it came from). */
static void s_topk_among(const float *v, const uint32_t *cand, size_t c, size_t k, uint32_t *idx,
                         uint32_t *keys)
{
    assert(k >= 1 && k <= c);
    for (size_t j = 0; j < c; j++)
        keys[j] = s_magkey(v[cand ? cand[j] : j]);
    size_t above;
    const uint32_t thr = s_threshold(keys, c, k, &above);
    s_emit(v, cand, c, k, thr, above, idx);
}

/* Two passes over v: the keys and their histogram; then the positions in
 * the rank's bucket or above (a few k where the values spread over
 * buckets) gathered, in order, to the front of keys, the bucket's keys
 * after them for the selection, and the output taken from the gathered
 * positions.  Where that bucket holds so many values that the two lists
 * do not fit in n, the in-place path. */
void gossip_topk(const float *v, size_t n, size_t k, uint32_t *idx, uint32_t *keys)
{
    assert(k >= 1 && k <= n);
    uint32_t h[2][S_NB];
    memset(h, 0, sizeof h);
    for (size_t j = 0; j < n; j++)
        keys[j] = s_magkey(v[j]);
    s_hist_add(h, keys, n);
    size_t above, cnt;
    const uint32_t b = s_rank_bucket(h, k, &above, &cnt);
    if (above + 2 * cnt > n) {
        s_topk_among(v, NULL, n, k, idx, keys);
        return;
    }
    size_t m = 0;
    for (size_t j = 0; j < n; j++) { /* m <= j: each key read before its slot is reused */
        const uint32_t in = keys[j] >> S_SHIFT >= b;
        keys[m] = (uint32_t)j;
        m += in;
    }
    uint32_t *bk = keys + m;
    size_t x = 0;
    for (size_t i = 0; i < m; i++) {
        const uint32_t key = s_magkey(v[keys[i]]);
        if (key >> S_SHIFT == b)
            bk[x++] = key;
    }
    assert(m == above + cnt && x == cnt);
    const uint32_t thr = s_bucket_select(bk, cnt, k, &above);
    s_emit(v, keys, m, k, thr, above, idx);
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

/* ---- DGC: sampled threshold, count corrected into [0.8k, 1.3k] ---------- */

size_t gossip_dgc_samples(size_t n)
{
    size_t s = n / 100 + (n % 100 != 0);
    return s > 256 ? s : 256;
}

static int s_dgc_in_bounds(size_t m, size_t k)
{
    return 10 * (uint64_t)m >= 8 * (uint64_t)k && 10 * (uint64_t)m <= 13 * (uint64_t)k;
}

/* Rank r (1-based, from the top) of the sample matching k of n:
 * ceil(s*k/n), in 1..s. */
static size_t s_dgc_rank(size_t s, size_t n, size_t k)
{
    uint64_t r = ((uint64_t)s * k + n - 1) / n;
    return r < 1 ? 1 : (r > s ? s : (size_t)r);
}

size_t gossip_dgc_select(const float *v, size_t n, size_t k, nn_rng *rng, uint32_t *idx,
                         uint32_t *keys, int *how)
{
    assert(k >= 1 && k <= n && n <= UINT32_MAX);
    size_t s = gossip_dgc_samples(n);
    int h = GOSSIP_DGC_EXACT;
    size_t m = k;
    if (s >= n) {
        gossip_topk(v, n, k, idx, keys);
    } else {
        for (size_t j = 0; j < s; j++)
            keys[j] = s_magkey(v[nn_rng_below(rng, (uint32_t)n)]);
        uint32_t thr = s_select(keys, s, s - s_dgc_rank(s, n, k));
        size_t c = 0;
        for (size_t i = 0; i < n; i++)
            if (s_magkey(v[i]) >= thr)
                idx[c++] = (uint32_t)i;
        if (s_dgc_in_bounds(c, k)) {
            h = GOSSIP_DGC_THRESHOLD;
            m = c;
        } else if (c > k) {
            h = GOSSIP_DGC_CANDIDATES;
            s_topk_among(v, idx, c, k, idx, keys);
        } else {
            gossip_topk(v, n, k, idx, keys);
        }
    }
    if (how)
        *how = h;
    return m;
}

static int s_cmp_u32_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x > y ? -1 : (x < y);
}

size_t gossip_dgc_select_ref(const float *v, size_t n, size_t k, nn_rng *rng, uint32_t *idx,
                             int *how)
{
    size_t s = gossip_dgc_samples(n);
    if (how)
        *how = GOSSIP_DGC_EXACT;
    if (s >= n) {
        gossip_topk_ref(v, n, k, idx);
        return k;
    }
    uint32_t *sample = nn_xmalloc(s * sizeof *sample);
    for (size_t j = 0; j < s; j++)
        sample[j] = s_magkey(v[nn_rng_below(rng, (uint32_t)n)]);
    qsort(sample, s, sizeof *sample, s_cmp_u32_desc);
    uint32_t thr = sample[s_dgc_rank(s, n, k) - 1];
    free(sample);
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += s_magkey(v[i]) >= thr;
    if (!s_dgc_in_bounds(c, k)) {
        if (how)
            *how = c > k ? GOSSIP_DGC_CANDIDATES : GOSSIP_DGC_EXACT;
        gossip_topk_ref(v, n, k, idx); /* top-k of the candidates = top-k of all */
        return k;
    }
    if (how)
        *how = GOSSIP_DGC_THRESHOLD;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (s_magkey(v[i]) >= thr)
            idx[m++] = (uint32_t)i;
    return m;
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
        const float *vals = src; /* the k values to carry */
        if (c->sparse != GOSSIP_SPARSE_NONE) {
            uint32_t *idx = out->idx + off;
            if (c->sparse == GOSSIP_SPARSE_TOPK) {
                gossip_topk(src, n, k, idx, out->keys);
            } else if (c->sparse == GOSSIP_SPARSE_DGC) {
                int how;
                k = gossip_dgc_select(src, n, k, rng, idx, out->keys, &how);
                out->dgc_how[how]++;
            } else {
                gossip_randk(rng, n, k, idx, out->mark);
            }
            for (size_t i = 0; i < k; i++)
                out->tmp[i] = src[idx[i]];
            vals = out->tmp;
            blk->idx = idx;
        }
        blk->k = (uint32_t)k;
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
