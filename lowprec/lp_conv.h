/* lp_conv — what the two 8-bit conv files share (internal to lowprec/).
 *
 * Owns:    nothing; declares the seam between lp_conv.c (forward, input
 *          gradient, scratch sizes, the fake-quant twin) and lp_conv_wgrad.c
 *          (the weight and bias gradients: bf16 on the codes, FP32 on
 *          shifted grids of the codes, or nn's FP32 conv on the dequantized
 *          codes).
 * Exposes: LP_SHIFT_TMAX, lp_conv_shift_geom, lp_conv_wgrad_bytes,
 *          lp_conv_wgrad.
 * Callers: lp_conv.c, lp_conv_wgrad.c.
 */
#ifndef LP_CONV_H
#define LP_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_layers.h"

#define LP_SHIFT_TMAX 49 /* most taps (K*K) the shift path takes */
/* Most threads (nn_pool.h) a conv splits its samples or rows over: its
 * scratch holds this many per-thread parts at most (never more than its
 * chunks of samples; a 16-core board runs every core). */
#define LP_CONV_MAX_THREADS 16

/* Bytes a conv's per-thread parts of one kind (the im2col path's, the
 * weight gradient's) may take together (one part always): large images
 * keep their scratch, small ones get a part for every thread. */
#define LP_CONV_PARTS_BYTES ((size_t)16 << 20)

/* Thread parts of `part` bytes a conv's scratch holds: at most
 * LP_CONV_MAX_THREADS, the samples, and LP_CONV_PARTS_BYTES together; from
 * the dimensions alone, so sizing and running agree. */
int lp_conv_parts(const nn_conv_dims *d, size_t part);

/* Multiply-adds per thread below which a conv pass runs on fewer threads. */
#define LP_CONV_MIN_WORK ((size_t)1 << 18)

/* Threads (parts) of a conv pass of `work` multiply-adds whose parts are
 * `part` bytes: the pool's count, at most lp_conv_parts, fewer where a
 * thread would get under LP_CONV_MIN_WORK; at least 1. */
int lp_conv_threads(const nn_conv_dims *d, size_t part, size_t work);

/* Stride-1 "same" geometry (K x K, pad (K-1)/2, K >= 2): shifted rows. */
int lp_conv_shift_geom(const nn_conv_dims *d);

/* Scratch bytes of lp_conv_wgrad. */
size_t lp_conv_wgrad_bytes(const nn_conv_dims *d);

/* dw (OC, C, KH, KW) and db (OC) += the weight and bias gradients from the
 * full-precision dout and the saved input codes (either may be NULL; both
 * NULL: nothing).  Scratch: lp_conv_wgrad_bytes(d). */
void lp_conv_wgrad(float *dw, float *db, const float *dout, const lp_qsaved *sv,
                   const nn_conv_dims *d, void *scratch);

#endif
