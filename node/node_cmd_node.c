/* node_cmd_node — `lpgossip node`: one rank of a decentralized run as its
 * own OS process, gossiping over ZeroMQ (gossip_net) with the very same
 * algorithm object (gossip_node) and training code (node_trainer) as
 * `lpgossip simulate`, so both produce the same trajectory: same skew
 * partition and shard (node_shards_make), same initial weights (--seed),
 * same per-rank sampler seed, same learning rate per iteration (iterations
 * per epoch from shard 0, as simulate), same order of operations.
 *
 * The protocol with the neighbours (start barrier or rejoin, liveness and
 * dead peers, resync, flow control, BYE) is gossip_link's; docs/node.md
 * describes it for users.  SIGINT/SIGTERM: finish the current iteration,
 * save (model and, with --out, the checkpoint), say BYE, exit 1 (a second
 * signal aborts the wait).  A step whose loss or gradient is not finite is
 * skipped (the model does not change and nothing non-finite is sent); 20 in
 * a row end the run.
 * Checkpoints (node_ckpt.h): --out DIR/ckpt-RANK.safetensors every
 * --checkpoint-every iterations (default once per epoch) and on a signal;
 * --resume loads it and rejoins the run (gossip_link_start).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_link.h"
#include "gossip/gossip_net.h"
#include "gossip/gossip_node.h"
#include "node/node_cert.h"
#include "node/node_ckpt.h"
#include "node/node_cmds.h"
#include "node/node_lock.h"
#include "node/node_trainer.h"
#include "topology/topo.h"

#define S_MAX_SKIPPED 20    /* non-finite steps in a row that end the run */

static volatile sig_atomic_t s_signals = 0;
static volatile sig_atomic_t s_last_signal = 0;

static void s_on_signal(int sig)
{
    s_last_signal = sig;
    s_signals = s_signals + 1;
}

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip node --topology FILE [--rank R] [options]\n"
"Runs one node (rank R) of a decentralized run as this process, gossiping\n"
"with its neighbours over ZeroMQ.  Start one process per node of the\n"
"topology; all must get the same flags except --rank/--bind/--peer.\n\n"
"node:\n"
"  --topology FILE     topology YAML with endpoints (docs/topology.md) (required)\n"
"  --rank R            this node's rank; default from LPGOSSIP_RANK, SLURM_PROCID,\n"
"                      OMPI_COMM_WORLD_RANK or PMI_RANK\n"
"  --cert FILE         this node's CURVE certificate (lpgossip keygen), required\n"
"                      when the topology says `security: curve`\n"
"  --bind ENDPOINT     bind the receiving socket here (e.g. tcp://*:5555)\n"
"                      instead of this node's endpoint in the topology\n"
"  --peer ID=ENDPOINT  endpoint of node ID (overrides the topology; repeatable)\n"
"  --timeout S         bound on every wait (start, each iteration, end) and on a\n"
"                      silent neighbour [60]\n"
"  --no-eval           no test-set evaluation (metrics still written at the end)\n"
"  --no-gossip         local SGD only, no communication (for timing)\n"
"  --checkpoint-every N  write --out DIR/ckpt-RANK.safetensors every N iterations\n"
"                      (atomic; default: once per epoch; 0: only on SIGINT/SIGTERM)\n"
"  --resume            continue from --out DIR/ckpt-RANK.safetensors and rejoin the\n"
"                      run (at the neighbours' iteration, re-syncing public copies)\n"
"  --peer-timeout S    a silent neighbour is declared down after at least S s [5]\n"
"  --peer-timeout-factor F  ... or after F times its observed message period [20]\n"
"                      (never later than --timeout); it is then left out of the\n"
"                      mixing and the run goes on; it comes back when it speaks again\n"
"  --fail-on-peer-loss end the run instead when a neighbour is lost\n"
"  --debug-drop P      fault injection: drop a fraction P of the outgoing gossip\n"
"                      messages (exercises the resync protocol)\n"
"  --debug-nan-at T    fault injection: a NaN in the input of iteration T's batch\n"
"                      (exercises the non-finite step guard)\n\n");
    node_gossip_usage(f);
    fprintf(f, "\n");
    node_train_usage(f);
    fprintf(f, "  -h, --help\n\n"
"Files in --out DIR: model-RANK.safetensors (the de-biased model z),\n"
"metrics-RANK.jsonl (one JSON object per evaluation), log-RANK.txt.\n");
}

enum { N_CKPT_EVERY = 3100, N_RESUME, N_PEER_FLOOR, N_PEER_FACTOR, N_FAIL_LOSS, N_DROP, N_CERT,
       N_NAN_AT };
enum { N_TOPO = 3000, N_RANK, N_BIND, N_PEER, N_TIMEOUT, N_NOEVAL, N_NOGOSSIP };

/* ---- run state ----------------------------------------------------------- */

typedef struct {
    int   rank;
    FILE *logf;
} s_run;

__attribute__((format(printf, 2, 3)))
static void s_log(s_run *r, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lpgossip node %d: %s\n", r->rank, msg);
    fflush(stderr);
    if (r->logf) {
        fprintf(r->logf, "%.3f %s\n", nn_now(), msg);
        fflush(r->logf);
    }
}

static void s_link_log(void *arg, const char *msg)
{
    s_log(arg, "%s", msg);
}

/* Evaluation tick: the neighbours keep hearing from us. */
static void s_tick(void *arg)
{
    if (arg)
        gossip_link_pump(arg, 0);
}

/* ---- the command ----------------------------------------------------- */

static int s_rank_from_env(long *rank, char *err, size_t errlen)
{
    static const char *const vars[] = {"LPGOSSIP_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                                       "PMI_RANK"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        const char *v = getenv(vars[k]);
        if (v && v[0])
            return node_parse_int(vars[k], v, 0, TOPO_MAX_NODES - 1, rank, err, errlen);
    }
    return nn_errf(err, errlen, "no --rank and none of LPGOSSIP_RANK, SLURM_PROCID, "
                   "OMPI_COMM_WORLD_RANK, PMI_RANK is set");
}

/* --peer ID=ENDPOINT: stored into the (owned) topology. */
static int s_apply_peer(topo *t, const char *spec, char *err, size_t errlen)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return nn_errf(err, errlen, "--peer '%s': expected ID=tcp://HOST:PORT", spec);
    char id[TOPO_ID_MAX];
    size_t idlen = (size_t)(eq - spec);
    if (idlen >= sizeof id)
        return nn_errf(err, errlen, "--peer '%s': id too long", spec);
    memcpy(id, spec, idlen);
    id[idlen] = '\0';
    int j = topo_find_node(t, id);
    if (j < 0)
        return nn_errf(err, errlen, "--peer '%s': no node '%s' in %s", spec, id, t->name);
    if (strlen(eq + 1) >= sizeof t->nodes[j].endpoint)
        return nn_errf(err, errlen, "--peer '%s': endpoint too long", spec);
    snprintf(t->nodes[j].endpoint, sizeof t->nodes[j].endpoint, "%s", eq + 1);
    return 0;
}

typedef struct {
    double compute, compress, wait, mix;
} s_times;

static void s_metrics(FILE *f, int rank, uint64_t iter, long steps, double loss, int evaluated,
                      double acc, double test_loss, const gossip_net *net, const gossip_node *g,
                      const gossip_link *link, uint64_t skipped, double secs, const s_times *tm)
{
    gossip_net_stats ns;
    gossip_stats gs;
    gossip_link_stats ls;
    memset(&ns, 0, sizeof ns);
    memset(&gs, 0, sizeof gs);
    memset(&ls, 0, sizeof ls);
    if (net)
        gossip_net_stats_get(net, &ns);
    if (link)
        gossip_link_stats_get(link, &ls);
    gossip_node_stats(g, &gs);
    char accbuf[64], lossbuf[64];
    snprintf(accbuf, sizeof accbuf, evaluated ? "%.6f" : "null", acc);
    snprintf(lossbuf, sizeof lossbuf, evaluated ? "%.6f" : "null", test_loss);
    fprintf(f, "{\"rank\":%d,\"iter\":%llu,\"epoch\":%.4f,\"loss\":%.6f,\"test_acc\":%s,"
            "\"test_loss\":%s,\"psi\":%.17g,\"bytes_sent\":%llu,\"bytes_recv\":%llu,"
            "\"msgs_sent\":%llu,\"msgs_recv\":%llu,\"gossip_bytes_sent\":%llu,"
            "\"gossip_bytes_recv\":%llu,\"gossip_msgs_sent\":%llu,\"rejected\":%llu,"
            "\"peers_down\":%llu,\"down_events\":%llu,\"back_events\":%llu,"
            "\"resyncs_sent\":%llu,\"resyncs_recv\":%llu,\"resync_bytes_sent\":%llu,"
            "\"skipped_steps\":%llu,"
            "\"seconds\":%.3f,\"seconds_compute\":%.3f,\"seconds_compress\":%.3f,"
            "\"seconds_wait\":%.3f,\"seconds_mix\":%.3f}\n",
            rank, (unsigned long long)iter, (double)iter / (double)steps, loss, accbuf, lossbuf,
            gossip_node_psi(g), (unsigned long long)ns.bytes_sent,
            (unsigned long long)ns.bytes_recv, (unsigned long long)ns.msgs_sent,
            (unsigned long long)ns.msgs_recv, (unsigned long long)gs.bytes_sent,
            (unsigned long long)gs.bytes_recv, (unsigned long long)gs.msgs_sent,
            (unsigned long long)(ns.rejected_identity + ns.rejected_frames + ns.rejected_size + ns.rejected_auth +
                                 ls.refused),
            (unsigned long long)ls.peers_down, (unsigned long long)ls.down_events,
            (unsigned long long)ls.back_events, (unsigned long long)gs.resyncs_sent,
            (unsigned long long)gs.resyncs_recv, (unsigned long long)ls.resync_bytes,
            (unsigned long long)skipped, secs, tm->compute, tm->compress, tm->wait, tm->mix);
    fflush(f);
}

int node_cmd_node(int argc, char **argv)
{
    static const struct option own[] = {
        {"topology", required_argument, 0, N_TOPO}, {"rank", required_argument, 0, N_RANK},
        {"bind", required_argument, 0, N_BIND},     {"peer", required_argument, 0, N_PEER},
        {"timeout", required_argument, 0, N_TIMEOUT}, {"no-eval", no_argument, 0, N_NOEVAL},
        {"no-gossip", no_argument, 0, N_NOGOSSIP},  {"help", no_argument, 0, 'h'},
        {"checkpoint-every", required_argument, 0, N_CKPT_EVERY},
        {"resume", no_argument, 0, N_RESUME},
        {"peer-timeout", required_argument, 0, N_PEER_FLOOR},
        {"peer-timeout-factor", required_argument, 0, N_PEER_FACTOR},
        {"fail-on-peer-loss", no_argument, 0, N_FAIL_LOSS},
        {"debug-drop", required_argument, 0, N_DROP},
        {"cert", required_argument, 0, N_CERT},
        {"debug-nan-at", required_argument, 0, N_NAN_AT},
        {0, 0, 0, 0},
    };
    node_train_opts o;
    node_train_opts_defaults(&o);
    node_gossip_opts go;
    node_gossip_opts_defaults(&go);
    gossip_link_config lc;
    gossip_link_config_default(&lc);
    const char *topo_path = NULL, *bind = NULL, *cert = NULL;
    const char **peers = nn_xcalloc((size_t)argc + 1, sizeof *peers);
    int npeers = 0, no_eval = 0, no_gossip = 0;
    long rank = -1;
    long ckpt_every = -1; /* -1: once per epoch */
    long nan_at = -1;
    int resume = 0;
    char err[2048] = "";
    struct option *mine = node_options_concat(node_gossip_options, own);
    struct option *opts = node_options_join(mine);
    free(mine);
    int c, bad = 0;
    optind = 1;
    while (!bad && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rt = node_train_opt(&o, c, optarg, err, sizeof err);
        int rg = rt ? 0 : node_gossip_opt(&go, c, optarg, err, sizeof err);
        if (rt < 0 || rg < 0) {
            bad = 2;
            break;
        }
        if (rt > 0 || rg > 0)
            continue;
        switch (c) {
        case N_TOPO: topo_path = optarg; break;
        case N_RANK:
            bad = node_parse_int("--rank", optarg, 0, TOPO_MAX_NODES - 1, &rank, err, sizeof err)
                      ? 2 : 0;
            break;
        case N_BIND: bind = optarg; break;
        case N_CERT: cert = optarg; break;
        case N_NAN_AT:
            bad = node_parse_int("--debug-nan-at", optarg, 0, 1L << 40, &nan_at, err, sizeof err)
                      ? 2 : 0;
            break;
        case N_PEER: peers[npeers++] = optarg; break;
        case N_TIMEOUT:
            bad = node_parse_double("--timeout", optarg, 0.1, 1e6, &lc.timeout, err, sizeof err)
                      ? 2 : 0;
            break;
        case N_PEER_FLOOR:
            bad = node_parse_double("--peer-timeout", optarg, 0.1, 1e6, &lc.peer_floor, err,
                                    sizeof err) ? 2 : 0;
            break;
        case N_PEER_FACTOR:
            bad = node_parse_double("--peer-timeout-factor", optarg, 1, 1e6, &lc.peer_factor,
                                    err, sizeof err) ? 2 : 0;
            break;
        case N_FAIL_LOSS: lc.fail_on_loss = 1; break;
        case N_DROP:
            bad = node_parse_double("--debug-drop", optarg, 0, 1, &lc.drop_gossip, err,
                                    sizeof err) ? 2 : 0;
            break;
        case N_NOEVAL: no_eval = 1; break;
        case N_NOGOSSIP: no_gossip = 1; break;
        case N_CKPT_EVERY:
            bad = node_parse_int("--checkpoint-every", optarg, 0, 1000000000L, &ckpt_every, err,
                                 sizeof err) ? 2 : 0;
            break;
        case N_RESUME: resume = 1; break;
        case 'h': free(opts); free(peers); s_usage(stdout); return 0;
        default: free(opts); free(peers); s_usage(stderr); return 2;
        }
    }
    free(opts);
    if (!bad && (!topo_path || optind < argc)) {
        bad = 2;
        nn_errf(err, sizeof err, "%s",
                topo_path ? "unexpected argument (see --help)" : "--topology FILE is required");
    }
    if (!bad && rank < 0 && s_rank_from_env(&rank, err, sizeof err) != 0)
        bad = 2;
    if (bad) {
        fprintf(stderr, "lpgossip node: %s\n", err);
        free(peers);
        return 2;
    }
    node_gossip_opts_finish(&go, &o);
    node_train_opts_finish(&o);
    node_set_threads((int)o.threads);

    topo *t = topo_load(topo_path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "lpgossip node: %s\n", err);
        free(peers);
        return 2;
    }
    for (int k = 0; k < npeers; k++)
        if (s_apply_peer(t, peers[k], err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip node: %s\n", err);
            free(peers);
            topo_destroy(&t);
            return 2;
        }
    free(peers);
    if (rank >= t->n) {
        fprintf(stderr, "lpgossip node: rank %ld outside %s (%d nodes)\n", rank, topo_path, t->n);
        topo_destroy(&t);
        return 2;
    }
    uint8_t curve_pub[32], curve_sec[32];
    if (t->security_curve && !cert && !no_gossip) {
        fprintf(stderr, "lpgossip node: %s says `security: curve`: give this node's certificate "
                "with --cert FILE (`lpgossip keygen NAME` writes one)\n", topo_path);
        topo_destroy(&t);
        return 2;
    }
    if (t->security_curve && cert &&
        node_cert_load(cert, curve_pub, curve_sec, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip node: %s\n", err);
        topo_destroy(&t);
        return 2;
    }
    if (!t->security_curve && cert)
        fprintf(stderr, "lpgossip node: warning: --cert %s ignored: %s does not say "
                "`security: curve` (traffic is neither encrypted nor authenticated)\n", cert,
                topo_path);

    int rc = 1, have_shards = 0, interrupted = 0;
    const int n = t->n, me = (int)rank;
    s_run r = {me, NULL};
    gossip_node *g = NULL;
    gossip_net *net = NULL;
    gossip_link *link = NULL;
    node_lock *lock = NULL; /* one live process per rank and --out */
    uint32_t **shard = nn_xcalloc((size_t)n, sizeof *shard);
    size_t *count = nn_xcalloc((size_t)n, sizeof *count);
    node_data d;
    memset(&d, 0, sizeof d);
    node_trainer tr;
    memset(&tr, 0, sizeof tr);
    float *x = NULL;
    FILE *mf = NULL;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal; /* no SA_RESTART: waits return early */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    s_signals = 0;

    char path[1200];
    if (go.out[0]) {
        if (mkdir(go.out, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "lpgossip node %d: cannot create --out %s: %s\n", me, go.out,
                    strerror(errno));
            goto done;
        }
        if (!(lock = node_lock_new(go.out, me, err, sizeof err))) { /* before any file */
            fprintf(stderr, "lpgossip node %d: %s\n", me, err);
            rc = 2;
            goto done;
        }
        snprintf(path, sizeof path, "%s/log-%d.txt", go.out, me);
        if (!(r.logf = fopen(path, resume ? "a" : "w"))) {
            fprintf(stderr, "lpgossip node %d: cannot write %s: %s\n", me, path, strerror(errno));
            goto done;
        }
        if (o.metrics[0])
            snprintf(path, sizeof path, "%s", o.metrics);
        else
            snprintf(path, sizeof path, "%s/metrics-%d.jsonl", go.out, me);
    } else {
        snprintf(path, sizeof path, "%s", o.metrics);
    }
    if (path[0] && !(mf = fopen(path, o.metrics[0] || resume ? "a" : "w"))) {
        s_log(&r, "cannot write metrics %s: %s", path, strerror(errno));
        goto done;
    }

    if (node_data_load(&o.mo, &d, err, sizeof err) != 0 ||
        node_shards_make(&o, &d, n, go.skew, shard, count, err, sizeof err) != 0) {
        s_log(&r, "%s", err);
        goto done;
    }
    have_shards = 1;
    if (node_trainer_init(&tr, &o, &d, shard[me], count[me], me, err, sizeof err) != 0) {
        s_log(&r, "%s", err);
        goto done;
    }
    nn_arena *params = nn_model_params(tr.model);
    size_t dim = params->numel;
    x = nn_xalloc_aligned(dim * sizeof(float));
    memcpy(x, params->data, dim * sizeof(float));
    /* Iterations per epoch from shard 0, exactly as simulate. */
    long steps = (long)((count[0] + (size_t)o.batch - 1) / (size_t)o.batch);
    const uint64_t H = (uint64_t)go.gossip_every; /* local steps per gossip round */
    go.gc.iters_per_epoch = (uint64_t)steps / H ? (uint64_t)steps / H : 1; /* rounds */
    g = gossip_node_new(&go.gc, params, t, me, err, sizeof err);
    if (!g) {
        s_log(&r, "%s", err);
        rc = 2;
        goto done;
    }
    uint32_t fp = gossip_node_fingerprint(g);
    /* Checkpoints: --out DIR/ckpt-RANK.safetensors; identity = what must
     * match to resume (docs/node.md). */
    char ckpt_path[1200] = "";
    node_ckpt_ident ident;
    node_ckpt_run run = {o.mo.model, o.mo.norm, o.mo.precision, o.mo.data, o.mo.groups,
                         gossip_algo_name(go.gc.algo), go.gc.compressor, go.gc.eta,
                         go.gc.push_sum, go.skew, o.subset, o.seed, o.batch, fp, topo_path, n, me};
    if (node_ckpt_ident_make(&ident, &run, err, sizeof err) != 0) {
        s_log(&r, "%s", err);
        rc = 2;
        goto done;
    }
    node_ckpt ck = {params, x, &tr.sgd, nn_model_buffers(tr.model), no_gossip ? NULL : g,
                    nn_model_rng(tr.model), &tr.aug_rng, &tr.sampler, ident.kv, H,
                    (uint64_t)(steps * o.epochs)};
    if (go.out[0])
        snprintf(ckpt_path, sizeof ckpt_path, "%s/ckpt-%d.safetensors", go.out, me);
    if ((resume || ckpt_every > 0) && !go.out[0]) {
        s_log(&r, "--resume and --checkpoint-every need --out DIR (checkpoints live there)");
        rc = 2;
        goto done;
    }
    uint64_t it = 0;
    if (resume) {
        if (node_ckpt_load(ckpt_path, &ck, &it, err, sizeof err) != 0) {
            s_log(&r, "%s", err);
            rc = 2;
            goto done;
        }
        s_log(&r, "resumed from %s at iteration %llu (psi %.6f)", ckpt_path,
              (unsigned long long)it, gossip_node_psi(g));
    }
    if (!no_gossip) {
        gossip_net_config nc;
        gossip_net_config_default(&nc);
        nc.bind = bind;
        nc.max_msg = gossip_net_max_msg_size(params);
        nc.send_timeout_ms = (int)(lc.timeout * 1000 > 2e9 ? 2e9 : lc.timeout * 1000);
        nc.log = r.logf ? r.logf : stderr;
        if (t->security_curve) {
            nc.curve_public = curve_pub;
            nc.curve_secret = curve_sec;
        }
        net = gossip_net_new(t, me, &nc, err, sizeof err);
        if (!net) {
            s_log(&r, "%s", err);
            goto done;
        }
        lc.seed = (uint64_t)o.seed;
        lc.log = s_link_log;
        lc.log_arg = &r;
        lc.signals = &s_signals;
        link = gossip_link_new(net, g, t, me, &lc);
    }
    uint64_t iters = (uint64_t)(steps * o.epochs);
    long eval_every = go.eval_every > 0 ? go.eval_every : steps;
    s_log(&r, "node %s of %s (%d nodes), %s on %s; %s, compress %s, eta %g, push-sum %s, "
          "skew %g; %s (%zu parameters), %zu samples, %ld epochs x %ld iterations%s",
          t->nodes[me].id, topo_path, n, net ? "ROUTER" : "no gossip",
          net ? gossip_net_endpoint(net) : "-", gossip_algo_name(go.gc.algo),
          go.gc.compressor, go.gc.eta, go.gc.push_sum ? "on" : "off", go.skew, o.mo.model, dim,
          count[me], o.epochs, steps, no_eval ? ", no evaluation" : "");

    uint64_t round = it / H; /* gossip rounds done */
    if (link && gossip_link_start(link, resume, &round, err, sizeof err) != 0) {
        s_log(&r, "%s", err);
        goto done;
    }
    if (round * H > it)
        it = round * H; /* rejoined further along: start that round's local steps */
    s_times tm = {0, 0, 0, 0};
    double t0 = nn_now();
    int failed = 0;
    uint64_t skipped = 0, skipped_run = 0;
    long ckpt_n = ckpt_every < 0 ? steps : ckpt_every;
    for (; it < iters; it++) {
        if (s_signals) {
            interrupted = 1;
            break;
        }
        float lr = node_lr_at_iter(&o, it, steps);
        if (nan_at >= 0 && it == (uint64_t)nan_at)
            tr.poison_next = 1;
        double a = nn_now();
        float loss = node_gossip_local_step(&tr, &d, g, x, lr);
        double b = nn_now();
        tm.compute += b - a;
        if (!isfinite(loss)) {
            skipped++;
            if (++skipped_run <= 3 || skipped_run == S_MAX_SKIPPED)
                s_log(&r, "iteration %llu: the loss or a gradient is not finite (loss %g, lr %g): "
                      "step skipped, the model is unchanged and nothing non-finite is sent",
                      (unsigned long long)it, loss, lr);
            if (skipped_run >= S_MAX_SKIPPED) {
                s_log(&r, "%d steps in a row were not finite: training diverged; try a smaller "
                      "--lr or --eta", S_MAX_SKIPPED);
                failed = 1;
                break;
            }
        } else {
            skipped_run = 0;
        }
        if (link && (it + 1) % H != 0) {
            gossip_link_pump(link, 0); /* between rounds: answer, PING */
        } else if (link) {
            gossip_link_times lt = {0, 0, 0};
            if (gossip_link_round(link, x, (it + 1) / H - 1, &lt, err, sizeof err) != 0) {
                s_log(&r, "iteration %llu: %s", (unsigned long long)it, err);
                failed = 1;
                break;
            }
            tm.compress += lt.compress;
            tm.wait += lt.wait;
            tm.mix += lt.mix;
        }
        if (link)
            nn_sgd_after_mix(&tr.sgd, x);
        if (ckpt_path[0] && ckpt_n > 0 && (it + 1) % (uint64_t)ckpt_n == 0) {
            double k0 = nn_now();
            if (node_ckpt_save(ckpt_path, &ck, it + 1, err, sizeof err) != 0)
                s_log(&r, "checkpoint: %s", err);
            else if (it + 1 == (uint64_t)ckpt_n || (it + 1) % ((uint64_t)ckpt_n * 10) == 0)
                s_log(&r, "checkpoint %s at iteration %llu (%.3f s)", ckpt_path,
                      (unsigned long long)(it + 1), nn_now() - k0);
            s_tick(link);
        }
        int last = it + 1 == iters;
        if (!((it + 1) % (uint64_t)eval_every == 0 || last) || (no_eval && !last))
            continue;
        gossip_node_debias(g, x, params->data);
        double acc = 0, test_loss = 0;
        if (!no_eval)
            acc = node_evaluate_tick(tr.model, &d, &d.test, (int)o.batch, &test_loss, s_tick,
                                     link);
        double train_loss = tr.seen ? tr.loss_sum / (double)tr.seen : 0.0;
        node_trainer_reset_stats(&tr);
        gossip_link_stats ls;
        memset(&ls, 0, sizeof ls);
        if (link)
            gossip_link_stats_get(link, &ls);
        char downs[64] = "";
        if (ls.peers_down)
            snprintf(downs, sizeof downs, "  %llu neighbour(s) down",
                     (unsigned long long)ls.peers_down);
        s_log(&r, "iter %llu (epoch %.2f)  loss %.4f  test %s%.2f%%  psi %.4f  %.1fs%s",
              (unsigned long long)(it + 1), (double)(it + 1) / (double)steps, train_loss,
              no_eval ? "(not evaluated) " : "", 100 * acc, gossip_node_psi(g), nn_now() - t0,
              downs);
        if (mf)
            s_metrics(mf, me, it + 1, steps, train_loss, !no_eval, acc, test_loss, net, g, link,
                      skipped, nn_now() - t0, &tm);
    }
    uint64_t done_iters = it; /* iterations whose mix completed */
    if (interrupted && !failed && ckpt_path[0]) {
        if (node_ckpt_save(ckpt_path, &ck, done_iters, err, sizeof err) != 0)
            s_log(&r, "checkpoint: %s", err);
        else
            s_log(&r, "checkpoint %s at iteration %llu (resume with --resume)", ckpt_path,
                  (unsigned long long)done_iters);
    }
    /* The final model: the de-biased z = x/psi. */
    gossip_node_debias(g, x, params->data);
    int saved = 0;
    if (go.out[0] || o.save[0]) {
        if (go.out[0])
            snprintf(path, sizeof path, "%s/model-%d.safetensors", go.out, me);
        else
            snprintf(path, sizeof path, "%s", o.save);
        if (node_model_save(path, tr.model, &o.mo, err, sizeof err) != 0)
            s_log(&r, "%s", err);
        else
            saved = 1;
        if (saved && go.out[0] && o.save[0] && node_model_save(o.save, tr.model, &o.mo, err,
                                                                 sizeof err) != 0)
            s_log(&r, "%s", err);
    }
    if (link) {
        /* after a failure, tell the others quickly and do not wait long */
        double wait = failed || interrupted ? (lc.timeout < 2 ? lc.timeout : 2) : lc.timeout;
        gossip_link_goodbye(link, done_iters, wait);
        gossip_net_stats ns;
        gossip_link_stats ls;
        gossip_net_stats_get(net, &ns);
        gossip_link_stats_get(link, &ls);
        s_log(&r, "%llu iterations, sent %llu bytes in %llu messages, received %llu in %llu; "
              "refused %llu (transport %llu); neighbours lost %llu times, back %llu times, "
              "%llu down at the end; %llu RESYNCs sent (%llu bytes); %llu steps skipped%s",
              (unsigned long long)done_iters, (unsigned long long)ns.bytes_sent,
              (unsigned long long)ns.msgs_sent, (unsigned long long)ns.bytes_recv,
              (unsigned long long)ns.msgs_recv, (unsigned long long)ls.refused,
              (unsigned long long)(ns.rejected_identity + ns.rejected_frames + ns.rejected_size +
                                   ns.rejected_auth),
              (unsigned long long)ls.down_events, (unsigned long long)ls.back_events,
              (unsigned long long)ls.peers_down, (unsigned long long)ls.resyncs_sent,
              (unsigned long long)ls.resync_bytes, (unsigned long long)skipped,
              saved ? "; model saved" : "");
    }
    if (interrupted)
        s_log(&r, "stopped by signal %d after %llu of %llu iterations%s", (int)s_last_signal,
              (unsigned long long)done_iters, (unsigned long long)iters,
              saved ? " (model saved)" : "");
    else if (!failed && (saved || !(go.out[0] || o.save[0])))
        rc = 0;
done:
    memset(curve_sec, 0, sizeof curve_sec);
    if (mf)
        fclose(mf);
    gossip_link_destroy(&link);
    gossip_net_destroy(&net);
    gossip_node_destroy(&g);
    if (r.logf)
        fclose(r.logf);
    node_lock_destroy(&lock);
    free(x);
    node_trainer_free(&tr);
    if (have_shards)
        nn_partition_free(shard, n);
    free(shard);
    free(count);
    node_data_free(&d);
    topo_destroy(&t);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
