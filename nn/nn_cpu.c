/* nn_cpu — see nn_cpu.h. */
#include "nn/nn_cpu.h"

#include <stdlib.h>
#include <string.h>

static int s_forced = -1; /* -1: automatic */
static int s_auto   = -1; /* cached automatic choice */

static const char *s_names[NN_CPU_LEVELS] = {"portable", "avx2", "avx512", "avx512vnni"};

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
