/* test_nn_kern — the FP32 kernel tables of nn/ (nn/nn_kern.h).
 *
 * The table follows the level nn_cpu_force / LPGOSSIP_CPU choose; the
 * portable table is the scalar twins but two blocked kernels, with no im2col/col2im
 * planes and neither the shift nor the lowered conv path; every table
 * has every plane kernel and the shifted GEMM and dot; a level that opens
 * a conv path brings its own shifted kernels for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nn/nn_cpu.h"
#include "nn/nn_kern.h"
#include "nn/nn_layers_simd.h"

static void test_portable_is_twins(void **state)
{
    (void)state;
    assert_int_equal(nn_cpu_force("portable"), 0);
    const nn_kern_t *k = nn_kern();
    assert_ptr_equal(k->sum, nn_sum_ref);
    assert_ptr_equal(k->sqdev, nn_sqdev_ref);
    assert_ptr_equal(k->evo_fwd, nn_evo_fwd_ref);
    assert_ptr_equal(k->evo_bwd_sums, nn_evo_bwd_sums_ref);
    assert_ptr_equal(k->evo_bwd_dx, nn_evo_bwd_dx_ref);
    assert_ptr_equal(k->shiftgemm, nn_shiftgemm_ref);
    assert_ptr_equal(k->shiftdot, nn_shiftdot_blk); /* blocked partial sums */
    assert_ptr_equal(k->maxpool2_row, nn_maxpool2_row_blk); /* the twin's bits */
    assert_null(k->im2col_plane);
    assert_null(k->col2im_plane);
    assert_int_equal(k->shift_maxc, 0);
    assert_int_equal(k->lowered, 0);
    nn_cpu_force("auto");
}

static void test_every_level(void **state)
{
    (void)state;
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue; /* the CPU lacks it */
        const nn_kern_t *k = nn_kern();
        assert_ptr_equal(nn_kern(), k);
        assert_non_null(k->sum);
        assert_non_null(k->sqdev);
        assert_non_null(k->evo_fwd);
        assert_non_null(k->evo_bwd_sums);
        assert_non_null(k->evo_bwd_dx);
        assert_non_null(k->shiftgemm);
        assert_non_null(k->shiftdot);
        assert_true((k->im2col_plane == NULL) == (k->col2im_plane == NULL));
        if (k->shift_maxc > 0 || k->lowered)
            assert_true(k->shiftgemm != nn_shiftgemm_ref && k->shiftdot != nn_shiftdot_ref);
    }
    nn_cpu_force("auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable_is_twins),
        cmocka_unit_test(test_every_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
