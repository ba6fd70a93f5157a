/* model_recipe.c - a layer's steps from its weights and the configuration
 * (model_recipe.h). */
#include "models/model_recipe.h"

#include "common/brisk_error.h"
#include "models/model.h"

static void add(model_recipe *r, model_step s) {
    r->step[r->n++] = (uint8_t)s;
}

void model_layer_recipe(const model_config *c, const model_layer *L, model_recipe *out) {
    (void)c; /* every optional step shows in the layer's weights today */
    out->n = 0;
    /* Attention block: norm, projections, their per-token edits, cache write. */
    add(out, MODEL_STEP_ATTN_NORM);
    add(out, MODEL_STEP_QKV);
    if (L->bq)
        add(out, MODEL_STEP_QKV_BIAS);
    if (L->q_norm)
        add(out, MODEL_STEP_QK_NORM);
    add(out, MODEL_STEP_ROPE);
    add(out, MODEL_STEP_KV_STORE);
    add(out, MODEL_STEP_ATTENTION);
    add(out, MODEL_STEP_ATTN_OUT);
    if (L->post_attn_norm)
        add(out, MODEL_STEP_POST_ATTN_NORM);
    add(out, MODEL_STEP_RESIDUAL);
    /* Feed-forward block: norm, then gate and up, activation, down, or the
     * experts that do that per token. */
    add(out, MODEL_STEP_FFN_NORM);
    if (L->router.data) { /* a mixture of experts */
        add(out, MODEL_STEP_MOE);
    } else {
        add(out, MODEL_STEP_GATE_UP);
        add(out, MODEL_STEP_ACT);
        add(out, MODEL_STEP_DOWN);
    }
    if (L->post_ffn_norm)
        add(out, MODEL_STEP_POST_FFN_NORM);
    add(out, MODEL_STEP_RESIDUAL);
}

const char *model_step_name(int step) {
    static const char *const names[MODEL_STEP_COUNT] = {
        [MODEL_STEP_ATTN_NORM] = "attn_norm",
        [MODEL_STEP_QKV] = "qkv",
        [MODEL_STEP_QKV_BIAS] = "qkv_bias",
        [MODEL_STEP_QK_NORM] = "qk_norm",
        [MODEL_STEP_ROPE] = "rope",
        [MODEL_STEP_KV_STORE] = "kv_store",
        [MODEL_STEP_ATTENTION] = "attention",
        [MODEL_STEP_ATTN_OUT] = "attn_out",
        [MODEL_STEP_POST_ATTN_NORM] = "post_attn_norm",
        [MODEL_STEP_RESIDUAL] = "residual",
        [MODEL_STEP_FFN_NORM] = "ffn_norm",
        [MODEL_STEP_GATE_UP] = "gate_up",
        [MODEL_STEP_ACT] = "act",
        [MODEL_STEP_DOWN] = "down",
        [MODEL_STEP_POST_FFN_NORM] = "post_ffn_norm",
        [MODEL_STEP_MOE] = "moe",
    };
    return step >= 0 && step < MODEL_STEP_COUNT ? names[step] : "?";
}

int model_recipe_trace_check(const model *m, const model_recipe *trace, char *err, size_t err_len) {
    const model_config *c = model_get_config(m);
    for (int l = 0; l < c->n_layers; l++) {
        model_recipe r;
        model_layer_recipe(c, &model_get_weights(m)->layers[l], &r);
        const model_recipe *t = &trace[l];
        for (int i = 0; i < r.n || i < t->n; i++) {
            int want = i < r.n ? r.step[i] : -1, got = i < t->n ? t->step[i] : -1;
            if (want != got)
                return brisk_set_err(err, err_len, BRISK_EINVAL,
                                     "layer %d: step %d is %s, the recipe has %s", l, i,
                                     got < 0 ? "missing" : model_step_name(got),
                                     want < 0 ? "nothing more" : model_step_name(want));
        }
    }
    return 0;
}
