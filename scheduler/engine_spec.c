/* engine_spec.c - speculative decoding on the engine's side (engine_int.h):
 * each step's proposals before the schedule grows KV for them, and their
 * verification after the forward pass, position by position for a row whose
 * sampler changes between positions (a grammar's mask, banned tokens,
 * log-probs), else from the step's one sample call. The proposers are
 * spec.c, the acceptance rule spec_verify.h (docs/SPECULATIVE.md). */
#include <stdint.h>
#include <string.h>

#include "common/brisk_log.h"
#include "scheduler/engine_int.h"
#include "scheduler/spec_verify.h"

void engine_propose(sched_engine *e) {
    sched_req *const *run = sched_core_running(e->core);
    int n_run = sched_core_n_running(e->core), nc = 0;
    long base = 0;
    for (int i = 0; i < n_run; i++) {
        seq *s = (seq *)run[i];
        s->req.n_spec = 0;
        int need = s->req.n_tokens - s->req.n_computed;
        base += need;
        if (need != 1 || !s->spec || s->parked)
            continue;
        /* The output and context left, less the token the step emits anyway. */
        int room = s->p.max_tokens - s->n_gen;
        room = e->max_ctx - s->n_hist < room ? e->max_ctx - s->n_hist : room;
        e->cands[nc] = (sched_spec_cand){s->spec, s->hist, s->n_hist, room - 1, 0};
        e->cand_seq[nc++] = s;
    }
    /* A prompt that may be admitted makes it a prefill step. */
    if (sched_core_n_waiting(e->core) > 0 && n_run < e->cfg.max_seqs)
        base += sched_core_waiting_head(e->core)->n_tokens;
    if (nc == 0)
        return;
    sched_spec_propose(e->spec, e->cands, nc,
                       base < e->cfg.max_batch_tokens ? (int)base : e->cfg.max_batch_tokens);
    for (int i = 0; i < nc; i++)
        e->cand_seq[i]->req.n_spec = e->cands[i].n_prop;
}

/* The grammar's mask for s's next position (the sampler reads it); 0, or
 * s ended (-1). */
static int seq_spec_mask(sched_engine *e, seq *s) {
    double tm = brisk_now();
    int allowed = 0;
    long long work;
    /* Verification samples position after position: each mask is needed
     * now, so the engine computes it (or waits for the worker that is). */
    for (;;) {
        long long seen = engine_masks_done(e);
        sched_mask_state st = sched_mask_poll(e->masks, s->mj, &allowed, &work);
        if (st == SCHED_MASK_READY)
            break;
        if (st == SCHED_MASK_IDLE) { /* never asked: ask (a cached mask is ready at once) */
            sched_mask_submit(e->masks, s->mj);
            continue;
        }
        if (st == SCHED_MASK_QUEUED && sched_mask_run_here(e->masks, s->mj, -1))
            continue;
        engine_wait_mask_done(e, seen, brisk_now() + 0.01); /* a worker is computing it */
    }
    s->mj->delay = 0;
    e->tr.mask_s += brisk_now() - tm;
    if (allowed > 0)
        return 0;
    engine_seq_finish_grammar(e, s, allowed);
    return -1;
}

/* Samples row `row` for s alone: with a draft's q (and its proposal x) the
 * residual and *p_x; the raw row into lp_row first when log-probs are asked.
 * Returns the id or a negative code. */
static int32_t seq_spec_sample(sched_engine *e, seq *s, int row, const float *q, int32_t x,
                               float *p_x) {
    double ts = brisk_now();
    if (s->p.logprobs >= 0) {
        const float *raw = NULL;
        int rc = model_backend_logits(e->be, row, &raw);
        if (rc < 0)
            return rc;
        memcpy(e->lp_row, raw, (size_t)model_get_config(e->m)->n_vocab * sizeof(float));
    }
    model_sample_job job = {.row = row,
                            .sampler = s->sampler,
                            .hist = s->hist,
                            .n_hist = s->n_hist,
                            .draft_q = q,
                            .draft_id = x,
                            .p_draft = p_x};
    int32_t id = -1;
    int rc = model_backend_sample(e->be, &job, 1, &id);
    e->tr.sample_s += brisk_now() - ts;
    return rc < 0 ? rc : id;
}

/* Verifies s's run of k proposals from its rows row0 .. row0 + k
 * (spec_verify.h): sampled here position by position (ids NULL: a grammar's
 * mask, banned tokens or log-probs change between positions), or taken
 * from the step's one sample call (ids, pd: its results from the run's
 * first job; rng: the generator before it). Emits the tokens and returns
 * how many; *finished when s ended (and was freed). */
static int seq_verify(sched_engine *e, seq *s, int row0, int k, const int32_t *ids, const float *pd,
                      const model_sampler_rng *rng, int *finished) {
    const size_t nv = (size_t)model_get_config(e->m)->n_vocab;
    int32_t prop[SCHED_SPEC_MAX_TOKENS];
    memcpy(prop, s->hist + s->n_hist, (size_t)k * sizeof *prop);
    const float *q = sched_spec_seq_q(s->spec);
    uint64_t *arng = sched_spec_seq_rng(s->spec);
    int n_hist0 = s->n_hist, a = 0, emitted = 0;
    *finished = 0;
    e->tr.spec_proposed += k;
    e->tr.spec_seqs++;
    if (ids) { /* every position sampled already: the decisions first */
        while (a < k && (q ? ids[a] >= 0 && spec_verify_keep(pd[a], q[a * nv + prop[a]], arng)
                           : ids[a] == prop[a]))
            a++;
        sched_spec_observe(e->spec, s->spec, k, a, n_hist0 + a);
    }
    for (int j = 0; j <= k; j++) {
        sched_token tk, *tkp = NULL;
        int32_t id;
        int keep;
        if (ids) {
            keep = j < a;
            id = keep ? prop[j] : ids[j];
        } else {
            if (s->mj && seq_spec_mask(e, s) < 0) {
                sched_spec_observe(e->spec, NULL, k, a, 0);
                *finished = 1;
                return emitted;
            }
            float p_x = 0.0f;
            int draft = q && j < k;
            id = seq_spec_sample(e, s, row0 + j, draft ? q + j * nv : NULL, j < k ? prop[j] : -1,
                                 &p_x);
            keep = j < k && id >= 0 &&
                   (draft ? spec_verify_keep(p_x, q[j * nv + prop[j]], arng) : id == prop[j]);
            if (keep)
                id = prop[j];
            if (s->p.logprobs >= 0 && id >= 0) {
                memset(&tk, 0, sizeof tk);
                engine_fill_logprobs(e->lp_row, (int)nv, id, s->p.logprobs, &tk);
                tkp = &tk;
                e->tr.logprob_rows++;
            }
            a += keep;
        }
        e->tr.constrained += model_sampler_constrained(s->sampler);
        emitted++;
        if (keep) /* its K/V, computed this step, is the token's */
            sched_core_advance(e->core, &s->req, 1);
        if (engine_seq_accept(e, s, id, tkp)) {
            if (!ids)
                sched_spec_observe(e->spec, NULL, k, a, 0);
            e->tr.spec_accepted += a;
            *finished = 1;
            return emitted;
        }
        if (!keep)
            break;
    }
    if (!ids)
        sched_spec_observe(e->spec, s->spec, k, a, n_hist0 + a);
    e->tr.spec_accepted += a;
    s->req.n_spec = 0;
    sched_core_trim(e->core, &s->req); /* the rejected proposals' blocks */
    if (rng)                           /* where plain decoding of the emitted tokens leaves it */
        model_sampler_rng_restore(s->sampler, rng, emitted);
    return emitted;
}

int engine_verify(sched_engine *e, seq *s, int row0, int k, int *n_jobs, int *n_runs) {
    if (s->mj || s->n_ban > 0 || s->p.logprobs >= 0) {
        int fin, n = seq_verify(e, s, row0, k, NULL, NULL, NULL, &fin);
        if (!fin)
            engine_seq_emit(e, s, SCHED_FINISH_NONE, NULL);
        return n;
    }
    const float *q = sched_spec_seq_q(s->spec);
    size_t nv = (size_t)model_get_config(e->m)->n_vocab;
    spec_run *r = &e->runs[(*n_runs)++];
    *r = (spec_run){s, *n_jobs, k, {{0}}};
    model_sampler_rng_save(s->sampler, &r->rng);
    for (int j = 0; j <= k; j++, (*n_jobs)++) {
        model_sample_job *jb = &e->jobs[*n_jobs];
        *jb = (model_sample_job){
            .row = row0 + j, .sampler = s->sampler, .hist = s->hist, .n_hist = s->n_hist + j};
        if (q && j < k) {
            jb->draft_q = q + j * nv;
            jb->draft_id = s->hist[s->n_hist + j];
            jb->p_draft = &e->job_p[*n_jobs];
        }
        e->job_seq[*n_jobs] = NULL; /* not a plain row */
    }
    return 0;
}

long long engine_verify_batched(sched_engine *e, int n_runs, int rc) {
    long long n_gen = 0;
    for (int i = 0; i < n_runs; i++) {
        spec_run *r = &e->runs[i];
        if (rc < 0) {
            engine_seq_finish(e, r->s, SCHED_FINISH_ERROR, "sampling failed");
            continue;
        }
        int fin;
        n_gen +=
            seq_verify(e, r->s, -1, r->k, e->job_ids + r->job0, e->job_p + r->job0, &r->rng, &fin);
        if (!fin)
            engine_seq_emit(e, r->s, SCHED_FINISH_NONE, NULL);
    }
    return n_gen;
}
