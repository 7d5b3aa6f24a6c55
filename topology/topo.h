/* topo — topology files (YAML, libyaml) -> validated mixing matrices.
 *
 * Owns:    topo (nodes, optional endpoints and CURVE keys, one or more mixing
 *          matrices used in turn: a schedule), the generators, validation and
 *          the report (degrees, stochasticity, spectral gap).
 * Exposes: the functions below; W convention (DESIGN §3, §8):
 *          w[i*n + j] = weight node i gives to what it receives from node j
 *          (self included, j == i).  Columns sum to 1 (each sender splits its
 *          mass); rows sum to 1 too when the matrix is doubly stochastic.
 * Callers: gossip/ (weights per iteration), node/ (CLI `lpgossip topology`,
 *          endpoints, keys), tests.
 */
#ifndef TOPO_H
#define TOPO_H

#include <stddef.h>
#include <stdint.h>

#define TOPO_ID_MAX       64
#define TOPO_ENDPOINT_MAX 256
#define TOPO_KEY_MAX      41   /* Z85 CURVE public key, 40 chars + NUL */

typedef struct {
    char id[TOPO_ID_MAX];             /* unique name, e.g. "n0" */
    char endpoint[TOPO_ENDPOINT_MAX]; /* "tcp://host:port" or "" */
    char pubkey[TOPO_KEY_MAX];        /* Z85 or "" */
} topo_node;

typedef struct {
    double *w;            /* n*n, row-major, see above */
} topo_matrix;

typedef struct topo {
    char        name[256];   /* file path or generator description */
    int         n;
    topo_node  *nodes;       /* n */
    int         nsched;      /* >= 1 matrices, used in turn: iteration t uses t % nsched */
    topo_matrix *sched;
    int         security_curve; /* 1 when `security: curve` */
} topo;

/* Weights in force at iteration t. */
const double *topo_weights(const topo *t, uint64_t iter);

/* Reads and validates a topology file. NULL on error, with a message naming
 * the file, the line and what is wrong written into err. */
topo *topo_load(const char *path, char *err, size_t errlen);
/* Same from a string; `name` stands in for the file name in messages. */
topo *topo_parse(const char *yaml, size_t len, const char *name, char *err, size_t errlen);
/* Generators without a file: kind is "directed_ring", "undirected_ring",
 * "torus" (rows x cols, n = rows*cols), "exponential", "complete", "star".
 * Node ids are "n0".."n{n-1}", no endpoints. */
topo *topo_generate(const char *kind, int n, int rows, int cols, char *err, size_t errlen);
void  topo_destroy(topo **self_p);

#endif
