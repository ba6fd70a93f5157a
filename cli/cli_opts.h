/* cli_opts.h - every command-line option of every subcommand in one table
 * (cli_opts.c): its name and aliases, type, range or choices, help line and
 * the subcommands that take it. One parser reads the environment and then
 * the arguments into a cli_vals, validating each value; one printer makes
 * each subcommand's --help from the same table (as Redis's config table).
 *
 * Environment: every option can also come from BRISK_<NAME> (the long name
 * without "--", upper case, '-' as '_': --max-num-seqs is
 * BRISK_MAX_NUM_SEQS; a flag takes 1/true/yes/on or 0/false/no/off), which
 * is what Kubernetes manifests set; the command line wins. --model's
 * variable, BRISK_MODEL, is the default model path (cli_default_model), so
 * that --dummy-weights still overrides it. */
#ifndef CLI_OPTS_H
#define CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

/* Subcommands, as bits: a table row lists the ones that take it. */
enum {
    CLI_SERVE = 1,
    CLI_GENERATE = 2,
    CLI_BENCH = 4,
    CLI_TOKENIZE = 8,
    CLI_CONVERT = 16,
};

typedef enum {
    /* model and engine */
    O_MODEL,
    O_DUMMY,
    O_TOKENIZER,
    O_WEIGHTS,
    O_DEVICE,
    O_GPU_MEM,
    O_NO_GRAPHS,
    O_THREADS,
    O_CTX,
    O_MAX_SEQS,
    O_MAX_BATCH,
    O_KV_BYTES,
    O_BLOCK_SIZE,
    O_NO_PREFIX,
    O_ENABLE_PREFIX,
    O_NO_WINDOW_RELEASE,
    O_KV_DTYPE,
    O_MAX_QUEUED,
    O_SCHED_POLICY,
    O_PRIORITY_AGING,
    O_REQUEST_TIMEOUT,
    O_MAX_QUEUED_TOKENS,
    O_CHAT_TEMPLATE,
    O_EMBEDDINGS,
    O_POOLING,
    O_SERVED_NAME,
    O_HOST,
    O_PORT,
    /* security and operations */
    O_API_KEY,
    O_API_KEY_FILE,
    O_LIMITS_FILE,
    O_METRICS_AUTH,
    O_ALLOWED_ORIGINS,
    O_DRAIN,
    O_LOG_FORMAT,
    O_GPU_METRICS,
    O_GPU_METRICS_INTERVAL,
    O_AUDIT_LOG,
    O_AUDIT_CONTENT,
    O_AUDIT_FLUSH,
    /* HTTP limits */
    O_MAX_BODY,
    O_MAX_HEADER_BYTES,
    O_MAX_HEADERS,
    O_MAX_CONN,
    O_HEAD_TO,
    O_BODY_TO,
    O_BODY_TOTAL_TO,
    O_KEEPALIVE,
    O_MAX_REQ_PER_CONN,
    O_MAX_WQ,
    /* generate */
    O_PROMPT,
    O_PROMPT_IDS,
    O_N_PREDICT,
    O_TEMP,
    O_SEED,
    O_TOP_K,
    O_TOP_P,
    O_MIN_P,
    O_REPEAT_PENALTY,
    O_REPEAT_LAST_N,
    O_PRESENCE,
    O_FREQUENCY,
    O_DUMP_LOGITS,
    O_IGNORE_EOS,
    O_SPECIAL,
    O_NO_BOS,
    /* bench */
    O_N_PROMPT,
    O_N_GEN,
    O_REPS,
    /* tokenize, convert-llama2c */
    O_TEXT,
    O_OUT,
    O_N
} cli_opt_id;

#define CLI_MAX_KEYS 64

/* The parsed values, by option id. given[id] says whether the environment
 * or the command line set it; the value is in the member for its type:
 * s (strings and choices), i (integers, byte counts, flags: 1), f (floats),
 * u (unsigned 64-bit). Strings point into argv or the environment. */
typedef struct cli_vals {
    unsigned char given[O_N];
    const char *s[O_N];
    long long i[O_N];
    double f[O_N];
    uint64_t u[O_N];
    const char *keys[CLI_MAX_KEYS]; /* --api-key, each time given (BRISK_API_KEY first) */
    int n_keys;
} cli_vals;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

/* Parses the environment, then argv[0..argc), for subcommand cmd (a CLI_*
 * bit). CLI_OK: *v holds the values. CLI_HELP: --help/-h was given and the
 * help went to stdout. CLI_USAGE: an unknown option (one error line and the
 * usage line on stderr), or a missing or invalid value (one error line). */
int cli_opts_parse(unsigned cmd, int argc, char **argv, cli_vals *v);

/* The help of subcommand cmd, from the table. */
void cli_opts_help(unsigned cmd, FILE *f);

#endif
