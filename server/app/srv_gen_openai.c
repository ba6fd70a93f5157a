/* srv_gen_openai.c - the output shapes of OpenAI's /v1/completions and
 * /v1/chat/completions (srv_gen_int.h): "text_completion" and
 * "chat.completion(.chunk)" objects, streamed as "data: {json}" events
 * ending in "data: [DONE]". The two differ only in the object a chunk or
 * a body is, and in the chat stream's opening role chunk. Loop thread. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "server/api/srv_tools.h"
#include "server/app/srv_app.h"

#include "server/app/srv_gen_int.h"

/* What tells the two shapes apart: their shape's data. */
typedef struct openai_api {
    /* A chunk: choice ch (NULL: the usage chunk); first says it opens the
     * choice's stream. */
    char *(*chunk)(const gen_req *g, const srv_choice *ch, int first, const srv_usage *u,
                   int want_lp);
    /* The whole answer, choices ch[n] (srv_api.h). */
    char *(*whole)(const char *id, int64_t created, const char *model, const srv_choice *ch, int n,
                   const srv_usage *u, int want_lp);
    int role_first; /* a stream opens with an empty chunk per choice: the role */
} openai_api;

static const openai_api *api_of(const gen_req *g) {
    return g->shape->data;
}

static char *completion_chunk(const gen_req *g, const srv_choice *ch, int first, const srv_usage *u,
                              int want_lp) {
    (void)first;
    return srv_api_completion_chunk_json(g->id, g->created, g->app->served_name, ch, u, want_lp);
}

static char *chat_chunk(const gen_req *g, const srv_choice *ch, int first, const srv_usage *u,
                        int want_lp) {
    return srv_api_chat_chunk_json(g->id, g->created, g->app->served_name, ch, first, u, want_lp);
}

/* Sends one SSE event holding json (freed here). */
static void send_json(gen_req *g, char *json) {
    size_t n = 0;
    char *ev = json ? srv_sse_event(json, &n) : NULL;
    free(json);
    srv_gen_write(g, ev, n);
}

/* Sends chunk ch of choice c (the role goes with its first). */
static void send_choice(gen_req *g, gen_choice *c, const srv_choice *ch, int want_lp) {
    char *json = api_of(g)->chunk(g, ch, !c->started, NULL, want_lp);
    c->started = 1;
    send_json(g, json);
}

/* An answer with tools offered, as the parser released it, as OpenAI
 * streams calls: text as "content"; each call first as one delta with its
 * index, id, type, name and empty arguments, then its arguments in
 * fragments as they were written. A chunk holds one of these; the
 * reasoning goes with the first, the log-probs and the finish with the
 * last one that is not a call's (a chunk of their own when needed). */
static void send_tool_chunks(gen_req *g, gen_choice *c, const gen_piece *p, const gen_lps *lp,
                             int want_lp) {
    int sent_r = !p->reasoning, sent_end = 0;
    for (int i = 0; i < p->n_tools && g->http && !g->failed; i++) {
        const srv_tools_piece *t = &p->tools[i];
        srv_choice ch = {.index = c->index};
        srv_call_delta d = {t->call, t->id, t->name, t->text, t->len};
        if (t->call < 0) {
            ch.text = t->text;
            ch.text_len = t->len;
        } else {
            ch.delta = &d;
        }
        if (!sent_r) {
            ch.reasoning = p->reasoning;
            ch.reasoning_len = p->reasoning_len;
            sent_r = 1;
        }
        if (i == p->n_tools - 1 && t->call < 0) {
            ch.finish_reason = p->finish;
            ch.lps = lp->lps;
            ch.n_lps = want_lp ? p->n_toks : 0;
            sent_end = 1;
        }
        send_choice(g, c, &ch, want_lp && sent_end);
    }
    if (!sent_end && g->http && !g->failed &&
        (!sent_r || p->finish || (want_lp && p->n_toks) || !c->started)) {
        srv_choice ch = {.index = c->index,
                         .reasoning = sent_r ? NULL : p->reasoning,
                         .reasoning_len = sent_r ? 0 : p->reasoning_len,
                         .finish_reason = p->finish,
                         .lps = lp->lps,
                         .n_lps = want_lp ? p->n_toks : 0};
        send_choice(g, c, &ch, want_lp);
    }
}

/* One piece of choice c: its text (or, tools offered, its text and calls)
 * and the log-probs of its tokens. */
static void send_chunk(gen_req *g, gen_choice *c, const gen_piece *p) {
    gen_lps lp;
    memset(&lp, 0, sizeof lp);
    int want_lp = g->logprobs >= 0;
    if (want_lp && p->n_toks &&
        srv_gen_lps_build(g->app->vocab, p->toks, p->n_toks, p->first_null, &c->lp_off,
                          &c->lp_strip, &lp) < 0) {
        srv_gen_lps_free(&lp);
        srv_gen_fail(g, "out of memory");
        return;
    }
    if (p->tools || g->tools_on) {
        send_tool_chunks(g, c, p, &lp, want_lp);
        srv_gen_lps_free(&lp);
        return;
    }
    srv_choice ch = {.index = c->index,
                     .text = p->text,
                     .text_len = p->len,
                     .finish_reason = p->finish,
                     .lps = lp.lps,
                     .n_lps = want_lp ? p->n_toks : 0,
                     .reasoning = p->reasoning,
                     .reasoning_len = p->reasoning_len};
    send_choice(g, c, &ch, want_lp);
    srv_gen_lps_free(&lp);
}

/* The error of a request: OpenAI's error body, or in a stream its error
 * event; a failure that cannot build even that sends a fixed one. */
static void send_error(gen_req *g, const srv_api_error *e) {
    if (!g->stream) {
        srv_gen_error_http(g, e);
        return;
    }
    size_t n;
    char *ev = srv_sse_error(e, &n);
    if (ev) {
        srv_stream_write(g->http, ev, n);
        free(ev);
    } else if (e->status == 500) {
        static const char oom[] =
            "data: {\"error\":{\"message\":\"generation failed: out of memory\","
            "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n";
        srv_stream_write(g->http, oom, sizeof oom - 1);
    }
}

/* The stream's end: the usage chunk when asked, the error event of a
 * failed or expired request, then [DONE]. */
static void send_end(gen_req *g, const srv_usage *u) {
    srv_api_error e;
    if (!g->failed && g->include_usage)
        send_json(g, api_of(g)->chunk(g, NULL, 0, u, 0));
    if (g->failed && g->http)
        send_error(g, srv_gen_failure(g, &e));
    else if (g->http && srv_gen_all_expired(g))
        send_error(g, srv_gen_expiry(&e));
    size_t n;
    const char *done = srv_sse_done(&n);
    if (g->http)
        srv_stream_write(g->http, done, n);
}

/* A chat stream opens with the role, as OpenAI sends it. */
static void send_begin(gen_req *g) {
    gen_piece p = {.text = "", .len = 0};
    for (int i = 0; api_of(g)->role_first && i < g->n_choices; i++)
        send_chunk(g, &g->choices[i], &p);
}

static char *whole_body(const gen_req *g, const srv_choice *ch, const srv_usage *u) {
    return api_of(g)->whole(g->id, g->created, g->app->served_name, ch, g->n_choices, u,
                            g->logprobs >= 0);
}

static const openai_api completions_api = {completion_chunk, srv_api_completion_json, 0};

const srv_gen_shape srv_gen_shape_completions = {
    .endpoint = "/v1/completions",
    .id_prefix = "cmpl-",
    .id_chars = 29,
    .chat = 0,
    .data = &completions_api,
    .free_state = NULL,
    .stream_begin = send_begin,
    .stream_chunk = send_chunk,
    .stream_end = send_end,
    .respond = srv_gen_respond_choices,
    .body = whole_body,
    .error = send_error,
};

static const openai_api chat_api = {chat_chunk, srv_api_chat_json, 1};

const srv_gen_shape srv_gen_shape_chat = {
    .endpoint = "/v1/chat/completions",
    .id_prefix = "chatcmpl-",
    .id_chars = 29,
    .chat = 1,
    .data = &chat_api,
    .free_state = NULL,
    .stream_begin = send_begin,
    .stream_chunk = send_chunk,
    .stream_end = send_end,
    .respond = srv_gen_respond_choices,
    .body = whole_body,
    .error = send_error,
};
