/* nn_safetensors — see nn_safetensors.h.
 *
 * Inside: the header model (s_hdr: tensor entries and metadata, validated
 * as a whole, on the strict JSON tree of nn_json.h), the
 * writer (header text + data, through a temp file), the module-internal
 * reader of nn_safetensors_int.h (nn_st_*: a validated file read tensor by
 * tensor, also used by nn_safetensors_weights.c) and the loaders.
 */
#include "nn/nn_safetensors.h"
#include "nn/nn_safetensors_int.h"
#include "nn/nn_json.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#define S_MAX_HEADER (100u << 20)
#define S_MAX_DEPTH  8
#define S_MAX_DIMS   NN_ST_MAX_DIMS

/* ---- the header model --------------------------------------------------- */

typedef nn_st_entry s_entry;

typedef struct {
    nn_json   root;
    s_entry *e;
    size_t   ne;
    nn_json  *meta;          /* NN_JSON_OBJ or NULL */
    uint64_t data_start;    /* 8 + N */
    uint64_t data_len;
} s_hdr;

static const struct {
    const char *name;
    size_t      size;
} s_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
};

static void s_hdr_free(s_hdr *h)
{
    nn_json_free(&h->root);
    free(h->e);
    memset(h, 0, sizeof *h);
}

static int s_cmp_entry(const void *a, const void *b)
{
    const s_entry *x = *(const s_entry *const *)a, *y = *(const s_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int s_check_entry(const char *path, const char *name, const nn_json *v, s_entry *en,
                         uint64_t data_len, char *err, size_t errlen)
{
    if (v->t != NN_JSON_OBJ)
        return nn_errf(err, errlen, "%s: tensor '%s': entry is not an object", path, name);
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") &&
            strcmp(v->keys[i], "data_offsets"))
            return nn_errf(err, errlen, "%s: tensor '%s': unknown field '%s'", path, name,
                           v->keys[i]);
    const nn_json *dt = nn_json_get(v, "dtype"), *sh = nn_json_get(v, "shape"),
                 *off = nn_json_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return nn_errf(err, errlen, "%s: tensor '%s': missing field '%s'", path, name,
                       !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (dt->t != NN_JSON_STR)
        return nn_errf(err, errlen, "%s: tensor '%s': dtype is not a string", path, name);
    en->name = name;
    en->dtype = dt->s;
    en->esize = 0;
    for (size_t i = 0; i < sizeof s_dtypes / sizeof s_dtypes[0]; i++)
        if (strcmp(dt->s, s_dtypes[i].name) == 0)
            en->esize = s_dtypes[i].size;
    if (!en->esize)
        return nn_errf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, dt->s);
    if (sh->t != NN_JSON_ARR)
        return nn_errf(err, errlen, "%s: tensor '%s': shape is not an array", path, name);
    if (sh->n > S_MAX_DIMS)
        return nn_errf(err, errlen, "%s: tensor '%s': %zu dimensions (at most %d)", path, name,
                       sh->n, S_MAX_DIMS);
    en->ndim = (int)sh->n;
    uint64_t bytes = en->esize;
    for (size_t d = 0; d < sh->n; d++) {
        if (sh->items[d].t != NN_JSON_NUM || !sh->items[d].is_uint)
            return nn_errf(err, errlen,
                           "%s: tensor '%s': shape[%zu] is not a non-negative integer", path,
                           name, d);
        en->shape[d] = sh->items[d].u;
        if (en->shape[d] && bytes > UINT64_MAX / en->shape[d])
            return nn_errf(err, errlen, "%s: tensor '%s': shape too large", path, name);
        bytes *= en->shape[d];
    }
    if (off->t != NN_JSON_ARR || off->n != 2 || off->items[0].t != NN_JSON_NUM || !off->items[0].is_uint ||
        off->items[1].t != NN_JSON_NUM || !off->items[1].is_uint)
        return nn_errf(err, errlen,
                       "%s: tensor '%s': data_offsets is not [begin, end] of non-negative integers",
                       path, name);
    en->begin = off->items[0].u;
    en->end = off->items[1].u;
    if (en->begin > en->end)
        return nn_errf(err, errlen,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "]: begin after end",
                       path, name, en->begin, en->end);
    if (en->end > data_len)
        return nn_errf(err, errlen,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] out of range: the data section holds %" PRIu64 " bytes (file truncated?)",
                       path, name, en->begin, en->end, data_len);
    if (en->end - en->begin != bytes)
        return nn_errf(err, errlen,
                       "%s: tensor '%s': data_offsets span %" PRIu64 " bytes but dtype %s and "
                       "shape need %" PRIu64,
                       path, name, en->end - en->begin, en->dtype, bytes);
    return 0;
}

/* Checks the file and its 8-byte length N, then reads the N header bytes
 * into *buf (owned by the caller) and sets h->data_start, h->data_len. */
static int s_hdr_bytes(int fd, const char *path, s_hdr *h, unsigned char **buf, uint64_t *N,
                       char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return nn_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return nn_errf(err, errlen, "%s: not a regular file", path);
    uint64_t fsize = (uint64_t)st.st_size;
    unsigned char lenb[8];
    if (fsize < 8 || pread(fd, lenb, 8, 0) != 8)
        return nn_errf(err, errlen, "%s: truncated: %" PRIu64 " bytes, shorter than the 8-byte "
                       "header length", path, fsize);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | lenb[i];
    /* the length field is not echoed: in a file that is not safetensors
     * it is 8 bytes of someone's data (a password file's first line) */
    if (n < 2 || n > S_MAX_HEADER)
        return nn_errf(err, errlen, "%s: not a safetensors file: its 8-byte header length is "
                       "not in 2..%u", path, (unsigned)S_MAX_HEADER);
    if (n > fsize - 8)
        return nn_errf(err, errlen, "%s: not a safetensors file, or truncated: its header "
                       "length runs past the end of the file (%" PRIu64 " bytes)", path, fsize);
    unsigned char *b = nn_xmalloc((size_t)n);
    ssize_t got = pread(fd, b, (size_t)n, 8);
    if (got != (ssize_t)n) {
        free(b);
        return nn_errf(err, errlen, "%s: cannot read the header: %s", path,
                       got < 0 ? strerror(errno) : "short read");
    }
    h->data_start = 8 + n;
    h->data_len = fsize - 8 - n;
    *buf = b;
    *N = n;
    return 0;
}

/* Parses the N header bytes in buf as exactly one JSON object into h->root. */
static int s_hdr_parse(const unsigned char *buf, uint64_t N, const char *path, s_hdr *h,
                       char *err, size_t errlen)
{
    if (buf[0] != '{')
        return nn_errf(err, errlen, "%s: bad JSON header at byte 0: header does not start "
                       "with '{'", path);
    return nn_json_parse(&h->root, buf, (size_t)N, S_MAX_DEPTH, path, "header", err, errlen);
}

/* Walks the root object: checks __metadata__ (into h->meta) and every
 * tensor entry (into h->e, h->ne), in the file's key order. */
static int s_hdr_entries(const char *path, s_hdr *h, char *err, size_t errlen)
{
    h->e = nn_xmalloc((h->root.n ? h->root.n : 1) * sizeof *h->e);
    for (size_t i = 0; i < h->root.n; i++) {
        const char *key = h->root.keys[i];
        const nn_json *v = &h->root.items[i];
        if (strcmp(key, "__metadata__") == 0) {
            if (v->t != NN_JSON_OBJ)
                return nn_errf(err, errlen, "%s: __metadata__ is not an object", path);
            for (size_t j = 0; j < v->n; j++)
                if (v->items[j].t != NN_JSON_STR)
                    return nn_errf(err, errlen, "%s: __metadata__ value of '%s' is not a string",
                                   path, v->keys[j]);
            h->meta = &h->root.items[i];
            continue;
        }
        if (s_check_entry(path, key, v, &h->e[h->ne], h->data_len, err, errlen))
            return -1;
        h->ne++;
    }
    return 0;
}

/* Checks that the entries' ranges, sorted by begin, tile [0, data_len)
 * exactly: no overlap, no hole, no trailing bytes. */
static int s_hdr_tiles(const char *path, const s_hdr *h, char *err, size_t errlen)
{
    const s_entry **ord = nn_xmalloc((h->ne ? h->ne : 1) * sizeof *ord);
    for (size_t i = 0; i < h->ne; i++)
        ord[i] = &h->e[i];
    qsort(ord, h->ne, sizeof *ord, s_cmp_entry);
    uint64_t at = 0;
    for (size_t i = 0; i < h->ne; i++) {
        if (ord[i]->begin != at) {
            if (ord[i]->begin < at)
                nn_errf(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] overlap tensor '%s'", path, ord[i]->name, ord[i]->begin,
                        ord[i]->end, ord[i - 1]->name);
            else
                nn_errf(err, errlen, "%s: tensor '%s': data_offsets begin at %" PRIu64
                        ", leaving a hole after byte %" PRIu64, path, ord[i]->name,
                        ord[i]->begin, at);
            free(ord);
            return -1;
        }
        at = ord[i]->end;
    }
    free(ord);
    if (at != h->data_len)
        return nn_errf(err, errlen, "%s: tensors cover %" PRIu64 " bytes but the data section "
                       "holds %" PRIu64 " (truncated or trailing bytes)", path, at, h->data_len);
    return 0;
}

/* Reads and validates the whole header of the open file fd. On failure h
 * is left empty (nothing to free) and err says what was wrong. */
static int s_hdr_read(int fd, const char *path, s_hdr *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    unsigned char *buf = NULL;
    uint64_t N = 0;
    if (s_hdr_bytes(fd, path, h, &buf, &N, err, errlen))
        goto fail;
    int bad = s_hdr_parse(buf, N, path, h, err, errlen);
    free(buf);
    if (bad || s_hdr_entries(path, h, err, errlen) || s_hdr_tiles(path, h, err, errlen))
        goto fail;
    return 0;
fail:
    s_hdr_free(h);
    return -1;
}

/* ---- writer ------------------------------------------------------------- */

typedef struct {
    char  *s;
    size_t len, cap;
} s_sb;

static void s_sb_put(s_sb *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap)
            b->cap = b->cap ? 2 * b->cap : 1024;
        b->s = nn_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void s_sb_str(s_sb *b, const char *s)
{
    s_sb_put(b, s, strlen(s));
}

/* A JSON string literal; bytes >= 0x80 are copied (callers pass UTF-8). */
static void s_sb_jstr(s_sb *b, const char *prefix, const char *s)
{
    s_sb_put(b, "\"", 1);
    for (int part = 0; part < 2; part++) {
        const char *q = part ? s : (prefix ? prefix : "");
        for (; *q; q++) {
            unsigned char c = (unsigned char)*q;
            char esc[8];
            if (c == '"' || c == '\\') {
                esc[0] = '\\';
                esc[1] = (char)c;
                s_sb_put(b, esc, 2);
            } else if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                s_sb_put(b, esc, 6);
            } else {
                s_sb_put(b, q, 1);
            }
        }
    }
    s_sb_put(b, "\"", 1);
}

static int s_host_le(void)
{
    const uint32_t one = 1;
    unsigned char b[4];
    memcpy(b, &one, 4);
    return b[0] == 1;
}

static int s_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int s_write_floats(int fd, const float *x, size_t n)
{
    if (s_host_le())
        return s_write_all(fd, x, n * sizeof(float));
    unsigned char buf[4096];
    while (n) {
        size_t k = n < sizeof buf / 4 ? n : sizeof buf / 4;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int j = 0; j < 4; j++)
                buf[4 * i + (size_t)j] = (unsigned char)(u >> (8 * j));
        }
        if (s_write_all(fd, buf, 4 * k))
            return -1;
        x += k;
        n -= k;
    }
    return 0;
}

static void s_full_name(char *out, size_t outlen, const char *prefix, const char *name)
{
    snprintf(out, outlen, "%s%s", prefix ? prefix : "", name);
}

/* Refuses a name prefix over 256 bytes, the reserved tensor name
 * __metadata__ and a tensor name (prefix included) given twice across the
 * arenas. */
static int s_check_names(const char *path, const nn_arena *const *arenas, const char *const *prefixes,
                         int narenas, char *err, size_t errlen)
{
    char a_name[2 * NN_NAME_MAX + 256], b_name[2 * NN_NAME_MAX + 256];
    for (int a = 0; a < narenas; a++)
        for (size_t v = 0; v < arenas[a]->nviews; v++) {
            const char *pa = prefixes ? prefixes[a] : NULL;
            if (pa && strlen(pa) > 256)
                return nn_errf(err, errlen, "%s: name prefix '%.32s...' too long", path, pa);
            s_full_name(a_name, sizeof a_name, pa, arenas[a]->views[v].name);
            if (strcmp(a_name, "__metadata__") == 0)
                return nn_errf(err, errlen, "%s: tensor name '__metadata__' is reserved", path);
            for (int b = 0; b <= a; b++)
                for (size_t u = 0; u < (b == a ? v : arenas[b]->nviews); u++) {
                    s_full_name(b_name, sizeof b_name, prefixes ? prefixes[b] : NULL,
                                arenas[b]->views[u].name);
                    if (strcmp(a_name, b_name) == 0)
                        return nn_errf(err, errlen,
                                       "%s: duplicate tensor name '%s' (arenas %d and %d; use "
                                       "nn_safetensors_save_prefixed)", path, a_name, b, a);
                }
        }
    return 0;
}

/* Refuses a metadata key without a value and a key given twice. */
static int s_check_meta(const char *path, const char *const *meta_kv, char *err, size_t errlen)
{
    if (meta_kv)
        for (size_t i = 0; meta_kv[i]; i += 2) {
            if (!meta_kv[i + 1])
                return nn_errf(err, errlen, "%s: metadata key '%s' has no value", path,
                               meta_kv[i]);
            for (size_t j = 0; j < i; j += 2)
                if (strcmp(meta_kv[i], meta_kv[j]) == 0)
                    return nn_errf(err, errlen, "%s: duplicate metadata key '%s'", path,
                                   meta_kv[i]);
        }
    return 0;
}

/* The header JSON into hb: __metadata__ first (when any), then every view
 * in arena and view order with its F32 shape and data offsets, padded with
 * spaces so that the data starts at a multiple of 8. */
static void s_header(s_sb *hb, const nn_arena *const *arenas, const char *const *prefixes, int narenas,
                     const char *const *meta_kv)
{
    s_sb_str(hb, "{");
    int first = 1;
    if (meta_kv && meta_kv[0]) {
        s_sb_str(hb, "\"__metadata__\":{");
        for (size_t i = 0; meta_kv[i]; i += 2) {
            if (i)
                s_sb_str(hb, ",");
            s_sb_jstr(hb, NULL, meta_kv[i]);
            s_sb_str(hb, ":");
            s_sb_jstr(hb, NULL, meta_kv[i + 1]);
        }
        s_sb_str(hb, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int a = 0; a < narenas; a++)
        for (size_t v = 0; v < arenas[a]->nviews; v++) {
            const nn_view *vw = &arenas[a]->views[v];
            char num[96];
            if (!first)
                s_sb_str(hb, ",");
            first = 0;
            s_sb_jstr(hb, prefixes ? prefixes[a] : NULL, vw->name);
            s_sb_str(hb, ":{\"dtype\":\"F32\",\"shape\":[");
            for (int d = 0; d < vw->ndim; d++) {
                snprintf(num, sizeof num, "%s%d", d ? "," : "", vw->shape[d]);
                s_sb_str(hb, num);
            }
            uint64_t end = off + (uint64_t)vw->numel * 4;
            snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, end);
            s_sb_str(hb, num);
            off = end;
        }
    s_sb_str(hb, "}");
    while ((8 + hb->len) % 8)
        s_sb_str(hb, " ");
}

/* The directory of path, for messages and its fsync (malloc'd): "." for a
 * bare file name, "/" for a file in the root. */
static char *s_dir_of(const char *path)
{
    size_t plen = strlen(path);
    char *dir = nn_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, plen + 1, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    return dir;
}

/* The whole file into the fresh temp file *fd: mode 0644, the header
 * length (8 bytes, little-endian), the header hb, the data of every view;
 * then fsync and close.  Returns 0, or -1 with errno from the failing call;
 * *fd is -1 once close was called (whether it failed or not). */
static int s_write_temp(int *fd, const s_sb *hb, const nn_arena *const *arenas, int narenas)
{
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)hb->len >> (8 * i));
    if (fchmod(*fd, 0644) != 0 || s_write_all(*fd, lenb, 8) || s_write_all(*fd, hb->s, hb->len))
        return -1;
    for (int a = 0; a < narenas; a++)
        for (size_t v = 0; v < arenas[a]->nviews; v++) {
            const nn_view *vw = &arenas[a]->views[v];
            if (vw->numel && s_write_floats(*fd, arenas[a]->data + vw->offset, vw->numel))
                return -1;
        }
    if (fsync(*fd) != 0)
        return -1;
    int r = close(*fd);
    *fd = -1;
    return r != 0 ? -1 : 0;
}

/* fsync of the directory dir after the rename (skipped when it cannot be
 * opened).  The new file is complete either way; a failed directory sync
 * only weakens durability across a crash, so it is reported. */
static int s_sync_dir(const char *path, const char *dir, char *err, size_t errlen)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        return 0;
    int r = fsync(dfd);
    int e = errno;
    close(dfd);
    if (r != 0)
        return nn_errf(err, errlen, "%s: fsync of directory '%s' failed: %s", path, dir, strerror(e));
    return 0;
}

/* Checks names and metadata (s_check_names, s_check_meta), builds the
 * header (s_header), writes it and the data to a temp file in the same
 * directory (s_write_temp), renames that over path and syncs the directory
 * (s_sync_dir).  On a failed write or rename the temp file is removed and
 * the old file at path stays. */
int nn_safetensors_save_prefixed(const char *path, const nn_arena *const *arenas,
                                 const char *const *prefixes, int narenas,
                                 const char *const *meta_kv, char *err, size_t errlen)
{
    if (s_check_names(path, arenas, prefixes, narenas, err, errlen) != 0 ||
        s_check_meta(path, meta_kv, err, errlen) != 0)
        return -1;
    s_sb hb = {0};
    s_header(&hb, arenas, prefixes, narenas, meta_kv);

    size_t plen = strlen(path);
    char *tmp = nn_xmalloc(plen + 16);
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    char *dir = s_dir_of(path);
    int fd = mkstemp(tmp), rc = -1;
    if (fd < 0) {
        nn_errf(err, errlen, "%s: cannot create a temp file in '%s': %s", path, dir,
                strerror(errno));
    } else if (s_write_temp(&fd, &hb, arenas, narenas) != 0 || rename(tmp, path) != 0) {
        nn_errf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    } else {
        rc = s_sync_dir(path, dir, err, errlen);
    }
    free(tmp);
    free(dir);
    free(hb.s);
    return rc;
}

int nn_safetensors_save(const char *path, const nn_arena *const *arenas, int narenas,
                        const char *const *meta_kv, char *err, size_t errlen)
{
    return nn_safetensors_save_prefixed(path, arenas, NULL, narenas, meta_kv, err, errlen);
}

/* ---- readers ------------------------------------------------------------ */

/* Models and checkpoints: a regular file, opened without blocking
 * (nn_open_regular; s_hdr_bytes checks the size again on the fd). */
static int s_open(const char *path, char *err, size_t errlen)
{
    return nn_open_regular(path, NULL, err, errlen);
}

/* ---- the module-internal reader (nn_safetensors_int.h) ------------------ */

struct nn_st_file {
    int   fd;
    s_hdr h;
};

nn_st_file *nn_st_open(const char *path, char *err, size_t errlen)
{
    int fd = s_open(path, err, errlen);
    if (fd < 0)
        return NULL;
    nn_st_file *f = nn_xcalloc(1, sizeof *f);
    f->fd = fd;
    if (s_hdr_read(fd, path, &f->h, err, errlen) != 0) {
        close(fd);
        free(f);
        return NULL;
    }
    return f;
}

void nn_st_close(nn_st_file **self_p)
{
    if (!self_p || !*self_p)
        return;
    s_hdr_free(&(*self_p)->h);
    close((*self_p)->fd);
    free(*self_p);
    *self_p = NULL;
}

const nn_st_entry *nn_st_find(const nn_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->h.ne; i++)
        if (strcmp(f->h.e[i].name, name) == 0)
            return &f->h.e[i];
    return NULL;
}

int nn_st_read(const nn_st_file *f, const nn_st_entry *e, void *buf, const char *path, char *err,
               size_t errlen)
{
    size_t bytes = (size_t)(e->end - e->begin), got = 0;
    while (got < bytes) {
        ssize_t r = pread(f->fd, (char *)buf + got, bytes - got,
                          (off_t)(f->h.data_start + e->begin + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return nn_errf(err, errlen, "%s: tensor '%s': read failed: %s", path, e->name,
                           r < 0 ? strerror(errno) : "unexpected end of file");
        got += (size_t)r;
    }
    return 0;
}

int nn_safetensors_load_prefixed(const char *path, nn_arena *const *arenas,
                                 const char *const *prefixes, int narenas, char *err,
                                 size_t errlen)
{
    nn_st_file *f = nn_st_open(path, err, errlen);
    if (!f)
        return -1;
    int rc = -1;
    char full[2 * NN_NAME_MAX + 256];
    for (int a = 0; a < narenas; a++) {
        const nn_arena *ar = arenas[a];
        assert(ar->data || ar->numel == 0);
        for (size_t v = 0; v < ar->nviews; v++) {
            const nn_view *vw = &ar->views[v];
            s_full_name(full, sizeof full, prefixes ? prefixes[a] : NULL, vw->name);
            const s_entry *en = nn_st_find(f, full);
            if (!en) {
                nn_errf(err, errlen, "%s: tensor '%s' missing", path, full);
                goto done;
            }
            if (strcmp(en->dtype, "F32") != 0) {
                nn_errf(err, errlen, "%s: tensor '%s': dtype %s, expected F32", path, full,
                        en->dtype);
                goto done;
            }
            int same = en->ndim == vw->ndim;
            for (int d = 0; same && d < vw->ndim; d++)
                same = en->shape[d] == (uint64_t)vw->shape[d];
            if (!same) {
                char got[256] = "", want[256] = "";
                size_t gl = 0, wl = 0;
                for (int d = 0; d < en->ndim && gl < sizeof got - 32; d++)
                    gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%" PRIu64, d ? "," : "",
                                           en->shape[d]);
                for (int d = 0; d < vw->ndim; d++)
                    wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%d", d ? "," : "",
                                           vw->shape[d]);
                nn_errf(err, errlen, "%s: tensor '%s': shape [%s], expected [%s]", path, full,
                        got, want);
                goto done;
            }
            float *dst = ar->data + vw->offset;
            if (nn_st_read(f, en, dst, path, err, errlen) != 0)
                goto done;
            if (!s_host_le()) {
                unsigned char *b = (unsigned char *)dst;
                for (size_t i = 0; i < vw->numel; i++) {
                    uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                                 (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
                    memcpy(&dst[i], &u, 4);
                }
            }
        }
    }
    rc = 0;
done:
    nn_st_close(&f);
    return rc;
}

int nn_safetensors_load(const char *path, nn_arena *const *arenas, int narenas, char *err,
                        size_t errlen)
{
    return nn_safetensors_load_prefixed(path, arenas, NULL, narenas, err, errlen);
}

int nn_safetensors_meta(const char *path, const char *key, char *val, size_t vallen, char *err,
                        size_t errlen)
{
    int fd = s_open(path, err, errlen);
    if (fd < 0)
        return -1;
    s_hdr h;
    int rc = s_hdr_read(fd, path, &h, err, errlen);
    close(fd);
    if (rc)
        return -1;
    rc = -1;
    const nn_json *v = h.meta ? nn_json_get(h.meta, key) : NULL;
    if (!v) {
        nn_errf(err, errlen, "%s: no metadata key '%s'", path, key);
    } else if (strlen(v->s) + 1 > vallen) {
        nn_errf(err, errlen, "%s: metadata '%s' value of %zu bytes does not fit in %zu", path,
                key, strlen(v->s), vallen);
    } else {
        memcpy(val, v->s, strlen(v->s) + 1);
        rc = 0;
    }
    s_hdr_free(&h);
    return rc;
}

uint32_t nn_safetensors_crc32(uint32_t crc, const nn_arena *a)
{
    uLong c = crc;
    for (size_t i = 0; i < a->nviews; i++) {
        const unsigned char *b = (const unsigned char *)(a->data + a->views[i].offset);
        size_t left = a->views[i].numel * sizeof(float);
        while (left) {
            uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
            c = crc32(c, b, chunk);
            b += chunk;
            left -= chunk;
        }
    }
    return (uint32_t)c;
}
