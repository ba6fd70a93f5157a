/* kv_prefix.c - the KV cache's prefix index (kv_internal.h): which full
 * blocks hold which prefix, and kv_cache_seq_match, which attaches them to
 * a new prompt.
 *
 * A registered block is keyed by a 64-bit chained hash (its tokens hashed
 * with the hash of the block before it, so a hash names a whole prefix),
 * mixed with its layer group. The index maps keys to block ids through an
 * open-addressing table with linear probing and backward-shift deletion;
 * the table stores only block ids, an entry's key is the one kept in the
 * block's metadata. A lookup compares the parent chain and the tokens too,
 * so a 64-bit collision costs a miss, never a wrong match. */
#include <assert.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kv/kv_internal.h"

int kv_prefix_init(kv_cache *kv) {
    const kv_cache_config *cfg = &kv->cfg;
    kv_prefix *x = &kv->prefix;
    size_t nb = (size_t)cfg->n_blocks, n_tokens;
    if (!kv_mul(nb, (size_t)cfg->block_size, &n_tokens))
        return BRISK_ERANGE;
    size_t ht_cap = 1;
    while (ht_cap < 2 * nb)
        ht_cap *= 2; /* n_blocks <= INT_MAX: no overflow */
    x->registered = kv_calloc(nb, sizeof *x->registered);
    x->group = kv_calloc(nb, sizeof *x->group);
    x->hash = kv_calloc(nb, sizeof *x->hash);
    x->parent = kv_calloc(nb, sizeof *x->parent);
    x->tokens = kv_calloc(n_tokens, sizeof *x->tokens);
    x->ht = kv_calloc(ht_cap, sizeof *x->ht);
    x->match_hash = kv_calloc((size_t)cfg->max_seq_blocks, sizeof *x->match_hash);
    if (!x->registered || !x->group || !x->hash || !x->parent || !x->tokens || !x->ht ||
        !x->match_hash)
        return BRISK_ENOMEM;
    x->ht_mask = ht_cap - 1;
    for (size_t i = 0; i < ht_cap; i++)
        x->ht[i] = KV_NONE;
    return 0;
}

void kv_prefix_free(kv_cache *kv) {
    kv_prefix *x = &kv->prefix;
    free(x->registered);
    free(x->group);
    free(x->hash);
    free(x->parent);
    free(x->tokens);
    free(x->ht);
    free(x->match_hash);
    memset(x, 0, sizeof *x);
}

/* ---- hashing -------------------------------------------------------------- */

/* FNV-1a over the parent hash and the token bytes (little-endian, so the
 * value does not depend on the host), then the splitmix64 finalizer to
 * spread FNV's weak low bits over the whole word (the table indexes by them). */
uint64_t kv_prefix_hash(uint64_t parent, const int32_t *tok, int n) {
    const uint64_t prime = 1099511628211ull;
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((parent >> (8 * i)) & 0xff)) * prime;
    for (int t = 0; t < n; t++) {
        uint32_t u = (uint32_t)tok[t];
        for (int i = 0; i < 4; i++)
            h = (h ^ ((u >> (8 * i)) & 0xff)) * prime;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

/* Distinct per group so that each group's block of one prefix has its own
 * entry; an xor, so the same call undoes it. */
uint64_t kv_prefix_key(uint64_t h, int g) {
    return h ^ ((uint64_t)g * 0xd6e8feb86659fd93ull);
}

/* ---- the table ------------------------------------------------------------ */

int32_t kv_prefix_find(const kv_cache *kv, uint64_t key) {
    const kv_prefix *x = &kv->prefix;
    for (size_t i = (size_t)key & x->ht_mask;; i = (i + 1) & x->ht_mask) {
        int32_t id = x->ht[i];
        if (id == KV_NONE)
            return KV_NONE;
        if (x->hash[id] == key)
            return id;
    }
}

static void kv_ht_insert(kv_prefix *x, int32_t id) {
    size_t i = (size_t)x->hash[id] & x->ht_mask;
    while (x->ht[i] != KV_NONE)
        i = (i + 1) & x->ht_mask;
    x->ht[i] = id;
}

/* Backward-shift deletion: entries after the hole move back into it unless
 * their home slot lies cyclically in (hole, entry], where they must stay. */
static void kv_ht_remove(kv_prefix *x, int32_t id) {
    size_t mask = x->ht_mask, i = (size_t)x->hash[id] & mask;
    while (x->ht[i] != id) {
        assert(x->ht[i] != KV_NONE);
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; x->ht[j] != KV_NONE; j = (j + 1) & mask) {
        size_t home = (size_t)x->hash[x->ht[j]] & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            x->ht[i] = x->ht[j];
            i = j;
        }
    }
    x->ht[i] = KV_NONE;
}

void kv_prefix_register(kv_cache *kv, int32_t id, int g, uint64_t key, uint64_t parent,
                        const int32_t *tok) {
    kv_prefix *x = &kv->prefix;
    int bs = kv->cfg.block_size;
    x->registered[id] = 1;
    x->group[id] = (uint8_t)g;
    x->hash[id] = key;
    x->parent[id] = parent;
    memcpy(x->tokens + (size_t)id * (size_t)bs, tok, (size_t)bs * sizeof *tok);
    kv_pool_set_fill(kv, id, bs);
    kv_ht_insert(x, id);
}

void kv_prefix_unregister(kv_cache *kv, int32_t id) {
    kv_ht_remove(&kv->prefix, id);
    kv->prefix.registered[id] = 0;
}

int32_t kv_prefix_lookup(const kv_cache *kv, int g, uint64_t h, uint64_t parent,
                         const int32_t *tok) {
    const kv_prefix *x = &kv->prefix;
    int bs = kv->cfg.block_size;
    int32_t id = kv_prefix_find(kv, kv_prefix_key(h, g));
    if (id == KV_NONE || x->group[id] != g || x->parent[id] != parent ||
        memcmp(x->tokens + (size_t)id * (size_t)bs, tok, (size_t)bs * sizeof *tok) != 0)
        return KV_NONE;
    return id;
}

/* ---- match ---------------------------------------------------------------- */

int kv_cache_seq_match(kv_cache *kv, int seq, const int32_t *tokens, int n, int max_positions) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    kv_slot *s = &kv->seqs.slots[seq];
    kv_prefix *x = &kv->prefix;
    if (s->n_blocks != 0 || n < 0 || (n > 0 && !tokens))
        return BRISK_EINVAL;
    if (!kv->cfg.prefix_cache)
        return 0;
    int bs = kv->cfg.block_size;
    int limit = max_positions < n ? max_positions : n;
    if (limit > kv->cfg.max_seq_blocks * bs)
        limit = kv->cfg.max_seq_blocks * bs;
    /* The longest run of leading blocks every full-attention group holds... */
    uint64_t chain = KV_HASH_ROOT;
    int m = 0;
    for (; m < limit / bs; m++) {
        const int32_t *tok = tokens + (size_t)m * (size_t)bs;
        uint64_t h = kv_prefix_hash(chain, tok, bs);
        int ok = 1;
        for (int g = 0; g < kv->n_groups && ok; g++)
            ok = kv->group_window[g] > 0 || kv_prefix_lookup(kv, g, h, chain, tok) != KV_NONE;
        if (!ok)
            break;
        x->match_hash[m] = chain = h;
    }
    /* ...cut back until every window group holds the blocks a query right
     * after it sees. */
    int k = m;
    for (int g = 0; g < kv->n_groups; g++) {
        int w = kv->group_window[g];
        for (int b = k - 1; w > 0 && b >= kv_first_seen(w, k * bs, bs); b--) {
            uint64_t parent = b > 0 ? x->match_hash[b - 1] : KV_HASH_ROOT;
            if (kv_prefix_lookup(kv, g, x->match_hash[b], parent,
                                 tokens + (size_t)b * (size_t)bs) == KV_NONE) {
                k = b;
                g = -1; /* every group again at the shorter prefix */
                break;
            }
        }
    }
    for (int b = 0; b < k; b++)
        for (int g = 0; g < kv->n_groups; g++) {
            int w = kv->group_window[g];
            int32_t id = KV_NONE;
            if (w > 0 && b < kv_first_seen(w, k * bs, bs)) {
                id = kv->pool.hole;
            } else {
                uint64_t parent = b > 0 ? x->match_hash[b - 1] : KV_HASH_ROOT;
                id = kv_prefix_lookup(kv, g, x->match_hash[b], parent,
                                      tokens + (size_t)b * (size_t)bs);
                assert(id != KV_NONE); /* found above, and nothing evicted since */
                kv_pool_ref(kv, id);
            }
            kv_table(kv, s, g)[b] = id;
        }
    for (int g = 0; g < kv->n_groups; g++)
        s->trim[g] = kv->group_window[g] > 0 ? kv_first_seen(kv->group_window[g], k * bs, bs) : 0;
    s->n_blocks = k;
    s->n_pos = k * bs;
    s->n_checked = k;
    s->chain = k > 0 ? x->match_hash[k - 1] : KV_HASH_ROOT;
    x->queries += n;
    x->hits += s->n_pos;
    return s->n_pos;
}

/* ---- invariants ------------------------------------------------------------ */

int kv_prefix_check(const kv_cache *kv) {
    const kv_prefix *x = &kv->prefix;
    int n = kv->cfg.n_blocks, n_reg = 0;
    for (int id = 0; id < n; id++) {
        if (!x->registered[id])
            continue;
        n_reg++;
        if (kv_prefix_find(kv, x->hash[id]) != id)
            return KV_BAD_HASH;
        if (kv->pool.fill[id] != kv->cfg.block_size)
            return KV_BAD_FILL;
    }
    size_t n_ht = 0;
    for (size_t i = 0; i <= x->ht_mask; i++) {
        int32_t id = x->ht[i];
        if (id == KV_NONE)
            continue;
        if (id < 0 || id >= n || !x->registered[id])
            return KV_BAD_HASH;
        n_ht++;
    }
    if (n_ht != (size_t)n_reg)
        return KV_BAD_HASH;
    return 0;
}
