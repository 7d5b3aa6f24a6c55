/* test_node_guards — what a careless operator (or a bad file) cannot do to
 * a node: the hostile-input checks outside the network link.
 *
 *   one live process per rank and --out: node_lock refuses a second holder
 *     (another open in the same process, another process), the kernel frees
 *     the lock of a SIGKILLed holder; a second `lpgossip node` of the same
 *     rank and --out exits 2 naming the lock, without touching the live
 *     node's log;
 *   --resume refuses (exit 2, naming the file and what differs) a
 *     checkpoint of another partition (--skew), of an edited topology file
 *     under the same path, and one whose tensor bytes were overwritten; the
 *     good checkpoint still resumes;
 *   non-finite models: node_model_save writes none; `lpgossip eval` and
 *     `eval --average` refuse a model file holding a NaN, by name (exit 2);
 *   CURVE hygiene: `lpgossip keygen` writes the secret 0600 (also over an
 *     old 0644 file with --force); a secret key file accessible by group or
 *     others is refused with its mode and `chmod 600`;
 *   scripts/run-local with gnuplot hidden from PATH writes summary.json and
 *     summary.md saying the plots were skipped, and leaves a node that ended
 *     with status 3 (cut off from all its neighbours) out of the average,
 *     saying so (a wrapper plays that node: the status is the contract).
 * Children are started with tk_spawn (bounded waits, killed in the
 * teardown); temp files live under one directory removed in the teardown.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/tk.h"
#include "tests/tk_run.h"

#include "node/node_cert.h"
#include "node/node_common.h"
#include "node/node_lock.h"
#include "nn/nn_safetensors.h"

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    return tk_dir_setup(s_dir, sizeof s_dir, "guards");
}

static int s_teardown(void **state)
{
    (void)state;
    tk_dir_teardown(s_dir);
    return 0;
}

/* Runs lpgossip with args (argv[0] included) to completion within 120 s;
 * returns its exit status, output in log. */
static int s_run(char *const *args, const char *log)
{
    pid_t pid = tk_spawn(NULL, args, log, -1);
    assert_true(pid > 0);
    int rc = tk_wait(pid, 120);
    if (rc < 0)
        tk_dump(log);
    assert_true(rc >= 0);
    return rc;
}

/* Expects `want` in the file at path (dumps it otherwise). */
static void s_expect_in(const char *path, const char *want)
{
    char *s = tk_slurp(path);
    if (!strstr(s, want)) {
        tk_dump(path);
        free(s);
        fail_msg("'%s' not in %s", want, path);
    }
    free(s);
}

/* ---- one live process per rank and --out ------------------------------- */

static void test_lock(void **state)
{
    (void)state;
    char err[1024] = "";
    node_lock *a = node_lock_new(s_dir, 3, err, sizeof err);
    assert_non_null(a);
    /* a second holder, even in this process (another open file) */
    assert_null(node_lock_new(s_dir, 3, err, sizeof err));
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, "another lpgossip node of rank 3"));
    assert_non_null(strstr(err, "lock-3"));
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    assert_non_null(strstr(err, pid));
    /* other ranks are independent */
    node_lock *b = node_lock_new(s_dir, 4, err, sizeof err);
    assert_non_null(b);
    node_lock_destroy(&a);
    assert_null(a);
    node_lock_destroy(&a); /* safe on NULL */
    a = node_lock_new(s_dir, 3, err, sizeof err);
    assert_non_null(a);
    node_lock_destroy(&a);
    node_lock_destroy(&b);
    /* another process holds it; SIGKILL frees it */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        node_lock *l = node_lock_new(s_dir, 5, err, sizeof err);
        char c = l ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    assert_null(node_lock_new(s_dir, 5, err, sizeof err));
    assert_non_null(strstr(err, "rank 5"));
    kill(child, SIGKILL);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    a = node_lock_new(s_dir, 5, err, sizeof err);
    assert_non_null(a);
    node_lock_destroy(&a);
    close(ready[0]);
    close(ready[1]);
    /* a directory that does not exist */
    assert_null(node_lock_new("/nonexistent/lpgossip", 0, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/lpgossip/lock-0"));
}

static void s_one_node_topology(char *path, size_t len)
{
    snprintf(path, len, "%s/one.yaml", s_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("nodes: 1\ngraph: {generator: complete}\n", f);
    fclose(f);
}

static void test_second_instance_refused(void **state)
{
    (void)state;
    char topo[400], out[400], log0[400], log1[400], nlog[500];
    s_one_node_topology(topo, sizeof topo);
    snprintf(out, sizeof out, "%s/out", s_dir);
    snprintf(log0, sizeof log0, "%s/first.txt", s_dir);
    snprintf(log1, sizeof log1, "%s/second.txt", s_dir);
    snprintf(nlog, sizeof nlog, "%s/log-0.txt", out);
    /* a long run (killed below) */
    char *first[] = {"lpgossip", "node", "--topology", topo, "--rank", "0", "--no-gossip",
                     "--batch", "8", "--epochs", "50", "--no-eval", "--out", out, NULL};
    pid_t live = tk_spawn(NULL, first, log0, -1);
    assert_true(live > 0);
    /* wait until it trains (its log says so) */
    int up = 0;
    for (int k = 0; k < 600 && !up; k++) {
        char *s = tk_slurp(nlog);
        up = strstr(s, "node n0 of") != NULL;
        free(s);
        if (!up)
            usleep(50000);
    }
    if (!up)
        tk_dump(log0);
    assert_true(up);
    char *second[] = {"lpgossip", "node", "--topology", topo, "--rank", "0", "--no-gossip",
                      "--train-subset", "64", "--batch", "8", "--epochs", "1", "--no-eval",
                      "--resume", "--out", out, NULL};
    assert_int_equal(s_run(second, log1), 2);
    s_expect_in(log1, "another lpgossip node of rank 0 is running with --out");
    s_expect_in(log1, "lock-0");
    /* the live node's log was not truncated by the newcomer */
    s_expect_in(nlog, "node n0 of");
    assert_int_equal(tk_wait(live, 0.01), -1); /* still running */
    tk_kill(live, SIGKILL);
    /* once it is gone, the rank can start again */
    char *again[] = {"lpgossip", "node", "--topology", topo, "--rank", "0", "--no-gossip",
                     "--train-subset", "64", "--batch", "8", "--epochs", "1", "--no-eval",
                     "--out", out, NULL};
    assert_int_equal(s_run(again, log1), 0);
}

/* ---- --resume refuses what it should ----------------------------------- */

static void s_poke_float(const char *path, long from_end, float v)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -from_end, SEEK_END), 0);
    assert_int_equal(fwrite(&v, sizeof v, 1, f), 1);
    fclose(f);
}

static void test_resume_refused(void **state)
{
    (void)state;
    char topo[400], out[400], log[400], ckpt[500], saved[500];
    s_one_node_topology(topo, sizeof topo);
    snprintf(out, sizeof out, "%s/out", s_dir);
    snprintf(log, sizeof log, "%s/node.txt", s_dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-0.safetensors", out);
    snprintf(saved, sizeof saved, "%s/ckpt-good", s_dir);
    char *args[32];
    int a = 0;
    char *base[] = {"lpgossip", "node", "--topology", topo, "--rank", "0", "--no-gossip",
                    "--train-subset", "160", "--batch", "8", "--epochs", "1", "--no-eval",
                    "--checkpoint-every", "10", "--out", out};
    for (size_t k = 0; k < sizeof base / sizeof *base; k++)
        args[a++] = base[k];
    args[a] = NULL;
    assert_int_equal(s_run(args, log), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", ckpt, saved);
    assert_int_equal(system(cmd), 0);
    /* another partition */
    args[a] = "--resume";
    args[a + 1] = "--skew";
    args[a + 2] = "0.5";
    args[a + 3] = NULL;
    assert_int_equal(s_run(args, log), 2);
    s_expect_in(log, "cannot resume from ");
    s_expect_in(log, "ckpt-0.safetensors: it was written with skew '0', this run has '0.5'");
    /* the same topology path, other contents */
    args[a + 1] = NULL;
    FILE *f = fopen(topo, "a");
    assert_non_null(f);
    fputs("description: edited after the checkpoint\n", f);
    fclose(f);
    assert_int_equal(s_run(args, log), 2);
    s_expect_in(log, "topology_digest");
    s_expect_in(log, "the topology file's contents changed");
    s_one_node_topology(topo, sizeof topo);
    /* tensor bytes overwritten (the last value of the last tensor) */
    s_poke_float(ckpt, 4, 1e30f);
    assert_int_equal(s_run(args, log), 2);
    s_expect_in(log, "checksum mismatch");
    /* the good checkpoint resumes */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", saved, ckpt);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(s_run(args, log), 0);
    s_expect_in(log, "resumed from");
}

/* ---- non-finite models -------------------------------------------------- */

static nn_model *s_cnn(node_model_opts *mo)
{
    char err[512];
    node_model_opts_defaults(mo);
    mo->model = NODE_ARCH_CNN;
    nn_model *m = node_model_build(mo, 1, 28, 28, 10, err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    return m;
}

static void test_nonfinite_models(void **state)
{
    (void)state;
    char good[400], bad[400], corrupt[400], never[400], log[400], err[1024];
    snprintf(good, sizeof good, "%s/good.safetensors", s_dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", s_dir);
    snprintf(corrupt, sizeof corrupt, "%s/corrupt.safetensors", s_dir);
    snprintf(never, sizeof never, "%s/never.safetensors", s_dir);
    snprintf(log, sizeof log, "%s/eval.txt", s_dir);
    node_model_opts mo;
    nn_model *m = s_cnn(&mo);
    nn_arena *p = nn_model_params(m);
    for (size_t k = 0; k < p->numel; k++)
        p->data[k] = 0.001f * (float)(k % 7);
    assert_int_equal(node_model_save(good, m, &mo, err, sizeof err), 0);
    assert_int_equal(node_model_save(corrupt, m, &mo, err, sizeof err), 0);
    /* node_model_save never writes a non-finite model */
    p->data[p->numel / 2] = NAN;
    assert_int_equal(node_model_save(never, m, &mo, err, sizeof err), -1);
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, "not written"));
    assert_non_null(strstr(err, "is not finite"));
    assert_int_equal(access(never, F_OK), -1);
    /* a NaN model as another writer (or an older lpgossip, without
     * checksum) would leave it */
    const char *meta[] = {"format", "lpgossip-model-1", "model", node_arch_name(mo.model),
                          "norm", node_norm_name(mo.norm), "precision",
                          node_precision_name(mo.precision), "data", mo.data, "input_shape", "1,28,28",
                          "classes", "10", "groups", "8", NULL};
    char groups[16];
    snprintf(groups, sizeof groups, "%d", mo.groups);
    meta[15] = groups;
    const nn_arena *ar[2] = {p, nn_model_buffers(m)};
    assert_int_equal(nn_safetensors_save(bad, ar, nn_model_buffers(m)->nviews ? 2 : 1, meta, err,
                                         sizeof err), 0);
    nn_model_destroy(&m);
    char *one[] = {"lpgossip", "eval", bad, NULL};
    assert_int_equal(s_run(one, log), 2);
    s_expect_in(log, bad);
    s_expect_in(log, "= nan is not finite");
    char *avg[] = {"lpgossip", "eval", "--average", good, bad, good, NULL};
    assert_int_equal(s_run(avg, log), 2);
    s_expect_in(log, bad);
    s_expect_in(log, "refusing a non-finite model (leave it out of --average)");
    /* finite but overwritten bytes (1e30): the model checksum */
    s_poke_float(corrupt, 4, 1e30f);
    char *cor[] = {"lpgossip", "eval", "--average", good, corrupt, NULL};
    assert_int_equal(s_run(cor, log), 2);
    s_expect_in(log, corrupt);
    s_expect_in(log, "checksum mismatch");
    /* the good one alone evaluates (on the fixed 500-sample subset: the
     * whole test set is minutes of an emulated CPU) */
    char *ok[] = {"lpgossip", "eval", "--subset", "500", "--average", good, good, NULL};
    assert_int_equal(s_run(ok, log), 0);
    s_expect_in(log, "test accuracy");
    s_expect_in(log, "on 500 ");
    /* not a model file at all: invalid input, 2 */
    char junkf[400];
    snprintf(junkf, sizeof junkf, "%s/junk.safetensors", s_dir);
    FILE *f = fopen(junkf, "w");
    assert_non_null(f);
    fputs("not a model\n", f);
    fclose(f);
    char *junk[] = {"lpgossip", "eval", junkf, NULL};
    assert_int_equal(s_run(junk, log), 2);
    s_expect_in(log, junkf);
}

/* ---- CURVE hygiene ------------------------------------------------------ */

static unsigned s_mode(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

static void test_secret_key_mode(void **state)
{
    (void)state;
    char key[400], sec[420], log[400], err[1024];
    uint8_t pub[32], secret[32];
    snprintf(key, sizeof key, "%s/n0", s_dir);
    snprintf(sec, sizeof sec, "%s_secret", key);
    snprintf(log, sizeof log, "%s/keygen.txt", s_dir);
    char *gen[] = {"lpgossip", "keygen", key, NULL};
    assert_int_equal(s_run(gen, log), 0);
    assert_int_equal(s_mode(sec), 0600);
    assert_int_equal(s_mode(key), 0644);
    assert_int_equal(node_cert_load(sec, pub, secret, err, sizeof err), 0);
    assert_int_equal(node_cert_load(key, pub, secret, err, sizeof err), 0);
    /* readable by others, or by the group: refused, as ssh does */
    unsigned modes[] = {0644, 0640, 0604, 0620};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        char want[32];
        assert_int_equal(chmod(sec, modes[k]), 0);
        err[0] = '\0';
        assert_int_equal(node_cert_load(sec, pub, secret, err, sizeof err), -1);
        snprintf(want, sizeof want, "mode %04o", modes[k]);
        assert_non_null(strstr(err, want));
        assert_non_null(strstr(err, "chmod 600"));
        assert_non_null(strstr(err, sec));
        /* the public file with its _secret next to it: the same check */
        assert_int_equal(node_cert_load(key, pub, secret, err, sizeof err), -1);
        assert_non_null(strstr(err, sec));
    }
    print_message("refused: %s\n", err);
    /* keygen --force over a 0644 secret writes a 0600 one */
    assert_int_equal(chmod(sec, 0644), 0);
    char *force[] = {"lpgossip", "keygen", key, "--force", NULL};
    assert_int_equal(s_run(force, log), 0);
    assert_int_equal(s_mode(sec), 0600);
    assert_int_equal(node_cert_load(sec, pub, secret, err, sizeof err), 0);
}

/* ---- scripts/run-local: no gnuplot, a node cut off ------------------- */

/* A directory whose only program is the real python3 (not a shell shim):
 * PATH=dir hides gnuplot from run-local. */
static void s_python_only_path(char *dir, size_t len)
{
    snprintf(dir, len, "%s/pybin", s_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    FILE *p = popen("python3 -c 'import sys; print(sys.executable)'", "r");
    assert_non_null(p);
    char exe[512] = "", link[700];
    assert_non_null(fgets(exe, sizeof exe, p));
    pclose(p);
    exe[strcspn(exe, "\n")] = '\0';
    snprintf(link, sizeof link, "%s/python3", dir);
    assert_int_equal(symlink(exe, link), 0);
}

static void test_run_local_summary(void **state)
{
    (void)state;
    char topo[400], out[400], log[400], pydir[300], wrap[400], sum[500], md[500];
    char bin[4096];
    assert_non_null(realpath(tk_bin(), bin));
    snprintf(topo, sizeof topo, "%s/three.yaml", s_dir);
    FILE *f = fopen(topo, "w");
    assert_non_null(f);
    fputs("nodes: 3\ngraph: {generator: undirected_ring}\n", f);
    fclose(f);
    s_python_only_path(pydir, sizeof pydir);
    /* a node binary whose rank 1 ends as a node cut off from all its
     * neighbours does (status 3) after finishing normally */
    snprintf(wrap, sizeof wrap, "%s/lpgossip-wrap", s_dir);
    f = fopen(wrap, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n'%s' \"$@\"; rc=$?\n"
               "case \" $* \" in *\" node \"*\"--rank 1 \"*) [ $rc = 0 ] && exit 3;; esac\n"
               "exit $rc\n", bin);
    fclose(f);
    assert_int_equal(chmod(wrap, 0755), 0);
    snprintf(out, sizeof out, "%s/run", s_dir);
    snprintf(log, sizeof log, "%s/run-local.txt", s_dir);
    char *args[] = {"run-local", topo, "--bin", wrap, "--out", out, "--quiet",
                    "--train-subset", "120", "--batch", "8", "--epochs", "1", "--no-eval", NULL};
    char *old_path = strdup(getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", pydir, 1);
    pid_t pid = tk_spawn("scripts/run-local", args, log, -1);
    setenv("PATH", old_path, 1);
    free(old_path);
    assert_true(pid > 0);
    int rc = tk_wait(pid, 300);
    if (rc != 0)
        tk_dump(log);
    assert_int_equal(rc, 0);
    snprintf(sum, sizeof sum, "%s/summary.json", out);
    snprintf(md, sizeof md, "%s/summary.md", out);
    s_expect_in(sum, "\"plots_note\": \"plots skipped: gnuplot is not installed");
    s_expect_in(sum, "\"averaged_ranks\": [\n    0,\n    2\n  ]");
    s_expect_in(sum, "\"rank\": 1,");
    s_expect_in(sum, "cut off from all its neighbours");
    s_expect_in(md, "| plots | plots skipped: gnuplot is not installed");
    s_expect_in(md, "(2 of 3 models)");
    s_expect_in(md, "| left out of the average | rank 1 (n1): exit status 3");
    s_expect_in(log, "node 1 (n1) ended cut off from all its neighbours");
    /* with gnuplot (when installed) and --no-eval: no accuracy to plot, so
     * only the loss plots are made, and the summary says why */
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        print_message("gnuplot not installed: the run with plots is skipped\n");
        return;
    }
    snprintf(out, sizeof out, "%s/run2", s_dir);
    pid = tk_spawn("scripts/run-local", args, log, -1);
    assert_true(pid > 0);
    rc = tk_wait(pid, 300);
    if (rc != 0)
        tk_dump(log);
    assert_int_equal(rc, 0);
    snprintf(sum, sizeof sum, "%s/summary.json", out);
    s_expect_in(sum, "loss-vs-iter.png");
    snprintf(md, sizeof md, "%s/summary.md", out);
    s_expect_in(sum, "no accuracy plots: no progress evaluations (--no-eval)");
    s_expect_in(md, "| mean per-node test accuracy | - (no node evaluated its own model) |");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lock, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_second_instance_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_resume_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite_models, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_secret_key_mode, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_run_local_summary, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
