#include "scheduler/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

struct kv_cache {
    int n_layers, kv_dim, n_seqs, max_ctx;
    size_t seq_floats;   /* floats of one (layer, seq) K or V region */
    float *k, *v;        /* [n_layers][n_seqs][max_ctx][kv_dim] */
    int32_t zero_block;  /* the one-entry block table of a contiguous slot */
};

kv_cache *kv_cache_create(int n_layers, int kv_dim, int n_seqs, int max_ctx) {
    if (n_layers <= 0 || kv_dim <= 0 || n_seqs <= 0 || max_ctx <= 0) return NULL;
    size_t seq_floats = (size_t)max_ctx * (size_t)kv_dim;
    size_t total = seq_floats * (size_t)n_seqs * (size_t)n_layers;
    if (total / (size_t)n_layers / (size_t)n_seqs != seq_floats || total > ((size_t)1 << 40)) return NULL;
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->n_seqs = n_seqs;
    kv->max_ctx = max_ctx;
    kv->seq_floats = seq_floats;
    /* 64-byte alignment keeps every row start friendly to AVX-512 loads. */
    size_t bytes = (total * sizeof(float) + 63) & ~(size_t)63;
    kv->k = aligned_alloc(64, bytes);
    kv->v = aligned_alloc(64, bytes);
    if (!kv->k || !kv->v) {
        kv_cache_free(kv);
        return NULL;
    }
    /* Unwritten positions are never read (attention stops at pos), but zeroing
     * keeps sanitizer and valgrind runs free of uninitialised-read noise. */
    memset(kv->k, 0, bytes);
    memset(kv->v, 0, bytes);
    kv->zero_block = 0;
    return kv;
}

void kv_cache_free(kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

int kv_cache_n_seqs(const kv_cache *kv) { return kv->n_seqs; }
int kv_cache_max_ctx(const kv_cache *kv) { return kv->max_ctx; }
size_t kv_cache_bytes(const kv_cache *kv) {
    return 2 * kv->seq_floats * (size_t)kv->n_seqs * (size_t)kv->n_layers * sizeof(float);
}

int kv_cache_view(kv_cache *kv, int layer, int seq, kern_kv_view *out) {
    if (layer < 0 || layer >= kv->n_layers || seq < 0 || seq >= kv->n_seqs) return BRISK_ERANGE;
    size_t off = ((size_t)layer * (size_t)kv->n_seqs + (size_t)seq) * kv->seq_floats;
    out->k = kv->k + off;
    out->v = kv->v + off;
    out->block_table = &kv->zero_block;
    out->block_size = kv->max_ctx;
    out->block_stride = kv->seq_floats;
    out->row_stride = (size_t)kv->kv_dim;
    return 0;
}
