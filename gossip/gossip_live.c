/* gossip_live — liveness: the failure detector, down and back, RESYNC
 * (choco), PINGs, and the rule of falling behind (gossip_link.h
 * "Liveness", "Re-join").
 *
 * Owns:    per neighbour (gossip_link_peer) the clocks heard/sent, arrival gaps
 *          and deadline, RESYNC bookkeeping, down; the longest stall of
 *          this process (a freeze).
 * Exposes: gossip_live_check_peers, _down, _revive, _ping, _ask_resyncs,
 *          _answer_resync, _on_resync, _on_ping, _behind, _far_ahead,
 *          gossip_link_gap_deadline, gossip_link_behind.
 * Callers: gossip_recv (a valid message revives its sender; PING, RESYNC,
 *          RESYNC_REQ), gossip_round and gossip_member (checks while they
 *          wait), gossip_join (the re-join rule).
 */
#include "gossip/gossip_link_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_RESYNC_RETRY 1.0   /* s between two RESYNC_REQ to the same peer */
/* A RESYNC_REQ for the copy we last sent, this long after we sent it: the
 * asker still lacks it (dropped before the proof of our new connection, or
 * by a full queue), not a request that crossed it; sent again.  Several
 * retry periods: the asker reads our RESYNC before it asks again. */
#define S_RESYNC_REPEAT (3.0 * S_RESYNC_RETRY)

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
void gossip_live_note_gap(gossip_link_peer *p, double gap)
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
 * a silence, so a slow neighbour that still PINGs is never down.  (A
 * neighbour marked late keeps its limit: a killed one is marked late
 * first, and must still be declared down within it.) */
double gossip_live_limit(const gossip_link *l, int j)
{
    double period = l->p[j].period > 0 ? l->p[j].period : gossip_round_period(l);
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
    const gossip_link_peer *p = &l->p[j];
    return (!p->is_in || (st & GOSSIP_PEER_IN_DOWN)) && (!p->is_out || (st & GOSSIP_PEER_OUT_DOWN));
}

/* ---- falling behind (gossip_link.h "Re-join") -------------------------------- */

/* In-neighbour j was heard within its silence limit and did not say BYE. */
int gossip_live_heard_in(const gossip_link *l, int j, double now)
{
    const gossip_link_peer *p = &l->p[j];
    return p->is_in && !p->bye_in && now - p->heard <= gossip_live_limit(l, j);
}

/* j reports an iteration beyond the reach of this node at cur (flow
 * control keeps a neighbour that has us up within lag) and within the run. */
int gossip_live_far_ahead(const gossip_link *l, int j, uint64_t cur)
{
    uint64_t r = l->p[j].reported;
    return r > cur + l->lag + GOSSIP_WINDOW && (!l->cfg.iters || r <= l->cfg.iters);
}

/* This node at cur fell behind: a strict majority of its live in-neighbours
 * are far ahead, and at least two of them when it has two or more (one
 * lying neighbour never suffices).  *far (may be NULL): the lowest
 * iteration they report. */
int gossip_live_behind(const gossip_link *l, uint64_t cur, uint64_t *far)
{
    double now = nn_now();
    int live = 0, ahead = 0, nin = 0;
    uint64_t lo = UINT64_MAX;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        nin += l->p[j].is_in != 0;
        if (!gossip_live_heard_in(l, j, now))
            continue;
        live++;
        if (gossip_live_far_ahead(l, j, cur)) {
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
    return gossip_live_behind(l, gossip_node_iter(l->g), far);
}

uint64_t gossip_link_out_lead(const gossip_link *l, uint64_t iter)
{
    uint64_t lead = UINT64_MAX;
    for (int a = 0; l && a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_link_peer *p = &l->p[j];
        if (!p->is_out || p->is_in || (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN))
            continue;
        uint64_t r = p->reported > iter ? p->reported - iter : 0;
        if (r < lead)
            lead = r;
    }
    return lead;
}

/* Neighbour j reports an iteration beyond our reach behind us: it fell
 * behind and may re-join ("Re-join"); until it is within reach again we do
 * not take it back as out-neighbour on its PINGs (a choco RESYNC_REQ still
 * does: a node that does not re-join needs our copy). */
static int s_fell_behind(const gossip_link *l, int j)
{
    return l->p[j].reported + l->lag + GOSSIP_WINDOW < gossip_node_iter(l->g);
}

/* ---- down and back -------------------------------------------------------------- */

void gossip_live_down(gossip_link *l, int j, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (l->cfg.fail_on_loss) {
        gossip_link_fatal(l, "neighbour %s (rank %d, %s) lost: %s", gossip_link_id(l, j), j,
                l->t->nodes[j].endpoint[0] ? l->t->nodes[j].endpoint : "no endpoint", why);
        return;
    }
    gossip_node_peer_down(l->g, j);
    gossip_recv_drop_stash_of(l, j);
    gossip_flight_reset(l, j);
    l->p[j].down = 1;
    l->st.down_events++;
    gossip_link_log(l, "neighbour %s (rank %d) is down: %s; mixing goes on without it", gossip_link_id(l, j), j, why);
}

/* After a valid message from j: an out-neighbour that was down gets our
 * messages again, but only on evidence that it receives them (traffic from
 * its ROUTER over our DEALER: a PING, RESYNC_REQ or HELLO); a peer that
 * only sends could otherwise soak up our push-sum mass for ever.  One that
 * reports an iteration beyond our reach stays down until it re-joined.  A
 * neighbour that is up again in some role is logged. */
void gossip_live_revive(gossip_link *l, int j, gossip_net_dir dir)
{
    gossip_link_peer *p = &l->p[j];
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
        gossip_link_log(l, "neighbour %s (rank %d) is back%s", gossip_link_id(l, j), j,
              l->choco && (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_WANTS_RESYNC)
                  ? " (asking for its public copy)" : "");
    }
}

/* Choco: asks in-neighbours whose copy we cannot use for their RESYNC,
 * when they are around to answer. */
void gossip_live_ask_resyncs(gossip_link *l)
{
    if (!l->choco)
        return;
    double now = nn_now();
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        gossip_link_peer *p = &l->p[j];
        if (!p->is_in || !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_WANTS_RESYNC))
            continue;
        if (now - p->resync_asked < S_RESYNC_RETRY || now - p->heard > gossip_live_limit(l, j))
            continue;
        p->resync_asked = now;
        gossip_link_ctl(l, GOSSIP_MSG_RESYNC_REQ, j, 1, gossip_node_iter(l->g));
        l->st.resync_req_sent++;
    }
}

/* Choco: our public copy to out-neighbour o, behind what we sent it before. */
void gossip_live_answer_resync(gossip_link *l, int o)
{
    if (!l->choco || !l->running)
        return; /* asked during our start: the asker retries */
    uint64_t at = gossip_node_sent_thru(l->g);
    double now = nn_now();
    gossip_link_peer *p = &l->p[o];
    if (p->resync_iter == at + 1 && now - p->resync_at < S_RESYNC_REPEAT)
        return; /* it already has this one (it crossed the request) */
    if (p->resync_iter == at + 1 && l->st.resyncs_repeated++ < 5)
        gossip_link_log(l, "RESYNC to %s again: it still asks %.1f s after the one for iteration "
              "%llu", gossip_link_id(l, o), now - p->resync_at, (unsigned long long)at + 1);
    if (gossip_node_peer_state(l->g, o) & GOSSIP_PEER_OUT_DOWN)
        gossip_node_peer_up(l->g, o);
    const uint8_t *m;
    size_t len = gossip_node_resync_msg(l->g, o, &m);
    char err[512];
    if (!l->net)
        return;
    int rc = l->cfg.drop_resyncs > 0 ? (l->cfg.drop_resyncs--, 1) /* lost on the way */
                                     : gossip_net_try_send(l->net, o, m, len, err, sizeof err);
    if (rc < 0) {
        gossip_link_log(l, "RESYNC to %s: %s", gossip_link_id(l, o), err);
        return;
    }
    if (rc == 0) { /* its queue is full or the connection down: it will ask again */
        if (l->st.resyncs_unsent++ < 5)
            gossip_link_log(l, "RESYNC to %s not sent: our connection to it takes nothing now (queue "
                  "full or not connected); it will ask again", gossip_link_id(l, o));
        return;
    }
    p->resync_iter = at + 1;
    p->resync_at = p->sent_dealer = nn_now();
    l->st.resyncs_sent++;
    l->st.resync_bytes += len;
}

/* PING to out-neighbour j: what we sent it through (kept ones are not
 * lost), or, while we hold it down as fallen behind (s_fell_behind), our
 * own iteration with GOSSIP_FLAG_AHEAD.  Nothing else would tell it how
 * far ahead we are when we are its only in-neighbour (a directed ring):
 * it would train alone, never re-join, and we would never take it back. */
static void s_ping_out(gossip_link *l, int j)
{
    if ((gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN) && s_fell_behind(l, j))
        gossip_link_ctl_flags(l, GOSSIP_MSG_PING, j, 0, gossip_node_iter(l->g), GOSSIP_FLAG_AHEAD);
    else
        gossip_link_ctl(l, GOSSIP_MSG_PING, j, 0, gossip_node_sent_thru_to(l->g, j));
}

/* PINGs: to every neighbour we sent nothing for ping_every seconds, and
 * (progress) to every in-neighbour when `progress` is set. */
void gossip_live_ping(gossip_link *l, int progress)
{
    double now = nn_now();
    uint64_t at = gossip_node_sent_thru(l->g);
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        gossip_link_peer *p = &l->p[j];
        if (p->is_out && now - p->sent_dealer >= l->cfg.ping_every)
            s_ping_out(l, j);
        if (p->is_in && (progress || now - p->sent_router >= l->cfg.ping_every))
            gossip_link_ctl(l, GOSSIP_MSG_PING, j, 1, at);
    }
}

/* The clock up to which this process has listened: the end of its last
 * pump.  A silence, or a wait, is judged up to there, not up to now: a
 * process that was itself stopped (SIGSTOP, a suspended machine, a long
 * stall) has its neighbours' messages still queued, unread, and must not
 * blame them for its own absence before its next pump reads them. */
static double s_listened(const gossip_link *l, double now)
{
    return l->recv.last_pump > 0 && l->recv.last_pump < now ? l->recv.last_pump : now;
}

/* Declares down whoever has been silent too long, whose message for `iter`
 * is later than the timeout (wait_start: when the wait began; < 0: not
 * waiting), or who left early; both clocks as far as we listened. */
void gossip_live_check_peers(gossip_link *l, int64_t iter, double wait_start)
{
    const double now = s_listened(l, nn_now());
    for (int a = 0; a < l->nnb && !l->fatal; a++) {
        int j = l->nb[a];
        gossip_link_peer *p = &l->p[j];
        if (s_all_down(l, j))
            continue;
        int in_live = p->is_in && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN);
        uint64_t got = gossip_node_peer_got(l->g, j);
        /* silent while we listened: after a pause of ours, what the peer
         * sent meanwhile may not have reached our queues yet (the
         * transport's thread was stopped with us) */
        double silent = now - fmax(p->heard, l->live.resumed), lim = gossip_live_limit(l, j);
        if (silent > lim) {
            gossip_live_down(l, j, "silent for %.1f s (limit %.1f s)", silent, lim);
        } else if (iter >= 0 && in_live && p->bye_in && p->bye_iter <= (uint64_t)iter &&
                   got <= (uint64_t)iter) {
            gossip_live_down(l, j, "it left after %llu iterations (BYE)", (unsigned long long)p->bye_iter);
        } else if (iter >= 0 && in_live && wait_start >= 0 && got + l->stale <= (uint64_t)iter &&
                   now - wait_start > l->cfg.timeout) {
            gossip_live_down(l, j, "its message for iteration %lld is %.0f s late (--timeout)",
                   (long long)iter, now - wait_start);
        }
    }
}

/* A pause of `gap` seconds in which this process did not run its pumps
 * (frozen?): the longest one and when it ended, for the re-join's log;
 * the end of one longer than the peer floor, from which
 * gossip_live_check_peers counts silences.  A local step that long counts
 * too, though the transport kept reading then: a node whose steps take
 * longer than the floor counts silences within its receive passes and
 * waits only. */
void gossip_live_note_stall(gossip_link *l, double gap)
{
    if (gap > l->cfg.peer_floor)
        l->live.resumed = nn_now();
    if (gap > l->live.stall_s) {
        l->live.stall_s = gap;
        l->live.woke = nn_now();
    }
}

/* RESYNC from in-neighbour `from`, taken by the algorithm. */
void gossip_live_on_resync(gossip_link *l, int from)
{
    gossip_link_peer *p = &l->p[from];
    p->resync_asked = 0; /* answered: the next gap may ask at once */
}

/* PING from `from` (over our ROUTER with `in`) at iter: it reports iter
 * (its flow control), and, from an in-neighbour, that everything it sent
 * before `proved` is out (what is missing below is lost). */
void gossip_live_on_ping(gossip_link *l, int from, int in, uint64_t iter, uint64_t proved)
{
    if (in)
        gossip_node_peer_sent(l->g, from, proved);
    gossip_live_report(&l->p[from], in, iter, 0);
}

/* p reports iter over our ROUTER (in = 1) or our DEALER; fresh: it is a
 * new instance (a restart), whose iteration may be lower.  Each connection
 * is in order, but the two are not in order with each other: after a
 * freeze, a PING queued long ago on one may be read after a recent one on
 * the other.  So what it reports is the higher of the last on each. */
void gossip_live_report(gossip_link_peer *p, int in, uint64_t iter, int fresh)
{
    if (fresh)
        p->said[0] = p->said[1] = iter;
    p->said[in != 0] = iter;
    p->reported = p->said[0] > p->said[1] ? p->said[0] : p->said[1];
}

double gossip_live_stall(const gossip_link *l, double *woke)
{
    *woke = l->live.woke;
    return l->live.stall_s;
}

void gossip_live_stall_reset(gossip_link *l)
{
    l->live.stall_s = 0;
}
