/* model.c - loads a GGUF model: validates the architecture metadata,
 * checks every tensor's shape against it, and prepares each weight in its
 * compute format (used from the mmap when the stored format is the compute
 * format, converted once into owned buffers otherwise). */
#include "models/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_cvt.h"
#include "kernels/cpu/kern_kquant.h"
#include "models/hf_folder.h"
#include "models/model_internal.h"

#define ERR(code, ...) brisk_set_err(err, err_len, code, __VA_ARGS__)

int model_weights_fmt_parse(const char *s, model_weights_fmt *out) {
    if (!strcmp(s, "auto"))
        *out = MODEL_WEIGHTS_AUTO;
    else if (!strcmp(s, "f32"))
        *out = MODEL_WEIGHTS_F32;
    else if (!strcmp(s, "f16"))
        *out = MODEL_WEIGHTS_F16;
    else if (!strcmp(s, "int8") || !strcmp(s, "q8_0"))
        *out = MODEL_WEIGHTS_INT8;
    else
        return BRISK_EINVAL;
    return 0;
}

const char *model_weights_fmt_name(model_weights_fmt f) {
    switch (f) {
    case MODEL_WEIGHTS_AUTO: return "auto";
    case MODEL_WEIGHTS_F32: return "f32";
    case MODEL_WEIGHTS_F16: return "f16";
    case MODEL_WEIGHTS_INT8: return "int8";
    }
    return "?";
}

/* Large owned buffers (weight matrices) are cut one after another from
 * 64 MiB chunks, 2 MiB-aligned and advised MADV_HUGEPAGE, so that with
 * transparent huge pages ("madvise" or "always") the weights a decode step
 * streams sit on 2 MiB pages: far fewer TLB misses and page walks on the
 * streams. Per-tensor allocations of 1-3 MiB got none. On the 2-core VM the
 * stories110M f16 tg went 115-126 -> 128-146 tok/s in paired runs. Untouched
 * chunk tails cost address space only. */
#define MODEL_ARENA_MIN ((size_t)256 << 10)
#define MODEL_ARENA_CHUNK ((size_t)64 << 20)
#define MODEL_HUGE_PAGE ((size_t)2 << 20)

static void *model_alloc_huge(size_t bytes) {
    size_t sz = (bytes + MODEL_HUGE_PAGE - 1) & ~(MODEL_HUGE_PAGE - 1);
    if (sz < bytes)
        return NULL; /* overflow */
    void *p = aligned_alloc(MODEL_HUGE_PAGE, sz);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, sz, MADV_HUGEPAGE); /* advice only: THP may be off */
#endif
    return p;
}

void *model_alloc_owned(model *m, size_t bytes) {
    if (brisk_grow_libc(&m->owned, &m->cap_owned, (size_t)m->n_owned + 1, sizeof *m->owned, 64, 0) <
        0)
        return NULL;
    /* 64-byte alignment: SIMD kernels load whole cache lines. */
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need < bytes)
        return NULL; /* overflow */
    if (need < MODEL_ARENA_MIN) {
        void *buf = aligned_alloc(64, need);
        if (buf)
            m->owned[m->n_owned++] = buf;
        return buf;
    }
#ifdef __SANITIZE_ADDRESS__
    const int own_chunk = 1; /* ASan: every buffer alone, so overruns are caught */
#else
    const int own_chunk = need > MODEL_ARENA_CHUNK / 2;
#endif
    if (own_chunk) {
        void *buf = model_alloc_huge(need);
        if (buf)
            m->owned[m->n_owned++] = buf;
        return buf;
    }
    if (!m->arena || m->arena_cap - m->arena_used < need) {
        uint8_t *chunk = model_alloc_huge(MODEL_ARENA_CHUNK);
        if (!chunk)
            return NULL;
        m->owned[m->n_owned++] = chunk;
        m->arena = chunk;
        m->arena_used = 0;
        m->arena_cap = MODEL_ARENA_CHUNK;
    }
    void *buf = m->arena + m->arena_used;
    m->arena_used += need;
    return buf;
}

static char *model_strdup_gguf(gguf_str s) {
    char *c = malloc(s.len + 1);
    if (!c)
        return NULL;
    memcpy(c, s.data, s.len);
    c[s.len] = '\0';
    return c;
}

/* ---- metadata --------------------------------------------------------- */

/* Reads "<arch>.<suffix>" as u32. required=0 leaves *out untouched if absent. */
static int model_meta_u32(const gguf_file *gf, const char *arch, const char *suffix, int required,
                          int *out, char *err, size_t err_len) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int rc = gguf_get_u32(gf, key, &v);
    if (rc == BRISK_ENOTFOUND && !required)
        return 0;
    if (rc == BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: missing metadata key '%s'", key);
    if (rc < 0)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", key);
    if (v == 0 || v > (1u << 24))
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' = %u is out of range", key, v);
    *out = (int)v;
    return 0;
}

static int model_meta_f32(const gguf_file *gf, const char *arch, const char *suffix, float *out,
                          char *err, size_t err_len) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    int rc = gguf_get_f32(gf, key, &v);
    if (rc == BRISK_ENOTFOUND)
        return 0;
    if (rc < 0)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", key);
    if (!isfinite(v) || v <= 0.0f)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' = %g is out of range", key, (double)v);
    *out = v;
    return 0;
}

/* The mixture-of-experts keys (model_config.n_expert): required by a
 * family whose MLPs are all experts, taken by one whose MLPs may be (a llama
 * file with expert_count is Mixtral), refused by a dense one. */
static int model_read_moe(const gguf_file *gf, const char *arch, const model_arch_desc *a,
                          model_config *c, char *err, size_t err_len) {
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    int rc = gguf_get_u32(gf, key, &v);
    if (rc < 0 && rc != BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", key);
    int has = rc == 0 && v > 0; /* llama.cpp writes expert_count 0 for dense files too */
    if (!has && a->moe == MODEL_MOE_REQUIRED)
        return ERR(BRISK_EFORMAT, "model: %s is a mixture-of-experts family: '%s' must be > 0",
                   arch, key);
    if (!has)
        return 0;
    if (a->moe == MODEL_MOE_NONE)
        return ERR(BRISK_EUNSUPPORTED,
                   "model: %s = %u: mixture-of-experts %s models are not supported (brisk runs "
                   "experts in qwen3moe, olmoe and llama/Mixtral files)",
                   key, v, arch);
    /* 2^16 experts is far beyond any published model (DeepSeek: 256) and
     * keeps n_expert * expert_hidden rows (each <= 2^24 by the key rule) in
     * what the buffers' int sizes hold once checked below. */
    if (v > (1u << 16))
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' = %u is out of range", key, v);
    c->n_expert = (int)v;
    if ((rc = model_meta_u32(gf, arch, "expert_used_count", 1, &c->n_expert_used, err, err_len)) <
        0)
        return rc;
    if (c->n_expert_used > c->n_expert)
        return ERR(BRISK_EFORMAT, "model: expert_used_count %d exceeds expert_count %d",
                   c->n_expert_used, c->n_expert);
    c->expert_hidden = c->hidden_dim;
    if ((rc = model_meta_u32(gf, arch, "expert_feed_forward_length", 0, &c->expert_hidden, err,
                             err_len)) < 0)
        return rc;
    if ((int64_t)c->n_expert * c->expert_hidden > INT32_MAX ||
        (int64_t)c->n_expert * c->dim > INT32_MAX)
        return ERR(BRISK_EFORMAT, "model: %d experts of %d x %d are out of range", c->n_expert,
                   c->expert_hidden, c->dim);
    /* Files of families that have shared experts say so; none of these do. */
    snprintf(key, sizeof key, "%s.expert_shared_count", arch);
    if (gguf_get_u32(gf, key, &v) == 0 && v > 0)
        return ERR(BRISK_EUNSUPPORTED, "model: %s = %u: shared experts are not supported", key, v);
    c->moe_norm_topk = a->moe_norm_topk;
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    int norm;
    rc = gguf_get_bool(gf, key, &norm);
    if (rc < 0 && rc != BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", key);
    if (rc == 0)
        c->moe_norm_topk = norm;
    return 0;
}

int model_read_config(const gguf_file *gf, model_config *c, char *err, size_t err_len) {
    gguf_str arch_s;
    if (gguf_get_str(gf, "general.architecture", &arch_s) < 0)
        return ERR(BRISK_EFORMAT, "model: missing or invalid 'general.architecture'");
    char arch[32];
    if (arch_s.len == 0 || arch_s.len >= sizeof arch)
        return ERR(BRISK_EUNSUPPORTED, "model: unsupported architecture (name of %llu bytes)",
                   (unsigned long long)arch_s.len);
    memcpy(arch, arch_s.data, arch_s.len);
    arch[arch_s.len] = '\0';
    const model_arch_desc *a = model_arch_find(arch, arch_s.len);
    if (!a) {
        for (char *p = arch; *p; p++)
            if (*p < 0x20 || *p > 0x7e)
                *p = '?';
        char list[160];
        model_arch_list(list, sizeof list);
        if (model_arch_is_encoder(arch))
            return ERR(BRISK_EUNSUPPORTED,
                       "model: '%s' is an encoder-only (embedding) architecture; brisk runs "
                       "decoder-only models (%s), whose /v1/embeddings it serves with "
                       "--embeddings",
                       arch, list);
        return ERR(BRISK_EUNSUPPORTED, "model: unsupported architecture '%s' (supported: %s)", arch,
                   list);
    }
    /* The row's features; the file's metadata below overrides its defaults. */
    c->arch = a;
    c->rope_mode = a->rope_mode;
    c->has_qkv_bias = a->qkv_bias;
    c->has_qk_norm = a->qk_norm;
    c->has_post_norms = a->post_norms;
    c->act = a->act;

    int rc;
    if ((rc = model_meta_u32(gf, arch, "block_count", 1, &c->n_layers, err, err_len)) < 0)
        return rc;
    if ((rc = model_meta_u32(gf, arch, "embedding_length", 1, &c->dim, err, err_len)) < 0)
        return rc;
    if ((rc = model_meta_u32(gf, arch, "feed_forward_length", 1, &c->hidden_dim, err, err_len)) < 0)
        return rc;
    if ((rc = model_meta_u32(gf, arch, "attention.head_count", 1, &c->n_heads, err, err_len)) < 0)
        return rc;
    c->n_kv_heads = c->n_heads;
    if ((rc = model_meta_u32(gf, arch, "attention.head_count_kv", 0, &c->n_kv_heads, err,
                             err_len)) < 0)
        return rc;
    c->n_ctx_train = 2048;
    if ((rc = model_meta_u32(gf, arch, "context_length", 0, &c->n_ctx_train, err, err_len)) < 0)
        return rc;
    /* The pooling an embedding model declares (llama.cpp's numbers): mean and
     * last are served; cls and rank belong to encoders and rerankers. */
    char pkey[128];
    snprintf(pkey, sizeof pkey, "%s.pooling_type", arch);
    uint32_t pool = 0;
    rc = gguf_get_u32(gf, pkey, &pool);
    if (rc < 0 && rc != BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", pkey);
    if (rc == 0 && pool != 0 && pool != 1 && pool != 3)
        return ERR(BRISK_EUNSUPPORTED,
                   "model: %s = %u (cls or rank pooling) is not supported: brisk pools by mean "
                   "or last token",
                   pkey, pool);
    c->pooling = rc == 0 ? (int)pool : 0;
    if (c->dim % c->n_heads != 0)
        return ERR(BRISK_EFORMAT, "model: embedding_length %d is not a multiple of head_count %d",
                   c->dim, c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    if ((rc = model_meta_u32(gf, arch, "attention.key_length", 0, &c->head_dim, err, err_len)) < 0)
        return rc;
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return ERR(BRISK_EFORMAT, "model: head_count %d is not a multiple of head_count_kv %d",
                   c->n_heads, c->n_kv_heads);
    c->n_rot = c->head_dim;
    if ((rc = model_meta_u32(gf, arch, "rope.dimension_count", 0, &c->n_rot, err, err_len)) < 0)
        return rc;
    if (c->n_rot > c->head_dim || c->n_rot % 2 != 0)
        return ERR(BRISK_EFORMAT, "model: rope.dimension_count %d does not fit head size %d",
                   c->n_rot, c->head_dim);
    /* Each key alone is at most 2^24; products of them size buffers (in int). */
    if ((int64_t)c->n_heads * c->head_dim > (1 << 24))
        return ERR(BRISK_EFORMAT, "model: head_count %d x key_length %d is out of range",
                   c->n_heads, c->head_dim);
    c->rope_base = 10000.0f;
    if ((rc = model_meta_f32(gf, arch, "rope.freq_base", &c->rope_base, err, err_len)) < 0)
        return rc;
    c->norm_eps = a->norm_eps;
    if ((rc = model_meta_f32(gf, arch, "attention.layer_norm_rms_epsilon", &c->norm_eps, err,
                             err_len)) < 0)
        return rc;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    /* A sliding window: Gemma's local layers; in a llama file (Mistral)
     * every layer's. */
    if ((rc = model_meta_u32(gf, arch, "attention.sliding_window", 0, &c->n_swa, err, err_len)) < 0)
        return rc;
    c->rope_base_swa = c->rope_base;
    c->rope_attn_factor = 1.0f;
    if ((rc = model_meta_u32(gf, arch, "rope.scaling.original_context_length", 0, &c->rope_orig_ctx,
                             err, err_len)) < 0 ||
        (rc = model_meta_f32(gf, arch, "rope.scaling.attn_factor", &c->rope_attn_factor, err,
                             err_len)) < 0)
        return rc;
    if (a->embd_scale_sqrt_dim)
        c->embd_scale = sqrtf((float)c->dim);
    if (a->swa_pattern > 0) {
        /* The family's local/global pattern and local RoPE base, where the
         * file is silent (their published defaults). */
        c->swa_pattern = a->swa_pattern;
        if (a->rope_base_swa > 0.0f)
            c->rope_base_swa = a->rope_base_swa;
        if ((rc = model_meta_u32(gf, arch, "attention.sliding_window_pattern", 0, &c->swa_pattern,
                                 err, err_len)) < 0 ||
            (rc = model_meta_f32(gf, arch, "rope.local.freq_base", &c->rope_base_swa, err,
                                 err_len)) < 0)
            return rc;
    }
    if (a->softcaps && ((rc = model_meta_f32(gf, arch, "attn_logit_softcapping", &c->attn_softcap,
                                             err, err_len)) < 0 ||
                        (rc = model_meta_f32(gf, arch, "final_logit_softcapping", &c->final_softcap,
                                             err, err_len)) < 0))
        return rc;
    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gguf_str st;
    rc = gguf_get_str(gf, key, &st);
    if (rc < 0 && rc != BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", key);
    if (rc == 0 && !gguf_str_eq(st, "none")) {
        if (!gguf_str_eq(st, "linear"))
            return ERR(BRISK_EUNSUPPORTED,
                       "model: rope scaling type '%.*s' is not supported "
                       "(supported: none, linear)",
                       (int)(st.len > 32 ? 32 : st.len), st.data);
        float factor = 1.0f;
        if ((rc = model_meta_f32(gf, arch, "rope.scaling.factor", &factor, err, err_len)) < 0)
            return rc;
        c->rope_freq_scale = 1.0f / factor;
    }
    /* Older files state linear scaling as rope.scale_linear. */
    float scale_linear = 0.0f;
    if ((rc = model_meta_f32(gf, arch, "rope.scale_linear", &scale_linear, err, err_len)) < 0)
        return rc;
    if (scale_linear > 0.0f)
        c->rope_freq_scale = 1.0f / scale_linear;
    return model_read_moe(gf, arch, a, c, err, err_len);
}

/* ---- tensors ------------------------------------------------------------ */

typedef struct convert_job {
    const gguf_tensor *t;
    const model_hf_weight *hf; /* t is a folder's matrix: rows through model_hf_src_row */
    int64_t *src_rows;         /* [n_rows] the stored row of each row, or NULL: the same */
    kern_type dst_type;
    void *dst;
    size_t dst_row_bytes, src_row_bytes;
    int n_rows, n_in;
    int rows_per_task;
    float *scratch; /* [n_threads][2 * n_in]: the f32 row, then an aligned copy of the source;
                       NULL for a batched job (kern_cvt_rows needs none) */
    int first_task; /* in a batch: the batch's task index of this job's task 0 */
} convert_job;

static void model_convert_task(void *ctx, int task, int thread) {
    convert_job *j = ctx;
    int r0 = task * j->rows_per_task;
    int r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    float *tmp = j->scratch + (size_t)thread * 2 * (size_t)j->n_in;
    /* The float types onto each other (BF16 -> F16, a copy, ...) in SIMD, bit
     * for bit as through f32 (kern_cvt.h), from any alignment, the task's
     * rows in one call. */
    if (kern_cvt_rows(j->t->type,
                      j->src_rows ? j->t->data
                                  : (const uint8_t *)j->t->data + (size_t)r0 * j->src_row_bytes,
                      j->src_row_bytes, j->src_rows ? j->src_rows + r0 : NULL, j->dst_type,
                      (uint8_t *)j->dst + (size_t)r0 * j->dst_row_bytes, j->dst_row_bytes, j->n_in,
                      r1 - r0) == 0 ||
        !j->scratch)
        return;
    for (int r = r0; r < r1; r++) {
        int64_t sr = j->src_rows ? j->src_rows[r] : r;
        const uint8_t *src = (const uint8_t *)j->t->data + (size_t)sr * j->src_row_bytes;
        uint8_t *dst = (uint8_t *)j->dst + (size_t)r * j->dst_row_bytes;
        /* Q4_0 -> Q8_0, Q4_1 -> Q8_0M and kern_kq_convert_row's pairs (Q4_K
         * -> Q4_1, ...) carry the codes over; anything else goes through f32. */
        if (kern_kq_convert_row(j->t->type, src, j->dst_type, dst, j->n_in) == 0)
            continue;
        if (j->hf) {
            /* A folder's row may start at any byte: the row converters read
             * whole values, so from an aligned copy (the float types' rows
             * are at most 4 * n_in bytes). */
            memcpy(tmp + j->n_in, src, j->src_row_bytes);
            src = (const uint8_t *)(tmp + j->n_in);
        }
        if (j->dst_type != kern_int8_type(j->t->type) ||
            kern_requantize_row_q8(j->t->type, src, dst, j->n_in) < 0) {
            kern_dequantize_row(j->t->type, src, tmp, j->n_in);
            kern_quantize_row(j->dst_type, tmp, dst, j->n_in);
        }
    }
}

/* A folder's matrices whose conversion is one of kern_cvt_rows' pairs are
 * not read again during the load (their target is a float type, which has
 * no X8 form to build), so they wait here and run at the end of
 * model_load_tensors as one pool run: one barrier for the model instead of
 * one per matrix, where a worker preempted by the machine's other jobs
 * stalls the loader. */
typedef struct model_convert_batch {
    convert_job *jobs;
    size_t n, cap;
} model_convert_batch;

/* Task `task` of the batch: the job whose range of tasks holds it. */
static void model_batch_task(void *ctx, int task, int thread) {
    const model_convert_batch *b = ctx;
    size_t lo = 0, hi = b->n; /* the last job with first_task <= task */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->jobs[mid].first_task <= task)
            lo = mid;
        else
            hi = mid;
    }
    model_convert_task(&b->jobs[lo], task - b->jobs[lo].first_task, thread);
}

/* Runs the batch's conversions (run != 0; else drops them: a failed load)
 * and frees its bookkeeping; the converted buffers are the model's. */
static void model_batch_finish(model *m, kern_pool *pool, model_convert_batch *b, int run) {
    int n_tasks = 0;
    for (size_t i = 0; i < b->n; i++) {
        b->jobs[i].first_task = n_tasks;
        n_tasks += (b->jobs[i].n_rows + b->jobs[i].rows_per_task - 1) / b->jobs[i].rows_per_task;
    }
    if (run && n_tasks > 0)
        kern_pool_run(pool, model_batch_task, b, n_tasks);
    for (size_t i = 0; i < b->n; i++) {
        if (run)
            model_hf_weight_release(b->jobs[i].hf);
        free(b->jobs[i].src_rows);
    }
    free(b->jobs);
    *b = (model_convert_batch){0};
    (void)m;
}

/* Converts tensor t (n_rows rows of n_in) to dst_type into an owned buffer;
 * a GGUF tensor already of dst_type is used where it lies. A folder's
 * matrix (hf_folder.h) is always read into an owned buffer: its bytes are
 * not aligned and its q/k rows may need reordering; a folder's stack of
 * experts is read part by part, each from where it lies. */
static int model_convert_into(model *m, kern_pool *pool, const gguf_tensor *t,
                              const model_hf_weight *hf, int n_rows, int n_in, kern_type dst_type,
                              void *dst);

static int model_convert(model *m, kern_pool *pool, const gguf_tensor *t, int n_rows, int n_in,
                         kern_type dst_type, const void **out) {
    const model_hf_weight *hf = model_hf_weights_of(m->hfw, t);
    if (t->type == dst_type && !hf) {
        *out = t->data;
        return 0;
    }
    size_t row_bytes = kern_row_bytes(dst_type, n_in);
    uint8_t *dst = model_alloc_owned(m, row_bytes * (size_t)n_rows);
    if (!dst)
        return BRISK_ENOMEM;
    if (hf && hf->n_parts > 0) {
        /* A folder's stack of experts: each part where it lies, into its rows. */
        int part_rows = n_rows / hf->n_parts;
        if ((int64_t)part_rows * hf->n_parts != n_rows || part_rows != hf->parts[0].t.ne[1])
            return BRISK_EINVAL; /* the caller checked the stack's shape */
        for (int p = 0; p < hf->n_parts; p++) {
            int rc = model_convert_into(m, pool, &hf->parts[p].t, &hf->parts[p], part_rows, n_in,
                                        dst_type, dst + (size_t)p * part_rows * row_bytes);
            if (rc < 0)
                return rc;
        }
    } else {
        int rc = model_convert_into(m, pool, t, hf, n_rows, n_in, dst_type, dst);
        if (rc < 0)
            return rc;
    }
    *out = dst;
    return 0;
}

/* Converts t (n_rows rows of n_in; hf: a folder's matrix or a part of one)
 * into dst, row_bytes(dst_type) a row; batched for later where it may be. */
static int model_convert_into(model *m, kern_pool *pool, const gguf_tensor *t,
                              const model_hf_weight *hf, int n_rows, int n_in, kern_type dst_type,
                              void *dst) {
    convert_job j = {0};
    j.t = t;
    j.hf = hf;
    j.dst_type = dst_type;
    j.n_rows = n_rows;
    j.n_in = n_in;
    j.src_row_bytes = kern_row_bytes(t->type, n_in);
    j.dst_row_bytes = kern_row_bytes(dst_type, n_in);
    j.dst = dst;
    /* kern_cvt_rows converts the pair (with 0 rows, the answer alone): a
     * memory-bound copy or widening, not the arithmetic of a quantization. */
    int plain = kern_cvt_rows(t->type, NULL, 0, NULL, dst_type, NULL, 0, n_in, 0) == 0;
    int batched = hf && m->batch && plain && kern_x8_type(dst_type) == dst_type;
    int n_threads = pool ? kern_pool_size(pool) : 1;
    if (!batched)
        j.scratch = malloc((size_t)n_threads * 2 * (size_t)n_in * sizeof(float));
    if (hf && hf->qk_heads > 0 && (j.src_rows = malloc((size_t)n_rows * sizeof *j.src_rows)))
        for (int r = 0; r < n_rows; r++)
            j.src_rows[r] = model_hf_src_row(hf, r);
    model_convert_batch *b = m->batch;
    if (!j.dst || (!batched && !j.scratch) || (hf && hf->qk_heads > 0 && !j.src_rows) ||
        (batched && brisk_grow_libc(&b->jobs, &b->cap, b->n + 1, sizeof *b->jobs, 64, 0) < 0)) {
        free(j.scratch);
        free(j.src_rows);
        return BRISK_ENOMEM;
    }
    /* 64 rows a task, enough to share a quantization's arithmetic well; a
     * plain conversion, bound by memory and page faults, writes at least a
     * huge page (2 MiB) of dst a task, so two threads do not fault one fresh
     * huge page together (with 64-row tasks two threads loaded a 1B bf16
     * folder slower than one on a 2-core VM). */
    j.rows_per_task = 64;
    if (plain && (size_t)j.rows_per_task * j.dst_row_bytes < MODEL_HUGE_PAGE)
        j.rows_per_task = (int)((MODEL_HUGE_PAGE + j.dst_row_bytes - 1) / j.dst_row_bytes);
    if (batched) {
        b->jobs[b->n++] = j; /* converted in model_batch_finish */
        return 0;
    }
    kern_pool_run(pool, model_convert_task, &j, (n_rows + j.rows_per_task - 1) / j.rows_per_task);
    free(j.scratch);
    free(j.src_rows);
    /* The stored bytes are never read again: let their pages leave RSS so the
     * process holds the converted weights only, not both copies. */
    if (hf)
        model_hf_weight_release(hf);
    else
        gguf_release_tensor_pages(m->gf, t);
    return 0;
}

kern_type model_target_type(model_weights_fmt fmt, kern_type stored, int n_in) {
    switch (fmt) {
    case MODEL_WEIGHTS_F32: return KERN_TYPE_F32;
    case MODEL_WEIGHTS_F16: return KERN_TYPE_F16;
    case MODEL_WEIGHTS_INT8:
        /* Q8_0/Q8_0M need whole blocks of 32 per row; every supported model
         * shape has them, but a row that does not falls back to f16. Q4_1
         * becomes Q8_0M (exact), everything else Q8_0. */
        return n_in % KERN_QK == 0 ? kern_int8_type(stored) : KERN_TYPE_F16;
    case MODEL_WEIGHTS_AUTO:
        /* The integer kernels run Q4_0/Q4_1 blocks as they are stored (used
         * from the mmap, no copy) with the same results as their int8 forms
         * (see kern_matmul.c) from 44-47% fewer bytes per token. */
        switch (stored) {
        case KERN_TYPE_F32:
        case KERN_TYPE_F16:
        case KERN_TYPE_Q8_0:
        case KERN_TYPE_Q8_0M:
        case KERN_TYPE_Q4_0:
        case KERN_TYPE_Q4_1:
        case KERN_TYPE_Q8_0X8: /* never stored in a file */
        case KERN_TYPE_Q8_0MX8:
        case KERN_TYPE_Q4_0X8:
        case KERN_TYPE_Q4_1X8: return stored;
        case KERN_TYPE_BF16: return KERN_TYPE_F16;
        default:
            /* Q5_*, the K-quants and IQ4_*: converted once at load into the
             * int8 or 4-bit form the kernels run (kern_kq_run_type; docs/
             * KERNELS.md says why and what it costs). */
            if (kern_kq_is(stored))
                return kern_kq_run_type(stored);
            break;
        }
    }
    return KERN_TYPE_F32;
}

/* ---- X8 (row-interleaved int8) ----------------------------------------- */

int model_want_x8(const model_load_opts *opts) {
    /* The integer kernels of every SIMD level read the X8 forms fastest (the
     * AVX-512 levels have no row-major integer tiles of their own). */
    return opts && opts->cpu_layout && kern_cpu_level() >= KERN_LEVEL_AVX2;
}

typedef struct x8_job {
    kern_type base;
    const uint8_t *src;
    uint8_t *dst;
    size_t group_bytes; /* 8 rows */
    int n_in, n_groups, groups_per_task;
    uint8_t *scratch; /* [n_threads][group_bytes] */
} x8_job;

static void model_x8_task(void *ctx, int task, int thread) {
    x8_job *j = ctx;
    int g0 = task * j->groups_per_task;
    int g1 = g0 + j->groups_per_task < j->n_groups ? g0 + j->groups_per_task : j->n_groups;
    uint8_t *tmp = j->scratch + (size_t)thread * j->group_bytes;
    size_t rb = j->group_bytes / 8;
    for (int g = g0; g < g1; g++) {
        /* A group occupies the same bytes in both layouts, so the rows are
         * copied out first and src may equal dst. */
        memcpy(tmp, j->src + (size_t)g * j->group_bytes, j->group_bytes);
        const void *rows[8];
        for (int r = 0; r < 8; r++)
            rows[r] = tmp + (size_t)r * rb;
        kern_x8_pack_group(j->base, rows, 8, j->n_in, j->dst, g);
    }
}

int model_make_x8(model *m, kern_pool *pool, model_matrix *mm, int in_place) {
    kern_type x8 = kern_x8_type(mm->type);
    if (x8 == mm->type || mm->n_out % 8 != 0)
        return 0;
    x8_job j = {0};
    j.base = mm->type;
    j.src = mm->data;
    j.group_bytes = 8 * kern_row_bytes(mm->type, mm->n_in);
    j.n_in = mm->n_in;
    j.n_groups = mm->n_out / 8;
    j.groups_per_task = 8;
    j.dst = in_place ? (uint8_t *)(uintptr_t)mm->data
                     : model_alloc_owned(m, kern_x8_bytes(x8, mm->n_out, mm->n_in));
    int n_threads = pool ? kern_pool_size(pool) : 1;
    j.scratch = malloc((size_t)n_threads * j.group_bytes);
    if (!j.dst || !j.scratch) {
        free(j.scratch);
        return BRISK_ENOMEM;
    }
    kern_pool_run(pool, model_x8_task, &j,
                  (j.n_groups + j.groups_per_task - 1) / j.groups_per_task);
    free(j.scratch);
    mm->type = x8;
    mm->data = j.dst;
    return 0;
}

static const gguf_tensor *model_find(model *m, const char *name, int required, char *err,
                                     size_t err_len) {
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) {
        const model_hf_weight *e = model_hf_weights_find(m->hfw, name);
        t = e ? &e->t : NULL;
    }
    if (!t && required)
        ERR(BRISK_EFORMAT, "model: missing tensor '%s'", name);
    return t;
}

static int model_check_shape(const gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                             char *err, size_t err_len) {
    int64_t want_dims = ne1 > 0 ? 2 : 1;
    int ok = t->ne[0] == ne0 && (ne1 > 0 ? t->ne[1] == ne1 : 1);
    for (int d = (int)want_dims; d < GGUF_MAX_DIMS; d++)
        ok = ok && t->ne[d] == 1;
    if (!ok)
        return ERR(BRISK_EFORMAT,
                   "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                   name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], (long long)ne0, (long long)(ne1 > 0 ? ne1 : 1));
    return 0;
}

/* A 3-D tensor of ne {ne0, ne1, ne2}. */
static int model_check_shape3(const gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                              int64_t ne2, char *err, size_t err_len) {
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return ERR(BRISK_EFORMAT,
                   "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, "
                   "%lld]",
                   name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], (long long)ne0, (long long)ne1, (long long)ne2);
    return 0;
}

/* A stack of n_stack matrices [n_out][n_in] (GGUF ne = {n_in, n_out,
 * n_stack}; n_stack 1: a plain matrix, ne = {n_in, n_out}), loaded as one
 * matrix of n_stack * n_out rows: the experts of a mixture-of-experts layer
 * take every conversion and layout a dense matrix does. The X8 forms need
 * each part to start on a group of 8 rows (model_matrix_expert): a stack
 * whose parts do not stays row-major. */
static int model_load_stack(model *m, kern_pool *pool, const char *name, int n_in, int n_out,
                            int n_stack, model_matrix *out, char *err, size_t err_len) {
    const gguf_tensor *t = model_find(m, name, 1, err, err_len);
    if (!t)
        return BRISK_EFORMAT;
    int rc = n_stack == 1 ? model_check_shape(t, name, n_in, n_out, err, err_len)
                          : model_check_shape3(t, name, n_in, n_out, n_stack, err, err_len);
    if (rc < 0)
        return rc;
    const int n_rows = n_out * n_stack; /* n_expert * rows is checked to fit in model_read_moe */
    /* With weights auto, a matrix the CPU kernels do not multiply is kept as
     * stored for a converting backend (keep_stored), and Q5_0/Q5_1/IQ4_NL
     * for their X8 forms (Q5_0X8/Q5_1X8/IQ4_NLX8: 22/24/18 bytes per 32
     * weights instead of the 34 of Q8_0; rows in whole groups of 8), IQ4_XS
     * becomes IQ4_NL for the same (18 bytes), Q5_K Q5_1 (24) and Q6_K and
     * Q3_K Q6_0S (28 bytes, their per-16 scales kept, where int8 would
     * requantize); everything else takes
     * model_target_type's form. */
    const int auto_fmt = m->fmt == MODEL_WEIGHTS_AUTO;
    const int x8_ok = auto_fmt && m->x8 && n_out % 8 == 0;
    const int q5 =
        t->type == KERN_TYPE_Q5_0 || t->type == KERN_TYPE_Q5_1 || t->type == KERN_TYPE_IQ4_NL;
    kern_type dst = (auto_fmt && m->keep_stored && kern_kq_is(t->type)) || (x8_ok && q5) ? t->type
                    : x8_ok && t->type == KERN_TYPE_IQ4_XS
                        ? KERN_TYPE_IQ4_NL /* its 32-value sub-blocks as IQ4_NL: IQ4_NLX8 */
                    : x8_ok && (t->type == KERN_TYPE_Q6_K || t->type == KERN_TYPE_Q3_K)
                        ? KERN_TYPE_Q6_0S /* 32 values with their two scales: Q6_0SX8 */
                    : x8_ok && t->type == KERN_TYPE_Q5_K
                        ? KERN_TYPE_Q5_1 /* its 32-value sub-blocks: Q5_1X8 */
                        : model_target_type(m->fmt, t->type, n_in);
    rc = model_convert(m, pool, t, n_rows, n_in, dst, &out->data);
    if (rc < 0)
        return ERR(rc, "model: out of memory converting '%s'", name);
    out->type = dst;
    out->n_in = n_in;
    out->n_out = n_rows;
    if (m->x8 && (n_stack == 1 || n_out % 8 == 0)) {
        int from_file = out->data == t->data;
        if ((rc = model_make_x8(m, pool, out, !from_file)) < 0)
            return ERR(rc, "model: out of memory interleaving '%s'", name);
        /* The CPU backend streams float matrices faster from 2 MiB pages than
         * from the file's 4 KiB page-cache pages (SmolLM2 f16 file, 1 Zen 4
         * thread: tg 75 -> 80 tok/s): copied like the X8 forms, the file's
         * pages given back. */
        if (from_file && out->data == t->data && kern_type_block_size(out->type) == 1) {
            size_t bytes = kern_row_bytes(out->type, n_in) * (size_t)n_rows;
            void *copy = model_alloc_owned(m, bytes);
            if (!copy)
                return ERR(BRISK_ENOMEM, "model: out of memory copying '%s'", name);
            memcpy(copy, out->data, bytes);
            out->data = copy;
        }
        if (from_file && out->data != t->data)
            gguf_release_tensor_pages(m->gf, t);
    }
    m->n_params += (int64_t)n_in * n_rows;
    return 0;
}

/* A matrix tensor [n_out][n_in] (GGUF ne = {n_in, n_out}). */
static int model_load_matrix(model *m, kern_pool *pool, const char *name, int n_in, int n_out,
                             model_matrix *out, char *err, size_t err_len) {
    return model_load_stack(m, pool, name, n_in, n_out, 1, out, err, err_len);
}

/* Rows [r0, r0 + n) of a loaded matrix as a matrix of their own, sharing
 * its storage (a fused tensor's parts). In the X8 forms rows come in groups
 * of 8, so the parts must start and end on a group. */
static int model_matrix_rows(const model_matrix *f, int r0, int n, model_matrix *out,
                             const char *name, char *err, size_t err_len) {
    size_t off;
    if (kern_type_is_x8(f->type)) {
        if (r0 % 8 != 0 || n % 8 != 0)
            return ERR(BRISK_EUNSUPPORTED,
                       "model: tensor '%s' splits at row %d or %d, not a multiple of 8", name, r0,
                       r0 + n);
        off = kern_x8_bytes(f->type, r0, f->n_in);
    } else {
        off = kern_row_bytes(f->type, f->n_in) * (size_t)r0;
    }
    *out = (model_matrix){
        .type = f->type, .data = (const uint8_t *)f->data + off, .n_out = n, .n_in = f->n_in};
    return 0;
}

/* A vector of n floats (norm weights, biases), converted to f32 if needed. */
static int model_load_vector(model *m, const char *name, int n, int required, const float **out,
                             char *err, size_t err_len) {
    const gguf_tensor *t = model_find(m, name, required, err, err_len);
    if (!t) {
        *out = NULL;
        return required ? BRISK_EFORMAT : 0;
    }
    int rc = model_check_shape(t, name, n, 0, err, err_len);
    if (rc < 0)
        return rc;
    /* A folder's matrix of one row (a [1, n] norm) is not aligned: read
     * through an aligned copy. */
    int hf = model_hf_weights_of(m->hfw, t) != NULL;
    if (t->type == KERN_TYPE_F32 && !hf) {
        *out = t->data;
    } else {
        float *buf = model_alloc_owned(m, (size_t)n * sizeof(float));
        void *raw = hf ? malloc(t->nbytes) : NULL;
        if (!buf || (hf && !raw)) {
            free(raw);
            return ERR(BRISK_ENOMEM, "model: out of memory for '%s'", name);
        }
        if (raw)
            memcpy(raw, t->data, t->nbytes);
        kern_dequantize_row(t->type, raw ? raw : t->data, buf, n);
        free(raw);
        *out = buf;
    }
    m->n_params += n;
    return 0;
}

/* Layer l's mixture of experts: the router (kept in f32 whatever the file
 * stores, as llama.cpp's quantizer leaves it: routing is a discrete choice
 * that rounding could flip) and the gate/up/down stacks as GGUF's 3-D
 * tensors (ne {dim, expert_hidden, n_expert} for gate and up, {expert_hidden,
 * dim, n_expert} for down). Shared experts and per-expert 2-D tensors (old
 * Mixtral conversions) are refused by name. */
static int model_load_experts(model *m, kern_pool *pool, int l, model_layer *L, char *err,
                              size_t err_len) {
    const model_config *c = &m->cfg;
    char name[96];
    static const char *const refused[][2] = {
        {"ffn_gate_shexp.weight", "shared experts are not supported"},
        {"ffn_gate_inp_shexp.weight", "shared experts are not supported"},
        {"ffn_gate.0.weight", "per-expert tensors (an old Mixtral conversion) are not supported: "
                              "convert it again with a current llama.cpp (stacked ffn_*_exps)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", l, refused[i][0]);
        if (gguf_find_tensor(m->gf, name))
            return ERR(BRISK_EUNSUPPORTED, "model: tensor '%s': %s", name, refused[i][1]);
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    const gguf_tensor *t = model_find(m, name, 1, err, err_len);
    if (!t)
        return BRISK_EFORMAT;
    int rc = model_check_shape(t, name, c->dim, c->n_expert, err, err_len);
    if (rc < 0)
        return rc;
    if ((rc = model_convert(m, pool, t, c->n_expert, c->dim, KERN_TYPE_F32, &L->router.data)) < 0)
        return ERR(rc, "model: out of memory converting '%s'", name);
    L->router.type = KERN_TYPE_F32;
    L->router.n_in = c->dim;
    L->router.n_out = c->n_expert;
    m->n_params += (int64_t)c->dim * c->n_expert;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
    if ((rc = model_load_stack(m, pool, name, c->dim, c->expert_hidden, c->n_expert, &L->exps_gate,
                               err, err_len)) < 0)
        return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
    if ((rc = model_load_stack(m, pool, name, c->dim, c->expert_hidden, c->n_expert, &L->exps_up,
                               err, err_len)) < 0)
        return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
    return model_load_stack(m, pool, name, c->expert_hidden, c->dim, c->n_expert, &L->exps_down,
                            err, err_len);
}

static int model_load_tensors_in(model *m, kern_pool *pool, char *err, size_t err_len);

/* The tensors, the folder conversions batched (model_convert_batch). */
static int model_load_tensors(model *m, kern_pool *pool, char *err, size_t err_len) {
    model_convert_batch batch = {0};
    m->batch = &batch;
    int rc = model_load_tensors_in(m, pool, err, err_len);
    m->batch = NULL;
    model_batch_finish(m, pool, &batch, rc == 0);
    return rc;
}

static int model_load_tensors_in(model *m, kern_pool *pool, char *err, size_t err_len) {
    const model_config *c = &m->cfg;
    model_weights *w = &m->w;
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    int rc;
    /* A layer is at least 6 tensors: a block_count beyond the file's tensors
     * would only make us allocate per-layer state for layers that are not
     * there (16M layers in a 30 KB file: 3.5 GB of layer structs, fuzz_gguf). */
    int64_t n_tensors = gguf_n_tensors(m->gf) + model_hf_weights_count(m->hfw);
    if ((int64_t)c->n_layers * 6 > n_tensors)
        return ERR(BRISK_EFORMAT, "model: block_count %d but only %lld tensors in the file",
                   c->n_layers, (long long)n_tensors);

    const gguf_tensor *te = model_find(m, "token_embd.weight", 1, err, err_len);
    if (!te)
        return BRISK_EFORMAT;
    if (te->ne[0] != c->dim || te->ne[1] < 1 || te->ne[1] > (1 << 24) || te->ne[2] != 1 ||
        te->ne[3] != 1)
        return ERR(BRISK_EFORMAT,
                   "model: tensor 'token_embd.weight' has shape [%lld, %lld], "
                   "expected [%d, n_vocab]",
                   (long long)te->ne[0], (long long)te->ne[1], c->dim);
    m->cfg.n_vocab = (int)te->ne[1];
    int tied = model_find(m, "output.weight", 0, err, err_len) == NULL;
    if (tied) {
        /* The table is also the output projection: it takes the compute format. */
        if ((rc = model_load_matrix(m, pool, "token_embd.weight", c->dim, c->n_vocab, &w->tok_embd,
                                    err, err_len)) < 0)
            return rc;
    } else {
        /* Only rows are looked up (and dequantized one at a time), so the stored
         * type is kept: converting it would only add rounding and memory. */
        w->tok_embd.type = te->type;
        w->tok_embd.data = te->data;
        /* A folder's table is not aligned: into an owned buffer, as stored. */
        if (model_hf_weights_of(m->hfw, te) &&
            model_convert(m, pool, te, c->n_vocab, c->dim, te->type, &w->tok_embd.data) < 0)
            return ERR(BRISK_ENOMEM, "model: out of memory copying 'token_embd.weight'");
        w->tok_embd.n_in = c->dim;
        w->tok_embd.n_out = c->n_vocab;
        m->n_params += (int64_t)c->dim * c->n_vocab;
    }
    if ((rc = model_load_vector(m, "output_norm.weight", c->dim, 1, &w->output_norm, err,
                                err_len)) < 0)
        return rc;
    if (!tied) {
        if ((rc = model_load_matrix(m, pool, "output.weight", c->dim, c->n_vocab, &w->output, err,
                                    err_len)) < 0)
            return rc;
    } else {
        m->cfg.tied_output = 1;
        w->output = w->tok_embd;
    }
    if ((rc = model_load_vector(m, "rope_freqs.weight", c->n_rot / 2, 0, &w->rope_freqs, err,
                                err_len)) < 0 ||
        (rc = model_load_vector(m, "rope_factors_long.weight", c->n_rot / 2, 0, &w->rope_long, err,
                                err_len)) < 0 ||
        (rc = model_load_vector(m, "rope_factors_short.weight", c->n_rot / 2, 0, &w->rope_short,
                                err, err_len)) < 0)
        return rc;

    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return ERR(BRISK_ENOMEM, "model: out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &w->layers[l];
        char name[96];
#define LVEC(field, suffix, n, req)                                                                \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                           \
    if ((rc = model_load_vector(m, name, n, req, &L->field, err, err_len)) < 0)                    \
        return rc;
#define LMAT(field, suffix, n_in, n_out)                                                           \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                           \
    if ((rc = model_load_matrix(m, pool, name, n_in, n_out, &L->field, err, err_len)) < 0)         \
        return rc;
        LVEC(attn_norm, "attn_norm.weight", c->dim, 1)
        LVEC(ffn_norm, "ffn_norm.weight", c->dim, 1)
        snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
        if (model_find(m, name, 0, err, err_len)) { /* phi3: q, k and v as one matrix */
            model_matrix f;
            if ((rc = model_load_matrix(m, pool, name, c->dim, q_dim + 2 * kv_dim, &f, err,
                                        err_len)) < 0 ||
                (rc = model_matrix_rows(&f, 0, q_dim, &L->wq, name, err, err_len)) < 0 ||
                (rc = model_matrix_rows(&f, q_dim, kv_dim, &L->wk, name, err, err_len)) < 0 ||
                (rc = model_matrix_rows(&f, q_dim + kv_dim, kv_dim, &L->wv, name, err, err_len)) <
                    0)
                return rc;
        } else {
            LMAT(wq, "attn_q.weight", c->dim, q_dim)
            LMAT(wk, "attn_k.weight", c->dim, kv_dim)
            LMAT(wv, "attn_v.weight", c->dim, kv_dim)
        }
        LMAT(wo, "attn_output.weight", q_dim, c->dim)
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", l);
        if (c->n_expert > 0) { /* a mixture of experts */
            if ((rc = model_load_experts(m, pool, l, L, err, err_len)) < 0)
                return rc;
        } else if (!model_find(m, name, 0, err, err_len)) { /* phi3: gate and up as one matrix */
            model_matrix f;
            snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
            if ((rc = model_load_matrix(m, pool, name, c->dim, 2 * c->hidden_dim, &f, err,
                                        err_len)) < 0 ||
                (rc = model_matrix_rows(&f, 0, c->hidden_dim, &L->w_gate, name, err, err_len)) <
                    0 ||
                (rc = model_matrix_rows(&f, c->hidden_dim, c->hidden_dim, &L->w_up, name, err,
                                        err_len)) < 0)
                return rc;
        } else {
            LMAT(w_gate, "ffn_gate.weight", c->dim, c->hidden_dim)
            LMAT(w_up, "ffn_up.weight", c->dim, c->hidden_dim)
        }
        if (c->n_expert == 0) {
            LMAT(w_down, "ffn_down.weight", c->hidden_dim, c->dim)
        }
        if (c->has_qkv_bias) {
            LVEC(bq, "attn_q.bias", q_dim, 1)
            LVEC(bk, "attn_k.bias", kv_dim, 1)
            LVEC(bv, "attn_v.bias", kv_dim, 1)
        }
        if (c->has_qk_norm == MODEL_QK_NORM_FULL) { /* olmoe: over the whole projections */
            LVEC(q_norm, "attn_q_norm.weight", q_dim, 1)
            LVEC(k_norm, "attn_k_norm.weight", kv_dim, 1)
        } else if (c->has_qk_norm) {
            LVEC(q_norm, "attn_q_norm.weight", c->head_dim, 1)
            LVEC(k_norm, "attn_k_norm.weight", c->head_dim, 1)
        }
        L->rope_base = c->rope_base;
        if (c->has_post_norms) {
            LVEC(post_attn_norm, "post_attention_norm.weight", c->dim, 1)
            LVEC(post_ffn_norm, "post_ffw_norm.weight", c->dim, 1)
        }
        model_layer_set_window(c, l, L);
#undef LVEC
#undef LMAT
    }
    return 0;
}

static size_t model_matrix_bytes(const model_matrix *mm) {
    return kern_row_bytes(mm->type, mm->n_in) * (size_t)mm->n_out;
}

void model_count_bytes(model *m) {
    const model_config *c = &m->cfg;
    size_t b = model_matrix_bytes(&m->w.output) + (size_t)c->dim * sizeof(float);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->w.layers[l];
        b += model_matrix_bytes(&L->wq) + model_matrix_bytes(&L->wk) + model_matrix_bytes(&L->wv) +
             model_matrix_bytes(&L->wo) + model_matrix_bytes(&L->w_gate) +
             model_matrix_bytes(&L->w_up) + model_matrix_bytes(&L->w_down) +
             2 * (size_t)c->dim * sizeof(float);
        /* A mixture of experts: the router and the n_expert_used experts one
         * token runs (the active parameters), not the whole stacks. */
        if (c->n_expert > 0)
            b += model_matrix_bytes(&L->router) +
                 (model_matrix_bytes(&L->exps_gate) + model_matrix_bytes(&L->exps_up) +
                  model_matrix_bytes(&L->exps_down)) /
                     (size_t)c->n_expert * (size_t)c->n_expert_used;
    }
    m->weight_bytes = b;
}

void model_layer_set_window(const model_config *c, int l, model_layer *L) {
    if (c->n_swa > 0 && (c->swa_pattern <= 0 || l % c->swa_pattern < c->swa_pattern - 1)) {
        L->window = c->n_swa; /* a local layer */
        L->rope_base = c->rope_base_swa;
        if (c->arch->swa_rope_unscaled)
            L->rope_freq_scale = 1.0f;
    }
}

int model_config_cuda_validated(const model_config *c) {
    return c->arch->cuda_validated && c->n_swa == 0 && c->n_expert == 0;
}

/* general.file_type as llama.cpp names it (its llama_ftype, without
 * MOSTLY_); NULL for ids it does not define. */
static const char *file_type_name(uint32_t ft) {
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL", [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",
    };
    return ft < sizeof names / sizeof names[0] ? names[ft] : NULL;
}

/* Logs how many tensors of each type the file holds and sets m->file_type:
 * the file's general.file_type, or, where it is missing or unknown, the
 * type most of its 2-D tensors have ("guessed", as llama.cpp does). */
static void model_log_types(model *m) {
    int64_t count[KERN_TYPE_BF16 + 1] = {0}, count2d[KERN_TYPE_BF16 + 1] = {0};
    int64_t n_image = gguf_n_tensors(m->gf);
    for (int64_t i = 0; i < n_image + model_hf_weights_count(m->hfw); i++) {
        const gguf_tensor *t =
            i < n_image ? gguf_tensor_at(m->gf, i) : &model_hf_weights_at(m->hfw, i - n_image)->t;
        if ((unsigned)t->type <= KERN_TYPE_BF16) {
            count[t->type]++;
            count2d[t->type] += t->ne[1] > 1;
        }
    }
    char list[256] = "";
    size_t at = 0;
    int best = -1;
    for (int ty = 0; ty <= KERN_TYPE_BF16; ty++) {
        if (!count[ty])
            continue;
        if (at < sizeof list)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%lld %s", at ? ", " : "",
                                   (long long)count[ty], kern_type_name((kern_type)ty));
        if (count2d[ty] && (best < 0 || count2d[ty] > count2d[best]))
            best = ty;
    }
    uint32_t ft = 0;
    const char *name =
        gguf_get_u32(m->gf, "general.file_type", &ft) == 0 ? file_type_name(ft) : NULL;
    if (name)
        snprintf(m->file_type, sizeof m->file_type, "%s", name);
    else if (best >= 0)
        snprintf(m->file_type, sizeof m->file_type, "%s (guessed)",
                 kern_type_name((kern_type)best));
    else
        snprintf(m->file_type, sizeof m->file_type, "unknown");
    BRISK_INFO("model: file type %s; tensors: %s", m->file_type, list);
}

const char *model_get_file_type(const model *m) {
    return m->file_type[0] ? m->file_type : NULL;
}

/* The brisk.generation.* keys (model.h), each checked against its range. */
static int model_read_generation(model *m, char *err, size_t err_len) {
    static const struct {
        const char *key;
        unsigned bit;
        float lo, hi;
        int lo_open;
    } keys[] = {
        {"brisk.generation.temperature", MODEL_GEN_TEMPERATURE, 0.0f, 100.0f, 0},
        {"brisk.generation.top_p", MODEL_GEN_TOP_P, 0.0f, 1.0f, 1},
        {"brisk.generation.min_p", MODEL_GEN_MIN_P, 0.0f, 1.0f, 0},
        {"brisk.generation.repetition_penalty", MODEL_GEN_REPETITION_PENALTY, 0.0f, 10.0f, 1},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        float v;
        int rc = gguf_get_f32(m->gf, keys[i].key, &v);
        if (rc == BRISK_ENOTFOUND)
            continue;
        if (rc < 0 || !(v >= keys[i].lo && v <= keys[i].hi) || (keys[i].lo_open && v == keys[i].lo))
            return ERR(BRISK_EFORMAT, "model: metadata key '%s' is not a number in %s%g, %g]",
                       keys[i].key, keys[i].lo_open ? "(" : "[", (double)keys[i].lo,
                       (double)keys[i].hi);
        m->gen.has |= keys[i].bit;
        if (keys[i].bit == MODEL_GEN_TEMPERATURE)
            m->gen.temperature = v;
        else if (keys[i].bit == MODEL_GEN_TOP_P)
            m->gen.top_p = v;
        else if (keys[i].bit == MODEL_GEN_MIN_P)
            m->gen.min_p = v;
        else
            m->gen.repetition_penalty = v;
    }
    uint32_t k;
    int rc = gguf_get_u32(m->gf, "brisk.generation.top_k", &k);
    if (rc < 0 && rc != BRISK_ENOTFOUND)
        return ERR(BRISK_EFORMAT, "model: metadata key 'brisk.generation.top_k' is not a u32");
    if (rc == 0) {
        m->gen.has |= MODEL_GEN_TOP_K;
        m->gen.top_k = k > (1u << 24) ? 1 << 24 : (int)k;
    }
    return 0;
}

const model_generation *model_get_generation(const model *m) {
    return &m->gen;
}

/* Everything after the file is open: metadata, vocabulary, tensors. m->gf is
 * set; on failure the caller frees m. */
static int model_load_gguf(model *m, const char *what, kern_pool *pool, char *err, size_t err_len) {
    int rc;
    if ((rc = model_read_config(m->gf, &m->cfg, err, err_len)) < 0)
        return rc;
    if ((rc = tok_vocab_create_from_gguf(m->gf, &m->vocab, err, err_len)) < 0)
        return rc;
    double t0 = brisk_now();
    if ((rc = model_load_tensors(m, pool, err, err_len)) < 0)
        return rc;
    double t_tensors = brisk_now() - t0;
    if ((rc = model_read_generation(m, err, err_len)) < 0)
        return rc;
    if (tok_n_vocab(m->vocab) > m->cfg.n_vocab)
        return ERR(BRISK_EFORMAT, "model: tokenizer has %d tokens but the embedding has %d rows",
                   tok_n_vocab(m->vocab), m->cfg.n_vocab);
    /* Optional strings; present with another type, the file is malformed. */
    gguf_str s;
    static const char *const str_keys[2] = {"general.name", "tokenizer.chat_template"};
    for (int i = 0; i < 2; i++) {
        rc = gguf_get_str(m->gf, str_keys[i], &s);
        if (rc == BRISK_ENOTFOUND)
            continue;
        if (rc < 0)
            return ERR(BRISK_EFORMAT, "model: metadata key '%s' has the wrong type", str_keys[i]);
        char *copy = model_strdup_gguf(s);
        if (i == 0)
            m->name = copy;
        else
            m->chat_template = copy;
    }
    model_count_bytes(m);
    model_log_types(m);
    BRISK_INFO("model: %s: %s, %d layers, dim %d, heads %d/%d, vocab %d, weights %s (%.1f MB read "
               "per token; tensors loaded in %.2f s)",
               what, m->cfg.arch->name, m->cfg.n_layers, m->cfg.dim, m->cfg.n_heads,
               m->cfg.n_kv_heads, m->cfg.n_vocab, model_weights_fmt_name(m->fmt),
               (double)m->weight_bytes / 1e6, t_tensors);
    return 0;
}

/* Opens the file (path) or the buffer (buf, len) and loads from it; image,
 * when not NULL, is buf and passes to the model, which frees it, as it does
 * hfw (a folder's matrices, hf_folder.h). */
static int model_load_from(const char *path, const void *buf, size_t len, uint8_t *image,
                           model_hf_weights *hfw, const model_load_opts *opts, model **out,
                           char *err, size_t err_len) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        free(image);
        model_hf_weights_free(hfw);
        return ERR(BRISK_ENOMEM, "model: out of memory");
    }
    m->image = image;
    m->hfw = hfw;
    m->fmt = opts ? opts->weights : MODEL_WEIGHTS_AUTO;
    m->x8 = model_want_x8(opts);
    m->keep_stored = opts && opts->keep_stored;
    kern_pool *pool = opts ? opts->pool : NULL;
    int rc = path ? gguf_open(path, &m->gf, err, err_len)
                  : gguf_open_memory(buf, len, &m->gf, err, err_len);
    if (rc == 0)
        rc = model_load_gguf(m,
                             path    ? path
                             : image ? "(Hugging Face folder)"
                                     : "(memory)",
                             pool, err, err_len);
    if (rc < 0) {
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int model_load(const char *path, const model_load_opts *opts, model **out, char *err,
               size_t err_len) {
    if (opts && opts->dummy)
        return model_create_dummy(opts, out, err, err_len);
    if (!path) {
        *out = NULL;
        return ERR(BRISK_EINVAL, "model: no path");
    }
    /* A Hugging Face folder (or its config.json) becomes the GGUF image the
     * converter would write (hf_folder.h), loaded by the same path. */
    if (model_hf_is_folder(path)) {
        uint8_t *image;
        size_t len;
        model_hf_weights *hfw;
        int rc = model_hf_open(path, 0, &image, &len, &hfw, err, err_len);
        if (rc < 0) {
            *out = NULL;
            return rc;
        }
        return model_load_from(NULL, image, len, image, hfw, opts, out, err, err_len);
    }
    return model_load_from(path, NULL, 0, NULL, NULL, opts, out, err, err_len);
}

int model_load_memory(const void *buf, size_t len, const model_load_opts *opts, model **out,
                      char *err, size_t err_len) {
    return model_load_from(NULL, buf, len, NULL, NULL, opts, out, err, err_len);
}

void model_free(model *m) {
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->w.layers);
    tok_vocab_free(m->vocab);
    gguf_close(m->gf);
    gguf_close(m->tok_gf);
    free(m->image);                /* after the gguf_file that points into it */
    model_hf_weights_free(m->hfw); /* after the buffers converted from it */
    free(m->name);
    free(m->chat_template);
    free(m);
}

const model_config *model_get_config(const model *m) {
    return &m->cfg;
}
const model_weights *model_get_weights(const model *m) {
    return &m->w;
}
const tok_vocab *model_get_vocab(const model *m) {
    return m->vocab;
}
const char *model_name(const model *m) {
    return m->name ? m->name : "model";
}
const char *model_chat_template(const model *m) {
    return m->chat_template;
}
model_weights_fmt model_get_weights_fmt(const model *m) {
    return m->fmt;
}
int64_t model_n_params(const model *m) {
    return m->n_params;
}
int64_t model_n_params_active(const model *m) {
    const model_config *c = &m->cfg;
    int64_t idle = c->n_expert > 0 ? (int64_t)c->n_layers * (c->n_expert - c->n_expert_used) * 3 *
                                         c->dim * c->expert_hidden
                                   : 0;
    return m->n_params - idle;
}
size_t model_weight_bytes(const model *m) {
    return m->weight_bytes;
}
