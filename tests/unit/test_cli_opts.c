/* test_cli_opts.c - the option table (cli/cli_opts.c) filling each
 * subcommand's configuration: the table's own check (every row of a
 * subcommand has a field there, of a C type its values fit); a walk of every
 * row of every subcommand, each value given alone, which must write its
 * field, the whole field, with the value given and nothing else; and whole
 * command lines of every subcommand, each option not at its default, read
 * back field by field (the mapping cmd_serve.c once wrote by hand). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "models/model.h"
#include "scheduler/sched_core.h"
#include "server/app/srv_app.h"

static const unsigned CMDS[CLI_N_CMDS] = {
    [CLI_IX_SERVE] = CLI_SERVE,       [CLI_IX_GENERATE] = CLI_GENERATE, [CLI_IX_BENCH] = CLI_BENCH,
    [CLI_IX_TOKENIZE] = CLI_TOKENIZE, [CLI_IX_CONVERT] = CLI_CONVERT,
};

static void test_table_check(void) {
    char err[200] = "";
    CHECK(cli_opts_check(err, sizeof err) == 0, "the table: %s", err);
    int n = 0;
    const cli_opt *t = cli_opts_table(&n);
    CHECK(t && n > 60, "%d rows", n);
    for (int ix = 0; ix < CLI_N_CMDS; ix++)
        CHECK(cli_opts_config_size(CMDS[ix]) > 0, "a configuration for subcommand %d", ix);
    CHECK(cli_opts_config_size(CLI_SERVE) == sizeof(srv_app_config), "serve fills srv_app_config");
    CHECK(cli_opts_config_size(CLI_GENERATE) == sizeof(cli_generate_opts), "generate");
    CHECK(cli_opts_config_size(CLI_BENCH) == sizeof(cli_bench_opts), "bench");
    CHECK(cli_opts_config_size(CLI_TOKENIZE) == sizeof(cli_tokenize_opts), "tokenize");
    CHECK(cli_opts_config_size(CLI_CONVERT) == sizeof(cli_convert_opts), "convert-llama2c");
}

/* The k-th of a row's '|'-separated choices into out. */
static void nth_choice(const char *choices, int k, char *out, size_t cap) {
    const char *p = choices;
    for (int j = 0; j < k && p; j++)
        p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
    snprintf(out, cap, "%.*s", p ? (int)strcspn(p, "|") : 0, p ? p : "");
}

static int count_choices(const char *choices) {
    int n = 1;
    for (const char *p = choices; *p; p++)
        n += *p == '|';
    return n;
}

/* A valid value of row o that is not a typical default: the top of a
 * number's range (or a point inside it), a string of the least length. */
static void a_value(const cli_opt *o, char *out, size_t cap) {
    switch (o->type) {
    case T_INT: snprintf(out, cap, "%lld", (long long)o->hi - (o->hi > o->lo ? 1 : 0)); break;
    case T_BYTES: snprintf(out, cap, "%lld", (long long)o->lo + 3); break;
    case T_FLOAT: snprintf(out, cap, "%.17g", o->lo + (o->hi - o->lo) * 0.375); break;
    case T_U64: snprintf(out, cap, "%llu", 0xfedcba9876543210ull); break;
    case T_KEYS: snprintf(out, cap, "sk-walk"); break;
    default: {
        size_t n = o->lo > 1 ? (size_t)o->lo : 1;
        if (n >= cap)
            n = cap - 1;
        memset(out, 'w', n);
        out[n] = '\0';
    }
    }
}

/* Whether the value written at field f (of d's C type) is what row o was
 * given as text val (as the old hand-written copies converted it). */
static int value_is(const cli_opt *o, const cli_dest *d, const void *f, const char *val,
                    const char *const *argv_val, int choice) {
    double num = val ? strtod(val, NULL) : 0;
    long long want_i = o->type == T_FLAG     ? !o->clears
                       : o->type == T_CHOICE ? (o->vals ? o->vals[choice] : 0)
                                             : (long long)num;
    switch (d->ctype) {
    case CLI_C_STR: return *(const char *const *)f == *argv_val;
    case CLI_C_INT: return *(const int *)f == (int)want_i;
    case CLI_C_LONG: return *(const long *)f == (long)want_i;
    case CLI_C_LLONG: return *(const long long *)f == want_i;
    case CLI_C_ULONG:
        return o->type == T_U64 ? *(const unsigned long *)f == strtoul(val, NULL, 10)
                                : *(const unsigned long *)f == (unsigned long)want_i;
    case CLI_C_ULLONG: return *(const unsigned long long *)f == strtoull(val, NULL, 10);
    case CLI_C_FLOAT: return *(const float *)f == (float)num;
    case CLI_C_DOUBLE: return *(const double *)f == num;
    case CLI_C_ENUM: {
        if (!d->parse)
            return *(const int *)f == (int)want_i;
        long long other[2] = {0, 0}; /* what the module's parser makes of it */
        return d->parse(val, other) == 0 && !memcmp(other, f, d->size);
    }
    case CLI_C_LIST: return *(const char *const *const *)f != NULL;
    }
    return 0;
}

/* Fills cmd's configuration, prefilled with byte `pattern`, from argv. */
static unsigned char *fill(unsigned cmd, int argc, char **argv, int pattern, cli_vals *v) {
    size_t size = cli_opts_config_size(cmd);
    unsigned char *cfg = malloc(size);
    if (!cfg)
        return NULL;
    memset(cfg, pattern, size);
    if (cli_opts_parse(cmd, argc, argv, v) != CLI_OK || cli_opts_fill(cmd, v, cfg, size) != 0) {
        free(cfg);
        return NULL;
    }
    return cfg;
}

static int in_field(const cli_dest *d, size_t i) {
    if (i >= d->off && i < d->off + d->size)
        return 1;
    return d->ctype == CLI_C_LIST && i >= d->off_n && i < d->off_n + sizeof(int);
}

/* One row of one subcommand, given val (NULL for a flag): the field, the
 * whole field and only the field changes, to the value given. The baseline
 * is a fill with no arguments (what the environment sets, if anything). */
static void walk_one(unsigned cmd, int ix, const cli_opt *o, const char *val, int choice) {
    char name[64];
    snprintf(name, sizeof name, "%s", o->name);
    char vbuf[256];
    snprintf(vbuf, sizeof vbuf, "%s", val ? val : "");
    char *argv[2] = {name, vbuf};
    int argc = val ? 2 : 1;
    const cli_dest *d = &o->to[ix];
    size_t size = cli_opts_config_size(cmd);
    unsigned char *out[2] = {NULL, NULL};
    cli_vals *v = malloc(sizeof *v), *v0 = malloc(sizeof *v0);
    for (int p = 0; p < 2 && v && v0; p++) {
        int pattern = p ? 0xa5 : 0x00;
        unsigned char *base = fill(cmd, 0, NULL, pattern, v0);
        out[p] = fill(cmd, argc, argv, pattern, v);
        CHECK(base && out[p], "cmd %u %s %s: parsed and filled", cmd, o->name, vbuf);
        if (!base || !out[p]) {
            free(base);
            continue;
        }
        size_t stray = SIZE_MAX;
        for (size_t i = 0; i < size && stray == SIZE_MAX; i++)
            if (!in_field(d, i) && base[i] != out[p][i])
                stray = i;
        CHECK(stray == SIZE_MAX, "cmd %u %s %s: wrote byte %zu outside its field [%zu, +%u)", cmd,
              o->name, vbuf, stray, d->off, d->size);
        CHECK(value_is(o, d, out[p] + d->off, val, (const char *const *)&argv[1], choice),
              "cmd %u %s %s: the field holds the value given", cmd, o->name, vbuf);
        free(base);
    }
    /* Whatever was there before, the field ends the same: written whole. */
    if (out[0] && out[1])
        CHECK(!memcmp(out[0] + d->off, out[1] + d->off, d->size), "cmd %u %s: the whole field", cmd,
              o->name);
    free(out[0]);
    free(out[1]);
    free(v);
    free(v0);
}

static void test_walk(void) {
    int n = 0;
    const cli_opt *t = cli_opts_table(&n);
    int walked = 0;
    for (int ix = 0; ix < CLI_N_CMDS; ix++)
        for (int k = 0; k < n; k++) {
            const cli_opt *o = &t[k];
            if (!(o->cmds & CMDS[ix]))
                continue;
            CHECK(o->to[ix].ctype != CLI_C_NONE, "cmd %u %s has a field", CMDS[ix], o->name);
            char val[256];
            if (o->type == T_FLAG) {
                walk_one(CMDS[ix], ix, o, NULL, 0);
            } else if (o->type == T_CHOICE) {
                for (int c = 0; c < count_choices(o->choices); c++) {
                    nth_choice(o->choices, c, val, sizeof val);
                    walk_one(CMDS[ix], ix, o, val, c);
                }
            } else {
                a_value(o, val, sizeof val);
                walk_one(CMDS[ix], ix, o, val, 0);
            }
            walked++;
        }
    CHECK(walked > 70, "%d (subcommand, option) pairs walked", walked);
}

static void serve_defaults(srv_app_config *c) {
    memset(c, 0, sizeof *c);
    c->engine = sched_engine_config_default();
    c->http = srv_http_config_default();
}

/* Every serve option at once, none at its default, read back field by
 * field: the mapping the hand-written copies made. */
static void test_serve_line(void) {
    char *argv[] = {"--model",
                    "m.gguf",
                    "--dummy-weights",
                    "llama-3-8b",
                    "--tokenizer",
                    "t.gguf",
                    "--served-model-name",
                    "nm",
                    "--weights",
                    "int8",
                    "--device",
                    "cuda",
                    "--gpu-memory-utilization",
                    "0.5",
                    "--no-cuda-graphs",
                    "--threads",
                    "3",
                    "--ctx",
                    "777",
                    "--max-num-seqs",
                    "5",
                    "--max-num-batched-tokens",
                    "99",
                    "--kv-cache-bytes",
                    "2M",
                    "--block-size",
                    "32",
                    "--no-prefix-caching",
                    "--no-kv-window-release",
                    "--enable-prefix-caching",
                    "--kv-cache-dtype",
                    "f32",
                    "--scheduling-policy",
                    "priority",
                    "--priority-aging",
                    "2.5",
                    "--request-timeout",
                    "7.5",
                    "--max-queued-requests",
                    "11",
                    "--max-queued-tokens",
                    "12345",
                    "--chat-template",
                    "gemma",
                    "--embeddings",
                    "--pooling",
                    "mean",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    "9999",
                    "--api-key",
                    "sk-1",
                    "--api-key",
                    "sk-2",
                    "--api-key-file",
                    "keys.txt",
                    "--limits-file",
                    "limits.txt",
                    "--metrics-auth",
                    "--allowed-origins",
                    "*",
                    "--drain-timeout",
                    "4",
                    "--log-format",
                    "json",
                    "--gpu-metrics",
                    "off",
                    "--gpu-metrics-interval",
                    "0.25",
                    "--audit-log",
                    "a.log",
                    "--audit-log-content",
                    "--audit-log-flush-ms",
                    "17",
                    "--max-body-bytes",
                    "1000",
                    "--max-header-bytes",
                    "2000",
                    "--max-headers",
                    "30",
                    "--max-connections",
                    "40",
                    "--head-timeout-ms",
                    "50",
                    "--body-timeout-ms",
                    "60",
                    "--body-total-timeout-ms",
                    "70",
                    "--keepalive-timeout-ms",
                    "80",
                    "--max-requests-per-conn",
                    "90",
                    "--max-write-queue-bytes",
                    "8K"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    cli_vals v;
    srv_app_config c;
    serve_defaults(&c);
    CHECK_COND(cli_opts_parse(CLI_SERVE, argc, argv, &v) == CLI_OK);
    CHECK_COND(cli_opts_fill(CLI_SERVE, &v, &c, sizeof c) == 0);
    CHECK(!strcmp(c.model_path, "m.gguf") && !strcmp(c.dummy, "llama-3-8b") &&
              !strcmp(c.tokenizer, "t.gguf") && !strcmp(c.served_name, "nm"),
          "model, dummy, tokenizer, name");
    CHECK(c.engine.weights == MODEL_WEIGHTS_INT8 && c.engine.device == MODEL_DEVICE_CUDA &&
              c.engine.gpu_memory_utilization == 0.5 && c.engine.cuda_graphs == 0,
          "weights, device, gpu memory, graphs");
    CHECK(c.engine.n_threads == 3 && c.engine.max_ctx == 777 && c.engine.max_seqs == 5 &&
              c.engine.max_batch_tokens == 99 && c.engine.kv_cache_bytes == 2 << 20 &&
              c.engine.block_size == 32,
          "threads, ctx, seqs, batch, kv bytes, block");
    CHECK(c.engine.prefix_caching == 0, "--no-prefix-caching wins over --enable-prefix-caching");
    CHECK(c.engine.no_window_release == 1 && c.engine.kv_dtype == KERN_KV_F32,
          "window release, kv f32");
    CHECK(c.engine.sched_policy == SCHED_POLICY_PRIORITY && c.engine.priority_aging_s == 2.5 &&
              c.request_timeout_s == 7.5 && c.engine.max_waiting == 11 &&
              c.engine.max_waiting_tokens == 12345,
          "scheduling");
    CHECK(!strcmp(c.chat_template, "gemma") && c.embeddings == 1 && c.pooling == SCHED_POOL_MEAN,
          "template, embeddings, pooling");
    CHECK(!strcmp(c.host, "0.0.0.0") && c.port == 9999, "host, port");
    CHECK(c.n_cli_keys == 2 && c.cli_keys && !strcmp(c.cli_keys[0], "sk-1") &&
              !strcmp(c.cli_keys[1], "sk-2"),
          "the keys, in order");
    CHECK(!strcmp(c.key_file, "keys.txt") && !strcmp(c.limits_file, "limits.txt") &&
              c.metrics_auth == 1 && !strcmp(c.http.allowed_origins, "*") && c.drain_timeout_s == 4,
          "files, metrics auth, origins, drain");
    CHECK(c.http.log_format == SRV_LOG_JSON && c.gpu_metrics == SRV_GPU_METRICS_OFF &&
              c.gpu_metrics_interval_s == 0.25,
          "log format, gpu metrics");
    CHECK(!strcmp(c.audit_log, "a.log") && c.audit_content == 1 && c.audit_flush_ms == 17, "audit");
    CHECK(c.http.max_body_bytes == 1000 && c.http.max_header_bytes == 2000 &&
              c.http.max_headers == 30 && c.http.max_connections == 40 &&
              c.http.head_timeout_ms == 50 && c.http.body_idle_timeout_ms == 60 &&
              c.http.body_total_timeout_ms == 70 && c.http.keepalive_idle_ms == 80 &&
              c.http.max_requests_per_conn == 90 && c.http.max_write_queue_bytes == 8192,
          "HTTP limits");

    /* Either order, no wins; alone, each sets its value; the defaults stay. */
    char *a[] = {"--no-prefix-caching", "--enable-prefix-caching"};
    serve_defaults(&c);
    c.engine.prefix_caching = 1;
    CHECK_COND(cli_opts_parse(CLI_SERVE, 2, a, &v) == CLI_OK &&
               cli_opts_fill(CLI_SERVE, &v, &c, sizeof c) == 0 && c.engine.prefix_caching == 0);
    serve_defaults(&c);
    c.engine.prefix_caching = 0;
    CHECK_COND(cli_opts_parse(CLI_SERVE, 1, a + 1, &v) == CLI_OK &&
               cli_opts_fill(CLI_SERVE, &v, &c, sizeof c) == 0 && c.engine.prefix_caching == 1);
    srv_app_config d;
    serve_defaults(&c);
    serve_defaults(&d);
    CHECK_COND(cli_opts_parse(CLI_SERVE, 0, NULL, &v) == CLI_OK &&
               cli_opts_fill(CLI_SERVE, &v, &c, sizeof c) == 0 && !memcmp(&c, &d, sizeof c) &&
               c.cli_keys == NULL && c.n_cli_keys == 0);
    /* The wrong configuration is refused, not written. */
    cli_generate_opts g;
    CHECK_COND(cli_opts_fill(CLI_SERVE, &v, &g, sizeof g) < 0);
}

static void test_other_lines(void) {
    cli_vals v;
    char *gen[] = {"-m",
                   "g.gguf",
                   "-p",
                   "hi",
                   "--prompt-ids",
                   "1 2",
                   "-n",
                   "7",
                   "--temp",
                   "0.25",
                   "--seed",
                   "18446744073709551615",
                   "--top-k",
                   "3",
                   "--top-p",
                   "0.5",
                   "--min-p",
                   "0.125",
                   "--repeat-penalty",
                   "1.5",
                   "--repeat-last-n",
                   "9",
                   "--presence-penalty",
                   "-1",
                   "--frequency-penalty",
                   "0.75",
                   "--dump-logits",
                   "l.bin",
                   "--ignore-eos",
                   "--special",
                   "--no-bos",
                   "--weights",
                   "f16",
                   "--device",
                   "auto",
                   "--no-cuda-graphs",
                   "-t",
                   "2",
                   "-c",
                   "64"};
    cli_generate_opts g = {.cuda_graphs = 1};
    CHECK_COND(cli_opts_parse(CLI_GENERATE, (int)(sizeof gen / sizeof *gen), gen, &v) == CLI_OK);
    CHECK_COND(cli_opts_fill(CLI_GENERATE, &v, &g, sizeof g) == 0);
    CHECK(!strcmp(g.model, "g.gguf") && !strcmp(g.prompt, "hi") && !strcmp(g.prompt_ids, "1 2") &&
              g.n_predict == 7 && !strcmp(g.dump_logits, "l.bin") && g.ignore_eos && g.special &&
              g.no_bos && g.threads == 2 && g.ctx == 64,
          "generate: strings and counts");
    CHECK(g.sampling.temperature == 0.25f && g.sampling.seed == UINT64_MAX &&
              g.sampling.top_k == 3 && g.sampling.top_p == 0.5f && g.sampling.min_p == 0.125f &&
              g.sampling.repetition_penalty == 1.5f && g.sampling.penalty_last_n == 9 &&
              g.sampling.presence_penalty == -1.0f && g.sampling.frequency_penalty == 0.75f,
          "generate: sampling");
    CHECK(g.weights == MODEL_WEIGHTS_F16 && g.device == MODEL_DEVICE_AUTO && g.cuda_graphs == 0,
          "generate: weights, device, graphs");

    char *bench[] = {"--dummy-weights",
                     "stories110m",
                     "--tokenizer",
                     "t.gguf",
                     "-p",
                     "16",
                     "-n",
                     "8",
                     "-r",
                     "2",
                     "--kv-cache-dtype",
                     "f32",
                     "--weights",
                     "f32",
                     "--device",
                     "cpu",
                     "--no-cuda-graphs",
                     "--threads",
                     "4"};
    cli_bench_opts b = {
        .n_pp = 512, .n_tg = 128, .reps = 3, .cuda_graphs = 1, .kv_dtype = KERN_KV_F16};
    CHECK_COND(cli_opts_parse(CLI_BENCH, (int)(sizeof bench / sizeof *bench), bench, &v) == CLI_OK);
    CHECK_COND(cli_opts_fill(CLI_BENCH, &v, &b, sizeof b) == 0);
    CHECK(!b.model && !strcmp(b.dummy, "stories110m") && !strcmp(b.tokenizer, "t.gguf") &&
              b.n_pp == 16 && b.n_tg == 8 && b.reps == 2 && b.kv_dtype == KERN_KV_F32 &&
              b.weights == MODEL_WEIGHTS_F32 && b.device == MODEL_DEVICE_CPU &&
              b.cuda_graphs == 0 && b.threads == 4,
          "bench");

    char *tok[] = {"--model", "m.gguf", "-p", "text", "--special", "--no-bos"};
    cli_tokenize_opts tk = {0};
    CHECK_COND(cli_opts_parse(CLI_TOKENIZE, 6, tok, &v) == CLI_OK &&
               cli_opts_fill(CLI_TOKENIZE, &v, &tk, sizeof tk) == 0);
    CHECK(!strcmp(tk.model, "m.gguf") && !strcmp(tk.text, "text") && tk.special && tk.no_bos,
          "tokenize");

    char *conv[] = {"--model", "x.bin", "--tokenizer", "tok.bin", "--out", "x.gguf"};
    cli_convert_opts cv = {0};
    CHECK_COND(cli_opts_parse(CLI_CONVERT, 6, conv, &v) == CLI_OK &&
               cli_opts_fill(CLI_CONVERT, &v, &cv, sizeof cv) == 0);
    CHECK(!strcmp(cv.model, "x.bin") && !strcmp(cv.tokenizer, "tok.bin") &&
              !strcmp(cv.out, "x.gguf"),
          "convert-llama2c");
}

/* --help lists every dummy shape of the architecture table (the list is not
 * written by hand anywhere). */
static void test_help_dummy_names(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL, "open_memstream");
    if (!f)
        return;
    cli_opts_help(CLI_GENERATE, f);
    fclose(f);
    int n = 0;
    for (const char *const *name = model_dummy_configs; *name; name++, n++)
        CHECK(strstr(buf, *name) != NULL, "generate --help lists %s", *name);
    CHECK(n >= 9, "%d dummy shapes", n);
    free(buf);
}

int main(void) {
    test_table_check();
    test_walk();
    test_serve_line();
    test_other_lines();
    test_help_dummy_names();
    return BT_SUMMARY("test_cli_opts");
}
