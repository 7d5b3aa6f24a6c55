/* gossip_net — see gossip_net.h. */
#include "gossip/gossip_net.h"
#include "gossip/gossip_defaults.h"

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
#define S_FD_MAX      4096         /* connections tracked by fd below this (see s_reap) */
#define S_SIZE_MARGIN (64u << 10)  /* MAXMSGSIZE = max_msg + margin */

struct gossip_net {
    const topo *t;
    int         rank, n;
    void       *ctx;
    int         shared_ctx;  /* CZMQ's context (CURVE): not ours to terminate */
    int         curve;
    zactor_t   *auth;        /* zauth (CURVE) */
    void       *monitor;     /* PAIR fed by the ROUTER's socket monitor */
    void       *router;
    int         nout;
    int        *out_ranks;  /* nout */
    void      **dealers;    /* nout, DEALER to out_ranks[k] */
    int        *out_pos;    /* n: index into out_ranks or -1 */
    char       *is_in;      /* n: 1 for in-neighbours (union over the schedule) */
    /* the ROUTER connection each in-neighbour's last message came on: its
     * fd and when that fd was accepted, and a count of changes */
    int        *conn_fd;    /* n, -1: none yet */
    double     *conn_open;  /* n */
    uint64_t   *conn_gen;   /* n */
    zmq_pollitem_t *items;  /* 3 + nout: router, dealers, monitor, discovery's beacon */
    gossip_disc *disc;      /* `discovery: lan`, else NULL */
    char      (*dealer_ep)[TOPO_ENDPOINT_MAX]; /* nout: where DEALER k is connected, or "" */
    double     *dealer_since; /* nout: when DEALER k was connected to dealer_ep[k] */
    double     *dealer_heard; /* nout: when DEALER k last got its peer's message */
    double      probe_s;      /* discovery_probe_ms */
    double      next_probe;
    int         rr;         /* round-robin start among ready sockets */
    zmq_msg_t   cur;        /* payload handed out by the last recv */
    int         have_cur;
    size_t      max_msg;
    FILE       *log;
    unsigned    logged[6];
    /* ROUTER connections (s_reap): per fd below S_FD_MAX, when we learnt it
     * was accepted (0: not open or looked at) and when it last delivered a
     * message that was its own (s_delivered) */
    double     *fd_open, *fd_delivered;
    double      router_empty; /* a poll that began then found the ROUTER empty */
    double      next_reap;
    int         silent_close_ms; /* cfg: a connection silent this long is closed */
    char        endpoint[TOPO_ENDPOINT_MAX];
    gossip_net_stats st;
};

void gossip_net_config_default(gossip_net_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->send_timeout_ms = GOSSIP_DEF_SEND_TIMEOUT_MS;
    cfg->linger_ms = GOSSIP_DEF_LINGER_MS;
    cfg->hwm = GOSSIP_DEF_HWM;
    cfg->heartbeat_ivl_ms = GOSSIP_DEF_HEARTBEAT_IVL_MS;
    cfg->heartbeat_timeout_ms = GOSSIP_DEF_HEARTBEAT_TIMEOUT_MS;
    cfg->discovery_interval_ms = GOSSIP_DEF_DISCOVERY_IVL_MS;
    cfg->discovery_probe_ms = GOSSIP_DEF_DISCOVERY_PROBE_MS;
    cfg->silent_close_ms = GOSSIP_DEF_SILENT_CLOSE_MS;
}

size_t gossip_net_max_msg_size(const nn_arena *layout)
{
    /* Per block: type + varint numel + (sparse) varint k, b, varint L:
     * < 32 bytes; values at most 4 per element (f32); q8 scales 4 per 512;
     * a sparse index stream with the best Rice parameter is at most the
     * b = 0 stream, (k + max index) bits <= 2*numel bits = numel/4 bytes. */
    size_t total = GOSSIP_HEADER_BYTES + 4096;
    for (size_t v = 0; v < layout->nviews; v++) {
        size_t m = layout->views[v].numel;
        total += 32 + 4 * m + m / 4 + 1 + 4 * (m / 512 + 1);
    }
    return total;
}

/* ---- helpers ------------------------------------------------------------ */

static int s_zerr(char *err, size_t errlen, const char *what, const char *where)
{
    return nn_errf(err, errlen, "gossip_net: %s %s: %s", what, where, zmq_strerror(zmq_errno()));
}

static int s_setopt_int(void *sock, int opt, int value)
{
    return zmq_setsockopt(sock, opt, &value, sizeof value);
}

/* Options common to ROUTER and DEALERs.  No receive high-water mark
 * (RCVHWM 0): with one, libzmq 4.3 stops reading a connection whose pipe
 * is full, and a peer that then hangs up leaves an engine in the I/O-error
 * state that aborts at its next write (`!_io_error`,
 * stream_engine_base.cpp, libzmq issue 4364): a heartbeat PING timer, or a
 * PONG answering a ZMTP PING buffered behind the full pipe.  Every pipe we
 * receive on is read by us (gossip_net_recv), so memory is bounded by what
 * peers send between two reads.  The ROUTER sends no heartbeats of its own
 * (no timer that writes on a dead engine); the DEALERs' PINGs carry a TTL,
 * so the ROUTER still drops a peer that went silent without closing its
 * connection after heartbeat_timeout_ms. */
static int s_common_opts(void *sock, const gossip_net_config *cfg, size_t max_msg, int router)
{
    int64_t maxsize = (int64_t)(max_msg + S_SIZE_MARGIN);
    int ttl = cfg->heartbeat_timeout_ms;
    if (ttl > 6553599)
        ttl = 6553599;
    if (s_setopt_int(sock, ZMQ_LINGER, cfg->linger_ms) != 0 ||
        s_setopt_int(sock, ZMQ_SNDHWM, cfg->hwm) != 0 ||
        s_setopt_int(sock, ZMQ_RCVHWM, 0) != 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize) != 0 ||
        s_setopt_int(sock, ZMQ_HEARTBEAT_IVL, router ? 0 : cfg->heartbeat_ivl_ms) != 0 ||
        s_setopt_int(sock, ZMQ_HEARTBEAT_TIMEOUT, cfg->heartbeat_timeout_ms) != 0 ||
        s_setopt_int(sock, ZMQ_HEARTBEAT_TTL, ttl) != 0)
        return -1;
    return 0;
}

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

/* CURVE nets alive in this process: zauth binds the one ZAP endpoint of
 * CZMQ's shared context, so there can be only one (a second zauth would
 * abort inside CZMQ).  Nets are created and destroyed by one thread. */
static int s_curve_nets;

/* zauth admitting the in-neighbours' keys, each tagged "node" = its id
 * (the tag travels as connection metadata on every frame). */
static int s_start_auth(gossip_net *net, char *err, size_t errlen)
{
    if (s_curve_nets > 0)
        return nn_errf(err, errlen, "gossip_net: node %s: only one CURVE node per process (its "
                       "ZAP handler serves the whole process); run one process per node",
                       net->t->nodes[net->rank].id);
    zcertstore_t *store = zcertstore_new(NULL);
    uint8_t pub[32], none[32];
    memset(none, 0, sizeof none);
    for (int j = 0; j < net->n; j++) {
        if (!net->is_in[j])
            continue;
        if (!zmq_z85_decode(pub, net->t->nodes[j].pubkey)) {
            zcertstore_destroy(&store);
            return nn_errf(err, errlen, "gossip_net: the public key of %s in %s is not valid Z85",
                           net->t->nodes[j].id, net->t->name);
        }
        zcert_t *c = zcert_new_from(pub, none);
        zcert_set_meta(c, "node", "%s", net->t->nodes[j].id);
        zcertstore_insert(store, &c);
    }
    net->auth = zactor_new(zauth, store); /* takes the store */
    if (!net->auth) {
        zcertstore_destroy(&store);
        return nn_errf(err, errlen, "gossip_net: cannot start the ZAP handler (zauth)");
    }
    s_curve_nets++;
    return 0;
}

/* A PAIR socket that receives the ROUTER's handshake failures. */
static int s_start_monitor(gossip_net *net, char *err, size_t errlen)
{
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://lpgossip-monitor-%p", (void *)net);
    if (zmq_socket_monitor(net->router, ep, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                                ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                                ZMQ_EVENT_ACCEPTED |
                                                ZMQ_EVENT_DISCONNECTED) != 0)
        return s_zerr(err, errlen, "cannot monitor the ROUTER of", net->t->nodes[net->rank].id);
    net->monitor = zmq_socket(net->ctx, ZMQ_PAIR);
    int zero = 0;
    if (!net->monitor || zmq_setsockopt(net->monitor, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(net->monitor, ep) != 0)
        return s_zerr(err, errlen, "cannot connect the monitor of", net->t->nodes[net->rank].id);
    return 0;
}

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
        if (val < S_FD_MAX) {
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
    for (int fd = 0; fd < S_FD_MAX; fd++) {
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
    if (fd >= 0 && fd < S_FD_MAX && net->router_empty >= net->fd_open[fd])
        net->fd_delivered[fd] = nn_now();
}

/* ---- lifecycle ---------------------------------------------------------- */

/* What the caller must give before any socket exists: a rank of t, this
 * node's key pair for a CURVE topology, an endpoint to bind (returned).
 * NULL with a message. */
static const char *s_check_config(const topo *t, int rank, const gossip_net_config *cfg,
                                  char *err, size_t errlen)
{
    if (!t || rank < 0 || rank >= t->n) {
        nn_errf(err, errlen, "gossip_net: rank %d outside the topology (0..%d)", rank,
                t ? t->n - 1 : -1);
        return NULL;
    }
    if (t->security_curve) {
        char mine[41];
        if (!cfg->curve_public || !cfg->curve_secret) {
            nn_errf(err, errlen, "gossip_net: %s says `security: curve`: node %s needs its "
                    "certificate (--cert FILE, written by `lpgossip keygen`)", t->name,
                    t->nodes[rank].id);
            return NULL;
        }
        zmq_z85_encode(mine, cfg->curve_public, 32);
        if (strcmp(mine, t->nodes[rank].pubkey) != 0) {
            nn_errf(err, errlen, "gossip_net: the certificate's public key %s is not the one %s "
                    "lists for node %s (%s): wrong --cert?", mine, t->name, t->nodes[rank].id,
                    t->nodes[rank].pubkey);
            return NULL;
        }
    }
    const char *bind = cfg->bind ? cfg->bind : t->nodes[rank].endpoint;
    if (!bind[0] && t->discovery == TOPO_DISCOVERY_LAN)
        return "tcp://*:0"; /* a free port, announced by the beacon */
    if (!bind[0]) {
        nn_errf(err, errlen, "gossip_net: node %s (rank %d) has no endpoint in %s: give one "
                "there or with --bind tcp://*:PORT", t->nodes[rank].id, rank, t->name);
        return NULL;
    }
    return bind;
}

/* The neighbour tables: in-neighbour flags, out-neighbours and their
 * positions (DEALER k talks to out_ranks[k]). */
static void s_neighbours(gossip_net *net, const topo *t, int rank)
{
    net->out_ranks = nn_xcalloc((size_t)t->n, sizeof(int));
    net->out_pos = nn_xcalloc((size_t)t->n, sizeof(int));
    net->is_in = nn_xcalloc((size_t)t->n, 1);
    net->conn_fd = nn_xcalloc((size_t)t->n, sizeof *net->conn_fd);
    net->conn_open = nn_xcalloc((size_t)t->n, sizeof *net->conn_open);
    net->conn_gen = nn_xcalloc((size_t)t->n, sizeof *net->conn_gen);
    for (int j = 0; j < t->n; j++)
        net->conn_fd[j] = -1;
    int *in = nn_xcalloc((size_t)t->n, sizeof(int));
    int nin = topo_in_neighbors_any(t, rank, in);
    for (int k = 0; k < nin; k++)
        net->is_in[in[k]] = 1;
    free(in);
    net->nout = topo_out_neighbors_any(t, rank, net->out_ranks);
    for (int j = 0; j < t->n; j++)
        net->out_pos[j] = -1;
    for (int k = 0; k < net->nout; k++)
        net->out_pos[net->out_ranks[k]] = k;
}

/* The context: CZMQ's shared one (its ZAP handler) for CURVE, else ours. */
static int s_context(gossip_net *net, char *err, size_t errlen)
{
    net->curve = net->t->security_curve;
    if (net->curve) {
        zsys_handler_set(NULL); /* the caller owns SIGINT/SIGTERM */
        net->ctx = zsys_init();
        net->shared_ctx = 1;
        if (!net->ctx || s_start_auth(net, err, errlen) != 0)
            return -1;
    } else {
        net->ctx = zmq_ctx_new();
    }
    if (!net->ctx)
        return s_zerr(err, errlen, "cannot create a context for", net->t->nodes[net->rank].id);
    return 0;
}

/* The ROUTER, bound at `bind`, with its monitor. */
static int s_router(gossip_net *net, const gossip_net_config *cfg, const char *bind, char *err,
                    size_t errlen)
{
    const char *myid = net->t->nodes[net->rank].id;
    net->router = zmq_socket(net->ctx, ZMQ_ROUTER);
    if (!net->router || s_common_opts(net->router, cfg, net->max_msg, 1) != 0 ||
        s_setopt_int(net->router, ZMQ_ROUTER_MANDATORY, 1) != 0 ||
        s_setopt_int(net->router, ZMQ_ROUTER_HANDOVER, 0) != 0 ||
        (net->curve && (s_setopt_int(net->router, ZMQ_CURVE_SERVER, 1) != 0 ||
                        zmq_setsockopt(net->router, ZMQ_CURVE_SECRETKEY, cfg->curve_secret, 32) != 0)))
        return s_zerr(err, errlen, "cannot set up the ROUTER of", myid);
    if (s_start_monitor(net, err, errlen) != 0)
        return -1;
    if (zmq_bind(net->router, bind) != 0)
        return nn_errf(err, errlen, "gossip_net: node %s (rank %d) cannot bind %s: %s (a host "
                       "name cannot be bound: use --bind tcp://*:PORT or an address of this "
                       "machine)", myid, net->rank, bind, zmq_strerror(zmq_errno()));
    size_t eplen = sizeof net->endpoint;
    if (zmq_getsockopt(net->router, ZMQ_LAST_ENDPOINT, net->endpoint, &eplen) != 0)
        snprintf(net->endpoint, sizeof net->endpoint, "%s", bind);
    net->items[0] = (zmq_pollitem_t){.socket = net->router, .events = ZMQ_POLLIN};
    return 0;
}

/* Connects DEALER k to ep (first disconnecting it from where it was). */
static int s_dealer_connect(gossip_net *net, int k, const char *ep, char *err, size_t errlen)
{
    int j = net->out_ranks[k];
    if (net->dealer_ep[k][0])
        zmq_disconnect(net->dealers[k], net->dealer_ep[k]);
    net->dealer_ep[k][0] = '\0';
    if (zmq_connect(net->dealers[k], ep) != 0)
        return nn_errf(err, errlen, "gossip_net: node %s cannot connect to out-neighbour %s "
                       "(rank %d) at %s: %s", net->t->nodes[net->rank].id, net->t->nodes[j].id,
                       j, ep, zmq_strerror(zmq_errno()));
    snprintf(net->dealer_ep[k], sizeof net->dealer_ep[k], "%s", ep);
    net->dealer_since[k] = nn_now();
    return 0;
}

/* DEALER k, connected to out-neighbour out_ranks[k] with our id as its
 * routing id (later, when found, for a neighbour without endpoint under
 * `discovery: lan`). */
static int s_dealer(gossip_net *net, const gossip_net_config *cfg, int k, char *err,
                    size_t errlen)
{
    const topo *t = net->t;
    const char *myid = t->nodes[net->rank].id;
    int j = net->out_ranks[k];
    const char *ep = t->nodes[j].endpoint;
    if (!ep[0] && t->discovery != TOPO_DISCOVERY_LAN)
        return nn_errf(err, errlen, "gossip_net: out-neighbour %s (rank %d) of node %s has no "
                       "endpoint in %s: give one there or with --peer %s=tcp://HOST:PORT, or "
                       "let the nodes find each other with `discovery: lan` in the topology",
                       t->nodes[j].id, j, myid, t->name, t->nodes[j].id);
    void *d = zmq_socket(net->ctx, ZMQ_DEALER);
    net->dealers[k] = d;
    if (!d || s_common_opts(d, cfg, net->max_msg, 0) != 0 ||
        (cfg->dealer_hwm > 0 && s_setopt_int(d, ZMQ_SNDHWM, cfg->dealer_hwm) != 0) ||
        (cfg->dealer_sndbuf > 0 && s_setopt_int(d, ZMQ_SNDBUF, cfg->dealer_sndbuf) != 0) ||
        (cfg->dealer_heartbeat_timeout_ms > 0 &&
         (s_setopt_int(d, ZMQ_HEARTBEAT_TIMEOUT, cfg->dealer_heartbeat_timeout_ms) != 0 ||
          s_setopt_int(d, ZMQ_HEARTBEAT_TTL, cfg->dealer_heartbeat_timeout_ms) != 0)) ||
        zmq_setsockopt(d, ZMQ_ROUTING_ID, myid, strlen(myid)) != 0 ||
        s_setopt_int(d, ZMQ_SNDTIMEO, cfg->send_timeout_ms) != 0)
        return s_zerr(err, errlen, "cannot set up the DEALER to", t->nodes[j].id);
    if (net->curve) {
        uint8_t server[32];
        if (!zmq_z85_decode(server, t->nodes[j].pubkey) ||
            zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server, 32) != 0 ||
            zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, cfg->curve_public, 32) != 0 ||
            zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, cfg->curve_secret, 32) != 0)
            return s_zerr(err, errlen, "cannot set the CURVE keys of the DEALER to",
                          t->nodes[j].id);
    }
    net->items[1 + k] = (zmq_pollitem_t){.socket = d, .events = ZMQ_POLLIN};
    return ep[0] ? s_dealer_connect(net, k, ep, err, errlen) : 0; /* else: when discovered */
}

/* `discovery: lan` and some node's endpoint unknown (neither in the file
 * nor from --peer): then this node announces itself and listens; when
 * every endpoint is known (scripts/run-local passes them all) there is
 * nothing to discover and no beacon. */
static int s_discovery_needed(const topo *t)
{
    if (t->discovery != TOPO_DISCOVERY_LAN)
        return 0;
    for (int j = 0; j < t->n; j++)
        if (!t->nodes[j].endpoint[0])
            return 1;
    return 0;
}

/* The beacon announcing the port the ROUTER got (`discovery: lan`). */
static int s_discovery(gossip_net *net, const gossip_net_config *cfg, char *err, size_t errlen)
{
    const char *colon = strrchr(net->endpoint, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (port < 1 || port > 65535)
        return nn_errf(err, errlen, "gossip_net: node %s: `discovery: lan` needs a TCP endpoint "
                       "to announce, the ROUTER is bound to %s", net->t->nodes[net->rank].id,
                       net->endpoint);
    gossip_disc_config dc;
    gossip_disc_config_default(&dc);
    dc.tcp_port = port;
    dc.run_id = cfg->run_id;
    dc.curve_public = cfg->curve_public;
    dc.iface = cfg->discovery_interface;
    if (cfg->discovery_interval_ms > 0)
        dc.interval_ms = cfg->discovery_interval_ms;
    dc.log = cfg->log;
    if (!(net->disc = gossip_disc_new(net->t, net->rank, &dc, err, errlen)))
        return -1;
    net->items[2 + net->nout] =
        (zmq_pollitem_t){.socket = gossip_disc_socket(net->disc), .events = ZMQ_POLLIN};
    return 0;
}

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
    if (s_dealer_connect(net, k, ep, err, sizeof err) != 0) {
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
        if (s_dealer_connect(net, k, ep, err, sizeof err) != 0 && net->log)
            fprintf(net->log, "%s\n", err);
        else if (net->log)
            fprintf(net->log, "gossip_net: node %s (rank %d): DEALER to out-neighbour %s "
                    "(rank %d) moved to %s (the endpoint believed before did not answer)\n",
                    net->t->nodes[net->rank].id, net->rank, net->t->nodes[j].id, j, ep);
        if (net->log)
            fflush(net->log);
    }
}

gossip_net *gossip_net_new(const topo *t, int rank, const gossip_net_config *cfg_in, char *err,
                           size_t errlen)
{
    gossip_net_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        gossip_net_config_default(&cfg);
    const char *bind = s_check_config(t, rank, &cfg, err, errlen);
    if (!bind)
        return NULL;
    gossip_net *net = nn_xcalloc(1, sizeof *net);
    net->t = t;
    net->rank = rank;
    net->n = t->n;
    net->max_msg = cfg.max_msg ? cfg.max_msg : (size_t)64 << 20;
    net->silent_close_ms = cfg.silent_close_ms > 0 ? cfg.silent_close_ms
                                                   : GOSSIP_DEF_SILENT_CLOSE_MS;
    net->log = cfg.log;
    s_neighbours(net, t, rank);
    net->dealers = nn_xcalloc((size_t)net->nout + 1, sizeof(void *));
    net->items = nn_xcalloc((size_t)net->nout + 3, sizeof(zmq_pollitem_t));
    net->dealer_ep = nn_xcalloc((size_t)net->nout + 1, sizeof *net->dealer_ep);
    net->dealer_since = nn_xcalloc((size_t)net->nout + 1, sizeof *net->dealer_since);
    net->dealer_heard = nn_xcalloc((size_t)net->nout + 1, sizeof *net->dealer_heard);
    net->probe_s = cfg.discovery_probe_ms > 0 ? cfg.discovery_probe_ms / 1000.0 : 3.0;
    zmq_msg_init(&net->cur);
    net->have_cur = 1;
    net->fd_open = nn_xcalloc(S_FD_MAX, sizeof(double));
    net->fd_delivered = nn_xcalloc(S_FD_MAX, sizeof(double));
    if (s_context(net, err, errlen) != 0 || s_router(net, &cfg, bind, err, errlen) != 0)
        goto fail;
    for (int k = 0; k < net->nout; k++)
        if (s_dealer(net, &cfg, k, err, errlen) != 0)
            goto fail;
    net->items[1 + net->nout] = (zmq_pollitem_t){.socket = net->monitor, .events = ZMQ_POLLIN};
    if (s_discovery_needed(t) && s_discovery(net, &cfg, err, errlen) != 0)
        goto fail;
    return net;
fail:
    gossip_net_destroy(&net);
    return NULL;
}

void gossip_net_destroy(gossip_net **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_net *net = *self_p;
    if (net->have_cur)
        zmq_msg_close(&net->cur);
    for (int k = 0; k < net->nout; k++)
        if (net->dealers[k])
            zmq_close(net->dealers[k]);
    if (net->router) {
        zmq_socket_monitor(net->router, NULL, 0);
        zmq_close(net->router);
    }
    if (net->monitor)
        zmq_close(net->monitor);
    gossip_disc_destroy(&net->disc);
    if (net->auth) {
        zactor_destroy(&net->auth);
        s_curve_nets--;
    }
    if (net->ctx && !net->shared_ctx) /* waits at most linger_ms for queued messages */
        while (zmq_ctx_term(net->ctx) != 0 && zmq_errno() == EINTR)
            ;
    free(net->dealers);
    free(net->dealer_ep);
    free(net->dealer_since);
    free(net->dealer_heard);
    free(net->items);
    free(net->out_ranks);
    free(net->out_pos);
    free(net->is_in);
    free(net->conn_fd);
    free(net->conn_open);
    free(net->conn_gen);
    free(net->fd_open);
    free(net->fd_delivered);
    free(net);
    *self_p = NULL;
}

/* ---- sending ------------------------------------------------------------ */

static int s_send(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, int flags,
                  char *err, size_t errlen)
{
    if (to_rank < 0 || to_rank >= net->n || net->out_pos[to_rank] < 0)
        return nn_errf(err, errlen, "gossip_net: node %d: rank %d is not an out-neighbour",
                       net->rank, to_rank);
    void *d = net->dealers[net->out_pos[to_rank]];
    for (int tries = 0;; tries++) {
        if (zmq_send(d, msg, len, flags) >= 0)
            break;
        int e = zmq_errno();
        if (e == EINTR && tries < 100)
            continue;
        if (e == EAGAIN) {
            if (flags & ZMQ_DONTWAIT)
                return 0;
            return nn_errf(err, errlen, "gossip_net: node %s: send to out-neighbour %s "
                           "(rank %d, %s) timed out: the peer is not connected or does not read",
                           net->t->nodes[net->rank].id, net->t->nodes[to_rank].id, to_rank,
                           net->dealer_ep[net->out_pos[to_rank]][0]
                               ? net->dealer_ep[net->out_pos[to_rank]]
                               : "not found yet");
        }
        return nn_errf(err, errlen, "gossip_net: node %s: send to %s (rank %d): %s",
                       net->t->nodes[net->rank].id, net->t->nodes[to_rank].id, to_rank,
                       zmq_strerror(e));
    }
    net->st.bytes_sent += len;
    net->st.msgs_sent++;
    return 1;
}

int gossip_net_send(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                    size_t errlen)
{
    return s_send(net, to_rank, msg, len, 0, err, errlen) < 0 ? -1 : 0;
}

int gossip_net_try_send(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                        size_t errlen)
{
    return s_send(net, to_rank, msg, len, ZMQ_DONTWAIT, err, errlen);
}

int gossip_net_reply(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                     size_t errlen)
{
    if (to_rank < 0 || to_rank >= net->n || !net->is_in[to_rank])
        return nn_errf(err, errlen, "gossip_net: node %d: rank %d is not an in-neighbour",
                       net->rank, to_rank);
    const char *id = net->t->nodes[to_rank].id;
    if (zmq_send(net->router, id, strlen(id), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(net->router, msg, len, ZMQ_DONTWAIT) < 0) {
        net->st.reply_failed++;
        return nn_errf(err, errlen, "gossip_net: node %s: reply to in-neighbour %s (rank %d): %s",
                       net->t->nodes[net->rank].id, id, to_rank, zmq_strerror(zmq_errno()));
    }
    net->st.bytes_sent += len;
    net->st.msgs_sent++;
    return 0;
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
    double open = fd >= 0 && fd < S_FD_MAX ? net->fd_open[fd] : 0;
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
        return s_zerr(err, errlen, "receive on the ROUTER of", net->t->nodes[net->rank].id);
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
        return s_zerr(err, errlen, "receive on the DEALER to", net->t->nodes[j].id);
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
            return s_zerr(err, errlen, "poll in", net->t->nodes[net->rank].id);
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

void gossip_net_stats_get(const gossip_net *net, gossip_net_stats *out)
{
    *out = net->st;
}

const char *gossip_net_endpoint(const gossip_net *net)
{
    return net->endpoint;
}

const char *gossip_net_peer_endpoint(const gossip_net *net, int rank)
{
    if (rank < 0 || rank >= net->n || net->out_pos[rank] < 0)
        return "";
    return net->dealer_ep[net->out_pos[rank]];
}

const gossip_disc *gossip_net_discovery(const gossip_net *net)
{
    return net->disc;
}

