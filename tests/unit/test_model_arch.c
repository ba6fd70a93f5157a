/* test_model_arch.c - the architecture table (models/model_arch.h) drives
 * the loader. For every row, a small model of that family written with
 * gguf_writer loads with the row's features and defaults, the file's
 * metadata overrides those defaults (window pattern, local RoPE base,
 * epsilon, soft-caps only where the row reads them), and the tensors a
 * feature needs are required. The dummy shapes' configurations are their
 * rows'; unknown and encoder-only names are refused with the list the table
 * gives; and the Gemma (1) row, added as one row, is what the family is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/backend.h"
#include "models/gguf_write.h"
#include "models/model.h"
#include "models/model_arch.h"
#include "models/model_recipe.h"

#define DIM 32
#define HIDDEN 64
#define N_HEADS 2
#define N_KV 1
#define HEAD_DIM (DIM / N_HEADS)
#define N_LAYERS 2
#define N_TOK 4

/* What the file holds besides the shapes. */
enum {
    F_OVERRIDES = 1 << 0, /* a window, its pattern and local base, eps, soft-caps, scaling */
    F_NO_FEATURE_TENSORS = 1 << 1, /* leave out biases, q/k norms and post-norms */
};

/* Every tensor's values: zeros are enough for the loader (and the same
 * buffer serves every tensor, borrowed by the writer). */
#define N_EXPERT 4 /* the mixture-of-experts rows: 4 experts of HIDDEN, top 2 */
static float zeros[N_EXPERT * HIDDEN * DIM];

static int add(gguf_writer *w, const char *name, int64_t n_in, int64_t n_out) {
    int64_t ne[2] = {n_in, n_out};
    return gguf_writer_add_tensor(w, name, KERN_TYPE_F32, n_out > 1 ? 2 : 1, ne, zeros);
}

/* A stack of N_EXPERT matrices [n_out][n_in] (GGUF's 3-D expert tensors). */
static int add3(gguf_writer *w, const char *name, int64_t n_in, int64_t n_out) {
    int64_t ne[3] = {n_in, n_out, N_EXPERT};
    return gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 3, ne, zeros);
}

/* A model of family a (arch_name, so that unknown names can be written too)
 * as a GGUF image in *buf (malloc'ed; the caller frees). */
static int write_model(const char *arch_name, const model_arch_desc *a, int flags, uint8_t **buf,
                       size_t *len) {
    static const char *const toks[N_TOK] = {"<unk>", "<s>", "</s>", "a"};
    static const uint64_t lens[N_TOK] = {5, 3, 4, 1};
    static const float scores[N_TOK] = {0, 0, 0, -1};
    static const int32_t types[N_TOK] = {2, 3, 3, 1};
    gguf_writer *w = gguf_writer_create();
    if (!w)
        return BRISK_ENOMEM;
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch_name, suffix), key)
    int rc = gguf_writer_set_str(w, "general.architecture", arch_name);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), N_LAYERS);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), DIM);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), HIDDEN);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), N_HEADS);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), N_KV);
    /* A global base apart from every row's local default. */
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), 1e6f);
    if (flags & F_OVERRIDES) {
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-3f);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.sliding_window"), 4);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.sliding_window_pattern"), 2);
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.local.freq_base"), 500.0f);
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), 30.0f);
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("final_logit_softcapping"), 20.0f);
        rc = rc ? rc : gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 2.0f);
    }
    const int moe = a && a->moe == MODEL_MOE_REQUIRED;
    if (moe) {
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_count"), N_EXPERT);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_used_count"), 2);
    }
#undef KEY
    rc = rc ? rc : gguf_writer_set_spm_vocab(w, toks, lens, scores, types, N_TOK);
    rc = rc ? rc : add(w, "token_embd.weight", DIM, N_TOK);
    rc = rc ? rc : add(w, "output_norm.weight", DIM, 1);
    int features = a && !(flags & F_NO_FEATURE_TENSORS);
    for (int l = 0; l < N_LAYERS && !rc; l++) {
        static const struct {
            const char *suffix;
            int n_in, n_out;
        } base[] = {
            {"attn_norm.weight", DIM, 1},
            {"ffn_norm.weight", DIM, 1},
            {"attn_q.weight", DIM, N_HEADS * HEAD_DIM},
            {"attn_k.weight", DIM, N_KV * HEAD_DIM},
            {"attn_v.weight", DIM, N_KV * HEAD_DIM},
            {"attn_output.weight", N_HEADS * HEAD_DIM, DIM},
            {"ffn_gate.weight", DIM, HIDDEN},
            {"ffn_up.weight", DIM, HIDDEN},
            {"ffn_down.weight", HIDDEN, DIM},
        };
        char name[64];
        for (size_t i = 0; i < sizeof base / sizeof base[0] && !rc; i++) {
            if (moe && !strncmp(base[i].suffix, "ffn_", 4) &&
                strcmp(base[i].suffix, "ffn_norm.weight"))
                continue; /* the experts below instead */
            snprintf(name, sizeof name, "blk.%d.%s", l, base[i].suffix);
            rc = add(w, name, base[i].n_in, base[i].n_out);
        }
        if (moe && !rc) { /* the router and the stacked experts (expert width: the ffn's) */
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
            rc = add(w, name, DIM, N_EXPERT);
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
            rc = rc ? rc : add3(w, name, DIM, HIDDEN);
            snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
            rc = rc ? rc : add3(w, name, DIM, HIDDEN);
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
            rc = rc ? rc : add3(w, name, HIDDEN, DIM);
        }
        /* OLMoE normalises the whole of q and of k, the others each head. */
        const int qn = a && a->qk_norm == MODEL_QK_NORM_FULL ? N_HEADS * HEAD_DIM : HEAD_DIM;
        const int kn = a && a->qk_norm == MODEL_QK_NORM_FULL ? N_KV * HEAD_DIM : HEAD_DIM;
#define FEATURE(on, suffix, n)                                                                     \
    if (features && (on) && !rc) {                                                                 \
        snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                       \
        rc = add(w, name, n, 1);                                                                   \
    }
        FEATURE(a->qkv_bias, "attn_q.bias", N_HEADS * HEAD_DIM)
        FEATURE(a->qkv_bias, "attn_k.bias", N_KV * HEAD_DIM)
        FEATURE(a->qkv_bias, "attn_v.bias", N_KV * HEAD_DIM)
        FEATURE(a->qk_norm, "attn_q_norm.weight", qn)
        FEATURE(a->qk_norm, "attn_k_norm.weight", kn)
        FEATURE(a->post_norms, "post_attention_norm.weight", DIM)
        FEATURE(a->post_norms, "post_ffw_norm.weight", DIM)
#undef FEATURE
    }
    if (!rc)
        rc = gguf_writer_to_buffer(w, buf, len);
    gguf_writer_free(w);
    return rc;
}

static model *load(const char *arch_name, const model_arch_desc *a, int flags, uint8_t **buf,
                   char *err, size_t err_len, int *rc_out) {
    size_t len = 0;
    *buf = NULL;
    model *m = NULL;
    int rc = write_model(arch_name, a, flags, buf, &len);
    CHECK(rc == 0, "%s: writing the file: %d", arch_name, rc);
    if (rc == 0)
        rc = model_load_memory(*buf, len, NULL, &m, err, err_len);
    *rc_out = rc;
    return m;
}

/* Every row through the loader: its features and defaults, then the
 * file's values over them. */
static void test_rows_drive_config(void) {
    for (int i = 0; i < model_arch_count(); i++) {
        const model_arch_desc *a = model_arch_at(i);
        uint8_t *buf;
        char err[256] = "";
        int rc;
        model *m = load(a->name, a, 0, &buf, err, sizeof err, &rc);
        CHECK(rc == 0 && m, "%s: %s", a->name, err);
        if (m) {
            const model_config *c = model_get_config(m);
            const model_layer *L = model_get_weights(m)->layers;
            CHECK(c->arch == a && !strcmp(c->arch->name, a->name), "%s: row", a->name);
            CHECK(c->rope_mode == a->rope_mode && c->has_qkv_bias == a->qkv_bias &&
                      c->has_qk_norm == a->qk_norm && c->has_post_norms == a->post_norms &&
                      c->act == a->act,
                  "%s: features", a->name);
            CHECK(c->embd_scale == (a->embd_scale_sqrt_dim ? sqrtf((float)DIM) : 0.0f),
                  "%s: embedding scale %g", a->name, (double)c->embd_scale);
            CHECK(c->norm_eps == a->norm_eps, "%s: default eps %g", a->name, (double)c->norm_eps);
            CHECK(c->swa_pattern == a->swa_pattern && c->n_swa == 0, "%s: default pattern %d",
                  a->name, c->swa_pattern);
            float want_swa_base = a->swa_pattern && a->rope_base_swa > 0 ? a->rope_base_swa : 1e6f;
            CHECK(c->rope_base_swa == want_swa_base, "%s: default local base %g", a->name,
                  (double)c->rope_base_swa);
            CHECK(c->attn_softcap == 0.0f && c->final_softcap == 0.0f, "%s: no caps", a->name);
            CHECK(model_config_cuda_validated(c) == a->cuda_validated, "%s: cuda validated",
                  a->name);
            for (int l = 0; l < N_LAYERS; l++) {
                CHECK(!L[l].bq == !a->qkv_bias && !L[l].q_norm == !a->qk_norm &&
                          !L[l].post_attn_norm == !a->post_norms &&
                          !L[l].post_ffn_norm == !L[l].post_attn_norm,
                      "%s: layer %d's feature tensors", a->name, l);
                CHECK(L[l].window == 0 && L[l].rope_base == 1e6f, "%s: layer %d global", a->name,
                      l);
            }
        }
        model_free(m);
        free(buf);

        m = load(a->name, a, F_OVERRIDES, &buf, err, sizeof err, &rc);
        CHECK(rc == 0 && m, "%s overridden: %s", a->name, err);
        if (m) {
            const model_config *c = model_get_config(m);
            const model_layer *L = model_get_weights(m)->layers;
            CHECK(c->norm_eps == 1e-3f, "%s: the file's eps", a->name);
            CHECK(c->n_swa == 4 && c->rope_freq_scale == 0.5f, "%s: window, scaling", a->name);
            /* The pattern and local base are read only by families that
             * have local/global layers; elsewhere the window covers every
             * layer on the global base. */
            CHECK(c->swa_pattern == (a->swa_pattern ? 2 : 0), "%s: pattern %d", a->name,
                  c->swa_pattern);
            CHECK(c->rope_base_swa == (a->swa_pattern ? 500.0f : 1e6f), "%s: local base %g",
                  a->name, (double)c->rope_base_swa);
            CHECK(c->attn_softcap == (a->softcaps ? 30.0f : 0.0f) &&
                      c->final_softcap == (a->softcaps ? 20.0f : 0.0f),
                  "%s: soft-caps %g %g", a->name, (double)c->attn_softcap,
                  (double)c->final_softcap);
            CHECK(!model_config_cuda_validated(c), "%s: a window is not validated on CUDA",
                  a->name);
            CHECK(L[0].window == 4 && L[0].rope_base == c->rope_base_swa, "%s: layer 0 local",
                  a->name);
            CHECK(L[0].rope_freq_scale == (a->swa_rope_unscaled ? 1.0f : 0.0f),
                  "%s: layer 0 scaling %g", a->name, (double)L[0].rope_freq_scale);
            CHECK(L[1].window == (a->swa_pattern ? 0 : 4), "%s: layer 1 window %d", a->name,
                  L[1].window);
        }
        model_free(m);
        free(buf);

        /* The tensors a feature needs are required. */
        int needs = a->qkv_bias || a->qk_norm || a->post_norms;
        m = load(a->name, a, F_NO_FEATURE_TENSORS, &buf, err, sizeof err, &rc);
        if (needs)
            CHECK(rc == BRISK_EFORMAT && !m && strstr(err, "missing tensor 'blk.0."),
                  "%s without its feature tensors: %d %s", a->name, rc, err);
        else
            CHECK(rc == 0 && m, "%s: %s", a->name, err);
        model_free(m);
        free(buf);
    }
}

static void test_lookup(void) {
    int n = model_arch_count();
    CHECK(n >= 6, "%d rows", n);
    for (int i = 0; i < n; i++) {
        const model_arch_desc *a = model_arch_at(i);
        CHECK(a && a->name && a->name[0], "row %d named", i);
        CHECK(model_arch_find(a->name, strlen(a->name)) == a, "%s found", a->name);
        CHECK(!model_arch_is_encoder(a->name), "%s is a decoder", a->name);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(a->name, model_arch_at(j)->name) != 0, "%s twice", a->name);
    }
    CHECK(model_arch_at(-1) == NULL && model_arch_at(n) == NULL, "rows past the ends");
    /* The name is compared whole, by its length. */
    CHECK(model_arch_find("gemma3", 5) == model_arch_find("gemma", 5), "a prefix is its own name");
    CHECK(model_arch_find("llama2", 6) == NULL && model_arch_find("", 0) == NULL &&
              model_arch_find("gpt2", 4) == NULL,
          "unknown names");
    CHECK(model_arch_is_encoder("bert") && model_arch_is_encoder("nomic-bert") &&
              !model_arch_is_encoder("gpt2"),
          "encoders");
}

/* The supported list comes from the table, and so do the messages. */
static void test_supported_list(void) {
    char want[256] = "", got[256];
    for (int i = 0; i < model_arch_count(); i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? ", " : "",
                 model_arch_at(i)->name);
    CHECK(!strcmp(model_arch_list(got, sizeof got), want), "list '%s', want '%s'", got, want);
    static const char first[] = "llama, qwen2, qwen3, gemma2, gemma3, phi3";
    CHECK(!strncmp(want, first, strlen(first)), "the list in table order: %s", want);
    char small[9];
    model_arch_list(small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, want, sizeof small - 1), "cut: '%s'",
          small);
    CHECK(model_arch_list(small, 0) == small, "no room");

    char msg[512];
    uint8_t *buf;
    char err[256] = "";
    int rc;
    model *m = load("gpt2", NULL, 0, &buf, err, sizeof err, &rc);
    snprintf(msg, sizeof msg, "unsupported architecture 'gpt2' (supported: %s)", want);
    CHECK(rc == BRISK_EUNSUPPORTED && !m && strstr(err, msg) && bt_one_line(err), "gpt2: %s", err);
    free(buf);
    m = load("nomic-bert", NULL, 0, &buf, err, sizeof err, &rc);
    snprintf(msg, sizeof msg, "decoder-only models (%s)", want);
    CHECK(rc == BRISK_EUNSUPPORTED && !m && strstr(err, "'nomic-bert' is an encoder-only") &&
              strstr(err, msg) && bt_one_line(err),
          "nomic-bert: %s", err);
    free(buf);
}

/* Every dummy shape names a row and gets that row's features. */
static void test_dummy_shapes(void) {
    for (int i = 0; model_dummy_configs[i]; i++) {
        model_config c;
        int rc = model_dummy_config(model_dummy_configs[i], &c);
        CHECK(rc == 0 && c.arch, "%s: %d", model_dummy_configs[i], rc);
        if (rc != 0 || !c.arch)
            continue;
        const model_arch_desc *a = c.arch;
        CHECK(model_arch_find(a->name, strlen(a->name)) == a, "%s: a row", model_dummy_configs[i]);
        CHECK(c.rope_mode == a->rope_mode && c.has_qkv_bias == a->qkv_bias &&
                  c.has_qk_norm == a->qk_norm && c.has_post_norms == a->post_norms &&
                  c.act == a->act && c.swa_pattern == a->swa_pattern,
              "%s: the row's features", model_dummy_configs[i]);
        CHECK(c.embd_scale == (a->embd_scale_sqrt_dim ? sqrtf((float)c.dim) : 0.0f),
              "%s: embedding scale", model_dummy_configs[i]);
        CHECK(c.n_vocab > 0 && c.n_layers > 0 && c.attn_scale == 1.0f / sqrtf((float)c.head_dim),
              "%s: shape", model_dummy_configs[i]);
    }
    model_config c;
    CHECK(model_dummy_config("gemma3-1b", &c) == 0 && !strcmp(c.arch->name, "gemma3") &&
              c.n_swa == 512 && c.swa_pattern == 6 && c.rope_base_swa == 10000.0f,
          "gemma3-1b: its window from the row's defaults");
    /* Gemma 2 2B: local layers first, every other one, on the global base;
     * both soft-caps from the shape's metadata. */
    CHECK(model_dummy_config("gemma2-2b", &c) == 0 && !strcmp(c.arch->name, "gemma2") &&
              c.n_swa == 4096 && c.swa_pattern == 2 && c.rope_base_swa == c.rope_base &&
              c.attn_softcap == 50.0f && c.final_softcap == 30.0f && c.head_dim == 256 &&
              c.n_layers == 26 && c.has_post_norms && c.act == MODEL_ACT_GELU_TANH &&
              c.tied_output && !model_config_cuda_validated(&c),
          "gemma2-2b: windows, soft-caps, heads of 256");
    /* Mistral: a llama file with a window windows every layer; no caps. */
    CHECK(model_dummy_config("mistral-7b-4l", &c) == 0 && !strcmp(c.arch->name, "llama") &&
              c.n_swa == 4096 && c.swa_pattern == 0 && c.attn_softcap == 0.0f &&
              c.final_softcap == 0.0f && c.n_layers == 4 && !c.tied_output &&
              !model_config_cuda_validated(&c),
          "mistral-7b-4l: a window on every layer");
    CHECK(model_dummy_config("qwen2.5-7b", &c) == 0 && !strcmp(c.arch->name, "qwen2") &&
              c.has_qkv_bias && model_config_cuda_validated(&c),
          "qwen2.5-7b");
    /* The mixture-of-experts shapes: their experts and routing rule. */
    CHECK(model_dummy_config("qwen3-30b-a3b-4l", &c) == 0 && !strcmp(c.arch->name, "qwen3moe") &&
              c.n_expert == 128 && c.n_expert_used == 8 && c.expert_hidden == 768 &&
              c.moe_norm_topk && c.dim == 2048 && c.n_heads == 32 && c.n_kv_heads == 4 &&
              c.head_dim == 128 && c.n_layers == 4 && c.has_qk_norm == MODEL_QK_NORM_HEAD &&
              !model_config_cuda_validated(&c),
          "qwen3-30b-a3b-4l");
    CHECK(model_dummy_config("olmoe-1b-7b-4l", &c) == 0 && !strcmp(c.arch->name, "olmoe") &&
              c.n_expert == 64 && c.n_expert_used == 8 && !c.moe_norm_topk &&
              c.has_qk_norm == MODEL_QK_NORM_FULL,
          "olmoe-1b-7b-4l");
    CHECK(model_dummy_config("mixtral-8x7b-2l", &c) == 0 && !strcmp(c.arch->name, "llama") &&
              c.n_expert == 8 && c.n_expert_used == 2 && c.expert_hidden == 14336 &&
              c.moe_norm_topk && !model_config_cuda_validated(&c),
          "mixtral-8x7b-2l");
    CHECK(model_dummy_config("llama-3-8b", &c) == 0 && c.n_expert == 0, "llama-3-8b is dense");
}

/* Gemma (1), added as one row: the Gemma block on a plain decoder. */
static void test_gemma_row(void) {
    const model_arch_desc *a = model_arch_find("gemma", 5);
    CHECK(a != NULL, "a gemma row");
    if (!a)
        return;
    CHECK(a->rope_mode == KERN_ROPE_SPLIT_HALF && a->act == MODEL_ACT_GELU_TANH &&
              a->embd_scale_sqrt_dim && a->norm_eps == 1e-6f,
          "the Gemma block");
    CHECK(!a->qkv_bias && !a->qk_norm && !a->post_norms && a->swa_pattern == 0 &&
              !a->swa_rope_unscaled && !a->softcaps,
          "none of Gemma 2/3's additions");
    CHECK(a->chat == MODEL_CHAT_GEMMA && !a->cuda_validated, "chat family, device");
}

/* Every row's layers as model_layer_recipe lists them (the optional steps
 * where the row has the feature, in the block's order), and the CPU
 * backend's pass runs exactly those steps, for a prompt and a decode step
 * (the trace; test_cuda_model makes the same check of the CUDA pass). The
 * weights are zeros: this checks which steps run, not their numbers. */
static void test_rows_follow_recipe(void) {
    for (int i = 0; i < model_arch_count(); i++) {
        const model_arch_desc *a = model_arch_at(i);
        uint8_t *buf;
        char err[256] = "";
        int rc;
        model *m = load(a->name, a, 0, &buf, err, sizeof err, &rc);
        if (!m) {
            free(buf);
            continue;
        }
        const model_config *c = model_get_config(m);
        model_recipe want;
        model_layer_recipe(c, &model_get_weights(m)->layers[0], &want);
        int has[MODEL_STEP_COUNT] = {0};
        for (int k = 0; k < want.n; k++)
            has[want.step[k]]++;
        const int moe = a->moe == MODEL_MOE_REQUIRED; /* MOE in place of gate_up, act, down */
        CHECK(has[MODEL_STEP_QKV_BIAS] == a->qkv_bias &&
                  has[MODEL_STEP_QK_NORM] == (a->qk_norm != 0) &&
                  has[MODEL_STEP_POST_ATTN_NORM] == a->post_norms &&
                  has[MODEL_STEP_POST_FFN_NORM] == a->post_norms && has[MODEL_STEP_RESIDUAL] == 2 &&
                  has[MODEL_STEP_MOE] == moe && has[MODEL_STEP_GATE_UP] == !moe &&
                  want.n == 12 + 2 * a->post_norms + a->qkv_bias + (a->qk_norm != 0) - 2 * moe,
              "%s: the recipe's steps are the row's features", a->name);
        model_backend_opts o = {.device = MODEL_DEVICE_CPU,
                                .max_batch_tokens = 8,
                                .max_ctx = 16,
                                .max_seqs = 1,
                                .block_size = 16};
        model_backend *be = NULL;
        kv_cache *kv = NULL;
        kv_cache_config kc = {.n_layers = c->n_layers,
                              .kv_dim = c->n_kv_heads * c->head_dim,
                              .block_size = 16,
                              .n_blocks = 2,
                              .max_seqs = 1,
                              .max_seq_blocks = 1};
        rc = model_backend_create(m, &o, &be, err, sizeof err);
        rc = rc ? rc : model_backend_kv_create(be, &kc, &kv);
        rc = rc ? rc : kv_cache_seq_grow(kv, 0, 4);
        CHECK(rc == 0, "%s: backend: %d %s", a->name, rc, err);
        model_recipe trace[N_LAYERS];
        int32_t tok[3] = {1, 3, 3}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
        int n_out = 0;
        for (int step = 0; rc == 0 && step < 2; step++) {
            memset(trace, 0, sizeof trace);
            model_backend_set_trace(be, trace);
            /* a prompt of 2 tokens, then one decode token */
            model_batch b = {step ? 1 : 2, tok + 2 * step, pos + 2 * step, seq, NULL, NULL};
            rc = model_backend_forward(be, kv, &b, &n_out);
            CHECK(rc == 0, "%s: forward %d: %d", a->name, step, rc);
            CHECK(rc || model_recipe_trace_check(m, trace, err, sizeof err) == 0,
                  "%s: the CPU pass follows the recipe: %s", a->name, err);
        }
        if (be)
            model_backend_set_trace(be, NULL);
        kv_cache_free(kv);
        model_backend_free(be);
        model_free(m);
        free(buf);
    }
}

/* A trace that leaves out a step, or adds one, fails the check. */
static void test_trace_check(void) {
    const model_arch_desc *a = model_arch_find("gemma3", 6);
    uint8_t *buf;
    char err[256] = "";
    int rc;
    model *m = a ? load(a->name, a, 0, &buf, err, sizeof err, &rc) : NULL;
    CHECK(m != NULL, "gemma3 model");
    if (!m)
        return;
    model_recipe trace[N_LAYERS];
    for (int l = 0; l < N_LAYERS; l++)
        model_layer_recipe(model_get_config(m), &model_get_weights(m)->layers[l], &trace[l]);
    CHECK(model_recipe_trace_check(m, trace, err, sizeof err) == 0, "the recipe itself: %s", err);
    trace[1].n--;
    CHECK(model_recipe_trace_check(m, trace, err, sizeof err) == BRISK_EINVAL &&
              strstr(err, "layer 1") && bt_one_line(err),
          "a missing step: %s", err);
    trace[1].n++;
    trace[0].step[7] = MODEL_STEP_RESIDUAL; /* post_attn_norm left out */
    CHECK(model_recipe_trace_check(m, trace, err, sizeof err) == BRISK_EINVAL &&
              strstr(err, "post_attn_norm"),
          "a step skipped: %s", err);
    model_free(m);
    free(buf);
}

int main(void) {
    test_lookup();
    test_supported_list();
    test_rows_drive_config();
    test_dummy_shapes();
    test_gemma_row();
    test_rows_follow_recipe();
    test_trace_check();
    return BT_SUMMARY("test_model_arch");
}
