/*
 * Philox-4x32-10 (Salmon et al., SC'11), the counter-based generator behind NNPLangevinIntegrator's
 * random numbers on CUDA, and the Box-Muller transform to normal deviates. Plain C: the same text
 * is compiled on the host by the known-answer test and pasted into the CUDA kernel source, where
 * NNP_MULHI is __umulhi and NNP_DEVICE is __device__.
 */
#ifndef NNP_MULHI
#define NNP_MULHI(a, b) ((unsigned int)(((unsigned long long)(a) * (unsigned long long)(b)) >> 32))
#endif
#ifndef NNP_DEVICE
#define NNP_DEVICE static inline
#endif

/* Ten rounds on counter c[4] with key (k0, k1); the result replaces c. */
NNP_DEVICE void nnp_philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned int lo0 = 0xD2511F53u * c[0], hi0 = NNP_MULHI(0xD2511F53u, c[0]);
        unsigned int lo1 = 0xCD9E8D57u * c[2], hi1 = NNP_MULHI(0xCD9E8D57u, c[2]);
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

/* Two standard normal deviates from two 32-bit words (Box-Muller; u1 in (0, 1], never 0). */
NNP_DEVICE void nnp_box_muller(unsigned int a, unsigned int b, float* n0, float* n1) {
    float u1 = ((float)(a >> 8) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);
    float r = sqrtf(-2.0f * logf(u1));
    float angle = 6.2831853071795865f * u2;
    *n0 = r * cosf(angle);
    *n1 = r * sinf(angle);
}
