/* engine_int.h - what the engine thread's files share and nothing else sees.
 * engine.h is the public contract; behind it the engine is four files, one
 * concern each:
 *
 *   engine.c       the public calls (submit, cancel, drain, state, stats),
 *                  a sequence's life on the engine thread (enter, sample,
 *                  accept, emit, finish), pooling, deadlines, the step, the
 *                  outbox, the thread's loop, create / free.
 *   engine_load.c  the engine's resources: the thread pool, model, backend
 *                  and KV cache (sched_setup.h), the draft model, the
 *                  scheduler, the mask workers and the step's scratch,
 *                  made on the engine thread when it starts and freed by
 *                  sched_engine_free.
 *   engine_park.c  grammar masks on the engine's side: asking for a
 *                  sequence's next mask, the step's allowance of mask work
 *                  done inline and of waiting for workers, rows that sit out
 *                  a step for a late mask (parked) and their sampling when
 *                  it comes, and the engine's sleep when only such rows are
 *                  left. The workers themselves are engine_mask.c.
 *   engine_spec.c  speculative decoding on the engine's side: proposals
 *                  before the schedule, their verification after the
 *                  forward, alone or from the step's one sample call. The
 *                  proposers are behind spec.h, the acceptance rule is
 *                  spec_verify.h's.
 *
 * Threads: every function below runs on the engine thread, except
 * engine_mask_done (a mask worker's callback). Members of struct
 * sched_engine marked "under mu" are shared with the loop thread's public
 * calls (engine.h) and with the workers' callback, and are read or written
 * only with mu held; the others belong to the engine thread (from
 * engine_load until the thread is joined).
 *
 * Ownership: a seq is allocated by sched_engine_submit, sits in the inbox
 * (under mu), then in the scheduler's queues (sched_core: s->req is its first
 * member, so a sched_req * is a seq *) from engine.c's seq_enter on, and is
 * freed by engine_seq_finish, which every end goes through; at shutdown
 * sched_engine_free frees the ones left. Events go out through the outbox
 * and are freed by whoever drains them (sched_event_free). */
#ifndef SCHED_ENGINE_INT_H
#define SCHED_ENGINE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "models/grammar.h"
#include "models/sampler.h"
#include "scheduler/engine.h"
#include "scheduler/engine_mask.h"
#include "scheduler/engine_trace.h"
#include "scheduler/sched_core.h"
#include "scheduler/sched_setup.h"
#include "scheduler/seq_text.h"
#include "scheduler/spec.h"

/* ---- state ----------------------------------------------------------------- */

/* One sequence (one choice of one request). Its members belong to the
 * engine thread once it left the inbox; the arrays are owned and freed with
 * it (engine.c's seq_free). */
typedef struct seq {
    sched_req req;      /* the scheduler's view: tokens = hist (first: casts) */
    uint64_t submit_no; /* 1, 2, ... in submission order (under mu) */
    struct seq *next;   /* inbox link */
    sched_seq_params p;
    int32_t *hist; /* prompt then generated tokens */
    int n_hist, cap_hist;
    int n_gen;
    model_sampler *sampler;
    int32_t *ban; /* while n_gen < min_tokens: EOS and stop ids, the sampler's ban */
    int n_ban;
    /* The constraint: its matcher and the mask of its next token (the
     * sampler's), computed by a mask worker (engine_mask.h); or NULL. */
    sched_mask_job *mj;
    /* Sitting out: its last forward's logits row, kept until its mask is
     * ready, then sampled (engine_sample_parked). */
    int parked;
    float *park_row;   /* [n_vocab], made on the first park */
    int mask_costly;   /* tokens left before the engine waits for its masks again */
    seq_text text;     /* detokenizer + stop strings + UTF-8 hold-back */
    sched_token *toks; /* tokens since the last event */
    int n_toks;
    size_t cap_toks;
    sched_token *ptoks; /* prompt log-probs, sent with the first event */
    int n_ptoks;
    int sent_ptoks;
    sched_event *final_ev; /* allocated at submit: the final event never waits for memory */
    int ready;             /* hist, sampler and text set up (on entering the engine) */
    int left_waiting;      /* no longer counted against the submit-side waiting caps */
    double t_submit, t_admit;
    int deadline_hit;     /* its deadline ended it */
    int has_deadline;     /* counted in sched_engine.n_deadlines while it is in the engine */
    double *emb_sum;      /* pooling: the sum (MEAN) or last row (LAST) of hidden states */
    int emb_upto;         /* positions already added (a preempted MEAN recomputes the rest) */
    sched_spec_seq *spec; /* speculative decoding's state, or NULL (spec.h) */
} seq;

/* A cancel from sched_engine_cancel, in sched_engine.cancels until the
 * engine applies and frees it. */
typedef struct cancel_msg {
    struct cancel_msg *next;
    void *user;
    /* Submissions made before the cancel: a sequence submitted after it is
     * another request that reuses the user pointer (the first one's final
     * event was drained and its memory freed and allocated again before the
     * engine saw the cancel), and is left alone. */
    uint64_t n_submitted;
} cancel_msg;

/* A sequence whose proposals are verified from the step's one sample call
 * (engine_spec.c; sched_engine.runs holds max_seqs of them, made by
 * engine_load). */
typedef struct spec_run {
    seq *s;
    int job0, k;           /* its jobs: job0 .. job0 + k, one per row */
    model_sampler_rng rng; /* its generator before them */
} spec_run;

/* The engine (engine.h's handle). Made by sched_engine_create, freed by
 * sched_engine_free; what engine_load makes is freed by engine_unload. */
struct sched_engine {
    sched_engine_config cfg;
    char *model_path;
    char *draft_path; /* cfg.spec.draft_model, owned (the load runs after create returns) */
    uv_async_t *async;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    /* under mu */
    seq *inbox_head, *inbox_tail;
    cancel_msg *cancels;
    uint64_t n_submitted; /* sequences accepted by sched_engine_submit */
    sched_event *out_head, *out_tail;
    int n_waiting; /* inbox + waiting queue */
    long waiting_tokens;
    sched_state state;
    char load_err[256];
    sched_engine_stats stats;
    /* engine thread only */
    /* The events of the step in progress: they join the outbox together with
     * the stats of the same step (engine_publish), so that a client that sees
     * a sequence's final event also sees its KV blocks released. */
    sched_event *step_head, *step_tail;
    sched_setup setup; /* owns the model, the backend and the KV cache */
    model *m;          /* setup.m */
    model_backend *be; /* setup.be: the forward pass and sampling, CPU or CUDA */
    kv_cache *kv;      /* setup.kv */
    sched_core *core;
    kern_pool *pool;
    int max_ctx;
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    uint8_t *b_hid;   /* tokens whose hidden state a pooling sequence needs */
    int n_deadlines;  /* sequences in the engine with a deadline: 0 skips the scan */
    seq **b_owner;    /* per batch token: its sequence */
    float *lp_row;    /* copy of one logits row for log-probs */
    int32_t *eog_ids; /* every end-of-generation id of the vocabulary (min_tokens bans them) */
    int n_eog;
    model_grammar_vocab
        *gvocab;             /* the vocabulary as a trie, for grammar masks (made on first use) */
    sched_mask_pool *masks;  /* the grammar mask workers */
    int n_parked;            /* running sequences sitting out for their masks */
    long long masks_done;    /* under mu: jobs the workers finished (wakes the engine) */
    long long masks_seen;    /* masks_done when the engine last waited for masks */
    long long mask_units;    /* this step's allowance of inline mask work (engine_seq_mask_ready) */
    double mask_grace_until; /* and until when it may wait for workers' masks */
    model_sample_job *jobs;  /* rows sampled together after a forward (max_batch_tokens) */
    seq **job_seq;
    int32_t *job_ids;
    float *job_p; /* p(draft_id) of draft-model verification rows */
    /* Speculative decoding (spec.h), or NULL: the proposer, this step's
     * candidates and their sequences, and the runs verified from the one
     * sample call (engine_verify_batched). */
    sched_spec *spec;
    sched_spec_cand *cands;
    seq **cand_seq;
    struct spec_run *runs;
    /* --step-trace: the file (NULL: off), the record step() fills, and when
     * the last traced step ended. */
    sched_trace *trace;
    sched_trace_step tr;
    double t_step_end;
};

/* ---- engine.c: a sequence's life ------------------------------------------- */

/* Builds the event for s: new text, tokens since the last event and, on the
 * first event, the prompt log-probs. finish != NONE makes it the last, and
 * the last one always goes out: its record was allocated at submit, and when
 * its text cannot be taken it ends the sequence as an error instead. A delta
 * that fails leaves everything in s for the next event. The event waits in
 * the step's list for engine_publish; s keeps nothing of it. Returns 0 or
 * BRISK_ENOMEM. */
int engine_seq_emit(sched_engine *e, seq *s, sched_finish finish, const char *err);

/* Ends s: out of the scheduler (its KV blocks freed now), final event, freed.
 * The final event cannot fail (see engine_seq_emit), so the server always
 * learns that the sequence ended and can release its request. s is freed:
 * the caller must not touch it again. err: borrowed, copied into the event. */
void engine_seq_finish(sched_engine *e, seq *s, sched_finish f, const char *err);

/* Handles token id sampled for s (tp: its log-probs, if asked; borrowed).
 * Returns 1 if s finished (and was freed), else 0 (and, with a grammar, its
 * next mask was asked for). */
int engine_seq_accept(sched_engine *e, seq *s, int32_t id, sched_token *tp);

/* Log-softmax of the raw row [n_vocab]: the chosen id's log-prob and the top
 * n_top into t. */
void engine_fill_logprobs(const float *row, int n_vocab, int32_t id, int n_top, sched_token *t);

/* ---- engine_load.c: resources ---------------------------------------------- */

/* The thread pool, then the model, backend and KV cache (sched_setup.h has
 * the rules: weights on the GPU, context, pool size), the draft model if
 * any, then the scheduler, the mask workers and the step's scratch. On the
 * engine thread as it starts. Returns 0, or a negative code with the reason
 * in e->load_err; what it made before failing is freed by engine_unload. */
int engine_load(sched_engine *e);

/* Frees what engine_load made (any part of it; the rest NULL), the grammar
 * vocabulary included. After the thread is joined and every sequence freed
 * (their mask jobs go back to the pool first). */
void engine_unload(sched_engine *e);

/* ---- engine_park.c: grammar masks ------------------------------------------ */

/* The mask workers' done callback (sched_mask_pool_create's; ctx: the
 * engine): counts it under mu and wakes the engine if it waits for one. On
 * a worker thread. */
void engine_mask_done(void *ctx);

/* Asks for the mask of s's grammar state (after its last token): cached
 * ones are ready at once, the others computed by a worker while the next
 * forward runs. s->mj must not be queued or running. */
void engine_seq_mask_submit(sched_engine *e, seq *s);

/* The step's allowance of inline mask work, at its start; and, once the
 * forward pass took t_fwd seconds, until when the engine may wait for the
 * masks workers are finishing. */
void engine_mask_step_begin(sched_engine *e);
void engine_mask_grace_begin(sched_engine *e, double t_fwd);

/* Whether s's mask is there to sample with (*rc: model_grammar_mask's
 * result). Without workers the engine computes it here; with them, within
 * the step's allowance (engine_mask_step_begin, engine_mask_grace_begin). */
int engine_seq_mask_ready(sched_engine *e, seq *s, int *rc);

/* The count of masks the workers have finished (masks_done, read under mu):
 * read it before polling a job, then wait with it. */
long long engine_masks_done(sched_engine *e);
/* Waits until the workers have finished a mask since engine_masks_done gave
 * `seen` (no wait if one already has: no lost wake-up) or `until`
 * (brisk_now) passes. */
void engine_wait_mask_done(sched_engine *e, long long seen, double until);

/* Ends s whose grammar gave no mask: rc 0 (no token allowed), BRISK_ERANGE
 * (too costly: the client's grammar, so the server answers 4xx) or another
 * code. s is freed. */
void engine_seq_finish_grammar(sched_engine *e, seq *s, int rc);

/* s sits out this step: its logits row `row` is copied into s->park_row
 * (made on first use, owned by s) until its mask is ready. Returns 0 or a
 * negative code (s is left as it was). */
int engine_seq_park(sched_engine *e, seq *s, int row);
/* s no longer sits out (its kept row is not sampled). */
void engine_seq_unpark(sched_engine *e, seq *s);

/* Rows sitting out whose masks are now ready: sampled from their kept
 * logits, exactly as they would have been at once (the same row, the same
 * sampler state). Runs before the schedule, so each decodes its new token
 * in this very step; the step's trace counts them as sampled (unparked). */
void engine_sample_parked(sched_engine *e);

/* Every running sequence sits out for its mask and nothing else can run:
 * the engine computes one of those masks itself if no worker has started it
 * (it would only wait otherwise); else it sleeps until a worker finishes
 * one, new work or a cancel arrives, or 10 ms pass (deadlines). */
void engine_wait_masks(sched_engine *e);

/* ---- engine_spec.c: speculative decoding ------------------------------------ */

/* Proposals for the decoding sequences (into hist past n_hist, and
 * req.n_spec), before the schedule grows KV for them. e->spec set. */
void engine_propose(sched_engine *e);

/* s's run of k proposals at rows row0 .. row0 + k: verified now (returns
 * the tokens emitted; s may have ended and been freed), or its rows join the
 * step's one sample call as jobs from *n_jobs on and a run at *n_runs
 * (both advanced; returns 0: engine_verify_batched finishes it). */
int engine_verify(sched_engine *e, seq *s, int row0, int k, int *n_jobs, int *n_runs);

/* The n_runs runs whose rows the step's sample call took (rc < 0: it
 * failed, and they end with an error). Returns the tokens emitted. */
long long engine_verify_batched(sched_engine *e, int n_runs, int rc);

#endif
