/* test_kv_parts.c - the KV cache's parts through their own functions
 * (kv/kv_internal.h), below the public API test_kv_cache.c drives: the
 * pool's block states (free stack order, LRU of cached blocks, eviction,
 * fill accounting) and its storage (bytes per block, the view's pointers,
 * the copy of a block's rows); the prefix index's hash (pinned: it must not
 * depend on the host), its keys, and its table under collisions (linear
 * probing, backward-shift deletion, wrap-around). */
#include <stdint.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kv/kv_internal.h"

static kv_cache *make(int n_layers, int kv_dim, int block_size, int n_blocks, int f16) {
    kv_cache_config cfg = {.n_layers = n_layers,
                           .kv_dim = kv_dim,
                           .block_size = block_size,
                           .n_blocks = n_blocks,
                           .max_seqs = 2,
                           .max_seq_blocks = 4,
                           .prefix_cache = 1,
                           .f16 = f16};
    return kv_cache_create_paged(&cfg);
}

static kv_cache_stats stats(const kv_cache *kv) {
    kv_cache_stats st;
    kv_cache_get_stats(kv, &st);
    return st;
}

static void test_pool_states(void) {
    kv_cache *kv = make(1, 2, 4, 4, 0);
    CHECK(kv != NULL, "create");
    if (!kv)
        return;
    int32_t tok[4] = {7, 8, 9, 10};
    /* The free stack hands blocks out 0, 1, 2, ... and takes a freed one
     * back on top. */
    int32_t a = kv_pool_alloc(kv), b = kv_pool_alloc(kv), c = kv_pool_alloc(kv);
    CHECK(a == 0 && b == 1 && c == 2 && kv_cache_n_available(kv) == 1, "fresh blocks in order");
    kv_pool_unref(kv, b);
    CHECK(kv_cache_n_available(kv) == 2 && kv_pool_alloc(kv) == b,
          "a freed block comes back first");
    /* Fill: counted while used, never lowered, reset when freed. */
    kv_pool_set_fill(kv, a, 3);
    kv_pool_set_fill(kv, a, 1);
    CHECK(kv->pool.fill[a] == 3 && stats(kv).slots_filled == 3, "fill raised, never lowered");
    kv_pool_ref(kv, a);
    kv_pool_unref(kv, a);
    CHECK(kv->pool.ref[a] == 1 && stats(kv).slots_filled == 3, "a second holder and back");
    /* A registered block at ref 0 is cached (the LRU), not free; a ref
     * takes it out again with its fill. */
    kv_prefix_register(kv, a, 0, 111, KV_HASH_ROOT, tok);
    kv_prefix_register(kv, c, 0, 222, KV_HASH_ROOT, tok);
    kv_pool_unref(kv, c);
    kv_pool_unref(kv, a);
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_cached == 2 && st.blocks_free == 1 && st.blocks_used == 1 &&
              st.slots_filled == 0 && kv->pool.lru_head == c && kv->pool.lru_tail == a,
          "released registered blocks are cached, oldest first (%d cached)", st.blocks_cached);
    kv_pool_ref(kv, c);
    CHECK(kv->pool.lru_head == a && stats(kv).slots_filled == 4 && kv_prefix_has(kv, c),
          "a cached block used again leaves the LRU with its fill");
    kv_pool_unref(kv, c); /* now newest: a is evicted first */
    /* Eviction: the free block first, then the LRU head, unregistered. */
    int32_t d = kv_pool_alloc(kv);
    CHECK(d == 3 && stats(kv).evictions == 0, "the free block before any eviction");
    int32_t e = kv_pool_alloc(kv);
    CHECK(e == a && !kv_prefix_has(kv, a) && kv_prefix_find(kv, 111) == KV_NONE &&
              kv->pool.fill[e] == 0 && stats(kv).evictions == 1 && kv_prefix_find(kv, 222) == c,
          "the LRU head evicted and unregistered");
    /* Every block back: the books are consistent again. */
    kv_pool_unref(kv, b);
    kv_pool_unref(kv, d);
    kv_pool_unref(kv, e);
    st = stats(kv);
    CHECK(st.blocks_used == 0 && st.blocks_cached == 1 && st.blocks_free == 3 &&
              kv_cache_check(kv) == 0,
          "all released: consistent");
    kv_cache_free(kv);
}

static void test_pool_storage(void) {
    /* Bytes: one rule for a block and for the pool, f16 half of f32. */
    kv_cache_config cfg = {.n_layers = 3, .kv_dim = 8, .block_size = 4, .f16 = 0};
    CHECK(kv_pool_block_bytes(&cfg, 3) == 2 * 4 * 3 * 8 * 4 &&
              kv_pool_block_bytes(&cfg, 3) == kv_cache_pool_bytes_dtype(3, 8, 4, 1, 0),
          "f32 block bytes");
    cfg.f16 = 1;
    CHECK(kv_pool_block_bytes(&cfg, 3) == 2 * 2 * 3 * 8 * 4 &&
              kv_cache_pool_bytes_dtype(3, 8, 4, 10, 1) * 2 == kv_cache_pool_bytes(3, 8, 4, 10),
          "f16 block bytes");
    CHECK(kv_pool_block_bytes(&cfg, 0) == 0, "no layers: 0");
    kv_cache_config huge = {
        .n_layers = 1 << 30, .kv_dim = 1 << 30, .block_size = 1 << 20, .n_blocks = 1 << 20};
    CHECK(!kv_pool_fits(&huge) && kv_pool_block_bytes(&huge, huge.n_layers) == 0,
          "sizes past a size_t refused");
    for (int f16 = 0; f16 <= 1; f16++) {
        kv_cache *kv = make(2, 8, 4, 6, f16);
        CHECK(kv != NULL, "create f16=%d", f16);
        if (!kv)
            continue;
        size_t elem = f16 ? 2 : 4;
        CHECK(kv->pool.dtype == (f16 ? KERN_KV_F16 : KERN_KV_F32) &&
                  kv->pool.unit == kern_kv_unit_bytes(kv->pool.dtype) && kv->pool.unit == elem,
              "the element is a row of the KV dtype table (f16=%d)", f16);
        CHECK(kv_cache_bytes(kv) == 2 * elem * 2 * 6 * 4 * 8, "pool bytes f16=%d", f16);
        kern_kv_view w;
        memset(&w, 0, sizeof w);
        kv_pool_view(kv, 1, &w);
        CHECK((f16 ? !w.k && !w.v && w.k16 && w.v16 : w.k && w.v && !w.k16 && !w.v16) &&
                  w.block_stride == 4 * 8 && w.row_stride == 8,
              "view pointers by element type f16=%d", f16);
        /* Copy rows 0..2 of block 1 into block 4 in every layer, K and V;
         * row 3 stays as it was. */
        unsigned char *base[2] = {kv->pool.k, kv->pool.v};
        size_t row = 8 * elem, blk = 4 * row;
        for (int l = 0; l < 2; l++)
            for (int kvv = 0; kvv < 2; kvv++) {
                unsigned char *layer = base[kvv] + kv->pool.layer_base[l] * elem;
                for (size_t i = 0; i < blk; i++)
                    layer[1 * blk + i] = (unsigned char)(1 + l + 2 * kvv + i);
            }
        kv_pool_copy_rows(kv, 0, 4, 1, 3);
        int ok = 1;
        for (int l = 0; l < 2; l++)
            for (int kvv = 0; kvv < 2; kvv++) {
                unsigned char *layer = base[kvv] + kv->pool.layer_base[l] * elem;
                ok &= memcmp(layer + 4 * blk, layer + 1 * blk, 3 * row) == 0;
                for (size_t i = 3 * row; i < blk; i++)
                    ok &= layer[4 * blk + i] == 0;
            }
        CHECK(ok, "copy of rows 0..2, every layer, K and V (f16=%d)", f16);
        kv_cache_free(kv);
    }
}

static void test_prefix_hash(void) {
    int32_t tok[4] = {1, 2, 3, -1};
    uint64_t h = kv_prefix_hash(KV_HASH_ROOT, tok, 4);
    /* Pinned: the value is part of the cache's contract that a hash names a
     * prefix the same way on every host (little-endian bytes, no pointers). */
    CHECK(h == 0xce71be1f35961562ull, "pinned hash: %016llx", (unsigned long long)h);
    CHECK(kv_prefix_hash(KV_HASH_ROOT, tok, 4) == h, "deterministic");
    CHECK(kv_prefix_hash(KV_HASH_ROOT + 2, tok, 4) != h, "depends on the parent");
    tok[3] = -2;
    CHECK(kv_prefix_hash(KV_HASH_ROOT, tok, 4) != h, "depends on the tokens");
    CHECK(kv_prefix_key(h, 0) == h && kv_prefix_key(kv_prefix_key(h, 5), 5) == h &&
              kv_prefix_key(h, 1) != kv_prefix_key(h, 2),
          "group keys: group 0 the hash itself, distinct, self-inverse");
}

static void test_prefix_table(void) {
    /* 8 blocks: a table of 16 entries (mask 15). Keys share their home
     * entry (the low 4 bits) to force probe chains; home 15 wraps to 0. */
    kv_cache *kv = make(1, 2, 4, 8, 0);
    CHECK(kv != NULL && kv->prefix.ht_mask == 15, "create: 16-entry table");
    if (!kv)
        return;
    int32_t tok[4] = {4, 5, 6, 7}, other[4] = {4, 5, 6, 8};
    uint64_t keys[8];
    int32_t ids[8];
    for (int i = 0; i < 8; i++) {
        ids[i] = kv_pool_alloc(kv);
        keys[i] = ((uint64_t)(i + 1) << 32) | (i < 5 ? 14u : 15u); /* 5 at 14, 3 at 15 */
        kv_prefix_register(kv, ids[i], 0, keys[i], KV_HASH_ROOT, tok);
    }
    int found = 1;
    for (int i = 0; i < 8; i++)
        found &= kv_prefix_find(kv, keys[i]) == ids[i];
    CHECK(found && kv_prefix_check(kv) == 0, "every key found along its probe chain");
    CHECK(kv_prefix_find(kv, ((uint64_t)99 << 32) | 14u) == KV_NONE, "an absent key");
    /* Remove from the middle of the chains, then from their heads: each
     * removal shifts the later entries back without losing one. */
    static const int order[8] = {2, 6, 0, 5, 7, 1, 4, 3};
    for (int r = 0; r < 8; r++) {
        kv_prefix_unregister(kv, ids[order[r]]);
        int ok = kv_prefix_check(kv) == 0 && kv_prefix_find(kv, keys[order[r]]) == KV_NONE;
        for (int j = r + 1; j < 8; j++)
            ok &= kv_prefix_find(kv, keys[order[j]]) == ids[order[j]];
        CHECK(ok, "after removing key %d the others are all found", order[r]);
    }
    /* Lookup compares group, parent and tokens, not only the key. */
    uint64_t h = kv_prefix_hash(KV_HASH_ROOT, tok, 4);
    kv_prefix_register(kv, ids[0], 0, kv_prefix_key(h, 0), KV_HASH_ROOT, tok);
    CHECK(kv_prefix_lookup(kv, 0, h, KV_HASH_ROOT, tok) == ids[0], "lookup finds the block");
    CHECK(kv_prefix_lookup(kv, 0, h, KV_HASH_ROOT, other) == KV_NONE,
          "same key, other tokens: no match");
    CHECK(kv_prefix_lookup(kv, 0, h, KV_HASH_ROOT + 2, tok) == KV_NONE,
          "same key, other parent: no match");
    CHECK(kv_prefix_lookup(kv, 1, h, KV_HASH_ROOT, tok) == KV_NONE, "other group: no match");
    for (int i = 0; i < 8; i++)
        kv_pool_unref(kv, ids[i]);
    CHECK(kv_cache_check(kv) == 0 && stats(kv).blocks_cached == 1, "consistent at the end");
    kv_cache_free(kv);
}

int main(void) {
    test_pool_states();
    test_pool_storage();
    test_prefix_hash();
    test_prefix_table();
    return BT_SUMMARY("test_kv_parts");
}
