/* test_srv_responses.c - the Responses API's pieces that need no server
 * (server/api/srv_responses.c): an error about the chat request a Responses
 * request became, put in the Responses API's terms; and a stream's events
 * for text and calls as they come - items announced in order, a call's
 * arguments in deltas that join into its done events, every item's status
 * incomplete when the response is, the final object listing the items where
 * they were streamed. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_buf.h"
#include "common/brisk_log.h"
#include "server/api/srv_responses.h"

static void test_map_error(void) {
    static const struct {
        const char *param, *message, *want_param, *want_message;
    } cases[] = {
        {"max_tokens", "'max_tokens' must be between 1 and 2147483647", "max_output_tokens",
         "'max_output_tokens' must be between 1 and 2147483647"},
        {"max_tokens",
         "This model's maximum context length is 8 tokens. Please reduce the "
         "prompt or max_tokens.",
         "max_output_tokens",
         "This model's maximum context length is 8 tokens. Please reduce the prompt or "
         "max_output_tokens."},
        {"response_format", "'response_format.json_schema.schema': 'x' is not supported",
         "text.format", "'text.format.schema': 'x' is not supported"},
        {"response_format", "'response_format' and 'tool_choice' both constrain the output",
         "text.format", "'text.format' and 'tool_choice' both constrain the output"},
        {"tools[2]", "'tools[2].function.parameters' must be an object", "tools[2]",
         "'tools[2].parameters' must be an object"},
        {"messages[3].content", "'messages[3].content' must be a string; 9 messages are allowed",
         "input", "'input' must be a string; 9 messages are allowed"},
        {"temperature", "'temperature' must be at most 2", "temperature",
         "'temperature' must be at most 2"},
        /* a name inside another word is left alone */
        {"", "'my_max_tokens_x' stays", "", "'my_max_tokens_x' stays"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_api_error e = {400, "invalid_request_error", "", NULL, ""};
        snprintf(e.param, sizeof e.param, "%s", cases[i].param);
        snprintf(e.message, sizeof e.message, "%s", cases[i].message);
        srv_responses_map_error(&e);
        CHECK(!strcmp(e.param, cases[i].want_param) && !strcmp(e.message, cases[i].want_message),
              "%s -> %s: %s", cases[i].param, e.param, e.message);
    }
}

/* Splits SSE text into its events' data objects, appended to arr. */
static void add_events(cJSON *arr, char *sse) {
    CHECK(sse != NULL, "events made");
    for (char *p = sse; p && (p = strstr(p, "data: "));) {
        char *end = strstr(p, "\n\n");
        if (!end)
            break;
        *end = '\0';
        cJSON *o = cJSON_Parse(p + 6);
        CHECK(o != NULL, "valid JSON: %s", p + 6);
        if (o)
            cJSON_AddItemToArray(arr, o);
        p = end + 2;
    }
    free(sse);
}

static const char *type_of(const cJSON *ev) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* A call, text after it, a second call cut by the budget. */
static void test_stream_calls(void) {
    srv_resp_req *rr = calloc(1, sizeof *rr);
    snprintf(rr->msg_id, sizeof rr->msg_id, "msg_1");
    cJSON *ev = cJSON_CreateArray();
    size_t n;
    add_events(ev, srv_responses_sse_start(rr, "resp_1", 1, "m", &n));
    add_events(ev, srv_responses_sse_call(rr, "call_A", "f", NULL, 0, &n));
    add_events(ev, srv_responses_sse_call(rr, NULL, NULL, "{\"a\":", 5, &n));
    add_events(ev, srv_responses_sse_call(rr, NULL, NULL, " 1}", 3, &n));
    add_events(ev, srv_responses_sse_delta(rr, "Done.", 5, &n));
    add_events(ev, srv_responses_sse_call(rr, "call_B", "g", NULL, 0, &n));
    add_events(ev, srv_responses_sse_call(rr, NULL, NULL, "{\"b\": [", 7, &n));
    srv_tool_call calls[2] = {{"call_A", "f", "{\"a\": 1}"}, {"call_B", "g", "{\"b\": ["}};
    srv_resp_result res = {.calls = calls, .n_calls = 2, .incomplete = 1};
    add_events(ev, srv_responses_sse_finish(rr, "resp_1", 1, "m", &res, &n));
    static const char *const want[] = {"response.created",
                                       "response.in_progress",
                                       "response.output_item.added", /* call A, 0 */
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done",
                                       "response.output_item.done",
                                       "response.output_item.added", /* the message, 1 */
                                       "response.content_part.added",
                                       "response.output_text.delta",
                                       "response.output_item.added", /* call B, 2 */
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done",
                                       "response.output_item.done",
                                       "response.output_text.done",
                                       "response.content_part.done",
                                       "response.output_item.done",
                                       "response.incomplete"};
    int n_ev = cJSON_GetArraySize(ev);
    CHECK(n_ev == (int)(sizeof want / sizeof want[0]), "%d events", n_ev);
    for (int i = 0; i < n_ev && i < (int)(sizeof want / sizeof want[0]); i++) {
        const cJSON *e = cJSON_GetArrayItem(ev, i);
        CHECK(!strcmp(type_of(e), want[i]), "event %d: %s, want %s", i, type_of(e), want[i]);
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "sequence_number");
        CHECK(cJSON_IsNumber(seq) && seq->valueint == i, "sequence_number %d", i);
    }
    const cJSON *done = cJSON_GetArrayItem(ev, 5);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(done, "arguments");
    CHECK(cJSON_IsString(args) && !strcmp(args->valuestring, "{\"a\": 1}"),
          "the fragments joined: %s", cJSON_IsString(args) ? args->valuestring : "?");
    /* items done with the response's status: the first call before the cut, completed;
     * the cut one and the message, incomplete */
    static const struct {
        int at;
        const char *status;
    } items[] = {{6, "completed"}, {13, "incomplete"}, {16, "incomplete"}};
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        const cJSON *it =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ev, items[i].at), "item");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "status");
        CHECK(cJSON_IsString(st) && !strcmp(st->valuestring, items[i].status), "item %d: %s",
              items[i].at, cJSON_IsString(st) ? st->valuestring : "?");
    }
    /* the final object: items where they were streamed, every one incomplete */
    const cJSON *resp =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ev, n_ev - 1), "response");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(resp, "output");
    static const char *const order[] = {"function_call", "message", "function_call"};
    CHECK(cJSON_GetArraySize(out) == 3, "3 items");
    for (int i = 0; i < 3 && i < cJSON_GetArraySize(out); i++) {
        const cJSON *it = cJSON_GetArrayItem(out, i);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "status");
        CHECK(cJSON_IsString(ty) && !strcmp(ty->valuestring, order[i]) && cJSON_IsString(st) &&
                  !strcmp(st->valuestring, "incomplete"),
              "item %d", i);
    }
    cJSON_Delete(ev);
    srv_resp_req_free(rr);
}

/* The whole object: the message first, then the calls; items complete or not
 * with the response. */
static void test_whole(void) {
    srv_resp_req rr0 = {0};
    snprintf(rr0.msg_id, sizeof rr0.msg_id, "msg_1");
    srv_tool_call calls[1] = {{"call_A", "f", "{}"}};
    for (int incomplete = 0; incomplete < 2; incomplete++) {
        srv_resp_result res = {
            .text = "Hi", .text_len = 2, .calls = calls, .n_calls = 1, .incomplete = incomplete};
        char *s = srv_responses_json(&rr0, "resp_1", 1, "m", &res);
        cJSON *o = s ? cJSON_Parse(s) : NULL;
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(o, "output");
        const char *want = incomplete ? "incomplete" : "completed";
        CHECK(cJSON_GetArraySize(out) == 2, "two items");
        for (int i = 0; i < cJSON_GetArraySize(out); i++) {
            const cJSON *it = cJSON_GetArrayItem(out, i);
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "status");
            CHECK(cJSON_IsString(ty) && !strcmp(ty->valuestring, i ? "function_call" : "message"),
                  "item %d's type", i);
            CHECK(cJSON_IsString(st) && !strcmp(st->valuestring, want), "item %d: %s", i,
                  cJSON_IsString(st) ? st->valuestring : "?");
        }
        cJSON_Delete(o);
        free(s);
    }
}

int main(void) {
    brisk_log_set_level(BRISK_LOG_ERROR);
    test_map_error();
    test_stream_calls();
    test_whole();
    return BT_SUMMARY("test_srv_responses");
}
