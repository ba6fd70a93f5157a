/* brisk_rng.h - the one pseudo-random generator brisk uses: xoshiro256**
 * seeded through splitmix64 (Blackman & Vigna). Deterministic for a seed on
 * every platform; used by the sampler (seeded sampling must reproduce
 * exactly) and by brisk-bench (prompts and arrival times). */
#ifndef BRISK_RNG_H
#define BRISK_RNG_H

#include <stdint.h>

/* Advances *x and returns the next splitmix64 output. */
static inline uint64_t brisk_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The 256-bit state from a 64-bit seed. */
static inline void brisk_rng_seed(uint64_t s[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s[i] = brisk_splitmix64(&x);
}

static inline uint64_t brisk_rng_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: the next 64 bits. */
static inline uint64_t brisk_rng_next(uint64_t s[4]) {
    uint64_t out = brisk_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = brisk_rng_rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double brisk_rng_uniform(uint64_t s[4]) {
    return (double)(brisk_rng_next(s) >> 11) * 0x1.0p-53;
}

#endif
