/* gguf_write.c - the GGUF v3 writer (contract in gguf_write.h).
 *
 * Every kv is stored already serialised (type field and value bytes, exactly
 * as they go into the file), so writing is a concatenation. Tensor data is
 * borrowed and streamed straight to the file, so converting a large model
 * does not need a second copy of its weights in memory. */
#include "models/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_write.c writes values in host order and needs a little-endian host"
#endif

#define GGUF_MAGIC_BYTES "GGUF"
#define GGUF_WRITE_VERSION 3u

typedef struct wkv {
    char *key;    /* owned, NUL-terminated */
    uint8_t *val; /* owned: u32 type followed by the value bytes */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name; /* owned */
    kern_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data; /* borrowed until gguf_writer_write/to_buffer returns */
    size_t nbytes;
    uint64_t offset; /* in the data section, set by layout() */
} wtensor;

struct gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t alignment;
};

gguf_writer *gguf_writer_create(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static int has_key(const gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return 1;
    return 0;
}

/* Adds a kv whose value is `type` followed by the n1 bytes of a and the n2
 * bytes of b (b lets array headers and bodies be joined without a copy). */
static int add_kv(gguf_writer *w, const char *key, uint32_t type, const void *a, size_t n1,
                  const void *b, size_t n2) {
    if (!w || !key || !key[0] || has_key(w, key))
        return BRISK_EINVAL;
    if (n2 > SIZE_MAX - 4 - n1)
        return BRISK_ENOMEM;
    if (brisk_grow_libc(&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof *w->kvs, 16, 0))
        return BRISK_ENOMEM;
    wkv kv = {0};
    kv.key = strdup(key);
    kv.val_len = 4 + n1 + n2;
    kv.val = malloc(kv.val_len);
    if (!kv.key || !kv.val) {
        free(kv.key);
        free(kv.val);
        return BRISK_ENOMEM;
    }
    memcpy(kv.val, &type, 4);
    if (n1)
        memcpy(kv.val + 4, a, n1);
    if (n2)
        memcpy(kv.val + 4 + n1, b, n2);
    w->kvs[w->n_kv++] = kv;
    return 0;
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    /* The alignment key decides the layout, so it must be one we can honour. */
    if (key && strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0)
            return BRISK_EINVAL;
        int rc = add_kv(w, key, GGUF_TYPE_UINT32, &v, 4, NULL, 0);
        if (rc == 0)
            w->alignment = v;
        return rc;
    }
    return add_kv(w, key, GGUF_TYPE_UINT32, &v, 4, NULL, 0);
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return add_kv(w, key, GGUF_TYPE_INT32, &v, 4, NULL, 0);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    return add_kv(w, key, GGUF_TYPE_FLOAT32, &v, 4, NULL, 0);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return add_kv(w, key, GGUF_TYPE_BOOL, &b, 1, NULL, 0);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v)
        return BRISK_EINVAL;
    uint64_t len = strlen(v);
    return add_kv(w, key, GGUF_TYPE_STRING, &len, 8, v, (size_t)len);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                        uint64_t n) {
    size_t es = gguf_type_size(elem_type);
    if (es == 0 || (n > 0 && !data))
        return BRISK_EINVAL;
    if (n > SIZE_MAX / es)
        return BRISK_ENOMEM;
    uint8_t head[12];
    uint32_t et = (uint32_t)elem_type;
    memcpy(head, &et, 4);
    memcpy(head + 4, &n, 8);
    return add_kv(w, key, GGUF_TYPE_ARRAY, head, sizeof head, data, (size_t)n * es);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t n) {
    if (n > 0 && (!strs || !lens))
        return BRISK_EINVAL;
    /* Serialise into one body: { u64 len, bytes } per string. */
    size_t body = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (lens[i] > 0 && !strs[i])
            return BRISK_EINVAL;
        if (lens[i] > SIZE_MAX - 8 - body)
            return BRISK_ENOMEM;
        body += 8 + (size_t)lens[i];
    }
    uint8_t *buf = malloc(body ? body : 1);
    if (!buf)
        return BRISK_ENOMEM;
    size_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(buf + pos, &lens[i], 8);
        if (lens[i])
            memcpy(buf + pos + 8, strs[i], (size_t)lens[i]);
        pos += 8 + (size_t)lens[i];
    }
    uint8_t head[12];
    uint32_t et = GGUF_TYPE_STRING;
    memcpy(head, &et, 4);
    memcpy(head + 4, &n, 8);
    int rc = add_kv(w, key, GGUF_TYPE_ARRAY, head, sizeof head, buf, body);
    free(buf);
    return rc;
}

int gguf_writer_set_spm_vocab(gguf_writer *w, const char *const *pieces, const uint64_t *lens,
                              const float *scores, const int32_t *types, uint64_t n) {
    int rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, lens, n);
    rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 1);
    return rc;
}

int gguf_writer_set_raw(gguf_writer *w, const char *key, uint32_t type, const void *val,
                        size_t len) {
    if (len > 0 && !val)
        return BRISK_EINVAL;
    return add_kv(w, key, type, val, len, NULL, 0);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, kern_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data) {
    if (!w || !name || !name[0] || !ne || n_dims < 1 || n_dims > GGUF_MAX_DIMS ||
        !kern_type_valid((uint32_t)type))
        return BRISK_EINVAL;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return BRISK_EINVAL;
    wtensor t = {0};
    t.type = type;
    t.n_dims = n_dims;
    int64_t rows = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1)
            return BRISK_EINVAL;
        if (d > 0) {
            if (t.ne[d] > INT64_MAX / rows)
                return BRISK_EINVAL;
            rows *= t.ne[d];
        }
    }
    if (t.ne[0] % kern_type_block_size(type) != 0)
        return BRISK_EINVAL;
    size_t row = kern_row_bytes(type, t.ne[0]);
    if ((uint64_t)rows > SIZE_MAX / row)
        return BRISK_EINVAL;
    t.nbytes = row * (size_t)rows;
    if (!data)
        return BRISK_EINVAL;
    t.data = data;
    if (brisk_grow_libc(&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof *w->tensors, 16, 0))
        return BRISK_ENOMEM;
    t.name = strdup(name);
    if (!t.name)
        return BRISK_ENOMEM;
    w->tensors[w->n_tensors++] = t;
    return 0;
}

/* ---- serialisation --------------------------------------------------- */

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* Computes tensor offsets; returns the total file size and the start of the
 * data section. Tensors are padded to the alignment one after another, the
 * last one included (as llama.cpp and gguf-py write them). */
static size_t layout(gguf_writer *w, size_t *data_off) {
    size_t n = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++)
        n += 8 + strlen(w->kvs[i].key) + w->kvs[i].val_len;
    for (size_t i = 0; i < w->n_tensors; i++)
        n += 8 + strlen(w->tensors[i].name) + 4 + 8 * (size_t)w->tensors[i].n_dims + 4 + 8;
    *data_off = align_up(n, w->alignment);
    size_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = off;
        off = align_up(off + w->tensors[i].nbytes, w->alignment);
    }
    return *data_off + off;
}

/* Where the bytes go: a preallocated buffer or a FILE. */
typedef struct sink {
    uint8_t *buf;
    FILE *f;
    size_t len;
    int failed;
} sink;

static void put(sink *s, const void *p, size_t n) {
    if (s->failed || n == 0)
        return;
    if (s->f) {
        if (fwrite(p, 1, n, s->f) != n)
            s->failed = 1;
    } else {
        memcpy(s->buf + s->len, p, n);
    }
    s->len += n;
}

static void put_zeros(sink *s, size_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        put(s, zeros, k);
        n -= k;
    }
}

static void put_str(sink *s, const char *str) {
    uint64_t len = strlen(str);
    put(s, &len, 8);
    put(s, str, (size_t)len);
}

static void emit(gguf_writer *w, sink *s, size_t data_off) {
    uint32_t version = GGUF_WRITE_VERSION;
    uint64_t n_tensors = w->n_tensors, n_kv = w->n_kv;
    put(s, GGUF_MAGIC_BYTES, 4);
    put(s, &version, 4);
    put(s, &n_tensors, 8);
    put(s, &n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(s, w->kvs[i].key);
        put(s, w->kvs[i].val, w->kvs[i].val_len);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint32_t type = (uint32_t)t->type;
        put_str(s, t->name);
        put(s, &t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put(s, &t->ne[d], 8);
        put(s, &type, 4);
        put(s, &t->offset, 8);
    }
    put_zeros(s, data_off - s->len);
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        put(s, t->data, t->nbytes);
        put_zeros(s, align_up(t->nbytes, w->alignment) - t->nbytes);
    }
}

int gguf_writer_to_buffer(gguf_writer *w, uint8_t **out, size_t *len) {
    size_t data_off;
    size_t total = layout(w, &data_off);
    sink s = {0};
    s.buf = malloc(total);
    if (!s.buf)
        return BRISK_ENOMEM;
    emit(w, &s, data_off);
    *out = s.buf;
    *len = total;
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t err_len) {
    size_t data_off;
    layout(w, &data_off);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "gguf: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    /* Written beside the target and renamed over it, so that a reader never
     * sees a half-written file under the final name. */
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int rc = brisk_set_err(err, err_len, BRISK_EIO, "gguf: cannot create '%s': %s", tmp,
                               strerror(errno));
        free(tmp);
        return rc;
    }
    sink s = {.f = f};
    emit(w, &s, data_off);
    int e = s.failed ? errno : 0;
    if (!s.failed && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
        s.failed = 1;
        e = errno;
    }
    if (fclose(f) != 0 && !s.failed) {
        s.failed = 1;
        e = errno;
    }
    if (!s.failed && rename(tmp, path) != 0) {
        s.failed = 1;
        e = errno;
    }
    int rc = 0;
    if (s.failed) {
        rc = brisk_set_err(err, err_len, BRISK_EIO, "gguf: cannot write '%s': %s", path,
                           strerror(e));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}
