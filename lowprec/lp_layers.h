/* lp_layers — 8-bit training kernels: conv2d, linear, Range EvoNorm and the
 * quantized residual add (docs/design.md §5, the reference's quantize.py).
 *
 * Owns:    the layer arithmetic of real 8-bit training: forward and error-
 *          gradient (input-gradient) GEMMs run in exact integer arithmetic on
 *          uint8 codes (lp_gemm); the weight gradient uses the full-precision
 *          incoming gradient and the FP32 GEMM (cblas) on the dequantized
 *          saved input codes ("gradient bifurcation"); saved activations are
 *          uint8 codes + lp_qparams, so activation memory really shrinks.
 *          Every integer kernel has a fake-quant twin (*_fq: quantize,
 *          dequantize to float, plain FP32 loops, as the reference simulates
 *          it); both agree to float rounding (tests/test_lowprec_layers.c,
 *          tests/test_lowprec_ren.c).
 * Exposes: the functions below.  Free functions on raw pointers with
 *          explicit dimensions (llm.c style); they never allocate: callers
 *          pass scratch of the size the *_scratch_bytes functions give.
 * Callers: the int8 op classes of the model graph (lp_model.c), tests,
 *          bench.
 * Files:   lp_conv.c (conv forward, input gradient, fake-quant conv),
 *          lp_conv_shift.c (their shift path: stride-1 "same" convs),
 *          lp_conv_wgrad.c (conv weight and bias gradients), lp_linear.c,
 *          lp_norm.c (Range EvoNorm), lp_add.c; lp_layer_common.h holds
 *          what they share (the quantization prologue, scratch carving).
 *
 * Dimension legend: N batch, C channels, OC out channels, H W input, OH OW
 * output, HW = H*W, G norm groups, F in features, OF out features,
 * CK = C*KH*KW, P = OH*OW.  Activations NCHW contiguous.
 * Conventions (as nn_layers.h): outputs are overwritten; parameter gradients
 * (dw, db, dgamma, dbeta, dv) ACCUMULATE (+=); din is OVERWRITTEN and may be
 * NULL.  Quantizers are straight-through in backward.
 *
 * What is quantized (all per tensor, affine uint8, lp_quant.h):
 *   layer inputs (activations): range = batch mean of per-sample min/max in
 *     training (running range updated, run = 0.1 run + 0.9 batch), running
 *     range at evaluation; stochastic rounding in training, nearest at eval;
 *   weights, biases, gamma/beta/v, Range EvoNorm's s: min/max of the tensor,
 *     nearest;
 *   incoming gradients (conv/linear input gradient, EvoNorm, add): min/max of
 *     the whole batch tensor, stochastic rounding.
 * Seeds: each stochastic quantization takes a caller seed; the caller makes
 * them distinct per layer, step and direction.
 */
#ifndef LP_LAYERS_H
#define LP_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_quant.h"
#include "nn/nn_layers.h"

typedef struct {
    int      train;  /* 1: batch ranges + stochastic rounding; 0: running ranges + nearest */
    uint64_t seed;   /* stochastic rounding of the input activation(s) */
} lp_mode;

/* What a conv / linear keeps for backward: the input and weight codes. */
typedef struct {
    uint8_t   *xq;   /* N*C*H*W (conv) or N*F (linear) input codes */
    lp_qparams xp;
    uint8_t   *wq;   /* OC*CK (conv) or OF*F (linear) weight codes */
    lp_qparams wp;
} lp_qsaved;

/* ---- conv2d ------------------------------------------------------------ */

/* Bytes lp_qsaved must point to for these dims (d->N samples). */
size_t lp_conv2d_saved_bytes(const nn_conv_dims *d);
/* Bytes of scratch forward / backward need (one size for both, 64-aligned
 * scratch recommended). */
size_t lp_conv2d_scratch_bytes(const nn_conv_dims *d);

/* out (N,OC,OH,OW) = conv(Q(in), Q(w)) + Q(b), int8 GEMM per sample.
 * in (N,C,H,W), w (OC,C,KH,KW), b (OC; may be NULL).  run_range (2) is the
 * input's running (min, max), updated when mode.train.  sv->xq, sv->wq
 * must point to caller memory (lp_conv2d_saved_bytes); they and sv->xp,
 * sv->wp are written. */
void lp_conv2d_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, const nn_conv_dims *d, lp_mode mode,
                       void *scratch);
/* din (N,C,H,W) overwritten (may be NULL) = conv^T(SQ(dout), Q(w)) in int8;
 * dw (OC,C,KH,KW) += dout (x) deq(xq) in FP32 (sgemm); db (OC; may be NULL)
 * += sum of dout.  dout (N,OC,OH,OW) full precision; seed for SQ(dout). */
void lp_conv2d_backward(float *din, float *dw, float *db, const float *dout,
                        const lp_qsaved *sv, const nn_conv_dims *d, uint64_t seed,
                        void *scratch);
/* Whether lp_conv2d_backward_add takes these dimensions (the stride-1
 * "same" convs of the shift path). */
int lp_conv2d_din_adds(const nn_conv_dims *d);
/* lp_conv2d_backward with din (not NULL) += the input gradient instead of
 * din = it: the floats of computing it into a temporary and adding that
 * (one rounding per element), without the temporary's trip through memory
 * (a residual block's input gets the gradients of both its paths). */
void lp_conv2d_backward_add(float *din, float *dw, float *db, const float *dout,
                            const lp_qsaved *sv, const nn_conv_dims *d, uint64_t seed,
                            void *scratch);

/* Tests only: on != 0 makes the stride-1 "same" convs take the im2col +
 * lp_gemm path (the one every other conv takes) instead of the shift path.
 * Not thread-safe; set it while no kernel runs. */
void lp_conv2d_force_im2col(int on);
/* (Tests run the shift path's AMX tile layout and kernel on the tile
 * model at any level: lp_tile_force_model, lp_tile.h.) */

/* Fake-quant twins: same quantization (same seeds, same codes) then plain
 * FP32 loops.  scratch: lp_conv2d_fq_scratch_floats floats. */
size_t lp_conv2d_fq_scratch_floats(const nn_conv_dims *d);
void lp_conv2d_forward_fq(float *out, float *run_range, const float *in, const float *w,
                          const float *b, const nn_conv_dims *d, lp_mode mode, float *scratch);
/* Recomputes Q(in) from `in` with the forward's mode (pass the same mode and
 * the range the forward used via xp).  dw, db +=; din overwritten. */
void lp_conv2d_backward_fq(float *din, float *dw, float *db, const float *dout, const float *in,
                           lp_qparams xp, const float *w, const nn_conv_dims *d, lp_mode mode,
                           uint64_t seed, float *scratch);

/* ---- linear ------------------------------------------------------------ */

size_t lp_linear_saved_bytes(int N, int F, int OF);
size_t lp_linear_scratch_bytes(int N, int F, int OF);
/* out (N,OF) = Q(in) (N,F) @ Q(w) (OF,F)^T + Q(b) (OF; may be NULL). */
void lp_linear_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, int N, int F, int OF, lp_mode mode,
                       void *scratch);
/* din (N,F) overwritten (may be NULL) = SQ(dout) @ Q(w) in int8;
 * dw (OF,F) += dout^T @ deq(xq) (sgemm); db (OF) += sum dout. */
void lp_linear_backward(float *din, float *dw, float *db, const float *dout, const lp_qsaved *sv,
                        int N, int F, int OF, uint64_t seed, void *scratch);
size_t lp_linear_fq_scratch_floats(int N, int F, int OF);
void lp_linear_forward_fq(float *out, float *run_range, const float *in, const float *w,
                          const float *b, int N, int F, int OF, lp_mode mode, float *scratch);
void lp_linear_backward_fq(float *din, float *dw, float *db, const float *dout, const float *in,
                           lp_qparams xp, const float *w, int N, int F, int OF, lp_mode mode,
                           uint64_t seed, float *scratch);

/* ---- Range EvoNorm (docs/design.md §5) --------------------------------- */
/* Per sample n and group g (C/G consecutive channels, T = (C/G)*HW values
 * in c,h,w order, T >= 32):
 *   x = Q_act(in);  nrm = x * hardsigmoid(v*x),  hardsigmoid(u) = clamp(u/6 + 1/2, 0, 1)
 *   the T values split into 16 chunks (lp_ren_chunk); R = mean(chunk max) - mean(chunk min)
 *   s = 1 / (R*c + 1e-5),  c = 0.5*0.35*(1 + sqrt(pi ln 4)) / sqrt(2 ln L),  L = T/16
 *   (int8 and fake-quant: R is floored at qstep/(c sqrt 12), qstep = the input's
 *   quantization step: R*c, the estimate of the group's standard deviation, is
 *   never below that of the quantization noise; a group on one code no longer
 *   gets s = 1e5.  Groups spanning a few codes or more are untouched.)
 *   sq = Q(s) over all N*G values (nearest);  out = nrm * sq * Q(gamma) + Q(beta)
 * Backward: dout quantized (SR, batch min/max); max/min gradients to the
 * first arg-max/arg-min of each chunk; d sq/d s = 1 (straight-through),
 * d s/d R = -c s^2 with the unquantized s (0 where R was floored). */

typedef struct {
    uint8_t   *xq;   /* N*C*HW input codes */
    lp_qparams xp;
    float     *s;    /* N*G unquantized s */
    float     *sq;   /* N*G quantized s (as used in out) */
} lp_ren_saved;

/* Chunk j (0..15) of a group of T values: start and length.  Lengths are
 * T/16 or T/16 + 1; the first T%16 chunks are the longer ones. */
void lp_ren_chunk(int T, int j, int *start, int *len);
size_t lp_ren_saved_bytes(int N, int C, int HW, int G);
size_t lp_ren_scratch_floats(int N, int C, int HW);

/* out (N,C,HW); sv->xq, sv->s, sv->sq point to caller memory; run_range (2)
 * the input's running range. gamma, beta, v (C) are FP32 masters. */
void lp_range_evonorm_forward(float *out, lp_ren_saved *sv, float *run_range, const float *in,
                              const float *gamma, const float *beta, const float *v, int N,
                              int C, int HW, int G, lp_mode mode, float *scratch);
/* din (N,C,HW) overwritten (may be NULL); dgamma, dbeta, dv (C) +=. */
void lp_range_evonorm_backward(float *din, float *dgamma, float *dbeta, float *dv,
                               const float *dout, const lp_ren_saved *sv, const float *gamma,
                               const float *v, int N, int C, int HW, int G, uint64_t seed,
                               float *scratch);

/* The float core both use, on already (fake-)quantized x and parameters:
 * s (N*G) receives the unquantized s; sq (N*G) the values used in out:
 * Q(s) when quant_s, else s.  Exposed for the finite-difference test
 * (quant_s = 0 makes it quantizer-free). */
void lp_ren_core_forward(float *out, float *s, float *sq, const float *x, const float *gamma,
                         const float *beta, const float *v, int N, int C, int HW, int G,
                         int quant_s);
/* dx (N,C,HW) overwritten (may be NULL); dgamma, dbeta, dv (C) +=;
 * g = the gradient at out (already quantized by the caller if wanted). */
void lp_ren_core_backward(float *dx, float *dgamma, float *dbeta, float *dv, const float *g,
                          const float *x, const float *s, const float *sq, const float *gamma,
                          const float *v, int N, int C, int HW, int G);

/* The core with R's floor for input values quantized with step qstep
 * (> 0; 0 is the plain core above): what the int8 layer computes on its
 * codes and the fake-quant twin on its fake-quantized input. */
void lp_ren_core_forward_q(float *out, float *s, float *sq, const float *x, const float *gamma,
                           const float *beta, const float *v, int N, int C, int HW, int G,
                           int quant_s, float qstep);
void lp_ren_core_backward_q(float *dx, float *dgamma, float *dbeta, float *dv, const float *g,
                            const float *x, const float *s, const float *sq, const float *gamma,
                            const float *v, int N, int C, int HW, int G, float qstep);

/* Row kernels of the core (one channel row of n values; the core loops
 * over them and dispatches by CPU level):
 *   fwd: o = x*h(x)*sc*gamma + beta, h(x) = clamp(x*v/6 + 1/2, 0, 1), in the
 *        order of the formula (every level gives the same floats);
 *   bwd: dx (may be NULL) = g*sc*gamma * dnrm/dx, overwritten;
 *        sums[0] += sum g, sums[1] += sum g*nrm, sums[2] += sum g*sc*gamma*x^2
 *        over the values where 0 <= t <= 1 (the caller divides by 6; the
 *        twin adds every term to sums in double, so a row in pieces gives
 *        the same sums; the AVX2 kernel sums blocks of 64 in float first). */
void lp_ren_row_fwd_ref(float *o, const float *x, size_t n, float v, float sc, float gamma,
                        float beta);
void lp_ren_row_bwd_ref(float *dx, double sums[3], const float *x, const float *g, size_t n,
                        float v, float sc, float gamma);

/* ---- quantized residual add -------------------------------------------- */

/* out (N*per) = Q_act(a) + Q_act(b), each with its own running range
 * (run_a, run_b: 2 floats each).  codes: N*per bytes of scratch (used at
 * evaluation; training fuses quantization and dequantization).  Nothing
 * is saved for backward (lp_add_saved_bytes is 0). */
void lp_add_forward(float *out, float *run_a, float *run_b, const float *a, const float *b, int N,
                    size_t per, lp_mode mode, uint8_t *codes);
/* da = db = deq(SR(dout)) (n values, overwritten; either may be NULL).
 * codes: unused (the quantization is fused), kept for the callers. */
void lp_add_backward(float *da, float *db, const float *dout, size_t n, uint64_t seed,
                     uint8_t *codes);
static inline size_t lp_add_saved_bytes(void) { return 0; }

#endif
