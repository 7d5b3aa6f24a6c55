/* node_cmd_node — `lpgossip node`: one rank of a decentralized run as its
 * own OS process, gossiping over ZeroMQ (gossip_net, gossip_link) with the
 * very same algorithm object (gossip_node), ranks (node_ranks: partition,
 * shard, weights, sampler seed, iterations per epoch) and run loop
 * (node_run) as `lpgossip simulate`, so both produce the same trajectory.
 *
 * The protocol with the neighbours (start barrier or rejoin, liveness and
 * dead peers, resync, flow control, BYE) is gossip_link's; docs/node.md
 * describes it for users.  SIGINT/SIGTERM: finish the current iteration,
 * save (model and, with --out, the checkpoint), say BYE, exit 1 (a second
 * signal aborts the wait).  Checkpoints (node_ckpt.h): --out
 * DIR/ckpt-RANK.safetensors every --checkpoint-every iterations (default
 * once per epoch) and on a signal; --resume loads it and rejoins the run
 * (gossip_link_start).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gossip/gossip_link.h"
#include "gossip/gossip_net.h"
#include "gossip/gossip_node.h"
#include "node/node_cert.h"
#include "node/node_ckpt.h"
#include "node/node_data.h"
#include "node/node_cmds.h"
#include "node/node_http.h"
#include "node/node_live.h"
#include "node/node_lock.h"
#include "node/node_modelio.h"
#include "node/node_run.h"
#include "nn/nn_pool.h"
#include "topology/topo.h"

/* Exit status of a node that finished cut off from all its neighbours
 * (scripts/run-local: ISOLATED). */
#define NODE_EXIT_CUT_OFF 3
#define NODE_LINK_COUNTS 40 /* room for s_link_counts */

static volatile sig_atomic_t s_signals = 0;
static double s_t_start; /* clock at the command's start ("joined ... in X s") */
static volatile sig_atomic_t s_last_signal = 0;

static void s_on_signal(int sig)
{
    s_last_signal = sig;
    s_signals = s_signals + 1;
}

/* ---- the state of one node run ----------------------------------------- */

typedef struct {
    const node_opts *o;
    topo            *t;
    int              me;
    uint8_t          curve_pub[32], curve_sec[32];
    node_lock       *lock;         /* one live process per rank and --out */
    FILE            *logf, *mf;
    node_ranks       k;
    gossip_node     *g;
    gossip_net      *net;
    gossip_link     *link;
    char             ckpt_path[1200];
    node_ckpt_ident  ident;        /* checkpoint identity */
    node_ckpt        ck;
    long             ckpt_every;   /* iterations, 0: only on a signal */
    gossip_stats      gs;          /* of the last metrics line */
    gossip_net_stats  ns;
    gossip_link_stats ls;
    node_count        counts[NODE_LINK_COUNTS]; /* ns and ls as metrics (s_link_counts) */
    node_nb_metrics   nb[TOPO_MAX_NODES]; /* per in-neighbour (metrics) */
    /* --metrics-port: the live state served over HTTP (NULL: off) */
    node_live        *live;
    node_http        *http;
    node_live_snap   *snap;        /* built here, then published */
    const node_run   *run;         /* the loop (set by s_loop) */
    node_times        tm_last;     /* r->tm at the last snapshot */
    double            loss_last;   /* trainer loss_sum at the last snapshot */
    size_t            seen_last;   /* trainer seen at the last snapshot */
    node_skip_state   skip;        /* catch-up decisions (s_skip) */
} s_node;

__attribute__((format(printf, 2, 3)))
static void s_log(s_node *s, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lpgossip node %d: %s\n", s->me, msg);
    fflush(stderr);
    if (s->logf) {
        fprintf(s->logf, "%.3f %s\n", nn_now(), msg);
        fflush(s->logf);
    }
}

static void s_link_log(void *arg, const char *msg)
{
    s_log(arg, "%s", msg);
}

/* ---- the topology, --peer, --cert ---------------------------------------- */

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
    char why[128];
    if (strlen(eq + 1) >= sizeof t->nodes[j].endpoint)
        return nn_errf(err, errlen, "--peer '%s': endpoint too long", spec);
    if (topo_check_endpoint(eq + 1, why, sizeof why) != 0)
        return nn_errf(err, errlen, "--peer '%s': %s", spec, why);
    snprintf(t->nodes[j].endpoint, sizeof t->nodes[j].endpoint, "%s", eq + 1);
    return 0;
}

/* Loads the topology with the --peer overrides and this node's key.  -1
 * with a message: a usage error. */
static int s_topology(s_node *s, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    const char *path = o->g.topology, *cert = o->n.cert;
    if (!(s->t = topo_load(path, err, errlen)))
        return -1;
    for (int k = 0; k < o->n.npeers; k++)
        if (s_apply_peer(s->t, o->n.peers[k], err, errlen) != 0)
            return -1;
    if (o->n.rank >= s->t->n)
        return nn_errf(err, errlen, "rank %ld outside %s (%d nodes)", o->n.rank, path, s->t->n);
    s->me = (int)o->n.rank;
    if (s->t->security_curve && !cert && !o->n.no_gossip)
        return nn_errf(err, errlen, "%s says `security: curve`: give this node's certificate "
                       "with --cert FILE (`lpgossip keygen NAME` writes one)", path);
    if (s->t->security_curve && cert &&
        node_cert_load(cert, s->curve_pub, s->curve_sec, err, errlen) != 0)
        return -1;
    if (!s->t->security_curve && cert)
        fprintf(stderr, "lpgossip node: warning: --cert %s ignored: %s does not say "
                "`security: curve` (traffic is neither encrypted nor authenticated)\n", cert,
                path);
    return 0;
}

/* ---- files -------------------------------------------------------------- */

/* --out DIR (its lock, log, default metrics file) and --metrics; -1 with a
 * message, -2 when another process holds this rank and DIR (a usage error). */
static int s_files(s_node *s, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    const char *out = o->g.out, *metrics = o->t.metrics;
    char path[1200];
    snprintf(path, sizeof path, "%s", metrics);
    if (out[0]) {
        if (mkdir(out, 0755) != 0 && errno != EEXIST)
            return nn_errf(err, errlen, "cannot create --out %s: %s", out, strerror(errno));
        if (!(s->lock = node_lock_new(out, s->me, err, errlen))) /* before any file */
            return -2;
        snprintf(path, sizeof path, "%s/log-%d.txt", out, s->me);
        if (!(s->logf = fopen(path, o->n.resume ? "a" : "w")))
            return nn_errf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (!metrics[0])
            snprintf(path, sizeof path, "%s/metrics-%d.jsonl", out, s->me);
        else
            snprintf(path, sizeof path, "%s", metrics);
        snprintf(s->ckpt_path, sizeof s->ckpt_path, "%s/ckpt-%d.safetensors", out, s->me);
    }
    if (path[0] && !(s->mf = fopen(path, metrics[0] || o->n.resume ? "a" : "w")))
        return nn_errf(err, errlen, "cannot write metrics %s: %s", path, strerror(errno));
    return 0;
}

/* The checkpoint over the live state, with its identity (what must match
 * to resume, node_ckpt_ident_make and docs/node.md); -1 with a message. */
static int s_ckpt_setup(s_node *s, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    node_trainer *tr = &s->k.tr[0];
    char model_digest[17];
    node_model_digest(&o->t.mo, model_digest);
    char dopts[200]; /* the data flags (--partition, --image-size, ...) */
    node_data_ident(&o->t.mo, dopts, sizeof dopts);
    node_ckpt_run run = {node_arch_name(o->t.mo.model), node_norm_name(o->t.mo.norm),
                         node_precision_name(o->t.mo.precision), o->t.mo.data, o->t.mo.groups,
                         gossip_algo_name(o->g.gc.algo), o->g.gc.compressor, o->g.gc.eta,
                         o->g.gc.push_sum, o->g.skew, o->t.subset, o->t.seed, o->t.batch,
                         gossip_node_fingerprint(s->g), o->g.topology, s->t->n, s->me,
                         model_digest, o->t.init, dopts};
    if (node_ckpt_ident_make(&s->ident, &run, err, errlen) != 0)
        return -1;
    s->ck = (node_ckpt){nn_model_params(tr->model), s->k.x[0], &tr->sgd,
                        nn_model_buffers(tr->model), o->n.no_gossip ? NULL : s->g,
                        nn_model_rng(tr->model), &tr->aug_rng, &tr->sampler, s->ident.kv,
                        (uint64_t)o->g.gossip_every,
                        (uint64_t)s->k.steps * (uint64_t)o->t.epochs};
    s->ckpt_every = o->n.ckpt_every < 0 ? s->k.steps : o->n.ckpt_every;
    return 0;
}

/* The run id of LAN discovery (gossip_discovery.h): FNV-1a 64 over the
 * checkpoint identity pairs (the topology file's digest, model, data set,
 * algorithm, compressor, eta, push-sum, skew, subset, seed, batch, ...)
 * except what differs between the machines of one run: the rank, the
 * topology file's path and the data set's directory (`cifar10:DIR`). */
static uint64_t s_run_id(const s_node *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const char *const *kv = s->ident.kv;
    const char domain[] = "lpgossip discovery v1";
    for (size_t b = 0; b < sizeof domain; b++)
        h = (h ^ (uint8_t)domain[b]) * 0x100000001b3ULL;
    for (int k = 0; kv[k] && kv[k + 1]; k += 2) {
        if (!strcmp(kv[k], "rank") || !strcmp(kv[k], "topology"))
            continue;
        size_t vlen = strlen(kv[k + 1]);
        if (!strcmp(kv[k], "data") && strchr(kv[k + 1], ':'))
            vlen = (size_t)(strchr(kv[k + 1], ':') - kv[k + 1]);
        for (size_t b = 0; b <= strlen(kv[k]); b++)
            h = (h ^ (uint8_t)kv[k][b]) * 0x100000001b3ULL;
        for (size_t b = 0; b < vlen; b++)
            h = (h ^ (uint8_t)kv[k + 1][b]) * 0x100000001b3ULL;
        h = (h ^ 0) * 0x100000001b3ULL;
    }
    return h;
}

/* A failed start under `discovery: lan`: which neighbours were never
 * heard of, on which UDP port, appended to err. */
static void s_discovery_hint(const s_node *s, char *err, size_t errlen)
{
    const gossip_disc *d = s->net ? gossip_net_discovery(s->net) : NULL;
    char missing[768];
    if (!d || gossip_disc_missing(d, missing, sizeof missing) == 0)
        return;
    gossip_disc_stats st;
    gossip_disc_stats_get(d, &st);
    size_t used = strlen(err);
    snprintf(err + used, errlen - used, "; discovery: never found %s (no announcement of this "
             "run on UDP port %d; %llu announcements of other runs ignored): are they started with the same "
             "topology file and flags, on this LAN? A firewall must let UDP port %d "
             "(broadcast) and the nodes' TCP ports through", missing, s->t->discovery_port,
             (unsigned long long)st.foreign, s->t->discovery_port);
}

/* ---- the gossip round over the link ------------------------------------- */

static int s_round(void *ctx, float **x, uint64_t r, node_times *tm, char *err, size_t errlen)
{
    s_node *s = ctx;
    gossip_link_times lt = {0, 0, 0};
    if (s->live)
        node_live_set_phase(s->live, NODE_LIVE_GOSSIP);
    int rc = gossip_link_round(s->link, x[0], r, &lt, err, errlen);
    if (s->live)
        node_live_set_phase(s->live, NODE_LIVE_STEP);
    tm->compress += lt.compress;
    tm->wait += lt.wait;
    tm->mix += lt.mix;
    return rc;
}

static void s_serve(void *ctx)
{
    s_node *s = ctx;
    gossip_link_pump(s->link, 0);
}

/* Sockets and the link; -1 with a message. */
static int s_connect(s_node *s, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    gossip_net_config nc;
    gossip_net_config_default(&nc);
    nc.bind = o->n.bind;
    nc.max_msg = gossip_net_max_msg_size(nn_model_params(s->k.tr[0].model));
    double timeout = o->n.lc.timeout;
    nc.send_timeout_ms = (int)(timeout * 1000 > 2e9 ? 2e9 : timeout * 1000);
    nc.log = s->logf ? s->logf : stderr;
    nc.run_id = s_run_id(s);
    nc.discovery_interface = o->n.discovery_interface;
    if (o->g.gc.algo == GOSSIP_DPSGD && o->g.gc.push_sum && o->g.gc.staleness > 0) {
        nc.dealer_hwm = GOSSIP_DEF_PS_DEALER_HWM; /* backed up: kept, not queued */
        nc.dealer_sndbuf = GOSSIP_DEF_PS_DEALER_SNDBUF;
        nc.dealer_heartbeat_timeout_ms = GOSSIP_DEF_PS_DEALER_HEARTBEAT_MS;
    }
    /* a connection that says nothing for as long as a neighbour may be
     * silent before it is down is closed: a slow board's first message
     * may come late, a contested id is freed within the peer floor */
    double floor_ms = 1000 * (o->n.lc.peer_floor < timeout ? o->n.lc.peer_floor : timeout);
    if (floor_ms > nc.silent_close_ms)
        nc.silent_close_ms = floor_ms > 2e9 ? 2000000000 : (int)floor_ms;
    /* two announcers for a rank: the silent one gives way within --peer-timeout */
    double probe = o->n.lc.peer_floor < timeout ? o->n.lc.peer_floor : timeout;
    nc.discovery_probe_ms = probe > 1 ? (int)(1000 * probe) : 1000;
    if (s->t->security_curve) {
        nc.curve_public = s->curve_pub;
        nc.curve_secret = s->curve_sec;
    }
    if (!(s->net = gossip_net_new(s->t, s->me, &nc, err, errlen)))
        return -1;
    gossip_link_config lc = o->n.lc;
    lc.seed = (uint64_t)o->t.seed;
    lc.log = s_link_log;
    lc.log_arg = s;
    lc.signals = &s_signals;
    lc.iters = (uint64_t)s->k.steps * (uint64_t)o->t.epochs / (uint64_t)o->g.gossip_every;
    s->link = gossip_link_new(s->net, s->g, s->t, s->me, &lc);
    nn_arena *buf = nn_model_buffers(s->k.tr[0].model); /* 8-bit activation ranges */
    gossip_link_set_model(s->link, s->k.x[0], buf && buf->nviews ? buf->data : NULL,
                          buf && buf->nviews ? buf->numel : 0);
    return 0;
}

/* ---- live metrics (--metrics-port, node_live.h) --------------------------- */

/* The configuration part of the snapshot, and the neighbours (in or out). */
static void s_live_identity(s_node *s, node_live_snap *p)
{
    const node_opts *o = s->o;
    snprintf(p->run, sizeof p->run, "%016llx", (unsigned long long)s_run_id(s));
    snprintf(p->node, sizeof p->node, "%s", s->t->nodes[s->me].id);
    p->rank = s->me;
    p->nodes = s->t->n;
    p->threads = nn_pool_threads();
    snprintf(p->topology, sizeof p->topology, "%s", o->g.topology);
    snprintf(p->model, sizeof p->model, "%s", node_arch_name(o->t.mo.model));
    snprintf(p->precision, sizeof p->precision, "%s", node_precision_name(o->t.mo.precision));
    snprintf(p->algo, sizeof p->algo, "%s", gossip_algo_name(o->g.gc.algo));
    snprintf(p->compress, sizeof p->compress, "%s", o->g.gc.compressor);
    snprintf(p->endpoint, sizeof p->endpoint, "%s", s->net ? gossip_net_endpoint(s->net) : "");
    p->eta = o->g.gc.eta;
    p->staleness = gossip_node_config(s->g)->staleness;
    p->gossip_every = o->g.gossip_every;
    p->batch = o->t.batch;
    p->epochs = o->t.epochs;
    p->iters_per_epoch = s->k.steps;
    p->iterations = (uint64_t)s->k.steps * (uint64_t)o->t.epochs;
    p->loss = NAN;
    const gossip_peer *peers = gossip_node_peers(s->g);
    for (int j = 0; j < s->t->n && p->nnb < NODE_LIVE_MAX_NB; j++) {
        if (j == s->me || !(peers[j].is_in || peers[j].is_out))
            continue;
        node_live_nb *nb = &p->nb[p->nnb++];
        nb->rank = j;
        nb->up = 1;
        snprintf(nb->id, sizeof nb->id, "%s", s->t->nodes[j].id);
    }
}

/* The counters of the link and the sockets into p. */
static void s_live_link(s_node *s, node_live_snap *p)
{
    if (!s->link)
        return;
    gossip_net_stats ns;
    gossip_link_stats ls;
    gossip_net_stats_get(s->net, &ns);
    gossip_link_stats_get(s->link, &ls);
    p->bytes_sent = ns.bytes_sent;
    p->bytes_received = ns.bytes_recv;
    p->msgs_sent = ns.msgs_sent;
    p->msgs_received = ns.msgs_recv;
    p->neighbours = (int)ls.neighbours;
    p->peers_up = (int)(ls.neighbours - ls.peers_down);
    uint64_t *f = p->refused;
    f[NODE_LIVE_REF_IDENTITY] = ns.rejected_identity;
    f[NODE_LIVE_REF_FRAMES] = ns.rejected_frames;
    f[NODE_LIVE_REF_SIZE] = ns.rejected_size;
    f[NODE_LIVE_REF_AUTH] = ns.rejected_auth;
    f[NODE_LIVE_REF_CONTESTED] = ns.rejected_contested;
    p->closed_silent = ns.closed_silent;
    f[NODE_LIVE_REF_NONFINITE] = ls.refused_nonfinite;
    f[NODE_LIVE_REF_STATE] = ls.state_refused;
    f[NODE_LIVE_REF_OTHER] = ls.refused - ls.refused_nonfinite - ls.state_refused;
    for (int k = 0; k < p->nnb; k++) {
        node_live_nb *nb = &p->nb[k];
        uint64_t lag = 0, nofresh;
        gossip_node_peer_lag(s->g, nb->rank, &lag, &nofresh);
        gossip_link_peer_view v = gossip_link_peer_get(s->link, nb->rank);
        nb->staleness = lag;
        nb->up = !v.down;
        nb->wait_s = v.wait_s;
        snprintf(nb->endpoint, sizeof nb->endpoint, "%s",
                 gossip_net_peer_endpoint(s->net, nb->rank));
    }
}

/* The progress of the loop after `done` iterations into the snapshot. */
static void s_live_fill(s_node *s, uint64_t done)
{
    node_live_snap *p = s->snap;
    const node_run *r = s->run;
    const node_trainer *tr = &s->k.tr[0];
    p->iteration = done;
    p->epoch = (double)done / (double)s->k.steps;
    p->lr = r->lr;
    if (tr->seen < s->seen_last) /* the stats were reset by an evaluation */
        s->seen_last = 0, s->loss_last = 0;
    if (tr->seen > s->seen_last) {
        double l = (tr->loss_sum - s->loss_last) / (double)(tr->seen - s->seen_last);
        p->loss = isfinite(p->loss) ? 0.9 * p->loss + 0.1 * l : l;
    }
    s->seen_last = tr->seen;
    s->loss_last = tr->loss_sum;
    p->psi = gossip_node_psi(s->g);
    p->seconds = nn_now() - r->t0;
    p->skipped_steps = r->skipped;
    p->catchup_steps = r->catchup;
    node_live_observe(&p->step[NODE_LIVE_COMPUTE], r->tm.compute - s->tm_last.compute);
    if (r->tm.gossip > s->tm_last.gossip) { /* a round in this iteration */
        node_live_observe(&p->step[NODE_LIVE_COMPRESS], r->tm.compress - s->tm_last.compress);
        node_live_observe(&p->step[NODE_LIVE_WAIT], r->tm.wait - s->tm_last.wait);
        node_live_observe(&p->step[NODE_LIVE_MIX], r->tm.mix - s->tm_last.mix);
    }
    s->tm_last = r->tm;
    s_live_link(s, p);
}

/* --metrics-port: the server, after the sockets (the +K form needs the
 * ROUTER's port).  0, or -1 with a message. */
static int s_live_start(s_node *s, char *err, size_t errlen)
{
    const node_net_opts *n = &s->o->n;
    if (!n->metrics_port && !n->metrics_offset)
        return 0;
    int port = n->metrics_port < 0 ? 0 : n->metrics_port;
    if (n->metrics_offset) {
        const char *ep = s->net ? strrchr(gossip_net_endpoint(s->net), ':') : NULL;
        long tcp = ep ? strtol(ep + 1, NULL, 10) : 0;
        if (tcp <= 0 || tcp + n->metrics_offset > 65535)
            return nn_errf(err, errlen, "--metrics-port +%d: %s", n->metrics_offset,
                           tcp <= 0 ? "needs this node's TCP port (not with --no-gossip)"
                                    : "this node's TCP port + K is above 65535");
        port = (int)tcp + n->metrics_offset;
    }
    s->snap = nn_xcalloc(1, sizeof *s->snap);
    s_live_identity(s, s->snap);
    s->live = node_live_new(s->snap);
    if (!(s->http = node_http_new(s->live, n->metrics_bind, port, err, errlen)))
        return -1;
    s_log(s, "metrics on http://%s%s%s:%d/metrics and /status", strchr(n->metrics_bind, ':') ? "[" : "",
          n->metrics_bind, strchr(n->metrics_bind, ':') ? "]" : "", node_http_port(s->http));
    return 0;
}

/* After each iteration (and evaluation): the snapshot offered to the HTTP
 * thread, never waiting for it (force: the last one of the run). */
static void s_live_publish(s_node *s, uint64_t done, int force)
{
    if (!s->live || !s->run)
        return;
    if (done != s->snap->iteration)
        s_live_fill(s, done);
    else
        s_live_link(s, s->snap);
    node_live_publish(s->live, s->snap, force);
}

/* ---- the run loop's operations (node_round_ops; context: the s_node) ---- */

static void s_run_log(void *ctx, const char *msg)
{
    s_log(ctx, "%s", msg);
}

static void s_after_iter(void *ctx, uint64_t done)
{
    s_node *s = ctx;
    s_live_publish(s, done, 0);
    if (!s->ckpt_path[0] || s->ckpt_every <= 0 || done % (uint64_t)s->ckpt_every != 0)
        return;
    char err[1024];
    double k0 = nn_now();
    if (node_ckpt_save(s->ckpt_path, &s->ck, done, err, sizeof err) != 0)
        s_log(s, "checkpoint: %s", err);
    else if (done == (uint64_t)s->ckpt_every || done % ((uint64_t)s->ckpt_every * 10) == 0)
        s_log(s, "checkpoint %s at iteration %llu (%.3f s)", s->ckpt_path,
              (unsigned long long)done, nn_now() - k0);
    if (s->link)
        gossip_link_pump(s->link, 0);
}

/* Bounded staleness: skip the local step (a mix-only iteration) while some
 * live in-neighbour has already sent a later iteration than ours, so that
 * a slow node takes its (long) steps only when level with its neighbours,
 * which then have the whole S iterations of room and do not wait for it
 * (docs/gossip.md "Bounded staleness" has the argument); and while every
 * out-neighbour that is not an in-neighbour is ahead too (one behind us
 * waits for nothing of ours: gossip_link_out_lead). */
static int s_skip(void *ctx, const node_run *r, int i)
{
    s_node *s = ctx;
    const gossip_node *g = r->g[i];
    if (gossip_node_config(g)->staleness <= 0)
        return 0;
    s->skip.stale = gossip_node_config(g)->staleness;
    s->skip.pace = s->o->n.yield_pace;
    uint64_t ahead = gossip_node_ahead(g), out = gossip_link_out_lead(s->link, gossip_node_iter(g));
    int skip = node_skip_decide(&s->skip, &r->tm, out < ahead ? out : ahead, nn_now());
    if (skip && !s->skip.yielding) /* behind, not yielding the CPU */
        gossip_node_catch_up(r->g[i]);
    return skip;
}

/* A re-join after falling behind (gossip_link.h "Re-join"): the link took a
 * neighbour's model into x and moved to its round; the optimizer starts
 * afresh there as a joiner's does (zero momentum; --qgm: x as the previous
 * point).  The sampler goes on where it was (no fast-forward). */
static int s_catch_up(void *ctx, uint64_t *it, char *err, size_t errlen)
{
    s_node *s = ctx;
    const uint64_t H = (uint64_t)s->o->g.gossip_every;
    uint64_t round = *it / H;
    int rc = gossip_link_catch_up(s->link, &round, err, errlen);
    if (rc <= 0)
        return rc;
    nn_sgd *sgd = &s->k.tr[0].sgd;
    if (sgd->mom.data)
        memset(sgd->mom.data, 0, sizeof(float) * sgd->mom.numel);
    if (sgd->prev.data)
        memcpy(sgd->prev.data, s->k.x[0], sizeof(float) * sgd->prev.numel);
    *it = round * H;
    return 1;
}

/* The transport's counters as metrics keys (docs/node.md), in the order
 * of the metrics line, into c (room for NODE_LINK_COUNTS); their number. */
static size_t s_link_counts(node_count *c, const gossip_net_stats *ns,
                            const gossip_link_stats *ls)
{
    const node_count v[] = {
        {"bytes_sent", ns->bytes_sent},        {"bytes_recv", ns->bytes_recv},
        {"msgs_sent", ns->msgs_sent},          {"msgs_recv", ns->msgs_recv},
        {"rejected", ns->rejected_identity + ns->rejected_frames + ns->rejected_size +
                     ns->rejected_auth + ns->rejected_contested + ls->refused},
        {"rejected_contested", ns->rejected_contested},
        {"closed_silent", ns->closed_silent},
        {"rejected_auth", ns->rejected_auth},   {"refused_nonfinite", ls->refused_nonfinite},
        {"peers_down", ls->peers_down},        {"down_events", ls->down_events},
        {"back_events", ls->back_events},      {"resync_bytes_sent", ls->resync_bytes},
        {"resyncs_unsent", ls->resyncs_unsent},
        {"resyncs_repeated", ls->resyncs_repeated}, {"ctl_unsent", ls->ctl_unsent},
        {"isolated_rounds", ls->isolated_rounds},
        {"states_sent", ls->states_sent},      {"state_refused", ls->state_refused},
        {"joined", (uint64_t)ls->joined},      {"join_iter", ls->join_iter},
        {"fresh_waits", ls->fresh_waits},      {"fresh_missed", ls->fresh_missed},
        {"late_marks", ls->late_marks},        {"late_lifts", ls->late_lifts},
        {"wait_flow_ms", ls->wait_flow_ms},    {"wait_missing_ms", ls->wait_missing_ms},
        {"wait_held_ms", ls->wait_held_ms},    {"wait_gap_ms", ls->wait_gap_ms},
        {"wait_final_ms", ls->wait_final_ms},  {"wait_fresh_ms", ls->wait_fresh_ms},
        {"rejoins", ls->rejoins},              {"unproven", ls->unproven},
        {"proofs_unsent", ls->proofs_unsent},
        {"dropped_full", ls->dropped_full},    {"kept_full", ls->kept_full},
        {"kept_flight", ls->kept_flight},      {"acks_recv", ls->acks_recv},
        {"acks_expired", ls->acks_expired},    {"updates_deferred", ls->updates_deferred},
    };
    size_t n = sizeof v / sizeof v[0];
    _Static_assert(sizeof v / sizeof v[0] <= NODE_LINK_COUNTS, "NODE_LINK_COUNTS too small");
    memcpy(c, v, sizeof v);
    return n;
}

/* The per-neighbour staleness metrics of m (docs/node.md) from the run's
 * gossip node g. */
static void s_report_nb(s_node *s, gossip_node *g, node_metrics *m)
{
    int k = 0;
    for (int j = 0; j < s->t->n && k < TOPO_MAX_NODES; j++) {
        uint64_t lag, nofresh;
        if (gossip_node_peer_lag(g, j, &lag, &nofresh) != 0)
            continue;
        s->nb[k++] = (node_nb_metrics){j, lag, nofresh, gossip_link_peer_get(s->link, j).wait_s};
    }
    m->nnb = k;
    m->nb = s->nb;
    m->staleness = gossip_node_config(g)->staleness;
}

static void s_report(void *ctx, const node_run *r, node_metrics *m)
{
    s_node *s = ctx;
    if (s->live) {
        s->snap->evaluated = m->evaluated;
        s->snap->test_accuracy = m->test_acc;
        s->snap->test_loss = m->test_loss;
        s_live_publish(s, m->iter, 0);
    }
    s_report_nb(s, r->g[0], m);
    gossip_node_stats(r->g[0], &s->gs);
    if (s->net)
        gossip_net_stats_get(s->net, &s->ns);
    if (s->link)
        gossip_link_stats_get(s->link, &s->ls);
    m->gossip_bytes_sent = (double)s->gs.bytes_sent;
    m->gs = &s->gs;
    m->link = s->counts; /* zeros without sockets */
    m->nlink = s_link_counts(s->counts, &s->ns, &s->ls);
    char downs[64] = "";
    if (s->ls.peers_down)
        snprintf(downs, sizeof downs, "  %llu neighbour(s) down",
                 (unsigned long long)s->ls.peers_down);
    s_log(s, "iter %llu (epoch %.2f)  loss %.4f  test %s%.2f%%  psi %.4f  %.1fs%s",
          (unsigned long long)m->iter, m->epoch, m->loss,
          m->evaluated ? "" : "(not evaluated) ", 100 * (m->evaluated ? m->test_acc : 0),
          m->psi, m->seconds, downs);
}

/* With sockets: the gossip round over the link, serving between rounds. */
static const node_round_ops s_ops = {.round = s_round, .serve = s_serve, .catch_up = s_catch_up,
                                     .skip = s_skip, .after_iter = s_after_iter,
                                     .log = s_run_log, .report = s_report};
/* --no-gossip: local steps only (no round, nobody to catch up with). */
static const node_round_ops s_ops_solo = {.after_iter = s_after_iter, .log = s_run_log,
                                          .report = s_report};

/* ---- the command ---------------------------------------------------------- */

/* Ranks, gossip node, checkpoint (and --resume); -1 with a message, *usage
 * set for a bad configuration. */
static int s_prepare(s_node *s, uint64_t *it, int *usage, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    if (node_ranks_init(&s->k, &o->t, s->t->n, o->g.skew, s->me, 1, err, errlen) != 0) {
        *usage = node_model_file_error(&o->t.mo, err); /* the model file does not fit */
        return -1;
    }
    gossip_config gc = o->g.gc;
    const uint64_t H = (uint64_t)o->g.gossip_every; /* local steps per gossip round */
    gc.iters_per_epoch = (uint64_t)s->k.steps / H ? (uint64_t)s->k.steps / H : 1; /* rounds */
    *usage = 1;
    s->g = gossip_node_new(&gc, nn_model_params(s->k.tr[0].model), s->t, s->me, err, errlen);
    if (!s->g || s_ckpt_setup(s, err, errlen) != 0)
        return -1;
    if ((o->n.resume || o->n.ckpt_every > 0) && !o->g.out[0])
        return nn_errf(err, errlen, "--resume and --checkpoint-every need --out DIR "
                       "(checkpoints live there)");
    if (o->n.resume) {
        if (node_ckpt_load(s->ckpt_path, &s->ck, it, err, errlen) != 0)
            return -1;
        s_log(s, "resumed from %s at iteration %llu (psi %.6f)", s->ckpt_path,
              (unsigned long long)*it, gossip_node_psi(s->g));
    }
    *usage = 0;
    return 0;
}

static void s_banner(s_node *s)
{
    const node_opts *o = s->o;
    const gossip_config *gc = &o->g.gc;
    s_log(s, "node %s of %s (%d nodes), %s on %s; %s, compress %s, eta %g, push-sum %s, "
          "skew %g; %s (%zu parameters), %zu samples, %ld epochs x %ld iterations%s",
          s->t->nodes[s->me].id, o->g.topology, s->t->n, s->net ? "ROUTER" : "no gossip",
          s->net ? gossip_net_endpoint(s->net) : "-", gossip_algo_name(gc->algo),
          gc->compressor, gc->eta, gc->push_sum ? "on" : "off", o->g.skew,
          node_model_label(&o->t.mo), nn_model_params(s->k.tr[0].model)->numel,
          s->k.count[s->me], o->t.epochs, s->k.steps, o->t.no_eval ? ", no evaluation" : "");
}

/* After the start under `discovery: lan`: where each out-neighbour was
 * found. */
static void s_log_peers(s_node *s)
{
    char line[1024] = "";
    size_t used = 0;
    for (int j = 0; j < s->t->n && used < sizeof line; j++) {
        const char *ep = gossip_net_peer_endpoint(s->net, j);
        if (j != s->me && ep[0])
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s at %s",
                                     used ? ", " : "", s->t->nodes[j].id, ep);
    }
    s_log(s, "out-neighbours: %s", line[0] ? line : "none found");
}

/* The run loop from iteration it; fills r. */
static int s_loop(s_node *s, node_run *r, uint64_t it, char *err, size_t errlen)
{
    const node_opts *o = s->o;
    const uint64_t H = (uint64_t)o->g.gossip_every;
    *r = (node_run){.n = 1, .rank0 = s->me, .tr = s->k.tr, .x = s->k.x, .g = &s->g,
                    .d = &s->k.d, .o = &o->t, .steps = s->k.steps, .H = H, .it = it,
                    .iters = (uint64_t)s->k.steps * (uint64_t)o->t.epochs, .eval_nodes = 1,
                    .stop = &s_signals, .metrics = s->mf,
                    .ops = s->link ? &s_ops : &s_ops_solo, .ctx = s,
                    .slow = o->n.debug_slow};
    s->run = r;
    r->meta = (node_metrics){.command = "node", .rank = s->me, .nodes = s->t->n,
                             .model = node_model_label(&o->t.mo),
                             .precision = node_precision_name(o->t.mo.precision), .gossip = 1,
                             .algo = gossip_algo_name(o->g.gc.algo),
                             .compress = o->g.gc.compressor, .eta = o->g.gc.eta,
                             .skew = o->g.skew};
    uint64_t round = it / H; /* gossip rounds done */
    if (r->iters / H > 0) /* the last round drains what is late (--staleness) */
        gossip_node_sync_from(s->g, r->iters / H - 1);
    if (s->link && gossip_link_start(s->link, o->n.resume, &round, err, errlen) != 0) {
        s_discovery_hint(s, err, errlen);
        return -1;
    }
    if (s->link && s->t->discovery == TOPO_DISCOVERY_LAN)
        s_log_peers(s);
    gossip_link_stats ls;
    nn_sgd *sgd = &s->k.tr[0].sgd;
    if (s->link && (gossip_link_stats_get(s->link, &ls), ls.joined) && sgd->prev.data)
        memcpy(sgd->prev.data, s->k.x[0], sizeof(float) * sgd->prev.numel); /* --qgm: x_T */
    if (s->link && ls.joined)
        s_log(s, "joined at iteration %llu in %.2f s (model of rank %d; from the process "
              "start to the first local step)", (unsigned long long)(round * H),
              nn_now() - s_t_start, ls.join_from);
    if (round * H > r->it)
        r->it = round * H; /* rejoined further along: start that round's local steps */
    if (s->live)
        node_live_set_phase(s->live, NODE_LIVE_STEP);
    return node_run_loop(r, err, errlen);
}

/* The final model (the de-biased z = x/psi) in --out DIR and --save. */
static int s_save_model(s_node *s)
{
    const node_opts *o = s->o;
    nn_model *m = s->k.tr[0].model;
    char path[1200], err[1024];
    int saved = 0;
    gossip_node_debias(s->g, s->k.x[0], nn_model_params(m)->data);
    if (o->g.out[0]) {
        snprintf(path, sizeof path, "%s/model-%d.safetensors", o->g.out, s->me);
        if (node_model_save_data(path, m, &o->t.mo, &s->k.d, err, sizeof err) != 0)
            s_log(s, "%s", err);
        else
            saved = 1;
    }
    if (o->t.save[0] && (saved || !o->g.out[0])) {
        saved = node_model_save_data(o->t.save, m, &o->t.mo, &s->k.d, err, sizeof err) == 0;
        if (!saved)
            s_log(s, "%s", err);
    }
    return saved;
}

static void s_goodbye(s_node *s, uint64_t done, int failed, int saved, uint64_t skipped)
{
    double timeout = s->o->n.lc.timeout;
    /* after a failure, tell the others quickly and do not wait long */
    gossip_link_goodbye(s->link, done, failed ? (timeout < 2 ? timeout : 2) : timeout);
    if (s->skip.yielded)
        s_log(s, "yielded %llu local steps to keep the neighbours' pace (a local step %.3f s, "
              "their iteration %.3f s)", (unsigned long long)s->skip.yielded, s->skip.step_s,
              s->skip.period);
    gossip_net_stats ns;
    gossip_link_stats ls;
    gossip_net_stats_get(s->net, &ns);
    gossip_link_stats_get(s->link, &ls);
    s_log(s, "%llu iterations, sent %llu bytes in %llu messages, received %llu in %llu; "
          "refused %llu (transport %llu; %llu silent connections closed); neighbours lost %llu "
          "times, back %llu times, %llu down at the end; %llu RESYNCs sent (%llu bytes); %llu "
          "steps skipped%s",
          (unsigned long long)done, (unsigned long long)ns.bytes_sent,
          (unsigned long long)ns.msgs_sent, (unsigned long long)ns.bytes_recv,
          (unsigned long long)ns.msgs_recv, (unsigned long long)ls.refused,
          (unsigned long long)(ns.rejected_identity + ns.rejected_frames + ns.rejected_size +
                               ns.rejected_auth + ns.rejected_contested),
          (unsigned long long)ns.closed_silent, (unsigned long long)ls.down_events,
          (unsigned long long)ls.back_events,
          (unsigned long long)ls.peers_down, (unsigned long long)ls.resyncs_sent,
          (unsigned long long)ls.resync_bytes, (unsigned long long)skipped,
          saved ? "; model saved" : "");
}

/* After the loop: checkpoint on a signal, the model, BYE.  The exit code. */
static int s_finish(s_node *s, const node_run *r, int failed)
{
    const node_opts *o = s->o;
    char err[1024];
    uint64_t done = r->it; /* iterations whose mix completed */
    if (s->live) {
        s_live_publish(s, done, 1);
        node_live_set_phase(s->live, failed ? NODE_LIVE_FAILED
                                     : r->interrupted ? NODE_LIVE_STOPPED : NODE_LIVE_FINISHED);
    }
    if (r->interrupted && !failed && s->ckpt_path[0]) {
        if (node_ckpt_save(s->ckpt_path, &s->ck, done, err, sizeof err) != 0)
            s_log(s, "checkpoint: %s", err);
        else
            s_log(s, "checkpoint %s at iteration %llu (resume with --resume)", s->ckpt_path,
                  (unsigned long long)done);
    }
    int saved = s_save_model(s);
    if (s->link)
        s_goodbye(s, done, failed || r->interrupted, saved, r->skipped);
    if (r->interrupted) {
        s_log(s, "stopped by signal %d after %llu of %llu iterations%s", (int)s_last_signal,
              (unsigned long long)done, (unsigned long long)r->iters,
              saved ? " (model saved)" : "");
        return 1;
    }
    int ok = !failed && (saved || !(o->g.out[0] || o->t.save[0]));
    gossip_link_stats ls;
    if (ok && s->link) {
        gossip_link_stats_get(s->link, &ls);
        if (gossip_link_cut_off(&ls)) {
            s_log(s, "cut off: nothing of any of its %llu neighbours was mixed in the last %llu "
                  "iterations; this model trained alone and is not the run's (exit status 3: "
                  "leave it out of the average)", (unsigned long long)ls.neighbours,
                  (unsigned long long)ls.isolated_rounds);
            return NODE_EXIT_CUT_OFF;
        }
    }
    return ok ? 0 : 1;
}

static int s_run(s_node *s)
{
    char err[2048];
    int usage = 0;
    uint64_t it = 0;
    node_run r;
    int rc = s_files(s, err, sizeof err);
    if (rc == -2) { /* another process holds this rank and --out */
        fprintf(stderr, "lpgossip node %d: %s\n", s->me, err);
        return 2;
    }
    if (rc != 0 || s_prepare(s, &it, &usage, err, sizeof err) != 0 ||
        (!s->o->n.no_gossip && s_connect(s, err, sizeof err) != 0) ||
        s_live_start(s, err, sizeof err) != 0) {
        s_log(s, "%s", err);
        return usage ? 2 : 1;
    }
    s_banner(s);
    int failed = s_loop(s, &r, it, err, sizeof err) != 0;
    if (failed)
        s_log(s, "%s", err);
    return s_finish(s, &r, failed);
}

static void s_free(s_node *s)
{
    memset(s->curve_sec, 0, sizeof s->curve_sec);
    if (s->mf)
        fclose(s->mf);
    node_http_destroy(&s->http); /* before what it serves */
    node_live_destroy(&s->live);
    free(s->snap);
    gossip_link_destroy(&s->link);
    gossip_net_destroy(&s->net);
    gossip_node_destroy(&s->g);
    if (s->logf)
        fclose(s->logf);
    node_lock_destroy(&s->lock);
    node_ranks_free(&s->k);
    topo_destroy(&s->t);
}

static int s_node_cmd(const node_opts *o)
{
    s_node s;
    memset(&s, 0, sizeof s);
    s.o = o;
    char err[2048];
    node_set_threads((int)o->t.threads);
    if (s_topology(&s, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip node: %s\n", err);
        s_free(&s);
        return 2;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal; /* no SA_RESTART: waits return early */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    s_signals = 0;
    int rc = s_run(&s);
    s_free(&s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}

int node_cmd_node(int argc, char **argv)
{
    s_t_start = nn_now();
    return node_opts_main(NODE_CMD_NODE, argc, argv, s_node_cmd);
}
