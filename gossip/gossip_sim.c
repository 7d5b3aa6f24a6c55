/* gossip_sim — see gossip_sim.h. */
#include "gossip/gossip_sim.h"

#include <stdlib.h>

struct gossip_sim {
    int           n;
    gossip_node **nodes;
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
