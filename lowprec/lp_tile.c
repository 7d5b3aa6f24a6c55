/* lp_tile — see lp_tile.h: the plain twins, the start-up checks, the
 * bf16 pair packing and the dispatch. */
#include "lowprec/lp_tile.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_simd.h"
#include "nn/nn_core.h"
#include "lowprec/lp_kern.h"

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

/* Runs child(arg) in a forked child: 1 when it exits 0, else 0 with a line
 * on stderr naming kernel and the fallback.  The child's fault signals are
 * reset to their defaults first, whatever handlers the parent set, core
 * files are off, and it touches only static buffers (no malloc: the parent
 * may have threads) and ends with _exit. */
static int s_in_child(int (*child)(const void *), const void *arg, const char *kernel,
                      const char *fallback)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        /* a kernel that dies here writes no core file: under an emulator
         * (qemu-user) that is the whole emulated address space plus the
         * emulator's own core, minutes of writing for a check we expect
         * may fail */
        const struct rlimit no_core = {0, 0};
        (void)setrlimit(RLIMIT_CORE, &no_core);
        static const int sigs[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGSYS};
        for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
            signal(sigs[i], SIG_DFL);
        _exit(child(arg));
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 1;
    if (WIFSIGNALED(st))
        fprintf(stderr, "lpgossip: the %s died of signal %d (%s) in its start-up check; %s\n",
                kernel, WTERMSIG(st), strsignal(WTERMSIG(st)), fallback);
    else
        fprintf(stderr, "lpgossip: the %s gave wrong sums in its start-up check; %s\n", kernel,
                fallback);
    return 0;
}

/* The integer kernel's check: a fixed problem that takes every block shape
 * (two- and one-tile rows, a moved last column block, rows past M) against
 * the twin, exactly. */
#define S_PM 40
#define S_PG 2
#define S_PR 12
#define S_PN 45
#define S_PRS 50

typedef struct {
    lp_tile_fn fn;
} s_fn_arg;

static int s_probe_child(const void *arg)
{
    static uint32_t A[S_PM / 16 * 16 + 16][S_PG * S_PR], B[S_PG * S_PR * S_PRS];
    static int32_t  S[S_PM * S_PN], E[S_PM * S_PN];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof A / 4; i++)
        ((uint32_t *)A)[i] = x = x * 1664525u + 1013904223u;
    for (size_t i = 0; i < sizeof B / 4; i++)
        B[i] = x = x * 1664525u + 1013904223u;
    const ptrdiff_t goff[S_PG] = {0, (ptrdiff_t)S_PR * S_PRS};
    ((const s_fn_arg *)arg)->fn(S, S_PN, &A[0][0], S_PM, B, goff, S_PG, S_PR, S_PRS, S_PN);
    lp_tilegemm_ref(E, S_PN, &A[0][0], S_PM, B, goff, S_PG, S_PR, S_PRS, S_PN);
    return memcmp(S, E, sizeof S) == 0 ? 0 : 2;
}

int lp_tile_selfcheck(lp_tile_fn fn)
{
    const s_fn_arg arg = {fn};
    return s_in_child(s_probe_child, &arg, "AMX tile kernel", "the int8 GEMMs use vpdpbusd");
}

int lp_tile_ready(void)
{
    static int s_ready = -1;
    const lp_kern_t *k = lp_kern();
    if (!k->tilegemm)
        return 0;
    if (s_ready < 0)
        s_ready = lp_tile_selfcheck(k->tilegemm);
    return s_ready;
}

const char *lp_tile_status(void)
{
    if (!lp_kern()->tilegemm)
        return "";
    if (!lp_tile_ready())
        return ", AMX tiles failed their start-up check (vpdpbusd instead)";
    return lp_tile_bf16_ready() ? ", int8 GEMMs and bf16 weight gradients on AMX tiles"
                                : ", int8 GEMMs on AMX tiles";
}

void lp_tilegemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                 const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    assert(M >= 1 && G >= 1 && G <= LP_TILE_MAXG && R >= 1 && 4 * (size_t)G * R <= LP_GEMM_MAX_K);
    if (lp_tile_ready())
        lp_kern()->tilegemm(S, ldc, Ap, M, B, goff, G, R, rs, n);
    else
        lp_tilegemm_ref(S, ldc, Ap, M, B, goff, G, R, rs, n);
}

/* ---- bf16 dot ------------------------------------------------------------- */

/* Elements of A (M, n) packed as column pairs in 32-column blocks. */
static size_t s_pairs_len(int M, size_t n)
{
    return (n + 31) / 32 * 16 * (size_t)lp_tile_mp(M) * 2;
}

/* Y = A (M, n at lda) as column pairs (lp_tile.h; zero past n and M). */
static void s_pairs(uint16_t *Y, const uint16_t *A, size_t lda, int M, size_t n)
{
    const size_t Mp = (size_t)lp_tile_mp(M);
    memset(Y, 0, s_pairs_len(M, n) * 2);
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < n; j++)
            Y[((j / 2) * Mp + (size_t)m) * 2 + (j & 1)] = A[(size_t)m * lda + j];
}

/* s_pairs into a heap buffer of the call (the caller frees it): packing
 * and allocation are O(M n), small beside the kernel's M nch T n; a buffer
 * kept per thread would outlive the call on pool workers, which never
 * exit. */
static uint16_t *s_pack_pairs(const uint16_t *A, size_t lda, int M, size_t n)
{
    uint16_t *Y = nn_xmalloc(s_pairs_len(M, n) * 2);
    s_pairs(Y, A, lda, M, n);
    return Y;
}

/* The start-up check of the bf16 kernel, as lp_tile_selfcheck's: a fixed
 * problem (channels and rows past one block, a column tail, several
 * chunks) against the twin within the budget. */
#define S_BM 20
#define S_BC 19
#define S_BN 1100
static int s_bf16_probe_child(const void *arg)
{
    (void)arg;
    static uint16_t A[S_BM * S_BN], B[S_BC * (S_BN + 8)], Y[(S_BN + 31) / 32 * 16 * 32 * 2];
    static float    D[S_BM * S_BC * 2], E[S_BM * S_BC * 2], mag[S_BM * S_BC * 2];
    const int toff[2] = {0, 3};
    uint32_t x = 777;
    for (size_t i = 0; i < sizeof A / 2; i++)
        A[i] = lp_bf16_from_f32((float)((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f);
    for (size_t i = 0; i < sizeof B / 2; i++)
        B[i] = lp_bf16_from_f32((float)((x = x * 1664525u + 1013904223u) >> 24));
    s_pairs(Y, A, S_BN, S_BM, S_BN);
    lp_kern()->tiledot_bf16(D, S_BC * 2, Y, S_BM, B, S_BN + 8, S_BC, toff, 2, S_BN);
    lp_shiftdot_bf16_ref(E, S_BC * 2, A, S_BN, S_BM, B, S_BN + 8, S_BC, toff, 2, S_BN);
    for (int m = 0; m < S_BM; m++)
        for (int c = 0; c < S_BC; c++)
            for (int t = 0; t < 2; t++) {
                double s = 0;
                for (int j = 0; j < S_BN; j++)
                    s += fabs((double)lp_bf16_to_f32(A[m * S_BN + j]) *
                              lp_bf16_to_f32(B[c * (S_BN + 8) + toff[t] + j]));
                mag[(m * S_BC + c) * 2 + t] = (float)s;
            }
    for (size_t i = 0; i < S_BM * S_BC * 2; i++)
        if (!(fabsf(D[i] - E[i]) <= ldexpf(mag[i], -14)))
            return 2;
    return 0;
}

int lp_tile_bf16_ready(void)
{
    static int s_ready = -1;
    if (!lp_tile_ready() || !lp_kern()->tiledot_bf16)
        return 0;
    if (s_ready < 0)
        s_ready = s_in_child(s_bf16_probe_child, NULL, "AMX-BF16 tile kernel",
                             "the bf16 weight gradients use vdpbf16ps");
    return s_ready;
}

void lp_tiledot_bf16(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                     const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n)
{
    if (n == 0)
        return;
    if (lp_tile_bf16_ready()) {
        uint16_t *Y = s_pack_pairs(A, lda, M, n);
        lp_kern()->tiledot_bf16(D, ldd, Y, M, B, ldb, nch, toff, T, n);
        free(Y);
    } else {
        lp_shiftdot_bf16_ref(D, ldd, A, lda, M, B, ldb, nch, toff, T, n);
    }
}

int lp_tiledot_bf16_emu(float *D, size_t ldd, const uint16_t *A, size_t lda, int M,
                        const uint16_t *B, size_t ldb, int nch, const int *toff, int T, size_t n)
{
    if (n == 0)
        return 0;
    uint16_t *Y = s_pack_pairs(A, lda, M, n);
    const int rc = lp_tiledot_bf16_emu_packed(D, ldd, Y, M, B, ldb, nch, toff, T, n);
    free(Y);
    return rc;
}
