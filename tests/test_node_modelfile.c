/* test_node_modelfile — model files (node/node_modelfile.c) and their use
 * by the commands (node/node_modelio.c).
 *
 *  - the shipped models/{cnn,resnet20,vgg11}.yaml build exactly the built-in
 *    graphs (parameter and buffer names and shapes, op kinds and names) and
 *    train bit for bit alike, in FP32 and int8 (and with BatchNorm);
 *  - models/mlp.yaml gets PyTorch's nn.Sequential names;
 *  - graphs: from/add, references to later layers (built in topological
 *    order), a norm on the model input; gradients of a graph with flatten and
 *    dropout against central finite differences;
 *  - every error names FILE:LINE and the layer (table below);
 *  - a saved model carries its model file and rebuilds without it;
 *  - --init from a safetensors state_dict (F16, BF16, F64, F32), --init-skip,
 *    and the named refusals.
 * Fixture: tests/fixtures/make_init_weights.py (numpy, no PyTorch needed).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "nn/nn_safetensors.h"
#include "node/node_ckpt.h"
#include "node/node_modelio.h"
#include "node/node_opts.h"
#include "node/node_trainer.h"
#include "tk.h"

static node_model_opts *s_opts(const char *model, nn_norm_kind norm, node_precision prec)
{
    node_model_opts *o = calloc(1, sizeof *o);
    assert_non_null(o);
    node_model_opts_defaults(o);
    char err[1024] = "";
    if (node_model_opt_set(o, "--model", model, err, sizeof err) != 0)
        fail_msg("--model %s: %s", model, err);
    o->norm = norm;
    o->precision = prec;
    return o;
}

static nn_model *s_build(const node_model_opts *o, int c, int h, int w, int classes)
{
    char err[1024] = "";
    nn_model *m = node_model_build(o, c, h, w, classes, err, sizeof err);
    if (!m)
        fail_msg("build %s: %s", node_model_label(o), err);
    return m;
}

static void s_same_arena(const nn_arena *a, const nn_arena *b, const char *what)
{
    assert_int_equal(a->nviews, b->nviews);
    for (size_t v = 0; v < a->nviews; v++) {
        if (strcmp(a->views[v].name, b->views[v].name) != 0)
            fail_msg("%s %zu: '%s' vs '%s'", what, v, a->views[v].name, b->views[v].name);
        assert_int_equal(a->views[v].ndim, b->views[v].ndim);
        for (int d = 0; d < a->views[v].ndim; d++)
            assert_int_equal(a->views[v].shape[d], b->views[v].shape[d]);
    }
}

static void s_same_graph(nn_model *a, nn_model *b)
{
    s_same_arena(nn_model_params(a), nn_model_params(b), "param");
    s_same_arena(nn_model_buffers(a), nn_model_buffers(b), "buffer");
    assert_int_equal(nn_model_nops(a), nn_model_nops(b));
    for (int i = 0; i < nn_model_nops(a); i++) {
        const nn_op *x = nn_model_op(a, i), *y = nn_model_op(b, i);
        if (x->cls != y->cls || strcmp(x->name, y->name) || x->in != y->in || x->in2 != y->in2)
            fail_msg("op %d: %s '%s' (in %d,%d) vs %s '%s' (in %d,%d)", i, x->cls->kind, x->name,
                     x->in, x->in2, y->cls->kind, y->name, y->in, y->in2);
    }
}

/* `steps` SGD steps (lr 0.05) on seeded random batches of N. */
static void s_train(nn_model *m, int steps, int N)
{
    const nn_model_config *cfg = nn_model_cfg(m);
    size_t per = (size_t)cfg->in_c * (size_t)cfg->in_h * (size_t)cfg->in_w;
    float *x = malloc((size_t)N * per * sizeof *x);
    uint8_t *y = malloc((size_t)N);
    nn_rng r;
    nn_rng_seed(&r, 99);
    nn_model_init_params(m, 7);
    nn_model_prepare(m, N);
    nn_arena *p = nn_model_params(m), *g = nn_model_grads(m);
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < (size_t)N * per; i++)
            x[i] = nn_rng_normal(&r);
        for (int n = 0; n < N; n++)
            y[n] = (uint8_t)nn_rng_below(&r, (uint32_t)cfg->classes);
        nn_model_forward(m, x, y, N, 1);
        nn_model_backward(m);
        for (size_t k = 0; k < p->numel; k++)
            p->data[k] -= 0.05f * g->data[k];
    }
    free(x);
    free(y);
}

static void s_check_builtin(const char *arch, const char *file, int c, int hw, nn_norm_kind norm,
                            node_precision prec, int zir, int steps)
{
    node_model_opts *ob = s_opts(arch, norm, prec), *of = s_opts(file, norm, prec);
    ob->zero_init_residual = of->zero_init_residual = zir;
    nn_model *a = s_build(ob, c, hw, hw, 10), *b = s_build(of, c, hw, hw, 10);
    s_same_graph(a, b);
    s_train(a, steps, 3);
    s_train(b, steps, 3);
    const nn_arena *pa = nn_model_params(a), *pb = nn_model_params(b);
    if (memcmp(pa->data, pb->data, pa->numel * sizeof(float)) != 0)
        fail_msg("%s vs %s (%s, %s): parameters differ after %d steps", arch, file,
                 node_norm_name(norm), node_precision_name(prec), steps);
    const nn_arena *ba = nn_model_buffers(a), *bb = nn_model_buffers(b);
    assert_memory_equal(ba->data, bb->data, ba->numel * sizeof(float));
    nn_model_destroy(&a);
    nn_model_destroy(&b);
    free(ob);
    free(of);
}

static void test_builtin_cnn(void **state)
{
    (void)state;
    s_check_builtin("cnn", "models/cnn.yaml", 1, 28, NN_NORM_EVONORM, NODE_PREC_FP32, 0, 3);
    s_check_builtin("cnn", "models/cnn.yaml", 3, 32, NN_NORM_BATCHNORM, NODE_PREC_FP32, 0, 3);
    s_check_builtin("cnn", "models/cnn.yaml", 1, 28, NN_NORM_EVONORM, NODE_PREC_INT8, 0, 3);
    s_check_builtin("cnn", "models/cnn.yaml", 1, 28, NN_NORM_NONE, NODE_PREC_FP32, 0, 2);
}

static void test_builtin_resnet20(void **state)
{
    (void)state;
    s_check_builtin("resnet20", "models/resnet20.yaml", 3, 32, NN_NORM_EVONORM, NODE_PREC_FP32,
                    0, 2);
    s_check_builtin("resnet20", "models/resnet20.yaml", 1, 28, NN_NORM_EVONORM, NODE_PREC_INT8,
                    1, 2);
    s_check_builtin("resnet20", "models/resnet20.yaml", 1, 16, NN_NORM_BATCHNORM,
                    NODE_PREC_FP32, 1, 2);
}

static void test_builtin_vgg11(void **state)
{
    (void)state;
    s_check_builtin("vgg11", "models/vgg11.yaml", 3, 32, NN_NORM_EVONORM, NODE_PREC_FP32, 0, 1);
    s_check_builtin("vgg11", "models/vgg11.yaml", 1, 32, NN_NORM_EVONORM, NODE_PREC_INT8, 0, 1);
}

static void test_mlp_names(void **state)
{
    (void)state;
    node_model_opts *o = s_opts("models/mlp.yaml", NN_NORM_EVONORM, NODE_PREC_FP32);
    nn_model *m = s_build(o, 7, 1, 1, 3);
    static const char *const names[] = {"layers.0.weight", "layers.0.bias", "layers.3.weight",
                                        "layers.3.bias", "layers.5.weight", "layers.5.bias"};
    static const int shapes[6][2] = {{64, 7}, {64, 0}, {64, 64}, {64, 0}, {3, 64}, {3, 0}};
    const nn_arena *p = nn_model_params(m);
    assert_int_equal(p->nviews, 6);
    for (int v = 0; v < 6; v++) {
        assert_string_equal(p->views[v].name, names[v]);
        assert_int_equal(p->views[v].shape[0], shapes[v][0]);
        if (shapes[v][1])
            assert_int_equal(p->views[v].shape[1], shapes[v][1]);
    }
    assert_string_equal(nn_model_op(m, 2)->cls->kind, "dropout");
    /* int8: the linears become integer ops, names stay */
    o->precision = NODE_PREC_INT8;
    nn_model *q = s_build(o, 7, 1, 1, 3);
    s_same_arena(nn_model_params(m), nn_model_params(q), "param");
    s_train(q, 2, 4);
    nn_model_destroy(&q);
    nn_model_destroy(&m);
    free(o);
}

/* A model from YAML text (the name "t.yaml" in messages). */
static node_model_opts *s_text(const char *yaml, char *err, size_t errlen)
{
    node_model_opts *o = calloc(1, sizeof *o);
    node_model_opts_defaults(o);
    err[0] = 0;
    if (node_model_opt_set_text(o, "t.yaml", yaml, strlen(yaml), err, errlen) != 0) {
        free(o);
        return NULL;
    }
    return o;
}

static void test_graph(void **state)
{
    (void)state;
    char err[1024];
    /* r takes its input from a later layer: built after it */
    node_model_opts *o = s_text("layers:\n"
                                "  - conv: {name: a, out: 4, kernel: 3, pad: 1}\n"
                                "  - relu: {name: r, from: c}\n"
                                "  - conv: {name: c, out: 4, kernel: 1, from: a, bias: false}\n"
                                "  - add: {name: s, from: [r, a]}\n"
                                "  - gap: {}\n"
                                "  - linear: {out: classes}\n", err, sizeof err);
    if (!o)
        fail_msg("%s", err);
    nn_model *m = s_build(o, 2, 5, 5, 3);
    const nn_arena *p = nn_model_params(m);
    assert_int_equal(p->nviews, 5);
    assert_string_equal(p->views[2].name, "c.weight");
    assert_string_equal(p->views[3].name, "layers.5.weight");
    assert_string_equal(nn_model_op(m, 1)->name, "c");
    assert_string_equal(nn_model_op(m, 2)->name, "r");
    s_train(m, 2, 2);
    nn_model_destroy(&m);
    free(o);
    /* a norm and a batchnorm on the model input: backward needs no input gradient */
    o = s_text("input: [3, 4, 4]\nlayers:\n  - norm: {}\n  - batchnorm: {from: input, name: bn}\n"
               "  - add: {from: [layers.0, bn]}\n  - flatten: {}\n  - linear: {out: 2}\n",
               err, sizeof err);
    if (!o)
        fail_msg("%s", err);
    m = s_build(o, 3, 4, 4, 2);
    s_train(m, 2, 2);
    nn_model_destroy(&m);
    free(o);
}

/* Every layer kind in one graph trains in every precision and norm. */
static void test_all_layers(void **state)
{
    (void)state;
    char err[1024];
    node_model_opts *o = s_text("input: [3, 12, 12]\nlayers:\n"
                                "  - conv: {name: stem, out: 16, kernel: 3, pad: 1}\n"
                                "  - norm: {}\n"
                                "  - conv: {out: 16, kernel: 3, pad: 1, bias: false}\n"
                                "  - batchnorm: {name: bn}\n"
                                "  - add: {name: sum, from: [stem, bn]}\n"
                                "  - act: {}\n"
                                "  - maxpool: {kernel: 2}\n"
                                "  - avgpool: {kernel: 3, stride: 1}\n"
                                "  - relu: {}\n"
                                "  - flatten: {}\n"
                                "  - dropout: {p: 0.2}\n"
                                "  - linear: {out: 8}\n"
                                "  - gap: {}\n"
                                "  - linear: {out: classes, bias: false}\n", err, sizeof err);
    if (!o)
        fail_msg("%s", err);
    for (int prec = 0; prec < 3; prec++)
        for (int norm = 0; norm < 3; norm++) {
            o->precision = (node_precision)prec;
            o->norm = (nn_norm_kind)norm;
            nn_model *m = s_build(o, 3, 12, 12, 5);
            s_train(m, 2, 3);
            const nn_arena *p = nn_model_params(m);
            for (size_t k = 0; k < p->numel; k++)
                if (!isfinite(p->data[k]))
                    fail_msg("%s/%s: parameter %zu not finite", node_precision_name(o->precision),
                             node_norm_name(o->norm), k);
            nn_model_destroy(&m);
        }
    free(o);
}

/* Float central differences of the training loss (same dropout mask each
 * time: the model's rng restored) against the analytic parameter gradient. */
static void test_gradients(void **state)
{
    (void)state;
    char err[1024];
    node_model_opts *o = s_text("input: [2, 5, 5]\nlayers:\n"
                                "  - conv: {out: 3, kernel: 3, stride: 2}\n"
                                "  - flatten: {}\n  - dropout: {p: 0.3}\n"
                                "  - avgpool: {kernel: 1}\n"
                                "  - linear: {out: classes}\n", err, sizeof err);
    if (!o)
        fail_msg("%s", err);
    nn_model *m = s_build(o, 2, 5, 5, 3);
    const int N = 4;
    float x[4 * 50];
    uint8_t y[4] = {0, 2, 1, 2};
    nn_rng r;
    nn_rng_seed(&r, 5);
    for (int i = 0; i < N * 50; i++)
        x[i] = nn_rng_normal(&r);
    nn_model_init_params(m, 3);
    nn_model_prepare(m, N);
    nn_rng keep = *nn_model_rng(m);
    nn_model_forward(m, x, y, N, 1);
    nn_model_backward(m);
    nn_arena *p = nn_model_params(m), *g = nn_model_grads(m);
    float *an = malloc(p->numel * sizeof *an);
    memcpy(an, g->data, p->numel * sizeof *an);
    const float h = 1e-2f;
    for (size_t k = 0; k < p->numel; k++) {
        float w = p->data[k];
        p->data[k] = w + h;
        *nn_model_rng(m) = keep;
        double lp = nn_model_forward(m, x, y, N, 1);
        p->data[k] = w - h;
        *nn_model_rng(m) = keep;
        double lm = nn_model_forward(m, x, y, N, 1);
        p->data[k] = w;
        double fd = (lp - lm) / (2.0 * h);
        if (!(fabs(fd - an[k]) <= 2e-3 + 2e-2 * fabs(fd)))
            fail_msg("param %zu: analytic %.6g finite-difference %.6g", k, an[k], fd);
    }
    /* dropout drops: some flattened values are zero in training, none at eval */
    free(an);
    nn_model_destroy(&m);
    free(o);
}

typedef struct {
    const char *yaml;
    const char *want;   /* substring of the message */
} s_bad;

static const s_bad s_bad_files[] = {
    {"", "t.yaml:1: empty file"},
    {"- conv: {}\n", "t.yaml:1: expected a mapping with 'layers'"},
    {"layers: [\n", "t.yaml:2: YAML syntax error"},
    {"layers:\n  - relu: {}\n---\nlayers: []\n", "t.yaml:3: more than one YAML document"},
    {"layer:\n  - relu: {}\n", "t.yaml:1: unknown key 'layer'"},
    {"input: [1, 2]\nlayers:\n  - linear: {out: 2}\n", "t.yaml:1: input: expected [C, H, W]"},
    {"input: [1, x, 2]\nlayers:\n  - linear: {out: 2}\n", "t.yaml:1: input: 'x' is not an integer"},
    {"augment: maybe\nlayers:\n  - linear: {out: 2}\n", "t.yaml:1: augment: expected true or false"},
    {"layers: []\n", "t.yaml:1: layers: expected a list of layers"},
    {"layers:\n  - linear: {out: 2}\n  - convolution: {out: 3}\n",
     "t.yaml:3: layer 1: unknown layer 'convolution'"},
    {"layers:\n  - {linear: {out: 2}, relu: {}}\n", "t.yaml:2: layer 0: expected one layer"},
    {"layers:\n  - linear: {out: 2, kernel: 3}\n",
     "t.yaml:2: layer 'layers.0' (linear): unknown key 'kernel'"},
    {"layers:\n  - linear: {name: head, out: 2, out: 3}\n",
     "t.yaml:2: layer 'head' (linear): duplicate key 'out'"},
    {"layers:\n  - linear: {name: head, out: 0}\n", "t.yaml:2: layer 'head' (linear): out: 0 is out of range"},
    {"layers:\n  - linear: {name: head, out: many}\n", "'many' is not an integer"},
    {"layers:\n  - linear: {name: head}\n", "t.yaml:2: layer 'head' (linear): needs out"},
    {"layers:\n  - conv: {out: 2}\n", "t.yaml:2: layer 'layers.0' (conv): needs kernel"},
    {"layers:\n  - conv: {out: 2, kernel: 3, pad: 3}\n", "pad 3 must be smaller than the kernel 3"},
    {"layers:\n  - conv: {out: 2, kernel: 3, bias: 1}\n", "bias: expected true or false, got '1'"},
    {"layers:\n  - dropout: {p: 1}\n  - linear: {out: 2}\n",
     "t.yaml:2: layer 'layers.0' (dropout): p: '1' is not a probability"},
    {"layers:\n  - relu: {name: 'a b'}\n  - linear: {out: 2}\n", "'a b' is not a layer name"},
    {"layers:\n  - relu: {name: input}\n  - linear: {out: 2}\n", "'input' names the model input"},
    {"layers:\n  - relu: {name: x}\n  - relu: {name: x}\n  - linear: {out: 2}\n",
     "t.yaml:3: layer 'x' (relu): the name is taken by the layer at line 2"},
    {"layers:\n  - relu: {}\n  - linear: {out: 2, from: nowhere}\n",
     "t.yaml:3: layer 'layers.1' (linear): from: no layer named 'nowhere'"},
    {"layers:\n  - relu: {name: a, from: b}\n  - relu: {name: b}\n  - linear: {out: 2}\n",
     "t.yaml:2: layer 'a' (relu): its input is its own output (a cycle: 'a' <- 'b' <- 'a')"},
    {"layers:\n  - relu: {name: a, from: a}\n  - linear: {out: 2, from: input}\n",
     "t.yaml:2: layer 'a' (relu): its input is its own output"},
    {"layers:\n  - relu: {name: a}\n  - linear: {out: 2, from: input}\n",
     "t.yaml:2: layer 'a' (relu): its output is never used"},
    {"layers:\n  - relu: {name: a, from: c}\n  - linear: {name: c, out: 2, from: input}\n",
     "t.yaml:2: layer 'a' (relu): its output is never used"},
    {"layers:\n  - add: {from: [input]}\n  - linear: {out: 2}\n",
     "t.yaml:2: layer 'layers.0' (add): from: expected a list of two layer names"},
    {"layers:\n  - add: {}\n  - linear: {out: 2}\n", "t.yaml:2: layer 'layers.0' (add): needs from"},
    {"layers:\n  - add: {from: [input, input], p: 1}\n  - linear: {out: 2}\n", "unknown key 'p'"},
    {"layers: &a\n  - relu: *a\n", "t.yaml:2: YAML aliases"},
    {"layers:\n  - relu: {name: [[[[[[[[[1]]]]]]]]]}\n", "nested more than 8 deep"},
    /* shapes, checked at once when the file gives its whole input */
    {"input: [1, 4, 4]\nlayers:\n  - conv: {name: c, out: 2, kernel: 5}\n  - linear: {out: 2}\n",
     "t.yaml:3: layer 'c' (conv): kernel 5 (pad 0) does not fit the 1x4x4 input"},
    {"input: [1, 4, 4]\nlayers:\n  - maxpool: {kernel: 2}\n  - maxpool: {kernel: 2}\n"
     "  - maxpool: {name: p3, kernel: 2}\n  - linear: {out: 2}\n",
     "t.yaml:5: layer 'p3' (maxpool): kernel 2 does not fit the 1x1x1 input"},
    {"input: [1, 4, 4]\nlayers:\n  - conv: {name: c, out: 2, kernel: 1}\n"
     "  - add: {name: s, from: [c, input]}\n  - linear: {out: 2}\n",
     "t.yaml:4: layer 's' (add): cannot add 2x4x4 ('c') and 1x4x4 ('input')"},
};

static void test_errors(void **state)
{
    (void)state;
    char err[1024];
    for (size_t k = 0; k < sizeof s_bad_files / sizeof s_bad_files[0]; k++) {
        node_model_opts *o = s_text(s_bad_files[k].yaml, err, sizeof err);
        if (o)
            fail_msg("case %zu accepted:\n%s", k, s_bad_files[k].yaml);
        if (!strstr(err, s_bad_files[k].want))
            fail_msg("case %zu: message\n  %s\nlacks\n  %s", k, err, s_bad_files[k].want);
    }
}

/* Errors found when the data's shape is known: at build time. */
static void test_build_errors(void **state)
{
    (void)state;
    char err[1024];
    node_model_opts *o = s_text("input: [any, 8, 8]\nlayers:\n  - conv: {out: 4, kernel: 3}\n"
                                "  - linear: {name: head, out: 5}\n", err, sizeof err);
    assert_non_null(o);
    assert_null(node_model_build(o, 1, 9, 9, 5, err, sizeof err));
    assert_non_null(strstr(err, "t.yaml:1: input: the model takes [any, 8, 8] but the data gives 1x9x9"));
    assert_null(node_model_build(o, 1, 8, 8, 3, err, sizeof err));
    assert_non_null(strstr(err, "t.yaml:4: layer 'head' (linear): the last layer gives 5x1x1 "
                            "values, expected the 3 class scores"));
    free(o);
    /* act at the end adds nothing with EvoNorm: the linear gives the scores */
    o = s_text("layers:\n  - linear: {out: 4}\n  - act: {}\n", err, sizeof err);
    assert_non_null(o);
    nn_model *m = node_model_build(o, 3, 1, 1, 4, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(nn_model_nops(m), 1);
    nn_model_destroy(&m);
    o->norm = NN_NORM_BATCHNORM; /* a ReLU after it */
    m = node_model_build(o, 3, 1, 1, 4, err, sizeof err);
    assert_non_null(m);
    assert_string_equal(nn_model_op(m, 1)->cls->kind, "relu");
    nn_model_destroy(&m);
    free(o);
    /* with --norm none a model of norms computes nothing */
    o = s_text("layers:\n  - norm: {act: false}\n", err, sizeof err);
    assert_non_null(o);
    o->norm = NN_NORM_NONE;
    assert_null(node_model_build(o, 4, 1, 1, 4, err, sizeof err));
    assert_non_null(strstr(err, "t.yaml:2: layer 'layers.0' (norm): with --norm none this last "
                            "layer computes nothing"));
    free(o);
    o = s_text("layers:\n  - relu: {}\n", err, sizeof err);
    assert_non_null(o);
    assert_null(node_model_build(o, 4, 1, 1, 4, err, sizeof err));
    assert_non_null(strstr(err, "t.yaml: no layer with parameters"));
    free(o);
}

static void test_cli(void **state)
{
    (void)state;
    char dir[256], path[512], err[1024];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "mf"), 0);
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("layers:\n  - conv: {out: 4, kernel: 3}\n  - pool: {}\n", f);
    fclose(f);
    node_model_opts *o = calloc(1, sizeof *o);
    node_model_opts_defaults(o);
    assert_int_equal(node_model_opt_set(o, "--model", path, err, sizeof err), -1);
    char want[600];
    snprintf(want, sizeof want, "%s:3: layer 1: unknown layer 'pool'", path);
    assert_non_null(strstr(err, want));
    assert_int_equal(node_model_opt_set(o, "--model", "resnet21", err, sizeof err), -1);
    assert_non_null(strstr(err, "or a model file FILE.yaml"));
    assert_int_equal(node_model_opt_set(o, "--model", "nowhere/x.yaml", err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    /* the training commands' parser: exit code 2 */
    node_opts opts;
    char *argv[] = {"train", "--model", path, NULL};
    assert_int_equal(node_opts_parse(&opts, NODE_CMD_TRAIN, 3, argv), 2);
    node_opts_free(&opts);
    char good[] = "models/mlp.yaml";
    char *argv2[] = {"train", "--model", good, "--init", "w.safetensors", "--init-skip",
                     "^layers\\.5\\.", NULL};
    assert_int_equal(node_opts_parse(&opts, NODE_CMD_TRAIN, 7, argv2), -1);
    assert_int_equal(opts.t.mo.model, NODE_ARCH_FILE);
    assert_string_equal(opts.t.init, "w.safetensors");
    assert_string_equal(opts.t.init_skip, "^layers\\.5\\.");
    node_opts_free(&opts);
    /* a shape that fails only against the data: found when it is loaded,
     * still exit code 2 with FILE:LINE */
    char big[512], log[600];
    snprintf(big, sizeof big, "%s/big.yaml", dir);
    snprintf(log, sizeof log, "%s/train.log", dir);
    f = fopen(big, "w");
    assert_non_null(f);
    fputs("layers:\n  - conv: {name: wide, out: 4, kernel: 30}\n  - linear: {out: classes}\n", f);
    fclose(f);
    const char *bin = tk_bin();
    assert_non_null(bin);
    char *args[] = {"lpgossip", "train", "--model", big, "--train-subset", "64", NULL};
    pid_t pid = tk_spawn(NULL, args, log, -1);
    assert_true(pid > 0);
    assert_int_equal(tk_wait(pid, 120), 2);
    char *out = tk_slurp(log);
    snprintf(want, sizeof want, "%s:2: layer 'wide' (conv): kernel 30 (pad 0) does not fit the "
             "1x28x28 input", big);
    if (!strstr(out, want))
        fail_msg("log lacks '%s':\n%s", want, out);
    free(out);
    free(o);
    tk_rmtree(dir);
}

static void test_saved_model(void **state)
{
    (void)state;
    char dir[256], path[512], err[1024];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "mf"), 0);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    node_model_opts *o = s_opts("models/resnet20.yaml", NN_NORM_EVONORM, NODE_PREC_INT8);
    nn_model *m = s_build(o, 1, 8, 8, 4);
    s_train(m, 1, 2);
    assert_int_equal(node_model_save(path, m, o, err, sizeof err), 0);
    node_model_opts *back = calloc(1, sizeof *back);
    if (node_model_opts_from_file(path, back, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(back->model, NODE_ARCH_FILE);
    assert_int_equal(back->precision, NODE_PREC_INT8);
    assert_string_equal(back->model_yaml, o->model_yaml);
    char d1[17], d2[17];
    node_model_digest(o, d1);
    node_model_digest(back, d2);
    assert_string_equal(d1, d2);
    assert_int_equal(strlen(d1), 16);
    nn_model *r = s_build(back, 1, 8, 8, 4);
    s_same_graph(m, r);
    if (node_model_load(path, r, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_memory_equal(nn_model_params(m)->data, nn_model_params(r)->data,
                        nn_model_params(m)->numel * sizeof(float));
    /* a built-in model carries no model file, and has no digest */
    node_model_opts *b = s_opts("cnn", NN_NORM_EVONORM, NODE_PREC_FP32);
    node_model_digest(b, d1);
    assert_string_equal(d1, "");
    /* one byte more in the file: another digest */
    back->model_yaml[strlen(back->model_yaml)] = '\n';
    node_model_digest(back, d1);
    assert_string_not_equal(d1, d2);
    nn_model_destroy(&m);
    nn_model_destroy(&r);
    free(o);
    free(back);
    free(b);
    tk_rmtree(dir);
}

/* With gossip every node starts from the same weights: node_ranks_init
 * builds each rank's trainer from the same --init file over the same seeded
 * initialisation (the skipped head included). */
static void test_init_ranks(void **state)
{
    (void)state;
    char dir[256], path[512], err[1024];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "mf"), 0);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    node_opts opts;
    char *argv[] = {"simulate", "--model", "models/cnn.yaml", "--topology",
                    "topologies/complete4.yaml", "--train-subset", "64", "--init", path,
                    "--init-skip", "^fc2\\.", NULL};
    assert_int_equal(node_opts_parse(&opts, NODE_CMD_SIMULATE, 11, argv), -1);
    nn_model *w = s_build(&opts.t.mo, 1, 28, 28, 10);
    nn_model_init_params(w, 12345);
    const nn_arena *wa = nn_model_params(w);
    assert_int_equal(nn_safetensors_save(path, &wa, 1, NULL, err, sizeof err), 0);
    node_ranks r;
    if (node_ranks_init(&r, &opts.t, 4, 0.0, 0, 3, err, sizeof err) != 0)
        fail_msg("%s", err);
    const nn_arena *p0 = nn_model_params(r.tr[0].model);
    size_t head = p0->views[p0->nviews - 2].offset; /* fc2.weight, fc2.bias */
    assert_string_equal(p0->views[p0->nviews - 2].name, "fc2.weight");
    assert_memory_equal(p0->data, wa->data, head * sizeof(float));
    assert_memory_not_equal(p0->data + head, wa->data + head, (p0->numel - head) * sizeof(float));
    for (int k = 1; k < 3; k++)
        assert_memory_equal(nn_model_params(r.tr[k].model)->data, p0->data,
                            p0->numel * sizeof(float));
    node_ranks_free(&r);
    nn_model_destroy(&w);
    node_opts_free(&opts);
    tk_rmtree(dir);
}

/* What a model file asks of the data: vgg11.yaml's input [any, 32, 32]
 * pads 28x28 images to 32 and its augment: true turns augmentation on
 * under --augment auto, as the built-in vgg11; cnn.yaml asks nothing. */
static void test_data_hints(void **state)
{
    (void)state;
    char err[1024];
    node_model_opts *o = s_opts("models/vgg11.yaml", NN_NORM_EVONORM, NODE_PREC_FP32);
    node_data d;
    if (node_data_load(o, &d, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(d.in_h, 32);
    assert_int_equal(d.in_w, 32);
    assert_int_equal(d.aug_train.hflip, 1);
    node_data_free(&d);
    o->augment = 0; /* --augment off wins */
    o->pad_to = 30;  /* --pad-to wins (and then the model refuses 30x30) */
    assert_int_equal(node_data_load(o, &d, err, sizeof err), 0);
    assert_int_equal(d.in_h, 30);
    assert_int_equal(d.aug_train.hflip, 0);
    assert_null(node_model_build(o, d.in_c, d.in_h, d.in_w, 10, err, sizeof err));
    assert_non_null(strstr(err, "models/vgg11.yaml:5: input: the model takes [any, 32, 32] but "
                            "the data gives 1x30x30"));
    node_data_free(&d);
    free(o);
    o = s_opts("models/cnn.yaml", NN_NORM_EVONORM, NODE_PREC_FP32);
    assert_int_equal(node_data_load(o, &d, err, sizeof err), 0);
    assert_int_equal(d.in_h, 28);
    assert_int_equal(d.aug_train.hflip, 0);
    node_data_free(&d);
    free(o);
}

/* The run identity: model_digest and init_digest only when given, so a
 * built-in run's identity (and its checkpoints) stay as they were. */
static const char *s_ident_get(const node_ckpt_ident *id, const char *key)
{
    for (int k = 0; id->kv[k]; k += 2)
        if (!strcmp(id->kv[k], key))
            return id->kv[k + 1];
    return NULL;
}

static void test_identity(void **state)
{
    (void)state;
    char err[1024], digest[17];
    const char *topo_path = "topologies/complete4.yaml";
    node_model_opts *o = s_opts("models/mlp.yaml", NN_NORM_EVONORM, NODE_PREC_FP32);
    node_model_digest(o, digest);
    node_ckpt_run run = {"file", "evonorm", "fp32", "fashion-mnist", 8, "choco", "identity", 1, 1,
                         0, 0, 1, 32, 0x1234u, topo_path, 4, 0, digest,
                         "tests/fixtures/mlp_init.safetensors", NULL};
    node_ckpt_ident a, b;
    assert_int_equal(node_ckpt_ident_make(&a, &run, err, sizeof err), 0);
    assert_string_equal(s_ident_get(&a, "model_digest"), digest);
    assert_int_equal(strlen(s_ident_get(&a, "init_digest")), 16);
    run.init_path = "tests/fixtures/mlp_init_i64.safetensors";
    assert_int_equal(node_ckpt_ident_make(&b, &run, err, sizeof err), 0);
    assert_string_not_equal(s_ident_get(&a, "init_digest"), s_ident_get(&b, "init_digest"));
    run.init_path = "nowhere.safetensors";
    assert_int_equal(node_ckpt_ident_make(&b, &run, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot read the --init file nowhere.safetensors"));
    run.model_digest = "";
    run.init_path = NULL;
    assert_int_equal(node_ckpt_ident_make(&b, &run, err, sizeof err), 0);
    assert_null(s_ident_get(&b, "model_digest"));
    assert_null(s_ident_get(&b, "init_digest"));
    free(o);
}

/* What make_init_weights.py stores at element i of tensor k. */
static float s_fixture(int k, size_t i, int f64)
{
    double v = (double)((long)((i * 37 + (size_t)k) % 101) - 50) / 64.0;
    return f64 ? (float)(v + 1.0 / 3.0) : (float)v;
}

static void test_init(void **state)
{
    (void)state;
    const char *fx = "tests/fixtures/mlp_init.safetensors";
    char err[1024];
    node_model_opts *o = s_opts("models/mlp.yaml", NN_NORM_EVONORM, NODE_PREC_FP32);
    nn_model *m = s_build(o, 4, 1, 1, 3), *fresh = s_build(o, 4, 1, 1, 3);
    nn_model_init_params(m, 11);
    nn_model_init_params(fresh, 11);
    size_t loaded = 0;
    if (node_model_init_from(m, fx, NULL, &loaded, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(loaded, 6);
    const nn_arena *p = nn_model_params(m);
    for (size_t v = 0; v < p->nviews; v++)
        for (size_t i = 0; i < p->views[v].numel; i++)
            if (p->data[p->views[v].offset + i] != s_fixture((int)v, i, v == 2))
                fail_msg("%s[%zu] = %.9g, want %.9g", p->views[v].name, i,
                         p->data[p->views[v].offset + i], s_fixture((int)v, i, v == 2));
    /* --init-skip: the head keeps its fresh initialisation */
    nn_model_init_params(m, 11);
    assert_int_equal(node_model_init_from(m, fx, "^layers\\.5\\.", &loaded, err, sizeof err), 0);
    assert_int_equal(loaded, 4);
    const nn_arena *q = nn_model_params(fresh);
    size_t head = p->views[4].offset;
    assert_memory_equal(p->data + head, q->data + head, (p->numel - head) * sizeof(float));
    assert_true(p->data[0] == s_fixture(0, 0, 0));
    /* the refusals name the tensor */
    nn_model *k4 = s_build(o, 4, 1, 1, 4);
    assert_int_equal(node_model_init_from(k4, fx, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'layers.5.weight': shape [3,64], the model's is [4,64]"));
    assert_int_equal(node_model_init_from(k4, fx, "layers\\.5", NULL, err, sizeof err), 0);
    assert_int_equal(node_model_init_from(m, "tests/fixtures/mlp_init_i64.safetensors", NULL, NULL,
                                          err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'layers.0.weight': dtype I64 cannot be loaded"));
    assert_int_equal(node_model_init_from(m, fx, "(", NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "--init-skip '('"));
    node_model_opts *c = s_opts("cnn", NN_NORM_EVONORM, NODE_PREC_FP32);
    nn_model *cnn = s_build(c, 1, 8, 8, 3);
    assert_int_equal(node_model_init_from(cnn, fx, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'conv1.weight' missing"));
    /* a non-finite weight is refused, naming the tensor */
    char dir[256], bad[512];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "mf"), 0);
    snprintf(bad, sizeof bad, "%s/nan.safetensors", dir);
    nn_arena *kp = nn_model_params(k4);
    kp->data[kp->views[2].offset + 5] = NAN;
    const nn_arena *kc = kp;
    assert_int_equal(nn_safetensors_save(bad, &kc, 1, NULL, err, sizeof err), 0);
    assert_int_equal(node_model_init_from(k4, bad, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "layers.3.weight[5] = nan is not finite"));
    tk_rmtree(dir);
    nn_model_destroy(&cnn);
    nn_model_destroy(&k4);
    nn_model_destroy(&m);
    nn_model_destroy(&fresh);
    free(o);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_cnn),     cmocka_unit_test(test_builtin_resnet20),
        cmocka_unit_test(test_builtin_vgg11),   cmocka_unit_test(test_mlp_names),
        cmocka_unit_test(test_graph),           cmocka_unit_test(test_all_layers),           cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_cli),             cmocka_unit_test(test_saved_model),
        cmocka_unit_test(test_init),            cmocka_unit_test(test_identity),
        cmocka_unit_test(test_init_ranks),      cmocka_unit_test(test_data_hints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
