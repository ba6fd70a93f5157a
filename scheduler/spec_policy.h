/* spec_policy.h - how many tokens a sequence proposes in a step
 * (speculative decoding, spec.h), so that speculation never makes a step
 * slower than it saves.
 *
 * Per sequence: its acceptance rate a (the share of verified positions
 * whose proposal was kept, a moving average: each run weighs 1/4) gives
 * the expected tokens a run of k proposals emits, E(k) = (1 - a^(k+1)) /
 * (1 - a), against the step's cost, 1 + c k, where c is what one proposal
 * adds to a one-token step on this backend (measured as the server runs,
 * sched_spec_step_time; spec.h's SCHED_SPEC_COST_* before),
 * plus, with a draft model, a draft step: measured, the draft's one-token
 * step over the target's (sched_spec_step_time; before the first, their
 * weight bytes' ratio).
 * The length is the k in 0..k_max with the best E(k) / (1 + c k); 0 when
 * no length pays. A sequence at 0 still proposes one token every
 * SPEC_POLICY_PROBE steps, so that a change of text (a quote begins) is
 * noticed. A new sequence starts at a = 0.5.
 *
 * Per step: proposals are for memory-bound steps. A step whose tokens
 * without proposals (decode rows and prefill) reach the threshold proposes
 * nothing; below it, the proposals of all sequences together fill it up
 * at most (spec_policy_budget). Within that room a proposal must also pay
 * in the batch (spec_policy_share): a step of N tokens costs 1 + c (N - 1)
 * one-token steps and yields V expected tokens (its base tokens and the
 * proposals' expected keeps), so one more proposal whose keep has
 * probability g pays only when g > c V / (1 + c (N - 1)) (with a draft
 * model a proposal also costs its draft step: c_prop V / C): alone (V = N = 1)
 * that is each sequence's own rule above, and at 7 decode rows with
 * c = 0.3 it asks g > 0.75. The proposals with the highest g go first.
 *
 * Pure functions: no state besides the caller's. */
#ifndef SCHED_SPEC_POLICY_H
#define SCHED_SPEC_POLICY_H

#define SPEC_POLICY_PROBE 8      /* steps between probes of a sequence at length 0 */
#define SPEC_POLICY_PRIOR 0.5f   /* a new sequence's acceptance rate */
#define SPEC_POLICY_WEIGHT 0.25f /* a run's weight in the moving average */

typedef struct spec_policy_seq {
    float accept;   /* the moving acceptance rate, 0..1 */
    int idle_steps; /* steps at length 0 since the last probe */
    int probing;    /* the last spec_policy_len was a probe */
} spec_policy_seq;

void spec_policy_init(spec_policy_seq *ps);
/* The proposal length for this step (0..k_max), cost = c above. Counts an
 * idle step when it returns 0 and returns 1 when a probe is due (probe 1;
 * 0: no probes: a draft model's probe would first compute the whole
 * prompt in the draft, and its acceptance changes little). */
int spec_policy_len(spec_policy_seq *ps, int k_max, double cost, int probe);
/* A verified run: `proposed` proposals, the first `accepted` kept. */
void spec_policy_observe(spec_policy_seq *ps, int proposed, int accepted);
/* Proposals the step may add: threshold - base_tokens, or 0. */
int spec_policy_budget(int threshold, int base_tokens);
/* The batch rule (above) over a step's n candidates: want[i] the length
 * sequence i's own policy gives (spec_policy_len; its probe, probe[i] 1,
 * is kept whenever there is room), accept[i] its rate; base the step's
 * tokens without proposals. The step costs 1 + cost_token (base - 1)
 * one-token steps and each proposal adds cost_prop (cost_token, plus a
 * draft step's share with a draft model); a proposal is added while
 * g cost > cost_prop V. A sequence's first proposals come as a block of
 * min_len (llama.cpp's --draft-min: fewer are not verified). Writes
 * k[i] <= want[i], at most spec_policy_budget(threshold, base) in all.
 * fixed: k = want within the room (no rule). */
void spec_policy_share(const float *accept, const int *want, const int *probe, int n, int base,
                       double cost_token, double cost_prop, int threshold, int min_len, int fixed,
                       int *k);

#endif
