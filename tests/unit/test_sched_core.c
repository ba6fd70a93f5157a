/* test_sched_core.c - the scheduling policy on scripted scenarios, with a
 * real paged KV cache and no model: admission order, chunked prefill,
 * decodes before prefills, preemption of the newest, starvation, prefix-cache
 * reuse, forks with copy-on-write, cancellation freeing blocks at once, the
 * priority policy (aging, preemption of the worst priority), and a
 * randomized run checking the invariants every step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "kv/kv_cache.h"
#include "scheduler/sched_core.h"

#define MAXTOK 256

typedef struct treq {
    sched_req r;
    int32_t toks[MAXTOK];
    int max_len;
} treq;

static void treq_init(treq *t, const int32_t *prompt, int n, int max_len) {
    memset(t, 0, sizeof *t);
    memcpy(t->toks, prompt, (size_t)n * sizeof *prompt);
    t->r.tokens = t->toks;
    t->r.n_tokens = n;
    t->r.n_prompt = n;
    t->max_len = max_len;
}

static kv_cache *make_kv(int n_blocks, int block_size, int max_seqs, int max_seq_blocks) {
    kv_cache_config kc = {.n_layers = 1,
                          .kv_dim = 4,
                          .block_size = block_size,
                          .n_blocks = n_blocks,
                          .max_seqs = max_seqs,
                          .max_seq_blocks = max_seq_blocks,
                          .prefix_cache = 1,
                          .f16 = 0};
    return kv_cache_create_paged(&kc);
}

/* The entry of r in plan, or NULL. */
static const sched_entry *entry_of(const sched_plan *p, const treq *t) {
    for (int i = 0; i < p->n_entries; i++)
        if (p->entries[i].req == &t->r)
            return &p->entries[i];
    return NULL;
}

/* Commits plan and "samples" for every request that became ready: token
 * 100 + position (deterministic). */
static void finish_step(sched_core *c, const sched_plan *p) {
    sched_core_commit(c, p);
    for (int i = 0; i < p->n_entries; i++) {
        sched_req *r = p->entries[i].req;
        if (r->running && r->n_computed == r->n_tokens && r->n_tokens < MAXTOK) {
            treq *t = (treq *)r;
            t->toks[r->n_tokens] = 100 + r->n_tokens;
            r->n_tokens++;
        }
    }
}

static kv_cache_stats stats(const kv_cache *kv) {
    kv_cache_stats s;
    kv_cache_get_stats(kv, &s);
    return s;
}

static void test_admission_and_chunking(void) {
    kv_cache *kv = make_kv(32, 4, 4, 16);
    sched_core_config cfg = {4, 8, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pa[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, pb[3] = {20, 21, 22}, pc[2] = {30, 31};
    treq a, b, d;
    treq_init(&a, pa, 10, 64);
    treq_init(&b, pb, 3, 64);
    treq_init(&d, pc, 2, 64);
    sched_core_add(c, &a.r);
    sched_core_add(c, &b.r);
    sched_core_add(c, &d.r);
    sched_plan p;
    /* Step 1: A's first chunk takes the whole budget; B waits its turn. */
    sched_core_schedule(c, &p);
    CHECK(p.n_entries == 1 && p.entries[0].req == &a.r && p.entries[0].pos == 0 &&
              p.entries[0].n == 8,
          "step 1: %d entries", p.n_entries);
    CHECK_COND(sched_core_n_running(c) == 1 && sched_core_n_waiting(c) == 2);
    finish_step(c, &p);
    CHECK_COND(a.r.n_computed == 8 && a.r.n_tokens == 10);
    /* Step 2: A's last 2 prompt tokens, then B and C admitted in order. */
    sched_core_schedule(c, &p);
    const sched_entry *ea = entry_of(&p, &a), *eb = entry_of(&p, &b), *ec = entry_of(&p, &d);
    CHECK(ea && ea->pos == 8 && ea->n == 2 && eb && eb->n == 3 && ec && ec->n == 2 &&
              p.n_tokens == 7,
          "step 2");
    CHECK_COND(p.entries[0].req == &a.r && p.entries[1].req == &b.r && p.entries[2].req == &d.r);
    CHECK_COND(p.n_admitted == 2 && b.r.admitted_seq < d.r.admitted_seq);
    finish_step(c, &p);
    CHECK_COND(a.r.n_tokens == 11 && b.r.n_tokens == 4 && d.r.n_tokens == 3);
    /* Step 3: one decode token each. */
    sched_core_schedule(c, &p);
    CHECK(p.n_entries == 3 && p.n_tokens == 3, "step 3: %d entries, %d tokens", p.n_entries,
          p.n_tokens);
    finish_step(c, &p);
    CHECK_COND(kv_cache_check(kv) == 0);
    sched_core_remove(c, &a.r);
    sched_core_remove(c, &b.r);
    sched_core_remove(c, &d.r);
    CHECK_COND(stats(kv).blocks_used == 0 && sched_core_n_running(c) == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

static void test_decodes_before_prefills(void) {
    kv_cache *kv = make_kv(64, 4, 4, 32);
    sched_core_config cfg = {4, 4, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pa[2] = {1, 2}, pb[20];
    for (int i = 0; i < 20; i++)
        pb[i] = 50 + i;
    treq a, b;
    treq_init(&a, pa, 2, 64);
    treq_init(&b, pb, 20, 64);
    sched_core_add(c, &a.r);
    sched_plan p;
    sched_core_schedule(c, &p);
    finish_step(c, &p); /* A prefilled, now decoding */
    sched_core_add(c, &b.r);
    for (int step = 0; step < 7; step++) {
        sched_core_schedule(c, &p);
        const sched_entry *ea = entry_of(&p, &a), *eb = entry_of(&p, &b);
        /* A's decode token is in every step; B's prompt fills the rest. */
        CHECK(ea && ea->n == 1 && p.entries[0].req == &a.r, "step %d: A's decode", step);
        int left = 20 - b.r.n_computed;
        if (left > 0)
            CHECK(eb && eb->n == (left < 3 ? left : 3), "step %d: B chunk %d", step,
                  eb ? eb->n : -1);
        finish_step(c, &p);
    }
    CHECK_COND(b.r.n_computed >= 20);
    sched_core_free(c);
    kv_cache_free(kv);
}

static void test_preemption(void) {
    /* 4 blocks of 4 positions; three 4-token prompts fill 3 blocks. */
    kv_cache *kv = make_kv(4, 4, 4, 4);
    sched_core_config cfg = {4, 16, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    treq t[3];
    for (int i = 0; i < 3; i++) {
        int32_t pr[4] = {10 * i + 1, 10 * i + 2, 10 * i + 3, 10 * i + 4};
        treq_init(&t[i], pr, 4, 16);
        sched_core_add(c, &t[i].r);
    }
    sched_plan p;
    sched_core_schedule(c, &p);
    CHECK(p.n_entries == 3 && p.n_admitted == 3, "all three admitted: %d", p.n_entries);
    finish_step(c, &p);
    CHECK_COND(stats(kv).blocks_used == 3);
    /* Each now needs a block for position 4: A takes the last free one, B's
     * need preempts C (the newest), and B runs with C's block. */
    sched_core_schedule(c, &p);
    CHECK(p.n_preempted == 1 && entry_of(&p, &t[0]) && entry_of(&p, &t[1]) && !entry_of(&p, &t[2]),
          "preempted %d", p.n_preempted);
    CHECK_COND(!t[2].r.running && t[2].r.n_computed == 0 && t[2].r.n_preempted == 1);
    CHECK_COND(sched_core_waiting_head(c) == &t[2].r && sched_core_n_preemptions(c) == 1);
    CHECK_COND(p.n_admitted == 0);
    finish_step(c, &p);
    CHECK_COND(kv_cache_check(kv) == 0);
    /* A finishes: C comes back and recomputes its 5 known tokens (B's growth
     * evicted C's cached block, so nothing is reused). */
    sched_core_remove(c, &t[0].r);
    sched_core_schedule(c, &p);
    const sched_entry *e2 = entry_of(&p, &t[2]);
    CHECK(e2 && e2->pos == 0 && e2->n == 5 && t[2].r.n_tokens == 5, "C resumes at %d (+%d)",
          e2 ? e2->pos : -1, e2 ? e2->n : -1);
    finish_step(c, &p);
    CHECK_COND(t[2].r.n_tokens == 6 && t[2].toks[5] == 105);
    CHECK_COND(kv_cache_check(kv) == 0);
    sched_core_remove(c, &t[1].r);
    sched_core_remove(c, &t[2].r);
    sched_core_free(c);
    kv_cache_free(kv);
}

static void test_starved(void) {
    kv_cache *kv = make_kv(2, 4, 2, 8);
    sched_core_config cfg = {2, 16, 0, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pr[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    treq a;
    treq_init(&a, pr, 8, 32);
    sched_core_add(c, &a.r);
    sched_plan p;
    sched_core_schedule(c, &p);
    CHECK_COND(p.n_entries == 1 && p.entries[0].n == 8);
    finish_step(c, &p);
    /* Position 8 needs a third block the pool does not have. */
    sched_core_schedule(c, &p);
    CHECK(p.n_starved == 1 && p.starved[0] == &a.r && p.n_entries == 0, "starved %d", p.n_starved);
    CHECK_COND(!a.r.running && sched_core_n_running(c) == 0 && stats(kv).blocks_used == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

static void test_prefix_reuse(void) {
    kv_cache *kv = make_kv(32, 4, 4, 16);
    sched_core_config cfg = {4, 64, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pr[14];
    for (int i = 0; i < 14; i++)
        pr[i] = 7 + i;
    treq a, b, d;
    treq_init(&a, pr, 14, 64);
    sched_core_add(c, &a.r);
    sched_plan p;
    sched_core_schedule(c, &p);
    finish_step(c, &p);
    sched_core_remove(c, &a.r);
    /* Same 12 first tokens (3 full blocks), different tail. */
    pr[12] = 99;
    treq_init(&b, pr, 14, 64);
    sched_core_add(c, &b.r);
    sched_core_schedule(c, &p);
    const sched_entry *e = entry_of(&p, &b);
    CHECK(e && e->pos == 12 && e->n == 2, "reused %d", e ? e->pos : -1);
    kv_cache_stats s = stats(kv);
    CHECK(s.prefix_hits == 12 && s.prefix_queries >= 14, "hits %lld of %lld", s.prefix_hits,
          s.prefix_queries);
    finish_step(c, &p);
    /* A prompt that is exactly 3 blocks reuses only 2: one token must be computed. */
    treq_init(&d, pr, 12, 64);
    sched_core_add(c, &d.r);
    sched_core_schedule(c, &p);
    e = entry_of(&p, &d);
    CHECK(e && e->pos == 8 && e->n == 4, "exact: reused %d", e ? e->pos : -1);
    finish_step(c, &p);
    CHECK_COND(kv_cache_check(kv) == 0);
    sched_core_remove(c, &b.r);
    sched_core_remove(c, &d.r);
    sched_core_free(c);
    kv_cache_free(kv);
}

static void test_fork(void) {
    kv_cache *kv = make_kv(32, 4, 4, 16);
    sched_core_config cfg = {4, 4, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pr[6] = {3, 4, 5, 6, 7, 8};
    treq a, b;
    treq_init(&a, pr, 6, 64);
    treq_init(&b, pr, 6, 64);
    b.r.fork_of = &a.r;
    sched_core_add(c, &a.r);
    sched_core_add(c, &b.r);
    sched_plan p;
    /* B waits while A prefills (4 then 2 tokens). */
    sched_core_schedule(c, &p);
    CHECK_COND(p.n_entries == 1 && p.entries[0].req == &a.r && !b.r.running);
    finish_step(c, &p);
    sched_core_schedule(c, &p);
    CHECK_COND(p.n_entries == 1 && p.entries[0].req == &a.r && p.entries[0].n == 2 && !b.r.running);
    finish_step(c, &p);
    /* A decodes; B shares A's 5 first positions and computes only the 6th,
     * in a copy of the shared partial block. */
    sched_core_schedule(c, &p);
    const sched_entry *eb = entry_of(&p, &b);
    CHECK(eb && eb->pos == 5 && eb->n == 1, "fork at %d", eb ? eb->pos : -1);
    const int32_t *ba = kv_cache_seq_blocks(kv, a.r.slot), *bb = kv_cache_seq_blocks(kv, b.r.slot);
    CHECK(ba[0] == bb[0] && ba[1] != bb[1], "block 0 shared, block 1 copied: %d/%d %d/%d", ba[0],
          bb[0], ba[1], bb[1]);
    CHECK_COND(stats(kv).cow_copies >= 1);
    finish_step(c, &p);
    CHECK_COND(kv_cache_check(kv) == 0);
    /* The fork source ending first leaves no dangling pointer behind. */
    treq d;
    treq_init(&d, pr, 6, 64);
    d.r.fork_of = &a.r;
    sched_core_add(c, &d.r);
    sched_core_remove(c, &a.r);
    CHECK_COND(d.r.fork_of == NULL);
    sched_core_remove(c, &b.r);
    sched_core_remove(c, &d.r);
    CHECK_COND(stats(kv).blocks_used == 0 && kv_cache_check(kv) == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

/* Random arrivals, lengths and cancellations over a small pool: every step
 * respects the budget and max_seqs, running requests never exceed their
 * blocks, and the cache invariants hold; everything finishes. */
static void test_random(void) {
    enum { N = 60 };
    kv_cache *kv = make_kv(24, 4, 6, 40);
    sched_core_config cfg = {6, 12, 1, SCHED_POLICY_FCFS, 0};
    sched_core *c = sched_core_create(kv, &cfg);
    treq *t = calloc(N, sizeof *t);
    int done[N] = {0}, added = 0, n_done = 0, bad = 0, steps = 0;
    uint64_t rng = 12345;
#define RND() (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (int)(rng >> 33))
    while (n_done < N && steps < 20000) {
        steps++;
        if (added < N && RND() % 3 == 0) {
            int32_t pr[40];
            int n = 1 + RND() % 30;
            for (int i = 0; i < n; i++)
                pr[i] = i < 8 ? 5 : RND() % 4; /* shared heads: prefix hits */
            treq_init(&t[added], pr, n, n + 1 + RND() % 40);
            if (added > 0 && RND() % 4 == 0 && t[added - 1].r.n_prompt == n && !done[added - 1]) {
                memcpy(t[added].toks, t[added - 1].toks, (size_t)n * sizeof(int32_t));
                t[added].r.fork_of = &t[added - 1].r;
            }
            sched_core_add(c, &t[added].r);
            added++;
        }
        sched_plan p;
        sched_core_schedule(c, &p);
        bad += p.n_tokens > cfg.max_batch_tokens || sched_core_n_running(c) > cfg.max_seqs;
        for (int i = 0; i < p.n_entries; i++) {
            sched_req *r = p.entries[i].req;
            bad += !r->running ||
                   p.entries[i].pos + p.entries[i].n > kv_cache_seq_capacity(kv, r->slot) ||
                   p.entries[i].pos != r->n_computed ||
                   p.entries[i].pos + p.entries[i].n > r->n_tokens;
        }
        for (int i = 0; i < p.n_starved; i++) {
            int k = (int)((treq *)p.starved[i] - t);
            sched_core_remove(c, p.starved[i]);
            done[k] = 1;
            n_done++;
        }
        finish_step(c, &p);
        bad += kv_cache_check(kv) != 0;
        for (int k = 0; k < added; k++) {
            if (done[k])
                continue;
            int cancel = RND() % 200 == 0;
            if (t[k].r.n_tokens >= t[k].max_len || cancel) {
                sched_core_remove(c, &t[k].r);
                done[k] = 1;
                n_done++;
            }
        }
    }
#undef RND
    CHECK(bad == 0 && n_done == N, "%d violations, %d of %d done in %d steps", bad, n_done, N,
          steps);
    kv_cache_stats s = stats(kv);
    CHECK(s.blocks_used == 0 && sched_core_n_running(c) == 0 && sched_core_n_waiting(c) == 0,
          "left: %d blocks", s.blocks_used);
    CHECK(sched_core_n_preemptions(c) > 0 && s.prefix_hits > 0,
          "preemptions %lld, prefix hits %lld", sched_core_n_preemptions(c), s.prefix_hits);
    free(t);
    sched_core_free(c);
    kv_cache_free(kv);
}

/* The priority policy: admission by effective priority with aging, and the
 * worst priority preempted first. One slot, so admission order is visible. */
static void test_priority(void) {
    kv_cache *kv = make_kv(32, 4, 1, 16);
    sched_core_config cfg = {1, 64, 0, SCHED_POLICY_PRIORITY, 10.0};
    sched_core *c = sched_core_create(kv, &cfg);
    int32_t pr[4] = {1, 2, 3, 4};
    treq a, b, d, e;
    treq_init(&a, pr, 4, 8);
    treq_init(&b, pr, 4, 8);
    treq_init(&d, pr, 4, 8);
    treq_init(&e, pr, 4, 8);
    a.r.priority = 0, a.r.t_arrival = 0;
    b.r.priority = 5, b.r.t_arrival = 1;
    d.r.priority = 1, d.r.t_arrival = 2;
    sched_plan p;
    sched_core_set_now(c, 0);
    sched_core_add(c, &a.r);
    sched_core_schedule(c, &p);
    CHECK_COND(a.r.running);
    sched_core_add(c, &b.r);
    sched_core_add(c, &d.r);
    sched_core_remove(c, &a.r);
    sched_core_set_now(c, 3);
    sched_core_schedule(c, &p);
    CHECK(d.r.running && !b.r.running, "priority 1 before priority 5 (arrived earlier)");
    sched_core_remove(c, &d.r);
    /* Aging: b (5, arrived at 1) has waited 59 s at 60 s: 5 - 5.9 = -0.9,
     * better than e (0, just arrived). */
    e.r.priority = 0, e.r.t_arrival = 60;
    sched_core_add(c, &e.r);
    sched_core_set_now(c, 60);
    sched_core_schedule(c, &p);
    CHECK(b.r.running && !e.r.running, "aged priority 5 before a fresh 0");
    sched_core_remove(c, &b.r);
    sched_core_remove(c, &e.r);
    sched_core_free(c);
    kv_cache_free(kv);

    /* Preemption: two running, the pool short; the worse priority goes even
     * though it was admitted first. */
    kv = make_kv(5, 4, 2, 8);
    sched_core_config cfg2 = {2, 64, 0, SCHED_POLICY_PRIORITY, 0};
    c = sched_core_create(kv, &cfg2);
    int32_t pr8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    treq lo, hi;
    treq_init(&lo, pr8, 8, 16); /* 2 blocks */
    treq_init(&hi, pr8, 8, 16);
    lo.r.priority = 9;
    hi.r.priority = 0;
    sched_core_set_now(c, 0);
    sched_core_add(c, &lo.r);
    sched_core_schedule(c, &p);
    finish_step(c, &p);
    sched_core_add(c, &hi.r);
    sched_core_schedule(c, &p);
    finish_step(c, &p);
    CHECK_COND(lo.r.running && hi.r.running && stats(kv).blocks_used == 5);
    /* hi's decode at position 8 needs a sixth block: one must give way. */
    sched_core_schedule(c, &p);
    CHECK(hi.r.running && !lo.r.running && p.n_preempted == 1,
          "the priority-9 request is preempted, not the newer priority-0 one");
    sched_core_remove(c, &lo.r);
    sched_core_remove(c, &hi.r);
    sched_core_free(c);
    kv_cache_free(kv);
}

int main(void) {
    test_priority();
    test_admission_and_chunking();
    test_decodes_before_prefills();
    test_preemption();
    test_starved();
    test_prefix_reuse();
    test_fork();
    test_random();
    return BT_SUMMARY("test_sched_core");
}
