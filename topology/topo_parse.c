/* topo_parse — topology files: YAML (libyaml document API) -> topo.
 *
 * Owns:    the file schema (documented for users in docs/topology.md),
 *          topo_load and topo_parse, the document and its nodes, and the
 *          messages and YAML helpers of topo_parse_int.h; the GRAPH
 *          mappings are read in topo_parse_graph.c.  Every error names the
 *          file and the line of the offending YAML node ("ring.yaml:7: ...").
 * Callers: node/ (`lpgossip topology`, the node and launcher commands),
 *          tests, the fuzz target tests/fuzz/fuzz_topology.c.
 *
 * Schema in brief (top-level mapping):
 *   description: free text                       (optional)
 *   security:    none | curve                    (optional, default none)
 *   discovery:   none | lan                      (optional, default none;
 *                lan: endpoints may be left out, nodes find each other by
 *                UDP broadcast, see gossip/gossip_discovery.h)
 *   discovery_port: 1..65535                     (lan only, default 47820)
 *   nodes:       COUNT | [ID | {id, endpoint | host+port, key}]
 *   graph:       GRAPH          -- exactly one of graph / schedule
 *   schedule:    [GRAPH, ...]   -- used in turn, iteration t uses t % len
 * GRAPH is a mapping with exactly one of
 *   generator: directed_ring|undirected_ring|torus|exponential|complete|star|
 *              circulant  (+ rows, cols | hub | offsets; optional self)
 *   edges:     [{from, to (id or [ids]), weight}] + self (number or {id: w}),
 *              or weights: uniform (+ optional self number)
 *   matrix:    n rows of n numbers, row i = what node i takes from each j
 * Numbers may be written as fractions: 1/3.
 *
 * Input is untrusted: nothing here asserts on it, sizes are bounded by
 * TOPO_MAX_NODES / TOPO_MAX_SCHED / TOPO_MAX_ENTRIES, the YAML itself by
 * S_MAX_FILE_BYTES / S_MAX_DEPTH / S_MAX_YAML_NODES (checked on the event
 * stream before the document is built), and the traversal
 * is schema-driven (no recursion over the YAML tree, so aliases cannot make
 * it blow up).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "nn/nn_core.h"
#include "topology/topo.h"
#include "topology/topo_internal.h"
#include "topology/topo_parse_int.h"
#include "topology/topo_yaml.h"

#define S_MAX_FILE_BYTES (16u << 20)
/* Hostile YAML (docs/topology.md, "Limits"): the schema nests at most 6
 * collections deep and needs at most about one YAML node per weight; a
 * first pass over libyaml's events refuses anything deeper or larger
 * before the document is built.  libyaml's scanner costs O(depth) per
 * token in flow collections (quadratic overall: 100,000 nested '[' took
 * 15 s) and the document about 160 bytes per node. */
#define S_MAX_DEPTH      32
#define S_MAX_YAML_NODES (2u << 20)

/* ---- messages and YAML helpers ---------------------------------------- */

/* "NAME:LINE: message" (line 0: no line); returns -1. */
static int s_vfail(topo_pctx *c, int line, const char *fmt, va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (line > 0)
        return nn_errf(c->err, c->errlen, "%s:%d: %s", c->name, line, msg);
    return nn_errf(c->err, c->errlen, "%s: %s", c->name, msg);
}

int topo_p_fail(topo_pctx *c, const yaml_node_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_vfail(c, topo_yaml_line(at), fmt, ap);
    va_end(ap);
    return -1;
}

int topo_p_fail_line(topo_pctx *c, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s_vfail(c, line, fmt, ap);
    va_end(ap);
    return -1;
}

yaml_node_t *topo_p_get(topo_pctx *c, int index)
{
    return yaml_document_get_node(c->doc, index);
}

int topo_p_want_string(topo_pctx *c, const yaml_node_t *node, const char *what, const char **out)
{
    if (!node || node->type != YAML_SCALAR_NODE)
        return topo_p_fail(c, node, "%s: expected a string, got %s", what, node ? topo_yaml_type_name(node) : "nothing");
    *out = topo_yaml_scalar(node);
    if (!*out)
        return topo_p_fail(c, node, "%s: string contains a NUL byte", what);
    return 0;
}

/* A number: decimal ("0.25", "1e-1") or a fraction of two decimals ("1/3"). */
int topo_p_want_number(topo_pctx *c, const yaml_node_t *node, const char *what, double *out)
{
    char shown[64];
    if (!node || node->type != YAML_SCALAR_NODE)
        return topo_p_fail(c, node, "%s: expected a number, got %s", what, node ? topo_yaml_type_name(node) : "nothing");
    const char *s = topo_yaml_scalar(node);
    if (!s || !*s || strspn(s, "0123456789.eE+-/") != strlen(s) || strlen(s) > 64)
        return topo_p_fail(c, node, "%s: '%s' is not a number (write e.g. 0.25 or 1/4)", what,
                      topo_yaml_show(node, shown, sizeof shown));
    char buf[72];
    snprintf(buf, sizeof buf, "%s", s);
    char *slash = strchr(buf, '/'), *end;
    if (slash)
        *slash = 0;
    errno = 0;
    double a = strtod(buf, &end), b = 1.0;
    int ok = end != buf && *end == 0 && errno == 0;
    if (ok && slash) {
        errno = 0;
        b = strtod(slash + 1, &end);
        ok = end != slash + 1 && *end == 0 && errno == 0 && b != 0.0;
    }
    if (!ok || !isfinite(a / b))
        return topo_p_fail(c, node, "%s: '%s' is not a number (write e.g. 0.25 or 1/4)", what,
                      topo_yaml_show(node, shown, sizeof shown));
    *out = a / b;
    return 0;
}

int topo_p_want_int(topo_pctx *c, const yaml_node_t *node, const char *what, long lo, long hi, long *out)
{
    char shown[64];
    if (!node || node->type != YAML_SCALAR_NODE)
        return topo_p_fail(c, node, "%s: expected an integer, got %s", what, node ? topo_yaml_type_name(node) : "nothing");
    const char *s = topo_yaml_scalar(node);
    char *end = NULL;
    errno = 0;
    long v = s && *s && strspn(s, "0123456789+-") == strlen(s) ? strtol(s, &end, 10) : 0;
    if (!s || !*s || strspn(s, "0123456789+-") != strlen(s) || *end || errno)
        return topo_p_fail(c, node, "%s: '%s' is not an integer", what, topo_yaml_show(node, shown, sizeof shown));
    if (v < lo || v > hi)
        return topo_p_fail(c, node, "%s: %ld is out of range %ld..%ld", what, v, lo, hi);
    *out = v;
    return 0;
}

/* Looks up the keys of a mapping: slots[k] gets the value node of keys[k]
 * (NULL if absent), kslots[k] (if kslots) the key node. Unknown and
 * duplicate keys are errors. */
static int s_keys2(topo_pctx *c, const yaml_node_t *map, const char *where, const char *const *keys, int nkeys,
                   yaml_node_t **slots, yaml_node_t **kslots)
{
    char shown[64];
    for (int k = 0; k < nkeys; k++) {
        slots[k] = NULL;
        if (kslots)
            kslots[k] = NULL;
    }
    if (!map || map->type != YAML_MAPPING_NODE)
        return topo_p_fail(c, map, "%s: expected a mapping (key: value lines), got %s", where,
                      map ? topo_yaml_type_name(map) : "nothing");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *key = topo_p_get(c, p->key), *val = topo_p_get(c, p->value);
        const char *ks = topo_yaml_scalar(key);
        if (!ks)
            return topo_p_fail(c, key, "%s: keys must be plain words, got %s", where, key ? topo_yaml_type_name(key) : "nothing");
        int found = -1;
        for (int k = 0; k < nkeys; k++)
            if (!strcmp(ks, keys[k]))
                found = k;
        if (found < 0) {
            char allowed[512] = "";
            for (int k = 0; k < nkeys; k++) {
                size_t l = strlen(allowed);
                snprintf(allowed + l, sizeof allowed - l, "%s%s", k ? ", " : "", keys[k]);
            }
            return topo_p_fail(c, key, "%s: unknown key '%s' (expected one of: %s)", where, topo_yaml_show(key, shown, sizeof shown),
                          allowed);
        }
        if (slots[found])
            return topo_p_fail(c, key, "%s: duplicate key '%s'", where, ks);
        slots[found] = val ? val : key;
        if (kslots)
            kslots[found] = key;
    }
    return 0;
}

int topo_p_keys(topo_pctx *c, const yaml_node_t *map, const char *where, const char *const *keys, int nkeys,
                  yaml_node_t **slots)
{
    return s_keys2(c, map, where, keys, nkeys, slots, NULL);
}

/* ---- nodes ------------------------------------------------------------- */

static int s_valid_id(const char *s)
{
    size_t l = strlen(s);
    if (l == 0 || l >= TOPO_ID_MAX)
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == l;
}

static const char s_z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/* 40 Z85 characters whose 5-character groups each encode a 32-bit value. */
static int s_check_key(const char *k, char *why, size_t whylen)
{
    size_t l = strlen(k);
    if (l != 40) {
        snprintf(why, whylen, "has %zu characters, a Z85 CURVE public key has 40", l);
        return -1;
    }
    for (int g = 0; g < 8; g++) {
        unsigned long long v = 0;
        for (int i = 0; i < 5; i++) {
            const char *p = strchr(s_z85, k[g * 5 + i]);
            if (!p || !*p) {
                snprintf(why, whylen, "character %d ('%c') is not in the Z85 alphabet", g * 5 + i + 1,
                         k[g * 5 + i] >= 32 && k[g * 5 + i] < 127 ? k[g * 5 + i] : '?');
                return -1;
            }
            v = v * 85 + (unsigned long long)(p - s_z85);
        }
        if (v > 0xffffffffull) {
            snprintf(why, whylen, "characters %d..%d do not encode 4 bytes (not valid Z85)", g * 5 + 1, g * 5 + 5);
            return -1;
        }
    }
    return 0;
}

/* tcp://HOST:PORT with HOST a name, an IPv4 address, [IPv6] or *. */
static int s_check_endpoint(const char *e, char *why, size_t whylen)
{
    if (strncmp(e, "tcp://", 6) != 0) {
        snprintf(why, whylen, "must start with tcp://");
        return -1;
    }
    const char *h = e + 6, *colon;
    if (*h == '[') {
        const char *close = strchr(h, ']');
        if (!close || close == h + 1 || strspn(h + 1, "0123456789abcdefABCDEF:.") != (size_t)(close - h - 1)) {
            snprintf(why, whylen, "bad [IPv6] host");
            return -1;
        }
        colon = close + 1;
        if (*colon != ':') {
            snprintf(why, whylen, "needs :PORT after the host");
            return -1;
        }
    } else {
        colon = strrchr(h, ':');
        if (!colon || colon == h) {
            snprintf(why, whylen, "needs a host and :PORT (tcp://host:port)");
            return -1;
        }
        size_t hl = (size_t)(colon - h);
        if (strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_*") != hl) {
            snprintf(why, whylen, "bad host name");
            return -1;
        }
    }
    const char *port = colon + 1;
    size_t pl = strlen(port);
    long v = pl >= 1 && pl <= 5 && strspn(port, "0123456789") == pl ? strtol(port, NULL, 10) : 0;
    if (v < 1 || v > 65535) {
        snprintf(why, whylen, "port must be a number 1..65535");
        return -1;
    }
    return 0;
}

/* One entry of the `nodes:` list into nd. */
static int s_node_entry(topo_pctx *c, yaml_node_t *item, int idx, topo_node *nd)
{
    static const char *const keys[] = { "id", "endpoint", "host", "port", "key" };
    enum { K_ID, K_ENDPOINT, K_HOST, K_PORT, K_KEY, K_N };
    yaml_node_t *v[K_N];
    const char *s = NULL;
    char why[160], where[48];
    snprintf(where, sizeof where, "nodes[%d]", idx);
    if (item && item->type == YAML_SCALAR_NODE) {
        if (topo_p_want_string(c, item, where, &s) != 0)
            return -1;
        if (!s_valid_id(s))
            return topo_p_fail(c, item, "%s: bad node id '%s' (1..%d characters from A-Z a-z 0-9 _ . -)", where,
                          topo_yaml_show(item, why, sizeof why), TOPO_ID_MAX - 1);
        snprintf(nd->id, sizeof nd->id, "%s", s);
        return 0;
    }
    if (topo_p_keys(c, item, where, keys, K_N, v) != 0)
        return -1;
    if (!v[K_ID])
        return topo_p_fail(c, item, "%s: missing 'id'", where);
    if (topo_p_want_string(c, v[K_ID], "id", &s) != 0)
        return -1;
    if (!s_valid_id(s))
        return topo_p_fail(c, v[K_ID], "bad node id '%s' (1..%d characters from A-Z a-z 0-9 _ . -)",
                      topo_yaml_show(v[K_ID], why, sizeof why), TOPO_ID_MAX - 1);
    snprintf(nd->id, sizeof nd->id, "%s", s);
    if (v[K_ENDPOINT] && (v[K_HOST] || v[K_PORT]))
        return topo_p_fail(c, v[K_ENDPOINT], "node %s: give either endpoint or host and port, not both", nd->id);
    if (v[K_ENDPOINT]) {
        if (topo_p_want_string(c, v[K_ENDPOINT], "endpoint", &s) != 0)
            return -1;
        if (strlen(s) >= TOPO_ENDPOINT_MAX || s_check_endpoint(s, why, sizeof why) != 0)
            return topo_p_fail(c, v[K_ENDPOINT], "node %s: bad endpoint '%s': %s", nd->id,
                          topo_yaml_show(v[K_ENDPOINT], where, sizeof where),
                          strlen(s) >= TOPO_ENDPOINT_MAX ? "too long" : why);
        snprintf(nd->endpoint, sizeof nd->endpoint, "%s", s);
    } else if (v[K_HOST] || v[K_PORT]) {
        long port;
        if (!v[K_HOST] || !v[K_PORT])
            return topo_p_fail(c, v[K_HOST] ? v[K_HOST] : v[K_PORT], "node %s: host and port go together", nd->id);
        if (topo_p_want_string(c, v[K_HOST], "host", &s) != 0 ||
            topo_p_want_int(c, v[K_PORT], "port", 1, 65535, &port) != 0)
            return -1;
        char ep[TOPO_ENDPOINT_MAX + 32];
        int ipv6 = strchr(s, ':') != NULL;
        snprintf(ep, sizeof ep, "tcp://%s%s%s:%ld", ipv6 ? "[" : "", s, ipv6 ? "]" : "", port);
        if (strlen(ep) >= TOPO_ENDPOINT_MAX || s_check_endpoint(ep, why, sizeof why) != 0)
            return topo_p_fail(c, v[K_HOST], "node %s: bad host '%s'", nd->id, topo_yaml_show(v[K_HOST], where, sizeof where));
        memcpy(nd->endpoint, ep, strlen(ep) + 1);   /* length checked above */
    }
    if (v[K_KEY]) {
        if (topo_p_want_string(c, v[K_KEY], "key", &s) != 0)
            return -1;
        if (s_check_key(s, why, sizeof why) != 0)
            return topo_p_fail(c, v[K_KEY], "node %s: bad key length or syntax: the key %s", nd->id, why);
        snprintf(nd->pubkey, sizeof nd->pubkey, "%s", s);
    }
    return 0;
}

/* `nodes:` -> c->n and a fresh node array (owned by caller via *out). */
static int s_nodes(topo_pctx *c, yaml_node_t *v, topo_node **out)
{
    long n;
    *out = NULL;
    if (v->type == YAML_SCALAR_NODE) {
        if (topo_p_want_int(c, v, "nodes", 1, TOPO_MAX_NODES, &n) != 0)
            return -1;
        c->n = (int)n;
        c->node_line = nn_xcalloc((size_t)n, sizeof *c->node_line);
        *out = nn_xcalloc((size_t)n, sizeof **out);
        for (int i = 0; i < (int)n; i++) {
            snprintf((*out)[i].id, sizeof (*out)[i].id, "n%d", i);
            c->node_line[i] = topo_yaml_line(v);
        }
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return topo_p_fail(c, v, "nodes: expected a count or a list of nodes, got %s", topo_yaml_type_name(v));
    n = v->data.sequence.items.top - v->data.sequence.items.start;
    if (n < 1 || n > TOPO_MAX_NODES)
        return topo_p_fail(c, v, "nodes: %ld nodes, expected 1..%d", n, TOPO_MAX_NODES);
    c->n = (int)n;
    c->node_line = nn_xcalloc((size_t)n, sizeof *c->node_line);
    topo_node *nd = nn_xcalloc((size_t)n, sizeof *nd);
    *out = nd;
    for (int i = 0; i < (int)n; i++) {
        yaml_node_t *item = topo_p_get(c, v->data.sequence.items.start[i]);
        c->node_line[i] = topo_yaml_line(item);
        if (s_node_entry(c, item, i, &nd[i]) != 0)
            return -1;
        for (int j = 0; j < i; j++) {
            if (!strcmp(nd[i].id, nd[j].id))
                return topo_p_fail(c, item, "duplicate node id '%s' (first at line %d)", nd[i].id, c->node_line[j]);
            if (nd[i].endpoint[0] && !strcmp(nd[i].endpoint, nd[j].endpoint))
                return topo_p_fail(c, item, "node %s: duplicate endpoint %s (also node %s, line %d)", nd[i].id,
                              nd[i].endpoint, nd[j].id, c->node_line[j]);
            if (nd[i].pubkey[0] && !strcmp(nd[i].pubkey, nd[j].pubkey))
                return topo_p_fail(c, item, "nodes %s and %s (line %d) have the same public key: each node needs "
                              "its own key pair (lpgossip keygen), or one could speak for the other",
                              nd[j].id, nd[i].id, c->node_line[j]);
        }
    }
    return 0;
}

/* A node id scalar -> index, or an error naming the missing node. */
int topo_p_node_ref(topo_pctx *c, yaml_node_t *v, const char *what, int *out)
{
    const char *s = NULL;
    char shown[64];
    if (topo_p_want_string(c, v, what, &s) != 0)
        return -1;
    *out = topo_find_node(c->t, s);
    if (*out < 0)
        return topo_p_fail(c, v, "%s: '%s' is not a node (edge to a missing node?)", what, topo_yaml_show(v, shown, sizeof shown));
    return 0;
}

/* ---- the document ------------------------------------------------------ */

/* `discovery: none | lan` and `discovery_port: P` (only with lan: a port
 * that nothing reads is a mistake worth naming). */
static int s_discovery(topo_pctx *c, yaml_node_t *disc, yaml_node_t *port, int *discovery, long *out)
{
    const char *s = NULL;
    if (disc) {
        if (topo_p_want_string(c, disc, "discovery", &s) != 0)
            return -1;
        if (!strcmp(s, "lan"))
            *discovery = TOPO_DISCOVERY_LAN;
        else if (strcmp(s, "none") != 0)
            return topo_p_fail(c, disc, "discovery: expected 'none' or 'lan'");
    }
    if (!port)
        return 0;
    if (*discovery != TOPO_DISCOVERY_LAN)
        return topo_p_fail(c, port, "discovery_port is only used with 'discovery: lan'");
    return topo_p_want_int(c, port, "discovery_port", 1, 65535, out);
}

static int s_document(topo_pctx *c, yaml_node_t *root)
{
    static const char *const keys[] = { "description", "security", "nodes", "graph", "schedule",
                                        "discovery", "discovery_port" };
    enum { K_DESC, K_SECURITY, K_NODES, K_GRAPH, K_SCHEDULE, K_DISC, K_DISC_PORT, K_N };
    yaml_node_t *v[K_N], *kv[K_N];
    const char *s = NULL;
    topo_node *nodes = NULL;
    int rc = -1, security = 0, discovery = TOPO_DISCOVERY_NONE;
    long disc_port = TOPO_DISCOVERY_PORT_DEFAULT;
    if (s_keys2(c, root, "topology", keys, K_N, v, kv) != 0)
        return -1;
    if (v[K_DESC] && topo_p_want_string(c, v[K_DESC], "description", &s) != 0)
        return -1;
    if (s_discovery(c, v[K_DISC], v[K_DISC_PORT], &discovery, &disc_port) != 0)
        return -1;
    if (v[K_SECURITY]) {
        if (topo_p_want_string(c, v[K_SECURITY], "security", &s) != 0)
            return -1;
        if (!strcmp(s, "curve"))
            security = 1;
        else if (strcmp(s, "none") != 0)
            return topo_p_fail(c, v[K_SECURITY], "security: expected 'none' or 'curve'");
    }
    if (!v[K_NODES])
        return topo_p_fail(c, root, "missing 'nodes' (a count such as 'nodes: 8', or a list)");
    if (!!v[K_GRAPH] + !!v[K_SCHEDULE] != 1)
        return topo_p_fail(c, kv[K_GRAPH] ? kv[K_GRAPH] : root, "give exactly one of 'graph' or 'schedule'");
    if (s_nodes(c, v[K_NODES], &nodes) != 0)
        goto done;
    int nsched = 1;
    yaml_node_t *sched = v[K_SCHEDULE];
    if (sched) {
        if (sched->type != YAML_SEQUENCE_NODE) {
            topo_p_fail(c, sched, "schedule: expected a list of graphs, got %s", topo_yaml_type_name(sched));
            goto done;
        }
        long len = sched->data.sequence.items.top - sched->data.sequence.items.start;
        if (len < 1 || len > TOPO_MAX_SCHED) {
            topo_p_fail(c, sched, "schedule: %ld graphs, expected 1..%d", len, TOPO_MAX_SCHED);
            goto done;
        }
        nsched = (int)len;
    }
    if ((size_t)nsched * (size_t)c->n * (size_t)c->n > TOPO_MAX_ENTRIES) {
        topo_p_fail(c, sched ? sched : v[K_NODES], "%d nodes x %d schedule entries is too large (at most %u weights)", c->n,
               nsched, TOPO_MAX_ENTRIES);
        goto done;
    }
    for (int i = 0; i < c->n; i++)
        if (security && !nodes[i].pubkey[0]) {
            topo_p_fail_line(c, c->node_line[i], "security: curve but node %s has no key", nodes[i].id);
            goto done;
        }
    c->t = topo__new(c->n, nsched);
    memcpy(c->t->nodes, nodes, (size_t)c->n * sizeof *nodes);
    c->t->security_curve = security;
    c->t->discovery = discovery;
    c->t->discovery_port = discovery == TOPO_DISCOVERY_LAN ? (int)disc_port : 0;
    snprintf(c->t->name, sizeof c->t->name, "%s", c->name);
    if (v[K_DESC])
        snprintf(c->t->description, sizeof c->t->description, "%s", topo_yaml_scalar(v[K_DESC]));
    if (!sched) {
        if (topo_p_graph(c, v[K_GRAPH], "graph", c->t->sched[0].w) != 0)
            goto done;
    } else {
        for (int k = 0; k < nsched; k++) {
            char where[32];
            snprintf(where, sizeof where, "schedule[%d]", k);
            if (topo_p_graph(c, topo_p_get(c, sched->data.sequence.items.start[k]), where, c->t->sched[k].w) != 0)
                goto done;
        }
    }
    char msg[512];
    if (topo__check_connected(c->t, msg, sizeof msg) != 0) {
        topo_p_fail(c, sched ? kv[K_SCHEDULE] : kv[K_GRAPH], "%s", msg);
        goto done;
    }
    rc = 0;
done:
    free(nodes);
    return rc;
}

/* The first pass: every event of the stream, counting nesting depth and
 * nodes; stops at the first limit exceeded.  0 when within the limits (or
 * on a syntax error, which the second pass reports), -1 with a message. */
static int s_check_limits(const char *yaml, size_t len, const char *name, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser))
        return nn_errf(err, errlen, "%s: cannot initialise the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    int rc = 0, depth = 0;
    size_t nodes = 0;
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev))
            break; /* syntax error: reported by the loader with its line */
        yaml_event_type_t type = ev.type;
        size_t line = ev.start_mark.line + 1;
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT)
            break;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > S_MAX_DEPTH) {
                rc = nn_errf(err, errlen, "%s:%zu: nested more than %d deep: not a topology file "
                             "(the schema needs at most 6 levels)", name, line, S_MAX_DEPTH);
                break;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        if ((type == YAML_SCALAR_EVENT || type == YAML_ALIAS_EVENT ||
             type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) &&
            ++nodes > S_MAX_YAML_NODES) {
            rc = nn_errf(err, errlen, "%s:%zu: more than %u YAML values: too large for a topology "
                         "file (at most %d nodes; a full matrix of %d nodes is about %d values)",
                         name, line, S_MAX_YAML_NODES, TOPO_MAX_NODES, TOPO_MAX_NODES,
                         TOPO_MAX_NODES * (TOPO_MAX_NODES + 1));
            break;
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

topo *topo_parse(const char *yaml, size_t len, const char *name, char *err, size_t errlen)
{
    topo_pctx c = { .name = name ? name : "(string)", .err = err, .errlen = errlen };
    yaml_parser_t parser;
    yaml_document_t doc;
    topo *t = NULL;
    if (!yaml || len > S_MAX_FILE_BYTES) {
        nn_errf(err, errlen, "%s: %s", c.name, yaml ? "file too large" : "no input");
        return NULL;
    }
    if (s_check_limits(yaml, len, c.name, err, errlen) != 0)
        return NULL;
    if (!yaml_parser_initialize(&parser)) {
        nn_errf(err, errlen, "%s: cannot initialise the YAML parser", c.name);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        char ctx[160] = "";
        if (parser.context)
            snprintf(ctx, sizeof ctx, " %s (from line %zu)", parser.context, parser.context_mark.line + 1);
        nn_errf(err, errlen, "%s:%zu: YAML syntax error: %s%s", c.name, parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "unknown problem", ctx);
        yaml_parser_delete(&parser);
        return NULL;
    }
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        nn_errf(err, errlen, "%s:1: empty file (expected a mapping with 'nodes' and 'graph' or 'schedule')", c.name);
        goto done;
    }
    /* A second document is an error (a stray '---' hides mistakes). */
    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        nn_errf(err, errlen, "%s:%zu: YAML syntax error: %s", c.name, parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "unknown problem");
        goto done;
    }
    int more = yaml_document_get_root_node(&extra) != NULL;
    size_t extra_line = extra.start_mark.line + 1;
    yaml_document_delete(&extra);
    if (more) {
        nn_errf(err, errlen, "%s:%zu: more than one YAML document ('---'); a topology file holds one", c.name,
                extra_line);
        goto done;
    }
    if (s_document(&c, root) == 0) {
        t = c.t;
        c.t = NULL;
    }
done:
    topo_destroy(&c.t);
    free(c.node_line);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return t;
}

topo *topo_load(const char *path, char *err, size_t errlen)
{
    FILE *f = nn_fopen_regular(path, NULL, err, errlen);
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = nn_xmalloc(cap);
    for (;;) {
        if (len == cap) {
            if (cap > S_MAX_FILE_BYTES) {
                fclose(f);
                free(buf);
                nn_errf(err, errlen, "%s: file too large (more than %u bytes)", path, S_MAX_FILE_BYTES);
                return NULL;
            }
            cap *= 2;
            buf = nn_xrealloc(buf, cap);
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        nn_errf(err, errlen, "%s: read error", path);
        return NULL;
    }
    topo *t = topo_parse(buf, len, path, err, errlen);
    free(buf);
    return t;
}

int topo_check_endpoint(const char *endpoint, char *why, size_t whylen)
{
    return s_check_endpoint(endpoint, why, whylen);
}
