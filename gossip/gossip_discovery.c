/* gossip_discovery — see gossip_discovery.h. */
#include "gossip/gossip_discovery.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <czmq.h>
#include <zmq.h>

#include "nn/nn_core.h"

#define S_LOG_FIRST   5    /* malformed beacons logged, then only counted */
#define S_SENDERS_MAX 64   /* senders remembered for "logged once per sender" */
#define S_HOST_MAX    48

/* A sender already logged for one reason (address, announced port, rank). */
typedef struct {
    char     ip[S_HOST_MAX];
    uint16_t port;
    int      reason;
} s_sender;

typedef struct {
    char   ep[TOPO_ENDPOINT_MAX]; /* believed endpoint, "" while not found */
    double last;                  /* when it last announced ep */
    char   alt[TOPO_ENDPOINT_MAX]; /* the newest other endpoint announced for it, or "" */
    double alt_last;              /* when alt was last announced */
} s_rank;

struct gossip_disc {
    const topo *t;
    int         rank, n;
    gossip_disc_config cfg;
    zactor_t   *beacon;
    char       *is_nb;       /* n: 1 for neighbours (in or out, over the schedule) */
    int         nnb, nfound; /* neighbours, neighbours found */
    double      t0;
    s_rank     *r;           /* n */
    s_sender    senders[S_SENDERS_MAX];
    int         nsenders;
    unsigned    malformed_logged;
    gossip_disc_stats st;
};

/* ---- codec --------------------------------------------------------------------- */

static void s_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void s_put64(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t s_get(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

size_t gossip_disc_encode(const gossip_disc_msg *m, uint8_t *buf)
{
    memcpy(buf, GOSSIP_DISC_MAGIC, 4);
    buf[4] = GOSSIP_DISC_VERSION;
    buf[5] = m->has_key ? 1 : 0;
    s_put16(buf + 6, m->port);
    s_put64(buf + 8, m->run_id);
    s_put32(buf + 16, m->rank);
    if (!m->has_key)
        return GOSSIP_DISC_BYTES;
    memcpy(buf + GOSSIP_DISC_BYTES, m->key, 32);
    return GOSSIP_DISC_BYTES_KEY;
}

int gossip_disc_decode(const uint8_t *buf, size_t len, gossip_disc_msg *m, char *why,
                       size_t whylen)
{
    memset(m, 0, sizeof *m);
    if (len < 6 || memcmp(buf, GOSSIP_DISC_MAGIC, 4) != 0)
        return nn_errf(why, whylen, "not an lpgossip announcement (%zu bytes, no magic)", len);
    if (buf[4] != GOSSIP_DISC_VERSION) {
        nn_errf(why, whylen, "announcement version %u (this lpgossip speaks %u)", buf[4],
                GOSSIP_DISC_VERSION);
        return -2;
    }
    if (buf[5] & ~1u)
        return nn_errf(why, whylen, "unknown flags 0x%02x", buf[5]);
    m->has_key = buf[5] & 1;
    size_t want = m->has_key ? GOSSIP_DISC_BYTES_KEY : GOSSIP_DISC_BYTES;
    if (len != want)
        return nn_errf(why, whylen, "%zu bytes, expected %zu", len, want);
    m->port = (uint16_t)s_get(buf + 6, 2);
    m->run_id = s_get(buf + 8, 8);
    m->rank = (uint32_t)s_get(buf + 16, 4);
    if (m->has_key)
        memcpy(m->key, buf + GOSSIP_DISC_BYTES, 32);
    if (m->port == 0)
        return nn_errf(why, whylen, "TCP port 0");
    return 0;
}

/* ---- logging ------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3)))
static void s_log(gossip_disc *d, const char *fmt, ...)
{
    if (!d->cfg.log)
        return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(d->cfg.log, "discovery: node %s (rank %d): %s\n", d->t->nodes[d->rank].id, d->rank,
            msg);
    fflush(d->cfg.log);
}

/* 1 the first time (ip, port, reason) is seen: log it; 0 after that (or
 * when the table is full: only counted). */
static int s_first_from(gossip_disc *d, const char *ip, uint16_t port, int reason)
{
    for (int k = 0; k < d->nsenders; k++)
        if (d->senders[k].port == port && d->senders[k].reason == reason &&
            !strcmp(d->senders[k].ip, ip))
            return 0;
    if (d->nsenders == S_SENDERS_MAX)
        return 0;
    s_sender *s = &d->senders[d->nsenders++];
    snprintf(s->ip, sizeof s->ip, "%s", ip);
    s->port = port;
    s->reason = reason;
    return 1;
}

/* ---- lifecycle ----------------------------------------------------------------- */

void gossip_disc_config_default(gossip_disc_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->interval_ms = 1000;
    cfg->silent_s = 5;
}

/* The zbeacon actor: configured on the topology's port, publishing our
 * announcement, subscribed to the magic. */
static int s_beacon(gossip_disc *d, char *err, size_t errlen)
{
    const topo *t = d->t;
    zsys_handler_set(NULL); /* the caller owns SIGINT/SIGTERM */
    if (d->cfg.iface)
        zsys_set_interface(d->cfg.iface);
    d->beacon = zactor_new(zbeacon, NULL);
    if (!d->beacon)
        return nn_errf(err, errlen, "discovery: cannot start the UDP beacon (zbeacon)");
    zsock_set_rcvtimeo(d->beacon, 5000);
    zsock_send(d->beacon, "si", "CONFIGURE", t->discovery_port);
    char *host = zstr_recv(d->beacon);
    zsock_set_rcvtimeo(d->beacon, -1);
    if (!host || !host[0]) {
        zstr_free(&host);
        const char *iface = zsys_interface();
        return nn_errf(err, errlen, "discovery (`discovery: lan` in %s): cannot broadcast on UDP "
                       "port %d%s%s%s: no network interface is up with an IPv4 broadcast "
                       "address (choose one with --discovery-interface IFACE), or another "
                       "program holds the port without sharing it", t->name,
                       t->discovery_port, iface && iface[0] ? " (interface '" : "",
                       iface && iface[0] ? iface : "", iface && iface[0] ? "')" : "");
    }
    gossip_disc_msg m = {d->cfg.run_id, (uint32_t)d->rank, (uint16_t)d->cfg.tcp_port, 0, {0}};
    if (t->security_curve && d->cfg.curve_public) {
        m.has_key = 1;
        memcpy(m.key, d->cfg.curve_public, 32);
    }
    uint8_t buf[GOSSIP_DISC_BYTES_KEY];
    size_t len = gossip_disc_encode(&m, buf);
    zsock_send(d->beacon, "sbi", "PUBLISH", buf, len, d->cfg.interval_ms);
    zsock_send(d->beacon, "sb", "SUBSCRIBE", GOSSIP_DISC_MAGIC, (size_t)4);
    s_log(d, "announcing tcp://%s:%d (run %016llx) by UDP broadcast on port %d every %d ms",
          host, d->cfg.tcp_port, (unsigned long long)d->cfg.run_id, t->discovery_port,
          d->cfg.interval_ms);
    zstr_free(&host);
    return 0;
}

gossip_disc *gossip_disc_new(const topo *t, int rank, const gossip_disc_config *cfg, char *err,
                             size_t errlen)
{
    if (!t || rank < 0 || rank >= t->n) {
        nn_errf(err, errlen, "discovery: rank %d outside the topology", rank);
        return NULL;
    }
    if (!cfg || cfg->tcp_port < 1 || cfg->tcp_port > 65535 || cfg->interval_ms < 1 ||
        (!cfg->offline && (t->discovery_port < 1 || t->discovery_port > 65535))) {
        nn_errf(err, errlen, "discovery: node %s: no valid TCP port to announce (%d) or UDP port "
                "(%d)", t->nodes[rank].id, cfg ? cfg->tcp_port : 0, t->discovery_port);
        return NULL;
    }
    gossip_disc *d = nn_xcalloc(1, sizeof *d);
    d->t = t;
    d->rank = rank;
    d->n = t->n;
    d->cfg = *cfg;
    d->t0 = nn_now();
    d->r = nn_xcalloc((size_t)t->n, sizeof *d->r);
    d->is_nb = nn_xcalloc((size_t)t->n, 1);
    int *nb = nn_xcalloc((size_t)t->n, sizeof(int));
    for (int pass = 0; pass < 2; pass++) {
        int k = pass ? topo_out_neighbors_any(t, rank, nb) : topo_in_neighbors_any(t, rank, nb);
        for (int a = 0; a < k; a++)
            d->is_nb[nb[a]] = 1;
    }
    free(nb);
    for (int j = 0; j < t->n; j++)
        d->nnb += d->is_nb[j];
    if (!cfg->offline && s_beacon(d, err, errlen) != 0)
        gossip_disc_destroy(&d);
    return d;
}

void gossip_disc_destroy(gossip_disc **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_disc *d = *self_p;
    if (d->beacon) {
        zstr_sendx(d->beacon, "SILENCE", NULL);
        zactor_destroy(&d->beacon);
    }
    free(d->r);
    free(d->is_nb);
    free(d);
    *self_p = NULL;
}

void *gossip_disc_socket(gossip_disc *d)
{
    return d && d->beacon ? zsock_resolve(d->beacon) : NULL;
}

/* ---- what is believed ---------------------------------------------------------- */

/* Another run's announcement, a wrong key, a malformed beacon: counted,
 * logged once per sender.  Always GOSSIP_DISC_NOTHING. */
static gossip_disc_event s_ignore(gossip_disc *d, const char *ip, const gossip_disc_msg *m,
                                  int rc, const char *why)
{
    if (rc == -2 || (rc == 0 && m->run_id != d->cfg.run_id)) {
        d->st.foreign++;
        if (s_first_from(d, ip, m->port, 0)) {
            if (rc == -2)
                s_log(d, "ignored %s (%s): another lpgossip version", ip, why);
            else
                s_log(d, "ignored tcp://%s:%u (rank %u): another run (run id %016llx, ours "
                      "%016llx: another topology file or other flags); logged once per sender",
                      ip, m->port, m->rank, (unsigned long long)m->run_id,
                      (unsigned long long)d->cfg.run_id);
        }
        return GOSSIP_DISC_NOTHING;
    }
    if (rc != 0 || m->rank >= (uint32_t)d->n) {
        d->st.malformed++;
        if (d->malformed_logged < S_LOG_FIRST) {
            d->malformed_logged++;
            s_log(d, "ignored a beacon from %s: %s%s", ip,
                  rc != 0 ? why : "a rank outside the topology",
                  d->malformed_logged == S_LOG_FIRST ? " (further ones are only counted)" : "");
        }
        return GOSSIP_DISC_NOTHING;
    }
    d->st.bad_key++; /* the only other reason */
    if (s_first_from(d, ip, m->port, 1))
        s_log(d, "ignored tcp://%s:%u claiming rank %u (%s): %s; logged once per sender", ip,
              m->port, m->rank, d->t->nodes[m->rank].id, why);
    return GOSSIP_DISC_NOTHING;
}

/* With `security: curve`: the announcement carries the key the topology
 * lists for its rank.  0, or -1 with the reason. */
static int s_key_ok(const gossip_disc *d, const gossip_disc_msg *m, char *why, size_t whylen)
{
    if (!d->t->security_curve)
        return 0;
    if (!m->has_key)
        return nn_errf(why, whylen, "no CURVE public key in it (the topology says `security: "
                       "curve`)");
    char z85[41];
    zmq_z85_encode(z85, m->key, 32);
    if (strcmp(z85, d->t->nodes[m->rank].pubkey) != 0)
        return nn_errf(why, whylen, "its CURVE public key %s is not the one %s lists (%s)", z85,
                       d->t->name, d->t->nodes[m->rank].pubkey);
    return 0;
}

gossip_disc_event gossip_disc_offer(gossip_disc *d, const char *ip, const uint8_t *data,
                                    size_t len, double now, int *rank)
{
    gossip_disc_msg m;
    char why[256] = "";
    int rc = gossip_disc_decode(data, len, &m, why, sizeof why);
    if (rc != 0 || m.run_id != d->cfg.run_id || m.rank >= (uint32_t)d->n ||
        s_key_ok(d, &m, why, sizeof why) != 0)
        return s_ignore(d, ip, &m, rc, why);
    char ep[TOPO_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, "tcp://%.*s:%u", S_HOST_MAX, ip, m.port);
    int j = (int)m.rank;
    if (j == d->rank) {
        d->st.contested++;
        if (s_first_from(d, ip, m.port, 2))
            s_log(d, "%s also announces rank %d (ours): two processes started with --rank %d? "
                  "It is not this node; logged once per sender", ep, j, j);
        return GOSSIP_DISC_NOTHING;
    }
    s_rank *r = &d->r[j];
    if (!strcmp(r->ep, ep)) {
        d->st.accepted++;
        r->last = now;
        return GOSSIP_DISC_NOTHING;
    }
    if (r->ep[0] && now - r->last < d->cfg.silent_s) {
        d->st.contested++;
        snprintf(r->alt, sizeof r->alt, "%s", ep); /* gossip_disc_unanswered may take it */
        r->alt_last = now;
        if (s_first_from(d, ip, m.port, 3))
            s_log(d, "rank %d (%s) is announced from %s and from %s: keeping %s until it is "
                  "silent for %.0f s (a duplicate, a restarted node, or an impostor)", j,
                  d->t->nodes[j].id, r->ep, ep, r->ep, d->cfg.silent_s);
        return GOSSIP_DISC_NOTHING;
    }
    d->st.accepted++;
    gossip_disc_event ev = r->ep[0] ? GOSSIP_DISC_MOVED : GOSSIP_DISC_FOUND;
    if (ev == GOSSIP_DISC_MOVED) {
        d->st.moved++;
        s_log(d, "rank %d (%s) moved from %s (silent for %.1f s) to %s", j, d->t->nodes[j].id,
              r->ep, now - r->last, ep);
    } else {
        d->nfound += d->is_nb[j];
        s_log(d, "found %s%s (rank %d) at %s after %.2f s%s", d->is_nb[j] ? "neighbour " : "",
              d->t->nodes[j].id, j, ep, now - d->t0,
              d->is_nb[j] && d->nfound == d->nnb ? "; all neighbours found" : "");
    }
    snprintf(r->ep, sizeof r->ep, "%s", ep);
    r->last = now;
    *rank = j;
    return ev;
}

gossip_disc_event gossip_disc_recv(gossip_disc *d, int *rank)
{
    void *sock = gossip_disc_socket(d);
    if (!sock)
        return GOSSIP_DISC_NOTHING;
    zmq_msg_t ip, data;
    zmq_msg_init(&ip);
    zmq_msg_init(&data);
    gossip_disc_event ev = GOSSIP_DISC_NOTHING;
    if (zmq_msg_recv(&ip, sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&ip) &&
        zmq_msg_recv(&data, sock, ZMQ_DONTWAIT) >= 0) {
        char host[S_HOST_MAX];
        size_t hl = zmq_msg_size(&ip) < sizeof host - 1 ? zmq_msg_size(&ip) : sizeof host - 1;
        memcpy(host, zmq_msg_data(&ip), hl);
        host[hl] = '\0';
        ev = gossip_disc_offer(d, host, zmq_msg_data(&data), zmq_msg_size(&data), nn_now(),
                               rank);
    }
    zmq_msg_close(&ip);
    zmq_msg_close(&data);
    /* the actor sends two frames; drop anything beyond them */
    int more = 0;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int got = zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        if (got < 0)
            break;
        sz = sizeof more;
    }
    return ev;
}

gossip_disc_event gossip_disc_unanswered(gossip_disc *d, int rank, double now, double waited)
{
    if (rank < 0 || rank >= d->n || rank == d->rank)
        return GOSSIP_DISC_NOTHING;
    s_rank *r = &d->r[rank];
    if (!r->ep[0] || !r->alt[0] || now - r->alt_last >= d->cfg.silent_s)
        return GOSSIP_DISC_NOTHING;
    char old[TOPO_ENDPOINT_MAX];
    double old_last = r->last;
    snprintf(old, sizeof old, "%s", r->ep);
    snprintf(r->ep, sizeof r->ep, "%s", r->alt);
    r->last = r->alt_last;
    snprintf(r->alt, sizeof r->alt, "%s", old);
    r->alt_last = old_last;
    d->st.moved++;
    d->st.unanswered++;
    s_log(d, "rank %d (%s): %s did not answer within %.1f s; trying %s, also announced for it "
          "(two announcers: the one that connects and answers is kept)", rank,
          d->t->nodes[rank].id, old, waited, r->ep);
    return GOSSIP_DISC_MOVED;
}

const char *gossip_disc_endpoint(const gossip_disc *d, int rank)
{
    return rank >= 0 && rank < d->n ? d->r[rank].ep : "";
}

int gossip_disc_missing(const gossip_disc *d, char *buf, size_t len)
{
    int count = 0;
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (int j = 0; j < d->n; j++) {
        if (!d->is_nb[j] || d->r[j].ep[0])
            continue;
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s (rank %d)", count ? ", " : "",
                                     d->t->nodes[j].id, j);
        count++;
    }
    return count;
}

void gossip_disc_stats_get(const gossip_disc *d, gossip_disc_stats *out)
{
    *out = d->st;
}
