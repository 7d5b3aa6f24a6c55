/* test_node_simulate — `lpgossip simulate` end to end on a tiny run: the
 * averaged model must score like the nodes when they agree (consensus
 * distance ~0), in FP32 and in int8, whose evaluation depends on averaged
 * activation ranges (model buffers) as well as parameters.  The one run
 * loop: `train`, `node --no-gossip` and a one-node `simulate` end with the
 * same model file, byte for byte.  The command line: typed options and
 * their exit codes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    const char *bin = tk_bin_cmd();
    assert_non_null(bin);
    char cmd[2048], metrics[300];
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=1 timeout %.0f %s simulate --topology "
             "topologies/complete4.yaml --algo dpsgd --model cnn --precision %s --epochs 1 "
             "--train-subset 1600 --batch 16 --lr 0.05 --eval-nodes 1 --metrics %s %s "
             ">%s/log 2>&1", 500 * tk_time_scale(), bin, precision, metrics, extra, dir);
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

/* Runs `lpgossip ARGS` (output to dir/log); returns the exit status. */
static int s_cli(const char *dir, const char *args);

/* --join 3@20: node 3 is absent for 20 of the 25 iterations, then joins
 * with node 0's model; on the complete graph with D-PSGD everybody agrees
 * exactly again after the join round.  Bad specs are usage errors. */
static void test_join(void **state)
{
    (void)state;
    char last[4096], dir[256];
    s_sim("fp32", "--join 3@20", last);
    double node = s_field(last, "mean_node_acc"), cons = s_field(last, "consensus");
    print_message("--join 3@20: mean-node %.4f consensus %.3g\n", node, cons);
    assert_true(cons < 1e-8);
    assert_true(node > 0.3);
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "join"), 0);
    const char *bad[] = {"--join 4@5", "--join 3@25", "--join 3", "--join x@1", "--join 3@-1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char args[512];
        snprintf(args, sizeof args, "simulate --topology topologies/complete4.yaml "
                 "--train-subset 1600 --batch 16 --epochs 1 --no-eval %s", bad[k]);
        if (s_cli(dir, args) != 2)
            fail_msg("%s: expected a usage error (2)", bad[k]);
    }
    assert_int_equal(tk_rmtree(dir), 0);
}

/* Runs `lpgossip ARGS` (output to dir/log); returns the exit status. */
static int s_cli(const char *dir, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 timeout %.0f %s %s >%s/log 2>&1",
             300 * tk_time_scale(), tk_bin_cmd(), args, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void s_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    assert_non_null(fa);
    assert_non_null(fb);
    int ca, cb;
    size_t n = 0;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        n++;
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    if (ca != cb)
        fail_msg("%s and %s differ at byte %zu", a, b, n);
}

/* train = node --no-gossip = simulate on one node: one loop, QGM and the
 * non-finite step policy included (iteration 3 gets a NaN and is skipped
 * by all three). */
static void test_one_loop(void **state)
{
    (void)state;
    char dir[256], args[2048], topo[300], a[300], b[300], c[300];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "loop"), 0);
    snprintf(topo, sizeof topo, "%s/one.yaml", dir);
    FILE *f = fopen(topo, "w");
    assert_non_null(f);
    fputs("nodes: 1\ngraph:\n  generator: complete\n", f);
    fclose(f);
    const char *flags = "--model cnn --epochs 2 --train-subset 160 --batch 16 --qgm --seed 3 "
                        "--eval-every 7 --debug-nan-at 3";
    snprintf(a, sizeof a, "%s/train.safetensors", dir);
    snprintf(b, sizeof b, "%s/node.safetensors", dir);
    snprintf(c, sizeof c, "%s/sim.safetensors", dir);
    char metrics[300];
    snprintf(metrics, sizeof metrics, "%s/train.jsonl", dir);
    snprintf(args, sizeof args, "train %s --save %s --metrics %s", flags, a, metrics);
    assert_int_equal(s_cli(dir, args), 0);
    char *m = tk_slurp(metrics);
    assert_non_null(strstr(m, "\"command\":\"train\""));
    assert_non_null(strstr(m, "\"skipped_steps\":1"));
    free(m);
    snprintf(args, sizeof args, "node --topology %s --rank 0 --no-gossip %s --save %s", topo,
             flags, b);
    assert_int_equal(s_cli(dir, args), 0);
    snprintf(args, sizeof args, "simulate --topology %s --algo dpsgd %s --save %s", topo, flags,
             c);
    assert_int_equal(s_cli(dir, args), 0);
    s_same_file(a, b);
    s_same_file(a, c);
    assert_int_equal(tk_rmtree(dir), 0);
}

/* Options are typed and checked when parsed: 2 for a usage error. */
static void test_options(void **state)
{
    (void)state;
    char dir[256], log[300];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "cli"), 0);
    snprintf(log, sizeof log, "%s/log", dir);
    static const struct { const char *args, *says; } bad[] = {
        {"train --model resnet99", "--model 'resnet99': expected cnn, resnet20 or vgg11"},
        {"train --precision int4", "expected fp32, int8 or fakequant"},
        {"simulate --topology topologies/ring8.yaml --compress top:0.1", "--compress"},
        {"simulate --epochs 1", "--topology FILE is required"},
        {"node --topology topologies/ring8.yaml --rank 0 --bind localhost", "--bind"},
        {"node --topology topologies/ring8.yaml --rank 0 --peer n1=foo", "--peer"},
        {"train --bogus", "see --help"},
        {"train --wgrad fp16", "--wgrad: unknown value 'fp16'"},
        {"simulate --topology topologies/ring8.yaml --staleness 9", "--staleness"},
        {"simulate --topology topologies/ring8.yaml --staleness 2 --delays random:3 "
         "--train-subset 64", "exceed --staleness 2"},
        {"simulate --topology topologies/ring8.yaml --delays later:1 --train-subset 64",
         "expected none, fixed:D, random:D or slow:R:F"},
        {"simulate --topology topologies/ring8.yaml --algo sgp --no-push-sum --staleness 1 "
         "--train-subset 64", "needs push-sum"},
        {"node --topology topologies/ring8.yaml --rank 0 --debug-slow 0", "--debug-slow"},
        {"node --topology topologies/ring8.yaml --rank 0 --yield-pace 1.0", "--yield-pace 1.0: give 0"},
        {"simulate --topology topologies/ring8.yaml --yield-pace 2", "see --help"},
        {"train --staleness 1", "see --help"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = s_cli(dir, bad[i].args);
        char *out = tk_slurp(log);
        if (rc != 2 || !strstr(out, bad[i].says))
            fail_msg("lpgossip %s: status %d, output:\n%s", bad[i].args, rc, out);
        free(out);
    }
    /* fakequant fits; --gamma still works, with a note */
    assert_int_equal(s_cli(dir, "train --precision fakequant --epochs 1 --train-subset 32 "
                                "--batch 16 --no-eval --gamma 0.5"), 0);
    char *out = tk_slurp(log);
    assert_non_null(strstr(out, "--gamma is deprecated"));
    assert_non_null(strstr(out, "fakequant"));
    free(out);
    /* --wgrad: bf16 where the CPU has it, else a usage error naming the
     * level; the banner says what the kernels use */
    setenv("LPGOSSIP_CPU", "avx2", 1);
    int rc = s_cli(dir, "train --wgrad bf16 --epochs 1");
    unsetenv("LPGOSSIP_CPU");
    out = tk_slurp(log);
    if (rc != 2 || !strstr(out, "has no AVX-512 BF16"))
        fail_msg("--wgrad bf16 at avx2: status %d, output:\n%s", rc, out);
    free(out);
    assert_int_equal(s_cli(dir, "train --wgrad fp32 --precision int8 --epochs 1 "
                                "--train-subset 32 --batch 16 --no-eval"), 0);
    out = tk_slurp(log);
    assert_non_null(strstr(out, "int8 weight gradients fp32"));
    free(out);
    /* the fault-injection flags are listed by --help-debug only */
    assert_int_equal(s_cli(dir, "node --help"), 0);
    out = tk_slurp(log);
    assert_null(strstr(out, "--debug-drop"));
    assert_non_null(strstr(out, "--lr-decay"));
    free(out);
    assert_int_equal(s_cli(dir, "node --help-debug"), 0);
    out = tk_slurp(log);
    assert_non_null(strstr(out, "--debug-drop"));
    assert_non_null(strstr(out, "--debug-nan-at"));
    free(out);
    assert_int_equal(tk_rmtree(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_average_model_fp32),
        cmocka_unit_test(test_average_model_int8),
        cmocka_unit_test(test_local_steps),
        cmocka_unit_test(test_one_loop),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
