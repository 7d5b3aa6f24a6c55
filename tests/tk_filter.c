/* tk_filter — TEST_FILTER for every cmocka program in tests/.
 *
 * Owns:    nothing but one start-up hook.
 * Exposes: nothing to call: linked into every test program (tests/NAME.c
 *          that is not a test program is a helper), it reads TEST_FILTER
 *          before main and hands it to cmocka_set_test_filter, so
 *          TEST_FILTER=test_name (cmocka's '*' and '?' wildcards allowed)
 *          runs only the matching tests of any program.
 * Callers: the C runtime, before main; scripts/cross uses it for the quick
 *          subsets of the multi-process programs under emulation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

__attribute__((constructor)) static void tk_filter_init(void)
{
    const char *f = getenv("TEST_FILTER");
    if (f && f[0])
        cmocka_set_test_filter(f);
}
