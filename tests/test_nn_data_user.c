/* test_nn_data_user — the readers of the user's own data: image folders,
 * NumPy .npz archives, CSV tables; per-site joins; the Dirichlet partition.
 *
 * Fixtures in tests/data/userdata/ were written by independent tools (PIL,
 * numpy, Python's csv module) with make_fixtures.py there, which also wrote
 * the expected pixel/label values as text (decoded by PIL and numpy).
 * Malformed inputs: fixtures in userdata/bad/ and files this program derives
 * in a mkdtemp() directory that is removed at the end.  Paths are relative
 * to the repository root (where the tests run).
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

#include "nn/nn_core.h"
#include "nn/nn_data.h"

#define FIX "tests/data/userdata/"

static char g_dir[128];

#define ASSERT_HAS(msg, sub)                                                          \
    do {                                                                              \
        if (!strstr((msg), (sub)))                                                    \
            fail_msg("message \"%s\" lacks \"%s\"", (msg), (sub));                    \
    } while (0)

/* Reads the expected rows "split label v0 v1 ..." of a fixture. */
static int s_expected(const char *path, int split, int row, int *label, int *v, int max)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[65536];
    int r = 0, n = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = line, *end;
        int sp = (int)strtol(p, &end, 10);
        if (sp != split)
            continue;
        if (r++ != row)
            continue;
        p = end;
        *label = (int)strtol(p, &end, 10);
        p = end;
        for (n = 0; n < max; n++) {
            long x = strtol(p, &end, 10);
            if (end == p)
                break;
            v[n] = (int)x;
            p = end;
        }
        break;
    }
    fclose(f);
    return n;
}

static void s_check_against(const nn_dataset *d, const char *exp, int split)
{
    int v[4096], label;
    size_t per = (size_t)d->c * (size_t)d->h * (size_t)d->w;
    for (size_t i = 0; i < d->n; i++) {
        int n = s_expected(exp, split, (int)i, &label, v, 4096);
        assert_int_equal(n, (int)per);
        assert_int_equal(d->y[i], label);
        for (size_t j = 0; j < per; j++)
            if (d->x[i * per + j] != v[j])
                fail_msg("sample %zu value %zu: %d, expected %d", i, j, d->x[i * per + j], v[j]);
    }
}

static void test_images_mixed(void **state)
{
    (void)state;
    nn_dataset tr, te;
    char err[512];
    nn_data_opts o = {0};
    int rc = nn_data_load_opts("images:" FIX "imgs", &o, &tr, &te, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(tr.n, 9);
    assert_int_equal(te.n, 6);
    assert_int_equal(tr.c, 3); /* one RGB JPEG makes the set RGB */
    assert_int_equal(tr.h, 5);
    assert_int_equal(tr.w, 6);
    assert_int_equal(tr.classes, 3);
    assert_string_equal(tr.class_names[0], "ant");
    assert_string_equal(tr.class_names[2], "zebra");
    assert_string_equal(te.class_names[1], "bee");
    s_check_against(&tr, FIX "imgs_expected.txt", 0);
    s_check_against(&te, FIX "imgs_expected.txt", 1);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    assert_int_equal(nn_data_load("images:" FIX "imgs_gray", &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.c, 1);
    assert_int_equal(tr.h, 4);
    assert_int_equal(tr.w, 3);
    s_check_against(&tr, FIX "imgs_gray_expected.txt", 0);
    s_check_against(&te, FIX "imgs_gray_expected.txt", 1);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
}

static void test_image_resize(void **state)
{
    (void)state;
    uint8_t *px;
    int c, h, w;
    char err[512];
    /* 4x4 ramp v = 16*(4y+x) shrunk to 2x2: area means of 2x2 blocks. */
    assert_int_equal(nn_image_read(FIX "ramp4.png", 0, 2, 2, &px, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(c, 1);
    assert_int_equal(h, 2);
    const int want[4] = {40, 72, 168, 200}; /* (0+16+64+80)/4 ... */
    for (int i = 0; i < 4; i++)
        assert_int_equal(px[i], want[i]);
    free(px);
    /* Enlarging 4 -> 8 bilinear, half-pixel centres: out 0 clamps to 0,
     * out 1 is at source 0.25: 0.75*0 + 0.25*16 = 4. */
    assert_int_equal(nn_image_read(FIX "ramp4.png", 1, 8, 8, &px, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(px[0], 0);
    assert_int_equal(px[1], 4);
    assert_int_equal(px[7], 48);
    assert_int_equal(px[63], 240);
    free(px);
}

static void s_cp(const char *from, const char *to)
{
    uint8_t *b;
    size_t n;
    char err[256];
    assert_int_equal(nn_data_read_file(from, 1 << 20, &b, &n, err, sizeof err), 0);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

/* A tree dir/{train,test}/{a,b}/ with one good PNG each. */
static void s_tree(const char *root)
{
    char p[512];
    mkdir(root, 0700);
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", root, s ? "test" : "train");
        mkdir(p, 0700);
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s/%c", root, s ? "test" : "train", 'a' + k);
            mkdir(p, 0700);
            snprintf(p, sizeof p, "%s/%s/%c/ok.png", root, s ? "test" : "train", 'a' + k);
            s_cp(FIX "imgs_gray/train/ant/g0.png", p);
        }
    }
}

static void s_expect_images_err(const char *root, nn_data_opts *o, const char *sub1,
                                const char *sub2)
{
    char spec[512], err[1024];
    nn_dataset tr, te;
    snprintf(spec, sizeof spec, "images:%s", root);
    assert_int_equal(nn_data_load_opts(spec, o, &tr, &te, err, sizeof err), -1);
    ASSERT_HAS(err, sub1);
    if (sub2)
        ASSERT_HAS(err, sub2);
    assert_null(tr.x);
    assert_null(te.x);
}

static void test_images_malformed(void **state)
{
    (void)state;
    char root[256], p[512], err[512];
    nn_data_opts o = {0};
    const char *bad[] = {"trunc.png", "trunc.jpg", "notes.png"};
    const char *why[] = {"corrupt PNG", "corrupt JPEG", "not a PNG or JPEG"};
    const char *src[] = {FIX "bad/trunc.png", FIX "bad/trunc.jpg", FIX "bad/notes.png"};
    for (int i = 0; i < 3; i++) {
        snprintf(root, sizeof root, "%s/t%d", g_dir, i);
        s_tree(root);
        snprintf(p, sizeof p, "%s/train/b/%s", root, bad[i]);
        s_cp(src[i], p);
        s_expect_images_err(root, &o, p, why[i]);
        o.skip_bad = 1; /* counted and skipped */
        nn_dataset tr, te;
        char spec[300];
        snprintf(spec, sizeof spec, "images:%s", root);
        assert_int_equal(nn_data_load_opts(spec, &o, &tr, &te, err, sizeof err), 0);
        assert_int_equal(o.skipped, 1);
        assert_int_equal(tr.n, 2);
        nn_dataset_free(&tr);
        nn_dataset_free(&te);
        o.skip_bad = 0;
    }
    /* an image of another size: both files named; --image-size fixes it */
    snprintf(root, sizeof root, "%s/size", g_dir);
    s_tree(root);
    snprintf(p, sizeof p, "%s/train/b/big.png", root);
    s_cp(FIX "ramp4.png", p);
    s_expect_images_err(root, &o, "big.png is 4x4", "ok.png is 4x3");
    o.image_h = o.image_w = 7;
    nn_dataset tr, te;
    snprintf(p, sizeof p, "images:%s", root);
    assert_int_equal(nn_data_load_opts(p, &o, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.h, 7);
    assert_int_equal(te.w, 7);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    o.image_h = o.image_w = 0;
    /* an empty class folder; a test class unknown to training; no test/ */
    snprintf(root, sizeof root, "%s/empty", g_dir);
    s_tree(root);
    snprintf(p, sizeof p, "%s/train/c", root);
    mkdir(p, 0700);
    s_expect_images_err(root, &o, "train/c: empty class folder", NULL);
    snprintf(root, sizeof root, "%s/unknown", g_dir);
    s_tree(root);
    snprintf(p, sizeof p, "%s/test/zz", root);
    mkdir(p, 0700);
    s_expect_images_err(root, &o, "test/zz: class folder not among the training classes", NULL);
    s_expect_images_err(FIX "nowhere", &o, "nowhere/train: cannot read", NULL);
    /* classes.txt fixes names and order; a listed class may be empty */
    snprintf(root, sizeof root, "%s/listed", g_dir);
    s_tree(root);
    snprintf(p, sizeof p, "%s/train/c", root);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/classes.txt", root);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("c\r\nb\na\n", f);
    fclose(f);
    snprintf(p, sizeof p, "images:%s", root);
    assert_int_equal(nn_data_load_opts(p, &o, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.classes, 3);
    assert_string_equal(tr.class_names[0], "c");
    assert_int_equal(tr.y[0], 2); /* train/a/ok.png is class 'a', listed third */
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    snprintf(p, sizeof p, "%s/classes.txt", root);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("a\nb\na\n", f);
    fclose(f);
    s_expect_images_err(root, &o, "classes.txt:3: class 'a' listed twice", NULL);
}

static void test_npz_good(void **state)
{
    (void)state;
    nn_dataset tr, te;
    char err[512];
    const char *files[] = {FIX "nhwc_u8.npz", FIX "nhwc_u8_deflate.npz"};
    for (int i = 0; i < 2; i++) {
        char spec[256];
        snprintf(spec, sizeof spec, "npz:%s", files[i]);
        if (nn_data_load(spec, &tr, &te, err, sizeof err))
            fail_msg("%s", err);
        assert_int_equal(tr.n, 7);
        assert_int_equal(tr.c, 2);
        assert_int_equal(tr.h, 4);
        assert_int_equal(tr.w, 3);
        assert_int_equal(tr.classes, 3);
        assert_null(tr.xf);
        s_check_against(&tr, FIX "nhwc_u8_expected.txt", 0);
        s_check_against(&te, FIX "nhwc_u8_expected.txt", 1);
        nn_dataset_free(&tr);
        nn_dataset_free(&te);
    }
    nn_data_opts o = {.nchw = 1};
    assert_int_equal(nn_data_load_opts("npz:" FIX "nchw_f32.npz", &o, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.c, 2);
    assert_int_equal(tr.h, 3);
    assert_non_null(tr.xf);
    assert_null(tr.x);
    FILE *f = fopen(FIX "nchw_f32_expected.txt", "r");
    assert_non_null(f);
    for (size_t i = 0; i < tr.n * 18; i++) {
        double v;
        assert_int_equal(fscanf(f, "%lf", &v), 1);
        assert_true(tr.xf[i] == (float)v);
    }
    for (size_t i = 0; i < te.n * 18; i++) {
        double v;
        assert_int_equal(fscanf(f, "%lf", &v), 1);
        assert_true(te.xf[i] == (float)v);
    }
    fclose(f);
    assert_int_equal(tr.y[0], 1);
    assert_int_equal(te.y[1], 1);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    assert_int_equal(nn_data_load("npz:" FIX "nhw_u8.npz", &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.c, 1);
    assert_int_equal(tr.classes, 4);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
}

static void test_npz_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *file, *a, *b;
    } cases[] = {
        {"bad/x_int16.npz", "array x_train", "wrong dtype i2"},
        {"bad/object.npz", "array y_train", "object array"},
        {"bad/fortran.npz", "array x_train", "Fortran"},
        {"bad/label300.npz", "array y_train", "label 300 of sample 2 out of range"},
        {"bad/no_ytest.npz", "no array y_test", NULL},
        {"bad/bigendian.npz", "array x_train", "big-endian"},
        {"bad/trunc.npz", "trunc.npz", "zip"},
        {"bad/pickle.npy", "not a zip archive", NULL},
        {"imgs_expected.txt", "not a zip archive", NULL},
        {"missing.npz", "cannot open", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char spec[256], err[1024];
        nn_dataset tr, te;
        snprintf(spec, sizeof spec, "npz:" FIX "%s", cases[i].file);
        assert_int_equal(nn_data_load(spec, &tr, &te, err, sizeof err), -1);
        ASSERT_HAS(err, cases[i].file);
        ASSERT_HAS(err, cases[i].a);
        if (cases[i].b)
            ASSERT_HAS(err, cases[i].b);
        assert_null(tr.x);
        assert_null(tr.xf);
    }
    /* a stored archive edited: a local header's name, a data byte */
    for (int k = 0; k < 2; k++) {
        uint8_t *z;
        size_t zn;
        char errz[512], path[300], spec[320];
        nn_dataset tr, te;
        assert_int_equal(nn_data_read_file(FIX "nhw_u8.npz", 1 << 20, &z, &zn, errz,
                                           sizeof errz), 0);
        uint8_t *hit = memmem(z, zn, "x_train.npy", 11); /* the first local header */
        assert_non_null(hit);
        if (k == 0)
            hit[0] = 'X';
        else
            z[zn / 8] ^= 1; /* inside the first member's data */
        snprintf(path, sizeof path, "%s/edited%d.npz", g_dir, k);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(z, 1, zn, f), zn);
        fclose(f);
        free(z);
        snprintf(spec, sizeof spec, "npz:%s", path);
        assert_int_equal(nn_data_load(spec, &tr, &te, errz, sizeof errz), -1);
        ASSERT_HAS(errz, k == 0 ? "local header disagrees" : "CRC-32 mismatch");
    }
    /* every truncation of a good archive is refused, none crashes */
    uint8_t *b;
    size_t n;
    char err[512];
    assert_int_equal(nn_data_read_file(FIX "nhwc_u8_deflate.npz", 1 << 20, &b, &n, err,
                                       sizeof err), 0);
    for (size_t cut = 0; cut < n; cut += 7) {
        uint8_t *m;
        size_t ml;
        int r = nn_zip_member(b, cut, "t.npz", "x_train.npy", &m, &ml, err, sizeof err);
        assert_true(r <= 0);
    }
    free(b);
}

static void test_npy_header(void **state)
{
    (void)state;
    char err[512];
    nn_npy a;
    uint8_t buf[256];
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    size_t hl = strlen(good);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)hl;
    buf[9] = 0;
    memcpy(buf + 10, good, hl);
    assert_int_equal(nn_npy_parse(buf, 10 + hl + 24, "t", &a, err, sizeof err), 0);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.dtype, 4);
    assert_int_equal(a.kind, 'f');
    assert_int_equal(a.offset, 10 + hl);
    assert_int_equal(nn_npy_parse(buf, 10 + hl + 23, "t", &a, err, sizeof err), -1);
    ASSERT_HAS(err, "truncated or damaged");
    static const char *const bad[] = {
        "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
        "{'descr': '<f4', 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 1, 1, 1), }",
        "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hl = strlen(bad[i]);
        buf[8] = (uint8_t)hl;
        memcpy(buf + 10, bad[i], hl);
        assert_int_equal(nn_npy_parse(buf, 10 + hl + 24, "arr", &a, err, sizeof err), -1);
        ASSERT_HAS(err, "arr: ");
    }
}

static void test_csv_good(void **state)
{
    (void)state;
    nn_dataset tr, te;
    char err[512];
    int rc = nn_data_load("csv:" FIX "iris_train.csv,test=" FIX "iris_test.csv", &tr, &te, err,
                          sizeof err);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(tr.n, 12);
    assert_int_equal(te.n, 4);
    assert_int_equal(tr.c, 3);
    assert_int_equal(tr.h, 1);
    assert_int_equal(tr.classes, 3);
    /* names sorted: setosa, versicolor, virginica; row 1 is virginica */
    assert_string_equal(tr.class_names[1], "versicolor");
    assert_int_equal(tr.y[0], 0);
    assert_int_equal(tr.y[1], 2);
    assert_int_equal(te.y[0], 2);
    assert_true(tr.xf[0] == -2.967f);
    assert_true(tr.xf[4] == 11.19f);  /* the quoted "sepal, width" column */
    float mean[3], std[3];
    nn_data_norm_stats(&tr, mean, std);
    double s = 0;
    for (size_t i = 0; i < tr.n; i++)
        s += tr.xf[i * 3];
    assert_true(fabs(mean[0] - s / 12) < 1e-5);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    /* numeric labels in the first column; every fifth row is the test set */
    rc = nn_data_load("csv:" FIX "num.csv", &tr, &te, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_int_equal(tr.n, 8);
    assert_int_equal(te.n, 2);
    assert_null(tr.class_names);
    assert_int_equal(tr.classes, 4);
    assert_int_equal(te.y[0], 0); /* row 4: label 4 % 4 */
    assert_true(te.xf[1] == -5 + 2 * 4);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
    rc = nn_data_load("csv:" FIX "num.csv,label=b", &tr, &te, err, sizeof err);
    assert_int_equal(rc, 0); /* b = -5.. is no class number: names */
    assert_non_null(tr.class_names);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
}

static void test_csv_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *a, *b;
    } cases[] = {
        {"csv:" FIX "bad/ragged.csv", "ragged.csv:3: 2 columns, the header has 3", NULL},
        {"csv:" FIX "bad/text.csv", "text.csv:3: column 2: 'abc' is not a finite number", NULL},
        {"csv:" FIX "bad/missing.csv", "missing.csv:3: column 2: missing value", NULL},
        {"csv:" FIX "iris_train.csv,test=" FIX "bad/unseen_test.csv",
         "unseen_test.csv:2: label 'rose' does not occur", NULL},
        {"csv:" FIX "num.csv,label=nope", "num.csv:1: no column named 'nope'", NULL},
        {"csv:" FIX "num.csv,test=" FIX "iris_test.csv", "iris_test.csv: 3 feature columns",
         "has 2"},
        {"csv:" FIX "nothere.csv", "nothere.csv: cannot open", NULL},
        {"csv:", "nothing after", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024];
        nn_dataset tr, te;
        assert_int_equal(nn_data_load(cases[i].spec, &tr, &te, err, sizeof err), -1);
        ASSERT_HAS(err, cases[i].a);
        if (cases[i].b)
            ASSERT_HAS(err, cases[i].b);
        assert_null(tr.xf);
        assert_null(te.xf);
    }
}

static void test_csv_rows(void **state)
{
    (void)state;
    nn_dataset d;
    size_t *lines;
    char err[512];
    /* 3 features and a label column: the label is left out */
    assert_int_equal(nn_data_load_csv_rows(FIX "iris_test.csv", NULL, 3, &d, &lines, err,
                                           sizeof err), 0);
    assert_int_equal(d.n, 4);
    assert_int_equal(d.c, 3);
    assert_int_equal(lines[0], 2);
    assert_int_equal(lines[3], 5);
    free(lines);
    nn_dataset_free(&d);
    /* num.csv: label,a,b; as 3 features every column is one */
    assert_int_equal(nn_data_load_csv_rows(FIX "num.csv", NULL, 3, &d, &lines, err, sizeof err), 0);
    assert_true(d.xf[3 * 5] == 1.0f); /* row 5: label 5 % 4 */
    free(lines);
    nn_dataset_free(&d);
    assert_int_equal(nn_data_load_csv_rows(FIX "num.csv", "a", 2, &d, &lines, err, sizeof err), 0);
    assert_true(d.xf[0] == 0.0f && d.xf[1] == -5.0f); /* label, b */
    free(lines);
    nn_dataset_free(&d);
    assert_int_equal(nn_data_load_csv_rows(FIX "num.csv", NULL, 5, &d, &lines, err, sizeof err), -1);
    ASSERT_HAS(err, "num.csv:1: 3 columns, expected 5 features");
}

static void test_append(void **state)
{
    (void)state;
    nn_dataset a, b, all = {0}, t;
    char err[512];
    assert_int_equal(nn_data_load("csv:" FIX "iris_train.csv", &a, &t, err, sizeof err), 0);
    nn_dataset_free(&t);
    assert_int_equal(nn_dataset_append(&all, &a, err, sizeof err), 0);
    assert_int_equal(nn_dataset_append(&all, &a, err, sizeof err), 0);
    assert_int_equal(all.n, 2 * a.n);
    assert_true(all.xf[a.n * 3] == a.xf[0]);
    assert_int_equal(all.y[a.n + 1], a.y[1]);
    assert_string_equal(all.class_names[2], "virginica");
    assert_int_equal(nn_data_load("csv:" FIX "num.csv", &b, &t, err, sizeof err), 0);
    nn_dataset_free(&t);
    assert_int_equal(nn_dataset_append(&all, &b, err, sizeof err), -1);
    ASSERT_HAS(err, "samples are 2x1x1");
    nn_dataset_free(&a);
    nn_dataset_free(&b);
    nn_dataset_free(&all);
}

/* The float batch path against the uint8 one: a float set holding
 * pixel/255 must give the same batch (crop, flip, pad_to, normalisation,
 * the same random draws). */
static void test_batch_float_matches_uint8(void **state)
{
    (void)state;
    enum { N = 6, C = 2, H = 5, W = 7 };
    nn_dataset u = {.n = N, .c = C, .h = H, .w = W, .classes = 3};
    u.x = malloc(N * C * H * W);
    u.y = malloc(N);
    nn_dataset f = u;
    f.x = NULL;
    f.xf = malloc(N * C * H * W * sizeof(float));
    for (int i = 0; i < N * C * H * W; i++) {
        u.x[i] = (uint8_t)(i * 37 % 256);
        f.xf[i] = (float)u.x[i] / 255.0f;
    }
    for (int i = 0; i < N; i++)
        u.y[i] = (uint8_t)(i % 3);
    float mu[C], sd[C], mf[C], sf[C];
    nn_data_norm_stats(&u, mu, sd);
    nn_data_norm_stats(&f, mf, sf);
    for (int c = 0; c < C; c++)
        assert_true(fabsf(mu[c] - mf[c]) < 1e-6f && fabsf(sd[c] - sf[c]) < 1e-6f);
    nn_augment aug = {.crop_pad = 2, .hflip = 1, .pad_to = 8};
    uint32_t idx[4] = {5, 0, 3, 3};
    size_t out = 4 * C * 8 * 8;
    float *bu = malloc(out * sizeof(float)), *bf = malloc(out * sizeof(float));
    uint8_t yu[4], yf[4];
    nn_rng r1, r2;
    nn_rng_seed(&r1, 7);
    nn_rng_seed(&r2, 7);
    nn_data_batch(&u, idx, 4, mu, sd, &aug, &r1, bu, yu);
    nn_data_batch(&f, idx, 4, mu, sd, &aug, &r2, bf, yf);
    for (size_t i = 0; i < out; i++)
        if (fabsf(bu[i] - bf[i]) > 1e-5f * (1 + fabsf(bu[i])))
            fail_msg("element %zu: uint8 path %g, float path %g", i, bu[i], bf[i]);
    assert_memory_equal(yu, yf, 4);
    assert_true(nn_rng_next(&r1) == nn_rng_next(&r2)); /* the same draws */
    free(bu);
    free(bf);
    f.y = NULL; /* shared with u */
    nn_dataset_free(&u);
    nn_dataset_free(&f);
}

static void test_dirichlet(void **state)
{
    (void)state;
    enum { N = 5000, K = 4, C = 10 };
    uint8_t *y = malloc(N);
    for (int i = 0; i < N; i++)
        y[i] = (uint8_t)(i * 7 % C);
    uint32_t *idx[K], *idx2[K];
    size_t cnt[K], cnt2[K];
    char err[256];
    /* every sample exactly once; same seed, same split */
    for (int pass = 0; pass < 2; pass++) {
        double alpha = pass ? 1000.0 : 0.1;
        assert_int_equal(nn_partition_dirichlet(y, N, C, K, alpha, 5, idx, cnt, err, sizeof err), 0);
        assert_int_equal(nn_partition_dirichlet(y, N, C, K, alpha, 5, idx2, cnt2, err, sizeof err), 0);
        uint8_t *seen = calloc(N, 1);
        size_t tot = 0, maxshare = 0;
        for (int k = 0; k < K; k++) {
            assert_int_equal(cnt[k], cnt2[k]);
            assert_memory_equal(idx[k], idx2[k], cnt[k] * sizeof(uint32_t));
            size_t c0 = 0; /* class 0 samples at node k */
            for (size_t j = 0; j < cnt[k]; j++) {
                assert_int_equal(seen[idx[k][j]], 0);
                seen[idx[k][j]] = 1;
                c0 += y[idx[k][j]] == 0;
            }
            maxshare = c0 > maxshare ? c0 : maxshare;
            tot += cnt[k];
        }
        assert_int_equal(tot, N);
        /* alpha 1000: near-even (each node ~125 of class 0's 500); alpha
         * 0.1: one node holds most of a class */
        if (pass)
            assert_true(maxshare < 160);
        else
            assert_true(maxshare > 300);
        free(seen);
        nn_partition_free(idx, K);
        nn_partition_free(idx2, K);
    }
    assert_int_equal(nn_partition_dirichlet(y, N, C, K, 0, 5, idx, cnt, err, sizeof err), -1);
    ASSERT_HAS(err, "alpha 0 out of range");
    free(y);
}

static int s_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/lpg_test_nn_data_user_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_images_mixed),   cmocka_unit_test(test_image_resize),
        cmocka_unit_test(test_images_malformed), cmocka_unit_test(test_npz_good),
        cmocka_unit_test(test_npz_malformed),  cmocka_unit_test(test_npy_header),
        cmocka_unit_test(test_csv_good),       cmocka_unit_test(test_csv_malformed),
        cmocka_unit_test(test_csv_rows),
        cmocka_unit_test(test_append),         cmocka_unit_test(test_dirichlet),
        cmocka_unit_test(test_batch_float_matches_uint8),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
