/* gossip_link_peer — what the transport layer knows about one neighbour:
 * one record per rank, in the link's own table (struct gossip_link.p).
 *
 * Owns:    nothing; the table belongs to the link (gossip_link_new fills
 *          the roles from gossip_node's table once, gossip_link_destroy
 *          frees it).  Each transport module writes its own fields only:
 *          membership (hello ... bye_iter, join_told) gossip_member's, the
 *          proof fields gossip_proof's, state_sent gossip_join's, wait_s
 *          and fresh_score gossip_round's, flight and upd gossip_flight's,
 *          the rest (clocks, gaps, reported, down, RESYNC) gossip_live's
 *          and gossip_recv's.
 *          The algorithm's record of the same peer (roles, copies, admission
 *          sequence, push-sum weight) is gossip_peer, in gossip_node; the
 *          transport reads it through gossip_node's calls, never its fields.
 * Callers: the transport modules gossip_{link,recv,proof,live,member,join,
 *          round,flight}.c, through gossip_link_int.h.
 */
#ifndef GOSSIP_LINK_PEER_H
#define GOSSIP_LINK_PEER_H

#include <stdint.h>

#include "gossip/gossip_link.h" /* GOSSIP_PEER_GAPS */

/* Push-sum GOSSIPs to one out-neighbour not yet acknowledged, at most
 * (gossip_flight.c: S + 2, S <= GOSSIP_STALE_MAX = 4). */
#define GOSSIP_FLIGHT_CAP 6

typedef struct {
    /* ---- roles: a copy of gossip_node's, taken by gossip_link_new */
    uint8_t  is_in, is_out;
    uint8_t  hello, ack;       /* start: it said HELLO / answered ours */
    uint8_t  bye_in, bye_ack;  /* end: it said BYE / acknowledged ours */
    uint8_t  down;             /* declared down by the link and not back yet */
    uint8_t  hello_seen;       /* hello_iter is valid */
    uint64_t hello_iter;       /* the iteration of its first HELLO */
    uint64_t nonce;            /* instance nonce of its HELLO/HELLO_ACK (0: none seen) */
    uint64_t bye_iter;         /* iterations announced in its BYE */
    uint64_t reported;         /* iteration it reports: the higher of said[] */
    uint64_t said[2];          /* the last iteration it reported over our
                                  DEALER [0] and our ROUTER [1] (gossip_live_report) */
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
    double   step_s;           /* s: its step time, from its GOSSIP headers (0:
                                  not known) */
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
    double   upd_last_t;       /* the clock our newest full update went out */
    double   upd_rtt;          /* s from a full update to its ACK, the last */
    unsigned backed_rounds;    /* our rounds in a row the path to it was backed
                                  up (gossip_round: an edge copy of its own) */
} gossip_link_peer;

#endif
