/* gossip_link_int — the inside of the transport layer: the link object,
 * cut into one section per module, and the calls the modules make to each
 * other.  Only gossip/gossip_{link,recv,proof,live,member,join,round}.c
 * include it; everybody else sees gossip_link.h.
 *
 * Owns:    nothing itself; it declares struct gossip_link, in which every
 *          module owns one section (written by that module only):
 *            shared   identity, configuration, neighbour list, phase
 *                     (running: gossip_member), fatal error, counters
 *                     (each module adds to its own), control-message buffer
 *            recv     the stash of early GOSSIP, refusal log budget, pump clock
 *            proof    whether ids on our ROUTER must be proved
 *            live     the longest stall of this process (freeze detector)
 *            join     the model handed over, the state transfer, re-join clocks
 *            round    the round's clock and period, fresh-wait list, drop RNG
 *          Per-neighbour protocol state lives in the link's own table of
 *          gossip_link_peer records (gossip_link_peer.h), one field group
 *          per module.
 * Exposes: the struct, and per module the few calls the others need.
 * Uses:    below the layer, gossip_net (sockets: gossip_link, gossip_recv,
 *          gossip_proof, gossip_live, gossip_join, gossip_round send) and
 *          the algorithm, always downward (gossip_node never calls back):
 *            gossip_link   config, layout, fingerprint, roles (at creation)
 *            gossip_recv   admit, hold, receive_decoded, window, iter, sent_thru
 *            gossip_live   peer_state/_down/_up/_sent, resync_msg, iter, sent_thru
 *            gossip_member peer_state/_restart, set_iter, sent_thru
 *            gossip_join   debias, join, peer_state/_reset, iter
 *            gossip_round  prepare, outbox, ready, fresh_from, mix, stats,
 *                          peer_state, iter
 *            gossip_proof  iter
 * Callers: the transport modules above (see the layer's drawing in
 *          gossip_link.h).
 */
#ifndef GOSSIP_LINK_INT_H
#define GOSSIP_LINK_INT_H

#include "gossip/gossip_codec.h"
#include "gossip/gossip_link.h"
#include "gossip/gossip_link_peer.h"
#include "gossip/gossip_state.h"

#define GOSSIP_LINK_SLICE 0.2    /* s: longest single wait (signals, checks) */
#define GOSSIP_LINK_REFUSE_KINDS 32 /* refusal kinds with a log budget of their own */

/* A GOSSIP message more than GOSSIP_WINDOW iterations ahead, kept (gossip_recv). */
typedef struct {
    uint8_t      *bytes;
    size_t        len;
    gossip_header h;    /* decoded on arrival (h.iter: its iteration) */
    int           from;
} gossip_recv_early;

struct gossip_link {
    /* ---- shared: set by gossip_link_new, read by every module */
    gossip_link_config cfg;
    gossip_net        *net;
    gossip_node       *g;
    const topo        *t;
    const nn_arena    *layout;
    int                rank, n, choco;
    uint32_t           fp;
    uint64_t           nonce;      /* this process's instance nonce (HELLO, HELLO_ACK) */
    gossip_link_peer  *p;          /* n: our record of every rank (gossip_link_peer.h) */
    int               *nb, nnb;    /* neighbour ranks */
    uint64_t           lag;        /* flow control: n + 2 x GOSSIP_WINDOW */
    uint64_t           stale;      /* gossip_node's staleness S */
    int                running;    /* past the start (written by gossip_member) */
    int                fatal;      /* gossip_link_fatal */
    char               fatal_msg[1024];
    gossip_buf         ctl;        /* gossip_link_ctl's (and gossip_proof's) encoder */
    gossip_link_stats  st;
    /* ---- gossip_recv */
    struct {
        gossip_recv_early *stash;
        size_t             nstash, cap_stash, stash_max; /* stash_max per peer */
        /* refusals logged per kind: a flood of one kind cannot hide the
         * first refusals of another */
        const char        *refuse_fmt[GOSSIP_LINK_REFUSE_KINDS];
        unsigned           refuse_n[GOSSIP_LINK_REFUSE_KINDS];
        double             last_pump; /* clock at the end of the last pump */
    } recv;
    /* ---- gossip_proof */
    struct {
        int prove;                 /* ids on a plaintext port must be proved */
        int unsent_logged;         /* unsent LINK_REQ/LINK_PROOF logged so far */
    } proof;
    /* ---- gossip_live */
    struct {
        double stall_s;            /* longest pause between two pumps ... */
        double woke;               /* ... and the clock at its end */
        double resumed;            /* the end of the last pause longer than
                                      the peer floor (0: none) */
    } live;
    /* ---- gossip_join (state transfer, docs/gossip.md "Joining"; re-join) */
    struct {
        float          *x, *extra; /* gossip_link_set_model */
        size_t          nextra;
        float          *zbuf;      /* holder: z and extra, packed from here */
        gossip_buf      sbytes, smsg;
        /* holder: an answer under way, sent as the connection takes it
         * (a push-sum DEALER queues one message: gossip_join_pump) */
        int             ans_to;    /* 1 + the asker's rank (0: none) */
        int             ans_in;    /* ... over our ROUTER */
        int             ans_ping;  /* over our DEALER: a PING with the ahead
                                      flag first (how far ahead we are) */
        size_t          ans_k, ans_chunk; /* next chunk, chunk size */
        uint32_t        ans_crc;
        uint64_t        ans_iter;
        double          ans_t;     /* clock of the last chunk that went */
        gossip_state_rx rx;        /* joiner */
        int             joining, state_ready;
        int             state_in;  /* the STATE asked for comes over our ROUTER */
        uint64_t        state_bytes_taken; /* bytes of the state taken last */
        double          rejoin_next; /* no attempt before this clock (back-off) */
        int             mix_pending; /* re-joined: log the first mixed round */
        double          rejoined_at; /* clock of the re-join */
        double          rejoin_woke; /* clock the freeze ended (0: none seen) */
    } join;
    /* ---- gossip_round */
    struct {
        nn_rng   rng;              /* drop_gossip */
        double   period;           /* EWMA of our own round time */
        double   busy;             /* EWMA of our rounds less their waits: our
                                      step time (gossip_node_set_step) */
        double   start;            /* clock the current round began */
        int     *fresh;            /* n: the neighbours a fresh wait waits for */
        int     *blamed;           /* n: those a slice of the wait is blamed on */
        uint64_t progress_every;   /* PING in-neighbours every this many rounds */
        uint8_t *unsent;           /* n: the round's message to it is kept,
                                      retried while the round waits */
        int      nunsent;
        double   waited[GOSSIP_UNREADY_FINAL + 1]; /* s waited for mixing, by
                                      gossip_node_unready's reason */
        double   waited_flow;      /* s waited for a slow out-neighbour */
        double   waited_fresh;     /* s of fresh waits */
    } round;
};

/* ---- gossip_link.c: the object, logging, control messages */
__attribute__((format(printf, 2, 3)))
void gossip_link_log(gossip_link *l, const char *fmt, ...);
/* Records the first fatal condition; returns -1. */
__attribute__((format(printf, 2, 3)))
int gossip_link_fatal(gossip_link *l, const char *fmt, ...);
const char *gossip_link_id(const gossip_link *l, int j);
int gossip_link_signals(const gossip_link *l);
/* Control message `kind` carrying `iter` to j: over our DEALER, or (router)
 * as a reply over our ROUTER.  Never blocks. */
void gossip_link_ctl(gossip_link *l, int kind, int j, int router, uint64_t iter);
/* gossip_link_ctl with header flags (GOSSIP_FLAG_AHEAD on a PING): 0
 * sent, -1 not (no connection, or its queue is full). */
int gossip_link_ctl_flags(gossip_link *l, int kind, int j, int router, uint64_t iter,
                          uint16_t flags);

/* ---- gossip_recv.c: from the socket to the handlers */
void gossip_recv_init(gossip_link *l);
void gossip_recv_free(gossip_link *l);
__attribute__((format(printf, 2, 3)))
void gossip_recv_refuse(gossip_link *l, const char *fmt, ...);
/* A refusal of the algorithm or the state transfer (err: its message). */
void gossip_recv_refuse_payload(gossip_link *l, int from, gossip_recv_code code, const char *err);
void gossip_recv_drop_stash_of(gossip_link *l, int j);
void gossip_recv_feed_stash(gossip_link *l);
/* Receives and handles for at most `seconds`, then RESYNC_REQs and PINGs
 * as due.  0, or -1 (transport error, fatal condition). */
int gossip_recv_pump(gossip_link *l, double seconds);

/* ---- gossip_proof.c: ids on a plaintext port */
int gossip_proof_provable(const gossip_link *l, int j);
void gossip_proof_ask(gossip_link *l, int j);
void gossip_proof_answer(gossip_link *l, int j, uint64_t token);
int gossip_proof_router_trusted(const gossip_link *l, int j);
int gossip_proof_unproven(gossip_link *l, int j, unsigned kind, uint64_t iter, const uint8_t *msg,
                          size_t len);
void gossip_proof_on_proof(gossip_link *l, int j, uint64_t token);

/* ---- gossip_live.c: liveness, failure detector, RESYNC */
/* One arrival gap of a neighbour's GOSSIP: its adaptive deadline anew. */
void gossip_live_note_gap(gossip_link_peer *p, double gap);
/* Seconds of silence after which j is declared down (adaptive). */
double gossip_live_limit(const gossip_link *l, int j);
/* In-neighbour j was heard within its silence limit and did not say BYE. */
int gossip_live_heard_in(const gossip_link *l, int j, double now);
/* j reports an iteration beyond this node's reach at cur, within the run. */
int gossip_live_far_ahead(const gossip_link *l, int j, uint64_t cur);
/* This node at cur fell behind ("Re-join"); *far: the lowest report ahead. */
int gossip_live_behind(const gossip_link *l, uint64_t cur, uint64_t *far);
/* Declares j down (logged with the reason), or, with fail_on_loss, fatal. */
__attribute__((format(printf, 3, 4)))
void gossip_live_down(gossip_link *l, int j, const char *fmt, ...);
/* After a valid message from j over channel dir: back where it counts. */
void gossip_live_revive(gossip_link *l, int j, gossip_net_dir dir);
/* Choco: RESYNC_REQ to in-neighbours whose copy is unusable (rate-limited). */
void gossip_live_ask_resyncs(gossip_link *l);
/* Choco: our public copy to out-neighbour o (a RESYNC_REQ answered). */
void gossip_live_answer_resync(gossip_link *l, int o);
/* A RESYNC of `from` was taken by the algorithm. */
void gossip_live_on_resync(gossip_link *l, int from);
/* A PING of `from` at iter; proved: what it sent before is out (in only). */
void gossip_live_on_ping(gossip_link *l, int from, int in, uint64_t iter, uint64_t proved);
void gossip_live_report(gossip_link_peer *p, int in, uint64_t iter, int fresh);
/* PINGs as due (ping_every), and to every in-neighbour with `progress`. */
void gossip_live_ping(gossip_link *l, int progress);
/* Declares down the silent, the late for iter (iter >= 0, waiting since
 * wait_start) and those that left. */
void gossip_live_check_peers(gossip_link *l, int64_t iter, double wait_start);
/* A pause of gap seconds between pumps (a freeze?). */
void gossip_live_note_stall(gossip_link *l, double gap);
/* The longest stall seen and when it ended; gossip_live_stall_reset forgets it. */
double gossip_live_stall(const gossip_link *l, double *woke);
void gossip_live_stall_reset(gossip_link *l);

/* ---- gossip_flight.c: messages in flight, acknowledged by ACKs */
/* Receivers acknowledge our GOSSIPs (S > 0, push-sum dpsgd or choco). */
int gossip_flight_on(const gossip_link *l);
/* Push-sum dpsgd: a GOSSIP to `to` is to be kept, not sent: S + 2 of ours
 * are unacknowledged, or one for more than S + 2 of our rounds (all
 * forgotten when the oldest is older than 2 x limit s).  0 otherwise. */
int gossip_flight_full(gossip_link *l, int to, double limit);
/* Our GOSSIP of iteration iter went out to `to`; full: it carried an
 * update (not a deferred one). */
void gossip_flight_sent(gossip_link *l, int to, uint64_t iter, int full);
/* Choco: live out-neighbour j has not acknowledged our oldest full update
 * to it for longer than S + 2 of our rounds although it sent us a GOSSIP
 * since, the latest within those S + 2 rounds (the path to it is backed
 * up, it is not stopped): 1, else 0. */
int gossip_flight_backed_to(gossip_link *l, int j);
/* Choco, an edge copy of j's own: its next message is to carry no update
 * (our last full update to j is not acknowledged, or went out less than
 * S_EDGE_SPACING of its round trips ago). */
int gossip_flight_edge_busy(const gossip_link *l, int j);
/* Out-neighbour `from` acknowledged our GOSSIPs up to iteration iter. */
void gossip_flight_on_ack(gossip_link *l, int from, uint64_t iter);
/* j was declared down, came back or restarted: nothing in flight. */
void gossip_flight_reset(gossip_link *l, int j);

/* ---- gossip_member.c: start barrier, quorum, HELLO, goodbye */
void gossip_member_on_hello(gossip_link *l, int from, int in, uint64_t iter, uint64_t nonce);
void gossip_member_on_hello_ack(gossip_link *l, int from, int in, uint64_t iter,
                                const uint8_t *msg, size_t len);
void gossip_member_on_bye(gossip_link *l, int from, uint64_t iter);
void gossip_member_on_bye_ack(gossip_link *l, int from);

/* ---- gossip_join.c: state transfer, join, re-join */
void gossip_join_free(gossip_link *l);
int gossip_join_has_model(const gossip_link *l);
int gossip_join_joining(const gossip_link *l);
void gossip_join_begin(gossip_link *l);
void gossip_join_answer_state(gossip_link *l, int j, int in);
/* Sends what the connection takes of an answer under way (each pump). */
void gossip_join_pump(gossip_link *l);
void gossip_join_on_state(gossip_link *l, int j, int in, const gossip_header *h,
                          const uint8_t *msg, size_t len);
int gossip_join_take_state(gossip_link *l, uint64_t *T, int rejoin, int *holder, char *err,
                           size_t errlen);
int gossip_join_rejoin_resyncs(gossip_link *l, char *err, size_t errlen);
/* Joining at *T (gossip_link_start): take the agreed state, install it. */
int gossip_join_run(gossip_link *l, uint64_t *T, char *err, size_t errlen);
/* Round iter was mixed: logs the first round after a re-join that mixed
 * the neighbours' messages again. */
void gossip_join_note_mixed(gossip_link *l, uint64_t iter);

/* ---- gossip_round.c: flow control and the round */
void gossip_round_init(gossip_link *l);
void gossip_round_free(gossip_link *l);
double gossip_round_period(const gossip_link *l);
void gossip_round_begin(gossip_link *l);

#endif
