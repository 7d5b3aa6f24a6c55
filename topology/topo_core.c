/* topo_core — the topo object: generators, validation, neighbour lists.
 *
 * Owns:    topo_generate (and the internal generator used by the YAML reader,
 *          topo__fill_generator), topo_validate, topo_destroy and the small
 *          accessors of topo.h.
 * Callers: topo_parse.c, gossip/, node/, tests.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"

const double *topo_weights(const topo *t, uint64_t iter)
{
    assert(t && t->nsched >= 1);
    return t->sched[iter % (uint64_t)t->nsched].w;
}

topo *topo__new(int n, int nsched)
{
    assert(n >= 1 && nsched >= 1);
    topo *t = nn_xcalloc(1, sizeof *t);
    t->n = n;
    t->nodes = nn_xcalloc((size_t)n, sizeof *t->nodes);
    for (int i = 0; i < n; i++)
        snprintf(t->nodes[i].id, sizeof t->nodes[i].id, "n%d", i);
    t->nsched = nsched;
    t->sched = nn_xcalloc((size_t)nsched, sizeof *t->sched);
    for (int s = 0; s < nsched; s++)
        t->sched[s].w = nn_xcalloc((size_t)n * (size_t)n, sizeof(double));
    return t;
}

void topo_destroy(topo **self_p)
{
    if (!self_p || !*self_p)
        return;
    topo *t = *self_p;
    if (t->sched)
        for (int s = 0; s < t->nsched; s++)
            free(t->sched[s].w);
    free(t->sched);
    free(t->nodes);
    free(t);
    *self_p = NULL;
}

/* ---- generators -------------------------------------------------------- */

/* Marks sender i -> receiver j (distinct, j != i) in the n-flag row `out`. */
static void s_mark(unsigned char *out, int n, int i, int j)
{
    j = ((j % n) + n) % n;
    if (j != i)
        out[j] = 1;
}

int topo__fill_generator(double *w, int n, const topo_gen *g, char *err, size_t errlen)
{
    assert(w && n >= 1 && g);
    if (g->self_weight != -1 && !(g->self_weight > 0 && g->self_weight <= 1))
        return nn_errf(err, errlen, "self weight %g must be in (0, 1]", g->self_weight);
    if (g->kind == TOPO_GEN_TORUS && (g->rows < 1 || g->cols < 1 || (long)g->rows * g->cols != n))
        return nn_errf(err, errlen, "torus %d x %d does not have %d nodes", g->rows, g->cols, n);
    if (g->kind == TOPO_GEN_STAR && (g->hub < 0 || g->hub >= n))
        return nn_errf(err, errlen, "star hub %d is not a node", g->hub);
    unsigned char *out = nn_xcalloc((size_t)n, 1);
    memset(w, 0, (size_t)n * (size_t)n * sizeof *w);
    int rc = -1;
    for (int i = 0; i < n; i++) {
        memset(out, 0, (size_t)n);
        switch (g->kind) {
        case TOPO_GEN_DIRECTED_RING:
            s_mark(out, n, i, i + 1);
            break;
        case TOPO_GEN_UNDIRECTED_RING:
            s_mark(out, n, i, i + 1);
            s_mark(out, n, i, i - 1);
            break;
        case TOPO_GEN_TORUS: {
            int r = i / g->cols, c = i % g->cols;
            s_mark(out, n, i, ((r + 1) % g->rows) * g->cols + c);
            s_mark(out, n, i, ((r + g->rows - 1) % g->rows) * g->cols + c);
            s_mark(out, n, i, r * g->cols + (c + 1) % g->cols);
            s_mark(out, n, i, r * g->cols + (c + g->cols - 1) % g->cols);
            break;
        }
        case TOPO_GEN_EXPONENTIAL:
            for (long h = 1; h < n; h *= 2)
                s_mark(out, n, i, (int)((i + h) % n));
            break;
        case TOPO_GEN_COMPLETE:
            for (int j = 0; j < n; j++)
                s_mark(out, n, i, j);
            break;
        case TOPO_GEN_STAR:
            if (i == g->hub) {
                for (int j = 0; j < n; j++)
                    s_mark(out, n, i, j);
            } else {
                s_mark(out, n, i, g->hub);
            }
            break;
        case TOPO_GEN_CIRCULANT:
            for (int k = 0; k < g->noffsets; k++)
                s_mark(out, n, i, (int)((i + (long)g->offsets[k]) % n));
            break;
        default:
            assert(0 && "unknown generator kind");
        }
        int deg = 0;
        for (int j = 0; j < n; j++)
            deg += out[j];
        double self = g->self_weight == -1 ? 1.0 / (deg + 1) : g->self_weight;
        if (deg == 0 && self != 1.0) {
            nn_errf(err, errlen, "self weight %g of node %d: it has no out-neighbour, so it must keep all its mass (1)",
                    self, i);
            goto done;
        }
        w[(size_t)i * n + i] = self;
        for (int j = 0; j < n; j++)
            if (out[j])
                w[(size_t)j * n + i] = (1.0 - self) / deg;
    }
    rc = 0;
done:
    free(out);
    return rc;
}

int topo__gen_kind(const char *name)
{
    static const char *names[] = {
        [TOPO_GEN_DIRECTED_RING] = "directed_ring", [TOPO_GEN_UNDIRECTED_RING] = "undirected_ring",
        [TOPO_GEN_TORUS] = "torus",                 [TOPO_GEN_EXPONENTIAL] = "exponential",
        [TOPO_GEN_COMPLETE] = "complete",           [TOPO_GEN_STAR] = "star",
        [TOPO_GEN_CIRCULANT] = "circulant",
    };
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (names[k] && !strcmp(name, names[k]))
            return k;
    return -1;
}

topo *topo_generate(const char *kind, int n, int rows, int cols, char *err, size_t errlen)
{
    int k = kind ? topo__gen_kind(kind) : -1;
    if (k < 0 || k == TOPO_GEN_CIRCULANT) {
        nn_errf(err, errlen,
                "unknown generator '%s' (directed_ring, undirected_ring, torus, exponential, complete, star)",
                kind ? kind : "(null)");
        return NULL;
    }
    topo_gen g = { .kind = k, .self_weight = -1, .rows = rows, .cols = cols };
    if (k == TOPO_GEN_TORUS) {
        if (rows < 1 || cols < 1 || rows > TOPO_MAX_NODES || cols > TOPO_MAX_NODES ||
            (long)rows * cols > TOPO_MAX_NODES) {
            nn_errf(err, errlen, "torus needs rows >= 1 and cols >= 1 with rows*cols <= %d (got %d x %d)",
                    TOPO_MAX_NODES, rows, cols);
            return NULL;
        }
        if (n == 0)
            n = rows * cols;
        if (n != rows * cols) {
            nn_errf(err, errlen, "torus %d x %d has %d nodes, not %d", rows, cols, rows * cols, n);
            return NULL;
        }
    }
    if (n < 1 || n > TOPO_MAX_NODES) {
        nn_errf(err, errlen, "node count %d out of range 1..%d", n, TOPO_MAX_NODES);
        return NULL;
    }
    topo *t = topo__new(n, 1);
    snprintf(t->name, sizeof t->name, "%s(%d)", kind, n);
    if (topo__fill_generator(t->sched[0].w, n, &g, err, errlen) != 0 ||
        topo_validate(t, err, errlen) != 0)
        topo_destroy(&t);
    return t;
}

/* ---- validation -------------------------------------------------------- */

/* Breadth-first search over the union of the schedule's graphs, following
 * edges forward (sender -> receiver) or backward; seen[] gets 1 for every
 * node reached from `from`. */
static void s_reach(const topo *t, int from, int forward, unsigned char *seen, int *queue)
{
    int n = t->n, head = 0, tail = 0;
    memset(seen, 0, (size_t)n);
    seen[from] = 1;
    queue[tail++] = from;
    while (head < tail) {
        int u = queue[head++];
        for (int v = 0; v < n; v++) {
            if (seen[v])
                continue;
            for (int s = 0; s < t->nsched; s++) {
                const double *w = t->sched[s].w;
                /* forward: u sends to v, i.e. w[v][u] > 0 */
                double x = forward ? w[(size_t)v * n + u] : w[(size_t)u * n + v];
                if (x > 0) {
                    seen[v] = 1;
                    queue[tail++] = v;
                    break;
                }
            }
        }
    }
}

int topo__bad_column(int n, const double *w, double *sum)
{
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += w[(size_t)i * n + j];
        if (fabs(s - 1.0) > TOPO_SUM_TOL) {
            *sum = s;
            return j;
        }
    }
    return -1;
}

int topo__check_matrix(const topo *t, const double *w, char *err, size_t errlen)
{
    int n = t->n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = w[(size_t)i * n + j];
            if (!(x >= 0.0 && x <= 1.0))
                return nn_errf(err, errlen, "weight %g from %s to %s is outside [0, 1]", x,
                               t->nodes[j].id, t->nodes[i].id);
        }
    for (int i = 0; i < n; i++)
        if (!(w[(size_t)i * n + i] > 0.0))
            return nn_errf(err, errlen, "missing self weight: node %s keeps nothing of its own mass (self weight must be positive)",
                           t->nodes[i].id);
    double sum;
    int j = topo__bad_column(n, w, &sum);
    if (j >= 0)
        return nn_errf(err, errlen,
                       "column sum %.9g at node %s: the weights node %s sends (self included) must sum to 1",
                       sum, t->nodes[j].id, t->nodes[j].id);
    return 0;
}

int topo__check_connected(const topo *t, char *err, size_t errlen)
{
    int n = t->n, rc = 0;
    unsigned char *seen = nn_xmalloc((size_t)n);
    int *queue = nn_xmalloc((size_t)n * sizeof *queue);
    for (int dir = 1; dir >= 0 && rc == 0; dir--) {
        s_reach(t, 0, dir, seen, queue);
        for (int v = 0; v < n; v++)
            if (!seen[v]) {
                rc = nn_errf(err, errlen, "not strongly connected%s: node %s unreachable from %s",
                             t->nsched > 1 ? " (union of the schedule)" : "",
                             dir ? t->nodes[v].id : t->nodes[0].id, dir ? t->nodes[0].id : t->nodes[v].id);
                break;
            }
    }
    free(seen);
    free(queue);
    return rc;
}

int topo_validate(const topo *t, char *err, size_t errlen)
{
    if (!t || t->n < 1 || t->n > TOPO_MAX_NODES)
        return nn_errf(err, errlen, "node count out of range 1..%d", TOPO_MAX_NODES);
    if (t->nsched < 1 || t->nsched > TOPO_MAX_SCHED || !t->sched || !t->nodes)
        return nn_errf(err, errlen, "schedule length out of range 1..%d", TOPO_MAX_SCHED);
    for (int i = 0; i < t->n; i++) {
        if (!t->nodes[i].id[0])
            return nn_errf(err, errlen, "node %d has an empty id", i);
        for (int j = 0; j < i; j++) {
            if (!strcmp(t->nodes[i].id, t->nodes[j].id))
                return nn_errf(err, errlen, "duplicate node id '%s'", t->nodes[i].id);
            if (t->nodes[i].pubkey[0] && !strcmp(t->nodes[i].pubkey, t->nodes[j].pubkey))
                return nn_errf(err, errlen, "nodes %s and %s have the same public key",
                               t->nodes[j].id, t->nodes[i].id);
        }
        if (t->security_curve && strlen(t->nodes[i].pubkey) != 40)
            return nn_errf(err, errlen, "security: curve but node %s has no 40-character public key",
                           t->nodes[i].id);
    }
    for (int s = 0; s < t->nsched; s++) {
        char msg[512];
        if (!t->sched[s].w)
            return nn_errf(err, errlen, "schedule entry %d has no matrix", s);
        if (topo__check_matrix(t, t->sched[s].w, msg, sizeof msg) != 0) {
            if (t->nsched > 1)
                return nn_errf(err, errlen, "schedule entry %d: %s", s, msg);
            return nn_errf(err, errlen, "%s", msg);
        }
    }
    return topo__check_connected(t, err, errlen);
}

int topo_is_doubly_stochastic(const topo *t)
{
    int n = t->n;
    for (int s = 0; s < t->nsched; s++) {
        const double *w = t->sched[s].w;
        for (int i = 0; i < n; i++) {
            double sum = 0;
            for (int j = 0; j < n; j++)
                sum += w[(size_t)i * n + j];
            if (fabs(sum - 1.0) > TOPO_SUM_TOL)
                return 0;
        }
    }
    return 1;
}

int topo_find_node(const topo *t, const char *id)
{
    if (!t || !id)
        return -1;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->nodes[i].id, id))
            return i;
    return -1;
}

/* Neighbours of i in matrices s0..s1-1: in (w[i][j] > 0) or out (w[j][i] > 0). */
static int s_neighbors(const topo *t, int s0, int s1, int i, int in, int *out)
{
    int n = t->n, k = 0;
    assert(i >= 0 && i < n);
    for (int j = 0; j < n; j++) {
        if (j == i)
            continue;
        for (int s = s0; s < s1; s++) {
            const double *w = t->sched[s].w;
            if ((in ? w[(size_t)i * n + j] : w[(size_t)j * n + i]) > 0) {
                out[k++] = j;
                break;
            }
        }
    }
    return k;
}

int topo_in_neighbors(const topo *t, uint64_t iter, int i, int *out)
{
    int s = (int)(iter % (uint64_t)t->nsched);
    return s_neighbors(t, s, s + 1, i, 1, out);
}

int topo_out_neighbors(const topo *t, uint64_t iter, int i, int *out)
{
    int s = (int)(iter % (uint64_t)t->nsched);
    return s_neighbors(t, s, s + 1, i, 0, out);
}

int topo_in_neighbors_any(const topo *t, int i, int *out)
{
    return s_neighbors(t, 0, t->nsched, i, 1, out);
}

int topo_out_neighbors_any(const topo *t, int i, int *out)
{
    return s_neighbors(t, 0, t->nsched, i, 0, out);
}
