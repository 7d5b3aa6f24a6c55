/* lp_quant — per-tensor affine uint8 quantizers (docs/design.md §5, Banner et al.).
 *
 * Owns:    the 8-bit code format used everywhere in lowprec/: a tensor is
 *          uint8 codes k plus lp_qparams {scale, min}, value = k*scale + min,
 *            scale = max((max - min)/255, 1e-8),
 *            k     = round(clamp((x - min)/scale [+ u], 0, 255)),
 *          round = to nearest, ties to even (as torch.round); u ~ U[-1/2,1/2)
 *          for stochastic rounding, drawn from a counter-based hash of
 *          (seed, element index) so the scalar and SIMD paths give identical
 *          codes and a run is reproducible.  The arithmetic order matches
 *          the reference: t = (x - min) / scale (a true division), t += u,
 *          clamp, round; dequantize = k*scale (rounded) + min (no FMA).
 *          NaN inputs map to code 0.
 *          Activation ranges: while training, min/max = batch mean of the
 *          per-sample min/max; evaluation uses running averages updated as
 *          run = 0.1*run + 0.9*batch (the reference's QuantMeasure,
 *          momentum 0.1; running values start at 0).
 * Exposes: the functions below; each vectorized one has a *_ref twin.
 * Callers: the layer files (lp_conv.c, lp_linear.c, lp_norm.c, lp_add.c), gossip/ compressors may reuse lp_quantize, tests.
 *
 * Sizes are size_t; n may be 0 except where stated.
 */
#ifndef LP_QUANT_H
#define LP_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define LP_QLEVELS    255     /* codes 0..255 */
#define LP_MIN_SCALE  1e-8f

typedef struct {
    float scale;   /* > 0 */
    float min;     /* value of code 0 */
} lp_qparams;

/* scale = max((max - min)/255, 1e-8) computed in float, as the reference. */
lp_qparams lp_qparams_from_range(float min, float max);

/* The stochastic-rounding noise for element `index` under `seed`:
 * a float in [-1/2, 1/2) with 24 random bits (exact). */
float lp_sr_noise(uint64_t seed, uint32_t index);

/* *mn, *mx = min and max of x (n > 0). */
void lp_minmax(float *mn, float *mx, const float *x, size_t n);
void lp_minmax_ref(float *mn, float *mx, const float *x, size_t n);

/* q (n) = codes of x (n), round to nearest even.  Overwrites q. */
void lp_quantize(uint8_t *q, const float *x, size_t n, lp_qparams p);
void lp_quantize_ref(uint8_t *q, const float *x, size_t n, lp_qparams p);

/* q (n) = stochastically rounded codes of x (n); element i uses the noise
 * lp_sr_noise(seed, first + i), so quantizing a tensor in pieces with the
 * right `first` gives the same codes as quantizing it whole.  Overwrites q. */
void lp_quantize_sr(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                    uint32_t first);
void lp_quantize_sr_ref(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first);

/* x (n) = q*scale + min.  Overwrites x. */
void lp_dequantize(float *x, const uint8_t *q, size_t n, lp_qparams p);
void lp_dequantize_ref(float *x, const uint8_t *q, size_t n, lp_qparams p);

/* y (n) = the values of lp_quantize_sr's codes (lp_dequantize of them) in
 * one pass, bit-identical to the two; q (n, may be NULL) = the codes too.
 * _add: y[i] = y[i] + that value (the quantized residual add), the codes
 * not kept.  Overwrite y (and q). */
void lp_fake_quant_sr(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                      uint64_t seed, uint32_t first);
void lp_fake_quant_sr_ref(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first);
void lp_fake_quant_sr_add(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                          uint32_t first);
void lp_fake_quant_sr_add_ref(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first);

/* lut (256) = the value of every code (identical to lp_dequantize). */
void lp_dequantize_lut(float *lut, lp_qparams p);

/* y (n) = dequantize(quantize(x)) ("fake quantization", the reference's
 * float simulation); stochastic != 0 uses lp_quantize_sr's noise (first 0).
 * y may equal x.  Plain scalar code, for reference paths and tests. */
void lp_fake_quant(float *y, const float *x, size_t n, lp_qparams p, int stochastic,
                   uint64_t seed);

/* Parameters of a whole tensor: lp_qparams_from_range(min(x), max(x)) (n > 0).
 * Weights, biases, norm parameters and gradients use this. */
lp_qparams lp_tensor_qparams(const float *x, size_t n);

/* Activation range for a batch x (N, per) where per = numel per sample:
 * *mn, *mx = mean over the N samples of each sample's min and max. */
void lp_batch_range(float *mn, float *mx, const float *x, int N, size_t per);

/* Quantization parameters of an activation (docs/design.md §5).  run_range (2:
 * running min, running max) is a model buffer.  train: batch range of x,
 * then run = 0.1*run + 0.9*batch; eval: the running range (x unused). */
lp_qparams lp_act_qparams(float *run_range, const float *x, int N, size_t per, int train);

#endif
