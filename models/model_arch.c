/* model_arch.c - the architecture table (model_arch.h): one row per family.
 *
 * Adding a family whose blocks are made of operations brisk already has is
 * one row here plus its tests (a synthetic model in
 * tests/integration/test_synthetic_models.py, run against the float64
 * reference, and the rows test of tests/unit/test_model_arch.c). Features
 * that show in the tensors alone (Phi-3's fused q/k/v and gate/up, LongRoPE
 * factors, Llama 3.1's rope_freqs) are not columns: the loader follows the
 * file. */
#include "models/model_arch.h"

#include <stdio.h>
#include <string.h>

static const model_arch_desc ARCHS[] = {
    /* GGUF llama checkpoints have their q/k rows permuted by the converters
     * so that RoPE rotates adjacent pairs. */
    /* A llama file with expert_count is Mixtral: its experts' top-k
     * softmax weights renormalised (the same as a softmax over the top-k
     * logits). Its chat template comes with the file (Mistral's [INST]). */
    {.name = "llama",
     .rope_mode = KERN_ROPE_ADJACENT,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5f,
     .moe = MODEL_MOE_OPTIONAL,
     .moe_norm_topk = 1,
     .chat = MODEL_CHAT_NONE,
     .cuda_validated = 1},
    {.name = "qwen2",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .qkv_bias = 1,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5f,
     .chat = MODEL_CHAT_CHATML,
     .cuda_validated = 1},
    /* Qwen3: no q/k/v bias; each head of q and k RMS-normalised (its own
     * [key_length] weight) before RoPE. */
    {.name = "qwen3",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .qk_norm = MODEL_QK_NORM_HEAD,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5f,
     .chat = MODEL_CHAT_CHATML},
    /* Gemma 2: the norms after the attention and the MLP, local and global
     * layers alternating (local first) with one RoPE base, attention-score
     * and final-logit soft-capping from the file. The query scale stays
     * 1/sqrt(key_length) (27B's 1/sqrt(width/heads) is not told apart). */
    {.name = "gemma2",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .post_norms = 1,
     .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt_dim = 1,
     .norm_eps = 1e-6f,
     .swa_pattern = 2,
     .softcaps = 1,
     .chat = MODEL_CHAT_GEMMA},
    /* Gemma 3: as Gemma 2 with per-head q/k norms, every sixth layer
     * global, the local layers on RoPE base 10,000 and not linearly scaled. */
    {.name = "gemma3",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .qk_norm = MODEL_QK_NORM_HEAD,
     .post_norms = 1,
     .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt_dim = 1,
     .norm_eps = 1e-6f,
     .swa_pattern = 6,
     .rope_base_swa = 10000.0f,
     .swa_rope_unscaled = 1,
     .softcaps = 1,
     .chat = MODEL_CHAT_GEMMA},
    /* Phi-3: LongRoPE factors where the file has them, fused q/k/v and
     * gate/up tensors (split at load), a window over every layer where the
     * file sets one. */
    {.name = "phi3",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5f,
     .chat = MODEL_CHAT_PHI3},
    /* Gemma (1): the Gemma block (GELU-tanh gated MLP, embeddings times
     * sqrt(dim), norm weights that in GGUF already hold Gemma's +1) on a
     * plain decoder: no post-norms, q/k norms, windows or soft-caps. */
    {.name = "gemma",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .act = MODEL_ACT_GELU_TANH,
     .embd_scale_sqrt_dim = 1,
     .norm_eps = 1e-6f,
     .chat = MODEL_CHAT_GEMMA},
    /* Qwen3-MoE: Qwen3's attention; every MLP a mixture of experts of
     * expert_feed_forward_length (30B-A3B: 128 experts of 768, top 8),
     * the top-k weights renormalised (norm_topk_prob, which llama.cpp
     * always applies for this family). */
    {.name = "qwen3moe",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .qk_norm = MODEL_QK_NORM_HEAD,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-6f,
     .moe = MODEL_MOE_REQUIRED,
     .moe_norm_topk = 1,
     .chat = MODEL_CHAT_CHATML},
    /* OLMoE: RoPE on split halves, q and k RMS-normalised over the whole
     * projection (not per head), 64 experts top 8 whose softmax weights are
     * used as they are (not renormalised). Its chat template (Tulu's
     * <|user|>) comes with the file; none is guessed. */
    {.name = "olmoe",
     .rope_mode = KERN_ROPE_SPLIT_HALF,
     .qk_norm = MODEL_QK_NORM_FULL,
     .act = MODEL_ACT_SILU,
     .norm_eps = 1e-5f,
     .moe = MODEL_MOE_REQUIRED,
     .moe_norm_topk = 0,
     .chat = MODEL_CHAT_NONE},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

/* Encoder-only families llama.cpp converts, refused with their own message. */
static const char *const ENCODERS[] = {"bert",      "nomic-bert",  "nomic-bert-moe", "jina-bert-v2",
                                       "t5encoder", "modern-bert", "neo-bert"};

const model_arch_desc *model_arch_find(const char *name, size_t len) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strlen(ARCHS[i].name) == len && memcmp(ARCHS[i].name, name, len) == 0)
            return &ARCHS[i];
    return NULL;
}

const model_arch_desc *model_arch_at(int i) {
    return i >= 0 && i < N_ARCHS ? &ARCHS[i] : NULL;
}

int model_arch_count(void) {
    return N_ARCHS;
}

int model_arch_is_encoder(const char *name) {
    for (size_t i = 0; i < sizeof ENCODERS / sizeof ENCODERS[0]; i++)
        if (!strcmp(name, ENCODERS[i]))
            return 1;
    return 0;
}

const char *model_arch_list(char *buf, size_t len) {
    if (len == 0)
        return buf;
    buf[0] = '\0';
    size_t at = 0;
    for (int i = 0; i < N_ARCHS && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", ARCHS[i].name);
    return buf;
}
