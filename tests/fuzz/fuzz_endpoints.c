/* fuzz_endpoints.c - the request parsers of /v1/responses, /tokenize,
 * /detokenize and /v1/embeddings (srv_responses_parse,
 * srv_api_parse_tokenize, srv_api_parse_detokenize, srv_api_parse_embeddings),
 * and the Responses and embeddings output builders.
 *
 * The first byte picks the parser (mod 4); the rest is the raw body, given
 * without a terminating NUL. Properties checked:
 *   - the result is 0, or BRISK_EINVAL with a 400, or BRISK_ENOMEM with a
 *     500, with a one-line message; a failure leaves the outputs empty;
 *   - a parsed Responses request holds at least one message, and the
 *     response object and every streamed event built for it (text deltas
 *     cut from the body, a tool call, both endings) are valid one-line JSON
 *     with types in order and consecutive sequence numbers;
 *   - a tokenize request holds valid UTF-8, a detokenize request ids in the
 *     vocabulary; an embeddings request 1..SRV_EMBED_MAX_INPUTS non-empty
 *     inputs (UTF-8 text or ids in the vocabulary), and its answer (float or
 *     base64, the vector made of body bytes) is valid one-line JSON. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "server/api/srv_api.h"
#include "server/api/srv_responses.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_EP_MAX_BODY (256u * 1024)
#define FUZZ_EP_N_VOCAB 32000

static srv_api_limits g_lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    g_lim = srv_api_limits_default(FUZZ_EP_N_VOCAB);
    return 0;
}

static void check_error(int rc, const srv_api_error *e) {
    FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
    FUZZ_CHECK(e->status == (rc == BRISK_EINVAL ? 400 : 500));
    FUZZ_CHECK(memchr(e->message, '\0', sizeof e->message) && e->message[0]);
    FUZZ_CHECK(!strchr(e->message, '\n'));
    FUZZ_CHECK(memchr(e->param, '\0', sizeof e->param));
}

/* SSE text of "event: T\ndata: {...}\n\n" blocks: each data object valid,
 * its "type" equal to T, sequence numbers consecutive from *seq. */
static void check_events(const char *s, size_t n, int *seq, const char **last_type) {
    FUZZ_CHECK(s != NULL);
    size_t i = 0;
    static char last[64];
    while (i < n) {
        FUZZ_CHECK(n - i > 7 && !memcmp(s + i, "event: ", 7));
        const char *nl = memchr(s + i, '\n', n - i);
        FUZZ_CHECK(nl != NULL);
        size_t tl = (size_t)(nl - (s + i)) - 7;
        FUZZ_CHECK(tl > 0 && tl < sizeof last);
        memcpy(last, s + i + 7, tl);
        last[tl] = '\0';
        i = (size_t)(nl - s) + 1;
        FUZZ_CHECK(n - i > 6 && !memcmp(s + i, "data: ", 6));
        const char *end = memchr(s + i, '\n', n - i);
        FUZZ_CHECK(end != NULL && end + 1 < s + n && end[1] == '\n');
        size_t dl = (size_t)(end - (s + i)) - 6;
        fuzz_check_json_object_line(s + i + 6, dl);
        cJSON *j = cJSON_ParseWithLength(s + i + 6, dl);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "sequence_number");
        FUZZ_CHECK(cJSON_IsString(t) && !strcmp(t->valuestring, last));
        FUZZ_CHECK(cJSON_IsNumber(q) && q->valueint == (*seq)++);
        cJSON_Delete(j);
        i = (size_t)(end - s) + 2;
    }
    *last_type = last;
}

static void fuzz_responses(const char *body, size_t len) {
    srv_chat_req cr;
    srv_resp_req *rr = NULL;
    srv_api_error e;
    int rc = srv_responses_parse(body, len, &g_lim, &cr, &rr, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(rr == NULL && cr.n_msgs == 0 && cr.msgs == NULL);
        return;
    }
    FUZZ_CHECK(rc == 0 && rr != NULL && cr.n_msgs >= 1);
    memcpy(rr->msg_id, "msg_x", 6);
    memcpy(rr->rs_id, "rs_x", 5);
    /* Text from the body itself: arbitrary bytes, cut anywhere. */
    size_t cut = len / 2;
    srv_tool_call call = {"call_abc", "f\"n", "{\"a\":\"\\u0000\"}"};
    srv_resp_result res = {.text = body,
                           .text_len = cut,
                           .reasoning = body + cut,
                           .reasoning_len = len - cut,
                           .calls = &call,
                           .n_calls = (int)(len & 1),
                           .msg_after = (int)((len >> 3) & 1),
                           .incomplete = (int)((len >> 1) & 1),
                           .usage = {(int)len, 3, 1}};
    char *j = srv_responses_json(rr, "resp_x", 1, "m\xff", &res);
    if (j)
        fuzz_check_json_object_line(j, strlen(j));
    free(j);
    int seq = 0;
    const char *type = "";
    size_t n = 0;
    char *s = srv_responses_sse_start(rr, "resp_x", 1, "m", &n);
    if (s)
        check_events(s, n, &seq, &type);
    free(s);
    if (len & 2) {
        s = srv_responses_sse_delta(rr, body, cut, &n);
        if (s)
            check_events(s, n, &seq, &type);
        free(s);
    }
    if (len & 8) { /* a call streamed as it is written: its item, then the body's bytes */
        s = srv_responses_sse_call(rr, "call_abc", "f\"n", NULL, 0, &n);
        if (s)
            check_events(s, n, &seq, &type);
        free(s);
        s = srv_responses_sse_call(rr, NULL, NULL, body + cut, len - cut, &n);
        if (s)
            check_events(s, n, &seq, &type);
        free(s);
    }
    s = (len & 4) ? srv_responses_sse_error(rr, body[0] ? "boom" : "", &n)
                  : srv_responses_sse_finish(rr, "resp_x", 1, "m", &res, &n);
    if (s) {
        check_events(s, n, &seq, &type);
        FUZZ_CHECK(!strcmp(type, "error") || !strcmp(type, "response.completed") ||
                   !strcmp(type, "response.incomplete"));
    }
    free(s);
    srv_resp_req_free(rr);
    srv_chat_req_free(&cr);
}

static void fuzz_tokenize(const char *body, size_t len) {
    srv_tokenize_req t;
    srv_api_error e;
    int rc = srv_api_parse_tokenize(body, len, &g_lim, &t, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(!t.prompt && !t.model && !t.chat.msgs);
        return;
    }
    if (t.is_chat)
        FUZZ_CHECK(t.chat.n_msgs >= 1 && !t.prompt);
    else
        FUZZ_CHECK(t.prompt && strlen(t.prompt) == t.prompt_len &&
                   fuzz_utf8_valid(t.prompt, t.prompt_len));
    srv_tokenize_req_free(&t);
}

static void fuzz_detokenize(const char *body, size_t len) {
    srv_detokenize_req d;
    srv_api_error e;
    int rc = srv_api_parse_detokenize(body, len, &g_lim, &d, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(!d.ids && !d.model);
        return;
    }
    for (int i = 0; i < d.n_ids; i++)
        FUZZ_CHECK(d.ids[i] >= 0 && d.ids[i] < FUZZ_EP_N_VOCAB);
    char *j = srv_api_tokenize_json(d.ids, d.n_ids, 4096, NULL, NULL);
    if (j)
        fuzz_check_json_object_line(j, strlen(j));
    free(j);
    srv_detokenize_req_free(&d);
}

static void fuzz_embeddings(const char *body, size_t len) {
    srv_embed_req r;
    srv_api_error e;
    int rc = srv_api_parse_embeddings(body, len, &g_lim, &r, &e);
    if (rc < 0) {
        check_error(rc, &e);
        FUZZ_CHECK(!r.inputs && !r.model && r.n_inputs == 0);
        return;
    }
    FUZZ_CHECK(r.n_inputs >= 1 && r.n_inputs <= SRV_EMBED_MAX_INPUTS);
    for (int i = 0; i < r.n_inputs; i++) {
        const srv_prompt *p = &r.inputs[i];
        if (p->is_tokens) {
            FUZZ_CHECK(p->n_ids >= 1);
            for (int k = 0; k < p->n_ids; k++)
                FUZZ_CHECK(p->ids[k] >= 0 && p->ids[k] < FUZZ_EP_N_VOCAB);
        } else {
            FUZZ_CHECK(p->text_len >= 1 && fuzz_utf8_valid(p->text, p->text_len));
        }
    }
    FUZZ_CHECK(r.dimensions == -1 || r.dimensions >= 1);
    /* Vectors of the body's bytes as floats (NaN and infinities included). */
    float v[4] = {0};
    memcpy(v, body, len < sizeof v ? len : sizeof v);
    const float *vecs[2] = {v, v};
    char *j = srv_api_embeddings_json(vecs, 2, 4, r.base64, "m", 7);
    if (j)
        fuzz_check_json_object_line(j, strlen(j));
    free(j);
    srv_embed_req_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_EP_MAX_BODY)
        return 0;
    /* A private copy without a NUL, so reads past the end are caught. */
    char *body = malloc(size - 1 ? size - 1 : 1);
    if (!body)
        return 0;
    memcpy(body, data + 1, size - 1);
    switch (data[0] % 4) {
    case 0: fuzz_responses(body, size - 1); break;
    case 1: fuzz_tokenize(body, size - 1); break;
    case 2: fuzz_detokenize(body, size - 1); break;
    default: fuzz_embeddings(body, size - 1); break;
    }
    free(body);
    return 0;
}
