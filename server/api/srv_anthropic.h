/* srv_anthropic.h - Anthropic's Messages API (POST /v1/messages and
 * POST /v1/messages/count_tokens): request bodies in, message objects,
 * stream events and error bodies out.
 *
 * A request is translated into a chat request (srv_api.h's srv_chat_req),
 * so that it runs exactly as /v1/chat/completions does - the chat
 * template, the tool formats and grammars, the sampling checks: system
 * (a string or text blocks) becomes a system message; each message's
 * blocks become chat messages (text blocks joined by a newline, tool_use
 * blocks an assistant message's tool_calls, each tool_result block a tool
 * message, thinking blocks dropped as templates drop earlier thoughts);
 * tools (name, description, input_schema) and tool_choice (auto, any,
 * tool, none; disable_parallel_tool_use) their chat forms; stop_sequences
 * stop; output_config.format a JSON Schema response_format. Fields brisk
 * lacks (images, documents, server tools, a final assistant message to
 * continue, effort, ...) and fields Anthropic does not define are refused
 * with a 400 naming them; cache_control, metadata.user_id and service_tier
 * are accepted and change nothing (prefix caching is automatic). brisk's
 * sampling and scheduling extensions (seed, min_p, the penalties,
 * logit_bias, ignore_eos, min_tokens, priority, timeout) pass through.
 *
 * The answer is a "message" object: content blocks (thinking, text,
 * tool_use with ids "toolu_..."), stop_reason end_turn / max_tokens /
 * stop_sequence (with stop_sequence) / tool_use, and usage, where
 * input_tokens leaves out the prompt tokens the prefix cache held
 * (cache_read_input_tokens), as Anthropic counts them. A stream is
 * Anthropic's SSE events, each "event: <type>" then "data: {json}":
 * message_start, ping, per block content_block_start, content_block_delta
 * (text_delta, thinking_delta, input_json_delta), content_block_stop, then
 * message_delta (stop_reason, usage) and message_stop; a failure sends an
 * "error" event. Errors are {"type":"error","error":{"type","message"}}
 * with Anthropic's error type for the HTTP status.
 *
 * Loop thread only; every body is hostile (srv_api.h's rules). */
#ifndef SRV_ANTHROPIC_H
#define SRV_ANTHROPIC_H

#include <stddef.h>

#include "server/api/srv_api.h"

/* stop_sequences per request: Anthropic documents no bound; each is
 * matched against the output at every token, so a request may not ask
 * for more than this. */
#define SRV_ANTH_MAX_STOP 16

/* What the request asked of a reasoning model (thinking). */
typedef enum {
    SRV_ANTH_THINK_OFF = 0, /* absent or "disabled": no thinking */
    SRV_ANTH_THINK_ON,      /* "enabled": the model must be able to think */
    SRV_ANTH_THINK_ADAPTIVE /* "adaptive": thinks when the model can */
} srv_anth_think;

/* The block a stream has open. */
typedef enum {
    SRV_ANTH_OPEN_NONE = 0,
    SRV_ANTH_OPEN_TEXT,
    SRV_ANTH_OPEN_THINKING,
    SRV_ANTH_OPEN_TOOL
} srv_anth_open;

/* A Messages request's own state: its stop sequences (to name the one that
 * matched), its thinking mode, and a stream's progress. Made by
 * srv_anthropic_parse, freed with srv_anth_req_free. */
typedef struct srv_anth_req {
    char **stop; /* [n_stop] the stop_sequences in order, owned */
    int n_stop;
    srv_anth_think thinking;
    int count_only;     /* parsed for count_tokens */
    int n_blocks;       /* stream: content blocks started so far */
    srv_anth_open open; /* stream: the block open now */
    int n_calls;        /* stream: tool_use blocks sent */
} srv_anth_req;

void srv_anth_req_free(srv_anth_req *ar);

/* Parses a /v1/messages body (count_only: a count_tokens body, where
 * max_tokens is not required) into *chat (the caller frees it with
 * srv_chat_req_free) and *out (freed with srv_anth_req_free). Same error
 * contract as srv_api_parse_chat, with messages that start with the
 * field's path as Anthropic writes it ("messages.0.content.1.type: ...");
 * on failure both are left empty. chat->enable_thinking is 1 for
 * thinking enabled or adaptive, else 0; whether the model can think is
 * the caller's to check. */
int srv_anthropic_parse(const char *body, size_t len, const srv_api_limits *lim, int count_only,
                        srv_chat_req *chat, srv_anth_req **out, srv_api_error *err);

/* What a finished generation produced, for the message object. */
typedef struct srv_anth_result {
    const char *text; /* the answer's text; NULL or empty: no text block */
    size_t text_len;
    const char *thinking; /* a reasoning model's thoughts; NULL or empty: no thinking block */
    size_t thinking_len;
    const srv_tool_call *calls; /* tool calls (tool_use blocks), or NULL */
    int n_calls;
    const char *stop_reason;   /* static, from srv_anthropic_stop_reason */
    const char *stop_sequence; /* the matched stop sequence (borrowed), or NULL */
    srv_usage usage;
} srv_anth_result;

/* The stop_reason of an answer: "max_tokens" when its length (or its
 * deadline) ended it, else "tool_use" when it holds calls, else
 * "stop_sequence" when stop sequence stop_index (>= 0) ended it - *seq
 * gets that string, borrowed from ar; NULL otherwise - else "end_turn". */
const char *srv_anthropic_stop_reason(const srv_anth_req *ar, int length, int n_calls,
                                      int stop_index, const char **seq);

/* The whole "message" object (malloc'd one-line JSON; NULL: out of memory). */
char *srv_anthropic_json(const char *id, const char *model, const srv_anth_result *res);

/* Streams: each returns malloc'd SSE text (*len bytes, possibly none),
 * NULL when out of memory.
 * start: message_start (usage: the prompt's tokens, nothing cached or
 * generated yet) and a ping.
 * delta: text (thinking 0) or thoughts (thinking 1), n > 0 bytes: the
 * block of that kind opened when not open (the other kind closed first),
 * then its delta.
 * call: a tool call as the tool parser releases it (srv_tools_piece): its
 * first piece (id and name given) closes the open block and starts a
 * tool_use block (input {}), and each piece's text (n bytes, may be 0) is
 * an input_json_delta of that block, the arguments as the model wrote
 * them; a fragment with no tool_use block open sends nothing.
 * finish: the open block closed, then message_delta (res's stop_reason,
 * stop_sequence and usage) and message_stop; res's text and calls are not
 * sent again. */
char *srv_anthropic_sse_start(srv_anth_req *ar, const char *id, const char *model, int input_tokens,
                              size_t *len);
char *srv_anthropic_sse_delta(srv_anth_req *ar, int thinking, const char *text, size_t n,
                              size_t *len);
char *srv_anthropic_sse_call(srv_anth_req *ar, const char *id, const char *name, const char *frag,
                             size_t n, size_t *len);
char *srv_anthropic_sse_finish(srv_anth_req *ar, const srv_anth_result *res, size_t *len);

/* Anthropic's error type for an HTTP status: invalid_request_error (400
 * and the other 4xx), authentication_error (401), permission_error (403),
 * not_found_error (404), request_too_large (413), rate_limit_error (429),
 * timeout_error (504), overloaded_error (503, 529), api_error (other 5xx).
 * Static. */
const char *srv_anthropic_error_type(int status);
/* An error body {"type":"error","error":{"type","message"}} (malloc'd
 * one-line JSON; NULL: out of memory). The signature is srv_route's
 * error_body (srv_http.h): type, code and param are OpenAI's and not
 * shown (the message names the field). */
char *srv_anthropic_error_json(int status, const char *type, const char *code, const char *param,
                               const char *message);
/* The same as a stream's "error" event (*len bytes). */
char *srv_anthropic_sse_error(int status, const char *message, size_t *len);
/* count_tokens' answer: {"input_tokens": n}. */
char *srv_anthropic_count_json(int input_tokens);

#endif
