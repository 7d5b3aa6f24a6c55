/* test_node_live — the live metrics of a node: the Prometheus exposition
 * (checked by promtool when installed), the /status JSON read back by
 * watch's reader, malformed answers, --metrics-port's syntax, and the HTTP
 * server under hostile clients (huge headers, slowloris, 1000
 * connections) while a publisher thread keeps publishing; then a 3-node
 * run on loopback watched (and, as root or with LPGOSSIP_PROMETHEUS=1
 * when Debian's prometheus is installed, scraped by a real Prometheus
 * whose query API must return every node's iteration), with one node
 * killed: "down" at the next poll, and its neighbours count it down.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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
#include "tests/tk.h"
#include "tests/tk_run.h"

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

/* ---- a 3-node run -------------------------------------------------------- */

static char s_dir[256];

/* Polls t[0..n) until every one answered with iteration >= 1 (bounded). */
static int s_all_going(node_watch_target *t, int n, double seconds)
{
    char *body[8];
    double until = nn_now() + seconds * tk_time_scale();
    while (nn_now() < until) {
        node_watch_poll(t, n, "/status", tk_time_scale(), body);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            node_watch_update(&t[i], body[i]);
            free(body[i]);
            ok &= t[i].answered && t[i].iteration >= 1;
        }
        if (ok)
            return 1;
        usleep(200 * 1000);
    }
    return 0;
}

/* A real Prometheus scrapes the nodes; its query API answers with every
 * node's lpgossip_iteration.  Skipped (a line on stderr) unless installed
 * and allowed (root or LPGOSSIP_PROMETHEUS=1). */
static void s_prometheus(const int *mport, int n)
{
    const char *bin = "/usr/bin/prometheus", *env = getenv("LPGOSSIP_PROMETHEUS");
    if (access(bin, X_OK) != 0 || !(geteuid() == 0 || (env && !strcmp(env, "1")))) {
        fprintf(stderr, "test_run_watched: Prometheus scrape skipped (needs %s and root or "
                "LPGOSSIP_PROMETHEUS=1)\n", bin);
        return;
    }
    char cfg[300], tsdb[300], listen[64], log[300], targets[256] = "";
    snprintf(cfg, sizeof cfg, "%s/prometheus.yml", s_dir);
    snprintf(tsdb, sizeof tsdb, "--storage.tsdb.path=%s/tsdb", s_dir);
    snprintf(log, sizeof log, "%s/prometheus.log", s_dir);
    int pp = tk_free_port();
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", pp);
    for (int i = 0; i < n; i++)
        snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s'127.0.0.1:%d'",
                 i ? ", " : "", mport[i]);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: lpgossip\n"
            "    static_configs:\n      - targets: [%s]\n", targets);
    fclose(f);
    char cfgarg[320];
    snprintf(cfgarg, sizeof cfgarg, "--config.file=%s", cfg);
    char *args[] = {"prometheus", cfgarg, tsdb, listen, NULL};
    pid_t pid = tk_spawn(bin, args, log, -1);
    assert_true(pid > 0);
    int found = 0;
    double until = nn_now() + 60;
    while (!found && nn_now() < until) {
        usleep(500 * 1000);
        char *b = s_get(pp, "/api/v1/query?query=lpgossip_iteration");
        found = 0;
        for (const char *p = b; p && (p = strstr(p, "\"__name__\":\"lpgossip_iteration\""));
             p++)
            found++;
        found = found >= n;
        free(b);
    }
    tk_kill(pid, SIGTERM);
    tk_wait(pid, 10);
    if (!found)
        tk_dump(log);
    assert_true(found);
}

static void test_run_watched(void **state)
{
    (void)state;
    char tp[300], log[300], flag[3][40];
    int ports[3], mport[3];
    snprintf(tp, sizeof tp, "%s/t3.yaml", s_dir);
    assert_int_equal(tk_topo_loopback(tp, 3, "graph:\n  generator: undirected_ring\n", ports), 0);
    char *common[] = {"--model", "cnn", "--train-subset", "960", "--batch", "8", "--epochs",
                      "50", "--no-eval", "--compress", "topk:0.1+q8", "--peer-timeout", "1",
                      "--timeout", "20", NULL};
    node_watch_target t[3];
    char err[128], spec[32];
    pid_t pid[3];
    for (int i = 0; i < 3; i++) {
        mport[i] = tk_free_port();
        snprintf(flag[i], sizeof flag[i], "--metrics-port=%d", mport[i]);
        snprintf(log, sizeof log, "%s/node%d.log", s_dir, i);
        pid[i] = tk_node(tp, i, common, flag[i], log);
        assert_true(pid[i] > 0);
        snprintf(spec, sizeof spec, "127.0.0.1:%d", mport[i]);
        assert_int_equal(node_watch_target_init(&t[i], spec, err, sizeof err), 0);
    }
    assert_true(s_all_going(t, 3, 90));
    s_prometheus(mport, 3);
    tk_kill(pid[2], SIGKILL);
    tk_wait(pid[2], 5);
    char *body[3];
    node_watch_poll(t, 3, "/status", tk_time_scale(), body);
    for (int i = 0; i < 3; i++) {
        node_watch_update(&t[i], body[i]);
        free(body[i]);
    }
    assert_string_equal(t[2].state, "down");
    assert_true(t[0].answered && t[1].answered);
    /* --peer-timeout 1 (an emulated node's stretched), a few rounds */
    double until = nn_now() + 15 * tk_time_scale();
    while (nn_now() < until && (t[0].peers_up != 1 || t[1].peers_up != 1)) {
        usleep(200 * 1000);
        node_watch_poll(t, 2, "/status", tk_time_scale(), body);
        for (int i = 0; i < 2; i++) {
            node_watch_update(&t[i], body[i]);
            free(body[i]);
        }
    }
    assert_int_equal(t[0].peers_up, 1);
    assert_int_equal(t[1].peers_up, 1);
    tk_kill_all();
}

static int s_setup(void **state)
{
    (void)state;
    return tk_dir_setup(s_dir, sizeof s_dir, "live");
}

static int s_teardown(void **state)
{
    (void)state;
    tk_dir_teardown(s_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exposition),     cmocka_unit_test(test_status_roundtrip),
        cmocka_unit_test(test_json_malformed), cmocka_unit_test(test_parse_port),
        cmocka_unit_test(test_http_hostile),   cmocka_unit_test(test_run_watched),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
