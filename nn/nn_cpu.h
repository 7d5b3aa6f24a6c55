/* nn_cpu — the one run-time CPU dispatch of lpgossip's kernels.
 *
 * Owns:    the process-wide SIMD level that nn/ (FP32) and lowprec/ (8-bit)
 *          kernels dispatch on: the best level the CPU supports, unless a
 *          caller forced a lower one (tests force every level in turn;
 *          LPGOSSIP_CPU=portable|avx2|avx512|avx512vnni|amx in the
 *          environment caps whole runs, FP32 and int8 kernels alike).
 * Exposes: nn_cpu_level(), nn_cpu_force(), nn_cpu_supports(), names.
 * Callers: every dispatcher in nn/ and lowprec/, tests, bench, the CLI.
 *
 * Levels, each including the ones below:
 *   PORTABLE    plain C;
 *   AVX2        AVX2 + FMA (nn's FP32 kernels; lowprec's vpmaddwd pairs);
 *   AVX512      AVX-512 F/BW/VL (nn's AVX-512 FP32 kernels);
 *   AVX512VNNI  + VNNI (lowprec's vpdpbusd kernels); AVX-512 BF16, where
 *               the CPU also has it, is a feature on top (lp_bf16.h);
 *   AMX         + AMX-TILE and AMX-INT8 (Sapphire Rapids and later:
 *               lowprec's tile kernels, lp_tile.h), with the tile state
 *               enabled by the OS (XCR0 bits 17, 18) and granted to this
 *               process (arch_prctl ARCH_REQ_XCOMP_PERM, asked once); a
 *               kernel that refuses it leaves the level unsupported, so
 *               runs fall back to AVX512VNNI.
 * On aarch64 (LPGOSSIP_CPU=portable|neon|dotprod|i8mm; detected with
 * getauxval(AT_HWCAP/AT_HWCAP2)):
 *   PORTABLE    plain C;
 *   NEON        Advanced SIMD (every aarch64 CPU);
 *   DOTPROD     + UDOT/SDOT (HWCAP_ASIMDDP; Armv8.2 Cortex-A55/A76 on);
 *   I8MM        + the int8 matrix multiply (HWCAP2_I8MM; Armv8.6).
 * Any other architecture has PORTABLE alone.
 */
#ifndef NN_CPU_H
#define NN_CPU_H

#if defined(__x86_64__) || defined(__i386__)
typedef enum {
    NN_CPU_PORTABLE   = 0,
    NN_CPU_AVX2       = 1,
    NN_CPU_AVX512     = 2,
    NN_CPU_AVX512VNNI = 3,
    NN_CPU_AMX        = 4,
} nn_cpu_t;
#define NN_CPU_LEVELS 5
#elif defined(__aarch64__)
typedef enum {
    NN_CPU_PORTABLE = 0,
    NN_CPU_NEON     = 1,
    NN_CPU_DOTPROD  = 2,
    NN_CPU_I8MM     = 3,
} nn_cpu_t;
#define NN_CPU_LEVELS 4
#else
typedef enum {
    NN_CPU_PORTABLE = 0,
} nn_cpu_t;
#define NN_CPU_LEVELS 1
#endif

/* The level kernels use now (forced, else LPGOSSIP_CPU, else the best). */
nn_cpu_t    nn_cpu_level(void);
/* True when this CPU can run the level. */
int         nn_cpu_supports(nn_cpu_t level);
/* Forces a level by name (nn_cpu_name; "auto" or NULL returns to the
 * automatic choice).  Returns 0, or -1 when the name is unknown or the CPU
 * lacks the level (the current choice is then unchanged).  Not
 * thread-safe: call it before kernels run (tests, startup). */
int         nn_cpu_force(const char *name);
/* "portable", "avx2", "avx512", "avx512vnni", "amx" on x86; "portable",
 * "neon", "dotprod", "i8mm" on aarch64. */
const char *nn_cpu_name(nn_cpu_t level);
/* The best level this CPU supports, whatever is forced or set. */
nn_cpu_t    nn_cpu_best(void);

#endif
