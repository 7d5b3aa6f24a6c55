/* gossip_node_mix — the mixing step of gossip_node (gossip_node.h): the
 * self weight after membership changes and kept shares, the synchronous
 * mixes of dpsgd, deepsqueeze and choco, the mixes with bounded staleness,
 * and the push-sum safety net.
 *
 * Owns:    nothing beyond struct gossip_node (gossip_node_int.h).
 * Exposes: gossip_node_mix; to the inbox gossip_node_fold, _absorb
 *          (gossip_node_int.h).
 * Callers: the drivers of gossip_node (gossip_sim, gossip_link, node/).
 *
 * Dimension legend: d = layout->numel (parameters), n nodes, nin union
 * in-neighbours of this node.
 */
#include "gossip/gossip_node_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Self weight of iteration iter after membership changes (row i of W_t in
 * w).  With push-sum the sender keeps the column shares of its out-neighbours
 * that are down (mass stays with the living); without push-sum the receiver
 * keeps the row weights of in-neighbours absent at iter (row stochastic). */
static double s_self_weight(const gossip_node *g, uint64_t iter)
{
    const double *w = s_w(g, iter);
    int n = g->n, i = g->rank;
    double wii = w[(size_t)i * n + i], live_in = 0.0, down_in = 0.0, lost_in = 0.0;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        double wij = w[(size_t)i * n + j];
        if (!s_needs(g, j, iter) || wij <= 0.0)
            continue;
        switch (s_absent(g, k, iter)) {
        case S_PRESENT: live_in += wij; break;
        case S_ABSENT_DOWN: down_in += wij; break;
        default: /* bounded staleness accounts lost messages one by one */
            if (g->cfg.staleness)
                live_in += wij;
            else
                lost_in += wij;
            break;
        }
    }
    /* A lost message: the sender counted it as delivered, so the receiver
     * keeps that weight itself (the mass barely moves: psi_i ~ psi_j). */
    wii += lost_in;
    if (!g->cfg.push_sum)
        return wii + down_in;
    double live_out = 0.0, down_out = 0.0, kept = 0.0;
    for (int o = 0; o < n; o++)
        if (o != i && w[(size_t)o * n + i] > 0.0) {
            if (g->peer[o].out_down) {
                down_out += w[(size_t)o * n + i];
            } else {
                live_out += w[(size_t)o * n + i];
                if (g->keep_now[o]) /* its message is not out: the share stays */
                    kept += w[(size_t)o * n + i];
            }
        }
    wii += kept;
    /* Where the living stay strongly connected, keeping the shares of down
     * out-neighbours keeps sum x and sum psi.  Where a failure cut a directed
     * graph into a path, the two ends are special: the node that hears from
     * nobody (in-neighbours all down) keeps its row, or it would give its
     * mass away every iteration and fade to psi = 0; the node that can send
     * to nobody (out-neighbours all down) does not keep their shares, or it
     * would collect all mass downstream and its psi would grow without
     * bound.  Both ends then mix like a row-stochastic matrix: psi stays
     * put and everybody follows the node at the head of the path. */
    if (live_out > 0.0)
        wii += down_out;
    if (live_in + lost_in == 0.0)
        wii += down_in;
    return wii;
}

/* Push-sum safety net.  Without staleness the gradient step moves z = x/psi
 * by lr*g/psi, so a psi far from 1 means a wrong step size; only mass
 * draining out of, or piling up in, a part of the graph cut off by failures
 * gets it there.  With staleness the step is scaled (gossip_node_step_scale:
 * z moves by at most lr*g/S_STEP_MEAN_MIN whatever psi), and a psi near 0 is
 * a normal state: a node whose in-neighbours kept their shares for it
 * (unacknowledged messages, a slow link) gives its own away every round
 * and holds (1/3)^k of its mass after k such rounds of a 3-way mix.
 * Rescaling it there would create mass (sum psi n + 1 - psi), so the floor
 * is only where x = psi * z would leave float's normal range. */
#define S_PSI_MIN       1e-4
#define S_PSI_MIN_STALE 1e-24
#define S_PSI_MAX       1e4

/* Folds psi into x: x /= psi, psi = 1 (z = x/psi kept); counted.  What
 * earlier steps owe x is not scaled: it is what they add to sum x, and its
 * repayment is sized by the psi it meets (gossip_node_step.c).  Returns the
 * factor 1/psi. */
static double s_psi_fold(gossip_node *g, float *x)
{
    size_t d = g->layout->numel;
    double inv = 1.0 / g->psi;
    for (size_t k = 0; k < d; k++)
        x[k] = (float)((double)x[k] * inv);
    g->psi = 1.0;
    g->stats.psi_resets++;
    return inv;
}

static void s_psi_floor(gossip_node *g, float *x)
{
    double lo = g->cfg.staleness > 0 ? S_PSI_MIN_STALE : S_PSI_MIN;
    if (!g->cfg.push_sum || (g->psi >= lo && g->psi <= S_PSI_MAX))
        return;
    g->psi_mean *= s_psi_fold(g, x);
}

/* Push-sum with every in-neighbour down: no mass comes in any more, so psi
 * only keeps what the rounds before left it (with bounded staleness each
 * round while the neighbours fell silent, and before they were declared
 * down, kept only W_ii of it: 0.35 -> 0.05 in six rounds of complete4),
 * and the local step on z = x/psi is lr/psi, or lr/psi_mean with the step
 * scale: up to 20x the schedule, which diverged in the SGP freeze drill.  A
 * node that is alone trains alone: z is kept, psi = 1 (and its mean), so
 * its step is the schedule's, as in `train`.  Neighbours that come back
 * mix with that psi, as after s_psi_floor. */
static void s_psi_alone(gossip_node *g, float *x)
{
    if (!g->cfg.push_sum || g->psi == 1.0)
        return;
    for (int k = 0; k < g->nin; k++)
        if (!s_in(g, k)->in_down)
            return;
    s_psi_fold(g, x);
    g->psi_mean = 1.0;
}

/* The stored (decoded) message of in-neighbour index k for iter; frees
 * the slot (its payload stays valid until the slot is filled again). */
static const gossip_payload *s_slot_take(gossip_node *g, int k, uint64_t iter, double *psi,
                                         size_t *len)
{
    s_slot *slot = s_slot_of(g, k, iter);
    assert(slot->have && slot->iter == iter);
    *psi = slot->psi;
    *len = slot->len;
    slot->have = 0;
    return &slot->pl;
}

/* Records the staleness of in-neighbour k at the mix of iter (thru: 1 + its
 * newest iteration mixed or accounted). */
static void s_stale_note(gossip_node *g, int k, uint64_t iter, uint64_t thru)
{
    g->stale[k].lag = thru > iter ? 0 : iter + 1 - thru;
    g->stale[k].unfresh += thru <= iter;
}

/* Mixes one held message (j, c) of in-neighbour index k with W_c[i][j]. */
static void s_mix_held(gossip_node *g, int k, int j, uint64_t c, double *acc, double *psi_acc,
                       uint64_t *recv)
{
    double psi_j;
    size_t len;
    const gossip_payload *pl = s_slot_take(g, k, c, &psi_j, &len);
    gossip_payload_axpy(pl, g->layout, s_wij(g, c, j), acc);
    *psi_acc += s_wij(g, c, j) * psi_j;
    s_in(g, k)->psi_last = psi_j;
    *recv += len;
}

/* Push-sum: the messages of k held for iterations below lim that the
 * in-order walk will not reach (k was declared down while they waited, or
 * came back from a later iteration), mixed now, oldest first: their mass
 * left the sender, so dropping them would lose it. */
static void s_drain_held(gossip_node *g, int k, int j, uint64_t lim, double *acc,
                         double *psi_acc, uint64_t *recv)
{
    for (;;) {
        const s_slot *old = NULL;
        for (int w = 0; w < GOSSIP_SLOTS; w++) {
            const s_slot *sl = &g->slots[(size_t)k * GOSSIP_SLOTS + w];
            if (sl->have && sl->iter < lim && (!old || sl->iter < old->iter))
                old = sl;
        }
        if (!old)
            return;
        s_mix_held(g, k, j, old->iter, acc, psi_acc, recv);
    }
}

void gossip_node_fold(gossip_node *g, int k)
{
    const int j = g->in_ranks[k];
    const gossip_peer *p = s_in(g, k);
    if (!g->fold_acc)
        g->fold_acc = nn_xcalloc(g->layout->numel, sizeof(double));
    uint64_t c = g->stale[k].acc_thru > p->in_from ? g->stale[k].acc_thru : p->in_from;
    for (; c < g->stale[k].newest || c < g->stale[k].kept_thru; c++) {
        if (s_wij(g, c, j) <= 0.0)
            continue;
        if (s_present(g, k, c)) {
            s_mix_held(g, k, j, c, g->fold_acc, &g->fold_psi, &g->fold_recv);
        } else if (c < g->stale[k].kept_thru) {
            /* kept by the sender up to its next message: one step (a
             * run of kept shares can be long) */
            uint64_t next = g->stale[k].kept_thru;
            for (int w = 0; w < GOSSIP_SLOTS; w++) {
                const s_slot *sl = &g->slots[(size_t)k * GOSSIP_SLOTS + w];
                if (sl->have && sl->iter > c && sl->iter < next)
                    next = sl->iter;
            }
            g->stats.kept_recv += next - c;
            c = next - 1;
        } else {
            break; /* in flight, or lost: the mix accounts for it */
        }
    }
    g->stale[k].acc_thru = c;
}

/* The mixing sums of a stale mix to start from: with push-sum, what
 * gossip_node_fold took in since the last mix (g->acc and g->fold_acc
 * swap: no pass to add them; the other buffer is zeroed for the next
 * folds), its psi into *psi_acc; else zeros.  Adding the own share to
 * them then gives the same doubles as adding them to the own share (one
 * addition per element). */
static double *s_mix_start(gossip_node *g, double *psi_acc, uint64_t *recv)
{
    const size_t d = g->layout->numel;
    if (!g->fold_acc || !g->fold_recv) {
        memset(g->acc, 0, d * sizeof *g->acc);
        return g->acc;
    }
    double *folded = g->fold_acc;
    g->fold_acc = g->acc;
    g->acc = folded;
    memset(g->fold_acc, 0, d * sizeof *g->fold_acc);
    *psi_acc += g->fold_psi;
    *recv += g->fold_recv;
    g->fold_psi = 0.0;
    g->fold_recv = 0;
    return g->acc;
}

/* dpsgd / deepsqueeze with bounded staleness: every message (j, s) not yet
 * mixed with s <= iter is mixed now with W_s[i][j]; a message proved lost
 * gives its weight W_s[i][j] to the node itself (as in the synchronous
 * rule).  acc, psi_acc hold the self term on entry. */
static void s_mix_stale_ps(gossip_node *g, uint64_t iter, double *acc, double *psi_acc,
                           int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        gossip_peer *p = s_in(g, k);
        if (s_absent(g, k, iter) == S_ABSENT_DOWN) {
            s_drain_held(g, k, j, iter + 1, acc, psi_acc, recv);
            *absent += s_wij(g, iter, j) > 0.0;
            continue;
        }
        uint64_t c = g->stale[k].acc_thru > p->in_from ? g->stale[k].acc_thru : p->in_from;
        s_drain_held(g, k, j, c, acc, psi_acc, recv);
        for (; c <= iter; c++) {
            double wc = s_wij(g, c, j);
            if (wc <= 0.0)
                continue;
            if (s_present(g, k, c)) {
                s_mix_held(g, k, j, c, acc, psi_acc, recv);
            } else if (c < g->stale[k].kept_thru) { /* its sender kept that share */
                g->stats.kept_recv++;
            } else if (c < p->sent_thru) { /* lost: the node keeps that weight */
                gossip_payload_axpy(&g->self_pl, L, wc, acc);
                *psi_acc += wc * g->psi;
            } else {
                break; /* in flight: mixed when it arrives */
            }
        }
        g->stale[k].acc_thru = c;
        s_stale_note(g, k, iter, c);
    }
}

/* Choco, late update q_j(c) of in-neighbour index k: applied to the copy,
 * with the catch-up credit eta * (sum_{r=c}^{iter-1} W_r[i][j]) * q_j(c)
 * (the acc term; likewise psi) for the rounds iter that mixed the copy
 * without it: sum x and sum psi are conserved exactly. */
static void s_copy_take(gossip_node *g, int k, uint64_t c, uint64_t iter, double *acc,
                        double *psi_acc, uint64_t *recv)
{
    gossip_peer *p = s_in(g, k);
    int j = g->in_ranks[k];
    double psi_j;
    size_t len;
    const gossip_payload *pl = s_slot_take(g, k, c, &psi_j, &len);
    gossip_payload_add(pl, g->layout, g->xhat_in[k]);
    double cw = 0.0;
    for (uint64_t r = c > g->stale[k].used_from ? c : g->stale[k].used_from; r < iter; r++)
        cw += s_wij(g, r, j);
    if (cw > 0.0) {
        gossip_payload_axpy(pl, g->layout, cw, acc);
        *psi_acc += cw * (psi_j - p->psi_last);
    }
    p->psi_last = psi_j;
    *recv += len;
}

void gossip_node_absorb(gossip_node *g, int k)
{
    gossip_peer *p = s_in(g, k);
    if (!g->fold_acc)
        g->fold_acc = nn_xcalloc(g->layout->numel, sizeof(double));
    uint64_t c = p->copy_thru;
    for (; c < g->iter && s_present(g, k, c); c++)
        s_copy_take(g, k, c, g->iter, g->fold_acc, &g->fold_psi, &g->fold_recv);
    p->copy_thru = c;
}

/* Choco with bounded staleness: the stored updates q_j(s), s <= iter, are
 * applied to the copy in order; one applied late (s < iter) also gets the
 * catch-up credit eta * (sum_{r=s}^{iter-1} W_r[i][j]) * q_j(s) (and
 * likewise the psi step), for the rounds that mixed the copy without it:
 * sum x and sum psi are then conserved exactly.  Mixing uses the current
 * copies. */
static void s_mix_stale_choco(gossip_node *g, uint64_t iter, double *acc, double *psi_acc,
                              int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        gossip_peer *p = s_in(g, k);
        double wt = s_wij(g, iter, j);
        if (s_absent(g, k, iter)) {
            *absent += wt > 0.0;
            continue;
        }
        uint64_t c = p->copy_thru;
        for (; c <= iter && s_present(g, k, c); c++)
            s_copy_take(g, k, c, iter, acc, psi_acc, recv);
        p->copy_thru = c;
        s_stale_note(g, k, iter, c);
        if (wt > 0.0) {
            const float *xh = g->xhat_in[k];
            for (size_t e = 0; e < d; e++)
                acc[e] += wt * xh[e];
            *psi_acc += wt * p->psi_last;
        }
    }
}

void gossip_node_catch_up(gossip_node *g)
{
    g->catch_up = g->cfg.algo == GOSSIP_CHOCO && g->cfg.staleness > 0;
}

/* The factor on eta of this mix (gossip_node_catch_up); consumes the flag. */
static double s_catch_up_gain(gossip_node *g)
{
    if (!g->catch_up)
        return 1.0;
    g->catch_up = 0;
    for (int k = 0; k < g->nin; k++)
        if (s_in(g, k)->late)
            return 1.0;
    return GOSSIP_CATCHUP_GAIN;
}

/* The mix of iteration iter with bounded staleness (S > 0). */
static void s_mix_stale(gossip_node *g, float *x, uint64_t iter, int *absent, uint64_t *recv)
{
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    double wii = s_self_weight(g, iter), eta = g->cfg.eta, psi_acc = wii * g->psi;
    double *acc = s_mix_start(g, &psi_acc, recv);
    int dpsgd = g->cfg.algo == GOSSIP_DPSGD;
    if (g->cfg.algo == GOSSIP_CHOCO) { /* acc: the late credits absorbed, or zeros */
        const float *xs = g->xhat_self;
        for (size_t k = 0; k < d; k++)
            acc[k] += (wii - 1.0) * xs[k];
        gossip_node_edge_terms(g, iter, acc);
        s_mix_stale_choco(g, iter, acc, &psi_acc, absent, recv);
    } else {
        gossip_payload_axpy(&g->self_pl, L, dpsgd ? wii : wii - 1.0, acc);
        s_mix_stale_ps(g, iter, acc, &psi_acc, absent, recv);
    }
    if (dpsgd) {
        for (size_t k = 0; k < d; k++)
            x[k] = (float)acc[k];
        g->psi = psi_acc; /* push-sum is on (gossip_node_new) */
        return;
    }
    eta *= s_catch_up_gain(g);
    for (size_t k = 0; k < d; k++)
        x[k] = (float)(x[k] + eta * acc[k]);
    if (g->cfg.push_sum)
        g->psi += eta * (psi_acc - g->psi);
}

/* The synchronous mix of dpsgd and deepsqueeze (staleness 0): every
 * live in-neighbour's message of iter is mixed with W[i][j]. */
static void s_mix_sync_ps(gossip_node *g, float *x, uint64_t iter, int *absent, uint64_t *recv)
{
    const double *w = s_w(g, iter) + (size_t)g->rank * g->n; /* row i */
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    double wii = s_self_weight(g, iter), eta = g->cfg.eta;
    double psi_acc = wii * g->psi;
    double *acc = g->acc;
    /* dpsgd:       x = sum_j W[i][j] c_j                 (c dense)
     * deepsqueeze: x = x+ + eta * (sum_j W[i][j] c_j - c_i), j incl. i */
    int ds = g->cfg.algo == GOSSIP_DEEPSQUEEZE;
    if (ds) {
        memset(acc, 0, d * sizeof *acc);
        gossip_payload_axpy(&g->self_pl, L, wii - 1.0, acc);
    } else {
        const float *ci = g->self_pl.val;
        for (size_t k = 0; k < d; k++)
            acc[k] = wii * ci[k];
    }
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        if (!s_needs(g, j, iter))
            continue;
        if (s_absent(g, k, iter)) {
            (*absent)++;
            if (s_present(g, k, iter))
                s_slot_of(g, k, iter)->have = 0;
            continue;
        }
        double psi_j;
        size_t len;
        const gossip_payload *p = s_slot_take(g, k, iter, &psi_j, &len);
        gossip_payload_axpy(p, L, w[j], acc);
        psi_acc += w[j] * psi_j;
        s_in(g, k)->psi_last = psi_j;
        *recv += len;
    }
    if (ds) {
        for (size_t k = 0; k < d; k++)
            x[k] = (float)(x[k] + eta * acc[k]);
        if (g->cfg.push_sum)
            g->psi += eta * (psi_acc - g->psi);
    } else {
        for (size_t k = 0; k < d; k++)
            x[k] = (float)acc[k];
        if (g->cfg.push_sum)
            g->psi = psi_acc;
    }
}

/* The synchronous mix of choco (staleness 0): the updates of iter are
 * applied to the copies, which are then mixed with W[i][j]. */
static void s_mix_sync_choco(gossip_node *g, float *x, uint64_t iter, int *absent,
                             uint64_t *recv)
{
    const double *w = s_w(g, iter) + (size_t)g->rank * g->n; /* row i */
    const nn_arena *L = g->layout;
    size_t d = L->numel;
    double wii = s_self_weight(g, iter), eta = g->cfg.eta;
    double psi_acc = wii * g->psi;
    double *acc = g->acc;
    /* xhat_j += q_j for every holder; then
     * x = x+ + eta * (sum_j W[i][j] xhat_j - xhat_i), j incl. i */
    const float *xs = g->xhat_self;
    for (size_t k = 0; k < d; k++)
        acc[k] = (wii - 1.0) * xs[k];
    gossip_node_edge_terms(g, iter, acc);
    for (int k = 0; k < g->nin; k++) {
        int j = g->in_ranks[k];
        if (s_absent(g, k, iter)) {
            *absent += w[j] > 0.0;
            if (s_present(g, k, iter))
                s_slot_of(g, k, iter)->have = 0;
            continue;
        }
        double psi_j = s_in(g, k)->psi_last;
        if (s_present(g, k, iter)) {
            size_t len;
            const gossip_payload *p = s_slot_take(g, k, iter, &psi_j, &len);
            if (s_in(g, k)->copy_thru == iter) { /* else a RESYNC already holds it */
                gossip_payload_add(p, L, g->xhat_in[k]);
                s_in(g, k)->copy_thru = iter + 1;
            }
            s_in(g, k)->psi_last = psi_j;
            *recv += len;
        }
        if (w[j] > 0.0) {
            const float *xh = g->xhat_in[k];
            double wij = w[j];
            for (size_t e = 0; e < d; e++)
                acc[e] += wij * xh[e];
            psi_acc += wij * psi_j;
        }
    }
    for (size_t k = 0; k < d; k++)
        x[k] = (float)(x[k] + eta * acc[k]);
    if (g->cfg.push_sum)
        g->psi += eta * (psi_acc - g->psi);
}

/* After the mix of iter: a message kept (gossip_node_keep) starts or
 * extends the run of kept shares to its destination, announced by the next
 * message that goes out to it (gossip_node_outbox); one that went out ends
 * the run. */
static void s_keep_done(gossip_node *g, uint64_t iter)
{
    for (int a = 0; a < g->ndest; a++) {
        int o = g->dest[a];
        if (g->keep_now[o]) {
            if (g->kept_from[o] == UINT64_MAX)
                g->kept_from[o] = iter;
            g->stats.shares_kept++;
        } else {
            g->kept_from[o] = UINT64_MAX;
        }
        g->keep_now[o] = 0;
    }
}

int gossip_node_mix(gossip_node *g, float *x, uint64_t iter, char *err, size_t errlen)
{
    double t0 = nn_now();
    if (iter != g->iter || !g->prepared)
        return nn_errf(err, errlen, "gossip: mix(%llu) out of order (node %d is at iteration %llu, %s)",
                       (unsigned long long)iter, g->rank, (unsigned long long)g->iter,
                       g->prepared ? "prepared" : "not prepared");
    if (!gossip_node_ready(g, iter))
        return nn_errf(err, errlen, "gossip: mix(%llu) on node %d before every in-neighbour's message arrived",
                       (unsigned long long)iter, g->rank);
    uint64_t recv = 0;
    int absent = 0;

    if (g->cfg.staleness)
        s_mix_stale(g, x, iter, &absent, &recv);
    else if (g->cfg.algo == GOSSIP_DPSGD || g->cfg.algo == GOSSIP_DEEPSQUEEZE)
        s_mix_sync_ps(g, x, iter, &absent, &recv);
    else
        s_mix_sync_choco(g, x, iter, &absent, &recv);
    s_keep_done(g, iter);
    s_psi_floor(g, x);
    s_psi_alone(g, x);
    if (g->cfg.staleness) /* averages over ~4(S+1) mixes (gossip_node_step_scale) */
        g->psi_mean += (g->psi - g->psi_mean) / (4.0 * (g->cfg.staleness + 1));
    g->stats.iter_bytes_sent = g->cur_sent;
    g->stats.iter_bytes_recv = recv;
    g->stats.iter_absent = (uint64_t)absent;
    g->prepared = 0;
    g->iter++;
    g->stats.mix_s = nn_now() - t0;
    return 0;
}

