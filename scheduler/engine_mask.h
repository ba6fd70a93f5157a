/* engine_mask.h - grammar masks computed off the engine step's critical path.
 *
 * A constrained sequence's mask for its next token depends only on its
 * grammar state after its last token, which is known as soon as that token
 * is sampled. So the engine hands the computation to a worker as soon as it
 * accepts a token, and the mask is computed while the next forward pass
 * runs; the engine only looks at it when it samples that row. A mask that is
 * not ready then does not hold up the step: the row sits out (the engine
 * keeps its logits and samples them once the mask is there), and the other
 * rows go on. Sampling the kept logits later gives exactly the token sampling
 * them at once would have (the same row, the same sampler state), so outputs
 * do not depend on when a mask was ready.
 *
 * Workers run at a lower priority than the engine and its kernel pool (nice
 * +10 on Linux): on a CPU backend whose forward uses every core, mask work
 * takes what the forward leaves idle instead of slowing it; on a GPU the CPU
 * is mostly idle during the forward anyway.
 *
 * A job is one sequence's matcher and mask buffer. Ownership: the job owns
 * both from sched_mask_job_create on; the engine may read or advance the
 * matcher (model_grammar_accept) and read the mask only while the job is
 * not queued or running (sched_mask_state: IDLE or READY). A sequence that
 * ends hands its job back with sched_mask_job_release, which frees it at once,
 * or, when a worker is computing it, lets that worker free it when done.
 *
 * Threads: create/free, submit, poll, run_here and release are called by the
 * engine thread only; the workers take jobs from a queue (first in, first
 * out) under the pool's mutex and call done(ctx) after each, with no lock
 * held (the engine wakes on it). */
#ifndef SCHED_ENGINE_MASK_H
#define SCHED_ENGINE_MASK_H

#include <stdint.h>

#include "models/grammar.h"

typedef enum {
    SCHED_MASK_IDLE = 0, /* nothing asked (or taken: see sched_mask_take) */
    SCHED_MASK_QUEUED,
    SCHED_MASK_RUNNING,
    SCHED_MASK_READY, /* rc and work hold the outcome */
} sched_mask_state;

typedef struct sched_mask_job {
    model_grammar_matcher *gm; /* owned */
    uint32_t *mask;            /* owned: (n_vocab + 31) / 32 words */
    /* under the pool's mutex */
    sched_mask_state state;
    int rc;         /* model_grammar_mask's result: allowed count or a negative code */
    long long work; /* its work units */
    int orphan;     /* the sequence is gone: the worker frees the job */
    int delay;      /* steps the engine still keeps a READY mask back (tests) */
    struct sched_mask_job *next;
} sched_mask_job;

typedef struct sched_mask_pool sched_mask_pool;

/* n_workers >= 0 (0: no threads; masks are computed by sched_mask_run_here
 * when the engine asks). done(ctx) is called by a worker after each job.
 * Returns NULL on failure. */
sched_mask_pool *sched_mask_pool_create(int n_workers, void (*done)(void *ctx), void *ctx);
/* Stops the workers (a job in progress finishes first) and frees every
 * orphaned job. Jobs still owned by sequences stay theirs. */
void sched_mask_pool_free(sched_mask_pool *p);
int sched_mask_pool_workers(const sched_mask_pool *p);

/* A job over gm and mask (both taken over; freed with the job even when
 * this fails). NULL on out of memory. */
sched_mask_job *sched_mask_job_create(model_grammar_matcher *gm, uint32_t *mask);
/* Asks for the mask of the matcher's current state. The job must be IDLE or
 * READY. A mask the grammar's cache holds is READY at once (looked up on the
 * calling thread); the others are queued for a worker (with no workers the
 * job waits for sched_mask_run_here). */
void sched_mask_submit(sched_mask_pool *p, sched_mask_job *j);
/* The job's state now; when READY, *rc and *work its outcome. */
sched_mask_state sched_mask_poll(sched_mask_pool *p, sched_mask_job *j, int *rc, long long *work);
/* A QUEUED job is taken off the queue and computed on the calling thread,
 * then READY: returns 1. budget >= 0 (work units, model_grammar_mask_try):
 * a mask that would cost more goes back to the head of the queue for the
 * workers, returning 0. Returns 0 too when the job was not queued. */
int sched_mask_run_here(sched_mask_pool *p, sched_mask_job *j, long long budget);
/* The sequence is done with j: freed now, or by its worker when it is
 * running. NULL is a no-op. */
void sched_mask_job_release(sched_mask_pool *p, sched_mask_job *j);

#endif
