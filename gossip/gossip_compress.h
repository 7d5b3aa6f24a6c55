/* gossip_compress — compressors for gossip messages (docs/design.md §4).
 *
 * Owns:    the compressor spec strings and their parser (a table, so new
 *          compressors are one row), the per-tensor kernels (top-k with a
 *          quickselect and its sort-based _ref twin, DGC's sampled-threshold
 *          selection and its _ref twin, rand-k, symmetric q8, QSGD), the DGC
 *          density warm-up schedule, and gossip_compressed: the per-tensor
 *          output blocks that the wire codec (gossip_codec.h) encodes.
 * Exposes: gossip_compressor_parse, gossip_compress, the kernels (for tests).
 * Callers: gossip_node (every iteration), tests, bench.
 *
 * Spec grammar:  identity[+deflate]
 *              | SPARSIFIER[+QUANTIZER][+deflate] | QUANTIZER[+deflate]
 *   SPARSIFIER   topk:F[,rdecay=B]
 *                         keep k = max(1, floor(numel*F)) largest |v|, ties
 *                         to the lower index, 0 < F <= 1.  rdecay=B
 *                         (0 <= B < 1, eSGD's residual momentum): the unsent
 *                         residual decays, e = B*(v - c); only DeepSqueeze
 *                         keeps such a residual (gossip_node refuses it for
 *                         choco, whose residual x+ - xhat is part of the model)
 *                randk:F  k uniformly random positions (seeded per node),
 *                         values NOT rescaled by numel/k (a contraction, as in
 *                         Choco-SGD; error feedback is in the algorithm)
 *                dgc:D[,warmup=E]
 *                         Deep Gradient Compression (Lin et al. 2018): target
 *                         k = max(1, floor(numel*D_t)); the threshold is the
 *                         order statistic of |v| over a random sample of
 *                         gossip_dgc_samples(numel) positions (with
 *                         replacement, node RNG), and every |v| >= threshold
 *                         is sent.  The count is corrected so that it always
 *                         lies in [0.8k, 1.3k] (10*count in [8k, 13k]): too
 *                         many -> exact top-k among those candidates; too
 *                         few -> exact top-k of the tensor.  Tensors no
 *                         larger than the sample take the exact top-k.
 *                         warmup=E (1..1000 epochs): D_t = 0.25 * (D/0.25)^(e/E)
 *                         in epoch e < E (exponential from 25% down), D from
 *                         epoch E on (and always when D >= 0.25); computed
 *                         with IEEE multiplications and a bisection root only,
 *                         so every node gets the same k on any machine.
 *                         Also asks for momentum-factor masking (the local
 *                         momentum is zeroed where a message carried values,
 *                         gossip_node_mask_sent); momentum correction is the
 *                         algorithm's error feedback (docs/gossip.md).
 *   QUANTIZER    q8       symmetric int8: per block of GOSSIP_QBLOCK
 *                         consecutive values (of the tensor, or of the kept
 *                         values of a sparse tensor) scale = max|v|/127,
 *                         code = round(v/scale) in [-127, 127]; value
 *                         code*scale; zero stays exactly zero
 *                qsgd:S   QSGD (Alistarh et al. 2017), S levels, 1..127, per
 *                         bucket of GOSSIP_QBLOCK values: scale = ||v||_2/S,
 *                         code = sign(v) * l with l = floor(|v|/scale) or
 *                         l + 1 with probability frac(|v|/scale): unbiased.
 *                         Same wire block as q8 (codes and scales).
 *   +deflate     lossless pass over the encoded payload (gossip_codec.h,
 *                GOSSIP_FLAG_DEFLATE), kept only when strictly smaller.
 * Canonical form (c->spec): numbers with %g, options in the order above and
 * only when not the default, e.g. "dgc:0.001,warmup=4+q8+deflate".
 * Everything is per tensor (per arena view).  The value a receiver uses is
 * the dequantized one, (float)code * scale, computed by the decoder.
 */
#ifndef GOSSIP_COMPRESS_H
#define GOSSIP_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn_core.h"

/* Values per q8/QSGD scale. 512 keeps the scale overhead (4 bytes per 512)
 * under 1% for dense q8; error per value is at most scale/2. */
#define GOSSIP_QBLOCK 512

/* Block types, as on the wire (gossip_codec.h). */
enum {
    GOSSIP_BLK_DENSE_F32  = 1,
    GOSSIP_BLK_DENSE_Q8   = 2,
    GOSSIP_BLK_SPARSE_F32 = 3,
    GOSSIP_BLK_SPARSE_Q8  = 4
};

typedef enum {
    GOSSIP_SPARSE_NONE = 0,
    GOSSIP_SPARSE_TOPK,
    GOSSIP_SPARSE_RANDK,
    GOSSIP_SPARSE_DGC
} gossip_sparse_kind;
typedef enum { GOSSIP_QUANT_NONE = 0, GOSSIP_QUANT_Q8, GOSSIP_QUANT_QSGD } gossip_quant_kind;

typedef struct {
    gossip_sparse_kind sparse;
    double             fraction;  /* topk/randk; dgc: the final density D */
    gossip_quant_kind  quant;
    int                levels;    /* qsgd */
    double             rdecay;    /* topk: residual decay B; 1 = none */
    int                warmup;    /* dgc: warm-up epochs E; 0 = none */
    int                mask_momentum; /* dgc: momentum-factor masking */
    int                deflate;   /* +deflate */
    char               spec[64];  /* canonical spec string */
} gossip_compressor;


/* How gossip_dgc_select reached its count. */
enum {
    GOSSIP_DGC_THRESHOLD  = 0, /* the sampled threshold landed in bounds */
    GOSSIP_DGC_CANDIDATES = 1, /* too many: exact top-k among candidates */
    GOSSIP_DGC_EXACT      = 2  /* too few, or a small tensor: exact top-k */
};

/* One compressed tensor, input of the encoder.  Pointers borrow from the
 * gossip_compressed that holds the block. */
typedef struct {
    uint8_t         type;    /* GOSSIP_BLK_* */
    uint32_t        numel;   /* tensor size */
    uint32_t        k;       /* values carried: numel for dense blocks */
    const uint32_t *idx;     /* k strictly increasing indices (sparse), else NULL */
    const float    *f32;     /* k values (F32 types), else NULL */
    const int8_t   *q;       /* k codes (Q8 types), else NULL */
    const float    *scales;  /* ceil(k/GOSSIP_QBLOCK) scales (Q8 types), else NULL */
} gossip_cblock;

/* Output of gossip_compress for a whole arena layout; allocated once, reused
 * every iteration (no allocation on the hot path). */
typedef struct {
    size_t         nblocks;
    gossip_cblock *blocks;   /* nblocks, one per view */
    uint32_t      *idx;      /* total numel */
    float         *f32;      /* total numel */
    int8_t        *q;        /* total numel */
    float         *scales;   /* sum over views of ceil(numel/QBLOCK) */
    uint32_t      *keys;     /* scratch: max view numel (top-k) */
    uint8_t       *mark;     /* scratch: max view numel (rand-k) */
    float         *tmp;      /* scratch: max view numel (gathered values) */
    uint64_t       dgc_how[3]; /* dgc: blocks per GOSSIP_DGC_* outcome, cumulative */
} gossip_compressed;

/* Parses a spec string (grammar above).  0 on success, or -1 with a message
 * naming the offending part and the known compressors. */
int gossip_compressor_parse(gossip_compressor *c, const char *spec, char *err, size_t errlen);

/* Values carried for a tensor of numel elements (numel when dense); for
 * dgc the target k. */
size_t gossip_compressor_k(const gossip_compressor *c, size_t numel);
/* Accepted value counts [*lo, *hi] for a tensor of numel elements: k..k,
 * and for dgc ceil(0.8k)..floor(1.3k) (10*count in [8k, 13k]). */
void gossip_compressor_k_range(const gossip_compressor *c, size_t numel, size_t *lo, size_t *hi);
/* Density of `epoch` (0-based): the dgc warm-up schedule above, else
 * c->fraction (topk/randk) or 1 (dense). */
double gossip_compressor_density(const gossip_compressor *c, uint64_t epoch);
/* *cur = *c with the fraction of `epoch` (cur is what gossip_compress and
 * gossip_compressor_k take for that epoch). */
void gossip_compressor_at_epoch(gossip_compressor *cur, const gossip_compressor *c, uint64_t epoch);
/* Wire block type this compressor produces. */
uint8_t gossip_compressor_block_type(const gossip_compressor *c);

/* Allocates the blocks and buffers for `layout` (views only are used). */
void gossip_compressed_init(gossip_compressed *out, const nn_arena *layout);
void gossip_compressed_free(gossip_compressed *out);

/* Compresses v (layout->numel floats, laid out as `layout`) into out, one
 * block per view.  rng drives randk, dgc sampling and qsgd (advanced;
 * unused otherwise).  For dgc the block counts vary (gossip_dgc_select);
 * out->dgc_how counts the outcomes.
 * Returns 0, or -1 when v holds NaN/Inf in a position that would be sent
 * (message names the tensor). Overwrites out; v is not modified. */
int gossip_compress(const gossip_compressor *c, const nn_arena *layout, const float *v,
                    nn_rng *rng, gossip_compressed *out, char *err, size_t errlen);

/* ---- kernels (exposed for tests) ---------------------------------------- */

/* Top-k by magnitude with ties to the lower index: writes the k selected
 * indices of v[0..n) in increasing order to idx.  keys: n scratch words.
 * O(n) expected (3-way quickselect on |v| bit patterns); NaN counts as the
 * largest magnitude.  1 <= k <= n. */
void gossip_topk(const float *v, size_t n, size_t k, uint32_t *idx, uint32_t *keys);
/* Reference twin: full sort by (|v| desc, index asc), O(n log n). */
void gossip_topk_ref(const float *v, size_t n, size_t k, uint32_t *idx);

/* DGC sample size for a tensor of n values: max(256, ceil(n/100)); when it
 * is >= n the exact top-k is taken instead. */
size_t gossip_dgc_samples(size_t n);
/* DGC selection (spec grammar above) of about k of v[0..n): writes the
 * selected indices, increasing, to idx (n words) and returns their count m,
 * 10*m in [8k, 13k].  Draws gossip_dgc_samples(n) positions from rng unless
 * that is >= n.  keys: n scratch words.  *how (may be NULL) gets the
 * GOSSIP_DGC_* outcome.  1 <= k <= n <= UINT32_MAX.  O(n). */
size_t gossip_dgc_select(const float *v, size_t n, size_t k, nn_rng *rng, uint32_t *idx,
                         uint32_t *keys, int *how);
/* Reference twin: the same draws, the threshold from a sorted sample, the
 * fallbacks through gossip_topk_ref.  Same output, bit for bit. */
size_t gossip_dgc_select_ref(const float *v, size_t n, size_t k, nn_rng *rng, uint32_t *idx,
                             int *how);

/* k distinct uniformly random indices of [0, n), increasing. mark: n bytes
 * scratch. */
void gossip_randk(nn_rng *rng, size_t n, size_t k, uint32_t *idx, uint8_t *mark);

/* Symmetric q8 over blocks of GOSSIP_QBLOCK: writes n codes and
 * ceil(n/QBLOCK) scales. -1 if v holds NaN/Inf. */
int gossip_q8_quantize(const float *v, size_t n, int8_t *q, float *scales);
/* QSGD with `levels` levels, same output shapes. -1 if v holds NaN/Inf. */
int gossip_qsgd_quantize(const float *v, size_t n, int levels, nn_rng *rng, int8_t *q, float *scales);

/* The one dequantization used everywhere (owner and receivers). */
static inline float gossip_dequant(int8_t code, float scale)
{
    return (float)code * scale;
}

#endif
