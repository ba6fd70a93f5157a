/* kv_cache.c - the paged KV cache: a pool of blocks, per-slot block tables,
 * reference counts, copy-on-write and a prefix cache (see kv_cache.h).
 *
 * Every block is in exactly one of three states:
 *   used    ref > 0; held by one or more slot tables;
 *   cached  ref == 0 and registered: in the LRU list, reusable by a match;
 *   free    ref == 0 and not registered: on the free stack.
 * A fresh block comes from the free stack first, else it is the least
 * recently released cached block (evicted: unregistered on the spot).
 *
 * The prefix cache maps a 64-bit chained hash (a block's tokens hashed with
 * the hash of the block before it) to a block id through an open-addressing
 * table with linear probing and backward-shift deletion. The table stores
 * only block ids; an entry's key is the hash kept in the block's metadata. */
#include "kv/kv_cache.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

#define KV_NONE (-1)
/* The chain value before a slot's first block: an arbitrary odd constant,
 * so that the first block's hash still depends on a "parent". */
#define KV_HASH_ROOT 0x9e3779b97f4a7c15ull
#define KV_DEFAULT_BLOCK 16 /* positions per block of kv_cache_create */
#define KV_MAX_GROUPS 256   /* block tables per slot (at most one per layer) */

typedef struct kv_slot {
    int32_t *table; /* [n_groups][max_seq_blocks]: n_blocks valid entries per group */
    int32_t *trim;  /* [n_groups]: entries below it are released (window groups) */
    int n_blocks;
    int n_pos;
    int n_checked;  /* leading blocks already registered or looked up by commit */
    uint64_t chain; /* hash of block n_checked - 1 (KV_HASH_ROOT for none) */
} kv_slot;

struct kv_cache {
    kv_cache_config cfg;
    int n_groups, layers_per_group;
    int group_window[KV_MAX_GROUPS]; /* 0: full attention */
    int *layer_group;                /* [n_layers] */
    size_t *layer_base;              /* [n_layers]: elements before the layer's rows of block 0 */
    size_t block_floats;             /* block_size * kv_dim: elements of one block in one layer */
    size_t block_stride;             /* elements between consecutive block ids */
    int32_t hole;                    /* the zero block released entries point at (KV_NONE: none) */
    size_t pool_bytes;               /* bytes of K plus V */
    size_t elem;                     /* bytes per element: 4 (f32) or 2 (f16) */
    unsigned char *k, *v;            /* the pool's K and V, laid out as kv_cache.h says */
    void *k_mem, *v_mem;             /* the allocations k and v are 64-byte aligned in */

    /* Per block. */
    int32_t *ref;
    int32_t *fill; /* rows holding a token; 0 for a free block */
    uint8_t *registered;
    uint8_t *group;   /* the group it was registered for */
    uint64_t *hash;   /* valid while registered: the prefix hash mixed with the group */
    uint64_t *parent; /* chain value of the block before it */
    int32_t *tokens;  /* [n_blocks][block_size]: the tokens it was registered with */
    int32_t *lru_prev, *lru_next;
    int lru_head, lru_tail; /* head = released longest ago = evicted first */
    int n_cached;
    int32_t *free_stack;
    int n_free;
    long long filled; /* sum of fill over used blocks */

    int32_t *ht; /* ht_mask + 1 entries: block id or KV_NONE */
    size_t ht_mask;

    kv_slot *slots;
    int32_t *tables;      /* [max_seqs][n_groups][max_seq_blocks] */
    int32_t *trims;       /* [max_seqs][n_groups] */
    uint64_t *match_hash; /* [max_seq_blocks]: kv_cache_seq_match's chain */

    long long prefix_queries, prefix_hits, cow_copies, evictions, window_released;
};

static int32_t *kv_table(const kv_cache *kv, const kv_slot *s, int g) {
    return s->table + (size_t)g * (size_t)kv->cfg.max_seq_blocks;
}

/* The first block a query at position n_pos (or later) of a group with
 * this window sees; 0 for full attention. */
static int kv_first_seen(int window, int n_pos, int bs) {
    int lo = window > 0 ? n_pos - window + 1 : 0;
    return lo > 0 ? lo / bs : 0;
}

/* ---- sizes ---------------------------------------------------------------- */

/* *out = a * b; 0 on overflow. */
static int kv_mul(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

size_t kv_cache_pool_bytes(int n_layers, int kv_dim, int block_size, long n_blocks) {
    return kv_cache_pool_bytes_dtype(n_layers, kv_dim, block_size, n_blocks, 0);
}

size_t kv_cache_pool_bytes_dtype(int n_layers, int kv_dim, int block_size, long n_blocks, int f16) {
    size_t s = 2 * (f16 ? sizeof(uint16_t) : sizeof(float));
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return 0;
    if (!kv_mul(s, (size_t)n_layers, &s) || !kv_mul(s, (size_t)kv_dim, &s) ||
        !kv_mul(s, (size_t)block_size, &s) || !kv_mul(s, (size_t)n_blocks, &s))
        return 0;
    return s;
}

/* ---- grouping ------------------------------------------------------------- */

/* Most blocks a window group holds at once: trimmed to what a query at n_pos
 * sees, then grown by at most max_grow positions. */
static long kv_window_held(const kv_cache_config *cfg, int window) {
    return ((long)window - 1 + cfg->max_grow + cfg->block_size - 1) / cfg->block_size + 1;
}

/* The window layer l is grouped by: its own, or 0 (full attention) where
 * releasing blocks would save nothing or the cache cannot group. */
static int kv_eff_window(const kv_cache_config *cfg, int l) {
    if (!cfg->layer_window || cfg->max_grow <= 0 || cfg->copy_rows)
        return 0;
    int w = cfg->layer_window[l];
    return w > 0 && kv_window_held(cfg, w) < cfg->max_seq_blocks ? w : 0;
}

static int kv_gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Splits the layers into groups (kv_cache.h): layer l goes to group
 * layer_group[l] at index layer_idx[l] (either may be NULL), group g has
 * window group_window[g]; full-attention groups come first. Layers in
 * classes of one window each, every class cut into runs of the gcd of the
 * class sizes. More than KV_MAX_GROUPS groups: one group of every layer,
 * full attention. */
static int kv_plan_groups(const kv_cache_config *cfg, int *layer_group, int *layer_idx,
                          int *group_window, int *n_groups, int *lpg) {
    int n = cfg->n_layers, any = 0;
    for (int l = 0; l < n && !any && cfg->layer_window && cfg->max_grow > 0; l++)
        any = kv_eff_window(cfg, l) > 0;
    if (!any) { /* the common case: one group of every layer, nothing to allocate */
        for (int l = 0; l < n; l++) {
            if (layer_group)
                layer_group[l] = 0;
            if (layer_idx)
                layer_idx[l] = l;
        }
        group_window[0] = 0;
        *n_groups = 1;
        *lpg = n;
        return 0;
    }
    int *cls_w = malloc((size_t)n * sizeof *cls_w), *cls_n = calloc((size_t)n, sizeof *cls_n);
    int *cls_base = malloc((size_t)n * sizeof *cls_base),
        *cls_seen = calloc((size_t)n, sizeof *cls_seen);
    if (!cls_w || !cls_n || !cls_base || !cls_seen) {
        free(cls_w);
        free(cls_n);
        free(cls_base);
        free(cls_seen);
        return BRISK_ENOMEM;
    }
    int n_cls = 1; /* class 0: full attention (maybe empty) */
    cls_w[0] = 0;
    for (int l = 0; l < n; l++) {
        int w = kv_eff_window(cfg, l), c = 0;
        while (c < n_cls && cls_w[c] != w)
            c++;
        if (c == n_cls)
            cls_w[n_cls++] = w;
        cls_n[c]++;
    }
    int g = 0;
    for (int c = 0; c < n_cls; c++)
        g = kv_gcd(g, cls_n[c]);
    int total = 0;
    for (int c = 0; c < n_cls; c++) {
        cls_base[c] = total;
        total += cls_n[c] / g;
    }
    if (total > KV_MAX_GROUPS) { /* no windows: one group */
        n_cls = 1;
        cls_n[0] = g = n;
        total = 1;
        cls_base[0] = 0;
    }
    for (int l = 0; l < n; l++) {
        int w = n_cls == 1 ? cls_w[0] : kv_eff_window(cfg, l), c = 0;
        while (c < n_cls && cls_w[c] != w)
            c++;
        int i = cls_seen[c]++;
        if (layer_group)
            layer_group[l] = cls_base[c] + i / g;
        if (layer_idx)
            layer_idx[l] = i % g;
        group_window[cls_base[c] + i / g] = w;
    }
    *n_groups = total;
    *lpg = g;
    free(cls_w);
    free(cls_n);
    free(cls_base);
    free(cls_seen);
    return 0;
}

static int kv_config_ok(const kv_cache_config *cfg) {
    return cfg && cfg->n_layers > 0 && cfg->kv_dim > 0 && cfg->block_size > 0 &&
           cfg->max_seqs > 0 && cfg->max_seq_blocks > 0 && cfg->max_grow >= 0 &&
           cfg->max_seq_blocks <= INT_MAX / cfg->block_size; /* capacities are ints */
}

int kv_cache_shape_of(const kv_cache_config *cfg, kv_cache_shape *out) {
    int window[KV_MAX_GROUPS];
    if (!out || !kv_config_ok(cfg))
        return BRISK_EINVAL;
    memset(out, 0, sizeof *out);
    int rc = kv_plan_groups(cfg, NULL, NULL, window, &out->n_groups, &out->layers_per_group);
    if (rc < 0)
        return rc;
    for (int g = 0; g < out->n_groups; g++) {
        long held = window[g] > 0 ? kv_window_held(cfg, window[g]) : cfg->max_seq_blocks;
        out->n_window_groups += window[g] > 0;
        out->seq_blocks += held < cfg->max_seq_blocks ? held : cfg->max_seq_blocks;
    }
    out->block_bytes =
        kv_cache_pool_bytes_dtype(out->layers_per_group, cfg->kv_dim, cfg->block_size, 1, cfg->f16);
    return 0;
}

/* ---- hashing -------------------------------------------------------------- */

/* FNV-1a over the parent hash and the token bytes (little-endian, so the
 * value does not depend on the host), then the splitmix64 finalizer to
 * spread FNV's weak low bits over the whole word (the table indexes by them). */
static uint64_t kv_hash_block(uint64_t parent, const int32_t *tok, int n) {
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

/* The key a block of group g is registered under: the prefix hash, made
 * distinct per group (group 0's is the hash itself). */
static uint64_t kv_group_key(uint64_t h, int g) {
    return h ^ ((uint64_t)g * 0xd6e8feb86659fd93ull);
}

static int kv_ht_find(const kv_cache *kv, uint64_t h) {
    for (size_t i = (size_t)h & kv->ht_mask;; i = (i + 1) & kv->ht_mask) {
        int32_t id = kv->ht[i];
        if (id == KV_NONE)
            return KV_NONE;
        if (kv->hash[id] == h)
            return id;
    }
}

static void kv_ht_insert(kv_cache *kv, int32_t id) {
    size_t i = (size_t)kv->hash[id] & kv->ht_mask;
    while (kv->ht[i] != KV_NONE)
        i = (i + 1) & kv->ht_mask;
    kv->ht[i] = id;
}

/* Backward-shift deletion: entries after the hole move back into it unless
 * their home slot lies cyclically in (hole, entry], where they must stay. */
static void kv_ht_remove(kv_cache *kv, int32_t id) {
    size_t mask = kv->ht_mask, i = (size_t)kv->hash[id] & mask;
    while (kv->ht[i] != id) {
        assert(kv->ht[i] != KV_NONE);
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; kv->ht[j] != KV_NONE; j = (j + 1) & mask) {
        size_t home = (size_t)kv->hash[kv->ht[j]] & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            kv->ht[i] = kv->ht[j];
            i = j;
        }
    }
    kv->ht[i] = KV_NONE;
}

/* ---- block states --------------------------------------------------------- */

static void kv_lru_unlink(kv_cache *kv, int32_t id) {
    int32_t p = kv->lru_prev[id], n = kv->lru_next[id];
    if (p != KV_NONE)
        kv->lru_next[p] = n;
    else
        kv->lru_head = n;
    if (n != KV_NONE)
        kv->lru_prev[n] = p;
    else
        kv->lru_tail = p;
    kv->lru_prev[id] = kv->lru_next[id] = KV_NONE;
    kv->n_cached--;
}

static void kv_lru_append(kv_cache *kv, int32_t id) {
    kv->lru_prev[id] = kv->lru_tail;
    kv->lru_next[id] = KV_NONE;
    if (kv->lru_tail != KV_NONE)
        kv->lru_next[kv->lru_tail] = id;
    else
        kv->lru_head = id;
    kv->lru_tail = id;
    kv->n_cached++;
}

static void kv_unregister(kv_cache *kv, int32_t id) {
    kv_ht_remove(kv, id);
    kv->registered[id] = 0;
}

/* A fresh block (ref 1, fill 0): a free one, else the LRU cached one. The
 * caller has checked kv_cache_n_available. */
static int32_t kv_alloc(kv_cache *kv) {
    int32_t id;
    if (kv->n_free > 0) {
        id = kv->free_stack[--kv->n_free];
    } else {
        id = kv->lru_head;
        assert(id != KV_NONE);
        kv_lru_unlink(kv, id);
        kv_unregister(kv, id);
        kv->evictions++;
    }
    assert(kv->ref[id] == 0 && !kv->registered[id]);
    kv->ref[id] = 1;
    kv->fill[id] = 0;
    return id;
}

/* One more holder; a cached block becomes used. */
static void kv_ref(kv_cache *kv, int32_t id) {
    if (kv->ref[id] == 0) {
        assert(kv->registered[id]);
        kv_lru_unlink(kv, id);
        kv->filled += kv->fill[id];
    }
    kv->ref[id]++;
}

/* One holder fewer; at zero the block becomes cached (registered, newest in
 * the LRU) or free. */
static void kv_unref(kv_cache *kv, int32_t id) {
    assert(kv->ref[id] > 0);
    if (--kv->ref[id] > 0)
        return;
    kv->filled -= kv->fill[id];
    if (kv->registered[id]) {
        kv_lru_append(kv, id);
    } else {
        kv->fill[id] = 0;
        kv->free_stack[kv->n_free++] = id;
    }
}

static void kv_set_fill(kv_cache *kv, int32_t id, int rows) {
    if (rows <= kv->fill[id])
        return;
    if (kv->ref[id] > 0)
        kv->filled += rows - kv->fill[id];
    kv->fill[id] = rows;
}

/* ---- create / free -------------------------------------------------------- */

static void *kv_calloc(size_t n, size_t size) {
    return calloc(n ? n : 1, size);
}

kv_cache *kv_cache_create_paged(const kv_cache_config *cfg) {
    if (!kv_config_ok(cfg) || cfg->n_blocks <= 0 || cfg->n_blocks == INT_MAX)
        return NULL;
    /* Sizes first, before anything is allocated per layer: the pool of every
     * layer (and the zero block) must fit a size_t. */
    size_t check;
    if (!kv_mul((size_t)cfg->block_size, (size_t)cfg->kv_dim, &check) ||
        !kv_mul(check, (size_t)cfg->n_blocks + 1, &check) ||
        !kv_mul(check, (size_t)cfg->n_layers, &check) || !kv_mul(check, 2 * sizeof(float), &check))
        return NULL;
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->cfg = *cfg;
    kv->cfg.prefix_cache = cfg->prefix_cache != 0;
    kv->cfg.layer_window = NULL; /* borrowed for this call only */
    kv->layer_group = kv_calloc((size_t)cfg->n_layers, sizeof *kv->layer_group);
    int *idx = kv_calloc((size_t)cfg->n_layers, sizeof *idx);
    kv->layer_base = kv_calloc((size_t)cfg->n_layers, sizeof *kv->layer_base);
    if (!kv->layer_group || !idx || !kv->layer_base ||
        kv_plan_groups(cfg, kv->layer_group, idx, kv->group_window, &kv->n_groups,
                       &kv->layers_per_group) < 0) {
        free(idx);
        kv_cache_free(kv);
        return NULL;
    }
    int windowed = 0;
    for (int g = 0; g < kv->n_groups; g++)
        windowed |= kv->group_window[g] > 0;
    /* With windows one more block: the zero rows released entries point at. */
    size_t n_store = (size_t)cfg->n_blocks + (size_t)windowed;
    size_t block_floats, pool_floats, pool_bytes, kv_bytes, n_tokens, n_table;
    if (!kv_mul((size_t)cfg->block_size, (size_t)cfg->kv_dim, &block_floats) ||
        !kv_mul(block_floats, n_store, &pool_floats) ||
        !kv_mul(pool_floats, (size_t)kv->layers_per_group, &pool_floats) ||
        !kv_mul(pool_floats, cfg->f16 ? sizeof(uint16_t) : sizeof(float), &pool_bytes) ||
        pool_bytes > SIZE_MAX - 64 || !kv_mul(pool_bytes, 2, &kv_bytes) ||
        !kv_mul((size_t)cfg->n_blocks, (size_t)cfg->block_size, &n_tokens) ||
        !kv_mul((size_t)cfg->max_seqs, (size_t)cfg->max_seq_blocks, &n_table) ||
        !kv_mul(n_table, (size_t)kv->n_groups, &n_table)) {
        free(idx);
        kv_cache_free(kv);
        return NULL;
    }
    kv->block_floats = block_floats;
    kv->hole = windowed ? cfg->n_blocks : KV_NONE;
    kv->block_stride = windowed ? (size_t)kv->layers_per_group * block_floats : block_floats;
    for (int l = 0; l < cfg->n_layers; l++)
        kv->layer_base[l] = windowed ? (size_t)idx[l] * block_floats
                                     : (size_t)l * (size_t)cfg->n_blocks * block_floats;
    free(idx);
    size_t ht_cap = 1;
    while (ht_cap < 2 * (size_t)cfg->n_blocks)
        ht_cap *= 2; /* n_blocks <= INT_MAX: no overflow */
    kv->elem = cfg->f16 ? sizeof(uint16_t) : sizeof(float);
    kv->pool_bytes = kv_bytes;
    /* Zeroed by calloc, which takes a pool this large straight from fresh
     * (mmap'd) pages without writing them: the kernel zeroes each page when
     * it is first touched, so resident memory grows with the blocks the
     * engine uses instead of the whole budget at start (SmolLM2, 1 GiB of
     * f32 KV: 1.06 GB resident right after start with the memset this
     * replaces). Unwritten rows are never read (attention stops at the
     * position; the zero block is read with zero weight), and zeroed memory
     * keeps sanitizer and Valgrind runs free of uninitialised reads. 64-byte
     * alignment (by hand: calloc gives 16) keeps every row start friendly to
     * AVX-512 loads. */
    size_t bytes = pool_bytes + 64;
    int external = cfg->copy_rows != NULL; /* K/V live in the caller's (device) pool */
    if (!external) {
        kv->k_mem = calloc(1, bytes);
        kv->v_mem = calloc(1, bytes);
        kv->k = kv->k_mem ? (unsigned char *)(((uintptr_t)kv->k_mem + 63) & ~(uintptr_t)63) : NULL;
        kv->v = kv->v_mem ? (unsigned char *)(((uintptr_t)kv->v_mem + 63) & ~(uintptr_t)63) : NULL;
    }
    size_t nb = (size_t)cfg->n_blocks;
    kv->ref = kv_calloc(nb, sizeof *kv->ref);
    kv->fill = kv_calloc(nb, sizeof *kv->fill);
    kv->registered = kv_calloc(nb, sizeof *kv->registered);
    kv->group = kv_calloc(nb, sizeof *kv->group);
    kv->hash = kv_calloc(nb, sizeof *kv->hash);
    kv->parent = kv_calloc(nb, sizeof *kv->parent);
    kv->tokens = kv_calloc(n_tokens, sizeof *kv->tokens);
    kv->lru_prev = kv_calloc(nb, sizeof *kv->lru_prev);
    kv->lru_next = kv_calloc(nb, sizeof *kv->lru_next);
    kv->free_stack = kv_calloc(nb, sizeof *kv->free_stack);
    kv->ht = kv_calloc(ht_cap, sizeof *kv->ht);
    kv->slots = kv_calloc((size_t)cfg->max_seqs, sizeof *kv->slots);
    kv->tables = kv_calloc(n_table, sizeof *kv->tables);
    kv->trims = kv_calloc((size_t)cfg->max_seqs * (size_t)kv->n_groups, sizeof *kv->trims);
    kv->match_hash = kv_calloc((size_t)cfg->max_seq_blocks, sizeof *kv->match_hash);
    if ((!external && (!kv->k || !kv->v)) || !kv->ref || !kv->fill || !kv->registered ||
        !kv->group || !kv->hash || !kv->parent || !kv->tokens || !kv->lru_prev || !kv->lru_next ||
        !kv->free_stack || !kv->ht || !kv->slots || !kv->tables || !kv->trims || !kv->match_hash) {
        kv_cache_free(kv);
        return NULL;
    }
    kv->ht_mask = ht_cap - 1;
    for (size_t i = 0; i < ht_cap; i++)
        kv->ht[i] = KV_NONE;
    kv->lru_head = kv->lru_tail = KV_NONE;
    /* Pushed last id first, so blocks are handed out 0, 1, 2...: the slots
     * of kv_cache_create each get one run of consecutive blocks. */
    for (int i = 0; i < cfg->n_blocks; i++) {
        kv->lru_prev[i] = kv->lru_next[i] = KV_NONE;
        kv->free_stack[i] = cfg->n_blocks - 1 - i;
    }
    kv->n_free = cfg->n_blocks;
    for (int s = 0; s < cfg->max_seqs; s++) {
        kv->slots[s].table =
            kv->tables + (size_t)s * (size_t)kv->n_groups * (size_t)cfg->max_seq_blocks;
        kv->slots[s].trim = kv->trims + (size_t)s * (size_t)kv->n_groups;
        kv->slots[s].chain = KV_HASH_ROOT;
    }
    return kv;
}

kv_cache *kv_cache_create(int n_layers, int kv_dim, int n_seqs, int max_ctx) {
    if (n_layers <= 0 || kv_dim <= 0 || n_seqs <= 0 || max_ctx <= 0)
        return NULL;
    int per_seq = max_ctx / KV_DEFAULT_BLOCK + (max_ctx % KV_DEFAULT_BLOCK != 0);
    if (per_seq > INT_MAX / n_seqs)
        return NULL;
    kv_cache_config cfg = {.n_layers = n_layers,
                           .kv_dim = kv_dim,
                           .block_size = KV_DEFAULT_BLOCK,
                           .n_blocks = per_seq * n_seqs,
                           .max_seqs = n_seqs,
                           .max_seq_blocks = per_seq,
                           .prefix_cache = 0};
    kv_cache *kv = kv_cache_create_paged(&cfg);
    for (int s = 0; kv && s < n_seqs; s++) {
        if (kv_cache_seq_grow(kv, s, max_ctx) < 0) {
            kv_cache_free(kv);
            return NULL;
        }
    }
    return kv;
}

void kv_cache_free(kv_cache *kv) {
    if (!kv)
        return;
    free(kv->layer_group);
    free(kv->layer_base);
    free(kv->k_mem);
    free(kv->v_mem);
    free(kv->ref);
    free(kv->fill);
    free(kv->registered);
    free(kv->group);
    free(kv->hash);
    free(kv->parent);
    free(kv->tokens);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->free_stack);
    free(kv->ht);
    free(kv->slots);
    free(kv->tables);
    free(kv->trims);
    free(kv->match_hash);
    free(kv);
}

/* ---- geometry ------------------------------------------------------------- */

int kv_cache_n_seqs(const kv_cache *kv) {
    return kv->cfg.max_seqs;
}
int kv_cache_block_size(const kv_cache *kv) {
    return kv->cfg.block_size;
}
int kv_cache_n_blocks(const kv_cache *kv) {
    return kv->cfg.n_blocks;
}
int kv_cache_max_ctx(const kv_cache *kv) {
    return kv->cfg.max_seq_blocks * kv->cfg.block_size;
}
size_t kv_cache_bytes(const kv_cache *kv) {
    return kv->pool_bytes;
}

void kv_cache_get_shape(const kv_cache *kv, kv_cache_shape *out) {
    memset(out, 0, sizeof *out);
    out->n_groups = kv->n_groups;
    out->layers_per_group = kv->layers_per_group;
    out->block_bytes = 2 * kv->elem * kv->block_floats * (size_t)kv->layers_per_group;
    for (int g = 0; g < kv->n_groups; g++) {
        int w = kv->group_window[g];
        long held = w > 0 ? kv_window_held(&kv->cfg, w) : kv->cfg.max_seq_blocks;
        out->n_window_groups += w > 0;
        out->seq_blocks += held < kv->cfg.max_seq_blocks ? held : kv->cfg.max_seq_blocks;
    }
}

static int kv_bad_seq(const kv_cache *kv, int seq) {
    return seq < 0 || seq >= kv->cfg.max_seqs;
}

int kv_cache_view(kv_cache *kv, int layer, int seq, kern_kv_view *out) {
    if (!out)
        return BRISK_EINVAL;
    if (layer < 0 || layer >= kv->cfg.n_layers || kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    size_t off = kv->layer_base[layer] * kv->elem;
    if (!kv->k) { /* external storage: the owner of the pool adds the layer offset */
        out->k = out->v = NULL;
        out->k16 = out->v16 = NULL;
    } else {
        out->k = kv->elem == sizeof(float) ? (float *)(void *)(kv->k + off) : NULL;
        out->v = kv->elem == sizeof(float) ? (float *)(void *)(kv->v + off) : NULL;
        out->k16 = kv->elem == sizeof(float) ? NULL : (uint16_t *)(void *)(kv->k + off);
        out->v16 = kv->elem == sizeof(float) ? NULL : (uint16_t *)(void *)(kv->v + off);
    }
    out->block_table = kv_table(kv, &kv->slots[seq], kv->layer_group[layer]);
    out->block_size = kv->cfg.block_size;
    out->block_stride = kv->block_stride;
    out->row_stride = (size_t)kv->cfg.kv_dim;
    out->window = 0;
    out->softcap = 0.0f;
    return 0;
}

/* ---- slots ---------------------------------------------------------------- */

int kv_cache_seq_capacity(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->slots[seq].n_blocks * kv->cfg.block_size;
}

int kv_cache_seq_n_pos(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->slots[seq].n_pos;
}

int kv_cache_seq_n_blocks(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    return kv->slots[seq].n_blocks;
}

const int32_t *kv_cache_seq_blocks(const kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return NULL;
    return kv->slots[seq].table;
}

/* Whether a slot must copy its block id before writing into it: another
 * slot shares it, or it is registered (a slot holding its own registered
 * block writes into it only after set_pos moved n_pos back into it, and a
 * cached prefix must not change under its hash). */
static int kv_must_copy(const kv_cache *kv, int32_t id) {
    return kv->ref[id] > 1 || kv->registered[id];
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
                n -= t[b] != kv->hole && kv->ref[t[b]] == 1;
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
    int rc = kv_grow_need(kv, &kv->slots[seq], n_new, 1, &n);
    return rc < 0 ? rc : n > INT_MAX ? INT_MAX : (int)n;
}

/* Gives slot s a private copy of its block b in group g: the rows below
 * n_pos of every layer of the group, K and V. Rows past n_pos are not
 * copied: nothing reads them before this slot writes them. */
static void kv_cow(kv_cache *kv, kv_slot *s, int g, int b) {
    int32_t *t = kv_table(kv, s, g);
    int32_t old = t[b], id = kv_alloc(kv);
    int bs = kv->cfg.block_size, rows = s->n_pos - b * bs;
    rows = rows < 0 ? 0 : rows > bs ? bs : rows;
    size_t n = (size_t)rows * (size_t)kv->cfg.kv_dim * kv->elem;
    if (kv->cfg.copy_rows && rows > 0)
        kv->cfg.copy_rows(kv->cfg.copy_ctx, id, old, rows);
    for (int l = 0; kv->k && l < kv->cfg.n_layers; l++) {
        if (kv->layer_group[l] != g)
            continue;
        size_t to = (kv->layer_base[l] + (size_t)id * kv->block_stride) * kv->elem;
        size_t from = (kv->layer_base[l] + (size_t)old * kv->block_stride) * kv->elem;
        memcpy(kv->k + to, kv->k + from, n);
        memcpy(kv->v + to, kv->v + from, n);
    }
    kv_set_fill(kv, id, rows);
    t[b] = id;
    kv_unref(kv, old);
    kv->cow_copies++;
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
            if (id != kv->hole) {
                kv_unref(kv, id);
                t[s->trim[g]] = kv->hole;
                kv->window_released++;
            }
        }
    }
}

int kv_cache_seq_grow(kv_cache *kv, int seq, int n_new) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    if (n_new < 0)
        return BRISK_EINVAL;
    kv_slot *s = &kv->slots[seq];
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
            t[b] = kv_alloc(kv);
    }
    if (n_need > s->n_blocks)
        s->n_blocks = n_need;
    return 0;
}

void kv_cache_seq_set_pos(kv_cache *kv, int seq, int n_pos) {
    if (kv_bad_seq(kv, seq))
        return;
    kv_slot *s = &kv->slots[seq];
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
            kv_set_fill(kv, t[b], n_pos - b * bs < bs ? n_pos - b * bs : bs);
    }
    /* Moving back into checked blocks: they may be rewritten, so commit
     * starts over (registered blocks are skipped again in O(1) each). */
    if (n_pos < s->n_checked * bs) {
        s->n_checked = 0;
        s->chain = KV_HASH_ROOT;
    }
    s->n_pos = n_pos;
}

/* The registered block of group g for the prefix hash h whose parent chain
 * and tokens match, or KV_NONE. */
static int32_t kv_lookup(const kv_cache *kv, int g, uint64_t h, uint64_t parent,
                         const int32_t *tok) {
    int bs = kv->cfg.block_size;
    int32_t id = kv_ht_find(kv, kv_group_key(h, g));
    if (id == KV_NONE || kv->group[id] != g || kv->parent[id] != parent ||
        memcmp(kv->tokens + (size_t)id * (size_t)bs, tok, (size_t)bs * sizeof *tok) != 0)
        return KV_NONE;
    return id;
}

void kv_cache_seq_commit(kv_cache *kv, int seq, const int32_t *tokens, int n) {
    if (kv_bad_seq(kv, seq) || !kv->cfg.prefix_cache || !tokens || n <= 0)
        return;
    kv_slot *s = &kv->slots[seq];
    int bs = kv->cfg.block_size;
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
            if (id != kv->hole && kv->registered[id]) {
                h = kv_group_key(kv->hash[id], g);
                known = 1;
            }
        }
        if (!known)
            h = kv_hash_block(s->chain, tok, bs);
        for (int g = 0; g < kv->n_groups; g++) {
            int32_t id = kv_table(kv, s, g)[s->n_checked];
            /* Released (a window group), registered, or the same prefix
             * computed by another slot (or a 64-bit collision): keep the
             * registered one; this block stays private and is freed when
             * released. */
            uint64_t key = kv_group_key(h, g);
            if (id == kv->hole || kv->registered[id] || kv_ht_find(kv, key) != KV_NONE)
                continue;
            kv->registered[id] = 1;
            kv->group[id] = (uint8_t)g;
            kv->hash[id] = key;
            kv->parent[id] = s->chain;
            memcpy(kv->tokens + (size_t)id * (size_t)bs, tok, (size_t)bs * sizeof *tok);
            kv_set_fill(kv, id, bs);
            kv_ht_insert(kv, id);
        }
        s->chain = h;
    }
}

void kv_cache_seq_release(kv_cache *kv, int seq) {
    if (kv_bad_seq(kv, seq))
        return;
    kv_slot *s = &kv->slots[seq];
    /* Last block first: the tail of a prefix becomes older in the LRU than
     * its head, so eviction eats prefixes from the end and the head, shared
     * by more prompts, stays matchable longest. */
    while (s->n_blocks > 0) {
        s->n_blocks--;
        for (int g = kv->n_groups - 1; g >= 0; g--) {
            int32_t id = kv_table(kv, s, g)[s->n_blocks];
            if (id != kv->hole)
                kv_unref(kv, id);
        }
    }
    for (int g = 0; g < kv->n_groups; g++)
        s->trim[g] = 0;
    s->n_pos = 0;
    s->n_checked = 0;
    s->chain = KV_HASH_ROOT;
}

int kv_cache_seq_match(kv_cache *kv, int seq, const int32_t *tokens, int n, int max_positions) {
    if (kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    kv_slot *s = &kv->slots[seq];
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
        uint64_t h = kv_hash_block(chain, tok, bs);
        int ok = 1;
        for (int g = 0; g < kv->n_groups && ok; g++)
            ok = kv->group_window[g] > 0 || kv_lookup(kv, g, h, chain, tok) != KV_NONE;
        if (!ok)
            break;
        kv->match_hash[m] = chain = h;
    }
    /* ...cut back until every window group holds the blocks a query right
     * after it sees. */
    int k = m;
    for (int g = 0; g < kv->n_groups; g++) {
        int w = kv->group_window[g];
        for (int b = k - 1; w > 0 && b >= kv_first_seen(w, k * bs, bs); b--) {
            uint64_t parent = b > 0 ? kv->match_hash[b - 1] : KV_HASH_ROOT;
            if (kv_lookup(kv, g, kv->match_hash[b], parent, tokens + (size_t)b * (size_t)bs) ==
                KV_NONE) {
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
                id = kv->hole;
            } else {
                uint64_t parent = b > 0 ? kv->match_hash[b - 1] : KV_HASH_ROOT;
                id = kv_lookup(kv, g, kv->match_hash[b], parent, tokens + (size_t)b * (size_t)bs);
                assert(id != KV_NONE); /* found above, and nothing evicted since */
                kv_ref(kv, id);
            }
            kv_table(kv, s, g)[b] = id;
        }
    for (int g = 0; g < kv->n_groups; g++)
        s->trim[g] = kv->group_window[g] > 0 ? kv_first_seen(kv->group_window[g], k * bs, bs) : 0;
    s->n_blocks = k;
    s->n_pos = k * bs;
    s->n_checked = k;
    s->chain = k > 0 ? kv->match_hash[k - 1] : KV_HASH_ROOT;
    kv->prefix_queries += n;
    kv->prefix_hits += s->n_pos;
    return s->n_pos;
}

int kv_cache_seq_fork(kv_cache *kv, int dst, int src, int n_pos) {
    if (kv_bad_seq(kv, dst) || kv_bad_seq(kv, src))
        return BRISK_ERANGE;
    kv_slot *d = &kv->slots[dst];
    const kv_slot *s = &kv->slots[src];
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
                id = kv->hole;
            if (id != kv->hole)
                kv_ref(kv, id);
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

/* ---- accounting ----------------------------------------------------------- */

int kv_cache_n_available(const kv_cache *kv) {
    return kv->n_free + kv->n_cached;
}

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *out) {
    memset(out, 0, sizeof *out);
    out->blocks_total = kv->cfg.n_blocks;
    out->blocks_cached = kv->n_cached;
    out->blocks_free = kv->n_free;
    out->blocks_used = kv->cfg.n_blocks - kv->n_cached - kv->n_free;
    out->slots_allocated = (long long)out->blocks_used * kv->cfg.block_size;
    out->slots_filled = kv->filled;
    out->prefix_queries = kv->prefix_queries;
    out->prefix_hits = kv->prefix_hits;
    out->cow_copies = kv->cow_copies;
    out->evictions = kv->evictions;
    out->window_released = kv->window_released;
}

/* Codes of kv_cache_check, one per invariant. */
enum {
    KV_BAD_SLOT = -1,  /* slot counters out of range or a bad block id */
    KV_BAD_REF = -2,   /* a reference count differs from the table entries */
    KV_BAD_FILL = -3,  /* fill out of range or below a slot's n_pos */
    KV_BAD_HASH = -4,  /* hash table and registered flags disagree */
    KV_BAD_LRU = -5,   /* LRU list is not exactly the cached blocks */
    KV_BAD_FREE = -6,  /* free stack is not exactly the free blocks */
    KV_BAD_COUNT = -7, /* counters disagree with the blocks */
    KV_BAD_NOMEM = -8, /* the check itself could not allocate */
    KV_BAD_TRIM = -9,  /* a released entry where a query still looks, or a held one below trim */
};

static int kv_check_slots(const kv_cache *kv, int32_t *count) {
    int bs = kv->cfg.block_size;
    for (int q = 0; q < kv->cfg.max_seqs; q++) {
        const kv_slot *s = &kv->slots[q];
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
                if ((id == kv->hole) != (b < s->trim[g]))
                    return KV_BAD_TRIM;
                if (id == kv->hole)
                    continue;
                if (id < 0 || id >= kv->cfg.n_blocks)
                    return KV_BAD_SLOT;
                count[id]++;
                int rows = s->n_pos - b * bs;
                if (rows > 0 && kv->fill[id] < (rows < bs ? rows : bs))
                    return KV_BAD_FILL;
            }
        }
    }
    return 0;
}

static int kv_check_blocks(const kv_cache *kv, const int32_t *count, uint8_t *seen) {
    int n = kv->cfg.n_blocks, n_reg = 0, n_cached = 0, n_free = 0;
    long long filled = 0;
    for (int id = 0; id < n; id++) {
        if (count[id] != kv->ref[id])
            return KV_BAD_REF;
        if (kv->fill[id] < 0 || kv->fill[id] > kv->cfg.block_size)
            return KV_BAD_FILL;
        if (kv->ref[id] > 0)
            filled += kv->fill[id];
        if (kv->registered[id]) {
            n_reg++;
            if (kv_ht_find(kv, kv->hash[id]) != id)
                return KV_BAD_HASH;
            if (kv->fill[id] != kv->cfg.block_size)
                return KV_BAD_FILL;
        } else if (kv->ref[id] == 0 && kv->fill[id] != 0) {
            return KV_BAD_FILL;
        }
        n_cached += kv->ref[id] == 0 && kv->registered[id];
        n_free += kv->ref[id] == 0 && !kv->registered[id];
    }
    size_t n_ht = 0;
    for (size_t i = 0; i <= kv->ht_mask; i++) {
        int32_t id = kv->ht[i];
        if (id == KV_NONE)
            continue;
        if (id < 0 || id >= n || !kv->registered[id])
            return KV_BAD_HASH;
        n_ht++;
    }
    if (n_ht != (size_t)n_reg)
        return KV_BAD_HASH;
    /* LRU: walk it forwards, checking the back links and the members. */
    int walked = 0;
    int32_t prev = KV_NONE;
    for (int32_t id = kv->lru_head; id != KV_NONE; prev = id, id = kv->lru_next[id]) {
        if (id < 0 || id >= n || seen[id] || walked >= n)
            return KV_BAD_LRU;
        if (kv->lru_prev[id] != prev || kv->ref[id] != 0 || !kv->registered[id])
            return KV_BAD_LRU;
        if (kv->lru_next[id] == KV_NONE && kv->lru_tail != id)
            return KV_BAD_LRU;
        seen[id] = 1;
        walked++;
    }
    if (walked != n_cached || kv->n_cached != n_cached ||
        (kv->lru_head == KV_NONE) != (kv->lru_tail == KV_NONE))
        return KV_BAD_LRU;
    if (kv->n_free != n_free)
        return KV_BAD_FREE;
    for (int i = 0; i < kv->n_free; i++) {
        int32_t id = kv->free_stack[i];
        if (id < 0 || id >= n || seen[id] || kv->ref[id] != 0 || kv->registered[id])
            return KV_BAD_FREE;
        seen[id] = 1;
    }
    int used = 0;
    for (int id = 0; id < n; id++)
        used += kv->ref[id] > 0;
    if (used + n_cached + n_free != n || filled != kv->filled)
        return KV_BAD_COUNT;
    return 0;
}

int kv_cache_check(const kv_cache *kv) {
    int32_t *count = kv_calloc((size_t)kv->cfg.n_blocks, sizeof *count);
    uint8_t *seen = kv_calloc((size_t)kv->cfg.n_blocks, 1);
    int rc = KV_BAD_NOMEM;
    if (count && seen) {
        rc = kv_check_slots(kv, count);
        if (rc == 0)
            rc = kv_check_blocks(kv, count, seen);
    }
    free(count);
    free(seen);
    return rc;
}
