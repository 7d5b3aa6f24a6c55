/* node_data — the user's data in the commands: per-site specs, partitions,
 * and what a model file records about its data.
 *
 * Owns:    expanding {rank} in a data spec (per-site data: each rank reads
 *          its own files and trains on all of them), reading the set(s)
 *          with the reader flags (--image-size, --skip-bad, --nchw), the
 *          normalisation arrays, the shards of per-site data and the
 *          Dirichlet partition, and the model-file metadata of the data
 *          (class_names, norm_mean, norm_std, image_size, nchw) with its
 *          reader (node_data_info) for `eval` and `predict`.
 * Callers: node_common.c (node_data_load_ranks, node_model_save_data,
 *          node_model_opts_from_file), node_trainer.c (shards), the eval
 *          and predict commands.
 */
#ifndef NODE_DATA_H
#define NODE_DATA_H

#include "node/node_common.h"

/* 1 if spec contains {rank}. */
int  node_data_per_site(const char *spec);
/* spec with every {rank} replaced by rank into out; -1 if it does not fit. */
int  node_data_spec_for(const char *spec, int rank, char *out, size_t len, char *err,
                        size_t errlen);

/* Reads the sets of ranks first..first+k-1 into d (train, test, mean, std,
 * sites); the shape and augmentation are node_common's.  Prints the count
 * of skipped files (--skip-bad) on stderr. */
int  node_data_read(const node_model_opts *o, int first, int k, node_data *d, char *err,
                    size_t errlen);

/* The shards of per-site data (rank r trains on all of its own samples,
 * or a seeded random --train-subset of them) or of the Dirichlet partition;
 * 1 when neither applies (the caller's skew partition). */
int  node_data_shards(const node_model_opts *o, long subset, long seed, const node_data *d,
                      int nodes, uint32_t **shard, size_t *count, char *err, size_t errlen);

/* The data flags that change what a rank trains on, for checkpoint and
 * discovery identities: "" when none is given, else e.g.
 * "partition=dirichlet:0.5,image_size=28x28". */
void node_data_ident(const node_model_opts *o, char *buf, size_t len);

/* Key/value pairs of the data metadata into kv (at most 10 entries plus
 * room for the caller's), strings owned by buf (node_data_meta_free). */
typedef struct {
    char *names, *mean, *std, image[32], nchw[4];
} node_data_meta;
#define NODE_DATA_META_KV 14 /* strings node_data_meta_make may add, NULL included */
int  node_data_meta_make(node_data_meta *m, const node_model_opts *o, const node_data *d,
                         const char **kv);
void node_data_meta_free(node_data_meta *m);
/* image_size and nchw of a model file into o (absent: unchanged). */
int  node_data_opts_from_file(const char *path, node_model_opts *o, char *err, size_t errlen);

/* What a model file says about its data: input shape, classes and their
 * names, normalisation.  Older files lack names and normalisation (NULL). */
typedef struct {
    int    c, h, w, classes;
    char **names;        /* classes names or NULL */
    float *mean, *std;   /* [c] or NULL */
    int    is_float;     /* trained on float samples (npz float, CSV) */
    char   data[512];
} node_data_info;
int  node_data_info_read(const char *path, node_data_info *info, char *err, size_t errlen);
void node_data_info_free(node_data_info *info);
/* The class name of k (the number when there are no names). */
const char *node_data_info_class(const node_data_info *info, int k, char *buf, size_t len);

#endif
