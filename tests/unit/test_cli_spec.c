/* test_cli_spec.c - speculative decoding's options (cli/cli_spec.c):
 * --speculative-config's JSON into the engine's struct, every key typed and
 * ranged, unknown keys and unimplemented methods refused by name, vLLM's
 * defaults (one prompt_lookup bound sets both, a model implies
 * draft_model), llama.cpp's --model-draft/--draft-max/--draft-min filling
 * the same struct, and both forms at once refused. */
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "cli/cli_opts.h"
#include "cli/cli_spec.h"

static int parse(const char *json, sched_spec_config *c, char *err) {
    char *m = NULL;
    int rc = cli_spec_parse_json(json, c, &m, err, 300);
    free(m);
    if (rc == 0)
        c->draft_model = NULL; /* freed above */
    return rc;
}

/* A refusal with a one-line reason that contains `word`. */
static void refused(const char *json, const char *word) {
    sched_spec_config c;
    char err[300] = "";
    int rc = parse(json, &c, err);
    CHECK(rc < 0 && bt_one_line(err) && strstr(err, word), "%s: rc %d, err '%s' (want '%s')", json,
          rc, err, word);
}

int main(void) {
    sched_spec_config c;
    char err[300], *m = NULL;
    CHECK_COND(parse("{\"method\":\"ngram\",\"num_speculative_tokens\":5}", &c, err) == 0);
    CHECK(c.method == SCHED_SPEC_NGRAM && c.num_tokens == 5 && c.lookup_min == 5 &&
              c.lookup_max == 5,
          "ngram defaults: %d %d %d", c.num_tokens, c.lookup_min, c.lookup_max);
    CHECK_COND(parse("{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_max\":4}",
                     &c, err) == 0 &&
               c.lookup_min == 4 && c.lookup_max == 4);
    CHECK_COND(parse("{\"method\":\"[ngram]\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":"
                     "2,\"prompt_lookup_max\":6}",
                     &c, err) == 0 &&
               c.lookup_min == 2 && c.lookup_max == 6);
    CHECK_COND(parse("{\"method\":\"suffix\",\"num_speculative_tokens\":32,"
                     "\"suffix_decoding_max_tree_depth\":12,\"suffix_decoding_min_token_prob\":0,"
                     "\"suffix_decoding_max_spec_factor\":2.5}",
                     &c, err) == 0 &&
               c.method == SCHED_SPEC_SUFFIX && c.suffix_depth == 12 && c.suffix_min_prob == 0 &&
               c.suffix_factor == 2.5f);
    CHECK_COND(cli_spec_parse_json("{\"model\":\"d.gguf\",\"num_speculative_tokens\":4}", &c, &m,
                                   err, sizeof err) == 0 &&
               c.method == SCHED_SPEC_DRAFT && m && !strcmp(c.draft_model, "d.gguf") &&
               c.draft_model == m);
    free(m);

    refused("{\"method\":\"eagle3\",\"num_speculative_tokens\":3}", "not implemented");
    refused("{\"method\":\"magic\",\"num_speculative_tokens\":3}", "not a method");
    refused("{\"method\":\"ngram\"}", "num_speculative_tokens");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":33}", "1 to 32");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":0}", "num_speculative_tokens");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":2.5}", "integer");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":\"3\"}", "integer");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":true}", "integer");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":5,"
            "\"prompt_lookup_max\":2}",
            "above");
    refused("{\"method\":\"suffix\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":2}",
            "for method ngram");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"model\":\"x.gguf\"}",
            "only for method draft_model");
    refused("{\"method\":\"draft_model\",\"num_speculative_tokens\":3}", "needs a model");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"disable_by_batch_size\":4}",
            "disable_by_batch_size");
    refused("{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"method\":\"suffix\"}", "twice");
    refused("{\"method\":\"suffix\",\"num_speculative_tokens\":3,"
            "\"suffix_decoding_max_spec_factor\":0}",
            "(0, 64]");
    refused("{\"model\":\"d.gguf\",\"num_speculative_tokens\":3,\"draft_tensor_parallel_size\":2}",
            "draft_tensor_parallel_size");
    refused("[1,2]", "not a JSON object");
    refused("{\"method\":", "not a JSON object");
    refused("{}", "needs a method");
    char big[CLI_SPEC_JSON_MAX + 10];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{';
    refused(big, "longer than");

    /* llama.cpp's form, and the two forms at once. */
    c = sched_spec_config_default();
    c.suffix_bytes = 2 << 20;
    c.max_batch_tokens = 20;
    CHECK_COND(cli_spec_resolve(NULL, "d.gguf", -1, -1, &c, &m, err, sizeof err) == 0 &&
               c.method == SCHED_SPEC_DRAFT && c.num_tokens == 16 && c.draft_min == 0 &&
               !strcmp(c.draft_model, "d.gguf") && c.max_batch_tokens == 20 &&
               c.suffix_bytes == 2 << 20 && !m);
    CHECK_COND(cli_spec_resolve(NULL, "d.gguf", 6, 2, &c, &m, err, sizeof err) == 0 &&
               c.num_tokens == 6 && c.draft_min == 2);
    CHECK(cli_spec_resolve(NULL, "d.gguf", 3, 5, &c, &m, err, sizeof err) < 0 && bt_one_line(err),
          "draft-min above draft-max: %s", err);
    CHECK(cli_spec_resolve(NULL, NULL, 4, -1, &c, &m, err, sizeof err) < 0 &&
              strstr(err, "--model-draft"),
          "draft-max alone: %s", err);
    CHECK(cli_spec_resolve("{\"method\":\"ngram\",\"num_speculative_tokens\":3}", "d.gguf", -1, -1,
                           &c, &m, err, sizeof err) < 0 &&
              strstr(err, "give one"),
          "both forms: %s", err);
    c = sched_spec_config_default();
    CHECK_COND(cli_spec_resolve(NULL, NULL, -1, -1, &c, &m, err, sizeof err) == 0 &&
               c.method == SCHED_SPEC_NONE);

    /* The options are table rows, with BRISK_ variables. */
    cli_vals v;
    char *argv[] = {"--speculative-config",
                    "{\"method\":\"ngram\",\"num_speculative_tokens\":3}",
                    "-md",
                    "x.gguf",
                    "--draft-max",
                    "8",
                    "--spec-suffix-bytes",
                    "8M"};
    CHECK_COND(cli_opts_parse(CLI_SERVE, 8, argv, &v) == CLI_OK && v.given[O_SPEC_CONFIG] &&
               v.given[O_MODEL_DRAFT] && v.i[O_DRAFT_MAX] == 8 &&
               v.i[O_SPEC_SUFFIX_BYTES] == 8 << 20);
    setenv("BRISK_DRAFT_MIN", "2", 1);
    CHECK_COND(cli_opts_parse(CLI_SERVE, 0, argv, &v) == CLI_OK && v.i[O_DRAFT_MIN] == 2);
    unsetenv("BRISK_DRAFT_MIN");
    return BT_SUMMARY("test_cli_spec");
}
