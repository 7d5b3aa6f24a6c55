/* tk — the test kit shared by the cmocka programs in tests/.
 *
 * Owns:    a process table of the children a test started (bounded waits,
 *          kill on teardown), and small helpers every process-level test
 *          needs.
 * Exposes: tk_quick, tk_time_scale, tk_bin, tk_free_port, tk_mkdtemp, tk_rmtree,
 *          tk_bin_cmd, tk_slurp, tk_dump, tk_spawn, tk_wait, tk_wait_all, tk_kill,
 *          tk_kill_all.
 * Callers: tests/test_*.c (linked into every test program by the Makefile:
 *          each tests/NAME.c that is not a test program is a helper).
 *
 * Nothing here calls cmocka: failures are returned (-1 / NULL) with a line
 * on stderr, and the test asserts on them.
 */
#ifndef TK_H
#define TK_H

#include <stddef.h>
#include <sys/types.h>

#define TK_MAXPROC 32

/* 1 when LPGOSSIP_QUICK is set to something other than "" or "0" (the
 * sanitizer run): tests shrink their sizes. */
int tk_quick(void);

/* $LPGOSSIP_TEST_TIME_SCALE (a number >= 1; 1 when unset or not such a
 * number): the factor by which tk_wait, tk_wait_all and tk_wait_log
 * stretch their bounds, for processes slower than a native build on a
 * quiet machine (under an emulator: scripts/cross sets it), and the
 * --timeout (a node's bound on each of its waits) and --peer-timeout (the
 * silence after which it declares a neighbour down; the default's when not
 * given) of `lpgossip node`
 * processes that tk_spawn starts under $LPGOSSIP_TEST_EXEC.  Only the
 * bounds on waiting grow; what the tests check stays. */
double tk_time_scale(void);

/* Seconds on the monotonic clock. */
double tk_now(void);

/* Path of the lpgossip binary: $LPGOSSIP_BIN, else ../lpgossip next to the
 * running test program (build/tests/x -> build/lpgossip, build/san/tests/x
 * -> build/san/lpgossip).  Borrowed static string; NULL (and a line on
 * stderr) when it is not an executable file. */
const char *tk_bin(void);

/* tk_bin() as a shell command word: behind $LPGOSSIP_TEST_EXEC when set
 * (for system()); NULL as tk_bin(). */
const char *tk_bin_cmd(void);

/* A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's
 * ephemeral range (no outgoing connection takes it meanwhile); a process
 * never gets the same one twice in a row; -1 on failure. */
int tk_free_port(void);

/* Creates a fresh directory /tmp/lpgossip-PREFIX-XXXXXX into dir[len];
 * 0, or -1 when it cannot. */
int tk_mkdtemp(char *dir, size_t len, const char *prefix);

/* Removes dir and everything below it (no symlinks followed); 0 or -1.
 * Safe on "" (does nothing). */
int tk_rmtree(const char *dir);

/* The whole file as a NUL-terminated string (malloc'ed; "" when it cannot
 * be read). */
char *tk_slurp(const char *path);
/* Prints "---- path" and the file to stderr (for failing tests). */
void tk_dump(const char *path);
/* The last line of the file that is not the `kernels:` line a node ends
 * with (its failure, usually) into buf; "" when there is none. */
void tk_last_line(const char *path, char *buf, size_t size);

/* Starts tk_bin() (or bin when not NULL) with args (argv[0] included,
 * NULL-terminated) in a child whose stdout and stderr go to logpath (NULL:
 * inherited), with OPENBLAS_NUM_THREADS=1 and no rank variables from the
 * environment; env_rank >= 0 sets LPGOSSIP_RANK; the lpgossip binary runs
 * under $LPGOSSIP_TEST_EXEC when set (an emulator such as qemu-aarch64).
 * The child is recorded in the process table.  Returns its pid, or -1. */
pid_t tk_spawn(const char *bin, char *const *args, const char *logpath, int env_rank);

/* Waits up to seconds (times tk_time_scale()) for pid (a child from tk_spawn).  Returns its exit
 * code, 128+signal when killed by a signal, or -1 on timeout (the child is
 * still running and still recorded). */
int tk_wait(pid_t pid, double seconds);

/* Waits up to seconds (times tk_time_scale()) for every child in the table; status[k] (k-th spawned
 * since the last tk_kill_all, status has TK_MAXPROC entries) gets what
 * tk_wait returns.  0 when all ended in time, -1 otherwise. */
int tk_wait_all(double seconds, int *status);

/* Sends sig to pid (a recorded child); for SIGKILL also reaps it (its
 * status becomes 128+9). */
void tk_kill(pid_t pid, int sig);

/* SIGKILLs and reaps every child still running and empties the table
 * (test teardown). */
void tk_kill_all(void);

#endif
