/* topo_parse_graph — the GRAPH mappings of topology files: a generator,
 * an edge list or a matrix into the n x n mixing weights, each error
 * naming the file and line.
 *
 * Owns:    topo_p_graph and the three forms' readers.
 * Callers: topo_parse.c (graph: and every schedule entry).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "nn/nn_core.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"
#include "topology/topo_parse_int.h"
#include "topology/topo_yaml.h"

/* ---- graphs ------------------------------------------------------------ */

static int s_generator(topo_pctx *c, yaml_node_t **v, const char *where, double *w);
static int s_edges(topo_pctx *c, yaml_node_t **v, const char *where, yaml_node_t *body, double *w);
static int s_matrix(topo_pctx *c, yaml_node_t **v, const char *where, double *w);

static const char *const s_graph_keys[] = { "generator", "rows", "cols", "hub", "offsets", "self",
                                            "weights", "edges", "matrix", "description" };
enum { G_GENERATOR, G_ROWS, G_COLS, G_HUB, G_OFFSETS, G_SELF, G_WEIGHTS, G_EDGES, G_MATRIX, G_DESCRIPTION, G_N };

/* One GRAPH mapping into w (n*n, zeroed), then the per-matrix checks. */
int topo_p_graph(topo_pctx *c, yaml_node_t *body, const char *where, double *w)
{
    yaml_node_t *v[G_N];
    const char *s = NULL;
    if (topo_p_keys(c, body, where, s_graph_keys, G_N, v) != 0)
        return -1;
    if (v[G_DESCRIPTION] && topo_p_want_string(c, v[G_DESCRIPTION], "description", &s) != 0)
        return -1;
    int modes = !!v[G_GENERATOR] + !!v[G_EDGES] + !!v[G_MATRIX];
    if (modes != 1)
        return topo_p_fail(c, body, "%s: %s one of 'generator', 'edges' or 'matrix'", where,
                      modes ? "give only" : "needs");
    int rc = v[G_GENERATOR] ? s_generator(c, v, where, w)
           : v[G_EDGES]     ? s_edges(c, v, where, body, w)
                            : s_matrix(c, v, where, w);
    if (rc != 0)
        return -1;
    char msg[512];
    if (topo__check_matrix(c->t, w, msg, sizeof msg) != 0)
        return topo_p_fail(c, body, "%s: %s", where, msg);
    return 0;
}

static int s_generator(topo_pctx *c, yaml_node_t **v, const char *where, double *w)
{
    const char *s = NULL;
    char shown[64], msg[512];
    int n = c->n;
    if (topo_p_want_string(c, v[G_GENERATOR], "generator", &s) != 0)
        return -1;
    topo_gen g = { .kind = topo__gen_kind(s), .self_weight = -1 };
    if (g.kind < 0)
        return topo_p_fail(c, v[G_GENERATOR],
                      "%s: unknown generator '%s' (directed_ring, undirected_ring, torus, exponential, complete, "
                      "star, circulant)",
                      where, topo_yaml_show(v[G_GENERATOR], shown, sizeof shown));
    static const struct { int key, kind; } only[] = {
        { G_ROWS, TOPO_GEN_TORUS }, { G_COLS, TOPO_GEN_TORUS }, { G_HUB, TOPO_GEN_STAR },
        { G_OFFSETS, TOPO_GEN_CIRCULANT },
    };
    for (size_t k = 0; k < sizeof only / sizeof only[0]; k++)
        if (v[only[k].key] && g.kind != only[k].kind)
            return topo_p_fail(c, v[only[k].key], "%s: '%s' does not apply to generator %s", where,
                          s_graph_keys[only[k].key], s);
    if (v[G_WEIGHTS])
        return topo_p_fail(c, v[G_WEIGHTS], "%s: 'weights' applies to edges, not to a generator", where);
    if (v[G_SELF]) {
        if (topo_p_want_number(c, v[G_SELF], "self", &g.self_weight) != 0)
            return -1;
        if (!(g.self_weight > 0 && g.self_weight <= 1))
            return topo_p_fail(c, v[G_SELF], "%s: self weight %g must be in (0, 1]", where, g.self_weight);
    }
    if (g.kind == TOPO_GEN_TORUS) {
        long r, cc;
        if (!v[G_ROWS] || !v[G_COLS])
            return topo_p_fail(c, v[G_GENERATOR], "%s: generator torus needs rows and cols", where);
        if (topo_p_want_int(c, v[G_ROWS], "rows", 1, TOPO_MAX_NODES, &r) != 0 ||
            topo_p_want_int(c, v[G_COLS], "cols", 1, TOPO_MAX_NODES, &cc) != 0)
            return -1;
        if (r * cc != n)
            return topo_p_fail(c, v[G_ROWS], "%s: torus %ld x %ld has %ld nodes but the file has %d", where, r, cc, r * cc,
                          n);
        g.rows = (int)r;
        g.cols = (int)cc;
    }
    if (g.kind == TOPO_GEN_STAR && v[G_HUB] && topo_p_node_ref(c, v[G_HUB], "hub", &g.hub) != 0)
        return -1;
    if (g.kind == TOPO_GEN_CIRCULANT) {
        yaml_node_t *o = v[G_OFFSETS];
        if (!o)
            return topo_p_fail(c, v[G_GENERATOR], "%s: generator circulant needs offsets (e.g. offsets: [1, 2, 4])", where);
        if (o->type != YAML_SEQUENCE_NODE)
            return topo_p_fail(c, o, "offsets: expected a list of integers, got %s", topo_yaml_type_name(o));
        long k = o->data.sequence.items.top - o->data.sequence.items.start;
        if (k < 1 || k > TOPO_MAX_OFFSETS)
            return topo_p_fail(c, o, "offsets: expected 1..%d offsets, got %ld", TOPO_MAX_OFFSETS, k);
        for (long i = 0; i < k; i++) {
            yaml_node_t *it = topo_p_get(c, o->data.sequence.items.start[i]);
            long off;
            if (topo_p_want_int(c, it, "offset", -TOPO_MAX_NODES, TOPO_MAX_NODES, &off) != 0)
                return -1;
            if (off % n == 0)
                return topo_p_fail(c, it, "offset %ld is a multiple of the node count %d (a node sending to itself)", off,
                              n);
            g.offsets[g.noffsets++] = off;
        }
    }
    if (topo__fill_generator(w, n, &g, msg, sizeof msg) != 0)
        return topo_p_fail(c, v[G_GENERATOR], "%s: %s", where, msg);
    return 0;
}

/* Column sums of w, failing at the line where sender j's weights are given. */
static int s_column_sums(topo_pctx *c, const double *w, const int *sender_line, const char *where)
{
    double sum;
    int j = topo__bad_column(c->n, w, &sum);
    if (j >= 0)
        return topo_p_fail_line(c, sender_line[j],
                           "%s: column sum %.9g at node %s: the weights node %s sends (self included) must sum to 1",
                           where, sum, c->t->nodes[j].id, c->t->nodes[j].id);
    return 0;
}

/* What the edges helpers share: which (to, from) pairs are given (has, and
 * the line of each for duplicate messages), and per sender the line its
 * weights are given on (sender_line, for the column-sum message; it stays
 * body_line until an edge entry or a self key names the sender). */
typedef struct {
    int           *edge_line;   /* n*n, at to*n + from */
    int           *sender_line; /* n */
    unsigned char *has;         /* n*n, at to*n + from */
    int            body_line;   /* line of the GRAPH mapping */
} s_edge_set;

/* Refuses the generator-only keys and reads `weights:` (only 'uniform'
 * exists): *uniform = 1 when given, else 0. */
static int s_edges_mode(topo_pctx *c, yaml_node_t **v, const char *where, int *uniform)
{
    const char *s = NULL;
    *uniform = 0;
    for (int k = G_ROWS; k <= G_OFFSETS; k++)
        if (v[k])
            return topo_p_fail(c, v[k], "%s: '%s' applies to generators only", where, s_graph_keys[k]);
    if (v[G_WEIGHTS]) {
        if (topo_p_want_string(c, v[G_WEIGHTS], "weights", &s) != 0)
            return -1;
        if (strcmp(s, "uniform") != 0)
            return topo_p_fail(c, v[G_WEIGHTS], "%s: weights: the only choice is 'uniform' (or give a weight per edge)",
                          where);
        *uniform = 1;
    }
    return 0;
}

/* The weight of the edge entry item (ev = its from, to, weight) sent by
 * node `from`: none allowed with weights: uniform (*weight = 0), else
 * required and in [0, 1]. */
static int s_edge_weight(topo_pctx *c, yaml_node_t *item, yaml_node_t **ev, int from, int uniform, double *weight)
{
    *weight = 0;
    if (uniform && ev[2])
        return topo_p_fail(c, ev[2], "edge: no weight with weights: uniform (each sender splits its mass evenly)");
    if (uniform)
        return 0;
    if (!ev[2])
        return topo_p_fail(c, item, "edge from %s: missing weight (or set weights: uniform)", c->t->nodes[from].id);
    if (topo_p_want_number(c, ev[2], "weight", weight) != 0)
        return -1;
    if (!(*weight >= 0 && *weight <= 1))
        return topo_p_fail(c, ev[2], "edge from %s: weight %g out of [0, 1]", c->t->nodes[from].id, *weight);
    return 0;
}

/* Stores the edge from -> (the node named by tn) with its weight in w,
 * refusing an edge to itself and a duplicate; the sender's line becomes
 * the entry's (item) if no earlier entry set it. */
static int s_edge_store(topo_pctx *c, s_edge_set *es, yaml_node_t *item, yaml_node_t *tn, int from, double weight,
                        double *w)
{
    int n = c->n, to;
    if (topo_p_node_ref(c, tn, "to", &to) != 0)
        return -1;
    if (to == from)
        return topo_p_fail(c, tn, "edge %s -> %s: a node's own share goes under 'self', not in edges",
                      c->t->nodes[from].id, c->t->nodes[to].id);
    size_t at = (size_t)to * n + from;
    if (es->has[at])
        return topo_p_fail(c, tn, "duplicate edge %s -> %s (first at line %d)", c->t->nodes[from].id,
                      c->t->nodes[to].id, es->edge_line[at]);
    es->has[at] = 1;
    es->edge_line[at] = topo_yaml_line(tn);
    w[at] = weight;
    if (es->sender_line[from] == es->body_line)
        es->sender_line[from] = topo_yaml_line(item);
    return 0;
}

/* One entry {from, to: ID | [ID, ...], weight} of the edges list into w. */
static int s_edge_entry(topo_pctx *c, s_edge_set *es, yaml_node_t *item, int uniform, double *w)
{
    static const char *const ekeys[] = { "from", "to", "weight" };
    yaml_node_t *ev[3];
    int from;
    double weight;
    if (topo_p_keys(c, item, "edge", ekeys, 3, ev) != 0)
        return -1;
    if (!ev[0] || !ev[1])
        return topo_p_fail(c, item, "edge: needs from and to");
    if (topo_p_node_ref(c, ev[0], "from", &from) != 0 || s_edge_weight(c, item, ev, from, uniform, &weight) != 0)
        return -1;
    if (ev[1]->type != YAML_SEQUENCE_NODE)
        return s_edge_store(c, es, item, ev[1], from, weight, w);
    yaml_node_item_t *t0 = ev[1]->data.sequence.items.start, *t1 = ev[1]->data.sequence.items.top;
    if (t0 == t1)
        return topo_p_fail(c, ev[1], "edge from %s: empty 'to' list", c->t->nodes[from].id);
    for (yaml_node_item_t *tp = t0; tp < t1; tp++)
        if (s_edge_store(c, es, item, topo_p_get(c, *tp), from, weight, w) != 0)
            return -1;
    return 0;
}

/* weights: uniform: sender j keeps `self` (one number for every node;
 * default 1/(out-degree + 1)) and splits the rest evenly over its edges
 * (has); a node without edges must keep everything. */
static int s_edges_uniform(topo_pctx *c, yaml_node_t **v, const char *where, const unsigned char *has, double *w)
{
    int n = c->n;
    double self = -1;
    if (v[G_SELF] && v[G_SELF]->type != YAML_SCALAR_NODE)
        return topo_p_fail(c, v[G_SELF], "%s: with weights: uniform, self is one number for every node", where);
    if (v[G_SELF]) {
        if (topo_p_want_number(c, v[G_SELF], "self", &self) != 0)
            return -1;
        if (!(self > 0 && self <= 1))
            return topo_p_fail(c, v[G_SELF], "%s: self weight %g must be in (0, 1]", where, self);
    }
    for (int j = 0; j < n; j++) {
        int deg = 0;
        for (int i = 0; i < n; i++)
            deg += has[(size_t)i * n + j];
        double sj = self < 0 ? 1.0 / (deg + 1) : self;
        if (deg == 0 && sj != 1.0)
            return topo_p_fail(c, v[G_SELF], "%s: node %s sends to nobody, so its self weight must be 1", where,
                          c->t->nodes[j].id);
        w[(size_t)j * n + j] = sj;
        for (int i = 0; i < n; i++)
            if (has[(size_t)i * n + j])
                w[(size_t)i * n + j] = (1.0 - sj) / deg;
    }
    return 0;
}

/* self: {ID: W, ...} into w's diagonal: every node exactly once, W in
 * [0, 1]; a node's key line becomes its sender line if no edge set it. */
static int s_self_map(topo_pctx *c, yaml_node_t *sv, const char *where, s_edge_set *es, double *w)
{
    int n = c->n, bad = 0;
    unsigned char *seen = nn_xcalloc((size_t)n, 1);
    for (yaml_node_pair_t *p = sv->data.mapping.pairs.start; p < sv->data.mapping.pairs.top && !bad; p++) {
        yaml_node_t *key = topo_p_get(c, p->key), *val = topo_p_get(c, p->value);
        int j;
        double x;
        if (topo_p_node_ref(c, key, "self", &j) != 0 || topo_p_want_number(c, val, "self weight", &x) != 0) {
            bad = 1;
        } else if (seen[j]) {
            topo_p_fail(c, key, "self: duplicate self weight for node %s", c->t->nodes[j].id);
            bad = 1;
        } else if (!(x >= 0 && x <= 1)) {
            topo_p_fail(c, val, "self weight %g of node %s out of [0, 1]", x, c->t->nodes[j].id);
            bad = 1;
        } else {
            seen[j] = 1;
            w[(size_t)j * n + j] = x;
            if (es->sender_line[j] == es->body_line)
                es->sender_line[j] = topo_yaml_line(key);
        }
    }
    for (int j = 0; j < n && !bad; j++)
        if (!seen[j]) {
            topo_p_fail(c, sv, "%s: missing self weight for node %s", where, c->t->nodes[j].id);
            bad = 1;
        }
    free(seen);
    return bad ? -1 : 0;
}

/* Explicit weights: the self weights are required (self: W for every node
 * or self: {ID: W, ...}) and must be positive; then every column must sum
 * to 1. */
static int s_edges_self(topo_pctx *c, yaml_node_t **v, const char *where, yaml_node_t *body, s_edge_set *es, double *w)
{
    int n = c->n;
    yaml_node_t *sv = v[G_SELF];
    if (!sv)
        return topo_p_fail(c, body, "%s: missing self weights: add 'self: W' (every node) or 'self: {id: W, ...}'",
                      where);
    if (sv->type == YAML_SCALAR_NODE) {
        double self;
        if (topo_p_want_number(c, sv, "self", &self) != 0)
            return -1;
        if (!(self >= 0 && self <= 1))
            return topo_p_fail(c, sv, "%s: self weight %g out of [0, 1]", where, self);
        for (int j = 0; j < n; j++)
            w[(size_t)j * n + j] = self;
    } else if (sv->type == YAML_MAPPING_NODE) {
        if (s_self_map(c, sv, where, es, w) != 0)
            return -1;
    } else {
        return topo_p_fail(c, sv, "self: expected a number or a mapping {id: weight}, got %s", topo_yaml_type_name(sv));
    }
    for (int j = 0; j < n; j++)
        if (!(w[(size_t)j * n + j] > 0))
            return topo_p_fail(c, sv, "%s: missing self weight: node %s has self weight 0 (must be positive)", where,
                          c->t->nodes[j].id);
    return s_column_sums(c, w, es->sender_line, where);
}

/* GRAPH given by `edges:` into w: the mode (s_edges_mode), every entry of
 * the list in order (s_edge_entry), then the self weights, uniform
 * (s_edges_uniform) or explicit (s_edges_self). */
static int s_edges(topo_pctx *c, yaml_node_t **v, const char *where, yaml_node_t *body, double *w)
{
    int n = c->n, rc = 0, uniform;
    yaml_node_t *e = v[G_EDGES];
    if (s_edges_mode(c, v, where, &uniform) != 0)
        return -1;
    if (e->type != YAML_SEQUENCE_NODE)
        return topo_p_fail(c, e, "edges: expected a list of {from, to, weight}, got %s", topo_yaml_type_name(e));
    s_edge_set es = {
        .edge_line   = nn_xcalloc((size_t)n * (size_t)n, sizeof *es.edge_line),
        .sender_line = nn_xcalloc((size_t)n, sizeof *es.sender_line),
        .has         = nn_xcalloc((size_t)n * (size_t)n, 1),
        .body_line   = topo_yaml_line(body),
    };
    for (int j = 0; j < n; j++)
        es.sender_line[j] = es.body_line;
    for (yaml_node_item_t *it = e->data.sequence.items.start; it < e->data.sequence.items.top && rc == 0; it++)
        rc = s_edge_entry(c, &es, topo_p_get(c, *it), uniform, w);
    if (rc == 0)
        rc = uniform ? s_edges_uniform(c, v, where, es.has, w) : s_edges_self(c, v, where, body, &es, w);
    free(es.edge_line);
    free(es.sender_line);
    free(es.has);
    return rc;
}

static int s_matrix(topo_pctx *c, yaml_node_t **v, const char *where, double *w)
{
    int n = c->n;
    yaml_node_t *m = v[G_MATRIX];
    for (int k = G_ROWS; k <= G_WEIGHTS; k++)
        if (v[k])
            return topo_p_fail(c, v[k], "%s: '%s' does not go with matrix (the diagonal holds the self weights)", where,
                          s_graph_keys[k]);
    if (m->type != YAML_SEQUENCE_NODE)
        return topo_p_fail(c, m, "%s: matrix: expected a list of rows, got %s", where, topo_yaml_type_name(m));
    long rows = m->data.sequence.items.top - m->data.sequence.items.start;
    if (rows != n)
        return topo_p_fail(c, m, "%s: matrix: %ld rows, expected %d (one per node; every matrix of a schedule is %d x %d)",
                      where, rows, n, n, n);
    int *col_line = nn_xcalloc((size_t)n, sizeof *col_line);
    for (int j = 0; j < n; j++)
        col_line[j] = topo_yaml_line(m);
    int rc = -1;
    for (int i = 0; i < n; i++) {
        yaml_node_t *row = topo_p_get(c, m->data.sequence.items.start[i]);
        if (!row || row->type != YAML_SEQUENCE_NODE) {
            topo_p_fail(c, row ? row : m, "matrix row %d (node %s): expected a list of %d numbers, got %s", i,
                   c->t->nodes[i].id, n, row ? topo_yaml_type_name(row) : "nothing");
            goto done;
        }
        long cols = row->data.sequence.items.top - row->data.sequence.items.start;
        if (cols != n) {
            topo_p_fail(c, row, "%s: matrix row %d (node %s): %ld entries, expected %d", where, i, c->t->nodes[i].id, cols,
                   n);
            goto done;
        }
        for (int j = 0; j < n; j++) {
            yaml_node_t *x = topo_p_get(c, row->data.sequence.items.start[j]);
            double val;
            if (topo_p_want_number(c, x, "matrix entry", &val) != 0)
                goto done;
            if (!(val >= 0 && val <= 1)) {
                topo_p_fail(c, x, "matrix entry [%d][%d] (node %s from %s): weight %g out of [0, 1]", i, j,
                       c->t->nodes[i].id, c->t->nodes[j].id, val);
                goto done;
            }
            w[(size_t)i * n + j] = val;
        }
        if (!(w[(size_t)i * n + i] > 0)) {
            topo_p_fail(c, row, "matrix row %d: missing self weight: node %s has diagonal entry 0 (must be positive)", i,
                   c->t->nodes[i].id);
            goto done;
        }
    }
    rc = s_column_sums(c, w, col_line, where);
done:
    free(col_line);
    return rc;
}

