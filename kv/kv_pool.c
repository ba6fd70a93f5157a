/* kv_pool.c - the KV cache's block pool (kv_internal.h): the storage of K
 * and V, and the per-block state (reference counts, fill counts, the free
 * stack and the LRU list of cached blocks).
 *
 * Storage. Everything that depends on what one stored element is (its
 * bytes, the pool's size, the view's pointers, the bytes a copy-on-write
 * moves) is in this file, in terms of a dtype of the kernels' KV table
 * (kern_kv.h) and its layer-block bytes: a new dtype changes that table and
 * no part of the cache. */
#include <assert.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kv/kv_internal.h"

/* ---- storage ------------------------------------------------------------- */

/* The one rule for the stored element is kern_kv.h's: a dtype, whose
 * layer-block bytes (kern_kv_layer_block_bytes) size everything here. */

kern_kv_dtype kv_cache_config_dtype(const kv_cache_config *cfg) {
    if (cfg->dtype != KERN_KV_F32)
        return cfg->dtype;
    return cfg->f16 ? KERN_KV_F16 : KERN_KV_F32;
}

int kv_cfg_head_dim(const kv_cache_config *cfg) {
    return cfg->head_dim > 0 ? cfg->head_dim : cfg->kv_dim;
}

size_t kv_cache_pool_bytes(int n_layers, int kv_dim, int block_size, long n_blocks) {
    return kv_cache_pool_bytes_dtype(n_layers, kv_dim, block_size, n_blocks, 0);
}

size_t kv_cache_pool_bytes_dtype(int n_layers, int kv_dim, int block_size, long n_blocks, int f16) {
    return kv_cache_pool_bytes_kv(f16 ? KERN_KV_F16 : KERN_KV_F32, n_layers, kv_dim, kv_dim,
                                  block_size, n_blocks);
}

size_t kv_cache_pool_bytes_kv(kern_kv_dtype dtype, int n_layers, int kv_dim, int head_dim,
                              int block_size, long n_blocks) {
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return 0;
    size_t s =
        kern_kv_layer_block_bytes(dtype, kv_dim, head_dim > 0 ? head_dim : kv_dim, block_size);
    if (s == 0 || !kv_mul(s, 2, &s) || !kv_mul(s, (size_t)n_layers, &s) ||
        !kv_mul(s, (size_t)n_blocks, &s))
        return 0;
    return s;
}

size_t kv_pool_block_bytes(const kv_cache_config *cfg, int layers) {
    return kv_cache_pool_bytes_kv(kv_cache_config_dtype(cfg), layers, cfg->kv_dim,
                                  kv_cfg_head_dim(cfg), cfg->block_size, 1);
}

int kv_pool_fits(const kv_cache_config *cfg) {
    char err[160];
    int hd = kv_cfg_head_dim(cfg);
    if (cfg->kv_dim % hd != 0 ||
        kern_kv_check(kv_cache_config_dtype(cfg), cfg->kv_dim / hd, hd, err, sizeof err) < 0)
        return 0;
    size_t check =
        kern_kv_layer_block_bytes(kv_cache_config_dtype(cfg), cfg->kv_dim, hd, cfg->block_size);
    return check != 0 && kv_mul(check, (size_t)cfg->n_blocks + 1, &check) &&
           kv_mul(check, (size_t)cfg->n_layers, &check) && kv_mul(check, 2, &check);
}

/* A pool of `bytes` zeroed bytes, its start 64-byte aligned within *mem.
 * Zeroed by calloc, which takes a pool this large straight from fresh
 * (mmap'd) pages without writing them: the kernel zeroes each page when it
 * is first touched, so resident memory grows with the blocks the engine
 * uses instead of the whole budget at start (SmolLM2, 1 GiB of f32 KV:
 * 1.06 GB resident right after start with the memset this replaces).
 * Unwritten rows are never read (attention stops at the position; the zero
 * block is read with zero weight), and zeroed memory keeps sanitizer and
 * Valgrind runs free of uninitialised reads. 64-byte alignment (by hand:
 * calloc gives 16) keeps every row start friendly to AVX-512 loads. */
static unsigned char *kv_storage_alloc(size_t bytes, void **mem) {
    *mem = calloc(1, bytes + 64);
    return *mem ? (unsigned char *)(((uintptr_t)*mem + 63) & ~(uintptr_t)63) : NULL;
}

int kv_pool_init(kv_cache *kv, const int *layer_idx) {
    const kv_cache_config *cfg = &kv->cfg;
    kv_pool *p = &kv->pool;
    int windowed = 0;
    for (int g = 0; g < kv->n_groups; g++)
        windowed |= kv->group_window[g] > 0;
    /* With windows one more block: the zero rows released entries point at. */
    size_t n_store = (size_t)cfg->n_blocks + (size_t)windowed;
    p->dtype = kv_cache_config_dtype(cfg);
    p->unit = kern_kv_unit_bytes(p->dtype);
    size_t lb =
        kern_kv_layer_block_bytes(p->dtype, cfg->kv_dim, kv_cfg_head_dim(cfg), cfg->block_size);
    size_t block_units = lb / p->unit, pool_units, pool_bytes, kv_bytes;
    if (lb == 0 || !kv_mul(block_units, n_store, &pool_units) ||
        !kv_mul(pool_units, (size_t)kv->layers_per_group, &pool_units) ||
        !kv_mul(pool_units, p->unit, &pool_bytes) || pool_bytes > SIZE_MAX - 64 ||
        !kv_mul(pool_bytes, 2, &kv_bytes))
        return BRISK_ERANGE;
    p->bytes = kv_bytes;
    p->block_units = block_units;
    p->scale_off = kern_kv_scale_off(p->dtype, cfg->kv_dim, cfg->block_size);
    p->hole = windowed ? cfg->n_blocks : KV_NONE;
    p->block_stride = windowed ? (size_t)kv->layers_per_group * block_units : block_units;
    p->layer_base = kv_calloc((size_t)cfg->n_layers, sizeof *p->layer_base);
    if (!p->layer_base)
        return BRISK_ENOMEM;
    for (int l = 0; l < cfg->n_layers; l++)
        p->layer_base[l] = windowed ? (size_t)layer_idx[l] * block_units
                                    : (size_t)l * (size_t)cfg->n_blocks * block_units;
    int external = cfg->copy_rows != NULL; /* K/V live in the caller's (device) pool */
    if (!external) {
        p->k = kv_storage_alloc(pool_bytes, &p->k_mem);
        p->v = kv_storage_alloc(pool_bytes, &p->v_mem);
    }
    size_t nb = (size_t)cfg->n_blocks;
    p->ref = kv_calloc(nb, sizeof *p->ref);
    p->fill = kv_calloc(nb, sizeof *p->fill);
    p->lru_prev = kv_calloc(nb, sizeof *p->lru_prev);
    p->lru_next = kv_calloc(nb, sizeof *p->lru_next);
    p->free_stack = kv_calloc(nb, sizeof *p->free_stack);
    if ((!external && (!p->k || !p->v)) || !p->ref || !p->fill || !p->lru_prev || !p->lru_next ||
        !p->free_stack)
        return BRISK_ENOMEM;
    p->lru_head = p->lru_tail = KV_NONE;
    /* Pushed last id first, so blocks are handed out 0, 1, 2...: the slots
     * of kv_cache_create each get one run of consecutive blocks. */
    for (int i = 0; i < cfg->n_blocks; i++) {
        p->lru_prev[i] = p->lru_next[i] = KV_NONE;
        p->free_stack[i] = cfg->n_blocks - 1 - i;
    }
    p->n_free = cfg->n_blocks;
    return 0;
}

void kv_pool_free(kv_cache *kv) {
    kv_pool *p = &kv->pool;
    free(p->layer_base);
    free(p->k_mem);
    free(p->v_mem);
    free(p->ref);
    free(p->fill);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->free_stack);
    memset(p, 0, sizeof *p);
}

size_t kv_cache_bytes(const kv_cache *kv) {
    return kv->pool.bytes;
}

kern_kv_dtype kv_cache_dtype(const kv_cache *kv) {
    return kv->pool.dtype;
}

size_t kv_cache_copy_bytes(const kv_cache *kv, int n_rows) {
    const kv_pool *p = &kv->pool;
    if (kern_kv_is_quant(p->dtype)) /* the scales lie after every row's codes */
        return p->block_units * p->unit;
    return (size_t)n_rows * (size_t)kv->cfg.kv_dim * p->unit;
}

void kv_pool_view(const kv_cache *kv, int layer, kern_kv_view *out) {
    const kv_pool *p = &kv->pool;
    size_t off = p->layer_base[layer] * p->unit;
    out->k = out->v = NULL;
    out->k16 = out->v16 = NULL;
    out->kq = out->vq = NULL;
    if (p->k) { /* external storage: the owner of the pool adds the layer offset */
        if (p->dtype == KERN_KV_F32) {
            out->k = (float *)(void *)(p->k + off);
            out->v = (float *)(void *)(p->v + off);
        } else if (p->dtype == KERN_KV_F16) {
            out->k16 = (uint16_t *)(void *)(p->k + off);
            out->v16 = (uint16_t *)(void *)(p->v + off);
        } else {
            out->kq = p->k + off;
            out->vq = p->v + off;
        }
    }
    out->dtype = p->dtype;
    out->scale_off = p->scale_off;
    out->block_stride = p->block_stride;
    out->row_stride = (size_t)kv->cfg.kv_dim;
}

void kv_pool_copy_rows(kv_cache *kv, int g, int32_t dst, int32_t src, int rows) {
    const kv_pool *p = &kv->pool;
    size_t n = kv_cache_copy_bytes(kv, rows);
    if (kv->cfg.copy_rows && rows > 0)
        kv->cfg.copy_rows(kv->cfg.copy_ctx, dst, src, rows);
    for (int l = 0; p->k && l < kv->cfg.n_layers; l++) {
        if (kv->layer_group[l] != g)
            continue;
        size_t to = (p->layer_base[l] + (size_t)dst * p->block_stride) * p->unit;
        size_t from = (p->layer_base[l] + (size_t)src * p->block_stride) * p->unit;
        memcpy(p->k + to, p->k + from, n);
        memcpy(p->v + to, p->v + from, n);
    }
}

/* ---- block states --------------------------------------------------------- */

static void kv_lru_unlink(kv_pool *p, int32_t id) {
    int32_t prev = p->lru_prev[id], next = p->lru_next[id];
    if (prev != KV_NONE)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next != KV_NONE)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->lru_prev[id] = p->lru_next[id] = KV_NONE;
    p->n_cached--;
}

static void kv_lru_append(kv_pool *p, int32_t id) {
    p->lru_prev[id] = p->lru_tail;
    p->lru_next[id] = KV_NONE;
    if (p->lru_tail != KV_NONE)
        p->lru_next[p->lru_tail] = id;
    else
        p->lru_head = id;
    p->lru_tail = id;
    p->n_cached++;
}

int32_t kv_pool_alloc(kv_cache *kv) {
    kv_pool *p = &kv->pool;
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_stack[--p->n_free];
    } else {
        id = p->lru_head;
        assert(id != KV_NONE);
        kv_lru_unlink(p, id);
        kv_prefix_unregister(kv, id);
        p->evictions++;
    }
    assert(p->ref[id] == 0 && !kv_prefix_has(kv, id));
    p->ref[id] = 1;
    p->fill[id] = 0;
    return id;
}

void kv_pool_ref(kv_cache *kv, int32_t id) {
    kv_pool *p = &kv->pool;
    if (p->ref[id] == 0) {
        assert(kv_prefix_has(kv, id));
        kv_lru_unlink(p, id);
        p->filled += p->fill[id];
    }
    p->ref[id]++;
}

void kv_pool_unref(kv_cache *kv, int32_t id) {
    kv_pool *p = &kv->pool;
    assert(p->ref[id] > 0);
    if (--p->ref[id] > 0)
        return;
    p->filled -= p->fill[id];
    if (kv_prefix_has(kv, id)) {
        kv_lru_append(p, id);
    } else {
        p->fill[id] = 0;
        p->free_stack[p->n_free++] = id;
    }
}

void kv_pool_set_fill(kv_cache *kv, int32_t id, int rows) {
    kv_pool *p = &kv->pool;
    if (rows <= p->fill[id])
        return;
    if (p->ref[id] > 0)
        p->filled += rows - p->fill[id];
    p->fill[id] = rows;
}

int kv_cache_n_available(const kv_cache *kv) {
    return kv->pool.n_free + kv->pool.n_cached;
}

/* ---- invariants ------------------------------------------------------------ */

int kv_pool_check(const kv_cache *kv, const int32_t *count, uint8_t *seen) {
    const kv_pool *p = &kv->pool;
    int n = kv->cfg.n_blocks, n_cached = 0, n_free = 0;
    long long filled = 0;
    for (int id = 0; id < n; id++) {
        if (count[id] != p->ref[id])
            return KV_BAD_REF;
        if (p->fill[id] < 0 || p->fill[id] > kv->cfg.block_size)
            return KV_BAD_FILL;
        if (p->ref[id] > 0)
            filled += p->fill[id];
        else if (!kv_prefix_has(kv, id) && p->fill[id] != 0)
            return KV_BAD_FILL;
        n_cached += p->ref[id] == 0 && kv_prefix_has(kv, id);
        n_free += p->ref[id] == 0 && !kv_prefix_has(kv, id);
    }
    /* LRU: walk it forwards, checking the back links and the members. */
    int walked = 0;
    int32_t prev = KV_NONE;
    for (int32_t id = p->lru_head; id != KV_NONE; prev = id, id = p->lru_next[id]) {
        if (id < 0 || id >= n || seen[id] || walked >= n)
            return KV_BAD_LRU;
        if (p->lru_prev[id] != prev || p->ref[id] != 0 || !kv_prefix_has(kv, id))
            return KV_BAD_LRU;
        if (p->lru_next[id] == KV_NONE && p->lru_tail != id)
            return KV_BAD_LRU;
        seen[id] = 1;
        walked++;
    }
    if (walked != n_cached || p->n_cached != n_cached ||
        (p->lru_head == KV_NONE) != (p->lru_tail == KV_NONE))
        return KV_BAD_LRU;
    if (p->n_free != n_free)
        return KV_BAD_FREE;
    for (int i = 0; i < p->n_free; i++) {
        int32_t id = p->free_stack[i];
        if (id < 0 || id >= n || seen[id] || p->ref[id] != 0 || kv_prefix_has(kv, id))
            return KV_BAD_FREE;
        seen[id] = 1;
    }
    int used = 0;
    for (int id = 0; id < n; id++)
        used += p->ref[id] > 0;
    if (used + n_cached + n_free != n || filled != p->filled)
        return KV_BAD_COUNT;
    return 0;
}
