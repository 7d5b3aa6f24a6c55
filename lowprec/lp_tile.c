/* lp_tile — see lp_tile.h: the plain twin, the start-up check and the
 * dispatch. */
#include "lowprec/lp_tile.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The start-up check: a forked child runs the tile kernel on a fixed
 * problem that takes every block shape (two- and one-tile rows, a moved
 * last column block, rows past M) and compares it with the twin; a wrong
 * sum, a fault or a signal (SIGILL where the kernel withheld the tile
 * state, say) in the child leaves the tiles unused.  The child touches
 * only static buffers (no malloc: the parent may have threads) and ends
 * with _exit. */
#define S_PM 40
#define S_PG 2
#define S_PR 12
#define S_PN 45
#define S_PRS 50

static int s_probe_child(lp_tile_fn fn)
{
    static uint32_t A[S_PM / 16 * 16 + 16][S_PG * S_PR], B[S_PG * S_PR * S_PRS];
    static int32_t  S[S_PM * S_PN], E[S_PM * S_PN];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof A / 4; i++)
        ((uint32_t *)A)[i] = x = x * 1664525u + 1013904223u;
    for (size_t i = 0; i < sizeof B / 4; i++)
        B[i] = x = x * 1664525u + 1013904223u;
    const ptrdiff_t goff[S_PG] = {0, (ptrdiff_t)S_PR * S_PRS};
    fn(S, S_PN, &A[0][0], S_PM, B, goff, S_PG, S_PR, S_PRS, S_PN);
    lp_tilegemm_ref(E, S_PN, &A[0][0], S_PM, B, goff, S_PG, S_PR, S_PRS, S_PN);
    return memcmp(S, E, sizeof S) == 0 ? 0 : 2;
}

int lp_tile_selfcheck(lp_tile_fn fn)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) { /* faults end the child, whatever handlers the parent set */
        static const int sigs[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGSYS};
        for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
            signal(sigs[i], SIG_DFL);
        _exit(s_probe_child(fn));
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 1;
    if (WIFSIGNALED(st))
        fprintf(stderr, "lpgossip: the AMX tile kernel died of signal %d (%s) in its start-up "
                        "check; the int8 GEMMs use vpdpbusd\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        fprintf(stderr, "lpgossip: the AMX tile kernel gave wrong sums in its start-up check; "
                        "the int8 GEMMs use vpdpbusd\n");
    return 0;
}

static void s_amx_kernel(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                         const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    lp_tilegemm_amx(S, ldc, Ap, M, B, goff, G, R, rs, n);
}

int lp_tile_ready(void)
{
    static int s_ready = -1;
    if (nn_cpu_level() < NN_CPU_AMX)
        return 0;
    if (s_ready < 0)
        s_ready = lp_tile_selfcheck(s_amx_kernel);
    return s_ready;
}

const char *lp_tile_status(void)
{
    if (nn_cpu_level() < NN_CPU_AMX)
        return "";
    return lp_tile_ready() ? ", int8 GEMMs on AMX tiles"
                           : ", AMX tiles failed their start-up check (vpdpbusd instead)";
}

void lp_tilegemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                 const ptrdiff_t *goff, int G, int R, size_t rs, size_t n)
{
    assert(M >= 1 && G >= 1 && G <= LP_TILE_MAXG && R >= 1 && 4 * (size_t)G * R <= LP_GEMM_MAX_K);
    if (lp_tile_ready())
        lp_tilegemm_amx(S, ldc, Ap, M, B, goff, G, R, rs, n);
    else
        lp_tilegemm_ref(S, ldc, Ap, M, B, goff, G, R, rs, n);
}
