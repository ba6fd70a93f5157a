/* engine_trace.h - the engine's step trace (--step-trace FILE): one JSON
 * line per engine step, to find the few slow ones behind a long-tailed
 * inter-token latency (a long prefill chunk, a CUDA graph capture, grammar
 * masks, host work between steps). docs/OPERATIONS.md lists the fields.
 *
 * Cost: none when off (the engine holds no trace and formats nothing). On:
 * one line a step formatted into a 1 MiB stdio buffer, written out when it
 * fills and whenever the engine goes idle (so a finished benchmark's steps
 * are on disk while the server runs), and at close.
 *
 * Threads: opened and closed by the thread that creates and frees the
 * engine, written only by the engine thread in between. */
#ifndef SCHED_ENGINE_TRACE_H
#define SCHED_ENGINE_TRACE_H

#include <stddef.h>

#include "models/backend.h"

/* One step's record. Times in seconds of brisk_now(). */
typedef struct sched_trace_step {
    long long step;          /* 1, 2, ... over the engine's life */
    double t_start;          /* when the step began (scheduling) */
    double wall_s;           /* the step: scheduling to its events published */
    double sched_s;          /* scheduling and building the batch */
    double forward_s;        /* the backend's forward call */
    double mask_s;           /* the engine's time on grammar masks (waiting for none) */
    double sample_s;         /* the backend's sample calls (log-prob rows' copies included) */
    double host_s;           /* the engine's work before the step: arrivals, cancels, deadlines */
    double gap_s;            /* from the previous step's end to this one's start (idle included) */
    int tokens;              /* tokens in the forward */
    int decode_rows;         /* of them, one generated token of a running sequence each */
    int prefill_tokens;      /* the others: prompt (or recomputed) tokens */
    int prefill_chunks;      /* the sequences those came from */
    int sampled;             /* rows that picked a token (unparked ones included) */
    int constrained;         /* of them, with a grammar or banned tokens */
    int logprob_rows;        /* of them, with log-probs (sampled one by one) */
    int parked;              /* rows computed but not sampled: their grammar mask was late */
    int unparked;            /* of the sampled, rows that sat out before: sampled from
                              * their kept logits at the step's start (host time) */
    int admitted, preempted; /* sequences admitted and preempted by this step's schedule */
    int running, waiting;    /* after the step */
    int kv_blocks_used, kv_blocks_total;
    model_pass_kind pass; /* how the forward ran (CUDA decode graphs) */
    /* Speculative decoding: proposals verified by this step, those kept,
     * and the sequences that proposed (spec.h; 0 without it). */
    int spec_proposed, spec_accepted, spec_seqs;
} sched_trace_step;

typedef struct sched_trace sched_trace;

/* Opens path for appending (created 0644 if missing). Returns 0 with *out,
 * or a negative code with a one-line reason in err. */
int sched_trace_open(const char *path, sched_trace **out, char *err, size_t err_len);
/* Appends s's line. A failed write is logged once and ends the trace. */
void sched_trace_write(sched_trace *t, const sched_trace_step *s);
/* Writes out what is buffered (the engine going idle); no-op when nothing
 * was added since the last flush. */
void sched_trace_flush(sched_trace *t);
/* Flushes and closes; NULL is a no-op. */
void sched_trace_close(sched_trace *t);

#endif
