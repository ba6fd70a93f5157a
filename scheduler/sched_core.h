/* sched_core.h - the scheduling policy: which tokens of which sequences go
 * into the next forward pass, over a paged KV cache. No threads, no model:
 * the engine (engine.c) drives it, and unit tests drive it with scripted
 * scenarios.
 *
 * A sched_req is one sequence as the scheduler sees it: its known tokens
 * (prompt, then every sampled token), how many positions of them have K/V in
 * the cache (n_computed), and a KV slot while it runs. A request is "ready to
 * sample" once n_computed == n_tokens: the last step computed its last known
 * token, whose logits give the next one. A fresh request therefore prefills
 * n_prompt tokens; a decoding one computes 1 token per step; a preempted one
 * recomputes all its tokens (prefix cache hits make that cheap) and then goes
 * on exactly where it stopped.
 *
 * Each step (sched_core_schedule), within max_batch_tokens and max_seqs:
 *   1. Running requests, oldest admission first, each get what they still
 *      need (a decode token, or the next prefill chunk up to the budget left).
 *      KV blocks for them are allocated now; when the pool runs out the most
 *      recently admitted running request is preempted (blocks released, back
 *      to the head of the waiting queue) until the allocation fits. A request
 *      that cannot fit even alone is reported as starved (the engine ends it
 *      with finish "length": its context outgrew the KV pool).
 *   2. If nothing was preempted, waiting requests are admitted first come
 *      first served while a slot, budget and KV blocks for all their known
 *      tokens are available: prefix-cache blocks matching the prompt are
 *      attached first (or, for a fork, the blocks of the request it forks);
 *      the first chunk is scheduled at once. Admission stops at the first
 *      request that does not fit (no overtaking).
 * After the forward pass, sched_core_commit records what was computed and
 * registers newly filled blocks in the prefix cache.
 *
 * Speculative tokens: a decoding request may carry n_spec proposed tokens
 * past its known ones (tokens[n_tokens .. n_tokens + n_spec), engine.c and
 * spec.h). After pass 1 has planned every decode token, its decode entry
 * grows by as many of them as the budget and the free blocks allow (they
 * never preempt anything, nor take a block a decode token needed), so the
 * step computes K/V and logits at each. sched_core_commit counts only the known
 * tokens as computed; each proposal that verification keeps is added with
 * sched_core_advance (which registers a block it fills), and
 * sched_core_trim then gives back the blocks grown for the rejected ones.
 * A block holding a rejected token is therefore never registered.
 *
 * Forks: a request with fork_of set (n > 1 choices of one prompt) waits
 * while that request is running but has not yet computed its prompt up to
 * its last token; then it shares those blocks (the partly filled last one
 * copy-on-write) and computes only the last prompt token itself. If the
 * request it forks is not running it is admitted like any other.
 */
#ifndef SCHED_CORE_H
#define SCHED_CORE_H

#include <stdint.h>

#include "kv/kv_cache.h"

typedef struct sched_req {
    /* owned by the caller; the scheduler reads them */
    const int32_t *tokens; /* n_tokens known tokens */
    int n_tokens;
    int n_prompt;
    struct sched_req *fork_of; /* or NULL; cleared by sched_core_remove of that request */
    int no_prefix_match;       /* 1: compute every position (never reuse cached blocks) */
    /* Proposed tokens at tokens[n_tokens .. n_tokens + n_spec) the next
     * schedule may verify with the decode token (0: none); the caller sets
     * it before each schedule. */
    int n_spec;
    /* the scheduler's */
    int n_computed; /* positions whose K/V are in the cache */
    int slot;       /* KV slot while running, else -1 */
    int running;
    long long admitted_seq; /* admission order (0: never admitted) */
    int n_preempted;
    int n_cached;     /* prompt tokens the first admission found computed (prefix cache, fork) */
    int priority;     /* SCHED_POLICY_PRIORITY: lower is served first (vLLM's) */
    double t_arrival; /* when it arrived (sched_core_set_now's clock): its age for aging */
    struct sched_req *next, *prev; /* waiting list */
} sched_req;

/* Which waiting request is admitted next, and which running one is preempted. */
enum {
    SCHED_POLICY_FCFS = 0, /* arrival order; the newest running request is preempted */
    /* The lowest effective priority first, where a waiting request's
     * priority improves by one for every aging_s seconds since it arrived
     * (so nothing starves: a request that has waited k x aging_s longer
     * than another with priority p + k goes first); ties by arrival. Under
     * KV pressure the running request with the highest (worst) effective
     * priority is preempted, the newest among equals. */
    SCHED_POLICY_PRIORITY = 1,
};

typedef struct sched_core_config {
    int max_seqs;         /* requests running at once (<= the KV cache's slots) */
    int max_batch_tokens; /* tokens per step */
    int prefix_caching;   /* 1: match prompts against the prefix cache */
    int policy;           /* SCHED_POLICY_* */
    double aging_s;       /* PRIORITY: seconds of waiting worth one priority level (<= 0: none) */
} sched_core_config;

typedef struct sched_entry {
    sched_req *req;
    int pos;    /* first position computed: req->n_computed at schedule time */
    int n;      /* tokens req->tokens[pos .. pos+n) */
    int n_spec; /* of them, the last n_spec are proposals (speculative; 0: none) */
} sched_entry;

typedef struct sched_plan {
    sched_entry *entries; /* running first (admission order), then newly admitted */
    int n_entries;
    int n_tokens;
    sched_req **starved; /* removed from running: they cannot fit the KV pool */
    int n_starved;
    int n_preempted; /* this step */
    int n_admitted;  /* this step */
} sched_plan;

typedef struct sched_core sched_core;

/* kv must outlive the core; cfg->max_seqs <= kv_cache_n_seqs(kv). */
sched_core *sched_core_create(kv_cache *kv, const sched_core_config *cfg);
void sched_core_free(sched_core *c);

/* Queues r (n_tokens >= 1) at the tail of the waiting list. */
void sched_core_add(sched_core *c, sched_req *r);
/* Takes r out wherever it is (waiting or running; its KV blocks are released
 * now) and clears fork_of of any waiting request that forks it. */
void sched_core_remove(sched_core *c, sched_req *r);

/* Builds the next step into *plan (valid until the next call). Returns the
 * number of entries. */
int sched_core_schedule(sched_core *c, sched_plan *plan);
/* The clock (seconds) the priority policy ages requests with; the engine
 * sets it before each schedule. */
void sched_core_set_now(sched_core *c, double now);
/* After the forward pass of plan: n_computed advances, KV positions are
 * recorded, new full blocks registered. */
void sched_core_commit(sched_core *c, const sched_plan *plan);

/* Verification kept n more positions of r past n_computed (proposals of
 * the last step equal to the tokens now at those positions of r->tokens):
 * n_computed and the KV positions advance, a block they fill is registered. */
void sched_core_advance(sched_core *c, sched_req *r, int n);
/* After verification: the blocks grown for r's rejected proposals (past
 * n_computed) go back to the pool. */
void sched_core_trim(sched_core *c, sched_req *r);

int sched_core_n_running(const sched_core *c);
int sched_core_n_waiting(const sched_core *c);
/* Running requests in admission order (n = sched_core_n_running). */
sched_req *const *sched_core_running(const sched_core *c);
sched_req *sched_core_waiting_head(const sched_core *c);
long long sched_core_n_preemptions(const sched_core *c);

#endif
