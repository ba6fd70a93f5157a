/* moe_model.h - small mixture-of-experts models written as GGUF images for
 * the tests (test_model_moe, test_model_hostile): a qwen3moe, olmoe or llama
 * (Mixtral) file with random weights from fixed seeds, the expert stacks in
 * any stored type (types brisk cannot write are random blocks, drawn again
 * until they dequantize to finite values of moderate size), and hostile
 * variants of it (moe_spec.mutate). Header-only: each test that includes it
 * gets its own copy. */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kern_types.h"
#include "tiny_model.h"

/* Hostile variants of a file (M_NONE: a good one). */
enum {
    M_NONE = 0,
    M_USED_ZERO,
    M_USED_ABOVE,
    M_NO_ROUTER,
    M_ROUTER_SHAPE,
    M_GATE_FEWER,
    M_DOWN_SWAPPED,
    M_UP_2D,
    M_NO_DOWN,
    M_SHARED,
    M_SPLIT,
    M_NO_COUNT,
    M_DENSE_FAMILY,
    M_COUNT_HUGE,
    M_COUNT_STRING,
    M_FF_ZERO,
    M_DENSE_TENSORS,
    M_COUNT
};

typedef struct moe_spec {
    const char *arch; /* qwen3moe, olmoe, llama (Mixtral) */
    int n_layers, n_heads, n_kv, head_dim, n_expert, n_used, eh;
    kern_type etype; /* the expert stacks' stored type */
    int norm_key;    /* -1: no expert_weights_norm key, else its value */
    int mutate;
} moe_spec;

/* Buffers the writer borrows until the image is built. */
typedef struct raw_store {
    void *p[64];
    int n;
    uint64_t x;
} raw_store;

static uint64_t raw_next(raw_store *s) {
    s->x ^= s->x >> 12;
    s->x ^= s->x << 25;
    s->x ^= s->x >> 27;
    return s->x * 0x2545F4914F6CDD1DULL;
}

/* One block of a type brisk does not write: random bytes, drawn again until
 * the block dequantizes to finite values of moderate size, not all zero. */
static int random_block(raw_store *s, kern_type t, uint8_t *dst) {
    size_t bb = kern_type_block_bytes(t);
    int bs = kern_type_block_size(t);
    float v[256];
    for (int tries = 0; tries < 20000; tries++) {
        for (size_t i = 0; i < bb; i++)
            dst[i] = (uint8_t)(raw_next(s) >> 56);
        kern_dequantize_row(t, dst, v, bs);
        float mx = 0.0f;
        int ok = 1;
        for (int i = 0; i < bs; i++) {
            ok &= isfinite(v[i]);
            mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
        }
        if (ok && mx > 1e-2f && mx < 4.0f)
            return 0;
    }
    return -1;
}

static int writes_type(kern_type t) {
    return t == KERN_TYPE_F32 || t == KERN_TYPE_F16 || t == KERN_TYPE_BF16 || t == KERN_TYPE_Q8_0 ||
           t == KERN_TYPE_Q4_0 || t == KERN_TYPE_Q4_1;
}

/* A tensor of n_rows rows of n_in values of type t (ne as given), random. */
static int raw_tensor(gguf_writer *w, raw_store *s, const char *name, kern_type t, int n_dims,
                      const int64_t *ne) {
    int64_t n_in = ne[0], n_rows = 1;
    for (int d = 1; d < n_dims; d++)
        n_rows *= ne[d];
    size_t rb = kern_row_bytes(t, n_in);
    uint8_t *buf = malloc(rb * (size_t)n_rows);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    if (!buf || !row || s->n == 64) {
        free(buf);
        free(row);
        return -1;
    }
    s->p[s->n++] = buf;
    float amp = sqrtf(3.0f / (float)n_in);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *dst = buf + rb * (size_t)r;
        if (writes_type(t)) {
            for (int64_t i = 0; i < n_in; i++)
                row[i] =
                    amp * (float)((double)(raw_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
            kern_quantize_row(t, row, dst, n_in);
        } else {
            int bs = kern_type_block_size(t);
            for (int64_t b = 0; b < n_in / bs; b++)
                if (random_block(s, t, dst + (size_t)b * kern_type_block_bytes(t)) < 0) {
                    free(row);
                    return -1;
                }
        }
    }
    free(row);
    return gguf_writer_add_tensor(w, name, t, (uint32_t)n_dims, ne, buf);
}

/* The GGUF image of spec into *out (*len bytes, malloc'ed). */
static int moe_image(const moe_spec *sp, uint8_t **out, size_t *len) {
    const int dim = sp->n_heads * sp->head_dim, q_dim = dim, kv_dim = sp->n_kv * sp->head_dim;
    const int E = sp->n_expert, H = sp->eh, mut = sp->mutate;
    const char *arch = mut == M_DENSE_FAMILY ? "qwen3" : sp->arch;
    gguf_writer *w = gguf_writer_create();
    tiny_store ts = {.x = 0x6d6f65ull};
    raw_store rs = {.x = 0x72617773ull};
    char key[96], name[96];
    int rc = w ? 0 : -1;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", arch);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), 4096);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)dim);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)sp->n_layers);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)(3 * dim));
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)sp->n_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sp->n_kv);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)sp->head_dim);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (mut == M_COUNT_STRING)
        rc = rc ? rc : gguf_writer_set_str(w, KEY("expert_count"), "8");
    else if (mut != M_NO_COUNT)
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("expert_count"),
                                      mut == M_COUNT_HUGE ? 1u << 20 : (uint32_t)E);
    rc = rc ? rc
            : gguf_writer_set_u32(w, KEY("expert_used_count"),
                                  mut == M_USED_ZERO    ? 0u
                                  : mut == M_USED_ABOVE ? (uint32_t)E + 1
                                                        : (uint32_t)sp->n_used);
    rc = rc ? rc
            : gguf_writer_set_u32(w, KEY("expert_feed_forward_length"),
                                  mut == M_FF_ZERO ? 0u : (uint32_t)H);
    if (sp->norm_key >= 0)
        rc = rc ? rc : gguf_writer_set_bool(w, KEY("expert_weights_norm"), sp->norm_key);
#undef KEY
    rc = rc ? rc : tiny_vocab(w);
    rc = rc ? rc : tiny_matrix(w, &ts, "token_embd.weight", dim, TINY_VOCAB);
    rc = rc ? rc : tiny_vector(w, &ts, "output_norm.weight", dim);
    rc = rc ? rc : tiny_matrix(w, &ts, "output.weight", dim, TINY_VOCAB);
    int full = !strcmp(sp->arch, "olmoe"), perhead = !strcmp(sp->arch, "qwen3moe");
    for (int l = 0; l < sp->n_layers && !rc; l++) {
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        rc = tiny_vector(w, &ts, NAME("attn_norm.weight"), dim);
        rc = rc ? rc : tiny_vector(w, &ts, NAME("ffn_norm.weight"), dim);
        rc = rc ? rc : tiny_matrix(w, &ts, NAME("attn_q.weight"), dim, q_dim);
        rc = rc ? rc : tiny_matrix(w, &ts, NAME("attn_k.weight"), dim, kv_dim);
        rc = rc ? rc : tiny_matrix(w, &ts, NAME("attn_v.weight"), dim, kv_dim);
        rc = rc ? rc : tiny_matrix(w, &ts, NAME("attn_output.weight"), q_dim, dim);
        if (perhead || mut == M_DENSE_FAMILY) {
            rc = rc ? rc : tiny_vector(w, &ts, NAME("attn_q_norm.weight"), sp->head_dim);
            rc = rc ? rc : tiny_vector(w, &ts, NAME("attn_k_norm.weight"), sp->head_dim);
        } else if (full) {
            rc = rc ? rc : tiny_vector(w, &ts, NAME("attn_q_norm.weight"), q_dim);
            rc = rc ? rc : tiny_vector(w, &ts, NAME("attn_k_norm.weight"), kv_dim);
        }
        if (mut == M_DENSE_TENSORS || mut == M_DENSE_FAMILY) {
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_gate.weight"), dim, 3 * dim);
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_up.weight"), dim, 3 * dim);
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_down.weight"), 3 * dim, dim);
            continue;
        }
        if (mut == M_SPLIT) { /* an old Mixtral conversion: one 2-D tensor per expert */
            for (int e = 0; e < E && !rc; e++) {
                char suffix[48];
                snprintf(suffix, sizeof suffix, "ffn_gate.%d.weight", e);
                rc = tiny_matrix(w, &ts, NAME(suffix), dim, H);
            }
        }
        if (mut == M_SHARED)
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_gate_shexp.weight"), dim, H);
        if (mut == M_ROUTER_SHAPE)
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_gate_inp.weight"), dim, E + 1);
        else if (mut != M_NO_ROUTER)
            rc = rc ? rc : tiny_matrix(w, &ts, NAME("ffn_gate_inp.weight"), dim, E);
        int64_t ne_gate[3] = {dim, H, mut == M_GATE_FEWER ? E - 1 : E};
        int64_t ne_up[3] = {dim, mut == M_UP_2D ? (int64_t)H * E : H, E};
        int64_t ne_down[3] = {mut == M_DOWN_SWAPPED ? dim : H, mut == M_DOWN_SWAPPED ? H : dim, E};
        rc = rc ? rc : raw_tensor(w, &rs, NAME("ffn_gate_exps.weight"), sp->etype, 3, ne_gate);
        rc = rc ? rc
                : raw_tensor(w, &rs, NAME("ffn_up_exps.weight"), sp->etype, mut == M_UP_2D ? 2 : 3,
                             ne_up);
        if (mut != M_NO_DOWN)
            rc = rc ? rc : raw_tensor(w, &rs, NAME("ffn_down_exps.weight"), sp->etype, 3, ne_down);
#undef NAME
    }
    if (rc == 0)
        rc = gguf_writer_to_buffer(w, out, len);
    gguf_writer_free(w);
    for (int i = 0; i < ts.n; i++)
        free(ts.bufs[i]);
    for (int i = 0; i < rs.n; i++)
        free(rs.p[i]);
    return rc;
}

#endif
