/* lp_bf16 — see lp_bf16.h. */
#include "lowprec/lp_bf16.h"
#include "lowprec/lp_tile.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "lowprec/lp_kern.h"
#include "nn/nn_cpu.h"
#include "nn/nn_pool.h"

static lp_wgrad_t s_wgrad = LP_WGRAD_AUTO;

int lp_bf16_supported(void)
{
    return lp_kern()->bf16;
}

int lp_wgrad_parse(const char *s, lp_wgrad_t *out)
{
    static const char *names[] = {"auto", "fp32", "bf16"};
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *out = (lp_wgrad_t)i;
            return 0;
        }
    return -1;
}

int lp_wgrad_set(lp_wgrad_t w, char *err, size_t errlen)
{
    if (w == LP_WGRAD_BF16 && !lp_bf16_supported()) {
        snprintf(err, errlen,
                 "--wgrad bf16: this CPU (level %s) has no AVX-512 BF16; use --wgrad fp32 or auto",
                 nn_cpu_name(nn_cpu_level()));
        return -1;
    }
    s_wgrad = w;
    return 0;
}

int lp_wgrad_bf16(void)
{
    return s_wgrad == LP_WGRAD_BF16 || (s_wgrad == LP_WGRAD_AUTO && lp_bf16_supported());
}

const char *lp_wgrad_name(void)
{
    return lp_wgrad_bf16() ? "bf16" : "fp32";
}

uint16_t lp_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    if ((u & 0x7F800000u) == 0) /* zero or subnormal: signed zero */
        return (uint16_t)((u >> 16) & 0x8000u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float lp_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void lp_bf16_row_ref(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lp_bf16_from_f32(src[i]);
}

void lp_bf16_row(uint16_t *dst, const float *src, size_t n)
{
    lp_kern()->bf16_row(dst, src, n);
}

void lp_bf16_codes_row_ref(uint16_t *dst, const uint8_t *q, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lp_bf16_from_f32((float)q[i]);
}

void lp_bf16_codes_row(uint16_t *dst, const uint8_t *q, size_t n)
{
    lp_kern()->bf16_codes_row(dst, q, n);
}

void lp_shiftdot_bf16_ref(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                          const uint16_t *B, size_t ldb, int nch, const int *toff, int T,
                          size_t n)
{
    for (int m = 0; m < M; m++)
        for (int c = 0; c < nch; c++)
            for (int t = 0; t < T; t++) {
                const uint16_t *a = A + (size_t)m * lda;
                const uint16_t *b = B + (size_t)c * ldb + toff[t];
                double s = 0;
                for (size_t j = 0; j < n; j++)
                    s += (double)lp_bf16_to_f32(a[j]) * lp_bf16_to_f32(b[j]);
                D[(size_t)m * ldd + (size_t)c * T + t] += (float)s;
            }
}

/* One thread's rows of lp_shiftdot_bf16 (nn_pool.h): rows [m0, m1) in
 * multiples of 4 (the kernel's row tile), each row's sums those of the
 * single-threaded call; on tiles, s_tiledot_worker. */
typedef struct {
    float *D;
    const uint16_t *A, *B;
    size_t ldd, lda, ldb, n;
    const int *toff;
    int M, nch, T;
    int tile; /* 0: the level's kernel; 1: AMX-BF16 tiles; 2: their model */
} s_dot_job;

static void s_dot_worker(void *arg, int t, int nt)
{
    const s_dot_job *j = arg;
    size_t m0, m1;
    nn_pool_share((size_t)j->M, t, nt, 4, &m0, &m1);
    if (m1 > m0)
        lp_kern()->shiftdot_bf16(j->D + m0 * j->ldd, j->ldd, j->A + m0 * j->lda, j->lda,
                                 (int)(m1 - m0), j->B, j->ldb, j->nch, j->toff, j->T, j->n);
}

/* Products per thread below which one thread does the work. */
#define S_DOT_MIN_WORK ((size_t)1 << 18)

/* One thread's rows on the AMX-BF16 tiles (or their model: tile = 2):
 * rows [m0, m1) in multiples of 16 (a tile's rows of A), on this thread's
 * own tiles and pair buffer.  Each entry's sums run in the same order
 * whatever block holds its row, so the floats are those of one call. */
static void s_tiledot_worker(void *arg, int t, int nt)
{
    const s_dot_job *j = arg;
    size_t m0, m1;
    nn_pool_share((size_t)j->M, t, nt, 16, &m0, &m1);
    if (m1 <= m0)
        return;
    float *D = j->D + m0 * j->ldd;
    const uint16_t *A = j->A + m0 * j->lda;
    if (j->tile == 2)
        (void)lp_tiledot_bf16_emu(D, j->ldd, A, j->lda, (int)(m1 - m0), j->B, j->ldb, j->nch,
                                  j->toff, j->T, j->n); /* a broken rule is counted */
    else
        lp_tiledot_bf16(D, j->ldd, A, j->lda, (int)(m1 - m0), j->B, j->ldb, j->nch, j->toff,
                        j->T, j->n);
}

void lp_shiftdot_bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                      const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n)
{
    assert(M >= 1 && nch >= 1 && T >= 1);
    const int tile = lp_tile_model_forced() ? 2 : lp_tile_bf16_ready() ? 1 : 0;
    const int align = tile ? 16 : 4;
    const size_t work = (size_t)M * nch * T * n;
    int nt = nn_pool_threads();
    nt = nt > M / align ? M / align : nt;
    while (nt > 1 && work / (size_t)nt < S_DOT_MIN_WORK)
        nt--;
    s_dot_job j = {D, A, B, ldd, lda, ldb, n, toff, M, nch, T, tile};
    nn_pool_run(nt < 1 ? 1 : nt, tile ? s_tiledot_worker : s_dot_worker, &j);
}
