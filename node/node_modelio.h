/* node_modelio — model files and pretrained weights as the commands see
 * them: `--model FILE.yaml` into node_model_opts, what the file means for a
 * run (its digest in the run identity, the data hints it gives), and
 * `--init WEIGHTS.safetensors` with `--init-skip REGEX`.
 *
 * Owns:    nothing long-lived; node_model_opts holds the model file's bytes
 *          (so a saved model rebuilds without the YAML file).
 * Exposes: the functions below.
 * Callers: node_opts.c, node_common.c, node_trainer.c, node_cmd_*.c, tests.
 */
#ifndef NODE_MODELIO_H
#define NODE_MODELIO_H

#include <stddef.h>

#include "node/node_common.h"
#include "node/node_modelfile.h"

/* --model VALUE: a built-in name (cnn, resnet20, vgg11; these win over
 * files of the same name) or a model file (a value ending in .yaml or .yml,
 * or naming an existing file): the file is
 * read, parsed and validated, and when it gives its whole input (`input:`
 * without `any`) its shapes are checked too.  0, or -1 with a message
 * ("FILE:LINE: layer 'NAME' (KIND): ..." for errors in the file). */
int node_model_opt_set(node_model_opts *o, const char *flag, const char *value, char *err,
                       size_t errlen);
/* Sets o to the model file text `yaml` (len bytes) named `name`: parsed and
 * validated as above.  0, or -1 with a message. */
int node_model_opt_set_text(node_model_opts *o, const char *name, const char *yaml, size_t len,
                            char *err, size_t errlen);
/* The parsed model file of o (o->model == NODE_ARCH_FILE), or NULL with a
 * message.  node_mf_destroy it. */
node_mf *node_model_mf(const node_model_opts *o, char *err, size_t errlen);
/* What banners and metrics call the model: the file's path or the name. */
const char *node_model_label(const node_model_opts *o);
/* FNV-1a 64 of the model file's bytes as 16 hex digits ("" for a built-in
 * model): part of a run's identity like the topology's digest. */
void node_model_digest(const node_model_opts *o, char hex[17]);
/* What a model file asks of the data: *pad_to = its input height when it
 * gives a square input larger than the images (else unchanged), *augment
 * = its `augment:` when given (what --augment auto means; else unchanged).
 * No effect for built-in models. */
void node_model_data_hints(const node_model_opts *o, int img_h, int img_w, int *pad_to,
                           int *augment);

/* 1 when err is about o's model file ("FILE:LINE: ...", a shape that does
 * not fit the data): a bad configuration, exit code 2, rather than a
 * runtime failure.  0 otherwise (and for built-in models). */
int node_model_file_error(const node_model_opts *o, const char *err);

/* --init: fills m's parameters (and those buffers the file holds, e.g.
 * BatchNorm running statistics) from the tensors of the same name in a
 * safetensors file (a PyTorch state_dict saved with safetensors.torch's
 * save_file loads directly; F32, F16, BF16 and F64 tensors, converted to
 * F32).  Parameters whose names match the POSIX extended regular
 * expression `skip` (NULL: none) keep their values (fresh initialisation:
 * a new classifier head).  A parameter the file lacks or holds with
 * another shape, and a weight that is not finite, is named in the error.
 * *loaded (may be NULL) gets the
 * number of tensors read.  Deterministic: the same file gives the same
 * weights on every node. */
int node_model_init_from(nn_model *m, const char *path, const char *skip, size_t *loaded,
                         char *err, size_t errlen);

#endif
