/* lp_kern_x86 — the kernel tables of the x86 levels (lp_kern.h).
 *
 * Owns:    which AVX2 / AVX-512 / AMX kernel each x86 level of nn_cpu.h
 *          runs: AVX2 and AVX512 (no VNNI) the AVX2 kernels; AVX512VNNI
 *          the AVX-512 quantizers and vpdpbusd GEMMs, the conv shift path
 *          on byte quads, and the AVX-512 BF16 kernels where the CPU also
 *          has AVX-512 BF16; AMX those plus the tile kernels (AMX-BF16
 *          where CPUID has it), which run only after their start-up
 *          checks (lp_tile.c).  The pair rows, the pair shift GEMM,
 *          dequantization rows and Range EvoNorm rows stay AVX2 above AVX2.
 * Exposes: lp_kern_fill_arch.
 * Callers: lp_kern.c, once per level.
 */
#include "lowprec/lp_kern.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_simd.h"

static void s_fill_avx2(lp_kern_t *k)
{
    k->minmax = lp_minmax_avx2;
    k->quantize = lp_quantize_avx2;
    k->quantize_sr = lp_quantize_sr_avx2;
    k->dequantize = lp_dequantize_avx2;
    k->fake_quant_sr = lp_fake_quant_sr_avx2;
    k->fake_quant_sr_add = lp_fake_quant_sr_add_avx2;
    k->gemm = lp_gemm_kernel_avx2;
    k->shiftgemm = lp_shiftgemm_avx2;
    k->dequant_row = lp_dequant_row_avx2;
    k->dequant_rows = lp_dequant_rows_avx2;
    k->dequant_lin = lp_dequant_lin_avx2;
    k->pack_b_t = lp_pack_b_t_avx2;
    k->pack_b_4rows = lp_pack_b_4rows_avx2;
    k->pair_plane = lp_pair_plane_avx2;
    k->tap_sum_row = lp_tap_sum_row_avx2;
    k->ren_row_fwd = lp_ren_row_fwd_avx2;
    k->ren_row_bwd = lp_ren_row_bwd_avx2;
    k->find_eq = lp_find_eq_avx2;
    k->minmax_u8 = lp_minmax_u8_avx2;
    k->find_u8 = lp_find_u8_avx2;
}

/* The elementwise quantization kernels on zmm, at both AVX-512 levels
 * (lp_quant_avx512.c uses no VNNI instruction). */
static void s_fill_avx512_quant(lp_kern_t *k)
{
    k->minmax = lp_minmax_avx512;
    k->quantize = lp_quantize_avx512;
    k->quantize_sr = lp_quantize_sr_avx512;
    k->dequantize = lp_dequantize_avx512;
    k->fake_quant_sr = lp_fake_quant_sr_avx512;
    k->fake_quant_sr_add = lp_fake_quant_sr_add_avx512;
}

/* AVX-512 F/BW/VL without VNNI: the quantization kernels, the pair GEMM
 * and its row correction on zmm; the rest stays at AVX2. */
static void s_fill_avx512(lp_kern_t *k)
{
    s_fill_avx512_quant(k);
    k->shiftgemm = lp_shiftgemm_avx512bw;
    k->dequant_row = lp_dequant_row_avx512bw;
    k->dequant_rows = lp_dequant_rows_avx512bw;
}

static void s_fill_avx512vnni(lp_kern_t *k)
{
    s_fill_avx512_quant(k);
    k->gemm = lp_gemm_kernel_avx512;
    k->gemm_quads = 1;
    k->shiftgemm_q = lp_shiftgemm_q_avx512;
    k->dequant_row_q = lp_dequant_row_q_avx512;
    k->dequant_lin = lp_dequant_lin_avx512;
    k->quads = 1;
    k->quad_row = lp_quad_row_avx512;
    k->tap_isum_row = lp_tap_isum_row_avx512;
    if (__builtin_cpu_supports("avx512bf16")) {
        k->bf16 = 1;
        k->bf16_row = lp_bf16_row_avx512bf16;
        k->bf16_codes_row = lp_bf16_codes_row_avx512bf16;
        k->shiftdot_bf16 = lp_shiftdot_bf16_avx512bf16;
    }
}

/* AMX-BF16 in CPUID (leaf 7, EDX bit 22). */
static int s_cpu_amx_bf16(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
#else
    return 0;
#endif
}

static void s_fill_amx(lp_kern_t *k)
{
    k->tilegemm = lp_tilegemm_amx;
    if (k->bf16 && s_cpu_amx_bf16())
        k->tiledot_bf16 = lp_tiledot_bf16_amx;
}

void lp_kern_fill_arch(lp_kern_t *k, nn_cpu_t level)
{
    if (level >= NN_CPU_AVX2)
        s_fill_avx2(k);
    if (level >= NN_CPU_AVX512)
        s_fill_avx512(k);
    if (level >= NN_CPU_AVX512VNNI)
        s_fill_avx512vnni(k);
    if (level >= NN_CPU_AMX)
        s_fill_amx(k);
}

#else

/* (nothing on other architectures: ISO C wants a declaration) */
typedef int lp_kern_x86_none;

#endif
