/* engine.c - the engine thread: admission, batched steps, sampling, stop
 * strings, log-probs and the event outbox (see engine.h). */
#include "scheduler/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_pool.h"
#include "scheduler/kv_cache.h"
#include "scheduler/seq_text.h"

typedef enum { SEQ_WAITING = 0, SEQ_PREFILL, SEQ_DECODE } seq_phase;

typedef struct seq {
    struct seq *next; /* waiting queue / inbox link */
    sched_seq_params p;
    seq_phase phase;
    int slot;
    int n_past;           /* positions in the KV cache */
    int32_t *hist;        /* prompt then generated tokens */
    int n_hist, cap_hist;
    int n_gen;
    int last_token;       /* the token to feed next (decode) */
    model_sampler *sampler;
    seq_text text;        /* detokenizer + stop strings + UTF-8 hold-back */
    sched_token *toks;    /* tokens since the last event */
    int n_toks, cap_toks;
    sched_token *ptoks;   /* prompt log-probs, sent with the first event */
    int n_ptoks;
    int sent_ptoks;
    double t_submit, t_admit;
} seq;

typedef struct cancel_msg {
    struct cancel_msg *next;
    void *user;
} cancel_msg;

struct sched_engine {
    sched_engine_config cfg;
    char *model_path;
    uv_async_t *async;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    /* under mu */
    seq *inbox_head, *inbox_tail;
    cancel_msg *cancels;
    sched_event *out_head, *out_tail;
    int n_waiting;       /* inbox + waiting queue */
    long waiting_tokens;
    sched_state state;
    char load_err[256];
    sched_engine_stats stats;
    /* engine thread only */
    model *m;
    model_state *st;
    kv_cache *kv;
    kern_pool *pool;
    int max_ctx;
    seq *wait_head, *wait_tail;
    seq **running; /* [max_seqs], NULL = free slot */
    int n_running;
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    seq **b_owner;  /* per batch token: its sequence */
    float *lp_row;  /* copy of one logits row for log-probs */
};

sched_engine_config sched_engine_config_default(void) {
    sched_engine_config c;
    memset(&c, 0, sizeof c);
    c.weights = MODEL_WEIGHTS_AUTO;
    c.max_seqs = 8;
    c.max_ctx = 0;
    c.max_batch_tokens = 512;
    c.max_waiting = 1024;
    c.max_waiting_tokens = 4L << 20;
    return c;
}

const char *sched_finish_name(sched_finish f) {
    switch (f) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_ABORT: return "abort";
    case SCHED_FINISH_ERROR: return "error";
    default: return "none";
    }
}

void sched_seq_params_free(sched_seq_params *p) {
    if (!p) return;
    free(p->prompt);
    free((void *)p->sampling.logit_bias_ids);
    free((void *)p->sampling.logit_bias);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    memset(p, 0, sizeof *p);
}

void sched_event_free(sched_event *ev) {
    if (!ev) return;
    free(ev->text);
    free(ev->tokens);
    free(ev->prompt_tokens);
    free(ev);
}

static void seq_free(seq *s) {
    if (!s) return;
    sched_seq_params_free(&s->p);
    free(s->hist);
    model_sampler_free(s->sampler);
    seq_text_free(&s->text);
    free(s->toks);
    free(s->ptoks);
    free(s);
}

/* ---- outbox ----------------------------------------------------------- */

static void outbox_push(sched_engine *e, sched_event *ev) {
    pthread_mutex_lock(&e->mu);
    if (e->out_tail) e->out_tail->next = ev;
    else e->out_head = ev;
    e->out_tail = ev;
    pthread_mutex_unlock(&e->mu);
}

sched_event *sched_engine_drain(sched_engine *e) {
    pthread_mutex_lock(&e->mu);
    sched_event *h = e->out_head;
    e->out_head = e->out_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    return h;
}

/* Builds the event for s: new text, tokens since the last event and, on the
 * first event, the prompt log-probs. finish != NONE makes it the last. */
static int seq_emit(sched_engine *e, seq *s, sched_finish finish, const char *err) {
    sched_event *ev = calloc(1, sizeof *ev);
    if (!ev) return BRISK_ENOMEM;
    ev->user = s->p.user;
    ev->finish = finish;
    if (seq_text_take(&s->text, finish != SCHED_FINISH_NONE, &ev->text, &ev->text_len) < 0) {
        free(ev);
        return BRISK_ENOMEM;
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
    ev->t_event = brisk_now();
    ev->t_admitted = s->t_admit;
    if (err) snprintf(ev->err, sizeof ev->err, "%s", err);
    outbox_push(e, ev);
    return 0;
}

/* ---- public API (loop thread) ---------------------------------------- */

int sched_engine_submit(sched_engine *e, sched_seq_params *p) {
    if (!e || !p || !p->prompt || p->n_prompt < 1 || p->max_tokens < 1 || p->logprobs > SCHED_MAX_TOP_LOGPROBS)
        return BRISK_EINVAL;
    seq *s = calloc(1, sizeof *s);
    if (!s) return BRISK_ENOMEM;
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->state != SCHED_READY) rc = BRISK_EUNSUPPORTED;
    else if (p->n_prompt >= e->max_ctx) rc = BRISK_ERANGE;
    else if (e->n_waiting >= e->cfg.max_waiting ||
             e->waiting_tokens + p->n_prompt > e->cfg.max_waiting_tokens)
        rc = BRISK_ENOSPC;
    if (rc == 0) {
        s->p = *p;
        memset(p, 0, sizeof *p);
        s->slot = -1;
        s->t_submit = brisk_now();
        if (e->inbox_tail) e->inbox_tail->next = s;
        else e->inbox_head = s;
        e->inbox_tail = s;
        e->n_waiting++;
        e->waiting_tokens += s->p.n_prompt;
        e->stats.waiting = e->n_waiting;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (rc) free(s);
    return rc;
}

void sched_engine_cancel(sched_engine *e, void *user) {
    cancel_msg *c = calloc(1, sizeof *c);
    if (!c) return; /* the sequence runs to its end instead */
    c->user = user;
    pthread_mutex_lock(&e->mu);
    c->next = e->cancels;
    e->cancels = c;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

sched_state sched_engine_state(const sched_engine *e, char *err, size_t err_len) {
    pthread_mutex_lock((pthread_mutex_t *)&e->mu);
    sched_state s = e->state;
    if (err && err_len) snprintf(err, err_len, "%s", e->load_err);
    pthread_mutex_unlock((pthread_mutex_t *)&e->mu);
    return s;
}

const model *sched_engine_model(const sched_engine *e) {
    return sched_engine_state(e, NULL, 0) == SCHED_READY ? e->m : NULL;
}

int sched_engine_max_ctx(const sched_engine *e) {
    return e->max_ctx;
}

void sched_engine_get_stats(const sched_engine *e, sched_engine_stats *out) {
    pthread_mutex_lock((pthread_mutex_t *)&e->mu);
    *out = e->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&e->mu);
}

/* ---- engine thread ---------------------------------------------------- */

static void seq_finish(sched_engine *e, seq *s, sched_finish f, const char *err) {
    if (s->slot >= 0) {
        e->running[s->slot] = NULL;
        e->n_running--;
    }
    if (seq_emit(e, s, f, err) < 0) {
        /* Out of memory for the final event: one bare final event so the
         * server can release its request. */
        sched_event *ev = calloc(1, sizeof *ev);
        if (ev) {
            ev->user = s->p.user;
            ev->finish = SCHED_FINISH_ERROR;
            snprintf(ev->err, sizeof ev->err, "out of memory");
            outbox_push(e, ev);
        } else {
            BRISK_ERROR("engine: out of memory; a request's final event was lost");
        }
    }
    seq_free(s);
}

static int push_token(seq *s, const sched_token *t) {
    if (s->n_toks == s->cap_toks) {
        int cap = s->cap_toks ? 2 * s->cap_toks : 8;
        sched_token *n = realloc(s->toks, (size_t)cap * sizeof *n);
        if (!n) return BRISK_ENOMEM;
        s->toks = n;
        s->cap_toks = cap;
    }
    s->toks[s->n_toks++] = *t;
    return 0;
}

/* Log-softmax of the raw row: the chosen id's log-prob and the top n. */
static void fill_logprobs(const float *row, int n_vocab, int32_t id, int n_top, sched_token *t) {
    float mx = row[0];
    for (int i = 1; i < n_vocab; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)row[i] - mx);
    float lse = mx + (float)log(sum);
    t->id = id;
    t->logprob = row[id] - lse;
    t->n_top = 0;
    /* Insertion into a small sorted list: n_top <= 20. */
    for (int i = 0; i < n_vocab && n_top > 0; i++) {
        float v = row[i];
        if (t->n_top == n_top && v <= row[t->top_id[n_top - 1]]) continue;
        int k = t->n_top < n_top ? t->n_top++ : n_top - 1;
        while (k > 0 && row[t->top_id[k - 1]] < v) {
            t->top_id[k] = t->top_id[k - 1];
            k--;
        }
        t->top_id[k] = i;
    }
    for (int k = 0; k < t->n_top; k++) t->top_logprob[k] = row[t->top_id[k]] - lse;
}

static void drain_inbox(sched_engine *e, seq **in, cancel_msg **cancels) {
    *in = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    *cancels = e->cancels;
    e->cancels = NULL;
}

static void apply_cancel(sched_engine *e, void *user) {
    for (seq **pp = &e->wait_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if ((*pp)->p.user != user) continue;
        seq *s = *pp;
        *pp = s->next;
        if (e->wait_tail == s) e->wait_tail = prev;
        pthread_mutex_lock(&e->mu);
        e->n_waiting--;
        e->waiting_tokens -= s->p.n_prompt;
        pthread_mutex_unlock(&e->mu);
        seq_finish(e, s, SCHED_FINISH_ABORT, NULL);
        return;
    }
    for (int i = 0; i < e->cfg.max_seqs; i++)
        if (e->running[i] && e->running[i]->p.user == user) {
            seq_finish(e, e->running[i], SCHED_FINISH_ABORT, NULL);
            return;
        }
}

/* Whether the prompt decodes to some text: then the output continues it. */
static int prompt_has_text(const sched_engine *e, const seq *s) {
    return tok_ids_have_text(model_get_vocab(e->m), s->p.prompt, s->p.n_prompt);
}

/* Moves waiting sequences into free slots, first come first served. */
static void admit(sched_engine *e) {
    const model_config *c = model_get_config(e->m);
    for (int slot = 0; slot < e->cfg.max_seqs && e->wait_head; slot++) {
        if (e->running[slot]) continue;
        seq *s = e->wait_head;
        e->wait_head = s->next;
        if (!e->wait_head) e->wait_tail = NULL;
        s->next = NULL;
        pthread_mutex_lock(&e->mu);
        e->n_waiting--;
        e->waiting_tokens -= s->p.n_prompt;
        pthread_mutex_unlock(&e->mu);
        int max_new = e->max_ctx - s->p.n_prompt;
        if (s->p.max_tokens > max_new) s->p.max_tokens = max_new;
        s->cap_hist = s->p.n_prompt + s->p.max_tokens;
        s->hist = malloc((size_t)s->cap_hist * sizeof *s->hist);
        s->sampler = model_sampler_create(&s->p.sampling, c->n_vocab);
        if (s->p.prompt_logprobs && s->p.logprobs >= 0 && s->p.n_prompt > 1) {
            s->ptoks = calloc((size_t)s->p.n_prompt - 1, sizeof *s->ptoks);
            s->n_ptoks = s->ptoks ? s->p.n_prompt - 1 : 0;
        }
        int bad = !s->hist || !s->sampler ||
                  (s->p.prompt_logprobs && s->p.logprobs >= 0 && s->p.n_prompt > 1 && !s->ptoks) ||
                  seq_text_init(&s->text, model_get_vocab(e->m), (const char *const *)s->p.stop,
                                s->p.n_stop, prompt_has_text(e, s)) < 0;
        if (bad) {
            seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
            continue;
        }
        memcpy(s->hist, s->p.prompt, (size_t)s->p.n_prompt * sizeof *s->hist);
        s->n_hist = s->p.n_prompt;
        s->slot = slot;
        s->phase = SEQ_PREFILL;
        s->t_admit = brisk_now();
        e->running[slot] = s;
        e->n_running++;
    }
}

/* Handles the sampled token of s. Returns 1 if s finished (and was freed). */
static int seq_accept(sched_engine *e, seq *s, const float *row_raw, float *row) {
    const model_config *c = model_get_config(e->m);
    const tok_vocab *v = model_get_vocab(e->m);
    sched_token t;
    memset(&t, 0, sizeof t);
    if (s->p.logprobs >= 0) memcpy(e->lp_row, row_raw, (size_t)c->n_vocab * sizeof(float));
    int32_t id = model_sampler_sample(s->sampler, row, s->hist, s->n_hist);
    if (s->p.logprobs >= 0) fill_logprobs(e->lp_row, c->n_vocab, id, s->p.logprobs, &t);
    t.id = id;
    if (push_token(s, &t) < 0) {
        seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    s->hist[s->n_hist++] = id;
    s->n_gen++;
    s->last_token = id;
    if (!s->p.ignore_eos && tok_is_eog(v, id)) {
        seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    int hit = seq_text_push(&s->text, id);
    if (hit < 0) {
        seq_finish(e, s, SCHED_FINISH_ERROR, "out of memory");
        return 1;
    }
    if (hit) {
        seq_finish(e, s, SCHED_FINISH_STOP, NULL);
        return 1;
    }
    if (s->n_gen >= s->p.max_tokens || s->n_past + 1 >= e->max_ctx) {
        seq_finish(e, s, SCHED_FINISH_LENGTH, NULL);
        return 1;
    }
    return 0;
}

/* One engine step: a batch of every running sequence's next tokens. */
static void step(sched_engine *e) {
    int n = 0, budget = e->cfg.max_batch_tokens;
    /* Decodes first (one token each), then prompt chunks in slot order. */
    for (int i = 0; i < e->cfg.max_seqs; i++) {
        seq *s = e->running[i];
        if (!s || s->phase != SEQ_DECODE) continue;
        e->b_tok[n] = s->last_token;
        e->b_pos[n] = s->n_past;
        e->b_seq[n] = s->slot;
        e->b_want[n] = 1;
        e->b_owner[n] = s;
        n++;
        budget--;
    }
    for (int i = 0; i < e->cfg.max_seqs && budget > 0; i++) {
        seq *s = e->running[i];
        if (!s || s->phase != SEQ_PREFILL) continue;
        int chunk = s->p.n_prompt - s->n_past;
        if (chunk > budget) chunk = budget;
        for (int k = 0; k < chunk; k++) {
            int pos = s->n_past + k;
            e->b_tok[n] = s->p.prompt[pos];
            e->b_pos[n] = pos;
            e->b_seq[n] = s->slot;
            e->b_want[n] = pos == s->p.n_prompt - 1 || (s->ptoks != NULL);
            e->b_owner[n] = s;
            n++;
        }
        budget -= chunk;
    }
    if (n == 0) return;
    model_batch b = {n, e->b_tok, e->b_pos, e->b_seq, e->b_want};
    float *logits = NULL;
    int n_out = 0;
    int rc = model_forward(e->m, e->st, e->kv, e->pool, &b, &logits, &n_out);
    if (rc < 0) { /* every sequence of the batch is in an unknown state */
        BRISK_ERROR("engine: forward pass failed: %s", brisk_strerror(rc));
        for (int i = 0; i < e->cfg.max_seqs; i++)
            if (e->running[i]) seq_finish(e, e->running[i], SCHED_FINISH_ERROR, brisk_strerror(rc));
        return;
    }
    const model_config *c = model_get_config(e->m);
    long long n_prompt = 0, n_gen = 0;
    int row = 0;
    for (int i = 0; i < n;) {
        seq *s = e->b_owner[i];
        int j = i;
        while (j < n && e->b_owner[j] == s) j++;
        /* Tokens i..j-1 belong to s (one decode token, or a prompt chunk). */
        if (s->phase == SEQ_DECODE) {
            float *r = logits + (size_t)row * c->n_vocab;
            row++;
            s->n_past++;
            n_gen++;
            if (!seq_accept(e, s, r, r)) seq_emit(e, s, SCHED_FINISH_NONE, NULL);
            i = j;
            continue;
        }
        int finished = 0;
        for (int k = i; k < j; k++) {
            int pos = e->b_pos[k];
            if (!e->b_want[k]) continue;
            float *r = logits + (size_t)row * c->n_vocab;
            row++;
            if (s->ptoks && pos + 1 < s->p.n_prompt)
                fill_logprobs(r, c->n_vocab, s->p.prompt[pos + 1], s->p.logprobs, &s->ptoks[pos]);
            if (pos == s->p.n_prompt - 1) {
                s->n_past = s->p.n_prompt;
                s->phase = SEQ_DECODE;
                n_prompt += s->p.n_prompt;
                finished = seq_accept(e, s, r, r);
                if (!finished) seq_emit(e, s, SCHED_FINISH_NONE, NULL);
                break; /* the prompt's last token ends the chunk */
            }
        }
        if (!finished && s->phase == SEQ_PREFILL) s->n_past += j - i;
        i = j;
    }
    pthread_mutex_lock(&e->mu);
    e->stats.steps++;
    e->stats.prompt_tokens += n_prompt;
    e->stats.generation_tokens += n_gen;
    pthread_mutex_unlock(&e->mu);
}

static void publish_stats(sched_engine *e) {
    long used = 0;
    for (int i = 0; i < e->cfg.max_seqs; i++)
        if (e->running[i]) used += e->running[i]->n_past;
    pthread_mutex_lock(&e->mu);
    e->stats.running = e->n_running;
    e->stats.waiting = e->n_waiting;
    e->stats.kv_usage = (double)used / ((double)e->max_ctx * e->cfg.max_seqs);
    pthread_mutex_unlock(&e->mu);
}

static int engine_load(sched_engine *e) {
    char err[256] = "";
    e->pool = kern_pool_create(e->cfg.n_threads);
    if (!e->pool) {
        snprintf(e->load_err, sizeof e->load_err, "cannot start the thread pool");
        return BRISK_ENOMEM;
    }
    model_load_opts lo = {e->cfg.weights, e->pool};
    int rc = model_load(e->model_path, &lo, &e->m, err, sizeof err);
    if (rc < 0) {
        snprintf(e->load_err, sizeof e->load_err, "%s", err);
        return rc;
    }
    const model_config *c = model_get_config(e->m);
    int ctx = e->cfg.max_ctx > 0 ? e->cfg.max_ctx : (c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
    if (ctx < 2) ctx = 2;
    e->max_ctx = ctx;
    int mbt = e->cfg.max_batch_tokens;
    e->st = model_state_create(e->m, mbt, ctx);
    e->kv = kv_cache_create(c->n_layers, c->n_kv_heads * c->head_dim, e->cfg.max_seqs, ctx);
    e->running = calloc((size_t)e->cfg.max_seqs, sizeof *e->running);
    e->b_tok = malloc((size_t)mbt * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)mbt * sizeof *e->b_pos);
    e->b_seq = malloc((size_t)mbt * sizeof *e->b_seq);
    e->b_want = malloc((size_t)mbt);
    e->b_owner = malloc((size_t)mbt * sizeof *e->b_owner);
    e->lp_row = malloc((size_t)c->n_vocab * sizeof *e->lp_row);
    if (!e->st || !e->kv || !e->running || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want ||
        !e->b_owner || !e->lp_row) {
        snprintf(e->load_err, sizeof e->load_err,
                 "out of memory for the KV cache or scratch (%d sequences x %d positions)",
                 e->cfg.max_seqs, ctx);
        return BRISK_ENOMEM;
    }
    BRISK_INFO("engine: %s ready: %d sequences x %d positions, KV cache %.1f MB, batch %d tokens",
               model_name(e->m), e->cfg.max_seqs, ctx, kv_cache_bytes(e->kv) / 1e6, mbt);
    return 0;
}

static void *engine_main(void *arg) {
    sched_engine *e = arg;
    int rc = engine_load(e);
    pthread_mutex_lock(&e->mu);
    e->state = rc < 0 ? SCHED_FAILED : SCHED_READY;
    pthread_mutex_unlock(&e->mu);
    uv_async_send(e->async);
    if (rc < 0) return NULL;
    for (;;) {
        seq *in;
        cancel_msg *cancels;
        pthread_mutex_lock(&e->mu);
        while (!e->quit && !e->inbox_head && !e->cancels && e->n_running == 0 && !e->wait_head)
            pthread_cond_wait(&e->cv, &e->mu);
        int quit = e->quit;
        drain_inbox(e, &in, &cancels);
        pthread_mutex_unlock(&e->mu);
        if (quit) {
            while (in) {
                seq *n = in->next;
                seq_free(in);
                in = n;
            }
            while (cancels) {
                cancel_msg *n = cancels->next;
                free(cancels);
                cancels = n;
            }
            break;
        }
        while (in) { /* arrival order into the waiting queue */
            seq *n = in->next;
            in->next = NULL;
            if (e->wait_tail) e->wait_tail->next = in;
            else e->wait_head = in;
            e->wait_tail = in;
            in = n;
        }
        while (cancels) {
            cancel_msg *n = cancels->next;
            apply_cancel(e, cancels->user);
            free(cancels);
            cancels = n;
        }
        admit(e);
        step(e);
        publish_stats(e);
        uv_async_send(e->async);
    }
    return NULL;
}

int sched_engine_create(const sched_engine_config *cfg, uv_async_t *async, sched_engine **out,
                        char *err, size_t err_len) {
    *out = NULL;
    if (!cfg || !cfg->model_path || !async || cfg->max_seqs < 1 || cfg->max_seqs > 4096 ||
        cfg->max_batch_tokens < cfg->max_seqs || cfg->max_ctx < 0 || cfg->max_waiting < 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "engine: bad configuration (max batch tokens must be >= max sequences)");
    sched_engine *e = calloc(1, sizeof *e);
    if (!e) return brisk_set_err(err, err_len, BRISK_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->model_path = strdup(cfg->model_path);
    e->async = async;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->model_path || pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        free(e->model_path);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "engine: cannot start its thread");
    }
    *out = e;
    return 0;
}

void sched_engine_free(sched_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    for (seq *s = e->wait_head, *n; s; s = n) {
        n = s->next;
        seq_free(s);
    }
    for (int i = 0; e->running && i < e->cfg.max_seqs; i++) seq_free(e->running[i]);
    for (sched_event *ev = e->out_head, *n; ev; ev = n) {
        n = ev->next;
        sched_event_free(ev);
    }
    free(e->running);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_owner);
    free(e->lp_row);
    model_state_free(e->st);
    kv_cache_free(e->kv);
    model_free(e->m);
    kern_pool_free(e->pool);
    free(e->model_path);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
