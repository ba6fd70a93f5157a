/* fuzz_grammar.c - the GBNF compiler and the grammar matcher
 * (models/grammar.c, models/grammar_match.c) on fuzzer-chosen grammars and
 * byte streams, over the fuzz vocabularies.
 *
 * Input: byte 0 picks the vocabulary (fuzz_vocab.h), byte 1 the chunk size
 * of the byte stream (1 + b % 8) and, with its high bit, that the text is a
 * regular expression (models/grammar_regex.c) to convert first, in JSON-
 * string mode between quotes (JSON Schema's pattern) when bit 0x40 is set
 * too; then the grammar text up to 0x1E; then the bytes to feed.
 *
 * Properties: compiling returns 0, or BRISK_EINVAL / BRISK_ENOMEM with a
 * one-line reason; a matcher takes each chunk or refuses it with
 * BRISK_EINVAL and stays as it was (the same mask after as before); at every
 * step the mask's bit for a sample of tokens (the first allowed ones and a
 * spread of others) equals whether the token's bytes could be taken, and
 * taking an allowed token succeeds. Limits are small so a hostile grammar
 * costs milliseconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/grammar.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/fuzz_vocab.h"

#define FUZZ_GRAMMAR_SEP 0x1E

static model_grammar_vocab *g_vocabs[FUZZ_VOCAB_COUNT];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    FUZZ_CHECK(fuzz_vocabs_init() == 0);
    for (unsigned i = 0; i < FUZZ_VOCAB_COUNT; i++)
        FUZZ_CHECK((g_vocabs[i] = model_grammar_vocab_create(fuzz_vocab(i))) != NULL);
    return 0;
}

/* Checks the mask against the bytes of a sample of tokens. */
static void check_mask(model_grammar_matcher *m, const tok_vocab *v, const uint32_t *mask,
                       int count) {
    int nv = tok_n_vocab(v), seen = 0, n_set = 0;
    char buf[512];
    for (int id = 0; id < nv; id++) {
        int bit = (int)(mask[id >> 5] >> (id & 31) & 1u);
        n_set += bit;
        /* every allowed token among the first 64 of them, and every 97th token */
        if (!(bit && seen++ < 64) && id % 97 != 0)
            continue;
        int want;
        if (tok_is_eog(v, id)) {
            want = model_grammar_complete(m);
        } else {
            int n = tok_token_to_piece(v, id, 0, buf, sizeof buf);
            want =
                n > 0 && n <= (int)sizeof buf && model_grammar_allows_bytes(m, buf, (size_t)n) == 1;
        }
        FUZZ_CHECK(bit == want);
    }
    FUZZ_CHECK(n_set == count);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned which = fuzz_u8(&in) % FUZZ_VOCAB_COUNT;
    uint8_t mode = fuzz_u8(&in);
    size_t chunk = 1 + (mode & 0x7f) % 8, len;
    const char *text = (const char *)fuzz_field(&in, FUZZ_GRAMMAR_SEP, &len);
    char *from_regex = NULL, err[256] = "";
    if (mode & 0x80) {
        int rrc;
        if (mode & 0x40) { /* a JSON string whose text matches the regex */
            model_regex_opts o = {.json_string = 1, .cap_unbounded = 0};
            char *expr = NULL;
            long lo = 0, hi = 0;
            rrc = model_grammar_regex_expr(text, len, &o, &expr, &lo, &hi, err, sizeof err);
            FUZZ_CHECK(rrc < 0 || (lo >= 0 && (hi < 0 || hi >= lo)));
            if (rrc == 0) {
                size_t n = strlen(expr) + 32;
                from_regex = malloc(n);
                FUZZ_CHECK(from_regex != NULL);
                snprintf(from_regex, n, "root ::= \"\\\"\" %s \"\\\"\"\n", expr);
            }
            free(expr);
        } else {
            rrc = model_grammar_regex_text(text, len, &from_regex, err, sizeof err);
        }
        if (rrc < 0) {
            FUZZ_CHECK(rrc == BRISK_EINVAL || rrc == BRISK_ENOMEM);
            FUZZ_CHECK(!from_regex && err[0] && !strchr(err, '\n'));
            return 0;
        }
        text = from_regex;
        len = strlen(from_regex);
    }
    model_grammar_limits lim = model_grammar_limits_default();
    lim.max_text = 4096;
    lim.max_rules = 256;
    lim.max_elements = 4096;
    lim.max_repeat = 64;
    lim.max_stacks = 64;
    model_grammar *g = NULL;
    int rc = model_grammar_compile(text, len, &lim, &g, err, sizeof err);
    /* A converted regex compiles unless it outgrows the small limits here. */
    FUZZ_CHECK(!from_regex || rc == 0 || strstr(err, "more than") || strstr(err, "above") ||
               strstr(err, "deeper"));
    free(from_regex);
    if (rc < 0) {
        FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
        FUZZ_CHECK(!g && err[0] && !strchr(err, '\n'));
        return 0;
    }
    FUZZ_CHECK(g && model_grammar_n_rules(g) >= 1);
    const tok_vocab *v = fuzz_vocab(which);
    model_grammar_matcher *m = model_grammar_matcher_create(g, g_vocabs[which], &lim);
    size_t words = ((size_t)tok_n_vocab(v) + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask), *again = malloc(words * sizeof *again);
    for (int step = 0; m && mask && again && step < 16; step++) {
        int count = model_grammar_mask(m, mask);
        if (count < 0) {
            FUZZ_CHECK(count == BRISK_ERANGE || count == BRISK_ENOMEM);
            break;
        }
        check_mask(m, v, mask, count);
        size_t got;
        const char *bytes = (const char *)fuzz_take(&in, chunk, &got);
        if (got == 0) {
            /* no input left: take the first allowed token with bytes, if any */
            for (int id = 0; id < tok_n_vocab(v); id++)
                if ((mask[id >> 5] >> (id & 31) & 1u) && !tok_is_eog(v, id)) {
                    FUZZ_CHECK(model_grammar_accept(m, id) == 0);
                    break;
                }
            continue;
        }
        int complete = model_grammar_complete(m);
        rc = model_grammar_accept_bytes(m, bytes, got);
        if (rc == BRISK_EINVAL) { /* refused: unchanged */
            FUZZ_CHECK(model_grammar_complete(m) == complete);
            FUZZ_CHECK(model_grammar_mask(m, again) == count);
            FUZZ_CHECK(!memcmp(mask, again, words * sizeof *mask));
        } else if (rc < 0) {
            FUZZ_CHECK(rc == BRISK_ERANGE || rc == BRISK_ENOMEM);
            break;
        }
    }
    free(mask);
    free(again);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    return 0;
}
