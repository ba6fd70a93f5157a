/* cli_opts.c - the option table of every subcommand, its parser, the copy
 * of its values into each subcommand's configuration and its help
 * (cli_opts.h). */
#include "cli/cli_opts.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "models/model.h"
#include "scheduler/engine.h"
#include "server/app/srv_app.h"
#include "server/http/srv_http.h"
#include "server/ops/srv_gpu.h"

typedef cli_opt opt;

/* The subcommands: name and configuration, by CLI_IX_*. */
static const struct {
    unsigned bit;
    const char *name;
    size_t cfg_size;
} CMDS[CLI_N_CMDS] = {
    [CLI_IX_SERVE] = {CLI_SERVE, "serve", sizeof(srv_app_config)},
    [CLI_IX_GENERATE] = {CLI_GENERATE, "generate", sizeof(cli_generate_opts)},
    [CLI_IX_BENCH] = {CLI_BENCH, "bench", sizeof(cli_bench_opts)},
    [CLI_IX_TOKENIZE] = {CLI_TOKENIZE, "tokenize", sizeof(cli_tokenize_opts)},
    [CLI_IX_CONVERT] = {CLI_CONVERT, "convert-llama2c", sizeof(cli_convert_opts)},
};

/* The enums whose names their module parses. */
CLI_PARSER(parse_weights, model_weights_fmt, model_weights_fmt_parse)
CLI_PARSER(parse_device, model_device, model_device_parse)
CLI_PARSER(parse_gpu_mode, srv_gpu_mode, srv_gpu_mode_parse)
CLI_PARSER(parse_kv_dtype, kern_kv_dtype, kern_kv_dtype_parse)

/* A row's field in each subcommand: SV(f) is srv_app_config's f, GN
 * cli_generate_opts', BN cli_bench_opts', TK cli_tokenize_opts', CV
 * cli_convert_opts'; ...P(f, parser) an enum its parser fills, SVE(f) an
 * enum set from the row's VALS. */
#define SV(f) [CLI_IX_SERVE] = CLI_FIELD(srv_app_config, f)
#define GN(f) [CLI_IX_GENERATE] = CLI_FIELD(cli_generate_opts, f)
#define BN(f) [CLI_IX_BENCH] = CLI_FIELD(cli_bench_opts, f)
#define TK(f) [CLI_IX_TOKENIZE] = CLI_FIELD(cli_tokenize_opts, f)
#define CV(f) [CLI_IX_CONVERT] = CLI_FIELD(cli_convert_opts, f)
#define SVP(f, p) [CLI_IX_SERVE] = CLI_PARSED(srv_app_config, f, p)
#define GNP(f, p) [CLI_IX_GENERATE] = CLI_PARSED(cli_generate_opts, f, p)
#define BNP(f, p) [CLI_IX_BENCH] = CLI_PARSED(cli_bench_opts, f, p)
#define SVE(f) [CLI_IX_SERVE] = CLI_ENUM(srv_app_config, f)
/* The value of each choice, in the order of the row's choices. */
#define VALS(...)                                                                                  \
    .vals = (const int[]){__VA_ARGS__},                                                            \
    .n_vals = (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

#define SG (CLI_SERVE | CLI_GENERATE)
#define SGB (CLI_SERVE | CLI_GENERATE | CLI_BENCH)
#define S CLI_SERVE
#define G CLI_GENERATE
#define B CLI_BENCH
#define SB (CLI_SERVE | CLI_BENCH)
#define ME "model and engine"
#define SO "security and operations"
#define HL                                                                                         \
    "HTTP limits (head and body-total timeouts bound the whole head / body; body-timeout is the\n" \
    "longest gap between body bytes; a client with more unsent stream bytes than\n"                \
    "max-write-queue-bytes is disconnected)"
#define GS "generation"
#define BM "measurement"

static const opt OPTS[] = {
    {SGB | CLI_TOKENIZE, O_MODEL, "--model", "-m", T_STR, 1, 0, NULL, "PATH",
     "GGUF file (default: $BRISK_MODEL or the fetched SmolLM2)", ME,
     .to = {SV(model_path), GN(model), BN(model), TK(model)}},
    {CLI_CONVERT, O_MODEL, "--model", NULL, T_STR, 1, 0, NULL, "X.bin", "llama2.c checkpoint",
     "conversion", .to = {CV(model)}},
    {CLI_CONVERT, O_TOKENIZER, "--tokenizer", NULL, T_STR, 1, 0, NULL, "tok.bin",
     "llama2.c tokenizer", "conversion", .to = {CV(tokenizer)}},
    {CLI_CONVERT, O_OUT, "--out", NULL, T_STR, 1, 0, NULL, "X.gguf", "the GGUF file to write",
     "conversion", .to = {CV(out)}},
    {SGB, O_DUMMY, "--dummy-weights", NULL, T_STR, 1, 0, NULL, "CONFIG",
     "random weights in a real shape instead of --model:", ME,
     .to = {SV(dummy), GN(dummy), BN(dummy)}},
    {SGB, O_TOKENIZER, "--tokenizer", NULL, T_STR, 1, 0, NULL, "GGUF",
     "vocabulary for --dummy-weights (default: synthetic)", ME,
     .to = {SV(tokenizer), GN(tokenizer), BN(tokenizer)}},
    {S, O_SERVED_NAME, "--served-model-name", NULL, T_STR, 1, 200, NULL, "NAME",
     "name in the API (default: the file name without .gguf)", ME, .to = {SV(served_name)}},
    {SGB, O_WEIGHTS, "--weights", NULL, T_CHOICE, 0, 0, "auto|f32|f16|int8", "auto|f32|f16|int8",
     "compute format of the weights (auto; on CUDA: f16 or int8,\n"
     "auto = int8 for a quantised file, f16 otherwise)",
     ME,
     .to = {SVP(engine.weights, parse_weights), GNP(weights, parse_weights),
            BNP(weights, parse_weights)}},
    {SGB, O_DEVICE, "--device", NULL, T_CHOICE, 0, 0, "cpu|cuda|auto", "cpu|cuda|auto",
     "where the model runs (cpu; auto: CUDA when a GPU is\npresent and the weights fit, logged at "
     "start)",
     ME,
     .to = {SVP(engine.device, parse_device), GNP(device, parse_device),
            BNP(device, parse_device)}},
    {S, O_GPU_MEM, "--gpu-memory-utilization", NULL, T_FLOAT, 0.05, 1.0, NULL, "F",
     "CUDA: fraction of GPU memory for weights, scratch and the\nKV cache, which gets what is left "
     "(0.9)",
     ME, .to = {SV(engine.gpu_memory_utilization)}},
    {SGB, O_NO_GRAPHS, "--no-cuda-graphs", NULL, T_FLAG, 0, 0, NULL, NULL,
     "CUDA: run decode steps kernel by kernel (for debugging)", ME, .clears = 1,
     .to = {SV(engine.cuda_graphs), GN(cuda_graphs), BN(cuda_graphs)}},
    {SGB, O_THREADS, "--threads", "-t", T_INT, 1, 1024, NULL, "N", "compute threads (all cores)",
     ME, .to = {SV(engine.n_threads), GN(threads), BN(threads)}},
    {S, O_CTX, "--ctx", NULL, T_INT, 16, 1 << 20, NULL, "N",
     "positions per sequence, prompt + output (min(train, 4096))", ME, .to = {SV(engine.max_ctx)}},
    {G, O_CTX, "--ctx", "-c", T_INT, 1, 1 << 20, NULL, "N",
     "positions, prompt + output (prompt + -n)", ME, .to = {GN(ctx)}},
    {S, O_MAX_SEQS, "--max-num-seqs", "--parallel", T_INT, 1, 4096, NULL, "N",
     "sequences running together (32)", ME, .to = {SV(engine.max_seqs)}},
    {S, O_MAX_BATCH, "--max-num-batched-tokens", NULL, T_INT, 1, 1 << 20, NULL, "N",
     "tokens per engine step (512)", ME, .to = {SV(engine.max_batch_tokens)}},
    {S, O_KV_BYTES, "--kv-cache-bytes", NULL, T_BYTES, 1, 1125899906842624.0, NULL, "N[K|M|G]",
     "KV cache pool (min(1G, max-num-seqs full contexts))", ME, .to = {SV(engine.kv_cache_bytes)}},
    {S, O_BLOCK_SIZE, "--block-size", NULL, T_INT, 1, 1024, NULL, "N",
     "positions per KV block (16)", ME, .to = {SV(engine.block_size)}},
    {S, O_NO_PREFIX, "--no-prefix-caching", NULL, T_FLAG, 0, 0, NULL, NULL,
     "do not reuse KV blocks of earlier prompts", ME, .clears = 1,
     .to = {SV(engine.prefix_caching)}},
    {S, O_NO_WINDOW_RELEASE, "--no-kv-window-release", "--disable-hybrid-kv-cache-manager", T_FLAG,
     0, 0, NULL, NULL,
     "keep the KV blocks behind sliding windows (one block table for every layer)", ME,
     .to = {SV(engine.no_window_release)}},
    {S, O_ENABLE_PREFIX, "--enable-prefix-caching", NULL, T_FLAG, 0, 0, NULL, NULL,
     "reuse KV blocks of earlier prompts (the default; vLLM's flag)", ME,
     .to = {SV(engine.prefix_caching)}},
    {SGB, O_KV_DTYPE, "--kv-cache-dtype", NULL, T_CHOICE, 0, 0,
     "f16|f32|q8_0|q4_0|int8|fp8|fp8_e4m3", "f16|f32|q8_0|q4_0|int8|fp8",
     "KV cache element type (f16; f32 doubles its memory). Per 32 values of a\n"
     "head: q8_0 (0.53x f16's bytes), q4_0 (0.28x), on the CPU; per head:\n"
     "int8, fp8 (e4m3, alias fp8_e4m3; 0.52x), on CUDA. A dtype the device\n"
     "cannot run is refused at start",
     ME,
     .to = {SVP(engine.kv_dtype, parse_kv_dtype), GNP(kv_dtype, parse_kv_dtype),
            BNP(kv_dtype, parse_kv_dtype)}},
    {S, O_SCHED_POLICY, "--scheduling-policy", NULL, T_CHOICE, 0, 0, "fcfs|priority",
     "fcfs|priority",
     "admission order (fcfs); priority: the request's `priority` (lower first), aged", ME,
     VALS(SCHED_POLICY_FCFS, SCHED_POLICY_PRIORITY), .to = {SV(engine.sched_policy)}},
    {S, O_PRIORITY_AGING, "--priority-aging", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "seconds of waiting that improve a priority by one (10; 0: no aging)", ME,
     .to = {SV(engine.priority_aging_s)}},
    {S, O_REQUEST_TIMEOUT, "--request-timeout", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "default deadline of a request, from its arrival (0: none; body: `timeout`)", ME,
     .to = {SV(request_timeout_s)}},
    {S, O_MAX_QUEUED, "--max-queued-requests", NULL, T_INT, 0, 1 << 24, NULL, "N",
     "waiting sequences before 429 (1024)", ME, .to = {SV(engine.max_waiting)}},
    {S, O_MAX_QUEUED_TOKENS, "--max-queued-tokens", NULL, T_INT, 1, 1099511627776.0, NULL, "N",
     "waiting prompt tokens before 429 (4194304)", ME, .to = {SV(engine.max_waiting_tokens)}},
    {S, O_CHAT_TEMPLATE, "--chat-template", NULL, T_CHOICE, 0, 0,
     "chatml|llama2|llama3|mistral|zephyr|gemma|phi3", "NAME",
     "chatml|llama2|llama3|mistral|zephyr|gemma|phi3 (from GGUF)", ME, .to = {SV(chat_template)}},
    {S, O_EMBEDDINGS, "--embeddings", NULL, T_FLAG, 0, 0, NULL, NULL,
     "serve /v1/embeddings (the final hidden state, pooled)", ME, .to = {SV(embeddings)}},
    {S, O_POOLING, "--pooling", NULL, T_CHOICE, 0, 0, "mean|last", "mean|last",
     "embedding pooling (the GGUF's pooling_type, else last)", ME,
     VALS(SCHED_POOL_MEAN, SCHED_POOL_LAST), .to = {SV(pooling)}},
    {S, O_GENERATION_CONFIG, "--generation-config", NULL, T_CHOICE, 0, 0, "auto|vllm", "auto|vllm",
     "sampling defaults for fields a request leaves out (auto: the model's\n"
     "generation_config.json; vllm: brisk's neutral ones)",
     ME, VALS(0, 1), .to = {SV(generation_config)}},
    {S, O_SPEC_CONFIG, "--speculative-config", NULL, T_STR, 2, 4096, NULL, "JSON",
     "speculative decoding, vLLM's form: {\"method\": \"ngram\"|\"suffix\"|\"draft_model\",\n"
     "\"num_speculative_tokens\": N, \"prompt_lookup_min\"/\"_max\": N, \"model\": PATH}\n"
     "(docs/SPECULATIVE.md; off by default)",
     ME, .to = {SV(spec_json)}},
    {S, O_MODEL_DRAFT, "--model-draft", "-md", T_STR, 1, 4000, NULL, "PATH",
     "speculative decoding with this draft model (llama.cpp's form; same vocabulary)", ME,
     .to = {SV(draft_model)}},
    {S, O_DRAFT_MAX, "--draft-max", "--draft --draft-n", T_INT, 1, SCHED_SPEC_MAX_TOKENS, NULL, "N",
     "most tokens the draft proposes a step (16)", ME, .to = {SV(draft_max)}},
    {S, O_DRAFT_MIN, "--draft-min", "--draft-n-min", T_INT, 0, SCHED_SPEC_MAX_TOKENS, NULL, "N",
     "fewer proposals than this are not verified (0)", ME, .to = {SV(draft_min)}},
    {S, O_SPEC_SUFFIX_BYTES, "--spec-suffix-bytes", NULL, T_BYTES, 1 << 20, 1LL << 40, NULL,
     "N[K|M|G]", "method suffix: memory of the index of recent outputs (64M)", ME,
     .to = {SV(engine.spec.suffix_bytes)}},
    {S, O_SPEC_MAX_BATCH, "--spec-max-batch-tokens", NULL, T_INT, 1, 1 << 20, NULL, "N",
     "propose only while a step runs at most N tokens (the backend's\n"
     "measured default: CPU 8, CUDA 128)",
     ME, .to = {SV(engine.spec.max_batch_tokens)}},
    {S, O_SPEC_FIXED, "--spec-fixed-length", NULL, T_FLAG, 0, 0, NULL, NULL,
     "propose num_speculative_tokens every step (vLLM's way) instead of the\n"
     "length each sequence's acceptance pays for",
     ME, .to = {SV(engine.spec.fixed_len)}},
    {S, O_HOST, "--host", NULL, T_STR, 1, 0, NULL, "ADDR", "address to listen on (127.0.0.1)", ME,
     .to = {SV(host)}},
    {S, O_PORT, "--port", NULL, T_INT, 0, 65535, NULL, "N",
     "port to listen on (8080; 0: any free port)", ME, .to = {SV(port)}},
    {S, O_API_KEY, "--api-key", NULL, T_KEYS, 1, 0, NULL, "KEY",
     "Bearer key for /v1/* (and /metrics with --metrics-auth); repeatable", SO,
     .to = {[CLI_IX_SERVE] = CLI_LIST(srv_app_config, cli_keys, n_cli_keys)}},
    {S, O_API_KEY_FILE, "--api-key-file", NULL, T_STR, 1, 0, NULL, "F",
     "a file of keys, one a line: KEY or ID KEY (# comments); reloaded on SIGHUP\n"
     "and when it changes",
     SO, .to = {SV(key_file)}},
    {S, O_LIMITS_FILE, "--limits-file", NULL, T_STR, 1, 0, NULL, "F",
     "per-key limits, one a line: ID|* rpm=N tpm=N concurrency=N window=S;\n"
     "reloaded on SIGHUP and when it changes",
     SO, .to = {SV(limits_file)}},
    {S, O_METRICS_AUTH, "--metrics-auth", NULL, T_FLAG, 0, 0, NULL, NULL,
     "/metrics needs the key too", SO, .to = {SV(metrics_auth)}},
    {S, O_ALLOWED_ORIGINS, "--allowed-origins", NULL, T_STR, 1, 4096, NULL, "LIST",
     "CORS: comma-separated origins browsers may call from (\"*\": any; off by default)", SO,
     .to = {SV(http.allowed_origins)}},
    {S, O_DRAIN, "--drain-timeout", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "seconds to finish in-flight requests after SIGTERM (30)", SO, .to = {SV(drain_timeout_s)}},
    {S, O_LOG_FORMAT, "--log-format", NULL, T_CHOICE, 0, 0, "text|json", "text|json",
     "access log format (text)", SO, VALS(SRV_LOG_TEXT, SRV_LOG_JSON),
     .to = {SVE(http.log_format)}},
    {S, O_GPU_METRICS, "--gpu-metrics", NULL, T_CHOICE, 0, 0, "auto|on|off", "auto|on|off",
     "GPU memory, utilisation, temperature, power, clocks on /metrics\n"
     "via NVML (auto: when libnvidia-ml loads and sees a GPU; on: required)",
     SO, .to = {SVP(gpu_metrics, parse_gpu_mode)}},
    {S, O_GPU_METRICS_INTERVAL, "--gpu-metrics-interval", NULL, T_FLOAT, 0.05, 3600, NULL, "S",
     "seconds between NVML samples (5)", SO, .to = {SV(gpu_metrics_interval_s)}},
    {S, O_AUDIT_LOG, "--audit-log", NULL, T_STR, 1, 0, NULL, "FILE",
     "one JSON line per /v1/* request (\"-\": stdout; SIGHUP reopens)", SO, .to = {SV(audit_log)}},
    {S, O_AUDIT_CONTENT, "--audit-log-content", NULL, T_FLAG, 0, 0, NULL, NULL,
     "the audit log also holds prompts and completions", SO, .to = {SV(audit_content)}},
    {S, O_AUDIT_FLUSH, "--audit-log-flush-ms", NULL, T_INT, 1, 1000, NULL, "N",
     "write the audit log's buffer at least every N ms (1000)", SO, .to = {SV(audit_flush_ms)}},
    {S, O_STEP_TRACE, "--step-trace", NULL, T_STR, 1, 0, NULL, "FILE",
     "append one JSON line per engine step to FILE: times, rows, graph use\n"
     "(docs/OPERATIONS.md; for finding slow steps)",
     SO, .to = {SV(engine.step_trace)}},
    {S, O_MAX_BODY, "--max-body-bytes", NULL, T_INT, 1, 4294967296.0, NULL, "N",
     "request body (4 MiB)", HL, .to = {SV(http.max_body_bytes)}},
    {S, O_MAX_HEADER_BYTES, "--max-header-bytes", NULL, T_INT, 256, 1 << 24, NULL, "N",
     "request head (32 KiB)", HL, .to = {SV(http.max_header_bytes)}},
    {S, O_MAX_HEADERS, "--max-headers", NULL, T_INT, 1, 10000, NULL, "N", "header fields (100)", HL,
     .to = {SV(http.max_headers)}},
    {S, O_MAX_CONN, "--max-connections", NULL, T_INT, 1, 1 << 20, NULL, "N",
     "open connections (1024)", HL, .to = {SV(http.max_connections)}},
    {S, O_HEAD_TO, "--head-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(10000)", HL,
     .to = {SV(http.head_timeout_ms)}},
    {S, O_BODY_TO, "--body-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(5000)", HL,
     .to = {SV(http.body_idle_timeout_ms)}},
    {S, O_BODY_TOTAL_TO, "--body-total-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(60000)",
     HL, .to = {SV(http.body_total_timeout_ms)}},
    {S, O_KEEPALIVE, "--keepalive-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(75000)", HL,
     .to = {SV(http.keepalive_idle_ms)}},
    {S, O_MAX_REQ_PER_CONN, "--max-requests-per-conn", NULL, T_INT, 1, 1 << 30, NULL, "N", "(1000)",
     HL, .to = {SV(http.max_requests_per_conn)}},
    {S, O_MAX_WQ, "--max-write-queue-bytes", NULL, T_BYTES, 4096, 4294967296.0, NULL, "N",
     "(8 MiB)", HL, .to = {SV(http.max_write_queue_bytes)}},
    {G, O_PROMPT, "--prompt", "-p", T_STR, 0, 0, NULL, "TEXT", "the prompt (empty: BOS alone)", GS,
     .to = {GN(prompt)}},
    {G, O_PROMPT_IDS, "--prompt-ids", NULL, T_STR, 0, 0, NULL, "\"ID ID ...\"",
     "the prompt as token ids", GS, .to = {GN(prompt_ids)}},
    {G, O_N_PREDICT, "--n-predict", "-n", T_INT, 0, 1 << 20, NULL, "N", "tokens to generate (128)",
     GS, .to = {GN(n_predict)}},
    {G, O_TEMP, "--temp", NULL, T_FLOAT, 0, 100, NULL, "T", "temperature (0.8; 0: greedy)", GS,
     .to = {GN(sampling.temperature)}},
    {G, O_SEED, "--seed", NULL, T_U64, 0, 0, NULL, "S", "sampling seed (the time)", GS,
     .to = {GN(sampling.seed)}},
    {G, O_TOP_K, "--top-k", NULL, T_INT, 0, 1 << 24, NULL, "K", "(40; 0: off)", GS,
     .to = {GN(sampling.top_k)}},
    {G, O_TOP_P, "--top-p", NULL, T_FLOAT, 0, 1, NULL, "P", "(0.95)", GS,
     .to = {GN(sampling.top_p)}},
    {G, O_MIN_P, "--min-p", NULL, T_FLOAT, 0, 1, NULL, "P", "(0.05)", GS,
     .to = {GN(sampling.min_p)}},
    {G, O_REPEAT_PENALTY, "--repeat-penalty", NULL, T_FLOAT, 0.01, 100, NULL, "R", "(1: off)", GS,
     .to = {GN(sampling.repetition_penalty)}},
    {G, O_REPEAT_LAST_N, "--repeat-last-n", NULL, T_INT, 0, 1 << 20, NULL, "N",
     "penalty window (64)", GS, .to = {GN(sampling.penalty_last_n)}},
    {G, O_PRESENCE, "--presence-penalty", NULL, T_FLOAT, -2, 2, NULL, "X", "(0)", GS,
     .to = {GN(sampling.presence_penalty)}},
    {G, O_FREQUENCY, "--frequency-penalty", NULL, T_FLOAT, -2, 2, NULL, "X", "(0)", GS,
     .to = {GN(sampling.frequency_penalty)}},
    {G, O_DUMP_LOGITS, "--dump-logits", NULL, T_STR, 1, 0, NULL, "FILE",
     "every position's logits, f32", GS, .to = {GN(dump_logits)}},
    {G, O_IGNORE_EOS, "--ignore-eos", NULL, T_FLAG, 0, 0, NULL, NULL,
     "do not stop at end of sequence", GS, .to = {GN(ignore_eos)}},
    {G | CLI_TOKENIZE, O_SPECIAL, "--special", NULL, T_FLAG, 0, 0, NULL, NULL,
     "parse special tokens in the text (<|im_start|> ...)", GS, .to = {GN(special), TK(special)}},
    {G | CLI_TOKENIZE, O_NO_BOS, "--no-bos", NULL, T_FLAG, 0, 0, NULL, NULL, "do not add BOS", GS,
     .to = {GN(no_bos), TK(no_bos)}},
    {CLI_TOKENIZE, O_TEXT, "--text", "--prompt -p", T_STR, 0, 0, NULL, "TEXT",
     "the text to tokenize", GS, .to = {TK(text)}},
    {B, O_N_PROMPT, "--n-prompt", "-p", T_INT, 0, 1 << 16, NULL, "N",
     "prompt tokens of the pp test (512)", BM, .to = {BN(n_pp)}},
    {B, O_N_GEN, "--n-gen", "-n", T_INT, 0, 1 << 16, NULL, "N",
     "generated tokens of the tg test (128)", BM, .to = {BN(n_tg)}},
    {B, O_REPS, "--reps", "-r", T_INT, 1, 1000, NULL, "N", "repetitions; the best counts (3)", BM,
     .to = {BN(reps)}},
    {B, O_DEPTH, "--depth", "-d", T_INT, 0, 1 << 20, NULL, "N",
     "positions of context the tg test decodes after (0; llama-bench's -d)", BM, .to = {BN(depth)}},
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

/* The CLI_IX_* of subcommand cmd, or -1. */
static int cmd_ix(unsigned cmd) {
    for (int k = 0; k < CLI_N_CMDS; k++)
        if (CMDS[k].bit == cmd)
            return k;
    return -1;
}

static const char *cmd_name(unsigned cmd) {
    int k = cmd_ix(cmd);
    return CMDS[k < 0 ? CLI_IX_CONVERT : k].name;
}

/* Whether w is one of the sep-separated words of list. */
static int list_has(const char *list, char sep, const char *w) {
    size_t n = strlen(w);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, w, n))
            return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static int has_alias(const opt *o, const char *a) {
    return o->aliases && list_has(o->aliases, ' ', a);
}

static const opt *find(unsigned cmd, const char *a) {
    for (int k = 0; k < N_OPTS; k++)
        if ((OPTS[k].cmds & cmd) && (!strcmp(OPTS[k].name, a) || has_alias(&OPTS[k], a)))
            return &OPTS[k];
    return NULL;
}

/* BRISK_ + the long name without "--", upper case, '-' as '_'. */
static void env_name(const opt *o, char *buf, size_t len) {
    snprintf(buf, len, "BRISK_%s", o->name + 2);
    for (char *p = buf + 6; *p; p++)
        *p = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
}

/* Validates and stores one value; flag names the source (the option, or
 * the environment variable) in the error. 0 or -1 (error printed). */
static int set_value(const opt *o, const char *flag, const char *val, cli_vals *v) {
    long iv;
    double fv;
    long long bv;
    switch (o->type) {
    case T_STR: {
        size_t n = strlen(val);
        if (n < (size_t)o->lo || (o->hi > 0 && n > (size_t)o->hi)) {
            if (o->hi > 0)
                cli_error("%s: %.0f to %.0f characters", flag, o->lo, o->hi);
            else
                cli_error("%s: must not be empty", flag);
            return -1;
        }
        v->s[o->id] = val;
        break;
    }
    case T_KEYS:
        if (!val[0] || v->n_keys == CLI_MAX_KEYS) {
            cli_error("%s: %s", flag,
                      val[0] ? "too many keys (use --api-key-file)" : "must not be empty");
            return -1;
        }
        v->keys[v->n_keys++] = val;
        break;
    case T_INT:
        if (cli_parse_int(flag, val, (long)o->lo, (long)o->hi, &iv))
            return -1;
        v->i[o->id] = iv;
        break;
    case T_BYTES:
        if (cli_parse_bytes(flag, val, (long long)o->lo, (long long)o->hi, &bv))
            return -1;
        v->i[o->id] = bv;
        break;
    case T_FLOAT:
        if (cli_parse_float(flag, val, o->lo, o->hi, &fv))
            return -1;
        v->f[o->id] = fv;
        break;
    case T_U64:
        if (cli_parse_u64(flag, val, &v->u[o->id]))
            return -1;
        break;
    case T_CHOICE:
        if (!list_has(o->choices, '|', val)) {
            char list[160];
            snprintf(list, sizeof list, "%s", o->choices);
            for (char *p = list; *p; p++)
                if (*p == '|')
                    *p = ',';
            char pretty[200] = "";
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ","))
                snprintf(pretty + strlen(pretty), sizeof pretty - strlen(pretty), "%s%s",
                         pretty[0] ? ", " : "", t);
            cli_error("%s: '%s' is not one of %s", flag, val, pretty);
            return -1;
        }
        v->s[o->id] = val;
        break;
    case T_FLAG: v->i[o->id] = 1; break;
    }
    v->given[o->id] = 1;
    return 0;
}

static void usage_line(unsigned cmd, FILE *f) {
    fprintf(f, "usage: brisk %s [options] (brisk %s --help lists them)\n", cmd_name(cmd),
            cmd_name(cmd));
}

/* The environment first: BRISK_<NAME> for each option of cmd. */
static int parse_env(unsigned cmd, cli_vals *v) {
    for (int k = 0; k < N_OPTS; k++) {
        const opt *o = &OPTS[k];
        if (!(o->cmds & cmd) || o->id == O_MODEL)
            continue; /* BRISK_MODEL: the default model */
        char name[64];
        env_name(o, name, sizeof name);
        const char *val = getenv(name);
        if (!val)
            continue;
        if (o->type == T_FLAG) {
            if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes") ||
                !strcmp(val, "on")) {
                v->i[o->id] = 1, v->given[o->id] = 1;
            } else if (strcmp(val, "0") && strcmp(val, "false") && strcmp(val, "no") &&
                       strcmp(val, "off") && strcmp(val, "")) {
                cli_error("%s: '%s' is not 1, true, yes, on, 0, false, no or off", name, val);
                return -1;
            }
            continue;
        }
        if (set_value(o, name, val, v) < 0)
            return -1;
    }
    return 0;
}

int cli_opts_parse(unsigned cmd, int argc, char **argv, cli_vals *v) {
    memset(v, 0, sizeof *v);
    if (parse_env(cmd, v) < 0)
        return CLI_USAGE;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_opts_help(cmd, stdout);
            return CLI_HELP;
        }
        const opt *o = find(cmd, a);
        if (!o) {
            cli_error("%s: unknown option '%s'", cmd_name(cmd), a);
            usage_line(cmd, stderr);
            return CLI_USAGE;
        }
        if (o->type == T_FLAG) {
            set_value(o, a, "", v);
            continue;
        }
        const char *val = cli_value(argc, argv, &i);
        if (!val || set_value(o, a, val, v) < 0)
            return CLI_USAGE; /* the one error line */
    }
    return CLI_OK;
}

/* --dummy-weights' shapes, from the table that defines them
 * (models/model_arch.c), on lines of the help's width. */
static void help_dummy_names(FILE *f) {
    int col = 80;
    for (const char *const *n = model_dummy_configs; *n; n++) {
        int len = (int)strlen(*n);
        if (col + 1 + len > 79) {
            fprintf(f, "\n%-39s%s", "", *n);
            col = 39 + len;
        } else {
            fprintf(f, " %s", *n);
            col += 1 + len;
        }
    }
}

void cli_opts_help(unsigned cmd, FILE *f) {
    fprintf(f, "usage: brisk %s [options]\n", cmd_name(cmd));
    const char *section = NULL;
    for (int k = 0; k < N_OPTS; k++) {
        const opt *o = &OPTS[k];
        if (!(o->cmds & cmd))
            continue;
        if (!section || strcmp(section, o->section)) {
            section = o->section;
            fprintf(f, "%s:\n", section);
        }
        char left[96];
        int n = snprintf(left, sizeof left, "  %s%s%s", o->name, o->meta ? " " : "",
                         o->meta ? o->meta : "");
        if (o->aliases)
            snprintf(left + n, sizeof left - (size_t)n, " (%s)", o->aliases);
        fprintf(f, "%-38s ", left);
        if (strlen(left) > 38)
            fprintf(f, "\n%-39s", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n')
                fprintf(f, "%-39s", "");
        }
        if (o->id == O_DUMMY)
            help_dummy_names(f);
        fputc('\n', f);
    }
    fprintf(
        f,
        "Every option can also be set in the environment as BRISK_<NAME> (--max-num-seqs:\n"
        "BRISK_MAX_NUM_SEQS; a flag: 1 or 0); the command line wins. BRISK_MODEL is the default\n"
        "--model.\n");
}

/* ---- the values into a subcommand's configuration -------------------------------- */

const cli_opt *cli_opts_table(int *n) {
    *n = N_OPTS;
    return OPTS;
}

size_t cli_opts_config_size(unsigned cmd) {
    int k = cmd_ix(cmd);
    return k < 0 ? 0 : CMDS[k].cfg_size;
}

/* The range of each C type a number can go into, by cli_ctype. */
static const struct {
    double lo, hi;
} CTYPE_RANGE[] = {
    [CLI_C_INT] = {INT_MIN, INT_MAX},
    [CLI_C_LONG] = {(double)LONG_MIN, (double)LONG_MAX},
    [CLI_C_LLONG] = {(double)LLONG_MIN, (double)LLONG_MAX},
    [CLI_C_ULONG] = {0, (double)ULONG_MAX},
    [CLI_C_ULLONG] = {0, (double)ULLONG_MAX},
    [CLI_C_FLOAT] = {-FLT_MAX, FLT_MAX},
    [CLI_C_DOUBLE] = {-DBL_MAX, DBL_MAX},
};

/* The position of s among the '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int k = 0;
    for (const char *p = choices;; k++) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, s, n))
            return k;
        if (!e)
            return -1;
        p = e + 1;
    }
}

static int n_choices(const char *choices) {
    int n = 1;
    for (const char *p = choices; *p; p++)
        n += *p == '|';
    return n;
}

/* Whether a value of row o can go into destination d: NULL, or why not. */
static const char *dest_fault(const opt *o, const cli_dest *d) {
    int c = d->ctype;
    int number = c >= CLI_C_INT && c <= CLI_C_ULLONG;
    switch (o->type) {
    case T_STR: return c == CLI_C_STR ? NULL : "a string goes into a const char *";
    case T_CHOICE:
        if (c == CLI_C_STR)
            return NULL;
        if (c == CLI_C_ENUM && d->parse)
            return o->vals ? "a parsed choice has no VALS" : NULL;
        if (c != CLI_C_INT && c != CLI_C_ENUM)
            return "a choice goes into a const char *, an int or an enum";
        return o->vals && o->n_vals == n_choices(o->choices) ? NULL
                                                             : "a choice into an int needs a value "
                                                               "per choice (VALS) or a parser";
    case T_INT:
    case T_BYTES:
        if (!number)
            return "an integer goes into an integer";
        return o->lo >= CTYPE_RANGE[c].lo && o->hi <= CTYPE_RANGE[c].hi
                   ? NULL
                   : "the option's range does not fit the field's type";
    case T_FLOAT:
        if (c != CLI_C_FLOAT && c != CLI_C_DOUBLE)
            return "a number goes into a float or a double";
        return o->lo >= CTYPE_RANGE[c].lo && o->hi <= CTYPE_RANGE[c].hi
                   ? NULL
                   : "the option's range does not fit the field's type";
    case T_U64:
        return (c == CLI_C_ULONG || c == CLI_C_ULLONG) && d->size == sizeof(uint64_t)
                   ? NULL
                   : "an unsigned 64-bit value goes into a uint64_t";
    case T_FLAG: return c == CLI_C_INT ? NULL : "a flag goes into an int";
    case T_KEYS: return c == CLI_C_LIST ? NULL : "repeated values go into a list (CLI_LIST)";
    }
    return "unknown option type";
}

/* The integer a row gives: a flag's 1 (0 when it clears), a choice's value,
 * else the parsed number. */
static long long int_value(const opt *o, const cli_vals *v) {
    if (o->type == T_FLAG)
        return !o->clears;
    if (o->type == T_CHOICE) {
        int k = choice_index(o->choices, v->s[o->id]);
        return k >= 0 && k < o->n_vals ? o->vals[k] : 0;
    }
    return v->i[o->id];
}

/* The same for an unsigned field: --seed's u64, or a non-negative integer. */
static unsigned long long uint_value(const opt *o, const cli_vals *v) {
    return o->type == T_U64 ? v->u[o->id] : (unsigned long long)int_value(o, v);
}

/* Writes row o's value into destination d of cfg. 0, or -1 when the
 * destination's parser refuses the value. */
static int store(const opt *o, const cli_dest *d, const cli_vals *v, char *cfg) {
    void *f = cfg + d->off;
    switch ((cli_ctype)d->ctype) {
    case CLI_C_STR: *(const char **)f = v->s[o->id]; break;
    case CLI_C_INT: *(int *)f = (int)int_value(o, v); break;
    case CLI_C_LONG: *(long *)f = (long)int_value(o, v); break;
    case CLI_C_LLONG: *(long long *)f = int_value(o, v); break;
    case CLI_C_ULONG: *(unsigned long *)f = (unsigned long)uint_value(o, v); break;
    case CLI_C_ULLONG: *(unsigned long long *)f = uint_value(o, v); break;
    case CLI_C_FLOAT: *(float *)f = (float)v->f[o->id]; break;
    case CLI_C_DOUBLE: *(double *)f = v->f[o->id]; break;
    case CLI_C_ENUM:
        if (d->parse)
            return d->parse(v->s[o->id], f) < 0 ? -1 : 0;
        *(int *)f = (int)int_value(o, v);
        break;
    case CLI_C_LIST:
        *(const char *const **)f = v->keys;
        *(int *)(cfg + d->off_n) = v->n_keys;
        break;
    case CLI_C_NONE: break;
    }
    return 0;
}

/* The row of option id in subcommand cmd, or NULL. */
static const opt *row_of(unsigned cmd, cli_opt_id id) {
    for (int k = 0; k < N_OPTS; k++)
        if ((OPTS[k].cmds & cmd) && OPTS[k].id == id)
            return &OPTS[k];
    return NULL;
}

int cli_opts_fill(unsigned cmd, const cli_vals *v, void *cfg, size_t cfg_size) {
    int ix = cmd_ix(cmd);
    if (ix < 0 || cfg_size != CMDS[ix].cfg_size) {
        cli_error("internal: the options of %s filled into a configuration of %zu bytes",
                  cmd_name(cmd), cfg_size);
        return -1;
    }
    for (int id = 0; id < O_N; id++) {
        const opt *o = v->given[id] ? row_of(cmd, (cli_opt_id)id) : NULL;
        if (!o)
            continue;
        const cli_dest *d = &o->to[ix];
        const char *why = d->ctype == CLI_C_NONE ? "no field to fill" : dest_fault(o, d);
        if (why || store(o, d, v, cfg) < 0) {
            cli_error("internal: %s %s: %s", cmd_name(cmd), o->name,
                      why ? why : "its parser refused the value");
            return -1;
        }
    }
    return 0;
}

int cli_opts_check(char *err, size_t err_len) {
    for (int k = 0; k < N_OPTS; k++) {
        const opt *o = &OPTS[k];
        for (int ix = 0; ix < CLI_N_CMDS; ix++) {
            const cli_dest *d = &o->to[ix];
            const char *why = NULL;
            if (!(o->cmds & CMDS[ix].bit))
                why =
                    d->ctype != CLI_C_NONE ? "a field in a subcommand that does not take it" : NULL;
            else if (d->ctype == CLI_C_NONE)
                why = "no field to fill";
            else if ((why = dest_fault(o, d)) == NULL && d->off + d->size > CMDS[ix].cfg_size)
                why = "the field lies outside the configuration";
            /* Every choice must convert. */
            for (int c = 0; !why && d->parse && c < n_choices(o->choices); c++) {
                char name[64];
                const char *p = o->choices;
                for (int j = 0; j < c; j++)
                    p = strchr(p, '|') + 1;
                size_t len = strcspn(p, "|");
                snprintf(name, sizeof name, "%.*s", (int)len, p);
                long long scratch[2]; /* aligned for any enum */
                if (d->size > sizeof scratch || d->parse(name, scratch) < 0)
                    why = "its parser refuses one of its choices";
            }
            if (why) {
                snprintf(err, err_len, "%s %s: %s", CMDS[ix].name, o->name, why);
                return -1;
            }
        }
    }
    return 0;
}
