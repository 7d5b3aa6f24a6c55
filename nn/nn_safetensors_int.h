/* nn_safetensors_int — inside the nn_safetensors module only: a validated
 * safetensors file opened for reading tensor by tensor.
 *
 * Owns:    nothing beyond the handle; the header model and its validation
 *          live in nn_safetensors.c (see nn_safetensors.h for the checks).
 * Exposes: open / find / read / close.
 * Callers: nn_safetensors.c, nn_safetensors_weights.c (pretrained weights
 *          with dtype conversion).  Not for other modules.
 */
#ifndef NN_SAFETENSORS_INT_H
#define NN_SAFETENSORS_INT_H

#include <stddef.h>
#include <stdint.h>

#define NN_ST_MAX_DIMS 32

/* One tensor entry of a validated header. */
typedef struct {
    const char *name;       /* borrowed from the header */
    const char *dtype;      /* a known safetensors dtype */
    size_t      esize;      /* bytes per element */
    int         ndim;
    uint64_t    shape[NN_ST_MAX_DIMS];
    uint64_t    begin, end; /* relative to the data section; end - begin = numel * esize */
} nn_st_entry;

typedef struct nn_st_file nn_st_file;

/* Opens path and validates its whole header: an owned handle, or NULL with
 * a message naming the file. */
nn_st_file *nn_st_open(const char *path, char *err, size_t errlen);
void        nn_st_close(nn_st_file **self_p);
/* The entry of tensor `name`, or NULL.  Borrowed until nn_st_close. */
const nn_st_entry *nn_st_find(const nn_st_file *f, const char *name);
/* Reads e's end - begin raw (little-endian) bytes into buf: 0, or -1 with a
 * message naming path and the tensor. */
int nn_st_read(const nn_st_file *f, const nn_st_entry *e, void *buf, const char *path, char *err,
               size_t errlen);

#endif
