/* lp_simd_arm — the ARM kernels of lowprec/ (aarch64 only): declarations
 * for the builder of the ARM levels' tables (lp_kern_arm.c) and the tests.
 * Each lives in a *_neon.c (Advanced SIMD, every aarch64 CPU) or
 * *_dotprod.c (UDOT, -march=armv8.2-a+dotprod) or *_i8mm.c (UMMLA) file and
 * has a scalar _ref twin (lp_quant.h, lp_gemm.h, lp_layers.h) that gives
 * the same bits (the norm rows' sums: see lp_norm_neon.c).
 */
#ifndef LP_SIMD_ARM_H
#define LP_SIMD_ARM_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_quant.h"

#if defined(__aarch64__)
/* lp_quant_neon.c: the twins' operation order, bit-identical */
void lp_quantize_neon(uint8_t *q, const float *x, size_t n, lp_qparams p);
void lp_dequantize_neon(float *x, const uint8_t *q, size_t n, lp_qparams p);
void lp_minmax_neon(float *mn, float *mx, const float *x, size_t n);
void lp_quantize_sr_neon(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                         uint32_t first);
void lp_fake_quant_sr_neon(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                           uint64_t seed, uint32_t first);
void lp_fake_quant_sr_add_neon(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                               uint32_t first);

/* lp_gemm_neon.c: the dequantization rows in double, bit-identical */
void lp_dequant_row_neon(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t n);
void lp_dequant_rows_neon(float *out, const int32_t *S, const double *t, double c,
                          const double *base, size_t W, int rows);

/* lp_conv_neon.c: the conv shift path's pair grids and tap sums, the
 * twins' results */
void lp_pair_plane_neon(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                        const uint8_t *r0, const uint8_t *r1, int H, int W);
void lp_tap_sum_row_neon(double *t, const int32_t *s, const int *off, int T, double c, size_t n);

/* lp_norm_neon.c: the Range EvoNorm rows; forward and dx bit-identical to
 * the twins, the backward's sums the portable level's (lp_norm_blk.c) bit
 * for bit; the chunk ranges' searches, the twins' results */
void lp_ren_row_fwd_neon(float *o, const float *x, size_t n, float v, float sc, float gamma,
                         float beta);
void lp_ren_row_bwd_neon(float *dx, double sums[3], const float *x, const float *g, size_t n,
                         float v, float sc, float gamma);
size_t lp_find_eq_neon(const float *x, size_t n, float v);
void lp_minmax_u8_neon(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n);
size_t lp_find_u8_neon(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi);

/* lp_gemm_dotprod.c: lp_shiftgemm on UDOT.  A pair lane (lo | hi << 16,
 * codes 0..255) read as four bytes is (lo, 0, hi, 0), so the four-byte dot
 * product of an A lane and a B lane is exactly the lane's pair product. */
void lp_shiftgemm_dotprod(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                          size_t ldb, int np, const int *toff, int T, size_t n);

/* lp_gemm_i8mm.c: lp_shiftgemm on UMMLA (2x8 by 8x2 byte blocks: the lanes
 * of two K steps per 8-byte row), the same exact sums. */
void lp_shiftgemm_i8mm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       size_t ldb, int np, const int *toff, int T, size_t n);
#endif

#endif
