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

/* The calls in an answer: *calls (n of them, ids from make_id) and the rest
 * of the text as *content (malloc'd, NULL when empty). Returns the number of
 * calls (0: none found, the whole text is content), or BRISK_ENOMEM. */
int srv_tools_parse_output(model_chat_kind kind, const char *text, size_t len,
                           void (*make_id)(void *ctx, char out[32]), void *id_ctx,
                           srv_tool_call **calls, char **content);

/* The name of the tool format (a row of srv_tools_fmt.c) family kind's
 * tools, calls and results are written in, and its answers parsed in: the
 * one model_chat_tool_format names, or "json" when that name has no row.
 * Every function above that takes a kind uses that row. Static. */
const char *srv_tools_format_name(model_chat_kind kind);

#endif
