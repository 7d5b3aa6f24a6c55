/* gossip_member — membership: the start barrier and quorum, HELLO and
 * HELLO_ACK, restarts of neighbours, BYE and the goodbye (gossip_link.h
 * "Start").
 *
 * Owns:    per neighbour (gossip_link_peer) hello/ack, nonce, hello_iter,
 *          reported (by HELLO*), join_told, bye_in/bye_ack/bye_iter; the
 *          link's phase (running).
 * Exposes: gossip_link_start, gossip_link_goodbye; the handlers of HELLO,
 *          HELLO_ACK, BYE, BYE_ACK.
 * Callers: node/node_cmd_node.c, tests; gossip_recv (handlers),
 *          gossip_proof (a held HELLO, once proved).
 */
#include "gossip/gossip_link_int.h"

#include <stdio.h>
#include <string.h>

#define S_HELLO_FIRST  0.2   /* s before the first HELLO repeat, doubling ... */
#define S_HELLO_MAX    2.0   /* ... up to this */

/* Is a HELLO from `from` (nonce: its instance nonce, 0 none) a restart of
 * that neighbour?  1 restart, 0 not, -1 refused (done here).  With nonces:
 * a restart is a new instance; the same instance with another start
 * iteration is a replay or a spoof, and never resets anything.  A HELLO
 * without a nonce (a hand-made one) is judged as before nonces: a restart
 * when it comes after the peer was down, after its GOSSIP, or for another
 * start. */
static int s_hello_restart(gossip_link *l, int from, uint64_t iter, uint64_t nonce)
{
    gossip_link_peer *p = &l->p[from];
    if (nonce && p->nonce && nonce == p->nonce) {
        if (p->hello_seen && p->hello_iter != iter && !p->down) {
            gossip_recv_refuse(l, "HELLO from %s (rank %d) for iteration %llu repeats the instance nonce "
                     "%016llx of its HELLO for iteration %llu: a replay or a spoof, ignored",
                     gossip_link_id(l, from), from, (unsigned long long)iter, (unsigned long long)nonce,
                     (unsigned long long)p->hello_iter);
            return -1;
        }
        return l->running && p->down;
    }
    if (nonce && p->nonce)
        return l->running; /* a new instance: the old one's connection is gone */
    return l->running && (p->down || gossip_node_peer_got(l->g, from) > 0 || !p->hello_seen ||
                          p->hello_iter != iter);
}

/* HELLO_ACK to j (over our ROUTER with `router`); status GOSSIP_HELLO_JOIN
 * when we run without it (it restarted or was down): it must join. */
static void s_hello_ack(gossip_link *l, int j, int router, uint64_t status)
{
    if (!status || !l->net) {
        gossip_link_ctl(l, GOSSIP_MSG_HELLO_ACK, j, router, gossip_node_sent_thru_to(l->g, j));
        return;
    }
    char err[512];
    if (router && !gossip_proof_router_trusted(l, j))
        return;
    gossip_msg_encode_hello_ack((uint32_t)l->rank, gossip_node_sent_thru_to(l->g, j), l->fp, l->nonce,
                                status, &l->ctl);
    int rc = router ? gossip_net_reply(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err)
                    : gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err);
    if (rc >= 0)
        *(router ? &l->p[j].sent_router : &l->p[j].sent_dealer) = nn_now();
}

/* A HELLO or HELLO_ACK from p (an in-neighbour: in = 1) at iteration
 * iter: its instance nonce (0: none said), where it is (restart: a new
 * instance, whose iteration may be lower), that it answered. */
static void s_heard(gossip_link_peer *p, int in, uint64_t iter, uint64_t nonce, int restart)
{
    gossip_live_report(p, in, iter, restart || (nonce && nonce != p->nonce));
    if (nonce)
        p->nonce = nonce;
    if (in)
        p->hello = 1;
    else
        p->ack = 1;
}

/* HELLO from `from`: noted, answered; a restart voids what we hold of it. */
void gossip_member_on_hello(gossip_link *l, int from, int in, uint64_t iter, uint64_t nonce)
{
    gossip_link_peer *p = &l->p[from];
    int restart = s_hello_restart(l, from, iter, nonce);
    if (restart < 0)
        return;
    if (!p->hello_seen) {
        p->hello_seen = 1;
        p->hello_iter = iter;
    }
    s_heard(p, in, iter, nonce, restart); /* a (re)starting out-neighbour announces itself */
    s_hello_ack(l, from, in, restart ? GOSSIP_HELLO_JOIN : 0);
    if (!restart)
        return;
    p->hello_iter = iter; /* whatever we hold of it is void, its BYE too */
    p->bye_in = p->bye_ack = 0;
    p->bye_iter = 0;
    gossip_flight_reset(l, from); /* what the old instance held is gone */
    if (in && p->is_in) {
        gossip_node_peer_restart(l->g, from);
        gossip_recv_drop_stash_of(l, from);
    }
    gossip_link_log(l, "neighbour %s (rank %d) (re)starts at iteration %llu (instance %016llx)",
          gossip_link_id(l, from), from, (unsigned long long)iter, (unsigned long long)nonce);
}

/* "n1 (rank 1, tcp://...)" for every neighbour whose flag (read by `get`)
 * is 0, among those with the role `role` (1 in, 2 out, 3 any). */
static void s_missing(const gossip_link *l, int role, int which, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int a = 0; a < l->nnb && o < len; a++) {
        int j = l->nb[a];
        const gossip_link_peer *p = &l->p[j];
        int has = ((role & 1) && p->is_in) || ((role & 2) && p->is_out);
        int flag = which == 0 ? p->hello : which == 1 ? p->ack : (p->hello || p->ack);
        if (!has || flag)
            continue;
        o += (size_t)snprintf(buf + o, len - o, "%s%s (rank %d, %s)", o ? ", " : "", gossip_link_id(l, j),
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
        const gossip_link_peer *q = &l->p[l->nb[a]];
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
        const gossip_link_peer *p = &l->p[l->nb[a]];
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
        const gossip_link_peer *p = &l->p[l->nb[a]];
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
            gossip_live_down(l, j, "%s %.0f s", why, s);
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
        const gossip_link_peer *p = &l->p[j];
        if (p->is_out && !p->ack)
            gossip_link_ctl(l, GOSSIP_MSG_HELLO, j, 0, start);
        if (gossip_proof_provable(l, j) && !p->proved)
            gossip_proof_ask(l, j);
        if (rejoin && p->is_in && !p->hello)
            gossip_link_ctl(l, GOSSIP_MSG_HELLO, j, 1, start);
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
            if (!gossip_join_has_model(l))
                return nn_errf(err, errlen, "the neighbours are at iteration %llu: this run is "
                               "in progress; restart this node with --resume to rejoin it from "
                               "its checkpoint", (unsigned long long)s_far(l, start));
            return 1;
        }
        if (s_barrier_done(l, rejoin))
            return 0;
        double now = nn_now();
        if (gossip_link_signals(l))
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
        if (gossip_recv_pump(l, until - now) != 0)
            return nn_errf(err, errlen, "%s", l->fatal_msg);
    }
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
        gossip_link_log(l, "the run is in progress (neighbours at iteration %llu): joining it",
              (unsigned long long)s_far(l, start));
        mode = S_JOIN;
        gossip_join_begin(l); /* until the state is in: far-ahead GOSSIP is dropped, not refused */
        rc = s_barrier(l, mode, start, err, errlen);
    }
    if (rc != 0)
        return -1;
    int rejoin = mode != S_FRESH;
    uint64_t T = rejoin ? s_far(l, start) : start;
    if (T > start && gossip_node_set_iter(l->g, T, err, errlen) != 0)
        return -1;
    if (mode == S_JOIN) { /* at T already: messages for T on are kept meanwhile */
        if (gossip_join_run(l, &T, err, errlen) != 0)
            return -1;
    }
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].heard = nn_now();
    l->running = 1;
    if (rejoin && l->choco && gossip_join_rejoin_resyncs(l, err, errlen) != 0)
        return -1;
    if (l->fatal)
        return nn_errf(err, errlen, "%s", l->fatal_msg);
    *iter = T;
    int up = 0;
    for (int a = 0; a < l->nnb; a++)
        up += !l->p[l->nb[a]].down;
    gossip_link_log(l, "%s passed in %.2f s at iteration %llu (%d of %d neighbours)",
          mode == S_JOIN ? "join" : rejoin ? "rejoin" : "start barrier", nn_now() - t0, (unsigned long long)T, up, l->nnb);
    gossip_round_begin(l);
    return 0;
}

void gossip_link_goodbye(gossip_link *l, uint64_t done, double wait_s)
{
    l->fatal = 0;
    for (int a = 0; a < l->nnb; a++) {
        int j = l->nb[a];
        if (l->p[j].is_out && !(gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN))
            gossip_link_ctl(l, GOSSIP_MSG_BYE, j, 0, done);
    }
    double deadline = nn_now() + wait_s;
    for (;;) {
        int left = 0;
        for (int a = 0; a < l->nnb; a++) {
            int j = l->nb[a];
            const gossip_link_peer *p = &l->p[j];
            int st = gossip_node_peer_state(l->g, j);
            left += p->is_out && !(st & GOSSIP_PEER_OUT_DOWN) && !p->bye_ack;
            left += p->is_in && !(st & GOSSIP_PEER_IN_DOWN) && !p->bye_in;
        }
        if (!left)
            return;
        if (nn_now() >= deadline || gossip_link_signals(l) > 1 || l->fatal) {
            char a[1024] = "", b[1024] = "";
            size_t oa = 0, ob = 0;
            for (int k = 0; k < l->nnb; k++) {
                int j = l->nb[k];
                const gossip_link_peer *p = &l->p[j];
                int st = gossip_node_peer_state(l->g, j);
                if (p->is_out && !(st & GOSSIP_PEER_OUT_DOWN) && !p->bye_ack && oa < sizeof a)
                    oa += (size_t)snprintf(a + oa, sizeof a - oa, "%s%s", oa ? ", " : "", gossip_link_id(l, j));
                if (p->is_in && !(st & GOSSIP_PEER_IN_DOWN) && !p->bye_in && ob < sizeof b)
                    ob += (size_t)snprintf(b + ob, sizeof b - ob, "%s%s", ob ? ", " : "", gossip_link_id(l, j));
            }
            gossip_link_log(l, "warning: leaving without BYE acks from %s and without BYE from %s",
                  a[0] ? a : "none", b[0] ? b : "none");
            if (l->fatal)
                gossip_link_log(l, "%s", l->fatal_msg);
            return;
        }
        if (gossip_recv_pump(l, deadline - nn_now()) != 0)
            l->fatal = 0; /* keep listening until the deadline */
    }
}

/* HELLO_ACK from `from`: it is there, at iteration iter (its current
 * instance: it may have restarted); JOIN: it runs without us. */
void gossip_member_on_hello_ack(gossip_link *l, int from, int in, uint64_t iter,
                                const uint8_t *msg, size_t len)
{
    gossip_link_peer *p = &l->p[from];
    uint64_t nonce = gossip_msg_hello_nonce(msg, len);
    if (gossip_msg_hello_status(msg, len) & GOSSIP_HELLO_JOIN)
        p->join_told = 1;
    s_heard(p, in, iter, nonce, 0);
}

void gossip_member_on_bye(gossip_link *l, int from, uint64_t iter)
{
    l->p[from].bye_in = 1;
    l->p[from].bye_iter = iter;
    gossip_link_ctl(l, GOSSIP_MSG_BYE_ACK, from, 1, iter);
}

void gossip_member_on_bye_ack(gossip_link *l, int from)
{
    l->p[from].bye_ack = 1;
}
