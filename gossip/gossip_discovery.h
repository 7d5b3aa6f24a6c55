/* gossip_discovery — LAN discovery of a run's nodes (topology `discovery:
 * lan`): UDP broadcast beacons (CZMQ zbeacon) that say "rank R of run D
 * listens on TCP port P", and what a node believes of them.
 *
 * Owns:    the announcement codec (gossip_disc_encode/decode, below), one
 *          zbeacon actor per node (announces this node every interval_ms
 *          for the whole run and listens for the others on the topology's
 *          discovery_port), and the table of endpoints found, one per rank.
 * Exposes: the functions below.  gossip_disc_socket is a libzmq socket the
 *          caller polls (ZMQ_POLLIN) with its own sockets; gossip_disc_recv
 *          then reads one announcement and says when a rank got an endpoint.
 * Callers: gossip_net (which owns one gossip_disc when the topology says
 *          `discovery: lan` and connects its DEALERs to what is found),
 *          tests, the fuzz target tests/fuzz/fuzz_discovery.c.
 *
 * Announcement, version 1 (little-endian, fixed layout, 20 or 52 bytes):
 *    0  4  magic "LPGD"
 *    4  1  version (1)
 *    5  1  flags: bit 0 = a CURVE public key follows; other bits 0
 *    6  2  TCP port of the sender's ROUTER (1..65535)
 *    8  8  run id: a digest of the run's identity (node_cmd_node: the
 *          topology file's bytes and every flag that must agree)
 *   16  4  rank of the sender in the topology
 *   20 32  (flag bit 0) the sender's CURVE public key, binary
 * The sender's IP address is the beacon's source address (zbeacon's first
 * frame), so the endpoint believed is tcp://SOURCE-IP:PORT.
 *
 * What is believed (gossip_disc_offer).  Everything that arrives is outside
 * input: malformed beacons are dropped and counted (the first few logged);
 * an announcement of another run (other run id, or another codec version)
 * is ignored and logged once per sender address and port; with `security:
 * curve` an announcement whose key is not the one the topology lists for
 * that rank is ignored and logged once per sender.  A rank's first endpoint
 * is kept while it keeps announcing; another endpoint for the same rank is
 * logged once per sender and ignored until the first has been silent for
 * silent_s seconds (a restarted node on a new port, or a duplicate: then
 * the newer one is taken and reported as moved).  An announcement of our
 * own rank from another endpoint (two processes with one --rank) is logged
 * once per sender.  ("Once per sender": the first 64 senders are
 * remembered; beyond them, ignored beacons are only counted.)  The beacon itself is not authenticated: with CURVE the
 * DEALER authenticates the server it reaches by the topology's key, so a
 * forged endpoint can delay a connection but never impersonate a node.
 *
 * Two announcers (gossip_disc_unanswered).  The newest other endpoint
 * announced for a rank while its first lives is kept as its alternative.
 * When the caller finds that the believed endpoint did not answer (no
 * valid message over the DEALER connected there within its probe time;
 * with CURVE: no handshake with the listed key), the alternative, if it
 * was announced within silent_s, becomes the believed one (logged,
 * counted in moved and unanswered) and the old one the alternative.  So
 * the endpoint that connects and answers is kept, and a spoofer that
 * announced first holds a rank for at most the caller's probe time.
 */
#ifndef GOSSIP_DISCOVERY_H
#define GOSSIP_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "topology/topo.h"

#define GOSSIP_DISC_MAGIC     "LPGD"
#define GOSSIP_DISC_VERSION   1
#define GOSSIP_DISC_BYTES     20   /* without key */
#define GOSSIP_DISC_BYTES_KEY 52   /* with key */

/* One announcement. */
typedef struct {
    uint64_t run_id;
    uint32_t rank;
    uint16_t port;      /* TCP port, 1..65535 */
    int      has_key;
    uint8_t  key[32];   /* CURVE public key when has_key */
} gossip_disc_msg;

/* Writes m into buf (room for GOSSIP_DISC_BYTES_KEY); returns its length. */
size_t gossip_disc_encode(const gossip_disc_msg *m, uint8_t *buf);
/* Reads an announcement of exactly len bytes.  0, or -1 with the reason in
 * why (no magic, another version: -2 then, wrong length, unknown flags,
 * port 0).  Any input is safe (fuzzed). */
int gossip_disc_decode(const uint8_t *buf, size_t len, gossip_disc_msg *m, char *why,
                       size_t whylen);

typedef struct gossip_disc gossip_disc;

typedef struct {
    int            tcp_port;    /* announced: where our ROUTER listens */
    uint64_t       run_id;      /* ours; others are ignored */
    const uint8_t *curve_public; /* announced with `security: curve` (32 bytes) */
    const char    *iface;       /* network interface; NULL: ZSYS_INTERFACE, else the first
                                   that can broadcast */
    int            interval_ms; /* between two announcements             [1000] */
    double         silent_s;    /* a rank's endpoint silent this long may be replaced [5] */
    int            offline;     /* 1: no beacon at all (tests feed gossip_disc_offer) */
    FILE          *log;         /* NULL: silent */
} gossip_disc_config;

typedef struct {
    uint64_t accepted;   /* announcements of our run that were believed (refreshes too) */
    uint64_t foreign;    /* of another run or codec version */
    uint64_t bad_key;    /* CURVE: not the listed key for that rank */
    uint64_t malformed;  /* not an announcement, or a rank outside the topology */
    uint64_t contested;  /* a second endpoint for a rank (ours included) while the first lives */
    uint64_t moved;      /* a rank's endpoint replaced (silence, or unanswered) */
    uint64_t unanswered; /* of which: the believed one did not answer (two announcers) */
} gossip_disc_stats;

/* Defaults as listed above. */
void gossip_disc_config_default(gossip_disc_config *cfg);

/* Starts announcing node `rank` of t (borrowed; must outlive the object)
 * and listening on t->discovery_port.  NULL with a message naming the
 * port and interface (no interface that can broadcast, bad arguments). */
gossip_disc *gossip_disc_new(const topo *t, int rank, const gossip_disc_config *cfg, char *err,
                             size_t errlen);
/* Stops the beacon.  Safe on NULL; nulls *self_p. */
void gossip_disc_destroy(gossip_disc **self_p);

/* The libzmq socket to poll for ZMQ_POLLIN (NULL when offline). */
void *gossip_disc_socket(gossip_disc *d);

/* What an announcement changed. */
typedef enum {
    GOSSIP_DISC_NOTHING = 0, /* ignored, or a refresh of what we believe */
    GOSSIP_DISC_FOUND = 1,   /* the rank's first endpoint */
    GOSSIP_DISC_MOVED = 2    /* the rank's endpoint replaced (the old one went silent) */
} gossip_disc_event;

/* Reads at most one waiting beacon (never blocks) and judges it as
 * gossip_disc_offer does. */
gossip_disc_event gossip_disc_recv(gossip_disc *d, int *rank);
/* Judges `data` (len bytes) heard from IPv4 address `ip` at time `now`
 * (nn_now seconds).  FOUND / MOVED with *rank set; its endpoint is then
 * gossip_disc_endpoint(d, *rank). */
gossip_disc_event gossip_disc_offer(gossip_disc *d, const char *ip, const uint8_t *data,
                                    size_t len, double now, int *rank);

/* The endpoint believed for rank did not answer for `waited` seconds (the
 * caller's probe): MOVED to the alternative (above), or NOTHING when
 * there is none announced within silent_s. */
gossip_disc_event gossip_disc_unanswered(gossip_disc *d, int rank, double now, double waited);

/* The endpoint believed for rank ("" while not found; borrowed). */
const char *gossip_disc_endpoint(const gossip_disc *d, int rank);
/* The neighbours of this node (in- and out-, over the whole schedule) not
 * found yet, as "n1 (rank 1), n3 (rank 3)" into buf; returns how many. */
int gossip_disc_missing(const gossip_disc *d, char *buf, size_t len);
void gossip_disc_stats_get(const gossip_disc *d, gossip_disc_stats *out);

#endif
