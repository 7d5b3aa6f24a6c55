/* bench_gossip — gossip costs on a ResNet-20-sized layout (~272k values in
 * 65 tensors): ms per prepare (compress + encode + own decode) and per mix
 * per node, and bytes per message, for several algorithm/compressor pairs
 * on an 8-node directed ring (in-process simulator).  No pass/fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_sim.h"
#include "nn/nn_core.h"

static void s_add(nn_arena *L, const char *name, int oc, int ic, int k)
{
    if (k)
        nn_arena_add(L, name, 4, (int[]){ oc, ic, k, k });
    else
        nn_arena_add(L, name, 2, (int[]){ oc, ic });
}

/* ResNet-20 shapes (3 input channels), EvoNorm gamma/beta/v per norm. */
static void s_resnet20_layout(nn_arena *L)
{
    char name[NN_NAME_MAX];
    nn_arena_init(L);
    int in = 3, stages[3] = { 16, 32, 64 }, norm = 0;
    s_add(L, "stem.conv", 16, in, 3);
    in = 16;
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < 3; b++) {
            int c = stages[s];
            snprintf(name, sizeof name, "s%d.b%d.conv1", s, b);
            s_add(L, name, c, in, 3);
            snprintf(name, sizeof name, "s%d.b%d.conv2", s, b);
            s_add(L, name, c, c, 3);
            if (in != c) {
                snprintf(name, sizeof name, "s%d.b%d.short", s, b);
                s_add(L, name, c, in, 1);
            }
            for (int nrm = 0; nrm < 2 + (in != c); nrm++, norm++) {
                static const char *p[3] = { "gamma", "beta", "v" };
                for (int q = 0; q < 3; q++) {
                    snprintf(name, sizeof name, "norm%d.%s", norm, p[q]);
                    nn_arena_add(L, name, 1, (int[]){ c });
                }
            }
            in = c;
        }
    s_add(L, "fc.weight", 10, 64, 0);
    nn_arena_add(L, "fc.bias", 1, (int[]){ 10 });
    nn_arena_alloc(L);
}

int main(void)
{
    nn_arena L;
    s_resnet20_layout(&L);
    int n = 8;
    topo t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "ring8");
    t.n = n;
    t.nsched = 1;
    topo_matrix m;
    m.w = calloc((size_t)n * n, sizeof(double));
    t.sched = &m;
    for (int i = 0; i < n; i++) {
        m.w[i * n + i] = 0.5;
        m.w[((i + 1) % n) * n + i] = 0.5;
    }
    printf("layout: %zu values in %zu tensors (ResNet-20 shapes), 8-node directed ring\n", L.numel, L.nviews);
    printf("%-12s %-16s %12s %10s %10s %12s\n", "algo", "compressor", "bytes/msg", "x f32", "prep ms", "mix ms");
    static const struct { gossip_algo a; const char *c; } runs[] = {
        { GOSSIP_DPSGD, "identity" }, { GOSSIP_DPSGD, "q8" },
        { GOSSIP_CHOCO, "topk:0.01+q8" }, { GOSSIP_CHOCO, "topk:0.01" },
        { GOSSIP_CHOCO, "q8" }, { GOSSIP_DEEPSQUEEZE, "topk:0.01+q8" },
        { GOSSIP_CHOCO, "randk:0.01+q8" }, { GOSSIP_CHOCO, "qsgd:16" },
    };
    nn_rng r;
    nn_rng_seed(&r, 1);
    float **x = calloc((size_t)n, sizeof *x);
    for (int i = 0; i < n; i++) {
        x[i] = nn_xalloc_aligned(L.numel * sizeof(float));
        for (size_t k = 0; k < L.numel; k++)
            x[i][k] = 0.05f * nn_rng_normal(&r);
    }
    size_t f32_bytes = 0;
    for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
        gossip_config cfg;
        gossip_config_default(&cfg);
        cfg.algo = runs[ri].a;
        snprintf(cfg.compressor, sizeof cfg.compressor, "%s", runs[ri].c);
        cfg.eta = 0.1;
        char err[256];
        gossip_sim *sim = gossip_sim_new(&cfg, &L, &t, err, sizeof err);
        if (!sim) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        int iters = 20;
        double prep = 0, mix = 0;
        uint64_t bytes = 0;
        for (int it = 0; it < iters; it++) {
            for (int i = 0; i < n; i++) /* a fake local step */
                for (size_t k = 0; k < L.numel; k += 7)
                    x[i][k] += 1e-3f * (float)((k * 2654435761u + (unsigned)it) % 1000) / 1000.0f;
            if (gossip_sim_step(sim, x, (uint64_t)it, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            if (it >= 2) /* after warm-up */
                for (int i = 0; i < n; i++) {
                    gossip_stats st;
                    gossip_node_stats(gossip_sim_node(sim, i), &st);
                    prep += st.prepare_s;
                    mix += st.mix_s;
                    bytes += st.iter_bytes_sent;
                }
        }
        double per = (double)(iters - 2) * n;
        size_t msg = (size_t)(bytes / per);
        if (ri == 0)
            f32_bytes = msg;
        printf("%-12s %-16s %12zu %10.4f %10.3f %12.3f\n", gossip_algo_name(runs[ri].a), runs[ri].c, msg,
               (double)msg / f32_bytes, prep / per * 1e3, mix / per * 1e3);
        gossip_sim_destroy(&sim);
    }
    for (int i = 0; i < n; i++)
        free(x[i]);
    free(x);
    free(m.w);
    nn_arena_free(&L);
    return 0;
}
