/* gossip_node_step — the weight of a local step under push-sum with
 * bounded staleness (gossip_node.h: gossip_node_step_scale,
 * gossip_node_step_apply, gossip_node_step_owed).
 *
 * Owns:    the owed part of earlier steps (g->owed, d floats, and its
 *          weight g->owed_w), allocated on the first step that owes.
 * Exposes: the three functions above; gossip_node_owed_clear to the state
 *          functions (gossip_node_int.h).
 * Callers: node/ (node_local_step), the simulator tests.
 *
 * A local step adds w * delta to x, delta = -lr * update the unscaled
 * step, w = gossip_node_step_scale.  Summed over the nodes, sum x moves by
 * sum_i w_i delta_i: a node's gradient counts in the consensus with weight
 * w.  A node whose psi is low for a while (its in-neighbour kept its shares
 * for a stopped node) has w << 1, so its steps count little and its data
 * is largely lost.  The part it could not take, (1 - w) delta, is owed and
 * added to x by later steps, as far as each leaves room: a step together
 * with its repayment moves z = x/psi by at most 1/S_OWED_MEAN_MIN times the
 * schedule's step.  What is owed is what those steps add to sum x: a psi
 * fold (x /= psi) does not scale it, or a node whose psi had fallen to
 * 1e-3 would repay 1000 x its steps (it diverged).  Nothing of it is mass
 * (psi is untouched), and it is not checkpointed: a node that resumes or
 * re-joins drops what it owed.
 *
 * Dimension legend: d = layout->numel (parameters).
 */
#include "gossip/gossip_node_int.h"

#include <string.h>

/* The smallest mean psi the step on z = x/psi is scaled by: a node behind a
 * slow link pushes most of its mass into messages that take seconds to
 * come back (psi 0.04 for a while), and lr/mean(psi) would then be 25 x
 * the schedule's step (it diverged); at most 1/S_STEP_MEAN_MIN x.  At 0.5
 * (2 x) int8 SGP on the directed ring8 with one node stopped 2/3 of the
 * time diverged in 3 of 6 runs, just after the warm-up: the nodes
 * downstream of it get little mass and run at twice the peak lr. */
#define S_STEP_MEAN_MIN 0.75

/* A step with its repayment moves z by at most 1/S_OWED_MEAN_MIN x the
 * schedule's step.  Ring8 int8 SGP, one node stopped 2/3 of the time, the
 * averaged model over 6 runs: 0.75 +0.40 points, 0.5 +0.85 against owing
 * nothing; over 3 runs 0.25 -0.5, and 0.1 diverged (results/slow-node.md). */
#define S_OWED_MEAN_MIN 0.5

double gossip_node_step_scale(const gossip_node *g)
{
    if (!g->cfg.staleness || !g->cfg.push_sum || g->psi == g->psi_mean)
        return 1.0;
    return g->psi / (g->psi_mean > S_STEP_MEAN_MIN ? g->psi_mean : S_STEP_MEAN_MIN);
}

/* Adds the share of what is owed that this step leaves room for: the step
 * takes weight w of the psi / S_OWED_MEAN_MIN its z can take. */
static void s_repay(gossip_node *g, float *x, double w)
{
    double room = g->psi / S_OWED_MEAN_MIN - w;
    if (!(g->owed_w > 0.0) || !(room > 0.0))
        return;
    const size_t d = g->layout->numel;
    const float phi = room >= g->owed_w ? 1.0f : (float)(room / g->owed_w);
    for (size_t k = 0; k < d; k++) {
        float v = phi * g->owed[k];
        x[k] += v;
        g->owed[k] -= v;
    }
    g->owed_w *= 1.0 - phi;
    if (phi == 1.0f) {
        memset(g->owed, 0, d * sizeof *g->owed);
        g->owed_w = 0.0;
    }
    g->stats.steps_repaid++;
}

void gossip_node_step_apply(gossip_node *g, float *x, const float *x1)
{
    const size_t d = g->layout->numel;
    const double w = gossip_node_step_scale(g);
    if (w == 1.0) {
        memcpy(x, x1, d * sizeof *x);
    } else if (w > 1.0) {
        for (size_t k = 0; k < d; k++)
            x[k] += (float)w * (x1[k] - x[k]);
    } else {
        if (!g->owed)
            g->owed = nn_xcalloc(d, sizeof *g->owed);
        const float wf = (float)w, rest = (float)(1.0 - w);
        for (size_t k = 0; k < d; k++) {
            float delta = x1[k] - x[k];
            x[k] += wf * delta;
            g->owed[k] += rest * delta;
        }
        g->owed_w += 1.0 - w;
        g->stats.steps_owed++;
    }
    s_repay(g, x, w);
}

const float *gossip_node_step_owed(const gossip_node *g, double *weight)
{
    *weight = g->owed_w;
    return g->owed;
}

void gossip_node_owed_clear(gossip_node *g)
{
    if (g->owed)
        memset(g->owed, 0, g->layout->numel * sizeof *g->owed);
    g->owed_w = 0.0;
}
