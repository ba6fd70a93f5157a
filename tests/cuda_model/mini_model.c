/* mini_model.c - a dummy shape's family at small widths (cuda_model.h's
 * cm_mini_model), written as a GGUF image and loaded as a file is.
 *
 * The CPU rehearsal of test_cuda_model cannot afford the real shapes (a
 * billion random weights take tens of seconds on two cores), and the real
 * shapes miss what only a file shows: Phi-3's fused q/k/v and gate/up
 * tensors. A mini model keeps everything of the shape that decides which
 * code runs: the architecture row, the window pattern (with a short window,
 * so 48 positions pass it), soft-caps, LongRoPE's original context and
 * attn_factor, tied output, a mixture of experts (at most 16 experts of
 * 128 with the family's routing and top-k up to half of them), the ratio
 * of query to KV heads and the head size over 4 (Phi-3's 96 becomes 24: not a power of two either), all read
 * from the shape's own configuration, so a change to the dummy row reaches
 * the rehearsal. On a GPU it runs beside the real shape at no cost. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_rng.h"
#include "models/gguf_write.h"
#include "models/model_arch.h"
#include "tests/cuda_model/cuda_model.h"

#define MINI_DIM 128
#define MINI_HIDDEN 256
#define MINI_HEADS 4
#define MINI_VOCAB 512
#define MINI_CTX 4096
#define MINI_EXPERTS 16        /* a mixture of experts' experts at most (mini_experts) */
#define MINI_EXPERT_HIDDEN 128 /* each expert's hidden width */

/* SentencePiece token types as GGUF stores them. */
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_BYTE = 6 };

/* Every tensor's floats, kept until the image is written (the writer
 * borrows tensor data). */
typedef struct mini_store {
    float **bufs;
    int n, cap;
    uint64_t rng[4];
} mini_store;

static void store_free(mini_store *s) {
    for (int i = 0; i < s->n; i++)
        free(s->bufs[i]);
    free(s->bufs);
}

/* n floats uniform in [center - amp, center + amp]; NULL when out of memory. */
static float *store_new(mini_store *s, size_t n, float center, float amp) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        float **b = realloc(s->bufs, sizeof *b * (size_t)cap);
        if (!b)
            return NULL;
        s->bufs = b, s->cap = cap;
    }
    float *v = malloc(sizeof *v * n);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = center + amp * (float)(2.0 * brisk_rng_uniform(s->rng) - 1.0);
    s->bufs[s->n++] = v;
    return v;
}

/* A [n_out][n_in] f32 tensor, entries of variance 1/n_in as the dummy
 * models' (so activations keep their scale through the layers). */
static int add_matrix(gguf_writer *w, mini_store *s, const char *name, int n_in, int n_out) {
    float *v = store_new(s, (size_t)n_in * (size_t)n_out, 0.0f, sqrtf(3.0f / (float)n_in));
    int64_t ne[2] = {n_in, n_out};
    return v ? gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 2, ne, v) : -1;
}

/* n_stack matrices [n_out][n_in] stacked as GGUF's 3-D expert tensors
 * (ne {n_in, n_out, n_stack}), entries as add_matrix's. */
static int add_stack(gguf_writer *w, mini_store *s, const char *name, int n_in, int n_out,
                     int n_stack) {
    float *v = store_new(s, (size_t)n_in * (size_t)n_out * (size_t)n_stack, 0.0f,
                         sqrtf(3.0f / (float)n_in));
    int64_t ne[3] = {n_in, n_out, n_stack};
    return v ? gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 3, ne, v) : -1;
}

/* A mixture of experts at small widths: up to MINI_EXPERTS experts, the
 * shape's top-k up to half of them (Qwen3-MoE and OLMoE: 8 of 16; Mixtral:
 * 2 of 8), so a token's choice still leaves experts out. */
static void mini_experts(const model_config *c, int *n_exp, int *n_used) {
    *n_exp = c->n_expert < MINI_EXPERTS ? c->n_expert : MINI_EXPERTS;
    *n_used = c->n_expert_used < *n_exp / 2 ? c->n_expert_used : *n_exp / 2;
    if (*n_used < 1)
        *n_used = 1;
}

/* A vector of n weights around center (norms: 1, or [0.5, 1.5] where
 * amp 0.5 makes q's and k's norms differ). */
static int add_vector(gguf_writer *w, mini_store *s, const char *name, int n, float center,
                      float amp) {
    float *v = store_new(s, (size_t)n, center, amp);
    int64_t ne[1] = {n};
    return v ? gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 1, ne, v) : -1;
}

/* <unk> <s> </s>, the 256 byte tokens, then fillers: every text encodes. */
static int add_vocab(gguf_writer *w) {
    char *pieces[MINI_VOCAB];
    uint64_t lens[MINI_VOCAB];
    float scores[MINI_VOCAB];
    int32_t types[MINI_VOCAB];
    char text[MINI_VOCAB][16];
    for (int i = 0; i < MINI_VOCAB; i++) {
        if (i < 3)
            snprintf(text[i], sizeof text[i], "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(text[i], sizeof text[i], "<0x%02X>", i - 3);
        else
            snprintf(text[i], sizeof text[i], "\xe2\x96\x81t%d", i);
        pieces[i] = text[i];
        lens[i] = strlen(text[i]);
        scores[i] = -(float)i;
        types[i] = i == 0 ? T_UNKNOWN : i < 3 ? T_CONTROL : i < 259 ? T_BYTE : T_NORMAL;
    }
    return gguf_writer_set_spm_vocab(w, (const char *const *)pieces, lens, scores, types,
                                     MINI_VOCAB);
}

/* The mini model's metadata and tensors into w (tensor data in s). */
static int write_mini(gguf_writer *w, mini_store *s, const model_config *c, int window) {
    const char *arch = c->arch->name;
    int ratio = c->n_heads / c->n_kv_heads;
    int n_kv = MINI_HEADS / ratio > 0 ? MINI_HEADS / ratio : 1;
    int hd = c->head_dim / 4, q_dim = MINI_HEADS * hd, kv_dim = n_kv * hd;
    /* Gemma 3's pattern of six needs six layers for one global layer. */
    int n_layers = c->swa_pattern > 2 ? c->swa_pattern : 2;
    int phi3 = !strcmp(arch, "phi3");
    char key[96], name[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    int rc = gguf_writer_set_str(w, "general.architecture", arch);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), MINI_CTX);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), MINI_DIM);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)n_layers);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), MINI_HIDDEN);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), MINI_HEADS);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)n_kv);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_base);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->norm_eps);
    if (c->n_expert > 0) { /* the family's routing at MINI_EXPERTS experts (mini_experts) */
        int n_exp, n_used;
        mini_experts(c, &n_exp, &n_used);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)n_exp);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)n_used);
        rc =
            rc ? rc : gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), MINI_EXPERT_HIDDEN);
    }
    if (c->n_swa > 0)
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)window);
    if (c->attn_softcap > 0.0f)
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), c->attn_softcap);
    if (c->final_softcap > 0.0f)
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("final_logit_softcapping"), c->final_softcap);
    if (c->rope_orig_ctx > 0) {
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                      (uint32_t)c->rope_orig_ctx);
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), c->rope_attn_factor);
    }
#undef KEY
    rc = rc ? rc : add_vocab(w);
    rc = rc ? rc : add_matrix(w, s, "token_embd.weight", MINI_DIM, MINI_VOCAB);
    if (!c->tied_output)
        rc = rc ? rc : add_matrix(w, s, "output.weight", MINI_DIM, MINI_VOCAB);
    rc = rc ? rc : add_vector(w, s, "output_norm.weight", MINI_DIM, 1.0f, 0.0f);
    if (c->rope_orig_ctx > 0) { /* LongRoPE divisors: long 1 to ~25, short 1 to ~2 */
        rc = rc ? rc : add_vector(w, s, "rope_factors_long.weight", hd / 2, 13.0f, 12.0f);
        rc = rc ? rc : add_vector(w, s, "rope_factors_short.weight", hd / 2, 1.5f, 0.5f);
    }
    for (int l = 0; l < n_layers && !rc; l++) {
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        rc = add_vector(w, s, NAME("attn_norm.weight"), MINI_DIM, 1.0f, 0.0f);
        rc = rc ? rc : add_vector(w, s, NAME("ffn_norm.weight"), MINI_DIM, 1.0f, 0.0f);
        if (phi3) { /* Phi-3's fused tensors, as its files hold them */
            rc = rc ? rc : add_matrix(w, s, NAME("attn_qkv.weight"), MINI_DIM, q_dim + 2 * kv_dim);
            rc = rc ? rc : add_matrix(w, s, NAME("ffn_up.weight"), MINI_DIM, 2 * MINI_HIDDEN);
        } else {
            rc = rc ? rc : add_matrix(w, s, NAME("attn_q.weight"), MINI_DIM, q_dim);
            rc = rc ? rc : add_matrix(w, s, NAME("attn_k.weight"), MINI_DIM, kv_dim);
            rc = rc ? rc : add_matrix(w, s, NAME("attn_v.weight"), MINI_DIM, kv_dim);
            if (c->n_expert == 0) {
                rc = rc ? rc : add_matrix(w, s, NAME("ffn_gate.weight"), MINI_DIM, MINI_HIDDEN);
                rc = rc ? rc : add_matrix(w, s, NAME("ffn_up.weight"), MINI_DIM, MINI_HIDDEN);
            }
        }
        rc = rc ? rc : add_matrix(w, s, NAME("attn_output.weight"), q_dim, MINI_DIM);
        if (c->n_expert > 0) { /* the router and the stacked 3-D expert tensors */
            int n_exp, n_used;
            mini_experts(c, &n_exp, &n_used);
            rc = rc ? rc : add_matrix(w, s, NAME("ffn_gate_inp.weight"), MINI_DIM, n_exp);
            rc = rc ? rc
                    : add_stack(w, s, NAME("ffn_gate_exps.weight"), MINI_DIM, MINI_EXPERT_HIDDEN,
                                n_exp);
            rc = rc ? rc
                    : add_stack(w, s, NAME("ffn_up_exps.weight"), MINI_DIM, MINI_EXPERT_HIDDEN,
                                n_exp);
            rc = rc ? rc
                    : add_stack(w, s, NAME("ffn_down_exps.weight"), MINI_EXPERT_HIDDEN, MINI_DIM,
                                n_exp);
        } else {
            rc = rc ? rc : add_matrix(w, s, NAME("ffn_down.weight"), MINI_HIDDEN, MINI_DIM);
        }
        if (c->has_qkv_bias) {
            rc = rc ? rc : add_vector(w, s, NAME("attn_q.bias"), q_dim, 0.0f, 0.1f);
            rc = rc ? rc : add_vector(w, s, NAME("attn_k.bias"), kv_dim, 0.0f, 0.1f);
            rc = rc ? rc : add_vector(w, s, NAME("attn_v.bias"), kv_dim, 0.0f, 0.1f);
        }
        if (c->has_qk_norm) { /* per head, or (OLMoE) over the whole of q and of k */
            int full = c->has_qk_norm == MODEL_QK_NORM_FULL;
            rc = rc ? rc
                    : add_vector(w, s, NAME("attn_q_norm.weight"), full ? q_dim : hd, 1.0f, 0.5f);
            rc = rc ? rc
                    : add_vector(w, s, NAME("attn_k_norm.weight"), full ? kv_dim : hd, 1.0f, 0.5f);
        }
        if (c->has_post_norms) {
            rc = rc ? rc
                    : add_vector(w, s, NAME("post_attention_norm.weight"), MINI_DIM, 1.0f, 0.5f);
            rc = rc ? rc : add_vector(w, s, NAME("post_ffw_norm.weight"), MINI_DIM, 1.0f, 0.5f);
        }
#undef NAME
    }
    return rc;
}

model *cm_mini_model(const char *shape, int window, model_weights_fmt f, void **image) {
    *image = NULL;
    model_config c;
    if (model_dummy_config(shape, &c) < 0) {
        fprintf(stderr, "test_cuda_model: mini %s: no such dummy shape\n", shape);
        return NULL;
    }
    gguf_writer *w = gguf_writer_create();
    mini_store s = {0};
    /* One seed for every mini model: each family's weights are fixed. */
    brisk_rng_seed(s.rng, 0x6d696e69u);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = w ? write_mini(w, &s, &c, window) : -1;
    if (rc == 0)
        rc = gguf_writer_to_buffer(w, &buf, &len);
    gguf_writer_free(w);
    store_free(&s);
    if (rc != 0) {
        fprintf(stderr, "test_cuda_model: mini %s: writing the image: %d\n", shape, rc);
        free(buf);
        return NULL;
    }
    model_load_opts o = {.weights = f, .pool = cm_pool()};
    model *m = NULL;
    char err[256];
    if (model_load_memory(buf, len, &o, &m, err, sizeof err) < 0) {
        fprintf(stderr, "test_cuda_model: mini %s: %s\n", shape, err);
        free(buf);
        return NULL;
    }
    *image = buf;
    return m;
}
