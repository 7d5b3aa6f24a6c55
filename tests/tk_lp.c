/* tk_lp — fixtures of the 8-bit layer tests (see tk_lp.h). */
#include "tests/tk_lp.h"

#include "lowprec/lp_kern.h"
#include "nn/nn_core.h"
#include "nn/nn_cpu.h"

void tk_lp_uniform(nn_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * nn_rng_uniform(r);
}

/* Runs fn with the kernel table of every level this CPU has (the kernels
 * are reached through the tables, so each architecture's are tested). */
void tk_lp_each_level(void (*fn)(const lp_kern_t *k))
{
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue;
        fn(lp_kern());
    }
    nn_cpu_force("auto");
}
