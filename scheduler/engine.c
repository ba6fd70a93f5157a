/* engine.c - the engine thread: admission, batched steps, sampling, stop
 * strings, log-probs and the event outbox (see engine.h). */
#include "scheduler/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_pool.h"
#include "kv/kv_cache.h"
#include "models/backend.h"
#include "scheduler/engine_mask.h"
#include "scheduler/engine_trace.h"
#include "scheduler/sched_core.h"
#include "scheduler/sched_setup.h"
#include "scheduler/seq_text.h"
#include "scheduler/spec.h"
#include "scheduler/spec_draft.h"
#include "scheduler/spec_verify.h"

typedef struct seq {
    sched_req req;      /* the scheduler's view: tokens = hist (first: casts) */
    uint64_t submit_no; /* 1, 2, ... in submission order (under mu) */
    struct seq *next;   /* inbox link */
    sched_seq_params p;
    int32_t *hist; /* prompt then generated tokens */
    int n_hist, cap_hist;
    int n_gen;
    model_sampler *sampler;
    int32_t *ban; /* while n_gen < min_tokens: EOS and stop ids, the sampler's ban */
    int n_ban;
    /* The constraint: its matcher and the mask of its next token (the
     * sampler's), computed by a mask worker (engine_mask.h); or NULL. */
    sched_mask_job *mj;
    /* Sitting out: its last forward's logits row, kept until its mask is
     * ready, then sampled (sample_parked). */
    int parked;
    float *park_row;   /* [n_vocab], made on the first park */
    int mask_costly;   /* tokens left before the engine waits for its masks again */
    seq_text text;     /* detokenizer + stop strings + UTF-8 hold-back */
    sched_token *toks; /* tokens since the last event */
    int n_toks;
    size_t cap_toks;
    sched_token *ptoks; /* prompt log-probs, sent with the first event */
    int n_ptoks;
    int sent_ptoks;
    sched_event *final_ev; /* allocated at submit: the final event never waits for memory */
    int ready;             /* hist, sampler and text set up (on entering the engine) */
    int left_waiting;      /* no longer counted against the submit-side waiting caps */
    double t_submit, t_admit;
    int deadline_hit;     /* its deadline ended it */
    int has_deadline;     /* counted in sched_engine.n_deadlines while it is in the engine */
    double *emb_sum;      /* pooling: the sum (MEAN) or last row (LAST) of hidden states */
    int emb_upto;         /* positions already added (a preempted MEAN recomputes the rest) */
    sched_spec_seq *spec; /* speculative decoding's state, or NULL (spec.h) */
} seq;

typedef struct cancel_msg {
    struct cancel_msg *next;
    void *user;
    /* Submissions made before the cancel: a sequence submitted after it is
     * another request that reuses the user pointer (the first one's final
     * event was drained and its memory freed and allocated again before the
     * engine saw the cancel), and is left alone. */
    uint64_t n_submitted;
} cancel_msg;

struct sched_engine {
    sched_engine_config cfg;
    char *model_path;
    char *draft_path; /* cfg.spec.draft_model, owned (the load runs after create returns) */
    uv_async_t *async;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    /* under mu */
    seq *inbox_head, *inbox_tail;
    cancel_msg *cancels;
    uint64_t n_submitted; /* sequences accepted by sched_engine_submit */
    sched_event *out_head, *out_tail;
    int n_waiting; /* inbox + waiting queue */
    long waiting_tokens;
    sched_state state;
    char load_err[256];
    sched_engine_stats stats;
    /* engine thread only */
    /* The events of the step in progress: they join the outbox together with
     * the stats of the same step (engine_publish), so that a client that sees
     * a sequence's final event also sees its KV blocks released. */
    sched_event *step_head, *step_tail;
    sched_setup setup; /* owns the model, the backend and the KV cache */
    model *m;          /* setup.m */
    model_backend *be; /* setup.be: the forward pass and sampling, CPU or CUDA */
    kv_cache *kv;      /* setup.kv */
    sched_core *core;
    kern_pool *pool;
    int max_ctx;
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    uint8_t *b_hid;   /* tokens whose hidden state a pooling sequence needs */
    int n_deadlines;  /* sequences in the engine with a deadline: 0 skips the scan */
    seq **b_owner;    /* per batch token: its sequence */
    float *lp_row;    /* copy of one logits row for log-probs */
    int32_t *eog_ids; /* every end-of-generation id of the vocabulary (min_tokens bans them) */
    int n_eog;
    model_grammar_vocab
        *gvocab;             /* the vocabulary as a trie, for grammar masks (made on first use) */
    sched_mask_pool *masks;  /* the grammar mask workers */
    int n_parked;            /* running sequences sitting out for their masks */
    long long masks_done;    /* under mu: jobs the workers finished (wakes the engine) */
    long long masks_seen;    /* masks_done when the engine last waited for masks */
    long long mask_units;    /* this step's allowance of inline mask work (seq_mask_ready) */
    double mask_grace_until; /* and until when it may wait for workers' masks */
    model_sample_job *jobs;  /* rows sampled together after a forward (max_batch_tokens) */
    seq **job_seq;
    int32_t *job_ids;
    float *job_p; /* p(draft_id) of draft-model verification rows */
    /* Speculative decoding (spec.h), or NULL: the proposer, this step's
     * candidates and their sequences, and the runs verified from the one
     * sample call (engine_verify_batched). */
    sched_spec *spec;
    sched_spec_cand *cands;
    seq **cand_seq;
    struct spec_run *runs;
    /* --step-trace: the file (NULL: off), the record step() fills, and when
     * the last traced step ended. */
    sched_trace *trace;
    sched_trace_step tr;
    double t_step_end;
};

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

/* Builds the event for s: new text, tokens since the last event and, on the
 * first event, the prompt log-probs. finish != NONE makes it the last, and
 * the last one always goes out: its record was allocated at submit, and when
 * its text cannot be taken it ends the sequence as an error instead. A delta
 * that fails leaves everything in s for the next event. */
static int seq_emit(sched_engine *e, seq *s, sched_finish finish, const char *err) {
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

/* Ends s: out of the scheduler (its KV blocks freed now), final event, freed.
 * The final event cannot fail (see seq_emit), so the server always learns
 * that the sequence ended and can release its request. */
static void seq_finish(sched_engine *e, seq *s, sched_finish f, const char *err) {
    if (s->ready)
        sched_core_remove(e->core, &s->req);
    if (s->spec) /* its draft slot back; (suffix) its output into the index */
        sched_spec_seq_end(e->spec, s->spec, s->hist + s->p.n_prompt, s->n_gen);
    if (s->has_deadline)
        e->n_deadlines--;
    if (s->parked)
        e->n_parked--;
    seq_emit(e, s, f, err);
    seq_free(e, s);
}

static int push_token(seq *s, const sched_token *t) {
    if (brisk_grow(&s->toks, &s->cap_toks, (size_t)s->n_toks + 1, sizeof *s->toks, 8, 0) < 0)
        return BRISK_ENOMEM;
    s->toks[s->n_toks++] = *t;
    return 0;
}

/* Log-softmax of the raw row: the chosen id's log-prob and the top n. */
static void fill_logprobs(const float *row, int n_vocab, int32_t id, int n_top, sched_token *t) {
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
    seq_finish(e, s, SCHED_FINISH_ABORT, NULL);
}

/* Whether the prompt decodes to some text: then the output continues it. */
static int prompt_has_text(const sched_engine *e, const seq *s) {
    return tok_ids_have_text(model_get_vocab(e->m), s->p.prompt, s->p.n_prompt);
}

/* ---- grammar masks ------------------------------------------------------ */

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

/* Asks for the mask of s's grammar state (after its last token): cached
 * ones are ready at once, the others computed by a worker while the next
 * forward runs. */
static void seq_mask_submit(sched_engine *e, seq *s) {
    s->mj->delay = e->cfg.mask_delay_steps;
    if (s->mask_costly > 0)
        s->mask_costly--;
    sched_mask_submit(e->masks, s->mj);
}

/* Waits until a worker finishes some mask or `until` (brisk_now) passes. */
static void engine_wait_mask_done(sched_engine *e, double until) {
    double now = brisk_now();
    if (now >= until)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)((until - now) * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&e->mu);
    long long seen = e->masks_done;
    while (!e->quit && e->masks_done == seen)
        if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&e->mu);
}

/* Whether s's mask is there to sample with (*rc: model_grammar_mask's
 * result). Without workers the engine computes it here; with them, within
 * the step's allowance above. */
static int seq_mask_ready(sched_engine *e, seq *s, int *rc) {
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
        engine_wait_mask_done(e, until);
        st = sched_mask_poll(e->masks, s->mj, rc, &work);
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

/* Ends s whose grammar gave no mask: rc 0 (no token allowed), BRISK_ERANGE
 * (too costly: the client's grammar, so the server answers 4xx) or another
 * code. */
static void seq_finish_grammar(sched_engine *e, seq *s, int rc) {
    if (rc == BRISK_ERANGE && s->final_ev) {
        model_grammar_limits lim = model_grammar_limits_default();
        char why[160];
        snprintf(why, sizeof why,
                 "a token needed more than %lld units of matcher work or %d parse stacks",
                 lim.max_work, lim.max_stacks);
        s->final_ev->grammar_cost = 1;
        seq_finish(e, s, SCHED_FINISH_ERROR, why);
        return;
    }
    seq_finish(e, s, SCHED_FINISH_ERROR,
               rc == 0 ? "the grammar allows no token here" : brisk_strerror(rc));
}

/* s sits out this step: its logits row is kept until its mask is ready. */
static int seq_park(sched_engine *e, seq *s, int row) {
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

static void seq_unpark(sched_engine *e, seq *s) {
    if (s->parked)
        e->n_parked--;
    s->parked = 0;
}

/* A worker finished a mask: wake the engine if it waits for one. */
static void engine_mask_done(void *ctx) {
    sched_engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->masks_done++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
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
        seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return;
    }
    s->text.keep_stop = s->p.include_stop_str;
    if (s->p.pooling) {
        s->emb_sum = brisk_calloc((size_t)c->dim, sizeof *s->emb_sum);
        if (!s->emb_sum) {
            uncount_waiting(e, s);
            seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
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
            seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
            return;
        }
        model_sampler_set_allowed(s->sampler, s->mj->mask);
        seq_mask_submit(e, s); /* the first mask, computed while the prompt is */
    }
    if (s->p.min_tokens > 0) {
        int n_eog = s->p.ignore_eos ? 0 : e->n_eog;
        s->ban = brisk_malloc(((size_t)n_eog + (size_t)s->p.n_stop_ids + 1) * sizeof *s->ban);
        if (!s->ban) {
            uncount_waiting(e, s);
            seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
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
    fill_logprobs(e->lp_row, c->n_vocab, id, s->p.logprobs, t);
    return id;
}

/* Handles token id sampled for s (t: its log-probs, if asked). Returns 1 if
 * s finished (and was freed). */
static int seq_accept(sched_engine *e, seq *s, int32_t id, sched_token *tp) {
    const tok_vocab *v = model_get_vocab(e->m);
    sched_token t;
    if (tp)
        t = *tp;
    else
        memset(&t, 0, sizeof t);
    if (id < 0 || id >= model_get_config(e->m)->n_vocab) {
        seq_finish(e, s, SCHED_FINISH_ERROR, "sampling failed");
        return 1;
    }
    t.id = id;
    if (push_token(s, &t) < 0) {
        seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    s->hist[s->n_hist++] = id;
    s->req.n_tokens = s->n_hist;
    s->n_gen++;
    if (!s->p.ignore_eos && tok_is_eog(v, id)) {
        seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    int grc = s->mj ? model_grammar_accept(s->mj->gm, id) : 0;
    if (grc == BRISK_ERANGE) { /* its state outgrew the grammar's limits */
        seq_finish_grammar(e, s, grc);
        return 1;
    }
    if (grc < 0) { /* the mask allowed it: never, short of memory */
        seq_finish(e, s, SCHED_FINISH_ERROR,
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
        seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    int stop_id = 0;
    for (int i = 0; i < s->p.n_stop_ids && !stop_id; i++)
        stop_id = s->p.stop_ids[i] == id;
    if (hit || stop_id || (s->mj && model_grammar_finished(s->mj->gm))) {
        seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    /* n_hist - 1 positions computed; the next step computes one more. */
    if (s->n_gen >= s->p.max_tokens || s->n_hist >= e->max_ctx) {
        seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        return 1;
    }
    if (s->mj) /* the next token's mask, while the next forward runs */
        seq_mask_submit(e, s);
    return 0;
}

/* Rows sitting out whose masks are now ready: sampled from their kept
 * logits, exactly as they would have been at once (the same row, the same
 * sampler state). Runs before the schedule, so each decodes its new token
 * in this very step; the step's trace counts them as sampled (unparked). */
static void sample_parked(sched_engine *e) {
    if (e->n_parked == 0)
        return;
    int nv = model_get_config(e->m)->n_vocab;
    long long n_gen = 0;
    sched_req *const *run = sched_core_running(e->core);
    for (int i = sched_core_n_running(e->core) - 1; i >= 0; i--) {
        seq *s = (seq *)run[i];
        int allowed = 0;
        if (!s->parked || !seq_mask_ready(e, s, &allowed))
            continue;
        seq_unpark(e, s);
        if (allowed <= 0) {
            seq_finish_grammar(e, s, allowed);
            continue;
        }
        sched_token tk;
        memset(&tk, 0, sizeof tk);
        if (s->p.logprobs >= 0) /* the raw row, before the sampler edits it */
            memcpy(e->lp_row, s->park_row, (size_t)nv * sizeof *e->lp_row);
        int32_t id = model_sampler_sample(s->sampler, s->park_row, s->hist, s->n_hist);
        if (id >= 0 && s->p.logprobs >= 0)
            fill_logprobs(e->lp_row, nv, id, s->p.logprobs, &tk);
        n_gen++;
        e->tr.unparked++;
        e->tr.constrained++;
        e->tr.logprob_rows += s->p.logprobs >= 0;
        if (!seq_accept(e, s, id, s->p.logprobs >= 0 ? &tk : NULL))
            seq_emit(e, s, SCHED_FINISH_NONE, NULL);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.generation_tokens += n_gen;
    pthread_mutex_unlock(&e->mu);
}

/* Every running sequence sits out for its mask and nothing else can run:
 * the engine computes one of those masks itself if no worker has started it
 * (it would only wait otherwise); else it sleeps until a worker finishes
 * one, new work or a cancel arrives, or 10 ms pass (deadlines). */
static void engine_wait_masks(sched_engine *e) {
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

/* ---- speculative decoding (spec.h, spec_verify.h) --------------------------- */

/* A sequence whose proposals are verified from the step's one sample call. */
typedef struct spec_run {
    seq *s;
    int job0, k;           /* its jobs: job0 .. job0 + k, one per row */
    model_sampler_rng rng; /* its generator before them */
} spec_run;

/* Proposals for the decoding sequences (into hist past n_hist, and
 * req.n_spec), before the schedule grows KV for them. */
static void engine_propose(sched_engine *e) {
    sched_req *const *run = sched_core_running(e->core);
    int n_run = sched_core_n_running(e->core), nc = 0;
    long base = 0;
    for (int i = 0; i < n_run; i++) {
        seq *s = (seq *)run[i];
        s->req.n_spec = 0;
        int need = s->req.n_tokens - s->req.n_computed;
        base += need;
        if (need != 1 || !s->spec)
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
        sched_mask_state st = sched_mask_poll(e->masks, s->mj, &allowed, &work);
        if (st == SCHED_MASK_READY)
            break;
        if (st == SCHED_MASK_IDLE)
            sched_mask_submit(e->masks, s->mj);
        else if (st == SCHED_MASK_QUEUED && sched_mask_run_here(e->masks, s->mj, -1))
            continue;
        engine_wait_mask_done(e, brisk_now() + 0.01);
    }
    s->mj->delay = 0;
    e->tr.mask_s += brisk_now() - tm;
    if (allowed > 0)
        return 0;
    seq_finish_grammar(e, s, allowed);
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
                fill_logprobs(e->lp_row, (int)nv, id, s->p.logprobs, &tk);
                tkp = &tk;
                e->tr.logprob_rows++;
            }
            a += keep;
        }
        e->tr.constrained += model_sampler_constrained(s->sampler);
        emitted++;
        if (keep) /* its K/V, computed this step, is the token's */
            sched_core_advance(e->core, &s->req, 1);
        if (seq_accept(e, s, id, tkp)) {
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

/* s's run of k proposals at rows row0 .. row0 + k: verified now (returns
 * the tokens emitted), or its rows join the step's one sample call
 * (returns 0; engine_verify_batched finishes it). */
static int engine_verify(sched_engine *e, seq *s, int row0, int k, int *n_jobs, int *n_runs) {
    if (s->mj || s->n_ban > 0 || s->p.logprobs >= 0) {
        int fin, n = seq_verify(e, s, row0, k, NULL, NULL, NULL, &fin);
        if (!fin)
            seq_emit(e, s, SCHED_FINISH_NONE, NULL);
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

/* The runs whose rows the step's sample call took (rc < 0: it failed). */
static long long engine_verify_batched(sched_engine *e, int n_runs, int rc) {
    long long n_gen = 0;
    for (int i = 0; i < n_runs; i++) {
        spec_run *r = &e->runs[i];
        if (rc < 0) {
            seq_finish(e, r->s, SCHED_FINISH_ERROR, "sampling failed");
            continue;
        }
        int fin;
        n_gen +=
            seq_verify(e, r->s, -1, r->k, e->job_ids + r->job0, e->job_p + r->job0, &r->rng, &fin);
        if (!fin)
            seq_emit(e, r->s, SCHED_FINISH_NONE, NULL);
    }
    return n_gen;
}

/* One engine step: schedule, one forward pass, sample, emit. */
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
        seq_finish(e, s, SCHED_FINISH_ERROR, ok ? "out of memory" : "missing hidden states");
        return;
    }
    double div = s->p.pooling == SCHED_POOL_MEAN ? (double)s->p.n_prompt : 1.0;
    for (int d = 0; d < dim; d++)
        v[d] = (float)(s->emb_sum[d] / div);
    s->final_ev->embedding = v;
    s->final_ev->n_embedding = dim;
    seq_finish(e, s, SCHED_FINISH_STOP, NULL);
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
            seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        }
    }
    for (sched_req *r = sched_core_waiting_head(e->core), *nx; r; r = nx) {
        nx = r->next;
        seq *s = (seq *)r;
        if (s->p.deadline <= 0 || now < s->p.deadline)
            continue;
        s->deadline_hit = 1;
        if (s->t_admit > 0) {
            seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        } else {
            uncount_waiting(e, s);
            seq_finish(e, s, SCHED_FINISH_EXPIRED, "the request's deadline passed while it waited");
        }
    }
}

/* Returns 1 when it ran a forward pass (e->tr holds its record), else 0. */
static int step(sched_engine *e) {
    sched_plan plan;
    sched_trace_step *tr = &e->tr;
    memset(tr, 0, sizeof *tr);
    sample_parked(e); /* before the step: the trace counts its time as host work */
    tr->t_start = brisk_now();
    e->mask_units = MASK_STEP_UNITS;
    sched_core_set_now(e->core, tr->t_start);
    if (e->spec)
        engine_propose(e);
    sched_core_schedule(e->core, &plan);
    double now = brisk_now();
    for (int i = 0; i < plan.n_starved; i++) /* its context outgrew the whole KV pool */
        seq_finish(e, (seq *)plan.starved[i], SCHED_FINISH_LENGTH, NULL);
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
    double grace = 0.1 * t_fwd < MASK_GRACE_MAX_S ? 0.1 * t_fwd : MASK_GRACE_MAX_S;
    e->mask_grace_until = brisk_now() + grace;
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
                seq_finish(e, s, SCHED_FINISH_ERROR, brisk_strerror(rc));
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
                    fill_logprobs(r, c->n_vocab, s->p.prompt[pos + 1], s->p.logprobs,
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
            n_gen += engine_verify(e, s, sample_row, plan.entries[i].n_spec, &n_jobs, &n_runs);
            continue;
        }
        if (s->mj) { /* the grammar's allowed tokens, the sampler's mask */
            double tm = brisk_now();
            int allowed = 0, ready = seq_mask_ready(e, s, &allowed);
            tr->mask_s += brisk_now() - tm;
            if (!ready) { /* not there yet: it sits out, the other rows go on */
                int prc = seq_park(e, s, sample_row);
                if (prc < 0)
                    seq_finish(e, s, SCHED_FINISH_ERROR, brisk_strerror(prc));
                else
                    tr->parked++;
                continue;
            }
            if (allowed <= 0) {
                seq_finish_grammar(e, s, allowed);
                continue;
            }
        }
        seq_unpark(e, s); /* recomputed after a preemption: this row replaces the kept one */
        n_gen++;
        tr->constrained += model_sampler_constrained(s->sampler);
        if (s->p.logprobs >= 0) { /* alone: its raw row is copied first */
            sched_token tk;
            memset(&tk, 0, sizeof tk);
            double ts = brisk_now();
            int32_t id = seq_sample_logprobs(e, s, sample_row, &tk);
            tr->sample_s += brisk_now() - ts;
            tr->logprob_rows++;
            if (!seq_accept(e, s, id, &tk))
                seq_emit(e, s, SCHED_FINISH_NONE, NULL);
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
            if (e->job_seq[j] && !seq_accept(e, e->job_seq[j], rc < 0 ? -1 : e->job_ids[j], NULL))
                seq_emit(e, e->job_seq[j], SCHED_FINISH_NONE, NULL);
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

/* The thread pool, then the model, backend and KV cache (sched_setup.h has
 * the rules: weights on the GPU, context, pool size), then the scheduler. */
static int engine_load(sched_engine *e) {
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
        char cpu[128], kernels[1024];
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
    free(e->model_path);
    free(e->draft_path);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
