/* srv_gen.c - the generation requests' lifecycle, and the endpoints
 * POST /v1/completions and /v1/chat/completions: validated requests become
 * engine sequences (one per prompt x n), engine events go to the request's
 * output shape (srv_gen_int.h), which streams them or answers once, and a
 * client that leaves cancels its sequences at once. /v1/responses
 * (srv_gen_responses.c), /v1/messages (srv_gen_anthropic.c) and
 * /v1/embeddings (srv_embed.c) run through the same lifecycle. Runs on the loop thread. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "server/api/srv_reason.h"
#include "server/api/srv_tools.h"
#include "server/app/srv_app.h"
#include "server/ops/srv_audit.h"
#include "server/ops/srv_quota.h"
#include "server/ops/srv_usage.h"

#include "server/app/srv_gen_int.h"

/* ---- small helpers -------------------------------------------------------- */

static void gen_link(srv_app *app, gen_req *g) {
    g->next = app->live;
    if (app->live)
        app->live->prev = g;
    app->live = g;
    app->n_live++;
}

static void gen_unlink(srv_app *app, gen_req *g) {
    if (g->prev)
        g->prev->next = g->next;
    else
        app->live = g->next;
    if (g->next)
        g->next->prev = g->prev;
    app->n_live--;
}

void srv_gen_free(gen_req *g) {
    if (!g)
        return;
    for (int i = 0; g->choices && i < g->n_choices; i++) {
        free(g->choices[i].text.p);
        free(g->choices[i].atext.p);
        free(g->choices[i].toks);
        free(g->choices[i].ptoks);
        free(g->choices[i].emb);
        srv_tools_stream_free(g->choices[i].tools);
    }
    free(g->choices);
    for (int i = 0; i < g->n_prompts; i++) {
        free(g->pids ? g->pids[i] : NULL);
        free(g->ptext ? g->ptext[i] : NULL);
    }
    free(g->pids);
    free(g->n_pids);
    free(g->ptext);
    free(g->ptext_len);
    free(g->p_is_tokens);
    for (int i = 0; i < g->a_n_msgs; i++)
        free((char *)g->a_msgs[i].content);
    free(g->a_msgs);
    model_grammar_unref(g->grammar);
    if (g->state)
        g->shape->free_state(g->state);
    if (g->quota_admitted)
        srv_quota_release(g->app->quota, g->key_id);
    /* The request outlives g only on error paths that answer after freeing it. */
    if (g->http)
        srv_req_set_user(g->http, NULL);
    free(g);
}

static uint64_t random_seed(srv_app *app) {
    return srv_http_random_u64(app->http);
}

static const char *finish_str(sched_finish f) {
    return f == SCHED_FINISH_LENGTH ? "length" : "stop";
}

int srv_gen_all_expired(const gen_req *g) {
    int n = 0;
    for (int i = 0; i < g->n_choices; i++)
        n += g->choices[i].finish == SCHED_FINISH_EXPIRED;
    return g->n_choices > 0 && n == g->n_choices;
}

static srv_metrics_finish metrics_finish(sched_finish f) {
    switch (f) {
    case SCHED_FINISH_STOP: return SRV_METRICS_FINISH_STOP;
    case SCHED_FINISH_LENGTH: return SRV_METRICS_FINISH_LENGTH;
    case SCHED_FINISH_ABORT: return SRV_METRICS_FINISH_ABORT;
    default: return SRV_METRICS_FINISH_ERROR;
    }
}

/* ---- failure and abort ---------------------------------------------------------- */

/* The request can no longer be answered right (out of memory for a chunk, a
 * choice's text or its log-probs, or an engine error): remember why, and
 * cancel the other choices at once, since nothing they produce can be sent.
 * The client gets a 500, or in a stream an error event, when the last
 * choice's final event arrives. */
void srv_gen_fail(gen_req *g, const char *why) {
    if (g->failed)
        return;
    g->failed = 1;
    snprintf(g->err, sizeof g->err, "%s", why);
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].live)
            sched_engine_cancel(g->app->eng, &g->choices[i]);
}

const srv_api_error *srv_gen_failure(const gen_req *g, srv_api_error *e) {
    if (g->failed_grammar) { /* the client's constraint, not a server failure */
        *e = (srv_api_error){400, "invalid_request_error", "", "grammar_too_costly", ""};
        const char *param = g->grammar_param ? g->grammar_param : "grammar";
        snprintf(e->param, sizeof e->param, "%s", param);
        snprintf(e->message, sizeof e->message,
                 "the grammar of '%s' is too costly to follow: %s (docs/API.md, structured "
                 "output)",
                 param, g->err);
        return e;
    }
    *e = (srv_api_error){500, "server_error", "", NULL, ""};
    snprintf(e->message, sizeof e->message, "generation failed: %s",
             g->err[0] ? g->err : "internal error");
    return e;
}

const srv_api_error *srv_gen_expiry(srv_api_error *e) {
    *e = (srv_api_error){504, "timeout_error", "timeout", "deadline_exceeded", ""};
    snprintf(e->message, sizeof e->message, "the request's deadline passed before it ran");
    return e;
}

void srv_gen_error_http(gen_req *g, const srv_api_error *e) {
    srv_gen_respond_error(g->http, e);
}

static void gen_on_abort(srv_req *r, void *user) {
    gen_req *g = user;
    srv_app *app = g->app;
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].live)
            sched_engine_cancel(app->eng, &g->choices[i]);
    g->http = NULL;
    srv_req_release(r);
}

/* ---- streaming ---------------------------------------------------------------- */

void srv_gen_write(gen_req *g, char *sse, size_t n) {
    if (!sse) {
        srv_gen_fail(g, "out of memory");
        return;
    }
    if (g->http)
        srv_stream_write(g->http, sse, n);
    free(sse);
}

/* ---- finishing ------------------------------------------------------------------ */

static void gen_observe(gen_req *g) {
    srv_app *app = g->app;
    double now = brisk_now();
    int completion = 0;
    sched_finish f = SCHED_FINISH_STOP;
    for (int i = 0; i < g->n_choices; i++) {
        completion += g->choices[i].completion_len;
        if (g->choices[i].finish == SCHED_FINISH_LENGTH)
            f = SCHED_FINISH_LENGTH;
        /* A choice whose calls' list ended was cancelled by the server: it
         * stopped, as far as anyone outside is concerned. */
        if ((g->choices[i].finish == SCHED_FINISH_ABORT ||
             g->choices[i].finish == SCHED_FINISH_EXPIRED) &&
            !g->choices[i].tools_stopped && f != SCHED_FINISH_ERROR)
            f = SCHED_FINISH_ABORT;
        if (g->choices[i].finish == SCHED_FINISH_ERROR)
            f = SCHED_FINISH_ERROR;
    }
    if (g->failed)
        f = SCHED_FINISH_ERROR;
    srv_metrics_request mr = {metrics_finish(f), g->prompt_tokens, completion,
                              g->t_admit > 0 ? g->t_admit - g->t_start : -1, now - g->t_start};
    srv_metrics_observe_request(app->metrics, &mr, now);
    int dl = 0;
    for (int i = 0; i < g->n_choices; i++)
        dl |= g->choices[i].deadline;
    if (dl)
        srv_metrics_observe_deadline(app->metrics, !srv_gen_all_expired(g));
    static const char *const fin[] = {"stop", "length", "abort", "error"};
    if (g->key_id[0])
        srv_usage_observe(app->usage, g->key_id, fin[mr.finish < 4 ? mr.finish : 3],
                          g->prompt_tokens, completion);
    if (g->http)
        srv_req_set_log_fields(g->http, g->shape->endpoint, g->prompt_tokens, completion,
                               g->t_first > 0 ? g->t_first - g->t_start : -1);
}

/* After the last choice's final event: the shape ends the stream, or
 * answers a failed or expired request with its error, or sends the whole
 * answer; then the request goes. */
static void gen_finish(gen_req *g) {
    srv_app *app = g->app;
    const srv_gen_shape *s = g->shape;
    gen_observe(g);
    int completion = 0, cached = 0;
    for (int i = 0; i < g->n_choices; i++)
        completion += g->choices[i].completion_len;
    /* Each prompt counts once in prompt_tokens: its first choice's hits. */
    int per = g->n_prompts > 0 ? g->n_choices / g->n_prompts : 1;
    for (int i = 0; per > 0 && i < g->n_choices; i += per)
        cached += g->choices[i].cached_tokens;
    srv_usage usage = {g->prompt_tokens, completion, cached};
    srv_api_error e;
    if (g->http && g->stream) {
        s->stream_end(g, &usage);
        srv_stream_end(g->http);
    } else if (g->http && g->failed) {
        s->error(g, srv_gen_failure(g, &e));
    } else if (g->http && srv_gen_all_expired(g)) {
        s->error(g, srv_gen_expiry(&e));
    } else if (g->http) {
        s->respond(g, &usage);
    }
    g->http = NULL;
    gen_unlink(app, g);
    srv_gen_free(g);
}

/* ---- engine events ----------------------------------------------------------------- */

/* The tokens of ev whose log-probs a chunk shows: a chat stream leaves out
 * a final end-of-sequence token, as OpenAI does. */
static int n_lp_toks(const gen_req *g, const sched_event *ev) {
    int n = ev->n_tokens;
    if (g->is_chat && n > 0 && ev->finish == SCHED_FINISH_STOP &&
        tok_is_eog(g->app->vocab, ev->tokens[n - 1].id))
        n--;
    return n;
}

/* The parser's end for an event: more to come, the model stopped, or it
 * was cut (its budget or deadline; a cancelled sequence's text is over too). */
static srv_tools_end tools_end(const sched_event *ev) {
    return ev->finish == SCHED_FINISH_NONE   ? SRV_TOOLS_MORE
           : ev->finish == SCHED_FINISH_STOP ? SRV_TOOLS_END_STOP
                                             : SRV_TOOLS_END_CUT;
}

/* An event of choice c with tools offered: the answer's part of its text
 * (after the <think> splitter, with reasoning) into the calls' parser; when
 * streamed, what the parser released goes to the shape as it comes, and
 * the finish with every call. */
static void on_tools_event(gen_req *g, gen_choice *c, const sched_event *ev) {
    brisk_buf rs = {0}, ct = {0};
    const char *text = ev->text;
    size_t len = ev->text_len;
    int final = ev->finish != SCHED_FINISH_NONE;
    if (g->reason) {
        srv_reason_feed(&c->reason, ev->text, ev->text_len, final, &rs, &ct);
        if (rs.oom || ct.oom)
            srv_gen_fail(g, "out of memory");
        text = ct.p ? ct.p : "";
        len = ct.len;
    }
    const srv_tools_piece *tp = NULL;
    int n_tp = 0;
    int stopped = c->tools_stopped; /* the list ended before this event */
    if (!g->failed && srv_gen_tools_feed(g, c, text, len, tools_end(ev), &tp, &n_tp) == 0 &&
        g->stream && g->http) {
        /* A stream ends with a finish even when the server cancelled it. */
        const char *fin =
            final && (ev->finish == SCHED_FINISH_STOP || ev->finish == SCHED_FINISH_LENGTH ||
                      ev->deadline || c->tools_stopped)
                ? srv_gen_choice_finish(g, c, ev->finish, ev->deadline)
                : NULL;
        const int send_r = g->include_reasoning && rs.len > 0;
        const int lp = g->logprobs >= 0 && ev->n_tokens && !stopped;
        if (n_tp || send_r || fin || lp || !c->started) {
            int n_calls = 0;
            const srv_tool_call *calls = fin ? srv_tools_stream_calls(c->tools, &n_calls) : NULL;
            gen_piece p = {.reasoning = send_r ? rs.p : NULL,
                           .reasoning_len = send_r ? rs.len : 0,
                           .tools = tp,
                           .n_tools = n_tp,
                           .calls = calls,
                           .n_calls = n_calls,
                           .toks = lp ? ev->tokens : NULL,
                           .n_toks = lp ? n_lp_toks(g, ev) : 0,
                           .finish = fin};
            g->shape->stream_chunk(g, c, &p);
        }
    }
    free(rs.p);
    free(ct.p);
}

/* A streamed event of choice c: its text to the shape, as it comes, through
 * the calls' parser (tools offered), or split by the <think> splitter
 * (reasoning). */
static void on_stream_event(gen_req *g, gen_choice *c, const sched_event *ev) {
    if (g->audit_keep) {
        brisk_buf_put(&c->atext, ev->text, ev->text_len);
        if (c->atext.oom)
            srv_gen_fail(g, "out of memory");
    }
    const char *fin = ev->deadline ? srv_finish_deadline
                      : ev->finish == SCHED_FINISH_STOP || ev->finish == SCHED_FINISH_LENGTH
                          ? finish_str(ev->finish)
                          : NULL;
    if (!c->started && g->echo) {
        /* The prompt first, with its tokens' log-probs when asked. */
        int n_echo = 0;
        sched_token *et = g->logprobs >= 0 ? srv_gen_echo_tokens(g, c, NULL, 0, &n_echo) : NULL;
        if (g->logprobs >= 0 && !et) {
            srv_gen_fail(g, "out of memory");
        } else {
            gen_piece p = {.text = g->ptext[c->prompt_idx],
                           .len = g->ptext_len[c->prompt_idx],
                           .toks = et,
                           .n_toks = n_echo,
                           .first_null = 1};
            g->shape->stream_chunk(g, c, &p);
        }
        free(et);
    }
    if (g->tools_on) {
        on_tools_event(g, c, ev);
    } else if (g->reason) {
        /* The delta's text split by the <think> splitter: held bytes wait
         * for the next event (all go out with the final one). */
        brisk_buf rs = {0}, ct = {0};
        srv_reason_feed(&c->reason, ev->text, ev->text_len, ev->finish != SCHED_FINISH_NONE, &rs,
                        &ct);
        if (rs.oom || ct.oom)
            srv_gen_fail(g, "out of memory");
        const int send_r = g->include_reasoning && rs.len > 0;
        if (!g->failed &&
            (ct.len || send_r || fin || (g->logprobs >= 0 && ev->n_tokens) || !c->started)) {
            gen_piece p = {.text = ct.len ? ct.p : NULL,
                           .len = ct.len,
                           .reasoning = send_r ? rs.p : NULL,
                           .reasoning_len = send_r ? rs.len : 0,
                           .toks = ev->tokens,
                           .n_toks = n_lp_toks(g, ev),
                           .finish = fin};
            g->shape->stream_chunk(g, c, &p);
        }
        free(rs.p);
        free(ct.p);
    } else if (!g->failed && (ev->text_len || fin || (g->logprobs >= 0 && ev->n_tokens) ||
                              (!c->started && g->is_chat))) {
        gen_piece p = {.text = ev->text,
                       .len = ev->text_len,
                       .toks = ev->tokens,
                       .n_toks = n_lp_toks(g, ev),
                       .finish = fin};
        g->shape->stream_chunk(g, c, &p);
    }
}

/* An event of choice c that is not streamed: its text and tokens kept for
 * the whole answer. */
static void on_whole_event(gen_req *g, gen_choice *c, const sched_event *ev) {
    brisk_buf_put(&c->text, ev->text, ev->text_len);
    if (c->text.oom)
        srv_gen_fail(g, "out of memory");
    /* The calls are found as they come, so that a list the parser ends
     * stops the generation here too. */
    if (g->tools_on && !g->failed)
        on_tools_event(g, c, ev);
    if (g->logprobs >= 0 && ev->n_tokens) {
        size_t need = (size_t)c->n_toks + (size_t)ev->n_tokens;
        if (brisk_grow(&c->toks, &c->cap_toks, need, sizeof *c->toks, 16, 0) < 0)
            srv_gen_fail(g, "out of memory");
        else {
            memcpy(c->toks + c->n_toks, ev->tokens, (size_t)ev->n_tokens * sizeof *c->toks);
            c->n_toks += ev->n_tokens;
        }
    }
}

static void on_event(srv_app *app, sched_event *ev) {
    gen_choice *c = ev->user;
    gen_req *g = c->req;
    double now = ev->t_event;
    if (ev->t_admitted > 0 && (g->t_admit == 0 || ev->t_admitted < g->t_admit))
        g->t_admit = ev->t_admitted;
    if (ev->n_tokens > 0) {
        if (g->t_first == 0) {
            g->t_first = now;
            srv_metrics_observe_ttft(app->metrics, now - g->t_start, now);
        } else if (c->t_last > 0) {
            double gap = (now - c->t_last) / ev->n_tokens;
            for (int i = 0; i < ev->n_tokens; i++)
                srv_metrics_observe_itl(app->metrics, gap, now);
        }
        c->t_last = now;
        srv_metrics_observe_tokens(app->metrics, 0, ev->n_tokens, now);
        if (g->quota_admitted)
            srv_quota_charge(app->quota, g->key_id, ev->n_tokens, now);
    }
    if (ev->n_prompt_tokens) {
        free(c->ptoks);
        c->ptoks = ev->prompt_tokens;
        c->n_ptoks = ev->n_prompt_tokens;
        ev->prompt_tokens = NULL;
    }
    c->completion_len = ev->completion_len;
    c->cached_tokens = ev->cached_tokens;
    c->stop_index = ev->stop_index;
    if (ev->embedding) {
        free(c->emb);
        c->emb = ev->embedding;
        c->n_emb = ev->n_embedding;
        ev->embedding = NULL;
    }
    if (ev->deadline)
        c->deadline = 1;
    if (ev->finish == SCHED_FINISH_ERROR && ev->grammar_cost && !g->failed)
        g->failed_grammar = 1;
    if (ev->finish == SCHED_FINISH_ERROR)
        srv_gen_fail(g, ev->err);
    if (g->failed) {
        /* nothing more to collect or send: the error goes out at the end */
    } else if (g->stream && g->http) {
        on_stream_event(g, c, ev);
    } else {
        on_whole_event(g, c, ev);
    }
    if (ev->finish != SCHED_FINISH_NONE) {
        c->finish = ev->finish;
        c->live = 0;
        if (--g->n_live == 0)
            gen_finish(g);
    }
}

void srv_gen_on_events(srv_app *app) {
    sched_event *ev = sched_engine_drain(app->eng);
    while (ev) {
        sched_event *n = ev->next;
        on_event(app, ev);
        sched_event_free(ev);
        ev = n;
    }
}

void srv_gen_free_all(srv_app *app) {
    while (app->live) {
        gen_req *g = app->live;
        if (g->http)
            srv_req_release(g->http);
        g->http = NULL;
        gen_unlink(app, g);
        srv_gen_free(g);
    }
}

/* ---- requests ---------------------------------------------------------------------- */

void srv_gen_respond_error(srv_req *r, const srv_api_error *e) {
    srv_respond_error(r, e->status, e->type, e->param[0] ? e->param : NULL, e->code, "%s",
                      e->message);
}

/* Answers r with a 400 about its request (param may be NULL), in the
 * terms of the shape that answers it (NULL: the chat request's own): a
 * Responses request is told of max_output_tokens, not max_tokens. */
__attribute__((format(printf, 5, 6))) static void gen_refuse(srv_req *r, const srv_gen_shape *s,
                                                             const char *param, const char *code,
                                                             const char *fmt, ...) {
    srv_api_error e = {400, "invalid_request_error", "", code, ""};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    if (s && s->map_error)
        s->map_error(&e);
    srv_gen_respond_error(r, &e);
}

/* Common checks before parsing: ready, not draining, a JSON body. */
static int gen_precheck(srv_app *app, srv_req *r) {
    if (app->draining) {
        srv_respond_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        return -1;
    }
    if (!app->ready) {
        srv_respond_error(r, 503, "server_error", NULL, NULL, "the model is loading");
        return -1;
    }
    /* A missing Content-Type is read as JSON (as FastAPI does); a present one
     * must be application/json, with parameters at most: not a longer type
     * that merely starts so ("application/jsonl"). */
    size_t n;
    const char *ct = srv_req_header(r, "Content-Type", &n);
    if (ct && !(n >= 16 && strncasecmp(ct, "application/json", 16) == 0 &&
                (n == 16 || ct[16] == ';' || ct[16] == ' ' || ct[16] == '\t'))) {
        srv_respond_error(r, 400, "invalid_request_error", NULL, NULL,
                          "Content-Type must be application/json");
        return -1;
    }
    return 0;
}

const char *srv_gen_body(srv_app *app, srv_req *r, size_t *len) {
    if (gen_precheck(app, r) < 0)
        return NULL;
    return srv_req_body(r, len);
}

int srv_gen_accept(srv_app *app, srv_req *r, int rc, const srv_api_error *e, const char *name) {
    if (rc < 0) {
        srv_gen_respond_error(r, e);
        return -1;
    }
    if (name && strcmp(name, app->served_name) != 0) {
        srv_respond_error(r, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%.200s' does not exist; this server serves '%s'", name,
                          app->served_name);
        return -1;
    }
    return 0;
}

/* srv_gen_accept for the generation endpoints: their parsers' unknown
 * fields counted, and a parser out of memory answered as the engine's
 * out-of-memory is. */
static int gen_accept(srv_app *app, srv_req *r, int rc, const srv_api_error *e,
                      const srv_gen_params *p) {
    if (rc == BRISK_ENOMEM) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return -1;
    }
    if (rc == 0)
        srv_metrics_count_unknown_fields(app->metrics, p->n_unknown_fields);
    return srv_gen_accept(app, r, rc, e, p->model);
}

/* Tokenizing runs on the loop thread: 4 MB of text kept every client waiting
 * 0.7 s (stories260K's tokenizer), only to be refused. A text of len
 * bytes needs at least len / tok_max_token_bytes() tokens, so one that cannot
 * fit the context is refused without tokenizing it (answers and returns 1). */
static int refuse_surely_too_long(srv_app *app, srv_req *r, const srv_gen_shape *s, size_t len,
                                  const char *param) {
    size_t at_least = len / tok_max_token_bytes(app->vocab);
    if (at_least < (size_t)app->max_ctx)
        return 0;
    gen_refuse(r, s, param, "context_length_exceeded",
               "This model's maximum context length is %d tokens. However, your prompt of %zu "
               "bytes needs at least %zu tokens. Please reduce the prompt.",
               app->max_ctx, len, at_least);
    return 1;
}

int32_t *srv_gen_tokenize(srv_app *app, const char *text, size_t len, int flags, int *n_out) {
    int cap = (int)(len < 1024 ? 1024 : len + 16);
    if (len > (size_t)1 << 28)
        return NULL;
    int32_t *ids = brisk_malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return NULL;
    int n = tok_encode(app->vocab, text, len, flags, ids, cap);
    if (n > cap) {
        int32_t *t = brisk_realloc(ids, (size_t)n * sizeof *ids);
        if (!t) {
            free(ids);
            return NULL;
        }
        ids = t;
        n = tok_encode(app->vocab, text, len, flags, ids, n);
    }
    if (n < 0) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = brisk_malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* Builds the engine params of choice c. */
static int make_params(srv_app *app, gen_req *g, const srv_gen_params *p, int prompt_idx, int j,
                       int max_tokens, sched_seq_params *sp) {
    memset(sp, 0, sizeof *sp);
    int np = g->n_pids[prompt_idx];
    sp->prompt = brisk_malloc((size_t)np * sizeof *sp->prompt);
    if (!sp->prompt)
        return BRISK_ENOMEM;
    memcpy(sp->prompt, g->pids[prompt_idx], (size_t)np * sizeof *sp->prompt);
    sp->n_prompt = np;
    sp->max_tokens = max_tokens;
    model_sampling s = model_sampling_default();
    s.temperature = p->temperature;
    s.top_k = p->top_k > 0 ? p->top_k : 0;
    s.top_p = p->top_p;
    s.min_p = p->min_p;
    s.repetition_penalty = p->repetition_penalty;
    /* The model's own defaults (--generation-config auto) for what the
     * request left out. */
    const model_generation *d = &app->gen_defaults;
    unsigned take = d->has & ~p->given;
    if (take & MODEL_GEN_TEMPERATURE)
        s.temperature = d->temperature;
    if (take & MODEL_GEN_TOP_K)
        s.top_k = d->top_k;
    if (take & MODEL_GEN_TOP_P)
        s.top_p = d->top_p;
    if (take & MODEL_GEN_MIN_P)
        s.min_p = d->min_p;
    if (take & MODEL_GEN_REPETITION_PENALTY)
        s.repetition_penalty = d->repetition_penalty;
    s.presence_penalty = p->presence_penalty;
    s.frequency_penalty = p->frequency_penalty;
    s.penalty_last_n = 0;
    /* vLLM's and OpenAI's semantics: presence and frequency penalties see
     * the output only, the repetition penalty prompt and output. */
    s.pf_from = np;
    s.seed = p->has_seed ? p->seed + (uint64_t)j : random_seed(app);
    if (p->n_logit_bias) {
        int32_t *ids = brisk_malloc((size_t)p->n_logit_bias * sizeof *ids);
        float *b = brisk_malloc((size_t)p->n_logit_bias * sizeof *b);
        if (!ids || !b) {
            free(ids);
            free(b);
            free(sp->prompt);
            return BRISK_ENOMEM;
        }
        memcpy(ids, p->logit_bias_ids, (size_t)p->n_logit_bias * sizeof *ids);
        memcpy(b, p->logit_bias, (size_t)p->n_logit_bias * sizeof *b);
        s.n_logit_bias = p->n_logit_bias;
        s.logit_bias_ids = ids;
        s.logit_bias = b;
    }
    sp->sampling = s;
    sp->logprobs = p->logprobs;
    sp->prompt_logprobs = g->echo && p->logprobs >= 0;
    sp->pooling = g->embed;
    sp->priority = g->priority;
    sp->deadline = g->deadline;
    sp->ignore_eos = p->ignore_eos;
    sp->min_tokens = p->min_tokens;
    sp->grammar = model_grammar_ref(g->grammar);
    sp->include_stop_str = p->include_stop_str;
    if (p->n_stop_token_ids) {
        sp->stop_ids = brisk_malloc((size_t)p->n_stop_token_ids * sizeof *sp->stop_ids);
        if (!sp->stop_ids) {
            sched_seq_params_free(sp);
            return BRISK_ENOMEM;
        }
        memcpy(sp->stop_ids, p->stop_token_ids, (size_t)p->n_stop_token_ids * sizeof *sp->stop_ids);
        sp->n_stop_ids = p->n_stop_token_ids;
    }
    if (p->n_stop) {
        sp->stop = brisk_calloc((size_t)p->n_stop, sizeof *sp->stop);
        if (!sp->stop) {
            sched_seq_params_free(sp);
            return BRISK_ENOMEM;
        }
        sp->n_stop = p->n_stop;
        for (int i = 0; i < p->n_stop; i++)
            if (!(sp->stop[i] = dup_str(p->stop[i]))) {
                sched_seq_params_free(sp);
                return BRISK_ENOMEM;
            }
    }
    return 0;
}

/* max_tokens of a prompt of np tokens: as asked, else the endpoint's
 * default (completions: 16, as OpenAI), else the rest of the context. */
static int gen_max_tokens(const srv_app *app, const srv_gen_params *p, int np, int dflt) {
    if (p->max_tokens > 0)
        return p->max_tokens;
    if (dflt > 0)
        return dflt;
    return app->max_ctx - np;
}

/* The key's limits (srv_quota.h), before any engine work: -1 after
 * answering 429 (or 400 for a prompt over the whole token budget). An
 * admitted request carries the x-ratelimit-* headers. */
static int gen_admit(srv_app *app, srv_req *r, gen_req *g) {
    srv_quota_verdict v;
    srv_quota_admit(app->quota, g->key_id[0] ? g->key_id : NULL, g->prompt_tokens, brisk_now(), &v);
    char h[640];
    srv_quota_headers(&v, h, sizeof h);
    if (v.ok) {
        g->quota_admitted = v.limited;
        if (h[0] && srv_req_set_headers(r, h) < 0) {
            srv_respond_code(r, BRISK_ENOMEM, NULL);
            return -1;
        }
        return 0;
    }
    if (h[0] && srv_req_set_headers(r, h) < 0) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return -1;
    }
    srv_usage_limited(app->usage, g->key_id, v.which);
    if (v.too_large)
        srv_respond_error(r, 400, "invalid_request_error", NULL, "tokens_over_limit",
                          "this request's %d prompt tokens exceed the key's limit of %lld tokens "
                          "per window",
                          g->prompt_tokens, v.limit_tokens);
    else
        srv_respond_error(r, 429, "rate_limit_error", NULL, "rate_limit_exceeded",
                          "rate limit reached for key '%s' on %s; try again in %.1f s", g->key_id,
                          v.which, v.retry_after_s);
    return -1;
}

/* Validates lengths, submits every choice and starts the response.
 * Takes ownership of g (freed or linked). */
void srv_gen_start(srv_app *app, srv_req *r, gen_req *g, srv_gen_params *p,
                   int max_tokens_default) {
    /* The constraint, compiled (or found compiled) before any engine work. */
    if (p->grammar) {
        char err[200] = "";
        int rc = BRISK_ENOMEM;
        g->grammar = app->grammars ? srv_grammar_get(app->grammars, p->grammar, p->grammar_len, &rc,
                                                     err, sizeof err)
                                   : NULL;
        g->grammar_param = p->grammar_param;
        if (!g->grammar) {
            if (rc == BRISK_EINVAL)
                gen_refuse(r, g->shape, p->grammar_param, "invalid_grammar", "%s", err);
            else
                srv_respond_code(r, BRISK_ENOMEM, NULL);
            srv_gen_free(g);
            return;
        }
    }
    /* Context: every prompt + max_tokens must fit. */
    for (int i = 0; i < g->n_prompts; i++) {
        int np = g->n_pids[i];
        int mt = gen_max_tokens(app, p, np, max_tokens_default);
        if (np == 0) {
            srv_respond_error(r, 400, "invalid_request_error", "prompt", NULL,
                              "the prompt is empty");
            srv_gen_free(g);
            return;
        }
        /* In 64 bits: max_tokens may be as large as INT32_MAX. */
        long long want = (long long)np + mt;
        if (want > app->max_ctx || np >= app->max_ctx) {
            gen_refuse(
                r, g->shape,
                g->embed            ? "input"
                : p->max_tokens > 0 ? "max_tokens"
                                    : "messages",
                "context_length_exceeded",
                "This model's maximum context length is %d tokens. However, you requested %lld "
                "tokens (%d in the prompt, %d for the completion). Please reduce the prompt "
                "or max_tokens.",
                app->max_ctx, want, np, mt);
            srv_gen_free(g);
            return;
        }
        g->prompt_tokens += np;
    }
    if (p->has_priority && p->priority != 0 &&
        app->cfg.engine.sched_policy != SCHED_POLICY_PRIORITY) {
        srv_respond_error(r, 400, "invalid_request_error", "priority", "unsupported_value",
                          "'priority' needs a server started with --scheduling-policy priority");
        srv_gen_free(g);
        return;
    }
    g->priority = srv_quota_priority(app->quota, g->key_id[0] ? g->key_id : NULL, p->priority,
                                     p->has_priority);
    double timeout = p->timeout_s > 0 ? p->timeout_s : app->cfg.request_timeout_s;
    g->deadline = timeout > 0 ? g->t_start + timeout : 0;
    if (gen_admit(app, r, g) < 0) {
        srv_gen_free(g);
        return;
    }
    /* n_choices is set only with the array: gen_free walks it. */
    int n_choices = g->n_prompts * p->n;
    if (n_choices > GEN_MAX_CHOICES) {
        srv_respond_error(r, 400, "invalid_request_error", "n", NULL,
                          "prompts x n = %d choices; at most %d in one request", n_choices,
                          GEN_MAX_CHOICES);
        srv_gen_free(g);
        return;
    }
    g->choices = brisk_calloc((size_t)n_choices, sizeof *g->choices);
    if (!g->choices) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        srv_gen_free(g);
        return;
    }
    g->n_choices = n_choices;
    g->http = r;
    srv_req_set_user(r, g); /* for the audit line (srv_gen_audit) */
    gen_link(app, g);
    int rc = 0;
    for (int i = 0; i < g->n_prompts && rc == 0; i++)
        for (int j = 0; j < p->n && rc == 0; j++) {
            gen_choice *c = &g->choices[i * p->n + j];
            c->req = g;
            c->index = i * p->n + j;
            c->prompt_idx = i;
            /* Streamed echo: the prompt's tokens (and log-probs) go first. */
            c->lp_strip = g->echo || !tok_ids_have_text(app->vocab, g->pids[i], g->n_pids[i]);
            c->lp_off = 0;
            if (g->tools_on && (rc = srv_gen_tools_begin(g, c)) < 0)
                break;
            if (g->echo && !g->stream) {
                brisk_buf_put(&c->text, g->ptext[i], g->ptext_len[i]);
                if (c->text.oom) {
                    rc = BRISK_ENOMEM;
                    break;
                }
            }
            sched_seq_params sp;
            rc = make_params(app, g, p, i, j,
                             gen_max_tokens(app, p, g->n_pids[i], max_tokens_default), &sp);
            if (rc < 0)
                break;
            sp.user = c;
            /* Later choices of a prompt share the first one's prompt KV blocks. */
            sp.fork_of = j > 0 ? &g->choices[i * p->n] : NULL;
            rc = sched_engine_submit(app->eng, &sp);
            if (rc < 0) {
                sched_seq_params_free(&sp);
                break;
            }
            c->live = 1;
            g->n_live++;
        }
    if (rc < 0) {
        for (int i = 0; i < g->n_choices; i++)
            if (g->choices[i].live)
                sched_engine_cancel(app->eng, &g->choices[i]);
        if (rc == BRISK_ENOSPC)
            srv_respond_code(r, rc, NULL); /* 429, the queue is full */
        else
            srv_respond_code(r, rc, "cannot queue the request: %s", brisk_strerror(rc));
        g->http = NULL;
        if (g->n_live == 0) {
            gen_unlink(app, g);
            srv_gen_free(g);
        }
        return;
    }
    srv_metrics_observe_tokens(app->metrics, g->prompt_tokens, 0, brisk_now());
    srv_req_on_abort(r, gen_on_abort, g);
    if (g->stream) {
        srv_stream_begin(r, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
        g->shape->stream_begin(g);
    }
}

gen_req *srv_gen_new(srv_app *app, srv_req *r, const srv_gen_shape *shape, const srv_gen_params *p,
                     int n_prompts) {
    gen_req *g = brisk_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->app = app;
    g->shape = shape;
    g->is_chat = shape->chat;
    g->stream = p->stream;
    g->include_usage = p->include_usage;
    g->logprobs = p->logprobs;
    g->echo = p->echo && !g->is_chat;
    g->created = (int64_t)time(NULL);
    g->t_start = srv_req_t_start(r);
    if (srv_req_key_id(r))
        snprintf(g->key_id, sizeof g->key_id, "%s", srv_req_key_id(r));
    /* Fresh random ids, as OpenAI's: never the client's X-Request-Id. */
    srv_http_make_id(app->http, shape->id_prefix, shape->id_chars, g->id, sizeof g->id);
    g->n_prompts = n_prompts;
    g->pids = brisk_calloc((size_t)n_prompts, sizeof *g->pids);
    g->n_pids = brisk_calloc((size_t)n_prompts, sizeof *g->n_pids);
    g->ptext = brisk_calloc((size_t)n_prompts, sizeof *g->ptext);
    g->ptext_len = brisk_calloc((size_t)n_prompts, sizeof *g->ptext_len);
    g->p_is_tokens = brisk_calloc((size_t)n_prompts, sizeof *g->p_is_tokens);
    g->audit_keep = app->audit && app->cfg.audit_content;
    if (!g->pids || !g->n_pids || !g->ptext || !g->ptext_len || !g->p_is_tokens) {
        srv_gen_free(g);
        return NULL;
    }
    return g;
}

/* --audit-log-content: a copy of the chat messages for the audit line. */
static int audit_keep_msgs(gen_req *g, const srv_chat_req *cr) {
    g->a_msgs = brisk_calloc((size_t)cr->n_msgs, sizeof *g->a_msgs);
    if (!g->a_msgs)
        return BRISK_ENOMEM;
    for (int i = 0; i < cr->n_msgs; i++) {
        char *s = brisk_malloc(cr->msgs[i].content_len + 1);
        if (!s)
            return BRISK_ENOMEM;
        memcpy(s, cr->msgs[i].content, cr->msgs[i].content_len);
        s[cr->msgs[i].content_len] = '\0';
        g->a_msgs[i].role = cr->msgs[i].role;
        g->a_msgs[i].content = s;
        g->a_msgs[i].len = cr->msgs[i].content_len;
        g->a_n_msgs++;
    }
    return 0;
}

int srv_gen_bos_flag(srv_app *app) {
    return tok_add_bos_default(app->vocab) ? TOK_ADD_BOS : 0;
}

void srv_gen_completions(srv_req *r) {
    srv_app *app = srv_req_app(r);
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    srv_completion_req cr;
    srv_api_error e;
    int rc = srv_api_parse_completion(body, len, &app->limits, &cr, &e);
    if (gen_accept(app, r, rc, &e, &cr.params) < 0) {
        srv_completion_req_free(&cr);
        return;
    }
    for (int i = 0; i < cr.n_prompts; i++) {
        if (!cr.prompts[i].is_tokens &&
            refuse_surely_too_long(app, r, NULL, cr.prompts[i].text_len, "prompt")) {
            srv_completion_req_free(&cr);
            return;
        }
    }
    gen_req *g = srv_gen_new(app, r, &srv_gen_shape_completions, &cr.params, cr.n_prompts);
    if (!g) {
        srv_completion_req_free(&cr);
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    for (int i = 0; i < cr.n_prompts; i++) {
        srv_prompt *pr = &cr.prompts[i];
        if (pr->is_tokens) {
            g->pids[i] = brisk_malloc((size_t)(pr->n_ids ? pr->n_ids : 1) * sizeof(int32_t));
            if (g->pids[i])
                memcpy(g->pids[i], pr->ids, (size_t)pr->n_ids * sizeof(int32_t));
            g->n_pids[i] = pr->n_ids;
            g->p_is_tokens[i] = 1;
            if (g->echo) {
                g->ptext[i] = tok_decode_all(app->vocab, pr->ids, pr->n_ids, 0);
                g->ptext_len[i] = g->ptext[i] ? strlen(g->ptext[i]) : 0;
            }
        } else {
            g->pids[i] = srv_gen_tokenize(app, pr->text, pr->text_len,
                                          srv_gen_bos_flag(app) | TOK_PARSE_SPECIAL, &g->n_pids[i]);
            if (g->echo || g->audit_keep) {
                g->ptext[i] = brisk_malloc(pr->text_len + 1);
                if (g->ptext[i]) {
                    memcpy(g->ptext[i], pr->text, pr->text_len);
                    g->ptext[i][pr->text_len] = '\0';
                }
                g->ptext_len[i] = pr->text_len;
            }
        }
        int want_text = g->echo || (g->audit_keep && !pr->is_tokens);
        if (!g->pids[i] || (want_text && !g->ptext[i])) {
            srv_gen_free(g);
            srv_completion_req_free(&cr);
            srv_respond_code(r, BRISK_ENOMEM, NULL);
            return;
        }
    }
    srv_gen_start(app, r, g, &cr.params, 16);
    srv_completion_req_free(&cr);
}

/* Renders a parsed chat request into prompt token ids: the tools' grammar
 * into cr->params (when the choice needs one), the messages in the model's
 * template, tokenized. Returns the ids (malloc'd, *n_ids of them), or NULL
 * once r has been answered (cr still owned by the caller). */
static int32_t *gen_chat_prompt(srv_app *app, srv_req *r, srv_chat_req *cr, const srv_gen_shape *s,
                                int *n_ids) {
    if (app->chat.kind == MODEL_CHAT_NONE) {
        gen_refuse(r, s, "messages", "chat_template_missing",
                   "this model has no chat template brisk can apply; use /v1/completions or start "
                   "the server with --chat-template NAME");
        return NULL;
    }
    /* The rendered text holds every content: refuse before rendering. */
    size_t content_len = 0;
    for (int i = 0; i < cr->n_msgs; i++)
        content_len += cr->msgs[i].content_len;
    if (refuse_surely_too_long(app, r, s, content_len, "messages"))
        return NULL;
    /* Tools offered, or calls and results in the history: the messages in
     * the family's tool format (srv_tools.h); the answer's grammar when
     * the choice needs one. */
    int tools_on = cr->n_tools > 0 && cr->tool_choice != SRV_TOOL_CHOICE_NONE;
    if (tools_on) {
        int none = 0;
        char *gt = srv_tools_grammar(cr, app->chat.kind, &none);
        if (!gt && !none) {
            srv_respond_code(r, BRISK_ENOMEM, NULL);
            return NULL;
        }
        if (gt && cr->params.grammar) {
            gen_refuse(r, s, cr->params.grammar_param, NULL,
                       "'%s' and 'tool_choice' both constrain the output; give one",
                       cr->params.grammar_param);
            free(gt);
            return NULL;
        }
        if (gt) {
            cr->params.grammar = gt;
            cr->params.grammar_len = strlen(gt);
            cr->params.grammar_param = "tools";
        }
    }
    srv_tools_arena arena;
    const model_chat_msg *msgs = NULL;
    int n_msgs = 0;
    if (srv_tools_render_msgs(cr, app->chat.kind, &arena, &msgs, &n_msgs) < 0) {
        srv_tools_arena_free(&arena);
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return NULL;
    }
    char bos[128] = "", eos[128] = "", err[256];
    int32_t b = tok_bos(app->vocab), eo = tok_eos(app->vocab);
    if (b >= 0) {
        int n = tok_token_to_piece(app->vocab, b, TOK_PARSE_SPECIAL, bos, sizeof bos - 1);
        bos[n > 0 && n < (int)sizeof bos ? n : 0] = '\0';
    }
    if (eo >= 0) {
        int n = tok_token_to_piece(app->vocab, eo, TOK_PARSE_SPECIAL, eos, sizeof eos - 1);
        eos[n > 0 && n < (int)sizeof eos ? n : 0] = '\0';
    }
    char *text = NULL;
    size_t text_len = 0;
    int has_bos = 0;
    /* enable_thinking = false: the template's empty think block (Qwen3). */
    model_chat_format fmt = app->chat;
    if (cr->enable_thinking == 0)
        fmt.flags |= MODEL_CHAT_F_NO_THINK;
    int rc = model_chat_format_render(&fmt, msgs, n_msgs, bos, eos, &text, &text_len, &has_bos, err,
                                      sizeof err);
    srv_tools_arena_free(&arena);
    if (rc < 0) {
        if (rc == BRISK_ENOMEM)
            srv_respond_code(r, BRISK_ENOMEM, NULL);
        else
            gen_refuse(r, s, "messages", NULL, "%s", err);
        return NULL;
    }
    int flags = TOK_PARSE_SPECIAL | (has_bos ? 0 : srv_gen_bos_flag(app));
    int32_t *ids = srv_gen_tokenize(app, text, text_len, flags, n_ids);
    free(text);
    if (!ids)
        srv_respond_code(r, BRISK_ENOMEM, NULL);
    return ids;
}

int32_t *srv_gen_chat_prompt(srv_app *app, srv_req *r, srv_chat_req *cr, int *n_ids) {
    return gen_chat_prompt(app, r, cr, NULL, n_ids);
}

void srv_gen_chat_run(srv_req *r, srv_chat_req *cr, const srv_gen_shape *shape, void *state) {
    srv_app *app = srv_req_app(r);
    int n_ids = 0;
    int32_t *ids = gen_chat_prompt(app, r, cr, shape, &n_ids);
    gen_req *g = ids ? srv_gen_new(app, r, shape, &cr->params, 1) : NULL;
    if (!g) {
        if (state)
            shape->free_state(state);
        if (ids) { /* else r has been answered */
            free(ids);
            srv_respond_code(r, BRISK_ENOMEM, NULL);
        }
        return;
    }
    g->state = state;
    g->pids[0] = ids;
    g->n_pids[0] = n_ids;
    if (g->audit_keep && audit_keep_msgs(g, cr) < 0) {
        srv_gen_free(g);
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    g->reason =
        (app->chat.flags & MODEL_CHAT_F_THINK) && cr->split_reasoning && cr->enable_thinking != 0;
    g->include_reasoning = cr->include_reasoning;
    g->tools_on = cr->n_tools > 0 && cr->tool_choice != SRV_TOOL_CHOICE_NONE;
    g->tools_forced = srv_tools_forced(cr, app->chat.kind);
    g->tools_kind = app->chat.kind;
    srv_gen_start(app, r, g, &cr->params, 0);
}

void srv_gen_chat(srv_req *r) {
    srv_app *app = srv_req_app(r);
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    srv_chat_req cr;
    srv_api_error e;
    int rc = srv_api_parse_chat(body, len, &app->limits, &cr, &e);
    if (gen_accept(app, r, rc, &e, &cr.params) < 0) {
        srv_chat_req_free(&cr);
        return;
    }
    srv_gen_chat_run(r, &cr, &srv_gen_shape_chat, NULL);
    srv_chat_req_free(&cr);
}
