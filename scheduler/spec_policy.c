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
                       double cost_token, double cost_prop, int threshold, int min_len, int fixed,
                       int *k) {
    int room = spec_policy_budget(threshold, base), need = min_len > 1 ? min_len : 1;
    /* v: the step's expected tokens; cost: its cost in one-token steps. */
    double v = base, cost = 1.0 + cost_token * (base > 1 ? base - 1 : 0);
    for (int i = 0; i < n; i++) {
        /* Fixed lengths and probes first, in order, as far as the room goes;
         * never fewer than min_len (those would be dropped unverified). */
        k[i] = 0;
        int take = fixed ? want[i] : probe[i] ? need : 0;
        take = take < room ? take : room;
        if (take < need || take > want[i])
            continue;
        k[i] = take;
        room -= take;
        cost += cost_prop * take;
        for (double pw = 1.0, j = 0; !fixed && j < take; j++) {
            pw *= accept[i];
            v += pw;
        }
    }
    if (fixed)
        return;
    while (room > 0) {
        /* The next proposals with the best chance of a keep per proposal:
         * a^(k + 1), or a first block of min_len, a + ... + a^min_len. */
        int best = -1, best_len = 0;
        double best_g = 0.0, best_per = 0.0;
        for (int i = 0; i < n; i++) {
            int len = k[i] > 0 ? 1 : need;
            if (probe[i] || k[i] + len > want[i] || len > room)
                continue;
            double pw = 1.0, g = 0.0;
            for (int j = 0; j < k[i]; j++)
                pw *= accept[i];
            for (int j = 0; j < len; j++) {
                pw *= accept[i];
                g += pw;
            }
            if (best < 0 || g / len > best_per) {
                best = i;
                best_len = len;
                best_g = g;
                best_per = g / len;
            }
        }
        /* It pays when the step's tokens per unit of cost rise. */
        if (best < 0 || !(best_g * cost > cost_prop * best_len * v))
            return;
        k[best] += best_len;
        room -= best_len;
        cost += cost_prop * best_len;
        v += best_g;
    }
}
