/* lp_simd — private: the SIMD kernels behind the lp_quant / lp_gemm
 * dispatchers.  Each lives in a *_avx2.c or *_avx512.c file compiled with
 * the matching -m flags and called only through the kernel tables of the
 * levels that have them (lp_kern.h, lp_kern_x86.c).  Contracts are those of the public functions they
 * implement (lp_quant.h, lp_gemm.h).  Not for use outside lowprec/.
 */
#ifndef LP_SIMD_H
#define LP_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_quant.h"
#include "nn/nn_core.h"

/* The packing of lp_gemm_pack_b (lp_gemm.h), whole 4-code groups:
 *   lp_pack_b_t: groups [0, K4) of a transposed view (code k of column n at
 *     B[n*cs + k]): the 32-bit word B[n*cs + 4 k4 ..] to Bp[(k4*Np + n)*4 ..],
 *     for n < N;
 *   lp_pack_b_4rows: one group from four rows r0 + j*rs (j < 4) of N codes:
 *     dst[4n + j] = r0[j*rs + n]. */
void lp_pack_b_t_ref(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int K4, int N, int Np);
void lp_pack_b_t_avx2(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int K4, int N, int Np);
void lp_pack_b_4rows_ref(uint8_t *dst, const uint8_t *r0, ptrdiff_t rs, int N);
void lp_pack_b_4rows_avx2(uint8_t *dst, const uint8_t *r0, ptrdiff_t rs, int N);

/* The hash behind lp_sr_noise (shared so every path uses the same). */
#define LP_HASH_M1 0x7feb352du
#define LP_HASH_M2 0x846ca68bu
static inline uint32_t lp_hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= LP_HASH_M1;
    x ^= x >> 15;
    x *= LP_HASH_M2;
    x ^= x >> 16;
    return x;
}
/* Two 32-bit keys from a 64-bit seed (splitmix64 finalizer). */
static inline void lp_seed_keys(uint64_t seed, uint32_t *k1, uint32_t *k2)
{
    uint64_t z = nn_mix64(seed + NN_GOLDEN64);
    *k1 = (uint32_t)z;
    *k2 = (uint32_t)(z >> 32);
}
/* Noise bits for element index i: a Weyl sequence through one round of the
 * hash, h = hash((i*LP_WEYL + k1) ^ k2), u = (h>>8)*2^-24 - 1/2.  (One hash
 * of the plain counter i + k1 fails a pairs test of consecutive values;
 * the Weyl step fixes that, so one hash is enough where two were used.)
 * SIMD paths step the Weyl value by lanes*LP_WEYL with adds. */
#define LP_WEYL 0x9e3779b9u
static inline uint32_t lp_noise_bits(uint32_t i, uint32_t k1, uint32_t k2)
{
    return lp_hash32((i * LP_WEYL + k1) ^ k2);
}

/* The portable level's blocked twins (lp_quant_blk.c), any target. */
void lp_minmax_blk(float *mn, float *mx, const float *x, size_t n);
void lp_quantize_blk(uint8_t *q, const float *x, size_t n, lp_qparams p);
void lp_quantize_sr_blk(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                        uint32_t first);
void lp_dequantize_blk(float *x, const uint8_t *q, size_t n, lp_qparams p);
void lp_fake_quant_sr_blk(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                          uint64_t seed, uint32_t first);
void lp_fake_quant_sr_add_blk(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                              uint32_t first);

/* Range EvoNorm rows (lp_norm_blk.c), any target. */
void lp_ren_row_fwd_blk(float *o, const float *x, size_t n, float v, float sc, float gamma,
                        float beta);
void lp_ren_row_bwd_blk(float *dx, double sums[3], const float *x, const float *g, size_t n,
                        float v, float sc, float gamma);

void lp_minmax_avx2(float *mn, float *mx, const float *x, size_t n);
void lp_quantize_avx2(uint8_t *q, const float *x, size_t n, lp_qparams p);
void lp_quantize_sr_avx2(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                         uint32_t first);
void lp_dequantize_avx2(float *x, const uint8_t *q, size_t n, lp_qparams p);
void lp_fake_quant_sr_avx2(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                           uint64_t seed, uint32_t first);
void lp_fake_quant_sr_add_avx2(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                               uint32_t first);

void lp_minmax_avx512(float *mn, float *mx, const float *x, size_t n);
void lp_quantize_avx512(uint8_t *q, const float *x, size_t n, lp_qparams p);
void lp_quantize_sr_avx512(uint8_t *q, const float *x, size_t n, lp_qparams p, uint64_t seed,
                           uint32_t first);
void lp_dequantize_avx512(float *x, const uint8_t *q, size_t n, lp_qparams p);
void lp_fake_quant_sr_avx512(float *y, uint8_t *q, const float *x, size_t n, lp_qparams p,
                             uint64_t seed, uint32_t first);
void lp_fake_quant_sr_add_avx512(float *y, const float *x, size_t n, lp_qparams p, uint64_t seed,
                                 uint32_t first);

/* GEMM micro-kernels: see lp_gemm.c for the packed layouts. */
void lp_gemm_kernel_avx2(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                         int K, int32_t *colsum);
void lp_gemm_kernel_avx512(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M,
                           int N, int K, int32_t *colsum);

/* Range EvoNorm row kernels (lp_layers.h). */
void lp_ren_row_fwd_avx2(float *o, const float *x, size_t n, float v, float sc, float gamma,
                         float beta);
void lp_ren_row_bwd_avx2(float *dx, double sums[3], const float *x, const float *g, size_t n,
                         float v, float sc, float gamma);

/* Pair-grid helpers of the conv shift path (lp_conv_shift.c), scalar twins
 * and AVX2 versions (same results: integer sums, and the double product
 * c * sum rounded once):
 *   lp_pair_plane: the pair rows of an image plane in all V = 2 pad + 1
 *                column-shift variants of s_shift_grid: for h < H, w < W,
 *                v < V (dx = v - pad), dst[v*vstride + h*W + w] =
 *                lp_pair(r0[h*W + w], r1 ? r1[h*W + w] : 0), or 0 in the
 *                columns only a read wrapping into the next row reaches
 *                (w >= W + dx for dx < 0, w < dx for dx > 0) (overwritten);
 *                chs[h*ldc + w] += r0 + r1 there (accumulated once; chs may
 *                be NULL);
 *   lp_tap_sum_row: t[w] = c * sum_{k < T} s[w + off[k]] (overwritten),
 *                w < n; off may be negative. */
void lp_pair_plane_ref(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W);
void lp_pair_plane_avx2(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                        const uint8_t *r0, const uint8_t *r1, int H, int W);
/* the portable level's (lp_gemm_blk.c) */
void lp_pair_plane_blk(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W);
void lp_tap_sum_row_ref(double *t, const int32_t *s, const int *off, int T, double c, size_t n);
void lp_tap_sum_row_avx2(double *t, const int32_t *s, const int *off, int T, double c, size_t n);

/* First index i < n with x[i] == v, or n (Range EvoNorm's first arg-max /
 * arg-min of a chunk). */
size_t lp_find_eq_ref(const float *x, size_t n, float v);
size_t lp_find_eq_avx2(const float *x, size_t n, float v);

/* The same on codes (Range EvoNorm's chunk ranges straight from its saved
 * codes: dequantization is monotone, so the extremes of the values are the
 * values of the extreme codes):
 *   lp_minmax_u8: *mn, *mx = min and max of q (n > 0);
 *   lp_find_u8:   first index i < n with lo <= q[i] <= hi, or n. */
void lp_minmax_u8_ref(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n);
void lp_minmax_u8_avx2(uint8_t *mn, uint8_t *mx, const uint8_t *q, size_t n);
size_t lp_find_u8_ref(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi);
size_t lp_find_u8_avx2(const uint8_t *q, size_t n, uint8_t lo, uint8_t hi);

void lp_shiftgemm_avx2(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       size_t ldb, int np, const int *toff, int T, size_t n);
void lp_shiftgemm_avx512bw(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                           size_t ldb, int np, const int *toff, int T, size_t n);
void lp_dequant_row_avx512bw(float *out, const int32_t *S, const double *t, double c,
                             const double *base, size_t n);
void lp_dequant_rows_avx512bw(float *out, const int32_t *S, const double *t, double c,
                              const double *base, size_t W, int rows);
void lp_dequant_row_avx2(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t n);
void lp_dequant_rows_avx2(float *out, const int32_t *S, const double *t, double c,
                          const double *base, size_t W, int rows);
void lp_dequant_lin_avx2(float *out, const int32_t *S, const double *tw, double c, double tx,
                         double t4, const float *bias, size_t n);
void lp_dequant_lin_avx512(float *out, const int32_t *S, const double *tw, double c, double tx,
                           double t4, const float *bias, size_t n);

/* Quad-grid helpers of the conv shift path at the AVX-512 VNNI level
 * (lp_conv_shift.c), scalar twins and AVX-512 versions (exact integers, and the
 * dequantization's double arithmetic in the twin's order):
 *   lp_quad_row: dst[w] = lp_quad(r0[w], r1[w], r2[w], r3[w]) (overwritten;
 *                r1..r3 may be NULL: code 0), chs[w] += the four codes
 *                (accumulated; chs may be NULL), w < n;
 *   lp_tap_isum_row: sb[w] = sum_{k < T} s[w + off[k]] (overwritten). */
void lp_quad_row_ref(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n);
void lp_quad_row_avx512(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n);
void lp_tap_isum_row_ref(int32_t *sb, const int32_t *s, const int *off, int T, size_t n);
void lp_tap_isum_row_avx512(int32_t *sb, const int32_t *s, const int *off, int T, size_t n);
/* The AMX tile kernel of lp_tilegemm (lp_tile.h), for n >= 32. */
void lp_tilegemm_amx(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                     const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
/* The AMX-BF16 tile kernel of lp_tiledot_bf16 (lp_tile.h), on packed pairs. */
void lp_tiledot_bf16_amx(float *D, size_t ldd, const uint16_t *Yp, int M, const uint16_t *B,
                         size_t ldb, int nch, const int *toff, int T, size_t n);
int  lp_tiledot_bf16_emu_packed(float *D, size_t ldd, const uint16_t *Yp, int M,
                                const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                                size_t n);
void lp_shiftgemm_q_avx512(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                           size_t ldb, int nq, const int *toff, int T, size_t n);
void lp_dequant_row_q_avx512(float *out, const int32_t *S, const int32_t *SB, double c,
                             double cb, const double *base, size_t n);

#endif
