/* spec_verify.c - rejection sampling's acceptance test (spec_verify.h). */
#include "scheduler/spec_verify.h"

#include "common/brisk_rng.h"

int spec_verify_keep(float p_x, float q_x, uint64_t rng[4]) {
    if (p_x >= q_x)
        return 1;
    if (!(p_x > 0.0f))
        return 0;
    return brisk_rng_uniform(rng) * (double)q_x < (double)p_x;
}

int32_t spec_verify_draft_position(model_sampler *target, float *logits, const int32_t *hist,
                                   int n_hist, const float *q, int32_t x, uint64_t rng[4],
                                   int *kept) {
    float p_x = 0.0f;
    int32_t id = model_sampler_sample_spec(target, logits, hist, n_hist, q, x, &p_x, NULL);
    *kept = id >= 0 && spec_verify_keep(p_x, q[x], rng);
    return *kept ? x : id;
}

void spec_verify_seed(uint64_t rng[4], uint64_t seed) {
    /* A fixed odd constant apart from the sampler's stream of the same seed. */
    brisk_rng_seed(rng, seed ^ 0x5bd1e9955bd1e995ull);
}
