/* test_node_files — every reader of a file the program is given (models,
 * checkpoints, topologies, data, certificates) refuses what is not a
 * regular file before it can block on it, and never echoes the bytes of a
 * file it refuses.
 *
 *   nn_open_regular: a named pipe (no writer: a plain open would wait
 *     forever), a symlink to one, a character device (/dev/null), a
 *     directory, a missing file; a regular file and a symlink to one open.
 *   every reader: the same kinds through nn_safetensors_load and _meta
 *     (`eval` models, `--resume` checkpoints), node_ckpt_load,
 *     node_ckpt_ident_make (the topology digest), topo_load,
 *     nn_data_load_idx, nn_data_load_cifar10_files and node_cert_load
 *     (`--cert`): each returns an error naming the path and "not a regular
 *     file".  An alarm bounds the whole program: a reader that blocks
 *     fails the test instead of hanging it.
 *   no echo: a "checkpoint" that is a password file (first line
 *     root:*:2...) is refused without its first 8 bytes in the message,
 *     neither as text nor as the number they make.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cmocka.h>

#include "nn/nn_core.h"
#include "nn/nn_data.h"
#include "nn/nn_safetensors.h"
#include "node/node_cert.h"
#include "node/node_ckpt.h"
#include "tests/tk.h"
#include "topology/topo.h"

static char s_dir[256];

/* The kinds of path every reader must refuse; filled by s_setup. */
enum { S_FIFO, S_FIFO_LINK, S_DEVICE, S_DIR, S_NKINDS };
static char s_bad[S_NKINDS][400];
static const char *s_kind_name[S_NKINDS] = {"named pipe", "symlink to a named pipe",
                                             "character device", "directory"};

static int s_setup(void **state)
{
    (void)state;
    if (tk_mkdtemp(s_dir, sizeof s_dir, "files") != 0)
        return -1;
    snprintf(s_bad[S_FIFO], sizeof s_bad[0], "%s/fifo", s_dir);
    snprintf(s_bad[S_FIFO_LINK], sizeof s_bad[0], "%s/link", s_dir);
    snprintf(s_bad[S_DEVICE], sizeof s_bad[0], "/dev/null");
    snprintf(s_bad[S_DIR], sizeof s_bad[0], "%s/adir", s_dir);
    if (mkfifo(s_bad[S_FIFO], 0600) != 0 || symlink(s_bad[S_FIFO], s_bad[S_FIFO_LINK]) != 0 ||
        mkdir(s_bad[S_DIR], 0700) != 0)
        return -1;
    alarm(60); /* a reader that blocks on a pipe ends the program (a failure) */
    return 0;
}

static int s_teardown(void **state)
{
    (void)state;
    alarm(0);
    tk_rmtree(s_dir);
    return 0;
}

/* err names path and says it is not a regular file. */
static void s_refused(const char *who, const char *path, int rc, const char *err)
{
    if (rc == 0 || !strstr(err, path) || !strstr(err, "not a regular file"))
        fail_msg("%s on %s: rc %d, message '%s' (expected a refusal naming the path and "
                 "'not a regular file')", who, path, rc, err);
}

static void s_write(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

static void test_open_regular(void **state)
{
    (void)state;
    char err[1024], file[400], link[400];
    for (int k = 0; k < S_NKINDS; k++) {
        int fd = nn_open_regular(s_bad[k], NULL, err, sizeof err);
        s_refused(s_kind_name[k], s_bad[k], fd >= 0 ? 0 : -1, err);
    }
    int fd = nn_open_regular(s_bad[S_FIFO], NULL, err, sizeof err);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(err, "a named pipe"));
    assert_int_equal(nn_open_regular(s_bad[S_DEVICE], NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "a character device"));
    snprintf(file, sizeof file, "%s/none", s_dir);
    assert_int_equal(nn_open_regular(file, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    /* a regular file, directly and through a symlink: opened, blocking */
    snprintf(file, sizeof file, "%s/plain", s_dir);
    snprintf(link, sizeof link, "%s/plain-link", s_dir);
    s_write(file, "12345", 5);
    assert_int_equal(symlink(file, link), 0);
    uint64_t size = 0;
    fd = nn_open_regular(link, &size, err, sizeof err);
    assert_true(fd >= 0);
    assert_int_equal(size, 5);
    char b[8];
    assert_int_equal(read(fd, b, sizeof b), 5);
    close(fd);
    FILE *f = nn_fopen_regular(file, NULL, err, sizeof err);
    assert_non_null(f);
    fclose(f);
    assert_null(nn_fopen_regular(s_bad[S_FIFO], NULL, err, sizeof err));
}

/* Every reader, on every kind of path. */
static void test_every_reader(void **state)
{
    (void)state;
    char err[1024], meta[64];
    nn_arena a;
    nn_arena_init(&a);
    int shape[1] = {4};
    nn_arena_add(&a, "w", 1, shape);
    nn_arena_alloc(&a);
    nn_arena *arenas[1] = {&a};
    float x[4] = {0};
    node_ckpt ck = {.layout = &a, .x = x};
    uint8_t pub[32], sec[32];
    for (int k = 0; k < S_NKINDS; k++) {
        const char *p = s_bad[k];
        uint64_t it = 0;
        s_refused("nn_safetensors_load", p, nn_safetensors_load(p, arenas, 1, err, sizeof err),
                  err);
        s_refused("nn_safetensors_meta", p,
                  nn_safetensors_meta(p, "k", meta, sizeof meta, err, sizeof err), err);
        s_refused("node_ckpt_load", p, node_ckpt_load(p, &ck, &it, err, sizeof err), err);
        node_ckpt_ident id;
        node_ckpt_run run = {.model = "cnn", .norm = "none", .precision = "fp32",
                             .data = "x", .algo = "choco", .compressor = "identity",
                             .topology_path = p, .nodes = 2};
        s_refused("node_ckpt_ident_make", p, node_ckpt_ident_make(&id, &run, err, sizeof err),
                  err);
        topo *t = topo_load(p, err, sizeof err);
        s_refused("topo_load", p, t ? 0 : -1, err);
        nn_dataset d;
        s_refused("nn_data_load_idx (images)", p, nn_data_load_idx(p, p, &d, err, sizeof err),
                  err);
        const char *paths[1] = {p};
        s_refused("nn_data_load_cifar10_files", p,
                  nn_data_load_cifar10_files(paths, 1, &d, err, sizeof err), err);
        s_refused("node_cert_load", p, node_cert_load(p, pub, sec, err, sizeof err), err);
        nn_dataset tr, te;
        nn_data_opts no = {0};
        s_refused("nn_data_load_npz", p, nn_data_load_npz(p, &no, &tr, &te, err, sizeof err),
                  err);
        s_refused("nn_data_load_csv", p, nn_data_load_csv(p, &tr, &te, err, sizeof err), err);
        size_t *lines = NULL;
        s_refused("nn_data_load_csv_rows", p,
                  nn_data_load_csv_rows(p, NULL, 3, &d, &lines, err, sizeof err), err);
    }
    /* a certificate whose _secret is a named pipe: refused, not read */
    char cert[400], csec[420];
    snprintf(cert, sizeof cert, "%s/cert", s_dir);
    snprintf(csec, sizeof csec, "%s_secret", cert);
    s_write(cert, "x", 1);
    assert_int_equal(mkfifo(csec, 0600), 0);
    s_refused("node_cert_load (PATH_secret)", csec, node_cert_load(cert, pub, sec, err,
                                                                   sizeof err), err);
    nn_arena_free(&a);
}

/* A checkpoint symlinked to a password file: refused without its bytes. */
static void test_no_echo(void **state)
{
    (void)state;
    char file[400], link[400], err[1024], meta[64];
    snprintf(file, sizeof file, "%s/shadow", s_dir);
    snprintf(link, sizeof link, "%s/ckpt.safetensors", s_dir);
    const char *txt = "root:*:20000:0:99999:7:::\ndaemon:*:20000:0:99999:7:::\n";
    s_write(file, txt, strlen(txt));
    assert_int_equal(symlink(file, link), 0);
    uint64_t n = 0; /* what the first 8 bytes make as a length field */
    for (int i = 7; i >= 0; i--)
        n = n << 8 | (uint8_t)txt[i];
    char num[32];
    snprintf(num, sizeof num, "%llu", (unsigned long long)n);
    nn_arena a;
    nn_arena_init(&a);
    int shape[1] = {4};
    nn_arena_add(&a, "w", 1, shape);
    nn_arena_alloc(&a);
    nn_arena *arenas[1] = {&a};
    float x[4] = {0};
    node_ckpt ck = {.layout = &a, .x = x};
    uint64_t it;
    for (int k = 0; k < 3; k++) {
        int rc = k == 0   ? nn_safetensors_load(link, arenas, 1, err, sizeof err)
                 : k == 1 ? nn_safetensors_meta(link, "k", meta, sizeof meta, err, sizeof err)
                          : node_ckpt_load(link, &ck, &it, err, sizeof err);
        assert_int_equal(rc, -1);
        if (!strstr(err, link) || strstr(err, num) || strstr(err, "root") ||
            strstr(err, "20000"))
            fail_msg("reader %d: '%s' must name %s and carry none of its bytes", k, err, link);
    }
    nn_arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_regular),
        cmocka_unit_test(test_every_reader),
        cmocka_unit_test(test_no_echo),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
