/* gossip_recv — the receive path: from the socket to the module that
 * handles each kind of message.
 *
 * Owns:    the stash of GOSSIP messages that run more than GOSSIP_WINDOW
 *          iterations ahead, the refusal log budget, the pump's clock.
 * Exposes: gossip_recv_pump (receive and handle for a while), the header
 *          checks (each message's header is decoded here, once; the payload
 *          of GOSSIP and RESYNC once, by gossip_node_receive_decoded, a
 *          STATE chunk's by gossip_state_rx_add_decoded),
 *          the stash and its flow-control bound (admission itself, replay
 *          and window, is gossip_node_admit's: asked once per message,
 *          its verdict followed), refusals counted by their code,
 *          gossip_link_handle (the same path without sockets).
 * Callers: gossip_round, gossip_member, gossip_join (they pump while they
 *          wait); gossip_live (a neighbour down: its stash dropped).
 */
#include "gossip/gossip_link_int.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_LOG_REFUSED  5     /* refusals of one kind logged before they are only counted */

void gossip_recv_init(gossip_link *l)
{
    l->recv.stash_max = (size_t)l->lag + GOSSIP_WINDOW;
}

void gossip_recv_free(gossip_link *l)
{
    for (size_t a = 0; a < l->recv.nstash; a++)
        free(l->recv.stash[a].bytes);
    free(l->recv.stash);
    l->recv.stash = NULL;
    l->recv.nstash = 0;
}

void gossip_recv_refuse(gossip_link *l, const char *fmt, ...)
{
    l->st.refused++;
    int k = 0; /* the kind: fmt's slot (the last slot is shared by any further kinds) */
    while (k < GOSSIP_LINK_REFUSE_KINDS - 1 && l->recv.refuse_fmt[k] && l->recv.refuse_fmt[k] != fmt)
        k++;
    l->recv.refuse_fmt[k] = l->recv.refuse_fmt[k] ? l->recv.refuse_fmt[k] : fmt;
    if (++l->recv.refuse_n[k] > S_LOG_REFUSED)
        return;
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gossip_link_log(l, "refused: %s%s", msg,
          l->recv.refuse_n[k] == S_LOG_REFUSED ? " (further refusals of this kind are only counted)"
                                          : "");
}

void gossip_recv_drop_stash_of(gossip_link *l, int j)
{
    size_t k = 0;
    for (size_t a = 0; a < l->recv.nstash; a++) {
        if (l->recv.stash[a].from == j)
            free(l->recv.stash[a].bytes);
        else
            l->recv.stash[k++] = l->recv.stash[a];
    }
    l->recv.nstash = k;
}

static size_t s_stashed_of(const gossip_link *l, int j, uint64_t *first)
{
    size_t c = 0;
    for (size_t a = 0; a < l->recv.nstash; a++)
        if (l->recv.stash[a].from == j) {
            if (c == 0 && first)
                *first = l->recv.stash[a].h.iter;
            c++;
        }
    return c;
}

/* ---- receiving ------------------------------------------------------------------- */

/* A refusal of gossip_node_receive_decoded (or of a STATE chunk), counted
 * by its code. */
void gossip_recv_refuse_payload(gossip_link *l, int from, gossip_recv_code code, const char *err)
{
    if (code == GOSSIP_RECV_NONFINITE)
        l->st.refused_nonfinite++;
    gossip_recv_refuse(l, "from %s (rank %d): %s", gossip_link_id(l, from), from, err);
}

static void s_deliver(gossip_link *l, int from, const gossip_header *h, const uint8_t *msg,
                      size_t len)
{
    char err[1024];
    gossip_recv_code c = gossip_node_receive_decoded(l->g, h, msg, len, err, sizeof err);
    if (gossip_recv_refused(c))
        gossip_recv_refuse_payload(l, from, c, err);
}

/* The early GOSSIP of `from` (admission said TOO_FAR): kept in the stash
 * within the flow-control bound, else dropped or refused. */
static void s_hold(gossip_link *l, int from, const gossip_header *h, const uint8_t *msg,
                   size_t len)
{
    uint64_t iter = h->iter, cur = gossip_node_iter(l->g);
    gossip_link_peer *p = &l->p[from];
    if (gossip_join_joining(l) && !l->running)
        return; /* joining: we are not at the run's iteration yet */
    if (iter > cur + l->lag + GOSSIP_WINDOW && gossip_live_far_ahead(l, from, cur) &&
        iter <= p->reported + l->lag + GOSSIP_WINDOW)
        return; /* we fell behind, as its PINGs say: no use ("Re-join") */
    if (iter > cur + l->lag + GOSSIP_WINDOW ||
        s_stashed_of(l, from, NULL) >= l->recv.stash_max) {
        gossip_recv_refuse(l, "message from %s (rank %d) for iteration %llu is too far ahead (we are "
                 "at %llu; flow control keeps honest peers within %llu)", gossip_link_id(l, from), from,
                 (unsigned long long)iter, (unsigned long long)cur,
                 (unsigned long long)l->lag);
        return;
    }
    if (l->recv.nstash == l->recv.cap_stash) {
        l->recv.cap_stash = l->recv.cap_stash ? 2 * l->recv.cap_stash : 16;
        l->recv.stash = nn_xrealloc(l->recv.stash, l->recv.cap_stash * sizeof *l->recv.stash);
    }
    gossip_recv_early *e = &l->recv.stash[l->recv.nstash++];
    e->bytes = nn_xmalloc(len);
    memcpy(e->bytes, msg, len);
    e->len = len;
    e->h = *h;
    e->from = from;
    gossip_node_hold(l->g, from, iter);
}

/* GOSSIP from in-neighbour `from`, its header decoded: admitted once, by
 * gossip_node_admit (replay, window); a replay is refused, a late one
 * dropped, one ahead of the window held (s_hold), the others go to
 * gossip_node_receive_decoded, which decodes the payload and checks it
 * (finite, its slot). */
static void s_gossip(gossip_link *l, int from, const gossip_header *h, const uint8_t *msg,
                     size_t len)
{
    char err[1024];
    gossip_link_peer *p = &l->p[from];
    gossip_recv_code c = gossip_node_admit(l->g, h, err, sizeof err);
    if (c == GOSSIP_RECV_DUPLICATE) {
        gossip_recv_refuse(l, "replayed or duplicate message from %s (rank %d) for iteration %llu "
                 "(it already sent %llu)", gossip_link_id(l, from), from,
                 (unsigned long long)h->iter,
                 (unsigned long long)gossip_node_peer_got(l->g, from) - 1);
        return;
    }
    /* push-sum: its mass in flight to us is bounded by our ACKs; choco:
     * they clock its full updates (gossip_flight.c), whatever becomes of
     * the message here */
    if (gossip_flight_on(l))
        gossip_link_ctl(l, GOSSIP_MSG_ACK, from, 1, h->iter);
    double now = nn_now();
    if (p->last_gossip > 0) {
        double gap = now - p->last_gossip;
        p->period = p->period > 0 ? 0.9 * p->period + 0.1 * gap : gap;
        gossip_live_note_gap(p, gap);
    }
    p->last_gossip = now;
    p->step_s = h->step_us * 1e-6;
    if (c == GOSSIP_RECV_STALE)
        return; /* late: that iteration was mixed without it */
    /* behind a held one of the same sender (a late burst waiting for its
     * slots): held too, so its messages reach gossip_node in order */
    if (c == GOSSIP_RECV_TOO_FAR || (c == GOSSIP_RECV_OK && s_stashed_of(l, from, NULL) > 0))
        s_hold(l, from, h, msg, len);
    else if (gossip_recv_refused(c))
        gossip_recv_refuse_payload(l, from, c, err);
    else
        s_deliver(l, from, h, msg, len);
}

/* Feeds stashed messages that are now inside gossip_node's window, in
 * arrival order; drops those that fell behind it (late).  A sender's
 * messages after one that stays held stay held too (its order). */
void gossip_recv_feed_stash(gossip_link *l)
{
    size_t k = 0;
    uint8_t *kept = nn_xcalloc((size_t)l->n, 1);
    for (size_t a = 0; a < l->recv.nstash; a++) {
        gossip_recv_early *e = &l->recv.stash[a];
        gossip_window_pos pos = kept[e->from] ? GOSSIP_WIN_AHEAD
                                              : gossip_node_window(l->g, (int)e->h.sender, e->h.iter);
        kept[e->from] |= pos == GOSSIP_WIN_AHEAD;
        if (pos != GOSSIP_WIN_AHEAD) {
            if (pos == GOSSIP_WIN_IN)
                s_deliver(l, e->from, &e->h, e->bytes, e->len);
            free(e->bytes);
        } else {
            l->recv.stash[k++] = *e;
        }
    }
    l->recv.nstash = k;
    free(kept);
}

/* A HELLO or HELLO_ACK for another layout: a misconfigured peer shows at
 * the start, before its valid HELLO (both sides fail, naming the peer); a
 * foreign layout after that is an intruder. */
static void s_foreign_layout(gossip_link *l, int from, int in, const gossip_header *h,
                             const char *chan)
{
    if (l->running || l->p[from].hello_seen || l->p[from].ack) {
        gossip_recv_refuse(l, "HELLO from %s %s (rank %d) for another model (layout %08x, ours %08x)",
                 chan, gossip_link_id(l, from), from, h->fingerprint, l->fp);
        return;
    }
    if (in && h->kind == GOSSIP_MSG_HELLO) /* our answer carries our fingerprint: it fails too */
        gossip_link_ctl(l, GOSSIP_MSG_HELLO_ACK, from, 1, gossip_node_sent_thru(l->g));
    gossip_link_fatal(l, "peer %s (rank %d, %s) runs a different model (layout fingerprint %08x, "
            "ours %08x): every node needs the same --model, --norm, --groups, --data and "
            "--pad-to (if it does, another process spoke under its id first: without "
            "`security: curve` ids are not authenticated)", gossip_link_id(l, from), from,
            l->t->nodes[from].endpoint, h->fingerprint, l->fp);
}

/* Which kinds may come on which channel: 1 yes, 0 misdirected, -1 unknown. */
static int s_kind_ok(unsigned kind, int in)
{
    switch (kind) {
    case GOSSIP_MSG_GOSSIP: case GOSSIP_MSG_RESYNC: case GOSSIP_MSG_BYE: return in;
    case GOSSIP_MSG_RESYNC_REQ: case GOSSIP_MSG_BYE_ACK: case GOSSIP_MSG_ACK: return !in;
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
        gossip_recv_refuse(l, "%zu bytes from %s %s (rank %d) that are not an lpgossip message: %s", len,
                 chan, gossip_link_id(l, from), from, err);
        return -1;
    }
    if (h->sender != (uint32_t)from) {
        gossip_recv_refuse(l, "message from %s %s (rank %d) claims to come from rank %u", chan,
                 gossip_link_id(l, from), from, h->sender);
        return -1;
    }
    int blocks = h->kind == GOSSIP_MSG_GOSSIP || h->kind == GOSSIP_MSG_RESYNC;
    if (h->fingerprint != l->fp && (h->kind == GOSSIP_MSG_HELLO ||
                                     h->kind == GOSSIP_MSG_HELLO_ACK)) {
        s_foreign_layout(l, from, in, h, chan);
        return -1;
    }
    if (h->fingerprint != l->fp && !blocks) { /* GOSSIP, RESYNC: gossip_node's check */
        gossip_recv_refuse(l, "control message from %s (rank %d): layout fingerprint 0x%08x differs from "
                 "ours 0x%08x", gossip_link_id(l, from), from, h->fingerprint, l->fp);
        return -1;
    }
    int ok = s_kind_ok(h->kind, in);
    if (ok <= 0) {
        gossip_recv_refuse(l, "%s message (kind %u) from %s %s (rank %d)%s",
                 ok < 0 ? "unknown" : "misdirected", h->kind, chan, gossip_link_id(l, from), from,
                 ok < 0 ? "" : ": not valid on that channel");
        return -1;
    }
    return 0;
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
    gossip_link_peer *p = &l->p[from];
    uint64_t refused_before = l->st.refused;
    if (in && gossip_proof_unproven(l, from, kind, iter, msg, len))
        return;
    if ((kind == GOSSIP_MSG_GOSSIP || kind == GOSSIP_MSG_RESYNC) && p->bye_in && p->down)
        return; /* a late one of an instance that left and is out: nothing to use */
    switch (kind) {
    case GOSSIP_MSG_GOSSIP:
        s_gossip(l, from, &h, msg, len);
        break;
    case GOSSIP_MSG_RESYNC: {
        gossip_recv_code c = gossip_node_receive_decoded(l->g, &h, msg, len, err, sizeof err);
        if (gossip_recv_refused(c)) {
            gossip_recv_refuse_payload(l, from, c, err);
            break;
        }
        gossip_recv_drop_stash_of(l, from); /* older than the RESYNC (FIFO): inside it */
        gossip_live_on_resync(l, from);
        break;
    }
    case GOSSIP_MSG_RESYNC_REQ:
        gossip_live_answer_resync(l, from);
        break;
    case GOSSIP_MSG_PING: {
        if (h.flags & GOSSIP_FLAG_AHEAD) { /* how far ahead it is: nothing lost */
            if (in)
                gossip_live_report(p, 1, iter, 0);
            else
                gossip_recv_refuse(l, "PING with the ahead flag from out-neighbour %s (rank %d): "
                                   "only an in-neighbour sends one", gossip_link_id(l, from), from);
            break;
        }
        /* behind everything it sent us (stashed ones aside): what is
         * missing below is lost */
        uint64_t first = 0, proved = iter;
        if (in && s_stashed_of(l, from, &first) && first < proved)
            proved = first;
        gossip_live_on_ping(l, from, in, iter, proved);
        break;
    }
    case GOSSIP_MSG_HELLO:
        gossip_member_on_hello(l, from, in, iter, gossip_msg_hello_nonce(msg, len));
        break;
    case GOSSIP_MSG_STATE_REQ:
        gossip_join_answer_state(l, from, in);
        break;
    case GOSSIP_MSG_STATE:
        gossip_join_on_state(l, from, in, &h, msg, len);
        break;
    case GOSSIP_MSG_HELLO_ACK:
        gossip_member_on_hello_ack(l, from, in, iter, msg, len);
        break;
    case GOSSIP_MSG_BYE:
        gossip_member_on_bye(l, from, iter);
        break;
    case GOSSIP_MSG_BYE_ACK:
        gossip_member_on_bye_ack(l, from);
        break;
    case GOSSIP_MSG_ACK:
        gossip_flight_on_ack(l, from, iter);
        break;
    case GOSSIP_MSG_LINK_REQ:
        gossip_proof_answer(l, from, gossip_msg_link_token(msg, len));
        break;
    case GOSSIP_MSG_LINK_PROOF:
        gossip_proof_on_proof(l, from, gossip_msg_link_token(msg, len));
        break;
    }
    if (l->st.refused == refused_before) {
        p->heard = nn_now();
        gossip_live_revive(l, from, dir);
    }
}

/* Receives and handles messages for at most `seconds` (one slice at most),
 * then asks for RESYNCs and PINGs as due.  0, or -1 on a transport error or
 * a fatal condition. */
int gossip_recv_pump(gossip_link *l, double seconds)
{
    char err[1024];
    int ms = seconds <= 0 ? 0 : (int)(fmin(seconds, GOSSIP_LINK_SLICE) * 1000.0 + 0.5);
    double now = nn_now();
    gossip_live_note_stall(l, l->recv.last_pump > 0 ? now - l->recv.last_pump : 0);
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
        return gossip_link_fatal(l, "%s", err);
    if (l->running)
        gossip_live_ask_resyncs(l);
    gossip_join_pump(l);
    gossip_live_ping(l, 0);
    l->recv.last_pump = nn_now();
    gossip_live_note_stall(l, l->recv.last_pump - now - ms / 1000.0); /* stopped inside the pump */
    return l->fatal ? -1 : 0;
}

void gossip_link_handle(gossip_link *l, int from, gossip_net_dir dir, const uint8_t *msg,
                        size_t len)
{
    assert(from >= 0 && from < l->n && from != l->rank); /* the caller's (transport's) */
    s_handle(l, from, dir, msg, len);
}
