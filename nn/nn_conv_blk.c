/* nn_conv_blk — the portable level's shifted dot (nn_shiftdot): blocked
 * loops on GNU C generic vectors, the baseline vector unit of any target
 * (SSE2, NEON, ...; scalar code where there is none), no intrinsics.
 *
 * Owns:    nn_shiftdot_blk.  Each output sums its n products in
 *          NN_BLK_L independent partial sums (lane l takes j = l mod
 *          NN_BLK_L; two generic 16-byte vectors), added in a fixed tree
 *          at the end, so one A row load serves NN_BLK_T taps at once;
 *          the summation order differs from the twin's serial one (float
 *          results agree to rounding, as the SIMD levels' do;
 *          tests/test_nn_conv.c).  The blocks run over the outputs
 *          (channel, tap) of a row, so T = 1 fills them too.
 * Callers: the kernel table's portable entry (nn_kern.c).
 */
#include <string.h>

#include "nn/nn_layers_simd.h"
#include "nn/nn_vec.h"

#define NN_BLK_L 8 /* lanes: two vectors */
#define NN_BLK_T 3

/* the 8 lanes of acc (two vectors) in a fixed tree */
static float s_fold(nn_f32x4 lo, nn_f32x4 hi)
{
    const nn_f32x4 v = lo + hi;
    return (v[0] + v[2]) + (v[1] + v[3]);
}

/* D[k0..k0+nt-1] += the dots of row a with the rows b[0..nt-1] (nt <= 3);
 * the 6 partial sums in named variables, so they stay in registers */
static void s_dots(float *D, const float *a, const float *const b[NN_BLK_T], int nt, size_t n)
{
    nn_f32x4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    const size_t nl = n / NN_BLK_L * NN_BLK_L;
    for (size_t j = 0; j < nl; j += NN_BLK_L) {
        const nn_f32x4 a0 = nn_vec_ld(a + j), a1 = nn_vec_ld(a + j + 4);
        c00 += a0 * nn_vec_ld(b[0] + j);
        c01 += a1 * nn_vec_ld(b[0] + j + 4);
        c10 += a0 * nn_vec_ld(b[1] + j);
        c11 += a1 * nn_vec_ld(b[1] + j + 4);
        c20 += a0 * nn_vec_ld(b[2] + j);
        c21 += a1 * nn_vec_ld(b[2] + j + 4);
    }
    const nn_f32x4 acc[NN_BLK_T][2] = {{c00, c01}, {c10, c11}, {c20, c21}};
    for (int t = 0; t < nt; t++) {
        float tail = 0.0f;
        for (size_t j = nl; j < n; j++)
            tail += a[j] * b[t][j];
        D[t] += s_fold(acc[t][0], acc[t][1]) + tail;
    }
}

/* The outputs of a row are D[c*T + t]: consecutive over (channel, tap)
 * pairs k = c*T + t, so they go NN_BLK_T at a time in k, across channels
 * where T is not a multiple (T = 1: the im2col path's plain dots), each
 * output's sum the same whatever its block mates. */
void nn_shiftdot_blk(float *D, size_t ldd, const float *A, size_t lda, int M, const float *B,
                     size_t ldb, int nch, const int *toff, int T, size_t n)
{
    const int K = nch * T;
    for (int m = 0; m < M; m++)
        for (int k0 = 0; k0 < K; k0 += NN_BLK_T) {
            const int nt = K - k0 < NN_BLK_T ? K - k0 : NN_BLK_T;
            const float *b[NN_BLK_T];
            for (int t = 0; t < NN_BLK_T; t++) { /* missing outputs repeat the last */
                const int k = k0 + (t < nt ? t : nt - 1);
                b[t] = B + (size_t)(k / T) * ldb + toff[k % T];
            }
            s_dots(D + (size_t)m * ldd + k0, A + (size_t)m * lda, b, nt, n);
        }
}
