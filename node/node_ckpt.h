/* node_ckpt — crash-safe checkpoints of one node of a gossip run.
 *
 * Owns:    the checkpoint file format: one safetensors file
 *          (nn_safetensors_save_prefixed: temp file, fsync, rename, fsync of
 *          the directory, so the file at `path` is always either the previous
 *          complete checkpoint or the new complete one) holding, as F32
 *          tensors with the parameter layout,
 *            x.<view>           the gossip variable x (not the de-biased z)
 *            momentum.<view>    SGD momentum
 *            qgm_prev.<view>    x_t of quasi-global momentum (when --qgm)
 *            gossip.<name>.<view>  the gossip_node state vectors
 *                               (xhat.self, xhat.R for choco, e for deepsqueeze)
 *            buffers.<view>     model buffers (8-bit activation ranges), if any
 *          and in __metadata__ (all strings):
 *            format "lpgossip-ckpt", version "2",
 *            iter (iterations completed), psi (C99 hex float, exact),
 *            rng_model, rng_aug, rng_comp (xoshiro state: 4 x 16 hex digits),
 *            sampler_pos (decimal), sgd_last_lr (hex float), gossip_every
 *            (local steps per gossip round),
 *            plus the caller's identity pairs (node_ckpt_ident_make: model,
 *            algo, topology_digest, skew, rank, ...): a checkpoint whose
 *            identity differs is refused, naming the first differing key
 *            and both values;
 *            run_digest: 16 hex digits, FNV-1a 64 over the identity pairs
 *            (key NUL value NUL ...), compared as well;
 *            parts: "COUNT:FNV-1a 64 of the prefixes" of the tensor groups
 *            above (a file with other groups, e.g. written with --qgm or
 *            gossip state this run lacks, is refused by name);
 *            crc32: 8 hex digits, CRC-32 (zlib) over every tensor's bytes
 *            as stored (little-endian F32, in the order of the list above,
 *            views in layout order) and then over the values of iter, psi,
 *            rng_model, rng_aug, rng_comp, sampler_pos, sgd_last_lr,
 *            gossip_every, run_digest and parts, each followed by a NUL byte.
 *          The checksum and digests catch corruption and mismatched runs;
 *          they are not a signature (whoever can write the file can
 *          recompute them).  Version 1 files (no checksum) are refused.
 * Exposes: node_ckpt_save / node_ckpt_load over a node_ckpt that points at
 *          the live state (nothing is copied into the struct), and
 *          node_ckpt_ident_make: the identity pairs of a run from plain
 *          values.
 * Callers: node_cmd_node.c (--checkpoint-every, --resume), tests.
 */
#ifndef NODE_CKPT_H
#define NODE_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_node.h"
#include "nn/nn_core.h"
#include "nn/nn_data.h"
#include "nn/nn_optim.h"

#define NODE_CKPT_MAX_IDENT 24

typedef struct {
    const nn_arena *layout;    /* parameter layout (views used) */
    float          *x;         /* gossip variable, layout->numel floats */
    nn_sgd         *sgd;       /* momentum (+ qgm prev) */
    nn_arena       *buffers;   /* model buffers, or NULL / no views */
    gossip_node    *g;         /* gossip state, or NULL (no gossip) */
    nn_rng         *model_rng; /* stochastic rounding etc., or NULL */
    nn_rng         *aug_rng;   /* augmentation, or NULL */
    nn_sampler     *sampler;   /* data order, or NULL */
    /* identity: {key0, value0, key1, value1, ..., NULL}, at most
     * NODE_CKPT_MAX_IDENT pairs; keys must not clash with the keys above */
    const char *const *ident;
    /* local steps per gossip round (--gossip-every); 0 or 1: one round per
     * iteration.  After `iter` iterations the gossip node has done
     * iter / gossip_every rounds. */
    uint64_t gossip_every;
    /* the run's total iterations: a checkpoint further along is refused
     * (0: not checked) */
    uint64_t max_iter;
} node_ckpt;

/* What defines a run, as plain values (the flags a resumed node must
 * repeat; --epochs, learning-rate, timeout and output flags are not in it). */
typedef struct {
    const char *model, *norm, *precision, *data; /* --model --norm --precision --data */
    int         groups;                          /* EvoNorm groups */
    const char *algo, *compressor;               /* --algo, --compress */
    double      eta;                             /* the consensus step in force */
    int         push_sum;                        /* 1 on, 0 off */
    double      skew;                            /* --skew */
    long        train_subset;                    /* --train-subset (0: all) */
    long        seed, batch;                     /* --seed, --batch */
    uint32_t    layout;                          /* gossip_node_fingerprint */
    const char *topology_path;                   /* its contents are digested */
    int         nodes, rank;
    const char *model_digest;  /* "" / NULL, or a model file's digest (node_model_digest) */
    const char *init_path;     /* "" / NULL, or the --init file (its contents are digested) */
    const char *data_opts;                       /* node_data_ident: the data flags
                                                    (--partition, --image-size, ...);
                                                    NULL or "": none (no key) */
} node_ckpt_run;

/* The identity pairs of a run: kv is {key0, value0, ..., NULL} pointing
 * into buf, ready for node_ckpt.ident. */
typedef struct {
    char        buf[2048];
    const char *kv[2 * NODE_CKPT_MAX_IDENT + 1];
} node_ckpt_ident;

/* Fills id from run: model, norm, precision, data, groups, algo,
 * compressor, eta, push_sum, skew, train_subset, seed, batch, layout,
 * topology ("NAME (N nodes)"), topology_digest (FNV-1a 64 of the file's
 * bytes), rank, and model_digest / init_digest (of init_path) when given (model files,
 * --init: absent otherwise, so built-in runs keep their identity).  0, or -1 with a message when the topology file cannot be
 * read. */
int node_ckpt_ident_make(node_ckpt_ident *id, const node_ckpt_run *run, char *err,
                         size_t errlen);

/* Writes the checkpoint of the state after `iter` completed iterations
 * (with gossip, iter / gossip_every must equal gossip_node_iter(c->g):
 * called between mix and the next prepare).  Atomic (see above).  A state
 * holding a non-finite value is not written (the previous checkpoint stays):
 * -1 with a message naming the tensor.  0, or -1 with a message. */
int node_ckpt_save(const char *path, const node_ckpt *c, uint64_t iter, char *err, size_t errlen);

/* Restores the state pointed at by c from `path` and writes the number of
 * completed iterations to *iter.  The file is refused (-1 with a message
 * naming the file and the problem) when it is not a valid safetensors file
 * (truncated, corrupt), not an lpgossip checkpoint of this version, of
 * another identity (model, algorithm, topology contents, partition flags,
 * rank, ...), lacks a tensor of this layout, fails its checksum, holds a
 * non-finite value, or records an iteration beyond c->max_iter.
 * Everything is validated and read into temporaries first: on error the
 * live state is unchanged. */
int node_ckpt_load(const char *path, node_ckpt *c, uint64_t *iter, char *err, size_t errlen);

#endif
