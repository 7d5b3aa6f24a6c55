/* node_live — the live state of one running node, as the HTTP endpoint
 * serves it: a snapshot the training thread publishes, and its two
 * renderings (Prometheus text exposition for /metrics, JSON for /status).
 *
 * Owns:    node_live, one snapshot slot behind a mutex plus the node's
 *          phase (an atomic), shared by exactly two threads: the training
 *          thread (the only writer) and the HTTP thread (node_http.c, the
 *          only reader).
 * Exposes: node_live_new/destroy; node_live_publish (training thread:
 *          never waits; when the reader holds the slot the snapshot is
 *          dropped and the next iteration's goes in); node_live_set_phase
 *          (training thread, lock-free); node_live_read (HTTP thread: a
 *          copy, under the mutex for a memcpy only); node_live_prometheus
 *          and node_live_json (pure formatting of a copy: no lock, no I/O,
 *          testable without HTTP); node_live_observe (the step-time
 *          histogram).
 * Callers: node_cmd_node.c (publishes), node_http.c (serves),
 *          tests/test_node_live.c.
 *
 * Metric names follow the Prometheus conventions (base units: seconds,
 * bytes; counters end in _total); every sample carries the labels run (the
 * run id that LAN discovery uses, the same on every node of a run), node
 * (the topology id) and rank.  docs/node.md "Live metrics" lists them.
 */
#ifndef NODE_LIVE_H
#define NODE_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "topology/topo.h"

#define NODE_LIVE_BUCKETS 14 /* finite upper bounds of the step-time histogram */
#define NODE_LIVE_MAX_NB  64 /* neighbours listed one by one (the rest only counted) */

/* Phases of lpgossip_step_seconds. */
enum { NODE_LIVE_COMPUTE, NODE_LIVE_COMPRESS, NODE_LIVE_WAIT, NODE_LIVE_MIX, NODE_LIVE_NPHASES };

/* Reasons of lpgossip_refused_messages_total. */
enum {
    NODE_LIVE_REF_IDENTITY, NODE_LIVE_REF_FRAMES, NODE_LIVE_REF_SIZE, NODE_LIVE_REF_AUTH,
    NODE_LIVE_REF_CONTESTED, NODE_LIVE_REF_NONFINITE, NODE_LIVE_REF_STATE, NODE_LIVE_REF_OTHER,
    NODE_LIVE_NREASONS
};

/* What the node is doing; the training thread sets it around each part. */
typedef enum {
    NODE_LIVE_STARTING = 0, /* before the start barrier is through */
    NODE_LIVE_STEP,         /* local steps, evaluation, checkpoints */
    NODE_LIVE_GOSSIP,       /* in a gossip round (sending, waiting, mixing) */
    NODE_LIVE_FINISHED,     /* all iterations done */
    NODE_LIVE_STOPPED,      /* stopped by a signal */
    NODE_LIVE_FAILED        /* ended with an error */
} node_live_phase;

/* A node in a gossip round longer than this is reported "waiting". */
#define NODE_LIVE_WAITING_S 1.0

typedef struct {
    int      rank;
    char     id[TOPO_ID_MAX];
    char     endpoint[160]; /* where this node reaches it (out-neighbour), or "" */
    int      up;            /* 0: declared down by the link */
    uint64_t staleness;     /* our iteration - its newest mixed one */
    double   wait_s;        /* seconds our rounds waited for it */
} node_live_nb;

/* Step-time histogram of one phase (le: the bucket bounds of
 * node_live_bounds, counts not cumulative; the formatter sums them). */
typedef struct {
    uint64_t bucket[NODE_LIVE_BUCKETS + 1]; /* last: above the last bound */
    uint64_t count;
    double   sum;
} node_live_hist;

typedef struct {
    /* ---- identity and configuration (set once) ---- */
    char     run[17];          /* run id, 16 hex digits */
    char     node[TOPO_ID_MAX];
    int      rank, nodes;
    int      threads;          /* of the kernels (nn_pool.h) */
    char     topology[512], model[32], precision[32], algo[32], compress[96];
    char     endpoint[160];    /* this node's ROUTER */
    double   eta;
    int      staleness;
    long     gossip_every, batch, epochs, iters_per_epoch;
    uint64_t iterations;       /* of the whole run */
    /* ---- progress ---- */
    uint64_t iteration;        /* iterations done */
    double   epoch, lr, loss;  /* loss: moving average of the training loss */
    int      evaluated;        /* 0: no test accuracy yet */
    double   test_accuracy, test_loss;
    double   psi, seconds;     /* since the training loop started */
    uint64_t bytes_sent, bytes_received, msgs_sent, msgs_received;
    int      neighbours, peers_up;
    uint64_t skipped_steps;    /* refused local steps (non-finite, guard) */
    uint64_t catchup_steps;    /* local steps skipped to let neighbours catch up */
    uint64_t refused[NODE_LIVE_NREASONS];
    uint64_t closed_silent;    /* connections closed having delivered nothing */
    node_live_hist step[NODE_LIVE_NPHASES];
    int          nnb;          /* listed neighbours */
    node_live_nb nb[NODE_LIVE_MAX_NB];
} node_live_snap;

typedef struct node_live node_live;

/* A live state whose snapshot starts as *first (identity and zeros). */
node_live *node_live_new(const node_live_snap *first);
void node_live_destroy(node_live **self_p);

/* Training thread: offers s as the latest snapshot.  force 0: if the
 * reader holds the slot right now, s is dropped (returns 0) and the
 * caller offers the next one; force 1: waits for the reader's memcpy (the
 * last snapshot of a run).  1 when taken. */
int node_live_publish(node_live *l, const node_live_snap *s, int force);
void node_live_set_phase(node_live *l, node_live_phase p);

/* HTTP thread: a copy of the latest snapshot, the phase and the seconds
 * spent in it. */
void node_live_read(node_live *l, node_live_snap *out, node_live_phase *phase,
                    double *phase_s);

/* "training", "waiting", "finished", "stopped" or "failed". */
const char *node_live_state(node_live_phase p, double phase_s);

/* The upper bounds (seconds) of the histogram buckets, ascending. */
const double *node_live_bounds(void);
/* Adds one observation of seconds to h. */
void node_live_observe(node_live_hist *h, double seconds);

/* The Prometheus text exposition (version 0.0.4) of s; owned by the
 * caller, *len its length. */
char *node_live_prometheus(const node_live_snap *s, size_t *len);
/* The /status JSON object of s (one line); owned by the caller. */
char *node_live_json(const node_live_snap *s, const char *state, double phase_s, size_t *len);

#endif
