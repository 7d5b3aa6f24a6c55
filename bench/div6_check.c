/* div6_check — the exhaustive check behind lp_norm_neon.c's division by 6:
 * for every one of the 2^32 floats a, the correctly rounded a / 6 against
 *   q0 = a*y (y = RN(1/6)),  r = fma(-q0, 6, a),  q = r == r ? fma(r, y, q0) : q0
 * (IEEE single precision, round to nearest: the same on any CPU with FMA).
 * Prints the number of mismatches, the largest |a| among them and whether
 * 1/2 + q and (1/2 + q) + q (the rows' uses of the quotient) ever differ.
 *   cc -O2 -std=c11 -mfma bench/div6_check.c -lm -o /tmp/div6 && /tmp/div6
 * (-mfma on x86; about 20 s).  Not part of the build. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    const float y = 1.0f / 6.0f;
    volatile float six = 6.0f; /* a real division for the reference */
    uint64_t bad = 0, bad_use = 0;
    float amax = 0.0f;
    for (uint64_t u = 0; u < (1ull << 32); u++) {
        const uint32_t b = (uint32_t)u;
        float a;
        memcpy(&a, &b, sizeof a);
        const float want = a / six, q0 = a * y, r = fmaf(-q0, 6.0f, a);
        const float got = r == r ? fmaf(r, y, q0) : q0;
        if (memcmp(&want, &got, sizeof want) == 0)
            continue;
        bad++;
        amax = fabsf(a) > amax ? fabsf(a) : amax;
        const float tw = want + 0.5f, tg = got + 0.5f, hw = tw + want, hg = tg + got;
        if (memcmp(&tw, &tg, sizeof tw) != 0 || memcmp(&hw, &hg, sizeof hw) != 0)
            bad_use++;
    }
    printf("quotients differing: %llu, largest |a| of them %a; 1/2 + q or (1/2 + q) + q "
           "differing: %llu\n",
           (unsigned long long)bad, amax, (unsigned long long)bad_use);
    return bad_use != 0;
}
