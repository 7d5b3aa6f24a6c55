/* nn_layers_simd — private: AVX2+FMA plane kernels behind nn_layers.c.
 *
 * Owns:    nothing; declares the functions of nn_layers_avx2.c (built with
 *          -mavx2 -mfma).  Only nn_layers.c and nn_conv.c call them, and only after
 *          nn_simd_have_avx2() said yes.  A "plane" is n contiguous floats.
 * The scalar versions (and the _ref twins) live in nn_layers.c.
 */
#ifndef NN_LAYERS_SIMD_H
#define NN_LAYERS_SIMD_H

#include <stddef.h>

/* True when the CPU runs AVX2 and FMA (checked at run time) and the scalar
 * paths are not forced. */
int   nn_simd_have_avx2(void);
/* Tests only: on != 0 makes every kernel take its portable scalar path
 * (not thread-safe; set it while no kernel runs). */
void  nn_simd_force_scalar(int on);

/* sum of x[0..n) */
float nn_avx2_sum(const float *x, size_t n);
/* sum of (x - mean)^2 */
float nn_avx2_sqdev(const float *x, size_t n, float mean);
/* o = x * sigmoid(v*x) * sc + bc */
void  nn_avx2_evo_fwd(float *o, const float *x, size_t n, float v, float sc, float bc);
/* sums[0] += sum x, sums[1] += sum dy, sums[2] += sum dy*num,
 * sums[3] += sum dy * x^2 sg (1-sg), with sg = sigmoid(v x), num = x sg. */
void  nn_avx2_evo_bwd_sums(float sums[4], const float *x, const float *dy, size_t n, float v);
/* dx = dy * gi * (sg + v x sg (1-sg)) + k (x - mean), overwritten. */
void  nn_avx2_evo_bwd_dx(float *dx, const float *x, const float *dy, size_t n, float v, float gi,
                         float k, float mean);
/* im2col/col2im of one (sample, channel, kh, kw) plane at stride 1:
 *   im2col: dst (OH, OW) = plane[oh + hoff][ow + woff] for oh in [oh_lo, oh_hi)
 *           and ow in [ow_lo, ow_hi), 0 elsewhere (overwritten);
 *   col2im: plane[oh + hoff][ow + woff] += src (OH, OW) over the same range.
 * hoff = kh - pad, woff = kw - pad; plane is read/written only in range. */
void  nn_avx2_im2col_plane(float *dst, const float *plane, int W, int OH, int OW, int oh_lo,
                           int oh_hi, int ow_lo, int ow_hi, int hoff, int woff);
void  nn_avx2_col2im_plane(float *plane, const float *src, int W, int OW, int oh_lo, int oh_hi,
                           int ow_lo, int ow_hi, int hoff, int woff);

#endif
