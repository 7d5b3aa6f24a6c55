/* gossip_join — the state transfer: answering STATE_REQ, assembling and
 * checking STATE, choosing among holders, joining a run in progress and
 * re-joining after falling behind (gossip_link.h "Start", "Re-join").
 *
 * Owns:    the model handed over (gossip_link_set_model), the holder's
 *          packed state, the joiner's assembly (gossip_state_rx), the
 *          re-join's back-off and log clocks.
 * Exposes: gossip_link_catch_up, gossip_link_set_model, _expect_state,
 *          _state_ready, _state_distance; to gossip_member the join
 *          (gossip_join_take_state) and the RESYNC exchange after it; to
 *          gossip_recv the answer (gossip_join_answer_state, _pump).
 * Callers: node/node_cmd_node.c, tests; gossip_recv (STATE_REQ, STATE),
 *          gossip_member (join at the start), gossip_round (log).
 */
#include "gossip/gossip_link_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_STATE_EVERY  1.0   /* s between two STATE answers to the same peer */
#define S_STATE_WAIT   5.0   /* s a joiner waits for a holder's next chunk */
#define S_STATES       3     /* states a joiner compares at most */
/* Two neighbours' models agree when |a - b| <= S_STATE_AGREE x min(|a|, |b|)
 * (L2).  Honest neighbours of a run differ by a few percent (the
 * consensus distance; docs/node.md "Joining"); a foreign model (another
 * seed, a constant) differs by about 1 or more. */
#define S_STATE_AGREE  0.25

void gossip_join_free(gossip_link *l)
{
    free(l->join.zbuf);
    l->join.zbuf = NULL;
    gossip_buf_free(&l->join.sbytes);
    gossip_buf_free(&l->join.smsg);
    if (l->join.rx.bytes)
        gossip_state_rx_free(&l->join.rx);
}

/* This node has a model to hand over and to join into (gossip_link_set_model). */
int gossip_join_has_model(const gossip_link *l)
{
    return l->join.x != NULL;
}

/* A state transfer is under way (far-ahead GOSSIP is dropped, not refused). */
int gossip_join_joining(const gossip_link *l)
{
    return l->join.joining;
}

void gossip_join_begin(gossip_link *l)
{
    l->join.joining = 1;
}

/* The next piece of the answer under way: over our DEALER first a PING
 * with the ahead flag (the asker checks the state's iteration against the
 * last one we told it, and over our DEALER, to an out-neighbour we may
 * hold down as fallen behind, that was a PING long ago: this one is
 * exact), then chunk ans_k.  1 sent, 0 the connection takes nothing now,
 * 2 nothing left, -1 failed (err). */
static int s_answer_next(gossip_link *l, char *err, size_t errlen)
{
    int j = l->join.ans_to - 1, in = l->join.ans_in;
    if (l->join.ans_ping) {
        if (gossip_link_ctl_flags(l, GOSSIP_MSG_PING, j, 0, l->join.ans_iter, GOSSIP_FLAG_AHEAD))
            return 0;
        l->join.ans_ping = 0;
        return 1;
    }
    if (gossip_state_chunk_msg((uint32_t)l->rank, l->join.ans_iter, l->fp, &l->join.sbytes,
                               l->join.ans_crc, l->join.ans_chunk, l->join.ans_k,
                               &l->join.smsg) == 0)
        return 2;
    const uint8_t *m = l->join.smsg.data;
    size_t len = l->join.smsg.len;
    int rc = in ? gossip_net_reply(l->net, j, m, len, err, errlen)
                : gossip_net_try_send(l->net, j, m, len, err, errlen);
    if (rc < 0)
        return -1;
    if (!in && rc == 0)
        return 0;
    l->join.ans_k++;
    return 1;
}

/* Sends what the connection takes of the answer under way: a reply over
 * our ROUTER all at once; over our DEALER, whose queue holds one message
 * with push-sum (GOSSIP_DEF_PS_DEALER_HWM), what fits now, the rest on the
 * next pumps.  Given up after S_STATE_WAIT without progress (the asker
 * asks again, or another holder). */
void gossip_join_pump(gossip_link *l)
{
    if (!l->join.ans_to)
        return;
    int j = l->join.ans_to - 1, rc;
    char err[512] = "its connection took nothing for too long";
    while ((rc = s_answer_next(l, err, sizeof err)) == 1)
        l->join.ans_t = nn_now();
    if (rc == 0 && nn_now() - l->join.ans_t <= S_STATE_WAIT)
        return; /* full: the next pump goes on */
    l->join.ans_to = 0;
    if (rc != 2) {
        gossip_link_log(l, "STATE to %s (rank %d): %s", gossip_link_id(l, j), j, err);
        return;
    }
    l->st.states_sent++;
    l->st.state_bytes += l->join.sbytes.len;
    gossip_link_log(l, "sent our model (iteration %llu, %zu bytes) to the joining %s (rank %d)",
          (unsigned long long)l->join.ans_iter, l->join.sbytes.len, gossip_link_id(l, j), j);
}

/* STATE_REQ from neighbour j (on our ROUTER with `in`): our current model
 * z = x/psi and the extra floats, in chunks, on the channel it asked on
 * (gossip_join_pump).  Only while running, with a model, at most once per
 * S_STATE_EVERY, and one answer at a time (another asker retries). */
void gossip_join_answer_state(gossip_link *l, int j, int in)
{
    gossip_link_peer *p = &l->p[j];
    double now = nn_now();
    if (!l->running || !l->join.x || !l->net || now - p->state_sent < S_STATE_EVERY ||
        (in && !gossip_proof_router_trusted(l, j)) ||
        (l->join.ans_to && l->join.ans_to != j + 1))
        return; /* the asker retries, or asks another neighbour */
    size_t numel = l->layout->numel, n = numel + l->join.nextra;
    if (!l->join.zbuf)
        l->join.zbuf = nn_xmalloc(sizeof *l->join.zbuf * n + 1);
    gossip_node_debias(l->g, l->join.x, l->join.zbuf);
    if (l->join.nextra)
        memcpy(l->join.zbuf + numel, l->join.extra, sizeof *l->join.zbuf * l->join.nextra);
    l->join.ans_crc = gossip_state_pack(l->join.zbuf, n, &l->join.sbytes);
    l->join.ans_chunk = 4 * numel < GOSSIP_STATE_CHUNK_MAX ? 4 * numel : GOSSIP_STATE_CHUNK_MAX;
    l->join.ans_iter = gossip_node_iter(l->g);
    l->join.ans_to = j + 1; /* a repeated request starts the answer again */
    l->join.ans_in = in;
    l->join.ans_ping = !in;
    l->join.ans_k = 0;
    l->join.ans_t = now;
    p->state_sent = now;
    gossip_join_pump(l);
}

/* STATE chunk from neighbour j (over our ROUTER with `in`): only the one
 * a joiner asked is taken, and only on the connection it asked on (a
 * STATE under j's id on the other one is not j's answer: over our ROUTER
 * it may come from whoever took j's id on our port first). */
void gossip_join_on_state(gossip_link *l, int j, int in, const gossip_header *h,
                          const uint8_t *msg, size_t len)
{
    char err[1024];
    if (!l->join.joining) {
        l->st.state_refused++;
        gossip_recv_refuse(l, "STATE from %s (rank %d): this node did not ask for a state", gossip_link_id(l, j), j);
        return;
    }
    if (in != l->join.state_in) {
        l->st.state_refused++;
        gossip_recv_refuse(l, "STATE from %s (rank %d) over our %s: it was asked over our %s", gossip_link_id(l, j),
                 j, in ? "ROUTER" : "DEALER", in ? "DEALER" : "ROUTER");
        return;
    }
    int rc = gossip_state_rx_add_decoded(&l->join.rx, j, h, msg, len, err, sizeof err);
    if (rc < 0) {
        l->st.state_refused++;
        gossip_recv_refuse_payload(l, j, l->join.rx.nonfinite ? GOSSIP_RECV_NONFINITE
                                                             : GOSSIP_RECV_MALFORMED, err);
    } else if (rc == 1) {
        l->join.state_ready = 1;
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
            const gossip_link_peer *p = &l->p[j];
            if (p->down || p->bye_in || !(p->hello || p->ack) || (pass == 0) != (p->is_out != 0))
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
        if (!gossip_live_heard_in(l, j, now) || !gossip_live_far_ahead(l, j, cur))
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
                       "reported (%llu) or outside this node's %llu..%llu", gossip_link_id(l, j), j,
                       (unsigned long long)T, (unsigned long long)r, (unsigned long long)cur + 1,
                       (unsigned long long)(l->cfg.iters ? l->cfg.iters : UINT64_MAX));
    return 0;
}

/* Asks holder j for its state (STATE_REQ on the connection of our choice:
 * our DEALER, which we connected to the endpoint j is listed at, when j is
 * an out-neighbour, else our ROUTER; only a STATE on that connection is
 * taken, gossip_join_on_state) and pumps until it is assembled and checked
 * (0), j stopped delivering for S_STATE_WAIT or left (BYE) (1: ask
 * another), or the deadline passed, a signal came or the transport failed
 * (-1 with a message). */
static int s_fetch_state(gossip_link *l, int j, uint64_t T, double deadline, char *err,
                         size_t errlen)
{
    l->join.state_ready = 0;
    l->join.state_in = !l->p[j].is_out;
    gossip_state_rx_begin(&l->join.rx, j);
    gossip_link_ctl(l, GOSSIP_MSG_STATE_REQ, j, l->join.state_in, T);
    gossip_link_log(l, "asking %s (rank %d) for its model", gossip_link_id(l, j), j);
    double until = nn_now() + S_STATE_WAIT;
    uint64_t got = 0;
    while (!l->join.state_ready && l->join.rx.from == j && !l->p[j].bye_in && nn_now() < until) {
        if (nn_now() >= deadline || gossip_link_signals(l))
            return nn_errf(err, errlen, "join: no neighbour delivered its state within "
                           "%.0f s%s", l->cfg.timeout, gossip_link_signals(l) ? " (signal)" : "");
        if (gossip_recv_pump(l, until - nn_now()) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
        if (l->join.rx.got > got) { /* progress: give the holder more time */
            got = l->join.rx.got;
            until = nn_now() + S_STATE_WAIT;
        }
    }
    /* its BYE came over another connection than its STATE: what it sent
     * before leaving may still be queued */
    if (!l->join.state_ready && l->p[j].bye_in && gossip_recv_pump(l, 0) != 0)
        return nn_errf(err, errlen, "%s", l->fatal_msg);
    return l->join.state_ready ? 0 : 1;
}

/* Joining: the state of holder j at iteration T is plausible only within
 * the run (cfg.iters).  0 ok, -1 refused with a message. */
static int s_join_state_ok(const gossip_link *l, int j, uint64_t T, char *err, size_t errlen)
{
    if (l->cfg.iters && T >= l->cfg.iters)
        return nn_errf(err, errlen, "STATE from %s (rank %d) for iteration %llu: beyond the "
                       "run's %llu iterations", gossip_link_id(l, j), j, (unsigned long long)T,
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
    *dist = gossip_link_state_distance(va, vb, l->layout->numel + l->join.nextra);
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
            gossip_link_log(l, "the models of %s (rank %d) and %s (rank %d) agree (distance %.3g, "
                  "iterations %llu and %llu)", gossip_link_id(l, c->from[a]), c->from[a],
                  gossip_link_id(l, c->from[b]), c->from[b], d, (unsigned long long)c->iter[a],
                  (unsigned long long)c->iter[b]);
            for (int o = 0; o < c->n; o++)
                if (o != a && o != b &&
                    !s_states_agree(l, c->vals[a], c->iter[a], c->vals[o], c->iter[o], &d)) {
                    l->st.state_refused++;
                    gossip_recv_refuse(l, "the model of %s (rank %d) at iteration %llu is an outlier: "
                             "distance %.3g from the agreed one (at most %.2g)",
                             gossip_link_id(l, c->from[o]), c->from[o], (unsigned long long)c->iter[o],
                             d, S_STATE_AGREE);
                }
            return a;
        }
    return -1;
}

/* No holder left to ask: -1 with a message that says whether the run
 * ended under us (every neighbour said BYE: it finished before it could
 * hand its model over) or the neighbours are down. */
static int s_no_holder(const gossip_link *l, int rejoin, char *err, size_t errlen)
{
    int left = 0;
    uint64_t last = 0;
    for (int a = 0; a < l->nnb; a++) {
        const gossip_link_peer *p = &l->p[l->nb[a]];
        if (p->bye_in) {
            left++;
            last = p->bye_iter > last ? p->bye_iter : last;
        }
    }
    if (left == l->nnb)
        return nn_errf(err, errlen, "%s: the run ended before this node could %s: every "
                       "neighbour left (BYE, after %llu iterations) without handing its model "
                       "over", rejoin ? "re-join" : "join", rejoin ? "catch up" : "join",
                       (unsigned long long)last);
    return nn_errf(err, errlen, "%s: no neighbour left to ask for its state (%d of %d left the "
                   "run, the others are down or silent)", rejoin ? "re-join" : "join", left,
                   l->nnb);
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
        return s_no_holder(l, rejoin, err, errlen);
    for (int k = 0; k < c->n; k++)
        if (c->from[k] == *j)
            return 0; /* have it: the holders went round */
    int rc = s_fetch_state(l, *j, cur, deadline, err, errlen);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    char why[512];
    if ((rejoin ? s_rejoin_state_ok(l, *j, cur, l->join.rx.iter, why, sizeof why)
                : s_join_state_ok(l, *j, l->join.rx.iter, why, sizeof why)) != 0) {
        l->st.state_refused++;
        gossip_recv_refuse(l, "%s", why);
        return 0;
    }
    size_t n = l->layout->numel + l->join.nextra;
    c->from[c->n] = *j;
    c->iter[c->n] = l->join.rx.iter;
    c->bytes[c->n] = l->join.rx.got;
    c->vals[c->n] = nn_xmalloc(sizeof(float) * n + 1);
    memcpy(c->vals[c->n], l->join.rx.vals, sizeof(float) * n);
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
        const gossip_link_peer *p = &l->p[j];
        c += rejoin ? gossip_live_heard_in(l, j, now) && gossip_live_far_ahead(l, j, cur)
                    : !p->down && !p->bye_in && (p->hello || p->ack);
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
        gossip_link_log(l, "only %s (rank %d) delivered its model: taken unconfirmed",
              gossip_link_id(l, c->from[0]), c->from[0]);
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
int gossip_join_take_state(gossip_link *l, uint64_t *T, int rejoin, int *holder, char *err,
                        size_t errlen)
{
    if (!l->join.rx.bytes)
        gossip_state_rx_init(&l->join.rx, l->layout->numel + l->join.nextra, l->fp);
    s_states c = {.n = 0};
    int k = s_choose_state(l, &c, *T, rejoin, err, errlen);
    l->join.joining = 0;
    l->join.state_ready = 0;
    if (k >= 0) {
        int j = c.from[k];
        *holder = j;
        size_t numel = l->layout->numel;
        memcpy(l->join.x, c.vals[k], sizeof *l->join.x * numel);
        if (l->join.nextra)
            memcpy(l->join.extra, c.vals[k] + numel, sizeof *l->join.extra * l->join.nextra);
        if (c.iter[k] > *T || rejoin)
            *T = c.iter[k];
        l->join.state_bytes_taken = c.bytes[k];
        l->st.joined |= !rejoin;
        l->st.join_from = j;
        l->st.join_iter = *T;
        if (!rejoin)
            gossip_link_log(l, "took the model of %s (rank %d) at its iteration %llu (%llu bytes, CRC "
                  "checked)", gossip_link_id(l, j), j, (unsigned long long)c.iter[k],
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
            gossip_live_down(l, j, "no RESYNC within %.1f s (it is taken back, and asked again, on its "
                   "next message)", give_up);
    }
    return waiting;
}

/* Choco, rejoining: our copies of the in-neighbours are void; asks for
 * theirs and waits (bounded by the timeout) for the RESYNCs.  Our new
 * iteration is PINGed to every neighbour first (gossip_live.c s_fell_behind). */
int gossip_join_rejoin_resyncs(gossip_link *l, char *err, size_t errlen)
{
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].sent_dealer = l->p[l->nb[a]].sent_router = 0;
    gossip_live_ping(l, 1);
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
     * back and asked again on its next message (gossip_live_revive, gossip_live_ask_resyncs). */
    const double wait = fmin(l->cfg.timeout, 2.0 * l->cfg.peer_floor);
    const double t0 = nn_now(), until = t0 + wait;
    while (s_resyncs_missing(l, 0)) {
        if (gossip_link_signals(l))
            return nn_errf(err, errlen, "interrupted (signal) while re-syncing");
        if (nn_now() >= until) {
            s_resyncs_missing(l, nn_now() - t0);
            return 0;
        }
        if (gossip_recv_pump(l, until - nn_now()) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
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
            gossip_live_answer_resync(l, j);
        }
    }
    if (l->choco) /* PINGs our new iteration first */
        return gossip_join_rejoin_resyncs(l, err, errlen);
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].sent_dealer = l->p[l->nb[a]].sent_router = 0;
    gossip_live_ping(l, 1); /* our new iteration, to everybody (their flow control) */
    return 0;
}

int gossip_link_catch_up(gossip_link *l, uint64_t *iter, char *err, size_t errlen)
{
    uint64_t cur = gossip_node_iter(l->g), far, T = cur;
    double now = nn_now();
    if (!l->running || !l->join.x || !l->net || now < l->join.rejoin_next || !gossip_live_behind(l, cur, &far))
        return 0;
    int holder = -1;
    char why[1024];
    gossip_join_begin(l);
    if (gossip_join_take_state(l, &T, 1, &holder, why, sizeof why) != 0) {
        l->join.rejoin_next = nn_now() + l->cfg.peer_floor;
        gossip_link_log(l, "fell %llu iterations behind, but could not re-join: %s; training on, "
              "trying again in %.0f s", (unsigned long long)(far - cur), why, l->cfg.peer_floor);
        return 0;
    }
    char frozen[64] = "";
    double woke, stall = gossip_live_stall(l, &woke);
    l->join.rejoin_woke = 0;
    if (stall > l->cfg.peer_floor && now - woke < l->cfg.timeout) {
        snprintf(frozen, sizeof frozen, " (frozen %.1f s?)", stall);
        l->join.rejoin_woke = woke;
    }
    gossip_link_log(l, "fell %llu iterations behind%s; re-joining with the model of rank %d at "
          "iteration %llu (%llu bytes, CRC checked)", (unsigned long long)(T - cur), frozen,
          holder, (unsigned long long)T, (unsigned long long)l->join.state_bytes_taken);
    if (gossip_node_join(l->g, l->join.x, T, err, errlen) != 0)
        return -1;
    l->st.rejoins++;
    gossip_live_stall_reset(l);
    l->join.mix_pending = 1;
    l->join.rejoined_at = nn_now();
    if (s_after_rejoin(l, err, errlen) != 0)
        return -1;
    *iter = T;
    return 1;
}

void gossip_link_set_model(gossip_link *l, float *x, float *extra, size_t nextra)
{
    l->join.x = x;
    l->join.extra = nextra ? extra : NULL;
    l->join.nextra = nextra;
    if (l->join.rx.bytes)
        gossip_state_rx_free(&l->join.rx);
}

void gossip_link_expect_state(gossip_link *l, int from)
{
    if (!l->join.rx.bytes)
        gossip_state_rx_init(&l->join.rx, l->layout->numel + l->join.nextra, l->fp);
    l->join.joining = from >= 0;
    l->join.state_ready = 0;
    l->join.state_in = from >= 0 && !l->p[from].is_out;
    gossip_state_rx_begin(&l->join.rx, from);
}

int gossip_link_state_ready(const gossip_link *l)
{
    return l->join.state_ready;
}

/* Joining a run in progress at *T (gossip_link_start): the agreed state
 * of the neighbours, installed in the algorithm (x = z, psi = 1). */
int gossip_join_run(gossip_link *l, uint64_t *T, char *err, size_t errlen)
{
    int holder;
    if (gossip_join_take_state(l, T, 0, &holder, err, errlen) != 0)
        return -1;
    return gossip_node_join(l->g, l->join.x, *T, err, errlen);
}

void gossip_join_note_mixed(gossip_link *l, uint64_t iter)
{
    if (!l->join.mix_pending || l->st.isolated_rounds)
        return;
    l->join.mix_pending = 0;
    char since[64] = "";
    if (l->join.rejoin_woke > 0)
        snprintf(since, sizeof since, ", %.2f s after the freeze ended",
                 nn_now() - l->join.rejoin_woke);
    gossip_link_log(l, "re-joined: round %llu mixed the neighbours' messages again, %.2f s "
                    "after the re-join%s", (unsigned long long)iter,
                    nn_now() - l->join.rejoined_at, since);
}
