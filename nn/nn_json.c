/* nn_json — a strict JSON reader building a tree: what the safetensors
 * header is read with (nn_safetensors.c), for files from anywhere.
 *
 * Owns:    the parser (RFC 8259 strict: no trailing commas, no duplicate
 *          keys, valid UTF-8 and escapes, nesting bounded by the caller,
 *          numbers kept as non-negative integers where they are) and the
 *          tree's memory.
 * Exposes: nn_json_parse, nn_json_free, nn_json_get (nn_json.h).
 * Callers: nn_safetensors.c.
 */
#include "nn/nn_json.h"

#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"

typedef struct {
    const unsigned char *p, *start, *end;
    const char *path, *doc;
    int max_depth;
    char *err;
    size_t errlen;
} s_jparser;

void nn_json_free(nn_json *v)
{
    free(v->s);
    for (size_t i = 0; i < v->n; i++) {
        nn_json_free(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static int s_jerr(s_jparser *ps, const char *what)
{
    return nn_errf(ps->err, ps->errlen, "%s: bad JSON %s at byte %zu: %s", ps->path,
                   ps->doc, (size_t)(ps->p - ps->start), what);
}

static void s_jws(s_jparser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int s_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int s_read_u4(s_jparser *ps, unsigned *out)
{
    if (ps->end - ps->p < 4)
        return s_jerr(ps, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = s_hexval(ps->p[i]);
        if (h < 0)
            return s_jerr(ps, "bad hex digit in \\u escape");
        v = v * 16 + (unsigned)h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

static void s_put_utf8(char *buf, size_t *len, unsigned cp)
{
    if (cp < 0x80) {
        buf[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        buf[(*len)++] = (char)(0xC0 | (cp >> 6));
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        buf[(*len)++] = (char)(0xE0 | (cp >> 12));
        buf[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        buf[(*len)++] = (char)(0xF0 | (cp >> 18));
        buf[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t s_utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], cp, need;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) <= need)
        return 0;
    for (unsigned i = 1; i <= need; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return need + 1;
}

/* Parses a string at ps->p (on the opening quote) into a malloc'd C string. */
static int s_jstring(s_jparser *ps, char **out)
{
    *out = NULL;
    ps->p++; /* '"' */
    const unsigned char *q = ps->p;
    while (q < ps->end && *q != '"') /* decoded length <= raw length */
        q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end)
        return s_jerr(ps, "unterminated string");
    char *buf = nn_xmalloc((size_t)(q - ps->p) + 1);
    size_t len = 0;
    while (*ps->p != '"') {
        unsigned c = *ps->p;
        if (c < 0x20) {
            free(buf);
            return s_jerr(ps, "control character in string");
        }
        if (c == '\\') {
            ps->p++;
            unsigned e = *ps->p++, cp;
            switch (e) {
            case '"': buf[len++] = '"'; break;
            case '\\': buf[len++] = '\\'; break;
            case '/': buf[len++] = '/'; break;
            case 'b': buf[len++] = '\b'; break;
            case 'f': buf[len++] = '\f'; break;
            case 'n': buf[len++] = '\n'; break;
            case 'r': buf[len++] = '\r'; break;
            case 't': buf[len++] = '\t'; break;
            case 'u':
                if (s_read_u4(ps, &cp))
                    goto fail;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    s_jerr(ps, "unpaired low surrogate in \\u escape");
                    goto fail;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                        s_jerr(ps, "unpaired high surrogate in \\u escape");
                        goto fail;
                    }
                    ps->p += 2;
                    if (s_read_u4(ps, &lo))
                        goto fail;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        s_jerr(ps, "bad low surrogate in \\u escape");
                        goto fail;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (cp == 0) {
                    s_jerr(ps, "\\u0000 in string");
                    goto fail;
                }
                /* 4 UTF-8 bytes at most for 6 or 12 escape bytes: fits. */
                s_put_utf8(buf, &len, cp);
                break;
            default:
                ps->p--;
                s_jerr(ps, "bad escape in string");
                goto fail;
            }
            continue;
        }
        if (c >= 0x80) {
            size_t k = s_utf8_len(ps->p, ps->end);
            if (!k) {
                s_jerr(ps, "invalid UTF-8 in string");
                goto fail;
            }
            memcpy(buf + len, ps->p, k);
            len += k;
            ps->p += k;
            continue;
        }
        buf[len++] = (char)c;
        ps->p++;
    }
    ps->p++; /* closing '"' */
    buf[len] = 0;
    *out = buf;
    return 0;
fail:
    free(buf);
    return -1;
}

static int s_jnumber(s_jparser *ps, nn_json *v)
{
    const unsigned char *p = ps->p, *e = ps->end;
    int neg = 0, frac = 0, ovf = 0;
    uint64_t u = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e || *p < '0' || *p > '9')
        return s_jerr(ps, "bad number");
    if (*p == '0') {
        p++;
        if (p < e && *p >= '0' && *p <= '9')
            return s_jerr(ps, "leading zero in number");
    } else {
        while (p < e && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p++ - '0');
            if (u > (UINT64_MAX - d) / 10)
                ovf = 1;
            else
                u = u * 10 + d;
        }
    }
    if (p < e && *p == '.') {
        frac = 1;
        p++;
        if (p >= e || *p < '0' || *p > '9')
            return s_jerr(ps, "bad fraction in number");
        while (p < e && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        frac = 1;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || *p < '0' || *p > '9')
            return s_jerr(ps, "bad exponent in number");
        while (p < e && *p >= '0' && *p <= '9')
            p++;
    }
    v->t = NN_JSON_NUM;
    v->is_uint = !neg && !frac && !ovf;
    v->u = v->is_uint ? u : 0;
    ps->p = p;
    return 0;
}

static int s_jvalue(s_jparser *ps, nn_json *v, int depth);

static void s_jpush(nn_json *v)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 8;
        v->items = nn_xrealloc(v->items, v->cap * sizeof *v->items);
        if (v->t == NN_JSON_OBJ)
            v->keys = nn_xrealloc(v->keys, v->cap * sizeof *v->keys);
    }
    memset(&v->items[v->n], 0, sizeof v->items[v->n]);
    if (v->t == NN_JSON_OBJ)
        v->keys[v->n] = NULL;
    v->n++;
}

static int s_jcontainer(s_jparser *ps, nn_json *v, int depth, int obj)
{
    if (depth >= ps->max_depth)
        return s_jerr(ps, "nesting too deep");
    char close = obj ? '}' : ']';
    v->t = obj ? NN_JSON_OBJ : NN_JSON_ARR;
    ps->p++;
    s_jws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        s_jpush(v);
        if (obj) {
            s_jws(ps);
            if (ps->p >= ps->end || *ps->p != '"')
                return s_jerr(ps, "expected a string key");
            const unsigned char *kpos = ps->p;
            if (s_jstring(ps, &v->keys[v->n - 1]))
                return -1;
            for (size_t i = 0; i + 1 < v->n; i++)
                if (strcmp(v->keys[i], v->keys[v->n - 1]) == 0) {
                    ps->p = kpos;
                    return s_jerr(ps, "duplicate key");
                }
            s_jws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return s_jerr(ps, "expected ':'");
            ps->p++;
        }
        if (s_jvalue(ps, &v->items[v->n - 1], depth + 1))
            return -1;
        s_jws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return s_jerr(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int s_jlit(s_jparser *ps, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
        return s_jerr(ps, "unexpected character");
    ps->p += n;
    return 0;
}

static int s_jvalue(s_jparser *ps, nn_json *v, int depth)
{
    s_jws(ps);
    if (ps->p >= ps->end)
        return s_jerr(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
        return s_jcontainer(ps, v, depth, 1);
    case '[':
        return s_jcontainer(ps, v, depth, 0);
    case '"':
        v->t = NN_JSON_STR;
        return s_jstring(ps, &v->s);
    case 't':
        v->t = NN_JSON_BOOL;
        return s_jlit(ps, "true");
    case 'f':
        v->t = NN_JSON_BOOL;
        return s_jlit(ps, "false");
    case 'n':
        v->t = NN_JSON_NULL;
        return s_jlit(ps, "null");
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return s_jnumber(ps, v);
        return s_jerr(ps, "unexpected character");
    }
}

int nn_json_parse(nn_json *v, const unsigned char *buf, size_t n, int max_depth,
                  const char *path, const char *doc, char *err, size_t errlen)
{
    s_jparser ps = {buf, buf, buf + n, path, doc, max_depth, err, errlen};
    memset(v, 0, sizeof *v);
    if (s_jvalue(&ps, v, 0))
        return -1;
    s_jws(&ps);
    if (ps.p != ps.end)
        return s_jerr(&ps, "trailing characters after the top-level value");
    return 0;
}

const nn_json *nn_json_get(const nn_json *obj, const char *key)
{
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}
