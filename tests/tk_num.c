/* tk_num — numeric helpers of the kernel tests (see tk_num.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "nn/nn_core.h"
#include "tests/tk_num.h"

float *tk_randn(nn_rng *r, size_t n, float scale)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = nn_rng_normal(r) * scale;
    return p;
}

float *tk_fill(size_t n, float v)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

float *tk_copy(const float *a, size_t n)
{
    float *p = nn_xmalloc(sizeof(float) * (n ? n : 1));
    memcpy(p, a, sizeof(float) * n);
    return p;
}

double *tk_to_double(const float *a, size_t n)
{
    double *p = nn_xmalloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = a[i];
    return p;
}

void tk_close_f(const char *what, const float *got, const float *want, size_t n, double atol,
                      double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s[%zu]: got %.9g want %.9g (atol %g rtol %g)", what, i, g, w, atol, rtol);
    }
}

void tk_close_d(const char *what, const float *got, const double *want, size_t n,
                      double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(fabs(g - w) <= atol + rtol * fabs(w)))
            fail_msg("%s[%zu]: got %.9g want %.9g (atol %g rtol %g)", what, i, g, w, atol, rtol);
    }
}

void tk_fd_check(const char *what, tk_loss_fn loss, void *ctx, double *x, size_t n,
                       const float *g, const float *g_base, double h, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * h);
        double an = (double)g[i] - (g_base ? (double)g_base[i] : 0.0);
        if (!(fabs(an - fd) <= atol + rtol * fabs(fd)))
            fail_msg("%s grad[%zu]: analytic %.9g finite-diff %.9g", what, i, an, fd);
    }
}
