/* node_trainer — one rank's local training state and its local step.
 *
 * Owns:    node_trainer: one rank's model, optimiser, data shard, sampler
 *          and augmentation RNG.
 * Exposes: node_trainer_step, which evaluates the gradient at the model's
 *          current parameters (the de-biased z = x/psi under push-sum) and
 *          applies the SGD step to the gossip variable x; the data shards
 *          and the learning rate of an iteration, the same in every command.
 * Callers: node_run.c and the commands (node_cmd_*.c).
 */
#ifndef NODE_TRAINER_H
#define NODE_TRAINER_H

#include <stdio.h>

#include "gossip/gossip_node.h"
#include "nn/nn_optim.h"
#include "node/node_opts.h"

typedef struct {
    nn_model  *model;
    nn_sgd     sgd;
    nn_sampler sampler;
    nn_rng     aug_rng;
    float     *xb;          /* batch inputs */
    uint8_t   *yb;          /* batch labels */
    int        batch;
    size_t     shard_n;
    long       steps_per_epoch;
    int        poison_next; /* fault injection: the next batch gets a NaN pixel */
    float     *x1;          /* NULL or the parameter count: x after an unscaled
                               step (node_local_step, push-sum with staleness) */
    /* gradient-norm guard (node_trainer_step): refuse a step whose gradient
     * L2 norm is above guard x gnorm_ema once NODE_GUARD_WARMUP steps were
     * accepted; gnorm_ema is the running mean of the accepted steps' norms,
     * then an EMA with weight 1/NODE_GUARD_WARMUP */
    double     guard;       /* --grad-guard F; 0: off */
    double     gnorm_ema;
    uint64_t   gnorm_n;     /* accepted steps in gnorm_ema */
    double     last_gnorm;  /* the last step's norm (NaN: not finite) */
    int        refused;     /* why the last step returned NaN: NODE_STEP_* */
    /* running statistics since node_trainer_reset_stats */
    double     loss_sum;
    size_t     seen, correct;
} node_trainer;

/* node_trainer.refused: why the last node_trainer_step was refused. */
enum { NODE_STEP_OK = 0, NODE_STEP_NONFINITE, NODE_STEP_LARGE };
#define NODE_GUARD_WARMUP 50     /* accepted steps before the norm guard acts */

/* Builds and initialises (seed o->seed: identical weights on every rank) the
 * model, the optimiser over `layout`-shaped parameters and a sampler over
 * shard[0..n) seeded by (seed, rank).  -1 with a message on error (an empty
 * shard, a model that does not fit the data). */
int  node_trainer_init(node_trainer *t, const node_train_opts *o, const node_data *d,
                       const uint32_t *shard, size_t n, int rank, char *err, size_t errlen);
/* One local step at learning rate lr: a batch from the shard, forward and
 * backward at the model's parameters (z), then the SGD update of x (weight
 * decay at z; x may be the model's own parameter vector).  Returns the batch
 * loss.  Refused steps leave x (and the momentum) untouched and return NaN,
 * t->refused saying why: a non-finite loss or gradient (NODE_STEP_NONFINITE),
 * or a finite gradient whose L2 norm is above t->guard times the recent
 * level (NODE_STEP_LARGE; see the fields above), which one wild batch (an
 * int8 blow-up, a diverging local run) would otherwise apply to the model
 * and send to the neighbours.  The norm comes from the pass that checks
 * finiteness (a double sum in a fixed order: deterministic). */
float node_trainer_step(node_trainer *t, const node_data *d, float *x, float lr);
void node_trainer_reset_stats(node_trainer *t);
void node_trainer_free(node_trainer *t);

/* The skew partition of the (possibly --train-subset) training set over
 * `nodes` ranks, seeded by --seed: every process computes the same shards.
 * One node holds the whole set in its order (what `train` always did).
 * shard[0..nodes) are owned by the caller (nn_partition_free). */
int node_shards_make(const node_train_opts *o, const node_data *d, int nodes, double skew,
                     uint32_t **shard, size_t *count, char *err, size_t errlen);

/* Learning rate of iteration `iter` with `steps` iterations per epoch. */
float node_lr_at_iter(const node_train_opts *o, uint64_t iter, long steps);

/* The local step of every command: applies g's momentum-factor masking to
 * the SGD momentum (dgc: zero where g's last message carried values,
 * gossip_node_mask_sent), de-biases x into the model's parameters
 * (z = x/psi of g) and applies node_trainer_step to x; with push-sum and
 * bounded staleness to a copy of x, which gossip_node_step_apply weighs
 * into x.  g NULL (no gossip node): x is copied into the model's
 * parameters.  Returns the loss. */
float node_local_step(node_trainer *t, const node_data *d, gossip_node *g, float *x, float lr);

/* The ranks one process trains: the data set, the partition of an n-rank
 * run and the trainers and gossip vectors of ranks first .. first+k-1. */
typedef struct {
    node_data     d;
    int           nodes;     /* ranks of the run */
    uint32_t    **shard;     /* [nodes] */
    size_t       *count;     /* [nodes] */
    int           first, k;  /* the ranks trained here */
    node_trainer *tr;        /* [k] */
    float       **x;         /* [k] gossip variables, initialised to the models' weights */
    long          steps;     /* iterations per epoch: from shard 0, the same on every rank */
} node_ranks;

/* Loads the data, partitions it (skew) and builds the k trainers.  -1 with
 * a message on error; node_ranks_free in every case. */
int  node_ranks_init(node_ranks *r, const node_train_opts *o, int nodes, double skew, int first,
                     int k, char *err, size_t errlen);
void node_ranks_free(node_ranks *r);

#endif
