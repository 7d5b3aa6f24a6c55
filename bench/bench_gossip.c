/* bench_gossip — gossip costs on a ResNet-20-sized layout (~272k values in
 * 65 tensors): ms per prepare (compress + encode + own decode) and per mix
 * per node, and bytes per message, for several algorithm/compressor pairs
 * on an 8-node directed ring (in-process simulator).  Then the lossless
 * pass (+deflate) per compressor on real-ish values: ResNet-20's He-normal
 * initialisation shared by all nodes (EvoNorm gamma = v = 1, beta = 0),
 * then SGD-like local steps; node 0's messages, deflated at zlib levels 1,
 * 6 (what +deflate uses) and 9.  No pass/fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_codec.h"
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

/* Real-ish parameters: He-normal (fan_out) convolutions, uniform linear
 * layers (PyTorch's default bound 1/sqrt(fan_in)), EvoNorm gamma = v = 1,
 * beta = 0.  std[view] gets a per-tensor scale for the fake gradients. */
static void s_init_params(const nn_arena *L, float *x, float *std, nn_rng *r)
{
    for (size_t v = 0; v < L->nviews; v++) {
        const nn_view *view = &L->views[v];
        float *p = x + view->offset;
        const char *dot = strrchr(view->name, '.');
        const char *kind = dot ? dot + 1 : view->name;
        float sd = 0.0f;
        if (view->ndim == 4) { /* conv: He normal, fan_out = oc * k * k */
            sd = sqrtf(2.0f / (float)(view->shape[0] * view->shape[2] * view->shape[3]));
            for (size_t i = 0; i < view->numel; i++)
                p[i] = sd * nn_rng_normal(r);
        } else if (view->ndim == 2 || !strcmp(view->name, "fc.bias")) {
            sd = 1.0f / 8.0f; /* 1/sqrt(64) */
            for (size_t i = 0; i < view->numel; i++)
                p[i] = sd * (2.0f * nn_rng_uniform(r) - 1.0f);
        } else {
            sd = 0.05f;
            float c = !strcmp(kind, "beta") ? 0.0f : 1.0f;
            for (size_t i = 0; i < view->numel; i++)
                p[i] = c;
        }
        std[v] = sd;
    }
}

/* The lossless pass per compressor (choco, eta 0.01 as with top-1%; eta 1
 * for dense compressors as the reference default). */
static int s_deflate_table(const nn_arena *L, const topo *t)
{
    static const char *specs[] = { "identity", "q8", "qsgd:16", "topk:0.01", "topk:0.01+q8",
                                   "randk:0.01+q8", "dgc:0.01", "dgc:0.01+q8", "topk:0.1+q8",
                                   "dgc:0.001+q8" };
    enum { ITERS = 12, WARM = 2 };
    static const int levels[3] = { 1, 6, 9 };
    int n = t->n;
    size_t d = L->numel;
    float *std = calloc(L->nviews, sizeof *std);
    float **x = calloc((size_t)n, sizeof *x);
    for (int i = 0; i < n; i++)
        x[i] = nn_xalloc_aligned(d * sizeof(float));
    printf("\nlossless pass (+deflate = zlib level 6, raw deflate), choco, real-ish values "
           "(ResNet-20 init + SGD-like steps), node 0, %d messages each:\n", ITERS - WARM);
    printf("%-15s %10s %10s %7s %10s %10s %8s %8s %8s\n", "compressor", "plain B", "+deflate B",
           "saved", "level 1 B", "level 9 B", "ms L1", "ms L6", "ms L9");
    gossip_buf copy = { 0 };
    gossip_deflater dz = { 0 };
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        gossip_config cfg;
        gossip_config_default(&cfg);
        cfg.algo = GOSSIP_CHOCO;
        snprintf(cfg.compressor, sizeof cfg.compressor, "%s", specs[si]);
        cfg.eta = (strchr(specs[si], ':') && strncmp(specs[si], "qsgd", 4)) ? 0.01 : 1.0;
        char err[256];
        gossip_sim *sim = gossip_sim_new(&cfg, L, t, err, sizeof err);
        if (!sim) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        nn_rng r, gr;
        nn_rng_seed(&r, 7); /* the same initial weights on every node */
        s_init_params(L, x[0], std, &r);
        for (int i = 1; i < n; i++)
            memcpy(x[i], x[0], d * sizeof(float));
        nn_rng_seed(&gr, 8);
        double plain = 0, zb[3] = { 0 }, zt[3] = { 0 };
        for (int it = 0; it < ITERS; it++) {
            for (int i = 0; i < n; i++) /* x -= lr * g, g ~ N(0, (0.5 std)^2) per tensor */
                for (size_t v = 0; v < L->nviews; v++) {
                    const nn_view *view = &L->views[v];
                    for (size_t k = 0; k < view->numel; k++)
                        x[i][view->offset + k] -= 0.05f * 0.5f * std[v] * nn_rng_normal(&gr);
                }
            gossip_node *g0 = gossip_sim_node(sim, 0);
            for (int i = 0; i < n; i++)
                if (gossip_node_prepare(gossip_sim_node(sim, i), x[i], (uint64_t)it, err, sizeof err) < 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
            const uint8_t *msg;
            size_t len = gossip_node_outbox(g0, 0, NULL, &msg);
            if (it >= WARM) {
                plain += (double)len;
                for (int l = 0; l < 3; l++) {
                    gossip_buf_set(&copy, msg, len);
                    double t0 = nn_now();
                    zb[l] += (double)gossip_msg_deflate(&copy, &dz, levels[l]);
                    zt[l] += nn_now() - t0;
                }
            }
            for (int i = 0; i < n; i++) {
                int to;
                gossip_node *g = gossip_sim_node(sim, i);
                for (int k = 0; (len = gossip_node_outbox(g, k, &to, &msg)) > 0; k++)
                    if (gossip_node_receive(gossip_sim_node(sim, to), msg, len, err, sizeof err) < 0) {
                        fprintf(stderr, "%s\n", err);
                        return 1;
                    }
            }
            for (int i = 0; i < n; i++)
                if (gossip_node_mix(gossip_sim_node(sim, i), x[i], (uint64_t)it, err, sizeof err) < 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
        }
        double m = ITERS - WARM;
        printf("%-15s %10.0f %10.0f %6.1f%% %10.0f %10.0f %8.2f %8.2f %8.2f\n", specs[si], plain / m, zb[1] / m,
               100.0 * (1.0 - zb[1] / plain), zb[0] / m, zb[2] / m, zt[0] / m * 1e3, zt[1] / m * 1e3,
               zt[2] / m * 1e3);
        gossip_sim_destroy(&sim);
    }
    gossip_buf_free(&copy);
    gossip_deflater_free(&dz);
    for (int i = 0; i < n; i++)
        free(x[i]);
    free(x);
    free(std);
    return 0;
}

int main(void)
{
    nn_arena L;
    s_resnet20_layout(&L);
    int n = 8;
    char terr[256];
    topo *tp = topo_generate("directed_ring", n, 0, 0, terr, sizeof terr);
    if (!tp) {
        fprintf(stderr, "%s\n", terr);
        return 1;
    }
    printf("layout: %zu values in %zu tensors (ResNet-20 shapes), 8-node directed ring\n", L.numel, L.nviews);
    printf("%-12s %-24s %12s %10s %10s %12s\n", "algo", "compressor", "bytes/msg", "x f32", "prep ms", "mix ms");
    static const struct { gossip_algo a; const char *c; } runs[] = {
        { GOSSIP_DPSGD, "identity" }, { GOSSIP_DPSGD, "q8" },
        { GOSSIP_CHOCO, "topk:0.01+q8" }, { GOSSIP_CHOCO, "topk:0.01" },
        { GOSSIP_CHOCO, "q8" }, { GOSSIP_DEEPSQUEEZE, "topk:0.01+q8" },
        { GOSSIP_CHOCO, "randk:0.01+q8" }, { GOSSIP_CHOCO, "qsgd:16" },
        { GOSSIP_CHOCO, "dgc:0.01+q8" }, { GOSSIP_CHOCO, "topk:0.01+q8+deflate" },
        { GOSSIP_CHOCO, "dgc:0.01+q8+deflate" }, { GOSSIP_DPSGD, "q8+deflate" },
        { GOSSIP_DEEPSQUEEZE, "topk:0.01,rdecay=0.9+q8" },
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
        gossip_sim *sim = gossip_sim_new(&cfg, &L, tp, err, sizeof err);
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
        printf("%-12s %-24s %12zu %10.4f %10.3f %12.3f\n", gossip_algo_name(runs[ri].a), runs[ri].c, msg,
               (double)msg / f32_bytes, prep / per * 1e3, mix / per * 1e3);
        gossip_sim_destroy(&sim);
    }
    for (int i = 0; i < n; i++)
        free(x[i]);
    free(x);
    int rc = s_deflate_table(&L, tp);
    topo_destroy(&tp);
    nn_arena_free(&L);
    return rc;
}
