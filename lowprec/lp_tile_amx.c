/* lp_tile_amx — the AMX build of the tile kernels (lp_tile_kern.h;
 * contracts in lp_tile.h).  Compiled with -mamx-tile -mamx-int8
 * -mamx-bf16 and called only after lp_tile_ready() (the integer kernel) /
 * lp_tile_bf16_ready() (the bf16 one): a level whose kernel table holds
 * them (lp_kern_x86.c: AMX), the kernel's permission for the tile state,
 * the start-up checks passed. */
#include <immintrin.h>

#define LPT_CFG(p)         _tile_loadconfig(p)
#define LPT_ZERO(t)        _tile_zero(t)
#define LPT_LOAD(t, p, s)  _tile_loadd(t, p, s)
#define LPT_STORE(t, p, s) _tile_stored(t, p, s)
#define LPT_DP(c, a, b)    _tile_dpbsud(c, a, b)
#define LPT_DPBF(c, a, b)  _tile_dpbf16ps(c, a, b)
#define LPT_RELEASE()      _tile_release()

#include <stdlib.h>

#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile_kern.h"
#include "nn/nn_core.h"

void lp_tilegemm_amx(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                     const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    uint32_t *bl = n < 16 ? nn_xmalloc((size_t)G * R * 16 * 4) : NULL;
    lpt_kernel(S, ldc, Ap, M, B, goff, G, R, rs, n, bl);
    free(bl);
}

void lp_tiledot_bf16_amx(float *D, size_t ldd, const uint16_t *Yp, int M, const uint16_t *B,
                         size_t ldb, int nch, const int *toff, int T, size_t n)
{
    lpt_dot_kernel(D, ldd, Yp, M, B, ldb, nch, toff, T, n);
}
