/* backend_cuda_sample.c - sampling on the GPU: each row's settings, edit
 * list and, for a constrained row, its mask (models/sampler.h) uploaded, one
 * kernel samples every row, only the token ids come back. */
#include "brisk_config.h"

#if BRISK_HAVE_CUDA

#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_sample.cuh"
#include "models/backend.h"
#include "models/sampler.h"

#include "models/backend_cuda_internal.h"

/* ---- sampling ------------------------------------------------------------------ */

static int cuda_edits_reserve(cuda_backend *cb, int need) {
    if (need <= cb->edit_cap)
        return 0;
    int cap = cb->edit_cap ? cb->edit_cap : 4096;
    while (cap < need)
        cap *= 2;
    kern_cuda_free(cb->d_edit_ids);
    kern_cuda_free(cb->d_edit_vals);
    model_cuda_pinned_free(cb->h_edit_ids);
    model_cuda_pinned_free(cb->h_edit_vals);
    cb->d_edit_ids = NULL, cb->d_edit_vals = NULL, cb->h_edit_ids = NULL, cb->h_edit_vals = NULL;
    cb->edit_cap = 0;
    int rc = kern_cuda_malloc((void **)&cb->d_edit_ids, (size_t)cap * sizeof(int32_t));
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->d_edit_vals, (size_t)cap * sizeof(float));
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&cb->h_edit_ids, (size_t)cap * sizeof(int32_t));
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&cb->h_edit_vals, (size_t)cap * sizeof(float));
    if (!rc)
        cb->edit_cap = cap;
    return rc;
}

/* Appends a job's edit list (the sampler's own: models/sampler.h) to the
 * upload arrays and points its row at the two parts. */
static void cuda_job_edits(cuda_backend *cb, const model_sample_edits *e, kern_cuda_sample_row *r,
                           int *n_edits) {
    int n = e->n_bias + e->n_pen;
    memcpy(cb->h_edit_ids + *n_edits, e->ids, (size_t)n * sizeof *e->ids);
    memcpy(cb->h_edit_vals + *n_edits, e->vals, (size_t)n * sizeof *e->vals);
    r->bias_first = *n_edits;
    r->n_bias = e->n_bias;
    r->pen_first = *n_edits + e->n_bias;
    r->n_pen = e->n_pen;
    *n_edits += n;
}

/* The mask buffers only (cuda_masks_reserve grows them). */
static void cuda_masks_free(cuda_backend *cb) {
    kern_cuda_free(cb->d_mask);
    model_cuda_pinned_free(cb->h_mask);
    cb->d_mask = NULL, cb->h_mask = NULL;
    cb->mask_cap = 0;
}

/* Room for `need` mask words (pinned and on the device), made on the first
 * constrained row: a server without constraints never holds them. The
 * buffers keep their contents only when not grown. */
static int cuda_masks_reserve(cuda_backend *cb, size_t need) {
    if (need <= cb->mask_cap)
        return 0;
    size_t cap = cb->mask_cap ? cb->mask_cap : need;
    while (cap < need)
        cap *= 2;
    cuda_masks_free(cb);
    int rc = kern_cuda_malloc((void **)&cb->d_mask, cap * sizeof(uint32_t));
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&cb->h_mask, cap * sizeof(uint32_t));
    if (!rc)
        cb->mask_cap = cap;
    return rc;
}

/* Room for `rows` draft distributions and every row's p(x), made on the
 * first draft row (a server without a sampling draft model never holds
 * them). */
static int cuda_q_reserve(cuda_backend *cb, int rows) {
    if (rows <= cb->q_cap)
        return 0;
    int cap = cb->sample_rows; /* at most one draft row per sampled row */
    kern_cuda_free(cb->d_q);
    kern_cuda_free(cb->d_pout);
    model_cuda_pinned_free(cb->h_q);
    model_cuda_pinned_free(cb->h_pout);
    cb->d_q = cb->d_pout = cb->h_q = cb->h_pout = NULL;
    cb->q_cap = 0;
    size_t qb = (size_t)cap * (size_t)cb->c.n_vocab * sizeof(float);
    int rc = kern_cuda_malloc((void **)&cb->d_q, qb);
    if (!rc)
        rc = kern_cuda_malloc((void **)&cb->d_pout, (size_t)cap * sizeof(float));
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&cb->h_q, qb);
    if (!rc)
        rc = model_cuda_pinned_alloc((void **)&cb->h_pout, (size_t)cap * sizeof(float));
    if (rc)
        return rc;
    cb->q_cap = cap;
    return rows <= cap ? 0 : BRISK_ERANGE;
}

void model_cuda_sample_free(cuda_backend *cb) {
    cuda_masks_free(cb);
    kern_cuda_free(cb->d_q);
    kern_cuda_free(cb->d_pout);
    model_cuda_pinned_free(cb->h_q);
    model_cuda_pinned_free(cb->h_pout);
    cb->d_q = cb->d_pout = cb->h_q = cb->h_pout = NULL;
    cb->q_cap = 0;
}

/* Every row in one kernel, constrained ones too: a row whose sampler holds a
 * grammar's mask or bans tokens gets model_sampler_mask's bits, which the
 * kernel applies before everything else as model_sampler_sample does
 * (kern_cuda_sample.cuh's step 0), so no row's logits cross to the host.
 * The masks of the step travel in one upload from one pinned buffer. */
int model_cuda_sample(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0)
        return 0;
    if (n > cb->sample_rows)
        return BRISK_ERANGE;
    /* Every job's edit list first (each sampler holds its own), then room
     * for all of them: growing the upload arrays drops their contents. */
    model_sample_edits *edits = malloc((size_t)n * sizeof *edits);
    if (!edits)
        return BRISK_ENOMEM;
    const size_t words = ((size_t)cb->c.n_vocab + 31) / 32;
    long need = 0;
    size_t n_masked = 0;
    int rc = 0, n_draft = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (jobs[i].row < 0 || jobs[i].row >= cb->n_out)
            rc = BRISK_ERANGE;
        else
            rc = model_sampler_edits(jobs[i].sampler, jobs[i].hist, jobs[i].n_hist, &edits[i]);
        need += rc == 0 ? edits[i].n_bias + edits[i].n_pen : 0;
        n_masked += (size_t)model_sampler_constrained(jobs[i].sampler);
        if (jobs[i].draft_q &&
            (jobs[i].draft_id < 0 || jobs[i].draft_id >= cb->c.n_vocab || !jobs[i].p_draft))
            rc = BRISK_EINVAL;
        n_draft += jobs[i].draft_q != NULL;
    }
    /* The kernel's offsets are int32: 4096 rows of a 152K vocabulary use
     * 19M words, far below. */
    if (rc == 0 && (need > 0x7fffffffL || n_masked * words > 0x7fffffffu))
        rc = BRISK_ERANGE;
    if (rc == 0)
        rc = cuda_edits_reserve(cb, (int)need);
    if (rc == 0 && n_masked > 0)
        rc = cuda_masks_reserve(cb, n_masked * words);
    if (rc == 0 && n_draft > 0)
        rc = cuda_q_reserve(cb, n_draft);
    if (rc < 0) {
        free(edits);
        return rc;
    }
    int n_edits = 0, n_q = 0;
    size_t n_mask_words = 0;
    for (int i = 0; i < n; i++) {
        const model_sample_job *j = &jobs[i];
        const model_sampling *p = model_sampler_params(j->sampler);
        kern_cuda_sample_row *r = &cb->h_rows[i];
        memset(r, 0, sizeof *r);
        r->logit_row = cb->out_map[j->row];
        r->temperature = p->temperature;
        r->top_k = p->top_k;
        r->top_p = p->top_p;
        r->min_p = p->min_p;
        r->repetition_penalty = p->repetition_penalty;
        r->presence_penalty = p->presence_penalty;
        r->frequency_penalty = p->frequency_penalty;
        /* One draw per sampled token, as the CPU sampler makes. */
        r->u = p->temperature > 0.0f ? model_sampler_next_uniform(j->sampler) : 0.0;
        cuda_job_edits(cb, &edits[i], r, &n_edits);
        r->mask_first = -1;
        if (model_sampler_constrained(j->sampler)) {
            r->mask_first = (int32_t)n_mask_words;
            model_sampler_mask(j->sampler, cb->h_mask + n_mask_words);
            n_mask_words += words;
        }
        r->q_row = -1;
        if (j->draft_q) { /* the draft's distribution rides along (step 9) */
            memcpy(cb->h_q + (size_t)n_q * (size_t)cb->c.n_vocab, j->draft_q,
                   (size_t)cb->c.n_vocab * sizeof(float));
            r->q_row = n_q++;
            r->draft_id = j->draft_id;
        }
    }
    free(edits);
    cudaStream_t s = cb->stream;
    rc = kern_cuda_upload(cb->d_rows, cb->h_rows, (size_t)n * sizeof *cb->h_rows, s);
    if (!rc && n_edits > 0) {
        rc = kern_cuda_upload(cb->d_edit_ids, cb->h_edit_ids, (size_t)n_edits * sizeof(int32_t), s);
        if (!rc)
            rc = kern_cuda_upload(cb->d_edit_vals, cb->h_edit_vals, (size_t)n_edits * sizeof(float),
                                  s);
    }
    if (!rc && n_mask_words > 0)
        rc = kern_cuda_upload(cb->d_mask, cb->h_mask, n_mask_words * sizeof(uint32_t), s);
    if (!rc && n_q > 0)
        rc = kern_cuda_upload(cb->d_q, cb->h_q, (size_t)n_q * (size_t)cb->c.n_vocab * sizeof(float),
                              s);
    if (!rc)
        rc = kern_cuda_sample(
            cb->d_ids, cb->logits, cb->o.max_batch_tokens, cb->c.n_vocab, cb->d_rows, n,
            n_edits ? cb->d_edit_ids : NULL, n_edits ? cb->d_edit_vals : NULL, n_edits,
            n_mask_words ? cb->d_mask : NULL, (int)n_mask_words, n_q ? cb->d_q : NULL, n_q,
            n_q ? cb->d_pout : NULL, cb->samp_ws, cb->samp_ws_bytes, s);
    if (!rc)
        rc = kern_cuda_download(cb->h_ids, cb->d_ids, (size_t)n * sizeof(int32_t), s);
    if (!rc && n_q > 0)
        rc = kern_cuda_download(cb->h_pout, cb->d_pout, (size_t)n * sizeof(float), s);
    if (!rc)
        rc = kern_cuda_sync(s);
    if (rc < 0) {
        BRISK_ERROR("cuda: sampling failed: %s", kern_cuda_last_error());
        /* The copies already queued read the pinned buffers the next step
         * writes: let them finish (or fail) first. */
        (void)kern_cuda_sync(s);
        return rc;
    }
    memcpy(ids, cb->h_ids, (size_t)n * sizeof(int32_t));
    for (int i = 0; i < n && n_q > 0; i++)
        if (jobs[i].draft_q)
            *jobs[i].p_draft = cb->h_pout[i];
    return 0;
}

#endif /* BRISK_HAVE_CUDA */
