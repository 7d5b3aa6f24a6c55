/* gossip_node_int — the private state of gossip_node, shared by its files.
 *
 * Owns:    nothing; declares struct gossip_node and the small helpers
 *          that read it (in-neighbour records, matrix rows, message slots,
 *          why a neighbour is absent from a mix).
 * Exposes: the struct and static inline helpers below, to gossip_node*.c
 *          only (never include it elsewhere).
 * Callers: gossip_node.c (life cycle, accessors), gossip_node_send.c (the
 *          outgoing message), gossip_node_inbox.c (receipt, the stash of
 *          in-neighbours' messages and copies, readiness, membership),
 *          gossip_node_mix.c (the mixing step), gossip_node_state.c
 *          (checkpoint state, rejoin).
 *
 * Dimension legend: d = layout->numel (parameters), n nodes, nin union
 * in-neighbours of this node.
 */
#ifndef GOSSIP_NODE_INT_H
#define GOSSIP_NODE_INT_H

#include "gossip/gossip_node.h"

/* A message of an in-neighbour between receipt and mix: decoded (and
 * validated) once on receipt, kept as a compact payload. */
typedef struct {
    uint64_t       iter;
    int            have;
    double         psi;
    size_t         len;    /* its size on the wire (byte counters) */
    gossip_payload pl;     /* grow-only */
} s_slot;

/* Bounded staleness, per in-neighbour (by in-position, like the slots;
 * private to gossip_node, unlike the peer table that node/ reads). */
typedef struct {
    uint64_t acc_thru; /* dpsgd/deepsqueeze: its messages below this are mixed
                          or accounted as lost (choco: copy_thru) */
    uint64_t newest;   /* 1 + the newest iteration received from it */
    uint64_t lag;      /* staleness used at the last mix */
    uint64_t unfresh;  /* mixes without its message of that iteration */
    uint64_t used_from; /* choco: the first mix that used the copy as it is now
                           (0, or the mix after a RESYNC or a restore): the
                           catch-up credit counts no round before it */
    uint64_t kept_thru; /* dpsgd: its messages below this that never came
                           were kept by it (GOSSIP_FLAG_KEPT): nothing mixed */
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
    uint8_t  *keep_now;               /* n: the prepared message to this rank is
                                         not out: its share is kept at the mix */
    uint64_t *kept_from;              /* n: our first kept message to this rank
                                         not yet announced, or UINT64_MAX */
    s_slot *slots;                    /* nin * GOSSIP_SLOTS */
    s_stale *stale;                   /* nin */
    /* state */
    double  psi;
    double  psi_mean;                 /* staleness: moving average of psi after
                                         each mix (gossip_node_step_scale) */
    float  *owed;                     /* d or NULL: what earlier local steps
                                         owe x (gossip_node_step.c) */
    double  owed_w;                   /* ... in steps' weight */
    float  *xhat_self;                /* d, choco */
    float **xhat_in;                  /* nin x d, choco */
    float **xhat_to;                  /* n or NULL, choco: the copy of an
                                         out-edge of its own, NULL where it
                                         shares xhat_self (gossip_node_edge.c) */
    gossip_buf *out_to;               /* n: the message of such an edge */
    uint8_t *defer_to;                /* n: its next message has no update */
    uint8_t *upd_to;                  /* n: its prepared message has one */
    unsigned *skip_to;                /* n: updates it skipped in a row */
    int      nedges;                  /* edges of their own */
    int      nedges_out;              /* ... among this iteration's dest */
    uint64_t edge_bytes, edge_plain;  /* ... their messages' bytes */
    float  *ebuf;                     /* d, deepsqueeze */
    float  *sent;                     /* d, dgc: 1 where the last message
                                         carried a value (momentum mask) */
    float  *work;                     /* d scratch */
    double *acc;                      /* d scratch: mixing sums in double so
                                         that float weights (1/3, 1/5) do not
                                         bias the total mass */
    double *fold_acc;                 /* d, push-sum with staleness: messages
                                         folded in as they came (W_c c_j);
                                         choco: a late neighbour's catch-up
                                         credits (gossip_node_absorb); added
                                         by the next mix; NULL: none yet */
    int      catch_up;                /* the next mix is a catch-up mix
                                         (gossip_node_catch_up) */
    double   fold_psi;                /* their psi shares */
    uint64_t fold_recv;               /* their bytes */
    nn_rng  rng;
    uint64_t iter;
    uint64_t sync_from;               /* staleness 0 from this mix on */
    int      prepared;
    int      defer;                   /* the next prepare sends no update
                                         (gossip_node_defer_update) */
    int      deferred_last;           /* the last prepared message was deferred */
    uint32_t step_us;                 /* our step time, in our headers */
    /* buffers */
    gossip_compressed comp_out;
    gossip_payload    self_pl, scratch_pl;
    gossip_buf        out, resync;
    gossip_buf        out_kept;       /* out with GOSSIP_FLAG_KEPT set */
    gossip_deflater   zbuf;           /* +deflate state */
    gossip_stats      stats;
    uint64_t          cur_sent;       /* bytes sent for the current iteration */
};

/* gossip_node_send.c: the blocks of a deferred update (every view sparse,
 * no value) into g->comp_out; g->comp_out encoded as this iteration's
 * GOSSIP with flags into out (deflated with +deflate), its plain length. */
void   gossip_node_empty_blocks(gossip_node *g);
size_t gossip_node_encode(gossip_node *g, uint16_t flags, uint64_t iter, gossip_buf *out);
/* gossip_node_edge.c (choco's edge copies): the messages of this
 * iteration's own edges; a destination that shares xhat_i; the terms
 * sum_j W_ji (xhat_i - xhat_ij) of the mix into acc; edge j shares xhat_i
 * again (a RESYNC to j); every edge does (join, restore); free. */
int  gossip_node_edge_prepare(gossip_node *g, const float *x, uint64_t iter, char *err,
                              size_t errlen);
int  gossip_node_edge_shared_dest(const gossip_node *g);
void gossip_node_edge_terms(const gossip_node *g, uint64_t iter, double *acc);
void gossip_node_edge_share(gossip_node *g, int j);
void gossip_node_edge_clear(gossip_node *g);
void gossip_node_edge_free(gossip_node *g);

/* The record of in-neighbour index k. */
static inline gossip_peer *s_in(const gossip_node *g, int k)
{
    return &g->peer[g->in_ranks[k]];
}

static inline const double *s_w(const gossip_node *g, uint64_t iter)
{
    /* Same as topo_weights(); read directly so that gossip_node does not
     * depend on more of topology/ than the struct. */
    return g->t->sched[iter % (uint64_t)g->t->nsched].w;
}

/* Does this node need (and accept) a message from in-neighbour j for iter? */
static inline int s_needs(const gossip_node *g, int j, uint64_t iter)
{
    if (j < 0 || j >= g->n || j == g->rank || g->peer[j].in_pos < 0)
        return 0;
    if (g->cfg.algo == GOSSIP_CHOCO)
        return 1;
    return s_w(g, iter)[(size_t)g->rank * g->n + j] > 0.0;
}

/* The compressor of iteration iter (the dgc warm-up density of its epoch). */
static inline void s_comp_at(const gossip_node *g, uint64_t iter, gossip_compressor *cur)
{
    uint64_t ipe = g->cfg.iters_per_epoch;
    gossip_compressor_at_epoch(cur, &g->comp, ipe ? iter / ipe : 0);
}

static inline s_slot *s_slot_of(gossip_node *g, int k, uint64_t iter)
{
    return &g->slots[(size_t)k * GOSSIP_SLOTS + iter % GOSSIP_SLOTS];
}

static inline int s_present(const gossip_node *g, int k, uint64_t iter)
{
    const s_slot *slot = &g->slots[(size_t)k * GOSSIP_SLOTS + iter % GOSSIP_SLOTS];
    return slot->have && slot->iter == iter;
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

static inline int s_absent(const gossip_node *g, int k, uint64_t iter)
{
    const gossip_peer *p = s_in(g, k);
    if (p->in_down || iter < p->in_from)
        return S_ABSENT_DOWN;
    if (g->cfg.algo == GOSSIP_CHOCO)
        return p->copy_bad ? S_ABSENT_DOWN : S_PRESENT;
    return !s_present(g, k, iter) && iter < p->sent_thru ? S_ABSENT_LOST : S_PRESENT;
}

/* gossip_node_mix.c: push-sum with bounded staleness: in-neighbour index
 * k's messages held in its order (from the first not yet mixed, past kept
 * shares) go into fold_acc now, mixed by the next mix whatever their
 * iteration, freeing their slots: mass never waits in a slow receiver's
 * slots, nor for a late sender's backlog to fit them. */
void gossip_node_fold(gossip_node *g, int k);

/* gossip_node_mix.c: choco with bounded staleness: the updates of late
 * in-neighbour index k held in order from its copy's next one, for
 * iterations already mixed without them, applied to the copy now, their
 * catch-up credit into fold_acc (s_mix_stale_choco's rule, the same sums):
 * a late neighbour's backlog never fills its slots, so how far behind it
 * may be mixed is bounded by stability only (gossip_node_late_reach). */
void gossip_node_absorb(gossip_node *g, int k);

/* gossip_node_inbox.c: how many iterations behind a late in-neighbour may
 * be mixed (its copy's or its messages' delay) before it is waited for. */
uint64_t gossip_node_late_reach(const gossip_node *g);

/* gossip_node_step.c: what is owed to x, dropped (the model was replaced). */
void gossip_node_owed_clear(gossip_node *g);

/* W_r[i][j] of iteration r. */
static inline double s_wij(const gossip_node *g, uint64_t r, int j)
{
    return s_w(g, r)[(size_t)g->rank * g->n + j];
}

#endif
