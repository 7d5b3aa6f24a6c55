/* fuzz_codec — libFuzzer target: arbitrary bytes into the gossip decoder.
 *
 * Decodes against a fixed small layout (4 tensors), in validate-only and
 * full mode; both must agree, and a message that decodes is applied to a
 * buffer (indices in range).  Built and run by scripts/fuzz.sh.
 *
 * The first input byte picks what the rest is, so that the fuzzer reaches
 * the inflate path without having to forge a header:
 *   'Z'  a plain payload: wrapped in a valid GOSSIP header and deflated by
 *        gossip_msg_deflate; the deflated message must decode exactly as
 *        the plain one (same verdict, same values) and never be larger;
 *   'D'  a deflated payload as sent (u32 plain length, then the stream),
 *        behind a valid header with the deflate flag: hostile inflate input;
 *   else the whole input is a message.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_codec.h"
#include "nn/nn_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static nn_arena       s_layout;
static gossip_payload s_payload, s_payload2;
static gossip_buf     s_msg, s_plain;
static gossip_deflater s_scratch;
static float         *s_dst;
static int            s_ready;

static void s_init(void)
{
    nn_arena_init(&s_layout);
    nn_arena_add(&s_layout, "a", 1, (int[]){ 7 });
    nn_arena_add(&s_layout, "b", 2, (int[]){ 3, 5 });
    nn_arena_add(&s_layout, "c", 1, (int[]){ 600 });
    nn_arena_add(&s_layout, "d", 1, (int[]){ 1 });
    gossip_payload_init(&s_payload, &s_layout);
    gossip_payload_init(&s_payload2, &s_layout);
    s_dst = nn_xcalloc(s_layout.numel, sizeof *s_dst);
    s_ready = 1;
}

static uint8_t s_tmp[GOSSIP_HEADER_BYTES + (1u << 20)];

/* A GOSSIP header for this layout (4 blocks) followed by payload[0..n),
 * n <= 1 MiB, into b. */
static void s_wrap(gossip_buf *b, const uint8_t *payload, size_t n, uint16_t flags)
{
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_GOSSIP, (uint16_t)(GOSSIP_FLAG_PUSH_SUM | flags), 1, 7,
                        0.5, gossip_layout_fingerprint(&s_layout), 0, 0, 1000 };
    gossip_msg_encode(&h, NULL, 0, b); /* the header */
    memcpy(s_tmp, b->data, GOSSIP_HEADER_BYTES);
    s_tmp[32] = (uint8_t)s_layout.nviews;
    for (int i = 0; i < 4; i++)
        s_tmp[36 + i] = (uint8_t)((uint32_t)n >> (8 * i));
    if (n)
        memcpy(s_tmp + GOSSIP_HEADER_BYTES, payload, n);
    gossip_buf_set(b, s_tmp, GOSSIP_HEADER_BYTES + n);
}

static int s_decode(const uint8_t *m, size_t len, gossip_payload *p)
{
    char err[512];
    gossip_header h;
    int rc1 = gossip_msg_decode(m, len, &s_layout, &h, NULL, err, sizeof err);
    int rc2 = gossip_msg_decode(m, len, &s_layout, &h, p, err, sizeof err);
    if (rc1 != rc2)
        abort();
    if (rc2 == 0) {
        memset(s_dst, 0, s_layout.numel * sizeof *s_dst);
        gossip_payload_add(p, &s_layout, s_dst);
    }
    return rc2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_ready)
        s_init();
    if (size < 1 || size > (1u << 20) + 1 || (data[0] != 'Z' && data[0] != 'D')) {
        s_decode(data, size, &s_payload);
        return 0;
    }
    if (data[0] == 'D') {
        s_wrap(&s_msg, data + 1, size - 1, GOSSIP_FLAG_DEFLATE);
        s_decode(s_msg.data, s_msg.len, &s_payload);
        return 0;
    }
    s_wrap(&s_msg, data + 1, size - 1, 0);
    gossip_buf_set(&s_plain, s_msg.data, s_msg.len);
    size_t len = gossip_msg_deflate(&s_msg, &s_scratch, 1 + data[size - 1] % 9);
    if (len > s_plain.len)
        abort();
    int rc_plain = s_decode(s_plain.data, s_plain.len, &s_payload2);
    int rc_z = s_decode(s_msg.data, s_msg.len, &s_payload);
    if (rc_plain != rc_z)
        abort();
    if (rc_z == 0)
        for (size_t b = 0; b < s_payload.nblocks; b++) {
            const gossip_block *x = &s_payload.blocks[b], *y = &s_payload2.blocks[b];
            if (x->type != y->type || x->k != y->k || memcmp(x->val, y->val, x->k * sizeof *x->val) ||
                (x->idx && memcmp(x->idx, y->idx, x->k * sizeof *x->idx)))
                abort();
        }
    return 0;
}
