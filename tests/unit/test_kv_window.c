/* test_kv_window.c - the paged KV cache with sliding-window layers: the
 * grouping of layers into block tables, the release of the blocks behind a
 * window, attention over a released table giving the same bits as over a
 * full one, prefix-cache hits limited to what every group still holds, fork
 * across a released range, and a randomized stress run against a shadow of
 * every slot's tokens with kv_cache_check after each operation. The stress
 * run is made twice: with the cache's own storage, and with external storage
 * (the CUDA backend's case: the cache keeps the books, the owner keeps the
 * pool, laid out by kv_cache_layer_place and kv_cache_seq_table, and copies
 * whole grouped blocks on copy-on-write), here a host array the test owns. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kernels/cpu/kern_ops.h"
#include "kv/kv_cache.h"

/* Six layers: windows W W 0 W W 0, so classes of 4 and 2 layers, groups of
 * 2: one full-attention group (layers 2 and 5) and two window groups. */
enum { NL = 6, D = 8, BS = 4, W = 6, GROW = 4, MSB = 32, NB = 64, NSEQ = 4 };
static const int WINDOWS[NL] = {W, W, 0, W, W, 0};

static kv_cache *make(const int *windows, int n_blocks, int f16) {
    kv_cache_config c = {.n_layers = NL,
                         .kv_dim = D,
                         .block_size = BS,
                         .n_blocks = n_blocks,
                         .max_seqs = NSEQ,
                         .max_seq_blocks = MSB,
                         .prefix_cache = 1,
                         .f16 = f16,
                         .layer_window = windows,
                         .max_grow = GROW};
    return kv_cache_create_paged(&c);
}

/* ---- external storage --------------------------------------------------------- */

/* The pool of an external-storage cache, as its owner (the CUDA backend)
 * keeps it: kv_cache_bytes of zeroes, every address from kv_cache_layer_place
 * and the slot's table of the layer's group. */
typedef struct ext_pool {
    kv_cache *kv;
    float *k, *v;
    size_t block_stride, row_stride; /* from a view (the same for every layer) */
    int n_copy;                      /* layers one block holds */
    size_t copy_base[NL];            /* and where each lies (group 0's layers) */
} ext_pool;

static ext_pool g_ext;

/* Copy-on-write of rows [0, n_rows) of block src into dst in every layer
 * the block holds, K and V: what the CUDA backend's cuda_copy_rows does. */
static void ext_copy_rows(void *ctx, int32_t dst, int32_t src, int n_rows) {
    ext_pool *e = ctx;
    size_t n = (size_t)n_rows * e->row_stride * sizeof(float);
    for (int i = 0; i < e->n_copy; i++) {
        size_t to = e->copy_base[i] + (size_t)dst * e->block_stride;
        size_t from = e->copy_base[i] + (size_t)src * e->block_stride;
        memcpy(e->k + to, e->k + from, n);
        memcpy(e->v + to, e->v + from, n);
    }
}

/* A windowed cache with external storage in g_ext (freed by ext_free). */
static kv_cache *make_ext(int n_blocks) {
    memset(&g_ext, 0, sizeof g_ext);
    kv_cache_config c = {.n_layers = NL,
                         .kv_dim = D,
                         .block_size = BS,
                         .n_blocks = n_blocks,
                         .max_seqs = NSEQ,
                         .max_seq_blocks = MSB,
                         .prefix_cache = 1,
                         .layer_window = WINDOWS,
                         .max_grow = GROW,
                         .copy_rows = ext_copy_rows,
                         .copy_ctx = &g_ext};
    kv_cache *kv = kv_cache_create_paged(&c);
    if (!kv)
        return NULL;
    size_t half = kv_cache_bytes(kv) / 2;
    g_ext.k = calloc(1, half);
    g_ext.v = calloc(1, half);
    kern_kv_view w;
    if (!g_ext.k || !g_ext.v || kv_cache_view(kv, 0, 0, &w) != 0) {
        kv_cache_free(kv);
        free(g_ext.k), free(g_ext.v);
        return NULL;
    }
    g_ext.block_stride = w.block_stride;
    g_ext.row_stride = w.row_stride;
    for (int l = 0; l < NL; l++) {
        int g;
        size_t base;
        if (kv_cache_layer_place(kv, l, &g, &base) == 0 && g == 0)
            g_ext.copy_base[g_ext.n_copy++] = base;
    }
    g_ext.kv = kv;
    return kv;
}

static void ext_free(void) {
    kv_cache_free(g_ext.kv);
    free(g_ext.k), free(g_ext.v);
    memset(&g_ext, 0, sizeof g_ext);
}

/* A value in [-1, 1) that depends only on (token, position, layer, d, v):
 * the same prefix gives the same rows in any cache. */
static float kval(int tok, int pos, int layer, int d, int v) {
    uint64_t x =
        ((((uint64_t)tok * 4099 + (uint64_t)pos) * 31 + (uint64_t)layer) * 67 + (uint64_t)d) * 2 +
        (uint64_t)v + 0x9e3779b97f4a7c15ull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (float)((double)(x >> 40) / (double)(1ull << 23)) - 1.0f;
}

/* Address of the (layer, slot, position) row through the view, as the
 * attention kernels find it; its block id in *id. With external storage
 * (g_ext), through the layer's place and its group's table, as the CUDA
 * backend finds it (NULL if that table is not the view's). */
static float *row(kv_cache *kv, int layer, int seq, int pos, int v, int32_t *id) {
    kern_kv_view w;
    if (kv_cache_view(kv, layer, seq, &w) != 0)
        return NULL;
    *id = w.block_table[pos / w.block_size];
    size_t off = (size_t)*id * w.block_stride + (size_t)(pos % w.block_size) * w.row_stride;
    if (kv == g_ext.kv) {
        int g;
        size_t base;
        if (kv_cache_layer_place(kv, layer, &g, &base) != 0 ||
            kv_cache_seq_table(kv, seq, g) != w.block_table || w.k || w.v)
            return NULL;
        return (v ? g_ext.v : g_ext.k) + base + off;
    }
    return (v ? w.v : w.k) + off;
}

/* 0, or -1 where a row has no address (an external layout gone wrong). */
static int compute(kv_cache *kv, int seq, const int32_t *tok, int from, int to) {
    int32_t id = 0;
    for (int p = from; p < to; p++)
        for (int l = 0; l < NL; l++)
            for (int v = 0; v < 2; v++) {
                float *r = row(kv, l, seq, p, v, &id);
                if (!r)
                    return -1;
                for (int d = 0; d < D; d++)
                    r[d] = kval(tok[p], p, l, d, v);
            }
    return 0;
}

/* 1 if every position a query at n (or later) sees holds tok's values in
 * every layer, and every released row reads as zero. */
static int holds(kv_cache *kv, int seq, const int32_t *tok, int n) {
    int32_t id = 0;
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < n; p++)
            for (int v = 0; v < 2; v++) {
                const float *r = row(kv, l, seq, p, v, &id);
                if (!r)
                    return 0;
                int seen = WINDOWS[l] == 0 || p >= n - WINDOWS[l] + 1;
                for (int d = 0; d < D; d++) {
                    if (id == NB && r[d] != 0.0f)
                        return 0; /* the zero block */
                    if (id != NB && seen && r[d] != kval(tok[p], p, l, d, v))
                        return 0;
                    if (id == NB && seen)
                        return 0; /* released while still seen */
                }
            }
    return 1;
}

static int step(kv_cache *kv, int seq, const int32_t *tok, int n, int commit) {
    int n_pos = kv_cache_seq_n_pos(kv, seq);
    int rc = kv_cache_seq_grow(kv, seq, n);
    if (rc < 0)
        return rc;
    if (compute(kv, seq, tok, n_pos, n_pos + n) < 0)
        return BRISK_EINVAL;
    kv_cache_seq_set_pos(kv, seq, n_pos + n);
    if (commit)
        kv_cache_seq_commit(kv, seq, tok, n_pos + n);
    return 0;
}

static kv_cache_stats stats(const kv_cache *kv) {
    kv_cache_stats s;
    kv_cache_get_stats(kv, &s);
    return s;
}

static void test_shape(void) {
    kv_cache_config c = {.n_layers = NL,
                         .kv_dim = D,
                         .block_size = BS,
                         .max_seqs = NSEQ,
                         .max_seq_blocks = MSB,
                         .layer_window = WINDOWS,
                         .max_grow = GROW};
    kv_cache_shape sh;
    CHECK(kv_cache_shape_of(&c, &sh) == 0, "shape");
    /* a window group holds ceil((6 - 1 + 4) / 4) + 1 = 4 blocks at most */
    CHECK(sh.n_groups == 3 && sh.n_window_groups == 2 && sh.layers_per_group == 2 &&
              sh.seq_blocks == MSB + 2 * 4 && sh.block_bytes == 2 * 2 * BS * D * sizeof(float),
          "groups %d/%d, %d layers each, %ld blocks, %zu bytes", sh.n_groups, sh.n_window_groups,
          sh.layers_per_group, sh.seq_blocks, sh.block_bytes);
    /* No bound on a grow, or a window as long as the context: one table. */
    c.max_grow = 0;
    CHECK(kv_cache_shape_of(&c, &sh) == 0 && sh.n_groups == 1 && sh.seq_blocks == MSB,
          "no max_grow: %d groups", sh.n_groups);
    c.max_grow = GROW;
    const int wide[NL] = {0, 200, 0, 200, 0, 200};
    c.layer_window = wide;
    CHECK(kv_cache_shape_of(&c, &sh) == 0 && sh.n_groups == 1 && sh.layers_per_group == NL,
          "window past the context: %d groups", sh.n_groups);
    /* Gemma 3's pattern (5 local, 1 global) over 26 layers: 4 global, 22
     * local, groups of gcd(4, 22) = 2 layers. */
    int g3[26];
    for (int l = 0; l < 26; l++)
        g3[l] = (l + 1) % 6 == 0 ? 0 : 512;
    c.n_layers = 26;
    c.layer_window = g3;
    c.max_seq_blocks = 256;
    c.block_size = 16;
    c.max_grow = 512;
    CHECK(kv_cache_shape_of(&c, &sh) == 0 && sh.n_groups == 13 && sh.n_window_groups == 11 &&
              sh.layers_per_group == 2 && sh.seq_blocks == 2 * 256 + 11 * 65,
          "gemma3 1b: %d groups (%d window) of %d, %ld blocks", sh.n_groups, sh.n_window_groups,
          sh.layers_per_group, sh.seq_blocks);
}

/* kv_cache_layer_place and kv_cache_seq_table say where the cache's own
 * storage puts each layer (its view's pointer less the pool's start) and
 * which table addresses it, grouped and not; an external-storage cache of
 * the same configuration groups alike. */
static void test_layer_place(void) {
    const int none[NL] = {0};
    for (int windowed = 1; windowed >= 0; windowed--) {
        kv_cache *kv = make(windowed ? WINDOWS : none, NB, 0);
        CHECK(kv != NULL, "cache");
        if (!kv)
            return;
        kern_kv_view w0, w;
        int ok = kv_cache_view(kv, 0, 1, &w0) == 0, g0 = -1, n_g = 0;
        size_t base0 = 1;
        ok &= kv_cache_layer_place(kv, 0, &g0, &base0) == 0 && base0 == 0; /* the pool's start */
        for (int l = 0; ok && l < NL; l++) {
            int g;
            size_t base;
            ok &= kv_cache_view(kv, l, 1, &w) == 0 && kv_cache_layer_place(kv, l, &g, &base) == 0;
            ok &= ok && (size_t)(w.k - w0.k) == base && (size_t)(w.v - w0.v) == base &&
                  kv_cache_seq_table(kv, 1, g) == w.block_table;
            /* grouped: layers 2 and 5 the full group 0, the window pairs groups 1 and 2 */
            int want_g = !windowed ? 0 : l == 2 || l == 5 ? 0 : l < 2 ? 1 : 2;
            ok &= g == want_g &&
                  base == (windowed ? (size_t)(l == 2 || l == 5 ? l / 3 : l % 3) * BS * D
                                    : (size_t)l * NB * BS * D);
            n_g = g + 1 > n_g ? g + 1 : n_g;
        }
        int gs;
        size_t bs;
        ok &= kv_cache_layer_place(kv, NL, &gs, &bs) == BRISK_ERANGE &&
              kv_cache_layer_place(kv, -1, &gs, &bs) == BRISK_ERANGE &&
              kv_cache_seq_table(kv, 1, n_g) == NULL && kv_cache_seq_table(kv, 1, -1) == NULL &&
              kv_cache_seq_table(kv, NSEQ, 0) == NULL &&
              kv_cache_seq_table(kv, 1, 0) == kv_cache_seq_blocks(kv, 1);
        CHECK(ok && n_g == (windowed ? 3 : 1), "layer places, %s (%d groups)",
              windowed ? "grouped" : "one table", n_g);
        kv_cache_free(kv);
    }
    kv_cache *ext = make_ext(NB);
    CHECK(ext != NULL, "external cache");
    if (!ext)
        return;
    kv_cache_shape sh;
    kv_cache_get_shape(ext, &sh);
    CHECK(sh.n_groups == 3 && sh.layers_per_group == 2 && g_ext.n_copy == 2 &&
              g_ext.copy_base[1] == (size_t)BS * D && g_ext.block_stride == (size_t)2 * BS * D &&
              kv_cache_bytes(ext) == (size_t)(NB + 1) * sh.block_bytes,
          "external storage groups: %d groups of %d, %zu bytes", sh.n_groups, sh.layers_per_group,
          kv_cache_bytes(ext));
    ext_free();
}

/* One sequence past its window: the window groups hold a window's worth, the
 * full group everything, and released entries read the zero block. */
static void test_release(void) {
    kv_cache *kv = make(WINDOWS, NB, 0);
    CHECK(kv != NULL, "windowed cache");
    if (!kv)
        return;
    /* The pool: NB blocks of 2 layers plus the zero block, K and V. */
    kv_cache_shape sh;
    kv_cache_get_shape(kv, &sh);
    CHECK(kv_cache_bytes(kv) == (size_t)(NB + 1) * sh.block_bytes &&
              sh.block_bytes == 2 * 2 * BS * D * sizeof(float) && sh.seq_blocks == MSB + 2 * 4,
          "pool %zu bytes, blocks of %zu", kv_cache_bytes(kv), sh.block_bytes);
    int32_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = i % 7;
    int ok = 1;
    for (int n = 0; n < 40 && ok; n += GROW) {
        ok &= step(kv, 0, tok, GROW, 1) == 0 && kv_cache_check(kv) == 0 &&
              holds(kv, 0, tok, n + GROW);
        /* full group: (n + 4) / 4 blocks; each window group at most 4 */
        ok &= stats(kv).blocks_used <= (n + GROW) / BS + 2 * 4;
    }
    CHECK(ok, "steps past the window: check, values, blocks");
    /* At 40 positions (the last grow at 36 released below block 31 / 4 = 7):
     * 10 full blocks + 2 x 3 window blocks, where one table would use 30. */
    kv_cache_stats st = stats(kv);
    CHECK(st.blocks_used == 16 && st.window_released == 2 * 7, "used %d, released %lld",
          st.blocks_used, st.window_released);
    /* Moving back behind what was released is refused; within it is fine. */
    kv_cache_seq_set_pos(kv, 0, 20);
    CHECK(kv_cache_seq_n_pos(kv, 0) == 40, "set_pos behind the release ignored");
    kv_cache_seq_set_pos(kv, 0, 38);
    CHECK(kv_cache_seq_n_pos(kv, 0) == 38 && kv_cache_check(kv) == 0, "set_pos back within it");
    kv_cache_seq_set_pos(kv, 0, 40);
    /* The blocks a whole prompt would need: the full group's for every
     * position, a window group's for what it holds at once. */
    CHECK(kv_cache_seq_blocks_needed(kv, 1, 40) == 10 + 2 * 4 &&
              kv_cache_seq_blocks_needed(kv, 1, 4) == 3,
          "blocks needed %d, %d", kv_cache_seq_blocks_needed(kv, 1, 40),
          kv_cache_seq_blocks_needed(kv, 1, 4));
    kv_cache_seq_release(kv, 0);
    st = stats(kv);
    CHECK(st.blocks_used == 0 && kv_cache_check(kv) == 0, "released");
    kv_cache_free(kv);
}

/* The same rows in a released table and in one table of every position:
 * attention reads the zero block with weight exactly zero, so every level's
 * output is the same bits, f32 and f16. */
static void test_attention_same_bits(void) {
    for (int f16 = 0; f16 < 2; f16++) {
        kv_cache *a = make(WINDOWS, NB, f16), *b = make(NULL, NB, f16);
        CHECK(a && b, "caches");
        if (!a || !b) {
            kv_cache_free(a);
            kv_cache_free(b);
            return;
        }
        int32_t tok[44];
        for (int i = 0; i < 44; i++)
            tok[i] = (i * 5) % 11;
        for (int n = 0; n < 44; n += GROW) {
            /* f16 caches: store through the f32 helper by rounding */
            int n_pos = kv_cache_seq_n_pos(a, 0);
            kv_cache_seq_grow(a, 0, GROW);
            kv_cache_seq_grow(b, 0, GROW);
            for (int p = n_pos; p < n_pos + GROW; p++)
                for (int l = 0; l < NL; l++)
                    for (int v = 0; v < 2; v++) {
                        float x[D];
                        for (int d = 0; d < D; d++)
                            x[d] = kval(tok[p], p, l, d, v);
                        kv_cache *cs[2] = {a, b};
                        for (int i = 0; i < 2; i++) {
                            kern_kv_view w;
                            kv_cache_view(cs[i], l, 0, &w);
                            size_t off = (size_t)w.block_table[p / BS] * w.block_stride +
                                         (size_t)(p % BS) * w.row_stride;
                            if (f16)
                                kern_fp32_to_fp16_row((v ? w.v16 : w.k16) + off, x, D);
                            else
                                memcpy((v ? w.v : w.k) + off, x, sizeof x);
                        }
                    }
            kv_cache_seq_set_pos(a, 0, n_pos + GROW);
            kv_cache_seq_set_pos(b, 0, n_pos + GROW);
        }
        CHECK(stats(a).window_released > 0, "released some");
        /* 4 query rows at positions 40..43 of a window layer, 2 heads. */
        enum { HD = D, NH = 2, NR = 4, POS0 = 40 };
        float q[NR * NH * HD], out_a[NR * NH * HD], out_b[NR * NH * HD], sa[4096], sb[4096];
        for (int i = 0; i < NR * NH * HD; i++)
            q[i] = kval(i, 7, 3, i % D, 0) * 2.0f;
        int same = 1;
        for (int layer = 0; layer < 2; layer++) { /* a window layer, then a full one */
            int l = layer == 0 ? 1 : 2;
            kern_kv_view va, vb;
            kv_cache_view(a, l, 0, &va);
            kv_cache_view(b, l, 0, &vb);
            va.window = vb.window = WINDOWS[l];
            kern_attention_rows_gqa(out_a, NH * HD, q, NH * HD, NR, NH, POS0, &va, 0, HD, 0.35f,
                                    sa);
            kern_attention_rows_gqa(out_b, NH * HD, q, NH * HD, NR, NH, POS0, &vb, 0, HD, 0.35f,
                                    sb);
            same &= !memcmp(out_a, out_b, sizeof out_a);
            for (int r = 0; r < NR; r++) {
                kern_attention_head_ref(out_a, q + r * NH * HD, &va, 0, POS0 + r + 1, HD, 0.35f,
                                        sa);
                kern_attention_head_ref(out_b, q + r * NH * HD, &vb, 0, POS0 + r + 1, HD, 0.35f,
                                        sb);
                same &= !memcmp(out_a, out_b, HD * sizeof(float));
            }
        }
        CHECK(same, "%s: attention over the released table (%s) = over the full one",
              f16 ? "f16" : "f32", kern_attention_level_name(D));
        kv_cache_free(a);
        kv_cache_free(b);
    }
}

/* The same for the quantized dtypes the CPU runs, at every SIMD level up to
 * the CPU's: rows written by the store op, heads of 32 (a 32-value group
 * each), released entries naming the zero block, whose codes and scales are
 * zero, so its values are 0 and weight-0 adds nothing (heads of 64: the
 * integer scores of AVX-512 VNNI read it too). */
static void test_attention_same_bits_quant(void) {
    enum { QD = 128, QHD = 64 };
    const kern_kv_dtype dts[] = {KERN_KV_Q8_0, KERN_KV_Q4_0};
    for (int di = 0; di < 2; di++) {
        kv_cache *cs[2] = {NULL, NULL};
        for (int i = 0; i < 2; i++) {
            kv_cache_config c = {.n_layers = NL,
                                 .kv_dim = QD,
                                 .block_size = BS,
                                 .n_blocks = NB,
                                 .max_seqs = NSEQ,
                                 .max_seq_blocks = MSB,
                                 .prefix_cache = 1,
                                 .layer_window = i ? NULL : WINDOWS,
                                 .max_grow = GROW,
                                 .dtype = dts[di],
                                 .head_dim = QHD};
            cs[i] = kv_cache_create_paged(&c);
        }
        CHECK(cs[0] && cs[1], "%s caches", kern_kv_dtype_name(dts[di]));
        if (!cs[0] || !cs[1]) {
            kv_cache_free(cs[0]);
            kv_cache_free(cs[1]);
            continue;
        }
        for (int n_pos = 0; n_pos < 44; n_pos += GROW) {
            for (int i = 0; i < 2; i++)
                kv_cache_seq_grow(cs[i], 0, GROW);
            for (int p = n_pos; p < n_pos + GROW; p++)
                for (int l = 0; l < NL; l++) {
                    float k[QD], v[QD];
                    for (int d = 0; d < QD; d++) {
                        k[d] = kval((p * 5) % 11, p, l, d % D, 0) * (1.0f + (float)(d / D));
                        v[d] = kval((p * 5) % 11, p, l, d % D, 1) * (1.0f + (float)(d / D));
                    }
                    for (int i = 0; i < 2; i++) {
                        kern_kv_view w;
                        kv_cache_view(cs[i], l, 0, &w);
                        kern_kv_store(&w, p, k, v, QD, QHD);
                    }
                }
            for (int i = 0; i < 2; i++)
                kv_cache_seq_set_pos(cs[i], 0, n_pos + GROW);
        }
        CHECK(stats(cs[0]).window_released > 0, "released some");
        /* 4 query rows at positions 40..43, 2 heads per KV head (4 heads). */
        enum { NH = 2, NR = 4, POS0 = 40, QDIM = 2 * NH * QHD };
        float q[NR * QDIM], out_a[NR * QDIM], out_b[NR * QDIM], sa[4096], sb[4096];
        for (int i = 0; i < NR * QDIM; i++)
            q[i] = kval(i, 7, 3, i % D, 0) * 2.0f;
        for (int lv = KERN_LEVEL_SCALAR; lv <= KERN_LEVEL_TOP; lv++) {
            kern_cpu_set_max_level((kern_level)lv);
            int same = 1;
            for (int layer = 0; layer < 2; layer++) { /* a window layer, then a full one */
                int l = layer == 0 ? 1 : 2;
                kern_kv_view va, vb;
                kv_cache_view(cs[0], l, 0, &va);
                kv_cache_view(cs[1], l, 0, &vb);
                va.window = vb.window = WINDOWS[l];
                for (int g = 0; g < 2; g++) {
                    size_t off = (size_t)g * NH * QHD;
                    kern_attention_rows_gqa(out_a + off, QDIM, q + off, QDIM, NR, NH, POS0, &va, g,
                                            QHD, 0.35f, sa);
                    kern_attention_rows_gqa(out_b + off, QDIM, q + off, QDIM, NR, NH, POS0, &vb, g,
                                            QHD, 0.35f, sb);
                }
                same &= !memcmp(out_a, out_b, sizeof out_a);
            }
            CHECK(same, "%s level %s: attention over the released table = over the full one",
                  kern_kv_dtype_name(dts[di]), kern_level_name((kern_level)lv));
        }
        kern_cpu_set_max_level(KERN_LEVEL_TOP);
        kv_cache_free(cs[0]);
        kv_cache_free(cs[1]);
    }
}

/* Prefix-cache hits take only a prefix whose blocks every group holds. */
static void test_prefix(void) {
    kv_cache *kv = make(WINDOWS, NB, 0);
    CHECK(kv != NULL, "windowed cache");
    if (!kv)
        return;
    int32_t a[44], b[44];
    for (int i = 0; i < 44; i++) {
        a[i] = i % 5;
        b[i] = 100 + i % 9;
    }
    /* a: committed every step, so its window blocks were registered before
     * they were released (they stay cached). b: committed only at the end,
     * so its early window blocks were released unregistered (freed). */
    int ok = 1;
    for (int n = 0; n < 40; n += GROW) {
        ok &= step(kv, 0, a, GROW, 1) == 0;
        ok &= step(kv, 1, b, GROW, 0) == 0;
    }
    kv_cache_seq_commit(kv, 1, b, 40);
    kv_cache_seq_release(kv, 0);
    kv_cache_seq_release(kv, 1);
    CHECK(ok && kv_cache_check(kv) == 0, "two runs");
    /* a, whole: 40 positions. a's first 20: 20 (its window blocks 3 and 4
     * are cached). */
    int got = kv_cache_seq_match(kv, 2, a, 41, 41);
    CHECK(got == 40 && holds(kv, 2, a, 40) && kv_cache_check(kv) == 0, "a: matched %d", got);
    kv_cache_seq_release(kv, 2);
    got = kv_cache_seq_match(kv, 2, a, 21, 21);
    CHECK(got == 20 && holds(kv, 2, a, 20), "a[0, 20]: matched %d", got);
    /* Decoding on from a match writes after it and releases as it goes. */
    ok = 1;
    int32_t a2[48];
    memcpy(a2, a, sizeof a);
    for (int n = 20; n < 40; n += GROW)
        ok &= step(kv, 2, a2, GROW, 1) == 0 && holds(kv, 2, a2, n + GROW);
    CHECK(ok && kv_cache_check(kv) == 0, "decode after a match");
    kv_cache_seq_release(kv, 2);
    /* b, whole: its last window blocks were registered at the end: 40. */
    got = kv_cache_seq_match(kv, 2, b, 41, 41);
    CHECK(got == 40 && holds(kv, 2, b, 40), "b: matched %d", got);
    kv_cache_seq_release(kv, 2);
    /* b's first 20: the full group holds blocks 0-4, but the window groups
     * lost blocks 0-6, and every shorter prefix needs one of them: 0. */
    long long hits = stats(kv).prefix_hits;
    got = kv_cache_seq_match(kv, 2, b, 21, 21);
    CHECK(got == 0 && kv_cache_seq_n_blocks(kv, 2) == 0 && stats(kv).prefix_hits == hits &&
              kv_cache_check(kv) == 0,
          "b[0, 20]: matched %d", got);
    kv_cache_free(kv);
}

/* Fork shares what the source still holds; behind its release, it refuses. */
static void test_fork(void) {
    kv_cache *kv = make(WINDOWS, NB, 0);
    CHECK(kv != NULL, "windowed cache");
    if (!kv)
        return;
    int32_t t[48];
    for (int i = 0; i < 48; i++)
        t[i] = (i * 3) % 8;
    int ok = 1;
    for (int n = 0; n < 40; n += GROW)
        ok &= step(kv, 0, t, GROW, 1) == 0;
    CHECK(ok, "source");
    CHECK(kv_cache_seq_fork(kv, 1, 0, 20) == BRISK_ENOTFOUND && kv_cache_seq_n_blocks(kv, 1) == 0 &&
              kv_cache_check(kv) == 0,
          "fork behind the release refused");
    CHECK(kv_cache_seq_fork(kv, 1, 0, 38) == 0 && holds(kv, 1, t, 38) && kv_cache_check(kv) == 0,
          "fork at 38");
    /* Both decode on; the shared partial block is copied, rows stay apart. */
    int32_t u[48];
    memcpy(u, t, sizeof u);
    for (int i = 38; i < 48; i++)
        u[i] = 50 + i;
    ok = step(kv, 1, u, 2, 1) == 0 && step(kv, 0, t, 4, 1) == 0 && step(kv, 1, u, 4, 1) == 0;
    CHECK(ok && holds(kv, 0, t, 44) && holds(kv, 1, u, 44) && kv_cache_check(kv) == 0 &&
              stats(kv).cow_copies > 0,
          "decode both after the fork");
    kv_cache_free(kv);
}

/* ---- randomized stress ------------------------------------------------------------ */

enum { SMAX = MSB * BS, SNB = 40, SOPS = 4000 };

static uint64_t rng_state;
static int rnd(int n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

/* The first block a query at n sees in a window layer. */
static int first_seen(int n) {
    return n - W + 1 > 0 ? (n - W + 1) / BS : 0;
}

static void test_stress(int external) {
    const char *seed_env = getenv("KV_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20261126;
    rng_state = seed * 2654435761u + 1;
    kv_cache *kv = external ? make_ext(SNB) : make(WINDOWS, SNB, 0);
    CHECK(kv != NULL, "stress cache (%s storage)", external ? "external" : "own");
    if (!kv)
        return;
    static int32_t tok[NSEQ][SMAX];
    int n[NSEQ] = {0}, hits = 0, forks = 0, refused_forks = 0, enospc = 0, rollbacks = 0;
    int32_t base[2][SMAX];
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < SMAX; p++)
            base[i][p] = rnd(3);
    const char *bad = NULL;
    int bad_op = -1;
    for (int op = 0; op < SOPS && !bad; op++) {
        int s = rnd(NSEQ), kind = rnd(20);
        if (kind < 9) { /* a step of 1..GROW tokens, committed or not */
            int k = 1 + rnd(GROW);
            if (n[s] + k > SMAX)
                continue;
            for (int i = 0; i < k; i++)
                tok[s][n[s] + i] = rnd(3);
            int need = kv_cache_seq_blocks_needed(kv, s, k), avail = kv_cache_n_available(kv);
            int rc = step(kv, s, tok[s], k, rnd(4) != 0);
            if (rc == 0)
                n[s] += k;
            else if (rc == BRISK_ENOSPC && need > avail)
                enospc++;
            else
                bad = "grow code";
        } else if (kind < 12) { /* a prompt from a base text: match, then prefill in steps */
            kv_cache_seq_release(kv, s);
            int len = 2 + rnd(SMAX / 2);
            memcpy(tok[s], base[rnd(2)], (size_t)len * sizeof(int32_t));
            int got = kv_cache_seq_match(kv, s, tok[s], len, len - 1);
            if (got < 0 || got % BS != 0 || got > len - 1)
                bad = "match";
            hits += got > 0;
            n[s] = got;
            if (!bad && !holds(kv, s, tok[s], got))
                bad = "matched values";
            while (!bad && n[s] < len) {
                int k = len - n[s] < GROW ? len - n[s] : GROW;
                if (step(kv, s, tok[s], k, 1) != 0)
                    break;
                n[s] += k;
            }
        } else if (kind < 14) { /* fork from another slot at some position */
            int src = rnd(NSEQ);
            if (src == s || n[src] == 0)
                continue;
            kv_cache_seq_release(kv, s);
            n[s] = 0;
            int m = rnd(n[src] + 1);
            int rc = kv_cache_seq_fork(kv, s, src, m);
            if (rc == 0) {
                memcpy(tok[s], tok[src], (size_t)m * sizeof(int32_t));
                n[s] = m;
                forks++;
            } else if (rc == BRISK_ENOTFOUND && first_seen(m) < first_seen(n[src])) {
                refused_forks++;
            } else {
                bad = "fork code";
            }
        } else if (kind < 17) {
            kv_cache_seq_release(kv, s);
            n[s] = 0;
        } else if (n[s] > 0) { /* roll back: allowed unless behind a release */
            int m = n[s] - 1 - rnd(n[s] < 8 ? n[s] : 8);
            kv_cache_seq_set_pos(kv, s, m);
            int now = kv_cache_seq_n_pos(kv, s);
            if (now != m && now != n[s])
                bad = "rollback";
            rollbacks += now == m;
            n[s] = now;
        }
        for (int q = 0; q < NSEQ && !bad; q++)
            if (kv_cache_seq_n_pos(kv, q) != n[q] || !holds(kv, q, tok[q], n[q]))
                bad = "values";
        if (!bad && kv_cache_check(kv) != 0)
            bad = "kv_cache_check";
        if (bad)
            bad_op = op;
    }
    kv_cache_stats st = stats(kv);
    printf("window stress, %s storage: %d ops (seed %llu): %d hits, %d forks (%d refused), %d "
           "ENOSPC, %d rollbacks, %lld released, %lld evictions, %lld copies\n",
           external ? "external" : "own", SOPS, (unsigned long long)seed, hits, forks,
           refused_forks, enospc, rollbacks, st.window_released, st.evictions, st.cow_copies);
    CHECK(bad == NULL, "window stress (seed %llu): op %d: %s", (unsigned long long)seed, bad_op,
          bad ? bad : "");
    CHECK(hits > 20 && forks > 20 && refused_forks > 5 && enospc > 5 && rollbacks > 20 &&
              st.window_released > 100 && st.evictions > 0 && st.cow_copies > 0,
          "coverage");
    for (int s = 0; s < NSEQ; s++)
        kv_cache_seq_release(kv, s);
    CHECK(stats(kv).blocks_used == 0 && kv_cache_check(kv) == 0, "all released");
    if (external)
        ext_free();
    else
        kv_cache_free(kv);
}

int main(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    test_shape();
    test_layer_place();
    test_release();
    test_attention_same_bits();
    test_attention_same_bits_quant();
    test_prefix();
    test_fork();
    test_stress(0);
    test_stress(1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("test_kv_window: %.3f s\n",
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return BT_SUMMARY("test_kv_window");
}
