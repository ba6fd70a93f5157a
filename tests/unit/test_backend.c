/* test_backend.c - the backend layer (models/backend.h) on the CPU: --device
 * parsing, AUTO's choice on a machine without a GPU, the CPU backend giving
 * exactly model_forward's logits and model_sampler_sample's tokens (the
 * engine runs through it), its KV storage, and a clean refusal of
 * --device cuda where there is no GPU or no CUDA in the build.
 *
 * These tests are of the layer below sched_setup (scheduler/sched_setup.h),
 * so they create the backend and the KV cache themselves, through the calls
 * sched_setup makes, and link no scheduler code; everything above the
 * backend sets up through sched_setup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_config.h"
#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_pool.h"
#include "kernels/cpu/kern_types.h"
#include "models/backend.h"
#include "models/llama2c.h"
#include "models/model.h"
#include "models/sampler.h"

/* A small f32 pool: 8 blocks of 16 positions, 2 slots of up to 4 blocks. */
static kv_cache_config small_kv(const model_config *c) {
    return (kv_cache_config){.n_layers = c->n_layers,
                             .kv_dim = c->n_kv_heads * c->head_dim,
                             .block_size = 16,
                             .n_blocks = 8,
                             .max_seqs = 2,
                             .max_seq_blocks = 4};
}

static void test_device_names(void) {
    model_device d = MODEL_DEVICE_AUTO;
    CHECK(model_device_parse("cpu", &d) == 0 && d == MODEL_DEVICE_CPU, "cpu");
    CHECK(model_device_parse("cuda", &d) == 0 && d == MODEL_DEVICE_CUDA, "cuda");
    CHECK(model_device_parse("auto", &d) == 0 && d == MODEL_DEVICE_AUTO, "auto");
    CHECK(model_device_parse("gpu", &d) == BRISK_EINVAL &&
              model_device_parse("", &d) == BRISK_EINVAL &&
              model_device_parse(NULL, &d) == BRISK_EINVAL,
          "unknown names refused");
    CHECK(!strcmp(model_device_name(MODEL_DEVICE_CUDA), "cuda") &&
              !strcmp(model_device_name(MODEL_DEVICE_CPU), "cpu"),
          "names");
}

/* The CPU backend against model_forward / model_sampler_sample directly:
 * a prompt of 24 tokens in one batch, then 16 decode steps, sampled with
 * temperature, top-p and penalties from the same seed on both sides. */
static void test_cpu_equivalence(const model *m, kern_pool *pool) {
    const model_config *c = model_get_config(m);
    char err[256] = "";
    model_backend_opts o = {.device = MODEL_DEVICE_CPU,
                            .max_batch_tokens = 32,
                            .max_ctx = 64,
                            .max_seqs = 2,
                            .block_size = 16,
                            .pool = pool};
    model_backend *be = NULL;
    CHECK(model_backend_create(m, &o, &be, err, sizeof err) == 0 && be, "cpu backend: %s", err);
    if (!be)
        return;
    CHECK(be->device == MODEL_DEVICE_CPU && !strcmp(be->ops->name, "cpu"), "cpu device");
    CHECK(be->weight_bytes == model_weight_bytes(m), "weight bytes");
    CHECK(be->ops->kv_budget(be) == 0, "the caller sizes a CPU pool");
    char desc[128];
    be->ops->describe(be, desc, sizeof desc);
    CHECK(strstr(desc, "cpu") != NULL, "describe: %s", desc);

    kv_cache_config kc = small_kv(c);
    kv_cache *kv = NULL, *kv_ref = kv_cache_create_paged(&kc);
    CHECK(model_backend_kv_create(be, &kc, &kv) == 0 && kv, "kv_create");
    kern_kv_view view;
    CHECK(kv && kv_cache_view(kv, 0, 0, &view) == 0 && view.k != NULL, "host K/V storage");
    model_state *st = model_state_create(m, 32, 64);
    CHECK(kv && kv_ref && st, "setup");
    if (!kv || !kv_ref || !st)
        goto out;
    kv_cache_seq_grow(kv, 0, 64);
    kv_cache_seq_grow(kv_ref, 0, 64);

    model_sampling sp = model_sampling_default();
    sp.temperature = 0.9f, sp.top_p = 0.9f, sp.repetition_penalty = 1.2f, sp.seed = 42;
    model_sampler *s1 = model_sampler_create(&sp, c->n_vocab),
                  *s2 = model_sampler_create(&sp, c->n_vocab);
    int32_t hist[64], pos[32], seq[32] = {0};
    for (int i = 0; i < 24; i++)
        hist[i] = (int32_t)((i * 37 + 1) % c->n_vocab), pos[i] = i;
    int n_hist = 24, same_logits = 1, same_ids = 1;
    model_batch b = {24, hist, pos, seq, NULL, NULL};
    float *ref = NULL;
    int n_ref = 0, n_out = 0;
    float *row_copy = malloc(sizeof(float) * (size_t)c->n_vocab);
    for (int step = 0; step < 17 && row_copy; step++) {
        int rc1 = model_forward(m, st, kv_ref, pool, &b, &ref, &n_ref);
        int rc2 = model_backend_forward(be, kv, &b, &n_out);
        CHECK(rc1 == 0 && rc2 == 0 && n_ref == 1 && n_out == 1, "forward step %d", step);
        if (rc1 || rc2)
            break;
        const float *row = NULL;
        CHECK(model_backend_logits(be, 0, &row) == 0, "logits row");
        CHECK(model_backend_logits(be, 1, &row) == BRISK_ERANGE, "row past n_out refused");
        model_backend_logits(be, 0, &row);
        if (memcmp(row, ref, sizeof(float) * (size_t)c->n_vocab) != 0)
            same_logits = 0;
        memcpy(row_copy, ref, sizeof(float) * (size_t)c->n_vocab);
        int32_t want = model_sampler_sample(s1, row_copy, hist, n_hist);
        model_sample_job job = {.row = 0, .sampler = s2, .hist = hist, .n_hist = n_hist};
        int32_t got = -1;
        CHECK(model_backend_sample(be, &job, 1, &got) == 0, "sample");
        if (got != want)
            same_ids = 0;
        hist[n_hist] = want;
        pos[0] = n_hist;
        n_hist++;
        b = (model_batch){1, &hist[n_hist - 1], pos, seq, NULL, NULL};
    }
    CHECK(same_logits, "backend logits == model_forward's, bit for bit");
    CHECK(same_ids, "backend sampling == model_sampler_sample, same seed");
    model_sample_job bad = {.row = 3, .sampler = s2, .hist = hist, .n_hist = n_hist};
    int32_t id;
    CHECK(model_backend_sample(be, &bad, 1, &id) == BRISK_ERANGE, "a job past n_out is refused");
    free(row_copy);
    model_sampler_free(s1);
    model_sampler_free(s2);
out:
    model_state_free(st);
    kv_cache_free(kv_ref);
    kv_cache_free(kv);
    model_backend_free(be);
}

static void test_device_choice(const model *m, kern_pool *pool) {
    char err[256] = "";
    model_backend_opts o = {.device = MODEL_DEVICE_AUTO,
                            .max_batch_tokens = 8,
                            .max_ctx = 32,
                            .max_seqs = 1,
                            .block_size = 16,
                            .pool = pool,
                            .gpu_memory_utilization = 0.9,
                            .cuda_graphs = 1};
    model_backend *be = NULL;
    int have_gpu = model_backend_cuda_available(NULL, NULL);
    CHECK(model_backend_create(m, &o, &be, err, sizeof err) == 0 && be, "auto: %s", err);
    if (be && !have_gpu)
        CHECK(be->device == MODEL_DEVICE_CPU, "auto without a GPU is cpu");
    model_backend_free(be);
    be = NULL;
    o.device = MODEL_DEVICE_CUDA;
    int rc = model_backend_create(m, &o, &be, err, sizeof err);
    if (!have_gpu) {
        CHECK(rc == BRISK_EUNSUPPORTED && be == NULL, "cuda without a GPU is refused (rc %d)", rc);
        CHECK(strstr(err, BRISK_HAVE_CUDA ? "no CUDA device" : "without CUDA") != NULL,
              "says why: %s", err);
    } else {
        printf("test_backend: a CUDA device is present: --device cuda %s\n",
               rc == 0 ? "opened" : err);
    }
    model_backend_free(be);
    o.max_batch_tokens = 0;
    CHECK(model_backend_create(m, &o, &be, err, sizeof err) == BRISK_EINVAL && !be, "bad options");
}

/* model_load_opts.cpu_layout: with --weights int8 the Q8_0 matrices whose row
 * count is a multiple of 8 are stored row-interleaved (X8) on an AVX2 CPU,
 * and the logits of a 24-token prompt and 8 greedy decode steps are the same
 * bits as with the row-major layout (stories260K mixes both: its 172-row
 * FFN matrices stay row-major). */
static void test_cpu_layout(const char *path, kern_pool *pool) {
    char err[256] = "";
    model *m[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        model_load_opts lo = {.weights = MODEL_WEIGHTS_INT8, .pool = pool, .cpu_layout = i};
        CHECK(model_load(path, &lo, &m[i], err, sizeof err) == 0, "load (cpu_layout %d): %s", i,
              err);
    }
    if (!m[0] || !m[1])
        goto out;
    const model_weights *w0 = model_get_weights(m[0]), *w1 = model_get_weights(m[1]);
    CHECK(!kern_type_is_x8(w0->layers[0].wq.type), "cpu_layout 0 keeps rows");
    if (kern_cpu_level() == KERN_LEVEL_AVX2) {
        CHECK(kern_type_is_x8(w1->layers[0].wq.type) && kern_type_is_x8(w1->output.type),
              "AVX2 + cpu_layout: wq and the output are X8 (%s, %s)",
              kern_type_name(w1->layers[0].wq.type), kern_type_name(w1->output.type));
        CHECK(!kern_type_is_x8(w1->layers[0].w_gate.type),
              "172 rows (no multiple of 8) stay row-major");
    } else {
        printf("test_backend: level %s: cpu_layout keeps rows (X8 is used on AVX2 only)\n",
               kern_level_name(kern_cpu_level()));
    }
    const model_config *c = model_get_config(m[0]);
    model_state *st[2] = {model_state_create(m[0], 32, 64), model_state_create(m[1], 32, 64)};
    kv_cache_config kc = small_kv(c);
    kv_cache *kv[2] = {kv_cache_create_paged(&kc), kv_cache_create_paged(&kc)};
    int same = 1, steps = 0;
    if (st[0] && st[1] && kv[0] && kv[1]) {
        int32_t hist[64], pos[32], seq[32] = {0};
        for (int i = 0; i < 24; i++)
            hist[i] = (int32_t)((i * 53 + 7) % c->n_vocab), pos[i] = i;
        int n_hist = 24;
        kv_cache_seq_grow(kv[0], 0, 64);
        kv_cache_seq_grow(kv[1], 0, 64);
        model_batch b = {24, hist, pos, seq, NULL, NULL};
        for (int step = 0; step < 9; step++, steps++) {
            float *lg[2] = {NULL, NULL};
            int n[2] = {0, 0};
            int rc0 = model_forward(m[0], st[0], kv[0], pool, &b, &lg[0], &n[0]);
            int rc1 = model_forward(m[1], st[1], kv[1], pool, &b, &lg[1], &n[1]);
            CHECK(rc0 == 0 && rc1 == 0 && n[0] == 1 && n[1] == 1, "forward step %d", step);
            if (rc0 || rc1)
                break;
            if (memcmp(lg[0], lg[1], sizeof(float) * (size_t)c->n_vocab) != 0)
                same = 0;
            int best = 0;
            for (int v = 1; v < c->n_vocab; v++)
                if (lg[0][v] > lg[0][best])
                    best = v;
            hist[n_hist] = best;
            pos[0] = n_hist++;
            b = (model_batch){1, &hist[n_hist - 1], pos, seq, NULL, NULL};
        }
    }
    CHECK(same && steps == 9, "X8 logits == row-major logits, bit for bit (%d steps)", steps);
    for (int i = 0; i < 2; i++) {
        model_state_free(st[i]);
        kv_cache_free(kv[i]);
    }
out:
    model_free(m[0]);
    model_free(m[1]);
}

int main(void) {
    test_device_names();
    char src[1024], tok[1024], dir[] = "/tmp/brisk-test-backend-XXXXXX", out[1100], err[256];
    snprintf(src, sizeof src, "%s/models/stories260K.bin", bt_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", bt_shared_dir());
    if (access(src, R_OK) != 0) {
        printf("test_backend: SKIP model tests: %s not found (set BRISK_SHARED_DIR)\n", src);
        return BT_SUMMARY("test_backend");
    }
    if (!mkdtemp(dir))
        return 1;
    snprintf(out, sizeof out, "%s/stories260K.gguf", dir);
    CHECK(model_convert_llama2c(src, tok, out, err, sizeof err) == 0, "convert: %s", err);
    kern_pool *pool = kern_pool_create(2);
    model_load_opts lo = {.weights = MODEL_WEIGHTS_F32, .pool = pool};
    model *m = NULL;
    CHECK(model_load(out, &lo, &m, err, sizeof err) == 0, "load: %s", err);
    if (m) {
        test_cpu_equivalence(m, pool);
        test_device_choice(m, pool);
    }
    model_free(m);
    test_cpu_layout(out, pool);
    kern_pool_free(pool);
    unlink(out);
    rmdir(dir);
    return BT_SUMMARY("test_backend");
}
