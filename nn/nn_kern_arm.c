/* nn_kern_arm — the FP32 kernel tables of the aarch64 levels (nn_kern.h).
 *
 * Owns:    which kernels and conv paths each aarch64 level of nn_cpu.h
 *          runs: NEON and above the NEON shifted GEMM and dot
 *          (nn_conv_neon.c; the shifted dot serves the int8 convs' weight
 *          gradients).  The FP32 convs stay on OpenBLAS (shift_maxc 0,
 *          not lowered) until an ARM machine shows the shift path pays;
 *          the EvoNorm planes stay portable.
 * Exposes: nn_kern_fill_arch.
 * Callers: nn_kern.c, once per level.
 */
#include "nn/nn_kern.h"

#if defined(__aarch64__)

#include "nn/nn_kern_arm.h"

void nn_kern_fill_arch(nn_kern_t *k, nn_cpu_t level)
{
    if (level >= NN_CPU_NEON) {
        k->shiftgemm = nn_neon_shiftgemm;
        k->shiftdot = nn_neon_shiftdot;
    }
}

#else

/* (nothing on other architectures: ISO C wants a declaration) */
typedef int nn_kern_arm_none;

#endif
