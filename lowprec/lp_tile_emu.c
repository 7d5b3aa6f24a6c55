/* lp_tile_emu — a software model of the AMX tile unit (palette 1: eight
 * tiles of at most 16 rows x 64 bytes) that runs the tile kernel
 * (lp_tile_kern.h) on any CPU, for the tests.  Each operation does what
 * the instruction does, and checks what the instruction checks: a
 * configuration LDTILECFG would refuse (#GP), a product whose shapes do
 * not agree or whose tiles are not distinct (#UD), a tile used before it
 * is configured.  A broken rule is recorded (lp_tile_emu_fault) and the
 * operation skipped.  Tile loads and stores touch exactly the bytes the
 * hardware touches, so the sanitizers see any read or write past the
 * operands.  Like the hardware's, the tile state is the calling thread's
 * (one model per thread: each pool worker configures and releases its own
 * tiles); the forced-model switch is set while no kernel runs and the
 * count of broken runs is atomic.  Tests only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"

static _Thread_local struct {
    int     on;                 /* configured */
    uint8_t rows[8];
    int     colsb[8];
    uint8_t t[8][16][64];
    char    fault[160];
} s_u;

static int s_forced, s_faults; /* lp_tile_force_model; s_faults atomically */

void lp_tile_force_model(int on)
{
    s_forced = on;
    __atomic_store_n(&s_faults, 0, __ATOMIC_RELAXED);
}

int lp_tile_model_forced(void)
{
    return s_forced;
}

int lp_tile_model_faults(void)
{
    return __atomic_load_n(&s_faults, __ATOMIC_RELAXED);
}

/* The end of one kernel run on the model: 0, or -1 (counted) when it broke
 * a rule. */
static int s_ran(void)
{
    if (!s_u.fault[0])
        return 0;
    __atomic_add_fetch(&s_faults, 1, __ATOMIC_RELAXED);
    return -1;
}

static void s_fault(const char *fmt, ...)
{
    if (s_u.fault[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_u.fault, sizeof s_u.fault, fmt, ap);
    va_end(ap);
}

static void s_cfg(const void *p)
{
    const uint8_t *b = p;
    int bad = b[0] != 1 || b[1] != 0;
    for (int i = 2; i < 16; i++)
        bad |= b[i] != 0;
    for (int i = 32; i < 48; i++)
        bad |= b[i] != 0;
    for (int i = 56; i < 64; i++)
        bad |= b[i] != 0;
    for (int t = 0; t < 8; t++) {
        int colsb = b[16 + 2 * t] | b[17 + 2 * t] << 8, rows = b[48 + t];
        bad |= rows > 16 || colsb > 64 || (rows == 0) != (colsb == 0);
        s_u.rows[t]  = (uint8_t)rows;
        s_u.colsb[t] = colsb;
    }
    if (bad) {
        s_fault("LDTILECFG: invalid configuration (#GP)");
        return;
    }
    memset(s_u.t, 0, sizeof s_u.t);
    s_u.on = 1;
}

static int s_ok(int t, const char *op)
{
    if (!s_u.on || s_u.rows[t] == 0) {
        s_fault("%s: tile %d used while not configured", op, t);
        return 0;
    }
    return !s_u.fault[0];
}

static void s_zero(int t)
{
    if (s_ok(t, "TILEZERO"))
        memset(s_u.t[t], 0, sizeof s_u.t[t]);
}

static void s_load(int t, const void *p, size_t stride)
{
    if (!s_ok(t, "TILELOADD"))
        return;
    memset(s_u.t[t], 0, sizeof s_u.t[t]);
    for (int r = 0; r < s_u.rows[t]; r++)
        memcpy(s_u.t[t][r], (const uint8_t *)p + (size_t)r * stride, (size_t)s_u.colsb[t]);
}

static void s_store(int t, void *p, size_t stride)
{
    if (!s_ok(t, "TILESTORED"))
        return;
    for (int r = 0; r < s_u.rows[t]; r++)
        memcpy((uint8_t *)p + (size_t)r * stride, s_u.t[t][r], (size_t)s_u.colsb[t]);
}

/* The rules of the dot-product instructions (#UD otherwise): configured,
 * distinct tiles; a's 4-byte groups as many as b's rows; c as many rows
 * as a and as wide as b. */
static int s_dp_ok(const char *op, int c, int a, int b)
{
    if (!s_ok(c, op) || !s_ok(a, op) || !s_ok(b, op))
        return 0;
    if (c == a || c == b || a == b || s_u.colsb[a] % 4 || s_u.colsb[c] % 4 ||
        s_u.colsb[a] / 4 != s_u.rows[b] || s_u.colsb[c] != s_u.colsb[b] ||
        s_u.rows[c] != s_u.rows[a]) {
        s_fault("%s tmm%d, tmm%d, tmm%d: shapes %dx%d += %dx%d . %dx%d (#UD)", op, c, a, b,
                s_u.rows[c], s_u.colsb[c], s_u.rows[a], s_u.colsb[a], s_u.rows[b], s_u.colsb[b]);
        return 0;
    }
    return 1;
}

/* TDPBSUD c, a, b: c[m][n] += sum_k sum_i s8(a[m][4k+i]) * u8(b[k][4n+i]),
 * k < a.colsb / 4, int32 with wrap-around. */
static void s_dp(int c, int a, int b)
{
    if (!s_dp_ok("TDPBSUD", c, a, b))
        return;
    for (int m = 0; m < s_u.rows[c]; m++)
        for (int n = 0; n < s_u.colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &s_u.t[c][m][4 * n], 4);
            uint32_t u = (uint32_t)acc;
            for (int k = 0; k < s_u.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++)
                    u += (uint32_t)((int32_t)(int8_t)s_u.t[a][m][4 * k + i] *
                                    (int32_t)s_u.t[b][k][4 * n + i]);
            memcpy(&s_u.t[c][m][4 * n], &u, 4);
        }
}

/* bf16 bits as FP32, a denormal read as zero (DAZ). */
static float s_bf(const uint8_t *p)
{
    uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A denormal result flushed to zero (FTZ). */
static float s_ftz(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

/* TDPBF16PS c, a, b: for each k < a.colsb / 4 in order, c[m][n] +=
 * a[m][2k] * b[k][2n], then += a[m][2k+1] * b[k][2n+1] (FP32, each add
 * rounded to nearest even, DAZ / FTZ), as Intel's pseudo-code has it. */
static void s_dpbf(int c, int a, int b)
{
    if (!s_dp_ok("TDPBF16PS", c, a, b))
        return;
    for (int m = 0; m < s_u.rows[c]; m++)
        for (int k = 0; k < s_u.colsb[a] / 4; k++)
            for (int n = 0; n < s_u.colsb[c] / 4; n++) {
                float acc;
                memcpy(&acc, &s_u.t[c][m][4 * n], 4);
                for (int i = 0; i < 2; i++)
                    acc = s_ftz(acc + s_bf(&s_u.t[a][m][4 * k + 2 * i]) *
                                          s_bf(&s_u.t[b][k][4 * n + 2 * i]));
                memcpy(&s_u.t[c][m][4 * n], &acc, 4);
            }
}

static void s_release(void)
{
    s_u.on = 0;
    memset(s_u.t, 0, sizeof s_u.t);
}

#define LPT_CFG(p)         s_cfg(p)
#define LPT_ZERO(t)        s_zero(t)
#define LPT_LOAD(t, p, s)  s_load(t, p, s)
#define LPT_STORE(t, p, s) s_store(t, p, s)
#define LPT_DP(c, a, b)    s_dp(c, a, b)
#define LPT_DPBF(c, a, b)  s_dpbf(c, a, b)
#define LPT_RELEASE()      s_release()

#include "lowprec/lp_tile_kern.h"
#include "nn/nn_core.h"

int lp_tilegemm_emu(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                    const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    s_u.fault[0] = 0;
    uint32_t *bl = n < 16 ? nn_xmalloc((size_t)G * R * 16 * 4) : NULL;
    lpt_kernel(S, ldc, Ap, M, B, goff, G, R, rs, n, bl);
    free(bl);
    return s_ran();
}

int lp_tiledot_bf16_emu_packed(float *D, size_t ldd, const uint16_t *Yp, int M, const uint16_t *B,
                        size_t ldb, int nch, const int *toff, int T, size_t n)
{
    s_u.fault[0] = 0;
    lpt_dot_kernel(D, ldd, Yp, M, B, ldb, nch, toff, T, n);
    return s_ran();
}

int lp_tile_emu_check(const void *cfg, int c, int a, int b, int bf16)
{
    s_u.fault[0] = 0;
    s_u.on = 0;
    s_cfg(cfg);
    if (bf16)
        s_dpbf(c, a, b);
    else
        s_dp(c, a, b);
    s_release();
    return s_u.fault[0] ? -1 : 0;
}

const char *lp_tile_emu_fault(void)
{
    return s_u.fault;
}
