/* lp_layer_common — see lp_layer_common.h. */
#include "lowprec/lp_layer_common.h"

#include <string.h>

void lp_quant_act(uint8_t *q, const float *x, size_t n, lp_qparams p, lp_mode mode)
{
    if (mode.train)
        lp_quantize_sr(q, x, n, p, mode.seed, 0);
    else
        lp_quantize(q, x, n, p);
}

void lp_param_fq(float *dst, const float *src, size_t n)
{
    lp_fake_quant(dst, src, n, lp_tensor_qparams(src, n), 0, 0);
}

/* bq (nb) = the bias b quantized nearest and read back; 0 without b. */
static void s_bias_q(float *bq, uint8_t *bcodes, const float *b, size_t nb, int fq)
{
    if (!b) {
        memset(bq, 0, nb * sizeof(float));
        return;
    }
    if (fq) {
        lp_param_fq(bq, b, nb);
        return;
    }
    lp_qparams bp = lp_tensor_qparams(b, nb);
    lp_quantize(bcodes, b, nb, bp);
    lp_dequantize(bq, bcodes, nb, bp);
}

lp_qparams lp_layer_quantize(lp_qsaved *sv, float *xf, float *wf, float *bq, uint8_t *bcodes,
                             float *run_range, const lp_operands *o, lp_mode mode)
{
    const size_t nx = (size_t)o->N * o->per;
    lp_qparams xp = lp_act_qparams(run_range, o->x, o->N, o->per, mode.train);
    if (sv) {
        sv->xp = xp;
        lp_quant_act(sv->xq, o->x, nx, xp, mode);
        sv->wp = lp_tensor_qparams(o->w, o->nw);
        lp_quantize(sv->wq, o->w, o->nw, sv->wp);
    } else {
        lp_fake_quant(xf, o->x, nx, xp, mode.train, mode.seed);
        lp_param_fq(wf, o->w, o->nw);
    }
    s_bias_q(bq, bcodes, o->b, o->nb, sv == NULL);
    return xp;
}
