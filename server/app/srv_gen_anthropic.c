/* srv_gen_anthropic.c - POST /v1/messages: Anthropic's Messages API as an
 * output shape (srv_gen_int.h), and POST /v1/messages/count_tokens. The
 * request is translated into a chat request and run as one
 * (srv_anthropic.h), so the chat template, tools, grammars, limits, quotas,
 * audit and metrics are the chat endpoint's; it is answered as a "message"
 * object, or streamed as Anthropic's events. The shape's state is
 * srv_anthropic.c's srv_anth_req (the stop sequences, the stream's open
 * block). Errors, from the route's error_body on, are in Anthropic's shape
 * (srv_app.c's route table). Loop thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "server/api/srv_anthropic.h"
#include "server/app/srv_app.h"

#include "server/app/srv_gen_int.h"

static srv_anth_req *anth_of(const gen_req *g) {
    return g->state;
}

static void anth_free(void *state) {
    srv_anth_req_free(state);
}

/* Sends SSE text made by srv_anthropic_sse_* (freed here); n is read
 * through a pointer, since the call that makes sse sets it. */
static void anth_send(gen_req *g, char *sse, const size_t *np) {
    srv_gen_write(g, sse, *np);
}

/* The stop_reason of choice c (a Messages answer has one choice). */
static const char *anth_stop(const gen_req *g, const gen_choice *c, int n_calls, const char **seq) {
    return srv_anthropic_stop_reason(anth_of(g), c->finish == SCHED_FINISH_LENGTH || c->deadline,
                                     n_calls, c->stop_index, seq);
}

/* message_start (the prompt's tokens as its input, nothing generated yet)
 * and a ping. */
static void anth_begin(gen_req *g) {
    size_t n = 0;
    anth_send(g,
              srv_anthropic_sse_start(anth_of(g), g->id, g->app->served_name, g->prompt_tokens, &n),
              &n);
}

/* Thoughts, then text, each into its block as it comes; with tools
 * offered, the answer's text and calls in the order the tool parser
 * released them (srv_tools_stream: a call's id and name first, then its
 * arguments as the model writes them), each call a tool_use block whose
 * input streams as input_json_delta. */
static void anth_chunk(gen_req *g, gen_choice *c, const gen_piece *p) {
    size_t n = 0;
    if (p->reasoning && p->reasoning_len)
        anth_send(g, srv_anthropic_sse_delta(anth_of(g), 1, p->reasoning, p->reasoning_len, &n),
                  &n);
    for (int i = 0; i < p->n_tools && !g->failed; i++) {
        const srv_tools_piece *t = &p->tools[i];
        if (t->call < 0 && t->len)
            anth_send(g, srv_anthropic_sse_delta(anth_of(g), 0, t->text, t->len, &n), &n);
        else if (t->call >= 0)
            anth_send(g, srv_anthropic_sse_call(anth_of(g), t->id, t->name, t->text, t->len, &n),
                      &n);
    }
    if (!p->tools && p->text && p->len && !g->failed)
        anth_send(g, srv_anthropic_sse_delta(anth_of(g), 0, p->text, p->len, &n), &n);
    c->started = 1;
}

/* The error of a request: Anthropic's error body (the route's error
 * shape), or in a stream its "error" event. */
static void anth_error(gen_req *g, const srv_api_error *e) {
    if (!g->stream) {
        srv_gen_error_http(g, e);
        return;
    }
    size_t n = 0;
    char *ev = srv_anthropic_sse_error(e->status, e->message, &n);
    if (ev)
        srv_stream_write(g->http, ev, n);
    free(ev);
}

/* The stream's end: message_delta with the stop_reason and the usage, then
 * message_stop; or the error event of a failed or expired request. */
static void anth_end(gen_req *g, const srv_usage *u) {
    srv_api_error e;
    if (g->failed) {
        anth_error(g, srv_gen_failure(g, &e));
        return;
    }
    if (srv_gen_all_expired(g)) {
        anth_error(g, srv_gen_expiry(&e));
        return;
    }
    srv_anth_result res = {.usage = *u};
    res.stop_reason = anth_stop(g, &g->choices[0], anth_of(g)->n_calls, &res.stop_sequence);
    size_t n = 0;
    anth_send(g, srv_anthropic_sse_finish(anth_of(g), &res, &n), &n);
}

static char *anth_body(const gen_req *g, const srv_choice *ch, const srv_usage *u) {
    srv_anth_result res = {.text = ch[0].text,
                           .text_len = ch[0].text ? ch[0].text_len : 0,
                           .thinking = ch[0].reasoning,
                           .thinking_len = ch[0].reasoning_len,
                           .calls = ch[0].calls,
                           .n_calls = ch[0].n_calls,
                           .usage = *u};
    res.stop_reason = anth_stop(g, &g->choices[0], ch[0].n_calls, &res.stop_sequence);
    return srv_anthropic_json(g->id, g->app->served_name, &res);
}

const srv_gen_shape srv_gen_shape_anthropic = {
    .endpoint = "/v1/messages",
    .id_prefix = "msg_",
    .id_chars = 24, /* Anthropic's ids: msg_ and 24 letters and digits */
    .chat = 1,
    .data = NULL,
    .free_state = anth_free,
    .stream_begin = anth_begin,
    .stream_chunk = anth_chunk,
    .stream_end = anth_end,
    .respond = srv_gen_respond_choices,
    .body = anth_body,
    .error = anth_error,
};

/* Parses a Messages body (count_only: count_tokens'), answering r on
 * failure: 0 with *cr and *ar filled, or -1. Thinking enabled needs a
 * model that can think (Anthropic refuses it for models that cannot);
 * adaptive thinking is the model's to decide, so a model that cannot
 * think answers without. */
static int anth_parse(srv_app *app, srv_req *r, int count_only, srv_chat_req *cr,
                      srv_anth_req **ar) {
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return -1;
    srv_api_error e;
    int rc = srv_anthropic_parse(body, len, &app->limits, count_only, cr, ar, &e);
    if (rc == 0 && (*ar)->thinking == SRV_ANTH_THINK_ON &&
        !(app->chat.flags & MODEL_CHAT_F_THINK)) {
        e = (srv_api_error){400, "invalid_request_error", "thinking", "unsupported_value", ""};
        snprintf(e.message, sizeof e.message,
                 "thinking: this model has no reasoning mode; leave thinking out or disable it");
        rc = BRISK_EINVAL;
    }
    if (srv_gen_accept(app, r, rc, &e, cr->params.model) < 0) {
        srv_anth_req_free(*ar);
        *ar = NULL;
        srv_chat_req_free(cr);
        return -1;
    }
    return 0;
}

void srv_route_messages(srv_req *r) {
    srv_app *app = srv_req_app(r);
    srv_chat_req cr;
    srv_anth_req *ar = NULL;
    if (anth_parse(app, r, 0, &cr, &ar) < 0)
        return;
    srv_gen_chat_run(r, &cr, &srv_gen_shape_anthropic, ar);
    srv_chat_req_free(&cr);
}

void srv_route_count_tokens(srv_req *r) {
    srv_app *app = srv_req_app(r);
    srv_chat_req cr;
    srv_anth_req *ar = NULL;
    if (anth_parse(app, r, 1, &cr, &ar) < 0)
        return;
    /* The prompt exactly as /v1/messages renders it: tools and all. */
    int n = 0;
    int32_t *ids = srv_gen_chat_prompt(app, r, &cr, &n);
    if (ids) { /* else r has been answered */
        char *json = srv_anthropic_count_json(n);
        if (json)
            srv_respond(r, 200, "application/json", json, strlen(json), NULL);
        else
            srv_respond_code(r, BRISK_ENOMEM, NULL);
        free(json);
    }
    free(ids);
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
}
