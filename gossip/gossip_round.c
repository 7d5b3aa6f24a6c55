/* gossip_round — one gossip round: flow control, prepare and send, the wait
 * for the in-neighbours' messages (with bounded staleness and the fresh
 * wait), the mix (gossip_link.h "Flow control", "Liveness").
 *
 * Owns:    the round's clock and period, the fresh-wait list, the RNG of
 *          drop_gossip, the wait split by why (gossip_node_unready, flow
 *          control, fresh waits); per neighbour (gossip_link_peer) wait_s,
 *          fresh_score.
 * Exposes: gossip_link_round, gossip_link_pump; gossip_round_period (the
 *          silence limit of a neighbour without gaps yet).
 * Callers: node/node_cmd_node.c, tests; gossip_live (period).
 */
#include "gossip/gossip_link_int.h"
#include "gossip/gossip_defaults.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gossip_round_init(gossip_link *l)
{
    l->round.fresh = nn_xcalloc((size_t)l->n, sizeof *l->round.fresh);
    l->round.blamed = nn_xcalloc((size_t)l->n, sizeof *l->round.blamed);
    l->round.unsent = nn_xcalloc((size_t)l->n, 1);
    l->round.nunsent = 0;
    l->round.progress_every = l->lag / 4 ? l->lag / 4 : 1;
    l->round.period = 0;
    nn_rng_seed(&l->round.rng,
                l->cfg.seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(l->rank + 1)));
}

void gossip_round_free(gossip_link *l)
{
    free(l->round.fresh);
    l->round.fresh = NULL;
    free(l->round.blamed);
    l->round.blamed = NULL;
    free(l->round.unsent);
    l->round.unsent = NULL;
}

double gossip_round_period(const gossip_link *l)
{
    return l->round.period;
}

void gossip_round_begin(gossip_link *l)
{
    l->round.start = nn_now();
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

/* The live in-neighbours whose message the wait for iteration iter needs
 * (of iter - S or before) is missing, listed in l->round.blamed; count. */
static int s_missing(gossip_link *l, uint64_t iter)
{
    int m = 0;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (l->p[j].is_in && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN) &&
            gossip_node_peer_got(l->g, j) + l->stale <= iter)
            l->round.blamed[m++] = j;
    }
    return m;
}

/* Adds a slice dt of waiting to the reason the round was not ready at its
 * start (why, gossip_node_unready) and to each of the m in-neighbours
 * missing then (s_missing): the slice that ends with a message's arrival
 * counts for its sender. */
static void s_blame_wait(gossip_link *l, gossip_unready why, int m, double dt)
{
    l->round.waited[why] += dt;
    for (int a = 0; a < m; a++)
        l->p[l->round.blamed[a]].wait_s += dt;
}

/* The wait of round iter is for messages that will not come when this node
 * fell behind: its far-ahead in-neighbours are declared down (they come
 * back after the re-join, gossip_link_catch_up). */
static void s_stop_waiting_if_behind(gossip_link *l, uint64_t iter)
{
    uint64_t far;
    if (!gossip_join_has_model(l) || !gossip_live_behind(l, iter, &far))
        return;
    for (int a = 0; a < l->nnb && !l->fatal; a++) {
        int j = l->nb[a];
        if (l->p[j].is_in && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN) &&
            gossip_live_far_ahead(l, j, iter))
            gossip_live_down(l, j, "it is %llu iterations ahead (this node fell behind: re-joining)",
                   (unsigned long long)(l->p[j].reported - iter));
    }
}

/* An out-edge whose path stayed backed up this many rounds in a row gets
 * a copy of its own (gossip_node_edge_own): scheduling jitter backs a path
 * up for a round or two, a slow link for good. */
#define S_EDGE_AFTER(l) ((unsigned)(l)->stale + 2u)

/* Choco with S > 0 (docs/gossip.md "Deferred updates", "Edge copies"):
 * an out-edge backed up for S_EDGE_AFTER rounds gets a copy of its own,
 * and its messages then carry an update only when our last one to it is
 * acknowledged and two round trips old (gossip_flight_edge_busy; within
 * gossip_node_edge_defer's cap); while an edge that shares our update is
 * backed up, the round's shared message carries none (every other round
 * at most). */
static void s_defer(gossip_link *l, uint64_t iter)
{
    if (!l->cfg.defer_updates || !l->choco || !gossip_flight_on(l))
        return;
    int shared = -1;
    for (int a = 0; a < l->nnb; a++) {
        const int j = l->nb[a];
        gossip_link_peer *p = &l->p[j];
        if (!p->is_out)
            continue;
        const int backed = gossip_flight_backed_to(l, j);
        p->backed_rounds = backed ? p->backed_rounds + 1 : 0;
        if (backed && p->backed_rounds >= S_EDGE_AFTER(l) && !gossip_node_edge_is_own(l->g, j) &&
            gossip_node_edge_own(l->g, j) == 0)
            gossip_link_log(l, "iteration %llu: %s gets an edge copy of its own (the path to it "
                            "backed up for %u rounds)", (unsigned long long)iter,
                            gossip_link_id(l, j), p->backed_rounds);
        if (gossip_node_edge_is_own(l->g, j)) {
            if (gossip_flight_edge_busy(l, j))
                gossip_node_edge_defer(l->g, j); /* counted: edge_deferred */
        } else if (backed && shared < 0) {
            shared = j;
        }
    }
    if (shared < 0 || gossip_node_defer_update(l->g) != 0)
        return;
    if (l->st.updates_deferred++ < 3)
        gossip_link_log(l, "iteration %llu: update deferred, %s has not acknowledged our update "
                        "of %.2f s ago%s", (unsigned long long)iter, gossip_link_id(l, shared),
                        nn_now() - l->p[shared].upd_t,
                        l->st.updates_deferred == 3 ? " (further ones only counted)" : "");
}

/* The prepared message to `to`.  One the transport's queue does not take
 * now is, with push-sum, kept (gossip_node_keep: not lost, no queue behind
 * a slow link) and retried while the round waits; otherwise it is lost
 * and the receiver's gap shows.  -1 on a fatal error. */
static int s_send_to(gossip_link *l, int to, const uint8_t *msg, size_t len, char *err,
                     size_t errlen)
{
    /* push-sum with too much of ours unacknowledged there (gossip_flight):
     * the share is kept and retried like one the queue did not take */
    if (gossip_flight_full(l, to, gossip_live_limit(l, to)) &&
        gossip_node_keep(l->g, to, 1) == 0) {
        l->st.kept_flight++;
        if (!l->round.unsent[to]++)
            l->round.nunsent++;
        return 0;
    }
    int rc = gossip_net_try_send(l->net, to, msg, len, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        l->st.dropped_full++;
        if (gossip_node_keep(l->g, to, 1) == 0) {
            l->st.kept_full++;
            if (!l->round.unsent[to]++)
                l->round.nunsent++;
        }
        return 0;
    }
    l->p[to].sent_dealer = nn_now();
    gossip_flight_sent(l, to, gossip_node_iter(l->g), gossip_node_sends_update(l->g, to));
    return 0;
}

/* Kept messages of this round that the queue takes now go out after all. */
static int s_retry_unsent(gossip_link *l, char *err, size_t errlen)
{
    int to;
    const uint8_t *msg;
    size_t len;
    for (int k = 0; l->round.nunsent && (len = gossip_node_outbox(l->g, k, &to, &msg)) > 0; k++) {
        if (!l->round.unsent[to] || gossip_flight_full(l, to, gossip_live_limit(l, to)))
            continue;
        int rc = gossip_net_try_send(l->net, to, msg, len, err, errlen);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            gossip_node_keep(l->g, to, 0);
            l->round.unsent[to] = 0;
            l->round.nunsent--;
            l->st.kept_sent_late++;
            l->p[to].sent_dealer = nn_now();
            gossip_flight_sent(l, to, gossip_node_iter(l->g), gossip_node_sends_update(l->g, to));
        }
    }
    return 0;
}

/* The last round of the run: what is still kept goes out, waiting for the
 * queue (up to the send timeout): no later message would announce it, and
 * the receivers would wait for it until they declared us down.  Not to a
 * neighbour that is down or said BYE: nobody reads it there. */
static void s_flush_unsent(gossip_link *l)
{
    int to;
    const uint8_t *msg;
    size_t len;
    char err[512];
    for (int k = 0; l->round.nunsent && (len = gossip_node_outbox(l->g, k, &to, &msg)) > 0; k++) {
        if (!l->round.unsent[to])
            continue;
        if ((gossip_node_peer_state(l->g, to) & GOSSIP_PEER_OUT_DOWN) || l->p[to].bye_in) {
            gossip_link_log(l, "last message to %s not sent: it is %s (its share stays here)",
                            gossip_link_id(l, to), l->p[to].bye_in ? "gone" : "down");
            continue;
        }
        if (gossip_net_send(l->net, to, msg, len, err, sizeof err) != 0) {
            gossip_link_log(l, "last message to %s not sent (its share stays here): %s",
                            gossip_link_id(l, to), err);
            continue;
        }
        gossip_node_keep(l->g, to, 0);
        l->round.unsent[to] = 0;
        l->round.nunsent--;
        l->st.kept_sent_late++;
        l->p[to].sent_dealer = nn_now();
    }
}

/* Flow control: a live out-neighbour is too far behind iteration iter. */
static int s_flow_blocked(const gossip_link *l, uint64_t iter)
{
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_link_peer *p = &l->p[j];
        if (p->is_out && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN) &&
            iter >= p->reported + l->lag)
            return 1;
    }
    return 0;
}

/* Bounded staleness: once the round has waited late_after x our round
 * period, every live in-neighbour it waits for (far behind: its messages
 * through iter - S missing) is mixed late from now on (gossip_node_peer_late)
 * instead of setting our pace; it is waited for again once it caught up.
 * Not one that sent nothing yet: it is still at its start barrier (waiting
 * for a slow starter of its own), and we must not run ahead of it, or it
 * takes the run for one in progress and joins it by state transfer. */
static void s_mark_late(gossip_link *l, uint64_t iter, double wait_start)
{
    if (l->cfg.late_after <= 0 || l->round.period <= 0 ||
        nn_now() - wait_start < l->cfg.late_after * l->round.period)
        return;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        gossip_link_peer *p = &l->p[j];
        uint64_t got = gossip_node_peer_got(l->g, j);
        if (!p->is_in || (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_IN_DOWN) || got == 0 ||
            got + l->stale > iter || !gossip_node_peer_late(l->g, j))
            continue;
        if (l->st.late_marks++ < 3)
            gossip_link_log(l, "neighbour %s (rank %d) is %llu iterations behind: its messages are "
                            "mixed as they come, not waited for, until it catches up%s",
                            gossip_link_id(l, j), j,
                            (unsigned long long)(iter - gossip_node_peer_got(l->g, j)),
                            l->st.late_marks == 3 ? " (further such notes only counted)" : "");
    }
}

/* How long the wait's next pump may block: a slice, cut short just past
 * the time s_mark_late would mark a neighbour late (when everyone waits
 * for the same stopped node nothing else arrives to wake the pump; the
 * pump's clock counts whole milliseconds). */
static double s_slice(const gossip_link *l, double wait_start)
{
    if (l->cfg.late_after <= 0 || l->round.period <= 0)
        return GOSSIP_LINK_SLICE;
    double left = wait_start + l->cfg.late_after * l->round.period - nn_now() + 1e-3;
    return left > 0 && left < GOSSIP_LINK_SLICE ? left : GOSSIP_LINK_SLICE;
}

/* Pumps until iteration iter may mix.  -1 on a fatal error. */
static int s_wait_ready(gossip_link *l, uint64_t iter, double wait_start)
{
    while (!gossip_node_ready(l->g, iter)) {
        s_mark_late(l, iter, wait_start);
        if (gossip_node_ready(l->g, iter))
            break;
        if (gossip_link_signals(l) > 1)
            gossip_link_fatal(l, "interrupted twice while waiting for iteration %llu",
                    (unsigned long long)iter);
        gossip_live_check_peers(l, (int64_t)iter, wait_start);
        s_stop_waiting_if_behind(l, iter);
        double w0 = nn_now();
        gossip_unready why = gossip_node_unready(l->g, iter, NULL);
        int m = s_missing(l, iter);
        if (l->fatal || gossip_recv_pump(l, s_slice(l, wait_start)) != 0)
            return -1;
        char err[256];
        if (s_retry_unsent(l, err, sizeof err) != 0) {
            gossip_link_fatal(l, "%s", err);
            return -1;
        }
        s_blame_wait(l, why, m, nn_now() - w0);
    }
    return 0;
}

/* In-neighbour j is one we do not send to (a directed edge) and its step
 * time, from its messages, is at most GOSSIP_FRESH_STEP_LIKE x ours: when
 * it is behind us it is displaced, not slow.  Two neighbours both ways
 * wait for each other's messages (within S); over a directed edge only the
 * receiver waits, and only the fresh wait keeps the two ends level (on a
 * directed ring the skews add up around the ring: with S = 2 and a level
 * neighbour's short grace, ring8 SGP ended about a point lower than with
 * S = 0 at equal speeds; docs/gossip.md "Directed edges").  A slow one
 * (a larger step time) is not waited for longer: it would set our pace. */
static int s_directed_like_us(const gossip_link *l, int j)
{
    const gossip_link_peer *p = &l->p[j];
    return !p->is_out && l->stale >= 1 && p->step_s > 0 && l->round.busy > 0 &&
           p->step_s <= GOSSIP_FRESH_STEP_LIKE * l->round.busy;
}

/* How far behind us in-neighbour j may be and still be waited for: up to
 * S - 1 for s_directed_like_us, level (0) otherwise. */
static uint64_t s_fresh_behind(const gossip_link *l, int j)
{
    return s_directed_like_us(l, j) ? l->stale - 1 : 0;
}

/* In-neighbour j's message of iter is still awaited by a fresh wait. */
static int s_fresh_awaited(const gossip_link *l, int j, uint64_t iter)
{
    return !gossip_node_fresh_from(l->g, j, iter, s_fresh_behind(l, j));
}

/* The in-neighbours a fresh wait for iter would wait for: level with us
 * (or within s_fresh_behind), current message missing, score >= 1/2.
 * Lists them in l->round.fresh; count. */
static int s_fresh_wanted(gossip_link *l, uint64_t iter)
{
    int m = 0;
    for (int b = 0; b < l->nnb; b++) {
        int j = l->nb[b];
        if (l->p[j].is_in && l->p[j].fresh_score >= 0.5 && s_fresh_awaited(l, j, iter))
            l->round.fresh[m++] = j;
    }
    return m;
}

/* The clock a fresh wait that began at t0 gives up on in-neighbour j:
 * fresh_wait x our round period, or for s_directed_like_us
 * GOSSIP_FRESH_WAIT_IN_ONLY x fresh_wait x the larger step time (not the
 * round period, which the waits themselves stretch). */
static double s_fresh_until(const gossip_link *l, int j, double t0)
{
    if (!s_directed_like_us(l, j))
        return t0 + l->cfg.fresh_wait * l->round.period;
    return t0 + GOSSIP_FRESH_WAIT_IN_ONLY * l->cfg.fresh_wait * fmax(l->round.busy, l->p[j].step_s);
}

/* Bounded staleness: a late neighbour over a directed edge that is as
 * fast as us and still sending (a message within 2 of its steps or our
 * rounds) is waited for again (gossip_node_peer_wait_again; s_mark_late
 * ends that when it holds a round up).  Nothing else ends such a mark at
 * equal speeds: the neighbour cannot see that it is behind, and we no
 * longer wait for it, so on a directed ring we run ahead of the others up
 * to what flow control allows (ring8 SGP: a node marked its in-neighbour
 * late on a scheduling hiccup early on, ran 10-15 iterations ahead and
 * mixed its stale messages in 187 of 189 rounds).  A slow or stopped one
 * stays late: waiting would set our pace. */
static void s_lift_late(gossip_link *l)
{
    double now = nn_now();
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        const gossip_link_peer *p = &l->p[j];
        if (!p->is_in || !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_LATE) ||
            !s_directed_like_us(l, j) ||
            now - p->last_gossip > 2 * fmax(p->step_s, l->round.period))
            continue;
        if (gossip_node_peer_wait_again(l->g, j))
            l->st.late_lifts++;
    }
}

/* Bounded staleness, once iteration iter may mix: up to s_fresh_until for
 * the messages of iter from level neighbours (gossip_node_fresh_from; a
 * directed one like us up to S - 1 behind) that usually make it.  A
 * neighbour's score halves when the grace runs out on it, grows by 1/4
 * when it makes it, and by 1/50 per round it is not waited for (so a slow
 * one is tried again now and then).  -1 on a fatal error. */
static int s_wait_fresh(gossip_link *l, uint64_t iter, double wait_start)
{
    for (int b = 0; b < l->nnb; b++)
        if (l->p[l->nb[b]].fresh_score < 0.5)
            l->p[l->nb[b]].fresh_score += 0.02;
    int m = l->cfg.fresh_wait > 0 && l->round.period > 0 ? s_fresh_wanted(l, iter) : 0;
    if (m == 0)
        return 0;
    double t0 = nn_now();
    l->st.fresh_waits++;
    for (;;) {
        double left = 0;
        for (int a = 0; a < m; a++) {
            int j = l->round.fresh[a];
            double until = s_fresh_until(l, j, t0);
            if (s_fresh_awaited(l, j, iter) && until - nn_now() > left)
                left = until - nn_now();
        }
        if (left <= 0 || !gossip_node_ready(l->g, iter))
            break;
        gossip_live_check_peers(l, (int64_t)iter, wait_start);
        if (l->fatal || gossip_recv_pump(l, left < GOSSIP_LINK_SLICE ? left : GOSSIP_LINK_SLICE) != 0)
            return -1;
    }
    l->round.waited_fresh += nn_now() - t0;
    for (int a = 0; a < m; a++) {
        gossip_link_peer *p = &l->p[l->round.fresh[a]];
        if (!s_fresh_awaited(l, l->round.fresh[a], iter)) {
            p->fresh_score = fmin(1.0, p->fresh_score + 0.25);
        } else {
            p->fresh_score *= 0.5;
            l->st.fresh_missed++;
        }
    }
    return 0;
}

/* Our step time (a round less its waits: the local step, compression,
 * the mix), smoothed, into round.busy and the headers of our next
 * messages.  A round counts at most 4 x the average so far, so one long
 * round (an evaluation, a checkpoint) raises it by 30% at most and a
 * neighbour does not take us for slow after it; a node that did slow
 * down shows within a few rounds. */
static void s_note_busy(gossip_link *l, double busy)
{
    if (busy <= 0)
        return;
    double b = l->round.busy;
    l->round.busy = b > 0 ? 0.9 * b + 0.1 * fmin(busy, 4 * b) : busy;
    gossip_node_set_step(l->g, l->round.busy);
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
    /* every round reads what is queued and judges silences, waiting or
     * not: a late neighbour is not waited for, and a round that waits for
     * nobody must still declare a killed one down within its limit (and
     * keep the gaps between our pumps short: gossip_live_note_stall) */
    if (l->fatal || gossip_recv_pump(l, 0) != 0)
        return nn_errf(err, errlen, "%s", l->fatal_msg);
    gossip_live_check_peers(l, -1, -1);
    while (s_flow_blocked(l, iter)) {
        waited = 1;
        if (gossip_link_signals(l) > 1)
            gossip_link_fatal(l, "interrupted twice while waiting for a slow out-neighbour");
        gossip_live_check_peers(l, -1, -1);
        if (l->fatal || gossip_recv_pump(l, GOSSIP_LINK_SLICE) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
    l->st.flow_waits += (uint64_t)waited;
    double t1 = nn_now();
    l->round.waited_flow += t1 - t0;
    s_defer(l, iter);
    if (gossip_node_prepare(l->g, x, iter, err, errlen) != 0)
        return -1;
    double t2 = nn_now();
    tm->compress += t2 - t1;
    int to;
    const uint8_t *msg;
    size_t len;
    for (int k = 0; (len = gossip_node_outbox(l->g, k, &to, &msg)) > 0; k++) {
        if (l->cfg.drop_gossip > 0 && nn_rng_uniform(&l->round.rng) < l->cfg.drop_gossip) {
            l->st.dropped_test++;
            continue;
        }
        if (s_send_to(l, to, msg, len, err, errlen) < 0)
            return -1;
    }
    wait_start = nn_now();
    s_lift_late(l);
    /* a message handled during the fresh wait can make the round unready
     * again (choco: a later update proves one lost): wait for it again */
    for (int fresh_done = 0; !fresh_done || !gossip_node_ready(l->g, iter); fresh_done = 1)
        if (s_wait_ready(l, iter, wait_start) != 0 ||
            (!fresh_done && s_wait_fresh(l, iter, wait_start) != 0))
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    double t3 = nn_now();
    tm->wait += (t1 - t0) + (t3 - t2);
    if (l->round.nunsent && l->cfg.iters && iter + 1 >= l->cfg.iters)
        s_flush_unsent(l);
    if (l->round.nunsent) { /* the kept ones stay kept: announced next time */
        memset(l->round.unsent, 0, (size_t)l->n);
        l->round.nunsent = 0;
    }
    if (gossip_node_mix(l->g, x, iter, err, errlen) != 0)
        return -1;
    gossip_recv_feed_stash(l);
    if (gossip_node_iter(l->g) % l->round.progress_every == 0)
        gossip_live_ping(l, 1);
    l->st.isolated_rounds = s_mixed_alone(l, iter) ? l->st.isolated_rounds + 1 : 0;
    gossip_join_note_mixed(l, iter);
    double t4 = nn_now();
    tm->mix += t4 - t3;
    double round = t4 - l->round.start;
    l->round.start = t4;
    l->round.period = l->round.period > 0 ? 0.9 * l->round.period + 0.1 * round : round;
    s_note_busy(l, round - (t1 - t0) - (t3 - t2));
    return 0;
}

void gossip_link_pump(gossip_link *l, double seconds)
{
    double until = nn_now() + seconds;
    do {
        gossip_live_check_peers(l, -1, -1);
        if (gossip_recv_pump(l, until - nn_now()) != 0)
            return;
    } while (nn_now() < until);
}
