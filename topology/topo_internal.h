/* topo_internal — shared between the files of topology/ only (not part of
 * the module's interface; other modules include topology/topo.h). */
#ifndef TOPO_INTERNAL_H
#define TOPO_INTERNAL_H

#include <stddef.h>

#include "topology/topo.h"

enum {
    TOPO_GEN_DIRECTED_RING,
    TOPO_GEN_UNDIRECTED_RING,
    TOPO_GEN_TORUS,
    TOPO_GEN_EXPONENTIAL,
    TOPO_GEN_COMPLETE,
    TOPO_GEN_STAR,
    TOPO_GEN_CIRCULANT,
};

#define TOPO_MAX_OFFSETS 64

/* A generator with its parameters. */
typedef struct {
    int    kind;          /* TOPO_GEN_* */
    int    rows, cols;    /* torus */
    int    hub;           /* star: index of the hub */
    int    noffsets;      /* circulant */
    long   offsets[TOPO_MAX_OFFSETS];
    double self_weight;   /* -1: uniform split over self + out-neighbours;
                             else kept by every node, the rest split evenly */
} topo_gen;

/* New topo with ids n0..n{n-1} and nsched zero matrices (owned). */
topo *topo__new(int n, int nsched);
/* TOPO_GEN_* for a generator name, or -1. */
int   topo__gen_kind(const char *name);
/* Overwrites w (n*n) with the generator's matrix. 0, or -1 + message. */
int   topo__fill_generator(double *w, int n, const topo_gen *g, char *err, size_t errlen);
/* The first column of w (n*n) whose sum is not 1 within TOPO_SUM_TOL (the
 * weights sender j gives out, self included), its sum in *sum; -1 when all
 * are fine. */
int   topo__bad_column(int n, const double *w, double *sum);
/* One matrix: weights in [0,1], positive self weights, columns sum to 1. */
int   topo__check_matrix(const topo *t, const double *w, char *err, size_t errlen);
/* Union of the schedule strongly connected. */
int   topo__check_connected(const topo *t, char *err, size_t errlen);

#endif
