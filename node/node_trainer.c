/* node_trainer — see node_trainer.h. */
#include "node/node_trainer.h"

#include "node/node_data.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_modelio.h"

int node_trainer_init(node_trainer *t, const node_train_opts *o, const node_data *d,
                      const uint32_t *shard, size_t n, int rank, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (n == 0)
        return nn_errf(err, errlen, "rank %d: its data shard is empty", rank);
    t->model = node_model_build(&o->mo, d->in_c, d->in_h, d->in_w, d->train.classes, err,
                                errlen);
    if (!t->model)
        return -1;
    nn_model_init_params(t->model, (uint64_t)o->seed);
    /* --init: the same file and seed give every node the same weights */
    if (o->init[0] && node_model_init_from(t->model, o->init, o->init_skip[0] ? o->init_skip
                                           : NULL, NULL, err, errlen) != 0)
        return -1;
    t->batch = (int)o->batch;
    nn_model_prepare(t->model, t->batch);
    nn_sgd_init(&t->sgd, nn_model_params(t->model), &o->sgd);
    uint64_t rseed = (uint64_t)o->seed * 1000003ULL + (uint64_t)rank;
    nn_sampler_init(&t->sampler, shard, n, rseed);
    nn_rng_seed(&t->aug_rng, rseed * 7919 + 17);
    size_t per = (size_t)d->in_c * (size_t)d->in_h * (size_t)d->in_w;
    t->xb = nn_xalloc_aligned((size_t)t->batch * per * sizeof(float));
    t->yb = nn_xmalloc((size_t)t->batch);
    t->shard_n = n;
    t->steps_per_epoch = (long)((n + (size_t)t->batch - 1) / (size_t)t->batch);
    t->guard = o->grad_guard;
    return 0;
}

/* The gradient-norm guard: 1 when a step of norm `norm` (finite) is to be
 * refused; else norm joins the running level.  A level of 0 (only zero
 * gradients so far) refuses nothing. */
static int s_guard_refuses(node_trainer *t, double norm)
{
    if (t->guard > 0 && t->gnorm_n >= NODE_GUARD_WARMUP && t->gnorm_ema > 0 &&
        norm > t->guard * t->gnorm_ema)
        return 1;
    t->gnorm_n++;
    uint64_t k = t->gnorm_n < NODE_GUARD_WARMUP ? t->gnorm_n : NODE_GUARD_WARMUP;
    t->gnorm_ema += (norm - t->gnorm_ema) / (double)k;
    return 0;
}

float node_trainer_step(node_trainer *t, const node_data *d, float *x, float lr)
{
    const uint32_t *idx = nn_sampler_next(&t->sampler, t->batch, NULL);
    nn_data_batch(&d->train, idx, t->batch, d->mean, d->std, &d->aug_train, &t->aug_rng, t->xb,
                  t->yb);
    if (t->poison_next) {
        t->poison_next = 0;
        t->xb[0] = NAN;
    }
    t->refused = NODE_STEP_NONFINITE;
    t->last_gnorm = NAN;
    float loss = nn_model_forward(t->model, t->xb, t->yb, t->batch, 1);
    if (!isfinite(loss))
        return loss;
    t->correct += (size_t)nn_model_correct(t->model, t->yb, t->batch);
    nn_model_backward(t->model);
    const nn_arena *gr = nn_model_grads(t->model);
    double ss = 0; /* a non-finite element makes it non-finite; |g| < 3.4e38: no overflow */
    for (size_t k = 0; k < gr->numel; k++)
        ss += (double)gr->data[k] * gr->data[k];
    if (!isfinite(ss))
        return NAN; /* x untouched: nothing non-finite reaches the neighbours */
    t->last_gnorm = sqrt(ss);
    if (s_guard_refuses(t, t->last_gnorm)) {
        t->refused = NODE_STEP_LARGE;
        return NAN; /* x untouched: the wild step reaches neither model nor neighbours */
    }
    t->refused = NODE_STEP_OK;
    nn_sgd_step_at(&t->sgd, x, nn_model_grads(t->model)->data, nn_model_params(t->model)->data,
                   lr);
    t->loss_sum += (double)loss * t->batch;
    t->seen += (size_t)t->batch;
    return loss;
}

void node_trainer_reset_stats(node_trainer *t)
{
    t->loss_sum = 0;
    t->seen = t->correct = 0;
}

void node_trainer_free(node_trainer *t)
{
    nn_model_destroy(&t->model);
    nn_sgd_free(&t->sgd);
    nn_sampler_free(&t->sampler);
    free(t->xb);
    free(t->yb);
    free(t->x1);
    memset(t, 0, sizeof *t);
}

int node_shards_make(const node_train_opts *o, const node_data *d, int nodes, double skew,
                     uint32_t **shard, size_t *count, char *err, size_t errlen)
{
    if (o->mo.dirichlet > 0 && skew > 0)
        return nn_errf(err, errlen, "--skew and --partition: give one partition");
    int r = node_data_shards(&o->mo, o->subset, o->seed, d, nodes, shard, count, err, errlen);
    if (r <= 0) /* per-site data, or the Dirichlet partition */
        return r;
    size_t ntrain = o->subset && (size_t)o->subset < d->train.n ? (size_t)o->subset : d->train.n;
    if (nodes == 1) {
        if (ntrain == 0)
            return nn_errf(err, errlen, "the training set is empty");
        shard[0] = nn_xmalloc(ntrain * sizeof **shard);
        for (size_t i = 0; i < ntrain; i++)
            shard[0][i] = (uint32_t)i;
        count[0] = ntrain;
        return 0;
    }
    return nn_partition_skew(d->train.y, ntrain, d->train.classes, nodes, skew, (uint64_t)o->seed,
                             shard, count, err, errlen);
}

float node_lr_at_iter(const node_train_opts *o, uint64_t iter, long steps)
{
    return nn_lr_at(&o->sched, (double)iter / (double)steps);
}

float node_local_step(node_trainer *t, const node_data *d, gossip_node *g, float *x, float lr)
{
    const size_t n = nn_model_params(t->model)->numel;
    float *z = nn_model_params(t->model)->data;
    if (!g) {
        if (x != z)
            memcpy(z, x, n * sizeof *z);
        return node_trainer_step(t, d, x, lr);
    }
    gossip_node_mask_sent(g, t->sgd.mom.data); /* dgc momentum-factor masking */
    gossip_node_debias(g, x, z);
    const gossip_config *c = gossip_node_config(g);
    if (!c->staleness || !c->push_sum)
        return node_trainer_step(t, d, x, lr);
    if (!t->x1)
        t->x1 = nn_xalloc_aligned(n * sizeof *t->x1);
    memcpy(t->x1, x, n * sizeof *x);
    float loss = node_trainer_step(t, d, t->x1, lr);
    if (isfinite(loss))
        gossip_node_step_apply(g, x, t->x1);
    return loss;
}

int node_ranks_init(node_ranks *r, const node_train_opts *o, int nodes, double skew, int first,
                    int k, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    assert(first >= 0 && k >= 1 && first + k <= nodes);
    r->nodes = nodes;
    r->first = first;
    r->k = k;
    r->shard = nn_xcalloc((size_t)nodes, sizeof *r->shard);
    r->count = nn_xcalloc((size_t)nodes, sizeof *r->count);
    r->tr = nn_xcalloc((size_t)k, sizeof *r->tr);
    r->x = nn_xcalloc((size_t)k, sizeof *r->x);
    if (node_data_load_ranks(&o->mo, first, k, &r->d, err, errlen) != 0 ||
        node_shards_make(o, &r->d, nodes, skew, r->shard, r->count, err, errlen) != 0)
        return -1;
    for (int i = 0; i < k; i++) {
        int rank = first + i;
        if (node_trainer_init(&r->tr[i], o, &r->d, r->shard[rank], r->count[rank], rank, err,
                              errlen) != 0)
            return -1;
        const nn_arena *p = nn_model_params(r->tr[i].model);
        r->x[i] = nn_xalloc_aligned(p->numel * sizeof(float));
        memcpy(r->x[i], p->data, p->numel * sizeof(float));
    }
    /* iterations per epoch: rank 0's shard (a node of per-site data: its own) */
    size_t n0 = r->count[r->d.site_n ? first : 0];
    r->steps = (long)((n0 + (size_t)o->batch - 1) / (size_t)o->batch);
    return 0;
}

void node_ranks_free(node_ranks *r)
{
    for (int i = 0; r->tr && i < r->k; i++) {
        node_trainer_free(&r->tr[i]);
        free(r->x[i]);
    }
    if (r->shard)
        nn_partition_free(r->shard, r->nodes);
    free(r->shard);
    free(r->count);
    free(r->tr);
    free(r->x);
    node_data_free(&r->d);
    memset(r, 0, sizeof *r);
}
