/* spec.h - speculative decoding: the engine's side of it (docs/SPECULATIVE.md).
 *
 * Decode reads every weight once per token, so a memory-bound step can check
 * several proposed tokens of a sequence for about the price of one. Each
 * step, before scheduling, a proposer guesses up to k next tokens of every
 * decoding sequence; the scheduler runs them through the target model with
 * the sequence's decode token as one short run (they count toward the
 * step's token budget, sched_core.h), and the engine samples the target at
 * each position in order, keeping the proposals while they agree with what
 * it would have emitted anyway (spec_verify.h has the rules). The kept
 * positions' K/V stay, the rejected ones' blocks go back (sched_core_trim).
 *
 * Proposers (one per server, the `method` of --speculative-config):
 *   ngram        prompt lookup over the sequence's own tokens (spec_propose.h);
 *   suffix       the sequence's tokens and a bounded index of this server's
 *                recent outputs, the most frequent continuation (spec_propose.h);
 *   draft_model  a second, smaller GGUF with the same vocabulary, its own KV
 *                cache and backend on the same device (spec_draft.h).
 * Proposals never change what a request outputs, only how fast (except a
 * draft model with temperature > 0: rejection sampling keeps the target's
 * distribution, not its exact tokens; spec_verify.h).
 *
 * The policy (spec_policy.h): each sequence's proposal length follows its
 * acceptance, and a step proposes only while the batch is memory-bound: the
 * tokens it would run without proposals, plus the proposals, stay under a
 * threshold measured per backend (max_batch_tokens below).
 *
 * Threading: the engine thread alone calls everything here. */
#ifndef SCHED_SPEC_H
#define SCHED_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_pool.h"
#include "models/backend.h"
#include "models/model.h"
#include "models/sampler.h"

/* The most tokens one sequence may propose in a step (num_speculative_tokens,
 * --draft-max): the step then samples up to 33 rows of it. */
#define SCHED_SPEC_MAX_TOKENS 32

typedef enum {
    SCHED_SPEC_NONE = 0,
    SCHED_SPEC_NGRAM,
    SCHED_SPEC_SUFFIX,
    SCHED_SPEC_DRAFT,
} sched_spec_method;

/* "none", "ngram", "suffix", "draft_model". */
const char *sched_spec_method_name(sched_spec_method m);

/* The configuration (--speculative-config, or --model-draft/--draft-max/
 * --draft-min; cli/cli_spec.c parses them into this plain struct). */
typedef struct sched_spec_config {
    sched_spec_method method;
    int num_tokens;             /* most proposals per sequence and step, 1..SCHED_SPEC_MAX_TOKENS */
    int lookup_min, lookup_max; /* ngram: n-gram lengths matched, longest first (vLLM's 5, 5) */
    const char *draft_model;    /* draft_model: the GGUF file (borrowed until engine create) */
    int draft_min; /* fewer proposals than this are not verified (llama.cpp's --draft-min) */
    long long suffix_bytes; /* suffix: memory of the server-wide index of recent outputs */
    /* suffix, vLLM's suffix_decoding_* (spec_propose.h): the tokens a match
     * and its continuation span (24), proposals per matched token (1.0),
     * the lowest path probability proposed (0.1). */
    int suffix_depth;
    float suffix_factor, suffix_min_prob;
    /* The compute-bound threshold: a step proposes only while its tokens
     * (decode rows, prefill chunks, proposals) stay at or below it; 0: the
     * backend's measured default (SCHED_SPEC_THRESHOLD_*). */
    int max_batch_tokens;
    /* 1: every sequence proposes num_tokens each step (vLLM's behaviour;
     * tests and the GPU campaign's draft = target check), instead of the
     * length its acceptance pays for (spec_policy.h). */
    int fixed_len;
} sched_spec_config;

/* Defaults: method none; num_tokens 0 (must be given); lookup 5, 5 (vLLM's);
 * draft_min 0; suffix_bytes SCHED_SPEC_SUFFIX_BYTES, depth 24, factor 1,
 * min_prob 0.1 (vLLM's); threshold 0. */
sched_spec_config sched_spec_config_default(void);

#define SCHED_SPEC_SUFFIX_BYTES (64LL << 20) /* 64 MiB: ~2.4 million trie nodes */
#define SCHED_SPEC_SUFFIX_DEPTH 24           /* tokens a suffix match and its continuation span */

/* The compute-bound thresholds, in tokens per step (docs/SPECULATIVE.md has
 * the measurement: bench/spec_bench.py --measure-threshold). CPU, SmolLM2-135M
 * on 2 Zen 4 cores: every token a step adds costs 0.23-0.33 of a one-token
 * step from the second token on (no knee: a small model on two cores is
 * near the balance of memory and compute), so a proposal pays at batch B
 * only when its acceptance is above c B / (1 + c (B - 1)): 0.3 alone, 0.6 at
 * 4 rows, 0.75 at 8, 0.86 at 16 (spec_policy_share applies it). Proposals
 * fill a step up to 8 tokens at most: a lone sequence up to 7, eight rows
 * or more none.
 * CUDA: a GPU decode step stays memory-bound to far larger batches; 128
 * until the next GPU campaign measures it (bench/gpu.sh's spec stage). */
#define SCHED_SPEC_THRESHOLD_CPU 8
#define SCHED_SPEC_THRESHOLD_CUDA 128
/* What one proposal adds to a step, as a fraction of a one-token decode step
 * (the policy's cost model, spec_policy.h): CPU 0.27 measured as above, plus
 * ~0.05 for the proposal's logits row and its sampling; CUDA: the
 * campaign's to measure. */
#define SCHED_SPEC_COST_CPU 0.3
#define SCHED_SPEC_COST_CUDA 0.05

/* Checks a configuration; 0, or BRISK_EINVAL with a one-line reason. */
int sched_spec_config_check(const sched_spec_config *c, char *err, size_t err_len);

typedef struct sched_spec sched_spec;
typedef struct sched_spec_seq sched_spec_seq;

/* What the engine gives the speculation it makes (borrowed; outlive it). */
typedef struct sched_spec_env {
    const model *target;
    model_backend *be; /* the target's backend (its device and threshold) */
    kern_pool *pool;
    int max_seqs, max_batch_tokens, max_ctx;
} sched_spec_env;

/* Makes the proposer of cfg (NONE: returns 0 with *out NULL). A draft
 * model is not made here: sched_spec_set_draft hands one over. */
int sched_spec_create(const sched_spec_config *cfg, const sched_spec_env *env, sched_spec **out,
                      char *err, size_t err_len);
/* Gives sp the draft runner (spec_draft.h), which it owns from then on. */
struct spec_draft;
void sched_spec_set_draft(sched_spec *sp, struct spec_draft *d);
void sched_spec_free(sched_spec *sp);

/* A sequence's state (its acceptance, its draft KV slot and sampler); NULL
 * when out of memory (the sequence then never speculates). p: its sampling
 * settings, copied. Freed with sched_spec_seq_free, after sched_spec_seq_end
 * when the engine still runs. */
sched_spec_seq *sched_spec_seq_create(sched_spec *sp, const model_sampling *p);
/* The sequence ended: its draft slot is released and (suffix) its output,
 * tokens[0, n), joins the index of recent outputs. */
void sched_spec_seq_end(sched_spec *sp, sched_spec_seq *ss, const int32_t *output, int n);
void sched_spec_seq_free(sched_spec_seq *ss);

/* One step's candidates: decoding sequences, oldest first. */
typedef struct sched_spec_cand {
    sched_spec_seq *ss;
    int32_t *tokens; /* prompt then output; proposals are written at [n_tokens, + n_prop) */
    int n_tokens;
    int room;   /* the most proposals it may take (output and context left, less the
                 token every step emits anyway) */
    int n_prop; /* out: proposals written */
} sched_spec_cand;

/* Proposes for this step. base_tokens: what the step would run without
 * proposals (decode rows and the prefill the budget would take); proposals
 * fill it up to the threshold at most, each sequence up to its policy's
 * length, as far as they pay in the batch (spec_policy_share). n at most
 * the engine's max_seqs. Never fails: a proposer that cannot (a draft's KV full) proposes nothing. */
void sched_spec_propose(sched_spec *sp, sched_spec_cand *cands, int n, int base_tokens);

/* The draft's distribution at each of ss's proposals of this step (n_prop
 * rows of n_vocab floats), or NULL: none was kept (greedy, or not a draft
 * model) and the proposals are deterministic. Valid until the next propose. */
const float *sched_spec_seq_q(const sched_spec_seq *ss);
/* The generator the draft-model acceptance draws from (seeded from the
 * sequence's seed; NULL for deterministic proposals). */
uint64_t *sched_spec_seq_rng(sched_spec_seq *ss);

/* After verifying a run of `proposed` proposals of which the first
 * `accepted` were kept: the counters (vLLM's metrics) and, when ss is not
 * NULL (the sequence goes on), its policy and its draft KV (n_valid: the
 * sequence's tokens whose K/V the draft may keep). */
void sched_spec_observe(sched_spec *sp, sched_spec_seq *ss, int proposed, int accepted,
                        int n_valid);

/* The counters, cumulative (vllm:spec_decode_*). per_pos[i]: runs whose
 * proposal at position i was accepted, i < SCHED_SPEC_MAX_TOKENS. */
typedef struct sched_spec_stats {
    int enabled;
    int num_tokens; /* positions exported: the configured length */
    long long drafts, draft_tokens, accepted_tokens;
    long long per_pos[SCHED_SPEC_MAX_TOKENS];
} sched_spec_stats;
void sched_spec_get_stats(const sched_spec *sp, sched_spec_stats *out);

/* The threshold and cost the policy uses on this backend (after defaults). */
int sched_spec_threshold(const sched_spec *sp);
double sched_spec_cost(const sched_spec *sp);

/* Each target forward pass (tokens, seconds). The policy's cost of a
 * proposal is measured as the server runs, not only assumed: a fit of the
 * steps at or below the threshold, t = t1 (1 + c (tokens - 1)), weighting
 * the last ~100, gives c (once the steps vary in size; the backend's prior
 * SCHED_SPEC_COST_* until then) and t1; with a draft model the draft's
 * step (spec_draft_step_s) over t1 is added. */
void sched_spec_step_time(sched_spec *sp, int tokens, double forward_s);

#endif
