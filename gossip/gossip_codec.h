/* gossip_codec — the gossip wire format (docs/design.md §4, §9): explicit
 * little-endian encode/decode, no struct casts, a decoder that trusts nothing.
 *
 * Owns:    message header and per-tensor block encoding, Golomb-Rice coded
 *          sparse indices, the decoded-payload buffers, the layout
 *          fingerprint.
 * Exposes: gossip_msg_encode, gossip_msg_encode_control, gossip_msg_deflate
 *          (the optional lossless pass), gossip_msg_decode (full decode or
 *          validate-only), gossip_msg_decode_header, gossip_payload_*.
 * Callers: gossip_node (every message), gossip_link (headers, control
 *          messages), tests, fuzz target.
 *
 * Message (version 6), all integers little-endian:
 *   off size
 *    0   4  magic "LPGS"
 *    4   1  version = 6 (2 added LINK_REQ and LINK_PROOF, 3 the KEPT flag,
 *           4 ACK, 5 the DEFERRED flag, 6 the step time; a node refuses another
 *           version, so both ends must run the same one)
 *    5   1  kind: 1 HELLO, 2 GOSSIP, 3 RESYNC_REQ, 4 RESYNC, 5 BYE,
 *           6 HELLO_ACK, 7 BYE_ACK, 8 PING, 9 STATE_REQ, 10 STATE,
 *           11 LINK_REQ, 12 LINK_PROOF, 13 ACK (meanings: gossip_link.h;
 *           ACK: the receiver of a push-sum GOSSIP acknowledges its
 *           iteration, gossip_flight.c)
 *    6   2  flags: bit 0 push-sum on; bit 1 payload deflated (GOSSIP and
 *           RESYNC only, see below); bit 2 kept and bit 3 deferred
 *           (GOSSIP only); bit 4 ahead (PING only: GOSSIP_FLAG_AHEAD);
 *           other bits must be 0
 *    8   4  sender rank (u32)
 *   12   8  iteration (u64)
 *   20   8  psi (f64): the sender's own push-sum weight, finite and > 0
 *           (1.0 when push-sum is off); receivers multiply by their W[i][j]
 *   28   4  layout fingerprint (FNV-1a over view names and sizes)
 *   32   4  number of blocks: one per tensor view for GOSSIP and RESYNC
 *           (RESYNC: dense f32, the sender's whole public copy), 0 for the
 *           control kinds
 *   36   4  payload length in bytes (everything after the header, as sent)
 *   40   4  step time (u32, microseconds): GOSSIP only, the sender's recent
 *           local step time (its rounds less their waits, smoothed), 0
 *           when not known yet; 0 in every other kind.  Bounded
 *           staleness tells a neighbour that is slow from one merely a
 *           round behind by it (gossip_round.c)
 *   44  ..  HELLO, HELLO_ACK: optionally the sender's instance nonce (u64,
 *           payload length 8); HELLO_ACK may add a status word (u64,
 *           payload length 16): bit 0 GOSSIP_HELLO_JOIN "this run is in
 *           progress without you: join it" (other bits must be 0);
 *           LINK_REQ, LINK_PROOF: a u64 token (payload length 8);
 *           STATE: u64 offset, u64 total, u32 crc, u32 reserved (0), then
 *           the chunk: bytes [offset, offset + len) of the sender's state
 *           (gossip_state.h: little-endian f32 values), total bytes in
 *           all, CRC-32 (zlib) of all of them; offset, len and total are
 *           multiples of 4, 0 < len <= GOSSIP_STATE_CHUNK_MAX,
 *           offset + len <= total, psi 1 and flags 0;
 *           GOSSIP, RESYNC: blocks, in view order:
 *        u8 type, varint numel (must equal the view's numel), then
 *        1 DENSE_F32   numel x f32
 *        2 DENSE_Q8    ceil(numel/512) x f32 scales, numel x i8 codes
 *        3 SPARSE_F32  varint k, u8 rice parameter b (0..31), varint L,
 *                      L bytes of index stream, k x f32
 *        4 SPARSE_Q8   varint k, u8 b, varint L, L bytes of index stream,
 *                      ceil(k/512) x f32 scales, k x i8 codes
 * varint: LEB128, at most 5 bytes, value < 2^32.  q8 codes in [-127, 127];
 * scales finite, >= 0 and <= FLT_MAX/127; f32 values finite.
 * Index stream: Golomb-Rice, LSB-first bit order.  Coded numbers are
 * idx[0], then idx[i] - idx[i-1] (must be >= 1: a 0 would repeat an index;
 * decreasing indices cannot be expressed).  Each number g: (g >> b) one-bits,
 * a zero bit, then the b low bits of g.  The stream is exactly
 * ceil(bits/8) bytes with zero padding.  The encoder picks the b that gives
 * the shortest stream.
 */
#ifndef GOSSIP_CODEC_H
#define GOSSIP_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_compress.h"
#include "nn/nn_core.h"

#define GOSSIP_MAGIC        0x5347504cu /* "LPGS" little-endian */
#define GOSSIP_VERSION      6
#define GOSSIP_HEADER_BYTES 44

enum {
    GOSSIP_MSG_HELLO      = 1,
    GOSSIP_MSG_GOSSIP     = 2,
    GOSSIP_MSG_RESYNC_REQ = 3,
    GOSSIP_MSG_RESYNC     = 4,
    GOSSIP_MSG_BYE        = 5,
    GOSSIP_MSG_HELLO_ACK  = 6,
    GOSSIP_MSG_BYE_ACK    = 7,
    GOSSIP_MSG_PING       = 8,
    GOSSIP_MSG_STATE_REQ  = 9,
    GOSSIP_MSG_STATE      = 10,
    GOSSIP_MSG_LINK_REQ   = 11,
    GOSSIP_MSG_LINK_PROOF = 12,
    GOSSIP_MSG_ACK        = 13,
    GOSSIP_MSG_LAST       = GOSSIP_MSG_ACK
};

#define GOSSIP_FLAG_PUSH_SUM 0x0001u
#define GOSSIP_FLAG_DEFLATE  0x0002u
/* GOSSIP with push-sum only: the sender kept (did not send) its shares of
 * its messages to this receiver after its previous one that went out,
 * through iteration iter - 1: the receiver mixes nothing for them (no
 * stand-in), the sender's x and psi hold that mass (docs/gossip.md "Kept
 * shares").  Offset of the flags in the header: GOSSIP_HDR_FLAGS_AT. */
#define GOSSIP_FLAG_KEPT     0x0004u
/* GOSSIP only: the message carries no update (choco: q = 0, the sender's
 * public copy did not move), every block sparse with no value; sent while
 * a link of the sender is backed up (docs/gossip.md "Deferred updates"). */
#define GOSSIP_FLAG_DEFERRED 0x0008u
/* PING only: iter is the sender's own iteration, not a proof of what it
 * sent (an in-neighbour that holds us down as fallen too far behind to
 * take back: gossip_live.c; the receiver learns how far ahead it is, and
 * re-joins).  The receiver takes nothing as lost on it. */
#define GOSSIP_FLAG_AHEAD    0x0010u
#define GOSSIP_HDR_FLAGS_AT  6

typedef struct {
    uint8_t  version;
    uint8_t  kind;
    uint16_t flags;
    uint32_t sender;
    uint64_t iter;
    double   psi;
    uint32_t fingerprint;
    uint32_t nblocks;
    uint32_t payload_len;
    uint32_t step_us;      /* GOSSIP: the sender's step time (us), 0 unknown */
} gossip_header;

/* Grow-only byte buffer (capacity is kept between messages). */
typedef struct {
    uint8_t *data;
    size_t   len, cap;
} gossip_buf;

void gossip_buf_free(gossip_buf *b);
/* b = copy of data[0..len) (grows if needed, never shrinks). */
void gossip_buf_set(gossip_buf *b, const uint8_t *data, size_t len);

/* One decoded tensor block.  Values are dequantized (the exact floats the
 * owner adds to its own copy). */
typedef struct {
    uint8_t   type;
    size_t    numel;
    size_t    k;       /* numel for dense blocks */
    uint32_t *idx;     /* k increasing indices for sparse blocks, else NULL */
    float    *val;     /* k values */
} gossip_block;

/* Decoder output for one layout; buffers sized for the layout once. */
typedef struct {
    gossip_header hdr;
    size_t        nblocks;  /* blocks decoded (== views, or 0) */
    size_t        cap_blocks;
    gossip_block *blocks;
    uint32_t     *idx;      /* layout numel */
    float        *val;      /* layout numel */
    gossip_buf    plain;    /* inflated message (deflated payloads), grow-only */
    void         *zs;       /* z_stream * for inflating, made on first use */
    size_t        cap_vals; /* idx and val hold this many (init: layout numel) */
} gossip_payload;

/* FNV-1a 32 over every view's name and numel: equal layouts, equal value. */
uint32_t gossip_layout_fingerprint(const nn_arena *layout);

/* Encodes a message with one block per entry of `blocks` (nblocks must be 0
 * or the layout's view count) into out (overwritten; grows if needed).
 * h->nblocks and h->payload_len are computed; other header fields are
 * taken from h.  Our own data: inconsistencies are asserted. Returns the
 * message size. */
size_t gossip_msg_encode(const gossip_header *h, const gossip_cblock *blocks, size_t nblocks,
                         gossip_buf *out);

/* Control message without blocks (every kind but GOSSIP and RESYNC). */
size_t gossip_msg_encode_control(uint8_t kind, uint32_t sender, uint64_t iter,
                                 uint32_t fingerprint, gossip_buf *out);

/* HELLO or HELLO_ACK with the sender's instance nonce as payload (8 bytes,
 * u64 little-endian, random per process start; 0 is never used). */
#define GOSSIP_NONCE_BYTES 8
size_t gossip_msg_encode_hello(uint8_t kind, uint32_t sender, uint64_t iter,
                               uint32_t fingerprint, uint64_t nonce, gossip_buf *out);
/* The instance nonce of a HELLO/HELLO_ACK whose header decoded, or 0 when
 * it carries none (an older peer, or a hand-made message). */
uint64_t gossip_msg_hello_nonce(const uint8_t *buf, size_t len);

/* HELLO_ACK with a status word (GOSSIP_HELLO_* bits; 0 encodes the plain
 * 8-byte-nonce HELLO_ACK of gossip_msg_encode_hello), and the status word
 * of a HELLO/HELLO_ACK whose header decoded (0 when it carries none). */
#define GOSSIP_HELLO_JOIN   0x1u
#define GOSSIP_STATUS_BYTES 8
size_t gossip_msg_encode_hello_ack(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                                   uint64_t nonce, uint64_t status, gossip_buf *out);
uint64_t gossip_msg_hello_status(const uint8_t *buf, size_t len);

/* LINK_REQ or LINK_PROOF carrying `token` (8 bytes, u64 little-endian),
 * and the token of one whose header decoded (0 when it carries none). */
#define GOSSIP_TOKEN_BYTES 8
size_t gossip_msg_encode_link(uint8_t kind, uint32_t sender, uint64_t iter,
                              uint32_t fingerprint, uint64_t token, gossip_buf *out);
uint64_t gossip_msg_link_token(const uint8_t *buf, size_t len);

/* STATE: one chunk of a joining node's state transfer (layout above). */
#define GOSSIP_STATE_HDR_BYTES 24
#define GOSSIP_STATE_CHUNK_MAX (256u * 1024u)
typedef struct {
    uint64_t       offset, total;
    uint32_t       crc;
    const uint8_t *data; /* into the message */
    size_t         len;
} gossip_state_chunk;
/* Encodes STATE with c->len bytes of c->data at c->offset (our own data:
 * the rules above are asserted).  Returns the message size. */
size_t gossip_msg_encode_state(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                               const gossip_state_chunk *c, gossip_buf *out);
/* The chunk fields of a STATE message (header included: checked here, as
 * by gossip_msg_decode_header with layout NULL).  0, or -1 with a message. */
int gossip_msg_decode_state(const uint8_t *buf, size_t len, gossip_header *h,
                            gossip_state_chunk *c, char *err, size_t errlen);
/* The rest of gossip_msg_decode_state, for a message whose header
 * gossip_msg_decode_header already read into *h (the chunk's bounds are
 * checked there): the chunk fields.  0, or -1 with a message. */
int gossip_msg_decode_state_chunk(const uint8_t *buf, size_t len, const gossip_header *h,
                                  gossip_state_chunk *c, char *err, size_t errlen);

/* Largest payload a valid plain message can have for `layout` (a bound
 * on every block with every Rice parameter): the cap on inflated sizes. */
size_t gossip_payload_max_bytes(const nn_arena *layout);

/* State of the lossless pass kept between messages (zero-initialise):
 * the zlib deflate stream, made on first use and reset for every message
 * (no allocation per message), and its output buffer. */
typedef struct {
    void      *zs;     /* z_stream * or NULL */
    int        level;  /* the level zs was made for */
    gossip_buf out;
} gossip_deflater;

void gossip_deflater_free(gossip_deflater *d);

/* The lossless pass: deflates the payload of the encoded message in msg
 * (a GOSSIP or RESYNC message from gossip_msg_encode) and, when header +
 * 4 + stream is strictly smaller, rewrites msg as the deflated message
 * (flag set, payload length patched).  Otherwise msg is unchanged (also
 * when zlib runs out of memory: plain is always valid).  Returns msg->len.
 * level: zlib level 1..9. */
size_t gossip_msg_deflate(gossip_buf *msg, gossip_deflater *d, int level);

/* Decodes and fully validates buf[0..len) against `layout`.  With out ==
 * NULL it only validates (nothing is written but *h); with out it fills
 * out (the caller's scratch, never live state).  A deflated payload is
 * inflated into out->plain (or a temporary buffer when out == NULL) and
 * then checked like a plain one; out->hdr keeps the flags as received.
 * On error returns -1 with
 * a message saying what is wrong and where (block, tensor, byte offset);
 * never reads outside buf, never asserts on the bytes. */
int gossip_msg_decode(const uint8_t *buf, size_t len, const nn_arena *layout, gossip_header *h,
                      gossip_payload *out, char *err, size_t errlen);
/* Decodes and validates the 44-byte header only (magic, version, kind,
 * flags, psi, block count of the control kinds, payload length); with a
 * layout also the fingerprint and the block count of GOSSIP and RESYNC
 * (NULL: the caller compares h->fingerprint).  What gossip_msg_decode
 * checks first; the transport's dispatch (gossip_link) reads headers with
 * it.  0, or -1 with a message. */
int gossip_msg_decode_header(const uint8_t *buf, size_t len, const nn_arena *layout,
                             gossip_header *h, char *err, size_t errlen);

/* The rest of gossip_msg_decode, for a message whose header
 * gossip_msg_decode_header already read into *h (with a layout or
 * without): the fingerprint and block count against `layout`, then the
 * payload (inflated when deflated), decoded into out (NULL: validated
 * only).  A receiver that dispatches on the header decodes each message
 * once this way.  0; -1 with a message when malformed;
 * GOSSIP_DECODE_NONFINITE (< 0) with a message when a value or scale is
 * NaN or Inf (well formed, but poisoned). */
#define GOSSIP_DECODE_NONFINITE (-2)
int gossip_msg_decode_payload(const uint8_t *buf, size_t len, const nn_arena *layout,
                              const gossip_header *h, gossip_payload *out, char *err, size_t errlen);

void gossip_payload_init(gossip_payload *p, const nn_arena *layout);
/* dst = a compact copy of the decoded src: its header and blocks, holding
 * only the values (and indices) they carry, in dst's own grow-only buffers
 * (dst zero-initialised or from an earlier copy; free with
 * gossip_payload_free).  How a receiver keeps a message it decoded once
 * until it mixes it. */
void gossip_payload_copy(gossip_payload *dst, const gossip_payload *src);
void gossip_payload_free(gossip_payload *p);

/* dst[view] += block values (dense: all, sparse: at idx), in float: the
 * exact operation owner and holders both do on public copies.  dst laid
 * out as the layout the payload was decoded against.  Accumulates. */
void gossip_payload_add(const gossip_payload *p, const nn_arena *layout, float *dst);
/* dst[view] -= block values, in float.  Accumulates. */
void gossip_payload_sub(const gossip_payload *p, const nn_arena *layout, float *dst);
/* dst[view] += alpha * block values, in double (mixing sums).  Accumulates. */
void gossip_payload_axpy(const gossip_payload *p, const nn_arena *layout, double alpha, double *dst);

/* Exposed for tests: exact Golomb-Rice stream size in bits for these
 * indices with parameter b, and the best b. */
uint64_t gossip_rice_bits(const uint32_t *idx, size_t k, int b);
int      gossip_rice_best(const uint32_t *idx, size_t k);

#endif
