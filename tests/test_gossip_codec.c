/* test_gossip_codec — wire format round trips, malformed input, wire sizes.
 *
 * Round trip of every block type (values are the dequantized codes, indices
 * exact); control messages; a corpus of malformed messages, each rejected
 * with a message naming the problem (truncation at every byte, bad magic,
 * version, kind, flags, psi, fingerprint, block count, payload length,
 * trailing bytes, block type, tensor size, index past the tensor, repeated
 * and unsorted indices, NaN/Inf values and scales, negative scale, code
 * -128, k > numel, rice parameter, over-long varint, padding); wire sizes of
 * a 273000-value tensor against the information bound.  The lossless pass
 * (+deflate): round trip of every block type, a message never grows (an
 * incompressible payload stays plain), and malformed deflated messages
 * (truncated stream, wrong plain length either way, a zip bomb, a length
 * beyond the layout's bound, a flag on a control message, a corrupt stream,
 * bytes after the stream, a payload not smaller than its plain form, a bad
 * block inside) are each rejected with a message saying so.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_compress.h"
#include "nn/nn_core.h"

/* Layout: 4 tensors, one per block type in the mixed message. */
static void s_layout(nn_arena *L)
{
    nn_arena_init(L);
    nn_arena_add(L, "t0.dense_f32", 1, (int[]){ 37 });
    nn_arena_add(L, "t1.dense_q8", 2, (int[]){ 20, 30 });
    nn_arena_add(L, "t2.sparse_f32", 1, (int[]){ 300 });
    nn_arena_add(L, "t3.sparse_q8", 1, (int[]){ 1100 });
}

typedef struct {
    uint32_t idx2[5], idx3[600];
    float    f0[37], f2[5], sc1[2], sc3[2];
    int8_t   q1[600], q3[600];
    gossip_cblock b[4];
} s_msgdata;

static void s_fill(s_msgdata *m)
{
    nn_rng r;
    nn_rng_seed(&r, 4);
    for (int i = 0; i < 37; i++)
        m->f0[i] = nn_rng_normal(&r);
    for (int i = 0; i < 600; i++) {
        m->q1[i] = (int8_t)((int)nn_rng_below(&r, 255) - 127);
        m->q3[i] = (int8_t)((int)nn_rng_below(&r, 255) - 127);
    }
    m->sc1[0] = 0.5f;
    m->sc1[1] = 0.25f;
    m->sc3[0] = 1e-3f;
    m->sc3[1] = 0.0f;
    uint32_t i2[5] = { 0, 1, 17, 200, 299 };
    memcpy(m->idx2, i2, sizeof i2);
    for (int i = 0; i < 5; i++)
        m->f2[i] = (float)i - 2.5f;
    for (int i = 0; i < 600; i++)
        m->idx3[i] = (uint32_t)(i + (i * 7) / 9); /* increasing, < 1100 */
    gossip_cblock b[4] = {
        { GOSSIP_BLK_DENSE_F32, 37, 37, NULL, m->f0, NULL, NULL },
        { GOSSIP_BLK_DENSE_Q8, 600, 600, NULL, NULL, m->q1, m->sc1 },
        { GOSSIP_BLK_SPARSE_F32, 300, 5, m->idx2, m->f2, NULL, NULL },
        { GOSSIP_BLK_SPARSE_Q8, 1100, 600, m->idx3, NULL, m->q3, m->sc3 },
    };
    memcpy(m->b, b, sizeof b);
}

static gossip_header s_hdr(const nn_arena *L)
{
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_GOSSIP, GOSSIP_FLAG_PUSH_SUM, 3, 123456789012ULL,
                        0.75, gossip_layout_fingerprint(L), 0, 0, 0x89abcdefu };
    return h;
}

static void test_roundtrip_all_blocks(void **state)
{
    (void)state;
    nn_arena L;
    s_layout(&L);
    s_msgdata m;
    s_fill(&m);
    gossip_header h = s_hdr(&L), g;
    gossip_buf buf = { 0 };
    size_t len = gossip_msg_encode(&h, m.b, 4, &buf);
    assert_int_equal(len, buf.len);
    gossip_payload p;
    gossip_payload_init(&p, &L);
    char err[512];
    /* validate-only, then full */
    assert_int_equal(gossip_msg_decode(buf.data, len, &L, &g, NULL, err, sizeof err), 0);
    assert_int_equal(gossip_msg_decode(buf.data, len, &L, &g, &p, err, sizeof err), 0);
    assert_int_equal(g.kind, GOSSIP_MSG_GOSSIP);
    assert_int_equal(g.sender, 3);
    assert_true(g.iter == 123456789012ULL);
    assert_true(g.psi == 0.75);
    assert_int_equal(g.flags, GOSSIP_FLAG_PUSH_SUM);
    assert_int_equal(g.payload_len, len - GOSSIP_HEADER_BYTES);
    assert_int_equal(g.step_us, 0x89abcdefu);
    assert_int_equal(p.nblocks, 4);
    assert_memory_equal(p.blocks[0].val, m.f0, sizeof m.f0);
    assert_null(p.blocks[0].idx);
    for (int i = 0; i < 600; i++) {
        assert_true(p.blocks[1].val[i] == gossip_dequant(m.q1[i], m.sc1[i / GOSSIP_QBLOCK]));
        assert_true(p.blocks[3].val[i] == gossip_dequant(m.q3[i], m.sc3[i / GOSSIP_QBLOCK]));
    }
    assert_int_equal(p.blocks[2].k, 5);
    assert_memory_equal(p.blocks[2].idx, m.idx2, sizeof m.idx2);
    assert_memory_equal(p.blocks[2].val, m.f2, sizeof m.f2);
    assert_int_equal(p.blocks[3].k, 600);
    assert_memory_equal(p.blocks[3].idx, m.idx3, sizeof m.idx3);
    /* payload_add applies exactly these values */
    float *dst = nn_xcalloc(L.numel, sizeof *dst);
    gossip_payload_add(&p, &L, dst);
    assert_true(dst[L.views[2].offset + 17] == m.f2[2]);
    assert_true(dst[L.views[2].offset + 18] == 0.0f);
    assert_true(dst[L.views[3].offset + m.idx3[10]] == p.blocks[3].val[10]);
    free(dst);
    /* in two halves (header, then payload): the same payload */
    len = gossip_msg_encode(&h, m.b, 4, &buf);
    gossip_payload p2;
    gossip_payload_init(&p2, &L);
    assert_int_equal(gossip_msg_decode_header(buf.data, len, NULL, &g, err, sizeof err), 0);
    assert_int_equal(gossip_msg_decode_payload(buf.data, len, &L, &g, &p2, err, sizeof err), 0);
    assert_int_equal(p2.nblocks, 4);
    for (size_t b = 0; b < 4; b++) {
        assert_int_equal(p2.blocks[b].k, p.blocks[b].k);
        assert_memory_equal(p2.blocks[b].val, p.blocks[b].val, p.blocks[b].k * sizeof(float));
    }
    gossip_payload_free(&p2);
    /* control messages */
    len = gossip_msg_encode_control(GOSSIP_MSG_HELLO, 5, 0, gossip_layout_fingerprint(&L), &buf);
    assert_int_equal(len, GOSSIP_HEADER_BYTES);
    assert_int_equal(gossip_msg_decode(buf.data, len, &L, &g, &p, err, sizeof err), 0);
    assert_int_equal(g.kind, GOSSIP_MSG_HELLO);
    assert_int_equal(p.nblocks, 0);
    /* the transport's dispatch reads the header alone, without a layout:
     * the fingerprint is then the caller's to compare */
    len = gossip_msg_encode_control(GOSSIP_MSG_PING, 2, 77, 0xdeadbeefu, &buf);
    assert_int_equal(gossip_msg_decode_header(buf.data, len, NULL, &g, err, sizeof err), 0);
    assert_true(g.kind == GOSSIP_MSG_PING && g.sender == 2 && g.iter == 77);
    assert_true(g.fingerprint == 0xdeadbeefu);
    assert_int_equal(gossip_msg_decode_header(buf.data, len, &L, &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "layout fingerprint"));
    assert_int_equal(gossip_msg_decode_header(buf.data, 39, NULL, &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    /* ACK: a header alone, its iteration the acknowledged GOSSIP's; a
     * payload or the kept flag on it is refused */
    len = gossip_msg_encode_control(GOSSIP_MSG_ACK, 3, 1234567, 0x1234u, &buf);
    assert_int_equal(gossip_msg_decode_header(buf.data, len, NULL, &g, err, sizeof err), 0);
    assert_true(g.kind == GOSSIP_MSG_ACK && g.sender == 3 && g.iter == 1234567);
    buf.data[GOSSIP_HDR_FLAGS_AT] |= (uint8_t)(GOSSIP_FLAG_KEPT | GOSSIP_FLAG_PUSH_SUM);
    assert_int_equal(gossip_msg_decode_header(buf.data, len, NULL, &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "kept flag"));
    gossip_payload_free(&p);
    gossip_buf_free(&buf);
    nn_arena_free(&L);
}

/* Expects rejection with `what` in the message. */
static void s_reject(const uint8_t *b, size_t len, const nn_arena *L, const char *what, const char *label)
{
    char err[512] = "";
    gossip_payload p;
    gossip_payload_init(&p, L);
    int rc1 = gossip_msg_decode(b, len, L, NULL, NULL, err, sizeof err);
    char err2[512] = "";
    int rc2 = gossip_msg_decode(b, len, L, NULL, &p, err2, sizeof err2);
    if (rc1 != -1 || rc2 != -1)
        fail_msg("%s: accepted", label);
    if (strcmp(err, err2))
        fail_msg("%s: validate-only says '%s', full decode '%s'", label, err, err2);
    if (what && !strstr(err, what))
        fail_msg("%s: error '%s' lacks '%s'", label, err, what);
    /* in two halves, as a transport dispatching on the header: refused
     * too, by the same message once the header passes, and classed
     * non-finite exactly when the message names a NaN or Inf */
    gossip_header h;
    char err3[512] = "";
    if (gossip_msg_decode_header(b, len, NULL, &h, err3, sizeof err3) == 0) {
        int rc3 = gossip_msg_decode_payload(b, len, L, &h, &p, err3, sizeof err3);
        if (rc3 >= 0)
            fail_msg("%s: accepted in two halves", label);
        if (strcmp(err, err3))
            fail_msg("%s: full decode says '%s', in two halves '%s'", label, err, err3);
        int nonfinite = strstr(err, " is NaN") || strstr(err, " is Inf");
        if ((rc3 == GOSSIP_DECODE_NONFINITE) != nonfinite)
            fail_msg("%s: '%s' returned %d", label, err, rc3);
    }
    gossip_payload_free(&p);
}

static void s_encode_with(gossip_buf *buf, const nn_arena *L, gossip_cblock *b, size_t nb)
{
    gossip_header h = s_hdr(L);
    gossip_msg_encode(&h, b, nb, buf);
}

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* 2000 copies of ok[0..len) into b with 1..maxflips random bits of the
 * payload flipped: decoding never crashes (whatever it says). */
static void s_flip_bits(const uint8_t *ok, size_t len, uint8_t *b, const nn_arena *L, uint64_t seed,
                        int maxflips)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (int t = 0; t < 2000; t++) {
        memcpy(b, ok, len);
        int flips = 1 + (int)nn_rng_below(&r, (uint32_t)maxflips);
        for (int f = 0; f < flips; f++)
            b[GOSSIP_HEADER_BYTES + nn_rng_below(&r, (uint32_t)(len - GOSSIP_HEADER_BYTES))] ^= (uint8_t)(1u << nn_rng_below(&r, 8));
        char err[512];
        (void)gossip_msg_decode(b, len, L, NULL, NULL, err, sizeof err);
    }
}

static void test_malformed(void **state)
{
    (void)state;
    nn_arena L;
    s_layout(&L);
    s_msgdata m;
    s_fill(&m);
    gossip_buf buf = { 0 };
    s_encode_with(&buf, &L, m.b, 4);
    size_t len = buf.len;
    uint8_t *ok = nn_xmalloc(len + 16), *b = nn_xmalloc(len + 16);
    memcpy(ok, buf.data, len);

    /* truncated at every byte position */
    for (size_t cut = 0; cut < len; cut++) {
        char label[64];
        snprintf(label, sizeof label, "truncated to %zu of %zu", cut, len);
        s_reject(ok, cut, &L, cut < GOSSIP_HEADER_BYTES ? "truncated" : "payload length", label);
    }
    /* truncated with a consistent payload length field: the block parser
     * must notice */
    for (size_t cut = GOSSIP_HEADER_BYTES; cut < len; cut += 7) {
        memcpy(b, ok, cut);
        s_put32(b + 36, (uint32_t)(cut - GOSSIP_HEADER_BYTES));
        s_reject(b, cut, &L, NULL, "truncated, length patched");
    }
#define MUTATE(label, what, stmt)                 \
    do {                                          \
        memcpy(b, ok, len);                       \
        size_t blen = len;                        \
        stmt;                                     \
        s_reject(b, blen, &L, what, label);       \
    } while (0)
    MUTATE("magic", "magic", b[0] ^= 1);
    MUTATE("version", "version", b[4] = GOSSIP_VERSION + 1);
    MUTATE("version 1", "version", b[4] = 1);
    MUTATE("kind 0", "kind", b[5] = 0);
    MUTATE("kind 14", "kind", b[5] = GOSSIP_MSG_LAST + 1);
    MUTATE("flags", "flags", b[6] = 0x80);
    MUTATE("psi NaN", "psi", { double d = NAN; uint64_t u; memcpy(&u, &d, 8); for (int i = 0; i < 8; i++) b[20 + i] = (uint8_t)(u >> (8 * i)); });
    MUTATE("psi Inf", "psi", { double d = INFINITY; uint64_t u; memcpy(&u, &d, 8); for (int i = 0; i < 8; i++) b[20 + i] = (uint8_t)(u >> (8 * i)); });
    MUTATE("psi 0", "psi", { for (int i = 0; i < 8; i++) b[20 + i] = 0; });
    MUTATE("psi without push-sum", "push-sum", b[6] = 0);
    MUTATE("kept without push-sum", "kept flag", b[6] = GOSSIP_FLAG_KEPT);
    MUTATE("kept on a RESYNC", "kept flag", { b[5] = GOSSIP_MSG_RESYNC; b[6] |= GOSSIP_FLAG_KEPT; });
    { /* the kept flag on a push-sum GOSSIP message is valid */
        gossip_header kh;
        char kerr[256];
        memcpy(b, ok, len);
        b[6] |= GOSSIP_FLAG_KEPT;
        if (gossip_msg_decode(b, len, &L, &kh, NULL, kerr, sizeof kerr) != 0)
            fail_msg("push-sum GOSSIP with the kept flag refused: %s", kerr);
        assert_int_equal(kh.flags, GOSSIP_FLAG_PUSH_SUM | GOSSIP_FLAG_KEPT);
    }
    MUTATE("fingerprint", "fingerprint", b[28] ^= 1);
    MUTATE("too many blocks", "blocks", b[32] = 5);
    MUTATE("too few blocks", "blocks", b[32] = 3);
    MUTATE("HELLO with blocks", "HELLO", b[5] = GOSSIP_MSG_HELLO);
    MUTATE("payload length", "payload length", b[36] ^= 1);
    MUTATE("step time on a RESYNC", "step time", b[5] = GOSSIP_MSG_RESYNC);
    MUTATE("ahead on a GOSSIP", "ahead flag", b[6] |= GOSSIP_FLAG_AHEAD);
    MUTATE("trailing byte", "trailing", { b[len] = 0; blen = len + 1; s_put32(b + 36, (uint32_t)(blen - GOSSIP_HEADER_BYTES)); });
    MUTATE("block type", "unknown block type", b[GOSSIP_HEADER_BYTES] = 7);
    MUTATE("tensor size", "tensor size", b[GOSSIP_HEADER_BYTES + 1] = 36);
    MUTATE("dense f32 NaN", "NaN", { float f = NAN; memcpy(b + GOSSIP_HEADER_BYTES + 2 + 4 * 5, &f, 4); });
    MUTATE("dense f32 Inf", "Inf", { float f = -INFINITY; memcpy(b + GOSSIP_HEADER_BYTES + 2 + 4 * 36, &f, 4); });
    /* block 1 starts after block 0: 1 type + 1 varint + 37*4 */
    size_t b1 = GOSSIP_HEADER_BYTES + 2 + 37 * 4;
    /* block 1: type, varint 600 (2 bytes), 2 scales, 600 codes */
    MUTATE("scale NaN", "scale 1 is NaN", { float f = NAN; memcpy(b + b1 + 3 + 4, &f, 4); });
    MUTATE("scale Inf", "scale 0 is Inf", { float f = INFINITY; memcpy(b + b1 + 3, &f, 4); });
    MUTATE("scale negative", "out of range", { float f = -1.0f; memcpy(b + b1 + 3, &f, 4); });
    MUTATE("scale huge", "out of range", { float f = FLT_MAX; memcpy(b + b1 + 3, &f, 4); });
    MUTATE("code -128", "-128", b[b1 + 3 + 8 + 10] = 0x80);
    MUTATE("over-long varint", "varint", { b[b1 + 1] = 0xff; b[b1 + 2] = 0xff; b[b1 + 3] = 0xff; b[b1 + 4] = 0xff; b[b1 + 5] = 0xff; });
    gossip_buf_free(&buf);

    /* crafted blocks: the encoder writes whatever it is given */
    gossip_buf cb = { 0 };
    s_msgdata c;
#define CRAFT(label, what, stmt)                        \
    do {                                                \
        s_fill(&c);                                     \
        stmt;                                           \
        s_encode_with(&cb, &L, c.b, 4);                 \
        s_reject(cb.data, cb.len, &L, what, label);     \
    } while (0)
    CRAFT("index past the tensor", "past the tensor", c.idx2[4] = 300);
    CRAFT("index far past the tensor", "past the tensor", c.idx2[4] = 100000);
    CRAFT("repeated index", "repeats", c.idx2[2] = 1);
    CRAFT("unsorted index", "past the tensor", { c.idx2[2] = 250; c.idx2[3] = 200; });
    CRAFT("sparse NaN", "NaN", c.f2[3] = NAN);
    CRAFT("sparse q8 scale Inf", "Inf", c.sc3[1] = INFINITY);
    CRAFT("sparse q8 code -128", "-128", c.q3[599] = -128);
    CRAFT("wrong tensor size", "tensor size", c.b[2].numel = 299);
    /* k > numel */
    {
        s_fill(&c);
        s_encode_with(&cb, &L, c.b, 4);
        /* block 2 offset: after block 1 (type, 2-byte varint, 8 + 600) */
        size_t b2 = b1 + 3 + 8 + 600;
        assert_int_equal(cb.data[b2], GOSSIP_BLK_SPARSE_F32);
        memcpy(b, cb.data, cb.len);
        b[b2 + 3] = 0xff; /* k (at b2+3, after the 2-byte numel) runs into the rice byte: 127 + 128*b > 300 */
        s_reject(b, cb.len, &L, "values for a tensor", "k > numel");
        memcpy(b, cb.data, cb.len);
        b[b2 + 4] = 40;
        s_reject(b, cb.len, &L, "rice parameter", "rice parameter 40");
        memcpy(b, cb.data, cb.len);
        b[b2 + 5] += 1; /* index stream longer by a byte than its indices */
        s_reject(b, cb.len, &L, NULL, "index stream length");
    }
    gossip_buf_free(&cb);
    /* random garbage after a valid header never crashes */
    s_flip_bits(ok, len, b, &L, 77, 4);
    free(ok);
    free(b);
    nn_arena_free(&L);
}

/* log2(binomial(d, k)) in double. */
static double s_log2_binom(double d, double k)
{
    return (lgamma(d + 1) - lgamma(k + 1) - lgamma(d - k + 1)) / log(2.0);
}

static void test_wire_sizes(void **state)
{
    (void)state;
    const size_t d = 273000;
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "w", 1, (int[]){ (int)d });
    nn_arena_alloc(&L);
    nn_rng r;
    nn_rng_seed(&r, 5);
    for (size_t i = 0; i < d; i++)
        L.data[i] = nn_rng_normal(&r);
    gossip_compressed out;
    gossip_compressed_init(&out, &L);
    gossip_compressor c;
    char err[256];
    gossip_buf buf = { 0 };
    gossip_header h = s_hdr(&L);

    assert_int_equal(gossip_compressor_parse(&c, "topk:0.01+q8", err, sizeof err), 0);
    assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), 0);
    size_t len = gossip_msg_encode(&h, out.blocks, 1, &buf);
    double k = 2730, bound_bits = k * 8 + s_log2_binom((double)d, k);
    double ratio = (double)(len - GOSSIP_HEADER_BYTES) * 8.0 / bound_bits;
    printf("  sparse q8 d=%zu k=2730: block %zu bytes, bound %.0f bytes (k*8 + log2 C(d,k) bits), ratio %.4f\n",
           d, len - GOSSIP_HEADER_BYTES, bound_bits / 8, ratio);
    assert_true(ratio <= 1.10);
    assert_int_equal(gossip_msg_decode(buf.data, len, &L, NULL, NULL, err, sizeof err), 0);
    /* the index stream alone vs log2 C(d,k) */
    int rb = gossip_rice_best(out.blocks[0].idx, 2730);
    double ibits = (double)gossip_rice_bits(out.blocks[0].idx, 2730, rb);
    printf("  rice b=%d: index stream %.0f bits, log2 C(d,k) = %.0f bits, ratio %.4f\n",
           rb, ibits, s_log2_binom((double)d, k), ibits / s_log2_binom((double)d, k));

    assert_int_equal(gossip_compressor_parse(&c, "q8", err, sizeof err), 0);
    assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), 0);
    len = gossip_msg_encode(&h, out.blocks, 1, &buf);
    printf("  dense q8 d=%zu: message %zu bytes, %.4f x d\n", d, len, (double)len / d);
    assert_true((double)len <= 1.01 * d);

    assert_int_equal(gossip_compressor_parse(&c, "identity", err, sizeof err), 0);
    assert_int_equal(gossip_compress(&c, &L, L.data, &r, &out, err, sizeof err), 0);
    len = gossip_msg_encode(&h, out.blocks, 1, &buf);
    assert_int_equal(len, GOSSIP_HEADER_BYTES + 1 + 3 + 4 * d);
    gossip_buf_free(&buf);
    gossip_compressed_free(&out);
    nn_arena_free(&L);
}

/* Rice parameter choice and sizes on edge cases: k = numel (all indices),
 * k = 1 at the last position, empty sparse block. */
static void test_rice_edges(void **state)
{
    (void)state;
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "a", 1, (int[]){ 1000 });
    nn_arena_add(&L, "b", 1, (int[]){ 1000 });
    nn_arena_add(&L, "c", 1, (int[]){ 1000 });
    uint32_t all[1000], last = 999;
    float v[1000];
    for (int i = 0; i < 1000; i++) {
        all[i] = (uint32_t)i;
        v[i] = (float)i;
    }
    gossip_cblock b[3] = {
        { GOSSIP_BLK_SPARSE_F32, 1000, 1000, all, v, NULL, NULL },
        { GOSSIP_BLK_SPARSE_F32, 1000, 1, &last, v, NULL, NULL },
        { GOSSIP_BLK_SPARSE_F32, 1000, 0, all, v, NULL, NULL },
    };
    gossip_buf buf = { 0 };
    gossip_header h = s_hdr(&L);
    size_t len = gossip_msg_encode(&h, b, 3, &buf);
    gossip_payload p;
    gossip_payload_init(&p, &L);
    char err[256];
    assert_int_equal(gossip_msg_decode(buf.data, len, &L, NULL, &p, err, sizeof err), 0);
    assert_memory_equal(p.blocks[0].idx, all, sizeof all);
    assert_int_equal(p.blocks[1].k, 1);
    assert_int_equal(p.blocks[1].idx[0], 999);
    assert_int_equal(p.blocks[2].k, 0);
    /* 1000 consecutive indices: gaps of 1 -> b = 0, 2 bits each */
    assert_int_equal(gossip_rice_best(all, 1000), 0);
    gossip_payload_free(&p);
    gossip_buf_free(&buf);
    nn_arena_free(&L);
}

/* ---- the lossless pass ---------------------------------------------------- */

/* One tensor of 2000 values; one block of `type` with compressible content
 * (repeating values and codes, every third index). */
static void s_one_block(int type, nn_arena *L, gossip_buf *buf, uint32_t *idx, float *f, int8_t *q,
                        float *sc)
{
    nn_arena_init(L);
    nn_arena_add(L, "t", 1, (int[]){ 2000 });
    int sparse = type == GOSSIP_BLK_SPARSE_F32 || type == GOSSIP_BLK_SPARSE_Q8;
    uint32_t k = sparse ? 666 : 2000;
    for (uint32_t i = 0; i < k; i++) {
        idx[i] = 3 * i;
        f[i] = 0.25f * (float)(i % 5) - 0.5f;
        q[i] = (int8_t)((int)(i % 9) - 4);
    }
    sc[0] = 0.01f;
    sc[1] = 0.02f;
    sc[2] = 0.03f;
    sc[3] = 0.04f;
    gossip_cblock b = { (uint8_t)type, 2000, k, sparse ? idx : NULL,
                        (type == GOSSIP_BLK_DENSE_F32 || type == GOSSIP_BLK_SPARSE_F32) ? f : NULL,
                        (type == GOSSIP_BLK_DENSE_Q8 || type == GOSSIP_BLK_SPARSE_Q8) ? q : NULL,
                        (type == GOSSIP_BLK_DENSE_Q8 || type == GOSSIP_BLK_SPARSE_Q8) ? sc : NULL };
    gossip_header h = s_hdr(L);
    gossip_msg_encode(&h, &b, 1, buf);
}

/* Both messages decode, to the same blocks. */
static void s_same_decode(const gossip_buf *a, const gossip_buf *b, const nn_arena *L)
{
    gossip_payload pa, pb;
    gossip_payload_init(&pa, L);
    gossip_payload_init(&pb, L);
    char err[512];
    gossip_header ha, hb;
    if (gossip_msg_decode(a->data, a->len, L, &ha, &pa, err, sizeof err) < 0)
        fail_msg("plain: %s", err);
    if (gossip_msg_decode(b->data, b->len, L, &hb, &pb, err, sizeof err) < 0)
        fail_msg("deflated: %s", err);
    assert_int_equal(gossip_msg_decode(b->data, b->len, L, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(ha.flags | GOSSIP_FLAG_DEFLATE, hb.flags | GOSSIP_FLAG_DEFLATE);
    assert_true(ha.iter == hb.iter && ha.psi == hb.psi && ha.sender == hb.sender);
    assert_int_equal(pa.nblocks, pb.nblocks);
    for (size_t i = 0; i < pa.nblocks; i++) {
        assert_int_equal(pa.blocks[i].type, pb.blocks[i].type);
        assert_int_equal(pa.blocks[i].k, pb.blocks[i].k);
        assert_memory_equal(pa.blocks[i].val, pb.blocks[i].val, pa.blocks[i].k * sizeof(float));
        if (pa.blocks[i].idx)
            assert_memory_equal(pa.blocks[i].idx, pb.blocks[i].idx, pa.blocks[i].k * sizeof(uint32_t));
        else
            assert_null(pb.blocks[i].idx);
    }
    gossip_payload_free(&pa);
    gossip_payload_free(&pb);
}

static void test_deflate_roundtrip(void **state)
{
    (void)state;
    static uint32_t idx[2000];
    static float f[2000];
    static int8_t q[2000];
    float sc[4];
    gossip_buf plain = { 0 }, z = { 0 };
    gossip_deflater scratch = { 0 };
    for (int type = GOSSIP_BLK_DENSE_F32; type <= GOSSIP_BLK_SPARSE_Q8; type++) {
        nn_arena L;
        s_one_block(type, &L, &plain, idx, f, q, sc);
        gossip_buf_set(&z, plain.data, plain.len);
        size_t len = gossip_msg_deflate(&z, &scratch, 6);
        printf("  deflate block type %d: %zu -> %zu bytes\n", type, plain.len, len);
        assert_int_equal(len, z.len);
        assert_true(len < plain.len);
        assert_true(z.data[6] & GOSSIP_FLAG_DEFLATE);
        assert_memory_equal(z.data, plain.data, 6); /* magic, version, kind */
        assert_memory_equal(z.data + 8, plain.data + 8, 28); /* sender .. block count */
        s_same_decode(&plain, &z, &L);
        s_same_decode(&plain, &plain, &L);
        nn_arena_free(&L);
    }
    /* the mixed message of four block types, whatever deflate makes of it */
    nn_arena L;
    s_layout(&L);
    s_msgdata m;
    s_fill(&m);
    gossip_header h = s_hdr(&L);
    gossip_msg_encode(&h, m.b, 4, &plain);
    gossip_buf_set(&z, plain.data, plain.len);
    gossip_msg_deflate(&z, &scratch, 9);
    assert_true(z.len <= plain.len);
    s_same_decode(&plain, &z, &L);
    nn_arena_free(&L);
    gossip_buf_free(&plain);
    gossip_buf_free(&z);
    gossip_deflater_free(&scratch);
}

/* Dense f32 blocks of n values: random finite bit patterns with a fraction
 * `zeros` of zeros. */
static void s_random_dense(gossip_buf *buf, const nn_arena *L, float *v, size_t n, double zeros, nn_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        do
            u = (uint32_t)nn_rng_next(r);
        while (((u >> 23) & 0xff) == 0xff); /* NaN/Inf */
        memcpy(&v[i], &u, 4);
        if (nn_rng_uniform(r) < zeros)
            v[i] = 0.0f;
    }
    gossip_cblock b = { GOSSIP_BLK_DENSE_F32, (uint32_t)n, (uint32_t)n, NULL, v, NULL, NULL };
    gossip_header h = s_hdr(L);
    gossip_msg_encode(&h, &b, 1, buf);
}

static void test_deflate_never_grows(void **state)
{
    (void)state;
    enum { N = 3000 };
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "t", 1, (int[]){ N });
    static float v[N];
    nn_rng r;
    nn_rng_seed(&r, 8);
    gossip_buf plain = { 0 }, z = { 0 };
    gossip_deflater scratch = { 0 };
    /* incompressible: stays plain, byte for byte */
    s_random_dense(&plain, &L, v, N, 0.0, &r);
    gossip_buf_set(&z, plain.data, plain.len);
    assert_int_equal(gossip_msg_deflate(&z, &scratch, 6), plain.len);
    assert_memory_equal(z.data, plain.data, plain.len);
    /* from incompressible to mostly zeros: never larger, decodes the same */
    int shrunk = 0;
    for (int t = 0; t <= 20; t++) {
        s_random_dense(&plain, &L, v, N, t / 20.0, &r);
        gossip_buf_set(&z, plain.data, plain.len);
        gossip_msg_deflate(&z, &scratch, 1 + t % 9);
        assert_true(z.len <= plain.len);
        if (z.len < plain.len) {
            assert_true(z.data[6] & GOSSIP_FLAG_DEFLATE);
            shrunk++;
        } else {
            assert_memory_equal(z.data, plain.data, plain.len);
        }
        s_same_decode(&plain, &z, &L);
    }
    assert_true(shrunk > 10);
    /* tiny payloads cannot win */
    nn_arena T;
    nn_arena_init(&T);
    nn_arena_add(&T, "one", 1, (int[]){ 1 });
    float one = 0.0f;
    gossip_cblock b = { GOSSIP_BLK_DENSE_F32, 1, 1, NULL, &one, NULL, NULL };
    gossip_header h = s_hdr(&T);
    gossip_msg_encode(&h, &b, 1, &z);
    assert_int_equal(gossip_msg_deflate(&z, &scratch, 6), GOSSIP_HEADER_BYTES + 6);
    nn_arena_free(&T);
    nn_arena_free(&L);
    gossip_buf_free(&plain);
    gossip_buf_free(&z);
    gossip_deflater_free(&scratch);
}

/* Raw deflate (no zlib header) of in[0..n) into out. */
static size_t s_raw_deflate(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    size_t len = zs.total_out;
    deflateEnd(&zs);
    return len;
}

/* A deflated message: the header of hdr40 with the flag, payload
 * u32 plain_len + stream. */
static size_t s_wrap(uint8_t *out, const uint8_t *hdr40, uint32_t plain_len, const uint8_t *stream,
                     size_t slen)
{
    memcpy(out, hdr40, GOSSIP_HEADER_BYTES);
    out[6] |= GOSSIP_FLAG_DEFLATE;
    s_put32(out + 36, (uint32_t)(4 + slen));
    s_put32(out + GOSSIP_HEADER_BYTES, plain_len);
    memcpy(out + GOSSIP_HEADER_BYTES + 4, stream, slen);
    return GOSSIP_HEADER_BYTES + 4 + slen;
}

static void test_deflate_malformed(void **state)
{
    (void)state;
    static uint32_t idx[2000];
    static float f[2000];
    static int8_t q[2000];
    float sc[4];
    nn_arena L;
    gossip_buf plain = { 0 }, z = { 0 };
    gossip_deflater scratch = { 0 };
    s_one_block(GOSSIP_BLK_SPARSE_Q8, &L, &plain, idx, f, q, sc);
    gossip_buf_set(&z, plain.data, plain.len);
    size_t len = gossip_msg_deflate(&z, &scratch, 6);
    assert_true(z.data[6] & GOSSIP_FLAG_DEFLATE);
    uint32_t R = (uint32_t)(plain.len - GOSSIP_HEADER_BYTES);
    const uint8_t *stream = z.data + GOSSIP_HEADER_BYTES + 4;
    size_t slen = len - GOSSIP_HEADER_BYTES - 4;
    size_t cap = 4u << 20;
    uint8_t *b = nn_xmalloc(cap), *tmp = nn_xmalloc(cap);
    size_t blen;

    /* cut anywhere: refused (length field as is, and patched) */
    for (size_t cut = 0; cut < len; cut++) {
        char label[96];
        snprintf(label, sizeof label, "deflated, truncated to %zu of %zu", cut, len);
        s_reject(z.data, cut, &L, cut < GOSSIP_HEADER_BYTES ? "truncated" : "payload length", label);
        if (cut >= GOSSIP_HEADER_BYTES) {
            memcpy(b, z.data, cut);
            s_put32(b + 36, (uint32_t)(cut - GOSSIP_HEADER_BYTES));
            s_reject(b, cut, &L, cut < GOSSIP_HEADER_BYTES + 5 ? "too short" : NULL, label);
        }
    }
    /* the stream cut short, length consistent */
    blen = s_wrap(b, z.data, R, stream, slen / 2);
    s_reject(b, blen, &L, "truncated", "stream cut in half");
    /* declared plain length one more / one less than the stream gives */
    blen = s_wrap(b, z.data, R + 1, stream, slen);
    s_reject(b, blen, &L, "the payload declares", "plain length + 1");
    blen = s_wrap(b, z.data, R - 1, stream, slen);
    s_reject(b, blen, &L, "more than the", "plain length - 1");
    /* beyond the layout's bound: refused before inflating */
    size_t bound = gossip_payload_max_bytes(&L);
    blen = s_wrap(b, z.data, (uint32_t)bound + 1, stream, slen);
    s_reject(b, blen, &L, "refused before inflating", "plain length beyond the bound");
    blen = s_wrap(b, z.data, 0xffffffffu, stream, slen);
    s_reject(b, blen, &L, "refused before inflating", "plain length 4 GiB");
    /* a zip bomb: 4 MiB of zeros in a few KB, declaring the bound */
    memset(tmp, 0, cap);
    static uint8_t bomb[1 << 16];
    size_t bl = s_raw_deflate(tmp, cap, bomb, sizeof bomb);
    assert_true(bl < bound);
    blen = s_wrap(b, z.data, (uint32_t)bound, bomb, bl);
    s_reject(b, blen, &L, "more than the", "zip bomb");
    /* the flag on control messages */
    gossip_buf c = { 0 };
    gossip_msg_encode_control(GOSSIP_MSG_HELLO, 1, 0, gossip_layout_fingerprint(&L), &c);
    c.data[6] |= GOSSIP_FLAG_DEFLATE;
    s_reject(c.data, c.len, &L, "deflate flag", "HELLO with the deflate flag");
    blen = s_wrap(b, c.data, R, stream, slen);
    s_reject(b, blen, &L, "deflate flag", "HELLO with a deflated payload");
    gossip_msg_encode_control(GOSSIP_MSG_BYE, 1, 0, gossip_layout_fingerprint(&L), &c);
    c.data[6] |= GOSSIP_FLAG_DEFLATE;
    s_reject(c.data, c.len, &L, "BYE message has the deflate flag", "BYE with the deflate flag");
    gossip_buf_free(&c);
    /* corrupt stream: a reserved block type */
    memcpy(tmp, stream, slen);
    tmp[0] = 0xff;
    blen = s_wrap(b, z.data, R, tmp, slen);
    s_reject(b, blen, &L, "corrupt deflate stream", "reserved block type");
    /* bytes after the end of the stream */
    memcpy(tmp, stream, slen);
    tmp[slen] = 0;
    blen = s_wrap(b, z.data, R, tmp, slen + 1);
    s_reject(b, blen, &L, "follow the end", "byte after the stream");
    /* a payload not smaller than its plain form, and one too short */
    blen = s_wrap(b, z.data, (uint32_t)(slen + 4), stream, slen);
    s_reject(b, blen, &L, "not smaller", "not smaller");
    blen = s_wrap(b, z.data, R, stream, 0);
    s_reject(b, blen, &L, "too short", "empty stream");
    /* a bad block inside a good stream: the plain checks apply */
    memcpy(tmp, plain.data, plain.len);
    tmp[GOSSIP_HEADER_BYTES] = 9;
    bl = s_raw_deflate(tmp + GOSSIP_HEADER_BYTES, R, bomb, sizeof bomb);
    blen = s_wrap(b, z.data, R, bomb, bl);
    s_reject(b, blen, &L, "unknown block type 9 at byte 44", "bad block type inside");
    memcpy(tmp, plain.data, plain.len);
    tmp[plain.len] = 0; /* a trailing byte inside */
    bl = s_raw_deflate(tmp + GOSSIP_HEADER_BYTES, R + 1, bomb, sizeof bomb);
    blen = s_wrap(b, z.data, R + 1, bomb, bl);
    s_reject(b, blen, &L, "trailing", "trailing byte inside");
    /* random bit flips in the stream never crash */
    s_flip_bits(z.data, len, b, &L, 78, 3);
    free(b);
    free(tmp);
    nn_arena_free(&L);
    gossip_buf_free(&plain);
    gossip_buf_free(&z);
    gossip_deflater_free(&scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_blocks),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_wire_sizes),
        cmocka_unit_test(test_rice_edges),
        cmocka_unit_test(test_deflate_roundtrip),
        cmocka_unit_test(test_deflate_never_grows),
        cmocka_unit_test(test_deflate_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
