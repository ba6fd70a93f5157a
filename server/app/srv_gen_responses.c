/* srv_gen_responses.c - POST /v1/responses: OpenAI's Responses API as an
 * output shape (srv_gen_int.h). The request is translated into a chat
 * request and run as one (srv_responses.h), answered as a "response"
 * object, or streamed as its typed events (response.created ...
 * response.completed), which srv_responses.c writes; the shape's state is
 * that file's srv_resp_req (what the object echoes, the stream's progress).
 * Loop thread. */
#include <stdlib.h>
#include <string.h>

#include "server/api/srv_responses.h"
#include "server/app/srv_app.h"

#include "server/app/srv_gen_int.h"

static srv_resp_req *resp_of(const gen_req *g) {
    return g->state;
}

static void resp_free(void *state) {
    srv_resp_req_free(state);
}

/* A choice's usage: a Responses answer has one choice. */
static srv_usage resp_usage(const gen_req *g, const gen_choice *c) {
    srv_usage u = {g->prompt_tokens, c->completion_len, c->cached_tokens};
    return u;
}

/* Sends SSE text made by srv_responses_sse_* (freed here); n is read
 * through a pointer, since the call that makes sse sets it. */
static void resp_send(gen_req *g, char *sse, const size_t *np) {
    srv_gen_write(g, sse, *np);
}

/* response.created and response.in_progress. */
static void resp_begin(gen_req *g) {
    size_t n = 0;
    resp_send(g, srv_responses_sse_start(resp_of(g), g->id, g->created, g->app->served_name, &n),
              &n);
}

/* The closing events and the final object; finish "length" (the budget or
 * the deadline) makes it incomplete. calls: every call of the answer. */
static void resp_close(gen_req *g, gen_choice *c, const srv_tool_call *calls, int n_calls,
                       const char *finish) {
    srv_resp_result res = {.calls = calls,
                           .n_calls = n_calls,
                           .incomplete = !strcmp(finish, "length"),
                           .usage = resp_usage(g, c)};
    size_t n = 0;
    resp_send(
        g, srv_responses_sse_finish(resp_of(g), g->id, g->created, g->app->served_name, &res, &n),
        &n);
}

/* Text deltas, or (tools offered) text and calls as the parser released
 * them: a call's first piece opens its item, its fragments are argument
 * deltas; then the closing events at the finish. */
static void resp_chunk(gen_req *g, gen_choice *c, const gen_piece *p) {
    size_t n = 0;
    if (!p->tools && (p->len || !p->finish) && !g->tools_on)
        resp_send(g, srv_responses_sse_delta(resp_of(g), p->text, p->len, &n), &n);
    for (int i = 0; i < p->n_tools && !g->failed; i++) {
        const srv_tools_piece *t = &p->tools[i];
        if (t->call < 0)
            resp_send(g, srv_responses_sse_delta(resp_of(g), t->text, t->len, &n), &n);
        else
            resp_send(g, srv_responses_sse_call(resp_of(g), t->id, t->name, t->text, t->len, &n),
                      &n);
    }
    c->started = 1;
    if (p->finish && !g->failed)
        resp_close(g, c, p->calls, p->n_calls, p->finish);
}

/* Its "error" event, or the object's failure; the stream's end. */
static void resp_error(gen_req *g, const srv_api_error *e) {
    if (!g->stream) {
        srv_gen_error_http(g, e);
        return;
    }
    size_t n = 0;
    char *ev = srv_responses_sse_error(resp_of(g), e->message, &n);
    if (ev)
        srv_stream_write(g->http, ev, n);
    free(ev);
}

/* A failure's "error" event (an expired request's stream just ends); no
 * [DONE]: the stream ends with the connection's last chunk. */
static void resp_end(gen_req *g, const srv_usage *u) {
    (void)u; /* the final object carried it */
    srv_api_error e;
    if (g->failed)
        resp_error(g, srv_gen_failure(g, &e));
}

static char *resp_body(const gen_req *g, const srv_choice *ch, const srv_usage *u) {
    /* Incomplete whenever the budget or the deadline ended the answer. */
    srv_resp_result res = {.text = ch[0].calls && !ch[0].text ? NULL : ch[0].text,
                           .text_len = ch[0].text_len,
                           .reasoning = ch[0].reasoning,
                           .reasoning_len = ch[0].reasoning_len,
                           .calls = ch[0].calls,
                           .n_calls = ch[0].n_calls,
                           .incomplete = !strcmp(ch[0].finish_reason, "length"),
                           .usage = *u};
    return srv_responses_json(resp_of(g), g->id, g->created, g->app->served_name, &res);
}

const srv_gen_shape srv_gen_shape_responses = {
    .endpoint = "/v1/responses",
    .id_prefix = "resp_",
    .id_chars = 40,
    .chat = 1,
    .data = NULL,
    .free_state = resp_free,
    .stream_begin = resp_begin,
    .stream_chunk = resp_chunk,
    .stream_end = resp_end,
    .respond = srv_gen_respond_choices,
    .body = resp_body,
    .error = resp_error,
    .map_error = srv_responses_map_error,
};

void srv_route_responses(srv_req *r) {
    srv_app *app = srv_req_app(r);
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    srv_chat_req cr;
    srv_resp_req *rr = NULL;
    srv_api_error e;
    int rc = srv_responses_parse(body, len, &app->limits, &cr, &rr, &e);
    if (srv_gen_accept(app, r, rc, &e, cr.params.model) < 0) {
        srv_resp_req_free(rr);
        srv_chat_req_free(&cr);
        return;
    }
    /* A stream carries no reasoning item (srv_responses.h). */
    if (cr.params.stream)
        cr.include_reasoning = 0;
    srv_http_make_id(app->http, "msg_", 40, rr->msg_id, sizeof rr->msg_id);
    srv_http_make_id(app->http, "rs_", 40, rr->rs_id, sizeof rr->rs_id);
    srv_gen_chat_run(r, &cr, &srv_gen_shape_responses, rr);
    srv_chat_req_free(&cr);
}
