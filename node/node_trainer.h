/* node_trainer — the training flags every training command shares, and one
 * node's local training state.
 *
 * Owns:    node_train_opts (model, data, optimiser and run flags of `train`,
 *          `simulate` and `node`, with one parser and one --help block), and
 *          node_trainer: one rank's model, optimiser, data shard, sampler and
 *          augmentation RNG.
 * Exposes: the flag table and parser; node_trainer_step, which evaluates the
 *          gradient at the model's current parameters (the de-biased
 *          z = x/psi under push-sum) and applies the SGD step to the gossip
 *          variable x.
 * Callers: node_cmd_train.c, node_cmd_simulate.c (and the ZeroMQ node).
 */
#ifndef NODE_TRAINER_H
#define NODE_TRAINER_H

#include <getopt.h>
#include <stdio.h>

#include "gossip/gossip_node.h"
#include "nn/nn_optim.h"
#include "node/node_common.h"

typedef struct {
    node_model_opts mo;
    nn_sgd_config   sgd;
    nn_lr_schedule  sched;
    long            epochs, batch, seed, threads, subset;
    int             have_milestones;
    char            metrics[512];
    char            save[512];
} node_train_opts;

void node_train_opts_defaults(node_train_opts *o);
/* getopt_long table of the shared flags (terminated by a zero entry), and
 * a joined copy with a command's own table (free() it). */
extern const struct option node_train_options[];
struct option *node_options_join(const struct option *own);
/* Handles one getopt_long result: 1 if it was a shared flag (stored),
 * 0 if not a shared flag, -1 on a bad value (message in err). */
int  node_train_opt(node_train_opts *o, int code, const char *arg, char *err, size_t errlen);
/* Default milestones (50% and 75% of --epochs) when none were given. */
void node_train_opts_finish(node_train_opts *o);
/* The shared part of --help. */
void node_train_usage(FILE *f);

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
    /* running statistics since node_trainer_reset_stats */
    double     loss_sum;
    size_t     seen, correct;
} node_trainer;

/* Builds and initialises (seed o->seed: identical weights on every rank) the
 * model, the optimiser over `layout`-shaped parameters and a sampler over
 * shard[0..n) seeded by (seed, rank).  -1 with a message on error (an empty
 * shard, a model that does not fit the data). */
int  node_trainer_init(node_trainer *t, const node_train_opts *o, const node_data *d,
                       const uint32_t *shard, size_t n, int rank, char *err, size_t errlen);
/* One local step at learning rate lr: a batch from the shard, forward and
 * backward at the model's parameters (z), then the SGD update of x (weight
 * decay at z; x may be the model's own parameter vector).  Returns the batch
 * loss; a non-finite loss or gradient leaves x untouched and returns NaN. */
float node_trainer_step(node_trainer *t, const node_data *d, float *x, float lr);
void node_trainer_reset_stats(node_trainer *t);
void node_trainer_free(node_trainer *t);

/* ---- shared by `simulate` and `node` (the gossip runs) ----------------- */

/* The gossip flags of `simulate` and `node`: --algo --compress --eta
 * --no-push-sum --skew --eval-every --gossip-every --out.  With
 * --gossip-every H, iteration t is always one local step (learning rate,
 * evaluation, checkpoints and epochs count local steps) and gossip round r
 * follows iteration (r+1)H - 1: the gossip node counts rounds. */
typedef struct {
    gossip_config gc;          /* algo, compressor, push-sum; eta and seed by finish */
    double        eta;         /* -1: default (1, or 0.01 with topk/randk) */
    double        skew;        /* non-IID skew of the partition, 0 = IID */
    long          eval_every;  /* 0: once per epoch */
    long          gossip_every; /* H: a gossip round after every H local steps [1] */
    char          out[512];    /* output directory or "" */
} node_gossip_opts;

extern const struct option node_gossip_options[];
void node_gossip_opts_defaults(node_gossip_opts *g);
/* Like node_train_opt for the gossip flags: 1 stored, 0 not ours, -1 bad. */
int  node_gossip_opt(node_gossip_opts *g, int code, const char *arg, char *err, size_t errlen);
/* Fills gc.eta (default rule of DESIGN §3) and gc.seed from o. */
void node_gossip_opts_finish(node_gossip_opts *g, const node_train_opts *o);
void node_gossip_usage(FILE *f);
/* a + b joined into one getopt_long table (free() it). */
struct option *node_options_concat(const struct option *a, const struct option *b);

/* The skew partition of the (possibly --train-subset) training set over
 * `nodes` ranks, seeded by --seed: every process computes the same shards.
 * shard[0..nodes) are owned by the caller (nn_partition_free). */
int node_shards_make(const node_train_opts *o, const node_data *d, int nodes, double skew,
                     uint32_t **shard, size_t *count, char *err, size_t errlen);

/* Learning rate of iteration `iter` with `steps` iterations per epoch. */
float node_lr_at_iter(const node_train_opts *o, uint64_t iter, long steps);

/* The local step of a gossip run: applies g's momentum-factor masking to
 * the SGD momentum (dgc: zero where g's last message carried values,
 * gossip_node_mask_sent), de-biases x into the model's parameters
 * (z = x/psi of g) and applies node_trainer_step to x.  Returns the loss. */
float node_gossip_local_step(node_trainer *t, const node_data *d, const gossip_node *g, float *x,
                             float lr);

#endif
