/* node_cmd_train — `lpgossip train`: single-node training.
 *
 * One process, one model, the whole training set: the baseline every
 * decentralized run is compared with.  Prints a progress line per epoch,
 * appends one JSON object per epoch to --metrics, saves --save at the end.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/node_cmds.h"
#include "node/node_trainer.h"

static void s_usage(FILE *f)
{
    fprintf(f, "usage: lpgossip train [options]\nTrains one model on one machine (no gossip).\n\n");
    node_train_usage(f);
    fprintf(f, "  -h, --help\n");
}

int node_cmd_train(int argc, char **argv)
{
    static const struct option own[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    node_train_opts o;
    node_train_opts_defaults(&o);
    char err[1024] = "";
    struct option *opts = node_options_join(own);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = node_train_opt(&o, c, optarg, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "lpgossip train: %s\n", err);
            free(opts);
            return 2;
        }
        if (r == 0) {
            free(opts);
            if (c == 'h') {
                s_usage(stdout);
                return 0;
            }
            s_usage(stderr);
            return 2;
        }
    }
    free(opts);
    if (optind < argc) {
        fprintf(stderr, "lpgossip train: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    node_train_opts_finish(&o);
    node_set_threads((int)o.threads);

    int rc = 1;
    node_data d;
    node_trainer t = {0};
    FILE *mf = NULL;
    uint32_t *all = NULL;
    if (node_data_load(&o.mo, &d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        return 1;
    }
    if (o.metrics[0] && !(mf = fopen(o.metrics, "a"))) {
        fprintf(stderr, "lpgossip train: cannot open --metrics %s: %s\n", o.metrics,
                strerror(errno));
        goto done;
    }
    size_t ntrain = o.subset && (size_t)o.subset < d.train.n ? (size_t)o.subset : d.train.n;
    all = nn_xmalloc(ntrain * sizeof *all);
    for (size_t i = 0; i < ntrain; i++)
        all[i] = (uint32_t)i;
    if (node_trainer_init(&t, &o, &d, all, ntrain, 0, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        rc = 2;
        goto done;
    }
    nn_arena *params = nn_model_params(t.model);
    long steps = t.steps_per_epoch;
    printf("train: %s (%s, %s, %zu parameters) on %s: %zu train / %zu test samples, "
           "input %dx%dx%d, batch %ld, %ld epochs x %ld steps\n",
           o.mo.model, o.mo.norm, o.mo.precision, params->numel, d.train.name, ntrain, d.test.n,
           d.in_c, d.in_h, d.in_w, o.batch, o.epochs, steps);
    fflush(stdout);
    double t_start = nn_now();
    for (long e = 0; e < o.epochs; e++) {
        double t0 = nn_now();
        node_trainer_reset_stats(&t);
        for (long s = 0; s < steps; s++) {
            float lr = nn_lr_at(&o.sched, (double)e + (double)s / (double)steps);
            float loss = node_trainer_step(&t, &d, params->data, lr);
            if (!isfinite(loss)) {
                fprintf(stderr, "lpgossip train: loss is %f at epoch %ld step %ld "
                        "(lr %g): training diverged; try a smaller --lr\n", loss, e + 1, s, lr);
                goto done;
            }
            nn_sgd_after_mix(&t.sgd, params->data);
        }
        double t_train = nn_now() - t0, test_loss;
        double test_acc = node_evaluate(t.model, &d, &d.test, t.batch, &test_loss);
        double secs = nn_now() - t0, elapsed = nn_now() - t_start;
        double train_acc = (double)t.correct / (double)t.seen;
        double loss = t.loss_sum / (double)t.seen;
        char eta[32];
        node_fmt_duration(eta, sizeof eta, elapsed / (double)(e + 1) * (double)(o.epochs - e - 1));
        printf("epoch %ld/%ld  loss %.4f  train %.2f%%  test %.2f%%  %.0f samples/s  "
               "%.1fs  ETA %s\n", e + 1, o.epochs, loss, 100 * train_acc, 100 * test_acc,
               (double)t.seen / t_train, secs, eta);
        fflush(stdout);
        if (mf) {
            fprintf(mf, "{\"epoch\":%ld,\"loss\":%.6f,\"train_acc\":%.6f,\"test_acc\":%.6f,"
                    "\"test_loss\":%.6f,\"lr\":%.6g,\"seconds\":%.3f,\"samples_per_s\":%.1f,"
                    "\"model\":\"%s\",\"precision\":\"%s\"}\n", e + 1, loss, train_acc, test_acc,
                    test_loss, (double)nn_lr_at(&o.sched, (double)e), secs,
                    (double)t.seen / t_train, o.mo.model, o.mo.precision);
            fflush(mf);
        }
    }
    if (o.save[0]) {
        if (node_model_save(o.save, t.model, &o.mo, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip train: saving %s: %s\n", o.save, err);
            goto done;
        }
        printf("saved %s\n", o.save);
    }
    rc = 0;
done:
    if (mf)
        fclose(mf);
    free(all);
    node_trainer_free(&t);
    node_data_free(&d);
    return rc;
}
