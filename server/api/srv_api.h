/* srv_api.h - the OpenAI API JSON layer: request bodies of /v1/completions and
 * /v1/chat/completions in, plain C structs out (srv_api_req.c); response
 * bodies, streaming chunks, SSE framing and UTF-8 sanitising (srv_api_resp.c).
 *
 * Runs on the loop thread. The engine sees only the structs below, never
 * cJSON. Every request body is hostile: the parsers validate everything,
 * answer 400 with an OpenAI-shaped error for any bad input, and never assert
 * or abort on it. Every JSON text produced here is one line of valid UTF-8. */
#ifndef SRV_API_H
#define SRV_API_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- errors */

/* An OpenAI error: {"error":{"message","type","param","code"}}.
 * type and code point to static strings (code may be NULL); param is ""
 * when the error names no field. */
typedef struct srv_api_error {
    int status;       /* HTTP status: 400 for every validation error, 500 for ENOMEM */
    const char *type; /* "invalid_request_error" or "server_error" */
    char param[64];   /* e.g. "temperature", "messages[2].content"; "" = null */
    const char *code; /* "invalid_type", "invalid_value", ... or NULL */
    char message[512];
} srv_api_error;

/* Malloc'd one-line JSON of e; caller frees. NULL on allocation failure. */
char *srv_api_error_json(const srv_api_error *e);

/* ---------------------------------------------------------------- requests */

/* What the parser needs to know from the app. */
typedef struct srv_api_limits {
    int n_vocab;        /* token ids and logit_bias keys must be in [0, n_vocab) */
    int max_n;          /* choices per prompt (16) */
    int max_logprobs;   /* top alternatives per token (20) */
    int max_stop;       /* stop strings (4) */
    int max_stop_len;   /* bytes per stop string (1024) */
    int max_logit_bias; /* logit_bias entries (1024) */
    int max_prompts;    /* prompts in one completions request (64) */
    int max_messages;   /* chat messages (1024) */
    int max_json_depth; /* nesting of objects and arrays (32); checked before parsing */
    /* Strings (keys included), numbers, literals, objects and arrays in one body
     * (1M); checked before parsing, because cJSON spends ~64 bytes and ~0.2 us on
     * each: 4 MiB of "1," is 2M values, 400 ms of the loop thread and 130 MB.
     * The server sets it from its context (srv_app.c). */
    int max_json_values;
} srv_api_limits;

/* The defaults in parentheses above, for a vocabulary of n_vocab tokens. */
srv_api_limits srv_api_limits_default(int n_vocab);

/* Generation parameters shared by both endpoints. JSON null means "not given"
 * for every optional field. Owns every pointer; freed with the request. */
typedef struct srv_gen_params {
    char *model;       /* NULL when not given */
    int max_tokens;    /* -1: not given (chat: max_completion_tokens wins) */
    float temperature; /* [0, 2], default 1 */
    float top_p;       /* (0, 1], default 1 */
    int top_k;         /* -1: off (0 is accepted as off and stored as -1) */
    float min_p;       /* [0, 1], default 0 */
    int n;             /* [1, max_n], default 1 */
    char **stop;       /* [n_stop] non-empty NUL-terminated strings */
    int n_stop;
    int has_seed;
    uint64_t seed;            /* the int64 given, as two's complement */
    float presence_penalty;   /* [-2, 2], default 0 */
    float frequency_penalty;  /* [-2, 2], default 0 */
    float repetition_penalty; /* (0, 10], default 1 */
    int32_t *logit_bias_ids;  /* [n_logit_bias], ids in [0, n_vocab), distinct */
    float *logit_bias;        /* [n_logit_bias], in [-100, 100] */
    int n_logit_bias;
    int logprobs; /* -1: off; else top alternatives per token (0 = chosen only) */
    int echo;     /* completions: prompt text prepended to each choice */
    int stream;
    int include_usage; /* stream_options.include_usage */
    int ignore_eos;
    /* vLLM's: until min_tokens tokens, EOS and stop_token_ids cannot be
     * sampled and stop strings are not looked for; a stop_token_ids token
     * ends the output (its text kept, as vLLM keeps a non-special one);
     * include_stop_str: a matched stop string stays in the text. */
    int min_tokens;
    int32_t *stop_token_ids; /* [n_stop_token_ids], ids in [0, n_vocab) */
    int n_stop_token_ids;
    int include_stop_str;
    /* Constrained output: GBNF text (models/grammar.h) of the one constraint
     * given - llama.cpp's grammar, vLLM's guided_grammar / guided_choice /
     * structured_outputs {grammar, choice}, response_format json_object -
     * or NULL; grammar_param names that field (static) for errors. */
    char *grammar;
    size_t grammar_len;
    const char *grammar_param;
    int priority;         /* vLLM's: lower is served first (--scheduling-policy priority) */
    int has_priority;     /* priority was given */
    float timeout_s;      /* brisk's deadline from arrival, seconds (0, 86400]; 0: none given */
    int n_unknown_fields; /* top-level fields not understood, ignored */
    /* MODEL_GEN_* bits (models/model.h) of the sampling fields the request
     * gave: the others take the model's defaults (--generation-config auto) */
    unsigned given;
} srv_gen_params;

/* One completions prompt: text, or token ids (is_tokens). */
typedef struct srv_prompt {
    int is_tokens;
    char *text; /* owned, NUL-terminated, text_len > 0, valid UTF-8, no NUL */
    size_t text_len;
    int32_t *ids; /* owned, [n_ids], n_ids > 0, each in [0, n_vocab) */
    int n_ids;
} srv_prompt;

typedef struct srv_completion_req {
    srv_gen_params params;
    srv_prompt *prompts; /* [n_prompts], 1 <= n_prompts <= max_prompts */
    int n_prompts;
} srv_completion_req;

/* A tool call: in an assistant message of the history, or parsed from an
 * output. Owned strings; arguments is the JSON text of the arguments. */
typedef struct srv_tool_call {
    char *id;
    char *name;
    char *arguments;
} srv_tool_call;

/* One chat message. content is valid UTF-8 without NUL bytes; text parts are
 * concatenated with nothing between them. */
typedef struct srv_chat_msg {
    const char *role; /* static: "system" ("developer" maps here), "user", "assistant", "tool" */
    char *content;    /* owned, NUL-terminated, may be "" */
    size_t content_len;
    srv_tool_call *calls; /* assistant: its tool_calls (owned), [n_calls] */
    int n_calls;
    char *tool_call_id; /* tool: the call it answers (owned), or NULL */
} srv_chat_msg;

/* A function the model may call (OpenAI's tools[i].function). */
typedef struct srv_tool {
    char *name;        /* [A-Za-z0-9_-]{1,64} */
    char *description; /* or NULL */
    char *parameters;  /* compact JSON of its parameters schema, or NULL (any object) */
    char *args_rules;  /* GBNF rules for the arguments (names prefixed per tool), or NULL */
    char *args_expr;   /* the GBNF expression of the arguments ("jo" when any object) */
} srv_tool;

typedef enum {
    SRV_TOOL_CHOICE_NONE = 0, /* no tools, or "none": tools are not offered */
    SRV_TOOL_CHOICE_AUTO,     /* the model may call one */
    SRV_TOOL_CHOICE_REQUIRED, /* it must call at least one (the grammar holds it to that) */
    SRV_TOOL_CHOICE_NAMED,    /* it must call tool_named */
} srv_tool_choice;

typedef struct srv_chat_req {
    srv_gen_params params;
    srv_chat_msg *msgs; /* [n_msgs], 1 <= n_msgs <= max_messages */
    int n_msgs;
    /* Reasoning models (Qwen3's <think>, srv_reason.h): */
    int enable_thinking;   /* chat_template_kwargs.enable_thinking: -1 not given, 0 or 1 */
    int split_reasoning;   /* reasoning_format "none": 0; "auto"/"deepseek" or absent: 1 */
    int include_reasoning; /* vLLM's include_reasoning: 1 (default); 0 drops it */
    srv_tool *tools;       /* [n_tools], owned */
    int n_tools;
    srv_tool_choice tool_choice;
    int tool_named;          /* NAMED: index into tools */
    int parallel_tool_calls; /* 1 (default): several calls in one answer */
} srv_chat_req;

/* Parse and validate a request body of len bytes (need not be NUL-terminated).
 * Returns 0 with *out filled (the caller frees it with the matching _free),
 * BRISK_EINVAL with *err a 400 for any bad input, or BRISK_ENOMEM with *err
 * a 500. On failure *out is left zeroed and owns nothing. */
int srv_api_parse_completion(const char *body, size_t len, const srv_api_limits *lim,
                             srv_completion_req *out, srv_api_error *err);
int srv_api_parse_chat(const char *body, size_t len, const srv_api_limits *lim, srv_chat_req *out,
                       srv_api_error *err);

/* Free what a request owns and zero it; NULL and zeroed structs are fine. */
void srv_completion_req_free(srv_completion_req *r);
void srv_chat_req_free(srv_chat_req *r);

/* vLLM's /tokenize (srv_api_tok.c): a prompt, or chat messages rendered
 * with the model's template. Owns every pointer. */
typedef struct srv_tokenize_req {
    char *model; /* NULL when not given */
    int is_chat; /* "messages" given: chat holds the parsed chat request */
    srv_chat_req chat;
    char *prompt; /* the prompt form: valid UTF-8, NUL-terminated */
    size_t prompt_len;
    int add_special_tokens; /* prompt form: add BOS as the model does (default 1) */
    int return_token_strs;  /* also each token's text ("token_strs") */
} srv_tokenize_req;

/* vLLM's /detokenize: token ids back to text. */
typedef struct srv_detokenize_req {
    char *model;
    int32_t *ids; /* [n_ids], each in [0, n_vocab) */
    int n_ids;
} srv_detokenize_req;

/* Same contract as srv_api_parse_chat. */
int srv_api_parse_tokenize(const char *body, size_t len, const srv_api_limits *lim,
                           srv_tokenize_req *out, srv_api_error *err);
int srv_api_parse_detokenize(const char *body, size_t len, const srv_api_limits *lim,
                             srv_detokenize_req *out, srv_api_error *err);
void srv_tokenize_req_free(srv_tokenize_req *r);
void srv_detokenize_req_free(srv_detokenize_req *r);

/* /v1/embeddings (srv_api_tok.c): OpenAI's request with vLLM's and
 * llama.cpp's extensions. Owns every pointer. */
#define SRV_EMBED_MAX_INPUTS 2048
typedef struct srv_embed_req {
    char *model;
    srv_prompt *inputs; /* [n_inputs], 1..SRV_EMBED_MAX_INPUTS: text or token ids */
    int n_inputs;
    int base64;             /* encoding_format "base64": little-endian float32 bytes */
    int dimensions;         /* -1: not given */
    int normalize;          /* L2-normalise (default 1; vLLM's normalize, llama.cpp's
                               embd_normalize 2 / -1) */
    int add_special_tokens; /* text inputs: BOS as the model adds it (default 1) */
} srv_embed_req;

int srv_api_parse_embeddings(const char *body, size_t len, const srv_api_limits *lim,
                             srv_embed_req *out, srv_api_error *err);
void srv_embed_req_free(srv_embed_req *r);

/* ---------------------------------------------------------------- responses */

/* Inputs of the response builders: all borrowed for the call. Text fields are
 * raw bytes (token pieces may be partial UTF-8): the builders replace
 * ill-formed sequences with U+FFFD, except in chat logprobs' "bytes" arrays,
 * which carry the raw bytes. A logprob that is not finite is written -9999. */
typedef struct srv_top_logprob {
    const char *token;
    size_t token_len;
    float logprob;
} srv_top_logprob;

typedef struct srv_token_logprob {
    const char *token;
    size_t token_len;
    float logprob;
    int has_logprob; /* 0: null (echo's first prompt token) */
    int n_top;
    const srv_top_logprob *top; /* [n_top], best first */
    size_t text_offset;         /* completions: byte offset of the token in the choice text */
} srv_token_logprob;

/* One entry of a chunk's delta.tool_calls, as OpenAI streams calls: a
 * call's first (its index, id, type, name and empty arguments), then
 * fragments of its arguments (index and arguments alone). Borrowed. */
typedef struct srv_call_delta {
    int index;             /* the call's place in the answer */
    const char *id, *name; /* the first delta; NULL in a fragment */
    const char *args;      /* a fragment: args_len bytes of the arguments text */
    size_t args_len;
} srv_call_delta;

typedef struct srv_choice {
    int index;
    const char *text; /* chat chunks: NULL = no "content" in the delta */
    size_t text_len;
    const char *finish_reason;    /* "stop", "length", or NULL (JSON null) */
    const srv_token_logprob *lps; /* [n_lps] */
    int n_lps;
    const char *reasoning; /* chat: "reasoning_content" (before "content") when not NULL */
    size_t reasoning_len;
    /* chat: tool calls (message.tool_calls; "content" is null when text is
     * NULL). */
    const srv_tool_call *calls;
    int n_calls;
    /* chat chunks: a tool-call delta (delta.tool_calls holds it alone), or NULL. */
    const srv_call_delta *delta;
} srv_choice;

/* The finish_reason of a choice its deadline ended: "length", and the
 * builders add "brisk_finish_detail": "deadline" to the choice (compared by
 * address: pass this very array). */
extern const char srv_finish_deadline[];

typedef struct srv_usage {
    int prompt_tokens, completion_tokens;
    int cached_tokens; /* prompt_tokens_details.cached_tokens: prompt tokens the prefix cache held */
} srv_usage;

/* Every builder returns a malloc'd, NUL-terminated, one-line JSON text that
 * the caller frees, or NULL on allocation failure. want_logprobs selects
 * between "logprobs": null and the logprobs object built from lps. */

/* "text_completion" with n choices and usage (usage may be NULL: omitted). */
char *srv_api_completion_json(const char *id, int64_t created, const char *model,
                              const srv_choice *choices, int n, const srv_usage *usage,
                              int want_logprobs);

/* "chat.completion": choices[{index, message{role, content}, logprobs, finish_reason}]. */
char *srv_api_chat_json(const char *id, int64_t created, const char *model,
                        const srv_choice *choices, int n, const srv_usage *usage,
                        int want_logprobs);

/* One streaming chunk of /v1/completions ("text_completion"). c == NULL gives
 * "choices": [] (the include_usage chunk); usage != NULL adds "usage". */
char *srv_api_completion_chunk_json(const char *id, int64_t created, const char *model,
                                    const srv_choice *c, const srv_usage *usage, int want_logprobs);

/* One "chat.completion.chunk". The delta carries "role": "assistant" when
 * first is set and "content" when c->text != NULL (first with text NULL gives
 * "content": ""). c == NULL gives "choices": [] (the include_usage chunk). */
char *srv_api_chat_chunk_json(const char *id, int64_t created, const char *model,
                              const srv_choice *c, int first, const srv_usage *usage,
                              int want_logprobs);

/* /v1/models: {"object":"list","data":[{"id","object":"model","created",
 * "owned_by","max_model_len","file_type","generation_defaults"}]};
 * max_model_len <= 0 and file_type NULL (dummy weights, still loading) leave
 * them out. gen (NULL: left out, still loading) gives the sampling defaults
 * in force: {"source": "generation_config" with the model's fields, or
 * "brisk" when it gives none or --generation-config vllm}. */
struct model_generation;
char *srv_api_models_json(const char *model_id, int64_t created, const char *owned_by,
                          int max_model_len, const char *file_type,
                          const struct model_generation *gen);
/* /v1/models/{id}: the one model object of the list above. */
char *srv_api_model_json(const char *model_id, int64_t created, const char *owned_by,
                         int max_model_len, const char *file_type,
                         const struct model_generation *gen);

/* /tokenize: {"count","max_model_len","tokens"[,"token_strs"]}; strs NULL
 * leaves token_strs out, else strs[i] holds str_lens[i] bytes. */
char *srv_api_tokenize_json(const int32_t *ids, int n, int max_model_len, char *const *strs,
                            const size_t *str_lens);
/* /detokenize: {"prompt": text}. */
char *srv_api_detokenize_json(const char *text, size_t len);
/* /v1/embeddings: {"object":"list","data":[{"object":"embedding","index",
 * "embedding": [floats] or "base64"}],"model","usage"}; vecs[i] holds dim
 * floats (a value that is not finite is written 0). */
char *srv_api_embeddings_json(const float *const *vecs, int n, int dim, int base64,
                              const char *model, int prompt_tokens);

/* ---------------------------------------------------------------- SSE */

/* "data: <json>\n\n", malloc'd (caller frees); *len gets its length (without
 * the NUL). json must be one line, as every builder above makes it. */
char *srv_sse_event(const char *json, size_t *len);

/* "data: [DONE]\n\n": a static string, never freed. */
const char *srv_sse_done(size_t *len);

/* "data: {"error":{...}}\n\n", malloc'd (caller frees). */
char *srv_sse_error(const srv_api_error *e, size_t *len);

#endif
