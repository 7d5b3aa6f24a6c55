/* gossip_compress — compressors for gossip messages (DESIGN §4).
 *
 * Owns:    the compressor spec strings and their parser (a table, so new
 *          compressors are one row), the per-tensor kernels (top-k with a
 *          quickselect and its sort-based _ref twin, rand-k, symmetric q8,
 *          QSGD), and gossip_compressed: the per-tensor output blocks that the
 *          wire codec (gossip_codec.h) encodes.
 * Exposes: gossip_compressor_parse, gossip_compress, the kernels (for tests).
 * Callers: gossip_node (every iteration), tests, bench.
 *
 * Spec grammar:  identity | SPARSIFIER | QUANTIZER | SPARSIFIER+QUANTIZER
 *   SPARSIFIER   topk:F   keep k = max(1, floor(numel*F)) largest |v|, ties
 *                         to the lower index, 0 < F <= 1
 *                randk:F  k uniformly random positions (seeded per node),
 *                         values NOT rescaled by numel/k (a contraction, as in
 *                         Choco-SGD; error feedback is in the algorithm)
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

typedef enum { GOSSIP_SPARSE_NONE = 0, GOSSIP_SPARSE_TOPK, GOSSIP_SPARSE_RANDK } gossip_sparse_kind;
typedef enum { GOSSIP_QUANT_NONE = 0, GOSSIP_QUANT_Q8, GOSSIP_QUANT_QSGD } gossip_quant_kind;

typedef struct {
    gossip_sparse_kind sparse;
    double             fraction;  /* topk/randk */
    gossip_quant_kind  quant;
    int                levels;    /* qsgd */
    char               spec[64];  /* canonical spec string */
} gossip_compressor;

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
} gossip_compressed;

/* Parses a spec string (grammar above).  0 on success, or -1 with a message
 * naming the offending part and the known compressors. */
int gossip_compressor_parse(gossip_compressor *c, const char *spec, char *err, size_t errlen);

/* Values carried for a tensor of numel elements (numel when dense). */
size_t gossip_compressor_k(const gossip_compressor *c, size_t numel);
/* Wire block type this compressor produces. */
uint8_t gossip_compressor_block_type(const gossip_compressor *c);

/* Allocates the blocks and buffers for `layout` (views only are used). */
void gossip_compressed_init(gossip_compressed *out, const nn_arena *layout);
void gossip_compressed_free(gossip_compressed *out);

/* Compresses v (layout->numel floats, laid out as `layout`) into out, one
 * block per view.  rng drives randk and qsgd (advanced; unused otherwise).
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
