/* spec_policy.c - the proposal length of a sequence and the step's room
 * for proposals (spec_policy.h). */
#include "scheduler/spec_policy.h"

void spec_policy_init(spec_policy_seq *ps) {
    ps->accept = SPEC_POLICY_PRIOR;
    ps->idle_steps = 0;
    ps->probing = 0;
}

int spec_policy_len(spec_policy_seq *ps, int k_max, double cost, int probe) {
    ps->probing = 0;
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
        ps->probing = 1;
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

void spec_policy_share(const float *accept, const int *want, const int *probe, int n, int base,
                       double cost, int threshold, int fixed, int *k) {
    int room = spec_policy_budget(threshold, base);
    double v = base, gain_next = 0.0;
    int tokens = base;
    for (int i = 0; i < n; i++) {
        /* Fixed lengths and probes first, in order, as far as the room goes. */
        k[i] = 0;
        int take = fixed ? want[i] : probe[i] && want[i] > 0 ? 1 : 0;
        take = take < room ? take : room;
        if (take > 0) {
            k[i] = take;
            room -= take;
            tokens += take;
            v += fixed ? 0.0 : accept[i];
        }
    }
    if (fixed)
        return;
    while (room > 0) {
        /* The proposal with the best chance of a keep: a^(k + 1). */
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (probe[i] || k[i] >= want[i])
                continue;
            double g = 1.0;
            for (int j = 0; j <= k[i]; j++)
                g *= accept[i];
            if (best < 0 || g > gain_next) {
                best = i;
                gain_next = g;
            }
        }
        if (best < 0 || !(gain_next * (1.0 + cost * (tokens - 1)) > cost * v))
            return;
        k[best]++;
        room--;
        tokens++;
        v += gain_next;
    }
}
