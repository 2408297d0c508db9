/* fuzz_rng.h: the randomized drivers' choices, rnd(n) in [0, n): xorshift64*, uniform enough
   for choosing mutations. Each driver defines FUZZ_RNG_SEED (its sequence) before including. */
#ifndef FUZZ_RNG_H
#define FUZZ_RNG_H
static unsigned long long g_rng = FUZZ_RNG_SEED;
static unsigned rnd(unsigned n) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (unsigned)((g_rng * 2685821657736338717ULL) >> 33) % n;
}
#endif
