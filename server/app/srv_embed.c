/* srv_embed.c - POST /v1/embeddings: inputs become pooling sequences of the
 * engine (scheduler/engine.h), their vectors one JSON answer: an output
 * shape (srv_gen_int.h) that never streams. Runs on the loop thread,
 * through srv_gen.c's request lifecycle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "models/tokenizer.h"
#include "server/app/srv_app.h"
#include "server/app/srv_gen_int.h"

/* The embeddings of a finished /v1/embeddings request, L2-normalised unless
 * asked not to be. */
static void embed_respond(gen_req *g, const srv_usage *u) {
    (void)u; /* the body counts the prompt tokens alone */
    srv_app *app = g->app;
    const float **vecs = brisk_calloc((size_t)g->n_choices + 1, sizeof *vecs);
    int dim = g->n_choices ? g->choices[0].n_emb : 0, ok = vecs != NULL;
    for (int i = 0; ok && i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        ok = c->emb && c->n_emb == dim;
        double ss = 0;
        for (int d = 0; ok && d < dim; d++)
            ss += (double)c->emb[d] * c->emb[d];
        if (ok && g->emb_normalize && ss > 0)
            for (int d = 0; d < dim; d++)
                c->emb[d] = (float)(c->emb[d] / sqrt(ss));
        if (ok)
            vecs[i] = c->emb;
    }
    char *json = ok ? srv_api_embeddings_json(vecs, g->n_choices, dim, g->emb_base64,
                                              app->served_name, g->prompt_tokens)
                    : NULL;
    if (json)
        srv_respond(g->http, 200, "application/json", json, strlen(json), NULL);
    else if (ok || !vecs)
        srv_respond_code(g->http, BRISK_ENOMEM, NULL);
    else
        srv_respond_error(g->http, 500, "server_error", NULL, NULL, "an embedding is missing");
    free(json);
    free(vecs);
}

const srv_gen_shape srv_gen_shape_embeddings = {
    .endpoint = "/v1/embeddings",
    .id_prefix = "embd-",
    .id_chars = 29,
    .chat = 0,
    .data = NULL,
    .free_state = NULL,
    /* No stream: the request has no "stream" field. */
    .stream_begin = NULL,
    .stream_chunk = NULL,
    .stream_end = NULL,
    .respond = embed_respond,
    .body = NULL,
    .error = srv_gen_error_http,
};

void srv_gen_embeddings(srv_req *r) {
    srv_app *app = srv_req_app(r);
    if (!app->cfg.embeddings) {
        srv_respond_error(r, 501, "invalid_request_error", NULL, "embeddings_disabled",
                          "this server does not serve embeddings; start it with --embeddings");
        return;
    }
    size_t len;
    const char *body = srv_gen_body(app, r, &len);
    if (!body)
        return;
    if (!sched_engine_can_pool(app->eng)) {
        srv_respond_error(r, 501, "invalid_request_error", NULL, "embeddings_unsupported",
                          "this server's backend gives no hidden states to pool");
        return;
    }
    srv_embed_req er;
    srv_api_error e;
    int rc = srv_api_parse_embeddings(body, len, &app->limits, &er, &e);
    if (srv_gen_accept(app, r, rc, &e, er.model) < 0) {
        srv_embed_req_free(&er);
        return;
    }
    int dim = model_get_config(app->m)->dim;
    if (er.dimensions >= 0 && er.dimensions != dim) {
        srv_respond_error(r, 400, "invalid_request_error", "dimensions", "unsupported_value",
                          "'dimensions' other than the model's %d needs a Matryoshka-trained "
                          "model, which this is not",
                          dim);
        srv_embed_req_free(&er);
        return;
    }
    srv_gen_params p;
    memset(&p, 0, sizeof p);
    p.n = 1;
    p.max_tokens = 1;
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.top_k = -1;
    p.repetition_penalty = 1.0f;
    p.logprobs = -1;
    gen_req *g = srv_gen_new(app, r, &srv_gen_shape_embeddings, &p, er.n_inputs);
    int ok = g != NULL;
    for (int i = 0; ok && i < er.n_inputs; i++) {
        const srv_prompt *in = &er.inputs[i];
        if (in->is_tokens) {
            g->pids[i] = brisk_malloc((size_t)in->n_ids * sizeof(int32_t));
            if ((ok = g->pids[i] != NULL)) {
                memcpy(g->pids[i], in->ids, (size_t)in->n_ids * sizeof(int32_t));
                g->n_pids[i] = in->n_ids;
            }
        } else {
            int flags = TOK_PARSE_SPECIAL | (er.add_special_tokens ? srv_gen_bos_flag(app) : 0);
            ok = (g->pids[i] =
                      srv_gen_tokenize(app, in->text, in->text_len, flags, &g->n_pids[i])) != NULL;
        }
    }
    if (!ok) {
        srv_gen_free(g);
        srv_embed_req_free(&er);
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    g->embed = app->pooling;
    g->emb_base64 = er.base64;
    g->emb_normalize = er.normalize;
    srv_embed_req_free(&er);
    srv_gen_start(app, r, g, &p, 1);
}
