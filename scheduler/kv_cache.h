/* kv_cache.h - the key/value cache behind a small interface.
 *
 * The model never owns KV memory: it asks the cache for a view of one
 * (layer, sequence) pair and reads/writes rows through the block table in
 * kern_kv_view. This version is contiguous (one block of max_ctx positions
 * per sequence slot); the paged cache of the scheduler issue implements the
 * same view with many small blocks, so the forward pass does not change.
 *
 * Memory: n_layers * n_seqs * max_ctx * kv_dim * 2 (K and V) floats,
 * allocated once by kv_cache_create and freed by kv_cache_free. */
#ifndef KV_CACHE_H
#define KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_ops.h"

typedef struct kv_cache kv_cache;

/* Returns NULL if an argument is out of range or allocation fails. */
kv_cache *kv_cache_create(int n_layers, int kv_dim, int n_seqs, int max_ctx);
void kv_cache_free(kv_cache *kv);

int kv_cache_n_seqs(const kv_cache *kv);
/* Positions one sequence can hold. */
int kv_cache_max_ctx(const kv_cache *kv);
size_t kv_cache_bytes(const kv_cache *kv);

/* Fills *out for (layer, seq). Returns 0, or BRISK_ERANGE for a bad index. */
int kv_cache_view(kv_cache *kv, int layer, int seq, kern_kv_view *out);

#endif
