/* test_srv_http.c - the HTTP/1.1 layer driven over real sockets: the server
 * loop runs on a second thread, the test talks raw HTTP through blocking
 * POSIX sockets with generous receive timeouts. Covers parsing strictness,
 * keep-alive, pipelining, routing, auth, limits, timeouts, streaming,
 * aborts (client gone, slow reader, server freed) and draining. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "server/http/srv_http.h"

#define API_KEY "sk-test-123"
#define RECV_TIMEOUT_S 15

/* ---- counters shared with the loop thread ---- */

static _Atomic int n_async_started, n_async_done, n_abort, n_abort_flag_wrong, n_late_finished;
static _Atomic int n_stream_started, n_stream_done;

static double now_s(void) {
    return brisk_now();
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls an atomic counter (1 ms naps) until it reaches target. */
static int wait_count(_Atomic int *v, int target, double timeout_s) {
    double t0 = now_s();
    while (atomic_load(v) < target) {
        if (now_s() - t0 > timeout_s)
            return 0;
        nap_ms(1);
    }
    return 1;
}

/* ---- the test application (runs on the loop thread) ---- */

/* The app pointer handed to srv_http_create. */
typedef struct app_ctx {
    int magic;
    uv_loop_t *loop;
} app_ctx;

static int query_int(const char *q, const char *key, int def) {
    size_t k = strlen(key);
    for (const char *p = q; p && *p;) {
        if (strncmp(p, key, k) == 0 && p[k] == '=')
            return atoi(p + k + 1);
        p = strchr(p, '&');
        if (p)
            p++;
    }
    return def;
}

static void h_hello(srv_req *r) {
    srv_respond(r, 200, "text/plain", "hello", 5, NULL);
}

static void h_echo(srv_req *r) {
    size_t n = 0;
    const char *b = srv_req_body(r, &n);
    char extra[128];
    snprintf(extra, sizeof extra, "X-Query: %.100s\r\n", srv_req_query(r));
    srv_respond(r, 200, "application/octet-stream", b, n, extra);
}

static void h_headers(srv_req *r) {
    size_t n = 0;
    const char *x = srv_req_header(r, "x-test", &n);
    char body[512];
    int len = snprintf(body, sizeof body, "id=%s x=%s n=%zu q=%s m=%s p=%s app=%d", srv_req_id(r),
                       x ? x : "(none)", n, srv_req_query(r), srv_req_method(r), srv_req_path(r),
                       srv_req_app(r) ? ((app_ctx *)srv_req_app(r))->magic : -1);
    srv_req_set_log_fields(r, "headers", 3, 4, 0.001);
    srv_respond(r, 200, "text/plain", body, (size_t)len, NULL);
}

static void h_secret(srv_req *r) {
    srv_respond(r, 200, "text/plain", "secret", 6, NULL);
}

/* A route of another API: its errors go out in the config's error_body shape. */
static void h_other(srv_req *r) {
    srv_respond_error(r, 400, NULL, "field", NULL, "bad %s", "field");
}

static char *other_error_body(int status, const char *type, const char *code, const char *param,
                              const char *message) {
    (void)code;
    char *b = malloc(512);
    if (b)
        snprintf(b, 512,
                 "{\"shape\":\"other\",\"status\":%d,\"type\":\"%s\",\"param\":\"%s\","
                 "\"message\":\"%.200s\"}",
                 status, type ? type : "-", param ? param : "-", message);
    return b;
}

static void h_drop(srv_req *r) {
    srv_req_release(r);
}

typedef struct pend {
    uv_timer_t t;
    srv_req *r;
    int late, aborted, stream, n, i, size;
} pend;

static void pend_free(uv_handle_t *hd) {
    free(hd->data);
}

static void on_abort(srv_req *r, void *user) {
    pend *p = user;
    atomic_fetch_add(&n_abort, 1);
    if (!srv_req_aborted(r))
        atomic_fetch_add(&n_abort_flag_wrong, 1);
    if (p->late) {
        /* Keep r: the timer finishes it later, which must only free it. */
        p->aborted = 1;
        return;
    }
    uv_timer_stop(&p->t);
    uv_close((uv_handle_t *)&p->t, pend_free);
    srv_req_release(r);
}

static void async_fire(uv_timer_t *t) {
    pend *p = t->data;
    if (p->aborted)
        atomic_fetch_add(&n_late_finished, 1);
    srv_respond(p->r, 200, "text/plain", "async", 5, NULL);
    atomic_fetch_add(&n_async_done, 1);
    uv_close((uv_handle_t *)&p->t, pend_free);
}

static void h_async(srv_req *r) {
    pend *p = calloc(1, sizeof *p);
    if (!p) {
        srv_respond_error(r, 500, NULL, NULL, NULL, "oom");
        return;
    }
    p->r = r;
    p->late = query_int(srv_req_query(r), "late", 0);
    uv_timer_init(((app_ctx *)srv_req_app(r))->loop, &p->t);
    p->t.data = p;
    srv_req_on_abort(r, on_abort, p);
    uv_timer_start(&p->t, async_fire, (uint64_t)query_int(srv_req_query(r), "ms", 10), 0);
    atomic_fetch_add(&n_async_started, 1);
}

static void stream_tick(uv_timer_t *t) {
    pend *p = t->data;
    if (p->i < p->n) {
        char small[64];
        const char *data = small;
        size_t len;
        char *big = NULL;
        if (p->size > 0) {
            big = malloc((size_t)p->size);
            if (!big)
                return;
            memset(big, 'x', (size_t)p->size);
            data = big;
            len = (size_t)p->size;
        } else {
            len = (size_t)snprintf(small, sizeof small, "data: %d\n\n", p->i);
        }
        /* After an abort writes fail; the abort callback cleans up. */
        srv_stream_write(p->r, data, len);
        free(big);
        p->i++;
        return;
    }
    srv_stream_end(p->r);
    atomic_fetch_add(&n_stream_done, 1);
    uv_timer_stop(&p->t);
    uv_close((uv_handle_t *)&p->t, pend_free);
}

static void h_stream(srv_req *r) {
    pend *p = calloc(1, sizeof *p);
    if (!p) {
        srv_respond_error(r, 500, NULL, NULL, NULL, "oom");
        return;
    }
    const char *q = srv_req_query(r);
    p->r = r;
    p->stream = 1;
    p->n = query_int(q, "n", 3);
    p->size = query_int(q, "size", 0);
    int ms = query_int(q, "ms", 5);
    uv_timer_init(((app_ctx *)srv_req_app(r))->loop, &p->t);
    p->t.data = p;
    srv_req_on_abort(r, on_abort, p);
    srv_stream_begin(r, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
    uv_timer_start(&p->t, stream_tick, (uint64_t)ms, (uint64_t)ms);
    atomic_fetch_add(&n_stream_started, 1);
}

static const srv_route routes[] = {
    {"GET", "/hello", h_hello, 0},
    {"POST", "/echo", h_echo, 0},
    {"PUT", "/echo", h_echo, 0},
    {"GET", "/headers", h_headers, 0},
    {"POST", "/headers", h_headers, 0},
    {"GET", "/async", h_async, 0},
    {"GET", "/stream", h_stream, 0},
    {"GET", "/secret", h_secret, SRV_ROUTE_AUTH},
    {"POST", "/secret", h_secret, SRV_ROUTE_AUTH},
    {"GET", "/other", h_other, SRV_ROUTE_AUTH | SRV_ROUTE_ERROR_BODY},
    {"GET", "/drop", h_drop, 0},
    {"GET", "/items/*", h_headers, 0},
};
#define N_ROUTES ((int)(sizeof routes / sizeof routes[0]))

/* ---- a server on its own loop thread ---- */

typedef struct tsrv {
    app_ctx app;
    uv_loop_t loop;
    srv_http *h;
    uv_async_t async;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*fn)(struct tsrv *, void *);
    void *arg;
    int done;
    int port;
} tsrv;

static void *loop_main(void *arg) {
    tsrv *ts = arg;
    uv_run(&ts->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void async_cb(uv_async_t *a) {
    tsrv *ts = a->data;
    pthread_mutex_lock(&ts->mu);
    void (*fn)(tsrv *, void *) = ts->fn;
    void *arg = ts->arg;
    ts->fn = NULL;
    pthread_mutex_unlock(&ts->mu);
    if (fn)
        fn(ts, arg);
    pthread_mutex_lock(&ts->mu);
    ts->done = 1;
    pthread_cond_signal(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
}

/* Runs fn(ts, arg) on the loop thread and waits for it. */
static void on_loop(tsrv *ts, void (*fn)(tsrv *, void *), void *arg) {
    pthread_mutex_lock(&ts->mu);
    ts->fn = fn;
    ts->arg = arg;
    ts->done = 0;
    pthread_mutex_unlock(&ts->mu);
    uv_async_send(&ts->async);
    pthread_mutex_lock(&ts->mu);
    while (!ts->done)
        pthread_cond_wait(&ts->cv, &ts->mu);
    pthread_mutex_unlock(&ts->mu);
}

static int tsrv_start(tsrv *ts, const srv_http_config *cfg, const char *host) {
    memset(ts, 0, sizeof *ts);
    ts->app.magic = 42;
    ts->app.loop = &ts->loop;
    char err[256];
    if (uv_loop_init(&ts->loop) != 0)
        return -1;
    ts->h = srv_http_create(&ts->loop, cfg, routes, N_ROUTES, &ts->app, err, sizeof err);
    CHECK(ts->h != NULL, "create: %s", err);
    if (!ts->h)
        return -1;
    if (srv_http_listen(ts->h, host, 0, err, sizeof err) != 0) {
        fprintf(stderr, "listen on %s: %s\n", host, err);
        srv_http_free(ts->h);
        uv_run(&ts->loop, UV_RUN_DEFAULT);
        uv_loop_close(&ts->loop);
        return -1;
    }
    ts->port = srv_http_port(ts->h);
    pthread_mutex_init(&ts->mu, NULL);
    pthread_cond_init(&ts->cv, NULL);
    uv_async_init(&ts->loop, &ts->async, async_cb);
    ts->async.data = ts;
    pthread_create(&ts->thr, NULL, loop_main, ts);
    return 0;
}

static void stop_fn(tsrv *ts, void *arg) {
    srv_http_free(ts->h);
    ts->h = NULL;
    uv_close((uv_handle_t *)&ts->async, NULL);
}

static void tsrv_stop(tsrv *ts) {
    on_loop(ts, stop_fn, NULL);
    pthread_join(ts->thr, NULL);
    /* Every handle must be closed: srv_http_free lets the loop finish. */
    CHECK(uv_loop_close(&ts->loop) == 0, "loop has handles left after srv_http_free");
    pthread_mutex_destroy(&ts->mu);
    pthread_cond_destroy(&ts->cv);
}

static void stats_fn(tsrv *ts, void *arg) {
    srv_http_stats(ts->h, arg);
}

static void stop_accepting_fn(tsrv *ts, void *arg) {
    srv_http_stop_accepting(ts->h);
}

/* ---- a raw HTTP client ---- */

typedef struct cli {
    int fd;
    char *buf;
    size_t len, cap;
} cli;

typedef struct resp {
    int status;
    char *head; /* status line + headers, NUL-terminated */
    char *body;
    size_t body_len;
    int chunks;
} resp;

static int cli_open_af(cli *c, int port, int af, int rcvbuf) {
    memset(c, 0, sizeof *c);
    c->fd = socket(af, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    struct timeval tv = {RECV_TIMEOUT_S, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc;
    if (af == AF_INET6) {
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_port = htons((uint16_t)port);
        a.sin6_addr = in6addr_loopback;
        rc = connect(c->fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = connect(c->fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->cap = 1 << 16;
    c->buf = malloc(c->cap);
    return c->buf ? 0 : -1;
}

static int cli_open(cli *c, int port) {
    return cli_open_af(c, port, AF_INET, 0);
}

static void cli_close(cli *c) {
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
}

static int cli_send(cli *c, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cli_sends(cli *c, const char *s) {
    return cli_send(c, s, strlen(s));
}

/* Reads more bytes; returns the count, 0 at EOF, -1 on error or timeout. */
static ssize_t cli_fill(cli *c) {
    if (c->len == c->cap) {
        char *n = realloc(c->buf, c->cap * 2);
        if (!n)
            return -1;
        c->buf = n;
        c->cap *= 2;
    }
    ssize_t n;
    do {
        n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        c->len += (size_t)n;
    return n;
}

static void cli_consume(cli *c, size_t n) {
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static char *find_crlf(const char *p, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return (char *)p + i;
    return NULL;
}

static char *find_head_end(const char *p, size_t n) {
    for (size_t i = 0; i + 3 < n; i++)
        if (memcmp(p + i, "\r\n\r\n", 4) == 0)
            return (char *)p + i;
    return NULL;
}

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* Value of a response header (case-insensitive) into out; 1 if present. */
static int resp_hdr(const resp *r, const char *name, char *out, size_t cap) {
    size_t n = strlen(name);
    const char *p = r->head ? strstr(r->head, "\r\n") : NULL;
    while (p && p[2]) {
        p += 2;
        const char *e = strstr(p, "\r\n");
        if (!e)
            break;
        if ((size_t)(e - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(e - v);
            if (vl >= cap)
                vl = cap - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return 1;
        }
        p = e;
    }
    return 0;
}

static int resp_hdr_is(const resp *r, const char *name, const char *want) {
    char v[512];
    return resp_hdr(r, name, v, sizeof v) && strcasecmp(v, want) == 0;
}

/* Reads one response. Chunked bodies are decoded strictly (hex size, CRLF
 * after size and data, no trailers); returns -2 on a framing violation. */
static int cli_read_response(cli *c, resp *r) {
    memset(r, 0, sizeof *r);
    char *end;
    while (!(end = find_head_end(c->buf, c->len)))
        if (cli_fill(c) <= 0)
            return -1;
    size_t hlen = (size_t)(end - c->buf) + 4;
    r->head = malloc(hlen + 1);
    memcpy(r->head, c->buf, hlen);
    r->head[hlen] = '\0';
    cli_consume(c, hlen);
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
        return -2;
    if (r->status >= 100 && r->status < 200)
        return 0;
    char v[64];
    if (resp_hdr(r, "Content-Length", v, sizeof v)) {
        size_t n = (size_t)strtoull(v, NULL, 10);
        while (c->len < n)
            if (cli_fill(c) <= 0)
                return -1;
        r->body = malloc(n + 1);
        memcpy(r->body, c->buf, n);
        r->body[n] = '\0';
        r->body_len = n;
        cli_consume(c, n);
        return 0;
    }
    size_t cap = 1024;
    r->body = malloc(cap);
    if (resp_hdr_is(r, "Transfer-Encoding", "chunked")) {
        for (;;) {
            char *e;
            while (!(e = find_crlf(c->buf, c->len)))
                if (cli_fill(c) <= 0)
                    return -1;
            size_t sz = 0;
            if (e == c->buf)
                return -2;
            for (char *p = c->buf; p < e; p++) {
                int d = (*p >= '0' && *p <= '9')   ? *p - '0'
                        : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
                        : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10
                                                   : -1;
                if (d < 0)
                    return -2;
                sz = sz * 16 + (size_t)d;
            }
            cli_consume(c, (size_t)(e - c->buf) + 2);
            while (c->len < sz + 2)
                if (cli_fill(c) <= 0)
                    return -1;
            if (c->buf[sz] != '\r' || c->buf[sz + 1] != '\n')
                return -2;
            if (sz == 0) {
                cli_consume(c, 2);
                break;
            }
            while (r->body_len + sz + 1 > cap)
                cap *= 2;
            r->body = realloc(r->body, cap);
            memcpy(r->body + r->body_len, c->buf, sz);
            r->body_len += sz;
            r->chunks++;
            cli_consume(c, sz + 2);
        }
    } else {
        /* No framing: the body ends with the connection (HTTP/1.0 stream). */
        ssize_t n;
        while ((n = cli_fill(c)) > 0) {
        }
        if (n < 0)
            return -1;
        r->body = realloc(r->body, c->len + 1);
        memcpy(r->body, c->buf, c->len);
        r->body_len = c->len;
        cli_consume(c, c->len);
    }
    r->body[r->body_len] = '\0';
    return 0;
}

/* 1 if the server closed the connection (EOF or reset) with nothing more. */
static int cli_closed(cli *c) {
    if (c->len)
        return 0;
    char b[256];
    ssize_t n;
    do {
        n = recv(c->fd, b, sizeof b, 0);
    } while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* One request on a fresh connection; returns the status (or -1). */
static int one_shot(int port, const char *req, resp *out) {
    cli c;
    if (cli_open(&c, port) != 0)
        return -1;
    cli_sends(&c, req);
    resp r;
    int rc = cli_read_response(&c, &r);
    int st = rc == 0 ? r.status : -1;
    if (out)
        *out = r;
    else
        resp_free(&r);
    cli_close(&c);
    return st;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* ---- tests ---- */

static void test_basic(int port) {
    resp r;
    CHECK(one_shot(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r) == 200, "GET");
    CHECK(r.body_len == 5 && memcmp(r.body, "hello", 5) == 0, "body %s", r.body);
    CHECK(resp_hdr_is(&r, "Server", "brisk"), "Server header");
    CHECK(resp_hdr_is(&r, "Content-Length", "5"), "Content-Length");
    CHECK(resp_hdr_is(&r, "Connection", "keep-alive"), "keep-alive");
    char v[128];
    /* A fresh random id: 32 hex digits. */
    CHECK(resp_hdr(&r, "X-Request-Id", v, sizeof v) && strlen(v) == 32 &&
              strspn(v, "0123456789abcdef") == 32,
          "id %s", v);
    CHECK(resp_hdr(&r, "Date", v, sizeof v) && strstr(v, "GMT"), "Date");
    resp_free(&r);

    /* Accessors: header lookup is case-insensitive, path and query split,
     * the client's X-Request-Id is honoured, the app pointer comes back. */
    CHECK(one_shot(port,
                   "GET /headers?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-TEST:  value 1  \r\n"
                   "X-Request-Id: my-id-7\r\n\r\n",
                   &r) == 200,
          "headers");
    CHECK(strstr(r.body, "id=my-id-7 x=value 1 n=7 q=a=1&b=2 m=GET p=/headers app=42") != NULL,
          "accessors: %s", r.body);
    CHECK(resp_hdr_is(&r, "X-Request-Id", "my-id-7"), "echoed id");
    resp_free(&r);
    /* An X-Request-Id that is too long is replaced. */
    char req[512];
    char longid[80];
    memset(longid, 'a', 65);
    longid[65] = '\0';
    snprintf(req, sizeof req, "GET /headers HTTP/1.1\r\nX-Request-Id: %s\r\n\r\n", longid);
    CHECK(one_shot(port, req, &r) == 200 && !strstr(r.body, longid) && strstr(r.body, "x=(none)"),
          "long id replaced: %s", r.body);
    resp_free(&r);

    /* Echo with Content-Length, then a chunked request body. */
    CHECK(one_shot(port,
                   "POST /echo?z=9 HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world",
                   &r) == 200,
          "echo");
    CHECK(r.body_len == 11 && memcmp(r.body, "hello world", 11) == 0, "echo body");
    CHECK(resp_hdr_is(&r, "X-Query", "z=9"), "query");
    resp_free(&r);
    CHECK(one_shot(port,
                   "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                   &r) == 200,
          "chunked echo");
    CHECK(r.body_len == 11 && memcmp(r.body, "hello world", 11) == 0, "chunked body");
    resp_free(&r);

    /* HTTP/1.0 without keep-alive: answered, then closed. */
    cli c;
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.0\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "1.0");
    CHECK(resp_hdr_is(&r, "Connection", "close"), "1.0 close");
    CHECK(cli_closed(&c), "1.0 closed");
    resp_free(&r);
    cli_close(&c);

    /* HTTP/1.0 asking for keep-alive gets it. */
    CHECK(cli_open(&c, port) == 0, "connect");
    for (int i = 0; i < 2; i++) {
        cli_sends(&c, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        CHECK(cli_read_response(&c, &r) == 0 && r.status == 200 &&
                  resp_hdr_is(&r, "Connection", "keep-alive"),
              "1.0 keep-alive %d", i);
        resp_free(&r);
    }
    cli_close(&c);

    /* An upgrade request is answered as a plain request, then closed. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200 &&
              resp_hdr_is(&r, "Connection", "close") && cli_closed(&c),
          "upgrade ignored, then close");
    resp_free(&r);
    cli_close(&c);

    /* HEAD: the error head announces its length, no body follows, and the
     * connection stays usable. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "HEAD /echo HTTP/1.1\r\n\r\nHEAD /hello HTTP/1.1\r\n\r\n"
                  "GET /hello HTTP/1.1\r\n\r\n");
    {
        char *end;
        while (!(end = find_head_end(c.buf, c.len)))
            if (cli_fill(&c) <= 0)
                break;
        CHECK(end && strncmp(c.buf, "HTTP/1.1 405 ", 13) == 0, "HEAD on a POST route -> 405");
        if (end)
            cli_consume(&c, (size_t)(end - c.buf) + 4);
        /* A GET route answers HEAD: its head (with the GET body's length), no body. */
        while (!(end = find_head_end(c.buf, c.len)))
            if (cli_fill(&c) <= 0)
                break;
        CHECK(end && strncmp(c.buf, "HTTP/1.1 200 ", 13) == 0 &&
                  strstr(c.buf, "Content-Length: 5\r\n") != NULL,
              "HEAD on a GET route -> 200, Content-Length 5");
        if (end)
            cli_consume(&c, (size_t)(end - c.buf) + 4);
    }
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200 && strcmp(r.body, "hello") == 0,
          "after HEAD, no stray body");
    resp_free(&r);
    cli_close(&c);

    /* Expect: 100-continue gets an interim response before the body. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(
        &c, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 100, "100 continue (%d)", r.status);
    resp_free(&r);
    cli_sends(&c, "abc");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200 && r.body_len == 3, "after 100");
    resp_free(&r);
    cli_close(&c);
}

static void test_keepalive_pipelining(int port) {
    cli c;
    resp r;
    CHECK(cli_open(&c, port) == 0, "connect");
    for (int i = 0; i < 2; i++) {
        cli_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "keep-alive request %d", i);
        resp_free(&r);
    }
    /* Three requests in one send, the first answered later by a timer: the
     * answers come in order. */
    cli_sends(&c, "GET /async?ms=100 HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\npipe");
    const char *want[3] = {"async", "hello", "pipe"};
    for (int i = 0; i < 3; i++) {
        int rc = cli_read_response(&c, &r);
        CHECK(rc == 0 && r.status == 200 && r.body && strcmp(r.body, want[i]) == 0,
              "pipelined %d: rc %d body %s", i, rc, r.body ? r.body : "(null)");
        resp_free(&r);
    }
    /* Pipelined after Connection: close: only the first is answered. */
    cli_sends(&c, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\nGET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "close request");
    CHECK(resp_hdr_is(&r, "Connection", "close"), "Connection: close echoed");
    resp_free(&r);
    CHECK(cli_closed(&c), "closed after Connection: close");
    cli_close(&c);

    /* Random pipelines: N requests of random kinds in pieces of random size,
     * with random bodies; each answer matches its request, in order. */
    for (int round = 0; round < 20; round++) {
        CHECK(cli_open(&c, port) == 0, "connect");
        int n = 1 + (int)(rnd() % 6);
        size_t cap = 1 << 20, len = 0;
        char *all = malloc(cap);
        char bodies[6][2100];
        size_t blen[6];
        for (int i = 0; i < n; i++) {
            blen[i] = rnd() % 2000;
            for (size_t k = 0; k < blen[i]; k++)
                bodies[i][k] = (char)(rnd() & 0xff);
            if (rnd() % 2) {
                len +=
                    (size_t)snprintf(all + len, cap - len,
                                     "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", blen[i]);
                memcpy(all + len, bodies[i], blen[i]);
                len += blen[i];
            } else {
                len +=
                    (size_t)snprintf(all + len, cap - len,
                                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
                size_t off = 0;
                while (off < blen[i]) {
                    size_t piece = 1 + rnd() % 300;
                    if (piece > blen[i] - off)
                        piece = blen[i] - off;
                    len += (size_t)snprintf(all + len, cap - len, "%zx\r\n", piece);
                    memcpy(all + len, bodies[i] + off, piece);
                    len += piece;
                    memcpy(all + len, "\r\n", 2);
                    len += 2;
                    off += piece;
                }
                memcpy(all + len, "0\r\n\r\n", 5);
                len += 5;
            }
        }
        size_t off = 0;
        while (off < len) {
            size_t piece = 1 + rnd() % 700;
            if (piece > len - off)
                piece = len - off;
            cli_send(&c, all + off, piece);
            off += piece;
        }
        free(all);
        for (int i = 0; i < n; i++) {
            int rc = cli_read_response(&c, &r);
            CHECK(rc == 0 && r.status == 200 && r.body_len == blen[i] &&
                      memcmp(r.body, bodies[i], blen[i]) == 0,
                  "random pipeline round %d request %d/%d (rc %d, %zu vs %zu bytes)", round, i, n,
                  rc, r.body_len, blen[i]);
            resp_free(&r);
        }
        cli_close(&c);
    }
}

static int body_has_type(const resp *r, const char *type) {
    char want[96];
    snprintf(want, sizeof want, "\"type\":\"%s\"", type);
    return r->body && strstr(r->body, "{\"error\":{\"message\":") == r->body &&
           strstr(r->body, want) && strstr(r->body, "\"param\":null") &&
           strstr(r->body, "\"code\":null");
}

static void test_routing_auth(int port) {
    resp r;
    cli c;
    /* 404 keeps the connection alive when there is no body. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /nope HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 404, "404");
    CHECK(body_has_type(&r, "invalid_request_error"), "404 body %s", r.body);
    CHECK(resp_hdr_is(&r, "Content-Type", "application/json"), "json");
    CHECK(resp_hdr_is(&r, "Connection", "keep-alive"), "404 keep-alive");
    resp_free(&r);
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "after 404");
    resp_free(&r);
    cli_close(&c);
    /* A refused request with a body is answered without reading it, then closed. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "POST /nope HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 404, "404 with body");
    CHECK(resp_hdr_is(&r, "Connection", "close"), "404 with body closes");
    CHECK(cli_closed(&c), "closed");
    resp_free(&r);
    cli_close(&c);

    CHECK(one_shot(port, "POST /hello HTTP/1.1\r\n\r\n", &r) == 405, "405");
    CHECK(resp_hdr_is(&r, "Allow", "GET, HEAD"), "Allow GET, HEAD");
    CHECK(body_has_type(&r, "invalid_request_error"), "405 body");
    resp_free(&r);
    CHECK(one_shot(port, "DELETE /echo HTTP/1.1\r\n\r\n", &r) == 405, "405 echo");
    CHECK(resp_hdr_is(&r, "Allow", "POST, PUT"), "Allow POST, PUT");
    resp_free(&r);

    const char *bad[] = {
        "GET /secret HTTP/1.1\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: Bearer sk-test-12\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: Bearer sk-test-1234\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: Bearer sk-test-124\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: Basic sk-test-123\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: Bearer\r\n\r\n",
        "GET /secret HTTP/1.1\r\nAuthorization: sk-test-123\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(one_shot(port, bad[i], &r) == 401, "401 case %zu", i);
        CHECK(resp_hdr_is(&r, "WWW-Authenticate", "Bearer"), "WWW-Authenticate %zu", i);
        CHECK(body_has_type(&r, "authentication_error"), "401 body %s", r.body);
        CHECK(!strstr(r.head, API_KEY) && !strstr(r.body, API_KEY), "key leaked");
        resp_free(&r);
    }
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\nAuthorization: Bearer " API_KEY "\r\n\r\n", &r) ==
              200,
          "right key");
    CHECK(strcmp(r.body, "secret") == 0, "secret body");
    resp_free(&r);
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\nauthorization: bearer  " API_KEY "\r\n\r\n",
                   NULL) == 200,
          "scheme case-insensitive");
    /* Unauthenticated body: refused before reading it. */
    CHECK(one_shot(port, "POST /secret HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", NULL) == 401,
          "401 with body");
    /* Routes without the flag need no key. */
    CHECK(one_shot(port, "GET /hello HTTP/1.1\r\n\r\n", NULL) == 200, "public route");
    /* The key as x-api-key (Anthropic's header) when no bearer token is given. */
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\nx-api-key: " API_KEY "\r\n\r\n", NULL) == 200,
          "x-api-key");
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\nX-Api-Key: sk-test-124\r\n\r\n", NULL) == 401,
          "a wrong x-api-key");
    CHECK(
        one_shot(port,
                 "GET /secret HTTP/1.1\r\nAuthorization: Bearer sk-test-124\r\nx-api-key: " API_KEY
                 "\r\n\r\n",
                 NULL) == 401,
        "a bearer token is the key presented, even beside x-api-key");
    /* A route flagged SRV_ROUTE_ERROR_BODY answers every error in the
     * config's shape, the layer's 401 included; the others keep OpenAI's. */
    CHECK(one_shot(port, "GET /other HTTP/1.1\r\n\r\n", &r) == 401, "other: 401");
    CHECK(r.body && strstr(r.body, "{\"shape\":\"other\",\"status\":401,") &&
              !strstr(r.body, "\"error\":"),
          "other: the 401 in its shape: %s", r.body);
    resp_free(&r);
    CHECK(one_shot(port, "GET /other HTTP/1.1\r\nx-api-key: " API_KEY "\r\n\r\n", &r) == 400,
          "other: the handler's 400");
    CHECK(r.body && strstr(r.body, "\"status\":400,\"type\":\"-\",\"param\":\"field\","
                                   "\"message\":\"bad field\"}"),
          "other: the handler's error in its shape: %s", r.body);
    resp_free(&r);
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\n\r\n", &r) == 401 && r.body &&
              strstr(r.body, "{\"error\":"),
          "unflagged routes keep OpenAI's shape");
    resp_free(&r);
    /* Errors found before the route is matched go by the path's routes. */
    CHECK(one_shot(port, "GET /other HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", &r) == 413 &&
              r.body && strstr(r.body, "{\"shape\":\"other\",\"status\":413,"),
          "other: a 413 on Content-Length in its shape: %s", r.body);
    resp_free(&r);
    CHECK(one_shot(port, "POST /other HTTP/1.1\r\n\r\n", &r) == 405 && r.body &&
              strstr(r.body, "{\"shape\":\"other\",\"status\":405,") &&
              resp_hdr_is(&r, "Allow", "GET, HEAD"),
          "other: a 405 in its shape, with Allow: %s", r.body);
    resp_free(&r);
}

/* Sends a hostile request and expects `status`, Connection: close and EOF. */
static void expect_error_close(int port, const char *req, size_t len, int status,
                               const char *what) {
    cli c;
    resp r;
    if (cli_open(&c, port) != 0) {
        CHECK(0, "connect for %s", what);
        return;
    }
    cli_send(&c, req, len);
    int rc = cli_read_response(&c, &r);
    CHECK(rc == 0 && r.status == status, "%s: rc %d status %d, want %d", what, rc, r.status,
          status);
    if (rc == 0) {
        CHECK(resp_hdr_is(&r, "Connection", "close"), "%s: Connection: close", what);
        CHECK(r.body && strstr(r.body, "{\"error\":"), "%s: error body", what);
        CHECK(cli_closed(&c), "%s: connection closed", what);
    }
    resp_free(&r);
    cli_close(&c);
}

#define EXPECT_ERR(port, s, st, what) expect_error_close(port, s, sizeof(s) - 1, st, what)

/* Prefix routes and CORS (a server with two allowed origins and a key). */
static void test_cors_prefix(int port) {
    resp r;
    char v[512];
    /* "/items/" + "*": any longer path, never the bare prefix. */
    CHECK(one_shot(port, "GET /items/org/name%2Fx?q=1 HTTP/1.1\r\n\r\n", &r) == 200 &&
              strstr(r.body, "p=/items/org/name%2Fx"),
          "prefix route: %s", r.body);
    resp_free(&r);
    CHECK(one_shot(port, "GET /items/ HTTP/1.1\r\n\r\n", &r) == 404, "bare prefix: 404");
    resp_free(&r);
    CHECK(one_shot(port, "GET /itemsX HTTP/1.1\r\n\r\n", &r) == 404, "no slash: 404");
    resp_free(&r);
    CHECK(one_shot(port, "POST /items/a HTTP/1.1\r\n\r\n", &r) == 405 &&
              resp_hdr_is(&r, "Allow", "GET, HEAD"),
          "prefix route: 405 with Allow");
    resp_free(&r);
    /* Preflight from an allowed origin: 204 before auth, methods of the path. */
    CHECK(one_shot(port,
                   "OPTIONS /secret HTTP/1.1\r\nOrigin: https://b.example\r\n"
                   "Access-Control-Request-Method: POST\r\n"
                   "Access-Control-Request-Headers: authorization, content-type\r\n\r\n",
                   &r) == 204,
          "preflight 204");
    CHECK(resp_hdr_is(&r, "Access-Control-Allow-Origin", "https://b.example") &&
              resp_hdr_is(&r, "Access-Control-Allow-Methods", "GET, POST, HEAD") &&
              resp_hdr_is(&r, "Access-Control-Allow-Headers", "authorization, content-type") &&
              resp_hdr_is(&r, "Vary", "Origin"),
          "preflight headers");
    resp_free(&r);
    /* A header list that is not plain names is not echoed. */
    CHECK(one_shot(port,
                   "OPTIONS /hello HTTP/1.1\r\nOrigin: https://a.example\r\n"
                   "Access-Control-Request-Method: GET\r\n"
                   "Access-Control-Request-Headers: x-a;evil\r\n\r\n",
                   &r) == 204 &&
              resp_hdr_is(&r, "Access-Control-Allow-Headers",
                          "Authorization, Content-Type, X-Request-Id"),
          "preflight: odd header list replaced");
    resp_free(&r);
    CHECK(one_shot(port,
                   "OPTIONS /hello HTTP/1.1\r\nOrigin: https://c.example\r\n"
                   "Access-Control-Request-Method: GET\r\n\r\n",
                   &r) == 403 &&
              strstr(r.body, "\"code\":\"cors_origin_not_allowed\"") &&
              !resp_hdr(&r, "Access-Control-Allow-Origin", v, sizeof v),
          "preflight from another origin: 403");
    resp_free(&r);
    CHECK(one_shot(port,
                   "OPTIONS /nope HTTP/1.1\r\nOrigin: https://a.example\r\n"
                   "Access-Control-Request-Method: GET\r\n\r\n",
                   &r) == 404,
          "preflight to an unknown path: 404");
    resp_free(&r);
    /* Simple requests: the allowed origin gets the headers (errors too), others none. */
    CHECK(one_shot(port, "GET /hello HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n", &r) == 200 &&
              resp_hdr_is(&r, "Access-Control-Allow-Origin", "https://a.example"),
          "allowed origin: Allow-Origin");
    CHECK(resp_hdr(&r, "Access-Control-Expose-Headers", v, sizeof v) && strstr(v, "X-Request-Id") &&
              strstr(v, "Retry-After") && strstr(v, "x-ratelimit-remaining-tokens"),
          "exposed headers: %s", v);
    resp_free(&r);
    CHECK(one_shot(port, "GET /secret HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n", &r) == 401 &&
              resp_hdr_is(&r, "Access-Control-Allow-Origin", "https://a.example"),
          "a 401 carries the CORS headers too");
    resp_free(&r);
    CHECK(one_shot(port, "GET /hello HTTP/1.1\r\nOrigin: https://a.example.evil\r\n\r\n", &r) ==
                  200 &&
              !resp_hdr(&r, "Access-Control-Allow-Origin", v, sizeof v),
          "another origin: no CORS headers");
    resp_free(&r);
    /* OPTIONS without the preflight headers is an ordinary request: 405. */
    CHECK(one_shot(port, "OPTIONS /hello HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n", &r) == 405,
          "OPTIONS, not a preflight: 405");
    resp_free(&r);
}

static void test_malformed(int port) {
    CHECK(srv_http_parser_is_strict() == 1, "parser must be strict (no lenient flags)");
    EXPECT_ERR(port, "GARBAGE\r\n\r\n", 400, "bad method");
    EXPECT_ERR(port, "GET /hello HTTP/1.1 extra\r\n\r\n", 400, "bad request line");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\nBad Header: v\r\n\r\n", 400, "space in header name");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400, "control char in value");
    EXPECT_ERR(port,
               "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
               "0\r\n\r\n",
               400, "Content-Length with Transfer-Encoding");
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
               400, "duplicate Content-Length");
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nContent-Length: 5x\r\n\r\nhello", 400,
               "bad Content-Length");
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
               "invalid chunk size");
    EXPECT_ERR(port,
               "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
               400, "chunk data without CRLF");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\nX-Bad : v\r\n\r\n", 400, "space before colon");
    /* An empty field name (found by fuzz_http: llhttp lets it through). */
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\n: v\r\n\r\n", 400, "empty header name");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\nX: a\r\n:\r\n\r\n", 400, "empty header line");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\nHost: x\n\n", 400, "bare LF");
    EXPECT_ERR(port, "GET /hello HTTP/x.1\r\n\r\n", 400, "malformed version");
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400,
               "non-chunked Transfer-Encoding");
    /* Obsolete line folding is refused (RFC 9112 5.2 allows it): llhttp
     * would unfold it, and a proxy in front may not, "Transfer-Encoding:" with
     * an empty first line and a folded "chunked" being the classic case. */
    resp r;
    EXPECT_ERR(port, "GET /headers HTTP/1.1\r\nX-Test: a\r\n folded\r\n\r\n", 400, "obs-fold");
    EXPECT_ERR(port, "GET /headers HTTP/1.1\r\nX-Test: a\r\n\tfolded\r\n\r\n", 400,
               "obs-fold with a tab");
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400,
               "obs-fold after an empty value");
    EXPECT_ERR(port, "GET /headers HTTP/1.1\r\n X-Test: a\r\n\r\n", 400,
               "whitespace before the first header");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\nX: a\r\n\n", 400, "bare LF ending the head");
    EXPECT_ERR(port, "GET /hello HTTP/1.1\r\n: a\r\n\r\n", 400, "empty header name");
    /* A body's bytes are not header lines: a newline and a space there are data. */
    CHECK(one_shot(port, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\n\r\n x", &r) == 200,
          "CR LF SP inside a body");
    resp_free(&r);
    EXPECT_ERR(port, "GET /hello HTTP/2.0\r\n\r\n", 505, "HTTP/2.0");
    EXPECT_ERR(port, "GET /hello HTTP/1.2\r\n\r\n", 505, "HTTP/1.2");
    /* llhttp 8 parses RTSP and ICE request lines: refused, not routed. */
    EXPECT_ERR(port, "OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n", 400, "RTSP/1.0");
    EXPECT_ERR(port, "GET /hello ICE/1.0\r\n\r\n", 400, "ICE/1.0");
    EXPECT_ERR(port, "GET /he llo HTTP/1.1\r\n\r\n", 400, "space in target");

    /* Random garbage: the server answers 400 or just closes, and lives on. */
    for (int i = 0; i < 50; i++) {
        char junk[256];
        size_t n = 1 + rnd() % sizeof junk;
        for (size_t k = 0; k < n; k++)
            junk[k] = (char)(rnd() & 0xff);
        if (i % 2)
            memcpy(junk, "GET /", n < 5 ? n : 5);
        junk[n - 1] = '\n';
        cli c;
        if (cli_open(&c, port) != 0)
            continue;
        cli_send(&c, junk, n);
        cli_sends(&c, "\r\n\r\n");
        if (cli_read_response(&c, &r) == 0)
            CHECK(r.status == 400 || r.status == 404 || r.status == 405 || r.status == 431 ||
                      r.status == 414 || r.status == 505 || r.status == 413,
                  "garbage %d -> %d", i, r.status);
        resp_free(&r);
        cli_close(&c);
    }
    CHECK(one_shot(port, "GET /hello HTTP/1.1\r\n\r\n", NULL) == 200, "alive after garbage");
}

static void test_limits(int port) {
    /* 413 from Content-Length: answered without reading the body. */
    EXPECT_ERR(port, "POST /echo HTTP/1.1\r\nContent-Length: 70000\r\n\r\n", 413, "413 declared");
    /* 413 from a chunked body that grows past the limit (64 KiB here). */
    {
        size_t cap = 200000, len = 0;
        char *b = malloc(cap);
        len +=
            (size_t)snprintf(b, cap, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < 20; i++) {
            len += (size_t)snprintf(b + len, cap - len, "1000\r\n");
            memset(b + len, 'a', 4096);
            len += 4096;
            memcpy(b + len, "\r\n", 2);
            len += 2;
        }
        expect_error_close(port, b, len, 413, "413 chunked");
        free(b);
    }
    /* A body right at the limit is fine. */
    {
        size_t n = 64 * 1024;
        char *b = malloc(n + 128);
        int h = snprintf(b, 128, "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", n);
        memset(b + h, 'z', n);
        cli c;
        resp r;
        CHECK(cli_open(&c, port) == 0, "connect");
        cli_send(&c, b, (size_t)h + n);
        CHECK(cli_read_response(&c, &r) == 0 && r.status == 200 && r.body_len == n,
              "body at limit");
        resp_free(&r);
        cli_close(&c);
        free(b);
    }
    /* 414: a target over 8 KiB. */
    {
        char *b = malloc(10000);
        int n = snprintf(b, 10000, "GET /");
        memset(b + n, 'p', 9000);
        n += 9000;
        n += snprintf(b + n, (size_t)(10000 - n), " HTTP/1.1\r\n\r\n");
        expect_error_close(port, b, (size_t)n, 414, "414");
        free(b);
    }
    /* 431: too many headers, then too many header bytes. */
    {
        char *b = malloc(8192);
        int n = snprintf(b, 8192, "GET /hello HTTP/1.1\r\n");
        for (int i = 0; i < 101; i++)
            n += snprintf(b + n, (size_t)(8192 - n), "X-H%d: v\r\n", i);
        n += snprintf(b + n, (size_t)(8192 - n), "\r\n");
        expect_error_close(port, b, (size_t)n, 431, "431 count");
        free(b);
        /* 100 headers are allowed. */
        b = malloc(8192);
        n = snprintf(b, 8192, "GET /hello HTTP/1.1\r\n");
        for (int i = 0; i < 100; i++)
            n += snprintf(b + n, (size_t)(8192 - n), "X-H%d: v\r\n", i);
        n += snprintf(b + n, (size_t)(8192 - n), "\r\n");
        cli c;
        resp r;
        CHECK(cli_open(&c, port) == 0, "connect");
        cli_send(&c, b, (size_t)n);
        CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "100 headers ok");
        resp_free(&r);
        cli_close(&c);
        free(b);
        b = malloc(40000);
        n = snprintf(b, 40000, "GET /hello HTTP/1.1\r\nX-Big: ");
        memset(b + n, 'v', 33 * 1024);
        n += 33 * 1024;
        n += snprintf(b + n, (size_t)(40000 - n), "\r\n\r\n");
        expect_error_close(port, b, (size_t)n, 431, "431 bytes");
        free(b);
    }
}

static void test_streaming(int port) {
    resp r;
    cli c;
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=5&ms=5 HTTP/1.1\r\n\r\n");
    int rc = cli_read_response(&c, &r);
    CHECK(rc == 0 && r.status == 200, "stream rc %d", rc);
    CHECK(resp_hdr_is(&r, "Transfer-Encoding", "chunked"), "chunked");
    CHECK(resp_hdr_is(&r, "Cache-Control", "no-cache"), "extra header");
    CHECK(resp_hdr_is(&r, "Content-Type", "text/event-stream"), "content type");
    CHECK(!resp_hdr(&r, "Content-Length", (char[8]){0}, 8), "no Content-Length");
    CHECK(r.chunks == 5, "5 chunks, got %d", r.chunks);
    CHECK(r.body && strcmp(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n") == 0,
          "stream body %s", r.body);
    resp_free(&r);
    /* The connection is reusable after a stream. */
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "after stream");
    resp_free(&r);
    cli_close(&c);
    /* HTTP/1.0 has no chunked coding: raw bytes, then close. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=3&ms=2 HTTP/1.0\r\n\r\n");
    rc = cli_read_response(&c, &r);
    CHECK(rc == 0 && r.status == 200 && !resp_hdr(&r, "Transfer-Encoding", (char[8]){0}, 8) &&
              resp_hdr_is(&r, "Connection", "close") && r.body &&
              strcmp(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\n") == 0,
          "1.0 stream rc %d body %s", rc, r.body ? r.body : "");
    resp_free(&r);
    cli_close(&c);
}

static void active_fn(tsrv *ts, void *arg) {
    *(int *)arg = srv_http_n_active(ts->h);
}

static int n_active(tsrv *ts) {
    int n = -1;
    on_loop(ts, active_fn, &n);
    return n;
}

static void test_aborts(tsrv *ts) {
    int port = ts->port;
    cli c;
    /* Every request so far (async and streamed ones included) was finished
     * before its connection closed: no abort callback may have run. */
    CHECK(atomic_load(&n_abort) == 0, "aborts before the abort tests: %d", atomic_load(&n_abort));
    CHECK(atomic_load(&n_async_done) >= 1 && atomic_load(&n_stream_done) >= 2,
          "async and stream routes ran");
    /* Client gone while an async request waits: one abort callback. */
    int a0 = atomic_load(&n_abort), s0 = atomic_load(&n_async_started);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=30000 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "async dispatched");
    CHECK(n_active(ts) == 1, "one active request");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "abort on disconnect");
    nap_ms(50);
    CHECK(atomic_load(&n_abort) == a0 + 1, "exactly one abort");
    CHECK(n_active(ts) == 0, "no active request after abort");

    /* The app finishes after the abort: srv_respond only frees. */
    a0 = atomic_load(&n_abort);
    s0 = atomic_load(&n_async_started);
    int l0 = atomic_load(&n_late_finished);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=300&late=1 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "late dispatched");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "late abort");
    CHECK(wait_count(&n_late_finished, l0 + 1, 10), "finished after abort");

    /* Client gone during a stream. */
    a0 = atomic_load(&n_abort);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=100000&ms=5 HTTP/1.1\r\n\r\n");
    char b[256];
    CHECK(recv(c.fd, b, sizeof b, 0) > 0, "stream started");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "abort during stream");
    nap_ms(50);
    CHECK(atomic_load(&n_abort) == a0 + 1, "exactly one stream abort");

    /* A client that does not read its stream: closed once the write queue
     * passes max_write_queue_bytes (256 KiB here). */
    a0 = atomic_load(&n_abort);
    CHECK(cli_open_af(&c, port, AF_INET, 4096) == 0, "connect");
    cli_sends(&c, "GET /stream?n=1000000&ms=1&size=65536 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_abort, a0 + 1, 60), "slow reader aborted");
    cli_close(&c);

    /* A live request released by the app: the client sees a close. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /drop HTTP/1.1\r\n\r\n");
    CHECK(cli_closed(&c), "released request closes the connection");
    cli_close(&c);
    CHECK(atomic_load(&n_abort_flag_wrong) == 0, "srv_req_aborted inside the abort callback");
    CHECK(n_active(ts) == 0, "nothing active");
}

static void test_timeouts(int port) {
    cli c;
    resp r;
    /* The head must arrive within head_timeout_ms (300 ms here). */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    double t0 = now_s();
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408, "head timeout 408 (%d)", r.status);
    CHECK(now_s() - t0 > 0.15, "head timeout not early");
    CHECK(resp_hdr_is(&r, "Connection", "close") && cli_closed(&c), "head timeout closes");
    resp_free(&r);
    cli_close(&c);
    /* A connection that sends nothing at all. */
    CHECK(cli_open(&c, port) == 0, "connect");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408 && cli_closed(&c), "silent client 408");
    resp_free(&r);
    cli_close(&c);
    /* Body bytes stall. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408, "body timeout 408 (%d)", r.status);
    CHECK(body_has_type(&r, "invalid_request_error") && cli_closed(&c), "body timeout closes");
    resp_free(&r);
    cli_close(&c);
    /* An idle keep-alive connection is closed silently. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "before idle");
    resp_free(&r);
    t0 = now_s();
    CHECK(cli_closed(&c), "idle connection closed");
    CHECK(now_s() - t0 > 0.15, "idle close not early");
    cli_close(&c);
    /* Trickling a body keeps it alive: the body timer is per gap. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\n");
    for (int i = 0; i < 4; i++) {
        nap_ms(50);
        cli_sends(&c, "x");
    }
    CHECK(cli_read_response(&c, &r) == 0 && (r.status == 200 || r.status == 408),
          "trickled body (%d)", r.status);
    resp_free(&r);
    cli_close(&c);
}

static void test_conn_limits(tsrv *ts) {
    int port = ts->port;
    cli a, b, c;
    resp r;
    /* max_requests_per_conn = 2: the second response closes. */
    CHECK(cli_open(&a, port) == 0, "connect");
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && resp_hdr_is(&r, "Connection", "keep-alive"), "first");
    resp_free(&r);
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && r.status == 200 &&
              resp_hdr_is(&r, "Connection", "close"),
          "second carries close");
    resp_free(&r);
    CHECK(cli_closed(&a), "closed after max requests");
    cli_close(&a);

    /* max_connections = 2: a third one is answered 503 and closed. The two
     * live ones are made to have been accepted by a request each. */
    srv_http_stats_t st;
    double t0 = now_s();
    do {
        on_loop(ts, stats_fn, &st);
    } while (st.open_connections > 0 && now_s() - t0 < 10 && (nap_ms(5), 1));
    CHECK(st.open_connections == 0, "connections drained (%d)", st.open_connections);
    CHECK(cli_open(&a, port) == 0 && cli_open(&b, port) == 0, "connect 2");
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    cli_sends(&b, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && r.status == 200, "a");
    resp_free(&r);
    CHECK(cli_read_response(&b, &r) == 0 && r.status == 200, "b");
    resp_free(&r);
    CHECK(cli_open(&c, port) == 0, "connect 3");
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 503, "503 (%d)", r.status);
    CHECK(resp_hdr_is(&r, "Connection", "close") && body_has_type(&r, "server_error"), "503 close");
    CHECK(cli_closed(&c), "503 connection closed");
    resp_free(&r);
    cli_close(&c);
    on_loop(ts, stats_fn, &st);
    CHECK(st.rejected_connections >= 1 && st.open_connections == 2, "stats: rejected %llu open %d",
          (unsigned long long)st.rejected_connections, st.open_connections);

    /* Draining: an idle keep-alive connection is closed, an in-flight
     * request finishes with Connection: close, new connections fail. */
    int s0 = atomic_load(&n_async_started);
    cli_sends(&b, "GET /async?ms=300 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "async in flight");
    on_loop(ts, stop_accepting_fn, NULL);
    CHECK(cli_closed(&a), "idle connection closed on drain");
    CHECK(cli_read_response(&b, &r) == 0 && r.status == 200 &&
              resp_hdr_is(&r, "Connection", "close"),
          "in-flight answered with close");
    resp_free(&r);
    CHECK(cli_closed(&b), "drained connection closed");
    cli_close(&a);
    cli_close(&b);
    CHECK(cli_open(&c, port) != 0, "no new connections after stop_accepting");
    cli_close(&c);
}

static void test_stats(tsrv *ts) {
    srv_http_stats_t st;
    on_loop(ts, stats_fn, &st);
    static const int codes[] = SRV_HTTP_STAT_CODES;
    uint64_t n200 = 0, n404 = 0, n401 = 0;
    for (int i = 0; i < SRV_HTTP_N_STAT_CODES; i++) {
        if (codes[i] == 200)
            n200 = st.by_code[i];
        if (codes[i] == 404)
            n404 = st.by_code[i];
        if (codes[i] == 401)
            n401 = st.by_code[i];
    }
    CHECK(n200 > 10 && n404 >= 2 && n401 >= 7, "by code: 200 %llu 404 %llu 401 %llu",
          (unsigned long long)n200, (unsigned long long)n404, (unsigned long long)n401);
    CHECK(st.by_class[2] >= n200 && st.by_class[4] >= n404 + n401, "by class");
    CHECK(st.total_requests >= st.by_class[2] && st.aborted_requests >= 4,
          "totals %llu aborted %llu", (unsigned long long)st.total_requests,
          (unsigned long long)st.aborted_requests);
}

static void test_lifecycle(void) {
    /* Create and free without listening, and with a failed listen. */
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    srv_http *h = srv_http_create(&loop, NULL, routes, N_ROUTES, NULL, err, sizeof err);
    CHECK(h != NULL, "create");
    CHECK(srv_http_listen(h, "256.1.1.1", 0, err, sizeof err) < 0 && bt_one_line(err),
          "bad host rejected: %s", err);
    srv_http_free(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0, "loop closes");
    srv_route bad = {"GET", "nopath", h_hello, 0};
    CHECK(srv_http_create(&loop, NULL, &bad, 1, NULL, err, sizeof err) == NULL && bt_one_line(err),
          "bad route rejected");
    srv_http_config cfg = srv_http_config_default();
    cfg.max_headers = 0;
    CHECK(srv_http_create(&loop, &cfg, routes, N_ROUTES, NULL, err, sizeof err) == NULL,
          "bad config rejected");
}

/* srv_error_for_code: every BRISK_E* code to the status, type, code and
 * headers brisk_error.h's taxonomy promises, in one place. */
static void test_error_map(void) {
    const struct {
        int code, status;
        const char *type, *oa_code;
        int retry_after;
    } want[] = {
        {BRISK_EINVAL, 400, "invalid_request_error", NULL, 0},
        {BRISK_ERANGE, 400, "invalid_request_error", NULL, 0},
        {BRISK_EFORMAT, 400, "invalid_request_error", NULL, 0},
        {BRISK_EUNSUPPORTED, 400, "invalid_request_error", NULL, 0},
        {BRISK_ENOTFOUND, 404, "invalid_request_error", "not_found", 0},
        {BRISK_ENOSPC, 429, "rate_limit_error", "queue_full", 1},
        {BRISK_ENOMEM, 500, "server_error", NULL, 0},
        {BRISK_EIO, 500, "server_error", NULL, 0},
        {-1000, 500, "server_error", NULL, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        srv_error_map m = srv_error_for_code(want[i].code);
        CHECK(m.status == want[i].status && !strcmp(m.type, want[i].type) &&
                  (want[i].oa_code ? m.code && !strcmp(m.code, want[i].oa_code) : m.code == NULL) &&
                  (want[i].retry_after ? m.headers && !strcmp(m.headers, "Retry-After: 1\r\n")
                                       : !m.headers) &&
                  m.message && m.message[0],
              "code %d -> %d %s", want[i].code, m.status, m.type);
    }
    CHECK(!strcmp(srv_error_for_code(BRISK_ENOMEM).message, "out of memory"),
          "ENOMEM says out of memory");
}

int main(void) {
    /* A hang is a failure: the whole test must end in 5 minutes. */
    alarm(300);
    test_error_map();

    srv_http_config cfg = srv_http_config_default();
    cfg.api_key = API_KEY;
    cfg.error_body = other_error_body;
    cfg.max_body_bytes = 64 * 1024;
    cfg.max_write_queue_bytes = 256 * 1024;
    tsrv a;
    if (tsrv_start(&a, &cfg, "127.0.0.1") != 0)
        return BT_SUMMARY("test_srv_http");
    test_basic(a.port);
    test_keepalive_pipelining(a.port);
    test_routing_auth(a.port);
    test_malformed(a.port);
    test_limits(a.port);
    test_streaming(a.port);
    brisk_log_set_level(BRISK_LOG_WARN);
    test_aborts(&a);
    test_stats(&a);
    /* Freed with a request in flight: its abort callback runs first, and
     * the loop still finishes. */
    int a0 = atomic_load(&n_abort), s0 = atomic_load(&n_async_started);
    cli c;
    CHECK(cli_open(&c, a.port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=600000 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "dispatched before free");
    tsrv_stop(&a);
    CHECK(atomic_load(&n_abort) == a0 + 1, "abort callback on srv_http_free");
    CHECK(cli_closed(&c), "client sees the close");
    cli_close(&c);

    brisk_log_set_level(BRISK_LOG_INFO);
    cfg = srv_http_config_default();
    cfg.head_timeout_ms = 300;
    cfg.body_idle_timeout_ms = 300;
    cfg.keepalive_idle_ms = 300;
    cfg.log_format = SRV_LOG_JSON;
    tsrv b;
    if (tsrv_start(&b, &cfg, "127.0.0.1") == 0) {
        test_timeouts(b.port);
        tsrv_stop(&b);
    }

    cfg = srv_http_config_default();
    cfg.api_key = API_KEY;
    cfg.allowed_origins = " https://a.example,,https://b.example ";
    tsrv co;
    if (tsrv_start(&co, &cfg, "127.0.0.1") == 0) {
        test_cors_prefix(co.port);
        tsrv_stop(&co);
    }

    brisk_log_set_level(BRISK_LOG_WARN);
    cfg = srv_http_config_default();
    cfg.max_requests_per_conn = 2;
    cfg.max_connections = 2;
    tsrv l;
    if (tsrv_start(&l, &cfg, "127.0.0.1") == 0) {
        test_conn_limits(&l);
        tsrv_stop(&l);
    }

    tsrv v6;
    if (tsrv_start(&v6, NULL, "::1") == 0) {
        cli c6;
        resp r;
        CHECK(cli_open_af(&c6, v6.port, AF_INET6, 0) == 0, "connect ::1");
        cli_sends(&c6, "GET /hello HTTP/1.1\r\n\r\n");
        CHECK(cli_read_response(&c6, &r) == 0 && r.status == 200, "IPv6 GET");
        resp_free(&r);
        cli_close(&c6);
        tsrv_stop(&v6);
    } else {
        printf("test_srv_http: no IPv6 loopback here, IPv6 case skipped\n");
    }

    test_lifecycle();
    return BT_SUMMARY("test_srv_http");
}
