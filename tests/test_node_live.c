/* test_node_live — the live metrics of a node: the Prometheus exposition
 * (checked by promtool when installed), the /status JSON read back by
 * watch's reader, malformed answers, --metrics-port's syntax, and the HTTP
 * server under hostile clients (huge headers, slowloris, 1000
 * connections) while a publisher thread keeps publishing.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "nn/nn_core.h"
#include "node/node_http.h"
#include "node/node_live.h"
#include "node/node_watch.h"

static void s_snap(node_live_snap *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->run, sizeof s->run, "00112233aabbccdd");
    snprintf(s->node, sizeof s->node, "n\"1");
    s->rank = 1;
    s->nodes = 3;
    snprintf(s->model, sizeof s->model, "cnn");
    snprintf(s->algo, sizeof s->algo, "choco");
    snprintf(s->compress, sizeof s->compress, "topk:0.01+q8");
    s->iteration = 42;
    s->iterations = 100;
    s->epoch = 1.3125;
    s->loss = 0.5;
    s->evaluated = 1;
    s->test_accuracy = 0.8125;
    s->bytes_sent = 123456789;
    s->neighbours = 2;
    s->peers_up = 1;
    s->seconds = 21;
    s->refused[NODE_LIVE_REF_SIZE] = 3;
    s->nnb = 2;
    s->nb[0] = (node_live_nb){0, "n0", "tcp://127.0.0.1:1", 1, 2, 0.5};
    s->nb[1] = (node_live_nb){2, "n2", "", 0, 7, 0.25};
    node_live_observe(&s->step[NODE_LIVE_COMPUTE], 0.003);
    node_live_observe(&s->step[NODE_LIVE_COMPUTE], 0.02);
    node_live_observe(&s->step[NODE_LIVE_COMPUTE], 100);
}

static void test_exposition(void **state)
{
    (void)state;
    node_live_snap s;
    s_snap(&s);
    size_t len;
    char *t = node_live_prometheus(&s, &len);
    assert_int_equal(strlen(t), len);
    static const char *const names[] = {
        "lpgossip_iteration", "lpgossip_epoch", "lpgossip_loss", "lpgossip_test_accuracy",
        "lpgossip_bytes_sent_total", "lpgossip_bytes_received_total", "lpgossip_peers_up",
        "lpgossip_step_seconds", "lpgossip_skipped_steps_total", "lpgossip_peer_staleness",
        "lpgossip_refused_messages_total"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char help[128];
        snprintf(help, sizeof help, "# HELP %s ", names[k]);
        assert_non_null(strstr(t, help));
        snprintf(help, sizeof help, "# TYPE %s ", names[k]);
        assert_non_null(strstr(t, help));
    }
    const char *lab = "{run=\"00112233aabbccdd\",node=\"n\\\"1\",rank=\"1\"";
    char line[256];
    snprintf(line, sizeof line, "lpgossip_iteration%s} 42\n", lab);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof line, "lpgossip_bytes_sent_total%s} 123456789\n", lab);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof line, "lpgossip_peer_staleness%s,peer=\"n2\"} 7\n", lab);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof line, "lpgossip_refused_messages_total%s,reason=\"size\"} 3\n", lab);
    assert_non_null(strstr(t, line));
    /* cumulative buckets: 0.003 and 0.02 are <= 0.025, 100 only in +Inf */
    snprintf(line, sizeof line, "lpgossip_step_seconds_bucket%s,phase=\"compute\",le=\"0.025\"} 2\n",
             lab);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof line, "lpgossip_step_seconds_bucket%s,phase=\"compute\",le=\"+Inf\"} 3\n",
             lab);
    assert_non_null(strstr(t, line));
    snprintf(line, sizeof line, "lpgossip_step_seconds_count%s,phase=\"compute\"} 3\n", lab);
    assert_non_null(strstr(t, line));
    /* promtool, when installed */
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_exposition: promtool not installed (Debian package prometheus): "
                        "its check skipped\n");
    } else {
        char path[] = "/tmp/lpgossip-expo-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, t, len), (ssize_t)len);
        close(fd);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
        int rc = system(cmd);
        unlink(path);
        assert_int_equal(rc, 0);
    }
    free(t);
}

static void test_status_roundtrip(void **state)
{
    (void)state;
    node_live_snap s;
    s_snap(&s);
    size_t len;
    char *j = node_live_json(&s, "training", 0.25, &len);
    node_watch_target t;
    char err[128];
    assert_int_equal(node_watch_target_init(&t, "127.0.0.1:9", err, sizeof err), 0);
    node_watch_update(&t, j);
    assert_true(t.answered);
    assert_string_equal(t.state, "training");
    assert_string_equal(t.node, "n\"1");
    assert_string_equal(t.run, "00112233aabbccdd");
    assert_int_equal(t.rank, 1);
    assert_int_equal(t.iteration, 42);
    assert_int_equal(t.iterations, 100);
    assert_int_equal(t.peers_up, 1);
    assert_int_equal(t.neighbours, 2);
    assert_string_equal(t.slowest, "n2"); /* staleness 7 */
    assert_int_equal(t.slowest_staleness, 7);
    assert_true(fabs(t.accuracy - 0.8125) < 1e-9);
    assert_true(fabs(t.mb_sent - 123.456789) < 1e-6);
    double done, eta;
    node_watch_progress(&t, 1, &done, &eta);
    assert_true(fabs(done - 0.42) < 1e-9);
    assert_true(fabs(eta - 58 * 21.0 / 42) < 1e-9);
    free(j);
    /* a node that said finished and went away stays finished */
    j = node_live_json(&s, "finished", 0, &len);
    node_watch_update(&t, j);
    node_watch_update(&t, NULL);
    assert_false(t.answered);
    assert_string_equal(t.state, "finished");
    free(j);
}

static void test_json_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "[]", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":\"x}", "{\"a\":1} x",
        "{\"a\":[1,2}", "{\"a\":{\"b\":1}", "null", "{\"a\":\"\x01\"}", "{1:2}",
        "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"};
    node_watch_kv kv[8];
    char why[64];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(node_watch_json_top(bad[k], strlen(bad[k]), kv, 8, why, sizeof why), -1);
    const char *ok = " {\"a\" : [1,{\"x\":\"}\"}], \"b\":\"q\\\"z\", \"c\":-1.5e2, \"d\":null} ";
    int n = node_watch_json_top(ok, strlen(ok), kv, 8, why, sizeof why);
    assert_int_equal(n, 4);
    char str[16];
    node_watch_json_str(kv, n, "b", str, sizeof str);
    assert_string_equal(str, "q\"z");
    assert_true(node_watch_json_num(kv, n, "c") == -150.0);
    assert_true(isnan(node_watch_json_num(kv, n, "d")));
    assert_true(isnan(node_watch_json_num(kv, n, "a")));
    /* a row given garbage: down, not a crash */
    node_watch_target t;
    char err[64];
    assert_int_equal(node_watch_target_init(&t, "[::1]:80", err, sizeof err), 0);
    node_watch_update(&t, "{\"state\":\"training\"}"); /* no iteration */
    assert_false(t.answered);
    assert_string_equal(t.state, "down");
    assert_int_equal(node_watch_target_init(&t, "nohostport", err, sizeof err), -1);
    assert_int_equal(node_watch_target_init(&t, "h:70000", err, sizeof err), -1);
}

static void test_parse_port(void **state)
{
    (void)state;
    int p, o;
    char err[256];
    assert_int_equal(node_http_parse_port("0", &p, &o, err, sizeof err), 0);
    assert_true(p == 0 && o == 0);
    assert_int_equal(node_http_parse_port("auto", &p, &o, err, sizeof err), 0);
    assert_true(p == -1 && o == 0);
    assert_int_equal(node_http_parse_port("9100", &p, &o, err, sizeof err), 0);
    assert_true(p == 9100 && o == 0);
    assert_int_equal(node_http_parse_port("+1000", &p, &o, err, sizeof err), 0);
    assert_true(p == 0 && o == 1000);
    static const char *const bad[] = {"", "-1", "65536", "+0", "+", "12x", "auto2", " 80"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        assert_int_equal(node_http_parse_port(bad[k], &p, &o, err, sizeof err), -1);
}

/* ---- the server under hostile clients ----------------------------------- */

typedef struct {
    node_live  *live;
    volatile int stop;
    volatile long taken, offered;
} s_pub;

/* The training thread's part: publishes as fast as it can, never waiting. */
static void *s_publisher(void *arg)
{
    s_pub *p = arg;
    node_live_snap *s = nn_xmalloc(sizeof *s);
    s_snap(s);
    while (!p->stop) {
        s->iteration++;
        p->taken += node_live_publish(p->live, s, 0);
        p->offered++;
    }
    free(s);
    return NULL;
}

static int s_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET path: the body of a 200 or NULL. */
static char *s_get(int port, const char *path)
{
    char spec[32], err[128], *body = NULL;
    snprintf(spec, sizeof spec, "127.0.0.1:%d", port);
    node_watch_target t;
    if (node_watch_target_init(&t, spec, err, sizeof err) != 0)
        return NULL;
    node_watch_poll(&t, 1, path, 2.0, &body);
    return body;
}

/* A request whose header is 64 KiB: refused (no 200), the server goes on. */
static void s_huge_header(int port)
{
    int fd = s_connect(port);
    assert_true(fd >= 0);
    struct pollfd p = {fd, POLLOUT, 0};
    poll(&p, 1, 1000);
    char *req = nn_xmalloc(70000);
    int n = snprintf(req, 70000, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + n, 'a', 65536);
    memcpy(req + n + 65536, "\r\n\r\n", 4);
    size_t len = (size_t)n + 65540, sent = 0;
    double until = nn_now() + 3;
    char ans[64] = "";
    while (nn_now() < until) {
        p = (struct pollfd){fd, (short)(sent < len ? POLLOUT | POLLIN : POLLIN), 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (p.revents & POLLIN) {
            ssize_t k = recv(fd, ans, sizeof ans - 1, 0);
            ans[k > 0 ? k : 0] = '\0';
            break;
        }
        ssize_t k = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN)
            break;
        sent += k > 0 ? (size_t)k : 0;
    }
    assert_null(strstr(ans, " 200 "));
    close(fd);
    free(req);
}

static void test_http_hostile(void **state)
{
    (void)state;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 1200 && rl.rlim_max >= 1200) {
        rl.rlim_cur = 1200;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int nconn = rl.rlim_cur >= 1200 ? 1000 : (int)rl.rlim_cur - 100;
    node_live_snap *first = nn_xcalloc(1, sizeof *first);
    s_snap(first);
    node_live *live = node_live_new(first);
    char err[256];
    node_http *h = node_http_new(live, "127.0.0.1", 0, err, sizeof err);
    assert_non_null(h);
    int port = node_http_port(h);
    assert_true(port > 0);
    assert_null(node_http_new(live, "127.0.0.1", port, err, sizeof err)); /* taken */
    assert_null(node_http_new(live, "not-an-address", 0, err, sizeof err));
    char *b = s_get(port, "/metrics");
    assert_non_null(b);
    assert_non_null(strstr(b, "lpgossip_iteration{"));
    free(b);
    assert_null(s_get(port, "/nothing")); /* 404 */
    s_pub pub = {live, 0, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_publisher, &pub), 0);
    s_huge_header(port);
    /* slowloris and a flood: nconn connections, each a partial header */
    int *fds = nn_xcalloc((size_t)nconn, sizeof *fds);
    long before = pub.taken;
    for (int k = 0; k < nconn; k++) {
        fds[k] = s_connect(port);
        if (fds[k] >= 0)
            send(fds[k], "GET /metrics HTTP/1.1\r\nX-Slow: ", 31, MSG_NOSIGNAL);
    }
    usleep(300 * 1000);
    long during = pub.taken - before;
    for (int k = 0; k < nconn; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    free(fds);
    usleep(200 * 1000);
    b = s_get(port, "/status"); /* it still answers */
    pub.stop = 1;
    pthread_join(th, NULL);
    fprintf(stderr, "test_http_hostile: %d connections; publisher took %ld snapshots while "
            "they were open, %ld of %ld offered in all\n", nconn, during, pub.taken,
            pub.offered);
    assert_true(during > 0);
    assert_non_null(b);
    assert_non_null(strstr(b, "\"state\":\"waiting\""));
    free(b);
    node_http_destroy(&h);
    node_live_destroy(&live);
    free(first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exposition),     cmocka_unit_test(test_status_roundtrip),
        cmocka_unit_test(test_json_malformed), cmocka_unit_test(test_parse_port),
        cmocka_unit_test(test_http_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
