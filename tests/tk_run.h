/* tk_run — running `lpgossip node` processes on loopback and reading back
 * what they wrote, for the process-level node tests.
 *
 * Owns:    nothing beyond a call (the children go into tk.h's process
 *          table; the temp directory is the caller's buffer).
 * Exposes: tk_dir_setup, tk_dir_teardown, tk_topo_loopback, tk_node,
 *          tk_model_load, tk_model_spread, tk_cert_pubkey.
 * Callers: tests/test_node_join.c, test_node_attack.c, test_node_faults.c,
 *          test_node_guards.c, test_node_lan.c, test_node_netns.c (linked
 *          into every test program by the Makefile, like tk.c).
 *
 * As in tk.h, nothing here calls cmocka: failures are returned (-1 / NULL)
 * with a line on stderr, and the test asserts on them.
 */
#ifndef TK_RUN_H
#define TK_RUN_H

#include <stddef.h>
#include <sys/types.h>

#include "nn/nn_model.h"

/* Group setup of a process test: tk_bin() must exist, and a fresh temp dir
 * /tmp/lpgossip-PREFIX-XXXXXX is made into dir[len].  0, or -1. */
int tk_dir_setup(char *dir, size_t len, const char *prefix);

/* Group teardown: kills and reaps every child (tk_kill_all), removes dir
 * and everything below it, and empties dir.  Safe on "". */
void tk_dir_teardown(char *dir);

/* Writes a topology file at path: n nodes n0..n(n-1) on free 127.0.0.1
 * ports (into ports[0..n-1] unless NULL), then the YAML text `graph`
 * verbatim.  0, or -1 (a line on stderr). */
int tk_topo_loopback(const char *path, int n, const char *graph, int *ports);

/* Starts `lpgossip node --topology topo --rank rank` followed by the flags
 * of common (NULL-terminated), then extra unless NULL, with stdout and
 * stderr in log (tk_spawn).  Its pid, or -1. */
pid_t tk_node(const char *topo, int rank, char *const *common, const char *extra,
              const char *log);

/* The model of a node's model file (the cnn or whatever its metadata
 * names, for 1x28x28 inputs and 10 classes), parameters loaded; owned by
 * the caller (nn_model_destroy).  NULL (and a line on stderr) when it
 * cannot be read. */
nn_model *tk_model_load(const char *path);

/* Reads the final models dir/model-K.safetensors, K < n, and writes
 * dist[K] = ||z_K - avg|| / ||avg|| (avg: their mean, in double) unless
 * dist is NULL.  Returns the largest dist[K], or -1 when a model cannot
 * be read (a line on stderr). */
double tk_model_spread(const char *dir, int n, double *dist);

/* Waits (bounded by `seconds` times tk_time_scale()) until the file `log` contains `what`:
 * 1 found, 0 not. */
int tk_wait_log(const char *log, const char *what, double seconds);

/* The public key (Z85, 40 characters) of a `lpgossip keygen` certificate
 * file into out.  0, or -1 (a line on stderr) when it has none. */
int tk_cert_pubkey(const char *path, char out[41]);

#endif
