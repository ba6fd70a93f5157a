/* engine.h - the engine thread: owns the model, the KV cache and the forward
 * pass, and runs every sequence the server submits.
 *
 * Threading: sched_engine_submit / _cancel are called from the loop thread;
 * they only push onto a locked inbox and wake the engine. The engine thread
 * turns each step's results into sched_event records on an outbox and calls
 * uv_async_send once per step (its callback drains the whole outbox with
 * sched_engine_drain, so wake-ups coalesce). The engine never sees JSON or
 * sockets: requests arrive as plain C structs (token ids, sampling settings,
 * stop strings) and leave as text deltas plus token ids and log-probs.
 *
 * Lifecycle of a sequence: submit -> waiting -> running (prefill, then one
 * token per step) -> exactly one final event (finish STOP, LENGTH, ABORT or
 * ERROR). The caller's `user` pointer must stay valid until that final event
 * has been drained; cancelling only hastens it.
 *
 * Scheduling: continuous (iteration-level) batching over the paged KV cache
 * (kv_cache.h), by the policy in sched_core.h: every step is one forward
 * call over the decode tokens of running sequences and prefill chunks of new
 * ones, within max_batch_tokens and max_seqs; admission is first come first
 * served while KV blocks allow; prompts reuse prefix-cached blocks; when the
 * pool runs out the newest sequence is preempted and recomputed later (its
 * output does not change: the kernels are batch-invariant and its sampler
 * state is kept).
 */
#ifndef SCHED_ENGINE_H
#define SCHED_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "kv/kv_cache.h"
#include "models/backend.h"
#include "models/grammar.h"
#include "models/model.h"
#include "models/sampler.h"
#include "scheduler/sched_core.h"
#include "scheduler/spec.h"

#define SCHED_MAX_TOP_LOGPROBS 20

typedef struct sched_engine sched_engine;

typedef struct sched_engine_config {
    const char *model_path;
    const char *dummy;     /* --dummy-weights CONFIG: random weights, model_path unused */
    const char *tokenizer; /* vocabulary of a dummy model (NULL: synthetic) */
    model_weights_fmt weights;
    int n_threads;        /* <= 0: all cores */
    int max_seqs;         /* sequences running at once */
    int max_ctx;          /* positions per sequence (prompt + output); 0: min(train ctx, 4096) */
    int max_batch_tokens; /* tokens per forward call (prefill chunk budget) */
    int block_size;       /* KV positions per block */
    long long kv_cache_bytes; /* KV pool size; 0: min(1 GiB, max_seqs * max_ctx positions) */
    int prefix_caching;       /* reuse KV blocks of earlier prompts with the same prefix */
    int no_window_release;    /* 1: keep the KV blocks behind sliding windows (kv_cache.h) */
    kern_kv_dtype kv_dtype;   /* K/V element (kern_kv.h): f16 default; q8_0 and q4_0 on
                                 the CPU, int8 and fp8 on CUDA hold more positions */
    int max_waiting;          /* sequences allowed to wait; beyond: submit returns BRISK_ENOSPC */
    long max_waiting_tokens;  /* prompt tokens allowed to wait */
    model_device device;      /* --device: cpu (default), cuda, auto */
    double gpu_memory_utilization; /* CUDA: fraction of GPU memory for weights + scratch + KV */
    int cuda_graphs;               /* CUDA: capture decode steps into CUDA graphs */
    int sched_policy;              /* SCHED_POLICY_FCFS (default) or _PRIORITY (sched_core.h) */
    double priority_aging_s;       /* PRIORITY: seconds of waiting worth one level (10) */
    /* --step-trace FILE: one JSON line per step appended there
     * (engine_trace.h; opened by sched_engine_create), NULL: none. */
    const char *step_trace;
    /* Grammar masks (engine_mask.h): worker threads that compute them beside
     * the forward pass; -1: the default (one per four cores, 1 to 4); 0: no
     * workers, the engine computes a row's mask itself when it samples it. */
    int mask_workers;
    /* Tests: each mask is held back this many steps after it is ready (its
     * row sits out meanwhile), to show outputs do not depend on when masks
     * are ready. 0: off. */
    int mask_delay_steps;
    /* Speculative decoding (spec.h; method NONE: off). The draft model's
     * path is borrowed until sched_engine_create returns. */
    sched_spec_config spec;
} sched_engine_config;

sched_engine_config sched_engine_config_default(void);

typedef enum {
    SCHED_FINISH_NONE = 0, /* not finished: a delta */
    SCHED_FINISH_STOP,     /* EOS or a stop string */
    SCHED_FINISH_LENGTH,   /* max_tokens or the context */
    SCHED_FINISH_ABORT,    /* cancelled */
    SCHED_FINISH_ERROR,    /* engine failure; event.err says why */
    SCHED_FINISH_EXPIRED,  /* its deadline passed before it ever ran */
} sched_finish;

const char *sched_finish_name(sched_finish f); /* "stop", "length", "abort", "error", "expired" */

/* One sequence to run. The engine takes ownership of every pointer in it
 * (prompt, bias arrays, stop strings) on a successful submit; on failure the
 * caller still owns them. */
typedef struct sched_seq_params {
    int32_t *prompt;
    int n_prompt;            /* >= 1 */
    int max_tokens;          /* >= 1; clipped to the context */
    model_sampling sampling; /* logit_bias_ids / logit_bias must be owned (malloc) */
    int logprobs;            /* -1: off; else top alternatives per token (0..20) */
    int prompt_logprobs;     /* also log-probs of prompt tokens 1..n-1 (echo) */
    int ignore_eos;
    char **stop; /* n_stop malloc'd strings (the array is malloc'd too) */
    int n_stop;
    /* vLLM's: before min_tokens tokens, EOS (unless ignore_eos) and stop_ids
     * cannot be sampled and stop strings are not looked for; a stop_ids token
     * ends the output with finish "stop" (its text kept); include_stop_str:
     * a matched stop string stays in the text. */
    int min_tokens;
    int32_t *stop_ids; /* n_stop_ids malloc'd ids */
    int n_stop_ids;
    int include_stop_str;
    /* Constrained output (a reference the engine takes over), or NULL: every
     * token is sampled among those the grammar allows; the output ends with
     * finish "stop" once the grammar can take nothing more. */
    model_grammar *grammar;
    /* An embedding instead of a generation (SCHED_POOL_LAST or _MEAN): the
     * prompt is run once, nothing is sampled, and the final event (finish
     * STOP) carries the pooled final hidden state (after the output norm),
     * not normalised. Needs a backend with hidden states (CPU and CUDA
     * have them): submit returns BRISK_EUNSUPPORTED otherwise. MEAN never reuses
     * prefix-cached blocks (every position's state is needed). max_tokens
     * is not used (give 1). */
    int pooling;
    int priority; /* --scheduling-policy priority: lower is admitted first (sched_core.h) */
    /* brisk_now() time after which the sequence ends (0: none), checked each
     * step: still waiting and never run, finish EXPIRED; running (or
     * preempted after running), finish LENGTH with event.deadline set. */
    double deadline;
    void *user;    /* handed back in every event */
    void *fork_of; /* or the user pointer of an earlier submitted sequence with the
                                 same prompt (n > 1 choices): share its prompt KV blocks */
} sched_seq_params;

/* Pooling of an embedding sequence (sched_seq_params.pooling). */
enum { SCHED_POOL_NONE = 0, SCHED_POOL_LAST = 1, SCHED_POOL_MEAN = 2 };

/* Frees what a params struct owns (for callers whose submit failed). */
void sched_seq_params_free(sched_seq_params *p);

typedef struct sched_token {
    int32_t id;
    float logprob; /* log softmax of the raw logits */
    int n_top;
    int32_t top_id[SCHED_MAX_TOP_LOGPROBS];
    float top_logprob[SCHED_MAX_TOP_LOGPROBS];
} sched_token;

typedef struct sched_event {
    struct sched_event *next;
    void *user;
    sched_finish finish; /* NONE for a delta, else this is the final event */
    char *text;          /* new output text (complete UTF-8 except at the end) */
    size_t text_len;
    int n_tokens;        /* tokens produced since the last event */
    sched_token *tokens; /* with log-probs when asked, else id only */
    int n_prompt_tokens; /* prompt log-probs (first event only, when asked) */
    sched_token *prompt_tokens;
    int prompt_len, completion_len; /* totals so far */
    int cached_tokens; /* prompt tokens found in the prefix cache (0 before admission) */
    double t_event;    /* brisk_now() when emitted */
    double t_admitted; /* when the sequence got a slot (0 if never) */
    int deadline;      /* final event: its deadline ended it (finish LENGTH or EXPIRED) */
    int stop_index;    /* final event with finish STOP: the index in sched_seq_params.stop of
                          the stop string that ended it; -1 otherwise (EOS, a stop id, the
                          grammar's end, or not final) */
    float *embedding;  /* pooling sequences' final event: [n_embedding], owned */
    int n_embedding;
    /* finish ERROR because the sequence's grammar was too costly (its state
     * or a token's mask past the grammar's limits, models/grammar.h): the
     * client's constraint, not a server failure. */
    int grammar_cost;
    char err[160];
} sched_event;

void sched_event_free(sched_event *ev);

/* Starts the engine thread, which loads the model (readiness: see
 * sched_engine_state). `async` is signalled whenever events are ready and
 * once when loading finishes; it must outlive the engine. */
int sched_engine_create(const sched_engine_config *cfg, uv_async_t *async, sched_engine **out,
                        char *err, size_t err_len);
/* Stops the thread: running sequences are dropped without events. */
void sched_engine_free(sched_engine *e);

typedef enum { SCHED_LOADING = 0, SCHED_READY, SCHED_FAILED } sched_state;
sched_state sched_engine_state(const sched_engine *e, char *err, size_t err_len);
/* Valid once READY (immutable, safe to read from any thread). */
const model *sched_engine_model(const sched_engine *e);
/* Positions one sequence may use: the context, or the KV pool if smaller. */
int sched_engine_max_ctx(const sched_engine *e);
/* 1 once READY when the backend gives hidden states (pooling sequences). */
int sched_engine_can_pool(const sched_engine *e);

/* Queues p. BRISK_ENOSPC when the waiting queue is full (the server answers
 * 429), BRISK_EINVAL for a bad argument, BRISK_EUNSUPPORTED before READY. */
int sched_engine_submit(sched_engine *e, sched_seq_params *p);
/* Asks for the sequence with this user pointer to stop; its final event
 * (ABORT) follows. Unknown or finished: no effect. */
void sched_engine_cancel(sched_engine *e, void *user);

/* Takes every pending event, oldest first (a list linked through next). */
sched_event *sched_engine_drain(sched_engine *e);

typedef struct sched_engine_stats {
    int running, waiting;
    double kv_usage;   /* fraction of KV blocks in use */
    kv_cache_stats kv; /* the cache's own counters: blocks, prefix-cache tokens (copied as one) */
    int kv_block_size;
    const char *kv_dtype; /* the cache's dtype name (static; NULL before the engine is ready) */
    long long steps, prompt_tokens, generation_tokens;
    long long preemptions;
    /* KV waste: summed over steps, the positions in used blocks and those of
     * them holding a token; 1 - filled/allocated is the run's waste. */
    long long kv_slots_allocated, kv_slots_filled;
    /* Engine-thread time: busy (steps, from taking work to publishing
     * events) and, of it, inside model_forward. */
    double busy_s, forward_s;
    long long batch_tokens; /* summed over steps */
    sched_spec_stats spec;  /* speculative decoding's counters (spec.enabled 0: off) */
} sched_engine_stats;
void sched_engine_get_stats(const sched_engine *e, sched_engine_stats *out);

#endif
