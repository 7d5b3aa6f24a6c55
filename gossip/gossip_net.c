/* gossip_net — the ZeroMQ sockets of one node (see gossip_net.h).
 *
 * Owns:    the configuration defaults and the message size bound; the
 *          life cycle of a net: its context (CZMQ's shared one and the
 *          ZAP handler for CURVE), the ROUTER with its socket monitor, one
 *          DEALER per out-neighbour, the LAN discovery beacon; sending
 *          (DEALER to an out-neighbour, ROUTER reply to an in-neighbour);
 *          the accessors.
 * Exposes: those functions of gossip_net.h; gossip_net_zerr and
 *          gossip_net_dealer_connect to gossip_net_recv.c
 *          (gossip_net_int.h), which receives.
 * Callers: the transport (gossip_link.c, gossip_member.c, gossip_join.c,
 *          gossip_round.c), node/node_cmd_node.c, tests.
 */
#include "gossip/gossip_net.h"
#include "gossip/gossip_net_int.h"
#include "gossip/gossip_defaults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <czmq.h>
#include <zmq.h>

#include "gossip/gossip_codec.h"

#define S_SIZE_MARGIN (64u << 10)  /* MAXMSGSIZE = max_msg + margin */

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

int gossip_net_zerr(char *err, size_t errlen, const char *what, const char *where)
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
        return gossip_net_zerr(err, errlen, "cannot monitor the ROUTER of",
                               net->t->nodes[net->rank].id);
    net->monitor = zmq_socket(net->ctx, ZMQ_PAIR);
    int zero = 0;
    if (!net->monitor || zmq_setsockopt(net->monitor, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(net->monitor, ep) != 0)
        return gossip_net_zerr(err, errlen, "cannot connect the monitor of",
                               net->t->nodes[net->rank].id);
    return 0;
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
        return gossip_net_zerr(err, errlen, "cannot create a context for",
                               net->t->nodes[net->rank].id);
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
        return gossip_net_zerr(err, errlen, "cannot set up the ROUTER of", myid);
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
int gossip_net_dealer_connect(gossip_net *net, int k, const char *ep, char *err, size_t errlen)
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
        return gossip_net_zerr(err, errlen, "cannot set up the DEALER to", t->nodes[j].id);
    if (net->curve) {
        uint8_t server[32];
        if (!zmq_z85_decode(server, t->nodes[j].pubkey) ||
            zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server, 32) != 0 ||
            zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, cfg->curve_public, 32) != 0 ||
            zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, cfg->curve_secret, 32) != 0)
            return gossip_net_zerr(err, errlen, "cannot set the CURVE keys of the DEALER to",
                                   t->nodes[j].id);
    }
    net->items[1 + k] = (zmq_pollitem_t){.socket = d, .events = ZMQ_POLLIN};
    /* else: when discovered */
    return ep[0] ? gossip_net_dealer_connect(net, k, ep, err, errlen) : 0;
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
    net->fd_open = nn_xcalloc(GOSSIP_NET_FD_MAX, sizeof(double));
    net->fd_delivered = nn_xcalloc(GOSSIP_NET_FD_MAX, sizeof(double));
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
