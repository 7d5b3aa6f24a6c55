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
 *            format "lpgossip-ckpt", version "1",
 *            iter (iterations completed), psi (C99 hex float, exact),
 *            rng_model, rng_aug, rng_comp (xoshiro state: 4 x 16 hex digits),
 *            sampler_pos (decimal), sgd_last_lr (hex float), gossip_every
 *            (local steps per gossip round; a file without it means 1),
 *            plus the caller's identity pairs (model, algo, topology, rank,
 *            ...): a checkpoint whose identity differs is refused, naming
 *            the first differing key and both values.
 * Exposes: node_ckpt_save / node_ckpt_load over a node_ckpt that points at
 *          the live state (nothing is copied into the struct).
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

#define NODE_CKPT_MAX_IDENT 16

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
} node_ckpt;

/* Writes the checkpoint of the state after `iter` completed iterations
 * (with gossip, iter / gossip_every must equal gossip_node_iter(c->g):
 * called between mix and the next prepare).  Atomic (see above).  0, or -1 with a message. */
int node_ckpt_save(const char *path, const node_ckpt *c, uint64_t iter, char *err, size_t errlen);

/* Restores the state pointed at by c from `path` and writes the number of
 * completed iterations to *iter.  The file is refused (-1 with a message
 * naming the file and the problem) when it is not a valid safetensors file
 * (truncated, corrupt), not an lpgossip checkpoint, of another identity
 * (model, algorithm, topology, rank, ...), or lacks a tensor of this layout.
 * Everything is validated and read into temporaries first: on error the
 * live state is unchanged. */
int node_ckpt_load(const char *path, node_ckpt *c, uint64_t *iter, char *err, size_t errlen);

#endif
