/* gossip_net — the ZeroMQ transport of one node (docs/design.md §9).
 *
 * Owns:    a libzmq context; one ROUTER bound at this node's endpoint for
 *          everything it receives; one DEALER per out-neighbour (union over
 *          the topology's schedule) whose routing id is this node's id
 *          ("Harmony" pattern of the ZeroMQ guide; never ROUTER-to-ROUTER).
 *          Replies (HELLO/BYE acks) travel back ROUTER -> DEALER over the
 *          same connections, so no node ever connects to an in-neighbour.
 *          Byte and rejection counters.
 * Exposes: the functions below.  Message bytes are opaque here: the caller
 *          (node/node_cmd_node.c) encodes and decodes them (gossip_codec).
 * Callers: gossip_link, node/node_cmd_node.c (`lpgossip node`), tests, bench.
 *
 * What arrives is outside input.  gossip_net_recv accepts on the ROUTER only
 * [routing id][payload] with a routing id equal to the id of a known
 * in-neighbour, and on a DEALER only single-frame messages; anything else
 * (unknown or non-neighbour ids, wrong frame counts, empty or oversized
 * payloads) is dropped, counted per reason and logged (the first few of
 * each reason), never asserted.  Every wait is bounded: zmq_poll with a
 * timeout, ZMQ_SNDTIMEO on the DEALERs, non-blocking ROUTER sends,
 * ZMQ_LINGER on close.  Socket options: ZMQ_MAXMSGSIZE = max_msg + margin
 * (larger frames make libzmq drop the connection; frames in the margin
 * are delivered and rejected here, counted), SNDHWM/RCVHWM, ZMTP
 * heartbeats, ROUTER_MANDATORY (a reply to a peer that is not connected is
 * an error, not a silent drop) and NO ROUTER_HANDOVER: a connection that
 * claims the routing id of a live one never takes it over (an impostor
 * cannot cut a neighbour off, and libzmq's handover path, which could be
 * driven from the network into the `!_io_error` assertion, is never
 * taken).  libzmq 4.3 then leaves the newcomer unidentified: its frames
 * pile up unread, even once the connection that held the id is gone
 * (router.cpp, identify_peer reads the id once).  Should a libzmq take
 * its first message for its routing id instead, what follows arrives under
 * an lpgossip header naming the contested neighbour: refused, counted in
 * rejected_contested and logged with the peer's address.  A ROUTER
 * connection that delivered no message of its own silent_close_ms after
 * it was accepted (such a newcomer, or a silent client) is shut down,
 * logged with its address and counted in closed_silent; a real peer's
 * DEALER reconnects by itself and gets its id if the old connection is
 * gone (closed by the kernel when the old process died, by the peer after
 * a heartbeat timeout, or after the heartbeat TTL).  This is what brings
 * back a neighbour that reconnected while this node was frozen: the old
 * connection held the id until its last messages were read.
 *
 * The DEALERs do NOT use ZMQ_IMMEDIATE: with it, libzmq
 * terminates a DEALER's pipe when its peer disconnects, dropping replies
 * that arrived but were not read yet (a peer's last ack before it exits).
 * Without it, a message sent before the peer is up waits in the DEALER's
 * queue (up to hwm) and is delivered when the connection comes up: DEALER
 * -> ROUTER has no slow-joiner loss.
 *
 * CURVE security (topology `security: curve`).  The ROUTER is a CURVE
 * server with this node's secret key; every DEALER is a CURVE client that
 * authenticates its out-neighbour by the public key the topology lists.  A
 * zauth actor (CZMQ) admits on the ROUTER only the public keys of this
 * node's in-neighbours, each tagged with its node id, and every frame that
 * arrives must carry the id of the routing id it claims (one member cannot
 * speak for another).  The sockets then live in CZMQ's shared context (its
 * signal handlers are switched off: the caller's stay), whose one ZAP
 * endpoint allows one CURVE gossip_net per process.  Refused
 * handshakes (unknown key, a plaintext client, junk on the port) are
 * logged and counted in rejected_auth by a socket monitor, in both modes.
 * Without `security: curve` traffic is neither encrypted nor
 * authenticated.
 *
 * LAN discovery (topology `discovery: lan`, gossip_discovery.h).  The
 * ROUTER binds cfg->bind, else the node's endpoint in the topology, else
 * a free port on every interface (host '*', port 0); this net owns a
 * gossip_disc that announces that port and polls its beacon socket inside
 * gossip_net_recv, with the ZeroMQ sockets.  A DEALER whose out-neighbour has no endpoint in the
 * topology (nor from --peer) is created unconnected and connected when the
 * neighbour's announcement is believed (reconnected if the neighbour moves
 * to another endpoint after its old one went silent).  A rank announced
 * from two places is resolved by what answers: when nothing that looks
 * like the neighbour's lpgossip message (magic, its rank as sender) came
 * back over the DEALER within discovery_probe_ms of connecting it (with
 * CURVE: the handshake with the listed key never completed), the DEALER
 * moves to the other endpoint announced for that rank, logged.  Until then sends
 * to it do not go out (gossip_net_try_send returns 0, as for a full
 * queue): the neighbour is simply not heard from yet.  When every node of
 * t has an endpoint (the file, or --peer as scripts/run-local passes)
 * there is nothing to discover: no beacon.
 */
#ifndef GOSSIP_NET_H
#define GOSSIP_NET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gossip/gossip_discovery.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

typedef struct gossip_net gossip_net;

typedef struct {
    const char *bind;        /* ROUTER endpoint; NULL: the topology's endpoint of `rank` */
    size_t      max_msg;     /* largest payload accepted (bytes); 0: 64 MB */
    int         send_timeout_ms; /* DEALER ZMQ_SNDTIMEO                   [60000] */
    int         linger_ms;   /* ZMQ_LINGER of every socket on destroy     [1000] */
    int         hwm;         /* SNDHWM / RCVHWM in messages               [256] */
    int         dealer_hwm;  /* SNDHWM of the DEALERs; 0: hwm             [0] */
    int         dealer_sndbuf; /* SO_SNDBUF of the DEALERs (bytes); 0: the
                                  system's, autotuned                     [0] */
    int         dealer_heartbeat_timeout_ms; /* the DEALERs' ZMTP heartbeat
                                  timeout and TTL: a PING queued behind a
                                  slow link's messages; 0: heartbeat_timeout_ms */
    int         heartbeat_ivl_ms;     /* ZMTP heartbeats: interval        [1000] */
    int         heartbeat_timeout_ms; /* peer silent this long: drop it   [10000] */
    int         silent_close_ms; /* a ROUTER connection that delivered no
                                  message this long after it was accepted
                                  is closed (a contested id, a silent
                                  client; a slow peer's late first
                                  message too: not below the time a
                                  peer's start may take)           [2000] */
    FILE       *log;         /* rejections are logged here; NULL: silent */
    /* CURVE key pair of this node, 32 bytes each (binary), e.g. from its
     * zcert; required when the topology says `security: curve`. */
    const uint8_t *curve_public, *curve_secret;
    /* `discovery: lan` only: the run's identity announced and required of
     * others (gossip_discovery.h), the interface to broadcast on (NULL:
     * ZSYS_INTERFACE, else the first that can) and the interval [1000]. */
    uint64_t       run_id;
    const char    *discovery_interface;
    int            discovery_interval_ms;
    /* a discovered endpoint from which nothing valid came back this long
     * after the DEALER was connected there gives way to another endpoint
     * announced for the same rank (gossip_disc_unanswered) [3000] */
    int            discovery_probe_ms;
} gossip_net_config;

/* Where a received message came from. */
typedef enum {
    GOSSIP_NET_FROM_IN = 0,  /* ROUTER: an in-neighbour's DEALER */
    GOSSIP_NET_FROM_OUT = 1  /* a DEALER: the reply of an out-neighbour */
} gossip_net_dir;

typedef struct {
    uint64_t bytes_sent, bytes_recv;   /* payload bytes of accepted frames */
    uint64_t msgs_sent, msgs_recv;
    uint64_t rejected_identity;        /* unknown or non-neighbour routing id */
    uint64_t rejected_frames;          /* wrong number of frames */
    uint64_t rejected_size;            /* empty or larger than max_msg */
    uint64_t reply_failed;             /* replies to a peer that is not connected */
    uint64_t rejected_auth;            /* handshakes refused (key, mechanism, junk) */
    uint64_t rejected_contested;       /* from a 2nd connection under a live in-neighbour's id */
    uint64_t closed_silent;            /* connections closed: nothing delivered (silent_close_ms) */
} gossip_net_stats;

/* Defaults as listed above (bind NULL, log NULL). */
void gossip_net_config_default(gossip_net_config *cfg);

/* Largest message the gossip codec can produce for this layout, for any
 * compressor (dense f32 or sparse blocks with every index), plus a margin
 * for the header: a safe max_msg. */
size_t gossip_net_max_msg_size(const nn_arena *layout);

/* Binds the ROUTER (cfg->bind or the endpoint of node `rank` in t) and
 * connects one DEALER to every out-neighbour's endpoint (all must be set).
 * t is borrowed and must outlive the object.  NULL with a message naming
 * the node and endpoint on error (bad rank, missing endpoint, bind or
 * connect failure; with CURVE: no key pair, or a public key that is not
 * the one the topology lists for this node). */
gossip_net *gossip_net_new(const topo *t, int rank, const gossip_net_config *cfg, char *err,
                           size_t errlen);

/* Closes every socket (pending messages get at most linger_ms to leave)
 * and the context; sends nothing itself.  Safe on NULL; nulls *self_p. */
void gossip_net_destroy(gossip_net **self_p);

/* Sends msg[0..len) to out-neighbour to_rank through its DEALER (the bytes
 * are copied: the caller's buffer may change right after).  Blocks at most
 * send_timeout_ms when the peer's queue is full or the peer is not
 * connected.  0, or -1 with a message naming the peer. */
int gossip_net_send(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                    size_t errlen);

/* Same without waiting: 1 sent (or queued for a peer not connected yet),
 * 0 would block (queue full), -1 error. */
int gossip_net_try_send(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                        size_t errlen);

/* Sends msg to in-neighbour to_rank through the ROUTER (to the DEALER it
 * connected with): for acks.  Never blocks.  0; -1 with a message when the
 * peer is not connected (counted in reply_failed) or on error. */
int gossip_net_reply(gossip_net *net, int to_rank, const uint8_t *msg, size_t len, char *err,
                     size_t errlen);

/* Waits at most timeout_ms (0: just look) for the next acceptable message
 * on the ROUTER or any DEALER.  Returns 1 with *from_rank, *dir, *msg
 * (borrowed: valid until the next gossip_net_recv or destroy) and *len;
 * 0 on timeout or when interrupted by a signal (EINTR; the caller checks
 * its flags and calls again); -1 with a message on a transport error.
 * Rejected frames are dropped and counted, and the wait goes on. */
int gossip_net_recv(gossip_net *net, int timeout_ms, int *from_rank, gossip_net_dir *dir,
                    const uint8_t **msg, size_t *len, char *err, size_t errlen);

/* How many times the ROUTER connection that in-neighbour rank's messages
 * come on has changed (0 before its first message): a new value means
 * the id is held by a connection that has not proved itself yet
 * (gossip_link.h "Ids on a plaintext port"). */
uint64_t gossip_net_conn_gen(const gossip_net *net, int rank);

void gossip_net_stats_get(const gossip_net *net, gossip_net_stats *out);
/* The endpoint the ROUTER is bound to (ZMQ_LAST_ENDPOINT; borrowed). */
const char *gossip_net_endpoint(const gossip_net *net);
/* The endpoint the DEALER to out-neighbour rank is connected to: the
 * topology's (or --peer's), the one discovered, or "" (not found yet, or
 * not an out-neighbour).  Borrowed. */
const char *gossip_net_peer_endpoint(const gossip_net *net, int rank);
/* The LAN discovery of this net (NULL without `discovery: lan`): for its
 * stats and the neighbours not found yet.  Borrowed. */
const gossip_disc *gossip_net_discovery(const gossip_net *net);

#endif
