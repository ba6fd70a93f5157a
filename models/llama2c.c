/* llama2c.c - llama2.c checkpoint + tokenizer -> GGUF (contract in llama2c.h).
 *
 * The checkpoint is mapped read-only and its weights are handed to the GGUF
 * writer as borrowed pointers, so conversion streams the weights from the
 * mapping to the output without another copy in memory. */
#include "models/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/brisk_error.h"
#include "models/gguf_write.h"

/* Header sanity bounds: far above any llama2.c model (the largest published
 * one, Llama 2 70B, has dim 8192, hidden 28672, 80 layers, vocab 32000), but
 * small enough that the size arithmetic below stays well inside 64 bits. */
#define L2C_MAX_DIM (1 << 16)
#define L2C_MAX_HIDDEN (1 << 18)
#define L2C_MAX_LAYERS 1024
#define L2C_MAX_VOCAB (1 << 22)
#define L2C_MAX_SEQ (1 << 22)
/* SentencePiece pieces are short (16 bytes by default); 64 KiB bounds a
 * hostile max_token_length without refusing any real tokenizer. */
#define L2C_MAX_TOKEN_LEN 65536
/* The newer llama2.c export formats (version 1 and 2) start with this magic,
 * "ak42"; only the legacy headerless format is converted. */
#define L2C_EXPORT_MAGIC 0x616b3432u
#define L2C_HEADER_BYTES (7 * 4)

/* The llama2.c config, in file order. */
typedef struct l2c_config {
    int32_t dim;        /* transformer width */
    int32_t hidden_dim; /* FFN width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t vocab_size; /* negative: the classifier is not shared with the embedding */
    int32_t seq_len;
} l2c_config;

/* A read-only mapping of a whole file. */
typedef struct mapped {
    const uint8_t *p;
    size_t n;
} mapped;

static int map_file(const char *path, const char *what, mapped *m, char *err, size_t err_len) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "convert-llama2c: cannot open %s '%s': %s",
                             what, path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EIO,
                             "convert-llama2c: %s '%s' is not a regular file", what, path);
    }
    if (st.st_size == 0 || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "convert-llama2c: %s '%s' is %s", what,
                             path, st.st_size == 0 ? "empty" : "too large to map");
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return brisk_set_err(err, err_len, BRISK_EIO, "convert-llama2c: cannot map %s '%s': %s",
                             what, path, strerror(e));
    m->p = p;
    m->n = (size_t)st.st_size;
    return 0;
}

static void unmap_file(mapped *m) {
    if (m->p)
        munmap((void *)m->p, m->n);
    m->p = NULL;
}

static int check_range(const char *name, int32_t v, int32_t max, char *err, size_t err_len) {
    if (v < 1 || v > max)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: checkpoint header: %s %d is not in 1..%d", name, v,
                             max);
    return 0;
}

/* Validates the header and the file size it implies. */
static int check_config(const l2c_config *c, size_t file_size, char *err, size_t err_len) {
    int rc;
    if ((rc = check_range("dim", c->dim, L2C_MAX_DIM, err, err_len)) ||
        (rc = check_range("hidden_dim", c->hidden_dim, L2C_MAX_HIDDEN, err, err_len)) ||
        (rc = check_range("n_layers", c->n_layers, L2C_MAX_LAYERS, err, err_len)) ||
        (rc = check_range("n_heads", c->n_heads, c->dim, err, err_len)) ||
        (rc = check_range("n_kv_heads", c->n_kv_heads, c->n_heads, err, err_len)) ||
        (rc = check_range("seq_len", c->seq_len, L2C_MAX_SEQ, err, err_len)))
        return rc;
    if (c->vocab_size == 0 || c->vocab_size < -L2C_MAX_VOCAB || c->vocab_size > L2C_MAX_VOCAB)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: checkpoint header: vocab_size %d is not in "
                             "1..%d (or its negative)",
                             c->vocab_size, L2C_MAX_VOCAB);
    if (c->dim % c->n_heads != 0 || c->n_heads % c->n_kv_heads != 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: checkpoint header: dim %d, n_heads %d, n_kv_heads "
                             "%d do not divide evenly",
                             c->dim, c->n_heads, c->n_kv_heads);
    if ((c->dim / c->n_heads) % 2 != 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: checkpoint header: head size %d is odd (RoPE "
                             "rotates pairs)",
                             c->dim / c->n_heads);
    /* Count floats in 64 bits: with the bounds above the largest term is
     * 1024 layers * 3 * 2^18 * 2^16 < 2^63. */
    uint64_t dim = (uint64_t)c->dim, hidden = (uint64_t)c->hidden_dim;
    uint64_t layers = (uint64_t)c->n_layers, seq = (uint64_t)c->seq_len;
    uint64_t vocab = (uint64_t)(c->vocab_size < 0 ? -(int64_t)c->vocab_size : c->vocab_size);
    uint64_t kv_dim = dim / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads;
    uint64_t head_size = dim / (uint64_t)c->n_heads;
    uint64_t per_layer = dim + dim * dim + 2 * kv_dim * dim + dim * dim + dim + 3 * hidden * dim;
    uint64_t floats = vocab * dim + layers * per_layer + dim + seq * head_size;
    if (c->vocab_size < 0)
        floats += vocab * dim;
    uint64_t want = L2C_HEADER_BYTES + 4 * floats;
    if (want != (uint64_t)file_size)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: checkpoint is %zu bytes but its header (dim %d, "
                             "hidden %d, layers %d, heads %d/%d, vocab %d, seq %d) needs %llu",
                             file_size, c->dim, c->hidden_dim, c->n_layers, c->n_heads,
                             c->n_kv_heads, c->vocab_size, c->seq_len, (unsigned long long)want);
    return 0;
}

/* The vocabulary in GGUF form. Owns arena, pieces, lens, scores and types. */
typedef struct l2c_vocab {
    char *arena;         /* all converted pieces back to back */
    const char **pieces; /* into arena */
    uint64_t *lens;
    float *scores;
    int32_t *types;
    int32_t n;
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    free(v->arena);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v->types);
}

/* llama.cpp's token types. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

/* "<0xNN>": SentencePiece's byte-fallback pieces. */
static int is_byte_piece(const uint8_t *s, int32_t len) {
    return len == 6 && memcmp(s, "<0x", 3) == 0 && is_hex(s[3]) && is_hex(s[4]) && s[5] == '>';
}

static int read_vocab(const mapped *m, int32_t n_vocab, l2c_vocab *v, char *err, size_t err_len) {
    const uint8_t *p = m->p;
    size_t pos = 0;
    int32_t max_len;
    if (m->n < 4)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: tokenizer: %zu bytes is too short", m->n);
    memcpy(&max_len, p, 4);
    pos = 4;
    if (max_len < 1 || max_len > L2C_MAX_TOKEN_LEN)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: tokenizer: max_token_length %d is not in 1..%d",
                             max_len, L2C_MAX_TOKEN_LEN);
    /* Each space (1 byte) becomes U+2581 (3 bytes), so the converted pieces
     * take at most three times the file. */
    if (m->n > SIZE_MAX / 3)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "convert-llama2c: tokenizer too large");
    v->n = n_vocab;
    v->arena = malloc(m->n * 3);
    v->pieces = calloc((size_t)n_vocab, sizeof *v->pieces);
    v->lens = calloc((size_t)n_vocab, sizeof *v->lens);
    v->scores = calloc((size_t)n_vocab, sizeof *v->scores);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    if (!v->arena || !v->pieces || !v->lens || !v->scores || !v->types)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "convert-llama2c: out of memory");
    size_t out = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        int32_t len;
        if (m->n - pos < 8)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "convert-llama2c: tokenizer: truncated at token %d of %d", i,
                                 n_vocab);
        memcpy(&v->scores[i], p + pos, 4);
        memcpy(&len, p + pos + 4, 4);
        pos += 8;
        if (!isfinite(v->scores[i]))
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "convert-llama2c: tokenizer: token %d has a non-finite score", i);
        if (len < 1 || len > max_len)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "convert-llama2c: tokenizer: token %d length %d is not in 1..%d",
                                 i, len, max_len);
        if ((size_t)len > m->n - pos)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "convert-llama2c: tokenizer: token %d (%d bytes) runs past the "
                                 "end of the file",
                                 i, len);
        const uint8_t *s = p + pos;
        pos += (size_t)len;
        char *dst = v->arena + out;
        /* llama2.c's exporter writes BOS and EOS as "\n<s>\n" and "\n</s>\n"
         * for its own decoder's printing; GGUF vocabularies (and llama.cpp's
         * converter) name the specials plainly. */
        const char *special = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : NULL;
        if (special) {
            size_t sl = strlen(special);
            memcpy(dst, special, sl);
            out += sl;
            v->types[i] = i == 0 ? TT_UNKNOWN : TT_CONTROL;
        } else {
            v->types[i] = is_byte_piece(s, len) ? TT_BYTE : TT_NORMAL;
            for (int32_t j = 0; j < len; j++) {
                if (s[j] == ' ') {
                    memcpy(v->arena + out, "\xe2\x96\x81", 3); /* U+2581 LOWER ONE EIGHTH BLOCK */
                    out += 3;
                } else {
                    v->arena[out++] = (char)s[j];
                }
            }
        }
        v->pieces[i] = dst;
        v->lens[i] = (uint64_t)(v->arena + out - dst);
    }
    if (pos != m->n)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "convert-llama2c: tokenizer: %zu trailing bytes after %d tokens (the "
                             "checkpoint's vocab_size)",
                             m->n - pos, n_vocab);
    return 0;
}

/* general.name: the checkpoint's file name without directory or extension. */
static void model_name(const char *path, char *out, size_t out_len) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        n = (size_t)(dot - base);
    if (n >= out_len)
        n = out_len - 1;
    memcpy(out, base, n);
    out[n] = '\0';
    if (n == 0)
        snprintf(out, out_len, "llama2c");
}

static int set_metadata(gguf_writer *w, const l2c_config *c, const char *name, const l2c_vocab *v) {
    uint32_t head_size = (uint32_t)(c->dim / c->n_heads);
    int rc = 0;
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", "llama");
    rc = rc ? rc : gguf_writer_set_str(w, "general.name", name);
    rc = rc ? rc : gguf_writer_set_u32(w, "general.file_type", 0); /* 0 = all F32 */
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->seq_len);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    rc = rc ? rc : gguf_writer_set_u32(w, "llama.rope.dimension_count", head_size);
    /* llama2.c hard-codes both: theta 10000 in run.c's RoPE and eps 1e-5 in rmsnorm. */
    rc = rc ? rc : gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    rc = rc ? rc : gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rc = rc ? rc
            : gguf_writer_set_spm_vocab(w, v->pieces, v->lens, v->scores, v->types, (uint64_t)v->n);
    return rc;
}

/* Returns *p and moves it past n floats. check_config() has matched the file
 * size to the header, so every section lies inside the mapping. */
static const float *take(const float **p, int64_t n) {
    const float *start = *p;
    *p += n;
    return start;
}

/* Adds every weight as a tensor pointing into the mapped checkpoint. */
static int add_tensors(gguf_writer *w, const l2c_config *c, const float *base) {
    int64_t dim = c->dim, hidden = c->hidden_dim, layers = c->n_layers;
    int64_t vocab = c->vocab_size < 0 ? -(int64_t)c->vocab_size : c->vocab_size;
    int64_t kv_dim = dim / c->n_heads * c->n_kv_heads;
    int64_t head_size = dim / c->n_heads;
    /* The sections in file order; each one after the embedding holds all layers. */
    const float *p = base;
    const float *tok = take(&p, vocab * dim);
    const float *rms_att = take(&p, layers * dim);
    const float *wq = take(&p, layers * dim * dim);
    const float *wk = take(&p, layers * kv_dim * dim);
    const float *wv = take(&p, layers * kv_dim * dim);
    const float *wo = take(&p, layers * dim * dim);
    const float *rms_ffn = take(&p, layers * dim);
    const float *w1 = take(&p, layers * hidden * dim);
    const float *w2 = take(&p, layers * dim * hidden);
    const float *w3 = take(&p, layers * hidden * dim);
    const float *rms_final = take(&p, dim);
    /* freq_cis_real and freq_cis_imag: RoPE tables that brisk recomputes. */
    take(&p, (int64_t)c->seq_len * head_size);
    const float *wcls = p; /* only present (and only used) when vocab_size < 0 */

    int rc = 0;
    int64_t ne[2];
#define ADD(name, d0, d1, nd, ptr)                                                                 \
    do {                                                                                           \
        ne[0] = (d0);                                                                              \
        ne[1] = (d1);                                                                              \
        if (!rc)                                                                                   \
            rc = gguf_writer_add_tensor(w, (name), KERN_TYPE_F32, (nd), ne, (ptr));                \
    } while (0)
    ADD("token_embd.weight", dim, vocab, 2, tok);
    for (int64_t l = 0; l < layers; l++) {
        char n[64];
#define BLK(suffix, d0, d1, nd, ptr)                                                               \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%lld.%s", (long long)l, (suffix));                              \
        ADD(n, d0, d1, nd, ptr);                                                                   \
    } while (0)
        BLK("attn_norm.weight", dim, 1, 1, rms_att + l * dim);
        BLK("attn_q.weight", dim, dim, 2, wq + l * dim * dim);
        BLK("attn_k.weight", dim, kv_dim, 2, wk + l * kv_dim * dim);
        BLK("attn_v.weight", dim, kv_dim, 2, wv + l * kv_dim * dim);
        BLK("attn_output.weight", dim, dim, 2, wo + l * dim * dim);
        BLK("ffn_norm.weight", dim, 1, 1, rms_ffn + l * dim);
        BLK("ffn_gate.weight", dim, hidden, 2, w1 + l * hidden * dim);
        BLK("ffn_down.weight", hidden, dim, 2, w2 + l * dim * hidden);
        BLK("ffn_up.weight", dim, hidden, 2, w3 + l * hidden * dim);
#undef BLK
    }
    ADD("output_norm.weight", dim, 1, 1, rms_final);
    if (c->vocab_size < 0)
        ADD("output.weight", dim, vocab, 2, wcls);
#undef ADD
    return rc;
}

int model_convert_llama2c(const char *model_path, const char *tokenizer_path, const char *out_path,
                          char *err, size_t err_len) {
    mapped model = {0}, tok = {0};
    l2c_vocab vocab = {0};
    gguf_writer *w = NULL;
    l2c_config c;
    char name[128];
    int rc;

    if (!model_path || !tokenizer_path || !out_path)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "convert-llama2c: a path is NULL");
    if ((rc = map_file(model_path, "checkpoint", &model, err, err_len)))
        goto done;
    if (model.n < L2C_HEADER_BYTES) {
        rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                           "convert-llama2c: checkpoint is %zu bytes, shorter than its header",
                           model.n);
        goto done;
    }
    uint32_t magic;
    memcpy(&magic, model.p, 4);
    if (magic == L2C_EXPORT_MAGIC) {
        rc = brisk_set_err(err, err_len, BRISK_EUNSUPPORTED,
                           "convert-llama2c: this is a llama2.c v1/v2 export (magic 'ak42'); only "
                           "the legacy format is supported");
        goto done;
    }
    memcpy(&c, model.p, L2C_HEADER_BYTES);
    if ((rc = check_config(&c, model.n, err, err_len)))
        goto done;

    if ((rc = map_file(tokenizer_path, "tokenizer", &tok, err, err_len)))
        goto done;
    int32_t n_vocab = c.vocab_size < 0 ? -c.vocab_size : c.vocab_size;
    if (n_vocab < 3) {
        rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                           "convert-llama2c: vocab_size %d leaves no room for UNK, BOS and EOS",
                           n_vocab);
        goto done;
    }
    if ((rc = read_vocab(&tok, n_vocab, &vocab, err, err_len)))
        goto done;

    w = gguf_writer_create();
    if (!w) {
        rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "convert-llama2c: out of memory");
        goto done;
    }
    model_name(model_path, name, sizeof name);
    /* The weights start right after the 28-byte header, so they are 4-byte
     * aligned in the page-aligned mapping. */
    if ((rc = set_metadata(w, &c, name, &vocab)) ||
        (rc = add_tensors(w, &c, (const float *)(const void *)(model.p + L2C_HEADER_BYTES)))) {
        rc = brisk_set_err(err, err_len, rc, "convert-llama2c: building the GGUF failed: %s",
                           brisk_strerror(rc));
        goto done;
    }
    rc = gguf_writer_write(w, out_path, err, err_len);

done:
    gguf_writer_free(w);
    vocab_free(&vocab);
    unmap_file(&tok);
    unmap_file(&model);
    return rc;
}
