/* node_opts — the command-line options of `train`, `simulate` and `node`:
 * one flag table, one parser, one set of help texts.
 *
 * Owns:    node_opts, the typed values of every training command's flags
 *          (enums for model, norm, precision and algorithm, a parsed
 *          compressor), and the defaults derived from them.
 * Exposes: node_opts_parse, which parses argv once for one command and
 *          prints --help / --help-debug and usage errors itself.
 * Callers: node_cmd_train.c, node_cmd_simulate.c, node_cmd_node.c.
 *
 * Flags come in groups; a command accepts the groups of its column:
 *   model, optimisation, run, debug-run          train simulate node
 *   gossip (--topology --algo --compress ...)          simulate node
 *   --eval-nodes                                       simulate
 *   node (--rank --bind --peer ...), debug-link                 node
 * The debug groups (fault injection: --debug-nan-at, --debug-drop) are
 * listed by --help-debug only.  --gamma is the old spelling of --lr-decay
 * (accepted, with a deprecation note on stderr).
 */
#ifndef NODE_OPTS_H
#define NODE_OPTS_H

#include <stdio.h>

#include "gossip/gossip_compress.h"
#include "gossip/gossip_defaults.h"
#include "gossip/gossip_link.h"
#include "gossip/gossip_node.h"
#include "nn/nn_optim.h"
#include "node/node_common.h"

typedef enum { NODE_CMD_TRAIN, NODE_CMD_SIMULATE, NODE_CMD_NODE } node_command;

/* The default of every option is in gossip/gossip_defaults.h. */

/* model, optimisation, run and debug-run flags (every training command) */
typedef struct {
    node_model_opts mo;
    nn_sgd_config   sgd;
    nn_lr_schedule  sched;         /* --lr, --warmup, --milestones, --lr-decay */
    int             have_milestones; /* --milestones given (else 50%, 75% of --epochs) */
    long            epochs, batch, seed, threads;
    long            subset;        /* --train-subset N, 0: all */
    long            eval_every;    /* 0: once per epoch */
    long            eval_subset;   /* progress evaluations on this many test samples (a
                                    * fixed seeded subset; the last one on all); 0: all */
    int             eval_final_subset; /* --eval-final subset: the last one too */
    long            eval_offset;   /* progress evaluations this many iterations earlier
                                    * (run-local staggers the nodes of one machine) */
    int             no_eval;       /* no test-set evaluation, one line at the end */
    long            debug_nan_at;  /* -1, or the iteration whose batch gets a NaN */
    double          grad_guard;    /* --grad-guard F (node_trainer_step); 0: off */
    char            metrics[512];  /* "" or the metrics file (appended) */
    char            save[512];     /* "" or the final model file */
    char            init[512];     /* --init FILE: pretrained weights, or "" */
    char            init_skip[256]; /* --init-skip REGEX, or "" */
} node_train_opts;

/* gossip flags (simulate, node) */
typedef struct {
    char              topology[512];
    gossip_config     gc;          /* algo, compressor (as given), eta, push-sum, seed */
    gossip_compressor comp;        /* --compress, parsed */
    double            skew;        /* non-IID skew of the partition, 0 = IID */
    long              gossip_every; /* H: a gossip round after every H local steps [1] */
    long              eval_nodes;  /* simulate: models evaluated for the mean [all] */
    char              delays[64];  /* simulate: --delays SPEC (gossip_sim.h) ["none"] */
    char              out[512];    /* output directory or "" */
    long              join_rank, join_at; /* simulate --join R@T (rank -1: none) */
} node_gossip_opts;

/* node flags */
typedef struct {
    long               rank;       /* --rank, or from LPGOSSIP_RANK, SLURM_PROCID,
                                      OMPI_COMM_WORLD_RANK, PMI_RANK (first set) */
    const char        *bind, *cert; /* borrowed from argv */
    const char       **peers;      /* --peer ID=EP, borrowed, npeers of them (owned array) */
    int                npeers;
    gossip_link_config lc;         /* --timeout, --peer-timeout*, --fail-on-peer-loss,
                                      --debug-drop */
    int                no_gossip;
    long               ckpt_every; /* -1: once per epoch */
    int                resume;
    const char        *discovery_interface; /* --discovery-interface, borrowed, or NULL */
    double             debug_slow; /* --debug-slow F: run at F of the speed [1] */
    double             yield_pace; /* --yield-pace R, 0: never yield */
    /* --metrics-port SPEC, --metrics-bind ADDR (node_http.h) */
    int                metrics_port;   /* 0 off, -1 auto (a free port), else the port */
    int                metrics_offset; /* > 0: this node's TCP port + metrics_offset */
    const char        *metrics_bind;   /* borrowed [127.0.0.1] */
} node_net_opts;

typedef struct {
    node_command     cmd;
    node_train_opts  t;
    node_gossip_opts g;
    node_net_opts    n;
} node_opts;

/* Parses argv[1..argc) (argv[0] is the command name) for cmd into o, with
 * the defaults derived from the typed values (milestones 50% and 75% of
 * --epochs; eta 1, or 0.01 with a sparsifier, docs/design.md §3).  Returns -1 when
 * the command should go on, else the exit code: 0 after --help or
 * --help-debug, 2 after a usage error (message on stderr).  Free with
 * node_opts_free. */
int  node_opts_parse(node_opts *o, node_command cmd, int argc, char **argv);
void node_opts_free(node_opts *o);
/* A training command's main: parses argv for cmd and, unless that ended
 * it, returns run(&opts) (an exit code). */
int  node_opts_main(node_command cmd, int argc, char **argv, int (*run)(const node_opts *o));

#endif
