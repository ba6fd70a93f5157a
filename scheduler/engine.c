/* engine.c - the engine thread: the public calls, a sequence's life
 * (admission, sampling, stop strings, log-probs, pooling, deadlines), the
 * step, the event outbox and the thread's loop (see engine.h). Its other
 * parts (engine_int.h): resources in engine_load.c, grammar masks in
 * engine_park.c, speculative decoding in engine_spec.c. */
#include "scheduler/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_kv.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "scheduler/engine_int.h"
#include "scheduler/engine_mask.h"
#include "scheduler/engine_trace.h"
#include "scheduler/sched_core.h"
#include "scheduler/seq_text.h"
#include "scheduler/spec.h"

sched_engine_config sched_engine_config_default(void) {
    sched_engine_config c;
    memset(&c, 0, sizeof c);
    c.weights = MODEL_WEIGHTS_AUTO;
    c.max_seqs = 32;
    c.max_ctx = 0;
    c.max_batch_tokens = 512;
    c.block_size = 16;
    c.kv_cache_bytes = 0;
    c.prefix_caching = 1;
    c.max_waiting = 1024;
    c.max_waiting_tokens = 4L << 20;
    c.device = MODEL_DEVICE_CPU;
    c.gpu_memory_utilization = 0.9;
    c.cuda_graphs = 1;
    c.priority_aging_s = 10.0;
    c.spec = sched_spec_config_default();
    /* f16 K/V: half the memory per position, and no slower on the CPU
     * (16 streams, 128 in / 128 out: 340-343 tok/s against 323 with f32 in
     * paired runs; the decode step reads the cache as often as the weights). */
    c.kv_dtype = KERN_KV_F16;
    c.mask_workers = -1;
    return c;
}

const char *sched_finish_name(sched_finish f) {
    switch (f) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_ABORT: return "abort";
    case SCHED_FINISH_ERROR: return "error";
    case SCHED_FINISH_EXPIRED: return "expired";
    default: return "none";
    }
}

void sched_seq_params_free(sched_seq_params *p) {
    if (!p)
        return;
    free(p->prompt);
    free((void *)p->sampling.logit_bias_ids);
    free((void *)p->sampling.logit_bias);
    for (int i = 0; i < p->n_stop; i++)
        free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
    model_grammar_unref(p->grammar);
    memset(p, 0, sizeof *p);
}

void sched_event_free(sched_event *ev) {
    if (!ev)
        return;
    free(ev->text);
    free(ev->tokens);
    free(ev->prompt_tokens);
    free(ev->embedding);
    free(ev);
}

static void seq_free(sched_engine *e, seq *s) {
    if (!s)
        return;
    sched_spec_seq_free(s->spec); /* before the params: its sampler borrows their bias arrays */
    sched_seq_params_free(&s->p);
    free(s->hist);
    model_sampler_free(s->sampler);
    free(s->ban);
    sched_mask_job_release(e->masks, s->mj); /* a worker computing it frees it */
    free(s->park_row);
    seq_text_free(&s->text);
    free(s->toks);
    free(s->ptoks);
    free(s->emb_sum);
    sched_event_free(s->final_ev);
    free(s);
}

/* ---- outbox ----------------------------------------------------------- */

/* Engine thread: ev waits for the end of the step (engine_publish). */
static void outbox_push(sched_engine *e, sched_event *ev) {
    if (e->step_tail)
        e->step_tail->next = ev;
    else
        e->step_head = ev;
    e->step_tail = ev;
}

sched_event *sched_engine_drain(sched_engine *e) {
    pthread_mutex_lock(&e->mu);
    sched_event *h = e->out_head;
    e->out_head = e->out_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    return h;
}

int engine_seq_emit(sched_engine *e, seq *s, sched_finish finish, const char *err) {
    int final = finish != SCHED_FINISH_NONE;
    sched_event *ev = final ? s->final_ev : brisk_calloc(1, sizeof *ev);
    if (!ev)
        return BRISK_ENOMEM;
    if (final)
        s->final_ev = NULL;
    ev->user = s->p.user;
    ev->finish = finish;
    if (seq_text_take(&s->text, final, &ev->text, &ev->text_len) < 0) {
        if (!final) {
            free(ev);
            return BRISK_ENOMEM;
        }
        ev->finish = SCHED_FINISH_ERROR;
        err = "out of memory";
    }
    ev->n_tokens = s->n_toks;
    ev->tokens = s->toks;
    s->toks = NULL;
    s->n_toks = s->cap_toks = 0;
    if (!s->sent_ptoks && s->n_ptoks) {
        ev->prompt_tokens = s->ptoks;
        ev->n_prompt_tokens = s->n_ptoks;
        s->ptoks = NULL;
        s->sent_ptoks = 1;
    }
    ev->prompt_len = s->p.n_prompt;
    ev->completion_len = s->n_gen;
    ev->cached_tokens = s->req.n_cached;
    ev->deadline = final && s->deadline_hit;
    ev->stop_index =
        final && finish == SCHED_FINISH_STOP && s->text.stopped ? s->text.stop_which : -1;
    ev->t_event = brisk_now();
    ev->t_admitted = s->t_admit;
    if (err)
        snprintf(ev->err, sizeof ev->err, "%s", err);
    outbox_push(e, ev);
    return 0;
}

/* ---- public API (loop thread) ---------------------------------------- */

int sched_engine_submit(sched_engine *e, sched_seq_params *p) {
    if (!e || !p || !p->prompt || p->n_prompt < 1 || p->max_tokens < 1 ||
        p->logprobs > SCHED_MAX_TOP_LOGPROBS)
        return BRISK_EINVAL;
    seq *s = brisk_calloc(1, sizeof *s);
    if (!s)
        return BRISK_ENOMEM;
    s->final_ev = brisk_calloc(1, sizeof *s->final_ev);
    if (!s->final_ev) {
        free(s);
        return BRISK_ENOMEM;
    }
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->state != SCHED_READY)
        rc = BRISK_EUNSUPPORTED;
    else if (p->pooling && (p->pooling > SCHED_POOL_MEAN || !model_backend_has_hidden(e->be)))
        rc = BRISK_EUNSUPPORTED;
    else if (p->n_prompt >= e->max_ctx)
        rc = BRISK_ERANGE;
    else if (e->n_waiting >= e->cfg.max_waiting ||
             e->waiting_tokens + p->n_prompt > e->cfg.max_waiting_tokens)
        rc = BRISK_ENOSPC;
    if (rc == 0) {
        s->p = *p;
        memset(p, 0, sizeof *p);
        s->req.slot = -1;
        s->t_submit = brisk_now();
        s->submit_no = ++e->n_submitted;
        if (e->inbox_tail)
            e->inbox_tail->next = s;
        else
            e->inbox_head = s;
        e->inbox_tail = s;
        e->n_waiting++;
        e->waiting_tokens += s->p.n_prompt;
        e->stats.waiting = e->n_waiting;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (rc) {
        free(s->final_ev);
        free(s);
    }
    return rc;
}

void sched_engine_cancel(sched_engine *e, void *user) {
    cancel_msg *c = brisk_calloc(1, sizeof *c);
    if (!c)
        return; /* the sequence runs to its end instead */
    c->user = user;
    pthread_mutex_lock(&e->mu);
    c->n_submitted = e->n_submitted;
    c->next = e->cancels;
    e->cancels = c;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

sched_state sched_engine_state(const sched_engine *e, char *err, size_t err_len) {
    pthread_mutex_lock((pthread_mutex_t *)&e->mu);
    sched_state s = e->state;
    if (err && err_len)
        snprintf(err, err_len, "%s", e->load_err);
    pthread_mutex_unlock((pthread_mutex_t *)&e->mu);
    return s;
}

const model *sched_engine_model(const sched_engine *e) {
    return sched_engine_state(e, NULL, 0) == SCHED_READY ? e->m : NULL;
}

int sched_engine_max_ctx(const sched_engine *e) {
    return e->max_ctx;
}

int sched_engine_can_pool(const sched_engine *e) {
    return sched_engine_model(e) && model_backend_has_hidden(e->be);
}

void sched_engine_get_stats(const sched_engine *e, sched_engine_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&e->mu);
    *out = e->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&e->mu);
}

/* ---- engine thread ---------------------------------------------------- */

void engine_seq_finish(sched_engine *e, seq *s, sched_finish f, const char *err) {
    if (s->ready)
        sched_core_remove(e->core, &s->req);
    if (s->spec) /* its draft slot back; (suffix) its output into the index */
        sched_spec_seq_end(e->spec, s->spec, s->hist + s->p.n_prompt, s->n_gen);
    if (s->has_deadline)
        e->n_deadlines--;
    if (s->parked)
        e->n_parked--;
    engine_seq_emit(e, s, f, err);
    seq_free(e, s);
}

static int push_token(seq *s, const sched_token *t) {
    if (brisk_grow(&s->toks, &s->cap_toks, (size_t)s->n_toks + 1, sizeof *s->toks, 8, 0) < 0)
        return BRISK_ENOMEM;
    s->toks[s->n_toks++] = *t;
    return 0;
}

void engine_fill_logprobs(const float *row, int n_vocab, int32_t id, int n_top, sched_token *t) {
    float mx = row[0];
    for (int i = 1; i < n_vocab; i++)
        mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)row[i] - mx);
    float lse = mx + (float)log(sum);
    t->id = id;
    t->logprob = row[id] - lse;
    t->n_top = 0;
    /* Insertion into a small sorted list: n_top <= 20. */
    for (int i = 0; i < n_vocab && n_top > 0; i++) {
        float v = row[i];
        if (t->n_top == n_top && v <= row[t->top_id[n_top - 1]])
            continue;
        int k = t->n_top < n_top ? t->n_top++ : n_top - 1;
        while (k > 0 && row[t->top_id[k - 1]] < v) {
            t->top_id[k] = t->top_id[k - 1];
            k--;
        }
        t->top_id[k] = i;
    }
    for (int k = 0; k < t->n_top; k++)
        t->top_logprob[k] = row[t->top_id[k]] - lse;
}

static void drain_inbox(sched_engine *e, seq **in, cancel_msg **cancels) {
    *in = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    *cancels = e->cancels;
    e->cancels = NULL;
}

/* The sequence with this user pointer, waiting or running, or NULL. */
static seq *find_seq(sched_engine *e, const void *user) {
    sched_req *const *run = sched_core_running(e->core);
    for (int i = 0; i < sched_core_n_running(e->core); i++)
        if (((seq *)run[i])->p.user == user)
            return (seq *)run[i];
    for (sched_req *r = sched_core_waiting_head(e->core); r; r = r->next)
        if (((seq *)r)->p.user == user)
            return (seq *)r;
    return NULL;
}

/* A sequence leaves the submit-side waiting count when it first runs or ends. */
static void uncount_waiting(sched_engine *e, seq *s) {
    if (s->left_waiting)
        return;
    s->left_waiting = 1;
    pthread_mutex_lock(&e->mu);
    e->n_waiting--;
    e->waiting_tokens -= s->p.n_prompt;
    pthread_mutex_unlock(&e->mu);
}

static void apply_cancel(sched_engine *e, const cancel_msg *c) {
    seq *s = find_seq(e, c->user);
    if (!s || s->submit_no > c->n_submitted) /* gone, or a later request at the same address */
        return;
    uncount_waiting(e, s);
    engine_seq_finish(e, s, SCHED_FINISH_ABORT, NULL);
}

/* Whether the prompt decodes to some text: then the output continues it. */
static int prompt_has_text(const sched_engine *e, const seq *s) {
    return tok_ids_have_text(model_get_vocab(e->m), s->p.prompt, s->p.n_prompt);
}

/* Sets up a sequence arriving from the inbox and queues it; on failure it
 * ends at once with an error event. */
static void seq_enter(sched_engine *e, seq *s) {
    const model_config *c = model_get_config(e->m);
    int max_new = e->max_ctx - s->p.n_prompt;
    if (s->p.max_tokens > max_new)
        s->p.max_tokens = max_new;
    s->cap_hist = s->p.n_prompt + s->p.max_tokens;
    s->hist = brisk_malloc((size_t)s->cap_hist * sizeof *s->hist);
    s->sampler = model_sampler_create(&s->p.sampling, c->n_vocab);
    int want_ptoks = s->p.prompt_logprobs && s->p.logprobs >= 0 && s->p.n_prompt > 1;
    if (want_ptoks) {
        s->ptoks = brisk_calloc((size_t)s->p.n_prompt - 1, sizeof *s->ptoks);
        s->n_ptoks = s->ptoks ? s->p.n_prompt - 1 : 0;
    }
    if (!s->hist || !s->sampler || (want_ptoks && !s->ptoks) ||
        seq_text_init(&s->text, model_get_vocab(e->m), (const char *const *)s->p.stop, s->p.n_stop,
                      prompt_has_text(e, s)) < 0) {
        uncount_waiting(e, s);
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return;
    }
    s->text.keep_stop = s->p.include_stop_str;
    if (s->p.pooling) {
        s->emb_sum = brisk_calloc((size_t)c->dim, sizeof *s->emb_sum);
        if (!s->emb_sum) {
            uncount_waiting(e, s);
            engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
            return;
        }
    }
    if (s->p.grammar) {
        if (!e->gvocab)
            e->gvocab = model_grammar_vocab_create(model_get_vocab(e->m));
        model_grammar_matcher *gm =
            e->gvocab ? model_grammar_matcher_create(s->p.grammar, e->gvocab, NULL) : NULL;
        /* zeroed: the grammar writes the words of the tokenizer's vocabulary,
         * which a dummy model's --tokenizer may make smaller than n_vocab */
        uint32_t *mask = brisk_calloc(((size_t)c->n_vocab + 31) / 32, sizeof *mask);
        s->mj = sched_mask_job_create(gm, mask); /* takes both */
        if (!s->mj) {
            uncount_waiting(e, s);
            engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
            return;
        }
        model_sampler_set_allowed(s->sampler, s->mj->mask);
        engine_seq_mask_submit(e, s); /* the first mask, computed while the prompt is */
    }
    if (s->p.min_tokens > 0) {
        int n_eog = s->p.ignore_eos ? 0 : e->n_eog;
        s->ban = brisk_malloc(((size_t)n_eog + (size_t)s->p.n_stop_ids + 1) * sizeof *s->ban);
        if (!s->ban) {
            uncount_waiting(e, s);
            engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
            return;
        }
        memcpy(s->ban, e->eog_ids, (size_t)n_eog * sizeof *s->ban);
        if (s->p.n_stop_ids)
            memcpy(s->ban + n_eog, s->p.stop_ids, (size_t)s->p.n_stop_ids * sizeof *s->ban);
        s->n_ban = n_eog + s->p.n_stop_ids;
        model_sampler_set_banned(s->sampler, s->ban, s->n_ban);
        s->text.stops_off = 1;
    }
    /* Without its state a sequence just never speculates. */
    if (e->spec && !s->p.pooling)
        s->spec = sched_spec_seq_create(e->spec, &s->p.sampling);
    memcpy(s->hist, s->p.prompt, (size_t)s->p.n_prompt * sizeof *s->hist);
    s->n_hist = s->p.n_prompt;
    s->req.tokens = s->hist;
    s->req.n_tokens = s->n_hist;
    s->req.n_prompt = s->p.n_prompt;
    s->req.fork_of = NULL;
    s->req.no_prefix_match = s->p.pooling == SCHED_POOL_MEAN;
    s->req.priority = s->p.priority;
    s->req.t_arrival = s->t_submit;
    if (s->p.fork_of && !want_ptoks && !s->p.pooling) {
        seq *src = find_seq(e, s->p.fork_of);
        if (src)
            s->req.fork_of = &src->req;
    }
    s->ready = 1;
    if (s->p.deadline > 0) {
        s->has_deadline = 1;
        e->n_deadlines++;
    }
    sched_core_add(e->core, &s->req);
}

/* Samples logits row `row` for s alone, with log-probs of the raw row (the
 * sampler may modify the row: penalties, temperature). Returns the id, or a
 * negative code. */
static int32_t seq_sample_logprobs(sched_engine *e, seq *s, int row, sched_token *t) {
    const model_config *c = model_get_config(e->m);
    const float *raw = NULL;
    int rc = model_backend_logits(e->be, row, &raw);
    if (rc < 0)
        return rc;
    memcpy(e->lp_row, raw, (size_t)c->n_vocab * sizeof(float));
    model_sample_job job = {
        .row = row, .sampler = s->sampler, .hist = s->hist, .n_hist = s->n_hist};
    int32_t id = -1;
    rc = model_backend_sample(e->be, &job, 1, &id);
    if (rc < 0)
        return rc;
    engine_fill_logprobs(e->lp_row, c->n_vocab, id, s->p.logprobs, t);
    return id;
}

int engine_seq_accept(sched_engine *e, seq *s, int32_t id, sched_token *tp) {
    const tok_vocab *v = model_get_vocab(e->m);
    sched_token t;
    if (tp)
        t = *tp;
    else
        memset(&t, 0, sizeof t);
    if (id < 0 || id >= model_get_config(e->m)->n_vocab) {
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, "sampling failed");
        return 1;
    }
    t.id = id;
    if (push_token(s, &t) < 0) {
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    s->hist[s->n_hist++] = id;
    s->req.n_tokens = s->n_hist;
    s->n_gen++;
    if (!s->p.ignore_eos && tok_is_eog(v, id)) {
        engine_seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    int grc = s->mj ? model_grammar_accept(s->mj->gm, id) : 0;
    if (grc == BRISK_ERANGE) { /* its state outgrew the grammar's limits */
        engine_seq_finish_grammar(e, s, grc);
        return 1;
    }
    if (grc < 0) { /* the mask allowed it: never, short of memory */
        engine_seq_finish(e, s, SCHED_FINISH_ERROR,
                          grc == BRISK_EINVAL ? "the sampled token is outside the grammar"
                                              : brisk_strerror(grc));
        return 1;
    }
    if (s->n_ban > 0 && s->n_gen >= s->p.min_tokens) { /* min_tokens reached */
        model_sampler_set_banned(s->sampler, NULL, 0);
        s->n_ban = 0;
    }
    s->text.stops_off = s->n_gen < s->p.min_tokens;
    int hit = seq_text_push(&s->text, id);
    if (hit < 0) {
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    int stop_id = 0;
    for (int i = 0; i < s->p.n_stop_ids && !stop_id; i++)
        stop_id = s->p.stop_ids[i] == id;
    if (hit || stop_id || (s->mj && model_grammar_finished(s->mj->gm))) {
        engine_seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    /* n_hist - 1 positions computed; the next step computes one more. */
    if (s->n_gen >= s->p.max_tokens || s->n_hist >= e->max_ctx) {
        engine_seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        return 1;
    }
    if (s->mj) /* the next token's mask, while the next forward runs */
        engine_seq_mask_submit(e, s);
    return 0;
}

/* Pooling: the hidden state of position pos into s's sum (MEAN) or as its
 * last row (LAST); positions already added (before a preemption) are not
 * added twice. */
static void seq_embed_add(seq *s, const float *h, int dim, int pos) {
    if (pos < s->emb_upto)
        return;
    int mean = s->p.pooling == SCHED_POOL_MEAN;
    for (int d = 0; d < dim; d++)
        s->emb_sum[d] = mean ? s->emb_sum[d] + (double)h[d] : (double)h[d];
    s->emb_upto = pos + 1;
}

/* A pooling sequence's prompt is computed: its embedding goes out with the
 * final event (allocated at submit), and it ends. ok 0: a position's state
 * is missing (never expected: the backend gives every row asked for). */
static void seq_embed_done(sched_engine *e, seq *s, int ok) {
    int dim = model_get_config(e->m)->dim;
    float *v = ok ? brisk_malloc((size_t)dim * sizeof *v) : NULL;
    if (!v) {
        engine_seq_finish(e, s, SCHED_FINISH_ERROR, ok ? "out of memory" : "missing hidden states");
        return;
    }
    double div = s->p.pooling == SCHED_POOL_MEAN ? (double)s->p.n_prompt : 1.0;
    for (int d = 0; d < dim; d++)
        v[d] = (float)(s->emb_sum[d] / div);
    s->final_ev->embedding = v;
    s->final_ev->n_embedding = dim;
    engine_seq_finish(e, s, SCHED_FINISH_STOP, NULL);
}

/* Sequences past their deadline end: one that never ran with EXPIRED, one
 * that ran (even if preempted since) with what it has, finish LENGTH. */
static void expire_deadlines(sched_engine *e, double now) {
    if (e->n_deadlines == 0)
        return;
    sched_req *const *run = sched_core_running(e->core);
    for (int i = sched_core_n_running(e->core) - 1; i >= 0; i--) {
        seq *s = (seq *)run[i];
        if (s->p.deadline > 0 && now >= s->p.deadline) {
            s->deadline_hit = 1;
            engine_seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        }
    }
    for (sched_req *r = sched_core_waiting_head(e->core), *nx; r; r = nx) {
        nx = r->next;
        seq *s = (seq *)r;
        if (s->p.deadline <= 0 || now < s->p.deadline)
            continue;
        s->deadline_hit = 1;
        if (s->t_admit > 0) {
            engine_seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        } else {
            uncount_waiting(e, s);
            engine_seq_finish(e, s, SCHED_FINISH_EXPIRED,
                              "the request's deadline passed while it waited");
        }
    }
}

/* One engine step: schedule, one forward pass, sample, emit. Returns 1 when
 * it ran a forward pass (e->tr holds its record), else 0. */
static int step(sched_engine *e) {
    sched_plan plan;
    sched_trace_step *tr = &e->tr;
    memset(tr, 0, sizeof *tr);
    engine_sample_parked(e); /* before the step: the trace counts its time as host work */
    tr->t_start = brisk_now();
    engine_mask_step_begin(e);
    sched_core_set_now(e->core, tr->t_start);
    if (e->spec)
        engine_propose(e);
    sched_core_schedule(e->core, &plan);
    double now = brisk_now();
    for (int i = 0; i < plan.n_starved; i++) /* its context outgrew the whole KV pool */
        engine_seq_finish(e, (seq *)plan.starved[i], SCHED_FINISH_LENGTH, NULL);
    int n = 0, any_hid = 0;
    for (int i = 0; i < plan.n_entries; i++) {
        seq *s = (seq *)plan.entries[i].req;
        if (s->t_admit == 0) { /* first admission (not a return after preemption) */
            uncount_waiting(e, s);
            s->t_admit = now;
        }
        int pos0 = plan.entries[i].pos, cnt = plan.entries[i].n - plan.entries[i].n_spec;
        if (cnt == 1 && pos0 >= s->p.n_prompt && pos0 == s->n_hist - 1)
            tr->decode_rows++; /* its last generated token */
        else
            tr->prefill_tokens += cnt, tr->prefill_chunks++;
        for (int k = 0; k < plan.entries[i].n; k++) {
            int pos = plan.entries[i].pos + k;
            e->b_tok[n] = s->hist[pos];
            e->b_pos[n] = pos;
            e->b_seq[n] = s->req.slot;
            if (s->p.pooling) { /* hidden states, no logits */
                e->b_want[n] = 0;
                e->b_hid[n] =
                    s->p.pooling == SCHED_POOL_MEAN ? pos >= s->emb_upto : pos == s->p.n_prompt - 1;
                any_hid |= e->b_hid[n];
            } else {
                /* the last known token and each proposal past it */
                e->b_want[n] =
                    pos >= s->n_hist - 1 || (s->ptoks && !s->sent_ptoks && pos + 1 < s->p.n_prompt);
                e->b_hid[n] = 0;
            }
            n++;
        }
    }
    if (n == 0 && tr->unparked == 0)
        return 0;
    if (n == 0) { /* only rows sampled from their kept logits: a step without a forward */
        pthread_mutex_lock(&e->mu);
        tr->step = ++e->stats.steps;
        pthread_mutex_unlock(&e->mu);
        tr->sched_s = brisk_now() - tr->t_start;
        tr->sampled = tr->unparked;
        return 1;
    }
    model_batch b = {n, e->b_tok, e->b_pos, e->b_seq, e->b_want, any_hid ? e->b_hid : NULL};
    int n_out = 0;
    tr->step = e->stats.steps + 1; /* the engine thread alone writes stats */
    double t0 = brisk_now();
    int rc = model_backend_forward(e->be, e->kv, &b, &n_out);
    double t_fwd = brisk_now() - t0;
    engine_mask_grace_begin(e, t_fwd);
    sched_spec_step_time(e->spec, n, t_fwd); /* the policy measures a proposal's cost */
    tr->sched_s = t0 - tr->t_start;
    tr->forward_s = t_fwd;
    tr->tokens = n;
    tr->pass = e->be->last_pass;
    tr->admitted = plan.n_admitted;
    tr->preempted = plan.n_preempted;
    if (rc < 0) { /* every sequence of the batch is in an unknown state */
        BRISK_ERROR("engine: forward pass failed: %s", brisk_strerror(rc));
        for (int i = 0; i < plan.n_entries; i++) {
            seq *s = (seq *)plan.entries[i].req;
            if (s->req.running)
                engine_seq_finish(e, s, SCHED_FINISH_ERROR, brisk_strerror(rc));
        }
        return 1;
    }
    sched_core_commit(e->core, &plan);
    const model_config *c = model_get_config(e->m);
    long long n_prompt = 0, n_gen = 0;
    int row = 0, t = 0, n_jobs = 0, n_runs = 0;
    const float *hid = NULL;
    int n_hid = 0, hrow = 0;
    if (any_hid && model_backend_hidden(e->be, &hid, &n_hid) < 0)
        n_hid = 0;
    for (int i = 0; i < plan.n_entries; i++) {
        seq *s = (seq *)plan.entries[i].req;
        int pos0 = plan.entries[i].pos, cnt = plan.entries[i].n;
        int sample_row = -1;
        for (int k = 0; k < cnt; k++, t++) {
            if (e->b_hid[t] && hrow < n_hid)
                seq_embed_add(s, hid + (size_t)hrow++ * c->dim, c->dim, pos0 + k);
            if (!e->b_want[t])
                continue;
            int pos = pos0 + k;
            if (s->ptoks && !s->sent_ptoks && pos + 1 < s->p.n_prompt) {
                const float *r = NULL;
                if (model_backend_logits(e->be, row, &r) == 0)
                    engine_fill_logprobs(r, c->n_vocab, s->p.prompt[pos + 1], s->p.logprobs,
                                         &s->ptoks[pos]);
            }
            if (pos == s->n_hist - 1)
                sample_row = row;
            row++;
        }
        /* Prompt tokens count once, when first computed; recomputation after
         * a preemption is not new prompt work. */
        if (s->req.n_preempted == 0 && pos0 < s->p.n_prompt)
            n_prompt += (pos0 + cnt < s->p.n_prompt ? pos0 + cnt : s->p.n_prompt) - pos0;
        if (s->p.pooling) {
            if (pos0 + cnt >= s->p.n_prompt)
                seq_embed_done(e, s, s->emb_upto == s->p.n_prompt);
            continue;
        }
        if (sample_row < 0)
            continue;
        if (plan.entries[i].n_spec > 0) { /* a speculative run: rows sample_row .. + n_spec */
            engine_seq_unpark(e, s);      /* never parked when proposed for (engine_propose) */
            n_gen += engine_verify(e, s, sample_row, plan.entries[i].n_spec, &n_jobs, &n_runs);
            continue;
        }
        if (s->mj) { /* the grammar's allowed tokens, the sampler's mask */
            double tm = brisk_now();
            int allowed = 0, ready = engine_seq_mask_ready(e, s, &allowed);
            tr->mask_s += brisk_now() - tm;
            if (!ready) { /* not there yet: it sits out, the other rows go on */
                int prc = engine_seq_park(e, s, sample_row);
                if (prc < 0)
                    engine_seq_finish(e, s, SCHED_FINISH_ERROR, brisk_strerror(prc));
                else
                    tr->parked++;
                continue;
            }
            if (allowed <= 0) {
                engine_seq_finish_grammar(e, s, allowed);
                continue;
            }
        }
        engine_seq_unpark(e, s); /* recomputed after a preemption: this row replaces the kept one */
        n_gen++;
        tr->constrained += model_sampler_constrained(s->sampler);
        if (s->p.logprobs >= 0) { /* alone: its raw row is copied first */
            sched_token tk;
            memset(&tk, 0, sizeof tk);
            double ts = brisk_now();
            int32_t id = seq_sample_logprobs(e, s, sample_row, &tk);
            tr->sample_s += brisk_now() - ts;
            tr->logprob_rows++;
            if (!engine_seq_accept(e, s, id, &tk))
                engine_seq_emit(e, s, SCHED_FINISH_NONE, NULL);
            continue;
        }
        e->jobs[n_jobs] = (model_sample_job){
            .row = sample_row, .sampler = s->sampler, .hist = s->hist, .n_hist = s->n_hist};
        e->job_seq[n_jobs++] = s;
    }
    /* Every other sampled row in one call (on CUDA: one kernel, ids only). */
    if (n_jobs > 0) {
        double ts = brisk_now();
        rc = model_backend_sample(e->be, e->jobs, n_jobs, e->job_ids);
        tr->sample_s += brisk_now() - ts;
        if (rc < 0)
            BRISK_ERROR("engine: sampling failed: %s", brisk_strerror(rc));
        for (int j = 0; j < n_jobs; j++)
            if (e->job_seq[j] &&
                !engine_seq_accept(e, e->job_seq[j], rc < 0 ? -1 : e->job_ids[j], NULL))
                engine_seq_emit(e, e->job_seq[j], SCHED_FINISH_NONE, NULL);
        n_gen += engine_verify_batched(e, n_runs, rc);
    }
    kv_cache_stats ks;
    kv_cache_get_stats(e->kv, &ks);
    pthread_mutex_lock(&e->mu);
    e->stats.steps++;
    e->stats.prompt_tokens += n_prompt;
    e->stats.generation_tokens += n_gen;
    e->stats.forward_s += t_fwd;
    e->stats.batch_tokens += n;
    e->stats.kv_slots_allocated += ks.slots_allocated;
    e->stats.kv_slots_filled += ks.slots_filled;
    pthread_mutex_unlock(&e->mu);
    tr->sampled = (int)n_gen + tr->unparked;
    return 1;
}

/* The step's stats and events, made visible to the loop under one lock. */
static void engine_publish(sched_engine *e) {
    kv_cache_stats ks;
    kv_cache_get_stats(e->kv, &ks);
    pthread_mutex_lock(&e->mu);
    if (e->step_head) {
        if (e->out_tail)
            e->out_tail->next = e->step_head;
        else
            e->out_head = e->step_head;
        e->out_tail = e->step_tail;
        e->step_head = e->step_tail = NULL;
    }
    e->stats.running = sched_core_n_running(e->core);
    e->stats.waiting = sched_core_n_waiting(e->core) + (int)(e->inbox_head != NULL);
    e->stats.kv_usage = ks.blocks_total ? (double)ks.blocks_used / ks.blocks_total : 0;
    e->stats.kv = ks;
    e->stats.kv_block_size = kv_cache_block_size(e->kv);
    e->stats.kv_dtype = kern_kv_dtype_name(kv_cache_dtype(e->kv));
    e->stats.preemptions = sched_core_n_preemptions(e->core);
    sched_spec_get_stats(e->spec, &e->stats.spec); /* enabled from the start */
    pthread_mutex_unlock(&e->mu);
}

/* The traced step's times around it and the state after it, then its line.
 * t0: when this turn of the loop took its work; t_end: events published. */
static void trace_step(sched_engine *e, double t0, double t_end) {
    sched_trace_step *tr = &e->tr;
    tr->wall_s = t_end - tr->t_start;
    tr->host_s = tr->t_start - t0;
    tr->gap_s = e->t_step_end > 0 ? tr->t_start - e->t_step_end : 0.0;
    tr->running = sched_core_n_running(e->core);
    tr->waiting = sched_core_n_waiting(e->core);
    kv_cache_stats ks;
    kv_cache_get_stats(e->kv, &ks);
    tr->kv_blocks_used = ks.blocks_used;
    tr->kv_blocks_total = ks.blocks_total;
    sched_trace_write(e->trace, tr);
}

static void *engine_main(void *arg) {
    sched_engine *e = arg;
    int rc = engine_load(e);
    pthread_mutex_lock(&e->mu);
    e->state = rc < 0 ? SCHED_FAILED : SCHED_READY;
    pthread_mutex_unlock(&e->mu);
    if (rc == 0)
        engine_publish(e);
    uv_async_send(e->async);
    if (rc < 0)
        return NULL;
    for (;;) {
        seq *in;
        cancel_msg *cancels;
        /* About to sleep, maybe: the trace's lines to disk first (not under
         * mu, so submitters never wait for the file). */
        if (e->trace && sched_core_n_running(e->core) == 0 && sched_core_n_waiting(e->core) == 0)
            sched_trace_flush(e->trace);
        pthread_mutex_lock(&e->mu);
        /* Sleep only with nothing to do: no new work, and nothing running or
         * waiting (a waiting sequence is admitted as soon as it fits). */
        while (!e->quit && !e->inbox_head && !e->cancels && sched_core_n_running(e->core) == 0 &&
               sched_core_n_waiting(e->core) == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        int quit = e->quit;
        drain_inbox(e, &in, &cancels);
        pthread_mutex_unlock(&e->mu);
        if (quit) {
            while (in) {
                seq *n = in->next;
                seq_free(e, in);
                in = n;
            }
            while (cancels) {
                cancel_msg *n = cancels->next;
                free(cancels);
                cancels = n;
            }
            break;
        }
        double t0 = brisk_now();
        while (in) { /* arrival order into the waiting queue */
            seq *n = in->next;
            in->next = NULL;
            seq_enter(e, in);
            in = n;
        }
        while (cancels) {
            cancel_msg *n = cancels->next;
            apply_cancel(e, cancels);
            free(cancels);
            cancels = n;
        }
        expire_deadlines(e, brisk_now());
        int ran = step(e);
        engine_publish(e);
        if (!ran && e->n_parked > 0)
            engine_wait_masks(e);
        double t_end = brisk_now(), busy = t_end - t0;
        if (ran && e->trace)
            trace_step(e, t0, t_end);
        if (ran)
            e->t_step_end = t_end;
        pthread_mutex_lock(&e->mu);
        e->stats.busy_s += busy;
        pthread_mutex_unlock(&e->mu);
        uv_async_send(e->async);
    }
    return NULL;
}

int sched_engine_create(const sched_engine_config *cfg, uv_async_t *async, sched_engine **out,
                        char *err, size_t err_len) {
    *out = NULL;
    if (!cfg || !cfg->model_path || !async || cfg->max_seqs < 1 || cfg->max_seqs > 4096 ||
        cfg->max_batch_tokens < cfg->max_seqs || cfg->max_ctx < 0 || cfg->max_waiting < 0 ||
        cfg->block_size < 1 || cfg->block_size > 1024 || cfg->kv_cache_bytes < 0)
        return brisk_set_err(
            err, err_len, BRISK_EINVAL,
            "engine: bad configuration (max batch tokens must be >= max sequences; "
            "block size 1..1024)");
    if (sched_spec_config_check(&cfg->spec, err, err_len) < 0)
        return BRISK_EINVAL;
    sched_engine *e = calloc(1, sizeof *e);
    if (!e)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->cfg.step_trace = NULL; /* the path is borrowed: only the open file is kept */
    if (cfg->step_trace) {
        int rc = sched_trace_open(cfg->step_trace, &e->trace, err, err_len);
        if (rc < 0) {
            free(e);
            return rc;
        }
    }
    e->model_path = strdup(cfg->model_path);
    if (cfg->spec.draft_model) {
        e->draft_path = strdup(cfg->spec.draft_model);
        e->cfg.spec.draft_model = e->draft_path;
    }
    e->async = async;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->model_path || (cfg->spec.draft_model && !e->draft_path) ||
        pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        sched_trace_close(e->trace);
        free(e->model_path);
        free(e->draft_path);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "engine: cannot start its thread");
    }
    *out = e;
    return 0;
}

void sched_engine_free(sched_engine *e) {
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    sched_trace_close(e->trace); /* its last lines to disk */
    if (e->core) {
        for (sched_req *r; (r = sched_core_waiting_head(e->core));) {
            sched_core_remove(e->core, r);
            seq_free(e, (seq *)r);
        }
        while (sched_core_n_running(e->core) > 0) {
            sched_req *r = sched_core_running(e->core)[0];
            sched_core_remove(e->core, r);
            seq_free(e, (seq *)r);
        }
    }
    for (sched_event *ev = e->out_head, *n; ev; ev = n) {
        n = ev->next;
        sched_event_free(ev);
    }
    for (sched_event *ev = e->step_head, *n; ev; ev = n) {
        n = ev->next;
        sched_event_free(ev);
    }
    engine_unload(e);
    free(e->model_path);
    free(e->draft_path);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
