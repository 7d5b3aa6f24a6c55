/* lp_model — 8-bit op classes for the model graph (nn_model.h) and the
 * factories that build models with them (docs/design.md §5).
 *
 * Owns:    four op classes per flavour, wrapping the kernels of lp_layers.h:
 *            conv    lp_conv2d_*         linear  lp_linear_*
 *            norm    lp_range_evonorm_*  add     lp_add_*
 *          in two flavours:
 *            "int8"      real integer arithmetic; backward reads only the
 *                        op's own saved uint8 codes + lp_qparams (op->state),
 *                        never the float input slot (reads_input = 0), so the
 *                        model can reuse activation memory (nn_model_prepare);
 *            "fakequant" the reference's float simulation (the *_fq twins),
 *                        which keeps the float input for backward; used by
 *                        tests as the oracle of the int8 path.
 *          Parameters are named and shaped exactly as the FP32 builders do
 *          (conv "X.weight" [OC,C,K,K] (+ "X.bias" [OC]); linear "X.weight"
 *          [OF,F], "X.bias" [OF]; norm "X.weight" (gamma), "X.bias" (beta),
 *          "X.v", all [C]) with the same nn_param_init kinds, so parameter
 *          files and gossip layouts are interchangeable between precisions.
 *          Non-trainable state lives in the buffer arena (saved with the
 *          model): "X.act_range" [2] = running (min, max) of the op's input
 *          (the add has [2,2]: row 0 input a, row 1 input b), updated while
 *          training and used at evaluation (train = 0).
 *          Seeds of stochastic rounding: each training forward draws one
 *          64-bit value from nn_model_rng(m) per op and mixes it with the op's
 *          tag (layer index) and the direction (forward activation, second
 *          add input, backward gradient), so they are distinct per layer, per
 *          step and per direction, and two models initialised with the same
 *          seed (nn_model_init_params) draw the same seeds.  Evaluation
 *          forwards draw nothing (they round to nearest).
 *          Norm: Range EvoNorm needs cfg.norm == NN_NORM_EVONORM; BatchNorm
 *          and "none" stay FP32.  Groups as FP32 EvoNorm (min(groups, C),
 *          lowered until it divides C), then lowered further until a group
 *          holds T = (C/G)*H*W >= 32 values (Range EvoNorm's chunking needs
 *          it); if even G = 1 is too small the FP32 EvoNorm is used.
 * Exposes: the factories and lp_factory_by_name().
 * Callers: node/ (--precision), tests, bench.
 */
#ifndef LP_MODEL_H
#define LP_MODEL_H

#include "nn/nn_model.h"

/* name "int8": integer conv / linear / Range EvoNorm / quantized add. */
extern const nn_factory lp_factory_int8;
/* name "fakequant": the same quantization simulated in float (oracle). */
extern const nn_factory lp_factory_fakequant;

/* name "int8check": the test oracle.  Every conv / linear / norm runs the
 * integer and the fake-quant computation on the same input (and in backward
 * on the same incoming gradient), remembers how far apart the two are, and
 * passes the integer results on, so a whole model is checked layer by layer
 * at float-rounding precision (an end-to-end comparison of two separate
 * models drifts apart when float rounding moves a value across a rounding
 * boundary of a later quantizer).  Keeps float inputs: no memory savings. */
extern const nn_factory lp_factory_int8_checked;
typedef enum {
    LP_CHECK_FORWARD,   /* op outputs of the last forward */
    LP_CHECK_DIN,       /* input gradients of the last backward */
    LP_CHECK_DPARAM,    /* parameter gradients of the last backward */
} lp_check_what;
/* For a model built with lp_factory_int8_checked: the largest discrepancy
 * over all checked ops, in units of the float-rounding budget
 *   |int - fq| <= 1e-5 * max|fq| + 1e-5 * |fq|   (per tensor),
 * so <= 1 means within budget.  INFINITY when the running ranges disagree;
 * NaN propagates.  0 for models without checked ops. */
float lp_model_check_error(const nn_model *m, lp_check_what what);

/* The factory for a --precision value: NULL for "fp32" (nn_model_new's
 * default), &lp_factory_int8 for "int8", &lp_factory_fakequant for
 * "fakequant".  Unknown names also give NULL (the CLI parses the name into
 * node_precision before it gets here). */
const nn_factory *lp_factory_by_name(const char *precision);

#endif
