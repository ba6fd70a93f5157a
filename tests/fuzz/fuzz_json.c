/* fuzz_json.c - request bodies of /v1/completions (built as
 * fuzz_json_completions) and /v1/chat/completions (FUZZ_JSON_CHAT=1, built
 * as fuzz_json_chat) through srv_api_parse_*, as srv_gen.c calls them.
 *
 * The input is the raw body, given without a terminating NUL (as the HTTP
 * layer may hand it over). Properties checked:
 *   - the result is 0, or BRISK_EINVAL with a 400, or BRISK_ENOMEM with a 500;
 *   - a failure leaves the request zeroed, and its error is one line, and its
 *     JSON and SSE forms are valid one-line UTF-8 JSON;
 *   - a parsed request keeps every promise srv_api.h makes about it: ranges
 *     of every parameter (after the double -> float conversion), stop
 *     strings, distinct logit_bias ids, prompts and messages valid UTF-8
 *     without NUL;
 *   - a chat request renders with every chat template family, to valid
 *     UTF-8 holding every message's (stripped) content. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "models/chat_template.h"
#include "models/grammar.h"
#include "server/api/srv_api.h"
#include "server/api/srv_tools.h"
#include "tests/fuzz/fuzz_util.h"

#ifndef FUZZ_JSON_CHAT
#define FUZZ_JSON_CHAT 0
#endif

/* The HTTP layer's default body limit is 4 MiB; the fuzzer's -max_len is far
 * lower, this only bounds a replayed file. */
#define FUZZ_JSON_MAX_BODY (256u * 1024)
/* A vocabulary the size of Llama 2's, so token ids and logit_bias keys have
 * a real boundary. */
#define FUZZ_JSON_N_VOCAB 32000

static srv_api_limits g_lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    g_lim = srv_api_limits_default(FUZZ_JSON_N_VOCAB);
    return 0;
}

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* A C string of at most cap bytes (its NUL inside the array). */
static int bounded_str(const char *s, size_t cap) {
    return memchr(s, '\0', cap) != NULL;
}

static void check_error(int rc, const srv_api_error *e) {
    FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
    FUZZ_CHECK(e->status == (rc == BRISK_EINVAL ? 400 : 500));
    FUZZ_CHECK(e->type != NULL);
    FUZZ_CHECK(bounded_str(e->message, sizeof e->message) && e->message[0] != '\0');
    FUZZ_CHECK(bounded_str(e->param, sizeof e->param));
    FUZZ_CHECK(!strchr(e->message, '\n') && !strchr(e->message, '\r'));
    char *j = srv_api_error_json(e);
    if (j) {
        fuzz_check_json_object_line(j, strlen(j));
        cJSON *o = cJSON_Parse(j);
        cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message")));
        cJSON_Delete(o);
    }
    free(j);
    size_t n = 0;
    char *ev = srv_sse_error(e, &n);
    if (ev) {
        FUZZ_CHECK(n > 8 && strlen(ev) == n && !memcmp(ev, "data: ", 6) &&
                   !memcmp(ev + n - 2, "\n\n", 2));
        fuzz_check_json_object_line(ev + 6, n - 8);
    }
    free(ev);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The contract of srv_gen_params in srv_api.h. */
static void check_params(const srv_gen_params *p) {
    FUZZ_CHECK(p->max_tokens == -1 || p->max_tokens >= 1);
    FUZZ_CHECK(p->temperature >= 0.0f && p->temperature <= 2.0f);
    FUZZ_CHECK(p->top_p > 0.0f && p->top_p <= 1.0f);
    FUZZ_CHECK(p->top_k == -1 || p->top_k >= 1);
    FUZZ_CHECK(p->min_p >= 0.0f && p->min_p <= 1.0f);
    FUZZ_CHECK(p->n >= 1 && p->n <= g_lim.max_n);
    FUZZ_CHECK(p->n_stop >= 0 && p->n_stop <= g_lim.max_stop);
    for (int i = 0; i < p->n_stop; i++) {
        size_t l = strlen(p->stop[i]);
        FUZZ_CHECK(l >= 1 && l <= (size_t)g_lim.max_stop_len);
        FUZZ_CHECK(fuzz_utf8_valid(p->stop[i], l));
    }
    FUZZ_CHECK(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f);
    FUZZ_CHECK(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f);
    /* The sampler divides positive logits by it: it must be a positive float. */
    FUZZ_CHECK(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f);
    FUZZ_CHECK(p->n_logit_bias >= 0 && p->n_logit_bias <= g_lim.max_logit_bias);
    if (p->n_logit_bias > 0) {
        int32_t *ids = malloc((size_t)p->n_logit_bias * sizeof *ids);
        if (ids) {
            memcpy(ids, p->logit_bias_ids, (size_t)p->n_logit_bias * sizeof *ids);
            qsort(ids, (size_t)p->n_logit_bias, sizeof *ids, cmp_i32);
            for (int i = 0; i < p->n_logit_bias; i++) {
                FUZZ_CHECK(ids[i] >= 0 && ids[i] < g_lim.n_vocab);
                FUZZ_CHECK(i == 0 || ids[i] != ids[i - 1]);
            }
            free(ids);
        }
        for (int i = 0; i < p->n_logit_bias; i++)
            FUZZ_CHECK(isfinite(p->logit_bias[i]) && fabsf(p->logit_bias[i]) <= 100.0f);
    }
    FUZZ_CHECK(p->logprobs >= -1 && p->logprobs <= g_lim.max_logprobs);
    FUZZ_CHECK(p->echo == 0 || p->echo == 1);
    FUZZ_CHECK(p->stream == 0 || p->stream == 1);
    FUZZ_CHECK(p->include_usage == 0 || (p->include_usage == 1 && p->stream));
    FUZZ_CHECK(p->ignore_eos == 0 || p->ignore_eos == 1);
    FUZZ_CHECK(p->n_unknown_fields >= 0);
    if (p->model)
        FUZZ_CHECK(fuzz_utf8_valid(p->model, strlen(p->model)));
}

#if FUZZ_JSON_CHAT

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Every family writes each message's content, whole or strip()ped. */
static void check_render(const srv_chat_req *r) {
    for (int k = MODEL_CHAT_CHATML; k <= MODEL_CHAT_PHI3; k++) {
        /* tools, calls and results in the family's format (server/api/srv_tools.h) */
        srv_tools_arena arena;
        const model_chat_msg *msgs = NULL;
        int n_msgs = 0;
        if (srv_tools_render_msgs(r, (model_chat_kind)k, &arena, &msgs, &n_msgs) < 0) {
            srv_tools_arena_free(&arena);
            continue;
        }
        int none = 0;
        char *gt = srv_tools_grammar(r, (model_chat_kind)k, &none);
        FUZZ_CHECK(gt || none || 1); /* NULL without none: out of memory */
        if (gt) {                    /* the tools' grammar always compiles */
            model_grammar *g = NULL;
            char gerr[256];
            int grc = model_grammar_compile(gt, strlen(gt), NULL, &g, gerr, sizeof gerr);
            FUZZ_CHECK(grc == 0 || grc == BRISK_ENOMEM || strstr(gerr, "more than"));
            model_grammar_unref(g);
            free(gt);
        }
        char *out = NULL, err[256];
        size_t len = 0;
        int bos = 0;
        int rc = model_chat_render((model_chat_kind)k, msgs, n_msgs, "<s>", "</s>", &out, &len,
                                   &bos, err, sizeof err);
        srv_tools_arena_free(&arena);
        FUZZ_CHECK(rc == 0 || rc == BRISK_ENOMEM);
        if (rc < 0)
            continue;
        FUZZ_CHECK(out && strlen(out) == len);
        FUZZ_CHECK(fuzz_utf8_valid(out, len));
        /* every message of the request, tool results included, is in the text */
        for (int i = 0; i < r->n_msgs; i++) {
            const char *c = r->msgs[i].content;
            size_t s = 0, e = r->msgs[i].content_len;
            while (s < e && is_ws(c[s]))
                s++;
            while (e > s && is_ws(c[e - 1]))
                e--;
            if (e == s)
                continue;
            int found = 0;
            for (size_t p = 0; !found && p + (e - s) <= len; p++)
                found = out[p] == c[s] && !memcmp(out + p, c + s, e - s);
            FUZZ_CHECK(found);
        }
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_JSON_MAX_BODY)
        return 0;
    srv_chat_req r;
    srv_api_error e;
    int rc = srv_api_parse_chat((const char *)data, size, &g_lim, &r, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(all_zero(&r, sizeof r));
        return 0;
    }
    FUZZ_CHECK(rc == 0);
    check_params(&r.params);
    FUZZ_CHECK(r.params.echo == 0);
    FUZZ_CHECK(r.n_msgs >= 1 && r.n_msgs <= g_lim.max_messages);
    for (int i = 0; i < r.n_msgs; i++) {
        const srv_chat_msg *m = &r.msgs[i];
        FUZZ_CHECK(!strcmp(m->role, "system") || !strcmp(m->role, "user") ||
                   !strcmp(m->role, "assistant") || !strcmp(m->role, "tool"));
        FUZZ_CHECK(!strcmp(m->role, "tool") == (m->tool_call_id != NULL));
        for (int k = 0; k < m->n_calls; k++) /* arguments: compact JSON of an object */
            FUZZ_CHECK(m->calls[k].name && m->calls[k].id && m->calls[k].arguments);
        FUZZ_CHECK(m->content && strlen(m->content) == m->content_len);
        FUZZ_CHECK(fuzz_utf8_valid(m->content, m->content_len));
    }
    FUZZ_CHECK(r.n_tools >= 0 && r.n_tools <= SRV_MAX_TOOLS);
    for (int i = 0; i < r.n_tools; i++)
        FUZZ_CHECK(r.tools[i].name && r.tools[i].args_expr);
    FUZZ_CHECK(r.tool_choice != SRV_TOOL_CHOICE_NAMED ||
               (r.tool_named >= 0 && r.tool_named < r.n_tools));
    check_render(&r);
    srv_chat_req_free(&r);
    FUZZ_CHECK(all_zero(&r, sizeof r));
    return 0;
}

#else

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_JSON_MAX_BODY)
        return 0;
    srv_completion_req r;
    srv_api_error e;
    int rc = srv_api_parse_completion((const char *)data, size, &g_lim, &r, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(all_zero(&r, sizeof r));
        return 0;
    }
    FUZZ_CHECK(rc == 0);
    check_params(&r.params);
    FUZZ_CHECK(r.n_prompts >= 1 && r.n_prompts <= g_lim.max_prompts);
    for (int i = 0; i < r.n_prompts; i++) {
        const srv_prompt *p = &r.prompts[i];
        if (p->is_tokens) {
            FUZZ_CHECK(p->ids && p->n_ids > 0 && !p->text);
            for (int k = 0; k < p->n_ids; k++)
                FUZZ_CHECK(p->ids[k] >= 0 && p->ids[k] < g_lim.n_vocab);
        } else {
            FUZZ_CHECK(p->text && !p->ids && p->text_len > 0);
            FUZZ_CHECK(strlen(p->text) == p->text_len);
            FUZZ_CHECK(fuzz_utf8_valid(p->text, p->text_len));
        }
    }
    srv_completion_req_free(&r);
    FUZZ_CHECK(all_zero(&r, sizeof r));
    return 0;
}

#endif
