/* lp_add — the quantized residual add (lp_layers.h).
 *
 * Owns:    out = Q(a) + Q(b), each input on its own activation range (the
 *          second with its own noise), fused quantize-and-read-back in
 *          training; the backward's one stochastic quantization of dout.
 * Exposes: lp_add_forward, lp_add_backward.
 * Callers: lp_model.c, tests, bench.
 */
#include "lowprec/lp_layers.h"

#include <string.h>

#include "lowprec/lp_layer_common.h"

/* ---- quantized residual add -------------------------------------------- */

void lp_add_forward(float *out, float *run_a, float *run_b, const float *a, const float *b, int N,
                    size_t per, lp_mode mode, uint8_t *codes)
{
    const size_t n = (size_t)N * per;
    lp_qparams pa = lp_act_qparams(run_a, a, N, per, mode.train);
    lp_qparams pb = lp_act_qparams(run_b, b, N, per, mode.train);
    lp_mode mb = mode;
    mb.seed = mode.seed ^ 0x9e3779b97f4a7c15ULL; /* the second input's own noise */
    if (mode.train) { /* quantize and dequantize in one pass, no codes */
        lp_fake_quant_sr(out, NULL, a, n, pa, mode.seed, 0);
        lp_fake_quant_sr_add(out, b, n, pb, mb.seed, 0);
        return;
    }
    lp_quant_act(codes, a, n, pa, mode);
    lp_dequantize(out, codes, n, pa);
    lp_quant_act(codes, b, n, pb, mb);
    float lut[256];
    lp_dequantize_lut(lut, pb);
    for (size_t i = 0; i < n; i++)
        out[i] = out[i] + lut[codes[i]];
}

void lp_add_backward(float *da, float *db, const float *dout, size_t n, uint64_t seed,
                     uint8_t *codes)
{
    (void)codes; /* not needed since the quantization is fused */
    float *first = da ? da : db;
    if (!first)
        return;
    lp_fake_quant_sr(first, NULL, dout, n, lp_tensor_qparams(dout, n), seed, 0);
    if (da && db)
        memcpy(db, da, n * sizeof(float));
}

