/* test_sched_spec.c - speculative tokens in the scheduler (sched_core.h)
 * and the KV cache, without a model: a decode token with k proposals is one
 * entry of 1 + k tokens within the budget; only the known tokens count as
 * computed at commit; each kept proposal advances; the blocks grown for the
 * rejected ones go back (kv_cache_seq_shrink), across every block boundary
 * (prompt lengths, proposal counts and kept counts around a block of 4);
 * a block holding a rejected token is never registered in the prefix cache,
 * while a block filled by kept proposals is; proposals never preempt (a
 * pool with room for the decode token alone schedules it alone); the
 * cache's invariants hold after every step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "kv/kv_cache.h"
#include "scheduler/sched_core.h"

#define BS 4

static int32_t toks[64];

static kv_cache *make_kv(int n_blocks, int max_seqs) {
    kv_cache_config kc = {.n_layers = 1,
                          .kv_dim = 4,
                          .block_size = BS,
                          .n_blocks = n_blocks,
                          .max_seqs = max_seqs,
                          .max_seq_blocks = 16,
                          .prefix_cache = 1};
    return kv_cache_create_paged(&kc);
}

/* Runs one request of prompt length L through its prefill and first
 * sample, then a step with k proposals of which `kept` are kept. Checks the
 * plan, the blocks after the trim and what the prefix cache holds. */
static void one_case(int L, int k, int kept) {
    kv_cache *kv = make_kv(32, 2);
    sched_core_config cfg = {.max_seqs = 2, .max_batch_tokens = 16, .prefix_caching = 1};
    sched_core *c = sched_core_create(kv, &cfg);
    sched_req r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < 64; i++)
        toks[i] = 1000 + i;
    r.tokens = toks;
    r.n_tokens = r.n_prompt = L;
    sched_core_add(c, &r);
    sched_plan p;
    sched_core_schedule(c, &p);
    sched_core_commit(c, &p);
    CHECK_COND(r.n_computed == L);
    r.n_tokens = L + 1; /* the first sampled token */
    /* k proposals: toks[L + 1 .. L + k]; the kept ones equal the tokens
     * that follow, the first rejected one is replaced by another token. */
    r.n_spec = k;
    sched_core_schedule(c, &p);
    CHECK(p.n_entries == 1 && p.entries[0].n == 1 + k && p.entries[0].n_spec == k &&
              p.entries[0].pos == L,
          "L %d k %d: entry n %d n_spec %d", L, k, p.entries[0].n, p.entries[0].n_spec);
    sched_core_commit(c, &p);
    CHECK(r.n_computed == L + 1, "L %d k %d: commit counts the known token only (%d)", L, k,
          r.n_computed);
    for (int j = 0; j < kept; j++) { /* each kept proposal: the engine emits it, then advances */
        sched_core_advance(c, &r, 1);
        r.n_tokens++;
    }
    if (kept < k)
        toks[L + 1 + kept] = 7; /* the correction: a token other than the proposal */
    r.n_tokens++;               /* the correction or bonus token, not computed yet */
    sched_core_trim(c, &r);
    r.n_spec = 0;
    int computed = L + 1 + kept;
    CHECK(r.n_computed == computed && kv_cache_seq_n_pos(kv, r.slot) == computed,
          "L %d k %d kept %d: n_computed %d", L, k, kept, r.n_computed);
    CHECK(kv_cache_seq_n_blocks(kv, r.slot) == (computed + BS - 1) / BS,
          "L %d k %d kept %d: %d blocks for %d positions", L, k, kept,
          kv_cache_seq_n_blocks(kv, r.slot), computed);
    CHECK(kv_cache_check(kv) == 0, "L %d k %d kept %d: invariants", L, k, kept);
    /* One more plain step, then out: its full blocks stay cached. */
    sched_core_schedule(c, &p);
    CHECK(p.n_entries == 1 && p.entries[0].n == 1 && p.entries[0].pos == computed,
          "L %d k %d kept %d: the next step computes the correction at %d", L, k, kept, computed);
    sched_core_commit(c, &p);
    int held = r.n_computed;
    sched_core_remove(c, &r);
    CHECK(kv_cache_check(kv) == 0, "invariants after release");
    /* The cache holds exactly the full blocks of the computed positions:
     * a prompt of the true tokens hits them; one made of the rejected
     * proposals hits nothing past the kept ones. */
    kv_cache_stats st1;
    int slot = 1;
    int hit = kv_cache_seq_match(kv, slot, toks, 40, 39);
    CHECK(hit == held / BS * BS, "L %d k %d kept %d: %d positions cached, want %d", L, k, kept, hit,
          held / BS * BS);
    kv_cache_seq_release(kv, slot);
    if (kept < k) {
        int32_t rejected[64];
        memcpy(rejected, toks, sizeof rejected);
        rejected[L + 1 + kept] = 1000 + L + 1 + kept; /* the proposal that was rejected */
        hit = kv_cache_seq_match(kv, slot, rejected, 40, 39);
        CHECK(hit <= (L + 1 + kept) / BS * BS,
              "L %d k %d kept %d: a block with a rejected token is cached (%d positions)", L, k,
              kept, hit);
        kv_cache_seq_release(kv, slot);
    }
    kv_cache_get_stats(kv, &st1);
    CHECK_COND(st1.blocks_used == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

/* A pool with room for every decode token but not for proposals: they are
 * dropped, nothing is preempted. */
static void test_no_preemption(void) {
    kv_cache *kv = make_kv(4, 2);
    sched_core_config cfg = {.max_seqs = 2, .max_batch_tokens = 16, .prefix_caching = 0};
    sched_core *c = sched_core_create(kv, &cfg);
    sched_req a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    for (int i = 0; i < 64; i++)
        toks[i] = 1000 + i;
    a.tokens = b.tokens = toks;
    a.n_tokens = a.n_prompt = 7; /* 2 blocks each, 3 of 4 rows used in the second */
    b.n_tokens = b.n_prompt = 7;
    sched_core_add(c, &a);
    sched_core_add(c, &b);
    sched_plan p;
    sched_core_schedule(c, &p);
    sched_core_commit(c, &p);
    CHECK_COND(a.n_computed == 7 && b.n_computed == 7);
    a.n_tokens = b.n_tokens = 8;
    a.n_spec = b.n_spec = 4; /* would need a third block each */
    sched_core_schedule(c, &p);
    CHECK(p.n_preempted == 0 && p.n_entries == 2 && p.n_tokens == 2 && p.entries[0].n_spec == 0 &&
              p.entries[1].n_spec == 0,
          "proposals must not preempt: %d preempted, %d tokens", p.n_preempted, p.n_tokens);
    sched_core_commit(c, &p);
    CHECK_COND(kv_cache_check(kv) == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

/* Proposals of an older request never take the block a newer one's decode
 * token needs: two requests at a block boundary, two free blocks. */
static void test_no_starving_decodes(void) {
    kv_cache *kv = make_kv(6, 2);
    sched_core_config cfg = {.max_seqs = 2, .max_batch_tokens = 32, .prefix_caching = 0};
    sched_core *c = sched_core_create(kv, &cfg);
    sched_req a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.tokens = b.tokens = toks;
    a.n_tokens = a.n_prompt = 8; /* 2 full blocks each: 4 of 6 */
    b.n_tokens = b.n_prompt = 8;
    sched_core_add(c, &a);
    sched_core_add(c, &b);
    sched_plan p;
    sched_core_schedule(c, &p);
    sched_core_commit(c, &p);
    a.n_tokens = b.n_tokens = 9; /* each decode token needs a new block */
    a.n_spec = 8;                /* would want two more blocks */
    sched_core_schedule(c, &p);
    CHECK(p.n_preempted == 0 && p.n_entries == 2, "proposals preempted a decode: %d preempted",
          p.n_preempted);
    const sched_entry *ea = p.entries[0].req == &a ? &p.entries[0] : &p.entries[1];
    CHECK(ea->n_spec == 3, "a's proposals fill its new block only: %d", ea->n_spec);
    sched_core_commit(c, &p);
    sched_core_trim(c, &a);
    CHECK_COND(kv_cache_check(kv) == 0);
    sched_core_free(c);
    kv_cache_free(kv);
}

/* The budget: a decode token and its proposals stay within max_batch_tokens. */
static void test_budget(void) {
    kv_cache *kv = make_kv(32, 1);
    sched_core_config cfg = {.max_seqs = 1, .max_batch_tokens = 4, .prefix_caching = 0};
    sched_core *c = sched_core_create(kv, &cfg);
    sched_req r;
    memset(&r, 0, sizeof r);
    r.tokens = toks;
    r.n_tokens = r.n_prompt = 3;
    sched_core_add(c, &r);
    sched_plan p;
    sched_core_schedule(c, &p);
    sched_core_commit(c, &p);
    r.n_tokens = 4;
    r.n_spec = 10;
    sched_core_schedule(c, &p);
    CHECK(p.n_tokens == 4 && p.entries[0].n_spec == 3, "budget 4: %d tokens, %d proposals",
          p.n_tokens, p.entries[0].n_spec);
    sched_core_commit(c, &p);
    sched_core_trim(c, &r);
    CHECK_COND(kv_cache_check(kv) == 0 && r.n_computed == 4);
    sched_core_free(c);
    kv_cache_free(kv);
}

int main(void) {
    for (int L = 1; L <= 9; L++)
        for (int k = 1; k <= 6; k++)
            for (int kept = 0; kept <= k; kept++)
                one_case(L, k, kept);
    test_no_preemption();
    test_no_starving_decodes();
    test_budget();
    return BT_SUMMARY("test_sched_spec");
}
