/* cmd_serve.c - `brisk serve`: parses the server's options and runs it
 * (server/srv_app.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_log.h"
#include "server/cli.h"
#include "server/srv_app.h"
#include "server/srv_keys.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: brisk serve [--model PATH] [--host 127.0.0.1] [--port 8080] [options]\n"
            "model and engine:\n"
            "  --model PATH                 GGUF file (default: $BRISK_MODEL or the fetched SmolLM2)\n"
            "  --dummy-weights CONFIG       random weights in a real shape instead of --model:\n"
            "                               llama-3-8b llama-3.2-1b qwen2.5-7b smollm2-135m stories110m\n"
            "  --tokenizer GGUF             vocabulary for --dummy-weights (default: synthetic)\n"
            "  --served-model-name NAME     name in the API (default: the file name without .gguf)\n"
            "  --weights auto|f32|f16|int8  compute format of the weights (auto; on CUDA: f16 or int8,\n"
            "                               auto = int8 for a quantised file, f16 otherwise)\n"
            "  --device cpu|cuda|auto       where the model runs (cpu; auto: CUDA when a GPU is\n"
            "                               present and the weights fit, logged at start)\n"
            "  --gpu-memory-utilization F   CUDA: fraction of GPU memory for weights, scratch and the\n"
            "                               KV cache, which gets what is left (0.9)\n"
            "  --no-cuda-graphs             CUDA: run decode steps kernel by kernel (for debugging)\n"
            "  --threads N                  compute threads (all cores)\n"
            "  --ctx N                      positions per sequence, prompt + output (min(train, 4096))\n"
            "  --max-num-seqs N             sequences running together (32)\n"
            "  --max-num-batched-tokens N   tokens per engine step (512)\n"
            "  --kv-cache-bytes N[K|M|G]    KV cache pool (min(1G, max-num-seqs full contexts))\n"
            "  --block-size N               positions per KV block (16)\n"
            "  --no-prefix-caching          do not reuse KV blocks of earlier prompts\n"
            "  --kv-cache-dtype f16|f32     KV cache element type (f16; f32 doubles its memory)\n"
            "  --max-queued-requests N      waiting sequences before 429 (1024)\n"
            "  --max-queued-tokens N        waiting prompt tokens before 429 (4194304)\n"
            "  --chat-template NAME         chatml|llama2|llama3|mistral|zephyr|gemma|phi3 (from GGUF)\n"
            "security and operations:\n"
            "  --api-key KEY | --api-key-file F   Bearer key for /v1/* (and /metrics with --metrics-auth);\n"
            "                               the file holds one key a line: KEY or ID KEY (# comments)\n"
            "  --metrics-auth               /metrics needs the key too\n"
            "  --drain-timeout S            seconds to finish in-flight requests after SIGTERM (30)\n"
            "  --log-format text|json       access log format (text)\n"
            "  --gpu-metrics auto|on|off    GPU memory/utilisation on /metrics via NVML (auto: when\n"
            "                               libnvidia-ml loads and sees a GPU; on: required)\n"
            "  --gpu-metrics-interval S     seconds between NVML samples (5)\n"
            "  --audit-log FILE             one JSON line per /v1/* request (\"-\": stdout; SIGHUP reopens)\n"
            "  --audit-log-content          the audit log also holds prompts and completions\n"
            "  --audit-log-flush-ms N       write the audit log's buffer at least every N ms (1000)\n"
            "HTTP limits:\n"
            "  --max-body-bytes N (4 MiB)  --max-header-bytes N (32 KiB)  --max-headers N (100)\n"
            "  --max-connections N (1024)  --head-timeout-ms N (10000)  --body-timeout-ms N (5000)\n"
            "  --body-total-timeout-ms N (60000)  --keepalive-timeout-ms N (75000)\n"
            "  --max-requests-per-conn N (1000)  --max-write-queue-bytes N (8 MiB)\n"
            "  (head and body-total timeouts bound the whole head / body; body-timeout is the\n"
            "  longest gap between body bytes; a client with more unsent stream bytes than\n"
            "  max-write-queue-bytes is disconnected)\n");
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
    srv_keys *keys = srv_keys_create();
    char kerr[256];
    int rc = 2;
    if (!keys) {
        cli_error("serve: out of memory");
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        long iv;
        double fv;
#define VAL()                                                                                      \
    if (!(v = cli_value(argc, argv, &i))) goto done
#define INT(lo, hi)                                                                                \
    VAL();                                                                                         \
    if (cli_parse_int(a, v, lo, hi, &iv)) goto done
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            VAL();
            c.model_path = v;
        } else if (!strcmp(a, "--dummy-weights")) {
            VAL();
            c.dummy = v;
        } else if (!strcmp(a, "--tokenizer")) {
            VAL();
            c.tokenizer = v;
        } else if (!strcmp(a, "--host")) {
            VAL();
            c.host = v;
        } else if (!strcmp(a, "--port")) {
            INT(0, 65535);
            c.port = (int)iv;
        } else if (!strcmp(a, "--served-model-name")) {
            VAL();
            if (!v[0] || strlen(v) > 200) {
                cli_error("--served-model-name: 1 to 200 characters");
                goto done;
            }
            c.served_name = v;
        } else if (!strcmp(a, "--weights")) {
            VAL();
            if (model_weights_fmt_parse(v, &c.engine.weights) < 0) {
                cli_error("--weights: '%s' is not one of auto, f32, f16, int8", v);
                goto done;
            }
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            INT(1, 1024);
            c.engine.n_threads = (int)iv;
        } else if (!strcmp(a, "--ctx")) {
            INT(16, 1 << 20);
            c.engine.max_ctx = (int)iv;
        } else if (!strcmp(a, "--max-num-seqs") || !strcmp(a, "--parallel")) {
            INT(1, 4096);
            c.engine.max_seqs = (int)iv;
        } else if (!strcmp(a, "--max-num-batched-tokens")) {
            INT(1, 1 << 20);
            c.engine.max_batch_tokens = (int)iv;
        } else if (!strcmp(a, "--kv-cache-bytes")) {
            VAL();
            long long bytes;
            if (cli_parse_bytes(a, v, 1, 1LL << 50, &bytes)) goto done;
            c.engine.kv_cache_bytes = bytes;
        } else if (!strcmp(a, "--block-size")) {
            INT(1, 1024);
            c.engine.block_size = (int)iv;
        } else if (!strcmp(a, "--no-prefix-caching")) {
            c.engine.prefix_caching = 0;
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            VAL();
            if (!strcmp(v, "f16")) c.engine.kv_f16 = 1;
            else if (!strcmp(v, "f32")) c.engine.kv_f16 = 0;
            else {
                cli_error("--kv-cache-dtype: '%s' is not one of f32, f16", v);
                goto done;
            }
        } else if (!strcmp(a, "--device")) {
            VAL();
            if (model_device_parse(v, &c.engine.device) < 0) {
                cli_error("--device: '%s' is not one of cpu, cuda, auto", v);
                goto done;
            }
        } else if (!strcmp(a, "--gpu-memory-utilization")) {
            VAL();
            if (cli_parse_float(a, v, 0.05, 1.0, &c.engine.gpu_memory_utilization) < 0) goto done;
        } else if (!strcmp(a, "--no-cuda-graphs")) {
            c.engine.cuda_graphs = 0;
        } else if (!strcmp(a, "--enable-prefix-caching")) {
            c.engine.prefix_caching = 1;
        } else if (!strcmp(a, "--max-queued-requests")) {
            INT(0, 1 << 24);
            c.engine.max_waiting = (int)iv;
        } else if (!strcmp(a, "--max-queued-tokens")) {
            INT(1, 1L << 40);
            c.engine.max_waiting_tokens = iv;
        } else if (!strcmp(a, "--chat-template")) {
            VAL();
            model_chat_kind k;
            if (model_chat_kind_parse(v, &k) < 0) {
                cli_error("--chat-template: '%s' is not one of chatml, llama2, llama3, mistral, zephyr, "
                          "gemma, phi3",
                          v);
                goto done;
            }
            c.chat_template = v;
        } else if (!strcmp(a, "--api-key")) {
            VAL();
            if (srv_keys_add(keys, NULL, v, strlen(v), kerr, sizeof kerr) < 0) {
                cli_error("--api-key: %s", kerr);
                goto done;
            }
        } else if (!strcmp(a, "--api-key-file")) {
            VAL();
            if (srv_keys_load_file(keys, v, kerr, sizeof kerr) < 0) {
                cli_error("--api-key-file: %s", kerr);
                rc = 1;
                goto done;
            }
        } else if (!strcmp(a, "--audit-log")) {
            VAL();
            if (!v[0]) {
                cli_error("--audit-log: a file name, or - for stdout");
                goto done;
            }
            c.audit_log = v;
        } else if (!strcmp(a, "--audit-log-content")) {
            c.audit_content = 1;
        } else if (!strcmp(a, "--audit-log-flush-ms")) {
            INT(1, 1000);
            c.audit_flush_ms = (int)iv;
        } else if (!strcmp(a, "--metrics-auth")) {
            c.metrics_auth = 1;
        } else if (!strcmp(a, "--drain-timeout")) {
            VAL();
            if (cli_parse_float(a, v, 0, 86400, &fv)) goto done;
            c.drain_timeout_s = fv;
        } else if (!strcmp(a, "--log-format")) {
            VAL();
            if (!strcmp(v, "text")) c.http.log_format = SRV_LOG_TEXT;
            else if (!strcmp(v, "json")) c.http.log_format = SRV_LOG_JSON;
            else {
                cli_error("--log-format: '%s' is not text or json", v);
                goto done;
            }
        } else if (!strcmp(a, "--gpu-metrics")) {
            VAL();
            if (srv_gpu_mode_parse(v, &c.gpu_metrics) < 0) {
                cli_error("--gpu-metrics: '%s' is not one of auto, on, off", v);
                goto done;
            }
        } else if (!strcmp(a, "--gpu-metrics-interval")) {
            VAL();
            if (cli_parse_float(a, v, 0.05, 3600, &fv)) goto done;
            c.gpu_metrics_interval_s = fv;
        } else if (!strcmp(a, "--max-body-bytes")) {
            INT(1, 1L << 32);
            c.http.max_body_bytes = (size_t)iv;
        } else if (!strcmp(a, "--max-header-bytes")) {
            INT(256, 1 << 24);
            c.http.max_header_bytes = (size_t)iv;
        } else if (!strcmp(a, "--max-headers")) {
            INT(1, 10000);
            c.http.max_headers = (int)iv;
        } else if (!strcmp(a, "--max-connections")) {
            INT(1, 1 << 20);
            c.http.max_connections = (int)iv;
        } else if (!strcmp(a, "--head-timeout-ms")) {
            INT(1, 3600000);
            c.http.head_timeout_ms = (int)iv;
        } else if (!strcmp(a, "--body-timeout-ms")) {
            INT(1, 3600000);
            c.http.body_idle_timeout_ms = (int)iv;
        } else if (!strcmp(a, "--body-total-timeout-ms")) {
            INT(1, 3600000);
            c.http.body_total_timeout_ms = (int)iv;
        } else if (!strcmp(a, "--keepalive-timeout-ms")) {
            INT(1, 3600000);
            c.http.keepalive_idle_ms = (int)iv;
        } else if (!strcmp(a, "--max-requests-per-conn")) {
            INT(1, 1 << 30);
            c.http.max_requests_per_conn = (int)iv;
        } else if (!strcmp(a, "--max-write-queue-bytes")) {
            VAL();
            long long bytes;
            if (cli_parse_bytes(a, v, 4096, 1LL << 32, &bytes)) goto done;
            c.http.max_write_queue_bytes = (size_t)bytes;
        } else {
            cli_error("serve: unknown option '%s'", a);
            serve_usage(stderr);
            goto done;
        }
#undef VAL
#undef INT
    }
    if (cli_check_dummy(c.dummy, c.tokenizer, c.model_path) < 0) goto done;
    if (c.dummy) c.model_path = c.dummy; /* the engine's name for it; nothing is opened */
    if (!c.model_path) c.model_path = cli_default_model();
    if (!c.model_path) {
        cli_error("serve: no model: pass --model PATH or run scripts/fetch-model.sh");
        goto done;
    }
    if (c.engine.max_batch_tokens < c.engine.max_seqs) {
        cli_error("--max-num-batched-tokens (%d) must be >= --max-num-seqs (%d)", c.engine.max_batch_tokens,
                  c.engine.max_seqs);
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
