/* node_watch — see node_watch.h. */
#include "node/node_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn_core.h"

/* ---- addresses ------------------------------------------------------------ */

int node_watch_target_init(node_watch_target *t, const char *spec, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    snprintf(t->state, sizeof t->state, "down");
    t->accuracy = NAN;
    t->loss = NAN;
    const char *colon = strrchr(spec, ':');
    const char *h = spec, *he = colon;
    if (spec[0] == '[') { /* [v6]:port */
        h = spec + 1;
        he = strchr(spec, ']');
        if (!he || he[1] != ':')
            return nn_errf(err, errlen, "'%s': expected [ADDRESS]:PORT", spec);
        colon = he + 1;
    }
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || he == h || (size_t)(he - h) >= sizeof t->host || !colon[1] || *end ||
        port < 1 || port > 65535)
        return nn_errf(err, errlen, "'%s': expected HOST:PORT (port 1..65535)", spec);
    memcpy(t->host, h, (size_t)(he - h));
    t->host[he - h] = '\0';
    snprintf(t->label, sizeof t->label, "%s", spec);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%ld", port);
    int rc = getaddrinfo(t->host, ps, &hints, &ai);
    if (rc != 0 || !ai)
        return nn_errf(err, errlen, "'%s': cannot resolve %s: %s", spec, t->host,
                       gai_strerror(rc));
    memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
    t->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* ---- the parallel HTTP/1.0 GET ------------------------------------------- */

typedef struct {
    int    fd;
    int    phase;     /* 0 connecting, 1 sending, 2 reading, 3 done */
    char   req[256];
    size_t reqlen, sent;
    char  *buf;
    size_t len;
} s_conn;

static void s_fail(node_watch_target *t, s_conn *c, const char *what)
{
    snprintf(t->error, sizeof t->error, "%s", what);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->phase = 3;
}

static void s_open(node_watch_target *t, s_conn *c, const char *path)
{
    c->buf = nn_xmalloc(NODE_WATCH_MAX_BODY + 1);
    c->fd = -1;
    if (!t->addrlen) {
        s_fail(t, c, "address not known yet");
        return;
    }
    c->fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->reqlen = (size_t)snprintf(c->req, sizeof c->req, "GET %s HTTP/1.0\r\nHost: %s\r\n"
                                 "Connection: close\r\n\r\n", path, t->host);
    if (c->fd < 0) {
        s_fail(t, c, strerror(errno));
        return;
    }
    if (connect(c->fd, (struct sockaddr *)&t->addr, t->addrlen) != 0 && errno != EINPROGRESS)
        s_fail(t, c, strerror(errno));
}

/* One step of c after poll said revents. */
static void s_step(node_watch_target *t, s_conn *c, short revents)
{
    if (c->phase == 0) {
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e) {
            s_fail(t, c, strerror(e));
            return;
        }
        c->phase = 1;
    }
    if (c->phase == 1 && (revents & POLLOUT)) {
        ssize_t k = send(c->fd, c->req + c->sent, c->reqlen - c->sent, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN) {
            s_fail(t, c, strerror(errno));
            return;
        }
        c->sent += k > 0 ? (size_t)k : 0;
        c->phase = c->sent == c->reqlen ? 2 : 1;
        return;
    }
    if (c->phase == 2 && (revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t k = recv(c->fd, c->buf + c->len, NODE_WATCH_MAX_BODY - c->len, 0);
        if (k < 0 && errno != EAGAIN) {
            s_fail(t, c, strerror(errno));
            return;
        }
        if (k == 0) { /* the end of the answer */
            close(c->fd);
            c->fd = -1;
            c->phase = 3;
            return;
        }
        c->len += k > 0 ? (size_t)k : 0;
        if (c->len == NODE_WATCH_MAX_BODY)
            s_fail(t, c, "answer too large");
    }
}

/* The body of a complete "HTTP/1.x 200" answer in c (moved out), else
 * NULL with t->error set. */
static char *s_body(node_watch_target *t, s_conn *c)
{
    if (c->fd >= 0)
        s_fail(t, c, "no answer in time");
    if (t->error[0])
        return NULL;
    c->buf[c->len] = '\0';
    int status = 0;
    char *sep = strstr(c->buf, "\r\n\r\n");
    if (sscanf(c->buf, "HTTP/1.%*1[01] %3d", &status) != 1 || !sep) {
        snprintf(t->error, sizeof t->error, "not an HTTP answer");
        return NULL;
    }
    if (status != 200) {
        snprintf(t->error, sizeof t->error, "HTTP status %d", status);
        return NULL;
    }
    sep += 4;
    size_t n = c->len - (size_t)(sep - c->buf);
    memmove(c->buf, sep, n + 1);
    char *b = c->buf;
    c->buf = NULL;
    return b;
}

void node_watch_poll(node_watch_target *t, int n, const char *path, double timeout_s,
                     char **body)
{
    s_conn *c = nn_xcalloc((size_t)n, sizeof *c);
    struct pollfd *p = nn_xcalloc((size_t)n, sizeof *p);
    double until = nn_now() + timeout_s;
    for (int i = 0; i < n; i++) {
        t[i].error[0] = '\0';
        s_open(&t[i], &c[i], path);
    }
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            p[i] = (struct pollfd){c[i].phase < 3 ? c[i].fd : -1,
                                   (short)(c[i].phase < 2 ? POLLOUT : POLLIN), 0};
            live += c[i].phase < 3;
        }
        double left = until - nn_now();
        if (!live || left <= 0)
            break;
        if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++)
            if (p[i].revents && c[i].phase < 3)
                s_step(&t[i], &c[i], p[i].revents);
    }
    for (int i = 0; i < n; i++) {
        body[i] = s_body(&t[i], &c[i]);
        free(c[i].buf);
    }
    free(p);
    free(c);
}

/* ---- JSON: the top level of one object ---------------------------------- */

static size_t s_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* End of the string starting at s[i] == '"' (index after the closing
 * quote), or 0. */
static size_t s_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
        else if ((unsigned char)s[i] < 0x20)
            return 0;
    }
    return 0;
}

/* End of the value starting at s[i] (after skipping nested containers), or
 * 0 when malformed. */
static size_t s_value(const char *s, size_t n, size_t i, int depth)
{
    if (i >= n || depth > 32)
        return 0;
    if (s[i] == '"')
        return s_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        char close = s[i] == '{' ? '}' : ']';
        i = s_ws(s, n, i + 1);
        if (i < n && s[i] == close)
            return i + 1;
        for (;;) {
            if (close == '}') {
                if (i >= n || s[i] != '"' || !(i = s_string(s, n, i)))
                    return 0;
                i = s_ws(s, n, i);
                if (i >= n || s[i] != ':')
                    return 0;
                i = s_ws(s, n, i + 1);
            }
            if (!(i = s_value(s, n, i, depth + 1)))
                return 0;
            i = s_ws(s, n, i);
            if (i < n && s[i] == close)
                return i + 1;
            if (i >= n || s[i] != ',')
                return 0;
            i = s_ws(s, n, i + 1);
        }
    }
    size_t j = i; /* number or literal */
    while (j < n && s[j] && strchr("+-.0123456789eEtruefalsn", s[j]))
        j++;
    return j > i ? j : 0;
}

int node_watch_json_top(const char *s, size_t n, node_watch_kv *kv, int max, char *why,
                        size_t whylen)
{
    size_t i = s_ws(s, n, 0), end = s_value(s, n, i, 0);
    if (i >= n || s[i] != '{' || !end || s_ws(s, n, end) != n)
        return nn_errf(why, whylen, "not one JSON object");
    int k = 0;
    i = s_ws(s, n, i + 1);
    while (i < end - 1 && s[i] == '"') {
        size_t ke = s_string(s, n, i);
        size_t v = s_ws(s, n, s_ws(s, n, ke) + 1);
        size_t ve = s_value(s, n, v, 1);
        if (k < max)
            kv[k++] = (node_watch_kv){s + i + 1, s + v, ke - i - 2, ve - v};
        i = s_ws(s, n, ve);
        i = s_ws(s, n, i + (s[i] == ','));
    }
    return k;
}

static const node_watch_kv *s_find(const node_watch_kv *kv, int n, const char *key)
{
    size_t kl = strlen(key);
    for (int k = 0; k < n; k++)
        if (kv[k].keylen == kl && !memcmp(kv[k].key, key, kl))
            return &kv[k];
    return NULL;
}

double node_watch_json_num(const node_watch_kv *kv, int n, const char *key)
{
    const node_watch_kv *m = s_find(kv, n, key);
    char tmp[48];
    if (!m || m->vallen == 0 || m->vallen >= sizeof tmp || !strchr("-0123456789", m->val[0]))
        return NAN;
    memcpy(tmp, m->val, m->vallen);
    tmp[m->vallen] = '\0';
    char *end;
    double v = strtod(tmp, &end);
    return *end ? NAN : v;
}

void node_watch_json_str(const node_watch_kv *kv, int n, const char *key, char *out,
                         size_t outlen)
{
    const node_watch_kv *m = s_find(kv, n, key);
    size_t o = 0;
    if (m && m->vallen >= 2 && m->val[0] == '"') {
        for (size_t i = 1; i + 1 < m->vallen && o + 1 < outlen; i++) {
            char c = m->val[i];
            if (c == '\\') {
                c = m->val[++i];
                if (c == 'u')
                    i += 4, c = '?';
                else if (c == 'n' || c == 't' || c == 'r' || c == 'b' || c == 'f')
                    c = ' ';
            }
            out[o++] = c;
        }
    }
    if (outlen)
        out[o < outlen ? o : outlen - 1] = '\0';
}

/* ---- rows --------------------------------------------------------------- */

static uint64_t s_u64(double v)
{
    return isfinite(v) && v >= 0 && v < 1.8e19 ? (uint64_t)v : 0;
}

void node_watch_update(node_watch_target *t, const char *body)
{
    node_watch_kv kv[NODE_WATCH_MAX_KEYS];
    char why[64], state[16] = "";
    int n = body ? node_watch_json_top(body, strlen(body), kv, NODE_WATCH_MAX_KEYS, why,
                                       sizeof why) : -1;
    if (n >= 0) {
        node_watch_json_str(kv, n, "state", state, sizeof state);
        if (!state[0] || !isfinite(node_watch_json_num(kv, n, "iteration")))
            n = -1, snprintf(why, sizeof why, "no state or iteration");
    }
    t->answered = n >= 0;
    if (!t->answered) {
        if (body)
            snprintf(t->error, sizeof t->error, "bad answer: %s", why);
        if (strcmp(t->state, "finished") && strcmp(t->state, "stopped"))
            snprintf(t->state, sizeof t->state, "down");
        return;
    }
    t->seen = 1;
    snprintf(t->state, sizeof t->state, "%s", state);
    node_watch_json_str(kv, n, "run", t->run, sizeof t->run);
    node_watch_json_str(kv, n, "node", t->node, sizeof t->node);
    node_watch_json_str(kv, n, "slowest", t->slowest, sizeof t->slowest);
    t->rank = (int)node_watch_json_num(kv, n, "rank");
    t->peers_up = (int)s_u64(node_watch_json_num(kv, n, "peers_up"));
    t->neighbours = (int)s_u64(node_watch_json_num(kv, n, "neighbour_count"));
    t->iteration = s_u64(node_watch_json_num(kv, n, "iteration"));
    t->iterations = s_u64(node_watch_json_num(kv, n, "iterations"));
    t->slowest_staleness = s_u64(node_watch_json_num(kv, n, "slowest_staleness"));
    t->epoch = node_watch_json_num(kv, n, "epoch");
    t->loss = node_watch_json_num(kv, n, "loss");
    t->accuracy = node_watch_json_num(kv, n, "test_accuracy");
    t->mb_sent = node_watch_json_num(kv, n, "bytes_sent") / 1e6;
    t->seconds = node_watch_json_num(kv, n, "seconds");
}

void node_watch_progress(const node_watch_target *t, int n, double *done, double *eta_s)
{
    double it = 0, all = 0, eta = NAN;
    for (int i = 0; i < n; i++) {
        if (!t[i].seen || !t[i].iterations)
            continue;
        it += (double)(t[i].iteration < t[i].iterations ? t[i].iteration : t[i].iterations);
        all += (double)t[i].iterations;
        double left = (double)t[i].iterations - (double)t[i].iteration, e;
        if (left <= 0 || !strcmp(t[i].state, "finished"))
            e = 0;
        else if (t[i].iteration > 0 && t[i].seconds > 0)
            e = left * t[i].seconds / (double)t[i].iteration;
        else
            continue; /* no rate yet */
        if (isnan(eta) || e > eta)
            eta = e;
    }
    *done = all > 0 ? it / all : 0;
    *eta_s = eta;
}
