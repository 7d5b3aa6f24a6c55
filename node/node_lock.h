/* node_lock — one live process per rank and output directory.
 *
 * Owns:    an exclusive flock(2) on DIR/lock-RANK, held for the life of the
 *          node process.  The kernel releases it when the process ends in
 *          any way (exit, crash, SIGKILL), so a stale lock never blocks a
 *          restart; the file itself stays (it holds the pid of the last
 *          holder, for the message) and is harmless.  Not unlinked on
 *          release: unlinking would let a second process lock a fresh file
 *          under the same name while a third still holds the old one.
 * Exposes: node_lock_new / node_lock_destroy.
 * Callers: node_cmd_node.c (--out), tests.
 *
 * flock locks belong to the open file description: a second node_lock_new
 * on the same directory and rank fails even inside the same process.  On a
 * network file system flock may be local to one machine; every machine
 * should then use its own --out.
 */
#ifndef NODE_LOCK_H
#define NODE_LOCK_H

#include <stddef.h>

typedef struct node_lock node_lock;

/* Takes the lock of `rank` in directory `dir` (which must exist) without
 * waiting.  Returns an owned lock, or NULL with a message: held by another
 * live process ("another lpgossip node of rank R is running with --out DIR
 * (pid P holds DIR/lock-R)"), or the file cannot be created. */
node_lock *node_lock_new(const char *dir, int rank, char *err, size_t errlen);

/* Releases the lock and frees it; *self_p becomes NULL.  Safe on NULL. */
void node_lock_destroy(node_lock **self_p);

#endif
