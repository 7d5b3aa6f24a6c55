/* node_cmd_simulate — `lpgossip simulate`: a whole decentralized run in one
 * process.  Every rank of the topology gets its own model, optimiser and
 * data shard (the skew partition, DESIGN §7); after every local step the
 * in-process transport (gossip_sim) runs exactly the gossip code the ZeroMQ
 * node runs, messages going through the encoder and the validating decoder.
 *
 * Reports, at every evaluation: the test accuracy of the average of all
 * node models (the paper's metric), the mean of per-node accuracies, the
 * consensus distance and bytes sent per node.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gossip/gossip_sim.h"
#include "node/node_cmds.h"
#include "node/node_trainer.h"
#include "topology/topo.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip simulate --topology FILE [options]\n"
"Runs every node of a topology in this one process (deterministic), with the\n"
"same gossip code and wire format as `lpgossip node`.\n\n"
"simulate:\n"
"  --topology FILE     topology YAML (see docs/topology.md)       (required)\n"
"  --eval-nodes K      evaluate only the first K node models for the mean\n"
"                      node accuracy (the average model is always evaluated)\n"
"  (--out DIR writes DIR/model-RANK.safetensors at the end)\n\n");
    node_gossip_usage(f);
    node_train_usage(f);
    fprintf(f, "  -h, --help\n");
}

enum { S_TOPO = 1000, S_ENODES };

/* Mean of the ranks' de-biased models into dst; returns the consensus
 * distance mean_i ||z_i - zbar||^2 / d. */
static double s_average(float *dst, float **z, int n, size_t d)
{
    double dist = 0;
    for (size_t k = 0; k < d; k++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += z[i][k];
        double mean = s / n;
        dst[k] = (float)mean;
        for (int i = 0; i < n; i++)
            dist += ((double)z[i][k] - mean) * ((double)z[i][k] - mean);
    }
    return dist / (double)n / (double)d;
}

int node_cmd_simulate(int argc, char **argv)
{
    static const struct option own[] = {
        {"topology", required_argument, 0, S_TOPO},
        {"eval-nodes", required_argument, 0, S_ENODES},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    node_train_opts o;
    node_train_opts_defaults(&o);
    node_gossip_opts go;
    node_gossip_opts_defaults(&go);
    const char *topo_path = NULL;
    long eval_nodes = -1;
    char err[1024] = "";
    struct option *mine = node_options_concat(node_gossip_options, own);
    struct option *opts = node_options_join(mine);
    free(mine);
    int c, bad = 0;
    optind = 1;
    while (!bad && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = node_train_opt(&o, c, optarg, err, sizeof err);
        if (r == 0)
            r = node_gossip_opt(&go, c, optarg, err, sizeof err);
        if (r < 0) {
            bad = 2;
            break;
        }
        if (r > 0)
            continue;
        switch (c) {
        case S_TOPO: topo_path = optarg; break;
        case S_ENODES:
            bad = node_parse_int("--eval-nodes", optarg, 0, 1 << 20, &eval_nodes, err, sizeof err)
                      ? 2 : 0;
            break;
        case 'h': free(opts); s_usage(stdout); return 0;
        default: free(opts); s_usage(stderr); return 2;
        }
    }
    free(opts);
    if (bad) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        return 2;
    }
    if (!topo_path || optind < argc) {
        fprintf(stderr, "lpgossip simulate: %s\n",
                topo_path ? "unexpected argument (see --help)" : "--topology FILE is required");
        return 2;
    }
    node_train_opts_finish(&o);
    node_gossip_opts_finish(&go, &o);
    gossip_config gc = go.gc;
    const double skew = go.skew;
    const char *out_dir = go.out[0] ? go.out : NULL;
    long eval_every = go.eval_every;
    const uint64_t H = (uint64_t)go.gossip_every; /* local steps per gossip round */
    node_set_threads((int)o.threads);

    int rc = 1, n = 0;
    topo *t = topo_load(topo_path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        return 2;
    }
    n = t->n;
    node_data d;
    memset(&d, 0, sizeof d);
    node_trainer *tr = nn_xcalloc((size_t)n, sizeof *tr);
    float **x = nn_xcalloc((size_t)n, sizeof *x), **z = nn_xcalloc((size_t)n, sizeof *z);
    uint32_t **shard = nn_xcalloc((size_t)n, sizeof *shard);
    size_t *count = nn_xcalloc((size_t)n, sizeof *count);
    gossip_sim *sim = NULL;
    nn_model *avg = NULL;
    FILE *mf = NULL;
    int have_shards = 0;
    if (node_data_load(&o.mo, &d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        goto done;
    }
    if (node_shards_make(&o, &d, n, skew, shard, count, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        goto done;
    }
    have_shards = 1;
    for (int i = 0; i < n; i++)
        if (node_trainer_init(&tr[i], &o, &d, shard[i], count[i], i, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip simulate: %s\n", err);
            goto done;
        }
    nn_arena *layout = nn_model_params(tr[0].model);
    size_t dim = layout->numel;
    for (int i = 0; i < n; i++) {
        x[i] = nn_xalloc_aligned(dim * sizeof(float));
        memcpy(x[i], nn_model_params(tr[i].model)->data, dim * sizeof(float));
        z[i] = nn_model_params(tr[i].model)->data;
    }
    /* dgc warm-up: gossip rounds per epoch */
    gc.iters_per_epoch = (uint64_t)tr[0].steps_per_epoch / H ? (uint64_t)tr[0].steps_per_epoch / H : 1;
    sim = gossip_sim_new(&gc, layout, t, err, sizeof err);
    if (!sim) {
        fprintf(stderr, "lpgossip simulate: %s\n", err);
        rc = 2;
        goto done;
    }
    avg = node_model_build(&o.mo, d.in_c, d.in_h, d.in_w, d.train.classes, err, sizeof err);
    nn_model_prepare(avg, (int)o.batch);
    if (o.metrics[0] && !(mf = fopen(o.metrics, "a"))) {
        fprintf(stderr, "lpgossip simulate: cannot open --metrics %s: %s\n", o.metrics,
                strerror(errno));
        goto done;
    }
    long steps = tr[0].steps_per_epoch;
    uint64_t iters = (uint64_t)(steps * o.epochs);
    if (eval_every <= 0)
        eval_every = steps;
    if (eval_nodes < 0 || eval_nodes > n)
        eval_nodes = n;
    printf("simulate: %d nodes (%s), %s, compress %s, eta %g, push-sum %s, skew %g; %s (%zu "
           "parameters) on %s, %zu samples per node, %ld epochs x %ld iterations, a gossip "
           "round every %llu\n",
           n, topo_path, gossip_algo_name(gc.algo), gc.compressor, gc.eta,
           gc.push_sum ? "on" : "off", skew, o.mo.model, dim, d.train.name, count[0], o.epochs,
           steps, (unsigned long long)H);
    fflush(stdout);
    double t0 = nn_now(), t_compute = 0, t_gossip = 0;
    for (uint64_t it = 0; it < iters; it++) {
        float lr = node_lr_at_iter(&o, it, steps);
        double a = nn_now();
        for (int i = 0; i < n; i++) {
            float loss = node_gossip_local_step(&tr[i], &d, gossip_sim_node(sim, i), x[i], lr);
            if (!isfinite(loss)) {
                fprintf(stderr, "lpgossip simulate: node %d: loss is %f at iteration %llu "
                        "(lr %g): training diverged; try a smaller --lr or --eta\n", i, loss,
                        (unsigned long long)it, lr);
                goto done;
            }
        }
        double b = nn_now();
        if ((it + 1) % H == 0 && gossip_sim_step(sim, x, (it + 1) / H - 1, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip simulate: iteration %llu: %s\n", (unsigned long long)it,
                    err);
            goto done;
        }
        for (int i = 0; i < n; i++)
            nn_sgd_after_mix(&tr[i].sgd, x[i]);
        t_compute += b - a;
        t_gossip += nn_now() - b;
        if ((it + 1) % (uint64_t)eval_every != 0 && it + 1 != iters)
            continue;
        /* Evaluate: de-biased models, their average, and each node. */
        for (int i = 0; i < n; i++)
            gossip_node_debias(gossip_sim_node(sim, i), x[i], z[i]);
        double consensus = s_average(nn_model_params(avg)->data, z, n, dim);
        /* Buffers too (BatchNorm statistics, 8-bit activation ranges). */
        nn_arena *ab = nn_model_buffers(avg);
        for (size_t k = 0; k < ab->numel; k++) {
            double sum = 0;
            for (int i = 0; i < n; i++)
                sum += nn_model_buffers(tr[i].model)->data[k];
            ab->data[k] = (float)(sum / n);
        }
        double avg_loss, avg_acc = node_evaluate(avg, &d, &d.test, (int)o.batch, &avg_loss);
        double node_acc = 0, train_loss = 0;
        size_t seen = 0;
        for (int i = 0; i < n; i++) {
            train_loss += tr[i].loss_sum;
            seen += tr[i].seen;
            node_trainer_reset_stats(&tr[i]);
        }
        for (int i = 0; i < eval_nodes; i++)
            node_acc += node_evaluate(tr[i].model, &d, &d.test, (int)o.batch, NULL);
        node_acc = eval_nodes ? node_acc / (double)eval_nodes : NAN;
        uint64_t sent = gossip_sim_bytes_sent(sim);
        double per_node = (double)sent / n, secs = nn_now() - t0;
        char node_col[32] = "";
        if (eval_nodes)
            snprintf(node_col, sizeof node_col, "  mean-node %.2f%%", 100 * node_acc);
        printf("iter %llu (epoch %.2f)  loss %.4f  avg-model %.2f%%%s  "
               "consensus %.3g  sent/node %.2f MB  %.0fs\n", (unsigned long long)(it + 1),
               (double)(it + 1) / (double)steps, seen ? train_loss / (double)seen : NAN,
               100 * avg_acc, node_col, consensus, per_node / 1e6, secs);
        fflush(stdout);
        if (mf) {
            char node_json[32];
            snprintf(node_json, sizeof node_json, "%.6f", node_acc);
            fprintf(mf, "{\"iter\":%llu,\"epoch\":%.4f,\"loss\":%.6f,\"avg_model_acc\":%.6f,"
                    "\"avg_model_loss\":%.6f,\"mean_node_acc\":%s,\"consensus\":%.6g,"
                    "\"bytes_sent_per_node\":%.0f,\"seconds\":%.3f,\"seconds_compute\":%.3f,"
                    "\"seconds_gossip\":%.3f,\"nodes\":%d,\"algo\":\"%s\",\"compress\":\"%s\","
                    "\"eta\":%g,\"skew\":%g,\"model\":\"%s\",\"precision\":\"%s\"}\n",
                    (unsigned long long)(it + 1), (double)(it + 1) / (double)steps,
                    seen ? train_loss / (double)seen : 0.0, avg_acc, avg_loss,
                    eval_nodes ? node_json : "null", consensus, per_node, secs, t_compute, t_gossip,
                    n, gossip_algo_name(gc.algo), gc.compressor, gc.eta, skew, o.mo.model,
                    o.mo.precision);
            fflush(mf);
        }
    }
    if (out_dir) {
        mkdir(out_dir, 0755);
        for (int i = 0; i < n; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/model-%d.safetensors", out_dir, i);
            if (node_model_save(path, tr[i].model, &o.mo, err, sizeof err) != 0) {
                fprintf(stderr, "lpgossip simulate: %s\n", err);
                goto done;
            }
        }
        printf("saved %d models in %s\n", n, out_dir);
    }
    rc = 0;
done:
    if (mf)
        fclose(mf);
    for (int i = 0; i < n; i++) {
        node_trainer_free(&tr[i]);
        free(x[i]);
    }
    if (have_shards)
        for (int i = 0; i < n; i++)
            free(shard[i]);
    free(shard);
    free(count);
    free(tr);
    free(x);
    free(z);
    nn_model_destroy(&avg);
    gossip_sim_destroy(&sim);
    node_data_free(&d);
    topo_destroy(&t);
    return rc;
}
