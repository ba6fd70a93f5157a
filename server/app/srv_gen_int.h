/* srv_gen_int.h - the state of one generation request (srv_gen.c) and the
 * output shapes that answer it: its choices, what streaming and the audit
 * line (srv_gen_audit.c) read, the pieces of an answer (srv_gen_answer.c),
 * and srv_gen_shape, one struct of writers per API shape
 * (srv_gen_openai.c, srv_gen_responses.c, srv_embed.c, srv_gen_anthropic.c).
 * Server-internal; loop thread only. */
#ifndef SRV_GEN_INT_H
#define SRV_GEN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/brisk_buf.h"
#include "models/chat_template.h"
#include "models/grammar.h"
#include "scheduler/engine.h"
#include "server/api/srv_reason.h"
#include "server/api/srv_tools.h"
#include "server/app/srv_app.h"
#include "server/ops/srv_audit.h"

#define GEN_MAX_CHOICES 128

typedef struct srv_gen_shape srv_gen_shape;

typedef struct gen_choice {
    gen_req *req;
    int index;
    int prompt_idx;
    int live; /* submitted, final event not yet seen */
    sched_finish finish;
    /* The whole output of a response that is not streamed (echo included). */
    brisk_buf text;
    sched_token *toks; /* every output token, for logprobs */
    int n_toks;
    size_t cap_toks;
    sched_token *ptoks; /* prompt log-probs (echo) */
    int n_ptoks;
    int completion_len;
    int cached_tokens; /* of its prompt, found in the prefix cache */
    brisk_buf atext;   /* streaming with --audit-log-content: the output sent so far */
    int started;       /* streaming: first chunk sent */
    size_t lp_off;     /* streaming: text bytes of the tokens sent so far */
    int lp_strip;      /* streaming: no text token sent yet, and the text starts afresh */
    double t_last;
    srv_reason reason; /* the <think> splitter of a stream, or of an answer with tools
                          (zeroed = initial) */
    /* Tools offered: the parser finding the answer's calls as it comes (owned),
     * and whether it ended their list, so that the sequence was cancelled. */
    srv_tools_stream *tools;
    int tools_stopped;
    int deadline;   /* its deadline ended it (finish LENGTH or EXPIRED) */
    int stop_index; /* the stop string that ended it (sched_event.stop_index), or -1 */
    float *emb;     /* embeddings: the pooled vector from the final event (owned), [n_emb] */
    int n_emb;
} gen_choice;

struct gen_req {
    gen_req *next, *prev;
    srv_app *app;
    srv_req *http;              /* NULL once answered or aborted */
    const srv_gen_shape *shape; /* how it answers (a static instance, set by srv_gen_new) */
    void *state;                /* the shape's own state (owned: shape->free_state), or NULL */
    int is_chat, stream, include_usage, logprobs, echo;
    int reason;            /* chat: split <think>...</think> off as reasoning_content */
    int include_reasoning; /* with reason: send the reasoning (else drop it) */
    char id[64];
    int64_t created;
    int n_choices, n_live;
    gen_choice *choices;
    int n_prompts;
    int32_t **pids; /* per prompt token ids (echo, usage) */
    int *n_pids;
    char **ptext; /* per prompt text for echo (and for the audit log's content) */
    size_t *ptext_len;
    int *p_is_tokens;      /* per prompt: given as token ids */
    int audit_keep;        /* --audit-log-content: keep the prompts, messages and output */
    srv_audit_msg *a_msgs; /* chat messages (contents owned, roles static) */
    int a_n_msgs;
    int prompt_tokens;
    double t_start, t_first, t_admit;
    int failed;
    int failed_grammar; /* failed because its grammar was too costly: the client's fault */
    char err[160];
    model_grammar *grammar;    /* the request's constraint (a reference), or NULL */
    const char *grammar_param; /* the field that gave it (static), for errors */
    int tools_on;              /* chat with tools offered: answers are parsed for calls */
    int tools_forced;          /* ... and a grammar holds them to the format (srv_tools_forced) */
    int embed;                 /* /v1/embeddings: SCHED_POOL_LAST or _MEAN (0: a generation) */
    char key_id[72];           /* the API key's id ("" when none): its limits (srv_quota.h) */
    int quota_admitted;        /* holds a concurrency slot of key_id, released at gen_free */
    int priority;              /* the engine priority (request, else the key's default; floored) */
    double deadline;           /* brisk_now() time its sequences end (0: none) */
    int emb_base64, emb_normalize;
    model_chat_kind tools_kind;
};

/* ---- output shapes -------------------------------------------------------------- */

/* One streamed piece of a choice's answer, as a shape's stream_chunk takes
 * it (every pointer borrowed for the call). */
typedef struct gen_piece {
    const char *text; /* answer text, len bytes (may be partial UTF-8); NULL: none */
    size_t len;
    /* Tools offered: the answer's text and calls instead of text, in the
     * order the parser released them (srv_tools.h's pieces); at the finish,
     * every call of the answer (for a shape's closing summary). */
    const srv_tools_piece *tools;
    int n_tools;
    const srv_tool_call *calls;
    int n_calls;
    const char *reasoning; /* reasoning split off the answer, reasoning_len bytes, or NULL */
    size_t reasoning_len;
    const sched_token *toks; /* the tokens since the last piece, for their log-probs */
    int n_toks;
    int first_null;     /* toks[0] has no log-prob (an echoed prompt's first token) */
    const char *finish; /* the choice's finish_reason; NULL: more pieces follow */
} gen_piece;

/* An API shape: how a generation request answers - the id it carries, the
 * events of its stream, the body of its whole answer, its errors. One
 * static instance per API (below); a request points at its own from
 * srv_gen_new on, and the lifecycle (srv_gen.c) only calls through it, so
 * adding an API is one more instance in its own file, with the handler
 * that parses its requests and runs them (srv_gen_chat_run). Every writer
 * answers on g->http, which may be NULL (the client left), and fails the
 * request (srv_gen_fail) when it cannot build what it must send. A shape
 * that never streams (embeddings) leaves the stream writers NULL. */
struct srv_gen_shape {
    const char *endpoint; /* its path, for the access log */
    /* The response id: this prefix and id_chars random letters and digits. */
    const char *id_prefix;
    int id_chars;
    /* The prompt is chat messages: a choice's first streamed event reaches
     * stream_chunk even without text, the log-probs leave out a final
     * end-of-sequence token, echo is ignored, and the audit line keeps the
     * messages. */
    int chat;
    /* Facts of the shape's own that its writers read (srv_gen_openai.c:
     * which JSON objects its chunks and bodies are), or NULL. */
    const void *data;
    /* Frees g->state; NULL when the shape keeps none. */
    void (*free_state)(void *state);
    /* A stream's opening events, once its 200 header is out. */
    void (*stream_begin)(gen_req *g);
    /* One piece of choice c. */
    void (*stream_chunk)(gen_req *g, gen_choice *c, const gen_piece *p);
    /* After every choice's final event: the usage, the error event of a
     * failed or expired request, the stream's terminator; the lifecycle
     * then ends the stream. */
    void (*stream_end)(gen_req *g, const srv_usage *u);
    /* The whole answer of a request that did not stream, fail or expire. */
    void (*respond)(gen_req *g, const srv_usage *u);
    /* With respond = srv_gen_respond_choices: the body made of every
     * choice's answer, ch[g->n_choices] (malloc'd JSON; NULL: out of memory). */
    char *(*body)(const gen_req *g, const srv_choice *ch, const srv_usage *u);
    /* A failed or expired request's error: an HTTP error response when it
     * does not stream, else the stream's error event. */
    void (*error)(gen_req *g, const srv_api_error *e);
    /* Puts a 400 about the chat request it was translated into in the API's
     * own terms (field names in param and message); NULL: none needed. */
    void (*map_error)(srv_api_error *e);
};

extern const srv_gen_shape srv_gen_shape_completions; /* srv_gen_openai.c */
extern const srv_gen_shape srv_gen_shape_chat;        /* srv_gen_openai.c */
extern const srv_gen_shape srv_gen_shape_responses;   /* srv_gen_responses.c */
extern const srv_gen_shape srv_gen_shape_embeddings;  /* srv_embed.c */
extern const srv_gen_shape srv_gen_shape_anthropic;   /* srv_gen_anthropic.c */

/* ---- the lifecycle (srv_gen.c) -------------------------------------------------- */

/* A new request answered in shape for n_prompts prompts (NULL: out of
 * memory), its start (context checks, limits, submission; answers r on
 * failure and frees g), and its freeing. */
gen_req *srv_gen_new(srv_app *app, srv_req *r, const srv_gen_shape *shape, const srv_gen_params *p,
                     int n_prompts);
void srv_gen_start(srv_app *app, srv_req *r, gen_req *g, srv_gen_params *p, int max_tokens_default);
void srv_gen_free(gen_req *g);
/* Runs a parsed chat request on r, answered in shape (answered in every
 * case; cr stays the caller's to free). state is the shape's own (or
 * NULL), taken over here: freed with shape->free_state. */
void srv_gen_chat_run(srv_req *r, srv_chat_req *cr, const srv_gen_shape *shape, void *state);
/* The request can no longer be answered right: remembers why (the first
 * reason only) and cancels its other choices. */
void srv_gen_fail(gen_req *g, const char *why);
/* Sends SSE text (malloc'd, n bytes; freed here) on g's stream; NULL fails
 * the request for want of memory, since a stream must never skip a piece. */
void srv_gen_write(gen_req *g, char *sse, size_t n);
/* Every choice expired before it ran (the deadline passed while waiting). */
int srv_gen_all_expired(const gen_req *g);
/* Fill *e with the error of a failed request (500, "generation failed:
 * <why>"; 400 invalid_request_error, code grammar_too_costly, param the
 * constraint's field, when its grammar was too costly) or of one whose every
 * choice expired (504); return e. */
const srv_api_error *srv_gen_failure(const gen_req *g, srv_api_error *e);
const srv_api_error *srv_gen_expiry(srv_api_error *e);
/* The error hook of a shape whose errors are OpenAI's error body
 * (srv_gen_respond_error), for requests that do not stream. */
void srv_gen_error_http(gen_req *g, const srv_api_error *e);

/* ---- answers (srv_gen_answer.c) ------------------------------------------------- */

/* Log-prob structs for tokens (srv_api.h's srv_token_logprob), with their
 * strings; freed by srv_gen_lps_free. */
typedef struct gen_lps {
    srv_token_logprob *lps;
    srv_top_logprob *tops;
    char **strs;
    int n_strs;
} gen_lps;

/* Builds *out for toks[n]. Token strings show control tokens by their text;
 * text_offset counts, from *off (advanced), the bytes of text before the
 * token (control tokens add none). *strip says the next text piece starts
 * the text, so it loses the space SentencePiece decoding drops there: the
 * joined strings of text tokens then equal the text. 0 or BRISK_ENOMEM
 * (*out then holds what was built, for srv_gen_lps_free). */
int srv_gen_lps_build(const tok_vocab *v, const sched_token *toks, int n, int first_null,
                      size_t *off, int *strip, gen_lps *out);
void srv_gen_lps_free(gen_lps *s);
/* Choice c's echoed prompt tokens (the first without a log-prob) followed
 * by extra[0, n_extra): malloc'd, *n their count; NULL when out of memory. */
sched_token *srv_gen_echo_tokens(const gen_req *g, const gen_choice *c, const sched_token *extra,
                                 int n_extra, int *n);
/* Tools offered: choice c's parser (c->tools), made when the choice is;
 * 0 or BRISK_ENOMEM. */
int srv_gen_tools_begin(gen_req *g, gen_choice *c);
/* Tools offered: text (len bytes, the answer's part of an event; with end,
 * its last) into c's parser; *pieces (*n) are what may be sent now
 * (borrowed until the next feed). When the parser ends the list of calls,
 * the sequence is cancelled. 0, or BRISK_ENOMEM (the request failed). */
int srv_gen_tools_feed(gen_req *g, gen_choice *c, const char *text, size_t len, srv_tools_end end,
                       const srv_tools_piece **pieces, int *n);
/* A choice's finish_reason once its final event (finish f, its deadline's
 * or not) is in: with tools offered, "tool_calls" when its calls were
 * complete, else "length" when its budget cut it (calls or not), else
 * "tool_calls" or "stop". */
const char *srv_gen_choice_finish(const gen_req *g, const gen_choice *c, sched_finish f,
                                  int deadline);
/* The respond writer of the generation shapes: every choice's whole text
 * split into reasoning and answer, parsed for tool calls, with its
 * log-probs, made into a body by g->shape->body and sent (200, or 500 when
 * out of memory). */
void srv_gen_respond_choices(gen_req *g, const srv_usage *u);

#endif
