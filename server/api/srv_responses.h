/* srv_responses.h - OpenAI's Responses API (POST /v1/responses), stateless.
 *
 * A request is translated into a chat request (srv_api.h's srv_chat_req):
 * instructions become a system message, input items become messages
 * (message, function_call, function_call_output), text.format becomes
 * response_format, function tools and tool_choice their chat forms,
 * max_output_tokens max_tokens; sampling fields go through the chat parser,
 * which validates (or refuses by name) them as it does for
 * /v1/chat/completions. Nothing is stored: previous_response_id,
 * conversation and background are refused with a 400 naming them.
 *
 * The answer is a "response" object whose output holds a reasoning item
 * (reasoning models, non-streamed), a message item with one output_text
 * part, or function_call items. Streams are typed SSE events ("event:
 * <type>" then "data: {"type":..,"sequence_number":..}"), in the order the
 * official openai SDK consumes: response.created, response.in_progress,
 * response.output_item.added, response.content_part.added,
 * response.output_text.delta..., response.output_text.done,
 * response.content_part.done, response.output_item.done (a function call:
 * output_item.added, response.function_call_arguments.delta... as the
 * arguments are written, response.function_call_arguments.done,
 * output_item.done), then
 * response.completed or response.incomplete; a failure sends an "error"
 * event. No [DONE] line: the stream ends with the connection's last chunk.
 *
 * Loop thread only; every body is hostile (srv_api.h's rules). */
#ifndef SRV_RESPONSES_H
#define SRV_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "common/brisk_buf.h"
#include "server/api/srv_api.h"

/* A Responses request's own state: what the response object echoes, and
 * the stream's progress. Made by srv_responses_parse, freed with
 * srv_resp_req_free. */
typedef struct srv_resp_req {
    brisk_buf echo;      /* ,"instructions":..,"tools":[..],... (JSON members) */
    char msg_id[48];     /* the message item's id ("msg_..."), set by the caller */
    char rs_id[48];      /* the reasoning item's id ("rs_...") */
    int seq;             /* the next event's sequence_number */
    int text_open;       /* stream: the message item and its part were announced */
    int msg_index;       /* stream: its output_index */
    int msg_after;       /* stream: the call items announced before it */
    int n_items;         /* stream: output items announced */
    brisk_buf text;      /* stream: the text sent so far */
    int n_calls;         /* stream: call items announced */
    int call_open;       /* stream: the last call item is open (its done events not sent) */
    int call_index;      /* its output_index */
    srv_tool_call call;  /* its id and name (owned; arguments unused) */
    brisk_buf call_args; /* its arguments sent so far */
} srv_resp_req;

void srv_resp_req_free(srv_resp_req *rr);

/* Parses a /v1/responses body into *chat (the caller frees it with
 * srv_chat_req_free) and *out (freed with srv_resp_req_free). Same error
 * contract as srv_api_parse_chat; on failure both are left empty. */
int srv_responses_parse(const char *body, size_t len, const srv_api_limits *lim, srv_chat_req *chat,
                        srv_resp_req **out, srv_api_error *err);

/* Puts an error about the chat request a Responses request became in the
 * Responses API's terms: param and message name text.format,
 * max_output_tokens, input, tools[i].name where the chat ones stood. */
void srv_responses_map_error(srv_api_error *err);

/* What a finished generation produced, for the response object. */
typedef struct srv_resp_result {
    const char *text; /* the answer's text, or NULL */
    size_t text_len;
    const char *reasoning; /* a reasoning model's thoughts, or NULL */
    size_t reasoning_len;
    const srv_tool_call *calls; /* function calls, or NULL */
    int n_calls;
    int msg_after;  /* the message item comes after this many calls (0: first) */
    int incomplete; /* stopped by max_output_tokens (or the context): every item too */
    srv_usage usage;
} srv_resp_result;

/* The whole "response" object (malloc'd one-line JSON; NULL: out of memory). */
char *srv_responses_json(const srv_resp_req *rr, const char *id, int64_t created, const char *model,
                         const srv_resp_result *res);

/* Streams: each returns malloc'd SSE text (*len bytes), NULL when out of
 * memory. start: response.created and response.in_progress. delta: the
 * message item and its part when not yet announced, then an
 * output_text.delta. call: with id, a call's first piece - the open call
 * item closed, a function_call item announced (id, name); then a
 * function_call_arguments.delta for its n bytes of args. finish: the open
 * items' closing events (an empty message item when there was nothing)
 * and response.completed or response.incomplete, whose object lists the
 * items where they were streamed. error: an "error" event. */
char *srv_responses_sse_start(srv_resp_req *rr, const char *id, int64_t created, const char *model,
                              size_t *len);
char *srv_responses_sse_delta(srv_resp_req *rr, const char *text, size_t n, size_t *len);
char *srv_responses_sse_call(srv_resp_req *rr, const char *id, const char *name, const char *args,
                             size_t n, size_t *len);
char *srv_responses_sse_finish(srv_resp_req *rr, const char *id, int64_t created, const char *model,
                               const srv_resp_result *res, size_t *len);
char *srv_responses_sse_error(srv_resp_req *rr, const char *message, size_t *len);

#endif
