/* fuzz_http.c - the HTTP request path: brisk's strict llhttp parser with its
 * own callbacks and limits, routing, auth, the layer's own error answers,
 * keep-alive and pipelining, 100-continue, whole, streamed and late
 * (asynchronous) responses, aborts, draining and teardown - server/http/srv_conn.c,
 * srv_http.c and srv_resp.c as they run for a real client.
 *
 * No socket: the connection is served over a pipe (srv_conn_adopt), the
 * client's bytes are delivered through the connection's own read path
 * (srv_conn_inject: the same buffer and callback as a socket read, and only
 * while the connection reads, as a socket would), and what brisk writes is
 * read back from the pipe's other end. One libuv loop, made once, runs the
 * timers and write callbacks between deliveries; it never waits.
 *
 * Input: byte 0 the setup (bit 0 an API key, bit 1 tight limits so that
 * 413/414/431 and the per-connection request cap are reachable, bit 2 end
 * with EOF rather than with srv_http_free, bit 3 answer late requests at
 * once rather than only when the connection waits for them, bit 4 drain
 * after the first delivery, bit 5 leave a late request unanswered at the
 * end), bytes 1-2 seed the split points, byte 3 the largest delivery (0:
 * everything at once); the rest is what the client sends.
 *
 * Properties: every request a handler sees keeps srv_http.h's promises
 * (path without query or fragment, NUL-terminated body of the stated
 * length, trimmed header values without line breaks, a visible request id);
 * everything written is a sequence of well-formed HTTP/1.1 responses
 * (status line, header syntax, exactly one Date, Server, X-Request-Id and
 * Connection, framing by Content-Length or chunked, valid one-line UTF-8
 * JSON error bodies, Allow on 405, WWW-Authenticate on 401) with nothing
 * after a "Connection: close" one; there is one response per finished
 * request that was not aborted; nothing leaks and nothing is left open. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "common/brisk_error.h"
#include "server/api/srv_api.h"
#include "server/http/srv_http_int.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_HTTP_MAX_BYTES (1u << 20)
/* Output kept for checking; a flood of pipelined requests stays far below. */
#define FUZZ_HTTP_MAX_OUT (16u << 20)

#define API_KEY "sk-fuzz-key"

typedef struct harness {
    srv_req *pending; /* a late request, answered later or aborted */
    int n_finished;   /* on_finish calls with a status other than 499 */
    int n_dispatched;
    char *out;
    size_t out_len, out_cap;
    int out_overflow;
} harness;

static uv_loop_t g_loop;
static int g_pipe[2] = {-1, -1};
static harness g_h;

/* ---- the application ----------------------------------------------------- */

static void on_finish(void *app, const srv_req *r, int status) {
    (void)r;
    FUZZ_CHECK(app == &g_h);
    if (status != 499)
        g_h.n_finished++;
}

/* What srv_http.h promises about every request handed to a handler. */
static void check_request(srv_req *r) {
    FUZZ_CHECK(srv_req_app(r) == &g_h);
    FUZZ_CHECK(!srv_req_aborted(r));
    const char *m = srv_req_method(r), *path = srv_req_path(r), *q = srv_req_query(r);
    FUZZ_CHECK(m && m[0] && path && q);
    FUZZ_CHECK(!strchr(path, '?') && !strchr(path, '#') && !strchr(q, '#'));
    size_t blen = 0;
    const char *body = srv_req_body(r, &blen);
    FUZZ_CHECK(body && body[blen] == '\0' && strlen(body) <= blen);
    const char *id = srv_req_id(r);
    size_t il = strlen(id);
    FUZZ_CHECK(il >= 1 && il <= 64);
    for (size_t i = 0; i < il; i++)
        FUZZ_CHECK((unsigned char)id[i] > 0x20 && (unsigned char)id[i] < 0x7f);
    for (int i = 0; i < r->n_hdrs; i++) {
        const srv_hdr *hd = &r->hdrs[i];
        const char *v = r->head + hd->val_off;
        FUZZ_CHECK(hd->name_len > 0);
        FUZZ_CHECK(fuzz_no_byte(v, hd->val_len, '\r') && fuzz_no_byte(v, hd->val_len, '\n'));
        FUZZ_CHECK(hd->val_len == 0 || (v[hd->val_len - 1] != ' ' && v[hd->val_len - 1] != '\t'));
        FUZZ_CHECK(v[hd->val_len] == '\0');
        char name[64];
        if (hd->name_len < sizeof name && fuzz_no_byte(r->head + hd->name_off, hd->name_len, 0)) {
            memcpy(name, r->head + hd->name_off, hd->name_len);
            name[hd->name_len] = '\0';
            size_t n = 0;
            const char *f = srv_req_header(r, name, &n);
            FUZZ_CHECK(f != NULL && f[n] == '\0');
        }
    }
    g_h.n_dispatched++;
}

static void h_text(srv_req *r) {
    check_request(r);
    srv_respond(r, 200, "text/plain; charset=utf-8", "ok\n", 3, NULL);
}

static void h_models(srv_req *r) {
    check_request(r);
    char *j = srv_api_models_json("fuzz-model", 1700000000, "brisk", 2048, "Q4_K_M", NULL);
    if (!j) {
        srv_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
        return;
    }
    srv_respond(r, 200, "application/json", j, strlen(j), NULL);
    free(j);
}

/* A streamed answer (SSE), as /v1/completions sends one. */
static void h_stream(srv_req *r) {
    check_request(r);
    size_t blen = 0;
    srv_req_body(r, &blen);
    if (srv_stream_begin(r, 200, "text/event-stream", "Cache-Control: no-cache\r\n") == 0) {
        char ev[96];
        for (int i = 0; i < 3; i++) {
            int n = snprintf(ev, sizeof ev, "data: {\"i\":%d,\"body_bytes\":%zu}\n\n", i, blen);
            if (srv_stream_write(r, ev, (size_t)n) < 0)
                break;
        }
        size_t dn;
        const char *done = srv_sse_done(&dn);
        srv_stream_write(r, done, dn);
    }
    srv_stream_end(r);
}

static void on_abort(srv_req *r, void *user) {
    (void)user;
    FUZZ_CHECK(r == g_h.pending && srv_req_aborted(r));
    g_h.pending = NULL;
    srv_req_release(r);
}

/* A late answer, as generation requests get theirs from engine events. */
static void h_late(srv_req *r) {
    check_request(r);
    FUZZ_CHECK(g_h.pending == NULL);
    g_h.pending = r;
    srv_req_on_abort(r, on_abort, NULL);
}

static void answer_pending(void) {
    srv_req *r = g_h.pending;
    if (!r)
        return;
    g_h.pending = NULL;
    static const char body[] = "{\"object\":\"chat.completion\",\"choices\":[]}";
    srv_respond(r, 200, "application/json", body, sizeof body - 1, NULL);
}

/* brisk serve's table, plus HEAD routes so that head-only answers (whole
 * and streamed) are reached. */
static const srv_route g_routes[] = {
    {"POST", "/v1/completions", h_stream, SRV_ROUTE_AUTH},
    {"POST", "/v1/chat/completions", h_late, SRV_ROUTE_AUTH},
    {"GET", "/v1/models", h_models, SRV_ROUTE_AUTH},
    {"GET", "/health", h_text, 0},
    {"GET", "/livez", h_text, 0},
    {"GET", "/readyz", h_text, 0},
    {"GET", "/metrics", h_text, 0},
    {"HEAD", "/livez", h_text, 0},
    {"HEAD", "/v1/completions", h_stream, SRV_ROUTE_AUTH},
};

/* ---- the loop and the pipe ------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    /* The harness reads its end without blocking; brisk's end is made
     * non-blocking by libuv. A full pipe only makes libuv queue the write
     * until pump() has drained it. */
    if (uv_loop_init(&g_loop) != 0 || pipe(g_pipe) != 0 ||
        fcntl(g_pipe[0], F_SETFL, O_NONBLOCK) != 0 || fcntl(g_pipe[0], F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(g_pipe[1], F_SETFD, FD_CLOEXEC) != 0) {
        fprintf(stderr, "fuzz_http: cannot set up the loop and the pipe\n");
        abort();
    }
    return 0;
}

static void drain_output(void) {
    char buf[65536];
    for (;;) {
        ssize_t n = read(g_pipe[0], buf, sizeof buf);
        if (n <= 0)
            break;
        if (g_h.out_len + (size_t)n > FUZZ_HTTP_MAX_OUT) {
            g_h.out_overflow = 1;
            continue;
        }
        if (g_h.out_len + (size_t)n > g_h.out_cap) {
            size_t cap = g_h.out_cap ? g_h.out_cap : 65536;
            while (cap < g_h.out_len + (size_t)n)
                cap *= 2;
            char *p = realloc(g_h.out, cap);
            if (!p) {
                g_h.out_overflow = 1;
                continue;
            }
            g_h.out = p;
            g_h.out_cap = cap;
        }
        memcpy(g_h.out + g_h.out_len, buf, (size_t)n);
        g_h.out_len += (size_t)n;
    }
}

/* Work the loop would do at once: a pipelined request to parse, a write to
 * complete, a connection to close. */
static int busy(const srv_http *h) {
    for (const srv_conn *c = h->conns; c; c = c->next)
        if (c->tmode == SRV_T_PROCESS || c->n_writes > 0 || c->closing)
            return 1;
    return 0;
}

static void pump(const srv_http *h) {
    for (int i = 0; i < 256; i++) {
        uv_run(&g_loop, UV_RUN_NOWAIT);
        drain_output();
        if (!busy(h))
            return;
    }
}

/* ---- checking what was written ---------------------------------------------- */

static int is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int starts(const char *p, size_t n, const char *lit) {
    size_t l = strlen(lit);
    return n >= l && !memcmp(p, lit, l);
}

/* The line at p (without its CRLF); its length, or -1 without a CRLF. */
static long line_len(const char *p, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return (long)i;
    return -1;
}

static int known_status(int s) {
    static const int codes[] = {100, 200, 400, 401, 404, 405, 408, 413, 414, 431, 500, 503, 505};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i] == s)
            return 1;
    return 0;
}

static void check_json_body(int status, const char *b, size_t n) {
    FUZZ_CHECK(fuzz_utf8_valid(b, n));
    FUZZ_CHECK(fuzz_no_byte(b, n, '\n') && fuzz_no_byte(b, n, '\0'));
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(b, n, &end, 0);
    FUZZ_CHECK(j && cJSON_IsObject(j) && end == b + n);
    if (status >= 400) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")));
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")));
    }
    cJSON_Delete(j);
}

/* Parses the responses in out; returns how many final (non-1xx) ones. */
static int check_output(const char *p, size_t n) {
    int finals = 0, closed = 0;
    size_t pos = 0;
    while (pos < n) {
        FUZZ_CHECK(!closed); /* nothing may follow a Connection: close answer */
        long l = line_len(p + pos, n - pos);
        FUZZ_CHECK(l >= 13 && starts(p + pos, n - pos, "HTTP/1.1 "));
        const char *s = p + pos + 9;
        FUZZ_CHECK(s[0] >= '1' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' &&
                   s[2] <= '9' && s[3] == ' ');
        int status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
        FUZZ_CHECK(known_status(status));
        for (long i = 13; i < l; i++)
            FUZZ_CHECK(p[pos + (size_t)i] >= 0x20 && p[pos + (size_t)i] < 0x7f);
        pos += (size_t)l + 2;
        if (status == 100) {
            FUZZ_CHECK(starts(p + pos, n - pos, "\r\n"));
            pos += 2;
            continue;
        }
        finals++;
        int n_date = 0, n_server = 0, n_id = 0, n_conn = 0, n_cl = 0, chunked = 0, json = 0;
        int allow = 0, www = 0, conn_close = 0;
        size_t cl = 0;
        for (;;) {
            l = line_len(p + pos, n - pos);
            FUZZ_CHECK(l >= 0);
            if (l == 0) {
                pos += 2;
                break;
            }
            const char *h = p + pos;
            long c = 0;
            while (c < l && is_tchar((unsigned char)h[c]))
                c++;
            FUZZ_CHECK(c > 0 && c + 1 < l && h[c] == ':' && h[c + 1] == ' ');
            const char *v = h + c + 2;
            size_t vl = (size_t)(l - c - 2);
            for (size_t i = 0; i < vl; i++)
                FUZZ_CHECK((unsigned char)v[i] >= 0x20 && v[i] != 0x7f);
#define HDR(name) ((size_t)c == strlen(name) && !strncasecmp(h, name, (size_t)c))
            if (HDR("Date"))
                n_date++;
            if (HDR("Server"))
                n_server++;
            if (HDR("X-Request-Id")) {
                n_id++;
                FUZZ_CHECK(vl >= 1 && vl <= 64);
            }
            if (HDR("Connection")) {
                n_conn++;
                FUZZ_CHECK((vl == 5 && !memcmp(v, "close", 5)) ||
                           (vl == 10 && !memcmp(v, "keep-alive", 10)));
                conn_close = vl == 5;
            }
            if (HDR("Content-Length")) {
                n_cl++;
                FUZZ_CHECK(vl >= 1 && vl <= 12);
                for (size_t i = 0; i < vl; i++) {
                    FUZZ_CHECK(v[i] >= '0' && v[i] <= '9');
                    cl = cl * 10 + (size_t)(v[i] - '0');
                }
            }
            if (HDR("Transfer-Encoding")) {
                FUZZ_CHECK(vl == 7 && !memcmp(v, "chunked", 7));
                chunked = 1;
            }
            if (HDR("Content-Type"))
                json = vl >= 16 && !memcmp(v, "application/json", 16);
            if (HDR("Allow"))
                allow = 1;
            if (HDR("WWW-Authenticate"))
                www = 1;
#undef HDR
            pos += (size_t)l + 2;
        }
        FUZZ_CHECK(n_date == 1 && n_server == 1 && n_id == 1 && n_conn == 1);
        FUZZ_CHECK(n_cl <= 1 && !(n_cl && chunked));
        FUZZ_CHECK(status != 405 || allow);
        FUZZ_CHECK(status != 401 || www);
        /* The body. An answer to HEAD announces a length but has none: then
         * the next response (or the end) follows at once. No body here ever
         * starts like a status line. */
        size_t left = n - pos;
        int headless = left == 0 || starts(p + pos, left, "HTTP/1.1 ");
        if (n_cl && !(headless && cl > 0)) {
            FUZZ_CHECK(left >= cl);
            if (json && cl > 0)
                check_json_body(status, p + pos, cl);
            pos += cl;
        } else if (chunked && !headless) {
            for (;;) {
                l = line_len(p + pos, n - pos);
                FUZZ_CHECK(l >= 1 && l <= 16);
                size_t sz = 0;
                for (long i = 0; i < l; i++) {
                    char ch = p[pos + (size_t)i];
                    int d = ch >= '0' && ch <= '9'   ? ch - '0'
                            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                                     : -1;
                    FUZZ_CHECK(d >= 0);
                    sz = sz * 16 + (size_t)d;
                }
                pos += (size_t)l + 2;
                FUZZ_CHECK(n - pos >= sz + 2 && p[pos + sz] == '\r' && p[pos + sz + 1] == '\n');
                pos += sz + 2;
                if (sz == 0)
                    break;
            }
        } else if (!n_cl && !chunked) {
            /* No framing: an HTTP/1.0 stream, which ends with the connection. */
            FUZZ_CHECK(conn_close);
            pos = n;
        }
        if (conn_close)
            closed = 1;
    }
    return finals;
}

/* ---- one input ------------------------------------------------------------ */

static uint32_t xorshift(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_HTTP_MAX_BYTES)
        return 0;
    fuzz_in in = {data, size};
    uint8_t setup = fuzz_u8(&in);
    uint32_t seed = (uint32_t)fuzz_u16(&in) * 2654435761u + 1u;
    uint8_t max_chunk = fuzz_u8(&in);
    const char *req = (const char *)in.p;
    size_t len = in.n;

    memset(&g_h, 0, sizeof g_h);
    srv_http_config cfg = srv_http_config_default();
    cfg.access_log = 0;
    cfg.on_finish = on_finish;
    if (setup & 1)
        cfg.api_key = API_KEY;
    if (setup & 2) {
        cfg.max_header_bytes = 512;
        cfg.max_uri_bytes = 128;
        cfg.max_headers = 8;
        cfg.max_body_bytes = 256;
        cfg.max_requests_per_conn = 3;
    }
    char err[256];
    srv_http *h = srv_http_create(&g_loop, &cfg, g_routes, sizeof g_routes / sizeof g_routes[0],
                                  &g_h, err, sizeof err);
    FUZZ_CHECK(h != NULL);
    int fd = fcntl(g_pipe[1], F_DUPFD_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    if (srv_conn_adopt(h, fd) < 0)
        close(fd);
    pump(h);

    size_t pos = 0;
    int first = 1;
    while (pos < len && h->conns) {
        size_t want = max_chunk ? 1 + xorshift(&seed) % max_chunk : len - pos;
        if (want > len - pos)
            want = len - pos;
        if ((setup & 8) && g_h.pending) {
            answer_pending();
            pump(h);
            if (!h->conns)
                break;
        }
        size_t took = srv_conn_inject(h->conns, req + pos, want);
        pump(h);
        if (first && (setup & 16))
            srv_http_stop_accepting(h);
        first = 0;
        pos += took;
        if (took == 0) {
            /* The connection does not read: it waits for the late answer,
             * or it is closing (then the rest of the input is never read). */
            if (!g_h.pending)
                break;
            answer_pending();
            pump(h);
        }
    }
    if (!(setup & 32))
        answer_pending();
    pump(h);
    if ((setup & 4) && h->conns) {
        srv_conn_inject(h->conns, NULL, 0);
        pump(h);
    }
    /* Teardown aborts what is left; the loop runs until every handle is
     * closed and everything is freed. */
    srv_http_free(h);
    uv_run(&g_loop, UV_RUN_DEFAULT);
    drain_output();
    FUZZ_CHECK(g_h.pending == NULL);
    FUZZ_CHECK(!uv_loop_alive(&g_loop));
    /* FUZZ_HTTP_TRACE=1 shows what brisk wrote (for looking at one input). */
    if (getenv("FUZZ_HTTP_TRACE"))
        fprintf(stderr,
                "fuzz_http: %zu bytes in, %d dispatched, %d answered, %zu bytes out:\n%.*s\n", len,
                g_h.n_dispatched, g_h.n_finished, g_h.out_len, (int)g_h.out_len,
                g_h.out ? g_h.out : "");
    if (!g_h.out_overflow) {
        int finals = check_output(g_h.out, g_h.out_len);
        FUZZ_CHECK(finals == g_h.n_finished);
    }
    free(g_h.out);
    memset(&g_h, 0, sizeof g_h);
    return 0;
}
