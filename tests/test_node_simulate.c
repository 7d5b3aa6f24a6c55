/* test_node_simulate — `lpgossip simulate` end to end on a tiny run: the
 * averaged model must score like the nodes when they agree (consensus
 * distance ~0), in FP32 and in int8, whose evaluation depends on averaged
 * activation ranges (model buffers) as well as parameters. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/tk.h"

static double s_field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? atof(p + strlen(pat)) : NAN;
}

/* Runs simulate on complete4 (dpsgd) with `precision` and extra flags; the
 * last metrics line goes to last[4096]. */
static void s_sim(const char *precision, const char *extra, char *last)
{
    char dir[256];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "sim"), 0);
    const char *bin = tk_bin();
    assert_non_null(bin);
    char cmd[2048], metrics[300];
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=1 timeout 500 %s simulate --topology "
             "topologies/complete4.yaml --algo dpsgd --model cnn --precision %s --epochs 1 "
             "--train-subset 1600 --batch 16 --lr 0.05 --eval-nodes 1 --metrics %s %s "
             ">%s/log 2>&1", bin, precision, metrics, extra, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/log", dir);
        (void)system(cmd);
        fail_msg("lpgossip simulate --precision %s %s failed (its log is above)", precision, extra);
    }
    FILE *f = fopen(metrics, "r");
    assert_non_null(f);
    char line[4096] = "";
    last[0] = '\0';
    while (fgets(line, sizeof line, f))
        memcpy(last, line, sizeof line);
    fclose(f);
    assert_int_equal(tk_rmtree(dir), 0);
}

static void s_run(const char *precision)
{
    char last[4096];
    s_sim(precision, "", last);
    double avg = s_field(last, "avg_model_acc"), node = s_field(last, "mean_node_acc");
    double cons = s_field(last, "consensus");
    print_message("%s: avg-model %.4f mean-node %.4f consensus %.3g\n", precision, avg, node,
                  cons);
    /* The complete graph with D-PSGD averages exactly every step. */
    assert_true(cons < 1e-8);
    assert_true(node > 0.3);
    assert_true(fabs(avg - node) < 0.02);
}

/* --gossip-every 5 on the complete graph is federated averaging without a
 * server: 25 iterations end on a round, so the nodes agree exactly, and
 * they sent exactly a fifth of the bytes of a round per iteration; with
 * --gossip-every 3 the last local steps are not averaged yet. */
static void test_local_steps(void **state)
{
    (void)state;
    char l1[4096], l5[4096], l3[4096];
    s_sim("fp32", "", l1);
    s_sim("fp32", "--gossip-every 5", l5);
    s_sim("fp32", "--gossip-every 3", l3);
    double b1 = s_field(l1, "bytes_sent_per_node"), b5 = s_field(l5, "bytes_sent_per_node");
    double c5 = s_field(l5, "consensus"), c3 = s_field(l3, "consensus");
    print_message("H=1: %.0f bytes/node; H=5: %.0f bytes/node, consensus %.3g, accuracy %.4f; "
                  "H=3: consensus %.3g\n", b1, b5, c5, s_field(l5, "avg_model_acc"), c3);
    assert_true(b1 > 0 && b1 == 5 * b5);
    assert_true(c5 < 1e-8);
    assert_true(c5 == 0 && c3 > 0);
}

static void test_average_model_fp32(void **state)
{
    (void)state;
    s_run("fp32");
}

static void test_average_model_int8(void **state)
{
    (void)state;
    s_run("int8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_average_model_fp32),
        cmocka_unit_test(test_average_model_int8),
        cmocka_unit_test(test_local_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
