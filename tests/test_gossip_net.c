/* test_gossip_net — the ZeroMQ transport (gossip_net) on 127.0.0.1.
 *
 * Three nodes on a directed ring 0 -> 1 -> 2 -> 0 exchange messages
 * (DEALER -> ROUTER) and replies (ROUTER -> DEALER), small and 1 MB, with
 * exact byte counters.  Raw libzmq DEALERs play impostors against node 1:
 * an unknown routing id, the id of a node that is not an in-neighbour,
 * multipart messages, empty and oversized frames: all are rejected and
 * counted, never delivered, and a valid message still gets through after.
 * A neighbour that reconnects while the node is frozen is cut off for 2 s
 * at most (test_reconnect_while_frozen).  Receive timeouts are bounded;
 * bad configurations fail with a message.  TK_NETLOG=1 logs the nodes'
 * rejections on stderr.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/tk.h"
#include <zmq.h>

#include "gossip/gossip_codec.h"
#include "gossip/gossip_net.h"

#include <czmq.h>
#include "nn/nn_core.h"
#include "topology/topo.h"

/* A free loopback port (asserted). */
static int s_free_port(void)
{
    int p = tk_free_port();
    assert_true(p > 0);
    return p;
}

/* Directed ring of n with loopback endpoints on free ports. */
static topo *s_ring(int n)
{
    char err[256];
    topo *t = topo_generate("directed_ring", n, 0, 0, err, sizeof err);
    assert_non_null(t);
    for (int i = 0; i < n; i++)
        snprintf(t->nodes[i].endpoint, sizeof t->nodes[i].endpoint, "tcp://127.0.0.1:%d",
                 s_free_port());
    return t;
}

/* silent_close_ms 0: the default */
static gossip_net *s_net_silent(const topo *t, int rank, size_t max_msg, int silent_close_ms)
{
    char err[512] = "";
    gossip_net_config cfg;
    gossip_net_config_default(&cfg);
    cfg.max_msg = max_msg;
    if (silent_close_ms > 0)
        cfg.silent_close_ms = silent_close_ms;
    cfg.send_timeout_ms = 2000;
    cfg.linger_ms = 100;
    cfg.log = getenv("TK_NETLOG") ? stderr : NULL;
    gossip_net *net = gossip_net_new(t, rank, &cfg, err, sizeof err);
    if (!net)
        fprintf(stderr, "gossip_net_new: %s\n", err);
    assert_non_null(net);
    return net;
}

static gossip_net *s_net(const topo *t, int rank, size_t max_msg)
{
    return s_net_silent(t, rank, max_msg, 0);
}

/* Sends once the DEALER is connected (ZMQ_IMMEDIATE), bounded. */
static void s_send_when_up(gossip_net *net, int to, const uint8_t *msg, size_t len)
{
    char err[512];
    double deadline = nn_now() + 5;
    int rc;
    while ((rc = gossip_net_try_send(net, to, msg, len, err, sizeof err)) == 0 &&
           nn_now() < deadline)
        usleep(5000);
    assert_int_equal(rc, 1);
}

/* Receives one message within 5 s. */
static void s_recv(gossip_net *net, int *from, gossip_net_dir *dir, const uint8_t **msg,
                   size_t *len)
{
    char err[512];
    assert_int_equal(gossip_net_recv(net, 5000, from, dir, msg, len, err, sizeof err), 1);
}

static void test_ring_exchange(void **state)
{
    (void)state;
    topo *t = s_ring(3);
    gossip_net *net[3];
    for (int i = 0; i < 3; i++)
        net[i] = s_net(t, i, 2u << 20);
    char err[512];
    /* each node sends "hello from i" to i+1 */
    for (int i = 0; i < 3; i++) {
        char m[32];
        int len = snprintf(m, sizeof m, "hello from %d", i);
        s_send_when_up(net[i], (i + 1) % 3, (const uint8_t *)m, (size_t)len);
    }
    for (int i = 0; i < 3; i++) {
        int from = -1;
        gossip_net_dir dir;
        const uint8_t *msg;
        size_t len;
        s_recv(net[i], &from, &dir, &msg, &len);
        int pred = (i + 2) % 3;
        char want[32];
        snprintf(want, sizeof want, "hello from %d", pred);
        if (from != pred)
            fail_msg("node %d: got '%.*s' (%zu bytes) from %d, dir %d", i, (int)len,
                     (const char *)msg, len, from, dir);
        assert_int_equal(dir, GOSSIP_NET_FROM_IN);
        assert_int_equal(len, strlen(want));
        assert_memory_equal(msg, want, len);
    }
    /* acks back to the senders over the same connections */
    for (int i = 0; i < 3; i++)
        assert_int_equal(gossip_net_reply(net[i], (i + 2) % 3, (const uint8_t *)"ack", 3, err,
                                          sizeof err), 0);
    for (int i = 0; i < 3; i++) {
        int from = -1;
        gossip_net_dir dir;
        const uint8_t *msg;
        size_t len;
        s_recv(net[i], &from, &dir, &msg, &len);
        assert_int_equal(from, (i + 1) % 3);
        assert_int_equal(dir, GOSSIP_NET_FROM_OUT);
        assert_int_equal(len, 3);
        assert_memory_equal(msg, "ack", 3);
    }
    /* a 1 MB message: copied on send, so the buffer may change at once */
    size_t big = 1u << 20;
    uint8_t *buf = nn_xmalloc(big);
    for (size_t k = 0; k < big; k++)
        buf[k] = (uint8_t)(k * 131 + 7);
    assert_int_equal(gossip_net_send(net[0], 1, buf, big, err, sizeof err), 0);
    buf[0] ^= 0xff;
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    s_recv(net[1], &from, &dir, &msg, &len);
    buf[0] ^= 0xff;
    assert_int_equal(from, 0);
    assert_int_equal(len, big);
    assert_memory_equal(msg, buf, big);
    free(buf);
    /* counters: payload bytes exactly */
    gossip_net_stats st0, st1;
    gossip_net_stats_get(net[0], &st0);
    gossip_net_stats_get(net[1], &st1);
    assert_int_equal(st0.bytes_sent, strlen("hello from 0") + 3 + big); /* + reply to 2 */
    assert_int_equal(st0.msgs_sent, 3);
    assert_int_equal(st0.bytes_recv, strlen("hello from 2") + 3);
    assert_int_equal(st1.bytes_recv, strlen("hello from 0") + 3 + big);
    assert_int_equal(st1.bytes_sent, strlen("hello from 1") + 3);
    assert_int_equal(st1.rejected_identity + st1.rejected_frames + st1.rejected_size, 0);
    /* wrong directions are refused */
    assert_int_equal(gossip_net_send(net[0], 2, (const uint8_t *)"x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an out-neighbour"));
    assert_int_equal(gossip_net_reply(net[0], 1, (const uint8_t *)"x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an in-neighbour"));
    for (int i = 0; i < 3; i++)
        gossip_net_destroy(&net[i]);
    assert_null(net[0]);
    gossip_net_destroy(&net[0]); /* safe on NULL */
    topo_destroy(&t);
}

/* A raw DEALER with routing id `id` connected to endpoint. */
static void *s_impostor(void *ctx, const char *id, const char *endpoint)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(d);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    if (id)
        assert_int_equal(zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id)), 0);
    assert_int_equal(zmq_connect(d, endpoint), 0);
    return d;
}

/* Waits (bounded) until node's counters change; returns the stats. */
static gossip_net_stats s_wait_rejections(gossip_net *net, uint64_t total)
{
    gossip_net_stats st;
    double deadline = nn_now() + 5;
    char err[256];
    for (;;) {
        int from;
        gossip_net_dir dir;
        const uint8_t *msg;
        size_t len;
        int rc = gossip_net_recv(net, 50, &from, &dir, &msg, &len, err, sizeof err);
        assert_int_equal(rc, 0); /* nothing may get through */
        gossip_net_stats_get(net, &st);
        if (st.rejected_identity + st.rejected_frames + st.rejected_size >= total ||
            nn_now() > deadline)
            return st;
    }
}

static void test_rejections(void **state)
{
    (void)state;
    topo *t = s_ring(3);
    const size_t max_msg = 1000;
    gossip_net *n1 = s_net(t, 1, max_msg); /* in-neighbour: n0 only */
    const char *ep = gossip_net_endpoint(n1);
    void *ctx = zmq_ctx_new();
    char payload[2000];
    memset(payload, 'p', sizeof payload);

    void *mallory = s_impostor(ctx, "mallory", ep);
    assert_int_equal(zmq_send(mallory, "hi", 2, 0), 2);
    gossip_net_stats st = s_wait_rejections(n1, 1);
    assert_int_equal(st.rejected_identity, 1);

    void *n2 = s_impostor(ctx, "n2", ep); /* a node, but not an in-neighbour of n1 */
    assert_int_equal(zmq_send(n2, "hi", 2, 0), 2);
    st = s_wait_rejections(n1, 2);
    assert_int_equal(st.rejected_identity, 2);

    void *anon = s_impostor(ctx, NULL, ep); /* libzmq's generated id */
    assert_int_equal(zmq_send(anon, "hi", 2, 0), 2);
    st = s_wait_rejections(n1, 3);
    assert_int_equal(st.rejected_identity, 3);

    void *fake0 = s_impostor(ctx, "n0", ep);
    assert_int_equal(zmq_send(fake0, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(fake0, "b", 1, 0), 1);
    st = s_wait_rejections(n1, 4);
    assert_int_equal(st.rejected_frames, 1);

    assert_int_equal(zmq_send(fake0, "", 0, 0), 0);
    st = s_wait_rejections(n1, 5);
    assert_int_equal(st.rejected_size, 1);

    /* max_msg + 1: inside libzmq's margin, rejected and counted here */
    assert_int_equal(zmq_send(fake0, payload, max_msg + 1, 0), (int)max_msg + 1);
    st = s_wait_rejections(n1, 6);
    assert_int_equal(st.rejected_size, 2);
    assert_int_equal(st.msgs_recv, 0);

    /* a valid message from n0's id still gets through, exactly max_msg */
    assert_int_equal(zmq_send(fake0, payload, max_msg, 0), (int)max_msg);
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    s_recv(n1, &from, &dir, &msg, &len);
    assert_int_equal(from, 0);
    assert_int_equal(len, max_msg);

    /* far beyond ZMQ_MAXMSGSIZE: libzmq drops the connection; never delivered */
    size_t huge = max_msg + (1u << 20);
    char *hb = nn_xcalloc(1, huge);
    void *fat = s_impostor(ctx, "n0", ep);
    assert_int_equal(zmq_send(fat, hb, huge, 0), (int)huge);
    char err[256];
    double t0 = nn_now();
    assert_int_equal(gossip_net_recv(n1, 300, &from, &dir, &msg, &len, err, sizeof err), 0);
    assert_true(nn_now() - t0 < 2.0);
    free(hb);

    zmq_close(mallory);
    zmq_close(n2);
    zmq_close(anon);
    zmq_close(fake0);
    zmq_close(fat);
    zmq_ctx_term(ctx);
    gossip_net_destroy(&n1);
    topo_destroy(&t);
}

/* Receives for up to `s` seconds (new0 sends a tagged message every 50
 * ms meanwhile): the messages from rank 0 tagged 'o' (the old connection's)
 * are counted; 1 once one tagged 'n' (new0's) arrived from rank 0. */
static int s_hear_new(gossip_net *n1, void *new0, double s, int *stale)
{
    char err[512];
    double deadline = nn_now() + s, next = 0;
    while (nn_now() < deadline) {
        if (nn_now() >= next) {
            zmq_send(new0, "n", 1, ZMQ_DONTWAIT);
            next = nn_now() + 0.05;
        }
        int from;
        gossip_net_dir dir;
        const uint8_t *msg;
        size_t len;
        int rc = gossip_net_recv(n1, 20, &from, &dir, &msg, &len, err, sizeof err);
        assert_true(rc >= 0);
        if (rc == 1 && from == 0 && len == 1 && msg[0] == 'o')
            (*stale)++;
        if (rc == 1 && from == 0 && len == 1 && msg[0] == 'n')
            return 1;
    }
    return 0;
}

/* n1 is frozen (does not read) while its in-neighbour n0 gives up on the
 * old connection and reconnects: the new connection reaches libzmq while
 * the old one still holds n0's routing id (the old connection's last
 * messages are still unread), so libzmq never identifies it.  Once n1
 * runs again it reads the old connection's last messages (with the fd
 * number the new connection now has), and must still close the new
 * connection that delivers nothing (s_reap), so that n0 reconnects and is
 * n0 again, both ways.  Before the fix the stale messages counted as the
 * new connection's and it stayed cut off for good. */
static void test_reconnect_while_frozen(void **state)
{
    (void)state;
    topo *t = s_ring(3);
    gossip_net *n1 = s_net(t, 1, 1000); /* in-neighbour: n0 only */
    const char *ep = gossip_net_endpoint(n1);
    void *ctx = zmq_ctx_new();
    void *old0 = s_impostor(ctx, "n0", ep);
    int linger = 1000;
    zmq_setsockopt(old0, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_send(old0, "o", 1, 0), 1);
    int from, stale = 0;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    s_recv(n1, &from, &dir, &msg, &len);
    assert_int_equal(from, 0);
    /* frozen from here: the old connection's last messages, its close and
     * the new connection all happen while n1 does not read */
    for (int i = 0; i < 5; i++)
        assert_int_equal(zmq_send(old0, "o", 1, 0), 1);
    zmq_close(old0);
    usleep(200000);
    void *new0 = s_impostor(ctx, "n0", ep);
    usleep(300000);
    /* runs again */
    int heard = s_hear_new(n1, new0, 8.0, &stale);
    gossip_net_stats st;
    gossip_net_stats_get(n1, &st);
    printf("stale messages of the old connection read: %d; new connection heard: %d; "
           "connections closed as contested or silent: %llu\n", stale, heard,
           (unsigned long long)st.closed_silent);
    assert_int_equal(stale, 5);
    assert_true(heard);
    assert_true(st.closed_silent >= 1);
    char err[512];
    assert_int_equal(gossip_net_reply(n1, 0, (const uint8_t *)"ack", 3, err, sizeof err), 0);
    int tmo = 2000;
    zmq_setsockopt(new0, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    char back[8];
    assert_int_equal(zmq_recv(new0, back, sizeof back, 0), 3);
    assert_memory_equal(back, "ack", 3);
    zmq_close(new0);
    zmq_ctx_term(ctx);
    gossip_net_destroy(&n1);
    topo_destroy(&t);
}

/* A client whose first message comes 2.5 s after it connected (a slow
 * neighbour's start): closed under the default limit of 2 s, heard and
 * nothing closed under a limit of 4 s (the node's peer floor). */
static int s_late_first_word(int silent_close_ms, uint64_t *closed)
{
    topo *t = s_ring(3);
    gossip_net *n1 = s_net_silent(t, 1, 1000, silent_close_ms);
    void *ctx = zmq_ctx_new();
    void *d = s_impostor(ctx, "n0", gossip_net_endpoint(n1));
    double t0 = nn_now();
    int heard = 0, sent = 0;
    while (!heard && nn_now() - t0 < 4.0) { /* the node serves meanwhile */
        if (!sent && nn_now() - t0 >= 2.5)
            sent = zmq_send(d, "h", 1, 0) == 1;
        int from;
        gossip_net_dir dir;
        const uint8_t *msg;
        size_t len;
        char err[256];
        int rc = gossip_net_recv(n1, 20, &from, &dir, &msg, &len, err, sizeof err);
        assert_true(rc >= 0);
        heard = rc == 1 && from == 0 && len == 1 && msg[0] == 'h';
    }
    assert_true(sent);
    gossip_net_stats st;
    gossip_net_stats_get(n1, &st);
    *closed = st.closed_silent;
    zmq_close(d);
    zmq_ctx_term(ctx);
    gossip_net_destroy(&n1);
    topo_destroy(&t);
    return heard;
}

static void test_silent_close_limit(void **state)
{
    (void)state;
    uint64_t closed_short, closed_long;
    int heard_short = s_late_first_word(0, &closed_short);
    int heard_long = s_late_first_word(4000, &closed_long);
    printf("first message 2.5 s after connecting: limit 2 s: heard %d, closed %llu; limit 4 s: "
           "heard %d, closed %llu\n", heard_short, (unsigned long long)closed_short, heard_long,
           (unsigned long long)closed_long);
    assert_true(closed_short >= 1);
    assert_true(heard_long);
    assert_int_equal(closed_long, 0);
}

static void test_timeouts_and_errors(void **state)
{
    (void)state;
    topo *t = s_ring(2);
    gossip_net *n0 = s_net(t, 0, 0);
    char err[512];
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    double t0 = nn_now();
    assert_int_equal(gossip_net_recv(n0, 150, &from, &dir, &msg, &len, err, sizeof err), 0);
    double dt = nn_now() - t0;
    assert_true(dt >= 0.14 && dt < 1.5);
    t0 = nn_now();
    assert_int_equal(gossip_net_recv(n0, 0, &from, &dir, &msg, &len, err, sizeof err), 0);
    assert_true(nn_now() - t0 < 0.5);
    /* node 1 is not up yet: the message waits in n0's DEALER and arrives
     * once node 1 binds (no slow-joiner loss) */
    assert_int_equal(gossip_net_try_send(n0, 1, (const uint8_t *)"early", 5, err, sizeof err), 1);
    gossip_net *n1 = s_net(t, 1, 0);
    s_recv(n1, &from, &dir, &msg, &len);
    assert_int_equal(from, 0);
    assert_int_equal(len, 5);
    assert_memory_equal(msg, "early", 5);
    gossip_net_destroy(&n1);
    gossip_net_config cfg;
    gossip_net_config_default(&cfg);
    /* reply to an in-neighbour that is gone (libzmq's I/O thread notices
     * the disconnect asynchronously: a bounded wait for it) */
    double t1 = nn_now();
    int rrc;
    while ((rrc = gossip_net_reply(n0, 1, (const uint8_t *)"x", 1, err, sizeof err)) != -1 &&
           nn_now() - t1 < 5)
        usleep(20000);
    assert_int_equal(rrc, -1);
    gossip_net_stats st;
    gossip_net_stats_get(n0, &st);
    assert_int_equal(st.reply_failed, 1);
    /* a port in use */
    cfg.bind = gossip_net_endpoint(n0);
    assert_null(gossip_net_new(t, 1, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "cannot bind"));
    gossip_net_destroy(&n0);
    /* missing endpoints, bad rank, curve */
    t->nodes[1].endpoint[0] = '\0';
    assert_null(gossip_net_new(t, 0, NULL, err, sizeof err));
    assert_non_null(strstr(err, "has no endpoint"));
    assert_non_null(strstr(err, "--peer n1="));
    assert_non_null(strstr(err, "`discovery: lan`"));
    assert_null(gossip_net_new(t, 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "--bind"));
    assert_null(gossip_net_new(t, 5, NULL, err, sizeof err));
    assert_non_null(strstr(err, "rank 5"));
    t->security_curve = 1;
    assert_null(gossip_net_new(t, 0, NULL, err, sizeof err));
    assert_non_null(strstr(err, "curve"));
    topo_destroy(&t);
}

static void test_max_msg_size(void **state)
{
    (void)state;
    nn_arena a;
    nn_arena_init(&a);
    int s1[1] = {1000}, s2[2] = {3, 3};
    nn_arena_add(&a, "w", 1, s1);
    nn_arena_add(&a, "b", 2, s2);
    nn_arena_alloc(&a);
    size_t m = gossip_net_max_msg_size(&a);
    /* at least a dense f32 message: header + 2 blocks of 4 bytes a value */
    assert_true(m >= GOSSIP_HEADER_BYTES + 2 * 6 + 4 * 1009);
    assert_true(m < GOSSIP_HEADER_BYTES + 4096 + 2 * 64 + 6 * 1009);
    nn_arena_free(&a);
}

/* ---- CURVE -------------------------------------------------------------- */

/* A raw DEALER with routing id `id` towards endpoint ep: a CURVE client with
 * key pair `me` and server key `server` (NULL: plaintext). */
static void *s_raw_dealer(void *ctx, const char *id, const char *ep, zcert_t *me,
                          const uint8_t *server)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id));
    if (me) {
        zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server, 32);
        zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, zcert_public_key(me), 32);
        zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, zcert_secret_key(me), 32);
    }
    assert_int_equal(zmq_connect(d, ep), 0);
    return d;
}

/* Nothing may arrive at net for `ms`. */
static void s_quiet(gossip_net *net, int ms)
{
    char err[512];
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    double until = nn_now() + ms / 1000.0;
    while (nn_now() < until)
        assert_int_equal(gossip_net_recv(net, 50, &from, &dir, &msg, &len, err, sizeof err), 0);
}

/* n0, n1, n2 all connected (complete graph) with CURVE; n1 is absent and
 * played by intruders. */
static void test_curve(void **state)
{
    (void)state;
    char err[512];
    topo *t = topo_generate("complete", 3, 0, 0, err, sizeof err);
    assert_non_null(t);
    t->security_curve = 1;
    zcert_t *cert[3], *mallory = zcert_new();
    for (int i = 0; i < 3; i++) {
        cert[i] = zcert_new();
        snprintf(t->nodes[i].pubkey, sizeof t->nodes[i].pubkey, "%s", zcert_public_txt(cert[i]));
        snprintf(t->nodes[i].endpoint, sizeof t->nodes[i].endpoint, "tcp://127.0.0.1:%d",
                 s_free_port());
    }
    gossip_net_config cfg;
    gossip_net_config_default(&cfg);
    cfg.linger_ms = 100;
    /* configuration errors */
    assert_null(gossip_net_new(t, 0, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "--cert"));
    cfg.curve_public = zcert_public_key(cert[1]);
    cfg.curve_secret = zcert_secret_key(cert[1]);
    assert_null(gossip_net_new(t, 0, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "is not the one"));
    cfg.curve_public = zcert_public_key(cert[0]);
    cfg.curve_secret = zcert_secret_key(cert[0]);
    gossip_net *net0 = gossip_net_new(t, 0, &cfg, err, sizeof err);
    if (!net0)
        fail_msg("%s", err);
    /* one CURVE net per process (CZMQ's ZAP endpoint): a clean refusal */
    cfg.curve_public = zcert_public_key(cert[2]);
    cfg.curve_secret = zcert_secret_key(cert[2]);
    assert_null(gossip_net_new(t, 2, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "one CURVE node per process"));
    uint8_t server[32];
    memcpy(server, zcert_public_key(cert[0]), 32);
    void *ctx = zmq_ctx_new();
    gossip_net_stats st;
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    /* member n2 (played with its own keys) talks, encrypted and authenticated */
    void *d = s_raw_dealer(ctx, "n2", t->nodes[0].endpoint, cert[2], server);
    zmq_send(d, "from n2", 7, 0);
    s_recv(net0, &from, &dir, &msg, &len);
    assert_int_equal(from, 2);
    assert_int_equal(len, 7);
    assert_memory_equal(msg, "from n2", 7);
    zmq_close(d);
    /* an unknown key posing as n1 */
    d = s_raw_dealer(ctx, "n1", t->nodes[0].endpoint, mallory, server);
    zmq_send(d, "impostor", 8, ZMQ_DONTWAIT);
    s_quiet(net0, 1000);
    gossip_net_stats_get(net0, &st);
    assert_true(st.rejected_auth >= 1);
    uint64_t auth0 = st.rejected_auth;
    zmq_close(d);
    /* a plaintext client */
    d = s_raw_dealer(ctx, "n1", t->nodes[0].endpoint, NULL, NULL);
    zmq_send(d, "plaintext", 9, ZMQ_DONTWAIT);
    s_quiet(net0, 1000);
    gossip_net_stats_get(net0, &st);
    assert_true(st.rejected_auth > auth0);
    zmq_close(d);
    /* a member (n2's key) that claims to be n1 */
    d = s_raw_dealer(ctx, "n1", t->nodes[0].endpoint, cert[2], server);
    zmq_send(d, "n2 as n1", 8, ZMQ_DONTWAIT);
    s_quiet(net0, 1000);
    gossip_net_stats_get(net0, &st);
    assert_true(st.rejected_identity >= 1);
    zmq_close(d);
    print_message("CURVE: refused %llu handshakes (unknown key, plaintext) and %llu frames of a "
                  "member claiming another's id\n", (unsigned long long)st.rejected_auth,
                  (unsigned long long)st.rejected_identity);
    zmq_ctx_term(ctx);
    gossip_net_destroy(&net0);
    for (int i = 0; i < 3; i++)
        zcert_destroy(&cert[i]);
    zcert_destroy(&mallory);
    topo_destroy(&t);
}

/* `discovery: lan` with every endpoint known (as scripts/run-local passes
 * them): nothing to discover, no beacon (no broadcast from a unit test),
 * the DEALERs connect to the given endpoints as usual. */
static void test_discovery_endpoints_known(void **state)
{
    (void)state;
    topo *t = s_ring(3);
    t->discovery = TOPO_DISCOVERY_LAN;
    t->discovery_port = TOPO_DISCOVERY_PORT_DEFAULT;
    gossip_net *net[3];
    for (int i = 0; i < 3; i++) {
        net[i] = s_net(t, i, 1u << 20);
        assert_null(gossip_net_discovery(net[i]));
    }
    assert_string_equal(gossip_net_peer_endpoint(net[0], 1), t->nodes[1].endpoint);
    assert_string_equal(gossip_net_peer_endpoint(net[0], 2), ""); /* not an out-neighbour */
    assert_string_equal(gossip_net_peer_endpoint(net[0], 7), "");
    s_send_when_up(net[0], 1, (const uint8_t *)"hi", 2);
    int from;
    gossip_net_dir dir;
    const uint8_t *msg;
    size_t len;
    s_recv(net[1], &from, &dir, &msg, &len);
    assert_int_equal(from, 0);
    assert_int_equal(len, 2);
    for (int i = 0; i < 3; i++)
        gossip_net_destroy(&net[i]);
    topo_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_curve),
        cmocka_unit_test(test_ring_exchange),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_reconnect_while_frozen),
        cmocka_unit_test(test_silent_close_limit),
        cmocka_unit_test(test_timeouts_and_errors),
        cmocka_unit_test(test_max_msg_size),
        cmocka_unit_test(test_discovery_endpoints_known),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
