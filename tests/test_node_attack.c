/* test_node_attack — a hostile peer on 127.0.0.1 speaking under a live
 * neighbour's routing id, and a join poisoner under a neighbour's id on a
 * latecomer's fresh port.
 *
 *   contested id: three real `lpgossip node` processes on an undirected
 *     ring; the test connects DEALERs to n1's ROUTER with the routing id
 *     "n0" (n0 is alive) and sends a valid HELLO followed by header-only
 *     malformed control messages, a flood of well-framed GOSSIP messages
 *     with NaN values, spoofed HELLOs, and a silent impostor that only
 *     connects.  Before: n1 aborted inside libzmq (`!_io_error`, exit 134)
 *     or the spoofed HELLOs reset its copy of n0 and the run diverged.
 *     Every node must finish with exit status 0, n1 must never declare the
 *     real n0 down nor take a spoofed HELLO for a restart; the impostors'
 *     connections, which never deliver under n0's id, are closed, logged
 *     and counted (rejected_contested; closed_silent where its connection
 *     is closed for having delivered nothing).
 *   join poisoning: test_join_poisoning (below).
 *   the drill (LPGOSSIP_DRILL=1, scripts/attack): both, each against an
 *     undisturbed run, plaintext and CURVE, with the averaged accuracy.
 * Every wait is bounded; children are killed and temp files removed in the
 * teardown.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <czmq.h>

#include <cmocka.h>
#include <zmq.h>

#include "tests/tk.h"
#include "tests/tk_run.h"

#include "gossip/gossip_codec.h"
#include "gossip/gossip_state.h"
#include "nn/nn_core.h"
#include "nn/nn_model.h"
#include "node/node_common.h"

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    return tk_dir_setup(s_dir, sizeof s_dir, "attack");
}

static int s_teardown(void **state)
{
    (void)state;
    tk_dir_teardown(s_dir);
    return 0;
}

/* A header (gossip_codec.h layout), little-endian hosts. */
static void s_hdr(uint8_t *b, unsigned kind, uint32_t sender, uint64_t iter, uint32_t fp)
{
    memset(b, 0, GOSSIP_HEADER_BYTES);
    memcpy(b, "LPGS", 4);
    b[4] = GOSSIP_VERSION;
    b[5] = (uint8_t)kind;
    b[6] = 1; /* push-sum */
    for (int i = 0; i < 4; i++)
        b[8 + i] = (uint8_t)(sender >> (8 * i));
    for (int i = 0; i < 8; i++)
        b[12 + i] = (uint8_t)(iter >> (8 * i));
    double one = 1.0;
    memcpy(b + 20, &one, 8);
    for (int i = 0; i < 4; i++)
        b[28 + i] = (uint8_t)(fp >> (8 * i));
}

/* CURVE keys of a member (the attacker's own) and of the target. */
typedef struct {
    uint8_t pub[32], sec[32], server[32];
} s_keys;

static void *s_dealer_k(void *ctx, const char *id, int port, const s_keys *k)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    char ep[64];
    int zero = 0, hwm = 100000;
    assert_non_null(d);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id));
    if (k) {
        zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, k->server, 32);
        zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, k->pub, 32);
        zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, k->sec, 32);
    }
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    assert_int_equal(zmq_connect(d, ep), 0);
    return d;
}

/* A GOSSIP message of the cnn layout for iteration iter whose first value
 * is NaN (owned). */
static uint8_t *s_nan_gossip(uint32_t sender, uint64_t iter, uint32_t *fp, size_t *len)
{
    char err[512];
    node_model_opts mo;
    node_model_opts_defaults(&mo);
    mo.model = NODE_ARCH_CNN;
    nn_model *m = node_model_build(&mo, 1, 28, 28, 10, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    const nn_arena *L = nn_model_params(m);
    *fp = gossip_layout_fingerprint(L);
    gossip_cblock *blk = nn_xcalloc(L->nviews, sizeof *blk);
    float *vals = nn_xcalloc(L->numel, sizeof(float));
    for (size_t k = 0; k < L->numel; k++)
        vals[k] = NAN;
    for (size_t v = 0; v < L->nviews; v++)
        blk[v] = (gossip_cblock){GOSSIP_BLK_DENSE_F32, (uint32_t)L->views[v].numel,
                                 (uint32_t)L->views[v].numel, NULL, vals + L->views[v].offset,
                                 NULL, NULL};
    gossip_header h = {GOSSIP_VERSION, GOSSIP_MSG_GOSSIP, GOSSIP_FLAG_PUSH_SUM, sender, iter,
                       1.0, *fp, 0, 0, 0};
    gossip_buf gb = {0};
    gossip_msg_encode(&h, blk, L->nviews, &gb);
    uint8_t *out = nn_xmalloc(gb.len);
    memcpy(out, gb.data, gb.len);
    *len = gb.len;
    gossip_buf_free(&gb);
    free(vals);
    free(blk);
    nn_model_destroy(&m);
    return out;
}

static int s_log_has(const char *path, const char *what)
{
    char *s = tk_slurp(path);
    int has = strstr(s, what) != NULL;
    free(s);
    return has;
}

/* The last value of "key": in a metrics file, or -1. */
static long s_metric(const char *path, const char *key)
{
    char *met = tk_slurp(path), *q = NULL, pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (char *p = strstr(met, pat); p; p = strstr(p + 1, pat))
        q = p;
    long v = q ? strtol(q + strlen(pat), NULL, 10) : -1;
    free(met);
    return v;
}

/* The hostile peer: DEALERs under the routing id "n0" (a live neighbour of
 * the target) at the target's port; with k, CURVE clients with a member's
 * own keys.  A silent impostor that only connects; a valid HELLO and 20000
 * malformed header-only control messages; 400 well-framed GOSSIP messages full
 * of NaN; 20 spoofed HELLOs for iteration 0 and one for another model;
 * raw junk on the port. */
static void s_attack(int port, const s_keys *k)
{
    uint32_t fp;
    size_t nanlen;
    uint8_t *nan = s_nan_gossip(0, 0, &fp, &nanlen);
    void *ctx = zmq_ctx_new();
    uint8_t b[GOSSIP_HEADER_BYTES];

    /* 1: a silent impostor as n0 */
    void *silent = s_dealer_k(ctx, "n0", port, k);
    usleep(1500000);
    /* 2: HELLO, then malformed control messages, as n0 */
    void *d = s_dealer_k(ctx, "n0", port, k);
    s_hdr(b, GOSSIP_MSG_HELLO, 0, 0, fp);
    zmq_send(d, b, sizeof b, 0);
    for (int i = 0; i < 20000; i++) {
        s_hdr(b, (unsigned)(i % 9), 0, (uint64_t)i, fp);
        b[6] = (uint8_t)i;
        b[36] = (uint8_t)(i * 7);
        zmq_send(d, b, sizeof b, ZMQ_DONTWAIT);
        if (i % 2000 == 0)
            usleep(100000);
    }
    usleep(500000);
    zmq_close(d);
    /* 3: a flood of NaN GOSSIP as n0 */
    d = s_dealer_k(ctx, "n0", port, k);
    for (int i = 0; i < 400; i++) {
        uint64_t it = (uint64_t)i / 4;
        memcpy(nan + 12, &it, 8);
        zmq_send(d, nan, nanlen, ZMQ_DONTWAIT);
        if (i % 50 == 0)
            usleep(100000);
    }
    usleep(500000);
    zmq_close(d);
    /* 4: spoofed HELLOs for iteration 0 as n0, then a foreign layout */
    d = s_dealer_k(ctx, "n0", port, k);
    for (int i = 0; i < 20; i++) {
        s_hdr(b, GOSSIP_MSG_HELLO, 0, 0, fp);
        zmq_send(d, b, sizeof b, ZMQ_DONTWAIT);
        usleep(20000);
    }
    s_hdr(b, GOSSIP_MSG_HELLO, 0, 0, fp ^ 1);
    zmq_send(d, b, sizeof b, ZMQ_DONTWAIT);
    usleep(500000);
    zmq_close(d);
    zmq_close(silent);
    zmq_ctx_term(ctx);
    free(nan);
    /* 5: bytes that are not ZMTP */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        char junk[4096];
        memset(junk, 0xff, sizeof junk);
        ssize_t w = write(fd, junk, sizeof junk);
        (void)w;
        usleep(200000);
    }
    if (fd >= 0)
        close(fd);
}

/* ---- the join poisoner ------------------------------------------------------------ */

/* What a whole state of the cnn is: its layout fingerprint and float count
 * (parameters and the model's extra floats, as the link sends them). */
static void s_cnn_state(uint32_t *fp, size_t *nstate)
{
    char err[512];
    node_model_opts mo;
    node_model_opts_defaults(&mo);
    mo.model = NODE_ARCH_CNN;
    nn_model *m = node_model_build(&mo, 1, 28, 28, 10, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    nn_arena *buf = nn_model_buffers(m);
    *fp = gossip_layout_fingerprint(nn_model_params(m));
    *nstate = nn_model_params(m)->numel + (buf && buf->nviews ? buf->numel : 0);
    nn_model_destroy(&m);
}

#define S_POISONERS 8

/* The join poisoner: S_POISONERS DEALERs under the routing id of rank
 * `as` ("n<as>"), made before the target starts, reconnecting every
 * millisecond (ZMQ_RECONNECT_IVL 1) so that one of them holds the id on
 * the target's fresh port before the real node's DEALER gets there.
 * Every 50 ms each says HELLO, HELLO_ACK (join) and PING at iteration
 * `claim` (half of them: 10^12) and a LINK_PROOF with a made-up token;
 * every STATE_REQ it gets, and every second unasked (to race the real
 * node's answer), it sends a whole, CRC-correct state of all 1.0 at that
 * iteration. */
typedef struct {
    void    *ctx, *d[S_POISONERS];
    uint32_t as, fp;
    size_t   nstate;
    uint64_t claim;
    int      reqs;
    double   push;  /* next unasked push of the state from every socket */
} s_poisoner;

static void s_poison_start(s_poisoner *z, int port, uint32_t as, uint64_t claim, const s_keys *k)
{
    memset(z, 0, sizeof *z);
    z->as = as;
    z->claim = claim;
    s_cnn_state(&z->fp, &z->nstate);
    z->ctx = zmq_ctx_new();
    char id[16];
    snprintf(id, sizeof id, "n%u", as);
    int one = 1;
    for (int i = 0; i < S_POISONERS; i++) {
        z->d[i] = s_dealer_k(z->ctx, id, port, k);
        zmq_setsockopt(z->d[i], ZMQ_RECONNECT_IVL, &one, sizeof one);
    }
}

static void s_poison_send(void *d, const gossip_buf *b)
{
    zmq_send(d, b->data, b->len, ZMQ_DONTWAIT);
}

/* The poisoner at work for `seconds`. */
static void s_poison_run(s_poisoner *z, double seconds)
{
    gossip_buf b = {0}, bytes = {0};
    float *one = nn_xmalloc(z->nstate * sizeof *one);
    for (size_t i = 0; i < z->nstate; i++)
        one[i] = 1.0f;
    uint32_t crc = gossip_state_pack(one, z->nstate, &bytes);
    double t0 = nn_now(), next = 0;
    uint8_t in[256];
    while (nn_now() - t0 < seconds) {
        for (int i = 0; i < S_POISONERS; i++) {
            if (nn_now() >= next) {
                uint64_t claim = i % 2 ? z->claim : 1000000000000ull;
                gossip_msg_encode_hello(GOSSIP_MSG_HELLO, z->as, claim, z->fp,
                                        0x5eed0000ULL + (uint64_t)i, &b);
                s_poison_send(z->d[i], &b);
                gossip_msg_encode_hello_ack(z->as, claim, z->fp, 0x5eed0000ULL + (uint64_t)i,
                                            GOSSIP_HELLO_JOIN, &b);
                s_poison_send(z->d[i], &b);
                gossip_msg_encode_control(GOSSIP_MSG_PING, z->as, claim, z->fp, &b);
                s_poison_send(z->d[i], &b);
                gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, z->as, 0, z->fp,
                                       0xbadc0ffeeULL + (uint64_t)i, &b);
                s_poison_send(z->d[i], &b);
            }
            int len = zmq_recv(z->d[i], in, sizeof in, ZMQ_DONTWAIT);
            int asked = len >= GOSSIP_HEADER_BYTES && in[5] == GOSSIP_MSG_STATE_REQ;
            z->reqs += asked;
            if (!asked && nn_now() < z->push)
                continue;
            uint64_t claim = i % 2 ? z->claim : 1000000000000ull;
            for (size_t c = 0; gossip_state_chunk_msg(z->as, claim, z->fp, &bytes, crc,
                                                      GOSSIP_STATE_CHUNK_MAX, c, &b) > 0; c++)
                s_poison_send(z->d[i], &b);
        }
        if (nn_now() >= z->push)
            z->push = nn_now() + 1.0;
        if (nn_now() >= next)
            next = nn_now() + 0.05;
        usleep(1000);
    }
    free(one);
    gossip_buf_free(&b);
    gossip_buf_free(&bytes);
}

static void s_poison_stop(s_poisoner *z)
{
    for (int i = 0; i < S_POISONERS; i++)
        zmq_close(z->d[i]);
    zmq_ctx_term(z->ctx);
}

/* ---- a hostile peer under a live neighbour's id ------------------------------------ */

static void test_contested_id(void **state)
{
    (void)state;
    const int n = 3, batch = 8, iters = 400;
    int ports[3];
    char topo[512], out[512], subset[32], bs[16], logs[3][600];
    snprintf(topo, sizeof topo, "%s/ring3.yaml", s_dir);
    snprintf(out, sizeof out, "%s/run", s_dir);
    assert_int_equal(tk_topo_loopback(topo, n, "graph:\n  generator: undirected_ring\n", ports), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[] = {"--algo", "choco", "--compress", "identity", "--model", "cnn",
                      "--train-subset", subset, "--batch", bs, "--epochs", "1", "--lr", "0.05",
                      "--no-eval", "--peer-timeout", "3", "--timeout", "60", "--out", out, NULL};
    pid_t pid[3];
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/node%d.txt", s_dir, i);
        assert_true((pid[i] = tk_node(topo, i, common, NULL, logs[i])) > 0);
    }
    double t0 = nn_now();
    while (!s_log_has(logs[1], "start barrier passed") && nn_now() - t0 < 60 * tk_time_scale())
        usleep(50000);
    s_attack(ports[1], NULL);
    int status[TK_MAXPROC];
    int rc = tk_wait_all(240, status);
    int ok = rc == 0;
    for (int i = 0; i < n; i++)
        ok = ok && status[i] == 0;
    if (!ok) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        fail_msg("not every node finished cleanly: %d %d %d", status[0], status[1], status[2]);
    }
    (void)pid;
    char met[700];
    snprintf(met, sizeof met, "%s/metrics-1.jsonl", out);
    long rejected = s_metric(met, "rejected"), contested = s_metric(met, "rejected_contested");
    long down = s_metric(met, "down_events"), closed = s_metric(met, "closed_silent");
    printf("n1: rejected %ld, of which contested %ld; silent connections closed %ld; "
           "down_events %ld\n", rejected, contested, closed, down);
    /* the impostors' connections never carried n0's id (no handover):
     * nothing of theirs was handled as n0's, n0 was never cut off, no
     * spoofed HELLO was taken for a restart, and nothing crashed */
    assert_int_equal(down, 0);
    assert_true(contested + closed >= 1 && rejected >= contested);
    char lf[700];
    snprintf(lf, sizeof lf, "%s/log-1.txt", out); /* gossip_net logs there */
    assert_true(s_log_has(lf, "contested id"));
    assert_false(s_log_has(logs[1], "(re)starts"));
}

/* ---- the join poisoner against a latecomer ---------------------------------------- */

/* Four nodes on an undirected ring, n3 started 1.5 s after the others
 * (it joins the run in progress), the poisoner under n0's id (the first
 * holder n3 asks) on n3's fresh port from before n3 starts until 12 s
 * later.  Before: n3 took the
 * poisoner's all-1.0 model (or jumped to iteration 10^12) and every node
 * ended at 10%.  Now: every node exits 0, n3 drops what comes under n0's
 * id on its port without the proof of the id (or refuses the poisoner's
 * connection as contested, when n0's DEALER got there first), asks for
 * states over its DEALERs only, joins within the run, and its final model
 * is as close to the average as the others'. */
static void test_join_poisoning(void **state)
{
    (void)state;
    /* the latecomer joins well before the end, and after the others started:
     * an emulated run (tk_time_scale) is slower, its start window longer */
    const double f = tk_time_scale();
    const int n = 4, late = 3, batch = 8, iters = f > 1 ? 150 : 600;
    int ports[4];
    char topo[512], out[512], subset[32], bs[16], logs[4][600];
    snprintf(topo, sizeof topo, "%s/ring4.yaml", s_dir);
    snprintf(out, sizeof out, "%s/run", s_dir);
    assert_int_equal(tk_topo_loopback(topo, n, "graph:\n  generator: undirected_ring\n", ports), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[] = {"--algo", "choco", "--compress", "topk:0.1+q8", "--eta", "0.1",
                      "--model", "cnn", "--train-subset", subset, "--batch", bs, "--epochs", "1",
                      "--lr", "0.05", "--seed", "3", "--no-eval", "--start-window", "2",
                      "--peer-timeout", "3", "--timeout", "60", "--out", out, NULL};
    for (int i = 0; i < n; i++)
        snprintf(logs[i], sizeof logs[i], "%s/node%d.txt", s_dir, i);
    for (int i = 0; i < n; i++)
        if (i != late)
            assert_true(tk_node(topo, i, common, NULL, logs[i]) > 0);
    if (!tk_wait_log(logs[0], "start barrier passed", 60)) {
        tk_dump(logs[0]);
        fail_msg("the quorum of 3 never started");
    }
    usleep((useconds_t)(1.5e6 * f));
    s_poisoner z;
    s_poison_start(&z, ports[late], 0, (uint64_t)iters - 5, NULL);
    assert_true(tk_node(topo, late, common, NULL, logs[late]) > 0);
    s_poison_run(&z, 12 * f);
    s_poison_stop(&z);
    int status[TK_MAXPROC];
    int rc = tk_wait_all(240, status);
    if (rc != 0 || status[0] || status[1] || status[2] || status[3]) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        fail_msg("not every node finished (rc %d: %d %d %d %d)", rc, status[0], status[1],
                 status[2], status[3]);
    }
    char *ll = tk_slurp(logs[late]);
    const char *j = strstr(ll, "joined at iteration ");
    if (!j) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]); /* whole logs: fail_msg's buffer cuts them */
        fail_msg("the latecomer (n%d) did not join", late);
    }
    long T = strtol(j + strlen("joined at iteration "), NULL, 10);
    char met[700];
    snprintf(met, sizeof met, "%s/metrics-%d.jsonl", out, late);
    long unproven = s_metric(met, "unproven"), contested = s_metric(met, "rejected_contested") +
                                                           s_metric(met, "closed_silent");
    double dist[4], others = 0;
    assert_true(tk_model_spread(out, n, dist) >= 0);
    for (int i = 0; i < n; i++)
        if (i != late && dist[i] > others)
            others = dist[i];
    printf("latecomer joined at iteration %ld of %d; the poisoner got %d STATE_REQs; %ld "
           "messages dropped unproven, %ld connections refused as contested; distances to the "
           "average %.4f (others' max) and %.4f (the latecomer)\n", T, iters, z.reqs, unproven,
           contested, others, dist[late]);
    /* whichever of the poisoner and n0's DEALER reached n3's port first
     * holds n0's id there: the poisoner's messages are dropped unproven,
     * or its connection is refused as a second one under a held id */
    int refused = (unproven >= 1 && strstr(ll, "without the proof of its id")) || contested >= 1;
    if (T <= 0 || T >= iters - 20 || z.reqs != 0 || !refused || !isfinite(dist[late]) ||
        dist[late] > fmax(2.0 * others, 0.02)) {
        tk_dump(logs[late]);
        fail_msg("the latecomer was poisoned or did not refuse the poisoner");
    }
    free(ll);
}

/* ---- cut off: frozen past the neighbours' end ------------------------------------- */

static void test_cut_off(void **state)
{
    (void)state;
    const int n = 3, batch = 8, iters = 150;
    int ports[3];
    char topo[512], out[512], subset[32], bs[16], logs[3][600];
    snprintf(topo, sizeof topo, "%s/ring3.yaml", s_dir);
    snprintf(out, sizeof out, "%s/run", s_dir);
    assert_int_equal(tk_topo_loopback(topo, n, "graph:\n  generator: undirected_ring\n", ports), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[] = {"--algo", "choco", "--compress", "identity", "--model", "cnn",
                      "--train-subset", subset, "--batch", bs, "--epochs", "1", "--lr", "0.05",
                      "--no-eval", "--peer-timeout", "1", "--timeout", "30", "--out", out, NULL};
    pid_t pid[3];
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/node%d.txt", s_dir, i);
        assert_true((pid[i] = tk_node(topo, i, common, NULL, logs[i])) > 0);
    }
    double t0 = nn_now();
    while (!s_log_has(logs[2], "start barrier passed") && nn_now() - t0 < 60 * tk_time_scale())
        usleep(20000);
    usleep(300000);
    kill(pid[2], SIGSTOP); /* frozen: the others declare it down and finish */
    int st0 = tk_wait(pid[0], 180), st1 = tk_wait(pid[1], 180);
    kill(pid[2], SIGCONT);
    int st2 = tk_wait(pid[2], 180);
    if (st0 != 0 || st1 != 0 || st2 != 3) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        fail_msg("expected exit 0, 0, 3 (n2 cut off), got %d %d %d", st0, st1, st2);
    }
    assert_true(s_log_has(logs[2], "cut off: nothing of any of its 2 neighbours"));
    char met[700];
    snprintf(met, sizeof met, "%s/metrics-2.jsonl", out);
    assert_true(s_metric(met, "isolated_rounds") > 0);
}

/* ---- the drill: a live 4-node run under attack, with and without CURVE -------------- */

/* One 4-node run (undirected ring, choco, cnn) in dir; with curve, keys
 * from `lpgossip keygen`.  mode 1: s_attack against n1 as n0 (with CURVE
 * as member n2, a neighbour of n1, with its own keys); mode 2: n3 starts
 * 1.5 s after the others (a latecomer: it joins the run); mode 3: the
 * same with the join poisoner under n0's id on n3's port (with CURVE as
 * member n2).  Fills the exit statuses, the target's counters and the
 * averaged model's accuracy. */
typedef struct {
    int    status[4];
    long   rejected, contested, auth, nonfinite, down, unproven, join_iter;
    double acc;
} s_drill_run;

/* The drill's topology file (and keys) in dir; ports, pub and sec filled. */
static void s_drill_files(const char *dir, int curve, char *topo, size_t topolen, int *ports,
                          char pub[4][41], char sec[4][620])
{
    const int n = 4;
    char key[4][600];
    assert_int_equal(mkdir(dir, 0700), 0);
    for (int i = 0; i < n && curve; i++) {
        char log[700];
        snprintf(key[i], sizeof key[i], "%s/k%d", dir, i);
        assert_true(snprintf(sec[i], 620, "%s_secret", key[i]) < 620);
        snprintf(log, sizeof log, "%s/keygen%d.txt", dir, i);
        char *args[] = {"lpgossip", "keygen", key[i], NULL};
        assert_int_equal(tk_wait(tk_spawn(NULL, args, log, -1), 30), 0);
        char *txt = tk_slurp(key[i]), *q = strstr(txt, "public-key = \"");
        assert_non_null(q);
        memcpy(pub[i], q + strlen("public-key = \""), 40);
        pub[i][40] = '\0';
        free(txt);
    }
    snprintf(topo, topolen, "%s/ring4.yaml", dir);
    FILE *f = fopen(topo, "w");
    assert_non_null(f);
    fprintf(f, "%snodes:\n", curve ? "security: curve\n" : "");
    for (int i = 0; i < n; i++) {
        ports[i] = tk_free_port();
        fprintf(f, "  - {id: n%d, endpoint: \"tcp://127.0.0.1:%d\"", i, ports[i]);
        if (curve)
            fprintf(f, ", key: '%s'", pub[i]);
        fprintf(f, "}\n");
    }
    fprintf(f, "graph:\n  generator: undirected_ring\n");
    fclose(f);
}

/* One drill node: 800 iterations (about 15 s here), longer than the join
 * poisoner's 12 s hold on the latecomer's port, which keeps n0's id from
 * it meanwhile (plaintext): the latecomer must still find a holder. */
static void s_drill_node(const char *topo, int i, const char *eta, const char *out,
                         const char *sec, const char *log)
{
    char rk[16], *args[40];
    int a = 0;
    snprintf(rk, sizeof rk, "%d", i);
    char *base[] = {"lpgossip", "node", "--topology", (char *)topo, "--rank", rk, "--algo",
                    "choco", "--compress", "topk:0.1+q8", "--eta", (char *)eta, "--model", "cnn",
                    "--train-subset", "51200", "--batch", "16", "--epochs", "1", "--lr", "0.05",
                    "--seed", "1", "--no-eval", "--peer-timeout", "3", "--timeout", "60",
                    "--staleness", "0", "--out", (char *)out, NULL};
    for (int k = 0; base[k]; k++)
        args[a++] = base[k];
    if (sec) {
        args[a++] = "--cert";
        args[a++] = (char *)sec;
    }
    args[a] = NULL;
    assert_true(tk_spawn(NULL, args, log, -1) > 0);
}

/* Member `who`'s keys (with CURVE), to reach `target`'s port. */
static void s_member_keys(s_keys *k, const char *sec, const char *target_pub)
{
    zcert_t *c = zcert_load(sec);
    assert_non_null(c);
    memcpy(k->pub, zcert_public_key(c), 32);
    memcpy(k->sec, zcert_secret_key(c), 32);
    zcert_destroy(&c);
    assert_non_null(zmq_z85_decode(k->server, target_pub));
}

static void s_drill(const char *dir, int curve, int mode, s_drill_run *res)
{
    const int n = 4, target = mode >= 2 ? 3 : 1, late = mode >= 2 ? 3 : -1;
    /* a join with eta 0.5 is fragile here (before these defences too, an
     * undisturbed CURVE latecomer ended at 10% in 2 of 2 runs): 0.1, as
     * test_node_join */
    const char *eta = mode >= 2 ? "0.1" : "0.5";
    char topo[600], pub[4][41], sec[4][620], logs[4][620], out[620];
    int ports[4];
    s_drill_files(dir, curve, topo, sizeof topo, ports, pub, sec);
    snprintf(out, sizeof out, "%s/run", dir);
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/node%d.txt", dir, i);
        if (i != late)
            s_drill_node(topo, i, eta, out, curve ? sec[i] : NULL, logs[i]);
    }
    s_keys k;
    if (curve && mode != 2)
        s_member_keys(&k, sec[2], pub[target]);
    if (mode == 1) {
        double t0 = nn_now();
        while (!s_log_has(logs[1], "start barrier passed") && nn_now() - t0 < 60 * tk_time_scale())
            usleep(50000);
        s_attack(ports[1], curve ? &k : NULL);
    } else if (mode >= 2) {
        assert_true(tk_wait_log(logs[0], "start barrier passed", 60));
        usleep(1500000);
        s_poisoner z;
        if (mode == 3)
            s_poison_start(&z, ports[late], 0, 150, curve ? &k : NULL);
        s_drill_node(topo, late, eta, out, curve ? sec[late] : NULL, logs[late]);
        if (mode == 3) {
            s_poison_run(&z, 12);
            s_poison_stop(&z);
        }
    }
    int st[TK_MAXPROC];
    assert_int_equal(tk_wait_all(600, st), 0);
    char met[700];
    snprintf(met, sizeof met, "%s/metrics-%d.jsonl", out, target);
    res->rejected = s_metric(met, "rejected");
    res->contested = s_metric(met, "rejected_contested") + s_metric(met, "closed_silent");
    res->auth = s_metric(met, "rejected_auth");
    res->nonfinite = s_metric(met, "refused_nonfinite");
    res->down = s_metric(met, "down_events");
    res->unproven = s_metric(met, "unproven");
    res->join_iter = s_metric(met, "join_iter");
    char m[4][700], elog[700];
    char *ev[12] = {"lpgossip", "eval", "--average", m[0], m[1], m[2], m[3], "--json", NULL};
    for (int i = 0; i < n; i++) {
        res->status[i] = st[i + (curve ? n : 0)];
        snprintf(m[i], sizeof m[i], "%s/model-%d.safetensors", out, i);
    }
    snprintf(elog, sizeof elog, "%s/eval.txt", dir);
    int est = tk_wait(tk_spawn(NULL, ev, elog, -1), 120);
    char *e = tk_slurp(elog), *q = strstr(e, "\"test_acc\":");
    res->acc = est == 0 && q ? strtod(q + strlen("\"test_acc\":"), NULL) : -1;
    free(e);
    tk_kill_all();
}

/* Pairs of runs, each undisturbed and attacked, plaintext and CURVE: the
 * hostile peer (s_attack, target n1) and the join poisoner (target: the
 * latecomer n3).  Goal: every exit status 0, accuracy within 1.5 points. */
static void test_drill(void **state)
{
    (void)state;
    if (!getenv("LPGOSSIP_DRILL"))
        skip(); /* minutes: scripts/attack runs it */
    const char *sec[2] = {"plain", "curve"};
    const char *runs[4] = {"undisturbed", "hostile peer", "latecomer", "latecomer + poisoner"};
    int ok = 1;
    printf("| security | run | exit statuses | target | rejected | contested | auth | "
           "non-finite | unproven | down events | join iteration | averaged accuracy |\n"
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int c = 0; c < 2; c++)
        for (int pair = 0; pair < 2; pair++) {
            s_drill_run r[2];
            for (int a = 0; a < 2; a++) {
                int mode = 2 * pair + a;
                char dir[600];
                snprintf(dir, sizeof dir, "%s/drill-%s-%d", s_dir, sec[c], mode);
                s_drill(dir, c, mode, &r[a]);
                printf("| %s | %s | %d %d %d %d | n%d | %ld | %ld | %ld | %ld | %ld | %ld | %ld | "
                       "%.2f%% |\n", sec[c], runs[mode], r[a].status[0], r[a].status[1],
                       r[a].status[2], r[a].status[3], mode >= 2 ? 3 : 1, r[a].rejected,
                       r[a].contested, r[a].auth, r[a].nonfinite, r[a].unproven, r[a].down,
                       r[a].join_iter, 100 * r[a].acc);
                fflush(stdout);
                for (int i = 0; i < 4; i++)
                    ok = ok && r[a].status[i] == 0;
            }
            double d = 100 * (r[1].acc - r[0].acc);
            printf("| %s | difference | | | | | | | | | | %+.2f points (goal: within 1.5) |\n",
                   sec[c], d);
            ok = ok && r[0].acc > 0 && r[1].acc > 0 && fabs(d) <= 1.5;
        }
    fflush(stdout);
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cut_off, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_contested_id, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_join_poisoning, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_drill, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
