/* nn_layers_simd — private: AVX2+FMA plane kernels behind nn_layers.c and
 * the AVX2 / AVX-512 shifted-GEMM conv kernels behind nn_conv.c.
 *
 * Owns:    nothing; declares the functions of nn_layers_avx2.c and
 *          nn_conv_avx2.c (built with -mavx2 -mfma) and nn_conv_avx512.c
 *          (AVX-512 flags), and the scalar twins of the plane kernels.
 *          nn_layers.c and nn_conv.c call them through the kernel table
 *          (nn_kern.h), whose x86 builder puts them only in the tables of
 *          the levels that have them.  A "plane" is n contiguous floats.
 * The scalar versions (and the _ref twins) live in nn_layers.c and nn_conv.c;
 * tests/test_nn_conv.c and tests/test_nn_layers.c compare them.
 */
#ifndef NN_LAYERS_SIMD_H
#define NN_LAYERS_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_cpu.h"

/* Scalar twins of the plane kernels below (nn_layers.c). */
float nn_sum_ref(const float *x, size_t n);
float nn_sqdev_ref(const float *x, size_t n, float mean);
void  nn_evo_fwd_ref(float *o, const float *x, size_t n, float v, float sc, float bc);
void  nn_evo_bwd_sums_ref(float sums[4], const float *x, const float *dy, size_t n, float v);
void  nn_evo_bwd_dx_ref(float *dx, const float *x, const float *dy, size_t n, float v, float gi,
                        float k, float mean);
void  nn_maxpool2_row_ref(float *o, uint32_t *am, const float *r0, const float *r1, uint32_t base,
                          uint32_t W, size_t ow);

/* One output row of 2x2 / stride-2 max pooling: o[i], am[i] = the maximum
 * of r0[2i], r0[2i+1], r1[2i], r1[2i+1] (r1 = r0 + W) and the plane index
 * base + {2i, 2i+1, W+2i, W+2i+1} of the first of them in that order (a
 * later one wins only when greater: NaN and ties as the scan of
 * nn_maxpool_forward_ref), for i < ow. */
void  nn_avx2_maxpool2_row(float *o, uint32_t *am, const float *r0, const float *r1,
                           uint32_t base, uint32_t W, size_t ow);
/* the same on generic vectors (nn_layers_blk.c), the portable level's */
void  nn_maxpool2_row_blk(float *o, uint32_t *am, const float *r0, const float *r1,
                          uint32_t base, uint32_t W, size_t ow);
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

/* ---- threads (nn_conv.c) -------------------------------------------------- */
#define NN_PAR_MAX_THREADS 4
typedef void (*nn_par_fn)(void *arg, int t, int nt);
/* Threads the layer kernels use now: nn_layers_set_threads() or, by
 * default, openblas_get_num_threads(); in [1, NN_PAR_MAX_THREADS]. */
int  nn_par_threads(void);
/* fn(arg, t, nt) for every t in [0, nt), concurrently; returns when all are
 * done.  nt in [1, NN_PAR_MAX_THREADS]. */
void nn_par_run(int nt, nn_par_fn fn, void *arg);

/* ---- shifted GEMM (im2col-free stride-1 convolution, nn_conv.c) ----------
 * A grid B holds nch rows of ldb floats; its row c shifted by toff[t] is row
 * k = c*T + t of a virtual lowered matrix.  Every B[c*ldb + toff[t] + j],
 * 0 <= j < n, must be readable and finite (toff may be negative).
 *
 * shiftgemm: C[m*ldc + j] = sum_{k < nch*T} A(m, k) * B[c*ldb + toff[t] + j]
 *            for m < M, j < n; overwritten.  A is packed by m-tiles of 4:
 *            A(m, k) = Ap[(m/4)*K*4 + k*4 + m%4], K = nch*T, rows past M
 *            zero-filled (nn_shift_pack_size gives the float count).
 * shiftdot:  D[m*ldd + k] += sum_{j < n} A[m*lda + j] * B[c*ldb + toff[t] + j]
 *            for m < M, k = c*T + t < nch*T; accumulated.
 * The _ref twins are plain loops with the same contract. */
size_t nn_shift_pack_size(int M, int K);
void   nn_shiftgemm_ref(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                        int nch, const int *toff, int T, size_t n);
void   nn_shiftdot_ref(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                       size_t ldb, int nch, const int *toff, int T, size_t n);
/* The portable level's shiftdot: blocked partial sums (nn_conv_blk.c). */
void   nn_shiftdot_blk(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                       size_t ldb, int nch, const int *toff, int T, size_t n);
void   nn_avx2_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B,
                         size_t ldb, int nch, const int *toff, int T, size_t n);
void   nn_avx2_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                        size_t ldb, int nch, const int *toff, int T, size_t n);
void   nn_avx512_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B,
                           size_t ldb, int nch, const int *toff, int T, size_t n);
void   nn_avx512_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                          size_t ldb, int nch, const int *toff, int T, size_t n);

#endif
