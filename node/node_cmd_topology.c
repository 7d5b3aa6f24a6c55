/* node_cmd_topology — `lpgossip topology FILE [--json]`: validates a topology
 * file and prints its report (topo_report). Exit 0 when valid, 2 on bad
 * usage or an invalid file (the message, with file and line, on stderr),
 * 1 when the report cannot be written or computed. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "node/node_cmds.h"
#include "topology/topo.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip topology FILE [--json]\n"
"Validates a topology file (YAML, see docs/topology.md) and prints its report:\n"
"nodes, edges, in/out degrees, column and row sums, whether the mixing matrix\n"
"is doubly stochastic (else push-sum is needed), and the spectral gap\n"
"1 - |lambda_2(W)| of every graph (and of the product over one period of a\n"
"schedule). Exit status 0 when the file is valid, 2 when it is not.\n"
"  --json   print one JSON object instead of text\n"
"  --help   this text\n");
}

int node_cmd_topology(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int json = 0, c;
    char err[1024];
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = 1;
            break;
        case 'h':
            s_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "lpgossip topology: unknown option '%s'\n", argv[optind - 1]);
            s_usage(stderr);
            return 2;
        }
    }
    /* options may also follow the file name */
    const char *path = NULL;
    for (int i = optind; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            s_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "lpgossip topology: unknown option '%s'\n", argv[i]);
            s_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "lpgossip topology: one file at a time ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        s_usage(stderr);
        return 2;
    }
    topo *t = topo_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "lpgossip topology: %s\n", err);
        return 2;
    }
    int rc = topo_report(t, stdout, json) == 0 ? 0 : 1;
    if (fflush(stdout) != 0)
        rc = 1;
    if (rc)
        fprintf(stderr, "lpgossip topology: %s: cannot compute or write the report\n", path);
    topo_destroy(&t);
    return rc;
}
