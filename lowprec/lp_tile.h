/* lp_tile — the AMX kernels of the int8 layers (the integer GEMMs on
 * AMX-INT8, the bf16 weight gradients on AMX-BF16), and a software model
 * of the tile unit that runs the same kernels anywhere.
 *
 * Owns:    the tile layout of the packed weights, the grouped strided-row
 *          GEMM on AMX tiles (lp_tile_amx.c: TDPBSUD, 16 x 16 int32 sums
 *          of 16 x 64 byte products per instruction), its plain twin, and
 *          the tile model (lp_tile_emu.c) that executes the kernel's exact
 *          sequence of tile loads, products and stores in C, checking
 *          every shape rule the hardware enforces (#UD / #GP there).
 * Exposes: lp_tilegemm (dispatch: AMX where lp_tile_ready(), else the
 *          twin), its _ref twin, the _emu run of the kernel, the layout
 *          helpers, the start-up checks; lp_tiledot_bf16 (below).
 * Callers: lp_conv_shift.c (stride-1 "same" convs, forward and input gradient),
 *          lp_gemm.c (lp_gemm_u8u8), lp_bf16.c (lp_shiftdot_bf16), the
 *          CLI's kernels: line, tests, bench.
 * Threads: every call configures the tiles of the thread it runs on
 *          (LDTILECFG) and releases them (TILERELEASE) before it returns;
 *          the permission for the tile state (nn_cpu.c, ARCH_REQ_XCOMP_PERM)
 *          is the process's, so pool workers run the kernels on their own
 *          tiles, each on its own rows or columns of the output (lp_conv_shift.c,
 *          lp_gemm.c's callers, lp_bf16.c); lp_tile_ready() and
 *          lp_tile_bf16_ready() are first asked on the calling thread,
 *          before the pool runs.
 *
 * The product.  B is a grid of 32-bit lanes of four codes each (unsigned
 * bytes; lp_quad); G groups of R rows read it at offsets goff[g] + r*rs:
 *   S[m*ldc + j] = sum_{g<G} sum_{r<R} sum_{l<4}
 *                    s8(A(m, g, r), l) * u8(B[goff[g] + r*rs + j], l)
 * for m < M, j < n; S overwritten.  A(m, g, r) is a lane of four signed
 * bytes (lp_quad_s8: codes - 128), so the products are those of vpdpbusd
 * and the caller restores the shift exactly as on the VNNI level.
 * Why groups of strided rows: a tile load reads rows at one stride.  The
 * shift conv puts its K column-shift variants of a quad row at a stride of
 * vlen + 1 lanes and the quad rows at K (vlen + 1) (lp_conv_shift.c), so the
 * taps (kh, kw) of all quad rows p for one kernel row kh are rows
 * r = p*K + kw of one group: K groups of nq*K rows, and a 16-channel layer
 * fills 48 of a tile's 64 bytes of depth (12 of 64 with one group a tap).
 *
 * Layout of packed A (lp_tile_pack_lanes lanes, zero where unset): the
 * depth of a tile is kr = lp_tile_depth(R) rows (the largest divisor of R
 * that is <= 16, so no tile reads rows past R); block kb of group g holds
 * rows [kb*kr, kb*kr + kr) as a 16-row-padded (Mp = M rounded up to 16)
 * row-major matrix of kr lanes: A(m, g, r) at lp_tile_a_at(M, R, m, g, r).
 *
 * The kernel (lp_tile_kern.h): C blocks of 32 rows x 32 columns in four
 * tiles (two A tiles, two B tiles), one 16-row block at the end of an odd
 * row count; the last column block starts at n - 32 (recomputing columns
 * with the same sums) so no tile reads or writes past column n; a block
 * with rows past M goes through a buffer.  16 <= n < 32: blocks of 16
 * columns, the same way; n < 16: B's rows copied into zero-padded rows of
 * 16 lanes (a heap buffer of G*R*16 lanes), the sums through the buffer.
 * Range: |S| <= 128*255*4*G*R < 2^31 for 4*G*R <= LP_GEMM_MAX_K.
 */
#ifndef LP_TILE_H
#define LP_TILE_H

#include <stddef.h>
#include <stdint.h>

#define LP_TILE_MAXR 16 /* rows of a tile, and the most depth rows (64 bytes) */
#define LP_TILE_MAXG 8  /* most groups */
#define LP_TILE_DOTJ 512 /* columns the bf16 tiles sum before adding into D */

static inline int lp_tile_depth(int R)
{
    int kr = R < LP_TILE_MAXR ? R : LP_TILE_MAXR;
    while (R % kr)
        kr--;
    return kr;
}
static inline int lp_tile_mp(int M)
{
    return (M + LP_TILE_MAXR - 1) / LP_TILE_MAXR * LP_TILE_MAXR;
}
static inline size_t lp_tile_pack_lanes(int M, int G, int R)
{
    return (size_t)lp_tile_mp(M) * (size_t)G * (size_t)R;
}
/* Index of A(m, g, r) in a packed A. */
static inline size_t lp_tile_a_at(int M, int R, int m, int g, int r)
{
    const int kr = lp_tile_depth(R), kb = r / kr;
    return (((size_t)g * (size_t)(R / kr) + (size_t)kb) * (size_t)lp_tile_mp(M) + (size_t)m) *
               (size_t)kr +
           (size_t)(r % kr);
}

/* 1 when the tile kernel runs here: the level's kernel table has one
 * (lp_kern.h; on x86 level NN_CPU_AMX, nn_cpu.h: CPUID, the OS's tile
 * state, the kernel's permission) and the kernel passed its start-up
 * check, made once per process in a forked child against the twin (a
 * fault or a wrong sum there: 0, with one line on stderr, and the int8
 * GEMMs run on vpdpbusd).  Without a tile kernel: 0, no check. */
int         lp_tile_ready(void);
/* For the run's "kernels:" line: "" without a tile kernel, else whether
 * the GEMMs run on tiles. */
const char *lp_tile_status(void);
/* The start-up check on any kernel of lp_tilegemm's contract (tests give
 * it the model, a wrong kernel, one that dies): 1 when it matched the twin
 * in a forked child, else 0 with the line on stderr. */
typedef void (*lp_tile_fn)(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                           const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
int         lp_tile_selfcheck(lp_tile_fn fn);

/* The product above (the tile kernel where lp_tile_ready(), else the
 * twin).  Every B[goff[g] + r*rs + j], j < n, must be
 * readable (goff may be negative).  1 <= R; 1 <= G <= LP_TILE_MAXG;
 * 4*G*R <= LP_GEMM_MAX_K. */
void lp_tilegemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                 const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
void lp_tilegemm_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                     const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
/* The AMX kernel's own sequence on the tile model (any CPU).  Returns 0,
 * or -1 when the kernel broke a rule the hardware enforces (then
 * lp_tile_emu_fault() names the first).  The model's tile state is the
 * calling thread's, as on the hardware, so pool workers run it at once. */
int         lp_tilegemm_emu(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                            const ptrdiff_t *goff, int G, int R, size_t rs, size_t n);
const char *lp_tile_emu_fault(void);
/* Tests: on (1), every product that has a tile path (lp_gemm_u8u8, the
 * shift-path convs, the bf16 weight gradients) runs it on the model at any
 * level, bit-identical to the level's own kernels (weight gradients within
 * the budget); 0: dispatch as usual.  Resets the count of model runs that
 * broke a rule since, lp_tile_model_faults(). */
void        lp_tile_force_model(int on);
int         lp_tile_model_forced(void);
int         lp_tile_model_faults(void);
/* The model's rules alone (tests): LDTILECFG of the 64 bytes at cfg, then
 * one TDPBSUD tmm c, tmm a, tmm b.  Returns 0, or -1 with the fault named. */
int         lp_tile_emu_check(const void *cfg, int c, int a, int b, int bf16);

/* ---- bf16 weight gradients on AMX-BF16 (TDPBF16PS) ------------------------
 * The contract of lp_shiftdot_bf16 (lp_bf16.h):
 *   D[m*ldd + c*T + t] += sum_{j < n} A[m*lda + j] * B[c*ldb + toff[t] + j]
 * Roles: the channel rows of B at one tap are a tile's rows at stride ldb
 * (X: 16 channels x 32 columns, loaded from B as it is), and A is packed
 * once per call into pairs of columns (Y: row r of column block jb holds
 * (A[m][32 jb + 2r], A[m][32 jb + 2r + 1]) for 16 rows m; zero past n and
 * M), so one TDPBF16PS adds 16 x 16 sums of 32 exact products.  Blocks of
 * 32 channels x 32 rows of A at a tap; channel rows past nch or columns
 * past n go through a zeroed buffer (nothing read past the operands); the
 * FP32 tile sums are added into D every LP_TILE_DOTJ columns, which bounds
 * the rounding: |tiles - twin| <= 2^-14 * sum_j |A B| per entry (the
 * products are exact; at most 512 rounded adds in a tile, then one per
 * chunk in D).  Used where lp_tile_bf16_ready(). */
int  lp_tile_bf16_ready(void);
void lp_tiledot_bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                     const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n);
/* The same on the tile model (any CPU); -1 when a tile rule broke. */
int  lp_tiledot_bf16_emu(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                         const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                         size_t n);

#endif
