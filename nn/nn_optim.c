/* nn_optim — see nn_optim.h. */
#include "nn/nn_optim.h"

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

void nn_sgd_step_at(nn_sgd *s, float *x, const float *g, const float *z, float lr)
{
    const size_t n = s->mom.numel;
    const float mu = s->cfg.momentum, wd = s->cfg.weight_decay;
    float *buf = s->mom.data;
    s->last_lr = lr;
    if (s->cfg.qgm) {
        /* The buffer is the quasi-global momentum: read, not updated here. */
        memcpy(s->prev.data, x, n * sizeof *x);
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * z[i];
            float v = mu * buf[i] + d;
            x[i] -= lr * (s->cfg.nesterov ? d + mu * v : v);
        }
        return;
    }
    if (s->cfg.nesterov) {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * z[i];
            buf[i] = mu * buf[i] + d;
            x[i] -= lr * (d + mu * buf[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * z[i];
            buf[i] = mu * buf[i] + d;
            x[i] -= lr * buf[i];
        }
    }
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
