/* gossip_node — see gossip_node.h.
 *
 * Dimension legend: d = layout->numel (parameters), n nodes, nin union
 * in-neighbours of this node.
 */
#include "gossip/gossip_node.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message of an in-neighbour between receipt and mix: decoded (and
 * validated) once on receipt, kept as a compact payload. */
typedef struct {
    uint64_t       iter;
    int            have;
    double         psi;
    size_t         len;    /* its size on the wire (byte counters) */
    gossip_payload pl;     /* grow-only */
} s_slot;

/* Bounded staleness, per in-neighbour (private: the peer table's algorithm
 * section is shared with other work). */
typedef struct {
    uint64_t acc_thru; /* dpsgd/deepsqueeze: its messages below this are mixed
                          or accounted as lost (choco: copy_thru) */
    uint64_t newest;   /* 1 + the newest iteration received from it */
    uint64_t lag;      /* staleness used at the last mix */
    uint64_t unfresh;  /* mixes without its message of that iteration */
    uint64_t used_from; /* choco: the first mix that used the copy as it is now
                           (0, or the mix after a RESYNC or a restore): the
                           catch-up credit counts no round before it */
} s_stale;

struct gossip_node {
    gossip_config     cfg;
    gossip_compressor comp;
    const nn_arena   *layout;
    const topo       *t;
    int               rank, n;
    uint32_t          fp;
    uint8_t           blk_type;
    /* neighbours: union over the schedule; one record per rank */
    gossip_peer *peer;                /* n (gossip_peer.h) */
    int     nin, *in_ranks;
    int     nout_union, *out_union;
    int     ndest, *dest;             /* destinations of the prepared message */
    s_slot *slots;                    /* nin * GOSSIP_SLOTS */
    s_stale *stale;                   /* nin */
    /* state */
    double  psi;
    double  psi_mean;                 /* staleness: moving average of psi after
                                         each mix (gossip_node_step_scale) */
    float  *xhat_self;                /* d, choco */
    float **xhat_in;                  /* nin x d, choco */
    float  *ebuf;                     /* d, deepsqueeze */
    float  *sent;                     /* d, dgc: 1 where the last message
                                         carried a value (momentum mask) */
    float  *work;                     /* d scratch */
    double *acc;                      /* d scratch: mixing sums in double so
                                         that float weights (1/3, 1/5) do not
                                         bias the total mass */
    nn_rng  rng;
    uint64_t iter;
    uint64_t sync_from;               /* staleness 0 from this mix on */
    int      prepared;
    /* buffers */
    gossip_compressed comp_out;
    gossip_payload    self_pl, scratch_pl;
    gossip_buf        out, resync;
    gossip_deflater   zbuf;           /* +deflate state */
    gossip_stats      stats;
    uint64_t          cur_sent;       /* bytes sent for the current iteration */
};

/* The record of in-neighbour index k. */
static gossip_peer *s_in(const gossip_node *g, int k)
{
    return &g->peer[g->in_ranks[k]];
}

static const double *s_w(const gossip_node *g, uint64_t iter)
{
    /* Same as topo_weights(); read directly so that this file does not
     * depend on more of topology/ than the struct. */
    return g->t->sched[iter % (uint64_t)g->t->nsched].w;
}

/* Does this node need (and accept) a message from in-neighbour j for iter? */
static int s_needs(const gossip_node *g, int j, uint64_t iter)
{
    if (j < 0 || j >= g->n || j == g->rank || g->peer[j].in_pos < 0)
        return 0;
    if (g->cfg.algo == GOSSIP_CHOCO)
        return 1;
    return s_w(g, iter)[(size_t)g->rank * g->n + j] > 0.0;
}

/* zlib level of +deflate: 6 (zlib's default); see docs/gossip.md. */
#define S_DEFLATE_LEVEL 6

/* The compressor of iteration iter (the dgc warm-up density of its epoch). */
static void s_comp_at(const gossip_node *g, uint64_t iter, gossip_compressor *cur)
{
    uint64_t ipe = g->cfg.iters_per_epoch;
    gossip_compressor_at_epoch(cur, &g->comp, ipe ? iter / ipe : 0);
}

static void s_scale(float *v, size_t d, float a)
{
    for (size_t k = 0; k < d; k++)
        v[k] = a * v[k];
}

/* sent = 1 at every coordinate p carries, 0 elsewhere. */
static void s_mark_sent(const gossip_payload *p, const nn_arena *layout, float *sent)
{
    memset(sent, 0, layout->numel * sizeof *sent);
    for (size_t b = 0; b < p->nblocks; b++) {
        const gossip_block *blk = &p->blocks[b];
        float *s = sent + layout->views[b].offset;
        for (size_t i = 0; i < blk->k; i++)
            s[blk->idx ? blk->idx[i] : i] = 1.0f;
    }
}

void gossip_config_default(gossip_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->algo = GOSSIP_DPSGD;
    strcpy(cfg->compressor, "identity");
    cfg->eta = 1.0;
    cfg->push_sum = 1;
    cfg->seed = 1;
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

gossip_node *gossip_node_new(const gossip_config *cfg, const nn_arena *layout, const topo *t,
                             int rank, char *err, size_t errlen)
{
    gossip_compressor comp;
    if (gossip_compressor_parse(&comp, cfg->compressor, err, errlen) < 0)
        return NULL;
    if (cfg->algo != GOSSIP_DPSGD && cfg->algo != GOSSIP_CHOCO && cfg->algo != GOSSIP_DEEPSQUEEZE) {
        nn_errf(err, errlen, "gossip: unknown algorithm %d", (int)cfg->algo);
        return NULL;
    }
    if (cfg->algo == GOSSIP_DPSGD && comp.sparse != GOSSIP_SPARSE_NONE) {
        nn_errf(err, errlen, "gossip: dpsgd sends the whole model; sparsifier '%s' needs choco or deepsqueeze", comp.spec);
        return NULL;
    }
    if (comp.rdecay < 1.0 && cfg->algo != GOSSIP_DEEPSQUEEZE) {
        nn_errf(err, errlen, "gossip: compressor %s: rdecay decays the unsent residual, which only deepsqueeze "
                "keeps apart from the model (e = rdecay*(v - c)); in %s the residual x+ - xhat_i is part of the "
                "model and cannot decay without changing it", comp.spec, gossip_algo_name(cfg->algo));
        return NULL;
    }
    if (comp.sparse == GOSSIP_SPARSE_DGC && cfg->algo != GOSSIP_CHOCO) {
        nn_errf(err, errlen, "gossip: compressor %s needs choco: DGC's momentum correction is error feedback on "
                "the accumulated local updates (choco's x+ - xhat_i); %s compresses the model itself, so "
                "masking the momentum of the largest weights would be wrong (use topk:F[,rdecay=B])",
                comp.spec, gossip_algo_name(cfg->algo));
        return NULL;
    }
    if (comp.warmup > 0 && cfg->iters_per_epoch == 0) {
        nn_errf(err, errlen, "gossip: compressor %s: the density warm-up counts epochs, but the iterations per "
                "epoch are not known (gossip_config.iters_per_epoch = 0)", comp.spec);
        return NULL;
    }
    if (cfg->algo != GOSSIP_DPSGD && !(isfinite(cfg->eta) && cfg->eta > 0.0 && cfg->eta <= 1.0)) {
        nn_errf(err, errlen, "gossip: consensus step eta = %g must be in (0, 1]", cfg->eta);
        return NULL;
    }
    if (cfg->staleness < 0 || cfg->staleness > GOSSIP_STALE_MAX) {
        nn_errf(err, errlen, "gossip: staleness %d outside 0..%d (GOSSIP_STALE_MAX: a receiver keeps "
                "GOSSIP_WINDOW + GOSSIP_STALE_MAX = %d messages per in-neighbour)", cfg->staleness,
                GOSSIP_STALE_MAX, GOSSIP_SLOTS);
        return NULL;
    }
    if (cfg->staleness > 0 && cfg->algo != GOSSIP_CHOCO && !cfg->push_sum) {
        nn_errf(err, errlen, "gossip: staleness %d with %s needs push-sum: a round that mixes no message "
                "of some in-neighbour has no stochastic row without psi (drop --no-push-sum, or use "
                "--staleness 0)", cfg->staleness, gossip_algo_name(cfg->algo));
        return NULL;
    }
    if (!layout || layout->nviews == 0 || layout->numel == 0 || layout->numel > UINT32_MAX) {
        nn_errf(err, errlen, "gossip: parameter layout must have 1..2^32-1 values in at least one tensor");
        return NULL;
    }
    if (s_check_topo(t, rank, cfg->push_sum, err, errlen) < 0)
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
    gossip_buf_free(&g->resync);
    if (g->xhat_in)
        for (int k = 0; k < g->nin; k++)
            free(g->xhat_in[k]);
    free(g->xhat_in);
    free(g->xhat_self);
    free(g->ebuf);
    free(g->sent);
    free(g->work);
    free(g->acc);
    free(g->in_ranks);
    free(g->peer);
    free(g->out_union);
    free(g->dest);
    gossip_compressed_free(&g->comp_out);
    gossip_payload_free(&g->self_pl);
    gossip_payload_free(&g->scratch_pl);
    gossip_buf_free(&g->out);
    gossip_deflater_free(&g->zbuf);
    free(g);
    *self_p = NULL;
}

int gossip_node_prepare(gossip_node *g, const float *x, uint64_t iter, char *err, size_t errlen)
{
    double t0 = nn_now();
    if (iter != g->iter || g->prepared)
        return nn_errf(err, errlen, "gossip: prepare(%llu) out of order (node %d is at iteration %llu, %s)",
                       (unsigned long long)iter, g->rank, (unsigned long long)g->iter,
                       g->prepared ? "already prepared" : "not prepared");
    size_t d = g->layout->numel;
    const float *v = x;
    if (g->cfg.algo == GOSSIP_CHOCO) {
        for (size_t k = 0; k < d; k++)
            g->work[k] = x[k] - g->xhat_self[k];
        v = g->work;
    } else if (g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        for (size_t k = 0; k < d; k++)
            g->work[k] = x[k] + g->ebuf[k];
        v = g->work;
    }
    gossip_compressor cur;
    s_comp_at(g, iter, &cur);
    if (gossip_compress(&cur, g->layout, v, &g->rng, &g->comp_out, err, errlen) < 0)
        return -1;
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_GOSSIP,
                        (uint16_t)(g->cfg.push_sum ? GOSSIP_FLAG_PUSH_SUM : 0),
                        (uint32_t)g->rank, iter, g->cfg.push_sum ? g->psi : 1.0, g->fp, 0, 0 };
    size_t plain_len = gossip_msg_encode(&h, g->comp_out.blocks, g->comp_out.nblocks, &g->out);
    if (g->comp.deflate)
        gossip_msg_deflate(&g->out, &g->zbuf, S_DEFLATE_LEVEL);
    /* Decode our own bytes: the values we apply are exactly what receivers
     * decode (bit-identical public copies). */
    char derr[256];
    if (gossip_msg_decode(g->out.data, g->out.len, g->layout, NULL, &g->self_pl, derr, sizeof derr) < 0)
        return nn_errf(err, errlen, "gossip: own message does not decode: %s", derr);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        gossip_payload_add(&g->self_pl, g->layout, g->xhat_self);
    } else if (g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        memcpy(g->ebuf, g->work, d * sizeof(float));
        gossip_payload_sub(&g->self_pl, g->layout, g->ebuf);
        if (g->comp.rdecay < 1.0) /* eSGD residual momentum: e = B*(v - c) */
            s_scale(g->ebuf, d, (float)g->comp.rdecay);
    }
    if (g->sent)
        s_mark_sent(&g->self_pl, g->layout, g->sent);
    g->ndest = 0;
    if (g->cfg.algo == GOSSIP_CHOCO) {
        for (int a = 0; a < g->nout_union; a++)
            if (!g->peer[g->out_union[a]].out_down)
                g->dest[g->ndest++] = g->out_union[a];
    } else {
        const double *w = s_w(g, iter);
        for (int j = 0; j < g->n; j++)
            if (j != g->rank && !g->peer[j].out_down && w[(size_t)j * g->n + g->rank] > 0.0)
                g->dest[g->ndest++] = j;
    }
    g->cur_sent = (uint64_t)g->out.len * (uint64_t)g->ndest;
    g->stats.bytes_sent += g->cur_sent;
    g->stats.bytes_sent_plain += (uint64_t)plain_len * (uint64_t)g->ndest;
    g->stats.msgs_sent += (uint64_t)g->ndest;
    g->prepared = 1;
    g->stats.prepare_s = nn_now() - t0;
    return 0;
}

int gossip_node_ndest(const gossip_node *g)
{
    return g->prepared ? g->ndest : 0;
}

size_t gossip_node_outbox(const gossip_node *g, int k, int *to_rank, const uint8_t **msg)
{
    if (!g->prepared || k < 0 || k >= g->ndest)
        return 0;
    if (to_rank)
        *to_rank = g->dest[k];
    if (msg)
        *msg = g->out.data;
    return g->out.len;
}

/* ---- membership helpers ------------------------------------------------ */

static s_slot *s_slot_of(gossip_node *g, int k, uint64_t iter)
{
    return &g->slots[(size_t)k * GOSSIP_SLOTS + iter % GOSSIP_SLOTS];
}

static int s_present(const gossip_node *g, int k, uint64_t iter)
{
    const s_slot *slot = &g->slots[(size_t)k * GOSSIP_SLOTS + iter % GOSSIP_SLOTS];
    return slot->have && slot->iter == iter;
}

static void s_clear_slots(gossip_node *g, int k)
{
    for (int w = 0; w < GOSSIP_SLOTS; w++)
        g->slots[(size_t)k * GOSSIP_SLOTS + w].have = 0;
}

/* Why in-neighbour index k takes no part in mixing iteration `iter`. */
enum {
    S_PRESENT = 0,
    S_ABSENT_DOWN, /* declared down, not (re-)admitted yet, or (choco) its copy
                      is unknown after a restart: as if dead */
    S_ABSENT_LOST  /* dpsgd/deepsqueeze: its message for iter is proved lost (a
                      later message or a PING on the same FIFO connection came
                      without it): a one-off */
};

static int s_absent(const gossip_node *g, int k, uint64_t iter)
{
    const gossip_peer *p = s_in(g, k);
    if (p->in_down || iter < p->in_from)
        return S_ABSENT_DOWN;
    if (g->cfg.algo == GOSSIP_CHOCO)
        return p->copy_bad ? S_ABSENT_DOWN : S_PRESENT;
    return !s_present(g, k, iter) && iter < p->sent_thru ? S_ABSENT_LOST : S_PRESENT;
}

/* Choco: an update of in-neighbour k that the copy still needs is proved
 * lost (its iteration lies below sent_thru, but it is neither applied nor
 * stored).  The peer is alive (it sent something later), so its RESYNC is
 * one round trip away: the copy waits for it (copy_gap). */
static void s_check_gap(gossip_node *g, int k)
{
    gossip_peer *p = s_in(g, k);
    if (g->cfg.algo != GOSSIP_CHOCO || p->copy_bad || p->copy_gap || p->in_down)
        return;
    uint64_t end = p->sent_thru;
    if (end > g->iter + GOSSIP_WINDOW)
        end = g->iter + GOSSIP_WINDOW;
    for (uint64_t m = p->copy_thru; m < end; m++)
        if ((m < g->iter && !g->cfg.staleness) || !s_present(g, k, m)) {
            p->copy_gap = 1;
            s_clear_slots(g, k);
            return;
        }
}

/* Self weight of iteration iter after membership changes (row i of W_t in
 * w).  With push-sum the sender keeps the column shares of its out-neighbours
 * that are down (mass stays with the living); without push-sum the receiver
 * keeps the row weights of in-neighbours absent at iter (row stochastic). */
static double s_self_weight(const gossip_node *g, uint64_t iter)
{
    const double *w = s_w(g, iter);
    int n = g->n, i = g->rank;
    double wii = w[(size_t)i * n + i], live_in = 0.0, down_in = 0.0, lost_in = 0.0;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        double wij = w[(size_t)i * n + j];
        if (!s_needs(g, j, iter) || wij <= 0.0)
            continue;
        switch (s_absent(g, k, iter)) {
        case S_PRESENT: live_in += wij; break;
        case S_ABSENT_DOWN: down_in += wij; break;
        default: /* bounded staleness accounts lost messages one by one */
            if (g->cfg.staleness)
                live_in += wij;
            else
                lost_in += wij;
            break;
        }
    }
    /* A lost message: the sender counted it as delivered, so the receiver
     * keeps that weight itself (the mass barely moves: psi_i ~ psi_j). */
    wii += lost_in;
    if (!g->cfg.push_sum)
        return wii + down_in;
    double live_out = 0.0, down_out = 0.0;
    for (int o = 0; o < n; o++)
        if (o != i && w[(size_t)o * n + i] > 0.0) {
            if (g->peer[o].out_down)
                down_out += w[(size_t)o * n + i];
            else
                live_out += w[(size_t)o * n + i];
        }
    /* Where the living stay strongly connected, keeping the shares of down
     * out-neighbours keeps sum x and sum psi.  Where a failure cut a directed
     * graph into a path, the two ends are special: the node that hears from
     * nobody (in-neighbours all down) keeps its row, or it would give its
     * mass away every iteration and fade to psi = 0; the node that can send
     * to nobody (out-neighbours all down) does not keep their shares, or it
     * would collect all mass downstream and its psi would grow without
     * bound.  Both ends then mix like a row-stochastic matrix: psi stays
     * put and everybody follows the node at the head of the path. */
    if (live_out > 0.0)
        wii += down_out;
    if (live_in + lost_in == 0.0)
        wii += down_in;
    return wii;
}

/* Push-sum safety net.  The gradient step moves z = x/psi by lr*g/psi, so
 * a psi far from 1 means a wrong step size; only mass draining out of, or
 * piling up in, a part of the graph cut off by failures gets it there. */
#define S_PSI_MIN 1e-4
#define S_PSI_MAX 1e4

/* Folds psi into x: x /= psi, psi = 1 (z = x/psi kept); counted.  Returns
 * the factor 1/psi. */
static double s_psi_fold(gossip_node *g, float *x)
{
    size_t d = g->layout->numel;
    double inv = 1.0 / g->psi;
    for (size_t k = 0; k < d; k++)
        x[k] = (float)((double)x[k] * inv);
    g->psi = 1.0;
    g->stats.psi_resets++;
    return inv;
}

static void s_psi_floor(gossip_node *g, float *x)
{
    if (!g->cfg.push_sum || (g->psi >= S_PSI_MIN && g->psi <= S_PSI_MAX))
        return;
    g->psi_mean *= s_psi_fold(g, x);
}

/* Push-sum with every in-neighbour down: no mass comes in any more, so psi
 * only keeps what the rounds before left it (with bounded staleness each
 * round while the neighbours fell silent, and before they were declared
 * down, kept only W_ii of it: 0.35 -> 0.05 in six rounds of complete4),
 * and the local step on z = x/psi is lr/psi, or lr/psi_mean with the step
 * scale: up to 20x the schedule, which diverged in the SGP freeze drill.  A
 * node that is alone trains alone: z is kept, psi = 1 (and its mean), so
 * its step is the schedule's, as in `train`.  Neighbours that come back
 * mix with that psi, as after s_psi_floor. */
static void s_psi_alone(gossip_node *g, float *x)
{
    if (!g->cfg.push_sum || g->psi == 1.0)
        return;
    for (int k = 0; k < g->nin; k++)
        if (!s_in(g, k)->in_down)
            return;
    s_psi_fold(g, x);
    g->psi_mean = 1.0;
}

/* ---- receiving ------------------------------------------------------------ */

/* RESYNC (choco): the sender's whole public copy xhat_j, holding its updates
 * of every iteration below h->iter, and its psi.  Replaces our copy and
 * re-admits the sender. */
static int s_receive_resync(gossip_node *g, const gossip_header *h, int k, char *err,
                            size_t errlen)
{
    gossip_peer *p = s_in(g, k);
    unsigned s = h->sender;
    if (g->cfg.algo != GOSSIP_CHOCO)
        return nn_errf(err, errlen, "gossip: node %d: RESYNC from rank %u, but %s keeps no public copies",
                       g->rank, s, gossip_algo_name(g->cfg.algo));
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++)
        if (g->scratch_pl.blocks[b].type != GOSSIP_BLK_DENSE_F32)
            return nn_errf(err, errlen, "gossip: node %d: RESYNC from rank %u: tensor '%s' is block type %u, not dense f32",
                           g->rank, s, g->layout->views[b].name, g->scratch_pl.blocks[b].type);
    if (!p->copy_bad && !p->copy_gap && !p->in_down && h->iter < p->copy_thru)
        return nn_errf(err, errlen, "gossip: node %d: stale RESYNC from rank %u for iteration %llu (our copy is at %llu)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)p->copy_thru);
    const nn_arena *L = g->layout;
    float *copy = g->xhat_in[k];
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++)
        memcpy(copy + L->views[b].offset, g->scratch_pl.blocks[b].val, L->views[b].numel * sizeof(float));
    p->copy_thru = h->iter;
    g->stale[k].used_from = g->iter; /* no mix before this one used the copy */
    p->copy_bad = 0;
    p->copy_gap = 0;
    p->in_down = 0;
    p->in_from = 0;
    p->psi_last = h->psi;
    if (p->sent_thru < h->iter)
        p->sent_thru = h->iter;
    s_clear_slots(g, k); /* what they held is inside the copy (FIFO) */
    g->stats.resyncs_recv++;
    return GOSSIP_RECV_OK;
}

int gossip_node_receive(gossip_node *g, const uint8_t *msg, size_t len, char *err, size_t errlen)
{
    gossip_header h;
    char derr[384];
    if (gossip_msg_decode(msg, len, g->layout, &h, &g->scratch_pl, derr, sizeof derr) < 0)
        return nn_errf(err, errlen, "gossip: node %d: rejected message (%zu bytes): %s", g->rank, len, derr);
    unsigned s = h.sender;
    if (h.kind != GOSSIP_MSG_GOSSIP && h.kind != GOSSIP_MSG_RESYNC)
        return nn_errf(err, errlen, "gossip: node %d: kind %u message from rank %u is for the transport, not the algorithm",
                       g->rank, h.kind, s);
    if (s >= (unsigned)g->n || s == (unsigned)g->rank || g->peer[s].in_pos < 0)
        return nn_errf(err, errlen, "gossip: node %d: rank %u is not an in-neighbour", g->rank, s);
    if (!(h.flags & GOSSIP_FLAG_PUSH_SUM) != !g->cfg.push_sum)
        return nn_errf(err, errlen, "gossip: node %d: rank %u has push-sum %s, we have it %s",
                       g->rank, s, (h.flags & GOSSIP_FLAG_PUSH_SUM) ? "on" : "off", g->cfg.push_sum ? "on" : "off");
    int k = g->peer[s].in_pos;
    gossip_peer *p = s_in(g, k);
    if (h.kind == GOSSIP_MSG_RESYNC)
        return s_receive_resync(g, &h, k, err, errlen);
    if (h.iter >= g->iter && h.iter - g->iter >= GOSSIP_WINDOW)
        return nn_errf(err, errlen, "gossip: node %d: message from rank %u for iteration %llu is too far ahead (now at %llu, window %d)",
                       g->rank, s, (unsigned long long)h.iter, (unsigned long long)g->iter, GOSSIP_WINDOW);
    if (!s_needs(g, (int)s, h.iter))
        return nn_errf(err, errlen, "gossip: node %d: rank %u is not an in-neighbour at iteration %llu",
                       g->rank, s, (unsigned long long)h.iter);
    gossip_compressor cur;
    s_comp_at(g, h.iter, &cur);
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++) {
        const gossip_block *blk = &g->scratch_pl.blocks[b];
        size_t lo, hi;
        gossip_compressor_k_range(&cur, blk->numel, &lo, &hi);
        if (blk->type != g->blk_type || blk->k < lo || blk->k > hi)
            return nn_errf(err, errlen, "gossip: node %d: rank %u sent block type %u with %zu values for tensor '%s'; compressor %s gives type %u with %zu..%zu at iteration %llu",
                           g->rank, s, blk->type, blk->k, g->layout->views[b].name, g->comp.spec, g->blk_type,
                           lo, hi, (unsigned long long)h.iter);
    }
    int choco = g->cfg.algo == GOSSIP_CHOCO;
    /* a down peer, or a choco copy awaiting its RESYNC: nothing to use yet */
    if (p->in_down && (choco || h.iter < g->iter))
        return GOSSIP_RECV_IGNORED;
    if (choco && (p->copy_bad || p->copy_gap))
        return GOSSIP_RECV_IGNORED; /* the coming RESYNC holds it */
    s_stale *st = &g->stale[k];
    uint64_t S = (uint64_t)g->cfg.staleness;
    /* bounded staleness: a late message not yet mixed waits for the next mix */
    int late_ok = S > 0 && h.iter + S >= g->iter && h.iter >= (choco ? p->copy_thru : st->acc_thru);
    if (h.iter < g->iter && !late_ok) {
        /* Only choco catches up a copy this way (after a RESYNC from the
         * past): the next update in order is applied to the copy alone. */
        if (!choco || h.iter < p->copy_thru)
            return nn_errf(err, errlen, "gossip: node %d: stale or replayed message from rank %u for iteration %llu (now at %llu)",
                           g->rank, s, (unsigned long long)h.iter, (unsigned long long)g->iter);
        if (p->sent_thru < h.iter + 1)
            p->sent_thru = h.iter + 1;
        if (h.iter > p->copy_thru) {
            s_check_gap(g, k);
            return GOSSIP_RECV_IGNORED;
        }
        gossip_payload_add(&g->scratch_pl, g->layout, g->xhat_in[k]);
        p->copy_thru = h.iter + 1;
        p->psi_last = h.psi;
        g->stats.bytes_recv += len;
        g->stats.msgs_recv++;
        return GOSSIP_RECV_OK;
    }
    s_slot *slot = s_slot_of(g, k, h.iter);
    if (slot->have) {
        if (slot->iter == h.iter)
            return nn_errf(err, errlen, "gossip: node %d: duplicate message from rank %u for iteration %llu",
                           g->rank, s, (unsigned long long)h.iter);
        return nn_errf(err, errlen, "gossip: node %d: no room for the message from rank %u for iteration %llu "
                       "(iteration %llu not mixed yet)", g->rank, s, (unsigned long long)h.iter,
                       (unsigned long long)slot->iter);
    }
    if (p->in_down) { /* dpsgd / deepsqueeze: back from now on */
        p->in_down = 0;
        p->in_from = h.iter;
        if (st->acc_thru < h.iter)
            st->acc_thru = h.iter;
    }
    if (st->newest < h.iter + 1)
        st->newest = h.iter + 1;
    gossip_payload_copy(&slot->pl, &g->scratch_pl);
    slot->len = len;
    slot->iter = h.iter;
    slot->psi = h.psi;
    slot->have = 1;
    if (p->sent_thru < h.iter + 1)
        p->sent_thru = h.iter + 1;
    g->stats.bytes_recv += len;
    g->stats.msgs_recv++;
    s_check_gap(g, k);
    return GOSSIP_RECV_OK;
}

/* ---- bounded staleness ------------------------------------------------------
 * The rules are at the top of gossip_node.h and, as formulas, in
 * docs/gossip.md "Bounded staleness". */

/* W_r[i][j] of iteration r. */
static double s_wij(const gossip_node *g, uint64_t r, int j)
{
    return s_w(g, r)[(size_t)g->rank * g->n + j];
}

/* 1 + the last iteration of in-neighbour k that mixing iter could account
 * (dpsgd/deepsqueeze: mixed, lost, or not addressed to us; choco: applied to
 * the copy in order), starting from what is accounted already. */
static uint64_t s_stale_thru(const gossip_node *g, int k, uint64_t iter)
{
    const gossip_peer *p = s_in(g, k);
    int j = g->in_ranks[k];
    if (g->cfg.algo == GOSSIP_CHOCO) {
        uint64_t c = p->copy_thru;
        while (c <= iter && s_present(g, k, c))
            c++;
        return c;
    }
    uint64_t c = g->stale[k].acc_thru > p->in_from ? g->stale[k].acc_thru : p->in_from;
    while (c <= iter && (s_wij(g, c, j) <= 0.0 || s_present(g, k, c) || c < p->sent_thru))
        c++;
    return c;
}

static int s_ready_stale(const gossip_node *g, uint64_t iter)
{
    uint64_t S = iter >= g->sync_from ? 0 : (uint64_t)g->cfg.staleness;
    for (int k = 0; k < g->nin; k++) {
        if (s_absent(g, k, iter) == S_ABSENT_DOWN)
            continue;
        if (g->cfg.algo == GOSSIP_CHOCO && s_in(g, k)->copy_gap)
            return 0;
        if (s_stale_thru(g, k, iter) + S <= iter)
            return 0;
    }
    return 1;
}

int gossip_node_fresh_from(const gossip_node *g, int rank, uint64_t iter)
{
    if (!g->cfg.staleness || iter >= g->sync_from || rank < 0 || rank >= g->n ||
        g->peer[rank].in_pos < 0)
        return 1;
    int k = g->peer[rank].in_pos;
    if (s_absent(g, k, iter) == S_ABSENT_DOWN)
        return 1;
    return s_stale_thru(g, k, iter) != iter; /* level and missing only iter: 0 */
}

int gossip_node_ready(const gossip_node *g, uint64_t iter)
{
    if (iter < g->iter || iter - g->iter >= GOSSIP_WINDOW)
        return 0;
    if (g->cfg.staleness)
        return s_ready_stale(g, iter);
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        if (!s_needs(g, j, iter) || s_absent(g, k, iter))
            continue;
        if (g->cfg.algo == GOSSIP_CHOCO) {
            if (s_in(g, k)->copy_gap)
                return 0;
            if (s_in(g, k)->copy_thru > iter || (s_in(g, k)->copy_thru == iter && s_present(g, k, iter)))
                continue;
            return 0;
        }
        if (!s_present(g, k, iter))
            return 0;
    }
    return 1;
}

/* The stored (decoded) message of in-neighbour index k for iter; frees
 * the slot (its payload stays valid until the slot is filled again). */
static const gossip_payload *s_slot_take(gossip_node *g, int k, uint64_t iter, double *psi,
                                         size_t *len)
{
    s_slot *slot = s_slot_of(g, k, iter);
    assert(slot->have && slot->iter == iter);
    *psi = slot->psi;
    *len = slot->len;
    slot->have = 0;
    return &slot->pl;
}

/* Records the staleness of in-neighbour k at the mix of iter (thru: 1 + its
 * newest iteration mixed or accounted). */
static void s_stale_note(gossip_node *g, int k, uint64_t iter, uint64_t thru)
{
    g->stale[k].lag = thru > iter ? 0 : iter + 1 - thru;
    g->stale[k].unfresh += thru <= iter;
}

/* dpsgd / deepsqueeze with bounded staleness: every message (j, s) not yet
 * mixed with s <= iter is mixed now with W_s[i][j]; a message proved lost
 * gives its weight W_s[i][j] to the node itself (as in the synchronous
 * rule).  acc, psi_acc hold the self term on entry. */
static void s_mix_stale_ps(gossip_node *g, uint64_t iter, double *acc, double *psi_acc,
                           int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        gossip_peer *p = s_in(g, k);
        if (s_absent(g, k, iter) == S_ABSENT_DOWN) {
            *absent += s_wij(g, iter, j) > 0.0;
            continue;
        }
        uint64_t c = g->stale[k].acc_thru > p->in_from ? g->stale[k].acc_thru : p->in_from;
        for (; c <= iter; c++) {
            double wc = s_wij(g, c, j);
            if (wc <= 0.0)
                continue;
            if (s_present(g, k, c)) {
                double psi_j;
                size_t len;
                const gossip_payload *pl = s_slot_take(g, k, c, &psi_j, &len);
                gossip_payload_axpy(pl, L, wc, acc);
                *psi_acc += wc * psi_j;
                p->psi_last = psi_j;
                *recv += len;
            } else if (c < p->sent_thru) { /* lost: the node keeps that weight */
                gossip_payload_axpy(&g->self_pl, L, wc, acc);
                *psi_acc += wc * g->psi;
            } else {
                break; /* in flight: mixed when it arrives */
            }
        }
        g->stale[k].acc_thru = c;
        s_stale_note(g, k, iter, c);
    }
}

/* Choco with bounded staleness: the stored updates q_j(s), s <= iter, are
 * applied to the copy in order; one applied late (s < iter) also gets the
 * catch-up credit eta * (sum_{r=s}^{iter-1} W_r[i][j]) * q_j(s) (and
 * likewise the psi step), for the rounds that mixed the copy without it:
 * sum x and sum psi are then conserved exactly.  Mixing uses the current
 * copies. */
static void s_mix_stale_choco(gossip_node *g, uint64_t iter, double *acc, double *psi_acc,
                              int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        gossip_peer *p = s_in(g, k);
        double wt = s_wij(g, iter, j);
        if (s_absent(g, k, iter)) {
            *absent += wt > 0.0;
            continue;
        }
        uint64_t c = p->copy_thru;
        for (; c <= iter && s_present(g, k, c); c++) {
            double psi_j;
            size_t len;
            const gossip_payload *pl = s_slot_take(g, k, c, &psi_j, &len);
            gossip_payload_add(pl, L, g->xhat_in[k]);
            double cw = 0.0; /* the rounds that mixed the copy without q_j(c) */
            for (uint64_t r = c > g->stale[k].used_from ? c : g->stale[k].used_from; r < iter; r++)
                cw += s_wij(g, r, j);
            if (cw > 0.0) {
                gossip_payload_axpy(pl, L, cw, acc);
                *psi_acc += cw * (psi_j - p->psi_last);
            }
            p->psi_last = psi_j;
            *recv += len;
        }
        p->copy_thru = c;
        s_stale_note(g, k, iter, c);
        if (wt > 0.0) {
            const float *xh = g->xhat_in[k];
            for (size_t e = 0; e < d; e++)
                acc[e] += wt * xh[e];
            *psi_acc += wt * p->psi_last;
        }
    }
}

/* The mix of iteration iter with bounded staleness (S > 0). */
static void s_mix_stale(gossip_node *g, float *x, uint64_t iter, int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    double wii = s_self_weight(g, iter), eta = g->cfg.eta, psi_acc = wii * g->psi;
    double *acc = g->acc;
    int dpsgd = g->cfg.algo == GOSSIP_DPSGD;
    memset(acc, 0, d * sizeof *acc);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        const float *xs = g->xhat_self;
        for (size_t k = 0; k < d; k++)
            acc[k] = (wii - 1.0) * xs[k];
        s_mix_stale_choco(g, iter, acc, &psi_acc, absent, recv);
    } else {
        gossip_payload_axpy(&g->self_pl, L, dpsgd ? wii : wii - 1.0, acc);
        s_mix_stale_ps(g, iter, acc, &psi_acc, absent, recv);
    }
    if (dpsgd) {
        for (size_t k = 0; k < d; k++)
            x[k] = (float)acc[k];
        g->psi = psi_acc; /* push-sum is on (gossip_node_new) */
        return;
    }
    for (size_t k = 0; k < d; k++)
        x[k] = (float)(x[k] + eta * acc[k]);
    if (g->cfg.push_sum)
        g->psi += eta * (psi_acc - g->psi);
}

int gossip_node_mix(gossip_node *g, float *x, uint64_t iter, char *err, size_t errlen)
{
    double t0 = nn_now();
    if (iter != g->iter || !g->prepared)
        return nn_errf(err, errlen, "gossip: mix(%llu) out of order (node %d is at iteration %llu, %s)",
                       (unsigned long long)iter, g->rank, (unsigned long long)g->iter,
                       g->prepared ? "prepared" : "not prepared");
    if (!gossip_node_ready(g, iter))
        return nn_errf(err, errlen, "gossip: mix(%llu) on node %d before every in-neighbour's message arrived",
                       (unsigned long long)iter, g->rank);
    const double *w = s_w(g, iter) + (size_t)g->rank * g->n; /* row i */
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    double wii = s_self_weight(g, iter), eta = g->cfg.eta;
    double psi_acc = wii * g->psi;
    double *acc = g->acc;
    uint64_t recv = 0;
    int absent = 0;

    if (g->cfg.staleness) {
        s_mix_stale(g, x, iter, &absent, &recv);
    } else if (g->cfg.algo == GOSSIP_DPSGD || g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        /* dpsgd:       x = sum_j W[i][j] c_j                 (c dense)
         * deepsqueeze: x = x+ + eta * (sum_j W[i][j] c_j - c_i), j incl. i */
        int ds = g->cfg.algo == GOSSIP_DEEPSQUEEZE;
        if (ds) {
            memset(acc, 0, d * sizeof *acc);
            gossip_payload_axpy(&g->self_pl, L, wii - 1.0, acc);
        } else {
            const float *ci = g->self_pl.val;
            for (size_t k = 0; k < d; k++)
                acc[k] = wii * ci[k];
        }
        for (int k = 0; k < g->nin; k++) {
            int j = g->in_ranks[k];
            if (!s_needs(g, j, iter))
                continue;
            if (s_absent(g, k, iter)) {
                absent++;
                if (s_present(g, k, iter))
                    s_slot_of(g, k, iter)->have = 0;
                continue;
            }
            double psi_j;
            size_t len;
            const gossip_payload *p = s_slot_take(g, k, iter, &psi_j, &len);
            gossip_payload_axpy(p, L, w[j], acc);
            psi_acc += w[j] * psi_j;
            s_in(g, k)->psi_last = psi_j;
            recv += len;
        }
        if (ds) {
            for (size_t k = 0; k < d; k++)
                x[k] = (float)(x[k] + eta * acc[k]);
            if (g->cfg.push_sum)
                g->psi += eta * (psi_acc - g->psi);
        } else {
            for (size_t k = 0; k < d; k++)
                x[k] = (float)acc[k];
            if (g->cfg.push_sum)
                g->psi = psi_acc;
        }
    } else {
        /* xhat_j += q_j for every holder; then
         * x = x+ + eta * (sum_j W[i][j] xhat_j - xhat_i), j incl. i */
        const float *xs = g->xhat_self;
        for (size_t k = 0; k < d; k++)
            acc[k] = (wii - 1.0) * xs[k];
        for (int k = 0; k < g->nin; k++) {
            int j = g->in_ranks[k];
            if (s_absent(g, k, iter)) {
                absent += w[j] > 0.0;
                if (s_present(g, k, iter))
                    s_slot_of(g, k, iter)->have = 0;
                continue;
            }
            double psi_j = s_in(g, k)->psi_last;
            if (s_present(g, k, iter)) {
                size_t len;
                const gossip_payload *p = s_slot_take(g, k, iter, &psi_j, &len);
                if (s_in(g, k)->copy_thru == iter) { /* else a RESYNC already holds it */
                    gossip_payload_add(p, L, g->xhat_in[k]);
                    s_in(g, k)->copy_thru = iter + 1;
                }
                s_in(g, k)->psi_last = psi_j;
                recv += len;
            }
            if (w[j] > 0.0) {
                const float *xh = g->xhat_in[k];
                double wij = w[j];
                for (size_t e = 0; e < d; e++)
                    acc[e] += wij * xh[e];
                psi_acc += wij * psi_j;
            }
        }
        for (size_t k = 0; k < d; k++)
            x[k] = (float)(x[k] + eta * acc[k]);
        if (g->cfg.push_sum)
            g->psi += eta * (psi_acc - g->psi);
    }
    s_psi_floor(g, x);
    s_psi_alone(g, x);
    if (g->cfg.staleness) /* averages over ~4(S+1) mixes (gossip_node_step_scale) */
        g->psi_mean += (g->psi - g->psi_mean) / (4.0 * (g->cfg.staleness + 1));
    g->stats.iter_bytes_sent = g->cur_sent;
    g->stats.iter_bytes_recv = recv;
    g->stats.iter_absent = (uint64_t)absent;
    g->prepared = 0;
    g->iter++;
    g->stats.mix_s = nn_now() - t0;
    return 0;
}

double gossip_node_psi(const gossip_node *g)
{
    return g->psi;
}

double gossip_node_step_scale(const gossip_node *g)
{
    if (!g->cfg.staleness || !g->cfg.push_sum || g->psi == g->psi_mean)
        return 1.0;
    return g->psi / g->psi_mean;
}

void gossip_node_debias(const gossip_node *g, const float *x, float *z)
{
    size_t d = g->layout->numel;
    if (g->psi == 1.0) {
        if (z != x)
            memcpy(z, x, d * sizeof *z);
        return;
    }
    double psi = g->psi;
    for (size_t k = 0; k < d; k++)
        z[k] = (float)((double)x[k] / psi);
}

uint64_t gossip_node_iter(const gossip_node *g)
{
    return g->iter;
}

uint64_t gossip_node_sent_thru(const gossip_node *g)
{
    return g->iter + (uint64_t)g->prepared;
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
    uint64_t ahead = 0;
    for (int k = 0; k < g->nin; k++) {
        if (s_absent(g, k, g->iter) == S_ABSENT_DOWN)
            continue;
        uint64_t nw = g->stale[k].newest; /* 1 + its newest iteration */
        if (nw > g->iter + 1 && nw - 1 - g->iter > ahead)
            ahead = nw - 1 - g->iter;
    }
    return ahead;
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
    g->iter = s->iter;
    g->psi = s->psi;
    g->psi_mean = s->psi;
    g->rng = s->rng;
    g->prepared = 0;
    return 0;
}

/* ---- membership (see the header) ----------------------------------------- */

void gossip_node_peer_down(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || rank == g->rank)
        return;
    if (g->peer[rank].in_pos >= 0) {
        int k = g->peer[rank].in_pos;
        s_in(g, k)->in_down = 1;
        s_clear_slots(g, k);
    }
    g->peer[rank].out_down = 1;
}

void gossip_node_peer_up(gossip_node *g, int rank)
{
    if (rank >= 0 && rank < g->n)
        g->peer[rank].out_down = 0;
}

void gossip_node_peer_reset(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return;
    int k = g->peer[rank].in_pos;
    gossip_peer *p = s_in(g, k);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        p->copy_bad = 1;
        p->copy_gap = 0;
    }
    p->sent_thru = 0;
    s_clear_slots(g, k);
}

void gossip_node_peer_sent(gossip_node *g, int rank, uint64_t sent_thru)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return;
    int k = g->peer[rank].in_pos;
    gossip_peer *p = s_in(g, k);
    if (p->sent_thru < sent_thru)
        p->sent_thru = sent_thru;
    s_check_gap(g, k);
}

gossip_peer *gossip_node_peers(gossip_node *g)
{
    return g->peer;
}

int gossip_node_peer_state(const gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || rank == g->rank)
        return 0;
    int st = g->peer[rank].out_down ? GOSSIP_PEER_OUT_DOWN : 0;
    const gossip_peer *p = &g->peer[rank];
    if (p->in_pos >= 0) {
        if (p->in_down)
            st |= GOSSIP_PEER_IN_DOWN;
        if (g->cfg.algo == GOSSIP_CHOCO && (p->in_down || p->copy_bad || p->copy_gap))
            st |= GOSSIP_PEER_WANTS_RESYNC;
    }
    return st;
}

size_t gossip_node_resync_msg(gossip_node *g, const uint8_t **msg)
{
    if (g->cfg.algo != GOSSIP_CHOCO)
        return 0;
    const nn_arena *L = g->layout;
    gossip_cblock *blocks = nn_xcalloc(L->nviews, sizeof *blocks);
    for (size_t v = 0; v < L->nviews; v++)
        blocks[v] = (gossip_cblock){ GOSSIP_BLK_DENSE_F32, (uint32_t)L->views[v].numel,
                                     (uint32_t)L->views[v].numel, NULL,
                                     g->xhat_self + L->views[v].offset, NULL, NULL };
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_RESYNC,
                        (uint16_t)(g->cfg.push_sum ? GOSSIP_FLAG_PUSH_SUM : 0), (uint32_t)g->rank,
                        g->iter + (uint64_t)g->prepared, g->cfg.push_sum ? g->psi : 1.0, g->fp, 0, 0 };
    gossip_msg_encode(&h, blocks, L->nviews, &g->resync);
    free(blocks);
    g->stats.resyncs_sent++;
    *msg = g->resync.data;
    return g->resync.len;
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
    if (g->xhat_self)
        memcpy(g->xhat_self, z, d * sizeof *z);
    if (g->ebuf)
        memset(g->ebuf, 0, d * sizeof *g->ebuf);
    if (g->sent)
        memset(g->sent, 0, d * sizeof *g->sent);
    if (g->cfg.algo == GOSSIP_CHOCO)
        for (int k = 0; k < g->nin; k++)
            s_in(g, k)->copy_bad = 1; /* void until its RESYNC */
    return 0;
}

/* ---- momentum-factor masking --------------------------------------------- */

int gossip_node_masks_momentum(const gossip_node *g)
{
    return g->sent != NULL;
}

size_t gossip_node_mask_sent(const gossip_node *g, float *buf)
{
    if (!g->sent)
        return 0;
    size_t m = 0, d = g->layout->numel;
    for (size_t k = 0; k < d; k++)
        if (g->sent[k] != 0.0f) {
            buf[k] = 0.0f;
            m++;
        }
    return m;
}
