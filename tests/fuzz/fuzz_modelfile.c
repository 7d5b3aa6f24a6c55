/* fuzz_modelfile — libFuzzer target for the model-file parser
 * (node/node_modelfile.c): any bytes go to node_mf_parse; it must return a
 * graph whose inputs and build order are consistent (every input index in
 * range, each layer after its inputs, every layer once) or NULL with a
 * message that names the input, and never crash, leak or read out of
 * bounds.  An accepted graph is shape-checked for a few inputs.  Seed
 * corpus: tests/data/fuzz_modelfile/ (the shipped models/ and small graphs). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_check_order(const node_mf *mf)
{
    int *pos = malloc((size_t)mf->n * sizeof *pos);
    for (int i = 0; i < mf->n; i++)
        pos[i] = -1;
    for (int k = 0; k < mf->n; k++) {
        if (mf->order[k] < 0 || mf->order[k] >= mf->n || pos[mf->order[k]] >= 0)
            abort(); /* not a permutation */
        pos[mf->order[k]] = k;
    }
    for (int i = 0; i < mf->n; i++)
        for (int q = 0; q < mf->layers[i].nin; q++) {
            int in = mf->layers[i].in[q];
            if (in < -1 || in >= mf->n || (in >= 0 && pos[in] >= pos[i]))
                abort(); /* an input out of range or built after its consumer */
        }
    free(pos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    err[0] = 0;
    node_mf *mf = node_mf_parse((const char *)data, size, "fuzz.yaml", err, sizeof err);
    if (!mf) {
        if (strncmp(err, "fuzz.yaml", 9) != 0)
            abort(); /* every error names the input */
        return 0;
    }
    s_check_order(mf);
    static const int in[3][3] = {{1, 28, 28}, {3, 32, 32}, {16, 1, 1}};
    for (int k = 0; k < 3; k++)
        if (node_mf_check_shapes(mf, in[k][0], in[k][1], in[k][2], 10, err, sizeof err) != 0 &&
            strncmp(err, "fuzz.yaml", 9) != 0)
            abort();
    node_mf_destroy(&mf);
    return 0;
}
