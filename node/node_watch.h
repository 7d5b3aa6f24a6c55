/* node_watch — what `lpgossip watch` does besides drawing: polls the
 * /status of many nodes at once over plain TCP sockets (a minimal HTTP/1.0
 * client, every step bounded), reads the JSON they answer, and keeps one
 * row per node with its state.
 *
 * Owns:    node_watch_target (an address and what was last learnt of the
 *          node behind it) and the bodies of one poll.
 * Exposes: node_watch_target_init (host:port, resolved once),
 *          node_watch_poll (GET a path of every target in parallel within
 *          one deadline: non-blocking connect, send, read up to
 *          NODE_WATCH_MAX_BODY bytes), node_watch_update (a body or a
 *          failure into the row), node_watch_json_* (top-level keys of a
 *          JSON object), node_watch_progress.
 * Callers: node_cmd_watch.c, tests/test_node_live.c.
 *
 * Everything a node answers is outside input: a body that is not a JSON
 * object with our fields leaves the row marked "bad answer", never a crash;
 * a node that does not answer within the deadline (refused, silent, slow)
 * is "down", or stays "finished" when it said so before it went away.
 */
#ifndef NODE_WATCH_H
#define NODE_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define NODE_WATCH_MAX_BODY (256 * 1024)
#define NODE_WATCH_MAX_KEYS 96

typedef struct {
    /* ---- address (node_watch_target_init) ---- */
    char                    label[96];    /* host:port as given */
    char                    host[64];
    struct sockaddr_storage addr;
    socklen_t               addrlen;
    /* ---- the last poll ---- */
    int      answered;       /* 1: a 200 with a valid status object */
    char     error[96];      /* why not */
    /* ---- what the node said last (kept while it does not answer) ---- */
    int      seen;           /* it answered at least once */
    char     state[16];      /* training waiting finished stopped failed, or down */
    char     run[20], node[64], slowest[64];
    int      rank, peers_up, neighbours;
    uint64_t iteration, iterations, slowest_staleness;
    double   epoch, loss, accuracy, mb_sent, seconds; /* accuracy NaN: not evaluated */
} node_watch_target;

/* spec "HOST:PORT" ([V6]:PORT too), resolved now (names through the
 * resolver, once).  0, or -1 with a message. */
int node_watch_target_init(node_watch_target *t, const char *spec, char *err, size_t errlen);

/* GET path from every target at once; returns when all are done or at
 * timeout_s.  body[i] (owned by the caller, NUL-terminated, NULL on
 * failure: then t[i].error says why) is the body of a 200 answer. */
void node_watch_poll(node_watch_target *t, int n, const char *path, double timeout_s,
                     char **body);

/* The result of one poll of t into its row (body NULL: no answer). */
void node_watch_update(node_watch_target *t, const char *body);

/* A top-level member of a JSON object: key, and its value's text. */
typedef struct {
    const char *key, *val;
    size_t      keylen, vallen;
} node_watch_kv;

/* The members of the object in s[0..n) (nested values skipped, depth at
 * most 32) into kv[0..max).  Their count, or -1 when s is not one
 * well-formed JSON object (what is wrong: why). */
int node_watch_json_top(const char *s, size_t n, node_watch_kv *kv, int max, char *why,
                        size_t whylen);
/* The number of member key (NaN when absent, null or not a number). */
double node_watch_json_num(const node_watch_kv *kv, int n, const char *key);
/* The string of member key into out (unescaped; \u escapes become '?'),
 * or "" when absent or not a string. */
void node_watch_json_str(const node_watch_kv *kv, int n, const char *key, char *out,
                         size_t outlen);

/* Progress of the run over the targets seen: fraction done (0..1) and
 * the seconds left at each node's own rate, its largest (NaN: unknown). */
void node_watch_progress(const node_watch_target *t, int n, double *done, double *eta_s);

#endif
