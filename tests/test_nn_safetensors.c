/* test_nn_safetensors — round trips, atomic replace, the writer's failure
 * paths, interop with Python, and malformed files (each rejected with a
 * message naming the problem).
 *
 * Files live in a mkdtemp() directory removed at the end.  The interop test
 * runs /usr/bin/python3 (json + struct, and numpy when importable) on a file
 * we wrote; it is skipped when python3 is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/nn_core.h"
#include "nn/nn_safetensors.h"

static char g_dir[256];

#define ASSERT_HAS(msg, sub)                                                          \
    do {                                                                              \
        if (!strstr((msg), (sub)))                                                    \
            fail_msg("message \"%s\" lacks \"%s\"", (msg), (sub));                    \
    } while (0)

static int group_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/lpg_test_nn_st_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    return rmdir(g_dir);
}

static void s_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}

/* Number of directory entries whose name contains ".tmp.". */
static int s_count_tmp(void)
{
    int n = 0;
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* Arena A: a small conv net's parameters; arena B: norm parameters. */
static void s_make_a(nn_arena *a)
{
    nn_arena_init(a);
    nn_arena_add(a, "conv.weight", 4, (int[]){4, 3, 3, 3});
    nn_arena_add(a, "conv.bias", 1, (int[]){4});
    nn_arena_add(a, "fc.weight", 2, (int[]){10, 4});
    nn_arena_alloc(a);
}

static void s_make_b(nn_arena *b)
{
    nn_arena_init(b);
    nn_arena_add(b, "norm.gamma", 1, (int[]){4});
    nn_arena_add(b, "norm.running", 2, (int[]){2, 2});
    nn_arena_alloc(b);
}

static void s_fill(nn_arena *a, uint64_t seed, int specials)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < a->numel; i++)
        a->data[i] = nn_rng_normal(&r);
    if (specials && a->numel >= 5) {
        /* Bit patterns must survive: -0, inf, a NaN payload, a denormal. */
        uint32_t nan_bits = 0x7fc12345u;
        a->data[0] = -0.0f;
        a->data[1] = INFINITY;
        memcpy(&a->data[2], &nan_bits, 4);
        a->data[3] = 1e-40f;
        a->data[4] = -FLT_MAX;
    }
}

static void test_roundtrip(void **state)
{
    (void)state;
    char path[512], err[512], val[256];
    s_path(path, sizeof path, "model.safetensors");
    nn_arena a, b, a2, b2;
    s_make_a(&a);
    s_make_b(&b);
    s_fill(&a, 1, 1);
    s_fill(&b, 2, 0);
    const nn_arena *save[2] = {&a, &b};
    const char *meta[] = {"format", "lpgossip-checkpoint-v1", "model", "resnet20", "tricky",
                          "a \"q\" \\ \n\ttab \xc3\xa9 \xf0\x9f\x98\x80", NULL};
    assert_int_equal(nn_safetensors_save(path, save, 2, meta, err, sizeof err), 0);
    assert_int_equal(s_count_tmp(), 0);

    /* Layout: 8 + N + data, data start 8-aligned. */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    FILE *f = fopen(path, "rb");
    unsigned char lb[8];
    assert_int_equal(fread(lb, 1, 8, f), 8);
    fclose(f);
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--)
        N = N << 8 | lb[i];
    assert_int_equal((8 + N) % 8, 0);
    assert_int_equal((uint64_t)st.st_size, 8 + N + 4 * (a.numel + b.numel));

    nn_arena_init(&a2);
    nn_arena_init(&b2);
    nn_arena_clone_layout(&a2, &a);
    nn_arena_clone_layout(&b2, &b);
    nn_arena *load[2] = {&a2, &b2};
    assert_int_equal(nn_safetensors_load(path, load, 2, err, sizeof err), 0);
    assert_memory_equal(a.data, a2.data, a.numel * 4);
    assert_memory_equal(b.data, b2.data, b.numel * 4);

    /* Order of arenas does not matter; a subset loads (extras ignored). */
    memset(b2.data, 0, b.numel * 4);
    nn_arena *only_b[1] = {&b2};
    assert_int_equal(nn_safetensors_load(path, only_b, 1, err, sizeof err), 0);
    assert_memory_equal(b.data, b2.data, b.numel * 4);

    assert_int_equal(nn_safetensors_meta(path, "model", val, sizeof val, err, sizeof err), 0);
    assert_string_equal(val, "resnet20");
    assert_int_equal(nn_safetensors_meta(path, "tricky", val, sizeof val, err, sizeof err), 0);
    assert_string_equal(val, meta[5]);
    assert_int_equal(nn_safetensors_meta(path, "absent", val, sizeof val, err, sizeof err), -1);
    ASSERT_HAS(err, "no metadata key 'absent'");
    assert_int_equal(nn_safetensors_meta(path, "format", val, 5, err, sizeof err), -1);
    ASSERT_HAS(err, "does not fit");

    /* Overwrite with new values: the load sees the new file. */
    s_fill(&a, 3, 0);
    assert_int_equal(nn_safetensors_save(path, save, 1, NULL, err, sizeof err), 0);
    assert_int_equal(nn_safetensors_load(path, load, 1, err, sizeof err), 0);
    assert_memory_equal(a.data, a2.data, a.numel * 4);
    assert_int_equal(nn_safetensors_meta(path, "model", val, sizeof val, err, sizeof err), -1);
    ASSERT_HAS(err, "no metadata key");
    assert_int_equal(s_count_tmp(), 0);

    nn_arena_free(&a);
    nn_arena_free(&b);
    nn_arena_free(&a2);
    nn_arena_free(&b2);
    unlink(path);
}

/* Arena A filled from seed and saved as NAME in the test directory (the
 * old file that a failed save must leave as it was); path gets its path. */
static void s_saved_a(char *path, size_t pathlen, const char *name, nn_arena *a, uint64_t seed)
{
    char err[512];
    s_path(path, pathlen, name);
    s_make_a(a);
    s_fill(a, seed, 0);
    const nn_arena *one[1] = {a};
    assert_int_equal(nn_safetensors_save(path, one, 1, NULL, err, sizeof err), 0);
}

static void test_save_failures_keep_old_file(void **state)
{
    (void)state;
    char path[512], err[512];
    nn_arena a, a2, m;
    s_saved_a(path, sizeof path, "keep.safetensors", &a, 4);
    const nn_arena *one[1] = {&a};

    /* Same layout twice without prefixes: duplicate names, nothing written. */
    nn_arena_init(&m);
    nn_arena_clone_layout(&m, &a);
    s_fill(&m, 5, 0);
    const nn_arena *two[2] = {&a, &m};
    assert_int_equal(nn_safetensors_save(path, two, 2, NULL, err, sizeof err), -1);
    ASSERT_HAS(err, "duplicate tensor name 'conv.weight'");
    const char *dupmeta[] = {"k", "1", "k", "2", NULL};
    assert_int_equal(nn_safetensors_save(path, one, 1, dupmeta, err, sizeof err), -1);
    ASSERT_HAS(err, "duplicate metadata key 'k'");
    nn_arena_init(&a2);
    nn_arena_clone_layout(&a2, &a);
    nn_arena *l1[1] = {&a2};
    assert_int_equal(nn_safetensors_load(path, l1, 1, err, sizeof err), 0);
    assert_memory_equal(a.data, a2.data, a.numel * 4);

    /* With prefixes both fit in one file and load back separately. */
    const char *pre[2] = {"", "momentum."};
    assert_int_equal(nn_safetensors_save_prefixed(path, two, pre, 2, NULL, err, sizeof err), 0);
    nn_arena m2;
    nn_arena_init(&m2);
    nn_arena_clone_layout(&m2, &a);
    nn_arena *l2[2] = {&a2, &m2};
    assert_int_equal(nn_safetensors_load_prefixed(path, l2, pre, 2, err, sizeof err), 0);
    assert_memory_equal(a.data, a2.data, a.numel * 4);
    assert_memory_equal(m.data, m2.data, m.numel * 4);
    /* Loading the momentum arena under the wrong prefix names the tensor. */
    nn_arena *lm[1] = {&m2};
    const char *wrong[1] = {"xhat."};
    assert_int_equal(nn_safetensors_load_prefixed(path, lm, wrong, 1, err, sizeof err), -1);
    ASSERT_HAS(err, "tensor 'xhat.conv.weight' missing");

    /* A directory that does not exist. */
    assert_int_equal(nn_safetensors_save("/nonexistent_lpg_dir/x.safetensors", one, 1, NULL, err,
                                         sizeof err),
                     -1);
    ASSERT_HAS(err, "/nonexistent_lpg_dir/x.safetensors");
    ASSERT_HAS(err, "cannot create a temp file");
    assert_int_equal(s_count_tmp(), 0);

    nn_arena_free(&a);
    nn_arena_free(&a2);
    nn_arena_free(&m);
    nn_arena_free(&m2);
    unlink(path);
}

/* Every refusal and failure path of the writer: the message names the file
 * and the problem, no temp file is left behind and the old file stays. */
static void test_save_errors(void **state)
{
    (void)state;
    char path[512], err[512], sub[512];
    nn_arena a, r, a2;
    s_saved_a(path, sizeof path, "errs.safetensors", &a, 6);
    const nn_arena *one[1] = {&a};

    /* Refusals before anything is written. */
    nn_arena_init(&r);
    nn_arena_add(&r, "__metadata__", 1, (int[]){2});
    nn_arena_alloc(&r);
    const nn_arena *res[1] = {&r};
    assert_int_equal(nn_safetensors_save(path, res, 1, NULL, err, sizeof err), -1);
    ASSERT_HAS(err, "errs.safetensors: tensor name '__metadata__' is reserved");
    char longp[300];
    memset(longp, 'p', 257);
    longp[257] = 0;
    const char *pre[1] = {longp};
    assert_int_equal(nn_safetensors_save_prefixed(path, one, pre, 1, NULL, err, sizeof err), -1);
    ASSERT_HAS(err, "errs.safetensors: name prefix 'pppppppppppppppppppppppppppppppp...' too long");
    const char *novalue[] = {"k", NULL};
    assert_int_equal(nn_safetensors_save(path, one, 1, novalue, err, sizeof err), -1);
    ASSERT_HAS(err, "errs.safetensors: metadata key 'k' has no value");

    /* rename over a directory fails: the temp file is removed. */
    s_path(sub, sizeof sub, "adir");
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(nn_safetensors_save(sub, one, 1, NULL, err, sizeof err), -1);
    ASSERT_HAS(err, "adir: write failed: ");
    assert_int_equal(s_count_tmp(), 0);
    assert_int_equal(rmdir(sub), 0);

    /* A write that stops half-way (file size limit, like a full disk): the
     * old file stays as it was. */
    nn_arena b;
    nn_arena_init(&b);
    nn_arena_clone_layout(&b, &a);
    s_fill(&b, 7, 0);
    const nn_arena *other[1] = {&b};
    struct rlimit old_lim, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    lim = old_lim;
    lim.rlim_cur = 512; /* past the header, inside the data */
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = nn_safetensors_save(path, other, 1, NULL, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
    signal(SIGXFSZ, old_sig);
    assert_int_equal(rc, -1);
    ASSERT_HAS(err, "errs.safetensors: write failed: File too large");
    assert_int_equal(s_count_tmp(), 0);
    nn_arena_init(&a2);
    nn_arena_clone_layout(&a2, &a);
    nn_arena *l1[1] = {&a2};
    assert_int_equal(nn_safetensors_load(path, l1, 1, err, sizeof err), 0);
    assert_memory_equal(a.data, a2.data, a.numel * 4);

    nn_arena_free(&a);
    nn_arena_free(&a2);
    nn_arena_free(&b);
    nn_arena_free(&r);
    unlink(path);
}

static void test_python_interop(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0)
        skip();
    char path[512], err[512], cmd[2048];
    s_path(path, sizeof path, "py.safetensors");
    nn_arena a, b;
    s_make_a(&a);
    s_make_b(&b);
    s_fill(&a, 6, 0);
    s_fill(&b, 7, 0);
    const nn_arena *save[2] = {&a, &b};
    const char *meta[] = {"format", "pt", NULL};
    assert_int_equal(nn_safetensors_save(path, save, 2, meta, err, sizeof err), 0);
    /* Python parses the header with json, checks alignment and tiling, and
     * prints "name sum" per tensor (numpy when importable, else struct). */
    static const char *script =
        "import json,struct,sys\n"
        "b=open(sys.argv[1],'rb').read()\n"
        "n=struct.unpack('<Q',b[:8])[0]\n"
        "h=json.loads(b[8:8+n].decode('utf-8'))\n"
        "assert (8+n)%8==0\n"
        "m=h.pop('__metadata__')\n"
        "assert m=={'format':'pt'}, m\n"
        "d=b[8+n:]\n"
        "r=sorted((v['data_offsets'],k) for k,v in h.items())\n"
        "at=0\n"
        "for (s,e),k in r:\n"
        "  assert s==at; at=e\n"
        "assert at==len(d)\n"
        "try:\n"
        "  import numpy as np\n"
        "except ImportError:\n"
        "  np=None\n"
        "for k,v in h.items():\n"
        "  s,e=v['data_offsets']\n"
        "  assert v['dtype']=='F32'\n"
        "  if np is not None:\n"
        "    x=np.frombuffer(d[s:e],dtype='<f4').reshape(v['shape']); t=float(x.astype('f8').sum())\n"
        "  else:\n"
        "    t=sum(struct.unpack('<%df'%((e-s)//4),d[s:e]))\n"
        "  print(k, repr(t), 'x'.join(map(str,v['shape'])))\n";
    char spath[512];
    s_path(spath, sizeof spath, "check.py");
    FILE *f = fopen(spath, "w");
    assert_non_null(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s 2>&1", spath, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int seen = 0;
    while (fgets(line, sizeof line, p)) {
        char name[128], shape[64];
        double sum;
        if (sscanf(line, "%127s %lf %63s", name, &sum, shape) != 3)
            fail_msg("python: %s", line);
        const nn_arena *ar = nn_arena_find(&a, name) >= 0 ? &a : &b;
        int v = nn_arena_find(ar, name);
        assert_true(v >= 0);
        double ref = 0;
        const float *x = nn_arena_ptr(ar, v);
        for (size_t i = 0; i < ar->views[v].numel; i++)
            ref += x[i];
        assert_true(fabs(sum - ref) <= 1e-9 + 1e-9 * fabs(ref));
        seen++;
    }
    assert_int_equal(pclose(p), 0);
    assert_int_equal(seen, 5);
    unlink(spath);
    unlink(path);
    nn_arena_free(&a);
    nn_arena_free(&b);
}

/* ---- malformed files --------------------------------------------------- */

/* Writes 8-byte length (len_override if nonzero), the header text, then
 * data_len bytes of data. */
static void s_write_raw(const char *path, const char *hdr, uint64_t len_override,
                        size_t data_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = len_override ? len_override : strlen(hdr);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(lb, 1, 8, f), 8);
    fputs(hdr, f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    assert_int_equal(fclose(f), 0);
}

/* Target arena: "w" [2] and "b" [1, 3]. */
static void s_make_small(nn_arena *a)
{
    nn_arena_init(a);
    nn_arena_add(a, "w", 1, (int[]){2});
    nn_arena_add(a, "b", 2, (int[]){1, 3});
    nn_arena_alloc(a);
}

#define W_OK_ENTRY "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define B_OK_ENTRY "\"b\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[8,20]}"

static void s_expect_load(const char *hdr, uint64_t len_override, size_t data_len,
                          const char *want1, const char *want2)
{
    char path[512], err[512];
    s_path(path, sizeof path, "bad.safetensors");
    s_write_raw(path, hdr, len_override, data_len);
    nn_arena a;
    s_make_small(&a);
    nn_arena *l[1] = {&a};
    int rc = nn_safetensors_load(path, l, 1, err, sizeof err);
    nn_arena_free(&a);
    unlink(path);
    if (!want1) {
        if (rc != 0)
            fail_msg("expected success, got: %s", err);
        return;
    }
    if (rc != -1)
        fail_msg("load of %s succeeded; expected \"%s\"", hdr, want1);
    if (getenv("LPG_TEST_VERBOSE"))
        fprintf(stderr, "  rejected: %s\n", err);
    ASSERT_HAS(err, path);
    ASSERT_HAS(err, want1);
    if (want2)
        ASSERT_HAS(err, want2);
}

static void test_malformed(void **state)
{
    (void)state;
    /* The well-formed baseline loads (also with padding and metadata). */
    s_expect_load("{" W_OK_ENTRY "," B_OK_ENTRY "}", 0, 20, NULL, NULL);
    s_expect_load("{\"__metadata__\":{\"a\":\"b\"}," B_OK_ENTRY "," W_OK_ENTRY "}     ", 0, 20,
                  NULL, NULL);

    /* Truncated: shorter than the length field; data cut short. */
    {
        char path[512], err[512];
        s_path(path, sizeof path, "short.safetensors");
        FILE *f = fopen(path, "wb");
        fputs("abc", f);
        fclose(f);
        nn_arena a;
        s_make_small(&a);
        nn_arena *l[1] = {&a};
        assert_int_equal(nn_safetensors_load(path, l, 1, err, sizeof err), -1);
        ASSERT_HAS(err, "truncated: 3 bytes");
        assert_int_equal(nn_safetensors_load("/nonexistent_lpg.safetensors", l, 1, err,
                                             sizeof err),
                         -1);
        ASSERT_HAS(err, "/nonexistent_lpg.safetensors: cannot open");
        /* A directory opens read-only but is no model file. */
        char dir[512];
        s_path(dir, sizeof dir, "adir.safetensors");
        assert_int_equal(mkdir(dir, 0700), 0);
        assert_int_equal(nn_safetensors_load(dir, l, 1, err, sizeof err), -1);
        ASSERT_HAS(err, dir);
        ASSERT_HAS(err, "not a regular file");
        assert_int_equal(rmdir(dir), 0);
        nn_arena_free(&a);
        unlink(path);
    }
    s_expect_load("{" W_OK_ENTRY "," B_OK_ENTRY "}", 0, 15,
                  "tensor 'b': data_offsets [8, 20] out of range", "truncated");
    s_expect_load("{" W_OK_ENTRY "," B_OK_ENTRY "}", 0, 24, "cover 20 bytes",
                  "data section holds 24");

    /* Header length past EOF, absurd, too small. */
    s_expect_load("{" W_OK_ENTRY "}", 4000, 8, "header length runs past the end", NULL);
    s_expect_load("{" W_OK_ENTRY "}", (uint64_t)1 << 40, 8, "header length is not in",
                  NULL);
    s_expect_load("{}", 1, 0, "header length is not in", NULL);

    /* Bad JSON. */
    s_expect_load("{" W_OK_ENTRY "," B_OK_ENTRY ",}", 0, 20, "bad JSON header at byte",
                  "expected a string key");
    s_expect_load("[1]", 0, 0, "does not start with '{'", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32}}", 0, 0, "bad JSON", "unterminated string");
    s_expect_load("{" W_OK_ENTRY "," W_OK_ENTRY "}", 0, 8, "bad JSON", "duplicate key");
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 0, 8,
                  "bad JSON", "leading zero");
    s_expect_load("{\"w\xff\":{}}", 0, 0, "bad JSON", "invalid UTF-8");
    s_expect_load("{\"w\\x\":{}}", 0, 0, "bad JSON", "bad escape");
    s_expect_load("{\"w\":[[[[[[[[[[1]]]]]]]]]]}", 0, 0, "bad JSON", "nesting too deep");
    s_expect_load("{" W_OK_ENTRY "} x", 0, 8, "bad JSON", "trailing characters");
    s_expect_load("{" W_OK_ENTRY " ", 0, 8, "bad JSON", "expected ',' or '}'");

    /* Wrong dtype (known but not F32), unknown dtype. */
    s_expect_load("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[4,16]}}",
                  0, 16, "tensor 'w': dtype F16, expected F32", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
                  "tensor 'w': unknown dtype 'F33'", NULL);

    /* Wrong shape (consistent offsets), negative and fractional dims. */
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[3,1],\"data_offsets\":[8,20]}}",
                  0, 20, "tensor 'b': shape [3,1], expected [1,3]", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8,
                  "tensor 'w': shape[0] is not a non-negative integer", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 0, 8,
                  "shape[0] is not a non-negative integer", NULL);

    /* Offsets: out of range, reversed, size mismatch, overlap, hole. */
    s_expect_load("{" W_OK_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[8,"
                  "400]}}",
                  0, 20, "tensor 'b': data_offsets [8, 400] out of range", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 8,
                  "tensor 'w': data_offsets [8, 0]: begin after end", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 0, 4,
                  "tensor 'w': data_offsets span 4 bytes", "need 8");
    s_expect_load("{" W_OK_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[4,"
                  "16]}}",
                  0, 16, "overlap", NULL);
    s_expect_load("{" W_OK_ENTRY ",\"b\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[12,"
                  "24]}}",
                  0, 24, "tensor 'b'", "hole");
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 0, 8,
                  "data_offsets is not [begin, end]", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 0, 8,
                  "tensor 'w': unknown field 'x'", NULL);
    s_expect_load("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 0, 8,
                  "tensor 'w': missing field 'shape'", NULL);

    /* Missing tensor; bad metadata. */
    s_expect_load("{" W_OK_ENTRY "}", 0, 8, "tensor 'b' missing", NULL);
    s_expect_load("{\"__metadata__\":{\"k\":1}," W_OK_ENTRY "," B_OK_ENTRY "}", 0, 20,
                  "__metadata__ value of 'k' is not a string", NULL);
    s_expect_load("{\"__metadata__\":[]," W_OK_ENTRY "," B_OK_ENTRY "}", 0, 20,
                  "__metadata__ is not an object", NULL);
}

/* A file written by another tool (PyTorch fixture of the model tests). */
static void test_foreign_fixture(void **state)
{
    (void)state;
    const char *p = "tests/fixtures/resnet20_golden.safetensors";
    if (access(p, R_OK) != 0)
        skip();
    char val[256], err[512];
    int rc = nn_safetensors_meta(p, "generator", val, sizeof val, err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_save_failures_keep_old_file),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_python_interop),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_foreign_fixture),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
