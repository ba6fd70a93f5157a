/* fuzz_cli_opts.c - the option table's parser (cli/cli_opts.c) on hostile
 * command lines: byte 0 picks the subcommand, the rest is split at NUL bytes
 * into up to 64 arguments.
 *
 * Checks: the result is CLI_OK, CLI_HELP or CLI_USAGE; with CLI_OK every
 * string value is one of the arguments (or the environment, which the
 * target leaves empty of BRISK_ variables), at most CLI_MAX_KEYS keys were
 * kept, parsing the same arguments again gives the same values, and the
 * values fill the subcommand's configuration (cli_opts_fill never refuses
 * what the parser accepted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_opts.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    /* Help and usage text would flood the fuzzer's output. */
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
        return 0;
    return 0;
}

static int points_into(const char *s, char **argv, int argc) {
    for (int i = 0; i < argc; i++)
        if (s == argv[i])
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096)
        return 0;
    static const unsigned cmds[] = {CLI_SERVE, CLI_GENERATE, CLI_BENCH, CLI_TOKENIZE, CLI_CONVERT};
    unsigned cmd = cmds[data[0] % 5];
    char *buf = malloc(size);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    char *argv[64];
    int argc = 0;
    for (size_t p = 0; p < size - 1 && argc < 64;) {
        argv[argc++] = buf + p;
        p += strlen(buf + p) + 1;
    }
    cli_vals *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    if (a && b) {
        int rc = cli_opts_parse(cmd, argc, argv, a);
        if (rc != CLI_OK && rc != CLI_HELP && rc != CLI_USAGE)
            abort();
        if (rc == CLI_OK) {
            if (a->n_keys < 0 || a->n_keys > CLI_MAX_KEYS)
                abort();
            for (int k = 0; k < a->n_keys; k++)
                if (!points_into(a->keys[k], argv, argc))
                    abort();
            for (int id = 0; id < O_N; id++)
                if (a->given[id] && a->s[id] && !points_into(a->s[id], argv, argc))
                    abort();
            if (cli_opts_parse(cmd, argc, argv, b) != CLI_OK ||
                memcmp(a->given, b->given, sizeof a->given) || memcmp(a->i, b->i, sizeof a->i) ||
                memcmp(a->u, b->u, sizeof a->u))
                abort();
            size_t cfg_size = cli_opts_config_size(cmd);
            void *cfg = calloc(1, cfg_size);
            if (cfg && cli_opts_fill(cmd, a, cfg, cfg_size) != 0)
                abort();
            free(cfg);
        }
    }
    free(a), free(b), free(buf);
    return 0;
}
