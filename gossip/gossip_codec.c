/* gossip_codec — see gossip_codec.h for the wire format. */
#include "gossip/gossip_codec.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- layout fingerprint ------------------------------------------------ */

static uint32_t s_fnv(uint32_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

uint32_t gossip_layout_fingerprint(const nn_arena *layout)
{
    uint32_t h = 2166136261u;
    for (size_t v = 0; v < layout->nviews; v++) {
        const nn_view *view = &layout->views[v];
        h = s_fnv(h, view->name, strlen(view->name) + 1);
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t)((uint64_t)view->numel >> (8 * i));
        h = s_fnv(h, le, sizeof le);
    }
    return h;
}

/* ---- writer ------------------------------------------------------------ */

void gossip_buf_free(gossip_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static uint8_t *s_grow(gossip_buf *b, size_t extra)
{
    if (!b->data || b->cap - b->len < extra) {   /* NULL + 0 is undefined too */
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < extra)
            cap = cap + cap / 2;
        b->data = nn_xrealloc(b->data, cap);
        b->cap = cap;
    }
    uint8_t *p = b->data + b->len;
    b->len += extra;
    return p;
}

void gossip_buf_set(gossip_buf *b, const uint8_t *data, size_t len)
{
    b->len = 0;
    uint8_t *p = s_grow(b, len);
    if (len)
        memcpy(p, data, len);
}

static void s_put_le(gossip_buf *b, uint64_t v, int nbytes)
{
    uint8_t *p = s_grow(b, (size_t)nbytes);
    for (int i = 0; i < nbytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void s_put_f32(gossip_buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    s_put_le(b, u, 4);
}

static void s_put_varint(gossip_buf *b, uint32_t v)
{
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        s_put_le(b, byte | (v ? 0x80 : 0), 1);
    } while (v);
}

/* ---- Golomb-Rice ------------------------------------------------------- */

/* The numbers coded for index i: idx[0], then gaps >= 1. */
static inline uint32_t s_gap(const uint32_t *idx, size_t i)
{
    return i ? idx[i] - idx[i - 1] : idx[0];
}

uint64_t gossip_rice_bits(const uint32_t *idx, size_t k, int b)
{
    uint64_t bits = (uint64_t)k * (uint64_t)(1 + b);
    for (size_t i = 0; i < k; i++)
        bits += s_gap(idx, i) >> b;
    return bits;
}

int gossip_rice_best(const uint32_t *idx, size_t k)
{
    if (k == 0)
        return 0;
    double mean = ((double)idx[k - 1] + 1.0) / (double)k;
    int bm = 0;
    while (bm < 31 && (double)(1ull << (bm + 1)) <= mean)
        bm++;
    int best = 0;
    uint64_t best_bits = UINT64_MAX;
    for (int b = bm - 2; b <= bm + 2; b++) {
        if (b < 0 || b > 31)
            continue;
        uint64_t bits = gossip_rice_bits(idx, k, b);
        if (bits < best_bits) {
            best_bits = bits;
            best = b;
        }
    }
    return best;
}

typedef struct {
    uint8_t *p;
    size_t   n;
    uint64_t acc;
    int      nacc;
} s_bitw;

static inline void s_bitw_put(s_bitw *w, uint64_t v, int nb) /* nb <= 32 */
{
    w->acc |= v << w->nacc;
    w->nacc += nb;
    while (w->nacc >= 8) {
        w->p[w->n++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc -= 8;
    }
}

static void s_rice_write(gossip_buf *b, const uint32_t *idx, size_t k, int rb, size_t nbytes)
{
    s_bitw w = { s_grow(b, nbytes), 0, 0, 0 };
    for (size_t i = 0; i < k; i++) {
        uint32_t g = s_gap(idx, i);
        uint64_t q = g >> rb;
        while (q >= 32) {
            s_bitw_put(&w, 0xffffffffu, 32);
            q -= 32;
        }
        s_bitw_put(&w, (1ull << q) - 1, (int)q);
        s_bitw_put(&w, 0, 1);
        if (rb)
            s_bitw_put(&w, g & ((1ull << rb) - 1), rb);
    }
    if (w.nacc)
        w.p[w.n++] = (uint8_t)w.acc;
    assert(w.n == nbytes);
}

/* ---- encode ------------------------------------------------------------ */

static void s_put_header(gossip_buf *out, const gossip_header *h, uint32_t nblocks)
{
    s_put_le(out, GOSSIP_MAGIC, 4);
    s_put_le(out, GOSSIP_VERSION, 1);
    s_put_le(out, h->kind, 1);
    s_put_le(out, h->flags, 2);
    s_put_le(out, h->sender, 4);
    s_put_le(out, h->iter, 8);
    uint64_t u;
    memcpy(&u, &h->psi, sizeof u);
    s_put_le(out, u, 8);
    s_put_le(out, h->fingerprint, 4);
    s_put_le(out, nblocks, 4);
    s_put_le(out, 0, 4); /* payload length, patched */
    s_put_le(out, h->kind == GOSSIP_MSG_GOSSIP ? h->step_us : 0, 4);
}

size_t gossip_msg_encode(const gossip_header *h, const gossip_cblock *blocks, size_t nblocks,
                         gossip_buf *out)
{
    out->len = 0;
    s_put_header(out, h, (uint32_t)nblocks);
    for (size_t bi = 0; bi < nblocks; bi++) {
        const gossip_cblock *blk = &blocks[bi];
        s_put_le(out, blk->type, 1);
        s_put_varint(out, blk->numel);
        int sparse = blk->type == GOSSIP_BLK_SPARSE_F32 || blk->type == GOSSIP_BLK_SPARSE_Q8;
        int q8 = blk->type == GOSSIP_BLK_DENSE_Q8 || blk->type == GOSSIP_BLK_SPARSE_Q8;
        assert(blk->type >= GOSSIP_BLK_DENSE_F32 && blk->type <= GOSSIP_BLK_SPARSE_Q8);
        assert(sparse || blk->k == blk->numel);
        if (sparse) {
            assert(blk->k <= blk->numel);
            int rb = gossip_rice_best(blk->idx, blk->k);
            uint64_t bits = gossip_rice_bits(blk->idx, blk->k, rb);
            size_t nbytes = (size_t)((bits + 7) / 8);
            assert(nbytes <= UINT32_MAX);
            s_put_varint(out, blk->k);
            s_put_le(out, (uint64_t)rb, 1);
            s_put_varint(out, (uint32_t)nbytes);
            s_rice_write(out, blk->idx, blk->k, rb, nbytes);
        }
        if (q8) {
            size_t nsc = (blk->k + GOSSIP_QBLOCK - 1) / GOSSIP_QBLOCK;
            for (size_t s = 0; s < nsc; s++)
                s_put_f32(out, blk->scales[s]);
            uint8_t *p = s_grow(out, blk->k);
            if (blk->k)
                memcpy(p, blk->q, blk->k); /* int8 -> two's complement bytes */
        } else {
            uint8_t *p = s_grow(out, (size_t)blk->k * 4);
            for (size_t i = 0; i < blk->k; i++) {
                uint32_t u;
                memcpy(&u, &blk->f32[i], sizeof u);
                p[4 * i] = (uint8_t)u;
                p[4 * i + 1] = (uint8_t)(u >> 8);
                p[4 * i + 2] = (uint8_t)(u >> 16);
                p[4 * i + 3] = (uint8_t)(u >> 24);
            }
        }
    }
    size_t payload = out->len - GOSSIP_HEADER_BYTES;
    assert(payload <= UINT32_MAX);
    for (int i = 0; i < 4; i++)
        out->data[36 + i] = (uint8_t)(payload >> (8 * i));
    return out->len;
}

size_t gossip_msg_encode_control(uint8_t kind, uint32_t sender, uint64_t iter,
                                 uint32_t fingerprint, gossip_buf *out)
{
    gossip_header h = { GOSSIP_VERSION, kind, 0, sender, iter, 1.0, fingerprint, 0, 0, 0 };
    return gossip_msg_encode(&h, NULL, 0, out);
}

size_t gossip_msg_encode_hello(uint8_t kind, uint32_t sender, uint64_t iter,
                               uint32_t fingerprint, uint64_t nonce, gossip_buf *out)
{
    assert(kind == GOSSIP_MSG_HELLO || kind == GOSSIP_MSG_HELLO_ACK);
    gossip_msg_encode_control(kind, sender, iter, fingerprint, out);
    uint8_t *p = s_grow(out, GOSSIP_NONCE_BYTES);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(nonce >> (8 * i));
    out->data[36] = GOSSIP_NONCE_BYTES;
    return out->len;
}

size_t gossip_msg_encode_hello_ack(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                                   uint64_t nonce, uint64_t status, gossip_buf *out)
{
    gossip_msg_encode_hello(GOSSIP_MSG_HELLO_ACK, sender, iter, fingerprint, nonce, out);
    if (!status)
        return out->len;
    uint8_t *p = s_grow(out, GOSSIP_STATUS_BYTES);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(status >> (8 * i));
    out->data[36] = GOSSIP_NONCE_BYTES + GOSSIP_STATUS_BYTES;
    return out->len;
}

size_t gossip_msg_encode_link(uint8_t kind, uint32_t sender, uint64_t iter,
                              uint32_t fingerprint, uint64_t token, gossip_buf *out)
{
    assert(kind == GOSSIP_MSG_LINK_REQ || kind == GOSSIP_MSG_LINK_PROOF);
    gossip_msg_encode_control(kind, sender, iter, fingerprint, out);
    uint8_t *p = s_grow(out, GOSSIP_TOKEN_BYTES);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(token >> (8 * i));
    out->data[36] = GOSSIP_TOKEN_BYTES;
    return out->len;
}

uint64_t gossip_msg_link_token(const uint8_t *buf, size_t len)
{
    if (!buf || len != GOSSIP_HEADER_BYTES + GOSSIP_TOKEN_BYTES ||
        (buf[5] != GOSSIP_MSG_LINK_REQ && buf[5] != GOSSIP_MSG_LINK_PROOF))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)buf[GOSSIP_HEADER_BYTES + i] << (8 * i);
    return v;
}

uint64_t gossip_msg_hello_status(const uint8_t *buf, size_t len)
{
    if (!buf || len != GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES + GOSSIP_STATUS_BYTES)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)buf[GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES + i] << (8 * i);
    return v;
}

size_t gossip_msg_encode_state(uint32_t sender, uint64_t iter, uint32_t fingerprint,
                               const gossip_state_chunk *c, gossip_buf *out)
{
    assert(c->len > 0 && c->len <= GOSSIP_STATE_CHUNK_MAX && c->offset <= c->total &&
           c->len <= c->total - c->offset && (c->offset | c->total | c->len) % 4 == 0);
    gossip_msg_encode_control(GOSSIP_MSG_STATE, sender, iter, fingerprint, out);
    uint8_t *p = s_grow(out, GOSSIP_STATE_HDR_BYTES + c->len);
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(c->offset >> (8 * i));
        p[8 + i] = (uint8_t)(c->total >> (8 * i));
    }
    for (int i = 0; i < 4; i++) {
        p[16 + i] = (uint8_t)(c->crc >> (8 * i));
        p[20 + i] = 0;
    }
    memcpy(p + GOSSIP_STATE_HDR_BYTES, c->data, c->len);
    uint32_t pl = (uint32_t)(GOSSIP_STATE_HDR_BYTES + c->len);
    for (int i = 0; i < 4; i++)
        out->data[36 + i] = (uint8_t)(pl >> (8 * i));
    return out->len;
}

/* ---- the lossless pass ------------------------------------------------- */

size_t gossip_payload_max_bytes(const nn_arena *layout)
{
    /* Per block: type, varints numel, k, L (5 bytes each at most), Rice b;
     * index stream: k(1+b) + sum(gap >> b) <= 32k + numel bits, k <= numel;
     * values: 4 per element (f32) or 1 per element + 4 per 512 (q8). */
    size_t total = 0;
    for (size_t v = 0; v < layout->nviews; v++) {
        size_t n = layout->views[v].numel;
        total += 22 + (33 * n + 7) / 8 + 4 * n;
    }
    return total;
}

static void s_put32_at(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void gossip_deflater_free(gossip_deflater *d)
{
    if (d->zs) {
        deflateEnd(d->zs);
        free(d->zs);
    }
    gossip_buf_free(&d->out);
    memset(d, 0, sizeof *d);
}

size_t gossip_msg_deflate(gossip_buf *msg, gossip_deflater *d, int level)
{
    assert(msg->len >= GOSSIP_HEADER_BYTES);
    uint16_t flags = (uint16_t)(msg->data[GOSSIP_HDR_FLAGS_AT] | msg->data[GOSSIP_HDR_FLAGS_AT + 1] << 8);
    assert(!(flags & GOSSIP_FLAG_DEFLATE) && (msg->data[5] == GOSSIP_MSG_GOSSIP || msg->data[5] == GOSSIP_MSG_RESYNC));
    size_t raw = msg->len - GOSSIP_HEADER_BYTES;
    if (raw <= 5) /* 4 + at least one stream byte cannot be smaller */
        return msg->len;
    assert(raw <= UINT32_MAX);
    if (d->zs && d->level != level) {
        deflateEnd(d->zs);
        free(d->zs);
        d->zs = NULL;
    }
    if (!d->zs) {
        z_stream *zs = nn_xcalloc(1, sizeof *zs);
        if (deflateInit2(zs, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free(zs);
            return msg->len; /* out of memory in zlib: plain is always valid */
        }
        d->zs = zs;
        d->level = level;
    } else {
        deflateReset(d->zs);
    }
    /* Room for a stream of at most raw - 5 bytes: if deflate does not end
     * inside it, the deflated form would not be smaller. */
    size_t cap = raw - 5;
    d->out.len = 0;
    uint8_t *z = s_grow(&d->out, cap);
    z_stream *zs = d->zs;
    zs->next_in = msg->data + GOSSIP_HEADER_BYTES;
    zs->avail_in = (uInt)raw;
    zs->next_out = z;
    zs->avail_out = (uInt)cap;
    int rc = deflate(zs, Z_FINISH);
    size_t zlen = (size_t)zs->total_out;
    if (rc != Z_STREAM_END)
        return msg->len;
    flags |= GOSSIP_FLAG_DEFLATE;
    msg->data[6] = (uint8_t)flags;
    msg->data[7] = (uint8_t)(flags >> 8);
    s_put32_at(msg->data + 36, (uint32_t)(4 + zlen));
    s_put32_at(msg->data + GOSSIP_HEADER_BYTES, (uint32_t)raw);
    memcpy(msg->data + GOSSIP_HEADER_BYTES + 4, z, zlen);
    msg->len = GOSSIP_HEADER_BYTES + 4 + zlen;
    return msg->len;
}

/* ---- decode ------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t         len, pos;
} s_rd;

static int s_avail(const s_rd *r, uint64_t n)
{
    return n <= (uint64_t)(r->len - r->pos);
}

static uint64_t s_le(s_rd *r, int nbytes) /* caller checked s_avail */
{
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++)
        v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)nbytes;
    return v;
}

static float s_f32(s_rd *r)
{
    uint32_t u = (uint32_t)s_le(r, 4);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* LEB128 u32, at most 5 bytes. 0 ok, -1 truncated, -2 too long/large. */
static int s_varint(s_rd *r, uint32_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (!s_avail(r, 1))
            return -1;
        uint8_t byte = r->p[r->pos++];
        v |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            if (v > UINT32_MAX)
                return -2;
            *out = (uint32_t)v;
            return 0;
        }
    }
    return -2;
}

static const char *s_kind_name(unsigned kind)
{
    static const char *names[] = { "?",   "HELLO",     "GOSSIP",  "RESYNC_REQ", "RESYNC",
                                   "BYE", "HELLO_ACK", "BYE_ACK", "PING", "STATE_REQ",
                                   "STATE", "LINK_REQ", "LINK_PROOF", "ACK" };
    return kind <= GOSSIP_MSG_LAST ? names[kind] : "?";
}

#define S_BAD(...) nn_errf(err, errlen, __VA_ARGS__)

static int s_read_varint(s_rd *r, uint32_t *v, const char *what, size_t b, const char *tname,
                         char *err, size_t errlen)
{
    size_t at = r->pos;
    int rc = s_varint(r, v);
    if (rc == -1)
        return S_BAD("block %zu (tensor '%s'): truncated in %s at byte %zu", b, tname, what, at);
    if (rc == -2)
        return S_BAD("block %zu (tensor '%s'): %s varint at byte %zu is longer than 5 bytes or exceeds 2^32-1",
                     b, tname, what, at);
    return 0;
}

/* Decodes k Rice-coded indices from s[0..nbytes); checks range and order.
 * idx may be NULL (validate only). */
static int s_rice_read(const uint8_t *s, size_t nbytes, size_t k, int rb, size_t numel,
                       uint32_t *idx, size_t b, const char *tname, char *err, size_t errlen)
{
    uint64_t nbits = (uint64_t)nbytes * 8, pos = 0;
    uint64_t prev = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t q = 0;
        for (;;) {
            if (pos >= nbits)
                return S_BAD("block %zu (tensor '%s'): index stream ends after %zu of %zu indices",
                             b, tname, i, k);
            int bit = (s[pos >> 3] >> (pos & 7)) & 1;
            pos++;
            if (!bit)
                break;
            q++;
            if ((q << rb) >= numel)
                return S_BAD("block %zu (tensor '%s'): index %zu lies past the tensor (numel %zu)",
                             b, tname, i, numel);
        }
        if (nbits - pos < (uint64_t)rb)
            return S_BAD("block %zu (tensor '%s'): index stream ends inside index %zu of %zu",
                         b, tname, i, k);
        uint64_t low = 0;
        for (int j = 0; j < rb; j++, pos++)
            low |= (uint64_t)((s[pos >> 3] >> (pos & 7)) & 1) << j;
        uint64_t g = (q << rb) | low;
        if (i > 0 && g == 0)
            return S_BAD("block %zu (tensor '%s'): index %zu repeats index %llu (indices must be strictly increasing)",
                         b, tname, i, (unsigned long long)prev);
        uint64_t cur = i ? prev + g : g;
        if (cur >= numel)
            return S_BAD("block %zu (tensor '%s'): index %llu (entry %zu) lies past the tensor (numel %zu)",
                         b, tname, (unsigned long long)cur, i, numel);
        if (idx)
            idx[i] = (uint32_t)cur;
        prev = cur;
    }
    if ((pos + 7) / 8 != nbytes)
        return S_BAD("block %zu (tensor '%s'): index stream is %zu bytes but its %zu indices use %llu",
                     b, tname, nbytes, k, (unsigned long long)((pos + 7) / 8));
    if (pos & 7) {
        if (s[pos >> 3] >> (pos & 7))
            return S_BAD("block %zu (tensor '%s'): nonzero padding bits after the index stream", b, tname);
    }
    return 0;
}

/* k f32 values, finite. */
static int s_read_f32s(s_rd *r, size_t k, float *val, size_t b, const char *tname,
                       char *err, size_t errlen)
{
    if (!s_avail(r, (uint64_t)k * 4))
        return S_BAD("block %zu (tensor '%s'): truncated: %zu f32 values need %zu bytes at byte %zu, %zu left",
                     b, tname, k, k * 4, r->pos, r->len - r->pos);
    for (size_t i = 0; i < k; i++) {
        float f = s_f32(r);
        if (!isfinite(f)) {
            S_BAD("block %zu (tensor '%s'): value %zu is %s", b, tname, i, isnan(f) ? "NaN" : "Inf");
            return GOSSIP_DECODE_NONFINITE;
        }
        if (val)
            val[i] = f;
    }
    return 0;
}

/* ceil(k/QBLOCK) scales then k codes; writes dequantized values. */
static int s_read_q8(s_rd *r, size_t k, float *val, size_t b, const char *tname,
                     char *err, size_t errlen)
{
    size_t nsc = (k + GOSSIP_QBLOCK - 1) / GOSSIP_QBLOCK;
    if (!s_avail(r, (uint64_t)nsc * 4 + k))
        return S_BAD("block %zu (tensor '%s'): truncated: %zu scales and %zu codes need %zu bytes at byte %zu, %zu left",
                     b, tname, nsc, k, nsc * 4 + k, r->pos, r->len - r->pos);
    size_t code_pos = r->pos + nsc * 4;
    for (size_t s = 0; s < nsc; s++) {
        float scale = s_f32(r);
        if (!isfinite(scale)) {
            S_BAD("block %zu (tensor '%s'): scale %zu is %s", b, tname, s, isnan(scale) ? "NaN" : "Inf");
            return GOSSIP_DECODE_NONFINITE;
        }
        if (scale < 0.0f || scale > FLT_MAX / 127.0f)
            return S_BAD("block %zu (tensor '%s'): scale %zu = %g out of range [0, FLT_MAX/127]",
                         b, tname, s, (double)scale);
        size_t i0 = s * GOSSIP_QBLOCK, i1 = i0 + GOSSIP_QBLOCK < k ? i0 + GOSSIP_QBLOCK : k;
        for (size_t i = i0; i < i1; i++) {
            int8_t c = (int8_t)r->p[code_pos + i];
            if (c == -128)
                return S_BAD("block %zu (tensor '%s'): q8 code %zu is -128 (codes are -127..127)", b, tname, i);
            if (val)
                val[i] = gossip_dequant(c, scale);
        }
    }
    r->pos = code_pos + k;
    return 0;
}

/* The blocks of a plain message buf[0..len) whose header is already
 * validated into *h. */
static int s_decode_blocks(const uint8_t *buf, size_t len, const nn_arena *layout,
                           const gossip_header *h, gossip_payload *out, char *err, size_t errlen)
{
    s_rd r = { buf, len, GOSSIP_HEADER_BYTES };
    for (size_t b = 0; b < h->nblocks; b++) {
        const nn_view *view = &layout->views[b];
        const char *tname = view->name;
        if (!s_avail(&r, 1))
            return S_BAD("truncated before block %zu (tensor '%s') at byte %zu", b, tname, r.pos);
        uint8_t type = (uint8_t)s_le(&r, 1);
        if (type < GOSSIP_BLK_DENSE_F32 || type > GOSSIP_BLK_SPARSE_Q8)
            return S_BAD("block %zu (tensor '%s'): unknown block type %u at byte %zu", b, tname, type, r.pos - 1);
        uint32_t numel;
        if (s_read_varint(&r, &numel, "numel", b, tname, err, errlen) < 0)
            return -1;
        if (numel != view->numel)
            return S_BAD("block %zu (tensor '%s'): tensor size %u differs from the layout's %zu",
                         b, tname, numel, view->numel);
        gossip_block *blk = NULL;
        if (out) {
            assert(out->cap_blocks >= h->nblocks);
            blk = &out->blocks[b];
            blk->type = type;
            blk->numel = numel;
            blk->k = numel;
            blk->idx = NULL;
            blk->val = out->val + view->offset;
        }
        size_t k = numel;
        if (type == GOSSIP_BLK_SPARSE_F32 || type == GOSSIP_BLK_SPARSE_Q8) {
            uint32_t kk, nbytes;
            if (s_read_varint(&r, &kk, "k", b, tname, err, errlen) < 0)
                return -1;
            if (kk > numel)
                return S_BAD("block %zu (tensor '%s'): %u values for a tensor of %u", b, tname, kk, numel);
            if (!s_avail(&r, 1))
                return S_BAD("block %zu (tensor '%s'): truncated before the rice parameter", b, tname);
            int rb = (int)s_le(&r, 1);
            if (rb > 31)
                return S_BAD("block %zu (tensor '%s'): rice parameter %d > 31", b, tname, rb);
            if (s_read_varint(&r, &nbytes, "index stream length", b, tname, err, errlen) < 0)
                return -1;
            if (!s_avail(&r, nbytes))
                return S_BAD("block %zu (tensor '%s'): truncated: index stream of %u bytes at byte %zu, %zu left",
                             b, tname, nbytes, r.pos, r.len - r.pos);
            uint32_t *idx = out ? out->idx + view->offset : NULL;
            if (s_rice_read(r.p + r.pos, nbytes, kk, rb, numel, idx, b, tname, err, errlen) < 0)
                return -1;
            r.pos += nbytes;
            k = kk;
            if (blk) {
                blk->k = k;
                blk->idx = idx;
            }
        }
        float *val = blk ? blk->val : NULL;
        int rc;
        if (type == GOSSIP_BLK_DENSE_F32 || type == GOSSIP_BLK_SPARSE_F32)
            rc = s_read_f32s(&r, k, val, b, tname, err, errlen);
        else
            rc = s_read_q8(&r, k, val, b, tname, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (r.pos != len)
        return S_BAD("%zu trailing bytes after the last block", len - r.pos);
    if (out) {
        out->hdr = *h;
        out->nblocks = h->nblocks;
    }
    return 0;
}


/* Inflates the deflated message buf[0..len) (header validated) into plain
 * as header + plain payload, never producing more than max_plain payload
 * bytes. */
static int s_inflate(const uint8_t *buf, size_t len, size_t max_plain, gossip_buf *plain,
                     z_stream *zs, char *err, size_t errlen)
{
    size_t plen = len - GOSSIP_HEADER_BYTES;
    if (plen < 5)
        return S_BAD("deflated payload of %zu bytes is too short (4-byte plain length, then the stream)", plen);
    uint32_t want = 0;
    for (int i = 0; i < 4; i++)
        want |= (uint32_t)buf[GOSSIP_HEADER_BYTES + i] << (8 * i);
    if (want > max_plain)
        return S_BAD("deflated payload declares %u plain bytes, more than the %zu any valid message for this layout has (refused before inflating)",
                     want, max_plain);
    if (plen >= want)
        return S_BAD("deflated payload of %zu bytes is not smaller than its %u plain bytes (such payloads are sent plain)",
                     plen, want);
    plain->len = 0;
    uint8_t *p = s_grow(plain, GOSSIP_HEADER_BYTES + (size_t)want);
    memcpy(p, buf, GOSSIP_HEADER_BYTES);
    zs->next_in = (Bytef *)(uintptr_t)(buf + GOSSIP_HEADER_BYTES + 4); /* zlib does not write it */
    zs->avail_in = (uInt)(plen - 4);
    zs->next_out = p + GOSSIP_HEADER_BYTES;
    zs->avail_out = want;
    int zr = inflate(zs, Z_FINISH);
    if (zr != Z_STREAM_END && zr != Z_DATA_ERROR && zs->avail_out == 0) {
        uint8_t probe; /* full: is there more, or is the stream cut short? */
        zs->next_out = &probe;
        zs->avail_out = 1;
        zr = inflate(zs, Z_FINISH);
        if (zs->avail_out == 0)
            return S_BAD("deflate stream inflates to more than the %u bytes it declares", want);
    }
    size_t got = (size_t)zs->total_out, left = zs->avail_in;
    if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT)
        return S_BAD("corrupt deflate stream after %zu plain bytes: %s", got,
                     zs->msg ? zs->msg : "invalid data");
    if (zr != Z_STREAM_END)
        return S_BAD("deflate stream truncated: it stops after %zu of %u plain bytes", got, want);
    if (got != want)
        return S_BAD("deflate stream inflates to %zu bytes, the payload declares %u", got, want);
    if (left)
        return S_BAD("%zu bytes follow the end of the deflate stream", left);
    return 0;
}

/* The chunk rules of a STATE whose header decoded (gossip_codec.h). */
static int s_check_state(const uint8_t *buf, const gossip_header *h, char *err, size_t errlen)
{
    if (h->flags != 0 || h->psi != 1.0)
        return S_BAD("STATE from rank %u has flags 0x%04x or psi %g (must be 0 and 1)", h->sender,
                     h->flags, h->psi);
    if (h->payload_len < GOSSIP_STATE_HDR_BYTES)
        return S_BAD("STATE from rank %u: %u payload bytes, the chunk header needs %d", h->sender,
                     h->payload_len, GOSSIP_STATE_HDR_BYTES);
    s_rd r = { buf, GOSSIP_HEADER_BYTES + (size_t)h->payload_len, GOSSIP_HEADER_BYTES };
    uint64_t off = s_le(&r, 8), total = s_le(&r, 8);
    (void)s_le(&r, 4);
    uint32_t reserved = (uint32_t)s_le(&r, 4);
    uint64_t n = h->payload_len - GOSSIP_STATE_HDR_BYTES;
    if (reserved != 0)
        return S_BAD("STATE from rank %u: reserved field 0x%08x is not 0", h->sender, reserved);
    if (n == 0 || n > GOSSIP_STATE_CHUNK_MAX)
        return S_BAD("STATE from rank %u: chunk of %llu bytes (1..%u allowed)", h->sender,
                     (unsigned long long)n, GOSSIP_STATE_CHUNK_MAX);
    if ((off | total | n) % 4 != 0)
        return S_BAD("STATE from rank %u: offset %llu, length %llu or total %llu is not a "
                     "multiple of 4 (f32 values)", h->sender, (unsigned long long)off,
                     (unsigned long long)n, (unsigned long long)total);
    if (off > total || n > total - off)
        return S_BAD("STATE from rank %u: chunk [%llu, %llu) outside the total of %llu bytes",
                     h->sender, (unsigned long long)off, (unsigned long long)(off + n),
                     (unsigned long long)total);
    return 0;
}

int gossip_msg_decode_header(const uint8_t *buf, size_t len, const nn_arena *layout,
                             gossip_header *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    if (!buf || len < GOSSIP_HEADER_BYTES)
        return S_BAD("message truncated: %zu bytes, the header needs %d", len, GOSSIP_HEADER_BYTES);
    s_rd r = { buf, len, 0 };
    uint32_t magic = (uint32_t)s_le(&r, 4);
    if (magic != GOSSIP_MAGIC)
        return S_BAD("bad magic 0x%08x (expected 0x%08x, \"LPGS\"): not an lpgossip message", magic, GOSSIP_MAGIC);
    h->version = (uint8_t)s_le(&r, 1);
    if (h->version != GOSSIP_VERSION)
        return S_BAD("unsupported version %u (this build speaks %d)", h->version, GOSSIP_VERSION);
    h->kind = (uint8_t)s_le(&r, 1);
    if (h->kind < GOSSIP_MSG_HELLO || h->kind > GOSSIP_MSG_LAST)
        return S_BAD("unknown message kind %u (known 1..%d)", h->kind, GOSSIP_MSG_LAST);
    h->flags = (uint16_t)s_le(&r, 2);
    if (h->flags & ~(GOSSIP_FLAG_PUSH_SUM | GOSSIP_FLAG_DEFLATE | GOSSIP_FLAG_KEPT |
                     GOSSIP_FLAG_DEFERRED | GOSSIP_FLAG_AHEAD))
        return S_BAD("unknown flags 0x%04x", h->flags);
    if ((h->flags & GOSSIP_FLAG_AHEAD) && h->kind != GOSSIP_MSG_PING)
        return S_BAD("%s message has the ahead flag (only PING messages carry it)",
                     s_kind_name(h->kind));
    if ((h->flags & GOSSIP_FLAG_DEFERRED) && h->kind != GOSSIP_MSG_GOSSIP)
        return S_BAD("%s message has the deferred flag (only GOSSIP messages carry it)",
                     s_kind_name(h->kind));
    if ((h->flags & GOSSIP_FLAG_KEPT) &&
        (h->kind != GOSSIP_MSG_GOSSIP || !(h->flags & GOSSIP_FLAG_PUSH_SUM)))
        return S_BAD("%s message has the kept flag (only push-sum GOSSIP messages carry it)",
                     s_kind_name(h->kind));
    int has_blocks = h->kind == GOSSIP_MSG_GOSSIP || h->kind == GOSSIP_MSG_RESYNC;
    if ((h->flags & GOSSIP_FLAG_DEFLATE) && !has_blocks)
        return S_BAD("%s message has the deflate flag (only GOSSIP and RESYNC payloads are deflated)",
                     s_kind_name(h->kind));
    h->sender = (uint32_t)s_le(&r, 4);
    h->iter = s_le(&r, 8);
    uint64_t u = s_le(&r, 8);
    memcpy(&h->psi, &u, sizeof u);
    if (!isfinite(h->psi) || !(h->psi > 0.0))
        return S_BAD("psi %g from rank %u is not a finite positive number", h->psi, h->sender);
    if (!(h->flags & GOSSIP_FLAG_PUSH_SUM) && h->psi != 1.0)
        return S_BAD("psi %g from rank %u but the push-sum flag is off (psi must be 1)", h->psi, h->sender);
    h->fingerprint = (uint32_t)s_le(&r, 4);
    uint32_t fp = layout ? gossip_layout_fingerprint(layout) : h->fingerprint;
    if (h->fingerprint != fp)
        return S_BAD("layout fingerprint 0x%08x from rank %u differs from ours 0x%08x (different model?)",
                     h->fingerprint, h->sender, fp);
    h->nblocks = (uint32_t)s_le(&r, 4);
    h->payload_len = (uint32_t)s_le(&r, 4);
    h->step_us = (uint32_t)s_le(&r, 4);
    if (h->step_us && h->kind != GOSSIP_MSG_GOSSIP)
        return S_BAD("%s message carries a step time (%u us; only GOSSIP messages do)",
                     s_kind_name(h->kind), h->step_us);
    size_t want = has_blocks ? (layout ? layout->nviews : h->nblocks) : 0;
    if (h->nblocks != want)
        return S_BAD("%s message has %u blocks, expected %zu (one per tensor of the layout)",
                     s_kind_name(h->kind), h->nblocks, want);
    if ((uint64_t)h->payload_len != (uint64_t)(len - GOSSIP_HEADER_BYTES))
        return S_BAD("payload length field says %u bytes but %zu follow the header",
                     h->payload_len, len - GOSSIP_HEADER_BYTES);
    int nonce = h->kind == GOSSIP_MSG_HELLO || h->kind == GOSSIP_MSG_HELLO_ACK;
    int status = h->kind == GOSSIP_MSG_HELLO_ACK &&
                 h->payload_len == GOSSIP_NONCE_BYTES + GOSSIP_STATUS_BYTES;
    if (h->kind == GOSSIP_MSG_STATE)
        return s_check_state(buf, h, err, errlen);
    int link = h->kind == GOSSIP_MSG_LINK_REQ || h->kind == GOSSIP_MSG_LINK_PROOF;
    if (link && h->payload_len != GOSSIP_TOKEN_BYTES)
        return S_BAD("%s message with a %u-byte payload: expected the %d-byte token",
                     s_kind_name(h->kind), h->payload_len, GOSSIP_TOKEN_BYTES);
    if (!has_blocks && !link && h->payload_len != 0 && !status &&
        !(nonce && h->payload_len == GOSSIP_NONCE_BYTES))
        return S_BAD("%zu trailing bytes after the last block", (size_t)h->payload_len);
    if (status && (gossip_msg_hello_status(buf, len) & ~(uint64_t)GOSSIP_HELLO_JOIN))
        return S_BAD("HELLO_ACK from rank %u has unknown status bits 0x%016llx", h->sender,
                     (unsigned long long)gossip_msg_hello_status(buf, len));
    return 0;
}

int gossip_msg_decode_state(const uint8_t *buf, size_t len, gossip_header *h,
                            gossip_state_chunk *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (gossip_msg_decode_header(buf, len, NULL, h, err, errlen) != 0)
        return -1;
    return gossip_msg_decode_state_chunk(buf, len, h, c, err, errlen);
}

int gossip_msg_decode_state_chunk(const uint8_t *buf, size_t len, const gossip_header *h,
                                  gossip_state_chunk *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (h->kind != GOSSIP_MSG_STATE)
        return S_BAD("a %s message where a STATE was expected", s_kind_name(h->kind));
    s_rd r = { buf, len, GOSSIP_HEADER_BYTES };
    c->offset = s_le(&r, 8);
    c->total = s_le(&r, 8);
    c->crc = (uint32_t)s_le(&r, 4);
    c->data = buf + GOSSIP_HEADER_BYTES + GOSSIP_STATE_HDR_BYTES;
    c->len = len - GOSSIP_HEADER_BYTES - GOSSIP_STATE_HDR_BYTES;
    return 0;
}

uint64_t gossip_msg_hello_nonce(const uint8_t *buf, size_t len)
{
    if (!buf || (len != GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES &&
                 len != GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES + GOSSIP_STATUS_BYTES))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)buf[GOSSIP_HEADER_BYTES + i] << (8 * i);
    return v;
}

int gossip_msg_decode(const uint8_t *buf, size_t len, const nn_arena *layout, gossip_header *h,
                      gossip_payload *out, char *err, size_t errlen)
{
    gossip_header hh;
    if (!h)
        h = &hh;
    if (out)
        out->nblocks = 0;
    if (gossip_msg_decode_header(buf, len, layout, h, err, errlen) != 0)
        return -1;
    return gossip_msg_decode_payload(buf, len, layout, h, out, err, errlen) < 0 ? -1 : 0;
}

int gossip_msg_decode_payload(const uint8_t *buf, size_t len, const nn_arena *layout,
                              const gossip_header *h, gossip_payload *out, char *err, size_t errlen)
{
    if (out)
        out->nblocks = 0;
    /* what gossip_msg_decode_header checks only with a layout */
    uint32_t fp = gossip_layout_fingerprint(layout);
    if (h->fingerprint != fp)
        return S_BAD("layout fingerprint 0x%08x from rank %u differs from ours 0x%08x (different model?)",
                     h->fingerprint, h->sender, fp);
    int has_blocks = h->kind == GOSSIP_MSG_GOSSIP || h->kind == GOSSIP_MSG_RESYNC;
    size_t want = has_blocks ? layout->nviews : 0;
    if (h->nblocks != want)
        return S_BAD("%s message has %u blocks, expected %zu (one per tensor of the layout)",
                     s_kind_name(h->kind), h->nblocks, want);
    if (!(h->flags & GOSSIP_FLAG_DEFLATE))
        return s_decode_blocks(buf, len, layout, h, out, err, errlen);
    /* the payload's inflate stream, kept between messages; a temporary one
     * when validating only */
    gossip_buf tmp = { 0 };
    z_stream tzs, *zs = &tzs;
    if (out && out->zs) {
        zs = out->zs;
        inflateReset(zs);
    } else {
        if (out)
            zs = nn_xcalloc(1, sizeof *zs);
        else
            memset(&tzs, 0, sizeof tzs);
        if (inflateInit2(zs, -15) != Z_OK) {
            if (out)
                free(zs);
            return S_BAD("cannot start inflating (out of memory)");
        }
        if (out)
            out->zs = zs;
    }
    gossip_buf *plain = out ? &out->plain : &tmp;
    int rc = s_inflate(buf, len, gossip_payload_max_bytes(layout), plain, zs, err, errlen);
    if (rc == 0)
        rc = s_decode_blocks(plain->data, plain->len, layout, h, out, err, errlen);
    if (!out)
        inflateEnd(zs);
    gossip_buf_free(&tmp);
    return rc;
}

/* ---- payloads ---------------------------------------------------------- */

void gossip_payload_init(gossip_payload *p, const nn_arena *layout)
{
    memset(p, 0, sizeof *p);
    p->cap_blocks = layout->nviews;
    p->blocks = nn_xcalloc(layout->nviews ? layout->nviews : 1, sizeof *p->blocks);
    p->idx = nn_xcalloc(layout->numel ? layout->numel : 1, sizeof *p->idx);
    p->val = nn_xcalloc(layout->numel ? layout->numel : 1, sizeof *p->val);
    p->cap_vals = layout->numel ? layout->numel : 1;
}

void gossip_payload_copy(gossip_payload *dst, const gossip_payload *src)
{
    size_t total = 0;
    for (size_t b = 0; b < src->nblocks; b++)
        total += src->blocks[b].k;
    if (src->nblocks > dst->cap_blocks) {
        dst->blocks = nn_xrealloc(dst->blocks, src->nblocks * sizeof *dst->blocks);
        dst->cap_blocks = src->nblocks;
    }
    if (total > dst->cap_vals) {
        dst->idx = nn_xrealloc(dst->idx, total * sizeof *dst->idx);
        dst->val = nn_xrealloc(dst->val, total * sizeof *dst->val);
        dst->cap_vals = total;
    }
    dst->hdr = src->hdr;
    dst->nblocks = src->nblocks;
    size_t at = 0;
    for (size_t b = 0; b < src->nblocks; b++) {
        const gossip_block *s = &src->blocks[b];
        gossip_block *d = &dst->blocks[b];
        *d = *s;
        d->val = dst->val + at; /* NULL + 0 when the message carries nothing (deferred) */
        if (s->k)
            memcpy(d->val, s->val, s->k * sizeof *d->val);
        d->idx = s->idx ? dst->idx + at : NULL;
        if (s->idx && s->k)
            memcpy(d->idx, s->idx, s->k * sizeof *d->idx);
        at += s->k;
    }
}

void gossip_payload_free(gossip_payload *p)
{
    free(p->blocks);
    free(p->idx);
    free(p->val);
    gossip_buf_free(&p->plain);
    if (p->zs) {
        inflateEnd(p->zs);
        free(p->zs);
    }
    memset(p, 0, sizeof *p);
}

void gossip_payload_add(const gossip_payload *p, const nn_arena *layout, float *dst)
{
    for (size_t b = 0; b < p->nblocks; b++) {
        const gossip_block *blk = &p->blocks[b];
        float *d = dst + layout->views[b].offset;
        if (blk->idx)
            for (size_t i = 0; i < blk->k; i++)
                d[blk->idx[i]] += blk->val[i];
        else
            for (size_t i = 0; i < blk->k; i++)
                d[i] += blk->val[i];
    }
}

void gossip_payload_sub(const gossip_payload *p, const nn_arena *layout, float *dst)
{
    for (size_t b = 0; b < p->nblocks; b++) {
        const gossip_block *blk = &p->blocks[b];
        float *d = dst + layout->views[b].offset;
        if (blk->idx)
            for (size_t i = 0; i < blk->k; i++)
                d[blk->idx[i]] -= blk->val[i];
        else
            for (size_t i = 0; i < blk->k; i++)
                d[i] -= blk->val[i];
    }
}

void gossip_payload_axpy(const gossip_payload *p, const nn_arena *layout, double alpha, double *dst)
{
    for (size_t b = 0; b < p->nblocks; b++) {
        const gossip_block *blk = &p->blocks[b];
        double *d = dst + layout->views[b].offset;
        if (blk->idx)
            for (size_t i = 0; i < blk->k; i++)
                d[blk->idx[i]] += alpha * blk->val[i];
        else
            for (size_t i = 0; i < blk->k; i++)
                d[i] += alpha * blk->val[i];
    }
}
