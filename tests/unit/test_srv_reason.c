/* test_srv_reason.c - the <think> splitter (server/api/srv_reason.h) against a
 * plain reference that sees the whole output at once: for a table of outputs
 * (an opening block with and without leading whitespace, an unclosed block,
 * no block, a "<thinking" look-alike, tags split by every cut, '<' inside
 * the reasoning, multi-byte UTF-8, only whitespace, empty) and for random
 * outputs built from the tags' pieces, every way of cutting the output into
 * pieces (all single cuts, random multi-cuts, byte by byte) must give exactly
 * the reference's reasoning and answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_buf.h"
#include "server/api/srv_reason.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static int ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The whole-output rule of srv_reason.h, written directly. */
static void reference(const char *s, size_t n, brisk_buf *rs, brisk_buf *ct) {
    size_t i = 0;
    while (i < n && ws(s[i]) && i < 64)
        i++;
    if (n - i < 7 || memcmp(s + i, "<think>", 7) != 0 || (i == 64 && ws(s[i]))) {
        brisk_buf_put(ct, s, n);
        return;
    }
    i += 7;
    const char *end = NULL;
    for (size_t k = i; k + 8 <= n; k++)
        if (!memcmp(s + k, "</think>", 8)) {
            end = s + k;
            break;
        }
    if (!end) {
        brisk_buf_put(rs, s + i, n - i);
        return;
    }
    brisk_buf_put(rs, s + i, (size_t)(end - (s + i)));
    size_t j = (size_t)(end - s) + 8;
    while (j < n && ws(s[j]))
        j++;
    brisk_buf_put(ct, s + j, n - j);
}

/* Feeds s in pieces ending at cuts[0..n_cuts) (sorted), then the rest, final. */
static void split(const char *s, size_t n, const size_t *cuts, int n_cuts, brisk_buf *rs,
                  brisk_buf *ct) {
    srv_reason r;
    srv_reason_init(&r);
    size_t at = 0;
    for (int k = 0; k < n_cuts; k++) {
        srv_reason_feed(&r, s + at, cuts[k] - at, 0, rs, ct);
        at = cuts[k];
    }
    srv_reason_feed(&r, s + at, n - at, 1, rs, ct);
}

static int n_cases;

static void check_one(const char *s, size_t n, const size_t *cuts, int n_cuts) {
    brisk_buf rs = {0}, ct = {0}, wr = {0}, wc = {0};
    brisk_buf_str(&rs, "");
    brisk_buf_str(&ct, "");
    brisk_buf_str(&wr, "");
    brisk_buf_str(&wc, "");
    split(s, n, cuts, n_cuts, &rs, &ct);
    reference(s, n, &wr, &wc);
    int ok = rs.len == wr.len && ct.len == wc.len && !memcmp(rs.p, wr.p, rs.len) &&
             !memcmp(ct.p, wc.p, ct.len);
    CHECK(ok, "output '%.*s' in %d pieces: reasoning '%s' answer '%s', want '%s' / '%s'", (int)n, s,
          n_cuts + 1, rs.p, ct.p, wr.p, wc.p);
    n_cases++;
    free(rs.p);
    free(ct.p);
    free(wr.p);
    free(wc.p);
}

static void check_all_cuts(const char *s, size_t n) {
    check_one(s, n, NULL, 0);
    for (size_t c = 0; c <= n; c++)
        check_one(s, n, &c, 1);
    size_t *every = malloc((n + 1) * sizeof *every);
    for (size_t c = 0; c < n; c++)
        every[c] = c;
    check_one(s, n, every, (int)n);
    for (int rep = 0; rep < 20; rep++) {
        int k = 0;
        for (size_t c = 0; c <= n; c++)
            if (rnd() % 4 == 0)
                every[k++] = c;
        check_one(s, n, every, k);
    }
    free(every);
}

static void expect(const char *s, const char *want_r, const char *want_c) {
    brisk_buf rs = {0}, ct = {0};
    brisk_buf_str(&rs, "");
    brisk_buf_str(&ct, "");
    split(s, strlen(s), NULL, 0, &rs, &ct);
    CHECK(!strcmp(rs.p, want_r) && !strcmp(ct.p, want_c), "'%s': got '%s' / '%s'", s, rs.p, ct.p);
    free(rs.p);
    free(ct.p);
}

int main(void) {
    /* The rule on hand-written cases (both the splitter and the reference). */
    expect("<think>\nA</think>\n\nB", "\nA", "B");
    expect("  \n<think>x</think>y", "x", "y");
    expect("<think>never closed", "never closed", "");
    expect("plain answer <think>x</think>", "", "plain answer <think>x</think>");
    expect("<thinking>no</thinking>", "", "<thinking>no</thinking>");
    expect("<think>a < b </thin and </think>done", "a < b </thin and ", "done");
    expect("<think></think>", "", "");
    expect("", "", "");
    expect("\n\n", "", "\n\n");
    expect("<thi", "", "<thi");
    const char *table[] = {
        "<think>\nA</think>\n\nB",
        "  \n<think>x</think>y",
        "<think>never closed",
        "plain answer <think>x</think>",
        "<thinking>no</thinking>",
        "<think>a < b </thin and </think>done <",
        "<think>\xc3\xa9t\xc3\xa9 \xe2\x82\xac</think>\n\xf0\x9f\x98\x80 ok",
        "\n\n",
        "<thi",
        "<think></think></think>x",
        "<<think>x</think>",
        "</think>x",
    };
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++)
        check_all_cuts(table[t], strlen(table[t]));
    /* Random outputs from the tags' pieces, letters and whitespace. */
    static const char *parts[] = {"<think>", "</think>", "<", "</", "<th", "</thi", "think>",
                                  "a",       "b c",      " ", "\n", "\t",  ">",     "\xc3\xa9"};
    for (int rep = 0; rep < 300; rep++) {
        char s[256];
        size_t n = 0;
        int k = 1 + (int)(rnd() % 12);
        for (int i = 0; i < k; i++) {
            const char *p = parts[rnd() % (sizeof parts / sizeof parts[0])];
            size_t l = strlen(p);
            memcpy(s + n, p, l);
            n += l;
        }
        check_all_cuts(s, n);
    }
    printf("test_srv_reason: %d splits checked against the reference\n", n_cases);
    return BT_SUMMARY("test_srv_reason");
}
