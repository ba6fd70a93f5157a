/* test_gguf.c - the GGUF reader and writer: round trips, hostile files and
 * the real files brisk loads.
 *
 * Every malformed input is opened from a malloc'ed buffer of exactly its own
 * size, so that under ASan any read past the end is caught, not just wrong
 * answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/gguf.h"
#include "models/gguf_write.h"

/* ---- a raw byte builder for files the writer refuses to make ---------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_put(buf *b, const void *v, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    if (n)
        memcpy(b->p + b->n, v, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) {
    b_put(b, &v, 4);
}
static void b_u64(buf *b, uint64_t v) {
    b_put(b, &v, 8);
}
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_kv_u32(buf *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, GGUF_TYPE_UINT32);
    b_u32(b, v);
}
static void b_tinfo(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                    uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, offset);
}
static void b_pad(buf *b, size_t align) {
    static const uint8_t z[256];
    while (b->n % align)
        b_put(b, z, 1);
}
static void b_zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        b_put(b, "\0", 1);
}

/* Opens a private exact-size copy of (p, n). Returns the code; *err gets the message. */
static int open_copy(const uint8_t *p, size_t n, gguf_file **gf, char *err, size_t err_len) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, p, n);
    err[0] = '\0';
    int rc = gguf_open_memory(copy, n, gf, err, err_len);
    if (rc == 0) {
        /* The caller closes the file; the copy must outlive it, so a
         * successful open here is reported and closed at once. */
        gguf_close(*gf);
        *gf = NULL;
    }
    free(copy);
    return rc;
}

/* Expects b to be refused with a one-line message containing want. */
static void expect_refused(const char *what, buf *b, const char *want) {
    char err[512];
    gguf_file *gf = (gguf_file *)1;
    int rc = open_copy(b->p, b->n, &gf, err, sizeof err);
    CHECK(rc < 0, "%s: expected an error, got %d", what, rc);
    CHECK(gf == NULL, "%s: *out not NULL on failure", what);
    CHECK(bt_one_line(err), "%s: message not one line: '%s'", what, err);
    CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want);
    /* TEST_VERBOSE=1 shows every refusal, to review the messages by eye. */
    if (getenv("TEST_VERBOSE"))
        printf("  %-26s -> %s\n", what, err);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- the valid sample file ------------------------------------------- */

#define N_TENSORS 6
static const char *const t_names[N_TENSORS] = {"a.f32",  "b.f16",  "c.q8_0",
                                               "d.q4_0", "e.q4_1", "f.bf16"};
static const kern_type t_types[N_TENSORS] = {KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_Q8_0,
                                             KERN_TYPE_Q4_0, KERN_TYPE_Q4_1, KERN_TYPE_BF16};
static const uint32_t t_ndims[N_TENSORS] = {2, 1, 2, 3, 1, 4};
static const int64_t t_ne[N_TENSORS][4] = {{8, 3, 1, 1},  {16, 1, 1, 1}, {64, 2, 1, 1},
                                           {32, 2, 2, 1}, {32, 1, 1, 1}, {4, 1, 1, 2}};
static const size_t t_bytes[N_TENSORS] = {8 * 3 * 4, 16 * 2, 2 * 2 * 34, 2 * 2 * 18, 20, 4 * 2 * 2};
static uint8_t t_data[N_TENSORS][512];

static const char *const arr_strs[] = {"a", "", "\xe2\x96\x81the", "x\0y"};
static const uint64_t arr_lens[] = {1, 0, 6, 3};
static const int32_t arr_i32[] = {1, -2, 3};
static const float arr_f32[] = {0.5f, -1.25f};
static const uint8_t arr_bool[] = {1, 0, 1};

/* [[1, 2], [3]] as the bytes of an array-of-arrays value. */
static void nested_value(buf *b) {
    b_u32(b, GGUF_TYPE_ARRAY);
    b_u64(b, 2);
    b_u32(b, GGUF_TYPE_INT32);
    b_u64(b, 2);
    b_u32(b, 1);
    b_u32(b, 2);
    b_u32(b, GGUF_TYPE_INT32);
    b_u64(b, 1);
    b_u32(b, 3);
}

/* [["p", "qq"]] */
static void nested_str_value(buf *b) {
    b_u32(b, GGUF_TYPE_ARRAY);
    b_u64(b, 1);
    b_u32(b, GGUF_TYPE_STRING);
    b_u64(b, 2);
    b_str(b, "p");
    b_str(b, "qq");
}

static gguf_writer *make_sample(uint32_t alignment) {
    gguf_writer *w = gguf_writer_create();
    uint8_t u8 = 200;
    int8_t i8 = -5;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40);
    double f64 = 2.25;
    buf nested = {0}, nested_str = {0};
    nested_value(&nested);
    nested_str_value(&nested_str);
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", "llama");
    if (alignment)
        rc |= gguf_writer_set_u32(w, "general.alignment", alignment);
    rc |= gguf_writer_set_raw(w, "t.u8", GGUF_TYPE_UINT8, &u8, 1);
    rc |= gguf_writer_set_raw(w, "t.i8", GGUF_TYPE_INT8, &i8, 1);
    rc |= gguf_writer_set_raw(w, "t.u16", GGUF_TYPE_UINT16, &u16, 2);
    rc |= gguf_writer_set_raw(w, "t.i16", GGUF_TYPE_INT16, &i16, 2);
    rc |= gguf_writer_set_u32(w, "t.u32", 4000000000u);
    rc |= gguf_writer_set_i32(w, "t.i32", -2000000000);
    rc |= gguf_writer_set_i32(w, "t.flag_i32", 1);
    rc |= gguf_writer_set_f32(w, "t.f32", 1.5f);
    rc |= gguf_writer_set_bool(w, "t.bool", 1);
    rc |= gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo\nworld");
    rc |= gguf_writer_set_raw(w, "t.u64", GGUF_TYPE_UINT64, &u64, 8);
    rc |= gguf_writer_set_raw(w, "t.i64", GGUF_TYPE_INT64, &i64, 8);
    rc |= gguf_writer_set_raw(w, "t.f64", GGUF_TYPE_FLOAT64, &f64, 8);
    rc |= gguf_writer_set_arr(w, "t.arr_i32", GGUF_TYPE_INT32, arr_i32, 3);
    rc |= gguf_writer_set_arr(w, "t.arr_f32", GGUF_TYPE_FLOAT32, arr_f32, 2);
    rc |= gguf_writer_set_arr(w, "t.arr_bool", GGUF_TYPE_BOOL, arr_bool, 3);
    rc |= gguf_writer_set_arr(w, "t.arr_empty", GGUF_TYPE_UINT64, NULL, 0);
    rc |= gguf_writer_set_arr_str(w, "t.arr_str", arr_strs, arr_lens, 4);
    rc |= gguf_writer_set_raw(w, "t.nested", GGUF_TYPE_ARRAY, nested.p, nested.n);
    rc |= gguf_writer_set_raw(w, "t.nested_str", GGUF_TYPE_ARRAY, nested_str.p, nested_str.n);
    for (int i = 0; i < N_TENSORS; i++) {
        for (size_t j = 0; j < sizeof t_data[i]; j++)
            t_data[i][j] = (uint8_t)(i * 31 + j * 7 + 1);
        rc |= gguf_writer_add_tensor(w, t_names[i], t_types[i], t_ndims[i], t_ne[i], t_data[i]);
    }
    free(nested.p);
    free(nested_str.p);
    CHECK_COND(rc == 0);
    return w;
}

/* Checks every key, value and tensor of the sample against what was written. */
static void check_sample(const gguf_file *gf, uint32_t alignment) {
    uint32_t u32;
    int64_t i64;
    float f32;
    int b;
    gguf_str s;
    gguf_type et;
    uint64_t n;
    const void *data;

    CHECK_COND(gguf_version(gf) == 3);
    CHECK_COND(gguf_alignment(gf) == (alignment ? alignment : 32));
    CHECK_COND(gguf_n_kv(gf) == 22 - (alignment ? 0 : 1));
    CHECK_COND(gguf_n_tensors(gf) == N_TENSORS);
    CHECK_COND(gguf_get_str(gf, "general.architecture", &s) == 0 && gguf_str_eq(s, "llama"));
    CHECK_COND(gguf_get_u32(gf, "t.u8", &u32) == 0 && u32 == 200);
    CHECK_COND(gguf_get_i64(gf, "t.i8", &i64) == 0 && i64 == -5);
    CHECK_COND(gguf_get_u32(gf, "t.i8", &u32) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_u32(gf, "t.u16", &u32) == 0 && u32 == 60000);
    CHECK_COND(gguf_get_i64(gf, "t.i16", &i64) == 0 && i64 == -30000);
    CHECK_COND(gguf_get_u32(gf, "t.u32", &u32) == 0 && u32 == 4000000000u);
    CHECK_COND(gguf_get_i64(gf, "t.u32", &i64) == 0 && i64 == 4000000000ll);
    CHECK_COND(gguf_get_i64(gf, "t.i32", &i64) == 0 && i64 == -2000000000);
    CHECK_COND(gguf_get_u32(gf, "t.i32", &u32) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_u32(gf, "t.u64", &u32) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_i64(gf, "t.u64", &i64) == 0 && i64 == (1ll << 40));
    CHECK_COND(gguf_get_i64(gf, "t.i64", &i64) == 0 && i64 == -(1ll << 40));
    CHECK_COND(gguf_get_f32(gf, "t.f32", &f32) == 0 && f32 == 1.5f);
    CHECK_COND(gguf_get_f32(gf, "t.f64", &f32) == 0 && f32 == 2.25f);
    CHECK_COND(gguf_get_f32(gf, "t.u32", &f32) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_bool(gf, "t.bool", &b) == 0 && b == 1);
    CHECK_COND(gguf_get_bool(gf, "t.flag_i32", &b) == 0 && b == 1);
    CHECK_COND(gguf_get_bool(gf, "t.u8", &b) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_str(gf, "t.str", &s) == 0 && s.len == 12 &&
               memcmp(s.data, "h\xc3\xa9llo\nworld", 12) == 0);
    CHECK_COND(gguf_get_str(gf, "t.u32", &s) == BRISK_EFORMAT);
    CHECK_COND(gguf_get_u32(gf, "no.such.key", &u32) == BRISK_ENOTFOUND);
    CHECK_COND(gguf_find_key(gf, "no.such.key") == -1);
    CHECK_COND(gguf_find_key(gf, "t.f32") >= 0);
    CHECK_COND(gguf_kv_type(gf, gguf_find_key(gf, "t.f64")) == GGUF_TYPE_FLOAT64);
    CHECK_COND(gguf_str_eq(gguf_key_at(gf, gguf_find_key(gf, "t.u16")), "t.u16"));
    CHECK_COND(gguf_key_at(gf, -1).len == 0 && gguf_key_at(gf, 1000).len == 0);

    CHECK_COND(gguf_get_arr(gf, "t.arr_i32", &et, &n, &data) == 0 && et == GGUF_TYPE_INT32 &&
               n == 3 && memcmp(data, arr_i32, sizeof arr_i32) == 0);
    CHECK_COND(gguf_get_arr(gf, "t.arr_f32", &et, &n, &data) == 0 && et == GGUF_TYPE_FLOAT32 &&
               n == 2 && memcmp(data, arr_f32, sizeof arr_f32) == 0);
    CHECK_COND(gguf_get_arr(gf, "t.arr_bool", &et, &n, &data) == 0 && et == GGUF_TYPE_BOOL &&
               n == 3 && memcmp(data, arr_bool, 3) == 0);
    CHECK_COND(gguf_get_arr(gf, "t.arr_empty", &et, &n, &data) == 0 && et == GGUF_TYPE_UINT64 &&
               n == 0);
    CHECK_COND(gguf_get_arr(gf, "t.u32", &et, &n, &data) == BRISK_EFORMAT);

    gguf_str *strs = NULL;
    CHECK_COND(gguf_get_arr_str(gf, "t.arr_str", &strs, &n) == 0 && n == 4);
    if (strs && n == 4)
        for (int i = 0; i < 4; i++)
            CHECK_COND(strs[i].len == arr_lens[i] &&
                       memcmp(strs[i].data, arr_strs[i], arr_lens[i]) == 0);
    free(strs);
    CHECK_COND(gguf_get_arr_str(gf, "t.arr_i32", &strs, &n) == BRISK_EFORMAT);

    buf nested = {0};
    nested_value(&nested);
    CHECK_COND(gguf_get_arr(gf, "t.nested", &et, &n, &data) == 0 && et == GGUF_TYPE_ARRAY &&
               n == 2 && memcmp(data, nested.p + 12, nested.n - 12) == 0);
    free(nested.p);
    memset(&nested, 0, sizeof nested);
    nested_str_value(&nested);
    CHECK_COND(gguf_get_arr(gf, "t.nested_str", &et, &n, &data) == 0 && et == GGUF_TYPE_ARRAY &&
               n == 1 && memcmp(data, nested.p + 12, nested.n - 12) == 0);
    free(nested.p);

    for (int i = 0; i < N_TENSORS; i++) {
        const gguf_tensor *t = gguf_find_tensor(gf, t_names[i]);
        CHECK(t != NULL, "%s", t_names[i]);
        if (!t)
            continue;
        CHECK_COND(t == gguf_tensor_at(gf, i));
        CHECK_COND(t->type == t_types[i] && t->n_dims == t_ndims[i]);
        CHECK_COND(memcmp(t->ne, t_ne[i], sizeof t->ne) == 0);
        CHECK_COND(t->nbytes == t_bytes[i]);
        CHECK_COND(t->offset % gguf_alignment(gf) == 0);
        CHECK_COND(memcmp(t->data, t_data[i], t->nbytes) == 0);
    }
    CHECK_COND(gguf_find_tensor(gf, "nope") == NULL);
    CHECK_COND(gguf_tensor_at(gf, N_TENSORS) == NULL && gguf_tensor_at(gf, -1) == NULL);
}

static void test_round_trip(void) {
    for (int pass = 0; pass < 2; pass++) {
        uint32_t alignment = pass ? 64 : 0;
        gguf_writer *w = make_sample(alignment);
        uint8_t *bytes = NULL;
        size_t len = 0;
        char err[256] = "";
        gguf_file *gf = NULL;
        CHECK_COND(gguf_writer_to_buffer(w, &bytes, &len) == 0);
        CHECK(gguf_open_memory(bytes, len, &gf, err, sizeof err) == 0, "%s", err);
        if (gf) {
            check_sample(gf, alignment);
            CHECK_COND(gguf_data_offset(gf) % gguf_alignment(gf) == 0);
            gguf_close(gf);
        }

        /* The same through a file: gguf_open maps it, and the bytes on disk
         * are those of gguf_writer_to_buffer. */
        char path[] = "/tmp/test_gguf_XXXXXX";
        int fd = mkstemp(path);
        CHECK_COND(fd >= 0);
        close(fd);
        CHECK(gguf_writer_write(w, path, err, sizeof err) == 0, "%s", err);
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK_COND(access(tmp, F_OK) != 0);
        FILE *f = fopen(path, "rb");
        uint8_t *disk = malloc(len + 1);
        CHECK_COND(f && fread(disk, 1, len + 1, f) == len && memcmp(disk, bytes, len) == 0);
        if (f)
            fclose(f);
        free(disk);
        gf = NULL;
        CHECK(gguf_open(path, &gf, err, sizeof err) == 0, "%s", err);
        if (gf) {
            check_sample(gf, alignment);
            CHECK_COND(gguf_file_size(gf) == len);
            gguf_close(gf);
        }
        unlink(path);
        free(bytes);
        gguf_writer_free(w);
    }
}

static void test_writer_refuses(void) {
    gguf_writer *w = gguf_writer_create();
    int64_t ne[4] = {33, 1, 1, 1};
    static const float f[64];
    CHECK_COND(gguf_writer_set_u32(w, "k", 1) == 0);
    CHECK_COND(gguf_writer_set_u32(w, "k", 2) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_set_str(w, "", "x") == BRISK_EINVAL);
    CHECK_COND(gguf_writer_set_u32(w, "general.alignment", 3) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_set_arr(w, "a", GGUF_TYPE_STRING, f, 1) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_add_tensor(w, "t", KERN_TYPE_Q8_0, 1, ne, f) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_add_tensor(w, "t", (kern_type)12, 1, ne, f) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_add_tensor(w, "t", KERN_TYPE_F32, 0, ne, f) == BRISK_EINVAL);
    CHECK_COND(gguf_writer_add_tensor(w, "t", KERN_TYPE_F32, 1, ne, f) == 0);
    CHECK_COND(gguf_writer_add_tensor(w, "t", KERN_TYPE_F32, 1, ne, f) == BRISK_EINVAL);
    char err[256] = "";
    CHECK_COND(gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof err) == BRISK_EIO);
    CHECK_COND(bt_one_line(err));
    gguf_writer_free(w);
}

/* ---- hostile inputs ---------------------------------------------------- */

/* Uses an opened file the way a loader would: every kv through its getter,
 * every tensor byte. Returns a sum so that the reads cannot be dropped. */
static unsigned touch_everything(const gguf_file *gf, const uint8_t *base, size_t len) {
    unsigned sum = 0;
    for (int64_t i = 0; i < gguf_n_kv(gf); i++) {
        gguf_str k = gguf_key_at(gf, i);
        char key[256];
        if (k.len >= sizeof key || memchr(k.data, '\0', k.len))
            continue;
        memcpy(key, k.data, k.len);
        key[k.len] = '\0';
        uint32_t u32;
        int64_t i64;
        float f32;
        int b;
        gguf_str s;
        gguf_type et;
        uint64_t n;
        const void *data;
        gguf_str *strs = NULL;
        sum += (unsigned)gguf_kv_type(gf, i);
        if (gguf_get_u32(gf, key, &u32) == 0)
            sum += u32;
        if (gguf_get_i64(gf, key, &i64) == 0)
            sum += (unsigned)i64;
        if (gguf_get_f32(gf, key, &f32) == 0)
            sum += (unsigned)(f32 != 0);
        if (gguf_get_bool(gf, key, &b) == 0)
            sum += (unsigned)b;
        if (gguf_get_str(gf, key, &s) == 0)
            for (uint64_t j = 0; j < s.len; j++)
                sum += (unsigned char)s.data[j];
        if (gguf_get_arr(gf, key, &et, &n, &data) == 0 && n > 0 && et != GGUF_TYPE_STRING &&
            et != GGUF_TYPE_ARRAY)
            sum += ((const uint8_t *)data)[0];
        if (gguf_get_arr_str(gf, key, &strs, &n) == 0) {
            for (uint64_t j = 0; j < n; j++) {
                CHECK_COND((const uint8_t *)strs[j].data >= base &&
                           (const uint8_t *)strs[j].data + strs[j].len <= base + len);
                for (uint64_t c = 0; c < strs[j].len; c++)
                    sum += (unsigned char)strs[j].data[c];
            }
            free(strs);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(gf, i);
        const uint8_t *d = t->data;
        CHECK_COND(d >= base && d + t->nbytes <= base + len);
        for (size_t j = 0; j < t->nbytes; j++)
            sum += d[j];
    }
    return sum;
}

static void test_truncation_and_flips(void) {
    gguf_writer *w = make_sample(0);
    uint8_t *full = NULL;
    size_t len = 0;
    char err[512];
    gguf_file *gf = NULL;
    CHECK_COND(gguf_writer_to_buffer(w, &full, &len) == 0);
    gguf_writer_free(w);
    CHECK_COND(gguf_open_memory(full, len, &gf, err, sizeof err) == 0);
    if (!gf)
        return;
    size_t data_off = gguf_data_offset(gf);
    size_t data_end = 0; /* end of the last tensor's bytes; after it only padding */
    for (int64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(gf, i);
        size_t end = (size_t)((const uint8_t *)t->data - full) + t->nbytes;
        if (end > data_end)
            data_end = end;
    }
    gguf_close(gf);

    /* Truncated at every byte: the header region and the data alike (the
     * file is small enough that "a sample of the data" can be all of it). */
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        int rc = open_copy(full, n, &gf, err, sizeof err);
        int ok = n >= data_end ? rc == 0 : (rc < 0 && bt_one_line(err));
        if (!ok && bad++ < 5)
            fprintf(stderr, "truncated at %zu (data %zu..%zu): rc %d '%s'\n", n, data_off, data_end,
                    rc, err);
    }
    CHECK(bad == 0, "%d truncations misjudged", bad);

    /* Every single-bit flip in the header region: any outcome but a crash,
     * and a file that opens must stay inside its buffer. */
    int opened = 0, refused = 0;
    bad = 0;
    for (size_t bit = 0; bit < data_off * 8; bit++) {
        uint8_t *copy = malloc(len);
        memcpy(copy, full, len);
        copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        err[0] = '\0';
        gf = NULL;
        int rc = gguf_open_memory(copy, len, &gf, err, sizeof err);
        if (rc == 0) {
            opened++;
            touch_everything(gf, copy, len);
            gguf_close(gf);
        } else {
            refused++;
            if (!bt_one_line(err) && bad++ < 5)
                fprintf(stderr, "bit %zu: bad message '%s'\n", bit, err);
        }
        free(copy);
    }
    CHECK(bad == 0, "%d bit flips gave a bad message", bad);

    /* Random multi-byte damage (fixed seed, so failures reproduce): a few
     * header bytes set to random values, which reaches length and count
     * fields that single-bit flips leave almost valid. */
    uint32_t seed = 20240601u;
    bad = 0;
    for (int iter = 0; iter < 4000; iter++) {
        uint8_t *copy = malloc(len);
        memcpy(copy, full, len);
        int n_bytes = 1 + iter % 4;
        for (int k = 0; k < n_bytes; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % data_off;
            seed = seed * 1664525u + 1013904223u;
            copy[at] = (uint8_t)(seed >> 24);
        }
        err[0] = '\0';
        gf = NULL;
        if (gguf_open_memory(copy, len, &gf, err, sizeof err) == 0) {
            touch_everything(gf, copy, len);
            gguf_close(gf);
        } else if (!bt_one_line(err) && bad++ < 5) {
            fprintf(stderr, "mutation %d: bad message '%s'\n", iter, err);
        }
        free(copy);
    }
    CHECK(bad == 0, "%d mutations gave a bad message", bad);
    printf("test_gguf: %zu-byte sample, header %zu bytes: %d flips opened, %d refused\n", len,
           data_off, opened, refused);
    free(full);
}

/* A minimal valid file with one F32 tensor of `ne0` values, as a base for
 * the tensor cases. */
static void one_tensor(buf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    b_header(b, 3, 1, 0);
    b_tinfo(b, "w", n_dims, ne, type, offset);
    b_pad(b, 32);
    b_zeros(b, data_bytes);
}

static void test_hostile(void) {
    buf b = {0};
    const uint64_t ne4[1] = {4};

    /* The cases below are each a minimal file, valid but for one defect; the
     * first confirms the base shapes are valid. */
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, 0, 16);
    {
        char err[256];
        gguf_file *gf;
        CHECK(open_copy(b.p, b.n, &gf, err, sizeof err) == 0, "%s", err);
        /* Version 2 has the same layout as 3 and is read alike. */
        b.p[4] = 2;
        CHECK(open_copy(b.p, b.n, &gf, err, sizeof err) == 0, "v2: %s", err);
        free(b.p);
        memset(&b, 0, sizeof b);
    }

    b_put(&b, "GGUX", 4);
    b_u32(&b, 3);
    b_u64(&b, 0);
    b_u64(&b, 0);
    expect_refused("bad magic", &b, "magic");
    b_header(&b, 1, 0, 0);
    expect_refused("version 1", &b, "version 1");
    b_header(&b, 4, 0, 0);
    expect_refused("version 4", &b, "version 4");
    b_header(&b, 0x03000000u, 0, 0);
    expect_refused("big-endian", &b, "big-endian");

    b_header(&b, 3, 0, 1ull << 63);
    b_kv_u32(&b, "a", 1);
    expect_refused("huge kv count", &b, "kv count");
    b_header(&b, 3, 0, UINT64_MAX);
    expect_refused("max kv count", &b, "kv count");
    b_header(&b, 3, 1ull << 62, 0);
    b_zeros(&b, 64);
    expect_refused("huge tensor count", &b, "tensor count");
    b_header(&b, 3, 0, 2);
    b_kv_u32(&b, "a", 1);
    expect_refused("kv count one too many", &b, "kv count");

    b_header(&b, 3, 0, 1);
    b_u64(&b, UINT64_MAX);
    b_zeros(&b, 16);
    expect_refused("huge key length", &b, "length");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, 1ull << 63);
    b_zeros(&b, 16);
    expect_refused("huge string length", &b, "length");
    b_header(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, GGUF_TYPE_UINT8);
    b_zeros(&b, 8);
    expect_refused("empty key", &b, "empty key");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_UINT32);
    b_u64(&b, 1ull << 62);
    b_zeros(&b, 16);
    expect_refused("huge u32 array", &b, "array of");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_UINT64);
    b_u64(&b, UINT64_MAX); /* times 8 wraps to a small number */
    b_zeros(&b, 16);
    expect_refused("wrapping u64 array", &b, "array of");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, 1ull << 61);
    b_zeros(&b, 16);
    expect_refused("huge string array", &b, "strings");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, 2);
    b_str(&b, "ok");
    b_u64(&b, 1ull << 40);
    b_zeros(&b, 8);
    expect_refused("string in array too long", &b, "length");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u64(&b, 1ull << 60);
    b_zeros(&b, 24);
    expect_refused("huge array of arrays", &b, "arrays");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_zeros(&b, 8);
    expect_refused("bad value type", &b, "value type 13");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 0x80000000u);
    b_zeros(&b, 8);
    expect_refused("bad value type high", &b, "value type 2147483648");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, 13);
    b_u64(&b, 1);
    b_zeros(&b, 8);
    expect_refused("bad array element type", &b, "element type 13");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    for (int d = 0; d < 20; d++) {
        b_u32(&b, GGUF_TYPE_ARRAY);
        b_u64(&b, 1);
    }
    b_u32(&b, GGUF_TYPE_UINT8);
    b_u64(&b, 0);
    expect_refused("arrays nested too deep", &b, "nested");
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_BOOL);
    b_put(&b, "\x02", 1);
    expect_refused("bool 2", &b, "bool");
    b_header(&b, 3, 0, 2);
    b_kv_u32(&b, "dup.key", 1);
    b_kv_u32(&b, "dup.key", 2);
    expect_refused("duplicate key", &b, "duplicate key 'dup.key'");

    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 0);
    expect_refused("alignment 0", &b, "power of two");
    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 3);
    expect_refused("alignment 3", &b, "power of two");
    b_header(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, GGUF_TYPE_UINT64);
    b_u64(&b, 32);
    expect_refused("alignment u64", &b, "expected u32");
    b_header(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, GGUF_TYPE_STRING);
    b_str(&b, "32");
    expect_refused("alignment string", &b, "expected u32");

    const uint64_t ne5[5] = {4, 1, 1, 1, 1};
    one_tensor(&b, 0, ne4, KERN_TYPE_F32, 0, 16);
    expect_refused("n_dims 0", &b, "n_dims 0");
    one_tensor(&b, 5, ne5, KERN_TYPE_F32, 0, 16);
    expect_refused("n_dims 5", &b, "n_dims 5");
    const uint64_t ne_big[2] = {1ull << 32, 1ull << 32};
    one_tensor(&b, 2, ne_big, KERN_TYPE_F32, 0, 16);
    expect_refused("dims overflow", &b, "overflow");
    const uint64_t ne_neg[1] = {UINT64_MAX};
    one_tensor(&b, 1, ne_neg, KERN_TYPE_F32, 0, 16);
    expect_refused("dim 2^64-1", &b, "not in 1..");
    const uint64_t ne_zero[2] = {4, 0};
    one_tensor(&b, 2, ne_zero, KERN_TYPE_F32, 0, 16);
    expect_refused("dim 0", &b, "dim 1 is 0");
    one_tensor(&b, 1, ne4, 16, 0, 16);
    expect_refused("IQ2_XXS", &b, "type 16 (IQ2_XXS) is unsupported");
    /* The super-block types: rows of whole 256-value blocks, data whole. */
    one_tensor(&b, 1, ne4, KERN_TYPE_Q4_K, 0, 16);
    expect_refused("Q4_K ne0 4", &b, "not a multiple of the q4_K block size 256");
    const uint64_t ne256[1] = {256};
    one_tensor(&b, 1, ne256, KERN_TYPE_Q6_K, 0, 209);
    expect_refused("Q6_K data one byte short", &b, "past the end");
    const uint64_t ne48[1] = {48};
    one_tensor(&b, 1, ne48, KERN_TYPE_Q5_1, 0, 64);
    expect_refused("Q5_1 ne0 48", &b, "block size");
    one_tensor(&b, 1, ne4, 1000, 0, 16);
    expect_refused("type 1000", &b, "type 1000");
    const uint64_t ne33[1] = {33};
    one_tensor(&b, 1, ne33, KERN_TYPE_Q8_0, 0, 64);
    expect_refused("Q8_0 ne0 33", &b, "block size");
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, 4, 32);
    expect_refused("misaligned offset", &b, "offset 4 is not aligned to 32");
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, 1ull << 40, 16);
    expect_refused("offset past end", &b, "past the end");
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, UINT64_MAX - 31, 16);
    expect_refused("offset near 2^64", &b, "past the end");
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, 0, 15);
    expect_refused("data one byte short", &b, "past the end");
    const uint64_t ne_huge[2] = {1ull << 30, 1ull << 30};
    one_tensor(&b, 2, ne_huge, KERN_TYPE_F32, 0, 16);
    expect_refused("huge tensor", &b, "past the end");

    const uint64_t ne16[1] = {16};
    b_header(&b, 3, 2, 0);
    b_tinfo(&b, "x", 1, ne16, KERN_TYPE_F32, 0);
    b_tinfo(&b, "y", 1, ne16, KERN_TYPE_F32, 32);
    b_pad(&b, 32);
    b_zeros(&b, 96);
    expect_refused("overlap", &b, "overlaps");
    b_header(&b, 3, 2, 0);
    b_tinfo(&b, "x", 1, ne16, KERN_TYPE_F32, 64);
    b_tinfo(&b, "x", 1, ne16, KERN_TYPE_F32, 0);
    b_pad(&b, 32);
    b_zeros(&b, 128);
    expect_refused("duplicate tensor", &b, "duplicate tensor name 'x'");
    b_header(&b, 3, 1, 0);
    b_tinfo(&b, "", 1, ne16, KERN_TYPE_F32, 0);
    b_pad(&b, 32);
    b_zeros(&b, 64);
    expect_refused("empty tensor name", &b, "empty tensor name");
    /* A name with a newline must not break the one-line message. */
    one_tensor(&b, 1, ne4, KERN_TYPE_F32, 4, 32);
    memcpy(b.p + 24 + 8, "\n", 1);
    expect_refused("newline in name", &b, "tensor '?'");
    /* No data section at all after the tensor infos. */
    b_header(&b, 3, 1, 0);
    b_tinfo(&b, "w", 1, ne4, KERN_TYPE_F32, 0);
    expect_refused("no data section", &b, "past the end");

    char err[256] = "";
    gguf_file *gf = (gguf_file *)1;
    CHECK_COND(gguf_open("/nonexistent/x.gguf", &gf, err, sizeof err) == BRISK_EIO && gf == NULL &&
               bt_one_line(err));
    CHECK_COND(gguf_open("/tmp", &gf, err, sizeof err) < 0 && bt_one_line(err));
    char path[] = "/tmp/test_gguf_empty_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_COND(gguf_open(path, &gf, err, sizeof err) == BRISK_EFORMAT && bt_one_line(err));
    unlink(path);
}

/* ---- real files ---------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check_vocab(const char *dir, const char *file, const char *model, uint64_t n_tokens) {
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/vocab/%s", dir, file);
    if (access(path, R_OK) != 0) {
        printf("test_gguf: SKIP %s (absent)\n", path);
        return;
    }
    gguf_file *gf = NULL;
    double t0 = now_s();
    CHECK(gguf_open(path, &gf, err, sizeof err) == 0, "%s: %s", file, err);
    double dt = now_s() - t0;
    if (!gf)
        return;
    gguf_str s, *toks = NULL;
    uint64_t n = 0;
    gguf_type et;
    const void *data;
    CHECK_COND(gguf_get_str(gf, "tokenizer.ggml.model", &s) == 0 && gguf_str_eq(s, model));
    CHECK_COND(gguf_get_arr_str(gf, "tokenizer.ggml.tokens", &toks, &n) == 0 && n == n_tokens);
    CHECK_COND(gguf_get_arr(gf, "tokenizer.ggml.token_type", &et, &n, &data) == 0 &&
               et == GGUF_TYPE_INT32 && n == n_tokens);
    CHECK_COND(gguf_n_tensors(gf) == 0);
    printf("test_gguf: %s: %lld keys, %llu tokens, opened in %.2f ms\n", file,
           (long long)gguf_n_kv(gf), (unsigned long long)n_tokens, dt * 1e3);
    free(toks);
    gguf_close(gf);
}

static void check_smollm2(void) {
    const char *home = getenv("HOME");
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/.cache/brisk/models/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : "");
    if (!home || access(path, R_OK) != 0) {
        printf("test_gguf: SKIP SmolLM2 (no %s)\n", path);
        return;
    }
    gguf_file *gf = NULL;
    double t0 = now_s();
    CHECK(gguf_open(path, &gf, err, sizeof err) == 0, "%s", err);
    double dt = now_s() - t0;
    if (!gf)
        return;
    CHECK_COND(gguf_n_tensors(gf) == 272);
    const gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
    CHECK_COND(t && t->type == KERN_TYPE_Q8_0 && t->n_dims == 2 && t->ne[0] == 576 &&
               t->ne[1] == 49152);
    uint32_t blocks = 0;
    CHECK_COND(gguf_get_u32(gf, "llama.block_count", &blocks) == 0 && blocks == 30);
    int found = 0;
    for (int i = 0; i < 30; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", i);
        found += gguf_find_tensor(gf, name) != NULL;
    }
    CHECK_COND(found == 30);
    printf("test_gguf: SmolLM2: %lld tensors, %lld keys, opened in %.2f ms\n",
           (long long)gguf_n_tensors(gf), (long long)gguf_n_kv(gf), dt * 1e3);
    gguf_close(gf);
}

int main(void) {
    test_round_trip();
    test_writer_refuses();
    test_hostile();
    test_truncation_and_flips();
    const char *shared = getenv("BRISK_SHARED_DIR");
    if (!shared)
        shared = "../shared";
    check_vocab(shared, "ggml-vocab-llama-spm.gguf", "llama", 32000);
    check_vocab(shared, "ggml-vocab-gpt-2.gguf", "gpt2", 50257);
    check_smollm2();
    return BT_SUMMARY("test_gguf");
}
