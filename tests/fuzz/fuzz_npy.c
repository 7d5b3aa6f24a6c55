/* fuzz_npy — libFuzzer target for the NumPy readers: the bytes are tried
 * as a .npy array (nn_npy_parse) and as an .npz archive (nn_zip_member for
 * each of Keras's four arrays, then nn_npy_parse of what it returns).
 * Either may accept or refuse; a refusal must name the input, an accepted
 * header must describe exactly the bytes that follow it, and nothing may
 * crash, leak or read out of bounds.  Seed corpus: tests/data/fuzz_npy/
 * (written by numpy, see tests/data/userdata/make_fixtures.py). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_npy(const uint8_t *b, size_t n, const char *what)
{
    char err[1024];
    nn_npy a;
    err[0] = 0;
    if (nn_npy_parse(b, n, what, &a, err, sizeof err) == 0) {
        if (a.offset > n || a.count * (size_t)a.dtype != n - a.offset || a.ndim > 4)
            abort(); /* accepted a header that does not describe the payload */
        volatile uint8_t sink = 0;
        for (size_t i = a.offset; i < n; i++)
            sink ^= b[i];
        (void)sink;
    } else if (strncmp(err, what, strlen(what)) != 0) {
        fprintf(stderr, "message does not name the input: %s\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"x_train.npy", "y_train.npy", "x_test.npy",
                                        "y_test.npy"};
    char err[1024];
    s_npy(data, size, "fuzz.npy");
    for (int k = 0; k < 4; k++) {
        uint8_t *m;
        size_t n;
        err[0] = 0;
        int r = nn_zip_member(data, size, "fuzz.npz", names[k], &m, &n, err, sizeof err);
        if (r < 0 && strncmp(err, "fuzz.npz", 8) != 0)
            abort();
        if (r == 1) {
            s_npy(m, n, "member");
            free(m);
        }
    }
    return 0;
}
