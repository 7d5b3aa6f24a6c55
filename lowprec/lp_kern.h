/* lp_kern — the kernel tables of lowprec/: which SIMD kernel runs each
 * 8-bit primitive, chosen once per CPU level.
 *
 * Owns:    one table of kernel pointers per level of nn_cpu.h, filled once
 *          (on first use, thread-safe): first with every kernel's scalar
 *          twin (_ref), then by the architecture's builder (lp_kern_x86.c;
 *          another architecture brings its own lp_kern_<arch>.c defining
 *          lp_kern_fill_arch for its levels).  lp_kern() returns the table
 *          of the level nn_cpu_level() gives now, so LPGOSSIP_CPU and
 *          nn_cpu_force() choose the kernels exactly as they choose the
 *          level.
 * Exposes: lp_kern_t, lp_kern(), lp_kern_fill_arch (for the builders).
 * Callers: the dispatching functions of lp_quant.c, lp_gemm.c, lp_bf16.c,
 *          lp_tile.c, the conv shift path (lp_conv_shift.c) and Range EvoNorm
 *          (lp_norm.c).  Generic code reads capabilities from the table
 *          (quads, bf16, tilegemm) and never names a level.
 */
#ifndef LP_KERN_H
#define LP_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_quant.h"
#include "nn/nn_cpu.h"

typedef struct {
    /* quantizers (lp_quant.h) */
    void (*minmax)(float *mn, float *mx, const float *x, size_t n);
    void (*quantize)(uint8_t *q, const float *x, size_t n, lp_qparams p);
    void (*quantize_sr)(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first);
    void (*dequantize)(float *x, const uint8_t *q, size_t n, lp_qparams p);
    void (*fake_quant_sr)(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first);
    void (*fake_quant_sr_add)(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first);

    /* GEMMs and their dequantization rows (lp_gemm.h) */
    void (*gemm)(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N, int K,
                 int32_t *colsum); /* lp_gemm_u8u8 off the tiles */
    int gemm_quads; /* 1 where gemm reads only the quads of packed A */
    void (*shiftgemm)(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                      size_t ldb, int np, const int *toff, int T, size_t n);
    void (*shiftgemm_q)(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                        size_t ldb, int nq, const int *toff, int T, size_t n);
    void (*dequant_row)(float *out, const int32_t *S, const double *t, double c,
                        const double *base, size_t n);
    void (*dequant_rows)(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t W, int rows);
    void (*dequant_row_q)(float *out, const int32_t *S, const int32_t *SB, double c, double cb,
                          const double *base, size_t n);
    void (*dequant_lin)(float *out, const int32_t *S, const double *tw, double c, double tx,
                        double t4, const float *bias, size_t n);
    /* lp_gemm_pack_b's two whole-group layouts (lp_simd.h) */
    void (*pack_b_t)(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int K4, int N, int Np);
    void (*pack_b_4rows)(uint8_t *dst, const uint8_t *r0, ptrdiff_t rs, int N);

    /* the conv shift path's grid rows (lp_simd.h); quads: 1 when the
     * path runs on byte quads (shiftgemm_q), 0 on int16 pairs */
    int quads;
    void (*pair_plane)(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W);
    void (*quad_row)(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n);
    void (*tap_sum_row)(double *t, const int32_t *s, const int *off, int T, double c, size_t n);
    void (*tap_isum_row)(int32_t *sb, const int32_t *s, const int *off, int T, size_t n);

    /* Range EvoNorm rows (lp_layers.h, lp_simd.h) */
    void (*ren_row_fwd)(float *o, const float *x, size_t n, float v, float sc, float gamma,
                        float beta);
    void (*ren_row_bwd)(float *dx, double sums[3], const float *x, const float *g, size_t n,
                        float v, float sc, float gamma);
    size_t (*find_eq)(const float *x, size_t n, float v);
    void (*minmax_u8)(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n);
    size_t (*find_u8)(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi);

    /* bf16 (lp_bf16.h); bf16: 1 when these are the CPU's bf16 kernels */
    int bf16;
    void (*bf16_row)(uint16_t *dst, const float *src, size_t n);
    void (*bf16_codes_row)(uint16_t *dst, const uint8_t *q, size_t n);
    void (*shiftdot_bf16)(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                          const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                          size_t n);

    /* matrix tiles (lp_tile.h): the kernels of this level, NULL where it
     * has none; they run only after their start-up checks (lp_tile_ready,
     * lp_tile_bf16_ready) */
    void (*tilegemm)(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                     const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
    void (*tiledot_bf16)(float *D, size_t ldd, const uint16_t *Yp, int M, const uint16_t *B,
                         size_t ldb, int nch, const int *toff, int T, size_t n);
} lp_kern_t;

/* The table of the current level (nn_cpu_level()). */
const lp_kern_t *lp_kern(void);

/* The architecture's builder: overwrites the entries of k (which holds the
 * scalar twins) that level has kernels for.  Called once per level. */
void lp_kern_fill_arch(lp_kern_t *k, nn_cpu_t level);

#endif
