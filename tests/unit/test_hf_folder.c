/* test_hf_folder.c - the Hugging Face folder loader (models/hf_folder.c,
 * tok_hfjson.c) on a tiny valid folder written here (a one-layer llama, a
 * SentencePiece-style tokenizer.json with byte fallback) and on hostile
 * variants of it:
 *   - config.json cases, each refused with one line naming what is wrong
 *     (unknown architecture listing the supported, missing keys, wrong
 *     types, activation, rope scaling, quantization, tie without a head);
 *   - config.json and tokenizer.json cut at every length, and seeded byte
 *     flips of each: refused with one line, or loaded into a model whose
 *     vocabulary encodes text;
 *   - generation_config.json ranges;
 *   - the folder is found from DIR, DIR/ and DIR/config.json;
 *   - a one-layer Qwen3-MoE folder (4 experts, top 2) in both layouts
 *     transformers 5 writes (the experts one by one, and fused 3-D
 *     gate_up_proj/down_proj), and Mixtral's block_sparse_moe names: loaded
 *     with the config's expert keys; config cases (top-k out of range, no
 *     expert count, shared experts, dense layers among sparse ones,
 *     clip_qkv) and tensor cases (an expert missing, one past the config's
 *     count, given twice, mismatched shapes or dtypes, layouts mixed, a fused
 *     tensor of the wrong expert count or rank, no experts) each refused with
 *     one line; the MoE config and safetensors file cut and flipped.
 * The loaded model must equal the GGUF the tensors describe: the checks on
 * shapes are model_load's own (test_model.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/model.h"
#include "models/tokenizer.h"

#define DIM 8
#define FF 16
#define N_VOCAB 262 /* <unk> <s> </s>, 256 bytes, "▁a", "b", "▁ab" */

static char g_dir[256];

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static void put(const char *name, const void *data, size_t len) {
    char p[512];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL, "open %s", p);
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

static void put_text(const char *name, const char *text) {
    put(name, text, strlen(text));
}

static const char *k_config =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"num_hidden_layers\":1,"
    "\"intermediate_size\":16,\"num_attention_heads\":2,\"num_key_value_heads\":2,"
    "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
    "\"hidden_act\":\"silu\",\"tie_word_embeddings\":true}";

/* tokenizer.json: SentencePiece style (Llama 2's normalizer), byte fallback. */
static char *make_tokenizer(void) {
    size_t cap = 64 * 1024, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                          "{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
                          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
                          "\"content\":\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,"
                          "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true},"
                          "{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
                          "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
                          "\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2");
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(s + n, cap - n, ",\"<0x%02X>\":%d", b, 3 + b);
    n += (size_t)snprintf(s + n, cap - n,
                          ",\"\xe2\x96\x81\":259,\"a\":260,\"\xe2\x96\x81"
                          "a\":261},\"merges\":[\"\xe2\x96\x81 a\"]}}");
    return s;
}

/* model.safetensors of the one-layer llama, F32, deterministic values. */
static void put_weights(void) {
    static const struct {
        const char *name;
        int rows, cols; /* cols 0: 1-D */
    } t[] = {
        {"model.embed_tokens.weight", N_VOCAB, DIM},
        {"model.norm.weight", DIM, 0},
        {"model.layers.0.input_layernorm.weight", DIM, 0},
        {"model.layers.0.post_attention_layernorm.weight", DIM, 0},
        {"model.layers.0.self_attn.q_proj.weight", DIM, DIM},
        {"model.layers.0.self_attn.k_proj.weight", DIM, DIM},
        {"model.layers.0.self_attn.v_proj.weight", DIM, DIM},
        {"model.layers.0.self_attn.o_proj.weight", DIM, DIM},
        {"model.layers.0.mlp.gate_proj.weight", FF, DIM},
        {"model.layers.0.mlp.up_proj.weight", FF, DIM},
        {"model.layers.0.mlp.down_proj.weight", DIM, FF},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    char header[4096];
    size_t hn = 0, off = 0;
    hn += (size_t)snprintf(header, sizeof header, "{");
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * 4;
        if (t[i].cols)
            hn += (size_t)snprintf(header + hn, sizeof header - hn,
                                   "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                                   "\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
        else
            hn += (size_t)snprintf(header + hn, sizeof header - hn,
                                   "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
                                   "\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
        off += bytes;
    }
    hn += (size_t)snprintf(header + hn, sizeof header - hn, "}");
    size_t total = 8 + hn + off;
    uint8_t *buf = malloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(buf + 8, header, hn);
    float *f = (float *)malloc(off);
    for (size_t i = 0; i < off / 4; i++)
        f[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 4000.0f;
    memcpy(buf + 8 + hn, f, off);
    put("model.safetensors", buf, total);
    free(f);
    free(buf);
}

/* Loads dir (or path); on success checks the vocabulary encodes text. */
static int try_load(const char *path, char *err, size_t err_len) {
    model *m = NULL;
    model_load_opts o = {.weights = MODEL_WEIGHTS_F32};
    int rc = model_load(path, &o, &m, err, err_len);
    if (rc == 0) {
        int32_t ids[64];
        int n = tok_encode(model_get_vocab(m), "ab a\xff", 5, 0, ids, 64);
        CHECK(n > 0 && n <= 64, "encode gave %d", n);
        model_free(m);
    }
    return rc;
}

static void expect_refused(const char *what, const char *want) {
    char err[512] = "";
    int rc = try_load(g_dir, err, sizeof err);
    CHECK(rc < 0 && bt_one_line(err) && strstr(err, want), "%s: rc %d '%s', want '%s'", what, rc,
          err, want);
}

static void test_valid(void) {
    char err[512] = "";
    int rc = try_load(g_dir, err, sizeof err);
    CHECK(rc == 0, "valid folder: %s", err);
    char p[512];
    path_in(p, sizeof p, "config.json");
    rc = try_load(p, err, sizeof err);
    CHECK(rc == 0, "config.json path: %s", err);
    snprintf(p, sizeof p, "%s/", g_dir);
    rc = try_load(p, err, sizeof err);
    CHECK(rc == 0, "dir/: %s", err);
    /* The tokenizer: "▁a" merged, b by byte fallback. */
    model *m = NULL;
    model_load_opts o = {.weights = MODEL_WEIGHTS_F32};
    if (model_load(g_dir, &o, &m, err, sizeof err) == 0) {
        int32_t ids[8];
        int n = tok_encode(model_get_vocab(m), "a b", 3, 0, ids, 8);
        CHECK(n == 3 && ids[0] == 261 && ids[1] == 259 && ids[2] == 3 + 'b', "ids %d: %d %d %d", n,
              ids[0], ids[1], ids[2]);
        CHECK_COND(model_get_config(m)->tied_output && model_get_config(m)->n_layers == 1);
        CHECK_COND(model_get_generation(m)->has == 0);
        model_free(m);
    }
}

typedef struct cfg_case {
    const char *from, *to; /* replace in k_config */
    const char *want;
} cfg_case;

static const cfg_case k_cfg_cases[] = {
    {"LlamaForCausalLM", "MambaForCausalLM",
     "unsupported architecture 'MambaForCausalLM' (supported: LlamaForCausalLM, "},
    {"[\"LlamaForCausalLM\"]", "\"LlamaForCausalLM\"", "no 'architectures'"},
    {"\"hidden_size\":8,", "", "missing 'hidden_size'"},
    {"\"num_hidden_layers\":1", "\"num_hidden_layers\":-1",
     "'num_hidden_layers' is not an integer"},
    {"\"num_hidden_layers\":1", "\"num_hidden_layers\":1.5",
     "'num_hidden_layers' is not an integer"},
    {"\"num_attention_heads\":2", "\"num_attention_heads\":\"2\"", "'num_attention_heads'"},
    {"\"rope_theta\":10000.0", "\"rope_theta\":1e999", "'rope_theta' is not a finite number"},
    {"\"silu\"", "\"relu\"", "activation 'relu' is not supported"},
    {"\"tie_word_embeddings\":true", "\"tie_word_embeddings\":false", "no lm_head.weight"},
    {"\"tie_word_embeddings\":true", "\"tie_word_embeddings\":1", "not a boolean"},
    {"\"hidden_act\"", "\"quantization_config\":{},\"hidden_act\"", "quantization_config"},
    {"\"hidden_act\"", "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4},\"hidden_act\"",
     "rope_scaling type 'yarn' is not supported"},
    {"\"hidden_act\"", "\"rope_scaling\":{\"rope_type\":\"linear\"},\"hidden_act\"",
     "without a factor"},
    {"\"hidden_act\"", "\"attention_bias\":true,\"hidden_act\"", "'attention_bias'"},
    {"\"hidden_act\"", "\"layer_types\":[\"sliding_attention\"],\"hidden_act\"",
     "sliding-window layers"},
    {"\"num_key_value_heads\":2", "\"num_key_value_heads\":3", "not 3 heads"},
};

static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at)
        return NULL;
    size_t n = strlen(s) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    size_t pre = (size_t)(at - s);
    memcpy(out, s, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    return out;
}

static void test_config_cases(void) {
    for (size_t i = 0; i < sizeof k_cfg_cases / sizeof k_cfg_cases[0]; i++) {
        char *c = replace(k_config, k_cfg_cases[i].from, k_cfg_cases[i].to);
        CHECK(c != NULL, "case %zu: '%s' not in the config", i, k_cfg_cases[i].from);
        if (!c)
            continue;
        put_text("config.json", c);
        expect_refused(c, k_cfg_cases[i].want);
        free(c);
    }
    put_text("config.json", "[]");
    expect_refused("array", "not a JSON object");
    put_text("config.json", k_config);
}

static uint32_t rng_state = 20261129u;
static uint32_t rng(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* Cuts and flips of one file (len bytes): refused with one line or loaded. */
static void test_damaged_bytes(const char *name, const char *text, size_t len, int n_flips) {
    int bad = 0, loaded = 0;
    char err[512];
    size_t step = len > 400 ? len / 200 : 1;
    for (size_t cut = 0; cut < len; cut += step) {
        put(name, text, cut);
        err[0] = '\0';
        int rc = try_load(g_dir, err, sizeof err);
        loaded += rc == 0;
        bad += rc < 0 && !bt_one_line(err);
    }
    char *c = malloc(len);
    for (int k = 0; k < n_flips; k++) {
        memcpy(c, text, len);
        for (int j = 0; j < 1 + (int)(rng() % 3); j++)
            c[rng() % len] ^= (char)(1u << (rng() % 8));
        put(name, c, len);
        err[0] = '\0';
        int rc = try_load(g_dir, err, sizeof err);
        loaded += rc == 0;
        bad += rc < 0 && !bt_one_line(err);
    }
    free(c);
    CHECK(bad == 0, "%s: %d refusals without a one-line message (%d loaded)", name, bad, loaded);
    put(name, text, len);
}

static void test_damaged(const char *name, const char *text, int n_flips) {
    test_damaged_bytes(name, text, strlen(text), n_flips);
}

static void test_generation(void) {
    put_text("generation_config.json",
             "{\"temperature\":0.6,\"top_p\":0.9,\"top_k\":20,\"repetition_penalty\":1.1,"
             "\"eos_token_id\":[2,260]}");
    model *m = NULL;
    model_load_opts o = {.weights = MODEL_WEIGHTS_F32};
    char err[512] = "";
    int rc = model_load(g_dir, &o, &m, err, sizeof err);
    CHECK(rc == 0, "generation: %s", err);
    if (m) {
        const model_generation *g = model_get_generation(m);
        CHECK_COND(g->has == (MODEL_GEN_TEMPERATURE | MODEL_GEN_TOP_P | MODEL_GEN_TOP_K |
                              MODEL_GEN_REPETITION_PENALTY));
        CHECK_COND(g->temperature == 0.6f && g->top_p == 0.9f && g->top_k == 20 &&
                   g->repetition_penalty == 1.1f);
        CHECK_COND(tok_is_eog(model_get_vocab(m), 260) && tok_is_eog(model_get_vocab(m), 2) &&
                   !tok_is_eog(model_get_vocab(m), 261));
        model_free(m);
    }
    static const char *const bad[][2] = {
        {"{\"top_p\":0}", "'top_p'"},
        {"{\"temperature\":-1}", "'temperature'"},
        {"{\"repetition_penalty\":11}", "'repetition_penalty'"},
        {"{\"top_k\":-3}", "generation_config.json: 'top_k'"},
        {"{\"eos_token_id\":[5000]}", "outside the vocabulary"},
        {"{\"eos_token_id\":\"x\"}", "eos_token_id"},
        {"[1]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put_text("generation_config.json", bad[i][0]);
        expect_refused(bad[i][0], bad[i][1]);
    }
    char p[512];
    path_in(p, sizeof p, "generation_config.json");
    unlink(p);
}

/* ---- mixtures of experts ---------------------------------------------------- */

#define MOE_E 4   /* experts */
#define MOE_FF 16 /* their width */
#define MOE_HD 4  /* head_dim */

static const char *k_moe_config =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":8,\"num_hidden_layers\":1,"
    "\"intermediate_size\":32,\"moe_intermediate_size\":16,\"num_attention_heads\":2,"
    "\"num_key_value_heads\":2,\"head_dim\":4,\"num_experts\":4,\"num_experts_per_tok\":2,"
    "\"norm_topk_prob\":true,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],"
    "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,"
    "\"hidden_act\":\"silu\",\"tie_word_embeddings\":true}";

typedef struct st_spec {
    char name[96];
    const char *dtype; /* "F32", "BF16", "F16", "I32" */
    int n_dims;
    int shape[3];
} st_spec;

/* A safetensors file of the tensors (deterministic values) into *out;
 * returns its length. The caller frees *out. */
static size_t make_st(const st_spec *t, int nt, uint8_t **out) {
    size_t cap = 64 * 1024, hn = 0, off = 0;
    char *header = malloc(cap);
    hn += (size_t)snprintf(header, cap, "{");
    for (int i = 0; i < nt; i++) {
        size_t n = 1;
        for (int d = 0; d < t[i].n_dims; d++)
            n *= (size_t)t[i].shape[d];
        size_t es = !strcmp(t[i].dtype, "F32") || !strcmp(t[i].dtype, "I32") ? 4 : 2;
        size_t bytes = n * es;
        char shape[64];
        if (t[i].n_dims == 1)
            snprintf(shape, sizeof shape, "%d", t[i].shape[0]);
        else if (t[i].n_dims == 2)
            snprintf(shape, sizeof shape, "%d,%d", t[i].shape[0], t[i].shape[1]);
        else
            snprintf(shape, sizeof shape, "%d,%d,%d", t[i].shape[0], t[i].shape[1], t[i].shape[2]);
        hn += (size_t)snprintf(header + hn, cap - hn,
                               "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],"
                               "\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", t[i].name, t[i].dtype, shape, off, off + bytes);
        off += bytes;
    }
    hn += (size_t)snprintf(header + hn, cap - hn, "}");
    size_t total = 8 + hn + off;
    uint8_t *buf = malloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(buf + 8, header, hn);
    /* Small values of every sign: F32, and their top halves (BF16) or
     * 0x3xxx halves (F16, in [0.125, 2)). */
    uint8_t *d = buf + 8 + hn;
    for (size_t i = 0; i < off; i += 4) {
        float v = (float)((int)(i * 2654435761u % 2001) - 1000) / 4000.0f;
        uint8_t raw[4];
        memcpy(raw, &v, 4);
        for (size_t k = 0; k < 4 && i + k < off; k++)
            d[i + k] = raw[k];
    }
    free(header);
    *out = buf;
    return total;
}

static st_spec st(const char *name, const char *dtype, int n_dims, int a, int b, int c) {
    st_spec s = {.dtype = dtype, .n_dims = n_dims, .shape = {a, b, c}};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

/* Removes t[i] of t[0, *n) (the last takes its place). */
static void st_drop(st_spec *t, int *n, int i) {
    if (i >= 0) {
        t[i] = t[*n - 1];
        (*n)--;
    }
}

/* The one-layer Qwen3-MoE's tensors: the experts one by one (fused 0) or
 * as transformers 5's gate_up_proj/down_proj (fused 1); Mixtral's
 * block_sparse_moe names with mixtral. Returns the count. */
static int moe_tensors(st_spec *t, int fused, int mixtral) {
    int n = 0;
#define T1(nm, a) t[n++] = st(nm, "F32", 1, a, 0, 0)
#define T2(nm, a, b) t[n++] = st(nm, "F32", 2, a, b, 0)
    T2("model.embed_tokens.weight", N_VOCAB, DIM);
    T1("model.norm.weight", DIM);
    T1("model.layers.0.input_layernorm.weight", DIM);
    T1("model.layers.0.post_attention_layernorm.weight", DIM);
    T2("model.layers.0.self_attn.q_proj.weight", 2 * MOE_HD, DIM);
    T2("model.layers.0.self_attn.k_proj.weight", 2 * MOE_HD, DIM);
    T2("model.layers.0.self_attn.v_proj.weight", 2 * MOE_HD, DIM);
    T2("model.layers.0.self_attn.o_proj.weight", DIM, 2 * MOE_HD);
    if (!mixtral) {
        T1("model.layers.0.self_attn.q_norm.weight", MOE_HD);
        T1("model.layers.0.self_attn.k_norm.weight", MOE_HD);
    }
    T2(mixtral ? "model.layers.0.block_sparse_moe.gate.weight" : "model.layers.0.mlp.gate.weight",
       MOE_E, DIM);
    if (fused) {
        t[n++] = st("model.layers.0.mlp.experts.gate_up_proj", "F32", 3, MOE_E, 2 * MOE_FF, DIM);
        t[n++] = st("model.layers.0.mlp.experts.down_proj", "F32", 3, MOE_E, DIM, MOE_FF);
    } else {
        static const char *const kinds[2][3] = {{"gate_proj", "up_proj", "down_proj"},
                                                {"w1", "w3", "w2"}};
        for (int e = 0; e < MOE_E; e++)
            for (int k = 0; k < 3; k++) {
                char nm[96];
                snprintf(nm, sizeof nm, "model.layers.0.%s.experts.%d.%s.weight",
                         mixtral ? "block_sparse_moe" : "mlp", e, kinds[mixtral][k]);
                t[n++] = st(nm, "F32", 2, k == 2 ? DIM : MOE_FF, k == 2 ? MOE_FF : DIM, 0);
            }
    }
#undef T1
#undef T2
    return n;
}

static void put_st(const st_spec *t, int n) {
    uint8_t *buf;
    size_t len = make_st(t, n, &buf);
    put("model.safetensors", buf, len);
    free(buf);
}

/* Index of the tensor named name in t[0, n), or -1. */
static int st_find(const st_spec *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return i;
    return -1;
}

static void expect_moe_loads(const char *what) {
    model *m = NULL;
    model_load_opts o = {.weights = MODEL_WEIGHTS_F32};
    char err[512] = "";
    int rc = model_load(g_dir, &o, &m, err, sizeof err);
    CHECK(rc == 0, "%s: %s", what, err);
    if (m) {
        const model_config *c = model_get_config(m);
        CHECK(c->n_expert == MOE_E && c->n_expert_used == 2 && c->expert_hidden == MOE_FF &&
                  c->moe_norm_topk == 1,
              "%s: %d experts, %d used, %d wide, norm %d", what, c->n_expert, c->n_expert_used,
              c->expert_hidden, c->moe_norm_topk);
        model_free(m);
    }
}

static void test_moe(void) {
    st_spec t[96];
    put_text("config.json", k_moe_config);
    int n = moe_tensors(t, 0, 0);
    put_st(t, n);
    expect_moe_loads("per-expert");
    n = moe_tensors(t, 1, 0);
    put_st(t, n);
    expect_moe_loads("fused");
    /* Mixtral: its names, always renormalised, q/k rows permuted. */
    char *mx = replace(k_moe_config, "\"Qwen3MoeForCausalLM\"", "\"MixtralForCausalLM\"");
    char *mx2 = replace(mx, "\"intermediate_size\":32,\"moe_intermediate_size\":16",
                        "\"intermediate_size\":16");
    char *mx3 = replace(mx2, "\"norm_topk_prob\":true,", "");
    put_text("config.json", mx3);
    n = moe_tensors(t, 0, 1);
    put_st(t, n);
    expect_moe_loads("mixtral");
    free(mx);
    free(mx2);
    free(mx3);
    put_text("config.json", k_moe_config);

    /* config.json cases, on the per-expert folder. */
    n = moe_tensors(t, 0, 0);
    put_st(t, n);
    static const cfg_case cfg_cases[] = {
        {"\"num_experts_per_tok\":2", "\"num_experts_per_tok\":5",
         "num_experts_per_tok 5 is not in [1, 4 experts]"},
        {"\"num_experts_per_tok\":2", "\"num_experts_per_tok\":0",
         "num_experts_per_tok 0 is not in [1, 4 experts]"},
        {"\"num_experts_per_tok\":2,", "", "without 'num_experts_per_tok'"},
        {"\"num_experts\":4,", "", "without 'num_experts' or 'num_local_experts'"},
        {"\"num_experts\":4", "\"num_experts\":0", "0 experts (1 to 65536)"},
        {"\"num_experts\":4", "\"num_experts\":3", "is expert 3, but config.json has 3 experts"},
        {"\"num_experts\":4", "\"num_experts\":5", "layer 0 has no gate matrix for expert 4"},
        {"\"moe_intermediate_size\":16,", "", "needs 'moe_intermediate_size' > 0"},
        {"\"moe_intermediate_size\":16", "\"moe_intermediate_size\":12",
         "ffn_gate_exps.weight' has shape [8, 16, 4, 1], expected [8, 12, 4]"},
        {"\"norm_topk_prob\":true", "\"norm_topk_prob\":\"yes\"",
         "'norm_topk_prob' is not a boolean"},
        {"\"decoder_sparse_step\":1", "\"decoder_sparse_step\":2", "dense MLP layers"},
        {"\"mlp_only_layers\":[]", "\"mlp_only_layers\":[0]", "dense MLP layers"},
        {"\"hidden_act\"", "\"shared_expert_intermediate_size\":16,\"hidden_act\"",
         "shared experts are not supported"},
        {"\"hidden_act\"", "\"clip_qkv\":8,\"hidden_act\"", "'clip_qkv' is not supported"},
        {"\"hidden_act\"", "\"use_sliding_window\":true,\"hidden_act\"", "use_sliding_window"},
    };
    for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
        char *c = replace(k_moe_config, cfg_cases[i].from, cfg_cases[i].to);
        CHECK(c != NULL, "moe case %zu: '%s' not in the config", i, cfg_cases[i].from);
        if (!c)
            continue;
        put_text("config.json", c);
        expect_refused(c, cfg_cases[i].want);
        free(c);
    }
    put_text("config.json", k_moe_config);
    /* num_local_experts (Mixtral's, and transformers 5's Qwen3-MoE's) serves. */
    char *local = replace(k_moe_config, "\"num_experts\":4", "\"num_local_experts\":4");
    put_text("config.json", local);
    expect_moe_loads("num_local_experts");
    free(local);
    put_text("config.json", k_moe_config);

    /* Tensor cases: each a per-expert (or fused) set with one thing wrong. */
    int i;
    n = moe_tensors(t, 0, 0); /* expert 3's up_proj missing */
    st_drop(t, &n, st_find(t, n, "model.layers.0.mlp.experts.3.up_proj.weight"));
    put_st(t, n);
    expect_refused("missing expert", "layer 0 has no up matrix for expert 3 (of 4)");
    n = moe_tensors(t, 0, 0); /* an expert past the config's count */
    t[n] = t[st_find(t, n, "model.layers.0.mlp.experts.0.down_proj.weight")];
    snprintf(t[n++].name, sizeof t[0].name, "model.layers.0.mlp.experts.4.down_proj.weight");
    put_st(t, n);
    expect_refused("expert 4", "is expert 4, but config.json has 4 experts");
    n = moe_tensors(t, 0, 0); /* expert 0's gate under both naming schemes */
    t[n] = t[st_find(t, n, "model.layers.0.mlp.experts.0.gate_proj.weight")];
    snprintf(t[n++].name, sizeof t[0].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
    put_st(t, n);
    expect_refused("twice", "layer 0 has two gate matrices for expert 0");
    n = moe_tensors(t, 0, 0); /* expert 2's down of another shape */
    i = st_find(t, n, "model.layers.0.mlp.experts.2.down_proj.weight");
    t[i].shape[1] = 12;
    put_st(t, n);
    expect_refused("shape", "layer 0's down matrix of expert 2 is [8, 12] F32, expert 0's [8, 16]");
    n = moe_tensors(t, 0, 0); /* expert 1's gate of another dtype */
    t[st_find(t, n, "model.layers.0.mlp.experts.1.gate_proj.weight")].dtype = "BF16";
    put_st(t, n);
    expect_refused("dtype", "gate matrix of expert 1 is [16, 8] BF16");
    n = moe_tensors(t, 0, 0); /* an integer expert */
    t[st_find(t, n, "model.layers.0.mlp.experts.0.up_proj.weight")].dtype = "I32";
    put_st(t, n);
    expect_refused("int", "is I32 (brisk reads F32, F16, BF16)");
    n = moe_tensors(t, 1, 0); /* both layouts in one layer */
    t[n++] = st("model.layers.0.mlp.experts.0.gate_proj.weight", "F32", 2, MOE_FF, DIM, 0);
    put_st(t, n);
    expect_refused("mixed", "layer 0's experts are not one set");
    n = moe_tensors(t, 1, 0); /* fused, down_proj missing */
    st_drop(t, &n, st_find(t, n, "model.layers.0.mlp.experts.down_proj"));
    put_st(t, n);
    expect_refused("fused half", "layer 0's experts are not one set");
    n = moe_tensors(t, 1, 0); /* fused, 3 experts in a config of 4 */
    t[st_find(t, n, "model.layers.0.mlp.experts.gate_up_proj")].shape[0] = 3;
    put_st(t, n);
    expect_refused("fused count", "layer 0's fused experts have shapes [3, 32, 8]");
    n = moe_tensors(t, 1, 0); /* fused, an odd gate_up row count */
    t[st_find(t, n, "model.layers.0.mlp.experts.gate_up_proj")].shape[1] = 31;
    put_st(t, n);
    expect_refused("fused odd", "fused experts have shapes [4, 31, 8]");
    n = moe_tensors(t, 1, 0); /* fused, 2-D */
    i = st_find(t, n, "model.layers.0.mlp.experts.down_proj");
    t[i] = st("model.layers.0.mlp.experts.down_proj", "F32", 2, MOE_E * DIM, MOE_FF, 0);
    put_st(t, n);
    expect_refused("fused rank", "has 2 dims and 512 values (3 dims, not empty)");
    n = moe_tensors(t, 0, 0); /* no experts at all: a dense MLP */
    for (int k = n - 1; k >= 0; k--)
        if (strstr(t[k].name, ".experts."))
            st_drop(t, &n, k);
    t[n++] = st("model.layers.0.mlp.gate_proj.weight", "F32", 2, 32, DIM, 0);
    put_st(t, n);
    expect_refused("dense", "layer 0 has no experts (config.json: 4 a layer)");
    n = moe_tensors(t, 0, 0); /* no router */
    st_drop(t, &n, st_find(t, n, "model.layers.0.mlp.gate.weight"));
    put_st(t, n);
    expect_refused("router", "missing tensor 'blk.0.ffn_gate_inp.weight'");

    /* Cut and flipped: the config and both layouts' weights. */
    n = moe_tensors(t, 0, 0);
    put_st(t, n);
    test_damaged("config.json", k_moe_config, 300);
    for (int fused = 0; fused < 2; fused++) {
        uint8_t *buf;
        n = moe_tensors(t, fused, 0);
        size_t len = make_st(t, n, &buf);
        /* Flips land in the header: the part of the file that is parsed. */
        size_t hlen = 8 + (size_t)buf[0] + ((size_t)buf[1] << 8);
        test_damaged_bytes("model.safetensors", (const char *)buf, hlen, 0);
        uint8_t *c = malloc(len);
        int bad = 0;
        for (int k = 0; k < 300; k++) {
            memcpy(c, buf, len);
            for (int j = 0; j < 1 + (int)(rng() % 3); j++)
                c[8 + rng() % (hlen - 8)] ^= (uint8_t)(1u << (rng() % 8));
            put("model.safetensors", c, len);
            char err[512] = "";
            int rc = try_load(g_dir, err, sizeof err);
            bad += rc < 0 && !bt_one_line(err);
        }
        CHECK(bad == 0, "moe safetensors (fused %d): %d refusals without a one-line message", fused,
              bad);
        free(c);
        free(buf);
    }
    put_text("config.json", k_config);
    put_weights();
}

int main(void) {
    brisk_log_set_level((brisk_log_level)(BRISK_LOG_ERROR + 1));
    snprintf(g_dir, sizeof g_dir, "/tmp/brisk_test_hf_%d", (int)getpid());
    mkdir(g_dir, 0700);
    char *tok = make_tokenizer();
    put_text("config.json", k_config);
    put_text("tokenizer.json", tok);
    put_text("tokenizer_config.json",
             "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_bos_token\":true}");
    put_weights();

    test_valid();
    test_config_cases();
    test_generation();
    test_damaged("config.json", k_config, 600);
    test_damaged("tokenizer.json", tok, 300);
    test_moe();

    static const char *const names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[512];
        path_in(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
    free(tok);
    return BT_SUMMARY("test_hf_folder");
}
