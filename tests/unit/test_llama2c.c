/* test_llama2c.c - convert-llama2c: stories260K to GGUF and back through the
 * reader, an unshared-classifier synthetic model, and refused inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/gguf.h"
#include "models/llama2c.h"

static char g_dir[64];

/* Reads a whole file (caller frees). NULL if absent. */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (n)
        fwrite(p, 1, n, f);
    fclose(f);
}

static void tmp_path(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", g_dir, name);
}

static uint32_t get_u32(const gguf_file *gf, const char *key) {
    uint32_t v = 0xdeadbeef;
    CHECK(gguf_get_u32(gf, key, &v) == 0, "%s", key);
    return v;
}

/* Checks tensor `name` has shape (ne0, ne1) and holds the floats at `src`. */
static void check_tensor(const gguf_file *gf, const char *name, int64_t ne0, int64_t ne1,
                         const float *src) {
    const gguf_tensor *t = gguf_find_tensor(gf, name);
    CHECK(t != NULL, "%s missing", name);
    if (!t)
        return;
    CHECK(t->type == KERN_TYPE_F32 && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 &&
              t->n_dims == (ne1 > 1 ? 2u : 1u),
          "%s: type %d ne %lld x %lld n_dims %u", name, (int)t->type, (long long)t->ne[0],
          (long long)t->ne[1], t->n_dims);
    CHECK(t->nbytes == (size_t)(ne0 * ne1) * 4 && memcmp(t->data, src, t->nbytes) == 0,
          "%s: data differs from the checkpoint", name);
}

static void test_stories(const char *shared) {
    char model[1024], tok[1024], out[256], err[512] = "";
    snprintf(model, sizeof model, "%s/models/stories260K.bin", shared);
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", shared);
    size_t model_n = 0, tok_n = 0;
    uint8_t *mbytes = slurp(model, &model_n), *tbytes = slurp(tok, &tok_n);
    if (!mbytes || !tbytes) {
        printf("test_llama2c: SKIP stories260K (no %s or %s)\n", model, tok);
        free(mbytes);
        free(tbytes);
        return;
    }
    tmp_path(out, sizeof out, "stories260K.gguf");
    CHECK(model_convert_llama2c(model, tok, out, err, sizeof err) == 0, "%s", err);
    gguf_file *gf = NULL;
    CHECK(gguf_open(out, &gf, err, sizeof err) == 0, "%s", err);
    if (!gf)
        goto done;

    gguf_str s;
    float f;
    int b;
    CHECK_COND(gguf_get_str(gf, "general.architecture", &s) == 0 && gguf_str_eq(s, "llama"));
    CHECK_COND(gguf_get_str(gf, "general.name", &s) == 0 && gguf_str_eq(s, "stories260K"));
    CHECK_COND(get_u32(gf, "llama.embedding_length") == 64);
    CHECK_COND(get_u32(gf, "llama.block_count") == 5);
    CHECK_COND(get_u32(gf, "llama.attention.head_count") == 8);
    CHECK_COND(get_u32(gf, "llama.attention.head_count_kv") == 4);
    CHECK_COND(get_u32(gf, "llama.feed_forward_length") == 172);
    CHECK_COND(get_u32(gf, "llama.context_length") == 512);
    CHECK_COND(get_u32(gf, "llama.rope.dimension_count") == 8);
    CHECK_COND(gguf_get_f32(gf, "llama.rope.freq_base", &f) == 0 && f == 10000.0f);
    CHECK_COND(gguf_get_f32(gf, "llama.attention.layer_norm_rms_epsilon", &f) == 0 && f == 1e-5f);
    CHECK_COND(gguf_get_str(gf, "tokenizer.ggml.model", &s) == 0 && gguf_str_eq(s, "llama"));
    CHECK_COND(get_u32(gf, "tokenizer.ggml.bos_token_id") == 1);
    CHECK_COND(get_u32(gf, "tokenizer.ggml.eos_token_id") == 2);
    CHECK_COND(get_u32(gf, "tokenizer.ggml.unknown_token_id") == 0);
    CHECK_COND(gguf_get_bool(gf, "tokenizer.ggml.add_bos_token", &b) == 0 && b == 1);
    CHECK_COND(gguf_get_bool(gf, "tokenizer.ggml.add_space_prefix", &b) == 0 && b == 1);

    /* The vocabulary against tok512.bin, piece by piece. */
    gguf_str *toks = NULL;
    uint64_t n = 0, n_scores = 0, n_types = 0;
    gguf_type et_s, et_t;
    const void *scores_p, *types_p;
    CHECK_COND(gguf_get_arr_str(gf, "tokenizer.ggml.tokens", &toks, &n) == 0 && n == 512);
    CHECK_COND(gguf_get_arr(gf, "tokenizer.ggml.scores", &et_s, &n_scores, &scores_p) == 0 &&
               et_s == GGUF_TYPE_FLOAT32 && n_scores == 512);
    CHECK_COND(gguf_get_arr(gf, "tokenizer.ggml.token_type", &et_t, &n_types, &types_p) == 0 &&
               et_t == GGUF_TYPE_INT32 && n_types == 512);
    if (toks && n == 512 && n_scores == 512 && n_types == 512) {
        int32_t types[512];
        float scores[512];
        memcpy(types, types_p, sizeof types);
        memcpy(scores, scores_p, sizeof scores);
        CHECK_COND(gguf_str_eq(toks[0], "<unk>") && types[0] == 2);
        CHECK_COND(gguf_str_eq(toks[1], "<s>") && types[1] == 3);
        CHECK_COND(gguf_str_eq(toks[2], "</s>") && types[2] == 3);
        CHECK_COND(gguf_str_eq(toks[3], "<0x00>") && types[3] == 6);
        CHECK_COND(gguf_str_eq(toks[13], "<0x0A>") && types[13] == 6);
        CHECK_COND(gguf_str_eq(toks[258], "<0xFF>") && types[258] == 6);
        CHECK_COND(gguf_str_eq(toks[259], "\xe2\x96\x81t") && types[259] == 1);
        size_t pos = 4;
        int bad = 0, with_space = 0;
        for (int i = 0; i < 512; i++) {
            float sc;
            int32_t len;
            memcpy(&sc, tbytes + pos, 4);
            memcpy(&len, tbytes + pos + 4, 4);
            const char *src = (const char *)tbytes + pos + 8;
            pos += 8 + (size_t)len;
            if (scores[i] != sc)
                bad++;
            if (i < 3)
                continue;
            /* Expected: the source piece with each ' ' as U+2581. */
            char want[64];
            size_t wl = 0;
            for (int j = 0; j < len && wl + 3 < sizeof want; j++) {
                if (src[j] == ' ') {
                    memcpy(want + wl, "\xe2\x96\x81", 3);
                    wl += 3;
                    with_space++;
                } else {
                    want[wl++] = src[j];
                }
            }
            if (toks[i].len != wl || memcmp(toks[i].data, want, wl) != 0 ||
                memchr(toks[i].data, ' ', toks[i].len) != NULL)
                bad++;
            if (types[i] != (i <= 258 ? 6 : 1))
                bad++;
        }
        CHECK(bad == 0, "%d vocabulary entries differ", bad);
        CHECK_COND(with_space == 91); /* pieces of tok512.bin that hold a space */
    }
    free(toks);

    /* Every tensor against the checkpoint's floats at their offsets. */
    const int64_t dim = 64, hidden = 172, layers = 5, kv_dim = 32, vocab = 512;
    const float *w = (const float *)(const void *)(mbytes + 28);
    const float *rms_att = w + vocab * dim, *wq = rms_att + layers * dim;
    const float *wk = wq + layers * dim * dim, *wv = wk + layers * kv_dim * dim;
    const float *wo = wv + layers * kv_dim * dim, *rms_ffn = wo + layers * dim * dim;
    const float *w1 = rms_ffn + layers * dim, *w2 = w1 + layers * hidden * dim;
    const float *w3 = w2 + layers * dim * hidden, *rms_final = w3 + layers * hidden * dim;
    CHECK_COND(gguf_n_tensors(gf) == 2 + 9 * layers);
    check_tensor(gf, "token_embd.weight", dim, vocab, w);
    check_tensor(gf, "output_norm.weight", dim, 1, rms_final);
    CHECK_COND(gguf_find_tensor(gf, "output.weight") == NULL);
    for (int64_t l = 0; l < layers; l++) {
        char nm[64];
#define T(suffix, d0, d1, ptr)                                                                     \
    do {                                                                                           \
        snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)l, suffix);                              \
        check_tensor(gf, nm, d0, d1, ptr);                                                         \
    } while (0)
        T("attn_norm.weight", dim, 1, rms_att + l * dim);
        T("attn_q.weight", dim, dim, wq + l * dim * dim);
        T("attn_k.weight", dim, kv_dim, wk + l * kv_dim * dim);
        T("attn_v.weight", dim, kv_dim, wv + l * kv_dim * dim);
        T("attn_output.weight", dim, dim, wo + l * dim * dim);
        T("ffn_norm.weight", dim, 1, rms_ffn + l * dim);
        T("ffn_gate.weight", dim, hidden, w1 + l * hidden * dim);
        T("ffn_down.weight", hidden, dim, w2 + l * dim * hidden);
        T("ffn_up.weight", dim, hidden, w3 + l * hidden * dim);
#undef T
    }
    /* Spot values, read straight from the file bytes at fixed offsets, in
     * case the pointer arithmetic above shares a mistake with the converter. */
    const gguf_tensor *t = gguf_find_tensor(gf, "blk.0.attn_q.weight");
    if (t) {
        float a, b2;
        size_t off = 28 + 4 * (size_t)(vocab * dim + layers * dim) + 4 * 65; /* row 1, col 1 */
        memcpy(&a, mbytes + off, 4);
        memcpy(&b2, (const uint8_t *)t->data + 4 * 65, 4);
        CHECK_COND(a == b2);
    }
    t = gguf_find_tensor(gf, "token_embd.weight");
    if (t) {
        float a, b2;
        memcpy(&a, mbytes + 28 + 4 * (259 * 64 + 7), 4);
        memcpy(&b2, (const uint8_t *)t->data + 4 * (259 * 64 + 7), 4);
        CHECK_COND(a == b2 && a != 0.0f);
    }
    gguf_close(gf);

    /* Hostile variants of the real files. */
    char bad_model[256], bad_tok[256];
    tmp_path(bad_model, sizeof bad_model, "bad.bin");
    tmp_path(bad_tok, sizeof bad_tok, "bad_tok.bin");
    tmp_path(out, sizeof out, "bad.gguf");
    struct {
        const char *what;
        size_t n;
        int patch_at; /* int32 index in the header to overwrite, or -1 */
        int32_t patch;
    } mcases[] = {
        {"truncated checkpoint", 1000, -1, 0},
        {"checkpoint one float short", model_n - 4, -1, 0},
        {"header only", 28, -1, 0},
        {"shorter than header", 10, -1, 0},
        {"n_heads 3", model_n, 3, 3},
        {"n_kv_heads 3", model_n, 4, 3},
        {"n_kv_heads 16", model_n, 4, 16},
        {"dim 0", model_n, 0, 0},
        {"dim -64", model_n, 0, -64},
        {"vocab INT32_MIN", model_n, 5, INT32_MIN},
        {"vocab 0", model_n, 5, 0},
        {"vocab -512 (needs wcls)", model_n, 5, -512},
        {"n_layers huge", model_n, 2, 1 << 30},
        {"seq_len 513", model_n, 6, 513},
        {"ak42 magic", model_n, 0, 0x616b3432},
    };
    for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) {
        uint8_t *copy = malloc(model_n);
        memcpy(copy, mbytes, model_n);
        if (mcases[i].patch_at >= 0)
            memcpy(copy + 4 * mcases[i].patch_at, &mcases[i].patch, 4);
        spit(bad_model, copy, mcases[i].n);
        free(copy);
        err[0] = '\0';
        int rc = model_convert_llama2c(bad_model, tok, out, err, sizeof err);
        CHECK(rc < 0 && bt_one_line(err), "%s: rc %d '%s'", mcases[i].what, rc, err);
        CHECK(access(out, F_OK) != 0, "%s: output written", mcases[i].what);
        if (getenv("TEST_VERBOSE"))
            printf("  %-28s -> %s\n", mcases[i].what, err);
    }

    /* Tokenizers: garbage, truncated, trailing bytes, a hostile length. */
    uint8_t garbage[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof garbage; i++) {
        x = x * 1103515245u + 12345u;
        garbage[i] = (uint8_t)(x >> 16);
    }
    uint8_t *tcopy = malloc(tok_n + 1);
    memcpy(tcopy, tbytes, tok_n);
    tcopy[tok_n] = 'x';
    int32_t huge = 1 << 30, neg = -1, seven = 7;
    struct {
        const char *what;
        const uint8_t *p;
        size_t n;
        size_t patch_off;
        const int32_t *patch;
    } tcases[] = {
        {"garbage tokenizer", garbage, sizeof garbage, 0, NULL},
        {"garbage after max_len", garbage, sizeof garbage, 0, &seven},
        {"empty tokenizer", tbytes, 0, 0, NULL},
        {"truncated tokenizer", tbytes, tok_n / 2, 0, NULL},
        {"tokenizer one byte short", tbytes, tok_n - 1, 0, NULL},
        {"tokenizer trailing byte", tcopy, tok_n + 1, 0, NULL},
        {"max_token_length 2^30", tbytes, tok_n, 0, &huge},
        {"max_token_length -1", tbytes, tok_n, 0, &neg},
        {"token 0 length 2^30", tbytes, tok_n, 8, &huge},
        {"token 0 length -1", tbytes, tok_n, 8, &neg},
    };
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        uint8_t *copy = malloc(tcases[i].n + 1);
        memcpy(copy, tcases[i].p, tcases[i].n);
        if (tcases[i].patch)
            memcpy(copy + tcases[i].patch_off, tcases[i].patch, 4);
        spit(bad_tok, copy, tcases[i].n);
        free(copy);
        err[0] = '\0';
        int rc = model_convert_llama2c(model, bad_tok, out, err, sizeof err);
        CHECK(rc < 0 && bt_one_line(err), "%s: rc %d '%s'", tcases[i].what, rc, err);
        CHECK(access(out, F_OK) != 0, "%s: output written", tcases[i].what);
        if (getenv("TEST_VERBOSE"))
            printf("  %-28s -> %s\n", tcases[i].what, err);
    }
    free(tcopy);
    CHECK_COND(model_convert_llama2c("/nonexistent.bin", tok, out, err, sizeof err) == BRISK_EIO &&
               bt_one_line(err));
    CHECK_COND(model_convert_llama2c(model, tok, "/nonexistent-dir/x.gguf", err, sizeof err) ==
                   BRISK_EIO &&
               bt_one_line(err));
    unlink(bad_model);
    unlink(bad_tok);
done:
    tmp_path(out, sizeof out, "stories260K.gguf");
    unlink(out);
    free(mbytes);
    free(tbytes);
}

/* A tiny synthetic model with an unshared classifier (negative vocab_size):
 * output.weight must come from the floats after the RoPE tables. */
static void test_unshared_classifier(void) {
    enum { DIM = 8, HIDDEN = 16, LAYERS = 2, HEADS = 2, KV = 1, VOCAB = 4, SEQ = 3 };
    const int kv_dim = DIM / HEADS * KV, head = DIM / HEADS;
    size_t floats =
        (size_t)VOCAB * DIM +
        LAYERS * ((size_t)2 * DIM + 2 * DIM * DIM + 2 * kv_dim * DIM + 3 * HIDDEN * DIM) + DIM +
        (size_t)SEQ * head + (size_t)VOCAB * DIM;
    size_t n = 28 + 4 * floats;
    uint8_t *m = malloc(n);
    int32_t hdr[7] = {DIM, HIDDEN, LAYERS, HEADS, KV, -VOCAB, SEQ};
    memcpy(m, hdr, sizeof hdr);
    float *w = (float *)(void *)(m + 28);
    for (size_t i = 0; i < floats; i++)
        w[i] = (float)i;
    char model[256], tok[256], out[256], err[512] = "";
    tmp_path(model, sizeof model, "tiny.bin");
    tmp_path(tok, sizeof tok, "tiny_tok.bin");
    tmp_path(out, sizeof out, "tiny.gguf");
    spit(model, m, n);

    /* Tokenizer: <unk>, \n<s>\n, \n</s>\n, " a b". */
    uint8_t t[128];
    size_t tp = 0;
    int32_t maxlen = 6;
    memcpy(t, &maxlen, 4);
    tp = 4;
    const char *pieces[VOCAB] = {"<unk>", "\n<s>\n", "\n</s>\n", " a b"};
    for (int i = 0; i < VOCAB; i++) {
        float sc = -(float)i;
        int32_t len = (int32_t)strlen(pieces[i]);
        memcpy(t + tp, &sc, 4);
        memcpy(t + tp + 4, &len, 4);
        memcpy(t + tp + 8, pieces[i], (size_t)len);
        tp += 8 + (size_t)len;
    }
    spit(tok, t, tp);

    CHECK(model_convert_llama2c(model, tok, out, err, sizeof err) == 0, "%s", err);
    gguf_file *gf = NULL;
    CHECK(gguf_open(out, &gf, err, sizeof err) == 0, "%s", err);
    if (gf) {
        const float *wcls = w + floats - (size_t)VOCAB * DIM;
        check_tensor(gf, "output.weight", DIM, VOCAB, wcls);
        check_tensor(gf, "token_embd.weight", DIM, VOCAB, w);
        const float *rms_final = wcls - SEQ * head - DIM;
        check_tensor(gf, "output_norm.weight", DIM, 1, rms_final);
        CHECK_COND(gguf_n_tensors(gf) == 3 + 9 * LAYERS);
        CHECK_COND(get_u32(gf, "llama.attention.head_count_kv") == 1);
        gguf_str *toks = NULL;
        uint64_t nt = 0;
        CHECK_COND(gguf_get_arr_str(gf, "tokenizer.ggml.tokens", &toks, &nt) == 0 && nt == VOCAB);
        if (toks && nt == VOCAB)
            CHECK_COND(gguf_str_eq(toks[3], "\xe2\x96\x81"
                                            "a\xe2\x96\x81"
                                            "b"));
        free(toks);
        gguf_close(gf);
    }
    unlink(model);
    unlink(tok);
    unlink(out);
    free(m);
}

int main(void) {
    const char *shared = getenv("BRISK_SHARED_DIR");
    if (!shared)
        shared = "../shared";
    snprintf(g_dir, sizeof g_dir, "/tmp/test_llama2c_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_stories(shared);
    test_unshared_classifier();
    rmdir(g_dir);
    return BT_SUMMARY("test_llama2c");
}
