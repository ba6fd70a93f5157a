/* hf_folder.c - a Hugging Face folder as a GGUF image (hf_folder.h): the
 * architecture, config-key and tensor-name tables, and the conversions
 * llama.cpp's converter applies on the way. */
#include "models/hf_folder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "common/brisk_file.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "models/gguf_write.h"
#include "models/model_arch.h"
#include "models/safetensors.h"
#include "models/tok_hfjson.h"

/* config.json of the largest models is a few KB; 16 MiB bounds a hostile one. */
#define HF_MAX_CONFIG_BYTES (16u << 20)
#define ERR(code, ...) brisk_set_err(err, err_len, code, __VA_ARGS__)

/* One Hugging Face architecture: the row of model_arch.c it fills and what
 * the converter changes for it. */
typedef struct hf_arch {
    const char *hf;   /* config.json "architectures"[0] */
    const char *arch; /* the model_arch.c row */
    /* q/k rows reordered from rotate-half to adjacent pairs (the llama row
     * rotates adjacent pairs, as llama.cpp's converter leaves its files) */
    int permute_qk;
    int norm_plus_one; /* Gemma: the folder stores w, brisk (as GGUF) w + 1 */
    /* Gemma 2/3: post_attention_layernorm is the attention's post-norm and
     * pre_feedforward_layernorm the MLP's input norm */
    int gemma_norms;
    const char *act; /* the activation config.json must name */
    /* A mixture of experts in every layer (issue 40): the config key of the
     * experts' width (NULL: none, a dense family) and of whether the top-k
     * weights are renormalised (NULL: always, Mixtral). */
    const char *moe_width;
    const char *moe_norm;
} hf_arch;

static const hf_arch HF_ARCHS[] = {
    {"LlamaForCausalLM", "llama", 1, 0, 0, "silu", NULL, NULL},
    {"MistralForCausalLM", "llama", 1, 0, 0, "silu", NULL, NULL},
    {"Qwen2ForCausalLM", "qwen2", 0, 0, 0, "silu", NULL, NULL},
    {"Qwen3ForCausalLM", "qwen3", 0, 0, 0, "silu", NULL, NULL},
    {"GemmaForCausalLM", "gemma", 0, 1, 0, "gelu_pytorch_tanh", NULL, NULL},
    {"Gemma2ForCausalLM", "gemma2", 0, 1, 1, "gelu_pytorch_tanh", NULL, NULL},
    {"Gemma3ForCausalLM", "gemma3", 0, 1, 1, "gelu_pytorch_tanh", NULL, NULL},
    {"Phi3ForCausalLM", "phi3", 0, 0, 0, "silu", NULL, NULL},
    {"Qwen3MoeForCausalLM", "qwen3moe", 0, 0, 0, "silu", "moe_intermediate_size", "norm_topk_prob"},
    {"MixtralForCausalLM", "llama", 1, 0, 0, "silu", "intermediate_size", NULL},
    {"OlmoeForCausalLM", "olmoe", 0, 0, 0, "silu", "intermediate_size", "norm_topk_prob"},
};
#define N_HF_ARCHS ((int)(sizeof HF_ARCHS / sizeof HF_ARCHS[0]))

const char *model_hf_arch_list(char *buf, size_t len) {
    if (len == 0)
        return buf;
    buf[0] = '\0';
    size_t at = 0;
    for (int i = 0; i < N_HF_ARCHS && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", HF_ARCHS[i].hf);
    return buf;
}

/* config.json keys onto "<arch>.<suffix>" metadata; 'u' an integer, 'f' a
 * float. A null value is the same as an absent one. */
typedef struct hf_key {
    const char *hf;
    const char *gguf;
    char kind;
    int required;
} hf_key;

static const hf_key HF_KEYS[] = {
    {"num_hidden_layers", "block_count", 'u', 1},
    {"hidden_size", "embedding_length", 'u', 1},
    {"intermediate_size", "feed_forward_length", 'u', 1},
    {"num_attention_heads", "attention.head_count", 'u', 1},
    {"num_key_value_heads", "attention.head_count_kv", 'u', 0},
    {"max_position_embeddings", "context_length", 'u', 0},
    {"head_dim", "attention.key_length", 'u', 0},
    {"head_dim", "attention.value_length", 'u', 0},
    {"rope_theta", "rope.freq_base", 'f', 0},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon", 'f', 0},
    {"rope_local_base_freq", "rope.local.freq_base", 'f', 0},
    {"attn_logit_softcapping", "attn_logit_softcapping", 'f', 0},
    {"final_logit_softcapping", "final_logit_softcapping", 'f', 0},
};

/* Per-layer tensor names, "model.layers.N." + hf -> "blk.N." + gguf; gguf
 * NULL: a tensor the converter drops. */
typedef struct hf_tensor_name {
    const char *hf;
    const char *gguf;
} hf_tensor_name;

static const hf_tensor_name HF_LAYER_TENSORS[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"}, /* Phi-3: gate and up, gate first */
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"self_attn.rotary_emb.inv_freq", NULL}, /* older checkpoints: computed, not read */
};

int model_hf_is_folder(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 1;
    const char *slash = strrchr(path, '/');
    return !strcmp(slash ? slash + 1 : path, "config.json");
}

/* ---- config.json ----------------------------------------------------------- */

typedef struct hf_build {
    const hf_arch *a;
    gguf_writer *w;
    int n_layers, n_heads, n_kv_heads, head_dim, dim;
    int tied;
    int n_expert, n_expert_used, expert_hidden; /* a mixture of experts; 0: dense */
    struct hf_expert *exps; /* the experts' tensors as found, gathered into stacks */
    size_t n_exps, cap_exps;
    void **bufs; /* converted tensors, alive until the image is written */
    int n_bufs;
    size_t cap_bufs;
    model_hf_weight *mats; /* the matrices, read in place (hf_folder.h) */
    size_t n_mats, cap_mats;
    char (*img_names)[MODEL_HF_MAX_NAME]; /* the tensors written into the image */
    size_t n_img, cap_img;
} hf_build;

struct model_hf_weights {
    safetensors_set *s;
    model_hf_weight *mats; /* [n], by name */
    int64_t n;
};

static const cJSON *cfg_get(const cJSON *cfg, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNull(j) ? NULL : j;
}

/* An integer in [0, 2^31) or BRISK_EFORMAT; BRISK_ENOTFOUND when absent. */
static int cfg_int(const cJSON *cfg, const char *key, int *out, char *err, size_t err_len) {
    const cJSON *j = cfg_get(cfg, key);
    if (!j)
        return BRISK_ENOTFOUND;
    double d = cJSON_IsNumber(j) ? j->valuedouble : -1.0;
    if (!(d >= 0.0 && d < 2147483648.0) || d != floor(d))
        return ERR(BRISK_EFORMAT, "config.json: '%s' is not an integer in [0, 2^31)", key);
    *out = (int)d;
    return 0;
}

static int cfg_float(const cJSON *cfg, const char *key, float *out, char *err, size_t err_len) {
    const cJSON *j = cfg_get(cfg, key);
    if (!j)
        return BRISK_ENOTFOUND;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || !isfinite((float)j->valuedouble))
        return ERR(BRISK_EFORMAT, "config.json: '%s' is not a finite number", key);
    *out = (float)j->valuedouble;
    return 0;
}

static int set_arch_u32(hf_build *b, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->arch, suffix);
    return gguf_writer_set_u32(b->w, key, v);
}

static int set_arch_f32(hf_build *b, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->a->arch, suffix);
    return gguf_writer_set_f32(b->w, key, v);
}

static void *keep_buf(hf_build *b, size_t bytes) {
    if ((size_t)b->n_bufs == b->cap_bufs) {
        size_t cap = b->cap_bufs ? 2 * b->cap_bufs : 64;
        void **nb = realloc(b->bufs, cap * sizeof *nb);
        if (!nb)
            return NULL;
        b->bufs = nb;
        b->cap_bufs = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        b->bufs[b->n_bufs++] = p;
    return p;
}

/* Gemma's local/global pattern from layer_types, where given: layer l is
 * local iff l % p < p - 1. A family without windows must have every layer
 * global. */
static int read_layer_types(hf_build *b, const cJSON *cfg, int has_swa, char *err, size_t err_len) {
    const cJSON *lt = cfg_get(cfg, "layer_types");
    if (!lt)
        return 0;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != b->n_layers)
        return ERR(BRISK_EFORMAT, "config.json: 'layer_types' is not an array of %d names",
                   b->n_layers);
    int p = 0, l = 0;
    for (const cJSON *x = lt->child; x; x = x->next, l++) {
        if (!cJSON_IsString(x) || (strcmp(x->valuestring, "full_attention") &&
                                   strcmp(x->valuestring, "sliding_attention")))
            return ERR(BRISK_EUNSUPPORTED,
                       "config.json: layer_types[%d] is not 'full_attention' or "
                       "'sliding_attention'",
                       l);
        if (!p && !strcmp(x->valuestring, "full_attention"))
            p = l + 1;
    }
    if (!has_swa) {
        if (p != 1 || b->n_layers > 1)
            for (const cJSON *x = lt->child; x; x = x->next)
                if (strcmp(x->valuestring, "full_attention"))
                    return ERR(BRISK_EUNSUPPORTED,
                               "config.json: sliding-window layers are not supported for %s",
                               b->a->hf);
        return 0;
    }
    if (!p)
        return ERR(BRISK_EUNSUPPORTED, "config.json: layer_types has no full_attention layer");
    l = 0;
    for (const cJSON *x = lt->child; x; x = x->next, l++)
        if ((l % p < p - 1) != !strcmp(x->valuestring, "sliding_attention"))
            return ERR(BRISK_EUNSUPPORTED,
                       "config.json: layer_types is not a repeating local/global pattern "
                       "(layer %d)",
                       l);
    return set_arch_u32(b, "attention.sliding_window_pattern", (uint32_t)p) < 0
               ? ERR(BRISK_ENOMEM, "hf: out of memory")
               : 0;
}

/* Llama 3.1's frequency divisors (rope_type "llama3"), as the converter
 * computes its rope_freqs tensor: long wavelengths are divided by factor,
 * short ones kept, the band between blended. */
static int rope_llama3(hf_build *b, const cJSON *rs, float base, int n_rot, char *err,
                       size_t err_len) {
    float factor = 8.0f, lo = 1.0f, hi = 4.0f;
    int orig = 8192, rc;
    if ((rc = cfg_float(rs, "factor", &factor, err, err_len)) < 0 && rc != BRISK_ENOTFOUND)
        return rc;
    if ((rc = cfg_float(rs, "low_freq_factor", &lo, err, err_len)) < 0 && rc != BRISK_ENOTFOUND)
        return rc;
    if ((rc = cfg_float(rs, "high_freq_factor", &hi, err, err_len)) < 0 && rc != BRISK_ENOTFOUND)
        return rc;
    if ((rc = cfg_int(rs, "original_max_position_embeddings", &orig, err, err_len)) < 0 &&
        rc != BRISK_ENOTFOUND)
        return rc;
    if (!(factor > 0.0f) || !(lo > 0.0f) || !(hi > lo) || orig <= 0 || n_rot < 2 || n_rot > 65536)
        return ERR(BRISK_EFORMAT, "config.json: rope_scaling (llama3) has values out of range");
    float *f = keep_buf(b, (size_t)(n_rot / 2) * sizeof *f);
    if (!f)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    double lo_wl = orig / (double)lo, hi_wl = orig / (double)hi;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = 1.0 / pow((double)base, 2.0 * i / n_rot);
        double wl = 2.0 * M_PI / freq;
        if (wl < hi_wl)
            f[i] = 1.0f;
        else if (wl > lo_wl)
            f[i] = factor;
        else {
            double smooth = (orig / wl - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
    int64_t ne[1] = {n_rot / 2};
    return gguf_writer_add_tensor(b->w, "rope_freqs.weight", KERN_TYPE_F32, 1, ne, f) < 0
               ? ERR(BRISK_ENOMEM, "hf: out of memory")
               : 0;
}

/* transformers 5 writes the RoPE settings as `rope_parameters` (rope_theta,
 * rope_type and the scaling fields together) instead of rope_theta and
 * rope_scaling, per layer type where they differ (Gemma 3: full_attention,
 * sliding_attention). The object for the global layers (local 0) or the
 * sliding ones (local 1), or NULL. */
static const cJSON *rope_params(const cJSON *cfg, int local) {
    const cJSON *rp = cfg_get(cfg, "rope_parameters");
    if (!cJSON_IsObject(rp))
        return NULL;
    const cJSON *by_type = cfg_get(rp, local ? "sliding_attention" : "full_attention");
    if (cJSON_IsObject(by_type))
        return by_type;
    return local ? NULL : rp;
}

/* A float key of config.json; rope_theta and rope_local_base_freq fall
 * back to rope_parameters' rope_theta (global, sliding). */
static int cfg_rope_float(const cJSON *cfg, const char *key, float *out, char *err,
                          size_t err_len) {
    int rc = cfg_float(cfg, key, out, err, err_len);
    int local = !strcmp(key, "rope_local_base_freq");
    if (rc != BRISK_ENOTFOUND || (!local && strcmp(key, "rope_theta")))
        return rc;
    const cJSON *rp = rope_params(cfg, local);
    return rp ? cfg_float(rp, "rope_theta", out, err, err_len) : BRISK_ENOTFOUND;
}

/* One LongRoPE factor list (rope_scaling's long_factor or short_factor):
 * n_rot / 2 finite positive numbers, as the tensor `name`. */
static int rope_factor_list(hf_build *b, const cJSON *rs, const char *key, const char *name,
                            int n_rot, char *err, size_t err_len) {
    const cJSON *a = cfg_get(rs, key);
    int n = n_rot / 2;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return ERR(BRISK_EFORMAT,
                   "config.json: rope_scaling (longrope) '%s' is not a list of %d "
                   "numbers (rotary dimensions / 2)",
                   key, n);
    float *f = keep_buf(b, (size_t)n * sizeof *f);
    if (!f)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(d > 0.0) || !isfinite(d) || d > 1e6)
            return ERR(BRISK_EFORMAT,
                       "config.json: rope_scaling (longrope) '%s'[%d] is not a "
                       "positive number",
                       key, i);
        f[i++] = (float)d;
    }
    int64_t ne[1] = {n};
    return gguf_writer_add_tensor(b->w, name, KERN_TYPE_F32, 1, ne, f) < 0
               ? ERR(BRISK_ENOMEM, "hf: out of memory")
               : 0;
}

/* Phi-3's LongRoPE (rope_type "longrope"), as llama.cpp's converter writes
 * it: the long and short frequency divisors as rope_factors_long/_short,
 * the original context (rope_scaling's or the config's
 * original_max_position_embeddings) and the attention factor (rope_scaling's
 * attention_factor, else sqrt(1 + ln(max / original) / ln(original)) when
 * the context was extended, else 1). The forward pass takes the long
 * factors when the served context exceeds the original, as llama.cpp does. */
static int rope_longrope(hf_build *b, const cJSON *cfg, const cJSON *rs, int n_rot, char *err,
                         size_t err_len) {
    int orig = 0, max_pos = 0, rc;
    if ((rc = cfg_int(rs, "original_max_position_embeddings", &orig, err, err_len)) ==
        BRISK_ENOTFOUND)
        rc = cfg_int(cfg, "original_max_position_embeddings", &orig, err, err_len);
    if (rc < 0)
        return rc == BRISK_ENOTFOUND ? ERR(BRISK_EFORMAT, "config.json: longrope without "
                                                          "original_max_position_embeddings")
                                     : rc;
    if ((rc = cfg_int(cfg, "max_position_embeddings", &max_pos, err, err_len)) < 0 &&
        rc != BRISK_ENOTFOUND)
        return rc;
    if (orig < 2 || orig > (1 << 24) || max_pos < 0 || n_rot < 2 || n_rot > 65536)
        return ERR(BRISK_EFORMAT, "config.json: rope_scaling (longrope) has values out of range");
    float attn = 1.0f;
    if ((rc = cfg_float(rs, "attention_factor", &attn, err, err_len)) == BRISK_ENOTFOUND) {
        double scale = max_pos > orig ? (double)max_pos / orig : 1.0;
        attn = scale > 1.0 ? (float)sqrt(1.0 + log(scale) / log((double)orig)) : 1.0f;
    } else if (rc < 0) {
        return rc;
    }
    if (!(attn > 0.0f) || !isfinite(attn) || attn > 16.0f)
        return ERR(BRISK_EFORMAT, "config.json: rope_scaling (longrope) attention_factor %g",
                   (double)attn);
    if ((rc = rope_factor_list(b, rs, "long_factor", "rope_factors_long.weight", n_rot, err,
                               err_len)) < 0 ||
        (rc = rope_factor_list(b, rs, "short_factor", "rope_factors_short.weight", n_rot, err,
                               err_len)) < 0)
        return rc;
    if (set_arch_u32(b, "rope.scaling.original_context_length", (uint32_t)orig) < 0 ||
        set_arch_f32(b, "rope.scaling.attn_factor", attn) < 0)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    return 0;
}

static int read_rope_scaling(hf_build *b, const cJSON *cfg, float base, int n_rot, char *err,
                             size_t err_len) {
    const cJSON *rs = cfg_get(cfg, "rope_scaling");
    if (!rs) { /* transformers 5: rope_type and its fields in rope_parameters */
        rs = rope_params(cfg, 0);
        if (!rs || (!cfg_get(rs, "rope_type") && !cfg_get(rs, "type")))
            return 0;
    }
    if (!cJSON_IsObject(rs))
        return ERR(BRISK_EFORMAT, "config.json: 'rope_scaling' is not an object");
    const cJSON *t = cfg_get(rs, "rope_type");
    if (!t)
        t = cfg_get(rs, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!type)
        return ERR(BRISK_EFORMAT, "config.json: rope_scaling has no rope_type");
    if (!strcmp(type, "default"))
        return 0;
    if (!strcmp(type, "linear")) {
        float factor = 0.0f;
        int rc = cfg_float(rs, "factor", &factor, err, err_len);
        if (rc < 0)
            return rc == BRISK_ENOTFOUND
                       ? ERR(BRISK_EFORMAT, "config.json: linear rope_scaling without a factor")
                       : rc;
        if (!(factor > 0.0f))
            return ERR(BRISK_EFORMAT, "config.json: rope_scaling factor %g", (double)factor);
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", b->a->arch);
        if (gguf_writer_set_str(b->w, key, "linear") < 0 ||
            set_arch_f32(b, "rope.scaling.factor", factor) < 0)
            return ERR(BRISK_ENOMEM, "hf: out of memory");
        return 0;
    }
    if (!strcmp(type, "llama3") && !strcmp(b->a->arch, "llama"))
        return rope_llama3(b, rs, base, n_rot, err, err_len);
    if ((!strcmp(type, "longrope") || !strcmp(type, "su")) && !strcmp(b->a->arch, "phi3"))
        return rope_longrope(b, cfg, rs, n_rot, err, err_len);
    char t32[40];
    snprintf(t32, sizeof t32, "%.32s", type);
    return ERR(BRISK_EUNSUPPORTED,
               "config.json: rope_scaling type '%s' is not supported for %s (supported: "
               "default, linear%s)",
               t32, b->a->hf,
               !strcmp(b->a->arch, "llama")  ? ", llama3"
               : !strcmp(b->a->arch, "phi3") ? ", longrope"
                                             : "");
}

/* A mixture of experts' keys: the expert count (num_experts, or
 * num_local_experts as Mixtral and transformers 5's Qwen3-MoE write it), the
 * experts per token, their width and the renormalisation of the top-k
 * weights, as the GGUF's <arch>.expert_* keys. What brisk does not run is
 * refused: shared experts, dense layers among the sparse ones, OLMoE's
 * clip_qkv. */
static int read_moe(hf_build *b, const cJSON *cfg, char *err, size_t err_len) {
    const hf_arch *a = b->a;
    int rc = cfg_int(cfg, "num_experts", &b->n_expert, err, err_len);
    if (rc == BRISK_ENOTFOUND)
        rc = cfg_int(cfg, "num_local_experts", &b->n_expert, err, err_len);
    if (rc == BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "config.json: %s without 'num_experts' or 'num_local_experts'",
                   a->hf);
    if (rc < 0)
        return rc;
    /* model.c's bound: n_expert times a row count must fit an int. */
    if (b->n_expert < 1 || b->n_expert > 65536)
        return ERR(BRISK_EFORMAT, "config.json: %d experts (1 to 65536)", b->n_expert);
    if ((rc = cfg_int(cfg, "num_experts_per_tok", &b->n_expert_used, err, err_len)) < 0)
        return rc == BRISK_ENOTFOUND
                   ? ERR(BRISK_EFORMAT, "config.json: %s without 'num_experts_per_tok'", a->hf)
                   : rc;
    if (b->n_expert_used < 1 || b->n_expert_used > b->n_expert)
        return ERR(BRISK_EFORMAT, "config.json: num_experts_per_tok %d is not in [1, %d experts]",
                   b->n_expert_used, b->n_expert);
    if ((rc = cfg_int(cfg, a->moe_width, &b->expert_hidden, err, err_len)) < 0 ||
        b->expert_hidden < 1)
        return rc < 0 && rc != BRISK_ENOTFOUND
                   ? rc
                   : ERR(BRISK_EFORMAT, "config.json: %s needs '%s' > 0", a->hf, a->moe_width);
    int norm = 1;
    if (a->moe_norm) {
        const cJSON *n = cfg_get(cfg, a->moe_norm);
        if (n && !cJSON_IsBool(n))
            return ERR(BRISK_EFORMAT, "config.json: '%s' is not a boolean", a->moe_norm);
        norm = cJSON_IsTrue(n); /* transformers' default: false */
    }
    static const char *const shared[] = {"shared_expert_intermediate_size", "n_shared_experts",
                                         "num_shared_experts"};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        const cJSON *j = cfg_get(cfg, shared[i]);
        if (j && !(cJSON_IsNumber(j) && j->valuedouble == 0.0))
            return ERR(BRISK_EUNSUPPORTED, "config.json: '%s': shared experts are not supported",
                       shared[i]);
    }
    int step = 1;
    if ((rc = cfg_int(cfg, "decoder_sparse_step", &step, err, err_len)) < 0 &&
        rc != BRISK_ENOTFOUND)
        return rc;
    const cJSON *dense = cfg_get(cfg, "mlp_only_layers");
    if (step != 1 || (dense && (!cJSON_IsArray(dense) || cJSON_GetArraySize(dense) > 0)))
        return ERR(BRISK_EUNSUPPORTED,
                   "config.json: dense MLP layers among the experts (decoder_sparse_step %d, "
                   "mlp_only_layers) are not supported: brisk runs experts in every layer",
                   step);
    if (cfg_get(cfg, "clip_qkv"))
        return ERR(BRISK_EUNSUPPORTED, "config.json: 'clip_qkv' is not supported for %s", a->hf);
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a->arch);
    if (set_arch_u32(b, "expert_count", (uint32_t)b->n_expert) < 0 ||
        set_arch_u32(b, "expert_used_count", (uint32_t)b->n_expert_used) < 0 ||
        set_arch_u32(b, "expert_feed_forward_length", (uint32_t)b->expert_hidden) < 0 ||
        gguf_writer_set_bool(b->w, key, norm) < 0)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    return 0;
}

static int read_config(hf_build *b, const cJSON *cfg, char *err, size_t err_len) {
    int rc;
    for (size_t i = 0; i < sizeof HF_KEYS / sizeof HF_KEYS[0]; i++) {
        const hf_key *k = &HF_KEYS[i];
        if (k->kind == 'u') {
            int v = 0;
            rc = cfg_int(cfg, k->hf, &v, err, err_len);
            if (rc == BRISK_ENOTFOUND && k->required)
                return ERR(BRISK_EFORMAT, "config.json: missing '%s'", k->hf);
            if (rc == BRISK_ENOTFOUND)
                continue;
            if (rc < 0)
                return rc;
            if (set_arch_u32(b, k->gguf, (uint32_t)v) < 0)
                return ERR(BRISK_ENOMEM, "hf: out of memory");
        } else {
            float v = 0.0f;
            rc = cfg_rope_float(cfg, k->hf, &v, err, err_len);
            if (rc == BRISK_ENOTFOUND)
                continue;
            if (rc < 0)
                return rc;
            if (set_arch_f32(b, k->gguf, v) < 0)
                return ERR(BRISK_ENOMEM, "hf: out of memory");
        }
    }
    cfg_int(cfg, "num_hidden_layers", &b->n_layers, err, err_len);
    cfg_int(cfg, "hidden_size", &b->dim, err, err_len);
    cfg_int(cfg, "num_attention_heads", &b->n_heads, err, err_len);
    b->n_kv_heads = b->n_heads;
    cfg_int(cfg, "num_key_value_heads", &b->n_kv_heads, err, err_len);
    if (b->n_heads <= 0 || b->n_kv_heads <= 0 || b->n_layers <= 0 || b->dim <= 0)
        return ERR(BRISK_EFORMAT, "config.json: a zero layer, width or head count");
    b->head_dim = b->dim / b->n_heads;
    cfg_int(cfg, "head_dim", &b->head_dim, err, err_len);

    /* The activation: Gemma names it hidden_activation, others hidden_act. */
    const cJSON *act = cfg_get(cfg, "hidden_activation");
    if (!act)
        act = cfg_get(cfg, "hidden_act");
    if (act && (!cJSON_IsString(act) ||
                (strcmp(act->valuestring, b->a->act) &&
                 !(!strcmp(b->a->act, "silu") && !strcmp(act->valuestring, "swish")))))
        return ERR(BRISK_EUNSUPPORTED,
                   "config.json: activation '%.32s' is not supported for %s "
                   "(it runs '%s')",
                   cJSON_IsString(act) ? act->valuestring : "?", b->a->hf, b->a->act);
    static const char *const refused_true[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if (cJSON_IsTrue(cfg_get(cfg, refused_true[i])) && strcmp(b->a->arch, "qwen2"))
            return ERR(BRISK_EUNSUPPORTED, "config.json: '%s': true is not supported for %s",
                       refused_true[i], b->a->hf);
    if (cfg_get(cfg, "quantization_config"))
        return ERR(BRISK_EUNSUPPORTED,
                   "config.json: quantized checkpoints (quantization_config) are not supported; "
                   "brisk reads F32, F16 and BF16 safetensors");
    int has_swa = !strcmp(b->a->arch, "gemma2") || !strcmp(b->a->arch, "gemma3");
    int window = 0;
    if ((rc = cfg_int(cfg, "sliding_window", &window, err, err_len)) < 0 && rc != BRISK_ENOTFOUND)
        return rc;
    if (!strcmp(b->a->arch, "qwen2") || !strcmp(b->a->arch, "qwen3") ||
        !strcmp(b->a->arch, "qwen3moe")) {
        if (cJSON_IsTrue(cfg_get(cfg, "use_sliding_window")))
            return ERR(BRISK_EUNSUPPORTED,
                       "config.json: use_sliding_window is not supported for %s", b->a->hf);
    } else if (window > 0 && set_arch_u32(b, "attention.sliding_window", (uint32_t)window) < 0) {
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    int pattern = 0;
    if (has_swa && cfg_int(cfg, "sliding_window_pattern", &pattern, err, err_len) == 0 &&
        set_arch_u32(b, "attention.sliding_window_pattern", (uint32_t)pattern) < 0)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    if (!cfg_get(cfg, "sliding_window_pattern") &&
        (rc = read_layer_types(b, cfg, has_swa, err, err_len)) < 0)
        return rc;
    float qpas = 0.0f;
    if (cfg_float(cfg, "query_pre_attn_scalar", &qpas, err, err_len) == 0 &&
        qpas != (float)b->head_dim)
        return ERR(BRISK_EUNSUPPORTED,
                   "config.json: query_pre_attn_scalar %g differs from head_dim %d, which brisk "
                   "scales queries by",
                   (double)qpas, b->head_dim);
    int n_rot = b->head_dim;
    float prf = 0.0f;
    if (cfg_float(cfg, "partial_rotary_factor", &prf, err, err_len) == 0) {
        if (!(prf > 0.0f && prf <= 1.0f))
            return ERR(BRISK_EFORMAT, "config.json: partial_rotary_factor %g", (double)prf);
        n_rot = (int)((float)b->head_dim * prf);
        if (set_arch_u32(b, "rope.dimension_count", (uint32_t)n_rot) < 0)
            return ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    float base = 10000.0f;
    cfg_rope_float(cfg, "rope_theta", &base, err, err_len);
    if ((rc = read_rope_scaling(b, cfg, base, n_rot, err, err_len)) < 0)
        return rc;
    /* Gemma ties its output to the embeddings unless told otherwise;
     * transformers' default is the same for every class. */
    const cJSON *tie = cfg_get(cfg, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie))
        return ERR(BRISK_EFORMAT, "config.json: 'tie_word_embeddings' is not a boolean");
    b->tied = tie ? cJSON_IsTrue(tie) : 1;
    return b->a->moe_width ? read_moe(b, cfg, err, err_len) : 0;
}

/* ---- tensors ----------------------------------------------------------------- */

/* "model.layers.L." of a name with L a layer of the model (decimal, no
 * leading zero): L into *l and what follows; NULL for any other name. */
static const char *parse_layer(const hf_build *b, const char *name, long *l) {
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1))
        return NULL;
    const char *p = name + sizeof prefix - 1;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) {
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    if (digits == 0 || *p != '.' || v >= b->n_layers || (digits > 1 && p[-digits] == '0'))
        return NULL;
    *l = v;
    return p + 1;
}

/* The GGUF name of a folder tensor into out; 0, 1 for a tensor to drop, or
 * a refusal. */
static int map_name(const hf_build *b, const char *name, char *out, size_t cap, char *err,
                    size_t err_len) {
    if (!strcmp(name, "model.embed_tokens.weight")) {
        snprintf(out, cap, "token_embd.weight");
        return 0;
    }
    if (!strcmp(name, "model.norm.weight")) {
        snprintf(out, cap, "output_norm.weight");
        return 0;
    }
    if (!strcmp(name, "lm_head.weight")) {
        snprintf(out, cap, "output.weight");
        return b->tied ? 1 : 0; /* a tied head, written anyway: the embeddings serve */
    }
    long l = 0;
    const char *p = parse_layer(b, name, &l);
    if (p) {
        /* A mixture of experts' router: Qwen3-MoE's and OLMoE's mlp.gate,
         * Mixtral's block_sparse_moe.gate (mlp.gate in transformers 5). */
        if (b->a->moe_width &&
            (!strcmp(p, "mlp.gate.weight") || !strcmp(p, "block_sparse_moe.gate.weight"))) {
            snprintf(out, cap, "blk.%ld.ffn_gate_inp.weight", l);
            return 0;
        }
        if (b->a->gemma_norms && !strcmp(p, "post_attention_layernorm.weight")) {
            snprintf(out, cap, "blk.%ld.post_attention_norm.weight", l);
            return 0;
        }
        if (!b->a->gemma_norms && !strcmp(p, "post_attention_layernorm.weight")) {
            snprintf(out, cap, "blk.%ld.ffn_norm.weight", l);
            return 0;
        }
        for (size_t i = 0; i < sizeof HF_LAYER_TENSORS / sizeof HF_LAYER_TENSORS[0]; i++)
            if (!strcmp(p, HF_LAYER_TENSORS[i].hf)) {
                if (!HF_LAYER_TENSORS[i].gguf)
                    return 1;
                snprintf(out, cap, "blk.%ld.%s", l, HF_LAYER_TENSORS[i].gguf);
                return 0;
            }
    }
    char nm[100];
    snprintf(nm, sizeof nm, "%.80s", name);
    for (char *q = nm; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = '?';
    return ERR(BRISK_EUNSUPPORTED, "hf: tensor '%s' is not one brisk reads for %s", nm, b->a->hf);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Records the name of a tensor written into the image, for the duplicate
 * check against the matrices (finish_mats). */
static int note_img_name(hf_build *b, const char *gname) {
    if (brisk_grow_libc(&b->img_names, &b->cap_img, b->n_img + 1, sizeof *b->img_names, 32, 0) < 0)
        return BRISK_ENOMEM;
    snprintf(b->img_names[b->n_img++], MODEL_HF_MAX_NAME, "%s", gname);
    return 0;
}

static kern_type hf_kern_type(safetensors_dtype d) {
    return d == SAFETENSORS_F32   ? KERN_TYPE_F32
           : d == SAFETENSORS_F16 ? KERN_TYPE_F16
                                  : KERN_TYPE_BF16;
}

static int add_tensor(hf_build *b, const safetensors_file *f, const safetensors_tensor *t,
                      const char *gname, char *err, size_t err_len) {
    char nm[100];
    snprintf(nm, sizeof nm, "%.80s", t->name);
    if (!safetensors_dtype_is_float(t->dtype))
        return ERR(BRISK_EUNSUPPORTED, "hf: tensor '%s' is %s (brisk reads F32, F16, BF16)", nm,
                   safetensors_dtype_name(t->dtype));
    if (t->n_dims < 1 || t->n_dims > 2 || t->n_elems == 0)
        return ERR(BRISK_EFORMAT,
                   "hf: tensor '%s' has %d dims and %lld values (1 or 2 dims, "
                   "not empty)",
                   nm, t->n_dims, (long long)t->n_elems);
    if (strlen(gname) >= MODEL_HF_MAX_NAME)
        return ERR(BRISK_EFORMAT, "hf: tensor '%s' has too long a name", nm);
    if (t->n_dims == 1) {
        /* Norms and biases: F32, Gemma's norms as w + 1, in the image. */
        float *v = keep_buf(b, (size_t)t->n_elems * sizeof *v);
        if (!v || note_img_name(b, gname) < 0)
            return ERR(BRISK_ENOMEM, "hf: out of memory");
        safetensors_read_f32(t, 0, t->n_elems, v);
        if (b->a->norm_plus_one && ends_with(t->name, "norm.weight"))
            for (int64_t i = 0; i < t->n_elems; i++)
                v[i] += 1.0f;
        int64_t ne[1] = {t->n_elems};
        return gguf_writer_add_tensor(b->w, gname, KERN_TYPE_F32, 1, ne, v) < 0
                   ? ERR(BRISK_EFORMAT, "hf: tensor '%s' cannot be stored", nm)
                   : 0;
    }
    /* A matrix: read in place by the model (hf_folder.h), the q/k rows of
     * Llama-style checkpoints reordered as they are read. */
    int qk_heads = 0;
    int is_q = ends_with(t->name, "self_attn.q_proj.weight");
    int is_k = ends_with(t->name, "self_attn.k_proj.weight");
    if (b->a->permute_qk && (is_q || is_k)) {
        int heads = is_q ? b->n_heads : b->n_kv_heads;
        if (t->shape[0] % heads != 0 || (t->shape[0] / heads) % 2 != 0 || t->shape[0] > INT32_MAX)
            return ERR(BRISK_EFORMAT, "hf: tensor '%s' has %lld rows, not %d heads of an even size",
                       nm, (long long)t->shape[0], heads);
        qk_heads = heads;
    }
    if (brisk_grow_libc(&b->mats, &b->cap_mats, b->n_mats + 1, sizeof *b->mats, 64, 0) < 0)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    model_hf_weight *e = &b->mats[b->n_mats++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", gname);
    e->t.n_dims = 2;
    e->t.ne[0] = t->shape[1];
    e->t.ne[1] = t->shape[0];
    e->t.ne[2] = e->t.ne[3] = 1;
    e->t.type = hf_kern_type(t->dtype);
    e->t.nbytes = t->nbytes;
    e->t.data = t->data;
    e->qk_heads = qk_heads;
    e->file = f;
    e->st = t;
    return 0;
}

static int cmp_mat(const void *a, const void *b) {
    return strcmp(((const model_hf_weight *)a)->name, ((const model_hf_weight *)b)->name);
}

/* Sorts the matrices by name, points each t.name at its bytes (the array
 * moved while it grew), and refuses a name given twice: two matrices (Phi-3's
 * gate_up_proj beside an up_proj), or a matrix and an image tensor. */
static int finish_mats(hf_build *b, char *err, size_t err_len) {
    if (b->n_mats)
        qsort(b->mats, b->n_mats, sizeof *b->mats, cmp_mat);
    for (size_t i = 0; i < b->n_mats; i++) {
        b->mats[i].t.name.data = b->mats[i].name;
        b->mats[i].t.name.len = strlen(b->mats[i].name);
        if (i > 0 && !strcmp(b->mats[i - 1].name, b->mats[i].name))
            return ERR(BRISK_EFORMAT, "hf: two tensors become '%s'", b->mats[i].name);
    }
    for (size_t i = 0; i < b->n_img; i++) {
        model_hf_weight key;
        snprintf(key.name, sizeof key.name, "%s", b->img_names[i]);
        if (b->n_mats && bsearch(&key, b->mats, b->n_mats, sizeof *b->mats, cmp_mat))
            return ERR(BRISK_EFORMAT, "hf: two tensors become '%s'", key.name);
    }
    return 0;
}

/* ---- a mixture of experts' tensors ------------------------------------------ */

/* What an expert tensor of the folder holds: one expert's gate, up or down
 * matrix, or transformers 5's fused tensors of all the layer's experts
 * (gate_up_proj [expert][2 * width][dim], gate rows first; down_proj
 * [expert][dim][width]). */
enum { HF_EXP_GATE, HF_EXP_UP, HF_EXP_DOWN, HF_EXP_GATE_UP, HF_EXP_FUSED_DOWN };

typedef struct hf_expert {
    int layer, kind, expert; /* expert: -1 for a fused tensor */
    const safetensors_file *f;
    const safetensors_tensor *t;
} hf_expert;

static const char *const HF_EXP_KIND[] = {"gate", "up", "down", "gate_up_proj", "down_proj"};
static const char *const HF_EXP_GGUF[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

/* Records t when it is an expert tensor of a layer (1), else 0 (the name
 * is mapped as any other), or a refusal: an expert index the config does
 * not have. Per-expert names: Qwen3-MoE's and OLMoE's
 * mlp.experts.E.{gate,up,down}_proj.weight, Mixtral's
 * block_sparse_moe.experts.E.{w1,w3,w2}.weight. */
static int note_expert(hf_build *b, const safetensors_file *f, const safetensors_tensor *t,
                       char *err, size_t err_len) {
    static const struct {
        const char *prefix;
        const char *kind[3]; /* gate, up, down */
    } forms[] = {
        {"mlp.experts.", {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}},
        {"block_sparse_moe.experts.", {"w1.weight", "w3.weight", "w2.weight"}},
    };
    long l = 0;
    const char *p = b->a->moe_width ? parse_layer(b, t->name, &l) : NULL;
    if (!p)
        return 0;
    int kind = -1;
    long e = -1;
    if (!strcmp(p, "mlp.experts.gate_up_proj"))
        kind = HF_EXP_GATE_UP;
    else if (!strcmp(p, "mlp.experts.down_proj"))
        kind = HF_EXP_FUSED_DOWN;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0] && kind < 0; i++) {
        size_t n = strlen(forms[i].prefix);
        if (strncmp(p, forms[i].prefix, n))
            continue;
        const char *q = p + n;
        int digits = 0;
        e = 0;
        while (*q >= '0' && *q <= '9' && digits < 7) {
            e = e * 10 + (*q++ - '0');
            digits++;
        }
        if (digits == 0 || *q != '.' || (digits > 1 && q[-digits] == '0'))
            return 0;
        for (int k = 0; k < 3; k++)
            if (!strcmp(q + 1, forms[i].kind[k]))
                kind = k;
    }
    if (kind < 0)
        return 0;
    char nm[100];
    snprintf(nm, sizeof nm, "%.80s", t->name);
    if (kind < HF_EXP_GATE_UP && e >= b->n_expert)
        return ERR(BRISK_EFORMAT, "hf: tensor '%s' is expert %ld, but config.json has %d experts",
                   nm, e, b->n_expert);
    if (brisk_grow_libc(&b->exps, &b->cap_exps, b->n_exps + 1, sizeof *b->exps, 64, 0) < 0)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    b->exps[b->n_exps++] =
        (hf_expert){.layer = (int)l, .kind = kind, .expert = (int)e, .f = f, .t = t};
    return 1;
}

static int cmp_expert(const void *pa, const void *pb) {
    const hf_expert *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return (a->expert > b->expert) - (a->expert < b->expert);
}

static void free_parts(model_hf_weight *mats, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(mats[i].parts);
}

/* Layer l's stack `which` (gate, up, down) of n_expert parts, rows x cols
 * each, of one dtype: part e at byte `at[e]` of tensor ts[e] (file fs[e]). */
static int add_stack(hf_build *b, int l, int which, const safetensors_file *const *fs,
                     const safetensors_tensor *const *ts, const size_t *at, int64_t rows,
                     int64_t cols, char *err, size_t err_len) {
    int n = b->n_expert;
    model_hf_weight *parts = calloc((size_t)n, sizeof *parts);
    if (!parts ||
        brisk_grow_libc(&b->mats, &b->cap_mats, b->n_mats + 1, sizeof *b->mats, 64, 0) < 0) {
        free(parts);
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    kern_type type = hf_kern_type(ts[0]->dtype);
    size_t part_bytes = (size_t)rows * (size_t)cols * safetensors_dtype_size(ts[0]->dtype);
    for (int e = 0; e < n; e++) {
        model_hf_weight *p = &parts[e];
        snprintf(p->name, sizeof p->name, "blk.%d.%s.%d", l, HF_EXP_GGUF[which], e);
        p->t.name.data = p->name;
        p->t.name.len = strlen(p->name);
        p->t.n_dims = 2;
        p->t.ne[0] = cols;
        p->t.ne[1] = rows;
        p->t.ne[2] = p->t.ne[3] = 1;
        p->t.type = type;
        p->t.nbytes = part_bytes;
        p->t.data = (const uint8_t *)ts[e]->data + at[e];
        p->file = fs[e];
        p->st = ts[e];
    }
    model_hf_weight *s = &b->mats[b->n_mats++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "blk.%d.%s.weight", l, HF_EXP_GGUF[which]);
    s->t.n_dims = 3;
    s->t.ne[0] = cols;
    s->t.ne[1] = rows;
    s->t.ne[2] = n;
    s->t.ne[3] = 1;
    s->t.type = type;
    s->t.nbytes = part_bytes * (size_t)n;
    s->t.data = parts[0].t.data;
    s->file = fs[0];
    s->st = ts[0];
    s->parts = parts;
    s->n_parts = n;
    return 0;
}

/* One expert tensor's checks: a float dtype, `dims` dims. */
static int check_expert_tensor(const hf_expert *x, int dims, char *err, size_t err_len) {
    char nm[100];
    snprintf(nm, sizeof nm, "%.80s", x->t->name);
    if (!safetensors_dtype_is_float(x->t->dtype))
        return ERR(BRISK_EUNSUPPORTED, "hf: tensor '%s' is %s (brisk reads F32, F16, BF16)", nm,
                   safetensors_dtype_name(x->t->dtype));
    if (x->t->n_dims != dims || x->t->n_elems == 0)
        return ERR(BRISK_EFORMAT,
                   "hf: tensor '%s' has %d dims and %lld values (%d dims, not empty)", nm,
                   x->t->n_dims, (long long)x->t->n_elems, dims);
    return 0;
}

/* Layer l's fused experts (gate_up_proj, down_proj) as its three stacks. */
static int stack_fused(hf_build *b, int l, const hf_expert *gu, const hf_expert *dn,
                       const safetensors_file **fs, const safetensors_tensor **ts, size_t *at,
                       char *err, size_t err_len) {
    int rc;
    if ((rc = check_expert_tensor(gu, 3, err, err_len)) < 0 ||
        (rc = check_expert_tensor(dn, 3, err, err_len)) < 0)
        return rc;
    const int64_t *g = gu->t->shape, *d = dn->t->shape;
    if (g[0] != b->n_expert || d[0] != b->n_expert || g[1] % 2 != 0 ||
        gu->t->dtype != dn->t->dtype || d[2] != g[1] / 2 || d[1] != g[2])
        return ERR(BRISK_EFORMAT,
                   "hf: layer %d's fused experts have shapes [%lld, %lld, %lld] and [%lld, %lld, "
                   "%lld] (%s), not [%d, 2 * width, dim] and [%d, dim, width] of one dtype",
                   l, (long long)g[0], (long long)g[1], (long long)g[2], (long long)d[0],
                   (long long)d[1], (long long)d[2], safetensors_dtype_name(gu->t->dtype),
                   b->n_expert, b->n_expert);
    int64_t h = g[1] / 2, dim = g[2];
    size_t es = safetensors_dtype_size(gu->t->dtype);
    for (int part = 0; part < 2; part++) { /* gate rows first, then up */
        for (int e = 0; e < b->n_expert; e++) {
            fs[e] = gu->f;
            ts[e] = gu->t;
            at[e] = ((size_t)e * 2 + (size_t)part) * (size_t)h * (size_t)dim * es;
        }
        if ((rc = add_stack(b, l, part, fs, ts, at, h, dim, err, err_len)) < 0)
            return rc;
    }
    for (int e = 0; e < b->n_expert; e++) {
        fs[e] = dn->f;
        ts[e] = dn->t;
        at[e] = (size_t)e * (size_t)dim * (size_t)h * es;
    }
    return add_stack(b, l, HF_EXP_DOWN, fs, ts, at, dim, h, err, err_len);
}

/* Layer l's per-expert tensors x[0, n) (sorted by kind, then expert) as its
 * three stacks: every kind must hold experts 0 .. n_expert - 1 once, of one
 * shape and dtype. */
static int stack_per_expert(hf_build *b, int l, const hf_expert *x, size_t n,
                            const safetensors_file **fs, const safetensors_tensor **ts, size_t *at,
                            char *err, size_t err_len) {
    size_t i = 0;
    for (int kind = HF_EXP_GATE; kind <= HF_EXP_DOWN; kind++) {
        for (int e = 0; e < b->n_expert; e++, i++) {
            if (i >= n || x[i].kind != kind || x[i].expert > e)
                return ERR(BRISK_EFORMAT, "hf: layer %d has no %s matrix for expert %d (of %d)", l,
                           HF_EXP_KIND[kind], e, b->n_expert);
            if (x[i].expert < e)
                return ERR(BRISK_EFORMAT, "hf: layer %d has two %s matrices for expert %d", l,
                           HF_EXP_KIND[kind], x[i].expert);
            int rc = check_expert_tensor(&x[i], 2, err, err_len);
            if (rc < 0)
                return rc;
            const safetensors_tensor *t0 = x[i - (size_t)e].t;
            if (x[i].t->shape[0] != t0->shape[0] || x[i].t->shape[1] != t0->shape[1] ||
                x[i].t->dtype != t0->dtype)
                return ERR(BRISK_EFORMAT,
                           "hf: layer %d's %s matrix of expert %d is [%lld, %lld] %s, expert 0's "
                           "[%lld, %lld] %s",
                           l, HF_EXP_KIND[kind], e, (long long)x[i].t->shape[0],
                           (long long)x[i].t->shape[1], safetensors_dtype_name(x[i].t->dtype),
                           (long long)t0->shape[0], (long long)t0->shape[1],
                           safetensors_dtype_name(t0->dtype));
            fs[e] = x[i].f;
            ts[e] = x[i].t;
            at[e] = 0;
        }
        if (i < n && x[i].kind == kind)
            return ERR(BRISK_EFORMAT, "hf: layer %d has two %s matrices for expert %d", l,
                       HF_EXP_KIND[kind], x[i].expert);
        int rc = add_stack(b, l, kind, fs, ts, at, ts[0]->shape[0], ts[0]->shape[1], err, err_len);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The experts found (note_expert) as every layer's three stacks, the form
 * of the GGUF's ffn_{gate,up,down}_exps: one per-expert or one fused set a
 * layer, complete. */
static int gather_experts(hf_build *b, char *err, size_t err_len) {
    if (!b->a->moe_width)
        return 0;
    if (b->n_exps)
        qsort(b->exps, b->n_exps, sizeof *b->exps, cmp_expert);
    const safetensors_file **fs = malloc((size_t)b->n_expert * sizeof *fs);
    const safetensors_tensor **ts = malloc((size_t)b->n_expert * sizeof *ts);
    size_t *at = malloc((size_t)b->n_expert * sizeof *at);
    int rc = fs && ts && at ? 0 : ERR(BRISK_ENOMEM, "hf: out of memory");
    size_t i = 0;
    for (int l = 0; l < b->n_layers && rc == 0; l++) {
        size_t i0 = i, n_fused = 0;
        for (; i < b->n_exps && b->exps[i].layer == l; i++)
            n_fused += b->exps[i].kind >= HF_EXP_GATE_UP;
        const hf_expert *x = b->exps + i0;
        size_t n = i - i0;
        if (n == 0)
            rc = ERR(BRISK_EFORMAT, "hf: layer %d has no experts (config.json: %d a layer)", l,
                     b->n_expert);
        else if (n_fused &&
                 (n != 2 || x[0].kind != HF_EXP_GATE_UP || x[1].kind != HF_EXP_FUSED_DOWN))
            rc = ERR(BRISK_EFORMAT,
                     "hf: layer %d's experts are not one set: per-expert matrices, or "
                     "mlp.experts.gate_up_proj with mlp.experts.down_proj",
                     l);
        else if (n_fused)
            rc = stack_fused(b, l, &x[0], &x[1], fs, ts, at, err, err_len);
        else
            rc = stack_per_expert(b, l, x, n, fs, ts, at, err, err_len);
    }
    free(fs);
    free(ts);
    free(at);
    return rc;
}

static int add_tensors(hf_build *b, const safetensors_set *s, char *err, size_t err_len) {
    for (int fi = 0; fi < safetensors_set_n_files(s); fi++) {
        const safetensors_file *f = safetensors_set_file(s, fi);
        for (int64_t i = 0; i < safetensors_n_tensors(f); i++) {
            const safetensors_tensor *t = safetensors_tensor_at(f, i);
            char gname[160];
            int rc = note_expert(b, f, t, err, err_len);
            if (rc < 0)
                return rc;
            if (rc == 1)
                continue;
            rc = map_name(b, t->name, gname, sizeof gname, err, err_len);
            if (rc < 0)
                return rc;
            if (rc == 1)
                continue;
            if ((rc = add_tensor(b, f, t, gname, err, err_len)) < 0)
                return rc;
        }
    }
    if (!b->tied && !safetensors_set_find(s, "lm_head.weight"))
        return ERR(BRISK_EFORMAT, "hf: tie_word_embeddings is false but there is no "
                                  "lm_head.weight");
    int rc = gather_experts(b, err, err_len);
    return rc < 0 ? rc : finish_mats(b, err, err_len);
}

/* ---- the folder -------------------------------------------------------------- */

static const hf_arch *find_arch(const cJSON *cfg, char *err, size_t err_len, int *rc) {
    const cJSON *archs = cfg_get(cfg, "architectures");
    const cJSON *first = cJSON_IsArray(archs) ? archs->child : NULL;
    if (!cJSON_IsString(first)) {
        *rc = ERR(BRISK_EFORMAT, "config.json: no 'architectures' list of names");
        return NULL;
    }
    for (int i = 0; i < N_HF_ARCHS; i++)
        if (!strcmp(first->valuestring, HF_ARCHS[i].hf))
            return &HF_ARCHS[i];
    char list[400], nm[72];
    snprintf(nm, sizeof nm, "%.64s", first->valuestring);
    for (char *q = nm; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = '?';
    *rc = ERR(BRISK_EUNSUPPORTED, "config.json: unsupported architecture '%s' (supported: %s)", nm,
              model_hf_arch_list(list, sizeof list));
    return NULL;
}

/* generation_config.json (optional): the sampling fields vLLM's
 * --generation-config auto takes, and the eos ids, as brisk.generation.*
 * keys (model.h's model_generation; read_extra_eog in tokenizer.c). */
static int read_generation(const char *dir, hf_build *b, char *err, size_t err_len) {
    size_t pl = strlen(dir) + 32;
    char *path = malloc(pl);
    if (!path)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    snprintf(path, pl, "%s/generation_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        free(path);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = brisk_file_read(path, HF_MAX_CONFIG_BYTES, "generation_config.json", &text, &len, err,
                             err_len);
    free(path);
    if (rc < 0)
        return rc;
    cJSON *g = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(g)) {
        cJSON_Delete(g);
        return ERR(BRISK_EFORMAT, "generation_config.json: not a JSON object");
    }
    static const struct {
        const char *key;
        float lo, hi;
        int lo_open;
    } fields[] = {
        {"temperature", 0.0f, 100.0f, 0},
        {"top_p", 0.0f, 1.0f, 1},
        {"min_p", 0.0f, 1.0f, 0},
        {"repetition_penalty", 0.0f, 10.0f, 1},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0] && rc == 0; i++) {
        float v = 0.0f;
        int r = cfg_float(g, fields[i].key, &v, err, err_len);
        if (r == BRISK_ENOTFOUND)
            continue;
        if (r < 0 || !(v >= fields[i].lo && v <= fields[i].hi) ||
            (fields[i].lo_open && v == fields[i].lo)) {
            rc = ERR(BRISK_EFORMAT, "generation_config.json: '%s' is not a number in %s%g, %g]",
                     fields[i].key, fields[i].lo_open ? "(" : "[", (double)fields[i].lo,
                     (double)fields[i].hi);
            break;
        }
        char key[64];
        snprintf(key, sizeof key, "brisk.generation.%s", fields[i].key);
        if (gguf_writer_set_f32(b->w, key, v) < 0)
            rc = ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    int k = 0;
    if (rc == 0 && cfg_get(g, "top_k")) {
        if (cfg_int(g, "top_k", &k, err, err_len) < 0)
            rc = ERR(BRISK_EFORMAT, "generation_config.json: 'top_k' is not an integer >= 0");
        else if (gguf_writer_set_u32(b->w, "brisk.generation.top_k", (uint32_t)k) < 0)
            rc = ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    /* eos_token_id: one id or a list. */
    const cJSON *eos = cfg_get(g, "eos_token_id");
    if (rc == 0 && eos) {
        int32_t ids[64];
        int n = 0;
        const cJSON *one = cJSON_IsArray(eos) ? eos->child : eos;
        for (; one && rc == 0; one = cJSON_IsArray(eos) ? one->next : NULL) {
            double d = cJSON_IsNumber(one) ? one->valuedouble : -1.0;
            if (!(d >= 0.0 && d < 2147483648.0) || d != floor(d) || n == 64)
                rc = ERR(BRISK_EFORMAT,
                         "generation_config.json: 'eos_token_id' is not up to 64 token ids");
            else
                ids[n++] = (int32_t)d;
        }
        if (rc == 0 && n > 0 &&
            gguf_writer_set_arr(b->w, "brisk.generation.eos_token_ids", GGUF_TYPE_INT32, ids,
                                (uint64_t)n) < 0)
            rc = ERR(BRISK_ENOMEM, "hf: out of memory");
    }
    cJSON_Delete(g);
    return rc;
}

static int build(const char *dir, hf_build *b, char *err, size_t err_len) {
    size_t pl = strlen(dir) + 32;
    char *path = malloc(pl);
    if (!path)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    snprintf(path, pl, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    int rc = brisk_file_read(path, HF_MAX_CONFIG_BYTES, "config.json", &text, &len, err, err_len);
    free(path);
    if (rc < 0)
        return rc;
    cJSON *cfg = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return ERR(BRISK_EFORMAT, "config.json: not a JSON object");
    }
    b->a = find_arch(cfg, err, err_len, &rc);
    if (b->a) {
        /* The folder's name is the model's (general.name). */
        const char *base = strrchr(dir, '/');
        base = base && base[1] ? base + 1 : dir;
        rc = gguf_writer_set_str(b->w, "general.architecture", b->a->arch) < 0 ||
                     gguf_writer_set_str(b->w, "general.name", base) < 0
                 ? ERR(BRISK_ENOMEM, "hf: out of memory")
                 : read_config(b, cfg, err, err_len);
    }
    cJSON_Delete(cfg);
    if (rc < 0)
        return rc;
    if ((rc = tok_hfjson_to_gguf(dir, b->w, err, err_len)) < 0)
        return rc;
    return read_generation(dir, b, err, err_len);
}

int model_hf_open(const char *path, int vocab_only, uint8_t **image, size_t *len,
                  model_hf_weights **weights, char *err, size_t err_len) {
    *image = NULL;
    *len = 0;
    if (weights)
        *weights = NULL;
    if (!vocab_only && !weights)
        return ERR(BRISK_EINVAL, "hf: no place for the weights");
    /* The folder: path itself, or the folder of its config.json. */
    struct stat st;
    char *dir;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        dir = strdup(path);
    } else {
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        if (dir && !dir[0]) {
            free(dir);
            dir = strdup("/");
        }
    }
    if (!dir)
        return ERR(BRISK_ENOMEM, "hf: out of memory");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    hf_build b = {0};
    b.w = gguf_writer_create();
    safetensors_set *s = NULL;
    model_hf_weights *hw = NULL;
    int rc = b.w ? 0 : ERR(BRISK_ENOMEM, "hf: out of memory");
    double t0 = brisk_now();
    if (rc == 0)
        rc = build(dir, &b, err, err_len);
    double t1 = brisk_now();
    if (rc == 0 && !vocab_only)
        rc = safetensors_set_open_dir(dir, &s, err, err_len);
    if (rc == 0 && !vocab_only)
        rc = add_tensors(&b, s, err, err_len);
    if (rc == 0 && !vocab_only && !(hw = calloc(1, sizeof *hw)))
        rc = ERR(BRISK_ENOMEM, "hf: out of memory");
    double t2 = brisk_now();
    if (rc == 0 && gguf_writer_to_buffer(b.w, image, len) < 0)
        rc = ERR(BRISK_ENOMEM, "hf: out of memory for the model's image");
    if (rc == 0 && !vocab_only)
        BRISK_INFO("hf: config and tokenizer %.3f s, safetensors headers %.3f s, image (%zu "
                   "bytes) %.3f s",
                   t1 - t0, t2 - t1, *len, brisk_now() - t2);
    if (rc == 0 && hw) {
        /* The matrices and the files they lie in pass to the caller. */
        hw->s = s;
        hw->mats = b.mats;
        hw->n = (int64_t)b.n_mats;
        s = NULL;
        b.mats = NULL;
        *weights = hw;
        hw = NULL;
    }
    free(hw);
    safetensors_set_free(s);
    gguf_writer_free(b.w);
    for (int i = 0; i < b.n_bufs; i++)
        free(b.bufs[i]);
    free(b.bufs);
    if (b.mats)
        free_parts(b.mats, b.n_mats);
    free(b.mats);
    free(b.exps);
    free(b.img_names);
    free(dir);
    return rc;
}

void model_hf_weights_free(model_hf_weights *w) {
    if (!w)
        return;
    safetensors_set_free(w->s);
    free_parts(w->mats, (size_t)w->n);
    free(w->mats);
    free(w);
}

const model_hf_weight *model_hf_weights_find(const model_hf_weights *w, const char *name) {
    if (!w || !w->n || strlen(name) >= MODEL_HF_MAX_NAME)
        return NULL;
    model_hf_weight key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, w->mats, (size_t)w->n, sizeof *w->mats, cmp_mat);
}

int64_t model_hf_weights_count(const model_hf_weights *w) {
    return w ? w->n : 0;
}

const model_hf_weight *model_hf_weights_at(const model_hf_weights *w, int64_t i) {
    return w && i >= 0 && i < w->n ? &w->mats[i] : NULL;
}

const model_hf_weight *model_hf_weights_of(const model_hf_weights *w, const gguf_tensor *t) {
    if (!w || !w->n || !t)
        return NULL;
    /* Compared as integers: t may point into another array. */
    uintptr_t lo = (uintptr_t)w->mats, p = (uintptr_t)t;
    if (p < lo || p >= lo + (size_t)w->n * sizeof *w->mats)
        return NULL;
    const model_hf_weight *e = &w->mats[(p - lo) / sizeof *w->mats];
    return &e->t == t ? e : NULL;
}

int64_t model_hf_src_row(const model_hf_weight *e, int64_t r) {
    if (e->qk_heads <= 0)
        return r;
    int64_t hd = e->t.ne[1] / e->qk_heads, h = r / hd, k = r % hd;
    return h * hd + (k % 2) * (hd / 2) + k / 2;
}

void model_hf_weight_release(const model_hf_weight *e) {
    if (!e)
        return;
    for (int i = 0; i < e->n_parts; i++)
        model_hf_weight_release(&e->parts[i]);
    if (e->n_parts)
        return;
    /* The matrix's own bytes: a part is a slice of its tensor. */
    safetensors_tensor span = *e->st;
    span.data = e->t.data;
    span.nbytes = e->t.nbytes;
    safetensors_release_pages(e->file, &span);
}
