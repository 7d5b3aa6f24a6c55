/* nn_layers — FP32 layer kernels other than convolution (see nn_layers.h;
 * conv lives in nn_conv.c).
 *
 * Owns:    linear (sgemm), EvoNorm-S0, BatchNorm2d, ReLU, add, max/avg
 *          pooling, global average pooling, softmax cross-entropy.
 * Exposes: the functions declared in nn_layers.h.
 * Callers: nn_model_ops.c (the FP32 op classes), nn_model.c (the loss), lowprec/,
 *          tests/test_nn_conv.c, tests/test_nn_layers.c, bench.
 *
 * Dimension legend: N batch, C channels, HW = H*W pixels per plane, G groups
 * (C/G consecutive channels each), F/OF features, K classes or pool window,
 * S pool stride.  Every activation tensor is NCHW, contiguous.
 * Reductions over a plane are summed in float per plane and in double across
 * planes, which keeps the error small without slowing the inner loops.
 */
#include "nn/nn_layers.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "nn/nn_kern.h"
#include "nn/nn_layers_simd.h"

#define NN_NORM_EPS 1e-5f

/* ---- linear -------------------------------------------------------------- */

void nn_linear_forward(float *out, const float *in, const float *w, const float *b, int N, int F,
                       int OF)
{
    /* out (N,OF) = in (N,F) @ w^T (F,OF) + b */
    if (b) {
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OF, b, sizeof(float) * (size_t)OF);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OF, F, 1.0f, in, F, w, F,
                b ? 1.0f : 0.0f, out, OF);
}

void nn_linear_forward_ref(float *out, const float *in, const float *w, const float *b, int N,
                           int F, int OF)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++) {
            float acc = b ? b[o] : 0.0f;
            for (int f = 0; f < F; f++)
                acc += in[(size_t)n * F + f] * w[(size_t)o * F + f];
            out[(size_t)n * OF + o] = acc;
        }
}

void nn_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, int N, int F, int OF)
{
    /* out = in @ w^T + b  =>  dw += dout^T @ in, din = dout @ w, db += sum_n dout */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OF, F, N, 1.0f, dout, OF, in, F, 1.0f,
                dw, F);
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, F, OF, 1.0f, dout, OF, w, F,
                    0.0f, din, F);
    if (db)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OF; o++)
                db[o] += dout[(size_t)n * OF + o];
}

void nn_linear_backward_ref(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, int N, int F, int OF)
{
    if (din)
        memset(din, 0, sizeof(float) * (size_t)N * F);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++) {
            float g = dout[(size_t)n * OF + o];
            if (db)
                db[o] += g;
            for (int f = 0; f < F; f++) {
                dw[(size_t)o * F + f] += g * in[(size_t)n * F + f];
                if (din)
                    din[(size_t)n * F + f] += g * w[(size_t)o * F + f];
            }
        }
}

/* ---- EvoNorm-S0 ----------------------------------------------------------- */

static inline float s_sigmoid(float u)
{
    return 1.0f / (1.0f + expf(-u));
}

/* Mean and population variance of the (C/G)*HW values of one group,
 * two passes (float per plane, double across planes). */
static void s_group_stats(const float *x, int cpg, int HW, double *mean_out, double *var_out)
{
    double s = 0.0;
    for (int c = 0; c < cpg; c++) {
        const float *p = x + (size_t)c * HW;
        float a = 0.0f;
        for (int i = 0; i < HW; i++)
            a += p[i];
        s += a;
    }
    const double m = (double)cpg * HW;
    const double mean = s / m;
    const float mf = (float)mean;
    double v = 0.0;
    for (int c = 0; c < cpg; c++) {
        const float *p = x + (size_t)c * HW;
        float a = 0.0f;
        for (int i = 0; i < HW; i++) {
            float dlt = p[i] - mf;
            a += dlt * dlt;
        }
        v += a;
    }
    *mean_out = mean;
    *var_out = v / m;
}

void nn_evonorm_s0_forward_ref(float *out, float *save_istd, const float *in,
                               const float *gamma, const float *beta, const float *v, int N,
                               int C, int HW, int G)
{
    assert(G > 0 && C % G == 0);
    const int cpg = C / G;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const size_t base = ((size_t)n * C + (size_t)g * cpg) * HW;
            double mean, var;
            s_group_stats(in + base, cpg, HW, &mean, &var);
            const float istd = (float)(1.0 / sqrt(var + (double)NN_NORM_EPS));
            save_istd[(size_t)n * G + g] = istd;
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                const float *x = in + base + (size_t)cc * HW;
                float *o = out + base + (size_t)cc * HW;
                const float vc = v[c], sc = istd * gamma[c], bc = beta[c];
                for (int i = 0; i < HW; i++)
                    o[i] = x[i] * s_sigmoid(vc * x[i]) * sc + bc;
            }
        }
}

void nn_evonorm_s0_backward_ref(float *din, float *dgamma, float *dbeta, float *dv,
                                const float *dout, const float *in, const float *save_istd,
                                const float *gamma, const float *v, int N, int C, int HW, int G)
{
    assert(G > 0 && C % G == 0);
    const int cpg = C / G;
    const double m = (double)cpg * HW;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const size_t base = ((size_t)n * C + (size_t)g * cpg) * HW;
            const float istd = save_istd[(size_t)n * G + g];
            double mean = 0.0;
            /* pass 1: mean of x, d istd = sum dout*gamma*num, parameter grads
             * out = num * istd * gamma + beta, num = x * sigmoid(v*x) */
            double distd = 0.0;
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                const float *x = in + base + (size_t)cc * HW;
                const float *dy = dout + base + (size_t)cc * HW;
                const float vc = v[c];
                float sx = 0.0f, sdb = 0.0f, sdyn = 0.0f, sdv = 0.0f;
                for (int i = 0; i < HW; i++) {
                    const float sg = s_sigmoid(vc * x[i]);
                    const float num = x[i] * sg;
                    sx += x[i];
                    sdb += dy[i];
                    sdyn += dy[i] * num;
                    /* d num / d v = x^2 sg (1-sg) */
                    sdv += dy[i] * x[i] * x[i] * sg * (1.0f - sg);
                }
                mean += sx;
                dbeta[c] += sdb;
                dgamma[c] += sdyn * istd;
                dv[c] += sdv * istd * gamma[c];
                distd += (double)sdyn * gamma[c];
            }
            mean /= m;
            if (!din)
                continue;
            /* istd = (var+eps)^-1/2 => dvar = -1/2 istd^3 distd;
             * var = mean((x-mean)^2) => dx += dvar * 2 (x-mean) / m */
            const double dvar = -0.5 * (double)istd * istd * istd * distd;
            const float k = (float)(2.0 * dvar / m);
            const float mf = (float)mean;
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                const float *x = in + base + (size_t)cc * HW;
                const float *dy = dout + base + (size_t)cc * HW;
                float *dx = din + base + (size_t)cc * HW;
                const float vc = v[c], gi = gamma[c] * istd;
                for (int i = 0; i < HW; i++) {
                    const float sg = s_sigmoid(vc * x[i]);
                    /* d num / d x = sg + v x sg (1-sg) */
                    const float dnum = sg + vc * x[i] * sg * (1.0f - sg);
                    dx[i] = dy[i] * gi * dnum + k * (x[i] - mf);
                }
            }
        }
}

/* ---- EvoNorm-S0, tuned: the same arithmetic, plane by plane through the
 * kernel table (nn_kern.h: the AVX2 kernels of nn_layers_avx2.c where the
 * CPU has them, else the scalar plane functions below, which use libm
 * expf). ---- */

float nn_sum_ref(const float *x, size_t n)
{
    float a = 0.0f;
    for (size_t i = 0; i < n; i++)
        a += x[i];
    return a;
}

float nn_sqdev_ref(const float *x, size_t n, float mean)
{
    float a = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float dl = x[i] - mean;
        a += dl * dl;
    }
    return a;
}

void nn_evo_fwd_ref(float *o, const float *x, size_t n, float v, float sc, float bc)
{
    for (size_t i = 0; i < n; i++)
        o[i] = x[i] * s_sigmoid(v * x[i]) * sc + bc;
}

void nn_evo_bwd_sums_ref(float sums[4], const float *x, const float *dy, size_t n, float v)
{
    float sx = 0.0f, sdb = 0.0f, sdyn = 0.0f, sdv = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float sg = s_sigmoid(v * x[i]), num = x[i] * sg;
        sx += x[i];
        sdb += dy[i];
        sdyn += dy[i] * num;
        sdv += dy[i] * num * x[i] * (1.0f - sg);
    }
    sums[0] += sx;
    sums[1] += sdb;
    sums[2] += sdyn;
    sums[3] += sdv;
}

void nn_evo_bwd_dx_ref(float *dx, const float *x, const float *dy, size_t n, float v, float gi,
                       float k, float mean)
{
    for (size_t i = 0; i < n; i++) {
        const float vx = v * x[i], sg = s_sigmoid(vx);
        dx[i] = dy[i] * gi * (sg * (1.0f + vx * (1.0f - sg))) + k * (x[i] - mean);
    }
}

/* Threaded EvoNorm: samples [N*t/nt, N*(t+1)/nt) per thread (nn_par_run).
 * Forward has no cross-sample reduction; backward accumulates the parameter
 * gradients of each thread into its own zeroed partials, added to the
 * caller's dgamma/dbeta/dv in thread order (deterministic per count). */
#define S_EVO_PAR_MAXC 512

typedef struct {
    float *out, *save_istd, *din, *dgamma, *dbeta, *dv;
    const float *in, *gamma, *beta, *v, *dout, *istd;
    int N, C, HW, G;
    float part[NN_PAR_MAX_THREADS][3][S_EVO_PAR_MAXC];
} s_evo_job;

static void s_evo_fwd_samples(float *out, float *save_istd, const float *in, const float *gamma,
                              const float *beta, const float *v, int n_lo, int n_hi, int C,
                              int HW, int G)
{
    const nn_kern_t *ops = nn_kern();
    const int cpg = C / G;
    const double m = (double)cpg * HW;
    for (int n = n_lo; n < n_hi; n++)
        for (int g = 0; g < G; g++) {
            const size_t base = ((size_t)n * C + (size_t)g * cpg) * HW;
            double s = 0.0, var = 0.0;
            for (int cc = 0; cc < cpg; cc++)
                s += ops->sum(in + base + (size_t)cc * HW, (size_t)HW);
            const float mean = (float)(s / m);
            for (int cc = 0; cc < cpg; cc++)
                var += ops->sqdev(in + base + (size_t)cc * HW, (size_t)HW, mean);
            const float istd = (float)(1.0 / sqrt(var / m + (double)NN_NORM_EPS));
            save_istd[(size_t)n * G + g] = istd;
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                ops->evo_fwd(out + base + (size_t)cc * HW, in + base + (size_t)cc * HW, (size_t)HW,
                            v[c], istd * gamma[c], beta[c]);
            }
        }
}

static void s_evo_bwd_samples(float *din, float *dgamma, float *dbeta, float *dv,
                              const float *dout, const float *in, const float *save_istd,
                              const float *gamma, const float *v, int n_lo, int n_hi, int C,
                              int HW, int G)
{
    const nn_kern_t *ops = nn_kern();
    const int cpg = C / G;
    const double m = (double)cpg * HW;
    for (int n = n_lo; n < n_hi; n++)
        for (int g = 0; g < G; g++) {
            const size_t base = ((size_t)n * C + (size_t)g * cpg) * HW;
            const float istd = save_istd[(size_t)n * G + g];
            /* out = num * istd * gamma + beta, num = x * sigmoid(v*x) */
            double mean = 0.0, distd = 0.0;
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                ops->evo_bwd_sums(sums, in + base + (size_t)cc * HW, dout + base + (size_t)cc * HW,
                                 (size_t)HW, v[c]);
                mean += sums[0];
                dbeta[c] += sums[1];
                dgamma[c] += sums[2] * istd;
                dv[c] += sums[3] * istd * gamma[c];
                distd += (double)sums[2] * gamma[c];
            }
            if (!din)
                continue;
            /* istd = (var+eps)^-1/2, var = mean((x-mean)^2) */
            const double dvar = -0.5 * (double)istd * istd * istd * distd;
            const float k = (float)(2.0 * dvar / m);
            const float mf = (float)(mean / m);
            for (int cc = 0; cc < cpg; cc++) {
                const int c = g * cpg + cc;
                ops->evo_bwd_dx(din + base + (size_t)cc * HW, in + base + (size_t)cc * HW,
                               dout + base + (size_t)cc * HW, (size_t)HW, v[c], gamma[c] * istd, k,
                               mf);
            }
        }
}

static void s_evo_fwd_worker(void *arg, int t, int nt)
{
    s_evo_job *j = arg;
    int lo = (int)((long long)j->N * t / nt), hi = (int)((long long)j->N * (t + 1) / nt);
    s_evo_fwd_samples(j->out, j->save_istd, j->in, j->gamma, j->beta, j->v, lo, hi, j->C, j->HW,
                      j->G);
}

static void s_evo_bwd_worker(void *arg, int t, int nt)
{
    s_evo_job *j = arg;
    int lo = (int)((long long)j->N * t / nt), hi = (int)((long long)j->N * (t + 1) / nt);
    float *pg = j->part[t][0], *pb = j->part[t][1], *pv = j->part[t][2];
    memset(j->part[t], 0, sizeof j->part[t]);
    s_evo_bwd_samples(j->din, pg, pb, pv, j->dout, j->in, j->istd, j->gamma, j->v, lo, hi, j->C,
                      j->HW, j->G);
}

/* Threads worth using for N samples of C channels (1 = run inline). */
static int s_evo_threads(int N, int C, int HW)
{
    int nt = nn_par_threads();
    if (nt > N)
        nt = N;
    if (C > S_EVO_PAR_MAXC || (size_t)N * C * HW < 16384)
        nt = 1;
    return nt;
}

void nn_evonorm_s0_forward(float *out, float *save_istd, const float *in, const float *gamma,
                           const float *beta, const float *v, int N, int C, int HW, int G)
{
    assert(G > 0 && C % G == 0);
    const int nt = s_evo_threads(N, C, HW);
    if (nt <= 1) {
        s_evo_fwd_samples(out, save_istd, in, gamma, beta, v, 0, N, C, HW, G);
        return;
    }
    static _Thread_local s_evo_job j; /* partials are large: not on the stack */
    j.out = out, j.save_istd = save_istd, j.in = in, j.gamma = gamma, j.beta = beta, j.v = v;
    j.N = N, j.C = C, j.HW = HW, j.G = G;
    nn_par_run(nt, s_evo_fwd_worker, &j);
}

void nn_evonorm_s0_backward(float *din, float *dgamma, float *dbeta, float *dv, const float *dout,
                            const float *in, const float *save_istd, const float *gamma,
                            const float *v, int N, int C, int HW, int G)
{
    assert(G > 0 && C % G == 0);
    const int nt = s_evo_threads(N, C, HW);
    if (nt <= 1) {
        s_evo_bwd_samples(din, dgamma, dbeta, dv, dout, in, save_istd, gamma, v, 0, N, C, HW, G);
        return;
    }
    static _Thread_local s_evo_job j;
    j.din = din, j.dout = dout, j.in = in, j.istd = save_istd, j.gamma = gamma, j.v = v;
    j.N = N, j.C = C, j.HW = HW, j.G = G;
    nn_par_run(nt, s_evo_bwd_worker, &j);
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) {
            dgamma[c] += j.part[t][0][c];
            dbeta[c] += j.part[t][1][c];
            dv[c] += j.part[t][2][c];
        }
}

/* ---- BatchNorm2d ------------------------------------------------------------ */

void nn_batchnorm_forward_train(float *out, float *save_mean, float *save_istd, float *run_mean,
                                float *run_var, const float *in, const float *gamma,
                                const float *beta, int N, int C, int HW)
{
    const double M = (double)N * HW;
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            float a = 0.0f;
            for (int i = 0; i < HW; i++)
                a += x[i];
            s += a;
        }
        const double mean = s / M;
        const float mf = (float)mean;
        double v = 0.0;
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            float a = 0.0f;
            for (int i = 0; i < HW; i++) {
                float dlt = x[i] - mf;
                a += dlt * dlt;
            }
            v += a;
        }
        const double var = v / M;
        const float istd = (float)(1.0 / sqrt(var + (double)NN_NORM_EPS));
        save_mean[c] = mf;
        save_istd[c] = istd;
        if (run_mean)
            run_mean[c] = 0.9f * run_mean[c] + 0.1f * mf;
        if (run_var)
            run_var[c] = 0.9f * run_var[c] + 0.1f * (float)(M > 1 ? var * M / (M - 1) : var);
        const float sc = istd * gamma[c], sh = beta[c] - mf * sc;
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            float *o = out + ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                o[i] = x[i] * sc + sh;
        }
    }
}

void nn_batchnorm_forward_eval(float *out, const float *in, const float *run_mean,
                               const float *run_var, const float *gamma, const float *beta, int N,
                               int C, int HW)
{
    for (int c = 0; c < C; c++) {
        const float istd = 1.0f / sqrtf(run_var[c] + NN_NORM_EPS);
        const float sc = istd * gamma[c], sh = beta[c] - run_mean[c] * sc;
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            float *o = out + ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                o[i] = x[i] * sc + sh;
        }
    }
}

void nn_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout,
                           const float *in, const float *save_mean, const float *save_istd,
                           const float *gamma, int N, int C, int HW)
{
    const double M = (double)N * HW;
    for (int c = 0; c < C; c++) {
        const float mean = save_mean[c], istd = save_istd[c];
        /* out = xhat * gamma + beta, xhat = (x - mean) * istd */
        double sdy = 0.0, sdyx = 0.0;
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            const float *dy = dout + ((size_t)n * C + c) * HW;
            float a = 0.0f, b = 0.0f;
            for (int i = 0; i < HW; i++) {
                a += dy[i];
                b += dy[i] * (x[i] - mean);
            }
            sdy += a;
            sdyx += b;
        }
        sdyx *= istd; /* sum dy * xhat */
        dbeta[c] += (float)sdy;
        dgamma[c] += (float)sdyx;
        if (!din)
            continue;
        /* din = gamma*istd * (dy - mean(dy) - xhat * mean(dy*xhat)) */
        const float k = gamma[c] * istd;
        const float mdy = (float)(sdy / M), mdyx = (float)(sdyx / M);
        for (int n = 0; n < N; n++) {
            const float *x = in + ((size_t)n * C + c) * HW;
            const float *dy = dout + ((size_t)n * C + c) * HW;
            float *dx = din + ((size_t)n * C + c) * HW;
            for (int i = 0; i < HW; i++)
                dx[i] = k * (dy[i] - mdy - (x[i] - mean) * istd * mdyx);
        }
    }
}

/* ---- elementwise ------------------------------------------------------------ */

void nn_relu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

/* The gradient is selected without a branch (dout read unconditionally, a
 * compare mask on its bits): the signs of a layer's inputs are random, and
 * the branchy loop mispredicted half of them (a fifth of a small MLP's
 * step).  The same values as `in > 0 ? dout : 0`. */
void nn_relu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t g;
        memcpy(&g, &dout[i], 4);
        g &= -(uint32_t)(in[i] > 0.0f);
        memcpy(&din[i], &g, 4);
    }
}

void nn_add_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void nn_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p,
                        nn_rng *r)
{
    assert(p >= 0.0f && p < 1.0f);
    const float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        mask[i] = nn_rng_uniform(r) >= p;
        out[i] = mask[i] ? in[i] * scale : 0.0f;
    }
}

void nn_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p)
{
    const float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++)
        din[i] = mask[i] ? dout[i] * scale : 0.0f;
}

/* ---- pooling -------------------------------------------------------------- */

void nn_maxpool2_row_ref(float *o, uint32_t *am, const float *r0, const float *r1, uint32_t base,
                         uint32_t W, size_t ow)
{
    for (size_t k = 0; k < ow; k++) {
        const uint32_t i = (uint32_t)(2 * k);
        float bv = r0[i];
        uint32_t best = base + i;
        best = r0[i + 1] > bv ? base + i + 1 : best;
        bv = r0[i + 1] > bv ? r0[i + 1] : bv;
        best = r1[i] > bv ? base + W + i : best;
        bv = r1[i] > bv ? r1[i] : bv;
        best = r1[i + 1] > bv ? base + W + i + 1 : best;
        bv = r1[i + 1] > bv ? r1[i + 1] : bv;
        o[k] = bv;
        am[k] = best;
    }
}

/* 2x2 windows, stride 2: a row of windows at a time (the level's kernel). */
static void s_maxpool_2x2(float *out, uint32_t *argmax, const float *in, int N, int C, int H,
                          int W)
{
    const nn_kern_t *ops = nn_kern();
    const int OH = H / 2, OW = W / 2;
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        const float *x = in + pl * H * W;
        for (int oh = 0; oh < OH; oh++) {
            const float *r0 = x + (size_t)2 * oh * W;
            const size_t o = pl * OH * OW + (size_t)oh * OW;
            ops->maxpool2_row(out + o, argmax + o, r0, r0 + W, (uint32_t)(2 * oh * W),
                              (uint32_t)W, (size_t)OW);
        }
    }
}

void nn_maxpool_forward(float *out, uint32_t *argmax, const float *in, int N, int C, int H, int W,
                        int K, int S)
{
    assert(K > 0 && S > 0 && H >= K && W >= K);
    if (K == 2 && S == 2)
        s_maxpool_2x2(out, argmax, in, N, C, H, W);
    else
        nn_maxpool_forward_ref(out, argmax, in, N, C, H, W, K, S);
}

void nn_maxpool_forward_ref(float *out, uint32_t *argmax, const float *in, int N, int C, int H,
                            int W, int K, int S)
{
    assert(K > 0 && S > 0 && H >= K && W >= K);
    const int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        const float *x = in + pl * H * W;
        float *o = out + pl * OH * OW;
        uint32_t *am = argmax + pl * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                uint32_t best = (uint32_t)(oh * S * W + ow * S);
                float bv = x[best];
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++) {
                        uint32_t idx = (uint32_t)((oh * S + kh) * W + ow * S + kw);
                        if (x[idx] > bv) {
                            bv = x[idx];
                            best = idx;
                        }
                    }
                o[oh * OW + ow] = bv;
                am[oh * OW + ow] = best;
            }
    }
}

void nn_maxpool_backward(float *din, const float *dout, const uint32_t *argmax, int N, int C,
                         int H, int W, int K, int S)
{
    const int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    memset(din, 0, sizeof(float) * (size_t)N * C * H * W);
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        float *dx = din + pl * H * W;
        const float *dy = dout + pl * OH * OW;
        const uint32_t *am = argmax + pl * OH * OW;
        for (int i = 0; i < OH * OW; i++) {
            assert(am[i] < (uint32_t)(H * W));
            dx[am[i]] += dy[i];
        }
    }
}

void nn_avgpool_forward(float *out, const float *in, int N, int C, int H, int W, int K, int S)
{
    assert(K > 0 && S > 0 && H >= K && W >= K);
    const int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    const float inv = 1.0f / (float)(K * K);
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        const float *x = in + pl * H * W;
        float *o = out + pl * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float s = 0.0f;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++)
                        s += x[(oh * S + kh) * W + ow * S + kw];
                o[oh * OW + ow] = s * inv;
            }
    }
}

void nn_avgpool_backward(float *din, const float *dout, int N, int C, int H, int W, int K, int S)
{
    const int OH = (H - K) / S + 1, OW = (W - K) / S + 1;
    const float inv = 1.0f / (float)(K * K);
    memset(din, 0, sizeof(float) * (size_t)N * C * H * W);
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        float *dx = din + pl * H * W;
        const float *dy = dout + pl * OH * OW;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const float g = dy[oh * OW + ow] * inv;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++)
                        dx[(oh * S + kh) * W + ow * S + kw] += g;
            }
    }
}

void nn_gap_forward(float *out, const float *in, int N, int C, int HW)
{
    const float inv = 1.0f / (float)HW;
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        const float *x = in + pl * HW;
        float s = 0.0f;
        for (int i = 0; i < HW; i++)
            s += x[i];
        out[pl] = s * inv;
    }
}

void nn_gap_backward(float *din, const float *dout, int N, int C, int HW)
{
    const float inv = 1.0f / (float)HW;
    for (size_t pl = 0; pl < (size_t)N * C; pl++) {
        float *dx = din + pl * HW;
        const float g = dout[pl] * inv;
        for (int i = 0; i < HW; i++)
            dx[i] = g;
    }
}

/* ---- softmax cross-entropy ------------------------------------------------- */

float nn_softmax_xent_forward(float *probs, const float *logits, const uint8_t *labels, int N,
                              int K)
{
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * K;
        float *p = probs + (size_t)n * K;
        assert(labels[n] < K);
        float mx = z[0];
        for (int k = 1; k < K; k++)
            if (z[k] > mx)
                mx = z[k];
        double s = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - mx);
            s += p[k];
        }
        const float inv = (float)(1.0 / s);
        for (int k = 0; k < K; k++)
            p[k] *= inv;
        /* -log softmax(z)[y] = log(sum exp(z - mx)) - (z[y] - mx) */
        loss += log(s) - ((double)z[labels[n]] - mx);
    }
    return (float)(loss / N);
}

void nn_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int N,
                              int K)
{
    const float inv = 1.0f / (float)N;
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * K;
        float *d = dlogits + (size_t)n * K;
        assert(labels[n] < K);
        for (int k = 0; k < K; k++)
            d[k] = p[k] * inv;
        d[labels[n]] -= inv;
    }
}
