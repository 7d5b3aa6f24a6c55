/* lp_tile — see lp_tile.h: the plain twin and the dispatch. */
#include "lowprec/lp_tile.h"

#include <assert.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_cpu.h"

void lp_tilegemm_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                     const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < n; j++) {
            int32_t acc = 0;
            for (int g = 0; g < G; g++)
                for (int r = 0; r < R; r++) {
                    uint32_t a = Ap[lp_tile_a_at(M, R, m, g, r)];
                    uint32_t b = B[goff[g] + (ptrdiff_t)((size_t)r * rs + j)];
                    for (int l = 0; l < 4; l++)
                        acc += (int32_t)(int8_t)(uint8_t)(a >> 8 * l) *
                               (int32_t)(uint8_t)(b >> 8 * l);
                }
            S[(size_t)m * ldc + j] = acc;
        }
}

void lp_tilegemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                 const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    assert(M >= 1 && G >= 1 && G <= LP_TILE_MAXG && R >= 1 && 4 * (size_t)G * R <= LP_GEMM_MAX_K);
    if (nn_cpu_level() >= NN_CPU_AMX)
        lp_tilegemm_amx(S, ldc, Ap, M, B, goff, G, R, rs, n);
    else
        lp_tilegemm_ref(S, ldc, Ap, M, B, goff, G, R, rs, n);
}
