/* srv_api_resp.c - OpenAI response bodies, streaming chunks, SSE framing and
 * the JSON string writer (ill-formed UTF-8 as U+FFFD, common/brisk_utf8.h).
 *
 * The JSON is written directly into a growing buffer rather than through a
 * cJSON tree: a streaming request builds one chunk per token, and a tree costs
 * an allocation per node. Writing it ourselves also lets a string carry any
 * byte: token pieces are raw bytes (a NUL from a byte-fallback token, half of
 * a UTF-8 sequence), and every string goes through one function that replaces
 * ill-formed UTF-8 with U+FFFD and escapes what JSON requires. Numbers are
 * written only from finite values, so no NaN or Infinity can reach a client. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_utf8.h"
#include "models/model_gen.h"
#include "server/api/srv_api.h"
#include "server/api/srv_api_json.h"

/* ---------------------------------------------------------------- writer */

/* JSON pieces appended to a brisk_buf (common/brisk_buf.h): an allocation
 * failure makes the buffer sticky-oom and brisk_buf_take gives NULL. */

static void w_int(brisk_buf *w, long long v) {
    char b[32];
    int n = snprintf(b, sizeof b, "%lld", v);
    brisk_buf_put(w, b, (size_t)n);
}

/* A finite float, shortest form that reads back to the same float. */
static void w_float(brisk_buf *w, float v) {
    brisk_buf_printf(w, "%.9g", isfinite(v) ? (double)v : 0.0);
}

/* A JSON string of the bytes s[0..n): ill-formed UTF-8 becomes U+FFFD, '"',
 * '\\' and control characters are escaped. s == NULL writes null. */
static void w_str(brisk_buf *w, const char *s, size_t n) {
    if (!s) {
        brisk_buf_str(w, "null");
        return;
    }
    /* Worst case 6 bytes out per byte in (a control character as \u00XX). */
    if (n > (SIZE_MAX - 2) / 6) {
        w->oom = 1;
        return;
    }
    char *start = brisk_buf_reserve(w, 6 * n + 2);
    if (!start)
        return;
    static const char hex[] = "0123456789abcdef";
    char *o = start;
    *o++ = '"';
    size_t i = 0, k;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        if (c >= 0x80) {
            if (brisk_utf8_next(s + i, n - i, &k) == 1) {
                memcpy(o, s + i, k);
                o += k;
            } else {
                memcpy(o, "\xEF\xBF\xBD", 3);
                o += 3;
            }
            i += k;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
        i++;
    }
    *o++ = '"';
    brisk_buf_commit(w, (size_t)(o - start));
}

static void w_cstr(brisk_buf *w, const char *s) {
    w_str(w, s, s ? strlen(s) : 0);
}

/* A logprob: finite by construction (-inf, as OpenAI, and NaN become -9999),
 * and printed with the 9 significant digits that round-trip a float. */
static void w_logprob(brisk_buf *w, float v) {
    char b[32];
    if (!isfinite(v) || v < -9999.0f)
        v = -9999.0f;
    int n = snprintf(b, sizeof b, "%.9g", (double)v);
    brisk_buf_put(w, b, (size_t)n);
}

/* The common head of every object: {"id":..,"object":..,"created":..,"model":.. */
static void w_head(brisk_buf *w, const char *id, const char *object, int64_t created,
                   const char *model) {
    brisk_buf_str(w, "{\"id\":");
    w_cstr(w, id);
    brisk_buf_str(w, ",\"object\":\"");
    brisk_buf_str(w, object);
    brisk_buf_str(w, "\",\"created\":");
    w_int(w, (long long)created);
    brisk_buf_str(w, ",\"model\":");
    w_cstr(w, model);
}

static void w_usage(brisk_buf *w, const srv_usage *u) {
    brisk_buf_str(w, ",\"usage\":{\"prompt_tokens\":");
    w_int(w, u->prompt_tokens);
    brisk_buf_str(w, ",\"completion_tokens\":");
    w_int(w, u->completion_tokens);
    brisk_buf_str(w, ",\"total_tokens\":");
    w_int(w, (long long)u->prompt_tokens + u->completion_tokens);
    brisk_buf_str(w, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    w_int(w, u->cached_tokens);
    brisk_buf_str(w, "}}");
}

void srv_api_put_str(brisk_buf *w, const char *s, size_t n) {
    w_str(w, s, n);
}

void srv_api_put_int(brisk_buf *w, long long v) {
    w_int(w, v);
}

const char srv_finish_deadline[] = "length";

static void w_finish_reason(brisk_buf *w, const char *fr) {
    brisk_buf_str(w, ",\"finish_reason\":");
    w_cstr(w, fr);
    if (fr == srv_finish_deadline)
        brisk_buf_str(w, ",\"brisk_finish_detail\":\"deadline\"");
}

/* ---------------------------------------------------------------- logprobs */

/* One unit of the sanitised form of s: a well-formed sequence, or U+FFFD for
 * an ill-formed subpart. Advances *i. */
static const char *utf8_unit(const char *s, size_t len, size_t *i, size_t *unit_len) {
    size_t n;
    const char *u = s + *i;
    if (brisk_utf8_next(u, len - *i, &n) != 1) {
        u = "\xEF\xBF\xBD";
        *unit_len = 3;
    } else {
        *unit_len = n;
    }
    *i += n;
    return u;
}

/* Whether a and b sanitise to the same text, without allocating: UTF-8 is
 * prefix-free, so equal texts have equal unit sequences. */
static int sanitized_equal(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0, j = 0, la, lb;
    while (i < na && j < nb) {
        const char *ua = utf8_unit(a, na, &i, &la), *ub = utf8_unit(b, nb, &j, &lb);
        if (la != lb || memcmp(ua, ub, la) != 0)
            return 0;
    }
    return i == na && j == nb;
}

/* True when top[i]'s text equals an earlier one's: two tokens can decode to
 * the same text, and a JSON object must not repeat a key, so only the first
 * (the likelier) is kept. n_top is at most max_logprobs (20). */
static int top_is_repeat(const srv_top_logprob *top, int i) {
    for (int j = 0; j < i; j++)
        if (sanitized_equal(top[j].token, top[j].token_len, top[i].token, top[i].token_len))
            return 1;
    return 0;
}

/* /v1/completions logprobs: parallel arrays over the tokens. */
static void w_completion_logprobs(brisk_buf *w, const srv_token_logprob *lps, int n) {
    brisk_buf_str(w, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(w, ",");
        w_str(w, lps[i].token, lps[i].token_len);
    }
    brisk_buf_str(w, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(w, ",");
        if (lps[i].has_logprob)
            w_logprob(w, lps[i].logprob);
        else
            brisk_buf_str(w, "null");
    }
    brisk_buf_str(w, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(w, ",");
        if (!lps[i].has_logprob) {
            brisk_buf_str(w, "null");
            continue;
        }
        brisk_buf_str(w, "{");
        int first = 1;
        for (int t = 0; t < lps[i].n_top; t++) {
            if (top_is_repeat(lps[i].top, t))
                continue;
            if (!first)
                brisk_buf_str(w, ",");
            first = 0;
            w_str(w, lps[i].top[t].token, lps[i].top[t].token_len);
            brisk_buf_str(w, ":");
            w_logprob(w, lps[i].top[t].logprob);
        }
        brisk_buf_str(w, "}");
    }
    brisk_buf_str(w, "],\"text_offset\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(w, ",");
        w_int(w, (long long)lps[i].text_offset);
    }
    brisk_buf_str(w, "]}");
}

static void w_bytes(brisk_buf *w, const char *s, size_t n) {
    brisk_buf_str(w, "[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(w, ",");
        w_int(w, (unsigned char)s[i]);
    }
    brisk_buf_str(w, "]");
}

/* /v1/chat/completions logprobs: {"content":[{token, logprob, bytes, top_logprobs}]}. */
static void w_chat_logprobs(brisk_buf *w, const srv_token_logprob *lps, int n) {
    brisk_buf_str(w, "{\"content\":[");
    for (int i = 0; i < n; i++) {
        const srv_token_logprob *l = &lps[i];
        if (i)
            brisk_buf_str(w, ",");
        brisk_buf_str(w, "{\"token\":");
        w_str(w, l->token, l->token_len);
        brisk_buf_str(w, ",\"logprob\":");
        w_logprob(w, l->has_logprob ? l->logprob : -INFINITY);
        brisk_buf_str(w, ",\"bytes\":");
        w_bytes(w, l->token, l->token_len);
        brisk_buf_str(w, ",\"top_logprobs\":[");
        for (int t = 0; t < l->n_top; t++) {
            if (t)
                brisk_buf_str(w, ",");
            brisk_buf_str(w, "{\"token\":");
            w_str(w, l->top[t].token, l->top[t].token_len);
            brisk_buf_str(w, ",\"logprob\":");
            w_logprob(w, l->top[t].logprob);
            brisk_buf_str(w, ",\"bytes\":");
            w_bytes(w, l->top[t].token, l->top[t].token_len);
            brisk_buf_str(w, "}");
        }
        brisk_buf_str(w, "]}");
    }
    brisk_buf_str(w, "]}");
}

/* ---------------------------------------------------------------- choices */

static void w_completion_choice(brisk_buf *w, const srv_choice *c, int want_logprobs) {
    brisk_buf_str(w, "{\"text\":");
    w_str(w, c->text ? c->text : "", c->text ? c->text_len : 0);
    brisk_buf_str(w, ",\"index\":");
    w_int(w, c->index);
    brisk_buf_str(w, ",\"logprobs\":");
    if (want_logprobs)
        w_completion_logprobs(w, c->lps, c->n_lps);
    else
        brisk_buf_str(w, "null");
    w_finish_reason(w, c->finish_reason);
    brisk_buf_str(w, "}");
}

static void w_chat_logprobs_field(brisk_buf *w, const srv_choice *c, int want_logprobs) {
    brisk_buf_str(w, ",\"logprobs\":");
    if (want_logprobs)
        w_chat_logprobs(w, c->lps, c->n_lps);
    else
        brisk_buf_str(w, "null");
}

/* Closes the choices array, adds usage when given, ends the object. */
static char *w_choices_end(brisk_buf *w, const srv_usage *usage) {
    brisk_buf_str(w, "]");
    if (usage)
        w_usage(w, usage);
    brisk_buf_str(w, "}");
    return brisk_buf_take(w, NULL);
}

char *srv_api_completion_json(const char *id, int64_t created, const char *model,
                              const srv_choice *choices, int n, const srv_usage *usage,
                              int want_logprobs) {
    brisk_buf w = {0};
    w_head(&w, id, "text_completion", created, model);
    brisk_buf_str(&w, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(&w, ",");
        w_completion_choice(&w, &choices[i], want_logprobs);
    }
    return w_choices_end(&w, usage);
}

/* "tool_calls":[{"id","type":"function","function":{"name","arguments"}}] */
static void w_tool_calls(brisk_buf *w, const srv_choice *c) {
    brisk_buf_str(w, "\"tool_calls\":[");
    for (int k = 0; k < c->n_calls; k++) {
        const srv_tool_call *t = &c->calls[k];
        brisk_buf_str(w, k ? ",{\"id\":" : "{\"id\":");
        w_cstr(w, t->id);
        brisk_buf_str(w, ",\"type\":\"function\",\"function\":{\"name\":");
        w_cstr(w, t->name);
        brisk_buf_str(w, ",\"arguments\":");
        w_cstr(w, t->arguments);
        brisk_buf_str(w, "}}");
    }
    brisk_buf_str(w, "]");
}

/* A chunk's "tool_calls":[{"index","id","type","function":{"name","arguments":""}}]
 * (a call's first delta) or [{"index","function":{"arguments": fragment}}]. */
static void w_tool_delta(brisk_buf *w, const srv_call_delta *d) {
    brisk_buf_str(w, "\"tool_calls\":[{\"index\":");
    w_int(w, d->index);
    if (d->id) {
        brisk_buf_str(w, ",\"id\":");
        w_cstr(w, d->id);
        brisk_buf_str(w, ",\"type\":\"function\",\"function\":{\"name\":");
        w_cstr(w, d->name);
        brisk_buf_str(w, ",\"arguments\":\"\"}}]");
        return;
    }
    brisk_buf_str(w, ",\"function\":{\"arguments\":");
    w_str(w, d->args ? d->args : "", d->args ? d->args_len : 0);
    brisk_buf_str(w, "}}]");
}

char *srv_api_chat_json(const char *id, int64_t created, const char *model,
                        const srv_choice *choices, int n, const srv_usage *usage,
                        int want_logprobs) {
    brisk_buf w = {0};
    w_head(&w, id, "chat.completion", created, model);
    brisk_buf_str(&w, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        const srv_choice *c = &choices[i];
        if (i)
            brisk_buf_str(&w, ",");
        brisk_buf_str(&w, "{\"index\":");
        w_int(&w, c->index);
        brisk_buf_str(&w, ",\"message\":{\"role\":\"assistant\",");
        if (c->reasoning) {
            brisk_buf_str(&w, "\"reasoning_content\":");
            w_str(&w, c->reasoning, c->reasoning_len);
            brisk_buf_str(&w, ",");
        }
        brisk_buf_str(&w, "\"content\":");
        if (c->n_calls > 0 && !c->text)
            brisk_buf_str(&w, "null");
        else
            w_str(&w, c->text ? c->text : "", c->text ? c->text_len : 0);
        if (c->n_calls > 0) {
            brisk_buf_str(&w, ",");
            w_tool_calls(&w, c);
        }
        brisk_buf_str(&w, "}");
        w_chat_logprobs_field(&w, c, want_logprobs);
        w_finish_reason(&w, c->finish_reason);
        brisk_buf_str(&w, "}");
    }
    return w_choices_end(&w, usage);
}

char *srv_api_completion_chunk_json(const char *id, int64_t created, const char *model,
                                    const srv_choice *c, const srv_usage *usage,
                                    int want_logprobs) {
    brisk_buf w = {0};
    w_head(&w, id, "text_completion", created, model);
    brisk_buf_str(&w, ",\"choices\":[");
    if (c)
        w_completion_choice(&w, c, want_logprobs);
    return w_choices_end(&w, usage);
}

char *srv_api_chat_chunk_json(const char *id, int64_t created, const char *model,
                              const srv_choice *c, int first, const srv_usage *usage,
                              int want_logprobs) {
    brisk_buf w = {0};
    w_head(&w, id, "chat.completion.chunk", created, model);
    brisk_buf_str(&w, ",\"choices\":[");
    if (c) {
        brisk_buf_str(&w, "{\"index\":");
        w_int(&w, c->index);
        brisk_buf_str(&w, ",\"delta\":{");
        if (first)
            brisk_buf_str(&w, "\"role\":\"assistant\"");
        if (c->reasoning) {
            if (first)
                brisk_buf_str(&w, ",");
            brisk_buf_str(&w, "\"reasoning_content\":");
            w_str(&w, c->reasoning, c->reasoning_len);
        }
        if (c->text || (first && !c->reasoning && !c->delta)) {
            if (first || c->reasoning)
                brisk_buf_str(&w, ",");
            brisk_buf_str(&w, "\"content\":");
            w_str(&w, c->text ? c->text : "", c->text ? c->text_len : 0);
        }
        if (c->delta) {
            if (first || c->reasoning || c->text)
                brisk_buf_str(&w, ",");
            w_tool_delta(&w, c->delta);
        }
        brisk_buf_str(&w, "}");
        w_chat_logprobs_field(&w, c, want_logprobs);
        w_finish_reason(&w, c->finish_reason);
        brisk_buf_str(&w, "}");
    }
    return w_choices_end(&w, usage);
}

/* The sampling defaults a request's missing fields take; brisk's own are
 * those of the OpenAI API (temperature 1, top_p 1, no top_k, min_p or
 * repetition penalty). */
static void w_gen_defaults(brisk_buf *w, const model_generation *g) {
    const model_generation none = {0};
    if (!g)
        g = &none;
    brisk_buf_str(w, ",\"generation_defaults\":{\"source\":");
    w_cstr(w, g->has ? "generation_config" : "brisk");
    brisk_buf_str(w, ",\"temperature\":");
    w_float(w, g->has & MODEL_GEN_TEMPERATURE ? g->temperature : 1.0f);
    brisk_buf_str(w, ",\"top_p\":");
    w_float(w, g->has & MODEL_GEN_TOP_P ? g->top_p : 1.0f);
    brisk_buf_str(w, ",\"top_k\":");
    w_int(w, g->has & MODEL_GEN_TOP_K && g->top_k > 0 ? g->top_k : -1);
    brisk_buf_str(w, ",\"min_p\":");
    w_float(w, g->has & MODEL_GEN_MIN_P ? g->min_p : 0.0f);
    brisk_buf_str(w, ",\"repetition_penalty\":");
    w_float(w, g->has & MODEL_GEN_REPETITION_PENALTY ? g->repetition_penalty : 1.0f);
    brisk_buf_str(w, "}");
}

static void w_model(brisk_buf *w, const char *model_id, int64_t created, const char *owned_by,
                    int max_model_len, const char *file_type, const model_generation *gen,
                    int with_gen) {
    brisk_buf_str(w, "{\"id\":");
    w_cstr(w, model_id);
    brisk_buf_str(w, ",\"object\":\"model\",\"created\":");
    w_int(w, (long long)created);
    brisk_buf_str(w, ",\"owned_by\":");
    w_cstr(w, owned_by);
    if (max_model_len > 0) {
        brisk_buf_str(w, ",\"max_model_len\":");
        w_int(w, max_model_len);
    }
    if (file_type) {
        brisk_buf_str(w, ",\"file_type\":");
        w_cstr(w, file_type);
    }
    if (with_gen)
        w_gen_defaults(w, gen);
    brisk_buf_str(w, "}");
}

char *srv_api_models_json(const char *model_id, int64_t created, const char *owned_by,
                          int max_model_len, const char *file_type, const model_generation *gen) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"object\":\"list\",\"data\":[");
    w_model(&w, model_id, created, owned_by, max_model_len, file_type, gen, gen != NULL);
    brisk_buf_str(&w, "]}");
    return brisk_buf_take(&w, NULL);
}

char *srv_api_model_json(const char *model_id, int64_t created, const char *owned_by,
                         int max_model_len, const char *file_type, const model_generation *gen) {
    brisk_buf w = {0};
    w_model(&w, model_id, created, owned_by, max_model_len, file_type, gen, gen != NULL);
    return brisk_buf_take(&w, NULL);
}

/* ---------------------------------------------------------------- errors, SSE */

static void w_error(brisk_buf *w, const srv_api_error *e) {
    brisk_buf_str(w, "{\"error\":{\"message\":");
    w_str(w, e->message, strnlen(e->message, sizeof e->message));
    brisk_buf_str(w, ",\"type\":");
    w_cstr(w, e->type ? e->type : "invalid_request_error");
    brisk_buf_str(w, ",\"param\":");
    size_t plen = strnlen(e->param, sizeof e->param);
    if (plen)
        w_str(w, e->param, plen);
    else
        brisk_buf_str(w, "null");
    brisk_buf_str(w, ",\"code\":");
    w_cstr(w, e->code);
    brisk_buf_str(w, "}}");
}

char *srv_api_error_json(const srv_api_error *e) {
    brisk_buf w = {0};
    w_error(&w, e);
    return brisk_buf_take(&w, NULL);
}

char *srv_sse_event(const char *json, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "data: ");
    brisk_buf_str(&w, json);
    brisk_buf_str(&w, "\n\n");
    return brisk_buf_take(&w, len);
}

const char *srv_sse_done(size_t *len) {
    static const char done[] = "data: [DONE]\n\n";
    if (len)
        *len = sizeof done - 1;
    return done;
}

char *srv_sse_error(const srv_api_error *e, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "data: ");
    w_error(&w, e);
    brisk_buf_str(&w, "\n\n");
    return brisk_buf_take(&w, len);
}
