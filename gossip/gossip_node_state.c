/* gossip_node_state — the state of gossip_node between two iterations
 * (gossip_node.h "checkpoint state"): export and import for checkpoints,
 * and moving a node forward to join or re-join a run in progress.
 *
 * Owns:    nothing beyond struct gossip_node (gossip_node_int.h).
 * Exposes: gossip_node_export, _nvec, _vec, _import, _set_iter, _join.
 * Callers: node/node_ckpt.c, gossip_link (join, re-join), node/.
 */
#include "gossip/gossip_node_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Drops the messages folded in for the next mix (gossip_node_fold):
 * the state they were for is replaced. */
static void s_unfold(gossip_node *g)
{
    if (g->fold_acc)
        memset(g->fold_acc, 0, g->layout->numel * sizeof *g->fold_acc);
    g->fold_psi = 0.0;
    g->fold_recv = 0;
}

/* ---- checkpoint state ---------------------------------------------------- */

void gossip_node_export(const gossip_node *g, gossip_node_state *s)
{
    s->iter = g->iter;
    s->psi = g->psi;
    s->rng = g->rng;
}

int gossip_node_nvec(const gossip_node *g)
{
    int nv = g->sent != NULL;
    if (g->cfg.algo == GOSSIP_CHOCO)
        return nv + 1 + g->nin;
    return nv + (g->cfg.algo == GOSSIP_DEEPSQUEEZE ? 1 : 0);
}

const float *gossip_node_vec(const gossip_node *g, int k, char *name, size_t namelen)
{
    if (k < 0 || k >= gossip_node_nvec(g))
        return NULL;
    if (g->sent && k == gossip_node_nvec(g) - 1) {
        snprintf(name, namelen, "sent");
        return g->sent;
    }
    if (g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        snprintf(name, namelen, "e");
        return g->ebuf;
    }
    if (k == 0) {
        snprintf(name, namelen, "xhat.self");
        return g->xhat_self;
    }
    snprintf(name, namelen, "xhat.%d", g->in_ranks[k - 1]);
    return g->xhat_in[k - 1];
}

int gossip_node_import(gossip_node *g, const gossip_node_state *s, const float *const *vec,
                       char *err, size_t errlen)
{
    if (!isfinite(s->psi) || !(s->psi > 0.0))
        return nn_errf(err, errlen, "gossip: node %d: restored push-sum weight psi = %g is not a finite positive number",
                       g->rank, s->psi);
    size_t d = g->layout->numel;
    int nv = gossip_node_nvec(g);
    char name[32];
    for (int k = 0; k < nv; k++)
        for (size_t e = 0; e < d; e++)
            if (!isfinite(vec[k][e])) {
                gossip_node_vec(g, k, name, sizeof name);
                return nn_errf(err, errlen, "gossip: node %d: restored state '%s' holds %g at index %zu",
                               g->rank, name, (double)vec[k][e], e);
            }
    if (g->sent)
        for (size_t e = 0; e < d; e++)
            if (vec[nv - 1][e] != 0.0f && vec[nv - 1][e] != 1.0f)
                return nn_errf(err, errlen, "gossip: node %d: restored state 'sent' holds %g at index %zu (0 or 1 expected)",
                               g->rank, (double)vec[nv - 1][e], e);
    for (int k = 0; k < nv; k++)
        memcpy((float *)gossip_node_vec(g, k, name, sizeof name), vec[k], d * sizeof(float));
    for (int k = 0; k < g->nin * GOSSIP_SLOTS; k++)
        g->slots[k].have = 0;
    s_unfold(g);
    for (int k = 0; k < g->nin; k++) { /* everyone live, copies current */
        s_in(g, k)->in_down = 0;
        s_in(g, k)->in_from = 0;
        s_in(g, k)->copy_bad = 0;
        s_in(g, k)->copy_gap = 0;
        s_in(g, k)->copy_thru = s->iter;
        s_in(g, k)->sent_thru = s->iter;
        s_in(g, k)->psi_last = 1.0;
        g->stale[k].acc_thru = s->iter;
        g->stale[k].newest = s->iter;
        g->stale[k].used_from = s->iter;
    }
    for (int j = 0; j < g->n; j++)
        g->peer[j].out_down = 0;
    gossip_node_edge_clear(g); /* a new process has none; a neighbour that
                                  held one of ours restarts with a RESYNC */
    g->iter = s->iter;
    g->psi = s->psi;
    g->psi_mean = s->psi;
    gossip_node_owed_clear(g);
    g->rng = s->rng;
    g->prepared = 0;
    return 0;
}

int gossip_node_set_iter(gossip_node *g, uint64_t iter, char *err, size_t errlen)
{
    if (g->prepared || iter < g->iter)
        return nn_errf(err, errlen, "gossip: node %d: cannot move from iteration %llu%s to %llu",
                       g->rank, (unsigned long long)g->iter, g->prepared ? " (prepared)" : "",
                       (unsigned long long)iter);
    for (int k = 0; k < g->nin; k++) {
        for (int w = 0; w < GOSSIP_SLOTS; w++) {
            s_slot *slot = &g->slots[(size_t)k * GOSSIP_SLOTS + w];
            if (slot->have && slot->iter < iter)
                slot->have = 0;
        }
        if (s_in(g, k)->copy_thru < iter && g->cfg.algo == GOSSIP_CHOCO && !s_in(g, k)->copy_bad)
            s_in(g, k)->copy_bad = 1; /* it misses the updates in between */
        if (g->stale[k].acc_thru < iter)
            g->stale[k].acc_thru = iter;
    }
    s_unfold(g); /* like the held messages it skips */
    g->iter = iter;
    return 0;
}

int gossip_node_join(gossip_node *g, const float *z, uint64_t iter, char *err, size_t errlen)
{
    size_t d = g->layout->numel;
    for (size_t e = 0; e < d; e++)
        if (!isfinite(z[e]))
            return nn_errf(err, errlen, "gossip: node %d: the model to join with holds %g at "
                           "index %zu", g->rank, (double)z[e], e);
    if (gossip_node_set_iter(g, iter, err, errlen) != 0)
        return -1;
    g->psi = 1.0;
    g->psi_mean = 1.0;
    gossip_node_owed_clear(g);
    if (g->xhat_self)
        memcpy(g->xhat_self, z, d * sizeof *z);
    gossip_node_edge_clear(g);
    if (g->ebuf)
        memset(g->ebuf, 0, d * sizeof *g->ebuf);
    if (g->sent)
        memset(g->sent, 0, d * sizeof *g->sent);
    if (g->cfg.algo == GOSSIP_CHOCO)
        for (int k = 0; k < g->nin; k++)
            s_in(g, k)->copy_bad = 1; /* void until its RESYNC */
    return 0;
}

