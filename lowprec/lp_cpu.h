/* lp_cpu — run-time CPU feature dispatch for the lowprec kernels.
 *
 * Owns:    the one process-wide choice of SIMD level used by lp_quant and
 *          lp_gemm: the best level the CPU supports, unless a caller forced a
 *          lower one (tests force every level in turn to check that they are
 *          bit-identical; LPGOSSIP_CPU=portable|avx2|avx512vnni in the
 *          environment does the same for whole runs).
 * Exposes: lp_cpu_level(), lp_cpu_force(), lp_cpu_supports(), names.
 * Callers: the lowprec dispatchers (lp_quant.c, lp_gemm.c), tests, bench.
 *
 * Levels: PORTABLE (plain C), AVX2 (AVX2 + FMA, no VNNI: products through
 * vpmaddubsw on nibbles), AVX512VNNI (AVX-512 F/BW/VL + VNNI: vpdpbusd).
 */
#ifndef LP_CPU_H
#define LP_CPU_H

typedef enum {
    LP_CPU_PORTABLE   = 0,
    LP_CPU_AVX2       = 1,
    LP_CPU_AVX512VNNI = 2,
} lp_cpu_t;

/* The level kernels use now (forced, else LPGOSSIP_CPU, else the best). */
lp_cpu_t    lp_cpu_level(void);
/* True when this CPU can run the level. */
int         lp_cpu_supports(lp_cpu_t level);
/* Forces a level by name ("portable", "avx2", "avx512vnni"; "auto" or NULL
 * returns to automatic choice).  Returns 0, or -1 when the name is unknown or
 * the CPU lacks the level (the current choice is then unchanged).
 * Not thread-safe: call it before kernels run (tests, startup). */
int         lp_cpu_force(const char *name);
const char *lp_cpu_name(lp_cpu_t level);

#endif
