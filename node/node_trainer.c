/* node_trainer — see node_trainer.h. */
#include "node/node_trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    O_MODEL = 256, O_DATA, O_NORM, O_PREC, O_GROUPS, O_PADTO, O_AUG, O_EPOCHS, O_BATCH, O_LR,
    O_MOM, O_WD, O_NONEST, O_WARMUP, O_MILE, O_GAMMA, O_QGM, O_SUBSET, O_SEED, O_THREADS,
    O_METRICS, O_SAVE, O_ZIR,
};

const struct option node_train_options[] = {
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
    {"zero-init-residual", required_argument, 0, O_ZIR},
    {0, 0, 0, 0},
};

void node_train_opts_defaults(node_train_opts *o)
{
    memset(o, 0, sizeof *o);
    node_model_opts_defaults(&o->mo);
    o->sgd = nn_sgd_defaults();
    o->sched = (nn_lr_schedule){.base_lr = 0.05f, .warmup_epochs = 1, .gamma = 0.1f};
    o->epochs = 5;
    o->batch = 32;
    o->seed = 1;
    o->threads = 1;
}

struct option *node_options_join(const struct option *own)
{
    return node_options_concat(node_train_options, own);
}

static int s_copy(char *dst, size_t len, const char *flag, const char *arg, char *err,
                  size_t errlen)
{
    if (strlen(arg) >= len)
        return nn_errf(err, errlen, "%s: value too long (at most %zu characters)", flag, len - 1);
    memcpy(dst, arg, strlen(arg) + 1);
    return 1;
}

int node_train_opt(node_train_opts *o, int code, const char *arg, char *err, size_t errlen)
{
    double dv;
    long lv;
    int bad = 0;
    switch (code) {
    case O_MODEL: return s_copy(o->mo.model, sizeof o->mo.model, "--model", arg, err, errlen);
    case O_DATA: return s_copy(o->mo.data, sizeof o->mo.data, "--data", arg, err, errlen);
    case O_NORM: return s_copy(o->mo.norm, sizeof o->mo.norm, "--norm", arg, err, errlen);
    case O_PREC:
        return s_copy(o->mo.precision, sizeof o->mo.precision, "--precision", arg, err, errlen);
    case O_GROUPS:
        bad = node_parse_int("--groups", arg, 1, 1024, &lv, err, errlen);
        o->mo.groups = (int)lv;
        break;
    case O_PADTO:
        bad = node_parse_int("--pad-to", arg, 0, 4096, &lv, err, errlen);
        o->mo.pad_to = (int)lv;
        break;
    case O_AUG:
        if (!strcmp(arg, "on"))
            o->mo.augment = 1;
        else if (!strcmp(arg, "off"))
            o->mo.augment = 0;
        else if (!strcmp(arg, "auto"))
            o->mo.augment = -1;
        else
            bad = nn_errf(err, errlen, "--augment '%s': expected on, off or auto", arg);
        break;
    case O_ZIR:
        if (!strcmp(arg, "on") || !strcmp(arg, "off"))
            o->mo.zero_init_residual = arg[1] == 'n';
        else
            bad = nn_errf(err, errlen, "--zero-init-residual '%s': expected on or off", arg);
        break;
    case O_EPOCHS: bad = node_parse_int("--epochs", arg, 1, 100000, &o->epochs, err, errlen); break;
    case O_BATCH: bad = node_parse_int("--batch", arg, 1, 65536, &o->batch, err, errlen); break;
    case O_LR:
        bad = node_parse_double("--lr", arg, 0, 100, &dv, err, errlen);
        o->sched.base_lr = (float)dv;
        break;
    case O_MOM:
        bad = node_parse_double("--momentum", arg, 0, 0.9999, &dv, err, errlen);
        o->sgd.momentum = (float)dv;
        break;
    case O_WD:
        bad = node_parse_double("--wd", arg, 0, 1, &dv, err, errlen);
        o->sgd.weight_decay = (float)dv;
        break;
    case O_NONEST: o->sgd.nesterov = 0; break;
    case O_WARMUP:
        bad = node_parse_double("--warmup", arg, 0, 1000, &dv, err, errlen);
        o->sched.warmup_epochs = dv;
        break;
    case O_MILE:
        bad = nn_lr_parse_milestones(&o->sched, arg, err, errlen);
        o->have_milestones = 1;
        break;
    case O_GAMMA:
        bad = node_parse_double("--gamma", arg, 0, 1, &dv, err, errlen);
        o->sched.gamma = (float)dv;
        break;
    case O_QGM: o->sgd.qgm = 1; break;
    case O_SUBSET:
        bad = node_parse_int("--train-subset", arg, 1, 1L << 40, &o->subset, err, errlen);
        break;
    case O_SEED: bad = node_parse_int("--seed", arg, 0, 1L << 62, &o->seed, err, errlen); break;
    case O_THREADS:
        bad = node_parse_int("--threads", arg, 1, 256, &o->threads, err, errlen);
        break;
    case O_METRICS: return s_copy(o->metrics, sizeof o->metrics, "--metrics", arg, err, errlen);
    case O_SAVE: return s_copy(o->save, sizeof o->save, "--save", arg, err, errlen);
    default: return 0;
    }
    return bad ? -1 : 1;
}

void node_train_opts_finish(node_train_opts *o)
{
    if (o->have_milestones)
        return;
    o->sched.nmilestones = 2;
    o->sched.milestones[0] = 0.5 * (double)o->epochs;
    o->sched.milestones[1] = 0.75 * (double)o->epochs;
}

void node_train_usage(FILE *f)
{
    fprintf(f,
"model and data:\n"
"  --model NAME        %s  [cnn]\n"
"  --data SPEC         fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR [fashion-mnist]\n"
"  --norm KIND         evonorm (EvoNorm-S0) | batchnorm | none [evonorm]\n"
"  --precision P       fp32 | int8 (real 8-bit training, Range EvoNorm)\n"
"                      | fakequant (the reference's float simulation) [fp32]\n"
"  --groups G          EvoNorm groups                          [8]\n"
"  --pad-to S          zero-pad images to SxS (vgg11: 32 automatically)\n"
"  --augment MODE      on (random crop + flip) | off | auto (on except cnn) [auto]\n"
"  --zero-init-residual on|off  resnet20: each block's last norm starts with\n"
"                      gamma 0 (the reference's 8-bit ResNet) [off]\n"
"  --train-subset N    use only the first N training samples (quick runs)\n"
"optimisation (SGD, DESIGN §3):\n"
"  --epochs E          [5]        --batch B    [32]       --lr LR   [0.05]\n"
"  --momentum M        [0.9]      --wd WD      [1e-4]     --no-nesterov\n"
"  --warmup E          linear warm-up epochs from lr/10    [1]\n"
"  --milestones A,B    epochs where lr *= gamma  [50%%,75%% of --epochs]\n"
"  --gamma G           [0.1]      --qgm        quasi-global momentum\n"
"run:\n"
"  --seed S            initial weights and data order          [1]\n"
"  --threads T         BLAS threads                            [1]\n"
"  --metrics FILE      append one JSON object per evaluation\n"
"  --save FILE         write the final model (safetensors)\n", nn_arch_names());
}

int node_trainer_init(node_trainer *t, const node_train_opts *o, const node_data *d,
                      const uint32_t *shard, size_t n, int rank, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (n == 0)
        return nn_errf(err, errlen, "rank %d: its data shard is empty", rank);
    t->model = node_model_build(&o->mo, d->in_c, d->in_h, d->in_w, d->train.classes, err,
                                errlen);
    if (!t->model)
        return -1;
    nn_model_init_params(t->model, (uint64_t)o->seed);
    t->batch = (int)o->batch;
    nn_model_prepare(t->model, t->batch);
    nn_sgd_init(&t->sgd, nn_model_params(t->model), &o->sgd);
    uint64_t rseed = (uint64_t)o->seed * 1000003ULL + (uint64_t)rank;
    nn_sampler_init(&t->sampler, shard, n, rseed);
    nn_rng_seed(&t->aug_rng, rseed * 7919 + 17);
    size_t per = (size_t)d->in_c * (size_t)d->in_h * (size_t)d->in_w;
    t->xb = nn_xalloc_aligned((size_t)t->batch * per * sizeof(float));
    t->yb = nn_xmalloc((size_t)t->batch);
    t->shard_n = n;
    t->steps_per_epoch = (long)((n + (size_t)t->batch - 1) / (size_t)t->batch);
    return 0;
}

float node_trainer_step(node_trainer *t, const node_data *d, float *x, float lr)
{
    const uint32_t *idx = nn_sampler_next(&t->sampler, t->batch, NULL);
    nn_data_batch(&d->train, idx, t->batch, d->mean, d->std, &d->aug_train, &t->aug_rng, t->xb,
                  t->yb);
    if (t->poison_next) {
        t->poison_next = 0;
        t->xb[0] = NAN;
    }
    float loss = nn_model_forward(t->model, t->xb, t->yb, t->batch, 1);
    if (!isfinite(loss))
        return loss;
    t->correct += (size_t)nn_model_correct(t->model, t->yb, t->batch);
    nn_model_backward(t->model);
    const nn_arena *gr = nn_model_grads(t->model);
    for (size_t k = 0; k < gr->numel; k++)
        if (!isfinite(gr->data[k]))
            return NAN; /* x untouched: nothing non-finite reaches the neighbours */
    nn_sgd_step_at(&t->sgd, x, nn_model_grads(t->model)->data, nn_model_params(t->model)->data,
                   lr);
    t->loss_sum += (double)loss * t->batch;
    t->seen += (size_t)t->batch;
    return loss;
}

void node_trainer_reset_stats(node_trainer *t)
{
    t->loss_sum = 0;
    t->seen = t->correct = 0;
}

void node_trainer_free(node_trainer *t)
{
    nn_model_destroy(&t->model);
    nn_sgd_free(&t->sgd);
    nn_sampler_free(&t->sampler);
    free(t->xb);
    free(t->yb);
    memset(t, 0, sizeof *t);
}

/* ---- shared by `simulate` and `node` ------------------------------------ */

enum { G_ALGO = 2000, G_COMP, G_ETA, G_NOPS, G_SKEW, G_EVERY, G_OUT, G_GOSSIP_EVERY };

const struct option node_gossip_options[] = {
    {"algo", required_argument, 0, G_ALGO},       {"compress", required_argument, 0, G_COMP},
    {"eta", required_argument, 0, G_ETA},         {"no-push-sum", no_argument, 0, G_NOPS},
    {"skew", required_argument, 0, G_SKEW},       {"eval-every", required_argument, 0, G_EVERY},
    {"out", required_argument, 0, G_OUT},
    {"gossip-every", required_argument, 0, G_GOSSIP_EVERY},
    {0, 0, 0, 0},
};

void node_gossip_opts_defaults(node_gossip_opts *g)
{
    memset(g, 0, sizeof *g);
    gossip_config_default(&g->gc);
    g->gc.algo = GOSSIP_CHOCO;
    g->eta = -1;
    g->gossip_every = 1;
}

int node_gossip_opt(node_gossip_opts *g, int code, const char *arg, char *err, size_t errlen)
{
    int bad = 0;
    switch (code) {
    case G_ALGO: bad = gossip_algo_parse(arg, &g->gc.algo, err, errlen); break;
    case G_COMP:
        return s_copy(g->gc.compressor, sizeof g->gc.compressor, "--compress", arg, err, errlen);
    case G_ETA: bad = node_parse_double("--eta", arg, 0, 1, &g->eta, err, errlen); break;
    case G_NOPS: g->gc.push_sum = 0; break;
    case G_SKEW: bad = node_parse_double("--skew", arg, 0, 1, &g->skew, err, errlen); break;
    case G_EVERY:
        bad = node_parse_int("--eval-every", arg, 1, 1L << 40, &g->eval_every, err, errlen);
        break;
    case G_OUT: return s_copy(g->out, sizeof g->out, "--out", arg, err, errlen);
    case G_GOSSIP_EVERY:
        bad = node_parse_int("--gossip-every", arg, 1, 1L << 30, &g->gossip_every, err, errlen);
        break;
    default: return 0;
    }
    return bad ? -1 : 1;
}

void node_gossip_opts_finish(node_gossip_opts *g, const node_train_opts *o)
{
    double eta = g->eta;
    if (eta < 0) /* DESIGN §3: 1 without compression, 0.01 with 99% top-k */
        eta = (strstr(g->gc.compressor, "topk") || strstr(g->gc.compressor, "randk") ||
               strstr(g->gc.compressor, "dgc")) ? 0.01 : 1.0;
    g->gc.eta = eta;
    g->gc.seed = (uint64_t)o->seed;
}

void node_gossip_usage(FILE *f)
{
    fprintf(f,
"gossip:\n"
"  --algo A            dpsgd (SGP) | choco | deepsqueeze            [choco]\n"
"  --compress SPEC     [SPARSIFIER][+QUANTIZER][+deflate]            [identity]\n"
"                      sparsifiers: topk:F[,rdecay=B] | randk:F | dgc:D[,warmup=E]\n"
"                      quantizers: q8 | qsgd:S; e.g. topk:0.01+q8, dgc:0.001,warmup=4+q8+deflate\n"
"  --eta X             consensus step (choco, deepsqueeze)  [1, or 0.01 with topk]\n"
"  --no-push-sum       plain gossip (needs a doubly stochastic topology)\n"
"  --skew S            non-IID skew of the data partition, 0 = IID   [0]\n"
"  --eval-every N      evaluate every N iterations          [once per epoch]\n"
"  --gossip-every H    H local SGD steps per gossip round (an iteration is one\n"
"                      local step; rounds after iterations H, 2H, ...)  [1]\n"
"  --out DIR           output directory (models, metrics)\n");
}

struct option *node_options_concat(const struct option *a, const struct option *b)
{
    size_t na = 0, nb = 0;
    while (a[na].name)
        na++;
    while (b[nb].name)
        nb++;
    struct option *all = nn_xcalloc(na + nb + 1, sizeof *all);
    memcpy(all, a, na * sizeof *all);
    memcpy(all + na, b, nb * sizeof *all);
    return all;
}

int node_shards_make(const node_train_opts *o, const node_data *d, int nodes, double skew,
                     uint32_t **shard, size_t *count, char *err, size_t errlen)
{
    size_t ntrain = o->subset && (size_t)o->subset < d->train.n ? (size_t)o->subset : d->train.n;
    return nn_partition_skew(d->train.y, ntrain, d->train.classes, nodes, skew, (uint64_t)o->seed,
                             shard, count, err, errlen);
}

float node_lr_at_iter(const node_train_opts *o, uint64_t iter, long steps)
{
    return nn_lr_at(&o->sched, (double)iter / (double)steps);
}

float node_gossip_local_step(node_trainer *t, const node_data *d, const gossip_node *g, float *x,
                             float lr)
{
    gossip_node_mask_sent(g, t->sgd.mom.data); /* dgc momentum-factor masking */
    gossip_node_debias(g, x, nn_model_params(t->model)->data);
    return node_trainer_step(t, d, x, lr);
}
