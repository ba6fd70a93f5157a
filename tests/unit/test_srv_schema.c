/* test_srv_schema.c - JSON Schema into GBNF (server/api/srv_schema*.c),
 * checked on the grammar: for each keyword, valid instances at the
 * boundaries are taken and invalid ones (one past a bound, a pattern miss,
 * a bad address) refused; numeric ranges and multiples by brute force over
 * every integer or decimal of a window; the answer ends at the value's last
 * character; keywords brisk cannot honour are refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "models/grammar.h"
#include "server/api/srv_api.h"
#include "server/api/srv_schema.h"
#include "server/api/srv_tools.h"

/* The compiled grammar of a schema given as JSON text; NULL with err set. */
static model_grammar *grammar_of(const char *schema, char *err, size_t len) {
    cJSON *j = cJSON_Parse(schema);
    if (!j) {
        snprintf(err, len, "bad test JSON");
        return NULL;
    }
    char *text = NULL;
    model_grammar *g = NULL;
    if (srv_schema_to_gbnf(j, &text, err, len) == 0)
        model_grammar_compile(text, strlen(text), NULL, &g, err, len);
    free(text);
    cJSON_Delete(j);
    return g;
}

/* 1 if the grammar takes the whole string and is complete after it. */
static int takes(model_grammar *g, const char *s) {
    model_grammar_matcher *m = model_grammar_matcher_create(g, NULL, NULL);
    int ok = m && model_grammar_accept_bytes(m, s, strlen(s)) == 0 && model_grammar_complete(m);
    model_grammar_matcher_free(m);
    return ok;
}

/* Checks that schema takes each of good and none of bad (NULL-ended). */
static void check_schema(const char *schema, const char *const *good, const char *const *bad) {
    char err[256] = "";
    model_grammar *g = grammar_of(schema, err, sizeof err);
    CHECK(g != NULL, "%s: %s", schema, err);
    if (!g)
        return;
    for (; good && *good; good++)
        CHECK(takes(g, *good), "%s takes %s", schema, *good);
    for (; bad && *bad; bad++)
        CHECK(!takes(g, *bad), "%s refuses %s", schema, *bad);
    model_grammar_unref(g);
}

/* Checks that schema is refused with a message holding needle. */
static void check_refused(const char *schema, const char *needle) {
    cJSON *j = cJSON_Parse(schema);
    char *text = NULL, err[256] = "";
    int rc = j ? srv_schema_to_gbnf(j, &text, err, sizeof err) : 0;
    CHECK(j && rc == BRISK_EINVAL && !text && strstr(err, needle) && bt_one_line(err),
          "%s: refused naming '%s': rc %d, '%s'", schema, needle, rc, err);
    free(text);
    cJSON_Delete(j);
}

/* ---- bug 2: the answer ends at the value -------------------------------------------- */

static void test_ends_at_value(void) {
    static const char *schemas[] = {
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}",
        "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
        "{\"type\": \"string\", \"maxLength\": 3}",
        "{\"enum\": [\"x\", \"y\"]}",
    };
    static const char *values[] = {"{\"a\": 1}", "[1, 2]", "\"abc\"", "\"y\""};
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) {
        char err[256] = "";
        model_grammar *g = grammar_of(schemas[i], err, sizeof err);
        CHECK(g != NULL, "%s", err);
        model_grammar_matcher *m = g ? model_grammar_matcher_create(g, NULL, NULL) : NULL;
        CHECK(m && model_grammar_accept_bytes(m, values[i], strlen(values[i])) == 0 &&
                  model_grammar_finished(m),
              "%s: finished after %s", schemas[i], values[i]);
        CHECK(m && model_grammar_allows_bytes(m, "\t", 1) == 0 &&
                  model_grammar_allows_bytes(m, "\n", 1) == 0 &&
                  model_grammar_allows_bytes(m, " ", 1) == 0,
              "%s: no whitespace after the value", schemas[i]);
        model_grammar_matcher_free(m);
        model_grammar_unref(g);
    }
    /* Whitespace between tokens is bounded as json_object's: 8 spaces or
     * tabs, a newline, 16 more. */
    const char *good[] = {"{\"a\":1}", " {\"a\": 1}", "{\n\t\"a\"\t:\t1\n}",
                          "{        \n                \"a\": 1}", NULL};
    const char *bad[] = {"{\"a\": 1}\n",        "{\"a\": 1} ",
                         "{         \"a\": 1}", "{\n                 \"a\": 1}",
                         "{\n\n\"a\": 1}",      NULL};
    check_schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}", good,
                 bad);
}

/* ---- integers and numbers ----------------------------------------------------------- */

/* Every integer of [-span, span] written out: taken exactly when in [lo, hi]. */
static void brute_integers(const char *schema, long lo, long hi, long span) {
    char err[256] = "", s[32];
    model_grammar *g = grammar_of(schema, err, sizeof err);
    CHECK(g != NULL, "%s: %s", schema, err);
    int wrong = 0;
    long first_wrong = 0;
    for (long v = -span; g && v <= span; v++) {
        snprintf(s, sizeof s, "%ld", v);
        if (takes(g, s) != (v >= lo && v <= hi) && !wrong++)
            first_wrong = v;
    }
    CHECK(g && wrong == 0, "%s: %d integers wrong, the first %ld", schema, wrong, first_wrong);
    if (g)
        CHECK(!takes(g, "-0") && !takes(g, "01") && !takes(g, "1.0") && !takes(g, "1e2"),
              "%s: only canonical integers", schema);
    model_grammar_unref(g);
}

static void test_integer_ranges(void) {
    brute_integers("{\"type\": \"integer\", \"minimum\": 0}", 0, 1L << 40, 1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 17}", -5, 17, 1100);
    brute_integers("{\"type\": \"integer\", \"exclusiveMinimum\": -100, \"exclusiveMaximum\": 100}",
                   -99, 99, 1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": 7, \"maximum\": 7}", 7, 7, 1100);
    brute_integers("{\"type\": \"integer\", \"maximum\": -3}", -(1L << 40), -3, 1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": 99, \"maximum\": 1001}", 99, 1001, 1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": -1000, \"maximum\": -10}", -1000, -10,
                   1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": 0.5, \"maximum\": 9.5}", 1, 9, 1100);
    brute_integers("{\"type\": \"integer\", \"minimum\": 10, \"exclusiveMinimum\": 10}", 11,
                   1L << 40, 1100);
    /* draft 4 booleans */
    brute_integers("{\"type\": \"integer\", \"minimum\": 1, \"exclusiveMinimum\": true, "
                   "\"maximum\": 5, \"exclusiveMaximum\": true}",
                   2, 4, 1100);
    /* large bounds: exact digits; past 2^53 one double inwards */
    const char *big_good[] = {"100000000000000016384", "999999999999999999999", NULL};
    const char *big_bad[] = {
        "100000000000000016383", "99999999999999999999", "1000000000000000000000", "-1", "0", NULL};
    check_schema("{\"type\": \"integer\", \"minimum\": 1e20}", big_good, big_bad);
    /* -9007199254740993 reads as -2^53 and 9007199254740994 as itself: both
     * move one double inwards */
    const char *near_good[] = {"9007199254740992", "-9007199254740991", "0", NULL};
    const char *near_bad[] = {"9007199254740993", "9007199254740994", "-9007199254740992",
                              "-9007199254740993", NULL};
    check_schema("{\"type\": \"integer\", \"minimum\": -9007199254740993, \"maximum\": "
                 "9007199254740994}",
                 near_good, near_bad);
    const char *wide_good[] = {"9999999999999999", "-9999999999999999", NULL};
    const char *wide_bad[] = {"10000000000000000", NULL};
    check_schema("{\"type\": \"integer\", \"maximum\": 1e300}", wide_good, wide_bad);
    check_refused("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer lies");
    check_refused("{\"type\": \"integer\", \"minimum\": 1e50}", "'minimum' is beyond");
    check_refused("{\"type\": \"integer\", \"minimum\": \"1\"}", "'minimum' must be a number");
    check_refused("{\"type\": \"integer\", \"exclusiveMinimum\": true}", "needs 'minimum'");
}

/* Decimals of two places in [-9.99, 9.99], and each with a trailing zero:
 * taken exactly when the value (in hundredths) is in [lo, hi]. */
static void brute_decimals(const char *schema, long lo, long hi) {
    char err[256] = "";
    model_grammar *g = grammar_of(schema, err, sizeof err);
    CHECK(g != NULL, "%s: %s", schema, err);
    int wrong = 0;
    char first[40] = "";
    for (long v = -999; g && v <= 999; v++) {
        long a = v < 0 ? -v : v;
        int in = v >= lo && v <= hi;
        const char *sign = v < 0 ? "-" : "";
        char forms[4][40];
        int nf = 0;
        snprintf(forms[nf++], 40, "%s%ld.%02ld", sign, a / 100, a % 100);
        snprintf(forms[nf++], 40, "%s%ld.%02ld0", sign, a / 100, a % 100);
        if (a % 10 == 0)
            snprintf(forms[nf++], 40, "%s%ld.%ld", sign, a / 100, a % 100 / 10);
        if (a % 100 == 0 && v != 0)
            snprintf(forms[nf++], 40, "%s%ld", sign, a / 100);
        for (int f = 0; f < nf; f++)
            if (takes(g, forms[f]) != in && !wrong++)
                memcpy(first, forms[f], sizeof first);
    }
    CHECK(g && wrong == 0, "%s: %d decimals wrong, the first %s", schema, wrong, first);
    model_grammar_unref(g);
}

static void test_number_ranges(void) {
    brute_decimals("{\"type\": \"number\", \"minimum\": -2.25, \"maximum\": 3.75}", -225, 375);
    brute_decimals("{\"type\": \"number\", \"minimum\": 0}", 0, 100000);
    brute_decimals("{\"type\": \"number\", \"maximum\": -0.5}", -100000, -50);
    brute_decimals("{\"type\": \"number\", \"minimum\": 1.05, \"maximum\": 1.95}", 105, 195);
    brute_decimals("{\"type\": \"number\", \"minimum\": -1, \"maximum\": 1}", -100, 100);
    brute_decimals("{\"type\": \"number\", \"minimum\": 0.3, \"maximum\": 0.3}", 30, 30);
    brute_decimals("{\"type\": \"number\", \"minimum\": 2.5, \"maximum\": 7}", 250, 700);
    /* exclusive bounds: the next double past them, never the bound */
    const char *x_good[] = {"0.0000000000000001", "0.5", "0.9999999999999999", "0.25", NULL};
    const char *x_bad[] = {"0",   "0.0",  "-0.0", "1",    "1.0", "0.99999999999999999",
                           "1.5", "-0.1", "1e-1", "5E-1", NULL};
    check_schema("{\"type\": \"number\", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 1}", x_good,
                 x_bad);
    /* a bound read as its shortest decimal: 0.1 itself is in range */
    const char *t_good[] = {"0.1", "0.10", "0.2", "100", NULL};
    const char *t_bad[] = {"0.09999999", "0.0999999999999999", "0", NULL};
    check_schema("{\"type\": \"number\", \"minimum\": 0.1}", t_good, t_bad);
    /* a bound finer than 16 decimals rounds inwards */
    const char *f_good[] = {"0.0000000000000002", "0.5", NULL};
    const char *f_bad[] = {"0.0000000000000001", "0", NULL};
    check_schema("{\"type\": \"number\", \"minimum\": 1.5e-16}", f_good, f_bad);
    const char *n_good[] = {"-1.5", "-0", "-0.0", "0", "2", "-1.4999", NULL};
    const char *n_bad[] = {"-1.51", "2.0001", "-2", NULL};
    check_schema("{\"type\": \"number\", \"minimum\": -1.5, \"maximum\": 2}", n_good, n_bad);
    check_refused("{\"type\": \"number\", \"exclusiveMinimum\": 1, \"exclusiveMaximum\": 1}",
                  "no number");
}

/* Every integer of [-span, span]: taken exactly when a multiple of m in
 * [lo, hi]. */
static void brute_multiples(const char *schema, long m, long lo, long hi, long span) {
    char err[256] = "", s[32];
    model_grammar *g = grammar_of(schema, err, sizeof err);
    CHECK(g != NULL, "%s: %s", schema, err);
    int wrong = 0;
    long first_wrong = 0;
    for (long v = -span; g && v <= span; v++) {
        snprintf(s, sizeof s, "%ld", v);
        if (takes(g, s) != (v % m == 0 && v >= lo && v <= hi) && !wrong++)
            first_wrong = v;
    }
    CHECK(g && wrong == 0, "%s: %d integers wrong, the first %ld", schema, wrong, first_wrong);
    model_grammar_unref(g);
}

/* Random ranges (a fixed seed): integers, and decimals of up to three
 * places, each checked over a window around them. */
static void test_random_ranges(void) {
    srand(36);
    for (int t = 0; t < 24; t++) {
        long a = rand() % 2401 - 1200, b = rand() % 2401 - 1200;
        long lo = a < b ? a : b, hi = a < b ? b : a;
        char schema[160];
        int ex = t % 3 == 2; /* exclusive bounds */
        snprintf(schema, sizeof schema,
                 ex ? "{\"type\": \"integer\", \"exclusiveMinimum\": %ld, \"exclusiveMaximum\": "
                      "%ld}"
                    : "{\"type\": \"integer\", \"minimum\": %ld, \"maximum\": %ld}",
                 ex ? lo - 1 : lo, ex ? hi + 1 : hi);
        brute_integers(schema, lo, hi, 1300);
    }
    for (int t = 0; t < 16; t++) {
        /* bounds in thousandths; the window in hundredths */
        long a = rand() % 19999 - 9999, b = rand() % 19999 - 9999;
        long lo = a < b ? a : b, hi = a < b ? b : a;
        char schema[160];
        snprintf(schema, sizeof schema,
                 "{\"type\": \"number\", \"minimum\": %s%ld.%03ld, \"maximum\": %s%ld.%03ld}",
                 lo < 0 ? "-" : "", labs(lo) / 1000, labs(lo) % 1000, hi < 0 ? "-" : "",
                 labs(hi) / 1000, labs(hi) % 1000);
        /* v hundredths is in range when 10 v is within [lo, hi] thousandths */
        long lo_c = lo >= 0 ? (lo + 9) / 10 : -((-lo) / 10),
             hi_c = hi >= 0 ? hi / 10 : -((-hi + 9) / 10);
        brute_decimals(schema, lo_c, hi_c);
    }
}

static void test_multiple_of(void) {
    const long inf = 1L << 50;
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 5}", 5, -inf, inf, 3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 25}", 25, -inf, inf, 3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 7}", 7, -inf, inf, 3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 12, \"minimum\": 0}", 12, 0, inf,
                    3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 3, \"exclusiveMinimum\": 0}", 3, 1,
                    inf, 3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 100, \"maximum\": 0}", 100, -inf, 0,
                    3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 5, \"minimum\": 10, \"maximum\": 50}",
                    5, 10, 50, 3000);
    brute_multiples("{\"type\": \"number\", \"multipleOf\": 4, \"minimum\": -30, \"maximum\": 30}",
                    4, -30, 30, 3000);
    brute_multiples("{\"type\": \"integer\", \"multipleOf\": 1, \"minimum\": 3}", 1, 3, inf, 3000);
    /* below 2^53, where a double divides them exactly */
    const char *long_good[] = {"999999999999995", "-100000000000000", NULL};
    const char *long_bad[] = {"999999999999996", "1000000000000000", "9999999999999995", NULL};
    check_schema("{\"type\": \"integer\", \"multipleOf\": 5}", long_good, long_bad);
    check_refused("{\"type\": \"integer\", \"multipleOf\": 0.5}", "'multipleOf' other than");
    check_refused("{\"type\": \"integer\", \"multipleOf\": 7, \"minimum\": 100}", "'multipleOf'");
    check_refused("{\"type\": \"integer\", \"multipleOf\": 97}", "'multipleOf' 97");
    check_refused("{\"type\": \"integer\", \"multipleOf\": 5, \"minimum\": 6, \"maximum\": 9}",
                  "no multiple");
}

/* ---- strings ------------------------------------------------------------------------ */

static void test_pattern(void) {
    const char *a_good[] = {"\"555-1234\"", "\"000-0000\"", NULL};
    const char *a_bad[] = {"\"55-1234\"", "\"555-12345\"", "\"a55-1234\"", "555-1234", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"^\\\\d{3}-\\\\d{4}$\"}", a_good, a_bad);
    /* characters JSON escapes: the grammar writes the escape */
    const char *q_good[] = {"\"a\\\"b\"", "\"a\\\\b\"", "\"a\\tb\"", "\"a\\nb\"", NULL};
    const char *q_bad[] = {"\"a\"b\"", "\"a\tb\"", "\"a\nb\"", "\"a\\u0022b\"", "\"ab\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"^a[\\\"\\\\\\\\\\\\t\\\\n]b$\"}", q_good,
                 q_bad);
    /* '.' takes no line terminator; a negated class takes controls as escapes */
    const char *d_good[] = {"\"x\"", "\"\\\"\"", "\"\\\\\"", "\"\\u0001\"", NULL};
    const char *d_bad[] = {"\"\\n\"", "\"\\r\"", "\"\xe2\x80\xa8\"", "\"\x01\"", "\"xy\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \".\"}", d_good, d_bad);
    const char *n_good[] = {"\"\\t\"", "\"a\"", "\"\\u001F\"", NULL};
    const char *n_bad[] = {"\"b\"", "\"\t\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"[^b-z]\"}", n_good, n_bad);
    /* \S keeps to ASCII in JSON Schema patterns */
    const char *s_good[] = {"\"a~\"", NULL};
    const char *s_bad[] = {"\"a \"", "\"a\xc3\xa9\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"^a\\\\S$\"}", s_good, s_bad);
    /* maxLength bounds the repetitions; minLength above the shortest is refused */
    const char *l_good[] = {"\"abcde\"", "\"a\"", NULL};
    const char *l_bad[] = {"\"abcdef\"", "\"\"", "\"aB\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"^[a-z]+$\", \"maxLength\": 5}", l_good,
                 l_bad);
    const char *m_good[] = {"\"ab12\"", "\"ab1\"", NULL};
    const char *m_bad[] = {"\"ab1234\"", NULL};
    check_schema("{\"type\": \"string\", \"pattern\": \"^ab\\\\d+$\", \"maxLength\": 4, "
                 "\"minLength\": 3}",
                 m_good, m_bad);
    check_refused("{\"type\": \"string\", \"pattern\": \"^[a-z]+$\", \"minLength\": 3}",
                  "'minLength'");
    check_refused("{\"type\": \"string\", \"pattern\": \"^[a-z]{9}$\", \"maxLength\": 5}",
                  "'maxLength'");
    check_refused("{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "backreferences");
    check_refused("{\"type\": \"string\", \"pattern\": 5}", "'pattern' must be a string");
    /* a pattern without "type" still speaks of strings */
    const char *t_good[] = {"\"ok\"", NULL};
    const char *t_bad[] = {"1", "\"no\"", NULL};
    check_schema("{\"pattern\": \"^ok$\"}", t_good, t_bad);
}

static void test_formats(void) {
    const char *v4_good[] = {"\"0.0.0.0\"", "\"255.255.255.255\"", "\"192.168.1.10\"",
                             "\"10.0.99.249\"", NULL};
    const char *v4_bad[] = {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\"", "\"1.1.1.1.1\"",
                            "\"1.1.1.260\"", "\"a.b.c.d\"",  NULL};
    check_schema("{\"type\": \"string\", \"format\": \"ipv4\"}", v4_good, v4_bad);
    const char *v6_good[] = {"\"::\"",
                             "\"::1\"",
                             "\"1::\"",
                             "\"2001:db8::8a2e:370:7334\"",
                             "\"1:2:3:4:5:6:7:8\"",
                             "\"::ffff:192.0.2.1\"",
                             "\"1:2:3:4:5:6:7::\"",
                             "\"::2:3:4:5:6:7:8\"",
                             "\"FFFF:0:0:0:0:0:0:1\"",
                             "\"1:2:3:4:5:6:1.2.3.4\"",
                             NULL};
    const char *v6_bad[] = {
        "\"1:2:3:4:5:6:7:8:9\"",     "\"12345::\"", "\"1::2::3\"", "\":::\"",
        "\"1:2:3:4:5:6:7\"",         "\"::1.2.3\"", "\"g::\"",     "\"::%eth0\"",
        "\"1:2:3:4:5:6:7:1.2.3.4\"", NULL};
    check_schema("{\"type\": \"string\", \"format\": \"ipv6\"}", v6_good, v6_bad);
    const char *h_good[] = {"\"example.com\"",  "\"a\"",         "\"a-b.c\"",
                            "\"x1.y2.z3.com\"", "\"localhost\"", NULL};
    const char *h_bad[] = {"\"-a.com\"",    "\"a-.com\"",  "\"a..b\"",   "\"1.2.3.4\"",
                           "\"a.b.c.d.e\"", "\"a_b.com\"", "\"a.com.\"", NULL};
    check_schema("{\"type\": \"string\", \"format\": \"hostname\"}", h_good, h_bad);
    char long_label[128];
    snprintf(long_label, sizeof long_label, "\"%.*s.com\"", 64,
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    const char *h_long[] = {long_label, NULL};
    check_schema("{\"type\": \"string\", \"format\": \"hostname\"}", NULL, h_long);
    const char *e_good[] = {"\"a@b.co\"", "\"first.last@example.com\"",
                            "\"x+tag@mail.example.org\"", "\"o'brien@ex-ample.io\"", NULL};
    const char *e_bad[] = {"\"a@b\"",     "\"@b.com\"",    "\"a..b@c.com\"",
                           "\"a@b.c\"",   "\"a b@c.com\"", "\".a@b.com\"",
                           "\"a@b.c0m\"", "\"a@@b.com\"",  NULL};
    check_schema("{\"type\": \"string\", \"format\": \"email\"}", e_good, e_bad);
    const char *u_good[] = {"\"https://example.com\"",
                            "\"https://example.com/path?q=1#frag\"",
                            "\"http://[::1]:8080/\"",
                            "\"http://1.2.3.4/a/b\"",
                            "\"ftp://files.example.org/x.txt\"",
                            NULL};
    const char *u_bad[] = {"\"example.com\"",
                           "\"http://exa mple.com\"",
                           "\"http:///x\"",
                           "\"http://a.com/%zz\"",
                           "\"1http://a.com\"",
                           "\"http://a.com:99999\"",
                           NULL};
    check_schema("{\"type\": \"string\", \"format\": \"uri\"}", u_good, u_bad);
    /* pydantic's URL: minLength 1, maxLength 2083 */
    check_schema("{\"type\": \"string\", \"format\": \"uri\", \"minLength\": 1, \"maxLength\": "
                 "2083}",
                 u_good, u_bad);
    const char *d_good[] = {"\"2024-02-28\"", "\"1999-12-31\"", "\"2000-04-30\"", NULL};
    const char *d_bad[] = {"\"2023-02-31\"", "\"2023-04-31\"", "\"0000-01-01\"", "\"2023-13-01\"",
                           NULL};
    check_schema("{\"type\": \"string\", \"format\": \"date\"}", d_good, d_bad);
    check_refused("{\"type\": \"string\", \"format\": \"email\", \"maxLength\": 50}",
                  "'maxLength'");
    check_refused("{\"type\": \"string\", \"format\": \"uri\", \"maxLength\": 300}", "'maxLength'");
    check_refused("{\"type\": \"string\", \"format\": \"ipv4\", \"minLength\": 8}", "'minLength'");
    check_refused("{\"type\": \"string\", \"format\": \"idn-email\"}", "format 'idn-email'");
    check_refused("{\"type\": \"string\", \"format\": \"ipv4\", \"pattern\": \"x\"}",
                  "'pattern' beside 'format'");
}

/* ---- objects and arrays ------------------------------------------------------------ */

static void test_tuples(void) {
    const char *t_good[] = {"[1, \"a\"]", "[-5,\"\"]", NULL};
    const char *t_bad[] = {"[1]", "[1, \"a\", 2]", "[\"a\", 1]", "[]", NULL};
    check_schema("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": "
                 "\"string\"}], \"minItems\": 2, \"maxItems\": 2}",
                 t_good, t_bad);
    const char *i_good[] = {"[1]", "[1, \"a\"]", "[1, \"a\", true, false]", "[]", NULL};
    const char *i_bad[] = {"[1, \"a\", 3]", "[\"a\"]", "[1, 2]", NULL};
    check_schema("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": "
                 "\"string\"}], \"items\": {\"type\": \"boolean\"}}",
                 i_good, i_bad);
    const char *f_good[] = {"[1, \"a\"]", "[1]", NULL};
    const char *f_bad[] = {"[1, \"a\", null]", "[]", NULL};
    check_schema("{\"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], "
                 "\"items\": false, \"minItems\": 1}",
                 f_good, f_bad);
    const char *m_good[] = {"[1, \"a\", true]", NULL};
    const char *m_bad[] = {"[1, \"a\"]", "[1, \"a\", true, true]", NULL};
    check_schema("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": "
                 "\"string\"}], \"items\": {\"type\": \"boolean\"}, \"minItems\": 3, "
                 "\"maxItems\": 3}",
                 m_good, m_bad);
    check_refused("{\"type\": \"array\", \"prefixItems\": [{}], \"items\": false, \"minItems\": 2}",
                  "'minItems'");
}

static void test_unique_items(void) {
    const char *e_good[] = {"[]", "[\"a\"]", "[\"a\", \"b\"]", "[\"c\", \"a\", \"b\"]", NULL};
    const char *e_bad[] = {"[\"a\", \"a\"]", "[\"a\", \"b\", \"a\"]", "[\"d\"]", NULL};
    check_schema("{\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\", \"c\"]}, "
                 "\"uniqueItems\": true}",
                 e_good, e_bad);
    const char *b_good[] = {"[true, false]", "[false]", NULL};
    const char *b_bad[] = {"[true, true]", "[]", NULL};
    check_schema("{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"uniqueItems\": "
                 "true, \"minItems\": 1}",
                 b_good, b_bad);
    const char *r_good[] = {"[1, 2.5]", NULL};
    const char *r_bad[] = {"[1, 1]", "[1, 1.0]", NULL};
    check_schema("{\"$defs\": {\"E\": {\"enum\": [1, 2.5, 1.0]}}, \"type\": \"array\", \"items\": "
                 "{\"$ref\": \"#/$defs/E\"}, \"uniqueItems\": true}",
                 r_good, r_bad);
    const char *s_good[] = {"[\"x\", \"x\"]", NULL};
    check_schema("{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"uniqueItems\": "
                 "false}",
                 s_good, NULL);
    const char *o_good[] = {"[\"x\"]", "[]", NULL};
    check_schema("{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"uniqueItems\": "
                 "true, \"maxItems\": 1}",
                 o_good, NULL);
    check_refused("{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"uniqueItems\": true}",
                  "'uniqueItems'");
    check_refused("{\"type\": \"array\", \"items\": {\"enum\": [1, 2]}, \"uniqueItems\": true, "
                  "\"minItems\": 3}",
                  "'minItems'");
}

static void test_properties_count(void) {
    const char *d_good[] = {"{\"a\": 1}", "{\"a\": 1, \"b\": 2}", NULL};
    const char *d_bad[] = {"{}", "{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"a\": \"x\"}", NULL};
    check_schema("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}, "
                 "\"minProperties\": 1, \"maxProperties\": 2}",
                 d_good, d_bad);
    const char *p_good[] = {"{\"a\": 1, \"c\": 3}", "{\"b\": 2, \"c\": 3}", "{\"a\": 1, \"b\": 2}",
                            NULL};
    const char *p_bad[] = {"{\"a\": 1}", "{\"a\": 1, \"b\": 2, \"c\": 3}", "{}", NULL};
    check_schema("{\"type\": \"object\", \"properties\": {\"a\": {}, \"b\": {}, \"c\": {}}, "
                 "\"minProperties\": 2, \"maxProperties\": 2}",
                 p_good, p_bad);
    const char *r_good[] = {"{\"a\": 1, \"x\": true}", "{\"a\": 1, \"b\": 2}", NULL};
    const char *r_bad[] = {"{\"a\": 1}", "{\"a\": 1, \"b\": 2, \"x\": 3}", NULL};
    check_schema("{\"type\": \"object\", \"properties\": {\"a\": {}, \"b\": {}}, \"required\": "
                 "[\"a\"], \"additionalProperties\": true, \"minProperties\": 2, "
                 "\"maxProperties\": 2}",
                 r_good, r_bad);
    /* additional keys never repeat a declared name, in any spelling */
    const char *k_good[] = {"{\"a\": 1, \"b\": \"x\"}", "{\"ab\": \"x\"}", "{\"\": \"x\"}",
                            "{\"a\": 1, \"a\\u0062\": \"y\"}", NULL};
    const char *k_bad[] = {"{\"a\": 1, \"a\": \"x\"}", "{\"a\": \"x\"}", "{\"\\u0061\": \"x\"}",
                           NULL};
    check_schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, "
                 "\"additionalProperties\": {\"type\": \"string\"}}",
                 k_good, k_bad);
    const char *q_good[] = {"{\"q\\\"\": 1, \"q\": 2}", NULL};
    const char *q_bad[] = {"{\"q\\\"\": 1, \"q\\\"\": 2}", NULL};
    check_schema("{\"properties\": {\"q\\\"\": {\"type\": \"integer\"}}, "
                 "\"additionalProperties\": true}",
                 q_good, q_bad);
    /* many names differing at one character: a long class of characters
     * leaving the trie */
    char many[2048] = "{\"properties\": {";
    const char *chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (const char *ch = chars; *ch; ch++) {
        size_t at = strlen(many);
        snprintf(many + at, sizeof many - at, "%s\"%c\": {\"type\": \"integer\"}",
                 ch == chars ? "" : ", ", *ch);
    }
    strcat(many, "}, \"additionalProperties\": {\"type\": \"boolean\"}}");
    const char *m_good[] = {"{\"a\": 1, \"!\": true}", "{\"Z\": 2, \"ab\": false}", NULL};
    const char *m_bad[] = {"{\"a\": 1, \"Z\": true}", "{\"9\": true}", NULL};
    check_schema(many, m_good, m_bad);
    check_refused("{\"type\": \"object\", \"additionalProperties\": true, \"minProperties\": 2}",
                  "'minProperties'");
    check_refused("{\"type\": \"object\", \"properties\": {\"a\": {}}, \"minProperties\": 2}",
                  "no object meets");
    check_refused("{\"type\": \"object\", \"minProperties\": 3, \"maxProperties\": 2}",
                  "maxProperties is below");
}

static void test_discriminator(void) {
    static const char schema[] =
        "{\"$defs\": {"
        "\"Cat\": {\"type\": \"object\", \"properties\": {\"pet_type\": {\"const\": \"cat\", "
        "\"type\": \"string\"}, \"meows\": {\"type\": \"integer\"}}, \"required\": [\"pet_type\", "
        "\"meows\"]},"
        "\"Dog\": {\"type\": \"object\", \"properties\": {\"pet_type\": {\"type\": \"string\"}, "
        "\"barks\": {\"type\": \"integer\"}}, \"required\": [\"barks\"]}},"
        "\"type\": \"object\", \"properties\": {\"pet\": {\"oneOf\": [{\"$ref\": "
        "\"#/$defs/Cat\"}, {\"$ref\": \"#/$defs/Dog\"}], \"discriminator\": {\"propertyName\": "
        "\"pet_type\", \"mapping\": {\"cat\": \"#/$defs/Cat\", \"dog\": \"#/$defs/Dog\", "
        "\"hound\": \"#/$defs/Dog\"}}}}, \"required\": [\"pet\"]}";
    const char *good[] = {"{\"pet\": {\"pet_type\": \"cat\", \"meows\": 1}}",
                          "{\"pet\": {\"pet_type\": \"dog\", \"barks\": 2}}",
                          "{\"pet\": {\"pet_type\": \"hound\", \"barks\": 2}}", NULL};
    const char *bad[] = {"{\"pet\": {\"pet_type\": \"dog\", \"meows\": 1}}",
                         "{\"pet\": {\"pet_type\": \"wolf\", \"barks\": 2}}",
                         "{\"pet\": {\"barks\": 2}}", NULL};
    check_schema(schema, good, bad);
    check_refused("{\"$defs\": {\"C\": {\"type\": \"object\", \"properties\": {\"t\": {\"const\": "
                  "\"c\"}}}}, \"oneOf\": [{\"$ref\": \"#/$defs/C\"}], \"discriminator\": "
                  "{\"propertyName\": \"t\", \"mapping\": {\"x\": \"#/$defs/C\"}}}",
                  "does not allow");
    check_refused("{\"$defs\": {\"C\": {\"type\": \"object\", \"properties\": {\"t\": {}}}}, "
                  "\"oneOf\": [{\"$ref\": \"#/$defs/C\"}], \"discriminator\": {\"propertyName\": "
                  "\"u\", \"mapping\": {\"x\": \"#/$defs/C\"}}}",
                  "'u' is not in");
    check_refused("{\"oneOf\": [{}], \"discriminator\": {}}", "'propertyName'");
}

static void test_refused(void) {
    static const char *const kw[] = {
        "patternProperties", "propertyNames",        "contains", "not", "if",
        "dependentRequired", "unevaluatedProperties"};
    for (size_t i = 0; i < sizeof kw / sizeof *kw; i++) {
        char schema[128], needle[64];
        snprintf(schema, sizeof schema, "{\"type\": \"object\", \"%s\": {}}", kw[i]);
        snprintf(needle, sizeof needle, "'%s' is not supported", kw[i]);
        check_refused(schema, needle);
    }
    /* a client's text in a message stays on one line */
    check_refused("{\"type\": \"inte\\ner\"}", "type 'inte?er' is unknown");
    check_refused("{\"type\": \"string\", \"format\": \"a\\tb\"}", "format 'a?b'");
    /* minLength without "type" is a string's */
    const char *good[] = {"\"ab\"", NULL};
    const char *bad[] = {"\"a\"", "12", NULL};
    check_schema("{\"minLength\": 2, \"maxLength\": 2}", good, bad);
}

/* A tool without parameters takes none, as OpenAI reads it: its arguments
 * are {} (with whitespace at most), whatever the call's format around them. */
static void test_tool_without_parameters(void) {
    static const char body[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Time?\"}], \"tools\": ["
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}},"
        "{\"type\": \"function\", \"function\": {\"name\": \"later\", \"parameters\": null}}],"
        "\"tool_choice\": \"required\"}";
    srv_api_limits lim = srv_api_limits_default(100);
    srv_chat_req r;
    srv_api_error e;
    int rc = srv_api_parse_chat(body, strlen(body), &lim, &r, &e);
    CHECK(rc == 0, "parses: %s", rc ? e.message : "");
    if (rc)
        return;
    for (int i = 0; i < r.n_tools; i++) {
        size_t n = strlen(r.tools[i].args_expr) + strlen(srv_schema_base()) + 16;
        char *text = malloc(n), err[256] = "";
        snprintf(text, n, "root ::= %s\n%s", r.tools[i].args_expr, srv_schema_base());
        model_grammar *g = NULL;
        model_grammar_compile(text, strlen(text), NULL, &g, err, sizeof err);
        CHECK(g && takes(g, "{}") && takes(g, "{ }") && !takes(g, "{\"x\": 1}") &&
                  !takes(g, "{\"\": null}"),
              "%s: arguments {} only: %s", r.tools[i].name, err);
        model_grammar_unref(g);
        free(text);
    }
    srv_chat_req_free(&r);
}

/* What the new keywords cost: a schema with every format, ranges and a
 * pattern converts and compiles in milliseconds, within the grammar's
 * limits (printed for the record). */
static void test_cost(void) {
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {"
        "\"v4\": {\"type\": \"string\", \"format\": \"ipv4\"},"
        "\"v6\": {\"type\": \"string\", \"format\": \"ipv6\"},"
        "\"host\": {\"type\": \"string\", \"format\": \"hostname\"},"
        "\"mail\": {\"type\": \"string\", \"format\": \"email\"},"
        "\"site\": {\"type\": \"string\", \"format\": \"uri\", \"maxLength\": 2083},"
        "\"link\": {\"type\": \"string\", \"format\": \"uri\"},"
        "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120},"
        "\"big\": {\"type\": \"integer\", \"minimum\": -123456789012, \"maximum\": 98765432109876},"
        "\"p\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 1},"
        "\"t\": {\"type\": \"number\", \"minimum\": -40.5, \"maximum\": 50.25},"
        "\"n\": {\"type\": \"integer\", \"multipleOf\": 7},"
        "\"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{3}-\\\\d{3}$\"},"
        "\"d\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}, "
        "\"maxProperties\": 20}}}";
    cJSON *j = cJSON_Parse(schema);
    char *text = NULL, err[256] = "";
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = j ? srv_schema_to_gbnf(j, &text, err, sizeof err) : -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    model_grammar *g = NULL;
    if (rc == 0)
        rc = model_grammar_compile(text, strlen(text), NULL, &g, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    CHECK(rc == 0 && g, "the kitchen-sink schema compiles: %s", err);
    if (g)
        printf("cost: kitchen-sink schema: %zu bytes of GBNF, %d rules, converted in %.3f ms, "
               "compiled in %.3f ms\n",
               strlen(text), model_grammar_n_rules(g),
               (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
               (t2.tv_sec - t1.tv_sec) * 1e3 + (t2.tv_nsec - t1.tv_nsec) / 1e6);
    model_grammar_unref(g);
    free(text);
    cJSON_Delete(j);
}

/* Allocation failure at each allocation of a conversion using every part
 * of the converter: 0 or BRISK_ENOMEM, never anything else, and no leak
 * (LeakSanitizer in the ASan build, which has the injector). */
static void test_fault_sweep(void) {
    if (!brisk_fault_compiled())
        return;
    static const char schema[] =
        "{\"$defs\": {\"C\": {\"type\": \"object\", \"properties\": {\"t\": {\"const\": "
        "\"c\"}, \"n\": {\"type\": \"integer\", \"multipleOf\": 7}}},"
        "\"D\": {\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"string\"}}}},"
        "\"type\": \"object\", \"properties\": {"
        "\"u\": {\"type\": \"array\", \"items\": {\"anyOf\": [{\"enum\": [1, \"a\"]}, {\"type\": "
        "[\"boolean\", \"null\"]}]}, \"uniqueItems\": true},"
        "\"v\": {\"oneOf\": [{\"$ref\": \"#/$defs/C\"}, {\"$ref\": \"#/$defs/D\"}], "
        "\"discriminator\": {\"propertyName\": \"t\", \"mapping\": {\"c\": \"#/$defs/C\", "
        "\"d\": \"#/$defs/D\"}}},"
        "\"w\": {\"prefixItems\": [{\"type\": \"number\", \"minimum\": -1.5, "
        "\"exclusiveMaximum\": 2}, {\"format\": \"uri\", \"maxLength\": 2083}], \"items\": false},"
        "\"x\": {\"type\": \"string\", \"pattern\": \"^[a-z\\\"]+$\", \"maxLength\": 5},"
        "\"y\": {\"type\": \"integer\", \"minimum\": -100, \"maximum\": 12345},"
        "\"z\": {\"format\": \"email\"}},"
        "\"additionalProperties\": {\"type\": \"boolean\"}, \"maxProperties\": 5}";
    char err[256];
    CHECK(brisk_alloc_init(err, sizeof err) == 0, "alloc init: %s", err);
    cJSON *j = cJSON_Parse(schema);
    CHECK(j != NULL, "the sweep's schema parses");
    if (!j)
        return;
    char *text = NULL;
    CHECK(brisk_fault_configure("count", err, sizeof err) == 0, "count: %s", err);
    brisk_fault_arm(1);
    int rc = srv_schema_to_gbnf(j, &text, err, sizeof err);
    brisk_fault_arm(0);
    unsigned long total = brisk_fault_seen();
    free(text);
    CHECK(rc == 0 && total > 0, "the sweep's schema converts: %d, %s", rc, err);
    int bad = 0;
    for (unsigned long nth = 1; nth <= total; nth++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", nth);
        CHECK(brisk_fault_configure(spec, err, sizeof err) == 0, "%s: %s", spec, err);
        text = NULL;
        brisk_fault_arm(1);
        rc = srv_schema_to_gbnf(j, &text, err, sizeof err);
        brisk_fault_arm(0);
        if (!((rc == 0 && text) || (rc == BRISK_ENOMEM && !text)) && !bad++)
            CHECK(0, "%s: %d, %s", spec, rc, err);
        free(text);
    }
    CHECK(bad == 0, "%d of %lu failed allocations misreported", bad, total);
    printf("fault sweep: %lu allocations, each failed once\n", total);
    cJSON_Delete(j);
}

int main(void) {
    test_ends_at_value();
    test_integer_ranges();
    test_number_ranges();
    test_random_ranges();
    test_multiple_of();
    test_pattern();
    test_formats();
    test_tuples();
    test_unique_items();
    test_properties_count();
    test_discriminator();
    test_refused();
    test_tool_without_parameters();
    test_cost();
    test_fault_sweep();
    return BT_SUMMARY("test_srv_schema");
}
