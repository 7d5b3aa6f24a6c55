/* node_cmd_simulate — `lpgossip simulate`: a whole decentralized run in one
 * process.  Every rank of the topology gets its own model, optimiser and
 * data shard (the skew partition, docs/design.md §7); the run loop is node_run's,
 * with gossip rounds through the in-process transport (gossip_sim), which
 * runs exactly the gossip code the ZeroMQ node runs, messages going through
 * the encoder and the validating decoder.
 *
 * Reports, at every evaluation: the test accuracy of the average of all
 * node models (the paper's metric), the mean of per-node accuracies, the
 * consensus distance and bytes sent per node.  --out DIR: every rank's
 * model; --save FILE: the average model.  --join R@T: rank R is absent
 * (gossip_sim_absent) for the rounds before iteration T, then joins with
 * an in-neighbour's model (gossip_sim_join) and model buffers (the
 * 8-bit activation ranges, as `node` transfers them) and zero momentum; while
 * absent it still takes its local steps (discarded at the join), and its
 * model is in the reported averages.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gossip/gossip_sim.h"
#include "gossip/gossip_state.h"
#include "node/node_cmds.h"
#include "node/node_modelio.h"
#include "node/node_run.h"
#include "topology/topo.h"

/* ---- the run loop's operations (node_round_ops) ------------------------ */

/* Their context: the sim and the --join drill. */
typedef struct {
    gossip_sim *sim;
    node_ranks *k;
    long        rank;     /* joining rank, -1: none */
    uint64_t    at;       /* the round it joins at */
    int         state;    /* 0 not yet absent, 1 absent, 2 joined */
} s_sim_round;

static void s_log(void *ctx, const char *msg)
{
    (void)ctx; /* the loop names the node in msg */
    fprintf(stderr, "lpgossip simulate: %s\n", msg);
}

/* Adds the seconds every node spent in gossip_node_prepare and
 * gossip_node_mix in the last round to tm (the in-process transport has no
 * wait of its own). */
static void s_round_times(gossip_sim *sim, node_times *tm)
{
    for (int i = 0; i < gossip_sim_n(sim); i++) {
        gossip_stats gs;
        gossip_node_stats(gossip_sim_node(sim, i), &gs);
        tm->compress += gs.prepare_s;
        tm->mix += gs.mix_s;
    }
}

static int s_round(void *ctx, float **x, uint64_t r, node_times *tm, char *err, size_t errlen)
{
    s_sim_round *sr = ctx;
    if (sr->rank >= 0 && sr->state == 0) {
        gossip_sim_absent(sr->sim, (int)sr->rank);
        sr->state = 1;
    }
    if (sr->state == 1 && r >= sr->at) {
        int h;
        if (gossip_sim_join(sr->sim, (int)sr->rank, x, r, GOSSIP_STATE_CHUNK_MAX, &h, err,
                            errlen) != 0)
            return -1;
        nn_sgd *sgd = &sr->k->tr[sr->rank].sgd;
        if (sgd->mom.data)
            memset(sgd->mom.data, 0, sizeof *sgd->mom.data * sgd->mom.numel);
        if (sgd->prev.data) /* --qgm: x_T */
            memcpy(sgd->prev.data, x[sr->rank], sizeof *sgd->prev.data * sgd->prev.numel);
        nn_arena *bh = nn_model_buffers(sr->k->tr[h].model);
        nn_arena *br = nn_model_buffers(sr->k->tr[sr->rank].model);
        if (bh && br && bh->nviews && br->data) /* the 8-bit activation ranges, as `node` */
            memcpy(br->data, bh->data, sizeof *br->data * br->numel);
        sr->state = 2;
        fprintf(stderr, "lpgossip simulate: node %ld joined at round %llu with the model of "
                "node %d\n", sr->rank, (unsigned long long)r, h);
    }
    if (gossip_sim_step(sr->sim, x, r, err, errlen) != 0)
        return -1;
    s_round_times(sr->sim, tm);
    return 0;
}

static void s_report(void *ctx, const node_run *r, node_metrics *m)
{
    gossip_sim *sim = ((s_sim_round *)ctx)->sim;
    m->gossip_bytes_sent = (double)gossip_sim_bytes_sent(sim) / r->n;
    char node_col[32] = "", avg[32] = "not evaluated";
    if (isfinite(m->mean_node_acc))
        snprintf(node_col, sizeof node_col, "  mean-node %.2f%%", 100 * m->mean_node_acc);
    if (m->evaluated)
        snprintf(avg, sizeof avg, "%.2f%%", 100 * m->test_acc);
    printf("iter %llu (epoch %.2f)  loss %.4f  avg-model %s%s  consensus %.3g  "
           "sent/node %.2f MB  %.0fs\n", (unsigned long long)m->iter, m->epoch, m->loss, avg,
           node_col, m->consensus, m->gossip_bytes_sent / 1e6, m->seconds);
    fflush(stdout);
}

static void s_banner(const node_opts *o, const node_ranks *k, const gossip_config *gc)
{
    const node_train_opts *t = &o->t;
    char part[64]; /* the partition of the data */
    if (t->mo.dirichlet > 0)
        snprintf(part, sizeof part, "partition dirichlet:%g", t->mo.dirichlet);
    else
        snprintf(part, sizeof part, "skew %g", o->g.skew);
    printf("simulate: %d nodes (%s), %s, compress %s, eta %g, push-sum %s, staleness %d, "
           "delays %s, %s; %s (%zu "
           "parameters) on %s, %zu samples per node, %ld epochs x %ld iterations, a gossip "
           "round every %ld\n",
           k->nodes, o->g.topology, gossip_algo_name(gc->algo), gc->compressor, gc->eta,
           gc->push_sum ? "on" : "off", gc->staleness, o->g.delays, part, node_model_label(&t->mo),
           nn_model_params(k->tr[0].model)->numel, k->d.train.name, k->count[0], t->epochs,
           k->steps, o->g.gossip_every);
    fflush(stdout);
}

/* --delays slow:R:F: the slow rank skips its local step on the rounds it
 * does not step (gossip_sim_steps); every other rank always steps. */
static int s_skip(void *ctx, const node_run *r, int i)
{
    return !gossip_sim_steps(((s_sim_round *)ctx)->sim, i, r->it);
}

static const node_round_ops s_ops = {.round = s_round, .skip = s_skip, .log = s_log,
                                     .report = s_report};

/* DIR/model-RANK.safetensors for every rank, and the average model. */
static int s_save(const node_opts *o, const node_ranks *k, nn_model *avg, char *err,
                  size_t errlen)
{
    const char *dir = o->g.out;
    if (dir[0] && mkdir(dir, 0755) != 0 && errno != EEXIST)
        return nn_errf(err, errlen, "cannot create --out %s: %s", dir, strerror(errno));
    for (int i = 0; dir[0] && i < k->k; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/model-%d.safetensors", dir, i);
        if (node_model_save_data(path, k->tr[i].model, &o->t.mo, &k->d, err, errlen) != 0)
            return -1;
    }
    if (dir[0])
        printf("saved %d models in %s\n", k->k, dir);
    if (o->t.save[0] &&
        node_model_save_data(o->t.save, avg, &o->t.mo, &k->d, err, errlen) != 0)
        return -1;
    if (o->t.save[0])
        printf("saved the average model in %s\n", o->t.save);
    return 0;
}

/* The run on a loaded topology; 0, or -1 with a message (*usage: a bad
 * configuration rather than a runtime failure). */
static int s_run(const node_opts *o, const topo *t, FILE *mf, int *usage, char *err,
                 size_t errlen)
{
    const node_train_opts *to = &o->t;
    node_ranks k;
    gossip_sim *sim = NULL;
    nn_model *avg = NULL;
    int rc = -1;
    if (node_ranks_init(&k, to, t->n, o->g.skew, 0, t->n, err, errlen) != 0) {
        *usage = node_model_file_error(&to->mo, err); /* the model file does not fit */
        goto done;
    }
    gossip_config gc = o->g.gc;
    const uint64_t H = (uint64_t)o->g.gossip_every; /* local steps per gossip round */
    gc.iters_per_epoch = (uint64_t)k.steps / H ? (uint64_t)k.steps / H : 1; /* dgc warm-up */
    sim = gossip_sim_new(&gc, nn_model_params(k.tr[0].model), t, err, errlen);
    gossip_delays dl;
    if (!sim || gossip_delays_parse(o->g.delays, gc.staleness, &dl, err, errlen) != 0 ||
        gossip_sim_set_delays(sim, &dl, (uint64_t)to->seed, err, errlen) != 0) {
        *usage = 1;
        goto done;
    }
    avg = node_model_build(&to->mo, k.d.in_c, k.d.in_h, k.d.in_w, k.d.train.classes, err, errlen);
    if (!avg)
        goto done;
    nn_model_prepare(avg, (int)to->batch);
    gossip_node **g = nn_xcalloc((size_t)t->n, sizeof *g);
    for (int i = 0; i < t->n; i++)
        g[i] = gossip_sim_node(sim, i);
    s_banner(o, &k, &gc);
    long en = o->g.eval_nodes;
    s_sim_round sr = {sim, &k, o->g.join_rank, 0, 0};
    uint64_t iters = (uint64_t)k.steps * (uint64_t)to->epochs;
    if (sr.rank >= t->n || (sr.rank >= 0 && (uint64_t)o->g.join_at >= iters)) {
        *usage = 1;
        nn_errf(err, errlen, "--join %ld@%ld: %s has %d nodes and the run %llu iterations",
                o->g.join_rank, o->g.join_at, o->g.topology, t->n, (unsigned long long)iters);
        free(g);
        goto done;
    }
    sr.at = ((uint64_t)o->g.join_at + H - 1) / H; /* the first round at or after T */
    node_run r = {.n = t->n, .tr = k.tr, .x = k.x, .g = g, .d = &k.d, .o = to, .steps = k.steps,
                  .H = H, .iters = (uint64_t)k.steps * (uint64_t)to->epochs,
                  .eval_nodes = en < 0 || en > t->n ? t->n : en, .avg = avg,
                  .ops = &s_ops, .ctx = &sr, .metrics = mf};
    r.meta = (node_metrics){.command = "simulate", .rank = -1, .nodes = t->n,
                            .model = node_model_label(&to->mo),
                            .precision = node_precision_name(to->mo.precision), .gossip = 1,
                            .algo = gossip_algo_name(gc.algo), .compress = gc.compressor,
                            .eta = gc.eta, .skew = o->g.skew, .sim = 1,
                            .staleness = gc.staleness};
    if (node_run_loop(&r, err, errlen) == 0 && s_save(o, &k, avg, err, errlen) == 0)
        rc = 0;
    free(g);
done:
    nn_model_destroy(&avg);
    gossip_sim_destroy(&sim);
    node_ranks_free(&k);
    return rc;
}

static int s_simulate(const node_opts *o)
{
    char err[1024];
    node_set_threads((int)o->t.threads);
    topo *t = topo_load(o->g.topology, err, sizeof err);
    if (!t) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        return 2;
    }
    int rc = 1, usage = 0;
    FILE *mf = NULL;
    if (o->t.metrics[0] && !(mf = fopen(o->t.metrics, "a")))
        fprintf(stderr, "lpgossip simulate: cannot open --metrics %s: %s\n", o->t.metrics,
                strerror(errno));
    else if (s_run(o, t, mf, &usage, err, sizeof err) != 0)
        fprintf(stderr, "lpgossip simulate: %s\n", err);
    else
        rc = 0;
    if (mf)
        fclose(mf);
    topo_destroy(&t);
    return usage ? 2 : rc;
}

int node_cmd_simulate(int argc, char **argv)
{
    return node_opts_main(NODE_CMD_SIMULATE, argc, argv, s_simulate);
}
