/* test_fault_alloc.c - allocation failure on the request path, one allocation
 * at a time. For each piece of work (parsing and validating request bodies,
 * building response bodies, SSE events, and whole HTTP exchanges through
 * srv_http / srv_conn / srv_resp with handlers that parse and build as the
 * server does), the allocations it makes are counted (BRISK_FAULT_ALLOC
 * "count"), then it runs again once for every N = 1..total with the N-th
 * allocation failing ("nth:N"). Every run must end cleanly: a parser returns
 * BRISK_ENOMEM with a 500 error and a zeroed output, a builder returns NULL,
 * an HTTP exchange gives the right response, a clean 5xx JSON error, or a
 * connection closed early with only right bytes before; and every loop
 * closes every handle. Leaks are LeakSanitizer's job: the ASan build (which
 * has the injector compiled in) fails the test on any at exit.
 *
 * A build without -DBRISK_FAULT_INJECT prints SKIP and passes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "common/brisk_utf8.h"
#include "models/chat_template.h"
#include "server/api/srv_anthropic.h"
#include "server/api/srv_api.h"
#include "server/http/srv_http.h"

#define NV 100 /* vocabulary size of the parser limits */

/* Runs stmt with the injector configured to spec and armed; the counts stay
 * readable (brisk_fault_seen / brisk_fault_injected) until the next run. */
#define FAULT_RUN(spec, stmt)                                                                      \
    do {                                                                                           \
        CHECK(brisk_fault_configure(spec, NULL, 0) == 0, "configure %s", spec);                    \
        brisk_fault_arm(1);                                                                        \
        stmt;                                                                                      \
        brisk_fault_arm(0);                                                                        \
    } while (0)

/* ---- canonical dumps of parsed requests, to compare runs ---- */

typedef struct dump {
    char s[16384];
    size_t n;
} dump;

static void dp(dump *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dp(dump *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(d->s + d->n, sizeof d->s - d->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        d->n += (size_t)w < sizeof d->s - d->n ? (size_t)w : sizeof d->s - d->n - 1;
}

static void dump_params(dump *d, const srv_gen_params *p) {
    dp(d,
       "model=%s max=%d t=%g tp=%g tk=%d mp=%g n=%d seed=%d:%llu pp=%g fp=%g rp=%g lp=%d "
       "echo=%d stream=%d usage=%d ieos=%d unk=%d stops=",
       p->model ? p->model : "(null)", p->max_tokens, p->temperature, p->top_p, p->top_k, p->min_p,
       p->n, p->has_seed, (unsigned long long)p->seed, p->presence_penalty, p->frequency_penalty,
       p->repetition_penalty, p->logprobs, p->echo, p->stream, p->include_usage, p->ignore_eos,
       p->n_unknown_fields);
    for (int i = 0; i < p->n_stop; i++)
        dp(d, "[%s]", p->stop[i]);
    dp(d, " bias=");
    for (int i = 0; i < p->n_logit_bias; i++)
        dp(d, "%d:%g,", p->logit_bias_ids[i], p->logit_bias[i]);
}

static void dump_completion(dump *d, const srv_completion_req *r) {
    d->n = 0;
    d->s[0] = '\0';
    dump_params(d, &r->params);
    for (int i = 0; i < r->n_prompts; i++) {
        const srv_prompt *pr = &r->prompts[i];
        if (pr->is_tokens) {
            dp(d, " ids:");
            for (int k = 0; k < pr->n_ids; k++)
                dp(d, "%d,", pr->ids[k]);
        } else {
            dp(d, " text:%s", pr->text);
        }
    }
}

static void dump_chat(dump *d, const srv_chat_req *r) {
    d->n = 0;
    d->s[0] = '\0';
    dump_params(d, &r->params);
    for (int i = 0; i < r->n_msgs; i++)
        dp(d, " %s:%s", r->msgs[i].role, r->msgs[i].content);
}

static int is_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* ---- request bodies ---- */

static const char *completion_bodies[] = {
    "{\"model\":\"m\",\"prompt\":[\"Once upon\",\"a time\"],\"max_tokens\":8,\"stop\":[\"\\n\","
    "\"END\"],\"logit_bias\":{\"1\":-5,\"7\":2.5},\"seed\":3,\"n\":2,\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true},\"user\":\"u\"}",
    "{\"prompt\":[[1,2,3],[4,5]],\"echo\":true,\"logprobs\":2,\"temperature\":0}",
    "{\"prompt\":[9,8,7],\"stop\":\"x\"}",
    /* more than 8 keys: the sorted duplicate check allocates */
    "{\"prompt\":\"x\",\"a1\":1,\"a2\":2,\"a3\":3,\"a4\":4,\"a5\":5,\"a6\":6,\"a7\":7,\"a8\":8,"
    "\"a9\":{\"b\":[1,2,{\"c\":null}]}}",
    /* invalid, found after allocations: a 400 when nothing fails */
    "{\"prompt\":\"hi\",\"stop\":[\"a\",\"b\"],\"logit_bias\":{\"999\":1}}",
    /* a syntax error the byte scan lets through: cJSON finds it */
    "{\"prompt\":\"x\" \"y\":1}",
};

static const char *chat_bodies[] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":"
    "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello \"},{\"type\":\"text\",\"text\":"
    "\"there\"}]}],\"logprobs\":true,\"top_logprobs\":3,\"max_completion_tokens\":5}",
    "{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"},{\"role\":\"user\",\"content\":"
    "\"y\",\"name\":\"n\"},{\"role\":\"assistant\",\"content\":\"z\"}],\"stop\":[\"q\"]}",
};

/* A run under injection must give the reference result or a clean 500. */
static void check_parse_run(int rc, const srv_api_error *e, const char *got, int ref_rc,
                            const char *ref, const void *out, size_t out_size, const char *what,
                            unsigned long n) {
    if (rc == BRISK_ENOMEM) {
        CHECK(e->status == 500 && e->type && !strcmp(e->type, "server_error") &&
                  bt_one_line(e->message),
              "%s nth:%lu: ENOMEM without a clean 500 (status %d)", what, n, e->status);
        CHECK(is_zero(out, out_size), "%s nth:%lu: output not zeroed after ENOMEM", what, n);
        return;
    }
    CHECK(rc == ref_rc, "%s nth:%lu: rc %d, want %d or ENOMEM (%s)", what, n, rc, ref_rc,
          e->message);
    if (rc == 0)
        CHECK(!strcmp(got, ref), "%s nth:%lu: parsed differently:\n%s\nwant\n%s", what, n, got,
              ref);
}

static void test_parse_completion(const char *body, int idx, const srv_api_limits *lim) {
    srv_completion_req r;
    srv_api_error e;
    char what[64];
    snprintf(what, sizeof what, "completion body %d", idx);
    int ref_rc = srv_api_parse_completion(body, strlen(body), lim, &r, &e);
    static dump ref, got;
    dump_completion(&ref, &r);
    srv_completion_req_free(&r);
    FAULT_RUN("count", srv_api_parse_completion(body, strlen(body), lim, &r, &e));
    srv_completion_req_free(&r);
    unsigned long total = brisk_fault_seen();
    CHECK(total > 0, "%s: no allocation counted", what);
    int n_oom = 0;
    for (unsigned long n = 1; n <= total; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", n);
        int rc = 0;
        FAULT_RUN(spec, rc = srv_api_parse_completion(body, strlen(body), lim, &r, &e));
        CHECK(brisk_fault_injected() == 1, "%s %s: nothing injected", what, spec);
        dump_completion(&got, &r);
        check_parse_run(rc, &e, got.s, ref_rc, ref.s, &r, sizeof r, what, n);
        n_oom += rc == BRISK_ENOMEM;
        srv_completion_req_free(&r);
    }
    /* Every allocation a parse makes is needed for its result. */
    CHECK(n_oom == (int)total, "%s: %d of %lu failures gave ENOMEM", what, n_oom, total);
}

static void test_parse_chat(const char *body, int idx, const srv_api_limits *lim) {
    srv_chat_req r;
    srv_api_error e;
    char what[64];
    snprintf(what, sizeof what, "chat body %d", idx);
    int ref_rc = srv_api_parse_chat(body, strlen(body), lim, &r, &e);
    CHECK(ref_rc == 0, "%s: %s", what, e.message);
    static dump ref, got;
    dump_chat(&ref, &r);
    srv_chat_req_free(&r);
    FAULT_RUN("count", srv_api_parse_chat(body, strlen(body), lim, &r, &e));
    srv_chat_req_free(&r);
    unsigned long total = brisk_fault_seen();
    CHECK(total > 0, "%s: no allocation counted", what);
    for (unsigned long n = 1; n <= total; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", n);
        int rc = 0;
        FAULT_RUN(spec, rc = srv_api_parse_chat(body, strlen(body), lim, &r, &e));
        CHECK(brisk_fault_injected() == 1, "%s %s: nothing injected", what, spec);
        dump_chat(&got, &r);
        check_parse_run(rc, &e, got.s, ref_rc, ref.s, &r, sizeof r, what, n);
        CHECK(rc == BRISK_ENOMEM, "%s %s: rc %d", what, spec, rc);
        srv_chat_req_free(&r);
    }
}

/* A Messages request with every kind of block: its translation allocates a
 * chat request's JSON, which the chat parser then reads. */
static const char *anthropic_body =
    "{\"model\":\"m\",\"max_tokens\":16,\"stop_sequences\":[\"END\"],\"system\":[{\"type\":"
    "\"text\",\"text\":\"Be brief.\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":"
    "\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}}],\"tool_choice\":{\"type\":"
    "\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
    "\"content\":[{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"tool_use\",\"id\":\"t1\","
    "\"name\":\"f\",\"input\":{\"a\":\"x\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
    "\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"done\",\"is_error\":true},{\"type\":"
    "\"text\",\"text\":\"thanks\"}]}]}";

/* Every allocation of the translation failed in turn: a clean 500 with
 * both outputs empty, never a half-translated request. */
static void test_parse_anthropic(const srv_api_limits *lim) {
    const char *body = anthropic_body;
    srv_chat_req r;
    srv_anth_req *ar = NULL;
    srv_api_error e;
    int ref_rc = srv_anthropic_parse(body, strlen(body), lim, 0, &r, &ar, &e);
    CHECK(ref_rc == 0, "anthropic body: %s", e.message);
    static dump ref, got;
    dump_chat(&ref, &r);
    srv_chat_req_free(&r);
    srv_anth_req_free(ar);
    FAULT_RUN("count", srv_anthropic_parse(body, strlen(body), lim, 0, &r, &ar, &e));
    srv_chat_req_free(&r);
    srv_anth_req_free(ar);
    unsigned long total = brisk_fault_seen();
    CHECK(total > 0, "anthropic: no allocation counted");
    for (unsigned long n = 1; n <= total; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", n);
        int rc = 0;
        ar = (srv_anth_req *)&r; /* must come back NULL on failure */
        FAULT_RUN(spec, rc = srv_anthropic_parse(body, strlen(body), lim, 0, &r, &ar, &e));
        CHECK(brisk_fault_injected() == 1, "anthropic %s: nothing injected", spec);
        dump_chat(&got, &r);
        check_parse_run(rc, &e, got.s, ref_rc, ref.s, &r, sizeof r, "anthropic", n);
        CHECK(rc == BRISK_ENOMEM && ar == NULL, "anthropic %s: rc %d", spec, rc);
        if (rc == 0)
            srv_anth_req_free(ar);
        srv_chat_req_free(&r);
    }
}

static void test_parsers(void) {
    srv_api_limits lim = srv_api_limits_default(NV);
    int n_c = (int)(sizeof completion_bodies / sizeof completion_bodies[0]);
    for (int i = 0; i < n_c; i++)
        test_parse_completion(completion_bodies[i], i, &lim);
    int n_chat = (int)(sizeof chat_bodies / sizeof chat_bodies[0]);
    for (int i = 0; i < n_chat; i++)
        test_parse_chat(chat_bodies[i], i, &lim);
    test_parse_anthropic(&lim);
}

/* ---- response builders ---- */

static const srv_top_logprob tops[] = {{"Once", 4, -0.25f}, {" Once", 5, -1.5f}, {"\xff", 1, -9}};
static const srv_token_logprob lps[] = {
    {"Once", 4, -0.25f, 1, 3, tops, 0},
    {" upon\xe2\x82", 7, -0.5f, 1, 2, tops, 4},
    {"\n", 1, -2.0f, 0, 0, NULL, 11},
};

/* Builds one text with every builder; which = the builder's index. */
static char *build(int which) {
    static const srv_choice ch[] = {
        {0, "Once upon\xe2\x82", 11, "length", lps, 3, NULL, 0, NULL, 0, 0},
        {1, "", 0, "stop", lps, 1, NULL, 0, NULL, 0, 0}};
    static const srv_usage usage = {12, 7, 0};
    srv_api_error e = {400, "invalid_request_error", "stop", "invalid_value", "bad \"stop\"\x01"};
    size_t n;
    switch (which) {
    case 0: return srv_api_completion_json("cmpl-1", 1700000000, "m", ch, 2, &usage, 1);
    case 1: return srv_api_chat_json("chatcmpl-1", 1700000000, "m", ch, 2, &usage, 1);
    case 2: return srv_api_completion_chunk_json("cmpl-1", 1, "m", &ch[0], NULL, 1);
    case 3: return srv_api_chat_chunk_json("chatcmpl-1", 1, "m", &ch[0], 1, NULL, 1);
    case 4: return srv_api_chat_chunk_json("chatcmpl-1", 1, "m", NULL, 0, &usage, 0);
    case 5: return srv_api_models_json("m", 1700000000, "brisk", 512, "Q4_K_M", NULL);
    case 6: return srv_api_error_json(&e);
    case 7: return srv_sse_event("{\"a\":1}", &n);
    case 8: return srv_sse_error(&e, &n);
    case 9: return brisk_utf8_sanitize_dup("ok\xc3\x28\xf0\x9f\x98", 8, &n);
    case 10: {
        /* The chat template renderer (the chat endpoint's prompt). */
        static const model_chat_msg msgs[] = {{"system", " Be brief. ", 11},
                                              {"user", "Hi\n", 3},
                                              {"assistant", "Hello", 5},
                                              {"user", "Tell me a story", 15}};
        char *out = NULL, err[128];
        int swb;
        if (model_chat_render(MODEL_CHAT_LLAMA3, msgs, 4, "<s>", "</s>", &out, &n, &swb, err,
                              sizeof err) != 0)
            return NULL;
        return out;
    }
    case 11:
    case 12: {
        /* Anthropic's message object (a call's input re-printed through
         * cJSON), and a call's tool_use block as it streams. */
        static const srv_tool_call calls[] = {{"call_1", "f", "{\"a\":[1,\"x\"]}"}};
        srv_anth_result res = {"Hi\xff", 3, "hm", 2, calls, 1, "tool_use", NULL, usage};
        srv_anth_req ar = {0};
        return which == 11
                   ? srv_anthropic_json("msg_1", "m", &res)
                   : srv_anthropic_sse_call(&ar, calls[0].id, calls[0].name, calls[0].arguments,
                                            strlen(calls[0].arguments), &n);
    }
    default: return NULL;
    }
}
#define N_BUILDERS 13

static void test_builders(void) {
    for (int b = 0; b < N_BUILDERS; b++) {
        char *ref = build(b);
        CHECK(ref != NULL, "builder %d: NULL without injection", b);
        char *s = NULL;
        FAULT_RUN("count", s = build(b));
        unsigned long total = brisk_fault_seen();
        CHECK(total > 0 && s && ref && !strcmp(s, ref), "builder %d: count run differs", b);
        free(s);
        for (unsigned long n = 1; n <= total; n++) {
            char spec[32];
            snprintf(spec, sizeof spec, "nth:%lu", n);
            FAULT_RUN(spec, s = build(b));
            CHECK(brisk_fault_injected() == 1, "builder %d %s: nothing injected", b, spec);
            /* One failed allocation spoils the text: nothing half-built escapes. */
            CHECK(s == NULL, "builder %d %s: returned a text after a failed allocation", b, spec);
            free(s);
        }
        free(ref);
    }
}

/* ---- whole HTTP exchanges ---- */

static const srv_api_limits *http_limits(void) {
    static srv_api_limits lim;
    static int init;
    if (!init) {
        lim = srv_api_limits_default(NV);
        init = 1;
    }
    return &lim;
}

static void h_hello(srv_req *r) {
    srv_respond(r, 200, "text/plain", "hello", 5, NULL);
}

/* Parses a completions body and answers with a completion built from it, as
 * srv_gen does: the parser, the builder and srv_resp in one request. */
static void h_complete(srv_req *r) {
    size_t len;
    const char *body = srv_req_body(r, &len);
    srv_completion_req cr;
    srv_api_error e;
    int rc = srv_api_parse_completion(body, len, http_limits(), &cr, &e);
    if (rc < 0) {
        srv_respond_error(r, e.status, e.type, e.param[0] ? e.param : NULL, e.code, "%s",
                          e.message);
        return;
    }
    srv_choice ch = {
        0, cr.prompts[0].text, cr.prompts[0].text_len, "length", NULL, 0, NULL, 0, NULL, 0, 0};
    srv_usage u = {cr.n_prompts, cr.params.max_tokens, 0};
    char *json = srv_api_completion_json("cmpl-t", 1, "m", &ch, 1, &u, 0);
    srv_completion_req_free(&cr);
    if (!json) {
        srv_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_respond(r, 200, "application/json", json, strlen(json), NULL);
    free(json);
}

static const char stream_error_event[] = "data: {\"error\":{\"message\":\"out of memory\"}}\n\n";

/* Three SSE events and [DONE], synchronously; an event that cannot be built
 * ends the stream with an error event, as srv_gen does. */
static void h_stream(srv_req *r) {
    if (srv_stream_begin(r, 200, "text/event-stream", "Cache-Control: no-cache\r\n") < 0) {
        srv_req_release(r);
        return;
    }
    for (int i = 0; i < 3; i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"i\":%d,\"text\":\"piece %d\"}", i, i);
        size_t n;
        char *ev = srv_sse_event(json, &n);
        if (!ev) {
            srv_stream_write(r, stream_error_event, sizeof stream_error_event - 1);
            break;
        }
        srv_stream_write(r, ev, n);
        free(ev);
    }
    size_t n;
    const char *done = srv_sse_done(&n);
    srv_stream_write(r, done, n);
    srv_stream_end(r);
}

static void h_bad(srv_req *r) {
    srv_respond_error(r, 422, NULL, "field", "invalid_value", "the %s is wrong", "field");
}

static const srv_route routes[] = {
    {"GET", "/hello", h_hello, 0},
    {"POST", "/complete", h_complete, 0},
    {"GET", "/stream", h_stream, 0},
    {"GET", "/bad", h_bad, 0},
};

typedef struct tloop {
    uv_loop_t loop;
    uv_async_t stop;
    srv_http *h;
    pthread_t thr;
} tloop;

static void *loop_main(void *arg) {
    tloop *t = arg;
    uv_run(&t->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void on_stop(uv_async_t *a) {
    tloop *t = a->data;
    srv_http_free(t->h);
    t->h = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static int tloop_start(tloop *t, int json_log) {
    memset(t, 0, sizeof *t);
    char err[256];
    if (uv_loop_init(&t->loop) != 0)
        return -1;
    srv_http_config cfg = srv_http_config_default();
    cfg.log_format = json_log ? SRV_LOG_JSON : SRV_LOG_TEXT;
    t->h = srv_http_create(&t->loop, &cfg, routes, (int)(sizeof routes / sizeof routes[0]), NULL,
                           err, sizeof err);
    if (!t->h || srv_http_listen(t->h, "127.0.0.1", 0, err, sizeof err) < 0) {
        fprintf(stderr, "test server: %s\n", err);
        return -1;
    }
    uv_async_init(&t->loop, &t->stop, on_stop);
    t->stop.data = t;
    return pthread_create(&t->thr, NULL, loop_main, t) == 0 ? 0 : -1;
}

static void tloop_stop(tloop *t) {
    uv_async_send(&t->stop);
    pthread_join(t->thr, NULL);
    CHECK(uv_loop_close(&t->loop) == 0, "a handle is left open after srv_http_free");
}

/* Sends req on a new connection and reads until the server closes it. The
 * bytes (Date lines blanked) go to out; returns their length. */
static size_t exchange(int port, const char *req, char *out, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t len = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
        for (;;) {
            ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            len += (size_t)n;
        }
    }
    close(fd);
    out[len] = '\0';
    /* The date and the generated request ids differ from run to run. */
    static const char *const vary[] = {"\r\nDate: ", "\r\nX-Request-Id: "};
    for (int v = 0; v < 2; v++)
        for (char *d = strstr(out, vary[v]); d; d = strstr(d + 2, vary[v]))
            for (char *p = d + strlen(vary[v]); *p && *p != '\r'; p++)
                *p = '#';
    return len;
}

/* Whether got is a clean answer: the reference, or responses that match the
 * reference's up to one that is a complete 5xx JSON error (then nothing
 * more), or the reference cut short (the connection closed when a write
 * could not get memory) - or, for a stream, the reference up to an event
 * followed by the stream's error event. */
static int clean_answer(const char *got, size_t glen, const char *ref, size_t rlen) {
    if (glen == rlen && !memcmp(got, ref, rlen))
        return 1;
    if (glen < rlen && !memcmp(got, ref, glen))
        return 1; /* cut short */
    /* The longest common prefix ends where the answers part. */
    size_t k = 0;
    while (k < glen && k < rlen && got[k] == ref[k])
        k++;
    const char *r = got;
    while (r < got + k) { /* back to the start of the response they part in */
        const char *next = strstr(r + 1, "HTTP/1.1 ");
        if (!next || next > got + k)
            break;
        r = next;
    }
    if (!strncmp(r, "HTTP/1.1 5", 10)) {
        const char *body = strstr(r, "\r\n\r\n");
        if (!body)
            return 0;
        cJSON *j = cJSON_Parse(body + 4);
        int ok = j && cJSON_IsObject(cJSON_GetObjectItem(j, "error")) &&
                 cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"));
        cJSON_Delete(j);
        return ok;
    }
    /* A stream that reports the failure in band. */
    char chunk[96];
    snprintf(chunk, sizeof chunk, "%zx\r\n%s\r\n", sizeof stream_error_event - 1,
             stream_error_event);
    const char *ce = strstr(got + (k > 8 ? k - 8 : 0), chunk);
    return ce != NULL;
}

typedef struct http_case {
    const char *name;
    const char *head; /* request line and headers, without the blank line */
    const char *body; /* NULL: none; else sent with its Content-Length */
    int json_log;
} http_case;

static const http_case http_cases[] = {
    {"hello", "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", NULL, 0},
    {"complete",
     "POST /complete HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
     "X-Request-Id: abc\r\nConnection: close\r\n",
     "{\"prompt\":[\"Once upon a time\"],\"max_tokens\":7,\"stop\":[\"x\"]}", 1},
    {"invalid body", "POST /complete HTTP/1.1\r\nHost: t\r\nConnection: close\r\n",
     "{\"prompt\":\"x\",\"n\":1000}", 0},
    {"stream", "GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", NULL, 0},
    {"error", "GET /bad?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", NULL, 1},
    {"404", "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", NULL, 0},
    {"pipelined",
     "GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /stream HTTP/1.1\r\nHost: t\r\n\r\n"
     "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n",
     NULL, 0},
};

static void http_request(const http_case *hc, char *out, size_t cap) {
    if (hc->body)
        snprintf(out, cap, "%sContent-Length: %zu\r\n\r\n%s", hc->head, strlen(hc->body), hc->body);
    else
        snprintf(out, cap, "%s\r\n", hc->head);
}

static void test_http(void) {
    static char ref[65536], got[65536], req[4096];
    int n_cases = (int)(sizeof http_cases / sizeof http_cases[0]);
    for (int ci = 0; ci < n_cases; ci++) {
        const http_case *hc = &http_cases[ci];
        http_request(hc, req, sizeof req);
        tloop t;
        if (tloop_start(&t, hc->json_log) < 0) {
            CHECK(0, "%s: cannot start a server", hc->name);
            return;
        }
        size_t rlen = 0;
        FAULT_RUN("count", rlen = exchange(srv_http_port(t.h), req, ref, sizeof ref));
        unsigned long total = brisk_fault_seen();
        tloop_stop(&t);
        CHECK(rlen > 0 && total > 0, "%s: no answer or no allocation counted", hc->name);
        int n_clean = 0, n_cut = 0, n_same = 0;
        for (unsigned long n = 1; n <= total; n++) {
            char spec[32];
            snprintf(spec, sizeof spec, "nth:%lu", n);
            if (tloop_start(&t, hc->json_log) < 0) {
                CHECK(0, "%s: cannot start a server", hc->name);
                return;
            }
            size_t glen = 0;
            FAULT_RUN(spec, glen = exchange(srv_http_port(t.h), req, got, sizeof got));
            int ok = clean_answer(got, glen, ref, rlen);
            CHECK(ok, "%s %s: not a clean answer:\n%.*s\n--- want ---\n%.*s", hc->name, spec,
                  (int)glen, got, (int)rlen, ref);
            /* The server goes on serving as if nothing had happened. */
            static char again[65536];
            size_t alen = exchange(srv_http_port(t.h), req, again, sizeof again);
            CHECK(alen == rlen && !memcmp(again, ref, rlen),
                  "%s %s: the next exchange differs:\n%.*s", hc->name, spec, (int)alen, again);
            tloop_stop(&t);
            n_clean += ok;
            n_same += glen == rlen && !memcmp(got, ref, rlen);
            n_cut += glen < rlen && !memcmp(got, ref, glen);
        }
        printf("  http %-12s %3lu allocations: %d clean (%d unharmed, %d cut short)\n", hc->name,
               total, n_clean, n_same, n_cut);
    }
}

/* How many of n one-byte allocations fail. */
static int count_failures(int n) {
    int fails = 0;
    for (int i = 0; i < n; i++) {
        void *q = brisk_malloc(1);
        fails += q == NULL;
        free(q);
    }
    return fails;
}

int main(void) {
    if (!brisk_fault_compiled()) {
        printf("test_fault_alloc: SKIP: built without -DBRISK_FAULT_INJECT\n");
        return 0;
    }
    /* The access log and the out-of-memory warnings of hundreds of runs
     * would drown the output. */
    brisk_log_set_level(BRISK_LOG_ERROR);
    char err[256];
    CHECK(brisk_alloc_init(err, sizeof err) == 0, "init: %s", err);
    CHECK(brisk_fault_configure("nth:0", err, sizeof err) == BRISK_EINVAL, "nth:0 accepted");
    CHECK(brisk_fault_configure("rate:2:1", err, sizeof err) == BRISK_EINVAL, "rate 2 accepted");
    CHECK(brisk_fault_configure("rate:0.5", err, sizeof err) == BRISK_EINVAL, "no seed accepted");
    CHECK(brisk_fault_configure("sometimes", err, sizeof err) == BRISK_EINVAL, "junk accepted");
    /* rate:1 fails everything, rate:0 nothing, and a rate is about right. */
    void *p = NULL;
    FAULT_RUN("rate:1:7", p = brisk_malloc(8));
    CHECK(p == NULL && brisk_fault_injected() == 1, "rate:1 did not fail");
    FAULT_RUN("rate:0:7", p = brisk_malloc(8));
    CHECK(p != NULL && brisk_fault_injected() == 0, "rate:0 failed");
    free(p);
    int fails = 0;
    FAULT_RUN("rate:0.25:42", fails = count_failures(4000));
    CHECK(fails > 850 && fails < 1150 && brisk_fault_injected() == (unsigned long)fails,
          "rate:0.25 failed %d of 4000", fails);
    /* Not armed: nothing fails whatever the configuration. */
    CHECK(brisk_fault_configure("rate:1:1", err, sizeof err) == 0, "configure: %s", err);
    p = brisk_malloc(8);
    CHECK(p != NULL, "injected while disarmed");
    free(p);

    test_parsers();
    test_builders();
    test_http();
    brisk_fault_configure("off", NULL, 0);
    return BT_SUMMARY("test_fault_alloc");
}
