/* cli_opts.h - every command-line option of every subcommand in one table
 * (cli_opts.c): its name and aliases, type, range or choices, help line, the
 * subcommands that take it and, for each of them, the field it fills. One
 * parser reads the environment and then the arguments into a cli_vals,
 * validating each value; one loop copies the values given into the
 * subcommand's configuration (cli_opts_fill); one printer makes each
 * subcommand's --help from the same table (as Redis's config table).
 *
 * A new option is one row: its description and a destination per subcommand
 * (CLI_FIELD and friends below, which take the field's C type from the field
 * itself), plus the field. tests/unit/test_cli_opts.c walks the table: every
 * row fills its field, only its field, with a value its type can hold.
 *
 * Environment: every option can also come from BRISK_<NAME> (the long name
 * without "--", upper case, '-' as '_': --max-num-seqs is
 * BRISK_MAX_NUM_SEQS; a flag takes 1/true/yes/on or 0/false/no/off), which
 * is what Kubernetes manifests set; the command line wins. --model's
 * variable, BRISK_MODEL, is the default model path (cli_default_model), so
 * that --dummy-weights still overrides it. */
#ifndef CLI_OPTS_H
#define CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Subcommands, as bits: a table row lists the ones that take it. Each has
 * an index (its bit's position) into a row's destinations. */
enum {
    CLI_SERVE = 1,
    CLI_GENERATE = 2,
    CLI_BENCH = 4,
    CLI_TOKENIZE = 8,
    CLI_CONVERT = 16,
};
enum { CLI_IX_SERVE, CLI_IX_GENERATE, CLI_IX_BENCH, CLI_IX_TOKENIZE, CLI_IX_CONVERT, CLI_N_CMDS };

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
    /* cli_opts_fill goes in this order, so that --no-prefix-caching wins
     * over --enable-prefix-caching (both write prefix_caching). */
    O_ENABLE_PREFIX,
    O_NO_PREFIX,
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
    O_GENERATION_CONFIG,
    O_SPEC_CONFIG,
    O_MODEL_DRAFT,
    O_DRAFT_MAX,
    O_DRAFT_MIN,
    O_SPEC_SUFFIX_BYTES,
    O_SPEC_MAX_BATCH,
    O_SPEC_FIXED,
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
    O_STEP_TRACE,
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
    O_DEPTH,
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

/* Copies every value v holds (given[id]) into cfg, the configuration of
 * subcommand cmd: srv_app_config for CLI_SERVE, cli_generate_opts,
 * cli_bench_opts, cli_tokenize_opts or cli_convert_opts (cli.h), of
 * cfg_size bytes; the other fields keep what the caller set (its defaults).
 * Options go in cli_opt_id order: of two writing one field, the later wins.
 * Returns 0, or -1 (one error line printed) when cfg_size is not that of
 * cmd's configuration or a value cannot be stored: a fault of the table,
 * which cli_opts_check finds. */
int cli_opts_fill(unsigned cmd, const cli_vals *v, void *cfg, size_t cfg_size);

/* ---- the table, for cli_opts.c and the tests that walk it ---------------------- */

typedef enum { T_STR, T_INT, T_FLOAT, T_BYTES, T_FLAG, T_CHOICE, T_U64, T_KEYS } cli_opt_type;

/* The C type of a destination field; CLI_C_NONE: the row fills nothing in
 * that subcommand. */
typedef enum {
    CLI_C_NONE,
    CLI_C_STR, /* const char * (borrowed from argv or the environment) */
    CLI_C_INT,
    CLI_C_LONG,
    CLI_C_LLONG,
    CLI_C_ULONG,
    CLI_C_ULLONG,
    CLI_C_FLOAT,
    CLI_C_DOUBLE,
    CLI_C_ENUM, /* an int-sized enum: the destination's parser, or the row's vals */
    CLI_C_LIST, /* const char *const * at off and its int count at off_n */
} cli_ctype;

/* A choice's converter: parses s (one of the row's choices) into *field,
 * a module's own parser of those names (model_device_parse, ...). */
typedef int (*cli_parse_fn)(const char *s, void *field);

/* Where a row's value goes in one subcommand's configuration. */
typedef struct cli_dest {
    size_t off;          /* offsetof(config, field) */
    size_t off_n;        /* CLI_C_LIST: offsetof(config, count) */
    unsigned char size;  /* sizeof the field */
    unsigned char ctype; /* cli_ctype, taken from the field (CLI_FIELD) */
    cli_parse_fn parse;  /* CLI_C_ENUM: the converter */
} cli_dest;

/* _Generic maps the field's own type to its cli_ctype; a field of any
 * other type does not compile. Nothing is evaluated (a null base is fine). */
#define CLI_CTYPE_OF(x)                                                                            \
    _Generic((x), const char *: CLI_C_STR, int: CLI_C_INT, long: CLI_C_LONG,                    \
             long long: CLI_C_LLONG, unsigned long: CLI_C_ULONG,                                \
             unsigned long long: CLI_C_ULLONG, float: CLI_C_FLOAT, double: CLI_C_DOUBLE)
#define CLI_MEMBER(S, f) (((S *)0)->f)
/* 0, or a compile error saying msg when cond is false (usable in an
 * initializer, where _Static_assert alone cannot go). */
#define CLI_CHECK0(cond, msg)                                                                      \
    (0 * sizeof(struct {                                                                           \
         _Static_assert(cond, msg);                                                                \
         int x;                                                                                    \
     }))
/* 1 when x has type T. */
#define CLI_IS(x, T) _Generic((x), T : 1, default : 0)

/* Field f of configuration S, of a plain type (CLI_CTYPE_OF). */
#define CLI_FIELD(S, f)                                                                            \
    {                                                                                              \
        .off = offsetof(S, f), .size = sizeof CLI_MEMBER(S, f),                                    \
        .ctype = CLI_CTYPE_OF(CLI_MEMBER(S, f))                                                    \
    }
/* Field f of S, an enum that the converter `parser` (made by CLI_PARSER)
 * fills; compiles only when f has the parser's type. */
#define CLI_PARSED(S, f, parser)                                                                   \
    {                                                                                              \
        .off = offsetof(S, f) + CLI_CHECK0(CLI_IS(CLI_MEMBER(S, f), parser##_type),                \
                                           #S "." #f " is not what " #parser " writes"),           \
        .size = sizeof CLI_MEMBER(S, f), .ctype = CLI_C_ENUM, .parse = parser                      \
    }
/* Field f of S, an int-sized enum set from the row's vals. */
#define CLI_ENUM(S, f)                                                                             \
    {                                                                                              \
        .off = offsetof(S, f) +                                                                    \
               CLI_CHECK0(sizeof CLI_MEMBER(S, f) == sizeof(int), #S "." #f " is not int-sized"),  \
        .size = sizeof CLI_MEMBER(S, f), .ctype = CLI_C_ENUM                                       \
    }
/* A list of strings: the array in field f, its length in field n. */
#define CLI_LIST(S, f, n)                                                                          \
    {                                                                                              \
        .off = offsetof(S, f) + CLI_CHECK0(CLI_IS(CLI_MEMBER(S, f), const char *const *),          \
                                           #S "." #f " is not a const char *const *"),             \
        .off_n = offsetof(S, n) +                                                                  \
                 CLI_CHECK0(CLI_IS(CLI_MEMBER(S, n), int), #S "." #n " is not an int"),            \
        .size = sizeof CLI_MEMBER(S, f), .ctype = CLI_C_LIST                                       \
    }
/* Defines the converter `name` of an enum T from its module's parser
 * `int fn(const char *, T *)`. */
#define CLI_PARSER(name, T, fn)                                                                    \
    typedef T name##_type;                                                                         \
    static int name(const char *s, void *field) {                                                  \
        return fn(s, (T *)field);                                                                  \
    }

/* One row: an option of the subcommands in cmds. */
typedef struct cli_opt {
    unsigned cmds; /* CLI_* bits */
    cli_opt_id id;
    const char *name;    /* the long name, "--max-num-seqs" */
    const char *aliases; /* other spellings, space-separated ("-t", "--parallel"), or NULL */
    cli_opt_type type;
    double lo, hi;       /* numbers: the range; strings: the length range (hi 0: any) */
    const char *choices; /* T_CHOICE: "a|b|c" */
    const char *meta;    /* the value's name in the help ("N", "PATH"); NULL for flags */
    const char *help;    /* one or more lines ('\n' continues) */
    const char *section; /* help heading; a row with a new heading starts it */
    /* T_CHOICE into an int field: the value of each choice, in order (n_vals
     * of them), when no module parser owns the names. */
    const int *vals;
    int n_vals;
    int clears;              /* T_FLAG: writes 0 (turns off what is on by default); else 1 */
    cli_dest to[CLI_N_CMDS]; /* by CLI_IX_*: the field in each subcommand */
} cli_opt;

/* The table (n rows), read-only. */
const cli_opt *cli_opts_table(int *n);

/* The size of subcommand cmd's configuration; 0 for an unknown cmd. */
size_t cli_opts_config_size(unsigned cmd);

/* Walks the table: every row of a subcommand has a destination there, of a
 * C type the row's type can go into (a string into const char *, a number
 * into a number whose range holds the row's), a choice into an int has a
 * value per choice, and every choice's converter accepts it. Returns 0, or
 * -1 with the first fault (the row's name) in err. */
int cli_opts_check(char *err, size_t err_len);

#endif
