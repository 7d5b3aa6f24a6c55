/* nn_model — a model is a list of ops over activation slots.
 *
 * Owns:    the op graph (ops in forward order, each reading one or two
 *          activation slots and writing one), the parameter / gradient /
 *          buffer arenas (docs/design.md §2: one flat vector each; buffers hold
 *          non-trainable state such as BatchNorm running statistics and
 *          activation ranges), activation and activation-gradient storage,
 *          op-private saved state and one shared scratch area.  Everything is
 *          allocated by nn_model_prepare(); a training step allocates nothing.
 * Exposes: building (the nn_b_* builders used by nn_models.c, dispatched
 *          through an nn_factory so lowprec/ can substitute 8-bit ops without
 *          nn/ knowing about it), forward/backward, evaluation helpers, and
 *          the op-class interface for ops defined outside nn/.
 * Callers: nn_models.c (architectures), lowprec/ (int8 op classes and
 *          factory), node/ (training loops), tests.
 *
 * Gradient flow: a slot read by several ops (a residual block's input)
 * receives the sum of their input gradients.  An op's backward asks
 * nn_model_din() for where to write a slot's gradient and calls
 * nn_model_din_done() afterwards; the first writer writes in place, later
 * ones go through a temporary that is then added.  An op that can add its
 * gradient in place asks nn_model_din_add() instead (no temporary).
 */
#ifndef NN_MODEL_H
#define NN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_core.h"

typedef struct nn_model nn_model;
typedef struct nn_op nn_op;

typedef struct {
    int c, h, w;
} nn_shape;

static inline size_t nn_shape_numel(nn_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

typedef struct nn_op_class {
    const char *kind;
    /* Bytes of op-private saved state for a batch of N (0 if none). */
    size_t (*state_bytes)(const nn_op *op, int N);
    /* Floats of shared scratch the op needs for a batch of N (0 if none). */
    size_t (*scratch_floats)(const nn_op *op, int N);
    /* Bytes of saved activations this op keeps for backward (memory report):
     * what backward reads beyond parameters. NULL = the float input slot. */
    size_t (*saved_bytes)(const nn_op *op, int N);
    void (*forward)(nn_op *op, nn_model *m, int N, int train);
    void (*backward)(nn_op *op, nn_model *m, int N);
    /* Does backward read the float input slot (act[in], and act[in2] for
     * binary ops)?  Backward may read no other activation slot: slots no
     * backward reads share storage with slots whose lifetimes do not
     * overlap (nn_model_prepare), so they are gone after the forward. */
    int reads_input;
} nn_op_class;

struct nn_op {
    const nn_op_class *cls;
    char     name[NN_NAME_MAX];
    int      in, in2, out;      /* activation slots; in2 = -1 unless binary */
    nn_shape ishape, oshape;
    int      p[4];              /* parameter view indices, -1 = none */
    int      b[4];              /* buffer view indices, -1 = none */
    int      k, stride, pad, groups;
    int      flag;              /* op-class specific (e.g. zero-init gamma) */
    float    fparam;            /* op-class specific (dropout probability) */
    void    *state;             /* state_bytes(maxN) bytes, set by prepare */
    int      tag;               /* layer index for per-layer rngs, etc. */
};

/* Builders used by the architectures: each appends op(s) reading slot `in`
 * and returns the output slot.  A factory decides which op classes a model
 * uses (FP32 here, 8-bit in lowprec/); NULL members fall back to FP32. */
typedef struct nn_factory {
    const char *name;          /* "fp32", "int8" */
    int (*conv)(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad,
                int bias);
    int (*linear)(nn_model *m, const char *name, int in, int of, int bias);
    /* zero_gamma: gamma starts at 0 instead of 1 (the last norm of a
     * residual block under nn_model_config.zero_init_residual). */
    int (*norm)(nn_model *m, const char *name, int in, int zero_gamma);
    int (*add)(nn_model *m, const char *name, int a, int b);
    int (*input)(nn_model *m, int in);   /* optional: quantize the input */
} nn_factory;

extern const nn_factory nn_factory_fp32;

typedef enum {
    NN_NORM_EVONORM = 0,   /* EvoNorm-S0 (default, as the paper) */
    NN_NORM_BATCHNORM,     /* baseline */
    NN_NORM_NONE,
} nn_norm_kind;

typedef struct {
    char         arch[32];     /* "cnn", "resnet20", "vgg11" */
    int          in_c, in_h, in_w;
    int          classes;
    nn_norm_kind norm;
    int          groups;       /* EvoNorm groups, default 8 */
    const nn_factory *factory; /* NULL = fp32 */
    /* resnet20: 1 = gamma of each residual block's last norm starts at 0
     * (what the reference does for its 8-bit ResNet), 0 = at 1 like every
     * other norm.  The same for every precision. */
    int          zero_init_residual;
    /* A graph not in nn_models.c (model files, built in node/): when set,
     * nn_model_new calls build(m, build_ctx, ...) instead of nn_arch_build.
     * It appends ops through the nn_b_* builders (the last op's output is
     * the logits, of shape classes x 1 x 1) and returns 0, or -1 with a
     * message; it must check shapes itself (the builders assert).  Used
     * during nn_model_new only: the model's copy of cfg has both cleared. */
    int        (*build)(nn_model *m, const void *ctx, char *err, size_t errlen);
    const void  *build_ctx;
} nn_model_config;

/* Builds the named architecture.  NULL with a message for an unknown name or
 * an input size the architecture cannot take. Parameters are zero until
 * nn_model_init_params(). */
nn_model *nn_model_new(const nn_model_config *cfg, char *err, size_t errlen);
void      nn_model_destroy(nn_model **self_p);

/* Deterministic initialisation from a seed (He-normal fan_out for convs,
 * PyTorch's default for linear layers, norm gamma 1, beta 0, v 1). */
void nn_model_init_params(nn_model *m, uint64_t seed);

/* Allocates activations, gradients, op state and scratch for batches of at
 * most maxN.  Called once; may be called again with a larger maxN.
 * Memory is shared by liveness: a slot that no op's backward reads lives in
 * a buffer shared with slots whose lifetimes (producer to last consumer) do
 * not overlap, and gradient slots likewise in backward order.  After a
 * forward only the logits and slots some backward reads (reads_input) are
 * still valid through nn_model_act(). */
void nn_model_prepare(nn_model *m, int maxN);
/* Bytes nn_model_prepare allocated: activation and gradient buffers, op
 * state, scratch and loss buffers (0 before prepare). */
size_t nn_model_prepared_bytes(const nn_model *m);

/* Forward pass on x (N, in_c, in_h, in_w).  With labels, returns the mean
 * cross-entropy and keeps what backward needs; without, returns 0.
 * train selects batch statistics / stochastic rounding / range tracking. */
float nn_model_forward(nn_model *m, const float *x, const uint8_t *labels, int N, int train);
/* Zeroes the gradient arena, then back-propagates the loss of the last
 * forward (which must have had labels and train = 1). */
void  nn_model_backward(nn_model *m);
/* Logits (N, classes) and softmax probabilities of the last forward. */
const float *nn_model_logits(const nn_model *m);
const float *nn_model_probs(const nn_model *m);
/* Number of correct argmax predictions in the last forward. */
int nn_model_correct(const nn_model *m, const uint8_t *labels, int N);

nn_arena *nn_model_params(nn_model *m);
nn_arena *nn_model_grads(nn_model *m);
nn_arena *nn_model_buffers(nn_model *m);
const nn_model_config *nn_model_cfg(const nn_model *m);
/* Bytes of activations kept for backward for a batch of N (saved by ops). */
size_t nn_model_activation_bytes(const nn_model *m, int N);
int    nn_model_nops(const nn_model *m);
const nn_op *nn_model_op(const nn_model *m, int i);
/* Rough forward FLOPs per sample (convs and linears), for reports. */
double nn_model_flops(const nn_model *m);

/* ---- for op classes -------------------------------------------------- */

/* Adds an op; returns its output slot (a new slot of shape oshape). */
nn_op   *nn_model_add_op(nn_model *m, const nn_op_class *cls, const char *name, int in, int in2,
                         nn_shape oshape);
int      nn_model_op_out(const nn_op *op);
nn_shape nn_model_slot_shape(const nn_model *m, int slot);
/* How nn_model_init_params fills a parameter: He-normal uses std
 * sqrt(2/fan) (fan = fan_out for convs), uniform uses bound 1/sqrt(fan). */
typedef enum {
    NN_INIT_ZERO,
    NN_INIT_ONE,
    NN_INIT_HE_FANOUT,
    NN_INIT_UNIFORM_FANIN,
} nn_param_init;
int      nn_model_add_param(nn_model *m, const char *name, int ndim, const int *shape,
                            nn_param_init init, int fan);
int      nn_model_add_buffer(nn_model *m, const char *name, int ndim, const int *shape);
float   *nn_model_act(nn_model *m, int slot);
float   *nn_model_param(nn_model *m, int view);
float   *nn_model_grad(nn_model *m, int view);
float   *nn_model_buffer(nn_model *m, int view);
float   *nn_model_scratch(nn_model *m);
nn_rng  *nn_model_rng(nn_model *m);
/* Gradient of slot's activation: see the header comment. */
float   *nn_model_dout(nn_model *m, int slot);
float   *nn_model_din(nn_model *m, int slot);
void     nn_model_din_done(nn_model *m, int slot, float *din);
/* The slot's gradient itself, for an op that adds in place: *add = 1 when
 * an op wrote it already (the caller adds its gradient to it: the floats
 * of nn_model_din's temporary and its addition), 0 when the caller is the
 * first writer (it overwrites).  nn_model_din_done after, as above. */
float   *nn_model_din_add(nn_model *m, int slot, int *add);
/* Does anything upstream of this slot need a gradient (else skip din)? */
int      nn_model_needs_din(const nn_model *m, int slot);
int      nn_model_input_slot(const nn_model *m);

/* ---- builders (architectures use these) ------------------------------- */

int nn_b_conv(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad, int bias);
int nn_b_linear(nn_model *m, const char *name, int in, int of, int bias);
int nn_b_norm(nn_model *m, const char *name, int in, int zero_gamma);
int nn_b_add(nn_model *m, const char *name, int a, int b);
int nn_b_relu(nn_model *m, const char *name, int in);
int nn_b_maxpool(nn_model *m, const char *name, int in, int k, int stride);
int nn_b_avgpool(nn_model *m, const char *name, int in, int k, int stride);
int nn_b_gap(nn_model *m, const char *name, int in);
/* BatchNorm whatever cfg.norm says (nn_b_norm follows cfg.norm): FP32 in
 * every precision, parameters NAME.weight, NAME.bias, buffers
 * NAME.running_mean, NAME.running_var. */
int nn_b_batchnorm(nn_model *m, const char *name, int in);
/* (C,H,W) -> (C*H*W,1,1), a copy in the same element order (as
 * torch.flatten(x, 1)); linear layers flatten their input themselves. */
int nn_b_flatten(nn_model *m, const char *name, int in);
/* Inverted dropout with drop probability p in [0, 1) while training, the
 * identity at evaluation.  Masks come from nn_model_rng(m). */
int nn_b_dropout(nn_model *m, const char *name, int in, float p);

/* FP32 op builders (what nn_factory_fp32 points at), for factories that
 * override only some layers. */
int nn_fp32_conv(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad,
                 int bias);
int nn_fp32_linear(nn_model *m, const char *name, int in, int of, int bias);
int nn_fp32_norm(nn_model *m, const char *name, int in, int zero_gamma);
int nn_fp32_add(nn_model *m, const char *name, int a, int b);

/* ---- architectures (nn_models.c) ---------------------------------------- */

/* Fills cfg->arch-specific ops. Returns -1 with a message when the
 * architecture is unknown or cannot take the input size. */
int nn_arch_build(nn_model *m, const nn_model_config *cfg, char *err, size_t errlen);
/* Comma-separated list of architecture names, for --help. */
const char *nn_arch_names(void);

#endif
