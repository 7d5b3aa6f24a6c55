/* nn_data_npz — NumPy .npz archives in Keras's convention.
 *
 * Owns:    a minimal zip reader (end-of-central-directory record, central
 *          directory entries, local headers; stored and deflate members
 *          through zlib, CRC-32 checked; no encryption, no multi-disk, no
 *          zip64 end record), the .npy header parser (format versions 1-3,
 *          a Python dict literal with exactly 'descr', 'fortran_order' and
 *          'shape'), and turning x_train y_train x_test y_test into sets.
 * Exposes: nn_zip_member, nn_npy_parse, nn_data_load_npz (nn_data.h).
 * Callers: nn_data.c (the "npz:FILE" spec), tests, tests/fuzz/fuzz_npy.c.
 *
 * Accepted arrays: x uint8 or float32/float64 (float64 narrowed), shaped
 * N,H,W (one channel), N,H,W,C (channels-last, as Keras writes them;
 * transposed to NCHW) or N,C,H,W with opts->nchw, or N,F (a table: c = F,
 * h = w = 1); y integer (any width, little-endian) of shape N or N,1 with
 * values 0..255.  Object arrays (pickles), big-endian data, Fortran order
 * and anything else are refused with the array's name.
 */
#include "nn/nn_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define S_MAX_FILE   ((size_t)1 << 33)
#define S_MAX_MEMBER ((size_t)1 << 32)

static uint32_t s_le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t s_le32(const uint8_t *p) { return s_le16(p) | s_le16(p + 2) << 16; }
static uint64_t s_le64(const uint8_t *p) { return s_le32(p) | (uint64_t)s_le32(p + 4) << 32; }

/* ---- zip --------------------------------------------------------------- */

typedef struct {
    uint32_t method, flags, crc;
    uint64_t csize, usize, local;
} s_zentry;

/* Locates the central directory: 0 and its offset/size/count, or -1. */
static int s_zip_eocd(const uint8_t *b, size_t len, const char *path, size_t *cd,
                      size_t *cdlen, size_t *count, char *err, size_t errlen)
{
    if (len < 22)
        return nn_errf(err, errlen, "%s: not a zip archive (%zu bytes)", path, len);
    size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
    for (size_t p = len - 22 + 1; p-- > lo;) {
        if (s_le32(b + p) != 0x06054b50u || p + 22 + s_le16(b + p + 20) != len)
            continue;
        if (s_le16(b + p + 4) != 0 || s_le16(b + p + 6) != 0 ||
            s_le16(b + p + 8) != s_le16(b + p + 10))
            return nn_errf(err, errlen, "%s: multi-disk zip archives are not supported", path);
        *count = s_le16(b + p + 10);
        *cdlen = s_le32(b + p + 12);
        *cd = s_le32(b + p + 16);
        if (*cd == 0xffffffffu || *count == 0xffff)
            return nn_errf(err, errlen, "%s: zip64 archives are not supported", path);
        if (*cd > p || *cdlen > p - *cd)
            return nn_errf(err, errlen, "%s: zip central directory (offset %zu, %zu bytes) "
                           "outside the file", path, *cd, *cdlen);
        return 0;
    }
    return nn_errf(err, errlen, "%s: not a zip archive (no end-of-central-directory record)",
                   path);
}

/* Zip64 extra field of a central entry: the 64-bit sizes/offset that are
 * 0xffffffff in the fixed part, in that order. */
static int s_zip64_extra(const uint8_t *x, size_t xl, s_zentry *e)
{
    for (size_t p = 0; p + 4 <= xl;) {
        uint32_t id = s_le16(x + p), sz = s_le16(x + p + 2);
        if (p + 4 + sz > xl)
            return -1;
        if (id == 1) {
            size_t q = p + 4;
            uint64_t *f[3] = {&e->usize, &e->csize, &e->local};
            for (int k = 0; k < 3; k++) {
                if (*f[k] != 0xffffffffu)
                    continue;
                if (q + 8 > p + 4 + sz)
                    return -1;
                *f[k] = s_le64(x + q);
                q += 8;
            }
            return 0;
        }
        p += 4 + sz;
    }
    return e->usize == 0xffffffffu || e->csize == 0xffffffffu || e->local == 0xffffffffu ? -1 : 0;
}

/* Finds `name` in the central directory: 1 with *e, 0 absent, -1 bad. */
static int s_zip_find(const uint8_t *b, size_t len, const char *path, const char *name,
                      s_zentry *e, char *err, size_t errlen)
{
    size_t cd = 0, cdlen = 0, count = 0, nl = strlen(name);
    if (s_zip_eocd(b, len, path, &cd, &cdlen, &count, err, errlen) != 0)
        return -1;
    size_t p = cd, end = cd + cdlen;
    for (size_t i = 0; i < count; i++) {
        if (p + 46 > end || s_le32(b + p) != 0x02014b50u)
            return nn_errf(err, errlen, "%s: zip central directory entry %zu is damaged",
                           path, i);
        size_t n = s_le16(b + p + 28), xl = s_le16(b + p + 30), cl = s_le16(b + p + 32);
        if (p + 46 + n + xl + cl > end)
            return nn_errf(err, errlen, "%s: zip central directory entry %zu overruns the "
                           "directory", path, i);
        if (n == nl && memcmp(b + p + 46, name, nl) == 0) {
            *e = (s_zentry){.flags = s_le16(b + p + 8), .method = s_le16(b + p + 10),
                            .crc = s_le32(b + p + 16), .csize = s_le32(b + p + 20),
                            .usize = s_le32(b + p + 24), .local = s_le32(b + p + 42)};
            if (s_zip64_extra(b + p + 46 + n, xl, e) != 0)
                return nn_errf(err, errlen, "%s: member %s: bad zip64 extra field", path, name);
            return 1;
        }
        p += 46 + n + xl + cl;
    }
    return 0;
}

static int s_inflate(const uint8_t *src, size_t n, uint8_t *dst, size_t un)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -15) != Z_OK)
        return -1;
    int rc;
    size_t in = 0, out = 0;
    for (;;) { /* chunks: avail_* are 32-bit */
        if (z.avail_in == 0 && in < n) {
            z.next_in = (Bytef *)(uintptr_t)(src + in);
            z.avail_in = (uInt)(n - in > (1u << 30) ? (1u << 30) : n - in);
            in += z.avail_in;
        }
        if (z.avail_out == 0 && out < un) {
            z.next_out = dst + out;
            z.avail_out = (uInt)(un - out > (1u << 30) ? (1u << 30) : un - out);
            out += z.avail_out;
        }
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK) /* the end, an error, or no progress possible */
            break;
    }
    int ok = rc == Z_STREAM_END && z.total_out == un;
    inflateEnd(&z);
    return ok ? 0 : -1;
}

int nn_zip_member(const uint8_t *buf, size_t len, const char *path, const char *name,
                  uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    s_zentry e;
    int f = s_zip_find(buf, len, path, name, &e, err, errlen);
    if (f <= 0)
        return f;
    if (e.flags & 1)
        return nn_errf(err, errlen, "%s: member %s is encrypted", path, name);
    if (e.method != 0 && e.method != 8)
        return nn_errf(err, errlen, "%s: member %s: compression method %u (expected stored "
                       "or deflate)", path, name, (unsigned)e.method);
    /* deflate expands at most 1032:1: a larger claim is a lie (and an
     * allocation we must not make) */
    if (e.usize > S_MAX_MEMBER || (e.method == 0 && e.csize != e.usize) ||
        (e.method == 8 && e.usize / 1032 > e.csize + 1))
        return nn_errf(err, errlen, "%s: member %s: bad sizes (%llu compressed, %llu)", path,
                       name, (unsigned long long)e.csize, (unsigned long long)e.usize);
    if (e.local > len || len - e.local < 30 || s_le32(buf + e.local) != 0x04034b50u)
        return nn_errf(err, errlen, "%s: member %s: local header missing at offset %llu", path,
                       name, (unsigned long long)e.local);
    size_t ln = s_le16(buf + e.local + 26), nl = strlen(name);
    if (ln != nl || len - e.local - 30 < ln || memcmp(buf + e.local + 30, name, nl) != 0 ||
        s_le16(buf + e.local + 8) != e.method)
        return nn_errf(err, errlen, "%s: member %s: the local header disagrees with the "
                       "central directory (name or method)", path, name);
    size_t data = e.local + 30 + ln + s_le16(buf + e.local + 28);
    if (data > len || e.csize > len - data)
        return nn_errf(err, errlen, "%s: member %s: truncated (%llu bytes of data expected)",
                       path, name, (unsigned long long)e.csize);
    uint8_t *o = nn_xmalloc(e.usize ? e.usize : 1);
    if (e.method == 0)
        memcpy(o, buf + data, e.usize);
    else if (s_inflate(buf + data, e.csize, o, e.usize) != 0) {
        free(o);
        return nn_errf(err, errlen, "%s: member %s: corrupt deflate data", path, name);
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t p = 0; p < e.usize; p += 1u << 30)
        crc = crc32(crc, o + p, (uInt)(e.usize - p > (1u << 30) ? (1u << 30) : e.usize - p));
    if ((uint32_t)crc != e.crc) {
        free(o);
        return nn_errf(err, errlen, "%s: member %s: CRC-32 mismatch (corrupt archive)", path,
                       name);
    }
    *out = o;
    *outlen = e.usize;
    return 1;
}

/* ---- npy header -------------------------------------------------------- */

typedef struct {
    const char *p, *end;
} s_lex;

static void s_ws(s_lex *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n'))
        l->p++;
}

static int s_eat(s_lex *l, char c)
{
    s_ws(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes into out. */
static int s_str(s_lex *l, char *out, size_t cap)
{
    s_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
        return -1;
    char q = *l->p++;
    size_t n = 0;
    while (l->p < l->end && *l->p != q) {
        if (*l->p == '\\' || n + 1 >= cap)
            return -1;
        out[n++] = *l->p++;
    }
    if (l->p >= l->end)
        return -1;
    l->p++;
    out[n] = 0;
    return 0;
}

static int s_shape(s_lex *l, nn_npy *o)
{
    if (!s_eat(l, '('))
        return -1;
    o->ndim = 0;
    while (!s_eat(l, ')')) {
        s_ws(l);
        if (o->ndim == 4 || l->p >= l->end || *l->p < '0' || *l->p > '9')
            return -1;
        size_t v = 0;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            if (v > ((size_t)1 << 40))
                return -1;
            v = v * 10 + (size_t)(*l->p++ - '0');
        }
        o->shape[o->ndim++] = v;
        if (!s_eat(l, ',') && (s_ws(l), l->p >= l->end || *l->p != ')'))
            return -1;
    }
    return 0;
}

/* descr: '<f4', '<f8', '|u1', '<i8', ... -> o->dtype (1 u1, 4 f4, 8 f8,
 * -k signed/unsigned integers of k bytes tagged by o->kind). */
static int s_descr(const char *d, const char *what, nn_npy *o, char *err, size_t errlen)
{
    if (d[0] == 'O' || (d[0] && d[1] == 'O'))
        return nn_errf(err, errlen, "%s: object array (a pickle): refused", what);
    if (strlen(d) < 3 || (d[0] != '<' && d[0] != '|' && d[0] != '>' && d[0] != '='))
        return nn_errf(err, errlen, "%s: unsupported dtype '%s'", what, d);
    int size = atoi(d + 2);
    if (d[0] == '>' && size > 1)
        return nn_errf(err, errlen, "%s: big-endian dtype '%s' is not supported", what, d);
    char k = d[1];
    int ok = (k == 'f' && (size == 4 || size == 8)) ||
             ((k == 'u' || k == 'i') && (size == 1 || size == 2 || size == 4 || size == 8));
    char want[8];
    snprintf(want, sizeof want, "%c%c%d", d[0], k, size);
    if (!ok || strcmp(want, d) != 0)
        return nn_errf(err, errlen, "%s: unsupported dtype '%s' (expected uint8 or float32 "
                       "data, integer labels)", what, d);
    o->kind = k;
    o->dtype = size;
    return 0;
}

/* The dict literal: {'descr': ..., 'fortran_order': False, 'shape': (...), } */
static int s_dict(s_lex *l, const char *what, nn_npy *o, char *err, size_t errlen)
{
    int seen = 0;
    char key[32], val[64];
    if (!s_eat(l, '{'))
        return nn_errf(err, errlen, "%s: npy header is not a dict", what);
    while (!s_eat(l, '}')) {
        if (s_str(l, key, sizeof key) != 0 || !s_eat(l, ':'))
            return nn_errf(err, errlen, "%s: npy header: bad key", what);
        if (!strcmp(key, "descr") && !(seen & 1)) {
            if (s_str(l, val, sizeof val) != 0)
                return nn_errf(err, errlen, "%s: npy header: 'descr' is not a simple dtype "
                               "string (structured or object arrays are refused)", what);
            if (s_descr(val, what, o, err, errlen) != 0)
                return -1;
            seen |= 1;
        } else if (!strcmp(key, "fortran_order") && !(seen & 2)) {
            s_ws(l);
            if ((size_t)(l->end - l->p) >= 5 && !memcmp(l->p, "False", 5))
                l->p += 5;
            else
                return nn_errf(err, errlen, "%s: Fortran-order arrays are not supported", what);
            seen |= 2;
        } else if (!strcmp(key, "shape") && !(seen & 4)) {
            if (s_shape(l, o) != 0)
                return nn_errf(err, errlen, "%s: npy header: bad shape (at most 4 dims)", what);
            seen |= 4;
        } else {
            return nn_errf(err, errlen, "%s: npy header: unexpected key '%s'", what, key);
        }
        if (!s_eat(l, ',') && (s_ws(l), l->p >= l->end || *l->p != '}'))
            return nn_errf(err, errlen, "%s: npy header: expected ',' or '}'", what);
    }
    if (seen != 7)
        return nn_errf(err, errlen, "%s: npy header lacks descr, fortran_order or shape", what);
    s_ws(l);
    return l->p == l->end ? 0 : nn_errf(err, errlen, "%s: npy header: junk after the dict",
                                        what);
}

int nn_npy_parse(const uint8_t *buf, size_t len, const char *what, nn_npy *out, char *err,
                 size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return nn_errf(err, errlen, "%s: not a .npy array (bad magic)", what);
    int major = buf[6];
    size_t hl, start;
    if (major == 1) {
        hl = s_le16(buf + 8);
        start = 10;
    } else if ((major == 2 || major == 3) && len >= 12) {
        hl = s_le32(buf + 8);
        start = 12;
    } else {
        return nn_errf(err, errlen, "%s: .npy format version %d not supported", what, major);
    }
    if (hl > len - start)
        return nn_errf(err, errlen, "%s: truncated .npy header", what);
    s_lex l = {(const char *)buf + start, (const char *)buf + start + hl};
    if (s_dict(&l, what, out, err, errlen) != 0)
        return -1;
    out->offset = start + hl;
    size_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] && count > (S_MAX_MEMBER >> 3) / out->shape[i])
            return nn_errf(err, errlen, "%s: shape too large", what);
        count *= out->shape[i];
    }
    out->count = count;
    if (count * (size_t)out->dtype != len - out->offset)
        return nn_errf(err, errlen, "%s: %zu bytes of data where the shape and dtype need %zu "
                       "(truncated or damaged)", what, len - out->offset,
                       count * (size_t)out->dtype);
    return 0;
}

/* ---- arrays into sets -------------------------------------------------- */

/* Reads member `name` as an npy array: 0 and *a (data in *mem, owned), -1. */
static int s_array(const uint8_t *zip, size_t zlen, const char *path, const char *name,
                   uint8_t **mem, nn_npy *a, char *err, size_t errlen)
{
    char member[64], what[4200];
    size_t len;
    snprintf(member, sizeof member, "%s.npy", name);
    snprintf(what, sizeof what, "%s: array %s", path, name);
    int f = nn_zip_member(zip, zlen, path, member, mem, &len, err, errlen);
    if (f == 0)
        return nn_errf(err, errlen, "%s: no array %s (expected x_train, y_train, x_test, "
                       "y_test as written by numpy.savez)", path, name);
    if (f < 0 || nn_npy_parse(*mem, len, what, a, err, errlen) != 0) {
        free(*mem);
        *mem = NULL;
        return -1;
    }
    return 0;
}

/* Shape of one sample: c, h, w and the permutation of x's layout. */
static int s_xshape(const nn_npy *a, int nchw, const char *what, int *c, int *h, int *w,
                    char *err, size_t errlen)
{
    size_t s1 = a->shape[1], s2 = a->ndim > 2 ? a->shape[2] : 1, s3 = a->ndim > 3 ? a->shape[3] : 1;
    if (a->ndim == 2) /* a table */
        *c = (int)s1, *h = *w = 1;
    else if (a->ndim == 3)
        *c = 1, *h = (int)s1, *w = (int)s2;
    else if (a->ndim == 4 && nchw)
        *c = (int)s1, *h = (int)s2, *w = (int)s3;
    else if (a->ndim == 4)
        *c = (int)s3, *h = (int)s1, *w = (int)s2;
    else
        return nn_errf(err, errlen, "%s: %d dimensions (expected N,H,W or N,H,W,C, N,C,H,W "
                       "with --nchw, or N,F)", what, a->ndim);
    if (a->kind == 'i' || (a->kind == 'u' && a->dtype != 1))
        return nn_errf(err, errlen, "%s: wrong dtype %c%d for samples (expected uint8 or "
                       "float32)", what, a->kind, a->dtype);
    if (a->shape[0] == 0 || s1 == 0 || s2 == 0 || s3 == 0 || s1 > 65536 || s2 > 65536 ||
        s3 > 65536 || (a->ndim == 4 && *c > 4))
        return nn_errf(err, errlen, "%s: bad shape (a side of 0 or more than 65536, or more "
                       "than 4 channels: channels-first data needs --nchw)", what);
    return 0;
}

static double s_num(const nn_npy *a, const uint8_t *p)
{
    switch (a->kind == 'f' ? -a->dtype : a->dtype) {
    case -4: { float f; memcpy(&f, p, 4); return f; }
    case -8: { double f; memcpy(&f, p, 8); return f; }
    case 1: return a->kind == 'u' ? p[0] : (double)(int8_t)p[0];
    case 2: return a->kind == 'u' ? s_le16(p) : (double)(int16_t)s_le16(p);
    case 4: return a->kind == 'u' ? s_le32(p) : (double)(int32_t)s_le32(p);
    default: return a->kind == 'u' ? (double)s_le64(p) : (double)(int64_t)s_le64(p);
    }
}

/* Fills d's samples from x (NHWC or NCHW source) with one sample's c,h,w. */
static int s_fill_x(nn_dataset *d, const nn_npy *a, const uint8_t *mem, int nchw,
                    const char *what, char *err, size_t errlen)
{
    size_t n = a->shape[0], per = (size_t)d->c * (size_t)d->h * (size_t)d->w;
    size_t hw = (size_t)d->h * (size_t)d->w;
    const uint8_t *src = mem + a->offset;
    int perm = a->ndim == 4 && !nchw && d->c > 1;
    if (a->kind == 'u')
        d->x = nn_xmalloc(n * per);
    else
        d->xf = nn_xmalloc(n * per * sizeof(float));
    for (size_t i = 0; i < n * per; i++) {
        /* destination i = (s, ch, pix); the source of NHWC is (s, pix, ch) */
        size_t s = i / per, ch = i % per / hw, pix = i % hw;
        size_t j = perm ? s * per + pix * (size_t)d->c + ch : i;
        if (d->x) {
            d->x[i] = src[j];
            continue;
        }
        double v = s_num(a, src + j * (size_t)a->dtype);
        if (!isfinite(v) || fabs(v) > 3.0e38)
            return nn_errf(err, errlen, "%s: value %g at sample %zu is not a finite float32",
                           what, v, s);
        d->xf[i] = (float)v;
    }
    return 0;
}

static int s_fill_y(nn_dataset *d, const nn_npy *a, const uint8_t *mem, const char *what,
                    char *err, size_t errlen)
{
    if (a->kind == 'f')
        return nn_errf(err, errlen, "%s: wrong dtype f%d for labels (expected integers)", what,
                       a->dtype);
    if (!(a->ndim == 1 || (a->ndim == 2 && a->shape[1] == 1)) || a->shape[0] != d->n)
        return nn_errf(err, errlen, "%s: shape does not match %zu samples (expected N or N,1)",
                       what, d->n);
    d->y = nn_xmalloc(d->n + 1);
    for (size_t i = 0; i < d->n; i++) {
        double v = s_num(a, mem + a->offset + i * (size_t)a->dtype);
        if (v < 0 || v > 255)
            return nn_errf(err, errlen, "%s: label %.0f of sample %zu out of range (expected "
                           "0..255)", what, v, i);
        d->y[i] = (uint8_t)v;
        if ((int)v + 1 > d->classes)
            d->classes = (int)v + 1;
    }
    return 0;
}

/* One split: arrays x_<split> and y_<split> into d. */
static int s_split(const uint8_t *zip, size_t zlen, const char *path, const char *split,
                   int nchw, nn_dataset *d, char *err, size_t errlen)
{
    char xn[16], yn[16], what[4200];
    snprintf(xn, sizeof xn, "x_%s", split);
    snprintf(yn, sizeof yn, "y_%s", split);
    uint8_t *xm = NULL, *ym = NULL;
    nn_npy xa, ya;
    int rc = -1;
    if (s_array(zip, zlen, path, xn, &xm, &xa, err, errlen) != 0)
        goto done;
    snprintf(what, sizeof what, "%s: array %s", path, xn);
    if (s_xshape(&xa, nchw, what, &d->c, &d->h, &d->w, err, errlen) != 0 ||
        s_fill_x(d, &xa, xm, nchw, what, err, errlen) != 0)
        goto done;
    d->n = xa.shape[0];
    if (s_array(zip, zlen, path, yn, &ym, &ya, err, errlen) != 0)
        goto done;
    snprintf(what, sizeof what, "%s: array %s", path, yn);
    rc = s_fill_y(d, &ya, ym, what, err, errlen);
done:
    free(xm);
    free(ym);
    return rc;
}

int nn_data_load_npz(const char *path, const nn_data_opts *opts, nn_dataset *train,
                     nn_dataset *test, char *err, size_t errlen)
{
    uint8_t *zip;
    size_t zlen;
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (nn_data_read_file(path, S_MAX_FILE, &zip, &zlen, err, errlen) != 0)
        return -1;
    int nchw = opts && opts->nchw;
    int rc = s_split(zip, zlen, path, "train", nchw, train, err, errlen);
    if (rc == 0)
        rc = s_split(zip, zlen, path, "test", nchw, test, err, errlen);
    free(zip);
    if (rc == 0 && (train->c != test->c || train->h != test->h || train->w != test->w ||
                    !train->x != !test->x))
        rc = nn_errf(err, errlen, "%s: x_test samples are %dx%dx%d %s, x_train's %dx%dx%d %s",
                     path, test->c, test->h, test->w, test->x ? "uint8" : "float", train->c,
                     train->h, train->w, train->x ? "uint8" : "float");
    if (rc != 0) {
        nn_dataset_free(train);
        nn_dataset_free(test);
        return -1;
    }
    int classes = train->classes > test->classes ? train->classes : test->classes;
    train->classes = test->classes = classes;
    snprintf(train->name, sizeof train->name, "npz");
    snprintf(test->name, sizeof test->name, "npz");
    return 0;
}
