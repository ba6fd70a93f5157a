/* test_srv_tools_stream.c - the parser that finds an answer's tool calls as
 * it is generated (server/api/srv_tools_stream.c), in every tool format:
 * the same calls and content however the answer is cut into pieces (whole,
 * byte by byte, in threes); text released at once when it cannot begin a
 * call, and held while it could; a forced answer's call released from its
 * name on, its arguments as they come; a free one's only once its JSON is
 * whole and valid; the list ended by a repeated call and by
 * SRV_TOOLS_MAX_CALLS; an answer cut by its budget keeping its finished
 * calls, the cut one truncated, and no markup in the content; and, in a
 * build with the allocation-failure injector, every allocation failing in
 * turn ending in BRISK_ENOMEM, never a crash or a leak. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/chat_template.h"
#include "server/api/srv_api.h"
#include "server/api/srv_tools.h"

/* One family per tool format. */
#define HERMES MODEL_CHAT_CHATML
#define LLAMA3 MODEL_CHAT_LLAMA3
#define MISTRAL MODEL_CHAT_MISTRAL
#define JSONF MODEL_CHAT_GEMMA

static void make_id(void *ctx, char out[32]) {
    int *n = ctx;
    snprintf(out, 32, "call_%d", (*n)++);
}

/* What an answer gave: a transcript of its pieces with adjacent pieces of
 * one target joined ("T[text]", "C0(id,name)", "A0[args]"), its calls, its
 * content and flags. */
typedef struct result {
    brisk_buf log;
    char calls[SRV_TOOLS_MAX_CALLS + 2][3][256];
    int n_calls;
    char content[512];
    int has_content, ended, complete, rc;
} result;

/* Feeds text in pieces of chunk bytes (0: whole), the last with end. */
static void run(model_chat_kind k, int forced, const char *text, size_t chunk, srv_tools_end end,
                result *out) {
    memset(out, 0, sizeof *out);
    int ids = 0;
    srv_tools_stream *s = srv_tools_stream_new(k, forced, make_id, &ids);
    CHECK(s != NULL, "new");
    if (!s)
        return;
    size_t len = strlen(text), at = 0;
    int last_call = -2;
    char last_kind = 0;
    do {
        size_t n = chunk && len - at > chunk ? chunk : len - at;
        const srv_tools_piece *p;
        int np = 0;
        out->rc =
            srv_tools_stream_feed(s, text + at, n, at + n == len ? end : SRV_TOOLS_MORE, &p, &np);
        at += n;
        for (int i = 0; out->rc == 0 && i < np; i++) {
            char kind = p[i].call < 0 ? 'T' : p[i].id ? 'C' : 'A';
            if (kind == 'C') {
                CHECK(p[i].name && p[i].len == 0, "a call's first piece: id, name, no arguments");
                brisk_buf_printf(&out->log, "C%d(%s,%s)", p[i].call, p[i].id, p[i].name);
            } else if (kind == last_kind && p[i].call == last_call) {
                out->log.len--; /* join: reopen the bracket */
                brisk_buf_put(&out->log, p[i].text, p[i].len);
                brisk_buf_str(&out->log, "]");
            } else {
                brisk_buf_printf(&out->log, "%c", kind);
                if (kind == 'A')
                    brisk_buf_printf(&out->log, "%d", p[i].call);
                brisk_buf_str(&out->log, "[");
                brisk_buf_put(&out->log, p[i].text, p[i].len);
                brisk_buf_str(&out->log, "]");
            }
            last_kind = kind;
            last_call = p[i].call;
        }
    } while (at < len && out->rc == 0);
    int n = 0;
    const srv_tool_call *c = srv_tools_stream_calls(s, &n);
    out->n_calls = n;
    for (int i = 0; i < n && i < SRV_TOOLS_MAX_CALLS + 2; i++) {
        snprintf(out->calls[i][0], 256, "%s", c[i].id);
        snprintf(out->calls[i][1], 256, "%s", c[i].name);
        snprintf(out->calls[i][2], 256, "%s", c[i].arguments);
    }
    size_t cl = 0;
    const char *ct = srv_tools_stream_content(s, &cl);
    out->has_content = ct != NULL;
    snprintf(out->content, sizeof out->content, "%.*s", (int)cl, ct ? ct : "");
    out->ended = srv_tools_stream_ended(s);
    out->complete = srv_tools_stream_complete(s);
    srv_tools_stream_free(s);
}

static void result_free(result *r) {
    free(r->log.p);
}

/* The answer parsed whole, byte by byte and in threes: the same transcript
 * (pieces joined), calls, content and flags; a call's arguments are its
 * fragments joined. Returns the whole run's result (caller frees). */
static result parse_all_ways(model_chat_kind k, int forced, const char *text, srv_tools_end end) {
    result whole, r;
    run(k, forced, text, 0, end, &whole);
    CHECK(whole.rc == 0, "rc %d", whole.rc);
    static const size_t chunks[] = {1, 3};
    for (size_t i = 0; i < 2; i++) {
        run(k, forced, text, chunks[i], end, &r);
        const char *a = whole.log.p ? whole.log.p : "", *b = r.log.p ? r.log.p : "";
        CHECK(!strcmp(a, b), "%s forced=%d chunks of %zu: %s\n  vs whole: %s\n  text: %s",
              srv_tools_format_name(k), forced, chunks[i], b, a, text);
        CHECK(r.n_calls == whole.n_calls && r.ended == whole.ended &&
                  r.complete == whole.complete && r.has_content == whole.has_content &&
                  !strcmp(r.content, whole.content),
              "%s: chunks of %zu: %d calls, content '%s'", text, chunks[i], r.n_calls, r.content);
        for (int c = 0; c < r.n_calls && c < whole.n_calls; c++)
            CHECK(!memcmp(r.calls[c], whole.calls[c], sizeof r.calls[c]), "%s: call %d", text, c);
        result_free(&r);
    }
    /* the transcript's text and arguments are the content and the calls */
    brisk_buf t = {0};
    brisk_buf_str(&t, "");
    for (const char *p = whole.log.p ? whole.log.p : ""; (p = strstr(p, "T[")); p += 2) {
        const char *e = strchr(p, ']');
        while (e && e[1] && e[1] != 'T' && e[1] != 'C' && e[1] != 'A')
            e = strchr(e + 1, ']');
        if (!e)
            break;
        brisk_buf_put(&t, p + 2, (size_t)(e - p - 2));
    }
    CHECK(!strcmp(t.p, whole.content), "content '%s' vs its pieces '%s'", whole.content, t.p);
    free(t.p);
    return whole;
}

/* Expects calls "name args" ... and content (NULL: none). */
static void expect(const result *r, const char *text, const char *content, int n,
                   const char *const *calls) {
    CHECK(r->n_calls == n, "%s: %d calls, want %d (%s)", text, r->n_calls, n,
          r->log.p ? r->log.p : "");
    for (int i = 0; i < n && i < r->n_calls; i++) {
        char want[512];
        snprintf(want, sizeof want, "%s %s", r->calls[i][1], r->calls[i][2]);
        CHECK(!strcmp(want, calls[i]), "%s: call %d is '%s', want '%s'", text, i, want, calls[i]);
        char id[32];
        snprintf(id, sizeof id, "call_%d", i);
        CHECK(!strcmp(r->calls[i][0], id), "%s: id %s", text, r->calls[i][0]);
    }
    CHECK(content ? r->has_content && !strcmp(r->content, content) : !r->has_content,
          "%s: content '%s', want '%s'", text, r->has_content ? r->content : "(none)",
          content ? content : "(none)");
}

#define CALLS(...) ((const char *const[]){__VA_ARGS__})

static void test_formats(void) {
    static const struct {
        model_chat_kind k;
        int forced;
        srv_tools_end end;
        const char *text, *content;
        int n;
        const char *calls[3];
        int complete;
    } cases[] = {
        /* Hermes, free: text and blocks anywhere */
        {HERMES, 0, SRV_TOOLS_END_STOP, "  Hello <b> world  ", "Hello <b> world", 0, {0}, 0},
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
         "{}}\n</tool_call>",
         "Checking.",
         2,
         {"get_weather {\"city\": \"Paris\"}", "get_time {}"},
         0},
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":[1,\"}\"]}}</tool_call> then <tool_call",
         "then <tool_call",
         1,
         {"f {\"a\":[1,\"}\"]}"},
         0},
        /* a block whose JSON is broken, or not a call, stays text */
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,,}}\n</tool_call> ok",
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,,}}\n</tool_call> ok",
         0,
         {0},
         0},
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>{\"arguments\": {}, \"name\": \"f\"}</tool_call>",
         "<tool_call>{\"arguments\": {}, \"name\": \"f\"}</tool_call>",
         0,
         {0},
         0},
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>{\"name\": \"bad name\", \"arguments\": {}}",
         "<tool_call>{\"name\": \"bad name\", \"arguments\": {}}",
         0,
         {0},
         0},
        /* arguments as a JSON string holding the object; a member after them */
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\", \"id\": 7}</tool_call>",
         NULL,
         1,
         {"f {\"a\": 1}"},
         0},
        /* the model stopped just before the call's closing brace */
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}",
         NULL,
         1,
         {"f {\"a\": 1}"},
         0},
        /* ... or inside its arguments: no call, text */
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"",
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"",
         0,
         {0},
         0},
        /* cut by the budget: the finished call, the cut one truncated */
        {HERMES,
         0,
         SRV_TOOLS_END_CUT,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
         "\"g\", \"arguments\": {\"a\": [1, ",
         NULL,
         2,
         {"f {}", "g {\"a\": [1, "},
         0},
        /* cut before a name: the markup is dropped; a prefix of it is text */
        {HERMES, 0, SRV_TOOLS_END_CUT, "Sure. <tool_call>\n{\"na", "Sure.", 0, {0}, 0},
        {HERMES, 0, SRV_TOOLS_END_CUT, "Sure. <tool_", "Sure. <tool_", 0, {0}, 0},
        /* Hermes, forced (required): never any text */
        {HERMES,
         1,
         SRV_TOOLS_END_STOP,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{"
         "\"name\": \"f\", \"arguments\": {\"x\": 2}}\n</tool_call>",
         NULL,
         2,
         {"f {\"x\": 1}", "f {\"x\": 2}"},
         0},
        {HERMES,
         1,
         SRV_TOOLS_END_CUT,
         "<tool_call>\n{\"name\": \"now\", \"arguments\": {\n    \"type\": \"function\",\n    \"pa",
         NULL,
         1,
         {"now {\n    \"type\": \"function\",\n    \"pa"},
         0},
        {HERMES, 1, SRV_TOOLS_END_CUT, "<tool_call>\n{\"name\": \"no", NULL, 0, {0}, 0},
        {HERMES, 1, SRV_TOOLS_END_CUT, "<tool_ca", NULL, 0, {0}, 0},
        /* a repeated call ends the list; a cut one that repeats so far is dropped */
        {HERMES,
         1,
         SRV_TOOLS_END_STOP,
         "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{"
         "\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"x\"",
         NULL,
         1,
         {"now {}"},
         1},
        {HERMES,
         1,
         SRV_TOOLS_END_CUT,
         "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{"
         "\"name\": \"now\", \"arguments\": {\"a\"",
         NULL,
         1,
         {"now {\"a\": 1}"},
         0},
        {HERMES,
         0,
         SRV_TOOLS_END_STOP,
         "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call> <tool_call>{\"name\": "
         "\"now\", \"arguments\": {}}</tool_call> more text",
         NULL,
         1,
         {"now {}"},
         1},
        /* Llama 3: JSON objects at the start */
        {LLAMA3,
         0,
         SRV_TOOLS_END_STOP,
         "{\"name\": \"f\", \"parameters\": {\"x\": 1}}\n{\"name\": \"g\", \"parameters\": {}}",
         NULL,
         2,
         {"f {\"x\": 1}", "g {}"},
         0},
        {LLAMA3,
         0,
         SRV_TOOLS_END_STOP,
         "{\"name\": \"f\", \"parameters\": {}}; Done.",
         "Done.",
         1,
         {"f {}"},
         0},
        {LLAMA3, 0, SRV_TOOLS_END_STOP, "{\"result\": 1}", "{\"result\": 1}", 0, {0}, 0},
        {LLAMA3,
         0,
         SRV_TOOLS_END_STOP,
         "Hello {\"name\": \"f\"}",
         "Hello {\"name\": \"f\"}",
         0,
         {0},
         0},
        {LLAMA3, 0, SRV_TOOLS_END_CUT, "{\"na", "{\"na", 0, {0}, 0},
        {LLAMA3,
         1,
         SRV_TOOLS_END_STOP,
         "{\"name\": \"f\", \"parameters\": {\"q\": \"a\"}}\n{\"name\": \"f\", \"parameters\": "
         "{\"q\": \"b\"}}",
         NULL,
         2,
         {"f {\"q\": \"a\"}", "f {\"q\": \"b\"}"},
         0},
        /* Mistral: a JSON list, after [TOOL_CALLS] (a control token) or written out */
        {MISTRAL,
         0,
         SRV_TOOLS_END_STOP,
         "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"k\": 1}, \"id\": \"abc123def\"}, "
         "{\"name\": \"g\", \"arguments\": {}}]",
         NULL,
         2,
         {"f {\"k\": 1}", "g {}"},
         1},
        {MISTRAL,
         0,
         SRV_TOOLS_END_STOP,
         " [{\"name\": \"f\", \"arguments\": {}}]",
         NULL,
         1,
         {"f {}"},
         1},
        {MISTRAL, 0, SRV_TOOLS_END_STOP, "[1] is a citation.", "[1] is a citation.", 0, {0}, 0},
        {MISTRAL,
         1,
         SRV_TOOLS_END_CUT,
         " [{\"name\": \"count\", \"arguments\": {\"k\": 1}}, {\"name\": \"count\", \"arguments\": "
         "{\"k\": 2",
         NULL,
         2,
         {"count {\"k\": 1}", "count {\"k\": 2"},
         0},
        /* the generic format: calls or the text, always forced */
        {JSONF,
         1,
         SRV_TOOLS_END_STOP,
         "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"n\": 1}}, {\"name\": \"f\", "
         "\"arguments\": {\"n\": 2}}]}",
         NULL,
         2,
         {"f {\"n\": 1}", "f {\"n\": 2}"},
         1},
        {JSONF,
         1,
         SRV_TOOLS_END_STOP,
         "{\"response\": \" Hi \\\"there\\\"\\n\\u00e9\\ud83d\\ude00 \\/ \\\\ \"}",
         "Hi \"there\"\n\xc3\xa9\xf0\x9f\x98\x80 / \\",
         0,
         {0},
         1},
        {JSONF, 1, SRV_TOOLS_END_CUT, "{\"response\": \"Hel", "Hel", 0, {0}, 0},
        {JSONF, 1, SRV_TOOLS_END_CUT, "{\"tool_ca", NULL, 0, {0}, 0},
        {JSONF,
         1,
         SRV_TOOLS_END_CUT,
         "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_wea",
         NULL,
         1,
         {"get_weather {\"city\": \"Paris\"}"},
         1},
        {JSONF,
         1,
         SRV_TOOLS_END_CUT,
         "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa",
         NULL,
         1,
         {"get_weather {\"city\": \"Paris\"}"},
         0},
        {JSONF,
         1,
         SRV_TOOLS_END_CUT,
         "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pau",
         NULL,
         2,
         {"get_weather {\"city\": \"Paris\"}", "get_weather {\"city\": \"Pau"},
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        result r = parse_all_ways(cases[i].k, cases[i].forced, cases[i].text, cases[i].end);
        expect(&r, cases[i].text, cases[i].content, cases[i].n, cases[i].calls);
        CHECK(r.complete == cases[i].complete, "%s: complete %d", cases[i].text, r.complete);
        result_free(&r);
    }
}

/* SRV_TOOLS_MAX_CALLS distinct calls end the list, in a forced and a free answer. */
static void test_limit(void) {
    for (int forced = 0; forced < 2; forced++) {
        brisk_buf t = {0};
        brisk_buf_str(&t, "{\"tool_calls\": [");
        for (int i = 0; i < SRV_TOOLS_MAX_CALLS + 3; i++)
            brisk_buf_printf(&t, "%s{\"name\": \"f\", \"arguments\": {\"n\": %d}}", i ? ", " : "",
                             i);
        brisk_buf_str(&t, "]}");
        result r = parse_all_ways(JSONF, 1, t.p, SRV_TOOLS_END_STOP);
        CHECK(r.n_calls == SRV_TOOLS_MAX_CALLS && r.ended && r.complete, "json: %d calls, ended %d",
              r.n_calls, r.ended);
        CHECK(!strcmp(r.calls[SRV_TOOLS_MAX_CALLS - 1][2], "{\"n\": 15}"), "the last: %s",
              r.calls[SRV_TOOLS_MAX_CALLS - 1][2]);
        result_free(&r);
        t.len = 0;
        for (int i = 0; i < SRV_TOOLS_MAX_CALLS + 3; i++)
            brisk_buf_printf(&t,
                             "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": %d}}\n"
                             "</tool_call>\n",
                             i);
        r = parse_all_ways(HERMES, forced, t.p, SRV_TOOLS_END_STOP);
        CHECK(r.n_calls == SRV_TOOLS_MAX_CALLS && r.ended && !r.has_content,
              "hermes forced=%d: %d calls", forced, r.n_calls);
        result_free(&r);
        free(t.p);
    }
}

/* When pieces go out: text that cannot begin a call at once, and held while
 * it could; a forced call from its name on, its arguments as they come; a
 * free one when whole. */
static void test_timing(void) {
    int ids = 0;
    const srv_tools_piece *p;
    int n;
    srv_tools_stream *s = srv_tools_stream_new(HERMES, 0, make_id, &ids);
    CHECK(srv_tools_stream_feed(s, "Hello", 5, SRV_TOOLS_MORE, &p, &n) == 0 && n == 1 &&
              p[0].call == -1 && p[0].len == 5,
          "text at once: %d pieces", n);
    CHECK(srv_tools_stream_feed(s, " <tool", 6, SRV_TOOLS_MORE, &p, &n) == 0 && n == 0,
          "held: it may open a call (%d pieces)", n);
    CHECK(srv_tools_stream_feed(s, "box", 3, SRV_TOOLS_MORE, &p, &n) == 0 && n == 1 &&
              p[0].len == 9 && !memcmp(p[0].text, " <toolbox", 9),
          "released when it cannot");
    static const char call[] = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}";
    for (size_t i = 0; i + 1 < sizeof call - 1; i++) {
        srv_tools_stream_feed(s, call + i, 1, SRV_TOOLS_MORE, &p, &n);
        CHECK(n == 0, "a free call is held until whole (byte %zu)", i);
    }
    CHECK(srv_tools_stream_feed(s, "}", 1, SRV_TOOLS_MORE, &p, &n) == 0 && n == 2 && p[0].id &&
              !strcmp(p[0].name, "f") && p[1].call == 0 && p[1].len == 8,
          "then released: id and name, then the arguments");
    srv_tools_stream_free(s);

    s = srv_tools_stream_new(HERMES, 1, make_id, &ids);
    static const char fc[] =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P";
    int seen_name = 0, args = 0;
    for (size_t i = 0; i < sizeof fc - 1; i++) {
        srv_tools_stream_feed(s, fc + i, 1, SRV_TOOLS_MORE, &p, &n);
        for (int k = 0; k < n; k++) {
            CHECK(p[k].call == 0, "only the call");
            if (p[k].id) {
                CHECK(!seen_name && fc[i] == '"' && !strcmp(p[k].name, "get_weather"),
                      "the name as soon as it is whole (byte %zu)", i);
                seen_name = 1;
            } else {
                CHECK(seen_name && p[k].len == 1 && p[k].text[0] == fc[i], "argument byte %zu", i);
                args++;
            }
        }
    }
    CHECK(seen_name && args == 11, "forced: the name, then %d argument bytes as they came", args);
    srv_tools_stream_free(s);
}

/* srv_tools_parse_output, the whole-answer form, hands its calls over. */
static void test_parse_output(void) {
    int ids = 0;
    srv_tool_call *calls = NULL;
    char *content = NULL;
    static const char t[] = "Hi\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    int n = srv_tools_parse_output(HERMES, t, sizeof t - 1, make_id, &ids, &calls, &content);
    CHECK(n == 1 && calls && !strcmp(calls[0].name, "f") && !strcmp(calls[0].arguments, "{}") &&
              content && !strcmp(content, "Hi"),
          "%d calls, content %s", n, content ? content : "(null)");
    srv_tool_calls_free(calls, n > 0 ? n : 0);
    free(content);
}

/* A call's pieces as chat chunk deltas, as OpenAI streams calls: the first
 * with its index, id, type, name and empty arguments, no content; a
 * fragment with its index and arguments alone. */
static void test_chunk_deltas(void) {
    const srv_call_delta d[2] = {{1, "call_x", "f", NULL, 0}, {1, NULL, NULL, "{\"a\"", 4}};
    for (int i = 0; i < 2; i++) {
        srv_choice ch = {.index = 0, .delta = &d[i]};
        char *s = srv_api_chat_chunk_json("chatcmpl-1", 1, "m", &ch, 0, NULL, 0);
        cJSON *o = s ? cJSON_Parse(s) : NULL;
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "delta");
        const cJSON *t =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(delta, "tool_calls"), 0);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        CHECK(cJSON_GetArraySize(delta) == 1 &&
                  cJSON_GetObjectItemCaseSensitive(t, "index")->valueint == 1 &&
                  cJSON_IsString(args),
              "delta %d: %s", i, s ? s : "(null)");
        if (i == 0)
            CHECK(
                cJSON_GetArraySize(t) == 4 &&
                    !strcmp(cJSON_GetObjectItemCaseSensitive(t, "id")->valuestring, "call_x") &&
                    !strcmp(cJSON_GetObjectItemCaseSensitive(t, "type")->valuestring, "function") &&
                    !strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, "f") &&
                    !strcmp(args->valuestring, ""),
                "first delta: %s", s);
        else
            CHECK(cJSON_GetArraySize(t) == 2 && cJSON_GetArraySize(fn) == 1 &&
                      !strcmp(args->valuestring, "{\"a\""),
                  "fragment: %s", s);
        cJSON_Delete(o);
        free(s);
    }
}

/* Every allocation failing in turn: BRISK_ENOMEM or the answer, no leak. */
static int fault_work(void) {
    int ids = 0, rc = 0;
    static const char *const texts[] = {
        "Text <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\\u00e9\"}}</tool_call> more",
        "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": "
        "{\"x\": 1}}]}"};
    for (int i = 0; i < 2 && rc == 0; i++) {
        srv_tools_stream *s = srv_tools_stream_new(i ? JSONF : HERMES, i, make_id, &ids);
        if (!s)
            return BRISK_ENOMEM;
        const srv_tools_piece *p;
        int n;
        size_t len = strlen(texts[i]);
        for (size_t at = 0; at < len && rc == 0; at += 7)
            rc = srv_tools_stream_feed(s, texts[i] + at, len - at < 7 ? len - at : 7,
                                       len - at <= 7 ? SRV_TOOLS_END_STOP : SRV_TOOLS_MORE, &p, &n);
        srv_tools_stream_free(s);
    }
    srv_tool_calls_free(NULL, 0);
    return rc;
}

static void test_fault_sweep(void) {
    if (!brisk_fault_compiled())
        return;
    char err[256];
    CHECK(brisk_alloc_init(err, sizeof err) == 0, "alloc init: %s", err);
    CHECK(brisk_fault_configure("count", err, sizeof err) == 0, "count: %s", err);
    brisk_fault_arm(1);
    int rc = fault_work();
    brisk_fault_arm(0);
    unsigned long total = brisk_fault_seen();
    CHECK(rc == 0 && total > 0, "%d, %lu allocations", rc, total);
    for (unsigned long nth = 1; nth <= total; nth++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", nth);
        CHECK(brisk_fault_configure(spec, err, sizeof err) == 0, "%s: %s", spec, err);
        brisk_fault_arm(1);
        rc = fault_work();
        brisk_fault_arm(0);
        CHECK(rc == 0 || rc == BRISK_ENOMEM, "%s: %d", spec, rc);
    }
}

int main(void) {
    brisk_log_set_level(BRISK_LOG_ERROR);
    test_formats();
    test_limit();
    test_timing();
    test_parse_output();
    test_chunk_deltas();
    test_fault_sweep();
    return BT_SUMMARY("test_srv_tools_stream");
}
