/* nn_conv_blk — the portable level's shifted dot (nn_shiftdot): blocked
 * loops that compilers vectorize with the baseline vector unit of any
 * target (SSE2, NEON, ...), no intrinsics.
 *
 * Owns:    nn_shiftdot_blk.  Each output sums its n products in
 *          NN_BLK_L independent partial sums (lane l takes j = l mod
 *          NN_BLK_L), added in a fixed tree at the end, so one A row load
 *          serves NN_BLK_T taps at once; the summation order differs from
 *          the twin's serial one (float results agree to rounding, as the
 *          SIMD levels' do; tests/test_nn_layers.c).
 * Callers: the kernel table's portable entry (nn_kern.c).
 */
#include "nn/nn_layers_simd.h"

#define NN_BLK_L 16
#define NN_BLK_T 3

static float s_fold(float v[NN_BLK_L])
{
    for (int w = NN_BLK_L / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            v[l] += v[l + w];
    return v[0];
}

/* D[k0..k0+nt-1] += the dots of row a with the rows b[0..nt-1] (nt <= 3) */
static void s_dots(float *D, const float *a, const float *const b[NN_BLK_T], int nt, size_t n)
{
    float acc[NN_BLK_T][NN_BLK_L] = {{0}};
    const size_t nl = n / NN_BLK_L * NN_BLK_L;
    for (size_t j = 0; j < nl; j += NN_BLK_L)
        for (int t = 0; t < NN_BLK_T; t++)
            for (int l = 0; l < NN_BLK_L; l++)
                acc[t][l] += a[j + l] * b[t][j + l];
    for (int t = 0; t < nt; t++) {
        for (size_t j = nl; j < n; j++)
            acc[t][j - nl] += a[j] * b[t][j];
        D[t] += s_fold(acc[t]);
    }
}

void nn_shiftdot_blk(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                     size_t ldb, int nch, const int *toff, int T, size_t n)
{
    for (int m = 0; m < M; m++)
        for (int c = 0; c < nch; c++)
            for (int t0 = 0; t0 < T; t0 += NN_BLK_T) {
                const int nt = T - t0 < NN_BLK_T ? T - t0 : NN_BLK_T;
                const float *b[NN_BLK_T];
                for (int t = 0; t < NN_BLK_T; t++) /* missing taps repeat the last */
                    b[t] = B + (size_t)c * ldb + toff[t0 + (t < nt ? t : nt - 1)];
                s_dots(D + (size_t)m * ldd + (size_t)c * T + t0, A + (size_t)m * lda, b, nt, n);
            }
}
