/* lp_linear — the 8-bit fully connected layer and its fake-quant twin
 * (lp_layers.h).
 *
 * Owns:    out = x w^T + b on uint8 codes: forward and input gradient as
 *          exact integer GEMMs (lp_gemm) with the affine correction
 *          (lp_gemm_dequant), the weight gradient in FP32 (cblas) on the
 *          dequantized input codes; the fake-quant linear.
 * Exposes: the linear functions of lp_layers.h.
 * Callers: lp_model.c, tests, bench.
 * Threads: both integer GEMMs split the columns of their output (output
 *          features forward, input features backward) over nn_pool in
 *          blocks of LP_GEMM_NR, each thread packing its own columns of the
 *          weight codes and running the GEMM (on AMX: its own tiles) on
 *          them; the sums are exact integers, so every thread count gives
 *          the same bits.  Little work runs on the calling thread.
 */
#include "lowprec/lp_layers.h"

#include <cblas.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layer_common.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_pool.h"

/* ---- linear ------------------------------------------------------------ */

size_t lp_linear_saved_bytes(int N, int F, int OF)
{
    return (size_t)N * F + (size_t)OF * F;
}

/* Both GEMMs take the batch as A and the weight codes as B: forward
 * (N, F) x wq^T (F, OF), backward (N, OF) x wq (OF, F), so the output comes
 * out in the layout of `out` / `din`; packed A and packed B as large as
 * either needs. */
static size_t s_max(size_t a, size_t b)
{
    return a > b ? a : b;
}

size_t lp_linear_scratch_bytes(int N, int F, int OF)
{
    const int mx = F > OF ? F : OF;
    size_t s = 0;
    s += LP_ALIGN64(s_max(lp_gemm_pack_a_bytes(N, F), lp_gemm_pack_a_bytes(N, OF)));
    s += LP_ALIGN64(s_max(lp_gemm_pack_b_bytes(F, OF), lp_gemm_pack_b_bytes(OF, F)));
    s += LP_ALIGN64((size_t)mx * N * 4);
    s += LP_ALIGN64((size_t)N * 4);
    s += LP_ALIGN64((size_t)lp_gemm_np(mx) * 4);
    s += LP_ALIGN64((size_t)N * OF);
    s += LP_ALIGN64((size_t)N * F * sizeof(float));
    s += LP_ALIGN64((size_t)OF * 5);
    s += LP_ALIGN64((size_t)mx * sizeof(double));
    return s + 64;
}

/* The parts of the scratch (lp_linear_scratch_bytes), in its order: packed
 * batch codes Ap, packed weight codes Bp, the GEMM's sums Cm (N, F or OF),
 * the row sums SA (N) and column sums SB (F or OF); the gradient codes gq
 * (N, OF) and the dequantized input xf (N, F) of the backward; the
 * forward's bias read back bq (OF) and its codes. */
typedef struct {
    int8_t  *Ap;
    uint8_t *Bp, *gq, *bcodes;
    int32_t *Cm, *SA, *SB;
    float   *xf, *bq;
    double  *tw;
} s_lin_parts;

static s_lin_parts s_lin_carve(void *scratch, int N, int F, int OF)
{
    const int mx = F > OF ? F : OF;
    unsigned char *sp = (unsigned char *)scratch;
    s_lin_parts p;
    p.Ap = lp_take(&sp, s_max(lp_gemm_pack_a_bytes(N, F), lp_gemm_pack_a_bytes(N, OF)));
    p.Bp = lp_take(&sp, s_max(lp_gemm_pack_b_bytes(F, OF), lp_gemm_pack_b_bytes(OF, F)));
    p.Cm = lp_take(&sp, (size_t)mx * N * 4);
    p.SA = lp_take(&sp, (size_t)N * 4);
    p.SB = lp_take(&sp, (size_t)lp_gemm_np(mx) * 4);
    p.gq = lp_take(&sp, (size_t)N * OF);
    p.xf = lp_take(&sp, (size_t)N * F * sizeof(float));
    unsigned char *bpart = lp_take(&sp, (size_t)OF * 5);
    p.bq = (float *)(void *)bpart;
    p.bcodes = bpart + (size_t)OF * 4;
    p.tw = lp_take(&sp, (size_t)mx * sizeof(double));
    return p;
}

/* C (M, N at ldc) = A * B (lp_gemm_u8u8) with B(k, n) = B[k*rs + n*cs]
 * packed here, split by columns: thread t packs its columns [j0, j1)
 * (multiples of LP_GEMM_NR but the end) into the bytes of packed B from
 * lp_gemm_pack_b_bytes(K, j0) on (Bp holds lp_gemm_pack_b_bytes(K, N)),
 * and writes C's and colsum's columns [j0, j1). */
typedef struct {
    int32_t *C, *colsum;
    const int8_t *Ap;
    uint8_t *Bp;
    const uint8_t *B;
    ptrdiff_t rs, cs;
    int ldc, M, N, K;
} s_lin_gemm;

static void s_lin_gemm_worker(void *arg, int t, int nt)
{
    const s_lin_gemm *g = arg;
    size_t j0, j1;
    nn_pool_share((size_t)g->N, t, nt, LP_GEMM_NR, &j0, &j1);
    if (j1 <= j0)
        return;
    const int w = (int)(j1 - j0);
    uint8_t *Bt = g->Bp + lp_gemm_pack_b_bytes(g->K, (int)j0);
    lp_gemm_pack_b(Bt, g->B + (ptrdiff_t)j0 * g->cs, g->rs, g->cs, g->K, w);
    lp_gemm_u8u8(g->C + j0, g->ldc, g->Ap, Bt, g->M, w, g->K, g->colsum + j0);
}

/* Multiply-adds per thread below which fewer threads run. */
#define S_LIN_MIN_WORK ((size_t)1 << 18)

/* Threads for a linear GEMM (M, N, K): at most one per LP_GEMM_NR columns,
 * fewer when there is little work.  lp_tile_ready() is asked here, on the
 * calling thread, before the workers run the GEMM. */
static int s_lin_threads(int M, int N, int K)
{
    (void)lp_tile_ready();
    const size_t work = (size_t)M * N * K;
    const int blocks = (N + LP_GEMM_NR - 1) / LP_GEMM_NR;
    int nt = nn_pool_threads();
    nt = nt > blocks ? blocks : nt;
    while (nt > 1 && work / (size_t)nt < S_LIN_MIN_WORK)
        nt--;
    return nt;
}

/* The split GEMM above over s_lin_threads threads. */
static void s_lin_gemm_run(int32_t *C, const int8_t *Ap, uint8_t *Bp, const uint8_t *B,
                           ptrdiff_t rs, ptrdiff_t cs, int M, int N, int K, int32_t *colsum)
{
    s_lin_gemm g = {C, colsum, Ap, Bp, B, rs, cs, N, M, N, K};
    nn_pool_run(s_lin_threads(M, N, K), s_lin_gemm_worker, &g);
}

/* out (N, J; + bias when given) = lp_gemm_dequant(C[n*J + j], SW[j], SX[n],
 * K, wp, xp) with the terms that depend on one index only computed once
 * (tw: J doubles): the same operations in the same order, the same floats. */
static void s_dequant_out(float *out, const int32_t *C, const int32_t *SW, const int32_t *SX,
                          int N, int J, int K, lp_qparams wp, lp_qparams xp, const float *bias,
                          double *tw)
{
    const double sa = wp.scale, ma = wp.min, sb = xp.scale, mb = xp.min;
    const double c1 = sa * sb, cw = sa * mb, cx = ma * sb, t4 = (double)K * ma * mb;
    for (int j = 0; j < J; j++)
        tw[j] = cw * SW[j];
    for (int n = 0; n < N; n++)
        lp_dequant_lin(out + (size_t)n * J, C + (size_t)n * J, tw, c1, cx * SX[n], t4, bias,
                       (size_t)J);
}

void lp_linear_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, int N, int F, int OF, lp_mode mode,
                       void *scratch)
{
    const s_lin_parts sp = s_lin_carve(scratch, N, F, OF);
    int8_t *Ap = sp.Ap;
    uint8_t *Bp = sp.Bp;
    int32_t *Cm = sp.Cm, *SX = sp.SA, *SW = sp.SB;
    float *bq = sp.bq;
    uint8_t *bcodes = sp.bcodes;

    const lp_operands ops = {in, N, (size_t)F, w, (size_t)OF * F, b, (size_t)OF};
    (void)lp_layer_quantize(sv, NULL, NULL, bq, bcodes, run_range, &ops, mode);
    /* C (N, OF) = xq (N, F) * wq^T (F, OF) */
    lp_gemm_pack_a_run(Ap, SX, sv->xq, F, 1, N, F);
    s_lin_gemm_run(Cm, Ap, Bp, sv->wq, 1, F, N, OF, F, SW);
    s_dequant_out(out, Cm, SW, SX, N, OF, F, sv->wp, sv->xp, bq, sp.tw);
}

void lp_linear_backward(float *din, float *dw, float *db, const float *dout, const lp_qsaved *sv,
                        int N, int F, int OF, uint64_t seed, void *scratch)
{
    const s_lin_parts sp = s_lin_carve(scratch, N, F, OF);
    int8_t *Ap = sp.Ap;
    uint8_t *Bp = sp.Bp, *gq = sp.gq;
    int32_t *Cm = sp.Cm, *SG = sp.SA, *SWc = sp.SB;
    float *xf = sp.xf;

    if (db)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OF; o++)
                db[o] += dout[(size_t)n * OF + o];
    if (dw) {
        lp_dequantize(xf, sv->xq, (size_t)N * F, sv->xp);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OF, F, N, 1.0f, dout, OF, xf, F,
                    1.0f, dw, F);
    }
    if (!din)
        return;
    lp_qparams gp = lp_tensor_qparams(dout, (size_t)N * OF);
    lp_quantize_sr(gq, dout, (size_t)N * OF, gp, seed, 0);
    /* C (N, F) = gq (N, OF) * wq (OF, F) */
    lp_gemm_pack_a_run(Ap, SG, gq, OF, 1, N, OF);
    s_lin_gemm_run(Cm, Ap, Bp, sv->wq, F, 1, N, F, OF, SWc);
    s_dequant_out(din, Cm, SWc, SG, N, F, OF, sv->wp, gp, NULL, sp.tw);
}

size_t lp_linear_fq_scratch_floats(int N, int F, int OF)
{
    return (size_t)N * F + (size_t)OF * F + OF + (size_t)N * OF;
}

void lp_linear_forward_fq(float *out, float *run_range, const float *in, const float *w,
                          const float *b, int N, int F, int OF, lp_mode mode, float *scratch)
{
    float *xf = scratch, *wf = xf + (size_t)N * F, *bf = wf + (size_t)OF * F;
    const lp_operands ops = {in, N, (size_t)F, w, (size_t)OF * F, b, (size_t)OF};
    (void)lp_layer_quantize(NULL, xf, wf, bf, NULL, run_range, &ops, mode);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++) {
            float t = 0;
            for (int f = 0; f < F; f++)
                t += xf[(size_t)n * F + f] * wf[(size_t)o * F + f];
            out[(size_t)n * OF + o] = t + (b ? bf[o] : 0.0f);
        }
}

void lp_linear_backward_fq(float *din, float *dw, float *db, const float *dout, const float *in,
                           lp_qparams xp, const float *w, int N, int F, int OF, lp_mode mode,
                           uint64_t seed, float *scratch)
{
    float *xf = scratch, *wf = xf + (size_t)N * F, *gf = wf + (size_t)OF * F + OF;
    lp_fake_quant(xf, in, (size_t)N * F, xp, mode.train, mode.seed);
    lp_param_fq(wf, w, (size_t)OF * F);
    lp_fake_quant(gf, dout, (size_t)N * OF, lp_tensor_qparams(dout, (size_t)N * OF), 1, seed);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OF; o++) {
            float g = dout[(size_t)n * OF + o];
            if (db)
                db[o] += g;
            if (dw)
                for (int f = 0; f < F; f++)
                    dw[(size_t)o * F + f] += g * xf[(size_t)n * F + f];
        }
        if (din)
            for (int f = 0; f < F; f++) {
                float t = 0;
                for (int o = 0; o < OF; o++)
                    t += gf[(size_t)n * OF + o] * wf[(size_t)o * F + f];
                din[(size_t)n * F + f] = t;
            }
    }
}

