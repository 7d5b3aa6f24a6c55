/* node_cmd_train — `lpgossip train`: single-node training.
 *
 * One process, one model, the whole training set: the baseline every
 * decentralized run is compared with.  The run loop is node_run's, with no
 * gossip round, so `train` and `node --no-gossip` (or `simulate` on a
 * one-node topology) give the same model bit for bit.  Prints a progress
 * line per evaluation (once per epoch by default), appends one JSON object
 * per evaluation to --metrics, saves --save at the end.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "node/node_cmds.h"
#include "node/node_modelio.h"
#include "node/node_run.h"

/* The run loop's operations: no gossip, so only a log and a report, which
 * need no context (node_run.ctx NULL). */
static void s_log(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "lpgossip train: %s\n", msg);
}

static void s_report(void *ctx, const node_run *r, node_metrics *m)
{
    (void)ctx;
    char eta[32];
    double left = m->seconds / (double)m->iter * (double)(r->iters - m->iter);
    node_fmt_duration(eta, sizeof eta, left);
    char test[32] = "not evaluated";
    if (m->evaluated)
        snprintf(test, sizeof test, "%.2f%%", 100 * m->test_acc);
    printf("epoch %.2f/%ld  loss %.4f  train %.2f%%  test %s  %.0f samples/s  %.1fs  "
           "ETA %s\n", m->epoch, r->o->epochs, m->loss, 100 * m->train_acc, test,
           m->samples_per_s, m->seconds, eta);
    fflush(stdout);
}

static const node_round_ops s_ops = {.log = s_log, .report = s_report};

static void s_banner(const node_opts *o, const node_ranks *k)
{
    const node_train_opts *t = &o->t;
    printf("train: %s (%s, %s, %zu parameters) on %s: %zu train / %zu test samples, "
           "input %dx%dx%d, batch %ld, %ld epochs x %ld steps\n",
           node_model_label(&t->mo), node_norm_name(t->mo.norm),
           node_precision_name(t->mo.precision), nn_model_params(k->tr[0].model)->numel,
           k->d.train.name, k->count[0], k->d.test.n, k->d.in_c, k->d.in_h, k->d.in_w, t->batch,
           t->epochs, k->steps);
    fflush(stdout);
}

static int s_train(const node_opts *o)
{
    const node_train_opts *t = &o->t;
    char err[1024];
    node_ranks k;
    FILE *mf = NULL;
    int rc = 1;
    node_set_threads((int)t->threads);
    if (node_ranks_init(&k, t, 1, 0, 0, 1, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        rc = node_model_file_error(&t->mo, err) ? 2 : 1; /* the model file does not fit */
        goto done;
    }
    if (t->metrics[0] && !(mf = fopen(t->metrics, "a"))) {
        fprintf(stderr, "lpgossip train: cannot open --metrics %s: %s\n", t->metrics,
                strerror(errno));
        goto done;
    }
    s_banner(o, &k);
    node_run r = {.n = 1, .tr = k.tr, .x = k.x, .d = &k.d, .o = t, .steps = k.steps, .H = 1,
                  .iters = (uint64_t)k.steps * (uint64_t)t->epochs, .eval_nodes = 1,
                  .ops = &s_ops, .metrics = mf};
    r.meta = (node_metrics){.command = "train", .nodes = 1,
                            .model = node_model_label(&t->mo),
                            .precision = node_precision_name(t->mo.precision)};
    if (node_run_loop(&r, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        goto done;
    }
    if (t->save[0] &&
        node_model_save_data(t->save, k.tr[0].model, &t->mo, &k.d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: saving %s: %s\n", t->save, err);
        goto done;
    }
    if (t->save[0])
        printf("saved %s\n", t->save);
    rc = 0;
done:
    if (mf)
        fclose(mf);
    node_ranks_free(&k);
    return rc;
}

int node_cmd_train(int argc, char **argv)
{
    return node_opts_main(NODE_CMD_TRAIN, argc, argv, s_train);
}
