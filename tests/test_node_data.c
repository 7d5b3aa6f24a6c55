/* test_node_data — the user's data in the commands: per-site {rank} specs
 * and their shards, the Dirichlet partition through node_shards_make, the
 * data metadata of model files, and `train`/`eval`/`predict` end to end on
 * an image-folder fixture (tests/data/userdata/, written by PIL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_common.h"
#include "node/node_data.h"
#include "node/node_trainer.h"
#include "tests/tk.h"

#define FIX "tests/data/userdata/"

static char g_dir[256];

#define ASSERT_HAS(msg, sub)                                                          \
    do {                                                                              \
        if (!strstr((msg), (sub)))                                                    \
            fail_msg("\"%s\" lacks \"%s\"", (msg), (sub));                            \
    } while (0)

static void s_opts(node_opts *o, const char *data)
{
    char *argv[] = {"train", "--data", (char *)data, "--image-size", "28x28", "--batch", "4",
                    "--epochs", "1", NULL};
    assert_int_equal(node_opts_parse(o, NODE_CMD_TRAIN, 9, argv), -1); /* -1: go on */
}

/* site0: the imgs_gray tree (9 train images); site1: one class of it (3). */
static void test_sites(void **state)
{
    (void)state;
    char cmd[2048], spec[512], err[1024];
    snprintf(cmd, sizeof cmd, "cp -r " FIX "imgs_gray %s/site0 && mkdir -p %s/site1/train "
             "%s/site1/test && cp -r " FIX "imgs_gray/train/bee %s/site1/train/ && cp -r "
             FIX "imgs_gray/test/bee %s/site1/test/", g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    snprintf(spec, sizeof spec, "images:%s/site{rank}", g_dir);
    node_opts o;
    node_ranks r;
    s_opts(&o, spec); /* site 1's one class would be class 0 there: refused */
    assert_int_equal(node_ranks_init(&r, &o.t, 2, 0.0, 0, 2, err, sizeof err), -1);
    ASSERT_HAS(err, "site1 (rank 1's data): 1 classes whose names differ");
    node_ranks_free(&r);
    node_opts_free(&o);
    /* the same classes.txt everywhere fixes the labels */
    snprintf(cmd, sizeof cmd, "printf 'ant\\nbee\\nzebra\\n' > %s/site0/classes.txt && "
             "cp %s/site0/classes.txt %s/site1/", g_dir, g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    s_opts(&o, spec); /* simulate: every rank in one process */
    if (node_ranks_init(&r, &o.t, 2, 0.0, 0, 2, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(r.count[0], 9);
    assert_int_equal(r.count[1], 3);
    assert_int_equal(r.shard[1][0], 9); /* site 1 follows site 0 */
    assert_int_equal(r.shard[1][2], 11);
    assert_int_equal(r.d.test.n, 6 + 2);
    assert_int_equal(r.steps, 3); /* rank 0's 9 samples, batch 4 */
    node_ranks_free(&r);
    /* a node: only its own files; its steps from its own data */
    if (node_ranks_init(&r, &o.t, 2, 0.0, 1, 1, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(r.d.train.n, 3);
    assert_int_equal(r.d.train.classes, 3);
    assert_int_equal(r.d.train.y[0], 1); /* bee */
    assert_int_equal(r.count[1], 3);
    assert_null(r.shard[0]);
    assert_int_equal(r.steps, 1);
    node_ranks_free(&r);
    node_opts_free(&o);
    /* a missing site names its spec and rank */
    snprintf(spec, sizeof spec, "images:%s/none{rank}x", g_dir);
    s_opts(&o, spec);
    assert_int_equal(node_ranks_init(&r, &o.t, 2, 0.0, 0, 2, err, sizeof err), -1);
    ASSERT_HAS(err, "none0x/train: cannot read");
    node_ranks_free(&r);
    node_opts_free(&o);
    char out[64];
    assert_int_equal(node_data_spec_for("a{rank}/b{rank}", 12, out, sizeof out, err,
                                        sizeof err), 0);
    assert_string_equal(out, "a12/b12");
}

static void test_dirichlet_shards(void **state)
{
    (void)state;
    node_opts o;
    char err[512];
    s_opts(&o, "npz:" FIX "nhwc_u8.npz");
    o.t.mo.dirichlet = 0.3;
    node_data d;
    assert_int_equal(node_data_load(&o.t.mo, &d, err, sizeof err), 0);
    uint32_t *shard[3];
    size_t count[3];
    assert_int_equal(node_shards_make(&o.t, &d, 3, 0.0, shard, count, err, sizeof err), 0);
    assert_int_equal(count[0] + count[1] + count[2], d.train.n);
    uint32_t *again[3];
    size_t c2[3];
    o.t.seed = 99; /* another seed: another split (of 7 samples, 3 classes) */
    int differs = 0;
    for (int s = 0; s < 5 && !differs; s++) {
        o.t.seed = 99 + s;
        assert_int_equal(node_shards_make(&o.t, &d, 3, 0.0, again, c2, err, sizeof err), 0);
        for (int k = 0; k < 3; k++)
            differs |= c2[k] != count[k] || (c2[k] && memcmp(again[k], shard[k],
                                                             c2[k] * sizeof(uint32_t)));
        nn_partition_free(again, 3);
    }
    assert_true(differs);
    nn_partition_free(shard, 3);
    node_data_free(&d);
    node_opts_free(&o);
}

static int s_run(char *const *args, const char *log)
{
    pid_t p = tk_spawn(NULL, args, log, -1);
    assert_true(p > 0);
    return tk_wait(p, 300);
}

/* train --save, then eval and predict on the same test images: predict's
 * classes must be the eval confusion matrix's column sums. */
static void test_train_eval_predict(void **state)
{
    (void)state;
    char model[300], log[300], err[512];
    snprintf(model, sizeof model, "%s/m.safetensors", g_dir);
    snprintf(log, sizeof log, "%s/log.txt", g_dir);
    char *tr[] = {"lpgossip", "train", "--data", "images:" FIX "imgs", "--image-size", "28x28",
                  "--epochs", "3", "--batch", "3", "--save", model, NULL};
    if (s_run(tr, log) != 0)
        tk_dump(log), fail();
    node_data_info in;
    assert_int_equal(node_data_info_read(model, &in, err, sizeof err), 0);
    assert_int_equal(in.classes, 3);
    assert_string_equal(in.names[2], "zebra");
    assert_non_null(in.mean);
    nn_dataset a, b;
    nn_data_opts no = {.image_h = 28, .image_w = 28};
    assert_int_equal(nn_data_load_opts("images:" FIX "imgs", &no, &a, &b, err, sizeof err), 0);
    float mean[3], std[3];
    nn_data_norm_stats(&a, mean, std);
    for (int c = 0; c < 3; c++)
        assert_true(in.mean[c] == mean[c] && in.std[c] == std[c]);
    nn_dataset_free(&a);
    nn_dataset_free(&b);
    node_data_info_free(&in);

    char *ev[] = {"lpgossip", "eval", model, "--batch", "3", "--json", NULL};
    assert_int_equal(s_run(ev, log), 0);
    char *e = tk_slurp(log), *q = strstr(e, "\"confusion\":[");
    assert_non_null(q);
    ASSERT_HAS(e, "{\"class\":\"bee\",\"samples\":2,");
    int conf[9];
    q += strlen("\"confusion\":[");
    for (int i = 0; i < 9; i++) {
        while (*q < '0' || *q > '9')
            q++;
        conf[i] = (int)strtol(q, &q, 10);
    }
    free(e);
    char *pr[16] = {"lpgossip", "predict", model, "--json"};
    const char *imgs[] = {"ant/im0.png", "ant/im1.jpg", "bee/im0.jpg", "bee/im1.png",
                          "zebra/im0.png", "zebra/im1.jpg"};
    char paths[6][128];
    for (int i = 0; i < 6; i++) {
        snprintf(paths[i], sizeof paths[i], FIX "imgs/test/%s", imgs[i]);
        pr[4 + i] = paths[i];
    }
    assert_int_equal(s_run(pr, log), 0);
    e = tk_slurp(log);
    const char *names[] = {"ant", "bee", "zebra"};
    for (int k = 0; k < 3; k++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"class\":\"%s\"", names[k]);
        int n = 0, want = conf[k] + conf[3 + k] + conf[6 + k];
        for (char *s = strstr(e, pat); s; s = strstr(s + 1, pat))
            n++;
        if (n != want)
            fail_msg("predict says %s %d times, eval's column %d", names[k], n, want);
    }
    free(e);
    char *bad[] = {"lpgossip", "predict", model, FIX "bad/notes.png", NULL};
    assert_int_equal(s_run(bad, log), 1);
    e = tk_slurp(log);
    ASSERT_HAS(e, "notes.png: not a PNG or JPEG image");
    free(e);
}

/* A table through a model file: train the shipped MLP in int8 on a CSV
 * table, then eval and predict read everything (graph, per-feature
 * standardisation, class names) from the saved model alone. */
static void test_table_mlp(void **state)
{
    (void)state;
    char model[300], log[300], err[512];
    snprintf(model, sizeof model, "%s/t.safetensors", g_dir);
    snprintf(log, sizeof log, "%s/log.txt", g_dir);
    char *tr[] = {"lpgossip", "train", "--model", "models/mlp.yaml", "--precision", "int8",
                  "--data", "csv:" FIX "iris_train.csv,test=" FIX "iris_test.csv", "--epochs", "3",
                  "--batch", "4", "--save", model, NULL};
    if (s_run(tr, log) != 0)
        tk_dump(log), fail();
    node_data_info in;
    assert_int_equal(node_data_info_read(model, &in, err, sizeof err), 0);
    assert_int_equal(in.c, 3);
    assert_int_equal(in.classes, 3);
    assert_string_equal(in.names[0], "setosa");
    assert_non_null(in.mean);
    assert_true(in.is_float);
    node_data_info_free(&in);
    char *pr[] = {"lpgossip", "predict", model, "--data", "csv:" FIX "iris_test.csv", "--json",
                  NULL};
    assert_int_equal(s_run(pr, log), 0);
    char *e = tk_slurp(log);
    int lines = 0;
    for (char *q = strstr(e, "\"class\":\""); q; q = strstr(q + 1, "\"class\":\"")) {
        q += strlen("\"class\":\"");
        assert_true(!strncmp(q, "setosa\"", 7) || !strncmp(q, "versicolor\"", 11) ||
                    !strncmp(q, "virginica\"", 10));
        lines++;
    }
    free(e);
    assert_int_equal(lines, 4); /* the test file's rows */
    char *ev[] = {"lpgossip", "eval", model, "--json", NULL};
    assert_int_equal(s_run(ev, log), 0);
    e = tk_slurp(log);
    ASSERT_HAS(e, "{\"class\":\"virginica\",\"samples\":2,");
    free(e);
}

static int s_setup(void **state)
{
    (void)state;
    return tk_mkdtemp(g_dir, sizeof g_dir, "node-data");
}

static int s_teardown(void **state)
{
    (void)state;
    return tk_rmtree(g_dir);
}

/* The progress evaluations' subset: the same on every call (every node),
 * increasing, distinct, in range, NULL where it would be the whole set;
 * --eval-subset parsed with its default and bounds. */
static void test_eval_subset(void **state)
{
    (void)state;
    uint32_t *a = node_eval_subset(10000, 2000), *b = node_eval_subset(10000, 2000);
    assert_non_null(a);
    assert_memory_equal(a, b, 2000 * sizeof *a);
    size_t low = 0;
    for (size_t i = 0; i < 2000; i++) {
        assert_true(a[i] < 10000);
        if (i)
            assert_true(a[i] > a[i - 1]);
        low += a[i] < 5000;
    }
    assert_true(low > 800 && low < 1200); /* spread over the set, not its start */
    free(a);
    free(b);
    assert_null(node_eval_subset(100, 100));
    assert_null(node_eval_subset(100, 0));
    node_opts o;
    char *d[] = {"train", NULL};
    assert_int_equal(node_opts_parse(&o, NODE_CMD_TRAIN, 1, d), -1);
    assert_int_equal(o.t.eval_subset, 1000);
    node_opts_free(&o);
    char *g[] = {"train", "--eval-subset", "0", "--eval-offset", "7", NULL};
    assert_int_equal(node_opts_parse(&o, NODE_CMD_TRAIN, 5, g), -1);
    assert_int_equal(o.t.eval_subset, 0);
    assert_int_equal(o.t.eval_offset, 7);
    node_opts_free(&o);
    char *bad[] = {"train", "--eval-subset", "-1", NULL};
    assert_int_not_equal(node_opts_parse(&o, NODE_CMD_TRAIN, 3, bad), -1);
    node_opts_free(&o);
}

/* The last evaluation: on the whole test set by default, on the fixed
 * subset with --eval-final subset; a wrong value refused. */
static void test_eval_final(void **state)
{
    (void)state;
    char met[300], log[300];
    snprintf(met, sizeof met, "%s/m.jsonl", g_dir);
    snprintf(log, sizeof log, "%s/log.txt", g_dir);
    for (int subset = 0; subset < 2; subset++) {
        unlink(met);
        char *tr[] = {"lpgossip", "train", "--model", "models/mlp.yaml", "--data",
                      "csv:" FIX "iris_train.csv,test=" FIX "iris_test.csv", "--epochs", "2",
                      "--batch", "4", "--eval-subset", "3", "--metrics", met, "--eval-final",
                      subset ? "subset" : "whole", NULL};
        if (s_run(tr, log) != 0)
            tk_dump(log), fail();
        char *m = tk_slurp(met), *last = strrchr(m, '{'), *first = strstr(m, "\"eval_samples\":");
        assert_non_null(first);
        assert_int_equal(strtol(first + strlen("\"eval_samples\":"), NULL, 10), 3);
        char *q = strstr(last, "\"eval_samples\":");
        assert_non_null(q);
        assert_int_equal(strtol(q + strlen("\"eval_samples\":"), NULL, 10), subset ? 3 : 4);
        free(m);
    }
    node_opts o;
    char *bad[] = {"train", "--eval-final", "all", NULL};
    assert_int_not_equal(node_opts_parse(&o, NODE_CMD_TRAIN, 3, bad), -1);
    node_opts_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sites),
        cmocka_unit_test(test_dirichlet_shards),
        cmocka_unit_test(test_train_eval_predict),
        cmocka_unit_test(test_table_mlp),
        cmocka_unit_test(test_eval_subset),
        cmocka_unit_test(test_eval_final),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
