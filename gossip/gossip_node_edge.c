/* gossip_node_edge — choco's edge copies (docs/gossip.md "Edge copies").
 *
 * A choco node normally sends one update q_i = C(x_i - xhat_i) to all its
 * out-neighbours, so a neighbour behind a slow link gets as much as the
 * others and sets their pace.  An out-edge i -> j of its own keeps a copy
 * xhat_ij of what j holds of us, and j's messages carry C(x_i - xhat_ij)
 * when the edge is free and nothing (a deferred update) while it is backed
 * up; the other out-neighbours keep getting every update of xhat_i.  The
 * receiver cannot tell: it applies what comes to its copy of us, as always.
 * The consensus step of node i, sum_k W_ik xhat_k - sum_j W_ji xhat_ij,
 * subtracts on each out-edge the copy its receiver adds, so sum x stays
 * exact for any column-stochastic W; with every edge shared it is choco's
 * sum_k W_ik xhat_k - xhat_i.  An edge becomes its own when the caller
 * says so (the link: a path backed up for several rounds) and shared again
 * with a RESYNC (gossip_node_resync_msg: j's copy is then xhat_i), or when
 * the node joins or restores (its copies are void then anyway).
 *
 * Owns:    struct gossip_node's xhat_to, out_to, defer_to, upd_to, skip_to,
 *          nedges, nedges_out, edge_bytes, edge_plain.
 * Exposes: gossip_node_edge_own, _edge_defer, _edge_is_own, _sends_update
 *          (gossip_node.h); gossip_node_edge_prepare, _edge_terms,
 *          _edge_share, _edge_clear, _edge_free (gossip_node_int.h).
 * Callers: gossip_round (which edges), gossip_node_send (prepare, RESYNC),
 *          gossip_node_mix (the terms), gossip_node_state (join/restore).
 */
#include "gossip/gossip_node_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int s_out_rank(const gossip_node *g, int j)
{
    return g->cfg.algo == GOSSIP_CHOCO && j >= 0 && j < g->n && j != g->rank &&
           g->peer[j].is_out;
}

int gossip_node_edge_own(gossip_node *g, int j)
{
    if (!s_out_rank(g, j) || g->prepared)
        return -1;
    if (!g->xhat_to) {
        g->xhat_to = nn_xcalloc((size_t)g->n, sizeof *g->xhat_to);
        g->out_to = nn_xcalloc((size_t)g->n, sizeof *g->out_to);
        g->defer_to = nn_xcalloc((size_t)g->n, 1);
        g->skip_to = nn_xcalloc((size_t)g->n, sizeof *g->skip_to);
    }
    if (g->xhat_to[j])
        return 0;
    size_t d = g->layout->numel;
    g->xhat_to[j] = nn_xalloc_aligned(d * sizeof(float));
    /* j holds xhat_i as of our last message: every update so far */
    memcpy(g->xhat_to[j], g->xhat_self, d * sizeof(float));
    g->nedges++;
    g->stats.edges_own++;
    return 0;
}

int gossip_node_edge_is_own(const gossip_node *g, int j)
{
    return s_out_rank(g, j) && g->xhat_to && g->xhat_to[j];
}

/* Updates an edge may skip in a row: 1 / (8 eta (1 - W_ii)) - S - 1, at
 * least 1 (13 at eta 0.01 on a complete graph of 4, 22 on a ring).
 * Between two updates its receiver mixes the same copy of us, and a node
 * whose every edge skips steps towards copies up to m + S + 1 rounds old
 * with its whole consensus weight eta (1 - W_ii): it overshoots once that
 * reaches about a quarter (in the simulator, top-10% + q8, S = 2, delays
 * up to 2, a node's every edge skipping all it may: at eta 0.03 on the
 * complete graph of 4, 8 in a row diverged, 4 did not; hence 8, a factor
 * 2 below, in place of 4). */
static unsigned s_skip_max(const gossip_node *g)
{
    double wii = s_w(g, g->iter)[(size_t)g->rank * g->n + g->rank];
    double m = floor(1.0 / (8.0 * g->cfg.eta * (1.0 - wii))) - (double)g->cfg.staleness - 1.0;
    return m < 1.0 ? 1u : m > 1e6 ? 1000000u : (unsigned)m;
}

int gossip_node_edge_defer(gossip_node *g, int j)
{
    if (!gossip_node_edge_is_own(g, j) || g->prepared || g->skip_to[j] >= s_skip_max(g))
        return -1;
    g->defer_to[j] = 1;
    return 0;
}

int gossip_node_sends_update(const gossip_node *g, int j)
{
    if (!g->prepared || j < 0 || j >= g->n)
        return 0;
    if (gossip_node_edge_is_own(g, j))
        return g->upd_to[j];
    return !g->deferred_last;
}

void gossip_node_edge_share(gossip_node *g, int j)
{
    if (!gossip_node_edge_is_own(g, j))
        return;
    free(g->xhat_to[j]);
    g->xhat_to[j] = NULL;
    g->defer_to[j] = 0;
    g->skip_to[j] = 0;
    g->nedges--;
}

void gossip_node_edge_clear(gossip_node *g)
{
    for (int j = 0; g->xhat_to && j < g->n; j++)
        gossip_node_edge_share(g, j);
}

void gossip_node_edge_free(gossip_node *g)
{
    gossip_node_edge_clear(g);
    for (int j = 0; g->out_to && j < g->n; j++)
        gossip_buf_free(&g->out_to[j]);
    free(g->xhat_to);
    free(g->out_to);
    free(g->defer_to);
    free(g->upd_to);
    free(g->skip_to);
}

int gossip_node_edge_shared_dest(const gossip_node *g)
{
    for (int a = 0; a < g->ndest; a++)
        if (!gossip_node_edge_is_own(g, g->dest[a]))
            return 1;
    return 0;
}

/* The message of own edge j into g->out_to[j]: C(x - xhat_ij), or no
 * update; xhat_ij moves by exactly the decoded bytes.  -1 with a message. */
static int s_edge_message(gossip_node *g, int j, const float *x, uint64_t iter, char *err,
                          size_t errlen)
{
    size_t d = g->layout->numel;
    uint16_t flags = (uint16_t)(g->cfg.push_sum ? GOSSIP_FLAG_PUSH_SUM : 0);
    float *xh = g->xhat_to[j];
    g->upd_to[j] = !g->defer_to[j];
    if (g->defer_to[j]) {
        gossip_node_empty_blocks(g);
        flags |= GOSSIP_FLAG_DEFERRED;
        g->stats.edge_deferred++;
    } else {
        for (size_t k = 0; k < d; k++)
            g->work[k] = x[k] - xh[k];
        gossip_compressor cur;
        s_comp_at(g, iter, &cur);
        if (gossip_compress(&cur, g->layout, g->work, &g->rng, &g->comp_out, err, errlen) < 0)
            return -1;
    }
    g->skip_to[j] = g->defer_to[j] ? g->skip_to[j] + 1 : 0;
    g->defer_to[j] = 0;
    g->edge_plain += gossip_node_encode(g, flags, iter, &g->out_to[j]);
    if (g->upd_to[j]) {
        char derr[256];
        const gossip_buf *b = &g->out_to[j];
        if (gossip_msg_decode(b->data, b->len, g->layout, NULL, &g->scratch_pl, derr,
                              sizeof derr) < 0)
            return nn_errf(err, errlen, "gossip: own message to rank %d does not decode: %s", j,
                           derr);
        gossip_payload_add(&g->scratch_pl, g->layout, xh);
    }
    return 0;
}

int gossip_node_edge_prepare(gossip_node *g, const float *x, uint64_t iter, char *err,
                             size_t errlen)
{
    g->edge_plain = g->edge_bytes = 0;
    g->nedges_out = 0;
    if (!g->nedges)
        return 0;
    if (!g->upd_to)
        g->upd_to = nn_xcalloc((size_t)g->n, 1);
    for (int a = 0; a < g->ndest; a++) {
        int j = g->dest[a];
        if (!gossip_node_edge_is_own(g, j))
            continue;
        if (s_edge_message(g, j, x, iter, err, errlen) < 0)
            return -1;
        g->edge_bytes += g->out_to[j].len;
        g->nedges_out++;
    }
    return 0;
}

void gossip_node_edge_terms(const gossip_node *g, uint64_t iter, double *acc)
{
    if (!g->nedges)
        return;
    const double *w = s_w(g, iter);
    const float *xs = g->xhat_self;
    size_t d = g->layout->numel;
    for (int j = 0; j < g->n; j++) {
        double wji = w[(size_t)j * g->n + g->rank];
        if (!gossip_node_edge_is_own(g, j) || g->peer[j].out_down || !(wji > 0.0))
            continue;
        const float *xh = g->xhat_to[j]; /* - W_ji xhat_ij in place of - W_ji xhat_i */
        for (size_t k = 0; k < d; k++)
            acc[k] += wji * ((double)xs[k] - xh[k]);
    }
}
