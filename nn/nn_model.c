/* nn_model — the op graph, its storage, and the FP32 op classes.
 * See nn_model.h for the contract.  The FP32 ops are thin adapters from the
 * graph to the kernels of nn_layers.h. */
#include "nn/nn_model.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_layers.h"
#include "nn/nn_pool.h"

#define NN_EVO_GROUPS_DEFAULT 8

struct nn_model {
    nn_model_config cfg;
    nn_arena params, grads, buffers;
    nn_param_init *pinit;     /* per parameter view */
    int     *pfan;
    size_t   cap_pinit;

    nn_op *ops;
    int    nops, cap_ops;

    nn_shape *shapes;   /* per slot */
    int       nslots, cap_slots;
    int       input_slot, logits_slot;

    /* prepared storage */
    int       maxN, lastN;
    float   **act, **dact;    /* per slot: views into the buffers below */
    float   **bufs;           /* owned activation / gradient buffers */
    int       nbufs;
    size_t    prepared_bytes;
    int      *written;  /* per slot: gradient already written this backward */
    int      *needs;    /* per slot: gradient needed */
    float    *scratch;
    size_t    scratch_n;
    float    *gtmp;
    float    *probs;
    uint8_t  *labels;
    nn_rng    rng;
    int       backward_ready;
};

/* ---- graph construction ------------------------------------------------ */

static int s_new_slot(nn_model *m, nn_shape s)
{
    if (m->nslots == m->cap_slots) {
        m->cap_slots = m->cap_slots ? 2 * m->cap_slots : 32;
        m->shapes = nn_xrealloc(m->shapes, (size_t)m->cap_slots * sizeof *m->shapes);
    }
    m->shapes[m->nslots] = s;
    return m->nslots++;
}

nn_op *nn_model_add_op(nn_model *m, const nn_op_class *cls, const char *name, int in, int in2,
                       nn_shape oshape)
{
    assert(m->maxN == 0 && "ops are added before nn_model_prepare");
    assert(in >= 0 && in < m->nslots && in2 < m->nslots);
    if (m->nops == m->cap_ops) {
        m->cap_ops = m->cap_ops ? 2 * m->cap_ops : 32;
        m->ops = nn_xrealloc(m->ops, (size_t)m->cap_ops * sizeof *m->ops);
    }
    nn_op *op = &m->ops[m->nops];
    memset(op, 0, sizeof *op);
    op->cls = cls;
    nn_namef(op->name, "%s", name);
    op->in = in;
    op->in2 = in2;
    op->ishape = m->shapes[in];
    op->oshape = oshape;
    for (int i = 0; i < 4; i++)
        op->p[i] = op->b[i] = -1;
    op->tag = m->nops;
    op->out = s_new_slot(m, oshape);
    m->nops++;
    return op;
}

int nn_model_op_out(const nn_op *op)
{
    return op->out;
}

nn_shape nn_model_slot_shape(const nn_model *m, int slot)
{
    assert(slot >= 0 && slot < m->nslots);
    return m->shapes[slot];
}

int nn_model_add_param(nn_model *m, const char *name, int ndim, const int *shape,
                       nn_param_init init, int fan)
{
    int v = nn_arena_add(&m->params, name, ndim, shape);
    if ((size_t)v >= m->cap_pinit) {
        m->cap_pinit = m->cap_pinit ? 2 * m->cap_pinit : 64;
        m->pinit = nn_xrealloc(m->pinit, m->cap_pinit * sizeof *m->pinit);
        m->pfan = nn_xrealloc(m->pfan, m->cap_pinit * sizeof *m->pfan);
    }
    m->pinit[v] = init;
    m->pfan[v] = fan;
    return v;
}

int nn_model_add_buffer(nn_model *m, const char *name, int ndim, const int *shape)
{
    return nn_arena_add(&m->buffers, name, ndim, shape);
}

/* ---- accessors for op classes ------------------------------------------ */

float *nn_model_act(nn_model *m, int slot)      { return m->act[slot]; }
float *nn_model_param(nn_model *m, int view)    { return nn_arena_ptr(&m->params, view); }
float *nn_model_grad(nn_model *m, int view)     { return nn_arena_ptr(&m->grads, view); }
float *nn_model_buffer(nn_model *m, int view)   { return nn_arena_ptr(&m->buffers, view); }
float *nn_model_scratch(nn_model *m)            { return m->scratch; }
nn_rng *nn_model_rng(nn_model *m)               { return &m->rng; }
float *nn_model_dout(nn_model *m, int slot)     { return m->dact[slot]; }
int    nn_model_input_slot(const nn_model *m)   { return m->input_slot; }
int    nn_model_needs_din(const nn_model *m, int slot) { return m->needs[slot]; }

float *nn_model_din(nn_model *m, int slot)
{
    assert(m->needs[slot]);
    return m->written[slot] ? m->gtmp : m->dact[slot];
}

float *nn_model_din_add(nn_model *m, int slot, int *add)
{
    assert(m->needs[slot]);
    *add = m->written[slot];
    return m->dact[slot];
}

typedef struct {
    float *d;
    const float *s;
    size_t n;
} s_acc_job;

static void s_acc_worker(void *arg, int t, int nt)
{
    const s_acc_job *j = arg;
    size_t lo, hi;
    nn_pool_share(j->n, t, nt, 16, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        j->d[i] += j->s[i];
}

/* d[i] += s[i] for i < n, split over the pool by element ranges (every
 * element one addition: the same bits for any thread count). */
static void s_accumulate(float *d, const float *s, size_t n)
{
    s_acc_job j = {d, s, n};
    int nt = nn_pool_threads();
    while (nt > 1 && n / (size_t)nt < ((size_t)1 << 15))
        nt--;
    nn_pool_run(nt, s_acc_worker, &j);
}

void nn_model_din_done(nn_model *m, int slot, float *din)
{
    if (din == m->gtmp) {
        s_accumulate(m->dact[slot], din, (size_t)m->lastN * nn_shape_numel(m->shapes[slot]));
    } else {
        assert(din == m->dact[slot]);
        m->written[slot] = 1;
    }
}

nn_arena *nn_model_params(nn_model *m)          { return &m->params; }
nn_arena *nn_model_grads(nn_model *m)           { return &m->grads; }
nn_arena *nn_model_buffers(nn_model *m)         { return &m->buffers; }
const nn_model_config *nn_model_cfg(const nn_model *m) { return &m->cfg; }
int nn_model_nops(const nn_model *m)            { return m->nops; }
const nn_op *nn_model_op(const nn_model *m, int i) { return &m->ops[i]; }
const float *nn_model_logits(const nn_model *m) { return m->act[m->logits_slot]; }
const float *nn_model_probs(const nn_model *m)  { return m->probs; }

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

static const nn_op_class s_bn_class = {
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
    nn_op *op = nn_model_add_op(m, &s_bn_class, name, in, -1, m->shapes[in]);
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

static const nn_factory *s_fac(const nn_model *m)
{
    return m->cfg.factory ? m->cfg.factory : &nn_factory_fp32;
}

int nn_b_conv(nn_model *m, const char *name, int in, int oc, int k, int stride, int pad, int bias)
{
    const nn_factory *f = s_fac(m);
    return (f->conv ? f->conv : nn_fp32_conv)(m, name, in, oc, k, stride, pad, bias);
}

int nn_b_linear(nn_model *m, const char *name, int in, int of, int bias)
{
    const nn_factory *f = s_fac(m);
    return (f->linear ? f->linear : nn_fp32_linear)(m, name, in, of, bias);
}

int nn_b_norm(nn_model *m, const char *name, int in, int zero_gamma)
{
    const nn_factory *f = s_fac(m);
    return (f->norm ? f->norm : nn_fp32_norm)(m, name, in, zero_gamma);
}

int nn_b_add(nn_model *m, const char *name, int a, int b)
{
    const nn_factory *f = s_fac(m);
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

/* ---- life cycle ----------------------------------------------------------- */

nn_model *nn_model_new(const nn_model_config *cfg, char *err, size_t errlen)
{
    if (cfg->in_c <= 0 || cfg->in_h <= 0 || cfg->in_w <= 0 || cfg->classes < 2) {
        nn_errf(err, errlen, "model: bad input shape %dx%dx%d or class count %d", cfg->in_c,
                cfg->in_h, cfg->in_w, cfg->classes);
        return NULL;
    }
    nn_model *m = nn_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    if (m->cfg.groups <= 0)
        m->cfg.groups = NN_EVO_GROUPS_DEFAULT;
    nn_arena_init(&m->params);
    nn_arena_init(&m->grads);
    nn_arena_init(&m->buffers);
    m->input_slot = s_new_slot(m, (nn_shape){cfg->in_c, cfg->in_h, cfg->in_w});
    int in = m->input_slot;
    const nn_factory *f = s_fac(m);
    if (f->input)
        in = f->input(m, in);
    (void)in;
    m->cfg.build = NULL;
    m->cfg.build_ctx = NULL;
    int rc = cfg->build ? cfg->build(m, cfg->build_ctx, err, errlen)
                        : nn_arch_build(m, &m->cfg, err, errlen);
    if (rc == 0 && (m->nops == 0 || m->params.nviews == 0))
        rc = nn_errf(err, errlen, "model: no layer with parameters");
    if (rc != 0) {
        nn_model_destroy(&m);
        return NULL;
    }
    m->logits_slot = m->ops[m->nops - 1].out;
    nn_shape ls = m->shapes[m->logits_slot];
    if (ls.c != cfg->classes || ls.h != 1 || ls.w != 1) {
        assert(cfg->build && "a built-in architecture ends in its logits");
        nn_errf(err, errlen, "model: the last layer gives %dx%dx%d values, expected the %d "
                "class scores (%dx1x1)", ls.c, ls.h, ls.w, cfg->classes, cfg->classes);
        nn_model_destroy(&m);
        return NULL;
    }
    nn_arena_alloc(&m->params);
    nn_arena_clone_layout(&m->grads, &m->params);
    if (m->buffers.nviews)
        nn_arena_alloc(&m->buffers);
    /* BatchNorm running variance starts at 1, like PyTorch. */
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].cls == &s_bn_class) {
            float *rv = nn_model_buffer(m, m->ops[i].b[1]);
            for (int c = 0; c < m->ops[i].ishape.c; c++)
                rv[c] = 1.0f;
        }
    nn_rng_seed(&m->rng, 0x6c70676f73736970ULL);
    return m;
}

void nn_model_init_params(nn_model *m, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t v = 0; v < m->params.nviews; v++) {
        float *p = nn_arena_ptr(&m->params, (int)v);
        size_t n = m->params.views[v].numel;
        float fan = (float)m->pfan[v];
        switch (m->pinit[v]) {
        case NN_INIT_ZERO:
            memset(p, 0, n * sizeof *p);
            break;
        case NN_INIT_ONE:
            for (size_t i = 0; i < n; i++)
                p[i] = 1.0f;
            break;
        case NN_INIT_HE_FANOUT: {
            float sd = sqrtf(2.0f / fan);
            for (size_t i = 0; i < n; i++)
                p[i] = sd * nn_rng_normal(&r);
            break;
        }
        case NN_INIT_UNIFORM_FANIN: {
            float bound = 1.0f / sqrtf(fan);
            for (size_t i = 0; i < n; i++)
                p[i] = bound * (2.0f * nn_rng_uniform(&r) - 1.0f);
            break;
        }
        }
    }
    nn_rng_seed(&m->rng, seed ^ 0x5eedf00dULL);
}

/* Frees what nn_model_prepare allocated (safe before any prepare). */
static void s_free_prepared(nn_model *m)
{
    for (int i = 0; i < m->nbufs; i++)
        free(m->bufs[i]);
    for (int i = 0; i < m->nops; i++) {
        free(m->ops[i].state);
        m->ops[i].state = NULL;
    }
    free(m->bufs);
    free(m->act);
    free(m->dact);
    free(m->written);
    free(m->needs);
    free(m->scratch);
    free(m->gtmp);
    free(m->probs);
    free(m->labels);
    m->bufs = NULL;
    m->nbufs = 0;
    m->act = m->dact = NULL;
    m->written = m->needs = NULL;
    m->scratch = m->gtmp = m->probs = NULL;
    m->labels = NULL;
}

static float *s_own(nn_model *m, size_t floats)
{
    float *p = nn_xalloc_aligned((floats ? floats : 1) * sizeof(float));
    m->bufs[m->nbufs++] = p;
    m->prepared_bytes += (floats ? floats : 1) * sizeof(float);
    return p;
}

/* Storage sharing by liveness.  Slot s lives from its producer (op index
 * def[s]; -1 for the model input, copied in before op 0) to its last
 * consumer last[s], in forward for its activation and (in reverse) in
 * backward for its gradient.  Slots whose lifetimes do not overlap share a
 * buffer: greedy interval allocation in order of def (each slot goes to a
 * free buffer of the smallest sufficient size, else the largest free one,
 * grown, else a new one).  `own` slots get a buffer of their own. */
static void s_assign(nn_model *m, float **view, const int *use, const int *own, const int *def,
                     const int *last, int maxN)
{
    int ns = m->nslots, nb = 0;
    size_t *bsize = nn_xcalloc((size_t)ns, sizeof *bsize);
    int *bend = nn_xcalloc((size_t)ns, sizeof *bend);
    int *which = nn_xcalloc((size_t)ns, sizeof *which);
    /* slots are created in op order, so slot order is def order */
    for (int s = 0; s < ns; s++) {
        if (!use[s])
            continue;
        size_t sz = (size_t)maxN * nn_shape_numel(m->shapes[s]);
        int best = -1;
        if (!own[s])
            for (int b = 0; b < nb; b++) {
                if (bend[b] == INT32_MAX || bend[b] >= def[s])
                    continue;
                if (best < 0)
                    best = b;
                else if (bsize[b] >= sz && (bsize[best] < sz || bsize[b] < bsize[best]))
                    best = b;
                else if (bsize[best] < sz && bsize[b] > bsize[best])
                    best = b;
            }
        if (best < 0)
            best = nb++;
        if (sz > bsize[best])
            bsize[best] = sz;
        bend[best] = own[s] ? INT32_MAX : last[s];
        which[s] = best;
    }
    float **base = nn_xcalloc((size_t)(nb ? nb : 1), sizeof *base);
    for (int b = 0; b < nb; b++)
        base[b] = s_own(m, bsize[b]);
    for (int s = 0; s < ns; s++)
        view[s] = use[s] ? base[which[s]] : NULL;
    free(base);
    free(bsize);
    free(bend);
    free(which);
}

void nn_model_prepare(nn_model *m, int maxN)
{
    assert(maxN > 0);
    if (maxN <= m->maxN)
        return;
    s_free_prepared(m);
    m->maxN = maxN;
    m->prepared_bytes = 0;
    const int ns = m->nslots;
    m->act = nn_xcalloc((size_t)ns, sizeof *m->act);
    m->dact = nn_xcalloc((size_t)ns, sizeof *m->dact);
    m->written = nn_xcalloc((size_t)ns, sizeof *m->written);
    m->needs = nn_xcalloc((size_t)ns, sizeof *m->needs);
    m->bufs = nn_xcalloc(2 * (size_t)ns, sizeof *m->bufs);
    /* Which slots need a gradient: produced by an op with parameters or
     * from a slot that needs one. */
    m->scratch_n = 0;
    for (int i = 0; i < m->nops; i++) {
        nn_op *op = &m->ops[i];
        int needs = m->needs[op->in] || (op->in2 >= 0 && m->needs[op->in2]);
        for (int k = 0; k < 4; k++)
            needs |= op->p[k] >= 0;
        m->needs[op->out] = needs;
        if (op->cls->state_bytes) {
            size_t b = op->cls->state_bytes(op, maxN);
            op->state = b ? nn_xalloc_aligned(b) : NULL;
            m->prepared_bytes += b;
        }
        if (op->cls->scratch_floats) {
            size_t f = op->cls->scratch_floats(op, maxN);
            if (f > m->scratch_n)
                m->scratch_n = f;
        }
    }
    /* Lifetimes.  An activation read by some consumer's backward
     * (reads_input), and the logits, keep a buffer of their own. */
    int *def = nn_xcalloc((size_t)ns, sizeof *def), *last = nn_xcalloc((size_t)ns, sizeof *last);
    int *pin = nn_xcalloc((size_t)ns, sizeof *pin), *use = nn_xcalloc((size_t)ns, sizeof *use);
    int *gpin = nn_xcalloc((size_t)ns, sizeof *gpin), *guse = nn_xcalloc((size_t)ns, sizeof *guse);
    for (int s = 0; s < ns; s++)
        def[s] = last[s] = -1;
    for (int i = 0; i < m->nops; i++) {
        const nn_op *op = &m->ops[i];
        def[op->out] = last[op->out] = i;
        last[op->in] = i;
        if (op->in2 >= 0)
            last[op->in2] = i;
        if (op->cls->reads_input) {
            pin[op->in] = 1;
            if (op->in2 >= 0)
                pin[op->in2] = 1;
        }
    }
    pin[m->logits_slot] = gpin[m->logits_slot] = 1;
    size_t maxslot = 0;
    for (int s = 0; s < ns; s++) {
        size_t n = (size_t)maxN * nn_shape_numel(m->shapes[s]);
        maxslot = n > maxslot ? n : maxslot;
        use[s] = 1;
        guse[s] = m->needs[s] || s == m->logits_slot;
    }
    s_assign(m, m->act, use, pin, def, last, maxN);
    s_assign(m, m->dact, guse, gpin, def, last, maxN);
    free(def);
    free(last);
    free(pin);
    free(use);
    free(gpin);
    free(guse);
    m->scratch = nn_xalloc_aligned((m->scratch_n ? m->scratch_n : 1) * sizeof(float));
    m->gtmp = nn_xalloc_aligned(maxslot * sizeof(float));
    m->probs = nn_xalloc_aligned((size_t)maxN * (size_t)m->cfg.classes * sizeof(float));
    m->labels = nn_xcalloc((size_t)maxN, 1);
    m->prepared_bytes += (m->scratch_n ? m->scratch_n : 1) * sizeof(float) +
                         maxslot * sizeof(float) +
                         (size_t)maxN * (size_t)m->cfg.classes * sizeof(float) + (size_t)maxN;
}

size_t nn_model_prepared_bytes(const nn_model *m)
{
    return m->prepared_bytes;
}

void nn_model_destroy(nn_model **self_p)
{
    if (!self_p || !*self_p)
        return;
    nn_model *m = *self_p;
    s_free_prepared(m);
    free(m->ops);
    free(m->shapes);
    free(m->pinit);
    free(m->pfan);
    nn_arena_free(&m->params);
    nn_arena_free(&m->grads);
    nn_arena_free(&m->buffers);
    free(m);
    *self_p = NULL;
}

/* ---- running ----------------------------------------------------------- */

float nn_model_forward(nn_model *m, const float *x, const uint8_t *labels, int N, int train)
{
    assert(N > 0 && N <= m->maxN && "nn_model_prepare with a large enough batch first");
    m->lastN = N;
    memcpy(m->act[m->input_slot], x, (size_t)N * nn_shape_numel(m->shapes[m->input_slot]) *
                                         sizeof(float));
    for (int i = 0; i < m->nops; i++)
        m->ops[i].cls->forward(&m->ops[i], m, N, train);
    m->backward_ready = 0;
    if (!labels) {
        /* probabilities without a loss */
        const float *lg = m->act[m->logits_slot];
        int K = m->cfg.classes;
        for (int n = 0; n < N; n++) {
            float mx = lg[n * K];
            for (int k = 1; k < K; k++)
                mx = lg[n * K + k] > mx ? lg[n * K + k] : mx;
            float s = 0;
            for (int k = 0; k < K; k++)
                s += (m->probs[n * K + k] = expf(lg[n * K + k] - mx));
            for (int k = 0; k < K; k++)
                m->probs[n * K + k] /= s;
        }
        return 0.0f;
    }
    memcpy(m->labels, labels, (size_t)N);
    m->backward_ready = train;
    return nn_softmax_xent_forward(m->probs, m->act[m->logits_slot], labels, N, m->cfg.classes);
}

void nn_model_backward(nn_model *m)
{
    assert(m->backward_ready && "backward needs a training forward with labels");
    memset(m->grads.data, 0, m->grads.numel * sizeof(float));
    memset(m->written, 0, (size_t)m->nslots * sizeof *m->written);
    int N = m->lastN;
    nn_softmax_xent_backward(m->dact[m->logits_slot], m->probs, m->labels, N, m->cfg.classes);
    m->written[m->logits_slot] = 1;
    for (int i = m->nops - 1; i >= 0; i--) {
        nn_op *op = &m->ops[i];
        if (!m->needs[op->out] && op->out != m->logits_slot)
            continue;
        assert(m->written[op->out] && "an op's output received no gradient");
        op->cls->backward(op, m, N);
    }
}

int nn_model_correct(const nn_model *m, const uint8_t *labels, int N)
{
    const float *lg = m->act[m->logits_slot];
    int K = m->cfg.classes, correct = 0;
    for (int n = 0; n < N; n++) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lg[n * K + k] > lg[n * K + best])
                best = k;
        correct += best == labels[n];
    }
    return correct;
}

size_t nn_model_activation_bytes(const nn_model *m, int N)
{
    size_t total = 0;
    int *counted = nn_xcalloc((size_t)m->nslots, sizeof *counted);
    for (int i = 0; i < m->nops; i++) {
        const nn_op *op = &m->ops[i];
        if (op->cls->saved_bytes) {
            total += op->cls->saved_bytes(op, N);
        } else if (op->cls->reads_input && !counted[op->in]) {
            counted[op->in] = 1;
            total += (size_t)N * nn_shape_numel(op->ishape) * sizeof(float);
        }
        if (op->cls->state_bytes && !op->cls->saved_bytes)
            total += op->cls->state_bytes(op, N);
    }
    free(counted);
    return total;
}

double nn_model_flops(const nn_model *m)
{
    double f = 0;
    for (int i = 0; i < m->nops; i++) {
        const nn_op *op = &m->ops[i];
        if (op->p[0] >= 0 && m->params.views[op->p[0]].ndim >= 2)
            f += 2.0 * (double)m->params.views[op->p[0]].numel * (double)op->oshape.h *
                 (double)op->oshape.w;
    }
    return f;
}
