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

/* packed weights: (OF, F) in forward, (F, OF) in backward */
static size_t s_lin_apack(int F, int OF)
{
    size_t a = lp_gemm_pack_a_bytes(OF, F), b = lp_gemm_pack_a_bytes(F, OF);
    return a > b ? a : b;
}

size_t lp_linear_scratch_bytes(int N, int F, int OF)
{
    const int mx = F > OF ? F : OF;
    size_t s = 0;
    s += LP_ALIGN64(s_lin_apack(F, OF));
    s += LP_ALIGN64(lp_gemm_pack_b_bytes(mx, N));
    s += LP_ALIGN64((size_t)mx * N * 4);
    s += LP_ALIGN64((size_t)mx * 4);
    s += LP_ALIGN64((size_t)lp_gemm_np(N) * 4);
    s += LP_ALIGN64((size_t)N * OF);
    s += LP_ALIGN64((size_t)N * F * sizeof(float));
    s += LP_ALIGN64((size_t)OF * 5);
    return s + 64;
}

/* The parts of the scratch (lp_linear_scratch_bytes), in its order: packed
 * weights Ap, packed codes Bp, the GEMM's sums Cm (max(F, OF), N), the row
 * and column sums SA and SB; the gradient codes gq (N, OF) and the
 * dequantized input xf (N, F) of the backward; the forward's bias read
 * back bq (OF) and its codes. */
typedef struct {
    int8_t  *Ap;
    uint8_t *Bp, *gq, *bcodes;
    int32_t *Cm, *SA, *SB;
    float   *xf, *bq;
} s_lin_parts;

static s_lin_parts s_lin_carve(void *scratch, int N, int F, int OF)
{
    const int mx = F > OF ? F : OF;
    unsigned char *sp = (unsigned char *)scratch;
    s_lin_parts p;
    p.Ap = lp_take(&sp, s_lin_apack(F, OF));
    p.Bp = lp_take(&sp, lp_gemm_pack_b_bytes(mx, N));
    p.Cm = lp_take(&sp, (size_t)mx * N * 4);
    p.SA = lp_take(&sp, (size_t)mx * 4);
    p.SB = lp_take(&sp, (size_t)lp_gemm_np(N) * 4);
    p.gq = lp_take(&sp, (size_t)N * OF);
    p.xf = lp_take(&sp, (size_t)N * F * sizeof(float));
    unsigned char *bpart = lp_take(&sp, (size_t)OF * 5);
    p.bq = (float *)(void *)bpart;
    p.bcodes = bpart + (size_t)OF * 4;
    return p;
}

void lp_linear_forward(float *out, lp_qsaved *sv, float *run_range, const float *in,
                       const float *w, const float *b, int N, int F, int OF, lp_mode mode,
                       void *scratch)
{
    const s_lin_parts sp = s_lin_carve(scratch, N, F, OF);
    int8_t *Ap = sp.Ap;
    uint8_t *Bp = sp.Bp;
    int32_t *Cm = sp.Cm, *SW = sp.SA, *SX = sp.SB;
    float *bq = sp.bq;
    uint8_t *bcodes = sp.bcodes;

    const lp_operands ops = {in, N, (size_t)F, w, (size_t)OF * F, b, (size_t)OF};
    (void)lp_layer_quantize(sv, NULL, NULL, bq, bcodes, run_range, &ops, mode);
    /* C (OF, N) = wq (OF, F) * xq^T (F, N) */
    lp_gemm_pack_a(Ap, SW, sv->wq, F, 1, OF, F);
    lp_gemm_pack_b(Bp, sv->xq, 1, F, F, N);
    lp_gemm_u8u8(Cm, N, Ap, Bp, OF, N, F, SX);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OF; o++)
            out[(size_t)n * OF + o] =
                lp_gemm_dequant(Cm[(size_t)o * N + n], SW[o], SX[n], F, sv->wp, sv->xp) + bq[o];
}

void lp_linear_backward(float *din, float *dw, float *db, const float *dout, const lp_qsaved *sv,
                        int N, int F, int OF, uint64_t seed, void *scratch)
{
    const s_lin_parts sp = s_lin_carve(scratch, N, F, OF);
    int8_t *Ap = sp.Ap;
    uint8_t *Bp = sp.Bp, *gq = sp.gq;
    int32_t *Cm = sp.Cm, *SWc = sp.SA, *SG = sp.SB;
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
    /* C (F, N) = wq^T (F, OF) * gq^T (OF, N) */
    lp_gemm_pack_a(Ap, SWc, sv->wq, 1, F, F, OF);
    lp_gemm_pack_b(Bp, gq, 1, OF, OF, N);
    lp_gemm_u8u8(Cm, N, Ap, Bp, F, N, OF, SG);
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++)
            din[(size_t)n * F + f] =
                lp_gemm_dequant(Cm[(size_t)f * N + n], SWc[f], SG[n], OF, sv->wp, gp);
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

