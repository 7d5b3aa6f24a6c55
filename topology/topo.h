/* topo — topology files (YAML, libyaml) -> validated mixing matrices.
 *
 * Owns:    topo (nodes, optional endpoints and CURVE keys, one or more mixing
 *          matrices used in turn: a schedule), the generators, validation and
 *          the report (degrees, stochasticity, spectral gap).
 * Exposes: the functions below; W convention (docs/design.md §3, §8):
 *          w[i*n + j] = weight node i gives to what it receives from node j
 *          (self included, j == i).  Columns sum to 1 (each sender splits its
 *          mass); rows sum to 1 too when the matrix is doubly stochastic.
 *          An edge "from j to i" is a nonzero w[i*n + j], i != j.
 * Files:   topo_core.c (generators, validation, neighbours, destroy),
 *          topo_parse.c (YAML schema, see docs/topology.md),
 *          topo_spectral.c (eigenvalues, spectral gap),
 *          topo_report.c (the `lpgossip topology` report, text or JSON).
 * Callers: gossip/ (weights per iteration), node/ (CLI `lpgossip topology`,
 *          endpoints, keys), tests.
 *
 * A topo may also be built by hand (tests do): every pointer is a plain
 * malloc/calloc block, so topo_destroy frees it; topo_validate checks it.
 */
#ifndef TOPO_H
#define TOPO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOPO_ID_MAX       64
#define TOPO_ENDPOINT_MAX 256
#define TOPO_KEY_MAX      41   /* Z85 CURVE public key, 40 chars + NUL */

/* Limits on what a file may ask for (a file is outside input). */
#define TOPO_MAX_NODES    1024
#define TOPO_MAX_SCHED    64
#define TOPO_MAX_ENTRIES  (4u << 20)   /* nsched * n * n doubles, 32 MB */

/* Tolerance on column (and, for "doubly stochastic", row) sums. */
#define TOPO_SUM_TOL      1e-6

/* `discovery:` (docs/topology.md): how nodes find each other's endpoints. */
#define TOPO_DISCOVERY_NONE 0    /* endpoints from the file or --peer only */
#define TOPO_DISCOVERY_LAN  1    /* UDP broadcast beacons (gossip_discovery) */
#define TOPO_DISCOVERY_PORT_DEFAULT 47820

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
    char        description[256]; /* the file's `description:` or "" */
    int         discovery;      /* TOPO_DISCOVERY_*; NONE unless the file says `discovery: lan` */
    int         discovery_port; /* UDP port of the beacons (`discovery_port:`, lan only) */
} topo;

/* Weights in force at iteration t (borrowed, n*n). */
const double *topo_weights(const topo *t, uint64_t iter);

/* Reads and validates a topology file. NULL on error, with a message naming
 * the file, the line and what is wrong written into err
 * ("FILE:LINE: what is wrong"). Returns an owned topo. */
topo *topo_load(const char *path, char *err, size_t errlen);
/* Same from a string of len bytes (need not be NUL-terminated); `name`
 * stands in for the file name in messages and in t->name. Any input, valid
 * or not, is safe (fuzzed). */
topo *topo_parse(const char *yaml, size_t len, const char *name, char *err, size_t errlen);
/* Generators without a file: kind is "directed_ring", "undirected_ring",
 * "torus" (rows x cols, n = rows*cols; n may be 0 then), "exponential",
 * "complete", "star" (hub n0). Every sender splits its mass uniformly over
 * itself and its distinct out-neighbours (so columns sum to 1; every shipped
 * generator except star is circulant or regular, hence doubly stochastic).
 * Node ids are "n0".."n{n-1}", no endpoints. NULL + message on bad input. */
topo *topo_generate(const char *kind, int n, int rows, int cols, char *err, size_t errlen);
/* Frees t and everything it owns; *self_p becomes NULL. Safe on NULL. */
void  topo_destroy(topo **self_p);

/* Checks a topo (e.g. built by hand): n and nsched in range, unique ids,
 * every matrix with weights in [0,1], positive self weights, columns summing
 * to 1 within TOPO_SUM_TOL, and the union of the schedule's graphs strongly
 * connected (each graph alone when nsched == 1); keys present when
 * security_curve. 0, or -1 with a message (no file/line prefix). */
int topo_validate(const topo *t, char *err, size_t errlen);

/* 1 when every matrix of the schedule also has rows summing to 1 within
 * TOPO_SUM_TOL (then push-sum weights stay 1; algorithms without push-sum
 * need this), else 0. */
int topo_is_doubly_stochastic(const topo *t);

/* Index of the node with this id, or -1. */
int topo_find_node(const topo *t, const char *id);
/* 0 when endpoint is tcp://HOST:PORT (HOST a name, an IPv4 address,
 * [IPv6] or *), as a topology's `endpoint:`; else -1 with the reason. */
int topo_check_endpoint(const char *endpoint, char *why, size_t whylen);

/* In-neighbours of node i at iteration iter (nodes j != i with
 * w[i][j] > 0), ascending, written to out (room for n ints); returns how
 * many. Out-neighbours: nodes j != i with w[j][i] > 0. */
int topo_in_neighbors(const topo *t, uint64_t iter, int i, int *out);
int topo_out_neighbors(const topo *t, uint64_t iter, int i, int *out);
/* Same over the whole schedule (union over one period): whom node i ever
 * hears from / sends to, e.g. to open connections once. */
int topo_in_neighbors_any(const topo *t, int i, int *out);
int topo_out_neighbors_any(const topo *t, int i, int *out);

/* ---- spectra (topo_spectral.c) ----------------------------------------- */

/* All n eigenvalues of the general real n x n matrix w (row-major, not
 * modified) into re/im (n each), sorted by decreasing modulus. LAPACK dgeev
 * from OpenBLAS. 0, or -1 when LAPACK fails (n < 1 or no convergence). */
int topo_eigenvalues(const double *w, int n, double *re, double *im);
/* Second-largest eigenvalue modulus |lambda_2| of w (0 when n == 1);
 * -1 on failure. */
double topo_lambda2(const double *w, int n);
/* 1 - |lambda_2(w)|: how fast gossip with w mixes (1 = in one step).
 * For a column-stochastic, primitive w, lambda_1 = 1. -1 on failure. */
double topo_spectral_gap(const double *w, int n);
/* W_{p-1} ... W_1 W_0 over one period p = nsched, into out (n*n, caller's). */
void topo_period_product(const topo *t, double *out);

/* ---- report (topo_report.c) -------------------------------------------- */

/* Writes the report for a validated topo: n, nodes, per matrix the edges,
 * in/out degrees, column/row stochasticity, doubly stochastic or not,
 * |lambda_2| and spectral gap, and for a schedule also those of the product
 * over one period. json != 0: one JSON object (schema in docs/topology.md).
 * 0, or -1 when writing fails or the spectrum cannot be computed. */
int topo_report(const topo *t, FILE *f, int json);

#endif
