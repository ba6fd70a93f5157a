/* engine_load.c - the engine's resources (engine_int.h): made on the engine
 * thread when it starts (engine_load), freed by sched_engine_free
 * (engine_unload). The rules for the model, backend and KV cache are
 * sched_setup.h's; the draft model's are spec_draft.h's. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_kv.h"
#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "scheduler/engine_int.h"
#include "scheduler/sched_setup.h"
#include "scheduler/spec.h"
#include "scheduler/spec_draft.h"

/* The draft model (spec_draft.h) after the target's model and backend, then
 * both KV caches: of the pool the rules give the target (sched_setup.h),
 * the draft takes the share its bytes per position make of both models'
 * (so both hold the same number of positions), the target the rest. */
static int engine_load_draft(sched_engine *e, sched_setup_opts *so) {
    const model_config *c = model_get_config(e->setup.m);
    spec_draft_opts dopt = {.path = e->cfg.spec.draft_model,
                            .tokenizer = e->cfg.tokenizer,
                            .weights = e->cfg.weights,
                            .device = e->setup.be->device,
                            .pool = e->pool,
                            .max_seqs = e->cfg.max_seqs,
                            .max_batch_tokens = e->cfg.max_batch_tokens,
                            .max_ctx = e->setup.max_ctx,
                            .gpu_memory_utilization = e->cfg.gpu_memory_utilization,
                            .cuda_graphs = e->cfg.cuda_graphs,
                            .kv_dtype = e->cfg.kv_dtype};
    spec_draft *d = NULL;
    int rc = spec_draft_load(&dopt, e->setup.m, &d, e->load_err, sizeof e->load_err);
    if (rc < 0)
        return rc;
    const int bs = 64; /* the target's K plus V bytes of a position, as the draft's */
    double t_pos = 2.0 * c->n_layers *
                   (double)kern_kv_layer_block_bytes(e->cfg.kv_dtype, c->n_kv_heads * c->head_dim,
                                                     c->head_dim, bs) /
                   bs;
    double d_pos = (double)spec_draft_kv_bytes_per_pos(d);
    double share = d_pos / (t_pos + d_pos);
    so->kv_share = 1.0 - share;
    rc = sched_setup_kv(so, &e->setup, e->load_err, sizeof e->load_err);
    if (rc == 0)
        rc = spec_draft_kv_create(
            d, (long long)((double)kv_cache_bytes(e->setup.kv) * share / (1.0 - share)),
            e->load_err, sizeof e->load_err);
    sched_spec_env env = {
        e->setup.m,      e->setup.be, e->pool, e->cfg.max_seqs, e->cfg.max_batch_tokens,
        e->setup.max_ctx};
    if (rc == 0)
        rc = sched_spec_create(&e->cfg.spec, &env, &e->spec, e->load_err, sizeof e->load_err);
    if (rc < 0) {
        spec_draft_free(d);
        return rc;
    }
    char desc[256];
    spec_draft_describe(d, desc, sizeof desc);
    BRISK_INFO("engine: draft model %s (%.0f%% of the KV pool)", desc, share * 100.0);
    sched_spec_set_draft(e->spec, d);
    return 0;
}

int engine_load(sched_engine *e) {
    e->pool = kern_pool_create(e->cfg.n_threads);
    if (!e->pool) {
        snprintf(e->load_err, sizeof e->load_err, "cannot start the thread pool");
        return BRISK_ENOMEM;
    }
    int mbt = e->cfg.max_batch_tokens;
    sched_setup_opts so = {.model_path = e->model_path,
                           .dummy = e->cfg.dummy,
                           .tokenizer = e->cfg.tokenizer,
                           .weights = e->cfg.weights,
                           .device = e->cfg.device,
                           .pool = e->pool,
                           .max_batch_tokens = mbt,
                           .max_ctx = e->cfg.max_ctx,
                           .max_seqs = e->cfg.max_seqs,
                           .block_size = e->cfg.block_size,
                           .gpu_memory_utilization = e->cfg.gpu_memory_utilization,
                           .cuda_graphs = e->cfg.cuda_graphs,
                           .kv_dtype = e->cfg.kv_dtype,
                           .prefix_caching = e->cfg.prefix_caching,
                           .no_window_release = e->cfg.no_window_release,
                           .kv_cache_bytes = e->cfg.kv_cache_bytes};
    int spec_on = e->cfg.spec.method != SCHED_SPEC_NONE;
    if (spec_on) { /* every proposal's row is sampled too, up to the threshold's worth */
        int th = e->cfg.spec.max_batch_tokens > 0 ? e->cfg.spec.max_batch_tokens
                                                  : SCHED_SPEC_THRESHOLD_CUDA;
        so.max_sample_rows = e->cfg.max_seqs + th < mbt ? e->cfg.max_seqs + th : mbt;
    }
    so.defer_kv = e->cfg.spec.method == SCHED_SPEC_DRAFT; /* its share once both are loaded */
    int rc = sched_setup_create(&so, &e->setup, e->load_err, sizeof e->load_err);
    if (rc == 0 && so.defer_kv)
        rc = engine_load_draft(e, &so);
    if (rc < 0)
        return rc;
    e->m = e->setup.m;
    e->be = e->setup.be;
    e->kv = e->setup.kv;
    const model_config *c = model_get_config(e->m);
    int ctx = e->max_ctx = e->setup.max_ctx, bs = e->setup.block_size;
    long n_blocks = e->setup.n_blocks;
    sched_core_config sc = {e->cfg.max_seqs, mbt, e->cfg.prefix_caching, e->cfg.sched_policy,
                            e->cfg.priority_aging_s};
    e->core = sched_core_create(e->kv, &sc);
    e->b_tok = malloc((size_t)mbt * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)mbt * sizeof *e->b_pos);
    e->b_seq = malloc((size_t)mbt * sizeof *e->b_seq);
    e->b_want = malloc((size_t)mbt);
    e->b_hid = malloc((size_t)mbt);
    e->lp_row = malloc((size_t)c->n_vocab * sizeof *e->lp_row);
    e->eog_ids = malloc((size_t)c->n_vocab * sizeof *e->eog_ids);
    for (int id = 0; e->eog_ids && id < c->n_vocab; id++)
        if (tok_is_eog(model_get_vocab(e->m), id))
            e->eog_ids[e->n_eog++] = id;
    /* Mask workers: one per four cores, 1 to 4 (a grammar's walks take turns,
     * so more help only with several grammars at once). */
    int n_mask = e->cfg.mask_workers;
    if (n_mask < 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        n_mask = ncpu >= 16 ? 4 : ncpu >= 4 ? (int)(ncpu / 4) : 1;
    }
    e->masks = sched_mask_pool_create(n_mask, engine_mask_done, e);
    /* A row per sampled token: a sequence's proposals are sampled too. */
    e->jobs = malloc((size_t)mbt * sizeof *e->jobs);
    e->job_seq = malloc((size_t)mbt * sizeof *e->job_seq);
    e->job_ids = malloc((size_t)mbt * sizeof *e->job_ids);
    e->job_p = malloc((size_t)mbt * sizeof *e->job_p);
    if (spec_on) {
        e->cands = malloc((size_t)e->cfg.max_seqs * sizeof *e->cands);
        e->cand_seq = malloc((size_t)e->cfg.max_seqs * sizeof *e->cand_seq);
        e->runs = malloc((size_t)e->cfg.max_seqs * sizeof *e->runs);
    }
    if (!e->masks || !e->jobs || !e->job_seq || !e->job_ids || !e->job_p || !e->core || !e->b_tok ||
        !e->b_pos || !e->b_seq || !e->b_want || !e->b_hid || !e->lp_row || !e->eog_ids ||
        (spec_on && (!e->cands || !e->cand_seq || !e->runs))) {
        snprintf(e->load_err, sizeof e->load_err,
                 "out of memory for the scheduler's scratch (%ld KV blocks)", n_blocks);
        return BRISK_ENOMEM;
    }
    if (spec_on && !e->spec) { /* ngram, suffix (a draft model's was made with it) */
        sched_spec_env env = {e->m, e->be, e->pool, e->cfg.max_seqs, mbt, ctx};
        rc = sched_spec_create(&e->cfg.spec, &env, &e->spec, e->load_err, sizeof e->load_err);
        if (rc < 0)
            return rc;
    }
    if (e->spec)
        BRISK_INFO("engine: speculative decoding: %s, up to %d tokens a sequence, while a step "
                   "runs at most %d tokens",
                   sched_spec_method_name(e->cfg.spec.method), e->cfg.spec.num_tokens,
                   sched_spec_threshold(e->spec));
    char dev[160];
    e->be->ops->describe(e->be, dev, sizeof dev);
    BRISK_INFO("engine: device %s", dev);
    if (e->be->device == MODEL_DEVICE_CPU) {
        char cpu[256], kernels[1024];
        kern_cpu_describe(cpu, sizeof cpu);
        model_cpu_kernels_describe(e->m, kernels, sizeof kernels);
        BRISK_INFO("engine: %s kernels (%s): %s", cpu,
                   kern_cpu_pick() == KERN_PICK_TABLE ? "fastest per op, fixed table" : "one level",
                   kernels);
    }
    kv_cache_shape sh;
    kv_cache_get_shape(e->kv, &sh);
    BRISK_INFO("engine: %s ready: up to %d sequences x %d positions; KV cache %.1f MB %s = %ld "
               "blocks x %d positions x %d layers, %d block tables per sequence (%d released "
               "behind sliding windows; one context holds at most %ld blocks), prefix caching "
               "%s; batch %d tokens",
               model_name(e->m), e->cfg.max_seqs, ctx, kv_cache_bytes(e->kv) / 1e6,
               kern_kv_dtype_name(e->setup.kv_dtype), n_blocks, bs, sh.layers_per_group,
               sh.n_groups, sh.n_window_groups, sh.seq_blocks, e->cfg.prefix_caching ? "on" : "off",
               mbt);
    return 0;
}

void engine_unload(sched_engine *e) {
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_hid);
    free(e->lp_row);
    free(e->eog_ids);
    sched_mask_pool_free(e->masks); /* after the sequences: it frees the orphaned jobs */
    model_grammar_vocab_free(e->gvocab);
    free(e->jobs);
    free(e->job_seq);
    free(e->job_ids);
    free(e->job_p);
    free(e->cands);
    free(e->cand_seq);
    free(e->runs);
    sched_core_free(e->core);
    sched_spec_free(e->spec);    /* the draft model with it */
    sched_setup_free(&e->setup); /* the cache, the backend, the model */
    kern_pool_free(e->pool);
}
