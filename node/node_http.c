/* node_http — see node_http.h. */
#include "node/node_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_core.h"

struct node_http {
    struct MHD_Daemon *d;
    node_live         *live;
    int                port;
};

static enum MHD_Result s_reply(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                               const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result s_text(struct MHD_Connection *c, unsigned status, const char *msg)
{
    size_t n = strlen(msg);
    char *body = nn_xmalloc(n + 1);
    memcpy(body, msg, n + 1);
    return s_reply(c, status, body, n, "text/plain; charset=utf-8");
}

/* The request handler: runs on the HTTP thread only. */
static enum MHD_Result s_handle(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls)
{
    node_http *h = cls;
    (void)version;
    (void)upload;
    if (*con_cls == NULL) { /* headers read: answer before any body */
        *con_cls = h;
        if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
            return s_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    if (*upload_size) /* a GET with a body: not ours */
        return MHD_NO;
    node_live_snap *s = nn_xmalloc(sizeof *s);
    node_live_phase ph;
    double ph_s;
    node_live_read(h->live, s, &ph, &ph_s);
    const char *state = node_live_state(ph, ph_s);
    size_t len;
    char *body;
    enum MHD_Result rc;
    if (!strcmp(url, "/metrics")) {
        body = node_live_prometheus(s, &len);
        rc = s_reply(c, MHD_HTTP_OK, body, len, "text/plain; version=0.0.4; charset=utf-8");
    } else if (!strcmp(url, "/status")) {
        body = node_live_json(s, state, ph_s, &len);
        rc = s_reply(c, MHD_HTTP_OK, body, len, "application/json");
    } else if (!strcmp(url, "/")) {
        rc = s_text(c, MHD_HTTP_OK, "lpgossip node: /metrics (Prometheus), /status (JSON)\n");
    } else {
        rc = s_text(c, MHD_HTTP_NOT_FOUND, "not found: /metrics, /status\n");
    }
    free(s);
    return rc;
}

/* bind:port into a sockaddr (IPv4, or IPv6 when bind has a ':'). */
static int s_addr(const char *bind, int port, struct sockaddr_storage *sa, int *v6, char *err,
                  size_t errlen)
{
    memset(sa, 0, sizeof *sa);
    *v6 = strchr(bind, ':') != NULL;
    if (*v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)sa;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, bind, &a->sin6_addr) == 1)
            return 0;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)sa;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, bind, &a->sin_addr) == 1)
            return 0;
    }
    return nn_errf(err, errlen, "--metrics-bind '%s': not an IPv4 or IPv6 address "
                   "(e.g. 127.0.0.1, 0.0.0.0, ::)", bind);
}

node_http *node_http_new(node_live *live, const char *bind, int port, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    int v6;
    if (s_addr(bind, port, &sa, &v6, err, errlen) != 0)
        return NULL;
    node_http *h = nn_xcalloc(1, sizeof *h);
    h->live = live;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | (v6 ? MHD_USE_IPv6 : 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread inherits this mask */
    errno = 0;
    h->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, s_handle, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)NODE_HTTP_MAX_CONN,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)NODE_HTTP_MAX_PER_IP,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)NODE_HTTP_MEMORY,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)NODE_HTTP_TIMEOUT_S,
                            MHD_OPTION_END);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!h->d) {
        nn_errf(err, errlen, "cannot serve metrics on %s port %d: %s", bind, port,
                e ? strerror(e) : "libmicrohttpd refused to start");
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : port;
    return h;
}

void node_http_destroy(node_http **self_p)
{
    if (!self_p || !*self_p)
        return;
    MHD_stop_daemon((*self_p)->d);
    free(*self_p);
    *self_p = NULL;
}

int node_http_port(const node_http *h)
{
    return h->port;
}

int node_http_parse_port(const char *spec, int *port, int *offset, char *err, size_t errlen)
{
    *port = 0;
    *offset = 0;
    if (!strcmp(spec, "auto")) {
        *port = -1;
        return 0;
    }
    const char *p = spec[0] == '+' ? spec + 1 : spec;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (p[0] < '0' || p[0] > '9' || *end || errno || v < 0 || v > 65535 ||
        (spec[0] == '+' && v == 0))
        return nn_errf(err, errlen, "--metrics-port '%s': expected 0 (off), a port 1..65535, "
                       "auto, or +K (this node's TCP port + K)", spec);
    if (spec[0] == '+')
        *offset = (int)v;
    else
        *port = (int)v;
    return 0;
}
