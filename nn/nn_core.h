/* nn_core — memory, random numbers and the flat parameter arena.
 *
 * Owns:    nn_xmalloc & co. (out of memory aborts with file:line, STYLE),
 *          nn_rng (xoshiro256**, seeded through splitmix64: reproducible
 *          across machines), and nn_arena: one contiguous float vector with
 *          named tensor views (docs/design.md §2).  Parameters, gradients, optimizer
 *          state, public copies and error buffers are all arenas with the
 *          same layout, so every whole-model operation is one loop.
 *          nn_open_regular: the one way a file is opened for reading
 *          (models, checkpoints, topologies, data, certificates).
 * Exposes: the functions below.
 * Callers: every module (nn, lowprec, gossip, node).
 */
#ifndef NN_CORE_H
#define NN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The version of the training arithmetic: bump it with any change that
 * alters the floats of a training step at a given CPU level (a kernel's
 * summation order, a quantizer's rounding, an initialisation, the data
 * order).  `lpgossip version` prints it, and scripts/repro keys its stored
 * results by it, so a result of other arithmetic is never mixed into a
 * table. */
#define NN_ARITH_VERSION 1

/* ---- memory ------------------------------------------------------------ */

void *nn_xmalloc_at(size_t bytes, const char *file, int line);
void *nn_xcalloc_at(size_t count, size_t size, const char *file, int line);
void *nn_xrealloc_at(void *p, size_t bytes, const char *file, int line);
/* 64-byte aligned, zeroed; free with free(). */
void *nn_xalloc_aligned_at(size_t bytes, const char *file, int line);
char *nn_xstrdup_at(const char *s, const char *file, int line);

#define nn_xmalloc(n)        nn_xmalloc_at((n), __FILE__, __LINE__)
#define nn_xcalloc(c, s)     nn_xcalloc_at((c), (s), __FILE__, __LINE__)
#define nn_xrealloc(p, n)    nn_xrealloc_at((p), (n), __FILE__, __LINE__)
#define nn_xalloc_aligned(n) nn_xalloc_aligned_at((n), __FILE__, __LINE__)
#define nn_xstrdup(s)        nn_xstrdup_at((s), __FILE__, __LINE__)

/* Writes a formatted message into a caller's buffer (may be NULL) and
 * returns -1: the one way outside-world errors travel (STYLE). */
int nn_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- random numbers ---------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} nn_rng;

/* The one seeded mixer: the SplitMix64 finalizer of z.  SplitMix64's
 * output for state x is nn_mix64(x + NN_GOLDEN64) (what every seed
 * derivation in nn/ and lowprec/ uses). */
#define NN_GOLDEN64 0x9e3779b97f4a7c15ULL
static inline uint64_t nn_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The seed of stream k (0, 1, ...) derived from seed: seed ^ (k+1)*golden
 * (gossip_node's compressor RNG of rank k, the sampler's epoch k). */
static inline uint64_t nn_seed_derive(uint64_t seed, uint64_t k)
{
    return seed ^ (k + 1) * NN_GOLDEN64;
}

void     nn_rng_seed(nn_rng *r, uint64_t seed);
uint64_t nn_rng_next(nn_rng *r);
/* Uniform in [0, 1) with 24 random bits (exactly representable floats). */
float    nn_rng_uniform(nn_rng *r);
/* Standard normal (Box-Muller on doubles). */
float    nn_rng_normal(nn_rng *r);
/* Uniform integer in [0, n), unbiased; n > 0. */
uint32_t nn_rng_below(nn_rng *r, uint32_t n);
/* Fisher-Yates shuffle. */
void     nn_rng_shuffle_u32(nn_rng *r, uint32_t *a, size_t n);

/* ---- the parameter arena ----------------------------------------------- */

#define NN_MAX_NDIM  4
#define NN_NAME_MAX  64

typedef struct {
    char   name[NN_NAME_MAX];   /* "stage1.0.conv1.weight", PyTorch-like */
    size_t offset;              /* in floats from arena->data */
    size_t numel;
    int    ndim;
    int    shape[NN_MAX_NDIM];
} nn_view;

typedef struct {
    float   *data;      /* numel floats, 64-byte aligned; NULL until alloc */
    size_t   numel;
    nn_view *views;
    size_t   nviews;
    size_t   cap_views;
} nn_arena;

void   nn_arena_init(nn_arena *a);
/* Appends a view (before nn_arena_alloc only); returns its index.
 * Names must be unique (asserted: they come from our own model code). */
int    nn_arena_add(nn_arena *a, const char *name, int ndim, const int *shape);
/* Allocates zeroed storage for every view added so far. */
void   nn_arena_alloc(nn_arena *a);
/* dst gets src's views and fresh zeroed storage. dst must be initialized
 * (it is freed first). */
void   nn_arena_clone_layout(nn_arena *dst, const nn_arena *src);
/* Index of the view with this name, or -1. */
int    nn_arena_find(const nn_arena *a, const char *name);
float *nn_arena_ptr(const nn_arena *a, int view);
/* True when both arenas have the same views (names, shapes, offsets). */
int    nn_arena_same_layout(const nn_arena *a, const nn_arena *b);
void   nn_arena_free(nn_arena *a);
/* 0 when every value of every view of a is finite; otherwise -1 with
 * "WHAT: tensor PREFIXNAME[k] = nan is not finite" in err (the first
 * non-finite value; what and prefix may be NULL).  For data that came from
 * outside (model files, checkpoints) or is about to leave (saves). */
int    nn_arena_check_finite(const nn_arena *a, const char *what, const char *prefix, char *err,
                             size_t errlen);

/* ---- small helpers ----------------------------------------------------- */

/* Formats a tensor/op name into dst (NN_NAME_MAX bytes); names come from our
 * own model code, so truncation is a bug (asserted). */
void nn_namef(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Seconds from a monotonic clock. */
double nn_now(void);

/* ---- files ------------------------------------------------------------- */

/* Opens `path` for reading so that nothing can block on it, and only a
 * regular file: open(O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) (a named
 * pipe opens at once instead of waiting for a writer), fstat on that fd
 * (no race with a rename), refuse anything but a regular file (a named
 * pipe, a device, a socket, a directory; a symlink is judged by what it
 * points to) before a single byte is read, then clear O_NONBLOCK.
 * Returns the fd (the caller closes it) with *size (may be NULL) its size
 * in bytes, or -1 with "PATH: cannot open: REASON" or "PATH: not a regular
 * file (a named pipe)" in err.  Messages never carry the file's bytes.
 * Callers: every reader of a file (nn_safetensors, nn_data, node_ckpt,
 * node_cert, topo_parse). */
int nn_open_regular(const char *path, uint64_t *size, char *err, size_t errlen);
/* The same as a stdio stream ("rb"); NULL with the message. */
FILE *nn_fopen_regular(const char *path, uint64_t *size, char *err, size_t errlen);

#endif
