/* bench_images — reading an image folder (images:DIR) against Python PIL.
 *
 * Reads DIR (an ImageFolder tree; bench/make_image_folder.py writes one of
 * 61,000 Fashion-MNIST PNGs) with nn_data_load_opts, and the same tree with
 * bench/bench_images_pil.py (PIL + numpy, the same order and result), in
 * alternation, `rounds` times each, and prints the best time of each and
 * the ratio PIL / lpgossip (> 1: lpgossip is faster).
 *
 *   /usr/bin/python3 bench/make_image_folder.py /tmp/lpg_fashion_png
 *   build/bench/bench_images /tmp/lpg_fashion_png [rounds=3]
 */
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn_core.h"
#include "nn/nn_data.h"

static double s_pil(const char *dir, long *count)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/bench_images_pil.py '%s'", dir);
    FILE *p = popen(cmd, "r");
    double t = -1;
    if (!p || fscanf(p, "%lf %ld", &t, count) != 2)
        t = -1;
    if (p)
        pclose(p);
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_images DIR [rounds]   (bench/make_image_folder.py "
                        "writes DIR)\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    char spec[4200], err[1024];
    snprintf(spec, sizeof spec, "images:%s", argv[1]);
    double best_c = 1e30, best_p = 1e30;
    size_t n = 0;
    long pn = 0;
    for (int r = 0; r < rounds; r++) {
        nn_dataset tr, te;
        double t0 = nn_now();
        if (nn_data_load_opts(spec, NULL, &tr, &te, err, sizeof err) != 0) {
            fprintf(stderr, "bench_images: %s\n", err);
            return 1;
        }
        double t = nn_now() - t0;
        best_c = t < best_c ? t : best_c;
        n = tr.n + te.n;
        nn_dataset_free(&tr);
        nn_dataset_free(&te);
        double tp = s_pil(argv[1], &pn);
        if (tp < 0) {
            fprintf(stderr, "bench_images: bench/bench_images_pil.py failed (python3-pil, "
                            "python3-numpy installed? run from the repository root)\n");
            return 1;
        }
        best_p = tp < best_p ? tp : best_p;
        printf("round %d: lpgossip %.3f s, PIL %.3f s\n", r + 1, t, tp);
    }
    if ((long)n != pn)
        fprintf(stderr, "bench_images: lpgossip read %zu images, PIL %ld\n", n, pn);
    printf("images:DIR  %zu images  lpgossip %.3f s (%.0f images/s)  PIL %.3f s (%.0f "
           "images/s)  ratio PIL/lpgossip %.2fx\n", n, best_c, (double)n / best_c, best_p,
           (double)pn / best_p, best_p / best_c);
    return 0;
}
