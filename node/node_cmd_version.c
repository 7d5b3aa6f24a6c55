/* node_cmd_version — `lpgossip version [--json]`: what a result was made
 * with.  Prints the wire protocol's version, the training arithmetic's
 * version (NN_ARITH_VERSION) and the kernels this CPU runs (the level that
 * LPGOSSIP_CPU may cap, and the precision of int8 weight gradients).
 * scripts/repro stores the "arithmetic" fingerprint with every result so a
 * result of other arithmetic is never mixed into a table. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "gossip/gossip_codec.h"
#include "lowprec/lp_bf16.h"
#include "nn/nn_core.h"
#include "nn/nn_cpu.h"
#include "node/node_cmds.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip version [--json]\n"
"Prints the wire protocol's version, the training arithmetic's version and\n"
"the kernels this CPU runs.  The fingerprint 'arith=N wgrad=P' names the\n"
"arithmetic of a training step: two runs with the same fingerprint, flags\n"
"and seed compute the same kind of floats (the CPU level only changes the\n"
"order of FP32 sums).\n"
"  --json  one JSON object\n"
"  --help  this text\n");
}

int node_cmd_version(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int json = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'h') {
            s_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "lpgossip version: unknown option %s\n", argv[optind - 1]);
            s_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lpgossip version: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    const char *level = nn_cpu_name(nn_cpu_level()), *wgrad = lp_wgrad_name();
    if (json)
        printf("{\"protocol\": %d, \"arith\": %d, \"wgrad\": \"%s\", \"cpu_level\": \"%s\", "
               "\"fingerprint\": \"arith=%d wgrad=%s\"}\n",
               GOSSIP_VERSION, NN_ARITH_VERSION, wgrad, level, NN_ARITH_VERSION, wgrad);
    else
        printf("lpgossip: wire protocol %d\narithmetic: arith=%d wgrad=%s\nkernels: CPU level %s "
               "(LPGOSSIP_CPU caps it)\n",
               GOSSIP_VERSION, NN_ARITH_VERSION, wgrad, level);
    return 0;
}
