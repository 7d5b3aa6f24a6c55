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

/* ---- delays (bounded staleness, docs/gossip.md) --------------------------
 * A delayed message is held as bytes in an in-flight queue and delivered at
 * the start of its due round, before that round's mixes; the delays of one
 * sender-receiver pair never reorder messages (a FIFO connection).  Specs:
 *   none        no delays (the synchronous path, bit for bit)
 *   fixed:D     every message arrives D rounds late
 *   random:D    each message 0..D rounds late, uniform, seeded
 *   slow:R:F    node R takes a local step on a fraction F of the rounds,
 *               evenly spread (gossip_sim_steps), and its messages arrive
 *               S rounds late
 * Every delay must be at most the staleness S (error naming both). */
typedef enum { GOSSIP_DELAY_NONE = 0, GOSSIP_DELAY_FIXED, GOSSIP_DELAY_RANDOM, GOSSIP_DELAY_SLOW } gossip_delay_kind;
typedef struct {
    gossip_delay_kind kind;
    int               d;          /* fixed, random: D; slow: S */
    int               slow_rank;  /* slow: R */
    double            slow_frac;  /* slow: F in (0, 1] */
} gossip_delays;

/* Parses SPEC (above) for staleness S into *out; -1 with a message. */
int gossip_delays_parse(const char *spec, int staleness, gossip_delays *out, char *err,
                        size_t errlen);
/* Delays of the following rounds (seed: random's RNG); -1 with a message
 * when slow's rank is outside the topology. */
int gossip_sim_set_delays(gossip_sim *s, const gossip_delays *dl, uint64_t seed, char *err,
                          size_t errlen);
/* 1 when rank takes its local step in iteration iter (0 only for the slow
 * node of slow:R:F on the rounds it skips). */
int gossip_sim_steps(const gossip_sim *s, int rank, uint64_t iter);
/* A jammed link (push-sum; docs/gossip.md "Kept shares"): from now on each
 * message to or from `rank` is, with probability frac (seeded by `seed`),
 * not sent, as when the transport's queue to that peer is full; never more
 * than S in a row on one pair, so that bounded staleness can mix.  keep = 1:
 * the sender keeps its share (gossip_node_keep) and announces it with its
 * next message (a node that cannot keep shares loses it, as the link
 * does); keep = 0: the message is lost and the receiver, which
 * learns so from the next one, mixes a stand-in (its own value) for it.
 * frac 0 turns jamming off.  Counts the messages not sent in *jammed. */
void gossip_sim_set_jam(gossip_sim *s, int rank, double frac, int keep, uint64_t seed);
uint64_t gossip_sim_jammed(const gossip_sim *s);
/* Mass still in flight (dpsgd, push-sum): adds W_s[to][from] * c and
 * W_s[to][from] * psi of every queued message to xsum[d] and *psisum. */
void gossip_sim_inflight(gossip_sim *s, double *xsum, double *psisum);

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
