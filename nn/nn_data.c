/* nn_data — see nn_data.h. */
#include "nn/nn_data.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* Sanity limits for sizes read from files (outside input). */
#define S_MAX_SAMPLES (1u << 24)
#define S_MAX_SIDE    4096u
#define S_MAX_LABEL   10

void nn_dataset_free(nn_dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->xf);
    free(d->y);
    for (int k = 0; d->class_names && k < d->classes; k++)
        free(d->class_names[k]);
    free(d->class_names);
    memset(d, 0, sizeof *d);
}

/* ---- IDX files --------------------------------------------------------- */

/* zlib's messages repeat the path ("path: msg"); keep the msg. */
static const char *s_gzmsg(const char *m, const char *path)
{
    size_t n = strlen(path);
    if (m && strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ')
        return m + n + 2;
    return m ? m : "zlib error";
}

/* Reads exactly len bytes; returns bytes read (< len on EOF) or -1 on a zlib
 * error (message in err). */
static long long s_gzread_all(gzFile f, const char *path, uint8_t *buf, size_t len, char *err,
                              size_t errlen)
{
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > (1u << 30))
            want = 1u << 30;
        int r = gzread(f, buf + got, (unsigned)want);
        if (r < 0) {
            int code = 0;
            const char *m = gzerror(f, &code);
            nn_errf(err, errlen, "%s: corrupt gzip data: %s", path,
                    code == Z_ERRNO ? strerror(errno) : s_gzmsg(m, path));
            return -1;
        }
        if (r == 0) {
            /* gzread reports a gzip stream cut short (Z_BUF_ERROR) as end of
             * file, not as an error: ask explicitly. */
            int code = Z_OK;
            const char *m = gzerror(f, &code);
            if (code != Z_OK) {
                nn_errf(err, errlen, "%s: corrupt gzip data: %s (gzip stream cut short?)", path,
                        s_gzmsg(m, path));
                return -1;
            }
            break;
        }
        got += (size_t)r;
    }
    return (long long)got;
}

static uint32_t s_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Opens an IDX file, checks the magic and reads the dims.  Returns NULL with
 * a message on failure. */
static gzFile s_idx_open(const char *path, uint32_t magic, int ndim, uint32_t *dims, char *err,
                         size_t errlen)
{
    int fd = nn_open_regular(path, NULL, err, errlen);
    if (fd < 0)
        return NULL;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        nn_errf(err, errlen, "%s: cannot open: %s", path, errno ? strerror(errno) : "zlib");
        return NULL;
    }
    uint8_t hdr[4 + 4 * 3];
    size_t hlen = 4 + 4 * (size_t)ndim;
    long long r = s_gzread_all(f, path, hdr, hlen, err, errlen);
    if (r < 0)
        goto fail;
    if ((size_t)r < hlen) {
        nn_errf(err, errlen, "%s: truncated: expected a %zu-byte IDX header, got %lld", path,
                hlen, r);
        goto fail;
    }
    uint32_t m = s_be32(hdr);
    if (m != magic) {
        nn_errf(err, errlen, "%s: wrong magic 0x%08x, expected 0x%08x (IDX %s)", path,
                (unsigned)m, (unsigned)magic, ndim == 3 ? "ubyte images" : "ubyte labels");
        goto fail;
    }
    for (int i = 0; i < ndim; i++)
        dims[i] = s_be32(hdr + 4 + 4 * i);
    return f;
fail:
    gzclose(f);
    return NULL;
}

/* After the payload: the file must end here.  Reading one more byte also
 * makes zlib check the gzip trailer (CRC and length). */
static int s_idx_expect_eof(gzFile f, const char *path, char *err, size_t errlen)
{
    uint8_t extra[1];
    long long r = s_gzread_all(f, path, extra, 1, err, errlen);
    if (r < 0)
        return -1;
    if (r > 0)
        return nn_errf(err, errlen, "%s: trailing data after the expected payload", path);
    return 0;
}

int nn_data_load_idx(const char *images_path, const char *labels_path, nn_dataset *d,
                     char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    uint32_t idims[3], ldims[1];
    gzFile fi = NULL, fl = NULL;

    fi = s_idx_open(images_path, 0x00000803u, 3, idims, err, errlen);
    if (!fi)
        goto fail;
    if (idims[0] == 0 || idims[0] > S_MAX_SAMPLES || idims[1] == 0 ||
        idims[1] > S_MAX_SIDE || idims[2] == 0 || idims[2] > S_MAX_SIDE) {
        nn_errf(err, errlen,
                "%s: bad dimensions %u x %u x %u (expected 1..%u images of 1..%u pixels a side)",
                images_path, (unsigned)idims[0], (unsigned)idims[1], (unsigned)idims[2],
                (unsigned)S_MAX_SAMPLES, (unsigned)S_MAX_SIDE);
        goto fail;
    }
    fl = s_idx_open(labels_path, 0x00000801u, 1, ldims, err, errlen);
    if (!fl)
        goto fail;
    if (ldims[0] != idims[0]) {
        nn_errf(err, errlen, "%s: count mismatch: %u labels but %s holds %u images",
                labels_path, (unsigned)ldims[0], images_path, (unsigned)idims[0]);
        goto fail;
    }

    size_t n = idims[0];
    size_t npix = n * idims[1] * idims[2];
    d->x = nn_xmalloc(npix);
    d->y = nn_xmalloc(n);
    long long r = s_gzread_all(fi, images_path, d->x, npix, err, errlen);
    if (r < 0)
        goto fail;
    if ((size_t)r < npix) {
        nn_errf(err, errlen, "%s: truncated: expected %zu bytes of pixels, got %lld",
                images_path, npix, r);
        goto fail;
    }
    if (s_idx_expect_eof(fi, images_path, err, errlen))
        goto fail;
    r = s_gzread_all(fl, labels_path, d->y, n, err, errlen);
    if (r < 0)
        goto fail;
    if ((size_t)r < n) {
        nn_errf(err, errlen, "%s: truncated: expected %zu bytes of labels, got %lld",
                labels_path, n, r);
        goto fail;
    }
    if (s_idx_expect_eof(fl, labels_path, err, errlen))
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (d->y[i] >= S_MAX_LABEL) {
            nn_errf(err, errlen, "%s: label %u of sample %zu out of range (expected 0..%d)",
                    labels_path, (unsigned)d->y[i], i, S_MAX_LABEL - 1);
            goto fail;
        }
    gzclose(fi);
    gzclose(fl);
    d->n = n;
    d->c = 1;
    d->h = (int)idims[1];
    d->w = (int)idims[2];
    d->classes = S_MAX_LABEL;
    snprintf(d->name, sizeof d->name, "idx");
    return 0;
fail:
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    nn_dataset_free(d);
    return -1;
}

/* DIR/base.gz if it exists, else DIR/base (the error then names that). */
static void s_idx_path(char *out, size_t outlen, const char *dir, const char *base)
{
    struct stat st;
    snprintf(out, outlen, "%s/%s.gz", dir, base);
    if (stat(out, &st) == 0)
        return;
    snprintf(out, outlen, "%s/%s", dir, base);
}

/* ---- CIFAR-10 binary batches ------------------------------------------ */

#define S_CIFAR_REC (1 + 3 * 32 * 32)

int nn_data_load_cifar10_files(const char *const *paths, int npaths, nn_dataset *d, char *err,
                               size_t errlen)
{
    memset(d, 0, sizeof *d);
    size_t *recs = nn_xcalloc((size_t)npaths, sizeof *recs);
    size_t total = 0;
    FILE *f = NULL;
    uint8_t *rec = nn_xmalloc(S_CIFAR_REC);

    for (int i = 0; i < npaths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            nn_errf(err, errlen, "%s: cannot open: %s", paths[i], strerror(errno));
            goto fail;
        }
        if (!S_ISREG(st.st_mode)) {
            nn_errf(err, errlen, "%s: not a regular file", paths[i]);
            goto fail;
        }
        size_t sz = (size_t)st.st_size;
        if (sz == 0 || sz % S_CIFAR_REC != 0) {
            nn_errf(err, errlen,
                    "%s: truncated or not a CIFAR-10 batch: size %zu is not a positive multiple "
                    "of the %d-byte record",
                    paths[i], sz, S_CIFAR_REC);
            goto fail;
        }
        recs[i] = sz / S_CIFAR_REC;
        total += recs[i];
        if (total > S_MAX_SAMPLES) {
            nn_errf(err, errlen, "%s: too many records (%zu in total)", paths[i], total);
            goto fail;
        }
    }
    if (total == 0) {
        nn_errf(err, errlen, "no CIFAR-10 batch files given");
        goto fail;
    }
    d->x = nn_xmalloc(total * (S_CIFAR_REC - 1));
    d->y = nn_xmalloc(total);
    size_t k = 0;
    for (int i = 0; i < npaths; i++) {
        if (!(f = nn_fopen_regular(paths[i], NULL, err, errlen)))
            goto fail;
        for (size_t j = 0; j < recs[i]; j++, k++) {
            if (fread(rec, 1, S_CIFAR_REC, f) != S_CIFAR_REC) {
                nn_errf(err, errlen, "%s: truncated: short read in record %zu", paths[i], j);
                goto fail;
            }
            if (rec[0] >= S_MAX_LABEL) {
                nn_errf(err, errlen, "%s: label %u of record %zu out of range (expected 0..%d)",
                        paths[i], (unsigned)rec[0], j, S_MAX_LABEL - 1);
                goto fail;
            }
            d->y[k] = rec[0];
            memcpy(d->x + k * (S_CIFAR_REC - 1), rec + 1, S_CIFAR_REC - 1);
        }
        fclose(f);
        f = NULL;
    }
    free(recs);
    free(rec);
    d->n = total;
    d->c = 3;
    d->h = d->w = 32;
    d->classes = S_MAX_LABEL;
    snprintf(d->name, sizeof d->name, "cifar10");
    return 0;
fail:
    if (f)
        fclose(f);
    free(recs);
    free(rec);
    nn_dataset_free(d);
    return -1;
}

static int s_load_cifar10(const char *dir, nn_dataset *train, nn_dataset *test, char *err,
                          size_t errlen)
{
    char base[4096];
    char paths[6][4200];
    struct stat st;
    snprintf(base, sizeof base, "%s", dir);
    snprintf(paths[0], sizeof paths[0], "%s/data_batch_1.bin", dir);
    if (stat(paths[0], &st) != 0) {
        /* The official tarball unpacks into cifar-10-batches-bin/. */
        snprintf(paths[0], sizeof paths[0], "%s/cifar-10-batches-bin/data_batch_1.bin", dir);
        if (stat(paths[0], &st) == 0)
            snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    }
    const char *tp[5];
    for (int i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", base, i + 1);
        tp[i] = paths[i];
    }
    snprintf(paths[5], sizeof paths[5], "%s/test_batch.bin", base);
    const char *vp[1] = {paths[5]};
    if (nn_data_load_cifar10_files(tp, 5, train, err, errlen))
        return -1;
    if (nn_data_load_cifar10_files(vp, 1, test, err, errlen)) {
        nn_dataset_free(train);
        return -1;
    }
    return 0;
}

int nn_data_load(const char *spec, nn_dataset *train, nn_dataset *test, char *err, size_t errlen)
{
    return nn_data_load_opts(spec, NULL, train, test, err, errlen);
}

/* The readers of the user's own formats: 1 when spec named one (its result
 * in *rc), 0 for the built-in sets. */
static int s_load_user(const char *spec, nn_data_opts *opts, nn_dataset *train,
                       nn_dataset *test, int *rc, char *err, size_t errlen)
{
    static const char *const kinds[] = {"images:", "npz:", "csv:"};
    nn_data_opts none = {0};
    for (int k = 0; k < 3; k++) {
        size_t kl = strlen(kinds[k]);
        if (strncmp(spec, kinds[k], kl) != 0)
            continue;
        const char *arg = spec + kl;
        if (!*arg)
            *rc = nn_errf(err, errlen, "data set '%s': nothing after ':'", spec);
        else if (k == 0)
            *rc = nn_data_load_images(arg, opts ? opts : &none, train, test, err, errlen);
        else if (k == 1)
            *rc = nn_data_load_npz(arg, opts ? opts : &none, train, test, err, errlen);
        else
            *rc = nn_data_load_csv(arg, train, test, err, errlen);
        return 1;
    }
    return 0;
}

int nn_data_load_opts(const char *spec, nn_data_opts *opts, nn_dataset *train,
                      nn_dataset *test, char *err, size_t errlen)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!spec || !*spec)
        spec = "fashion-mnist";
    int rc;
    if (s_load_user(spec, opts, train, test, &rc, err, errlen))
        return rc;
    const char *colon = strchr(spec, ':');
    size_t klen = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *dir = colon ? colon + 1 : NULL;
    char kind[32];
    if (klen >= sizeof kind)
        return nn_errf(err, errlen, "data set '%s': unknown name (expected fashion-mnist, mnist "
                       "or cifar10, optionally followed by :DIR, or images:DIR, npz:FILE, "
                       "csv:FILE)", spec);
    memcpy(kind, spec, klen);
    kind[klen] = 0;
    if (dir && !*dir)
        return nn_errf(err, errlen, "data set '%s': empty directory after ':'", spec);
    if (dir && strlen(dir) > 4000)
        return nn_errf(err, errlen, "data set '%s': directory name too long", spec);

    if (strcmp(kind, "cifar10") == 0) {
        if (!dir)
            return nn_errf(err, errlen, "data set 'cifar10' needs a directory: cifar10:DIR");
        return s_load_cifar10(dir, train, test, err, errlen);
    }
    if (strcmp(kind, "fashion-mnist") != 0 && strcmp(kind, "mnist") != 0)
        return nn_errf(err, errlen, "data set '%s': unknown name '%s' (expected fashion-mnist, "
                       "mnist, cifar10, images, npz or csv)", spec, kind);
    if (!dir) {
        if (strcmp(kind, "mnist") == 0)
            return nn_errf(err, errlen, "data set 'mnist' needs a directory: mnist:DIR");
        dir = NN_DATA_FASHION_DIR;
    }
    char ip[4100], lp[4100];
    s_idx_path(ip, sizeof ip, dir, "train-images-idx3-ubyte");
    s_idx_path(lp, sizeof lp, dir, "train-labels-idx1-ubyte");
    if (nn_data_load_idx(ip, lp, train, err, errlen))
        return -1;
    s_idx_path(ip, sizeof ip, dir, "t10k-images-idx3-ubyte");
    s_idx_path(lp, sizeof lp, dir, "t10k-labels-idx1-ubyte");
    if (nn_data_load_idx(ip, lp, test, err, errlen)) {
        nn_dataset_free(train);
        return -1;
    }
    if (test->h != train->h || test->w != train->w) {
        nn_dataset_free(train);
        nn_dataset_free(test);
        return nn_errf(err, errlen, "%s: images are %dx%d but the training images are %dx%d",
                       ip, test->h, test->w, train->h, train->w);
    }
    snprintf(train->name, sizeof train->name, "%s", kind);
    snprintf(test->name, sizeof test->name, "%s", kind);
    return 0;
}

/* ---- normalization and batches ----------------------------------------- */

/* Float sets: two passes in double over the raw values. */
static void s_norm_stats_f32(const nn_dataset *d, float *mean, float *std)
{
    size_t plane = (size_t)d->h * (size_t)d->w;
    double cnt = (double)d->n * (double)plane;
    for (int c = 0; c < d->c; c++) {
        double s = 0.0, var = 0.0;
        for (size_t i = 0; i < d->n; i++) {
            const float *p = d->xf + (i * (size_t)d->c + (size_t)c) * plane;
            for (size_t j = 0; j < plane; j++)
                s += p[j];
        }
        double m = cnt > 0 ? s / cnt : 0.0;
        for (size_t i = 0; i < d->n; i++) {
            const float *p = d->xf + (i * (size_t)d->c + (size_t)c) * plane;
            for (size_t j = 0; j < plane; j++)
                var += (p[j] - m) * (p[j] - m);
        }
        var = cnt > 0 ? var / cnt : 0.0;
        mean[c] = (float)m;
        std[c] = var > 0 && (float)sqrt(var) > 0 ? (float)sqrt(var) : 1.0f;
    }
}

void nn_data_norm_stats(const nn_dataset *d, float *mean, float *std)
{
    if (d->xf) {
        s_norm_stats_f32(d, mean, std);
        return;
    }
    size_t plane = (size_t)d->h * (size_t)d->w;
    for (int c = 0; c < d->c; c++) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < d->n; i++) {
            const uint8_t *p = d->x + (i * (size_t)d->c + (size_t)c) * plane;
            for (size_t j = 0; j < plane; j++)
                hist[p[j]]++;
        }
        double cnt = (double)d->n * (double)plane, s = 0.0;
        for (int v = 0; v < 256; v++)
            s += (double)hist[v] * (v / 255.0);
        double m = cnt > 0 ? s / cnt : 0.0, var = 0.0;
        for (int v = 0; v < 256; v++) {
            double dv = v / 255.0 - m;
            var += (double)hist[v] * dv * dv;
        }
        var = cnt > 0 ? var / cnt : 0.0;
        mean[c] = (float)m;
        std[c] = var > 0 ? (float)sqrt(var) : 1.0f;
    }
}

int nn_augment_check(const nn_dataset *d, const nn_augment *aug, char *err, size_t errlen)
{
    if (!aug)
        return 0;
    if (aug->crop_pad < 0 || aug->crop_pad > 64)
        return nn_errf(err, errlen, "augmentation: crop padding %d not in 0..64", aug->crop_pad);
    int side = d->h > d->w ? d->h : d->w;
    if (aug->pad_to != 0 && (aug->pad_to < side || aug->pad_to > 4096))
        return nn_errf(err, errlen, "augmentation: pad_to %d not 0 or in %d..4096 (images are "
                       "%dx%d)", aug->pad_to, side, d->h, d->w);
    return 0;
}

void nn_data_out_shape(const nn_dataset *d, const nn_augment *aug, int *oh, int *ow)
{
    if (aug && aug->pad_to > 0) {
        assert(aug->pad_to >= d->h && aug->pad_to >= d->w);
        *oh = *ow = aug->pad_to;
    } else {
        *oh = d->h;
        *ow = d->w;
    }
}

int nn_data_out_hw(const nn_dataset *d, const nn_augment *aug)
{
    int oh, ow;
    nn_data_out_shape(d, aug, &oh, &ow);
    return oh;
}

/* nn_data_batch for a float set: the same geometry and draws, values
 * (v - mean) / std with v = 0 outside the image. */
static void s_batch_f32(const nn_dataset *d, const uint32_t *idx, int N, const float *mean,
                        const float *std, const nn_augment *aug, nn_rng *rng, float *x_out,
                        uint8_t *y_out)
{
    int OH, OW;
    nn_data_out_shape(d, aug, &OH, &OW);
    int C = d->c, H = d->h, W = d->w;
    int P = aug ? aug->crop_pad : 0;
    int flip = aug ? aug->hflip : 0;
    assert(P >= 0 && P <= 64);
    assert(rng || (!P && !flip));
    int top = (OH - H) / 2, left = (OW - W) / 2;
    size_t plane = (size_t)H * (size_t)W, oplane = (size_t)OH * (size_t)OW;
    for (int b = 0; b < N; b++) {
        assert(idx[b] < d->n);
        const float *src = d->xf + (size_t)idx[b] * (size_t)C * plane;
        int dy = 0, dx = 0, fl = 0;
        if (P) {
            dy = (int)nn_rng_below(rng, (uint32_t)(2 * P + 1));
            dx = (int)nn_rng_below(rng, (uint32_t)(2 * P + 1));
        }
        if (flip)
            fl = (int)nn_rng_below(rng, 2);
        for (int c = 0; c < C; c++) {
            const float *sp = src + (size_t)c * plane;
            float *op = x_out + ((size_t)b * (size_t)C + (size_t)c) * oplane;
            float m = mean[c], inv = 1.0f / std[c], zero = (0.0f - m) * inv;
            for (int oy = 0; oy < OH; oy++) {
                int sy = oy + dy - P - top;
                float *orow = op + (size_t)oy * (size_t)OW;
                for (int ox = 0; ox < OW; ox++) {
                    int sx = (fl ? OW - 1 - ox : ox) + dx - P - left;
                    orow[ox] = (sy >= 0 && sy < H && sx >= 0 && sx < W)
                                   ? (sp[(size_t)sy * (size_t)W + (size_t)sx] - m) * inv
                                   : zero;
                }
            }
        }
        if (y_out)
            y_out[b] = d->y[idx[b]];
    }
}

void nn_data_batch(const nn_dataset *d, const uint32_t *idx, int N, const float *mean,
                   const float *std, const nn_augment *aug, nn_rng *rng, float *x_out,
                   uint8_t *y_out)
{
    if (d->xf) {
        s_batch_f32(d, idx, N, mean, std, aug, rng, x_out, y_out);
        return;
    }
    int OH, OW;
    nn_data_out_shape(d, aug, &OH, &OW);
    int C = d->c, H = d->h, W = d->w;
    int P = aug ? aug->crop_pad : 0;
    int flip = aug ? aug->hflip : 0;
    assert(P >= 0 && P <= 64);
    assert(rng || (!P && !flip));
    int top = (OH - H) / 2, left = (OW - W) / 2;
    size_t plane = (size_t)H * (size_t)W, oplane = (size_t)OH * (size_t)OW;
    /* lut[c][v] = (v/255 - mean)/std: every output value, padding included. */
    float *lut = nn_xmalloc((size_t)C * 256 * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 256; v++)
            lut[c * 256 + v] = ((float)v / 255.0f - mean[c]) / std[c];

    for (int b = 0; b < N; b++) {
        assert(idx[b] < d->n);
        const uint8_t *src = d->x + (size_t)idx[b] * (size_t)C * plane;
        int dy = 0, dx = 0, fl = 0;
        if (P) {
            dy = (int)nn_rng_below(rng, (uint32_t)(2 * P + 1));
            dx = (int)nn_rng_below(rng, (uint32_t)(2 * P + 1));
        }
        if (flip)
            fl = (int)nn_rng_below(rng, 2);
        /* Output (oy, ox) shows canvas pixel (oy + dy - P, ox' + dx - P) with
         * ox' = flip ? OW-1-ox : ox; canvas pixel (cy, cx) is image pixel
         * (cy - top, cx - left) or black outside the image. */
        for (int c = 0; c < C; c++) {
            const float *l = lut + c * 256;
            const uint8_t *sp = src + (size_t)c * plane;
            float *op = x_out + ((size_t)b * (size_t)C + (size_t)c) * oplane;
            for (int oy = 0; oy < OH; oy++) {
                int sy = oy + dy - P - top;
                float *orow = op + (size_t)oy * (size_t)OW;
                if (sy < 0 || sy >= H) {
                    for (int ox = 0; ox < OW; ox++)
                        orow[ox] = l[0];
                    continue;
                }
                const uint8_t *srow = sp + (size_t)sy * (size_t)W;
                for (int ox = 0; ox < OW; ox++) {
                    int sx = (fl ? OW - 1 - ox : ox) + dx - P - left;
                    orow[ox] = (sx >= 0 && sx < W) ? l[srow[sx]] : l[0];
                }
            }
        }
        if (y_out)
            y_out[b] = d->y[idx[b]];
    }
    free(lut);
}

/* ---- non-IID partition ------------------------------------------------- */

int nn_partition_skew(const uint8_t *labels, size_t n, int classes, int nodes, double skew,
                      uint64_t seed, uint32_t **idx, size_t *count, char *err, size_t errlen)
{
    for (int k = 0; k < nodes; k++) {
        idx[k] = NULL;
        count[k] = 0;
    }
    if (!(skew >= 0.0 && skew <= 1.0))
        return nn_errf(err, errlen, "skew %g out of range (expected 0..1)", skew);
    if (nodes < 1)
        return nn_errf(err, errlen, "partition over %d nodes (expected at least 1)", nodes);
    if (classes < 1 || classes > 256)
        return nn_errf(err, errlen, "%d classes (expected 1..256)", classes);
    if (n > UINT32_MAX)
        return nn_errf(err, errlen, "%zu samples: too many for 32-bit indices", n);
    size_t *ncls = nn_xcalloc((size_t)classes + 1, sizeof *ncls);
    for (size_t i = 0; i < n; i++) {
        if (labels[i] >= classes) {
            free(ncls);
            return nn_errf(err, errlen, "label %u of sample %zu out of range (expected 0..%d)",
                           (unsigned)labels[i], i, classes - 1);
        }
        ncls[labels[i] + 1]++;
    }
    /* Stable counting sort by label: start[c] = first slot of class c. */
    size_t *start = nn_xcalloc((size_t)classes + 1, sizeof *start);
    for (int c = 0; c < classes; c++)
        start[c + 1] = start[c] + ncls[c + 1];
    uint32_t *sorted = nn_xmalloc((n ? n : 1) * sizeof *sorted);
    size_t *fill = nn_xmalloc((size_t)classes * sizeof *fill);
    for (int c = 0; c < classes; c++)
        fill[c] = start[c];
    for (size_t i = 0; i < n; i++)
        sorted[fill[labels[i]]++] = (uint32_t)i;

    /* Pools: first floor(skew * n_c) of each class sorted, the rest random. */
    uint32_t *spool = nn_xmalloc((n ? n : 1) * sizeof *spool);
    uint32_t *rpool = nn_xmalloc((n ? n : 1) * sizeof *rpool);
    size_t ns = 0, nr = 0;
    for (int c = 0; c < classes; c++) {
        size_t nc = ncls[c + 1];
        size_t take = (size_t)floor(skew * (double)nc);
        if (take > nc)
            take = nc;
        for (size_t j = 0; j < nc; j++) {
            uint32_t v = sorted[start[c] + j];
            if (j < take)
                spool[ns++] = v;
            else
                rpool[nr++] = v;
        }
    }
    nn_rng rng;
    nn_rng_seed(&rng, seed);
    nn_rng_shuffle_u32(&rng, rpool, nr);

    /* The reference: part_len = int(frac*data_len*skew), frac = 1.0/size. */
    double part = (1.0 / (double)nodes) * (double)n;
    size_t len_s = (size_t)floor(part * skew);
    size_t len_r = (size_t)floor(part * (1.0 - skew));
    uint32_t **out = idx;
    size_t ps = 0, pr = 0;
    for (int k = 0; k < nodes; k++) {
        size_t a = ns - ps < len_s ? ns - ps : len_s;
        size_t r = nr - pr < len_r ? nr - pr : len_r;
        out[k] = nn_xmalloc((a + r ? a + r : 1) * sizeof **out);
        memcpy(out[k], spool + ps, a * sizeof **out);
        memcpy(out[k] + a, rpool + pr, r * sizeof **out);
        ps += a;
        pr += r;
        count[k] = a + r;
    }
    free(ncls);
    free(start);
    free(sorted);
    free(fill);
    free(spool);
    free(rpool);
    return 0;
}

void nn_partition_free(uint32_t **idx, int nodes)
{
    if (!idx)
        return;
    for (int k = 0; k < nodes; k++) {
        free(idx[k]);
        idx[k] = NULL;
    }
}

/* ---- sampler ----------------------------------------------------------- */

uint64_t nn_sampler_epoch_seed(uint64_t seed, uint64_t epoch)
{
    return nn_mix64(nn_seed_derive(seed, epoch));
}

void nn_sampler_init(nn_sampler *s, const uint32_t *idx, size_t n, uint64_t seed)
{
    assert(n > 0);
    memset(s, 0, sizeof *s);
    s->n = n;
    s->seed = seed;
    s->base = nn_xmalloc(n * sizeof *s->base);
    s->perm = nn_xmalloc(n * sizeof *s->perm);
    memcpy(s->base, idx, n * sizeof *s->base);
}

static void s_sampler_epoch(nn_sampler *s, uint64_t epoch)
{
    if (s->have_perm && s->perm_epoch == epoch)
        return;
    nn_rng rng;
    nn_rng_seed(&rng, nn_sampler_epoch_seed(s->seed, epoch));
    memcpy(s->perm, s->base, s->n * sizeof *s->perm);
    nn_rng_shuffle_u32(&rng, s->perm, s->n);
    s->perm_epoch = epoch;
    s->have_perm = 1;
}

const uint32_t *nn_sampler_next(nn_sampler *s, int N, uint64_t *epoch_out)
{
    assert(N > 0);
    if ((size_t)N > s->out_cap) {
        s->out_cap = (size_t)N;
        s->out = nn_xrealloc(s->out, s->out_cap * sizeof *s->out);
    }
    if (epoch_out)
        *epoch_out = s->pos / s->n;
    for (int i = 0; i < N; i++, s->pos++) {
        s_sampler_epoch(s, s->pos / s->n);
        s->out[i] = s->perm[s->pos % s->n];
    }
    return s->out;
}

void nn_sampler_seek(nn_sampler *s, uint64_t position)
{
    s->pos = position;
}

uint64_t nn_sampler_position(const nn_sampler *s)
{
    return s->pos;
}

void nn_sampler_free(nn_sampler *s)
{
    if (!s)
        return;
    free(s->base);
    free(s->perm);
    free(s->out);
    memset(s, 0, sizeof *s);
}
