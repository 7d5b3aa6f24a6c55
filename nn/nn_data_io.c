/* nn_data_io — the file access and set plumbing the data readers share.
 *
 * Owns:    reading a whole regular file (nn_open_regular: a FIFO or device
 *          named as data cannot block us) within a size limit checked
 *          before a byte is read; joining two sets (per-site data sets simulated in one
 *          process); class names.
 * Exposes: nn_data_read_file, nn_dataset_append, nn_dataset_class_name
 *          (nn_data.h).
 * Callers: nn_data_image.c, nn_data_npz.c, nn_data_csv.c, node/.
 */
#include "nn/nn_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int nn_data_read_file(const char *path, size_t max, uint8_t **buf, size_t *len, char *err,
                      size_t errlen)
{
    *buf = NULL;
    *len = 0;
    uint64_t size;
    int fd = nn_open_regular(path, &size, err, errlen);
    if (fd < 0)
        return -1;
    if (size > max) {
        close(fd);
        return nn_errf(err, errlen, "%s: %llu bytes, more than the %zu allowed", path,
                       (unsigned long long)size, max);
    }
    size_t n = (size_t)size, got = 0;
    uint8_t *b = nn_xmalloc(n ? n : 1);
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            free(b);
            return nn_errf(err, errlen, "%s: read failed: %s", path,
                           r < 0 ? strerror(e) : "file shrank while read");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = n;
    return 0;
}

static int s_same_names(const nn_dataset *a, const nn_dataset *b)
{
    if (!a->class_names != !b->class_names)
        return 0;
    if (!a->class_names)
        return 1;
    for (int k = 0; k < a->classes; k++)
        if (strcmp(a->class_names[k], b->class_names[k]) != 0)
            return 0;
    return 1;
}

int nn_dataset_append(nn_dataset *dst, const nn_dataset *src, char *err, size_t errlen)
{
    if (dst->n == 0 && !dst->x && !dst->xf) {
        char keep[64];
        memcpy(keep, dst->name, sizeof keep);
        memset(dst, 0, sizeof *dst);
        dst->c = src->c;
        dst->h = src->h;
        dst->w = src->w;
        dst->classes = src->classes;
        snprintf(dst->name, sizeof dst->name, "%s", keep[0] ? keep : src->name);
        if (src->class_names) {
            dst->class_names = nn_xcalloc((size_t)src->classes, sizeof(char *));
            for (int k = 0; k < src->classes; k++)
                dst->class_names[k] = nn_xstrdup(src->class_names[k]);
        }
    } else if (dst->c != src->c || dst->h != src->h || dst->w != src->w ||
               !dst->x != !src->x) {
        return nn_errf(err, errlen, "samples are %dx%dx%d (%s) where the first set's are "
                       "%dx%dx%d (%s)", src->c, src->h, src->w, src->x ? "uint8" : "float",
                       dst->c, dst->h, dst->w, dst->x ? "uint8" : "float");
    } else if (dst->class_names || src->class_names) {
        if (dst->classes != src->classes || !s_same_names(dst, src))
            return nn_errf(err, errlen, "%d classes whose names differ from the first set's "
                           "%d (give every site the same classes.txt)", src->classes,
                           dst->classes);
    } else if (src->classes > dst->classes) { /* classes by number: the largest */
        dst->classes = src->classes;
    }
    size_t per = (size_t)src->c * (size_t)src->h * (size_t)src->w, n = dst->n + src->n;
    if (src->x) {
        dst->x = nn_xrealloc(dst->x, n * per + 1);
        memcpy(dst->x + dst->n * per, src->x, src->n * per);
    } else {
        dst->xf = nn_xrealloc(dst->xf, (n * per + 1) * sizeof(float));
        memcpy(dst->xf + dst->n * per, src->xf, src->n * per * sizeof(float));
    }
    dst->y = nn_xrealloc(dst->y, n + 1);
    memcpy(dst->y + dst->n, src->y, src->n);
    dst->n = n;
    return 0;
}

const char *nn_dataset_class_name(const nn_dataset *d, int k, char *buf, size_t len)
{
    if (d->class_names && k >= 0 && k < d->classes)
        return d->class_names[k];
    snprintf(buf, len, "%d", k);
    return buf;
}
