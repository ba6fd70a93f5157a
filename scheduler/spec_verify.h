/* spec_verify.h - the acceptance rules of speculative decoding (spec.h).
 *
 * The engine verifies a sequence's run of k proposals with the target's
 * logits at its last token and at each proposal (k + 1 rows), position by
 * position, and stops at the first position that does not keep its
 * proposal; every position it reaches emits one token.
 *
 * Deterministic proposals (ngram, suffix; a draft model sampling greedily):
 * position j is sampled exactly as plain decoding samples it (the same
 * edits, mask and filters, the same draw of the sequence's generator) and
 * the proposal is kept when the sample equals it. The emitted tokens are
 * then those of plain decoding, token for token, whatever was proposed:
 * greedy output and its log-probs are the same bits on the CPU (its logits
 * do not depend on the batch), and a seed reproduces the run without
 * speculation. The generator ends where plain decoding of the emitted
 * tokens leaves it (model_sampler_rng_restore).
 *
 * A draft model sampling (temperature > 0): standard speculative rejection
 * sampling. Proposal x was drawn from the draft's distribution q; the
 * target's p (after mask, bias, penalties, temperature, top-k/p and min-p)
 * keeps it with probability min(1, p(x) / q(x)); otherwise the position
 * emits a token drawn from max(0, p - q) normalised
 * (model_sampler_sample_spec), and a run whose every proposal was kept
 * emits one more token drawn from p. Each emitted token is then
 * distributed exactly as p, but it is not the token plain decoding would
 * have drawn: a seed reproduces a run of the same configuration (and the
 * same proposal lengths), not the run without speculation. The acceptance
 * draws come from a generator of the sequence's own, seeded from its seed
 * (sched_spec_seq_rng). */
#ifndef SCHED_SPEC_VERIFY_H
#define SCHED_SPEC_VERIFY_H

#include <stdint.h>

#include "models/sampler.h"

/* Rejection sampling's test: 1 to keep a proposal whose target probability
 * is p_x and draft probability q_x. p_x >= q_x keeps it without a draw;
 * otherwise one uniform draw u from rng keeps it when u * q_x < p_x. */
int spec_verify_keep(float p_x, float q_x, uint64_t rng[4]);

/* One draft-model position on the host, as the engine runs it through a
 * backend: the target's row (n_vocab logits, modified) sampled with the
 * proposal x and the draft's q; returns the token to emit and sets *kept.
 * For tests and for backends without their own residual sampling. */
int32_t spec_verify_draft_position(model_sampler *target, float *logits, const int32_t *hist,
                                   int n_hist, const float *q, int32_t x, uint64_t rng[4],
                                   int *kept);

/* Seeds an acceptance generator from a sequence's sampling seed (distinct
 * from the sampler's own stream). */
void spec_verify_seed(uint64_t rng[4], uint64_t seed);

#endif
