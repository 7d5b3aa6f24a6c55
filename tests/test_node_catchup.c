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

/* One iteration: adds `compute` and `wait` seconds to tm (and to a clock
 * that starts at 1 s), then decides. */
static int s_iter(node_skip_state *st, node_times *tm, double compute, double wait,
                  uint64_t ahead)
{
    tm->compute += compute;
    tm->wait += wait;
    return node_skip_decide(st, tm, ahead, 1.0 + tm->compute + tm->wait);
}

/* A node whose local step lasts d seconds beside neighbours that finish an
 * iteration every p seconds and may run at most S iterations ahead of it
 * (they wait for its message beyond that); a mix-only iteration of the node
 * takes 1 ms, or until their next iteration when it is level.  Returns the
 * neighbours' time for n iterations as a multiple of n p; *steps: the
 * node's local steps. */
static double s_world(int yield, double d, double p, int S, int n, int *steps)
{
    node_skip_state st = {.stale = S, .pace = yield ? 1.15 : 0};
    node_times tm = {0};
    double T = 1.0, next = 1.0 + p;
    uint64_t ts = 0, tn = 0;
    *steps = 0;
    while (tn < (uint64_t)n) {
        uint64_t ahead = tn > ts ? tn - ts : 0;
        int skip = node_skip_decide(&st, &tm, ahead, T);
        double dur = !skip ? d : ahead >= 1 ? 0.001 : (next > T + 0.001 ? next - T : 0.001);
        if (!skip) {
            tm.compute += d;
            ++*steps;
        } else {
            tm.wait += dur;
        }
        double end = T + dur;
        while (next <= end && tn < ts + (uint64_t)S) {
            tn++;
            next += p;
        }
        if (next <= end) /* blocked on this node: done as soon as its message comes */
            next = end;
        ts++;
        T = end;
    }
    return (T - 1.0) / (n * p);
}

/* The neighbours of a node 6 times slower than them, at S = 2: without
 * yielding they go at its pace between its steps (twice their own time);
 * yielding keeps them within NODE_YIELD_PACE plus the ramp-up, while the
 * node still takes some steps.  A node less than 3 times slower (S = 2
 * covers it) yields once or twice at most (probes of their period). */
static void test_slow_node_yields(void **state)
{
    (void)state;
    int s0, s1, s2;
    double before = s_world(0, 0.3, 0.05, 2, 400, &s0);
    double after = s_world(1, 0.3, 0.05, 2, 400, &s1);
    double twice = s_world(1, 0.09, 0.05, 2, 400, &s2);
    int s3;
    double twice_before = s_world(0, 0.09, 0.05, 2, 400, &s3);
    assert_true(before > 1.4);
    assert_true(after < 1.2);
    assert_true(s1 > 400 / 30 && s1 < s0);
    assert_true(twice < 1.1);
    assert_true(s2 + 5 >= s3); /* a probe or two, no more */
    assert_true(twice_before < 1.1);
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
        cmocka_unit_test(test_slow_node_yields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
