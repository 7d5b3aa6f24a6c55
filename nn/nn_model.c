/* nn_model — the op graph and its storage (nn_model.h has the contract).
 *
 * Owns:    graph construction (slots, ops, parameter and buffer views),
 *          the accessors op classes use, the gradient bookkeeping of slots
 *          read by several ops, the life cycle (new, parameter init,
 *          prepare, destroy) and running (forward, backward, evaluation
 *          helpers, sizes and FLOPs).
 * Exposes: those functions of nn_model.h; the FP32 op classes and the
 *          builders are in nn_model_ops.c.
 * Callers: nn_models.c, lowprec/, node/, tests, bench (see nn_model.h).
 */
#include "nn/nn_model.h"
#include "nn/nn_model_int.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_layers.h"
#include "nn/nn_pool.h"

#define NN_EVO_GROUPS_DEFAULT 8

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
    const nn_factory *f = nn_model_factory(m);
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
        if (m->ops[i].cls == &nn_model_bn_class) {
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
