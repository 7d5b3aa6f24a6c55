/* gossip_peer — what one node knows about one other node of the topology:
 * one record per rank, in one table.
 *
 * Owns:    nothing; the table belongs to gossip_node (gossip_node_peers),
 *          which fills the identity and roles and keeps the algorithm
 *          state; the transport layer (gossip_link.h) borrows the same
 *          table and keeps the protocol state in it: membership fields
 *          (hello ... bye_iter, join_told) are gossip_member's, the proof
 *          fields gossip_proof's, state_sent gossip_join's, wait_s and
 *          fresh_score gossip_round's, flight gossip_flight's, the rest (clocks, gaps,
 *          reported, down, RESYNC) gossip_live's and gossip_recv's.  A peer's identity, roles,
 *          membership and liveness thus live in one place, with one writer
 *          per section.
 * Callers: gossip_node.c (identity, algorithm), the transport modules
 *          gossip_{recv,live,member,join,round,proof}.c (protocol).
 */
#ifndef GOSSIP_PEER_H
#define GOSSIP_PEER_H

#include <stdint.h>

/* Arrival gaps kept per neighbour for its adaptive deadline. */
#define GOSSIP_PEER_GAPS 32
/* Push-sum GOSSIPs to one out-neighbour not yet acknowledged, at most
 * (gossip_flight.c: S + 2, S <= GOSSIP_STALE_MAX = 4). */
#define GOSSIP_FLIGHT_CAP 6

typedef struct {
    /* ---- identity and roles: gossip_node_new (union over the schedule) */
    int      rank;
    int      in_pos;       /* index among the in-neighbours, or -1 */
    uint8_t  is_in, is_out;
    /* ---- algorithm state: gossip_node ("Membership" in gossip_node.h) */
    uint8_t  in_down;      /* in-neighbour declared down by the caller */
    uint8_t  out_down;     /* out-neighbour declared down */
    uint8_t  copy_bad;     /* choco: copy unknown (restart): absent until RESYNC */
    uint8_t  copy_gap;     /* choco: an update was lost: wait for RESYNC */
    uint8_t  late;         /* far behind: mixed as its messages come, not waited
                              for (gossip_node_peer_late), until it catches up */
    uint64_t in_from;      /* takes part in mixing from this iteration on */
    uint64_t sent_thru;    /* proved to have sent every message below this */
    uint64_t copy_thru;    /* choco: our copy holds its updates of iterations below this */
    double   psi_last;     /* its latest psi (message or RESYNC) */
    uint64_t got;          /* 1 + the last GOSSIP iteration it delivered, that
                              was held or came late: admission's sequence
                              (gossip_node_admit); the transport reads it */
    /* ---- protocol state: gossip_link ("Liveness", "Start" in gossip_link.h) */
    uint8_t  hello, ack;       /* start: it said HELLO / answered ours */
    uint8_t  bye_in, bye_ack;  /* end: it said BYE / acknowledged ours */
    uint8_t  down;             /* declared down by the link and not back yet */
    uint8_t  hello_seen;       /* hello_iter is valid */
    uint64_t hello_iter;       /* the iteration of its first HELLO */
    uint64_t nonce;            /* instance nonce of its HELLO/HELLO_ACK (0: none seen) */
    uint64_t bye_iter;         /* iterations announced in its BYE */
    uint64_t reported;         /* iteration it last reported (HELLO*, PING) */
    double   heard;            /* clock of its last valid message */
    double   sent_dealer;      /* clock of our last message to it, DEALER */
    double   sent_router;      /* ... ROUTER */
    double   last_gossip;      /* clock of its last GOSSIP */
    double   period;           /* EWMA of the gaps between its GOSSIPs */
    double   resync_asked;     /* clock of our last RESYNC_REQ to it */
    uint64_t resync_iter;      /* 1 + iteration of our last RESYNC to it (0: none) */
    double   resync_at;        /* clock of that RESYNC */
    uint8_t  join_told;        /* its HELLO_ACK said GOSSIP_HELLO_JOIN (a run in progress) */
    /* ids on a plaintext port (gossip_link.h "Ids on a plaintext port") */
    uint8_t  proved;           /* its connection to our ROUTER proved the id ... */
    uint64_t proved_gen;       /* ... this one (gossip_net_conn_gen) */
    uint64_t token;            /* our secret of this link (LINK_REQ), never 0 */
    uint8_t  held_hello;       /* a HELLO that came before the proof, held: */
    uint64_t held_iter, held_nonce;
    uint64_t unproven;         /* its messages dropped for want of the proof */
    double   link_asked;       /* clock of our last LINK_REQ to it */
    double   link_answered;    /* clock of our last LINK_PROOF to it */
    double   state_sent;       /* clock of our last STATE answer to it (rate limit) */
    /* adaptive deadline and bounded-staleness waits (gossip_link "Liveness") */
    double   gaps[GOSSIP_PEER_GAPS]; /* the last gaps between its GOSSIPs (ring) */
    uint32_t ngaps, gap_pos;   /* gaps held, next slot */
    double   deadline;         /* median + k x MAD of gaps (0: too few gaps yet) */
    double   wait_s;           /* seconds our rounds waited for its message */
    double   fresh_score;      /* 0..1: its current message tends to come within
                                  the fresh-wait grace (waited for at >= 0.5) */
    /* push-sum mass in flight to it (gossip_flight) */
    uint64_t flight[GOSSIP_FLIGHT_CAP]; /* iterations of our GOSSIPs it has not
                                           acknowledged, oldest first */
    double   flight_t[GOSSIP_FLIGHT_CAP]; /* the clock each went out */
    unsigned nflight;
    uint8_t  flight_slow;      /* its ACKs come late (or none yet): one at a time */
    /* choco's deferred updates (gossip_flight): our oldest full update to
     * it not yet acknowledged, and the newest one sent since */
    uint64_t upd_iter;         /* 1 + its iteration (0: none open) */
    double   upd_t;            /* the clock it went out */
    uint64_t upd_next;         /* 1 + the iteration of the newest since (0: none) */
    double   upd_next_t;
} gossip_peer;

#endif
