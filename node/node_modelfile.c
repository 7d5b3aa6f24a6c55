/* node_modelfile — see node_modelfile.h; the user's reference is
 * docs/models.md.
 *
 * Schema (top-level mapping):
 *   description: free text                (optional)
 *   input:  [C, H, W] or [F]              (optional; F means F x 1 x 1;
 *                                          an entry may be `any`)
 *   augment: true | false                 (optional: what --augment auto means)
 *   layers: [ {KIND: {KEY: VALUE, ...}}, ... ]
 * Every layer may carry `name:` and (except add) `from:`; add takes
 * `from: [A, B]`.  A layer's input is `from`, else the entry above it (the
 * model input for the first); `input` names the model input.  The last
 * entry is the output (the class scores); every other layer must feed some
 * layer.
 */
#include "node/node_modelfile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "topology/topo_yaml.h"

#define S_MAX_DEPTH       8      /* the schema nests 4 deep */
#define S_MAX_YAML_NODES  (16 * NODE_MF_MAX_LAYERS)
#define S_MAX_ACT         (1L << 26)  /* values per sample of one activation */
#define S_MAX_PARAM       (1L << 28)  /* values of one parameter tensor */

static const char *const s_kinds[] = {
    [NODE_L_CONV] = "conv",       [NODE_L_NORM] = "norm",     [NODE_L_BATCHNORM] = "batchnorm",
    [NODE_L_ACT] = "act",         [NODE_L_RELU] = "relu",     [NODE_L_MAXPOOL] = "maxpool",
    [NODE_L_AVGPOOL] = "avgpool", [NODE_L_GAP] = "gap",       [NODE_L_FLATTEN] = "flatten",
    [NODE_L_LINEAR] = "linear",   [NODE_L_DROPOUT] = "dropout", [NODE_L_ADD] = "add",
};
#define S_NKINDS ((int)(sizeof s_kinds / sizeof s_kinds[0]))

/* The keys each kind takes besides name (and from, which every kind takes). */
static const char *const s_keys_of[][6] = {
    [NODE_L_CONV] = {"out", "kernel", "pad", "stride", "bias", NULL},
    [NODE_L_NORM] = {"act", "residual", NULL},
    [NODE_L_BATCHNORM] = {NULL}, [NODE_L_ACT] = {NULL}, [NODE_L_RELU] = {NULL},
    [NODE_L_MAXPOOL] = {"kernel", "stride", NULL}, [NODE_L_AVGPOOL] = {"kernel", "stride", NULL},
    [NODE_L_GAP] = {NULL}, [NODE_L_FLATTEN] = {NULL},
    [NODE_L_LINEAR] = {"out", "bias", NULL}, [NODE_L_DROPOUT] = {"p", NULL},
    [NODE_L_ADD] = {NULL},
};

const char *node_mf_kind_name(node_layer_kind k)
{
    return (int)k >= 0 && (int)k < S_NKINDS ? s_kinds[k] : "?";
}

typedef struct {
    char ref[2][NODE_MF_NAME_MAX + 1];
    int  nref, line;          /* `from` given: 1 or 2 names, and its line */
} s_from;

typedef struct {
    const char      *name;
    yaml_document_t *doc;
    char            *err;
    size_t           errlen;
    node_mf         *mf;
    s_from          *from;    /* per layer */
} s_ctx;

/* ---- messages and YAML helpers ---------------------------------------- */

__attribute__((format(printf, 3, 4)))
static int s_fail_line(s_ctx *c, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        return nn_errf(c->err, c->errlen, "%s:%d: %s", c->name, line, msg);
    return nn_errf(c->err, c->errlen, "%s: %s", c->name, msg);
}

#define s_fail(c, node, ...) s_fail_line((c), topo_yaml_line(node), __VA_ARGS__)

static yaml_node_t *s_get(s_ctx *c, int index)
{
    return yaml_document_get_node(c->doc, index);
}

/* An empty value (`relu:` or `relu: ~`): no keys. */
static int s_is_null(const yaml_node_t *node)
{
    const char *s = topo_yaml_scalar(node);
    return s && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!*s || !strcmp(s, "~") || !strcmp(s, "null"));
}

static int s_want_int(s_ctx *c, const yaml_node_t *node, const char *what, long lo, long hi,
                      long *out)
{
    char shown[64];
    const char *s = topo_yaml_scalar(node);
    if (!s)
        return s_fail(c, node, "%s: expected an integer, got %s", what, topo_yaml_type_name(node));
    char *end = NULL;
    errno = 0;
    long v = *s && strspn(s, "0123456789+-") == strlen(s) ? strtol(s, &end, 10) : 0;
    if (!end || *end || errno)
        return s_fail(c, node, "%s: '%s' is not an integer", what, topo_yaml_show(node, shown, sizeof shown));
    if (v < lo || v > hi)
        return s_fail(c, node, "%s: %ld is out of range %ld..%ld", what, v, lo, hi);
    *out = v;
    return 0;
}

static int s_want_bool(s_ctx *c, const yaml_node_t *node, const char *what, int *out)
{
    char shown[64];
    const char *s = topo_yaml_scalar(node);
    if (s && (!strcmp(s, "true") || !strcmp(s, "false"))) {
        *out = !strcmp(s, "true");
        return 0;
    }
    return s_fail(c, node, "%s: expected true or false, got %s%s%s", what,
                  s ? "'" : topo_yaml_type_name(node), s ? topo_yaml_show(node, shown, sizeof shown) : "",
                  s ? "'" : "");
}

/* A layer name (or a reference to one): 1..NODE_MF_NAME_MAX characters of
 * [A-Za-z0-9_.-]. */
static int s_want_name(s_ctx *c, const yaml_node_t *node, const char *what, char *out)
{
    char shown[64];
    const char *s = topo_yaml_scalar(node);
    if (!s)
        return s_fail(c, node, "%s: expected a layer name, got %s", what, topo_yaml_type_name(node));
    size_t l = strlen(s);
    if (l == 0 || l > NODE_MF_NAME_MAX ||
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != l)
        return s_fail(c, node, "%s: '%s' is not a layer name (1 to %d letters, digits, '_', "
                      "'.', '-')", what, topo_yaml_show(node, shown, sizeof shown), NODE_MF_NAME_MAX);
    memcpy(out, s, l + 1);
    return 0;
}

/* ---- one layer ------------------------------------------------------------ */

/* Prefix of a layer's messages: "layer 'NAME' (KIND)". */
static const char *s_who(const node_layer *L, char *buf, size_t len)
{
    snprintf(buf, len, "layer '%s' (%s)", L->name, node_mf_kind_name(L->kind));
    return buf;
}

static int s_from_key(s_ctx *c, int i, const yaml_node_t *val, const char *who)
{
    node_layer *L = &c->mf->layers[i];
    s_from *f = &c->from[i];
    f->line = topo_yaml_line(val);
    if (L->kind != NODE_L_ADD) {
        f->nref = 1;
        return s_want_name(c, val, who, f->ref[0]);
    }
    if (!val || val->type != YAML_SEQUENCE_NODE ||
        val->data.sequence.items.top - val->data.sequence.items.start != 2)
        return s_fail(c, val, "%s: from: expected a list of two layer names [A, B]", who);
    f->nref = 2;
    for (int k = 0; k < 2; k++)
        if (s_want_name(c, s_get(c, val->data.sequence.items.start[k]), who, f->ref[k]) != 0)
            return -1;
    return 0;
}

/* One key of a layer's mapping. */
static int s_layer_key(s_ctx *c, int i, const char *key, const yaml_node_t *val, const char *who)
{
    node_layer *L = &c->mf->layers[i];
    long v;
    char what[160];
    snprintf(what, sizeof what, "%s: %s", who, key);
    if (!strcmp(key, "out")) {
        const char *s = topo_yaml_scalar(val);
        if (s && !strcmp(s, "classes")) {
            L->out = -1;
            return 0;
        }
        if (s_want_int(c, val, what, 1, 65536, &v) != 0)
            return -1;
        L->out = (int)v;
    } else if (!strcmp(key, "kernel") || !strcmp(key, "stride") || !strcmp(key, "pad")) {
        if (s_want_int(c, val, what, key[0] == 'p' ? 0 : 1, 64, &v) != 0)
            return -1;
        *(key[0] == 'k' ? &L->kernel : key[0] == 's' ? &L->stride : &L->pad) = (int)v;
    } else if (!strcmp(key, "bias")) {
        return s_want_bool(c, val, what, &L->bias);
    } else if (!strcmp(key, "act")) {
        return s_want_bool(c, val, what, &L->act);
    } else if (!strcmp(key, "residual")) {
        return s_want_bool(c, val, what, &L->residual);
    } else if (!strcmp(key, "p")) {
        const char *s = topo_yaml_scalar(val);
        char *end = NULL, shown[64];
        double p = s && *s && strspn(s, "0123456789.eE+-") == strlen(s) ? strtod(s, &end) : -1;
        if (!end || *end || !(p >= 0.0 && p < 1.0))
            return s_fail(c, val, "%s: '%s' is not a probability in [0, 1)", what,
                          topo_yaml_show(val, shown, sizeof shown));
        L->p = (float)p;
    }
    return 0;
}

/* The keys of a layer: name first (messages name the layer), then the rest. */
static int s_layer_keys(s_ctx *c, int i, const yaml_node_t *map, const char *who0)
{
    node_layer *L = &c->mf->layers[i];
    const char *const *allowed = s_keys_of[L->kind];
    char who[128], shown[64];
    yaml_node_pair_t *p0 = map->data.mapping.pairs.start, *p1 = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = p0; p < p1; p++) {
        const char *k = topo_yaml_scalar(s_get(c, p->key));
        if (k && !strcmp(k, "name") && s_want_name(c, s_get(c, p->value), who0, L->name) != 0)
            return -1;
    }
    s_who(L, who, sizeof who);
    for (yaml_node_pair_t *p = p0; p < p1; p++) {
        yaml_node_t *key = s_get(c, p->key), *val = s_get(c, p->value);
        const char *k = topo_yaml_scalar(key);
        int known = k && (!strcmp(k, "name") || !strcmp(k, "from"));
        for (int a = 0; k && !known && allowed[a]; a++)
            known = !strcmp(k, allowed[a]);
        if (!known) {
            char list[128] = "name, from";
            for (int a = 0; allowed[a]; a++)
                snprintf(list + strlen(list), sizeof list - strlen(list), ", %s", allowed[a]);
            return s_fail(c, key, "%s: unknown key '%s' (%s takes: %s)", who,
                          topo_yaml_show(key, shown, sizeof shown), s_kinds[L->kind], list);
        }
        for (yaml_node_pair_t *q = p0; q < p; q++)
            if (!strcmp(topo_yaml_scalar(s_get(c, q->key)), k))
                return s_fail(c, key, "%s: duplicate key '%s'", who, k);
        if (!strcmp(k, "from") ? s_from_key(c, i, val, who) != 0
                               : s_layer_key(c, i, k, val, who) != 0)
            return -1;
    }
    return 0;
}

/* Defaults and the checks between a layer's keys. */
static int s_layer_finish(s_ctx *c, int i, const char *who)
{
    node_layer *L = &c->mf->layers[i];
    s_from *f = &c->from[i];
    if (L->kind == NODE_L_ADD && f->nref != 2)
        return s_fail_line(c, L->line, "%s: needs from: [A, B], the two layers to add", who);
    if ((L->kind == NODE_L_CONV || L->kind == NODE_L_LINEAR) && L->out == 0)
        return s_fail_line(c, L->line, "%s: needs out: N (or out: classes)", who);
    if (L->kind == NODE_L_CONV || L->kind == NODE_L_MAXPOOL || L->kind == NODE_L_AVGPOOL) {
        if (!L->kernel)
            return s_fail_line(c, L->line, "%s: needs kernel: K", who);
        if (!L->stride) /* PyTorch: 1 for convs, the kernel for pools */
            L->stride = L->kind == NODE_L_CONV ? 1 : L->kernel;
        if (L->pad >= L->kernel)
            return s_fail_line(c, L->line, "%s: pad %d must be smaller than the kernel %d", who,
                               L->pad, L->kernel);
    }
    return 0;
}

static int s_layer(s_ctx *c, int i, const yaml_node_t *entry)
{
    node_layer *L = &c->mf->layers[i];
    char who[128], shown[64];
    snprintf(who, sizeof who, "layer %d", i);
    L->line = topo_yaml_line(entry);
    nn_namef(L->name, "layers.%d", i);
    if (!entry || entry->type != YAML_MAPPING_NODE ||
        entry->data.mapping.pairs.top - entry->data.mapping.pairs.start != 1)
        return s_fail(c, entry, "%s: expected one layer as KIND: {KEY: VALUE, ...}, e.g. "
                      "'- conv: {out: 16, kernel: 3}'", who);
    yaml_node_t *key = s_get(c, entry->data.mapping.pairs.start->key);
    yaml_node_t *val = s_get(c, entry->data.mapping.pairs.start->value);
    const char *k = topo_yaml_scalar(key);
    int kind = -1;
    for (int t = 0; k && t < S_NKINDS; t++)
        if (!strcmp(k, s_kinds[t]))
            kind = t;
    if (kind < 0)
        return s_fail(c, key, "%s: unknown layer '%s' (expected conv, norm, batchnorm, act, relu, "
                      "maxpool, avgpool, gap, flatten, linear, dropout or add)", who,
                      topo_yaml_show(key, shown, sizeof shown));
    L->kind = (node_layer_kind)kind;
    L->nin = L->kind == NODE_L_ADD ? 2 : 1;
    L->bias = 1; /* PyTorch's default for Conv2d and Linear */
    L->act = 1;
    L->p = 0.5f; /* PyTorch's default for Dropout */
    if (s_is_null(val))
        return s_layer_finish(c, i, s_who(L, who, sizeof who));
    if (!val || val->type != YAML_MAPPING_NODE)
        return s_fail(c, val, "%s (%s): expected a mapping of keys ({} for none), got %s", who, k,
                      topo_yaml_type_name(val));
    if (s_layer_keys(c, i, val, who) != 0)
        return -1;
    return s_layer_finish(c, i, s_who(L, who, sizeof who));
}

/* ---- the graph -------------------------------------------------------------- */

static int s_find(const node_mf *mf, const char *name)
{
    for (int j = 0; j < mf->n; j++)
        if (!strcmp(mf->layers[j].name, name))
            return j;
    return -2;
}

/* Unique names, then every layer's inputs as indices. */
static int s_resolve(s_ctx *c)
{
    node_mf *mf = c->mf;
    char who[128];
    for (int i = 0; i < mf->n; i++) {
        node_layer *L = &mf->layers[i];
        if (!strcmp(L->name, "input"))
            return s_fail_line(c, L->line, "%s: 'input' names the model input", s_who(L, who, sizeof who));
        int j = s_find(mf, L->name);
        if (j != i)
            return s_fail_line(c, L->line, "%s: the name is taken by the layer at line %d",
                               s_who(L, who, sizeof who), mf->layers[j].line);
    }
    for (int i = 0; i < mf->n; i++) {
        node_layer *L = &mf->layers[i];
        const s_from *f = &c->from[i];
        if (!f->nref) {
            L->in[0] = i - 1;
            continue;
        }
        for (int k = 0; k < f->nref; k++) {
            L->in[k] = !strcmp(f->ref[k], "input") ? -1 : s_find(mf, f->ref[k]);
            if (L->in[k] == -2)
                return s_fail_line(c, f->line, "%s: from: no layer named '%s'",
                                   s_who(L, who, sizeof who), f->ref[k]);
        }
    }
    return 0;
}

/* Reports a cycle through layer `start` (which is on or leads to one). */
static int s_cycle(s_ctx *c, const int *placed, int start)
{
    const node_mf *mf = c->mf;
    int *seen = nn_xcalloc((size_t)mf->n, sizeof *seen), at = start, step = 1;
    while (!seen[at]) { /* follow unplaced inputs until one repeats */
        seen[at] = step++;
        const node_layer *L = &mf->layers[at];
        int next = -1;
        for (int k = 0; k < L->nin && next < 0; k++)
            if (L->in[k] >= 0 && !placed[L->in[k]])
                next = L->in[k];
        at = next;
    }
    char path[512] = "", who[128];
    int from = at;
    do { /* the cycle in data-flow order: an input before its consumer */
        snprintf(path + strlen(path), sizeof path - strlen(path), "%s'%s'",
                 path[0] ? " <- " : "", mf->layers[at].name);
        const node_layer *L = &mf->layers[at];
        int next = -1;
        for (int k = 0; k < L->nin && next < 0; k++)
            if (L->in[k] >= 0 && seen[L->in[k]] && !placed[L->in[k]])
                next = L->in[k];
        at = next;
    } while (at != from && at >= 0 && strlen(path) < sizeof path - 64);
    free(seen);
    const node_layer *L = &mf->layers[from];
    return s_fail_line(c, L->line, "%s: its input is its own output (a cycle: %s <- '%s')",
                       s_who(L, who, sizeof who), path, L->name);
}

/* A topological order, list order where the graph leaves it free; then
 * every layer but the last must feed another. */
static int s_order(s_ctx *c)
{
    node_mf *mf = c->mf;
    int *placed = nn_xcalloc((size_t)mf->n, sizeof *placed), *used = nn_xcalloc((size_t)mf->n, sizeof *used);
    int rc = 0;
    mf->order = nn_xcalloc((size_t)mf->n, sizeof *mf->order);
    for (int k = 0; k < mf->n && rc == 0; k++) {
        int pick = -1;
        for (int i = 0; i < mf->n && pick < 0; i++) {
            const node_layer *L = &mf->layers[i];
            int ready = !placed[i];
            for (int q = 0; q < L->nin && ready; q++)
                ready = L->in[q] < 0 || placed[L->in[q]];
            if (ready)
                pick = i;
        }
        if (pick < 0) {
            for (int i = 0; i < mf->n && pick < 0; i++)
                if (!placed[i])
                    pick = i;
            rc = s_cycle(c, placed, pick);
            break;
        }
        placed[pick] = 1;
        mf->order[k] = pick;
    }
    for (int i = 0; i < mf->n && rc == 0; i++)
        for (int q = 0; q < mf->layers[i].nin; q++)
            if (mf->layers[i].in[q] >= 0)
                used[mf->layers[i].in[q]]++;
    char who[128];
    for (int i = 0; i < mf->n && rc == 0; i++) {
        const node_layer *L = &mf->layers[i];
        if (i < mf->n - 1 && !used[i]) /* (then the last feeds none: no cycle) */
            rc = s_fail_line(c, L->line, "%s: its output is never used (only the last layer, "
                             "the class scores, may feed nothing)", s_who(L, who, sizeof who));
    }
    free(placed);
    free(used);
    return rc;
}

/* ---- the document ------------------------------------------------------------ */

static int s_input(s_ctx *c, const yaml_node_t *val)
{
    node_mf *mf = c->mf;
    mf->in_line = topo_yaml_line(val);
    long n = val && val->type == YAML_SEQUENCE_NODE
                 ? val->data.sequence.items.top - val->data.sequence.items.start : 0;
    if (n != 1 && n != 3)
        return s_fail(c, val, "input: expected [C, H, W] or [F] (features of a table)");
    int dims[3] = {0, 1, 1};
    for (long k = 0; k < n; k++) {
        yaml_node_t *it = s_get(c, val->data.sequence.items.start[k]);
        long v;
        if (topo_yaml_scalar(it) && !strcmp(topo_yaml_scalar(it), "any"))
            dims[k] = 0;
        else if (s_want_int(c, it, "input", 1, 1 << 20, &v) != 0)
            return -1;
        else
            dims[k] = (int)v;
    }
    if ((long)dims[0] * dims[1] * dims[2] > S_MAX_ACT)
        return s_fail(c, val, "input: more than %ld values per sample", S_MAX_ACT);
    mf->in_c = dims[0], mf->in_h = dims[1], mf->in_w = dims[2];
    return 0;
}

static int s_layers(s_ctx *c, const yaml_node_t *val)
{
    node_mf *mf = c->mf;
    long n = val && val->type == YAML_SEQUENCE_NODE
                 ? val->data.sequence.items.top - val->data.sequence.items.start : -1;
    if (n < 1)
        return s_fail(c, val, "layers: expected a list of layers (- KIND: {...}), got %s",
                      n == 0 ? "an empty list" : topo_yaml_type_name(val));
    if (n > NODE_MF_MAX_LAYERS)
        return s_fail(c, val, "layers: %ld layers, at most %d", n, NODE_MF_MAX_LAYERS);
    mf->layers = nn_xcalloc((size_t)n, sizeof *mf->layers);
    c->from = nn_xcalloc((size_t)n, sizeof *c->from);
    mf->n = (int)n;
    for (int i = 0; i < mf->n; i++)
        if (s_layer(c, i, s_get(c, val->data.sequence.items.start[i])) != 0)
            return -1;
    return s_resolve(c) != 0 ? -1 : s_order(c);
}

static int s_document(s_ctx *c, const yaml_node_t *root)
{
    static const char *const keys[] = {"description", "input", "augment", "layers"};
    yaml_node_t *slot[4] = {NULL, NULL, NULL, NULL};
    char shown[64];
    if (!root || root->type != YAML_MAPPING_NODE)
        return s_fail(c, root, "expected a mapping with 'layers' (and optionally 'input'), got %s",
                      topo_yaml_type_name(root));
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *key = s_get(c, p->key);
        const char *k = topo_yaml_scalar(key);
        int found = -1;
        for (int q = 0; k && q < 4; q++)
            if (!strcmp(k, keys[q]))
                found = q;
        if (found < 0)
            return s_fail(c, key, "unknown key '%s' (expected description, input, augment, layers)",
                          topo_yaml_show(key, shown, sizeof shown));
        if (slot[found])
            return s_fail(c, key, "duplicate key '%s'", k);
        slot[found] = s_get(c, p->value);
    }
    c->mf->augment = -1;
    if (slot[2] && s_want_bool(c, slot[2], "augment", &c->mf->augment) != 0)
        return -1;
    if (slot[1] && s_input(c, slot[1]) != 0)
        return -1;
    if (!slot[3])
        return s_fail_line(c, 1, "no 'layers' list");
    return s_layers(c, slot[3]);
}

/* Nesting depth and node count on the event stream, before the document is
 * built.  0 when within the limits (or on a syntax error, which the loader
 * reports), -1 with a message. */
static int s_check_limits(const char *yaml, size_t len, const char *name, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser))
        return nn_errf(err, errlen, "%s: cannot initialise the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    int rc = 0, depth = 0;
    size_t nodes = 0;
    while (rc == 0 && yaml_parser_parse(&parser, &ev)) {
        yaml_event_type_t type = ev.type;
        size_t line = ev.start_mark.line + 1;
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT)
            break;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > S_MAX_DEPTH)
                rc = nn_errf(err, errlen, "%s:%zu: nested more than %d deep: not a model file",
                             name, line, S_MAX_DEPTH);
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (type == YAML_ALIAS_EVENT) {
            rc = nn_errf(err, errlen, "%s:%zu: YAML aliases (*name) are not allowed in a model "
                         "file", name, line);
        }
        if (rc == 0 && ++nodes > S_MAX_YAML_NODES)
            rc = nn_errf(err, errlen, "%s:%zu: more than %d YAML values: too large for a model "
                         "file", name, line, S_MAX_YAML_NODES);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Loads the one document of the stream into doc: 0, or -1 with a message. */
static int s_load(const char *yaml, size_t len, const char *name, yaml_document_t *doc,
                  char *err, size_t errlen)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return nn_errf(err, errlen, "%s: cannot initialise the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, doc)) {
        rc = nn_errf(err, errlen, "%s:%zu: YAML syntax error: %s", name,
                     parser.problem_mark.line + 1, parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return rc;
    }
    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        rc = nn_errf(err, errlen, "%s:%zu: YAML syntax error: %s", name,
                     parser.problem_mark.line + 1, parser.problem ? parser.problem : "unknown");
    } else {
        if (yaml_document_get_root_node(&extra))
            rc = nn_errf(err, errlen, "%s:%zu: more than one YAML document ('---'); a model "
                         "file holds one", name, extra.start_mark.line + 1);
        yaml_document_delete(&extra);
    }
    if (rc)
        yaml_document_delete(doc);
    yaml_parser_delete(&parser);
    return rc;
}

node_mf *node_mf_parse(const char *yaml, size_t len, const char *name, char *err, size_t errlen)
{
    name = name ? name : "(model file)";
    if (!yaml || len > NODE_MF_MAX_BYTES) {
        nn_errf(err, errlen, "%s: %s", name, yaml ? "more than 65536 bytes: too large for a "
                "model file" : "no input");
        return NULL;
    }
    yaml_document_t doc;
    if (s_check_limits(yaml, len, name, err, errlen) != 0 ||
        s_load(yaml, len, name, &doc, err, errlen) != 0)
        return NULL;
    node_mf *mf = nn_xcalloc(1, sizeof *mf);
    snprintf(mf->file, sizeof mf->file, "%s", name);
    s_ctx c = {.name = name, .doc = &doc, .err = err, .errlen = errlen, .mf = mf};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = root ? s_document(&c, root)
                  : nn_errf(err, errlen, "%s:1: empty file (expected a mapping with 'layers')", name);
    free(c.from);
    yaml_document_delete(&doc);
    if (rc != 0)
        node_mf_destroy(&mf);
    return mf;
}

void node_mf_destroy(node_mf **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->layers);
    free((*self_p)->order);
    free(*self_p);
    *self_p = NULL;
}

/* ---- shapes and building ------------------------------------------------------- */

__attribute__((format(printf, 5, 6)))
static int s_lfail(const node_mf *mf, const node_layer *L, char *err, size_t errlen,
                   const char *fmt, ...)
{
    char msg[512], who[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nn_errf(err, errlen, "%s:%d: %s: %s", mf->file, L->line, s_who(L, who, sizeof who),
                   msg);
}

/* The output shape of layer L for input shapes a (and b for add). */
static int s_out_shape(const node_mf *mf, const node_layer *L, nn_shape a, nn_shape b,
                       int classes, nn_shape *out, char *err, size_t errlen)
{
    long C = a.c, H = a.h, W = a.w, oc = L->out < 0 ? classes : L->out;
    *out = a;
    switch (L->kind) {
    case NODE_L_CONV: {
        long oh = (H + 2L * L->pad - L->kernel) / L->stride + 1;
        long ow = (W + 2L * L->pad - L->kernel) / L->stride + 1;
        if (H + 2L * L->pad < L->kernel || W + 2L * L->pad < L->kernel)
            return s_lfail(mf, L, err, errlen, "kernel %d (pad %d) does not fit the %ldx%ldx%ld "
                           "input", L->kernel, L->pad, C, H, W);
        if (oc * C * L->kernel * L->kernel > S_MAX_PARAM || oc * oh * ow > S_MAX_ACT)
            return s_lfail(mf, L, err, errlen, "too large (%ld outputs of %ldx%ld)", oc, oh, ow);
        *out = (nn_shape){(int)oc, (int)oh, (int)ow};
        return 0;
    }
    case NODE_L_MAXPOOL:
    case NODE_L_AVGPOOL:
        if (H < L->kernel || W < L->kernel)
            return s_lfail(mf, L, err, errlen, "kernel %d does not fit the %ldx%ldx%ld input",
                           L->kernel, C, H, W);
        *out = (nn_shape){a.c, (int)((H - L->kernel) / L->stride + 1),
                          (int)((W - L->kernel) / L->stride + 1)};
        return 0;
    case NODE_L_GAP:
        *out = (nn_shape){a.c, 1, 1};
        return 0;
    case NODE_L_FLATTEN:
        *out = (nn_shape){a.c * a.h * a.w, 1, 1};
        return 0;
    case NODE_L_LINEAR:
        if (oc * C * H * W > S_MAX_PARAM)
            return s_lfail(mf, L, err, errlen, "too large (%ld x %ld weights)", oc, C * H * W);
        *out = (nn_shape){(int)oc, 1, 1};
        return 0;
    case NODE_L_ADD:
        if (a.c != b.c || a.h != b.h || a.w != b.w)
            return s_lfail(mf, L, err, errlen, "cannot add %dx%dx%d ('%s') and %dx%dx%d ('%s')",
                           a.c, a.h, a.w, L->in[0] < 0 ? "input" : mf->layers[L->in[0]].name,
                           b.c, b.h, b.w, L->in[1] < 0 ? "input" : mf->layers[L->in[1]].name);
        return 0;
    default: /* norm, batchnorm, act, relu, dropout: elementwise */
        return 0;
    }
}

/* Every layer's output shape into shapes[] (n entries) for input `in`. */
static int s_walk(const node_mf *mf, nn_shape in, int classes, nn_shape *shapes, char *err,
                  size_t errlen)
{
    if ((mf->in_c && mf->in_c != in.c) || (mf->in_h && mf->in_h != in.h) ||
        (mf->in_w && mf->in_w != in.w)) {
        char want[3][16];
        const int dims[3] = {mf->in_c, mf->in_h, mf->in_w};
        for (int k = 0; k < 3; k++)
            snprintf(want[k], sizeof want[k], dims[k] ? "%d" : "any", dims[k]);
        return nn_errf(err, errlen, "%s:%d: input: the model takes [%s, %s, %s] but the data "
                       "gives %dx%dx%d", mf->file, mf->in_line, want[0], want[1], want[2], in.c,
                       in.h, in.w);
    }
    for (int k = 0; k < mf->n; k++) {
        const node_layer *L = &mf->layers[mf->order[k]];
        nn_shape a = L->in[0] < 0 ? in : shapes[L->in[0]];
        nn_shape b = L->nin == 2 ? (L->in[1] < 0 ? in : shapes[L->in[1]]) : a;
        if (s_out_shape(mf, L, a, b, classes > 0 ? classes : 2, &shapes[mf->order[k]], err,
                        errlen) != 0)
            return -1;
    }
    const node_layer *last = &mf->layers[mf->n - 1];
    nn_shape s = shapes[mf->n - 1];
    if (classes > 0 && (s.c != classes || s.h != 1 || s.w != 1))
        return s_lfail(mf, last, err, errlen, "the last layer gives %dx%dx%d values, expected "
                       "the %d class scores (end with linear: {out: classes})", s.c, s.h, s.w,
                       classes);
    return 0;
}

int node_mf_check_shapes(const node_mf *mf, int c, int h, int w, int classes, char *err,
                         size_t errlen)
{
    nn_shape *shapes = nn_xcalloc((size_t)mf->n, sizeof *shapes);
    int rc = s_walk(mf, (nn_shape){c, h, w}, classes, shapes, err, errlen);
    free(shapes);
    return rc;
}

/* Appends layer L reading slots a (and b); returns its output slot. */
static int s_build_layer(nn_model *m, const node_layer *L, int a, int b)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    int own_act = cfg->norm == NN_NORM_EVONORM; /* EvoNorm is its own activation */
    int oc = L->out < 0 ? cfg->classes : L->out;
    char rn[NN_NAME_MAX];
    nn_namef(rn, "%s.relu", L->name);
    switch (L->kind) {
    case NODE_L_CONV: return nn_b_conv(m, L->name, a, oc, L->kernel, L->stride, L->pad, L->bias);
    case NODE_L_LINEAR: return nn_b_linear(m, L->name, a, oc, L->bias);
    case NODE_L_NORM: {
        int x = nn_b_norm(m, L->name, a, L->residual && cfg->zero_init_residual);
        return L->act && !own_act ? nn_b_relu(m, rn, x) : x;
    }
    case NODE_L_BATCHNORM: return nn_b_batchnorm(m, L->name, a);
    case NODE_L_ACT: return own_act ? a : nn_b_relu(m, L->name, a);
    case NODE_L_RELU: return nn_b_relu(m, L->name, a);
    case NODE_L_MAXPOOL: return nn_b_maxpool(m, L->name, a, L->kernel, L->stride);
    case NODE_L_AVGPOOL: return nn_b_avgpool(m, L->name, a, L->kernel, L->stride);
    case NODE_L_GAP: return nn_b_gap(m, L->name, a);
    case NODE_L_FLATTEN: return nn_b_flatten(m, L->name, a);
    case NODE_L_DROPOUT: return nn_b_dropout(m, L->name, a, L->p);
    case NODE_L_ADD: return nn_b_add(m, L->name, a, b);
    }
    return a;
}

int node_mf_build(nn_model *m, const void *ctx, char *err, size_t errlen)
{
    const node_mf *mf = ctx;
    const nn_model_config *cfg = nn_model_cfg(m);
    if (node_mf_check_shapes(mf, cfg->in_c, cfg->in_h, cfg->in_w, cfg->classes, err, errlen))
        return -1;
    int *slot = nn_xcalloc((size_t)mf->n, sizeof *slot), in = nn_model_input_slot(m);
    for (int k = 0; k < mf->n; k++) {
        const node_layer *L = &mf->layers[mf->order[k]];
        int a = L->in[0] < 0 ? in : slot[L->in[0]];
        int b = L->nin == 2 ? (L->in[1] < 0 ? in : slot[L->in[1]]) : -1;
        slot[mf->order[k]] = s_build_layer(m, L, a, b);
    }
    int out = slot[mf->n - 1], nops = nn_model_nops(m);
    free(slot);
    if (nops == 0 || nn_model_op_out(nn_model_op(m, nops - 1)) != out)
        return s_lfail(mf, &mf->layers[mf->n - 1], err, errlen, "with --norm %s this last layer "
                       "computes nothing; end the model with a linear or conv layer",
                       cfg->norm == NN_NORM_NONE ? "none" : "evonorm");
    if (nn_model_params(m)->nviews == 0)
        return nn_errf(err, errlen, "%s: no layer with parameters (conv, linear, norm, "
                       "batchnorm)", mf->file);
    return 0;
}
