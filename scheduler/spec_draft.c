/* spec_draft.c - the draft model's proposals: its own model, backend and KV
 * cache, batched draft steps per engine step (spec_draft.h). */
#include "scheduler/spec_draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kv/kv_cache.h"
#include "models/tokenizer.h"
#include "scheduler/sched_setup.h"
#include "scheduler/spec.h"

struct spec_draft_seq {
    int slot;       /* the draft cache's slot, or -1 */
    int n_done;     /* the sequence's first n_done tokens have K/V there */
    long long step; /* the last step it proposed in */
    model_sampler *sampler;
};

struct spec_draft {
    sched_setup setup; /* the draft's model, backend and (later) cache */
    sched_setup_opts so;
    int n_vocab, max_batch_tokens;
    int *free_slots, n_free;
    spec_draft_seq **owner; /* per slot: the sequence holding it, or NULL */
    long long *last;        /* per slot: scratch for draft_evict_oldest */
    long long step;         /* spec_draft_propose calls so far */
    double step_s;          /* spec_draft_step_s */
    double prefill_s;       /* spec_draft_prefill_s */
    /* one forward's batch */
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    int *b_job; /* per logits row: its job; then draft_sample's greedy owners */
    int *stop;  /* per job: done (or failed) this step */
    int max_seqs;
    model_sample_job *sjobs; /* greedy rows sampled in one call */
    int32_t *sids;
    float *row; /* a host copy of one row, sampled with its distribution kept */
};

int spec_draft_check_vocab(const model *target, const model *draft, char *err, size_t err_len) {
    const tok_vocab *vt = model_get_vocab(target), *vd = model_get_vocab(draft);
    int nt = model_get_config(target)->n_vocab, nd = model_get_config(draft)->n_vocab;
    int n = nt < nd ? nt : nd;
    char a[256], b[256];
    for (int id = 0; id < n; id++) {
        int la = tok_token_to_piece(vt, id, TOK_PARSE_SPECIAL, a, sizeof a - 1);
        int lb = tok_token_to_piece(vd, id, TOK_PARSE_SPECIAL, b, sizeof b - 1);
        la = la < 0 ? 0 : la < (int)sizeof a - 1 ? la : (int)sizeof a - 1;
        lb = lb < 0 ? 0 : lb < (int)sizeof b - 1 ? lb : (int)sizeof b - 1;
        if (la != lb || memcmp(a, b, (size_t)la) != 0) {
            a[la] = b[lb] = '\0';
            for (char *p = a; *p; p++) /* one printable line */
                *p = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
            for (char *p = b; *p; p++)
                *p = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "the draft model's vocabulary differs from the target's at token "
                                 "%d: '%.40s' in the target, '%.40s' in the draft",
                                 id, a, b);
        }
    }
    if (nt != nd)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "the draft model's vocabulary differs from the target's at token %d: "
                             "the target has %d tokens, the draft %d",
                             n, nt, nd);
    return 0;
}

int spec_draft_load(const spec_draft_opts *o, const model *target, spec_draft **out, char *err,
                    size_t err_len) {
    *out = NULL;
    spec_draft *d = calloc(1, sizeof *d);
    if (!d)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "draft model: out of memory");
    /* A --dummy-weights shape name that is not a file: that shape's seeded
     * weights (the same as a dummy target's: the GPU campaign's draft =
     * target check). */
    const char *dummy = NULL;
    for (const char *const *n = model_dummy_configs; *n && access(o->path, R_OK) != 0; n++)
        if (!strcmp(*n, o->path))
            dummy = o->path;
    d->so = (sched_setup_opts){.model_path = o->path,
                               .dummy = dummy,
                               .tokenizer = dummy ? o->tokenizer : NULL,
                               .weights = o->weights,
                               .device = o->device,
                               .pool = o->pool,
                               .max_batch_tokens = o->max_batch_tokens,
                               .max_ctx = o->max_ctx,
                               .max_seqs = o->max_seqs,
                               .gpu_memory_utilization = o->gpu_memory_utilization,
                               .cuda_graphs = o->cuda_graphs,
                               .kv_dtype = o->kv_dtype,
                               .prefix_caching = 0,
                               .no_window_release = 1,
                               .defer_kv = 1};
    char why[200];
    int rc = sched_setup_load(&d->so, &d->setup, why, sizeof why);
    if (rc == 0)
        rc = spec_draft_check_vocab(target, d->setup.m, why, sizeof why);
    if (rc == 0)
        rc = sched_setup_finish(&d->so, &d->setup, why, sizeof why);
    if (rc < 0) {
        snprintf(err, err_len, "draft model %s: %s", o->path, why);
        sched_setup_free(&d->setup);
        free(d);
        return rc;
    }
    d->n_vocab = model_get_config(d->setup.m)->n_vocab;
    d->max_batch_tokens = o->max_batch_tokens;
    size_t T = (size_t)o->max_batch_tokens, S = (size_t)o->max_seqs;
    d->free_slots = malloc(S * sizeof *d->free_slots);
    d->b_tok = malloc(T * sizeof *d->b_tok);
    d->b_pos = malloc(T * sizeof *d->b_pos);
    d->b_seq = malloc(T * sizeof *d->b_seq);
    d->b_want = malloc(T);
    d->b_job = malloc(2 * T * sizeof *d->b_job);
    d->stop = malloc(S * sizeof *d->stop);
    d->owner = calloc(S, sizeof *d->owner);
    d->last = calloc(S, sizeof *d->last);
    d->max_seqs = o->max_seqs;
    d->sjobs = calloc(S, sizeof *d->sjobs);
    d->sids = malloc(S * sizeof *d->sids);
    d->row = malloc((size_t)d->n_vocab * sizeof *d->row);
    if (!d->free_slots || !d->b_tok || !d->b_pos || !d->b_seq || !d->b_want || !d->b_job ||
        !d->stop || !d->owner || !d->last || !d->sjobs || !d->sids || !d->row) {
        spec_draft_free(d);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "draft model: out of memory");
    }
    for (int i = 0; i < o->max_seqs; i++) /* slot 0 on top */
        d->free_slots[d->n_free++] = o->max_seqs - 1 - i;
    *out = d;
    return 0;
}

size_t spec_draft_kv_bytes_per_pos(const spec_draft *d) {
    const model_config *c = model_get_config(d->setup.m);
    const int bs = 64; /* any block size: the bytes of a position, rounded up */
    size_t lb =
        kern_kv_layer_block_bytes(d->so.kv_dtype, c->n_kv_heads * c->head_dim, c->head_dim, bs);
    return (2 * (size_t)c->n_layers * lb + bs - 1) / bs;
}

int spec_draft_kv_create(spec_draft *d, long long kv_bytes, char *err, size_t err_len) {
    d->so.kv_cache_bytes = kv_bytes > 0 ? kv_bytes : 1;
    char why[200];
    int rc = sched_setup_kv(&d->so, &d->setup, why, sizeof why);
    if (rc < 0)
        snprintf(err, err_len, "draft model's KV cache: %s", why);
    return rc;
}

size_t spec_draft_weight_bytes(const spec_draft *d) {
    return d->setup.be->weight_bytes;
}

/* What one more proposal costs (the policy's, spec.h): a draft step of one
 * token per sequence with its sampling, averaged (each step weighs 1/8). */
static void draft_step_time(spec_draft *d, double dt) {
    d->step_s = d->step_s > 0 ? d->step_s + (dt - d->step_s) / 8.0 : dt;
}

double spec_draft_prefill_s(const spec_draft *d) {
    return d->prefill_s;
}

int spec_draft_seq_behind(const spec_draft_seq *ds, int n_tokens) {
    int held = ds && ds->slot >= 0 ? ds->n_done : 0;
    return n_tokens > held ? n_tokens - held : 0;
}

double spec_draft_step_s(const spec_draft *d) {
    return d->step_s;
}

void spec_draft_describe(const spec_draft *d, char *buf, size_t len) {
    snprintf(buf, len, "%s (%.1f MB of weights), KV cache %.1f MB = %ld blocks",
             model_name(d->setup.m), d->setup.be->weight_bytes / 1e6,
             d->setup.kv ? kv_cache_bytes(d->setup.kv) / 1e6 : 0.0, d->setup.n_blocks);
}

void spec_draft_free(spec_draft *d) {
    if (!d)
        return;
    sched_setup_free(&d->setup);
    free(d->free_slots);
    free(d->b_tok);
    free(d->b_pos);
    free(d->b_seq);
    free(d->b_want);
    free(d->b_job);
    free(d->stop);
    free(d->owner);
    free(d->last);
    free(d->sjobs);
    free(d->sids);
    free(d->row);
    free(d);
}

spec_draft_seq *spec_draft_seq_create(const spec_draft *d, const model_sampling *p) {
    spec_draft_seq *ds = brisk_calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    model_sampling dp = *p;
    /* The draft draws from a stream of its own: the target's generator is
     * the verification's (spec_verify.h). */
    dp.seed = p->seed ^ 0x9e3779b97f4a7c15ull;
    ds->sampler = model_sampler_create(&dp, d->n_vocab);
    if (!ds->sampler) {
        free(ds);
        return NULL;
    }
    ds->slot = -1;
    return ds;
}

void spec_draft_seq_release(spec_draft *d, spec_draft_seq *ds) {
    if (!d || !ds || ds->slot < 0)
        return;
    kv_cache_seq_release(d->setup.kv, ds->slot);
    d->owner[ds->slot] = NULL;
    d->free_slots[d->n_free++] = ds->slot;
    ds->slot = -1;
    ds->n_done = 0;
}

void spec_draft_seq_free(spec_draft_seq *ds) {
    if (!ds)
        return;
    model_sampler_free(ds->sampler);
    free(ds);
}

void spec_draft_keep(spec_draft *d, spec_draft_seq *ds, int n_valid) {
    if (!d || !ds || ds->slot < 0 || n_valid >= ds->n_done)
        return;
    ds->n_done = n_valid > 0 ? n_valid : 0;
    kv_cache_seq_set_pos(d->setup.kv, ds->slot, ds->n_done);
    kv_cache_seq_shrink(d->setup.kv, ds->slot);
}

/* Samples the draft's row `row` for job j: its proposal number j->got. */
static int draft_sample_one(spec_draft *d, spec_draft_job *j, int row) {
    const float *lg = NULL;
    if (model_backend_logits(d->setup.be, row, &lg) < 0)
        return -1;
    memcpy(d->row, lg, (size_t)d->n_vocab * sizeof *d->row);
    int32_t id = model_sampler_sample_spec(j->ds->sampler, d->row, j->tokens, j->n_tokens + j->got,
                                           NULL, -1, NULL, j->q + (size_t)j->got * d->n_vocab);
    return id;
}

/* Samples the rows of the last draft forward: rows[r] belongs to job
 * b_job[r]. Greedy jobs (no q) in one backend call, the others on the host
 * with their distributions. Appends each proposal; a failure stops a job. */
static void draft_sample(spec_draft *d, spec_draft_job *jobs, int n_rows, int *stop) {
    int n_s = 0;
    for (int r = 0; r < n_rows; r++) {
        spec_draft_job *j = &jobs[d->b_job[r]];
        if (j->q) {
            int32_t id = draft_sample_one(d, j, r);
            if (id < 0 || id >= d->n_vocab)
                stop[d->b_job[r]] = 1;
            else
                ((int32_t *)j->tokens)[j->n_tokens + j->got++] = id;
            continue;
        }
        d->sjobs[n_s] = (model_sample_job){
            .row = r, .sampler = j->ds->sampler, .hist = j->tokens, .n_hist = j->n_tokens + j->got};
        d->b_job[n_rows + n_s] = d->b_job[r]; /* past the rows: the greedy jobs' owners */
        n_s++;
    }
    if (n_s == 0)
        return;
    int rc = model_backend_sample(d->setup.be, d->sjobs, n_s, d->sids);
    for (int i = 0; i < n_s; i++) {
        int ji = d->b_job[n_rows + i];
        spec_draft_job *j = &jobs[ji];
        if (rc < 0 || d->sids[i] < 0 || d->sids[i] >= d->n_vocab)
            stop[ji] = 1;
        else
            ((int32_t *)j->tokens)[j->n_tokens + j->got++] = d->sids[i];
    }
}

/* Runs the batch of n tokens; the logits rows come back in batch order. */
static int draft_forward(spec_draft *d, int n) {
    model_batch b = {n, d->b_tok, d->b_pos, d->b_seq, d->b_want, NULL};
    int n_out = 0;
    return model_backend_forward(d->setup.be, d->setup.kv, &b, &n_out);
}

int spec_draft_oldest_idle(const long long *last, int n, long long step) {
    int best = -1;
    for (int s = 0; s < n; s++)
        if (last[s] >= 0 && last[s] < step && (best < 0 || last[s] < last[best]))
            best = s;
    return best;
}

/* Frees the slot of the sequence that proposed longest ago among those not
 * proposing this step (waiting, preempted, refused by the gate, still in
 * their prompt): the pool holds as many positions as the target's, so the
 * running ones fit once enough others are out, and one the gate refused a
 * step ago keeps its cache while older ones can go. It starts over when it
 * proposes again. Returns 1 if a slot was freed, 0 if none is idle. */
static int draft_evict_oldest(spec_draft *d) {
    for (int s = 0; s < d->max_seqs; s++)
        d->last[s] = d->owner[s] ? d->owner[s]->step : -1;
    const int s = spec_draft_oldest_idle(d->last, d->max_seqs, d->step);
    if (s < 0)
        return 0;
    spec_draft_seq_release(d, d->owner[s]);
    return 1;
}

void spec_draft_propose(spec_draft *d, spec_draft_job *jobs, int n) {
    kv_cache *kv = d->setup.kv;
    d->step++;
    for (int i = 0; i < n; i++)
        if (jobs[i].ds && jobs[i].want > 0)
            jobs[i].ds->step = d->step;
    int *stop = d->stop; /* per job: no more proposals this step */
    if (n > d->max_seqs)
        n = d->max_seqs; /* the engine's candidates are running sequences: never more */
    int nb = 0, budget = d->max_batch_tokens, n_rows = 0;
    /* The first forward: every job's tokens the draft does not hold yet,
     * logits at the last one of each job that catches up completely. */
    for (int i = 0; i < n; i++) {
        spec_draft_job *j = &jobs[i];
        spec_draft_seq *ds = j->ds;
        j->got = 0;
        stop[i] = 1;
        if (!ds || j->want <= 0 || budget <= 0)
            continue;
        if (ds->slot < 0) {
            if (d->n_free == 0 && draft_evict_oldest(d) == 0)
                continue;
            ds->slot = d->free_slots[--d->n_free];
            d->owner[ds->slot] = ds;
            ds->n_done = 0;
        }
        if (ds->n_done >= j->n_tokens) /* never expected: the last token is always new */
            spec_draft_keep(d, ds, j->n_tokens - 1);
        int need = j->n_tokens - ds->n_done;
        int feed = need < budget ? need : budget;
        /* Room for the catch-up and the proposals fed back later. */
        int grow = feed == need ? need + j->want - 1 : feed;
        int grown = kv_cache_seq_grow(kv, ds->slot, grow) == 0;
        while (!grown && draft_evict_oldest(d)) /* the oldest idle first, until it fits */
            grown = kv_cache_seq_grow(kv, ds->slot, grow) == 0;
        if (!grown) {
            spec_draft_seq_release(d, ds); /* the pool is full: start over later */
            continue;
        }
        for (int k = 0; k < feed; k++, nb++) {
            d->b_tok[nb] = j->tokens[ds->n_done + k];
            d->b_pos[nb] = ds->n_done + k;
            d->b_seq[nb] = ds->slot;
            d->b_want[nb] = k == need - 1;
            if (d->b_want[nb])
                d->b_job[n_rows++] = i;
        }
        budget -= feed;
        ds->n_done += feed;
        stop[i] = feed < need; /* still catching up: no proposal this step */
    }
    if (nb == 0)
        return;
    double t_first = brisk_now();
    if (draft_forward(d, nb) < 0) {
        BRISK_WARN("draft model: forward pass failed; no proposals this step");
        for (int i = 0; i < n; i++)
            if (jobs[i].ds)
                spec_draft_seq_release(d, jobs[i].ds);
        return;
    }
    for (int i = 0; i < n; i++)
        if (jobs[i].ds && jobs[i].ds->slot >= 0)
            kv_cache_seq_set_pos(kv, jobs[i].ds->slot, jobs[i].ds->n_done);
    draft_sample(d, jobs, n_rows, stop);
    /* A first forward that only caught up the last verification's tokens
     * (one or two a sequence) is a decode step of the draft too: at one
     * proposal a step it is the only one, so it is measured as the loop's
     * steps below are. */
    if (n_rows > 0 && nb <= 2 * n_rows)
        draft_step_time(d, brisk_now() - t_first);
    else if (nb >= 32) { /* a prompt's catch-up: its cost per token (spec.c's gate) */
        double pt = (brisk_now() - t_first) / nb;
        d->prefill_s = d->prefill_s > 0 ? d->prefill_s + (pt - d->prefill_s) / 4.0 : pt;
    }
    /* Then one token per job a step: its last proposal, fed back. */
    for (;;) {
        nb = 0;
        for (int i = 0; i < n; i++) {
            spec_draft_job *j = &jobs[i];
            if (stop[i] || j->got == 0 || j->got >= j->want)
                continue;
            d->b_tok[nb] = j->tokens[j->n_tokens + j->got - 1];
            d->b_pos[nb] = j->n_tokens + j->got - 1;
            d->b_seq[nb] = j->ds->slot;
            d->b_want[nb] = 1;
            d->b_job[nb] = i;
            nb++;
        }
        if (nb == 0)
            break;
        double t0 = brisk_now();
        if (draft_forward(d, nb) < 0) {
            BRISK_WARN("draft model: forward pass failed; proposals cut short");
            for (int r = 0; r < nb; r++) {
                spec_draft_seq_release(d, jobs[d->b_job[r]].ds);
                stop[d->b_job[r]] = 1;
            }
            break;
        }
        for (int r = 0; r < nb; r++) {
            spec_draft_seq *ds = jobs[d->b_job[r]].ds;
            ds->n_done++;
            kv_cache_seq_set_pos(kv, ds->slot, ds->n_done);
        }
        draft_sample(d, jobs, nb, stop);
        draft_step_time(d, brisk_now() - t0);
    }
}
