/* gossip_state — see gossip_state.h. */
#include "gossip/gossip_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

uint32_t gossip_state_pack(const float *v, size_t n, gossip_buf *bytes)
{
    bytes->len = 0;
    if (bytes->cap < 4 * n) {
        bytes->data = nn_xrealloc(bytes->data, 4 * n);
        bytes->cap = 4 * n;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            bytes->data[4 * i + (size_t)b] = (uint8_t)(u >> (8 * b));
    }
    bytes->len = 4 * n;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t o = 0; o < bytes->len; o += 1u << 30) {
        size_t m = bytes->len - o < (1u << 30) ? bytes->len - o : (1u << 30);
        crc = crc32(crc, bytes->data + o, (uInt)m);
    }
    return (uint32_t)crc;
}

size_t gossip_state_chunk_msg(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                              const gossip_buf *bytes, uint32_t crc, size_t chunk, size_t k,
                              gossip_buf *out)
{
    size_t off = k * chunk;
    if (chunk == 0 || off >= bytes->len)
        return 0;
    size_t len = bytes->len - off < chunk ? bytes->len - off : chunk;
    gossip_state_chunk c = {off, bytes->len, crc, bytes->data + off, len};
    return gossip_msg_encode_state(sender, iter, fingerprint, &c, out);
}

void gossip_state_rx_init(gossip_state_rx *rx, size_t n, uint32_t fingerprint)
{
    memset(rx, 0, sizeof *rx);
    rx->n = n;
    rx->fp = fingerprint;
    rx->from = -1;
    rx->bytes = nn_xmalloc(4 * n + 1);
    rx->vals = nn_xmalloc(sizeof *rx->vals * n + 1);
}

void gossip_state_rx_free(gossip_state_rx *rx)
{
    free(rx->bytes);
    free(rx->vals);
    memset(rx, 0, sizeof *rx);
    rx->from = -1;
}

void gossip_state_rx_begin(gossip_state_rx *rx, int from)
{
    rx->from = from;
    rx->got = 0;
    rx->iter = 0;
    rx->crc = 0;
}

/* The assembled bytes: CRC, then f32 values, all finite. */
static int s_finish(gossip_state_rx *rx, char *err, size_t errlen)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t o = 0; o < 4 * rx->n; o += 1u << 30) {
        size_t m = 4 * rx->n - o < (1u << 30) ? 4 * rx->n - o : (1u << 30);
        crc = crc32(crc, rx->bytes + o, (uInt)m);
    }
    if ((uint32_t)crc != rx->crc)
        return nn_errf(err, errlen, "CRC-32 of the whole state is %08x, the chunks say %08x",
                       (unsigned)crc, rx->crc);
    for (size_t i = 0; i < rx->n; i++) {
        const uint8_t *b = rx->bytes + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        memcpy(&rx->vals[i], &u, 4);
        if (!isfinite(rx->vals[i])) {
            nn_errf(err, errlen, "value %zu of the state is %s", i,
                    isnan(rx->vals[i]) ? "NaN" : "Inf");
            return GOSSIP_DECODE_NONFINITE;
        }
    }
    return 0;
}

/* The checks of one chunk of the transfer in progress. */
static int s_check(gossip_state_rx *rx, const gossip_header *h, const gossip_state_chunk *c,
                   char *err, size_t errlen)
{
    if (h->fingerprint != rx->fp)
        return nn_errf(err, errlen, "layout fingerprint %08x, ours %08x (another model)",
                       h->fingerprint, rx->fp);
    if (c->total != 4 * (uint64_t)rx->n)
        return nn_errf(err, errlen, "a state of %llu bytes, this run's is %llu",
                       (unsigned long long)c->total, (unsigned long long)(4 * (uint64_t)rx->n));
    if (c->offset != rx->got)
        return nn_errf(err, errlen, "chunk at byte %llu, the next one is at %llu (a gap, a "
                       "replay or a reordering)", (unsigned long long)c->offset,
                       (unsigned long long)rx->got);
    if (rx->got > 0 && (h->iter != rx->iter || c->crc != rx->crc))
        return nn_errf(err, errlen, "chunk of iteration %llu (CRC %08x) in a transfer of "
                       "iteration %llu (CRC %08x)", (unsigned long long)h->iter, c->crc,
                       (unsigned long long)rx->iter, rx->crc);
    return 0;
}

/* gossip_state_rx_add with the header decoded already (hp), or not (NULL). */
static int s_add(gossip_state_rx *rx, int from, const gossip_header *hp, const uint8_t *msg,
                 size_t len, char *err, size_t errlen)
{
    char why[512];
    gossip_header h;
    gossip_state_chunk c;
    rx->nonfinite = 0;
    if (from != rx->from || rx->from < 0)
        return nn_errf(err, errlen, "STATE from rank %d, which was not asked for its state%s",
                       from, rx->from >= 0 ? "" : " (no transfer in progress)");
    if (hp)
        h = *hp;
    int rc = hp ? gossip_msg_decode_state_chunk(msg, len, &h, &c, why, sizeof why)
                : gossip_msg_decode_state(msg, len, &h, &c, why, sizeof why);
    if (rc == 0 && h.sender != (uint32_t)from)
        rc = nn_errf(why, sizeof why, "sender field says rank %u", h.sender);
    if (rc == 0)
        rc = s_check(rx, &h, &c, why, sizeof why);
    if (rc == 0) {
        if (rx->got == 0) {
            rx->iter = h.iter;
            rx->crc = c.crc;
        }
        memcpy(rx->bytes + rx->got, c.data, c.len);
        rx->got += c.len;
        if (rx->got < 4 * (uint64_t)rx->n)
            return 0;
        rc = s_finish(rx, why, sizeof why);
    }
    if (rc != 0) {
        rx->nonfinite = rc == GOSSIP_DECODE_NONFINITE;
        rx->from = -1;
        return nn_errf(err, errlen, "STATE from rank %d refused: %s", from, why);
    }
    rx->from = -1; /* complete: nothing more is expected */
    return 1;
}

int gossip_state_rx_add(gossip_state_rx *rx, int from, const uint8_t *msg, size_t len,
                        char *err, size_t errlen)
{
    return s_add(rx, from, NULL, msg, len, err, errlen);
}

int gossip_state_rx_add_decoded(gossip_state_rx *rx, int from, const gossip_header *h,
                                const uint8_t *msg, size_t len, char *err, size_t errlen)
{
    return s_add(rx, from, h, msg, len, err, errlen);
}
