/* cli_spec.c - --speculative-config and the llama.cpp draft options into
 * sched_spec_config (cli_spec.h). */
#include "cli/cli_spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* llama.cpp's --draft-max default. */
#define CLI_SPEC_DRAFT_MAX_DEFAULT 16

static int spec_fail(char *err, size_t err_len, const char *msg, const char *key) {
    snprintf(err, err_len, "--speculative-config: %s%s%s", key ? key : "", key ? ": " : "", msg);
    return -1;
}

/* An integer value of key in [lo, hi]. */
static int spec_int(const cJSON *v, const char *key, int lo, int hi, int *out, char *err,
                    size_t err_len) {
    char msg[96];
    snprintf(msg, sizeof msg, "must be an integer from %d to %d", lo, hi);
    if (!cJSON_IsNumber(v))
        return spec_fail(err, err_len, msg, key);
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return spec_fail(err, err_len, msg, key);
    *out = (int)d;
    return 0;
}

/* A number of key in (lo, hi] (lo_open) or [lo, hi]. */
static int spec_num(const cJSON *v, const char *key, double lo, int lo_open, double hi, float *out,
                    char *err, size_t err_len) {
    char msg[96];
    snprintf(msg, sizeof msg, "must be a number in %c%g, %g]", lo_open ? '(' : '[', lo, hi);
    if (!cJSON_IsNumber(v))
        return spec_fail(err, err_len, msg, key);
    double d = v->valuedouble;
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
        return spec_fail(err, err_len, msg, key);
    *out = (float)d;
    return 0;
}

/* vLLM's methods brisk does not implement, refused by name. */
static const char *const SPEC_OTHER_METHODS[] = {"eagle",          "eagle3",         "medusa",
                                                 "mlp_speculator", "deepseek_mtp",   "mtp",
                                                 "ernie_mtp",      "qwen3_next_mtp", NULL};

int cli_spec_parse_json(const char *json, sched_spec_config *out, char **model_buf, char *err,
                        size_t err_len) {
    *out = sched_spec_config_default();
    *model_buf = NULL;
    if (!json)
        return spec_fail(err, err_len, "missing", NULL);
    size_t len = strnlen(json, CLI_SPEC_JSON_MAX + 1);
    if (len > CLI_SPEC_JSON_MAX) {
        char msg[64];
        snprintf(msg, sizeof msg, "longer than %d bytes", CLI_SPEC_JSON_MAX);
        return spec_fail(err, err_len, msg, NULL);
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return spec_fail(err, err_len, "not a JSON object", NULL);
    }
    int rc = 0, have_n = 0, have_min = 0, have_max = 0, have_method = 0;
    const char *draft = NULL;
    for (const cJSON *it = root->child; it && rc == 0; it = it->next) {
        const char *k = it->string ? it->string : "";
        for (const cJSON *p = root->child; p != it; p = p->next)
            if (p->string && !strcmp(p->string, k)) {
                rc = spec_fail(err, err_len, "given twice", k);
                break;
            }
        if (rc)
            break;
        if (!strcmp(k, "method")) {
            have_method = 1;
            const char *m = cJSON_GetStringValue(it);
            if (!m) {
                rc = spec_fail(err, err_len, "must be a string", k);
            } else if (!strcmp(m, "ngram") || !strcmp(m, "[ngram]")) {
                out->method = SCHED_SPEC_NGRAM;
            } else if (!strcmp(m, "suffix")) {
                out->method = SCHED_SPEC_SUFFIX;
            } else if (!strcmp(m, "draft_model")) {
                out->method = SCHED_SPEC_DRAFT;
            } else {
                int known = 0;
                for (int i = 0; SPEC_OTHER_METHODS[i]; i++)
                    known |= !strcmp(m, SPEC_OTHER_METHODS[i]);
                char msg[200];
                snprintf(msg, sizeof msg, "'%.40s' is %s (brisk has ngram, suffix, draft_model)", m,
                         known ? "not implemented" : "not a method");
                rc = spec_fail(err, err_len, msg, k);
            }
        } else if (!strcmp(k, "num_speculative_tokens")) {
            have_n = 1;
            rc = spec_int(it, k, 1, SCHED_SPEC_MAX_TOKENS, &out->num_tokens, err, err_len);
        } else if (!strcmp(k, "prompt_lookup_min")) {
            have_min = 1;
            rc = spec_int(it, k, 1, 64, &out->lookup_min, err, err_len);
        } else if (!strcmp(k, "prompt_lookup_max")) {
            have_max = 1;
            rc = spec_int(it, k, 1, 64, &out->lookup_max, err, err_len);
        } else if (!strcmp(k, "model")) {
            draft = cJSON_GetStringValue(it);
            if (!draft || !draft[0] || strlen(draft) > 4000)
                rc = spec_fail(err, err_len, "must be a file path", k);
        } else if (!strcmp(k, "draft_tensor_parallel_size")) {
            int tp;
            rc = spec_int(it, k, 1, 1, &tp, err, err_len);
        } else if (!strcmp(k, "suffix_decoding_max_tree_depth")) {
            rc = spec_int(it, k, 2, 64, &out->suffix_depth, err, err_len);
        } else if (!strcmp(k, "suffix_decoding_max_spec_factor")) {
            rc = spec_num(it, k, 0, 1, 64, &out->suffix_factor, err, err_len);
        } else if (!strcmp(k, "suffix_decoding_min_token_prob")) {
            rc = spec_num(it, k, 0, 0, 1, &out->suffix_min_prob, err, err_len);
        } else {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "'%.40s' is not a key brisk takes (method, "
                     "num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, model, "
                     "suffix_decoding_*)",
                     k);
            rc = spec_fail(err, err_len, msg, NULL);
        }
    }
    if (rc == 0 && !have_method && draft)
        out->method = SCHED_SPEC_DRAFT; /* vLLM infers a draft model from `model` */
    if (rc == 0 && out->method == SCHED_SPEC_NONE)
        rc =
            spec_fail(err, err_len, "needs a method (ngram, suffix, draft_model) or a model", NULL);
    if (rc == 0 && !have_n)
        rc = spec_fail(err, err_len, "needs num_speculative_tokens", NULL);
    if (rc == 0 && out->method == SCHED_SPEC_NGRAM) { /* one bound given sets both (vLLM's rule) */
        if (have_min && !have_max)
            out->lookup_max = out->lookup_min;
        if (have_max && !have_min)
            out->lookup_min = out->lookup_max;
        if (out->lookup_min > out->lookup_max)
            rc = spec_fail(err, err_len, "prompt_lookup_min is above prompt_lookup_max", NULL);
    } else if (rc == 0 && (have_min || have_max)) {
        rc = spec_fail(err, err_len, "prompt_lookup_min/max are for method ngram", NULL);
    }
    if (rc == 0 && out->method == SCHED_SPEC_DRAFT && !draft)
        rc = spec_fail(err, err_len, "draft_model needs a model (a GGUF file)", NULL);
    if (rc == 0 && out->method != SCHED_SPEC_DRAFT && draft)
        rc = spec_fail(err, err_len, "a model is only for method draft_model", NULL);
    if (rc == 0 && draft) {
        *model_buf = strdup(draft);
        if (!*model_buf)
            rc = spec_fail(err, err_len, "out of memory", NULL);
        out->draft_model = *model_buf;
    }
    cJSON_Delete(root);
    if (rc == 0) {
        char why[200];
        if (sched_spec_config_check(out, why, sizeof why) < 0)
            rc = spec_fail(err, err_len, why, NULL);
    }
    if (rc < 0) {
        free(*model_buf);
        *model_buf = NULL;
        out->draft_model = NULL;
    }
    return rc;
}

int cli_spec_resolve(const char *json, const char *draft_model, int draft_max, int draft_min,
                     sched_spec_config *out, char **model_buf, char *err, size_t err_len) {
    *model_buf = NULL;
    int llama = draft_model || draft_max >= 0 || draft_min >= 0;
    if (json && llama) {
        snprintf(err, err_len,
                 "--speculative-config and --model-draft/--draft-max/--draft-min are two ways to "
                 "say one thing: give one");
        return -1;
    }
    long long suffix_bytes = out->suffix_bytes;
    int threshold = out->max_batch_tokens, fixed = out->fixed_len;
    if (json) {
        if (cli_spec_parse_json(json, out, model_buf, err, err_len) < 0)
            return -1;
    } else if (llama) {
        if (!draft_model) {
            snprintf(err, err_len, "--draft-max and --draft-min need --model-draft");
            return -1;
        }
        *out = sched_spec_config_default();
        out->method = SCHED_SPEC_DRAFT;
        out->draft_model = draft_model;
        out->num_tokens = draft_max >= 0 ? draft_max : CLI_SPEC_DRAFT_MAX_DEFAULT;
        out->draft_min = draft_min >= 0 ? draft_min : 0;
        char why[200];
        if (sched_spec_config_check(out, why, sizeof why) < 0) {
            snprintf(err, err_len, "--model-draft/--draft-max/--draft-min: %s", why);
            return -1;
        }
    }
    out->suffix_bytes = suffix_bytes;
    out->max_batch_tokens = threshold;
    out->fixed_len = fixed;
    return 0;
}
