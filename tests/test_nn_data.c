/* test_nn_data — data sets, batches, augmentation, skew partition, sampler.
 *
 * Real Fashion-MNIST (the Debian package) is loaded once per program when
 * present; tests that need it are skipped otherwise.  Reference numbers for
 * it (label heads, pixel sums, the mean) were computed with Python's gzip
 * module, independently of this code.  Malformed files are written to a
 * mkdtemp() directory that is removed at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "nn/nn_core.h"
#include "nn/nn_data.h"

static nn_dataset g_train, g_test;
static int g_have_fashion;
static char g_dir[256];

#define ASSERT_HAS(msg, sub)                                                          \
    do {                                                                              \
        if (!strstr((msg), (sub)))                                                    \
            fail_msg("message \"%s\" lacks \"%s\"", (msg), (sub));                    \
    } while (0)

static int group_setup(void **state)
{
    (void)state;
    char err[512];
    struct stat st;
    if (stat(NN_DATA_FASHION_DIR "/train-images-idx3-ubyte.gz", &st) == 0) {
        if (nn_data_load("fashion-mnist", &g_train, &g_test, err, sizeof err) != 0) {
            fprintf(stderr, "fashion-mnist load failed: %s\n", err);
            return -1;
        }
        g_have_fashion = 1;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/lpg_test_nn_data_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    return 0;
}

static void s_rm_all(const char *dir)
{
    /* Removes the files this program creates (fixed names) and the dir. */
    static const char *names[] = {
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "data_batch_1.bin",
        "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin",
        "test_batch.bin"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int group_teardown(void **state)
{
    (void)state;
    nn_dataset_free(&g_train);
    nn_dataset_free(&g_test);
    s_rm_all(g_dir);
    struct stat st;
    if (stat(g_dir, &st) == 0) {
        fprintf(stderr, "temp dir %s not removed\n", g_dir);
        return -1;
    }
    return 0;
}

/* ---- real Fashion-MNIST ------------------------------------------------ */

static void test_fashion_load(void **state)
{
    (void)state;
    if (!g_have_fashion)
        skip();
    assert_int_equal(g_train.n, 60000);
    assert_int_equal(g_test.n, 10000);
    assert_int_equal(g_train.c, 1);
    assert_int_equal(g_train.h, 28);
    assert_int_equal(g_train.w, 28);
    assert_int_equal(g_train.classes, 10);
    assert_string_equal(g_train.name, "fashion-mnist");
    size_t ht[10] = {0}, hv[10] = {0};
    for (size_t i = 0; i < g_train.n; i++)
        ht[g_train.y[i]]++;
    for (size_t i = 0; i < g_test.n; i++)
        hv[g_test.y[i]]++;
    for (int c = 0; c < 10; c++) {
        assert_int_equal(ht[c], 6000);
        assert_int_equal(hv[c], 1000);
    }
    static const uint8_t head_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    static const uint8_t head_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    assert_memory_equal(g_train.y, head_train, 10);
    assert_memory_equal(g_test.y, head_test, 10);
    uint64_t s0 = 0, s1 = 0;
    for (int j = 0; j < 784; j++) {
        s0 += g_train.x[j];
        s1 += g_test.x[j];
    }
    assert_int_equal(s0, 76247);
    assert_int_equal(s1, 33456);
}

static void test_fashion_norm_stats(void **state)
{
    (void)state;
    if (!g_have_fashion)
        skip();
    float mean, std;
    nn_data_norm_stats(&g_train, &mean, &std);
    /* Two-pass direct computation in double. */
    size_t np = g_train.n * 784;
    double s = 0, v = 0;
    for (size_t i = 0; i < np; i++)
        s += g_train.x[i] / 255.0;
    double m = s / (double)np;
    for (size_t i = 0; i < np; i++) {
        double d = g_train.x[i] / 255.0 - m;
        v += d * d;
    }
    double sd = sqrt(v / (double)np);
    assert_true(fabs(mean - m) <= 1e-6);
    assert_true(fabs(std - sd) <= 1e-6);
    assert_true(fabs(mean - 0.2860406) <= 1e-6); /* Python, independent */
    assert_true(fabs(std - 0.3530) <= 1e-3);     /* the commonly quoted value */

    /* A normalized batch over the whole set has mean ~0, std ~1. */
    uint32_t idx[1000];
    for (int i = 0; i < 1000; i++)
        idx[i] = (uint32_t)(i * 60);
    float *x = nn_xmalloc(1000 * 784 * sizeof(float));
    uint8_t y[1000];
    nn_data_batch(&g_train, idx, 1000, &mean, &std, NULL, NULL, x, y);
    double bs = 0, bv = 0;
    for (size_t i = 0; i < 784000; i++)
        bs += x[i];
    bs /= 784000;
    for (size_t i = 0; i < 784000; i++)
        bv += (x[i] - bs) * (x[i] - bs);
    bv /= 784000;
    assert_true(fabs(bs) < 0.05);
    assert_true(fabs(sqrt(bv) - 1) < 0.05);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(y[i], g_train.y[idx[i]]);
    free(x);
}

/* ---- synthetic sets for batches and augmentation ----------------------- */

/* n samples of c x h x w with distinct pseudo-random pixels 1..255. */
static void s_make_set(nn_dataset *d, size_t n, int c, int h, int w)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = c;
    d->h = h;
    d->w = w;
    d->classes = 10;
    size_t tot = n * (size_t)(c * h * w);
    d->x = nn_xmalloc(tot);
    d->y = nn_xmalloc(n);
    nn_rng r;
    nn_rng_seed(&r, 77);
    for (size_t i = 0; i < tot; i++)
        d->x[i] = (uint8_t)(1 + nn_rng_below(&r, 255));
    for (size_t i = 0; i < n; i++)
        d->y[i] = (uint8_t)(i % 10);
}

static float s_norm(int v, float m, float s)
{
    return ((float)v / 255.0f - m) / s;
}

static void test_norm_stats_synthetic(void **state)
{
    (void)state;
    nn_dataset d;
    s_make_set(&d, 7, 3, 4, 5);
    /* Channel 1 constant 51 -> mean 0.2, std forced to 1. */
    for (size_t i = 0; i < 7; i++)
        memset(d.x + i * 60 + 20, 51, 20);
    float mean[3], std[3];
    nn_data_norm_stats(&d, mean, std);
    for (int c = 0; c < 3; c++) {
        double s = 0, v = 0;
        for (size_t i = 0; i < 7; i++)
            for (int j = 0; j < 20; j++)
                s += d.x[i * 60 + (size_t)c * 20 + (size_t)j] / 255.0;
        double m = s / 140;
        for (size_t i = 0; i < 7; i++)
            for (int j = 0; j < 20; j++) {
                double t = d.x[i * 60 + (size_t)c * 20 + (size_t)j] / 255.0 - m;
                v += t * t;
            }
        assert_true(fabs(mean[c] - m) < 1e-6);
        if (c == 1)
            assert_true(std[c] == 1.0f);
        else
            assert_true(fabs(std[c] - sqrt(v / 140)) < 1e-6);
    }
    assert_true(fabs(mean[1] - 0.2) < 1e-6);
    nn_dataset_free(&d);
    assert_null(d.x);
}

static void test_batch_plain_and_pad_to(void **state)
{
    (void)state;
    nn_dataset d;
    s_make_set(&d, 4, 2, 5, 4); /* non-square on purpose */
    float mean[2] = {0.5f, 0.25f}, std[2] = {0.5f, 2.0f};
    uint32_t idx[3] = {2, 0, 3};
    float x[3 * 2 * 8 * 8];
    uint8_t y[3];
    assert_int_equal(nn_data_out_hw(&d, NULL), 5);
    nn_data_batch(&d, idx, 3, mean, std, NULL, NULL, x, y);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(y[b], d.y[idx[b]]);
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 20; i++)
                assert_true(x[(b * 2 + c) * 20 + i] ==
                            s_norm(d.x[idx[b] * 40 + (uint32_t)c * 20 + (uint32_t)i], mean[c],
                                   std[c]));
    }
    /* pad_to 8: top (8-5)/2 = 1, left (8-4)/2 = 2, black (0) elsewhere. */
    nn_augment aug = {0, 0, 8};
    int oh, ow;
    nn_data_out_shape(&d, &aug, &oh, &ow);
    assert_int_equal(oh, 8);
    assert_int_equal(ow, 8);
    assert_int_equal(nn_data_out_hw(&d, &aug), 8);
    char err[128];
    assert_int_equal(nn_augment_check(&d, &aug, err, sizeof err), 0);
    assert_int_equal(nn_augment_check(&d, NULL, err, sizeof err), 0);
    nn_augment bad1 = {0, 0, 4}, bad2 = {-1, 0, 0};
    assert_int_equal(nn_augment_check(&d, &bad1, err, sizeof err), -1);
    ASSERT_HAS(err, "pad_to 4");
    assert_int_equal(nn_augment_check(&d, &bad2, err, sizeof err), -1);
    ASSERT_HAS(err, "crop padding -1");
    nn_data_batch(&d, idx, 3, mean, std, &aug, NULL, x, NULL);
    for (int b = 0; b < 3; b++)
        for (int c = 0; c < 2; c++)
            for (int oy = 0; oy < 8; oy++)
                for (int ox = 0; ox < 8; ox++) {
                    int sy = oy - 1, sx = ox - 2;
                    int v = (sy >= 0 && sy < 5 && sx >= 0 && sx < 4)
                                ? d.x[idx[b] * 40 + (uint32_t)(c * 20 + sy * 4 + sx)]
                                : 0;
                    assert_true(x[((b * 2 + c) * 8 + oy) * 8 + ox] == s_norm(v, mean[c], std[c]));
                }
    nn_dataset_free(&d);
}

/* Output of one sample equals the image shifted by (sy, sx) (output pixel
 * (oy, ox) shows image pixel (oy + sy, ox + sx)), mirrored if fl. */
static int s_matches(const nn_dataset *d, uint32_t i, const float *out, int OH, int OW, int top,
                     int left, int sy, int sx, int fl, const float *mean, const float *std)
{
    for (int c = 0; c < d->c; c++)
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                int xx = fl ? OW - 1 - ox : ox;
                int py = oy + sy - top, px = xx + sx - left;
                int v = (py >= 0 && py < d->h && px >= 0 && px < d->w)
                            ? d->x[((size_t)i * (size_t)d->c + (size_t)c) * (size_t)(d->h * d->w) +
                                   (size_t)(py * d->w + px)]
                            : 0;
                if (out[(c * OH + oy) * OW + ox] != s_norm(v, mean[c], std[c]))
                    return 0;
            }
    return 1;
}

static void test_augment_crop_flip(void **state)
{
    (void)state;
    nn_dataset d;
    s_make_set(&d, 50, 3, 6, 6);
    float mean[3] = {0.4f, 0.5f, 0.6f}, std[3] = {0.2f, 0.3f, 0.25f};
    enum { NB = 200 };
    uint32_t idx[NB];
    for (int i = 0; i < NB; i++)
        idx[i] = (uint32_t)(i % 50);
    float *x = nn_xmalloc(NB * 3 * 36 * sizeof(float));
    float *x2 = nn_xmalloc(NB * 3 * 36 * sizeof(float));

    /* Flip only: every sample is the image or its mirror, both occur. */
    nn_augment aug = {0, 1, 0};
    nn_rng r;
    nn_rng_seed(&r, 5);
    nn_data_batch(&d, idx, NB, mean, std, &aug, &r, x, NULL);
    int nflip = 0;
    for (int b = 0; b < NB; b++) {
        int a = s_matches(&d, idx[b], x + b * 108, 6, 6, 0, 0, 0, 0, 0, mean, std);
        int m = s_matches(&d, idx[b], x + b * 108, 6, 6, 0, 0, 0, 0, 1, mean, std);
        assert_true(a || m);
        nflip += m;
    }
    assert_true(nflip > 60 && nflip < 140);

    /* Crop 2: every sample is the image shifted by some (sy, sx) in
     * [-2, 2]^2 with black fill; many shifts occur; the draws follow the
     * documented order (dy, dx, flip) so a twin rng predicts them. */
    nn_augment aug2 = {2, 1, 0};
    nn_rng_seed(&r, 9);
    nn_data_batch(&d, idx, NB, mean, std, &aug2, &r, x, NULL);
    nn_rng twin;
    nn_rng_seed(&twin, 9);
    int seen[5][5] = {{0}};
    for (int b = 0; b < NB; b++) {
        int dy = (int)nn_rng_below(&twin, 5), dx = (int)nn_rng_below(&twin, 5);
        int fl = (int)nn_rng_below(&twin, 2);
        assert_true(s_matches(&d, idx[b], x + b * 108, 6, 6, 0, 0, dy - 2, dx - 2, fl, mean, std));
        seen[dy][dx] = 1;
    }
    int nseen = 0;
    for (int i = 0; i < 25; i++)
        nseen += seen[i / 5][i % 5];
    assert_true(nseen >= 20);
    /* Independently of the draw order: some shift in range explains it. */
    for (int b = 0; b < 20; b++) {
        int ok = 0;
        for (int sy = -2; sy <= 2 && !ok; sy++)
            for (int sx = -2; sx <= 2 && !ok; sx++)
                for (int fl = 0; fl < 2 && !ok; fl++)
                    ok = s_matches(&d, idx[b], x + b * 108, 6, 6, 0, 0, sy, sx, fl, mean, std);
        assert_true(ok);
    }
    /* Same seed, same batch; another seed, another batch. */
    nn_rng_seed(&r, 9);
    nn_data_batch(&d, idx, NB, mean, std, &aug2, &r, x2, NULL);
    assert_memory_equal(x, x2, NB * 108 * sizeof(float));
    nn_rng_seed(&r, 10);
    nn_data_batch(&d, idx, NB, mean, std, &aug2, &r, x2, NULL);
    assert_true(memcmp(x, x2, NB * 108 * sizeof(float)) != 0);

    /* Crop + pad_to (28x28 -> 32x32 style): 6x6 -> 10x10, pad 4. */
    nn_augment aug3 = {4, 0, 10};
    float *x3 = nn_xmalloc(NB * 3 * 100 * sizeof(float));
    nn_rng_seed(&r, 11);
    nn_data_batch(&d, idx, NB, mean, std, &aug3, &r, x3, NULL);
    nn_rng_seed(&twin, 11);
    for (int b = 0; b < NB; b++) {
        int dy = (int)nn_rng_below(&twin, 9), dx = (int)nn_rng_below(&twin, 9);
        assert_true(s_matches(&d, idx[b], x3 + b * 300, 10, 10, 2, 2, dy - 4, dx - 4, 0, mean,
                              std));
    }
    free(x);
    free(x2);
    free(x3);
    nn_dataset_free(&d);
}

/* ---- skew partition ---------------------------------------------------- */

typedef struct {
    uint8_t  label;
    uint32_t index;
} s_li;

static int s_cmp_li(const void *a, const void *b)
{
    const s_li *x = a, *y = b;
    if (x->label != y->label)
        return x->label < y->label ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* docs/design.md §7 written out independently (qsort instead of a counting sort). */
static void s_ref_partition(const uint8_t *labels, size_t n, int nodes, double s, uint64_t seed,
                            uint32_t **out, size_t *cnt)
{
    s_li *li = nn_xmalloc(n * sizeof *li);
    for (size_t i = 0; i < n; i++) {
        li[i].label = labels[i];
        li[i].index = (uint32_t)i;
    }
    qsort(li, n, sizeof *li, s_cmp_li);
    uint32_t *sorted = nn_xmalloc(n * 4), *rnd = nn_xmalloc(n * 4);
    size_t ns = 0, nr = 0, i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && li[j].label == li[i].label)
            j++;
        size_t nc = j - i, take = (size_t)(s * (double)nc); /* Python int() */
        for (size_t k = 0; k < nc; k++) {
            if (k < take)
                sorted[ns++] = li[i + k].index;
            else
                rnd[nr++] = li[i + k].index;
        }
        i = j;
    }
    nn_rng r;
    nn_rng_seed(&r, seed);
    nn_rng_shuffle_u32(&r, rnd, nr);
    double frac = 1.0 / nodes;
    size_t ls = (size_t)(frac * (double)n * s), lr = (size_t)(frac * (double)n * (1 - s));
    for (int k = 0; k < nodes; k++) {
        out[k] = nn_xmalloc((ls + lr + 1) * 4);
        memcpy(out[k], sorted + (size_t)k * ls, ls * 4);
        memcpy(out[k] + ls, rnd + (size_t)k * lr, lr * 4);
        cnt[k] = ls + lr;
    }
    free(li);
    free(sorted);
    free(rnd);
}

static void s_labels(uint8_t **lab, size_t *n)
{
    if (g_have_fashion) {
        *lab = g_train.y;
        *n = g_train.n;
        return;
    }
    /* Without the data set: 60000 labels, 6000 per class, scrambled. */
    static uint8_t synth[60000];
    uint32_t *p = nn_xmalloc(60000 * 4);
    for (uint32_t i = 0; i < 60000; i++)
        p[i] = i;
    nn_rng r;
    nn_rng_seed(&r, 3);
    nn_rng_shuffle_u32(&r, p, 60000);
    for (uint32_t i = 0; i < 60000; i++)
        synth[p[i]] = (uint8_t)(i % 10);
    free(p);
    *lab = synth;
    *n = 60000;
}

static void test_partition_skew(void **state)
{
    (void)state;
    uint8_t *lab;
    size_t n;
    s_labels(&lab, &n);
    static const double skews[] = {0.0, 0.4, 0.8, 0.9};
    /* Python: int(1/8*60000*s) + int(1/8*60000*(1-s)); 1-0.8 and 1-0.9 round down. */
    static const size_t expect_count[] = {7500, 7500, 7499, 7499};
    enum { NODES = 8 };
    char err[256];
    uint8_t *used = nn_xmalloc(n);
    for (size_t si = 0; si < 4; si++) {
        double s = skews[si];
        uint32_t *idx[NODES], *ref[NODES];
        size_t cnt[NODES], rcnt[NODES];
        assert_int_equal(nn_partition_skew(lab, n, 10, NODES, s, 1234, idx, cnt, err, sizeof err),
                         0);
        s_ref_partition(lab, n, NODES, s, 1234, ref, rcnt);
        memset(used, 0, n);
        for (int k = 0; k < NODES; k++) {
            assert_int_equal(cnt[k], rcnt[k]);
            assert_int_equal(cnt[k], expect_count[si]);
            size_t h[10] = {0}, rh[10] = {0};
            for (size_t j = 0; j < cnt[k]; j++) {
                assert_true(idx[k][j] < n);
                assert_int_equal(used[idx[k][j]], 0); /* disjoint */
                used[idx[k][j]] = 1;
                h[lab[idx[k][j]]]++;
                rh[lab[ref[k][j]]]++;
            }
            for (int c = 0; c < 10; c++)
                assert_int_equal(h[c], rh[c]);
            assert_memory_equal(idx[k], ref[k], cnt[k] * 4);
            if (s == 0.0)
                for (int c = 0; c < 10; c++) /* IID: ~750 each */
                    assert_true(h[c] > 650 && h[c] < 850);
        }
        if (s == 0.8) {
            /* Node 0: the first 6000 of the sorted pool = 4800 of class 0,
             * then 1200 of class 1, plus 1500 random. */
            size_t h0[10] = {0};
            for (size_t j = 0; j < cnt[0]; j++)
                h0[lab[idx[0][j]]]++;
            assert_true(h0[0] >= 4800 && h0[0] < 4800 + 300);
            assert_true(h0[1] >= 1200 && h0[1] < 1200 + 300);
        }
        nn_partition_free(idx, NODES);
        nn_partition_free(ref, NODES);
        assert_null(idx[0]);
    }
    free(used);
}

static void test_partition_determinism_and_errors(void **state)
{
    (void)state;
    uint8_t *lab;
    size_t n;
    s_labels(&lab, &n);
    char err[256];
    uint32_t *a[4], *b[4], *c[4];
    size_t ca[4], cb[4], cc[4];
    assert_int_equal(nn_partition_skew(lab, n, 10, 4, 0.5, 7, a, ca, err, sizeof err), 0);
    assert_int_equal(nn_partition_skew(lab, n, 10, 4, 0.5, 7, b, cb, err, sizeof err), 0);
    assert_int_equal(nn_partition_skew(lab, n, 10, 4, 0.5, 8, c, cc, err, sizeof err), 0);
    int differ = 0;
    for (int k = 0; k < 4; k++) {
        assert_int_equal(ca[k], cb[k]);
        assert_memory_equal(a[k], b[k], ca[k] * 4);
        differ |= memcmp(a[k], c[k], ca[k] * 4) != 0;
    }
    assert_true(differ);
    nn_partition_free(a, 4);
    nn_partition_free(b, 4);
    nn_partition_free(c, 4);

    /* s = 1: fully sorted, node k gets classes in order. */
    uint32_t *d[10];
    size_t cd[10];
    assert_int_equal(nn_partition_skew(lab, n, 10, 10, 1.0, 7, d, cd, err, sizeof err), 0);
    for (int k = 0; k < 10; k++) {
        assert_int_equal(cd[k], n / 10);
        for (size_t j = 0; j < cd[k]; j++)
            assert_int_equal(lab[d[k][j]], k);
    }
    nn_partition_free(d, 10);

    assert_int_equal(nn_partition_skew(lab, n, 10, 4, 1.5, 7, a, ca, err, sizeof err), -1);
    ASSERT_HAS(err, "skew");
    assert_int_equal(nn_partition_skew(lab, n, 10, 0, 0.5, 7, a, ca, err, sizeof err), -1);
    ASSERT_HAS(err, "nodes");
    uint8_t bad[5] = {0, 1, 2, 7, 3};
    assert_int_equal(nn_partition_skew(bad, 5, 5, 2, 0.5, 7, a, ca, err, sizeof err), -1);
    ASSERT_HAS(err, "label 7 of sample 3");
    assert_null(a[0]);
}

/* ---- sampler ----------------------------------------------------------- */

static void test_sampler(void **state)
{
    (void)state;
    enum { N = 10 };
    uint32_t base[N];
    for (int i = 0; i < N; i++)
        base[i] = (uint32_t)(100 + i);
    nn_sampler s;
    nn_sampler_init(&s, base, N, 42);
    uint32_t stream[60];
    uint64_t ep[20];
    for (int b = 0; b < 20; b++) {
        const uint32_t *p = nn_sampler_next(&s, 3, &ep[b]);
        memcpy(stream + 3 * b, p, 3 * 4);
        assert_int_equal(ep[b], (uint64_t)(3 * b) / N);
    }
    assert_int_equal(nn_sampler_position(&s), 60);
    /* Each epoch (10 consecutive positions) is a permutation of base. */
    int same_as_prev = 1;
    for (int e = 0; e < 6; e++) {
        int seen[N] = {0};
        for (int i = 0; i < N; i++) {
            uint32_t v = stream[e * N + i];
            assert_true(v >= 100 && v < 100 + N);
            assert_int_equal(seen[v - 100], 0);
            seen[v - 100] = 1;
        }
        if (e && memcmp(stream + e * N, stream + (e - 1) * N, N * 4) != 0)
            same_as_prev = 0;
    }
    assert_false(same_as_prev);
    /* Epoch e's order is the documented shuffle. */
    for (int e = 0; e < 6; e++) {
        uint32_t perm[N];
        memcpy(perm, base, sizeof perm);
        nn_rng r;
        nn_rng_seed(&r, nn_sampler_epoch_seed(42, (uint64_t)e));
        nn_rng_shuffle_u32(&r, perm, N);
        assert_memory_equal(perm, stream + e * N, sizeof perm);
    }
    /* Resume: a fresh sampler seeked to 27 continues the same stream. */
    nn_sampler t;
    nn_sampler_init(&t, base, N, 42);
    nn_sampler_seek(&t, 27);
    uint64_t e2;
    const uint32_t *p = nn_sampler_next(&t, 33, &e2);
    assert_int_equal(e2, 2);
    assert_memory_equal(p, stream + 27, 33 * 4);
    /* Seeking backwards works too; batches larger than the set wrap. */
    nn_sampler_seek(&t, 0);
    p = nn_sampler_next(&t, 25, NULL);
    assert_memory_equal(p, stream, 25 * 4);
    /* Another seed, another stream. */
    nn_sampler u;
    nn_sampler_init(&u, base, N, 43);
    p = nn_sampler_next(&u, 10, NULL);
    assert_true(memcmp(p, stream, 40) != 0);
    nn_sampler_free(&s);
    nn_sampler_free(&t);
    nn_sampler_free(&u);
    nn_sampler_free(&u); /* safe twice */
}

/* ---- CIFAR-10 binary batches ------------------------------------------- */

static void s_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t s_cifar_px(int file, int rec, int j)
{
    return (uint8_t)(file * 31 + rec * 7 + j * 13 + (j >> 8));
}

static void s_write_cifar(const char *dir, const char *name, int file, int nrec, int bad_label)
{
    size_t sz = (size_t)nrec * 3073;
    uint8_t *b = nn_xmalloc(sz);
    for (int r = 0; r < nrec; r++) {
        b[(size_t)r * 3073] = (uint8_t)((file + r) % 10);
        for (int j = 0; j < 3072; j++)
            b[(size_t)r * 3073 + 1 + (size_t)j] = s_cifar_px(file, r, j);
    }
    if (bad_label)
        b[3073] = 10;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    s_write_file(p, b, sz);
    free(b);
}

static void test_cifar10_synthetic(void **state)
{
    (void)state;
    static const int nrec[6] = {3, 2, 1, 2, 2, 4};
    char name[64], spec[300], err[512];
    for (int f = 0; f < 5; f++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        s_write_cifar(g_dir, name, f, nrec[f], 0);
    }
    s_write_cifar(g_dir, "test_batch.bin", 5, nrec[5], 0);
    snprintf(spec, sizeof spec, "cifar10:%s", g_dir);
    nn_dataset tr, te;
    assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.n, 10);
    assert_int_equal(te.n, 4);
    assert_int_equal(tr.c, 3);
    assert_int_equal(tr.h, 32);
    assert_int_equal(tr.w, 32);
    assert_string_equal(tr.name, "cifar10");
    size_t k = 0;
    for (int f = 0; f < 5; f++)
        for (int r = 0; r < nrec[f]; r++, k++) {
            assert_int_equal(tr.y[k], (f + r) % 10);
            for (int j = 0; j < 3072; j += 97)
                assert_int_equal(tr.x[k * 3072 + (size_t)j], s_cifar_px(f, r, j));
        }
    assert_int_equal(te.y[3], (5 + 3) % 10);
    assert_int_equal(te.x[3 * 3072 + 3071], s_cifar_px(5, 3, 3071));
    /* Stats: three channels. */
    float mean[3], std[3];
    nn_data_norm_stats(&tr, mean, std);
    assert_true(mean[0] > 0 && mean[0] < 1 && std[2] > 0);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);

    /* A label of 10 in batch 3, record 1. */
    s_write_cifar(g_dir, "data_batch_3.bin", 2, 2, 1);
    assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), -1);
    ASSERT_HAS(err, "data_batch_3.bin");
    ASSERT_HAS(err, "label 10 of record 1");
    assert_null(tr.x);
    /* A truncated batch. */
    char p[512];
    snprintf(p, sizeof p, "%s/data_batch_3.bin", g_dir);
    uint8_t junk[3000] = {0};
    s_write_file(p, junk, sizeof junk);
    assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), -1);
    ASSERT_HAS(err, "data_batch_3.bin");
    ASSERT_HAS(err, "truncated");
    /* Missing test batch. */
    s_write_cifar(g_dir, "data_batch_3.bin", 2, 1, 0);
    snprintf(p, sizeof p, "%s/test_batch.bin", g_dir);
    unlink(p);
    assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), -1);
    ASSERT_HAS(err, "test_batch.bin");
    ASSERT_HAS(err, "cannot open");
    assert_null(tr.x);
    assert_null(te.x);
}

/* ---- IDX files, good and malformed ------------------------------------- */

static void s_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes an IDX file: magic, dims, then `payload` bytes (pattern). */
static void s_write_idx(const char *name, int gz, uint32_t magic, int ndim, const uint32_t *dims,
                        size_t payload, int label_bad_at)
{
    size_t hl = 4 + 4 * (size_t)ndim;
    uint8_t *b = nn_xmalloc(hl + payload + 1);
    s_put_be32(b, magic);
    for (int i = 0; i < ndim; i++)
        s_put_be32(b + 4 + 4 * i, dims[i]);
    for (size_t i = 0; i < payload; i++)
        b[hl + i] = ndim == 1 ? (uint8_t)(i % 10) : (uint8_t)(i * 37 + 11);
    if (label_bad_at >= 0)
        b[hl + (size_t)label_bad_at] = 10;
    char p[512];
    snprintf(p, sizeof p, "%s/%s%s", g_dir, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, b, (unsigned)(hl + payload)), (int)(hl + payload));
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        s_write_file(p, b, hl + payload);
    }
    free(b);
}

static void s_unlink_idx(void)
{
    static const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char p[512];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s.gz", g_dir, names[i]);
        unlink(p);
    }
}

/* A good 4-file set: train 10 images 4x3 (gz), test 5 images (plain). */
static void s_write_good_idx(void)
{
    uint32_t tr[3] = {10, 4, 3}, te[3] = {5, 4, 3}, ntr = 10, nte = 5;
    s_write_idx("train-images-idx3-ubyte", 1, 0x803, 3, tr, 120, -1);
    s_write_idx("train-labels-idx1-ubyte", 1, 0x801, 1, &ntr, 10, -1);
    s_write_idx("t10k-images-idx3-ubyte", 0, 0x803, 3, te, 60, -1);
    s_write_idx("t10k-labels-idx1-ubyte", 0, 0x801, 1, &nte, 5, -1);
}

static void test_idx_good(void **state)
{
    (void)state;
    s_unlink_idx();
    s_write_good_idx();
    char spec[300], err[512];
    snprintf(spec, sizeof spec, "mnist:%s", g_dir);
    nn_dataset tr, te;
    assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.n, 10);
    assert_int_equal(te.n, 5);
    assert_int_equal(tr.h, 4);
    assert_int_equal(tr.w, 3);
    assert_string_equal(tr.name, "mnist");
    for (size_t i = 0; i < 120; i++)
        assert_int_equal(tr.x[i], (uint8_t)(i * 37 + 11));
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(te.y[i], i % 10);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
}

static void s_expect_fail(const char *want_file, const char *want1, const char *want2)
{
    char spec[300], err[512];
    snprintf(spec, sizeof spec, "fashion-mnist:%s", g_dir);
    nn_dataset tr, te;
    if (nn_data_load(spec, &tr, &te, err, sizeof err) != -1)
        fail_msg("load succeeded; expected an error with \"%s\"", want1);
    if (getenv("LPG_TEST_VERBOSE"))
        fprintf(stderr, "  rejected: %s\n", err);
    ASSERT_HAS(err, g_dir);
    ASSERT_HAS(err, want_file);
    ASSERT_HAS(err, want1);
    if (want2)
        ASSERT_HAS(err, want2);
    assert_null(tr.x);
    assert_null(te.x);
    assert_int_equal(tr.n, 0);
}

static void test_idx_malformed(void **state)
{
    (void)state;
    uint32_t tr[3] = {10, 4, 3}, n9 = 9, n10 = 10;
    char p[512], err[512];

    /* Missing file. */
    s_unlink_idx();
    s_expect_fail("train-images-idx3-ubyte", "cannot open", "No such file");

    /* Wrong magic. */
    s_write_good_idx();
    s_write_idx("train-images-idx3-ubyte", 1, 0x804, 3, tr, 120, -1);
    s_expect_fail("train-images-idx3-ubyte.gz", "wrong magic 0x00000804", "0x00000803");
    s_write_good_idx();
    s_write_idx("t10k-labels-idx1-ubyte", 0, 0x803, 1, &n10, 5, -1);
    s_expect_fail("t10k-labels-idx1-ubyte", "wrong magic", "0x00000801");

    /* Truncated images. */
    s_write_good_idx();
    s_write_idx("train-images-idx3-ubyte", 1, 0x803, 3, tr, 100, -1);
    s_expect_fail("train-images-idx3-ubyte.gz", "truncated: expected 120 bytes of pixels, got 100",
                  NULL);
    /* Truncated header. */
    s_write_good_idx();
    s_write_idx("train-images-idx3-ubyte", 0, 0x803, 1, tr, 0, -1);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", g_dir);
    unlink(p);
    s_expect_fail("train-images-idx3-ubyte", "truncated", "header");

    /* Trailing bytes. */
    s_write_good_idx();
    s_write_idx("train-images-idx3-ubyte", 1, 0x803, 3, tr, 121, -1);
    s_expect_fail("train-images-idx3-ubyte.gz", "trailing data", NULL);

    /* Count mismatch between images and labels. */
    s_write_good_idx();
    s_write_idx("train-labels-idx1-ubyte", 1, 0x801, 1, &n9, 9, -1);
    s_expect_fail("train-labels-idx1-ubyte.gz", "count mismatch: 9 labels", "10 images");

    /* Zero images / absurd dimensions. */
    s_write_good_idx();
    uint32_t z[3] = {0, 4, 3};
    s_write_idx("train-images-idx3-ubyte", 1, 0x803, 3, z, 0, -1);
    s_expect_fail("train-images-idx3-ubyte.gz", "bad dimensions", NULL);

    /* Label >= 10. */
    s_write_good_idx();
    s_write_idx("train-labels-idx1-ubyte", 1, 0x801, 1, &n10, 10, 6);
    s_expect_fail("train-labels-idx1-ubyte.gz", "label 10 of sample 6 out of range", NULL);

    /* Corrupt gzip: a flipped CRC byte in the trailer, then a cut trailer. */
    s_write_good_idx();
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", g_dir);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    uint8_t buf[4096];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(len > 20 && len < sizeof buf);
    buf[len - 8] ^= 0x5a;
    s_write_file(p, buf, len);
    s_expect_fail("train-images-idx3-ubyte.gz", "corrupt gzip", "check");
    buf[len - 8] ^= 0x5a;
    s_write_file(p, buf, len - 6);
    s_expect_fail("train-images-idx3-ubyte.gz", "corrupt gzip", NULL);
    /* Garbage in the deflate stream. */
    memset(buf + 12, 0xff, 8);
    s_write_file(p, buf, len);
    {
        char spec[300];
        snprintf(spec, sizeof spec, "fashion-mnist:%s", g_dir);
        nn_dataset a, b;
        assert_int_equal(nn_data_load(spec, &a, &b, err, sizeof err), -1);
        ASSERT_HAS(err, "train-images-idx3-ubyte.gz");
    }

    /* Bad specs. */
    nn_dataset a, b;
    assert_int_equal(nn_data_load("imagenet:/x", &a, &b, err, sizeof err), -1);
    ASSERT_HAS(err, "unknown name 'imagenet'");
    assert_int_equal(nn_data_load("cifar10", &a, &b, err, sizeof err), -1);
    ASSERT_HAS(err, "cifar10:DIR");
    assert_int_equal(nn_data_load("mnist:", &a, &b, err, sizeof err), -1);
    ASSERT_HAS(err, "empty directory");
    s_unlink_idx();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fashion_load),
        cmocka_unit_test(test_fashion_norm_stats),
        cmocka_unit_test(test_norm_stats_synthetic),
        cmocka_unit_test(test_batch_plain_and_pad_to),
        cmocka_unit_test(test_augment_crop_flip),
        cmocka_unit_test(test_partition_skew),
        cmocka_unit_test(test_partition_determinism_and_errors),
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_cifar10_synthetic),
        cmocka_unit_test(test_idx_good),
        cmocka_unit_test(test_idx_malformed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
