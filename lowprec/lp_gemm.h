/* lp_gemm — exact integer GEMM on 8-bit codes: C_int32 = A_u8 * B_u8.
 *
 * Owns:    the packed operand layouts and the micro-kernels (portable C,
 *          AVX2, AVX-512 VNNI; run-time dispatch through nn_cpu).  All three
 *          give bit-identical int32 results because the arithmetic is exact.
 * Exposes: packing, the GEMM, its plain _ref twin, and the affine
 *          correction that turns the int32 sums into real products.
 * Callers: lp_conv.c, lp_conv_shift.c, lp_linear.c (conv / linear forward and input
 *          gradient), bench.
 *
 * Dimension legend: M rows of A and C, N columns of B and C, K the reduction.
 *
 * Why the packing: VNNI's vpdpbusd multiplies unsigned bytes (its first
 * source, the vector operand B) by signed bytes (the second source, which
 * may be a 4-byte broadcast: operand A) and adds groups of 4 into int32.
 * Both our operands are uint8 codes, so A is stored shifted, a' = a - 128
 * (int8), and the kernel adds the 128 back with the column sums of B:
 *     sum_k a_k b_k = sum_k (a_k - 128) b_k + 128 * sum_k b_k.
 * Layouts (K4 = ceil(K/4), Mp = M rounded up to 8, Np = N rounded up to 16;
 * padding entries are 0, so they add nothing):
 *     A packed: int8  [K4][Mp][4],  Ap[(k4*Mp + m)*4 + j] = A(m, 4*k4+j) - 128
 *               then, at byte K4*Mp*4, the same codes unshifted as int16
 *               pairs for AVX2 (lp_pair lanes) by tiles of 4 rows,
 *               [Mp/4][K4][4][2]: lane 0 = (A(m, 4k4), A(m, 4k4+2)), lane 1 =
 *               (A(m, 4k4+1), A(m, 4k4+3)) (a tile's panel is contiguous:
 *               with the k-major layout above a 512-row A strides 4 KB, a
 *               page, per k group); then, at byte K4*Mp*12, the shifted
 *               codes again in the AMX tile layout (lp_tile.h, one group
 *               of K4 rows: the lane of A(m, 4k4..4k4+3) at
 *               lp_tile_a_at(M, K4, m, 0, k4)); all parts are always
 *               written, so a packed A serves every CPU level
 *     B packed: uint8 [K4][Np][4],  Bp[(k4*Np + n)*4 + j] = B(4*k4+j, n)
 * The AVX2 path has no vpdpbusd, and vpmaddubsw saturates on full bytes:
 * it splits each 32-bit group of B into its even and odd bytes as int16
 * (one and, one shift, shared by the rows of a tile) and multiplies them
 * with the int16 pairs of A by vpmaddwd (exact, 16 products each).
 *
 * At the AMX level the product runs on tiles (lp_tile.h): packed B's K4
 * rows of Np lanes are the tile GEMM's rows at stride Np (B tiles load
 * them as they are), A comes from its tile part, and the 128 shift is
 * restored with B's column sums after; where the largest tile depth that
 * divides K4 is under 4 rows (and not all of K4) vpdpbusd does it.
 *
 * Range: |C| <= 255*255*K < 2^31 requires K <= LP_GEMM_MAX_K.
 *
 * Real products.  With a = sa*qa + ma and b = sb*qb + mb (lp_qparams),
 *   sum_k a_k b_k = sa*sb*S + sa*mb*SA + ma*sb*SB + K*ma*mb,
 * where S = sum_k qa qb (this GEMM), SA = sum_k qa (row sums of A, from
 * lp_gemm_pack_a), SB = sum_k qb (column sums of B, from lp_gemm_u8u8).  The
 * integer sums are exact; the only rounding is in this float combination
 * (lp_gemm_dequant).
 */
#ifndef LP_GEMM_H
#define LP_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "lowprec/lp_quant.h"

#define LP_GEMM_MAX_K 32768
#define LP_GEMM_MR    8     /* row padding of packed A */
#define LP_GEMM_NR    16    /* column padding of packed B */

static inline int lp_gemm_k4(int K) { return (K + 3) / 4; }
static inline int lp_gemm_mp(int M) { return (M + LP_GEMM_MR - 1) / LP_GEMM_MR * LP_GEMM_MR; }
static inline int lp_gemm_np(int N) { return (N + LP_GEMM_NR - 1) / LP_GEMM_NR * LP_GEMM_NR; }

/* Bytes of a packed A (M, K) / packed B (K, N). */
size_t lp_gemm_pack_a_bytes(int M, int K);
size_t lp_gemm_pack_b_bytes(int K, int N);

/* Ap (lp_gemm_pack_a_bytes) = packed A, where A(m, k) = A[m*rs + k*cs]
 * (rs, cs in elements: row-major A is rs = K, cs = 1; a transposed view
 * swaps them).  rowsum (M, may be NULL) = sum_k A(m, k).  Overwrites both. */
void lp_gemm_pack_a(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs, ptrdiff_t cs,
                    int M, int K);
/* Its twin, element by element: the same bytes. */
void lp_gemm_pack_a_ref(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs,
                        ptrdiff_t cs, int M, int K);
/* lp_gemm_pack_a for a product run at once on this CPU level: where
 * lp_gemm_u8u8 for depth K reads only the quads of packed A (the VNNI
 * kernel off the tiles), only they (and rowsum) are written, the rest of
 * Ap is left as it was; elsewhere all of lp_gemm_pack_a.  The packed A
 * serves lp_gemm_u8u8 at the level and tile state of the call only. */
void lp_gemm_pack_a_run(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs,
                        ptrdiff_t cs, int M, int K);
/* Bp (lp_gemm_pack_b_bytes) = packed B, where B(k, n) = B[k*rs + n*cs]. */
void lp_gemm_pack_b(uint8_t *Bp, const uint8_t *B, ptrdiff_t rs, ptrdiff_t cs, int K, int N);

/* C (M, N; row stride ldc >= N) = A * B exactly, from packed operands.
 * colsum (N, may be NULL) = sum_k B(k, n).  Overwrites C and colsum.
 * 1 <= K <= LP_GEMM_MAX_K, M, N >= 1. */
void lp_gemm_u8u8(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N, int K,
                  int32_t *colsum);
/* (Tests run its AMX tile path on the tile model at any level:
 * lp_tile_force_model, lp_tile.h.) */

/* Plain twin on row-major A (M, K) and B (K, N): C (M, N) = A * B. */
void lp_gemm_u8u8_ref(int32_t *C, const uint8_t *A, const uint8_t *B, int M, int N, int K);

/* The portable kernel (what lp_gemm_u8u8 runs at NN_CPU_PORTABLE):
 * generic vectors, lp_gemm_blk.c. */
void lp_gemm_kernel_blk(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                        int K, int32_t *colsum);

/* Real value of one entry (see the header comment), evaluated in double and
 * rounded once to float: K terms, S the int32 sum, SA/SB row/column sums. */
static inline float lp_gemm_dequant(int32_t S, int32_t SA, int32_t SB, int K, lp_qparams a,
                                    lp_qparams b)
{
    double sa = a.scale, ma = a.min, sb = b.scale, mb = b.min;
    return (float)(sa * sb * S + sa * mb * SA + ma * sb * SB + (double)K * ma * mb);
}

/* ---- shifted-row GEMM on int16 pairs --------------------------------------
 * The im2col-free integer product behind the stride-1 "same" convolutions
 * (lp_conv_shift.c), the integer twin of nn's shifted GEMM (nn_layers_simd.h).
 * A pair grid holds np rows of ldb int32 lanes; lane j of row p holds two
 * codes as int16: b(2p, j) in the low half, b(2p+1, j) in the high half.
 * Row p shifted by toff[t] is row k = p*T + t (K2 = np*T rows) of a virtual
 * lowered matrix, and the product of two lanes is the 2-term dot product
 * lo*lo + hi*hi (what vpmaddwd computes):
 *   S[m*ldc + j] = sum_{p < np, t < T} A(m, p*T + t) . B[p*ldb + toff[t] + j]
 * for m < M, j < n; S overwritten.  A (M, K2) lanes of int16 pairs, packed
 * by m-tiles of 4: Ap[(m/4)*K2*4 + k*4 + m%4] (lp_shift_pack_lanes lanes;
 * rows past M zero).  Every B[p*ldb + toff[t] + j] with j < n must be
 * readable (toff may be negative).
 * Range: codes 0..255 in both operands (no 128 shift), a lane product is at
 * most 2*255*255 and |S| <= 255*255*2*K2 < 2^31 for 2*K2 <= LP_GEMM_MAX_K.
 * On AVX2 each tile is 4 rows x 16 columns: per (p, t) 2 loads of B, 4
 * broadcasts, 8 vpmaddwd + 8 vpaddd (16 MACs per vpmaddwd, the exact
 * u8 x u8 rate of AVX2: vpmaddubsw saturates on full bytes); it runs at
 * about 87% of the vpmaddwd + vpaddd peak on an EPYC Zen 4, and a 6 x 16
 * tile was slower (2026-11-24).  Exact at every level, so all levels give
 * the same S. */
static inline size_t lp_shift_pack_lanes(int M, int K2)
{
    return (size_t)((M + 3) / 4) * 4 * (size_t)K2;
}
void lp_shiftgemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                  size_t ldb, int np, const int *toff, int T, size_t n);
void lp_shiftgemm_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                      size_t ldb, int np, const int *toff, int T, size_t n);
/* The same sums as blocked loops compilers vectorize (lp_gemm_blk.c): the
 * portable level's kernel. */
void lp_shiftgemm_blk(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                      size_t ldb, int np, const int *toff, int T, size_t n);
/* The driver of SIMD shift GEMMs built from a tile of 4 rows (rows <= 4
 * of them real) x 16 columns from column j: every whole tile, then the
 * last n % 16 columns by lp_shiftgemm_blk. */
typedef void lp_shift_tile16_fn(int32_t *S, size_t ldc, const uint32_t *a, int rows,
                                const uint32_t *B, size_t ldb, int np, const int *toff, int T,
                                size_t j);
void lp_shiftgemm_tiles16(lp_shift_tile16_fn *tile, int32_t *S, size_t ldc, const uint32_t *Ap,
                          int M, const uint32_t *B, size_t ldb, int np, const int *toff, int T,
                          size_t n);

/* ---- shifted-row GEMM on byte quads (AVX-512 VNNI level) -----------------
 * The same product as lp_shiftgemm with four channels per 32-bit lane, for
 * vpdpbusd (u8 x s8 -> int32, four products and the accumulation in one
 * instruction: twice the products of a pair lane and no separate add).
 * Lane j of quad row p of B holds the codes b(4p+l, j), l = 0..3, as
 * unsigned bytes (byte l); a lane of A holds a(m, 4p+l) - 128 as signed
 * bytes (lp_quad_s8), packed by m-tiles of 4 as for pairs.  Overwrites
 *   S[m*ldc + j] = sum_{p < nq, t < T} sum_l (a - 128)(m, 4p+l, t) * b(4p+l, j + toff[t])
 * The caller restores the shift: the true sum is S + 128 * (the sum of the
 * b codes the taps read), which the conv's correction already computes.
 * Range: |S| <= 128*255*4*K4 < 2^31 for 4*nq*T <= LP_GEMM_MAX_K. */
void lp_shiftgemm_q(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                    size_t ldb, int nq, const int *toff, int T, size_t n);
void lp_shiftgemm_q_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                        size_t ldb, int nq, const int *toff, int T, size_t n);

/* Four codes as one lane of a quad grid (byte l = c_l). */
static inline uint32_t lp_quad(uint8_t c0, uint8_t c1, uint8_t c2, uint8_t c3)
{
    return (uint32_t)c0 | (uint32_t)c1 << 8 | (uint32_t)c2 << 16 | (uint32_t)c3 << 24;
}
/* Four codes shifted to signed bytes (c - 128) as one lane of a packed A. */
static inline uint32_t lp_quad_s8(uint8_t c0, uint8_t c1, uint8_t c2, uint8_t c3)
{
    return lp_quad(c0 ^ 0x80, c1 ^ 0x80, c2 ^ 0x80, c3 ^ 0x80);
}

/* out[i] = (float)(c*(S[i] + 128*SB[i]) + cb*SB[i] + base[i]), i < n: the
 * correction of a row of quad sums (lp_shiftgemm_q), whose 128 shift is
 * restored exactly in int32 first; then the same double arithmetic as
 * lp_dequant_row with t[i] = cb*SB[i], so the quad and pair paths give the
 * same floats.  Overwrites out. */
void lp_dequant_row_q(float *out, const int32_t *S, const int32_t *SB, double c, double cb,
                      const double *base, size_t n);
void lp_dequant_row_q_ref(float *out, const int32_t *S, const int32_t *SB, double c, double cb,
                          const double *base, size_t n);

/* Two codes as one lane of a pair grid / packed A. */
static inline uint32_t lp_pair(uint8_t lo, uint8_t hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

/* out[i] = (float)(c*S[i] + t[i] + base[i]), i < n: the affine correction
 * of a row of integer sums (the terms of the other operand's codes in t,
 * those of this row's codes in base), evaluated in double without FMA and
 * rounded once.  Overwrites out; every level gives the same floats. */
void lp_dequant_row(float *out, const int32_t *S, const double *t, double c, const double *base,
                    size_t n);
void lp_dequant_row_ref(float *out, const int32_t *S, const double *t, double c,
                        const double *base, size_t n);
/* out[j] = (float)(c*S[j] + tw[j] + tx + t4) (+ bias[j] in float after the
 * rounding when bias is not NULL), j < n, in double without FMA, added in
 * that order: one row of the linear layer's correction (lp_linear.c; tw the
 * terms of the other operand's codes, tx those of this row, t4 the
 * constant).  Overwrites out; every level gives the same floats. */
void lp_dequant_lin(float *out, const int32_t *S, const double *tw, double c, double tx,
                    double t4, const float *bias, size_t n);
void lp_dequant_lin_ref(float *out, const int32_t *S, const double *tw, double c, double tx,
                        double t4, const float *bias, size_t n);

/* lp_dequant_row on rows consecutive rows of W values that share base
 * (W values): out[r*W + i] from S[r*W + i], t[r*W + i] and base[i], in one
 * call (the rows of a conv output whose taps cover the same kernel rows;
 * W is 8 or 16 on resnet20's later stages, where a call per row cost more
 * than its arithmetic).  The same floats as lp_dequant_row row by row. */
void lp_dequant_rows(float *out, const int32_t *S, const double *t, double c,
                     const double *base, size_t W, int rows);
void lp_dequant_rows_ref(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t W, int rows);

#endif
