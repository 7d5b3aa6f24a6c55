/* node_cmd_train — `lpgossip train`: single-node training.
 *
 * One process, one model, the whole training set: the baseline every
 * decentralized run is compared with.  Prints a progress line per epoch,
 * appends one JSON object per epoch to --metrics, saves --save at the end.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_optim.h"
#include "node/node_cmds.h"
#include "node/node_common.h"

static void s_usage(FILE *f)
{
    fprintf(f,
"usage: lpgossip train [options]\n"
"Trains one model on one machine (no gossip).\n"
"\n"
"model and data:\n"
"  --model NAME        cnn | resnet20 | vgg11                 [cnn]\n"
"  --data SPEC         fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR [fashion-mnist]\n"
"  --norm KIND         evonorm (EvoNorm-S0) | batchnorm | none [evonorm]\n"
"  --precision P       fp32                                   [fp32]\n"
"  --groups G          EvoNorm groups                          [8]\n"
"  --pad-to S          zero-pad images to SxS (vgg11: 32 automatically)\n"
"  --augment MODE      on (random crop + flip) | off | auto (on except cnn) [auto]\n"
"optimisation:\n"
"  --epochs E          [5]        --batch B    [32]       --lr LR   [0.05]\n"
"  --momentum M        [0.9]      --wd WD      [1e-4]     --no-nesterov\n"
"  --warmup E          linear warm-up epochs from lr/10    [1]\n"
"  --milestones A,B    epochs where lr *= gamma  [50%%,75%% of --epochs]\n"
"  --gamma G           [0.1]      --qgm        quasi-global momentum\n"
"  --train-subset N    use only the first N training samples (quick runs)\n"
"run:\n"
"  --seed S            initial weights and data order          [1]\n"
"  --threads T         BLAS threads                            [1]\n"
"  --metrics FILE      append one JSON object per epoch\n"
"  --save FILE         write the final model (safetensors)\n"
"  -h, --help\n");
}

enum {
    O_MODEL = 256, O_DATA, O_NORM, O_PREC, O_GROUPS, O_PADTO, O_AUG, O_EPOCHS, O_BATCH, O_LR,
    O_MOM, O_WD, O_NONEST, O_WARMUP, O_MILE, O_GAMMA, O_QGM, O_SUBSET, O_SEED, O_THREADS,
    O_METRICS, O_SAVE,
};

static const struct option s_opts[] = {
    {"model", required_argument, 0, O_MODEL},       {"data", required_argument, 0, O_DATA},
    {"norm", required_argument, 0, O_NORM},         {"precision", required_argument, 0, O_PREC},
    {"groups", required_argument, 0, O_GROUPS},     {"pad-to", required_argument, 0, O_PADTO},
    {"augment", required_argument, 0, O_AUG},       {"epochs", required_argument, 0, O_EPOCHS},
    {"batch", required_argument, 0, O_BATCH},       {"lr", required_argument, 0, O_LR},
    {"momentum", required_argument, 0, O_MOM},      {"wd", required_argument, 0, O_WD},
    {"no-nesterov", no_argument, 0, O_NONEST},      {"warmup", required_argument, 0, O_WARMUP},
    {"milestones", required_argument, 0, O_MILE},   {"gamma", required_argument, 0, O_GAMMA},
    {"qgm", no_argument, 0, O_QGM},                 {"train-subset", required_argument, 0, O_SUBSET},
    {"seed", required_argument, 0, O_SEED},         {"threads", required_argument, 0, O_THREADS},
    {"metrics", required_argument, 0, O_METRICS},   {"save", required_argument, 0, O_SAVE},
    {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0},
};

int node_cmd_train(int argc, char **argv)
{
    node_model_opts mo;
    node_model_opts_defaults(&mo);
    nn_sgd_config sc = nn_sgd_defaults();
    nn_lr_schedule sched = {.base_lr = 0.05f, .warmup_epochs = 1, .gamma = 0.1f};
    long epochs = 5, batch = 32, seed = 1, threads = 1, subset = 0;
    const char *metrics_path = NULL, *save_path = NULL, *milestones = NULL;
    char err[1024] = "";
    double dv;
    long lv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", s_opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_MODEL: snprintf(mo.model, sizeof mo.model, "%s", optarg); break;
        case O_DATA: snprintf(mo.data, sizeof mo.data, "%s", optarg); break;
        case O_NORM: snprintf(mo.norm, sizeof mo.norm, "%s", optarg); break;
        case O_PREC: snprintf(mo.precision, sizeof mo.precision, "%s", optarg); break;
        case O_GROUPS: bad = node_parse_int("--groups", optarg, 1, 1024, &lv, err, sizeof err);
            mo.groups = (int)lv; break;
        case O_PADTO: bad = node_parse_int("--pad-to", optarg, 0, 4096, &lv, err, sizeof err);
            mo.pad_to = (int)lv; break;
        case O_AUG:
            if (!strcmp(optarg, "on")) mo.augment = 1;
            else if (!strcmp(optarg, "off")) mo.augment = 0;
            else if (!strcmp(optarg, "auto")) mo.augment = -1;
            else bad = nn_errf(err, sizeof err, "--augment '%s': expected on, off or auto", optarg);
            break;
        case O_EPOCHS: bad = node_parse_int("--epochs", optarg, 1, 100000, &epochs, err, sizeof err); break;
        case O_BATCH: bad = node_parse_int("--batch", optarg, 1, 65536, &batch, err, sizeof err); break;
        case O_LR: bad = node_parse_double("--lr", optarg, 0, 100, &dv, err, sizeof err);
            sched.base_lr = (float)dv; break;
        case O_MOM: bad = node_parse_double("--momentum", optarg, 0, 0.9999, &dv, err, sizeof err);
            sc.momentum = (float)dv; break;
        case O_WD: bad = node_parse_double("--wd", optarg, 0, 1, &dv, err, sizeof err);
            sc.weight_decay = (float)dv; break;
        case O_NONEST: sc.nesterov = 0; break;
        case O_WARMUP: bad = node_parse_double("--warmup", optarg, 0, 1000, &dv, err, sizeof err);
            sched.warmup_epochs = dv; break;
        case O_MILE: milestones = optarg; break;
        case O_GAMMA: bad = node_parse_double("--gamma", optarg, 0, 1, &dv, err, sizeof err);
            sched.gamma = (float)dv; break;
        case O_QGM: sc.qgm = 1; break;
        case O_SUBSET: bad = node_parse_int("--train-subset", optarg, 1, 1L << 40, &subset, err, sizeof err); break;
        case O_SEED: bad = node_parse_int("--seed", optarg, 0, 1L << 62, &seed, err, sizeof err); break;
        case O_THREADS: bad = node_parse_int("--threads", optarg, 1, 256, &threads, err, sizeof err); break;
        case O_METRICS: metrics_path = optarg; break;
        case O_SAVE: save_path = optarg; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "lpgossip train: %s\n", err);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lpgossip train: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (milestones) {
        if (nn_lr_parse_milestones(&sched, milestones, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip train: --milestones: %s\n", err);
            return 2;
        }
    } else {
        sched.nmilestones = 2;
        sched.milestones[0] = 0.5 * (double)epochs;
        sched.milestones[1] = 0.75 * (double)epochs;
    }
    node_set_threads((int)threads);

    int rc = 1;
    node_data d;
    nn_model *m = NULL;
    FILE *mf = NULL;
    float *x = NULL;
    uint8_t *y = NULL;
    uint32_t *all = NULL;
    nn_sampler sampler = {0};
    nn_sgd sgd = {0};
    if (node_data_load(&mo, &d, err, sizeof err) != 0) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        return 1;
    }
    m = node_model_build(&mo, d.in_c, d.in_h, d.in_w, d.train.classes, err, sizeof err);
    if (!m) {
        fprintf(stderr, "lpgossip train: %s\n", err);
        rc = 2;
        goto done;
    }
    if (metrics_path && !(mf = fopen(metrics_path, "a"))) {
        fprintf(stderr, "lpgossip train: cannot open --metrics %s: %s\n", metrics_path,
                strerror(errno));
        goto done;
    }
    nn_model_init_params(m, (uint64_t)seed);
    nn_model_prepare(m, (int)batch);
    nn_sgd_init(&sgd, nn_model_params(m), &sc);
    size_t ntrain = subset && (size_t)subset < d.train.n ? (size_t)subset : d.train.n;
    all = nn_xmalloc(ntrain * sizeof *all);
    for (size_t i = 0; i < ntrain; i++)
        all[i] = (uint32_t)i;
    nn_sampler_init(&sampler, all, ntrain, (uint64_t)seed);
    size_t per = (size_t)d.in_c * (size_t)d.in_h * (size_t)d.in_w;
    x = nn_xalloc_aligned((size_t)batch * per * sizeof(float));
    y = nn_xmalloc((size_t)batch);
    nn_rng aug_rng;
    nn_rng_seed(&aug_rng, (uint64_t)seed * 7919 + 17);
    long steps = (long)((ntrain + (size_t)batch - 1) / (size_t)batch);
    nn_arena *params = nn_model_params(m), *grads = nn_model_grads(m);
    printf("train: %s (%s, %s, %zu parameters) on %s: %zu train / %zu test samples, "
           "input %dx%dx%d, batch %ld, %ld epochs x %ld steps\n",
           mo.model, mo.norm, mo.precision, params->numel, d.train.name, ntrain, d.test.n, d.in_c,
           d.in_h, d.in_w, batch, epochs, steps);
    fflush(stdout);
    double t_start = nn_now();
    for (long e = 0; e < epochs; e++) {
        double t0 = nn_now(), loss_sum = 0;
        size_t seen = 0, correct = 0;
        for (long s = 0; s < steps; s++) {
            const uint32_t *idx = nn_sampler_next(&sampler, (int)batch, NULL);
            nn_data_batch(&d.train, idx, (int)batch, d.mean, d.std, &d.aug_train, &aug_rng, x, y);
            float lr = nn_lr_at(&sched, (double)e + (double)s / (double)steps);
            float loss = nn_model_forward(m, x, y, (int)batch, 1);
            if (!isfinite(loss)) {
                fprintf(stderr, "lpgossip train: loss is %f at epoch %ld step %ld "
                        "(lr %g): training diverged; try a smaller --lr\n", loss, e + 1, s, lr);
                goto done;
            }
            correct += (size_t)nn_model_correct(m, y, (int)batch);
            nn_model_backward(m);
            nn_sgd_step(&sgd, params->data, grads->data, lr);
            nn_sgd_after_mix(&sgd, params->data);
            loss_sum += (double)loss * (double)batch;
            seen += (size_t)batch;
        }
        double t_train = nn_now() - t0, test_loss;
        double test_acc = node_evaluate(m, &d, &d.test, (int)batch, &test_loss);
        double secs = nn_now() - t0, elapsed = nn_now() - t_start;
        double train_acc = (double)correct / (double)seen, loss = loss_sum / (double)seen;
        char eta[32];
        node_fmt_duration(eta, sizeof eta, elapsed / (double)(e + 1) * (double)(epochs - e - 1));
        printf("epoch %ld/%ld  loss %.4f  train %.2f%%  test %.2f%%  %.0f samples/s  "
               "%.1fs  ETA %s\n", e + 1, epochs, loss, 100 * train_acc, 100 * test_acc,
               (double)seen / t_train, secs, eta);
        fflush(stdout);
        if (mf) {
            fprintf(mf, "{\"epoch\":%ld,\"loss\":%.6f,\"train_acc\":%.6f,\"test_acc\":%.6f,"
                    "\"test_loss\":%.6f,\"lr\":%.6g,\"seconds\":%.3f,\"samples_per_s\":%.1f,"
                    "\"model\":\"%s\",\"precision\":\"%s\"}\n", e + 1, loss, train_acc, test_acc,
                    test_loss, (double)nn_lr_at(&sched, (double)e), secs, (double)seen / t_train,
                    mo.model, mo.precision);
            fflush(mf);
        }
    }
    if (save_path) {
        if (node_model_save(save_path, m, &mo, err, sizeof err) != 0) {
            fprintf(stderr, "lpgossip train: saving %s: %s\n", save_path, err);
            goto done;
        }
        printf("saved %s\n", save_path);
    }
    rc = 0;
done:
    if (mf)
        fclose(mf);
    free(x);
    free(y);
    free(all);
    nn_sampler_free(&sampler);
    nn_sgd_free(&sgd);
    nn_model_destroy(&m);
    node_data_free(&d);
    return rc;
}
