/* nn_data_csv — tables in CSV files.
 *
 * Owns:    "csv:TRAIN[,test=TEST][,label=COLUMN]": a header row of column
 *          names, then one sample per row (RFC 4180 quoting, "" inside a
 *          quoted field, CRLF or LF, blank lines skipped).  Every column but
 *          the label is a numeric feature (strtod, finite; no empty cells).
 *          The label column is the one named by label=, else the one named
 *          "label", else the last.  Labels that are all integers 0..255 are
 *          classes by number; otherwise every label is a string and the
 *          class names are the distinct training labels sorted by byte value
 *          (a test label not among them is an error).  Without test=, every
 *          fifth data row (the 5th, 10th, ...) is the test set.
 * Exposes: nn_data_load_csv (nn_data.h).  Samples are float (xf) with c = F
 *          features, h = w = 1; standardization (the training split's mean
 *          and std per feature) is nn_data_norm_stats/nn_data_batch's job.
 * Callers: nn_data.c.
 */
#include "nn/nn_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FILE ((size_t)1 << 32)
#define S_MAX_COLS 65536

typedef struct {
    const char *path;
    const char *b;
    size_t      len, pos, line; /* line of the current field (1-based) */
    int         eol;            /* the last field ended its row */
    char       *tmp;
    size_t      tcap;
} s_csv;

typedef struct {
    size_t rows, cap;
    int    nf;          /* features */
    float *xf;
    char **lab;         /* rows label strings */
    size_t *line;       /* rows source lines */
} s_table;

static void s_put(s_csv *c, size_t *n, char ch)
{
    if (*n + 1 >= c->tcap) {
        c->tcap = c->tcap ? 2 * c->tcap : 64;
        c->tmp = nn_xrealloc(c->tmp, c->tcap);
    }
    c->tmp[(*n)++] = ch;
}

/* The next field into c->tmp; c->eol set when it ended a row.  -1 on bad
 * quoting (message names file and line). */
static int s_field(s_csv *c, char *err, size_t errlen)
{
    size_t n = 0;
    int quoted = c->pos < c->len && c->b[c->pos] == '"';
    size_t qline = c->line;
    if (quoted)
        c->pos++;
    for (;;) {
        if (c->pos >= c->len) {
            if (quoted)
                return nn_errf(err, errlen, "%s:%zu: quoted field not closed", c->path, qline);
            c->eol = 1;
            break;
        }
        char ch = c->b[c->pos++];
        if (quoted && ch == '"') {
            if (c->pos < c->len && c->b[c->pos] == '"') {
                s_put(c, &n, '"');
                c->pos++;
                continue;
            }
            quoted = 0;
            if (c->pos < c->len && c->b[c->pos] != ',' && c->b[c->pos] != '\n' &&
                c->b[c->pos] != '\r')
                return nn_errf(err, errlen, "%s:%zu: text after a closing quote", c->path,
                               c->line);
            continue;
        }
        if (!quoted && (ch == ',' || ch == '\n' || ch == '\r')) {
            c->eol = ch != ',';
            if (ch == '\r' && c->pos < c->len && c->b[c->pos] == '\n')
                c->pos++;
            if (c->eol)
                c->line++;
            break;
        }
        if (ch == '\n')
            c->line++;
        s_put(c, &n, ch);
    }
    s_put(c, &n, 0);
    return 0;
}

/* Skips blank lines; 1 if a row follows. */
static int s_row_ahead(s_csv *c)
{
    while (c->pos < c->len && (c->b[c->pos] == '\n' || c->b[c->pos] == '\r')) {
        if (c->b[c->pos] == '\n')
            c->line++;
        c->pos++;
    }
    return c->pos < c->len;
}

/* The header: column names; the label column's index in *lc. */
static int s_header(s_csv *c, const char *label, int *ncol, int *lc, char *err, size_t errlen)
{
    *ncol = 0;
    *lc = -1;
    if (!s_row_ahead(c))
        return nn_errf(err, errlen, "%s: empty file (expected a header row)", c->path);
    int named = -1;
    do {
        if (s_field(c, err, errlen) != 0)
            return -1;
        if (++*ncol > S_MAX_COLS)
            return nn_errf(err, errlen, "%s:%zu: more than %d columns", c->path, c->line,
                           S_MAX_COLS);
        if (label && !strcmp(c->tmp, label))
            *lc = *ncol - 1;
        if (!strcmp(c->tmp, "label"))
            named = *ncol - 1;
    } while (!c->eol);
    if (label && *lc < 0)
        return nn_errf(err, errlen, "%s:1: no column named '%s' for the label", c->path, label);
    if (*lc < 0)
        *lc = named >= 0 ? named : *ncol - 1;
    if (*ncol < 2)
        return nn_errf(err, errlen, "%s:1: %d column (expected features and a label)", c->path,
                       *ncol);
    return 0;
}

static void s_table_push(s_table *t, const float *f, const char *lab, size_t line)
{
    if (t->rows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->xf = nn_xrealloc(t->xf, t->cap * (size_t)t->nf * sizeof(float));
        t->lab = nn_xrealloc(t->lab, t->cap * sizeof(char *));
        t->line = nn_xrealloc(t->line, t->cap * sizeof(size_t));
    }
    memcpy(t->xf + t->rows * (size_t)t->nf, f, (size_t)t->nf * sizeof(float));
    t->lab[t->rows] = nn_xstrdup(lab);
    t->line[t->rows++] = line;
}

static void s_table_free(s_table *t)
{
    for (size_t i = 0; i < t->rows; i++)
        free(t->lab[i]);
    free(t->lab);
    free(t->xf);
    free(t->line);
    memset(t, 0, sizeof *t);
}

/* One numeric cell; -1 with file:line:column on a missing or bad value. */
static int s_number(const s_csv *c, size_t line, int col, float *out, char *err, size_t errlen)
{
    const char *s = c->tmp;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return nn_errf(err, errlen, "%s:%zu: column %d: missing value", c->path, line, col + 1);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == s || *end || !isfinite(v) || fabs(v) > 3.0e38)
        return nn_errf(err, errlen, "%s:%zu: column %d: '%.40s' is not a finite number",
                       c->path, line, col + 1, c->tmp);
    *out = (float)v;
    return 0;
}

/* Reads every data row of c into t (features in file order, label aside). */
static int s_rows(s_csv *c, int ncol, int lc, s_table *t, char *err, size_t errlen)
{
    t->nf = lc >= 0 ? ncol - 1 : ncol;
    float *f = nn_xmalloc((size_t)t->nf * sizeof(float));
    char *lab = nn_xstrdup("");
    int rc = 0;
    while (rc == 0 && s_row_ahead(c)) {
        size_t line = c->line;
        int col = 0, k = 0;
        do {
            if (s_field(c, err, errlen) != 0) {
                rc = -1;
                break;
            }
            if (col >= ncol) {
                rc = nn_errf(err, errlen, "%s:%zu: more than the header's %d columns", c->path,
                             line, ncol);
                break;
            }
            if (col == lc) {
                free(lab);
                lab = nn_xstrdup(c->tmp);
                if (!*lab)
                    rc = nn_errf(err, errlen, "%s:%zu: column %d: missing label", c->path,
                                 line, col + 1);
            } else {
                rc = s_number(c, line, col, &f[k++], err, errlen);
            }
            col++;
        } while (rc == 0 && !c->eol);
        if (rc == 0 && col < ncol)
            rc = nn_errf(err, errlen, "%s:%zu: %d columns, the header has %d", c->path, line,
                         col, ncol);
        if (rc == 0)
            s_table_push(t, f, lab, line);
    }
    free(f);
    free(lab);
    return rc;
}

/* Reads path into t.  nf > 0: the table must have nf feature columns and
 * may have a label column besides (used when it has nf + 1 columns). */
static int s_read_table_nf(const char *path, const char *label, int nf, s_table *t, char *err,
                           size_t errlen)
{
    memset(t, 0, sizeof *t);
    s_csv c = {.path = path, .line = 1};
    uint8_t *buf;
    if (nn_data_read_file(path, S_MAX_FILE, &buf, &c.len, err, errlen) != 0)
        return -1;
    c.b = (const char *)buf;
    int ncol, lc;
    int rc = s_header(&c, label, &ncol, &lc, err, errlen);
    if (rc == 0 && nf > 0 && ncol != nf && ncol != nf + 1)
        rc = nn_errf(err, errlen, "%s:1: %d columns, expected %d features (and perhaps a "
                     "label)", path, ncol, nf);
    if (rc == 0 && nf > 0 && ncol == nf)
        lc = -1;
    if (rc == 0)
        rc = s_rows(&c, ncol, lc, t, err, errlen);
    if (rc == 0 && t->rows == 0)
        rc = nn_errf(err, errlen, "%s: no data rows after the header", path);
    free(buf);
    free(c.tmp);
    if (rc != 0)
        s_table_free(t);
    return rc;
}

static int s_read_table(const char *path, const char *label, s_table *t, char *err,
                        size_t errlen)
{
    return s_read_table_nf(path, label, 0, t, err, errlen);
}

int nn_data_load_csv_rows(const char *path, const char *label, int nf, nn_dataset *d,
                          size_t **lines, char *err, size_t errlen)
{
    s_table t;
    memset(d, 0, sizeof *d);
    *lines = NULL;
    if (s_read_table_nf(path, label, nf, &t, err, errlen) != 0)
        return -1;
    d->n = t.rows;
    d->c = t.nf;
    d->h = d->w = 1;
    d->xf = t.xf;
    d->y = nn_xcalloc(t.rows + 1, 1);
    *lines = t.line;
    t.xf = NULL;
    t.line = NULL;
    s_table_free(&t);
    snprintf(d->name, sizeof d->name, "csv");
    return 0;
}

/* 1 if s is an integer 0..255 (value in *v). */
static int s_is_label_int(const char *s, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || *end || errno || x < 0 || x > 255)
        return 0;
    *v = (int)x;
    return 1;
}

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Class names: the distinct training labels, sorted; NULL and 0 when
 * every label in both tables is an integer 0..255. */
static int s_names(const s_table *tr, const s_table *te, char ***names, int *nnames,
                   const char *path, char *err, size_t errlen)
{
    int v, numeric = 1;
    for (size_t i = 0; numeric && i < tr->rows; i++)
        numeric = s_is_label_int(tr->lab[i], &v);
    for (size_t i = 0; numeric && i < te->rows; i++)
        numeric = s_is_label_int(te->lab[i], &v);
    *names = NULL;
    *nnames = 0;
    if (numeric)
        return 0;
    char **all = nn_xmalloc(tr->rows * sizeof *all);
    memcpy(all, tr->lab, tr->rows * sizeof *all);
    qsort(all, tr->rows, sizeof *all, s_cmp_str);
    char **u = nn_xmalloc(257 * sizeof *u);
    int n = 0;
    for (size_t i = 0; i < tr->rows; i++) {
        if (i && !strcmp(all[i], all[i - 1]))
            continue;
        if (n == 256) {
            free(all);
            for (int k = 0; k < n; k++)
                free(u[k]);
            free(u);
            return nn_errf(err, errlen, "%s: more than 256 distinct labels", path);
        }
        u[n++] = nn_xstrdup(all[i]);
    }
    free(all);
    *names = u;
    *nnames = n;
    return 0;
}

/* Moves rows[which] of t into d with labels by number or by name. */
static int s_to_set(const s_table *t, const uint8_t *pick, uint8_t which, char **names,
                    int nnames, const char *path, nn_dataset *d, char *err, size_t errlen)
{
    size_t n = 0, nf = (size_t)t->nf;
    for (size_t i = 0; i < t->rows; i++)
        n += !pick || pick[i] == which;
    d->n = n;
    d->c = t->nf;
    d->h = d->w = 1;
    d->xf = nn_xmalloc((n * nf + 1) * sizeof(float));
    d->y = nn_xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < t->rows; i++) {
        if (pick && pick[i] != which)
            continue;
        int v = -1;
        if (!names) {
            s_is_label_int(t->lab[i], &v);
        } else {
            char **hit = bsearch(&t->lab[i], names, (size_t)nnames, sizeof *names, s_cmp_str);
            if (!hit)
                return nn_errf(err, errlen, "%s:%zu: label '%.60s' does not occur in the "
                               "training data", path, t->line[i], t->lab[i]);
            v = (int)(hit - names);
        }
        memcpy(d->xf + k * nf, t->xf + i * nf, nf * sizeof(float));
        d->y[k++] = (uint8_t)v;
        if (v + 1 > d->classes)
            d->classes = v + 1;
    }
    snprintf(d->name, sizeof d->name, "csv");
    return 0;
}

/* Splits "TRAIN[,test=TEST][,label=COLUMN]" (keys in any order). */
static int s_args(const char *args, char *train, char *test, char *label, size_t cap,
                  char *err, size_t errlen)
{
    train[0] = test[0] = label[0] = 0;
    const char *t = strstr(args, ",test="), *l = strstr(args, ",label=");
    const char *end = args + strlen(args);
    const char *first = t && (!l || t < l) ? t : l;
    size_t tl = (size_t)((first ? first : end) - args);
    if (tl == 0 || tl >= cap)
        return nn_errf(err, errlen, "csv:%s: expected csv:TRAIN.csv[,test=TEST.csv]"
                       "[,label=COLUMN]", args);
    memcpy(train, args, tl);
    train[tl] = 0;
    if (t) {
        const char *v = t + 6, *e = l && l > t ? l : end;
        if (e == v || (size_t)(e - v) >= cap)
            return nn_errf(err, errlen, "csv:%s: empty or too long test= file", args);
        memcpy(test, v, (size_t)(e - v));
        test[e - v] = 0;
    }
    if (l) {
        const char *v = l + 7, *e = t && t > l ? t : end;
        if (e == v || (size_t)(e - v) >= cap)
            return nn_errf(err, errlen, "csv:%s: empty or too long label= column", args);
        memcpy(label, v, (size_t)(e - v));
        label[e - v] = 0;
    }
    return 0;
}

int nn_data_load_csv(const char *args, nn_dataset *train, nn_dataset *test, char *err,
                     size_t errlen)
{
    char tp[4096], vp[4096], lab[4096];
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (s_args(args, tp, vp, lab, sizeof tp, err, errlen) != 0)
        return -1;
    s_table tt = {0}, vt = {0};
    uint8_t *pick = NULL;
    char **names = NULL;
    int nnames = 0, rc = s_read_table(tp, lab[0] ? lab : NULL, &tt, err, errlen);
    if (rc == 0 && vp[0]) {
        rc = s_read_table(vp, lab[0] ? lab : NULL, &vt, err, errlen);
        if (rc == 0 && vt.nf != tt.nf)
            rc = nn_errf(err, errlen, "%s: %d feature columns, %s has %d", vp, vt.nf, tp, tt.nf);
    } else if (rc == 0) { /* every fifth row is the test set */
        pick = nn_xmalloc(tt.rows);
        for (size_t i = 0; i < tt.rows; i++)
            pick[i] = i % 5 == 4;
    }
    if (rc == 0)
        rc = s_names(&tt, &vt, &names, &nnames, tp, err, errlen);
    if (rc == 0)
        rc = s_to_set(&tt, pick, 0, names, nnames, tp, train, err, errlen);
    if (rc == 0)
        rc = pick ? s_to_set(&tt, pick, 1, names, nnames, tp, test, err, errlen)
                  : s_to_set(&vt, NULL, 0, names, nnames, vp, test, err, errlen);
    if (rc == 0 && (train->n == 0 || test->n == 0))
        rc = nn_errf(err, errlen, "%s: %zu training and %zu test rows (both must be > 0)", tp,
                     train->n, test->n);
    free(pick);
    s_table_free(&tt);
    s_table_free(&vt);
    if (rc != 0) {
        for (int k = 0; k < nnames; k++)
            free(names[k]);
        free(names);
        nn_dataset_free(train);
        nn_dataset_free(test);
        return -1;
    }
    int classes = names ? nnames : (train->classes > test->classes ? train->classes : test->classes);
    train->classes = test->classes = classes;
    train->class_names = names;
    if (names) { /* each set owns its copy */
        test->class_names = nn_xcalloc((size_t)nnames, sizeof(char *));
        for (int k = 0; k < nnames; k++)
            test->class_names[k] = nn_xstrdup(names[k]);
    }
    return 0;
}
