/* nn_model_int — inside the nn_model module only: the model object, and
 * what the graph's life cycle takes from the op classes' file.
 *
 * Owns:    nothing; declares struct nn_model, whose fields nn_model.c
 *          writes (it builds, prepares and runs the graph) and the FP32 op
 *          classes of nn_model_ops.c read and write as they run (activation
 *          slots, gradients, scratch, the dropout RNG).
 * Exposes: struct nn_model; nn_model_bn_class (nn_model_new starts
 *          BatchNorm's running variance at 1); nn_model_factory (the
 *          model's factory, nn_factory_fp32 when it names none).
 * Callers: nn_model.c, nn_model_ops.c.  Not for other modules: they see
 *          nn_model.h.
 */
#ifndef NN_MODEL_INT_H
#define NN_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_model.h"

struct nn_model {
    nn_model_config cfg;
    nn_arena params, grads, buffers;
    nn_param_init *pinit;     /* per parameter view */
    int     *pfan;
    size_t   cap_pinit;

    nn_op *ops;
    int    nops, cap_ops;

    nn_shape *shapes;   /* per slot */
    int       nslots, cap_slots;
    int       input_slot, logits_slot;

    /* prepared storage */
    int       maxN, lastN;
    float   **act, **dact;    /* per slot: views into the buffers below */
    float   **bufs;           /* owned activation / gradient buffers */
    int       nbufs;
    size_t    prepared_bytes;
    int      *written;  /* per slot: gradient already written this backward */
    int      *needs;    /* per slot: gradient needed */
    float    *scratch;
    size_t    scratch_n;
    float    *gtmp;
    float    *probs;
    uint8_t  *labels;
    nn_rng    rng;
    int       backward_ready;
};

/* The FP32 BatchNorm op class (nn_model_ops.c). */
extern const nn_op_class nn_model_bn_class;

/* m's factory: its configuration's, or nn_factory_fp32 when that is NULL. */
const nn_factory *nn_model_factory(const nn_model *m);

#endif
