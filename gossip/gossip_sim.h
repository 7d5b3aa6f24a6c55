/* gossip_sim — n gossip nodes in one process (the in-process transport).
 *
 * Owns:    n gossip_node objects running exactly the code the ZeroMQ node
 *          runs; messages travel as bytes through the encoder and the
 *          validating decoder.
 * Exposes: the functions below.  A training loop per iteration t does the
 *          local step on every node's de-biased z = x/psi
 *          (gossip_node_debias(gossip_sim_node(s, i), ...)) and then calls
 *          gossip_sim_step(s, x, t).
 * Callers: node/ (`lpgossip simulate`), tests, bench.
 */
#ifndef GOSSIP_SIM_H
#define GOSSIP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_node.h"

typedef struct gossip_sim gossip_sim;

/* One node per rank of t (t and layout borrowed, must outlive the sim).
 * NULL with a message on error. */
gossip_sim *gossip_sim_new(const gossip_config *cfg, const nn_arena *layout, const topo *t,
                           char *err, size_t errlen);
void gossip_sim_destroy(gossip_sim **self_p);

/* One gossip round: prepare on every node (x[i] = node i's x+, layout->numel
 * floats), deliver every message as bytes, mix on every node (x[i] and psi
 * overwritten).  iter must be the current iteration (0, 1, ...).
 * -1 with a message on error. */
int gossip_sim_step(gossip_sim *s, float **x, uint64_t iter, char *err, size_t errlen);

int          gossip_sim_n(const gossip_sim *s);
gossip_node *gossip_sim_node(gossip_sim *s, int rank);
/* Sum over nodes of bytes sent (totals). */
uint64_t     gossip_sim_bytes_sent(const gossip_sim *s);

/* ---- membership drills (simulate --join; docs/gossip.md "Joining") ---- */

/* rank is absent from now on, as a node that was not there at the start:
 * every other node has it down and it has every other node down
 * (gossip_node_peer_down both ways), so it sends and gets nothing and
 * mixes alone; gossip_sim_step is unchanged. */
void gossip_sim_absent(gossip_sim *s, int rank);
/* Absent rank joins before iteration iter, the current one of all (call
 * it between two steps): the state of its lowest present in-neighbour, z =
 * x/psi, travels as STATE chunks of `chunk` bytes through the encoder and
 * the checking assembler (gossip_state.h) and becomes x[rank]; its psi
 * becomes 1, its iteration iter (gossip_node_join: choco xhat_i =
 * z); choco public copies are exchanged by RESYNC both ways; its
 * neighbours take it back as out-neighbour (as in-neighbour by its next
 * message).  *holder: that in-neighbour.  -1 with a message. */
int gossip_sim_join(gossip_sim *s, int rank, float **x, uint64_t iter, size_t chunk,
                    int *holder, char *err, size_t errlen);

#endif
