/* model_recipe.h - a transformer layer as a list of steps: the one
 * description of the block that every backend's forward pass walks (the CPU
 * in models/forward.c, CUDA in models/backend_cuda.c), so that a family's
 * optional steps are decided in one place and no backend can quietly differ.
 *
 * Buffers are named as the forward passes name them: x the residual stream,
 * xb a block's normalised input, q/k/v, att the attention output, xb2 a
 * block's output before the residual add, hb/hb2 the MLP's gate and up
 * products. A step is optional where the layer's weights say so (the biases,
 * the q/k norms and the post-norms are there or NULL, as the file has them),
 * or the configuration does (the activation).
 *
 * A backend may run adjacent steps as one kernel (the CPU does QKV_BIAS ..
 * KV_STORE per token in one task; CUDA folds RESIDUAL into the next norm's
 * kernel) but runs every step, in this order, and records each one into the
 * trace when one is set (model_state_set_trace, the backends' set_trace):
 * test_model_recipe checks the CPU pass against the recipe, test_cuda_model
 * the CUDA pass. */
#ifndef MODEL_RECIPE_H
#define MODEL_RECIPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum model_step {
    MODEL_STEP_ATTN_NORM = 0,  /* xb = rmsnorm(x) * attn_norm */
    MODEL_STEP_QKV,            /* q, k, v = xb Wq, xb Wk, xb Wv */
    MODEL_STEP_QKV_BIAS,       /* q, k, v += bq, bk, bv (Qwen2) */
    MODEL_STEP_QK_NORM,        /* each head of q and k RMS-normalised (Qwen3, Gemma 3) */
    MODEL_STEP_ROPE,           /* q, k rotated at their positions (the layer's base and scale) */
    MODEL_STEP_KV_STORE,       /* k, v into the cache at each token's slot */
    MODEL_STEP_ATTENTION,      /* att = causal attention over the cache (window, soft-cap) */
    MODEL_STEP_ATTN_OUT,       /* xb2 = att Wo */
    MODEL_STEP_POST_ATTN_NORM, /* xb2 = rmsnorm(xb2) * post_attn_norm (Gemma 2/3) */
    MODEL_STEP_RESIDUAL,       /* x += xb2 */
    MODEL_STEP_FFN_NORM,       /* xb = rmsnorm(x) * ffn_norm */
    MODEL_STEP_GATE_UP,        /* hb, hb2 = xb Wgate, xb Wup */
    MODEL_STEP_ACT,            /* hb = act(hb) * hb2, act the config's (SiLU, GELU-tanh) */
    MODEL_STEP_DOWN,           /* xb2 = hb Wdown */
    MODEL_STEP_POST_FFN_NORM,  /* xb2 = rmsnorm(xb2) * post_ffn_norm (Gemma 2/3) */
    /* xb2 = the mixture of experts of xb in place of GATE_UP, ACT, DOWN:
     * router logits, each token's top-k experts and weights, the experts'
     * gated MLPs and their weighted sum (models/model_moe.h) */
    MODEL_STEP_MOE,
    MODEL_STEP_COUNT
} model_step;

/* Longest recipe: every step once, RESIDUAL twice (no recipe has both the
 * dense MLP and MOE, so this is more than enough). */
#define MODEL_RECIPE_MAX (MODEL_STEP_COUNT + 1)

typedef struct model_recipe {
    int n;
    uint8_t step[MODEL_RECIPE_MAX]; /* model_step values, in order */
} model_recipe;

struct model_config;
struct model_layer;

/* The steps of layer L of a model configured by c, in order. */
void model_layer_recipe(const struct model_config *c, const struct model_layer *L,
                        model_recipe *out);

/* "attn_norm", "qkv", ... (static); "?" outside the enum. */
const char *model_step_name(int step);

struct model;
/* 0 when trace[l] (n_layers entries, one forward's record) equals layer l's
 * recipe for every layer of m; else BRISK_EINVAL with the first difference
 * in err ("layer 3: step 9 is residual, the recipe has post_attn_norm"). */
int model_recipe_trace_check(const struct model *m, const model_recipe *trace, char *err,
                             size_t err_len);

/* Appends step s to a trace's recipe (a backend running layer l with
 * trace[l] set; nothing when trace is NULL). */
static inline void model_recipe_trace(model_recipe *trace, int l, model_step s) {
    if (trace && trace[l].n < MODEL_RECIPE_MAX)
        trace[l].step[trace[l].n++] = (uint8_t)s;
}

#endif
