/* lp_layer_common — what the 8-bit layer files share (internal to lowprec/).
 *
 * Owns:    the quantization prologue of the conv and linear forwards (input,
 *          weights and bias, for the integer path and its fake-quant twin),
 *          the activation quantizer of a mode, and the scratch carving.
 * Exposes: LP_ALIGN64, lp_take, lp_quant_act, lp_param_fq, lp_operands,
 *          lp_layer_quantize.
 * Callers: lp_conv.c, lp_conv_shift.c, lp_conv_wgrad.c, lp_linear.c, lp_norm.c,
 *          lp_add.c.
 */
#ifndef LP_LAYER_COMMON_H
#define LP_LAYER_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_layers.h"

#define LP_ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* The next bytes of a scratch cursor, rounded up to 64 bytes. */
static inline void *lp_take(unsigned char **p, size_t bytes)
{
    void *r = *p;
    *p += LP_ALIGN64(bytes);
    return r;
}

/* q (n) = codes of the activation x (n): stochastic rounding with mode.seed
 * in training, nearest at evaluation.  Overwrites q. */
void lp_quant_act(uint8_t *q, const float *x, size_t n, lp_qparams p, lp_mode mode);

/* dst (n) = a parameter tensor src quantized nearest on its own min/max, as
 * floats.  Overwrites dst. */
void lp_param_fq(float *dst, const float *src, size_t n);

/* The operands of a conv or linear forward: the input x (N samples of per
 * values), the weights w (nw) and the bias b (nb, may be NULL). */
typedef struct {
    const float *x;
    int          N;
    size_t       per;
    const float *w;
    size_t       nw;
    const float *b;
    size_t       nb;
} lp_operands;

/* The quantization prologue of a conv / linear forward: the input's range
 * (lp_act_qparams, run_range updated in training), the weights and the bias
 * quantized nearest on their own min/max.
 *   Integer path (sv != NULL): sv->xp, sv->xq (lp_quant_act), sv->wp,
 *     sv->wq; bq (nb) = the bias codes read back; bcodes (nb bytes) scratch;
 *     xf and wf unused.
 *   Fake-quant path (sv == NULL): xf (N*per) = the input quantized and read
 *     back (lp_fake_quant, stochastic in training), wf (nw) = the weights
 *     likewise (lp_param_fq), bq (nb) = the bias; bcodes unused.
 * Without a bias bq is zero.  Returns the input's qparams. */
lp_qparams lp_layer_quantize(lp_qsaved *sv, float *xf, float *wf, float *bq, uint8_t *bcodes,
                             float *run_range, const lp_operands *o, lp_mode mode);

#endif
