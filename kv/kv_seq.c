/* kv_seq.c - the KV cache's sequence slots (kv_internal.h): each slot's
 * block tables (one per layer group) and positions, and the operations on
 * them: grow (copy-on-write of a shared partial block, the window trim,
 * fresh blocks), set_pos, commit (registering full blocks in the prefix
 * index), release and fork. Blocks come from and go back to the pool
 * (kv_pool.c); kv_cache_seq_match is the prefix index's (kv_prefix.c). */
#include <limits.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kv/kv_internal.h"

int kv_seq_init(kv_cache *kv) {
    const kv_cache_config *cfg = &kv->cfg;
    kv_seqs *q = &kv->seqs;
    size_t n_table;
    if (!kv_mul((size_t)cfg->max_seqs, (size_t)cfg->max_seq_blocks, &n_table) ||
        !kv_mul(n_table, (size_t)kv->n_groups, &n_table))
        return BRISK_ERANGE;
    q->slots = kv_calloc((size_t)cfg->max_seqs, sizeof *q->slots);
    q->tables = kv_calloc(n_table, sizeof *q->tables);
    q->trims = kv_calloc((size_t)cfg->max_seqs * (size_t)kv->n_groups, sizeof *q->trims);
    if (!q->slots || !q->tables || !q->trims)
        return BRISK_ENOMEM;
    for (int s = 0; s < cfg->max_seqs; s++) {
        q->slots[s].table =
            q->tables + (size_t)s * (size_t)kv->n_groups * (size_t)cfg->max_seq_blocks;
        q->slots[s].trim = q->trims + (size_t)s * (size_t)kv->n_groups;
        q->slots[s].chain = KV_HASH_ROOT;
    }
    return 0;
}

void kv_seq_free(kv_cache *kv) {
    kv_seqs *q = &kv->seqs;
    free(q->slots);
    free(q->tables);
    free(q->trims);
    memset(q, 0, sizeof *q);
}

/* ---- accessors ------------------------------------------------------------ */

int kv_cache_seq_capacity(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->seqs.slots[seq].n_blocks * kv->cfg.block_size;
}

int kv_cache_seq_n_pos(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->seqs.slots[seq].n_pos;
}

int kv_cache_seq_n_blocks(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->seqs.slots[seq].n_blocks;
}

const int32_t *kv_cache_seq_blocks(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return NULL;
    return kv->seqs.slots[seq].table;
}

const int32_t *kv_cache_seq_table(const kv_cache *kv, int seq, int group) {
    if (kv_bad_seq(kv, seq) || group < 0 || group >= kv->n_groups)
        return NULL;
    return kv_table(kv, &kv->seqs.slots[seq], group);
}

/* ---- grow ----------------------------------------------------------------- */

/* Whether a slot must copy its block id before writing into it: another
 * slot shares it, or it is registered (a slot holding its own registered
 * block writes into it only after set_pos moved n_pos back into it, and a
 * cached prefix must not change under its hash). */
static int kv_must_copy(const kv_cache *kv, int32_t id) {
    return kv->pool.ref[id] > 1 || kv_prefix_has(kv, id);
}

/* Blocks grow takes for n_new more positions, net of what the window groups
 * release first, or BRISK_ERANGE. cap: count a window group at most at what
 * it holds at once (the estimate for a whole prompt). Normally at most one
 * held block per group lies in the range: the partly-filled last one. */
static int kv_grow_need(const kv_cache *kv, const kv_slot *s, int n_new, int cap, long *out) {
    long long bs = kv->cfg.block_size;
    long long need = ((long long)s->n_pos + n_new + bs - 1) / bs;
    if (need > kv->cfg.max_seq_blocks)
        return BRISK_ERANGE;
    long n_add = need > s->n_blocks ? (long)need - s->n_blocks : 0, total = 0;
    for (int g = 0; g < kv->n_groups; g++) {
        const int32_t *t = kv_table(kv, s, g);
        long n = n_add;
        for (int b = s->n_pos / (int)bs; b < s->n_blocks && b < need; b++)
            n += kv_must_copy(kv, t[b]);
        int w = kv->group_window[g];
        if (w > 0) { /* blocks trim will release: the ones no other slot holds */
            int lo = kv_first_seen(w, s->n_pos, (int)bs);
            for (int b = s->trim[g]; b < lo && b < s->n_blocks; b++)
                n -= t[b] != kv->pool.hole && kv->pool.ref[t[b]] == 1;
            long held = kv_window_held(&kv->cfg, w);
            if (cap && n_new > kv->cfg.max_grow && n > held)
                n = held;
        }
        total += n;
    }
    *out = total;
    return 0;
}

int kv_cache_seq_blocks_needed(const kv_cache *kv, int seq, int n_new) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    if (n_new < 0)
        return BRISK_EINVAL;
    if (n_new == 0)
        return 0;
    long n;
    int rc = kv_grow_need(kv, &kv->seqs.slots[seq], n_new, 1, &n);
    return rc < 0 ? rc : n > INT_MAX ? INT_MAX : (int)n;
}

/* Gives slot s a private copy of its block b in group g: the rows below
 * n_pos of every layer of the group, K and V. Rows past n_pos are not
 * copied: nothing reads them before this slot writes them. */
static void kv_cow(kv_cache *kv, kv_slot *s, int g, int b) {
    int32_t *t = kv_table(kv, s, g);
    int32_t old = t[b], id = kv_pool_alloc(kv);
    int bs = kv->cfg.block_size, rows = s->n_pos - b * bs;
    rows = rows < 0 ? 0 : rows > bs ? bs : rows;
    kv_pool_copy_rows(kv, g, id, old, rows);
    kv_pool_set_fill(kv, id, rows);
    t[b] = id;
    kv_pool_unref(kv, old);
    kv->seqs.cow_copies++;
}

/* Releases the window groups' blocks that no query at n_pos or later sees
 * (their entries point at the zero block from then on). */
static void kv_trim(kv_cache *kv, kv_slot *s) {
    for (int g = 0; g < kv->n_groups; g++) {
        int w = kv->group_window[g];
        if (w <= 0)
            continue;
        int32_t *t = kv_table(kv, s, g);
        int lo = kv_first_seen(w, s->n_pos, kv->cfg.block_size);
        for (; s->trim[g] < lo && s->trim[g] < s->n_blocks; s->trim[g]++) {
            int32_t id = t[s->trim[g]];
            if (id != kv->pool.hole) {
                kv_pool_unref(kv, id);
                t[s->trim[g]] = kv->pool.hole;
                kv->seqs.window_released++;
            }
        }
    }
}

int kv_cache_seq_grow(kv_cache *kv, int seq, int n_new) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    if (n_new < 0)
        return BRISK_EINVAL;
    kv_slot *s = &kv->seqs.slots[seq];
    long need;
    int rc = kv_grow_need(kv, s, n_new, 0, &need);
    if (rc < 0)
        return rc;
    if (need > kv_cache_n_available(kv))
        return BRISK_ENOSPC;
    if (n_new == 0)
        return 0;
    kv_trim(kv, s);
    int bs = kv->cfg.block_size, n_need = (s->n_pos + n_new + bs - 1) / bs;
    for (int g = 0; g < kv->n_groups; g++) {
        int32_t *t = kv_table(kv, s, g);
        for (int b = s->n_pos / bs; b < s->n_blocks && b < n_need; b++)
            if (kv_must_copy(kv, t[b]))
                kv_cow(kv, s, g, b);
        for (int b = s->n_blocks; b < n_need; b++)
            t[b] = kv_pool_alloc(kv);
    }
    if (n_need > s->n_blocks)
        s->n_blocks = n_need;
    return 0;
}

/* ---- positions and commits ------------------------------------------------ */

void kv_cache_seq_set_pos(kv_cache *kv, int seq, int n_pos) {
    if (kv_bad_seq(kv, seq))
        return;
    kv_slot *s = &kv->seqs.slots[seq];
    int bs = kv->cfg.block_size;
    if (n_pos < 0 || n_pos > s->n_blocks * bs)
        return;
    for (int g = 0; g < kv->n_groups; g++) /* a released block would be needed again */
        if (kv->group_window[g] > 0 && kv_first_seen(kv->group_window[g], n_pos, bs) < s->trim[g])
            return;
    /* Blocks below the old n_pos already have their fill (each call and each
     * way a slot gets blocks keeps fill >= rows covered); only the new ones
     * need it. */
    for (int g = 0; g < kv->n_groups; g++) {
        const int32_t *t = kv_table(kv, s, g);
        for (int b = s->n_pos / bs; b * bs < n_pos; b++)
            kv_pool_set_fill(kv, t[b], n_pos - b * bs < bs ? n_pos - b * bs : bs);
    }
    /* Moving back into checked blocks: they may be rewritten, so commit
     * starts over (registered blocks are skipped again in O(1) each). */
    if (n_pos < s->n_checked * bs) {
        s->n_checked = 0;
        s->chain = KV_HASH_ROOT;
    }
    s->n_pos = n_pos;
}

void kv_cache_seq_commit(kv_cache *kv, int seq, const int32_t *tokens, int n) {
    if (kv_bad_seq(kv, seq) || !kv->cfg.prefix_cache || !tokens || n <= 0)
        return;
    kv_slot *s = &kv->seqs.slots[seq];
    int bs = kv->cfg.block_size;
    int32_t hole = kv->pool.hole;
    if (n > s->n_pos)
        n = s->n_pos;
    for (; s->n_checked < n / bs; s->n_checked++) {
        const int32_t *tok = tokens + (size_t)s->n_checked * (size_t)bs;
        /* A block registered already (shared by a fork or a match) names the
         * prefix; else it is hashed. */
        uint64_t h = 0;
        int known = 0;
        for (int g = 0; g < kv->n_groups && !known; g++) {
            int32_t id = kv_table(kv, s, g)[s->n_checked];
            if (id != hole && kv_prefix_has(kv, id)) {
                h = kv_prefix_key(kv->prefix.hash[id], g);
                known = 1;
            }
        }
        if (!known)
            h = kv_prefix_hash(s->chain, tok, bs);
        for (int g = 0; g < kv->n_groups; g++) {
            int32_t id = kv_table(kv, s, g)[s->n_checked];
            /* Released (a window group), registered, or the same prefix
             * computed by another slot (or a 64-bit collision): keep the
             * registered one; this block stays private and is freed when
             * released. */
            uint64_t key = kv_prefix_key(h, g);
            if (id == hole || kv_prefix_has(kv, id) || kv_prefix_find(kv, key) != KV_NONE)
                continue;
            kv_prefix_register(kv, id, g, key, s->chain, tok);
        }
        s->chain = h;
    }
}

/* ---- release and fork ----------------------------------------------------- */

int kv_cache_seq_shrink(kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return 0;
    kv_slot *s = &kv->seqs.slots[seq];
    int bs = kv->cfg.block_size, keep = (s->n_pos + bs - 1) / bs, n = 0;
    /* Last block first, as release does. A block past n_pos is never behind
     * a window (the trim stops below n_pos), so no entry is the zero block. */
    while (s->n_blocks > keep) {
        s->n_blocks--;
        for (int g = kv->n_groups - 1; g >= 0; g--) {
            int32_t id = kv_table(kv, s, g)[s->n_blocks];
            if (id != kv->pool.hole)
                kv_pool_unref(kv, id);
        }
        n++;
    }
    return n;
}

void kv_cache_seq_release(kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return;
    kv_slot *s = &kv->seqs.slots[seq];
    /* Last block first: the tail of a prefix becomes older in the LRU than
     * its head, so eviction eats prefixes from the end and the head, shared
     * by more prompts, stays matchable longest. */
    while (s->n_blocks > 0) {
        s->n_blocks--;
        for (int g = kv->n_groups - 1; g >= 0; g--) {
            int32_t id = kv_table(kv, s, g)[s->n_blocks];
            if (id != kv->pool.hole)
                kv_pool_unref(kv, id);
        }
    }
    for (int g = 0; g < kv->n_groups; g++)
        s->trim[g] = 0;
    s->n_pos = 0;
    s->n_checked = 0;
    s->chain = KV_HASH_ROOT;
}

int kv_cache_seq_fork(kv_cache *kv, int dst, int src, int n_pos) {
    if (kv_bad_seq(kv, dst) || kv_bad_seq(kv, src))
        return BRISK_ERANGE;
    kv_slot *d = &kv->seqs.slots[dst];
    const kv_slot *s = &kv->seqs.slots[src];
    if (dst == src || d->n_blocks != 0)
        return BRISK_EINVAL;
    if (n_pos < 0 || n_pos > s->n_pos)
        return BRISK_ERANGE;
    int bs = kv->cfg.block_size;
    for (int g = 0; g < kv->n_groups; g++)
        if (kv->group_window[g] > 0 && kv_first_seen(kv->group_window[g], n_pos, bs) < s->trim[g])
            return BRISK_ENOTFOUND; /* src released blocks dst would see */
    for (int b = 0; b * bs < n_pos; b++) {
        for (int g = 0; g < kv->n_groups; g++) {
            int w = kv->group_window[g];
            int32_t id = kv_table(kv, s, g)[b];
            if (w > 0 && b < kv_first_seen(w, n_pos, bs))
                id = kv->pool.hole;
            if (id != kv->pool.hole)
                kv_pool_ref(kv, id);
            kv_table(kv, d, g)[b] = id;
        }
        d->n_blocks++;
    }
    for (int g = 0; g < kv->n_groups; g++)
        d->trim[g] = kv->group_window[g] > 0 ? kv_first_seen(kv->group_window[g], n_pos, bs) : 0;
    d->n_pos = n_pos;
    /* The source's commit cursor carries over when it lies within the fork. */
    if (s->n_checked * bs <= n_pos) {
        d->n_checked = s->n_checked;
        d->chain = s->chain;
    }
    return 0;
}

/* ---- invariants ------------------------------------------------------------ */

int kv_seq_check(const kv_cache *kv, int32_t *count) {
    int bs = kv->cfg.block_size;
    for (int q = 0; q < kv->cfg.max_seqs; q++) {
        const kv_slot *s = &kv->seqs.slots[q];
        if (s->n_blocks < 0 || s->n_blocks > kv->cfg.max_seq_blocks || s->n_pos < 0 ||
            s->n_pos > s->n_blocks * bs || s->n_checked < 0 || s->n_checked > s->n_blocks ||
            s->n_checked * bs > s->n_pos)
            return KV_BAD_SLOT;
        for (int g = 0; g < kv->n_groups; g++) {
            const int32_t *t = kv_table(kv, s, g);
            int w = kv->group_window[g];
            if (s->trim[g] < 0 || (w <= 0 && s->trim[g] != 0) ||
                (w > 0 && s->n_blocks > 0 && s->trim[g] > kv_first_seen(w, s->n_pos, bs)))
                return KV_BAD_TRIM;
            for (int b = 0; b < s->n_blocks; b++) {
                int32_t id = t[b];
                if ((id == kv->pool.hole) != (b < s->trim[g]))
                    return KV_BAD_TRIM;
                if (id == kv->pool.hole)
                    continue;
                if (id < 0 || id >= kv->cfg.n_blocks)
                    return KV_BAD_SLOT;
                count[id]++;
                int rows = s->n_pos - b * bs;
                if (rows > 0 && kv->pool.fill[id] < (rows < bs ? rows : bs))
                    return KV_BAD_FILL;
            }
        }
    }
    return 0;
}
