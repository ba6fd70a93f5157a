/* kv_cache.c - the paged KV cache as a whole (kv_cache.h): the layer
 * groups of sliding-window models, shapes, create / free, the view the
 * attention kernels read, stats and the consistency check. The parts it
 * joins (kv_internal.h): the block pool (kv_pool.c), the prefix index
 * (kv_prefix.c) and the sequence slots (kv_seq.c). */
#include "kv/kv_cache.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kv/kv_internal.h"

/* ---- grouping ------------------------------------------------------------- */

/* The window layer l is grouped by: its own, or 0 (full attention) where
 * releasing blocks would save nothing or the cache cannot group. External
 * storage groups the same way: its owner lays its pool out as the cache
 * says (kv_cache_layer_place). */
static int kv_eff_window(const kv_cache_config *cfg, int l) {
    if (!cfg->layer_window || cfg->max_grow <= 0)
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
    char err[160];
    if (!cfg || cfg->n_layers <= 0 || cfg->kv_dim <= 0 || cfg->block_size <= 0 ||
        cfg->max_seqs <= 0 || cfg->max_seq_blocks <= 0 || cfg->max_grow < 0 ||
        cfg->max_seq_blocks > INT_MAX / cfg->block_size) /* capacities are ints */
        return 0;
    /* The dtype must hold the rows: its groups lie within one head. */
    int hd = kv_cfg_head_dim(cfg);
    return cfg->head_dim >= 0 && cfg->kv_dim % hd == 0 &&
           kern_kv_check(kv_cache_config_dtype(cfg), cfg->kv_dim / hd, hd, err, sizeof err) == 0;
}

/* The rest of *out from its groups (n_groups, layers_per_group set) and
 * their windows. */
static void kv_shape_fill(const kv_cache_config *cfg, const int *window, kv_cache_shape *out) {
    for (int g = 0; g < out->n_groups; g++) {
        long held = window[g] > 0 ? kv_window_held(cfg, window[g]) : cfg->max_seq_blocks;
        out->n_window_groups += window[g] > 0;
        out->seq_blocks += held < cfg->max_seq_blocks ? held : cfg->max_seq_blocks;
    }
    out->block_bytes = kv_pool_block_bytes(cfg, out->layers_per_group);
}

int kv_cache_shape_of(const kv_cache_config *cfg, kv_cache_shape *out) {
    int window[KV_MAX_GROUPS];
    if (!out || !kv_config_ok(cfg))
        return BRISK_EINVAL;
    memset(out, 0, sizeof *out);
    int rc = kv_plan_groups(cfg, NULL, NULL, window, &out->n_groups, &out->layers_per_group);
    if (rc < 0)
        return rc;
    kv_shape_fill(cfg, window, out);
    return 0;
}

/* ---- create / free -------------------------------------------------------- */

kv_cache *kv_cache_create_paged(const kv_cache_config *cfg) {
    if (!kv_config_ok(cfg) || cfg->n_blocks <= 0 || cfg->n_blocks == INT_MAX)
        return NULL;
    /* Sizes first, before anything is allocated per layer: the pool of every
     * layer (and the zero block) must fit a size_t. */
    if (!kv_pool_fits(cfg))
        return NULL;
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->cfg = *cfg;
    kv->cfg.prefix_cache = cfg->prefix_cache != 0;
    kv->cfg.layer_window = NULL; /* borrowed for this call only */
    kv->layer_group = kv_calloc((size_t)cfg->n_layers, sizeof *kv->layer_group);
    int *idx = kv_calloc((size_t)cfg->n_layers, sizeof *idx);
    if (!kv->layer_group || !idx ||
        kv_plan_groups(cfg, kv->layer_group, idx, kv->group_window, &kv->n_groups,
                       &kv->layers_per_group) < 0 ||
        kv_pool_init(kv, idx) < 0 || kv_prefix_init(kv) < 0 || kv_seq_init(kv) < 0) {
        free(idx);
        kv_cache_free(kv);
        return NULL;
    }
    free(idx);
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
    kv_seq_free(kv);
    kv_prefix_free(kv);
    kv_pool_free(kv);
    free(kv->layer_group);
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

int kv_cache_layer_place(const kv_cache *kv, int layer, int *group, size_t *base) {
    if (layer < 0 || layer >= kv->cfg.n_layers)
        return BRISK_ERANGE;
    *group = kv->layer_group[layer];
    *base = kv->pool.layer_base[layer];
    return 0;
}

void kv_cache_get_shape(const kv_cache *kv, kv_cache_shape *out) {
    memset(out, 0, sizeof *out);
    out->n_groups = kv->n_groups;
    out->layers_per_group = kv->layers_per_group;
    kv_shape_fill(&kv->cfg, kv->group_window, out);
}

int kv_cache_view(kv_cache *kv, int layer, int seq, kern_kv_view *out) {
    if (!out)
        return BRISK_EINVAL;
    if (layer < 0 || layer >= kv->cfg.n_layers || kv_bad_seq(kv, seq))
        return BRISK_ERANGE;
    kv_pool_view(kv, layer, out);
    out->block_table = kv_table(kv, &kv->seqs.slots[seq], kv->layer_group[layer]);
    out->block_size = kv->cfg.block_size;
    out->window = 0;
    out->softcap = 0.0f;
    return 0;
}

/* ---- accounting ----------------------------------------------------------- */

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *out) {
    memset(out, 0, sizeof *out);
    out->blocks_total = kv->cfg.n_blocks;
    out->blocks_cached = kv->pool.n_cached;
    out->blocks_free = kv->pool.n_free;
    out->blocks_used = kv->cfg.n_blocks - kv->pool.n_cached - kv->pool.n_free;
    out->slots_allocated = (long long)out->blocks_used * kv->cfg.block_size;
    out->slots_filled = kv->pool.filled;
    out->prefix_queries = kv->prefix.queries;
    out->prefix_hits = kv->prefix.hits;
    out->cow_copies = kv->seqs.cow_copies;
    out->evictions = kv->pool.evictions;
    out->window_released = kv->seqs.window_released;
}

/* Each part checks its own invariants: the slots first (counting the table
 * entries that hold each block), then the pool against those counts, then
 * the prefix index. */
int kv_cache_check(const kv_cache *kv) {
    int32_t *count = kv_calloc((size_t)kv->cfg.n_blocks, sizeof *count);
    uint8_t *seen = kv_calloc((size_t)kv->cfg.n_blocks, 1);
    int rc = KV_BAD_NOMEM;
    if (count && seen) {
        rc = kv_seq_check(kv, count);
        if (rc == 0)
            rc = kv_prefix_check(kv);
        if (rc == 0)
            rc = kv_pool_check(kv, count, seen);
    }
    free(count);
    free(seen);
    return rc;
}
