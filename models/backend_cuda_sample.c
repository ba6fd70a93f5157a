/* backend_cuda_sample.c - sampling on the GPU: each row's settings and edit
 * list (models/sampler.h) uploaded, one kernel samples every row, only the
 * token ids come back. */
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

static int cuda_sample_device(cuda_backend *cb, const model_sample_job *jobs, int n, int32_t *ids);

/* Rows whose sampler bans tokens or holds a grammar's mask are sampled on
 * the host, from the row's logits, by the CPU's sampler (the same code the
 * CPU backend runs); the others in one kernel. */
int model_cuda_sample(model_backend *be, const model_sample_job *jobs, int n, int32_t *ids) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0)
        return 0;
    if (n > cb->o.max_seqs)
        return BRISK_ERANGE;
    int n_host = 0;
    for (int i = 0; i < n; i++)
        n_host += model_sampler_constrained(jobs[i].sampler);
    if (n_host == 0)
        return cuda_sample_device(cb, jobs, n, ids);
    model_sample_job *dev = malloc((size_t)n * sizeof *dev);
    int *where = malloc((size_t)n * sizeof *where);
    int rc = dev && where ? 0 : BRISK_ENOMEM, n_dev = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!model_sampler_constrained(jobs[i].sampler)) {
            where[n_dev] = i;
            dev[n_dev++] = jobs[i];
            continue;
        }
        const float *raw = NULL;
        rc = model_cuda_logits(be, jobs[i].row, &raw);
        if (rc == 0) {
            /* h_row is scratch: the sampler edits it, so the cached row is gone */
            ids[i] = model_sampler_sample(jobs[i].sampler, cb->h_row, jobs[i].hist, jobs[i].n_hist);
            cb->h_row_valid = -1;
            rc = ids[i] < 0 ? ids[i] : 0;
        }
    }
    if (rc == 0 && n_dev > 0) {
        int32_t *got = malloc((size_t)n_dev * sizeof *got);
        rc = got ? cuda_sample_device(cb, dev, n_dev, got) : BRISK_ENOMEM;
        for (int k = 0; rc == 0 && k < n_dev; k++)
            ids[where[k]] = got[k];
        free(got);
    }
    free(dev);
    free(where);
    return rc;
}

static int cuda_sample_device(cuda_backend *cb, const model_sample_job *jobs, int n, int32_t *ids) {
    /* Every job's edit list first (each sampler holds its own), then room
     * for all of them: growing the upload arrays drops their contents. */
    model_sample_edits *edits = malloc((size_t)n * sizeof *edits);
    if (!edits)
        return BRISK_ENOMEM;
    long need = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (jobs[i].row < 0 || jobs[i].row >= cb->n_out)
            rc = BRISK_ERANGE;
        else
            rc = model_sampler_edits(jobs[i].sampler, jobs[i].hist, jobs[i].n_hist, &edits[i]);
        need += rc == 0 ? edits[i].n_bias + edits[i].n_pen : 0;
    }
    if (rc == 0 && need > 0x7fffffffL)
        rc = BRISK_ERANGE;
    if (rc == 0)
        rc = cuda_edits_reserve(cb, (int)need);
    if (rc < 0) {
        free(edits);
        return rc;
    }
    int n_edits = 0;
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
    if (!rc)
        rc = kern_cuda_sample(cb->d_ids, cb->logits, cb->o.max_batch_tokens, cb->c.n_vocab,
                              cb->d_rows, n, n_edits ? cb->d_edit_ids : NULL,
                              n_edits ? cb->d_edit_vals : NULL, n_edits, cb->samp_ws,
                              cb->samp_ws_bytes, s);
    if (!rc)
        rc = kern_cuda_download(cb->h_ids, cb->d_ids, (size_t)n * sizeof(int32_t), s);
    if (!rc)
        rc = kern_cuda_sync(s);
    if (rc < 0) {
        BRISK_ERROR("cuda: sampling failed: %s", kern_cuda_last_error());
        return rc;
    }
    memcpy(ids, cb->h_ids, (size_t)n * sizeof(int32_t));
    return 0;
}

#endif /* BRISK_HAVE_CUDA */
