/* srv_app.h - the server application: the state the route handlers share
 * (engine, metrics, chat format, limits) and the glue between the HTTP layer
 * (srv_http.h) and the engine thread (scheduler/engine.h).
 *
 * Everything here runs on the libuv loop thread, except what the engine
 * reads through sched_engine_* calls. */
#ifndef SRV_APP_H
#define SRV_APP_H

#include <stdint.h>
#include <uv.h>

#include "models/chat_template.h"
#include "scheduler/engine.h"
#include "server/api/srv_api.h"
#include "server/api/srv_grammar.h"
#include "server/http/srv_http.h"
#include "server/ops/srv_gpu.h"
#include "server/ops/srv_metrics.h"

typedef struct srv_app_config {
    const char *model_path;
    const char *dummy;     /* --dummy-weights CONFIG instead of a model file */
    const char *tokenizer; /* --tokenizer GGUF for a dummy model */
    const char *host;
    int port;
    const char *served_name;   /* NULL: the model file's base name without .gguf */
    const char *chat_template; /* NULL: from the GGUF metadata */
    int metrics_auth;          /* 1: /metrics needs the API key too */
    double drain_timeout_s;
    srv_gpu_mode gpu_metrics;      /* --gpu-metrics auto|on|off (auto: the zero value) */
    double gpu_metrics_interval_s; /* --gpu-metrics-interval; <= 0: the default */
    const char *audit_log;         /* --audit-log FILE ("-": stdout), NULL: none */
    int audit_content;             /* --audit-log-content: prompts and outputs in it too */
    int audit_flush_ms;            /* --audit-log-flush-ms: buffer written at least this often */
    const char *key_file;          /* --api-key-file: reloaded on SIGHUP and when it changes */
    const char *const *cli_keys;   /* --api-key values (kept in every reloaded key set) */
    int n_cli_keys;
    const char *limits_file;  /* --limits-file (srv_quota.h), or NULL */
    double request_timeout_s; /* --request-timeout: default deadline (0: none) */
    int embeddings;           /* --embeddings: serve /v1/embeddings */
    int pooling;              /* --pooling: SCHED_POOL_*; 0: the model's, else last */
    /* --generation-config: 0 auto (the model's own sampling defaults, a
     * folder's generation_config.json, fill what a request leaves out, as
     * vLLM's auto), 1 vllm (brisk's neutral defaults) */
    int generation_config;
    /* Speculative decoding as given, which cmd_serve turns into engine.spec
     * (cli/cli_spec.c): vLLM's --speculative-config JSON, or llama.cpp's
     * --model-draft, --draft-max and --draft-min (-1: not given). */
    const char *spec_json;
    const char *draft_model;
    int draft_max, draft_min;
    sched_engine_config engine;
    srv_http_config http;
} srv_app_config;

typedef struct gen_req gen_req;

typedef struct srv_app {
    srv_app_config cfg;
    uv_loop_t *loop;
    srv_http *http;
    sched_engine *eng;
    uv_async_t eng_async;
    uv_signal_t sig_term, sig_int;
    uv_signal_t sig_hup;                 /* reloads the audit log, the key file and the limits */
    uv_fs_poll_t poll_keys, poll_limits; /* the same when those files change on disk */
    int poll_keys_on, poll_limits_on;
    struct srv_keys *keys;        /* the key set of the last reload (owned), or NULL */
    struct srv_quota *quota;      /* per-key limits (always made; no rules: no limits) */
    struct srv_usage_acct *usage; /* per-key usage counters for /metrics */
    uv_signal_t sig_fault;        /* SIGUSR2: toggles allocation-failure injection (fault builds) */
    int fault_signal_on;
    uv_timer_t drain_timer;
    srv_metrics *metrics;
    srv_grammar_cache *grammars; /* compiled constraints by their text (NULL: out of memory) */
    srv_gpu *gpu;                /* NULL: no GPU metrics */
    struct srv_audit *audit;     /* NULL without --audit-log */
    char served_name[256];
    int64_t created;
    int ready;    /* engine loaded */
    int draining; /* a signal came: readyz false, no new work */
    int n_signals;
    int exit_code;
    int shutting_down;
    double t_drain_start;
    const model *m;
    const tok_vocab *vocab;
    int max_ctx;
    model_chat_format chat;
    srv_api_limits limits;
    int pooling; /* /v1/embeddings' SCHED_POOL_* (cfg, else the model's, else last) */
    /* the sampling defaults in force (--generation-config auto: the model's;
     * vllm: none, has == 0) */
    model_generation gen_defaults;
    gen_req *live; /* generation requests waiting for engine events */
    int n_live;
} srv_app;

/* Runs the server until it has drained after a signal; returns the exit
 * code (0 after a clean drain, 1 when the model could not be loaded). */
int srv_app_run(const srv_app_config *cfg);

/* srv_gen.c: the generation endpoints and the engine-event pump. */
void srv_gen_completions(srv_req *r);
void srv_gen_chat(srv_req *r);
void srv_gen_embeddings(srv_req *r); /* srv_embed.c: POST /v1/embeddings */

/* Shared by the endpoints (srv_routes.c, srv_embed.c, srv_gen_responses.c):
 * the chat request's prompt ids (malloc'd, *n_ids), with the tools' grammar
 * put into cr->params; NULL once r has been answered; */
int32_t *srv_gen_chat_prompt(srv_app *app, srv_req *r, srv_chat_req *cr, int *n_ids);
/* text tokenized with flags (tokenizer.h), malloc'd; NULL: out of memory; */
int32_t *srv_gen_tokenize(srv_app *app, const char *text, size_t len, int flags, int *n_out);
/* TOK_ADD_BOS when the model adds BOS, else 0; */
int srv_gen_bos_flag(srv_app *app);
/* the body of a POST (borrowed from r, len bytes) once the server can take
 * it - ready, not draining, a JSON Content-Type -; NULL once r has been
 * answered (503, 400); */
const char *srv_gen_body(srv_app *app, srv_req *r, size_t *len);
/* after the parser returned rc: -1 once r has been answered, for a parse
 * failure (with *e) or a model name that is not the served one (404; name
 * NULL: none given), else 0; the caller frees what it parsed either way (a
 * failed parse leaves it empty); */
int srv_gen_accept(srv_app *app, srv_req *r, int rc, const srv_api_error *e, const char *name);
/* answers a parse error (or any error as OpenAI's error body). */
void srv_gen_respond_error(srv_req *r, const srv_api_error *e);
/* srv_routes.c: the small endpoints. */
void srv_route_model(srv_req *r);      /* GET /v1/models/{id} */
void srv_route_version(srv_req *r);    /* GET /version */
void srv_route_tokenize(srv_req *r);   /* POST /tokenize */
void srv_route_detokenize(srv_req *r); /* POST /detokenize */
/* srv_gen_responses.c: POST /v1/responses. */
void srv_route_responses(srv_req *r);
/* srv_gen_anthropic.c: POST /v1/messages and /v1/messages/count_tokens. */
void srv_route_messages(srv_req *r);
void srv_route_count_tokens(srv_req *r);
void srv_gen_on_events(srv_app *app);
/* Writes the audit line of a finished request under /v1/ (the srv_http on_finish
 * hook, app->audit set): its generation state when it had one. */
void srv_gen_audit(srv_app *app, const srv_req *r, int status);
/* Frees every live generation request (shutdown, engine gone). */
void srv_gen_free_all(srv_app *app);

#endif
