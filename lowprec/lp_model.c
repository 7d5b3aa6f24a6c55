/* lp_model — see lp_model.h.  Thin adapters from the model graph to the
 * kernels of lp_layers.h, one set for the integer path and one for the
 * fake-quant twins.
 *
 * op->state layout (int8 conv / linear):  [lp_hdr | xq codes | wq codes]
 *                   (int8 norm):          [lp_hdr | xq codes | s | sq]
 *                   (fake-quant ops):     [lp_hdr (| s | sq for the norm)]
 * each part 64-byte aligned.  op->b[0] = the "X.act_range" buffer. */
#include "lowprec/lp_model.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_quant.h"

#define A64(n) (((size_t)(n) + 63) & ~(size_t)63)

/* What a forward leaves for its backward (beginning of op->state). */
typedef struct {
    lp_qparams xp, wp;   /* input / weight quantization of the last forward */
    int        train;    /* mode of the last forward */
    uint64_t   fseed;    /* forward (activation) seed */
    uint64_t   bseed;    /* backward (incoming gradient) seed */
    float      err_fwd;  /* checked flavour: int vs fake-quant, last forward */
    float      err_din;  /*   last backward: input gradient */
    float      err_dpar; /*   last backward: parameter gradients (all units of the budget) */
} lp_hdr;

static uint64_t s_mix(uint64_t x)
{
    return nn_mix64(x + NN_GOLDEN64);
}

/* Draws this step's seeds (training forwards only). */
static void s_seeds(lp_hdr *h, nn_op *op, nn_model *m, int train)
{
    h->train = train;
    if (!train) {
        h->fseed = h->bseed = 0;
        return;
    }
    uint64_t base = nn_rng_next(nn_model_rng(m)) ^ s_mix((uint64_t)op->tag + 1);
    h->fseed = s_mix(base ^ 0x66776466ULL);   /* "fwdf" */
    h->bseed = s_mix(base ^ 0x62776467ULL);   /* "bwdg" */
}

/* din of op->in, or NULL when nothing upstream needs it. */
static void s_backward(nn_op *op, nn_model *m, int N,
                       void (*body)(nn_op *, nn_model *, int, float *))
{
    float *din = nn_model_needs_din(m, op->in) ? nn_model_din(m, op->in) : NULL;
    body(op, m, N, din);
    if (din)
        nn_model_din_done(m, op->in, din);
}

/* The op-class callbacks of a flavour from its bodies: forward draws the
 * step's seeds, then runs the body; backward hands the body its din. */
#define LP_OP_WRAPPERS(k)                                                      \
    static void k##_forward(nn_op *op, nn_model *m, int N, int train)          \
    {                                                                          \
        s_seeds(op->state, op, m, train);                                      \
        k##_fwd(op, m, N);                                                     \
    }                                                                          \
    static void k##_backward(nn_op *op, nn_model *m, int N)                    \
    {                                                                          \
        s_backward(op, m, N, k##_bwd);                                         \
    }

static lp_mode s_mode(const lp_hdr *h)
{
    lp_mode md = {h->train, h->fseed};
    return md;
}

static float *s_opt_param(nn_model *m, int view)
{
    return view >= 0 ? nn_model_param(m, view) : NULL;
}

static float *s_opt_grad(nn_model *m, int view)
{
    return view >= 0 ? nn_model_grad(m, view) : NULL;
}

static unsigned char *s_part(nn_op *op, size_t off)
{
    return (unsigned char *)op->state + off;
}

/* The input range an activation quantizer will use, without updating the
 * running range (the fake-quant backward needs it). */
static lp_qparams s_peek_act_qparams(const float *run, const float *x, int N, size_t per,
                                     int train)
{
    if (!train)
        return lp_qparams_from_range(run[0], run[1]);
    float mn, mx;
    lp_batch_range(&mn, &mx, x, N, per);
    return lp_qparams_from_range(mn, mx);
}

/* ---- conv ----------------------------------------------------------------- */

static nn_conv_dims s_cdims(const nn_op *op, int N)
{
    return nn_conv_dims_make(N, op->ishape.c, op->ishape.h, op->ishape.w, op->oshape.c, op->k,
                             op->stride, op->pad);
}

static size_t s_conv_xbytes(const nn_op *op, int N)
{
    return (size_t)N * nn_shape_numel(op->ishape);
}

static size_t s_conv_wbytes(const nn_op *op)
{
    return (size_t)op->oshape.c * op->ishape.c * op->k * op->k;
}

static size_t s_conv_state(const nn_op *op, int N)
{
    return A64(sizeof(lp_hdr)) + A64(s_conv_xbytes(op, N)) + A64(s_conv_wbytes(op));
}

static size_t s_conv_saved(const nn_op *op, int N)
{
    nn_conv_dims d = s_cdims(op, N);
    return lp_conv2d_saved_bytes(&d);
}

static size_t s_conv_scratch(const nn_op *op, int N)
{
    nn_conv_dims d = s_cdims(op, N);
    return (lp_conv2d_scratch_bytes(&d) + 3) / 4;
}

/* [hdr | wq (OC*CK) | xq (N*C*H*W)]: the weight codes first, so the
 * offsets do not depend on the batch the state was sized for. */
static lp_qsaved s_conv_sv(nn_op *op)
{
    lp_hdr *h = op->state;
    lp_qsaved sv;
    size_t off = A64(sizeof(lp_hdr));
    sv.wq = s_part(op, off);
    sv.xq = s_part(op, off + A64(s_conv_wbytes(op)));
    sv.xp = h->xp;
    sv.wp = h->wp;
    return sv;
}

static void s_conv_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    nn_conv_dims d = s_cdims(op, N);
    lp_qsaved sv = s_conv_sv(op);
    lp_conv2d_forward(nn_model_act(m, op->out), &sv, nn_model_buffer(m, op->b[0]),
                      nn_model_act(m, op->in), nn_model_param(m, op->p[0]),
                      s_opt_param(m, op->p[1]), &d, s_mode(h), nn_model_scratch(m));
    h->xp = sv.xp;
    h->wp = sv.wp;
}

static void s_conv_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    nn_conv_dims d = s_cdims(op, N);
    lp_qsaved sv = s_conv_sv(op);
    lp_conv2d_backward(din, nn_model_grad(m, op->p[0]), s_opt_grad(m, op->p[1]),
                       nn_model_dout(m, op->out), &sv, &d, h->bseed, nn_model_scratch(m));
}

static void s_conv_forward(nn_op *op, nn_model *m, int N, int train)
{
    s_seeds(op->state, op, m, train);
    s_conv_fwd(op, m, N);
}

/* A second gradient of the input slot (a residual block's first conv) is
 * added in place where the conv's path can (lp_conv2d_backward_add). */
static void s_conv_backward(nn_op *op, nn_model *m, int N)
{
    nn_conv_dims d = s_cdims(op, N);
    int add = 0;
    if (nn_model_needs_din(m, op->in) && lp_conv2d_din_adds(&d))
        (void)nn_model_din_add(m, op->in, &add);
    if (!add) {
        s_backward(op, m, N, s_conv_bwd);
        return;
    }
    lp_hdr *h = op->state;
    lp_qsaved sv = s_conv_sv(op);
    float *din = nn_model_din_add(m, op->in, &add);
    lp_conv2d_backward_add(din, nn_model_grad(m, op->p[0]), s_opt_grad(m, op->p[1]),
                           nn_model_dout(m, op->out), &sv, &d, h->bseed, nn_model_scratch(m));
    nn_model_din_done(m, op->in, din);
}


static const nn_op_class s_conv_int8 = {
    .kind = "conv_int8", .state_bytes = s_conv_state, .scratch_floats = s_conv_scratch,
    .saved_bytes = s_conv_saved, .forward = s_conv_forward, .backward = s_conv_backward,
    .reads_input = 0,
};

static size_t s_hdr_state(const nn_op *op, int N)
{
    (void)op;
    (void)N;
    return A64(sizeof(lp_hdr));
}

static size_t s_conv_fq_scratch(const nn_op *op, int N)
{
    nn_conv_dims d = s_cdims(op, N);
    return lp_conv2d_fq_scratch_floats(&d);
}

static void s_conv_fq_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    nn_conv_dims d = s_cdims(op, N);
    float *run = nn_model_buffer(m, op->b[0]);
    const float *in = nn_model_act(m, op->in);
    h->xp = s_peek_act_qparams(run, in, N, nn_shape_numel(op->ishape), h->train);
    lp_conv2d_forward_fq(nn_model_act(m, op->out), run, in, nn_model_param(m, op->p[0]),
                         s_opt_param(m, op->p[1]), &d, s_mode(h), nn_model_scratch(m));
}

static void s_conv_fq_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    nn_conv_dims d = s_cdims(op, N);
    lp_conv2d_backward_fq(din, nn_model_grad(m, op->p[0]), s_opt_grad(m, op->p[1]),
                          nn_model_dout(m, op->out), nn_model_act(m, op->in), h->xp,
                          nn_model_param(m, op->p[0]), &d, s_mode(h), h->bseed,
                          nn_model_scratch(m));
}
LP_OP_WRAPPERS(s_conv_fq)


static const nn_op_class s_conv_fq = {
    .kind = "conv_fakequant", .state_bytes = s_hdr_state, .scratch_floats = s_conv_fq_scratch,
    .forward = s_conv_fq_forward, .backward = s_conv_fq_backward, .reads_input = 1,
};

static int s_build_conv(const nn_op_class *cls, nn_model *m, const char *name, int in, int oc,
                        int k, int stride, int pad, int bias)
{
    nn_shape is = nn_model_slot_shape(m, in);
    nn_shape os = {oc, (is.h + 2 * pad - k) / stride + 1, (is.w + 2 * pad - k) / stride + 1};
    assert(os.h > 0 && os.w > 0);
    assert((size_t)is.c * k * k <= LP_GEMM_MAX_K);
    nn_op *op = nn_model_add_op(m, cls, name, in, -1, os);
    op->k = k;
    op->stride = stride;
    op->pad = pad;
    char pn[NN_NAME_MAX];
    int wshape[4] = {oc, is.c, k, k};
    nn_namef(pn, "%s.weight", name);
    op->p[0] = nn_model_add_param(m, pn, 4, wshape, NN_INIT_HE_FANOUT, oc * k * k);
    if (bias) {
        nn_namef(pn, "%s.bias", name);
        op->p[1] = nn_model_add_param(m, pn, 1, &oc, NN_INIT_UNIFORM_FANIN, is.c * k * k);
    }
    int two = 2;
    nn_namef(pn, "%s.act_range", name);
    op->b[0] = nn_model_add_buffer(m, pn, 1, &two);
    return op->out;
}

static int s_conv_int8_b(nn_model *m, const char *name, int in, int oc, int k, int stride,
                         int pad, int bias)
{
    return s_build_conv(&s_conv_int8, m, name, in, oc, k, stride, pad, bias);
}

static int s_conv_fq_b(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad,
                       int bias)
{
    return s_build_conv(&s_conv_fq, m, name, in, oc, k, stride, pad, bias);
}

/* ---- linear ---------------------------------------------------------------- */

static int s_lin_F(const nn_op *op)
{
    return (int)nn_shape_numel(op->ishape);
}

/* [hdr | wq (OF*F) | xq (N*F)] */
static size_t s_lin_state(const nn_op *op, int N)
{
    return A64(sizeof(lp_hdr)) + A64((size_t)op->oshape.c * s_lin_F(op)) +
           A64((size_t)N * s_lin_F(op));
}

static size_t s_lin_saved(const nn_op *op, int N)
{
    return lp_linear_saved_bytes(N, s_lin_F(op), op->oshape.c);
}

static size_t s_lin_scratch(const nn_op *op, int N)
{
    return (lp_linear_scratch_bytes(N, s_lin_F(op), op->oshape.c) + 3) / 4;
}

static lp_qsaved s_lin_sv(nn_op *op)
{
    lp_hdr *h = op->state;
    lp_qsaved sv;
    size_t off = A64(sizeof(lp_hdr));
    sv.wq = s_part(op, off);
    sv.xq = s_part(op, off + A64((size_t)op->oshape.c * s_lin_F(op)));
    sv.xp = h->xp;
    sv.wp = h->wp;
    return sv;
}

static void s_lin_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    lp_qsaved sv = s_lin_sv(op);
    lp_linear_forward(nn_model_act(m, op->out), &sv, nn_model_buffer(m, op->b[0]),
                      nn_model_act(m, op->in), nn_model_param(m, op->p[0]),
                      s_opt_param(m, op->p[1]), N, s_lin_F(op), op->oshape.c, s_mode(h),
                      nn_model_scratch(m));
    h->xp = sv.xp;
    h->wp = sv.wp;
}

static void s_lin_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    lp_qsaved sv = s_lin_sv(op);
    lp_linear_backward(din, nn_model_grad(m, op->p[0]), s_opt_grad(m, op->p[1]),
                       nn_model_dout(m, op->out), &sv, N, s_lin_F(op), op->oshape.c, h->bseed,
                       nn_model_scratch(m));
}
LP_OP_WRAPPERS(s_lin)


static const nn_op_class s_lin_int8 = {
    .kind = "linear_int8", .state_bytes = s_lin_state, .scratch_floats = s_lin_scratch,
    .saved_bytes = s_lin_saved, .forward = s_lin_forward, .backward = s_lin_backward,
    .reads_input = 0,
};

static size_t s_lin_fq_scratch(const nn_op *op, int N)
{
    return lp_linear_fq_scratch_floats(N, s_lin_F(op), op->oshape.c);
}

static void s_lin_fq_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    float *run = nn_model_buffer(m, op->b[0]);
    const float *in = nn_model_act(m, op->in);
    h->xp = s_peek_act_qparams(run, in, N, (size_t)s_lin_F(op), h->train);
    lp_linear_forward_fq(nn_model_act(m, op->out), run, in, nn_model_param(m, op->p[0]),
                         s_opt_param(m, op->p[1]), N, s_lin_F(op), op->oshape.c, s_mode(h),
                         nn_model_scratch(m));
}

static void s_lin_fq_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    lp_linear_backward_fq(din, nn_model_grad(m, op->p[0]), s_opt_grad(m, op->p[1]),
                          nn_model_dout(m, op->out), nn_model_act(m, op->in), h->xp,
                          nn_model_param(m, op->p[0]), N, s_lin_F(op), op->oshape.c, s_mode(h),
                          h->bseed, nn_model_scratch(m));
}
LP_OP_WRAPPERS(s_lin_fq)


static const nn_op_class s_lin_fq = {
    .kind = "linear_fakequant", .state_bytes = s_hdr_state, .scratch_floats = s_lin_fq_scratch,
    .forward = s_lin_fq_forward, .backward = s_lin_fq_backward, .reads_input = 1,
};

static int s_build_linear(const nn_op_class *cls, nn_model *m, const char *name, int in, int of,
                          int bias)
{
    int F = (int)nn_shape_numel(nn_model_slot_shape(m, in));
    assert(F <= LP_GEMM_MAX_K && of <= LP_GEMM_MAX_K);
    nn_op *op = nn_model_add_op(m, cls, name, in, -1, (nn_shape){of, 1, 1});
    char pn[NN_NAME_MAX];
    int wshape[2] = {of, F};
    nn_namef(pn, "%s.weight", name);
    op->p[0] = nn_model_add_param(m, pn, 2, wshape, NN_INIT_UNIFORM_FANIN, F);
    if (bias) {
        nn_namef(pn, "%s.bias", name);
        op->p[1] = nn_model_add_param(m, pn, 1, &of, NN_INIT_UNIFORM_FANIN, F);
    }
    int two = 2;
    nn_namef(pn, "%s.act_range", name);
    op->b[0] = nn_model_add_buffer(m, pn, 1, &two);
    return op->out;
}

static int s_lin_int8_b(nn_model *m, const char *name, int in, int of, int bias)
{
    return s_build_linear(&s_lin_int8, m, name, in, of, bias);
}

static int s_lin_fq_b(nn_model *m, const char *name, int in, int of, int bias)
{
    return s_build_linear(&s_lin_fq, m, name, in, of, bias);
}

/* ---- Range EvoNorm ----------------------------------------------------------- */

static int s_hw(const nn_op *op)
{
    return op->ishape.h * op->ishape.w;
}

static size_t s_ng(const nn_op *op, int N)
{
    return (size_t)N * op->groups;
}

/* [hdr | s (N*G floats) | sq (N*G floats) | xq (N*C*HW)]; the fake-quant
 * flavour has no xq. */
static size_t s_ren_state(const nn_op *op, int N)
{
    return A64(sizeof(lp_hdr)) + 2 * A64(s_ng(op, N) * sizeof(float)) +
           A64((size_t)N * nn_shape_numel(op->ishape));
}

static size_t s_ren_fq_state(const nn_op *op, int N)
{
    return A64(sizeof(lp_hdr)) + 2 * A64(s_ng(op, N) * sizeof(float));
}

static size_t s_ren_saved(const nn_op *op, int N)
{
    return lp_ren_saved_bytes(N, op->ishape.c, s_hw(op), op->groups);
}

static size_t s_ren_scratch(const nn_op *op, int N)
{
    return lp_ren_scratch_floats(N, op->ishape.c, s_hw(op));
}

/* Offsets for the batch at hand: forward and backward of one step see the
 * same N, and the state (sized for maxN) holds the layout of any N <= maxN. */
static lp_ren_saved s_ren_sv(nn_op *op, int N)
{
    lp_hdr *h = op->state;
    lp_ren_saved sv;
    size_t off = A64(sizeof(lp_hdr)), ng = A64(s_ng(op, N) * sizeof(float));
    sv.s = (float *)(void *)s_part(op, off);
    sv.sq = (float *)(void *)s_part(op, off + ng);
    sv.xq = s_part(op, off + 2 * ng);
    sv.xp = h->xp;
    return sv;
}

static void s_ren_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    lp_ren_saved sv = s_ren_sv(op, N);
    lp_range_evonorm_forward(nn_model_act(m, op->out), &sv, nn_model_buffer(m, op->b[0]),
                             nn_model_act(m, op->in), nn_model_param(m, op->p[0]),
                             nn_model_param(m, op->p[1]), nn_model_param(m, op->p[2]), N,
                             op->ishape.c, s_hw(op), op->groups, s_mode(h), nn_model_scratch(m));
    h->xp = sv.xp;
}

static void s_ren_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    lp_ren_saved sv = s_ren_sv(op, N);
    lp_range_evonorm_backward(din, nn_model_grad(m, op->p[0]), nn_model_grad(m, op->p[1]),
                              nn_model_grad(m, op->p[2]), nn_model_dout(m, op->out), &sv,
                              nn_model_param(m, op->p[0]), nn_model_param(m, op->p[2]), N,
                              op->ishape.c, s_hw(op), op->groups, h->bseed, nn_model_scratch(m));
}
LP_OP_WRAPPERS(s_ren)


static const nn_op_class s_ren_int8 = {
    .kind = "range_evonorm_int8", .state_bytes = s_ren_state,
    .scratch_floats = s_ren_scratch, .saved_bytes = s_ren_saved, .forward = s_ren_forward,
    .backward = s_ren_backward, .reads_input = 0,
};

/* Fake-quant Range EvoNorm: scratch = x (n) | g (n) | gamma, beta, v (3C). */
static size_t s_ren_fq_scratch(const nn_op *op, int N)
{
    return 2 * (size_t)N * nn_shape_numel(op->ishape) + 3 * (size_t)op->ishape.c;
}

static void s_ren_fq_params(float *pq, nn_model *m, const nn_op *op)
{
    const size_t C = (size_t)op->ishape.c;
    for (int i = 0; i < 3; i++) {
        const float *p = nn_model_param(m, op->p[i]);
        lp_fake_quant(pq + i * C, p, C, lp_tensor_qparams(p, C), 0, 0);
    }
}

static void s_ren_fq_fwd(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    lp_ren_saved sv = s_ren_sv(op, N);
    const size_t n = (size_t)N * nn_shape_numel(op->ishape), C = (size_t)op->ishape.c;
    float *xf = nn_model_scratch(m), *pq = xf + 2 * n;
    const float *in = nn_model_act(m, op->in);
    h->xp = lp_act_qparams(nn_model_buffer(m, op->b[0]), in, N, nn_shape_numel(op->ishape),
                           h->train);
    lp_fake_quant(xf, in, n, h->xp, h->train, h->fseed);
    s_ren_fq_params(pq, m, op);
    lp_ren_core_forward_q(nn_model_act(m, op->out), sv.s, sv.sq, xf, pq, pq + C, pq + 2 * C, N,
                          (int)C, s_hw(op), op->groups, 1, h->xp.scale);
}

static void s_ren_fq_bwd(nn_op *op, nn_model *m, int N, float *din)
{
    lp_hdr *h = op->state;
    lp_ren_saved sv = s_ren_sv(op, N);
    const size_t n = (size_t)N * nn_shape_numel(op->ishape), C = (size_t)op->ishape.c;
    float *xf = nn_model_scratch(m), *gf = xf + n, *pq = xf + 2 * n;
    const float *dout = nn_model_dout(m, op->out);
    lp_fake_quant(xf, nn_model_act(m, op->in), n, h->xp, h->train, h->fseed);
    lp_fake_quant(gf, dout, n, lp_tensor_qparams(dout, n), 1, h->bseed);
    s_ren_fq_params(pq, m, op);
    lp_ren_core_backward_q(din, nn_model_grad(m, op->p[0]), nn_model_grad(m, op->p[1]),
                           nn_model_grad(m, op->p[2]), gf, xf, sv.s, sv.sq, pq, pq + 2 * C, N,
                           (int)C, s_hw(op), op->groups, h->xp.scale);
}
LP_OP_WRAPPERS(s_ren_fq)


static const nn_op_class s_ren_fq = {
    .kind = "range_evonorm_fakequant", .state_bytes = s_ren_fq_state,
    .scratch_floats = s_ren_fq_scratch, .forward = s_ren_fq_forward,
    .backward = s_ren_fq_backward, .reads_input = 1,
};

static int s_build_norm(const nn_op_class *cls, nn_model *m, const char *name, int in,
                        int zero_gamma)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    if (cfg->norm != NN_NORM_EVONORM)
        return nn_fp32_norm(m, name, in, zero_gamma);
    nn_shape is = nn_model_slot_shape(m, in);
    const int C = is.c, HW = is.h * is.w;
    int G = cfg->groups < C ? cfg->groups : C;
    while (C % G)
        G--;
    while (G > 1 && (C % G || (C / G) * HW < 32))
        G--;
    if ((C / G) * HW < 32)
        return nn_fp32_norm(m, name, in, zero_gamma);   /* too small to chunk */
    nn_op *op = nn_model_add_op(m, cls, name, in, -1, is);
    op->groups = G;
    char pn[NN_NAME_MAX];
    nn_namef(pn, "%s.weight", name);
    op->p[0] = nn_model_add_param(m, pn, 1, &C, zero_gamma ? NN_INIT_ZERO : NN_INIT_ONE, 1);
    nn_namef(pn, "%s.bias", name);
    op->p[1] = nn_model_add_param(m, pn, 1, &C, NN_INIT_ZERO, 1);
    nn_namef(pn, "%s.v", name);
    op->p[2] = nn_model_add_param(m, pn, 1, &C, NN_INIT_ONE, 1);
    int two = 2;
    nn_namef(pn, "%s.act_range", name);
    op->b[0] = nn_model_add_buffer(m, pn, 1, &two);
    return op->out;
}

static int s_norm_int8_b(nn_model *m, const char *name, int in, int zero_gamma)
{
    return s_build_norm(&s_ren_int8, m, name, in, zero_gamma);
}

static int s_norm_fq_b(nn_model *m, const char *name, int in, int zero_gamma)
{
    return s_build_norm(&s_ren_fq, m, name, in, zero_gamma);
}

/* ---- quantized residual add (both flavours: the kernel is its own
 * fake-quant definition, it keeps nothing for backward) ------------------ */

static size_t s_add_scratch(const nn_op *op, int N)
{
    return ((size_t)N * nn_shape_numel(op->oshape) + 3) / 4;
}

static void s_add_forward(nn_op *op, nn_model *m, int N, int train)
{
    lp_hdr *h = op->state;
    s_seeds(h, op, m, train);
    float *run = nn_model_buffer(m, op->b[0]);
    lp_add_forward(nn_model_act(m, op->out), run, run + 2, nn_model_act(m, op->in),
                   nn_model_act(m, op->in2), N, nn_shape_numel(op->oshape), s_mode(h),
                   (uint8_t *)nn_model_scratch(m));
}

/* da = db = deq(SR(dout)): quantized once (with the first gradient, in the
 * same pass), dequantized into the other input's gradient (nn_model_din may
 * hand out the same temporary twice). */
static void s_add_backward(nn_op *op, nn_model *m, int N)
{
    lp_hdr *h = op->state;
    const size_t n = (size_t)N * nn_shape_numel(op->oshape);
    const float *dout = nn_model_dout(m, op->out);
    uint8_t *codes = (uint8_t *)nn_model_scratch(m);
    lp_qparams gp = lp_tensor_qparams(dout, n);
    const int slots[2] = {op->in, op->in2};
    int coded = 0; /* the first gradient is quantized and dequantized in one pass */
    for (int i = 0; i < 2; i++) {
        if (!nn_model_needs_din(m, slots[i]))
            continue;
        float *din = nn_model_din(m, slots[i]);
        if (coded)
            lp_dequantize(din, codes, n, gp);
        else
            lp_fake_quant_sr(din, codes, dout, n, gp, h->bseed, 0);
        coded = 1;
        nn_model_din_done(m, slots[i], din);
    }
}

static size_t s_no_saved(const nn_op *op, int N)
{
    (void)op;
    (void)N;
    return 0;
}

static const nn_op_class s_add_q = {
    .kind = "add_int8", .state_bytes = s_hdr_state, .scratch_floats = s_add_scratch,
    .saved_bytes = s_no_saved, .forward = s_add_forward, .backward = s_add_backward,
    .reads_input = 0,
};

static int s_add_b(nn_model *m, const char *name, int a, int b)
{
    nn_shape sa = nn_model_slot_shape(m, a), sb = nn_model_slot_shape(m, b);
    assert(sa.c == sb.c && sa.h == sb.h && sa.w == sb.w);
    nn_op *op = nn_model_add_op(m, &s_add_q, name, a, b, sa);
    char pn[NN_NAME_MAX];
    int shape[2] = {2, 2};
    nn_namef(pn, "%s.act_range", name);
    op->b[0] = nn_model_add_buffer(m, pn, 2, shape);
    return op->out;
}

/* ---- checked flavour (the test oracle) ------------------------------------
 * Each op runs the integer body and the fake-quant body on the same input
 * (and in backward on the same incoming gradient), records how far apart
 * they are in units of the float-rounding budget, and passes the integer
 * results on.  Scratch: [max(int, fq scratch) | out copy | din copy |
 * grads before | int grads]; state: the integer layout. */

typedef struct {
    void (*ifwd)(nn_op *, nn_model *, int);
    void (*ibwd)(nn_op *, nn_model *, int, float *);
    void (*ffwd)(nn_op *, nn_model *, int);
    void (*fbwd)(nn_op *, nn_model *, int, float *);
    size_t (*iscr)(const nn_op *, int);
    size_t (*fscr)(const nn_op *, int);
} lp_twin;

static size_t s_chk_base(const nn_op *op, int N, const lp_twin *t)
{
    size_t a = t->iscr(op, N), b = t->fscr(op, N);
    return (a > b ? a : b) + 16;
}

static size_t s_chk_pnumel(nn_model *m, const nn_op *op)
{
    size_t n = 0;
    for (int k = 0; k < 4; k++)
        if (op->p[k] >= 0)
            n += nn_model_params(m)->views[op->p[k]].numel;
    return n;
}

/* max_i |got - ref| / (1e-5 max|ref| + 1e-5 |ref_i|) (0 when equal). */
static float s_budget_ratio(const float *got, const float *ref, size_t n)
{
    float mx = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabsf(ref[i]) > mx ? fabsf(ref[i]) : mx;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(got[i] - ref[i]);
        if (e == 0.0f)
            continue;
        float q = e / (1e-5f * mx + 1e-5f * fabsf(ref[i]) + 1e-30f);
        r = (q > r || q != q) ? q : r;
    }
    return r;
}

static void s_chk_fwd(nn_op *op, nn_model *m, int N, int train, const lp_twin *t)
{
    lp_hdr *h = op->state;
    s_seeds(h, op, m, train);
    float *run = nn_model_buffer(m, op->b[0]), r0[2] = {run[0], run[1]};
    const size_t no = (size_t)N * nn_shape_numel(op->oshape);
    float *out = nn_model_act(m, op->out), *tout = nn_model_scratch(m) + s_chk_base(op, N, t);
    t->ifwd(op, m, N);
    memcpy(tout, out, no * sizeof *out);
    float r1[2] = {run[0], run[1]};
    run[0] = r0[0];
    run[1] = r0[1];
    t->ffwd(op, m, N);
    h->err_fwd = s_budget_ratio(tout, out, no);
    if (run[0] != r1[0] || run[1] != r1[1])
        h->err_fwd = INFINITY;   /* the running ranges must agree exactly */
    memcpy(out, tout, no * sizeof *out);
}

static void s_chk_bwd(nn_op *op, nn_model *m, int N, float *din, const lp_twin *t)
{
    lp_hdr *h = op->state;
    const size_t ni = (size_t)N * nn_shape_numel(op->ishape), np = s_chk_pnumel(m, op);
    float *tdin = nn_model_scratch(m) + s_chk_base(op, N, t) +
                  (size_t)N * nn_shape_numel(op->oshape);
    float *g0 = tdin + ni, *tg = g0 + np;
    size_t o = 0;
    for (int k = 0; k < 4; k++)
        if (op->p[k] >= 0) {
            size_t n = nn_model_params(m)->views[op->p[k]].numel;
            memcpy(g0 + o, nn_model_grad(m, op->p[k]), n * sizeof(float));
            o += n;
        }
    t->ibwd(op, m, N, din);
    if (din)
        memcpy(tdin, din, ni * sizeof *din);
    o = 0;
    for (int k = 0; k < 4; k++)
        if (op->p[k] >= 0) {
            size_t n = nn_model_params(m)->views[op->p[k]].numel;
            float *g = nn_model_grad(m, op->p[k]);
            memcpy(tg + o, g, n * sizeof(float));
            memcpy(g, g0 + o, n * sizeof(float));
            o += n;
        }
    t->fbwd(op, m, N, din);
    float err = din ? s_budget_ratio(tdin, din, ni) : 0.0f, perr = 0.0f;
    if (din)
        memcpy(din, tdin, ni * sizeof *din);
    o = 0;
    for (int k = 0; k < 4; k++)
        if (op->p[k] >= 0) {
            size_t n = nn_model_params(m)->views[op->p[k]].numel;
            float *g = nn_model_grad(m, op->p[k]), e = s_budget_ratio(tg + o, g, n);
            perr = e > perr || e != e ? e : perr;
            memcpy(g, tg + o, n * sizeof(float));
            o += n;
        }
    h->err_din = err;
    h->err_dpar = perr;
}

#define LP_CHECKED(k, cls, state, saved, twin)                                            \
    static size_t k##_chk_scratch(const nn_op *op, int N)                                 \
    {                                                                                     \
        /* the parameter count is not known without the model: bound it by the       */ \
        /* views' sizes, which for these ops are at most C*OC*K*K + 3*C + OC          */ \
        return s_chk_base(op, N, &twin) + (size_t)N * nn_shape_numel(op->oshape) +       \
               (size_t)N * nn_shape_numel(op->ishape) + 2 * s_chk_pbound(op);            \
    }                                                                                     \
    static void k##_chk_bwd(nn_op *op, nn_model *m, int N, float *din)                    \
    {                                                                                     \
        s_chk_bwd(op, m, N, din, &twin);                                                  \
    }                                                                                     \
    static void k##_chk_forward(nn_op *op, nn_model *m, int N, int train)                 \
    {                                                                                     \
        s_chk_fwd(op, m, N, train, &twin);                                                \
    }                                                                                     \
    static void k##_chk_backward(nn_op *op, nn_model *m, int N)                           \
    {                                                                                     \
        s_backward(op, m, N, k##_chk_bwd);                                                \
    }                                                                                     \
    static const nn_op_class cls = {                                                      \
        .kind = #k "_checked", .state_bytes = state, .scratch_floats = k##_chk_scratch,   \
        .saved_bytes = saved, .forward = k##_chk_forward, .backward = k##_chk_backward,   \
        .reads_input = 1,                                                                 \
    };

/* Upper bound of an op's parameter floats from its shapes. */
static size_t s_chk_pbound(const nn_op *op)
{
    size_t ci = (size_t)op->ishape.c, co = (size_t)op->oshape.c;
    size_t k = op->k > 0 ? (size_t)op->k * op->k : 1;
    return co * nn_shape_numel(op->ishape) + ci * co * k + 3 * ci + co;
}

static const lp_twin s_conv_twin = {s_conv_fwd, s_conv_bwd, s_conv_fq_fwd, s_conv_fq_bwd,
                                    s_conv_scratch, s_conv_fq_scratch};
static const lp_twin s_lin_twin = {s_lin_fwd, s_lin_bwd, s_lin_fq_fwd, s_lin_fq_bwd,
                                   s_lin_scratch, s_lin_fq_scratch};
static const lp_twin s_ren_twin = {s_ren_fwd, s_ren_bwd, s_ren_fq_fwd, s_ren_fq_bwd,
                                   s_ren_scratch, s_ren_fq_scratch};

LP_CHECKED(s_conv, s_conv_chk, s_conv_state, s_conv_saved, s_conv_twin)
LP_CHECKED(s_lin, s_lin_chk, s_lin_state, s_lin_saved, s_lin_twin)
LP_CHECKED(s_ren, s_ren_chk, s_ren_state, s_ren_saved, s_ren_twin)

static int s_conv_chk_b(nn_model *m, const char *name, int in, int oc, int k, int stride,
                        int pad, int bias)
{
    return s_build_conv(&s_conv_chk, m, name, in, oc, k, stride, pad, bias);
}

static int s_lin_chk_b(nn_model *m, const char *name, int in, int of, int bias)
{
    return s_build_linear(&s_lin_chk, m, name, in, of, bias);
}

static int s_norm_chk_b(nn_model *m, const char *name, int in, int zero_gamma)
{
    return s_build_norm(&s_ren_chk, m, name, in, zero_gamma);
}

float lp_model_check_error(const nn_model *m, lp_check_what what)
{
    float err = 0;
    for (int i = 0; i < nn_model_nops(m); i++) {
        const nn_op *op = nn_model_op(m, i);
        if (op->cls != &s_conv_chk && op->cls != &s_lin_chk && op->cls != &s_ren_chk)
            continue;
        const lp_hdr *h = op->state;
        float e = what == LP_CHECK_FORWARD ? h->err_fwd
                  : what == LP_CHECK_DIN   ? h->err_din
                                           : h->err_dpar;
        err = (e > err || e != e) ? e : err;
    }
    return err;
}

const nn_factory lp_factory_int8_checked = {
    .name = "int8check", .conv = s_conv_chk_b, .linear = s_lin_chk_b, .norm = s_norm_chk_b,
    .add = s_add_b,
};

/* ---- factories ------------------------------------------------------------- */

const nn_factory lp_factory_int8 = {
    .name = "int8", .conv = s_conv_int8_b, .linear = s_lin_int8_b, .norm = s_norm_int8_b,
    .add = s_add_b,
};

const nn_factory lp_factory_fakequant = {
    .name = "fakequant", .conv = s_conv_fq_b, .linear = s_lin_fq_b, .norm = s_norm_fq_b,
    .add = s_add_b,
};

const nn_factory *lp_factory_by_name(const char *precision)
{
    if (!precision)
        return NULL;
    if (strcmp(precision, "int8") == 0)
        return &lp_factory_int8;
    if (strcmp(precision, "fakequant") == 0)
        return &lp_factory_fakequant;
    return NULL;
}
