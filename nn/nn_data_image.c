/* nn_data_image — image folders (the torchvision ImageFolder layout).
 *
 * Owns:    decoding one PNG (libpng's simplified API) or JPEG (libjpeg-turbo)
 *          file, chosen by its first bytes, never by its name; resizing
 *          (per axis: bilinear with half-pixel centres when enlarging, area
 *          averaging with fractional edge weights when shrinking; separable,
 *          rounded to nearest); reading DIR/train/CLASS/FILE and
 *          DIR/test/CLASS/FILE into sets.  Classes are the training class
 *          folders sorted by byte value (their names kept), or the lines of
 *          DIR/classes.txt in their order when it exists (then a class may
 *          lack images: per-site data with the same labels everywhere,
 *          though a site holds only some of the classes); files within a
 *          class are read in sorted order; names starting with '.' are
 *          ignored.  Gray images stay 1 channel when every image is gray;
 *          otherwise gray ones are replicated into RGB (alpha dropped).
 * Exposes: nn_image_read, nn_data_load_images (nn_data.h).
 * Callers: nn_data.c ("images:DIR"), node/ (predict), tests, benchmarks.
 */
#include "nn/nn_data.h"

#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which needs FILE */
#include <jpeglib.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_MAX_FILE  ((size_t)256 << 20)
#define S_MAX_SIDE  16384u
#define S_MAX_FILES (1u << 24)

/* ---- decoding ---------------------------------------------------------- */

/* PNG into interleaved pixels (*c = 1 or 3 channels). */
static int s_png(const char *path, const uint8_t *b, size_t n, int want_c, uint8_t **px, int *c,
                 int *h, int *w, char *err, size_t errlen)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, b, n))
        return nn_errf(err, errlen, "%s: corrupt PNG: %s", path, im.message);
    if (im.width == 0 || im.height == 0 || im.width > S_MAX_SIDE || im.height > S_MAX_SIDE) {
        png_image_free(&im);
        return nn_errf(err, errlen, "%s: PNG of %ux%u pixels (sides 1..%u)", path,
                       (unsigned)im.width, (unsigned)im.height, S_MAX_SIDE);
    }
    int gray = !(im.format & PNG_FORMAT_FLAG_COLOR);
    *c = want_c ? want_c : (gray ? 1 : 3);
    im.format = *c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    *h = (int)im.height;
    *w = (int)im.width;
    *px = nn_xmalloc(PNG_IMAGE_SIZE(im));
    /* Alpha composited on black (background NULL); no gamma changes for
     * 8-bit sRGB input. */
    if (!png_image_finish_read(&im, NULL, *px, 0, NULL)) {
        free(*px);
        *px = NULL;
        nn_errf(err, errlen, "%s: corrupt PNG: %s", path, im.message);
        png_image_free(&im);
        return -1;
    }
    return 0;
}

typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} s_jerr;

static void s_jpeg_fail(j_common_ptr ci)
{
    s_jerr *e = (s_jerr *)ci->err;
    (*ci->err->format_message)(ci, e->msg);
    longjmp(e->jb, 1);
}

static void s_jpeg_quiet(j_common_ptr ci, int level)
{
    if (level < 0) /* warnings (e.g. premature end) become errors below */
        ci->err->num_warnings++;
}

static int s_jpeg(const char *path, const uint8_t *b, size_t n, int want_c, uint8_t **px,
                  int *c, int *h, int *w, char *err, size_t errlen)
{
    struct jpeg_decompress_struct ci;
    s_jerr je;
    uint8_t *volatile out = NULL;
    ci.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = s_jpeg_fail;
    je.mgr.emit_message = s_jpeg_quiet;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        free(out);
        return nn_errf(err, errlen, "%s: corrupt JPEG: %s", path, je.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, b, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    int gray = ci.jpeg_color_space == JCS_GRAYSCALE;
    *c = want_c ? want_c : (gray ? 1 : 3);
    ci.out_color_space = *c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&ci);
    if (ci.output_width == 0 || ci.output_height == 0 || ci.output_width > S_MAX_SIDE ||
        ci.output_height > S_MAX_SIDE || ci.output_components != *c) {
        snprintf(je.msg, sizeof je.msg, "%ux%u pixels, %d components", ci.output_width,
                 ci.output_height, ci.output_components);
        longjmp(je.jb, 1);
    }
    *h = (int)ci.output_height;
    *w = (int)ci.output_width;
    size_t stride = (size_t)*w * (size_t)*c;
    out = nn_xmalloc(stride * (size_t)*h);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = out + stride * ci.output_scanline;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    if (je.mgr.num_warnings > 0) { /* a truncated file decodes as grey: refuse */
        snprintf(je.msg, sizeof je.msg, "damaged data (truncated file?)");
        longjmp(je.jb, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *px = out;
    return 0;
}

/* ---- resizing ---------------------------------------------------------- */

typedef struct {
    int   *first, ntap; /* per output index: first source index, taps */
    float *w;           /* [out][ntap] weights */
} s_axis;

/* Weights of one axis from `in` to `out` samples. */
static void s_axis_make(s_axis *a, int in, int out)
{
    double scale = (double)in / out;
    a->ntap = out >= in ? 2 : (int)scale + 2;
    a->first = nn_xmalloc((size_t)out * sizeof *a->first);
    a->w = nn_xcalloc((size_t)out * (size_t)a->ntap, sizeof *a->w);
    for (int o = 0; o < out; o++) {
        float *w = a->w + (size_t)o * (size_t)a->ntap;
        if (out >= in) { /* bilinear, half-pixel centres, edges clamped */
            double s = (o + 0.5) * scale - 0.5;
            if (s < 0)
                s = 0;
            int i0 = (int)s;
            if (i0 > in - 2)
                i0 = in >= 2 ? in - 2 : 0;
            double f = s - i0;
            if (f > 1)
                f = 1;
            a->first[o] = i0;
            w[0] = (float)(1 - f);
            w[1] = in >= 2 ? (float)f : 0;
            continue;
        }
        double lo = o * scale, hi = (o + 1) * scale; /* area: overlap / scale */
        int i0 = (int)lo;
        a->first[o] = i0;
        for (int t = 0; t < a->ntap && i0 + t < in; t++) {
            double l = i0 + t > lo ? i0 + t : lo, r = i0 + t + 1 < hi ? i0 + t + 1 : hi;
            w[t] = r > l ? (float)((r - l) / scale) : 0;
        }
    }
}

/* Interleaved src (h x w x c) into interleaved dst (oh x ow x c). */
static void s_resize(const uint8_t *src, int h, int w, int c, uint8_t *dst, int oh, int ow)
{
    s_axis ax, ay;
    s_axis_make(&ax, w, ow);
    s_axis_make(&ay, h, oh);
    float *tmp = nn_xmalloc((size_t)h * (size_t)ow * (size_t)c * sizeof *tmp);
    for (int y = 0; y < h; y++)
        for (int ox = 0; ox < ow; ox++)
            for (int k = 0; k < c; k++) {
                float s = 0;
                for (int t = 0; t < ax.ntap && ax.first[ox] + t < w; t++)
                    s += ax.w[ox * ax.ntap + t] *
                         src[((size_t)y * (size_t)w + (size_t)(ax.first[ox] + t)) * (size_t)c + (size_t)k];
                tmp[((size_t)y * (size_t)ow + (size_t)ox) * (size_t)c + (size_t)k] = s;
            }
    for (int oy = 0; oy < oh; oy++)
        for (size_t j = 0; j < (size_t)ow * (size_t)c; j++) {
            float s = 0;
            for (int t = 0; t < ay.ntap && ay.first[oy] + t < h; t++)
                s += ay.w[oy * ay.ntap + t] * tmp[(size_t)(ay.first[oy] + t) * (size_t)ow * (size_t)c + j];
            int v = (int)(s + 0.5f);
            dst[(size_t)oy * (size_t)ow * (size_t)c + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    free(tmp);
    free(ax.first);
    free(ax.w);
    free(ay.first);
    free(ay.w);
}

int nn_image_read(const char *path, int want_c, int out_h, int out_w, uint8_t **px, int *c,
                  int *h, int *w, char *err, size_t errlen)
{
    uint8_t *b, *il = NULL;
    size_t n;
    *px = NULL;
    if (nn_data_read_file(path, S_MAX_FILE, &b, &n, err, errlen) != 0)
        return -1;
    int rc;
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
        rc = s_png(path, b, n, want_c, &il, c, h, w, err, errlen);
    else if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        rc = s_jpeg(path, b, n, want_c, &il, c, h, w, err, errlen);
    else
        rc = nn_errf(err, errlen, "%s: not a PNG or JPEG image", path);
    free(b);
    if (rc != 0)
        return -1;
    if (out_h > 0 && out_w > 0 && (out_h != *h || out_w != *w)) {
        uint8_t *r = nn_xmalloc((size_t)out_h * (size_t)out_w * (size_t)*c);
        s_resize(il, *h, *w, *c, r, out_h, out_w);
        free(il);
        il = r;
        *h = out_h;
        *w = out_w;
    }
    size_t hw = (size_t)*h * (size_t)*w; /* interleaved -> planar */
    if (*c == 1) {
        *px = il;
        return 0;
    }
    *px = nn_xmalloc(hw * (size_t)*c);
    for (size_t i = 0; i < hw; i++)
        for (int k = 0; k < *c; k++)
            (*px)[(size_t)k * hw + i] = il[i * (size_t)*c + (size_t)k];
    free(il);
    return 0;
}

/* ---- folders ----------------------------------------------------------- */

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void s_names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Sorted entries of dir that are directories (dirs = 1) or not, names
 * starting with '.' left out.  -1 with a message if dir cannot be read. */
static int s_list(const char *dir, int dirs, char ***out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return nn_errf(err, errlen, "%s: cannot read the folder: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    char p[4600];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        struct stat st;
        int isdir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) { /* ask the file system */
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            isdir = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        }
        if (isdir != dirs)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *out = nn_xrealloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = nn_xstrdup(e->d_name);
        if (*n > S_MAX_FILES) {
            closedir(d);
            s_names_free(*out, *n);
            *out = NULL;
            return nn_errf(err, errlen, "%s: more than %u entries", dir, S_MAX_FILES);
        }
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof **out, s_cmp_str);
    return 0;
}

typedef struct {
    uint8_t **px;     /* planar pixels per image */
    uint8_t  *y, *cs; /* label, channels per image */
    size_t    n, cap;
    int       h, w;   /* the size every image has */
    char      first[4600]; /* the file that set h, w */
} s_pile;

static void s_pile_free(s_pile *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->px[i]);
    free(p->px);
    free(p->y);
    free(p->cs);
}

/* Decodes one file onto the pile (or skips it under skip_bad). */
static int s_pile_add(s_pile *p, const char *path, int label, nn_data_opts *o, char *err,
                      size_t errlen)
{
    uint8_t *px;
    int c, h, w;
    if (nn_image_read(path, 0, o->image_h, o->image_w, &px, &c, &h, &w, err, errlen) != 0) {
        if (!o->skip_bad)
            return -1;
        o->skipped++;
        return 0;
    }
    if (!p->first[0]) {
        p->h = h;
        p->w = w;
        snprintf(p->first, sizeof p->first, "%s", path);
    } else if (h != p->h || w != p->w) {
        free(px);
        return nn_errf(err, errlen, "images differ in size: %s is %dx%d, %s is %dx%d (resize "
                       "with --image-size HxW)", p->first, p->h, p->w, path, h, w);
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->px = nn_xrealloc(p->px, p->cap * sizeof *p->px);
        p->y = nn_xrealloc(p->y, p->cap);
        p->cs = nn_xrealloc(p->cs, p->cap);
    }
    p->px[p->n] = px;
    p->cs[p->n] = (uint8_t)c;
    p->y[p->n++] = (uint8_t)label;
    return 0;
}

static int s_class_of(char **cls, size_t ncls, const char *name)
{
    for (size_t k = 0; k < ncls; k++)
        if (!strcmp(cls[k], name))
            return (int)k;
    return -1;
}

/* Every file of DIR/<split>/<class> onto the pile; classes from train or
 * classes.txt (listed: a class may have no folder or an empty one). */
static int s_split(const char *dir, const char *split, char **cls, size_t ncls, int listed,
                   s_pile *p, nn_data_opts *o, char *err, size_t errlen)
{
    char sd[4300], cd[4400], fp[4600];
    snprintf(sd, sizeof sd, "%s/%s", dir, split);
    char **sub;
    size_t nsub;
    if (s_list(sd, 1, &sub, &nsub, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < nsub; k++) {
        int label = s_class_of(cls, ncls, sub[k]);
        snprintf(cd, sizeof cd, "%s/%s", sd, sub[k]);
        if (label < 0) {
            rc = nn_errf(err, errlen, "%s: class folder not among the %s", cd,
                         listed ? "classes of classes.txt" : "training classes");
            break;
        }
        char **files;
        size_t nf;
        if (s_list(cd, 0, &files, &nf, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (nf == 0 && !listed)
            rc = nn_errf(err, errlen, "%s: empty class folder (list the classes in "
                         "classes.txt to allow it)", cd);
        for (size_t i = 0; rc == 0 && i < nf; i++) {
            snprintf(fp, sizeof fp, "%s/%s", cd, files[i]);
            rc = s_pile_add(p, fp, label, o, err, errlen);
        }
        s_names_free(files, nf);
    }
    s_names_free(sub, nsub);
    if (rc == 0 && p->n == 0)
        rc = nn_errf(err, errlen, "%s: no images", sd);
    return rc;
}

/* The pile into d with c channels (gray replicated when c = 3). */
static void s_pile_set(s_pile *p, int c, nn_dataset *d)
{
    size_t hw = (size_t)p->h * (size_t)p->w, per = hw * (size_t)c;
    d->n = p->n;
    d->c = c;
    d->h = p->h;
    d->w = p->w;
    d->x = nn_xmalloc(p->n * per + 1);
    d->y = nn_xmalloc(p->n + 1);
    for (size_t i = 0; i < p->n; i++) {
        for (int k = 0; k < c; k++)
            memcpy(d->x + i * per + (size_t)k * hw, p->px[i] + (p->cs[i] == 1 ? 0 : (size_t)k * hw),
                   hw);
        d->y[i] = p->y[i];
    }
    snprintf(d->name, sizeof d->name, "images");
}

static void s_names_copy(nn_dataset *d, char **cls, size_t n)
{
    d->classes = (int)n;
    d->class_names = nn_xcalloc(n, sizeof(char *));
    for (size_t k = 0; k < n; k++)
        d->class_names[k] = nn_xstrdup(cls[k]);
}

/* DIR/classes.txt, when present: one class name per line, in label order
 * (1 and the names, 0 when absent, -1 when malformed). */
static int s_classes_txt(const char *dir, char ***cls, size_t *ncls, char *err, size_t errlen)
{
    char path[4300];
    uint8_t *b;
    size_t n;
    struct stat st;
    snprintf(path, sizeof path, "%s/classes.txt", dir);
    if (stat(path, &st) != 0)
        return 0;
    if (nn_data_read_file(path, 1 << 20, &b, &n, err, errlen) != 0)
        return -1;
    *cls = nn_xcalloc(257, sizeof **cls);
    *ncls = 0;
    size_t line = 0;
    int rc = 1;
    for (size_t i = 0; rc == 1 && i < n;) {
        size_t j = i;
        while (j < n && b[j] != '\n')
            j++;
        size_t e = j > i && b[j - 1] == '\r' ? j - 1 : j;
        line++;
        char name[256];
        if (e - i >= sizeof name || memchr(b + i, 0, e - i) || memchr(b + i, '/', e - i))
            rc = nn_errf(err, errlen, "%s:%zu: not a folder name", path, line);
        else if (e > i) {
            memcpy(name, b + i, e - i);
            name[e - i] = 0;
            if (s_class_of(*cls, *ncls, name) >= 0)
                rc = nn_errf(err, errlen, "%s:%zu: class '%s' listed twice", path, line, name);
            else if (*ncls == 256)
                rc = nn_errf(err, errlen, "%s:%zu: more than 256 classes", path, line);
            else
                (*cls)[(*ncls)++] = nn_xstrdup(name);
        }
        i = j + 1;
    }
    free(b);
    if (rc == 1 && *ncls == 0)
        rc = nn_errf(err, errlen, "%s: no class names", path);
    if (rc != 1) {
        s_names_free(*cls, *ncls);
        *cls = NULL;
    }
    return rc;
}

int nn_data_load_images(const char *dir, nn_data_opts *opts, nn_dataset *train,
                        nn_dataset *test, char *err, size_t errlen)
{
    char sd[4300];
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if ((opts->image_h > 0) != (opts->image_w > 0) || opts->image_h > (int)S_MAX_SIDE ||
        opts->image_w > (int)S_MAX_SIDE)
        return nn_errf(err, errlen, "image size %dx%d: expected HxW, 1..%u each",
                       opts->image_h, opts->image_w, S_MAX_SIDE);
    snprintf(sd, sizeof sd, "%s/train", dir);
    char **cls;
    size_t ncls;
    int listed = s_classes_txt(dir, &cls, &ncls, err, errlen);
    if (listed < 0 || (!listed && s_list(sd, 1, &cls, &ncls, err, errlen) != 0))
        return -1;
    if (ncls == 0 || ncls > 256) {
        s_names_free(cls, ncls);
        return nn_errf(err, errlen, "%s: %zu class folders (expected 1..256)", sd, ncls);
    }
    s_pile tr = {0}, te = {0};
    opts->skipped = 0;
    int rc = s_split(dir, "train", cls, ncls, listed, &tr, opts, err, errlen);
    if (rc == 0)
        rc = s_split(dir, "test", cls, ncls, listed, &te, opts, err, errlen);
    if (rc == 0 && (te.h != tr.h || te.w != tr.w))
        rc = nn_errf(err, errlen, "images differ in size: %s is %dx%d, %s is %dx%d (resize "
                     "with --image-size HxW)", tr.first, tr.h, tr.w, te.first, te.h, te.w);
    if (rc == 0) {
        int c = 1;
        for (size_t i = 0; i < tr.n; i++)
            c = tr.cs[i] > c ? tr.cs[i] : c;
        for (size_t i = 0; i < te.n; i++)
            c = te.cs[i] > c ? te.cs[i] : c;
        s_pile_set(&tr, c, train);
        s_pile_set(&te, c, test);
        s_names_copy(train, cls, ncls);
        s_names_copy(test, cls, ncls);
    }
    s_pile_free(&tr);
    s_pile_free(&te);
    s_names_free(cls, ncls);
    return rc;
}
