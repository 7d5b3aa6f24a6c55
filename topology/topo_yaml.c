/* topo_yaml — shared libyaml document helpers (topo_yaml.h). */
#include "topology/topo_yaml.h"

#include <string.h>

int topo_yaml_line(const yaml_node_t *node)
{
    return node ? (int)node->start_mark.line + 1 : 0;
}

const char *topo_yaml_type_name(const yaml_node_t *node)
{
    switch (node ? node->type : YAML_NO_NODE) {
    case YAML_SCALAR_NODE:   return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE:  return "a mapping";
    default:                 return "nothing";
    }
}

const char *topo_yaml_scalar(const yaml_node_t *node)
{
    if (!node || node->type != YAML_SCALAR_NODE)
        return NULL;
    const char *s = (const char *)node->data.scalar.value;
    return strlen(s) == node->data.scalar.length ? s : NULL;
}

const char *topo_yaml_show(const yaml_node_t *node, char *buf, size_t len)
{
    size_t k = 0;
    if (node && node->type == YAML_SCALAR_NODE) {
        const char *s = (const char *)node->data.scalar.value;
        size_t l = node->data.scalar.length;
        for (size_t i = 0; i < l && i < 40 && k + 4 < len; i++)
            buf[k++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
        if (l > 40 && k + 4 < len) {
            memcpy(buf + k, "...", 3);
            k += 3;
        }
    }
    buf[k] = 0;
    return buf;
}
