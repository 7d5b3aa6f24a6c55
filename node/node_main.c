/* node_main — `lpgossip <command> [options]`: the dispatch table, and the
 * process-wide allocator settings every command runs under. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "node/node_cmds.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} s_command;

static const s_command s_commands[] = {
    {"train", node_cmd_train, "train one model on one machine (no gossip)"},
    {"eval", node_cmd_eval, "test accuracy of a model file, or of the average of several"},
    {"predict", node_cmd_predict, "the class of each image or table row by a model file"},
    {"topology", node_cmd_topology, "validate a topology file and print its report"},
    {"simulate", node_cmd_simulate, "run every node of a topology in one process"},
    {"node", node_cmd_node, "run one node of a topology, gossiping over ZeroMQ"},
    {"keygen", node_cmd_keygen, "write a CURVE key pair for one node (security: curve)"},
    {"version", node_cmd_version, "the program's and the training arithmetic's versions"},
    {"watch", node_cmd_watch, "live view of a run: every node's /status (--metrics-port)"},
};

static void s_usage(FILE *f)
{
    fprintf(f, "usage: lpgossip <command> [options]   (lpgossip <command> --help)\n\n");
    for (size_t i = 0; i < sizeof s_commands / sizeof s_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", s_commands[i].name, s_commands[i].summary);
}

/* glibc's allocator: keep buffers up to 32 MiB in the heap and keep up to
 * 256 MiB of freed heap mapped.  With its defaults every gossip message
 * (a dense q8 cnn model is 420 KB) was first mapped afresh (its dynamic
 * threshold lets the next, slightly larger message past) and the heap's
 * top returned to the kernel at each free over 2 x that: a page fault per
 * 4 KB of every message, in both the I/O thread and ours.  4 int8 SGP
 * nodes on 2 cores ran 1.5x as long (results/slow-node.md, "Allocator").
 * Left alone when the user tunes malloc through the environment. */
static void s_tune_malloc(void)
{
#ifdef __GLIBC__
    const char *t = getenv("GLIBC_TUNABLES");
    if ((t && strstr(t, "glibc.malloc.")) || getenv("MALLOC_MMAP_THRESHOLD_") ||
        getenv("MALLOC_TRIM_THRESHOLD_"))
        return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

int main(int argc, char **argv)
{
    s_tune_malloc();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof s_commands / sizeof s_commands[0]; i++)
        if (!strcmp(argv[1], s_commands[i].name))
            return s_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lpgossip: unknown command '%s'\n\n", argv[1]);
    s_usage(stderr);
    return 2;
}
