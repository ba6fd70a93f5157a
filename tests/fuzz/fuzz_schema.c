/* fuzz_schema.c - JSON Schema into GBNF (server/api/srv_schema.c), then the GBNF
 * compiler (models/grammar.c), on fuzzer-chosen JSON.
 *
 * Input: any bytes; those that parse as JSON (cJSON) are a schema.
 *
 * Properties: the converter returns 0 with a NUL-terminated text, or
 * BRISK_EINVAL / BRISK_ENOMEM with a one-line reason that says where in the
 * schema ("at '#..."); a text it returns always compiles (the converter never
 * writes GBNF the compiler refuses, short of its size limits); a compiled
 * grammar gives a matcher whose start state has a mask over a small
 * vocabulary without error. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "models/grammar.h"
#include "server/api/srv_schema.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/fuzz_vocab.h"

static model_grammar_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    FUZZ_CHECK(fuzz_vocabs_init() == 0);
    FUZZ_CHECK((g_vocab = model_grammar_vocab_create(fuzz_vocab(FUZZ_VOCAB_SPM))) != NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *schema = cJSON_ParseWithLength((const char *)data, size);
    if (!schema)
        return 0;
    char *text = NULL, err[256] = "";
    int rc = srv_schema_to_gbnf(schema, &text, err, sizeof err);
    cJSON_Delete(schema);
    if (rc < 0) {
        FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
        FUZZ_CHECK(!text && err[0] && !strchr(err, '\n'));
        FUZZ_CHECK(rc == BRISK_ENOMEM || strstr(err, "(at '#") != NULL);
        return 0;
    }
    FUZZ_CHECK(text != NULL);
    model_grammar *g = NULL;
    char gerr[256] = "";
    rc = model_grammar_compile(text, strlen(text), NULL, &g, gerr, sizeof gerr);
    if (rc < 0) /* only a limit may stop a converted schema */
        FUZZ_CHECK(rc == BRISK_ENOMEM || strstr(gerr, "more than") || strstr(gerr, "above"));
    free(text);
    if (g) {
        model_grammar_limits lim = model_grammar_limits_default();
        lim.max_stacks = 256;
        model_grammar_matcher *m = model_grammar_matcher_create(g, g_vocab, &lim);
        uint32_t *mask =
            malloc(((size_t)tok_n_vocab(fuzz_vocab(FUZZ_VOCAB_SPM)) + 31) / 32 * sizeof *mask);
        if (m && mask) {
            int n = model_grammar_mask(m, mask);
            FUZZ_CHECK(n >= 0 || n == BRISK_ERANGE || n == BRISK_ENOMEM);
        }
        free(mask);
        model_grammar_matcher_free(m);
        model_grammar_unref(g);
    }
    return 0;
}
