/* bench_quant — the quantizer kernels (lowprec/lp_quant.h) per CPU level:
 * ns per value of min/max, nearest and stochastic quantization,
 * dequantization and the fused stochastic quantize+dequantize, on a
 * 64 Ki-value tensor (L2-resident, like a layer's activations per chunk)
 * and a 4 Mi-value one (memory).  Best of `reps` runs of each (default 20;
 * argv[1] overrides).  Usage: bench_quant [reps]. */
#include <stdio.h>
#include <stdlib.h>

#include "lowprec/lp_quant.h"
#include "nn/nn_core.h"
#include "nn/nn_cpu.h"

typedef enum { K_MINMAX, K_QUANT, K_QUANT_SR, K_DEQUANT, K_FQ_SR, K_COUNT } s_kernel;

static const char *s_names[K_COUNT] = {"minmax", "quantize", "quantize_sr", "dequantize",
                                       "fake_quant_sr"};

static void s_run(s_kernel k, float *x, uint8_t *q, float *y, size_t n, lp_qparams p)
{
    float a, b;
    switch (k) {
    case K_MINMAX:
        lp_minmax(&a, &b, x, n);
        y[0] = a + b; /* keep the result */
        break;
    case K_QUANT:
        lp_quantize(q, x, n, p);
        break;
    case K_QUANT_SR:
        lp_quantize_sr(q, x, n, p, 7, 0);
        break;
    case K_DEQUANT:
        lp_dequantize(y, q, n, p);
        break;
    default:
        lp_fake_quant_sr(y, q, x, n, p, 7, 0);
    }
}

static double s_best(s_kernel k, float *x, uint8_t *q, float *y, size_t n, lp_qparams p, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = nn_now();
        s_run(k, x, q, y, n, p);
        double t = nn_now() - t0;
        best = t < best ? t : best;
    }
    return best / (double)n * 1e9;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    const size_t sizes[2] = {(size_t)1 << 16, (size_t)1 << 22};
    float *x = nn_xmalloc(sizes[1] * 4), *y = nn_xmalloc(sizes[1] * 4);
    uint8_t *q = nn_xmalloc(sizes[1]);
    nn_rng r;
    nn_rng_seed(&r, 9);
    for (size_t i = 0; i < sizes[1]; i++)
        x[i] = nn_rng_normal(&r);
    printf("ns per value, best of %d (CPU best level %s)\n", reps, nn_cpu_name(nn_cpu_best()));
    printf("%-12s %-14s", "level", "values");
    for (int k = 0; k < K_COUNT; k++)
        printf(" %13s", s_names[k]);
    printf("\n");
    for (int l = NN_CPU_LEVELS - 1; l >= 0; l--) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)l)) != 0)
            continue;
        for (int s = 0; s < 2; s++) {
            const size_t n = sizes[s];
            lp_qparams p = lp_tensor_qparams(x, n);
            lp_quantize(q, x, n, p);
            printf("%-12s %-14zu", nn_cpu_name((nn_cpu_t)l), n);
            for (int k = 0; k < K_COUNT; k++)
                printf(" %13.4f", s_best((s_kernel)k, x, q, y, n, p, l == 0 ? 2 : reps));
            printf("\n");
        }
    }
    nn_cpu_force("auto");
    free(x); free(y); free(q);
    return 0;
}
