/* nn_json — a strict JSON reader building a tree (nn_json.c). */
#ifndef NN_JSON_H
#define NN_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    NN_JSON_NULL, NN_JSON_BOOL, NN_JSON_NUM, NN_JSON_STR, NN_JSON_ARR, NN_JSON_OBJ
} nn_json_type;

typedef struct nn_json {
    nn_json_type    t;
    char           *s;       /* NN_JSON_STR: NUL-terminated (no embedded NUL) */
    int             is_uint; /* NN_JSON_NUM: a non-negative integer fitting uint64 */
    uint64_t        u;
    struct nn_json *items;   /* NN_JSON_ARR, NN_JSON_OBJ: n values */
    char          **keys;    /* NN_JSON_OBJ: n keys */
    size_t          n, cap;
} nn_json;

/* *v = the one JSON value in buf (n bytes; whitespace around it only),
 * nested at most max_depth deep.  0, or -1 with "PATH: bad JSON DOC at
 * byte K: what" in err (v then holds what was built: nn_json_free it). */
int nn_json_parse(nn_json *v, const unsigned char *buf, size_t n, int max_depth,
                  const char *path, const char *doc, char *err, size_t errlen);
void nn_json_free(nn_json *v);

/* The value under key in an object, or NULL. */
const nn_json *nn_json_get(const nn_json *obj, const char *key);

#endif
