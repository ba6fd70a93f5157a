/* test_kv_cache.c - the paged KV cache: block allocation all-or-nothing,
 * view addresses, the prefix cache (chained hashes, max_tokens, LRU
 * eviction, one copy per prefix), fork with copy-on-write, the fill
 * statistics, and a randomized stress run against a shadow model of every
 * slot's tokens with kv_cache_check after each operation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kv/kv_cache.h"

static kv_cache *make(int n_layers, int kv_dim, int block_size, int n_blocks, int max_seqs,
                      int max_seq_blocks, int prefix_cache) {
    kv_cache_config cfg = {.n_layers = n_layers,
                           .kv_dim = kv_dim,
                           .block_size = block_size,
                           .n_blocks = n_blocks,
                           .max_seqs = max_seqs,
                           .max_seq_blocks = max_seq_blocks,
                           .prefix_cache = prefix_cache};
    return kv_cache_create_paged(&cfg);
}

/* The K (v = 0) or V (v = 1) row of (layer, slot, position), found the way
 * the attention kernels find it: through the view's block table. */
static float *row(kv_cache *kv, int layer, int seq, int pos, int v) {
    kern_kv_view w;
    if (kv_cache_view(kv, layer, seq, &w) != 0)
        return NULL;
    size_t off = (size_t)w.block_table[pos / w.block_size] * w.block_stride +
                 (size_t)(pos % w.block_size) * w.row_stride;
    return (v ? w.v : w.k) + off;
}

/* What the "forward pass" stores for a token at a position: equal prefixes
 * give equal values, so matched and forked rows must read back the same.
 * Small integers, exact in float. */
static float kval(int tok, int pos, int layer, int d) {
    return (float)((((tok % 64) * 256 + pos % 256) * 8 + layer % 8) * 16 + d % 16);
}

static void compute(kv_cache *kv, int seq, const int32_t *tok, int from, int to, int n_layers,
                    int kv_dim) {
    for (int p = from; p < to; p++)
        for (int l = 0; l < n_layers; l++) {
            float *k = row(kv, l, seq, p, 0), *v = row(kv, l, seq, p, 1);
            for (int d = 0; d < kv_dim; d++) {
                k[d] = kval(tok[p], p, l, d);
                v[d] = -kval(tok[p], p, l, d) - 1;
            }
        }
}

/* 1 if positions [0, n) of the slot hold the values of tok. */
static int holds(kv_cache *kv, int seq, const int32_t *tok, int n, int n_layers, int kv_dim) {
    for (int p = 0; p < n; p++)
        for (int l = 0; l < n_layers; l++) {
            const float *k = row(kv, l, seq, p, 0), *v = row(kv, l, seq, p, 1);
            for (int d = 0; d < kv_dim; d++)
                if (k[d] != kval(tok[p], p, l, d) || v[d] != -kval(tok[p], p, l, d) - 1)
                    return 0;
        }
    return 1;
}

/* Grows the slot by n tokens, computes them and sets n_pos: a prefill or
 * decode step. Returns grow's code. */
static int step(kv_cache *kv, int seq, const int32_t *tok, int n, int n_layers, int kv_dim) {
    int n_pos = kv_cache_seq_n_pos(kv, seq);
    int rc = kv_cache_seq_grow(kv, seq, n);
    if (rc < 0)
        return rc;
    compute(kv, seq, tok, n_pos, n_pos + n, n_layers, kv_dim);
    kv_cache_seq_set_pos(kv, seq, n_pos + n);
    return 0;
}

static kv_cache_stats stats(const kv_cache *kv) {
    kv_cache_stats s;
    kv_cache_get_stats(kv, &s);
    return s;
}

/* ---- allocator ------------------------------------------------------------ */

static void test_bad_config(void) {
    kv_cache_config ok = {.n_layers = 2,
                          .kv_dim = 8,
                          .block_size = 4,
                          .n_blocks = 8,
                          .max_seqs = 3,
                          .max_seq_blocks = 5,
                          .prefix_cache = 1,
                          .f16 = 0};
    kv_cache *kv = kv_cache_create_paged(&ok);
    CHECK(kv != NULL, "valid config");
    kv_cache_free(kv);
    kv_cache_free(NULL);
    CHECK(kv_cache_create_paged(NULL) == NULL, "NULL config");
    for (int i = 0; i < 6; i++) {
        for (int bad_value = -3; bad_value <= 0; bad_value += 3) {
            kv_cache_config bad = ok;
            int *f[] = {&bad.n_layers, &bad.kv_dim,   &bad.block_size,
                        &bad.n_blocks, &bad.max_seqs, &bad.max_seq_blocks};
            *f[i] = bad_value;
            CHECK(kv_cache_create_paged(&bad) == NULL, "field %d = %d", i, bad_value);
        }
    }
    /* A slot's positions must fit an int; a pool past size_t is refused. */
    kv_cache_config big = ok;
    big.block_size = 1 << 16;
    big.max_seq_blocks = 1 << 16;
    CHECK(kv_cache_create_paged(&big) == NULL, "max_seq_blocks * block_size overflows int");
    big = ok;
    big.n_layers = big.kv_dim = big.n_blocks = 1 << 30;
    big.block_size = 1 << 20;
    CHECK(kv_cache_create_paged(&big) == NULL, "pool size overflows");
    CHECK(kv_cache_pool_bytes(1 << 30, 1 << 30, 1 << 30, 1L << 30) == 0,
          "pool_bytes overflow -> 0");
    CHECK(kv_cache_pool_bytes(0, 8, 4, 8) == 0, "pool_bytes bad argument -> 0");
    CHECK(kv_cache_pool_bytes(2, 8, 4, 8) == 2 * 2 * 8 * 4 * 8 * sizeof(float), "pool_bytes");
    CHECK(kv_cache_create(0, 8, 1, 16) == NULL && kv_cache_create(1, 8, 0, 16) == NULL &&
              kv_cache_create(1, 8, 1, 0) == NULL && kv_cache_create(1, 0, 1, 16) == NULL,
          "kv_cache_create bad arguments");
    CHECK(kv_cache_create(1, 1, 1 << 20, 1 << 30) == NULL, "kv_cache_create too big");
}

static void test_allocator(void) {
    const int L = 2, D = 8, BS = 4;
    kv_cache *kv = make(L, D, BS, 8, 3, 5, 0);
    CHECK(kv_cache_n_seqs(kv) == 3 && kv_cache_block_size(kv) == BS && kv_cache_n_blocks(kv) == 8,
          "geometry");
    CHECK(kv_cache_max_ctx(kv) == 20, "max_ctx = max_seq_blocks * block_size: %d",
          kv_cache_max_ctx(kv));
    CHECK(kv_cache_bytes(kv) == kv_cache_pool_bytes(L, D, BS, 8), "bytes");
    CHECK(kv_cache_n_available(kv) == 8 && kv_cache_check(kv) == 0, "fresh");

    /* Growing across block boundaries: blocks appear only when needed. */
    CHECK(kv_cache_seq_blocks_needed(kv, 0, 1) == 1, "needed 1");
    CHECK(kv_cache_seq_grow(kv, 0, 1) == 0, "grow 1");
    CHECK(kv_cache_seq_capacity(kv, 0) == 4 && kv_cache_seq_n_blocks(kv, 0) == 1 &&
              kv_cache_seq_n_pos(kv, 0) == 0,
          "grow does not set n_pos");
    kv_cache_seq_set_pos(kv, 0, 1);
    CHECK(kv_cache_seq_blocks_needed(kv, 0, 3) == 0, "room in the last block");
    CHECK(kv_cache_seq_grow(kv, 0, 3) == 0 && kv_cache_seq_capacity(kv, 0) == 4,
          "grow within the block");
    kv_cache_seq_set_pos(kv, 0, 4);
    CHECK(kv_cache_seq_blocks_needed(kv, 0, 1) == 1 && kv_cache_seq_grow(kv, 0, 1) == 0 &&
              kv_cache_seq_capacity(kv, 0) == 8 && kv_cache_seq_n_blocks(kv, 0) == 2,
          "next block");
    CHECK(kv_cache_seq_grow(kv, 0, 0) == 0 && kv_cache_seq_blocks_needed(kv, 0, 0) == 0, "grow 0");
    kv_cache_seq_set_pos(kv, 0, 5);
    CHECK(kv_cache_seq_n_pos(kv, 0) == 5, "n_pos");
    kv_cache_seq_set_pos(kv, 0, 9); /* beyond capacity: ignored */
    kv_cache_seq_set_pos(kv, 0, -1);
    CHECK(kv_cache_seq_n_pos(kv, 0) == 5, "set_pos out of range ignored");
    CHECK(kv_cache_check(kv) == 0, "check after grows");

    /* ERANGE past max_seq_blocks (20 positions), whatever the pool holds. */
    CHECK(kv_cache_seq_blocks_needed(kv, 0, 16) == BRISK_ERANGE, "needed past max");
    CHECK(kv_cache_seq_grow(kv, 0, 16) == BRISK_ERANGE && kv_cache_seq_capacity(kv, 0) == 8,
          "grow past max");
    CHECK(kv_cache_seq_grow(kv, 0, 15) == 0 && kv_cache_seq_capacity(kv, 0) == 20, "grow to max");
    CHECK(kv_cache_n_available(kv) == 3, "available %d", kv_cache_n_available(kv));

    /* ENOSPC is all or nothing: slot and pool unchanged. */
    CHECK(kv_cache_seq_grow(kv, 1, 2) == 0, "slot 1 one block");
    int32_t before = kv_cache_seq_blocks(kv, 1)[0];
    CHECK(kv_cache_seq_blocks_needed(kv, 1, 13) == 3, "needed 3");
    CHECK(kv_cache_seq_grow(kv, 1, 13) == BRISK_ENOSPC, "ENOSPC");
    CHECK(kv_cache_seq_n_blocks(kv, 1) == 1 && kv_cache_seq_blocks(kv, 1)[0] == before &&
              kv_cache_seq_capacity(kv, 1) == 4 && kv_cache_n_available(kv) == 2,
          "ENOSPC leaves the slot and the pool as they were");
    CHECK(kv_cache_seq_grow(kv, 1, 12) == 0 && kv_cache_n_available(kv) == 0, "exact fit");
    CHECK(kv_cache_seq_grow(kv, 2, 1) == BRISK_ENOSPC && kv_cache_seq_n_blocks(kv, 2) == 0,
          "pool empty");
    CHECK(kv_cache_check(kv) == 0, "check full pool");

    /* View addresses: the documented layout, and no two rows of different
     * slots (or positions) alias. */
    kern_kv_view w0, w1;
    CHECK(kv_cache_view(kv, 0, 0, &w0) == 0 && kv_cache_view(kv, 1, 0, &w1) == 0, "views");
    CHECK(((uintptr_t)w0.k & 63) == 0 && ((uintptr_t)w0.v & 63) == 0, "64-byte aligned");
    CHECK(w1.k == w0.k + 8 * BS * D && w1.v == w0.v + 8 * BS * D, "layer offset");
    CHECK(w0.block_size == BS && w0.block_stride == (size_t)BS * D && w0.row_stride == (size_t)D,
          "strides");
    CHECK(w0.block_table == kv_cache_seq_blocks(kv, 0), "block table is the slot's");
    int n_rows = 0, alias = 0, in_pool = 1;
    const float *rows[2 * (20 + 12)];
    for (int l = 0; l < L; l++)
        for (int s = 0; s < 2; s++)
            for (int p = 0; p < kv_cache_seq_capacity(kv, s); p++) {
                float *k = row(kv, l, s, p, 0);
                in_pool &= k >= w0.k && k + D <= w0.k + (size_t)L * 8 * BS * D;
                for (int i = 0; i < n_rows; i++)
                    alias |= rows[i] == k;
                rows[n_rows++] = k;
                for (int d = 0; d < D; d++) {
                    k[d] = (float)(s * 100000 + l * 1000 + p * 10 + d);
                    row(kv, l, s, p, 1)[d] = -(float)(s * 100000 + l * 1000 + p * 10 + d);
                }
            }
    CHECK(n_rows == 2 * (20 + 12) && !alias && in_pool, "rows distinct and inside the pool");
    int back = 1;
    for (int l = 0; l < L; l++)
        for (int s = 0; s < 2; s++)
            for (int p = 0; p < kv_cache_seq_capacity(kv, s); p++)
                for (int d = 0; d < D; d++) {
                    float e = (float)(s * 100000 + l * 1000 + p * 10 + d);
                    back &= row(kv, l, s, p, 0)[d] == e && row(kv, l, s, p, 1)[d] == -e;
                }
    CHECK(back, "values read back through the block tables");

    /* Bad arguments: codes, never a crash. */
    kern_kv_view w;
    CHECK(kv_cache_view(kv, 2, 0, &w) == BRISK_ERANGE &&
              kv_cache_view(kv, 0, 3, &w) == BRISK_ERANGE &&
              kv_cache_view(kv, -1, 0, &w) == BRISK_ERANGE &&
              kv_cache_view(kv, 0, 0, NULL) == BRISK_EINVAL,
          "view bad index");
    CHECK(kv_cache_seq_grow(kv, 3, 1) == BRISK_ERANGE &&
              kv_cache_seq_grow(kv, -1, 1) == BRISK_ERANGE &&
              kv_cache_seq_grow(kv, 2, -1) == BRISK_EINVAL,
          "grow bad args");
    CHECK(kv_cache_seq_capacity(kv, 3) == BRISK_ERANGE &&
              kv_cache_seq_n_pos(kv, -1) == BRISK_ERANGE &&
              kv_cache_seq_n_blocks(kv, 9) == BRISK_ERANGE && kv_cache_seq_blocks(kv, 9) == NULL &&
              kv_cache_seq_blocks_needed(kv, 5, 1) == BRISK_ERANGE,
          "getters bad slot");
    CHECK(kv_cache_seq_fork(kv, 0, 0, 0) == BRISK_EINVAL &&
              kv_cache_seq_fork(kv, 0, 1, 0) == BRISK_EINVAL &&
              kv_cache_seq_fork(kv, 2, 7, 0) == BRISK_ERANGE &&
              kv_cache_seq_fork(kv, 2, 0, 21) == BRISK_ERANGE,
          "fork bad args");
    int32_t t[4] = {1, 2, 3, 4};
    CHECK(kv_cache_seq_match(kv, 0, t, 4, 4) == BRISK_EINVAL &&
              kv_cache_seq_match(kv, 9, t, 4, 4) == BRISK_ERANGE &&
              kv_cache_seq_match(kv, 2, NULL, 4, 4) == BRISK_EINVAL &&
              kv_cache_seq_match(kv, 2, t, -1, 4) == BRISK_EINVAL,
          "match bad args");
    kv_cache_seq_set_pos(kv, 7, 1);
    kv_cache_seq_commit(kv, 7, t, 4);
    kv_cache_seq_release(kv, -2);
    CHECK(kv_cache_check(kv) == 0, "check after bad calls");

    /* With the prefix cache off, commit and match do nothing. */
    kv_cache_seq_set_pos(kv, 0, 20);
    int32_t z[20] = {0};
    kv_cache_seq_commit(kv, 0, z, 20);
    kv_cache_seq_release(kv, 0);
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_cached == 0 && st.blocks_free == 5 && st.blocks_used == 3,
          "no cache: blocks free");
    CHECK(kv_cache_seq_match(kv, 0, z, 20, 19) == 0 && kv_cache_seq_n_blocks(kv, 0) == 0,
          "no cache: no match");
    kv_cache_seq_release(kv, 1);
    kv_cache_seq_release(kv, 1); /* twice is harmless */
    CHECK(kv_cache_n_available(kv) == 8 && kv_cache_seq_capacity(kv, 1) == 0 &&
              kv_cache_check(kv) == 0,
          "released");
    kv_cache_free(kv);
}

/* kv_cache_create: every slot pre-grown to max_ctx in consecutive blocks. */
static void test_fixed_layout(void) {
    kv_cache *kv = kv_cache_create(2, 8, 3, 50);
    CHECK(kv != NULL, "create");
    if (!kv)
        return;
    int bs = kv_cache_block_size(kv), per = (50 + bs - 1) / bs;
    CHECK(kv_cache_n_seqs(kv) == 3 && kv_cache_max_ctx(kv) >= 50 &&
              kv_cache_n_blocks(kv) == 3 * per,
          "geometry");
    int ok = 1;
    for (int s = 0; s < 3; s++) {
        ok &= kv_cache_seq_capacity(kv, s) >= 50 && kv_cache_seq_n_pos(kv, s) == 0;
        for (int b = 0; b < per; b++)
            ok &= kv_cache_seq_blocks(kv, s)[b] == s * per + b;
    }
    CHECK(ok, "slots own consecutive blocks");
    CHECK(kv_cache_n_available(kv) == 0 && kv_cache_check(kv) == 0, "pool all used");
    kv_cache_free(kv);
}

/* ---- prefix cache ----------------------------------------------------------- */

static void test_prefix(void) {
    const int L = 2, D = 4, BS = 4;
    kv_cache *kv = make(L, D, BS, 16, 4, 8, 1);
    int32_t P[14] = {5, 1, 2, 3, 9, 8, 7, 6, 4, 4, 4, 4, 1, 2};

    /* A 3.5-block prompt: three full blocks registered, released into the cache. */
    CHECK(step(kv, 0, P, 14, L, D) == 0, "prefill");
    kv_cache_seq_commit(kv, 0, P, 14);
    kv_cache_seq_commit(kv, 0, P, 14); /* idempotent */
    CHECK(kv_cache_check(kv) == 0, "check after commit");
    int32_t ids[4];
    memcpy(ids, kv_cache_seq_blocks(kv, 0), sizeof ids);
    kv_cache_seq_release(kv, 0);
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_cached == 3 && st.blocks_free == 13 && st.blocks_used == 0,
          "3 cached, the partial one freed");
    CHECK(kv_cache_n_available(kv) == 16, "cached blocks count as available");

    /* Matching from a new slot attaches the same blocks. */
    CHECK(kv_cache_seq_match(kv, 1, P, 14, 13) == 12, "3 blocks attached");
    const int32_t *got = kv_cache_seq_blocks(kv, 1);
    CHECK(kv_cache_seq_n_blocks(kv, 1) == 3 && got[0] == ids[0] && got[1] == ids[1] &&
              got[2] == ids[2],
          "same block ids");
    CHECK(kv_cache_seq_n_pos(kv, 1) == 12 && holds(kv, 1, P, 12, L, D), "n_pos and values");
    st = stats(kv);
    CHECK(st.prefix_queries == 14 && st.prefix_hits == 12, "counted: %lld %lld", st.prefix_queries,
          st.prefix_hits);
    CHECK(st.blocks_cached == 0 && st.blocks_used == 3 && kv_cache_check(kv) == 0,
          "matched blocks in use");
    /* A second match of a block in use only adds a reference. */
    CHECK(kv_cache_seq_match(kv, 2, P, 14, 14) == 12 && stats(kv).blocks_used == 3, "shared match");
    /* The rest of the prompt, then commit: the matched blocks are skipped. */
    CHECK(step(kv, 1, P, 2, L, D) == 0 && holds(kv, 1, P, 14, L, D), "finish the prompt");
    kv_cache_seq_commit(kv, 1, P, 14);
    CHECK(kv_cache_check(kv) == 0, "check");
    kv_cache_seq_release(kv, 1);
    kv_cache_seq_release(kv, 2);
    CHECK(stats(kv).blocks_cached == 3, "back in the cache");

    /* max_tokens caps the match: exactly 3 blocks of tokens, n - 1 allowed. */
    CHECK(kv_cache_seq_match(kv, 0, P, 12, 11) == 8, "max_tokens n-1 -> 2 blocks");
    kv_cache_seq_release(kv, 0);
    CHECK(kv_cache_seq_match(kv, 0, P, 12, 12) == 12, "max_tokens n -> 3 blocks");
    kv_cache_seq_release(kv, 0);
    CHECK(kv_cache_seq_match(kv, 0, P, 12, 3) == 0 && kv_cache_seq_n_blocks(kv, 0) == 0,
          "under a block");
    CHECK(kv_cache_seq_match(kv, 0, P, 12, -5) == 0, "negative max_tokens");

    /* A prompt differing in block 2 matches blocks 0-1 only. */
    int32_t R[14];
    memcpy(R, P, sizeof R);
    R[9] = 77;
    CHECK(kv_cache_seq_match(kv, 0, R, 14, 13) == 8, "differs in block 2");
    kv_cache_seq_release(kv, 0);

    /* Chained hash: prefix B = [Z W] registered, then [Z, block 1 of P]:
     * block 0 matches (B's), block 1 has P's tokens but P's parent: no match. */
    int32_t B[8] = {3, 3, 3, 3, 6, 6, 6, 6};
    CHECK(step(kv, 0, B, 8, L, D) == 0, "prefill B");
    kv_cache_seq_commit(kv, 0, B, 8);
    kv_cache_seq_release(kv, 0);
    int32_t C[9] = {3, 3, 3, 3, 9, 8, 7, 6, 1};
    CHECK(kv_cache_seq_match(kv, 0, C, 9, 8) == 4, "chained: only block 0");
    kv_cache_seq_release(kv, 0);
    CHECK(kv_cache_check(kv) == 0, "check");
    kv_cache_free(kv);
}

/* LRU: tails of a prefix go first; prefixes released earlier go first; an
 * evicted block no longer matches. Pool of 6: A (3 blocks), B (2 blocks). */
static void test_lru(void) {
    const int L = 1, D = 4, BS = 4;
    kv_cache *kv = make(L, D, BS, 6, 4, 6, 1);
    int32_t A[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    int32_t B[8] = {4, 4, 4, 4, 5, 5, 5, 5};
    step(kv, 0, A, 12, L, D);
    kv_cache_seq_commit(kv, 0, A, 12);
    int32_t a[3], b[2];
    memcpy(a, kv_cache_seq_blocks(kv, 0), sizeof a);
    step(kv, 1, B, 8, L, D);
    kv_cache_seq_commit(kv, 1, B, 8);
    memcpy(b, kv_cache_seq_blocks(kv, 1), sizeof b);
    kv_cache_seq_release(kv, 0); /* A released first: older */
    kv_cache_seq_release(kv, 1);
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_cached == 5 && st.blocks_free == 1 && kv_cache_n_available(kv) == 6,
          "5 cached, 1 free");

    /* The free block goes first, without an eviction. */
    CHECK(kv_cache_seq_grow(kv, 2, 4) == 0 && stats(kv).evictions == 0, "free block first");
    /* Then A's tail, then A's middle. */
    CHECK(kv_cache_seq_grow(kv, 2, 8) == 0 && kv_cache_seq_blocks(kv, 2)[1] == a[2],
          "evict A2 first");
    CHECK(stats(kv).evictions == 1, "eviction counted");
    CHECK(kv_cache_seq_grow(kv, 2, 12) == 0 && kv_cache_seq_blocks(kv, 2)[2] == a[1], "then A1");
    CHECK(kv_cache_check(kv) == 0, "check");
    /* Evicted blocks no longer match: A matches its head only. */
    CHECK(kv_cache_seq_match(kv, 3, A, 12, 12) == 4 && kv_cache_seq_blocks(kv, 3)[0] == a[0],
          "evicted blocks do not match");
    /* A0 is in use now: B (released after A) is evicted tail first. */
    kv_cache_seq_set_pos(kv, 2, 12);
    CHECK(kv_cache_seq_grow(kv, 2, 4) == 0 && kv_cache_seq_blocks(kv, 2)[3] == b[1], "then B1");
    kv_cache_seq_release(kv, 3); /* A0 newest now */
    CHECK(kv_cache_seq_grow(kv, 2, 8) == 0 && kv_cache_seq_blocks(kv, 2)[4] == b[0], "then B0");
    CHECK(kv_cache_seq_grow(kv, 2, 12) == 0 && kv_cache_seq_blocks(kv, 2)[5] == a[0], "A0 last");
    st = stats(kv);
    CHECK(st.evictions == 5 && st.blocks_cached == 0 && st.blocks_used == 6, "all evicted: %lld",
          st.evictions);
    CHECK(kv_cache_seq_grow(kv, 2, 13) == BRISK_ERANGE &&
              kv_cache_seq_grow(kv, 3, 1) == BRISK_ENOSPC,
          "full");
    kv_cache_seq_release(kv, 2);
    CHECK(kv_cache_seq_match(kv, 0, A, 12, 12) == 0 && kv_cache_seq_match(kv, 1, B, 8, 8) == 0,
          "nothing left");
    CHECK(kv_cache_check(kv) == 0, "check");
    kv_cache_free(kv);
}

/* The same prefix computed by two slots at once is registered once. */
static void test_duplicate(void) {
    const int L = 1, D = 4, BS = 4;
    kv_cache *kv = make(L, D, BS, 8, 3, 4, 1);
    int32_t P[9] = {7, 7, 1, 2, 3, 4, 5, 6, 0};
    step(kv, 0, P, 9, L, D);
    step(kv, 1, P, 9, L, D);
    kv_cache_seq_commit(kv, 0, P, 9);
    kv_cache_seq_commit(kv, 1, P, 9);
    CHECK(kv_cache_check(kv) == 0, "check");
    int32_t first[2];
    memcpy(first, kv_cache_seq_blocks(kv, 0), sizeof first);
    kv_cache_seq_release(kv, 0);
    kv_cache_seq_release(kv, 1);
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_cached == 2 && st.blocks_free == 6, "one copy cached: %d", st.blocks_cached);
    CHECK(kv_cache_seq_match(kv, 2, P, 9, 8) == 8 && kv_cache_seq_blocks(kv, 2)[0] == first[0] &&
              kv_cache_seq_blocks(kv, 2)[1] == first[1] && holds(kv, 2, P, 8, L, D),
          "the first slot's copy matches");
    CHECK(kv_cache_check(kv) == 0, "check");
    kv_cache_free(kv);
}

/* ---- fork + copy-on-write ---------------------------------------------------- */

static void test_fork_cow(void) {
    const int L = 3, D = 8, BS = 4;
    kv_cache *kv = make(L, D, BS, 16, 4, 6, 1);
    int32_t S[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CHECK(step(kv, 0, S, 10, L, D) == 0, "source: 2 full blocks + 2 rows");
    kv_cache_seq_commit(kv, 0, S, 10);
    const int32_t *src = kv_cache_seq_blocks(kv, 0);
    int32_t s0 = src[0], s1 = src[1], s2 = src[2];
    /* Snapshot the partial block of every layer, K and V, rows included past n_pos. */
    float snap[3][2][4 * 8];
    for (int l = 0; l < L; l++)
        for (int v = 0; v < 2; v++)
            memcpy(snap[l][v], row(kv, l, 0, 8, v), sizeof snap[l][v]);

    CHECK(kv_cache_seq_fork(kv, 1, 0, 10) == 0 && kv_cache_seq_fork(kv, 2, 0, 10) == 0,
          "fork twice");
    CHECK(kv_cache_seq_fork(kv, 1, 0, 4) == BRISK_EINVAL, "fork into a busy slot");
    CHECK(kv_cache_seq_n_pos(kv, 1) == 10 && kv_cache_seq_n_blocks(kv, 2) == 3 &&
              kv_cache_seq_blocks(kv, 2)[2] == s2,
          "shared table");
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_used == 3 && st.cow_copies == 0 && kv_cache_check(kv) == 0,
          "3 blocks, 3 refs each");
    CHECK(holds(kv, 1, S, 10, L, D) && holds(kv, 2, S, 10, L, D), "forks read the source");

    /* Growing a fork copies the shared partial block first. */
    CHECK(kv_cache_seq_blocks_needed(kv, 1, 2) == 1 && kv_cache_seq_blocks_needed(kv, 1, 3) == 2,
          "needed");
    int32_t T1[12], T2[12];
    memcpy(T1, S, sizeof T1);
    memcpy(T2, S, sizeof T2);
    T1[10] = 40, T1[11] = 41, T2[10] = 50, T2[11] = 51;
    CHECK(step(kv, 1, T1, 2, L, D) == 0, "grow fork 1");
    const int32_t *t1 = kv_cache_seq_blocks(kv, 1);
    CHECK(t1[0] == s0 && t1[1] == s1 && t1[2] != s2, "own copy of the partial block only");
    CHECK(stats(kv).cow_copies == 1 && kv_cache_check(kv) == 0, "cow counted");
    CHECK(step(kv, 2, T2, 2, L, D) == 0, "grow fork 2");
    const int32_t *t2 = kv_cache_seq_blocks(kv, 2);
    CHECK(t2[2] != s2 && t2[2] != t1[2] && t2[0] == s0, "second copy");
    CHECK(holds(kv, 1, T1, 12, L, D) && holds(kv, 2, T2, 12, L, D),
          "copies: shared rows equal, own rows own");
    int same = 1;
    for (int l = 0; l < L; l++)
        for (int v = 0; v < 2; v++)
            same &= memcmp(snap[l][v], row(kv, l, 0, 8, v), sizeof snap[l][v]) == 0;
    CHECK(same && holds(kv, 0, S, 10, L, D), "source block untouched");
    st = stats(kv);
    CHECK(st.cow_copies == 2 && st.blocks_used == 5, "cow 2, used 5: %lld %d", st.cow_copies,
          st.blocks_used);
    /* The source's block is its own again: no copy. */
    CHECK(kv_cache_seq_blocks_needed(kv, 0, 2) == 0 && step(kv, 0, S, 2, L, D) == 0 &&
              kv_cache_seq_blocks(kv, 0)[2] == s2 && stats(kv).cow_copies == 2,
          "sole owner writes in place");
    CHECK(kv_cache_check(kv) == 0, "check");

    /* A fork at a block boundary shares full blocks only: no copy. */
    CHECK(kv_cache_seq_fork(kv, 3, 0, 8) == 0 && kv_cache_seq_n_blocks(kv, 3) == 2, "fork at 8");
    CHECK(kv_cache_seq_blocks_needed(kv, 3, 4) == 1 && step(kv, 3, S, 4, L, D) == 0 &&
              stats(kv).cow_copies == 2,
          "full shared blocks are not copied");
    CHECK(kv_cache_seq_blocks(kv, 3)[1] == s1 && holds(kv, 3, S, 12, L, D), "fork 3 values");
    /* The forks commit the same prefix: nothing is registered twice. */
    kv_cache_seq_commit(kv, 3, S, 12);
    kv_cache_seq_commit(kv, 1, T1, 12);
    CHECK(kv_cache_check(kv) == 0, "check");
    /* Releasing the source leaves the shared blocks with the forks. */
    kv_cache_seq_release(kv, 0);
    CHECK(holds(kv, 1, T1, 12, L, D) && holds(kv, 3, S, 12, L, D) && kv_cache_check(kv) == 0,
          "after release");
    for (int s = 1; s < 4; s++)
        kv_cache_seq_release(kv, s);
    st = stats(kv);
    CHECK(st.blocks_used == 0 && st.blocks_cached + st.blocks_free == 16 && kv_cache_check(kv) == 0,
          "all back");
    /* fork with n_pos 0 gives an empty slot. */
    CHECK(kv_cache_seq_fork(kv, 1, 0, 0) == 0 && kv_cache_seq_n_blocks(kv, 1) == 0, "fork 0");
    kv_cache_free(kv);
}

/* ---- stats -------------------------------------------------------------------- */

static void test_stats(void) {
    const int L = 1, D = 4, BS = 4;
    kv_cache *kv = make(L, D, BS, 10, 3, 4, 1);
    int32_t T[16] = {0};
    step(kv, 0, T, 10, L, D); /* 3 blocks, 10 filled */
    CHECK(kv_cache_seq_grow(kv, 1, 5) == 0, "grow");
    kv_cache_seq_set_pos(kv, 1, 3); /* 2 blocks, 3 filled */
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_total == 10 && st.blocks_used == 5 && st.blocks_free == 5 &&
              st.blocks_cached == 0,
          "blocks");
    CHECK(st.slots_allocated == 20 && st.slots_filled == 13, "allocated %lld filled %lld",
          st.slots_allocated, st.slots_filled);
    CHECK(kv_cache_seq_fork(kv, 2, 0, 6) == 0, "fork");
    st = stats(kv);
    CHECK(st.slots_allocated == 20 && st.slots_filled == 13, "a shared block counts once");
    CHECK(kv_cache_seq_grow(kv, 2, 1) == 0, "cow"); /* block 1 copied: 2 rows */
    st = stats(kv);
    CHECK(st.slots_allocated == 24 && st.slots_filled == 15 &&
              st.slots_allocated - st.slots_filled == 9,
          "waste 9: %lld %lld", st.slots_allocated, st.slots_filled);
    kv_cache_seq_set_pos(kv, 2, 7);
    CHECK(stats(kv).slots_filled == 16, "fill grows with n_pos");
    kv_cache_seq_set_pos(kv, 2, 5);
    CHECK(stats(kv).slots_filled == 16, "fill does not shrink");
    kv_cache_seq_release(kv, 1);
    st = stats(kv);
    CHECK(st.slots_allocated == 16 && st.slots_filled == 13 && st.blocks_free == 6,
          "after release");
    kv_cache_seq_commit(kv, 0, T, 10); /* 2 blocks registered */
    kv_cache_seq_release(kv, 2);
    kv_cache_seq_release(kv, 0);
    st = stats(kv);
    CHECK(st.blocks_cached == 2 && st.blocks_used == 0 && st.slots_allocated == 0 &&
              st.slots_filled == 0,
          "cached blocks are not allocated");
    CHECK(kv_cache_check(kv) == 0, "check");
    kv_cache_free(kv);
}

/* ---- randomized stress ------------------------------------------------------------ */

enum { SL = 2, SD = 4, SBS = 4, SNB = 32, SSEQ = 8, SMSB = 12, SMAX = SMSB * SBS, SOPS = 5000 };

static uint64_t rng_state;
static int rnd(int n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

typedef struct shadow {
    int32_t tok[SSEQ][SMAX];
    int n[SSEQ];
} shadow;

/* Everything visible from outside agrees with the shadow; returns a reason
 * or NULL. */
static const char *verify(kv_cache *kv, const shadow *sh) {
    if (kv_cache_check(kv) != 0)
        return "kv_cache_check";
    int users[SNB] = {0};
    int used = 0;
    for (int s = 0; s < SSEQ; s++) {
        if (kv_cache_seq_n_pos(kv, s) != sh->n[s])
            return "n_pos";
        if (kv_cache_seq_capacity(kv, s) < sh->n[s])
            return "capacity";
        for (int b = 0; b < kv_cache_seq_n_blocks(kv, s); b++)
            used += users[kv_cache_seq_blocks(kv, s)[b]]++ == 0;
        if (!holds(kv, s, sh->tok[s], sh->n[s], SL, SD))
            return "values";
    }
    kv_cache_stats st = stats(kv);
    if (st.blocks_used != used)
        return "blocks_used";
    if (st.blocks_used + st.blocks_cached + st.blocks_free != SNB)
        return "block states";
    if (kv_cache_n_available(kv) != st.blocks_cached + st.blocks_free)
        return "available";
    if (st.prefix_hits > st.prefix_queries || st.slots_filled > st.slots_allocated)
        return "counters";
    return NULL;
}

/* A prompt: a prefix of one of a few base texts, sometimes with a change,
 * so that matches, partial matches and misses all happen. */
static int make_prompt(int32_t *p, int32_t base[4][SMAX]) {
    int n = 1 + rnd(SMAX - 8);
    memcpy(p, base[rnd(4)], (size_t)n * sizeof *p);
    if (rnd(3) == 0)
        p[rnd(n)] = rnd(3);
    return n;
}

static void test_stress(void) {
    const char *seed_env = getenv("KV_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20261121;
    rng_state = seed * 2654435761u + 1;
    kv_cache *kv = make(SL, SD, SBS, SNB, SSEQ, SMSB, 1);
    static shadow sh;
    memset(&sh, 0, sizeof sh);
    int32_t base[4][SMAX];
    for (int i = 0; i < 4; i++)
        for (int p = 0; p < SMAX; p++)
            base[i][p] = i < 2 && p < 8 ? 1 : rnd(3); /* two share a head */
    const char *bad = NULL;
    int bad_op = -1, n_match = 0, n_hit = 0, n_cow_ops = 0, n_enospc = 0, n_erange = 0,
        private_ok = 1;
    int n_ops[6] = {0};
    for (int op = 0; op < SOPS && !bad; op++) {
        int s = rnd(SSEQ), kind = rnd(20), *n = &sh.n[s];
        int32_t *tok = sh.tok[s];
        if (kind < 7) { /* decode / append: grow, compute, set_pos, maybe commit */
            int k = rnd(25) ? 1 + rnd(6) : SMAX - rnd(4); /* now and then, too many */
            int need = kv_cache_seq_blocks_needed(kv, s, k);
            int n_blocks = kv_cache_seq_n_blocks(kv, s), avail = kv_cache_n_available(kv);
            int32_t table[SMSB];
            memcpy(table, kv_cache_seq_blocks(kv, s), (size_t)n_blocks * sizeof *table);
            long long cow0 = stats(kv).cow_copies;
            int rc = kv_cache_seq_grow(kv, s, k);
            if (rc == BRISK_ERANGE) {
                n_erange++;
                private_ok &= *n + k > SMAX && need == BRISK_ERANGE;
            } else if (rc == BRISK_ENOSPC) {
                n_enospc++;
                private_ok &=
                    need > avail && kv_cache_seq_n_blocks(kv, s) == n_blocks &&
                    kv_cache_n_available(kv) == avail &&
                    !memcmp(table, kv_cache_seq_blocks(kv, s), (size_t)n_blocks * sizeof *table);
            } else {
                private_ok &= rc == 0 && need <= avail;
                n_cow_ops += stats(kv).cow_copies > cow0;
                /* The rows about to be written are this slot's alone. */
                for (int b = *n / SBS; b * SBS < *n + k; b++) {
                    int32_t id = kv_cache_seq_blocks(kv, s)[b], holders = 0;
                    for (int q = 0; q < SSEQ; q++)
                        for (int j = 0; j < kv_cache_seq_n_blocks(kv, q); j++)
                            holders += kv_cache_seq_blocks(kv, q)[j] == id;
                    private_ok &= holders == 1;
                }
                for (int i = 0; i < k; i++)
                    tok[*n + i] = rnd(3);
                compute(kv, s, tok, *n, *n + k, SL, SD);
                *n += k;
                kv_cache_seq_set_pos(kv, s, *n);
                if (rnd(2))
                    kv_cache_seq_commit(kv, s, tok, *n);
            }
            n_ops[0]++;
        } else if (kind < 10) { /* new prompt into an empty slot: match, then prefill the rest */
            if (kv_cache_seq_n_blocks(kv, s) != 0) {
                kv_cache_seq_release(kv, s);
                *n = 0;
            }
            int32_t p[SMAX];
            int len = make_prompt(p, base);
            int got = kv_cache_seq_match(kv, s, p, len, len - 1);
            n_match++;
            n_hit += got > 0;
            private_ok &= got >= 0 && got % SBS == 0 && got <= len - 1;
            memcpy(tok, p, (size_t)len * sizeof *p);
            *n = got;
            if ((bad = verify(kv, &sh)) != NULL) {
                bad_op = op;
                break;
            }
            int rc = kv_cache_seq_grow(kv, s, len - got);
            if (rc == 0) {
                compute(kv, s, tok, got, len, SL, SD);
                *n = len;
                kv_cache_seq_set_pos(kv, s, len);
                kv_cache_seq_commit(kv, s, tok, len);
            } else {
                n_enospc++;
                private_ok &= rc == BRISK_ENOSPC && kv_cache_seq_n_blocks(kv, s) == got / SBS;
            }
            n_ops[1]++;
        } else if (kind < 13) { /* commit a prefix */
            kv_cache_seq_commit(kv, s, tok, rnd(*n + 1));
            n_ops[2]++;
        } else if (kind < 15) { /* fork into an emptied slot */
            int src = rnd(SSEQ);
            if (src != s && sh.n[src] > 0) {
                kv_cache_seq_release(kv, s);
                int m = rnd(sh.n[src] + 1);
                private_ok &= kv_cache_seq_fork(kv, s, src, m) == 0;
                memcpy(tok, sh.tok[src], (size_t)m * sizeof *tok);
                *n = m;
                n_ops[3]++;
            }
        } else if (kind < 18) {
            kv_cache_seq_release(kv, s);
            *n = 0;
            n_ops[4]++;
        } else if (*n > 0) { /* roll back: later writes must not reach shared or cached rows */
            *n = rnd(*n);
            kv_cache_seq_set_pos(kv, s, *n);
            n_ops[5]++;
        }
        if (!bad && (bad = verify(kv, &sh)) != NULL)
            bad_op = op;
    }
    kv_cache_stats st = stats(kv);
    printf("stress: %d ops (seed %llu): %d/%d matches hit, %lld evictions, %lld copies, %d ENOSPC, "
           "%d ERANGE, "
           "%d forks, %d rollbacks\n",
           SOPS, (unsigned long long)seed, n_hit, n_match, st.evictions, st.cow_copies, n_enospc,
           n_erange, n_ops[3], n_ops[5]);
    CHECK(bad == NULL, "stress (seed %llu): op %d: %s", (unsigned long long)seed, bad_op,
          bad ? bad : "");
    CHECK(private_ok, "stress: grow codes, matches and private rows");
    /* The run exercised what it is for. */
    CHECK(n_hit > 20 && st.prefix_hits > 0 && st.evictions > 0 && st.cow_copies > 0 &&
              n_cow_ops > 0 && n_enospc > 0 && n_erange > 0,
          "coverage: hits %d/%d, evictions %lld, cow %lld, enospc %d, erange %d", n_hit, n_match,
          st.evictions, st.cow_copies, n_enospc, n_erange);
    CHECK(n_ops[3] > 200 && n_ops[5] > 100, "forks %d, rollbacks %d", n_ops[3], n_ops[5]);
    for (int s = 0; s < SSEQ; s++)
        kv_cache_seq_release(kv, s);
    st = stats(kv);
    CHECK(st.blocks_used == 0 && kv_cache_check(kv) == 0, "stress: all released");
    kv_cache_free(kv);
}

/* An f16 cache: views carry k16/v16 (k/v NULL), half the bytes, rows of
 * different slots apart, and copy-on-write copies the f16 rows of every
 * layer. */
static void test_f16(void) {
    const int L = 2, D = 8, BS = 4;
    kv_cache_config c = {.n_layers = L,
                         .kv_dim = D,
                         .block_size = BS,
                         .n_blocks = 8,
                         .max_seqs = 3,
                         .max_seq_blocks = 4,
                         .prefix_cache = 1,
                         .f16 = 1};
    kv_cache *kv = kv_cache_create_paged(&c);
    CHECK(kv != NULL, "f16 cache");
    if (!kv)
        return;
    CHECK(kv_cache_bytes(kv) == kv_cache_pool_bytes_dtype(L, D, BS, 8, 1) &&
              kv_cache_pool_bytes_dtype(L, D, BS, 8, 1) * 2 == kv_cache_pool_bytes(L, D, BS, 8),
          "f16 pool is half the f32 one");
    CHECK(kv_cache_seq_grow(kv, 0, 6) == 0, "grow");
    for (int l = 0; l < L; l++) {
        kern_kv_view v;
        CHECK(kv_cache_view(kv, l, 0, &v) == 0 && v.k == NULL && v.v == NULL && v.k16 && v.v16,
              "f16 view");
        for (int p = 0; p < 6; p++)
            for (int d = 0; d < D; d++) {
                size_t o = (size_t)v.block_table[p / v.block_size] * v.block_stride +
                           (size_t)(p % v.block_size) * v.row_stride + (size_t)d;
                v.k16[o] = kern_fp32_to_fp16((float)(100 * l + 10 * p + d));
                v.v16[o] = kern_fp32_to_fp16((float)-(100 * l + 10 * p + d));
            }
    }
    kv_cache_seq_set_pos(kv, 0, 6);
    CHECK(kv_cache_seq_fork(kv, 1, 0, 6) == 0 && kv_cache_seq_grow(kv, 1, 1) == 0, "fork + grow");
    CHECK(stats(kv).cow_copies == 1 &&
              kv_cache_seq_blocks(kv, 1)[1] != kv_cache_seq_blocks(kv, 0)[1],
          "partial block copied");
    int bad = 0;
    for (int l = 0; l < L; l++) {
        kern_kv_view v;
        kv_cache_view(kv, l, 1, &v);
        for (int p = 0; p < 6; p++)
            for (int d = 0; d < D; d++) {
                size_t o = (size_t)v.block_table[p / v.block_size] * v.block_stride +
                           (size_t)(p % v.block_size) * v.row_stride + (size_t)d;
                bad += kern_fp16_to_fp32(v.k16[o]) != (float)(100 * l + 10 * p + d) ||
                       kern_fp16_to_fp32(v.v16[o]) != (float)-(100 * l + 10 * p + d);
            }
    }
    CHECK(bad == 0, "the copy holds the source's f16 rows (%d wrong)", bad);
    CHECK(kv_cache_check(kv) == 0, "invariants");
    kv_cache_free(kv);
}

/* A quantized cache (q8_0, q4_0, int8, fp8): the views carry kq/vq, the
 * pool's bytes are the dtype's layer-blocks, and copy-on-write moves each
 * layer's codes and scales: the fork's rows read back as the source's, the
 * source's unchanged. The rows are written with the store op, as the
 * forward pass writes them. */
static void test_quantized(void) {
    const kern_kv_dtype dts[] = {KERN_KV_Q8_0, KERN_KV_Q4_0, KERN_KV_INT8, KERN_KV_FP8};
    const int L = 2, NK = 2, HD = 32, D = NK * HD, BS = 4;
    for (int di = 0; di < 4; di++) {
        kern_kv_dtype dt = dts[di];
        kv_cache_config c = {.n_layers = L,
                             .kv_dim = D,
                             .block_size = BS,
                             .n_blocks = 8,
                             .max_seqs = 3,
                             .max_seq_blocks = 4,
                             .prefix_cache = 1,
                             .dtype = dt,
                             .head_dim = HD};
        kv_cache *kv = kv_cache_create_paged(&c);
        CHECK(kv != NULL, "%s cache", kern_kv_dtype_name(dt));
        if (!kv)
            continue;
        CHECK(kv_cache_dtype(kv) == dt &&
                  kv_cache_bytes(kv) == kv_cache_pool_bytes_kv(dt, L, D, HD, BS, 8) &&
                  kv_cache_bytes(kv) == 2 * L * 8 * kern_kv_layer_block_bytes(dt, D, HD, BS) &&
                  kv_cache_copy_bytes(kv, 1) == kern_kv_layer_block_bytes(dt, D, HD, BS),
              "%s: the bytes are the dtype's layer-blocks", kern_kv_dtype_name(dt));
        CHECK(kv_cache_seq_grow(kv, 0, 6) == 0, "grow");
        float k[64], v[64];
        for (int l = 0; l < L; l++) {
            kern_kv_view w;
            CHECK(kv_cache_view(kv, l, 0, &w) == 0 && w.kq && w.vq && !w.k && !w.k16 &&
                      w.dtype == dt && w.scale_off == kern_kv_scale_off(dt, D, BS),
                  "%s view", kern_kv_dtype_name(dt));
            for (int p = 0; p < 6; p++) {
                for (int d = 0; d < D; d++) {
                    k[d] = (float)(1 + 10 * l + p) * sinf((float)(d + 1));
                    v[d] = -(float)(1 + 10 * l + p) * cosf((float)(d + 1));
                }
                kern_kv_store(&w, p, k, v, D, HD);
            }
        }
        kv_cache_seq_set_pos(kv, 0, 6);
        CHECK(kv_cache_seq_fork(kv, 1, 0, 6) == 0 && kv_cache_seq_grow(kv, 1, 1) == 0,
              "fork + grow");
        CHECK(stats(kv).cow_copies == 1 &&
                  kv_cache_seq_blocks(kv, 1)[1] != kv_cache_seq_blocks(kv, 0)[1],
              "%s: partial block copied", kern_kv_dtype_name(dt));
        /* Attention of one query over each slot reads every value: the same
         * floats in both, so the same output bits. */
        int bad = 0;
        for (int l = 0; l < L; l++) {
            kern_kv_view a, b;
            kv_cache_view(kv, l, 0, &a);
            kv_cache_view(kv, l, 1, &b);
            float q[32], oa[32], ob[32], scratch[8];
            for (int d = 0; d < HD; d++)
                q[d] = cosf((float)d);
            for (int g = 0; g < NK; g++) {
                kern_attention_head_ref(oa, q, &a, g, 6, HD, 0.2f, scratch);
                kern_attention_head_ref(ob, q, &b, g, 6, HD, 0.2f, scratch);
                bad += memcmp(oa, ob, sizeof oa) != 0;
            }
        }
        CHECK(bad == 0, "%s: the copy holds the source's codes and scales (%d differ)",
              kern_kv_dtype_name(dt), bad);
        CHECK(kv_cache_check(kv) == 0, "invariants");
        kv_cache_free(kv);
    }
    /* q8_0 groups of 32 must lie within a head: heads of 8 are refused. */
    kv_cache_config bad8 = {.n_layers = 1,
                            .kv_dim = 32,
                            .block_size = 4,
                            .n_blocks = 4,
                            .max_seqs = 1,
                            .max_seq_blocks = 4,
                            .dtype = KERN_KV_Q8_0,
                            .head_dim = 8};
    kv_cache_shape sh;
    CHECK(kv_cache_create_paged(&bad8) == NULL && kv_cache_shape_of(&bad8, &sh) == BRISK_EINVAL,
          "q8_0 with heads of 8 refused");
}

/* ---- external storage ----------------------------------------------------------
 * The CUDA backend keeps K/V in a device pool: the cache keeps only the books
 * and asks the owner to copy rows on copy-on-write. Here the "pool" is a
 * record of the copies asked for. */

typedef struct ext_copy {
    int n;
    int32_t dst[8], src[8];
    int rows[8];
} ext_copy;

static void ext_copy_rows(void *ctx, int32_t dst, int32_t src, int n_rows) {
    ext_copy *c = ctx;
    if (c->n < 8) {
        c->dst[c->n] = dst;
        c->src[c->n] = src;
        c->rows[c->n] = n_rows;
    }
    c->n++;
}

static void test_external(void) {
    ext_copy rec = {0};
    kv_cache_config cfg = {.n_layers = 2,
                           .kv_dim = 8,
                           .block_size = 4,
                           .n_blocks = 8,
                           .max_seqs = 3,
                           .max_seq_blocks = 4,
                           .prefix_cache = 1,
                           .f16 = 1,
                           .copy_rows = ext_copy_rows,
                           .copy_ctx = &rec};
    kv_cache *kv = kv_cache_create_paged(&cfg);
    CHECK(kv != NULL, "external create");
    if (!kv)
        return;
    kern_kv_view v;
    CHECK(kv_cache_view(kv, 1, 0, &v) == 0 && !v.k && !v.v && !v.k16 && !v.v16 &&
              v.block_size == 4 && v.row_stride == 8 && v.block_stride == 32,
          "external view: no host pointers, the layout's strides");
    CHECK(kv_cache_bytes(kv) == kv_cache_pool_bytes_dtype(2, 8, 4, 8, 1),
          "external bytes are the device pool's");
    int32_t S[8] = {1, 2, 3, 4, 5, 6};
    CHECK(kv_cache_seq_grow(kv, 0, 6) == 0, "grow source");
    kv_cache_seq_set_pos(kv, 0, 6);
    CHECK(kv_cache_seq_fork(kv, 1, 0, 6) == 0 && rec.n == 0, "fork: shared, no copy yet");
    int32_t part = kv_cache_seq_blocks(kv, 0)[1];
    CHECK(kv_cache_seq_grow(kv, 1, 1) == 0, "grow the fork");
    int32_t mine = kv_cache_seq_blocks(kv, 1)[1];
    CHECK(rec.n == 1 && rec.src[0] == part && rec.dst[0] == mine && mine != part &&
              rec.rows[0] == 2,
          "copy-on-write asks the owner for rows 0..1 of the partial block (%d copies)", rec.n);
    CHECK(stats(kv).cow_copies == 1 && kv_cache_check(kv) == 0, "books consistent");
    kv_cache_seq_commit(kv, 0, S, 6);
    kv_cache_seq_release(kv, 0);
    kv_cache_seq_release(kv, 1);
    CHECK(stats(kv).blocks_used == 0 && kv_cache_check(kv) == 0, "released");
    kv_cache_free(kv);
}

int main(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    test_quantized();
    test_bad_config();
    test_allocator();
    test_fixed_layout();
    test_prefix();
    test_lru();
    test_duplicate();
    test_fork_cow();
    test_stats();
    test_stress();
    test_f16();
    test_external();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("test_kv_cache: %.3f s\n",
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return BT_SUMMARY("test_kv_cache");
}
