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
 *   - the folder is found from DIR, DIR/ and DIR/config.json.
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

/* Cuts and flips of one file: refused with one line or loaded. */
static void test_damaged(const char *name, const char *text, int n_flips) {
    size_t len = strlen(text);
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
    put_text(name, text);
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
