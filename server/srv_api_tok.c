/* srv_api_tok.c - vLLM's /tokenize and /detokenize: request bodies in,
 * plain structs out, and their response bodies. Loop thread; every body is
 * hostile (srv_api.h's rules). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "server/srv_api.h"
#include "server/srv_api_int.h"

/* An optional boolean field: absent or null leaves *out. */
static int tok_bool(const cJSON *root, const char *name, int *out, srv_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v))
        return srv_api_fail(err, "invalid_type", name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* The optional "model" field: a string, copied; absent or null: NULL. */
static int tok_model(const cJSON *root, char **out, srv_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v))
        return srv_api_fail(err, "invalid_type", "model", "'model' must be a string");
    if (!(*out = brisk_strdup(v->valuestring)))
        return srv_api_oom(err);
    return 0;
}

int srv_api_parse_tokenize(const char *body, size_t len, const srv_api_limits *lim,
                           srv_tokenize_req *out, srv_api_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    cJSON *root;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc < 0)
        return rc;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    out->return_token_strs = 0;
    rc = tok_bool(root, "return_token_strs", &out->return_token_strs, err);
    if (rc == 0 && msgs && prompt)
        rc = srv_api_fail(err, "invalid_value", "prompt", "give either 'prompt' or 'messages'");
    if (rc == 0 && msgs) {
        /* The chat form: the messages (and tools) as /v1/chat/completions
         * takes them, rendered with the model's template. */
        out->is_chat = 1;
        cJSON_Delete(root);
        root = NULL;
        rc = srv_api_parse_chat(body, len, lim, &out->chat, err);
        if (rc == 0 && out->chat.params.model &&
            !(out->model = brisk_strdup(out->chat.params.model)))
            rc = srv_api_oom(err);
    } else if (rc == 0) {
        out->add_special_tokens = 1; /* vLLM's default for a prompt */
        rc = tok_model(root, &out->model, err);
        if (rc == 0)
            rc = tok_bool(root, "add_special_tokens", &out->add_special_tokens, err);
        if (rc == 0 && !prompt)
            rc = srv_api_fail(err, "missing_required_parameter", "prompt",
                              "'prompt' (a string) or 'messages' is required");
        if (rc == 0 && !cJSON_IsString(prompt))
            rc = srv_api_fail(err, "invalid_type", "prompt", "'prompt' must be a string");
        if (rc == 0) {
            size_t n = strlen(prompt->valuestring);
            if (!srv_utf8_valid(prompt->valuestring, n))
                rc = srv_api_fail(err, "invalid_value", "prompt", "'prompt' is not valid UTF-8");
            else if (!(out->prompt = brisk_malloc(n + 1)))
                rc = srv_api_oom(err);
            else {
                memcpy(out->prompt, prompt->valuestring, n + 1);
                out->prompt_len = n;
            }
        }
    }
    cJSON_Delete(root);
    if (rc < 0)
        srv_tokenize_req_free(out);
    return rc;
}

void srv_tokenize_req_free(srv_tokenize_req *r) {
    if (!r)
        return;
    free(r->model);
    free(r->prompt);
    srv_chat_req_free(&r->chat);
    memset(r, 0, sizeof *r);
}

int srv_api_parse_detokenize(const char *body, size_t len, const srv_api_limits *lim,
                             srv_detokenize_req *out, srv_api_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    cJSON *root;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc < 0)
        return rc;
    rc = tok_model(root, &out->model, err);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (rc == 0 && !t)
        rc = srv_api_fail(err, "missing_required_parameter", "tokens",
                          "'tokens' (an array of token ids) is required");
    if (rc == 0 && !cJSON_IsArray(t))
        rc = srv_api_fail(err, "invalid_type", "tokens", "'tokens' must be an array of token ids");
    int n = rc == 0 ? cJSON_GetArraySize(t) : 0;
    if (rc == 0 && !(out->ids = brisk_malloc((size_t)(n ? n : 1) * sizeof *out->ids)))
        rc = srv_api_oom(err);
    const cJSON *it = rc == 0 ? t->child : NULL;
    for (int i = 0; rc == 0 && it; it = it->next, i++) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (!cJSON_IsNumber(it) || v != floor(v) || v < 0 || v >= (double)lim->n_vocab) {
            char param[32];
            snprintf(param, sizeof param, "tokens[%d]", i);
            rc = srv_api_fail(err, "invalid_value", param, "token ids must be integers in [0, %d)",
                              lim->n_vocab);
        } else {
            out->ids[out->n_ids++] = (int32_t)v;
        }
    }
    cJSON_Delete(root);
    if (rc < 0)
        srv_detokenize_req_free(out);
    return rc;
}

void srv_detokenize_req_free(srv_detokenize_req *r) {
    if (!r)
        return;
    free(r->model);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

char *srv_api_tokenize_json(const int32_t *ids, int n, int max_model_len, char *const *strs,
                            const size_t *str_lens) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"count\":");
    srv_api_put_int(&w, n);
    brisk_buf_str(&w, ",\"max_model_len\":");
    srv_api_put_int(&w, max_model_len);
    brisk_buf_str(&w, ",\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            brisk_buf_str(&w, ",");
        srv_api_put_int(&w, ids[i]);
    }
    brisk_buf_str(&w, "]");
    if (strs) {
        brisk_buf_str(&w, ",\"token_strs\":[");
        for (int i = 0; i < n; i++) {
            if (i)
                brisk_buf_str(&w, ",");
            srv_api_put_str(&w, strs[i], str_lens[i]);
        }
        brisk_buf_str(&w, "]");
    }
    brisk_buf_str(&w, "}");
    return brisk_buf_take(&w, NULL);
}

char *srv_api_detokenize_json(const char *text, size_t len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"prompt\":");
    srv_api_put_str(&w, text, len);
    brisk_buf_str(&w, "}");
    return brisk_buf_take(&w, NULL);
}
