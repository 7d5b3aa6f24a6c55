/* nn_kern — the kernel table of nn/'s FP32 layers: which SIMD kernel runs
 * each primitive and which conv paths pay, chosen once per CPU level.
 *
 * Owns:    one table per level of nn_cpu.h, filled once (on first use,
 *          thread-safe): first with the scalar twins and no SIMD-only
 *          paths, then by the architecture's builder (nn_kern_x86.c;
 *          another architecture brings its own nn_kern_<arch>.c defining
 *          nn_kern_fill_arch).  nn_kern() returns the table of the level
 *          nn_cpu_level() gives now, so LPGOSSIP_CPU and nn_cpu_force()
 *          choose as they choose the level.
 * Exposes: nn_kern_t, nn_kern(), nn_kern_fill_arch (for the builders).
 * Callers: nn_layers.c (EvoNorm-S0 planes, max-pool rows), nn_conv.c (conv paths,
 *          shifted GEMM and dot, im2col/col2im planes).  Generic code reads
 *          capabilities from the table and never names a level.
 */
#ifndef NN_KERN_H
#define NN_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_cpu.h"

typedef struct {
    /* EvoNorm-S0 planes (nn_layers_simd.h) */
    float (*sum)(const float *x, size_t n);
    float (*sqdev)(const float *x, size_t n, float mean);
    void (*evo_fwd)(float *o, const float *x, size_t n, float v, float sc, float bc);
    void (*evo_bwd_sums)(float sums[4], const float *x, const float *dy, size_t n, float v);
    void (*evo_bwd_dx)(float *dx, const float *x, const float *dy, size_t n, float v, float gi,
                       float k, float mean);
    /* one output row of 2x2 / stride-2 max pooling (nn_layers_simd.h) */
    void (*maxpool2_row)(float *o, uint32_t *am, const float *r0, const float *r1, uint32_t base,
                         uint32_t W, size_t ow);

    /* stride-1 im2col / col2im of one plane; NULL: nn_conv.c's loops */
    void (*im2col_plane)(float *dst, const float *plane, int W, int OH, int OW, int oh_lo,
                         int oh_hi, int ow_lo, int ow_hi, int hoff, int woff);
    void (*col2im_plane)(float *plane, const float *src, int W, int OW, int oh_lo, int oh_hi,
                         int ow_lo, int ow_hi, int hoff, int woff);

    /* shifted GEMM and dot (nn_layers_simd.h) */
    void (*shiftgemm)(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                      int nch, const int *toff, int T, size_t n);
    void (*shiftdot)(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                     size_t ldb, int nch, const int *toff, int T, size_t n);

    /* conv paths (nn_conv.c): stride-1 same convs run shifted when both
     * channel counts are <= shift_maxc (0: never); lowered: the other
     * convs but the pointwise ones run im2col + shiftgemm (T = 1) instead
     * of OpenBLAS */
    int shift_maxc;
    int lowered;
} nn_kern_t;

/* The table of the current level (nn_cpu_level()). */
const nn_kern_t *nn_kern(void);

/* The architecture's builder: overwrites the entries of k (which holds the
 * scalar twins) that level has kernels for.  Called once per level. */
void nn_kern_fill_arch(nn_kern_t *k, nn_cpu_t level);

#endif
