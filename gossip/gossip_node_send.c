/* gossip_node_send — the outgoing side of gossip_node (gossip_node.h):
 * compress and encode the message of an iteration, update the own public
 * copy xhat_i or the error e_i from exactly the decoded bytes, choose the
 * destinations, count the bytes; the RESYNC message; the momentum mask of
 * the last message (dgc).
 *
 * Owns:    nothing beyond struct gossip_node (gossip_node_int.h).
 * Exposes: gossip_node_prepare, _defer_update, _ndest, _outbox (with the
 *          kept flag where shares to that destination were kept; an edge
 *          of its own gets its own message, gossip_node_edge.c),
 *          _resync_msg, _masks_momentum, _mask_sent; to gossip_node_edge,
 *          gossip_node_encode and _empty_blocks (gossip_node_int.h).
 * Callers: the drivers of gossip_node (gossip_sim, gossip_link, node/).
 */
#include "gossip/gossip_node_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* zlib level of +deflate: 6 (zlib's default); see docs/gossip.md. */
#define S_DEFLATE_LEVEL 6

static void s_scale(float *v, size_t d, float a)
{
    for (size_t k = 0; k < d; k++)
        v[k] = a * v[k];
}

/* sent = 1 at every coordinate p carries, 0 elsewhere. */
static void s_mark_sent(const gossip_payload *p, const nn_arena *layout, float *sent)
{
    memset(sent, 0, layout->numel * sizeof *sent);
    for (size_t b = 0; b < p->nblocks; b++) {
        const gossip_block *blk = &p->blocks[b];
        float *s = sent + layout->views[b].offset;
        for (size_t i = 0; i < blk->k; i++)
            s[blk->idx ? blk->idx[i] : i] = 1.0f;
    }
}

void gossip_node_set_step(gossip_node *g, double seconds)
{
    double us = seconds * 1e6;
    g->step_us = !(us > 0) ? 0 : us >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)(us + 0.5);
}

int gossip_node_defer_update(gossip_node *g)
{
    if (g->cfg.algo != GOSSIP_CHOCO || g->cfg.staleness <= 0 || g->prepared || g->deferred_last)
        return -1;
    g->defer = 1;
    return 0;
}

void gossip_node_empty_blocks(gossip_node *g)
{
    gossip_compressed *c = &g->comp_out;
    for (size_t b = 0; b < c->nblocks; b++)
        c->blocks[b] = (gossip_cblock){ GOSSIP_BLK_SPARSE_F32, (uint32_t)g->layout->views[b].numel,
                                        0, c->idx, c->f32, NULL, NULL };
}

/* The update of this iteration into g->comp_out (g->work holds what was
 * compressed), and its header flags. */
static int s_compress(gossip_node *g, const float *x, uint64_t iter, uint16_t *flags, char *err,
                      size_t errlen)
{
    *flags = (uint16_t)(g->cfg.push_sum ? GOSSIP_FLAG_PUSH_SUM : 0);
    if (g->defer) {
        gossip_node_empty_blocks(g);
        *flags |= GOSSIP_FLAG_DEFERRED;
        return 0;
    }
    size_t d = g->layout->numel;
    const float *v = x;
    if (g->cfg.algo == GOSSIP_CHOCO) {
        for (size_t k = 0; k < d; k++)
            g->work[k] = x[k] - g->xhat_self[k];
        v = g->work;
    } else if (g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        for (size_t k = 0; k < d; k++)
            g->work[k] = x[k] + g->ebuf[k];
        v = g->work;
    }
    gossip_compressor cur;
    s_comp_at(g, iter, &cur);
    return gossip_compress(&cur, g->layout, v, &g->rng, &g->comp_out, err, errlen);
}

size_t gossip_node_encode(gossip_node *g, uint16_t flags, uint64_t iter, gossip_buf *out)
{
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_GOSSIP, flags, (uint32_t)g->rank, iter,
                        g->cfg.push_sum ? g->psi : 1.0, g->fp, 0, 0, g->step_us };
    size_t plain_len = gossip_msg_encode(&h, g->comp_out.blocks, g->comp_out.nblocks, out);
    if (g->comp.deflate)
        gossip_msg_deflate(out, &g->zbuf, S_DEFLATE_LEVEL);
    return plain_len;
}

/* The destinations of this iteration's message into g->dest. */
static void s_destinations(gossip_node *g, uint64_t iter)
{
    g->ndest = 0;
    memset(g->keep_now, 0, (size_t)g->n);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        for (int a = 0; a < g->nout_union; a++)
            if (!g->peer[g->out_union[a]].out_down)
                g->dest[g->ndest++] = g->out_union[a];
        return;
    }
    const double *w = s_w(g, iter);
    for (int j = 0; j < g->n; j++)
        if (j != g->rank && !g->peer[j].out_down && w[(size_t)j * g->n + g->rank] > 0.0)
            g->dest[g->ndest++] = j;
}

/* The shared message of this iteration into g->out, and what it moves
 * (xhat_i, the error e_i, the sent mask); its plain length, or -1. */
static long s_shared_message(gossip_node *g, const float *x, uint64_t iter, char *err,
                             size_t errlen)
{
    size_t d = g->layout->numel;
    if (g->nedges && !gossip_node_edge_shared_dest(g))
        g->defer = 1; /* every edge its own: xhat_i waits (gossip_node_edge.c) */
    uint16_t flags;
    int rc = s_compress(g, x, iter, &flags, err, errlen);
    g->deferred_last = g->defer;
    g->defer = 0;
    if (rc < 0)
        return -1;
    size_t plain_len = gossip_node_encode(g, flags, iter, &g->out);
    /* Decode our own bytes: the values we apply are exactly what receivers
     * decode (bit-identical public copies). */
    char derr[256];
    if (gossip_msg_decode(g->out.data, g->out.len, g->layout, NULL, &g->self_pl, derr, sizeof derr) < 0)
        return nn_errf(err, errlen, "gossip: own message does not decode: %s", derr);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        gossip_payload_add(&g->self_pl, g->layout, g->xhat_self);
    } else if (g->cfg.algo == GOSSIP_DEEPSQUEEZE) {
        memcpy(g->ebuf, g->work, d * sizeof(float));
        gossip_payload_sub(&g->self_pl, g->layout, g->ebuf);
        if (g->comp.rdecay < 1.0) /* eSGD residual momentum: e = B*(v - c) */
            s_scale(g->ebuf, d, (float)g->comp.rdecay);
    }
    if (g->sent)
        s_mark_sent(&g->self_pl, g->layout, g->sent);
    return (long)plain_len;
}

int gossip_node_prepare(gossip_node *g, const float *x, uint64_t iter, char *err, size_t errlen)
{
    double t0 = nn_now();
    if (iter != g->iter || g->prepared)
        return nn_errf(err, errlen, "gossip: prepare(%llu) out of order (node %d is at iteration %llu, %s)",
                       (unsigned long long)iter, g->rank, (unsigned long long)g->iter,
                       g->prepared ? "already prepared" : "not prepared");
    s_destinations(g, iter);
    long plain_len = s_shared_message(g, x, iter, err, errlen);
    if (plain_len < 0 || gossip_node_edge_prepare(g, x, iter, err, errlen) < 0) {
        g->ndest = 0;
        return -1;
    }
    int nshared = g->ndest - g->nedges_out;
    g->cur_sent = (uint64_t)g->out.len * (uint64_t)nshared + g->edge_bytes;
    g->stats.bytes_sent += g->cur_sent;
    g->stats.bytes_sent_plain += (uint64_t)plain_len * (uint64_t)nshared + g->edge_plain;
    g->stats.msgs_sent += (uint64_t)g->ndest;
    g->prepared = 1;
    g->stats.prepare_s = nn_now() - t0;
    return 0;
}

int gossip_node_ndest(const gossip_node *g)
{
    return g->prepared ? g->ndest : 0;
}

size_t gossip_node_outbox(gossip_node *g, int k, int *to_rank, const uint8_t **msg)
{
    if (!g->prepared || k < 0 || k >= g->ndest)
        return 0;
    int to = g->dest[k];
    if (to_rank)
        *to_rank = to;
    if (gossip_node_edge_is_own(g, to)) {
        if (msg)
            *msg = g->out_to[to].data;
        return g->out_to[to].len;
    }
    if (msg)
        *msg = g->out.data;
    if (g->kept_from[to] < g->iter && msg) { /* announce the kept shares */
        gossip_buf_set(&g->out_kept, g->out.data, g->out.len);
        g->out_kept.data[GOSSIP_HDR_FLAGS_AT] |= (uint8_t)GOSSIP_FLAG_KEPT;
        *msg = g->out_kept.data;
    }
    return g->out.len;
}

size_t gossip_node_resync_msg(gossip_node *g, int to, const uint8_t **msg)
{
    if (g->cfg.algo != GOSSIP_CHOCO)
        return 0;
    gossip_node_edge_share(g, to); /* its copy of us becomes xhat_i */
    const nn_arena *L = g->layout;
    gossip_cblock *blocks = nn_xcalloc(L->nviews, sizeof *blocks);
    for (size_t v = 0; v < L->nviews; v++)
        blocks[v] = (gossip_cblock){ GOSSIP_BLK_DENSE_F32, (uint32_t)L->views[v].numel,
                                     (uint32_t)L->views[v].numel, NULL,
                                     g->xhat_self + L->views[v].offset, NULL, NULL };
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_RESYNC,
                        (uint16_t)(g->cfg.push_sum ? GOSSIP_FLAG_PUSH_SUM : 0), (uint32_t)g->rank,
                        g->iter + (uint64_t)g->prepared, g->cfg.push_sum ? g->psi : 1.0, g->fp, 0, 0, 0 };
    gossip_msg_encode(&h, blocks, L->nviews, &g->resync);
    free(blocks);
    g->stats.resyncs_sent++;
    *msg = g->resync.data;
    return g->resync.len;
}

int gossip_node_masks_momentum(const gossip_node *g)
{
    return g->sent != NULL;
}

size_t gossip_node_mask_sent(const gossip_node *g, float *buf)
{
    if (!g->sent)
        return 0;
    size_t m = 0, d = g->layout->numel;
    for (size_t k = 0; k < d; k++)
        if (g->sent[k] != 0.0f) {
            buf[k] = 0.0f;
            m++;
        }
    return m;
}
