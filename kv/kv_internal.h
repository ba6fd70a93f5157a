/* kv_internal.h - what the parts of the KV cache share and nothing else
 * sees (tests aside). kv_cache.h is the public contract; behind it the
 * cache is four files, one concern each, split as vLLM splits its block
 * pool from its cache manager:
 *
 *   kv_pool.c    the block pool: storage (the element type, its bytes, the
 *                layout of K and V, the copy of a block's rows), reference
 *                counts, fill counts, the free stack and the LRU list of
 *                cached blocks. The only file that knows what a stored
 *                element is.
 *   kv_prefix.c  the prefix index: block hashes, the hash table from a
 *                prefix hash to a registered block, register / unregister /
 *                lookup, and kv_cache_seq_match.
 *   kv_seq.c     the sequence slots and their block tables: grow (with
 *                copy-on-write and the window trim), set_pos, commit,
 *                release, fork.
 *   kv_cache.c   the whole: layer groups (sliding windows), shapes,
 *                create / free, the view, stats and kv_cache_check.
 *
 * Every block is in exactly one of three states:
 *   used    ref > 0; held by one or more slot tables;
 *   cached  ref == 0 and registered: in the LRU list, reusable by a match;
 *   free    ref == 0 and not registered: on the free stack.
 * The pool owns the reference counts and the two lists; the prefix index
 * owns "registered". A fresh block comes from the free stack first, else it
 * is the least recently released cached block (evicted: the pool asks the
 * index to unregister it on the spot).
 *
 * Each part keeps its state in its own member of struct kv_cache (pool,
 * prefix, seqs), allocated by its _init and freed by its _free; the others
 * read it freely (the engine thread alone calls anything here) but change
 * it only through the functions below. */
#ifndef KV_INTERNAL_H
#define KV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/kern_kv.h"
#include "kv/kv_cache.h"

#define KV_NONE (-1)
/* The chain value before a slot's first block: an arbitrary odd constant,
 * so that the first block's hash still depends on a "parent". */
#define KV_HASH_ROOT 0x9e3779b97f4a7c15ull
#define KV_DEFAULT_BLOCK 16 /* positions per block of kv_cache_create */
#define KV_MAX_GROUPS 256   /* block tables per slot (at most one per layer) */

/* ---- state ----------------------------------------------------------------- */

/* The block pool (kv_pool.c). */
typedef struct kv_pool {
    /* Storage, in units (kern_kv_unit_bytes: elements of f32/f16, bytes of
     * the quantized dtypes). */
    kern_kv_dtype dtype;  /* the stored element (kv_pool.c's one rule) */
    size_t unit;          /* bytes of a unit */
    size_t block_units;   /* one layer-block (block_size positions of one layer) */
    size_t scale_off;     /* quantized: bytes from a layer-block's start to its scales */
    size_t block_stride;  /* units between consecutive block ids */
    size_t *layer_base;   /* [n_layers]: units before the layer's rows of block 0 */
    int32_t hole;         /* the zero block released entries point at (KV_NONE: none) */
    size_t bytes;         /* bytes of K plus V */
    unsigned char *k, *v; /* the pool's K and V, laid out as kv_cache.h says; NULL external */
    void *k_mem, *v_mem;  /* the allocations k and v are 64-byte aligned in */
    /* Per block. */
    int32_t *ref;
    int32_t *fill; /* rows holding a token; 0 for a free block */
    int32_t *lru_prev, *lru_next;
    int lru_head, lru_tail; /* head = released longest ago = evicted first */
    int n_cached;
    int32_t *free_stack;
    int n_free;
    long long filled; /* sum of fill over used blocks */
    long long evictions;
} kv_pool;

/* The prefix index (kv_prefix.c). Per block, valid while registered. */
typedef struct kv_prefix {
    uint8_t *registered;
    uint8_t *group;   /* the group it was registered for */
    uint64_t *hash;   /* its key: the prefix hash mixed with the group */
    uint64_t *parent; /* chain value of the block before it */
    int32_t *tokens;  /* [n_blocks][block_size]: the tokens it was registered with */
    int32_t *ht;      /* ht_mask + 1 entries: block id or KV_NONE */
    size_t ht_mask;
    uint64_t *match_hash; /* [max_seq_blocks]: kv_cache_seq_match's chain */
    long long queries, hits;
} kv_prefix;

typedef struct kv_slot {
    int32_t *table; /* [n_groups][max_seq_blocks]: n_blocks valid entries per group */
    int32_t *trim;  /* [n_groups]: entries below it are released (window groups) */
    int n_blocks;
    int n_pos;
    int n_checked;  /* leading blocks already registered or looked up by commit */
    uint64_t chain; /* hash of block n_checked - 1 (KV_HASH_ROOT for none) */
} kv_slot;

/* The sequence slots (kv_seq.c). */
typedef struct kv_seqs {
    kv_slot *slots;
    int32_t *tables; /* [max_seqs][n_groups][max_seq_blocks] */
    int32_t *trims;  /* [max_seqs][n_groups] */
    long long cow_copies, window_released;
} kv_seqs;

struct kv_cache {
    kv_cache_config cfg; /* layer_window NULL: it was borrowed by create only */
    /* Layer groups (kv_cache.c). */
    int n_groups, layers_per_group;
    int group_window[KV_MAX_GROUPS]; /* 0: full attention */
    int *layer_group;                /* [n_layers] */
    kv_pool pool;
    kv_prefix prefix;
    kv_seqs seqs;
};

/* ---- small shared helpers ------------------------------------------------- */

/* *out = a * b; 0 on overflow (1 otherwise). */
static inline int kv_mul(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* calloc that never asks for 0 bytes (a NULL from it then means failure). */
static inline void *kv_calloc(size_t n, size_t size) {
    return calloc(n ? n : 1, size);
}

static inline int kv_bad_seq(const kv_cache *kv, int seq) {
    return seq < 0 || seq >= kv->cfg.max_seqs;
}

/* Slot s's block table of group g (max_seq_blocks entries). */
static inline int32_t *kv_table(const kv_cache *kv, const kv_slot *s, int g) {
    return s->table + (size_t)g * (size_t)kv->cfg.max_seq_blocks;
}

/* The first block a query at position n_pos (or later) of a group with
 * this window sees; 0 for full attention. */
static inline int kv_first_seen(int window, int n_pos, int bs) {
    int lo = window > 0 ? n_pos - window + 1 : 0;
    return lo > 0 ? lo / bs : 0;
}

/* Most blocks a window group holds at once: trimmed to what a query at n_pos
 * sees, then grown by at most max_grow positions. */
static inline long kv_window_held(const kv_cache_config *cfg, int window) {
    return ((long)window - 1 + cfg->max_grow + cfg->block_size - 1) / cfg->block_size + 1;
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

/* ---- the block pool (kv_pool.c) ------------------------------------------- */

/* 1 if cfg's dtype can hold its rows (kern_kv_check) and the K/V arrays of
 * its pool (every layer, plus the zero block) have a size a size_t holds;
 * checked before anything is allocated. */
int kv_pool_fits(const kv_cache_config *cfg);
/* cfg's head size (head_dim, else kv_dim). */
int kv_cfg_head_dim(const kv_cache_config *cfg);
/* K plus V bytes of one block holding `layers` layers of cfg's rows, in
 * cfg's element type; 0 on overflow. */
size_t kv_pool_block_bytes(const kv_cache_config *cfg, int layers);
/* Lays out and allocates the storage (unless cfg.copy_rows: external) and
 * the per-block state of kv->pool, every block free. Needs kv->cfg and the
 * layer groups; layer_idx[l] is layer l's index in its group (borrowed).
 * Returns 0, BRISK_ERANGE for sizes past a size_t, or BRISK_ENOMEM. What
 * it allocated is freed by kv_pool_free, also after a failure. */
int kv_pool_init(kv_cache *kv, const int *layer_idx);
void kv_pool_free(kv_cache *kv);
/* The storage half of kv_cache_view for a layer: k/v or k16/v16 (NULL
 * with external storage), block_stride and row_stride. */
void kv_pool_view(const kv_cache *kv, int layer, kern_kv_view *out);
/* Copies rows [0, rows) of block src into block dst in every layer of
 * group g, K and V (through cfg.copy_rows with external storage). */
void kv_pool_copy_rows(kv_cache *kv, int g, int32_t dst, int32_t src, int rows);

/* A fresh block (ref 1, fill 0): a free one, else the LRU cached one
 * (evicted). The caller has checked kv_cache_n_available > 0. */
int32_t kv_pool_alloc(kv_cache *kv);
/* One more holder; a cached block becomes used (leaves the LRU). */
void kv_pool_ref(kv_cache *kv, int32_t id);
/* One holder fewer; at zero the block becomes cached (registered: newest
 * in the LRU) or free (its fill reset). */
void kv_pool_unref(kv_cache *kv, int32_t id);
/* Raises the block's fill to rows (never lowers it). */
void kv_pool_set_fill(kv_cache *kv, int32_t id, int rows);
/* The pool's invariants, given count[id] = the table entries holding each
 * block and seen[] (n_blocks bytes, zeroed) as scratch; 0 or a KV_BAD_*. */
int kv_pool_check(const kv_cache *kv, const int32_t *count, uint8_t *seen);

/* ---- the prefix index (kv_prefix.c) --------------------------------------- */

/* Allocates kv->prefix (every block unregistered); 0 or BRISK_ENOMEM (freed
 * by kv_prefix_free). */
int kv_prefix_init(kv_cache *kv);
void kv_prefix_free(kv_cache *kv);
/* The hash of a block of n tokens after a prefix whose hash is parent:
 * FNV-1a over the bytes, little-endian, then splitmix64's finalizer; the
 * same value on every host. */
uint64_t kv_prefix_hash(uint64_t parent, const int32_t *tok, int n);
/* The key a block of group g is registered under for prefix hash h
 * (group 0's is h itself); kv_prefix_key(kv_prefix_key(h, g), g) == h. */
uint64_t kv_prefix_key(uint64_t h, int g);
static inline int kv_prefix_has(const kv_cache *kv, int32_t id) {
    return kv->prefix.registered[id];
}
/* The registered block under key, or KV_NONE. */
int32_t kv_prefix_find(const kv_cache *kv, uint64_t key);
/* The registered block of group g for prefix hash h whose parent chain and
 * tokens (block_size of them) match, or KV_NONE. */
int32_t kv_prefix_lookup(const kv_cache *kv, int g, uint64_t h, uint64_t parent,
                         const int32_t *tok);
/* Registers block id (unregistered, ref > 0) for group g under key (not in
 * the table yet) with its parent chain and block_size tokens (copied); the
 * block counts as full from then on. */
void kv_prefix_register(kv_cache *kv, int32_t id, int g, uint64_t key, uint64_t parent,
                        const int32_t *tok);
/* Removes a registered block from the index. */
void kv_prefix_unregister(kv_cache *kv, int32_t id);
/* The index's invariants (hash table and registered flags agree, registered
 * blocks full); 0 or a KV_BAD_*. */
int kv_prefix_check(const kv_cache *kv);

/* ---- the sequence slots (kv_seq.c) ---------------------------------------- */

/* Allocates kv->seqs (every slot empty); 0 or BRISK_ERANGE / BRISK_ENOMEM
 * (freed by kv_seq_free). Needs the layer groups. */
int kv_seq_init(kv_cache *kv);
void kv_seq_free(kv_cache *kv);
/* The slots' invariants; adds each table entry's block to count[id] (n_blocks
 * entries, zeroed) for kv_pool_check. 0 or a KV_BAD_*. */
int kv_seq_check(const kv_cache *kv, int32_t *count);

#endif
