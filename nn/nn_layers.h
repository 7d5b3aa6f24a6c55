/* nn_layers — FP32 layer kernels: free forward/backward functions on raw
 * float pointers with explicit dimensions (llm.c style). They never allocate;
 * callers pass any scratch they need (sizes from the *_scratch functions).
 *
 * Dimension legend:  N batch, C input channels, OC output channels,
 *   H W input height/width, OH OW output height/width, KH KW kernel,
 *   HW = H*W, G norm groups (C % G == 0), F input features, OF output features,
 *   K classes.  Every activation tensor is NCHW, contiguous.
 *
 * Conventions: "out" arguments are overwritten; gradient arguments of
 * parameters (dw, db, dgamma, ...) are ACCUMULATED (+=), so a model zeroes its
 * gradient arena once per step; "din" (gradient w.r.t. the input) is
 * OVERWRITTEN and may be NULL when not needed (first layer).
 * Every tuned kernel has a plain *_ref twin that tests compare against.
 * Callers: nn_model_ops.c (the FP32 op classes), nn_model.c (the loss),
 * lowprec/ (reuses the FP32 weight-gradient path), tests/test_nn_conv.c,
 * tests/test_nn_layers.c.
 */
#ifndef NN_LAYERS_H
#define NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_core.h"

/* ---- conv2d (im2col + OpenBLAS sgemm) ---------------------------------- */

typedef struct {
    int N, C, H, W;     /* input */
    int OC, KH, KW;     /* weight OC,C,KH,KW */
    int stride, pad;    /* same in both directions, zero padding */
    int OH, OW;         /* derived: (H + 2*pad - KH)/stride + 1 */
} nn_conv_dims;

nn_conv_dims nn_conv_dims_make(int N, int C, int H, int W, int OC, int K, int stride, int pad);
/* Floats of scratch nn_conv2d_forward/backward need for these dims, on this
 * CPU (the kernel path depends on it: size after any nn_cpu_force call). */
size_t nn_conv_scratch_floats(const nn_conv_dims *d);

/* out (N,OC,OH,OW) = conv(in (N,C,H,W), w (OC,C,KH,KW)) + b (OC; may be NULL). */
void nn_conv2d_forward(float *out, const float *in, const float *w, const float *b,
                       const nn_conv_dims *d, float *scratch);
void nn_conv2d_forward_ref(float *out, const float *in, const float *w, const float *b,
                           const nn_conv_dims *d);
/* din (N,C,H,W) overwritten (may be NULL); dw (OC,C,KH,KW) +=; db (OC) += (may be NULL).
 * w is read only for din: it may be NULL when din is NULL. */
void nn_conv2d_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, const nn_conv_dims *d, float *scratch);
void nn_conv2d_backward_ref(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, const nn_conv_dims *d);

/* Chunked variants (benchmarks, tests): nb samples are lowered into one
 * (C*KH*KW, nb*OH*OW) matrix per sgemm.  nn_conv2d_forward/backward use
 * nb = nn_conv_chunk(d).  scratch must hold nn_conv_scratch_floats_nb(d, nb). */
int    nn_conv_chunk(const nn_conv_dims *d);
size_t nn_conv_scratch_floats_nb(const nn_conv_dims *d, int nb);
void   nn_conv2d_forward_nb(float *out, const float *in, const float *w, const float *b,
                            const nn_conv_dims *d, float *scratch, int nb);
void   nn_conv2d_backward_nb(float *din, float *dw, float *db, const float *dout,
                             const float *in, const float *w, const nn_conv_dims *d,
                             float *scratch, int nb);

/* The weight-gradient product of the im2col-free convolution, on a
 * zero-bordered grid B of nch rows (ldb floats each) whose row c shifted by
 * toff[t] stands for the row c*T + t of the lowered input:
 *   D[m*ldd + c*T + t] += sum_{j < n} A[m*lda + j] * B[c*ldb + toff[t] + j]
 * for m < M, c < nch, t < T (accumulated; fixed summation order).  Every
 * B[c*ldb + toff[t] + j], j < n, must be readable and finite.  The kernel
 * of the current CPU level (AVX-512, AVX2+FMA, or the plain twin). */
void nn_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                 size_t ldb, int nch, const int *toff, int T, size_t n);

/* Threads the conv (im2col-free path) and EvoNorm kernels split a batch
 * over: n >= 1 fixed, 0 (default) = openblas_get_num_threads(); capped at 4.
 * Results are deterministic for a given count (per-thread partial sums are
 * added in thread order) but may differ in the last bits between counts.
 * Process-wide; set it while no kernel runs. */
void nn_layers_set_threads(int n);

/* ---- linear -------------------------------------------------------------- */

/* out (N,OF) = in (N,F) @ w(OF,F)^T + b (OF; may be NULL). */
void nn_linear_forward(float *out, const float *in, const float *w, const float *b,
                       int N, int F, int OF);
void nn_linear_forward_ref(float *out, const float *in, const float *w, const float *b,
                           int N, int F, int OF);
/* din (N,F) overwritten (may be NULL); dw (OF,F) +=; db (OF) += (may be NULL). */
void nn_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, int N, int F, int OF);
void nn_linear_backward_ref(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, int N, int F, int OF);

/* ---- EvoNorm-S0 (docs/design.md §5, full precision) ---------------------- */
/* out = x * sigmoid(v*x) / sqrt(var_group(x) + eps) * gamma + beta,
 * population variance per sample per group of C/G consecutive channels.
 * save_istd (N*G) receives 1/sqrt(var+eps) for backward. eps = 1e-5. */
void nn_evonorm_s0_forward(float *out, float *save_istd, const float *in, const float *gamma,
                           const float *beta, const float *v, int N, int C, int HW, int G);
/* din overwritten; dgamma, dbeta, dv (C) +=. */
void nn_evonorm_s0_backward(float *din, float *dgamma, float *dbeta, float *dv, const float *dout,
                            const float *in, const float *save_istd, const float *gamma,
                            const float *v, int N, int C, int HW, int G);
/* Plain twins (libm expf, no SIMD) the tests compare against. */
void nn_evonorm_s0_forward_ref(float *out, float *save_istd, const float *in,
                               const float *gamma, const float *beta, const float *v, int N,
                               int C, int HW, int G);
void nn_evonorm_s0_backward_ref(float *din, float *dgamma, float *dbeta, float *dv,
                                const float *dout, const float *in, const float *save_istd,
                                const float *gamma, const float *v, int N, int C, int HW, int G);

/* ---- BatchNorm2d (baseline) ---------------------------------------------- */
/* Training: batch statistics, running stats updated as PyTorch does
 * (momentum 0.1, unbiased variance in the running estimate).
 * save_mean, save_istd (C) for backward. */
void nn_batchnorm_forward_train(float *out, float *save_mean, float *save_istd, float *run_mean,
                                float *run_var, const float *in, const float *gamma,
                                const float *beta, int N, int C, int HW);
void nn_batchnorm_forward_eval(float *out, const float *in, const float *run_mean,
                               const float *run_var, const float *gamma, const float *beta,
                               int N, int C, int HW);
/* din overwritten; dgamma, dbeta (C) +=. */
void nn_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                           const float *in, const float *save_mean, const float *save_istd,
                           const float *gamma, int N, int C, int HW);

/* ---- elementwise, pooling ------------------------------------------------- */

void nn_relu_forward(float *out, const float *in, size_t n);
/* din = dout where in > 0 else 0 (overwritten). */
void nn_relu_backward(float *din, const float *dout, const float *in, size_t n);

/* out = a + b. */
void nn_add_forward(float *out, const float *a, const float *b, size_t n);

/* Inverted dropout with drop probability p (0 <= p < 1): mask[i] = 1 keeps
 * element i (drawn from r: kept when nn_rng_uniform(r) >= p, one draw per
 * element in order), out = in * mask / (1 - p), overwritten. */
void nn_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p,
                        nn_rng *r);
/* din = dout * mask / (1 - p), overwritten. */
void nn_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p);

/* Max pooling K x K, stride S, no padding: out (N,C,OH,OW), OH = (H-K)/S+1.
 * argmax (N*C*OH*OW) records the flat input index (within the plane) of the
 * first maximum, for backward. */
void nn_maxpool_forward(float *out, uint32_t *argmax, const float *in, int N, int C, int H, int W,
                        int K, int S);
/* Its twin, window by window for any K, S (the same outputs and argmax). */
void nn_maxpool_forward_ref(float *out, uint32_t *argmax, const float *in, int N, int C, int H,
                            int W, int K, int S);
/* din overwritten (zeroed, then scattered). */
void nn_maxpool_backward(float *din, const float *dout, const uint32_t *argmax, int N, int C,
                         int H, int W, int K, int S);
void nn_avgpool_forward(float *out, const float *in, int N, int C, int H, int W, int K, int S);
void nn_avgpool_backward(float *din, const float *dout, int N, int C, int H, int W, int K, int S);

/* Global average pool: out (N,C) = mean over HW of in (N,C,HW). */
void nn_gap_forward(float *out, const float *in, int N, int C, int HW);
void nn_gap_backward(float *din, const float *dout, int N, int C, int HW);

/* ---- loss ------------------------------------------------------------------ */

/* Softmax cross-entropy, mean over the batch. probs (N,K) receives the
 * softmax (numerically stable); returns the mean loss.  Labels are < K
 * (checked by the data loader, asserted here). */
float nn_softmax_xent_forward(float *probs, const float *logits, const uint8_t *labels, int N,
                              int K);
/* dlogits (N,K) = (probs - onehot) / N, overwritten. */
void nn_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int N,
                              int K);

#endif
