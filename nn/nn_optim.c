/* nn_optim — see nn_optim.h. */
#include "nn/nn_optim.h"
#include "nn/nn_pool.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

nn_sgd_config nn_sgd_defaults(void)
{
    return (nn_sgd_config){.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1,
                           .qgm = 0, .qgm_beta = 0.9f};
}

void nn_sgd_init(nn_sgd *s, const nn_arena *layout, const nn_sgd_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    nn_arena_init(&s->mom);
    nn_arena_init(&s->prev);
    nn_arena_clone_layout(&s->mom, layout);
    if (cfg->qgm)
        nn_arena_clone_layout(&s->prev, layout);
}

void nn_sgd_free(nn_sgd *s)
{
    nn_arena_free(&s->mom);
    nn_arena_free(&s->prev);
}

void nn_sgd_step(nn_sgd *s, float *x, const float *g, float lr)
{
    nn_sgd_step_at(s, x, g, x, lr);
}

typedef struct {
    float *x, *buf;
    const float *g, *z;
    size_t n;
    float lr, mu, wd;
    int qgm, nesterov;
} s_sgd_job;

/* Elements [lo, hi) of the update (nn_sgd_step_at). */
static void s_sgd_range(const s_sgd_job *j, size_t lo, size_t hi)
{
    float *x = j->x, *buf = j->buf;
    const float *g = j->g, *z = j->z, lr = j->lr, mu = j->mu, wd = j->wd;
    if (j->qgm) {
        /* the buffer is the quasi-global momentum: read, not updated here */
        for (size_t i = lo; i < hi; i++) {
            float d = g[i] + wd * z[i];
            float v = mu * buf[i] + d;
            x[i] -= lr * (j->nesterov ? d + mu * v : v);
        }
    } else if (j->nesterov) {
        for (size_t i = lo; i < hi; i++) {
            float d = g[i] + wd * z[i];
            buf[i] = mu * buf[i] + d;
            x[i] -= lr * (d + mu * buf[i]);
        }
    } else {
        for (size_t i = lo; i < hi; i++) {
            float d = g[i] + wd * z[i];
            buf[i] = mu * buf[i] + d;
            x[i] -= lr * buf[i];
        }
    }
}

static void s_sgd_worker(void *arg, int t, int nt)
{
    const s_sgd_job *j = arg;
    size_t lo, hi;
    nn_pool_share(j->n, t, nt, 16, &lo, &hi);
    s_sgd_range(j, lo, hi);
}

/* Element ranges split over the pool (nn_pool.h): every element's update is
 * the same arithmetic whichever thread runs it, so the same bits for any
 * thread count. */
void nn_sgd_step_at(nn_sgd *s, float *x, const float *g, const float *z, float lr)
{
    const size_t n = s->mom.numel;
    s->last_lr = lr;
    if (s->cfg.qgm)
        memcpy(s->prev.data, x, n * sizeof *x);
    s_sgd_job j = {x, s->mom.data, g, z, n, lr, s->cfg.momentum, s->cfg.weight_decay,
                   s->cfg.qgm, s->cfg.nesterov};
    int nt = nn_pool_threads();
    while (nt > 1 && n / (size_t)nt < ((size_t)1 << 15))
        nt--;
    nn_pool_run(nt, s_sgd_worker, &j);
}

void nn_sgd_after_mix(nn_sgd *s, const float *x)
{
    if (!s->cfg.qgm || s->last_lr <= 0)
        return;
    const float beta = s->cfg.qgm_beta, inv = 1.0f / s->last_lr;
    float *m = s->mom.data;
    const float *prev = s->prev.data;
    for (size_t i = 0; i < s->mom.numel; i++)
        m[i] = beta * m[i] + (1.0f - beta) * (prev[i] - x[i]) * inv;
}

float nn_lr_at(const nn_lr_schedule *s, double epoch)
{
    double lr = s->base_lr;
    for (int i = 0; i < s->nmilestones; i++)
        if (epoch >= s->milestones[i])
            lr *= s->gamma;
    if (s->warmup_epochs > 0 && epoch < s->warmup_epochs)
        lr *= 0.1 + 0.9 * epoch / s->warmup_epochs;
    return (float)lr;
}

int nn_lr_parse_milestones(nn_lr_schedule *s, const char *text, char *err, size_t errlen)
{
    s->nmilestones = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || v < 0)
            return nn_errf(err, errlen, "bad milestone list '%s': expected epochs like 30,45",
                           text);
        if (s->nmilestones == (int)(sizeof s->milestones / sizeof s->milestones[0]))
            return nn_errf(err, errlen, "too many milestones in '%s' (at most 8)", text);
        if (s->nmilestones && v <= s->milestones[s->nmilestones - 1])
            return nn_errf(err, errlen, "milestones in '%s' must increase", text);
        s->milestones[s->nmilestones++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return nn_errf(err, errlen, "bad milestone list '%s': expected epochs like 30,45",
                           text);
    }
    return 0;
}
