/* topo_spectral — eigenvalues of mixing matrices and the spectral gap.
 *
 * Owns:    topo_eigenvalues (LAPACK dgeev from OpenBLAS: a general real
 *          matrix, since W need not be symmetric), topo_lambda2,
 *          topo_spectral_gap, topo_period_product.
 * Callers: topo_report.c, tests (which check it against closed forms and an
 *          independent repeated-squaring estimate).
 *
 * OpenBLAS ships LAPACK's dgeev_ but Debian installs no lapack.h next to
 * cblas.h, so the Fortran prototype is declared here (gfortran passes the
 * lengths of character arguments as trailing size_t values).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "nn/nn_core.h"
#include "topology/topo.h"

void dgeev_(const char *jobvl, const char *jobvr, const int *n, double *a, const int *lda,
            double *wr, double *wi, double *vl, const int *ldvl, double *vr, const int *ldvr,
            double *work, const int *lwork, int *info, size_t jobvl_len, size_t jobvr_len);

typedef struct {
    double re, im, mod;   /* mod: modulus rounded to 1e-12, so that equal
                             moduli (1 and 1 - 1e-16) tie and ties go by
                             real part: lambda_1 = 1 comes first */
} s_eig;

/* Decreasing modulus; ties by decreasing real part, then imaginary part. */
static int s_cmp(const void *a, const void *b)
{
    const s_eig *x = a, *y = b;
    if (x->mod != y->mod)
        return x->mod < y->mod ? 1 : -1;
    if (x->re != y->re)
        return x->re < y->re ? 1 : -1;
    if (x->im != y->im)
        return x->im < y->im ? 1 : -1;
    return 0;
}

int topo_eigenvalues(const double *w, int n, double *re, double *im)
{
    if (n < 1)
        return -1;
    /* W and W^T have the same eigenvalues, so the row-major copy can be
     * handed to column-major LAPACK as it is. */
    double *a = nn_xmalloc((size_t)n * (size_t)n * sizeof *a);
    memcpy(a, w, (size_t)n * (size_t)n * sizeof *a);
    int info = 0, lwork = -1, one = 1;
    double query = 0, dummy = 0;
    dgeev_("N", "N", &n, a, &n, re, im, &dummy, &one, &dummy, &one, &query, &lwork, &info, 1, 1);
    lwork = info == 0 && query >= 4.0 * n ? (int)query : 4 * n;
    double *work = nn_xmalloc((size_t)lwork * sizeof *work);
    info = 0;
    dgeev_("N", "N", &n, a, &n, re, im, &dummy, &one, &dummy, &one, work, &lwork, &info, 1, 1);
    free(work);
    free(a);
    if (info != 0)
        return -1;
    s_eig *e = nn_xmalloc((size_t)n * sizeof *e);
    for (int k = 0; k < n; k++) {
        e[k].re = re[k];
        e[k].im = im[k];
        e[k].mod = round(hypot(re[k], im[k]) * 1e12) / 1e12;
    }
    qsort(e, (size_t)n, sizeof *e, s_cmp);
    for (int k = 0; k < n; k++) {
        re[k] = e[k].re;
        im[k] = e[k].im;
    }
    free(e);
    return 0;
}

double topo_lambda2(const double *w, int n)
{
    if (n == 1)
        return 0.0;
    double *re = nn_xmalloc((size_t)n * sizeof *re), *im = nn_xmalloc((size_t)n * sizeof *im);
    double l2 = -1;
    if (topo_eigenvalues(w, n, re, im) == 0)
        l2 = hypot(re[1], im[1]);
    free(re);
    free(im);
    return l2;
}

double topo_spectral_gap(const double *w, int n)
{
    double l2 = topo_lambda2(w, n);
    return l2 < 0 ? -1.0 : 1.0 - l2;
}

void topo_period_product(const topo *t, double *out)
{
    int n = t->n;
    size_t nn = (size_t)n * (size_t)n;
    memcpy(out, t->sched[0].w, nn * sizeof *out);
    if (t->nsched == 1)
        return;
    double *tmp = nn_xmalloc(nn * sizeof *tmp);
    for (int s = 1; s < t->nsched; s++) {
        /* out = W_s * out */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, t->sched[s].w, n, out,
                    n, 0.0, tmp, n);
        memcpy(out, tmp, nn * sizeof *out);
    }
    free(tmp);
}
