/* nn_safetensors — model files in the Hugging Face safetensors format.
 *
 * Owns:    writing and reading the tensor views of nn_arenas as a
 *          safetensors file: an 8-byte little-endian header length N, N
 *          bytes of JSON header
 *            {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 *             ..., "__metadata__": {"key": "value", ...}}
 *          (padded with spaces so the data starts 8-byte aligned), then the
 *          raw little-endian tensor bytes, offsets relative to the data start.
 *          A small strict JSON parser of our own reads the header.
 * Exposes: save (atomic: temp file in the same directory, fsync, rename,
 *          fsync of the directory), load into already-allocated arenas by
 *          tensor name, and a metadata lookup.  Files are readable by the
 *          `safetensors` Python package and by numpy + json.
 * Callers: node/ (checkpoints, exported models), tests.
 *
 * Validation on read (outside input, never an assert): header length at
 * least 2 and at most 100 MiB and within the file; the header is one JSON
 * object (strict RFC 8259: no trailing commas, no duplicate keys, valid
 * escapes and UTF-8, nesting depth <= 8) followed only by whitespace; every
 * tensor entry has exactly dtype, shape and data_offsets; dtype is a known
 * safetensors dtype (F32 for the tensors we load); shape entries are
 * non-negative integers; end - begin equals numel * element size; the
 * ranges, sorted, tile the data section exactly (no overlap, no hole, as
 * the reference implementation requires); __metadata__ is an object of
 * strings.  Tensors in the file that the given arenas do not name are
 * checked but ignored (so parameters can be loaded from a full checkpoint).
 */
#ifndef NN_SAFETENSORS_H
#define NN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_core.h"

/* Writes every view of every arena as an F32 tensor named by the view's
 * name (names must be unique across the arenas), plus the string metadata
 * meta_kv = {key0, value0, key1, value1, ..., NULL} (or NULL for none; keys
 * unique).  Atomic: the file at `path` is either the old one or the complete
 * new one, never a partial write; the temp file is removed on failure.
 * Returns 0, or -1 with a message (I/O error naming the file, duplicate
 * name). */
int nn_safetensors_save(const char *path, const nn_arena *const *arenas, int narenas,
                        const char *const *meta_kv, char *err, size_t errlen);

/* As nn_safetensors_save, but the tensors of arena i are named
 * prefixes[i] + view name (prefixes may be NULL, or an entry NULL for "").
 * This is how arenas with the same layout (parameters, momentum, public
 * copies) share one file, e.g. prefixes {"", "momentum.", "xhat."}. */
int nn_safetensors_save_prefixed(const char *path, const nn_arena *const *arenas,
                                 const char *const *prefixes, int narenas,
                                 const char *const *meta_kv, char *err, size_t errlen);

/* Fills every view of the given arenas (allocated, layouts fixed) from the
 * tensor of the same name in the file.  Validates the whole header first
 * (see above) and each expected tensor: present, dtype F32, shape equal to
 * the view's.  Returns 0, or -1 with a message naming the file, the tensor
 * and the problem; on error the arenas' contents are unspecified. */
int nn_safetensors_load(const char *path, nn_arena *const *arenas, int narenas, char *err,
                        size_t errlen);

/* nn_safetensors_load with the per-arena name prefixes of _save_prefixed. */
int nn_safetensors_load_prefixed(const char *path, nn_arena *const *arenas,
                                 const char *const *prefixes, int narenas, char *err,
                                 size_t errlen);

/* Pretrained weights: fills view v of `a` (allocated) from the file's
 * tensor of the same name where want[v] is nonzero (want NULL: every
 * view).  F32 tensors load as they are; F16, BF16 (exact) and F64 (rounded
 * to nearest) are converted to F32; other dtypes are refused.  A wanted
 * view the file lacks is an error when `required`, else left as it is.
 * The shape must equal the view's.  *loaded (may be NULL) gets the number
 * of views filled.  0, or -1 with a message naming the file, the tensor
 * and the problem. */
int nn_safetensors_load_weights(const char *path, nn_arena *a, const unsigned char *want,
                                int required, size_t *loaded, char *err, size_t errlen);

/* CRC-32 (zlib's) of every view of the arena, in view order, as the bytes
 * save writes (little-endian F32), continuing from crc (start with 0). */
uint32_t nn_safetensors_crc32(uint32_t crc, const nn_arena *a);

/* Copies the __metadata__ value of `key` (NUL-terminated) into val.  The
 * header is validated as by load.  Returns 0, or -1 with a message when the
 * file is bad, the key is absent, or the value (plus NUL) exceeds vallen. */
int nn_safetensors_meta(const char *path, const char *key, char *val, size_t vallen, char *err,
                        size_t errlen);

#endif
