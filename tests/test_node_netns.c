/* test_node_netns — 4 `lpgossip node` processes, each in its own network
 * namespace, over a wire with 50 ms one-way delay and 2% packet loss.
 *
 * The kernels this runs on may lack the netem qdisc (no modules), so the
 * wire is built from parts: every namespace gets a TAP device (10.77.0.K+1),
 * and a hub process forked by the test reads each frame a namespace sends
 * and writes it to every other namespace's TAP 50 ms later, dropping each
 * copy with probability 2% (xorshift, fixed seed).  TCP then sees real
 * delay and real loss (retransmissions, backoff) -- what tc netem would
 * give.  The four nodes run choco topk:0.1+q8 on an undirected ring with
 * the cnn; the test checks that all finish and that their final models
 * agree (relative distance to the average).
 *
 * Needs root, /dev/net/tun and `ip netns`; otherwise the test is skipped
 * with a message saying what is missing.  Namespaces and TAPs are removed
 * in the teardown, the hub is killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/tk.h"

#include "nn/nn_core.h"
#include "nn/nn_model.h"
#include "node/node_common.h"

#define S_N        4
#define S_DELAY_NS 50000000ull   /* one way */
#define S_LOSS     0.02
#define S_QCAP     65536         /* frames in flight */

static char  s_dir[256];
static char  s_ns[S_N][32];
static int   s_tap[S_N] = {-1, -1, -1, -1};
static pid_t s_hub;
static const char *s_ip;         /* path of `ip` */

/* ---- the wire ---------------------------------------------------------------- */

typedef struct {
    uint64_t due;
    int      port;
    uint16_t len;
    uint8_t  data[1600];
} s_frame;

static uint64_t s_ns_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The hub: forever (until killed), frames from port p go to every other
 * port after S_DELAY_NS, each copy lost with probability S_LOSS.  Delays
 * are equal, so the queue is FIFO by due time. */
static void s_hub_loop(void)
{
    s_frame *q = malloc(S_QCAP * sizeof *q);
    if (!q)
        _exit(1);
    size_t head = 0, count = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    struct pollfd pf[S_N];
    for (int p = 0; p < S_N; p++)
        pf[p] = (struct pollfd){.fd = s_tap[p], .events = POLLIN};
    uint8_t buf[1600];
    for (;;) {
        uint64_t now = s_ns_now();
        int timeout = 100;
        if (count) {
            uint64_t due = q[head].due;
            timeout = due <= now ? 0 : (int)((due - now) / 1000000ull) + 1;
        }
        if (poll(pf, S_N, timeout) < 0 && errno != EINTR)
            _exit(1);
        for (int p = 0; p < S_N; p++) {
            if (!(pf[p].revents & POLLIN))
                continue;
            ssize_t n = read(s_tap[p], buf, sizeof buf);
            if (n <= 0)
                continue;
            uint64_t due = s_ns_now() + S_DELAY_NS;
            for (int d = 0; d < S_N; d++) {
                if (d == p || count == S_QCAP)
                    continue;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if ((double)(rng >> 11) / 9007199254740992.0 < S_LOSS)
                    continue;
                s_frame *f = &q[(head + count++) % S_QCAP];
                f->due = due;
                f->port = d;
                f->len = (uint16_t)n;
                memcpy(f->data, buf, (size_t)n);
            }
        }
        now = s_ns_now();
        while (count && q[head].due <= now) {
            (void)!write(s_tap[q[head].port], q[head].data, q[head].len);
            head = (head + 1) % S_QCAP;
            count--;
        }
    }
}

/* ---- set-up ------------------------------------------------------------------- */

static int s_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int s_run(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " >/dev/null 2>&1", sizeof cmd - strlen(cmd) - 1);
    return system(cmd);
}

static const char *s_why_not(void)
{
    static const char *paths[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    if (geteuid() != 0)
        return "not root: creating network namespaces needs CAP_NET_ADMIN";
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++)
        if (access(paths[k], X_OK) == 0)
            s_ip = paths[k];
    if (!s_ip)
        return "no `ip` command (Debian package iproute2)";
    if (access("/dev/net/tun", R_OK | W_OK) != 0)
        return "no /dev/net/tun";
    char probe[48];
    snprintf(probe, sizeof probe, "lpg-probe-%d", (int)getpid());
    if (s_run("%s netns add %s", s_ip, probe) != 0)
        return "`ip netns add` fails here (no namespace support or permission)";
    s_run("%s netns del %s", s_ip, probe);
    return NULL;
}

static int s_setup(void **state)
{
    (void)state;
    if (s_why_not())
        return 0; /* the test skips */
    if (!tk_bin() || tk_mkdtemp(s_dir, sizeof s_dir, "netns") != 0)
        return -1;
    for (int k = 0; k < S_N; k++) {
        char tap[IFNAMSIZ];
        snprintf(s_ns[k], sizeof s_ns[k], "lpg-%d-%d", (int)getpid() % 100000, k);
        snprintf(tap, sizeof tap, "lpgtap%u", (unsigned)k % 100u);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        memcpy(ifr.ifr_name, tap, strlen(tap) + 1);
        s_tap[k] = open("/dev/net/tun", O_RDWR);
        if (s_tap[k] < 0 || ioctl(s_tap[k], TUNSETIFF, &ifr) != 0) {
            fprintf(stderr, "test_node_netns: cannot create TAP %s: %s\n", tap, strerror(errno));
            return -1;
        }
        if (s_run("%s netns add %s", s_ip, s_ns[k]) != 0 ||
            s_run("%s link set %s netns %s", s_ip, tap, s_ns[k]) != 0 ||
            s_run("%s -n %s addr add 10.77.0.%d/24 dev %s", s_ip, s_ns[k], k + 1, tap) != 0 ||
            s_run("%s -n %s link set %s up", s_ip, s_ns[k], tap) != 0 ||
            s_run("%s -n %s link set lo up", s_ip, s_ns[k]) != 0) {
            fprintf(stderr, "test_node_netns: cannot set up namespace %s\n", s_ns[k]);
            return -1;
        }
    }
    s_hub = fork();
    if (s_hub < 0)
        return -1;
    if (s_hub == 0)
        s_hub_loop();
    return 0;
}

static int s_teardown(void **state)
{
    (void)state;
    tk_kill_all();
    if (s_hub > 0) {
        kill(s_hub, SIGKILL);
        waitpid(s_hub, NULL, 0);
        s_hub = 0;
    }
    for (int k = 0; k < S_N; k++) {
        if (s_ns[k][0])
            s_run("%s netns del %s", s_ip, s_ns[k]);
        if (s_tap[k] >= 0)
            close(s_tap[k]);
        s_tap[k] = -1;
        s_ns[k][0] = '\0';
    }
    tk_rmtree(s_dir);
    s_dir[0] = '\0';
    return 0;
}

/* ---- the run -------------------------------------------------------------------- */

static void test_delay_and_loss(void **state)
{
    (void)state;
    const char *why = s_why_not();
    if (why) {
        print_message("skipped: %s\n", why);
        skip();
    }
    char topo[512], out[512];
    snprintf(topo, sizeof topo, "%s/ring4.yaml", s_dir);
    snprintf(out, sizeof out, "%s/run", s_dir);
    FILE *f = fopen(topo, "w");
    assert_non_null(f);
    fprintf(f, "description: 4 namespaces on a 50 ms, 2%% loss wire\nnodes:\n");
    for (int k = 0; k < S_N; k++)
        fprintf(f, "  - {id: n%d, endpoint: \"tcp://10.77.0.%d:5555\"}\n", k, k + 1);
    fprintf(f, "graph: {generator: undirected_ring}\n");
    fclose(f);
    const int batch = 8, iters = tk_quick() ? 40 : 80;
    char subset[32], bs[16], rank[S_N][16], logs[S_N][600];
    snprintf(subset, sizeof subset, "%d", S_N * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    double t0 = nn_now();
    for (int k = 0; k < S_N; k++) {
        snprintf(rank[k], sizeof rank[k], "%d", k);
        snprintf(logs[k], sizeof logs[k], "%s/node%d.txt", s_dir, k);
        char *args[] = {"ip", "netns", "exec", s_ns[k], (char *)tk_bin(), "node", "--topology",
                        topo, "--rank", rank[k], "--algo", "choco", "--compress", "topk:0.1+q8",
                        "--eta", "0.15", "--model", "cnn", "--train-subset", subset, "--batch",
                        bs, "--epochs", "1", "--lr", "0.05", "--no-eval", "--timeout", "60",
                        "--out", out, NULL};
        assert_true(tk_spawn(s_ip, args, logs[k], -1) > 0);
    }
    int status[TK_MAXPROC];
    int rc = tk_wait_all(600, status);
    double secs = nn_now() - t0;
    for (int k = 0; k < S_N; k++)
        if (rc != 0 || status[k] != 0) {
            for (int j = 0; j < S_N; j++)
                tk_dump(logs[j]);
            fail_msg("node %d: status %d after %.0f s", k, status[k], secs);
        }
    /* consensus of the final models */
    nn_model *m[S_N];
    char err[512];
    for (int k = 0; k < S_N; k++) {
        char p[700];
        snprintf(p, sizeof p, "%s/model-%d.safetensors", out, k);
        node_model_opts mo;
        assert_int_equal(node_model_opts_from_file(p, &mo, err, sizeof err), 0);
        m[k] = node_model_build(&mo, 1, 28, 28, 10, err, sizeof err);
        assert_non_null(m[k]);
        assert_int_equal(node_model_load(p, m[k], err, sizeof err), 0);
    }
    size_t d = nn_model_params(m[0])->numel;
    double *avg = nn_xcalloc(d, sizeof(double)), norm = 0, worst = 0;
    for (int k = 0; k < S_N; k++)
        for (size_t e = 0; e < d; e++)
            avg[e] += nn_model_params(m[k])->data[e] / S_N;
    for (size_t e = 0; e < d; e++)
        norm += avg[e] * avg[e];
    for (int k = 0; k < S_N; k++) {
        double s = 0;
        for (size_t e = 0; e < d; e++) {
            double x = nn_model_params(m[k])->data[e] - avg[e];
            s += x * x;
        }
        worst = fmax(worst, sqrt(s / norm));
        nn_model_destroy(&m[k]);
    }
    free(avg);
    char *l0 = tk_slurp(logs[0]);
    print_message("4 namespaces, 50 ms one-way delay, 2%% loss: %d iterations in %.1f s; max "
                  "||z - avg|| / ||avg|| = %.4f\n", iters, secs, worst);
    free(l0);
    assert_true(worst < 0.05);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_delay_and_loss, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
