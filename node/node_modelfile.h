/* node_modelfile — model files: a YAML layer list or graph (docs/models.md)
 * turned into the same nn_b_* builder calls as the built-in architectures.
 *
 * Owns:    the model-file schema and its parser (libyaml document API, as
 *          topology/topo_parse.c; nn/ never sees YAML), the validated layer
 *          graph (node_mf: layers with their keys, resolved inputs, a
 *          topological build order), the shape check, and the
 *          nn_model_config.build callback that builds it.
 * Exposes: node_mf_parse / node_mf_destroy, node_mf_check_shapes,
 *          node_mf_build (the callback), and the glue for node_model_opts:
 *          reading `--model FILE.yaml`, the file's digest and the data
 *          hints it gives (input size to pad to, augmentation default).
 * Callers: node_opts.c (--model), node_common.c (node_model_build, model
 *          files), node_cmd_node.c (run identity), tests, the fuzz target
 *          tests/fuzz/fuzz_modelfile.c.
 *
 * Every error from a file names it and the line of the offending YAML node,
 * and for a layer its name and kind:
 *   "net.yaml:7: layer 'conv2' (conv): kernel 5 does not fit the 3x3 input".
 * Input is untrusted: bounded by NODE_MF_MAX_BYTES / NODE_MF_MAX_LAYERS,
 * nesting checked on libyaml's event stream before the document is built,
 * and the traversal is schema-driven (no recursion over the YAML tree).
 */
#ifndef NODE_MODELFILE_H
#define NODE_MODELFILE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_model.h"

#define NODE_MF_MAX_BYTES  65536   /* a model file (also what a saved model carries) */
#define NODE_MF_MAX_LAYERS 1024
#define NODE_MF_NAME_MAX   40      /* layer names: parameter names add ".running_mean" */

typedef enum {
    NODE_L_CONV, NODE_L_NORM, NODE_L_BATCHNORM, NODE_L_ACT, NODE_L_RELU, NODE_L_MAXPOOL,
    NODE_L_AVGPOOL, NODE_L_GAP, NODE_L_FLATTEN, NODE_L_LINEAR, NODE_L_DROPOUT, NODE_L_ADD,
} node_layer_kind;

typedef struct {
    node_layer_kind kind;
    char  name[NODE_MF_NAME_MAX + 1]; /* `name:` or "layers.<index>" */
    int   line;                       /* 1-based line of the entry */
    int   nin;                        /* 1, or 2 for add */
    int   in[2];                      /* input layers (indices), -1 = the model input */
    int   out;                        /* conv/linear outputs; -1 = the class count */
    int   kernel, stride, pad, bias;  /* conv, pools */
    int   act;                        /* norm: ReLU after it unless EvoNorm [1] */
    int   residual;                   /* norm: gamma 0 under --zero-init-residual */
    float p;                          /* dropout */
} node_layer;

typedef struct {
    char        file[256];       /* for messages */
    int         in_c, in_h, in_w; /* `input:`; 0 = not given (any) */
    int         in_line;
    int         augment;         /* `augment:` 0/1; -1 not given */
    node_layer *layers;
    int         n;
    int        *order;           /* build order (topological, list order where free) */
} node_mf;

/* Parses and validates a model file's text: schema, values, names, inputs
 * (dangling names, cycles, layers whose output nothing uses).  `name` is
 * the file name for messages.  NULL with "NAME:LINE: ..." on error. */
node_mf *node_mf_parse(const char *yaml, size_t len, const char *name, char *err, size_t errlen);
void     node_mf_destroy(node_mf **self_p);

/* Walks the shapes for an input of c x h x w and `classes` classes (0: do
 * not check the last layer against the class count): 0, or -1 with
 * "FILE:LINE: layer 'NAME' (KIND): ..." for the first layer that does not
 * fit (or the input when `input:` disagrees). */
int node_mf_check_shapes(const node_mf *mf, int c, int h, int w, int classes, char *err,
                         size_t errlen);

/* nn_model_config.build: ctx is a const node_mf *.  Checks the shapes for
 * the model's input and classes first, then builds (parameter names
 * NAME.weight, NAME.bias, ... as the nn_b_* builders make them). */
int node_mf_build(nn_model *m, const void *ctx, char *err, size_t errlen);

/* The layer kind's name as written in files ("conv", ...). */
const char *node_mf_kind_name(node_layer_kind k);

#endif
