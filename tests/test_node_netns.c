/* test_node_netns — 4 `lpgossip node` processes, each in its own network
 * namespace, over a wire with 50 ms one-way delay and 2% packet loss.
 *
 * The kernels this runs on may lack the netem qdisc (no modules), so the
 * wire is built from parts (tests/tk_netns.h): every namespace gets a TAP
 * device (10.77.0.K+1), and a hub process forked by the test reads each
 * frame a namespace sends and writes it to every other namespace's TAP
 * 50 ms later, dropping each copy with probability 2% (xorshift, fixed
 * seed).  TCP then sees real
 * delay and real loss (retransmissions, backoff) -- what tc netem would
 * give.  The four nodes run choco topk:0.1+q8 on an undirected ring with
 * the cnn; the test checks that all finish and that their final models
 * agree (relative distance to the average).
 *
 * Needs root, /dev/net/tun and `ip netns`; otherwise the test is skipped
 * with a message saying what is missing.  Namespaces and TAPs are removed
 * in the teardown, the hub is killed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/tk.h"
#include "tests/tk_run.h"
#include "tests/tk_netns.h"

#include "nn/nn_core.h"

#define S_N        4
#define S_DELAY_NS 50000000ull   /* one way */
#define S_LOSS     0.02

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    if (tk_netns_why_not())
        return 0; /* the test skips */
    if (!tk_bin() || tk_mkdtemp(s_dir, sizeof s_dir, "netns") != 0)
        return -1;
    return tk_netns_up(S_N, 77, S_DELAY_NS, S_LOSS);
}

static int s_teardown(void **state)
{
    (void)state;
    tk_kill_all();
    tk_netns_down();
    tk_rmtree(s_dir);
    s_dir[0] = '\0';
    return 0;
}

/* ---- the run -------------------------------------------------------------------- */

static void test_delay_and_loss(void **state)
{
    (void)state;
    const char *why = tk_netns_why_not();
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
        char *args[] = {"ip", "netns", "exec", (char *)tk_netns_name(k), (char *)tk_bin(), "node", "--topology",
                        topo, "--rank", rank[k], "--algo", "choco", "--compress", "topk:0.1+q8",
                        "--eta", "0.15", "--model", "cnn", "--train-subset", subset, "--batch",
                        bs, "--epochs", "1", "--lr", "0.05", "--no-eval", "--timeout", "60",
                        "--out", out, NULL};
        assert_true(tk_spawn(tk_netns_ip(), args, logs[k], -1) > 0);
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
    double worst = tk_model_spread(out, S_N, NULL);
    assert_true(worst >= 0);
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
