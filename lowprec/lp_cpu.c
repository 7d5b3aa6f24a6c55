/* lp_cpu — see lp_cpu.h. */
#include "lowprec/lp_cpu.h"

#include <stdlib.h>
#include <string.h>

static int s_forced = -1; /* -1: automatic */
static int s_auto   = -1; /* cached automatic choice */

int lp_cpu_supports(lp_cpu_t level)
{
    switch (level) {
    case LP_CPU_PORTABLE:
        return 1;
    case LP_CPU_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case LP_CPU_AVX512VNNI:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
    return 0;
}

const char *lp_cpu_name(lp_cpu_t level)
{
    switch (level) {
    case LP_CPU_PORTABLE:
        return "portable";
    case LP_CPU_AVX2:
        return "avx2";
    case LP_CPU_AVX512VNNI:
        return "avx512vnni";
    }
    return "?";
}

static int s_parse(const char *name, lp_cpu_t *out)
{
    for (int l = LP_CPU_PORTABLE; l <= LP_CPU_AVX512VNNI; l++)
        if (strcmp(name, lp_cpu_name((lp_cpu_t)l)) == 0) {
            *out = (lp_cpu_t)l;
            return 0;
        }
    return -1;
}

lp_cpu_t lp_cpu_level(void)
{
    if (s_forced >= 0)
        return (lp_cpu_t)s_forced;
    if (s_auto < 0) {
        lp_cpu_t best = LP_CPU_PORTABLE;
        if (lp_cpu_supports(LP_CPU_AVX512VNNI))
            best = LP_CPU_AVX512VNNI;
        else if (lp_cpu_supports(LP_CPU_AVX2))
            best = LP_CPU_AVX2;
        const char *env = getenv("LPGOSSIP_CPU");
        lp_cpu_t want;
        if (env && s_parse(env, &want) == 0 && lp_cpu_supports(want) && want < best)
            best = want;
        s_auto = (int)best;
    }
    return (lp_cpu_t)s_auto;
}

int lp_cpu_force(const char *name)
{
    if (!name || strcmp(name, "auto") == 0) {
        s_forced = -1;
        return 0;
    }
    lp_cpu_t l;
    if (s_parse(name, &l) != 0 || !lp_cpu_supports(l))
        return -1;
    s_forced = (int)l;
    return 0;
}
