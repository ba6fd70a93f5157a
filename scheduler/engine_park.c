/* engine_park.c - grammar masks on the engine's side: a sequence's next
 * mask asked for as soon as its token is accepted, the step's allowance of
 * mask work, rows that sit out for a late mask and are sampled when it
 * comes, and the engine's wait when only those are left (engine_int.h;
 * the mask workers are engine_mask.c, the reasons in engine_mask.h). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/grammar.h"
#include "scheduler/engine_int.h"

/* What the engine may spend of its own time on masks rather than let a row
 * sit out a step (the choice changes when a token is sampled, never which):
 * per step, walks of at most MASK_INLINE_UNITS each and MASK_STEP_UNITS in
 * all (a JSON state's walk over a 49,152-token vocabulary is ~30,000 units
 * inside a value and ~270,000 inside a string, ~8 ns a unit), and waiting
 * for masks a worker is finishing, at most a tenth of the last forward and
 * at most 1 ms. A sequence whose mask missed both sits out, and is not
 * waited for again for MASK_COSTLY_TOKENS tokens. */
#define MASK_INLINE_UNITS (64 * 1024)
#define MASK_STEP_UNITS (256 * 1024)
#define MASK_GRACE_MAX_S 1e-3
#define MASK_COSTLY_TOKENS 16

void engine_mask_step_begin(sched_engine *e) {
    e->mask_units = MASK_STEP_UNITS;
}

void engine_mask_grace_begin(sched_engine *e, double t_fwd) {
    double grace = 0.1 * t_fwd < MASK_GRACE_MAX_S ? 0.1 * t_fwd : MASK_GRACE_MAX_S;
    e->mask_grace_until = brisk_now() + grace;
}

void engine_seq_mask_submit(sched_engine *e, seq *s) {
    s->mj->delay = e->cfg.mask_delay_steps;
    if (s->mask_costly > 0)
        s->mask_costly--;
    sched_mask_submit(e->masks, s->mj);
}

long long engine_masks_done(sched_engine *e) {
    pthread_mutex_lock(&e->mu);
    long long n = e->masks_done;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void engine_wait_mask_done(sched_engine *e, long long seen, double until) {
    double now = brisk_now();
    if (now >= until)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)((until - now) * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&e->mu);
    while (!e->quit && e->masks_done == seen)
        if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&e->mu);
}

int engine_seq_mask_ready(sched_engine *e, seq *s, int *rc) {
    long long work = 0;
    sched_mask_state st = sched_mask_poll(e->masks, s->mj, rc, &work);
    if (st == SCHED_MASK_QUEUED && sched_mask_pool_workers(e->masks) == 0 &&
        sched_mask_run_here(e->masks, s->mj, -1))
        st = sched_mask_poll(e->masks, s->mj, rc, &work);
    if (st == SCHED_MASK_QUEUED && s->mask_costly == 0 && e->mask_units > 0) {
        long long budget = e->mask_units < MASK_INLINE_UNITS ? e->mask_units : MASK_INLINE_UNITS;
        if (sched_mask_run_here(e->masks, s->mj, budget)) {
            st = sched_mask_poll(e->masks, s->mj, rc, &work);
            e->mask_units -= work;
        } else {
            e->mask_units -= budget;
        }
    }
    double until = e->mask_grace_until;
    while (st == SCHED_MASK_RUNNING && s->mask_costly == 0 && brisk_now() < until) {
        long long seen = engine_masks_done(e);
        st = sched_mask_poll(e->masks, s->mj, rc, &work);
        if (st == SCHED_MASK_RUNNING)
            engine_wait_mask_done(e, seen, until);
    }
    if (st != SCHED_MASK_READY) {
        s->mask_costly = MASK_COSTLY_TOKENS;
        return 0;
    }
    if (s->mj->delay > 0) { /* tests: held back one more step */
        s->mj->delay--;
        return 0;
    }
    return 1;
}

void engine_seq_finish_grammar(sched_engine *e, seq *s, int rc) {
    if (rc == BRISK_ERANGE && s->final_ev) {
        model_grammar_limits lim = model_grammar_limits_default();
        char why[160];
        snprintf(why, sizeof why,
                 "a token needed more than %lld units of matcher work or %d parse stacks",
                 lim.max_work, lim.max_stacks);
        s->final_ev->grammar_cost = 1;
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, why);
        return;
    }
    engine_seq_finish(e, s, SCHED_FINISH_ERROR,
                      rc == 0 ? "the grammar allows no token here" : brisk_strerror(rc));
}

int engine_seq_park(sched_engine *e, seq *s, int row) {
    size_t nv = (size_t)model_get_config(e->m)->n_vocab;
    const float *r = NULL;
    int rc = model_backend_logits(e->be, row, &r);
    if (rc < 0)
        return rc;
    if (!s->park_row && !(s->park_row = brisk_malloc(nv * sizeof *s->park_row)))
        return BRISK_ENOMEM;
    memcpy(s->park_row, r, nv * sizeof *r);
    if (!s->parked)
        e->n_parked++;
    s->parked = 1;
    return 0;
}

void engine_seq_unpark(sched_engine *e, seq *s) {
    if (s->parked)
        e->n_parked--;
    s->parked = 0;
}

void engine_mask_done(void *ctx) {
    sched_engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->masks_done++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_sample_parked(sched_engine *e) {
    if (e->n_parked == 0)
        return;
    int nv = model_get_config(e->m)->n_vocab;
    long long n_gen = 0;
    sched_req *const *run = sched_core_running(e->core);
    for (int i = sched_core_n_running(e->core) - 1; i >= 0; i--) {
        seq *s = (seq *)run[i];
        int allowed = 0;
        if (!s->parked || !engine_seq_mask_ready(e, s, &allowed))
            continue;
        engine_seq_unpark(e, s);
        if (allowed <= 0) {
            engine_seq_finish_grammar(e, s, allowed);
            continue;
        }
        sched_token tk;
        memset(&tk, 0, sizeof tk);
        if (s->p.logprobs >= 0) /* the raw row, before the sampler edits it */
            memcpy(e->lp_row, s->park_row, (size_t)nv * sizeof *e->lp_row);
        int32_t id = model_sampler_sample(s->sampler, s->park_row, s->hist, s->n_hist);
        if (id >= 0 && s->p.logprobs >= 0)
            engine_fill_logprobs(e->lp_row, nv, id, s->p.logprobs, &tk);
        n_gen++;
        e->tr.unparked++;
        e->tr.constrained++;
        e->tr.logprob_rows += s->p.logprobs >= 0;
        if (!engine_seq_accept(e, s, id, s->p.logprobs >= 0 ? &tk : NULL))
            engine_seq_emit(e, s, SCHED_FINISH_NONE, NULL);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.generation_tokens += n_gen;
    pthread_mutex_unlock(&e->mu);
}

void engine_wait_masks(sched_engine *e) {
    sched_req *const *run = sched_core_running(e->core);
    for (int i = 0; i < sched_core_n_running(e->core); i++) {
        seq *s = (seq *)run[i];
        int rc;
        long long work;
        if (!s->parked)
            continue;
        if (sched_mask_run_here(e->masks, s->mj, -1) ||
            sched_mask_poll(e->masks, s->mj, &rc, &work) == SCHED_MASK_READY)
            return; /* ready now (or held back a step by mask_delay_steps) */
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 10 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&e->mu);
    while (!e->quit && !e->inbox_head && !e->cancels && e->masks_done == e->masks_seen)
        if (pthread_cond_timedwait(&e->cv, &e->mu, &until) != 0)
            break;
    e->masks_seen = e->masks_done;
    pthread_mutex_unlock(&e->mu);
}
