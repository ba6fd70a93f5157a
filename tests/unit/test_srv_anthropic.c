/* test_srv_anthropic.c - Anthropic's Messages API (server/api/srv_anthropic.h):
 * a request's translation into a chat request (system, text blocks,
 * tool_use and tool_result blocks, tools, tool_choice, stop_sequences,
 * thinking, output_config), the hostile bodies it refuses (each a one-line
 * 400 naming the field, the outputs left empty), every cut of a valid body,
 * and the answers: the message object, the stream's events in order, stop
 * reasons and error bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "server/api/srv_anthropic.h"

static srv_api_limits lim;

static int parse(const char *body, int count_only, srv_chat_req *cr, srv_anth_req **ar,
                 srv_api_error *e) {
    return srv_anthropic_parse(body, strlen(body), &lim, count_only, cr, ar, e);
}

/* A full request: every block and field the translation handles. */
static const char *FULL =
    "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,"
    "\"stop_sequences\":[\"END\",\"STOP\"],\"metadata\":{\"user_id\":\"u1\"},"
    "\"service_tier\":\"auto\",\"cache_control\":{\"type\":\"ephemeral\"},\"seed\":7,"
    "\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},"
    "{\"type\":\"text\",\"text\":\"Use tools.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}},{\"name\":\"now\",\"input_schema\":{\"type\":\"object\"},"
    "\"type\":\"custom\"}],"
    "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
    "\"messages\":["
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
    "\"signature\":\"s\"},{\"type\":\"text\",\"text\":\"Let me look.\"},"
    "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
    "\"input\":{\"city\":\"Paris\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
    "\"content\":[{\"type\":\"text\",\"text\":\"timeout\"}],\"is_error\":true},"
    "{\"type\":\"text\",\"text\":\"Try again.\"},{\"type\":\"text\",\"text\":\"Please.\"}]}]}";

static void test_full(void) {
    srv_chat_req cr;
    srv_anth_req *ar = NULL;
    srv_api_error e;
    int rc = parse(FULL, 0, &cr, &ar, &e);
    CHECK(rc == 0, "full request: %s", e.message);
    if (rc < 0)
        return;
    CHECK(cr.n_msgs == 5, "%d chat messages", cr.n_msgs);
    CHECK(!strcmp(cr.msgs[0].role, "system") &&
              !strcmp(cr.msgs[0].content, "Be brief.\nUse tools."),
          "system blocks joined by a newline: '%s'", cr.msgs[0].content);
    CHECK(!strcmp(cr.msgs[1].role, "user") && !strcmp(cr.msgs[1].content, "Weather in Paris?"),
          "user text");
    CHECK(!strcmp(cr.msgs[2].role, "assistant") && !strcmp(cr.msgs[2].content, "Let me look.") &&
              cr.msgs[2].n_calls == 1,
          "assistant: text and one call (thinking dropped): '%s'", cr.msgs[2].content);
    if (cr.msgs[2].n_calls == 1)
        CHECK(!strcmp(cr.msgs[2].calls[0].id, "toolu_1") &&
                  !strcmp(cr.msgs[2].calls[0].name, "get_weather") &&
                  !strcmp(cr.msgs[2].calls[0].arguments, "{\"city\":\"Paris\"}"),
              "the call: %s %s", cr.msgs[2].calls[0].name, cr.msgs[2].calls[0].arguments);
    CHECK(!strcmp(cr.msgs[3].role, "tool") && !strcmp(cr.msgs[3].tool_call_id, "toolu_1") &&
              !strcmp(cr.msgs[3].content, "Error: timeout"),
          "tool result with is_error: '%s'", cr.msgs[3].content);
    CHECK(!strcmp(cr.msgs[4].role, "user") && !strcmp(cr.msgs[4].content, "Try again.\nPlease."),
          "the user text after the result: '%s'", cr.msgs[4].content);
    CHECK(cr.n_tools == 2 && !strcmp(cr.tools[0].name, "get_weather") && cr.tools[0].description &&
              !strcmp(cr.tools[1].name, "now"),
          "tools");
    CHECK(cr.tool_choice == SRV_TOOL_CHOICE_REQUIRED && cr.parallel_tool_calls == 0,
          "any + disable_parallel_tool_use: required, one call");
    CHECK(cr.params.max_tokens == 64 && cr.params.temperature == 0.5f && cr.params.top_k == 5 &&
              cr.params.has_seed && cr.params.seed == 7,
          "sampling");
    CHECK(cr.params.n_stop == 2 && ar->n_stop == 2 && !strcmp(ar->stop[1], "STOP"),
          "stop sequences kept in order");
    CHECK(cr.enable_thinking == 0 && ar->thinking == SRV_ANTH_THINK_OFF,
          "no thinking unless asked");
    const char *seq = NULL;
    CHECK(!strcmp(srv_anthropic_stop_reason(ar, 0, 0, 1, &seq), "stop_sequence") && seq &&
              !strcmp(seq, "STOP"),
          "stop_sequence names the string");
    CHECK(!strcmp(srv_anthropic_stop_reason(ar, 1, 2, 1, &seq), "max_tokens") && !seq,
          "the length wins");
    CHECK(!strcmp(srv_anthropic_stop_reason(ar, 0, 1, -1, &seq), "tool_use"), "tool_use");
    CHECK(!strcmp(srv_anthropic_stop_reason(ar, 0, 0, -1, &seq), "end_turn"), "end_turn");
    CHECK(!strcmp(srv_anthropic_stop_reason(ar, 0, 0, 9, &seq), "end_turn") && !seq,
          "an index out of range names nothing");
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
}

static void test_fields(void) {
    srv_chat_req cr;
    srv_anth_req *ar = NULL;
    srv_api_error e;
    /* count_tokens: max_tokens is not required. */
    int rc = parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 1,
                   &cr, &ar, &e);
    CHECK(rc == 0 && ar && ar->count_only, "count_tokens without max_tokens: %s", e.message);
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
    /* A named tool, thinking enabled, a schema for the output, nulls as absent. */
    rc = parse(
        "{\"model\":\"m\",\"max_tokens\":4096,\"system\":\"\",\"top_k\":null,"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
        "\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"a\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}",
        0, &cr, &ar, &e);
    CHECK(rc == 0, "named tool, thinking: %s", e.message);
    if (rc == 0) {
        CHECK(cr.n_msgs == 1, "an empty system prompt adds no turn: %d", cr.n_msgs);
        CHECK(cr.tool_choice == SRV_TOOL_CHOICE_NAMED && cr.tool_named == 0, "named tool");
        CHECK(cr.enable_thinking == 1 && ar->thinking == SRV_ANTH_THINK_ON &&
                  cr.include_reasoning == 1,
              "thinking on");
    }
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
    rc = parse("{\"model\":\"m\",\"max_tokens\":8,\"thinking\":{\"type\":\"adaptive\","
               "\"display\":\"omitted\"},\"output_config\":{\"format\":{\"type\":\"json_schema\","
               "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}},"
               "\"tool_choice\":{\"type\":\"none\"},"
               "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               0, &cr, &ar, &e);
    CHECK(rc == 0, "adaptive, output_config: %s", e.message);
    if (rc == 0) {
        CHECK(ar->thinking == SRV_ANTH_THINK_ADAPTIVE && cr.enable_thinking == 1 &&
                  cr.include_reasoning == 0,
              "adaptive thinking, its display omitted");
        CHECK(cr.params.grammar != NULL, "output_config.format holds the output to a grammar");
        CHECK(cr.tool_choice == SRV_TOOL_CHOICE_NONE, "tool_choice none");
    }
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
    /* 16 stop sequences: more than OpenAI's 4. */
    char body[1024];
    int n = snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":8,\"stop_sequences\":[");
    for (int i = 0; i < SRV_ANTH_MAX_STOP; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s\"s%d\"", i ? "," : "", i);
    snprintf(body + n, sizeof body - (size_t)n,
             "],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    rc = parse(body, 0, &cr, &ar, &e);
    CHECK(rc == 0 && cr.params.n_stop == SRV_ANTH_MAX_STOP, "%d stop sequences: %s",
          SRV_ANTH_MAX_STOP, e.message);
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
}

/* Hostile or unsupported bodies: each a 400 whose one-line message starts
 * with (or names) the field. */
static const struct {
    const char *body;
    const char *want; /* a substring of the message */
} bad[] = {
    {"[]", ""},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens: Field"},
    {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model: Field"},
    {"{\"model\":\"m\",\"max_tokens\":5}", "messages: Field"},
    {"{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "max_tokens"},
    /* 1e999 parses as an infinity, which cJSON would print as null */
    {"{\"model\":\"m\",\"max_tokens\":1e999,\"messages\":[{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "max_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"top_p\":1e999,\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "top_p: numbers must be finite"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{"
     "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":-1e999}}}}],"
     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "maxLength: numbers must be finite"},
    {"{\"model\":\"m\",\"max_tokens\":3000000000,\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "max_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "max_tokens"},
    {"{\"model\":7,\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "model"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"foo\":1,\"messages\":[{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "foo: Extra inputs"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "temperature"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"top_p\":0,\"messages\":[{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "top_p"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages: must not be empty"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":{}}", "messages"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
     "messages.0.role"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"name\":\"n\"}]}",
     "messages.0.name"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
     "{\"role\":\"assistant\",\"content\":\"The answer is\"}]}",
     "messages.1: a final assistant message"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
     "messages.0.content: must not be empty"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"image\",\"source\":{}}]}]}",
     "messages.0.content.0: content blocks of type 'image'"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"document\"}]}]}",
     "document"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"text\"}]}]}",
     "messages.0.content.0.text"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":"
     "\"x\"}]}]}",
     "messages.0.content.0.type"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[7]}]}",
     "messages.0.content.0"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"text\",\"text\":\"x\",\"extra\":1}]}]}",
     "messages.0.content.0.extra"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}",
     "belong to assistant"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
     "\"type\":"
     "\"tool_result\",\"tool_use_id\":\"a\"}]},{\"role\":\"user\",\"content\":\"x\"}]}",
     "belong to user"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
     "\"type\":"
     "\"tool_use\",\"id\":\"a\",\"name\":\"bad name\",\"input\":{}}]},{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "messages.0.content.0.name"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
     "\"type\":"
     "\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":[1]}]},{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "messages.0.content.0.input"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
     "\"type\":"
     "\"tool_use\",\"name\":\"f\",\"input\":{}}]},{\"role\":\"user\",\"content\":\"x\"}]}",
     "messages.0.content.0.id"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_result\",\"tool_use_id\":\"a\",\"content\":[{\"type\":\"image\"}]}]}]}",
     "messages.0.content.0.content.0: content blocks of type 'image'"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_result\",\"tool_use_id\":\"a\",\"is_error\":\"yes\"}]}]}",
     "is_error"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"tool_result\"}]}]}",
     "tool_use_id"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"text\",\"text\":\"x\",\"cache_control\":5}]}]}",
     "cache_control"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "system.0"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "system"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}],"
     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "tools.0.type"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "tools.0.input_schema"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":"
     "\"object\"},\"strict\":true}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "tools.0.strict"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":"
     "\"object\"},\"input_examples\":[]}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "tools.0.input_examples"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":"
     "\"object\",\"not\":{}}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "tools"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}},{\"name\":"
     "\"f\",\"input_schema\":{}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "tools"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},"
     "\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "tool_choice"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"sometimes\"},\"messages\":[{"
     "\"role\":\"user\",\"content\":\"x\"}]}",
     "tool_choice.type"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "tool_choice"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "tool_choice"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"auto\","
     "\"disable_parallel_tool_use\":1},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "disable_parallel_tool_use"},
    {"{\"model\":\"m\",\"max_tokens\":5000,\"thinking\":{\"type\":\"enabled\"},\"messages\":[{"
     "\"role\":\"user\",\"content\":\"x\"}]}",
     "thinking.budget_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":5000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":"
     "0},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "thinking.budget_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":2000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":"
     "2000},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "less than max_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"on\"},\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "thinking.type"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"disabled\",\"budget_tokens\":"
     "2000},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "thinking.budget_tokens"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"output_config\":{\"effort\":\"high\"},\"messages\":[{"
     "\"role\":\"user\",\"content\":\"x\"}]}",
     "output_config.effort"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"output_config\":{\"format\":{\"type\":\"json_object\"}},"
     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
     "output_config.format"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"metadata\":{\"user_id\":5},\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "metadata.user_id"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"metadata\":{\"tag\":\"a\"},\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "metadata.tag"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"service_tier\":\"priority\",\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "service_tier"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":\"END\",\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "stop_sequences"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[\"\"],\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "stop_sequences"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[1],\"messages\":[{\"role\":"
     "\"user\",\"content\":\"x\"}]}",
     "stop_sequences"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"container\":\"c\",\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "container"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"stream\":\"yes\",\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     "stream"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":"
     "\"x\"}]}",
     "n: Extra"},
    {"{\"model\":\"m\",\"max_tokens\":5,\"max_tokens\":6,\"messages\":[{\"role\":\"user\","
     "\"content\":\"x\"}]}",
     ""},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]"
     "}",
     ""},
    {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
     ""},
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_chat_req cr;
        srv_anth_req *ar = (srv_anth_req *)1;
        srv_api_error e;
        int rc = parse(bad[i].body, 0, &cr, &ar, &e);
        CHECK(rc == BRISK_EINVAL && e.status == 400, "bad %zu: rc %d status %d (%s)", i, rc,
              e.status, bad[i].body);
        CHECK(bt_one_line(e.message) && strstr(e.message, bad[i].want), "bad %zu: '%s' lacks '%s'",
              i, e.message, bad[i].want);
        CHECK(ar == NULL && cr.n_msgs == 0 && cr.msgs == NULL && cr.n_tools == 0,
              "bad %zu: the outputs are left empty", i);
        if (rc == 0) {
            srv_anth_req_free(ar);
            srv_chat_req_free(&cr);
        }
    }
}

/* Every cut of a valid body parses or fails cleanly (ASan watches). */
static void test_cuts(void) {
    size_t n = strlen(FULL);
    int ok = 0;
    for (size_t k = 0; k <= n; k++) {
        srv_chat_req cr;
        srv_anth_req *ar = NULL;
        srv_api_error e;
        int rc = srv_anthropic_parse(FULL, k, &lim, 0, &cr, &ar, &e);
        ok += rc == 0;
        if (rc == 0) {
            srv_anth_req_free(ar);
            srv_chat_req_free(&cr);
        } else if (!(rc == BRISK_EINVAL && bt_one_line(e.message) && ar == NULL)) {
            CHECK(0, "cut at %zu: rc %d '%s'", k, rc, e.message);
        }
    }
    CHECK(ok == 1, "only the whole body parses (%d did)", ok);
}

/* A JSON object from text, or NULL. */
static cJSON *obj(const char *s, size_t n) {
    cJSON *j = cJSON_ParseWithLength(s, n);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static const char *str_at(const cJSON *j, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void test_message_json(void) {
    srv_tool_call calls[2] = {{"call_abc", "get_weather", "{\"city\":\"Paris\"}"},
                              {"call_def", "now", "not json"}};
    srv_anth_result res = {.text = "Hi \xff",
                           .text_len = 4,
                           .thinking = "hm",
                           .thinking_len = 2,
                           .calls = calls,
                           .n_calls = 2,
                           .stop_reason = "tool_use",
                           .usage = {10, 5, 4}};
    char *s = srv_anthropic_json("msg_1", "m", &res);
    cJSON *j = s ? obj(s, strlen(s)) : NULL;
    CHECK(j != NULL && !strchr(s, '\n'), "one line of JSON: %s", s ? s : "(null)");
    if (j) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        CHECK(!strcmp(str_at(j, "type", NULL), "message") &&
                  !strcmp(str_at(j, "role", NULL), "assistant") &&
                  !strcmp(str_at(j, "stop_reason", NULL), "tool_use") &&
                  cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "stop_sequence")),
              "message fields");
        CHECK(cJSON_GetArraySize(c) == 4, "thinking, text, two tool_use blocks");
        const cJSON *b0 = cJSON_GetArrayItem(c, 0), *b1 = cJSON_GetArrayItem(c, 1);
        const cJSON *b2 = cJSON_GetArrayItem(c, 2), *b3 = cJSON_GetArrayItem(c, 3);
        CHECK(!strcmp(str_at(b0, "type", NULL), "thinking") &&
                  !strcmp(str_at(b0, "thinking", NULL), "hm"),
              "thinking block");
        CHECK(!strcmp(str_at(b1, "text", NULL), "Hi \xef\xbf\xbd"), "text, bad UTF-8 as U+FFFD");
        CHECK(!strcmp(str_at(b2, "id", NULL), "toolu_abc") &&
                  !strcmp(str_at(b2, "input", "city"), "Paris"),
              "tool_use: toolu_ id and the input object");
        CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(b3, "input")) &&
                  !cJSON_GetObjectItemCaseSensitive(b3, "input")->child,
              "arguments that are no object: {}");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
        CHECK(cJSON_GetObjectItemCaseSensitive(u, "input_tokens")->valueint == 6 &&
                  cJSON_GetObjectItemCaseSensitive(u, "cache_read_input_tokens")->valueint == 4 &&
                  cJSON_GetObjectItemCaseSensitive(u, "output_tokens")->valueint == 5,
              "usage: input_tokens leaves out the cached ones");
    }
    cJSON_Delete(j);
    free(s);
}

/* The SSE events of s: each "event: T\ndata: {..}\n\n" with data.type T;
 * their types joined by spaces into out. */
static int events(const char *s, size_t n, char *out, size_t cap) {
    size_t i = 0, k = 0;
    out[0] = '\0';
    while (i < n) {
        if (n - i < 7 || memcmp(s + i, "event: ", 7))
            return 0;
        const char *nl = memchr(s + i, '\n', n - i);
        if (!nl)
            return 0;
        char type[64];
        size_t tl = (size_t)(nl - (s + i)) - 7;
        if (tl == 0 || tl >= sizeof type)
            return 0;
        memcpy(type, s + i + 7, tl);
        type[tl] = '\0';
        i = (size_t)(nl - s) + 1;
        if (n - i < 6 || memcmp(s + i, "data: ", 6))
            return 0;
        const char *end = memchr(s + i, '\n', n - i);
        if (!end || end + 1 >= s + n || end[1] != '\n')
            return 0;
        cJSON *j = obj(s + i + 6, (size_t)(end - (s + i)) - 6);
        int same = j && (!strcmp(type, "error") || !strcmp(str_at(j, "type", NULL), type));
        cJSON_Delete(j);
        if (!same)
            return 0;
        k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, "%s%s", k ? " " : "", type);
        i = (size_t)(end - s) + 2;
    }
    return 1;
}

static void test_stream(void) {
    srv_anth_req ar = {0};
    char *parts[7];
    size_t lens[7];
    parts[0] = srv_anthropic_sse_start(&ar, "msg_1", "m", 12, &lens[0]);
    parts[1] = srv_anthropic_sse_delta(&ar, 1, "th", 2, &lens[1]);
    parts[2] = srv_anthropic_sse_delta(&ar, 0, "Hello", 5, &lens[2]);
    /* A call as the tool parser releases it: id and name, then fragments. */
    parts[3] = srv_anthropic_sse_call(&ar, "call_x", "f", "{\"a\":", 5, &lens[3]);
    parts[4] = srv_anthropic_sse_call(&ar, NULL, NULL, "1}", 2, &lens[4]);
    parts[5] = srv_anthropic_sse_call(&ar, NULL, NULL, "", 0, &lens[5]);
    srv_anth_result res = {
        .stop_reason = "stop_sequence", .stop_sequence = "END", .usage = {12, 3, 0}};
    parts[6] = srv_anthropic_sse_finish(&ar, &res, &lens[6]);
    char all[8192] = "";
    size_t n = 0;
    for (int i = 0; i < 7; i++) {
        CHECK(parts[i] != NULL, "part %d built", i);
        if (parts[i] && n + lens[i] < sizeof all) {
            memcpy(all + n, parts[i], lens[i]);
            n += lens[i];
        }
        free(parts[i]);
    }
    char types[1024];
    CHECK(events(all, n, types, sizeof types), "every event well formed: %.*s", (int)n, all);
    CHECK(!strcmp(types, "message_start ping content_block_start content_block_delta "
                         "content_block_stop content_block_start content_block_delta "
                         "content_block_stop content_block_start content_block_delta "
                         "content_block_delta content_block_stop message_delta message_stop"),
          "event order: %s", types);
    CHECK(strstr(all, "\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_x\","
                      "\"name\":\"f\",\"input\":{}}") != NULL,
          "block 2 starts as the call's tool_use block");
    CHECK(strstr(all, "\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":"
                      "\"{\\\"a\\\":\"}") != NULL &&
              strstr(all, "\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":"
                          "\"1}\"}") != NULL,
          "the input as the model wrote it, one input_json_delta per fragment");
    CHECK(strstr(all, "\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"") != NULL,
          "message_delta carries the stop");
    CHECK(ar.n_blocks == 3 && ar.n_calls == 1 && ar.open == SRV_ANTH_OPEN_NONE, "blocks counted");
    /* An empty delta opens nothing. */
    srv_anth_req a2 = {0};
    size_t l = 1;
    char *e = srv_anthropic_sse_delta(&a2, 0, "", 0, &l);
    CHECK(e && l == 0 && a2.n_blocks == 0, "an empty delta sends nothing");
    free(e);
}

static void test_errors(void) {
    static const struct {
        int status;
        const char *type;
    } map[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
               {403, "permission_error"},      {404, "not_found_error"},
               {405, "invalid_request_error"}, {413, "request_too_large"},
               {429, "rate_limit_error"},      {500, "api_error"},
               {503, "overloaded_error"},      {504, "timeout_error"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        char *s = srv_anthropic_error_json(map[i].status, NULL, NULL, NULL, "bad \"thing\"\n");
        cJSON *j = s ? obj(s, strlen(s)) : NULL;
        CHECK(j && !strcmp(str_at(j, "type", NULL), "error") &&
                  !strcmp(str_at(j, "error", "type"), map[i].type) &&
                  !strcmp(str_at(j, "error", "message"), "bad \"thing\"\n") && !strchr(s, '\n'),
              "status %d: %s", map[i].status, s ? s : "(null)");
        cJSON_Delete(j);
        free(s);
    }
    size_t n = 0;
    char *ev = srv_anthropic_sse_error(500, "boom", &n);
    char types[64];
    CHECK(ev && events(ev, n, types, sizeof types) && !strcmp(types, "error") &&
              strstr(ev, "\"api_error\""),
          "the stream's error event: %s", ev ? ev : "(null)");
    free(ev);
    char *c = srv_anthropic_count_json(42);
    CHECK(c && !strcmp(c, "{\"input_tokens\":42}"), "count_tokens: %s", c ? c : "(null)");
    free(c);
}

int main(void) {
    lim = srv_api_limits_default(32000);
    test_full();
    test_fields();
    test_bad();
    test_cuts();
    test_message_json();
    test_stream();
    test_errors();
    return BT_SUMMARY("test_srv_anthropic");
}
