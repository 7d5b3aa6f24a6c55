/* nn_optim — SGD with (Nesterov) momentum and weight decay over the flat
 * parameter vector, learning-rate schedules, and quasi-global momentum.
 *
 * Owns:    the momentum buffer (one arena of the parameter layout) and, with
 *          quasi-global momentum, the copy of x_t taken before a step.
 * Exposes: nn_sgd_* and nn_lr_*.
 * Callers: node/ training loops (single node, simulator, gossip node).
 *
 * Local step (PyTorch's SGD, docs/design.md §3):  d = g + wd*x;  buf = mu*buf + d;
 *   x -= lr * (nesterov ? d + mu*buf : buf).
 * Quasi-global momentum (Lin et al. 2021, docs/design.md §3): the step uses the
 *   buffer m as above, but m is not updated from the local gradient: after
 *   the gossip step, m = beta*m + (1-beta)*(x_t - x_{t+1})/lr, per element
 *   (x_t saved by nn_sgd_step, x_{t+1} the mixed parameters).
 */
#ifndef NN_OPTIM_H
#define NN_OPTIM_H

#include <stddef.h>

#include "nn/nn_core.h"

typedef struct {
    float momentum;      /* 0.9 */
    float weight_decay;  /* 1e-4 */
    int   nesterov;      /* 1 */
    int   qgm;           /* quasi-global momentum */
    float qgm_beta;      /* 0.9 */
} nn_sgd_config;

typedef struct {
    nn_sgd_config cfg;
    nn_arena      mom;     /* momentum buffer (parameter layout) */
    nn_arena      prev;    /* x_t for quasi-global momentum, else empty */
    float         last_lr;
} nn_sgd;

nn_sgd_config nn_sgd_defaults(void);
void nn_sgd_init(nn_sgd *s, const nn_arena *layout, const nn_sgd_config *cfg);
void nn_sgd_free(nn_sgd *s);
/* x (n) -= lr * update(g); g is not modified. */
void nn_sgd_step(nn_sgd *s, float *x, const float *g, float lr);
/* The same with weight decay taken at z instead of x: with push-sum the
 * gradient is evaluated at the de-biased z = x/psi, and so is the decay
 * term (d = g + wd*z).  z may equal x. */
void nn_sgd_step_at(nn_sgd *s, float *x, const float *g, const float *z, float lr);
/* Quasi-global momentum update after mixing (no-op without qgm). x is the
 * parameter vector after the gossip step (x_{t+1}). */
void nn_sgd_after_mix(nn_sgd *s, const float *x);

typedef struct {
    float  base_lr;
    double warmup_epochs;  /* linear from base_lr/10 to base_lr; 0 = none */
    double milestones[8];  /* epochs at which lr is multiplied by gamma */
    int    nmilestones;
    float  gamma;          /* 0.1 */
} nn_lr_schedule;

/* Learning rate at a (fractional) epoch. */
float nn_lr_at(const nn_lr_schedule *s, double epoch);
/* Parses "30,45" into milestones; -1 with a message on bad input. */
int nn_lr_parse_milestones(nn_lr_schedule *s, const char *text, char *err, size_t errlen);

#endif
