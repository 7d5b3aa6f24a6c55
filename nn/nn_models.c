/* nn_models — the architectures of docs/design.md §6, written once against the
 * nn_b_* builders so that the FP32 and the 8-bit models share their shape.
 *
 *   cnn       conv3x3(in->32)+norm, maxpool2, conv3x3(32->64)+norm, maxpool2,
 *             linear(64*H/4*W/4 -> 128), ReLU, linear(128 -> classes).
 *             The small fast model for demos and tests (about 220k
 *             parameters on 28x28).
 *   resnet20  stem conv3x3(in->16, no bias)+norm; 3 stages x 3 blocks of
 *             16/32/64 channels, stride 2 at the first block of stages 2 and 3;
 *             block = conv3x3, norm, conv3x3, norm, + shortcut (identity or
 *             conv1x1 stride 2 + norm); global average pool; linear(64->classes).
 *             No ReLU with EvoNorm (the norm is the activation); with BatchNorm
 *             the usual ReLUs after the first norm of a block and after the add.
 *   vgg11     64,M,128,M,256,256,M,512,512,M,512,512,M with a norm after every
 *             conv; linear(512,512), ReLU, linear(512,classes).  Needs 32x32.
 *
 * Parameter names follow PyTorch module paths (the PyTorch fixture script in
 * tests/fixtures/ builds the same modules under the same names), e.g. "layer2.0.shortcut.0.weight".
 */
#include <stdio.h>
#include <string.h>

#include "nn/nn_model.h"

/* Norm followed, for BatchNorm, by a ReLU (EvoNorm is its own activation). */
static int s_norm_act(nn_model *m, const nn_model_config *cfg, const char *name, int in,
                      int zero_gamma, int act)
{
    int x = nn_b_norm(m, name, in, zero_gamma);
    if (act && cfg->norm != NN_NORM_EVONORM) {
        char rn[NN_NAME_MAX];
        nn_namef(rn, "%s.relu", name);
        x = nn_b_relu(m, rn, x);
    }
    return x;
}

static int s_build_cnn(nn_model *m, const nn_model_config *cfg, char *err, size_t errlen)
{
    if (cfg->in_h < 8 || cfg->in_w < 8 || cfg->in_h % 4 || cfg->in_w % 4)
        return nn_errf(err, errlen, "cnn needs an input size divisible by 4, got %dx%d",
                       cfg->in_h, cfg->in_w);
    int x = nn_model_input_slot(m);
    x = nn_b_conv(m, "conv1", x, 32, 3, 1, 1, 0);
    x = s_norm_act(m, cfg, "norm1", x, 0, 1);
    x = nn_b_maxpool(m, "pool1", x, 2, 2);
    x = nn_b_conv(m, "conv2", x, 64, 3, 1, 1, 0);
    x = s_norm_act(m, cfg, "norm2", x, 0, 1);
    x = nn_b_maxpool(m, "pool2", x, 2, 2);
    x = nn_b_linear(m, "fc1", x, 128, 1);
    x = nn_b_relu(m, "fc1.relu", x);
    nn_b_linear(m, "fc2", x, cfg->classes, 1);
    return 0;
}

static int s_block(nn_model *m, const nn_model_config *cfg, const char *prefix, int x, int planes,
                   int stride, int zero_gamma)
{
    char n[NN_NAME_MAX];
    nn_shape is = nn_model_slot_shape(m, x);
    nn_namef(n, "%s.conv1", prefix);
    int y = nn_b_conv(m, n, x, planes, 3, stride, 1, 0);
    nn_namef(n, "%s.norm1", prefix);
    y = s_norm_act(m, cfg, n, y, 0, 1);
    nn_namef(n, "%s.conv2", prefix);
    y = nn_b_conv(m, n, y, planes, 3, 1, 1, 0);
    nn_namef(n, "%s.norm2", prefix);
    y = s_norm_act(m, cfg, n, y, zero_gamma, 0);
    int sc = x;
    if (stride != 1 || is.c != planes) {
        nn_namef(n, "%s.shortcut.0", prefix);
        sc = nn_b_conv(m, n, x, planes, 1, stride, 0, 0);
        nn_namef(n, "%s.shortcut.1", prefix);
        sc = s_norm_act(m, cfg, n, sc, 0, 0);
    }
    nn_namef(n, "%s.add", prefix);
    int out = nn_b_add(m, n, y, sc);
    if (cfg->norm != NN_NORM_EVONORM) {
        nn_namef(n, "%s.relu", prefix);
        out = nn_b_relu(m, n, out);
    }
    return out;
}

static int s_build_resnet20(nn_model *m, const nn_model_config *cfg, char *err, size_t errlen)
{
    if (cfg->in_h < 4 || cfg->in_w < 4)
        return nn_errf(err, errlen, "resnet20 needs inputs of at least 4x4, got %dx%d",
                       cfg->in_h, cfg->in_w);
    /* gamma of each block's second norm: 0 on request (the reference's
     * 8-bit ResNet), else 1; the choice never depends on the precision */
    int zero_gamma = cfg->zero_init_residual != 0;
    int x = nn_model_input_slot(m);
    x = nn_b_conv(m, "conv1", x, 16, 3, 1, 1, 0);
    x = s_norm_act(m, cfg, "norm1", x, 0, 1);
    static const int planes[3] = {16, 32, 64};
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < 3; b++) {
            char prefix[NN_NAME_MAX];
            nn_namef(prefix, "layer%d.%d", s + 1, b);
            x = s_block(m, cfg, prefix, x, planes[s], (s > 0 && b == 0) ? 2 : 1, zero_gamma);
        }
    x = nn_b_gap(m, "pool", x);
    nn_b_linear(m, "linear", x, cfg->classes, 1);
    return 0;
}

static int s_build_vgg11(nn_model *m, const nn_model_config *cfg, char *err, size_t errlen)
{
    if (cfg->in_h != 32 || cfg->in_w != 32)
        return nn_errf(err, errlen,
                       "vgg11 needs 32x32 inputs (five 2x2 pools), got %dx%d; pad 28x28 "
                       "images to 32 (--pad-to 32)", cfg->in_h, cfg->in_w);
    static const int plan[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    int x = nn_model_input_slot(m);
    int idx = 0; /* PyTorch's features.<idx> numbering: conv, norm[, relu], pool */
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        char n[NN_NAME_MAX];
        if (plan[i] == 0) {
            nn_namef(n, "features.%d", idx++);
            x = nn_b_maxpool(m, n, x, 2, 2);
            continue;
        }
        nn_namef(n, "features.%d", idx++);
        x = nn_b_conv(m, n, x, plan[i], 3, 1, 1, 0);
        nn_namef(n, "features.%d", idx++);
        x = s_norm_act(m, cfg, n, x, 0, 1);
    }
    x = nn_b_linear(m, "classifier.0", x, 512, 1);
    x = nn_b_relu(m, "classifier.1", x);
    nn_b_linear(m, "classifier.2", x, cfg->classes, 1);
    return 0;
}

int nn_arch_build(nn_model *m, const nn_model_config *cfg, char *err, size_t errlen)
{
    if (strcmp(cfg->arch, "cnn") == 0)
        return s_build_cnn(m, cfg, err, errlen);
    if (strcmp(cfg->arch, "resnet20") == 0)
        return s_build_resnet20(m, cfg, err, errlen);
    if (strcmp(cfg->arch, "vgg11") == 0)
        return s_build_vgg11(m, cfg, err, errlen);
    return nn_errf(err, errlen, "unknown model '%s' (expected one of: %s)", cfg->arch,
                   nn_arch_names());
}

const char *nn_arch_names(void)
{
    return "cnn, resnet20, vgg11";
}
