/* topo_yaml — the small libyaml document helpers every YAML reader of the
 * project shares (topology files here, model files in node/).
 *
 * Owns:    nothing; pure functions over libyaml's document nodes.
 * Exposes: the line of a node for messages, a node's kind in words, a
 *          scalar's text (refusing embedded NUL bytes), and a scalar shown
 *          safely in a message (printable ASCII, at most 40 characters).
 * Callers: topology/topo_parse.c, node/node_modelfile.c.
 */
#ifndef TOPO_YAML_H
#define TOPO_YAML_H

#include <stddef.h>
#include <yaml.h>

/* 1-based line of node, 0 for NULL (a message without a line). */
int         topo_yaml_line(const yaml_node_t *node);
/* "a scalar", "a list", "a mapping" or "nothing" (also for NULL). */
const char *topo_yaml_type_name(const yaml_node_t *node);
/* The scalar's text, or NULL when node is not a scalar or its text holds a
 * NUL byte (libyaml accepts "\0" escapes). */
const char *topo_yaml_scalar(const yaml_node_t *node);
/* A scalar for a message, in buf[len]: at most 40 characters, anything but
 * printable ASCII as '?', "..." when cut; "" for a non-scalar.  Returns
 * buf.  Files' bytes never reach a message any other way. */
const char *topo_yaml_show(const yaml_node_t *node, char *buf, size_t len);

#endif
