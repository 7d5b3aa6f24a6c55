/* node_live — see node_live.h. */
#include "node/node_live.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"

struct node_live {
    pthread_mutex_t mu;
    node_live_snap  snap;        /* under mu */
    _Atomic int     phase;
    _Atomic double  phase_since; /* nn_now() when phase was set */
};

node_live *node_live_new(const node_live_snap *first)
{
    node_live *l = nn_xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    l->snap = *first;
    atomic_store(&l->phase, NODE_LIVE_STARTING);
    atomic_store(&l->phase_since, nn_now());
    return l;
}

void node_live_destroy(node_live **self_p)
{
    if (!self_p || !*self_p)
        return;
    pthread_mutex_destroy(&(*self_p)->mu);
    free(*self_p);
    *self_p = NULL;
}

int node_live_publish(node_live *l, const node_live_snap *s, int force)
{
    if (force)
        pthread_mutex_lock(&l->mu);
    else if (pthread_mutex_trylock(&l->mu) != 0)
        return 0;
    l->snap = *s;
    pthread_mutex_unlock(&l->mu);
    return 1;
}

void node_live_set_phase(node_live *l, node_live_phase p)
{
    if (atomic_load(&l->phase) == (int)p)
        return;
    atomic_store(&l->phase_since, nn_now());
    atomic_store(&l->phase, (int)p);
}

void node_live_read(node_live *l, node_live_snap *out, node_live_phase *phase, double *phase_s)
{
    pthread_mutex_lock(&l->mu);
    *out = l->snap;
    pthread_mutex_unlock(&l->mu);
    *phase = (node_live_phase)atomic_load(&l->phase);
    *phase_s = nn_now() - atomic_load(&l->phase_since);
}

const char *node_live_state(node_live_phase p, double phase_s)
{
    switch (p) {
    case NODE_LIVE_STARTING: return "waiting";
    case NODE_LIVE_GOSSIP: return phase_s > NODE_LIVE_WAITING_S ? "waiting" : "training";
    case NODE_LIVE_FINISHED: return "finished";
    case NODE_LIVE_STOPPED: return "stopped";
    case NODE_LIVE_FAILED: return "failed";
    default: return "training";
    }
}

static const double s_bounds[NODE_LIVE_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                   0.25,  0.5,    1,     2.5,  5,     10,   30};

const double *node_live_bounds(void)
{
    return s_bounds;
}

void node_live_observe(node_live_hist *h, double seconds)
{
    if (!(seconds >= 0)) /* NaN or a clock step back */
        seconds = 0;
    size_t b = 0;
    while (b < NODE_LIVE_BUCKETS && seconds > s_bounds[b])
        b++;
    h->bucket[b]++;
    h->count++;
    h->sum += seconds;
}

/* ---- a growing text buffer ---------------------------------------------- */

typedef struct {
    char  *p;
    size_t len, cap;
} s_buf;

__attribute__((format(printf, 2, 3)))
static void s_add(s_buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        assert(n >= 0);
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = 2 * b->cap + (size_t)n;
        b->p = nn_xrealloc(b->p, b->cap);
    }
}

static void s_init(s_buf *b)
{
    b->cap = 8192;
    b->len = 0;
    b->p = nn_xmalloc(b->cap);
    b->p[0] = '\0';
}

/* A label value (Prometheus) or string (JSON) with \, " and control
 * characters escaped. */
static void s_escaped(s_buf *b, const char *v, int json)
{
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '\\' || *c == '"')
            s_add(b, "\\%c", *c);
        else if (*c == '\n')
            s_add(b, "\\n");
        else if (*c < 0x20)
            s_add(b, json ? "\\u%04x" : "?", *c);
        else
            s_add(b, "%c", *c);
    }
}

/* ---- Prometheus exposition ------------------------------------------------ */

static void s_head(s_buf *b, const char *name, const char *type, const char *help)
{
    s_add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{run="..",node="..",rank="..",extra} */
static void s_labels(s_buf *b, const node_live_snap *s, const char *name, const char *extra)
{
    s_add(b, "%s{run=\"%s\",node=\"", name, s->run);
    s_escaped(b, s->node, 0);
    s_add(b, "\",rank=\"%d\"%s%s}", s->rank, extra && extra[0] ? "," : "", extra ? extra : "");
}

static void s_value(s_buf *b, double v)
{
    if (isnan(v))
        s_add(b, " NaN\n");
    else if (isinf(v))
        s_add(b, v > 0 ? " +Inf\n" : " -Inf\n");
    else
        s_add(b, " %.17g\n", v);
}

static void s_metric(s_buf *b, const node_live_snap *s, const char *name, const char *type,
                     const char *help, double v)
{
    s_head(b, name, type, help);
    s_labels(b, s, name, NULL);
    s_value(b, v);
}

static void s_hist(s_buf *b, const node_live_snap *s)
{
    static const char *const phases[NODE_LIVE_NPHASES] = {"compute", "compress", "wait", "mix"};
    s_head(b, "lpgossip_step_seconds", "histogram",
           "Seconds of one iteration's phase: compute (local step), compress, wait, mix.");
    for (int p = 0; p < NODE_LIVE_NPHASES; p++) {
        const node_live_hist *h = &s->step[p];
        uint64_t cum = 0;
        char extra[96];
        for (int k = 0; k <= NODE_LIVE_BUCKETS; k++) {
            cum += h->bucket[k];
            if (k < NODE_LIVE_BUCKETS)
                snprintf(extra, sizeof extra, "phase=\"%s\",le=\"%g\"", phases[p], s_bounds[k]);
            else
                snprintf(extra, sizeof extra, "phase=\"%s\",le=\"+Inf\"", phases[p]);
            s_labels(b, s, "lpgossip_step_seconds_bucket", extra);
            s_add(b, " %llu\n", (unsigned long long)cum);
        }
        snprintf(extra, sizeof extra, "phase=\"%s\"", phases[p]);
        s_labels(b, s, "lpgossip_step_seconds_sum", extra);
        s_value(b, h->sum);
        s_labels(b, s, "lpgossip_step_seconds_count", extra);
        s_add(b, " %llu\n", (unsigned long long)h->count);
    }
}

static void s_per_peer(s_buf *b, const node_live_snap *s)
{
    s_head(b, "lpgossip_peer_staleness", "gauge",
           "Iterations between this node's iteration and the newest mixed one of an "
           "in-neighbour.");
    for (int k = 0; k < s->nnb; k++) {
        s_buf e;
        s_init(&e);
        s_add(&e, "peer=\"");
        s_escaped(&e, s->nb[k].id, 0);
        s_add(&e, "\"");
        s_labels(b, s, "lpgossip_peer_staleness", e.p);
        s_value(b, (double)s->nb[k].staleness);
        free(e.p);
    }
    static const char *const reasons[NODE_LIVE_NREASONS] = {
        "identity", "frames", "size", "auth", "contested", "nonfinite", "state", "other"};
    s_head(b, "lpgossip_refused_messages_total", "counter",
           "Messages refused, by reason (transport: identity, frames, size, auth, contested; "
           "content: nonfinite, state, other).");
    for (int r = 0; r < NODE_LIVE_NREASONS; r++) {
        char extra[64];
        snprintf(extra, sizeof extra, "reason=\"%s\"", reasons[r]);
        s_labels(b, s, "lpgossip_refused_messages_total", extra);
        s_value(b, (double)s->refused[r]);
    }
}

char *node_live_prometheus(const node_live_snap *s, size_t *len)
{
    s_buf b;
    s_init(&b);
    double acc = s->evaluated ? s->test_accuracy : NAN;
    s_head(&b, "lpgossip_info", "gauge", "Configuration of this node (value 1).");
    s_buf e;
    s_init(&e);
    s_add(&e, "model=\"%s\",precision=\"%s\",algo=\"%s\",compress=\"", s->model, s->precision,
          s->algo);
    s_escaped(&e, s->compress, 0);
    s_add(&e, "\"");
    s_labels(&b, s, "lpgossip_info", e.p);
    free(e.p);
    s_add(&b, " 1\n");
    s_metric(&b, s, "lpgossip_threads", "gauge", "Threads of the training kernels.",
             (double)s->threads);
    s_metric(&b, s, "lpgossip_iteration", "gauge", "Iterations done.", (double)s->iteration);
    s_metric(&b, s, "lpgossip_iterations", "gauge", "Iterations of the whole run.",
             (double)s->iterations);
    s_metric(&b, s, "lpgossip_epoch", "gauge", "Epochs done (fractional).", s->epoch);
    s_metric(&b, s, "lpgossip_learning_rate", "gauge", "Learning rate of the last step.", s->lr);
    s_metric(&b, s, "lpgossip_loss", "gauge", "Training loss (moving average).", s->loss);
    s_metric(&b, s, "lpgossip_test_accuracy", "gauge",
             "Test accuracy (0..1) of this node's model at the last evaluation.", acc);
    s_metric(&b, s, "lpgossip_bytes_sent_total", "counter", "Bytes sent to neighbours.",
             (double)s->bytes_sent);
    s_metric(&b, s, "lpgossip_bytes_received_total", "counter",
             "Bytes received from neighbours.", (double)s->bytes_received);
    s_metric(&b, s, "lpgossip_neighbours", "gauge", "Neighbours in the topology.",
             (double)s->neighbours);
    s_metric(&b, s, "lpgossip_peers_up", "gauge", "Neighbours not declared down.",
             (double)s->peers_up);
    s_metric(&b, s, "lpgossip_skipped_steps_total", "counter",
             "Local steps refused (not finite, or above the gradient-norm guard).",
             (double)s->skipped_steps);
    s_metric(&b, s, "lpgossip_catchup_steps_total", "counter",
             "Local steps left out so that slower neighbours catch up.",
             (double)s->catchup_steps);
    s_metric(&b, s, "lpgossip_silent_connections_closed_total", "counter",
             "Connections closed because they delivered no message within the peer floor "
             "(a second connection under a held id, or a silent client).",
             (double)s->closed_silent);
    s_metric(&b, s, "lpgossip_push_sum_weight", "gauge", "Push-sum weight psi.", s->psi);
    s_metric(&b, s, "lpgossip_run_seconds", "gauge", "Seconds since the training loop started.",
             s->seconds);
    s_hist(&b, s);
    s_per_peer(&b, s);
    *len = b.len;
    return b.p;
}

/* ---- /status JSON -------------------------------------------------------- */

static void s_jstr(s_buf *b, const char *key, const char *v)
{
    s_add(b, ",\"%s\":\"", key);
    s_escaped(b, v, 1);
    s_add(b, "\"");
}

static void s_jnum(s_buf *b, const char *key, double v)
{
    if (isfinite(v))
        s_add(b, ",\"%s\":%.10g", key, v);
    else
        s_add(b, ",\"%s\":null", key);
}

static void s_jconfig(s_buf *b, const node_live_snap *s)
{
    s_add(b, ",\"config\":{\"nodes\":%d,\"threads\":%d", s->nodes, s->threads);
    s_jstr(b, "topology", s->topology);
    s_jstr(b, "model", s->model);
    s_jstr(b, "precision", s->precision);
    s_jstr(b, "algo", s->algo);
    s_jstr(b, "compress", s->compress);
    s_jnum(b, "eta", s->eta);
    s_add(b, ",\"staleness\":%d,\"gossip_every\":%ld,\"batch\":%ld,\"epochs\":%ld,"
          "\"iters_per_epoch\":%ld}", s->staleness, s->gossip_every, s->batch, s->epochs,
          s->iters_per_epoch);
}

/* The neighbours, and the top-level "slowest" (the one of largest
 * staleness, ties: longest waited for) for watch's one column. */
static void s_jneighbours(s_buf *b, const node_live_snap *s)
{
    int slow = -1;
    s_add(b, ",\"neighbours\":[");
    for (int k = 0; k < s->nnb; k++) {
        const node_live_nb *n = &s->nb[k];
        s_add(b, "%s{\"rank\":%d", k ? "," : "", n->rank);
        s_jstr(b, "id", n->id);
        s_jstr(b, "endpoint", n->endpoint);
        s_add(b, ",\"up\":%s,\"staleness\":%llu", n->up ? "true" : "false",
              (unsigned long long)n->staleness);
        s_jnum(b, "wait_s", n->wait_s);
        s_add(b, "}");
        if (slow < 0 || n->staleness > s->nb[slow].staleness ||
            (n->staleness == s->nb[slow].staleness && n->wait_s > s->nb[slow].wait_s))
            slow = k;
    }
    s_add(b, "]");
    s_jstr(b, "slowest", slow >= 0 ? s->nb[slow].id : "");
    s_add(b, ",\"slowest_staleness\":%llu",
          (unsigned long long)(slow >= 0 ? s->nb[slow].staleness : 0));
}

char *node_live_json(const node_live_snap *s, const char *state, double phase_s, size_t *len)
{
    s_buf b;
    s_init(&b);
    s_add(&b, "{\"format\":\"lpgossip-status-1\"");
    s_jstr(&b, "run", s->run);
    s_jstr(&b, "node", s->node);
    s_add(&b, ",\"rank\":%d", s->rank);
    s_jstr(&b, "endpoint", s->endpoint);
    s_jstr(&b, "state", state);
    s_jnum(&b, "state_seconds", phase_s);
    s_add(&b, ",\"iteration\":%llu,\"iterations\":%llu", (unsigned long long)s->iteration,
          (unsigned long long)s->iterations);
    s_jnum(&b, "epoch", s->epoch);
    s_jnum(&b, "lr", s->lr);
    s_jnum(&b, "loss", s->loss);
    s_jnum(&b, "test_accuracy", s->evaluated ? s->test_accuracy : NAN);
    s_jnum(&b, "test_loss", s->evaluated ? s->test_loss : NAN);
    s_jnum(&b, "psi", s->psi);
    s_jnum(&b, "seconds", s->seconds);
    s_add(&b, ",\"bytes_sent\":%llu,\"bytes_received\":%llu,\"msgs_sent\":%llu,"
          "\"msgs_received\":%llu,\"neighbour_count\":%d,\"peers_up\":%d,"
          "\"skipped_steps\":%llu,\"catchup_steps\":%llu",
          (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_received,
          (unsigned long long)s->msgs_sent, (unsigned long long)s->msgs_received,
          s->neighbours, s->peers_up, (unsigned long long)s->skipped_steps,
          (unsigned long long)s->catchup_steps);
    uint64_t refused = 0;
    for (int r = 0; r < NODE_LIVE_NREASONS; r++)
        refused += s->refused[r];
    s_add(&b, ",\"refused\":%llu", (unsigned long long)refused);
    static const char *const phases[NODE_LIVE_NPHASES] = {"compute", "compress", "wait", "mix"};
    s_add(&b, ",\"step_seconds_mean\":{");
    for (int p = 0; p < NODE_LIVE_NPHASES; p++) {
        const node_live_hist *h = &s->step[p];
        s_add(&b, "%s\"%s\":%.6g", p ? "," : "", phases[p],
              h->count ? h->sum / (double)h->count : 0.0);
    }
    s_add(&b, "}");
    s_jconfig(&b, s);
    s_jneighbours(&b, s);
    s_add(&b, "}\n");
    *len = b.len;
    return b.p;
}
