/* gossip_state — the state transfer of a node that joins a run in progress
 * (docs/gossip.md "Joining").
 *
 * Owns:    the byte form of a transferred state (n floats, little-endian
 *          f32: the holder's de-biased model z = x/psi, then the model's
 *          extra floats, e.g. the 8-bit activation ranges), its split into
 *          STATE messages of at most GOSSIP_STATE_CHUNK_MAX bytes of data
 *          (gossip_codec.h), and the receiver's assembly, which checks
 *          everything: the sender is the neighbour asked, every chunk
 *          decodes, has this layout's fingerprint, the expected total, the
 *          same iteration and CRC as the first, and follows the previous
 *          one (one FIFO connection: in order, no gap, no overlap); the
 *          whole matches its CRC-32 and holds only finite values.
 * Exposes: gossip_state_pack, gossip_state_chunk_msg, gossip_state_rx_*.
 * Callers: gossip_link (`lpgossip node`: the holder answers STATE_REQ, the
 *          joiner assembles), gossip_sim (`simulate --join`), tests.
 */
#ifndef GOSSIP_STATE_H
#define GOSSIP_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip_codec.h"

/* bytes = v[0..n) as little-endian f32 (overwritten); returns its CRC-32. */
uint32_t gossip_state_pack(const float *v, size_t n, gossip_buf *bytes);

/* The k-th STATE message (chunks of `chunk` bytes, a multiple of 4 in
 * 4..GOSSIP_STATE_CHUNK_MAX) of the packed state `bytes` with its crc, into
 * out; returns its length, or 0 when k is past the last chunk. */
size_t gossip_state_chunk_msg(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                              const gossip_buf *bytes, uint32_t crc, size_t chunk, size_t k,
                              gossip_buf *out);

/* The receiver of one transfer of n floats. */
typedef struct {
    size_t   n;          /* floats expected */
    uint32_t fp;         /* layout fingerprint expected */
    int      from;       /* the neighbour asked; -1: none (everything refused) */
    uint64_t iter;       /* of the first chunk */
    uint32_t crc;
    uint64_t got;        /* bytes assembled so far */
    uint8_t *bytes;      /* 4n */
    float   *vals;       /* n: the state, valid after gossip_state_rx_add returned 1 */
    int      nonfinite;  /* the last refusal was of a NaN or Inf value (else 0) */
} gossip_state_rx;

void gossip_state_rx_init(gossip_state_rx *rx, size_t n, uint32_t fingerprint);
void gossip_state_rx_free(gossip_state_rx *rx);
/* Expects a new transfer from rank `from` (forgets any partial one). */
void gossip_state_rx_begin(gossip_state_rx *rx, int from);
/* One STATE message from rank `from`: 0 taken (more to come), 1 the state
 * is complete and checked (rx->vals, rx->iter; nothing more is expected),
 * -1 refused with a message naming the sender and the fault (rx->nonfinite
 * set when the fault is a value that is NaN or Inf).  A refusal
 * of the sender asked ends its transfer (rx->from = -1: ask again); one
 * from anybody else changes nothing. */
int gossip_state_rx_add(gossip_state_rx *rx, int from, const uint8_t *msg, size_t len,
                        char *err, size_t errlen);
/* As gossip_state_rx_add, for a message whose header a transport decoded
 * already (gossip_msg_decode_header, layout NULL) into *h: not again. */
int gossip_state_rx_add_decoded(gossip_state_rx *rx, int from, const gossip_header *h,
                                const uint8_t *msg, size_t len, char *err, size_t errlen);

#endif
