/* test_srv_sse.c - the output side of the API layer: UTF-8 sanitising and the
 * stream hold-back rule against an independent validator on random bytes,
 * every response and chunk builder re-parsed with cJSON and checked field by
 * field, the SSE framing, and random token bytes that must always give valid,
 * one-line JSON. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_utf8.h"
#include "server/api/srv_api.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Well-formed UTF-8 from the code point ranges, independent of brisk_utf8_*. */
static int strict_utf8(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], cp;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 4, cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

/* Random bytes biased toward UTF-8 structure (leads, continuations, edge
 * bytes), so that valid, truncated and ill-formed sequences all occur. */
static void random_bytes(char *b, size_t n) {
    static const unsigned char special[] = {0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0,
                                            0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0,
                                            0xf1, 0xf4, 0xf5, 0xff, '"',  '\\', '\n', 0x01, 0x1f};
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd() % 4;
        if (r == 0)
            b[i] = (char)(0x20 + rnd() % 95);
        else if (r == 1)
            b[i] = (char)(0x80 + rnd() % 64);
        else if (r == 2)
            b[i] = (char)special[rnd() % sizeof special];
        else
            b[i] = (char)rnd();
    }
}

/* A random well-formed string of code points of every length class. */
static size_t random_valid(char *b, int n_cp) {
    size_t k = 0;
    for (int i = 0; i < n_cp; i++) {
        uint32_t cp;
        switch (rnd() % 4) {
        case 0: cp = rnd() % 0x80; break;
        case 1: cp = 0x80 + rnd() % (0x800 - 0x80); break;
        case 2:
            cp = 0x800 + rnd() % (0x10000 - 0x800);
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xFFFD;
            break;
        default: cp = 0x10000 + rnd() % (0x110000 - 0x10000);
        }
        if (cp < 0x80) {
            b[k++] = (char)cp;
        } else if (cp < 0x800) {
            b[k++] = (char)(0xC0 | cp >> 6);
            b[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            b[k++] = (char)(0xE0 | cp >> 12);
            b[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            b[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            b[k++] = (char)(0xF0 | cp >> 18);
            b[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            b[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            b[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return k;
}

static void test_utf8_vectors(void) {
    /* The Unicode standard's example for "maximal subparts" (section 3.9):
     * 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d. */
    const char in[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    const char want[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "b\xEF\xBF\xBD"
                        "c\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d";
    char out[64];
    size_t n = brisk_utf8_sanitize(in, sizeof in - 1, out);
    CHECK(n == sizeof want - 1 && !memcmp(out, want, n), "maximal subparts (%zu bytes)", n);

    static const struct {
        const char *s;
        size_t len;
        int valid;
        size_t fffd; /* replacement characters after sanitising */
    } v[] = {
        {"", 0, 1, 0},
        {"abc", 3, 1, 0},
        {"a\0b", 3, 1, 0},
        {"\xC3\xA9", 2, 1, 0},
        {"\xE2\x82\xAC", 3, 1, 0},
        {"\xF0\x9F\x98\x80", 4, 1, 0},
        {"\xF4\x8F\xBF\xBF", 4, 1, 0},
        {"\xEF\xBF\xBF", 3, 1, 0},
        {"\xC0\x80", 2, 0, 2}, /* overlong: C0 is never a lead */
        {"\xC1\xBF", 2, 0, 2},
        {"\xE0\x80\x80", 3, 0, 3}, /* E0 needs A0..BF next */
        {"\xE0\x9F\xBF", 3, 0, 3},
        {"\xED\xA0\x80", 3, 0, 3},     /* surrogate */
        {"\xED\x9F\xBF", 3, 1, 0},     /* U+D7FF */
        {"\xF0\x8F\xBF\xBF", 4, 0, 4}, /* overlong */
        {"\xF4\x90\x80\x80", 4, 0, 4}, /* above U+10FFFF */
        {"\xF5\x80\x80\x80", 4, 0, 4},
        {"\xFF", 1, 0, 1},
        {"\x80\x80", 2, 0, 2},
        {"\xE2\x82", 2, 0, 1}, /* truncated: one maximal subpart */
        {"\xF0\x9F\x98", 3, 0, 1},
        {"\xE2\x82"
         "a",
         3, 0, 1},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        CHECK(brisk_utf8_valid(v[i].s, v[i].len) == v[i].valid, "valid, case %zu", i);
        n = brisk_utf8_sanitize(v[i].s, v[i].len, out);
        size_t fffd = 0;
        for (size_t j = 0; j + 3 <= n; j++)
            if (!memcmp(out + j, "\xEF\xBF\xBD", 3))
                fffd++;
        CHECK(fffd == v[i].fffd && strict_utf8(out, n), "sanitise case %zu: %zu U+FFFD", i, fffd);
    }

    static const struct {
        const char *s;
        size_t len, keep;
    } p[] = {
        {"", 0, 0},
        {"abc", 3, 3},
        {"a\xE2\x82", 3, 1},
        {"a\xE2\x82\xAC", 4, 4},
        {"\xC2", 1, 0},
        {"\xE0", 1, 0},
        {"\xE0\xA0", 2, 0},
        {"\xE0\x80", 2, 2}, /* ill-formed: not held back */
        {"\xF4\x90", 2, 2},
        {"\xF0\x9F\x98", 3, 0},
        {"abc\xF0\x9F\x98", 6, 3},
        {"\xF0\x9F\x98\x80", 4, 4},
        {"\x80", 1, 1},
        {"\x80\x80\x80", 3, 3},
        {"\x80\x80\x80\x80", 4, 4},
        {"\xF0\x80\x80\x80", 4, 4},
        {"\xC3\xA9\xC3", 3, 2},
        {"\xFF", 1, 1},
        {"\xC0", 1, 1},
        {"\xF5", 1, 1},
        {"\xE2\x82\xAC\xE2", 4, 3},
    };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) {
        size_t k = brisk_utf8_complete_prefix(p[i].s, p[i].len);
        CHECK(k == p[i].keep, "complete_prefix case %zu: %zu, want %zu", i, k, p[i].keep);
    }
}

/* Whether some continuation makes tail (1..3 bytes) a well-formed sequence;
 * the second byte has the narrowest ranges, so its edges are enough. */
static int completable(const char *tail, size_t k) {
    static const unsigned char cand[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
    char b[4];
    memcpy(b, tail, k);
    for (size_t c1 = 0; c1 < sizeof cand; c1++)
        for (size_t c2 = 0; c2 < sizeof cand; c2++)
            for (size_t c3 = 0; c3 < sizeof cand; c3++) {
                const unsigned char add[3] = {cand[c1], cand[c2], cand[c3]};
                for (size_t extra = 1; k + extra <= 4; extra++) {
                    memcpy(b + k, add, extra);
                    if (strict_utf8(b, k + extra))
                        return 1;
                }
            }
    return 0;
}

static void test_utf8_random(void) {
    enum { ROUNDS = 20000, MAXN = 48 };
    char a[MAXN], b[MAXN], whole[2 * MAXN], out[6 * MAXN], o1[6 * MAXN], o2[6 * MAXN];
    int bad_valid = 0, bad_split = 0, bad_tail = 0, bad_same = 0, held = 0;
    for (int r = 0; r < ROUNDS; r++) {
        size_t na = rnd() % MAXN, nb = rnd() % MAXN;
        random_bytes(a, na);
        random_bytes(b, nb);
        /* Sanitised output is always valid, and valid input is unchanged. */
        size_t n = brisk_utf8_sanitize(a, na, out);
        if (!strict_utf8(out, n))
            bad_valid++;
        if (brisk_utf8_valid(a, na) != strict_utf8(a, na))
            bad_valid++;
        if (strict_utf8(a, na) && (n != na || memcmp(out, a, na)))
            bad_same++;
        /* The hold-back rule: the tail is short and completable, and
         * sanitising the prefix and then the tail plus later bytes is the
         * same as sanitising everything at once. */
        size_t k = brisk_utf8_complete_prefix(a, na);
        if (k > na || na - k > 3 || (k < na && !completable(a + k, na - k)))
            bad_tail++;
        if (k < na)
            held++;
        memcpy(whole, a, na);
        memcpy(whole + na, b, nb);
        size_t n1 = brisk_utf8_sanitize(a, k, o1);
        n1 += brisk_utf8_sanitize(whole + k, na - k + nb, o1 + n1);
        size_t n2 = brisk_utf8_sanitize(whole, na + nb, o2);
        if (n1 != n2 || memcmp(o1, o2, n1))
            bad_split++;
        /* Random valid strings survive untouched, and nothing is held back. */
        size_t nv = random_valid(a, (int)(rnd() % 10));
        if (!strict_utf8(a, nv) || brisk_utf8_sanitize(a, nv, out) != nv || memcmp(out, a, nv) ||
            brisk_utf8_complete_prefix(a, nv) != nv)
            bad_same++;
        /* A valid string cut anywhere holds back exactly the cut sequence. */
        if (nv) {
            size_t cut = rnd() % nv;
            k = brisk_utf8_complete_prefix(a, cut);
            if (!strict_utf8(a, k) || cut - k > 3 || (k < cut && (a[k] & 0xC0) != 0xC0))
                bad_tail++;
        }
    }
    CHECK(bad_valid == 0, "%d sanitised outputs not valid", bad_valid);
    CHECK(bad_same == 0, "%d valid inputs changed", bad_same);
    CHECK(bad_tail == 0, "%d bad held-back tails", bad_tail);
    CHECK(bad_split == 0, "%d splits changed the text", bad_split);
    CHECK(held > 100, "tails were held back %d times", held);

    size_t dn;
    char *d = brisk_utf8_sanitize_dup("a\xFF", 2, &dn);
    CHECK(d && dn == 4 && !strcmp(d, "a\xEF\xBF\xBD"), "sanitize_dup");
    free(d);
}

/* ---------------------------------------------------------------- builders */

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static int is_str(const cJSON *o, const char *k, const char *want) {
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}

static int is_num(const cJSON *o, const char *k, double want) {
    const cJSON *v = get(o, k);
    return cJSON_IsNumber(v) && fabs(v->valuedouble - want) <= 1e-6 * fmax(1.0, fabs(want));
}

/* Every text a builder returns: one line of valid UTF-8 that parses. */
static cJSON *parse_out(char *j, const char *what) {
    CHECK(j != NULL, "%s: NULL", what);
    if (!j)
        return NULL;
    CHECK(!strchr(j, '\n') && !strchr(j, '\r'), "%s: not one line", what);
    CHECK(strict_utf8(j, strlen(j)), "%s: not UTF-8", what);
    cJSON *o = cJSON_Parse(j);
    CHECK(o != NULL, "%s: does not parse: %s", what, j);
    free(j);
    return o;
}

static void test_completion_json(void) {
    srv_top_logprob top1[] = {{"lo", 2, -0.1f},
                              {"la", 2, -2.5f},
                              {"\xE2", 1, -3.0f},
                              {"\xE3", 1, -4.0f},
                              {"lo", 2, -5.0f}};
    srv_token_logprob lps[] = {
        {"Hel", 3, 0, 0, 0, NULL, 0}, /* echo: first prompt token */
        {"lo", 2, -0.1f, 1, 5, top1, 3},
        {"\xE2\x82", 2, -INFINITY, 1, 0, NULL, 5},
    };
    srv_choice ch[2] = {
        {0, "Hello\n\"q\"\\ \x01\xE2\x82", 15, "length", lps, 3, NULL, 0, NULL, 0, 0},
        {1, "", 0, "stop", NULL, 0, NULL, 0, NULL, 0, 0},
    };
    srv_usage u = {7, 5, 0};
    cJSON *o = parse_out(srv_api_completion_json("cmpl-1", 1700000000, "m\"x", ch, 2, &u, 1),
                         "completion");
    CHECK(is_str(o, "id", "cmpl-1") && is_str(o, "object", "text_completion") &&
              is_num(o, "created", 1700000000) && is_str(o, "model", "m\"x"),
          "head");
    const cJSON *choices = get(o, "choices");
    CHECK(cJSON_GetArraySize(choices) == 2, "two choices");
    const cJSON *c0 = cJSON_GetArrayItem(choices, 0), *c1 = cJSON_GetArrayItem(choices, 1);
    CHECK(is_str(c0, "text", "Hello\n\"q\"\\ \x01\xEF\xBF\xBD"), "text escaped and sanitised");
    CHECK(is_num(c0, "index", 0) && is_str(c0, "finish_reason", "length"), "index, finish");
    const cJSON *lp = get(c0, "logprobs");
    const cJSON *toks = get(lp, "tokens"), *tlp = get(lp, "token_logprobs"),
                *top = get(lp, "top_logprobs"), *off = get(lp, "text_offset");
    CHECK(cJSON_GetArraySize(toks) == 3 && cJSON_GetArraySize(tlp) == 3 &&
              cJSON_GetArraySize(top) == 3 && cJSON_GetArraySize(off) == 3,
          "parallel arrays");
    CHECK(!strcmp(cJSON_GetArrayItem(toks, 2)->valuestring, "\xEF\xBF\xBD"), "token sanitised");
    CHECK(cJSON_IsNull(cJSON_GetArrayItem(tlp, 0)) && cJSON_IsNull(cJSON_GetArrayItem(top, 0)),
          "echo's first token: null");
    CHECK(fabs(cJSON_GetArrayItem(tlp, 1)->valuedouble - (double)-0.1f) < 1e-7, "logprob");
    CHECK(cJSON_GetArrayItem(tlp, 2)->valuedouble == -9999.0, "-inf -> -9999");
    const cJSON *t1 = cJSON_GetArrayItem(top, 1);
    CHECK(cJSON_GetArraySize(t1) == 3, "top: duplicate texts dropped (%d)", cJSON_GetArraySize(t1));
    CHECK(is_num(t1, "lo", -0.1) && is_num(t1, "la", -2.5) && is_num(t1, "\xEF\xBF\xBD", -3.0),
          "top entries keep the likelier duplicate");
    CHECK(cJSON_GetArrayItem(off, 1)->valuedouble == 3 &&
              cJSON_GetArrayItem(off, 2)->valuedouble == 5,
          "text_offset");
    CHECK(is_str(c1, "text", "") && cJSON_GetArraySize(get(get(c1, "logprobs"), "tokens")) == 0,
          "empty choice");
    const cJSON *us = get(o, "usage");
    CHECK(is_num(us, "prompt_tokens", 7) && is_num(us, "completion_tokens", 5) &&
              is_num(us, "total_tokens", 12),
          "usage");
    cJSON_Delete(o);

    /* Without logprobs, without usage, a NULL finish reason. */
    ch[0].finish_reason = NULL;
    o = parse_out(srv_api_completion_json("c", 1, "m", ch, 1, NULL, 0), "completion, no lp");
    c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    CHECK(cJSON_IsNull(get(c0, "logprobs")) && cJSON_IsNull(get(c0, "finish_reason")) &&
              get(o, "usage") == NULL,
          "nulls");
    cJSON_Delete(o);

    /* A NUL byte in text is written as \u0000, not cut. */
    srv_choice z = {0, "a\0b", 3, "stop", NULL, 0, NULL, 0, NULL, 0, 0};
    char *j = srv_api_completion_json("c", 1, "m", &z, 1, NULL, 0);
    CHECK(j && strstr(j, "\"a\\u0000b\""), "NUL escaped: %s", j ? j : "");
    free(j);
}

static void test_chat_json(void) {
    srv_top_logprob top[] = {{"Hi", 2, -0.2f}, {"\xC3", 1, NAN}};
    srv_token_logprob lps[] = {{"Hi", 2, -0.2f, 1, 2, top, 0}, {"\xC3", 1, -1.5f, 1, 0, NULL, 0}};
    srv_choice ch = {0, "Hi\xC3", 3, "stop", lps, 2, NULL, 0, NULL, 0, 0};
    srv_usage u = {3, 2, 0};
    cJSON *o = parse_out(srv_api_chat_json("chatcmpl-9", 5, "m", &ch, 1, &u, 1), "chat");
    CHECK(is_str(o, "object", "chat.completion") && is_str(o, "id", "chatcmpl-9"), "head");
    const cJSON *c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    const cJSON *msg = get(c0, "message");
    CHECK(is_str(msg, "role", "assistant") && is_str(msg, "content", "Hi\xEF\xBF\xBD"), "message");
    CHECK(is_str(c0, "finish_reason", "stop") && is_num(c0, "index", 0), "finish");
    const cJSON *content = get(get(c0, "logprobs"), "content");
    CHECK(cJSON_GetArraySize(content) == 2, "logprobs.content");
    const cJSON *l1 = cJSON_GetArrayItem(content, 1);
    CHECK(is_str(l1, "token", "\xEF\xBF\xBD") && is_num(l1, "logprob", -1.5), "token entry");
    const cJSON *bytes = get(l1, "bytes");
    CHECK(cJSON_GetArraySize(bytes) == 1 && cJSON_GetArrayItem(bytes, 0)->valuedouble == 0xC3,
          "bytes are the raw bytes");
    const cJSON *t0 = get(cJSON_GetArrayItem(content, 0), "top_logprobs");
    CHECK(cJSON_GetArraySize(t0) == 2 && is_num(cJSON_GetArrayItem(t0, 1), "logprob", -9999.0) &&
              cJSON_GetArraySize(get(cJSON_GetArrayItem(t0, 0), "bytes")) == 2,
          "top_logprobs; NaN -> -9999");
    CHECK(is_num(get(o, "usage"), "total_tokens", 5), "usage");
    cJSON_Delete(o);
}

static void test_chunks(void) {
    srv_choice c = {2, "tok", 3, NULL, NULL, 0, NULL, 0, NULL, 0, 0};
    cJSON *o = parse_out(srv_api_completion_chunk_json("c", 1, "m", &c, NULL, 0), "chunk");
    const cJSON *c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    CHECK(is_str(o, "object", "text_completion") && is_str(c0, "text", "tok") &&
              is_num(c0, "index", 2) && cJSON_IsNull(get(c0, "finish_reason")) &&
              cJSON_IsNull(get(c0, "logprobs")) && !get(o, "usage"),
          "completion chunk");
    cJSON_Delete(o);
    srv_usage u = {4, 6, 0};
    o = parse_out(srv_api_completion_chunk_json("c", 1, "m", NULL, &u, 0), "usage chunk");
    CHECK(cJSON_IsArray(get(o, "choices")) && cJSON_GetArraySize(get(o, "choices")) == 0 &&
              is_num(get(o, "usage"), "total_tokens", 10),
          "completion usage chunk");
    cJSON_Delete(o);

    /* Chat: first (role + empty content), middle (content), last (empty delta). */
    srv_choice first = {0, NULL, 0, NULL, NULL, 0, NULL, 0, NULL, 0, 0};
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", &first, 1, NULL, 0), "chat first");
    c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    const cJSON *delta = get(c0, "delta");
    CHECK(is_str(o, "object", "chat.completion.chunk") && is_str(delta, "role", "assistant") &&
              is_str(delta, "content", "") && cJSON_IsNull(get(c0, "finish_reason")),
          "chat first chunk");
    cJSON_Delete(o);
    srv_token_logprob lp = {"ab", 2, -0.5f, 1, 0, NULL, 0};
    srv_choice mid = {0, "ab", 2, NULL, &lp, 1, NULL, 0, NULL, 0, 0};
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", &mid, 0, NULL, 1), "chat mid");
    c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    delta = get(c0, "delta");
    CHECK(!get(delta, "role") && is_str(delta, "content", "ab") &&
              cJSON_GetArraySize(get(get(c0, "logprobs"), "content")) == 1,
          "chat middle chunk");
    cJSON_Delete(o);
    srv_choice last = {0, NULL, 0, "length", NULL, 0, NULL, 0, NULL, 0, 0};
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", &last, 0, NULL, 0), "chat last");
    c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    delta = get(c0, "delta");
    CHECK(cJSON_IsObject(delta) && delta->child == NULL && is_str(c0, "finish_reason", "length"),
          "chat last chunk: empty delta");
    cJSON_Delete(o);
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", NULL, 0, &u, 0), "chat usage");
    CHECK(cJSON_GetArraySize(get(o, "choices")) == 0 && is_num(get(o, "usage"), "prompt_tokens", 4),
          "chat usage chunk");
    cJSON_Delete(o);
    /* Reasoning (Qwen3's <think>): "reasoning_content" before "content", in
     * the message and in deltas; a delta with reasoning only has no content. */
    srv_choice rz = {0, "Paris.", 6, "stop", NULL, 0, "think \"hard\"", 13, NULL, 0, 0};
    o = parse_out(srv_api_chat_json("x", 1, "m", &rz, 1, NULL, 0), "chat reasoning");
    const cJSON *msg = get(cJSON_GetArrayItem(get(o, "choices"), 0), "message");
    CHECK(is_str(msg, "reasoning_content", "think \"hard\"") && is_str(msg, "content", "Paris."),
          "message with reasoning_content");
    cJSON_Delete(o);
    srv_choice rd = {0, NULL, 0, NULL, NULL, 0, "step", 4, NULL, 0, 0};
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", &rd, 1, NULL, 0), "chunk reasoning");
    delta = get(cJSON_GetArrayItem(get(o, "choices"), 0), "delta");
    CHECK(is_str(delta, "role", "assistant") && is_str(delta, "reasoning_content", "step") &&
              !cJSON_GetObjectItemCaseSensitive(delta, "content"),
          "first delta: role and reasoning, no content");
    cJSON_Delete(o);
    srv_choice rb = {0, "A", 1, NULL, NULL, 0, "r", 1, NULL, 0, 0};
    o = parse_out(srv_api_chat_chunk_json("x", 1, "m", &rb, 0, NULL, 0), "chunk both");
    delta = get(cJSON_GetArrayItem(get(o, "choices"), 0), "delta");
    CHECK(is_str(delta, "reasoning_content", "r") && is_str(delta, "content", "A"),
          "delta with both");
    cJSON_Delete(o);
}

static void test_models_sse(void) {
    cJSON *o = parse_out(srv_api_models_json("smol", 123, "brisk", 2048, "Q4_1", NULL), "models");
    const cJSON *d0 = cJSON_GetArrayItem(get(o, "data"), 0);
    CHECK(is_str(o, "object", "list") && is_str(d0, "id", "smol") &&
              is_str(d0, "object", "model") && is_num(d0, "created", 123) &&
              is_str(d0, "owned_by", "brisk") && is_num(d0, "max_model_len", 2048) &&
              is_str(d0, "file_type", "Q4_1"),
          "models");
    cJSON_Delete(o);
    o = parse_out(srv_api_models_json("smol", 123, "brisk", 0, NULL, NULL), "models, no len");
    CHECK(!get(cJSON_GetArrayItem(get(o, "data"), 0), "max_model_len"), "max_model_len omitted");
    CHECK(!get(cJSON_GetArrayItem(get(o, "data"), 0), "file_type"), "file_type omitted");
    cJSON_Delete(o);

    size_t n;
    char *ev = srv_sse_event("{\"a\":1}", &n);
    CHECK(ev && n == strlen(ev) && !strcmp(ev, "data: {\"a\":1}\n\n"), "sse event");
    free(ev);
    const char *done = srv_sse_done(&n);
    CHECK(!strcmp(done, "data: [DONE]\n\n") && n == 14, "sse done");
    srv_api_error e = {400, "invalid_request_error", "n", "invalid_value", "'n' is \"bad\"\xFF"};
    ev = srv_sse_error(&e, &n);
    CHECK(ev && !strncmp(ev, "data: {", 7) && n >= 9 && !strcmp(ev + n - 2, "\n\n") &&
              strchr(ev, '\n') == ev + n - 2,
          "sse error framing");
    if (ev) {
        ev[n - 2] = '\0';
        cJSON *eo = cJSON_Parse(ev + 6);
        const cJSON *er = get(eo, "error");
        CHECK(is_str(er, "param", "n") && is_str(er, "code", "invalid_value") &&
                  is_str(er, "message", "'n' is \"bad\"\xEF\xBF\xBD"),
              "sse error body");
        cJSON_Delete(eo);
    }
    free(ev);
}

/* Random token bytes through every builder: always one line of valid JSON,
 * and text that survives the round trip equals the sanitised input. */
static void test_builders_random(void) {
    enum { ROUNDS = 2000, MAXT = 24, NTOK = 6 };
    int bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        char text[MAXT * NTOK], toks[NTOK][MAXT], san[3 * MAXT * NTOK];
        srv_top_logprob top[NTOK];
        srv_token_logprob lps[NTOK];
        size_t off = 0;
        for (int t = 0; t < NTOK; t++) {
            size_t n = rnd() % MAXT;
            random_bytes(toks[t], n);
            for (size_t i = 0; i < n; i++)
                if (!toks[t][i])
                    toks[t][i] = 'z'; /* cJSON strings stop at NUL */
            memcpy(text + off, toks[t], n);
            float lpv = (rnd() % 8 == 0) ? -INFINITY : -(float)(rnd() % 10000) / 100.0f;
            top[t] = (srv_top_logprob){toks[t], n, lpv};
            lps[t] = (srv_token_logprob){toks[t], n, lpv, (int)(rnd() % 2), t + 1, top, off};
            off += n;
        }
        srv_choice c = {0, text, off, (rnd() % 2) ? "stop" : NULL, lps, NTOK, NULL, 0, NULL, 0, 0};
        srv_usage u = {(int)(rnd() % 100), (int)(rnd() % 100), 0};
        char *outs[5] = {
            srv_api_completion_json("id", r, "m", &c, 1, &u, 1),
            srv_api_chat_json("id", r, "m", &c, 1, &u, 1),
            srv_api_completion_chunk_json("id", r, "m", &c, NULL, 1),
            srv_api_chat_chunk_json("id", r, "m", &c, (int)(rnd() % 2), &u, 1),
            NULL,
        };
        size_t sn = brisk_utf8_sanitize(text, off, san);
        san[sn] = '\0';
        for (int k = 0; k < 4; k++) {
            char *j = outs[k];
            if (!j || strchr(j, '\n') || !strict_utf8(j, strlen(j)) || strstr(j, "nan") ||
                strstr(j, "inf")) {
                bad++;
                free(j);
                continue;
            }
            cJSON *o = cJSON_Parse(j);
            const cJSON *c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
            const cJSON *tv = (k == 1)   ? get(get(c0, "message"), "content")
                              : (k == 3) ? get(get(c0, "delta"), "content")
                                         : get(c0, "text");
            if (!o || !cJSON_IsString(tv) || strcmp(tv->valuestring, san))
                bad++;
            cJSON_Delete(o);
            free(j);
        }
    }
    CHECK(bad == 0, "%d random outputs were not valid JSON carrying the sanitised text", bad);
}

int main(void) {
    test_utf8_vectors();
    test_utf8_random();
    test_completion_json();
    test_chat_json();
    test_chunks();
    test_models_sse();
    test_builders_random();
    return BT_SUMMARY("test_srv_sse");
}
