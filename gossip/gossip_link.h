/* gossip_link — the transport layer: the protocol between one node and its
 * neighbours, a gossip_node driven over a gossip_net (docs/design.md §9),
 * surviving dead, slow and restarted peers and hostile bytes.
 *
 * Owns:    the link object (struct gossip_link, gossip_link_int.h), cut
 *          into one section per module below, and its own record of every
 *          neighbour (gossip_link_peer.h); the algorithm keeps its record
 *          of the same peer (gossip_peer.h), which the link reads only
 *          through gossip_node's calls.
 * Exposes: gossip_link_start (start barrier, or rejoin of a run in
 *          progress), gossip_link_round (one gossip round), gossip_link_pump
 *          (stay responsive during long local work), gossip_link_catch_up,
 *          gossip_link_goodbye, counters.
 * Callers: node/node_cmd_node.c (`lpgossip node`), tests.
 *
 * The layer, one job per module (all gossip/, prefix in brackets):
 *
 *     node/node_cmd_node.c  (the run loop)
 *        | start, round, pump, catch_up, goodbye
 *        v
 *   +-------------------------------------------------------------------+
 *   | gossip_member [gossip_member_]  start barrier, quorum, HELLO,     |
 *   |                                 restarts, BYE and the goodbye     |
 *   | gossip_round  [gossip_round_]   flow control, send, wait, mix     |
 *   | gossip_join   [gossip_join_]    state transfer: join, re-join     |
 *   |        |  all three wait by pumping                               |
 *   |        v                                                          |
 *   | gossip_recv   [gossip_recv_]    pump: receive, header checks,     |
 *   |                                 admission of GOSSIP, stash,       |
 *   |                                 dispatch by kind                  |
 *   |        |  the gate on our ROUTER, then one handler per kind       |
 *   |        v                                                          |
 *   | gossip_proof  [gossip_proof_]   ids on a plaintext port           |
 *   | gossip_live   [gossip_live_]    failure detector, down/back,      |
 *   |                                 PING, RESYNC, the re-join rule    |
 *   | handlers of member and join     HELLO*, BYE*, STATE_REQ, STATE    |
 *   |                                                                   |
 *   | gossip_link   [gossip_link_]    the object, logging, fatal error, |
 *   |                                 control messages (used by all)    |
 *   +-------------------------------------------------------------------+
 *        | gossip_node_* (algorithm)          | gossip_net_* (sockets)
 *        v                                    v
 *     gossip_node (never sees a socket)     gossip_net (ZeroMQ)
 *
 * Each module writes only its own section of the link and its own fields
 * of a gossip_link_peer; what another module needs of it goes through a call
 * declared in gossip_link_int.h.
 *
 * The path of one received GOSSIP message, socket to mix, each module once
 * and in one direction:
 *   gossip_net_recv (frames, sender id, size) -> gossip_recv_pump ->
 *   gossip_recv s_check_header (decode the 44-byte header, once: sender =
 *   the connection's peer, layout, kind valid on its channel) ->
 *   gossip_proof_unproven (over our ROUTER: the id proved) -> gossip_recv
 *   s_gossip -> gossip_node_admit (admission, its one owner: replay
 *   against the sender's sequence, the window; the verdict comes back) ->
 *   gossip_recv follows it (replay: refused; late: dropped; ahead: the
 *   stash, within the flow-control bound, released by gossip_node_window
 *   later; in: on) -> gossip_node_receive_decoded (the decoded header and
 *   the bytes: the payload decoded, once; finiteness, sender, block shapes,
 *   the algorithm's slot; a gossip_recv_code back) -> gossip_live_revive
 *   (its sender heard, unless refused) ... and later gossip_round's wait
 *   sees gossip_node_ready and calls gossip_node_mix.  Control kinds end in
 *   their handler (gossip_live, gossip_member, gossip_join, gossip_proof)
 *   instead of gossip_node; a STATE chunk's header, decoded once in
 *   s_check_header, goes with its bytes to gossip_join and gossip_state.
 *
 * Messages (gossip_codec.h; all but GOSSIP and RESYNC are 44-byte headers):
 *   HELLO      "I start, or restart, at iteration iter".  Sent to
 *              out-neighbours over our DEALERs and, when rejoining, to
 *              in-neighbours over our ROUTER; answered with HELLO_ACK.
 *   HELLO_ACK  "I am here, at iteration iter" (its next message).
 *   GOSSIP     one iteration's compressed update (gossip_node).
 *   PING       "everything I sent you before this is out; I am at iter".
 *              Sent to every neighbour we sent nothing to for ping_every
 *              seconds, and to in-neighbours every few iterations (their
 *              flow control).  On the DEALER -> ROUTER connection it travels
 *              behind our GOSSIP messages, so it proves which ones were lost.
 *   RESYNC_REQ "send me your public copy": a choco holder whose copy is bad.
 *   RESYNC     the owner's whole public copy (gossip_node_resync_msg).
 *   STATE_REQ  "send me your model": a node joining a run in progress.
 *   STATE      one chunk of the answer (gossip_state.h), to the asker only.
 *   BYE / BYE_ACK  "I stop after iter iterations" / "noted".
 *   LINK_REQ   "prove your id on my port: send this token back" (our
 *              DEALER), answered with LINK_PROOF over the peer's DEALER.
 *   ACK        "your push-sum GOSSIP of iter reached me" (our ROUTER, to
 *              its sender): bounds the mass in flight (gossip_flight.c).
 *
 * Ids on a plaintext port.  Without CURVE whoever connects first under an
 * id holds it on a ROUTER.  A neighbour both ways (in and out) is heard
 * over our ROUTER only once the connection under its id there proved it:
 * we send a LINK_REQ with a random per-link token over our DEALER (to the
 * endpoint it is listed at), it sends the token back in a LINK_PROOF over
 * its DEALER.  Before: its messages there are dropped and counted
 * (gossip_link_stats.unproven; a HELLO is held and handled on the proof),
 * and a proof is asked for (rate-limited); a wrong token is refused; a
 * message on another connection (gossip_net_conn_gen) needs a new proof.
 * An in-only neighbour (no DEALER to it) cannot prove: heard as before.
 *
 * Liveness.  ZMTP heartbeats (gossip_net) keep the TCP connections honest;
 * on top, a neighbour is declared down when it has been silent (no valid
 * message of any kind) for longer than its adaptive deadline
 *     clamp(median + 6 MAD of its last GOSSIP_PEER_GAPS GOSSIP arrival gaps,
 *           peer_floor, timeout)
 * (peer_factor x its observed message period until 8 gaps are known), or
 * when its message needed by the current iteration t (that of t - S with
 * bounded staleness S) is still missing after `timeout`, or when it says
 * BYE early.  A slow neighbour that still PINGs is never silent.  With
 * S > 0 late GOSSIP messages are passed to gossip_node (mixed at the next
 * mix), and each round's wait is blamed on the in-neighbours it waited for
 * (gossip_link_peer.wait_s).  A down neighbour is logged once
 * with the reason and dropped from mixing (gossip_node_peer_down: weights
 * and push-sum mass as documented there); the run goes on.  It comes back
 * by itself: as out-neighbour when it speaks again (any valid message), as
 * in-neighbour when its state is usable again (choco: we ask for, and get,
 * its RESYNC; dpsgd/deepsqueeze: its next message).
 *
 * Flow control.  No iteration is prepared more than LAG = n + 2*WINDOW
 * iterations ahead of what a live out-neighbour last reported, so stashes
 * stay bounded even when a failure turns a ring into a path; anything
 * further ahead is refused as hostile.
 *
 * Start.  A fresh node starts as soon as every in-neighbour said HELLO and
 * every out-neighbour acknowledged ours; or, once `start_window` seconds
 * have passed, as soon as the quorum holds: 1 + the neighbours that
 * answered (HELLO or HELLO_ACK) >= min(min_nodes, 1 + its neighbours).
 * Neighbours that did not answer are then declared down (as a dead peer)
 * and come back by joining.  With no quorum by `timeout` the start fails
 * naming who is missing.  A fresh node whose neighbours run without it (a
 * HELLO_ACK with GOSSIP_HELLO_JOIN: we had it down, or it restarted, while
 * we were running; or a neighbour far along) joins the run in progress:
 * it says HELLO to every neighbour, waits until all answered or
 * `start_window` passed with one answer, sends STATE_REQ to an answering
 * neighbour (out-neighbours first, over our DEALER) and assembles its
 * STATE (gossip_state.h: every chunk checked, and only on the connection
 * asked; a refused or silent holder -> the next one, within `timeout`);
 * a state is plausible within the run, and with two or more possible
 * holders it is taken only when a second one's agrees (relative L2
 * distance <= S_STATE_AGREE, iterations within (n - 1) x (lag + window));
 * a third is asked on a disagreement and the outlier refused; then x =
 * the holder's z, psi = 1, iteration T = max(the plausible iterations the
 * neighbours reported, the state's), and it goes on as a rejoining node.
 * A node that resumes from a checkpoint rejoins: it waits for whoever
 * answers within `timeout`, continues at T = max(its own iteration,
 * theirs), and (choco) exchanges RESYNCs with every answering neighbour
 * before iteration T.  A joined node does the same RESYNC exchange.
 *
 * Re-join.  A running node that fell far behind (frozen: SIGSTOP, a
 * suspended laptop, a long stall; its neighbours declared it down and ran
 * on) finds out from its in-neighbours' PINGs and HELLO_ACKs: a strict
 * majority of the in-neighbours heard within their silence limit (no BYE),
 * and at least two of them when it has two or more in-neighbours, report an iteration more than LAG + GOSSIP_WINDOW ahead of its own
 * (flow control keeps an honest neighbour that has it up within LAG, so
 * only a neighbour that has it down gets there) and within the run
 * (cfg.iters).  Its round then stops waiting for them (they are declared
 * down: "it is N iterations ahead"), and at the next round boundary
 * gossip_link_catch_up asks those neighbours in turn for their state
 * (STATE_REQ), takes a state only from one of them and only at an
 * iteration T beyond its own and within LAG + GOSSIP_WINDOW of what that
 * neighbour reported and within the run, installs it (gossip_node_join:
 * x = z, psi = 1, choco xhat_i = z, copies void), sends every
 * out-neighbour its RESYNC at T (choco), asks for theirs, PINGs its new
 * iteration (their flow control) and goes on at T as a node that came
 * back.  What it held (x, psi, its copies) is discarded.  A failed attempt
 * is logged and retried after peer_floor seconds; training goes on.  Its
 * neighbours answer its STATE_REQ although they have it down, and do not
 * take it back as out-neighbour on its PINGs while it reports an iteration
 * more than LAG + GOSSIP_WINDOW behind theirs (push-sum shares it would
 * drop); its PING at T does.
 *
 * Refused input (counted, the first 5 of each kind logged, never asserted): bytes that
 * are not an lpgossip message, a sender field that is not the connection's
 * peer, unknown kinds, kinds on the wrong channel, a different layout,
 * replayed or far-future iterations, malformed or non-finite payloads.
 */
#ifndef GOSSIP_LINK_H
#define GOSSIP_LINK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_net.h"
#include "gossip/gossip_node.h"
#include "topology/topo.h"

/* Arrival gaps kept per neighbour for its adaptive deadline
 * (gossip_link_gap_deadline). */
#define GOSSIP_PEER_GAPS 32

typedef struct gossip_link gossip_link;

typedef struct {
    double   timeout;      /* cap on every wait and on a silent peer (s)       [60] */
    double   peer_floor;   /* a silent peer is down after at least this (s)    [5] */
    double   peer_factor;  /* ... or after factor x its message period         [20] */
    double   ping_every;   /* PING a neighbour we sent nothing for this long (s) [0.5] */
    int      fail_on_loss; /* 1: a lost neighbour ends the run instead         [0] */
    double   drop_gossip;  /* fault injection: drop this fraction of GOSSIP    [0] */
    uint64_t seed;         /* drop_gossip's RNG */
    long     drop_resyncs; /* fault injection: our first N RESYNCs are lost  [0] */
    /* log lines (no trailing newline); NULL: silent */
    void   (*log)(void *arg, const char *msg);
    void    *log_arg;
    /* signal counter of the caller, or NULL: waits give up at 1 during the
     * start, at 2 later (the first signal lets the iteration finish) */
    const volatile sig_atomic_t *signals;
    /* quorum start ("Start" above) */
    int      min_nodes;    /* quorum: this node + answering neighbours, at least [2] */
    double   start_window; /* s after which a quorum suffices to start          [5] */
    /* bounded staleness: once a round may mix, wait up to this fraction of
     * our round period for the current messages of neighbours that are level
     * with us (gossip_node_fresh_from), so that equally fast nodes mix
     * fresh messages; a neighbour already behind, or one the grace ran out
     * on twice lately, is not waited for (gossip_round.c s_wait_fresh) [0.25] */
    double   fresh_wait;
    /* bounded staleness: an in-neighbour far behind (its messages through
     * t - S missing) that has held a round up for this fraction of our
     * round period is mixed late instead of waited for
     * (gossip_node_peer_late) until it catches up; 0: always wait   [1.0] */
    double   late_after;
    /* bounded staleness, choco: while the path to an out-neighbour is
     * backed up (it acknowledges our full updates late although it still
     * sends), send updates without values (gossip_node_defer_update); one
     * backed up for S + 2 rounds gets an edge copy of its own
     * (gossip_node_edge_own) whose updates its ACKs clock  [1] */
    int      defer_updates;
    uint64_t iters;        /* gossip rounds of the whole run (0: unknown): an
                              iteration reported beyond it is a lie ("Re-join") */
} gossip_link_config;

typedef struct {
    uint64_t refused;          /* messages refused by the link or gossip_node */
    uint64_t refused_nonfinite; /* of which: a NaN/Inf value or scale
                                   (GOSSIP_RECV_NONFINITE), or in a STATE */
    uint64_t peers_down;       /* neighbours down right now */
    uint64_t down_events;      /* times a neighbour was declared down */
    uint64_t back_events;      /* times one came back */
    uint64_t resync_req_sent;  /* RESYNC_REQ sent */
    uint64_t resyncs_sent;     /* RESYNC sent */
    uint64_t resyncs_unsent;   /* RESYNC answers the DEALER took not (queue
                                  full or no connection: the asker retries) */
    uint64_t resyncs_repeated; /* RESYNCs sent again: asked for again well
                                  after the first (that one never arrived) */
    uint64_t ctl_unsent;       /* RESYNC_REQs not sent: an unroutable
                                  ROUTER reply, a full queue */
    uint64_t resync_bytes;     /* bytes of those */
    uint64_t dropped_full;     /* GOSSIP not sent: the peer's queue was full */
    uint64_t kept_full;        /* of those, push-sum: the share kept, announced by
                                  the next message to that peer (not lost) */
    uint64_t kept_sent_late;   /* GOSSIP the queue took later in its round */
    uint64_t kept_flight;      /* push-sum GOSSIP kept, not sent: S + 2 of ours
                                  to that peer were unacknowledged */
    uint64_t acks_recv;        /* ACKs of our GOSSIPs */
    uint64_t updates_deferred; /* choco: rounds whose message carried no update
                                  (a path to an out-neighbour backed up) */
    uint64_t acks_expired;     /* GOSSIPs of ours given up on being acknowledged */
    uint64_t dropped_test;     /* GOSSIP dropped by drop_gossip */
    uint64_t flow_waits;       /* rounds that waited for a slow out-neighbour */
    uint64_t fresh_waits;      /* rounds that waited (fresh_wait) for a level neighbour */
    uint64_t fresh_missed;     /* neighbours the grace ran out on (mixed stale) */
    uint64_t late_marks;       /* times a neighbour far behind was marked late */
    uint64_t late_lifts;       /* ... and waited for again, as fast as us over a
                                  directed edge (gossip_node_peer_wait_again) */
    /* ms the rounds waited, by why (docs/node.md, the metrics table) */
    uint64_t wait_flow_ms;     /* a live out-neighbour too far behind */
    uint64_t wait_missing_ms;  /* an in-neighbour's needed messages not arrived */
    uint64_t wait_held_ms;     /* a needed one arrived, held until it fits */
    uint64_t wait_gap_ms;      /* choco: a copy missed an update (RESYNC) */
    uint64_t wait_final_ms;    /* the synchronous mixes at the run's end */
    uint64_t wait_fresh_ms;    /* fresh waits (ready, waiting for level ones) */
    uint64_t neighbours;       /* neighbours in the topology (in or out) */
    uint64_t isolated_rounds;  /* the last rounds in a row that mixed nothing of any
                                  in-neighbour (all of them left out) */
    uint64_t state_refused;    /* STATE messages refused (of `refused`) */
    uint64_t unproven;         /* messages over our ROUTER dropped for want of the
                                  proof of the sender's id ("Ids on a plaintext port") */
    uint64_t proofs_unsent;    /* LINK_REQs and LINK_PROOFs our DEALER took not
                                  (queue full or no connection: asked again on
                                  the peer's next unproven message) */
    uint64_t states_sent;      /* whole states sent to joining neighbours */
    uint64_t state_bytes;      /* bytes of those */
    int      joined;           /* this node joined a run in progress (state transfer) */
    int      join_from;        /* the rank whose state it took (joined) */
    uint64_t join_iter;        /* the iteration it joined at (joined, or the last re-join) */
    uint64_t rejoins;          /* times it fell behind and re-joined ("Re-join") */
} gossip_link_stats;

/* Cut off: the node has neighbours, and its last round(s), up to the end
 * of the run, mixed nothing of any of them: it trained alone for the rest
 * of the run (e.g. everyone else had finished while it was frozen), so its
 * model is not the run's. */
int gossip_link_cut_off(const gossip_link_stats *st);

/* Seconds of one round, accumulated by gossip_link_round. */
typedef struct {
    double compress, wait, mix;
} gossip_link_times;

void gossip_link_config_default(gossip_link_config *cfg);

/* The link of node `rank` over net and g (borrowed; they and t must outlive
 * it).  net may be NULL only for gossip_link_handle (harnesses). */
gossip_link *gossip_link_new(gossip_net *net, gossip_node *g, const topo *t, int rank,
                             const gossip_link_config *cfg);
void gossip_link_destroy(gossip_link **self_p);

/* Start barrier (see above).  *iter: in, the iteration this node starts at
 * (0, or a checkpoint's); out, the iteration to continue from (moved
 * forward with gossip_node_set_iter when rejoining).  resumed: the node
 * restarted from a checkpoint.  0, or -1 with a message. */
int gossip_link_start(gossip_link *l, int resumed, uint64_t *iter, char *err, size_t errlen);

/* One round of iteration `iter` (the node's current one) on x = x+ after
 * the local step: waits for room (flow control), prepares, sends, waits
 * until every live in-neighbour's part is there (declaring silent peers
 * down, answering and asking for RESYNCs), mixes.  tm (may be NULL)
 * accumulates.  0, or -1 with a message (transport failure, a lost peer
 * with fail_on_loss, a second signal). */
int gossip_link_round(gossip_link *l, float *x, uint64_t iter, gossip_link_times *tm, char *err,
                      size_t errlen);

/* Handles what arrives for at most `seconds` (0: what is there), sending
 * PINGs as due: call it during long local work (evaluation, checkpoints). */
void gossip_link_pump(gossip_link *l, double seconds);

/* Between two rounds (not prepared): when this node fell far behind its
 * in-neighbours ("Re-join" above), takes the state of one of them and moves
 * to its iteration.  *iter: in, the next round; out, the round to continue
 * from.  1 re-joined (x holds the new model; the caller resets what the
 * model's optimizer keeps), 0 nothing done (not behind, or the attempt
 * failed and was logged), -1 with a message (a bug: the node was prepared). */
int gossip_link_catch_up(gossip_link *l, uint64_t *iter, char *err, size_t errlen);
/* The rule of "Re-join": 1 when this node fell behind; *far (may be NULL):
 * the lowest iteration the in-neighbours ahead report.  Harnesses, tests. */
int gossip_link_behind(const gossip_link *l, uint64_t *far);
/* Catch-up (bounded staleness): the least lead over iteration iter of the
 * live out-neighbours that are not in-neighbours, by the iterations they
 * reported (0: one is level or behind); UINT64_MAX when there is none.
 * An in-neighbour ahead says a node is slow only if those it sends to are
 * ahead too: on a directed ring a node behind its in-neighbour holds up
 * nobody while its out-neighbour is behind it (node_cmd_node.c s_skip). */
uint64_t gossip_link_out_lead(const gossip_link *l, uint64_t iter);

/* Says BYE after `done` iterations and waits at most wait_s until every
 * live out-neighbour acknowledged and every live in-neighbour said BYE.
 * Problems are logged, not returned (the model is saved before). */
void gossip_link_goodbye(gossip_link *l, uint64_t done, double wait_s);

void gossip_link_stats_get(const gossip_link *l, gossip_link_stats *out);
/* What the link knows of rank j (l may be NULL: a node without neighbours,
 * reported as up and never waited for). */
typedef struct {
    int    down;   /* declared down and not back yet */
    double wait_s; /* seconds our rounds waited for its messages */
} gossip_link_peer_view;
gossip_link_peer_view gossip_link_peer_get(const gossip_link *l, int j);

/* The node's model, for the state transfer (borrowed; NULL: this node
 * neither answers STATE_REQ nor joins): x the gossip variable (layout
 * numel floats: the holder sends z = x/psi, a joiner receives into it);
 * extra, nextra further floats of the model that travel with it (the 8-bit
 * activation ranges), or NULL, 0.  Both sides must give the same nextra. */
void gossip_link_set_model(gossip_link *l, float *x, float *extra, size_t nextra);
/* The adaptive deadline of n arrival gaps (seconds; gaps not modified):
 * median + 6 x the median absolute deviation, before the clamp to
 * [peer_floor, timeout]; 0 when n < 8 (too few: the caller falls back to
 * peer_factor x period) or n > GOSSIP_PEER_GAPS. */
double gossip_link_gap_deadline(const double *gaps, uint32_t n);

/* |a - b| / min(|a|, |b|) over n floats (L2; infinite when the smaller
 * is 0 and they differ): how far apart two neighbours' states are (a
 * joiner takes a state only when two agree, "Start"). */
double gossip_link_state_distance(const float *a, const float *b, size_t n);

/* The receive path without sockets (fuzz targets, tests): handles one
 * message as if the transport had delivered it from neighbour rank `from`
 * (0 <= from < n, not this node) on channel dir: header checks, the
 * protocol state, gossip_node_receive_decoded, refusals.  A link made with
 * net == NULL sends nothing (answers are dropped).  gossip_link_set_running
 * marks the start barrier as passed (running 1) or not, as a harness needs. */
void gossip_link_handle(gossip_link *l, int from, gossip_net_dir dir, const uint8_t *msg,
                        size_t len);
void gossip_link_set_running(gossip_link *l, int running);
/* Harnesses: ids over the ROUTER must be proved (on; a link made with a
 * net does so without CURVE), and this link's secret token for neighbour
 * j (what its LINK_PROOF must carry). */
void gossip_link_set_prove(gossip_link *l, int on);
uint64_t gossip_link_token(const gossip_link *l, int j);
/* Harnesses: the link expects a state transfer from rank `from` (as a
 * joiner that sent STATE_REQ; -1: none), and whether it has arrived whole
 * and checked (the values are not applied: that is gossip_link_start's). */
void gossip_link_expect_state(gossip_link *l, int from);
int  gossip_link_state_ready(const gossip_link *l);

#endif
