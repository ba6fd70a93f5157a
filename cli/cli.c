#include "cli/cli.h"

#include "models/model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "brisk: error: %s\n", msg);
}

int cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error("%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_bytes(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int ok = !errno && end != s && v >= 0 && s[0] >= '0' && s[0] <= '9';
    int shift = 0;
    if (ok && *end) {
        const char *units = "KMGT";
        const char *u = strchr(units, *end >= 'a' ? *end - 32 : *end);
        if (!u || !*u)
            ok = 0;
        else {
            shift = 10 * (int)(u - units + 1);
            end++;
            if (!strcmp(end, "i") || !strcmp(end, "iB") || !strcmp(end, "B"))
                end += strlen(end);
            ok = !*end;
        }
    }
    if (ok && shift && v > (LLONG_MAX >> shift))
        ok = 0;
    if (ok)
        v <<= shift;
    if (!ok || v < lo || v > hi) {
        cli_error(
            "%s: '%s' is not a byte count in [%lld, %lld] (digits with an optional K, M, G or T)",
            flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_error("%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_error("%s: '%s' is not a non-negative integer", flag, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error("%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

const char *cli_default_model(void) {
    static char path[4096];
    const char *env = getenv("BRISK_MODEL");
    if (env && *env)
        return env;
    const char *cache = getenv("BRISK_CACHE_DIR");
    const char *home = getenv("HOME");
    if (cache && *cache)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else if (home && *home)
        snprintf(path, sizeof path, "%s/.cache/brisk/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        return NULL;
    struct stat sb;
    return stat(path, &sb) == 0 ? path : NULL;
}

int cli_check_dummy(const char *dummy, const char *tokenizer, const char *model_path) {
    if (!dummy) {
        if (tokenizer) {
            cli_error(
                "--tokenizer only goes with --dummy-weights (a model file has its own vocabulary)");
            return -1;
        }
        return 0;
    }
    if (model_path) {
        cli_error("--model and --dummy-weights exclude each other");
        return -1;
    }
    for (int i = 0; model_dummy_configs[i]; i++)
        if (!strcmp(dummy, model_dummy_configs[i]))
            return 0;
    char list[256] = "";
    for (int i = 0; model_dummy_configs[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 model_dummy_configs[i]);
    cli_error("--dummy-weights: unknown configuration '%s' (known: %s)", dummy, list);
    return -1;
}
