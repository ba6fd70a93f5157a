/* fuzz_spec_config.c - --speculative-config's parser (cli/cli_spec.c) on
 * hostile JSON: the input is the option's value.
 *
 * Checks: the parser accepts or refuses; a refusal has a one-line reason
 * and leaves no model path; an accepted configuration passes the engine's
 * own check (sched_spec_config_check), has a method and a length in range,
 * a draft model's path is a copy of the JSON's, and parsing the same text
 * again gives the same configuration; through cli_spec_resolve, the JSON
 * together with --model-draft is always refused. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli_spec.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > CLI_SPEC_JSON_MAX + 64)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    sched_spec_config a, b;
    char *ma = NULL, *mb = NULL, err[400] = "";
    int rc = cli_spec_parse_json(text, &a, &ma, err, sizeof err);
    if (rc < 0) {
        FUZZ_CHECK(err[0] != '\0' && !strchr(err, '\n') && !strchr(err, '\r'));
        FUZZ_CHECK(ma == NULL && a.draft_model == NULL);
    } else {
        FUZZ_CHECK(rc == 0);
        char why[200];
        FUZZ_CHECK(sched_spec_config_check(&a, why, sizeof why) == 0);
        FUZZ_CHECK(a.method != SCHED_SPEC_NONE && a.num_tokens >= 1 &&
                   a.num_tokens <= SCHED_SPEC_MAX_TOKENS);
        FUZZ_CHECK((a.method == SCHED_SPEC_DRAFT) == (ma != NULL));
        FUZZ_CHECK(a.draft_model == ma);
        FUZZ_CHECK(cli_spec_parse_json(text, &b, &mb, err, sizeof err) == 0);
        FUZZ_CHECK(a.method == b.method && a.num_tokens == b.num_tokens &&
                   a.lookup_min == b.lookup_min && a.lookup_max == b.lookup_max &&
                   a.suffix_depth == b.suffix_depth && a.suffix_factor == b.suffix_factor &&
                   a.suffix_min_prob == b.suffix_min_prob);
        FUZZ_CHECK((ma == NULL) == (mb == NULL) && (!ma || !strcmp(ma, mb)));
        free(mb);
    }
    free(ma);
    sched_spec_config c = sched_spec_config_default();
    char *mc = NULL;
    FUZZ_CHECK(cli_spec_resolve(text, "draft.gguf", -1, -1, &c, &mc, err, sizeof err) < 0);
    FUZZ_CHECK(mc == NULL);
    free(text);
    return 0;
}
