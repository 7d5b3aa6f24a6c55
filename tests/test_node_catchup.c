/* test_node_catchup — the catch-up decision of bounded staleness
 * (node_skip_decide, docs/gossip.md "Catch-up of a slow node"), fed with
 * simulated times: a node that computes slowly skips while a neighbour is
 * ahead; a fast node that is behind only because it waited for a slow
 * neighbour takes its steps (it would otherwise hand the lag on: the
 * fast neighbours of a node under a CPU quota skipped 150 of 189 steps);
 * nobody skips while no neighbour is ahead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "node/node_run.h"

/* One iteration: adds `compute` and `wait` seconds to tm, then decides. */
static int s_iter(node_skip_state *st, node_times *tm, double compute, double wait,
                  uint64_t ahead)
{
    tm->compute += compute;
    tm->wait += wait;
    return node_skip_decide(st, tm, ahead);
}

static void test_level_never_skips(void **state)
{
    (void)state;
    node_skip_state st = {0};
    node_times tm = {0};
    for (int i = 0; i < 100; i++)
        assert_int_equal(s_iter(&st, &tm, 0.05, i % 3 ? 0.0 : 0.2, 0), 0);
    assert_int_equal(st.held, 0);
}

/* A node at a third of the speed: a step of 0.15 s, no waiting; after each
 * step its neighbours are 2 iterations ahead; it skips exactly those. */
static void test_slow_node_skips(void **state)
{
    (void)state;
    node_skip_state st = {0};
    node_times tm = {0};
    int steps = 0, skips = 0;
    uint64_t ahead = 0;
    double last_c = 0;
    for (int i = 0; i < 90; i++) {
        int skip = s_iter(&st, &tm, last_c, 0.0, ahead);
        skips += skip;
        steps += !skip;
        last_c = skip ? 0.0 : 0.15;
        ahead = skip ? ahead - 1 : 2;
    }
    assert_int_equal(steps, 30);
    assert_int_equal(skips, 60);
    assert_int_equal(st.held, 0);
    assert_true(st.step_s > 0.149 && st.step_s < 0.151);
}

/* A fast node (step 0.05 s) whose neighbour was frozen: it waited 0.2 s in
 * the round before, and the neighbour, catching up with mix-only
 * iterations, is now one iteration ahead.  It steps (held back) and skips
 * again only once an iteration passes without such a wait. */
static void test_held_back_node_steps(void **state)
{
    (void)state;
    node_skip_state st = {0};
    node_times tm = {0};
    for (int i = 0; i < 10; i++)
        assert_int_equal(s_iter(&st, &tm, 0.05, 0.0, 0), 0);
    int skips = 0;
    for (int i = 0; i < 50; i++)
        skips += s_iter(&st, &tm, 0.05, 0.2, 1);
    assert_int_equal(skips, 0);
    assert_int_equal(st.held, 50);
    /* a short wait (under half a step) is jitter, not being held back */
    assert_int_equal(s_iter(&st, &tm, 0.05, 0.02, 1), 1);
    /* no step yet (a joiner's first iteration): only `ahead` decides */
    node_skip_state fresh = {0};
    node_times t0 = {0};
    assert_int_equal(s_iter(&fresh, &t0, 0.0, 5.0, 1), 1);
    assert_int_equal(s_iter(&fresh, &t0, 0.0, 5.0, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_never_skips),
        cmocka_unit_test(test_slow_node_skips),
        cmocka_unit_test(test_held_back_node_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
