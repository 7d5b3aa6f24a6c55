/* nn_kern_arm — the FP32 NEON kernels of nn/ (aarch64 only), declared for
 * the builder of the ARM levels' tables (nn_kern_arm.c) and the tests.
 * Contracts: nn_layers_simd.h's shiftgemm / shiftdot; twins
 * nn_shiftgemm_ref / nn_shiftdot_ref. */
#ifndef NN_KERN_ARM_H
#define NN_KERN_ARM_H

#include <stddef.h>

#if defined(__aarch64__)
void nn_neon_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                       int nch, const int *toff, int T, size_t n);
void nn_neon_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                      size_t ldb, int nch, const int *toff, int T, size_t n);
#endif

#endif
