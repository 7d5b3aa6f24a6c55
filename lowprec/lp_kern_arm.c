/* lp_kern_arm — the kernel tables of the aarch64 levels (lp_kern.h).
 *
 * Owns:    which ARM kernel each aarch64 level of nn_cpu.h runs: NEON the
 *          NEON quantizers (nearest and stochastic), dequantizer, min/max
 *          and fused stochastic fake-quantizers (lp_quant_neon.c), the
 *          GEMMs' dequantization rows (lp_gemm_neon.c), the conv shift
 *          path's pair grids and tap sums (lp_conv_neon.c) and the Range
 *          EvoNorm rows and chunk searches (lp_norm_neon.c); DOTPROD those
 *          plus the pair shift GEMM on UDOT (lp_gemm_dotprod.c); I8MM the
 *          same GEMM on UMMLA (lp_gemm_i8mm.c).  Every other entry stays
 *          the portable kernel the table starts with.
 * Exposes: lp_kern_fill_arch.
 * Callers: lp_kern.c, once per level.
 */
#include "lowprec/lp_kern.h"

#if defined(__aarch64__)

#include "lowprec/lp_simd_arm.h"

void lp_kern_fill_arch(lp_kern_t *k, nn_cpu_t level)
{
    if (level >= NN_CPU_NEON) {
        k->quantize = lp_quantize_neon;
        k->dequantize = lp_dequantize_neon;
        k->minmax = lp_minmax_neon;
        k->quantize_sr = lp_quantize_sr_neon;
        k->fake_quant_sr = lp_fake_quant_sr_neon;
        k->fake_quant_sr_add = lp_fake_quant_sr_add_neon;
        k->dequant_row = lp_dequant_row_neon;
        k->dequant_rows = lp_dequant_rows_neon;
        k->ren_row_fwd = lp_ren_row_fwd_neon;
        k->ren_row_bwd = lp_ren_row_bwd_neon;
        k->find_eq = lp_find_eq_neon;
        k->minmax_u8 = lp_minmax_u8_neon;
        k->find_u8 = lp_find_u8_neon;
        k->pair_plane = lp_pair_plane_neon;
        k->tap_sum_row = lp_tap_sum_row_neon;
    }
    if (level >= NN_CPU_DOTPROD)
        k->shiftgemm = lp_shiftgemm_dotprod;
    if (level >= NN_CPU_I8MM)
        k->shiftgemm = lp_shiftgemm_i8mm;
}

#else

/* (nothing on other architectures: ISO C wants a declaration) */
typedef int lp_kern_arm_none;

#endif
