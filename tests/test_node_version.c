/* test_node_version — `lpgossip version`: the fingerprint that stored
 * experiment results are keyed by names this build's arithmetic version
 * and, for int8, the weight gradients' precision at the CPU level in force;
 * bad usage exits 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nn/nn_core.h"
#include "tests/tk.h"

/* Runs `lpgossip version ARGS` with LPGOSSIP_CPU=level; its output in out
 * (malloc'ed), the exit code returned. */
static int s_version(const char *level, const char *arg, char **out)
{
    char dir[256], log[300];
    assert_int_equal(tk_mkdtemp(dir, sizeof dir, "version"), 0);
    snprintf(log, sizeof log, "%s/out.txt", dir);
    char *args[] = {"lpgossip", "version", (char *)arg, NULL};
    setenv("LPGOSSIP_CPU", level, 1);
    pid_t pid = tk_spawn(NULL, args, log, -1);
    unsetenv("LPGOSSIP_CPU");
    assert_true(pid > 0);
    int rc = tk_wait(pid, 30);
    *out = tk_slurp(log);
    tk_rmtree(dir);
    return rc;
}

static void test_fingerprint(void **state)
{
    (void)state;
    char *out, want[64];
    assert_int_equal(s_version("portable", "--json", &out), 0);
    snprintf(want, sizeof want, "\"fingerprint\": \"arith=%d wgrad=fp32\"", NN_ARITH_VERSION);
    if (!strstr(out, want) || !strstr(out, "\"cpu_level\": \"portable\""))
        fprintf(stderr, "got: %s\n", out);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\"cpu_level\": \"portable\""));
    free(out);
    assert_int_equal(s_version("portable", NULL, &out), 0);
    snprintf(want, sizeof want, "arithmetic: arith=%d wgrad=fp32", NN_ARITH_VERSION);
    assert_non_null(strstr(out, want));
    free(out);
}

static void test_bad_usage(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(s_version("auto", "--bogus", &out), 2);
    assert_non_null(strstr(out, "unknown option --bogus"));
    free(out);
}

int main(void)
{
    if (!tk_bin())
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_bad_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
