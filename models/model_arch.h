/* model_arch.h - the architectures brisk runs, as data: one descriptor row
 * per family (its GGUF general.architecture name) holding the features its
 * forward pass takes and the defaults its files may leave out.
 *
 * Everything that depends on the architecture reads the row: model_read_config
 * (the row's features and defaults, overridden by whatever the file states),
 * the dummy shapes (their configuration is read back from the metadata they
 * write), the server's chat template where the file has none, the device
 * choice (cuda_validated) and the "supported: ..." list of the error messages.
 * A family that needs no new operation is therefore one row (model_arch.c)
 * plus its tests; one that does needs the op in every backend first.
 *
 * Thread-safety: the table is constant; every function is reentrant. */
#ifndef MODEL_ARCH_H
#define MODEL_ARCH_H

#include <stddef.h>

#include "kernels/cpu/kern_ops.h"
#include "models/chat_template.h"

/* The gated MLP's activation: act(gate) * up. */
typedef enum {
    MODEL_ACT_SILU = 0,  /* SwiGLU (Llama, Qwen, Phi-3) */
    MODEL_ACT_GELU_TANH, /* GeGLU with GELU's tanh approximation (Gemma) */
} model_act;

enum { MODEL_QK_NORM_HEAD = 1, MODEL_QK_NORM_FULL = 2 };

/* Whether a family's MLP is a mixture of experts (model_config.n_expert). */
typedef enum {
    MODEL_MOE_NONE = 0, /* dense only; expert_count in the file is refused */
    MODEL_MOE_OPTIONAL, /* dense, or experts where the file has expert_count (llama: Mixtral) */
    MODEL_MOE_REQUIRED, /* always experts (qwen3moe, olmoe) */
} model_moe_kind;

typedef struct model_arch_desc {
    const char *name;         /* general.architecture, also the prefix of its metadata keys */
    kern_rope_mode rope_mode; /* which dims RoPE rotates together */
    int qkv_bias;             /* attn_q/k/v.bias tensors */
    /* attn_q_norm/attn_k_norm before RoPE: MODEL_QK_NORM_HEAD normalises
     * each q and k head ([key_length] weights: Qwen3, Gemma 3),
     * MODEL_QK_NORM_FULL the whole q and k projections ([q width] and
     * [k width] weights: OLMoE). 0: none. */
    int qk_norm;
    /* post_attention_norm/post_ffw_norm: the attention's and the MLP's
     * output RMS-normalised before each residual add */
    int post_norms;
    model_act act;
    int embd_scale_sqrt_dim; /* the input embeddings multiplied by sqrt(dim) */
    float norm_eps;          /* RMSNorm epsilon where the file has none */
    /* Local/global layers: where the file has a sliding window, layer l is
     * local iff l % swa_pattern < swa_pattern - 1, this pattern unless the
     * file states attention.sliding_window_pattern, and the local layers
     * take rope_base_swa (0: the global base) unless the file states
     * rope.local.freq_base. 0: no pattern; a file's window covers every
     * layer (Mistral in a llama file) and those two keys are not read. */
    int swa_pattern;
    float rope_base_swa;
    /* The local layers ignore linear RoPE scaling (llama.cpp's
     * rope_freq_scale_train_swa = 1): only the global ones take the file's
     * rope.scaling.factor. */
    int swa_rope_unscaled;
    int softcaps; /* reads attn_logit_softcapping and final_logit_softcapping */
    model_moe_kind moe;
    /* The experts' top-k weights renormalised to sum 1 (llama.cpp's norm_w:
     * Qwen3-MoE's norm_topk_prob, Mixtral) unless the file states
     * <arch>.expert_weights_norm; 0: the softmax weights as they are (OLMoE). */
    int moe_norm_topk;
    /* The chat family used where the file has no chat template (llama.cpp
     * falls back by architecture too); MODEL_CHAT_NONE: none. The tool-call
     * format is a property of the chat family (server/api/srv_tools), never
     * a column of its own that could disagree with it. */
    model_chat_kind chat;
    /* 1 when this family's CUDA path has run on a GPU against the CPU
     * (test_cuda_model): --device auto picks CUDA only for these (and only
     * without a sliding window); --device cuda runs every family. */
    int cuda_validated;
} model_arch_desc;

/* The row of general.architecture name (len bytes, not NUL-terminated), or
 * NULL for a family brisk does not run. The row is static. */
const model_arch_desc *model_arch_find(const char *name, size_t len);
/* Row i of the table (0 <= i < model_arch_count()), else NULL. */
const model_arch_desc *model_arch_at(int i);
int model_arch_count(void);
/* 1 for the name of an encoder-only (embedding) architecture, which brisk
 * refuses with its own message: it serves embeddings from decoders. */
int model_arch_is_encoder(const char *name);
/* Writes the supported names, "llama, qwen2, ...", in table order into buf
 * (len bytes, always NUL-terminated when len > 0, cut if too small) and
 * returns buf. */
const char *model_arch_list(char *buf, size_t len);

#endif
