/* gossip_sim — see gossip_sim.h. */
#include "gossip/gossip_sim.h"

#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_state.h"

struct gossip_sim {
    int           n;
    gossip_node **nodes;
    uint8_t      *absent;   /* NULL, or n flags (gossip_sim_absent) */
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
    s->nodes = nn_xcalloc((size_t)t->n, sizeof *s->nodes);
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
    free(s->nodes);
    free(s->absent);
    free(s);
    *self_p = NULL;
}

int gossip_sim_step(gossip_sim *s, float **x, uint64_t iter, char *err, size_t errlen)
{
    for (int i = 0; i < s->n; i++)
        if (gossip_node_prepare(s->nodes[i], x[i], iter, err, errlen) < 0)
            return -1;
    for (int i = 0; i < s->n; i++) {
        int to;
        const uint8_t *msg;
        size_t len;
        for (int k = 0; (len = gossip_node_outbox(s->nodes[i], k, &to, &msg)) > 0; k++)
            if (gossip_node_receive(s->nodes[to], msg, len, err, errlen) < 0)
                return -1;
    }
    for (int i = 0; i < s->n; i++)
        if (gossip_node_mix(s->nodes[i], x[i], iter, err, errlen) < 0)
            return -1;
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
    size_t len = gossip_node_resync_msg(s->nodes[from], &m);
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
