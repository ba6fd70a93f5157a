/* test_safetensors.c - the safetensors reader (models/safetensors.h): a
 * file of every float dtype read back, the header's hostile cases each
 * refused with a one-line reason naming what is wrong, every cut of a valid
 * file refused, seeded bit flips of the header refused or read inside the
 * buffer, and folders: a single file, a sharded set through its index, and
 * the index's hostile cases (paths out of the folder, a tensor missing from
 * its shard, a tensor in two shards, a missing shard). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/safetensors.h"

/* Builds 8-byte length + header + data into a malloc'ed buffer. */
static uint8_t *make_file(const char *header, const void *data, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *b = malloc(*len ? *len : 1);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (data_len)
        memcpy(b + 8 + h, data, data_len);
    return b;
}

static int write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(buf, 1, len, f);
    fclose(f);
    return w == len ? 0 : -1;
}

/* 4 f32 (1, -2, 0.5, 3), 2 f16 (1.5, -0.25), 2 bf16 (2, -8), an empty
 * tensor and a scalar f32 (7). */
static const char *k_good_header =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[16,20]},"
    "\"c\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[20,24]},"
    "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[24,24]},"
    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]}}    ";

static void good_data(uint8_t d[28]) {
    float a[4] = {1.0f, -2.0f, 0.5f, 3.0f}, s = 7.0f;
    uint16_t b[2] = {0x3e00, 0xb400}; /* f16 1.5, -0.25 */
    uint16_t c[2] = {0x4000, 0xc100}; /* bf16 2, -8 */
    memcpy(d, a, 16);
    memcpy(d + 16, b, 4);
    memcpy(d + 20, c, 4);
    memcpy(d + 24, &s, 4);
}

static void test_good(void) {
    uint8_t d[28];
    good_data(d);
    size_t len;
    uint8_t *buf = make_file(k_good_header, d, sizeof d, &len);
    safetensors_file *f = NULL;
    char err[256] = "";
    int rc = safetensors_open_memory(buf, len, &f, err, sizeof err);
    CHECK(rc == 0 && f, "open: %s", err);
    if (!f) {
        free(buf);
        return;
    }
    CHECK_COND(safetensors_n_tensors(f) == 5);
    CHECK_COND(safetensors_data_offset(f) == 8 + strlen(k_good_header));
    const char *fmt = safetensors_metadata(f, "format");
    CHECK_COND(fmt && !strcmp(fmt, "pt"));
    CHECK_COND(safetensors_metadata(f, "nope") == NULL);
    CHECK_COND(safetensors_find(f, "zzz") == NULL);
    const safetensors_tensor *a = safetensors_find(f, "a.weight");
    CHECK_COND(a && a->dtype == SAFETENSORS_F32 && a->n_dims == 2 && a->shape[0] == 2 &&
               a->shape[1] == 2 && a->n_elems == 4 && a->nbytes == 16);
    float v[4];
    CHECK_COND(a && safetensors_read_f32(a, 0, 4, v) == 0 && v[0] == 1.0f && v[1] == -2.0f &&
               v[2] == 0.5f && v[3] == 3.0f);
    CHECK_COND(a && safetensors_read_f32(a, 3, 1, v) == 0 && v[0] == 3.0f);
    CHECK_COND(a && safetensors_read_f32(a, 3, 2, v) == BRISK_ERANGE);
    CHECK_COND(a && safetensors_read_f32(a, -1, 1, v) == BRISK_ERANGE);
    const safetensors_tensor *b = safetensors_find(f, "b");
    CHECK_COND(b && safetensors_read_f32(b, 0, 2, v) == 0 && v[0] == 1.5f && v[1] == -0.25f);
    const safetensors_tensor *c = safetensors_find(f, "c");
    CHECK_COND(c && safetensors_read_f32(c, 0, 2, v) == 0 && v[0] == 2.0f && v[1] == -8.0f);
    const safetensors_tensor *e = safetensors_find(f, "empty");
    CHECK_COND(e && e->n_elems == 0 && e->nbytes == 0 && e->shape[1] == 5);
    const safetensors_tensor *s = safetensors_find(f, "s");
    CHECK_COND(s && s->n_dims == 0 && s->n_elems == 1 && safetensors_read_f32(s, 0, 1, v) == 0 &&
               v[0] == 7.0f);
    /* In offset order, each inside the buffer. */
    for (int64_t i = 0; i < safetensors_n_tensors(f); i++) {
        const safetensors_tensor *t = safetensors_tensor_at(f, i);
        CHECK_COND((const uint8_t *)t->data >= buf + safetensors_data_offset(f) &&
                   (const uint8_t *)t->data + t->nbytes <= buf + len);
        if (i)
            CHECK_COND(t->offset >= safetensors_tensor_at(f, i - 1)->offset);
    }
    CHECK_COND(safetensors_tensor_at(f, 5) == NULL && safetensors_tensor_at(f, -1) == NULL);
    safetensors_close(f);

    /* An integer dtype is read as a table entry but not as floats. */
    int32_t iv[2] = {1, 2};
    free(buf);
    buf =
        make_file("{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", iv, 8, &len);
    CHECK_COND(safetensors_open_memory(buf, len, &f, err, sizeof err) == 0);
    if (f) {
        CHECK_COND(safetensors_read_f32(safetensors_find(f, "i"), 0, 1, v) == BRISK_EUNSUPPORTED);
        safetensors_close(f);
    }
    free(buf);
}

/* A header that must be refused, and a word its message must hold. */
typedef struct hostile_case {
    const char *header;
    size_t data_len;
    const char *want;
} hostile_case;

#define T(name, rest) "\"" name "\":{" rest "}"
static const hostile_case k_hostile[] = {
    {"[]", 0, "start with '{'"},
    {"{", 0, "start with '{'"},
    {"{\"a\":", 0, "not valid JSON"},
    {"{} x", 0, "after the header"},
    {"{\"a\":1}", 0, "not an object"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1]") "}", 4, "lacks 'data_offsets'"},
    {"{" T("a", "\"shape\":[1],\"data_offsets\":[0,4]") "}", 4, "lacks 'dtype'"},
    {"{" T("a", "\"dtype\":\"F32\",\"data_offsets\":[0,4]") "}", 4, "lacks 'shape'"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1") "}", 4,
     "unknown member"},
    {"{" T("a", "\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4,
     "repeated"},
    {"{" T("a", "\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4, "unknown dtype"},
    {"{" T("a", "\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]") "}", 4, "not a string"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]") "}", 4, "not an array"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]") "}", 4,
     "dims"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]") "}", 4, "dim 0"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]") "}", 4, "dim 0"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]") "}", 4, "dim 0"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[9007199254740992],\"data_offsets\":[0,4]") "}", 4,
     "dim 0"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],"
                "\"data_offsets\":[0,4]") "}",
     4, "larger than the file"},
    {"{" T("a", "\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4,
     "larger than the file"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]") "}", 4, "outside"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]") "}", 4, "outside"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]") "}", 4, "[begin, end]"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]") "}", 4, "integers"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,2]") "}", 4, "bytes of data"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "," T(
         "b", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]") "}",
     8, "overlaps"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "," T(
         "b", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}",
     8, "overlaps"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]") "}", 8, "hole"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 8, "cover 4 of"},
    {"{" T("a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "," T(
         "a", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]") "}",
     8, "duplicate"},
    {"{" T("", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4, "tensor name"},
    {"{" T("a\\u0000b", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4,
     "without NUL"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice"},
    {"{\"\xff\":1}", 0, "UTF-8"},
};
#undef T

static void test_hostile_headers(void) {
    uint8_t zeros[16] = {0};
    for (size_t i = 0; i < sizeof k_hostile / sizeof *k_hostile; i++) {
        const hostile_case *c = &k_hostile[i];
        size_t len;
        uint8_t *buf = make_file(c->header, zeros, c->data_len, &len);
        safetensors_file *f = (safetensors_file *)1;
        char err[256] = "";
        int rc = safetensors_open_memory(buf, len, &f, err, sizeof err);
        CHECK(rc == BRISK_EFORMAT && f == NULL && bt_one_line(err) && strstr(err, c->want),
              "case %zu (%s): rc %d, err '%s', want '%s'", i, c->header, rc, err, c->want);
        free(buf);
    }
    /* The length field: short file, over the limit, past the end. */
    char err[256];
    safetensors_file *f;
    uint8_t small[7] = {0};
    CHECK_COND(safetensors_open_memory(small, 7, &f, err, sizeof err) == BRISK_EFORMAT &&
               bt_one_line(err) && strstr(err, "shorter"));
    uint8_t big[16] = {0x00, 0xe2, 0xf5, 0x05, 0x01, 0, 0, 0}; /* 4395000320 */
    CHECK_COND(safetensors_open_memory(big, 16, &f, err, sizeof err) == BRISK_EFORMAT &&
               strstr(err, "at most"));
    uint8_t past[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK_COND(safetensors_open_memory(past, 10, &f, err, sizeof err) == BRISK_EFORMAT &&
               strstr(err, "in a file of"));
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    CHECK_COND(safetensors_open_memory(huge, 16, &f, err, sizeof err) == BRISK_EFORMAT);
}

static uint32_t rng_state = 20261129u;
static uint32_t rng(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* Every cut is refused; bit flips are refused or give a table inside the
 * buffer whose entries agree with their dtype and shape. */
static void test_cuts_and_flips(void) {
    uint8_t d[28];
    good_data(d);
    size_t len;
    uint8_t *buf = make_file(k_good_header, d, sizeof d, &len);
    char err[256];
    int bad = 0;
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, buf, cut);
        safetensors_file *f = NULL;
        int rc = safetensors_open_memory(c, cut, &f, err, sizeof err);
        if (rc == 0 || !bt_one_line(err))
            bad++;
        safetensors_close(f);
        free(c);
    }
    CHECK(bad == 0, "%d cuts were not refused with one line", bad);
    int accepted = 0, wrong = 0;
    for (int k = 0; k < 3000; k++) {
        uint8_t *c = malloc(len);
        memcpy(c, buf, len);
        int n = 1 + (int)(rng() % 3);
        for (int j = 0; j < n; j++)
            c[rng() % (8 + strlen(k_good_header))] ^= (uint8_t)(1u << (rng() % 8));
        safetensors_file *f = NULL;
        int rc = safetensors_open_memory(c, len, &f, err, sizeof err);
        if (rc == 0) {
            accepted++;
            for (int64_t i = 0; i < safetensors_n_tensors(f); i++) {
                const safetensors_tensor *t = safetensors_tensor_at(f, i);
                if ((const uint8_t *)t->data < c ||
                    (const uint8_t *)t->data + t->nbytes > c + len ||
                    t->nbytes != (size_t)t->n_elems * safetensors_dtype_size(t->dtype) ||
                    safetensors_find(f, t->name) != t)
                    wrong++;
            }
        } else if (!bt_one_line(err)) {
            wrong++;
        }
        safetensors_close(f);
        free(c);
    }
    CHECK(wrong == 0, "%d flipped files broke a promise (%d accepted)", wrong, accepted);
    free(buf);
}

static char g_dir[256];

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static void put(const char *name, const char *header, const void *data, size_t n) {
    size_t len;
    uint8_t *b = make_file(header, data, n, &len);
    char p[512];
    path_in(p, sizeof p, name);
    CHECK(write_file(p, b, len) == 0, "write %s", p);
    free(b);
}

static void put_text(const char *name, const char *text) {
    char p[512];
    path_in(p, sizeof p, name);
    CHECK(write_file(p, text, strlen(text)) == 0, "write %s", p);
}

static void rm(const char *name) {
    char p[512];
    path_in(p, sizeof p, name);
    unlink(p);
}

/* Expects safetensors_set_open_dir to refuse with `want` in the message. */
static void expect_dir_refused(const char *want) {
    safetensors_set *s = (safetensors_set *)1;
    char err[512] = "";
    int rc = safetensors_set_open_dir(g_dir, &s, err, sizeof err);
    CHECK(rc < 0 && s == NULL && bt_one_line(err) && strstr(err, want), "rc %d '%s', want '%s'", rc,
          err, want);
}

static void test_folders(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/brisk_test_st_%d", (int)getpid());
    mkdir(g_dir, 0700);
    float x[2] = {1.0f, 2.0f}, y[3] = {3.0f, 4.0f, 5.0f};
    const char *hx = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const char *hy = "{\"y\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
    char err[512] = "";
    safetensors_set *s = NULL;

    expect_dir_refused("cannot open");

    /* A single model.safetensors. */
    put("model.safetensors", hx, x, 8);
    int rc = safetensors_set_open_dir(g_dir, &s, err, sizeof err);
    CHECK(rc == 0, "single: %s", err);
    if (s) {
        CHECK_COND(safetensors_set_n_files(s) == 1 && safetensors_set_n_tensors(s) == 1);
        CHECK_COND(safetensors_set_find(s, "x") && !safetensors_set_find(s, "y"));
        safetensors_set_free(s);
        s = NULL;
    }
    rm("model.safetensors");

    /* Two shards through the index. */
    put("model-00001-of-00002.safetensors", hx, x, 8);
    put("model-00002-of-00002.safetensors", hy, y, 12);
    put_text("model.safetensors.index.json", "{\"metadata\":{\"total_size\":20},\"weight_map\":{"
                                             "\"x\":\"model-00001-of-00002.safetensors\","
                                             "\"y\":\"model-00002-of-00002.safetensors\"}}");
    rc = safetensors_set_open_dir(g_dir, &s, err, sizeof err);
    CHECK(rc == 0, "sharded: %s", err);
    if (s) {
        CHECK_COND(safetensors_set_n_files(s) == 2 && safetensors_set_n_tensors(s) == 2);
        const safetensors_tensor *t = safetensors_set_find(s, "y");
        float v[3];
        CHECK_COND(t && safetensors_read_f32(t, 0, 3, v) == 0 && v[2] == 5.0f);
        CHECK_COND(safetensors_set_file(s, 2) == NULL && safetensors_set_file(s, 0));
        safetensors_set_free(s);
    }

    /* The index's hostile cases. */
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"../model-00001-of-00002.safetensors\"}}");
    expect_dir_refused("plain file name");
    put_text("model.safetensors.index.json", "{\"weight_map\":{\"x\":\"/etc/passwd\"}}");
    expect_dir_refused("plain file name");
    put_text("model.safetensors.index.json", "{\"weight_map\":{\"x\":7}}");
    expect_dir_refused("plain file name");
    put_text("model.safetensors.index.json", "{\"weight_map\":{}}");
    expect_dir_refused("weight_map");
    put_text("model.safetensors.index.json", "{\"weight_map\":");
    expect_dir_refused("not valid JSON");
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"y\":\"model-00001-of-00002.safetensors\"}}");
    expect_dir_refused("not in its shard");
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"model-00003-of-00002.safetensors\"}}");
    expect_dir_refused("cannot open");
    put("model-00002-of-00002.safetensors", hx, x, 8);
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
             "\"y\":\"model-00002-of-00002.safetensors\"}}");
    expect_dir_refused("not in its shard");
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
             "\"x \":\"model-00002-of-00002.safetensors\"}}");
    expect_dir_refused("not in its shard");
    put_text("model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
             "\"x\":\"model-00002-of-00002.safetensors\"}}");
    expect_dir_refused("in both");

    rm("model.safetensors.index.json");
    rm("model-00001-of-00002.safetensors");
    rm("model-00002-of-00002.safetensors");
    rmdir(g_dir);
}

int main(void) {
    test_good();
    test_hostile_headers();
    test_cuts_and_flips();
    test_folders();
    return BT_SUMMARY("test_safetensors");
}
