/* bench_batch.h -- the synthetic batch the step benchmarks time: inputs
 * N(0,1) and labels uniform over 10 classes, from seed 3, so every
 * benchmark program (and its PyTorch twin's shapes) sees the same batch.
 * Header-only: each bench program is one translation unit. */
#ifndef BENCH_BATCH_H
#define BENCH_BATCH_H

#include <stdint.h>
#include <stdlib.h>

#include <stdio.h>

#include "nn/nn_core.h"

/* Allocates *x (batch * per_sample floats) and *y (batch labels); the
 * caller frees both. */
static inline void bench_random_batch(int batch, size_t per_sample, float **x, uint8_t **y)
{
    size_t nx = (size_t)batch * per_sample;
    *x = malloc(nx * sizeof **x);
    *y = malloc((size_t)batch);
    if (!*x || !*y) {
        perror("bench_random_batch");
        exit(1);
    }
    nn_rng r;
    nn_rng_seed(&r, 3);
    for (size_t i = 0; i < nx; i++)
        (*x)[i] = nn_rng_normal(&r);
    for (int i = 0; i < batch; i++)
        (*y)[i] = (uint8_t)nn_rng_below(&r, 10);
}

#endif
