/* tk_lp — fixtures of the 8-bit layer tests in tests/: uniform random
 * buffers, and a check run with the kernel table of every level.
 *
 * Owns:    nothing; buffers are the caller's.
 * Exposes: tk_lp_uniform, tk_lp_each_level.
 * Callers: tests/test_lowprec_layers.c, tests/test_lowprec_ren.c (linked
 *          into every test program by the Makefile, like tk.c).
 */
#ifndef TK_LP_H
#define TK_LP_H

#include <stddef.h>

#include "lowprec/lp_kern.h"
#include "nn/nn_core.h"

/* x[i] = lo + (hi - lo) * u, u uniform in [0, 1) from r, for i < n. */
void tk_lp_uniform(nn_rng *r, float *x, size_t n, float lo, float hi);

/* Runs fn with the kernel table of every level this CPU has (the kernels
 * are reached through the tables, so each architecture's are tested), then
 * goes back to the automatic level. */
void tk_lp_each_level(void (*fn)(const lp_kern_t *k));

#endif
