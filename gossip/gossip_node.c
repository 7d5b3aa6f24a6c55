/* gossip_node — see gossip_node.h.  This file: the configuration, the life
 * cycle (checks, allocation, destruction) and the read-only accessors.  The
 * rest of the object lives in gossip_node_send.c (the outgoing message),
 * gossip_node_inbox.c (receipt, stash, readiness, membership),
 * gossip_node_mix.c (the mixing step), gossip_node_step.c (the weight of a
 * local step) and gossip_node_state.c (checkpoint state, rejoin); its
 * private state is declared in gossip_node_int.h.
 *
 * Dimension legend: d = layout->numel (parameters), n nodes, nin union
 * in-neighbours of this node.
 */
#include "gossip/gossip_node_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_defaults.h"

void gossip_config_default(gossip_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->algo = GOSSIP_DEF_CONFIG_ALGO;
    strcpy(cfg->compressor, GOSSIP_DEF_COMPRESSOR);
    cfg->eta = GOSSIP_DEF_ETA;
    cfg->push_sum = GOSSIP_DEF_PUSH_SUM;
    cfg->seed = GOSSIP_DEF_SEED;
}

int gossip_algo_parse(const char *name, gossip_algo *out, char *err, size_t errlen)
{
    if (!strcmp(name, "dpsgd") || !strcmp(name, "sgp"))
        *out = GOSSIP_DPSGD;
    else if (!strcmp(name, "choco"))
        *out = GOSSIP_CHOCO;
    else if (!strcmp(name, "deepsqueeze"))
        *out = GOSSIP_DEEPSQUEEZE;
    else
        return nn_errf(err, errlen, "unknown gossip algorithm '%s' (known: dpsgd, sgp, choco, deepsqueeze)", name);
    return 0;
}

const char *gossip_algo_name(gossip_algo a)
{
    switch (a) {
    case GOSSIP_DPSGD: return "dpsgd";
    case GOSSIP_CHOCO: return "choco";
    case GOSSIP_DEEPSQUEEZE: return "deepsqueeze";
    }
    return "?";
}

/* The topology checks are topo_validate's (one place, TOPO_SUM_TOL); the
 * algorithms without push-sum also need rows that sum to 1. */
static int s_check_topo(const topo *t, int rank, int push_sum, char *err, size_t errlen)
{
    char msg[512];
    if (!t || topo_validate(t, msg, sizeof msg) != 0)
        return nn_errf(err, errlen, "gossip: topology '%s': %s", t ? t->name : "",
                       t ? msg : "none");
    if (rank < 0 || rank >= t->n)
        return nn_errf(err, errlen, "gossip: rank %d outside 0..%d of topology '%s'", rank, t->n - 1, t->name);
    if (!push_sum && !topo_is_doubly_stochastic(t))
        return nn_errf(err, errlen, "gossip: topology '%s': rows do not sum to 1; without "
                       "push-sum W must be doubly stochastic", t->name);
    return 0;
}

/* Checks a configuration, its compressor, the layout and the topology
 * before gossip_node_new allocates anything. */
static int s_check_config(const gossip_config *cfg, const gossip_compressor *comp,
                          const nn_arena *layout, const topo *t, int rank, char *err,
                          size_t errlen)
{
    if (cfg->algo != GOSSIP_DPSGD && cfg->algo != GOSSIP_CHOCO && cfg->algo != GOSSIP_DEEPSQUEEZE)
        return nn_errf(err, errlen, "gossip: unknown algorithm %d", (int)cfg->algo);
    if (cfg->algo == GOSSIP_DPSGD && comp->sparse != GOSSIP_SPARSE_NONE)
        return nn_errf(err, errlen, "gossip: dpsgd sends the whole model; sparsifier '%s' needs choco or deepsqueeze", comp->spec);
    if (comp->rdecay < 1.0 && cfg->algo != GOSSIP_DEEPSQUEEZE)
        return nn_errf(err, errlen, "gossip: compressor %s: rdecay decays the unsent residual, which only deepsqueeze "
                       "keeps apart from the model (e = rdecay*(v - c)); in %s the residual x+ - xhat_i is part of the "
                       "model and cannot decay without changing it", comp->spec, gossip_algo_name(cfg->algo));
    if (comp->sparse == GOSSIP_SPARSE_DGC && cfg->algo != GOSSIP_CHOCO)
        return nn_errf(err, errlen, "gossip: compressor %s needs choco: DGC's momentum correction is error feedback on "
                       "the accumulated local updates (choco's x+ - xhat_i); %s compresses the model itself, so "
                       "masking the momentum of the largest weights would be wrong (use topk:F[,rdecay=B])",
                       comp->spec, gossip_algo_name(cfg->algo));
    if (comp->warmup > 0 && cfg->iters_per_epoch == 0)
        return nn_errf(err, errlen, "gossip: compressor %s: the density warm-up counts epochs, but the iterations per "
                       "epoch are not known (gossip_config.iters_per_epoch = 0)", comp->spec);
    if (cfg->algo != GOSSIP_DPSGD && !(isfinite(cfg->eta) && cfg->eta > 0.0 && cfg->eta <= 1.0))
        return nn_errf(err, errlen, "gossip: consensus step eta = %g must be in (0, 1]", cfg->eta);
    if (cfg->staleness < 0 || cfg->staleness > GOSSIP_STALE_MAX)
        return nn_errf(err, errlen, "gossip: staleness %d outside 0..%d (GOSSIP_STALE_MAX: a receiver keeps "
                       "GOSSIP_WINDOW + GOSSIP_STALE_MAX = %d messages per in-neighbour)", cfg->staleness,
                       GOSSIP_STALE_MAX, GOSSIP_SLOTS);
    if (cfg->staleness > 0 && cfg->algo != GOSSIP_CHOCO && !cfg->push_sum)
        return nn_errf(err, errlen, "gossip: staleness %d with %s needs push-sum: a round that mixes no message "
                       "of some in-neighbour has no stochastic row without psi (drop --no-push-sum, or use "
                       "--staleness 0)", cfg->staleness, gossip_algo_name(cfg->algo));
    if (!layout || layout->nviews == 0 || layout->numel == 0 || layout->numel > UINT32_MAX)
        return nn_errf(err, errlen, "gossip: parameter layout must have 1..2^32-1 values in at least one tensor");
    return s_check_topo(t, rank, cfg->push_sum, err, errlen);
}

gossip_node *gossip_node_new(const gossip_config *cfg, const nn_arena *layout, const topo *t,
                             int rank, char *err, size_t errlen)
{
    gossip_compressor comp;
    if (gossip_compressor_parse(&comp, cfg->compressor, err, errlen) < 0)
        return NULL;
    if (s_check_config(cfg, &comp, layout, t, rank, err, errlen) < 0)
        return NULL;

    gossip_node *g = nn_xcalloc(1, sizeof *g);
    g->cfg = *cfg;
    g->comp = comp;
    g->layout = layout;
    g->t = t;
    g->rank = rank;
    g->n = t->n;
    g->fp = gossip_layout_fingerprint(layout);
    g->blk_type = gossip_compressor_block_type(&comp);
    g->psi = 1.0;
    g->psi_mean = 1.0;
    g->sync_from = UINT64_MAX;
    size_t d = layout->numel;
    int n = t->n;

    g->in_ranks = nn_xmalloc((size_t)n * sizeof *g->in_ranks);
    g->out_union = nn_xmalloc((size_t)n * sizeof *g->out_union);
    g->dest = nn_xmalloc((size_t)n * sizeof *g->dest);
    g->nin = topo_in_neighbors_any(t, rank, g->in_ranks);
    g->nout_union = topo_out_neighbors_any(t, rank, g->out_union);
    g->peer = nn_xcalloc((size_t)n, sizeof *g->peer);
    for (int j = 0; j < n; j++)
        g->peer[j] = (gossip_peer){.rank = j, .in_pos = -1, .psi_last = 1.0};
    for (int k = 0; k < g->nin; k++) {
        g->peer[g->in_ranks[k]].in_pos = k;
        g->peer[g->in_ranks[k]].is_in = 1;
    }
    for (int k = 0; k < g->nout_union; k++)
        g->peer[g->out_union[k]].is_out = 1;
    g->slots = nn_xcalloc((size_t)(g->nin ? g->nin : 1) * GOSSIP_SLOTS, sizeof *g->slots);
    g->stale = nn_xcalloc((size_t)(g->nin ? g->nin : 1), sizeof *g->stale);
    g->keep_now = nn_xcalloc((size_t)n, sizeof *g->keep_now);
    g->kept_from = nn_xcalloc((size_t)n, sizeof *g->kept_from);
    for (int j = 0; j < n; j++)
        g->kept_from[j] = UINT64_MAX;
    g->work = nn_xalloc_aligned(d * sizeof(float));
    g->acc = nn_xalloc_aligned(d * sizeof(double));
    if (cfg->algo == GOSSIP_CHOCO) {
        g->xhat_self = nn_xalloc_aligned(d * sizeof(float)); /* starts at 0 */
        g->xhat_in = nn_xcalloc((size_t)(g->nin ? g->nin : 1), sizeof *g->xhat_in);
        for (int k = 0; k < g->nin; k++)
            g->xhat_in[k] = nn_xalloc_aligned(d * sizeof(float));
    }
    if (cfg->algo == GOSSIP_DEEPSQUEEZE)
        g->ebuf = nn_xalloc_aligned(d * sizeof(float));
    if (comp.mask_momentum)
        g->sent = nn_xalloc_aligned(d * sizeof(float)); /* nothing sent yet */
    nn_rng_seed(&g->rng, nn_seed_derive(cfg->seed, (uint64_t)rank));
    gossip_compressed_init(&g->comp_out, layout);
    gossip_payload_init(&g->self_pl, layout);
    gossip_payload_init(&g->scratch_pl, layout);
    return g;
}

void gossip_node_destroy(gossip_node **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_node *g = *self_p;
    for (int k = 0; k < g->nin * GOSSIP_SLOTS; k++)
        gossip_payload_free(&g->slots[k].pl);
    free(g->slots);
    free(g->stale);
    free(g->keep_now);
    free(g->kept_from);
    gossip_buf_free(&g->out_kept);
    gossip_buf_free(&g->resync);
    if (g->xhat_in)
        for (int k = 0; k < g->nin; k++)
            free(g->xhat_in[k]);
    free(g->xhat_in);
    gossip_node_edge_free(g);
    free(g->xhat_self);
    free(g->ebuf);
    free(g->sent);
    free(g->work);
    free(g->acc);
    free(g->fold_acc);
    free(g->in_ranks);
    free(g->peer);
    free(g->out_union);
    free(g->dest);
    gossip_compressed_free(&g->comp_out);
    gossip_payload_free(&g->self_pl);
    gossip_payload_free(&g->scratch_pl);
    gossip_buf_free(&g->out);
    gossip_deflater_free(&g->zbuf);
    free(g->owed);
    free(g);
    *self_p = NULL;
}

double gossip_node_psi(const gossip_node *g)
{
    return g->psi;
}

void gossip_node_debias(const gossip_node *g, const float *x, float *z)
{
    size_t d = g->layout->numel;
    if (g->psi == 1.0) {
        if (z != x)
            memcpy(z, x, d * sizeof *z);
        return;
    }
    /* times the reciprocal: with a division per value this loop took 3x
     * as long (ring8 int8 SGP, S = 2: 1872 against 603 perf samples of
     * 114-129k); the product differs from the quotient by at most one
     * rounding of the double, far below float's */
    const double inv = 1.0 / g->psi;
    for (size_t k = 0; k < d; k++)
        z[k] = (float)((double)x[k] * inv);
}

uint64_t gossip_node_iter(const gossip_node *g)
{
    return g->iter;
}

uint64_t gossip_node_sent_thru(const gossip_node *g)
{
    return g->iter + (uint64_t)g->prepared;
}

uint64_t gossip_node_sent_thru_to(const gossip_node *g, int rank)
{
    uint64_t at = gossip_node_sent_thru(g);
    if (rank < 0 || rank >= g->n)
        return at;
    if (g->prepared && g->keep_now[rank] && g->iter < at)
        at = g->iter;
    return g->kept_from[rank] < at ? g->kept_from[rank] : at;
}

int gossip_node_keep(gossip_node *g, int rank, int keep)
{
    if (g->cfg.algo != GOSSIP_DPSGD || !g->cfg.push_sum || !g->cfg.staleness || !g->prepared ||
        rank < 0 || rank >= g->n)
        return -1;
    for (int a = 0; a < g->ndest; a++)
        if (g->dest[a] == rank) {
            g->keep_now[rank] = (uint8_t)(keep != 0);
            return 0;
        }
    return -1;
}

const nn_arena *gossip_node_layout(const gossip_node *g)
{
    return g->layout;
}

const gossip_config *gossip_node_config(const gossip_node *g)
{
    return &g->cfg;
}

void gossip_node_stats(const gossip_node *g, gossip_stats *out)
{
    *out = g->stats;
}

const float *gossip_node_xhat_self(const gossip_node *g)
{
    return g->xhat_self;
}

const float *gossip_node_xhat_of(const gossip_node *g, int rank)
{
    if (!g->xhat_in || rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return NULL;
    return g->xhat_in[g->peer[rank].in_pos];
}

uint64_t gossip_node_ahead(const gossip_node *g)
{
    /* push-sum folds and bounds its mass in flight: the least lead; choco
     * and deepsqueeze: the largest (with the least, choco lost 1.7-3.7
     * points with a node stopped 2/3 of the time, against 0.6-0.7) */
    const int least = g->cfg.algo == GOSSIP_DPSGD && g->cfg.push_sum;
    uint64_t ahead = least ? UINT64_MAX : 0;
    for (int k = 0; k < g->nin; k++) {
        if (s_absent(g, k, g->iter) == S_ABSENT_DOWN)
            continue;
        uint64_t nw = g->stale[k].newest; /* 1 + its newest iteration */
        uint64_t a = nw > g->iter + 1 ? nw - 1 - g->iter : 0;
        if (least ? a < ahead : a > ahead)
            ahead = a;
    }
    return ahead == UINT64_MAX ? 0 : ahead;
}

void gossip_node_sync_from(gossip_node *g, uint64_t iter)
{
    g->sync_from = iter;
}

int gossip_node_peer_lag(const gossip_node *g, int rank, uint64_t *lag, uint64_t *unfresh)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return -1;
    const s_stale *st = &g->stale[g->peer[rank].in_pos];
    *lag = st->lag;
    *unfresh = st->unfresh;
    return 0;
}

uint32_t gossip_node_fingerprint(const gossip_node *g)
{
    return g->fp;
}
