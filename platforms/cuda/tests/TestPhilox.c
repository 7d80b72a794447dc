/* Known-answer test of the Philox-4x32-10 generator used by NNPLangevinIntegrator on CUDA (vectors
   from the Random123 distribution, kat_vectors), and the moments of its Box-Muller normals. */
#include <math.h>
#include <stdio.h>

#include "../src/nnp_philox.h"

static int kat(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3, unsigned int k0, unsigned int k1,
               const unsigned int expect[4]) {
    unsigned int c[4] = {c0, c1, c2, c3};
    nnp_philox4x32_10(c, k0, k1);
    int ok = c[0] == expect[0] && c[1] == expect[1] && c[2] == expect[2] && c[3] == expect[3];
    printf("philox4x32-10 %08x %08x %08x %08x / %08x %08x -> %08x %08x %08x %08x %s\n", c0, c1, c2, c3, k0, k1, c[0], c[1],
           c[2], c[3], ok ? "ok" : "WRONG");
    return ok;
}

int main(void) {
    int ok = 1;
    const unsigned int zero[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    const unsigned int ones[4] = {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
    const unsigned int pi[4] = {0xd16cfe09u, 0x94fdcceb, 0x5001e420u, 0x24126ea1u};
    ok &= kat(0, 0, 0, 0, 0, 0, zero);
    ok &= kat(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, ones);
    ok &= kat(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, pi);

    /* Normals: mean 0, variance 1, fourth moment 3 (within 5 sigma of the sampling error). */
    const int n = 1 << 20;
    double s1 = 0, s2 = 0, s4 = 0;
    for (int i = 0; i < n / 4; i++) {
        unsigned int c[4] = {(unsigned int)i, 7, 0, 0x4e4e5021u};
        nnp_philox4x32_10(c, 12345, 0x6f6d6d21u);
        float g[4];
        nnp_box_muller(c[0], c[1], &g[0], &g[1]);
        nnp_box_muller(c[2], c[3], &g[2], &g[3]);
        for (int k = 0; k < 4; k++) s1 += g[k], s2 += g[k] * g[k], s4 += (double)g[k] * g[k] * g[k] * g[k];
    }
    double mean = s1 / n, var = s2 / n - mean * mean, m4 = s4 / n;
    printf("normals: mean %.5f (sd of estimate %.5f), variance %.5f (%.5f), 4th moment %.4f (%.4f)\n", mean, 1 / sqrt(n), var,
           sqrt(2.0 / n), m4, sqrt(96.0 / n));
    ok &= fabs(mean) < 5 / sqrt(n) && fabs(var - 1) < 5 * sqrt(2.0 / n) && fabs(m4 - 3) < 5 * sqrt(96.0 / n);
    printf(ok ? "PASS\n" : "FAIL\n");
    return ok ? 0 : 1;
}
