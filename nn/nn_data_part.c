/* nn_data_part — the Dirichlet non-IID partition.
 *
 * Owns:    gamma sampling (Marsaglia and Tsang's method, with the
 *          u^(1/alpha) boost for alpha < 1) on nn_rng, and the per-class
 *          Dirichlet split of a training set over nodes.
 * Exposes: nn_partition_dirichlet (nn_data.h).
 * Callers: node/ (--partition dirichlet:ALPHA), tests.
 */
#include "nn/nn_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One Gamma(alpha, 1) draw. */
static double s_gamma(nn_rng *r, double alpha)
{
    if (alpha < 1.0) {
        double u = nn_rng_uniform(r);
        return s_gamma(r, alpha + 1.0) * pow(u, 1.0 / alpha);
    }
    double d = alpha - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = nn_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = nn_rng_uniform(r);
        if (u > 0 && log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* p[0..k) ~ Dir(alpha); all mass on one node if every draw underflowed. */
static void s_dirichlet(nn_rng *r, double alpha, int k, double *p)
{
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += p[i] = s_gamma(r, alpha);
    if (!(sum > 0)) {
        memset(p, 0, (size_t)k * sizeof *p);
        p[nn_rng_below(r, (uint32_t)k)] = 1;
        return;
    }
    for (int i = 0; i < k; i++)
        p[i] /= sum;
}

int nn_partition_dirichlet(const uint8_t *labels, size_t n, int classes, int nodes,
                           double alpha, uint64_t seed, uint32_t **idx, size_t *count,
                           char *err, size_t errlen)
{
    for (int k = 0; k < nodes; k++) {
        idx[k] = NULL;
        count[k] = 0;
    }
    if (!(alpha > 0 && alpha <= 1e6))
        return nn_errf(err, errlen, "dirichlet alpha %g out of range (expected 0 < alpha <= "
                       "1e6)", alpha);
    if (nodes < 1 || nodes > 65536)
        return nn_errf(err, errlen, "partition over %d nodes (expected 1..65536)", nodes);
    if (classes < 1 || classes > 256)
        return nn_errf(err, errlen, "%d classes (expected 1..256)", classes);
    if (n > UINT32_MAX)
        return nn_errf(err, errlen, "%zu samples: too many for 32-bit indices", n);
    for (size_t i = 0; i < n; i++)
        if (labels[i] >= classes)
            return nn_errf(err, errlen, "label %u of sample %zu out of range (expected 0..%d)",
                           (unsigned)labels[i], i, classes - 1);
    nn_rng rng;
    nn_rng_seed(&rng, seed);
    uint32_t *cls = nn_xmalloc((n ? n : 1) * sizeof *cls);
    double *p = nn_xmalloc((size_t)nodes * sizeof *p);
    for (int k = 0; k < nodes; k++)
        idx[k] = nn_xmalloc((n ? n : 1) * sizeof **idx);
    for (int c = 0; c < classes; c++) {
        size_t nc = 0;
        for (size_t i = 0; i < n; i++)
            if (labels[i] == c)
                cls[nc++] = (uint32_t)i;
        s_dirichlet(&rng, alpha, nodes, p);
        nn_rng_shuffle_u32(&rng, cls, nc);
        double cum = 0;
        size_t from = 0;
        for (int k = 0; k < nodes; k++) {
            cum += p[k];
            size_t to = k == nodes - 1 ? nc : (size_t)floor(cum * (double)nc);
            if (to > nc)
                to = nc;
            if (to < from)
                to = from;
            memcpy(idx[k] + count[k], cls + from, (to - from) * sizeof *cls);
            count[k] += to - from;
            from = to;
        }
    }
    free(cls);
    free(p);
    return 0;
}
