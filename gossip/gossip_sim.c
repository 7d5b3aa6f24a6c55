/* gossip_sim — see gossip_sim.h. */
#include "gossip/gossip_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_state.h"
/* A delayed message on its way (bytes, as sent). */
typedef struct {
    int      from, to;
    uint64_t due;    /* delivered at the start of this round */
    uint8_t *bytes;
    size_t   len;
} s_flight;

struct gossip_sim {
    int           n;
    gossip_node **nodes;
    uint8_t      *absent;   /* NULL, or n flags (gossip_sim_absent) */
    const topo   *t;
    const nn_arena *layout;
    gossip_delays dl;
    nn_rng        rng;
    uint64_t     *last_due;   /* n x n: FIFO per sender-receiver pair */
    s_flight     *q;          /* in-flight queue, in sending order */
    size_t        nq, capq;
    /* jammed link (gossip_sim_set_jam) */
    int           jam_rank, jam_keep;
    double        jam_frac;
    nn_rng        jam_rng;
    int          *jam_run;    /* n x n: messages not sent in a row per pair */
    uint64_t      jammed;
};

gossip_sim *gossip_sim_new(const gossip_config *cfg, const nn_arena *layout, const topo *t,
                           char *err, size_t errlen)
{
    if (!t || t->n < 1) {
        nn_errf(err, errlen, "gossip_sim: empty topology");
        return NULL;
    }
    gossip_sim *s = nn_xcalloc(1, sizeof *s);
    s->n = t->n;
    s->t = t;
    s->layout = layout;
    s->nodes = nn_xcalloc((size_t)t->n, sizeof *s->nodes);
    s->last_due = nn_xcalloc((size_t)t->n * (size_t)t->n, sizeof *s->last_due);
    s->jam_run = nn_xcalloc((size_t)t->n * (size_t)t->n, sizeof *s->jam_run);
    s->jam_rank = -1;
    for (int i = 0; i < t->n; i++) {
        s->nodes[i] = gossip_node_new(cfg, layout, t, i, err, errlen);
        if (!s->nodes[i])
            goto fail;
    }
    return s;
fail:
    gossip_sim_destroy(&s);
    return NULL;
}

void gossip_sim_destroy(gossip_sim **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_sim *s = *self_p;
    for (int i = 0; i < s->n; i++)
        gossip_node_destroy(&s->nodes[i]);
    for (size_t a = 0; a < s->nq; a++)
        free(s->q[a].bytes);
    free(s->q);
    free(s->last_due);
    free(s->jam_run);
    free(s->nodes);
    free(s->absent);
    free(s);
    *self_p = NULL;
}

/* ---- delays -------------------------------------------------------------- */

static int s_parse_int(const char *txt, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(txt, &end, 10);
    if (end == txt || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int gossip_delays_parse(const char *spec, int staleness, gossip_delays *out, char *err,
                        size_t errlen)
{
    memset(out, 0, sizeof *out);
    char buf[64];
    if (strlen(spec) >= sizeof buf)
        return nn_errf(err, errlen, "--delays '%.20s...': too long", spec);
    strcpy(buf, spec);
    char *arg = strchr(buf, ':');
    if (arg)
        *arg++ = 0;
    if (!strcmp(buf, "none") && !arg)
        return 0;
    if (!arg || (strcmp(buf, "fixed") && strcmp(buf, "random") && strcmp(buf, "slow")))
        return nn_errf(err, errlen, "--delays '%s': expected none, fixed:D, random:D or slow:R:F", spec);
    if (!strcmp(buf, "slow")) {
        char *f = strchr(arg, ':'), *end;
        if (f)
            *f++ = 0;
        out->kind = GOSSIP_DELAY_SLOW;
        out->d = staleness;
        if (!f || s_parse_int(arg, 0, 1 << 20, &out->slow_rank) < 0)
            return nn_errf(err, errlen, "--delays '%s': slow:R:F needs a rank R and a fraction F", spec);
        out->slow_frac = strtod(f, &end);
        if (end == f || *end || !(out->slow_frac > 0.0 && out->slow_frac <= 1.0))
            return nn_errf(err, errlen, "--delays '%s': the fraction F must be in (0, 1]", spec);
        if (staleness < 1)
            return nn_errf(err, errlen, "--delays '%s': a slow node's messages arrive S rounds late, but "
                           "--staleness is 0 (give --staleness 1 or more)", spec);
        return 0;
    }
    out->kind = !strcmp(buf, "fixed") ? GOSSIP_DELAY_FIXED : GOSSIP_DELAY_RANDOM;
    if (s_parse_int(arg, 0, 1 << 20, &out->d) < 0)
        return nn_errf(err, errlen, "--delays '%s': D must be a whole number of rounds", spec);
    if (out->d > staleness)
        return nn_errf(err, errlen, "--delays '%s': delays up to %d rounds exceed --staleness %d (a node "
                       "would wait for ever in one process; give --staleness %d or more)",
                       spec, out->d, staleness, out->d);
    return 0;
}

int gossip_sim_set_delays(gossip_sim *s, const gossip_delays *dl, uint64_t seed, char *err,
                          size_t errlen)
{
    if (dl->kind == GOSSIP_DELAY_SLOW && (dl->slow_rank < 0 || dl->slow_rank >= s->n))
        return nn_errf(err, errlen, "--delays slow:%d:%g: rank %d outside 0..%d", dl->slow_rank,
                       dl->slow_frac, dl->slow_rank, s->n - 1);
    s->dl = *dl;
    nn_rng_seed(&s->rng, nn_seed_derive(seed, 0x5eed0de1ULL));
    return 0;
}

int gossip_sim_steps(const gossip_sim *s, int rank, uint64_t iter)
{
    if (s->dl.kind != GOSSIP_DELAY_SLOW || rank != s->dl.slow_rank)
        return 1;
    /* evenly spread: a step wherever floor((t+1) F) moves */
    double f = s->dl.slow_frac;
    return floor((double)(iter + 1) * f) > floor((double)iter * f);
}

/* Rounds message (from, iter) to `to` is late. */
static uint64_t s_delay(gossip_sim *s, int from)
{
    switch (s->dl.kind) {
    case GOSSIP_DELAY_FIXED: return (uint64_t)s->dl.d;
    case GOSSIP_DELAY_RANDOM: return nn_rng_next(&s->rng) % (uint64_t)(s->dl.d + 1);
    case GOSSIP_DELAY_SLOW: return from == s->dl.slow_rank ? (uint64_t)s->dl.d : 0;
    default: return 0;
    }
}

static void s_enqueue(gossip_sim *s, int from, int to, const uint8_t *msg, size_t len,
                      uint64_t iter)
{
    uint64_t due = iter + s_delay(s, from), *last = &s->last_due[(size_t)from * s->n + to];
    if (due < *last)
        due = *last; /* no overtaking on one connection */
    *last = due;
    if (s->nq == s->capq) {
        s->capq = s->capq ? 2 * s->capq : 64;
        s->q = nn_xrealloc(s->q, s->capq * sizeof *s->q);
    }
    s_flight *f = &s->q[s->nq++];
    *f = (s_flight){from, to, due, nn_xmalloc(len), len};
    memcpy(f->bytes, msg, len);
}

/* Delivers, in sending order, every queued message due by round iter. */
static int s_deliver_due(gossip_sim *s, uint64_t iter, char *err, size_t errlen)
{
    size_t k = 0;
    int rc = 0;
    for (size_t a = 0; a < s->nq; a++) {
        s_flight *f = &s->q[a];
        if (f->due > iter || rc < 0) {
            s->q[k++] = *f;
            continue;
        }
        if (gossip_node_receive(s->nodes[f->to], f->bytes, f->len, err, errlen) < 0)
            rc = -1;
        free(f->bytes);
    }
    s->nq = k;
    return rc;
}

void gossip_sim_inflight(gossip_sim *s, double *xsum, double *psisum)
{
    gossip_payload pl;
    gossip_payload_init(&pl, s->layout);
    for (size_t a = 0; a < s->nq; a++) {
        gossip_header h;
        char err[256];
        if (gossip_msg_decode(s->q[a].bytes, s->q[a].len, s->layout, &h, &pl, err, sizeof err) < 0)
            continue; /* our own encoder's bytes: cannot happen */
        double w = topo_weights(s->t, h.iter)[(size_t)s->q[a].to * s->n + s->q[a].from];
        gossip_payload_axpy(&pl, s->layout, w, xsum);
        *psisum += w * h.psi;
    }
    gossip_payload_free(&pl);
}

/* ---- a jammed link -------------------------------------------------------- */

void gossip_sim_set_jam(gossip_sim *s, int rank, double frac, int keep, uint64_t seed)
{
    s->jam_rank = frac > 0.0 ? rank : -1;
    s->jam_frac = frac;
    s->jam_keep = keep;
    nn_rng_seed(&s->jam_rng, seed);
}

uint64_t gossip_sim_jammed(const gossip_sim *s)
{
    return s->jammed;
}

/* 1 when the message of `from` to `to` is not sent this round (jammed);
 * with keep, its share stays with the sender. */
static int s_jammed(gossip_sim *s, int from, int to)
{
    if (s->jam_rank < 0 || (from != s->jam_rank && to != s->jam_rank))
        return 0;
    int *run = &s->jam_run[(size_t)from * s->n + to];
    int S = gossip_node_config(s->nodes[to])->staleness;
    if (*run >= S || nn_rng_uniform(&s->jam_rng) >= s->jam_frac) {
        *run = 0;
        return 0;
    }
    if (s->jam_keep)
        gossip_node_keep(s->nodes[from], to, 1); /* where it cannot: lost, as in the link */
    (*run)++;
    s->jammed++;
    return 1;
}

/* ---- rounds -------------------------------------------------------------- */

int gossip_sim_step(gossip_sim *s, float **x, uint64_t iter, char *err, size_t errlen)
{
    for (int i = 0; i < s->n; i++)
        if (gossip_node_prepare(s->nodes[i], x[i], iter, err, errlen) < 0)
            return -1;
    for (int i = 0; i < s->n; i++) {
        int to;
        const uint8_t *msg;
        size_t len;
        for (int k = 0; (len = gossip_node_outbox(s->nodes[i], k, &to, &msg)) > 0; k++) {
            if (s_jammed(s, i, to))
                continue;
            if (s->dl.kind != GOSSIP_DELAY_NONE)
                s_enqueue(s, i, to, msg, len, iter);
            else if (gossip_node_receive(s->nodes[to], msg, len, err, errlen) < 0)
                return -1;
        }
    }
    if (s->nq && s_deliver_due(s, iter, err, errlen) < 0)
        return -1;
    for (int i = 0; i < s->n; i++) {
        if (!gossip_node_ready(s->nodes[i], iter))
            return nn_errf(err, errlen, "gossip_sim: node %d cannot mix iteration %llu: a message is "
                           "later than --staleness %d allows", i, (unsigned long long)iter,
                           gossip_node_config(s->nodes[i])->staleness);
        if (gossip_node_mix(s->nodes[i], x[i], iter, err, errlen) < 0)
            return -1;
    }
    return 0;
}
int gossip_sim_n(const gossip_sim *s)
{
    return s->n;
}

gossip_node *gossip_sim_node(gossip_sim *s, int rank)
{
    return rank >= 0 && rank < s->n ? s->nodes[rank] : NULL;
}

uint64_t gossip_sim_bytes_sent(const gossip_sim *s)
{
    uint64_t total = 0;
    for (int i = 0; i < s->n; i++) {
        gossip_stats st;
        gossip_node_stats(s->nodes[i], &st);
        total += st.bytes_sent;
    }
    return total;
}

void gossip_sim_absent(gossip_sim *s, int rank)
{
    if (rank < 0 || rank >= s->n)
        return;
    if (!s->absent)
        s->absent = nn_xcalloc((size_t)s->n, 1);
    s->absent[rank] = 1;
    for (int j = 0; j < s->n; j++)
        if (j != rank) { /* cut off both ways: it mixes alone, sends and gets nothing */
            gossip_node_peer_down(s->nodes[j], rank);
            gossip_node_peer_down(s->nodes[rank], j);
        }
}

/* RESYNC of `from` (choco; nothing otherwise) into `to`. */
static int s_resync(gossip_sim *s, int from, int to, char *err, size_t errlen)
{
    const uint8_t *m;
    size_t len = gossip_node_resync_msg(s->nodes[from], to, &m);
    return len && gossip_node_receive(s->nodes[to], m, len, err, errlen) < 0 ? -1 : 0;
}

/* The holder's z through STATE chunks into r's x; -1 with a message. */
static int s_transfer(gossip_sim *s, int h, int r, float **x, size_t chunk, char *err,
                      size_t errlen)
{
    gossip_node *gh = s->nodes[h];
    const nn_arena *layout = gossip_node_layout(gh);
    size_t n = layout->numel;
    uint32_t fp = gossip_node_fingerprint(gh);
    float *z = nn_xmalloc(sizeof *z * n + 1);
    gossip_buf bytes = {0}, msg = {0};
    gossip_state_rx rx;
    gossip_node_debias(gh, x[h], z);
    uint32_t crc = gossip_state_pack(z, n, &bytes);
    gossip_state_rx_init(&rx, n, fp);
    gossip_state_rx_begin(&rx, h);
    int rc = 0;
    for (size_t k = 0; rc == 0 && gossip_state_chunk_msg((uint32_t)h, gossip_node_iter(gh), fp,
                                                         &bytes, crc, chunk, k, &msg) > 0; k++)
        rc = gossip_state_rx_add(&rx, h, msg.data, msg.len, err, errlen);
    if (rc == 1)
        memcpy(x[r], rx.vals, sizeof *z * n);
    else if (rc == 0)
        nn_errf(err, errlen, "join: the state of rank %d is incomplete", h);
    gossip_state_rx_free(&rx);
    gossip_buf_free(&bytes);
    gossip_buf_free(&msg);
    free(z);
    return rc == 1 ? 0 : -1;
}

int gossip_sim_join(gossip_sim *s, int rank, float **x, uint64_t iter, size_t chunk,
                    int *holder, char *err, size_t errlen)
{
    if (rank < 0 || rank >= s->n || !s->absent || !s->absent[rank])
        return nn_errf(err, errlen, "join: rank %d is not an absent node", rank);
    const gossip_peer *pr = gossip_node_peers(s->nodes[rank]);
    int h = -1;
    for (int j = 0; j < s->n && h < 0; j++)
        if (j != rank && pr[j].is_in && !s->absent[j])
            h = j;
    if (h < 0)
        return nn_errf(err, errlen, "join: rank %d has no present in-neighbour", rank);
    if (s_transfer(s, h, rank, x, chunk, err, errlen) != 0 ||
        gossip_node_join(s->nodes[rank], x[rank], iter, err, errlen) != 0)
        return -1;
    s->absent[rank] = 0;
    for (int j = 0; j < s->n; j++) {
        if (j == rank || s->absent[j])
            continue;
        const gossip_peer *pj = gossip_node_peers(s->nodes[j]);
        if (pj[rank].is_out) { /* as the link: our copy first, then messages */
            if (s_resync(s, j, rank, err, errlen) != 0)
                return -1;
            gossip_node_peer_up(s->nodes[j], rank);
        }
        if (pj[rank].is_in) {
            if (s_resync(s, rank, j, err, errlen) != 0)
                return -1;
            gossip_node_peer_up(s->nodes[rank], j);
        }
    }
    *holder = h;
    return 0;
}
