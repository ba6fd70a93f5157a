/* cli_opts.c - the option table of every subcommand, its parser and its
 * help (cli_opts.h). */
#include "cli/cli_opts.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef enum { T_STR, T_INT, T_FLOAT, T_BYTES, T_FLAG, T_CHOICE, T_U64, T_KEYS } opt_type;

typedef struct opt {
    unsigned cmds; /* CLI_* bits */
    cli_opt_id id;
    const char *name;    /* the long name, "--max-num-seqs" */
    const char *aliases; /* other spellings, space-separated ("-t", "--parallel"), or NULL */
    opt_type type;
    double lo, hi;       /* numbers: the range; strings: the length range (hi 0: any) */
    const char *choices; /* T_CHOICE: "a|b|c" */
    const char *meta;    /* the value's name in the help ("N", "PATH"); NULL for flags */
    const char *help;    /* one or more lines ('\n' continues) */
    const char *section; /* help heading; a row with a new heading starts it */
} opt;

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
     "GGUF file (default: $BRISK_MODEL or the fetched SmolLM2)", ME},
    {CLI_CONVERT, O_MODEL, "--model", NULL, T_STR, 1, 0, NULL, "X.bin", "llama2.c checkpoint",
     "conversion"},
    {CLI_CONVERT, O_TOKENIZER, "--tokenizer", NULL, T_STR, 1, 0, NULL, "tok.bin",
     "llama2.c tokenizer", "conversion"},
    {CLI_CONVERT, O_OUT, "--out", NULL, T_STR, 1, 0, NULL, "X.gguf", "the GGUF file to write",
     "conversion"},
    {SGB, O_DUMMY, "--dummy-weights", NULL, T_STR, 1, 0, NULL, "CONFIG",
     "random weights in a real shape instead of --model:\n"
     "llama-3-8b llama-3.2-1b qwen2.5-7b qwen3-0.6b qwen3-8b\nsmollm2-135m stories110m gemma3-1b",
     ME},
    {SGB, O_TOKENIZER, "--tokenizer", NULL, T_STR, 1, 0, NULL, "GGUF",
     "vocabulary for --dummy-weights (default: synthetic)", ME},
    {S, O_SERVED_NAME, "--served-model-name", NULL, T_STR, 1, 200, NULL, "NAME",
     "name in the API (default: the file name without .gguf)", ME},
    {SGB, O_WEIGHTS, "--weights", NULL, T_CHOICE, 0, 0, "auto|f32|f16|int8", "auto|f32|f16|int8",
     "compute format of the weights (auto; on CUDA: f16 or int8,\n"
     "auto = int8 for a quantised file, f16 otherwise)",
     ME},
    {SGB, O_DEVICE, "--device", NULL, T_CHOICE, 0, 0, "cpu|cuda|auto", "cpu|cuda|auto",
     "where the model runs (cpu; auto: CUDA when a GPU is\npresent and the weights fit, logged at "
     "start)",
     ME},
    {S, O_GPU_MEM, "--gpu-memory-utilization", NULL, T_FLOAT, 0.05, 1.0, NULL, "F",
     "CUDA: fraction of GPU memory for weights, scratch and the\nKV cache, which gets what is left "
     "(0.9)",
     ME},
    {SGB, O_NO_GRAPHS, "--no-cuda-graphs", NULL, T_FLAG, 0, 0, NULL, NULL,
     "CUDA: run decode steps kernel by kernel (for debugging)", ME},
    {SGB, O_THREADS, "--threads", "-t", T_INT, 1, 1024, NULL, "N", "compute threads (all cores)",
     ME},
    {S, O_CTX, "--ctx", NULL, T_INT, 16, 1 << 20, NULL, "N",
     "positions per sequence, prompt + output (min(train, 4096))", ME},
    {G, O_CTX, "--ctx", "-c", T_INT, 1, 1 << 20, NULL, "N",
     "positions, prompt + output (prompt + -n)", ME},
    {S, O_MAX_SEQS, "--max-num-seqs", "--parallel", T_INT, 1, 4096, NULL, "N",
     "sequences running together (32)", ME},
    {S, O_MAX_BATCH, "--max-num-batched-tokens", NULL, T_INT, 1, 1 << 20, NULL, "N",
     "tokens per engine step (512)", ME},
    {S, O_KV_BYTES, "--kv-cache-bytes", NULL, T_BYTES, 1, 1125899906842624.0, NULL, "N[K|M|G]",
     "KV cache pool (min(1G, max-num-seqs full contexts))", ME},
    {S, O_BLOCK_SIZE, "--block-size", NULL, T_INT, 1, 1024, NULL, "N",
     "positions per KV block (16)", ME},
    {S, O_NO_PREFIX, "--no-prefix-caching", NULL, T_FLAG, 0, 0, NULL, NULL,
     "do not reuse KV blocks of earlier prompts", ME},
    {S, O_NO_WINDOW_RELEASE, "--no-kv-window-release", "--disable-hybrid-kv-cache-manager", T_FLAG,
     0, 0, NULL, NULL,
     "keep the KV blocks behind sliding windows (one block table for every layer)", ME},
    {S, O_ENABLE_PREFIX, "--enable-prefix-caching", NULL, T_FLAG, 0, 0, NULL, NULL,
     "reuse KV blocks of earlier prompts (the default; vLLM's flag)", ME},
    {SB, O_KV_DTYPE, "--kv-cache-dtype", NULL, T_CHOICE, 0, 0, "f16|f32", "f16|f32",
     "KV cache element type (f16; f32 doubles its memory)", ME},
    {S, O_SCHED_POLICY, "--scheduling-policy", NULL, T_CHOICE, 0, 0, "fcfs|priority",
     "fcfs|priority",
     "admission order (fcfs); priority: the request's `priority` (lower first), aged", ME},
    {S, O_PRIORITY_AGING, "--priority-aging", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "seconds of waiting that improve a priority by one (10; 0: no aging)", ME},
    {S, O_REQUEST_TIMEOUT, "--request-timeout", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "default deadline of a request, from its arrival (0: none; body: `timeout`)", ME},
    {S, O_MAX_QUEUED, "--max-queued-requests", NULL, T_INT, 0, 1 << 24, NULL, "N",
     "waiting sequences before 429 (1024)", ME},
    {S, O_MAX_QUEUED_TOKENS, "--max-queued-tokens", NULL, T_INT, 1, 1099511627776.0, NULL, "N",
     "waiting prompt tokens before 429 (4194304)", ME},
    {S, O_CHAT_TEMPLATE, "--chat-template", NULL, T_CHOICE, 0, 0,
     "chatml|llama2|llama3|mistral|zephyr|gemma|phi3", "NAME",
     "chatml|llama2|llama3|mistral|zephyr|gemma|phi3 (from GGUF)", ME},
    {S, O_EMBEDDINGS, "--embeddings", NULL, T_FLAG, 0, 0, NULL, NULL,
     "serve /v1/embeddings (the final hidden state, pooled)", ME},
    {S, O_POOLING, "--pooling", NULL, T_CHOICE, 0, 0, "mean|last", "mean|last",
     "embedding pooling (the GGUF's pooling_type, else last)", ME},
    {S, O_HOST, "--host", NULL, T_STR, 1, 0, NULL, "ADDR", "address to listen on (127.0.0.1)", ME},
    {S, O_PORT, "--port", NULL, T_INT, 0, 65535, NULL, "N",
     "port to listen on (8080; 0: any free port)", ME},
    {S, O_API_KEY, "--api-key", NULL, T_KEYS, 1, 0, NULL, "KEY",
     "Bearer key for /v1/* (and /metrics with --metrics-auth); repeatable", SO},
    {S, O_API_KEY_FILE, "--api-key-file", NULL, T_STR, 1, 0, NULL, "F",
     "a file of keys, one a line: KEY or ID KEY (# comments); reloaded on SIGHUP\n"
     "and when it changes",
     SO},
    {S, O_LIMITS_FILE, "--limits-file", NULL, T_STR, 1, 0, NULL, "F",
     "per-key limits, one a line: ID|* rpm=N tpm=N concurrency=N window=S;\n"
     "reloaded on SIGHUP and when it changes",
     SO},
    {S, O_METRICS_AUTH, "--metrics-auth", NULL, T_FLAG, 0, 0, NULL, NULL,
     "/metrics needs the key too", SO},
    {S, O_ALLOWED_ORIGINS, "--allowed-origins", NULL, T_STR, 1, 4096, NULL, "LIST",
     "CORS: comma-separated origins browsers may call from (\"*\": any; off by default)", SO},
    {S, O_DRAIN, "--drain-timeout", NULL, T_FLOAT, 0, 86400, NULL, "S",
     "seconds to finish in-flight requests after SIGTERM (30)", SO},
    {S, O_LOG_FORMAT, "--log-format", NULL, T_CHOICE, 0, 0, "text|json", "text|json",
     "access log format (text)", SO},
    {S, O_GPU_METRICS, "--gpu-metrics", NULL, T_CHOICE, 0, 0, "auto|on|off", "auto|on|off",
     "GPU memory, utilisation, temperature, power, clocks on /metrics\n"
     "via NVML (auto: when libnvidia-ml loads and sees a GPU; on: required)",
     SO},
    {S, O_GPU_METRICS_INTERVAL, "--gpu-metrics-interval", NULL, T_FLOAT, 0.05, 3600, NULL, "S",
     "seconds between NVML samples (5)", SO},
    {S, O_AUDIT_LOG, "--audit-log", NULL, T_STR, 1, 0, NULL, "FILE",
     "one JSON line per /v1/* request (\"-\": stdout; SIGHUP reopens)", SO},
    {S, O_AUDIT_CONTENT, "--audit-log-content", NULL, T_FLAG, 0, 0, NULL, NULL,
     "the audit log also holds prompts and completions", SO},
    {S, O_AUDIT_FLUSH, "--audit-log-flush-ms", NULL, T_INT, 1, 1000, NULL, "N",
     "write the audit log's buffer at least every N ms (1000)", SO},
    {S, O_MAX_BODY, "--max-body-bytes", NULL, T_INT, 1, 4294967296.0, NULL, "N",
     "request body (4 MiB)", HL},
    {S, O_MAX_HEADER_BYTES, "--max-header-bytes", NULL, T_INT, 256, 1 << 24, NULL, "N",
     "request head (32 KiB)", HL},
    {S, O_MAX_HEADERS, "--max-headers", NULL, T_INT, 1, 10000, NULL, "N", "header fields (100)",
     HL},
    {S, O_MAX_CONN, "--max-connections", NULL, T_INT, 1, 1 << 20, NULL, "N",
     "open connections (1024)", HL},
    {S, O_HEAD_TO, "--head-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(10000)", HL},
    {S, O_BODY_TO, "--body-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(5000)", HL},
    {S, O_BODY_TOTAL_TO, "--body-total-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(60000)",
     HL},
    {S, O_KEEPALIVE, "--keepalive-timeout-ms", NULL, T_INT, 1, 3600000, NULL, "N", "(75000)", HL},
    {S, O_MAX_REQ_PER_CONN, "--max-requests-per-conn", NULL, T_INT, 1, 1 << 30, NULL, "N", "(1000)",
     HL},
    {S, O_MAX_WQ, "--max-write-queue-bytes", NULL, T_BYTES, 4096, 4294967296.0, NULL, "N",
     "(8 MiB)", HL},
    {G, O_PROMPT, "--prompt", "-p", T_STR, 0, 0, NULL, "TEXT", "the prompt (empty: BOS alone)", GS},
    {G, O_PROMPT_IDS, "--prompt-ids", NULL, T_STR, 0, 0, NULL, "\"ID ID ...\"",
     "the prompt as token ids", GS},
    {G, O_N_PREDICT, "--n-predict", "-n", T_INT, 0, 1 << 20, NULL, "N", "tokens to generate (128)",
     GS},
    {G, O_TEMP, "--temp", NULL, T_FLOAT, 0, 100, NULL, "T", "temperature (0.8; 0: greedy)", GS},
    {G, O_SEED, "--seed", NULL, T_U64, 0, 0, NULL, "S", "sampling seed (the time)", GS},
    {G, O_TOP_K, "--top-k", NULL, T_INT, 0, 1 << 24, NULL, "K", "(40; 0: off)", GS},
    {G, O_TOP_P, "--top-p", NULL, T_FLOAT, 0, 1, NULL, "P", "(0.95)", GS},
    {G, O_MIN_P, "--min-p", NULL, T_FLOAT, 0, 1, NULL, "P", "(0.05)", GS},
    {G, O_REPEAT_PENALTY, "--repeat-penalty", NULL, T_FLOAT, 0.01, 100, NULL, "R", "(1: off)", GS},
    {G, O_REPEAT_LAST_N, "--repeat-last-n", NULL, T_INT, 0, 1 << 20, NULL, "N",
     "penalty window (64)", GS},
    {G, O_PRESENCE, "--presence-penalty", NULL, T_FLOAT, -2, 2, NULL, "X", "(0)", GS},
    {G, O_FREQUENCY, "--frequency-penalty", NULL, T_FLOAT, -2, 2, NULL, "X", "(0)", GS},
    {G, O_DUMP_LOGITS, "--dump-logits", NULL, T_STR, 1, 0, NULL, "FILE",
     "every position's logits, f32", GS},
    {G, O_IGNORE_EOS, "--ignore-eos", NULL, T_FLAG, 0, 0, NULL, NULL,
     "do not stop at end of sequence", GS},
    {G | CLI_TOKENIZE, O_SPECIAL, "--special", NULL, T_FLAG, 0, 0, NULL, NULL,
     "parse special tokens in the text (<|im_start|> ...)", GS},
    {G | CLI_TOKENIZE, O_NO_BOS, "--no-bos", NULL, T_FLAG, 0, 0, NULL, NULL, "do not add BOS", GS},
    {CLI_TOKENIZE, O_TEXT, "--text", "--prompt -p", T_STR, 0, 0, NULL, "TEXT",
     "the text to tokenize", GS},
    {B, O_N_PROMPT, "--n-prompt", "-p", T_INT, 0, 1 << 16, NULL, "N",
     "prompt tokens of the pp test (512)", BM},
    {B, O_N_GEN, "--n-gen", "-n", T_INT, 0, 1 << 16, NULL, "N",
     "generated tokens of the tg test (128)", BM},
    {B, O_REPS, "--reps", "-r", T_INT, 1, 1000, NULL, "N", "repetitions; the best counts (3)", BM},
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static const char *cmd_name(unsigned cmd) {
    switch (cmd) {
    case CLI_SERVE: return "serve";
    case CLI_GENERATE: return "generate";
    case CLI_BENCH: return "bench";
    case CLI_TOKENIZE: return "tokenize";
    default: return "convert-llama2c";
    }
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
        fputc('\n', f);
    }
    fprintf(
        f,
        "Every option can also be set in the environment as BRISK_<NAME> (--max-num-seqs:\n"
        "BRISK_MAX_NUM_SEQS; a flag: 1 or 0); the command line wins. BRISK_MODEL is the default\n"
        "--model.\n");
}
