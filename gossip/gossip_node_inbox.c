/* gossip_node_inbox — the receiving side of gossip_node (gossip_node.h):
 * admission of GOSSIP and RESYNC messages, its one place on every path
 * (gossip_node_admit by the header: replay and duplicate against the
 * sender's sequence, the window; gossip_node_receive_decoded with the
 * payload: finiteness, sender, block shapes, the slot), the stash of
 * in-neighbours' decoded messages until they are mixed, choco copies
 * caught up in order, readiness of an iteration (synchronous and with
 * bounded staleness), and membership (peers down, up, restarted, proved
 * to have sent).
 *
 * Owns:    nothing beyond struct gossip_node (gossip_node_int.h).
 * Exposes: gossip_node_receive, _admit, _hold, _receive_decoded, _window,
 *          _ready, _fresh_from, _peer_down, _peer_up, _peer_reset,
 *          _peer_restart, _peer_sent, _peers, _peer_state.
 * Callers: the drivers of gossip_node (gossip_sim, gossip_link, node/).
 */
#include "gossip/gossip_node_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_clear_slots(gossip_node *g, int k)
{
    for (int w = 0; w < GOSSIP_SLOTS; w++)
        g->slots[(size_t)k * GOSSIP_SLOTS + w].have = 0;
}

/* Choco: an update of in-neighbour k that the copy still needs is proved
 * lost (its iteration lies below sent_thru, but it is neither applied nor
 * stored).  The peer is alive (it sent something later), so its RESYNC is
 * one round trip away: the copy waits for it (copy_gap). */
static void s_check_gap(gossip_node *g, int k)
{
    gossip_peer *p = s_in(g, k);
    if (g->cfg.algo != GOSSIP_CHOCO || p->copy_bad || p->copy_gap || p->in_down)
        return;
    uint64_t end = p->sent_thru;
    if (end > g->iter + GOSSIP_WINDOW)
        end = g->iter + GOSSIP_WINDOW;
    for (uint64_t m = p->copy_thru; m < end; m++)
        if ((m < g->iter && !g->cfg.staleness) || !s_present(g, k, m)) {
            p->copy_gap = 1;
            s_clear_slots(g, k);
            return;
        }
}

/* ---- receiving ------------------------------------------------------------ */

/* A refusal: its message in err, its code returned. */
#define S_REFUSE(code, ...) (nn_errf(err, errlen, __VA_ARGS__), (code))

/* RESYNC (choco): the sender's whole public copy xhat_j, holding its updates
 * of every iteration below h->iter, and its psi.  Replaces our copy and
 * re-admits the sender. */
static gossip_recv_code s_receive_resync(gossip_node *g, const gossip_header *h, int k,
                                         char *err, size_t errlen)
{
    gossip_peer *p = s_in(g, k);
    unsigned s = h->sender;
    if (g->cfg.algo != GOSSIP_CHOCO)
        return S_REFUSE(GOSSIP_RECV_MISMATCH, "gossip: node %d: RESYNC from rank %u, but %s keeps no public copies",
                       g->rank, s, gossip_algo_name(g->cfg.algo));
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++)
        if (g->scratch_pl.blocks[b].type != GOSSIP_BLK_DENSE_F32)
            return S_REFUSE(GOSSIP_RECV_MISMATCH, "gossip: node %d: RESYNC from rank %u: tensor '%s' is block type %u, not dense f32",
                           g->rank, s, g->layout->views[b].name, g->scratch_pl.blocks[b].type);
    if (!p->copy_bad && !p->copy_gap && !p->in_down && h->iter < p->copy_thru)
        return S_REFUSE(GOSSIP_RECV_STALE, "gossip: node %d: stale RESYNC from rank %u for iteration %llu (our copy is at %llu)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)p->copy_thru);
    const nn_arena *L = g->layout;
    float *copy = g->xhat_in[k];
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++)
        memcpy(copy + L->views[b].offset, g->scratch_pl.blocks[b].val, L->views[b].numel * sizeof(float));
    p->copy_thru = h->iter;
    g->stale[k].used_from = g->iter; /* no mix before this one used the copy */
    p->copy_bad = 0;
    p->copy_gap = 0;
    p->in_down = 0;
    p->in_from = 0;
    p->psi_last = h->psi;
    if (p->sent_thru < h->iter)
        p->sent_thru = h->iter;
    s_clear_slots(g, k); /* what they held is inside the copy (FIFO) */
    g->stats.resyncs_recv++;
    return GOSSIP_RECV_OK;
}

/* The decoded blocks (g->scratch_pl) against this run's compressor at
 * h->iter: type and count of values.  0, or -1 with a message. */
static int s_check_shapes(const gossip_node *g, const gossip_header *h, char *err, size_t errlen)
{
    if (h->flags & GOSSIP_FLAG_DEFERRED) { /* no update: choco only, no value anywhere */
        if (g->cfg.algo != GOSSIP_CHOCO)
            return nn_errf(err, errlen, "gossip: node %d: rank %u sent a deferred update for iteration %llu, which %s does not have",
                           g->rank, h->sender, (unsigned long long)h->iter, gossip_algo_name(g->cfg.algo));
        for (size_t b = 0; b < g->scratch_pl.nblocks; b++) {
            const gossip_block *blk = &g->scratch_pl.blocks[b];
            if (blk->type != GOSSIP_BLK_SPARSE_F32 || blk->k != 0)
                return nn_errf(err, errlen, "gossip: node %d: rank %u sent a deferred update with block type %u and %zu values for tensor '%s' (must be empty)",
                               g->rank, h->sender, blk->type, blk->k, g->layout->views[b].name);
        }
        return 0;
    }
    gossip_compressor cur;
    s_comp_at(g, h->iter, &cur);
    for (size_t b = 0; b < g->scratch_pl.nblocks; b++) {
        const gossip_block *blk = &g->scratch_pl.blocks[b];
        size_t lo, hi;
        gossip_compressor_k_range(&cur, blk->numel, &lo, &hi);
        if (blk->type != g->blk_type || blk->k < lo || blk->k > hi)
            return nn_errf(err, errlen, "gossip: node %d: rank %u sent block type %u with %zu values for tensor '%s'; compressor %s gives type %u with %zu..%zu at iteration %llu",
                           g->rank, h->sender, blk->type, blk->k, g->layout->views[b].name, g->comp.spec, g->blk_type,
                           lo, hi, (unsigned long long)h->iter);
    }
    return 0;
}

int gossip_node_receive(gossip_node *g, const uint8_t *msg, size_t len, char *err, size_t errlen)
{
    gossip_header h;
    char derr[384];
    if (gossip_msg_decode_header(msg, len, g->layout, &h, derr, sizeof derr) < 0)
        return nn_errf(err, errlen, "gossip: node %d: rejected message (%zu bytes): %s", g->rank, len, derr);
    gossip_recv_code c = gossip_node_admit(g, &h, err, errlen);
    if (c == GOSSIP_RECV_OK)
        c = gossip_node_receive_decoded(g, &h, msg, len, err, errlen);
    return gossip_recv_refused(c) ? -1 : (int)c;
}

/* In-neighbour index k, declared down, sent a message of iteration iter
 * from our past: push-sum with S > 0 (folding) takes it back as a late
 * neighbour rather than ignore it for the rest of the run, when the
 * message is within the late reach or jumps more than the reach past
 * what the neighbour sent before (it re-joined).  On a directed ring a
 * node frozen long enough to be declared down re-joins at its
 * in-neighbour's iteration, which its
 * successor, having trained alone meanwhile, is ahead of: taking only
 * messages of its own iteration or later, it never took the node back
 * (both ended cut off), and within the reach only, in one of three ring8
 * freeze drills (it had run further ahead).  What a frozen node had queued
 * comes first and continues what it sent before: beyond the reach that is
 * a stale model, taken back it cost 1.5 points in the drill.  As a late
 * neighbour it is mixed as its messages come; beyond the reach it is
 * waited for (gossip_node_unready) until it is within it, and the link
 * waits for it again once it keeps pace (gossip_node_peer_wait_again).
 * A jump is one of more than the reach: a shorter gap is a kept share or
 * a lost message (a node restarted from its checkpoint skipped one and
 * was taken back 1000 iterations behind).  A restarted instance counts
 * from what the old one sent (gossip_node_peer_restart): its
 * checkpoint's messages are no jump. */
static int s_back_late(const gossip_node *g, int k, uint64_t iter)
{
    const gossip_peer *p = s_in(g, k);
    if (g->cfg.algo != GOSSIP_DPSGD || !g->cfg.push_sum || !g->cfg.staleness || !p->in_down ||
        iter >= g->iter)
        return 0;
    const uint64_t next = p->down_next > p->got ? p->down_next : p->got;
    const uint64_t reach = gossip_node_late_reach(g);
    return iter + reach > g->iter || iter > next + reach;
}

/* A message of iteration iter from in-neighbour index k, declared down:
 * 1 when there is nothing to use in it yet (choco: its RESYNC will bring
 * it back; dpsgd/deepsqueeze: it is from our past), noted as what it sent
 * since; with push-sum, one from our past that s_back_late takes brings it
 * back as a late neighbour first. */
static int s_down_ignores(gossip_node *g, int k, uint64_t iter)
{
    gossip_peer *p = s_in(g, k);
    if (p->in_down && iter < g->iter && s_back_late(g, k, iter)) {
        p->down_next = 0;
        p->in_down = 0;
        p->late = 1;
        p->rewait = 0;
        p->in_from = iter;
        if (g->stale[k].acc_thru < iter)
            g->stale[k].acc_thru = iter;
        g->stats.late_marks++;
    }
    if (!p->in_down || (g->cfg.algo != GOSSIP_CHOCO && iter >= g->iter))
        return 0;
    if (p->down_next <= iter)
        p->down_next = iter + 1;
    return 1;
}

gossip_window_pos gossip_node_window(const gossip_node *g, int sender, uint64_t iter)
{
    /* push-sum folds a message in as it comes (gossip_node_fold): it
     * needs its slot only for a moment, so it may be as far ahead as the
     * link's flow control lets an honest sender run (n + 2 windows ahead
     * of what we reported, reported up to a window late) */
    const int folds = g->cfg.algo == GOSSIP_DPSGD && g->cfg.staleness > 0;
    const uint64_t ahead = folds ? (uint64_t)g->n + 3 * GOSSIP_WINDOW : GOSSIP_WINDOW;
    if (iter >= g->iter && iter - g->iter >= ahead)
        return GOSSIP_WIN_AHEAD;
    const int k = sender >= 0 && sender < g->n ? g->peer[sender].in_pos : -1;
    const int choco = g->cfg.algo == GOSSIP_CHOCO;
    const uint64_t used = k < 0 ? 0 : choco ? s_in(g, k)->copy_thru : g->stale[k].acc_thru;
    if (k >= 0 && s_back_late(g, k, iter))
        return GOSSIP_WIN_IN;
    if (k >= 0 && s_in(g, k)->late) {
        if (iter < used) /* a late neighbour's: of use until mixed */
            return GOSSIP_WIN_LATE;
    } else if (iter < g->iter && !choco && iter + (uint64_t)g->cfg.staleness < g->iter) {
        return GOSSIP_WIN_LATE;
    }
    if (k >= 0 && iter >= used) { /* its slot still holds an older one (a late burst) */
        const s_slot *slot = &g->slots[(size_t)k * GOSSIP_SLOTS + iter % GOSSIP_SLOTS];
        if (slot->have && slot->iter != iter)
            return GOSSIP_WIN_AHEAD;
    }
    return GOSSIP_WIN_IN;
}

/* The one admission of a GOSSIP by its header (see gossip_node.h): the
 * sender's sequence (got: FIFO, so an iteration below one it delivered,
 * held or let go late is a replay), then the window. */
gossip_recv_code gossip_node_admit(gossip_node *g, const gossip_header *h, char *err,
                                   size_t errlen)
{
    unsigned s = h->sender;
    if (h->kind != GOSSIP_MSG_GOSSIP)
        return GOSSIP_RECV_OK; /* RESYNC replaces the copy: its own rule */
    if (s >= (unsigned)g->n || s == (unsigned)g->rank)
        return S_REFUSE(GOSSIP_RECV_NOT_NEIGHBOUR, "gossip: node %d: rank %u is not an in-neighbour", g->rank, s);
    gossip_peer *p = &g->peer[s];
    if (h->iter < p->got)
        return S_REFUSE(GOSSIP_RECV_DUPLICATE, "gossip: node %d: replayed or duplicate message from rank %u for iteration %llu (it already sent %llu)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)p->got - 1);
    gossip_window_pos pos = gossip_node_window(g, (int)s, h->iter);
    if (pos == GOSSIP_WIN_LATE) {
        p->got = h->iter + 1; /* that iteration was mixed without it */
        return S_REFUSE(GOSSIP_RECV_STALE, "gossip: node %d: stale or replayed message from rank %u for iteration %llu (now at %llu)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)g->iter);
    }
    if (pos == GOSSIP_WIN_AHEAD && h->iter < g->iter)
        return S_REFUSE(GOSSIP_RECV_TOO_FAR, "gossip: node %d: message from rank %u for iteration %llu waits for its slot (now at %llu)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)g->iter);
    if (pos == GOSSIP_WIN_AHEAD)
        return S_REFUSE(GOSSIP_RECV_TOO_FAR, "gossip: node %d: message from rank %u for iteration %llu is too far ahead (now at %llu, window %d)",
                       g->rank, s, (unsigned long long)h->iter, (unsigned long long)g->iter, GOSSIP_WINDOW);
    return GOSSIP_RECV_OK;
}

/* Sender got: 1 + the last iteration it delivered (at least thru). */
static void s_got(gossip_node *g, unsigned s, uint64_t thru)
{
    if (g->peer[s].got < thru)
        g->peer[s].got = thru;
}

static gossip_recv_code s_receive(gossip_node *g, const gossip_header *hp, const uint8_t *msg,
                                  size_t len, char *err, size_t errlen)
{
    const gossip_header h = *hp;
    char derr[384];
    int drc = gossip_msg_decode_payload(msg, len, g->layout, &h, &g->scratch_pl, derr, sizeof derr);
    if (drc < 0)
        return S_REFUSE(drc == GOSSIP_DECODE_NONFINITE ? GOSSIP_RECV_NONFINITE : GOSSIP_RECV_MALFORMED,
                        "gossip: node %d: rejected message (%zu bytes): %s", g->rank, len, derr);
    unsigned s = h.sender;
    if (h.kind != GOSSIP_MSG_GOSSIP && h.kind != GOSSIP_MSG_RESYNC)
        return S_REFUSE(GOSSIP_RECV_NOT_ALGO, "gossip: node %d: kind %u message from rank %u is for the transport, not the algorithm",
                       g->rank, h.kind, s);
    if (s >= (unsigned)g->n || s == (unsigned)g->rank || g->peer[s].in_pos < 0)
        return S_REFUSE(GOSSIP_RECV_NOT_NEIGHBOUR, "gossip: node %d: rank %u is not an in-neighbour", g->rank, s);
    if (!(h.flags & GOSSIP_FLAG_PUSH_SUM) != !g->cfg.push_sum)
        return S_REFUSE(GOSSIP_RECV_MISMATCH, "gossip: node %d: rank %u has push-sum %s, we have it %s",
                       g->rank, s, (h.flags & GOSSIP_FLAG_PUSH_SUM) ? "on" : "off", g->cfg.push_sum ? "on" : "off");
    int k = g->peer[s].in_pos;
    gossip_peer *p = s_in(g, k);
    if (h.kind == GOSSIP_MSG_RESYNC)
        return s_receive_resync(g, &h, k, err, errlen);
    if (!s_needs(g, (int)s, h.iter))
        return S_REFUSE(GOSSIP_RECV_NOT_NEIGHBOUR, "gossip: node %d: rank %u is not an in-neighbour at iteration %llu",
                       g->rank, s, (unsigned long long)h.iter);
    if (s_check_shapes(g, &h, err, errlen) != 0)
        return GOSSIP_RECV_MISMATCH;
    int choco = g->cfg.algo == GOSSIP_CHOCO;
    if (s_down_ignores(g, k, h.iter))
        return GOSSIP_RECV_IGNORED;
    if (choco && (p->copy_bad || p->copy_gap))
        return GOSSIP_RECV_IGNORED; /* the coming RESYNC holds it */
    s_stale *st = &g->stale[k];
    uint64_t S = (uint64_t)g->cfg.staleness;
    /* bounded staleness: a late message not yet mixed waits for the next mix */
    if (p->late && h.iter + S >= g->iter)
        p->late = p->rewait = 0; /* caught up: waited for again */
    int late_ok = S > 0 && (h.iter + S >= g->iter || p->late) &&
                  h.iter >= (choco ? p->copy_thru : st->acc_thru);
    if (h.iter < g->iter && !late_ok) {
        /* Only choco catches up a copy this way (after a RESYNC from the
         * past): the next update in order is applied to the copy alone. */
        if (!choco || h.iter < p->copy_thru)
            return S_REFUSE(GOSSIP_RECV_STALE, "gossip: node %d: stale or replayed message from rank %u for iteration %llu (now at %llu)",
                           g->rank, s, (unsigned long long)h.iter, (unsigned long long)g->iter);
        if (p->sent_thru < h.iter + 1)
            p->sent_thru = h.iter + 1;
        if (h.iter > p->copy_thru) {
            s_check_gap(g, k);
            return GOSSIP_RECV_IGNORED;
        }
        gossip_payload_add(&g->scratch_pl, g->layout, g->xhat_in[k]);
        p->copy_thru = h.iter + 1;
        p->psi_last = h.psi;
        g->stats.bytes_recv += len;
        g->stats.msgs_recv++;
        return GOSSIP_RECV_OK;
    }
    s_slot *slot = s_slot_of(g, k, h.iter);
    if (slot->have) /* never the same iteration: gossip_node_admit refused that */
        return S_REFUSE(GOSSIP_RECV_NO_ROOM, "gossip: node %d: no room for the message from rank %u for iteration %llu "
                       "(iteration %llu not mixed yet)", g->rank, s, (unsigned long long)h.iter,
                       (unsigned long long)slot->iter);
    if (p->in_down) { /* dpsgd / deepsqueeze: back from now on */
        p->in_down = 0;
        p->in_from = h.iter;
        if (st->acc_thru < h.iter)
            st->acc_thru = h.iter;
    }
    if (st->newest < h.iter + 1)
        st->newest = h.iter + 1;
    gossip_payload_copy(&slot->pl, &g->scratch_pl);
    slot->len = len;
    slot->iter = h.iter;
    slot->psi = h.psi;
    slot->have = 1;
    if (p->sent_thru < h.iter + 1)
        p->sent_thru = h.iter + 1;
    if ((h.flags & GOSSIP_FLAG_KEPT) && st->kept_thru < h.iter)
        st->kept_thru = h.iter; /* what never came below it: kept by the sender */
    g->stats.bytes_recv += len;
    g->stats.msgs_recv++;
    s_check_gap(g, k);
    if (g->cfg.algo == GOSSIP_DPSGD && S > 0)
        gossip_node_fold(g, k); /* push-sum: slots never fill, mass never waits */
    else if (choco && p->late)
        gossip_node_absorb(g, k); /* a late backlog never fills the slots */
    return GOSSIP_RECV_OK;
}

void gossip_node_hold(gossip_node *g, int rank, uint64_t iter)
{
    assert(rank >= 0 && rank < g->n && rank != g->rank); /* the caller admitted it */
    s_got(g, (unsigned)rank, iter + 1);
}

gossip_recv_code gossip_node_receive_decoded(gossip_node *g, const gossip_header *h,
                                             const uint8_t *msg, size_t len, char *err,
                                             size_t errlen)
{
    gossip_recv_code c = s_receive(g, h, msg, len, err, errlen);
    if (!gossip_recv_refused(c)) /* a RESYNC at iter holds everything below iter */
        s_got(g, h->sender, h->kind == GOSSIP_MSG_RESYNC ? h->iter : h->iter + 1);
    return c;
}

/* ---- bounded staleness ------------------------------------------------------
 * The rules are at the top of gossip_node.h and, as formulas, in
 * docs/gossip.md "Bounded staleness". */

/* 1 + the last iteration of in-neighbour k that mixing iter could account
 * (dpsgd/deepsqueeze: mixed, lost, or not addressed to us; choco: applied to
 * the copy in order), starting from what is accounted already. */
static uint64_t s_stale_thru(const gossip_node *g, int k, uint64_t iter)
{
    const gossip_peer *p = s_in(g, k);
    int j = g->in_ranks[k];
    if (g->cfg.algo == GOSSIP_CHOCO) {
        uint64_t c = p->copy_thru;
        while (c <= iter && s_present(g, k, c))
            c++;
        return c;
    }
    uint64_t c = g->stale[k].acc_thru > p->in_from ? g->stale[k].acc_thru : p->in_from;
    while (c <= iter && (s_wij(g, c, j) <= 0.0 || s_present(g, k, c) || c < p->sent_thru))
        c++;
    return c;
}

/* Why in-neighbour k's message holds up iteration iter: nothing needed
 * arrived (missing), or it did but the transport holds it until it fits
 * (gossip_node_hold counted it in got). */
static gossip_unready s_blocked_by(const gossip_node *g, int k, uint64_t iter, uint64_t S)
{
    return g->peer[g->in_ranks[k]].got + S <= iter ? GOSSIP_UNREADY_MISSING : GOSSIP_UNREADY_HELD;
}

/* Push-sum folds a late neighbour's messages in as they arrive, so any
 * distance would do for the sums; it is waited for again n + 2 windows
 * behind, the bound flow control keeps towards an out-neighbour.  On an
 * undirected graph that bound held already; on a directed ring nothing
 * else does (a node waits only for its in-neighbour, which cannot catch up
 * with a node that no longer waits for it): on ring8 with a node stopped
 * 2/3 of the time the node after it ran 50 and more iterations ahead, and
 * the averaged model lost 4-9 points instead of about 2
 * (results/slow-node.md, "The late mark on a directed ring").
 * Choco absorbs them into the copy as they arrive (gossip_node_absorb);
 * stepping eta towards copies D iterations old is stable only with
 * eta (D + 1) <= 1 (docs/gossip.md), so D <= 1/eta - 1,
 * up to GOSSIP_LATE_MAX.  Deepsqueeze mixes them from the slots: while its
 * backlog fits them (the mixes that free them wait for nothing of it). */
uint64_t gossip_node_late_reach(const gossip_node *g)
{
    if (g->cfg.algo == GOSSIP_DPSGD)
        return (uint64_t)g->n + 2 * GOSSIP_WINDOW;
    if (g->cfg.algo == GOSSIP_DEEPSQUEEZE)
        return g->cfg.eta * GOSSIP_SLOTS > 1.0 ? 0 : GOSSIP_SLOTS - 1;
    double d = g->cfg.eta > 0 ? floor(1.0 / g->cfg.eta + 1e-9) - 1.0 : GOSSIP_LATE_MAX;
    return d >= GOSSIP_LATE_MAX ? GOSSIP_LATE_MAX : d >= GOSSIP_SLOTS - 1 ? (uint64_t)d : 0;
}

static gossip_unready s_unready_stale(const gossip_node *g, uint64_t iter, int *rank)
{
    uint64_t S = iter >= g->sync_from ? 0 : (uint64_t)g->cfg.staleness;
    const uint64_t reach = gossip_node_late_reach(g);
    for (int k = 0; k < g->nin; k++) {
        *rank = g->in_ranks[k];
        if (s_absent(g, k, iter) == S_ABSENT_DOWN)
            continue;
        if (g->cfg.algo == GOSSIP_CHOCO && s_in(g, k)->copy_gap)
            return GOSSIP_UNREADY_GAP;
        /* far behind: mixed as its messages come, within its reach */
        if (s_in(g, k)->late && !s_in(g, k)->rewait && iter < g->sync_from &&
            s_stale_thru(g, k, iter) + reach > iter)
            continue;
        if (s_stale_thru(g, k, iter) + S <= iter)
            return S == 0 && g->cfg.staleness ? GOSSIP_UNREADY_FINAL : s_blocked_by(g, k, iter, S);
    }
    *rank = -1;
    return GOSSIP_UNREADY_NONE;
}

int gossip_node_fresh_from(const gossip_node *g, int rank, uint64_t iter, uint64_t behind)
{
    if (!g->cfg.staleness || iter >= g->sync_from || rank < 0 || rank >= g->n ||
        g->peer[rank].in_pos < 0)
        return 1;
    int k = g->peer[rank].in_pos;
    if (s_absent(g, k, iter) == S_ABSENT_DOWN || s_in(g, k)->late)
        return 1;
    uint64_t thru = s_stale_thru(g, k, iter); /* level and missing only iter: iter */
    return thru > iter || thru + behind < iter;
}

int gossip_node_peer_late(gossip_node *g, int rank)
{
    if (!g->cfg.staleness || rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return 0;
    /* choco and deepsqueeze step eta towards delayed copies: stable for
     * delays up to D only with eta <= 1/(D + 1) (docs/gossip.md); not
     * late where that leaves no reach beyond the staleness window */
    if (gossip_node_late_reach(g) == 0)
        return 0;
    gossip_peer *p = s_in(g, g->peer[rank].in_pos);
    if (p->in_down || (p->late && !p->rewait))
        return 0;
    p->late = 1;
    p->rewait = 0;
    g->stats.late_marks++;
    return 1;
}

int gossip_node_peer_wait_again(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return 0;
    gossip_peer *p = s_in(g, g->peer[rank].in_pos);
    if (!p->late || p->rewait || p->in_down)
        return 0;
    p->rewait = 1;
    return 1;
}

gossip_unready gossip_node_unready(const gossip_node *g, uint64_t iter, int *rank)
{
    int dummy;
    if (!rank)
        rank = &dummy;
    *rank = -1;
    if (iter < g->iter || iter - g->iter >= GOSSIP_WINDOW)
        return GOSSIP_UNREADY_WINDOW;
    if (g->cfg.staleness)
        return s_unready_stale(g, iter, rank);
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        if (!s_needs(g, j, iter) || s_absent(g, k, iter))
            continue;
        *rank = j;
        if (g->cfg.algo == GOSSIP_CHOCO) {
            if (s_in(g, k)->copy_gap)
                return GOSSIP_UNREADY_GAP;
            if (s_in(g, k)->copy_thru > iter || (s_in(g, k)->copy_thru == iter && s_present(g, k, iter)))
                continue;
            return s_blocked_by(g, k, iter, 0);
        }
        if (!s_present(g, k, iter))
            return s_blocked_by(g, k, iter, 0);
    }
    *rank = -1;
    return GOSSIP_UNREADY_NONE;
}

int gossip_node_ready(const gossip_node *g, uint64_t iter)
{
    return gossip_node_unready(g, iter, NULL) == GOSSIP_UNREADY_NONE;
}

/* ---- membership (see the header) ----------------------------------------- */

void gossip_node_peer_down(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || rank == g->rank)
        return;
    if (g->peer[rank].in_pos >= 0) {
        int k = g->peer[rank].in_pos;
        s_in(g, k)->in_down = 1;
        s_in(g, k)->down_next = 0;
        /* push-sum with S > 0 mixes what it holds (their mass left the
         * sender; s_mix_stale_ps); the others drop it */
        if (!g->cfg.push_sum || !g->cfg.staleness || g->cfg.algo == GOSSIP_CHOCO)
            s_clear_slots(g, k);
    }
    g->peer[rank].out_down = 1;
}

void gossip_node_peer_up(gossip_node *g, int rank)
{
    if (rank >= 0 && rank < g->n)
        g->peer[rank].out_down = 0;
}

void gossip_node_peer_reset(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return;
    int k = g->peer[rank].in_pos;
    gossip_peer *p = s_in(g, k);
    if (g->cfg.algo == GOSSIP_CHOCO) {
        p->copy_bad = 1;
        p->copy_gap = 0;
    }
    p->sent_thru = 0;
    p->late = p->rewait = 0;
    s_clear_slots(g, k);
}

void gossip_node_peer_restart(gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return;
    gossip_node_peer_reset(g, rank);
    /* A new instance: its sequence starts again.  What the old one sent
     * still tells a re-join from a restart (s_back_late): a node restarted
     * from its checkpoint first sends from there, behind what it sent
     * before, and jumps past it only when it re-joins. */
    gossip_peer *p = s_in(g, g->peer[rank].in_pos);
    if (p->down_next < g->peer[rank].got)
        p->down_next = g->peer[rank].got;
    g->peer[rank].got = 0;
}

void gossip_node_peer_sent(gossip_node *g, int rank, uint64_t sent_thru)
{
    if (rank < 0 || rank >= g->n || g->peer[rank].in_pos < 0)
        return;
    int k = g->peer[rank].in_pos;
    gossip_peer *p = s_in(g, k);
    if (p->sent_thru < sent_thru)
        p->sent_thru = sent_thru;
    s_check_gap(g, k);
}

const gossip_peer *gossip_node_peers(const gossip_node *g)
{
    return g->peer;
}

uint64_t gossip_node_peer_got(const gossip_node *g, int rank)
{
    assert(rank >= 0 && rank < g->n);
    return g->peer[rank].got;
}

int gossip_node_peer_state(const gossip_node *g, int rank)
{
    if (rank < 0 || rank >= g->n || rank == g->rank)
        return 0;
    int st = g->peer[rank].out_down ? GOSSIP_PEER_OUT_DOWN : 0;
    const gossip_peer *p = &g->peer[rank];
    if (p->in_pos >= 0) {
        if (p->in_down)
            st |= GOSSIP_PEER_IN_DOWN;
        if (g->cfg.algo == GOSSIP_CHOCO && (p->in_down || p->copy_bad || p->copy_gap))
            st |= GOSSIP_PEER_WANTS_RESYNC;
        if (p->late)
            st |= GOSSIP_PEER_LATE;
    }
    return st;
}

