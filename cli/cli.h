/* cli.h - the brisk subcommands and the small argument helpers they share.
 * Each cmd_* takes the arguments after the subcommand name and returns the
 * process exit code: 0 success, 1 runtime error, 2 usage error. */
#ifndef CLI_H
#define CLI_H

#include <stdint.h>

#include "models/backend.h"
#include "models/model.h"
#include "models/sampler.h"

/* What each subcommand's options fill (cli_opts.c's table holds, per option,
 * the field it goes to; `brisk serve` fills srv_app_config). The subcommand
 * sets the defaults, then cli_opts_fill overwrites the fields of the options
 * given. Strings point into argv or the environment (borrowed). */
typedef struct cli_generate_opts {
    const char *model, *prompt, *prompt_ids, *dump_logits, *dummy, *tokenizer;
    long n_predict, threads, ctx;
    int ignore_eos, special, no_bos;
    model_weights_fmt weights;
    model_sampling sampling;
    model_device device;
    int cuda_graphs;        /* 0: --no-cuda-graphs */
    kern_kv_dtype kv_dtype; /* --kv-cache-dtype (f16) */
} cli_generate_opts;

typedef struct cli_bench_opts {
    const char *model, *dummy, *tokenizer;
    model_weights_fmt weights;
    model_device device;
    long threads, n_pp, n_tg, reps;
    long depth;             /* --depth: positions of context before tg (llama-bench's -d) */
    int cuda_graphs;        /* 0: --no-cuda-graphs */
    kern_kv_dtype kv_dtype; /* --kv-cache-dtype (f16: brisk serve's default, as llama-bench's) */
} cli_bench_opts;

typedef struct cli_tokenize_opts {
    const char *model, *text;
    int special, no_bos;
} cli_tokenize_opts;

typedef struct cli_convert_opts {
    const char *model, *tokenizer, *out;
} cli_convert_opts;

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Prints "brisk: error: <msg>" as one line on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict number parsing: the whole string must be a number in [lo, hi].
 * Returns 0, or prints an error naming the flag and returns -1. */
int cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
int cli_parse_u64(const char *flag, const char *s, uint64_t *out);
/* A byte count: digits with an optional K, M, G or T suffix (powers of 1024,
 * an optional trailing "i"/"iB"/"B"), in [lo, hi]. */
int cli_parse_bytes(const char *flag, const char *s, long long lo, long long hi, long long *out);

/* Returns the value after argv[*i] (advancing *i) or prints a usage error
 * and returns NULL when the flag has no value. */
const char *cli_value(int argc, char **argv, int *i);

/* --dummy-weights / --tokenizer, shared by serve, generate and bench: after
 * parsing, checks that dummy (may be NULL) names a known shape, that
 * tokenizer is only given with it and that --model is not; prints the error
 * and returns -1 otherwise. */
int cli_check_dummy(const char *dummy, const char *tokenizer, const char *model_path);

/* The default model path: $BRISK_MODEL, else the cache path the fetch script
 * uses, if that file exists; else NULL. */
const char *cli_default_model(void);

#endif
