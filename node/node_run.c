/* node_run — see node_run.h. */
#include "node/node_run.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/nn_pool.h"

/* ---- the metrics writer ------------------------------------------------- */

static void s_num(FILE *f, const char *key, const char *fmt, double v)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void s_u64(FILE *f, const char *key, uint64_t v)
{
    fprintf(f, ",\"%s\":%" PRIu64, key, v);
}

static void s_str(FILE *f, const char *key, const char *v)
{
    fprintf(f, ",\"%s\":\"%s\"", key, v ? v : "");
}

typedef struct {
    const char *key, *fmt;
    double      v;     /* NaN: null */
} s_real;

static void s_reals(FILE *f, const s_real *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_num(f, r[i].key, r[i].fmt, r[i].v);
}

static void s_counts(FILE *f, const node_count *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_u64(f, c[i].key, c[i].v);
}

/* The algorithm's and the link's counters (node). */
static void s_write_node(FILE *f, const node_metrics *m)
{
    const gossip_stats *gs = m->gs;
    const node_count c[] = {
        {"gossip_bytes_recv", gs->bytes_recv}, {"gossip_msgs_sent", gs->msgs_sent},
        {"resyncs_sent", gs->resyncs_sent},    {"resyncs_recv", gs->resyncs_recv},
        {"psi_resets", gs->psi_resets},
        {"steps_owed", gs->steps_owed},        {"steps_repaid", gs->steps_repaid},
        {"edges_own", gs->edges_own},          {"edge_updates_skipped", gs->edge_deferred},
    };
    s_counts(f, c, sizeof c / sizeof c[0]);
    s_counts(f, m->link, m->nlink);
    fputs(",\"neighbours\":[", f);
    for (int k = 0; k < m->nnb; k++)
        fprintf(f, "%s{\"rank\":%d,\"staleness\":%" PRIu64 ",\"no_fresh\":%" PRIu64
                ",\"wait_s\":%.3f}", k ? "," : "", m->nb[k].rank, m->nb[k].staleness,
                m->nb[k].no_fresh, m->nb[k].wait_s);
    fputs("]", f);
    const s_real t[] = {
        {"seconds_compress", "%.3f", m->tm.compress}, {"seconds_wait", "%.3f", m->tm.wait},
        {"seconds_mix", "%.3f", m->tm.mix},
    };
    s_reals(f, t, sizeof t / sizeof t[0]);
}

void node_metrics_write(FILE *f, const node_metrics *m)
{
    double acc = m->evaluated ? m->test_acc : NAN, loss = m->evaluated ? m->test_loss : NAN;
    fprintf(f, "{\"command\":\"%s\"", m->command);
    if (m->rank >= 0)
        fprintf(f, ",\"rank\":%d", m->rank);
    fprintf(f, ",\"nodes\":%d,\"threads\":%d", m->nodes, nn_pool_threads());
    s_u64(f, "iter", m->iter);
    const s_real core[] = {
        {"epoch", "%.4f", m->epoch},           {"lr", "%.6g", m->lr},
        {"loss", "%.6f", m->loss},             {"train_acc", "%.6f", m->train_acc},
        {"test_acc", "%.6f", acc},             {"test_loss", "%.6f", loss},
        {"skipped_steps", "%.0f", (double)m->skipped_steps},
        {"skipped_large_grad", "%.0f", (double)m->skipped_large},
        {"samples_per_s", "%.1f", m->samples_per_s}, {"seconds", "%.3f", m->seconds},
        {"seconds_compute", "%.3f", m->tm.compute},  {"seconds_gossip", "%.3f", m->tm.gossip},
        {"seconds_eval", "%.3f", m->tm.eval}, {"eval_samples", "%.0f", (double)m->eval_samples},
    };
    s_reals(f, core, sizeof core / sizeof core[0]);
    s_str(f, "model", m->model);
    s_str(f, "precision", m->precision);
    if (m->gossip) {
        s_str(f, "algo", m->algo);
        s_str(f, "compress", m->compress);
        const s_real g[] = {
            {"eta", "%g", m->eta}, {"skew", "%g", m->skew}, {"psi", "%.17g", m->psi},
            {"gossip_bytes_sent", "%.0f", m->gossip_bytes_sent},
        };
        s_reals(f, g, sizeof g / sizeof g[0]);
        s_u64(f, "staleness", (uint64_t)m->staleness);
        s_u64(f, "steps_skipped", m->steps_skipped);
    }
    if (m->sim) {
        const s_real sim[] = {
            {"avg_model_acc", "%.6f", acc},        {"avg_model_loss", "%.6f", loss},
            {"mean_node_acc", "%.6f", m->mean_node_acc}, {"consensus", "%.6g", m->consensus},
            {"bytes_sent_per_node", "%.0f", m->gossip_bytes_sent},
        };
        s_reals(f, sim, sizeof sim / sizeof sim[0]);
    }
    if (m->gs && m->link)
        s_write_node(f, m);
    fputs("}\n", f);
    fflush(f);
}

/* ---- evaluation ------------------------------------------------------- */

/* Mean of the ranks' de-biased models (parameters and buffers) into avg;
 * returns the consensus distance mean_i ||z_i - zbar||^2 / d. */
static double s_average(nn_model *avg, node_trainer *tr, int n)
{
    node_avg a;
    node_avg_init(&a, avg);
    for (int i = 0; i < n; i++)
        node_avg_add(&a, tr[i].model);
    node_avg_write(&a, avg);
    double dist = 0;
    for (size_t k = 0; k < a.np; k++) {
        double mean = node_avg_param(&a, k);
        for (int i = 0; i < n; i++) {
            double z = nn_model_params(tr[i].model)->data[k];
            dist += (z - mean) * (z - mean);
        }
    }
    node_avg_free(&a);
    return dist / (double)n / (double)a.np;
}

/* node_evaluate_sub's tick: the command serves its neighbours. */
static void s_serve(void *arg)
{
    const node_run *r = arg;
    r->ops->serve(r->ctx);
}

/* The test samples of this evaluation: the fixed subset, except the last
 * evaluation's, on the whole set unless --eval-final subset; NULL: all. */
static const uint32_t *s_eval_set(const node_run *r)
{
    return r->it + 1 < r->iters || r->o->eval_final_subset ? r->eval_sub : NULL;
}

static double s_eval_model(node_run *r, nn_model *m, double *loss)
{
    int batch = (int)r->o->batch;
    void (*tick)(void *) = r->ops->serve ? s_serve : NULL;
    const uint32_t *sub = s_eval_set(r);
    double t = nn_now(), a = node_evaluate_sub(m, r->d, &r->d->test, sub,
                                              sub ? r->eval_sub_n : r->d->test.n, batch, loss,
                                              tick, r);
    r->tm.eval += nn_now() - t;
    return a;
}

/* Training statistics since the last line, over the driven ranks (reset). */
static void s_train_stats(node_run *r, node_metrics *m)
{
    double loss = 0;
    size_t seen = 0, correct = 0;
    for (int i = 0; i < r->n; i++) {
        loss += r->tr[i].loss_sum;
        seen += r->tr[i].seen;
        correct += r->tr[i].correct;
        node_trainer_reset_stats(&r->tr[i]);
    }
    double now = nn_now(), compute = r->tm.compute - r->compute_line;
    m->loss = seen ? loss / (double)seen : 0.0;
    m->train_acc = seen ? (double)correct / (double)seen : 0.0;
    m->samples_per_s = compute > 0 ? (double)seen / compute : 0.0;
    r->t_line = now;
    r->compute_line = r->tm.compute;
}

void node_run_debias(node_run *r, int i)
{
    nn_arena *p = nn_model_params(r->tr[i].model);
    if (r->g && r->g[i])
        gossip_node_debias(r->g[i], r->x[i], p->data);
    else if (r->x[i] != p->data)
        memcpy(p->data, r->x[i], p->numel * sizeof *p->data);
}

void node_run_eval(node_run *r, node_metrics *m)
{
    *m = r->meta;
    for (int i = 0; i < r->n; i++)
        node_run_debias(r, i);
    m->evaluated = !r->o->no_eval;
    m->eval_samples = !m->evaluated ? 0 : s_eval_set(r) ? r->eval_sub_n : r->d->test.n;
    m->consensus = r->avg ? s_average(r->avg, r->tr, r->n) : 0.0;
    if (m->evaluated && r->avg)
        m->test_acc = s_eval_model(r, r->avg, &m->test_loss);
    s_train_stats(r, m);
    double acc = 0;
    long k = m->evaluated ? r->eval_nodes : 0;
    for (long i = 0; i < k; i++) {
        double l, a = s_eval_model(r, r->tr[i].model, &l);
        if (!r->avg && i == 0) {
            m->test_acc = a;
            m->test_loss = l;
        }
        acc += a;
    }
    m->mean_node_acc = k ? acc / (double)k : NAN;
    m->iter = r->it + 1;
    m->epoch = (double)(r->it + 1) / (double)r->steps;
    m->lr = r->lr;
    m->skipped_steps = r->skipped;
    m->skipped_large = r->skipped_large;
    m->steps_skipped = r->catchup;
    m->seconds = nn_now() - r->t0;
    m->tm = r->tm;
    m->psi = r->g && r->g[0] ? gossip_node_psi(r->g[0]) : 1.0;
}

/* How many iterations a node whose step just held its neighbours up
 * yields (node_run.h); 1 while their period is not measured yet. */
static int s_yields(const node_skip_state *st)
{
    if (st->pace <= 1.0)
        return 0;
    if (st->period <= 0)
        return 1;
    double k = (st->step_s / st->period - st->pace * (st->stale + 1)) / (st->pace - 1.0);
    int most = st->periods < NODE_YIELD_MAX ? (int)st->periods : NODE_YIELD_MAX;
    return k <= 0 ? 0 : k >= most ? most : (int)ceil(k);
}

int node_skip_decide(node_skip_state *st, const node_times *tm, uint64_t ahead, double now)
{
    double dw = tm->wait - st->wait, dc = tm->compute - st->compute;
    double dt = st->last > 0 ? now - st->last : 0;
    st->wait = tm->wait;
    st->compute = tm->compute;
    st->last = now;
    if (dc > 0)
        st->step_s = st->step_s > 0 ? 0.75 * st->step_s + 0.25 * dc : dc;
    if (st->yielding && dt > 0) {
        st->period = st->period > 0 ? 0.75 * st->period + 0.25 * dt : dt;
        st->periods++;
    }
    st->yielding = 0;
    /* after our step t the neighbours' newest is t + S when they ran into
     * the bound (they sent t + S, then waited for our t): ahead = S - 1 */
    if (dc > 0 && st->stale > 0 && ahead + 1 >= (uint64_t)st->stale)
        st->yield_left = s_yields(st);
    if (ahead < 1) {
        if (st->yield_left <= 0)
            return 0;
        st->yield_left--;
        st->yielding = 1;
        st->yielded++;
        return 1;
    }
    if (st->step_s > 0 && dw > 0.5 * st->step_s) {
        st->held++;
        return 0;
    }
    return 1;
}

/* ---- the loop ----------------------------------------------------------- */

/* --debug-slow: serve the neighbours for d*(1/F - 1) seconds after a
 * local step of d seconds. */
static void s_slow_down(node_run *r, double d)
{
    if (!(r->slow > 0 && r->slow < 1) || !r->ops->serve)
        return;
    double until = nn_now() + d * (1.0 / r->slow - 1.0);
    while (nn_now() < until) {
        r->ops->serve(r->ctx);
        double left = until - nn_now();
        if (left > 0)
            nanosleep(&(struct timespec){0, (long)(1e9 * (left < 0.002 ? left : 0.002))}, NULL);
    }
}

/* A message of the loop about rank index i, through ops->log ("node R: "
 * first when the run drives several ranks). */
static void s_log(const node_run *r, int i, const char *msg)
{
    if (r->n == 1) {
        r->ops->log(r->ctx, msg);
        return;
    }
    char line[400];
    snprintf(line, sizeof line, "node %d: %s", r->rank0 + i, msg);
    r->ops->log(r->ctx, line);
}

/* The local steps of iteration r->it on every rank, with the non-finite
 * policy; -1 with a message when one rank diverged. */
static int s_local_steps(node_run *r, uint32_t *run, char *err, size_t errlen)
{
    double a = nn_now();
    for (int i = 0; i < r->n; i++) {
        gossip_node *g = r->g ? r->g[i] : NULL;
        if (r->ops->skip && r->ops->skip(r->ctx, r, i)) {
            r->catchup++; /* a mix-only iteration: no batch, no step */
            continue;
        }
        double b = nn_now();
        float loss = node_local_step(&r->tr[i], r->d, g, r->x[i], r->lr);
        s_slow_down(r, nn_now() - b);
        if (isfinite(loss)) {
            run[i] = 0;
            continue;
        }
        r->skipped++;
        const node_trainer *t = &r->tr[i];
        int large = t->refused == NODE_STEP_LARGE;
        r->skipped_large += (uint64_t)large;
        if ((++run[i] <= 3 || run[i] == NODE_RUN_MAX_SKIPPED) && r->ops->log) {
            char msg[320];
            if (large)
                snprintf(msg, sizeof msg, "iteration %llu: the gradient norm %.4g is %.3gx its "
                         "running level %.4g (above --grad-guard %g; lr %g): step skipped, the "
                         "model is unchanged", (unsigned long long)r->it, t->last_gnorm,
                         t->last_gnorm / t->gnorm_ema, t->gnorm_ema, t->guard, r->lr);
            else
                snprintf(msg, sizeof msg, "iteration %llu: the loss or a gradient is not finite "
                         "(loss %g, lr %g): step skipped, the model is unchanged and nothing "
                         "non-finite is sent", (unsigned long long)r->it, loss, r->lr);
            s_log(r, i, msg);
        }
        if (run[i] >= NODE_RUN_MAX_SKIPPED) {
            r->tm.compute += nn_now() - a;
            return nn_errf(err, errlen, "%d steps in a row were refused (not finite, or a "
                           "gradient above --grad-guard): training diverged; try a smaller "
                           "--lr or --eta", NODE_RUN_MAX_SKIPPED);
        }
    }
    r->tm.compute += nn_now() - a;
    return 0;
}

/* The gossip round after iteration r->it, if one is due. */
static int s_gossip(node_run *r, char *err, size_t errlen)
{
    if (!r->ops->round)
        return 0;
    if ((r->it + 1) % r->H != 0) {
        if (r->ops->serve)
            r->ops->serve(r->ctx); /* between rounds: answer, PING */
        return 0;
    }
    double b = nn_now();
    int rc = r->ops->round(r->ctx, r->x, (r->it + 1) / r->H - 1, &r->tm, err, errlen);
    r->tm.gossip += nn_now() - b;
    return rc;
}

static int s_eval_due(const node_run *r)
{
    int last = r->it + 1 == r->iters;
    long every = r->o->eval_every > 0 ? r->o->eval_every : r->steps;
    if (r->o->no_eval)
        return last;
    return last || (r->it + 1 + (uint64_t)(r->o->eval_offset % every)) % (uint64_t)every == 0;
}

int node_run_loop(node_run *r, char *err, size_t errlen)
{
    uint32_t *run = nn_xcalloc((size_t)r->n, sizeof *run);
    int rc = 0;
    r->t0 = r->t_line = nn_now();
    if (!r->eval_sub && r->o->eval_subset > 0 && !r->o->no_eval) {
        r->eval_sub = node_eval_subset(r->d->test.n, (size_t)r->o->eval_subset);
        r->eval_sub_n = r->eval_sub ? (size_t)r->o->eval_subset : 0;
    }
    for (; r->it < r->iters; r->it++) {
        if (r->stop && *r->stop) {
            r->interrupted = 1;
            break;
        }
        if (r->ops->catch_up && r->it % r->H == 0) {
            int c = r->ops->catch_up(r->ctx, &r->it, err, errlen);
            if (c < 0) {
                rc = -1;
                break;
            }
        }
        r->lr = node_lr_at_iter(r->o, r->it, r->steps);
        if (r->o->debug_nan_at >= 0 && r->it == (uint64_t)r->o->debug_nan_at)
            r->tr[0].poison_next = 1;
        if (s_local_steps(r, run, err, errlen) != 0 || s_gossip(r, err, errlen) != 0) {
            rc = -1;
            break;
        }
        for (int i = 0; i < r->n; i++)
            nn_sgd_after_mix(&r->tr[i].sgd, r->x[i]);
        if (r->ops->after_iter)
            r->ops->after_iter(r->ctx, r->it + 1);
        if (!s_eval_due(r))
            continue;
        node_metrics m;
        node_run_eval(r, &m);
        if (r->ops->report)
            r->ops->report(r->ctx, r, &m);
        if (r->metrics)
            node_metrics_write(r->metrics, &m);
    }
    free(run);
    free(r->eval_sub);
    r->eval_sub = NULL;
    return rc;
}
