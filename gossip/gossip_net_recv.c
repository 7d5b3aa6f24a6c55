/* gossip_net_recv — receiving on a node's sockets (gossip_net_recv in
 * gossip_net.h), and what is done between two messages.
 *
 * Owns:    the poll over the ROUTER, the DEALERs, the socket monitor and
 *          the discovery beacon; the checks on every message received
 *          (routing id of an in-neighbour, one frame, size, the CURVE
 *          identity, contested ids) and the refusals' counts and log; the
 *          ROUTER's connections (monitor events, which connection an
 *          in-neighbour's messages come on, closing silent ones); the
 *          DEALERs moved to discovered endpoints.
 * Exposes: gossip_net_recv, gossip_net_conn_gen (gossip_net.h).
 * Callers: the transport (gossip_recv.c, gossip_proof.c), tests.  The net
 *          itself is gossip_net.c's (gossip_net_int.h).
 */
#include "gossip/gossip_net.h"
#include "gossip/gossip_net_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <czmq.h>
#include <zmq.h>

#include "gossip/gossip_codec.h"

#define S_LOG_FIRST   5            /* log the first few rejections per reason */

/* ---- helpers ------------------------------------------------------------ */

__attribute__((format(printf, 3, 4)))
static void s_reject(gossip_net *net, int reason, const char *fmt, ...)
{
    uint64_t *counter = reason == 0   ? &net->st.rejected_identity
                        : reason == 1 ? &net->st.rejected_frames
                        : reason == 2 ? &net->st.rejected_size
                        : reason == 3 ? &net->st.rejected_auth
                        : reason == 4 ? &net->st.rejected_contested
                                      : &net->st.closed_silent;
    (*counter)++;
    if (!net->log || net->logged[reason] >= S_LOG_FIRST)
        return;
    net->logged[reason]++;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(net->log, "gossip_net: node %s (rank %d): rejected %s%s\n", net->t->nodes[net->rank].id,
            net->rank, msg,
            net->logged[reason] == S_LOG_FIRST ? " (further rejections of this kind are only counted)"
                                               : "");
    fflush(net->log);
}

/* Printable form of a routing id for messages. */
static void s_printable(const uint8_t *id, size_t len, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < outlen; i++) {
        if (id[i] >= 0x20 && id[i] < 0x7f && id[i] != '\\')
            out[o++] = (char)id[i];
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", id[i]);
    }
    out[o] = '\0';
}

/* Drops the remaining frames of a multipart message; returns how many. */
static int s_drain(void *sock)
{
    int more = 1, count = 0;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        zmq_msg_close(&m);
        count++;
        sz = sizeof more;
    }
    return count;
}

static int s_more(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) != 0)
        return 0;
    return more;
}
/* ---- the ROUTER's connections ------------------------------------------- */

/* Logs and counts one monitor event (two frames: u16 event + u32 value,
 * then the endpoint).  1 if there was one, else 0. */
static int s_monitor_event(gossip_net *net)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, net->monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    uint16_t ev = 0;
    uint32_t val = 0;
    if (zmq_msg_size(&m) >= 6) {
        const uint8_t *d = zmq_msg_data(&m);
        memcpy(&ev, d, 2);
        memcpy(&val, d + 2, 4);
    }
    zmq_msg_close(&m);
    s_drain(net->monitor);
    if (ev == ZMQ_EVENT_ACCEPTED || ev == ZMQ_EVENT_DISCONNECTED) {
        if (val < GOSSIP_NET_FD_MAX) {
            net->fd_open[val] = ev == ZMQ_EVENT_ACCEPTED ? nn_now() : 0;
            net->fd_delivered[val] = 0;
        }
        return 1;
    }
    const char *what = ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                           ? "its key is not one of this node's in-neighbours (CURVE)"
                       : ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                           ? (net->curve ? "wrong security mechanism or not a CURVE client"
                                         : "a protocol error (not a ZMTP peer?)")
                           : "the handshake broke off";
    s_reject(net, 3, "a connection on %s: %s (event 0x%x, code %u)", net->endpoint, what, ev, val);
    return 1;
}

/* Connections to the ROUTER that delivered no message of their own
 * silent_close_ms after they were accepted are shut down (libzmq then
 * closes them as if the peer had): a second connection under a live
 * in-neighbour's routing id, which libzmq never identifies, not even once
 * the connection that held the id is gone (its frames pile up unread), or
 * a client that connects and says nothing.  The first happens to a node
 * that was frozen while a neighbour gave up on the old connection and
 * reconnected: the old connection holds the id until its last messages
 * are read.  A real neighbour's DEALER sends its HELLO or PING at once;
 * one that was shut down reconnects by itself and gets its id.  Counted in
 * closed_silent (not a refused message: a slow peer's first message can
 * come late too, which is why the node ties the limit to its peers'
 * silence floor).  An fd is only touched while it is still the
 * accepted TCP connection to our port (getsockname). */
static void s_reap(gossip_net *net)
{
    double now = nn_now();
    if (now < net->next_reap)
        return;
    net->next_reap = now + 0.25;
    double limit = 1e-3 * net->silent_close_ms;
    for (int fd = 0; fd < GOSSIP_NET_FD_MAX; fd++) {
        double open = net->fd_open[fd];
        if (open <= 0 || now - open < limit || net->fd_delivered[fd] >= open)
            continue;
        net->fd_open[fd] = 0;
        struct sockaddr_storage la, pa;
        socklen_t ll = sizeof la, pl = sizeof pa;
        if (getsockname(fd, (struct sockaddr *)&la, &ll) != 0 ||
            getpeername(fd, (struct sockaddr *)&pa, &pl) != 0 ||
            (la.ss_family != AF_INET && la.ss_family != AF_INET6))
            continue;
        const char *colon = strrchr(net->endpoint, ':');
        int ours = colon ? atoi(colon + 1) : -1;
        int lport = la.ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)&la)->sin_port)
                                            : ntohs(((const struct sockaddr_in6 *)&la)->sin6_port);
        if (lport != ours)
            continue; /* not a connection to our ROUTER (any more) */
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (pa.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&pa;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
            port = ntohs(a->sin_port);
        } else {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&pa;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
            port = ntohs(a->sin6_port);
        }
        shutdown(fd, SHUT_RDWR);
        s_reject(net, 5, "the connection from %s:%d: no message %.3g s after it was accepted (a "
                 "second connection under the routing id of a connected in-neighbour: "
                 "contested id; or a silent client): closed", host, port, limit);
    }
}

/* Notes a message delivered by the ROUTER.  It is the message of the
 * connection now open on its fd only if the ROUTER was seen empty since we
 * learnt of that connection: before, it can be one of the last messages
 * of an earlier connection on the same fd number (closed while we did not
 * read; libzmq pushed them before it reported the close, and we learn of
 * the close before the accept that reuses the number). */
static void s_delivered(gossip_net *net, zmq_msg_t *m)
{
    int fd = zmq_msg_get(m, ZMQ_SRCFD);
    if (fd >= 0 && fd < GOSSIP_NET_FD_MAX && net->router_empty >= net->fd_open[fd])
        net->fd_delivered[fd] = nn_now();
}
/* ---- discovery, between messages ---------------------------------------- */

/* One beacon: an out-neighbour without a fixed endpoint that was found
 * (or moved) gets its DEALER connected there. */
static void s_discovered(gossip_net *net)
{
    int j = -1;
    if (gossip_disc_recv(net->disc, &j) == GOSSIP_DISC_NOTHING || net->out_pos[j] < 0 ||
        net->t->nodes[j].endpoint[0])
        return;
    int k = net->out_pos[j];
    const char *ep = gossip_disc_endpoint(net->disc, j);
    char err[512];
    if (gossip_net_dealer_connect(net, k, ep, err, sizeof err) != 0) {
        if (net->log)
            fprintf(net->log, "%s\n", err);
    } else if (net->log) {
        fprintf(net->log, "gossip_net: node %s (rank %d): DEALER to out-neighbour %s (rank %d) "
                "connected to %s (discovered)\n", net->t->nodes[net->rank].id, net->rank,
                net->t->nodes[j].id, j, ep);
    }
    if (net->log)
        fflush(net->log);
}

/* Two announcers: a DEALER connected to a discovered endpoint that gave
 * back nothing of its neighbour's for probe_s moves to the other endpoint
 * announced for that rank (gossip_disc_unanswered), if there is one; else
 * it waits another probe_s. */
static void s_probe(gossip_net *net)
{
    double now = nn_now();
    if (!net->disc || now < net->next_probe)
        return;
    net->next_probe = now + 0.25;
    for (int k = 0; k < net->nout; k++) {
        int j = net->out_ranks[k];
        if (net->t->nodes[j].endpoint[0] || !net->dealer_ep[k][0] ||
            net->dealer_heard[k] >= net->dealer_since[k] ||
            now - net->dealer_since[k] < net->probe_s)
            continue;
        double waited = now - net->dealer_since[k];
        net->dealer_since[k] = now; /* the next probe: probe_s from now */
        if (gossip_disc_unanswered(net->disc, j, now, waited) != GOSSIP_DISC_MOVED)
            continue;
        char err[512];
        const char *ep = gossip_disc_endpoint(net->disc, j);
        if (gossip_net_dealer_connect(net, k, ep, err, sizeof err) != 0 && net->log)
            fprintf(net->log, "%s\n", err);
        else if (net->log)
            fprintf(net->log, "gossip_net: node %s (rank %d): DEALER to out-neighbour %s "
                    "(rank %d) moved to %s (the endpoint believed before did not answer)\n",
                    net->t->nodes[net->rank].id, net->rank, net->t->nodes[j].id, j, ep);
        if (net->log)
            fflush(net->log);
    }
}

/* ---- receiving ---------------------------------------------------------- */

/* A routing id that is an lpgossip header: should a libzmq take the first
 * message of a newcomer whose routing id a live connection holds (no
 * ZMQ_ROUTER_HANDOVER) for its id (gossip_net.h).  The rank that header
 * claims (an in-neighbour's), or -1. */
/* The sender field of an lpgossip header (gossip_codec.h). */
static int64_t s_sender(const uint8_t *h)
{
    return (int64_t)((uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 |
                     (uint32_t)h[11] << 24);
}

static int s_contested(const gossip_net *net, const uint8_t *id, size_t len)
{
    if (len < GOSSIP_HEADER_BYTES || memcmp(id, "LPGS", 4) != 0)
        return -1;
    int64_t sender = s_sender(id);
    if (sender >= net->n || !net->is_in[sender])
        return -1;
    return (int)sender;
}

/* The message in net->cur, accepted from in-neighbour rank: another
 * connection than its last message's (another fd, or the same fd
 * accepted anew) counts a change (gossip_net_conn_gen).  libzmq reports
 * a connection's accept before it passes on any of its messages, and its
 * close after its last one, but over another socket (the monitor): the
 * events are read first.  Then a message on an fd with no open
 * connection is one of the last of the connection that closed there (it
 * keeps its connection: the id still holds that pipe, libzmq gives it to
 * no other until those are read), and an fd first seen before its
 * accept was reported keeps its connection when it gets one.  A
 * connection closed and its fd number reused without the monitor having
 * told of either in between is not seen as a change. */
static void s_note_conn(gossip_net *net, int rank)
{
    while (net->monitor && s_monitor_event(net))
        ;
    int fd = zmq_msg_get(&net->cur, ZMQ_SRCFD);
    double open = fd >= 0 && fd < GOSSIP_NET_FD_MAX ? net->fd_open[fd] : 0;
    if (fd == net->conn_fd[rank] && open == 0)
        return; /* the closed connection's last messages */
    if (fd == net->conn_fd[rank] && (open == net->conn_open[rank] || net->conn_open[rank] == 0)) {
        net->conn_open[rank] = open; /* the monitor told of its accept after its message */
        return;
    }
    net->conn_fd[rank] = fd;
    net->conn_open[rank] = open;
    net->conn_gen[rank]++;
}

uint64_t gossip_net_conn_gen(const gossip_net *net, int rank)
{
    return rank >= 0 && rank < net->n ? net->conn_gen[rank] : 0;
}

/* Reads one message from the ROUTER: 1 accepted (in net->cur), 0 rejected
 * or nothing there, -1 transport error. */
static int s_recv_router(gossip_net *net, int *from_rank, char *err, size_t errlen)
{
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, net->router, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&id);
        if (e == EAGAIN || e == EINTR)
            return 0;
        return gossip_net_zerr(err, errlen, "receive on the ROUTER of",
                               net->t->nodes[net->rank].id);
    }
    const uint8_t *idb = zmq_msg_data(&id);
    size_t idlen = zmq_msg_size(&id);
    int rank = -1;
    for (int j = 0; j < net->n; j++) {
        const char *nid = net->t->nodes[j].id;
        if (net->is_in[j] && strlen(nid) == idlen && memcmp(nid, idb, idlen) == 0) {
            rank = j;
            break;
        }
    }
    char pid[128];
    s_printable(idb, idlen, pid, sizeof pid);
    if (!s_more(net->router)) { /* cannot happen with a ROUTER; be safe */
        zmq_msg_close(&id);
        s_reject(net, 1, "a message with only a routing id from '%s'", pid);
        return 0;
    }
    zmq_msg_close(&net->cur);
    zmq_msg_init(&net->cur);
    if (zmq_msg_recv(&net->cur, net->router, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id);
        s_drain(net->router);
        return 0;
    }
    int extra = s_drain(net->router);
    size_t len = zmq_msg_size(&net->cur);
    s_delivered(net, &net->cur);
    int claimed = rank < 0 ? s_contested(net, idb, idlen) : -1;
    zmq_msg_close(&id);
    const char *addr = zmq_msg_gets(&net->cur, "Peer-Address");
    if (claimed >= 0) {
        s_reject(net, 4, "%zu bytes from a second connection (peer address %s) that claims "
                 "the id of in-neighbour %s (rank %d) while %s is connected: contested id, "
                 "refused", len, addr ? addr : "unknown", net->t->nodes[claimed].id, claimed,
                 net->t->nodes[claimed].id);
        return 0;
    }
    if (rank < 0) {
        s_reject(net, 0, "%zu bytes from unknown or non-neighbour routing id '%s' (peer address "
                 "%s)", len, pid, addr ? addr : "unknown");
        return 0;
    }
    if (extra) {
        s_reject(net, 1, "a %d-frame message from %s (rank %d): expected one frame", extra + 1,
                 pid, rank);
        return 0;
    }
    if (len == 0 || len > net->max_msg) {
        s_reject(net, 2, "a %zu-byte message from %s (rank %d): expected 1..%zu bytes", len, pid,
                 rank, net->max_msg);
        return 0;
    }
    if (net->curve) {
        const char *who = zmq_msg_gets(&net->cur, "node");
        if (!who || strcmp(who, net->t->nodes[rank].id) != 0) {
            s_reject(net, 0, "%zu bytes with routing id '%s' on a connection authenticated as "
                     "'%s'", len, pid, who ? who : "nobody");
            return 0;
        }
    }
    s_note_conn(net, rank);
    *from_rank = rank;
    return 1;
}

/* Reads one message from DEALER k; same returns as s_recv_router. */
static int s_recv_dealer(gossip_net *net, int k, int *from_rank, char *err, size_t errlen)
{
    void *d = net->dealers[k];
    int j = net->out_ranks[k];
    zmq_msg_close(&net->cur);
    zmq_msg_init(&net->cur);
    if (zmq_msg_recv(&net->cur, d, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        if (e == EAGAIN || e == EINTR)
            return 0;
        return gossip_net_zerr(err, errlen, "receive on the DEALER to", net->t->nodes[j].id);
    }
    int extra = s_drain(d);
    size_t len = zmq_msg_size(&net->cur);
    if (extra) {
        s_reject(net, 1, "a %d-frame reply from out-neighbour %s (rank %d): expected one frame",
                 extra + 1, net->t->nodes[j].id, j);
        return 0;
    }
    if (len == 0 || len > net->max_msg) {
        s_reject(net, 2, "a %zu-byte reply from out-neighbour %s (rank %d): expected 1..%zu bytes",
                 len, net->t->nodes[j].id, j, net->max_msg);
        return 0;
    }
    if (len >= GOSSIP_HEADER_BYTES && !memcmp(zmq_msg_data(&net->cur), "LPGS", 4) &&
        s_sender(zmq_msg_data(&net->cur)) == j)
        net->dealer_heard[k] = nn_now(); /* its message: the endpoint answers (s_probe) */
    *from_rank = j;
    return 1;
}

int gossip_net_recv(gossip_net *net, int timeout_ms, int *from_rank, gossip_net_dir *dir,
                    const uint8_t **msg, size_t *len, char *err, size_t errlen)
{
    if (timeout_ms < 0)
        timeout_ms = 0;
    double deadline = nn_now() + timeout_ms / 1000.0;
    int nitems = 1 + net->nout; /* the monitor and the beacon (last) are polled but not sources */
    for (;;) {
        double left = deadline - nn_now();
        long wait = left > 0 ? (long)(left * 1000.0 + 0.999) : 0;
        double began = nn_now();
        int rc = zmq_poll(net->items, nitems + 1 + !!net->disc, wait);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                return 0;
            return gossip_net_zerr(err, errlen, "poll in", net->t->nodes[net->rank].id);
        }
        if (!(net->items[0].revents & ZMQ_POLLIN))
            net->router_empty = began; /* s_delivered */
        if (net->items[nitems].revents & ZMQ_POLLIN) {
            s_monitor_event(net);
            rc--;
        }
        if (net->disc && (net->items[nitems + 1].revents & ZMQ_POLLIN)) {
            s_discovered(net);
            rc--;
        }
        s_reap(net);
        s_probe(net);
        for (int s = 0; s < nitems && rc > 0; s++) {
            int k = (net->rr + s) % nitems;
            if (!(net->items[k].revents & ZMQ_POLLIN))
                continue;
            int got = k == 0 ? s_recv_router(net, from_rank, err, errlen)
                             : s_recv_dealer(net, k - 1, from_rank, err, errlen);
            if (got < 0)
                return -1;
            if (got == 0)
                continue;
            net->rr = (k + 1) % nitems;
            *dir = k == 0 ? GOSSIP_NET_FROM_IN : GOSSIP_NET_FROM_OUT;
            *msg = zmq_msg_data(&net->cur);
            *len = zmq_msg_size(&net->cur);
            net->st.bytes_recv += *len;
            net->st.msgs_recv++;
            return 1;
        }
        if (nn_now() >= deadline)
            return 0;
    }
}
