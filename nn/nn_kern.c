/* nn_kern — see nn_kern.h. */
#include "nn/nn_kern.h"

#include <pthread.h>

#include "nn/nn_layers_simd.h"

static nn_kern_t      s_tab[NN_CPU_LEVELS];
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* Every entry the scalar twin but the blocked shifted dot (nn_conv_blk.c)
 * and 2x2 max pooling row (nn_layers_blk.c),
 * no SIMD-only conv path. */
static void s_fill_twins(nn_kern_t *k)
{
    *k = (nn_kern_t){
        .sum = nn_sum_ref,
        .sqdev = nn_sqdev_ref,
        .evo_fwd = nn_evo_fwd_ref,
        .evo_bwd_sums = nn_evo_bwd_sums_ref,
        .evo_bwd_dx = nn_evo_bwd_dx_ref,
        .maxpool2_row = nn_maxpool2_row_blk,
        .im2col_plane = NULL,
        .col2im_plane = NULL,
        .shiftgemm = nn_shiftgemm_ref,
        .shiftdot = nn_shiftdot_blk,
        .shift_maxc = 0,
        .lowered = 0,
    };
}

static void s_build(void)
{
    for (int l = 0; l < NN_CPU_LEVELS; l++) {
        s_fill_twins(&s_tab[l]);
        nn_kern_fill_arch(&s_tab[l], (nn_cpu_t)l);
    }
}

const nn_kern_t *nn_kern(void)
{
    pthread_once(&s_once, s_build);
    return &s_tab[nn_cpu_level()];
}

/* An architecture without a builder of its own (nn_kern_x86.c,
 * nn_kern_arm.c) runs the portable table at its one level. */
#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)
void nn_kern_fill_arch(nn_kern_t *k, nn_cpu_t level)
{
    (void)k;
    (void)level;
}
#endif
