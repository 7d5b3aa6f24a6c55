/* node_lock — see node_lock.h. */
#include "node/node_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "nn/nn_core.h"

struct node_lock {
    int fd;
};

/* The pid recorded in the lock file, or 0. */
static long s_holder(int fd)
{
    char buf[32];
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    if (got <= 0)
        return 0;
    buf[got] = '\0';
    return strtol(buf, NULL, 10);
}

node_lock *node_lock_new(const char *dir, int rank, char *err, size_t errlen)
{
    char path[1100];
    if (snprintf(path, sizeof path, "%s/lock-%d", dir, rank) >= (int)sizeof path) {
        nn_errf(err, errlen, "--out %s: path too long", dir);
        return NULL;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        nn_errf(err, errlen, "cannot create the lock file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = e == EWOULDBLOCK ? s_holder(fd) : 0;
        close(fd);
        if (e == EWOULDBLOCK) {
            char who[48] = "another process";
            if (pid > 0)
                snprintf(who, sizeof who, "pid %ld", pid);
            nn_errf(err, errlen, "another lpgossip node of rank %d is running with --out %s "
                    "(%s holds %s): refusing to start a second one beside it", rank, dir, who,
                    path);
        } else {
            nn_errf(err, errlen, "cannot lock %s: %s", path, strerror(e));
        }
        return NULL;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        /* the pid is only for messages: the lock holds without it */
    }
    node_lock *self = nn_xcalloc(1, sizeof *self);
    self->fd = fd;
    return self;
}

void node_lock_destroy(node_lock **self_p)
{
    if (!self_p || !*self_p)
        return;
    node_lock *self = *self_p;
    flock(self->fd, LOCK_UN);
    close(self->fd);
    free(self);
    *self_p = NULL;
}
