/* lp_conv — what the 8-bit conv files share (internal to lowprec/).
 *
 * Owns:    nothing; declares the seams between lp_conv.c (forward, input
 *          gradient, the choice of path, the im2col path, the affine
 *          correction's tables, scratch sizes, the fake-quant twin),
 *          lp_conv_shift.c (the shift path: stride-1 "same" convs on
 *          shifted rows of the codes) and lp_conv_wgrad.c (the weight and
 *          bias gradients: bf16 on the codes, FP32 on shifted grids of the
 *          codes, or nn's FP32 conv on the dequantized codes).
 * Exposes: LP_SHIFT_TMAX, the thread and part counts, lp_conv_shift_geom,
 *          the correction's tables (lp_conv_tap_range,
 *          lp_conv_tap_prefix_rows, lp_conv_max_classes,
 *          lp_conv_row_classes, lp_conv_base_rows_of), lp_conv_shift,
 *          lp_conv_shift_bytes, lp_conv_wgrad_bytes, lp_conv_wgrad.
 * Callers: lp_conv.c, lp_conv_shift.c, lp_conv_wgrad.c.
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

/* ---- the affine correction's tables (lp_conv.c, both paths) ---------- */

/* Valid tap range of output row o: [lo, hi) of kernel index. */
void lp_conv_tap_range(int o, int stride, int pad, int K, int In, int *lo, int *hi);

/* Rows [m0, m1) of pre (M, KH+1, KW+1) = 2-D prefix sums over (kh, kw) of
 * sum_c a[m][c][kh][kw], for kernel codes a (M, nch, KH, KW): the sum of a
 * row's codes over any rectangle of taps is four lookups.  Overwrites
 * those rows. */
void lp_conv_tap_prefix_rows(int32_t *pre, const uint8_t *a, int m0, int m1, int nch, int KH,
                             int KW);

/* Output rows whose taps cover the same kernel rows [h0, h1) share their
 * correction terms ("row classes"): at most 2*KH + 1 (and <= OH). */
int lp_conv_max_classes(int OH, int KH);

/* hcls (OH) = the row class of each output row, from the tap ranges rh
 * (OH pairs); returns their number nh.  Overwrites hcls. */
int lp_conv_row_classes(int *hcls, const int *rh, int OH, int KH);

/* Rows [m0, m1) of bases (M, nh, OW): the per-column correction base of
 * each row class, cSA * SA + cK * nch*(h1-h0)*(w1-w0) + bias[m] (bias may
 * be NULL), SA = the codes of kernel row m over the column's taps (prefix
 * sums pre, tap ranges rh, rw), the classes hcls (nh) given.  Overwrites
 * those rows. */
void lp_conv_base_rows_of(double *bases, const int *hcls, int nh, const int32_t *pre,
                          const int *rh, const int *rw, int m0, int m1, int OH, int OW, int KH,
                          int KW, int nch, double cSA, double cK, const float *bias);

/* ---- the shift path (lp_conv_shift.c) ---------------------------------- */

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) (qparams bqp) with the kernel codes a (M, nch, K,
 * K) (qparams aqp), in real values, plus bias[m] (may be NULL); add: out +=
 * the conv instead of out =.  The same floats at every level and for any
 * thread count.  Scratch: lp_conv_shift_bytes(N, nch, M, H, W, K, pad). */
void lp_conv_shift(float *out, const uint8_t *b, lp_qparams bqp, const uint8_t *a,
                   lp_qparams aqp, const float *bias, int N, int nch, int M, int H, int W, int K,
                   int pad, int add, void *scratch);

/* Bytes of lp_conv_shift scratch: M output rows, nch input channels. */
size_t lp_conv_shift_bytes(int N, int nch, int M, int H, int W, int K, int pad);

/* ---- the weight gradient (lp_conv_wgrad.c) ----------------------------- */

/* Scratch bytes of lp_conv_wgrad. */
size_t lp_conv_wgrad_bytes(const nn_conv_dims *d);

/* dw (OC, C, KH, KW) and db (OC) += the weight and bias gradients from the
 * full-precision dout and the saved input codes (either may be NULL; both
 * NULL: nothing).  Scratch: lp_conv_wgrad_bytes(d). */
void lp_conv_wgrad(float *dw, float *db, const float *dout, const lp_qsaved *sv,
                   const nn_conv_dims *d, void *scratch);

#endif
