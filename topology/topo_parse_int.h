/* topo_parse_int — shared by the topology file reader's two files only:
 * topo_parse.c (the document, nodes, messages and YAML helpers) and
 * topo_parse_graph.c (GRAPH mappings: generator, edges, matrix). */
#ifndef TOPO_PARSE_INT_H
#define TOPO_PARSE_INT_H

#include <stddef.h>

#include <yaml.h>

#include "topology/topo.h"

/* One file being read. */
typedef struct {
    const char      *name;      /* file name for messages */
    yaml_document_t *doc;
    char            *err;
    size_t           errlen;
    topo            *t;         /* once nodes are known */
    int              n;
    int             *node_line; /* n: line of each node's entry */
} topo_pctx;

/* "NAME:LINE: message" (line of `at`; line 0: no line) into c->err; -1. */
__attribute__((format(printf, 3, 4)))
int topo_p_fail(topo_pctx *c, const yaml_node_t *at, const char *fmt, ...);
__attribute__((format(printf, 3, 4)))
int topo_p_fail_line(topo_pctx *c, int line, const char *fmt, ...);
/* The document's node at index (NULL for 0). */
yaml_node_t *topo_p_get(topo_pctx *c, int index);
/* A scalar as a string, a number (fractions allowed), an integer in
 * [lo, hi]; 0, or -1 naming `what` and the line. */
int topo_p_want_string(topo_pctx *c, const yaml_node_t *node, const char *what, const char **out);
int topo_p_want_number(topo_pctx *c, const yaml_node_t *node, const char *what, double *out);
int topo_p_want_int(topo_pctx *c, const yaml_node_t *node, const char *what, long lo, long hi,
                    long *out);
/* The values of map's keys (out[k] for keys[k], NULL when absent); an
 * unknown or repeated key is an error naming `where`. */
int topo_p_keys(topo_pctx *c, const yaml_node_t *map, const char *where, const char *const *keys,
                int nkeys, yaml_node_t **out);
/* A node id into its index. */
int topo_p_node_ref(topo_pctx *c, yaml_node_t *v, const char *what, int *out);
/* One GRAPH mapping into w (n*n, zeroed), then the per-matrix checks
 * (topo_parse_graph.c). */
int topo_p_graph(topo_pctx *c, yaml_node_t *body, const char *where, double *w);

#endif
