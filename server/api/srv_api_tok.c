/* srv_api_tok.c - vLLM's /tokenize and /detokenize, and /v1/embeddings: request bodies in,
 * plain structs out, and their response bodies. Loop thread; every body is
 * hostile (srv_api.h's rules). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_utf8.h"
#include "server/api/srv_api.h"
#include "server/api/srv_api_json.h"

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
            if (!brisk_utf8_valid(prompt->valuestring, n))
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

/* ---- /v1/embeddings ---- */

/* One input: a non-empty string (valid UTF-8, no NUL) or token ids. */
static int emb_input(const cJSON *v, const char *param, const srv_api_limits *lim, srv_prompt *out,
                     srv_api_error *err) {
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        if (n == 0)
            return srv_api_fail(err, "invalid_value", param, "an input must not be empty");
        if (!brisk_utf8_valid(v->valuestring, n))
            return srv_api_fail(err, "invalid_value", param, "an input is not valid UTF-8");
        if (!(out->text = brisk_malloc(n + 1)))
            return srv_api_oom(err);
        memcpy(out->text, v->valuestring, n + 1);
        out->text_len = n;
        return 0;
    }
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n == 0)
        return srv_api_fail(err, cJSON_IsArray(v) ? "invalid_value" : "invalid_type", param,
                            "an input is a non-empty string or a non-empty array of token ids");
    out->is_tokens = 1;
    if (!(out->ids = brisk_malloc((size_t)n * sizeof *out->ids)))
        return srv_api_oom(err);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (!cJSON_IsNumber(it) || d != floor(d) || d < 0 || d >= (double)lim->n_vocab)
            return srv_api_fail(err, "invalid_value", param,
                                "token ids must be integers in [0, %d)", lim->n_vocab);
        out->ids[out->n_ids++] = (int32_t)d;
    }
    return 0;
}

int srv_api_parse_embeddings(const char *body, size_t len, const srv_api_limits *lim,
                             srv_embed_req *out, srv_api_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->dimensions = -1;
    out->normalize = 1;
    out->add_special_tokens = 1;
    cJSON *root;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc < 0)
        return rc;
    rc = tok_model(root, &out->model, err);
    const cJSON *v;
    if (rc == 0 && (v = cJSON_GetObjectItemCaseSensitive(root, "encoding_format")) &&
        !cJSON_IsNull(v)) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "base64"))
            out->base64 = 1;
        else if (!cJSON_IsString(v) || strcmp(v->valuestring, "float"))
            rc = srv_api_fail(err, "invalid_value", "encoding_format",
                              "'encoding_format' must be 'float' or 'base64'");
    }
    if (rc == 0 && (v = cJSON_GetObjectItemCaseSensitive(root, "dimensions")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
            v->valuedouble > 1e6)
            rc = srv_api_fail(err, "invalid_value", "dimensions",
                              "'dimensions' must be a positive integer");
        else
            out->dimensions = (int)v->valuedouble;
    }
    if (rc == 0)
        rc = tok_bool(root, "normalize", &out->normalize, err);
    if (rc == 0)
        rc = tok_bool(root, "add_special_tokens", &out->add_special_tokens, err);
    /* llama.cpp's embd_normalize: 2 (Euclidean, the default) or -1 (none). */
    if (rc == 0 && (v = cJSON_GetObjectItemCaseSensitive(root, "embd_normalize")) &&
        !cJSON_IsNull(v)) {
        if (cJSON_IsNumber(v) && (v->valuedouble == 2 || v->valuedouble == -1))
            out->normalize = v->valuedouble == 2;
        else
            rc = srv_api_fail(err, "unsupported_parameter", "embd_normalize",
                              "'embd_normalize' must be 2 (Euclidean) or -1 (none)");
    }
    if (rc == 0 && (v = cJSON_GetObjectItemCaseSensitive(root, "truncate_prompt_tokens")) &&
        !cJSON_IsNull(v))
        rc = srv_api_fail(err, "unsupported_parameter", "truncate_prompt_tokens",
                          "'truncate_prompt_tokens' is not supported: inputs are never cut");
    const cJSON *in = rc == 0 ? cJSON_GetObjectItemCaseSensitive(root, "input") : NULL;
    if (rc == 0 && !in)
        rc = srv_api_fail(err, "missing_required_parameter", "input", "'input' is required");
    /* A string, token ids, or an array of either (one embedding each). */
    int many = rc == 0 && cJSON_IsArray(in) && in->child &&
               (cJSON_IsString(in->child) || cJSON_IsArray(in->child));
    int n = rc == 0 ? (many ? cJSON_GetArraySize(in) : 1) : 0;
    if (rc == 0 && cJSON_IsArray(in) && !in->child)
        rc = srv_api_fail(err, "invalid_value", "input", "'input' must not be empty");
    if (rc == 0 && n > SRV_EMBED_MAX_INPUTS)
        rc = srv_api_fail(err, "invalid_value", "input", "at most %d inputs in one request",
                          SRV_EMBED_MAX_INPUTS);
    if (rc == 0 && !(out->inputs = brisk_calloc((size_t)n, sizeof *out->inputs)))
        rc = srv_api_oom(err);
    const cJSON *it = many ? in->child : in;
    for (int i = 0; rc == 0 && i < n; i++, it = it->next) {
        char param[32];
        snprintf(param, sizeof param, many ? "input[%d]" : "input", i);
        rc = emb_input(it, param, lim, &out->inputs[i], err);
        out->n_inputs = i + 1;
    }
    cJSON_Delete(root);
    if (rc < 0)
        srv_embed_req_free(out);
    return rc;
}

void srv_embed_req_free(srv_embed_req *r) {
    if (!r)
        return;
    free(r->model);
    for (int i = 0; r->inputs && i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].ids);
    }
    free(r->inputs);
    memset(r, 0, sizeof *r);
}

/* Base64 (RFC 4648, padded) of n bytes. */
static void w_base64(brisk_buf *w, const unsigned char *p, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = brisk_buf_reserve(w, (n + 2) / 3 * 4 + 2);
    if (!o)
        return;
    char *start = o;
    *o++ = '"';
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        *o++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? abc[v & 63] : '=';
    }
    *o++ = '"';
    brisk_buf_commit(w, (size_t)(o - start));
}

char *srv_api_embeddings_json(const float *const *vecs, int n, int dim, int base64,
                              const char *model, int prompt_tokens) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < n; i++) {
        brisk_buf_printf(
            &w, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (base64) {
            /* OpenAI's: the little-endian float32 bytes. */
            unsigned char *b = brisk_malloc((size_t)dim * 4 + 1);
            if (!b) {
                w.oom = 1;
                break;
            }
            for (int d = 0; d < dim; d++) {
                uint32_t u;
                memcpy(&u, &vecs[i][d], 4);
                for (int k = 0; k < 4; k++)
                    b[4 * d + k] = (unsigned char)(u >> (8 * k));
            }
            w_base64(&w, b, (size_t)dim * 4);
            free(b);
        } else {
            brisk_buf_str(&w, "[");
            for (int d = 0; d < dim; d++) {
                float x = vecs[i][d];
                brisk_buf_printf(&w, d ? ",%.9g" : "%.9g", isfinite(x) ? (double)x : 0.0);
            }
            brisk_buf_str(&w, "]");
        }
        brisk_buf_str(&w, "}");
    }
    brisk_buf_str(&w, "],\"model\":");
    srv_api_put_str(&w, model, strlen(model));
    brisk_buf_printf(&w, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", prompt_tokens,
                     prompt_tokens);
    return brisk_buf_take(&w, NULL);
}
