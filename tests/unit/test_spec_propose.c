/* test_spec_propose.c - the deterministic proposers (spec_propose.h) on
 * scripted token streams: prompt lookup takes the longest match within its
 * bounds and the latest occurrence, proposes what followed and nothing
 * without a match; the suffix index counts continuations, proposes the
 * most frequent one while its probability holds, prefers the better of the
 * sequence's own tokens and the index, stays within its memory limit by
 * dropping its oldest outputs (the counts then as if they were never
 * added), and the same history always gives the same proposal. Plus the
 * policy's proposal length against acceptance and the step's room. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "scheduler/spec_draft.h"
#include "scheduler/spec_policy.h"
#include "scheduler/spec_propose.h"

static int eq(const int32_t *a, const int32_t *b, int n) {
    return !memcmp(a, b, (size_t)n * sizeof *a);
}

static void test_ngram(void) {
    int32_t out[16];
    /* 1 2 3 4 5 | 9 9 | 1 2 3 -> after "1 2 3" came "4 5 9 9 1" */
    int32_t s1[] = {1, 2, 3, 4, 5, 9, 9, 1, 2, 3};
    int n = spec_ngram_propose(s1, 10, 2, 4, 5, out);
    CHECK(n == 5 && eq(out, (int32_t[]){4, 5, 9, 9, 1}, 5), "ngram: %d", n);
    CHECK_COND(spec_ngram_propose(s1, 10, 2, 4, 2, out) == 2 && out[0] == 4 && out[1] == 5);
    /* min 4: "1 2 3" is only 3 long (the match "x 1 2 3" needs s1[-1]) */
    CHECK_COND(spec_ngram_propose(s1, 10, 4, 4, 5, out) == 0);
    /* The longest match wins over a later shorter one: "7 1 2" then "8 1 2" then "7 1 2". */
    int32_t s2[] = {7, 1, 2, 30, 8, 1, 2, 40, 7, 1, 2};
    n = spec_ngram_propose(s2, 11, 2, 3, 1, out);
    CHECK(n == 1 && out[0] == 30, "longest match: %d %d", n, out[0]);
    /* Equal lengths: the latest. */
    n = spec_ngram_propose(s2, 11, 2, 2, 1, out);
    CHECK(n == 1 && out[0] == 40, "latest of equals: %d", out[0]);
    /* Proposals stop at the end of the history. */
    int32_t s3[] = {5, 6, 5, 6};
    n = spec_ngram_propose(s3, 4, 2, 2, 8, out);
    CHECK(n == 2 && out[0] == 5 && out[1] == 6, "to the end: %d", n);
    int32_t s4[] = {1, 2, 3, 4};
    CHECK_COND(spec_ngram_propose(s4, 4, 1, 3, 4, out) == 0);
    CHECK_COND(spec_ngram_propose(s4, 1, 1, 3, 4, out) == 0);
}

static void test_suffix(void) {
    spec_suffix *x = spec_suffix_create(1 << 20, 8, 100);
    CHECK_COND(x != NULL);
    spec_suffix_opts o = {.k = 6, .min_prob = 0.1f, .max_factor = 4.0f};
    int32_t out[16];
    /* Three outputs continue "10 11" with 12 13 14; one with 50. */
    int32_t a[] = {10, 11, 12, 13, 14}, b[] = {3, 10, 11, 50, 51};
    CHECK_COND(spec_suffix_add(x, a, 5) == 0 && spec_suffix_add(x, a, 5) == 0 &&
               spec_suffix_add(x, a, 5) == 0 && spec_suffix_add(x, b, 5) == 0);
    CHECK_COND(spec_suffix_outputs(x) == 4);
    int32_t ctx[] = {99, 98, 10, 11}; /* its own tokens have no match */
    int n = spec_suffix_propose(x, ctx, 4, &o, out);
    CHECK(n == 3 && eq(out, (int32_t[]){12, 13, 14}, 3), "suffix: %d %d", n, out[0]);
    /* min_prob 0.8 stops at the first token (3/4 < 0.8). */
    spec_suffix_opts strict = o;
    strict.min_prob = 0.8f;
    CHECK_COND(spec_suffix_propose(x, ctx, 4, &strict, out) == 0);
    /* max_factor: at most matched length x factor tokens. */
    spec_suffix_opts f = o;
    f.max_factor = 0.5f;
    n = spec_suffix_propose(x, ctx, 4, &f, out);
    CHECK(n == 1 && out[0] == 12, "factor: %d", n);
    /* The sequence's own tokens win when their continuation is surer:
     * "10 11 77" twice in its history. */
    int32_t own[] = {10, 11, 77, 78, 5, 10, 11, 77, 78, 6, 10, 11};
    n = spec_suffix_propose(x, own, 12, &o, out);
    CHECK(n >= 2 && out[0] == 77 && out[1] == 78, "own history: %d %d", n, out[0]);
    /* Without an index: the own part alone; deterministic. */
    int32_t out2[16];
    int n2 = spec_suffix_propose(NULL, own, 12, &o, out2);
    CHECK_COND(n2 == n && eq(out, out2, n));
    spec_suffix_free(x);

    /* The memory limit: outputs keep coming, the index stays within it and
     * drops its oldest; what it holds then counts only the recent ones. */
    long long limit = (1 << 20) + 4 * 1024; /* the root table is 4 KiB (1024 tokens) */
    x = spec_suffix_create(limit, 16, 1024);
    CHECK_COND(x != NULL);
    int32_t buf[300];
    uint64_t lcg = 12345;
    for (int i = 0; i < 400; i++) {
        for (int j = 0; j < 300; j++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            buf[j] = (int32_t)((lcg >> 33) % 1000);
        }
        CHECK_COND(spec_suffix_add(x, buf, 300) == 0);
        CHECK(spec_suffix_bytes(x) <= limit, "output %d: %lld bytes over %lld", i,
              spec_suffix_bytes(x), limit);
    }
    CHECK(spec_suffix_outputs(x) < 400 && spec_suffix_outputs(x) > 0, "held %d",
          spec_suffix_outputs(x));
    /* Adding a distinct output that then ages out leaves no trace: a probe
     * for its pattern after enough others finds nothing. */
    int32_t marker[] = {1001, 1002, 1003, 1004};
    CHECK_COND(spec_suffix_add(x, marker, 4) == 0);
    int32_t probe[] = {1001, 1002};
    CHECK_COND(spec_suffix_propose(x, probe, 2, &o, out) == 2 && out[0] == 1003);
    for (int i = 0; i < 400; i++) {
        for (int j = 0; j < 300; j++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            buf[j] = (int32_t)((lcg >> 33) % 1000);
        }
        spec_suffix_add(x, buf, 300);
    }
    CHECK_COND(spec_suffix_propose(x, probe, 2, &o, out) == 0);
    /* Tokens outside the vocabulary end an output. */
    int32_t bad[] = {5, 6, -3, 7};
    CHECK_COND(spec_suffix_add(x, bad, 4) == 0);
    /* An output longer than the whole index keeps its tail. */
    int32_t *huge = malloc(200000 * sizeof *huge);
    for (int j = 0; j < 200000; j++)
        huge[j] = j % 1000;
    CHECK_COND(spec_suffix_add(x, huge, 200000) == 0 && spec_suffix_bytes(x) <= limit);
    free(huge);
    spec_suffix_free(x);
    CHECK_COND(spec_suffix_create(100, 8, 1000) == NULL &&
               spec_suffix_create(1 << 20, 1, 10) == NULL);
}

static void test_policy(void) {
    spec_policy_seq ps;
    spec_policy_init(&ps);
    int k0 = spec_policy_len(&ps, 8, 0.2, 1);
    CHECK(k0 >= 1 && k0 <= 3, "prior 0.5: %d", k0);
    for (int i = 0; i < 20; i++)
        spec_policy_observe(&ps, 8, 8);
    int k_hi = spec_policy_len(&ps, 8, 0.2, 1);
    CHECK(k_hi == 8, "always kept: %d (rate %.2f)", k_hi, ps.accept);
    for (int i = 0; i < 30; i++)
        spec_policy_observe(&ps, 4, 0);
    CHECK(spec_policy_len(&ps, 8, 0.2, 1) == 0, "never kept: rate %.3f", ps.accept);
    /* At 0 a probe of one token comes every SPEC_POLICY_PROBE steps. */
    int probes = 0;
    for (int i = 0; i < 4 * SPEC_POLICY_PROBE; i++)
        probes += spec_policy_len(&ps, 8, 0.2, 1);
    CHECK(probes == 4, "probes %d", probes);
    int none = 0; /* a draft model: no probes */
    for (int i = 0; i < 4 * SPEC_POLICY_PROBE; i++)
        none += spec_policy_len(&ps, 8, 0.2, 0);
    CHECK(none == 0, "probes without probing %d", none);
    /* A cheaper proposal pays at a lower rate. */
    ps.accept = 0.3f;
    CHECK_COND(spec_policy_len(&ps, 8, 0.05, 1) > spec_policy_len(&ps, 8, 0.5, 1));
    CHECK_COND(spec_policy_budget(12, 4) == 8 && spec_policy_budget(12, 12) == 0 &&
               spec_policy_budget(12, 40) == 0);
}

/* The batch rule: one sequence gets its own optimum; at 7 decode rows
 * (c = 0.3) only a proposal kept with probability above 0.75 pays; the
 * best-kept proposals go first; probes and fixed lengths within the room. */
static void test_share(void) {
    spec_policy_seq ps;
    spec_policy_init(&ps);
    for (int r = 0; r < 8; r++) {
        ps.accept = 0.1f * (float)(r + 1) + 0.05f;
        int own = spec_policy_len(&ps, 8, 0.3, 0), k = -1, want = 8, probe = 0;
        spec_policy_share(&ps.accept, &want, &probe, 1, 1, 0.3, 0.3, 64, 0, 0, &k);
        CHECK(k == own, "alone at rate %.2f: the share %d, its own length %d", (double)ps.accept, k,
              own);
    }
    float acc[7] = {0.7f, 0.74f, 0.8f, 0.95f, 0.5f, 0.9f, 0.2f};
    int want[7] = {8, 8, 8, 8, 8, 8, 8}, probe[7] = {0}, k[7];
    spec_policy_share(acc, want, probe, 7, 7, 0.3, 0.3, 64, 0, 0, k);
    /* V/C = 7 / 2.8 = 2.5 at first: 0.95 pays (0.95 > 0.3 x 2.5), and each
     * keep raises the bar. */
    CHECK(k[0] == 0 && k[1] == 0 && k[4] == 0 && k[6] == 0 && k[3] >= k[5] && k[5] >= 1,
          "7 rows: %d %d %d %d %d %d %d", k[0], k[1], k[2], k[3], k[4], k[5], k[6]);
    for (int i = 0; i < 7; i++) {
        double g = 1.0; /* the last proposal granted paid when it was granted */
        for (int j = 0; j < k[i]; j++)
            g *= acc[i];
        CHECK(k[i] == 0 || g > 0.3 * 7 / (1 + 0.3 * 6), "row %d: %d at %.2f", i, k[i], g);
    }
    /* 16 rows and the room: nothing past the threshold. */
    float a16[16];
    int w16[16], p16[16] = {0}, k16[16];
    for (int i = 0; i < 16; i++)
        a16[i] = 0.99f, w16[i] = 8;
    spec_policy_share(a16, w16, p16, 16, 16, 0.3, 0.3, 8, 0, 0, k16);
    int sum = 0;
    for (int i = 0; i < 16; i++)
        sum += k16[i];
    CHECK(sum == 0, "16 rows over a threshold of 8: %d proposals", sum);
    spec_policy_share(a16, w16, p16, 4, 4, 0.3, 0.3, 8, 0, 0, k16);
    sum = 0;
    for (int i = 0; i < 4; i++)
        sum += k16[i];
    CHECK(sum == 4, "4 rows at 0.99, room 4: %d", sum);
    /* A probe gets its one token at any rate, only where its lookup found one. */
    float ap[2] = {0.01f, 0.01f};
    int wp[2] = {1, 0}, pp[2] = {1, 1}, kp[2];
    spec_policy_share(ap, wp, pp, 2, 2, 0.3, 0.3, 8, 0, 0, kp);
    CHECK(kp[0] == 1 && kp[1] == 0, "probes %d %d", kp[0], kp[1]);
    /* Fixed lengths: as asked, within the room. */
    int wf[3] = {4, 4, 4}, pf[3] = {0}, kf[3];
    float af[3] = {0.0f, 0.0f, 0.0f};
    spec_policy_share(af, wf, pf, 3, 3, 0.3, 0.3, 12, 0, 1, kf);
    CHECK(kf[0] == 4 && kf[1] == 4 && kf[2] == 1, "fixed %d %d %d", kf[0], kf[1], kf[2]);
    /* min_len 3: a fixed candidate the room cuts below it takes nothing, and
     * the batch rule's first proposals come as a block of 3 or not at all. */
    spec_policy_share(af, wf, pf, 3, 3, 0.3, 0.3, 12, 3, 1, kf);
    CHECK(kf[0] == 4 && kf[1] == 4 && kf[2] == 0, "fixed, min 3: %d %d %d", kf[0], kf[1], kf[2]);
    float am[2] = {0.95f, 0.5f};
    int wm[2] = {8, 8}, pm[2] = {0, 0}, km[2];
    spec_policy_share(am, wm, pm, 2, 2, 0.3, 0.3, 64, 3, 0, km);
    CHECK(km[0] >= 3 && km[1] == 0, "min 3: %d %d", km[0], km[1]);
    /* A draft's step on top of each proposal: fewer pay. */
    int kd[7], kt[7];
    spec_policy_share(acc, want, probe, 7, 7, 0.3, 0.3, 64, 0, 0, kt);
    spec_policy_share(acc, want, probe, 7, 7, 0.3, 0.6, 64, 0, 0, kd);
    int st = 0, sd = 0;
    for (int i = 0; i < 7; i++)
        st += kt[i], sd += kd[i];
    CHECK(sd < st && sd >= 0, "with a draft's cost %d proposals, without %d", sd, st);
}

/* The draft pool's eviction order: the idle slot (owner's last step below
 * the current one) that proposed longest ago, never a free slot (-1) or
 * one proposing this step; none idle: -1. */
static void test_draft_evict_order(void) {
    const long long last[] = {7, -1, 3, 9, 5, 9};
    CHECK_COND(spec_draft_oldest_idle(last, 6, 9) == 2);
    /* A sequence the gate refused one step ago outlives older idle ones. */
    const long long refused[] = {8, 9, 6};
    CHECK_COND(spec_draft_oldest_idle(refused, 3, 9) == 2);
    const long long busy[] = {9, -1, 9};
    CHECK_COND(spec_draft_oldest_idle(busy, 3, 9) == -1);
    CHECK_COND(spec_draft_oldest_idle(busy, 0, 9) == -1);
    const long long tie[] = {4, 4};
    CHECK_COND(spec_draft_oldest_idle(tie, 2, 9) == 0);
}

int main(void) {
    test_ngram();
    test_suffix();
    test_policy();
    test_share();
    test_draft_evict_order();
    return BT_SUMMARY("test_spec_propose");
}
