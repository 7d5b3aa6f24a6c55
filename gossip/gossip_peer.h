/* gossip_peer — what the algorithm knows about one other node of the
 * topology: one record per rank, in one table.
 *
 * Owns:    nothing; the table belongs to gossip_node (gossip_node_peers),
 *          which fills the identity and roles and keeps the algorithm
 *          state (membership in mixing, copies, admission's sequence,
 *          the last psi).  The transport layer keeps its own record of a
 *          neighbour (gossip_link_peer.h) and reads this one only through
 *          gossip_node's calls.
 * Callers: gossip_node*.c (writes), node/ and tests (roles, read-only).
 */
#ifndef GOSSIP_PEER_H
#define GOSSIP_PEER_H

#include <stdint.h>

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
    uint8_t  rewait;       /* late, but waited for again within the window
                              (gossip_node_peer_wait_again); its older
                              messages are still taken as late ones */
    uint64_t in_from;      /* takes part in mixing from this iteration on */
    uint64_t sent_thru;    /* proved to have sent every message below this */
    uint64_t copy_thru;    /* choco: our copy holds its updates of iterations below this */
    double   psi_last;     /* its latest psi (message or RESYNC) */
    uint64_t got;          /* 1 + the last GOSSIP iteration it delivered, that
                              was held or came late: admission's sequence
                              (gossip_node_admit; gossip_node_peer_got) */
    uint64_t down_next;    /* declared down: 1 + the last iteration it sent
                              since (ignored), 0 when none */
} gossip_peer;

#endif
