/* test_grammar.c - GBNF grammars: compile errors (each limit and malformed
 * text gives an error naming it), strings the grammar takes and refuses
 * (JSON, repetitions, classes, UTF-8 split across calls), and token masks
 * against a brute force over two real vocabularies (byte-level GPT-2 and
 * SentencePiece with byte fallback) along seeded random walks. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/gguf.h"
#include "models/grammar.h"
#include "models/tokenizer.h"

static model_grammar *compile(const char *text, char *err, size_t len) {
    model_grammar *g = NULL;
    model_grammar_compile(text, strlen(text), NULL, &g, err, len);
    return g;
}

/* 1 if the grammar takes the whole string and is complete after it. */
static int takes(model_grammar *g, const char *s) {
    model_grammar_matcher *m = model_grammar_matcher_create(g, NULL, NULL);
    int ok = m && model_grammar_accept_bytes(m, s, strlen(s)) == 0 && model_grammar_complete(m);
    model_grammar_matcher_free(m);
    return ok;
}

static void test_errors(void) {
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "no 'root'"},
        {"root ::= foo", "'foo' is used but not defined"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive"},
        {"root ::= (\"a\"?)* \"b\"", "left-recursive"},
        {"root ::= \"a", "unterminated string"},
        {"root ::= [a-", "unterminated character class"},
        {"root ::= [z-a]", "backwards"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"\\\n\"", "unknown escape '\\<0x0A>'"}, /* one line, whatever the byte */
        {"root ::= \"a\" \x01", "unexpected '<0x01>'"},
        {"root ::= \"\\uD800\"", "not a character"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"a\"{3,2}", "max below min"},
        {"root ::= \"a\"{1001}", "above 1000"},
        {"root ::= *", "unexpected '*'"},
        {"root ::= \"a\" \"\"?", "follows an empty literal"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root \"a\"", "expected '::='"},
        {"root ::= \"a\" ) \"b\"", "unexpected ')'"},
        {"root ::= ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((\"a\""
         "))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
         "nest deeper"},
        {"root ::= \"\xff\"", "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        model_grammar *g = compile(bad[i].text, err, sizeof err);
        CHECK(!g && strstr(err, bad[i].needle) && bt_one_line(err), "%zu: '%s' -> '%s'", i,
              bad[i].text, err);
        model_grammar_unref(g);
    }
    model_grammar_limits lim = model_grammar_limits_default();
    lim.max_text = 8;
    model_grammar *g = NULL;
    char err[256];
    CHECK(model_grammar_compile("root ::= \"abc\"", 14, &lim, &g, err, sizeof err) ==
                  BRISK_EINVAL &&
              strstr(err, "more than 8"),
          "text limit: %s", err);
    /* 300 x 1000 copies of one character: past the element limit. */
    char *big = malloc(300 * 12 + 16);
    strcpy(big, "root ::=");
    for (int i = 0; i < 300; i++)
        strcat(big, " \"a\"{1000}");
    g = compile(big, err, sizeof err);
    CHECK(!g && strstr(err, "elements"), "element limit: %s", err);
    free(big);
    lim = model_grammar_limits_default();
    lim.max_rules = 10;
    CHECK(model_grammar_compile("root ::= \"a\"{0,20}", 18, &lim, &g, err, sizeof err) ==
                  BRISK_EINVAL &&
              strstr(err, "more than 10 rules"),
          "rule limit: %s", err);
}

static void test_strings(void) {
    char err[256] = "";
    model_grammar *g = compile("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? tail\n"
                               "tail ::= [^a-z\\n]{2,3}   # comment\n",
                               err, sizeof err);
    CHECK(g != NULL, "%s", err);
    if (g) {
        CHECK(takes(g, "ab1..") && takes(g, "ab123x!!!") && takes(g, "ab0yzAB"), "takes");
        CHECK(!takes(g, "ab..") && !takes(g, "ab1.") && !takes(g, "ab1x....") &&
                  !takes(g, "ab1yx..") && !takes(g, "ab1a.."),
              "refuses");
        model_grammar_unref(g);
    }
    char *json = model_grammar_json_text(0);
    /* Compiling is milliseconds: the JSON grammar, timed. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 100; i++)
        model_grammar_unref(compile(json, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("compile: the JSON grammar in %.3f ms\n",
           ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / 100);
    g = compile(json, err, sizeof err);
    free(json);
    CHECK(g != NULL, "json: %s", err);
    if (g) {
        static const char *good[] = {"{}",
                                     " [1, -2.5e3, true, false, null]",
                                     "{\"a\": {\"b\": [\"c\\n\\u00e9\"]}}",
                                     "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
                                     "0",
                                     "-0.5",
                                     "{\n  \"k\": \"v\",\n  \"n\": 12\n}"};
        static const char *badj[] = {"{",        "[1,]",     "{\"a\" 1}",  "01",
                                     "\"\x01\"", "tru",      "{\"a\":1}}", "\"\\x\"",
                                     "1.",       "\"\xc3\"", "{} ",        "[1]\n"};
        for (size_t i = 0; i < sizeof good / sizeof *good; i++)
            CHECK(takes(g, good[i]), "json takes %s", good[i]);
        for (size_t i = 0; i < sizeof badj / sizeof *badj; i++)
            CHECK(!takes(g, badj[i]), "json refuses %s", badj[i]);
        /* A character split across calls: the first byte is pending. */
        model_grammar_matcher *m = model_grammar_matcher_create(g, NULL, NULL);
        CHECK(m && model_grammar_accept_bytes(m, "\"\xe2", 2) == 0 && !model_grammar_complete(m) &&
                  model_grammar_accept_bytes(m, "\x82", 1) == 0 &&
                  model_grammar_accept_bytes(m, "A", 1) == BRISK_EINVAL &&
                  model_grammar_accept_bytes(m, "\xac\"", 2) == 0 && model_grammar_complete(m) &&
                  model_grammar_finished(m), /* the value ends the answer: nothing may follow */
              "split UTF-8");
        model_grammar_matcher_free(m);
        model_grammar_unref(g);
    }
    const char *choices[] = {"yes", "no", "n\"o"};
    size_t lens[] = {3, 2, 3};
    char *ct = model_grammar_choice_text(choices, lens, 3);
    g = compile(ct, err, sizeof err);
    free(ct);
    CHECK(g && takes(g, "yes") && takes(g, "no") && takes(g, "n\"o") && !takes(g, "ye") &&
              !takes(g, "nos"),
          "choice: %s", err);
    model_grammar_matcher *m = g ? model_grammar_matcher_create(g, NULL, NULL) : NULL;
    CHECK(m && model_grammar_accept_bytes(m, "no", 2) == 0 && model_grammar_finished(m),
          "choice: finished after 'no'");
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
}

/* Regular expressions: whole-string matches, as Python's re.fullmatch. */
static void test_regex(void) {
    static const struct {
        const char *re, *s;
        int match;
    } cases[] = {
        {"\\d{3}-\\d{4}", "555-1234", 1},
        {"\\d{3}-\\d{4}", "55-1234", 0},
        {"(cat|dog)s?", "cats", 1},
        {"(cat|dog)s?", "cow", 0},
        {"[^a-c]+", "xyz", 1},
        {"[^a-c]+", "xbz", 0},
        {"a.c", "a-c", 1},
        {"a.c", "a\nc", 0},
        {"^(?:yes|no)$", "no", 1},
        {"(?P<w>\\w+)!", "hi_1!", 1},
        {"\\s*x", " \t x", 1},
        {"\\D\\W\\S", "1 b", 0},
        {"\\D\\W\\S", "a-b", 1},
        {"x{2,}?y", "xxxy", 1},
        {"x{2,}?y", "xy", 0},
        {"a{0}b", "b", 1},
        {"\\.\\*\\[\\]", ".*[]", 1},
        {"[\\]\\-]", "-", 1},
        {"caf\\u00e9", "caf\xc3\xa9", 1},
        {"[\xc3\xa0-\xc3\xbf]", "\xc3\xa9", 1},
        {"{x", "{x", 1},
        {"a|", "", 1},
        {"", "", 1},
        {"", "a", 0},
        {"(a|){0,2}b", "ab", 1},
        {"(a|){0,2}b", "aaab", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *text = NULL, err[256] = "";
        int rc = model_grammar_regex_text(cases[i].re, strlen(cases[i].re), &text, err, sizeof err);
        model_grammar *g = rc == 0 ? compile(text, err, sizeof err) : NULL;
        CHECK(g && takes(g, cases[i].s) == cases[i].match, "/%s/ on '%s': %s (%s)", cases[i].re,
              cases[i].s, err, text ? text : "");
        model_grammar_unref(g);
        free(text);
    }
    static const struct {
        const char *re, *needle;
    } bad[] = {{"(a)\\1", "backreferences"},
               {"a(?=b)", "lookarounds"},
               {"a\\bb", "not supported"},
               {"(a", "expected ')'"},
               {"a)", "unbalanced"},
               {"a{2,1}", "max below min"},
               {"[a", "unterminated"},
               {"*a", "follows nothing"},
               {"a^b", "inside"},
               {"[\\D]", "negated shorthand"},
               {"a++", "quantifier follows"},
               {"\\q", "unknown"},
               {"(a|)*", "empty string"},
               {"(b*)+", "empty string"},
               {"(c?){2,}", "empty string"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *text = NULL, err[256] = "";
        int rc = model_grammar_regex_text(bad[i].re, strlen(bad[i].re), &text, err, sizeof err);
        CHECK(rc == BRISK_EINVAL && !text && strstr(err, bad[i].needle) && bt_one_line(err),
              "/%s/: %s", bad[i].re, err);
        free(text);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Masks equal the brute force (each token's bytes tried alone) along random
 * walks; the walk takes a random allowed token each step. */
static void walk(const tok_vocab *v, const model_grammar_vocab *gv, model_grammar *g,
                 const char *what, int steps, double *ms_mask) {
    int nv = tok_n_vocab(v);
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, sizeof *mask);
    model_grammar_matcher *m = model_grammar_matcher_create(g, gv, NULL);
    int same = 1, total_allowed = 0, taken = 0, ended = 0;
    char buf[512];
    for (int step = 0; m && mask && step < steps && same; step++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int count = model_grammar_mask(m, mask);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        *ms_mask += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        int brute = 0, allowed_ids = 0;
        for (int id = 0; id < nv; id++) {
            int n = tok_token_to_piece(v, id, 0, buf, sizeof buf);
            int want = tok_is_eog(v, id) ? model_grammar_complete(m)
                       : n > 0 && n <= (int)sizeof buf
                           ? model_grammar_allows_bytes(m, buf, (size_t)n) == 1
                           : 0;
            int got = (int)(mask[id >> 5] >> (id & 31) & 1u);
            if (want != got) {
                if (same)
                    fprintf(stderr, "%s step %d: token %d ('%.*s') mask %d brute %d\n", what, step,
                            id, n > 0 ? n : 0, buf, got, want);
                same = 0;
            }
            brute += want;
            allowed_ids += got;
        }
        same &= count == brute;
        total_allowed += count;
        if (count == 0 || !same)
            break;
        /* a random allowed token; prefer one with bytes while not complete */
        int pick = (int)rnd((uint32_t)count), id = 0;
        for (id = 0; id < nv; id++)
            if ((mask[id >> 5] >> (id & 31) & 1u) && pick-- == 0)
                break;
        if (tok_is_eog(v, id)) {
            ended = 1;
            break;
        }
        same &= model_grammar_accept(m, id) == 0;
        taken++;
        (void)allowed_ids;
    }
    CHECK(same && m && mask, "%s: masks equal the brute force (%d tokens taken, ended %d)", what,
          taken, ended);
    CHECK(total_allowed > 0 && taken > 0, "%s: the walk moved", what);
    printf("%s: %d steps, %d tokens allowed in all, ended %d\n", what, taken, total_allowed, ended);
    model_grammar_matcher_free(m);
    free(mask);
}

/* (The grammar takes a leading space: SentencePiece's tokens bring one.)
 * The work a mask counts is the state's own: the same whether the grammar's
 * automaton and mask cache were cold or filled by other matchers first, on a
 * cache hit too; one unit less than a state needs refuses it with
 * BRISK_ERANGE (cold, warm, or cached), exactly that many takes it; and
 * model_grammar_mask_try gives up on a budget below it without caching. */
static void test_work(const tok_vocab *v, const model_grammar_vocab *gv, const char *what) {
    static const char *text =
        "root ::= \" \"? \"{\" ( \"\\\"\" [a-z ]{0,30} \"\\\": \" [0-9]{1,6} \", \" )* \"}\"";
    static const char *walk = "{\"ab cd\": 123, \"x\": 9, }";
    static const char *other = "{\"zzzz zz zzzz\": 98765, \"qq\": 1, \"ab\": 4, }";
    char err[256];
    int nv = tok_n_vocab(v);
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask), *mask2 = calloc(words, sizeof *mask2);
    int32_t ids[64];
    int n = tok_encode(v, walk, strlen(walk), 0, ids, 64);
    CHECK(n > 4, "%s: the walk's tokens", what);
    long long cold[64] = {0};
    int counts[64] = {0};
    /* Cold: a fresh grammar, one matcher. */
    model_grammar *g = compile(text, err, sizeof err);
    model_grammar_matcher *m = model_grammar_matcher_create(g, gv, NULL);
    for (int i = 0; i < n && m; i++) {
        counts[i] = model_grammar_mask(m, mask);
        cold[i] = model_grammar_last_work(m);
        CHECK(counts[i] > 0 && cold[i] > 0, "%s: cold mask %d: %d allowed, %lld units", what, i,
              counts[i], cold[i]);
        CHECK(model_grammar_accept(m, ids[i]) == 0, "%s: token %d taken", what, i);
    }
    /* The same states again on that grammar: cache hits, the same units. */
    model_grammar_matcher *m2 = model_grammar_matcher_create(g, gv, NULL);
    int same = 1;
    for (int i = 0; i < n && m2; i++) {
        same &= model_grammar_mask(m2, mask) == counts[i] && model_grammar_last_work(m2) == cold[i];
        model_grammar_accept(m2, ids[i]);
    }
    CHECK(same, "%s: cached masks count the units they cost", what);
    model_grammar_matcher_free(m2);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    /* Warm: a fresh grammar whose automaton another walk filled first. */
    g = compile(text, err, sizeof err);
    m = model_grammar_matcher_create(g, gv, NULL);
    int32_t oids[64];
    int on = tok_encode(v, other, strlen(other), 0, oids, 64);
    for (int i = 0; i < on && m; i++) {
        model_grammar_mask(m, mask);
        model_grammar_accept(m, oids[i]);
    }
    model_grammar_matcher_free(m);
    m = model_grammar_matcher_create(g, gv, NULL);
    same = 1;
    for (int i = 0; i < n && m; i++) {
        same &= model_grammar_mask(m, mask) == counts[i] && model_grammar_last_work(m) == cold[i];
        model_grammar_accept(m, ids[i]);
    }
    CHECK(same, "%s: the units do not depend on what the automaton already held", what);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    /* The limit, at the costliest state: cold, then warm, then cached. */
    int worst = 0;
    for (int i = 1; i < n; i++)
        if (cold[i] > cold[worst])
            worst = i;
    model_grammar_limits lim = model_grammar_limits_default();
    g = compile(text, err, sizeof err);
    for (int pass = 0; pass < 3; pass++) {
        for (int over = 0; over <= 1; over++) {
            lim.max_work = cold[worst] - 1 + over;
            m = model_grammar_matcher_create(g, gv, &lim);
            for (int i = 0; i < worst && m; i++)
                model_grammar_accept(m, ids[i]);
            int rc = m ? model_grammar_mask(m, mask) : BRISK_ENOMEM;
            CHECK(over ? rc == counts[worst] : rc == BRISK_ERANGE,
                  "%s: pass %d, limit %lld for a %lld-unit mask: %d", what, pass, lim.max_work,
                  cold[worst], rc);
            model_grammar_matcher_free(m);
        }
    }
    model_grammar_unref(g);
    /* mask_try: a budget below the walk gives up (nothing cached), a lookup
     * finds nothing until the mask is computed, then the same mask. */
    g = compile(text, err, sizeof err);
    m = model_grammar_matcher_create(g, gv, NULL);
    for (int i = 0; i < worst && m; i++)
        model_grammar_accept(m, ids[i]);
    CHECK(model_grammar_mask_try(m, mask, 0) == BRISK_ENOSPC, "%s: a lookup misses", what);
    CHECK(model_grammar_mask_try(m, mask, cold[worst] / 4) == BRISK_ENOSPC,
          "%s: a quarter of the units is not enough", what);
    CHECK(model_grammar_mask_try(m, mask, 0) == BRISK_ENOSPC, "%s: nothing was cached", what);
    CHECK(model_grammar_mask(m, mask2) == counts[worst] &&
              model_grammar_last_work(m) == cold[worst],
          "%s: computed after an abandoned walk: the same units", what);
    CHECK(model_grammar_mask_try(m, mask, 0) == counts[worst] && !memcmp(mask, mask2, words * 4),
          "%s: then a lookup finds it", what);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    free(mask);
    free(mask2);
}

/* Matchers of one grammar on four threads at once (the engine's mask
 * workers and the engine itself share its caches and its automaton, and
 * model_grammar_mask_try backs off from a walk in progress): every mask equals
 * the one a lone matcher of a fresh grammar computes. */
typedef struct par_job {
    model_grammar *g;
    const model_grammar_vocab *gv;
    const int32_t *ids;
    int n, tries;
    const uint32_t *want; /* [n][words] */
    size_t words;
    int ok;
} par_job;

static void *par_walk(void *arg) {
    par_job *j = arg;
    uint32_t *mask = calloc(j->words, sizeof *mask);
    model_grammar_matcher *m = model_grammar_matcher_create(j->g, j->gv, NULL);
    j->ok = m && mask;
    for (int i = 0; i < j->n && j->ok; i++) {
        int rc = BRISK_ENOSPC;
        if (j->tries) /* as the engine does: a small budget first */
            rc = model_grammar_mask_try(m, mask, 2000);
        if (rc == BRISK_ENOSPC)
            rc = model_grammar_mask(m, mask);
        j->ok = rc > 0 && !memcmp(mask, j->want + (size_t)i * j->words, j->words * sizeof *mask) &&
                model_grammar_accept(m, j->ids[i]) == 0;
    }
    model_grammar_matcher_free(m);
    free(mask);
    return NULL;
}

static void test_parallel(const tok_vocab *v, const model_grammar_vocab *gv, const char *what) {
    char *json = model_grammar_json_text(1), err[256];
    static const char *text = "{\"name\": \"Ada Lovelace\", \"tags\": [\"math\", \"engines\"], "
                              "\"born\": 1815, \"note\": {\"a\": true, \"b\": null}}";
    int32_t ids[128];
    int n = tok_encode(v, text, strlen(text), 0, ids, 128);
    size_t words = ((size_t)tok_n_vocab(v) + 31) / 32;
    uint32_t *want = calloc((size_t)(n > 0 ? n : 1) * words, sizeof *want);
    model_grammar *g = compile(json, err, sizeof err);
    model_grammar_matcher *m = g ? model_grammar_matcher_create(g, gv, NULL) : NULL;
    int ok = n > 10 && m && want;
    for (int i = 0; i < n && ok; i++)
        ok = model_grammar_mask(m, want + (size_t)i * words) > 0 &&
             model_grammar_accept(m, ids[i]) == 0;
    CHECK(ok, "%s: the reference walk", what);
    model_grammar_matcher_free(m);
    model_grammar_unref(g);
    for (int round = 0; round < 2 && ok; round++) {
        g = compile(json, err, sizeof err);
        par_job jobs[4];
        pthread_t th[4];
        for (int t = 0; t < 4; t++) {
            jobs[t] = (par_job){g, gv, ids, n, (t + round) % 2, want, words, 0};
            pthread_create(&th[t], NULL, par_walk, &jobs[t]);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            CHECK(jobs[t].ok, "%s: round %d, thread %d: every mask as the lone matcher's", what,
                  round, t);
        }
        model_grammar_unref(g);
    }
    free(want);
    free(json);
}

static void test_masks(void) {
    static const char *vocabs[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"};
    for (int vi = 0; vi < 2; vi++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/vocab/%s", bt_shared_dir(), vocabs[vi]);
        gguf_file *gf = NULL;
        tok_vocab *v = NULL;
        if (gguf_open(path, &gf, err, sizeof err) < 0 ||
            tok_vocab_create_from_gguf(gf, &v, err, sizeof err) < 0) {
            printf("SKIP masks on %s: %s\n", vocabs[vi], err);
            gguf_close(gf);
            continue;
        }
        model_grammar_vocab *gv = model_grammar_vocab_create(v);
        CHECK(gv != NULL, "trie");
        /* Under TSan only the threads: the walks below check every token of
         * the vocabulary by brute force at each step, on one thread. */
        if (gv && !BT_TSAN)
            test_work(v, gv, vocabs[vi]);
        if (gv)
            test_parallel(v, gv, vocabs[vi]);
        char *json = model_grammar_json_text(1);
        /* Beside JSON, grammars whose stacks run deep (nesting, rules
         * continued after a rule ends), so masks lean on the cut states'
         * escapes, with multi-byte characters where a cut stack reaches its
         * context; and a converted regular expression. */
        char *re = NULL;
        CHECK(model_grammar_regex_text("(?:[a-z]{1,3}\\.){2,4}(?:\u00e9|\u00fc|x)+[0-9]{2}",
                                       strlen("(?:[a-z]{1,3}\\.){2,4}(?:\u00e9|\u00fc|x)+"
                                              "[0-9]{2}"),
                                       &re, err, sizeof err) == 0,
              "regex: %s", err);
        const char *texts[6] = {
            json,
            "root ::= \"<\" [a-z\\u00e0-\\u00ff]{1,6} (\", \" [0-9]+)* \">\"",
            "root ::= (\"caf\\u00e9\" | \"\\u20ac\" | \"na\\u00efve\")+",
            "root ::= v\nv ::= \"[\" ( v ( \",\" v ){0,3} )? \"]\" | \"{\\\"\" [a-z\\u00e9]{0,5} "
            "\"\\\":\" v \"}\" | \"\\\"\" [^\"\\\\]{0,8} \"\\\"\"",
            "root ::= x \"!\"\nx ::= y \"?\" | \"\\u00e9\" x\ny ::= z \".\" | z z \".\"\n"
            "z ::= ( \"a\" | \"\\u00e9\" | \"\\u20ac\" | \"\\u00e9\\u20ac\" )+",
            re ? re : "root ::= \"a\""};
        const char *names[6] = {"json object", "list",           "utf-8 words",
                                "nested",      "rules in rules", "regex"};
        for (int gi = 0; gi < 6 && gv && !BT_TSAN; gi++) {
            model_grammar *g = compile(texts[gi], err, sizeof err);
            CHECK(g != NULL, "%s: %s", names[gi], err);
            char what[128];
            snprintf(what, sizeof what, "%s / %s", vocabs[vi], names[gi]);
            double ms = 0;
            for (int w = 0; g && w < 3; w++)
                walk(v, gv, g, what, 24, &ms);
            printf("%s: %.2f ms per mask\n", what, ms / 72);
            model_grammar_unref(g);
        }
        free(json);
        free(re);
        model_grammar_vocab_free(gv);
        tok_vocab_free(v);
        gguf_close(gf);
    }
}

int main(void) {
    test_errors();
    test_strings();
    test_regex();
    test_masks();
    return BT_SUMMARY("test_grammar");
}
