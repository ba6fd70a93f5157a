/* srv_routes.c - the endpoints beside generation: /v1/models/{id},
 * /version, vLLM's /tokenize and /detokenize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_config.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "models/tokenizer.h"
#include "server/app/srv_app.h"

static void reply_json(srv_req *r, char *json) {
    if (!json) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    srv_respond(r, 200, "application/json", json, strlen(json), NULL);
    free(json);
}

/* %XX escapes decoded (the openai SDK quotes ids with '/'); 0, or -1 for a
 * bad escape or one that gives a NUL. */
static int url_decode(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s; s++) {
        if (k + 1 >= cap)
            return -1;
        if (*s != '%') {
            out[k++] = *s;
            continue;
        }
        int v = 0;
        for (int i = 1; i <= 2; i++) {
            char c = s[i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                return -1;
            v = v * 16 + d;
        }
        if (v == 0)
            return -1;
        out[k++] = (char)v;
        s += 2;
    }
    out[k] = '\0';
    return 0;
}

void srv_route_model(srv_req *r) {
    srv_app *app = srv_req_app(r);
    const char *id = srv_req_path(r) + strlen("/v1/models/");
    char name[512];
    if (url_decode(id, name, sizeof name) < 0 || strcmp(name, app->served_name) != 0) {
        srv_respond_error(r, 404, "invalid_request_error", "model", "model_not_found",
                          "The model does not exist; this server serves '%s'", app->served_name);
        return;
    }
    reply_json(r, srv_api_model_json(app->served_name, app->created, "brisk",
                                     app->ready ? app->max_ctx : 0,
                                     app->ready ? model_get_file_type(app->m) : NULL,
                                     app->ready ? &app->gen_defaults : NULL));
}

void srv_route_version(srv_req *r) {
    /* The KV dtype as configured: the engine starts with it or not at all
     * (sched_setup.h), so before it is ready this is what it will run. */
    srv_app *app = srv_req_app(r);
    char body[256];
    snprintf(body, sizeof body, "{\"version\":\"%s\",\"commit\":\"%s\",\"kv_cache_dtype\":\"%s\"}",
             BRISK_VERSION, BRISK_GIT_COMMIT, kern_kv_dtype_name(app->cfg.engine.kv_dtype));
    srv_respond(r, 200, "application/json", body, strlen(body), NULL);
}

void srv_route_tokenize(srv_req *r) {
    srv_app *app = srv_req_app(r);
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    srv_tokenize_req tr;
    srv_api_error e;
    int rc = srv_api_parse_tokenize(body, len, &app->limits, &tr, &e);
    if (srv_gen_accept(app, r, rc, &e, tr.model) < 0) {
        srv_tokenize_req_free(&tr);
        return;
    }
    int n = 0;
    int32_t *ids = NULL;
    if (tr.is_chat) {
        ids = srv_gen_chat_prompt(app, r, &tr.chat, &n);
        if (!ids) { /* answered */
            srv_tokenize_req_free(&tr);
            return;
        }
    } else {
        int flags = TOK_PARSE_SPECIAL | (tr.add_special_tokens ? srv_gen_bos_flag(app) : 0);
        ids = srv_gen_tokenize(app, tr.prompt, tr.prompt_len, flags, &n);
        if (!ids) {
            srv_tokenize_req_free(&tr);
            srv_respond_code(r, BRISK_ENOMEM, NULL);
            return;
        }
    }
    char **strs = NULL;
    size_t *lens = NULL;
    int ok = 1;
    if (tr.return_token_strs) {
        strs = brisk_calloc((size_t)n + 1, sizeof *strs);
        lens = brisk_calloc((size_t)n + 1, sizeof *lens);
        ok = strs && lens;
        for (int i = 0; ok && i < n; i++) {
            int m = tok_token_to_piece(app->vocab, ids[i], TOK_PARSE_SPECIAL, NULL, 0);
            m = m > 0 ? m : 0;
            if (!(strs[i] = brisk_malloc((size_t)m + 1))) {
                ok = 0;
                break;
            }
            if (m)
                tok_token_to_piece(app->vocab, ids[i], TOK_PARSE_SPECIAL, strs[i], (size_t)m + 1);
            strs[i][m] = '\0';
            lens[i] = (size_t)m;
        }
    }
    if (ok)
        reply_json(r, srv_api_tokenize_json(ids, n, app->max_ctx, strs, lens));
    else
        srv_respond_code(r, BRISK_ENOMEM, NULL);
    for (int i = 0; strs && i < n; i++)
        free(strs[i]);
    free(strs);
    free(lens);
    free(ids);
    srv_tokenize_req_free(&tr);
}

void srv_route_detokenize(srv_req *r) {
    srv_app *app = srv_req_app(r);
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    srv_detokenize_req dr;
    srv_api_error e;
    int rc = srv_api_parse_detokenize(body, len, &app->limits, &dr, &e);
    if (srv_gen_accept(app, r, rc, &e, dr.model) < 0) {
        srv_detokenize_req_free(&dr);
        return;
    }
    char *text = tok_decode_all(app->vocab, dr.ids, dr.n_ids, TOK_PARSE_SPECIAL);
    if (!text && dr.n_ids == 0)
        text = brisk_strdup("");
    reply_json(r, text ? srv_api_detokenize_json(text, strlen(text)) : NULL);
    free(text);
    srv_detokenize_req_free(&dr);
}
