/* test_model_hostile.c - the whole model loader (GGUF reader, config,
 * tokenizer, tensor checks: model_load) on hostile variants of a real model,
 * stories260K converted to GGUF:
 *   - cut at every length from 0 to the end of its tensor table, and at a
 *     sample of lengths inside the tensor data;
 *   - seeded random single-bit flips (header region and whole file) and
 *     multi-byte mutations of the header region.
 * A cut file must be refused with a one-line message; a damaged one must be
 * refused so or load, and a model that loads must tokenize and detokenize
 * without trouble. Under ASan/UBSan any bad read fails the test.
 * A small mixture-of-experts file (qwen3moe, Q4_0 expert stacks) gets the
 * same: every cut of its header, flips and mutations of its header, and a
 * forward pass of every damaged file that still loads (a flipped
 * expert_used_count or shape must be refused or run, never crash);
 * test_model_moe names the refusals one by one.
 * (test_gguf.c covers the GGUF reader alone on synthetic files;
 * tests/integration/test_abuse_gguf.py runs `brisk generate` on a structured
 * corpus for the command line's contract and its memory bound.) */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/gguf.h"
#include "models/llama2c.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "moe_model.h"

/* Seeded so that a failure reproduces; the counts keep the test near a
 * second in Release. */
#define N_HEADER_FLIPS 1500
#define N_FILE_FLIPS 400
#define N_MUTATIONS 1500
#define N_DATA_CUTS 48

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rng_state = 20261121u;
static uint32_t rng(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
        return -1;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int put_byte(int fd, size_t at, uint8_t v) {
    return pwrite(fd, &v, 1, (off_t)at) == 1 ? 0 : -1;
}

/* A model that loaded: its vocabulary must still encode and decode. */
static void use_model(model *m) {
    const tok_vocab *v = model_get_vocab(m);
    static const char text[] = "Once upon a time, <s> there was a \xc3\xa9 \xf0\x9f\x98\x80!";
    int32_t ids[256];
    int n = tok_encode(v, text, sizeof text - 1, TOK_ADD_BOS | TOK_PARSE_SPECIAL, ids, 256);
    CHECK(n >= 0 && n <= 256, "encode of a loaded damaged model: %d", n);
    if (n > 0 && n <= 256) {
        char *s = tok_decode_all(v, ids, n, 0);
        CHECK(s != NULL, "decode");
        free(s);
    }
}

/* Loads path; a refusal must leave *out NULL and one line of message.
 * Returns 1 if it loaded. */
static int load_once(const char *path, const char *what, size_t where, int *bad) {
    char err[512] = "";
    model *m = (model *)1;
    model_load_opts o = {.weights = MODEL_WEIGHTS_AUTO};
    int rc = model_load(path, &o, &m, err, sizeof err);
    if (rc == 0 && m) {
        use_model(m);
        model_free(m);
        return 1;
    }
    if (rc >= 0 || m != NULL || !bt_one_line(err)) {
        if ((*bad)++ < 5)
            fprintf(stderr, "%s at %zu: rc %d, model %p, message '%s'\n", what, where, rc,
                    (void *)m, err);
    }
    return 0;
}

/* A mixture-of-experts model that loaded: three tokens through a forward. */
static void run_moe(model *m) {
    const model_config *c = model_get_config(m);
    kv_cache *kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, 1, 4);
    model_state *st = model_state_create(m, 3, 4);
    int32_t tok[3] = {1, 300, 7}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    model_batch b = {3, tok, pos, seq, NULL, NULL};
    float *lg;
    int n_out;
    CHECK(kv && st && model_forward(m, st, kv, NULL, &b, &lg, &n_out) == 0 && n_out == 1,
          "a loaded damaged MoE model runs");
    model_state_free(st);
    kv_cache_free(kv);
}

/* Loads len bytes of img (a damaged MoE image); 1 if it loaded (and ran). */
static int moe_once(const uint8_t *img, size_t len, const char *what, size_t where, int *bad) {
    char err[512] = "";
    model *m = (model *)1;
    model_load_opts o = {.weights = MODEL_WEIGHTS_AUTO, .cpu_layout = 1};
    int rc = model_load_memory(img, len, &o, &m, err, sizeof err);
    if (rc == 0 && m) {
        run_moe(m);
        model_free(m);
        return 1;
    }
    if ((rc >= 0 || m != NULL || !bt_one_line(err)) && (*bad)++ < 5)
        fprintf(stderr, "moe %s at %zu: rc %d, message '%s'\n", what, where, rc, err);
    return 0;
}

static void test_moe_damaged(void) {
    moe_spec sp = {"qwen3moe", 2, 2, 2, 32, 4, 2, 32, KERN_TYPE_Q4_0, -1, M_NONE};
    uint8_t *full = NULL, *img = NULL;
    size_t len = 0;
    CHECK(moe_image(&sp, &full, &len) == 0 && full, "the MoE image");
    img = full ? malloc(len) : NULL;
    if (!img) {
        free(full);
        return;
    }
    char err[256];
    gguf_file *gf = NULL;
    CHECK(gguf_open_memory(full, len, &gf, err, sizeof err) == 0, "%s", err);
    size_t data_off = gf ? gguf_data_offset(gf) : 0;
    gguf_close(gf);
    int bad = 0, loaded = 0, opened = 0;
    memcpy(img, full, len);
    CHECK(moe_once(img, len, "intact", len, &bad) == 1, "the intact MoE file must load");
    for (size_t n = data_off; n-- > 0;)
        loaded += moe_once(img, n, "header cut", n, &bad);
    CHECK(loaded == 0, "%d cut MoE files loaded", loaded);
    for (int i = 0; i < 600; i++) {
        size_t at[3];
        int n_bytes = 1 + i % 3;
        for (int k = 0; k < n_bytes; k++) {
            at[k] = rng() % data_off;
            img[at[k]] = i % 2 ? (uint8_t)rng() : (uint8_t)(img[at[k]] ^ (1u << (rng() % 8)));
        }
        opened += moe_once(img, len, "mutation", at[0], &bad);
        memcpy(img, full, len);
    }
    CHECK(bad == 0, "%d damaged MoE files misjudged", bad);
    printf("test_model_hostile: MoE model of %zu bytes: %zu cuts refused, 600 mutations: %d "
           "loaded and ran\n",
           len, data_off, opened);
    free(img);
    free(full);
}

int main(void) {
    char src[1024], tok[1024], dir[] = "/tmp/brisk-test-hostile-XXXXXX", good[1100], path[1100];
    snprintf(src, sizeof src, "%s/models/stories260K.bin", bt_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", bt_shared_dir());
    if (access(src, R_OK) != 0 || access(tok, R_OK) != 0) {
        printf("test_model_hostile: SKIP: %s not found (set BRISK_SHARED_DIR)\n", src);
        return 0;
    }
    if (!mkdtemp(dir))
        return 1;
    brisk_log_set_level(BRISK_LOG_ERROR); /* a load logs a line; 2,000 of them say nothing */
    test_moe_damaged();
    snprintf(good, sizeof good, "%s/stories260K.gguf", dir);
    snprintf(path, sizeof path, "%s/variant.gguf", dir);
    char err[512];
    CHECK(model_convert_llama2c(src, tok, good, err, sizeof err) == 0, "convert: %s", err);
    size_t len = 0;
    uint8_t *full = slurp(good, &len);
    CHECK(full != NULL && len > 1000000, "read back %zu bytes", len);
    if (!full)
        return BT_SUMMARY("test_model_hostile");

    /* Where the header and tensor table end, and the tensor bytes. */
    gguf_file *gf = NULL;
    CHECK(gguf_open_memory(full, len, &gf, err, sizeof err) == 0, "%s", err);
    if (!gf)
        return BT_SUMMARY("test_model_hostile");
    size_t data_off = gguf_data_offset(gf), data_end = 0;
    for (int64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const gguf_tensor *t = gguf_tensor_at(gf, i);
        size_t end = (size_t)((const uint8_t *)t->data - full) + t->nbytes;
        if (end > data_end)
            data_end = end;
    }
    gguf_close(gf);

    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0, "open %s", path);
    if (fd < 0)
        return BT_SUMMARY("test_model_hostile");
    int bad = 0, loaded = 0;
    double t0 = now_s();

    /* The intact file loads (the base every case below is measured against). */
    CHECK(write_all(fd, full, len) == 0, "write");
    CHECK(load_once(path, "intact", len, &bad) == 1, "the intact file must load");

    /* Cut inside the data: a sample of lengths, every one refused. Descending,
     * so that each is one ftruncate of the file before. */
    for (int k = N_DATA_CUTS; k >= 0; k--) {
        size_t n = data_off + (size_t)((double)(data_end - 1 - data_off) * k / N_DATA_CUTS);
        CHECK(ftruncate(fd, (off_t)n) == 0, "truncate");
        loaded += load_once(path, "data cut", n, &bad);
    }
    /* Cut at every length of the header and tensor table. */
    for (size_t n = data_off; n-- > 0;) {
        CHECK(ftruncate(fd, (off_t)n) == 0, "truncate");
        loaded += load_once(path, "header cut", n, &bad);
    }
    CHECK(loaded == 0, "%d cut files loaded", loaded);
    CHECK(bad == 0, "%d cut files misjudged", bad);
    double t_cuts = now_s() - t0;

    /* Single bit flips: the header region, then anywhere. */
    CHECK(write_all(fd, full, len) == 0, "write");
    int opened = 0, refused = 0;
    for (int i = 0; i < N_HEADER_FLIPS + N_FILE_FLIPS; i++) {
        size_t range = i < N_HEADER_FLIPS ? data_off : len;
        size_t at = rng() % range;
        uint8_t flipped = (uint8_t)(full[at] ^ (1u << (rng() % 8)));
        CHECK(put_byte(fd, at, flipped) == 0, "pwrite");
        if (load_once(path, "bit flip", at, &bad))
            opened++;
        else
            refused++;
        CHECK(put_byte(fd, at, full[at]) == 0, "pwrite");
    }
    /* A few header bytes set to random values: reaches lengths and counts
     * that single flips leave almost valid. */
    for (int i = 0; i < N_MUTATIONS; i++) {
        size_t at[4];
        int n_bytes = 1 + i % 4;
        for (int k = 0; k < n_bytes; k++) {
            at[k] = rng() % data_off;
            CHECK(put_byte(fd, at[k], (uint8_t)rng()) == 0, "pwrite");
        }
        if (load_once(path, "mutation", at[0], &bad))
            opened++;
        else
            refused++;
        for (int k = n_bytes; k-- > 0;)
            CHECK(put_byte(fd, at[k], full[at[k]]) == 0, "pwrite");
    }
    CHECK(bad == 0, "%d damaged files misjudged", bad);
    CHECK(load_once(path, "restored", len, &bad) == 1, "the restored file must load");
    printf("test_model_hostile: %zu-byte model, header %zu bytes: %zu cuts refused in %.2f s; "
           "%d flips/mutations: %d loaded, %d refused; %.2f s in all\n",
           len, data_off, data_off + N_DATA_CUTS + 1, t_cuts,
           N_HEADER_FLIPS + N_FILE_FLIPS + N_MUTATIONS, opened, refused, now_s() - t0);

    close(fd);
    unlink(path);
    unlink(good);
    rmdir(dir);
    free(full);
    return BT_SUMMARY("test_model_hostile");
}
