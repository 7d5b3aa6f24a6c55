/* nn_pool — one persistent worker pool for the layer kernels of nn/ and
 * lowprec/.
 *
 * Owns:    the worker threads (created once, grown by nn_pool_set_threads,
 *          asleep on a condition variable between calls) and the thread
 *          count the kernels use.
 * Exposes: nn_pool_set_threads / nn_pool_threads (the count), nn_pool_run
 *          (fn(ctx, t, nt) for t in [0, nt), share 0 on the caller),
 *          nn_pool_share (the deterministic [lo, hi) of a share).
 * Callers: nn_conv.c and nn_layers.c (through nn_par_run), lowprec's conv,
 *          quantize and norm kernels, node_set_threads, bench.
 *
 * Determinism: a kernel's split may depend on nt only, never on which
 * thread runs a share or when; shares are fixed per index t.  A second
 * caller that finds the pool busy (another thread running a kernel) runs
 * every share itself, in order: same results, no waiting.  OpenBLAS is left
 * at the count it was given: its threads and ours never run at the same time
 * (each dispatcher returns when its work is done), so the two never
 * oversubscribe the cores. */
#ifndef NN_POOL_H
#define NN_POOL_H

#include <stddef.h>

#define NN_POOL_MAX_THREADS 64

typedef void (*nn_pool_fn)(void *ctx, int t, int nt);

/* The kernels' thread count from now on: n in [1, NN_POOL_MAX_THREADS]
 * (clamped); 0 or less: follow openblas_get_num_threads().  Starts the
 * missing workers (never stops any before exit); a worker that cannot be
 * started leaves its shares to the caller. */
void nn_pool_set_threads(int n);

/* The count kernels use now, in [1, NN_POOL_MAX_THREADS]. */
int  nn_pool_threads(void);

/* fn(ctx, t, nt) for every t in [0, nt), concurrently where workers are
 * free; returns when all are done.  nt in [1, NN_POOL_MAX_THREADS]. */
void nn_pool_run(int nt, nn_pool_fn fn, void *ctx);

/* Share t of nt of [0, n): [*lo, *hi) = [n*t/nt, n*(t+1)/nt), rounded down
 * to multiples of `align` (>= 1) except the end n. */
void nn_pool_share(size_t n, int t, int nt, size_t align, size_t *lo, size_t *hi);

/* Tests only: on != 0 breaks nn_pool_share on purpose (every share but the
 * first starts `align` later, leaving a gap no share covers), so a test
 * can show that its thread-count comparison catches a wrong split; 0
 * restores it.  Set it while no kernel runs. */
void nn_pool_fault(int on);

#endif
