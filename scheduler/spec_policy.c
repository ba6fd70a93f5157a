/* spec_policy.c - the proposal length of a sequence and the step's room
 * for proposals (spec_policy.h). */
#include "scheduler/spec_policy.h"

void spec_policy_init(spec_policy_seq *ps) {
    ps->accept = SPEC_POLICY_PRIOR;
    ps->idle_steps = 0;
}

int spec_policy_len(spec_policy_seq *ps, int k_max, double cost, int probe) {
    double a = ps->accept, best = 1.0, pw = a, e = 1.0;
    int best_k = 0;
    /* E(k) = 1 + a + ... + a^k, built term by term. */
    for (int k = 1; k <= k_max; k++) {
        e += pw;
        pw *= a;
        double gain = e / (1.0 + cost * k);
        if (gain > best + 1e-9) {
            best = gain;
            best_k = k;
        }
    }
    if (best_k > 0) {
        ps->idle_steps = 0;
        return best_k;
    }
    if (probe && k_max > 0 && ++ps->idle_steps >= SPEC_POLICY_PROBE) {
        ps->idle_steps = 0;
        return 1;
    }
    return 0;
}

void spec_policy_observe(spec_policy_seq *ps, int proposed, int accepted) {
    if (proposed <= 0)
        return;
    /* Positions tested: the kept ones and the first rejected one (the
     * positions after it were never reached). */
    int tested = accepted < proposed ? accepted + 1 : accepted;
    float rate = (float)accepted / (float)tested;
    ps->accept += SPEC_POLICY_WEIGHT * (rate - ps->accept);
}

int spec_policy_budget(int threshold, int base_tokens) {
    return threshold > base_tokens ? threshold - base_tokens : 0;
}
