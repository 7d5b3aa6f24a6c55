/* bench_lowprec — speed of the 8-bit kernels against FP32 OpenBLAS.
 *
 * 1. GEMM: for the resnet20 conv shapes at batch 32 (M = out channels,
 *    K = C*KH*KW, N = 32*OH*OW), the int8 GEMM (lp_gemm_u8u8, per sample,
 *    packed operands) at each CPU level in GOPS (2*M*N*K ops / s) against
 *    cblas_sgemm GFLOPS on the same shape (one call over the whole batch).
 * 2. Shifted-row GEMM (the im2col-free product of the stride-1 same convs):
 *    lp_shiftgemm on int16 code pairs in GOPS against nn's FP32 shifted GEMM
 *    (AVX2+FMA kernel) in GFLOPS on the same grid, per stride-1 shape.
 * 3. Layers: lp_conv2d_forward / lp_conv2d_backward (int8 forward and
 *    input gradient, FP32 weight gradient) against the FP32 nn conv
 *    forward + backward on the same shapes, and the sum over resnet20.
 * Prints ratios; no pass/fail.  Run with OPENBLAS_NUM_THREADS=1. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_kern.h"
#include "nn/nn_cpu.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layers.h"
#include "nn/nn_core.h"
#include "nn/nn_layers.h"
#include "nn/nn_layers_simd.h"

typedef struct {
    const char *name;
    int C, OC, H, stride, k; /* input H = W */
    int count;               /* how many such convs in resnet20 */
} conv_shape;

static const conv_shape s_shapes[] = {
    {"stem 3->16 32x32", 3, 16, 32, 1, 3, 1},  {"s1 16->16 32x32", 16, 16, 32, 1, 3, 6},
    {"s2a 16->32 /2", 16, 32, 32, 2, 3, 1},    {"s2 32->32 16x16", 32, 32, 16, 1, 3, 5},
    {"s2sc 16->32 1x1/2", 16, 32, 32, 2, 1, 1}, {"s3a 32->64 /2", 32, 64, 16, 2, 3, 1},
    {"s3 64->64 8x8", 64, 64, 8, 1, 3, 5},     {"s3sc 32->64 1x1/2", 32, 64, 16, 2, 1, 1},
};

static double s_time_gemm_int8(int M, int P, int K, int batch, int reps)
{
    int8_t *Ap = nn_xalloc_aligned(lp_gemm_pack_a_bytes(M, K));
    uint8_t *Bp = nn_xalloc_aligned(lp_gemm_pack_b_bytes(K, P) * (size_t)batch);
    int32_t *C = nn_xalloc_aligned((size_t)M * P * batch * sizeof(int32_t));
    int32_t *cs = nn_xalloc_aligned((size_t)P * sizeof(int32_t));
    for (size_t i = 0; i < lp_gemm_pack_b_bytes(K, P) * (size_t)batch; i++)
        Bp[i] = (uint8_t)(i * 2654435761u >> 24);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = nn_now();
        for (int b = 0; b < batch; b++)
            lp_gemm_u8u8(C + (size_t)b * M * P, P, Ap, Bp + lp_gemm_pack_b_bytes(K, P) * b, M, P,
                         K, cs);
        double t = nn_now() - t0;
        best = t < best ? t : best;
    }
    free(Ap); free(Bp); free(C); free(cs);
    return best;
}

static double s_time_sgemm(int M, int N, int K, int reps)
{
    float *A = nn_xalloc_aligned((size_t)M * K * sizeof(float));
    float *B = nn_xalloc_aligned((size_t)K * N * sizeof(float));
    float *C = nn_xalloc_aligned((size_t)M * N * sizeof(float));
    for (size_t i = 0; i < (size_t)K * N; i++)
        B[i] = (float)(i % 13) * 0.1f;
    for (size_t i = 0; i < (size_t)K * M; i++)
        A[i] = (float)(i % 7) * 0.1f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = nn_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f,
                    C, N);
        double t = nn_now() - t0;
        best = t < best ? t : best;
    }
    free(A); free(B); free(C);
    return best;
}

/* Best-of-reps seconds of lp_shiftgemm (int8) and the level's FP32 shifted GEMM
 * over one chunk of the grid a 3x3 stride-1 same conv of shape s uses
 * (>= 1024 grid columns, as the layers chunk it); *macs = real products. */
static void s_time_shift(const conv_shape *s, int reps, double *t8, double *t32, double *macs)
{
    const int Wp = s->H + 2, plane = Wp * Wp, nb = (1024 + plane - 1) / plane, np = (s->C + 1) / 2;
    const size_t cs = (size_t)nb * plane, jlo = (size_t)Wp + 1, n = cs - 2 * jlo;
    int toff[9];
    for (int t = 0; t < 9; t++)
        toff[t] = (t / 3 - 1) * Wp + (t % 3 - 1);
    float *Bf = nn_xalloc_aligned((size_t)s->C * cs * 4);
    float *Af = nn_xalloc_aligned(nn_shift_pack_size(s->OC, s->C * 9) * 4);
    float *Cf = nn_xalloc_aligned((size_t)s->OC * cs * 4);
    uint32_t *Bi = nn_xalloc_aligned((size_t)np * cs * 4);
    uint32_t *Ai = nn_xalloc_aligned(lp_shift_pack_lanes(s->OC, np * 9) * 4);
    int32_t *Ci = nn_xalloc_aligned((size_t)s->OC * cs * 4);
    for (size_t i = 0; i < (size_t)s->C * cs; i++)
        Bf[i] = (float)(i % 7);
    for (size_t i = 0; i < nn_shift_pack_size(s->OC, s->C * 9); i++)
        Af[i] = 0.5f;
    for (size_t i = 0; i < (size_t)np * cs; i++)
        Bi[i] = lp_pair((uint8_t)(i % 200), (uint8_t)(i % 111));
    for (size_t i = 0; i < lp_shift_pack_lanes(s->OC, np * 9); i++)
        Ai[i] = lp_pair(3, 4);
    *t8 = *t32 = 1e30;
    for (int r = 0; r < reps * 10; r++) {
        double t0 = nn_now();
        lp_shiftgemm(Ci + jlo, cs, Ai, s->OC, Bi + jlo, cs, np, toff, 9, n);
        double t1 = nn_now();
        nn_kern()->shiftgemm(Cf + jlo, cs, Af, s->OC, Bf + jlo, cs, s->C, toff, 9, n);
        double t2 = nn_now();
        *t8 = fmin(*t8, t1 - t0);
        *t32 = fmin(*t32, t2 - t1);
    }
    *macs = (double)s->OC * s->C * 9 * nb * s->H * s->H;
    free(Bf); free(Af); free(Cf); free(Bi); free(Ai); free(Ci);
}

/* One conv layer, batch N: best-of-reps seconds of forward, and of forward +
 * backward (din, dw), for the int8 kernels and the FP32 nn kernels. */
static void s_time_conv(const conv_shape *s, int N, int reps, double t8[2], double t32[2])
{
    nn_conv_dims d = nn_conv_dims_make(N, s->C, s->H, s->H, s->OC, s->k, s->stride, s->k / 2);
    size_t xn = (size_t)N * s->C * s->H * s->H, wn = (size_t)s->OC * s->C * s->k * s->k;
    size_t on = (size_t)N * s->OC * d.OH * d.OW;
    float *x = nn_xalloc_aligned(xn * 4), *w = nn_xalloc_aligned(wn * 4);
    float *o = nn_xalloc_aligned(on * 4), *g = nn_xalloc_aligned(on * 4);
    float *dx = nn_xalloc_aligned(xn * 4), *dw = nn_xalloc_aligned(wn * 4);
    nn_rng r;
    nn_rng_seed(&r, 1);
    for (size_t i = 0; i < xn; i++)
        x[i] = nn_rng_normal(&r);
    for (size_t i = 0; i < wn; i++)
        w[i] = 0.1f * nn_rng_normal(&r);
    for (size_t i = 0; i < on; i++)
        g[i] = 0.01f * nn_rng_normal(&r);
    uint8_t *saved = nn_xalloc_aligned(lp_conv2d_saved_bytes(&d));
    lp_qsaved sv = {saved, {0, 0}, saved + xn, {0, 0}};
    void *sc8 = nn_xalloc_aligned(lp_conv2d_scratch_bytes(&d));
    float *sc32 = nn_xalloc_aligned(nn_conv_scratch_floats(&d) * 4);
    float run[2] = {0, 0};
    t8[0] = t8[1] = t32[0] = t32[1] = 1e30;
    for (int i = 0; i < reps; i++) {
        lp_mode mode = {1, (uint64_t)i};
        double t0 = nn_now();
        lp_conv2d_forward(o, &sv, run, x, w, NULL, &d, mode, sc8);
        double t1 = nn_now();
        lp_conv2d_backward(dx, dw, NULL, g, &sv, &d, 7, sc8);
        double t2 = nn_now();
        nn_conv2d_forward(o, x, w, NULL, &d, sc32);
        double t3 = nn_now();
        nn_conv2d_backward(dx, dw, NULL, g, x, w, &d, sc32);
        double t4 = nn_now();
        t8[0] = fmin(t8[0], t1 - t0);
        t8[1] = fmin(t8[1], t2 - t0);
        t32[0] = fmin(t32[0], t3 - t2);
        t32[1] = fmin(t32[1], t4 - t2);
    }
    free(x); free(w); free(o); free(g); free(dx); free(dw); free(saved); free(sc8); free(sc32);
}

int main(int argc, char **argv)
{
    (void)argv;
    const int batch = 32, reps = argc > 1 ? 2 : 5;
    /* every level of this architecture; 0.0: not on this CPU */
    printf("GEMM, batch %d: int8 GOPS per level vs sgemm GFLOPS (ratio = int8/sgemm)\n", batch);
    printf("%-20s %4s %5s %6s |", "shape", "M", "K", "N");
    for (int l = 0; l < NN_CPU_LEVELS; l++)
        printf(" %10s", nn_cpu_name((nn_cpu_t)l));
    printf(" | %9s | %s\n", "sgemm", "best ratio");
    double tot_int8 = 0, tot_sgemm = 0;
    for (size_t i = 0; i < sizeof s_shapes / sizeof s_shapes[0]; i++) {
        const conv_shape *s = &s_shapes[i];
        int OH = (s->H + 2 * (s->k / 2) - s->k) / s->stride + 1;
        int M = s->OC, K = s->C * s->k * s->k, P = OH * OH, N = batch * P;
        double ops = 2.0 * M * N * K;
        double g[NN_CPU_LEVELS] = {0}, best = 1e30;
        for (int l = 0; l < NN_CPU_LEVELS; l++) {
            if (nn_cpu_force(nn_cpu_name((nn_cpu_t)l)) != 0)
                continue;
            double t = s_time_gemm_int8(M, P, K, batch, l == 0 ? 1 : reps);
            g[l] = ops / t * 1e-9;
            best = t < best ? t : best;
        }
        nn_cpu_force("auto");
        double ts = s_time_sgemm(M, N, K, reps);
        double gs = ops / ts * 1e-9;
        tot_int8 += best * s->count;
        tot_sgemm += ts * s->count;
        printf("%-20s %4d %5d %6d |", s->name, M, K, N);
        for (int l = 0; l < NN_CPU_LEVELS; l++)
            printf(" %10.1f", g[l]);
        printf(" | %9.1f | %.2fx\n", gs, (ops / best * 1e-9) / gs);
    }
    printf("resnet20 forward convs: int8 GEMM %.2f ms, sgemm %.2f ms, time ratio %.2f\n",
           tot_int8 * 1e3, tot_sgemm * 1e3, tot_int8 / tot_sgemm);

    printf("\nshifted-row GEMM, one chunk (>= 1024 grid columns), level %s: int8 GOPS vs FP32 "
           "GFLOPS (the level's FP32 kernel), real products only\n", nn_cpu_name(nn_cpu_level()));
    for (size_t i = 0; i < sizeof s_shapes / sizeof s_shapes[0]; i++) {
        const conv_shape *s = &s_shapes[i];
        if (s->stride != 1 || s->k != 3)
            continue;
        double t8, t32, macs;
        s_time_shift(s, reps, &t8, &t32, &macs);
        printf("%-20s int8 %6.1f GOPS   fp32 %6.1f GFLOPS   time ratio int8/fp32 %.2f\n",
               s->name, 2 * macs / t8 * 1e-9, 2 * macs / t32 * 1e-9, t8 / t32);
    }

    printf("\nconv layers, batch %d, best level (%s): ms  int8 fwd / fp32 fwd | int8 fwd+bwd / "
           "fp32 fwd+bwd\n", batch, nn_cpu_name(nn_cpu_level()));
    double s8 = 0, s32 = 0, f8 = 0, f32 = 0;
    for (size_t i = 0; i < sizeof s_shapes / sizeof s_shapes[0]; i++) {
        double t8[2], t32[2];
        s_time_conv(&s_shapes[i], batch, reps, t8, t32);
        printf("%-20s %7.2f / %7.2f = %.2f | %7.2f / %7.2f = %.2f\n", s_shapes[i].name,
               t8[0] * 1e3, t32[0] * 1e3, t8[0] / t32[0], t8[1] * 1e3, t32[1] * 1e3,
               t8[1] / t32[1]);
        f8 += t8[0] * s_shapes[i].count;
        f32 += t32[0] * s_shapes[i].count;
        s8 += t8[1] * s_shapes[i].count;
        s32 += t32[1] * s_shapes[i].count;
    }
    printf("resnet20 convs (x count): forward %.1f / %.1f ms = %.2f; fwd+bwd %.1f / %.1f ms = "
           "%.2f\n", f8 * 1e3, f32 * 1e3, f8 / f32, s8 * 1e3, s32 * 1e3, s8 / s32);
    return 0;
}
