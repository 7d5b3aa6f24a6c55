/* node_cmd_watch — `lpgossip watch`: a live terminal view of a whole run.
 * Polls every node's /status (node_watch.h) every --interval seconds, all
 * nodes at once within --timeout, and redraws one row per node plus the
 * run's progress bar and ETA.
 *
 * Where the nodes are: a list of HOST:PORT (their --metrics-port), or a
 * topology file whose nodes were started with --metrics-port +K: a node's
 * metrics port is then the port of its endpoint + K (--offset K, default
 * 1000), on the endpoint's host.  With `discovery: lan` the topology has no
 * endpoints: watch listens to the nodes' UDP beacons on its discovery_port
 * (gossip_discovery.h; any run's, or only --run ID's) and takes the
 * source address and announced TCP port + K of each rank.
 *
 * States: training, waiting (in a gossip round for over a second, or
 * before the start), finished / stopped / failed (what the node said), down
 * (no answer to the last poll; "finished" stays when it said so before).
 * It ends (status 0) once some node answered and none is training or
 * waiting any more (each finished, stopped, failed or down), after --count
 * polls, or on SIGINT/SIGTERM.
 */
#include <czmq.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gossip/gossip_discovery.h"
#include "nn/nn_core.h"
#include "node/node_cmds.h"
#include "node/node_common.h"
#include "node/node_watch.h"
#include "topology/topo.h"

static volatile sig_atomic_t s_stop = 0;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

typedef struct {
    double   interval, timeout;
    long     offset, count;
    int      once, line;
    uint64_t run;         /* --run ID (lan), 0: the first run heard */
    int      n;
    node_watch_target *t; /* [n] */
    topo    *topo;        /* a topology with `discovery: lan`, else NULL */
    zactor_t *beacon;     /* its listener */
} s_watch;

static const char s_help[] =
"usage: lpgossip watch [options] TOPOLOGY.yaml | HOST:PORT...\n"
"A live view of a run: polls every node's /status (lpgossip node --metrics-port)\n"
"and redraws one row per node and the run's progress with an ETA.\n"
"  TOPOLOGY.yaml       the run's topology; start its nodes with --metrics-port +K:\n"
"                      a node's metrics are at its endpoint's host, port + K\n"
"                      (with `discovery: lan`: found by their UDP beacons)\n"
"  HOST:PORT...        or the nodes' metrics addresses, one by one\n"
"  --offset K          the K of --metrics-port +K [1000]\n"
"  --interval S        seconds between polls [0.5]\n"
"  --timeout S         how long one poll waits for the nodes [0.4]\n"
"  --once              poll once, print the table, exit (0: every node answered)\n"
"  --line              one progress line per poll instead of the table\n"
"  --count N           stop after N polls [0: when every node has finished]\n"
"  --run ID            with `discovery: lan`: only this run (hex, as nodes log it)\n";

/* ---- targets ------------------------------------------------------------- */

/* tcp://HOST:PORT of a topology node into "HOST:PORT+offset". */
static int s_from_endpoint(s_watch *w, const char *ep, const char *id, node_watch_target *t,
                           char *err, size_t errlen)
{
    const char *hp = strncmp(ep, "tcp://", 6) ? NULL : ep + 6;
    const char *colon = hp ? strrchr(hp, ':') : NULL;
    if (!colon)
        return nn_errf(err, errlen, "node %s: endpoint '%s' is not tcp://HOST:PORT", id, ep);
    long port = strtol(colon + 1, NULL, 10) + w->offset;
    char host[96], spec[128];
    snprintf(host, sizeof host, "%.*s", (int)(colon - hp), hp);
    if (!strcmp(host, "*") || !strcmp(host, "0.0.0.0"))
        snprintf(host, sizeof host, "127.0.0.1");
    snprintf(spec, sizeof spec, "%s:%ld", host, port);
    if (node_watch_target_init(t, spec, err, errlen) != 0)
        return -1;
    return 0;
}

/* The nodes of a topology file; 0 or -1 with a message. */
static int s_from_topology(s_watch *w, const char *path, char *err, size_t errlen)
{
    topo *t = topo_load(path, err, errlen);
    if (!t)
        return -1;
    w->n = t->n;
    w->t = nn_xcalloc((size_t)t->n, sizeof *w->t);
    for (int i = 0; i < t->n; i++) {
        node_watch_target *x = &w->t[i];
        if (t->nodes[i].endpoint[0]) {
            if (s_from_endpoint(w, t->nodes[i].endpoint, t->nodes[i].id, x, err, errlen) != 0)
                break;
            continue;
        }
        if (t->discovery != TOPO_DISCOVERY_LAN) {
            nn_errf(err, errlen, "%s: node %s has no endpoint (give the nodes' HOST:PORT "
                    "instead)", path, t->nodes[i].id);
            break;
        }
        char tmp[8];
        node_watch_target_init(x, "", tmp, sizeof tmp); /* the empty row, found later */
        snprintf(x->label, sizeof x->label, "%s: ?", t->nodes[i].id);
    }
    if (err[0]) {
        topo_destroy(&t);
        return -1;
    }
    if (t->discovery == TOPO_DISCOVERY_LAN)
        w->topo = t;
    else
        topo_destroy(&t);
    return 0;
}

/* ---- LAN beacons ----------------------------------------------------------- */

static int s_listen(s_watch *w, char *err, size_t errlen)
{
    zsys_handler_set(NULL);
    w->beacon = zactor_new(zbeacon, NULL);
    if (!w->beacon)
        return nn_errf(err, errlen, "cannot start a UDP beacon listener");
    zsock_set_rcvtimeo(w->beacon, 5000);
    zsock_send(w->beacon, "si", "CONFIGURE", w->topo->discovery_port);
    char *host = zstr_recv(w->beacon);
    int ok = host && host[0];
    zstr_free(&host);
    if (!ok)
        return nn_errf(err, errlen, "cannot listen for beacons on UDP port %d",
                       w->topo->discovery_port);
    zsock_send(w->beacon, "sb", "SUBSCRIBE", GOSSIP_DISC_MAGIC, (size_t)4);
    return 0;
}

/* What the beacons said since the last poll: rows of ranks found. */
static void s_drain_beacons(s_watch *w)
{
    zsock_set_rcvtimeo(w->beacon, 0);
    char *ip;
    zframe_t *f;
    while (zsock_recv(w->beacon, "sf", &ip, &f) == 0) {
        gossip_disc_msg m;
        char why[64], spec[96], err[160];
        if (f && gossip_disc_decode(zframe_data(f), zframe_size(f), &m, why, sizeof why) == 0 &&
            m.rank < (uint32_t)w->n && (!w->run || m.run_id == w->run)) {
            w->run = m.run_id; /* the first run heard, unless --run */
            node_watch_target *t = &w->t[m.rank];
            snprintf(spec, sizeof spec, "%s:%ld", ip, (long)m.port + w->offset);
            if (strcmp(spec, t->label) && (long)m.port + w->offset <= 65535) {
                node_watch_target fresh;
                if (node_watch_target_init(&fresh, spec, err, sizeof err) == 0)
                    *t = fresh;
            }
        }
        zstr_free(&ip);
        zframe_destroy(&f);
    }
}

/* ---- drawing --------------------------------------------------------------- */

static void s_bar(char *out, size_t len, double done)
{
    int w = 30, k = (int)(done * w + 0.5);
    size_t o = 0;
    out[o++] = '[';
    for (int i = 0; i < w && o + 2 < len; i++)
        out[o++] = i < k ? '#' : '.';
    out[o++] = ']';
    out[o] = '\0';
}

static void s_eta(char *out, size_t len, double eta)
{
    if (isnan(eta))
        snprintf(out, len, "ETA ?");
    else
        snprintf(out, len, "ETA %d:%02d:%02d", (int)(eta / 3600), (int)fmod(eta / 60, 60),
                 (int)fmod(eta, 60));
}

/* The progress line: bar, percent, ETA, how many in each state. */
static void s_progress(const s_watch *w, FILE *f)
{
    double done, eta;
    node_watch_progress(w->t, w->n, &done, &eta);
    static const char *const states[] = {"training", "waiting", "down", "finished"};
    int cnt[4] = {0, 0, 0, 0};
    for (int i = 0; i < w->n; i++)
        for (int k = 0; k < 4; k++)
            cnt[k] += !strcmp(w->t[i].state, states[k]);
    char bar[40], e[32];
    s_bar(bar, sizeof bar, done);
    s_eta(e, sizeof e, eta);
    fprintf(f, "%s %5.1f%%  %s  %d training, %d waiting, %d down, %d finished (%d nodes)\n",
            bar, 100 * done, e, cnt[0], cnt[1], cnt[2], cnt[3], w->n);
}

static void s_row(const node_watch_target *t, FILE *f)
{
    char it[48] = "-", ep[16] = "-", loss[16] = "-", acc[16] = "-", mb[16] = "-", pu[16] = "-",
         slow[80] = "-";
    if (t->seen) {
        snprintf(it, sizeof it, "%llu/%llu", (unsigned long long)t->iteration,
                 (unsigned long long)t->iterations);
        snprintf(ep, sizeof ep, "%.2f", t->epoch);
        if (isfinite(t->loss))
            snprintf(loss, sizeof loss, "%.4f", t->loss);
        if (isfinite(t->accuracy))
            snprintf(acc, sizeof acc, "%.2f%%", 100 * t->accuracy);
        snprintf(mb, sizeof mb, "%.1f", t->mb_sent);
        snprintf(pu, sizeof pu, "%d/%d", t->peers_up, t->neighbours);
        if (t->slowest[0])
            snprintf(slow, sizeof slow, "%s (%llu)", t->slowest,
                     (unsigned long long)t->slowest_staleness);
    }
    char rank[16] = "-";
    if (t->seen)
        snprintf(rank, sizeof rank, "%d", t->rank);
    fprintf(f, "%4s %-8.8s %-21.21s %13s %6s %8s %7s %9s %5s %-12.12s %s%s%s\n", rank,
            t->seen ? t->node : "-", t->label, it, ep, loss, acc, mb, pu, slow, t->state,
            t->answered || !t->error[0] ? "" : ": ", t->answered ? "" : t->error);
}

static void s_draw(const s_watch *w, int tty)
{
    FILE *f = stdout;
    if (w->line) {
        s_progress(w, f);
        fflush(f);
        return;
    }
    if (tty)
        fputs("\033[H\033[J", f); /* home, clear */
    time_t now = time(NULL);
    char ts[32];
    strftime(ts, sizeof ts, "%H:%M:%S", localtime(&now));
    fprintf(f, "lpgossip watch  %s  run %s\n", ts, w->n && w->t[0].run[0] ? w->t[0].run : "?");
    fprintf(f, "%4s %-8s %-21s %13s %6s %8s %7s %9s %5s %-12s %s\n", "rank", "node",
            "metrics", "iteration", "epoch", "loss", "acc", "MB sent", "peers",
            "slowest(st)", "state");
    for (int i = 0; i < w->n; i++)
        s_row(&w->t[i], f);
    s_progress(w, f);
    fflush(f);
}

/* ---- the command ------------------------------------------------------------ */

/* The run is over: some node answered once, and none is training or
 * waiting now (every one finished, stopped, failed or down). */
static int s_ended(const s_watch *w)
{
    int seen = 0;
    for (int i = 0; i < w->n; i++) {
        if (!strcmp(w->t[i].state, "training") || !strcmp(w->t[i].state, "waiting"))
            return 0;
        seen |= w->t[i].seen;
    }
    return seen;
}

/* Polls and draws until the run ended (0), --count, --once or a signal. */
static int s_loop(s_watch *w)
{
    int tty = isatty(STDOUT_FILENO), all = 0;
    char **body = nn_xcalloc((size_t)w->n, sizeof *body);
    for (long k = 0; !s_stop; k++) {
        double t0 = nn_now();
        if (w->beacon)
            s_drain_beacons(w);
        node_watch_poll(w->t, w->n, "/status", w->timeout, body);
        all = 1;
        for (int i = 0; i < w->n; i++) {
            node_watch_update(&w->t[i], body[i]);
            all &= w->t[i].answered;
            free(body[i]);
        }
        s_draw(w, tty && !w->once);
        if (w->once || s_ended(w) || (w->count > 0 && k + 1 >= w->count))
            break;
        double left = w->interval - (nn_now() - t0);
        if (left > 0)
            nanosleep(&(struct timespec){(time_t)left, (long)(fmod(left, 1) * 1e9)}, NULL);
    }
    free(body);
    return w->once ? !all : 0;
}

/* Flags into w; the index of the first operand, or -(exit code). */
static int s_flags(s_watch *w, int argc, char **argv, char *err, size_t errlen)
{
    static const struct option opts[] = {
        {"offset", 1, 0, 'o'}, {"interval", 1, 0, 'i'}, {"timeout", 1, 0, 't'},
        {"once", 0, 0, '1'},   {"line", 0, 0, 'l'},     {"count", 1, 0, 'c'},
        {"run", 1, 0, 'r'},    {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rc = 0;
        char *end;
        switch (c) {
        case 'o': rc = node_parse_int("--offset", optarg, 0, 65535, &w->offset, err, errlen); break;
        case 'i':
            rc = node_parse_double("--interval", optarg, 0.05, 3600, &w->interval, err, errlen);
            break;
        case 't':
            rc = node_parse_double("--timeout", optarg, 0.01, 60, &w->timeout, err, errlen);
            break;
        case 'c': rc = node_parse_int("--count", optarg, 0, 1L << 40, &w->count, err, errlen); break;
        case '1': w->once = 1; break;
        case 'l': w->line = 1; break;
        case 'r':
            w->run = strtoull(optarg, &end, 16);
            if (!optarg[0] || *end)
                rc = nn_errf(err, errlen, "--run '%s': expected the hex run id", optarg);
            break;
        case 'h': fputs(s_help, stdout); return 0;
        default: return -2;
        }
        if (rc)
            return -2;
    }
    if (optind >= argc) {
        nn_errf(err, errlen, "give a topology file or the nodes' HOST:PORT (see --help)");
        return -2;
    }
    return optind;
}

/* The operands: one topology file, or HOST:PORT each. */
static int s_targets(s_watch *w, int argc, char **argv, int first, char *err, size_t errlen)
{
    if (argc - first == 1 && access(argv[first], R_OK) == 0)
        return s_from_topology(w, argv[first], err, errlen);
    w->n = argc - first;
    w->t = nn_xcalloc((size_t)w->n, sizeof *w->t);
    for (int i = 0; i < w->n; i++)
        if (node_watch_target_init(&w->t[i], argv[first + i], err, errlen) != 0)
            return -1;
    return 0;
}

int node_cmd_watch(int argc, char **argv)
{
    s_watch w = {.interval = 0.5, .timeout = 0.4, .offset = 1000};
    char err[512] = "";
    int first = s_flags(&w, argc, argv, err, sizeof err), rc = 2;
    if (first == 0 && !err[0])
        return 0; /* --help */
    if (first > 0 && s_targets(&w, argc, argv, first, err, sizeof err) == 0 &&
        (!w.topo || s_listen(&w, err, sizeof err) == 0)) {
        struct sigaction sa = {.sa_handler = s_on_signal}, old_int, old_term;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        rc = s_loop(&w);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    if (rc == 2)
        fprintf(stderr, "lpgossip watch: %s\n", err[0] ? err : "see --help");
    zactor_destroy(&w.beacon);
    topo_destroy(&w.topo);
    free(w.t);
    return rc;
}
