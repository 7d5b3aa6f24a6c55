/* node_common — what every command shares: the model identity and its
 * names, building a model for a data set, evaluation, model files with
 * their metadata, model averaging and small CLI helpers.
 *
 * Owns:    node_model_opts (the typed model/data flags of train, simulate,
 *          node, and what eval reads back from a model file), node_data (a
 *          data set, its normalisation and augmentation).
 * Callers: node_opts.c, node_trainer.c, node_run.c, node_cmd_*.c, tests.
 */
#ifndef NODE_COMMON_H
#define NODE_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "nn/nn_data.h"
#include "nn/nn_model.h"

/* NODE_ARCH_FILE: a model file (--model FILE.yaml, node_modelio.h). */
typedef enum { NODE_ARCH_CNN = 0, NODE_ARCH_RESNET20, NODE_ARCH_VGG11, NODE_ARCH_FILE } node_arch;
typedef enum { NODE_PREC_FP32 = 0, NODE_PREC_INT8, NODE_PREC_FAKEQUANT } node_precision;

/* The model identity: what the model flags say and a model file records. */
typedef struct {
    node_arch      model;
    char           data[512];  /* fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR */
    nn_norm_kind   norm;
    node_precision precision;
    int            pad_to;     /* 0 = native size; vgg11 pads 28x28 to 32 */
    int            augment;    /* -1 auto, 0 off, 1 on (random crop 4 + flip) */
    int            groups;     /* EvoNorm groups */
    int            zero_init_residual; /* resnet20: 1 = blocks' last norm gamma starts at 0 */
    /* model == NODE_ARCH_FILE: the model file's path (for messages) and its
     * bytes, which a saved model carries (docs/models.md) */
    char           model_path[512];
    char           model_yaml[65536 + 1];
    /* the user's data (node_data.c; image_size and nchw are recorded in model files) */
    int            image_h, image_w;   /* --image-size HxW, 0: as read */
    int            skip_bad;           /* --skip-bad: undecodable images skipped */
    int            nchw;               /* --nchw: 4-D npz arrays are N,C,H,W */
    double         dirichlet;          /* --partition dirichlet:ALPHA; 0: --skew */
    int            classes;            /* --classes N: the class count; 0: from the data */
} node_model_opts;

/* Names (as on the command line and in model files) and their parsers:
 * 0, or -1 with a message naming `flag` and the known names. */
const char *node_arch_name(node_arch a);
const char *node_norm_name(nn_norm_kind n);
const char *node_precision_name(node_precision p);
int node_arch_parse(const char *flag, const char *s, node_arch *out, char *err, size_t errlen);
int node_norm_parse(const char *flag, const char *s, nn_norm_kind *out, char *err, size_t errlen);
int node_precision_parse(const char *flag, const char *s, node_precision *out, char *err,
                         size_t errlen);

void node_model_opts_defaults(node_model_opts *o);

typedef struct {
    nn_dataset train, test;
    float     *mean, *std;  /* [train.c] normalisation (node_data.c) */
    nn_augment aug_train, aug_eval;
    int        in_c, in_h, in_w;
    /* per-site data ({rank} in the spec): site k holds the training samples
     * site_off[k] .. site_off[k] + site_n[k] - 1, of rank site_first + k */
    size_t    *site_off, *site_n;
    int        site_first, sites;
} node_data;

/* Loads the data set named by o->data and works out input sizes; a spec
 * with {rank} is read for rank 0.  node_data_load_ranks reads it for ranks
 * first .. first+k-1 (joined, each a site); node_data_free frees both. */
int  node_data_load(const node_model_opts *o, node_data *d, char *err, size_t errlen);
int  node_data_load_ranks(const node_model_opts *o, int first, int k, node_data *d, char *err,
                          size_t errlen);
void node_data_free(node_data *d);

/* Builds (not initialises) the model for these options and input shape. */
nn_model *node_model_build(const node_model_opts *o, int in_c, int in_h, int in_w, int classes,
                           char *err, size_t errlen);

/* Test accuracy (0..1) and mean loss over a whole set, batches of `batch`
 * (the model must be prepared for it). */
double node_evaluate(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                     double *loss_out);
/* The same, calling tick(arg) after every batch (a gossip node keeps
 * answering its neighbours while it evaluates); tick may be NULL. */
double node_evaluate_tick(nn_model *m, const node_data *d, const nn_dataset *set, int batch,
                          double *loss_out, void (*tick)(void *arg), void *arg);
/* The same over the n samples sub[0..n) of the set (sub NULL: all). */
double node_evaluate_sub(nn_model *m, const node_data *d, const nn_dataset *set,
                         const uint32_t *sub, size_t n, int batch, double *loss_out,
                         void (*tick)(void *arg), void *arg);
/* A fixed subset of n of the set's samples (n >= set size: NULL, all),
 * the same for every caller with the same set size: the first n of a
 * permutation from a constant seed, in increasing order.  Caller frees. */
uint32_t *node_eval_subset(size_t set_n, size_t n);

/* Model files: safetensors with the options as metadata, so `eval` can
 * rebuild the model from the file alone.  A model holding a non-finite
 * value is not written (-1, the message names the tensor). */
int node_model_save(const char *path, nn_model *m, const node_model_opts *o, char *err,
                    size_t errlen);
/* The same, recording d's class names and normalisation too (d may be
 * NULL), for `eval` and `predict` (node_data.h). */
int node_model_save_data(const char *path, nn_model *m, const node_model_opts *o,
                         const node_data *d, char *err, size_t errlen);
/* Reads the options stored in a model file. */
int node_model_opts_from_file(const char *path, node_model_opts *o, char *err, size_t errlen);
/* Loads the parameters and buffers; a file whose metadata records a crc32
 * (CRC-32 of the params' then the buffers' views, as saved) that the
 * values do not match is refused (-1, "checksum mismatch").  Files written
 * before checksums carry none and are accepted. */
int node_model_load(const char *path, nn_model *m, char *err, size_t errlen);

/* The element-wise mean of models of one architecture, parameters and
 * buffers (BatchNorm statistics, 8-bit activation ranges): sums in double,
 * models added one at a time (eval loads them one after another). */
typedef struct {
    double *sum;     /* params then buffers */
    size_t  np, nb;
    int     n;       /* models added */
} node_avg;

void node_avg_init(node_avg *a, nn_model *like);
void node_avg_add(node_avg *a, nn_model *m);
/* The mean of parameter k (double). */
double node_avg_param(const node_avg *a, size_t k);
/* Writes the mean into dst's parameters and buffers. */
void node_avg_write(const node_avg *a, nn_model *dst);
void node_avg_free(node_avg *a);

/* Sets the kernels' thread count: OpenBLAS and the layer pool (nn_pool.h);
 * threads <= 0 leaves both as they are. */
void node_set_threads(int threads);

/* --threads T|auto: *out = T in [1, 256], or 0 for auto; -1 with a message. */
int node_parse_threads(const char *s, long *out, char *err, size_t errlen);

/* The threads `--threads auto` gives: the CPUs in this process's affinity
 * mask, capped by the cgroup CPU quota (v2 cpu.max, v1 cfs_quota_us /
 * cfs_period_us, rounded up) and by OPENBLAS_NUM_THREADS where that is
 * set (multi-process runs set 1), at least 1. */
int node_threads_auto(void);

/* Whole CPUs of a cgroup quota of `quota` us per `period` us, rounded up;
 * 0 when there is no quota (quota < 0 or period <= 0). */
int node_quota_cpus(long long quota, long long period);

/* The quota of a cgroup v2 cpu.max text ("max 100000", "150000 100000"):
 * node_quota_cpus of it; 0 for "max" or text that does not parse. */
int node_cpu_max_cpus(const char *text);

/* Parses an int/float/uint64 flag value; -1 with a message naming the flag. */
int node_parse_int(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                   size_t errlen);
int node_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                      char *err, size_t errlen);

/* "1h02m03s" style duration. */
void node_fmt_duration(char *buf, size_t len, double seconds);

#endif
