/* kv_cache.h - the paged key/value cache: one pool of fixed-size blocks,
 * a block table per sequence slot, reference counts, and a prefix cache.
 *
 * Memory. K and V are two arrays allocated once at create time, laid out
 * [n_layers][n_blocks][block_size][kv_dim] values of cfg.dtype: f32, IEEE
 * f16 (half the memory; the view then carries k16/v16), or a quantized
 * dtype (kern_kv.h: q8_0, q4_0, int8, fp8; codes and fp16 scales in each
 * layer-block, the view carries kq/vq). kern_kv_layer_block_bytes is the one
 * rule for a block's bytes: the pool's size, kv_cache_shape.block_bytes (the
 * engine's pool sizing and admission), kv_cache_bytes and what a copy on
 * write moves all come from it. Offsets and strides below count the pool's
 * units (kern_kv_unit_bytes: elements of the floats, bytes of the quantized
 * dtypes). A sequence slot owns an
 * ordered list of block ids (its block table); position p of the slot lives
 * in block table[p / block_size] at row p % block_size. The forward pass
 * reads and writes K/V only through kv_cache_view, whose kern_kv_view the
 * attention kernels walk block by block (paged attention).
 *
 * Slots. kv_cache has max_seqs sequence slots (0..max_seqs-1), each empty at
 * start. A slot holds n_pos positions ("tokens held"); kv_cache_seq_grow
 * makes room for more, allocating blocks all-or-nothing. The forward pass may
 * write any position < capacity (n_blocks * block_size) of a slot; n_pos is
 * bookkeeping the owner sets with kv_cache_seq_set_pos after a step.
 *
 * Sharing. Blocks carry reference counts. kv_cache_seq_fork makes one slot
 * share another's blocks; writing into a shared partly-filled block copies it
 * first (copy-on-write, done by kv_cache_seq_grow, which is the only place
 * positions are made writable). Full blocks are never written again.
 *
 * Prefix cache. A full block whose tokens are known (kv_cache_seq_commit) is
 * registered under a 64-bit hash of its tokens chained with the hash of the
 * block before it, so a hash names a whole prefix. kv_cache_seq_match
 * attaches registered blocks matching a new prompt's leading full blocks
 * instead of recomputing them (the tokens are compared too, not only the
 * hash). A block whose reference count drops to zero stays registered
 * ("cached") and is evicted least-recently-used only when a fresh block is
 * needed and no never-registered free block is left.
 *
 * Sliding-window layers (cfg.layer_window, Gemma's local layers, Mistral).
 * A layer whose queries see only the last W positions does not need the
 * blocks behind them, so the cache may release them. It then groups the
 * layers: layers with the same window (0 for full attention) go into groups
 * of layers_per_group layers (the gcd of the classes' sizes, so every block
 * is the same size and one pool serves every group), and each slot keeps one
 * block table per group. A block holds layers_per_group layers of
 * block_size positions; the layout is [n_blocks + 1][layers_per_group]
 * [block_size][kv_dim] (the extra block stays zero). Before a window group
 * grows, its blocks that no later query can see are released and their table
 * entries point at that zero block, which attention reads with zero weight.
 * A prefix-cache match attaches only a prefix whose blocks every group still
 * holds: all of them for full-attention groups, the last window's worth for
 * window groups. Grouping needs cfg.max_grow (the most positions one grow
 * asks for), which bounds what a window group holds; a window whose bound is
 * not below a full context saves nothing and is treated as full attention.
 * Without windows the layout is [n_layers][n_blocks][block_size][kv_dim], one
 * table per slot, as before. kv_cache_layer_place says where a layer lies in
 * either layout (the owner of external storage addresses its pool by it).
 *
 * Threading: none. The engine thread alone calls every function here.
 */
#ifndef KV_CACHE_H
#define KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_ops.h"

typedef struct kv_cache kv_cache;

typedef struct kv_cache_config {
    int n_layers;
    int kv_dim;         /* floats per position per layer: n_kv_heads * head_dim */
    int block_size;     /* positions per block (16 by default) */
    int n_blocks;       /* blocks in the pool */
    int max_seqs;       /* sequence slots */
    int max_seq_blocks; /* most blocks one slot may hold (its context / block_size, rounded up) */
    int prefix_cache;   /* 1: register full blocks and match prompts against them */
    int f16;            /* 1: f16 (the older spelling of dtype = KERN_KV_F16; dtype wins) */
    /* Sliding windows: n_layers entries, > 0 the positions a query of that
     * layer sees (see above), 0 full attention; NULL: no layer is windowed.
     * Borrowed for the call to create only. Ignored when max_grow is 0.
     * External storage groups alike (its owner follows the layout). */
    const int *layer_window;
    int max_grow; /* most positions one kv_cache_seq_grow asks for (0: no bound) */
    /* External storage (the CUDA backend's device pool). NULL: K and V are
     * host arrays the cache allocates. Set: the cache allocates no K/V memory
     * and only keeps the books; the owner of the pool lays it out as above
     * (kv_cache_bytes of it, zeroed: the zero block of a grouped layout must
     * read as zeros; kv_cache_layer_place gives each layer's place),
     * kv_cache_view returns NULL k/v/k16/v16 (the block table and strides are
     * still right), and copy-on-write calls copy_rows(copy_ctx, dst_block,
     * src_block, n_rows) to copy rows [0, n_rows) of a block in every layer
     * the block holds (all of them ungrouped; grouped, the layers_per_group
     * layers of the block, whichever group it serves), K and V, before the
     * slot writes into dst. It cannot fail: an owner whose copy fails
     * records the error and reports it at its next forward. */
    void (*copy_rows)(void *ctx, int32_t dst, int32_t src, int n_rows);
    void *copy_ctx;
    /* The stored element (kern_kv.h); KERN_KV_F32 (0) with f16 set means f16. */
    kern_kv_dtype dtype;
    /* Values per KV head: the quantized dtypes' groups lie within one head
     * (kern_kv_check); 0: kv_dim (one head; the floats need nothing else). */
    int head_dim;
} kv_cache_config;

/* Bytes a pool of n_blocks blocks takes (K and V), f32 or (f16 = 1) f16;
 * 0 for a bad argument or an overflow. */
size_t kv_cache_pool_bytes(int n_layers, int kv_dim, int block_size, long n_blocks);
size_t kv_cache_pool_bytes_dtype(int n_layers, int kv_dim, int block_size, long n_blocks, int f16);
/* The same for any dtype (head_dim as in kv_cache_config): n_blocks * 2 *
 * n_layers * kern_kv_layer_block_bytes. */
size_t kv_cache_pool_bytes_kv(kern_kv_dtype dtype, int n_layers, int kv_dim, int head_dim,
                              int block_size, long n_blocks);
/* The dtype a configuration stores (dtype, or f16 when dtype is F32). */
kern_kv_dtype kv_cache_config_dtype(const kv_cache_config *cfg);

/* How a configuration lays out its pool (cfg.n_blocks is not read). */
typedef struct kv_cache_shape {
    int n_groups;         /* block tables per slot */
    int n_window_groups;  /* of them, window groups (they release blocks) */
    int layers_per_group; /* layers one block holds */
    size_t block_bytes;   /* K plus V bytes of one block; 0 on overflow */
    /* Most blocks one slot holds at once: max_seq_blocks per full group plus
     * a window's worth (with one grow of max_grow) per window group. */
    long seq_blocks;
} kv_cache_shape;

/* Fills *out; BRISK_EINVAL for a configuration create would refuse. */
int kv_cache_shape_of(const kv_cache_config *cfg, kv_cache_shape *out);

/* The shape of a cache made (seq_blocks for its max_seq_blocks). */
void kv_cache_get_shape(const kv_cache *kv, kv_cache_shape *out);

/* Returns NULL if an argument is out of range or allocation fails. */
kv_cache *kv_cache_create_paged(const kv_cache_config *cfg);
/* The fixed layout the single-stream tools use: n_seqs slots, each grown to
 * max_ctx positions at creation (no prefix cache). */
kv_cache *kv_cache_create(int n_layers, int kv_dim, int n_seqs, int max_ctx);
void kv_cache_free(kv_cache *kv);

int kv_cache_n_seqs(const kv_cache *kv); /* slots */
int kv_cache_block_size(const kv_cache *kv);
int kv_cache_n_blocks(const kv_cache *kv);
/* Most positions one slot can hold (max_seq_blocks * block_size). */
int kv_cache_max_ctx(const kv_cache *kv);
/* Bytes of K plus V in the layout (the zero block included); with external
 * storage, what its owner allocates. */
size_t kv_cache_bytes(const kv_cache *kv);
/* The stored element. */
kern_kv_dtype kv_cache_dtype(const kv_cache *kv);
/* Bytes from a layer-block's start that a copy of its rows [0, n_rows)
 * must move, in each layer, K and V alike: n_rows rows of the floats; the
 * whole layer-block of a quantized dtype (its scales follow every row). An
 * owner of external storage copies this much (kv_cache_config.copy_rows). */
size_t kv_cache_copy_bytes(const kv_cache *kv, int n_rows);
/* Where layer `layer` lies in the pool: *group gets the group whose block
 * tables address it (kv_cache_seq_table), *base the units before its rows
 * of block 0 (grouped: its index in its group times a layer-block's units;
 * else layer * n_blocks * a layer-block's units). Row p of a slot is then at
 * base + table[p / block_size] * block_stride + (p % block_size) * row_stride
 * (the floats), or in the layer-block at base + table[p / block_size] *
 * block_stride bytes (the quantized: kern_ops.h's kern_kv_view), with the
 * strides kv_cache_view gives. 0, or BRISK_ERANGE for a bad layer. */
int kv_cache_layer_place(const kv_cache *kv, int layer, int *group, size_t *base);

/* Fills *out for (layer, slot): pointers, block table, strides, and for a
 * quantized dtype dtype and scale_off (also with external storage, whose
 * pointers are NULL). Returns 0, or BRISK_ERANGE for a bad index. */
int kv_cache_view(kv_cache *kv, int layer, int seq, kern_kv_view *out);

/* ---- slots --------------------------------------------------------------- */

/* Positions the slot can be written at without growing: its blocks * block_size. */
int kv_cache_seq_capacity(const kv_cache *kv, int seq);
int kv_cache_seq_n_pos(const kv_cache *kv, int seq);
int kv_cache_seq_n_blocks(const kv_cache *kv, int seq);
/* Block ids of the slot (n_blocks of them) in its first group's table (the
 * only one without windows); valid until the slot changes. */
const int32_t *kv_cache_seq_blocks(const kv_cache *kv, int seq);
/* The slot's block table of group `group` (0 .. n_groups - 1 of
 * kv_cache_get_shape): kv_cache_seq_n_blocks entries, those behind a window
 * naming the zero block; valid until the slot changes. NULL for a bad slot
 * or group. */
const int32_t *kv_cache_seq_table(const kv_cache *kv, int seq, int group);

/* Blocks kv_cache_seq_grow(kv, seq, n_new) would take from the pool:
 * new blocks plus one for a copy-on-write of a shared partial last block,
 * less the window groups' blocks it releases first (net; may be negative).
 * For n_new > max_grow (a whole prompt, grown later in steps) a window
 * group counts at most the blocks it holds at once. */
int kv_cache_seq_blocks_needed(const kv_cache *kv, int seq, int n_new);
/* Makes positions [n_pos, n_pos + n_new) writable: copies a shared
 * partly-filled last block (copy-on-write), then appends blocks. All or
 * nothing: BRISK_ENOSPC (slot unchanged) when the pool cannot supply them,
 * BRISK_ERANGE past max_seq_blocks. Does not change n_pos. */
int kv_cache_seq_grow(kv_cache *kv, int seq, int n_new);
/* Sets the positions the slot holds (<= capacity; not so far back that a
 * window group released blocks a query at n_pos would see). */
void kv_cache_seq_set_pos(kv_cache *kv, int seq, int n_pos);
/* Registers the slot's full blocks that are not registered yet, given the
 * tokens at positions [0, n) (n <= n_pos; only blocks fully inside n count).
 * Safe to call every step: already-registered blocks are skipped in O(1). */
void kv_cache_seq_commit(kv_cache *kv, int seq, const int32_t *tokens, int n);
/* Releases the slot's blocks that lie wholly past n_pos: blocks a grow made
 * writable for positions that were then not kept (a speculative step's
 * proposals that verification rejected). commit registers only blocks
 * inside n_pos, so none of them is registered, and the slot held each alone
 * (grow copies a shared one first): they go back free. The rows past n_pos
 * in the block that holds n_pos stay as they are (nothing reads a row past
 * n_pos before the slot writes it again). Returns the blocks released. */
int kv_cache_seq_shrink(kv_cache *kv, int seq);
/* Drops every block of the slot (reference counts fall; full registered
 * blocks become cached, the last block first in eviction order) and empties it. */
void kv_cache_seq_release(kv_cache *kv, int seq);

/* For an empty slot: attaches the longest run of registered blocks matching
 * the leading full blocks of tokens[0, n), never more than max_positions
 * positions (the caller keeps at least one token to compute). Returns the
 * positions attached (a multiple of block_size; n_pos is set to it). Counts
 * a prefix-cache query of n tokens and a hit of the returned count. */
int kv_cache_seq_match(kv_cache *kv, int seq, const int32_t *tokens, int n, int max_positions);
/* For an empty dst: shares the blocks of src covering positions [0, n_pos)
 * (n_pos <= src's n_pos) and sets dst's n_pos to n_pos. A partly-filled last
 * block is shared too; kv_cache_seq_grow copies it before dst writes.
 * BRISK_ENOTFOUND (dst unchanged) when src's window groups have released
 * blocks dst would need. */
int kv_cache_seq_fork(kv_cache *kv, int dst, int src, int n_pos);

/* ---- accounting ----------------------------------------------------------- */

typedef struct kv_cache_stats {
    /* Blocks of the one pool, whatever group holds them. */
    int blocks_total;
    int blocks_used;           /* reference count > 0 */
    int blocks_cached;         /* reference count 0, registered (reusable by a match) */
    int blocks_free;           /* reference count 0, not registered */
    long long slots_allocated; /* positions in used blocks (blocks_used * block_size) */
    long long slots_filled;   /* of those, positions that hold a token (each physical block once) */
    long long prefix_queries; /* tokens looked up by kv_cache_seq_match */
    long long prefix_hits;    /* tokens found */
    long long cow_copies;
    long long evictions;
    long long window_released; /* table entries released behind a window */
} kv_cache_stats;

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *out);
/* Blocks an allocation can take now: free plus cached (evictable). */
int kv_cache_n_available(const kv_cache *kv);

/* Checks every internal invariant (reference counts equal the table
 * entries that hold each block, lists and hash table consistent, fill counts
 * within bounds). Returns 0 or a negative code; for tests. */
int kv_cache_check(const kv_cache *kv);

#endif
