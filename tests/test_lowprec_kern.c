/* test_lowprec_kern — the kernel tables of lowprec/ (lowprec/lp_kern.h).
 *
 * The table follows the level nn_cpu_force / LPGOSSIP_CPU choose; the
 * portable table is exactly the scalar twins with no capability; every
 * table has every kernel; the capabilities the dispatchers read agree
 * with it (lp_bf16_supported, lp_tile_ready); a level above portable that
 * the CPU has fills at least the quantizers with its own kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lowprec/lp_bf16.h"
#include "lowprec/lp_gemm.h"
#include "lowprec/lp_kern.h"
#include "lowprec/lp_layers.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_cpu.h"

static void test_portable_is_twins(void **state)
{
    (void)state;
    assert_int_equal(nn_cpu_force("portable"), 0);
    const lp_kern_t *k = lp_kern();
    assert_ptr_equal(k->minmax, lp_minmax_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->quantize, lp_quantize_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->quantize_sr, lp_quantize_sr_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->dequantize, lp_dequantize_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->fake_quant_sr, lp_fake_quant_sr_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->fake_quant_sr_add, lp_fake_quant_sr_add_blk); /* the twin's results, blocked */
    assert_ptr_equal(k->gemm, lp_gemm_kernel_blk);
    assert_ptr_equal(k->shiftgemm, lp_shiftgemm_blk); /* the twin's sums, blocked */
    assert_ptr_equal(k->shiftgemm_q, lp_shiftgemm_q_ref);
    assert_ptr_equal(k->dequant_row, lp_dequant_row_ref);
    assert_ptr_equal(k->dequant_rows, lp_dequant_rows_ref);
    assert_ptr_equal(k->dequant_row_q, lp_dequant_row_q_ref);
    assert_ptr_equal(k->dequant_lin, lp_dequant_lin_ref);
    assert_ptr_equal(k->pair_plane, lp_pair_plane_blk); /* the twin's words, blocked */
    assert_ptr_equal(k->quad_row, lp_quad_row_ref);
    assert_ptr_equal(k->tap_sum_row, lp_tap_sum_row_ref);
    assert_ptr_equal(k->tap_isum_row, lp_tap_isum_row_ref);
    assert_ptr_equal(k->ren_row_fwd, lp_ren_row_fwd_blk);
    assert_ptr_equal(k->ren_row_bwd, lp_ren_row_bwd_blk);
    assert_ptr_equal(k->find_eq, lp_find_eq_ref);
    assert_ptr_equal(k->minmax_u8, lp_minmax_u8_ref);
    assert_ptr_equal(k->find_u8, lp_find_u8_ref);
    assert_ptr_equal(k->bf16_row, lp_bf16_row_ref);
    assert_ptr_equal(k->bf16_codes_row, lp_bf16_codes_row_ref);
    assert_ptr_equal(k->shiftdot_bf16, lp_shiftdot_bf16_ref);
    assert_int_equal(k->quads, 0);
    assert_int_equal(k->bf16, 0);
    assert_null(k->tilegemm);
    assert_null(k->tiledot_bf16);
    assert_false(lp_bf16_supported());
    assert_false(lp_tile_ready());
    nn_cpu_force("auto");
}

static void test_every_level(void **state)
{
    (void)state;
    const lp_kern_t *seen[NN_CPU_LEVELS] = {NULL};
    for (int lv = 0; lv < NN_CPU_LEVELS; lv++) {
        if (nn_cpu_force(nn_cpu_name((nn_cpu_t)lv)) != 0)
            continue; /* the CPU lacks it */
        const lp_kern_t *k = lp_kern();
        assert_ptr_equal(lp_kern(), k); /* chosen once, the same table */
        for (int o = 0; o < lv; o++)
            assert_true(seen[o] != k); /* each level its own table */
        seen[lv] = k;
        assert_non_null(k->minmax);
        assert_non_null(k->quantize);
        assert_non_null(k->quantize_sr);
        assert_non_null(k->dequantize);
        assert_non_null(k->fake_quant_sr);
        assert_non_null(k->fake_quant_sr_add);
        assert_non_null(k->gemm);
        assert_non_null(k->shiftgemm);
        assert_non_null(k->shiftgemm_q);
        assert_non_null(k->dequant_row);
        assert_non_null(k->dequant_rows);
        assert_non_null(k->dequant_row_q);
        assert_non_null(k->dequant_lin);
        assert_non_null(k->pair_plane);
        assert_non_null(k->quad_row);
        assert_non_null(k->tap_sum_row);
        assert_non_null(k->tap_isum_row);
        assert_non_null(k->ren_row_fwd);
        assert_non_null(k->ren_row_bwd);
        assert_non_null(k->find_eq);
        assert_non_null(k->minmax_u8);
        assert_non_null(k->find_u8);
        assert_non_null(k->bf16_row);
        assert_non_null(k->bf16_codes_row);
        assert_non_null(k->shiftdot_bf16);
        assert_int_equal(lp_bf16_supported(), k->bf16);
        if (!k->tilegemm)
            assert_false(lp_tile_ready());
        if (k->tiledot_bf16)
            assert_non_null(k->tilegemm);
        /* a SIMD level brings its own quantizers */
        if (lv > 0)
            assert_true(k->quantize != lp_quantize_ref);
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
