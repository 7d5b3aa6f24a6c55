/* nn_core — see nn_core.h. */
#include "nn/nn_core.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

/* ---- memory ------------------------------------------------------------ */

static void s_oom(size_t bytes, const char *file, int line)
{
    fprintf(stderr, "lpgossip: out of memory (%zu bytes) at %s:%d\n", bytes, file, line);
    abort();
}

void *nn_xmalloc_at(size_t bytes, const char *file, int line)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        s_oom(bytes, file, line);
    return p;
}

void *nn_xcalloc_at(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        s_oom(count * size, file, line);
    return p;
}

void *nn_xrealloc_at(void *p, size_t bytes, const char *file, int line)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q)
        s_oom(bytes, file, line);
    return q;
}

void *nn_xalloc_aligned_at(size_t bytes, const char *file, int line)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        s_oom(bytes, file, line);
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

char *nn_xstrdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *d = nn_xmalloc_at(n, file, line);
    memcpy(d, s, n);
    return d;
}

int nn_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- random numbers: xoshiro256** seeded by splitmix64 ------------------ */

static uint64_t s_splitmix64(uint64_t *x)
{
    return nn_mix64(*x += NN_GOLDEN64);
}

void nn_rng_seed(nn_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = s_splitmix64(&x);
}

static inline uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t nn_rng_next(nn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

float nn_rng_uniform(nn_rng *r)
{
    return (float)(nn_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float nn_rng_normal(nn_rng *r)
{
    double u1 = ((double)(nn_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(nn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint32_t nn_rng_below(nn_rng *r, uint32_t n)
{
    assert(n > 0);
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)(uint32_t)(nn_rng_next(r) >> 32) * n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (lo < threshold) {
            m = (uint64_t)(uint32_t)(nn_rng_next(r) >> 32) * n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void nn_rng_shuffle_u32(nn_rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = nn_rng_below(r, (uint32_t)i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ---- arena ------------------------------------------------------------- */

void nn_arena_init(nn_arena *a)
{
    memset(a, 0, sizeof *a);
}

int nn_arena_add(nn_arena *a, const char *name, int ndim, const int *shape)
{
    assert(a->data == NULL && "views are added before nn_arena_alloc");
    assert(ndim >= 1 && ndim <= NN_MAX_NDIM);
    assert(strlen(name) < NN_NAME_MAX);
    assert(nn_arena_find(a, name) < 0 && "duplicate tensor name");
    if (a->nviews == a->cap_views) {
        a->cap_views = a->cap_views ? 2 * a->cap_views : 32;
        a->views = nn_xrealloc(a->views, a->cap_views * sizeof *a->views);
    }
    nn_view *v = &a->views[a->nviews];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = ndim;
    v->numel = 1;
    for (int d = 0; d < ndim; d++) {
        assert(shape[d] > 0);
        v->shape[d] = shape[d];
        v->numel *= (size_t)shape[d];
    }
    v->offset = a->numel;
    a->numel += v->numel;
    return (int)a->nviews++;
}

void nn_arena_alloc(nn_arena *a)
{
    assert(a->data == NULL);
    a->data = nn_xalloc_aligned(a->numel * sizeof(float));
}

void nn_arena_clone_layout(nn_arena *dst, const nn_arena *src)
{
    nn_arena_free(dst);
    dst->numel = src->numel;
    dst->nviews = dst->cap_views = src->nviews;
    dst->views = nn_xmalloc((src->nviews ? src->nviews : 1) * sizeof *dst->views);
    if (src->nviews)
        memcpy(dst->views, src->views, src->nviews * sizeof *dst->views);
    dst->data = nn_xalloc_aligned(src->numel * sizeof(float));
}

int nn_arena_find(const nn_arena *a, const char *name)
{
    for (size_t i = 0; i < a->nviews; i++)
        if (strcmp(a->views[i].name, name) == 0)
            return (int)i;
    return -1;
}

float *nn_arena_ptr(const nn_arena *a, int view)
{
    assert(view >= 0 && (size_t)view < a->nviews && a->data);
    return a->data + a->views[view].offset;
}

int nn_arena_same_layout(const nn_arena *a, const nn_arena *b)
{
    if (a->numel != b->numel || a->nviews != b->nviews)
        return 0;
    for (size_t i = 0; i < a->nviews; i++) {
        const nn_view *x = &a->views[i], *y = &b->views[i];
        if (strcmp(x->name, y->name) || x->offset != y->offset || x->ndim != y->ndim)
            return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d])
                return 0;
    }
    return 1;
}

int nn_arena_check_finite(const nn_arena *a, const char *what, const char *prefix, char *err,
                          size_t errlen)
{
    for (size_t i = 0; i < a->nviews; i++) {
        const nn_view *v = &a->views[i];
        const float *x = a->data + v->offset;
        for (size_t k = 0; k < v->numel; k++)
            if (!isfinite(x[k]))
                return nn_errf(err, errlen, "%s%stensor %s%s[%zu] = %g is not finite",
                               what ? what : "", what ? ": " : "", prefix ? prefix : "",
                               v->name, k, (double)x[k]);
    }
    return 0;
}

void nn_arena_free(nn_arena *a)
{
    free(a->data);
    free(a->views);
    nn_arena_init(a);
}

void nn_namef(char *dst, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, NN_NAME_MAX, fmt, ap);
    va_end(ap);
    assert(n >= 0 && n < NN_NAME_MAX && "tensor name too long");
    (void)n;
}

double nn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- files ------------------------------------------------------------- */

/* What a file that is not regular is, for the message. */
static const char *s_file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a named pipe" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
         : S_ISDIR(m) ? "a directory" : "not a plain file";
}

int nn_open_regular(const char *path, uint64_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return nn_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nn_errf(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return nn_errf(err, errlen, "%s: not a regular file (%s): refused before reading it",
                       path, s_file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return nn_errf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    if (size)
        *size = (uint64_t)st.st_size;
    return fd;
}

FILE *nn_fopen_regular(const char *path, uint64_t *size, char *err, size_t errlen)
{
    int fd = nn_open_regular(path, size, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        nn_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
