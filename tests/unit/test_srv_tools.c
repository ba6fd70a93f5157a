/* test_srv_tools.c - the chat families' table (models/chat_template.c) and
 * the tool-call formats (server/api/srv_tools_fmt.c), row by row: every
 * family's name round-trips, it renders a small conversation, it names a
 * tool format that exists, and that format round-trips calls (written into
 * the history, parsed back out: the same names and arguments); the history
 * of a tool conversation in each format, to the byte; the grammar of a
 * "required" choice compiles in every format and holds at most
 * SRV_TOOLS_MAX_CALLS calls, which the parser reads back; and, in a build with the
 * allocation-failure injector, every allocation of the tool paths failing
 * in turn ends in BRISK_ENOMEM or a result, never a crash or a leak. */
#include <stdio.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/chat_template.h"
#include "models/grammar.h"
#include "server/api/srv_api.h"
#include "server/api/srv_tools.h"

static srv_api_limits L;

/* A tool conversation: a system turn, a question, an answer with its text
 * and two calls, their two results, a last user turn. %s: tool_choice. */
static const char CONVERSATION[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    "{\"role\": \"assistant\", \"content\": \"Checking.\", \"tool_calls\": ["
    "{\"id\": \"call_Ab1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}},"
    "{\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"get_time\", "
    "\"arguments\": \"{}\"}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call_Ab1\", \"content\": \"18C\"},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": \"noon\"},"
    "{\"role\": \"user\", \"content\": \"Thanks!\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}], \"tool_choice\": %s}";

static int parse_conversation(const char *tool_choice, srv_chat_req *r) {
    char body[sizeof CONVERSATION + 64];
    snprintf(body, sizeof body, CONVERSATION, tool_choice);
    srv_api_error e;
    int rc = srv_api_parse_chat(body, strlen(body), &L, r, &e);
    CHECK(rc == 0, "the conversation parses: %s", rc ? e.message : "");
    return rc;
}

static void make_id(void *ctx, char out[32]) {
    int *n = ctx;
    snprintf(out, 32, "call_%d", (*n)++);
}

static char *render(model_chat_kind k, const model_chat_msg *msgs, int n) {
    char *out = NULL, err[256] = "";
    size_t len = 0;
    int swb = 0;
    int rc = model_chat_render(k, msgs, n, "<s>", "</s>", &out, &len, &swb, err, sizeof err);
    CHECK(rc == 0 && out && strlen(out) == len, "%s renders: %d %s", model_chat_kind_name(k), rc,
          err);
    return rc == 0 ? out : NULL;
}

/* Every row: a kind with a name that parses back, its defaults, its stop
 * strings, a small conversation rendered with every content in it, and a
 * tool format that exists. */
static void test_family_rows(void) {
    int n = model_chat_n_families();
    CHECK(n >= 7, "%d families", n);
    CHECK(model_chat_family_at(-1) == MODEL_CHAT_NONE && model_chat_family_at(n) == MODEL_CHAT_NONE,
          "outside the table: NONE");
    static const model_chat_msg small[] = {{"system", "Sys text", 8},
                                           {"user", "First question", 14},
                                           {"assistant", "First answer", 12},
                                           {"user", "Second question", 15}};
    for (int i = 0; i < n; i++) {
        model_chat_kind k = model_chat_family_at(i);
        const char *name = model_chat_kind_name(k);
        CHECK(k != MODEL_CHAT_NONE && strcmp(name, "none") && strcmp(name, "unknown"), "row %d", i);
        model_chat_kind back = MODEL_CHAT_NONE;
        CHECK(model_chat_kind_parse(name, &back) == 0 && back == k, "%s round-trips", name);
        for (int j = 0; j < i; j++)
            CHECK(model_chat_family_at(j) != k &&
                      strcmp(model_chat_kind_name(model_chat_family_at(j)), name),
                  "%s: one row", name);
        model_chat_format f;
        model_chat_format_default(k, &f);
        CHECK(f.kind == k, "%s: its default format", name);
        const char *const *stops = model_chat_stop_strings(k);
        CHECK(stops[0] && stops[0][0], "%s: a stop string", name);
        char *text = render(k, small, 4);
        for (int m = 0; text && m < 4; m++)
            CHECK(strstr(text, small[m].content), "%s: '%s' rendered", name, small[m].content);
        free(text);
        const char *tf = model_chat_tool_format(k);
        CHECK(tf && !strcmp(srv_tools_format_name(k), tf), "%s: tool format '%s' has a row", name,
              tf ? tf : "(null)");
    }
    CHECK(!strcmp(model_chat_kind_name(MODEL_CHAT_NONE), "none"), "NONE's name");
    CHECK(!strcmp(srv_tools_format_name(MODEL_CHAT_NONE), "json"), "NONE: the generic format");
}

/* Each family's tool format: the calls it writes into the history parse
 * back into the same calls, the whole conversation renders in the family's
 * template with the tools and every result in it, and a "required" choice
 * gets a grammar that compiles ("auto" one only in the generic format). */
static void test_tool_roundtrip(void) {
    srv_chat_req r, req;
    if (parse_conversation("\"auto\"", &r) < 0 || parse_conversation("\"required\"", &req) < 0)
        return;
    for (int i = 0; i < model_chat_n_families(); i++) {
        model_chat_kind k = model_chat_family_at(i);
        const char *name = model_chat_kind_name(k);
        srv_tools_arena a;
        const model_chat_msg *msgs = NULL;
        int n = 0;
        CHECK(srv_tools_render_msgs(&r, k, &a, &msgs, &n) == 0, "%s: tool messages", name);
        const model_chat_msg *calls_msg = NULL;
        for (int m = 0; m < n; m++)
            if (!strcmp(msgs[m].role, "assistant") && strstr(msgs[m].content, "get_weather"))
                calls_msg = &msgs[m];
        CHECK(calls_msg != NULL, "%s: the calls are in the history", name);
        if (calls_msg) {
            int ids = 0;
            srv_tool_call *calls = NULL;
            char *content = NULL;
            int nc = srv_tools_parse_output(k, calls_msg->content, calls_msg->content_len, make_id,
                                            &ids, &calls, &content);
            CHECK(nc == 2, "%s: 2 calls back, got %d", name, nc);
            if (nc == 2) {
                CHECK(!strcmp(calls[0].name, "get_weather") &&
                          !strcmp(calls[0].arguments, "{\"city\":\"Paris\"}"),
                      "%s: call 0 is %s %s", name, calls[0].name, calls[0].arguments);
                CHECK(!strcmp(calls[1].name, "get_time") && !strcmp(calls[1].arguments, "{}"),
                      "%s: call 1 is %s %s", name, calls[1].name, calls[1].arguments);
                CHECK(!strcmp(calls[0].id, "call_0") && !strcmp(calls[1].id, "call_1"),
                      "%s: fresh ids", name);
            }
            /* the text beside the calls comes back when the format keeps it */
            if (strstr(calls_msg->content, "Checking."))
                CHECK(content && !strcmp(content, "Checking."), "%s: content '%s'", name,
                      content ? content : "(null)");
            else
                CHECK(content == NULL, "%s: no content, got '%s'", name, content);
            srv_tool_calls_free(calls, nc > 0 ? nc : 0);
            free(content);
        }
        char *text = render(k, msgs, n);
        static const char *const parts[] = {
            "Be brief.", "Weather in Paris?", "get_weather", "get_time", "18C", "noon", "Thanks!"};
        for (size_t p = 0; text && p < sizeof parts / sizeof parts[0]; p++)
            CHECK(strstr(text, parts[p]), "%s: '%s' rendered", name, parts[p]);
        free(text);
        srv_tools_arena_free(&a);

        int none = 0;
        char *g = srv_tools_grammar(&r, k, &none);
        CHECK(!g == !!none, "%s: a grammar or none", name);
        int generic = !strcmp(srv_tools_format_name(k), "json");
        CHECK((g != NULL) == generic, "%s: a grammar for auto only in the generic format", name);
        free(g);
        g = srv_tools_grammar(&req, k, &none);
        CHECK(g && !none, "%s: required has a grammar", name);
        model_grammar *gr = NULL;
        char err[256] = "";
        CHECK(g && model_grammar_compile(g, strlen(g), NULL, &gr, err, sizeof err) == 0,
              "%s: the grammar compiles: %s", name, err);
        model_grammar_unref(gr);
        free(g);
    }
    srv_chat_req_free(&r);
    srv_chat_req_free(&req);
}

/* The conversation with "required", rendered in each tool format's family,
 * to the byte (the formats' own words, separators, ids and placements). */
static const struct {
    model_chat_kind kind;
    const char *want;
} GOLDEN[] = {
    {MODEL_CHAT_CHATML,
     "<|im_start|>system\n"
     "Be brief.\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Curren"
     "t weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"s"
     "tring\"}},\"required\":[\"city\"]}}}\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments within <"
     "tool_call></tool_call> XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Weather in Paris?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "Checking.\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n"
     "</tool_call>\n"
     "<tool_call>\n"
     "{\"name\": \"get_time\", \"arguments\": {}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "18C\n"
     "</tool_response>\n"
     "<tool_response>\n"
     "noon\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>user\n"
     "Thanks!<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {MODEL_CHAT_LLAMA3,
     "<s><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Given the following functions, please respond with a JSON for a function call with its"
     " proper arguments that best answers the given prompt.\n"
     "\n"
     "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument"
     " name and its value}.Do not use variables.\n"
     "\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Curren"
     "t weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"s"
     "tring\"}},\"required\":[\"city\"]}}}\n"
     "\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}}\n"
     "\n"
     "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\"}}\n"
     "{\"name\": \"get_time\", \"parameters\": {}}<|eot_id|><|start_header_id|>ipython<|end_"
     "header_id|>\n"
     "\n"
     "18C<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "noon<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {MODEL_CHAT_MISTRAL,
     "<s>[INST] Be brief.\n"
     "\n"
     "Weather in Paris? [/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"c"
     "ity\":\"Paris\"}, \"id\": \"00callAb1\"}, {\"name\": \"get_time\", \"arguments\": {}, "
     "\"id\": \"0000call2\"}]</s>[TOOL_RESULTS] {\"content\": \"18C\", \"call_id\": \"00call"
     "Ab1\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": \"noon\", \"call_id\": \"0000call2\""
     "}[/TOOL_RESULTS][AVAILABLE_TOOLS] [{\"type\":\"function\",\"function\":{\"name\":\"get"
     "_weather\",\"description\":\"Current weather\",\"parameters\":{\"type\":\"object\",\"p"
     "roperties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}, {\"type\":\"f"
     "unction\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}}][/AVAILABLE_TOOLS][I"
     "NST] Thanks! [/INST][TOOL_CALLS]"},
    {MODEL_CHAT_GEMMA,
     "<s><start_of_turn>user\n"
     "Be brief.\n"
     "\n"
     "You can call these tools:\n"
     "[{\"name\":\"get_weather\",\"description\":\"Current weather\",\"parameters\":{\"type\""
     ":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}},"
     " {\"name\":\"get_time\",\"parameters\":{}}]\n"
     "Answer with one JSON object: {\"tool_calls\": [{\"name\": <tool name>, \"arguments\": "
     "{<arguments>}}]} to call tools, or {\"response\": <your answer>} to answer.\n"
     "\n"
     "Weather in Paris?<end_of_turn>\n"
     "<start_of_turn>model\n"
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}, {\""
     "name\": \"get_time\", \"arguments\": {}}]}<end_of_turn>\n"
     "<start_of_turn>user\n"
     "Tool result: 18C\n"
     "Tool result: noon<end_of_turn>\n"
     "<start_of_turn>user\n"
     "Thanks!<end_of_turn>\n"
     "<start_of_turn>model\n"},
};

static void test_format_goldens(void) {
    srv_chat_req r;
    if (parse_conversation("\"required\"", &r) < 0)
        return;
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++) {
        srv_tools_arena a;
        const model_chat_msg *msgs = NULL;
        int n = 0;
        CHECK(srv_tools_render_msgs(&r, GOLDEN[i].kind, &a, &msgs, &n) == 0, "messages");
        char *text = render(GOLDEN[i].kind, msgs, n);
        CHECK(text && !strcmp(text, GOLDEN[i].want), "%s (%s):\n%s\n--- want:\n%s",
              model_chat_kind_name(GOLDEN[i].kind), srv_tools_format_name(GOLDEN[i].kind),
              text ? text : "(null)", GOLDEN[i].want);
        free(text);
        srv_tools_arena_free(&a);
    }
    srv_chat_req_free(&r);
}

/* One family's tool work: the messages, the grammar, the calls parsed back.
 * 0, or BRISK_ENOMEM from any of them (nothing is left allocated). */
static int tool_work(const srv_chat_req *r, model_chat_kind k) {
    srv_tools_arena a;
    const model_chat_msg *msgs = NULL;
    int n = 0, ids = 0;
    int rc = srv_tools_render_msgs(r, k, &a, &msgs, &n);
    for (int m = 0; rc == 0 && m < n; m++) {
        if (strcmp(msgs[m].role, "assistant") || !strstr(msgs[m].content, "get_weather"))
            continue;
        srv_tool_call *calls = NULL;
        char *content = NULL;
        int nc = srv_tools_parse_output(k, msgs[m].content, msgs[m].content_len, make_id, &ids,
                                        &calls, &content);
        CHECK(nc >= 0 || (nc == BRISK_ENOMEM && !calls && !content), "%s: parse gave %d",
              model_chat_kind_name(k), nc);
        srv_tool_calls_free(calls, nc > 0 ? nc : 0);
        free(content);
        rc = nc < 0 ? nc : 0;
    }
    srv_tools_arena_free(&a);
    int none = 0;
    char *g = srv_tools_grammar(r, k, &none);
    if (!g && !none && rc == 0)
        rc = BRISK_ENOMEM;
    free(g);
    return rc;
}

/* An answer of n calls of get_weather (cities c0, c1, ...) in format fmt,
 * as its grammar writes them. */
static void calls_answer(const char *fmt, int n, brisk_buf *b) {
    int hermes = !strcmp(fmt, "hermes"), llama3 = !strcmp(fmt, "llama3");
    int mistral = !strcmp(fmt, "mistral");
    brisk_buf_str(b, hermes || llama3 ? "" : mistral ? "[" : "{\"tool_calls\": [");
    for (int i = 0; i < n; i++) {
        brisk_buf_str(b, !i ? "" : hermes || llama3 ? "\n" : ", ");
        brisk_buf_printf(b, "%s{\"name\": \"get_weather\", \"%s\": {\"city\":\"c%d\"}}%s",
                         hermes ? "<tool_call>\n" : "", llama3 ? "parameters" : "arguments", i,
                         hermes ? "\n</tool_call>" : "");
    }
    brisk_buf_str(b, hermes || llama3 ? "" : mistral ? "]" : "]}");
}

/* The calls after the first are bounded in every format's grammar: an
 * answer of SRV_TOOLS_MAX_CALLS calls is whole, one more is refused; the
 * parser reads the same answer back as those calls (and ends the list). */
static void test_call_limit(void) {
    srv_chat_req r;
    if (parse_conversation("\"required\"", &r) < 0)
        return;
    for (int i = 0; i < model_chat_n_families(); i++) {
        model_chat_kind k = model_chat_family_at(i);
        const char *fmt = srv_tools_format_name(k);
        int none = 0;
        char *g = srv_tools_grammar(&r, k, &none), err[256] = "";
        model_grammar *gr = NULL;
        CHECK(g && model_grammar_compile(g, strlen(g), NULL, &gr, err, sizeof err) == 0,
              "%s: compiles: %s", fmt, err);
        free(g);
        for (int n = SRV_TOOLS_MAX_CALLS; gr && n <= SRV_TOOLS_MAX_CALLS + 1; n++) {
            brisk_buf b = {0};
            calls_answer(fmt, n, &b);
            model_grammar_matcher *m = model_grammar_matcher_create(gr, NULL, NULL);
            int rc = m ? model_grammar_accept_bytes(m, b.p, b.len) : -1;
            if (n == SRV_TOOLS_MAX_CALLS)
                CHECK(rc == 0 && model_grammar_complete(m), "%s: %d calls: %d", fmt, n, rc);
            else
                CHECK(rc == BRISK_EINVAL, "%s: %d calls refused: %d", fmt, n, rc);
            model_grammar_matcher_free(m);
            if (n == SRV_TOOLS_MAX_CALLS) {
                int ids = 0;
                srv_tools_stream *s = srv_tools_stream_new(k, 1, make_id, &ids);
                const srv_tools_piece *p;
                int np = 0, nc = 0;
                CHECK(s && srv_tools_stream_feed(s, b.p, b.len, SRV_TOOLS_END_STOP, &p, &np) == 0,
                      "%s: parsed", fmt);
                const srv_tool_call *c = s ? srv_tools_stream_calls(s, &nc) : NULL;
                CHECK(nc == n && srv_tools_stream_ended(s), "%s: %d calls back", fmt, nc);
                CHECK(nc == n && !strcmp(c[n - 1].arguments, "{\"city\":\"c15\"}"),
                      "%s: the last call's arguments", fmt);
                srv_tools_stream_free(s);
            }
            free(b.p);
        }
        model_grammar_unref(gr);
    }
    srv_chat_req_free(&r);
}

static void test_fault_sweep(void) {
    if (!brisk_fault_compiled())
        return;
    char err[256];
    CHECK(brisk_alloc_init(err, sizeof err) == 0, "alloc init: %s", err);
    srv_chat_req r;
    if (parse_conversation("\"required\"", &r) < 0)
        return;
    for (int i = 0; i < model_chat_n_families(); i++) {
        model_chat_kind k = model_chat_family_at(i);
        CHECK(brisk_fault_configure("count", err, sizeof err) == 0, "count: %s", err);
        brisk_fault_arm(1);
        int rc = tool_work(&r, k);
        brisk_fault_arm(0);
        unsigned long total = brisk_fault_seen();
        CHECK(rc == 0 && total > 0, "%s: %d, %lu allocations", model_chat_kind_name(k), rc, total);
        for (unsigned long nth = 1; nth <= total; nth++) {
            char spec[32];
            snprintf(spec, sizeof spec, "nth:%lu", nth);
            CHECK(brisk_fault_configure(spec, err, sizeof err) == 0, "%s: %s", spec, err);
            brisk_fault_arm(1);
            rc = tool_work(&r, k);
            brisk_fault_arm(0);
            CHECK(rc == 0 || rc == BRISK_ENOMEM, "%s %s: %d", model_chat_kind_name(k), spec, rc);
        }
    }
    srv_chat_req_free(&r);
}

int main(void) {
    brisk_log_set_level(BRISK_LOG_ERROR);
    L = srv_api_limits_default(100);
    test_family_rows();
    test_tool_roundtrip();
    test_format_goldens();
    test_call_limit();
    test_fault_sweep();
    return BT_SUMMARY("test_srv_tools");
}
