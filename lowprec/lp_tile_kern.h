/* lp_tile_kern — private: the body of the AMX tile kernel of lp_tilegemm
 * (contract and layouts in lp_tile.h), written once and compiled twice:
 * by lp_tile_amx.c on the real tile unit and by lp_tile_emu.c on the
 * software model, so the tests run the very sequence of tile operations
 * the hardware runs.  The includer defines, with tile numbers 0..7 as
 * literal constants:
 *   LPT_CFG(p)          load the 64-byte tile configuration at p
 *   LPT_ZERO(t)         zero tile t
 *   LPT_LOAD(t, p, s)   tile t <- its rows from p, one every s bytes
 *   LPT_STORE(t, p, s)  tile t -> p, one row every s bytes
 *   LPT_DP(c, a, b)     c += a (signed bytes) . b (unsigned bytes), TDPBSUD
 *   LPT_RELEASE()       back to the init state
 * Tiles: 0-3 sums (16 x 16 int32), 4-5 A (16 rows x kr lanes), 6-7 B (kr
 * rows x 16 lanes).  Not for use outside lowprec/. */
#ifndef LP_TILE_KERN_H
#define LP_TILE_KERN_H

#include <string.h>

#include "lowprec/lp_tile.h"

/* The LDTILECFG operand (palette 1): bytes 16-31 colsb of tiles 0-7 and
 * 48-55 their rows; everything else zero. */
typedef struct {
    uint8_t  palette, start_row, rsv0[14];
    uint16_t colsb[16];
    uint8_t  rows[16];
} __attribute__((aligned(64))) lpt_cfg;

typedef struct {
    int32_t         *S;
    size_t           ldc;
    const uint32_t  *Ap, *B;
    const ptrdiff_t *goff;
    int              M, Mp, G, KB, kr;
    size_t           rs;
} lpt_args;

static void lpt_config(lpt_cfg *c, int kr)
{
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int t = 0; t < 4; t++) {
        c->rows[t]  = 16;
        c->colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) {
        c->rows[t]  = 16;
        c->colsb[t] = (uint16_t)(kr * 4);
    }
    for (int t = 6; t < 8; t++) {
        c->rows[t]  = (uint8_t)kr;
        c->colsb[t] = 64;
    }
}

/* Rows [m0, m0+rows) of the sums in tiles 0..3 (2x2 blocks of 16 x 16,
 * tile = 2*(row half) + column half) stored at columns [j0, j0+32); rows
 * past M go through buf (32 x 32 int32) and are dropped. */
#define LPT_STORE_BLOCK(a, m0, j0, two, buf) \
    do { \
        const size_t ld4_ = (a)->ldc * 4; \
        int32_t *o_ = (a)->S + (size_t)(m0) * (a)->ldc + (j0); \
        if ((m0) + 16 * ((two) + 1) <= (a)->M) { \
            LPT_STORE(0, o_, ld4_); \
            LPT_STORE(1, o_ + 16, ld4_); \
            if (two) { \
                LPT_STORE(2, o_ + 16 * (a)->ldc, ld4_); \
                LPT_STORE(3, o_ + 16 * (a)->ldc + 16, ld4_); \
            } \
        } else { \
            LPT_STORE(0, (buf), 128); \
            LPT_STORE(1, (buf) + 16, 128); \
            if (two) { \
                LPT_STORE(2, (buf) + 16 * 32, 128); \
                LPT_STORE(3, (buf) + 16 * 32 + 16, 128); \
            } \
            for (int r_ = 0; (m0) + r_ < (a)->M; r_++) \
                memcpy(o_ + (size_t)r_ * (a)->ldc, (buf) + 32 * r_, 32 * 4); \
        } \
    } while (0)

/* One 32 x 32 block of S (two: 32 rows; else 16 rows, tiles 0, 1, 4). */
static inline __attribute__((always_inline)) void lpt_block(const lpt_args *a, int m0, size_t j0,
                                                            const int two, int32_t *buf)
{
    const size_t lda = (size_t)a->kr * 4, ldb = a->rs * 4;
    LPT_ZERO(0);
    LPT_ZERO(1);
    if (two) {
        LPT_ZERO(2);
        LPT_ZERO(3);
    }
    for (int g = 0; g < a->G; g++)
        for (int kb = 0; kb < a->KB; kb++) {
            const uint32_t *ab =
                a->Ap + (((size_t)g * a->KB + kb) * a->Mp + (size_t)m0) * (size_t)a->kr;
            const uint32_t *bb = a->B + a->goff[g] + (ptrdiff_t)((size_t)kb * a->kr * a->rs) +
                                 (ptrdiff_t)j0;
            LPT_LOAD(6, bb, ldb);
            LPT_LOAD(7, bb + 16, ldb);
            LPT_LOAD(4, ab, lda);
            LPT_DP(0, 4, 6);
            LPT_DP(1, 4, 7);
            if (two) {
                LPT_LOAD(5, ab + 16 * (size_t)a->kr, lda);
                LPT_DP(2, 5, 6);
                LPT_DP(3, 5, 7);
            }
        }
    LPT_STORE_BLOCK(a, m0, j0, two, buf);
}

/* The whole product for n >= 32 (lp_tile.h). */
static void lpt_kernel(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    const int kr = lp_tile_depth(R);
    const lpt_args a = {S, ldc, Ap, B, goff, M, lp_tile_mp(M), G, R / kr, kr, rs};
    int32_t buf[32 * 32];
    lpt_cfg cfg;
    lpt_config(&cfg, kr);
    __asm__ volatile("" ::: "memory"); /* the tile loads read what C wrote */
    LPT_CFG(&cfg);
    for (size_t j = 0; j < n; j += 32) {
        const size_t j0 = j + 32 <= n ? j : n - 32; /* the last block ends at n */
        int m0 = 0;
        for (; m0 + 16 < M; m0 += 32)
            lpt_block(&a, m0, j0, 1, buf);
        if (m0 < M)
            lpt_block(&a, m0, j0, 0, buf);
    }
    LPT_RELEASE();
}

#endif
