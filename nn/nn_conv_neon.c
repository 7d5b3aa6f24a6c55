/* nn_conv_neon — the shifted GEMM and dot of the conv shift path
 * (nn_layers_simd.h) on NEON vfmaq_f32: every aarch64 CPU.
 *
 * Owns:    nn_neon_shiftgemm: tiles of the 4 rows of a packed A block x 16
 *          columns (16 accumulators, one 128-bit A load per K step, a lane
 *          each: vfmaq_laneq_f32); each output sums its K products in order
 *          with fused multiply-adds, like the x86 FMA kernels; the last
 *          columns the same with fmaf.  nn_neon_shiftdot: each output's n
 *          products in 4 vector partial sums of 4 lanes, 3 taps per A load,
 *          folded in a fixed order (float sums to rounding of the twin's).
 * Callers: the aarch64 kernel tables (nn_kern_arm.c).
 */
#include <arm_neon.h>
#include <math.h>

#include "nn/nn_kern_arm.h"

static void s_gemm_tile(float *C, size_t ldc, const float *a, int rows, const float *B,
                        size_t ldb, int nch, const int *toff, int T, size_t j)
{
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            acc[r][v] = vdupq_n_f32(0.0f);
    for (int c = 0; c < nch; c++)
        for (int t = 0; t < T; t++, a += 4) {
            const float *b = B + (size_t)c * ldb + toff[t] + j;
            const float32x4_t av = vld1q_f32(a);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const float32x4_t bv = vld1q_f32(b + 4 * v);
                acc[0][v] = vfmaq_laneq_f32(acc[0][v], bv, av, 0);
                acc[1][v] = vfmaq_laneq_f32(acc[1][v], bv, av, 1);
                acc[2][v] = vfmaq_laneq_f32(acc[2][v], bv, av, 2);
                acc[3][v] = vfmaq_laneq_f32(acc[3][v], bv, av, 3);
            }
        }
    /* r runs to 4 (unrolled) so that acc stays in registers: a runtime
     * bound on r made GCC keep acc on the stack, stored every K step */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            if (r < rows)
                vst1q_f32(C + (size_t)r * ldc + j + 4 * v, acc[r][v]);
}

void nn_neon_shiftgemm(float *C, size_t ldc, const float *Ap, int M, const float *B, size_t ldb,
                       int nch, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nch * T, n16 = n / 16 * 16;
    for (int m0 = 0; m0 < M; m0 += 4) {
        const float *a = Ap + (size_t)(m0 / 4) * K * 4;
        const int rows = M - m0 < 4 ? M - m0 : 4;
        float *c = C + (size_t)m0 * ldc;
        for (size_t j = 0; j < n16; j += 16)
            s_gemm_tile(c, ldc, a, rows, B, ldb, nch, toff, T, j);
        for (int r = 0; r < rows; r++) /* the last columns, the same order */
            for (size_t j = n16; j < n; j++) {
                float acc = 0.0f;
                for (size_t k = 0; k < K; k++)
                    acc = fmaf(a[k * 4 + (size_t)r], B[(k / (size_t)T) * ldb + toff[k % (size_t)T] + j],
                               acc);
                c[(size_t)r * ldc + j] = acc;
            }
    }
}

/* D[0..nt-1] += the dots of row a with the rows b[0..2] (nt <= 3 used) */
static void s_dots3(float *D, const float *a, const float *const b[3], int nt, size_t n)
{
    float32x4_t acc[3][4];
    for (int t = 0; t < 3; t++)
        for (int v = 0; v < 4; v++)
            acc[t][v] = vdupq_n_f32(0.0f);
    const size_t n16 = n / 16 * 16;
    for (size_t j = 0; j < n16; j += 16)
        for (int v = 0; v < 4; v++) {
            const float32x4_t av = vld1q_f32(a + j + 4 * v);
            for (int t = 0; t < 3; t++)
                acc[t][v] = vfmaq_f32(acc[t][v], av, vld1q_f32(b[t] + j + 4 * v));
        }
    for (int t = 0; t < nt; t++) {
        const float32x4_t s = vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]),
                                        vaddq_f32(acc[t][2], acc[t][3]));
        float sum = vaddvq_f32(s);
        for (size_t j = n16; j < n; j++)
            sum = fmaf(a[j], b[t][j], sum);
        D[t] += sum;
    }
}

void nn_neon_shiftdot(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                      size_t ldb, int nch, const int *toff, int T, size_t n)
{
    for (int m = 0; m < M; m++)
        for (int c = 0; c < nch; c++)
            for (int t0 = 0; t0 < T; t0 += 3) {
                const int nt = T - t0 < 3 ? T - t0 : 3;
                const float *b[3];
                for (int t = 0; t < 3; t++) /* missing taps repeat the last */
                    b[t] = B + (size_t)c * ldb + toff[t0 + (t < nt ? t : nt - 1)];
                s_dots3(D + (size_t)m * ldd + (size_t)c * T + t0, A + (size_t)m * lda, b, nt, n);
            }
}
