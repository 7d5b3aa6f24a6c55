/* lp_kern — see lp_kern.h. */
#include "lowprec/lp_kern.h"

#include <pthread.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"

static lp_kern_t      s_tab[NN_CPU_LEVELS];
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* The portable kernels, no capabilities: the scalar twins but the blocked
 * GEMMs (lp_gemm_blk.c), quantization kernels (lp_quant_blk.c) and Range
 * EvoNorm rows (lp_norm_blk.c) on generic vectors: the twins' results bit
 * for bit, but the norm rows' sums (to ~1e-7 relative, as at the x86
 * levels). */
static void s_fill_twins(lp_kern_t *k)
{
    *k = (lp_kern_t){
        .minmax = lp_minmax_blk,
        .quantize = lp_quantize_blk,
        .quantize_sr = lp_quantize_sr_blk,
        .dequantize = lp_dequantize_blk,
        .fake_quant_sr = lp_fake_quant_sr_blk,
        .fake_quant_sr_add = lp_fake_quant_sr_add_blk,
        .gemm = lp_gemm_kernel_blk,
        .shiftgemm = lp_shiftgemm_blk,
        .shiftgemm_q = lp_shiftgemm_q_ref,
        .dequant_row = lp_dequant_row_ref,
        .dequant_rows = lp_dequant_rows_ref,
        .dequant_row_q = lp_dequant_row_q_ref,
        .dequant_lin = lp_dequant_lin_ref,
        .quads = 0,
        .pack_b_t = lp_pack_b_t_ref,
        .pack_b_4rows = lp_pack_b_4rows_ref,
        .pair_plane = lp_pair_plane_blk,
        .quad_row = lp_quad_row_ref,
        .tap_sum_row = lp_tap_sum_row_ref,
        .tap_isum_row = lp_tap_isum_row_ref,
        .ren_row_fwd = lp_ren_row_fwd_blk,
        .ren_row_bwd = lp_ren_row_bwd_blk,
        .find_eq = lp_find_eq_ref,
        .minmax_u8 = lp_minmax_u8_ref,
        .find_u8 = lp_find_u8_ref,
        .bf16 = 0,
        .bf16_row = lp_bf16_row_ref,
        .bf16_codes_row = lp_bf16_codes_row_ref,
        .shiftdot_bf16 = lp_shiftdot_bf16_ref,
        .tilegemm = NULL,
        .tiledot_bf16 = NULL,
    };
}

static void s_build(void)
{
    for (int l = 0; l < NN_CPU_LEVELS; l++) {
        s_fill_twins(&s_tab[l]);
        lp_kern_fill_arch(&s_tab[l], (nn_cpu_t)l);
    }
}

const lp_kern_t *lp_kern(void)
{
    pthread_once(&s_once, s_build);
    return &s_tab[nn_cpu_level()];
}

/* An architecture without a builder of its own (lp_kern_x86.c,
 * lp_kern_arm.c) runs the portable table at its one level. */
#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)
void lp_kern_fill_arch(lp_kern_t *k, nn_cpu_t level)
{
    (void)k;
    (void)level;
}
#endif
