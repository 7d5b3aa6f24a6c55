/* nn_cpu — see nn_cpu.h. */
#include "nn/nn_cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#endif

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static int s_forced = -1; /* -1: automatic */
static int s_auto   = -1; /* cached automatic choice */

#if defined(__x86_64__) || defined(__i386__)
static const char *s_names[NN_CPU_LEVELS] = {"portable", "avx2", "avx512", "avx512vnni",
                                                "amx"};
#elif defined(__aarch64__)
static const char *s_names[NN_CPU_LEVELS] = {"portable", "neon", "dotprod", "i8mm"};
#else
static const char *s_names[NN_CPU_LEVELS] = {"portable"};
#endif

#if defined(__x86_64__)
#define S_ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define S_XFEATURE_XTILEDATA  18

/* AMX-TILE and AMX-INT8 in CPUID, the tile state on in XCR0, and the
 * kernel's permission for this process (Linux 5.16+): asked once, the
 * answer kept.  A kernel that says no leaves the level unsupported. */
static int s_amx_usable(void)
{
    static int s_amx = -1;
    if (s_amx >= 0)
        return s_amx;
    s_amx = 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) /* AMX-TILE, AMX-INT8 */
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) /* XTILECFG, XTILEDATA */
        return 0;
    if (syscall(SYS_arch_prctl, S_ARCH_REQ_XCOMP_PERM, S_XFEATURE_XTILEDATA) != 0)
        return 0;
    s_amx = 1;
    return 1;
}
#endif

int nn_cpu_supports(nn_cpu_t level)
{
#if defined(__x86_64__) || defined(__i386__)
    switch (level) {
    case NN_CPU_PORTABLE:
        return 1;
    case NN_CPU_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case NN_CPU_AVX512:
        return nn_cpu_supports(NN_CPU_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case NN_CPU_AVX512VNNI:
        return nn_cpu_supports(NN_CPU_AVX512) && __builtin_cpu_supports("avx512vnni");
    case NN_CPU_AMX:
#if defined(__x86_64__)
        return nn_cpu_supports(NN_CPU_AVX512VNNI) && s_amx_usable();
#else
        return 0;
#endif
    }
    return 0;
#elif defined(__aarch64__)
    switch (level) {
    case NN_CPU_PORTABLE:
    case NN_CPU_NEON:
        return 1;
    case NN_CPU_DOTPROD:
        return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    case NN_CPU_I8MM:
        return nn_cpu_supports(NN_CPU_DOTPROD) && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
    }
    return 0;
#else
    return level == NN_CPU_PORTABLE;
#endif
}

const char *nn_cpu_name(nn_cpu_t level)
{
    return (unsigned)level < NN_CPU_LEVELS ? s_names[level] : "?";
}

static int s_parse(const char *name, nn_cpu_t *out)
{
    for (int l = 0; l < NN_CPU_LEVELS; l++)
        if (strcmp(name, s_names[l]) == 0) {
            *out = (nn_cpu_t)l;
            return 0;
        }
    return -1;
}

nn_cpu_t nn_cpu_best(void)
{
    for (int l = NN_CPU_LEVELS - 1; l > 0; l--)
        if (nn_cpu_supports((nn_cpu_t)l))
            return (nn_cpu_t)l;
    return NN_CPU_PORTABLE;
}

nn_cpu_t nn_cpu_level(void)
{
    if (s_forced >= 0)
        return (nn_cpu_t)s_forced;
    if (s_auto < 0) {
        nn_cpu_t best = nn_cpu_best(), want;
        const char *env = getenv("LPGOSSIP_CPU");
        if (env && s_parse(env, &want) == 0 && want < best)
            best = want;
        s_auto = (int)best;
    }
    return (nn_cpu_t)s_auto;
}

int nn_cpu_force(const char *name)
{
    if (!name || strcmp(name, "auto") == 0) {
        s_forced = -1;
        return 0;
    }
    nn_cpu_t l;
    if (s_parse(name, &l) != 0 || !nn_cpu_supports(l))
        return -1;
    s_forced = (int)l;
    return 0;
}
