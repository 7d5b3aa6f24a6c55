/* fuzz_csv — libFuzzer target for the CSV table reader: the bytes are
 * written to a temporary file and read by nn_data_load_csv (with and
 * without a test file and a label column).  It must load a consistent set
 * (labels below the class count, finite features) or refuse with a message
 * naming the file, and never crash, leak or read out of bounds.  Seed
 * corpus: tests/data/fuzz_csv/ (written by Python's csv module). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_check(const nn_dataset *d)
{
    size_t per = (size_t)d->c * (size_t)d->h * (size_t)d->w;
    for (size_t i = 0; i < d->n; i++) {
        if (d->y[i] >= d->classes)
            abort();
        for (size_t j = 0; j < per; j++)
            if (!isfinite(d->xf[i * per + j]))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_csv_%d.csv", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    char spec[3][200], err[1024];
    snprintf(spec[0], sizeof spec[0], "%s", path);
    snprintf(spec[1], sizeof spec[1], "%s,test=%s", path, path);
    snprintf(spec[2], sizeof spec[2], "%s,label=b", path);
    for (int k = 0; k < 3; k++) {
        nn_dataset tr, te;
        err[0] = 0;
        if (nn_data_load_csv(spec[k], &tr, &te, err, sizeof err) == 0) {
            s_check(&tr);
            s_check(&te);
            nn_dataset_free(&tr);
            nn_dataset_free(&te);
        } else if (!strstr(err, path)) {
            fprintf(stderr, "message does not name the file: %s\n", err);
            abort();
        }
    }
    unlink(path);
    return 0;
}
