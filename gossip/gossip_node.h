/* gossip_node — one node's gossip algorithm as a pure state machine over
 * byte messages (docs/design.md §3).  No sockets, no threads, no clocks beyond
 * timing counters: the in-process simulator (gossip_sim.h) and the ZeroMQ
 * node drive the very same object.
 *
 * Owns:    the algorithm state of node `rank`: push-sum weight psi, the own
 *          public copy xhat_i and one xhat_j per in-neighbour (Choco), the
 *          error buffer e_i (DeepSqueeze), the compressor and its RNG, the
 *          dgc momentum mask, the outgoing message (deflated with
 *          +deflate), received messages for the current iteration and
 *          a few iterations ahead (decoded and validated once, on receipt,
 *          and kept as compact payloads until mixed), byte counters.
 * Exposes: the functions below.
 * Callers: gossip_sim (in-process), gossip_link (over ZeroMQ), node/ (the
 *          run loop: de-biasing, momentum masking; checkpoints).
 *
 * Per iteration t, the caller does
 *     x = x+ (local SGD step on the de-biased z = x/psi, its business)
 *     gossip_node_prepare(g, x, t)        compress, encode the message
 *     for k: gossip_node_outbox(g, k, &to, &msg)  send msg to rank `to`
 *     gossip_node_receive(g, bytes, len)  for every message that arrives
 *         (or gossip_node_receive_decoded, when the header is decoded)
 *     until gossip_node_ready(g, t)
 *     gossip_node_mix(g, x, t)            x and psi updated; t -> t+1
 * and must not modify x between prepare and mix.
 *
 * Algorithms (W = the matrix of iteration t, w[i*n+j], j over in-neighbours
 * and i itself; q/c below are always the DEQUANTIZED values decoded from the
 * encoded message, the owner's included, so every copy is bit-identical):
 *   dpsgd  (SGP with push-sum): c_i = C(x+) (C must be dense: identity, q8,
 *          qsgd); x = sum_j W[i][j] c_j; psi = sum_j W[i][j] psi_j.  eta unused.
 *   choco  q_i = C(x+ - xhat_i); xhat_i += q_i; every holder of xhat_i does the
 *          same; x = x+ + eta*(sum_j W[i][j] xhat_j - xhat_i);
 *          psi = psi + eta*(sum_j W[i][j] psi_j - psi).  xhat starts at 0 (as
 *          the reference code), so the first messages carry C(x0).
 *   deepsqueeze  v_i = x+ + e_i; c_i = C(v_i); e_i = v_i - c_i (with
 *          topk:F,rdecay=B: e_i = B*(v_i - c_i), in float);
 *          x = x+ + eta*(sum_j W[i][j] c_j - c_i); psi as in choco.
 * Without push-sum, psi stays 1 and the topology must be doubly stochastic.
 *
 * Messages: one message per iteration, the same bytes for every destination.
 * It carries the sender's own psi; the receiver multiplies by its W[i][j].
 * Destinations: the out-neighbours of W_t for dpsgd/deepsqueeze; for choco
 * the out-neighbours of the UNION of all matrices of a time-varying
 * schedule (every holder of xhat_i must see every q_i, or the copies drift
 * apart; the mixing still uses W_t only).  On a fixed graph both coincide.
 * Byte counters count message bytes exactly as sent, deflated or not (one
 * count per destination); transport framing is not included.  With dgc the
 * compressor of iteration t has the warm-up density of epoch
 * t / iters_per_epoch, on the sender and on every receiver.
 *
 * Membership (failure tolerance; the transport layer, gossip_link, decides
 * who is down):
 *   - gossip_node_peer_down(rank): the peer takes no part in mixing from now
 *     on and gets no more messages.  Mass: with push-sum the node keeps for
 *     itself the column shares W[o][i] of its down out-neighbours o (the
 *     living keep sum_i psi_i and sum_i x_i); without push-sum it keeps the
 *     row weights W[i][j] of absent in-neighbours j (rows stay stochastic,
 *     so the living still agree; exact averaging then needs a symmetric W).
 *     Where a failure cuts a directed graph into a path, its ends behave
 *     differently: a push-sum node that hears from no in-neighbour (the
 *     successor of a dead node on a directed ring) keeps its row as well,
 *     and one whose out-neighbours are all down keeps no shares, so psi
 *     neither fades nor piles up and everybody follows the head of the
 *     path.  Should psi still leave [1e-4, 1e4] (the step on z is lr/psi),
 *     the node rescales x and psi to psi = 1, keeping z (stats.psi_resets);
 *     with staleness, whose step is scaled (gossip_node_step_scale), the
 *     lower bound is 1e-24 (a psi near 0 is then a normal state: its
 *     in-neighbours kept their shares for it; rescaling would create mass).
 *   - An in-neighbour comes back by itself when it delivers usable state:
 *     choco a RESYNC (its whole public copy xhat_j and psi, holding its
 *     updates of all iterations below the RESYNC's), dpsgd/deepsqueeze a
 *     message for the current iteration or later.  An out-neighbour comes
 *     back with gossip_node_peer_up (the caller first sends it
 *     gossip_node_resync_msg for choco).
 *   - Lost messages: a message (or PING, gossip_node_peer_sent) that the
 *     peer sent later on the same FIFO connection proves an earlier one
 *     lost.  dpsgd/deepsqueeze then mix that iteration without it, the
 *     receiver keeping that row weight itself (the sender counted the mass
 *     as delivered).  That stand-in is short of the lost mass (psi_i after
 *     a mix without it is below psi_j), so with push-sum and S > 0 a message
 *     the transport does not take is kept instead (gossip_node_keep: exact;
 *     docs/gossip.md "Kept shares").
 *     Choco waits for the peer's RESYNC (GOSSIP_PEER_WANTS_RESYNC: the caller
 *     sends a RESYNC_REQ); the peer is alive, so it is one round trip away.
 *     A copy that is unknown (gossip_node_peer_reset: the peer restarted)
 *     makes the peer absent instead, until its RESYNC.
 *   - Choco copies follow the owner's updates in iteration order: a copy
 *     re-synced from the past catches up with the owner's messages of
 *     iterations this node already mixed (they update the copy only).
 * Without failures none of this changes a single bit of the algorithm.
 *
 * Bounded staleness (cfg.staleness = S > 0; docs/gossip.md "Bounded
 * staleness"): iteration t is ready when every live in-neighbour's messages
 * are accounted through t-S at least; each message of iteration s is mixed
 * exactly once, at the first mix t >= s after it arrived, with the weight
 * W_s[i][j] of ITS iteration (dpsgd/deepsqueeze, push-sum), or applied in
 * order to the copy xhat_j with the catch-up credit
 * eta * (sum_{r=s}^{t-1} W_r[i][j]) * q_j(s) (choco), so sum x and sum psi
 * are conserved exactly, counting what is in flight.  S = 0 runs the
 * synchronous code above, bit for bit.
 */
#ifndef GOSSIP_NODE_H
#define GOSSIP_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_compress.h"
#include "gossip/gossip_peer.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

typedef enum { GOSSIP_DPSGD = 0, GOSSIP_CHOCO, GOSSIP_DEEPSQUEEZE } gossip_algo;

/* Iterations a message may run ahead of the receiver (t .. t+WINDOW-1). */
#define GOSSIP_WINDOW 4
/* Largest --staleness S (bounded staleness, docs/gossip.md): a receiver at
 * t holds messages of t-S .. t+WINDOW-1, so GOSSIP_SLOTS per in-neighbour. */
#define GOSSIP_STALE_MAX 4
#define GOSSIP_SLOTS (GOSSIP_WINDOW + GOSSIP_STALE_MAX)
/* Most iterations a late choco neighbour's copy may be behind the mix
 * (fewer where eta makes that unstable: gossip_node_late_reach). */
#define GOSSIP_LATE_MAX 31

typedef struct {
    gossip_algo algo;
    char        compressor[64]; /* spec, gossip_compress.h */
    double      eta;            /* consensus step (choco, deepsqueeze) */
    int         push_sum;       /* 1: psi weights and de-biasing */
    uint64_t    seed;           /* randk/dgc/qsgd; node rank is mixed in */
    uint64_t    iters_per_epoch; /* dgc warm-up: epoch = iter / this; 0 =
                                    unknown (a warm-up is then refused) */
    int         staleness;      /* S: mix iteration t once every live
                                   in-neighbour's messages are accounted
                                   through t-S (0: synchronous, today's
                                   protocol; 0..GOSSIP_STALE_MAX; S > 0
                                   needs push-sum with dpsgd/deepsqueeze) */
} gossip_config;

typedef struct {
    uint64_t bytes_sent, bytes_recv;           /* totals */
    uint64_t bytes_sent_plain;                 /* bytes_sent had no message
                                                  been deflated (+deflate) */
    uint64_t msgs_sent, msgs_recv;
    uint64_t iter_bytes_sent, iter_bytes_recv; /* of the last finished iteration */
    uint64_t iter_absent;                      /* in-neighbours left out of the last mix */
    uint64_t resyncs_sent, resyncs_recv;       /* RESYNC messages encoded / applied */
    uint64_t psi_resets;                       /* push-sum safety net (see membership) */
    uint64_t shares_kept;                      /* messages not sent whose share this
                                                  node kept (gossip_node_keep) */
    uint64_t kept_recv;                        /* in-neighbours' iterations mixed as
                                                  kept by their sender (no stand-in) */
    uint64_t late_marks;                       /* times an in-neighbour far behind was
                                                  marked late (gossip_node_peer_late) */
    uint64_t steps_owed, steps_repaid;         /* local steps that owed part of their
                                                  weight, that repaid some
                                                  (gossip_node_step_apply) */
    uint64_t edges_own, edge_deferred;         /* choco: out-edges given a copy of
                                                  their own, their messages sent
                                                  without an update */
    double   prepare_s, mix_s;                 /* last iteration, wall clock */
} gossip_stats;

typedef struct gossip_node gossip_node;

/* Defaults (values in gossip_defaults.h): dpsgd, identity, eta 1, push-sum
 * on, seed 1, staleness 0, iters_per_epoch 0. */
void gossip_config_default(gossip_config *cfg);
/* "dpsgd" (or "sgp"), "choco", "deepsqueeze". -1 with message otherwise. */
int gossip_algo_parse(const char *name, gossip_algo *out, char *err, size_t errlen);
const char *gossip_algo_name(gossip_algo a);

/* New node `rank` of topology t for parameters laid out as `layout`
 * (only the views are used; t and layout are borrowed and must outlive the
 * node).  Checks the config and the topology (column stochastic, positive
 * self weights; doubly stochastic without push-sum) and that the
 * compressor's options fit the algorithm: rdecay only with deepsqueeze (the
 * only algorithm whose residual e lives outside the model), dgc only with
 * choco (its momentum correction is choco's error feedback on x+ - xhat_i),
 * a dgc warm-up only with iters_per_epoch set.  NULL with a message on
 * error. */
gossip_node *gossip_node_new(const gossip_config *cfg, const nn_arena *layout, const topo *t,
                             int rank, char *err, size_t errlen);
void gossip_node_destroy(gossip_node **self_p);

/* x: x+ (layout->numel floats), iter: must be the node's current iteration
 * (starts at 0, advanced by mix).  Compresses, encodes the outgoing message,
 * updates xhat_i / e_i.  -1 with message if x holds NaN/Inf or iter is
 * wrong; state is then unchanged. */
int gossip_node_prepare(gossip_node *g, const float *x, uint64_t iter, char *err, size_t errlen);

/* k-th destination of the prepared message: writes its rank to *to_rank and
 * the message to *msg (borrowed, valid until the next prepare) and returns
 * its length; returns 0 when k >= the number of destinations.  The
 * message carries GOSSIP_FLAG_KEPT where this node kept shares of earlier
 * messages to that destination (gossip_node_keep). */
size_t gossip_node_outbox(gossip_node *g, int k, int *to_rank, const uint8_t **msg);
/* Number of destinations of the prepared message. */
int gossip_node_ndest(const gossip_node *g);

/* Validates a GOSSIP or RESYNC message fully (codec, sender is an
 * in-neighbour for that iteration, iteration within the window, no
 * duplicate or replay, block types and counts match this run's compressor,
 * push-sum flag) and stores or applies it.  Returns GOSSIP_RECV_OK, or
 * GOSSIP_RECV_IGNORED for a valid message that is of no use (from a down
 * peer, or one whose choco copy awaits a RESYNC: see gossip_node_peer_state);
 * -1 with a message naming the peer when it is refused (nothing changed).
 * Decodes the header, then gossip_node_admit and, when that says OK,
 * gossip_node_receive_decoded. */
int gossip_node_receive(gossip_node *g, const uint8_t *msg, size_t len, char *err, size_t errlen);

/* What gossip_node_receive_decoded made of a message: OK and IGNORED as
 * above, or why it was refused (gossip_recv_refused: with a message). */
typedef enum {
    GOSSIP_RECV_OK = 0,
    GOSSIP_RECV_IGNORED = 1,
    GOSSIP_RECV_MALFORMED,     /* the payload does not decode against the layout */
    GOSSIP_RECV_NONFINITE,     /* a value or scale is NaN or Inf */
    GOSSIP_RECV_NOT_ALGO,      /* a control kind, for the transport */
    GOSSIP_RECV_NOT_NEIGHBOUR, /* the sender is not an in-neighbour (then) */
    GOSSIP_RECV_MISMATCH,      /* push-sum flag, block types or counts, RESYNC
                                  without public copies: another configuration */
    GOSSIP_RECV_TOO_FAR,       /* GOSSIP_WINDOW or more iterations ahead */
    GOSSIP_RECV_STALE,         /* behind, and of no use: late or stale */
    GOSSIP_RECV_DUPLICATE,     /* replayed: the sender delivered this
                                  iteration or a later one already */
    GOSSIP_RECV_NO_ROOM,       /* its slot holds an iteration not mixed yet */
} gossip_recv_code;
#define gossip_recv_refused(c) ((c) >= GOSSIP_RECV_MALFORMED)

/* Admission of a GOSSIP message by its decoded header, before its payload
 * is decoded; the only check of replay and window, on every path.  Per
 * sender, got (gossip_peer.h) is 1 + the last iteration it delivered,
 * that a transport holds for later, or that came late: its connection is
 * FIFO, so an iteration below got is a replay (DUPLICATE).  Then the
 * window (gossip_node_window): LATE is refused as STALE and counted
 * as delivered (a transport drops it quietly); AHEAD is refused as
 * TOO_FAR (a transport may keep it, gossip_node_hold, and hand it to
 * gossip_node_receive_decoded once the window says IN).  OK: hand it on
 * now.  Other kinds: OK (a RESYNC replaces the copy, its own rule). */
gossip_recv_code gossip_node_admit(gossip_node *g, const gossip_header *h, char *err,
                                   size_t errlen);
/* A transport keeps the admitted, early GOSSIP of iteration iter from rank
 * for later: later ones only from it from now on. */
void gossip_node_hold(gossip_node *g, int rank, uint64_t iter);

/* The rest of gossip_node_receive for a message whose header the caller
 * (a transport dispatching on it) decoded, without a layout, into *h from
 * msg[0..len), and admitted (gossip_node_admit): the payload is decoded
 * here, once, and checked as above (finiteness, sender, shapes, the slot);
 * unless refused, the sender's got moves past it.  Returns the code; a
 * refusal's message is in err. */
gossip_recv_code gossip_node_receive_decoded(gossip_node *g, const gossip_header *h,
                                             const uint8_t *msg, size_t len, char *err,
                                             size_t errlen);

/* Where a message of `sender` (a rank; -1: any) for iteration iter stands
 * against this node's window now (the rule gossip_node_admit applies, and
 * by which a transport releases what it held): AHEAD, GOSSIP_WINDOW or
 * more iterations ahead, or (a late sender's, gossip_node_peer_late) its
 * slot still holding an older message not mixed yet (refused: a transport
 * keeps it until the window moves); LATE, behind by more than the
 * staleness bound and of no use to any mix (never with choco: a late
 * update still catches a copy up; never a late sender's not mixed yet);
 * else IN. */
typedef enum { GOSSIP_WIN_IN = 0, GOSSIP_WIN_LATE, GOSSIP_WIN_AHEAD } gossip_window_pos;
gossip_window_pos gossip_node_window(const gossip_node *g, int sender, uint64_t iter);

/* Bounded staleness: 0 when in-neighbour `rank` is live, at most `behind`
 * iterations behind this node (everything of it below iter - behind
 * accounted; 0: level) and its message of iter has not arrived; 1
 * otherwise (and always with S = 0).  The link waits a grace for such
 * fresh messages before mixing stale ones (gossip_link "fresh_wait"). */
int gossip_node_fresh_from(const gossip_node *g, int rank, uint64_t iter, uint64_t behind);
/* Bounded staleness: in-neighbour `rank`, far behind (its messages through
 * iter - S missing), is mixed late instead of waited for: readiness leaves
 * it out, and its messages are taken whatever their age and mixed at the
 * next mix, each with the weight of its own iteration (push-sum), or
 * applied to the copy in order with the catch-up credit (choco), so sum x
 * and sum psi stay exact.  It is waited for again once a message within S
 * of this node's iteration arrives.  No effect with S = 0, on a rank that
 * is not an in-neighbour, or on one that is down, nor with choco or
 * deepsqueeze at an eta above 1/GOSSIP_SLOTS (a delayed copy is stable only
 * for eta <= 1/(delay + 1)).  Returns 1 when it was not late before, or
 * was waited for again (gossip_node_peer_wait_again). */
int gossip_node_peer_late(gossip_node *g, int rank);
/* Bounded staleness: in-neighbour `rank`, marked late, is waited for
 * again: readiness waits for its messages through iter - S as for any
 * neighbour, while the older ones it still sends are taken as a late
 * neighbour's (whatever their age: nothing is refused, push-sum mass
 * stays exact) until one within S ends the mark.  gossip_node_peer_late
 * marks it plainly late again (the link, when it held a round up).  The
 * link does this for a neighbour over a directed edge that is as fast as
 * this node: nothing else ends such a mark (it cannot see that it is
 * behind, and this node no longer waits for it).  Returns 1 when it was
 * late and not waited for. */
int gossip_node_peer_wait_again(gossip_node *g, int rank);

/* 1 when every message needed to mix iteration iter has arrived. */
int gossip_node_ready(const gossip_node *g, uint64_t iter);

/* Why iteration iter may not mix yet (NONE: it may), and the first
 * in-neighbour that holds it up in *rank (-1 for NONE and WINDOW; rank
 * may be NULL).  The transport sorts its wait by it. */
typedef enum {
    GOSSIP_UNREADY_NONE,    /* ready */
    GOSSIP_UNREADY_WINDOW,  /* iter is not this node's next iterations */
    GOSSIP_UNREADY_MISSING, /* nothing of the neighbour's needed iterations arrived */
    GOSSIP_UNREADY_HELD,    /* a needed message arrived, but the transport holds
                               it (gossip_node_hold) until it fits */
    GOSSIP_UNREADY_GAP,     /* choco: the copy missed an update (RESYNC asked) */
    GOSSIP_UNREADY_FINAL,   /* bounded staleness: a synchronous mix at the run's end */
} gossip_unready;
gossip_unready gossip_node_unready(const gossip_node *g, uint64_t iter, int *rank);

/* Mixing step of iteration iter (== current, after prepare, ready):
 * overwrites x (same x as given to prepare) and psi, then advances the
 * iteration.  -1 with message when called out of order or not ready. */
int gossip_node_mix(gossip_node *g, float *x, uint64_t iter, char *err, size_t errlen);

double   gossip_node_psi(const gossip_node *g);
/* The factor for the learning rate of the next local step: psi over its
 * moving average with bounded staleness and push-sum, 1 otherwise.  The
 * step x -= lr*s*g moves z = x/psi by lr*g/mean(psi) instead of lr*g/psi:
 * late messages make psi swing (several land at once, or none), and
 * without it the step on z swings with 1/psi (docs/gossip.md "Bounded
 * staleness").  The mean counts as at least 3/4 (at most 4/3 of the
 * schedule's step on z). */
double   gossip_node_step_scale(const gossip_node *g);
/* With bounded staleness and push-sum, the local step: x1 is x after the
 * unscaled step (x - lr * update).  x moves by s * (x1 - x), s the scale
 * above.  Where s < 1 the node owes the rest, (1 - s) * (x1 - x), and pays
 * it back with later steps as far as each leaves room (z moving at most
 * twice the schedule's step), so that every node's gradients count in the
 * consensus in full, some later (gossip_node_step.c). */
void     gossip_node_step_apply(gossip_node *g, float *x, const float *x1);
/* What is owed (d values, or NULL when nothing ever was) and, into
 * *weight, how many steps' weight. */
const float *gossip_node_step_owed(const gossip_node *g, double *weight);
/* z = x / psi (z may equal x). */
void     gossip_node_debias(const gossip_node *g, const float *x, float *z);
uint64_t gossip_node_iter(const gossip_node *g);
/* Iterations whose message is out: iter, or iter + 1 once prepared. */
uint64_t gossip_node_sent_thru(const gossip_node *g);
/* The same towards out-neighbour `rank`: what a PING or HELLO_ACK to it may
 * prove sent (below it, a message it lacks is lost).  Stops at the first
 * of our messages to it that we kept and have not announced yet: it must
 * wait for the message that carries GOSSIP_FLAG_KEPT, not take them for
 * lost. */
uint64_t gossip_node_sent_thru_to(const gossip_node *g, int rank);

/* ---- kept shares (push-sum with bounded staleness; docs/gossip.md) -------
 * A prepared message that the transport could not take (its queue to that
 * peer full, not connected) or that it chose not to send (the link to that
 * peer is backed up) is not lost: between prepare and mix, call
 * gossip_node_keep(g, rank, 1) and this node keeps that column share
 * W_t[rank][i] of x and psi at the mix, and its next message to rank goes
 * out with GOSSIP_FLAG_KEPT (gossip_node_outbox sets it), so that rank
 * mixes nothing for those iterations instead of a stand-in: sum x and sum
 * psi are conserved exactly.  gossip_node_keep(g, rank, 0) takes it back
 * (the message went out after all, before the mix).  0, or -1 when this
 * node cannot keep shares (not push-sum dpsgd, staleness 0, not prepared,
 * rank not a destination): the message is then lost as before. */
int gossip_node_keep(gossip_node *g, int rank, int keep);

/* ---- deferred updates (choco with bounded staleness; docs/gossip.md) ----
 * The next message gossip_node_prepare makes carries no update: q_i = 0,
 * so xhat_i stays where it is and what x_i - xhat_i holds goes out in a
 * later, ordinary message (Choco's error feedback); every receiver applies
 * the same nothing, so the copies stay equal and sum x is conserved.  The
 * message is a header and empty blocks (GOSSIP_FLAG_DEFERRED), a few dozen
 * bytes: a backed-up path to a neighbour (a slow link) stops carrying a
 * full update every iteration.  Called between the local step
 * and gossip_node_prepare; 0, or -1 when this node cannot defer (not choco,
 * staleness 0, already prepared, or its last message was deferred: Choco's
 * consensus step eta is stable for a compressor only so much worse than
 * the run's, and every other update is as far as that goes: with top-10%
 * at eta 0.1, 2 updates in 3 deferred made 4 nodes of a complete graph
 * diverge, 1 in 2 did not; tests/test_gossip_stale.c). */
int gossip_node_defer_update(gossip_node *g);
/* ---- edge copies (choco; docs/gossip.md "Edge copies") ------------------
 * Out-neighbour j gets a copy of its own: from now on our messages to j
 * carry C(x_i - xhat_ij) against what j holds of us, not the update of
 * xhat_i the other out-neighbours get, and the consensus step subtracts
 * W_ji xhat_ij for that edge (sum x stays exact).  Called between mixes
 * and gossip_node_prepare; 0, or -1 when j is not an out-neighbour, the
 * node is not choco or is prepared.  The edge shares xhat_i again after a
 * RESYNC to j (gossip_node_resync_msg) or a join or restore. */
int gossip_node_edge_own(gossip_node *g, int j);
int gossip_node_edge_is_own(const gossip_node *g, int j);
/* The next message to own edge j carries no update (GOSSIP_FLAG_DEFERRED):
 * what x_i - xhat_ij holds goes in a later one.  Unlike
 * gossip_node_defer_update the other out-neighbours still get theirs, so
 * an edge may skip many in a row: up to 1 / (4 eta W_ji) - 1 (at least 1;
 * 99 at eta 0.01 and W_ji 1/4), past which the pair's consensus steps on
 * copies that old overshoot.  0, or -1 when j's edge is not its own, has
 * skipped that many, or the node is prepared. */
int gossip_node_edge_defer(gossip_node *g, int j);
/* Whether the prepared message to rank j carries an update (0 when not
 * prepared or deferred). */
int gossip_node_sends_update(const gossip_node *g, int j);
/* The step time the next GOSSIP messages carry (gossip_codec.h): this node's
 * recent local step time in seconds (clamped to the field; <= 0: not
 * known).  Set by the link after each round. */
void gossip_node_set_step(gossip_node *g, double seconds);
const nn_arena      *gossip_node_layout(const gossip_node *g);
const gossip_config *gossip_node_config(const gossip_node *g);
void     gossip_node_stats(const gossip_node *g, gossip_stats *out);
/* The own public copy xhat_i (choco) or NULL; and the copy held for
 * in-neighbour `rank` or NULL: for the bit-identity tests. */
const float *gossip_node_xhat_self(const gossip_node *g);
const float *gossip_node_xhat_of(const gossip_node *g, int rank);
/* ---- membership (see the top of this file) ----------------------------- */

/* rank stops taking part, as in- and as out-neighbour (its stored messages
 * are dropped; push-sum with S > 0 mixes them at its next mixes, with the
 * weights of their iterations: their mass left the sender).  Unknown ranks
 * are ignored. */
void gossip_node_peer_down(gossip_node *g, int rank);
/* Out-neighbour rank gets our messages again from the next prepare. */
void gossip_node_peer_up(gossip_node *g, int rank);
/* In-neighbour rank's copy and stored messages are void (this node
 * re-joined, or the peer restarted): its choco copy is invalid until its
 * RESYNC, its stored messages are dropped. */
void gossip_node_peer_reset(gossip_node *g, int rank);
/* In-neighbour rank restarted (a new instance): as gossip_node_peer_reset,
 * and its sequence starts again (got = 0, gossip_node_admit). */
void gossip_node_peer_restart(gossip_node *g, int rank);
/* In-neighbour rank proved, on the connection that carries its messages,
 * that it has sent every message of iterations below sent_thru. */
void gossip_node_peer_sent(gossip_node *g, int rank, uint64_t sent_thru);
enum {
    GOSSIP_PEER_IN_DOWN      = 1, /* left out of mixing until it comes back */
    GOSSIP_PEER_OUT_DOWN     = 2, /* gets no messages until gossip_node_peer_up */
    GOSSIP_PEER_WANTS_RESYNC = 4, /* choco: we need its RESYNC */
    GOSSIP_PEER_LATE         = 8  /* marked late (gossip_node_peer_late), not caught up */
};
/* GOSSIP_PEER_* flags of rank (0: a live neighbour, or not a neighbour). */
int gossip_node_peer_state(const gossip_node *g, int rank);
/* The table of what the algorithm knows about every rank (n records,
 * gossip_peer.h), owned and written by g; borrowed read-only. */
const gossip_peer *gossip_node_peers(const gossip_node *g);
/* Admission's sequence of rank: 1 + the last GOSSIP iteration it
 * delivered (gossip_node_admit), 0 when none since its (re)start. */
uint64_t gossip_node_peer_got(const gossip_node *g, int rank);
/* Encodes a RESYNC message (choco only; 0 otherwise): our own public copy
 * xhat_i, holding our updates of every iteration below its iteration field
 * (iter, or iter + 1 once prepared), and psi.  *msg is borrowed until the
 * next call.  Send it to out-neighbour `to` before any later GOSSIP: an
 * edge copy of to's own ends here (gossip_node_edge_own), to's copy of us
 * becomes xhat_i. */
size_t gossip_node_resync_msg(gossip_node *g, int to, const uint8_t **msg);
/* Moves a node that is not prepared forward to iteration iter (a rejoin
 * catching up with its neighbours): stored messages of earlier iterations
 * are dropped and choco copies that miss updates are marked bad.  -1 with a
 * message when prepared or iter is behind. */
int gossip_node_set_iter(gossip_node *g, uint64_t iter, char *err, size_t errlen);

/* A node that is not prepared joins a run in progress at iteration iter
 * (>= its own) with model z, which the caller also makes its x: psi = 1;
 * choco: its own public copy xhat_i = z (its out-neighbours get it by
 * RESYNC, so the consensus term starts at 0 instead of pulling everybody
 * towards 0) and its copies of in-neighbours void until their RESYNC;
 * deepsqueeze: e_i = 0; dgc: no momentum mask pending.  -1 with a message
 * (nothing changed) when z holds NaN/Inf, the node is prepared or iter is
 * behind.  docs/gossip.md "Joining". */
int gossip_node_join(gossip_node *g, const float *z, uint64_t iter, char *err, size_t errlen);
/* ---- bounded staleness (see the top of this file) ---------------------- */

/* How far the newest messages held from the live in-neighbours run ahead
 * of this node's current iteration, (its newest iteration received) -
 * iter: with push-sum dpsgd the least of them, 0 when any is not ahead (a
 * node behind only some of its neighbours is not the slow one); choco and
 * deepsqueeze the largest.  The run loop skips local steps while this
 * reaches the catch-up threshold (node_run.c). */
uint64_t gossip_node_ahead(const gossip_node *g);

/* The node skipped its local step to catch up (node_cmd_node.c s_skip):
 * choco with S > 0 makes the next mix's consensus step GOSSIP_CATCHUP_GAIN
 * x eta, so that a node that trains few of its steps still keeps near its
 * neighbours' copies; not while an in-neighbour is late (its stale copy
 * keeps eta within its own stability bound, docs/gossip.md).  Other
 * algorithms: nothing. */
void gossip_node_catch_up(gossip_node *g);
/* On complete4 with node 2 stopped 2/3 of the time, seeds 4-8, 2, 4 and
 * 8 x eta (0.01) raised node 2's own model by 2.2, 2.9 and 2.7 points on
 * the mean and 16 x broke it (31-63%): 4 x keeps a factor 4 from that
 * (results/slow-node.md, "Catch-up gain"). */
#define GOSSIP_CATCHUP_GAIN 4.0
/* The mixes of iteration iter and later wait for every message (staleness
 * 0; they still mix with the stale path's rules): a run's last mix, so that
 * nothing is left in flight at the end (every late message mixed, choco
 * copies equal to their owners'). */
void gossip_node_sync_from(gossip_node *g, uint64_t iter);
/* Per in-neighbour `rank`, for the metrics: *lag = the staleness used at the
 * last mix (t - newest iteration of its mixed or accounted), *unfresh =
 * mixes that went ahead without its message of that iteration.  -1 when
 * rank is not an in-neighbour. */
int gossip_node_peer_lag(const gossip_node *g, int rank, uint64_t *lag, uint64_t *unfresh);

/* Layout fingerprint carried by every message (for HELLO). */
uint32_t gossip_node_fingerprint(const gossip_node *g);

/* ---- checkpoint state (node/node_ckpt.c) -------------------------------
 * The whole algorithm state of a node between two iterations is: the
 * scalars below and nvec vectors of layout->numel floats (dpsgd none;
 * deepsqueeze "e" = e_i; choco "xhat.self" = xhat_i, then "xhat.R" = the
 * copy held for in-neighbour R, R increasing; then, with a compressor that
 * masks momentum (dgc), "sent" = 1 where the last message carried a value,
 * else 0: the mask still to be applied to the next local step).  Messages in flight are not
 * state: a node restored at iteration t needs its neighbours' messages for
 * t again (they re-send them, or resync). */
typedef struct {
    uint64_t iter;  /* next iteration to prepare */
    double   psi;   /* push-sum weight */
    nn_rng   rng;   /* compressor RNG (randk, qsgd) */
} gossip_node_state;

/* Scalars of the state (valid between mix and the next prepare). */
void gossip_node_export(const gossip_node *g, gossip_node_state *s);
/* Number of state vectors (see above). */
int gossip_node_nvec(const gossip_node *g);
/* State vector k (borrowed, read-only, layout->numel floats) and its name
 * (written into name[namelen], e.g. "xhat.3"); NULL when k is out of range. */
const float *gossip_node_vec(const gossip_node *g, int k, char *name, size_t namelen);
/* Restores the state: scalars s and vec[k] (k < nvec, same order and
 * meaning as gossip_node_vec).  Drops every stored message and the prepared
 * one.  -1 with a message (state unchanged) when psi is not a finite
 * positive number or a vector holds NaN/Inf (outside input: a file). */
int gossip_node_import(gossip_node *g, const gossip_node_state *s, const float *const *vec,
                       char *err, size_t errlen);

/* ---- momentum-factor masking (dgc; docs/gossip.md) ---------------------
 * DGC zeroes the local momentum where a message carried values, so that
 * stale momentum does not keep pushing coordinates that were just sent.
 * The training loop calls gossip_node_mask_sent on its momentum buffer
 * before every local step (node_local_step does); the mask is that
 * of the last prepared message and lasts until the next prepare. */

/* 1 when the compressor asks for momentum-factor masking. */
int gossip_node_masks_momentum(const gossip_node *g);
/* buf[k] = 0 (buf: layout->numel floats) at every coordinate the last
 * prepared message carried (sparse: its indices; a q8 code of 0 counts as
 * carried).  Returns how many; 0 and nothing done when the compressor does
 * not mask or no message was prepared since creation. */
size_t gossip_node_mask_sent(const gossip_node *g, float *buf);

#endif
