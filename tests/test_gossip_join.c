/* test_gossip_join — joining a run in progress, in one process.
 *
 *   - the wire: STATE, STATE_REQ and HELLO_ACK with a status word round-trip
 *     through the codec; malformed ones (short, empty or oversized chunks,
 *     misaligned or out-of-range offsets, reserved bits, psi, unknown
 *     status bits, a status on a HELLO) are refused with a message;
 *   - the assembler (gossip_state): a state split into many chunks comes
 *     back bit-identical; a chunk from a rank not asked, a wrong CRC, a NaN,
 *     another total, a gap, a replay, an iteration change are refused;
 *   - the simulator (gossip_sim_absent / gossip_sim_join), lr = 0: a node
 *     absent for the first T rounds joins with its in-neighbour's z and
 *     push-sum averaging then converges to exactly the documented value
 *     (sum x_i + z_h) / (sum psi_i + 1) over the present nodes at the join;
 *   - the link's receive path (gossip_link_handle): STATE nobody asked
 *     for, or from a neighbour that was not asked, or with a bad CRC, or
 *     on another connection than the one it was asked on, is refused and
 *     counted; the asked neighbour's valid state is taken;
 *   - ids over the ROUTER: a neighbour both ways is heard there only once
 *     its LINK_PROOF carried our token (a wrong one is refused); the
 *     distance that decides whether two neighbours' states agree.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_link.h"
#include "gossip/gossip_sim.h"
#include "gossip/gossip_state.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

/* ---- the wire --------------------------------------------------------------- */

static void test_codec_roundtrip(void **state)
{
    (void)state;
    gossip_buf b = {0};
    char err[512];
    gossip_header h;
    uint8_t data[40];
    for (int i = 0; i < 40; i++)
        data[i] = (uint8_t)(7 * i + 1);
    gossip_state_chunk c = {8, 48, 0xa5a5f00du, data, 40}, d;
    size_t len = gossip_msg_encode_state(3, 77, 0x1234u, &c, &b);
    assert_int_equal(len, GOSSIP_HEADER_BYTES + GOSSIP_STATE_HDR_BYTES + 40);
    assert_int_equal(gossip_msg_decode_state(b.data, b.len, &h, &d, err, sizeof err), 0);
    assert_true(h.kind == GOSSIP_MSG_STATE && h.sender == 3 && h.iter == 77 &&
                h.fingerprint == 0x1234u);
    assert_true(d.offset == 8 && d.total == 48 && d.crc == 0xa5a5f00du && d.len == 40);
    assert_memory_equal(d.data, data, 40);
    /* the chunk from a header decoded once, by the transport's dispatch */
    gossip_header hd;
    gossip_state_chunk e;
    assert_int_equal(gossip_msg_decode_header(b.data, b.len, NULL, &hd, err, sizeof err), 0);
    assert_int_equal(gossip_msg_decode_state_chunk(b.data, b.len, &hd, &e, err, sizeof err), 0);
    assert_true(e.offset == d.offset && e.total == d.total && e.crc == d.crc && e.len == d.len &&
                e.data == d.data);
    hd.kind = GOSSIP_MSG_PING; /* another kind's header: refused */
    assert_int_equal(gossip_msg_decode_state_chunk(b.data, b.len, &hd, &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "where a STATE was expected"));
    /* STATE_REQ: a plain control message */
    gossip_msg_encode_control(GOSSIP_MSG_STATE_REQ, 2, 5, 0x1234u, &b);
    assert_int_equal(gossip_msg_decode_header(b.data, b.len, NULL, &h, err, sizeof err), 0);
    assert_true(h.kind == GOSSIP_MSG_STATE_REQ && h.sender == 2 && h.iter == 5);
    /* HELLO_ACK with a status: nonce and status read back; status 0 is the plain one */
    gossip_msg_encode_hello_ack(1, 9, 0x1234u, 0xfeedULL, GOSSIP_HELLO_JOIN, &b);
    assert_int_equal(gossip_msg_decode_header(b.data, b.len, NULL, &h, err, sizeof err), 0);
    assert_true(gossip_msg_hello_nonce(b.data, b.len) == 0xfeedULL);
    assert_true(gossip_msg_hello_status(b.data, b.len) == GOSSIP_HELLO_JOIN);
    gossip_msg_encode_hello_ack(1, 9, 0x1234u, 0xfeedULL, 0, &b);
    assert_int_equal(b.len, GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES);
    assert_true(gossip_msg_hello_status(b.data, b.len) == 0);
    gossip_buf_free(&b);
}

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A STATE message, then `mutate` applied, must be refused naming `what`. */
static void s_refused(void (*mutate)(gossip_buf *), const char *what)
{
    uint8_t data[16] = {0};
    gossip_state_chunk c = {0, 32, 1, data, 16};
    gossip_buf b = {0};
    gossip_msg_encode_state(1, 3, 0x99u, &c, &b);
    mutate(&b);
    char err[512] = "";
    gossip_header h;
    gossip_state_chunk d;
    int rc = gossip_msg_decode_state(b.data, b.len, &h, &d, err, sizeof err);
    if (rc != -1 || !strstr(err, what))
        fail_msg("expected a refusal naming '%s', got %d '%s'", what, rc, err);
    gossip_buf_free(&b);
}

static void m_short(gossip_buf *b) { b->len = GOSSIP_HEADER_BYTES + 10; s_put32(b->data + 36, 10); }
static void m_empty(gossip_buf *b) { b->len = GOSSIP_HEADER_BYTES + 24; s_put32(b->data + 36, 24); }
static void m_offset(gossip_buf *b) { b->data[GOSSIP_HEADER_BYTES] = 2; }
static void m_range(gossip_buf *b) { b->data[GOSSIP_HEADER_BYTES] = 20; }
static void m_total(gossip_buf *b) { b->data[GOSSIP_HEADER_BYTES + 8] = 8; }
static void m_reserved(gossip_buf *b) { b->data[GOSSIP_HEADER_BYTES + 20] = 1; }
static void m_flags(gossip_buf *b) { b->data[6] = 1; }
static void m_trunc(gossip_buf *b) { b->len -= 3; }

static void test_codec_malformed(void **state)
{
    (void)state;
    s_refused(m_short, "the chunk header needs");
    s_refused(m_empty, "chunk of 0 bytes");
    s_refused(m_offset, "not a multiple of 4");
    s_refused(m_range, "outside the total");
    s_refused(m_total, "outside the total");
    s_refused(m_reserved, "reserved field");
    s_refused(m_flags, "flags");
    s_refused(m_trunc, "payload length");
    /* oversized chunk */
    size_t big = GOSSIP_STATE_CHUNK_MAX + 4;
    uint8_t *data = calloc(1, big);
    gossip_buf b = {0};
    gossip_state_chunk c = {0, big, 1, data, 4};
    gossip_msg_encode_state(1, 3, 0x99u, &c, &b);
    uint8_t *p = realloc(b.data, b.len + big - 4);
    assert_non_null(p);
    b.data = p;
    b.len += big - 4;
    s_put32(b.data + 36, (uint32_t)(b.len - GOSSIP_HEADER_BYTES));
    char err[512] = "";
    gossip_header h;
    gossip_state_chunk d;
    assert_int_equal(gossip_msg_decode_state(b.data, b.len, &h, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "chunk of"));
    /* unknown status bits; a status on a HELLO */
    gossip_msg_encode_hello_ack(1, 9, 0x99u, 5, 2, &b);
    assert_int_equal(gossip_msg_decode_header(b.data, b.len, NULL, &h, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown status bits"));
    gossip_msg_encode_hello_ack(1, 9, 0x99u, 5, 1, &b);
    b.data[5] = GOSSIP_MSG_HELLO;
    assert_int_equal(gossip_msg_decode_header(b.data, b.len, NULL, &h, err, sizeof err), -1);
    /* a STATE read as another kind's header */
    gossip_msg_encode_control(GOSSIP_MSG_PING, 1, 0, 0x99u, &b);
    assert_int_equal(gossip_msg_decode_state(b.data, b.len, &h, &d, err, sizeof err), -1);
    free(data);
    gossip_buf_free(&b);
}

/* ---- the assembler ---------------------------------------------------------- */

#define S_N 1000

/* Feeds the chunks of v (chunk bytes each) from `sender` into rx; the
 * result of the last add.  skip/dup: a chunk index to leave out / send
 * twice (-1 none); flip: a byte of the packed state to corrupt (-1 none).
 * Odd chunks go through gossip_state_rx_add_decoded. */
static int s_feed(gossip_state_rx *rx, int sender, const float *v, size_t chunk, int skip,
                  int dup, long flip, char *err, size_t errlen)
{
    gossip_buf bytes = {0}, msg = {0};
    uint32_t crc = gossip_state_pack(v, S_N, &bytes);
    if (flip >= 0)
        bytes.data[flip] ^= 0x10;
    int rc = 0;
    for (size_t k = 0; rc == 0 && gossip_state_chunk_msg((uint32_t)sender, 42, 0x77u, &bytes,
                                                         crc, chunk, k, &msg) > 0; k++) {
        if ((int)k == skip)
            continue;
        gossip_header h; /* odd chunks as a transport hands them: header decoded */
        if (k % 2 && gossip_msg_decode_header(msg.data, msg.len, NULL, &h, err, errlen) == 0)
            rc = gossip_state_rx_add_decoded(rx, sender, &h, msg.data, msg.len, err, errlen);
        else
            rc = gossip_state_rx_add(rx, sender, msg.data, msg.len, err, errlen);
        if (rc == 0 && (int)k == dup)
            rc = gossip_state_rx_add(rx, sender, msg.data, msg.len, err, errlen);
    }
    gossip_buf_free(&bytes);
    gossip_buf_free(&msg);
    return rc;
}

static void test_state_assembly(void **state)
{
    (void)state;
    float v[S_N];
    for (int i = 0; i < S_N; i++)
        v[i] = (float)sin(i * 0.37) * 1e3f + (float)i * 1e-7f;
    gossip_state_rx rx;
    char err[512];
    gossip_state_rx_init(&rx, S_N, 0x77u);
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, -1, -1, err, sizeof err), 1);
    assert_memory_equal(rx.vals, v, sizeof v);
    assert_true(rx.iter == 42);
    /* nobody asked / another rank than the one asked */
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "not asked"));
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 1, v, 96, -1, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "rank 1, which was not asked"));
    assert_int_equal(rx.from, 2); /* the transfer asked for goes on */
    /* wrong CRC: one byte flipped in transit */
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, -1, 777, err, sizeof err), -1);
    assert_non_null(strstr(err, "CRC-32"));
    assert_int_equal(rx.from, -1);
    /* a gap, a replay */
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, 3, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "a gap"));
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, 2, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "a replay"));
    /* NaN (with a valid CRC) */
    float w[S_N];
    memcpy(w, v, sizeof w);
    w[500] = NAN;
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, w, 4096, -1, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "value 500 of the state is NaN"));
    gossip_state_rx_free(&rx);
    /* another total; another layout */
    gossip_state_rx_init(&rx, S_N + 1, 0x77u);
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "this run's is"));
    gossip_state_rx_free(&rx);
    gossip_state_rx_init(&rx, S_N, 0x78u);
    gossip_state_rx_begin(&rx, 2);
    assert_int_equal(s_feed(&rx, 2, v, 96, -1, -1, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "fingerprint"));
    gossip_state_rx_free(&rx);
}

/* ---- the simulator ----------------------------------------------------------- */

/* n nodes of `kind`, rank R absent for rounds < T, then joins; lr = 0.
 * Every node's z must converge to (sum x + z_h) / (sum psi + 1) of the
 * present nodes at the join. */
static void s_sim_join(const char *kind, int n, gossip_algo algo, int R, uint64_t T,
                       int rounds, double tol)
{
    char err[512];
    topo *t = topo_generate(kind, n, 0, 0, err, sizeof err);
    assert_non_null(t);
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "a", 1, (int[]){5});
    nn_arena_add(&L, "b", 1, (int[]){3});
    nn_arena_alloc(&L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = algo;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    assert_non_null(sim);
    size_t m = L.numel;
    float **x = calloc((size_t)n, sizeof *x);
    nn_rng rng;
    nn_rng_seed(&rng, 7);
    for (int i = 0; i < n; i++) {
        x[i] = calloc(m, sizeof **x);
        for (size_t k = 0; k < m; k++)
            x[i][k] = (float)(nn_rng_uniform(&rng) * 10 - 5);
    }
    gossip_sim_absent(sim, R);
    for (uint64_t r = 0; r < T; r++)
        assert_int_equal(gossip_sim_step(sim, x, r, err, sizeof err), 0);
    /* the expected value, from the state at the join */
    const gossip_peer *pr = gossip_node_peers(gossip_sim_node(sim, R));
    int h = -1;
    for (int j = 0; j < n && h < 0; j++)
        if (j != R && pr[j].is_in)
            h = j;
    double *want = calloc(m, sizeof *want), psum = 1;
    for (int i = 0; i < n; i++) {
        if (i == R)
            continue;
        psum += gossip_node_psi(gossip_sim_node(sim, i));
        for (size_t k = 0; k < m; k++)
            want[k] += x[i][k];
    }
    for (size_t k = 0; k < m; k++)
        want[k] = (want[k] + x[h][k] / gossip_node_psi(gossip_sim_node(sim, h))) / psum;
    int holder = -2;
    assert_int_equal(gossip_sim_join(sim, R, x, T, 12, &holder, err, sizeof err), 0);
    assert_int_equal(holder, h);
    for (uint64_t r = T; r < T + (uint64_t)rounds; r++)
        if (gossip_sim_step(sim, x, r, err, sizeof err) != 0)
            fail_msg("round %llu: %s", (unsigned long long)r, err);
    float *z = calloc(m, sizeof *z);
    for (int i = 0; i < n; i++) {
        gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
        for (size_t k = 0; k < m; k++)
            if (fabs(z[k] - want[k]) > tol * (1 + fabs(want[k])))
                fail_msg("%s %s: node %d coordinate %zu: %.9g, the documented value %.9g", kind,
                         gossip_algo_name(algo), i, k, z[k], want[k]);
    }
    free(z);
    free(want);
    for (int i = 0; i < n; i++)
        free(x[i]);
    free(x);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

static void test_sim_join_consensus(void **state)
{
    (void)state;
    s_sim_join("directed_ring", 5, GOSSIP_DPSGD, 2, 7, 800, 1e-5);
    s_sim_join("undirected_ring", 6, GOSSIP_DPSGD, 0, 3, 600, 1e-5);
    s_sim_join("exponential", 8, GOSSIP_DPSGD, 5, 10, 300, 1e-5);
    s_sim_join("complete", 4, GOSSIP_CHOCO, 3, 4, 300, 1e-4);
}

/* ---- the link's receive path ----------------------------------------------- */

static void test_link_state_refused(void **state)
{
    (void)state;
    char err[512];
    topo *t = topo_generate("undirected_ring", 4, 0, 0, err, sizeof err);
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "a", 1, (int[]){300});
    nn_arena_alloc(&L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    gossip_node *g = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    assert_non_null(g);
    gossip_link_config lc;
    gossip_link_config_default(&lc);
    gossip_link *l = gossip_link_new(NULL, g, t, 0, &lc);
    float x[300];
    gossip_link_set_model(l, x, NULL, 0);
    float v[300];
    for (int i = 0; i < 300; i++)
        v[i] = (float)i;
    gossip_buf bytes = {0}, msg = {0};
    uint32_t crc = gossip_state_pack(v, 300, &bytes);
    uint32_t fp = gossip_node_fingerprint(g);
    /* nobody asked */
    gossip_state_chunk_msg(1, 0, fp, &bytes, crc, 1200, 0, &msg);
    gossip_link_handle(l, 1, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_link_stats st;
    gossip_link_stats_get(l, &st);
    assert_true(st.state_refused == 1 && st.refused == 1);
    /* rank 3 asked: rank 1's is refused, 3's with a bad CRC too, then 3's good one taken */
    gossip_link_expect_state(l, 3);
    gossip_link_handle(l, 1, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_state_chunk_msg(3, 0, fp, &bytes, crc ^ 1u, 400, 0, &msg);
    gossip_link_handle(l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_link_stats_get(l, &st);
    assert_true(st.state_refused == 2);
    gossip_state_chunk_msg(3, 0, fp, &bytes, crc ^ 1u, 400, 1, &msg);
    gossip_link_handle(l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_state_chunk_msg(3, 0, fp, &bytes, crc ^ 1u, 400, 2, &msg);
    gossip_link_handle(l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_link_stats_get(l, &st);
    assert_true(st.state_refused == 3 && !gossip_link_state_ready(l));
    gossip_link_expect_state(l, 3);
    for (size_t k = 0; gossip_state_chunk_msg(3, 0, fp, &bytes, crc, 400, k, &msg) > 0; k++)
        gossip_link_handle(l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_link_stats_get(l, &st);
    assert_true(st.state_refused == 3 && gossip_link_state_ready(l));
    /* a STATE_REQ before the start: ignored, nothing refused */
    gossip_msg_encode_control(GOSSIP_MSG_STATE_REQ, 1, 0, fp, &msg);
    gossip_link_handle(l, 1, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_link_stats_get(l, &st);
    assert_true(st.refused == 3 && st.states_sent == 0);
    gossip_buf_free(&bytes);
    gossip_buf_free(&msg);
    gossip_link_destroy(&l);
    gossip_node_destroy(&g);
    nn_arena_free(&L);
    topo_destroy(&t);
}

/* A PING from `from` reporting iter, over our ROUTER (an in-neighbour's,
 * in = 1) or our DEALER (in = 0). */
static void s_ping_over(gossip_link *l, uint32_t fp, int from, int in, uint64_t iter)
{
    gossip_buf msg = {0};
    gossip_msg_encode_control(GOSSIP_MSG_PING, (uint32_t)from, iter, fp, &msg);
    gossip_link_handle(l, from, in ? GOSSIP_NET_FROM_IN : GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_buf_free(&msg);
}

static void s_ping_from(gossip_link *l, uint32_t fp, int from, uint64_t iter)
{
    s_ping_over(l, fp, from, 1, iter);
}

/* gossip_link_behind says this node fell behind, the nearest far-ahead
 * neighbour at iteration want. */
static void s_behind_at(const gossip_link *l, uint64_t want)
{
    uint64_t far = 0;
    assert_true(gossip_link_behind(l, &far));
    assert_int_equal(far, want);
}

/* Node 0 of a generated graph of 4 (30 floats), its link running without
 * a transport, for the tests of what neighbours report. */
typedef struct {
    topo        *t;
    nn_arena     L;
    gossip_node *g;
    gossip_link *l;
    uint32_t     fp;
} s_rep;

static void s_rep_open(s_rep *f, const char *kind, gossip_algo algo, int staleness,
                       uint64_t iters)
{
    char err[512];
    f->t = topo_generate(kind, 4, 0, 0, err, sizeof err);
    assert_non_null(f->t);
    nn_arena_init(&f->L);
    nn_arena_add(&f->L, "a", 1, (int[]){30});
    nn_arena_alloc(&f->L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = algo;
    cfg.staleness = staleness;
    f->g = gossip_node_new(&cfg, &f->L, f->t, 0, err, sizeof err);
    assert_non_null(f->g);
    gossip_link_config lc;
    gossip_link_config_default(&lc);
    lc.iters = iters;
    f->l = gossip_link_new(NULL, f->g, f->t, 0, &lc);
    gossip_link_set_running(f->l, 1);
    f->fp = gossip_node_fingerprint(f->g);
}

/* Nothing was refused; frees everything. */
static void s_rep_close(s_rep *f)
{
    gossip_link_stats st;
    gossip_link_stats_get(f->l, &st);
    assert_int_equal(st.refused, 0);
    gossip_link_destroy(&f->l);
    gossip_node_destroy(&f->g);
    nn_arena_free(&f->L);
    topo_destroy(&f->t);
}

/* The re-join rule (gossip_link.h "Re-join") on node 0 of a complete graph
 * of 4 at iteration 0, in a run of 1000 rounds: "fell behind" needs two
 * live in-neighbours far ahead (beyond lag + window = 12 + 4) and a strict
 * majority of the live ones; one liar, a claim beyond the run, or a
 * neighbour within reach never suffice. */
static void test_link_behind_rule(void **state)
{
    (void)state;
    s_rep f;
    s_rep_open(&f, "complete", GOSSIP_CHOCO, 0, 1000);
    gossip_link *l = f.l;
    uint32_t fp = f.fp;
    uint64_t far = 0;
    s_ping_from(l, fp, 1, 500); /* one neighbour alone, however far: never */
    assert_false(gossip_link_behind(l, &far));
    s_ping_from(l, fp, 2, 3); /* an honest one near us */
    assert_false(gossip_link_behind(l, NULL));
    s_ping_from(l, fp, 3, 16); /* within reach of flow control: not far */
    assert_false(gossip_link_behind(l, NULL));
    s_ping_from(l, fp, 3, 480); /* 2 of 3 live far ahead */
    s_behind_at(l, 480);
    s_ping_from(l, fp, 1, 5000); /* beyond the run: a lie, not counted */
    assert_false(gossip_link_behind(l, NULL));
    s_ping_from(l, fp, 1, 1000); /* the run's end is still inside it */
    s_behind_at(l, 480);
    s_rep_close(&f);
}

/* After a freeze, PINGs queued long ago on one connection are read after
 * recent ones on the other (each connection is in order, the two are not):
 * a neighbour reports the higher of the last on each, so an old PING never
 * takes back "far ahead", and the holder's state at its real iteration is
 * not refused as "not what it reported".  On the same connection the last
 * one counts (a claim beyond the run is taken back), and a new instance
 * (HELLO with another nonce) may report a lower iteration. */
static void test_link_reports_out_of_order(void **state)
{
    (void)state;
    s_rep f;
    s_rep_open(&f, "complete", GOSSIP_DPSGD, 0, 1000);
    gossip_link *l = f.l;
    uint32_t fp = f.fp;
    for (int j = 1; j <= 3; j++)
        s_ping_over(l, fp, j, 1, 590); /* the recent ones, over our ROUTER */
    for (int j = 1; j <= 3; j++)
        s_ping_over(l, fp, j, 0, 204); /* queued before the freeze, over our DEALER */
    s_behind_at(l, 590);
    s_ping_over(l, fp, 1, 0, 600); /* newer on the other connection: taken */
    s_ping_over(l, fp, 2, 1, 5000); /* beyond the run, then taken back */
    s_ping_over(l, fp, 2, 1, 595);
    s_behind_at(l, 590);
    gossip_buf msg = {0}; /* rank 3 restarts: its lower iteration counts */
    gossip_msg_encode_hello(GOSSIP_MSG_HELLO, 3, 7, fp, 0x1234u, &msg);
    gossip_link_handle(l, 3, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_buf_free(&msg);
    s_behind_at(l, 595); /* 1 and 2 of 3 are still far ahead */
    s_ping_over(l, fp, 2, 0, 10); /* ... not rank 2 over the DEALER: an old one */
    s_behind_at(l, 595);
    s_rep_close(&f);
}

/* gossip_link_out_lead: on a directed ring (node 0: in-neighbour 3,
 * out-neighbour 1) how far out-neighbour 1 is ahead by its reports, whatever
 * in-neighbour 3 reports; none on an undirected ring (every out-neighbour
 * is an in-neighbour); none once it is down. */
static void test_link_out_lead(void **state)
{
    (void)state;
    s_rep f;
    s_rep_open(&f, "undirected_ring", GOSSIP_DPSGD, 2, 0);
    s_ping_over(f.l, f.fp, 1, 0, 7);
    assert_true(gossip_link_out_lead(f.l, 0) == UINT64_MAX);
    s_rep_close(&f);
    s_rep_open(&f, "directed_ring", GOSSIP_DPSGD, 2, 0);
    assert_int_equal(gossip_link_out_lead(f.l, 0), 0); /* nothing reported yet */
    s_ping_over(f.l, f.fp, 1, 0, 5);                    /* over our DEALER */
    s_ping_over(f.l, f.fp, 3, 1, 9);                    /* the in-neighbour: not counted */
    assert_int_equal(gossip_link_out_lead(f.l, 0), 5);
    assert_int_equal(gossip_link_out_lead(f.l, 3), 2);
    assert_int_equal(gossip_link_out_lead(f.l, 6), 0); /* behind us */
    gossip_node_peer_down(f.g, 1);                      /* declared down: not counted */
    assert_true(gossip_link_out_lead(f.l, 0) == UINT64_MAX);
    s_rep_close(&f);
}

/* ---- the connection a state and an id come on ------------------------------ */

/* A link of rank 0 of t (300 floats, choco) for the harness tests. */
typedef struct {
    topo        *t;
    nn_arena     L;
    gossip_node *g;
    gossip_link *l;
    uint32_t     fp;
    char         log[4096];
} s_rig;

static void s_rig_log(void *arg, const char *msg)
{
    s_rig *r = arg;
    size_t n = strlen(r->log);
    snprintf(r->log + n, sizeof r->log - n, "%s\n", msg);
}

static void s_rig_new(s_rig *r, const char *kind, int n)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->t = topo_generate(kind, n, 0, 0, err, sizeof err);
    assert_non_null(r->t);
    nn_arena_init(&r->L);
    nn_arena_add(&r->L, "a", 1, (int[]){300});
    nn_arena_alloc(&r->L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    r->g = gossip_node_new(&cfg, &r->L, r->t, 0, err, sizeof err);
    assert_non_null(r->g);
    gossip_link_config lc;
    gossip_link_config_default(&lc);
    lc.log = s_rig_log;
    lc.log_arg = r;
    r->l = gossip_link_new(NULL, r->g, r->t, 0, &lc);
    r->fp = gossip_node_fingerprint(r->g);
}

static void s_rig_free(s_rig *r)
{
    gossip_link_destroy(&r->l);
    gossip_node_destroy(&r->g);
    nn_arena_free(&r->L);
    topo_destroy(&r->t);
}

/* A state asked of out-neighbour 3 (over our DEALER) is taken only from
 * that connection: the same chunks under rank 3's id over our ROUTER
 * (where whoever connected first holds the id) are refused. */
static void test_link_state_channel(void **state)
{
    (void)state;
    s_rig r;
    s_rig_new(&r, "undirected_ring", 4);
    float x[300], v[300];
    gossip_link_set_model(r.l, x, NULL, 0);
    for (int i = 0; i < 300; i++)
        v[i] = 1.0f;
    gossip_buf bytes = {0}, msg = {0};
    uint32_t crc = gossip_state_pack(v, 300, &bytes);
    gossip_link_expect_state(r.l, 3);
    for (size_t k = 0; gossip_state_chunk_msg(3, 7, r.fp, &bytes, crc, 400, k, &msg) > 0; k++)
        gossip_link_handle(r.l, 3, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_link_stats st;
    gossip_link_stats_get(r.l, &st);
    assert_false(gossip_link_state_ready(r.l));
    assert_int_equal(st.state_refused, 3);
    assert_non_null(strstr(r.log, "over our ROUTER: it was asked over our DEALER"));
    for (size_t k = 0; gossip_state_chunk_msg(3, 7, r.fp, &bytes, crc, 400, k, &msg) > 0; k++)
        gossip_link_handle(r.l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    assert_true(gossip_link_state_ready(r.l));
    gossip_buf_free(&bytes);
    gossip_buf_free(&msg);
    s_rig_free(&r);
}

/* Ids over the ROUTER (prove on, as over a plaintext net): neighbour 1 of
 * an undirected ring is heard there only after its LINK_PROOF carries our
 * token; before, its PING is dropped and its HELLO held; a wrong token is
 * refused.  A directed ring's in-only neighbour cannot prove (we have no
 * DEALER to it) and is heard as before. */
static void test_link_ids_proved(void **state)
{
    (void)state;
    s_rig r;
    s_rig_new(&r, "undirected_ring", 4);
    gossip_link_set_prove(r.l, 1);
    gossip_link_set_running(r.l, 1);
    gossip_buf msg = {0};
    gossip_link_stats st;
    s_ping_from(r.l, r.fp, 1, 5);
    gossip_msg_encode_hello(GOSSIP_MSG_HELLO, 1, 0, r.fp, 0xabcULL, &msg);
    gossip_link_handle(r.l, 1, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.unproven, 2);
    assert_int_equal(st.refused, 0);
    assert_null(strstr(r.log, "(re)starts"));
    uint64_t tok = gossip_link_token(r.l, 1);
    assert_true(tok != 0 && tok != gossip_link_token(r.l, 3));
    gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, 1, 0, r.fp, tok ^ 1, &msg);
    gossip_link_handle(r.l, 1, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.refused, 1);
    assert_non_null(strstr(r.log, "with a wrong token"));
    s_ping_from(r.l, r.fp, 1, 6);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.unproven, 3);
    /* the proof: the held HELLO is handled (a restart of a running node's
     * neighbour), and what follows is heard */
    gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, 1, 0, r.fp, tok, &msg);
    gossip_link_handle(r.l, 1, GOSSIP_NET_FROM_IN, msg.data, msg.len);
    assert_non_null(strstr(r.log, "neighbour n1 (rank 1) (re)starts at iteration 0"));
    s_ping_from(r.l, r.fp, 1, 7);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.unproven, 3);
    assert_int_equal(st.refused, 1);
    /* a LINK_PROOF over a DEALER is misdirected */
    gossip_link_handle(r.l, 3, GOSSIP_NET_FROM_OUT, msg.data, msg.len);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.refused, 2);
    gossip_buf_free(&msg);
    s_rig_free(&r);
    /* directed ring: rank 0's in-neighbour 3 is not an out-neighbour */
    s_rig_new(&r, "directed_ring", 4);
    gossip_link_set_prove(r.l, 1);
    s_ping_from(r.l, r.fp, 3, 5);
    gossip_link_stats_get(r.l, &st);
    assert_int_equal(st.unproven, 0);
    assert_int_equal(st.refused, 0);
    s_rig_free(&r);
}

/* The distance two states must be within to agree. */
static void test_state_distance(void **state)
{
    (void)state;
    float a[4] = {3, 0, 0, 4}, b[4] = {3, 0, 0, 4}, c[4] = {3, 0, 0, 3}, z[4] = {0};
    assert_true(gossip_link_state_distance(a, b, 4) == 0);
    assert_true(fabs(gossip_link_state_distance(a, c, 4) - 1.0 / sqrt(18.0)) < 1e-12);
    assert_true(isinf(gossip_link_state_distance(a, z, 4)));
    assert_true(gossip_link_state_distance(z, z, 4) == 0);
    float big[4] = {300, 0, 0, 400}; /* a huge state is as far as a small one */
    assert_true(gossip_link_state_distance(a, big, 4) > 90);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_malformed),
        cmocka_unit_test(test_state_assembly),
        cmocka_unit_test(test_sim_join_consensus),
        cmocka_unit_test(test_link_state_refused),
        cmocka_unit_test(test_link_behind_rule),
        cmocka_unit_test(test_link_reports_out_of_order),
        cmocka_unit_test(test_link_out_lead),
        cmocka_unit_test(test_link_state_channel),
        cmocka_unit_test(test_link_ids_proved),
        cmocka_unit_test(test_state_distance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
