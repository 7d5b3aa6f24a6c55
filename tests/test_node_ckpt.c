/* test_node_ckpt — checkpoints of a gossip node (node_ckpt) and the
 * gossip_node state export/import under them.
 *
 * A small "training" loop in one process: n nodes of a shipped topology run
 * through gossip_sim, each with its own x, SGD (Nesterov + quasi-global
 * momentum), augmentation RNG, model RNG and sampler, and a synthetic
 * gradient that depends on all of them (so a state part that is not
 * restored changes the trajectory).  Checked:
 *   - 2T iterations straight == T iterations, checkpoint of every node,
 *     everything destroyed and rebuilt, resume, T more: x and psi
 *     bit-identical (choco + randk, deepsqueeze + qsgd, dpsgd, and choco +
 *     dgc with warm-up and deflate, whose momentum mask is state);
 *   - truncated, corrupted and foreign (other algo) checkpoints are refused
 *     with a message and leave the live state unchanged;
 *   - never trusted: overwritten tensor bytes or metadata (CRC-32), a NaN
 *     or infinity under a valid checksum, an impossible iteration, a bad
 *     psi, a version-1 file, another run digest or set of state tensors
 *     are refused by name; a non-finite state is never written (the
 *     previous checkpoint stays); the run identity covers the topology
 *     file's contents and the partition flags (node_ckpt_ident_make);
 *   - crash during write: a child process saving checkpoints in a loop is
 *     SIGKILLed at random moments; the file at the path is always a complete
 *     checkpoint of one of the versions written (never a partial one), and a
 *     garbage temp file next to it does not matter.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "tests/tk.h"

#include "gossip/gossip_sim.h"
#include "node/node_ckpt.h"
#include "nn/nn_data.h"
#include "nn/nn_safetensors.h"

static void s_layout(nn_arena *L, int big)
{
    nn_arena_init(L);
    nn_arena_add(L, "conv.weight", 2, (int[]){ 8, 12 * (big ? 1000 : 1) });
    nn_arena_add(L, "conv.bias", 1, (int[]){ 3 });
    nn_arena_add(L, "fc.weight", 2, (int[]){ 5, 20 });
    nn_arena_alloc(L);
}

typedef struct {
    float     *x;
    nn_sgd     sgd;
    nn_rng     aug, model;
    nn_sampler sampler;
    nn_arena   buffers;
} s_nodest;

typedef struct {
    topo          *t;
    nn_arena       L;
    gossip_config  gc;
    gossip_sim    *sim;
    int            n;
    s_nodest      *st;
    float        **xs;
    float         *grad;
} s_run;

static uint32_t s_idx[10] = { 3, 1, 4, 1, 5, 9, 2, 6, 5, 3 };

static void s_run_new(s_run *r, const char *algo, const char *comp)
{
    char err[512];
    memset(r, 0, sizeof *r);
    r->t = topo_load("topologies/ring8-undirected.yaml", err, sizeof err);
    if (!r->t)
        fail_msg("%s", err);
    s_layout(&r->L, 0);
    gossip_config_default(&r->gc);
    assert_int_equal(gossip_algo_parse(algo, &r->gc.algo, err, sizeof err), 0);
    snprintf(r->gc.compressor, sizeof r->gc.compressor, "%s", comp);
    r->gc.eta = r->gc.algo == GOSSIP_DPSGD ? 1.0 : 0.5;
    r->gc.iters_per_epoch = 3; /* dgc warm-up epochs within the run */
    r->sim = gossip_sim_new(&r->gc, &r->L, r->t, err, sizeof err);
    if (!r->sim)
        fail_msg("%s", err);
    r->n = gossip_sim_n(r->sim);
    size_t d = r->L.numel;
    r->st = nn_xcalloc((size_t)r->n, sizeof *r->st);
    r->xs = nn_xcalloc((size_t)r->n, sizeof *r->xs);
    r->grad = nn_xcalloc(d, sizeof(float));
    nn_rng init;
    nn_rng_seed(&init, 42);
    for (int i = 0; i < r->n; i++) {
        s_nodest *s = &r->st[i];
        s->x = nn_xcalloc(d, sizeof(float));
        for (size_t k = 0; k < d; k++)
            s->x[k] = nn_rng_normal(&init);
        r->xs[i] = s->x;
        nn_sgd_config sc = nn_sgd_defaults();
        sc.qgm = 1;
        nn_sgd_init(&s->sgd, &r->L, &sc);
        nn_rng_seed(&s->aug, 100 + (uint64_t)i);
        nn_rng_seed(&s->model, 200 + (uint64_t)i);
        nn_sampler_init(&s->sampler, s_idx, 10, 300 + (uint64_t)i);
        nn_arena_init(&s->buffers);
        nn_arena_add(&s->buffers, "range.min", 1, (int[]){ 2 });
        nn_arena_alloc(&s->buffers);
    }
}

static void s_run_free(s_run *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->st[i].x);
        nn_sgd_free(&r->st[i].sgd);
        nn_sampler_free(&r->st[i].sampler);
        nn_arena_free(&r->st[i].buffers);
    }
    free(r->st);
    free(r->xs);
    free(r->grad);
    gossip_sim_destroy(&r->sim);
    nn_arena_free(&r->L);
    topo_destroy(&r->t);
}

/* One iteration on every node: synthetic gradient, SGD, gossip, qgm. */
static void s_iterate(s_run *r, uint64_t it)
{
    char err[512];
    size_t d = r->L.numel;
    for (int i = 0; i < r->n; i++) {
        s_nodest *s = &r->st[i];
        const uint32_t *idx = nn_sampler_next(&s->sampler, 3, NULL);
        float u = nn_rng_uniform(&s->model);
        for (size_t k = 0; k < d; k++)
            r->grad[k] = 0.05f * s->x[k] + 0.01f * nn_rng_normal(&s->aug) +
                         0.001f * (float)idx[k % 3] + 0.002f * u;
        s->buffers.data[it % 2] += u;
        gossip_node_mask_sent(gossip_sim_node(r->sim, i), s->sgd.mom.data); /* as node_gossip_local_step */
        nn_sgd_step(&s->sgd, s->x, r->grad, 0.1f);
    }
    if (gossip_sim_step(r->sim, r->xs, it, err, sizeof err) != 0)
        fail_msg("iteration %llu: %s", (unsigned long long)it, err);
    for (int i = 0; i < r->n; i++)
        nn_sgd_after_mix(&r->st[i].sgd, r->st[i].x);
}

static node_ckpt s_ckpt_of(s_run *r, int i, const char *const *ident)
{
    node_ckpt c = { &r->L, r->st[i].x, &r->st[i].sgd, &r->st[i].buffers,
                    gossip_sim_node(r->sim, i), &r->st[i].model, &r->st[i].aug,
                    &r->st[i].sampler, ident, 0, 0 };
    return c;
}

static char s_dir[64];

static void s_mkdir(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/lpg_ckpt_XXXXXX");
    assert_non_null(mkdtemp(s_dir));
}

static void s_rmdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    assert_int_equal(system(cmd), 0);
}

static void s_round_trip(const char *algo, const char *comp)
{
    const int T = 6;
    char err[1024], path[128];
    const char *ident[] = { "algo", algo, "compressor", comp, NULL };
    s_mkdir();
    s_run a, b;
    s_run_new(&a, algo, comp);
    for (int it = 0; it < 2 * T; it++)
        s_iterate(&a, (uint64_t)it);

    s_run_new(&b, algo, comp);
    for (int it = 0; it < T; it++)
        s_iterate(&b, (uint64_t)it);
    for (int i = 0; i < b.n; i++) {
        node_ckpt c = s_ckpt_of(&b, i, ident);
        snprintf(path, sizeof path, "%s/ckpt-%d.safetensors", s_dir, i);
        if (node_ckpt_save(path, &c, (uint64_t)T, err, sizeof err) != 0)
            fail_msg("%s", err);
    }
    s_run_free(&b);
    s_run_new(&b, algo, comp); /* fresh: initial state again, not the saved one */
    for (int i = 0; i < b.n; i++) {
        node_ckpt c = s_ckpt_of(&b, i, ident);
        uint64_t it = 0;
        snprintf(path, sizeof path, "%s/ckpt-%d.safetensors", s_dir, i);
        if (node_ckpt_load(path, &c, &it, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(it, T);
        assert_int_equal(gossip_node_iter(gossip_sim_node(b.sim, i)), T);
    }
    for (int it = T; it < 2 * T; it++)
        s_iterate(&b, (uint64_t)it);
    for (int i = 0; i < a.n; i++) {
        assert_memory_equal(a.st[i].x, b.st[i].x, a.L.numel * sizeof(float));
        assert_memory_equal(a.st[i].sgd.mom.data, b.st[i].sgd.mom.data, a.L.numel * sizeof(float));
        assert_memory_equal(a.st[i].buffers.data, b.st[i].buffers.data, 2 * sizeof(float));
        double pa = gossip_node_psi(gossip_sim_node(a.sim, i));
        double pb = gossip_node_psi(gossip_sim_node(b.sim, i));
        assert_memory_equal(&pa, &pb, sizeof pa);
        gossip_node *ga = gossip_sim_node(a.sim, i), *gb = gossip_sim_node(b.sim, i);
        char na[48], nb[48];
        for (int k = 0; k < gossip_node_nvec(ga); k++)
            assert_memory_equal(gossip_node_vec(ga, k, na, sizeof na), gossip_node_vec(gb, k, nb, sizeof nb),
                                a.L.numel * sizeof(float));
    }
    /* sanity: the state did move (a trajectory that ignores the checkpoint
     * would differ: the fresh start is x0, far from x_2T) */
    s_run c0;
    s_run_new(&c0, algo, comp);
    for (int it = 0; it < T; it++)
        s_iterate(&c0, (uint64_t)it);
    assert_true(memcmp(c0.st[0].x, a.st[0].x, a.L.numel * sizeof(float)) != 0);
    s_run_free(&c0);
    s_run_free(&a);
    s_run_free(&b);
    s_rmdir();
}

static void test_round_trip_choco(void **state)
{
    (void)state;
    s_round_trip("choco", "randk:0.3");
}

static void test_round_trip_deepsqueeze(void **state)
{
    (void)state;
    s_round_trip("deepsqueeze", "qsgd:16");
}

static void test_round_trip_dgc(void **state)
{
    (void)state;
    s_round_trip("choco", "dgc:0.2,warmup=2+q8+deflate");
}

static void test_round_trip_dpsgd(void **state)
{
    (void)state;
    s_round_trip("dpsgd", "q8");
}

static long s_fsize(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void s_copy(const char *from, const char *to, long nbytes, long flip_at)
{
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    assert_non_null(f);
    assert_non_null(g);
    for (long k = 0; k < nbytes; k++) {
        int ch = fgetc(f);
        assert_true(ch != EOF);
        if (k == flip_at)
            ch ^= 0x5a;
        fputc(ch, g);
    }
    fclose(f);
    fclose(g);
}

static void test_refused(void **state)
{
    (void)state;
    char err[1024], path[128], bad[160];
    const char *ident[] = { "algo", "choco", "compressor", "randk:0.3", NULL };
    s_mkdir();
    s_run r;
    s_run_new(&r, "choco", "randk:0.3");
    for (int it = 0; it < 3; it++)
        s_iterate(&r, (uint64_t)it);
    snprintf(path, sizeof path, "%s/ckpt-0.safetensors", s_dir);
    node_ckpt c = s_ckpt_of(&r, 0, ident);
    if (node_ckpt_save(path, &c, 3, err, sizeof err) != 0)
        fail_msg("%s", err);
    size_t d = r.L.numel;
    float *before = nn_xmalloc(d * sizeof(float));
    memcpy(before, r.st[0].x, d * sizeof(float));
    uint64_t it = 99;
    long size = s_fsize(path);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", s_dir);

    /* truncated: every cut refused */
    long cuts[] = { 0, 4, 8, 40, size / 2, size - 4, size - 1 };
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        s_copy(path, bad, cuts[k], -1);
        err[0] = '\0';
        assert_int_equal(node_ckpt_load(bad, &c, &it, err, sizeof err), -1);
        assert_non_null(strstr(err, bad));
    }
    /* a flipped byte in the header */
    s_copy(path, bad, size, 12);
    assert_int_equal(node_ckpt_load(bad, &c, &it, err, sizeof err), -1);
    /* nothing of the live state was touched by the refused loads */
    assert_int_equal(it, 99);
    assert_memory_equal(before, r.st[0].x, d * sizeof(float));
    assert_int_equal(gossip_node_iter(gossip_sim_node(r.sim, 0)), 3);

    /* another algorithm / compressor */
    const char *other[] = { "algo", "deepsqueeze", "compressor", "randk:0.3", NULL };
    c.ident = other;
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), -1);
    assert_non_null(strstr(err, "algo 'choco'"));
    assert_non_null(strstr(err, "'deepsqueeze'"));
    /* not a checkpoint at all: a plain model file */
    const nn_arena *ar[1] = { &r.L };
    assert_int_equal(nn_safetensors_save(bad, ar, 1, NULL, err, sizeof err), 0);
    c.ident = ident;
    assert_int_equal(node_ckpt_load(bad, &c, &it, err, sizeof err), -1);
    assert_non_null(strstr(err, "format"));
    /* the good file still loads */
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    assert_int_equal(it, 3);
    free(before);
    s_run_free(&r);
    s_rmdir();
}

/* ---- checkpoints are never trusted ------------------------------------ */

typedef void (*s_mutate_fn)(nn_arena *parts, int nparts);

/* Rewrites checkpoint `from` of node i of r into `to` the way a writer that
 * follows the documented format would (docs/node.md, node_ckpt.h): every
 * tensor read back, mutate() applied (if given), the metadata copied with
 * `key` set to `value` (if key), and crc32 recomputed over the tensors (x,
 * momentum, qgm_prev, gossip.*, buffers; views in layout order) and the
 * state values, so that only the check under test can refuse the result. */
static void s_forge(s_run *r, int i, const char *const *ident, const char *from, const char *to,
                    s_mutate_fn mutate, const char *key, const char *value)
{
    char err[1024], names[8][64];
    nn_arena parts[8];
    const char *pre[8];
    int n = 0;
    gossip_node *g = gossip_sim_node(r->sim, i);
    const char *fixed[] = { "x.", "momentum.", "qgm_prev." };
    for (int k = 0; k < 3; k++)
        snprintf(names[n++], sizeof names[0], "%s", fixed[k]);
    for (int k = 0; k < gossip_node_nvec(g); k++) {
        char nm[48];
        gossip_node_vec(g, k, nm, sizeof nm);
        snprintf(names[n++], sizeof names[0], "gossip.%s.", nm);
    }
    for (int k = 0; k < n; k++) {
        nn_arena_init(&parts[k]);
        nn_arena_clone_layout(&parts[k], &r->L);
    }
    nn_arena_init(&parts[n]);
    nn_arena_clone_layout(&parts[n], &r->st[i].buffers);
    snprintf(names[n++], sizeof names[0], "buffers.");
    nn_arena *ptrs[8];
    for (int k = 0; k < n; k++) {
        ptrs[k] = &parts[k];
        pre[k] = names[k];
    }
    if (nn_safetensors_load_prefixed(from, ptrs, pre, n, err, sizeof err) != 0)
        fail_msg("%s", err);
    if (mutate)
        mutate(parts, n);
    /* metadata: every key the writer wrote, one overridden */
    static const char *const state[] = { "iter", "psi", "rng_model", "rng_aug", "rng_comp",
                                         "sampler_pos", "sgd_last_lr", "gossip_every",
                                         "run_digest", "parts" };
    char vals[64][256];
    const char *meta[2 * 64 + 1];
    int m = 0, nv = 0;
    const char *keys[64];
    int nk = 0;
    keys[nk++] = "format";
    keys[nk++] = "version";
    for (size_t k = 0; k < sizeof state / sizeof *state; k++)
        keys[nk++] = state[k];
    for (int k = 0; ident[k]; k += 2)
        keys[nk++] = ident[k];
    for (int k = 0; k < nk; k++) {
        if (nn_safetensors_meta(from, keys[k], vals[nv], sizeof vals[0], err, sizeof err) != 0)
            fail_msg("%s", err);
        if (key && !strcmp(keys[k], key))
            snprintf(vals[nv], sizeof vals[0], "%s", value);
        meta[m++] = keys[k];
        meta[m++] = vals[nv++];
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int k = 0; k < n; k++)
        for (size_t v = 0; v < parts[k].nviews; v++)
            crc = crc32(crc, (const unsigned char *)(parts[k].data + parts[k].views[v].offset),
                        (uInt)(parts[k].views[v].numel * sizeof(float)));
    for (size_t k = 0; k < sizeof state / sizeof *state; k++)
        crc = crc32(crc, (const unsigned char *)vals[2 + k], (uInt)strlen(vals[2 + k]) + 1);
    char crc_txt[16];
    snprintf(crc_txt, sizeof crc_txt, "%08x", (unsigned)crc);
    meta[m++] = "crc32";
    meta[m++] = key && !strcmp(key, "crc32") ? value : crc_txt;
    meta[m] = NULL;
    const nn_arena *cp[8];
    for (int k = 0; k < n; k++)
        cp[k] = &parts[k];
    if (nn_safetensors_save_prefixed(to, cp, pre, n, meta, err, sizeof err) != 0)
        fail_msg("%s", err);
    for (int k = 0; k < n; k++)
        nn_arena_free(&parts[k]);
}

static void s_nan_in_momentum(nn_arena *parts, int n)
{
    (void)n;
    parts[1].data[parts[1].numel - 1] = NAN;
}

static void s_huge_in_x(nn_arena *parts, int n)
{
    (void)n;
    for (size_t k = 0; k < parts[0].numel; k++)
        parts[0].data[k] = INFINITY;
}

/* Overwrites 4 bytes at `at` (from the end when negative) of a file with
 * the float v, in place. */
static void s_poke_float(const char *path, long at, float v)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
    assert_int_equal(fwrite(&v, sizeof v, 1, f), 1);
    fclose(f);
}

/* Expects node_ckpt_load to refuse `file`, with every string of `want` in
 * the message, and the live state unchanged. */
static void s_expect_refused(s_run *r, node_ckpt *c, const char *file, const char *const *want)
{
    char err[1024] = "";
    size_t d = r->L.numel;
    float *before = nn_xmalloc(d * sizeof(float));
    memcpy(before, c->x, d * sizeof(float));
    uint64_t it = 77, gi = gossip_node_iter(c->g);
    if (node_ckpt_load(file, c, &it, err, sizeof err) != -1)
        fail_msg("%s was loaded", file);
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, file));
    for (int k = 0; want[k]; k++)
        if (!strstr(err, want[k]))
            fail_msg("message without '%s': %s", want[k], err);
    assert_int_equal(it, 77);
    assert_int_equal(gossip_node_iter(c->g), gi);
    assert_memory_equal(before, c->x, d * sizeof(float));
    free(before);
}

static void test_untrusted(void **state)
{
    (void)state;
    char err[1024], path[128], bad[160];
    const char *ident[] = { "algo", "choco", "compressor", "randk:0.3", NULL };
    s_mkdir();
    s_run r;
    s_run_new(&r, "choco", "randk:0.3");
    for (int it = 0; it < 3; it++)
        s_iterate(&r, (uint64_t)it);
    snprintf(path, sizeof path, "%s/ckpt-0.safetensors", s_dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", s_dir);
    node_ckpt c = s_ckpt_of(&r, 0, ident);
    if (node_ckpt_save(path, &c, 3, err, sizeof err) != 0)
        fail_msg("%s", err);
    uint64_t it = 0;

    /* the forger reproduces the format: its untouched copy loads */
    s_forge(&r, 0, ident, path, bad, NULL, NULL, NULL);
    if (node_ckpt_load(bad, &c, &it, err, sizeof err) != 0)
        fail_msg("forged copy refused: %s", err);
    assert_int_equal(it, 3);

    /* tensor bytes overwritten (a 1e30 planted in them): checksum */
    s_forge(&r, 0, ident, path, bad, NULL, NULL, NULL);
    s_poke_float(bad, -4, 1e30f);
    s_expect_refused(&r, &c, bad, (const char *const[]){ "checksum mismatch", NULL });
    /* state metadata edited (iter) without fixing the checksum */
    s_forge(&r, 0, ident, path, bad, NULL, "crc32", "00000000");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "checksum mismatch", "00000000", NULL });
    /* a valid checksum over non-finite values: refused by name */
    s_forge(&r, 0, ident, path, bad, s_nan_in_momentum, NULL, NULL);
    s_expect_refused(&r, &c, bad,
                     (const char *const[]){ "momentum.fc.weight[99]", "not finite", NULL });
    s_forge(&r, 0, ident, path, bad, s_huge_in_x, NULL, NULL);
    s_expect_refused(&r, &c, bad, (const char *const[]){ "x.conv.weight[0] = inf", NULL });
    /* an impossible iteration (valid checksum) */
    s_forge(&r, 0, ident, path, bad, NULL, "iter", "999999999");
    c.max_iter = 100;
    s_expect_refused(&r, &c, bad,
                     (const char *const[]){ "iteration 999999999", "100 iterations", NULL });
    c.max_iter = 2; /* the good file is beyond a 2-iteration run too */
    s_expect_refused(&r, &c, path, (const char *const[]){ "iteration 3", NULL });
    c.max_iter = 3;
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    /* psi not finite */
    s_forge(&r, 0, ident, path, bad, NULL, "psi", "nan");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "psi", NULL });
    /* scalars that do not parse (valid checksum): refused by key and value */
    s_forge(&r, 0, ident, path, bad, NULL, "sampler_pos", "-1");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "sampler_pos = '-1'",
                                                         "not an unsigned integer", NULL });
    s_forge(&r, 0, ident, path, bad, NULL, "sgd_last_lr", "0.1x");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "sgd_last_lr = '0.1x'",
                                                         "not a number", NULL });
    s_forge(&r, 0, ident, path, bad, NULL, "rng_aug", "abc");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "rng_aug = 'abc'",
                                                         "not 64 hex digits", NULL });
    /* another --gossip-every than the one the file was written with */
    c.gossip_every = 2;
    s_expect_refused(&r, &c, path, (const char *const[]){ "--gossip-every 1",
                                                          "this run has 2", NULL });
    c.gossip_every = 0;
    /* a version-1 file (no checksum) */
    s_forge(&r, 0, ident, path, bad, NULL, "version", "1");
    s_expect_refused(&r, &c, bad, (const char *const[]){ "version 1", "afresh", NULL });
    /* the run digest: a saver whose identity had another pair */
    const char *more[] = { "algo", "choco", "compressor", "randk:0.3", "extra", "1", NULL };
    c.ident = more;
    if (node_ckpt_save(bad, &c, 3, err, sizeof err) != 0)
        fail_msg("%s", err);
    c.ident = ident;
    s_expect_refused(&r, &c, bad, (const char *const[]){ "run digest", NULL });

    /* other state groups: this run without quasi-global momentum */
    nn_sgd plain;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&plain, &r.L, &sc);
    node_ckpt c2 = c;
    c2.sgd = &plain;
    s_expect_refused(&r, &c2, path, (const char *const[]){ "another set of state tensors",
                                                           "x. momentum. gossip.", NULL });
    nn_sgd_free(&plain);

    /* never saved: a non-finite state; the previous checkpoint stays */
    float keep = r.st[0].x[5];
    r.st[0].x[5] = NAN;
    err[0] = '\0';
    assert_int_equal(node_ckpt_save(path, &c, 3, err, sizeof err), -1);
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, "x.conv.weight[5]"));
    assert_non_null(strstr(err, "previous one is kept"));
    r.st[0].x[5] = keep;
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    assert_int_equal(it, 3);
    s_run_free(&r);
    s_rmdir();
}

/* node_ckpt_ident_make: the topology file's contents and the partition
 * flags are part of a run's identity. */
static void test_run_identity(void **state)
{
    (void)state;
    char err[1024], path[128], topo_path[128];
    s_mkdir();
    snprintf(topo_path, sizeof topo_path, "%s/ring.yaml", s_dir);
    FILE *f = fopen(topo_path, "w");
    assert_non_null(f);
    fputs("nodes: 8\ngraph: {generator: undirected_ring}\n", f);
    fclose(f);
    node_ckpt_run run = { "cnn", "evonorm", "int8", "fashion-mnist", 8, "choco", "randk:0.3",
                          0.5, 1, 0.4, 6000, 1, 32, 0x1234abcdu, topo_path, 8, 0, NULL, NULL, NULL };
    node_ckpt_ident id, id2;
    assert_int_equal(node_ckpt_ident_make(&id, &run, err, sizeof err), 0);
    int pairs = 0;
    for (; id.kv[2 * pairs]; pairs++)
        ;
    assert_true(pairs >= 17 && pairs <= NODE_CKPT_MAX_IDENT);
    s_run r;
    s_run_new(&r, "choco", "randk:0.3");
    s_iterate(&r, 0);
    snprintf(path, sizeof path, "%s/ckpt-0.safetensors", s_dir);
    node_ckpt c = s_ckpt_of(&r, 0, id.kv);
    if (node_ckpt_save(path, &c, 1, err, sizeof err) != 0)
        fail_msg("%s", err);
    uint64_t it = 0;
    assert_int_equal(node_ckpt_ident_make(&id2, &run, err, sizeof err), 0);
    c.ident = id2.kv;
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    /* the same path, other contents (a comment is enough) */
    f = fopen(topo_path, "a");
    assert_non_null(f);
    fputs("# edited\n", f);
    fclose(f);
    assert_int_equal(node_ckpt_ident_make(&id2, &run, err, sizeof err), 0);
    s_expect_refused(&r, &c, path,
                     (const char *const[]){ "topology_digest", "contents changed", NULL });
    /* back to the original contents: fine again */
    f = fopen(topo_path, "w");
    fputs("nodes: 8\ngraph: {generator: undirected_ring}\n", f);
    fclose(f);
    assert_int_equal(node_ckpt_ident_make(&id2, &run, err, sizeof err), 0);
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    /* another partition */
    node_ckpt_run r2 = run;
    r2.skew = 0.8;
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), 0);
    s_expect_refused(&r, &c, path, (const char *const[]){ "skew '0.4'", "'0.8'",
                                                          "another data partition", NULL });
    r2 = run;
    r2.train_subset = 0;
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), 0);
    s_expect_refused(&r, &c, path, (const char *const[]){ "train_subset", NULL });
    r2 = run; /* data flags: absent key = none given */
    r2.data_opts = "";
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), 0);
    c.ident = id2.kv;
    assert_int_equal(node_ckpt_load(path, &c, &it, err, sizeof err), 0);
    r2.data_opts = "partition=dirichlet:0.5";
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), 0);
    s_expect_refused(&r, &c, path, (const char *const[]){ "data_opts", NULL });
    r2 = run;
    r2.precision = "fp32";
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), 0);
    s_expect_refused(&r, &c, path, (const char *const[]){ "precision 'int8'", NULL });
    /* a topology file that cannot be read */
    r2 = run;
    r2.topology_path = "/nonexistent/lpgossip.yaml";
    assert_int_equal(node_ckpt_ident_make(&id2, &r2, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/lpgossip.yaml"));
    s_run_free(&r);
    s_rmdir();
}

/* Child: saves versions 1, 2, 3, ... of a big state forever (x all = v). */
static void s_writer(const char *path)
{
    char err[512];
    nn_arena L;
    s_layout(&L, 1);
    float *x = nn_xcalloc(L.numel, sizeof(float));
    nn_sgd sgd;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&sgd, &L, &sc);
    const char *ident[] = { "algo", "none", NULL };
    for (uint64_t v = 1;; v++) {
        for (size_t k = 0; k < L.numel; k++)
            x[k] = (float)v;
        node_ckpt c = { &L, x, &sgd, NULL, NULL, NULL, NULL, NULL, ident, 0, 0 };
        if (node_ckpt_save(path, &c, v, err, sizeof err) != 0)
            _exit(3);
    }
}

static void test_kill_during_write(void **state)
{
    (void)state;
    /* LPGOSSIP_CKPT_TRIALS overrides the count (100 for the long kill -9 drill) */
    const char *env = getenv("LPGOSSIP_CKPT_TRIALS");
    int trials = env && atoi(env) > 0 ? atoi(env) : tk_quick() ? 4 : 20, loaded = 0;
    char path[128], junk[160], err[512];
    s_mkdir();
    snprintf(path, sizeof path, "%s/ckpt-0.safetensors", s_dir);
    nn_arena L;
    s_layout(&L, 1);
    float *x = nn_xcalloc(L.numel, sizeof(float));
    nn_sgd sgd;
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd_init(&sgd, &L, &sc);
    const char *ident[] = { "algo", "none", NULL };
    srand(7);
    for (int t = 0; t < trials; t++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            s_writer(path);
        struct timespec ts = { 0, 1000000L * (5 + rand() % 40) };
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        /* a crashed writer may leave a half-written temp file: add garbage of
         * our own under such a name too */
        snprintf(junk, sizeof junk, "%s.tmp.junk%02d", path, t);
        FILE *f = fopen(junk, "wb");
        assert_non_null(f);
        fputs("\x10\x00\x00\x00\x00\x00\x00\x00{\"garbage", f);
        fclose(f);
        if (access(path, F_OK) != 0)
            continue; /* killed before the first rename: no checkpoint yet, fine */
        node_ckpt c = { &L, x, &sgd, NULL, NULL, NULL, NULL, NULL, ident, 0, 0 };
        uint64_t it = 0;
        if (node_ckpt_load(path, &c, &it, err, sizeof err) != 0)
            fail_msg("trial %d: checkpoint corrupt after kill: %s", t, err);
        assert_true(it >= 1);
        for (size_t k = 0; k < L.numel; k++)
            if (x[k] != (float)it)
                fail_msg("trial %d: x[%zu] = %g in the checkpoint of version %llu", t, k,
                         (double)x[k], (unsigned long long)it);
        loaded++;
    }
    print_message("kill-during-write: %d trials, %d complete checkpoints loaded, 0 corrupt\n",
                  trials, loaded);
    assert_true(loaded > 0);
    free(x);
    nn_sgd_free(&sgd);
    nn_arena_free(&L);
    s_rmdir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_choco),
        cmocka_unit_test(test_round_trip_dgc),
        cmocka_unit_test(test_round_trip_deepsqueeze),
        cmocka_unit_test(test_round_trip_dpsgd),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_untrusted),
        cmocka_unit_test(test_run_identity),
        cmocka_unit_test(test_kill_during_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
