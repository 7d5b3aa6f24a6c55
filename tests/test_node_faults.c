/* test_node_faults — `lpgossip node` processes on 127.0.0.1 under failures.
 *
 *   kill and rejoin: an 8-node directed ring (choco, topk:0.1+q8) with
 *     checkpoints; node 3 is SIGKILLed mid-training, its out-neighbour
 *     declares it down and the others go on; it is restarted with --resume
 *     and rejoins (jumping to their iteration, re-syncing public copies).
 *     Later node 6 is SIGKILLed and restarted at once, before anyone
 *     notices.  Every node finishes; the restarted nodes' final models are
 *     as close to the average as the others';
 *   resync over the network: 4 nodes on an undirected ring drop 10% of
 *     their gossip messages on purpose (--debug-drop), and each loses its
 *     first RESYNC answer (--debug-drop-resync): asked again, it sends it
 *     again, nobody stalls until a neighbour is declared down; the run
 *     completes and the public copies in the final checkpoints are
 *     bit-identical to their owners';
 *   hostile peer: the test plays node n2 of a 3-node graph at the socket
 *     level (a ROUTER at its endpoint, a DEALER with its id) and sends node
 *     n0 garbage, a forged sender, an unknown kind, a far-future iteration,
 *     a NaN payload, a replay, a stranger's connection and an oversized
 *     frame, then falls silent; n0 refuses and counts each, declares n2
 *     down, and finishes with n1 with a finite model;
 *   a non-finite step: node 2 gets a NaN in one batch (--debug-nan-at); the
 *     step is skipped and logged, nothing non-finite reaches the neighbours,
 *     everyone finishes with a finite model;
 *   CURVE: keys from `lpgossip keygen`; two members of a `security: curve`
 *     topology train together; an impostor with its own key posing as n1
 *     is refused at the handshake (and logged), so n0 never passes its start
 *     barrier; a node without --cert is refused at once.
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

#include <cmocka.h>
#include <zmq.h>

#include "tests/tk.h"
#include "tests/tk_run.h"

#include "gossip/gossip_codec.h"
#include "nn/nn_core.h"
#include "nn/nn_model.h"
#include "nn/nn_safetensors.h"
#include "node/node_common.h"

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    return tk_dir_setup(s_dir, sizeof s_dir, "faults");
}

static int s_teardown(void **state)
{
    (void)state;
    tk_dir_teardown(s_dir);
    return 0;
}

static int s_port(void)
{
    int p = tk_free_port();
    assert_true(p > 0);
    return p;
}

static uint64_t s_ckpt_iter(const char *path)
{
    char val[64], err[256];
    if (nn_safetensors_meta(path, "iter", val, sizeof val, err, sizeof err) != 0)
        return 0;
    return strtoull(val, NULL, 10);
}

/* The last value of counter `key` in a metrics file (asserted present). */
static uint64_t s_metric_last(const char *path, const char *key)
{
    char pat[64], *met = tk_slurp(path), *q = NULL;
    assert_non_null(met);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (char *r = strstr(met, pat); r; r = strstr(r + 1, pat))
        q = r;
    if (!q)
        fail_msg("%s has no %s", path, key);
    uint64_t v = strtoull(q + strlen(pat), NULL, 10);
    free(met);
    return v;
}

/* ---- kill -9 and rejoin ----------------------------------------------------------- */

static void test_kill_and_rejoin(void **state)
{
    (void)state;
    const int n = 8, victim = 3, batch = 8, iters = tk_quick() ? 220 : 300;
    /* 1 s finds the killed node fast; eight sanitized processes on two cores
     * (LPGOSSIP_QUICK runs) can stall a live one that long, so 3 s there */
    char ptimeout[8];
    snprintf(ptimeout, sizeof ptimeout, "%d", tk_quick() ? 3 : 1);
    char topo[512], out[512], subset[32], bs[16], logs[8][600], relog[600], ckpt[700];
    snprintf(topo, sizeof topo, "%s/ring8.yaml", s_dir);
    snprintf(out, sizeof out, "%s/run", s_dir);
    assert_int_equal(tk_topo_loopback(topo, n, "graph:\n  generator: directed_ring\n", NULL), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[] = {"--algo", "choco", "--compress", "topk:0.1+q8", "--eta", "0.15",
                      "--model", "cnn", "--train-subset", subset, "--batch", bs, "--epochs", "1",
                      "--lr", "0.05", "--seed", "3", "--no-eval", "--checkpoint-every", "10",
                      "--peer-timeout", ptimeout, "--timeout", "60", "--out", out, NULL};
    pid_t pid[8];
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/node%d.txt", s_dir, i);
        assert_true((pid[i] = tk_node(topo, i, common, NULL, logs[i])) > 0);
    }
    /* kill the victim once it has checkpointed iteration >= 40 */
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-%d.safetensors", out, victim);
    double t0 = nn_now();
    uint64_t at = 0;
    while ((at = s_ckpt_iter(ckpt)) < 40) {
        if (nn_now() - t0 > 120 * tk_time_scale() || tk_wait(pid[victim], 0) >= 0) {
            tk_dump(logs[victim]);
            fail_msg("node %d never reached iteration 40", victim);
        }
        usleep(20000);
    }
    tk_kill(pid[victim], SIGKILL);
    double killed = nn_now();
    /* the others go on; restart the victim once its out-neighbour gave up
     * on it */
    char *l4 = NULL;
    for (;;) {
        free(l4);
        l4 = tk_slurp(logs[victim + 1]);
        if (strstr(l4, "neighbour n3 (rank 3) is down") || nn_now() - killed > 60 * tk_time_scale())
            break;
        usleep(50000);
    }
    free(l4);
    double noticed = nn_now() - killed;
    snprintf(relog, sizeof relog, "%s/node%d-rejoin.txt", s_dir, victim);
    assert_true(tk_node(topo, victim, common, "--resume", relog) > 0);
    /* node 6 dies later and comes back at once, before anyone notices */
    const int quick = 6;
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-%d.safetensors", out, quick);
    while (s_ckpt_iter(ckpt) < 120 && nn_now() - killed < 120 * tk_time_scale() &&
           tk_wait(pid[quick], 0) < 0)
        usleep(20000);
    tk_kill(pid[quick], SIGKILL);
    char relog6[600];
    snprintf(relog6, sizeof relog6, "%s/node%d-rejoin.txt", s_dir, quick);
    assert_true(tk_node(topo, quick, common, "--resume", relog6) > 0);
    int status[TK_MAXPROC];
    int rc = tk_wait_all(tk_quick() ? 400 : 240, status);
    int ok = rc == 0;
    for (int i = 0; i < n; i++)
        if (i != victim && i != quick)
            ok = ok && status[i] == 0;
    ok = ok && status[victim] == 128 + SIGKILL && status[quick] == 128 + SIGKILL &&
         status[n] == 0 && status[n + 1] == 0;
    if (!ok) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        tk_dump(relog);
        tk_dump(relog6);
        for (int k = 0; k <= n + 1; k++)
            fprintf(stderr, "process %d: status %d\n", k, status[k]);
        fail_msg("not every node finished (rc %d)", rc);
    }
    printf("killed node %d at checkpoint iteration %llu; its out-neighbour noticed after %.1f s; "
           "node %d killed later and restarted at once; all done %.1f s after the first kill\n",
           victim, (unsigned long long)at, noticed, quick, nn_now() - killed);
    l4 = tk_slurp(logs[victim + 1]);
    char *lv = tk_slurp(relog), *l6 = tk_slurp(relog6);
    assert_non_null(strstr(l4, "neighbour n3 (rank 3) is down"));
    assert_non_null(strstr(l4, "neighbour n3 (rank 3) is back"));
    assert_non_null(strstr(lv, "rejoin passed"));
    assert_non_null(strstr(l6, "rejoin passed"));
    free(l4);
    free(lv);
    free(l6);
    /* consensus: distance of every node's model to the average */
    double dist[8];
    assert_true(tk_model_spread(out, n, dist) >= 0);
    double others = 0;
    for (int i = 0; i < n; i++) {
        if (i != victim && dist[i] > others)
            others = dist[i];
        printf("node %d: ||z - avg|| / ||avg|| = %.4f\n", i, dist[i]);
    }
    assert_true(isfinite(dist[victim]));
    assert_true(dist[victim] <= fmax(2.0 * others, 0.02));
}

/* ---- resync over the network --------------------------------------------------------- */

static void test_resync_over_network(void **state)
{
    (void)state;
    const int n = 4, batch = 8, iters = 120;
    char topo[512], out[512], subset[32], bs[16], its[16], logs[4][600];
    snprintf(topo, sizeof topo, "%s/ring4.yaml", s_dir);
    snprintf(out, sizeof out, "%s/drop", s_dir);
    assert_int_equal(tk_topo_loopback(topo, n, "graph:\n  generator: undirected_ring\n", NULL), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    snprintf(its, sizeof its, "%d", iters);
    char *common[] = {"--algo", "choco", "--compress", "topk:0.1+q8", "--eta", "0.15",
                      "--model", "cnn", "--train-subset", subset, "--batch", bs, "--epochs", "1",
                      "--lr", "0.05", "--no-eval", "--checkpoint-every", its, "--debug-drop",
                      "0.1", "--debug-drop-resync", "1", "--timeout", "60", "--out", out, NULL};
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/drop%d.txt", s_dir, i);
        assert_true(tk_node(topo, i, common, NULL, logs[i]) > 0);
    }
    int status[TK_MAXPROC];
    int rc = tk_wait_all(180, status);
    for (int i = 0; i < n; i++)
        if (rc != 0 || status[i] != 0) {
            for (int k = 0; k < n; k++)
                tk_dump(logs[k]);
            fail_msg("node %d: status %d", i, status[i]);
        }
    /* each node's first RESYNC was lost; the one who asked asked again and
     * was answered (logged as "again" when the answer is for the same
     * iteration, the answerer having waited on the asker): some node
     * answered twice at least, and nobody gave up on a neighbour */
    int again = 0;
    uint64_t most = 0;
    for (int i = 0; i < n; i++) {
        char *lg = tk_slurp(logs[i]), p[700];
        again += strstr(lg, "RESYNC to ") && strstr(lg, " again: it still asks");
        if (strstr(lg, "is down")) {
            tk_dump(logs[i]);
            fail_msg("node %d declared a neighbour down: a lost RESYNC stalled the run", i);
        }
        free(lg);
        snprintf(p, sizeof p, "%s/metrics-%d.jsonl", out, i);
        uint64_t sent = s_metric_last(p, "resyncs_sent");
        most = sent > most ? sent : most;
    }
    if (most < 2) {
        for (int k = 0; k < n; k++)
            tk_dump(logs[k]);
        fail_msg("no node sent a RESYNC after losing its first one");
    }
    /* every holder's copy equals the owner's own xhat, bit for bit */
    char p[700], err[512];
    snprintf(p, sizeof p, "%s/model-0.safetensors", out);
    nn_model *m = tk_model_load(p);
    assert_non_null(m);
    const nn_arena *L = nn_model_params(m);
    nn_arena self[4], copy;
    nn_arena_init(&copy);
    nn_arena_clone_layout(&copy, L);
    uint64_t resyncs = 0;
    for (int i = 0; i < n; i++) {
        nn_arena_init(&self[i]);
        nn_arena_clone_layout(&self[i], L);
        snprintf(p, sizeof p, "%s/ckpt-%d.safetensors", out, i);
        assert_int_equal(s_ckpt_iter(p), iters);
        nn_arena *a[1] = {&self[i]};
        const char *pre[1] = {"gossip.xhat.self."};
        if (nn_safetensors_load_prefixed(p, a, pre, 1, err, sizeof err) != 0)
            fail_msg("%s", err);
        snprintf(p, sizeof p, "%s/metrics-%d.jsonl", out, i);
        resyncs += s_metric_last(p, "resyncs_recv");
    }
    int pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (j != (i + 1) % n && j != (i + n - 1) % n)
                continue;
            char pre[64];
            snprintf(p, sizeof p, "%s/ckpt-%d.safetensors", out, i);
            snprintf(pre, sizeof pre, "gossip.xhat.%d.", j);
            nn_arena *a[1] = {&copy};
            const char *pres[1] = {pre};
            if (nn_safetensors_load_prefixed(p, a, pres, 1, err, sizeof err) != 0)
                fail_msg("%s", err);
            if (memcmp(copy.data, self[j].data, L->numel * sizeof(float)) != 0)
                fail_msg("node %d's copy of node %d differs from node %d's own", i, j, j);
            pairs++;
        }
    printf("10%% of gossip messages dropped: %llu RESYNCs applied (sent again for the same iteration by %d "
           "node(s)); %d copies bit-identical to their owners\n",
           (unsigned long long)resyncs, again, pairs);
    assert_true(resyncs > 0);
    assert_int_equal(pairs, 8);
    for (int i = 0; i < n; i++)
        nn_arena_free(&self[i]);
    nn_arena_free(&copy);
    nn_model_destroy(&m);
}

/* ---- a hostile peer ------------------------------------------------------------------ */

static void s_hdr(uint8_t *b, unsigned kind, uint32_t sender, uint64_t iter, uint32_t fp,
                  uint32_t nblocks, uint32_t payload)
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
    memcpy(b + 20, &one, 8); /* little-endian hosts only (x86-64, arm64) */
    for (int i = 0; i < 4; i++) {
        b[28 + i] = (uint8_t)(fp >> (8 * i));
        b[32 + i] = (uint8_t)(nblocks >> (8 * i));
        b[36 + i] = (uint8_t)(payload >> (8 * i));
    }
}

static void s_send(void *sock, const void *b, size_t len)
{
    assert_true(zmq_send(sock, b, len, 0) == (int)len);
}

static void test_hostile_peer(void **state)
{
    (void)state;
    int ports[3];
    char topo[512], out[512], logs[2][600];
    snprintf(topo, sizeof topo, "%s/three.yaml", s_dir);
    snprintf(out, sizeof out, "%s/hostile", s_dir);
    /* n0 <-> n1 and n0 <-> n2; column stochastic (push-sum) */
    assert_int_equal(tk_topo_loopback(topo, 3, "graph:\n  matrix:\n"
                                                "    - [1/2, 1/2, 1/2]\n"
                                                "    - [1/4, 1/2, 0  ]\n"
                                                "    - [1/4, 0,   1/2]\n", ports), 0);
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    char ep[64];
    int zero = 0, tmo = 20000;
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[2]);
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    assert_int_equal(zmq_bind(router, ep), 0);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "n2", 2);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[0]);
    assert_int_equal(zmq_connect(dealer, ep), 0);
    const int batch = 8, iters = 150;
    char subset[32], bs[16];
    snprintf(subset, sizeof subset, "%d", 3 * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[] = {"--algo", "choco", "--compress", "identity", "--model", "cnn",
                      "--train-subset", subset, "--batch", bs, "--epochs", "1", "--lr", "0.05",
                      "--no-eval", "--peer-timeout", "3", "--timeout", "60", "--out", out, NULL};
    for (int i = 0; i < 2; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/hostile%d.txt", s_dir, i);
        assert_true(tk_node(topo, i, common, NULL, logs[i]) > 0);
    }
    /* play n2 through the start: answer n0's HELLO, say ours */
    uint8_t id[16], msg[256], b[GOSSIP_HEADER_BYTES];
    int idlen = zmq_recv(router, id, sizeof id, 0);
    int len = zmq_recv(router, msg, sizeof msg, 0);
    if (idlen != 2 || len != GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES ||
        msg[5] != GOSSIP_MSG_HELLO) {
        tk_dump(logs[0]);
        fail_msg("expected n0's HELLO, got %d/%d bytes", idlen, len);
    }
    uint32_t fp = (uint32_t)msg[28] | (uint32_t)msg[29] << 8 | (uint32_t)msg[30] << 16 |
                  (uint32_t)msg[31] << 24;
    /* n2 is n0's neighbour both ways: prove the id on n0's port with the
     * token of n0's LINK_REQ (docs/node.md "Ids on a plaintext port") */
    uint64_t token = 0;
    for (int k = 0; k < 20 && !token; k++) {
        int il = zmq_recv(router, id, sizeof id, 0), ml = zmq_recv(router, msg, sizeof msg, 0);
        if (il == 2 && ml >= GOSSIP_HEADER_BYTES && msg[5] == GOSSIP_MSG_LINK_REQ)
            token = gossip_msg_link_token(msg, (size_t)ml);
    }
    if (!token) {
        tk_dump(logs[0]);
        fail_msg("expected n0's LINK_REQ after its HELLO");
    }
    gossip_buf proof = {0};
    gossip_msg_encode_link(GOSSIP_MSG_LINK_PROOF, 2, 0, fp, token, &proof);
    s_send(dealer, proof.data, proof.len);
    gossip_buf_free(&proof);
    s_hdr(b, GOSSIP_MSG_HELLO_ACK, 2, 0, fp, 0, 0);
    assert_true(zmq_send(router, id, 2, ZMQ_SNDMORE) == 2);
    s_send(router, b, sizeof b);
    s_hdr(b, GOSSIP_MSG_HELLO, 2, 0, fp, 0, 0);
    s_send(dealer, b, sizeof b);
    char *l0 = NULL;
    double t0 = nn_now();
    for (;;) { /* n0 past its start (n1 may be slow to come up) */
        free(l0);
        l0 = tk_slurp(logs[0]);
        if (strstr(l0, "start barrier passed") || nn_now() - t0 > 60 * tk_time_scale())
            break;
        usleep(50000);
    }
    /* now the hostile part */
    int expect = 0;
    uint8_t garbage[100];
    for (size_t k = 0; k < sizeof garbage; k++)
        garbage[k] = (uint8_t)(k * 37 + 11);
    s_send(dealer, garbage, sizeof garbage), expect++;            /* not lpgossip */
    s_hdr(b, 99, 2, 0, fp, 0, 0);
    s_send(dealer, b, sizeof b), expect++;                        /* unknown kind */
    s_hdr(b, GOSSIP_MSG_PING, 1, 0, fp, 0, 0);
    s_send(dealer, b, sizeof b), expect++;                        /* forged sender */
    s_hdr(b, GOSSIP_MSG_HELLO, 2, 0, fp ^ 1, 0, 0);
    s_send(dealer, b, sizeof b), expect++;                        /* another model */
    s_hdr(b, GOSSIP_MSG_BYE_ACK, 2, 0, fp, 0, 0);
    s_send(dealer, b, sizeof b), expect++;                        /* wrong channel */
    /* an instance nonce, then the same instance "restarting" elsewhere: a
     * replayed or spoofed HELLO, which must not reset n0's copy of n2 */
    uint8_t hn[GOSSIP_HEADER_BYTES + GOSSIP_NONCE_BYTES];
    s_hdr(hn, GOSSIP_MSG_HELLO, 2, 0, fp, 0, GOSSIP_NONCE_BYTES);
    memcpy(hn + GOSSIP_HEADER_BYTES, "\x11\x22\x33\x44\x55\x66\x77\x88", 8);
    s_send(dealer, hn, sizeof hn);
    s_hdr(hn, GOSSIP_MSG_HELLO, 2, 5, fp, 0, GOSSIP_NONCE_BYTES);
    s_send(dealer, hn, sizeof hn), expect++;                      /* same nonce, other start */
    /* a GOSSIP of the right layout with zeros, and a NaN copy of it */
    char mp[700], err[512];
    snprintf(mp, sizeof mp, "%s/layout.safetensors", s_dir);
    node_model_opts mo;
    node_model_opts_defaults(&mo);
    mo.model = NODE_ARCH_CNN;
    nn_model *m = node_model_build(&mo, 1, 28, 28, 10, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    const nn_arena *L = nn_model_params(m);
    gossip_cblock *blk = nn_xcalloc(L->nviews, sizeof *blk);
    float *zeros = nn_xcalloc(L->numel, sizeof(float));
    for (size_t v = 0; v < L->nviews; v++)
        blk[v] = (gossip_cblock){GOSSIP_BLK_DENSE_F32, (uint32_t)L->views[v].numel,
                                 (uint32_t)L->views[v].numel, NULL, zeros + L->views[v].offset,
                                 NULL, NULL};
    gossip_header h = {GOSSIP_VERSION, GOSSIP_MSG_GOSSIP, GOSSIP_FLAG_PUSH_SUM, 2, 1000000000ull,
                       1.0, fp, 0, 0, 0};
    gossip_buf gb = {0};
    gossip_msg_encode(&h, blk, L->nviews, &gb);
    if (gossip_layout_fingerprint(L) != fp)
        fail_msg("the test's cnn layout differs from the node's (fingerprint)");
    s_send(dealer, gb.data, gb.len), expect++;                    /* far future */
    h.iter = 0;
    gossip_msg_encode(&h, blk, L->nviews, &gb);
    uint8_t *nan = nn_xmalloc(gb.len);
    memcpy(nan, gb.data, gb.len);
    size_t off = GOSSIP_HEADER_BYTES + 1; /* type, then the varint numel */
    while (nan[off] & 0x80)
        off++;
    off++;
    float qnan = NAN;
    memcpy(nan + off, &qnan, 4);
    s_send(dealer, nan, gb.len), expect++;                        /* NaN value */
    usleep(200000);
    /* a stranger's connection */
    void *stranger = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(stranger, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(stranger, ZMQ_ROUTING_ID, "mallory", 7);
    assert_int_equal(zmq_connect(stranger, ep), 0);
    s_hdr(b, GOSSIP_MSG_PING, 2, 0, fp, 0, 0);
    s_send(stranger, b, sizeof b);
    /* fall silent until n0 gives up on us, then replay a message twice */
    t0 = nn_now();
    for (;;) {
        free(l0);
        l0 = tk_slurp(logs[0]);
        if (strstr(l0, "neighbour n2 (rank 2) is down") || nn_now() - t0 > 60 * tk_time_scale())
            break;
        usleep(100000);
    }
    s_send(dealer, gb.data, gb.len);
    s_send(dealer, gb.data, gb.len), expect++;                    /* replay */
    /* an oversized frame: libzmq drops the connection (MAXMSGSIZE) */
    size_t big = 64u << 20;
    uint8_t *huge = calloc(1, big);
    assert_non_null(huge);
    zmq_send(dealer, huge, big, ZMQ_DONTWAIT);
    free(huge);
    int status[TK_MAXPROC];
    int rc = tk_wait_all(180, status);
    free(l0);
    l0 = tk_slurp(logs[0]);
    if (rc != 0 || status[0] != 0 || status[1] != 0) {
        tk_dump(logs[0]);
        tk_dump(logs[1]);
        fail_msg("n0/n1 did not finish cleanly: %d %d", status[0], status[1]);
    }
    snprintf(mp, sizeof mp, "%s/metrics-0.jsonl", out);
    char *met = tk_slurp(mp), *q = strstr(met, "\"rejected\":");
    assert_non_null(q);
    long rejected = strtol(q + strlen("\"rejected\":"), NULL, 10);
    /* the NaN GOSSIP of the id's holder is refused as non-finite, counted */
    char *nf = strstr(met, "\"refused_nonfinite\":");
    assert_non_null(nf);
    assert_true(strtol(nf + strlen("\"refused_nonfinite\":"), NULL, 10) >= 1);
    /* nothing of n2 was mixed in, and no push-sum mass drained into it */
    q = strstr(met, "\"psi\":");
    assert_non_null(q);
    double psi = strtod(q + strlen("\"psi\":"), NULL);
    printf("n0's final psi %.4f\n", psi);
    assert_true(psi > 0.2 && psi < 5);
    printf("n0 refused %ld messages (%d hostile ones sent, plus the stranger's)\n", rejected,
           expect);
    assert_true(rejected >= expect + 1);
    const char *must[] = {"not an lpgossip message", "claims to come from rank 1",
                          "too far ahead", "replayed or duplicate", "repeats the instance nonce",
                          "neighbour n2 (rank 2) is down"};
    for (size_t k = 0; k < sizeof must / sizeof must[0]; k++)
        if (!strstr(l0, must[k])) {
            tk_dump(logs[0]);
            fail_msg("n0's log lacks \"%s\"", must[k]);
        }
    assert_null(strstr(l0, "(re)starts at iteration 5"));
    snprintf(mp, sizeof mp, "%s/model-0.safetensors", out);
    nn_model *fin = tk_model_load(mp);
    assert_non_null(fin);
    const nn_arena *F = nn_model_params(fin);
    for (size_t k = 0; k < F->numel; k++)
        assert_true(isfinite(F->data[k]));
    nn_model_destroy(&fin);
    free(met);
    free(l0);
    free(nan);
    gossip_buf_free(&gb);
    free(zeros);
    free(blk);
    nn_model_destroy(&m);
    zmq_close(stranger);
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

/* ---- a non-finite step ---------------------------------------------------------- */

static void test_nan_step(void **state)
{
    (void)state;
    char topo[512], out[512], logs[4][600];
    snprintf(topo, sizeof topo, "%s/ring4.yaml", s_dir);
    snprintf(out, sizeof out, "%s/nan", s_dir);
    assert_int_equal(tk_topo_loopback(topo, 4, "graph:\n  generator: undirected_ring\n", NULL), 0);
    char *common[] = {"--algo", "choco", "--compress", "topk:0.1+q8", "--eta", "0.15",
                      "--model", "cnn", "--train-subset", "1280", "--batch", "8", "--epochs",
                      "1", "--no-eval", "--timeout", "60", "--out", out, NULL};
    for (int i = 0; i < 4; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/nan%d.txt", s_dir, i);
        assert_true(tk_node(topo, i, common, i == 2 ? "--debug-nan-at=5" : NULL, logs[i]) > 0);
    }
    int status[TK_MAXPROC];
    int rc = tk_wait_all(180, status);
    for (int i = 0; i < 4; i++)
        if (rc != 0 || status[i] != 0) {
            for (int k = 0; k < 4; k++)
                tk_dump(logs[k]);
            fail_msg("node %d: status %d", i, status[i]);
        }
    /* iteration 5's batch, or the next one's when 5 was a mix-only
     * catch-up iteration (bounded staleness: node 2 a step behind) */
    char *l2 = tk_slurp(logs[2]), mp[700];
    const char *nf = strstr(l2, ": the loss or a gradient is not finite"), *at = nf;
    while (at && at > l2 && at[-1] >= '0' && at[-1] <= '9')
        at--;
    long when = nf && at < nf && at - l2 >= 10 && !strncmp(at - 10, "iteration ", 10)
                    ? strtol(at, NULL, 10) : -1;
    if (when < 5 || when > 8) {
        tk_dump(logs[2]);
        fail_msg("node 2 reported no non-finite step at iteration 5 (or just after): %ld", when);
    }
    free(l2);
    snprintf(mp, sizeof mp, "%s/metrics-2.jsonl", out);
    char *met = tk_slurp(mp), *q = strstr(met, "\"skipped_steps\":");
    assert_non_null(q);
    assert_int_equal(strtol(q + strlen("\"skipped_steps\":"), NULL, 10), 1);
    free(met);
    for (int i = 0; i < 4; i++) {
        snprintf(mp, sizeof mp, "%s/model-%d.safetensors", out, i);
        nn_model *m = tk_model_load(mp);
        assert_non_null(m);
        const nn_arena *P = nn_model_params(m);
        for (size_t k = 0; k < P->numel; k++)
            if (!isfinite(P->data[k]))
                fail_msg("node %d: parameter %zu is %g", i, k, (double)P->data[k]);
        nn_model_destroy(&m);
    }
}

/* ---- CURVE ------------------------------------------------------------------------ */

static void s_curve_topo(const char *path, const int *ports, const char *k0, const char *k1)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "security: curve\nnodes:\n"
               "  - {id: n0, endpoint: \"tcp://127.0.0.1:%d\", key: '%s'}\n"
               "  - {id: n1, endpoint: \"tcp://127.0.0.1:%d\", key: '%s'}\n"
               "graph: {generator: complete}\n", ports[0], k0, ports[1], k1);
    fclose(f);
}

static void test_curve_nodes(void **state)
{
    (void)state;
    char key[3][400], pub[3][41], log[700];
    const char *names[3] = {"n0", "n1", "mallory"};
    for (int i = 0; i < 3; i++) {
        snprintf(key[i], sizeof key[i], "%s/%s", s_dir, names[i]);
        snprintf(log, sizeof log, "%s/keygen-%s.txt", s_dir, names[i]);
        char *args[] = {"lpgossip", "keygen", key[i], NULL};
        assert_int_equal(tk_wait(tk_spawn(NULL, args, log, -1), 30), 0);
        assert_int_equal(tk_cert_pubkey(key[i], pub[i]), 0);
    }
    int ports[2] = {s_port(), s_port()};
    char topo[600], fake[600], sec[3][420];
    snprintf(topo, sizeof topo, "%s/curve.yaml", s_dir);
    snprintf(fake, sizeof fake, "%s/fake.yaml", s_dir);
    s_curve_topo(topo, ports, pub[0], pub[1]);
    s_curve_topo(fake, ports, pub[0], pub[2]); /* mallory's view: her key as n1 */
    for (int i = 0; i < 3; i++)
        assert_true(snprintf(sec[i], sizeof sec[i], "%s_secret", key[i]) < (int)sizeof sec[i]);
    char *common[] = {"--train-subset", "320", "--batch", "8", "--epochs", "1", "--no-eval",
                      "--timeout", "5", NULL};
    /* the members */
    char l0[700], l1[700], *args[32];
    snprintf(l0, sizeof l0, "%s/curve0.txt", s_dir);
    snprintf(l1, sizeof l1, "%s/curve1.txt", s_dir);
    for (int r = 0; r < 2; r++) {
        int a = 0;
        char rk[16];
        snprintf(rk, sizeof rk, "%d", r);
        char *base[] = {"lpgossip", "node", "--topology", topo, "--rank", rk, "--cert", sec[r]};
        for (int k = 0; k < 8; k++)
            args[a++] = base[k];
        for (int k = 0; common[k]; k++)
            args[a++] = common[k];
        args[a] = NULL;
        assert_true(tk_spawn(NULL, args, r ? l1 : l0, -1) > 0);
    }
    int status[TK_MAXPROC];
    if (tk_wait_all(120, status) != 0 || status[0] != 0 || status[1] != 0) {
        tk_dump(l0);
        tk_dump(l1);
        fail_msg("the CURVE members did not finish: %d %d", status[0], status[1]);
    }
    tk_kill_all();
    /* n0 against an impostor */
    char *a0[] = {"lpgossip", "node", "--topology", topo, "--rank", "0", "--cert", sec[0],
                  "--train-subset", "320", "--batch", "8", "--epochs", "1", "--no-eval",
                  "--timeout", "4", NULL};
    char *am[] = {"lpgossip", "node", "--topology", fake, "--rank", "1", "--cert", sec[2],
                  "--train-subset", "320", "--batch", "8", "--epochs", "1", "--no-eval",
                  "--timeout", "4", NULL};
    assert_true(tk_spawn(NULL, a0, l0, -1) > 0);
    assert_true(tk_spawn(NULL, am, l1, -1) > 0);
    assert_int_equal(tk_wait_all(60, status), 0);
    char *o0 = tk_slurp(l0);
    if (status[0] != 1 || !strstr(o0, "never said hello: n1") ||
        !strstr(o0, "its key is not one of this node's in-neighbours")) {
        tk_dump(l0);
        tk_dump(l1);
        fail_msg("n0 should refuse the impostor (status %d)", status[0]);
    }
    free(o0);
    tk_kill_all();
    /* no certificate */
    char *an[] = {"lpgossip", "node", "--topology", topo, "--rank", "1", "--no-eval", NULL};
    assert_int_equal(tk_wait(tk_spawn(NULL, an, l1, -1), 30), 2);
    char *o1 = tk_slurp(l1);
    assert_non_null(strstr(o1, "--cert FILE"));
    free(o1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resync_over_network, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_peer, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_curve_nodes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_nan_step, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_kill_and_rejoin, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
