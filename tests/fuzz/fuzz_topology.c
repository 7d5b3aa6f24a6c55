/* fuzz_topology — libFuzzer target for the topology reader: any bytes go to
 * topo_parse; it must return a valid topo (which then passes topo_validate
 * and can be walked) or NULL with a message that names the input, and
 * never crash, leak or read out of bounds.  Seed corpus: tests/data/topo/
 * and topologies/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    err[0] = 0;
    topo *t = topo_parse((const char *)data, size, "fuzz.yaml", err, sizeof err);
    if (t) {
        if (topo_validate(t, err, sizeof err) != 0)
            abort();   /* the parser accepted what validation rejects */
        int *nb = malloc((size_t)t->n * sizeof *nb);
        for (int i = 0; i < t->n; i++)
            (void)topo_in_neighbors(t, (uint64_t)i, i, nb);
        free(nb);
        (void)topo_is_doubly_stochastic(t);
        topo_destroy(&t);
    } else if (strncmp(err, "fuzz.yaml", 9) != 0) {
        abort();   /* every error names the input */
    }
    return 0;
}
