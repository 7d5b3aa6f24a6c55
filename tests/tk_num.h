/* tk_num — numeric helpers of the kernel tests in tests/: random and
 * constant buffers, closeness checks |got - want| <= atol + rtol * |want|,
 * and central finite differences in double against an analytic gradient.
 *
 * Owns:    nothing; every buffer returned is the caller's (free).
 * Exposes: tk_randn, tk_fill, tk_copy, tk_to_double, tk_close_f,
 *          tk_close_d, tk_fd_check.
 * Callers: tests/test_nn_layers.c, tests/test_nn_conv.c (linked into every
 *          test program, as tk.c).
 *
 * Unlike tk.h, the checks fail the running cmocka test (fail_msg) with a
 * message naming what and where.
 */
#ifndef TK_NUM_H
#define TK_NUM_H

#include <stddef.h>

#include "nn/nn_core.h"

/* n values N(0, scale^2) / all v / a copy of a / a in double. */
float *tk_randn(nn_rng *r, size_t n, float scale);
float *tk_fill(size_t n, float v);
float *tk_copy(const float *a, size_t n);
double *tk_to_double(const float *a, size_t n);

/* Fails (with a message naming what) unless every |got-want| <= atol+rtol*|want|. */
void tk_close_f(const char *what, const float *got, const float *want, size_t n, double atol,
                double rtol);
void tk_close_d(const char *what, const float *got, const double *want, size_t n, double atol,
                double rtol);

/* Central finite differences of loss() with respect to every entry of x
 * (which loss() reads), compared with the analytic gradient g.  g_base is
 * what g held before the backward call (accumulation check) or NULL. */
typedef double (*tk_loss_fn)(void *ctx);
void tk_fd_check(const char *what, tk_loss_fn loss, void *ctx, double *x, size_t n,
                 const float *g, const float *g_base, double h, double atol, double rtol);

#endif
