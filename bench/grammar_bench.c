/* grammar_bench.c - the grammar engine's costs on a real vocabulary: for each
 * constraint of a list, the time to turn it into GBNF and compile it, then a
 * walk of a matcher from a cold grammar (no masks cached) timing every mask.
 * Built by CMake with the rest (build/bin/grammar_bench); driven by
 * bench/structured_bench.py, which feeds it the schema corpus of
 * tests/integration/test_structured.py.
 *
 * Usage: grammar_bench MODEL.gguf CASES.json [--steps N] [--reps R] [--seed S]
 *        [--trace]
 * CASES.json is a list of objects, each one constraint: {"schema": {...}},
 * {"gbnf": "..."}, {"regex": "..."} or {"json_object": true}, with an
 * optional "name" and "text" (the walk then takes the tokens of that text, in
 * order, as long as the grammar allows them; without one it takes a seeded
 * random allowed token each step). Prints one JSON object: per case the
 * conversion and compile times and the first mask's time from a cold
 * grammar (medians of R), every mask's time along a walk (total, p50, p99, max), the
 * steps walked, the mask cache's hits and the masks' work units (p50, max;
 * models/grammar.h's max_work). Times are wall milliseconds on one thread. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/brisk_file.h"
#include "models/gguf.h"
#include "models/grammar.h"
#include "models/tokenizer.h"
#include "server/api/srv_schema.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[0, n) (sorted in place), nearest rank. */
static double quantile(double *v, int n, double q) {
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(q * n + 0.999999) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static uint64_t rng_state;
static int g_trace; /* --trace: one line per mask on stderr */
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* The case's GBNF (malloc'd) or NULL with err set. */
static char *case_gbnf(const cJSON *c, char *err, size_t err_len) {
    const cJSON *x;
    char *out = NULL;
    if ((x = cJSON_GetObjectItemCaseSensitive(c, "schema"))) {
        if (srv_schema_to_gbnf(x, &out, err, err_len) < 0)
            return NULL;
        return out;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(c, "regex")) && cJSON_IsString(x)) {
        if (model_grammar_regex_text(x->valuestring, strlen(x->valuestring), &out, err, err_len) <
            0)
            return NULL;
        return out;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(c, "gbnf")) && cJSON_IsString(x))
        return strdup(x->valuestring);
    if (cJSON_GetObjectItemCaseSensitive(c, "json_object"))
        return model_grammar_json_text(1);
    snprintf(err, err_len, "a case needs schema, regex, gbnf or json_object");
    return NULL;
}

static cJSON *run_case(const cJSON *c, const tok_vocab *v, const model_grammar_vocab *gv, int steps,
                       int reps) {
    cJSON *r = cJSON_CreateObject();
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (cJSON_IsString(name))
        cJSON_AddStringToObject(r, "name", name->valuestring);
    char err[256] = "";
    double *conv = malloc((size_t)reps * sizeof *conv), *comp = malloc((size_t)reps * sizeof *comp);
    double *firsts = calloc((size_t)reps, sizeof *firsts);
    int nv = tok_n_vocab(v);
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, sizeof *mask);
    char *text = NULL;
    model_grammar *g = NULL;
    for (int i = 0; i < reps; i++) {
        double t0 = now_ms();
        free(text);
        text = case_gbnf(c, err, sizeof err);
        double t1 = now_ms();
        model_grammar_unref(g);
        g = NULL;
        if (text && model_grammar_compile(text, strlen(text), NULL, &g, err, sizeof err) < 0)
            g = NULL;
        double t2 = now_ms();
        conv[i] = t1 - t0;
        comp[i] = t2 - t1;
        if (!g)
            break;
        /* The first mask of each repetition's grammar (cold: its own caches
         * are empty), on a grammar compiled apart so the walk below starts
         * cold too. */
        model_grammar *g1 = NULL;
        if (mask && model_grammar_compile(text, strlen(text), NULL, &g1, err, sizeof err) == 0) {
            model_grammar_matcher *m1 = model_grammar_matcher_create(g1, gv, NULL);
            double t3 = now_ms();
            if (m1)
                model_grammar_mask(m1, mask);
            firsts[i] = now_ms() - t3;
            model_grammar_matcher_free(m1);
        }
        model_grammar_unref(g1);
    }
    if (!g) {
        cJSON_AddStringToObject(r, "error", err);
        free(mask);
        free(firsts);
        free(conv);
        free(comp);
        free(text);
        return r;
    }
    cJSON_AddNumberToObject(r, "gbnf_bytes", (double)strlen(text));
    cJSON_AddNumberToObject(r, "rules", model_grammar_n_rules(g));
    cJSON_AddNumberToObject(r, "convert_ms", quantile(conv, reps, 0.5));
    cJSON_AddNumberToObject(r, "compile_ms", quantile(comp, reps, 0.5));
    /* The walk: from the last compiled grammar, whose cache is empty. */
    model_grammar_matcher *m = model_grammar_matcher_create(g, gv, NULL);
    double *ms = malloc(((size_t)steps + 1) * sizeof *ms);
    double *units = malloc(((size_t)steps + 1) * sizeof *units);
    int32_t *want = NULL;
    int n_want = -1;
    const cJSON *walk_text = cJSON_GetObjectItemCaseSensitive(c, "text");
    if (cJSON_IsString(walk_text)) {
        size_t len = strlen(walk_text->valuestring);
        want = malloc((len + 1) * sizeof *want);
        n_want = want ? tok_encode(v, walk_text->valuestring, len, 0, want, (int)len + 1) : -1;
    }
    int n = 0, rc = 0, allowed_sum = 0;
    double acc_ms = 0, acc_max = 0;
    double first = 0;
    while (m && mask && ms && units && n < steps) {
        double t0 = now_ms();
        rc = model_grammar_mask(m, mask);
        ms[n] = now_ms() - t0;
        units[n] = (double)model_grammar_last_work(m);
        if (g_trace)
            fprintf(stderr, "step %d: %.3f ms, %d allowed, %lld units\n", n, ms[n], rc,
                    model_grammar_last_work(m));
        if (n == 0)
            first = ms[0];
        n++;
        if (rc <= 0)
            break;
        allowed_sum += rc;
        int32_t id = -1;
        if (n_want >= 0) {
            if (n - 1 >= n_want)
                break;
            id = want[n - 1];
            if (!(mask[id >> 5] >> (id & 31) & 1u))
                break; /* the text leaves the grammar here */
        } else {
            for (int tries = 0; tries < 64 && id < 0; tries++) {
                int pick = (int)rnd((uint32_t)rc);
                for (int k = 0; k < nv; k++)
                    if ((mask[k >> 5] >> (k & 31) & 1u) && pick-- == 0) {
                        id = k;
                        break;
                    }
                if (id >= 0 && tok_is_eog(v, id) && rc > 1)
                    id = -1;
            }
        }
        if (id < 0 || tok_is_eog(v, id))
            break;
        double ta = now_ms();
        int arc = model_grammar_accept(m, id);
        acc_ms += now_ms() - ta;
        acc_max = now_ms() - ta > acc_max ? now_ms() - ta : acc_max;
        if (arc < 0 || model_grammar_finished(m))
            break;
    }
    long long lookups = 0, hits = 0;
    model_grammar_cache_counts(g, &lookups, &hits);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += ms[i];
    cJSON_AddNumberToObject(r, "first_mask_ms", quantile(firsts, reps, 0.5));
    cJSON_AddNumberToObject(r, "walk_first_mask_ms", first);
    cJSON_AddNumberToObject(r, "masks", n);
    cJSON_AddNumberToObject(r, "mask_ms_total", total);
    cJSON_AddNumberToObject(r, "mask_ms_p50", quantile(ms, n, 0.5));
    cJSON_AddNumberToObject(r, "mask_ms_p99", quantile(ms, n, 0.99));
    cJSON_AddNumberToObject(r, "mask_ms_max", n ? ms[n - 1] : 0);
    cJSON_AddNumberToObject(r, "mask_cache_hits", (double)hits);
    cJSON_AddNumberToObject(r, "accept_ms_mean", n ? acc_ms / n : 0);
    cJSON_AddNumberToObject(r, "accept_ms_max", acc_max);
    cJSON_AddNumberToObject(r, "work_units_p50", quantile(units, n, 0.5));
    cJSON_AddNumberToObject(r, "work_units_max", n ? units[n - 1] : 0);
    cJSON_AddNumberToObject(r, "allowed_mean", n ? (double)allowed_sum / n : 0);
    if (rc < 0)
        cJSON_AddNumberToObject(r, "mask_error", rc);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    free(mask);
    free(ms);
    free(units);
    free(want);
    free(conv);
    free(comp);
    free(firsts);
    free(text);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: grammar_bench MODEL.gguf CASES.json [--steps N] [--reps R] "
                        "[--seed S]\n");
        return 2;
    }
    int steps = 128, reps = 5;
    rng_state = 88172645463325252ull;
    for (int i = 3; i < argc; i++)
        g_trace |= !strcmp(argv[i], "--trace");
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--trace"))
            i--;
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            rng_state = strtoull(argv[i + 1], NULL, 10) | 1;
    }
    if (steps < 1 || reps < 1) {
        fprintf(stderr, "grammar_bench: --steps and --reps must be >= 1\n");
        return 2;
    }
    char err[256];
    gguf_file *gf = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(argv[1], &gf, err, sizeof err) < 0 ||
        tok_vocab_create_from_gguf(gf, &v, err, sizeof err) < 0) {
        fprintf(stderr, "grammar_bench: %s\n", err);
        return 1;
    }
    char *json = NULL;
    size_t len = 0;
    if (brisk_file_read(argv[2], 64u << 20, "cases file", &json, &len, err, sizeof err) < 0) {
        fprintf(stderr, "grammar_bench: %s\n", err);
        return 1;
    }
    cJSON *cases = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "grammar_bench: %s is not a JSON list\n", argv[2]);
        return 1;
    }
    double t0 = now_ms();
    model_grammar_vocab *gv = model_grammar_vocab_create(v);
    double t_trie = now_ms() - t0;
    cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "cases");
    cJSON_AddNumberToObject(out, "n_vocab", tok_n_vocab(v));
    cJSON_AddNumberToObject(out, "trie_ms", t_trie);
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) cJSON_AddItemToArray(arr, run_case(c, v, gv, steps, reps));
    char *s = cJSON_Print(out);
    puts(s);
    free(s);
    cJSON_Delete(out);
    cJSON_Delete(cases);
    free(json);
    model_grammar_vocab_free(gv);
    tok_vocab_free(v);
    gguf_close(gf);
    return 0;
}
