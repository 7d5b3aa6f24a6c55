/* gossip_link — the transport layer's object: the link of one node to its
 * neighbours (see gossip_link.h for the protocol and the layer's drawing).
 *
 * Owns:    the shared section of struct gossip_link (gossip_link_int.h):
 *          identity, configuration, neighbour list, fatal error, counters,
 *          the control-message encoder.
 * Exposes: gossip_link_new/destroy/config_default/stats_get/cut_off/
 *          set_running; to the other modules: logging, the fatal error,
 *          sending a control message (gossip_link_ctl).
 * Callers: node/node_cmd_node.c, tests; every transport module.
 *
 * Dimension legend: n nodes; a "neighbour" is an in- or out-neighbour of
 * this node in any matrix of the schedule (both for undirected graphs).
 */
#include "gossip/gossip_link_int.h"
#include "gossip/gossip_defaults.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small helpers --------------------------------------------------------- */

void gossip_link_log(gossip_link *l, const char *fmt, ...)
{
    if (!l->cfg.log)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->cfg.log(l->cfg.log_arg, msg);
}

int gossip_link_fatal(gossip_link *l, const char *fmt, ...)
{
    if (l->fatal)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->fatal_msg, sizeof l->fatal_msg, fmt, ap);
    va_end(ap);
    l->fatal = 1;
    return -1;
}

const char *gossip_link_id(const gossip_link *l, int j)
{
    return l->t->nodes[j].id;
}

int gossip_link_signals(const gossip_link *l)
{
    return l->cfg.signals ? (int)*l->cfg.signals : 0;
}

/* Control message `kind` carrying `iter` to j: over our DEALER (j is an
 * out-neighbour) or as a reply over our ROUTER (j is an in-neighbour).
 * Never blocks; a peer that is not connected just misses it. */
void gossip_link_ctl(gossip_link *l, int kind, int j, int router, uint64_t iter)
{
    (void)gossip_link_ctl_flags(l, kind, j, router, iter, 0);
}

int gossip_link_ctl_flags(gossip_link *l, int kind, int j, int router, uint64_t iter,
                          uint16_t flags)
{
    char err[512];
    if (!l->net || (router && !gossip_proof_router_trusted(l, j)))
        return -1; /* a harness's link (gossip_link_handle), or not j's connection yet */
    if (kind == GOSSIP_MSG_HELLO || kind == GOSSIP_MSG_HELLO_ACK)
        gossip_msg_encode_hello((uint8_t)kind, (uint32_t)l->rank, iter, l->fp, l->nonce,
                                &l->ctl);
    else
        gossip_msg_encode_control((uint8_t)kind, (uint32_t)l->rank, iter, l->fp, &l->ctl);
    l->ctl.data[GOSSIP_HDR_FLAGS_AT] = (uint8_t)flags; /* encoded with flags 0 */
    l->ctl.data[GOSSIP_HDR_FLAGS_AT + 1] = (uint8_t)(flags >> 8);
    int rc = router ? gossip_net_reply(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err)
                    : gossip_net_try_send(l->net, j, l->ctl.data, l->ctl.len, err, sizeof err);
    int unsent = router ? rc < 0 : rc <= 0; /* a reply: 0 sent; over the DEALER: 1 */
    if (!unsent) {
        if (router)
            l->p[j].sent_router = nn_now();
        else
            l->p[j].sent_dealer = nn_now();
    }
    if (unsent && kind == GOSSIP_MSG_RESYNC_REQ && l->st.ctl_unsent++ < 5)
        gossip_link_log(l, "RESYNC_REQ to %s (rank %d) not sent: %s", gossip_link_id(l, j), j,
              rc < 0 ? err : "our connection to it takes nothing now");
    return unsent ? -1 : 0;
}

/* ---- public ------------------------------------------------------------------------- */

/* A random 64-bit instance nonce, never 0: /dev/urandom, or (failing that)
 * the clock, the pid and the rank mixed. */
static uint64_t s_new_nonce(int rank)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1)
            v = 0;
        fclose(f);
    }
    if (!v) {
        nn_rng r;
        nn_rng_seed(&r, (uint64_t)(nn_now() * 1e9) ^ ((uint64_t)getpid() << 32) ^
                            (uint64_t)rank);
        v = nn_rng_next(&r);
    }
    return v ? v : 1;
}

void gossip_link_config_default(gossip_link_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->timeout = GOSSIP_DEF_TIMEOUT_S;
    cfg->peer_floor = GOSSIP_DEF_PEER_FLOOR_S;
    cfg->peer_factor = GOSSIP_DEF_PEER_FACTOR;
    cfg->ping_every = GOSSIP_DEF_PING_EVERY_S;
    cfg->seed = GOSSIP_DEF_LINK_SEED;
    cfg->min_nodes = GOSSIP_DEF_MIN_NODES;
    cfg->start_window = GOSSIP_DEF_START_WINDOW_S;
    cfg->fresh_wait = GOSSIP_DEF_FRESH_WAIT;
    cfg->late_after = GOSSIP_DEF_LATE_AFTER;
    cfg->defer_updates = GOSSIP_DEF_DEFER_UPDATES;
}

gossip_link *gossip_link_new(gossip_net *net, gossip_node *g, const topo *t, int rank,
                             const gossip_link_config *cfg)
{
    gossip_link *l = nn_xcalloc(1, sizeof *l);
    l->cfg = *cfg;
    if (l->cfg.peer_floor > l->cfg.timeout)
        l->cfg.peer_floor = l->cfg.timeout;
    l->net = net;
    l->g = g;
    l->t = t;
    l->layout = gossip_node_layout(g);
    l->rank = rank;
    l->n = t->n;
    l->choco = gossip_node_config(g)->algo == GOSSIP_CHOCO;
    l->stale = (uint64_t)gossip_node_config(g)->staleness;
    l->fp = gossip_node_fingerprint(g);
    l->p = nn_xcalloc((size_t)l->n, sizeof *l->p);
    l->nb = nn_xcalloc((size_t)l->n, sizeof *l->nb);
    const gossip_peer *roles = gossip_node_peers(g);
    for (int j = 0; j < l->n; j++) {
        l->p[j].is_in = roles[j].is_in;
        l->p[j].is_out = roles[j].is_out;
    }
    for (int j = 0; j < l->n; j++)
        if (j != rank && (l->p[j].is_in || l->p[j].is_out)) {
            l->nb[l->nnb++] = j;
            l->p[j].fresh_score = 1.0;
        }
    l->lag = (uint64_t)l->n + 2 * GOSSIP_WINDOW;
    gossip_recv_init(l);
    gossip_round_init(l);
    for (int j = 0; j < l->n; j++)
        gossip_flight_reset(l, j);
    l->nonce = s_new_nonce(rank);
    l->proof.prove = net && !t->security_curve;
    for (int a = 0; a < l->nnb; a++)
        l->p[l->nb[a]].token = s_new_nonce(rank); /* secret: only our DEALER carries it */
    return l;
}

void gossip_link_destroy(gossip_link **self_p)
{
    if (!self_p || !*self_p)
        return;
    gossip_link *l = *self_p;
    gossip_recv_free(l);
    gossip_round_free(l);
    gossip_join_free(l);
    free(l->nb);
    free(l->p);
    gossip_buf_free(&l->ctl);
    free(l);
    *self_p = NULL;
}

void gossip_link_set_running(gossip_link *l, int running)
{
    l->running = running != 0;
}

void gossip_link_stats_get(const gossip_link *l, gossip_link_stats *out)
{
    *out = l->st;
    uint64_t down = 0;
    for (int a = 0; a < l->nnb; a++)
        down += l->p[l->nb[a]].down;
    out->peers_down = down;
    out->neighbours = (uint64_t)l->nnb;
    const double *w = l->round.waited;
    out->wait_flow_ms = (uint64_t)(1e3 * l->round.waited_flow);
    out->wait_missing_ms = (uint64_t)(1e3 * w[GOSSIP_UNREADY_MISSING]);
    out->wait_held_ms = (uint64_t)(1e3 * w[GOSSIP_UNREADY_HELD]);
    out->wait_gap_ms = (uint64_t)(1e3 * w[GOSSIP_UNREADY_GAP]);
    out->wait_final_ms = (uint64_t)(1e3 * w[GOSSIP_UNREADY_FINAL]);
    out->wait_fresh_ms = (uint64_t)(1e3 * l->round.waited_fresh);
}

gossip_link_peer_view gossip_link_peer_get(const gossip_link *l, int j)
{
    gossip_link_peer_view v = {0, 0.0};
    if (l && j >= 0 && j < l->n) {
        v.down = l->p[j].down;
        v.wait_s = l->p[j].wait_s;
    }
    return v;
}

int gossip_link_cut_off(const gossip_link_stats *st)
{
    return st->neighbours > 0 && st->isolated_rounds > 0;
}
