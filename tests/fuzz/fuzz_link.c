/* fuzz_link — libFuzzer target: arbitrary multipart traffic into the
 * link's receive path (gossip_link_handle), without sockets.
 *
 * Node 0 of a 4-node undirected ring (choco, identity, push-sum) over a
 * small fixed layout; its neighbours are ranks 1 and 3.  The input is a
 * sequence of records
 *     u8 op, u16 len (little-endian), len bytes
 * where op bit 0 picks the channel (0 ROUTER: an in-neighbour, 1 a DEALER:
 * an out-neighbour's reply), bit 1 the neighbour (rank 1 or 3), bit 2
 * toggles "running" (start barrier passed), and bit 3 makes the bytes a
 * recipe instead of a message, so that the fuzzer reaches deep states
 * without forging headers: byte 0 the kind, byte 1 the iteration, bytes
 * 2..9 a HELLO nonce, the rest float values of a GOSSIP/RESYNC (NaN and
 * Inf included).  Every message is handled as gossip_net would deliver it;
 * nothing may crash, leak or trip a sanitizer.  Built and run by
 * scripts/fuzz.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_link.h"
#include "gossip/gossip_node.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static nn_arena   s_layout;
static topo      *s_topo;
static gossip_buf s_msg;
static float     *s_vals;
static int        s_ready;

static void s_init(void)
{
    char err[256];
    nn_arena_init(&s_layout);
    nn_arena_add(&s_layout, "a", 1, (int[]){ 7 });
    nn_arena_add(&s_layout, "b", 2, (int[]){ 3, 5 });
    nn_arena_add(&s_layout, "c", 1, (int[]){ 40 });
    s_topo = topo_generate("undirected_ring", 4, 0, 0, err, sizeof err);
    if (!s_topo)
        abort();
    s_vals = nn_xcalloc(s_layout.numel, sizeof *s_vals);
    s_ready = 1;
}

/* The message a recipe describes, into s_msg. */
static void s_recipe(int from, const uint8_t *r, size_t n)
{
    uint8_t kind = n > 0 ? (uint8_t)(r[0] % (GOSSIP_MSG_LAST + 1)) : GOSSIP_MSG_PING;
    uint64_t iter = n > 1 ? r[1] : 0, nonce = 0;
    if (n > 9)
        memcpy(&nonce, r + 2, 8);
    uint32_t fp = gossip_layout_fingerprint(&s_layout);
    if (kind == GOSSIP_MSG_HELLO || kind == GOSSIP_MSG_HELLO_ACK) {
        gossip_msg_encode_hello(kind, (uint32_t)from, iter, fp, nonce, &s_msg);
        return;
    }
    if (kind == GOSSIP_MSG_LINK_REQ || kind == GOSSIP_MSG_LINK_PROOF) {
        gossip_msg_encode_link(kind, (uint32_t)from, iter, fp, nonce, &s_msg);
        return;
    }
    if (kind == GOSSIP_MSG_STATE) { /* one chunk of a state of the recipe's bytes */
        gossip_buf_set(&s_msg, NULL, 0);
        size_t nb = n > 10 ? (n - 10) & ~(size_t)3 : 0;
        gossip_state_chunk c = {0, nb ? nb : 4, (uint32_t)nonce, nb ? r + 10 : r, nb ? nb : 4};
        if (n >= 4)
            gossip_msg_encode_state((uint32_t)from, iter, fp, &c, &s_msg);
        return;
    }
    if (kind != GOSSIP_MSG_GOSSIP && kind != GOSSIP_MSG_RESYNC) {
        gossip_msg_encode_control(kind, (uint32_t)from, iter, fp, &s_msg);
        return;
    }
    memset(s_vals, 0, s_layout.numel * sizeof *s_vals);
    size_t nv = n > 10 ? (n - 10) / 4 : 0;
    if (nv > s_layout.numel)
        nv = s_layout.numel;
    if (nv)
        memcpy(s_vals, r + 10, nv * 4);
    gossip_cblock blk[3];
    for (size_t v = 0; v < s_layout.nviews; v++)
        blk[v] = (gossip_cblock){ GOSSIP_BLK_DENSE_F32, (uint32_t)s_layout.views[v].numel,
                                  (uint32_t)s_layout.views[v].numel, NULL,
                                  s_vals + s_layout.views[v].offset, NULL, NULL };
    gossip_header h = { GOSSIP_VERSION, kind, GOSSIP_FLAG_PUSH_SUM, (uint32_t)from, iter,
                        0.5, fp, 0, 0, kind == GOSSIP_MSG_GOSSIP ? 1000u : 0 };
    gossip_msg_encode(&h, blk, s_layout.nviews, &s_msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_ready)
        s_init();
    char err[256];
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    cfg.eta = 0.5;
    gossip_node *g = gossip_node_new(&cfg, &s_layout, s_topo, 0, err, sizeof err);
    if (!g)
        abort();
    gossip_link_config lc;
    gossip_link_config_default(&lc);
    gossip_link *l = gossip_link_new(NULL, g, s_topo, 0, &lc);
    int running = 0;
    size_t pos = 0;
    while (pos + 3 <= size) {
        uint8_t op = data[pos];
        size_t len = (size_t)data[pos + 1] | (size_t)data[pos + 2] << 8;
        pos += 3;
        if (len > size - pos)
            len = size - pos;
        int from = (op & 2) ? 3 : 1;
        gossip_net_dir dir = (op & 1) ? GOSSIP_NET_FROM_OUT : GOSSIP_NET_FROM_IN;
        if (op & 4) {
            running = !running;
            gossip_link_set_running(l, running);
        }
        if (op & 8) {
            s_recipe(from, data + pos, len);
            gossip_link_handle(l, from, dir, s_msg.data, s_msg.len);
        } else if (len > 0) {
            /* an exact-size copy, so that reads past the message are caught */
            uint8_t *m = malloc(len);
            memcpy(m, data + pos, len);
            gossip_link_handle(l, from, dir, m, len);
            free(m);
        }
        pos += len;
        (void)gossip_link_behind(l, NULL); /* the re-join rule over what arrived */
    }
    gossip_link_destroy(&l);
    gossip_node_destroy(&g);
    return 0;
}
