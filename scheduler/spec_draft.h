/* spec_draft.h - the draft model of speculative decoding (spec.h's
 * draft_model method): a second GGUF, smaller than the target, with the
 * same vocabulary, on the same device, with a KV cache of its own.
 *
 * Each step, for every sequence that is to propose k tokens, the draft
 * first computes the sequence's tokens it does not hold yet (its prompt the
 * first time, then the one or two tokens the last verification emitted),
 * then runs k - 1 more one-token steps, each feeding the proposal before:
 * k forward passes of the draft a step, every sequence batched in each. A
 * proposal is the draft's own sample with the sequence's settings and a
 * generator of its own (greedy when the sequence is greedy); with
 * temperature > 0 the draft's distribution at each proposal is kept for the
 * target's rejection sampling (spec_verify.h). After verification the
 * draft keeps the K/V of the tokens that were kept (spec_draft_keep); the
 * rest are recomputed next time.
 *
 * Memory: the draft's KV cache is made apart (spec_draft_kv_create), so
 * the engine can give it its share of the pool once both models are loaded
 * (docs/SPECULATIVE.md). A sequence takes a draft slot on its first
 * proposal and gives it back when it ends, or when the draft's pool is
 * full (it then proposes nothing that step and starts over later).
 *
 * Ownership: the draft owns its model, backend and cache (a sched_setup);
 * the thread pool is borrowed. Threading: the engine thread alone. */
#ifndef SCHED_SPEC_DRAFT_H
#define SCHED_SPEC_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_pool.h"
#include "models/backend.h"
#include "models/model.h"
#include "models/sampler.h"

typedef struct spec_draft spec_draft;

typedef struct spec_draft_opts {
    const char *path;      /* the draft's GGUF file, or a --dummy-weights shape name */
    const char *tokenizer; /* a dummy draft's vocabulary (the target's --tokenizer) */
    model_weights_fmt weights;
    model_device device; /* the target backend's device (CPU or CUDA, resolved) */
    kern_pool *pool;     /* borrowed */
    int max_seqs, max_batch_tokens, max_ctx;
    double gpu_memory_utilization;
    int cuda_graphs;
    kern_kv_dtype kv_dtype; /* the target's K/V element: the draft's cache holds the same */
} spec_draft_opts;

/* Checks that the draft's vocabulary is the target's: the same number of
 * tokens and the same text for each (a mismatch names the first token that
 * differs). 0, or BRISK_EINVAL with the reason in err. */
int spec_draft_check_vocab(const model *target, const model *draft, char *err, size_t err_len);

/* Loads the draft, checks its vocabulary against target's, and makes its
 * backend; no KV cache yet. On failure *out is NULL and err says why. */
int spec_draft_load(const spec_draft_opts *o, const model *target, spec_draft **out, char *err,
                    size_t err_len);
/* K plus V bytes of one position in the draft's cache. */
size_t spec_draft_kv_bytes_per_pos(const spec_draft *d);
/* Makes the draft's KV cache of kv_bytes (at least one context). */
int spec_draft_kv_create(spec_draft *d, long long kv_bytes, char *err, size_t err_len);
/* The weights one draft step reads (its backend's weight_bytes). */
size_t spec_draft_weight_bytes(const spec_draft *d);
/* Seconds a draft step of one token per sequence takes (forward and
 * sampling), a moving average of the steps run so far; 0 before the first. */
double spec_draft_step_s(const spec_draft *d);
/* Seconds the draft takes per token it catches up in a long first forward
 * (a prompt), a moving average; 0 before the first. */
double spec_draft_prefill_s(const spec_draft *d);
/* One line for the start-up log. */
void spec_draft_describe(const spec_draft *d, char *buf, size_t len);
void spec_draft_free(spec_draft *d);

/* A sequence's draft state: its slot, how many of its tokens the draft
 * holds, and its draft sampler (p's settings, a seed of its own). */
typedef struct spec_draft_seq spec_draft_seq;
spec_draft_seq *spec_draft_seq_create(const spec_draft *d, const model_sampling *p);
/* Gives its slot back (the sequence ended). */
void spec_draft_seq_release(spec_draft *d, spec_draft_seq *ds);
/* Frees it (after release, or when the draft is gone). */
void spec_draft_seq_free(spec_draft_seq *ds);
/* Tokens of a sequence of n_tokens the draft does not hold yet (all of
 * them before its first proposal). */
int spec_draft_seq_behind(const spec_draft_seq *ds, int n_tokens);

/* The slot whose owner proposed longest ago among the idle ones: last[s]
 * is the step slot s's owner last proposed in (-1: free), an idle owner's
 * is below step (the current one). -1 if no slot is idle. The eviction
 * order when the draft's pool is full (exported for the tests). */
int spec_draft_oldest_idle(const long long *last, int n, long long step);

typedef struct spec_draft_job {
    spec_draft_seq *ds;
    const int32_t *tokens; /* the sequence's known tokens, n_tokens of them, and room after */
    int n_tokens;
    int want; /* proposals asked for, written at tokens[n_tokens ..] */
    float *q; /* want rows of n_vocab floats for the draft's distributions, or NULL */
    int got;  /* out: proposals written */
} spec_draft_job;

/* Proposes for every job (batched forward passes of the draft). Never
 * fails: a job the draft cannot serve this step gets 0 proposals. */
void spec_draft_propose(spec_draft *d, spec_draft_job *jobs, int n);
/* After verification: the draft keeps the K/V of the sequence's first
 * n_valid tokens at most (the ones it computed that are still its tokens). */
void spec_draft_keep(spec_draft *d, spec_draft_seq *ds, int n_valid);

#endif
