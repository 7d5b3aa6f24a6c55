/* node_opts — see node_opts.h. */
#include "node/node_opts.h"

#include <assert.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_cpu.h"
#include "node/node_modelio.h"
#include "node/node_http.h"
#include "topology/topo.h"

/* ---- the flag table ------------------------------------------------------ */

enum {
    G_MODEL = 1, G_OPTIM = 2, G_RUN = 4, G_DEBUG_RUN = 8, G_GOSSIP = 16, G_SIM = 32,
    G_NODE = 64, G_DEBUG_LINK = 128,
};

static const unsigned s_groups[] = {
    [NODE_CMD_TRAIN] = G_MODEL | G_OPTIM | G_RUN | G_DEBUG_RUN,
    [NODE_CMD_SIMULATE] = G_MODEL | G_OPTIM | G_RUN | G_DEBUG_RUN | G_GOSSIP | G_SIM,
    [NODE_CMD_NODE] = G_MODEL | G_OPTIM | G_RUN | G_DEBUG_RUN | G_GOSSIP | G_NODE | G_DEBUG_LINK,
};

static const char *const s_names[] = {"train", "simulate", "node"};

enum {
    F_HELP = 'h', F_HELP_DEBUG = 256,
    F_MODEL, F_DATA, F_NORM, F_PREC, F_GROUPS, F_PADTO, F_AUG, F_ZIR, F_SUBSET,
    F_EPOCHS, F_BATCH, F_LR, F_MOM, F_WD, F_NONEST, F_WARMUP, F_MILE, F_LR_DECAY, F_GAMMA, F_QGM,
    F_SEED, F_THREADS, F_WGRAD, F_METRICS, F_SAVE, F_EVAL_EVERY, F_EVAL_SUBSET, F_EVAL_OFFSET, F_EVAL_FINAL, F_NO_EVAL, F_NAN_AT,
    F_TOPO, F_ALGO, F_COMP, F_ETA, F_NOPS, F_SKEW, F_GOSSIP_EVERY, F_OUT, F_EVAL_NODES,
    F_RANK, F_BIND, F_PEER, F_TIMEOUT, F_NOGOSSIP, F_CKPT_EVERY, F_RESUME, F_PEER_FLOOR,
    F_PEER_FACTOR, F_FAIL_LOSS, F_CERT, F_DROP, F_DROP_RESYNC, F_DISC_IFACE,
    F_MIN_NODES, F_START_WINDOW, F_FRESH_WAIT, F_LATE_AFTER, F_DEFER, F_YIELD_PACE, F_JOIN, F_STALE, F_DELAYS, F_DEBUG_SLOW,
    F_GRAD_GUARD, F_INIT, F_INIT_SKIP,
    F_IMAGE_SIZE, F_SKIP_BAD, F_NCHW, F_PARTITION, F_CLASSES, /* the user's data (s_data_flag) */
    F_METRICS_PORT, F_METRICS_BIND,
};

typedef struct {
    const char *name;
    int         arg;   /* required_argument | no_argument */
    int         code;
    unsigned    group;
} s_flag;

static const s_flag s_flags[] = {
    {"model", 1, F_MODEL, G_MODEL},          {"data", 1, F_DATA, G_MODEL},
    {"norm", 1, F_NORM, G_MODEL},            {"precision", 1, F_PREC, G_MODEL},
    {"groups", 1, F_GROUPS, G_MODEL},        {"pad-to", 1, F_PADTO, G_MODEL},
    {"augment", 1, F_AUG, G_MODEL},          {"zero-init-residual", 1, F_ZIR, G_MODEL},
    {"train-subset", 1, F_SUBSET, G_MODEL},
    {"init", 1, F_INIT, G_MODEL},            {"init-skip", 1, F_INIT_SKIP, G_MODEL},
    {"epochs", 1, F_EPOCHS, G_OPTIM},        {"batch", 1, F_BATCH, G_OPTIM},
    {"lr", 1, F_LR, G_OPTIM},                {"momentum", 1, F_MOM, G_OPTIM},
    {"wd", 1, F_WD, G_OPTIM},                {"no-nesterov", 0, F_NONEST, G_OPTIM},
    {"warmup", 1, F_WARMUP, G_OPTIM},        {"milestones", 1, F_MILE, G_OPTIM},
    {"lr-decay", 1, F_LR_DECAY, G_OPTIM},    {"gamma", 1, F_GAMMA, G_OPTIM},
    {"qgm", 0, F_QGM, G_OPTIM},
    {"seed", 1, F_SEED, G_RUN},              {"threads", 1, F_THREADS, G_RUN},
    {"wgrad", 1, F_WGRAD, G_RUN},
    {"metrics", 1, F_METRICS, G_RUN},        {"save", 1, F_SAVE, G_RUN},
    {"eval-every", 1, F_EVAL_EVERY, G_RUN},  {"no-eval", 0, F_NO_EVAL, G_RUN},
    {"eval-subset", 1, F_EVAL_SUBSET, G_RUN}, {"eval-offset", 1, F_EVAL_OFFSET, G_RUN},
    {"eval-final", 1, F_EVAL_FINAL, G_RUN},
    {"grad-guard", 1, F_GRAD_GUARD, G_RUN},
    {"debug-nan-at", 1, F_NAN_AT, G_DEBUG_RUN},
    {"topology", 1, F_TOPO, G_GOSSIP},       {"algo", 1, F_ALGO, G_GOSSIP},
    {"compress", 1, F_COMP, G_GOSSIP},       {"eta", 1, F_ETA, G_GOSSIP},
    {"no-push-sum", 0, F_NOPS, G_GOSSIP},    {"skew", 1, F_SKEW, G_GOSSIP},
    {"gossip-every", 1, F_GOSSIP_EVERY, G_GOSSIP}, {"out", 1, F_OUT, G_GOSSIP},
    {"staleness", 1, F_STALE, G_GOSSIP},
    {"eval-nodes", 1, F_EVAL_NODES, G_SIM},  {"delays", 1, F_DELAYS, G_SIM},
    {"rank", 1, F_RANK, G_NODE},             {"bind", 1, F_BIND, G_NODE},
    {"peer", 1, F_PEER, G_NODE},             {"timeout", 1, F_TIMEOUT, G_NODE},
    {"no-gossip", 0, F_NOGOSSIP, G_NODE},    {"checkpoint-every", 1, F_CKPT_EVERY, G_NODE},
    {"resume", 0, F_RESUME, G_NODE},         {"peer-timeout", 1, F_PEER_FLOOR, G_NODE},
    {"peer-timeout-factor", 1, F_PEER_FACTOR, G_NODE},
    {"fail-on-peer-loss", 0, F_FAIL_LOSS, G_NODE}, {"cert", 1, F_CERT, G_NODE},
    {"debug-drop", 1, F_DROP, G_DEBUG_LINK}, {"debug-drop-resync", 1, F_DROP_RESYNC, G_DEBUG_LINK},
    {"debug-slow", 1, F_DEBUG_SLOW, G_DEBUG_LINK},
    {"discovery-interface", 1, F_DISC_IFACE, G_NODE},
    {"min-nodes", 1, F_MIN_NODES, G_NODE},   {"start-window", 1, F_START_WINDOW, G_NODE},
    {"fresh-wait", 1, F_FRESH_WAIT, G_NODE},    {"late-after", 1, F_LATE_AFTER, G_NODE},
    {"yield-pace", 1, F_YIELD_PACE, G_NODE},    {"defer-updates", 1, F_DEFER, G_NODE},
    {"join", 1, F_JOIN, G_SIM},
    {"image-size", 1, F_IMAGE_SIZE, G_MODEL}, {"skip-bad", 0, F_SKIP_BAD, G_MODEL},
    {"nchw", 0, F_NCHW, G_MODEL},            {"partition", 1, F_PARTITION, G_GOSSIP},
    {"classes", 1, F_CLASSES, G_MODEL},
    {"metrics-port", 1, F_METRICS_PORT, G_NODE}, {"metrics-bind", 1, F_METRICS_BIND, G_NODE},
};

#define S_NFLAGS (sizeof s_flags / sizeof s_flags[0])

/* The getopt_long table of the flags of `groups` (free() it). */
static struct option *s_table(unsigned groups)
{
    struct option *t = nn_xcalloc(S_NFLAGS + 3, sizeof *t), *p = t;
    for (size_t i = 0; i < S_NFLAGS; i++)
        if (s_flags[i].group & groups)
            *p++ = (struct option){s_flags[i].name, s_flags[i].arg, 0, s_flags[i].code};
    *p++ = (struct option){"help", no_argument, 0, F_HELP};
    *p++ = (struct option){"help-debug", no_argument, 0, F_HELP_DEBUG};
    return t;
}

/* ---- help texts --------------------------------------------------------- */

static const char *const s_heads[] = {
    [NODE_CMD_TRAIN] =
"usage: lpgossip train [options]\nTrains one model on one machine (no gossip).\n",
    [NODE_CMD_SIMULATE] =
"usage: lpgossip simulate --topology FILE [options]\n"
"Runs every node of a topology in this one process (deterministic), with the\n"
"same gossip code and wire format as `lpgossip node`.\n",
    [NODE_CMD_NODE] =
"usage: lpgossip node --topology FILE [--rank R] [options]\n"
"Runs one node (rank R) of a decentralized run as this process, gossiping\n"
"with its neighbours over ZeroMQ.  Start one process per node of the\n"
"topology; all must get the same flags except --rank/--bind/--peer.\n",
};

static const char s_help_model[] =
"model and data:\n"
"  --model NAME|FILE   cnn | resnet20 | vgg11, or a model file FILE.yaml\n"
"                      (docs/models.md; models/ has the built-ins) [cnn]\n"
"  --data SPEC         fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR | images:DIR\n"
"                      | npz:FILE | csv:TRAIN.csv[,test=TEST.csv][,label=COLUMN];\n"
"                      {rank} in SPEC: each node reads its own (docs/data.md)\n"
"                      [fashion-mnist]\n"
"  --image-size HxW    images: resize all to HxW (bilinear up, area down)\n"
"  --skip-bad          images: skip (and count) files that do not decode\n"
"  --nchw              npz: 4-D arrays are N,C,H,W (default N,H,W,C)\n"
"  --classes N         the number of classes (labels 0..N-1), when a node's own\n"
"                      data lacks the highest [the largest label + 1]\n"
"  --norm KIND         evonorm (EvoNorm-S0) | batchnorm | none [evonorm]\n"
"  --precision P       fp32 | int8 (real 8-bit training, Range EvoNorm)\n"
"                      | fakequant (the reference's float simulation) [fp32]\n"
"  --groups G          EvoNorm groups                          [8]\n"
"  --pad-to S          zero-pad images to SxS (vgg11: 32 automatically)\n"
"  --augment MODE      on (random crop + flip) | off | auto (on for resnet20\n"
"                      and vgg11; a model file's augment: key) [auto]\n"
"  --zero-init-residual on|off  resnet20: each block's last norm starts with\n"
"                      gamma 0 (the reference's 8-bit ResNet) [off]\n"
"  --train-subset N    use only the first N training samples (quick runs)\n"
"  --init FILE         start from the weights of a safetensors file (e.g. a\n"
"                      PyTorch state_dict); tensors matched by name\n"
"  --init-skip REGEX   parameters whose names match (POSIX extended regex)\n"
"                      keep their fresh initialisation (a new head)\n";

static const char s_help_optim[] =
"optimisation (SGD, docs/design.md §3):\n"
"  --epochs E          [" GOSSIP_DEF_STR(GOSSIP_DEF_EPOCHS) "]        --batch B    [" GOSSIP_DEF_STR(GOSSIP_DEF_BATCH)
"]       --lr LR   [" GOSSIP_DEF_STR(GOSSIP_DEF_LR) "]\n"
"  --momentum M        [0.9]      --wd WD      [1e-4]     --no-nesterov\n"
"  --warmup E          linear warm-up epochs from lr/10    [" GOSSIP_DEF_STR(GOSSIP_DEF_WARMUP_EPOCHS) "]\n"
"  --milestones A,B    epochs where lr *= --lr-decay  [50%,75% of --epochs]\n"
"  --lr-decay F        learning-rate factor at each milestone [" GOSSIP_DEF_STR(GOSSIP_DEF_LR_DECAY) "]\n"
"                      (--gamma F: the old spelling, deprecated)\n"
"  --qgm               quasi-global momentum\n";

static const char s_help_run[] =
"run:\n"
"  --seed S            initial weights and data order          [" GOSSIP_DEF_STR(GOSSIP_DEF_SEED) "]\n"
"  --threads T|auto    threads of the kernels (BLAS and the layer pool); auto:\n"
"                      the CPUs this process may use (affinity, cgroup quota,\n"
"                      OPENBLAS_NUM_THREADS if set)\n"
"                                                            [auto]\n"
"  --wgrad W           int8 weight gradients: bf16 (where the CPU has AVX-512\n"
"                      BF16) | fp32 | auto (bf16 if the CPU has it) [auto]\n"
"  --eval-every N      evaluate every N iterations          [once per epoch]\n"
"  --eval-subset N     progress evaluations on a fixed N-sample subset of the\n"
"                      test set (the same on every node); the last evaluation\n"
"                      on the whole set; 0: the whole set every time   [" GOSSIP_DEF_STR(GOSSIP_DEF_EVAL_SUBSET) "]\n"
"  --eval-offset K     progress evaluations K iterations before each multiple\n"
"                      of --eval-every (nodes sharing a machine take turns) [0]\n"
"  --eval-final W      the last evaluation: whole (the test set) | subset (the\n"
"                      --eval-subset samples; run-local's default, which then\n"
"                      evaluates the averaged model on the whole set) [whole]\n"
"  --no-eval           no test-set evaluation; one metrics line at the end\n"
"  --metrics FILE      append one JSON object per evaluation (docs/node.md)\n"
"  --save FILE         write the final model (simulate: the average model)\n"
"  --grad-guard F      refuse (skip, as a non-finite one) a local step whose\n"
"                      gradient L2 norm is above F x the running mean of the\n"
"                      accepted steps' norms, after 50 accepted steps; 0: off [" GOSSIP_DEF_STR(GOSSIP_DEF_GRAD_GUARD) "]\n";

static const char s_help_gossip[] =
"gossip:\n"
"  --topology FILE     topology YAML (docs/topology.md)            (required)\n"
"  --algo A            dpsgd (SGP) | choco | deepsqueeze            [choco]\n"
"  --compress SPEC     [SPARSIFIER][+QUANTIZER][+deflate]            [" GOSSIP_DEF_COMPRESSOR "]\n"
"                      sparsifiers: topk:F[,rdecay=B] | randk:F | dgc:D[,warmup=E]\n"
"                      quantizers: q8 | qsgd:S; e.g. topk:0.01+q8, dgc:0.001,warmup=4+q8+deflate\n"
"  --eta X             consensus step (choco, deepsqueeze)  [" GOSSIP_DEF_STR(GOSSIP_DEF_ETA) "; " GOSSIP_DEF_STR(GOSSIP_DEF_ETA_SPARSE) " with a sparsifier;\n"
"                      at most 1/(S+1) with --staleness S]\n"
"  --no-push-sum       plain gossip (needs a doubly stochastic topology)\n"
"  --skew S            non-IID skew of the data partition, 0 = IID   [" GOSSIP_DEF_STR(GOSSIP_DEF_SKEW) "]\n"
"  --partition dirichlet:ALPHA  per-class shares from Dir(ALPHA) instead\n"
"  --gossip-every H    H local SGD steps per gossip round (an iteration is one\n"
"                      local step; rounds after iterations H, 2H, ...)  [" GOSSIP_DEF_STR(GOSSIP_DEF_GOSSIP_EVERY) "]\n"
"  --staleness S       bounded staleness: mix iteration t with messages as old as\n"
"                      t-S, wait only for older ones (0 = synchronous; at most\n"
"                      %d; S > 0 with dpsgd/deepsqueeze needs push-sum;\n"
"                      docs/gossip.md \"Bounded staleness\")\n"
"                      [node: %d (0 for dpsgd/deepsqueeze with --no-push-sum);\n"
"                      simulate: " GOSSIP_DEF_STR(GOSSIP_DEF_STALENESS_SIM) "]\n"
"  --out DIR           output directory (models, metrics)\n";

static const char s_help_sim[] =
"simulate:\n"
"  --delays SPEC       deliver messages late, deterministically (seeded by --seed):\n"
"                      fixed:D (D rounds), random:D (0..D per message), or\n"
"                      slow:R:F (node R steps on a fraction F of the rounds and its\n"
"                      messages are S rounds late); delays must be <= --staleness\n"
"  --eval-nodes K      evaluate only the first K node models for the mean\n"
"                      node accuracy (the average model is always evaluated)\n"
"  --join R@T          node R is absent (down at its neighbours) before iteration\n"
"                      T, then joins with an in-neighbour's model (docs/gossip.md)\n"
"  (--out DIR writes DIR/model-RANK.safetensors at the end)\n";

static const char s_help_node[] =
"node:\n"
"  --rank R            this node's rank; default from LPGOSSIP_RANK, SLURM_PROCID,\n"
"                      OMPI_COMM_WORLD_RANK or PMI_RANK\n"
"  --cert FILE         this node's CURVE certificate (lpgossip keygen), required\n"
"                      when the topology says `security: curve`\n"
"  --bind ENDPOINT     bind the receiving socket here (e.g. tcp://*:5555)\n"
"                      instead of this node's endpoint in the topology\n"
"  --peer ID=ENDPOINT  endpoint of node ID (overrides the topology; repeatable)\n"
"  --timeout S         bound on every wait (start, each iteration, end) and on a\n"
"                      silent neighbour [" GOSSIP_DEF_STR(GOSSIP_DEF_TIMEOUT_S) "]\n"
"  --no-gossip         local SGD only, no communication (for timing)\n"
"  --checkpoint-every N  write --out DIR/ckpt-RANK.safetensors every N iterations\n"
"                      (atomic; default: once per epoch; 0: only on SIGINT/SIGTERM)\n"
"  --resume            continue from --out DIR/ckpt-RANK.safetensors and rejoin the\n"
"                      run (at the neighbours' iteration, re-syncing public copies)\n"
"  --peer-timeout S    a silent neighbour is declared down after at least S s [" GOSSIP_DEF_STR(GOSSIP_DEF_PEER_FLOOR_S) "]\n"
"  --peer-timeout-factor F  ... or after F times its observed message period [" GOSSIP_DEF_STR(GOSSIP_DEF_PEER_FACTOR) "]\n"
"                      (never later than --timeout); it is then left out of the\n"
"                      mixing and the run goes on; it comes back when it speaks again\n"
"  --fail-on-peer-loss end the run instead when a neighbour is lost\n"
"  --discovery-interface IFACE  with `discovery: lan`: broadcast on this network\n"
"                      interface (e.g. eth0) [ZSYS_INTERFACE, else the first that can]\n"
"  --start-window S    start as soon as every neighbour answered, or after S s\n"
"                      when the quorum holds (the silent ones are then down and\n"
"                      join later) [" GOSSIP_DEF_STR(GOSSIP_DEF_START_WINDOW_S) "]\n"
"  --min-nodes N       quorum: this node + its answering neighbours >= N (at most\n"
"                      1 + its neighbours) [" GOSSIP_DEF_STR(GOSSIP_DEF_MIN_NODES) "]; a node started later with the same\n"
"                      command line joins the run in progress (docs/node.md)\n"
"  --fresh-wait F      with --staleness S > 0: once a round may mix, wait up to F\n"
"                      times the round time for the current messages of the\n"
"                      neighbours that are level with this node (equal speeds\n"
"                      then mix fresh messages; a slow neighbour already behind\n"
"                      is not waited for; 12 F times the larger step time, up\n"
"                      to S - 1 behind, for an in-neighbour it does not send to\n"
"                      whose step time is at most twice its own); 0 = never wait [" GOSSIP_DEF_STR(GOSSIP_DEF_FRESH_WAIT) "]\n"
"  --late-after F      with --staleness S > 0: a neighbour more than S iterations\n"
"                      behind that held a round up for F times the round time is\n"
"                      mixed late (its messages as they come, with their own\n"
"                      weights) instead of waited for, until it catches up;\n"
"                      0 = always wait [" GOSSIP_DEF_STR(GOSSIP_DEF_LATE_AFTER) "]\n"
"  --defer-updates 0|1 with --staleness S > 0 and choco: a neighbour that\n"
"                      acknowledges our updates late but still sends (a slow\n"
"                      link) gets fewer: updates without values (a few bytes)\n"
"                      between full ones; 0 = always full [" GOSSIP_DEF_STR(GOSSIP_DEF_DEFER_UPDATES) "]\n"
"  --yield-pace R      with --staleness S > 0: a node so slow that its neighbours\n"
"                      wait at each of its steps takes fewer steps (mix-only\n"
"                      iterations) so that they keep 1/R of their own pace\n"
"                      (docs/gossip.md); 0 = never yield [" GOSSIP_DEF_STR(GOSSIP_DEF_YIELD_PACE) "]\n"
"  --metrics-port P    serve /metrics (Prometheus) and /status (JSON) over HTTP\n"
"                      on port P; auto: a free port (logged); +K: this node's\n"
"                      TCP port + K (`lpgossip watch --offset K` finds it);\n"
"                      0: off [0]\n"
"  --metrics-bind ADDR the address it listens on, e.g. 0.0.0.0 [" GOSSIP_DEF_METRICS_BIND "]\n"
"Files in --out DIR: model-RANK.safetensors (the de-biased model z),\n"
"metrics-RANK.jsonl (one JSON object per evaluation), log-RANK.txt.\n";

static const char s_help_debug_run[] =
"fault injection (tests):\n"
"  --debug-nan-at T    a NaN in the input of iteration T's batch (of the first\n"
"                      rank this process drives; a mix-only catch-up iteration has no\n"
"                      batch: then the next one's): exercises the non-finite step guard\n";

static const char s_help_debug_link[] =
"  --debug-drop P      drop a fraction P of the outgoing gossip messages\n"
"                      (exercises the resync protocol)\n"
"  --debug-drop-resync N  lose this node's first N RESYNC answers (the asker must\n"
"                      get one all the same)\n"
"  --debug-slow F      run at a fraction F of the speed: after each local step of\n"
"                      d seconds, serve the neighbours for d*(1/F - 1) seconds\n";

static void s_usage(FILE *f, node_command cmd, int debug)
{
    unsigned g = s_groups[cmd];
    fprintf(f, "%s\n", s_heads[cmd]);
    if (debug) {
        fputs(s_help_debug_run, f);
        if (g & G_DEBUG_LINK)
            fputs(s_help_debug_link, f);
        return;
    }
    const struct { unsigned group; const char *text; } parts[] = {
        {G_NODE, s_help_node},   {G_SIM, s_help_sim},     {G_GOSSIP, s_help_gossip},
        {G_MODEL, s_help_model}, {G_OPTIM, s_help_optim}, {G_RUN, s_help_run},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!(g & parts[i].group))
            continue;
        if (parts[i].group == G_GOSSIP) /* the staleness limits */
            fprintf(f, s_help_gossip, GOSSIP_STALE_MAX, GOSSIP_DEF_STALENESS);
        else
            fputs(parts[i].text, f);
    }
    fputs("  -h, --help          this text; --help-debug: the fault-injection flags\n", f);
}

/* ---- the handlers, one per group: 0 stored, -1 bad value, 1 not mine ----- */

static int s_copy(char *dst, size_t len, const char *flag, const char *arg, char *err,
                  size_t errlen)
{
    if (strlen(arg) >= len)
        return nn_errf(err, errlen, "%s: value too long (at most %zu characters)", flag, len - 1);
    memcpy(dst, arg, strlen(arg) + 1);
    return 0;
}

static int s_on_off(const char *flag, const char *arg, int *out, char *err, size_t errlen)
{
    if (strcmp(arg, "on") && strcmp(arg, "off"))
        return nn_errf(err, errlen, "%s '%s': expected on or off", flag, arg);
    *out = arg[1] == 'n';
    return 0;
}

static int s_int(const char *flag, const char *arg, long lo, long hi, int *out, char *err,
                 size_t errlen)
{
    long v;
    if (node_parse_int(flag, arg, lo, hi, &v, err, errlen) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int s_float(const char *flag, const char *arg, double lo, double hi, float *out,
                   char *err, size_t errlen)
{
    double v;
    if (node_parse_double(flag, arg, lo, hi, &v, err, errlen) != 0)
        return -1;
    *out = (float)v;
    return 0;
}

/* The user's data flags (docs/data.md); 1 if code is none of them. */
static int s_data_flag(node_model_opts *m, int code, const char *arg, char *err, size_t errlen)
{
    char tail;
    switch (code) {
    case F_IMAGE_SIZE:
        if (sscanf(arg, "%dx%d%c", &m->image_h, &m->image_w, &tail) != 2 || m->image_h < 1 ||
            m->image_w < 1 || m->image_h > 16384 || m->image_w > 16384)
            return nn_errf(err, errlen, "--image-size '%s': expected HxW, e.g. 28x28", arg);
        return 0;
    case F_SKIP_BAD: m->skip_bad = 1; return 0;
    case F_NCHW: m->nchw = 1; return 0;
    case F_CLASSES: return s_int("--classes", arg, 1, 256, &m->classes, err, errlen);
    case F_PARTITION:
        if (strncmp(arg, "dirichlet:", 10) != 0)
            return nn_errf(err, errlen, "--partition '%s': expected dirichlet:ALPHA", arg);
        return node_parse_double("--partition dirichlet", arg + 10, 1e-6, 1e6, &m->dirichlet,
                                 err, errlen);
    default: return 1;
    }
}

static int s_model_flag(node_model_opts *m, int code, const char *arg, char *err, size_t errlen)
{
    if (code >= F_IMAGE_SIZE)
        return s_data_flag(m, code, arg, err, errlen);
    switch (code) {
    case F_MODEL: return node_model_opt_set(m, "--model", arg, err, errlen);
    case F_DATA: return s_copy(m->data, sizeof m->data, "--data", arg, err, errlen);
    case F_NORM: return node_norm_parse("--norm", arg, &m->norm, err, errlen);
    case F_PREC: return node_precision_parse("--precision", arg, &m->precision, err, errlen);
    case F_GROUPS: return s_int("--groups", arg, 1, 1024, &m->groups, err, errlen);
    case F_PADTO: return s_int("--pad-to", arg, 0, 4096, &m->pad_to, err, errlen);
    case F_ZIR: return s_on_off("--zero-init-residual", arg, &m->zero_init_residual, err, errlen);
    case F_AUG:
        if (!strcmp(arg, "auto")) {
            m->augment = -1;
            return 0;
        }
        if (s_on_off("--augment", arg, &m->augment, err, errlen) == 0)
            return 0;
        return nn_errf(err, errlen, "--augment '%s': expected on, off or auto", arg);
    default: return 1;
    }
}

static int s_optim_flag(node_train_opts *o, int code, const char *arg, char *err, size_t errlen)
{
    switch (code) {
    case F_EPOCHS: return node_parse_int("--epochs", arg, 1, 100000, &o->epochs, err, errlen);
    case F_BATCH: return node_parse_int("--batch", arg, 1, 65536, &o->batch, err, errlen);
    case F_LR: return s_float("--lr", arg, 0, 100, &o->sched.base_lr, err, errlen);
    case F_MOM: return s_float("--momentum", arg, 0, 0.9999, &o->sgd.momentum, err, errlen);
    case F_WD: return s_float("--wd", arg, 0, 1, &o->sgd.weight_decay, err, errlen);
    case F_NONEST: o->sgd.nesterov = 0; return 0;
    case F_QGM: o->sgd.qgm = 1; return 0;
    case F_WARMUP:
        return node_parse_double("--warmup", arg, 0, 1000, &o->sched.warmup_epochs, err, errlen);
    case F_MILE:
        o->have_milestones = 1; /* "" is a valid list: no milestones */
        return nn_lr_parse_milestones(&o->sched, arg, err, errlen) ? -1 : 0;
    case F_GAMMA:
        fprintf(stderr, "lpgossip: --gamma is deprecated (it is not the EvoNorm gamma): "
                "use --lr-decay\n");
        return s_float("--gamma", arg, 0, 1, &o->sched.gamma, err, errlen);
    case F_LR_DECAY: return s_float("--lr-decay", arg, 0, 1, &o->sched.gamma, err, errlen);
    case F_SUBSET:
        return node_parse_int("--train-subset", arg, 1, 1L << 40, &o->subset, err, errlen);
    case F_INIT: return s_copy(o->init, sizeof o->init, "--init", arg, err, errlen);
    case F_INIT_SKIP:
        return s_copy(o->init_skip, sizeof o->init_skip, "--init-skip", arg, err, errlen);
    default: return 1;
    }
}

/* --wgrad: the process-wide weight-gradient arithmetic of the int8 ops
 * (lp_bf16.h), set here so that a CPU without bf16 is a usage error. */
static int s_wgrad(const char *arg, char *err, size_t errlen)
{
    lp_wgrad_t w;
    if (lp_wgrad_parse(arg, &w) != 0) {
        snprintf(err, errlen, "--wgrad: unknown value '%s' (auto, fp32, bf16)", arg);
        return -1;
    }
    return lp_wgrad_set(w, err, errlen);
}

static int s_run_flag(node_train_opts *o, int code, const char *arg, char *err, size_t errlen)
{
    switch (code) {
    case F_SEED: return node_parse_int("--seed", arg, 0, 1L << 62, &o->seed, err, errlen);
    case F_THREADS: return node_parse_threads(arg, &o->threads, err, errlen);
    case F_WGRAD: return s_wgrad(arg, err, errlen);
    case F_METRICS: return s_copy(o->metrics, sizeof o->metrics, "--metrics", arg, err, errlen);
    case F_SAVE: return s_copy(o->save, sizeof o->save, "--save", arg, err, errlen);
    case F_EVAL_EVERY:
        return node_parse_int("--eval-every", arg, 1, 1L << 40, &o->eval_every, err, errlen);
    case F_EVAL_SUBSET:
        return node_parse_int("--eval-subset", arg, 0, 1L << 40, &o->eval_subset, err, errlen);
    case F_EVAL_OFFSET:
        return node_parse_int("--eval-offset", arg, 0, 1L << 40, &o->eval_offset, err, errlen);
    case F_EVAL_FINAL:
        if (strcmp(arg, "whole") && strcmp(arg, "subset"))
            return nn_errf(err, errlen, "--eval-final '%s': expected whole or subset", arg);
        o->eval_final_subset = !strcmp(arg, "subset");
        return 0;
    case F_NO_EVAL: o->no_eval = 1; return 0;
    case F_NAN_AT:
        return node_parse_int("--debug-nan-at", arg, 0, 1L << 40, &o->debug_nan_at, err, errlen);
    case F_GRAD_GUARD:
        return node_parse_double("--grad-guard", arg, 0, 1e30, &o->grad_guard, err, errlen);
    default: return 1;
    }
}

/* --join R@T (simulate). */
static int s_join_spec(node_gossip_opts *g, const char *arg, char *err, size_t errlen)
{
    char *end;
    long r = strtol(arg, &end, 10), t = -1;
    if (end != arg && *end == '@' && end[1])
        t = strtol(end + 1, &end, 10);
    if (r < 0 || r >= TOPO_MAX_NODES || t < 0 || *end)
        return nn_errf(err, errlen, "--join '%s': expected R@T (rank R joins at iteration T)",
                       arg);
    g->join_rank = r;
    g->join_at = t;
    return 0;
}

static int s_gossip_flag(node_gossip_opts *g, int code, const char *arg, char *err,
                         size_t errlen)
{
    char why[512];
    switch (code) {
    case F_TOPO: return s_copy(g->topology, sizeof g->topology, "--topology", arg, err, errlen);
    case F_ALGO: return gossip_algo_parse(arg, &g->gc.algo, err, errlen) ? -1 : 0;
    case F_COMP:
        if (gossip_compressor_parse(&g->comp, arg, why, sizeof why) != 0)
            return nn_errf(err, errlen, "--compress: %s", why);
        return s_copy(g->gc.compressor, sizeof g->gc.compressor, "--compress", arg, err, errlen);
    case F_ETA: return node_parse_double("--eta", arg, 0, 1, &g->gc.eta, err, errlen);
    case F_NOPS: g->gc.push_sum = 0; return 0;
    case F_SKEW: return node_parse_double("--skew", arg, 0, 1, &g->skew, err, errlen);
    case F_GOSSIP_EVERY:
        return node_parse_int("--gossip-every", arg, 1, 1L << 30, &g->gossip_every, err, errlen);
    case F_OUT: return s_copy(g->out, sizeof g->out, "--out", arg, err, errlen);
    case F_EVAL_NODES:
        return node_parse_int("--eval-nodes", arg, 0, 1 << 20, &g->eval_nodes, err, errlen);
    case F_JOIN: return s_join_spec(g, arg, err, errlen);
    case F_STALE: {
        long v;
        if (node_parse_int("--staleness", arg, 0, GOSSIP_STALE_MAX, &v, err, errlen) != 0)
            return -1;
        g->gc.staleness = (int)v;
        return 0;
    }
    case F_DELAYS: return s_copy(g->delays, sizeof g->delays, "--delays", arg, err, errlen);
    default: return 1;
    }
}

static int s_endpoint(const char *flag, const char *arg, char *err, size_t errlen)
{
    char why[128];
    if (topo_check_endpoint(arg, why, sizeof why) != 0)
        return nn_errf(err, errlen, "%s '%s': %s (e.g. tcp://*:5555)", flag, arg, why);
    return 0;
}

static int s_node_flag(node_net_opts *n, int code, const char *arg, char *err, size_t errlen)
{
    gossip_link_config *lc = &n->lc;
    switch (code) {
    case F_RANK: return node_parse_int("--rank", arg, 0, TOPO_MAX_NODES - 1, &n->rank, err, errlen);
    case F_BIND:
        n->bind = arg;
        return s_endpoint("--bind", arg, err, errlen);
    case F_CERT: n->cert = arg; return 0;
    case F_DISC_IFACE: n->discovery_interface = arg; return 0;
    case F_PEER: n->peers[n->npeers++] = arg; return 0;
    case F_TIMEOUT: return node_parse_double("--timeout", arg, 0.1, 1e6, &lc->timeout, err, errlen);
    case F_PEER_FLOOR:
        return node_parse_double("--peer-timeout", arg, 0.1, 1e6, &lc->peer_floor, err, errlen);
    case F_PEER_FACTOR:
        return node_parse_double("--peer-timeout-factor", arg, 1, 1e6, &lc->peer_factor, err,
                                 errlen);
    case F_FAIL_LOSS: lc->fail_on_loss = 1; return 0;
    case F_DROP:
        return node_parse_double("--debug-drop", arg, 0, 1, &lc->drop_gossip, err, errlen);
    case F_DROP_RESYNC:
        return node_parse_int("--debug-drop-resync", arg, 0, 1000, &lc->drop_resyncs, err, errlen);
    case F_DEBUG_SLOW:
        return node_parse_double("--debug-slow", arg, 0.01, 1, &n->debug_slow, err, errlen);
    case F_NOGOSSIP: n->no_gossip = 1; return 0;
    case F_CKPT_EVERY:
        return node_parse_int("--checkpoint-every", arg, 0, 1000000000L, &n->ckpt_every, err,
                              errlen);
    case F_RESUME: n->resume = 1; return 0;
    case F_MIN_NODES: {
        long v;
        if (node_parse_int("--min-nodes", arg, 1, TOPO_MAX_NODES, &v, err, errlen) != 0)
            return -1;
        lc->min_nodes = (int)v;
        return 0;
    }
    case F_START_WINDOW:
        return node_parse_double("--start-window", arg, 0, 1e6, &lc->start_window, err, errlen);
    case F_FRESH_WAIT:
        return node_parse_double("--fresh-wait", arg, 0, 10, &lc->fresh_wait, err, errlen);
    case F_LATE_AFTER:
        return node_parse_double("--late-after", arg, 0, 100, &lc->late_after, err, errlen);
    case F_DEFER: {
        long v;
        if (node_parse_int("--defer-updates", arg, 0, 1, &v, err, errlen) != 0)
            return -1;
        lc->defer_updates = (int)v;
        return 0;
    }
    case F_YIELD_PACE:
        if (node_parse_double("--yield-pace", arg, 0, 100, &n->yield_pace, err, errlen) != 0)
            return -1;
        if (n->yield_pace > 0 && n->yield_pace < 1.01)
            return nn_errf(err, errlen, "--yield-pace %s: give 0 (never yield) or a pace "
                           "factor of at least 1.01", arg);
        return 0;
    case F_METRICS_PORT:
        return node_http_parse_port(arg, &n->metrics_port, &n->metrics_offset, err, errlen);
    case F_METRICS_BIND: n->metrics_bind = arg; return 0;
    default: return 1;
    }
}

static int s_store(node_opts *o, int code, const char *arg, char *err, size_t errlen)
{
    int r = s_model_flag(&o->t.mo, code, arg, err, errlen);
    if (r == 1)
        r = s_optim_flag(&o->t, code, arg, err, errlen);
    if (r == 1)
        r = s_run_flag(&o->t, code, arg, err, errlen);
    if (r == 1)
        r = s_gossip_flag(&o->g, code, arg, err, errlen);
    if (r == 1)
        r = s_node_flag(&o->n, code, arg, err, errlen);
    assert(r != 1); /* every code of the table has a handler */
    return r;
}

/* ---- defaults, parsing --------------------------------------------------- */

static void s_defaults(node_opts *o, node_command cmd, int argc)
{
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    node_train_opts *t = &o->t;
    node_model_opts_defaults(&t->mo);
    t->sgd = nn_sgd_defaults();
    t->sched = (nn_lr_schedule){.base_lr = (float)GOSSIP_DEF_LR,
                                .warmup_epochs = GOSSIP_DEF_WARMUP_EPOCHS,
                                .gamma = (float)GOSSIP_DEF_LR_DECAY};
    t->epochs = GOSSIP_DEF_EPOCHS;
    t->batch = GOSSIP_DEF_BATCH;
    t->seed = GOSSIP_DEF_SEED;
    t->threads = 0; /* auto */
    t->debug_nan_at = -1;
    t->eval_subset = GOSSIP_DEF_EVAL_SUBSET;
    t->grad_guard = GOSSIP_DEF_GRAD_GUARD;
    gossip_config_default(&o->g.gc);
    o->g.gc.algo = GOSSIP_DEF_ALGO;
    o->g.gc.eta = -1; /* s_finish: GOSSIP_DEF_ETA or GOSSIP_DEF_ETA_SPARSE */
    o->g.skew = GOSSIP_DEF_SKEW;
    o->g.gossip_every = GOSSIP_DEF_GOSSIP_EVERY;
    o->g.eval_nodes = -1;
    o->g.join_rank = -1;
    o->g.gc.staleness = -1; /* s_finish: the command's default */
    strcpy(o->g.delays, "none");
    o->n.debug_slow = GOSSIP_DEF_DEBUG_SLOW;
    o->n.yield_pace = GOSSIP_DEF_YIELD_PACE;
    o->n.metrics_bind = GOSSIP_DEF_METRICS_BIND;
    char err[256];
    int ok = gossip_compressor_parse(&o->g.comp, o->g.gc.compressor, err, sizeof err);
    assert(ok == 0); /* the default spec */
    (void)ok;
    o->n.rank = -1;
    o->n.ckpt_every = -1;
    o->n.peers = nn_xcalloc((size_t)argc + 1, sizeof *o->n.peers);
    gossip_link_config_default(&o->n.lc);
}

static int s_rank_from_env(long *rank, char *err, size_t errlen)
{
    static const char *const vars[] = {"LPGOSSIP_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                                       "PMI_RANK"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        const char *v = getenv(vars[k]);
        if (v && v[0])
            return node_parse_int(vars[k], v, 0, TOPO_MAX_NODES - 1, rank, err, errlen);
    }
    return nn_errf(err, errlen, "no --rank and none of LPGOSSIP_RANK, SLURM_PROCID, "
                   "OMPI_COMM_WORLD_RANK, PMI_RANK is set");
}

/* Checks across flags and the defaults derived from the typed values. */
static int s_finish(node_opts *o, char *err, size_t errlen)
{
    node_train_opts *t = &o->t;
    if (!t->have_milestones) {
        t->sched.nmilestones = 2;
        t->sched.milestones[0] = GOSSIP_DEF_MILESTONE1 * (double)t->epochs;
        t->sched.milestones[1] = GOSSIP_DEF_MILESTONE2 * (double)t->epochs;
    }
    if (o->g.gc.staleness < 0) /* node: measured, README "Bounded staleness" */
        o->g.gc.staleness = o->cmd == NODE_CMD_NODE && (o->g.gc.push_sum || o->g.gc.algo == GOSSIP_CHOCO)
                                ? GOSSIP_DEF_STALENESS : GOSSIP_DEF_STALENESS_SIM;
    if (o->g.gc.eta < 0) { /* docs/design.md §3: 1 without compression, 0.01 with 99% top-k; */
        o->g.gc.eta = o->g.comp.sparse != GOSSIP_SPARSE_NONE ? GOSSIP_DEF_ETA_SPARSE : GOSSIP_DEF_ETA;
        /* a consensus step on delayed copies is stable up to about 1/(S+1)
         * (docs/gossip.md, "Bounded staleness") */
        if (o->g.gc.eta > 1.0 / (o->g.gc.staleness + 1))
            o->g.gc.eta = 1.0 / (o->g.gc.staleness + 1);
    } else if (o->g.gc.algo != GOSSIP_DPSGD && o->g.gc.eta > 1.0 / (o->g.gc.staleness + 1)) {
        fprintf(stderr, "lpgossip %s: warning: --eta %g is above 1/(S+1) = %.3g for --staleness "
                "%d: the consensus step may be unstable on delayed copies (docs/gossip.md, "
                "\"Bounded staleness\")\n", s_names[o->cmd], o->g.gc.eta,
                1.0 / (o->g.gc.staleness + 1), o->g.gc.staleness);
    }
    o->g.gc.seed = (uint64_t)t->seed;
    if (o->cmd == NODE_CMD_TRAIN)
        return 0;
    if (!o->g.topology[0])
        return nn_errf(err, errlen, "--topology FILE is required");
    if (o->cmd == NODE_CMD_NODE && o->n.rank < 0)
        return s_rank_from_env(&o->n.rank, err, errlen);
    return 0;
}

int node_opts_parse(node_opts *o, node_command cmd, int argc, char **argv)
{
    s_defaults(o, cmd, argc);
    struct option *table = s_table(s_groups[cmd]);
    char err[1024] = "";
    int c, rc = -1;
    optind = 1;
    while (rc < 0 && (c = getopt_long(argc, argv, "h", table, NULL)) != -1) {
        if (c == F_HELP || c == F_HELP_DEBUG) {
            s_usage(stdout, cmd, c == F_HELP_DEBUG);
            rc = 0;
        } else if (c == '?' || c == ':') {
            fprintf(stderr, "lpgossip %s: see --help\n", s_names[cmd]);
            rc = 2;
        } else if (s_store(o, c, optarg, err, sizeof err) != 0) {
            rc = 2;
        }
    }
    free(table);
    if (rc < 0 && optind < argc) {
        nn_errf(err, sizeof err, "unexpected argument '%s' (see --help)", argv[optind]);
        rc = 2;
    }
    if (rc < 0 && s_finish(o, err, sizeof err) != 0)
        rc = 2;
    if (rc == 2 && err[0])
        fprintf(stderr, "lpgossip %s: %s\n", s_names[cmd], err);
    return rc;
}

void node_opts_free(node_opts *o)
{
    free(o->n.peers);
    o->n.peers = NULL;
}

int node_opts_main(node_command cmd, int argc, char **argv, int (*run)(const node_opts *o))
{
    node_opts o;
    int rc = node_opts_parse(&o, cmd, argc, argv);
    if (rc < 0) {
        const int auto_threads = o.t.threads == 0;
        if (auto_threads)
            o.t.threads = node_threads_auto();
        printf("kernels: CPU level %s (LPGOSSIP_CPU caps it)%s, int8 weight gradients %s, "
               "%ld thread(s)%s\n",
               nn_cpu_name(nn_cpu_level()), lp_tile_status(), lp_wgrad_name(), o.t.threads,
               auto_threads ? " (--threads auto)" : "");
        rc = run(&o);
    }
    node_opts_free(&o);
    return rc;
}
