/* test_node_rejoin — a node that fell far behind (frozen: SIGSTOP, a
 * suspended laptop, a long stall) re-joins the run through a state
 * transfer instead of training alone (docs/node.md, "Re-join after a
 * freeze"), with `lpgossip node` processes on 127.0.0.1.
 *
 *   a frozen node re-joins (choco on a complete graph; SGP on a directed
 *     ring, where its only in-neighbour must tell it how far ahead it is
 *     and its successor take it back late): 4 nodes train;
 *     (it must not declare its neighbours down for the silence of its own
 *     freeze: their messages wait unread in its queues);
 *     node 2 is stopped with SIGSTOP until node 1 has declared it down
 *     (--peer-timeout 1) and the others have run on for a while (6 s in
 *     all, at least 3 s after the "down"; under emulation, stretched, at
 *     least 10 s), then continued with SIGCONT.  It must find that it fell
 *     behind, take a live in-neighbour's model at that neighbour's
 *     iteration ("fell N iterations behind ...; re-joining with the model
 *     of rank R at iteration T", metrics `rejoins`), be taken back by its
 *     neighbours and finish with everybody else: every node exits 0 (before
 *     the re-join it exited 3, cut off), and its final model is as close to
 *     the average as the others' are (on the code before the re-join the
 *     frozen node trained alone for ~100 iterations while the others
 *     waited for it, and logged no re-join).
 * Every wait is bounded; children are killed and temp files removed in the
 * teardown.
 */
#include <ctype.h>
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

#include "tests/tk.h"
#include "tests/tk_run.h"

#include "nn/nn_core.h"

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    return tk_dir_setup(s_dir, sizeof s_dir, "rejoin");
}

static int s_teardown(void **state)
{
    (void)state;
    tk_dir_teardown(s_dir);
    return 0;
}

/* 4 nodes of `graph` (the topology's graph section), node `frozen`
 * stopped for `freeze_s` seconds once the run is going; the checks of the
 * top of the file.  algo_flags: the algorithm's flags (NULL-terminated, at
 * most 8). */
static void s_frozen_rejoins(const char *name, const char *graph, char *const *algo_flags,
                             int iters, double freeze_s)
{
    const int n = 4, frozen = 2, batch = 8;
    char topo[512], out[512], subset[32], bs[16], logs[4][600];
    snprintf(topo, sizeof topo, "%s/%s.yaml", s_dir, name);
    snprintf(out, sizeof out, "%s/%s", s_dir, name);
    assert_int_equal(tk_topo_loopback(topo, n, graph, NULL), 0);
    snprintf(subset, sizeof subset, "%d", n * batch * iters);
    snprintf(bs, sizeof bs, "%d", batch);
    char *common[40];
    int c = 0;
    for (int k = 0; algo_flags[k]; k++)
        common[c++] = algo_flags[k];
    char *rest[] = {"--model", "cnn", "--train-subset", subset, "--batch", bs, "--epochs", "1",
                    "--lr", "0.05", "--seed", "3", "--no-eval", "--start-window", "2",
                    "--timeout", "60", "--peer-timeout", "1", "--out", out, NULL};
    for (int k = 0; rest[k]; k++)
        common[c++] = rest[k];
    common[c] = NULL;
    pid_t pid[4];
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/%s-node%d.txt", s_dir, name, i);
        assert_true((pid[i] = tk_node(topo, i, common, NULL, logs[i])) > 0);
    }
    if (!tk_wait_log(logs[frozen], "start barrier passed", 60)) {
        tk_dump(logs[frozen]);
        fail_msg("the run never started");
    }
    /* the waits stretch like the nodes' --peer-timeout (emulated nodes are
     * slower); the freeze lasts until a neighbour has declared the frozen
     * node down and then at least a further 3 s (stretched) of the others
     * running ahead: under emulation the adaptive silence limit of a
     * neighbour whose steps take seconds can outlast a fixed freeze */
    const double f = tk_time_scale();
    usleep((useconds_t)(f * 1e6)); /* let them train a little */
    tk_kill(pid[frozen], SIGSTOP);
    const double t0 = tk_now();
    char down[64];
    snprintf(down, sizeof down, "(rank %d) is down", frozen);
    if (!tk_wait_log(logs[frozen - 1], down, 120)) { /* an in-neighbour in both graphs */
        tk_kill(pid[frozen], SIGCONT);
        tk_dump(logs[frozen - 1]);
        fail_msg("%s: node %d never declared the frozen node down", name, frozen - 1);
    }
    /* under emulation a round takes seconds (about 4.5 s at the portable
     * level under qemu on two shared cores): 3 s more let the others run
     * only a few rounds ahead, short of a re-join (more than S + 4 behind) */
    const double left = f * freeze_s - (tk_now() - t0);
    usleep((useconds_t)(fmax(left, f * (f > 1 ? 10.0 : 3.0)) * 1e6));
    tk_kill(pid[frozen], SIGCONT);
    const double frozen_s = tk_now() - t0;
    int status[TK_MAXPROC];
    int rc = tk_wait_all(240, status);
    if (rc != 0 || status[0] || status[1] || status[2] || status[3]) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        fail_msg("%s: not every node finished with 0 (rc %d: %d %d %d %d)", name, rc,
                 status[0], status[1], status[2], status[3]);
    }
    char *lf = tk_slurp(logs[frozen]);
    const char *line = strstr(lf, "iterations behind");
    const char *with = line ? strstr(line, "re-joining with the model of rank ") : NULL;
    if (!line || !with) {
        for (int i = 0; i < n; i++)
            tk_dump(logs[i]);
        fail_msg("%s: the frozen node did not re-join", name);
    }
    /* its own freeze is not their silence: a silence as long as half the
     * freeze is the freeze (under emulation, where a starved neighbour
     * can be silent past its stretched limit after the node resumed,
     * such a silence is seconds against minutes of freeze) */
    for (const char *q = strstr(lf, "is down: silent for "); q;
         q = strstr(q + 1, "is down: silent for ")) {
        double silent = strtod(q + strlen("is down: silent for "), NULL);
        if (silent >= 0.5 * frozen_s) {
            tk_dump(logs[frozen]);
            fail_msg("%s: the frozen node (frozen %.1f s) blamed a neighbour's silence of %.1f s "
                     "for its own freeze", name, frozen_s, silent);
        }
    }
    /* "fell N iterations behind" (a neighbour's down line may say "this
     * node fell behind" before it) */
    const char *fell = strstr(lf, "fell ");
    while (fell && !isdigit((unsigned char)fell[5]))
        fell = strstr(fell + 1, "fell ");
    assert_non_null(fell);
    long behind = strtol(fell + 5, NULL, 10);
    const char *at = strstr(with, " at iteration ");
    assert_non_null(at);
    long T = strtol(at + strlen(" at iteration "), NULL, 10);
    /* T == behind: frozen before its first step (emulated rounds take
     * seconds) */
    if (!(behind > 4 && T >= behind && T < iters)) {
        tk_dump(logs[frozen]);
        fail_msg("%s: fell %ld behind, re-joined at iteration %ld of %d", name, behind, T, iters);
    }
    char mp[700];
    snprintf(mp, sizeof mp, "%s/metrics-%d.jsonl", out, frozen);
    char *met = tk_slurp(mp);
    if (!strstr(met, "\"rejoins\":1"))
        fail_msg("%s: the metrics of the frozen node lack rejoins 1:\n%s", name, met);
    free(met);
    double dist[4], others = 0;
    assert_true(tk_model_spread(out, n, dist) >= 0);
    for (int i = 0; i < n; i++) {
        printf("%s node %d: ||z - avg|| / ||avg|| = %.4f\n", name, i, dist[i]);
        if (i != frozen && dist[i] > others)
            others = dist[i];
    }
    printf("%s: node %d fell %ld iterations behind and re-joined at iteration %ld of %d\n", name,
           frozen, behind, T, iters);
    assert_true(isfinite(dist[frozen]));
    assert_true(dist[frozen] <= fmax(2.0 * others, 0.02));
    free(lf);
}

static void test_frozen_node_rejoins_choco(void **state)
{
    (void)state;
    char *algo[] = {"--algo", "choco", "--compress", "topk:0.1+q8", "--eta", "0.1", NULL};
    /* 450 iterations natively (a 6 s freeze is many rounds); under
     * emulation 200, 2-5 s each */
    s_frozen_rejoins("choco", "graph:\n  generator: complete\n", algo,
                     tk_time_scale() > 1 ? 200 : 450, 6.0);
}

/* SGP on a directed ring: the frozen node's only in-neighbour holds it
 * down as fallen behind and tells it how far ahead it is (a PING with the
 * ahead flag), hands its state over a connection that queues one message
 * at a time (push-sum), and its successor, which trained alone meanwhile
 * and is ahead of where it re-joins, takes it back as a late neighbour.
 * Before these three, nodes 2 and 3 both ended cut off (exit status 3). */
static void test_frozen_node_rejoins_directed_sgp(void **state)
{
    (void)state;
    char *algo[] = {"--algo", "sgp", "--compress", "q8", NULL};
    /* nobody waits for it here (its in-neighbour declared it down, its
     * successor does not send to it): the others must not finish during
     * the freeze, so a longer run than choco's */
    s_frozen_rejoins("dring", "graph:\n  generator: directed_ring\n", algo,
                     tk_time_scale() > 1 ? 200 : 1200, 4.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_frozen_node_rejoins_choco, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_frozen_node_rejoins_directed_sgp, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
