/* nn_model_ops — the FP32 op classes of the graph and its builders.
 *
 * Owns:    the FP32 op classes (conv, linear, EvoNorm-S0, BatchNorm, ReLU,
 *          max and average pooling, global average pooling, flatten,
 *          dropout, residual add), thin adapters from the graph to the
 *          kernels of nn_layers.h; nn_factory_fp32 and its nn_fp32_*
 *          builders; the nn_b_* builders, which go through the model's
 *          factory.
 * Exposes: nn_fp32_*, nn_factory_fp32, nn_b_* (nn_model.h);
 *          nn_model_bn_class, nn_model_factory (nn_model_int.h).
 * Callers: nn_models.c, node/node_modelfile.c (the builders), lowprec/
 *          (the nn_fp32_* builders its factory falls back on), nn_model.c.
 */
#include "nn/nn_model.h"
#include "nn/nn_model_int.h"

#include <assert.h>
#include <string.h>

#include "nn/nn_layers.h"

/* ---- FP32 op classes --------------------------------------------------- */

static nn_conv_dims s_conv_dims(const nn_op *op, int N)
{
    return nn_conv_dims_make(N, op->ishape.c, op->ishape.h, op->ishape.w, op->oshape.c, op->k,
                             op->stride, op->pad);
}

static size_t s_conv_scratch(const nn_op *op, int N)
{
    nn_conv_dims d = s_conv_dims(op, N);
    return nn_conv_scratch_floats(&d);
}

static void s_conv_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_conv_dims d = s_conv_dims(op, N);
    nn_conv2d_forward(m->act[op->out], m->act[op->in], nn_model_param(m, op->p[0]),
                      op->p[1] >= 0 ? nn_model_param(m, op->p[1]) : NULL, &d, m->scratch);
}

static void s_conv_backward(nn_op *op, nn_model *m, int N)
{
    nn_conv_dims d = s_conv_dims(op, N);
    float *din = m->needs[op->in] ? nn_model_din(m, op->in) : NULL;
    nn_conv2d_backward(din, nn_model_grad(m, op->p[0]),
                       op->p[1] >= 0 ? nn_model_grad(m, op->p[1]) : NULL, m->dact[op->out],
                       m->act[op->in], nn_model_param(m, op->p[0]), &d, m->scratch);
    if (din)
        nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_conv_class = {
    .kind = "conv", .scratch_floats = s_conv_scratch,
    .forward = s_conv_forward, .backward = s_conv_backward, .reads_input = 1,
};

static void s_linear_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_linear_forward(m->act[op->out], m->act[op->in], nn_model_param(m, op->p[0]),
                      op->p[1] >= 0 ? nn_model_param(m, op->p[1]) : NULL, N,
                      (int)nn_shape_numel(op->ishape), op->oshape.c);
}

static void s_linear_backward(nn_op *op, nn_model *m, int N)
{
    float *din = m->needs[op->in] ? nn_model_din(m, op->in) : NULL;
    nn_linear_backward(din, nn_model_grad(m, op->p[0]),
                       op->p[1] >= 0 ? nn_model_grad(m, op->p[1]) : NULL, m->dact[op->out],
                       m->act[op->in], nn_model_param(m, op->p[0]), N,
                       (int)nn_shape_numel(op->ishape), op->oshape.c);
    if (din)
        nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_linear_class = {
    .kind = "linear", .forward = s_linear_forward, .backward = s_linear_backward,
    .reads_input = 1,
};

/* EvoNorm-S0: p = gamma, beta, v; state = 1/std per (sample, group). */
static size_t s_evo_state(const nn_op *op, int N)
{
    return (size_t)N * (size_t)op->groups * sizeof(float);
}

static void s_evo_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_evonorm_s0_forward(m->act[op->out], op->state, m->act[op->in], nn_model_param(m, op->p[0]),
                          nn_model_param(m, op->p[1]), nn_model_param(m, op->p[2]), N,
                          op->ishape.c, op->ishape.h * op->ishape.w, op->groups);
}

static void s_evo_backward(nn_op *op, nn_model *m, int N)
{
    float *din = m->needs[op->in] ? nn_model_din(m, op->in) : NULL;
    nn_evonorm_s0_backward(din, nn_model_grad(m, op->p[0]), nn_model_grad(m, op->p[1]),
                           nn_model_grad(m, op->p[2]), m->dact[op->out], m->act[op->in], op->state,
                           nn_model_param(m, op->p[0]), nn_model_param(m, op->p[2]), N,
                           op->ishape.c, op->ishape.h * op->ishape.w, op->groups);
    if (din)
        nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_evo_class = {
    .kind = "evonorm_s0", .state_bytes = s_evo_state,
    .forward = s_evo_forward, .backward = s_evo_backward, .reads_input = 1,
};

/* BatchNorm: p = gamma, beta; b = running mean, running var;
 * state = saved mean and 1/std per channel. */
static size_t s_bn_state(const nn_op *op, int N)
{
    (void)N;
    return 2 * (size_t)op->ishape.c * sizeof(float);
}

static void s_bn_forward(nn_op *op, nn_model *m, int N, int train)
{
    int C = op->ishape.c, HW = op->ishape.h * op->ishape.w;
    float *st = op->state;
    if (train)
        nn_batchnorm_forward_train(m->act[op->out], st, st + C, nn_model_buffer(m, op->b[0]),
                                   nn_model_buffer(m, op->b[1]), m->act[op->in],
                                   nn_model_param(m, op->p[0]), nn_model_param(m, op->p[1]), N, C,
                                   HW);
    else
        nn_batchnorm_forward_eval(m->act[op->out], m->act[op->in], nn_model_buffer(m, op->b[0]),
                                  nn_model_buffer(m, op->b[1]), nn_model_param(m, op->p[0]),
                                  nn_model_param(m, op->p[1]), N, C, HW);
}

static void s_bn_backward(nn_op *op, nn_model *m, int N)
{
    int C = op->ishape.c, HW = op->ishape.h * op->ishape.w;
    float *st = op->state;
    float *din = m->needs[op->in] ? nn_model_din(m, op->in) : NULL;
    nn_batchnorm_backward(din, nn_model_grad(m, op->p[0]), nn_model_grad(m, op->p[1]),
                          m->dact[op->out], m->act[op->in], st, st + C,
                          nn_model_param(m, op->p[0]), N, C, HW);
    if (din)
        nn_model_din_done(m, op->in, din);
}

const nn_op_class nn_model_bn_class = {
    .kind = "batchnorm", .state_bytes = s_bn_state,
    .forward = s_bn_forward, .backward = s_bn_backward, .reads_input = 1,
};

static void s_relu_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_relu_forward(m->act[op->out], m->act[op->in], (size_t)N * nn_shape_numel(op->ishape));
}

static void s_relu_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    nn_relu_backward(din, m->dact[op->out], m->act[op->in],
                     (size_t)N * nn_shape_numel(op->ishape));
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_relu_class = {
    .kind = "relu", .forward = s_relu_forward, .backward = s_relu_backward, .reads_input = 1,
};

static size_t s_maxpool_state(const nn_op *op, int N)
{
    return (size_t)N * nn_shape_numel(op->oshape) * sizeof(uint32_t);
}

static size_t s_maxpool_saved(const nn_op *op, int N)
{
    return s_maxpool_state(op, N);
}

static void s_maxpool_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_maxpool_forward(m->act[op->out], op->state, m->act[op->in], N, op->ishape.c, op->ishape.h,
                       op->ishape.w, op->k, op->stride);
}

static void s_maxpool_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    nn_maxpool_backward(din, m->dact[op->out], op->state, N, op->ishape.c, op->ishape.h,
                        op->ishape.w, op->k, op->stride);
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_maxpool_class = {
    .kind = "maxpool", .state_bytes = s_maxpool_state, .saved_bytes = s_maxpool_saved,
    .forward = s_maxpool_forward, .backward = s_maxpool_backward,
};

static size_t s_no_saved(const nn_op *op, int N)
{
    (void)op;
    (void)N;
    return 0;
}

static void s_avgpool_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_avgpool_forward(m->act[op->out], m->act[op->in], N, op->ishape.c, op->ishape.h,
                       op->ishape.w, op->k, op->stride);
}

static void s_avgpool_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    nn_avgpool_backward(din, m->dact[op->out], N, op->ishape.c, op->ishape.h, op->ishape.w, op->k,
                        op->stride);
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_avgpool_class = {
    .kind = "avgpool", .saved_bytes = s_no_saved,
    .forward = s_avgpool_forward, .backward = s_avgpool_backward,
};

static void s_gap_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_gap_forward(m->act[op->out], m->act[op->in], N, op->ishape.c,
                   op->ishape.h * op->ishape.w);
}

static void s_gap_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    nn_gap_backward(din, m->dact[op->out], N, op->ishape.c, op->ishape.h * op->ishape.w);
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_gap_class = {
    .kind = "gap", .saved_bytes = s_no_saved,
    .forward = s_gap_forward, .backward = s_gap_backward,
};

/* Flatten: a copy; backward copies the gradient back. */
static void s_flatten_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    memcpy(m->act[op->out], m->act[op->in],
           (size_t)N * nn_shape_numel(op->ishape) * sizeof(float));
}

static void s_flatten_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    memcpy(din, m->dact[op->out], (size_t)N * nn_shape_numel(op->ishape) * sizeof(float));
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_flatten_class = {
    .kind = "flatten", .saved_bytes = s_no_saved,
    .forward = s_flatten_forward, .backward = s_flatten_backward,
};

/* Dropout: fparam = p; state = the keep mask of the last training forward
 * (one byte per element); an evaluation forward copies. */
static size_t s_dropout_state(const nn_op *op, int N)
{
    return (size_t)N * nn_shape_numel(op->ishape);
}

static void s_dropout_forward(nn_op *op, nn_model *m, int N, int train)
{
    size_t n = (size_t)N * nn_shape_numel(op->ishape);
    if (train)
        nn_dropout_forward(m->act[op->out], op->state, m->act[op->in], n, op->fparam, &m->rng);
    else
        memcpy(m->act[op->out], m->act[op->in], n * sizeof(float));
}

static void s_dropout_backward(nn_op *op, nn_model *m, int N)
{
    float *din = nn_model_din(m, op->in);
    nn_dropout_backward(din, m->dact[op->out], op->state, (size_t)N * nn_shape_numel(op->ishape),
                        op->fparam);
    nn_model_din_done(m, op->in, din);
}

static const nn_op_class s_dropout_class = {
    .kind = "dropout", .state_bytes = s_dropout_state,
    .forward = s_dropout_forward, .backward = s_dropout_backward,
};

static void s_add_forward(nn_op *op, nn_model *m, int N, int train)
{
    (void)train;
    nn_add_forward(m->act[op->out], m->act[op->in], m->act[op->in2],
                   (size_t)N * nn_shape_numel(op->oshape));
}

static void s_add_backward(nn_op *op, nn_model *m, int N)
{
    size_t n = (size_t)N * nn_shape_numel(op->oshape);
    const float *dout = m->dact[op->out];
    int slots[2] = {op->in, op->in2};
    for (int s = 0; s < 2; s++) {
        if (!m->needs[slots[s]])
            continue;
        float *din = nn_model_din(m, slots[s]);
        memcpy(din, dout, n * sizeof *din);
        nn_model_din_done(m, slots[s], din);
    }
}

static const nn_op_class s_add_class = {
    .kind = "add", .saved_bytes = s_no_saved,
    .forward = s_add_forward, .backward = s_add_backward,
};

/* ---- FP32 builders ------------------------------------------------------- */

static void s_pname(char *dst, size_t len, const char *op, const char *suffix)
{
    (void)len;
    nn_namef(dst, "%s.%s", op, suffix);
}

int nn_fp32_conv(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad,
                 int bias)
{
    nn_shape is = m->shapes[in];
    nn_shape os = {oc, (is.h + 2 * pad - k) / stride + 1, (is.w + 2 * pad - k) / stride + 1};
    assert(os.h > 0 && os.w > 0);
    nn_op *op = nn_model_add_op(m, &s_conv_class, name, in, -1, os);
    op->k = k;
    op->stride = stride;
    op->pad = pad;
    char pn[NN_NAME_MAX];
    int wshape[4] = {oc, is.c, k, k};
    s_pname(pn, sizeof pn, name, "weight");
    op->p[0] = nn_model_add_param(m, pn, 4, wshape, NN_INIT_HE_FANOUT, oc * k * k);
    if (bias) {
        s_pname(pn, sizeof pn, name, "bias");
        op->p[1] = nn_model_add_param(m, pn, 1, &oc, NN_INIT_UNIFORM_FANIN, is.c * k * k);
    }
    return op->out;
}

int nn_fp32_linear(nn_model *m, const char *name, int in, int of, int bias)
{
    nn_shape is = m->shapes[in];
    int F = (int)nn_shape_numel(is);
    nn_op *op = nn_model_add_op(m, &s_linear_class, name, in, -1, (nn_shape){of, 1, 1});
    char pn[NN_NAME_MAX];
    int wshape[2] = {of, F};
    s_pname(pn, sizeof pn, name, "weight");
    op->p[0] = nn_model_add_param(m, pn, 2, wshape, NN_INIT_UNIFORM_FANIN, F);
    if (bias) {
        s_pname(pn, sizeof pn, name, "bias");
        op->p[1] = nn_model_add_param(m, pn, 1, &of, NN_INIT_UNIFORM_FANIN, F);
    }
    return op->out;
}

static int s_bn_build(nn_model *m, const char *name, int in, int zero_gamma)
{
    int C = m->shapes[in].c;
    char pn[NN_NAME_MAX];
    nn_op *op = nn_model_add_op(m, &nn_model_bn_class, name, in, -1, m->shapes[in]);
    s_pname(pn, sizeof pn, name, "weight");
    op->p[0] = nn_model_add_param(m, pn, 1, &C, zero_gamma ? NN_INIT_ZERO : NN_INIT_ONE, 1);
    s_pname(pn, sizeof pn, name, "bias");
    op->p[1] = nn_model_add_param(m, pn, 1, &C, NN_INIT_ZERO, 1);
    s_pname(pn, sizeof pn, name, "running_mean");
    op->b[0] = nn_model_add_buffer(m, pn, 1, &C);
    s_pname(pn, sizeof pn, name, "running_var");
    op->b[1] = nn_model_add_buffer(m, pn, 1, &C);
    return op->out;
}

int nn_fp32_norm(nn_model *m, const char *name, int in, int zero_gamma)
{
    nn_shape is = m->shapes[in];
    int C = is.c;
    char pn[NN_NAME_MAX];
    if (m->cfg.norm == NN_NORM_NONE)
        return in;
    if (m->cfg.norm == NN_NORM_BATCHNORM)
        return s_bn_build(m, name, in, zero_gamma);
    nn_op *op = nn_model_add_op(m, &s_evo_class, name, in, -1, is);
    op->groups = m->cfg.groups < C ? m->cfg.groups : C;
    while (C % op->groups)
        op->groups--;
    s_pname(pn, sizeof pn, name, "weight");
    op->p[0] = nn_model_add_param(m, pn, 1, &C, zero_gamma ? NN_INIT_ZERO : NN_INIT_ONE, 1);
    s_pname(pn, sizeof pn, name, "bias");
    op->p[1] = nn_model_add_param(m, pn, 1, &C, NN_INIT_ZERO, 1);
    s_pname(pn, sizeof pn, name, "v");
    op->p[2] = nn_model_add_param(m, pn, 1, &C, NN_INIT_ONE, 1);
    return op->out;
}

int nn_fp32_add(nn_model *m, const char *name, int a, int b)
{
    nn_shape sa = m->shapes[a], sb = m->shapes[b];
    assert(sa.c == sb.c && sa.h == sb.h && sa.w == sb.w);
    return nn_model_add_op(m, &s_add_class, name, a, b, sa)->out;
}

const nn_factory nn_factory_fp32 = {
    .name = "fp32", .conv = nn_fp32_conv, .linear = nn_fp32_linear,
    .norm = nn_fp32_norm, .add = nn_fp32_add,
};

const nn_factory *nn_model_factory(const nn_model *m)
{
    return m->cfg.factory ? m->cfg.factory : &nn_factory_fp32;
}

int nn_b_conv(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad, int bias)
{
    const nn_factory *f = nn_model_factory(m);
    return (f->conv ? f->conv : nn_fp32_conv)(m, name, in, oc, k, stride, pad, bias);
}

int nn_b_linear(nn_model *m, const char *name, int in, int of, int bias)
{
    const nn_factory *f = nn_model_factory(m);
    return (f->linear ? f->linear : nn_fp32_linear)(m, name, in, of, bias);
}

int nn_b_norm(nn_model *m, const char *name, int in, int zero_gamma)
{
    const nn_factory *f = nn_model_factory(m);
    return (f->norm ? f->norm : nn_fp32_norm)(m, name, in, zero_gamma);
}

int nn_b_add(nn_model *m, const char *name, int a, int b)
{
    const nn_factory *f = nn_model_factory(m);
    return (f->add ? f->add : nn_fp32_add)(m, name, a, b);
}

int nn_b_relu(nn_model *m, const char *name, int in)
{
    return nn_model_add_op(m, &s_relu_class, name, in, -1, m->shapes[in])->out;
}

static int s_pool(nn_model *m, const nn_op_class *cls, const char *name, int in, int k, int stride)
{
    nn_shape is = m->shapes[in];
    nn_shape os = {is.c, (is.h - k) / stride + 1, (is.w - k) / stride + 1};
    assert(os.h > 0 && os.w > 0);
    nn_op *op = nn_model_add_op(m, cls, name, in, -1, os);
    op->k = k;
    op->stride = stride;
    return op->out;
}

int nn_b_maxpool(nn_model *m, const char *name, int in, int k, int stride)
{
    return s_pool(m, &s_maxpool_class, name, in, k, stride);
}

int nn_b_avgpool(nn_model *m, const char *name, int in, int k, int stride)
{
    return s_pool(m, &s_avgpool_class, name, in, k, stride);
}

int nn_b_gap(nn_model *m, const char *name, int in)
{
    nn_shape is = m->shapes[in];
    return nn_model_add_op(m, &s_gap_class, name, in, -1, (nn_shape){is.c, 1, 1})->out;
}

int nn_b_batchnorm(nn_model *m, const char *name, int in)
{
    return s_bn_build(m, name, in, 0);
}

int nn_b_flatten(nn_model *m, const char *name, int in)
{
    nn_shape os = {(int)nn_shape_numel(m->shapes[in]), 1, 1};
    return nn_model_add_op(m, &s_flatten_class, name, in, -1, os)->out;
}

int nn_b_dropout(nn_model *m, const char *name, int in, float p)
{
    assert(p >= 0.0f && p < 1.0f);
    nn_op *op = nn_model_add_op(m, &s_dropout_class, name, in, -1, m->shapes[in]);
    op->fparam = p;
    return op->out;
}
