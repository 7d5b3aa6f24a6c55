/* nn_data — image classification data sets, batches, non-IID partitions.
 *
 * Owns:    loading Fashion-MNIST / MNIST (IDX files, gzip or plain, read
 *          through zlib) and CIFAR-10 (binary batches) into one uint8 pixel
 *          array per split; per-channel normalization statistics; assembling
 *          float mini-batches with normalization and augmentation (random
 *          crop with zero padding, horizontal flip, centred padding to a
 *          larger canvas); the reference's non-IID "skew" partition of the
 *          training set over nodes (docs/design.md §7); and a deterministic epoch
 *          sampler that can be resumed at any position.
 * Exposes: the functions below.  Everything read from disk is validated;
 *          errors come back as -1 with a message (naming the file and what
 *          was wrong) in the caller's buffer, never as an abort.
 * Callers: node/ (training loop, evaluation), tests, benchmarks.
 *
 * Layout: pixels are NCHW per sample, uint8, exactly as stored (CIFAR-10's
 * R plane, G plane, B plane; MNIST's single plane).  Batches are float
 * N x C x OH x OW.
 */
#ifndef NN_DATA_H
#define NN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_core.h"

typedef struct {
    size_t   n;             /* samples */
    int      c, h, w;       /* channels, height, width of one sample; a table
                               of F features is c = F, h = w = 1 */
    int      classes;       /* labels are in [0, classes), classes <= 256 */
    uint8_t *x;             /* n*c*h*w raw pixels, NCHW per sample, when the
                               source is uint8 (else NULL) */
    float   *xf;            /* n*c*h*w values, NCHW, when the source is float
                               (npz float32, CSV); exactly one of x, xf is set */
    uint8_t *y;             /* n labels */
    char     name[64];      /* "fashion-mnist", "mnist", "cifar10", "images",
                               "npz" or "csv" */
    char   **class_names;   /* classes names (owned), or NULL: label numbers */
} nn_dataset;

/* Reader options that are not part of the spec string (command-line flags;
 * all zero = defaults). */
typedef struct {
    int image_h, image_w; /* images: resize every image to this size (per
                             axis: bilinear with half-pixel centres when
                             enlarging, area averaging when shrinking),
                             0 = sizes must agree */
    int skip_bad;         /* images: count and skip undecodable files */
    int nchw;             /* npz: 4-D arrays are N,C,H,W (default N,H,W,C) */
    size_t skipped;       /* out: files skipped under skip_bad */
} nn_data_opts;

/* Default directory of the Debian package dataset-fashion-mnist. */
#define NN_DATA_FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Loads the train and test splits named by spec:
 *   "fashion-mnist"          IDX files in NN_DATA_FASHION_DIR
 *   "fashion-mnist:DIR"      IDX files in DIR
 *   "mnist:DIR"              IDX files in DIR
 *   "cifar10:DIR"            data_batch_1.bin .. data_batch_5.bin and
 *                            test_batch.bin in DIR (or DIR/cifar-10-batches-bin)
 * IDX files are train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each tried first with a
 * ".gz" suffix and then without.  Validates magic numbers, dimensions,
 * image/label count agreement, labels < 10, truncation, trailing bytes and
 * gzip integrity (CRC).  On success returns 0 and fills both sets (owned by
 * the caller: nn_dataset_free).  On failure returns -1, writes a message
 * naming the file and the problem into err, and leaves both sets empty
 * (safe to free). */
int  nn_data_load(const char *spec, nn_dataset *train, nn_dataset *test, char *err, size_t errlen);
/* The same with reader options (opts may be NULL).  Further specs:
 *   "images:DIR"             DIR/train/CLASS/FILE and DIR/test/CLASS/FILE (PNG,
 *                            JPEG; nn_data_image.c)
 *   "npz:FILE"               x_train y_train x_test y_test (nn_data_npz.c)
 *   "csv:TRAIN[,test=TEST][,label=COLUMN]"   (nn_data_csv.c) */
int  nn_data_load_opts(const char *spec, nn_data_opts *opts, nn_dataset *train,
                       nn_dataset *test, char *err, size_t errlen);

/* The readers behind nn_data_load_opts (same contract). */
int  nn_data_load_images(const char *dir, nn_data_opts *opts, nn_dataset *train,
                         nn_dataset *test, char *err, size_t errlen);
int  nn_data_load_npz(const char *path, const nn_data_opts *opts, nn_dataset *train,
                      nn_dataset *test, char *err, size_t errlen);
int  nn_data_load_csv(const char *args, nn_dataset *train, nn_dataset *test, char *err,
                      size_t errlen);
/* Every row of one CSV file as a set of nf features (prediction): the file
 * has nf columns, or nf + 1 of which the label column (named `label` (may
 * be NULL), else "label", else the last) is left out.  Labels are 0;
 * *lines (owned) gives each row's line number. */
int  nn_data_load_csv_rows(const char *path, const char *label, int nf, nn_dataset *d,
                           size_t **lines, char *err, size_t errlen);

/* Decodes one PNG or JPEG file into an owned uint8 array (*px, C x H x W,
 * planar) with 1 (gray) or 3 (RGB) channels: `want_c` 0 keeps the file's
 * (gray stays gray, anything else RGB), 1 or 3 converts; out_h/out_w > 0
 * resizes (as nn_data_opts.image_h).  0, or -1 with a
 * message naming the file. */
int  nn_image_read(const char *path, int want_c, int out_h, int out_w, uint8_t **px, int *c,
                   int *h, int *w, char *err, size_t errlen);

/* Parses a .npy header at buf[0..len): dtype (little-endian integers of 1,
 * 2, 4, 8 bytes, float32, float64), shape (ndim <= 4) and the data offset.
 * Refuses object/pickled arrays, structured and big-endian dtypes, Fortran
 * order, a payload whose size is not exactly what shape and dtype need
 * (what = the array's name in messages).  0, or -1 with a message. */
typedef struct {
    char   kind;       /* 'u', 'i' or 'f' */
    int    dtype;      /* bytes per element */
    int    ndim;
    size_t shape[4];
    size_t offset;     /* of the data in buf */
    size_t count;      /* elements */
} nn_npy;
int  nn_npy_parse(const uint8_t *buf, size_t len, const char *what, nn_npy *out, char *err,
                  size_t errlen);
/* Finds member `name` of a zip archive held in buf[0..len) (stored or
 * deflate; CRC checked) and returns it inflated in an owned buffer.  1 and
 * the member, 0 when there is no such member, -1 with a message (path names
 * the archive in it). */
int  nn_zip_member(const uint8_t *buf, size_t len, const char *path, const char *name,
                   uint8_t **out, size_t *outlen, char *err, size_t errlen);

/* Reads a whole regular file (opened O_NONBLOCK, checked with fstat) of at
 * most `max` bytes into an owned buffer.  0, or -1 with a message. */
int  nn_data_read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err,
                       size_t errlen);

/* Appends src to dst (same c, h, w, source type and class names, if any;
 * classes by number: the larger count; dst may be empty): used to join
 * per-site sets.  0, or -1 with a message. */
int  nn_dataset_append(nn_dataset *dst, const nn_dataset *src, char *err, size_t errlen);
/* The name of class k: the stored one or its number (buf). */
const char *nn_dataset_class_name(const nn_dataset *d, int k, char *buf, size_t len);

/* Reads one pair of IDX files (images, labels) into d.  Same validation and
 * error contract as nn_data_load; exposed for tests and other IDX sets. */
int  nn_data_load_idx(const char *images_path, const char *labels_path, nn_dataset *d,
                      char *err, size_t errlen);

/* Reads CIFAR-10 binary batch files (each record: 1 label byte, 3072 pixel
 * bytes as 3x32x32) and concatenates them into d. */
int  nn_data_load_cifar10_files(const char *const *paths, int npaths, nn_dataset *d,
                                char *err, size_t errlen);

/* Frees the arrays and zeroes d; safe on a zeroed or already freed set. */
void nn_dataset_free(nn_dataset *d);

/* ---- normalization and batches --------------------------------------- */

typedef struct {
    int crop_pad;   /* 0: no random crop; else pad each side by this many
                       (black) pixels and crop a random OH x OW window back */
    int hflip;      /* nonzero: mirror each sample horizontally with p = 1/2 */
    int pad_to;     /* 0: output h x w; else output pad_to x pad_to with the
                       image centred (top/left margin (pad_to-h)/2, rounded
                       down); must be >= h and >= w */
} nn_augment;

/* Padding convention (both crop_pad and pad_to): padded pixels are raw
 * black pixels (value 0) normalized like every other pixel, i.e. the float
 * written is (0 - mean[c]) / std[c].  This is what torchvision's
 * RandomCrop(padding=p) before ToTensor/Normalize produces in the reference,
 * and it matches the black background of (Fashion-)MNIST. */

/* Per-channel mean and population standard deviation over the whole set of
 * pixels scaled to [0,1] (pixel/255), or of the raw values of a float set.  mean, std: [c].  Computed exactly
 * from integer histograms (independent of sample order).  A channel with
 * zero variance gets std = 1 so normalization never divides by zero. */
void nn_data_norm_stats(const nn_dataset *d, float *mean, float *std);

/* Checks an augmentation read from a config or command line against d:
 * crop_pad in 0..64, pad_to 0 or in max(h,w)..4096.  Returns 0, or -1
 * with a message.  nn_data_batch and nn_data_out_* assert these (they are
 * our invariants once checked), so check user-supplied values first. */
int  nn_augment_check(const nn_dataset *d, const nn_augment *aug, char *err, size_t errlen);

/* Output spatial size of nn_data_batch for square images: aug->pad_to if
 * set, else d->h.  aug may be NULL.  nn_data_out_shape gives both sides. */
int  nn_data_out_hw(const nn_dataset *d, const nn_augment *aug);
void nn_data_out_shape(const nn_dataset *d, const nn_augment *aug, int *oh, int *ow);

/* Assembles a batch of the N samples d[idx[0..N)] (overwrites x_out, y_out).
 *   x_out: [N, c, OH, OW], value (pixel/255 - mean[ch]) / std[ch], or
 *          (value - mean[ch]) / std[ch] for a float set (padding: value 0)
 *   y_out: [N] labels (may be NULL)
 * mean, std: [c].  aug may be NULL (no augmentation, no padding).  For each
 * sample in order, random draws from rng are: crop offset dy, crop offset dx
 * (each nn_rng_below(2*crop_pad+1), only when crop_pad > 0), then the flip
 * bit (nn_rng_below(2), only when hflip); rng may be NULL only if neither is
 * enabled.  Order of operations: centre into the pad_to canvas, random crop
 * of the canvas padded by crop_pad, then flip.  Indices must be < d->n
 * (asserted: they come from our own sampler). */
void nn_data_batch(const nn_dataset *d, const uint32_t *idx, int N, const float *mean,
                   const float *std, const nn_augment *aug, nn_rng *rng, float *x_out,
                   uint8_t *y_out);

/* ---- non-IID partition (docs/design.md §7, the reference's skew_sort) -- */

/* Splits the n training samples over `nodes` nodes with skew s in [0, 1]:
 *   1. indices sorted by label (stable: ascending index within a class);
 *   2. for each class c (ascending) with n_c samples, the first
 *      floor(s * n_c) go to the sorted pool, the rest to the random pool;
 *   3. the random pool is shuffled (nn_rng seeded with `seed`,
 *      nn_rng_shuffle_u32);
 *   4. node k = 0, 1, ... takes the next floor(((1.0/nodes) * n) * s) indices
 *      of the sorted pool, then the next floor(((1.0/nodes) * n) * (1 - s))
 *      of the random pool, in that order, evaluated in double exactly as
 *      the reference's int(frac*data_len*skew) (so s = 0.9 with n = 60000,
 *      8 nodes gives 6750 + 749 samples: (1 - 0.9) is 0.0999...98).
 * s = 0 is IID (everything is in the shuffled random pool).  Differences
 * from the reference: its np.argsort is not stable and its shuffle is
 * Python's Mersenne Twister, so indices differ, but pool sizes, per-node
 * counts and per-node class histograms of the sorted part are identical.
 * Leftover samples (from the floors) belong to no node, as there.
 * Out: idx and count are caller-provided arrays of `nodes` entries; idx[k]
 * becomes a malloc'd array of count[k] indices (owned by the caller: free
 * each, e.g. with nn_partition_free; then the idx array itself if the caller
 * allocated it).  On error every idx[k] is NULL.
 * Returns 0, or -1 with a message for bad arguments (s outside [0,1],
 * nodes < 1, a label >= classes). */
int  nn_partition_skew(const uint8_t *labels, size_t n, int classes, int nodes, double skew,
                       uint64_t seed, uint32_t **idx, size_t *count, char *err, size_t errlen);
/* Convenience: frees idx[0..nodes) and sets them to NULL (not idx itself). */
void nn_partition_free(uint32_t **idx, int nodes);

/* The usual non-IID split of federated learning: for each class c
 * (ascending), proportions p ~ Dir(alpha, ..., alpha) over the nodes (gamma
 * draws by Marsaglia-Tsang from nn_rng seeded with `seed`), then the class's
 * samples, shuffled, are cut at the cumulative proportions rounded down
 * (node k gets [floor(P_k n_c), floor(P_{k+1} n_c)), the last node up to
 * n_c).  Every sample belongs to exactly one node; a node may get none.
 * Same ownership and errors as nn_partition_skew; alpha in (0, 1e6]. */
int  nn_partition_dirichlet(const uint8_t *labels, size_t n, int classes, int nodes,
                            double alpha, uint64_t seed, uint32_t **idx, size_t *count,
                            char *err, size_t errlen);

/* ---- deterministic epoch sampler ------------------------------------- */

/* The sampler yields an endless stream: epoch e is a permutation of the
 * given index set shuffled by nn_rng seeded with nn_sampler_epoch_seed(seed,
 * e), always starting from the original order (so any epoch can be rebuilt
 * without the previous ones).  Stream position p is element p % n of the
 * permutation of epoch p / n.  A batch is the next N positions and may span
 * an epoch boundary (no sample is dropped or repeated within an epoch). */
typedef struct {
    uint32_t *base;     /* n indices in the caller's order */
    uint32_t *perm;     /* permutation of the current epoch */
    uint32_t *out;      /* batch buffer returned by next */
    size_t    n, out_cap;
    uint64_t  seed;
    uint64_t  pos;      /* stream position of the next index */
    uint64_t  perm_epoch;
    int       have_perm;
} nn_sampler;

/* Copies idx (n > 0 entries) and positions the stream at 0. */
void            nn_sampler_init(nn_sampler *s, const uint32_t *idx, size_t n, uint64_t seed);
/* Returns the next N (> 0) indices (borrowed: valid until the next call or
 * free) and, if epoch_out is not NULL, the epoch of the first of them. */
const uint32_t *nn_sampler_next(nn_sampler *s, int N, uint64_t *epoch_out);
/* Moves the stream to `position` (number of indices drawn so far), e.g. to
 * resume from a checkpoint: the following calls then return exactly what an
 * uninterrupted sampler would have returned. */
void            nn_sampler_seek(nn_sampler *s, uint64_t position);
uint64_t        nn_sampler_position(const nn_sampler *s);
/* The per-epoch shuffle seed (a splitmix-style mix of seed and epoch). */
uint64_t        nn_sampler_epoch_seed(uint64_t seed, uint64_t epoch);
void            nn_sampler_free(nn_sampler *s);

#endif
