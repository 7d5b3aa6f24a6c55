/* lp_bf16 — 16-bit (bf16) weight gradients for the 8-bit ops (docs/design.md §5:
 * the paper and Banner et al. keep the weight gradient in 16- or 32-bit).
 *
 * Owns:    the process-wide choice of weight-gradient arithmetic for the
 *          int8 conv layers (fp32, or bf16 where the CPU has AVX-512 BF16),
 *          the bf16 conversions and the shifted dot product behind the bf16
 *          weight gradient, each with a scalar twin.
 * Exposes: lp_wgrad_set/lp_wgrad_bf16/lp_wgrad_name, lp_bf16_supported,
 *          conversions, lp_shiftdot_bf16 (+ _ref).
 * Callers: lp_conv_wgrad.c and lp_conv.c (conv backward and its
 *          fake-quant twin), the CLI (--wgrad), tests, bench.
 *
 * Why it is exact where it matters: the weight gradient of a conv is
 *   dw[oc][c][t] = sum_j g[oc][j] * x[c][j + toff[t]],  x = sx*q + mx
 * at the pixels inside the image (0 in the padding).  8-bit codes q are
 * integers 0..255, exact in bf16 (8 significant bits), and a bf16 x bf16
 * product is exact in FP32, so
 *   dw = sx * sum_j bf16(g) q  +  mx * sum_j bf16(g) [tap inside]
 * where only the incoming gradient g is rounded (to nearest even, relative
 * error <= 2^-9) and the sums are FP32 (vdpbf16ps: two products per lane
 * and instruction, twice the FP32 FMA rate, half the bytes).  Master
 * weights stay FP32.
 */
#ifndef LP_BF16_H
#define LP_BF16_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LP_WGRAD_AUTO = 0, /* bf16 where the CPU has it, else fp32 */
    LP_WGRAD_FP32 = 1,
    LP_WGRAD_BF16 = 2,
} lp_wgrad_t;

/* True when the kernel table of the current CPU level has bf16 kernels
 * (lp_kern.h; on x86: level AVX-512 VNNI or higher and a CPU with AVX-512
 * BF16, vdpbf16ps and vcvtne2ps2bf16). */
int lp_bf16_supported(void);
/* Sets the weight-gradient arithmetic.  BF16 on a CPU without it returns -1
 * with a message in err (the choice is then unchanged); 0 otherwise.  Not
 * thread-safe: call it before kernels run. */
int lp_wgrad_set(lp_wgrad_t w, char *err, size_t errlen);
/* Parses "auto" | "fp32" | "bf16"; returns -1 on anything else. */
int lp_wgrad_parse(const char *s, lp_wgrad_t *out);
/* True when the int8 conv layers compute weight gradients in bf16 now. */
int lp_wgrad_bf16(void);
/* "bf16" or "fp32": what lp_wgrad_bf16() means now. */
const char *lp_wgrad_name(void);

/* bf16 bits of f rounded to nearest even, as vcvtne2ps2bf16: subnormal
 * inputs flush to a signed zero, NaN stays NaN (quiet). */
uint16_t lp_bf16_from_f32(float f);
float    lp_bf16_to_f32(uint16_t h);
/* dst[i] = lp_bf16_from_f32(src[i]), i < n (overwritten). */
void lp_bf16_row(uint16_t *dst, const float *src, size_t n);
void lp_bf16_row_ref(uint16_t *dst, const float *src, size_t n);
/* dst[i] = bf16 of the integer code q[i] (exact), i < n (overwritten). */
void lp_bf16_codes_row(uint16_t *dst, const uint8_t *q, size_t n);
void lp_bf16_codes_row_ref(uint16_t *dst, const uint8_t *q, size_t n);

/* The weight-gradient product on bf16 grids (the contract of nn's shiftdot,
 * nn_layers_simd.h, on bf16 operands):
 *   D[m*ldd + c*T + t] += sum_{j < n} A[m*lda + j] * B[c*ldb + toff[t] + j]
 * for m < M, c < nch, t < T; accumulated.  Every B[c*ldb + toff[t] + j]
 * with j < n must be readable (toff may be negative).  The kernel sums the
 * exact products in FP32 (lanes, then a reduction); the twin sums them in
 * double and rounds once.  Budget (tests): |kernel - twin| <=
 * 2^-16 * sum_j |A B| per entry. */
void lp_shiftdot_bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                      const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n);
void lp_shiftdot_bf16_ref(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                          const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                          size_t n);
/* (Where lp_tile_bf16_ready(), lp_shiftdot_bf16 runs on AMX-BF16 tiles,
 * lp_tiledot_bf16, whose budget against the twin is 2^-14 instead; tests
 * run that path on the tile model at any level, lp_tile_force_model.) */

/* The AVX-512 BF16 kernels behind the dispatchers (lp_bf16_avx512bf16.c),
 * in the kernel tables (lp_kern_x86.c) only where lp_bf16_supported(). */
void lp_bf16_row_avx512bf16(uint16_t *dst, const float *src, size_t n);
void lp_bf16_codes_row_avx512bf16(uint16_t *dst, const uint8_t *q, size_t n);
void lp_shiftdot_bf16_avx512bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                                 const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                                 size_t n);

#endif
