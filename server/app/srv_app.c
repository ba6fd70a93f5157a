/* srv_app.c - the server's lifecycle: the route table, the engine thread and
 * its wake-ups, health/readiness, /v1/models, /metrics, signals and the
 * graceful drain. Generation endpoints live in srv_gen.c. */
#include "server/app/srv_app.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "brisk_config.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_cpu.h"
#include "server/api/srv_anthropic.h"
#include "server/ops/srv_audit.h"
#include "server/ops/srv_keys.h"
#include "server/ops/srv_quota.h"
#include "server/ops/srv_usage.h"

/* ---- small routes ------------------------------------------------------ */

static void json_reply(srv_req *r, int status, const char *body) {
    srv_respond(r, status, "application/json", body, strlen(body), NULL);
}

static void h_health(srv_req *r) {
    srv_app *app = srv_req_app(r);
    if (app->ready)
        json_reply(r, 200, "{\"status\":\"ok\"}");
    else
        json_reply(r, 503, "{\"status\":\"loading\"}");
}

static void h_livez(srv_req *r) {
    json_reply(r, 200, "{\"status\":\"alive\"}");
}

static void h_readyz(srv_req *r) {
    srv_app *app = srv_req_app(r);
    if (app->ready && !app->draining)
        json_reply(r, 200, "{\"status\":\"ready\"}");
    else
        json_reply(r, 503,
                   app->draining ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}");
}

static void h_models(srv_req *r) {
    srv_app *app = srv_req_app(r);
    char *json = srv_api_models_json(
        app->served_name, app->created, "brisk", app->ready ? app->max_ctx : 0,
        app->ready ? model_get_file_type(app->m) : NULL, app->ready ? &app->gen_defaults : NULL);
    if (!json) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    json_reply(r, 200, json);
    free(json);
}

static void h_metrics(srv_req *r) {
    srv_app *app = srv_req_app(r);
    srv_metrics_gauges g;
    memset(&g, 0, sizeof g);
    if (app->ready) {
        sched_engine_stats st;
        sched_engine_get_stats(app->eng, &st);
        g.running = st.running;
        g.waiting = st.waiting;
        g.kv_usage = st.kv_usage;
        g.preemptions = st.preemptions;
        g.kv = st.kv;
        g.kv_slots_allocated = st.kv_slots_allocated;
        g.kv_slots_filled = st.kv_slots_filled;
        g.engine_busy_s = st.busy_s;
        g.engine_forward_s = st.forward_s;
        g.engine_steps = st.steps;
        g.engine_batch_tokens = st.batch_tokens;
        g.spec = st.spec.enabled;
        g.spec_positions = st.spec.num_tokens;
        g.spec_drafts = st.spec.drafts;
        g.spec_draft_tokens = st.spec.draft_tokens;
        g.spec_accepted_tokens = st.spec.accepted_tokens;
        _Static_assert(SRV_METRICS_SPEC_MAX_POS == SCHED_SPEC_MAX_TOKENS,
                       "one position series per proposal position");
        memcpy(g.spec_accepted_per_pos, st.spec.per_pos, sizeof g.spec_accepted_per_pos);
        g.kv_dtype = st.kv_dtype;
        g.kv_block_size = st.kv_block_size;
        g.prefix_caching = app->cfg.engine.prefix_caching;
    }
    if (app->audit) {
        srv_audit_stats as;
        srv_audit_get_stats(app->audit, &as);
        g.audit_log = 1;
        g.audit_lines = as.lines;
        g.audit_errors = as.errors;
        g.audit_dropped = as.dropped;
    }
    g.process = srv_proc_sample(&g.proc) == 0;
    size_t len;
    double now = brisk_now();
    char *text = srv_metrics_render(app->metrics, &g, now, &len);
    if (text &&
        srv_usage_render_append(app->usage, srv_metrics_label(app->metrics), &text, &len) < 0) {
        free(text);
        text = NULL;
    }
    if (text && app->gpu && srv_gpu_render_append(app->gpu, now, &text, &len) < 0) {
        free(text);
        text = NULL;
    }
    if (!text) {
        srv_respond_code(r, BRISK_ENOMEM, NULL);
        return;
    }
    srv_respond(r, 200, SRV_METRICS_CONTENT_TYPE, text, len, NULL);
    free(text);
}

/* ---- engine wake-ups ---------------------------------------------------- */

static void shutdown_now(srv_app *app);

static void on_engine(uv_async_t *a) {
    srv_app *app = a->data;
    if (!app->ready && !app->shutting_down) {
        char err[256];
        sched_state s = sched_engine_state(app->eng, err, sizeof err);
        if (s == SCHED_FAILED) {
            BRISK_ERROR("cannot load the model: %s", err);
            app->exit_code = 1;
            shutdown_now(app);
            return;
        }
        if (s == SCHED_READY) {
            app->m = sched_engine_model(app->eng);
            app->vocab = model_get_vocab(app->m);
            app->max_ctx = sched_engine_max_ctx(app->eng);
            if (app->cfg.generation_config == 0)
                app->gen_defaults = *model_get_generation(app->m);
            int mp = model_get_config(app->m)->pooling;
            app->pooling = app->cfg.pooling ? app->cfg.pooling
                           : mp == 1        ? SCHED_POOL_MEAN
                                            : SCHED_POOL_LAST;
            app->limits = srv_api_limits_default(tok_n_vocab(app->vocab));
            /* Room for every request that could be served (max_prompts prompts of
             * token ids, each shorter than the context) and 16k other values; a
             * body with more is refused before cJSON builds its tree. */
            app->limits.max_json_values = app->limits.max_prompts * app->max_ctx + 16384;
            if (app->cfg.chat_template) {
                model_chat_kind k;
                model_chat_kind_parse(app->cfg.chat_template, &k); /* checked by the CLI */
                model_chat_format_default(k, &app->chat);
            } else if (model_chat_template(app->m)) {
                model_chat_format_detect(model_chat_template(app->m), &app->chat);
            } else {
                /* No template in the file (base models such as Gemma 3 270M):
                 * the family's own (its architecture row's), as llama.cpp
                 * falls back by architecture. */
                const model_arch_desc *arch = model_get_config(app->m)->arch;
                model_chat_format_default(arch->chat, &app->chat);
                if (arch->chat != MODEL_CHAT_NONE)
                    BRISK_INFO("the model file has no chat template: using the %s template of "
                               "architecture %s",
                               model_chat_kind_name(arch->chat), arch->name);
            }
            BRISK_INFO("serving '%s' (context %d, chat template %s)", app->served_name,
                       app->max_ctx, model_chat_kind_name(app->chat.kind));
            app->ready = 1;
            /* Injection starts only now: loading is not the request path. */
            if (brisk_fault_configured()) {
                brisk_fault_arm(1);
                BRISK_WARN("fault injection armed: BRISK_FAULT_ALLOC=%s", brisk_fault_spec());
            }
        }
    }
    if (app->ready)
        srv_gen_on_events(app);
}

/* ---- shutdown ----------------------------------------------------------- */

static void close_cb(uv_handle_t *h) {
    (void)h;
}

static void log_fault_counts(const char *what) {
    BRISK_WARN("fault injection %s: %lu of %lu allocations failed", what, brisk_fault_injected(),
               brisk_fault_seen());
}

static void on_fault_signal(uv_signal_t *s, int signum) {
    (void)signum;
    srv_app *app = s->data;
    if (!app->ready || !brisk_fault_configured())
        return;
    if (brisk_fault_armed()) {
        brisk_fault_arm(0);
        log_fault_counts("disarmed");
    } else {
        brisk_fault_arm(1);
        BRISK_WARN("fault injection armed: BRISK_FAULT_ALLOC=%s", brisk_fault_spec());
    }
}

static void shutdown_now(srv_app *app) {
    if (app->shutting_down)
        return;
    app->shutting_down = 1;
    if (brisk_fault_armed()) { /* teardown is not the request path */
        brisk_fault_arm(0);
        log_fault_counts("disarmed at exit");
    }
    /* Aborts every request still open (their abort callbacks cancel engine
     * work), then the engine thread stops; requests waiting on engine events
     * are freed without them. */
    if (app->http) {
        srv_http_free(app->http);
        app->http = NULL;
    }
    if (app->eng) {
        sched_engine_free(app->eng);
        app->eng = NULL;
    }
    srv_gen_free_all(app);
    /* After every request has had its line: flushed and closed here. */
    srv_audit_close(app->audit);
    app->audit = NULL;
    uv_close((uv_handle_t *)&app->eng_async, close_cb);
    uv_close((uv_handle_t *)&app->sig_term, close_cb);
    uv_close((uv_handle_t *)&app->sig_int, close_cb);
    uv_close((uv_handle_t *)&app->sig_hup, close_cb);
    if (app->poll_keys_on)
        uv_close((uv_handle_t *)&app->poll_keys, close_cb);
    if (app->poll_limits_on)
        uv_close((uv_handle_t *)&app->poll_limits, close_cb);
    uv_close((uv_handle_t *)&app->drain_timer, close_cb);
    if (app->fault_signal_on)
        uv_close((uv_handle_t *)&app->sig_fault, close_cb);
}

static void on_drain_tick(uv_timer_t *t) {
    srv_app *app = t->data;
    double waited = brisk_now() - app->t_drain_start;
    int active = app->http ? srv_http_n_active(app->http) : 0;
    if (app->n_live == 0 && active == 0) {
        BRISK_INFO("drained; exiting");
        shutdown_now(app);
    } else if (waited >= app->cfg.drain_timeout_s) {
        BRISK_WARN("drain timeout (%.0f s) with %d requests in flight; exiting",
                   app->cfg.drain_timeout_s, active);
        shutdown_now(app);
    }
}

static void on_signal(uv_signal_t *s, int signum) {
    srv_app *app = s->data;
    app->n_signals++;
    if (app->n_signals > 1 || !app->ready) {
        BRISK_WARN("signal %d %s: exiting now", signum, app->ready ? "again" : "while loading");
        shutdown_now(app);
        return;
    }
    BRISK_INFO("signal %d: draining (readiness off, no new connections, up to %.0f s)", signum,
               app->cfg.drain_timeout_s);
    app->draining = 1;
    app->t_drain_start = brisk_now();
    srv_http_stop_accepting(app->http);
    uv_timer_start(&app->drain_timer, on_drain_tick, 0, 50);
}

/* ---- reloads: SIGHUP, and the key and limits files changing on disk ---------- */

/* A new key set from --api-key and the key file; swapped in only whole. */
static void reload_keys(srv_app *app) {
    if (!app->cfg.key_file || !app->http)
        return;
    char err[256];
    srv_keys *k = srv_keys_create();
    int rc = k ? 0 : BRISK_ENOMEM;
    for (int i = 0; rc == 0 && i < app->cfg.n_cli_keys; i++)
        rc = srv_keys_add(k, NULL, app->cfg.cli_keys[i], strlen(app->cfg.cli_keys[i]), err,
                          sizeof err);
    if (rc == 0)
        rc = srv_keys_load_file(k, app->cfg.key_file, err, sizeof err);
    if (rc < 0) {
        BRISK_ERROR("key file not reloaded (the old keys stay): %s",
                    rc == BRISK_ENOMEM ? "out of memory" : err);
        srv_keys_free(k);
        return;
    }
    srv_http_set_keys(app->http, k); /* requests in flight hold copies of their ids */
    srv_keys_free(app->keys);
    app->keys = k;
    BRISK_INFO("key file reloaded: %d keys", srv_keys_count(k));
}

static int reload_limits(srv_app *app) {
    if (!app->cfg.limits_file)
        return 0;
    char err[256];
    int rc = srv_quota_load_file(app->quota, app->cfg.limits_file, brisk_now(), err, sizeof err);
    if (rc < 0)
        BRISK_ERROR("%s%s", app->ready ? "limits not reloaded (the old ones stay): " : "", err);
    else
        BRISK_INFO("limits loaded from %s", app->cfg.limits_file);
    return rc;
}

static void on_hup(uv_signal_t *s, int signum) {
    (void)signum;
    srv_app *app = s->data;
    if (app->audit && srv_audit_reopen(app->audit) == 0)
        BRISK_INFO("audit log reopened");
    reload_keys(app);
    reload_limits(app);
}

/* Kubernetes updates a mounted Secret or ConfigMap by swapping a symlink,
 * without a signal: the files are polled (stat, every 2 s). */
static void on_file_change(uv_fs_poll_t *h, int status, const uv_stat_t *prev,
                           const uv_stat_t *curr) {
    (void)prev;
    (void)curr;
    srv_app *app = h->data;
    if (status < 0)
        return; /* gone for now: the old settings stay */
    if (h == &app->poll_keys)
        reload_keys(app);
    else
        reload_limits(app);
}

static void reload_start(srv_app *app) {
    uv_signal_init(app->loop, &app->sig_hup);
    app->sig_hup.data = app;
    uv_signal_start(&app->sig_hup, on_hup, SIGHUP);
    const char *paths[2] = {app->cfg.key_file, app->cfg.limits_file};
    uv_fs_poll_t *polls[2] = {&app->poll_keys, &app->poll_limits};
    int *on[2] = {&app->poll_keys_on, &app->poll_limits_on};
    for (int i = 0; i < 2; i++) {
        if (!paths[i])
            continue;
        uv_fs_poll_init(app->loop, polls[i]);
        polls[i]->data = app;
        if (uv_fs_poll_start(polls[i], on_file_change, paths[i], 2000) == 0)
            *on[i] = 1;
        else
            uv_close((uv_handle_t *)polls[i], NULL);
    }
}

/* A limited key's responses all carry its x-ratelimit-* headers (the
 * generation endpoints replace them with their admission's). */
static void on_http_dispatch(void *user, srv_req *r) {
    srv_app *app = user;
    const char *id = srv_req_key_id(r);
    if (!id || !app->quota)
        return;
    srv_quota_verdict v;
    srv_quota_peek(app->quota, id, brisk_now(), &v);
    char h[640];
    srv_quota_headers(&v, h, sizeof h);
    if (h[0])
        srv_req_set_headers(r, h); /* out of memory: the response goes without them */
}

static void on_http_finish(void *user, const srv_req *r, int status) {
    srv_app *app = user;
    if (app->metrics)
        srv_metrics_observe_http(app->metrics, srv_metrics_route_of(srv_req_path(r)), status);
    if (app->audit && strncmp(srv_req_path(r), "/v1/", 4) == 0)
        srv_gen_audit(app, r, status);
}

/* ---- run ------------------------------------------------------------------- */

/* The served name from --model: a GGUF's file name without .gguf, or a
 * Hugging Face folder's name (given as DIR, DIR/ or DIR/config.json). */
static const char *base_name(const char *path, char *out, size_t cap) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    if (n >= 11 && strcmp(p + n - 11, "config.json") == 0 && (n == 11 || p[n - 12] == '/')) {
        n = n > 11 ? n - 12 : 0;
        p[n] = '\0';
        while (n > 1 && p[n - 1] == '/')
            p[--n] = '\0';
    }
    const char *b = strrchr(p, '/');
    b = b && b[1] ? b + 1 : p;
    snprintf(out, cap, "%s", b[0] && strcmp(b, ".") ? b : "model");
    n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".gguf") == 0)
        out[n - 5] = '\0';
    return out;
}

int srv_app_run(const srv_app_config *cfg) {
    srv_app *app = brisk_calloc(1, sizeof *app);
    if (!app)
        return 1;
    app->cfg = *cfg;
    app->created = (int64_t)time(NULL);
    if (cfg->served_name)
        snprintf(app->served_name, sizeof app->served_name, "%s", cfg->served_name);
    else if (cfg->dummy)
        snprintf(app->served_name, sizeof app->served_name, "%s", cfg->dummy);
    else
        base_name(cfg->model_path, app->served_name, sizeof app->served_name);
    app->loop = uv_default_loop();
    srv_metrics_config mc = srv_metrics_config_default();
    mc.model_name = app->served_name;
    mc.max_model_len = cfg->engine.max_ctx > 0 ? cfg->engine.max_ctx : 8192;
    char backends[256];
    kern_cpu_describe(backends, sizeof backends);
    mc.version = BRISK_VERSION;
    mc.commit = BRISK_GIT_COMMIT;
    mc.backends = backends;
    app->metrics = srv_metrics_create(&mc, brisk_now());
    app->quota = srv_quota_create();
    app->usage = srv_usage_create();
    app->grammars = srv_grammar_cache_create(32);

    static const srv_route routes[] = {
        {"POST", "/v1/completions", srv_gen_completions, SRV_ROUTE_AUTH},
        {"POST", "/v1/chat/completions", srv_gen_chat, SRV_ROUTE_AUTH},
        {"GET", "/v1/models", h_models, SRV_ROUTE_AUTH},
        {"GET", "/v1/models/*", srv_route_model, SRV_ROUTE_AUTH},
        {"POST", "/v1/responses", srv_route_responses, SRV_ROUTE_AUTH},
        /* Anthropic's Messages API answers its errors in its own shape. */
        {"POST", "/v1/messages", srv_route_messages, SRV_ROUTE_AUTH | SRV_ROUTE_ERROR_BODY},
        {"POST", "/v1/messages/count_tokens", srv_route_count_tokens,
         SRV_ROUTE_AUTH | SRV_ROUTE_ERROR_BODY},
        {"POST", "/v1/embeddings", srv_gen_embeddings, SRV_ROUTE_AUTH},
        {"POST", "/tokenize", srv_route_tokenize, SRV_ROUTE_AUTH},
        {"POST", "/detokenize", srv_route_detokenize, SRV_ROUTE_AUTH},
        {"GET", "/version", srv_route_version, 0},
        {"GET", "/health", h_health, 0},
        {"GET", "/livez", h_livez, 0},
        {"GET", "/readyz", h_readyz, 0},
        {"GET", "/metrics", h_metrics, 0},
    };
    srv_route table[sizeof routes / sizeof routes[0]];
    memcpy(table, routes, sizeof routes);
    int n_routes = (int)(sizeof routes / sizeof routes[0]);
    /* --metrics-auth: the /metrics route needs the key too, wherever it sits. */
    for (int i = 0; cfg->metrics_auth && i < n_routes; i++)
        if (h_metrics == table[i].handler)
            table[i].flags = SRV_ROUTE_AUTH;

    srv_http_config hc = cfg->http;
    hc.on_finish = on_http_finish;
    hc.on_dispatch = on_http_dispatch;
    hc.error_body = srv_anthropic_error_json;
    char err[256];
    int rc = 1;
    if (cfg->audit_log) {
        app->audit =
            srv_audit_open(app->loop, cfg->audit_log, cfg->audit_flush_ms, err, sizeof err);
        if (!app->audit) {
            BRISK_ERROR("%s", err);
            goto out;
        }
    }
    if (!app->quota || !app->usage || reload_limits(app) < 0) {
        if (!app->quota || !app->usage)
            BRISK_ERROR("out of memory");
        goto out;
    }
    app->http = srv_http_create(app->loop, &hc, table, n_routes, app, err, sizeof err);
    if (!app->http || !app->metrics) {
        BRISK_ERROR("%s", app->http ? "out of memory" : err);
        goto out;
    }
    srv_gpu_config gc = {cfg->gpu_metrics,
                         cfg->gpu_metrics_interval_s > 0 ? cfg->gpu_metrics_interval_s
                                                         : SRV_GPU_DEFAULT_INTERVAL_S,
                         NULL, app->served_name};
    if (srv_gpu_create(&gc, &app->gpu, err, sizeof err) < 0) {
        BRISK_ERROR("%s", err);
        goto out;
    }
    if (srv_http_listen(app->http, cfg->host, cfg->port, err, sizeof err) < 0) {
        BRISK_ERROR("%s", err);
        goto out;
    }
    BRISK_INFO("listening on http://%s%s%s:%d", strchr(cfg->host, ':') ? "[" : "", cfg->host,
               strchr(cfg->host, ':') ? "]" : "", srv_http_port(app->http));
    uv_async_init(app->loop, &app->eng_async, on_engine);
    app->eng_async.data = app;
    uv_signal_init(app->loop, &app->sig_term);
    uv_signal_init(app->loop, &app->sig_int);
    app->sig_term.data = app->sig_int.data = app;
    uv_signal_start(&app->sig_term, on_signal, SIGTERM);
    uv_signal_start(&app->sig_int, on_signal, SIGINT);
    reload_start(app);
    if (brisk_fault_compiled()) {
        uv_signal_init(app->loop, &app->sig_fault);
        app->sig_fault.data = app;
        uv_signal_start(&app->sig_fault, on_fault_signal, SIGUSR2);
        app->fault_signal_on = 1;
    }
    uv_timer_init(app->loop, &app->drain_timer);
    app->drain_timer.data = app;
    sched_engine_config ec = cfg->engine;
    ec.model_path = cfg->model_path;
    ec.dummy = cfg->dummy;
    ec.tokenizer = cfg->tokenizer;
    if (sched_engine_create(&ec, &app->eng_async, &app->eng, err, sizeof err) < 0) {
        BRISK_ERROR("%s", err);
        app->exit_code = 1;
        shutdown_now(app);
    }
    uv_run(app->loop, UV_RUN_DEFAULT);
    rc = app->exit_code;
out:
    if (app->http || app->audit) { /* listen failed: close what was opened */
        srv_http_free(app->http);
        srv_audit_close(app->audit);
        app->audit = NULL;
        uv_run(app->loop, UV_RUN_DEFAULT);
    }
    srv_gpu_free(app->gpu);
    srv_keys_free(app->keys);
    srv_quota_free(app->quota);
    srv_usage_free(app->usage);
    srv_metrics_free(app->metrics);
    srv_grammar_cache_free(app->grammars);
    uv_loop_close(app->loop);
    free(app);
    return rc;
}
