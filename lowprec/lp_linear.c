/* lp_linear — the 8-bit fully connected layer and its fake-quant twin
 * (lp_layers.h).
 *
 * Owns:    out = x w^T + b on uint8 codes: forward and input gradient as
 *          exact integer GEMMs (lp_gemm) with the affine correction
 *          (lp_gemm_dequant), the weight gradient in FP32 (cblas) on the
 *          dequantized input codes; the fake-quant linear.
 * Exposes: the linear functions of lp_layers.h.
 * Callers: lp_model.c, tests, bench.
 */
#include "lowprec/lp_layers.h"

#include <cblas.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layer_common.h"

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
    lp_gemm_pack_a(Ap, SX, sv->xq, F, 1, N, F);
    lp_gemm_pack_b(Bp, sv->wq, 1, F, F, OF);
    lp_gemm_u8u8(Cm, OF, Ap, Bp, N, OF, F, SW);
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
    lp_gemm_pack_a(Ap, SG, gq, OF, 1, N, OF);
    lp_gemm_pack_b(Bp, sv->wq, F, 1, OF, F);
    lp_gemm_u8u8(Cm, F, Ap, Bp, N, F, OF, SWc);
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

