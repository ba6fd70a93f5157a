/* srv_api_req.c - request bodies of /v1/completions and /v1/chat/completions
 * into srv_completion_req / srv_chat_req, with strict validation.
 *
 * The body is scanned and parsed by srv_api_parse_json (srv_api_json.c:
 * depth, value count, strict grammar, UTF-8, duplicate keys); then each
 * known field is read with its type and range checked; unknown top-level
 * fields are counted and ignored.
 * Every rejection is a 400 "invalid_request_error" naming the field in param. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_utf8.h"
#include "models/grammar.h"
#include "models/model_gen.h"
#include "server/api/srv_api.h"
#include "server/api/srv_api_json.h"
#include "server/api/srv_schema.h"
#include "server/api/srv_tools.h"

/* Bounds that are properties of the API, not of the deployment. */
#define API_TEMPERATURE_MAX 2.0  /* OpenAI's range is [0, 2] */
#define API_PENALTY_MAX 2.0      /* presence / frequency penalties in [-2, 2] */
#define API_REPETITION_MAX 10.0  /* a multiplicative penalty; beyond 10 is nonsense */
#define API_LOGIT_BIAS_MAX 100.0 /* OpenAI's range is [-100, 100] */
#define API_MAX_CHOICES 256      /* strings of a guided_choice */

srv_api_limits srv_api_limits_default(int n_vocab) {
    srv_api_limits l;
    l.n_vocab = n_vocab;
    l.max_n = 16;
    l.max_logprobs = 20;
    l.max_stop = 4;
    l.max_stop_len = 1024;
    l.max_logit_bias = 1024;
    l.max_prompts = 64;
    l.max_messages = 1024;
    l.max_json_depth = 32;
    l.max_json_values = 1 << 20;
    return l;
}

/* ---------------------------------------------------------------- fields */

enum {
    F_MODEL,
    F_PROMPT,
    F_MESSAGES,
    F_MAX_TOKENS,
    F_MAX_COMPLETION_TOKENS,
    F_TEMPERATURE,
    F_TOP_P,
    F_TOP_K,
    F_MIN_P,
    F_N,
    F_STOP,
    F_SEED,
    F_PRESENCE_PENALTY,
    F_FREQUENCY_PENALTY,
    F_REPETITION_PENALTY,
    F_LOGIT_BIAS,
    F_LOGPROBS,
    F_TOP_LOGPROBS,
    F_ECHO,
    F_STREAM,
    F_STREAM_OPTIONS,
    F_USER,
    F_PRIORITY,
    F_TIMEOUT,
    F_IGNORE_EOS,
    F_BEST_OF,
    F_SUFFIX,
    F_TOOLS,
    F_FUNCTIONS,
    F_RESPONSE_FORMAT,
    F_CHAT_TEMPLATE_KWARGS,
    F_REASONING_FORMAT,
    F_INCLUDE_REASONING,
    F_MIN_TOKENS,
    F_STOP_TOKEN_IDS,
    F_INCLUDE_STOP_STR,
    F_N_PREDICT,
    F_GRAMMAR,
    F_GUIDED_GRAMMAR,
    F_GUIDED_CHOICE,
    F_STRUCTURED_OUTPUTS,
    F_GUIDED_JSON,
    F_JSON_SCHEMA,
    F_GUIDED_REGEX,
    F_TOOL_CHOICE,
    F_PARALLEL_TOOL_CALLS,
    F_COUNT
};

#define K_CMPL 1u
#define K_CHAT 2u

static const struct {
    const char *name;
    unsigned kinds; /* the endpoints that know the field */
} api_fields[F_COUNT] = {
    [F_MODEL] = {"model", K_CMPL | K_CHAT},
    [F_PROMPT] = {"prompt", K_CMPL},
    [F_MESSAGES] = {"messages", K_CHAT},
    [F_MAX_TOKENS] = {"max_tokens", K_CMPL | K_CHAT},
    [F_MAX_COMPLETION_TOKENS] = {"max_completion_tokens", K_CHAT},
    [F_TEMPERATURE] = {"temperature", K_CMPL | K_CHAT},
    [F_TOP_P] = {"top_p", K_CMPL | K_CHAT},
    [F_TOP_K] = {"top_k", K_CMPL | K_CHAT},
    [F_MIN_P] = {"min_p", K_CMPL | K_CHAT},
    [F_N] = {"n", K_CMPL | K_CHAT},
    [F_STOP] = {"stop", K_CMPL | K_CHAT},
    [F_SEED] = {"seed", K_CMPL | K_CHAT},
    [F_PRESENCE_PENALTY] = {"presence_penalty", K_CMPL | K_CHAT},
    [F_FREQUENCY_PENALTY] = {"frequency_penalty", K_CMPL | K_CHAT},
    [F_REPETITION_PENALTY] = {"repetition_penalty", K_CMPL | K_CHAT},
    [F_LOGIT_BIAS] = {"logit_bias", K_CMPL | K_CHAT},
    [F_LOGPROBS] = {"logprobs", K_CMPL | K_CHAT},
    [F_TOP_LOGPROBS] = {"top_logprobs", K_CHAT},
    [F_ECHO] = {"echo", K_CMPL},
    [F_STREAM] = {"stream", K_CMPL | K_CHAT},
    [F_STREAM_OPTIONS] = {"stream_options", K_CMPL | K_CHAT},
    [F_USER] = {"user", K_CMPL | K_CHAT},
    [F_PRIORITY] = {"priority", K_CMPL | K_CHAT},
    [F_TIMEOUT] = {"timeout", K_CMPL | K_CHAT},
    [F_IGNORE_EOS] = {"ignore_eos", K_CMPL | K_CHAT},
    [F_BEST_OF] = {"best_of", K_CMPL},
    [F_SUFFIX] = {"suffix", K_CMPL},
    [F_TOOLS] = {"tools", K_CHAT},
    [F_FUNCTIONS] = {"functions", K_CHAT},
    [F_RESPONSE_FORMAT] = {"response_format", K_CMPL | K_CHAT},
    [F_CHAT_TEMPLATE_KWARGS] = {"chat_template_kwargs", K_CHAT},
    [F_REASONING_FORMAT] = {"reasoning_format", K_CHAT},
    [F_INCLUDE_REASONING] = {"include_reasoning", K_CHAT},
    [F_MIN_TOKENS] = {"min_tokens", K_CMPL | K_CHAT},
    [F_STOP_TOKEN_IDS] = {"stop_token_ids", K_CMPL | K_CHAT},
    [F_INCLUDE_STOP_STR] = {"include_stop_str_in_output", K_CMPL | K_CHAT},
    [F_N_PREDICT] = {"n_predict", K_CMPL | K_CHAT},
    [F_GRAMMAR] = {"grammar", K_CMPL | K_CHAT},
    [F_GUIDED_GRAMMAR] = {"guided_grammar", K_CMPL | K_CHAT},
    [F_GUIDED_CHOICE] = {"guided_choice", K_CMPL | K_CHAT},
    [F_STRUCTURED_OUTPUTS] = {"structured_outputs", K_CMPL | K_CHAT},
    [F_GUIDED_JSON] = {"guided_json", K_CMPL | K_CHAT},
    [F_JSON_SCHEMA] = {"json_schema", K_CMPL | K_CHAT},
    [F_GUIDED_REGEX] = {"guided_regex", K_CMPL | K_CHAT},
    [F_TOOL_CHOICE] = {"tool_choice", K_CHAT},
    [F_PARALLEL_TOOL_CALLS] = {"parallel_tool_calls", K_CHAT},
};

/* Fields of vLLM's, llama.cpp's and OpenAI's APIs that change the output
 * and that brisk does not implement: present with anything but their
 * neutral value, they are refused with a 400 naming them, never ignored.
 * (Fields that only matter with one of these, e.g. mirostat_tau, are left
 * out: alone they change nothing.) */
typedef enum {
    N_NEVER,   /* any value but null */
    N_ZERO,    /* 0 or false is neutral */
    N_ONE,     /* the number 1 */
    N_NONPOS,  /* numbers <= 0 (llama.cpp's "off") */
    N_EMPTY,   /* "", [] or {} */
    N_TRUE,    /* true */
    N_FALSE,   /* false */
    N_NO_TOOL, /* the strings "none" and "auto" (no tools to call) */
} api_neutral;

static const struct {
    const char *name;
    unsigned kinds;
    api_neutral neutral;
} api_refused[] = {
    /* structural tags (not yet) */
    {"structural_tag", K_CMPL | K_CHAT, N_NEVER},
    /* vLLM sampling and output */
    {"bad_words", K_CMPL | K_CHAT, N_EMPTY},
    {"allowed_token_ids", K_CMPL | K_CHAT, N_NEVER},
    {"prompt_logprobs", K_CMPL | K_CHAT, N_NEVER},
    {"use_beam_search", K_CMPL | K_CHAT, N_FALSE},
    {"length_penalty", K_CMPL | K_CHAT, N_ONE},
    {"truncate_prompt_tokens", K_CMPL | K_CHAT, N_NEVER},
    {"logits_processors", K_CMPL | K_CHAT, N_EMPTY},
    {"skip_special_tokens", K_CMPL | K_CHAT, N_TRUE},
    {"spaces_between_special_tokens", K_CMPL | K_CHAT, N_TRUE},
    {"return_tokens_as_token_ids", K_CMPL | K_CHAT, N_FALSE},
    {"add_special_tokens", K_CHAT, N_FALSE},
    {"add_special_tokens", K_CMPL, N_TRUE},
    {"add_generation_prompt", K_CHAT, N_TRUE},
    {"continue_final_message", K_CHAT, N_FALSE},
    {"chat_template", K_CHAT, N_NEVER},
    {"documents", K_CHAT, N_EMPTY},
    {"echo", K_CHAT, N_FALSE},
    /* llama.cpp's server */
    {"typical_p", K_CMPL | K_CHAT, N_ONE},
    {"mirostat", K_CMPL | K_CHAT, N_ZERO},
    {"dry_multiplier", K_CMPL | K_CHAT, N_ZERO},
    {"xtc_probability", K_CMPL | K_CHAT, N_ZERO},
    {"tfs_z", K_CMPL | K_CHAT, N_ONE},
    {"top_n_sigma", K_CMPL | K_CHAT, N_NONPOS},
    {"dynatemp_range", K_CMPL | K_CHAT, N_ZERO},
    {"repeat_penalty", K_CMPL | K_CHAT, N_ONE},
    {"penalize_nl", K_CMPL | K_CHAT, N_FALSE},
    {"n_probs", K_CMPL | K_CHAT, N_ZERO},
    {"min_keep", K_CMPL | K_CHAT, N_ZERO},
    {"samplers", K_CMPL | K_CHAT, N_NEVER},
    {"n_indent", K_CMPL | K_CHAT, N_ZERO},
    {"t_max_predict_ms", K_CMPL | K_CHAT, N_ZERO},
    {"post_sampling_probs", K_CMPL | K_CHAT, N_FALSE},
    /* OpenAI */
    {"reasoning_effort", K_CHAT, N_NEVER},
    {"verbosity", K_CHAT, N_NEVER},
    {"audio", K_CHAT, N_NEVER},
    {"web_search_options", K_CHAT, N_NEVER},
};

static int api_is_neutral(const cJSON *c, api_neutral n) {
    switch (n) {
    case N_NEVER: return 0;
    case N_ZERO: return cJSON_IsFalse(c) || (cJSON_IsNumber(c) && c->valuedouble == 0.0);
    case N_ONE: return cJSON_IsNumber(c) && c->valuedouble == 1.0;
    case N_NONPOS: return cJSON_IsNumber(c) && c->valuedouble <= 0.0;
    case N_EMPTY:
        return (cJSON_IsString(c) && !c->valuestring[0]) ||
               ((cJSON_IsArray(c) || cJSON_IsObject(c)) && !c->child);
    case N_TRUE: return cJSON_IsTrue(c);
    case N_FALSE: return cJSON_IsFalse(c);
    case N_NO_TOOL:
        return cJSON_IsString(c) &&
               (!strcmp(c->valuestring, "none") || !strcmp(c->valuestring, "auto"));
    }
    return 0;
}

/* A 400 naming the first member of root that changes the output in vLLM,
 * llama.cpp or OpenAI and that brisk does not implement (see api_refused). */
static int api_check_refused(const cJSON *root, unsigned kind, srv_api_error *err) {
    for (const cJSON *c = root->child; c; c = c->next) {
        if (cJSON_IsNull(c))
            continue;
        for (size_t i = 0; i < sizeof api_refused / sizeof api_refused[0]; i++)
            if ((api_refused[i].kinds & kind) && !strcmp(api_refused[i].name, c->string) &&
                !api_is_neutral(c, api_refused[i].neutral))
                return srv_api_fail(err, "unsupported_parameter", c->string,
                                    "'%s' is not supported by this server", c->string);
    }
    return 0;
}

/* Sorts the top-level members into f[] (NULL: absent); JSON null counts as
 * absent for every field. Returns the number of unknown members. */
static int api_collect(const cJSON *root, unsigned kind, const cJSON *f[F_COUNT]) {
    int unknown = 0;
    for (int k = 0; k < F_COUNT; k++)
        f[k] = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        int k = 0;
        while (k < F_COUNT &&
               (!(api_fields[k].kinds & kind) || strcmp(api_fields[k].name, c->string)))
            k++;
        if (k == F_COUNT)
            unknown++;
        else if (!cJSON_IsNull(c))
            f[k] = c;
    }
    return unknown;
}

/* Typed getters: 0 when it is NULL (absent or null), 1 with *out set, or a
 * negative code with *err filled. */

static int get_number(const cJSON *it, const char *name, double lo, double hi, int lo_open,
                      double *out, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsNumber(it))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be a number", name);
    double v = it->valuedouble;
    if (!isfinite(v))
        return srv_api_fail(err, "invalid_value", name, "'%s' must be finite", name);
    if ((lo_open ? v <= lo : v < lo) || v > hi)
        return srv_api_fail(err, "invalid_value", name, "'%s' must be %s %g and at most %g", name,
                            lo_open ? "greater than" : "at least", lo, hi);
    *out = v;
    return 1;
}

static int get_float(const cJSON *it, const char *name, double lo, double hi, int lo_open,
                     float *out, srv_api_error *err) {
    double v = 0;
    int rc = get_number(it, name, lo, hi, lo_open, &v, err);
    if (rc != 1)
        return rc;
    /* A double just above an open bound can round onto it as a float
     * (repetition_penalty 1e-50 becomes 0.0f, and the sampler would divide
     * by it): such a value is refused as the bound itself is. Rounding
     * cannot carry a value past a closed bound, which is a float itself. */
    float f = (float)v;
    if (lo_open && f <= (float)lo)
        return srv_api_fail(err, "invalid_value", name,
                            "'%s' must be greater than %g and at most %g", name, lo, hi);
    *out = f;
    return 1;
}

/* An integer, given as a JSON number without a fractional part (2.0 is 2,
 * 2.5 is an error). lo and hi must be exactly representable as doubles. */
static int get_int(const cJSON *it, const char *name, long long lo, long long hi, long long *out,
                   srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsNumber(it))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be an integer", name);
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be an integer", name);
    if (v < (double)lo || v > (double)hi)
        return srv_api_fail(err, "invalid_value", name, "'%s' must be between %lld and %lld", name,
                            lo, hi);
    *out = (long long)v;
    return 1;
}

static int get_int32(const cJSON *it, const char *name, int lo, int hi, int *out,
                     srv_api_error *err) {
    long long v = 0;
    int rc = get_int(it, name, lo, hi, &v, err);
    if (rc == 1)
        *out = (int)v;
    return rc;
}

static int get_bool(const cJSON *it, const char *name, int *out, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsBool(it))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(it);
    return 1;
}

static int get_string(const cJSON *it, const char *name, const char **out, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsString(it))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be a string", name);
    *out = it->valuestring;
    return 1;
}

/* ---------------------------------------------------------------- parameters */

static void params_default(srv_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->max_tokens = -1;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = -1;
    p->n = 1;
    p->repetition_penalty = 1.0f;
    p->logprobs = -1;
}

static void params_free(srv_gen_params *p) {
    free(p->model);
    free(p->stop_token_ids);
    free(p->grammar);
    for (int i = 0; i < p->n_stop; i++)
        free(p->stop[i]);
    free(p->stop);
    free(p->logit_bias_ids);
    free(p->logit_bias);
    memset(p, 0, sizeof *p);
}

static int parse_one_stop(const cJSON *it, const srv_api_limits *lim, srv_gen_params *p,
                          srv_api_error *err) {
    if (!cJSON_IsString(it))
        return srv_api_fail(err, "invalid_type", "stop",
                            "'stop' must be a string or an array of strings");
    size_t n = strlen(it->valuestring);
    if (n == 0)
        return srv_api_fail(err, "invalid_value", "stop", "stop strings must not be empty");
    if (n > (size_t)lim->max_stop_len)
        return srv_api_fail(err, "invalid_value", "stop", "stop strings must be at most %d bytes",
                            lim->max_stop_len);
    if (!(p->stop[p->n_stop] = brisk_strdup(it->valuestring)))
        return srv_api_oom(err);
    p->n_stop++;
    return 0;
}

static int parse_stop(const cJSON *it, const srv_api_limits *lim, srv_gen_params *p,
                      srv_api_error *err) {
    if (!it)
        return 0;
    int count = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : 1;
    if (count > lim->max_stop)
        return srv_api_fail(err, "invalid_value", "stop", "at most %d stop strings are allowed",
                            lim->max_stop);
    if (count == 0)
        return 0;
    if (!(p->stop = brisk_calloc((size_t)count, sizeof *p->stop)))
        return srv_api_oom(err);
    if (!cJSON_IsArray(it))
        return parse_one_stop(it, lim, p, err);
    int rc;
    for (const cJSON *c = it->child; c; c = c->next)
        if ((rc = parse_one_stop(c, lim, p, err)) < 0)
            return rc;
    return 0;
}

/* A logit_bias key: a token id in canonical decimal ("0", "17"; no sign,
 * leading zero or spaces, so two keys never name one token). */
static int parse_token_key(const char *s, int n_vocab, int32_t *id) {
    size_t n = strlen(s);
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
        return 0;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v >= n_vocab)
        return 0;
    *id = (int32_t)v;
    return 1;
}

static int parse_logit_bias(const cJSON *it, const srv_api_limits *lim, srv_gen_params *p,
                            srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsObject(it))
        return srv_api_fail(err, "invalid_type", "logit_bias",
                            "'logit_bias' must be an object mapping token ids to numbers");
    int count = cJSON_GetArraySize(it);
    if (count > lim->max_logit_bias)
        return srv_api_fail(err, "invalid_value", "logit_bias",
                            "'logit_bias' may have at most %d entries", lim->max_logit_bias);
    if (count == 0)
        return 0;
    p->logit_bias_ids = brisk_malloc((size_t)count * sizeof *p->logit_bias_ids);
    p->logit_bias = brisk_malloc((size_t)count * sizeof *p->logit_bias);
    if (!p->logit_bias_ids || !p->logit_bias)
        return srv_api_oom(err);
    for (const cJSON *c = it->child; c; c = c->next) {
        int32_t id;
        if (!parse_token_key(c->string, lim->n_vocab, &id)) {
            char q[API_SNIP_BYTES + 1];
            return srv_api_fail(err, "invalid_value", "logit_bias",
                                "'logit_bias' keys must be token ids in [0, %d); got '%s'",
                                lim->n_vocab, srv_api_snip(c->string, q));
        }
        if (!cJSON_IsNumber(c))
            return srv_api_fail(err, "invalid_type", "logit_bias",
                                "'logit_bias' values must be numbers");
        float b = 0;
        int rc = get_float(c, "logit_bias", -API_LOGIT_BIAS_MAX, API_LOGIT_BIAS_MAX, 0, &b, err);
        if (rc < 0)
            return rc; /* c is never NULL, so rc is 1 otherwise */
        p->logit_bias_ids[p->n_logit_bias] = id;
        p->logit_bias[p->n_logit_bias] = b;
        p->n_logit_bias++;
    }
    return 0;
}

static int parse_stream_options(const cJSON *it, srv_gen_params *p, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsObject(it))
        return srv_api_fail(err, "invalid_type", "stream_options",
                            "'stream_options' must be an object");
    if (!p->stream)
        return srv_api_fail(err, "invalid_value", "stream_options",
                            "'stream_options' is only allowed when 'stream' is true");
    for (const cJSON *c = it->child; c; c = c->next) {
        if (strcmp(c->string, "include_usage") || cJSON_IsNull(c))
            continue;
        int rc = get_bool(c, "stream_options.include_usage", &p->include_usage, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A field the server does not implement: null or an empty list is harmless,
 * anything else is refused rather than silently ignored. */
static int parse_unsupported_list(const cJSON *it, const char *name, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsArray(it))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be an array", name);
    if (cJSON_GetArraySize(it) > 0)
        return srv_api_fail(err, "unsupported_value", name, "'%s' is not supported by this server",
                            name);
    return 0;
}

/* Takes text (malloc'd, or NULL: out of memory) as the request's one
 * constraint, from field param. */
static int set_constraint(srv_gen_params *p, char *text, const char *param, srv_api_error *err) {
    if (!text)
        return srv_api_oom(err);
    if (p->grammar) {
        free(text);
        return srv_api_fail(err, "invalid_value", param,
                            "'%s' and '%s' both constrain the output; give one", p->grammar_param,
                            param);
    }
    p->grammar = text;
    p->grammar_len = strlen(text);
    p->grammar_param = param;
    return 0;
}

static char *dup_text(const char *s) {
    return brisk_strdup(s);
}

/* A JSON Schema (an object, or with as_text a string holding one, as vLLM
 * also takes) as the constraint from field param. */
static int parse_schema(const cJSON *it, int as_text, const char *param, srv_gen_params *p,
                        srv_api_error *err) {
    cJSON *parsed = NULL;
    if (as_text && cJSON_IsString(it)) {
        /* Its nesting is bounded by cJSON's own limit and by the schema
         * converter's; its size by the body's. */
        parsed = cJSON_Parse(it->valuestring);
        if (!parsed)
            return srv_api_fail(err, "invalid_value", param, "'%s' is not valid JSON", param);
        it = parsed;
    }
    if (!cJSON_IsObject(it) && !cJSON_IsBool(it)) {
        cJSON_Delete(parsed);
        return srv_api_fail(err, "invalid_type", param, "'%s' must be a JSON Schema object", param);
    }
    char *text = NULL, why[200] = "";
    int rc = srv_schema_to_gbnf(it, &text, why, sizeof why);
    cJSON_Delete(parsed);
    if (rc == BRISK_ENOMEM)
        return srv_api_oom(err);
    if (rc < 0)
        return srv_api_fail(err, "invalid_schema", param, "'%s': %s", param, why);
    return set_constraint(p, text, param, err);
}

static int parse_response_format(const cJSON *it, srv_gen_params *p, srv_api_error *err) {
    if (!it)
        return 0;
    if (!cJSON_IsObject(it))
        return srv_api_fail(err, "invalid_type", "response_format",
                            "'response_format' must be an object");
    const char *type = NULL;
    for (const cJSON *c = it->child; c; c = c->next)
        if (!strcmp(c->string, "type") && cJSON_IsString(c))
            type = c->valuestring;
    if (type && !strcmp(type, "text"))
        return 0;
    if (type && !strcmp(type, "json_object"))
        return set_constraint(p, model_grammar_json_text(1), "response_format", err);
    if (type && !strcmp(type, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(it, "json_schema");
        if (!cJSON_IsObject(js))
            return srv_api_fail(err, "invalid_value", "response_format",
                                "'response_format.json_schema' must be an object");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema || cJSON_IsNull(schema)) /* no schema: any JSON object */
            return set_constraint(p, model_grammar_json_text(1), "response_format", err);
        return parse_schema(schema, 0, "response_format", p, err);
    }
    return srv_api_fail(err, "unsupported_value", "response_format",
                        "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
}

/* A list of 1..max non-empty strings as a choice grammar. */
static int parse_choice(const cJSON *it, const char *param, const srv_api_limits *lim,
                        srv_gen_params *p, srv_api_error *err) {
    int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : -1;
    if (n < 1 || n > API_MAX_CHOICES)
        return srv_api_fail(err, "invalid_value", param, "'%s' must be an array of 1 to %d strings",
                            param, API_MAX_CHOICES);
    const char *texts[API_MAX_CHOICES];
    size_t lens[API_MAX_CHOICES];
    int k = 0;
    for (const cJSON *c = it->child; c; c = c->next, k++) {
        if (!cJSON_IsString(c) || !c->valuestring[0] ||
            strlen(c->valuestring) > (size_t)lim->max_stop_len)
            return srv_api_fail(err, "invalid_value", param,
                                "'%s' must hold non-empty strings of at most %d bytes", param,
                                lim->max_stop_len);
        texts[k] = c->valuestring;
        lens[k] = strlen(c->valuestring);
    }
    return set_constraint(p, model_grammar_choice_text(texts, lens, n), param, err);
}

static int parse_regex(const cJSON *it, const char *param, srv_gen_params *p, srv_api_error *err) {
    if (!cJSON_IsString(it))
        return srv_api_fail(err, "invalid_type", param, "'%s' must be a string (a regex)", param);
    char *text = NULL, why[200] = "";
    int rc =
        model_grammar_regex_text(it->valuestring, strlen(it->valuestring), &text, why, sizeof why);
    if (rc == BRISK_ENOMEM)
        return srv_api_oom(err);
    if (rc < 0)
        return srv_api_fail(err, "invalid_regex", param, "'%s': %s", param, why);
    return set_constraint(p, text, param, err);
}

static int parse_grammar_text(const cJSON *it, const char *param, srv_gen_params *p,
                              srv_api_error *err) {
    if (!cJSON_IsString(it))
        return srv_api_fail(err, "invalid_type", param, "'%s' must be a string (GBNF)", param);
    if (!it->valuestring[0]) /* llama.cpp's "no grammar" */
        return 0;
    return set_constraint(p, dup_text(it->valuestring), param, err);
}

/* llama.cpp's grammar, vLLM's guided_grammar / guided_choice and
 * structured_outputs {grammar | choice} (json and regex: not yet). */
static int parse_constraints(const cJSON *f[F_COUNT], const srv_api_limits *lim, srv_gen_params *p,
                             srv_api_error *err) {
    int rc;
    if (f[F_GRAMMAR] && (rc = parse_grammar_text(f[F_GRAMMAR], "grammar", p, err)) < 0)
        return rc;
    if (f[F_GUIDED_GRAMMAR] &&
        (rc = parse_grammar_text(f[F_GUIDED_GRAMMAR], "guided_grammar", p, err)) < 0)
        return rc;
    if (f[F_GUIDED_CHOICE] &&
        (rc = parse_choice(f[F_GUIDED_CHOICE], "guided_choice", lim, p, err)) < 0)
        return rc;
    if (f[F_GUIDED_JSON] && (rc = parse_schema(f[F_GUIDED_JSON], 1, "guided_json", p, err)) < 0)
        return rc;
    if (f[F_JSON_SCHEMA] && (rc = parse_schema(f[F_JSON_SCHEMA], 0, "json_schema", p, err)) < 0)
        return rc;
    if (f[F_GUIDED_REGEX] && (rc = parse_regex(f[F_GUIDED_REGEX], "guided_regex", p, err)) < 0)
        return rc;
    const cJSON *so = f[F_STRUCTURED_OUTPUTS];
    if (!so)
        return 0;
    if (!cJSON_IsObject(so))
        return srv_api_fail(err, "invalid_type", "structured_outputs",
                            "'structured_outputs' must be an object");
    for (const cJSON *c = so->child; c; c = c->next) {
        if (cJSON_IsNull(c))
            continue;
        if (!strcmp(c->string, "grammar"))
            rc = parse_grammar_text(c, "structured_outputs", p, err);
        else if (!strcmp(c->string, "choice"))
            rc = parse_choice(c, "structured_outputs", lim, p, err);
        else if (!strcmp(c->string, "json"))
            rc = parse_schema(c, 1, "structured_outputs", p, err);
        else if (!strcmp(c->string, "regex"))
            rc = parse_regex(c, "structured_outputs", p, err);
        else if (!strcmp(c->string, "disable_any_whitespace") ||
                 !strcmp(c->string, "disable_fallback") ||
                 !strcmp(c->string, "disable_additional_properties") ||
                 !strcmp(c->string, "whitespace_pattern"))
            rc = cJSON_IsFalse(c)
                     ? 0
                     : srv_api_fail(err, "unsupported_value", "structured_outputs",
                                    "'structured_outputs.%s' is not supported", c->string);
        else
            rc = srv_api_fail(err, "unsupported_value", "structured_outputs",
                              "'structured_outputs.%s' is not supported (json, regex, grammar and "
                              "choice are)",
                              c->string);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* vLLM's min_tokens, stop_token_ids and include_stop_str_in_output, and
 * llama.cpp's n_predict (max_tokens by another name; -1: not given). */
static int parse_vllm_stops(const cJSON *f[F_COUNT], const srv_api_limits *lim, srv_gen_params *p,
                            srv_api_error *err) {
    int rc, n_predict = -1;
    if ((rc = get_int32(f[F_N_PREDICT], "n_predict", -1, INT32_MAX, &n_predict, err)) < 0)
        return rc;
    if (rc == 1 && n_predict == 0)
        return srv_api_fail(err, "invalid_value", "n_predict",
                            "'n_predict' must be -1 or at least 1");
    if (n_predict > 0) {
        if (p->max_tokens > 0 && p->max_tokens != n_predict)
            return srv_api_fail(err, "invalid_value", "n_predict",
                                "'n_predict' and 'max_tokens' disagree");
        p->max_tokens = n_predict;
    }
    if ((rc = get_int32(f[F_MIN_TOKENS], "min_tokens", 0, INT32_MAX, &p->min_tokens, err)) < 0)
        return rc;
    if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
        return srv_api_fail(err, "invalid_value", "min_tokens",
                            "'min_tokens' must be at most 'max_tokens'");
    if ((rc = get_bool(f[F_INCLUDE_STOP_STR], "include_stop_str_in_output", &p->include_stop_str,
                       err)) < 0)
        return rc;
    const cJSON *it = f[F_STOP_TOKEN_IDS];
    if (!it)
        return 0;
    if (!cJSON_IsArray(it))
        return srv_api_fail(err, "invalid_type", "stop_token_ids",
                            "'stop_token_ids' must be an array");
    int n = cJSON_GetArraySize(it);
    if (n > lim->max_logit_bias)
        return srv_api_fail(err, "invalid_value", "stop_token_ids",
                            "at most %d 'stop_token_ids' are allowed", lim->max_logit_bias);
    if (n == 0)
        return 0;
    if (!(p->stop_token_ids = brisk_malloc((size_t)n * sizeof *p->stop_token_ids)))
        return srv_api_oom(err);
    for (const cJSON *c = it->child; c; c = c->next) {
        double v = c->valuedouble;
        if (!cJSON_IsNumber(c) || !isfinite(v) || v != floor(v) || v < 0 || v >= lim->n_vocab)
            return srv_api_fail(err, "invalid_value", "stop_token_ids",
                                "'stop_token_ids' must be token ids in [0, %d)", lim->n_vocab);
        p->stop_token_ids[p->n_stop_token_ids++] = (int32_t)v;
    }
    return 0;
}

/* The fields both endpoints share, in an order where each check can rely on
 * the ones before it (stream before stream_options). */
static int parse_params(const cJSON *f[F_COUNT], unsigned kind, const srv_api_limits *lim,
                        srv_gen_params *p, srv_api_error *err) {
    int rc;
    long long v64 = 0;
    const char *s = NULL;
    if ((rc = get_string(f[F_MODEL], "model", &s, err)) < 0)
        return rc;
    if (rc == 1 && !(p->model = brisk_strdup(s)))
        return srv_api_oom(err);
    if ((rc = get_int32(f[F_MAX_TOKENS], "max_tokens", 1, INT32_MAX, &p->max_tokens, err)) < 0)
        return rc;
    if (kind == K_CHAT && (rc = get_int32(f[F_MAX_COMPLETION_TOKENS], "max_completion_tokens", 1,
                                          INT32_MAX, &p->max_tokens, err)) < 0)
        return rc;
    if ((rc = get_float(f[F_TEMPERATURE], "temperature", 0, API_TEMPERATURE_MAX, 0, &p->temperature,
                        err)) < 0)
        return rc;
    p->given |= rc == 1 ? MODEL_GEN_TEMPERATURE : 0;
    if ((rc = get_float(f[F_TOP_P], "top_p", 0, 1, 1, &p->top_p, err)) < 0)
        return rc;
    p->given |= rc == 1 ? MODEL_GEN_TOP_P : 0;
    if ((rc = get_int32(f[F_TOP_K], "top_k", -1, INT32_MAX, &p->top_k, err)) < 0)
        return rc;
    p->given |= rc == 1 ? MODEL_GEN_TOP_K : 0;
    if (p->top_k == 0)
        p->top_k = -1;
    if ((rc = get_float(f[F_MIN_P], "min_p", 0, 1, 0, &p->min_p, err)) < 0)
        return rc;
    p->given |= rc == 1 ? MODEL_GEN_MIN_P : 0;
    if ((rc = get_int32(f[F_N], "n", 1, lim->max_n, &p->n, err)) < 0)
        return rc;
    if ((rc = parse_stop(f[F_STOP], lim, p, err)) < 0)
        return rc;
    /* int64 seeds: a JSON number is a double here, so seeds beyond 2^53 are
     * rounded; [-2^63, 2^63) as doubles are exact bounds. */
    if (f[F_SEED]) {
        const cJSON *it = f[F_SEED];
        double v = it->valuedouble; /* 0 for a non-number */
        if (!cJSON_IsNumber(it) || !isfinite(v) || v != floor(v))
            return srv_api_fail(err, "invalid_type", "seed", "'seed' must be an integer");
        if (v < -0x1p63 || v >= 0x1p63)
            return srv_api_fail(err, "invalid_value", "seed",
                                "'seed' must fit in a signed 64-bit integer");
        p->has_seed = 1;
        p->seed = (uint64_t)(int64_t)v;
    }
    if ((rc = get_float(f[F_PRESENCE_PENALTY], "presence_penalty", -API_PENALTY_MAX,
                        API_PENALTY_MAX, 0, &p->presence_penalty, err)) < 0)
        return rc;
    if ((rc = get_float(f[F_FREQUENCY_PENALTY], "frequency_penalty", -API_PENALTY_MAX,
                        API_PENALTY_MAX, 0, &p->frequency_penalty, err)) < 0)
        return rc;
    if ((rc = get_float(f[F_REPETITION_PENALTY], "repetition_penalty", 0, API_REPETITION_MAX, 1,
                        &p->repetition_penalty, err)) < 0)
        return rc;
    p->given |= rc == 1 ? MODEL_GEN_REPETITION_PENALTY : 0;
    if ((rc = parse_logit_bias(f[F_LOGIT_BIAS], lim, p, err)) < 0)
        return rc;
    if (kind == K_CMPL) {
        /* logprobs: how many alternatives per token; 0 = the chosen token only. */
        if ((rc = get_int32(f[F_LOGPROBS], "logprobs", 0, lim->max_logprobs, &p->logprobs, err)) <
            0)
            return rc;
        if ((rc = get_bool(f[F_ECHO], "echo", &p->echo, err)) < 0)
            return rc;
        if ((rc = get_int(f[F_BEST_OF], "best_of", 1, INT32_MAX, &v64, err)) < 0)
            return rc;
        if (rc == 1 && v64 != p->n)
            return srv_api_fail(err, "unsupported_value", "best_of",
                                "'best_of' is not supported (it may only equal 'n')");
        if ((rc = get_string(f[F_SUFFIX], "suffix", &s, err)) < 0)
            return rc;
        if (rc == 1 && s[0])
            return srv_api_fail(err, "unsupported_value", "suffix", "'suffix' is not supported");
    } else {
        int want = 0, top = 0;
        if ((rc = get_bool(f[F_LOGPROBS], "logprobs", &want, err)) < 0)
            return rc;
        if ((rc = get_int32(f[F_TOP_LOGPROBS], "top_logprobs", 0, lim->max_logprobs, &top, err)) <
            0)
            return rc;
        if (rc == 1 && !want)
            return srv_api_fail(err, "invalid_value", "top_logprobs",
                                "'top_logprobs' requires 'logprobs' to be true");
        p->logprobs = want ? top : -1;
        if ((rc = parse_unsupported_list(f[F_FUNCTIONS], "functions", err)) < 0)
            return rc;
    }
    if ((rc = get_bool(f[F_STREAM], "stream", &p->stream, err)) < 0)
        return rc;
    if ((rc = parse_stream_options(f[F_STREAM_OPTIONS], p, err)) < 0)
        return rc;
    if ((rc = get_string(f[F_USER], "user", &s, err)) < 0)
        return rc;
    if ((rc = get_bool(f[F_IGNORE_EOS], "ignore_eos", &p->ignore_eos, err)) < 0)
        return rc;
    /* vLLM's priority (lower first) and brisk's deadline in seconds. */
    if ((rc = get_int32(f[F_PRIORITY], "priority", -1000000, 1000000, &p->priority, err)) < 0)
        return rc;
    p->has_priority = rc == 1;
    if ((rc = get_float(f[F_TIMEOUT], "timeout", 0, 86400, 1, &p->timeout_s, err)) < 0)
        return rc;
    if ((rc = parse_response_format(f[F_RESPONSE_FORMAT], p, err)) < 0 ||
        (rc = parse_constraints(f, lim, p, err)) < 0)
        return rc;
    return parse_vllm_stops(f, lim, p, err);
}

/* ---------------------------------------------------------------- prompts */

static int parse_token_ids(const cJSON *arr, int which, const srv_api_limits *lim, srv_prompt *pr,
                           srv_api_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0)
        return srv_api_fail(err, "invalid_value", "prompt", "prompt %d is empty", which);
    if (!(pr->ids = brisk_malloc((size_t)n * sizeof *pr->ids)))
        return srv_api_oom(err);
    pr->is_tokens = 1;
    for (const cJSON *c = arr->child; c; c = c->next) {
        double v = c->valuedouble;
        if (!cJSON_IsNumber(c) || !isfinite(v) || v != floor(v) || v < 0 || v >= lim->n_vocab)
            return srv_api_fail(err, "invalid_value", "prompt",
                                "token ids in 'prompt' must be integers in [0, %d)", lim->n_vocab);
        pr->ids[pr->n_ids++] = (int32_t)v;
    }
    return 0;
}

static int parse_text_prompt(const cJSON *it, int which, srv_prompt *pr, srv_api_error *err) {
    size_t n = strlen(it->valuestring);
    if (n == 0)
        return srv_api_fail(err, "invalid_value", "prompt", "prompt %d is empty", which);
    if (!(pr->text = brisk_strdup(it->valuestring)))
        return srv_api_oom(err);
    pr->text_len = n;
    return 0;
}

static int parse_prompt(const cJSON *it, const srv_api_limits *lim, srv_completion_req *r,
                        srv_api_error *err) {
    static const char *forms = "'prompt' must be a string, an array of strings, an array of "
                               "token ids or an array of token-id arrays";
    if (!it)
        return srv_api_fail(err, "missing_required_parameter", "prompt", "'prompt' is required");
    if (cJSON_IsString(it)) {
        if (!(r->prompts = brisk_calloc(1, sizeof *r->prompts)))
            return srv_api_oom(err);
        r->n_prompts = 1;
        return parse_text_prompt(it, 0, &r->prompts[0], err);
    }
    if (!cJSON_IsArray(it))
        return srv_api_fail(err, "invalid_type", "prompt", "%s", forms);
    const cJSON *first = it->child;
    if (!first)
        return srv_api_fail(err, "invalid_value", "prompt", "'prompt' must not be empty");
    if (cJSON_IsNumber(first)) { /* one prompt of token ids */
        if (!(r->prompts = brisk_calloc(1, sizeof *r->prompts)))
            return srv_api_oom(err);
        r->n_prompts = 1;
        return parse_token_ids(it, 0, lim, &r->prompts[0], err);
    }
    int n = cJSON_GetArraySize(it);
    if (n > lim->max_prompts)
        return srv_api_fail(err, "invalid_value", "prompt", "at most %d prompts are allowed",
                            lim->max_prompts);
    if (!(r->prompts = brisk_calloc((size_t)n, sizeof *r->prompts)))
        return srv_api_oom(err);
    int is_text = cJSON_IsString(first), rc;
    if (!is_text && !cJSON_IsArray(first))
        return srv_api_fail(err, "invalid_type", "prompt", "%s", forms);
    for (const cJSON *c = it->child; c; c = c->next) {
        srv_prompt *pr = &r->prompts[r->n_prompts];
        if (is_text ? !cJSON_IsString(c) : !cJSON_IsArray(c))
            return srv_api_fail(err, "invalid_type", "prompt", "%s (not mixed)", forms);
        r->n_prompts++; /* counted before filling, so a partial prompt is freed */
        rc = is_text ? parse_text_prompt(c, r->n_prompts - 1, pr, err)
                     : parse_token_ids(c, r->n_prompts - 1, lim, pr, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- messages */

/* Content as a string or as text parts, concatenated. */
static int parse_content(const cJSON *it, int i, srv_chat_msg *m, srv_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!it)
        return srv_api_fail(err, "missing_required_parameter", param, "'%s' is required", param);
    if (cJSON_IsString(it)) {
        m->content_len = strlen(it->valuestring);
        if (!(m->content = brisk_strdup(it->valuestring)))
            return srv_api_oom(err);
        return 0;
    }
    if (!cJSON_IsArray(it))
        return srv_api_fail(err, "invalid_type", param,
                            "'%s' must be a string or an array of content parts", param);
    if (!it->child)
        return srv_api_fail(err, "invalid_value", param, "'%s' must not be an empty array", param);
    size_t total = 0;
    for (const cJSON *part = it->child; part; part = part->next) {
        const char *type = NULL, *text = NULL;
        if (!cJSON_IsObject(part))
            return srv_api_fail(err, "invalid_type", param, "content parts of '%s' must be objects",
                                param);
        for (const cJSON *c = part->child; c; c = c->next) {
            if (!strcmp(c->string, "type") && cJSON_IsString(c))
                type = c->valuestring;
            if (!strcmp(c->string, "text") && cJSON_IsString(c))
                text = c->valuestring;
        }
        if (!type)
            return srv_api_fail(err, "invalid_value", param,
                                "every content part of '%s' needs a string 'type'", param);
        if (strcmp(type, "text")) {
            char q[API_SNIP_BYTES + 1];
            return srv_api_fail(
                err, "unsupported_value", param,
                "content part type '%s' in '%s' is not supported; only 'text' parts are",
                srv_api_snip(type, q), param);
        }
        if (!text)
            return srv_api_fail(err, "invalid_value", param,
                                "text parts of '%s' need a string 'text'", param);
        total += strlen(text);
    }
    if (!(m->content = brisk_malloc(total + 1)))
        return srv_api_oom(err);
    size_t off = 0;
    for (const cJSON *part = it->child; part; part = part->next) {
        for (const cJSON *c = part->child; c; c = c->next) {
            if (strcmp(c->string, "text") || !cJSON_IsString(c))
                continue;
            size_t n = strlen(c->valuestring);
            memcpy(m->content + off, c->valuestring, n);
            off += n;
        }
    }
    m->content[off] = '\0';
    m->content_len = off;
    return 0;
}

static int parse_message(const cJSON *it, int i, srv_chat_msg *m, srv_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(it))
        return srv_api_fail(err, "invalid_type", param, "'%s' must be an object", param);
    const cJSON *role = NULL, *content = NULL, *name = NULL, *calls = NULL, *call_id = NULL;
    for (const cJSON *c = it->child; c; c = c->next) {
        if (cJSON_IsNull(c))
            continue;
        if (!strcmp(c->string, "role"))
            role = c;
        if (!strcmp(c->string, "content"))
            content = c;
        if (!strcmp(c->string, "name"))
            name = c;
        if (!strcmp(c->string, "tool_calls"))
            calls = c;
        if (!strcmp(c->string, "tool_call_id"))
            call_id = c;
    }
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!role)
        return srv_api_fail(err, "missing_required_parameter", param, "'%s' is required", param);
    if (!cJSON_IsString(role))
        return srv_api_fail(err, "invalid_type", param, "'%s' must be a string", param);
    const char *r = role->valuestring;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) {
        m->role = "system";
    } else if (!strcmp(r, "user")) {
        m->role = "user";
    } else if (!strcmp(r, "assistant")) {
        m->role = "assistant";
    } else if (!strcmp(r, "tool")) {
        m->role = "tool";
        snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
        if (!call_id)
            return srv_api_fail(err, "missing_required_parameter", param, "'%s' is required",
                                param);
        if (!cJSON_IsString(call_id))
            return srv_api_fail(err, "invalid_type", param, "'%s' must be a string", param);
        if (cJSON_IsString(call_id) && !(m->tool_call_id = brisk_strdup(call_id->valuestring)))
            return srv_api_oom(err);
    } else if (!strcmp(r, "function")) {
        return srv_api_fail(err, "unsupported_value", param,
                            "role 'function' in '%s' is not supported (use 'tool')", param);
    } else {
        char q[API_SNIP_BYTES + 1];
        return srv_api_fail(err, "invalid_value", param,
                            "'%s' must be 'system', 'developer', 'user' or 'assistant'; got '%s'",
                            param, srv_api_snip(r, q));
    }
    snprintf(param, sizeof param, "messages[%d].name", i);
    if (name && !cJSON_IsString(name))
        return srv_api_fail(err, "invalid_type", param, "'%s' must be a string", param);
    if (calls) {
        snprintf(param, sizeof param, "messages[%d]", i);
        if (strcmp(m->role, "assistant"))
            return srv_api_fail(err, "invalid_value", param,
                                "only assistant messages carry 'tool_calls' ('%s')", param);
        int rc = srv_tools_parse_calls(calls, param, m, err);
        if (rc < 0)
            return rc;
        if (!content) { /* content null beside tool calls: "" */
            m->content = brisk_strdup("");
            return m->content ? 0 : srv_api_oom(err);
        }
    }
    return parse_content(content, i, m, err);
}

static int parse_messages(const cJSON *it, const srv_api_limits *lim, srv_chat_req *r,
                          srv_api_error *err) {
    if (!it)
        return srv_api_fail(err, "missing_required_parameter", "messages",
                            "'messages' is required");
    if (!cJSON_IsArray(it))
        return srv_api_fail(err, "invalid_type", "messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(it);
    if (n == 0)
        return srv_api_fail(err, "invalid_value", "messages", "'messages' must not be empty");
    if (n > lim->max_messages)
        return srv_api_fail(err, "invalid_value", "messages", "at most %d messages are allowed",
                            lim->max_messages);
    if (!(r->msgs = brisk_calloc((size_t)n, sizeof *r->msgs)))
        return srv_api_oom(err);
    int rc;
    for (const cJSON *c = it->child; c; c = c->next) {
        r->n_msgs++;
        if ((rc = parse_message(c, r->n_msgs - 1, &r->msgs[r->n_msgs - 1], err)) < 0)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- entry points */

static void api_limits_check(const srv_api_limits *lim) {
    /* The limits come from the app, not from the request: an invariant. */
    assert(lim && lim->n_vocab > 0 && lim->max_n >= 1 && lim->max_logprobs >= 0 &&
           lim->max_stop >= 0 && lim->max_stop_len >= 1 && lim->max_logit_bias >= 0 &&
           lim->max_prompts >= 1 && lim->max_messages >= 1 && lim->max_json_depth >= 1 &&
           lim->max_json_values >= 1);
    (void)lim;
}

int srv_api_parse_completion(const char *body, size_t len, const srv_api_limits *lim,
                             srv_completion_req *out, srv_api_error *err) {
    api_limits_check(lim);
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    params_default(&out->params);
    cJSON *root;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc == 0) {
        const cJSON *f[F_COUNT];
        out->params.n_unknown_fields = api_collect(root, K_CMPL, f);
        rc = api_check_refused(root, K_CMPL, err);
        if (rc == 0)
            rc = parse_params(f, K_CMPL, lim, &out->params, err);
        if (rc == 0)
            rc = parse_prompt(f[F_PROMPT], lim, out, err);
        cJSON_Delete(root);
    }
    if (rc < 0)
        srv_completion_req_free(out);
    return rc;
}

/* The reasoning fields of chat requests (vLLM's and llama.cpp's): the chat
 * template's enable_thinking (its only keyword brisk's renderers take; any
 * other is refused, as it would change the prompt), llama.cpp's
 * reasoning_format and vLLM's include_reasoning. */
static int parse_reasoning(const cJSON *f[F_COUNT], srv_chat_req *out, srv_api_error *err) {
    int rc;
    out->enable_thinking = -1;
    out->split_reasoning = 1;
    out->include_reasoning = 1;
    const cJSON *kw = f[F_CHAT_TEMPLATE_KWARGS];
    if (kw) {
        if (!cJSON_IsObject(kw))
            return srv_api_fail(err, "invalid_type", "chat_template_kwargs",
                                "'chat_template_kwargs' must be an object");
        for (const cJSON *c = kw->child; c; c = c->next) {
            if (!strcmp(c->string, "enable_thinking")) {
                if (cJSON_IsNull(c))
                    continue;
                int v = 0;
                if ((rc = get_bool(c, "chat_template_kwargs.enable_thinking", &v, err)) < 0)
                    return rc;
                out->enable_thinking = v;
                continue;
            }
            return srv_api_fail(err, "unsupported_value", "chat_template_kwargs",
                                "'chat_template_kwargs.%.64s' is not supported (brisk's chat "
                                "templates take only 'enable_thinking')",
                                c->string);
        }
    }
    const char *s = NULL;
    if ((rc = get_string(f[F_REASONING_FORMAT], "reasoning_format", &s, err)) < 0)
        return rc;
    if (rc == 1) {
        if (!strcmp(s, "none"))
            out->split_reasoning = 0;
        else if (strcmp(s, "auto") && strcmp(s, "deepseek"))
            return srv_api_fail(err, "unsupported_value", "reasoning_format",
                                "'reasoning_format' must be 'auto', 'deepseek' or 'none'");
    }
    if ((rc = get_bool(f[F_INCLUDE_REASONING], "include_reasoning", &out->include_reasoning, err)) <
        0)
        return rc;
    return 0;
}

int srv_api_parse_chat(const char *body, size_t len, const srv_api_limits *lim, srv_chat_req *out,
                       srv_api_error *err) {
    api_limits_check(lim);
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    params_default(&out->params);
    cJSON *root;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc == 0) {
        const cJSON *f[F_COUNT];
        out->params.n_unknown_fields = api_collect(root, K_CHAT, f);
        rc = api_check_refused(root, K_CHAT, err);
        if (rc == 0)
            rc = parse_params(f, K_CHAT, lim, &out->params, err);
        if (rc == 0)
            rc = parse_reasoning(f, out, err);
        if (rc == 0)
            rc = srv_tools_parse(f[F_TOOLS], f[F_TOOL_CHOICE], f[F_PARALLEL_TOOL_CALLS], out, err);
        if (rc == 0)
            rc = parse_messages(f[F_MESSAGES], lim, out, err);
        cJSON_Delete(root);
    }
    if (rc < 0)
        srv_chat_req_free(out);
    return rc;
}

void srv_completion_req_free(srv_completion_req *r) {
    if (!r)
        return;
    params_free(&r->params);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    memset(r, 0, sizeof *r);
}

void srv_chat_req_free(srv_chat_req *r) {
    if (!r)
        return;
    params_free(&r->params);
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].content);
        srv_tool_calls_free(r->msgs[i].calls, r->msgs[i].n_calls);
        free(r->msgs[i].tool_call_id);
    }
    free(r->msgs);
    srv_tools_free(r->tools, r->n_tools);
    memset(r, 0, sizeof *r);
}
