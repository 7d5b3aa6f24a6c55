/* node_http — the HTTP endpoint of a node (`--metrics-port`): /metrics
 * (Prometheus text exposition) and /status (JSON) of a node_live, served
 * by libmicrohttpd on its own thread.
 *
 * Owns:    one MHD daemon: a listening socket on --metrics-bind and one
 *          internal polling thread (epoll), created with every signal
 *          blocked so that SIGINT/SIGTERM keep going to the training thread.
 * Exposes: node_http_new/destroy, node_http_port (the port bound, for
 *          `auto`), node_http_parse_port (the flag's syntax).
 * Callers: node_cmd_node.c, node_opts.c (the flag), tests/test_node_live.c.
 *
 * The training loop never waits for it: the HTTP thread only copies the
 * latest snapshot (node_live_read) and formats it.  Requests from the
 * outside are bounded by MHD's options: at most NODE_HTTP_MAX_CONN
 * connections (NODE_HTTP_MAX_PER_IP from one address; the others are
 * closed at accept), NODE_HTTP_MEMORY bytes per connection (a request
 * whose header does not fit is answered 431 and closed), an idle timeout
 * of NODE_HTTP_TIMEOUT_S seconds (slow clients are dropped).  Only GET
 * and HEAD of /metrics, /status and / are answered (others: 404/405).
 */
#ifndef NODE_HTTP_H
#define NODE_HTTP_H

#include <stddef.h>

#include "node/node_live.h"

#define NODE_HTTP_MAX_CONN   64
#define NODE_HTTP_MAX_PER_IP 48
#define NODE_HTTP_MEMORY     (32 * 1024)
#define NODE_HTTP_TIMEOUT_S  10

typedef struct node_http node_http;

/* Serves live (borrowed; it must outlive the server) on bind:port (bind:
 * an IPv4 or IPv6 address, e.g. 127.0.0.1, 0.0.0.0, ::; port 0: a free
 * one).  NULL with a message (bad address, port taken). */
node_http *node_http_new(node_live *live, const char *bind, int port, char *err, size_t errlen);
/* Stops the thread and closes every connection.  Safe on NULL. */
void node_http_destroy(node_http **self_p);
int  node_http_port(const node_http *h);

/* --metrics-port SPEC: "0" off (*port 0), "N" (1..65535), "auto" (*port
 * -1: a free port), "+K" (*offset K, 1..65535: this node's TCP port + K,
 * so that a topology's endpoints tell where every node serves).  0, or -1
 * with a message. */
int node_http_parse_port(const char *spec, int *port, int *offset, char *err, size_t errlen);

#endif
