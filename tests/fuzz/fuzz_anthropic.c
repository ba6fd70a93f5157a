/* fuzz_anthropic.c - the parser of Anthropic's Messages API
 * (srv_anthropic_parse, /v1/messages and /v1/messages/count_tokens) and
 * the answers built for what it accepts.
 *
 * The first byte's low bit picks count_tokens (max_tokens not required);
 * the rest is the raw body, given without a terminating NUL. Properties
 * checked:
 *   - the result is 0, or BRISK_EINVAL with a 400, or BRISK_ENOMEM with a
 *     500, with a one-line message; a failure leaves the outputs empty;
 *   - a parsed request holds at least one chat message of a known role, its
 *     contents valid UTF-8 without NUL, tool messages with a call id,
 *     calls whose arguments are a JSON object, at most SRV_ANTH_MAX_STOP
 *     stop sequences that equal the chat request's, and thinking only as
 *     enable_thinking says;
 *   - the message object and every streamed event built for it (thoughts
 *     and text cut from the body, a tool call, the end) are valid one-line
 *     JSON, each event's data typed as its "event:" line, in Anthropic's
 *     order (message_start, ping, blocks started, filled and stopped one at
 *     a time, message_delta, message_stop), and so is the error body for a
 *     status taken from the body. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "server/api/srv_anthropic.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_ANTH_MAX_BODY (256u * 1024)
#define FUZZ_ANTH_N_VOCAB 32000

static srv_api_limits g_lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    g_lim = srv_api_limits_default(FUZZ_ANTH_N_VOCAB);
    return 0;
}

static void check_error(int rc, const srv_api_error *e) {
    FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
    FUZZ_CHECK(e->status == (rc == BRISK_EINVAL ? 400 : 500));
    FUZZ_CHECK(memchr(e->message, '\0', sizeof e->message) && e->message[0]);
    FUZZ_CHECK(!strchr(e->message, '\n'));
    FUZZ_CHECK(memchr(e->param, '\0', sizeof e->param));
}

/* The stream's state machine: which events may follow which. */
typedef struct ev_state {
    int started, stopped, in_block, blocks, delta_seen;
} ev_state;

/* SSE text of "event: T\ndata: {...}\n\n" blocks: each data object valid
 * with "type" T, in an order Anthropic's clients accept. */
static void check_events(const char *s, size_t n, ev_state *st) {
    FUZZ_CHECK(s != NULL);
    size_t i = 0;
    while (i < n) {
        FUZZ_CHECK(n - i > 7 && !memcmp(s + i, "event: ", 7));
        const char *nl = memchr(s + i, '\n', n - i);
        FUZZ_CHECK(nl != NULL);
        char type[64];
        size_t tl = (size_t)(nl - (s + i)) - 7;
        FUZZ_CHECK(tl > 0 && tl < sizeof type);
        memcpy(type, s + i + 7, tl);
        type[tl] = '\0';
        i = (size_t)(nl - s) + 1;
        FUZZ_CHECK(n - i > 6 && !memcmp(s + i, "data: ", 6));
        const char *end = memchr(s + i, '\n', n - i);
        FUZZ_CHECK(end != NULL && end + 1 < s + n && end[1] == '\n');
        size_t dl = (size_t)(end - (s + i)) - 6;
        fuzz_check_json_object_line(s + i + 6, dl);
        cJSON *j = cJSON_ParseWithLength(s + i + 6, dl);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(j, "index");
        FUZZ_CHECK(cJSON_IsString(t));
        FUZZ_CHECK(!strcmp(type, "error") ? !strcmp(t->valuestring, "error")
                                          : !strcmp(t->valuestring, type));
        FUZZ_CHECK(!st->stopped);
        if (!strcmp(type, "message_start")) {
            FUZZ_CHECK(!st->started);
            st->started = 1;
        } else if (!strcmp(type, "content_block_start")) {
            FUZZ_CHECK(st->started && !st->in_block && cJSON_IsNumber(ix) &&
                       ix->valueint == st->blocks);
            st->in_block = 1;
        } else if (!strcmp(type, "content_block_delta")) {
            FUZZ_CHECK(st->in_block && cJSON_IsNumber(ix) && ix->valueint == st->blocks);
        } else if (!strcmp(type, "content_block_stop")) {
            FUZZ_CHECK(st->in_block && cJSON_IsNumber(ix) && ix->valueint == st->blocks);
            st->in_block = 0;
            st->blocks++;
        } else if (!strcmp(type, "message_delta")) {
            FUZZ_CHECK(st->started && !st->in_block && !st->delta_seen);
            st->delta_seen = 1;
        } else if (!strcmp(type, "message_stop")) {
            FUZZ_CHECK(st->delta_seen);
            st->stopped = 1;
        } else {
            FUZZ_CHECK(!strcmp(type, "ping") || !strcmp(type, "error"));
        }
        cJSON_Delete(j);
        i = (size_t)(end - s) + 2;
    }
}

static void check_request(const srv_chat_req *cr, const srv_anth_req *ar, int count_only) {
    FUZZ_CHECK(cr->n_msgs >= 1 && ar->count_only == count_only);
    for (int i = 0; i < cr->n_msgs; i++) {
        const srv_chat_msg *m = &cr->msgs[i];
        FUZZ_CHECK(!strcmp(m->role, "system") || !strcmp(m->role, "user") ||
                   !strcmp(m->role, "assistant") || !strcmp(m->role, "tool"));
        FUZZ_CHECK(m->content && strlen(m->content) == m->content_len &&
                   fuzz_utf8_valid(m->content, m->content_len));
        FUZZ_CHECK(!strcmp(m->role, "tool") == (m->tool_call_id != NULL));
        for (int k = 0; k < m->n_calls; k++) {
            cJSON *a = cJSON_Parse(m->calls[k].arguments);
            FUZZ_CHECK(cJSON_IsObject(a));
            cJSON_Delete(a);
        }
    }
    if (!count_only)
        FUZZ_CHECK(cr->params.max_tokens >= 1);
    FUZZ_CHECK(ar->n_stop == cr->params.n_stop && ar->n_stop <= SRV_ANTH_MAX_STOP);
    for (int i = 0; i < ar->n_stop; i++)
        FUZZ_CHECK(!strcmp(ar->stop[i], cr->params.stop[i]));
    FUZZ_CHECK(cr->enable_thinking == (ar->thinking != SRV_ANTH_THINK_OFF));
}

static void fuzz_answers(srv_anth_req *ar, const char *body, size_t len) {
    size_t cut = len / 2;
    srv_tool_call calls[2] = {{"call_abc", "f\"n", len & 8 ? "{\"a\":\"\\u0000\"}" : "[1"},
                              {"x", "g", "{}"}};
    const char *seq = NULL;
    srv_anth_result res = {body + cut, len - cut, body,
                           cut,        calls,     (int)(len & 1),
                           NULL,       NULL,      {(int)len, 3, (int)(len & 7)}};
    res.stop_reason =
        srv_anthropic_stop_reason(ar, (int)((len >> 1) & 1), res.n_calls, (int)(len % 5) - 1, &seq);
    res.stop_sequence = seq;
    char *j = srv_anthropic_json("msg_x", "m\xff", &res);
    if (j)
        fuzz_check_json_object_line(j, strlen(j));
    free(j);
    ev_state st = {0};
    size_t n = 0;
    char *s = srv_anthropic_sse_start(ar, "msg_x", "m", (int)len, &n);
    if (s)
        check_events(s, n, &st);
    free(s);
    /* Thoughts and text in pieces cut from the body, then maybe tool calls. */
    for (size_t off = 0, k = 0; off < len && k < 8; k++) {
        size_t piece = 1 + (size_t)(unsigned char)body[off] % 7;
        if (piece > len - off)
            piece = len - off;
        s = srv_anthropic_sse_delta(ar, (int)(body[off] & 1), body + off, piece, &n);
        if (s)
            check_events(s, n, &st);
        free(s);
        off += piece;
    }
    if (len & 2) {
        /* A call as the tool parser releases it: id and name with the first
         * fragment, then the rest (or, len & 1, a second call). */
        for (int c = 0; c < 1 + (int)(len & 1); c++) {
            s = srv_anthropic_sse_call(ar, calls[c].id, calls[c].name, body, cut, &n);
            if (s)
                check_events(s, n, &st);
            free(s);
            s = srv_anthropic_sse_call(ar, NULL, NULL, body + cut, len - cut, &n);
            if (s)
                check_events(s, n, &st);
            free(s);
        }
    }
    s = (len & 4) ? srv_anthropic_sse_error(len & 16 ? 500 : 429, body[0] ? "boom" : "", &n)
                  : srv_anthropic_sse_finish(ar, &res, &n);
    if (s)
        check_events(s, n, &st);
    free(s);
    char msg[64];
    size_t ml = len < sizeof msg - 1 ? len : sizeof msg - 1;
    memcpy(msg, body, ml);
    msg[ml] = '\0'; /* the body's bytes, cut at a NUL if it has one */
    j = srv_anthropic_error_json(100 + (int)(len % 500), NULL, NULL, NULL, msg);
    if (j)
        fuzz_check_json_object_line(j, strlen(j));
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_ANTH_MAX_BODY)
        return 0;
    int count_only = data[0] & 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_chat_req cr;
    srv_anth_req *ar = NULL;
    srv_api_error e;
    int rc = srv_anthropic_parse(body, len, &g_lim, count_only, &cr, &ar, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(ar == NULL && cr.n_msgs == 0 && cr.msgs == NULL && cr.tools == NULL);
        return 0;
    }
    FUZZ_CHECK(rc == 0 && ar != NULL);
    check_request(&cr, ar, count_only);
    fuzz_answers(ar, body, len);
    srv_anth_req_free(ar);
    srv_chat_req_free(&cr);
    return 0;
}
