/* tk_gossip — fixtures of the gossip tests in tests/ that run nodes in one
 * process: shipped topologies, a small parameter layout, random vectors and
 * a gossip configuration.
 *
 * Owns:    nothing; what is returned is the caller's (topo_destroy,
 *          nn_arena_free, tk_gossip_vectors_free).
 * Exposes: tk_gossip_topo, tk_gossip_layout(_of), tk_gossip_vectors,
 *          tk_gossip_vectors_free, tk_gossip_cfg.
 * Callers: tests/test_gossip_{algo,stale,late}.c (linked into
 *          every test program by the Makefile, like tk.c).
 *
 * Like tk_num.h, tk_gossip_topo fails the running cmocka test (fail_msg)
 * when the topology does not load.
 */
#ifndef TK_GOSSIP_H
#define TK_GOSSIP_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_node.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

/* topologies/NAME.yaml, loaded (run from the repository root). */
topo *tk_gossip_topo(const char *name);

/* L = a small layout of uneven views (8x12, a bias of 3, 5x20), allocated;
 * big: a fourth (15x20, larger than DGC's 256-value sample) after them. */
void tk_gossip_layout(nn_arena *L);
void tk_gossip_layout_of(nn_arena *L, int big);

/* n vectors of d values N(0, 1) from seed; free with tk_gossip_vectors_free. */
float **tk_gossip_vectors(int n, size_t d, uint64_t seed);
void tk_gossip_vectors_free(float **x, int n);

/* The defaults with algo, compressor comp, eta and staleness S. */
gossip_config tk_gossip_cfg(gossip_algo algo, const char *comp, double eta, int S);

#endif
