/* test_bench_sse.c - brisk-bench's SSE parser and stream-chunk reader on the
 * input a server can send: every split point of real streams (LF, CRLF and
 * lone-CR line ends), several events per feed, comments and other fields,
 * a BOM, the [DONE] marker, size bounds, and random garbage that must give
 * the same events however it is split and never crash. */
#include <stdint.h>
#include <string.h>

#include "brisk_test.h"
#include "clients/bench_sse.h"
#include "common/brisk_error.h"

/* Collected events: data joined with '|' after each, for easy comparison. */
typedef struct got {
    char buf[1 << 16];
    size_t len;
    int n;
    int stop_after; /* > 0: ask the parser to stop after this many events */
} got;

static int collect(void *user, const char *data, size_t len) {
    got *g = user;
    if (strlen(data) != len) /* data is NUL-terminated at len; no NUL inside here */
        return 1;
    if (g->len + len + 1 < sizeof g->buf) {
        memcpy(g->buf + g->len, data, len);
        g->len += len;
        g->buf[g->len++] = '|';
        g->buf[g->len] = '\0';
    }
    g->n++;
    return g->stop_after > 0 && g->n >= g->stop_after;
}

/* Parses s cut at the given points; returns the last feed's code. */
static int parse_split(const char *s, size_t n, const size_t *cuts, int n_cuts, got *g,
                       size_t max) {
    bench_sse p;
    memset(g, 0, sizeof *g);
    bench_sse_init(&p, max, collect, g);
    size_t at = 0;
    int rc = 0;
    for (int i = 0; i <= n_cuts && rc == 0; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        rc = bench_sse_feed(&p, s + at, end - at);
        at = end;
    }
    bench_sse_free(&p);
    return rc;
}

/* Every single split point, and byte by byte, must give `want`. */
static void check_all_splits(const char *name, const char *s, const char *want, int want_n) {
    size_t n = strlen(s);
    got g;
    CHECK(parse_split(s, n, NULL, 0, &g, 0) == 0, "%s: whole", name);
    CHECK(!strcmp(g.buf, want) && g.n == want_n, "%s whole: got '%s' (%d), want '%s'", name, g.buf,
          g.n, want);
    int bad = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        parse_split(s, n, &cut, 1, &g, 0);
        if (strcmp(g.buf, want) || g.n != want_n) {
            if (!bad)
                CHECK(0, "%s split at %zu: got '%s', want '%s'", name, cut, g.buf, want);
            bad = 1;
        }
    }
    CHECK(!bad, "%s: every split point", name);
    /* Two cuts: every pair for short inputs. */
    bad = 0;
    for (size_t a = 0; n < 300 && a <= n; a++) {
        for (size_t b = a; b <= n; b++) {
            size_t cuts[2] = {a, b};
            parse_split(s, n, cuts, 2, &g, 0);
            if (strcmp(g.buf, want) || g.n != want_n)
                bad = 1;
        }
    }
    CHECK(!bad, "%s: every pair of split points", name);
    /* Byte by byte. */
    bench_sse p;
    memset(&g, 0, sizeof g);
    bench_sse_init(&p, 0, collect, &g);
    for (size_t i = 0; i < n; i++)
        bench_sse_feed(&p, s + i, 1);
    CHECK(!strcmp(g.buf, want), "%s byte by byte: got '%s'", name, g.buf);
    CHECK(!bench_sse_pending(&p), "%s: nothing pending at the end", name);
    bench_sse_free(&p);
}

static void test_streams(void) {
    /* What brisk and vLLM send: one event per token, usage, [DONE]. */
    check_all_splits("openai",
                     "data: {\"choices\":[{\"text\":\" a\"}]}\n\n"
                     "data: {\"choices\":[{\"text\":\" b\"}]}\n\n"
                     "data: [DONE]\n\n",
                     "{\"choices\":[{\"text\":\" a\"}]}|{\"choices\":[{\"text\":\" b\"}]}|[DONE]|",
                     3);
    check_all_splits("crlf", "data: x\r\n\r\ndata: y\r\n\r\n", "x|y|", 2);
    check_all_splits("lone cr", "data: x\r\rdata: y\r\r", "x|y|", 2);
    check_all_splits("mixed ends", "data: x\r\n\ndata: y\n\r\ndata: z\r\r\n", "x|y|z|", 3);
    check_all_splits("comments and fields",
                     ": keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: x\n: mid\n\n"
                     "foo: bar\ndata:y\n\n",
                     "x|y|", 2);
    check_all_splits("multi-line data", "data: a\ndata: b\ndata\n\n", "a\nb\n|", 1);
    check_all_splits("one space dropped", "data:  two\n\ndata:none\n\n", " two|none|", 2);
    check_all_splits("empty event not dispatched", "\n\n\r\n: c\n\ndata: x\n\n", "x|", 1);
    check_all_splits("empty data is an event", "data:\n\n", "|", 1);
    check_all_splits("colon in value", "data: {\"a\":\"b:c\"}\n\n", "{\"a\":\"b:c\"}|", 1);
    check_all_splits("bom",
                     "\xEF\xBB\xBF"
                     "data: x\n\n",
                     "x|", 1);
    check_all_splits("not a bom",
                     "\xEF\xBB"
                     "data: x\n\n",
                     "", 0);
    check_all_splits("field case matters", "Data: x\n\nDATA: y\n\ndata: z\n\n", "z|", 1);
}

static void test_unterminated(void) {
    bench_sse p;
    got g;
    memset(&g, 0, sizeof g);
    bench_sse_init(&p, 0, collect, &g);
    const char *s = "data: x\n\ndata: cut";
    CHECK(bench_sse_feed(&p, s, strlen(s)) == 0, "feed");
    CHECK(g.n == 1 && bench_sse_pending(&p), "a partial line is pending (n=%d)", g.n);
    bench_sse_reset(&p);
    CHECK(!bench_sse_pending(&p), "reset clears it");
    s = "data: y\n";
    bench_sse_feed(&p, s, strlen(s));
    CHECK(g.n == 1 && bench_sse_pending(&p), "data without the blank line is pending");
    bench_sse_free(&p);
}

static void test_bounds(void) {
    char big[200];
    memset(big, 'a', sizeof big);
    bench_sse p;
    got g;
    memset(&g, 0, sizeof g);
    bench_sse_init(&p, 64, collect, &g);
    CHECK(bench_sse_feed(&p, "data: ", 6) == 0, "start");
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++)
        rc = bench_sse_feed(&p, big, 10);
    CHECK(rc == BRISK_ENOSPC, "a long line hits the bound: %d", rc);
    CHECK(bench_sse_feed(&p, "\n\n", 2) == BRISK_ENOSPC, "and stays failed");
    CHECK(g.n == 0, "no event from a failed stream");
    bench_sse_free(&p);

    /* Many short data lines: the event's data hits the bound. */
    memset(&g, 0, sizeof g);
    bench_sse_init(&p, 64, collect, &g);
    rc = 0;
    for (int i = 0; i < 40 && rc == 0; i++)
        rc = bench_sse_feed(&p, "data: 0123456789\n", 17);
    CHECK(rc == BRISK_ENOSPC, "a long event hits the bound: %d", rc);
    bench_sse_free(&p);

    /* Within the bound: fine, whole line in one feed or cut. */
    memset(&g, 0, sizeof g);
    bench_sse_init(&p, 64, collect, &g);
    CHECK(bench_sse_feed(&p, "data: 0123456789012345678901234567890123456789\n\n", 48) == 0,
          "under the bound");
    CHECK(g.n == 1, "one event");
    bench_sse_free(&p);
}

static void test_stop(void) {
    got g;
    memset(&g, 0, sizeof g);
    g.stop_after = 1;
    bench_sse p;
    bench_sse_init(&p, 0, collect, &g);
    const char *s = "data: a\n\ndata: b\n\n";
    CHECK(bench_sse_feed(&p, s, strlen(s)) == BENCH_SSE_STOPPED, "the callback stops it");
    CHECK(g.n == 1, "one event before the stop");
    bench_sse_free(&p);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Random bytes biased toward the SSE alphabet: whole and cut feeds must
 * agree, bounds must hold, nothing may crash (ASan watches). */
static void test_garbage(void) {
    static const char *atoms[] = {
        "data:", "data: ", "\n",     "\r",       "\r\n",         ":",  " ",   "x",
        "{",     "}",      "[DONE]", "event: e", "\xEF\xBB\xBF", "\0", "\xff"};
    int mismatches = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char s[512];
        size_t n = 0;
        while (n < 400) {
            if (rnd() % 4 == 0) {
                s[n++] = (char)(rnd() & 0xff);
            } else {
                const char *a = atoms[rnd() % (sizeof atoms / sizeof atoms[0])];
                size_t l = a[0] ? strlen(a) : 1;
                memcpy(s + n, a, l);
                n += l;
            }
        }
        got whole, cut;
        size_t max = 16 + rnd() % 300;
        int rc1 = parse_split(s, n, NULL, 0, &whole, max);
        size_t cuts[3] = {rnd() % (n + 1), 0, 0};
        cuts[1] = cuts[0] + rnd() % (n + 1 - cuts[0]);
        cuts[2] = cuts[1] + rnd() % (n + 1 - cuts[1]);
        int rc2 = parse_split(s, n, cuts, 3, &cut, max);
        /* Events hold no NUL in this comparison, and a bound hit may land in
         * another feed: compare only clean runs. */
        if (rc1 == 0 && rc2 == 0 && (whole.n != cut.n || strcmp(whole.buf, cut.buf)))
            mismatches++;
        CHECK_COND(rc1 == 0 || rc1 == BRISK_ENOSPC || rc1 == BENCH_SSE_STOPPED);
    }
    CHECK(mismatches == 0, "%d garbage inputs parsed differently when cut", mismatches);
}

/* ---- chunks ---- */

static void chunk(const char *s, int chat, bench_chunk *c) {
    bench_chunk_parse(s, strlen(s), chat, c);
}

static void test_chunks(void) {
    bench_chunk c;
    chunk("[DONE]", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DONE, "[DONE]");
    chunk("  [DONE] \r\n", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DONE, "[DONE] with spaces");
    chunk("[DONE]x", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "[DONE]x is garbage");
    chunk("", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && !c.has_content, "empty data: nothing");

    chunk("{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\" Hi\",\"finish_reason\":null}]}", 0,
          &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && c.has_content && c.content_bytes == 3, "completion text");
    CHECK(c.usage_completion == -1 && c.usage_prompt == -1, "no usage");
    chunk("{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && !c.has_content, "empty text is not a token");
    chunk("{\"choices\":[{\"text\":null}]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && !c.has_content, "null text");
    chunk("{\"choices\":[{\"text\":5}]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "numeric text is malformed");
    chunk("{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}", 0, &c);
    CHECK(!c.has_content, "a chat delta on the completions endpoint is not text");

    chunk("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", 1, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && !c.has_content, "the role chunk is not a token");
    chunk("{\"choices\":[{\"delta\":{\"content\":\"Paris\"}}]}", 1, &c);
    CHECK(c.has_content && c.content_bytes == 5, "chat content");
    chunk("{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}", 1, &c);
    CHECK(c.has_content, "reasoning tokens count");
    chunk("{\"choices\":[{\"delta\":{}}]}", 1, &c);
    CHECK(!c.has_content && c.kind == BENCH_CHUNK_DATA, "empty delta");
    chunk("{\"choices\":[{\"delta\":\"x\"}]}", 1, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "delta must be an object");
    chunk("{\"choices\":[{\"delta\":{\"content\":[1]}}]}", 1, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "content must be a string");

    chunk("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,"
          "\"total_tokens\":46}}",
          0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && !c.has_content, "usage chunk");
    CHECK(c.usage_prompt == 12 && c.usage_completion == 34, "usage %lld %lld",
          (long long)c.usage_prompt, (long long)c.usage_completion);
    chunk("{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}", 0, &c);
    CHECK(c.has_content && c.usage_completion == 1 && c.usage_prompt == -1,
          "content and usage together");
    chunk("{\"usage\":null}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && c.usage_completion == -1, "null usage");
    chunk("{\"usage\":{\"completion_tokens\":-1}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "negative count");
    chunk("{\"usage\":{\"completion_tokens\":1.5}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "fractional count");
    chunk("{\"usage\":{\"completion_tokens\":\"3\"}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "string count");
    chunk("{\"usage\":{\"completion_tokens\":1e300}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "absurd count");
    chunk("{\"usage\":[]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "usage must be an object");

    chunk("{\"error\":{\"message\":\"boom\\nline\",\"type\":\"server_error\"}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_ERROR && !strcmp(c.err, "boom line"), "error event: '%s'", c.err);
    chunk("{\"error\":\"plain\"}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_ERROR && !strcmp(c.err, "plain"), "string error");
    chunk("{\"error\":null,\"choices\":[{\"text\":\"a\"}]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA && c.has_content, "null error is no error");

    chunk("{oops", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID && bt_one_line(c.err), "bad JSON");
    chunk("[1,2]", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "an array");
    chunk("{\"choices\":{}}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "choices must be an array");
    chunk("{\"choices\":[5]}", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "choices[0] must be an object");
    chunk("{\"choices\":[{\"text\":\"a\"}]} trailing", 0, &c);
    CHECK(c.kind == BENCH_CHUNK_DATA, "cJSON stops at the object's end");

    /* Deep nesting must not blow the stack. */
    static char deep[200001];
    size_t n = 0;
    deep[n++] = '{';
    deep[n++] = '"';
    deep[n++] = 'a';
    deep[n++] = '"';
    deep[n++] = ':';
    while (n < 100000)
        deep[n++] = '[';
    deep[n] = '\0';
    bench_chunk_parse(deep, n, 0, &c);
    CHECK(c.kind == BENCH_CHUNK_INVALID, "deep nesting is rejected");

    /* Random bytes: any kind, but a one-line message when invalid. */
    for (int i = 0; i < 2000; i++) {
        char s[64];
        size_t len = rnd() % sizeof s;
        static const char alpha[] = "{}[]\":,0123 truechoicestextusage\\\x01\xff";
        for (size_t k = 0; k < len; k++)
            s[k] = alpha[rnd() % (sizeof alpha - 1)];
        bench_chunk_parse(s, len, (int)(rnd() & 1), &c);
        if (c.kind == BENCH_CHUNK_INVALID || c.kind == BENCH_CHUNK_ERROR)
            CHECK_COND(strchr(c.err, '\n') == NULL);
    }
}

int main(void) {
    test_streams();
    test_unterminated();
    test_bounds();
    test_stop();
    test_garbage();
    test_chunks();
    return BT_SUMMARY("test_bench_sse");
}
