/* cmd_serve.c - `brisk serve`: parses the server's options and runs it
 * (server/app/srv_app.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "common/brisk_log.h"
#include "server/app/srv_app.h"
#include "server/ops/srv_keys.h"

/* The options (cli_opts.c) onto the server's configuration: only what was
 * given overrides the defaults of srv_app, the engine and the HTTP layer. */
static int serve_config(const cli_vals *v, srv_app_config *c, srv_keys *keys) {
    char kerr[256];
#define GIVEN(id) (v->given[id])
    if (GIVEN(O_MODEL))
        c->model_path = v->s[O_MODEL];
    if (GIVEN(O_DUMMY))
        c->dummy = v->s[O_DUMMY];
    if (GIVEN(O_TOKENIZER))
        c->tokenizer = v->s[O_TOKENIZER];
    if (GIVEN(O_HOST))
        c->host = v->s[O_HOST];
    if (GIVEN(O_PORT))
        c->port = (int)v->i[O_PORT];
    if (GIVEN(O_SERVED_NAME))
        c->served_name = v->s[O_SERVED_NAME];
    if (GIVEN(O_WEIGHTS))
        model_weights_fmt_parse(v->s[O_WEIGHTS], &c->engine.weights);
    if (GIVEN(O_THREADS))
        c->engine.n_threads = (int)v->i[O_THREADS];
    if (GIVEN(O_CTX))
        c->engine.max_ctx = (int)v->i[O_CTX];
    if (GIVEN(O_MAX_SEQS))
        c->engine.max_seqs = (int)v->i[O_MAX_SEQS];
    if (GIVEN(O_MAX_BATCH))
        c->engine.max_batch_tokens = (int)v->i[O_MAX_BATCH];
    if (GIVEN(O_KV_BYTES))
        c->engine.kv_cache_bytes = v->i[O_KV_BYTES];
    if (GIVEN(O_BLOCK_SIZE))
        c->engine.block_size = (int)v->i[O_BLOCK_SIZE];
    if (GIVEN(O_ENABLE_PREFIX))
        c->engine.prefix_caching = 1;
    if (GIVEN(O_NO_PREFIX))
        c->engine.prefix_caching = 0;
    if (GIVEN(O_NO_WINDOW_RELEASE))
        c->engine.no_window_release = 1;
    if (GIVEN(O_KV_DTYPE))
        c->engine.kv_f16 = !strcmp(v->s[O_KV_DTYPE], "f16");
    if (GIVEN(O_DEVICE))
        model_device_parse(v->s[O_DEVICE], &c->engine.device);
    if (GIVEN(O_GPU_MEM))
        c->engine.gpu_memory_utilization = v->f[O_GPU_MEM];
    if (GIVEN(O_NO_GRAPHS))
        c->engine.cuda_graphs = 0;
    if (GIVEN(O_MAX_QUEUED))
        c->engine.max_waiting = (int)v->i[O_MAX_QUEUED];
    if (GIVEN(O_MAX_QUEUED_TOKENS))
        c->engine.max_waiting_tokens = (long)v->i[O_MAX_QUEUED_TOKENS];
    if (GIVEN(O_CHAT_TEMPLATE))
        c->chat_template = v->s[O_CHAT_TEMPLATE];
    if (GIVEN(O_SCHED_POLICY))
        c->engine.sched_policy =
            !strcmp(v->s[O_SCHED_POLICY], "priority") ? SCHED_POLICY_PRIORITY : SCHED_POLICY_FCFS;
    if (GIVEN(O_PRIORITY_AGING))
        c->engine.priority_aging_s = v->f[O_PRIORITY_AGING];
    if (GIVEN(O_REQUEST_TIMEOUT))
        c->request_timeout_s = v->f[O_REQUEST_TIMEOUT];
    if (GIVEN(O_EMBEDDINGS))
        c->embeddings = 1;
    if (GIVEN(O_POOLING))
        c->pooling = !strcmp(v->s[O_POOLING], "mean") ? SCHED_POOL_MEAN : SCHED_POOL_LAST;
    for (int k = 0; k < v->n_keys; k++)
        if (srv_keys_add(keys, NULL, v->keys[k], strlen(v->keys[k]), kerr, sizeof kerr) < 0) {
            cli_error("--api-key: %s", kerr);
            return 2;
        }
    if (GIVEN(O_API_KEY_FILE) &&
        srv_keys_load_file(keys, v->s[O_API_KEY_FILE], kerr, sizeof kerr) < 0) {
        cli_error("--api-key-file: %s", kerr);
        return 1;
    }
    if (GIVEN(O_API_KEY_FILE))
        c->key_file = v->s[O_API_KEY_FILE];
    c->cli_keys = (const char *const *)v->keys;
    c->n_cli_keys = v->n_keys;
    if (GIVEN(O_LIMITS_FILE))
        c->limits_file = v->s[O_LIMITS_FILE];
    if (GIVEN(O_AUDIT_LOG))
        c->audit_log = v->s[O_AUDIT_LOG];
    if (GIVEN(O_AUDIT_CONTENT))
        c->audit_content = 1;
    if (GIVEN(O_AUDIT_FLUSH))
        c->audit_flush_ms = (int)v->i[O_AUDIT_FLUSH];
    if (GIVEN(O_METRICS_AUTH))
        c->metrics_auth = 1;
    if (GIVEN(O_ALLOWED_ORIGINS))
        c->http.allowed_origins = v->s[O_ALLOWED_ORIGINS];
    if (GIVEN(O_DRAIN))
        c->drain_timeout_s = v->f[O_DRAIN];
    if (GIVEN(O_LOG_FORMAT))
        c->http.log_format = !strcmp(v->s[O_LOG_FORMAT], "json") ? SRV_LOG_JSON : SRV_LOG_TEXT;
    if (GIVEN(O_GPU_METRICS))
        srv_gpu_mode_parse(v->s[O_GPU_METRICS], &c->gpu_metrics);
    if (GIVEN(O_GPU_METRICS_INTERVAL))
        c->gpu_metrics_interval_s = v->f[O_GPU_METRICS_INTERVAL];
    if (GIVEN(O_MAX_BODY))
        c->http.max_body_bytes = (size_t)v->i[O_MAX_BODY];
    if (GIVEN(O_MAX_HEADER_BYTES))
        c->http.max_header_bytes = (size_t)v->i[O_MAX_HEADER_BYTES];
    if (GIVEN(O_MAX_HEADERS))
        c->http.max_headers = (int)v->i[O_MAX_HEADERS];
    if (GIVEN(O_MAX_CONN))
        c->http.max_connections = (int)v->i[O_MAX_CONN];
    if (GIVEN(O_HEAD_TO))
        c->http.head_timeout_ms = (int)v->i[O_HEAD_TO];
    if (GIVEN(O_BODY_TO))
        c->http.body_idle_timeout_ms = (int)v->i[O_BODY_TO];
    if (GIVEN(O_BODY_TOTAL_TO))
        c->http.body_total_timeout_ms = (int)v->i[O_BODY_TOTAL_TO];
    if (GIVEN(O_KEEPALIVE))
        c->http.keepalive_idle_ms = (int)v->i[O_KEEPALIVE];
    if (GIVEN(O_MAX_REQ_PER_CONN))
        c->http.max_requests_per_conn = (int)v->i[O_MAX_REQ_PER_CONN];
    if (GIVEN(O_MAX_WQ))
        c->http.max_write_queue_bytes = (size_t)v->i[O_MAX_WQ];
#undef GIVEN
    return 0;
}

int cmd_serve(int argc, char **argv) {
    srv_app_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = 8080;
    c.drain_timeout_s = 30;
    c.audit_flush_ms = 1000;
    c.engine = sched_engine_config_default();
    c.http = srv_http_config_default();
    cli_vals v;
    int prc = cli_opts_parse(CLI_SERVE, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    srv_keys *keys = srv_keys_create();
    if (!keys) {
        cli_error("serve: out of memory");
        return 1;
    }
    int rc = serve_config(&v, &c, keys);
    if (rc)
        goto done;
    rc = 2;
    if (cli_check_dummy(c.dummy, c.tokenizer, c.model_path) < 0)
        goto done;
    if (c.dummy)
        c.model_path = c.dummy; /* the engine's name for it; nothing is opened */
    if (!c.model_path)
        c.model_path = cli_default_model();
    if (!c.model_path) {
        cli_error("serve: no model: pass --model PATH or run scripts/fetch-model.sh");
        goto done;
    }
    if (c.engine.max_batch_tokens < c.engine.max_seqs) {
        cli_error("--max-num-batched-tokens (%d) must be >= --max-num-seqs (%d)",
                  c.engine.max_batch_tokens, c.engine.max_seqs);
        goto done;
    }
    if (c.audit_content && !c.audit_log) {
        cli_error("--audit-log-content needs --audit-log FILE");
        goto done;
    }
    c.http.api_keys = srv_keys_count(keys) > 0 ? keys : NULL;
    rc = srv_app_run(&c);
done:
    srv_keys_free(keys);
    return rc;
}
