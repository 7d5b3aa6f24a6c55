/* tk_gossip — fixtures of the in-process gossip tests (see tk_gossip.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "tests/tk_gossip.h"

topo *tk_gossip_topo(const char *name)
{
    char path[256], err[512];
    snprintf(path, sizeof path, "topologies/%s.yaml", name);
    topo *t = topo_load(path, err, sizeof err);
    if (!t)
        fail_msg("shipped topology %s does not load: %s", path, err);
    return t;
}

void tk_gossip_layout_of(nn_arena *L, int big)
{
    nn_arena_init(L);
    nn_arena_add(L, "conv.weight", 2, (int[]){ 8, 12 });
    nn_arena_add(L, "conv.bias", 1, (int[]){ 3 });
    nn_arena_add(L, "fc.weight", 2, (int[]){ 5, 20 });
    if (big)
        nn_arena_add(L, "big.weight", 2, (int[]){ 15, 20 });
    nn_arena_alloc(L);
}

void tk_gossip_layout(nn_arena *L)
{
    tk_gossip_layout_of(L, 0);
}

float **tk_gossip_vectors(int n, size_t d, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    float **x = nn_xcalloc((size_t)n, sizeof *x);
    for (int i = 0; i < n; i++) {
        x[i] = nn_xcalloc(d, sizeof(float));
        for (size_t k = 0; k < d; k++)
            x[i][k] = nn_rng_normal(&r);
    }
    return x;
}

void tk_gossip_vectors_free(float **x, int n)
{
    for (int i = 0; i < n; i++)
        free(x[i]);
    free(x);
}

/* The defaults with algo, compressor comp, eta and staleness S. */
gossip_config tk_gossip_cfg(gossip_algo algo, const char *comp, double eta, int S)
{
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = algo;
    snprintf(cfg.compressor, sizeof cfg.compressor, "%s", comp);
    cfg.eta = eta;
    cfg.staleness = S;
    return cfg;
}
