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
 *   LPT_DPBF(c, a, b)   c += a . b on bf16 pairs into FP32, TDPBF16PS
 *   LPT_RELEASE()       back to the init state
 * Integer kernel tiles: 0-3 sums (16 x 16 int32), 4-5 A (16 rows x kr
 * lanes), 6-7 B (kr rows x 16 lanes).  bf16 kernel tiles: 0-3 sums (16
 * channels x 16 rows of A, FP32), 4-5 X (16 channel rows x 32 bf16), 6-7 Y
 * (16 pair rows x 16 rows of A x 2 bf16).  Not for use outside lowprec/. */
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

/* Zeroes tiles 0..3 of a tr x tc block. */
#define LPT_ZERO_BLOCK(tr, tc) \
    do { \
        LPT_ZERO(0); \
        if ((tc) > 1) \
            LPT_ZERO(1); \
        if ((tr) > 1) \
            LPT_ZERO(2); \
        if ((tr) > 1 && (tc) > 1) \
            LPT_ZERO(3); \
    } while (0)

/* Tiles 0..3 of a tr x tc block into buf, 32 x 32 four-byte sums. */
#define LPT_STORE_BUF(buf, tr, tc) \
    do { \
        LPT_STORE(0, (buf), 128); \
        if ((tc) > 1) \
            LPT_STORE(1, (buf) + 16, 128); \
        if ((tr) > 1) \
            LPT_STORE(2, (buf) + 16 * 32, 128); \
        if ((tr) > 1 && (tc) > 1) \
            LPT_STORE(3, (buf) + 16 * 32 + 16, 128); \
    } while (0)

/* The sums of a block (tiles 0..3: tile = 2*(row half) + column half)
 * into S at rows m0.., columns j0..: straight when the block lies inside
 * S's M rows and n columns, else through buf (32 x 32 int32) keeping only
 * what lies inside. */
static inline __attribute__((always_inline)) void
lpt_store(const lpt_args *a, int m0, size_t j0, size_t n, const int tr, const int tc, int32_t *buf)
{
    const size_t ld4 = a->ldc * 4;
    int32_t *o = a->S + (size_t)m0 * a->ldc + j0;
    if (m0 + 16 * tr <= a->M && j0 + 16 * (size_t)tc <= n) {
        LPT_STORE(0, o, ld4);
        if (tc > 1)
            LPT_STORE(1, o + 16, ld4);
        if (tr > 1)
            LPT_STORE(2, o + 16 * a->ldc, ld4);
        if (tr > 1 && tc > 1)
            LPT_STORE(3, o + 16 * a->ldc + 16, ld4);
        return;
    }
    LPT_STORE_BUF(buf, tr, tc);
    const size_t w = n - j0 < 16 * (size_t)tc ? n - j0 : 16 * (size_t)tc;
    for (int r = 0; r < 16 * tr && m0 + r < a->M; r++)
        memcpy(o + (size_t)r * a->ldc, buf + 32 * r, w * 4);
}

/* One block of S: tr x tc tiles of 16 x 16 sums (tr, tc 1 or 2) at rows
 * m0 and columns j0: per group and depth block, tc B tiles, tr A tiles and
 * tr*tc products. */
static inline __attribute__((always_inline)) void lpt_block(const lpt_args *a, int m0, size_t j0,
                                                            size_t n, const int tr, const int tc,
                                                            int32_t *buf)
{
    const size_t lda = (size_t)a->kr * 4, ldb = a->rs * 4;
    LPT_ZERO_BLOCK(tr, tc);
    for (int g = 0; g < a->G; g++)
        for (int kb = 0; kb < a->KB; kb++) {
            const uint32_t *ab =
                a->Ap + (((size_t)g * a->KB + kb) * a->Mp + (size_t)m0) * (size_t)a->kr;
            const uint32_t *bb = a->B + a->goff[g] + (ptrdiff_t)((size_t)kb * a->kr * a->rs) +
                                 (ptrdiff_t)j0;
            LPT_LOAD(6, bb, ldb);
            if (tc > 1)
                LPT_LOAD(7, bb + 16, ldb);
            LPT_LOAD(4, ab, lda);
            LPT_DP(0, 4, 6);
            if (tc > 1)
                LPT_DP(1, 4, 7);
            if (tr > 1) {
                LPT_LOAD(5, ab + 16 * (size_t)a->kr, lda);
                LPT_DP(2, 5, 6);
                if (tc > 1)
                    LPT_DP(3, 5, 7);
            }
        }
    lpt_store(a, m0, j0, n, tr, tc, buf);
}

/* Every row block of the columns [j0, j0 + 16*tc). */
static inline __attribute__((always_inline)) void lpt_cols(const lpt_args *a, size_t j0,
                                                           size_t n, const int tc, int32_t *buf)
{
    int m0 = 0;
    for (; m0 + 16 < a->M; m0 += 32)
        lpt_block(a, m0, j0, n, 2, tc, buf);
    if (m0 < a->M)
        lpt_block(a, m0, j0, n, 1, tc, buf);
}

/* n < 16: the G*R rows of B copied into 16-lane rows of zeros (bl), the
 * product on them, stored through the buffer. */
static void lpt_narrow(const lpt_args *a, size_t n, uint32_t *bl, int32_t *buf)
{
    const int R = a->KB * a->kr;
    ptrdiff_t goff[LP_TILE_MAXG];
    memset(bl, 0, (size_t)a->G * R * 16 * 4);
    for (int g = 0; g < a->G; g++) {
        goff[g] = (ptrdiff_t)g * R * 16;
        for (int r = 0; r < R; r++)
            memcpy(bl + goff[g] + r * 16, a->B + a->goff[g] + (ptrdiff_t)((size_t)r * a->rs),
                   n * 4);
    }
    lpt_args c = *a;
    c.B = bl;
    c.goff = goff;
    c.rs = 16;
    __asm__ volatile("" ::: "memory"); /* the tile loads read bl */
    lpt_cols(&c, 0, n, 1, buf);
}

/* ---- the bf16 weight-gradient dot (lp_tiledot_bf16, lp_tile.h) ---------- */

typedef struct {
    float          *D;
    size_t          ldd, ldb, n;
    const uint16_t *Yp, *B;
    const int      *toff;
    int             M, Mp, nch, T;
} lpt_dargs;

/* X tile t from the channel rows [c0, c0+16) at tap t, columns [j, j+32):
 * straight from B when all of it lies inside (channels < nch, columns
 * < n), else from xb, those rows and columns copied into zeros. */
#define LPT_LOAD_X(tile, a, c0, t, j, xb) \
    do { \
        const uint16_t *x_ = (a)->B + (size_t)(c0) * (a)->ldb + (a)->toff[t] + (ptrdiff_t)(j); \
        if ((c0) + 16 <= (a)->nch && (j) + 32 <= (a)->n) { \
            LPT_LOAD(tile, x_, (a)->ldb * 2); \
        } else { \
            const size_t w_ = (a)->n - (j) < 32 ? (a)->n - (j) : 32; \
            memset((xb), 0, 16 * 32 * 2); \
            for (int r_ = 0; r_ < 16 && (c0) + r_ < (a)->nch; r_++) \
                memcpy((xb) + 32 * r_, x_ + (size_t)r_ * (a)->ldb, w_ * 2); \
            __asm__ volatile("" ::: "memory"); \
            LPT_LOAD(tile, (xb), 64); \
        } \
    } while (0)

/* Adds the sums of tiles 0..3 (channels c0.. x rows m0..) into D at tap t. */
static inline __attribute__((always_inline)) void
lpt_dot_flush(const lpt_dargs *a, int c0, int m0, int t, const int tr, const int tc, float *buf)
{
    LPT_STORE_BUF(buf, tr, tc);
    for (int r = 0; r < 16 * tr && c0 + r < a->nch; r++)
        for (int q = 0; q < 16 * tc && m0 + q < a->M; q++)
            a->D[(size_t)(m0 + q) * a->ldd + (size_t)(c0 + r) * a->T + t] += buf[32 * r + q];
}

/* Channels [c0, c0 + 16 tr) x rows of A [m0, m0 + 16 tc) at tap t, the
 * sums flushed into D every LP_TILE_DOTJ columns. */
static inline __attribute__((always_inline)) void
lpt_dot_block(const lpt_dargs *a, int c0, int m0, int t, const int tr, const int tc,
              uint16_t *xb, float *buf)
{
    const size_t ldy = (size_t)a->Mp * 4;
    for (size_t j0 = 0; j0 < a->n; j0 += LP_TILE_DOTJ) {
        const size_t j1 = j0 + LP_TILE_DOTJ < a->n ? j0 + LP_TILE_DOTJ : a->n;
        LPT_ZERO_BLOCK(tr, tc);
        for (size_t j = j0; j < j1; j += 32) {
            const uint16_t *y = a->Yp + ((j / 32) * 16 * (size_t)a->Mp + (size_t)m0) * 2;
            LPT_LOAD(6, y, ldy);
            if (tc > 1)
                LPT_LOAD(7, y + 32, ldy);
            LPT_LOAD_X(4, a, c0, t, j, xb);
            LPT_DPBF(0, 4, 6);
            if (tc > 1)
                LPT_DPBF(1, 4, 7);
            if (tr > 1) {
                LPT_LOAD_X(5, a, c0 + 16, t, j, xb + 16 * 32);
                LPT_DPBF(2, 5, 6);
                if (tc > 1)
                    LPT_DPBF(3, 5, 7);
            }
        }
        lpt_dot_flush(a, c0, m0, t, tr, tc, buf);
    }
}

static inline __attribute__((always_inline)) void
lpt_dot_rows(const lpt_dargs *a, int c0, int t, const int tr, uint16_t *xb, float *buf)
{
    int m0 = 0;
    for (; m0 + 16 < a->M; m0 += 32)
        lpt_dot_block(a, c0, m0, t, tr, 2, xb, buf);
    if (m0 < a->M)
        lpt_dot_block(a, c0, m0, t, tr, 1, xb, buf);
}

/* D += the product of lp_tiledot_bf16 with A already packed as pairs in Yp
 * (lp_tile.h). */
static void lpt_dot_kernel(float *D, size_t ldd, const uint16_t *Yp, int M, const uint16_t *B,
                           size_t ldb, int nch, const int *toff, int T, size_t n)
{
    const lpt_dargs a = {D, ldd, ldb, n, Yp, B, toff, M, lp_tile_mp(M), nch, T};
    uint16_t xb[2 * 16 * 32];
    float    buf[32 * 32];
    lpt_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int k = 0; k < 8; k++) {
        cfg.rows[k]  = 16;
        cfg.colsb[k] = 64;
    }
    __asm__ volatile("" ::: "memory");
    LPT_CFG(&cfg);
    for (int t = 0; t < T; t++) {
        int c0 = 0;
        for (; c0 + 16 < nch; c0 += 32)
            lpt_dot_rows(&a, c0, t, 2, xb, buf);
        if (c0 < nch)
            lpt_dot_rows(&a, c0, t, 1, xb, buf);
    }
    LPT_RELEASE();
}

/* The whole product (lp_tile.h); bl: LP_TILE_MAXG*R*16 lanes of scratch
 * for n < 16. */
static void lpt_kernel(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                       const ptrdiff_t *goff, int G, int R, size_t rs, size_t n, uint32_t *bl)
{
    const int kr = lp_tile_depth(R);
    const lpt_args a = {S, ldc, Ap, B, goff, M, lp_tile_mp(M), G, R / kr, kr, rs};
    int32_t buf[32 * 32];
    lpt_cfg cfg;
    lpt_config(&cfg, kr);
    __asm__ volatile("" ::: "memory"); /* the tile loads read what C wrote */
    LPT_CFG(&cfg);
    if (n >= 32) {
        for (size_t j = 0; j < n; j += 32)
            lpt_cols(&a, j + 32 <= n ? j : n - 32, n, 2, buf); /* the last block ends at n */
    } else if (n >= 16) {
        lpt_cols(&a, 0, n, 1, buf);
        if (n > 16)
            lpt_cols(&a, n - 16, n, 1, buf);
    } else {
        lpt_narrow(&a, n, bl, buf);
    }
    LPT_RELEASE();
}

#endif
