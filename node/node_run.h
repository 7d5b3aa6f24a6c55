/* node_run — the one iteration loop of `train`, `simulate` and `node`, and
 * the one metrics writer.
 *
 * Owns:    nothing: a node_run borrows the trainers, gossip vectors and
 *          gossip nodes of the ranks one process drives (train and node:
 *          one; simulate: all of the topology).
 * Exposes: node_run_loop.  For t = it .. iters-1: the local step of every
 *          rank on its de-biased z = x/psi (node_local_step); after
 *          every H steps a gossip round, done by the command's
 *          node_round_ops (none, the in-process gossip_sim or the ZeroMQ
 *          gossip_link); then
 *          nn_sgd_after_mix on every rank (quasi-global momentum, with or
 *          without gossip); a step whose loss or gradient is not finite, or
 *          whose gradient norm the trainer's guard refuses (--grad-guard),
 *          is skipped (x unchanged, nothing non-finite is sent) and
 *          NODE_RUN_MAX_SKIPPED in a row on one rank end the run; at every
 *          eval_every iterations and at the end: evaluation (node_run_eval)
 *          and one metrics line (node_metrics_write, keys in docs/node.md).
 *          Bounded staleness: a rank for which ops->skip says so takes no local
 *          step in that iteration (a mix-only iteration: no batch is
 *          consumed, x is only mixed), counted as steps_skipped; that is how
 *          a lagging node catches up with its neighbours (node) and how
 *          simulate's slow node runs (--delays slow:R:F).  --debug-slow F
 *          (node): after a local step of d seconds the loop serves the
 *          neighbours (ops->serve) for d*(1/F - 1) seconds.
 * Callers: node_cmd_train.c, node_cmd_simulate.c, node_cmd_node.c.
 */
#ifndef NODE_RUN_H
#define NODE_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "gossip/gossip_node.h"
#include "node/node_trainer.h"

#define NODE_RUN_MAX_SKIPPED 20 /* refused steps in a row that end the run */

/* Cumulative wall-clock seconds of a run's phases. */
typedef struct {
    double compute;  /* local steps */
    double gossip;   /* gossip rounds, all of it */
    double compress; /* of which gossip_node_prepare (ZeroMQ link only) */
    double wait;     /* of which sending and waiting (ZeroMQ link only) */
    double mix;      /* of which mixing (ZeroMQ link only) */
    double eval;     /* test-set evaluations */
} node_times;

/* What a command plugs into the run loop: one table of operations, each
 * called with the command's context (node_run.ctx, the same pointer for
 * all; a command whose operations need no context leaves it NULL).  Any
 * member may be NULL: the loop then does without it, as said.  The loop
 * calls them in this order per iteration it: catch_up (when it starts a
 * round), skip (per rank), the local steps, round (when one is due; else
 * serve), after_iter, and at an evaluation report; log at any time.
 *
 *   round(ctx, x, round, tm, err, errlen)  runs gossip round `round` on the
 *       driven ranks' x[0..n) (prepare, deliver, mix: x and psi
 *       overwritten) and adds the seconds of its phases to tm->compress,
 *       tm->wait and tm->mix (tm->gossip is the loop's); 0, or -1 with a
 *       message.  NULL: no gossip (train, node --no-gossip).
 *   serve(ctx)  keeps the neighbours served: between rounds, during an
 *       evaluation and while --debug-slow holds a node back.  NULL: nobody
 *       to serve.
 *   catch_up(ctx, &it, err, errlen)  before the local steps of an iteration
 *       that starts a gossip round: 1 when the node moved to a later
 *       iteration *it (a re-join after falling behind; the learning rate
 *       follows it), 0 nothing, -1 with a message.
 *   skip(ctx, r, i)  1 when rank index i takes no local step in iteration
 *       r->it (a mix-only iteration, see the top of this file), decided from
 *       the run's state r (its times r->tm, its gossip node r->g[i]).  NULL:
 *       every rank always steps.
 *   after_iter(ctx, done)  after iteration done-1 is complete, its round
 *       mixed: checkpoints, the live state.
 *   log(ctx, msg)  a message of the loop (a refused step); in a run that
 *       drives several ranks it starts with "node R: ".
 *   report(ctx, r, m)  at an evaluation: adds the command's own keys to m
 *       (from r and its context) and prints its console line, before m is
 *       written to the metrics file. */
typedef struct node_run node_run;
typedef struct node_metrics node_metrics;
typedef struct {
    int  (*round)(void *ctx, float **x, uint64_t round, node_times *tm, char *err,
                  size_t errlen);
    void (*serve)(void *ctx);
    int  (*catch_up)(void *ctx, uint64_t *it, char *err, size_t errlen);
    int  (*skip)(void *ctx, const node_run *r, int i);
    void (*after_iter)(void *ctx, uint64_t done);
    void (*log)(void *ctx, const char *msg);
    void (*report)(void *ctx, const node_run *r, node_metrics *m);
} node_round_ops;

/* What a node knows about one in-neighbour, for the metrics (node). */
typedef struct {
    int      rank;
    uint64_t staleness;  /* t - newest iteration of its mixed at the last mix */
    uint64_t no_fresh;   /* mixes that went ahead without its message of t */
    double   wait_s;     /* seconds the rounds waited for it */
} node_nb_metrics;

/* One named counter of a metrics line. */
typedef struct {
    const char *key;
    uint64_t    v;
} node_count;

/* One metrics line.  Groups: the core keys (every command), the gossip
 * keys (simulate and node: gossip set), the simulate keys (sim set) and
 * the link keys (node: ns/ls set, NULL without sockets). */
struct node_metrics {
    const char *command;          /* "train" | "simulate" | "node" */
    int         rank;             /* -1: all ranks (simulate) */
    int         nodes;
    uint64_t    iter;             /* iterations done */
    double      epoch, lr;        /* lr of the last iteration */
    double      loss, train_acc;  /* training batches since the last line */
    double      samples_per_s;    /* of the local steps since the last line */
    int         evaluated;        /* 0: test_acc/test_loss are null */
    uint64_t    eval_samples;     /* test samples behind test_acc (a subset or all) */
    double      test_acc, test_loss; /* the model (simulate: the average model) */
    uint64_t    skipped_steps;    /* refused local steps: non-finite or guard */
    uint64_t    skipped_large;    /*   of which refused by the gradient-norm guard */
    double      seconds;          /* since the run started */
    node_times  tm;
    const char *model, *precision;
    /* gossip (simulate, node) */
    int         gossip;
    const char *algo, *compress;
    double      eta, skew, psi;   /* psi: this node's (simulate: rank 0's) */
    double      gossip_bytes_sent; /* encoded messages (simulate: mean per node) */
    /* simulate */
    int         sim;
    double      mean_node_acc;    /* NaN: not evaluated (null) */
    double      consensus;
    /* node */
    const gossip_stats      *gs;
    /* the transport's counters, written in this order after gs's (their
     * keys: docs/node.md); filled by the caller that drives the sockets */
    const node_count        *link;
    size_t                   nlink;
    /* bounded staleness (node): per in-neighbour; steps_skipped in gossip */
    uint64_t               steps_skipped; /* local steps skipped to catch up */
    int                    staleness;     /* --staleness S */
    int                    nnb;
    const node_nb_metrics *nb;
};

/* Appends m as one JSON object on one line to f and flushes. */
void node_metrics_write(FILE *f, const node_metrics *m);

struct node_run {
    /* ---- set by the caller ---- */
    int                    n;          /* ranks driven by this process */
    int                    rank0;      /* rank of tr[0] */
    node_trainer          *tr;         /* [n] */
    float                **x;          /* [n] gossip variables (may be the models' params) */
    gossip_node          **g;          /* [n] gossip nodes, or NULL (no gossip node at all) */
    const node_data       *d;
    const node_train_opts *o;
    long                   steps;      /* iterations per epoch */
    uint64_t               H;          /* local steps per gossip round (>= 1) */
    uint64_t               it, iters;  /* first iteration, end */
    long                   eval_nodes; /* ranks whose own model is evaluated */
    nn_model              *avg;        /* n > 1: the average model, evaluated */
    const node_round_ops  *ops;        /* what the command plugs in (never NULL) */
    void                  *ctx;        /* passed to every operation of ops */
    volatile sig_atomic_t *stop;       /* nonzero: stop before the next iteration */
    FILE                  *metrics;    /* may be NULL */
    node_metrics           meta;       /* command, rank, nodes, gossip identity */
    double slow;             /* --debug-slow F (node); 0 or 1: full speed */
    /* ---- state ---- */
    node_times tm;
    uint64_t   skipped;      /* refused steps (non-finite or guard), all ranks */
    uint64_t   skipped_large; /*   of which refused by the gradient-norm guard */
    uint64_t   catchup;      /* local steps skipped by ops->skip, all ranks */
    int        interrupted;  /* stopped by *stop */
    double     t0, t_line, compute_line;
    float      lr;
    uint32_t  *eval_sub;     /* progress evaluations' test samples (NULL: all) */
    size_t     eval_sub_n;
};

/* Catch-up decision of a node with bounded staleness (node_cmd_node.c
 * s_skip, docs/gossip.md "Catch-up of a slow node"): called before each
 * local step with the run's cumulative times and gossip_node_ahead.  1:
 * take a mix-only iteration (a neighbour is a whole iteration ahead and
 * this node was not held back); 0: take the step.  Held back = the
 * iteration since the last call waited for neighbours longer than half a
 * local step (EWMA of the steps taken): such a node is behind because it
 * was made to wait, not because it is slow, and skipping would only hand
 * the lag on to the next node (a node that is slow at everything, e.g.
 * under a CPU quota, otherwise makes its fast neighbours skip most of
 * their steps). */
/* A node that holds its neighbours up (after its step they are S - 1
 * iterations ahead: they ran into the staleness bound and waited for it)
 * also yields: once level it takes K more mix-only iterations, each about
 * as long as a neighbour's iteration (their period P, measured on these
 * iterations), with K chosen so that its neighbours' pace is at least
 * 1/pace of their own: during its step d they do S + 1
 * iterations' work (the last one's mix waits), so K = (d/P - r (S + 1)) /
 * (r - 1), r = pace (--yield-pace; 0: never yields); K is at most the number of periods measured
 * (one short sample cannot make a node of normal speed yield for long).
 * Set stale = S and pace before the first call. */
#define NODE_YIELD_MAX  32 /* mix-only iterations in a row, at most */
typedef struct {
    double wait, compute; /* tm at the last call */
    double step_s;        /* EWMA of a local step's seconds, 0: none yet */
    uint64_t held;        /* decisions not to skip because held back */
    int stale;            /* S of the run */
    double pace;          /* r, 0: never yield */
    double last;          /* wall clock at the last call, 0: none */
    double period;        /* EWMA of a yielded iteration's seconds, 0: none */
    uint64_t periods;     /* yielded iterations measured (K is at most this) */
    int yielding;         /* the last iteration was a yield */
    int yield_left;       /* yields still owed */
    uint64_t yielded;     /* yields taken */
} node_skip_state;
int node_skip_decide(node_skip_state *st, const node_times *tm, uint64_t ahead, double now);

/* Runs iterations r->it .. r->iters-1 (r->it is then the number done).
 * 0: done or interrupted (r->interrupted); -1 with a message: diverged or
 * a gossip round failed. */
int node_run_loop(node_run *r, char *err, size_t errlen);

/* Writes rank i's de-biased model z = x/psi into its model's parameters
 * (z = x without a gossip node). */
void node_run_debias(node_run *r, int i);

/* Evaluation at iteration r->it: de-biases every rank's x into its model,
 * evaluates (unless o->no_eval) the average model (n > 1) and the first
 * eval_nodes models (on r->eval_sub before the last iteration), fills m with the training statistics since the last
 * call (then reset) and the results. */
void node_run_eval(node_run *r, node_metrics *m);

#endif
