/* tiny_model.h - a small llama model with random weights, written as a GGUF
 * file, for the tests that need head sizes stories260K lacks (its heads are
 * 8 wide; the quantized KV dtypes group 32 values of one head, kern_kv.h).
 *
 * dim = n_heads * head_dim, hidden 2 * dim, vocabulary 512 (<unk> <s> </s>,
 * the 256 byte tokens, fillers: every text encodes and every id decodes),
 * f32 weights of variance 1/n_in from a fixed seed, so a file is the same on
 * every run; window > 0 sets attention.sliding_window (every layer windowed,
 * as Mistral's). Header-only: each test that includes it gets its own copy. */
#ifndef TINY_MODEL_H
#define TINY_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gguf_write.h"

#define TINY_VOCAB 512

/* The weights, kept until the file is written (the writer borrows them). */
typedef struct tiny_store {
    float *bufs[256];
    int n;
    uint64_t x;
} tiny_store;

/* n floats uniform in [center - amp, center + amp] (xorshift64*). */
static float *tiny_new(tiny_store *s, size_t n, float center, float amp) {
    if (s->n == (int)(sizeof s->bufs / sizeof s->bufs[0]))
        return NULL;
    float *v = malloc(sizeof *v * n);
    for (size_t i = 0; v && i < n; i++) {
        s->x ^= s->x >> 12;
        s->x ^= s->x << 25;
        s->x ^= s->x >> 27;
        double u = (double)((s->x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
        v[i] = center + amp * (float)(2.0 * u - 1.0);
    }
    if (v)
        s->bufs[s->n++] = v;
    return v;
}

static int tiny_matrix(gguf_writer *w, tiny_store *s, const char *name, int n_in, int n_out) {
    float *v = tiny_new(s, (size_t)n_in * (size_t)n_out, 0.0f, sqrtf(3.0f / (float)n_in));
    int64_t ne[2] = {n_in, n_out};
    return v ? gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 2, ne, v) : -1;
}

static int tiny_vector(gguf_writer *w, tiny_store *s, const char *name, int n) {
    float *v = tiny_new(s, (size_t)n, 1.0f, 0.25f);
    int64_t ne[1] = {n};
    return v ? gguf_writer_add_tensor(w, name, KERN_TYPE_F32, 1, ne, v) : -1;
}

/* The vocabulary: <unk> <s> </s>, the 256 byte tokens, fillers. */
static int tiny_vocab(gguf_writer *w) {
    static char text[TINY_VOCAB][16];
    const char *pieces[TINY_VOCAB];
    uint64_t lens[TINY_VOCAB];
    float scores[TINY_VOCAB];
    int32_t types[TINY_VOCAB];
    for (int i = 0; i < TINY_VOCAB; i++) {
        if (i < 3)
            snprintf(text[i], sizeof text[i], "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(text[i], sizeof text[i], "<0x%02X>", i - 3);
        else
            snprintf(text[i], sizeof text[i], "\xe2\x96\x81t%d", i);
        pieces[i] = text[i];
        lens[i] = strlen(text[i]);
        scores[i] = -(float)i;
        /* SentencePiece types: 2 unknown, 3 control, 6 byte, 1 normal */
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    return gguf_writer_set_spm_vocab(w, pieces, lens, scores, types, TINY_VOCAB);
}

/* Writes the model to path; 0, or -1 with a reason in err. */
static inline int tiny_model_write(const char *path, int n_layers, int n_heads, int n_kv_heads,
                                   int head_dim, int window, char *err, size_t err_len) {
    int dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, hidden = 2 * dim;
    gguf_writer *w = gguf_writer_create();
    tiny_store s = {.x = 0x74696e79ull};
    int rc = w ? 0 : -1;
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", "llama");
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.context_length", 4096);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)dim);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.block_count", (uint32_t)n_layers);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)hidden);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)n_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)n_kv_heads);
    rc = rc ? rc : gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (window > 0)
        rc = rc ? rc : gguf_writer_set_u32(w, "llama.attention.sliding_window", (uint32_t)window);
    rc = rc ? rc : tiny_vocab(w);
    rc = rc ? rc : tiny_matrix(w, &s, "token_embd.weight", dim, TINY_VOCAB);
    rc = rc ? rc : tiny_vector(w, &s, "output_norm.weight", dim);
    rc = rc ? rc : tiny_matrix(w, &s, "output.weight", dim, TINY_VOCAB);
    char name[64];
    for (int l = 0; l < n_layers && !rc; l++) {
#define TINY_NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        rc = tiny_vector(w, &s, TINY_NAME("attn_norm.weight"), dim);
        rc = rc ? rc : tiny_vector(w, &s, TINY_NAME("ffn_norm.weight"), dim);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("attn_q.weight"), dim, dim);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("attn_k.weight"), dim, kv_dim);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("attn_v.weight"), dim, kv_dim);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("attn_output.weight"), dim, dim);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("ffn_gate.weight"), dim, hidden);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("ffn_up.weight"), dim, hidden);
        rc = rc ? rc : tiny_matrix(w, &s, TINY_NAME("ffn_down.weight"), hidden, dim);
#undef TINY_NAME
    }
    if (rc == 0 && gguf_writer_write(w, path, err, err_len) < 0)
        rc = -1;
    else if (rc != 0)
        snprintf(err, err_len, "tiny model: building the file failed (%d)", rc);
    gguf_writer_free(w);
    for (int i = 0; i < s.n; i++)
        free(s.bufs[i]);
    return rc ? -1 : 0;
}

#endif
