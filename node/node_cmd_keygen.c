/* node_cmd_keygen — `lpgossip keygen NAME [--force]`: a new CURVE key pair
 * for one node (node_cert), and the topology line that names it. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "node/node_cert.h"
#include "node/node_cmds.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip keygen NAME [--force]\n"
"Writes a new CURVE key pair for one node: NAME (public key, to share) and\n"
"NAME_secret (both keys, mode 0600, stays on that node's machine), and prints\n"
"the public key for the node's entry in a `security: curve` topology file.\n"
"Start the node with --cert NAME_secret.\n"
"  --force  replace existing files (the old key stops working)\n"
"  --help   this text\n");
}

int node_cmd_keygen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"force", no_argument, 0, 'f'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int force = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'f') {
            force = 1;
        } else if (c == 'h') {
            s_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "lpgossip keygen: unknown option %s\n", argv[optind - 1]);
            s_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        s_usage(stderr);
        return 2;
    }
    const char *name = argv[optind];
    char pub[41], err[1200];
    if (node_cert_generate(name, force, pub, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip %s\n", err);
        return 1;
    }
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    printf("wrote %s (public) and %s_secret (secret, mode 0600)\n", name, name);
    printf("public key: %s\n", pub);
    printf("topology entry:  - {id: %s, endpoint: \"tcp://HOST:PORT\", key: '%s'}\n",
           base, pub);
    return 0;
}
