/* nn_kern_x86 — the FP32 kernel tables of the x86 levels (nn_kern.h).
 *
 * Owns:    which kernels and conv paths each x86 level of nn_cpu.h runs:
 *          AVX2 the AVX2+FMA planes and max-pool rows, im2col/col2im planes
 *          and shifted GEMM,
 *          the shift path up to NN_SHIFT_AVX2_MAXC channels each side;
 *          AVX512 and above the AVX-512 shifted GEMM and dot, the shift
 *          path at any width and the lowered path (the planes stay AVX2).
 * Exposes: nn_kern_fill_arch.
 * Callers: nn_kern.c, once per level.
 */
#include "nn/nn_kern.h"

#if defined(__x86_64__) || defined(__i386__)

#include <limits.h>

#include "nn/nn_layers_simd.h"

/* On AVX2 CPUs only up to 64 channels each side: above that the AVX2
 * kernels' working set (a 4-row panel of packed weights plus the shifted B
 * rows of a 24-column tile) no longer fits a 32 KB L1 and OpenBLAS wins
 * (vgg11 convs from 128 channels, 2x2-8x8 images: sgemm 1.3-4.5x faster on
 * EPYC Zen 3, where the pad-column waste of small images adds to it; the
 * resnet20 convs, 16-64 channels, run 1.3-2x faster shifted;
 * bench/bench_layers.c). */
#define NN_SHIFT_AVX2_MAXC 64

static void s_fill_avx2(nn_kern_t *k)
{
    k->sum = nn_avx2_sum;
    k->sqdev = nn_avx2_sqdev;
    k->evo_fwd = nn_avx2_evo_fwd;
    k->evo_bwd_sums = nn_avx2_evo_bwd_sums;
    k->evo_bwd_dx = nn_avx2_evo_bwd_dx;
    k->maxpool2_row = nn_avx2_maxpool2_row;
    k->im2col_plane = nn_avx2_im2col_plane;
    k->col2im_plane = nn_avx2_col2im_plane;
    k->shiftgemm = nn_avx2_shiftgemm;
    k->shiftdot = nn_avx2_shiftdot;
    k->shift_maxc = NN_SHIFT_AVX2_MAXC;
}

static void s_fill_avx512(nn_kern_t *k)
{
    k->shiftgemm = nn_avx512_shiftgemm;
    k->shiftdot = nn_avx512_shiftdot;
    k->shift_maxc = INT_MAX;
    k->lowered = 1;
}

void nn_kern_fill_arch(nn_kern_t *k, nn_cpu_t level)
{
    if (level >= NN_CPU_AVX2)
        s_fill_avx2(k);
    if (level >= NN_CPU_AVX512)
        s_fill_avx512(k);
}

#else

/* (nothing on other architectures: ISO C wants a declaration) */
typedef int nn_kern_x86_none;

#endif
