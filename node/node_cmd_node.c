/* node_cmd_node — `lpgossip node`: one rank of a decentralized run as its
 * own OS process, gossiping over ZeroMQ (gossip_net) with the very same
 * algorithm object (gossip_node) and training code (node_trainer) as
 * `lpgossip simulate`, so both produce the same trajectory: same skew
 * partition and shard (node_shards_make), same initial weights (--seed),
 * same per-rank sampler seed, same learning rate per iteration (iterations
 * per epoch from shard 0, as simulate), same order of operations.
 *
 * Protocol (docs/node.md):
 *   start   HELLO barrier: every node sends HELLO (iteration 0, its layout
 *           fingerprint) to each out-neighbour, repeated after 0.2 s,
 *           0.4 s, ... (at most every 2 s) until that neighbour's ack (a
 *           HELLO sent back over the same connection) arrives, and acks
 *           every HELLO it receives.  The barrier is passed when every
 *           out-neighbour acked AND every in-neighbour said hello.  A
 *           DEALER queues what is sent before its peer is up and delivers
 *           it on connection, and after the ack the connection is known to
 *           be up: no gossip message is lost to the slow joiner.  A
 *           different fingerprint is refused on both sides, naming the peer.
 *   iterate t = 0..T-1: local step on z = x/psi; prepare; send the message
 *           to every destination; receive until gossip_node_ready(t)
 *           (bounded by --timeout); mix.  Messages up to GOSSIP_WINDOW-1
 *           iterations ahead go to gossip_node; further ahead (possible on
 *           long rings) they wait in a local stash, fed in after each mix.
 *   stop    each node sends BYE (iteration = iterations done) to its
 *           out-neighbours after its last message on the same connection,
 *           so a BYE ack proves the data arrived; it acks every BYE it
 *           gets and leaves once all out-neighbours acked its BYE and all
 *           in-neighbours said BYE (bounded; a missing ack is a warning,
 *           the model is saved before).  A BYE for fewer iterations than a
 *           node still needs from that peer fails that node at once.
 * Every wait is bounded by --timeout.  SIGINT/SIGTERM: finish the current
 * iteration, save (model and, with --out, the checkpoint), say BYE, exit 1
 * (a second signal aborts the wait).
 * Checkpoints (node_ckpt.h): --out DIR/ckpt-RANK.safetensors every
 * --checkpoint-every iterations (default once per epoch); --resume loads it
 * before the start barrier, whose HELLO then carries the resumed iteration
 * (a neighbour starting elsewhere is refused by name).
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
#include "gossip/gossip_net.h"
#include "gossip/gossip_node.h"
#include "node/node_ckpt.h"
#include "node/node_cmds.h"
#include "node/node_trainer.h"
#include "topology/topo.h"

#define S_HELLO_FIRST 0.2   /* seconds before the first HELLO repeat, doubling */
#define S_HELLO_MAX   2.0   /* ... up to this */
#define S_POLL_SLICE  200   /* ms: longest single wait (signals, checks) */

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
"  --bind ENDPOINT     bind the receiving socket here (e.g. tcp://*:5555)\n"
"                      instead of this node's endpoint in the topology\n"
"  --peer ID=ENDPOINT  endpoint of node ID (overrides the topology; repeatable)\n"
"  --timeout S         bound on every wait (start, each iteration, end) [60]\n"
"  --no-eval           no test-set evaluation (metrics still written at the end)\n"
"  --no-gossip         local SGD only, no communication (for timing)\n"
"  --checkpoint-every N  write --out DIR/ckpt-RANK.safetensors every N iterations\n"
"                      (atomic; default: once per epoch; 0: only on SIGINT/SIGTERM)\n"
"  --resume            continue from --out DIR/ckpt-RANK.safetensors (same flags;\n"
"                      all nodes must resume from the same iteration)\n\n");
    node_gossip_usage(f);
    fprintf(f, "\n");
    node_train_usage(f);
    fprintf(f, "  -h, --help\n\n"
"Files in --out DIR: model-RANK.safetensors (the de-biased model z),\n"
"metrics-RANK.jsonl (one JSON object per evaluation), log-RANK.txt.\n");
}

enum { N_CKPT_EVERY = 3100, N_RESUME };
enum { N_TOPO = 3000, N_RANK, N_BIND, N_PEER, N_TIMEOUT, N_NOEVAL, N_NOGOSSIP };

/* ---- run state ----------------------------------------------------------- */

typedef struct {
    uint8_t *bytes;
    size_t   len;
    uint64_t iter;
} s_early;

typedef struct {
    const topo   *t;
    int           rank, n;
    gossip_node  *g;
    gossip_net   *net;
    const nn_arena *layout;
    uint32_t      fp;
    FILE         *logf;
    int          *in, nin, *out, nout;
    char         *hello_in, *ack_out, *bye_in, *bye_ack;
    uint64_t     *got;       /* n: 1 + last iteration received from each peer */
    uint64_t     *bye_iter;  /* n: iterations announced in the peer's BYE */
    s_early      *stash;
    size_t        nstash, cap_stash, max_stash;
    uint64_t      refused;   /* messages refused by us or gossip_node */
    int           fatal;
    char          fatal_msg[1024];
    gossip_buf    ctl;
    double        timeout;
    uint64_t      start_iter; /* 0, or the iteration resumed from (in HELLO) */
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

static const char *s_id(const s_run *r, int j)
{
    return r->t->nodes[j].id;
}

/* "n1 (rank 1, tcp://...)" for every listed rank whose flag is 0. */
static void s_list_missing(const s_run *r, const int *ranks, int k, const char *flags,
                           char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int a = 0; a < k && o < len; a++) {
        int j = ranks[a];
        if (flags[j])
            continue;
        o += (size_t)snprintf(buf + o, len - o, "%s%s (rank %d, %s)", o ? ", " : "", s_id(r, j), j,
                              r->t->nodes[j].endpoint[0] ? r->t->nodes[j].endpoint : "no endpoint");
    }
}

static uint64_t s_rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t s_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int s_fatal(s_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int s_fatal(s_run *r, const char *fmt, ...)
{
    if (r->fatal)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fatal_msg, sizeof r->fatal_msg, fmt, ap);
    va_end(ap);
    r->fatal = 1;
    return -1;
}

static void s_refuse(s_run *r, const char *what)
{
    r->refused++;
    if (r->refused <= 20)
        s_log(r, "refused: %s%s", what, r->refused == 20 ? " (further refusals only counted)" : "");
}

static void s_send_control(s_run *r, int kind, int to, int reply, uint64_t iter)
{
    char err[512];
    gossip_msg_encode_control((uint8_t)kind, (uint32_t)r->rank, iter, r->fp, &r->ctl);
    int rc = reply ? gossip_net_reply(r->net, to, r->ctl.data, r->ctl.len, err, sizeof err)
                   : gossip_net_try_send(r->net, to, r->ctl.data, r->ctl.len, err, sizeof err);
    if (rc < 0)
        s_log(r, "%s", err);
}

/* Passes a GOSSIP message on to gossip_node (validated there). */
static void s_deliver(s_run *r, int from, const uint8_t *msg, size_t len, uint64_t iter)
{
    char err[1024];
    if (gossip_node_receive(r->g, msg, len, err, sizeof err) < 0) {
        s_refuse(r, err);
        return;
    }
    if (r->got[from] < iter + 1)
        r->got[from] = iter + 1;
}

/* Feeds stashed messages that are now inside gossip_node's window, in
 * arrival order. */
static void s_feed_stash(s_run *r)
{
    uint64_t cur = gossip_node_iter(r->g);
    size_t k = 0;
    for (size_t a = 0; a < r->nstash; a++) {
        s_early *e = &r->stash[a];
        if (e->iter < cur + GOSSIP_WINDOW) {
            int from = (int)s_rd32(e->bytes + 8);
            s_deliver(r, from, e->bytes, e->len, e->iter);
            free(e->bytes);
        } else {
            r->stash[k++] = *e;
        }
    }
    r->nstash = k;
}

/* One message from the transport (outside input: nothing is trusted). */
static void s_handle(s_run *r, int from, gossip_net_dir dir, const uint8_t *msg, size_t len)
{
    char err[1024];
    if (len < GOSSIP_HEADER_BYTES || s_rd32(msg) != GOSSIP_MAGIC) {
        snprintf(err, sizeof err, "%zu bytes from %s (rank %d) that are not an lpgossip message",
                 len, s_id(r, from), from);
        s_refuse(r, err);
        return;
    }
    unsigned kind = msg[5];
    uint32_t sender = s_rd32(msg + 8);
    uint64_t iter = s_rd64(msg + 12);
    if (sender != (uint32_t)from) {
        snprintf(err, sizeof err, "message from %s (rank %d) claims to come from rank %u",
                 s_id(r, from), from, sender);
        s_refuse(r, err);
        return;
    }
    if (kind == GOSSIP_MSG_GOSSIP) {
        if (dir != GOSSIP_NET_FROM_IN) {
            snprintf(err, sizeof err, "gossip message from out-neighbour %s (rank %d) on the "
                     "reply channel", s_id(r, from), from);
            s_refuse(r, err);
            return;
        }
        uint64_t cur = gossip_node_iter(r->g);
        if (iter >= cur + GOSSIP_WINDOW && iter < cur + (1u << 20)) {
            if (r->nstash >= r->max_stash) {
                s_fatal(r, "in-neighbour %s (rank %d) is more than %zu messages ahead "
                        "(iteration %llu, we are at %llu)", s_id(r, from), from, r->max_stash,
                        (unsigned long long)iter, (unsigned long long)cur);
                return;
            }
            if (r->nstash == r->cap_stash) {
                r->cap_stash = r->cap_stash ? 2 * r->cap_stash : 16;
                r->stash = nn_xrealloc(r->stash, r->cap_stash * sizeof *r->stash);
            }
            s_early *e = &r->stash[r->nstash++];
            e->bytes = nn_xmalloc(len);
            memcpy(e->bytes, msg, len);
            e->len = len;
            e->iter = iter;
            return;
        }
        s_deliver(r, from, msg, len, iter);
        return;
    }
    uint32_t fp = s_rd32(msg + 28);
    if (kind == GOSSIP_MSG_HELLO && fp != r->fp) {
        if (dir == GOSSIP_NET_FROM_IN) /* our ack carries our fingerprint: it fails too */
            s_send_control(r, GOSSIP_MSG_HELLO, from, 1, r->start_iter);
        s_fatal(r, "peer %s (rank %d, %s) runs a different model (layout fingerprint %08x, "
                "ours %08x): every node needs the same --model, --norm, --groups, --data and "
                "--pad-to", s_id(r, from), from, r->t->nodes[from].endpoint, fp, r->fp);
        return;
    }
    gossip_header h;
    if (gossip_msg_decode(msg, len, r->layout, &h, NULL, err, sizeof err) != 0) {
        char m[1280];
        snprintf(m, sizeof m, "control message from %s (rank %d): %s", s_id(r, from), from, err);
        s_refuse(r, m);
        return;
    }
    if (h.kind == GOSSIP_MSG_HELLO && h.iter != r->start_iter) {
        s_fatal(r, "peer %s (rank %d) starts at iteration %llu, we start at %llu: resume every "
                "node from checkpoints of the same iteration (or none)", s_id(r, from), from,
                (unsigned long long)h.iter, (unsigned long long)r->start_iter);
        return;
    }
    if (h.kind == GOSSIP_MSG_HELLO) {
        if (dir == GOSSIP_NET_FROM_IN) {
            r->hello_in[from] = 1;
            s_send_control(r, GOSSIP_MSG_HELLO, from, 1, r->start_iter);
        } else {
            r->ack_out[from] = 1;
        }
    } else if (h.kind == GOSSIP_MSG_BYE) {
        if (dir == GOSSIP_NET_FROM_IN) {
            r->bye_in[from] = 1;
            r->bye_iter[from] = h.iter;
            s_send_control(r, GOSSIP_MSG_BYE, from, 1, h.iter);
        } else {
            r->bye_ack[from] = 1;
        }
    } else {
        snprintf(err, sizeof err, "kind %u message from %s (rank %d): not supported yet",
                 h.kind, s_id(r, from), from);
        s_refuse(r, err);
    }
}

/* Receives and handles messages for at most `seconds`. 0, or -1 on a
 * transport error / fatal condition (message in r->fatal_msg). */
static int s_pump(s_run *r, double seconds)
{
    char err[1024];
    int ms = seconds <= 0 ? 0 : (int)(seconds * 1000.0 + 0.5);
    if (ms > S_POLL_SLICE)
        ms = S_POLL_SLICE;
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    int rc = gossip_net_recv(r->net, ms, &from, &dir, &msg, &len, err, sizeof err);
    if (rc < 0)
        return s_fatal(r, "%s", err);
    if (rc > 0) {
        s_handle(r, from, dir, msg, len);
        /* drain whatever else is already there without waiting */
        for (int k = 0; k < 64 && !r->fatal; k++) {
            rc = gossip_net_recv(r->net, 0, &from, &dir, &msg, &len, err, sizeof err);
            if (rc < 0)
                return s_fatal(r, "%s", err);
            if (rc == 0)
                break;
            s_handle(r, from, dir, msg, len);
        }
    }
    return r->fatal ? -1 : 0;
}

static int s_all(const int *ranks, int k, const char *flags)
{
    for (int a = 0; a < k; a++)
        if (!flags[ranks[a]])
            return 0;
    return 1;
}

/* The start barrier (see the top of the file). */
static int s_hello(s_run *r)
{
    double start = nn_now(), deadline = start + r->timeout, next = 0, every = S_HELLO_FIRST;
    while (!s_all(r->out, r->nout, r->ack_out) || !s_all(r->in, r->nin, r->hello_in)) {
        double now = nn_now();
        if (s_signals)
            return s_fatal(r, "interrupted (signal %d) while waiting for the neighbours",
                           (int)s_last_signal);
        if (now >= next) {
            for (int a = 0; a < r->nout; a++)
                if (!r->ack_out[r->out[a]])
                    s_send_control(r, GOSSIP_MSG_HELLO, r->out[a], 0, r->start_iter);
            next = now + every;
            every = every * 2 < S_HELLO_MAX ? every * 2 : S_HELLO_MAX;
        }
        if (now >= deadline) {
            char a[1024], b[1024];
            s_list_missing(r, r->in, r->nin, r->hello_in, a, sizeof a);
            s_list_missing(r, r->out, r->nout, r->ack_out, b, sizeof b);
            return s_fatal(r, "start barrier: no answer after %.0f s; in-neighbours that never "
                           "said hello: %s; out-neighbours that never acknowledged ours: %s "
                           "(are they started, with the same topology and endpoints?)",
                           r->timeout, a[0] ? a : "none", b[0] ? b : "none");
        }
        double until = next < deadline ? next : deadline;
        if (s_pump(r, until - now) != 0)
            return -1;
    }
    s_log(r, "start barrier passed in %.2f s (%d in-, %d out-neighbours)", nn_now() - start,
          r->nin, r->nout);
    return 0;
}

/* In-neighbours whose message for `iter` gossip_node still needs. */
static int s_needed(const s_run *r, const gossip_config *gc, uint64_t iter, int *out)
{
    if (gc->algo == GOSSIP_CHOCO)
        return topo_in_neighbors_any(r->t, r->rank, out);
    return topo_in_neighbors(r->t, iter, r->rank, out);
}

/* Waits until gossip_node has every message for iteration `iter`. */
static int s_wait_ready(s_run *r, const gossip_config *gc, uint64_t iter, int *scratch)
{
    double deadline = nn_now() + r->timeout;
    while (!gossip_node_ready(r->g, iter)) {
        if (r->fatal)
            return -1;
        if (s_signals > 1)
            return s_fatal(r, "interrupted twice while waiting for iteration %llu",
                           (unsigned long long)iter);
        int k = s_needed(r, gc, iter, scratch);
        for (int a = 0; a < k; a++) {
            int j = scratch[a];
            if (r->bye_in[j] && r->bye_iter[j] <= iter && r->got[j] <= iter)
                return s_fatal(r, "in-neighbour %s (rank %d) stopped after %llu iterations "
                               "(BYE); iteration %llu cannot complete", s_id(r, j), j,
                               (unsigned long long)r->bye_iter[j], (unsigned long long)iter);
        }
        double now = nn_now();
        if (now >= deadline) {
            char buf[1024];
            size_t o = 0;
            buf[0] = '\0';
            for (int a = 0; a < k && o < sizeof buf; a++) {
                int j = scratch[a];
                if (r->got[j] > iter)
                    continue;
                o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s (rank %d, %s, last message "
                                      "for iteration %lld)", o ? ", " : "", s_id(r, j), j,
                                      r->t->nodes[j].endpoint, (long long)r->got[j] - 1);
            }
            return s_fatal(r, "iteration %llu: no message after %.0f s from in-neighbours: %s",
                           (unsigned long long)iter, r->timeout, buf[0] ? buf : "(unknown)");
        }
        if (s_pump(r, deadline - now) != 0)
            return -1;
    }
    return 0;
}

/* Says BYE and waits (bounded) until every out-neighbour acked it and every
 * in-neighbour said BYE.  Problems are warnings: the model is saved. */
static void s_goodbye(s_run *r, uint64_t done, double wait_s, int blocking)
{
    char err[512];
    gossip_msg_encode_control(GOSSIP_MSG_BYE, (uint32_t)r->rank, done, r->fp, &r->ctl);
    for (int a = 0; a < r->nout; a++) {
        int rc = blocking ? gossip_net_send(r->net, r->out[a], r->ctl.data, r->ctl.len, err,
                                            sizeof err)
                          : gossip_net_try_send(r->net, r->out[a], r->ctl.data, r->ctl.len, err,
                                                sizeof err);
        if (rc < 0)
            s_log(r, "BYE: %s", err);
    }
    double deadline = nn_now() + wait_s;
    while (!s_all(r->out, r->nout, r->bye_ack) || !s_all(r->in, r->nin, r->bye_in)) {
        double now = nn_now();
        if (now >= deadline || s_signals > 1 || r->fatal) {
            char a[1024], b[1024];
            s_list_missing(r, r->out, r->nout, r->bye_ack, a, sizeof a);
            s_list_missing(r, r->in, r->nin, r->bye_in, b, sizeof b);
            s_log(r, "warning: leaving without BYE acks from %s and without BYE from %s",
                  a[0] ? a : "none", b[0] ? b : "none");
            if (r->fatal)
                s_log(r, "%s", r->fatal_msg);
            return;
        }
        if (s_pump(r, deadline - now) != 0)
            continue;
    }
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
                      double secs, const s_times *tm)
{
    gossip_net_stats ns;
    gossip_stats gs;
    memset(&ns, 0, sizeof ns);
    memset(&gs, 0, sizeof gs);
    if (net)
        gossip_net_stats_get(net, &ns);
    gossip_node_stats(g, &gs);
    char accbuf[64], lossbuf[64];
    snprintf(accbuf, sizeof accbuf, evaluated ? "%.6f" : "null", acc);
    snprintf(lossbuf, sizeof lossbuf, evaluated ? "%.6f" : "null", test_loss);
    fprintf(f, "{\"rank\":%d,\"iter\":%llu,\"epoch\":%.4f,\"loss\":%.6f,\"test_acc\":%s,"
            "\"test_loss\":%s,\"psi\":%.17g,\"bytes_sent\":%llu,\"bytes_recv\":%llu,"
            "\"msgs_sent\":%llu,\"msgs_recv\":%llu,\"gossip_bytes_sent\":%llu,"
            "\"gossip_bytes_recv\":%llu,\"gossip_msgs_sent\":%llu,\"rejected\":%llu,"
            "\"seconds\":%.3f,\"seconds_compute\":%.3f,\"seconds_compress\":%.3f,"
            "\"seconds_wait\":%.3f,\"seconds_mix\":%.3f}\n",
            rank, (unsigned long long)iter, (double)iter / (double)steps, loss, accbuf, lossbuf,
            gossip_node_psi(g), (unsigned long long)ns.bytes_sent,
            (unsigned long long)ns.bytes_recv, (unsigned long long)ns.msgs_sent,
            (unsigned long long)ns.msgs_recv, (unsigned long long)gs.bytes_sent,
            (unsigned long long)gs.bytes_recv, (unsigned long long)gs.msgs_sent,
            (unsigned long long)(ns.rejected_identity + ns.rejected_frames + ns.rejected_size),
            secs, tm->compute, tm->compress, tm->wait, tm->mix);
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
        {0, 0, 0, 0},
    };
    node_train_opts o;
    node_train_opts_defaults(&o);
    node_gossip_opts go;
    node_gossip_opts_defaults(&go);
    const char *topo_path = NULL, *bind = NULL;
    const char **peers = nn_xcalloc((size_t)argc + 1, sizeof *peers);
    int npeers = 0, no_eval = 0, no_gossip = 0;
    long rank = -1;
    double timeout = 60;
    long ckpt_every = -1; /* -1: once per epoch */
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
        case N_PEER: peers[npeers++] = optarg; break;
        case N_TIMEOUT:
            bad = node_parse_double("--timeout", optarg, 0.1, 1e6, &timeout, err, sizeof err)
                      ? 2 : 0;
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

    int rc = 1, have_shards = 0, interrupted = 0;
    const int n = t->n, me = (int)rank;
    s_run r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.rank = me;
    r.n = n;
    r.timeout = timeout;
    r.in = nn_xcalloc((size_t)n, sizeof(int));
    r.out = nn_xcalloc((size_t)n, sizeof(int));
    int *scratch = nn_xcalloc((size_t)n, sizeof(int));
    r.hello_in = nn_xcalloc((size_t)n, 1);
    r.ack_out = nn_xcalloc((size_t)n, 1);
    r.bye_in = nn_xcalloc((size_t)n, 1);
    r.bye_ack = nn_xcalloc((size_t)n, 1);
    r.got = nn_xcalloc((size_t)n, sizeof(uint64_t));
    r.bye_iter = nn_xcalloc((size_t)n, sizeof(uint64_t));
    r.nin = topo_in_neighbors_any(t, me, r.in);
    r.nout = topo_out_neighbors_any(t, me, r.out);
    r.max_stash = (size_t)(r.nin + 1) * (size_t)(2 * n + 2 * GOSSIP_WINDOW);
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
        snprintf(path, sizeof path, "%s/log-%d.txt", go.out, me);
        if (!(r.logf = fopen(path, "w"))) {
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
    if (path[0] && !(mf = fopen(path, o.metrics[0] ? "a" : "w"))) {
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
    r.layout = params;
    size_t dim = params->numel;
    x = nn_xalloc_aligned(dim * sizeof(float));
    memcpy(x, params->data, dim * sizeof(float));
    r.g = gossip_node_new(&go.gc, params, t, me, err, sizeof err);
    if (!r.g) {
        s_log(&r, "%s", err);
        rc = 2;
        goto done;
    }
    r.fp = gossip_node_fingerprint(r.g);
    /* Checkpoints: --out DIR/ckpt-RANK.safetensors; identity = what must
     * match to resume (docs/node.md). */
    char ckpt_path[1200] = "", id_topo[600], id_rank[32], id_fp[16], id_seed[32], id_batch[32],
         id_eta[64];
    snprintf(id_topo, sizeof id_topo, "%s (%d nodes)", t->name, n);
    snprintf(id_rank, sizeof id_rank, "%d", me);
    snprintf(id_fp, sizeof id_fp, "%08x", r.fp);
    snprintf(id_seed, sizeof id_seed, "%ld", o.seed);
    snprintf(id_batch, sizeof id_batch, "%ld", o.batch);
    snprintf(id_eta, sizeof id_eta, "%.17g", go.gc.eta);
    const char *ident[] = {"model", o.mo.model, "norm", o.mo.norm, "precision", o.mo.precision,
                           "layout", id_fp, "algo", gossip_algo_name(go.gc.algo),
                           "compressor", go.gc.compressor, "eta", id_eta,
                           "push_sum", go.gc.push_sum ? "on" : "off", "topology", id_topo,
                           "rank", id_rank, "seed", id_seed, "batch", id_batch, NULL};
    node_ckpt ck = {params, x, &tr.sgd, nn_model_buffers(tr.model), no_gossip ? NULL : r.g,
                    nn_model_rng(tr.model), &tr.aug_rng, &tr.sampler, ident};
    if (go.out[0])
        snprintf(ckpt_path, sizeof ckpt_path, "%s/ckpt-%d.safetensors", go.out, me);
    if ((resume || ckpt_every > 0) && !go.out[0]) {
        s_log(&r, "--resume and --checkpoint-every need --out DIR (checkpoints live there)");
        rc = 2;
        goto done;
    }
    if (resume) {
        uint64_t at = 0;
        if (node_ckpt_load(ckpt_path, &ck, &at, err, sizeof err) != 0) {
            s_log(&r, "%s", err);
            rc = 2;
            goto done;
        }
        r.start_iter = at;
        s_log(&r, "resumed from %s at iteration %llu (psi %.6f)", ckpt_path,
              (unsigned long long)at, gossip_node_psi(r.g));
    }
    if (!no_gossip) {
        gossip_net_config nc;
        gossip_net_config_default(&nc);
        nc.bind = bind;
        nc.max_msg = gossip_net_max_msg_size(params);
        nc.send_timeout_ms = (int)(timeout * 1000 > 2e9 ? 2e9 : timeout * 1000);
        nc.log = r.logf ? r.logf : stderr;
        r.net = gossip_net_new(t, me, &nc, err, sizeof err);
        if (!r.net) {
            s_log(&r, "%s", err);
            goto done;
        }
    }
    /* Iterations per epoch from shard 0, exactly as simulate. */
    long steps = (long)((count[0] + (size_t)o.batch - 1) / (size_t)o.batch);
    uint64_t iters = (uint64_t)(steps * o.epochs);
    long eval_every = go.eval_every > 0 ? go.eval_every : steps;
    s_log(&r, "node %s of %s (%d nodes), %s on %s; %s, compress %s, eta %g, push-sum %s, "
          "skew %g; %s (%zu parameters), %zu samples, %ld epochs x %ld iterations%s",
          t->nodes[me].id, topo_path, n, r.net ? "ROUTER" : "no gossip",
          r.net ? gossip_net_endpoint(r.net) : "-", gossip_algo_name(go.gc.algo),
          go.gc.compressor, go.gc.eta, go.gc.push_sum ? "on" : "off", go.skew, o.mo.model, dim,
          count[me], o.epochs, steps, no_eval ? ", no evaluation" : "");

    if (r.net && s_hello(&r) != 0) {
        s_log(&r, "%s", r.fatal_msg);
        goto done;
    }
    s_times tm = {0, 0, 0, 0};
    double t0 = nn_now();
    uint64_t it = r.start_iter;
    int failed = 0;
    long ckpt_n = ckpt_every < 0 ? steps : ckpt_every;
    for (; it < iters; it++) {
        if (s_signals) {
            interrupted = 1;
            break;
        }
        float lr = node_lr_at_iter(&o, it, steps);
        double a = nn_now();
        float loss = node_gossip_local_step(&tr, &d, r.g, x, lr);
        double b = nn_now();
        tm.compute += b - a;
        if (!isfinite(loss)) {
            s_log(&r, "loss is %f at iteration %llu (lr %g): training diverged; try a smaller "
                  "--lr or --eta", loss, (unsigned long long)it, lr);
            failed = 1;
            break;
        }
        if (r.net) {
            if (gossip_node_prepare(r.g, x, it, err, sizeof err) != 0) {
                s_log(&r, "iteration %llu: %s", (unsigned long long)it, err);
                failed = 1;
                break;
            }
            double c0 = nn_now();
            tm.compress += c0 - b;
            int to;
            const uint8_t *msg;
            size_t len;
            for (int k = 0; (len = gossip_node_outbox(r.g, k, &to, &msg)) > 0; k++)
                if (gossip_net_send(r.net, to, msg, len, err, sizeof err) != 0) {
                    s_fatal(&r, "iteration %llu: %s", (unsigned long long)it, err);
                    break;
                }
            if (r.fatal || s_wait_ready(&r, &go.gc, it, scratch) != 0) {
                s_log(&r, "%s", r.fatal_msg);
                failed = 1;
                break;
            }
            double m0 = nn_now();
            tm.wait += m0 - c0;
            if (gossip_node_mix(r.g, x, it, err, sizeof err) != 0) {
                s_log(&r, "iteration %llu: %s", (unsigned long long)it, err);
                failed = 1;
                break;
            }
            nn_sgd_after_mix(&tr.sgd, x);
            s_feed_stash(&r);
            tm.mix += nn_now() - m0;
            if (r.fatal) {
                s_log(&r, "%s", r.fatal_msg);
                failed = 1;
                it++;
                break;
            }
        }
        if (ckpt_path[0] && ckpt_n > 0 && (it + 1) % (uint64_t)ckpt_n == 0) {
            double k0 = nn_now();
            if (node_ckpt_save(ckpt_path, &ck, it + 1, err, sizeof err) != 0)
                s_log(&r, "checkpoint: %s", err);
            else if (it + 1 == (uint64_t)ckpt_n || (it + 1) % ((uint64_t)ckpt_n * 10) == 0)
                s_log(&r, "checkpoint %s at iteration %llu (%.3f s)", ckpt_path,
                      (unsigned long long)(it + 1), nn_now() - k0);
        }
        int last = it + 1 == iters;
        if (!((it + 1) % (uint64_t)eval_every == 0 || last) || (no_eval && !last))
            continue;
        gossip_node_debias(r.g, x, params->data);
        double acc = 0, test_loss = 0;
        if (!no_eval)
            acc = node_evaluate(tr.model, &d, &d.test, (int)o.batch, &test_loss);
        double train_loss = tr.seen ? tr.loss_sum / (double)tr.seen : 0.0;
        node_trainer_reset_stats(&tr);
        s_log(&r, "iter %llu (epoch %.2f)  loss %.4f  test %s%.2f%%  psi %.4f  %.1fs",
              (unsigned long long)(it + 1), (double)(it + 1) / (double)steps, train_loss,
              no_eval ? "(not evaluated) " : "", 100 * acc, gossip_node_psi(r.g), nn_now() - t0);
        if (mf)
            s_metrics(mf, me, it + 1, steps, train_loss, !no_eval, acc, test_loss, r.net, r.g,
                      nn_now() - t0, &tm);
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
    gossip_node_debias(r.g, x, params->data);
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
    if (r.net) {
        /* after a failure, tell the others quickly and do not wait long */
        double wait = failed || interrupted ? (timeout < 2 ? timeout : 2) : timeout;
        r.fatal = 0;
        s_goodbye(&r, done_iters, wait, !(failed || interrupted));
    }
    if (r.net) {
        gossip_net_stats ns;
        gossip_net_stats_get(r.net, &ns);
        s_log(&r, "%llu iterations, sent %llu bytes in %llu messages, received %llu in %llu; "
              "refused %llu (transport %llu)%s", (unsigned long long)done_iters,
              (unsigned long long)ns.bytes_sent, (unsigned long long)ns.msgs_sent,
              (unsigned long long)ns.bytes_recv, (unsigned long long)ns.msgs_recv,
              (unsigned long long)r.refused,
              (unsigned long long)(ns.rejected_identity + ns.rejected_frames + ns.rejected_size),
              saved ? "; model saved" : "");
    }
    if (interrupted)
        s_log(&r, "stopped by signal %d after %llu of %llu iterations%s", (int)s_last_signal,
              (unsigned long long)done_iters, (unsigned long long)iters,
              saved ? " (model saved)" : "");
    else if (!failed && (saved || !(go.out[0] || o.save[0])))
        rc = 0;
done:
    if (mf)
        fclose(mf);
    gossip_net_destroy(&r.net);
    gossip_node_destroy(&r.g);
    if (r.logf)
        fclose(r.logf);
    for (size_t a = 0; a < r.nstash; a++)
        free(r.stash[a].bytes);
    free(r.stash);
    gossip_buf_free(&r.ctl);
    free(x);
    node_trainer_free(&tr);
    if (have_shards)
        nn_partition_free(shard, n);
    free(shard);
    free(count);
    node_data_free(&d);
    free(r.in);
    free(r.out);
    free(scratch);
    free(r.hello_in);
    free(r.ack_out);
    free(r.bye_in);
    free(r.bye_ack);
    free(r.got);
    free(r.bye_iter);
    topo_destroy(&t);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
