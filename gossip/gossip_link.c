/* gossip_link — see gossip_link.h.
 *
 * Dimension legend: n nodes; a "neighbour" is an in- or out-neighbour of
 * this node in any matrix of the schedule (both for undirected graphs).
 */
#include "gossip/gossip_link.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_state.h"

#define S_SLICE        0.2   /* s: longest single wait (signals, checks) */
#define S_HELLO_FIRST  0.2   /* s before the first HELLO repeat, doubling ... */
#define S_HELLO_MAX    2.0   /* ... up to this */
#define S_RESYNC_RETRY 1.0   /* s between two RESYNC_REQ to the same peer */
#define S_LOG_REFUSED  5     /* refusals of one kind logged before they are only counted */
#define S_REFUSE_KINDS 32    /* kinds (message formats) with a budget of their own */
#define S_STATE_EVERY  1.0   /* s between two STATE answers to the same peer */
#define S_STATE_WAIT   5.0   /* s a joiner waits for a holder's next chunk */
#define S_STATES       3     /* states a joiner compares at most */
#define S_LINK_EVERY   0.3   /* s between two LINK_REQ to the same peer */
#define S_LINK_ANSWER  0.05  /* s between two LINK_PROOF to the same peer */
#define S_LINK_LOG     20    /* unproven messages of a peer before it is logged */
/* Two neighbours' models agree when |a - b| <= S_STATE_AGREE x min(|a|, |b|)
 * (L2).  Honest neighbours of a run differ by a few percent (the
 * consensus distance; docs/node.md "Joining"); a foreign model (another
 * seed, a constant) differs by about 1 or more. */
#define S_STATE_AGREE  0.25

typedef struct {
    uint8_t *bytes;
    size_t   len;
    uint64_t iter;
    int      from;
} s_early;

struct gossip_link {
    gossip_link_config cfg;
    gossip_net        *net;
    gossip_node       *g;
    const topo        *t;
    const nn_arena    *layout;
    int                rank, n, choco;
    uint32_t           fp;
    uint64_t           nonce;      /* this process's instance nonce (HELLO, HELLO_ACK) */
    gossip_peer       *p;          /* n: gossip_node's table (gossip_peer.h), borrowed */
    int               *nb, nnb;    /* neighbour ranks */
    s_early           *stash;
    size_t             nstash, cap_stash, stash_max; /* stash_max per peer */
    uint64_t           lag, progress_every;
    uint64_t           stale;      /* gossip_node's staleness S */
    int                running;    /* past the start */
    int                fatal;
    char               fatal_msg[1024];
    gossip_buf         ctl;
    nn_rng             rng;
    double             round_period; /* EWMA of our own round time */
    int               *fresh;        /* n: the neighbours a fresh wait waits for */
    double             round_start;
    gossip_link_stats  st;
    /* state transfer (gossip_link_set_model; docs/gossip.md "Joining") */
    float             *x, *extra;
    size_t             nextra;
    float             *zbuf;       /* holder: z and extra, packed from here */
    gossip_buf         sbytes, smsg;
    gossip_state_rx    rx;         /* joiner */
    int                prove;      /* ids on a plaintext port must be proved */
    /* refusals logged per kind (s_refuse): a flood of one kind cannot hide
     * the first refusals of another */
    const char        *refuse_fmt[S_REFUSE_KINDS];
    unsigned           refuse_n[S_REFUSE_KINDS];
    int                joining, state_ready;
    int                state_in;   /* the STATE asked for comes over our ROUTER */
    uint64_t           state_bytes_taken; /* bytes of the state taken last */
    /* re-join after a freeze (gossip_link.h "Re-join") */
    double             last_pump;  /* clock at the end of the last pump */
    double             stall_s;    /* longest pause between two pumps ... */
    double             woke;       /* ... and the clock at its end */
    double             rejoin_next; /* no attempt before this clock (back-off) */
    int                mix_pending; /* re-joined: log the first mixed round */
    double             rejoined_at; /* clock of the re-join */
    double             rejoin_woke; /* clock the freeze ended (0: none seen) */
};

/* ---- small helpers --------------------------------------------------------- */

__attribute__((format(printf, 2, 3)))
static void s_log(gossip_link *l, const char *fmt, ...)
{
    if (!l->cfg.log)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->cfg.log(l->cfg.log_arg, msg);
}

__attribute__((format(printf, 2, 3)))
static int s_fatal(gossip_link *l, const char *fmt, ...)
{
    if (l->fatal)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->fatal_msg, sizeof l->fatal_msg, fmt, ap);
    va_end(ap);
    l->fatal = 1;
    return -1;
}

__attribute__((format(printf, 2, 3)))
static void s_refuse(gossip_link *l, const char *fmt, ...)
{
    l->st.refused++;
    int k = 0; /* the kind: fmt's slot (the last slot is shared by any further kinds) */
    while (k < S_REFUSE_KINDS - 1 && l->refuse_fmt[k] && l->refuse_fmt[k] != fmt)
        k++;
    l->refuse_fmt[k] = l->refuse_fmt[k] ? l->refuse_fmt[k] : fmt;
    if (++l->refuse_n[k] > S_LOG_REFUSED)
        return;
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s_log(l, "refused: %s%s", msg,
          l->refuse_n[k] == S_LOG_REFUSED ? " (further refusals of this kind are only counted)"
                                          : "");
}

static const char *s_id(const gossip_link *l, int j)
{
    return l->t->nodes[j].id;
}

static int s_signals(const gossip_link *l)
{
    return l->cfg.signals ? (int)*l->cfg.signals : 0;
}

static int s_router_trusted(const gossip_link *l, int j);

/* Control message `kind` carrying `iter` to j: over our DEALER (j is an
 * out-neighbour) or as a reply over our ROUTER (j is an in-neighbour).
 * Never blocks; a peer that is not connected just misses it. */
static void s_ctl(gossip_link *l, int kind, int j, int router, uint64_t iter)
{
    char err[512];
    if (!l->net || (router && !s_router_trusted(l, j)))
        return; /* a harness's link (gossip_link_handle), or not j's connection yet */
    if (kind == GOSSIP_MSG_HELLO || kind == GOSSIP_MSG_HELLO_ACK)
        gossip_msg_encode_hello((uint8_t)kind, (uint32_t)l->rank, iter, l->fp, l->nonce,
                                &l->ctl);
    else
        gossip_msg_encode_control((uint8_t)kind, (uint32_t)l->rank, iter, l->fp, &l->ctl);
    int rc = router ? gossip_net_reply(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err)
                    : gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err);
    if (rc >= 0) {
        if (router)
            l->p[j].sent_router = nn_now();
        else
            l->p[j].sent_dealer = nn_now();
    }
    if (rc <= 0 && kind == GOSSIP_MSG_RESYNC_REQ && l->st.ctl_unsent++ < 5)
        s_log(l, "RESYNC_REQ to %s (rank %d) not sent: %s", s_id(l, j), j,
              rc < 0 ? err : "our connection to it takes nothing now");
}

/* Adaptive deadline: median + S_MAD_K x MAD of a neighbour's last
 * GOSSIP_PEER_GAPS arrival gaps, once S_MIN_GAPS are known.  k = 6: for
 * normally distributed gaps MAD ~ 0.67 sigma, so 6 MAD ~ 4 sigma (a healthy
 * peer is late beyond it about once in 30000 gaps); heavy tails (GC, a
 * checkpoint) get the floor (--peer-timeout) as a cushion. */
#define S_MAD_K 6.0
#define S_MIN_GAPS 8

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double gossip_link_gap_deadline(const double *gaps, uint32_t n)
{
    if (n < S_MIN_GAPS || n > GOSSIP_PEER_GAPS)
        return 0.0;
    double v[GOSSIP_PEER_GAPS];
    memcpy(v, gaps, n * sizeof *v);
    double med = s_median(v, n);
    for (uint32_t k = 0; k < n; k++)
        v[k] = fabs(gaps[k] - med);
    return med + S_MAD_K * s_median(v, n);
}

/* Records one arrival gap of j's GOSSIP and recomputes its deadline. */
static void s_note_gap(gossip_peer *p, double gap)
{
    p->gaps[p->gap_pos] = gap;
    p->gap_pos = (p->gap_pos + 1) % GOSSIP_PEER_GAPS;
    if (p->ngaps < GOSSIP_PEER_GAPS)
        p->ngaps++;
    p->deadline = gossip_link_gap_deadline(p->gaps, p->ngaps);
}

/* Seconds of silence after which neighbour j is declared down: its
 * adaptive deadline, or (too few gaps yet) peer_factor x its period;
 * within [peer_floor, timeout].  Any valid message (a PING included) ends
 * a silence, so a slow neighbour that still PINGs is never down. */
static double s_limit(const gossip_link *l, int j)
{
    double period = l->p[j].period > 0 ? l->p[j].period : l->round_period;
    double lim = l->p[j].deadline > 0 ? l->p[j].deadline : l->cfg.peer_factor * period;
    if (lim < l->cfg.peer_floor)
        lim = l->cfg.peer_floor;
    if (lim > l->cfg.timeout)
        lim = l->cfg.timeout;
    return lim;
}

/* Both roles of j are down (as gossip_node sees it). */
static int s_all_down(const gossip_link *l, int j)
{
    int st = gossip_node_peer_state(l->g, j);
    const gossip_peer *p = &l->p[j];
    return (!p->is_in || (st & GOSSIP_PEER_IN_DOWN)) && (!p->is_out || (st & GOSSIP_PEER_OUT_DOWN));
}

static void s_drop_stash_of(gossip_link *l, int j)
{
    size_t k = 0;
    for (size_t a = 0; a < l->nstash; a++) {
        if (l->stash[a].from == j)
            free(l->stash[a].bytes);
        else
            l->stash[k++] = l->stash[a];
    }
    l->nstash = k;
}

static size_t s_stashed_of(const gossip_link *l, int j, uint64_t *first)
{
    size_t c = 0;
    for (size_t a = 0; a < l->nstash; a++)
        if (l->stash[a].from == j) {
            if (c == 0 && first)
                *first = l->stash[a].iter;
            c++;
        }
    return c;
}

/* ---- falling behind (gossip_link.h "Re-join") -------------------------------- */

/* In-neighbour j was heard within its silence limit and did not say BYE. */
static int s_live_in(const gossip_link *l, int j, double now)
{
    const gossip_peer *p = &l->p[j];
    return p->is_in && !p->bye_in && now - p->heard <= s_limit(l, j);
}

/* j reports an iteration beyond the reach of this node at cur (flow
 * control keeps a neighbour that has us up within lag) and within the run. */
static int s_far_ahead(const gossip_link *l, int j, uint64_t cur)
{
    uint64_t r = l->p[j].reported;
    return r > cur + l->lag + GOSSIP_WINDOW && (!l->cfg.iters || r <= l->cfg.iters);
}

/* This node at cur fell behind: a strict majority of its live in-neighbours
 * are far ahead, and at least two of them when it has two or more (one
 * lying neighbour never suffices).  *far (may be NULL): the lowest
 * iteration they report. */
static int s_behind(const gossip_link *l, uint64_t cur, uint64_t *far)
{
    double now = nn_now();
    int live = 0, ahead = 0, nin = 0;
    uint64_t lo = UINT64_MAX;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        nin += l->p[j].is_in != 0;
        if (!s_live_in(l, j, now))
            continue;
        live++;
        if (s_far_ahead(l, j, cur)) {
            ahead++;
            if (l->p[j].reported < lo)
                lo = l->p[j].reported;
        }
    }
    if (far)
        *far = ahead ? lo : cur;
    return ahead >= (nin >= 2 ? 2 : 1) && 2 * ahead > live;
}

int gossip_link_behind(const gossip_link *l, uint64_t *far)
{
    return s_behind(l, gossip_node_iter(l->g), far);
}

/* Neighbour j reports an iteration beyond our reach behind us: it fell
 * behind and may re-join ("Re-join"); until it is within reach again we do
 * not take it back as out-neighbour on its PINGs (a choco RESYNC_REQ still
 * does: a node that does not re-join needs our copy). */
static int s_fell_behind(const gossip_link *l, int j)
{
    return l->p[j].reported + l->lag + GOSSIP_WINDOW < gossip_node_iter(l->g);
}

/* ---- membership ---------------------------------------------------------------- */

__attribute__((format(printf, 3, 4)))
static void s_down(gossip_link *l, int j, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (l->cfg.fail_on_loss) {
        s_fatal(l, "neighbour %s (rank %d, %s) lost: %s", s_id(l, j), j,
                l->t->nodes[j].endpoint[0] ? l->t->nodes[j].endpoint : "no endpoint", why);
        return;
    }
    gossip_node_peer_down(l->g, j);
    s_drop_stash_of(l, j);
    l->p[j].down = 1;
    l->st.down_events++;
    s_log(l, "neighbour %s (rank %d) is down: %s; mixing goes on without it", s_id(l, j), j, why);
}

/* After a valid message from j: an out-neighbour that was down gets our
 * messages again, but only on evidence that it receives them (traffic from
 * its ROUTER over our DEALER: a PING, RESYNC_REQ or HELLO); a peer that
 * only sends could otherwise soak up our push-sum mass for ever.  One that
 * reports an iteration beyond our reach stays down until it re-joined.  A
 * neighbour that is up again in some role is logged. */
static void s_revive(gossip_link *l, int j, gossip_net_dir dir)
{
    gossip_peer *p = &l->p[j];
    if (p->bye_in)
        return; /* it left: only a new instance (HELLO) brings it back */
    /* one far behind us gets our messages once it re-joined ("Re-join"):
     * it would drop our push-sum shares, our flow control would wait */
    if (p->is_out && dir == GOSSIP_NET_FROM_OUT && !s_fell_behind(l, j) &&
        (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN))
        gossip_node_peer_up(l->g, j);
    if (p->down && !s_all_down(l, j)) {
        p->down = 0;
        l->st.back_events++;
        s_log(l, "neighbour %s (rank %d) is back%s", s_id(l, j), j,
              l->choco && (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_WANTS_RESYNC)
                  ? " (asking for its public copy)" : "");
    }
}

/* Choco: asks in-neighbours whose copy we cannot use for their RESYNC,
 * when they are around to answer. */
static void s_ask_resyncs(gossip_link *l)
{
    if (!l->choco)
        return;
    double now = nn_now();
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        gossip_peer *p = &l->p[j];
        if (!p->is_in || !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_WANTS_RESYNC))
            continue;
        if (now - p->resync_asked < S_RESYNC_RETRY || now - p->heard > s_limit(l, j))
            continue;
        p->resync_asked = now;
        s_ctl(l, GOSSIP_MSG_RESYNC_REQ, j, 1, gossip_node_iter(l->g));
        l->st.resync_req_sent++;
    }
}

/* Choco: our public copy to out-neighbour o, behind what we sent it before. */
static void s_answer_resync(gossip_link *l, int o)
{
    if (!l->choco || !l->running)
        return; /* asked during our start: the asker retries */
    uint64_t at = gossip_node_sent_thru(l->g);
    if (l->p[o].resync_iter == at + 1)
        return; /* it already has this one (it crossed the request) */
    if (gossip_node_peer_state(l->g, o) & GOSSIP_PEER_OUT_DOWN)
        gossip_node_peer_up(l->g, o);
    const uint8_t *m;
    size_t len = gossip_node_resync_msg(l->g, &m);
    char err[512];
    if (!l->net)
        return;
    int rc = gossip_net_try_send(l->net, o, m, len, err, sizeof err);
    if (rc < 0) {
        s_log(l, "RESYNC to %s: %s", s_id(l, o), err);
        return;
    }
    if (rc == 0) { /* its queue is full or the connection down: it will ask again */
        if (l->st.resyncs_unsent++ < 5)
            s_log(l, "RESYNC to %s not sent: our connection to it takes nothing now (queue "
                  "full or not connected); it will ask again", s_id(l, o));
        return;
    }
    l->p[o].resync_iter = at + 1;
    l->p[o].sent_dealer = nn_now();
    l->st.resyncs_sent++;
    l->st.resync_bytes += len;
}

/* PINGs: to every neighbour we sent nothing for ping_every seconds, and
 * (progress) to every in-neighbour when `progress` is set. */
static void s_ping(gossip_link *l, int progress)
{
    double now = nn_now();
    uint64_t at = gossip_node_sent_thru(l->g);
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        gossip_peer *p = &l->p[j];
        if (p->is_out && now - p->sent_dealer >= l->cfg.ping_every)
            s_ctl(l, GOSSIP_MSG_PING, j, 0, at);
        if (p->is_in && (progress || now - p->sent_router >= l->cfg.ping_every))
            s_ctl(l, GOSSIP_MSG_PING, j, 1, at);
    }
}

/* Declares down whoever has been silent too long, whose message for `iter`
 * is later than the timeout (wait_start: when the wait began; < 0: not
 * waiting), or who left early. */
static void s_check_peers(gossip_link *l, int64_t iter, double wait_start)
{
    double now = nn_now();
    for (int a = 0; a < l->nnb && !l->fatal; a++) {
        int j = l->nb[a];
        gossip_peer *p = &l->p[j];
        if (s_all_down(l, j))
            continue;
        int in_live = p->is_in && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN);
        double silent = now - p->heard, lim = s_limit(l, j);
        if (silent > lim) {
            s_down(l, j, "silent for %.1f s (limit %.1f s)", silent, lim);
        } else if (iter >= 0 && in_live && p->bye_in && p->bye_iter <= (uint64_t)iter &&
                   p->got <= (uint64_t)iter) {
            s_down(l, j, "it left after %llu iterations (BYE)", (unsigned long long)p->bye_iter);
        } else if (iter >= 0 && in_live && wait_start >= 0 && p->got + l->stale <= (uint64_t)iter &&
                   now - wait_start > l->cfg.timeout) {
            s_down(l, j, "its message for iteration %lld is %.0f s late (--timeout)",
                   (long long)iter, now - wait_start);
        }
    }
}

/* ---- receiving ------------------------------------------------------------------- */

/* A refusal of gossip_node_receive for a non-finite number (the codec's
 * messages: "value 3 is NaN", "... is Inf", "psi ... is not a finite ..."). */
static void s_refuse_payload(gossip_link *l, int from, const char *err)
{
    if (strstr(err, " is NaN") || strstr(err, " is Inf") || strstr(err, "not finite") ||
        strstr(err, "not a finite"))
        l->st.refused_nonfinite++;
    s_refuse(l, "from %s (rank %d): %s", s_id(l, from), from, err);
}

static void s_deliver(gossip_link *l, int from, const uint8_t *msg, size_t len, uint64_t iter)
{
    char err[1024];
    int rc = gossip_node_receive(l->g, msg, len, err, sizeof err);
    if (rc < 0) {
        s_refuse_payload(l, from, err);
        return;
    }
    gossip_peer *p = &l->p[from];
    if (p->got < iter + 1)
        p->got = iter + 1;
}

/* GOSSIP from in-neighbour `from`: replays are refused; late ones are
 * passed on only where they still matter (a choco copy catching up, any
 * algorithm with bounded staleness: mixed at the next mix);
 * those beyond the window wait in the stash, within the flow-control
 * bound. */
static void s_gossip(gossip_link *l, int from, const uint8_t *msg, size_t len, uint64_t iter)
{
    gossip_peer *p = &l->p[from];
    uint64_t cur = gossip_node_iter(l->g);
    if (iter < p->got) {
        s_refuse(l, "replayed or duplicate message from %s (rank %d) for iteration %llu "
                 "(it already sent %llu)", s_id(l, from), from, (unsigned long long)iter,
                 (unsigned long long)p->got - 1);
        return;
    }
    double now = nn_now();
    if (p->last_gossip > 0) {
        double gap = now - p->last_gossip;
        p->period = p->period > 0 ? 0.9 * p->period + 0.1 * gap : gap;
        s_note_gap(p, gap);
    }
    p->last_gossip = now;
    if (iter < cur && !l->choco && iter + l->stale < cur) {
        p->got = iter + 1; /* late: that iteration was mixed without it */
        return;
    }
    if (iter >= cur + GOSSIP_WINDOW) {
        if (l->joining && !l->running)
            return; /* joining: we are not at the run's iteration yet */
        if (iter > cur + l->lag + GOSSIP_WINDOW && s_far_ahead(l, from, cur) &&
            iter <= p->reported + l->lag + GOSSIP_WINDOW)
            return; /* we fell behind, as its PINGs say: no use ("Re-join") */
        if (iter > cur + l->lag + GOSSIP_WINDOW ||
            s_stashed_of(l, from, NULL) >= l->stash_max) {
            s_refuse(l, "message from %s (rank %d) for iteration %llu is too far ahead (we are "
                     "at %llu; flow control keeps honest peers within %llu)", s_id(l, from), from,
                     (unsigned long long)iter, (unsigned long long)cur,
                     (unsigned long long)l->lag);
            return;
        }
        if (l->nstash == l->cap_stash) {
            l->cap_stash = l->cap_stash ? 2 * l->cap_stash : 16;
            l->stash = nn_xrealloc(l->stash, l->cap_stash * sizeof *l->stash);
        }
        s_early *e = &l->stash[l->nstash++];
        e->bytes = nn_xmalloc(len);
        memcpy(e->bytes, msg, len);
        e->len = len;
        e->iter = iter;
        e->from = from;
        p->got = iter + 1;
        return;
    }
    s_deliver(l, from, msg, len, iter);
}

/* Feeds stashed messages that are now inside gossip_node's window, in
 * arrival order; drops those that fell behind. */
static void s_feed_stash(gossip_link *l)
{
    uint64_t cur = gossip_node_iter(l->g);
    size_t k = 0;
    for (size_t a = 0; a < l->nstash; a++) {
        s_early *e = &l->stash[a];
        if (e->iter < cur + GOSSIP_WINDOW) {
            if (e->iter + l->stale >= cur || l->choco)
                s_deliver(l, e->from, e->bytes, e->len, e->iter);
            free(e->bytes);
        } else {
            l->stash[k++] = *e;
        }
    }
    l->nstash = k;
}

/* A HELLO or HELLO_ACK for another layout: a misconfigured peer shows at
 * the start, before its valid HELLO (both sides fail, naming the peer); a
 * foreign layout after that is an intruder. */
static void s_foreign_layout(gossip_link *l, int from, int in, const gossip_header *h,
                             const char *chan)
{
    if (l->running || l->p[from].hello_seen || l->p[from].ack) {
        s_refuse(l, "HELLO from %s %s (rank %d) for another model (layout %08x, ours %08x)",
                 chan, s_id(l, from), from, h->fingerprint, l->fp);
        return;
    }
    if (in && h->kind == GOSSIP_MSG_HELLO) /* our answer carries our fingerprint: it fails too */
        s_ctl(l, GOSSIP_MSG_HELLO_ACK, from, 1, gossip_node_sent_thru(l->g));
    s_fatal(l, "peer %s (rank %d, %s) runs a different model (layout fingerprint %08x, "
            "ours %08x): every node needs the same --model, --norm, --groups, --data and "
            "--pad-to (if it does, another process spoke under its id first: without "
            "`security: curve` ids are not authenticated)", s_id(l, from), from,
            l->t->nodes[from].endpoint, h->fingerprint, l->fp);
}

/* Which kinds may come on which channel: 1 yes, 0 misdirected, -1 unknown. */
static int s_kind_ok(unsigned kind, int in)
{
    switch (kind) {
    case GOSSIP_MSG_GOSSIP: case GOSSIP_MSG_RESYNC: case GOSSIP_MSG_BYE: return in;
    case GOSSIP_MSG_RESYNC_REQ: case GOSSIP_MSG_BYE_ACK: return !in;
    case GOSSIP_MSG_HELLO: case GOSSIP_MSG_HELLO_ACK: case GOSSIP_MSG_PING: return 1;
    case GOSSIP_MSG_STATE_REQ: case GOSSIP_MSG_STATE: return 1;
    case GOSSIP_MSG_LINK_REQ: case GOSSIP_MSG_LINK_PROOF: return in;
    default: return -1;
    }
}

/* The header of a message from the transport, checked against the
 * connection it came on: 0 when the message is to be handled, else -1
 * (refused or fatal, done here).  Outside input: nothing is trusted. */
static int s_check_header(gossip_link *l, int from, int in, const uint8_t *msg, size_t len,
                          gossip_header *h)
{
    char err[512];
    const char *chan = in ? "in-neighbour" : "out-neighbour";
    if (gossip_msg_decode_header(msg, len, NULL, h, err, sizeof err) != 0) {
        s_refuse(l, "%zu bytes from %s %s (rank %d) that are not an lpgossip message: %s", len,
                 chan, s_id(l, from), from, err);
        return -1;
    }
    if (h->sender != (uint32_t)from) {
        s_refuse(l, "message from %s %s (rank %d) claims to come from rank %u", chan,
                 s_id(l, from), from, h->sender);
        return -1;
    }
    int blocks = h->kind == GOSSIP_MSG_GOSSIP || h->kind == GOSSIP_MSG_RESYNC;
    if (h->fingerprint != l->fp && (h->kind == GOSSIP_MSG_HELLO ||
                                     h->kind == GOSSIP_MSG_HELLO_ACK)) {
        s_foreign_layout(l, from, in, h, chan);
        return -1;
    }
    if (h->fingerprint != l->fp && !blocks) { /* GOSSIP, RESYNC: gossip_node's check */
        s_refuse(l, "control message from %s (rank %d): layout fingerprint 0x%08x differs from "
                 "ours 0x%08x", s_id(l, from), from, h->fingerprint, l->fp);
        return -1;
    }
    int ok = s_kind_ok(h->kind, in);
    if (ok <= 0) {
        s_refuse(l, "%s message (kind %u) from %s %s (rank %d)%s",
                 ok < 0 ? "unknown" : "misdirected", h->kind, chan, s_id(l, from), from,
                 ok < 0 ? "" : ": not valid on that channel");
        return -1;
    }
    return 0;
}

/* Is a HELLO from `from` (nonce: its instance nonce, 0 none) a restart of
 * that neighbour?  1 restart, 0 not, -1 refused (done here).  With nonces:
 * a restart is a new instance; the same instance with another start
 * iteration is a replay or a spoof, and never resets anything.  A HELLO
 * without a nonce (a hand-made one) is judged as before nonces: a restart
 * when it comes after the peer was down, after its GOSSIP, or for another
 * start. */
static int s_hello_restart(gossip_link *l, int from, uint64_t iter, uint64_t nonce)
{
    gossip_peer *p = &l->p[from];
    if (nonce && p->nonce && nonce == p->nonce) {
        if (p->hello_seen && p->hello_iter != iter && !p->down) {
            s_refuse(l, "HELLO from %s (rank %d) for iteration %llu repeats the instance nonce "
                     "%016llx of its HELLO for iteration %llu: a replay or a spoof, ignored",
                     s_id(l, from), from, (unsigned long long)iter, (unsigned long long)nonce,
                     (unsigned long long)p->hello_iter);
            return -1;
        }
        return l->running && p->down;
    }
    if (nonce && p->nonce)
        return l->running; /* a new instance: the old one's connection is gone */
    return l->running && (p->down || p->got > 0 || !p->hello_seen || p->hello_iter != iter);
}

/* HELLO_ACK to j (over our ROUTER with `router`); status GOSSIP_HELLO_JOIN
 * when we run without it (it restarted or was down): it must join. */
static void s_hello_ack(gossip_link *l, int j, int router, uint64_t status)
{
    if (!status || !l->net) {
        s_ctl(l, GOSSIP_MSG_HELLO_ACK, j, router, gossip_node_sent_thru(l->g));
        return;
    }
    char err[512];
    if (router && !s_router_trusted(l, j))
        return;
    gossip_msg_encode_hello_ack((uint32_t)l->rank, gossip_node_sent_thru(l->g), l->fp, l->nonce,
                                status, &l->ctl);
    int rc = router ? gossip_net_reply(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err)
                    : gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err);
    if (rc >= 0)
        *(router ? &l->p[j].sent_router : &l->p[j].sent_dealer) = nn_now();
}

/* HELLO from `from`: noted, answered; a restart voids what we hold of it. */
static void s_hello(gossip_link *l, int from, int in, uint64_t iter, uint64_t nonce)
{
    gossip_peer *p = &l->p[from];
    int restart = s_hello_restart(l, from, iter, nonce);
    if (restart < 0)
        return;
    if (!p->hello_seen) {
        p->hello_seen = 1;
        p->hello_iter = iter;
    }
    if (nonce)
        p->nonce = nonce;
    p->reported = iter;
    if (in)
        p->hello = 1;
    else
        p->ack = 1; /* a (re)starting out-neighbour announces itself */
    s_hello_ack(l, from, in, restart ? GOSSIP_HELLO_JOIN : 0);
    if (!restart)
        return;
    p->hello_iter = iter; /* whatever we hold of it is void, its BYE too */
    p->bye_in = p->bye_ack = 0;
    p->bye_iter = 0;
    if (in && p->is_in) {
        gossip_node_peer_reset(l->g, from);
        s_drop_stash_of(l, from);
        p->got = 0;
    }
    s_log(l, "neighbour %s (rank %d) (re)starts at iteration %llu (instance %016llx)",
          s_id(l, from), from, (unsigned long long)iter, (unsigned long long)nonce);
}

/* STATE_REQ from neighbour j (on our ROUTER with `in`): our current model
 * z = x/psi and the extra floats, in chunks, on the channel it asked on.
 * Only while running, with a model, at most once per S_STATE_EVERY. */
static void s_answer_state(gossip_link *l, int j, int in)
{
    gossip_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->running || !l->x || !l->net || now - p->state_sent < S_STATE_EVERY ||
        (in && !s_router_trusted(l, j)))
        return; /* the asker retries, or asks another neighbour */
    size_t numel = l->layout->numel, n = numel + l->nextra;
    if (!l->zbuf)
        l->zbuf = nn_xmalloc(sizeof *l->zbuf * n + 1);
    gossip_node_debias(l->g, l->x, l->zbuf);
    if (l->nextra)
        memcpy(l->zbuf + numel, l->extra, sizeof *l->zbuf * l->nextra);
    uint32_t crc = gossip_state_pack(l->zbuf, n, &l->sbytes);
    size_t chunk = 4 * numel < GOSSIP_STATE_CHUNK_MAX ? 4 * numel : GOSSIP_STATE_CHUNK_MAX;
    uint64_t iter = gossip_node_iter(l->g);
    char err[512];
    p->state_sent = now;
    for (size_t k = 0; gossip_state_chunk_msg((uint32_t)l->rank, iter, l->fp, &l->sbytes, crc,
                                              chunk, k, &l->smsg) > 0; k++) {
        int rc = in ? gossip_net_reply(l->net, j, l->smsg.data, l->smsg.len, err, sizeof err)
                    : gossip_net_try_send(l->net, j, l->smsg.data, l->smsg.len, err, sizeof err);
        if (rc < 0 || (!in && rc == 0)) {
            s_log(l, "STATE to %s (rank %d): %s", s_id(l, j), j, rc < 0 ? err : "queue full");
            return;
        }
    }
    l->st.states_sent++;
    l->st.state_bytes += l->sbytes.len;
    s_log(l, "sent our model (iteration %llu, %zu bytes) to the joining %s (rank %d)",
          (unsigned long long)iter, l->sbytes.len, s_id(l, j), j);
}

/* STATE chunk from neighbour j (over our ROUTER with `in`): only the one
 * a joiner asked is taken, and only on the connection it asked on (a
 * STATE under j's id on the other one is not j's answer: over our ROUTER
 * it may come from whoever took j's id on our port first). */
static void s_state(gossip_link *l, int j, int in, const uint8_t *msg, size_t len)
{
    char err[1024];
    if (!l->joining) {
        l->st.state_refused++;
        s_refuse(l, "STATE from %s (rank %d): this node did not ask for a state", s_id(l, j), j);
        return;
    }
    if (in != l->state_in) {
        l->st.state_refused++;
        s_refuse(l, "STATE from %s (rank %d) over our %s: it was asked over our %s", s_id(l, j),
                 j, in ? "ROUTER" : "DEALER", in ? "DEALER" : "ROUTER");
        return;
    }
    int rc = gossip_state_rx_add(&l->rx, j, msg, len, err, sizeof err);
    if (rc < 0) {
        l->st.state_refused++;
        s_refuse_payload(l, j, err);
    } else if (rc == 1) {
        l->state_ready = 1;
    }
}

/* ---- ids on a plaintext port (gossip_link.h) ------------------------------ */

/* j's messages over our ROUTER need a proof of its id: a neighbour both
 * ways (our DEALER reaches the endpoint it is listed at), without CURVE
 * (which proves ids by the handshake). */
static int s_provable(const gossip_link *l, int j)
{
    return l->prove && l->p[j].is_in && l->p[j].is_out;
}

/* LINK_REQ with our token of the link to j over our DEALER (rate-limited):
 * j answers with a LINK_PROOF over its DEALER, which lands on our ROUTER
 * over j's own connection. */
static void s_link_ask(gossip_link *l, int j)
{
    gossip_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->net || now - p->link_asked < S_LINK_EVERY)
        return;
    p->link_asked = now;
    char err[512];
    gossip_msg_encode_link(GOSSIP_MSG_LINK_REQ, (uint32_t)l->rank, gossip_node_iter(l->g), l->fp,
                           p->token, &l->ctl);
    if (gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err) > 0)
        p->sent_dealer = now;
}

/* LINK_REQ from j (over our ROUTER): its token back over our DEALER, which
 * we connected to where j is listed (rate-limited; a token from an impostor
 * under j's id goes to the real j, who refuses it). */
static void s_link_answer(gossip_link *l, int j, uint64_t token)
{
    gossip_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->net || !p->is_out || !token || now - p->link_answered < S_LINK_ANSWER)
        return;
    p->link_answered = now;
    char err[512];
    gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, (uint32_t)l->rank, gossip_node_iter(l->g),
                           l->fp, token, &l->ctl);
    if (gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err) > 0)
        p->sent_dealer = now;
}

/* The connection under j's id on our ROUTER, now: gossip_net's count. */
static uint64_t s_conn(const gossip_link *l, int j)
{
    return l->net ? gossip_net_conn_gen(l->net, j) : 0;
}

/* Whatever goes to j over our ROUTER goes to the connection under j's id
 * there: only once it proved to be j's (a neighbour both ways), so that a
 * link an impostor cuts on one side is cut on both (no neighbour believes
 * its messages arrive where they are dropped). */
static int s_router_trusted(const gossip_link *l, int j)
{
    return !s_provable(l, j) || (l->p[j].proved && l->p[j].proved_gen == s_conn(l, j));
}

/* A message of `kind` from j over our ROUTER: 1 when it must wait for the
 * proof of j's id (dropped and counted; a HELLO is held and handled once
 * the proof is in; a proof is asked for), 0 to handle it. */
static int s_unproven(gossip_link *l, int j, unsigned kind, uint64_t iter, const uint8_t *msg,
                      size_t len)
{
    gossip_peer *p = &l->p[j];
    if (!s_provable(l, j) || kind == GOSSIP_MSG_LINK_REQ || kind == GOSSIP_MSG_LINK_PROOF)
        return 0;
    if (p->proved && p->proved_gen == s_conn(l, j))
        return 0;
    if (p->proved)
        s_log(l, "%s (rank %d) speaks over another connection to our port: it proves its id "
              "again", s_id(l, j), j);
    p->proved = 0;
    if (kind == GOSSIP_MSG_HELLO) {
        p->held_hello = 1;
        p->held_iter = iter;
        p->held_nonce = gossip_msg_hello_nonce(msg, len);
    }
    l->st.unproven++;
    if (++p->unproven == S_LINK_LOG)
        s_log(l, "%d messages under the id of %s (rank %d) over our ROUTER without the proof "
              "of its id (LINK_PROOF): dropped; whoever holds its id on our port is not the "
              "%s we reach at %s, or cannot answer", S_LINK_LOG, s_id(l, j), j, s_id(l, j),
              l->t->nodes[j].endpoint[0] ? l->t->nodes[j].endpoint : "its endpoint");
    s_link_ask(l, j);
    return 1;
}

static void s_hello(gossip_link *l, int from, int in, uint64_t iter, uint64_t nonce);

/* LINK_PROOF from j over our ROUTER: with our token, the connection under
 * j's id on our port is j's (the token went only to where j is listed). */
static void s_link_proof(gossip_link *l, int j, uint64_t token)
{
    gossip_peer *p = &l->p[j];
    if (!s_provable(l, j))
        return;
    if (token != p->token) {
        s_refuse(l, "LINK_PROOF under the id of %s (rank %d) with a wrong token: the connection "
                 "that holds its id on our port is not the %s we reach at its endpoint",
                 s_id(l, j), j, s_id(l, j));
        return;
    }
    if (p->proved && p->proved_gen == s_conn(l, j))
        return;
    p->proved = 1;
    p->proved_gen = s_conn(l, j);
    if (p->unproven >= S_LINK_LOG)
        s_log(l, "%s (rank %d) proved its id on our port (%llu messages dropped before)",
              s_id(l, j), j, (unsigned long long)p->unproven);
    if (p->held_hello) {
        p->held_hello = 0;
        s_hello(l, j, 1, p->held_iter, p->held_nonce);
    }
}

/* One message from the transport. */
static void s_handle(gossip_link *l, int from, gossip_net_dir dir, const uint8_t *msg, size_t len)
{
    char err[1024];
    int in = dir == GOSSIP_NET_FROM_IN;
    gossip_header h;
    if (s_check_header(l, from, in, msg, len, &h) != 0)
        return;
    unsigned kind = h.kind;
    uint64_t iter = h.iter;
    gossip_peer *p = &l->p[from];
    uint64_t refused_before = l->st.refused;
    if (in && s_unproven(l, from, kind, iter, msg, len))
        return;
    if ((kind == GOSSIP_MSG_GOSSIP || kind == GOSSIP_MSG_RESYNC) && p->bye_in && p->down)
        return; /* a late one of an instance that left and is out: nothing to use */
    switch (kind) {
    case GOSSIP_MSG_GOSSIP:
        s_gossip(l, from, msg, len, iter);
        break;
    case GOSSIP_MSG_RESYNC: {
        int rc = gossip_node_receive(l->g, msg, len, err, sizeof err);
        if (rc < 0) {
            s_refuse_payload(l, from, err);
            break;
        }
        s_drop_stash_of(l, from); /* older than the RESYNC (FIFO): inside it */
        if (p->got < iter)
            p->got = iter;
        p->resync_asked = 0; /* answered: the next gap may ask at once */
        break;
    }
    case GOSSIP_MSG_RESYNC_REQ:
        s_answer_resync(l, from);
        break;
    case GOSSIP_MSG_PING:
        if (in) {
            /* behind everything it sent us: what is missing below is lost */
            uint64_t first = 0, proved = iter;
            if (s_stashed_of(l, from, &first) && first < proved)
                proved = first;
            gossip_node_peer_sent(l->g, from, proved);
        }
        p->reported = iter;
        break;
    case GOSSIP_MSG_HELLO:
        s_hello(l, from, in, iter, gossip_msg_hello_nonce(msg, len));
        break;
    case GOSSIP_MSG_STATE_REQ:
        s_answer_state(l, from, in);
        break;
    case GOSSIP_MSG_STATE:
        s_state(l, from, in, msg, len);
        break;
    case GOSSIP_MSG_HELLO_ACK: {
        uint64_t nonce = gossip_msg_hello_nonce(msg, len);
        if (gossip_msg_hello_status(msg, len) & GOSSIP_HELLO_JOIN)
            p->join_told = 1;
        if (nonce)
            p->nonce = nonce; /* its current instance (it may have restarted) */
        p->reported = iter;
        if (in)
            p->hello = 1;
        else
            p->ack = 1;
        break;
    }
    case GOSSIP_MSG_BYE:
        p->bye_in = 1;
        p->bye_iter = iter;
        s_ctl(l, GOSSIP_MSG_BYE_ACK, from, 1, iter);
        break;
    case GOSSIP_MSG_BYE_ACK:
        p->bye_ack = 1;
        break;
    case GOSSIP_MSG_LINK_REQ:
        s_link_answer(l, from, gossip_msg_link_token(msg, len));
        break;
    case GOSSIP_MSG_LINK_PROOF:
        s_link_proof(l, from, gossip_msg_link_token(msg, len));
        break;
    }
    if (l->st.refused == refused_before) {
        p->heard = nn_now();
        s_revive(l, from, dir);
    }
}

/* A pause of `gap` seconds in which this process did not run its pumps
 * (frozen?): the longest one and when it ended, for the re-join's log. */
static void s_note_stall(gossip_link *l, double gap)
{
    if (gap > l->stall_s) {
        l->stall_s = gap;
        l->woke = nn_now();
    }
}

/* Receives and handles messages for at most `seconds` (one slice at most),
 * then asks for RESYNCs and PINGs as due.  0, or -1 on a transport error or
 * a fatal condition. */
static int s_pump(gossip_link *l, double seconds)
{
    char err[1024];
    int ms = seconds <= 0 ? 0 : (int)(fmin(seconds, S_SLICE) * 1000.0 + 0.5);
    double now = nn_now();
    s_note_stall(l, l->last_pump > 0 ? now - l->last_pump : 0);
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    int rc = gossip_net_recv(l->net, ms, &from, &dir, &msg, &len, err, sizeof err);
    for (int k = 0; rc > 0 && k < 256 && !l->fatal; k++) {
        s_handle(l, from, dir, msg, len);
        rc = gossip_net_recv(l->net, 0, &from, &dir, &msg, &len, err, sizeof err);
    }
    if (rc < 0)
        return s_fatal(l, "%s", err);
    if (l->running)
        s_ask_resyncs(l);
    s_ping(l, 0);
    l->last_pump = nn_now();
    s_note_stall(l, l->last_pump - now - ms / 1000.0); /* stopped inside the pump */
    return l->fatal ? -1 : 0;
}

/* ---- public ------------------------------------------------------------------------- */

/* A random 64-bit instance nonce, never 0: /dev/urandom, or (failing that)
 * the clock, the pid and the rank mixed. */
static uint64_t s_new_nonce(int rank)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1)
            v = 0;
        fclose(f);
    }
    if (!v) {
        nn_rng r;
        nn_rng_seed(&r, (uint64_t)(nn_now() * 1e9) ^ ((uint64_t)getpid() << 32) ^
                            (uint64_t)rank);
        v = nn_rng_next(&r);
    }
    return v ? v : 1;
}

void gossip_link_config_default(gossip_link_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->timeout = 60;
    cfg->peer_floor = 5;
    cfg->peer_factor = 20;
    cfg->ping_every = 0.5;
    cfg->seed = 1;
    cfg->min_nodes = 2;
    cfg->start_window = 5;
    cfg->fresh_wait = 0.25;
}

gossip_link *gossip_link_new(gossip_net *net, gossip_node *g, const topo *t, int rank,
                             const gossip_link_config *cfg)
{
    gossip_link *l = nn_xcalloc(1, sizeof *l);
    l->cfg = *cfg;
    if (l->cfg.peer_floor > l->cfg.timeout)
        l->cfg.peer_floor = l->cfg.timeout;
    l->net = net;
    l->g = g;
    l->t = t;
    l->layout = gossip_node_layout(g);
    l->rank = rank;
    l->n = t->n;
    l->choco = gossip_node_config(g)->algo == GOSSIP_CHOCO;
    l->stale = (uint64_t)gossip_node_config(g)->staleness;
    l->fp = gossip_node_fingerprint(g);
    l->p = gossip_node_peers(g); /* roles filled by gossip_node; our section is zero */
    l->nb = nn_xcalloc((size_t)l->n, sizeof *l->nb);
    for (int j = 0; j < l->n; j++)
        if (j != rank && (l->p[j].is_in || l->p[j].is_out)) {
            l->nb[l->nnb++] = j;
            l->p[j].fresh_score = 1.0;
        }
    l->fresh = nn_xcalloc((size_t)l->n, sizeof *l->fresh);
    l->lag = (uint64_t)l->n + 2 * GOSSIP_WINDOW;
    l->progress_every = l->lag / 4 ? l->lag / 4 : 1;
    l->stash_max = (size_t)l->lag + GOSSIP_WINDOW;
    l->round_period = 0;
    nn_rng_seed(&l->rng, cfg->seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(rank + 1)));
    l->nonce = s_new_nonce(rank);
    l->prove = net && !t->security_curve;
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].token = s_new_nonce(rank); /* secret: only our DEALER carries it */
    return l;
}

void gossip_link_destroy(gossip_link **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_link *l = *self_p;
    for (size_t a = 0; a < l->nstash; a++)
        free(l->stash[a].bytes);
    free(l->stash);
    free(l->nb);
    free(l->fresh);
    gossip_buf_free(&l->ctl);
    free(l->zbuf);
    gossip_buf_free(&l->sbytes);
    gossip_buf_free(&l->smsg);
    if (l->rx.bytes)
        gossip_state_rx_free(&l->rx);
    free(l);
    *self_p = NULL;
}

/* "n1 (rank 1, tcp://...)" for every neighbour whose flag (read by `get`)
 * is 0, among those with the role `role` (1 in, 2 out, 3 any). */
static void s_missing(const gossip_link *l, int role, int which, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int a = 0; a < l->nnb && o < len; a++) {
        int j = l->nb[a];
        const gossip_peer *p = &l->p[j];
        int has = ((role & 1) && p->is_in) || ((role & 2) && p->is_out);
        int flag = which == 0 ? p->hello : which == 1 ? p->ack : (p->hello || p->ack);
        if (!has || flag)
            continue;
        o += (size_t)snprintf(buf + o, len - o, "%s%s (rank %d, %s)", o ? ", " : "", s_id(l, j),
                              j, l->t->nodes[j].endpoint[0] ? l->t->nodes[j].endpoint
                                                            : "no endpoint");
    }
}

/* A report of answering neighbour j is plausible: within the run, and,
 * with other answering neighbours, within reach of one of theirs ((n - 1)
 * hops of lag + window: flow control keeps honest neighbours there).  One
 * neighbour's lie (an iteration far beyond, or far behind, the others')
 * thus never moves where this node starts. */
static int s_report_ok(const gossip_link *l, int j)
{
    uint64_t r = l->p[j].reported, spread;
    if (l->cfg.iters && r > l->cfg.iters)
        return 0;
    spread = (uint64_t)(l->n > 1 ? l->n - 1 : 1) * (l->lag + GOSSIP_WINDOW);
    int others = 0;
    for (int a = 0; a < l->nnb; a++) {
        const gossip_peer *q = &l->p[l->nb[a]];
        if (l->nb[a] == j || !(q->hello || q->ack) ||
            (l->cfg.iters && q->reported > l->cfg.iters))
            continue;
        others++;
        if ((q->reported > r ? q->reported - r : r - q->reported) <= spread)
            return 1;
    }
    return others == 0;
}

/* The highest plausible iteration an answering neighbour reported, at
 * least `start` (s_report_ok). */
static uint64_t s_far(const gossip_link *l, uint64_t start)
{
    uint64_t far = start;
    for (int a = 0; a < l->nnb; a++) {
        const gossip_peer *p = &l->p[l->nb[a]];
        if ((p->hello || p->ack) && p->reported > far && s_report_ok(l, l->nb[a]))
            far = p->reported;
    }
    return far;
}

/* The barrier is passed: fresh, every in-neighbour said HELLO and every
 * out-neighbour acknowledged ours; rejoining, everybody answered. */
static int s_barrier_done(const gossip_link *l, int rejoin)
{
    int done = 1;
    for (int a = 0; a < l->nnb; a++) {
        const gossip_peer *p = &l->p[l->nb[a]];
        if (rejoin)
            done &= p->hello || p->ack;
        else
            done &= (!p->is_in || p->hello) && (!p->is_out || p->ack);
    }
    return done;
}

/* How a node starts (gossip_link_start). */
enum { S_FRESH, S_RESUME, S_JOIN };

/* Neighbours that answered (said HELLO or acknowledged ours). */
static int s_answered(const gossip_link *l)
{
    int c = 0;
    for (int a = 0; a < l->nnb; a++)
        c += l->p[l->nb[a]].hello || l->p[l->nb[a]].ack;
    return c;
}

/* Nodes a fresh start needs: min(min_nodes, 1 + neighbours). */
static int s_quorum_need(const gossip_link *l)
{
    return l->cfg.min_nodes < 1 + l->nnb ? l->cfg.min_nodes : 1 + l->nnb;
}

/* The start goes on without the neighbours that did not answer: down. */
static void s_down_silent(gossip_link *l, const char *why, double s)
{
    for (int k = 0; k < l->nnb; k++) {
        int j = l->nb[k];
        if (!l->p[j].hello && !l->p[j].ack)
            s_down(l, j, "%s %.0f s", why, s);
    }
}

/* The barrier's deadline passed: a fresh start fails naming who is missing;
 * a rejoin goes on with whoever answered (the others are down). */
static int s_barrier_timeout(gossip_link *l, int rejoin, char *err, size_t errlen)
{
    char a[1024], b[1024];
    if (!rejoin) {
        s_missing(l, 1, 0, a, sizeof a);
        s_missing(l, 2, 1, b, sizeof b);
        return nn_errf(err, errlen, "start barrier: no answer after %.0f s; "
                       "in-neighbours that never said hello: %s; out-neighbours that "
                       "never acknowledged ours: %s (are they started, with the same "
                       "topology and endpoints?); the quorum of %d node(s) (--min-nodes, "
                       "this one included) never formed: %d answered", l->cfg.timeout,
                       a[0] ? a : "none", b[0] ? b : "none", s_quorum_need(l),
                       s_answered(l));
    }
    s_missing(l, 3, 2, a, sizeof a);
    if (!s_answered(l) && l->nnb > 0)
        return nn_errf(err, errlen, "rejoin: no neighbour answered within %.0f s: %s",
                       l->cfg.timeout, a);
    s_down_silent(l, "no answer to our HELLO within", l->cfg.timeout);
    return 0;
}

/* HELLO to every out-neighbour that did not answer yet (and, rejoining, to
 * every silent in-neighbour). */
static void s_hellos(gossip_link *l, int rejoin, uint64_t start)
{
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_peer *p = &l->p[j];
        if (p->is_out && !p->ack)
            s_ctl(l, GOSSIP_MSG_HELLO, j, 0, start);
        if (s_provable(l, j) && !p->proved)
            s_link_ask(l, j);
        if (rejoin && p->is_in && !p->hello)
            s_ctl(l, GOSSIP_MSG_HELLO, j, 1, start);
    }
}

/* A fresh node finds the run in progress: a neighbour said so (JOIN), or
 * reports an iteration far beyond ours. */
static int s_in_progress(const gossip_link *l, uint64_t start)
{
    for (int a = 0; a < l->nnb; a++)
        if (l->p[l->nb[a]].join_told)
            return 1;
    return s_far(l, start) > start + l->lag;
}

/* The window passed (fresh, join): may the start go on without the silent? */
static int s_window_ok(const gossip_link *l, int mode)
{
    if (mode == S_FRESH)
        return 1 + s_answered(l) >= s_quorum_need(l);
    return mode == S_JOIN && (s_answered(l) > 0 || l->nnb == 0);
}

/* HELLO, repeated with back-off, until the barrier passes (0), times out,
 * or (fresh) finds the run in progress: 1, the caller joins. */
static int s_barrier(gossip_link *l, int mode, uint64_t start, char *err, size_t errlen)
{
    int rejoin = mode != S_FRESH;
    double t0 = nn_now(), deadline = t0 + l->cfg.timeout, next = 0, every = S_HELLO_FIRST;
    double window = mode == S_RESUME ? l->cfg.timeout : l->cfg.start_window;
    for (;;) {
        /* In a fresh start the neighbours that passed their barrier first
         * may be an iteration or two along already (they need our messages
         * to go further); a neighbour that runs without us, or far beyond,
         * is a run in progress, which this node joins. */
        if (mode == S_FRESH && s_in_progress(l, start)) {
            if (!l->x)
                return nn_errf(err, errlen, "the neighbours are at iteration %llu: this run is "
                               "in progress; restart this node with --resume to rejoin it from "
                               "its checkpoint", (unsigned long long)s_far(l, start));
            return 1;
        }
        if (s_barrier_done(l, rejoin))
            return 0;
        double now = nn_now();
        if (s_signals(l))
            return nn_errf(err, errlen, "interrupted (signal) while waiting for the neighbours");
        if (now - t0 >= window && now < deadline && s_window_ok(l, mode)) {
            s_down_silent(l, "no answer within the start window of", window);
            return l->fatal ? nn_errf(err, errlen, "%s", l->fatal_msg) : 0;
        }
        if (now >= deadline)
            return s_barrier_timeout(l, rejoin, err, errlen);
        if (now >= next) {
            s_hellos(l, rejoin, start);
            next = now + every;
            every = every * 2 < S_HELLO_MAX ? every * 2 : S_HELLO_MAX;
        }
        double until = next < deadline ? next : deadline;
        if (until > t0 + window && now < t0 + window)
            until = t0 + window;
        if (s_pump(l, until - now) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
}

/* The next holder to ask for the state after `after` (-1: the first):
 * answering out-neighbours first (asked over our DEALER, connected to the
 * endpoint the topology lists), then the other answering neighbours
 * (asked over our ROUTER, whose ids are whoever claimed them first). */
static int s_next_holder(const gossip_link *l, int after)
{
    int seen = after < 0, c[2] = {-1, -1};
    for (int pass = 0; pass < 2; pass++)
        for (int a = 0; a < l->nnb; a++) {
            int j = l->nb[a];
            const gossip_peer *p = &l->p[j];
            if (p->down || !(p->hello || p->ack) || (pass == 0) != (p->is_out != 0))
                continue;
            if (c[0] < 0)
                c[0] = j;
            if (seen && c[1] < 0)
                c[1] = j;
            if (j == after)
                seen = 1;
        }
    return c[1] >= 0 ? c[1] : c[0];
}

/* Re-joining at cur: the next holder after `after` (-1: the first) among
 * the live in-neighbours far ahead, in rank order; -1 when none. */
static int s_next_far_holder(const gossip_link *l, int after, uint64_t cur)
{
    double now = nn_now();
    int first = -1;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (!s_live_in(l, j, now) || !s_far_ahead(l, j, cur))
            continue;
        if (j > after)
            return j;
        if (first < 0)
            first = j;
    }
    return first;
}

/* Re-joining at cur: the state of holder j at iteration T is taken only
 * beyond cur, within the run and within reach of what j reported (it is
 * at that iteration).  0 ok, -1 refused with a message. */
static int s_rejoin_state_ok(const gossip_link *l, int j, uint64_t cur, uint64_t T, char *err,
                             size_t errlen)
{
    uint64_t r = l->p[j].reported;
    if (T <= cur || (l->cfg.iters && T >= l->cfg.iters) || T + l->lag + GOSSIP_WINDOW < r ||
        T > r + l->lag + GOSSIP_WINDOW)
        return nn_errf(err, errlen, "STATE from %s (rank %d) for iteration %llu: not what it "
                       "reported (%llu) or outside this node's %llu..%llu", s_id(l, j), j,
                       (unsigned long long)T, (unsigned long long)r, (unsigned long long)cur + 1,
                       (unsigned long long)(l->cfg.iters ? l->cfg.iters : UINT64_MAX));
    return 0;
}

/* Asks holder j for its state (STATE_REQ on the connection of our choice:
 * our DEALER, which we connected to the endpoint j is listed at, when j is
 * an out-neighbour, else our ROUTER; only a STATE on that connection is
 * taken, s_state) and pumps until it is assembled and checked (0), j
 * stopped delivering for S_STATE_WAIT (1: ask another), or the deadline
 * passed, a signal came or the transport failed (-1 with a message). */
static int s_fetch_state(gossip_link *l, int j, uint64_t T, double deadline, char *err,
                         size_t errlen)
{
    l->state_ready = 0;
    l->state_in = !l->p[j].is_out;
    gossip_state_rx_begin(&l->rx, j);
    s_ctl(l, GOSSIP_MSG_STATE_REQ, j, l->state_in, T);
    s_log(l, "asking %s (rank %d) for its model", s_id(l, j), j);
    double until = nn_now() + S_STATE_WAIT;
    uint64_t got = 0;
    while (!l->state_ready && l->rx.from == j && nn_now() < until) {
        if (nn_now() >= deadline || s_signals(l))
            return nn_errf(err, errlen, "join: no neighbour delivered its state within "
                           "%.0f s%s", l->cfg.timeout, s_signals(l) ? " (signal)" : "");
        if (s_pump(l, until - nn_now()) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
        if (l->rx.got > got) { /* progress: give the holder more time */
            got = l->rx.got;
            until = nn_now() + S_STATE_WAIT;
        }
    }
    return l->state_ready ? 0 : 1;
}

/* Joining: the state of holder j at iteration T is plausible only within
 * the run (cfg.iters).  0 ok, -1 refused with a message. */
static int s_join_state_ok(const gossip_link *l, int j, uint64_t T, char *err, size_t errlen)
{
    if (l->cfg.iters && T >= l->cfg.iters)
        return nn_errf(err, errlen, "STATE from %s (rank %d) for iteration %llu: beyond the "
                       "run's %llu iterations", s_id(l, j), j, (unsigned long long)T,
                       (unsigned long long)l->cfg.iters);
    return 0;
}

/* The distance of two states of n floats, relative to the smaller one:
 * |a - b| / min(|a|, |b|) (L2; a zero state is infinitely far). */
double gossip_link_state_distance(const float *a, const float *b, size_t n)
{
    double d = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        d += e * e;
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    double m = sqrt(na < nb ? na : nb);
    return m > 0 ? sqrt(d) / m : (d > 0 ? INFINITY : 0);
}

/* Two states, of holders a (iteration ia) and b (ib), agree: within
 * S_STATE_AGREE of each other, at iterations within what flow control
 * allows two neighbours of this node (n - 1 hops of lag + window). */
static int s_states_agree(const gossip_link *l, const float *va, uint64_t ia, const float *vb,
                          uint64_t ib, double *dist)
{
    uint64_t spread = (uint64_t)(l->n > 1 ? l->n - 1 : 1) * (l->lag + GOSSIP_WINDOW);
    *dist = gossip_link_state_distance(va, vb, l->layout->numel + l->nextra);
    return *dist <= S_STATE_AGREE && (ia > ib ? ia - ib : ib - ia) <= spread;
}

/* The states collected while joining: up to S_STATES, from distinct holders. */
typedef struct {
    int      from[S_STATES];
    uint64_t iter[S_STATES], bytes[S_STATES];
    float   *vals[S_STATES];
    int      n;
} s_states;

/* A pair of collected states that agree: the index of the earlier one
 * (asked first: the better connection), after logging every collected
 * state that disagrees with it as an outlier; -1 when no pair agrees. */
static int s_agreed(gossip_link *l, const s_states *c)
{
    double d;
    for (int a = 0; a < c->n; a++)
        for (int b = a + 1; b < c->n; b++) {
            if (!s_states_agree(l, c->vals[a], c->iter[a], c->vals[b], c->iter[b], &d))
                continue;
            s_log(l, "the models of %s (rank %d) and %s (rank %d) agree (distance %.3g, "
                  "iterations %llu and %llu)", s_id(l, c->from[a]), c->from[a],
                  s_id(l, c->from[b]), c->from[b], d, (unsigned long long)c->iter[a],
                  (unsigned long long)c->iter[b]);
            for (int o = 0; o < c->n; o++)
                if (o != a && o != b &&
                    !s_states_agree(l, c->vals[a], c->iter[a], c->vals[o], c->iter[o], &d)) {
                    l->st.state_refused++;
                    s_refuse(l, "the model of %s (rank %d) at iteration %llu is an outlier: "
                             "distance %.3g from the agreed one (at most %.2g)",
                             s_id(l, c->from[o]), c->from[o], (unsigned long long)c->iter[o],
                             d, S_STATE_AGREE);
                }
            return a;
        }
    return -1;
}

/* Asks the next holder after *j (joining: answering neighbours, our
 * out-neighbours first; re-joining: live in-neighbours far ahead of cur)
 * for its state and adds it to c when it delivers a plausible one.
 * 1 added, 0 not (refused or silent: logged), -1 no holder left or a
 * fatal condition (message). */
static int s_collect(gossip_link *l, s_states *c, int *j, uint64_t cur, int rejoin,
                     double deadline, char *err, size_t errlen)
{
    *j = rejoin ? s_next_far_holder(l, *j, cur) : s_next_holder(l, *j);
    if (*j < 0)
        return nn_errf(err, errlen, "%s: no neighbour left to ask for its state",
                       rejoin ? "re-join" : "join");
    for (int k = 0; k < c->n; k++)
        if (c->from[k] == *j)
            return 0; /* have it: the holders went round */
    int rc = s_fetch_state(l, *j, cur, deadline, err, errlen);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    char why[512];
    if ((rejoin ? s_rejoin_state_ok(l, *j, cur, l->rx.iter, why, sizeof why)
                : s_join_state_ok(l, *j, l->rx.iter, why, sizeof why)) != 0) {
        l->st.state_refused++;
        s_refuse(l, "%s", why);
        return 0;
    }
    size_t n = l->layout->numel + l->nextra;
    c->from[c->n] = *j;
    c->iter[c->n] = l->rx.iter;
    c->bytes[c->n] = l->rx.got;
    c->vals[c->n] = nn_xmalloc(sizeof(float) * n + 1);
    memcpy(c->vals[c->n], l->rx.vals, sizeof(float) * n);
    c->n++;
    return 1;
}

/* Holders that could still answer: 2 or more answering neighbours
 * (joining) or live in-neighbours far ahead (re-joining). */
static int s_holders(const gossip_link *l, uint64_t cur, int rejoin)
{
    int c = 0;
    double now = nn_now();
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_peer *p = &l->p[j];
        c += rejoin ? s_live_in(l, j, now) && s_far_ahead(l, j, cur)
                    : !p->down && (p->hello || p->ack);
    }
    return c;
}

/* Collects states until two agree ("plausible and agreed": gossip_link.h
 * "Start"), or, with a single possible holder, its one plausible state;
 * the index into c of the state to take, or -1 with a message. */
static int s_choose_state(gossip_link *l, s_states *c, uint64_t cur, int rejoin, char *err,
                          size_t errlen)
{
    double deadline = nn_now() + l->cfg.timeout;
    int j = -1, tries = 0, holders = s_holders(l, cur, rejoin);
    while (tries++ < 2 * l->nnb + 2) {
        int rc = s_collect(l, c, &j, cur, rejoin, deadline, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 0 || (c->n < 2 && holders >= 2))
            continue;
        int k = holders < 2 ? 0 : s_agreed(l, c);
        if (k >= 0)
            return k;
        if (c->n == S_STATES)
            break;
    }
    if (c->n >= 2)
        return nn_errf(err, errlen, "%s: the models of %d neighbours disagree (no two within "
                       "distance %.2g): refused, none taken", rejoin ? "re-join" : "join",
                       c->n, S_STATE_AGREE);
    if (c->n == 1 && holders >= 2) { /* the others delivered nothing usable */
        s_log(l, "only %s (rank %d) delivered its model: taken unconfirmed",
              s_id(l, c->from[0]), c->from[0]);
        return 0;
    }
    return nn_errf(err, errlen, "%s: no neighbour delivered its state within %.0f s",
                   rejoin ? "re-join" : "join", l->cfg.timeout);
}

/* Joining (rejoin 0): asks answering neighbours in turn (out-neighbours
 * first) for their state (STATE_REQ) until two deliver states that are
 * whole, checked, within the run and agree (s_states_agree; a single
 * possible holder's state alone), within `timeout`; then x = z, the extra
 * floats, and *T = max(*T, the state's iteration).  Re-joining (rejoin 1,
 * "Re-join"): asks only the live in-neighbours far ahead of *T, checks
 * each state's iteration (s_rejoin_state_ok), and *T = the iteration of
 * the state taken; *holder: the rank whose state was taken. */
static int s_join_state(gossip_link *l, uint64_t *T, int rejoin, int *holder, char *err,
                        size_t errlen)
{
    if (!l->rx.bytes)
        gossip_state_rx_init(&l->rx, l->layout->numel + l->nextra, l->fp);
    s_states c = {.n = 0};
    int k = s_choose_state(l, &c, *T, rejoin, err, errlen);
    l->joining = 0;
    l->state_ready = 0;
    if (k >= 0) {
        int j = c.from[k];
        *holder = j;
        size_t numel = l->layout->numel;
        memcpy(l->x, c.vals[k], sizeof *l->x * numel);
        if (l->nextra)
            memcpy(l->extra, c.vals[k] + numel, sizeof *l->extra * l->nextra);
        if (c.iter[k] > *T || rejoin)
            *T = c.iter[k];
        l->state_bytes_taken = c.bytes[k];
        l->st.joined |= !rejoin;
        l->st.join_from = j;
        l->st.join_iter = *T;
        if (!rejoin)
            s_log(l, "took the model of %s (rank %d) at its iteration %llu (%llu bytes, CRC "
                  "checked)", s_id(l, j), j, (unsigned long long)c.iter[k],
                  (unsigned long long)c.bytes[k]);
    }
    for (int i = 0; i < c.n; i++)
        free(c.vals[i]);
    return k >= 0 ? 0 : -1;
}

/* Live in-neighbours whose RESYNC we still wait for (choco, rejoining);
 * with `give_up` (s waited) they are declared down instead. */
static int s_resyncs_missing(gossip_link *l, double give_up)
{
    int waiting = 0;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (!l->p[j].is_in || l->p[j].down ||
            !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_WANTS_RESYNC))
            continue;
        waiting++;
        if (give_up > 0)
            s_down(l, j, "no RESYNC within %.1f s (it is taken back, and asked again, on its "
                   "next message)", give_up);
    }
    return waiting;
}

/* Choco, rejoining: our copies of the in-neighbours are void; asks for
 * theirs and waits (bounded by the timeout) for the RESYNCs.  Our new
 * iteration is PINGed to every neighbour first (s_fell_behind). */
static int s_rejoin_resyncs(gossip_link *l, char *err, size_t errlen)
{
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].sent_dealer = l->p[l->nb[a]].sent_router = 0;
    s_ping(l, 1);
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (l->p[j].is_in && !l->p[j].down) {
            gossip_node_peer_reset(l->g, j);
            l->p[j].resync_asked = 0;
        }
    }
    /* Bounded by twice the peer floor (--peer-timeout), not the run's
     * --timeout: after a freeze a neighbour's new connection is usable only
     * once gossip_net reaped the unidentified one (2 s, docs/node.md "The
     * re-join stall"); one still missing then is declared down, and taken
     * back and asked again on its next message (s_revive, s_ask_resyncs). */
    const double wait = fmin(l->cfg.timeout, 2.0 * l->cfg.peer_floor);
    const double t0 = nn_now(), until = t0 + wait;
    while (s_resyncs_missing(l, 0)) {
        if (s_signals(l))
            return nn_errf(err, errlen, "interrupted (signal) while re-syncing");
        if (nn_now() >= until) {
            s_resyncs_missing(l, nn_now() - t0);
            return 0;
        }
        if (s_pump(l, until - nn_now()) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
    return 0;
}

int gossip_link_start(gossip_link *l, int resumed, uint64_t *iter, char *err, size_t errlen)
{
    const uint64_t start = *iter;
    int mode = resumed || start > 0 ? S_RESUME : S_FRESH;
    double t0 = nn_now();
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].heard = t0;
    int rc = s_barrier(l, mode, start, err, errlen);
    if (rc == 1) {
        s_log(l, "the run is in progress (neighbours at iteration %llu): joining it",
              (unsigned long long)s_far(l, start));
        mode = S_JOIN;
        l->joining = 1; /* until the state is in: far-ahead GOSSIP is dropped, not refused */
        rc = s_barrier(l, mode, start, err, errlen);
    }
    if (rc != 0)
        return -1;
    int rejoin = mode != S_FRESH;
    uint64_t T = rejoin ? s_far(l, start) : start;
    if (T > start && gossip_node_set_iter(l->g, T, err, errlen) != 0)
        return -1;
    if (mode == S_JOIN) { /* at T already: messages for T on are kept meanwhile */
        int holder;
        if (s_join_state(l, &T, 0, &holder, err, errlen) != 0 ||
            gossip_node_join(l->g, l->x, T, err, errlen) != 0)
            return -1;
    }
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].heard = nn_now();
    l->running = 1;
    if (rejoin && l->choco && s_rejoin_resyncs(l, err, errlen) != 0)
        return -1;
    if (l->fatal)
        return nn_errf(err, errlen, "%s", l->fatal_msg);
    *iter = T;
    int up = 0;
    for (int a = 0; a < l->nnb; a++)
        up += !l->p[l->nb[a]].down;
    s_log(l, "%s passed in %.2f s at iteration %llu (%d of %d neighbours)",
          mode == S_JOIN ? "join" : rejoin ? "rejoin" : "start barrier", nn_now() - t0, (unsigned long long)T, up, l->nnb);
    l->round_start = nn_now();
    return 0;
}

/* The mix of iteration iter used nothing of any in-neighbour (the node
 * trained alone): every in-neighbour of that iteration was left out. */
static int s_mixed_alone(const gossip_link *l, uint64_t iter)
{
    int *in = nn_xcalloc((size_t)l->n, sizeof *in);
    int nin = topo_in_neighbors(l->t, iter, l->rank, in);
    free(in);
    gossip_stats gs;
    gossip_node_stats(l->g, &gs);
    return nin > 0 && gs.iter_absent >= (uint64_t)nin;
}

/* Adds a slice of waiting for iteration iter to every live in-neighbour
 * whose message that the wait needs (of iter - S or before) is missing. */
static void s_blame_wait(gossip_link *l, uint64_t iter, double dt)
{
    for (int a = 0; a < l->nnb; a++) {
        gossip_peer *p = &l->p[l->nb[a]];
        if (p->is_in && !(gossip_node_peer_state(l->g, l->nb[a]) & GOSSIP_PEER_IN_DOWN) &&
            p->got + l->stale <= iter)
            p->wait_s += dt;
    }
}

/* The wait of round iter is for messages that will not come when this node
 * fell behind: its far-ahead in-neighbours are declared down (they come
 * back after the re-join, gossip_link_catch_up). */
static void s_stop_waiting_if_behind(gossip_link *l, uint64_t iter)
{
    uint64_t far;
    if (!l->x || !s_behind(l, iter, &far))
        return;
    for (int a = 0; a < l->nnb && !l->fatal; a++) {
        int j = l->nb[a];
        if (l->p[j].is_in && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN) &&
            s_far_ahead(l, j, iter))
            s_down(l, j, "it is %llu iterations ahead (this node fell behind: re-joining)",
                   (unsigned long long)(l->p[j].reported - iter));
    }
}

/* Flow control: a live out-neighbour is too far behind iteration iter. */
static int s_flow_blocked(const gossip_link *l, uint64_t iter)
{
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_peer *p = &l->p[j];
        if (p->is_out && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN) &&
            iter >= p->reported + l->lag)
            return 1;
    }
    return 0;
}

/* Pumps until iteration iter may mix.  -1 on a fatal error. */
static int s_wait_ready(gossip_link *l, uint64_t iter, double wait_start)
{
    while (!gossip_node_ready(l->g, iter)) {
        if (s_signals(l) > 1)
            s_fatal(l, "interrupted twice while waiting for iteration %llu",
                    (unsigned long long)iter);
        s_check_peers(l, (int64_t)iter, wait_start);
        s_stop_waiting_if_behind(l, iter);
        double w0 = nn_now();
        if (l->fatal || s_pump(l, S_SLICE) != 0)
            return -1;
        s_blame_wait(l, iter, nn_now() - w0);
    }
    return 0;
}

/* The in-neighbours a fresh wait for iter would wait for: level with us,
 * current message missing, score >= 1/2.  Lists them in l->fresh; count. */
static int s_fresh_wanted(gossip_link *l, uint64_t iter)
{
    int m = 0;
    for (int b = 0; b < l->nnb; b++) {
        int j = l->nb[b];
        if (l->p[j].is_in && l->p[j].fresh_score >= 0.5 && !gossip_node_fresh_from(l->g, j, iter))
            l->fresh[m++] = j;
    }
    return m;
}

/* Bounded staleness, once iteration iter may mix: up to fresh_wait x our
 * round period for the messages of iter from level neighbours
 * (gossip_node_fresh_from) that usually make it.  A neighbour's score
 * halves when the grace runs out on it, grows by 1/4 when it makes it, and
 * by 1/50 per round it is not waited for (so a slow one is tried again
 * now and then).  -1 on a fatal error. */
static int s_wait_fresh(gossip_link *l, uint64_t iter, double wait_start)
{
    for (int b = 0; b < l->nnb; b++)
        if (l->p[l->nb[b]].fresh_score < 0.5)
            l->p[l->nb[b]].fresh_score += 0.02;
    int m = l->cfg.fresh_wait > 0 && l->round_period > 0 ? s_fresh_wanted(l, iter) : 0;
    if (m == 0)
        return 0;
    double until = nn_now() + l->cfg.fresh_wait * l->round_period;
    l->st.fresh_waits++;
    for (;;) {
        int left_n = 0;
        for (int a = 0; a < m; a++)
            left_n += !gossip_node_fresh_from(l->g, l->fresh[a], iter);
        double left = until - nn_now();
        if (left_n == 0 || left <= 0 || !gossip_node_ready(l->g, iter))
            break;
        s_check_peers(l, (int64_t)iter, wait_start);
        if (l->fatal || s_pump(l, left < S_SLICE ? left : S_SLICE) != 0)
            return -1;
    }
    for (int a = 0; a < m; a++) {
        gossip_peer *p = &l->p[l->fresh[a]];
        if (gossip_node_fresh_from(l->g, l->fresh[a], iter)) {
            p->fresh_score = fmin(1.0, p->fresh_score + 0.25);
        } else {
            p->fresh_score *= 0.5;
            l->st.fresh_missed++;
        }
    }
    return 0;
}

int gossip_link_round(gossip_link *l, float *x, uint64_t iter, gossip_link_times *tm, char *err,
                      size_t errlen)
{
    gossip_link_times dummy;
    if (!tm)
        tm = &dummy;
    double t0 = nn_now();
    double wait_start = t0;
    int waited = 0;
    while (s_flow_blocked(l, iter)) {
        waited = 1;
        if (s_signals(l) > 1)
            s_fatal(l, "interrupted twice while waiting for a slow out-neighbour");
        s_check_peers(l, -1, -1);
        if (l->fatal || s_pump(l, S_SLICE) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
    l->st.flow_waits += (uint64_t)waited;
    double t1 = nn_now();
    if (gossip_node_prepare(l->g, x, iter, err, errlen) != 0)
        return -1;
    double t2 = nn_now();
    tm->compress += t2 - t1;
    int to;
    const uint8_t *msg;
    size_t len;
    for (int k = 0; (len = gossip_node_outbox(l->g, k, &to, &msg)) > 0; k++) {
        if (l->cfg.drop_gossip > 0 && nn_rng_uniform(&l->rng) < l->cfg.drop_gossip) {
            l->st.dropped_test++;
            continue;
        }
        int rc = gossip_net_try_send(l->net, to, msg, len, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            l->st.dropped_full++; /* it is far behind or dead; its gap shows */
            continue;
        }
        l->p[to].sent_dealer = nn_now();
    }
    wait_start = nn_now();
    /* a message handled during the fresh wait can make the round unready
     * again (choco: a later update proves one lost): wait for it again */
    for (int fresh_done = 0; !fresh_done || !gossip_node_ready(l->g, iter); fresh_done = 1)
        if (s_wait_ready(l, iter, wait_start) != 0 ||
            (!fresh_done && s_wait_fresh(l, iter, wait_start) != 0))
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    double t3 = nn_now();
    tm->wait += (t1 - t0) + (t3 - t2);
    if (gossip_node_mix(l->g, x, iter, err, errlen) != 0)
        return -1;
    s_feed_stash(l);
    if (gossip_node_iter(l->g) % l->progress_every == 0)
        s_ping(l, 1);
    l->st.isolated_rounds = s_mixed_alone(l, iter) ? l->st.isolated_rounds + 1 : 0;
    if (l->mix_pending && !l->st.isolated_rounds) {
        l->mix_pending = 0;
        char since[64] = "";
        if (l->rejoin_woke > 0)
            snprintf(since, sizeof since, ", %.2f s after the freeze ended",
                     nn_now() - l->rejoin_woke);
        s_log(l, "re-joined: round %llu mixed the neighbours' messages again, %.2f s after the "
              "re-join%s", (unsigned long long)iter, nn_now() - l->rejoined_at, since);
    }
    double t4 = nn_now();
    tm->mix += t4 - t3;
    double round = t4 - l->round_start;
    l->round_start = t4;
    l->round_period = l->round_period > 0 ? 0.9 * l->round_period + 0.1 * round : round;
    return 0;
}

/* After a re-join at T: our public copy to every out-neighbour (choco: a
 * RESYNC at T replaces what they hold of us), the in-neighbours' copies
 * asked for, and our new iteration PINGed to everybody (flow control). */
static int s_after_rejoin(gossip_link *l, char *err, size_t errlen)
{
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (l->p[j].is_out && l->choco) {
            l->p[j].resync_iter = 0;
            s_answer_resync(l, j);
        }
    }
    if (l->choco) /* PINGs our new iteration first */
        return s_rejoin_resyncs(l, err, errlen);
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].sent_dealer = l->p[l->nb[a]].sent_router = 0;
    s_ping(l, 1); /* our new iteration, to everybody (their flow control) */
    return 0;
}

int gossip_link_catch_up(gossip_link *l, uint64_t *iter, char *err, size_t errlen)
{
    uint64_t cur = gossip_node_iter(l->g), far, T = cur;
    double now = nn_now();
    if (!l->running || !l->x || !l->net || now < l->rejoin_next || !s_behind(l, cur, &far))
        return 0;
    int holder = -1;
    char why[1024];
    l->joining = 1;
    if (s_join_state(l, &T, 1, &holder, why, sizeof why) != 0) {
        l->rejoin_next = nn_now() + l->cfg.peer_floor;
        s_log(l, "fell %llu iterations behind, but could not re-join: %s; training on, "
              "trying again in %.0f s", (unsigned long long)(far - cur), why, l->cfg.peer_floor);
        return 0;
    }
    char frozen[64] = "";
    l->rejoin_woke = 0;
    if (l->stall_s > l->cfg.peer_floor && now - l->woke < l->cfg.timeout) {
        snprintf(frozen, sizeof frozen, " (frozen %.1f s?)", l->stall_s);
        l->rejoin_woke = l->woke;
    }
    s_log(l, "fell %llu iterations behind%s; re-joining with the model of rank %d at "
          "iteration %llu (%llu bytes, CRC checked)", (unsigned long long)(T - cur), frozen,
          holder, (unsigned long long)T, (unsigned long long)l->state_bytes_taken);
    if (gossip_node_join(l->g, l->x, T, err, errlen) != 0)
        return -1;
    l->st.rejoins++;
    l->stall_s = 0;
    l->mix_pending = 1;
    l->rejoined_at = nn_now();
    if (s_after_rejoin(l, err, errlen) != 0)
        return -1;
    *iter = T;
    return 1;
}

void gossip_link_pump(gossip_link *l, double seconds)
{
    double until = nn_now() + seconds;
    do {
        s_check_peers(l, -1, -1);
        if (s_pump(l, until - nn_now()) != 0)
            return;
    } while (nn_now() < until);
}

void gossip_link_goodbye(gossip_link *l, uint64_t done, double wait_s)
{
    l->fatal = 0;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (l->p[j].is_out && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN))
            s_ctl(l, GOSSIP_MSG_BYE, j, 0, done);
    }
    double deadline = nn_now() + wait_s;
    for (;;) {
        int left = 0;
        for (int a = 0; a < l->nnb; a++) {
            int j = l->nb[a];
            const gossip_peer *p = &l->p[j];
            int st = gossip_node_peer_state(l->g, j);
            left += p->is_out && !(st & GOSSIP_PEER_OUT_DOWN) && !p->bye_ack;
            left += p->is_in && !(st & GOSSIP_PEER_IN_DOWN) && !p->bye_in;
        }
        if (!left)
            return;
        if (nn_now() >= deadline || s_signals(l) > 1 || l->fatal) {
            char a[1024] = "", b[1024] = "";
            size_t oa = 0, ob = 0;
            for (int k = 0; k < l->nnb; k++) {
                int j = l->nb[k];
                const gossip_peer *p = &l->p[j];
                int st = gossip_node_peer_state(l->g, j);
                if (p->is_out && !(st & GOSSIP_PEER_OUT_DOWN) && !p->bye_ack && oa < sizeof a)
                    oa += (size_t)snprintf(a + oa, sizeof a - oa, "%s%s", oa ? ", " : "", s_id(l, j));
                if (p->is_in && !(st & GOSSIP_PEER_IN_DOWN) && !p->bye_in && ob < sizeof b)
                    ob += (size_t)snprintf(b + ob, sizeof b - ob, "%s%s", ob ? ", " : "", s_id(l, j));
            }
            s_log(l, "warning: leaving without BYE acks from %s and without BYE from %s",
                  a[0] ? a : "none", b[0] ? b : "none");
            if (l->fatal)
                s_log(l, "%s", l->fatal_msg);
            return;
        }
        if (s_pump(l, deadline - nn_now()) != 0)
            l->fatal = 0; /* keep listening until the deadline */
    }
}

void gossip_link_handle(gossip_link *l, int from, gossip_net_dir dir, const uint8_t *msg,
                        size_t len)
{
    assert(from >= 0 && from < l->n && from != l->rank); /* the caller's (transport's) */
    s_handle(l, from, dir, msg, len);
}

void gossip_link_set_model(gossip_link *l, float *x, float *extra, size_t nextra)
{
    l->x = x;
    l->extra = nextra ? extra : NULL;
    l->nextra = nextra;
    if (l->rx.bytes)
        gossip_state_rx_free(&l->rx);
}

void gossip_link_expect_state(gossip_link *l, int from)
{
    if (!l->rx.bytes)
        gossip_state_rx_init(&l->rx, l->layout->numel + l->nextra, l->fp);
    l->joining = from >= 0;
    l->state_ready = 0;
    l->state_in = from >= 0 && !l->p[from].is_out;
    gossip_state_rx_begin(&l->rx, from);
}

int gossip_link_state_ready(const gossip_link *l)
{
    return l->state_ready;
}

void gossip_link_set_prove(gossip_link *l, int on)
{
    l->prove = on != 0;
}

uint64_t gossip_link_token(const gossip_link *l, int j)
{
    return l->p[j].token;
}

void gossip_link_set_running(gossip_link *l, int running)
{
    l->running = running != 0;
}

void gossip_link_stats_get(const gossip_link *l, gossip_link_stats *out)
{
    *out = l->st;
    uint64_t down = 0;
    for (int a = 0; a < l->nnb; a++)
        down += l->p[l->nb[a]].down;
    out->peers_down = down;
    out->neighbours = (uint64_t)l->nnb;
}

int gossip_link_cut_off(const gossip_link_stats *st)
{
    return st->neighbours > 0 && st->isolated_rounds > 0;
}
