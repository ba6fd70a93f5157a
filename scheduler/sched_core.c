/* sched_core.c - iteration-level scheduling over the paged KV cache (see
 * sched_core.h for the policy). */
#include "scheduler/sched_core.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

struct sched_core {
    kv_cache *kv;
    sched_core_config cfg;
    sched_req **run; /* [max_seqs] running, admission order */
    int n_run;
    int *free_slots; /* stack of unused KV slots */
    int n_free_slots;
    sched_req *wait_head, *wait_tail;
    int n_wait;
    long long admit_counter;
    long long n_preemptions;
    double now; /* sched_core_set_now */
    /* the plan's storage */
    sched_entry *entries;
    sched_req **starved;
};

sched_core *sched_core_create(kv_cache *kv, const sched_core_config *cfg) {
    if (!kv || !cfg || cfg->max_seqs < 1 || cfg->max_seqs > kv_cache_n_seqs(kv) ||
        cfg->max_batch_tokens < 1)
        return NULL;
    sched_core *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->kv = kv;
    c->cfg = *cfg;
    size_t n = (size_t)cfg->max_seqs;
    c->run = calloc(n, sizeof *c->run);
    c->free_slots = calloc(n, sizeof *c->free_slots);
    c->entries = calloc(n, sizeof *c->entries);
    c->starved = calloc(n, sizeof *c->starved);
    if (!c->run || !c->free_slots || !c->entries || !c->starved) {
        sched_core_free(c);
        return NULL;
    }
    /* Slot 0 on top of the stack: the first request gets slot 0. */
    for (int i = 0; i < cfg->max_seqs; i++)
        c->free_slots[i] = cfg->max_seqs - 1 - i;
    c->n_free_slots = cfg->max_seqs;
    return c;
}

void sched_core_free(sched_core *c) {
    if (!c)
        return;
    free(c->run);
    free(c->free_slots);
    free(c->entries);
    free(c->starved);
    free(c);
}

int sched_core_n_running(const sched_core *c) {
    return c->n_run;
}
int sched_core_n_waiting(const sched_core *c) {
    return c->n_wait;
}
sched_req *const *sched_core_running(const sched_core *c) {
    return c->run;
}
sched_req *sched_core_waiting_head(const sched_core *c) {
    return c->wait_head;
}
long long sched_core_n_preemptions(const sched_core *c) {
    return c->n_preemptions;
}

/* ---- the waiting list ------------------------------------------------------ */

static void wait_unlink(sched_core *c, sched_req *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        c->wait_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->wait_tail = r->prev;
    r->next = r->prev = NULL;
    c->n_wait--;
}

static void wait_push_tail(sched_core *c, sched_req *r) {
    r->next = NULL;
    r->prev = c->wait_tail;
    if (c->wait_tail)
        c->wait_tail->next = r;
    else
        c->wait_head = r;
    c->wait_tail = r;
    c->n_wait++;
}

static void wait_push_head(sched_core *c, sched_req *r) {
    r->prev = NULL;
    r->next = c->wait_head;
    if (c->wait_head)
        c->wait_head->prev = r;
    else
        c->wait_tail = r;
    c->wait_head = r;
    c->n_wait++;
}

void sched_core_add(sched_core *c, sched_req *r) {
    assert(r && r->n_tokens >= 1 && r->tokens);
    r->n_computed = 0;
    r->slot = -1;
    r->running = 0;
    wait_push_tail(c, r);
}

/* ---- running --------------------------------------------------------------- */

/* Takes r out of the running array (order kept) and frees its slot. */
static void run_remove(sched_core *c, sched_req *r) {
    int i = 0;
    while (i < c->n_run && c->run[i] != r)
        i++;
    assert(i < c->n_run);
    memmove(c->run + i, c->run + i + 1, (size_t)(c->n_run - i - 1) * sizeof *c->run);
    c->n_run--;
    kv_cache_seq_release(c->kv, r->slot);
    c->free_slots[c->n_free_slots++] = r->slot;
    r->slot = -1;
    r->running = 0;
}

void sched_core_remove(sched_core *c, sched_req *r) {
    if (!r)
        return;
    if (r->running)
        run_remove(c, r);
    else if (r->prev || r->next || c->wait_head == r)
        wait_unlink(c, r);
    for (sched_req *w = c->wait_head; w; w = w->next)
        if (w->fork_of == r)
            w->fork_of = NULL;
}

/* Preemption by recomputation: the blocks go (full ones stay in the prefix
 * cache, so the recomputation mostly hits), the request waits at the head. */
static void preempt(sched_core *c, sched_req *r) {
    run_remove(c, r);
    r->n_computed = 0;
    r->n_spec = 0; /* its proposals were not scheduled */
    r->n_preempted++;
    c->n_preemptions++;
    wait_push_head(c, r);
}

/* ---- a step ---------------------------------------------------------------- */

static void plan_add(sched_plan *plan, sched_req *r, int n);

/* The fork source of r if r should share its prompt blocks now; *wait set
 * when r must wait for it. */
static sched_req *fork_source(const sched_req *r, int *wait) {
    *wait = 0;
    sched_req *src = r->fork_of;
    if (!src || !src->running || src->n_prompt != r->n_prompt || r->n_tokens != r->n_prompt ||
        r->n_prompt < 2)
        return NULL;
    if (memcmp(src->tokens, r->tokens, (size_t)r->n_prompt * sizeof *r->tokens) != 0)
        return NULL;
    if (src->n_computed < r->n_prompt - 1) {
        *wait = 1;
        return NULL;
    }
    return src;
}

/* Admits the waiting head if it fits; returns its entry count (0 or 1). */
static int admit_one(sched_core *c, sched_req *r, int budget, sched_plan *plan) {
    int wait;
    sched_req *src = fork_source(r, &wait);
    if (wait || c->n_free_slots == 0)
        return 0;
    int slot = c->free_slots[c->n_free_slots - 1];
    int matched = 0;
    if (src) {
        if (kv_cache_seq_fork(c->kv, slot, src->slot, r->n_prompt - 1) < 0)
            return 0;
        matched = r->n_prompt - 1;
    } else if (c->cfg.prefix_caching && !r->no_prefix_match) {
        matched = kv_cache_seq_match(c->kv, slot, r->tokens, r->n_tokens, r->n_tokens - 1);
    }
    /* Blocks for every known token must be there now (not only the first
     * chunk's): a prompt admitted half-way would only be preempted again. */
    int rest = r->n_tokens - matched;
    if (kv_cache_seq_blocks_needed(c->kv, slot, rest) > kv_cache_n_available(c->kv)) {
        kv_cache_seq_release(c->kv, slot);
        return 0;
    }
    int n = rest < budget ? rest : budget;
    if (kv_cache_seq_grow(c->kv, slot, n) < 0) {
        kv_cache_seq_release(c->kv, slot);
        return 0;
    }
    c->n_free_slots--;
    wait_unlink(c, r);
    r->slot = slot;
    r->running = 1;
    r->n_computed = matched;
    if (!r->admitted_seq) /* a preempted request's recompute is not a cache hit */
        r->n_cached = matched < r->n_prompt ? matched : r->n_prompt;
    r->admitted_seq = ++c->admit_counter;
    c->run[c->n_run++] = r;
    plan_add(plan, r, n);
    plan->n_admitted++;
    return 1;
}

/* Grows r for up to n tokens; with too few blocks, for as many as fit.
 * Returns the tokens made writable (0: not even one). */
static int grow_fit(sched_core *c, sched_req *r, int n) {
    if (kv_cache_seq_grow(c->kv, r->slot, n) == 0)
        return n;
    int lo = 0, hi = n - 1; /* the largest m in [1, hi] that fits */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (kv_cache_seq_blocks_needed(c->kv, r->slot, mid) <= kv_cache_n_available(c->kv))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo > 0 && kv_cache_seq_grow(c->kv, r->slot, lo) == 0 ? lo : 0;
}

static void plan_add(sched_plan *plan, sched_req *r, int n) {
    plan->entries[plan->n_entries++] = (sched_entry){r, r->n_computed, n, 0};
    plan->n_tokens += n;
}

void sched_core_set_now(sched_core *c, double now) {
    c->now = now;
}

/* A request's priority after aging (the priority policy; lower first). */
static double eff_priority(const sched_core *c, const sched_req *r) {
    double age = c->now > r->t_arrival ? c->now - r->t_arrival : 0;
    return (double)r->priority - (c->cfg.aging_s > 0 ? age / c->cfg.aging_s : 0);
}

/* The index in run[] of the request to preempt: the newest (FCFS), or the
 * worst effective priority, the newest among equals. */
static int victim_index(const sched_core *c) {
    int v = c->n_run - 1;
    if (c->cfg.policy != SCHED_POLICY_PRIORITY)
        return v;
    for (int i = c->n_run - 2; i >= 0; i--)
        if (eff_priority(c, c->run[i]) > eff_priority(c, c->run[v]))
            v = i;
    return v;
}

/* The waiting request to admit next: the head (FCFS; preempted requests
 * are pushed there), or the best effective priority, earliest among equals. */
static sched_req *next_waiting(const sched_core *c) {
    sched_req *best = c->wait_head;
    if (c->cfg.policy != SCHED_POLICY_PRIORITY)
        return best;
    for (sched_req *w = best ? best->next : NULL; w; w = w->next) {
        double a = eff_priority(c, w), b = eff_priority(c, best);
        if (a < b || (a == b && w->t_arrival < best->t_arrival))
            best = w;
    }
    return best;
}

/* Pass 1: the decode token of every running request that needs one,
 * oldest first; preempts the newest running requests while the pool is short. */
static int schedule_decodes(sched_core *c, sched_plan *plan, int budget) {
    for (int i = 0; i < c->n_run && budget > 0; i++) {
        sched_req *r = c->run[i];
        if (r->n_tokens - r->n_computed != 1)
            continue;
        for (;;) {
            int rc = kv_cache_seq_grow(c->kv, r->slot, 1);
            if (rc == 0) {
                plan_add(plan, r, 1);
                budget--;
                break;
            }
            int vi = victim_index(c);
            sched_req *victim = c->run[vi];
            if (rc != BRISK_ENOSPC || (victim == r && c->n_run == 1)) {
                /* Alone and still too big (or past its block table): it can never run. */
                run_remove(c, r);
                plan->starved[plan->n_starved++] = r;
                i--;
                break;
            }
            preempt(c, victim);
            plan->n_preempted++;
            if (victim == r) {
                i--; /* r is gone from run[]: the next one moved into its place */
                break;
            }
            if (vi < i)
                i--; /* an earlier request went: r moved down one */
        }
    }
    return budget;
}

/* Pass 1b: the proposals of the decodes just planned, oldest first, in
 * the budget and the blocks the decodes left: never preempting, and never
 * taking a block a later request's decode token needed (pass 1 has grown
 * them all). grow makes [n_pos, n_pos + n) writable whatever the slot
 * already holds, so the decode token's room is grown again with them. */
static int schedule_spec(sched_core *c, sched_plan *plan, int budget) {
    for (int i = 0; i < plan->n_entries && budget > 0; i++) {
        sched_entry *en = &plan->entries[i];
        sched_req *r = en->req;
        if (r->n_spec <= 0 || en->n != 1 || !r->running)
            continue;
        int k = r->n_spec < budget ? r->n_spec : budget;
        int n = grow_fit(c, r, 1 + k);
        if (n <= 1)
            continue;
        en->n = n;
        en->n_spec = n - 1;
        plan->n_tokens += n - 1;
        budget -= n - 1;
    }
    return budget;
}

/* Pass 2: prefill chunks (prompts, and recomputation after preemption),
 * oldest first, in the budget the decodes left; a chunk shrinks to the
 * blocks available rather than preempting. */
static int schedule_prefills(sched_core *c, sched_plan *plan, int budget) {
    for (int i = 0; i < c->n_run && budget > 0; i++) {
        sched_req *r = c->run[i];
        int need = r->n_tokens - r->n_computed;
        if (need <= 1)
            continue;
        int n = grow_fit(c, r, need < budget ? need : budget);
        if (n == 0)
            continue;
        plan_add(plan, r, n);
        budget -= n;
    }
    return budget;
}

/* Whether a running request has every known token computed. */
static int any_sampling(const sched_core *c) {
    for (int i = 0; i < c->n_run; i++)
        if (c->run[i]->n_computed == c->run[i]->n_tokens)
            return 1;
    return 0;
}

int sched_core_schedule(sched_core *c, sched_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->entries = c->entries;
    plan->starved = c->starved;
    int budget = c->cfg.max_batch_tokens;
    for (;;) {
        budget = schedule_decodes(c, plan, budget);
        budget = schedule_spec(c, plan, budget);
        budget = schedule_prefills(c, plan, budget);
        /* Prefills that all lack blocks, with no decode to finish and free
         * some, would wait for ever: the newest gives its blocks back. A
         * request with nothing to compute (all its tokens computed: the
         * engine has yet to sample it, e.g. while its grammar mask is
         * computed) is not stuck: it will decode again, so nothing is. */
        if (plan->n_entries > 0 || c->n_run == 0 || any_sampling(c))
            break;
        sched_req *victim = c->run[victim_index(c)];
        if (c->n_run == 1) {
            run_remove(c, victim);
            plan->starved[plan->n_starved++] = victim;
            break;
        }
        preempt(c, victim);
        plan->n_preempted++;
    }
    /* Admission, first come first served, unless this step had to preempt. */
    if (plan->n_preempted == 0)
        while (c->wait_head && c->n_run < c->cfg.max_seqs && budget > 0) {
            if (!admit_one(c, next_waiting(c), budget, plan))
                break;
            budget -= plan->entries[plan->n_entries - 1].n;
        }
    return plan->n_entries;
}

void sched_core_commit(sched_core *c, const sched_plan *plan) {
    for (int i = 0; i < plan->n_entries; i++) {
        sched_req *r = plan->entries[i].req;
        if (!r->running)
            continue;
        /* Proposals count once verification keeps them (sched_core_advance). */
        r->n_computed = plan->entries[i].pos + plan->entries[i].n - plan->entries[i].n_spec;
        kv_cache_seq_set_pos(c->kv, r->slot, r->n_computed);
        if (c->cfg.prefix_caching)
            kv_cache_seq_commit(c->kv, r->slot, r->tokens, r->n_computed);
    }
}

void sched_core_advance(sched_core *c, sched_req *r, int n) {
    if (!r->running || n <= 0)
        return;
    r->n_computed += n;
    kv_cache_seq_set_pos(c->kv, r->slot, r->n_computed);
    if (c->cfg.prefix_caching)
        kv_cache_seq_commit(c->kv, r->slot, r->tokens, r->n_computed);
}

void sched_core_trim(sched_core *c, sched_req *r) {
    if (r->running)
        kv_cache_seq_shrink(c->kv, r->slot);
}
