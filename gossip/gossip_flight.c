/* gossip_flight — the push-sum mass in flight to each out-neighbour
 * (docs/gossip.md "Late neighbours", mass in flight).
 *
 * With push-sum every GOSSIP message carries a share of its sender's x
 * and psi, and that mass is nowhere else until the receiver mixes it.
 * Behind a slow link messages queue (ZeroMQ's pipe, the kernel's socket
 * buffers, the link itself) and with them most of the mass: every psi
 * falls towards 0 and the step on z = x/psi explodes.  So the receiver
 * answers every push-sum GOSSIP with an ACK of its iteration over the
 * same connection (gossip_recv), and a sender keeps few messages
 * unacknowledged per out-neighbour:
 *   - at most S + 2 (a receiver that lags S iterations, as bounded
 *     staleness allows, may have S + 1 of ours unread, and one more ACK
 *     may be on its way: below that the bound would hold back the
 *     messages of a healthy run);
 *   - just one while the link is slow: the oldest has waited for its ACK
 *     longer than S + 2 of our rounds, or the last ACK took that long (a
 *     receiver reads and acknowledges everything queued at every round,
 *     so an ACK that late means it is stopped or the link is backed up:
 *     more messages would only lengthen the queue, and the run's last,
 *     synchronous round waits for it to drain).  A link counts as slow
 *     until its first ACK: messages sent at once at the start would queue
 *     behind each other.
 * A message due while the bound is reached is kept instead of sent
 * (gossip_node_keep: its share stays with the sender, announced by the
 * next message that goes out), exactly as one the transport's queue did
 * not take; the round retries it while it waits.  A stopped neighbour
 * thus collects few shares, and a slow link carries few at a time.  Only
 * with bounded staleness (S > 0), push-sum and dpsgd: the synchronous
 * protocol waits for every message anyway.
 *
 * An ACK that never comes (the connection dropped what it held) would
 * close the link to that neighbour for good: entries older than the
 * neighbour's silence limit twice over are forgotten (counted:
 * acks_expired), and a neighbour declared down or restarted starts over.
 *
 * Choco (S > 0) is acknowledged too, for another use: deferred updates
 * (docs/gossip.md).  Choco's message is one update for every out-neighbour,
 * so a slow link cannot get less than the others; instead, while one
 * out-neighbour has not acknowledged our oldest full update for S + 2 of our
 * rounds although it sent us a GOSSIP since (the path to it is backed up:
 * a slow link; a stopped neighbour sends nothing and is not counted), the
 * round sends a deferred update (gossip_node_defer_update: no values, a
 * few dozen bytes), and what x_i - xhat_i holds goes out in the next full
 * one.  The full updates on a slow link are thus clocked by its ACKs.
 *
 * Owns:    per neighbour (gossip_link_peer) flight[], flight_t[], nflight,
 *          flight_slow, upd_iter, upd_t, upd_next, upd_next_t, upd_last_t,
 *          upd_rtt (backed_rounds is gossip_round's, cleared here).
 * Exposes: gossip_flight_on, _full, _sent, _on_ack, _reset, _backed_to,
 *          _edge_busy.
 * Callers: gossip_round (sending), gossip_recv (ACKs), gossip_live (down),
 *          gossip_member (restart), gossip_link (start).
 */
#include "gossip/gossip_link_int.h"

#include <math.h>

_Static_assert(GOSSIP_STALE_MAX + 2 <= GOSSIP_FLIGHT_CAP, "GOSSIP_FLIGHT_CAP too small");

/* An edge copy's next full update waits for the last one's ACK and for
 * this many times its round trip since it went out: a path that carries
 * our update for T of every round trip is then busy with it at most
 * 1/S_EDGE_SPACING of the time, whoever else shares the link (a round
 * trip grows with the queue in front of it).  On a fast path the round
 * trip is below a round and this waits for nothing. */
#define S_EDGE_SPACING 2.0

/* Seconds an unacknowledged message may age before the link to its
 * receiver counts as backed up, at least. */
#define S_AGE_MIN 0.02

/* The push-sum bound on mass in flight applies. */
static int s_keeps(const gossip_link *l)
{
    const gossip_config *c = gossip_node_config(l->g);
    return c->push_sum && c->staleness > 0 && c->algo == GOSSIP_DPSGD;
}

int gossip_flight_on(const gossip_link *l)
{
    const gossip_config *c = gossip_node_config(l->g);
    return s_keeps(l) || (c->staleness > 0 && c->algo == GOSSIP_CHOCO);
}

/* Seconds an ACK may take before the link to its sender counts as
 * backed up: S + 2 of our rounds, at least S_AGE_MIN. */
static double s_slow_after(const gossip_link *l)
{
    return fmax(((double)l->stale + 2.0) * gossip_round_period(l), S_AGE_MIN);
}

void gossip_flight_reset(gossip_link *l, int j)
{
    l->p[j].nflight = 0;
    l->p[j].flight_slow = 1; /* until an ACK says otherwise */
    l->p[j].upd_iter = l->p[j].upd_next = 0;
    l->p[j].upd_rtt = 0.0;
    l->p[j].backed_rounds = 0;
}

int gossip_flight_full(gossip_link *l, int to, double limit)
{
    gossip_link_peer *p = &l->p[to];
    if (!s_keeps(l) || p->nflight == 0)
        return 0;
    const unsigned max = p->flight_slow ? 1 : (unsigned)l->stale + 2;
    const double age = nn_now() - p->flight_t[0];
    if (age > 2.0 * limit) {
        l->st.acks_expired += (uint64_t)p->nflight;
        gossip_link_log(l, "no ACK from %s for %.1f s (%u messages): forgotten, sending again",
                        gossip_link_id(l, to), age, p->nflight);
        p->nflight = 0;
        return 0;
    }
    return p->nflight >= max || age > s_slow_after(l);
}

/* Choco: a full update of iteration iter went out to p. */
static void s_upd_sent(gossip_link_peer *p, uint64_t iter)
{
    const double now = nn_now();
    p->upd_last_t = now;
    if (!p->upd_iter) {
        p->upd_iter = iter + 1;
        p->upd_t = now;
    } else {
        p->upd_next = iter + 1;
        p->upd_next_t = now;
    }
}

/* Choco: p acknowledged our GOSSIPs through iteration iter. */
static void s_upd_acked(gossip_link_peer *p, uint64_t iter)
{
    if (!p->upd_iter || p->upd_iter > iter + 1)
        return;
    p->upd_rtt = nn_now() - p->upd_t;
    /* the newest full update since stands for the ones still in flight */
    if (p->upd_next > iter + 1) {
        p->upd_iter = p->upd_next;
        p->upd_t = p->upd_next_t;
    } else {
        p->upd_iter = 0;
    }
    p->upd_next = 0;
}

int gossip_flight_backed_to(gossip_link *l, int j)
{
    if (!l->choco || !gossip_flight_on(l))
        return 0;
    const double now = nn_now(), after = s_slow_after(l);
    const gossip_link_peer *p = &l->p[j];
    if (!p->is_out || p->down || (gossip_node_peer_state(l->g, j) & GOSSIP_PEER_OUT_DOWN))
        return 0;
    /* behind a slow path, not stopped: its messages still come (GOSSIPs,
     * or on a directed edge its ACKs of our earlier messages and PINGs;
     * one that stopped sends nothing new, and what it sent before
     * stopping arrives within a round trip) */
    return p->upd_iter && now - p->upd_t > after && p->heard > p->upd_t &&
           now - p->heard <= after;
}

int gossip_flight_edge_busy(const gossip_link *l, int j)
{
    const gossip_link_peer *p = &l->p[j];
    return l->choco && (p->upd_iter != 0 || nn_now() - p->upd_last_t < S_EDGE_SPACING * p->upd_rtt);
}

void gossip_flight_sent(gossip_link *l, int to, uint64_t iter, int full)
{
    gossip_link_peer *p = &l->p[to];
    if (l->choco && gossip_flight_on(l) && full)
        s_upd_sent(p, iter);
    if (!s_keeps(l) || p->nflight >= GOSSIP_FLIGHT_CAP)
        return;
    p->flight_t[p->nflight] = nn_now();
    p->flight[p->nflight++] = iter;
}

void gossip_flight_on_ack(gossip_link *l, int from, uint64_t iter)
{
    gossip_link_peer *p = &l->p[from];
    if (l->choco) {
        s_upd_acked(p, iter);
        l->st.acks_recv++;
        return;
    }
    unsigned k = 0;
    while (k < p->nflight && p->flight[k] <= iter) /* in order on one connection */
        k++;
    if (k == 0)
        return;
    for (unsigned a = k; a < p->nflight && a < GOSSIP_FLIGHT_CAP; a++) {
        p->flight[a - k] = p->flight[a];
        p->flight_t[a - k] = p->flight_t[a];
    }
    p->flight_slow = nn_now() - p->flight_t[k - 1] > s_slow_after(l);
    p->nflight -= k;
    l->st.acks_recv++;
}
