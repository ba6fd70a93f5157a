/* srv_tools.h - tool calling for chat completions: the request's tools and
 * tool_choice, the history's tool calls and results rendered in the model
 * family's tool format, the grammar that holds "required" and named choices
 * to valid calls, and the calls parsed back out of an answer.
 *
 * Formats (srv_tools_fmt.c, one srv_tool_format row each; a chat family's
 * row in models/chat_template.c names the one its templates use,
 * model_chat_tool_format):
 *   - "hermes", the ChatML families' (Qwen2/2.5, Hermes, SmolLM): the tools
 *     as JSON lines inside <tools></tools> in the system turn, a call as
 *     <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> in the
 *     assistant turn, results as <tool_response> blocks in a user turn
 *     (Qwen2.5's template does the same);
 *   - "llama3": Llama 3.1's JSON calls - the tools before the first user
 *     turn's text, a call as {"name": ..., "parameters": {...}}, results in
 *     "ipython" turns;
 *   - "mistral": its v3 format - [AVAILABLE_TOOLS] before the last user turn,
 *     [TOOL_CALLS] and a JSON list of calls, [TOOL_RESULTS] blocks; required
 *     and named choices end the prompt with [TOOL_CALLS] (a control token
 *     the text-level grammar cannot produce);
 *   - "json", every other family's: a generic JSON format, as llama.cpp does
 *     for templates without one - the answer is one JSON object, either
 *     {"tool_calls": [{"name": ..., "arguments": {...}}]} or
 *     {"response": "..."}; with tools offered the grammar holds even "auto"
 *     answers to those two shapes.
 * "required" and a named tool are held to valid calls by a grammar whose
 * arguments follow each function's parameters schema (server/api/srv_schema.h);
 * "auto" in the Hermes, Llama 3 and Mistral formats leaves the model free
 * and parses what it wrote. parallel_tool_calls false allows one call.
 *
 * Threads: the loop thread; everything here is plain functions on the
 * request's structs. */
#ifndef SRV_TOOLS_H
#define SRV_TOOLS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "models/chat_template.h"
#include "server/api/srv_api.h"

#define SRV_MAX_TOOLS 128

/* Parses tools, tool_choice and parallel_tool_calls (any may be NULL) into
 * r; 0, or a 400 / 500 in err. Each tool's parameters are converted to GBNF
 * here, so a schema brisk cannot follow is a 400 naming the tool. */
int srv_tools_parse(const cJSON *tools, const cJSON *tool_choice, const cJSON *parallel,
                    srv_chat_req *r, srv_api_error *err);
/* An assistant message's tool_calls (array) into m; param names the message
 * for errors ("messages[3]"). */
int srv_tools_parse_calls(const cJSON *calls, const char *param, srv_chat_msg *m,
                          srv_api_error *err);
void srv_tools_free(srv_tool *t, int n);
/* 1 if s is a function name brisk takes: 1 to 64 of a-z, A-Z, 0-9, '_', '-'. */
int srv_tools_valid_name(const char *s);
void srv_tool_calls_free(srv_tool_call *c, int n);

/* The messages to render with the chat template: the tools' description in
 * the system turn, the history's calls and results in the family's format.
 * *out (n_out messages) and the strings they point to live in *arena
 * (free with srv_tools_arena_free). */
typedef struct srv_tools_arena {
    char **s;
    size_t n, cap;
    model_chat_msg *msgs;
} srv_tools_arena;
int srv_tools_render_msgs(const srv_chat_req *r, model_chat_kind kind, srv_tools_arena *arena,
                          const model_chat_msg **out, int *n_out);
void srv_tools_arena_free(srv_tools_arena *a);

/* GBNF for the answer: required and named choices in both formats, and auto
 * in the generic one; NULL with *none set when the answer is free (no tools,
 * "none", or auto in the Hermes format). NULL without *none: out of memory. */
char *srv_tools_grammar(const srv_chat_req *r, model_chat_kind kind, int *none);

/* 1 when srv_tools_grammar gives r's answer a grammar: the answer is then
 * held to the format's calls (or, in the generic format, its text shape). */
int srv_tools_forced(const srv_chat_req *r, model_chat_kind kind);

/* The calls in a whole answer, as srv_tools_stream finds them (a free
 * answer that ended on its own): *calls (n of them, ids from make_id) and
 * the rest of the text as *content (malloc'd, NULL when empty). Returns the
 * number of calls (0: none found, the text is content), or BRISK_ENOMEM. */
int srv_tools_parse_output(model_chat_kind kind, const char *text, size_t len,
                           void (*make_id)(void *ctx, char out[32]), void *id_ctx,
                           srv_tool_call **calls, char **content);

/* ---- an answer's calls, found as it is generated (srv_tools_stream.c) ---- */

/* The most calls one answer holds. The grammar of a forced answer admits no
 * more, and the parser ends a free answer's list there: a small model that
 * loops on calls would otherwise spend its whole budget on them. A call
 * that repeats an earlier one of the same answer (same name, same
 * arguments text) ends the list too, and is dropped. */
#define SRV_TOOLS_MAX_CALLS 16

/* One piece of an answer as the parser releases it: text for "content", or
 * a part of call `call` - its first piece carries its id and name (and no
 * arguments), the next ones fragments of its arguments text, in order.
 * Pointers are borrowed until the parser's next call. */
typedef struct srv_tools_piece {
    int call;              /* -1: text of the answer; else the call's index, from 0 */
    const char *id, *name; /* a call's first piece; else NULL */
    const char *text;      /* the text, or an arguments fragment (len bytes, may be 0) */
    size_t len;
} srv_tools_piece;

typedef enum {
    SRV_TOOLS_MORE = 0, /* more text follows */
    SRV_TOOLS_END_STOP, /* the answer ends: the model stopped (EOS, a stop string) */
    SRV_TOOLS_END_CUT   /* the answer ends: its budget (max_tokens, context, deadline) cut it */
} srv_tools_end;

/* The parser of one answer in family kind's format. forced: a grammar holds
 * the answer (srv_tools_forced), so a call is one from its name on, and its
 * id, name and arguments are released as they are written; else the model
 * is free, a call is held until its JSON is complete and valid, and text
 * is released at once unless it could still begin a call. make_id names a
 * call when its first piece is released. Returns NULL when out of memory;
 * free with srv_tools_stream_free.
 *
 * Content is the text outside the calls with its leading and trailing
 * whitespace left out (whitespace is held until more text follows). Markup
 * never reaches it: at the end, a forced answer's unfinished markup is
 * dropped, and so is a free one's once it is past a call's opening. A call
 * cut by the budget is kept with the arguments written so far (as OpenAI
 * returns it), unless all it has written repeats an earlier call. */
typedef struct srv_tools_stream srv_tools_stream;
srv_tools_stream *srv_tools_stream_new(model_chat_kind kind, int forced,
                                       void (*make_id)(void *ctx, char out[32]), void *id_ctx);
void srv_tools_stream_free(srv_tools_stream *s);
/* Feeds the answer's next len bytes (end: they are its last); *pieces (*n)
 * are what may be sent now. 0, or BRISK_ENOMEM (the parser is then spent). */
int srv_tools_stream_feed(srv_tools_stream *s, const char *text, size_t len, srv_tools_end end,
                          const srv_tools_piece **pieces, int *n);
/* 1 once the parser has ended the list of calls (SRV_TOOLS_MAX_CALLS, or a
 * repeated call): the caller stops the generation; later text is ignored. */
int srv_tools_stream_ended(const srv_tools_stream *s);
/* 1 when the answer's calls are complete: their list or the generic
 * format's object was closed, or the parser ended the list. */
int srv_tools_stream_complete(const srv_tools_stream *s);
/* The calls released so far (borrowed, *n of them; a call's arguments are
 * the fragments released so far, joined). */
const srv_tool_call *srv_tools_stream_calls(srv_tools_stream *s, int *n);
/* The content released so far (borrowed, NUL-terminated, *len bytes), or
 * NULL when there is none. */
const char *srv_tools_stream_content(const srv_tools_stream *s, size_t *len);

/* The name of the tool format (a row of srv_tools_fmt.c) family kind's
 * tools, calls and results are written in, and its answers parsed in: the
 * one model_chat_tool_format names, or "json" when that name has no row.
 * Every function above that takes a kind uses that row. Static. */
const char *srv_tools_format_name(model_chat_kind kind);

#endif
