/* model.h - a transformer model: config + weights + vocabulary, and the
 * batched forward pass.
 *
 * As in llama2.c, a model is plain structs: model_config (shapes and
 * hyper-parameters read from GGUF metadata), model_weights (pointers to each
 * tensor in its compute format: into the mmap where the file's format is
 * used as is, or into buffers the model owns when converted at load) and
 * the run state (model_state, scratch for one forward call). The KV cache
 * belongs to the caller (kv/kv_cache.h), not the model.
 *
 * Threading: a model is immutable after model_load and may be shared; a
 * model_state and a kv_cache are used by one thread (the engine) at a time. */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_ops.h"
#include "kv/kv_cache.h"
#include "models/gguf.h"
#include "models/model_arch.h"
#include "models/model_gen.h"
#include "models/tokenizer.h"

/* Compute format of the matrix weights, chosen at load (--weights). */
typedef enum {
    MODEL_WEIGHTS_AUTO = 0, /* keep F32/F16/Q8_0/Q4_0/Q4_1 as stored (mmap), BF16 -> F16 */
    MODEL_WEIGHTS_F32,
    MODEL_WEIGHTS_F16,
    MODEL_WEIGHTS_INT8, /* Q8_0 blocks: int8 with one fp16 scale per 32 */
} model_weights_fmt;

/* Parses "auto", "f32", "f16", "int8" (also "q8_0"); BRISK_EINVAL otherwise. */
int model_weights_fmt_parse(const char *s, model_weights_fmt *out);
const char *model_weights_fmt_name(model_weights_fmt f);

/* What the forward pass reads: the architecture row's features and
 * defaults (model_arch.h) with the file's metadata over them. */
typedef struct model_config {
    const model_arch_desc *arch; /* static row of the table, never NULL once read */
    int n_vocab;
    int dim; /* embedding width */
    int n_layers;
    int n_heads;
    int n_kv_heads; /* < n_heads for grouped-query attention */
    int head_dim;
    int hidden_dim;  /* feed-forward width */
    int n_ctx_train; /* context length the model was trained for */
    int n_rot;       /* rotated dims per head (usually head_dim) */
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    kern_rope_mode rope_mode;
    float norm_eps;
    int has_qkv_bias;
    /* RMSNorm of q and k before RoPE: MODEL_QK_NORM_HEAD each head (qwen3,
     * gemma3), MODEL_QK_NORM_FULL the whole projection (olmoe); 0: none */
    int has_qk_norm;
    int has_post_norms; /* gemma2, gemma3: a norm after the attention and after the MLP */
    model_act act;      /* the gated MLP's activation (Gemma: GELU-tanh) */
    float embd_scale;   /* the input embeddings' factor (Gemma: sqrt(dim)); 0: none */
    float attn_scale;   /* the query scale; 1 / sqrt(head_dim) unless the family says */
    int n_swa;          /* sliding window of the local layers (0: none) */
    /* layer l is local iff l % swa_pattern < swa_pattern - 1 (gemma3: 6,
     * gemma2: 2); 0: every layer (a llama file's window: Mistral) */
    int swa_pattern;
    float rope_base_swa; /* the local layers' RoPE base */
    float attn_softcap;  /* gemma2: scores -> cap * tanh(score / cap); 0: none */
    float final_softcap; /* gemma2: logits -> cap * tanh(logit / cap); 0: none */
    /* phi3 LongRoPE: the context the short factors are for, and the scale of
     * the rotated dims (rope.scaling.attn_factor; 1: none) */
    int rope_orig_ctx;
    float rope_attn_factor;
    int tied_output; /* output projection shares token_embd */
    /* <arch>.pooling_type, llama.cpp's numbers: 0 none given, 1 mean, 3 last */
    int pooling;
    /* Mixture of experts (<arch>.expert_count > 0; 0: a dense MLP): each
     * layer's MLP is n_expert experts of expert_hidden (<arch>.
     * expert_feed_forward_length, else feed_forward_length), of which a
     * router picks n_expert_used per token (softmax over all experts, the
     * top n_expert_used, lower index first on ties), their outputs summed
     * with the softmax weights, renormalised to sum 1 when moe_norm_topk
     * (Qwen3-MoE, Mixtral; <arch>.expert_weights_norm where the file says,
     * else the row's rule) or as they are (OLMoE). */
    int n_expert;
    int n_expert_used;
    int expert_hidden;
    int moe_norm_topk;
} model_config;

/* 1 when the model's CUDA path has run on a GPU against the CPU: its row's
 * cuda_validated (llama and qwen2; test_cuda_model), no sliding window and
 * no experts (the CUDA backend runs a mixture of experts, but its check,
 * test_cuda_model --moe, has not run on a GPU yet).
 * --device auto picks CUDA only for these, until Qwen3's, Gemma's and
 * Phi-3's pass there too; --device cuda runs every architecture. */
int model_config_cuda_validated(const model_config *c);

/* A matrix in compute format: n_out rows of n_in values of `type`. */
typedef struct model_matrix {
    kern_type type;
    const void *data;
    int n_out, n_in;
} model_matrix;

typedef struct model_layer {
    const float *attn_norm;    /* [dim] */
    const float *ffn_norm;     /* [dim] */
    model_matrix wq;           /* [n_heads*head_dim][dim] */
    model_matrix wk;           /* [n_kv_heads*head_dim][dim] */
    model_matrix wv;           /* [n_kv_heads*head_dim][dim] */
    model_matrix wo;           /* [dim][n_heads*head_dim] */
    model_matrix w_gate;       /* [hidden][dim] */
    model_matrix w_up;         /* [hidden][dim] */
    model_matrix w_down;       /* [dim][hidden] */
    const float *bq, *bk, *bv; /* qwen2 only, else NULL */
    /* [head_dim] (qwen3, gemma3) or [q width] and [k width] (olmoe), else NULL */
    const float *q_norm, *k_norm;
    const float *post_attn_norm, *post_ffn_norm; /* [dim], has_post_norms, else NULL */
    int window;                                  /* sliding window of this layer, 0: global */
    float rope_base;                             /* this layer's RoPE base */
    /* This layer's linear RoPE scale (1 / factor); 0: the model's
     * rope_freq_scale. Gemma 3's local layers are not scaled (llama.cpp's
     * rope_freq_scale_train_swa = 1): only its global layers take the
     * file's rope.scaling.factor. */
    float rope_freq_scale;
    /* Mixture of experts (model_config.n_expert > 0), else empty (data
     * NULL); w_gate, w_up and w_down are then empty. The experts are stored
     * stacked as the file has them: expert e is rows [e * n, (e + 1) * n)
     * of each stack (model_matrix_expert), so each stack converts and
     * interleaves (X8) as one matrix, its experts starting on whole groups. */
    model_matrix router;    /* [n_expert][dim], always f32: the routing is never rounded */
    model_matrix exps_gate; /* [n_expert * expert_hidden][dim] */
    model_matrix exps_up;   /* [n_expert * expert_hidden][dim] */
    model_matrix exps_down; /* [n_expert * dim][expert_hidden] */
} model_layer;

/* Expert e's matrix out of a stack of n_expert equal experts (a view that
 * shares the stack's storage; X8 stacks hold whole groups per expert, which
 * the loader checks). */
static inline model_matrix model_matrix_expert(const model_matrix *stack, int n_expert, int e) {
    int n = stack->n_out / n_expert;
    size_t off = kern_type_is_x8(stack->type)
                     ? kern_x8_bytes(stack->type, (int64_t)e * n, stack->n_in)
                     : kern_row_bytes(stack->type, stack->n_in) * (size_t)e * (size_t)n;
    return (model_matrix){.type = stack->type,
                          .data = (const uint8_t *)stack->data + off,
                          .n_out = n,
                          .n_in = stack->n_in};
}

typedef struct model_weights {
    model_matrix tok_embd;    /* [n_vocab][dim]; rows gathered for the input */
    const float *output_norm; /* [dim] */
    model_matrix output;      /* [n_vocab][dim]; equals tok_embd when tied */
    const float *rope_freqs;  /* [n_rot/2] frequency divisors (Llama 3.1), or NULL */
    /* phi3 LongRoPE divisors, [n_rot/2] each or NULL: long where the context
     * per sequence exceeds rope_orig_ctx, else short (as llama.cpp) */
    const float *rope_long, *rope_short;
    model_layer *layers; /* [n_layers] */
} model_weights;

typedef struct model model;

typedef struct model_load_opts {
    model_weights_fmt weights;
    kern_pool *pool; /* borrowed, used to convert weights in parallel; may be NULL */
    /* Dummy weights (as vLLM's load_format=dummy): when set, model_load
     * ignores path and builds the named shape (model_dummy_configs) with
     * seeded random weights, so throughput can be measured on real sizes
     * without weight files. The vocabulary comes from the GGUF file
     * `tokenizer` (any model or vocab-only file with at most the shape's
     * n_vocab tokens) or, when NULL, is a synthetic SentencePiece vocabulary
     * (byte fallback, letters and letter pairs, fillers) of n_vocab tokens. */
    const char *dummy;
    const char *tokenizer;
    uint64_t dummy_seed;
    /* 1 when the model runs on the CPU backend: on a CPU with AVX2, integer
     * matrices (Q8_0, Q8_0M, Q4_0, Q4_1) whose row count is a multiple of 8
     * are stored row-interleaved (kern_types.h, the X8 forms), which every
     * SIMD level's kernels run fastest, and float matrices read from the
     * file are copied onto 2 MiB pages; either way the file's pages are
     * given back. 0 keeps every matrix row-major on the file's pages (the
     * CUDA backend reads rows). Results are the same bits either way. */
    int cpu_layout;
    /* 1 for a backend that converts the weights itself while uploading them
     * (CUDA): with weights auto, matrices in a type the CPU kernels do not
     * multiply (Q5_*, K-quants, IQ4_*; kern_kquant.h) keep the file's
     * blocks instead of being converted on the host. The CPU backend
     * refuses such a model. */
    int keep_stored;
} model_load_opts;

/* The names --dummy-weights accepts, NULL-terminated. */
extern const char *const model_dummy_configs[];
/* The configuration of a dummy shape (n_vocab and tied_output included),
 * read from the metadata the shape writes exactly as model_load reads it;
 * BRISK_EINVAL for an unknown name, BRISK_ENOMEM. */
int model_dummy_config(const char *name, model_config *out);

/* Loads path (GGUF). On failure *out is NULL, err holds a one-line reason
 * and a negative BRISK_E* code is returned. */
int model_load(const char *path, const model_load_opts *opts, model **out, char *err,
               size_t err_len);
/* The same from a GGUF image in memory (gguf_open_memory): buf is borrowed
 * and must outlive the model, whose unconverted weights point into it. */
int model_load_memory(const void *buf, size_t len, const model_load_opts *opts, model **out,
                      char *err, size_t err_len);
void model_free(model *m);

const model_config *model_get_config(const model *m);
const model_weights *model_get_weights(const model *m);
const tok_vocab *model_get_vocab(const model *m);
/* Borrowed from the GGUF metadata; NULL-terminated copies owned by the model. */
const char *model_name(const model *m);
const char *model_chat_template(const model *m); /* NULL if the file has none */
model_weights_fmt model_get_weights_fmt(const model *m);
/* The file's type as llama.cpp names it ("Q4_K_M", "F16", ...; "q6_K
 * (guessed)" from the tensors where general.file_type is missing), or NULL
 * for dummy weights. Owned by the model. */
const char *model_get_file_type(const model *m);
/* Parameter count and the bytes of weights one decode step reads (every
 * matrix once plus the norms; of a mixture of experts the router and the
 * n_expert_used experts one token runs, the active parameters; the embedding
 * row gather is not counted unless the output is tied, when the whole table
 * is read as the output). */
int64_t model_n_params(const model *m);
/* The parameters one token runs: all of them, less the experts a mixture of
 * experts leaves out (n_expert - n_expert_used per layer). */
int64_t model_n_params_active(const model *m);
size_t model_weight_bytes(const model *m);

/* The model's own sampling defaults: models/model_gen.h. */

/* Owned by the model; has == 0 when it gives none. */
const model_generation *model_get_generation(const model *m);

/* ---- forward ----------------------------------------------------------- */

/* One call's tokens, from one or more sequences. Token i of sequence seq[i]
 * sits at position pos[i]; the positions of one sequence within a batch
 * must be increasing, and every position before pos[i] of that sequence must
 * already be in the cache or earlier in this batch. want_logits[i] != 0 asks
 * for that token's output row (NULL: only the last token). want_hidden[i] != 0
 * asks for its final hidden state, after the output norm (the embedding
 * llama.cpp pools; model_state_hidden), NULL: none. */
typedef struct model_batch {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    const uint8_t *want_logits;
    const uint8_t *want_hidden;
} model_batch;

typedef struct model_state model_state;

/* The checks every backend makes before any work: 1..max_batch_tokens tokens, ids
 * in the vocabulary (BRISK_EINVAL), sequence slots of kv, and positions below
 * max_ctx that the slot has blocks for (BRISK_ERANGE). Returns 0 or the code. */
int model_batch_validate(const model *m, kv_cache *kv, const model_batch *b, int max_batch_tokens,
                         int max_ctx);

/* Scratch for batches of up to max_batch_tokens tokens and contexts up to max_ctx. */
model_state *model_state_create(const model *m, int max_batch_tokens, int max_ctx);
void model_state_free(model_state *st);

/* Runs the batch, writing K/V for every token into kv. On success *logits
 * points to n_out rows of n_vocab floats (one per token that wanted logits,
 * in batch order), owned by st and valid until the next call.
 * Returns 0 or a negative code (bad token id, position beyond the cache or
 * the state, bad sequence index) - checked before any work is done. */
int model_forward(const model *m, model_state *st, kv_cache *kv, kern_pool *pool,
                  const model_batch *batch, float **logits, int *n_out);

struct model_recipe;
/* Records the steps each layer's next forwards run into trace[l] (appended:
 * the caller zeroes trace[l].n first), trace an array of n_layers recipes
 * borrowed until the state is freed or the trace reset with NULL. For the
 * tests that check the pass against model_layer_recipe (model_recipe.h). */
void model_state_set_trace(model_state *st, struct model_recipe *trace);

/* The hidden states the last model_forward was asked for (want_hidden): *n_rows
 * rows of dim floats in batch order, owned by st and valid until the next
 * call; NULL with *n_rows 0 when none were. */
const float *model_state_hidden(const model_state *st, int *n_rows);

#endif
