/* bench_http.c - keep-alive HTTP/1.1 client connections, strict llhttp in
 * response mode, SSE streams (see bench_http.h).
 *
 * Safe points: a connection's call is finished (on_done) only from a libuv
 * callback after llhttp_execute() has returned, never from inside an llhttp
 * or SSE callback, so on_done may start the next request on the same
 * connection. Connections are freed only in their close callbacks. */
#include "clients/bench_http.h"

#include <ctype.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <llhttp.h>

#include "brisk_config.h"
#include "clients/bench_sse.h"
#include "common/brisk_error.h"

/* Bounds on what a server can make us hold. */
#define HEAD_MAX_BYTES (64 * 1024)             /* status line + headers */
#define ERROR_BODY_MAX_BYTES (64 * 1024)       /* kept for the error message */
#define PLAIN_BODY_MAX_BYTES (8 * 1024 * 1024) /* non-stream 200 bodies (/v1/models) */
#define READ_BUF_BYTES (256 * 1024)            /* one socket read */

double bench_now(void) {
    return (double)uv_hrtime() * 1e-9;
}

/* ---- targets ---- */

int bench_target_parse(const char *url, bench_target *t, char *err, size_t err_len) {
    memset(t, 0, sizeof *t);
    if (!url)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "no base URL");
    if (strncasecmp(url, "https://", 8) == 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "%s: https is not supported (plain http only; use a TLS proxy)", url);
    if (strncasecmp(url, "http://", 7) != 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: the base URL must start with http://",
                             url);
    const char *a = url + 7;
    const char *slash = strchr(a, '/');
    const char *aend = slash ? slash : a + strlen(a);
    if (memchr(a, '@', (size_t)(aend - a)) || strpbrk(url, "?# \t\r\n"))
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "%s: no user info, query, fragment or spaces in the base URL", url);
    const char *hs = a, *he, *port = NULL;
    int v6 = 0;
    if (*a == '[') {
        const char *rb = memchr(a, ']', (size_t)(aend - a));
        if (!rb)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: unterminated IPv6 address", url);
        hs = a + 1;
        he = rb;
        v6 = 1;
        if (rb + 1 < aend) {
            if (rb[1] != ':')
                return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: bad authority", url);
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(a, ':', (size_t)(aend - a));
        he = colon ? colon : aend;
        if (colon)
            port = colon + 1;
    }
    size_t hlen = (size_t)(he - hs);
    if (hlen == 0 || hlen >= sizeof t->host)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: bad host", url);
    memcpy(t->host, hs, hlen);
    t->host[hlen] = '\0';
    t->port = 80;
    if (port) {
        long p = 0;
        if (port == aend)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: empty port", url);
        for (const char *q = port; q < aend; q++) {
            if (!isdigit((unsigned char)*q) || p > 65535)
                return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: bad port", url);
            p = p * 10 + (*q - '0');
        }
        if (p < 1 || p > 65535)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: bad port", url);
        t->port = (int)p;
    }
    snprintf(t->host_header, sizeof t->host_header, v6 ? "[%s]:%d" : "%s:%d", t->host, t->port);
    /* The path: strip trailing slashes, then make it end in /v1. */
    size_t plen = slash ? strlen(slash) : 0;
    while (plen && slash[plen - 1] == '/')
        plen--;
    int has_v1 = plen >= 3 && memcmp(slash + plen - 3, "/v1", 3) == 0;
    if (plen + 4 >= sizeof t->prefix)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "%s: path too long", url);
    if (plen)
        memcpy(t->prefix, slash, plen);
    memcpy(t->prefix + plen, has_v1 ? "" : "/v1", has_v1 ? 1 : 4);
    return 0;
}

int bench_target_resolve(bench_target *t, char *err, size_t err_len) {
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%d", t->port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(t->host, portstr, &hints, &res);
    if (rc != 0 || !res)
        return brisk_set_err(err, err_len, BRISK_EIO, "cannot resolve '%s': %s", t->host,
                             gai_strerror(rc));
    if (res->ai_addrlen > sizeof t->addr) {
        freeaddrinfo(res);
        return brisk_set_err(err, err_len, BRISK_EIO, "cannot resolve '%s'", t->host);
    }
    memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
    t->addr_len = (int)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* ---- the client and its connections ---- */

typedef struct bench_conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* the call's timeout */
    uv_connect_t connect_req;
    llhttp_t parser;
    bench_sse sse;
    bench_client *cl;
    bench_call *call;               /* in flight; NULL when idle */
    struct bench_conn *prev, *next; /* every connection of the client */
    struct bench_conn *idle_next;   /* the idle stack (singly linked: popped or rebuilt) */
    int idle;
    int connected;
    int closing;
    int n_closed;   /* close callbacks seen (two handles) */
    int reused;     /* it has finished a response before */
    int msg_done;   /* the current response is complete */
    int keep_alive; /* ... and the connection may carry another */
    int body_sse;   /* the body goes to the SSE parser (else to call->resp) */
    size_t head_bytes, body_max;
    uint64_t n_sent; /* requests written on this connection (matches a write to its call) */
    int fail_kind;   /* set by a callback that stops the parser */
    char fail_msg[160];
    double now; /* when the bytes being parsed arrived */
} bench_conn;

struct bench_client {
    uv_loop_t *loop;
    bench_target target;
    char *api_key;
    bench_conn *conns; /* every connection not yet freed */
    bench_conn *idle;  /* stack of idle connections */
    int n_open;        /* connections not closing */
    int n_alloc;       /* connections not yet freed */
    int freeing;
    llhttp_settings_t settings;
    char rbuf[READ_BUF_BYTES]; /* shared: a read is consumed before the next one */
};

static void conn_close(bench_conn *k);
static int conn_send(bench_conn *k);
static int call_start(bench_client *cl, bench_call *c);

void bench_call_clear(bench_call *c) {
    free(c->resp);
    c->resp = NULL;
    c->resp_len = 0;
}

static void call_set_err(bench_call *c, int kind, const char *msg) {
    if (c->err == BENCH_OK || c->err == BENCH_ERR_STREAM) {
        c->err = kind;
        snprintf(c->err_msg, sizeof c->err_msg, "%s", msg);
    }
}

static void idle_remove(bench_client *cl, bench_conn *k) {
    if (!k->idle)
        return;
    bench_conn **pp = &cl->idle;
    while (*pp && *pp != k)
        pp = &(*pp)->idle_next;
    if (*pp)
        *pp = k->idle_next;
    k->idle_next = NULL;
    k->idle = 0;
}

/* Detaches the call from its connection, keeps or closes the connection, and
 * runs on_done. */
static void conn_finish(bench_conn *k, int reuse) {
    bench_call *c = k->call;
    uv_timer_stop(&k->timer);
    k->call = NULL;
    if (!c)
        return;
    c->conn = NULL;
    if (c->t_end == 0)
        c->t_end = bench_now();
    k->reused = 1;
    if (reuse && !k->closing && !k->cl->freeing) {
        k->idle = 1;
        k->idle_next = k->cl->idle;
        k->cl->idle = k;
    } else {
        conn_close(k);
    }
    c->on_done(c);
}

static void conn_fail(bench_conn *k, int kind, const char *msg) {
    if (k->call)
        call_set_err(k->call, kind, msg);
    conn_finish(k, 0);
}

/* Extracts a one-line message from an error body: error.message of an
 * OpenAI error, else the first bytes as text. */
static void http_error_msg(bench_call *c) {
    char msg[160] = "";
    if (c->resp && c->resp_len) {
        cJSON *j = cJSON_ParseWithLength(c->resp, c->resp_len);
        const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
        const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
        if (cJSON_IsString(m) && m->valuestring)
            snprintf(msg, sizeof msg, "%s", m->valuestring);
        else
            snprintf(msg, sizeof msg, "%.*s", (int)(c->resp_len < 150 ? c->resp_len : 150),
                     c->resp);
        cJSON_Delete(j);
    }
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    snprintf(c->err_msg, sizeof c->err_msg, "HTTP %d: %s", c->status, msg);
}

/* The response is complete: judge it. */
static void conn_complete(bench_conn *k) {
    bench_call *c = k->call;
    c->t_end = k->now;
    if (c->status != 200) {
        c->err = BENCH_ERR_HTTP;
        http_error_msg(c);
    } else if (c->stream && c->err == BENCH_OK && c->n_content == 0) {
        call_set_err(c, BENCH_ERR_NO_CONTENT, "the stream ended without a token");
    }
    conn_finish(k, k->keep_alive);
}

/* The server closed a connection that had served a response before, before
 * sending a byte of this one: it closed the idle connection as we reused it.
 * The request goes again, once, on a fresh connection. Returns 1 if so. */
static int conn_retry(bench_conn *k) {
    bench_call *c = k->call;
    if (!c || c->got_bytes || c->retried || !k->reused)
        return 0;
    c->retried = 1;
    k->call = NULL;
    c->conn = NULL;
    uv_timer_stop(&k->timer);
    conn_close(k);
    if (call_start(k->cl, c) < 0) {
        c->t_end = bench_now();
        c->on_done(c);
    }
    return 1;
}

/* ---- llhttp callbacks (response mode) ---- */

static int stop(llhttp_t *p, int kind, const char *msg) {
    bench_conn *k = p->data;
    k->fail_kind = kind;
    snprintf(k->fail_msg, sizeof k->fail_msg, "%s", msg);
    return HPE_USER;
}

static int count_head(llhttp_t *p, size_t len) {
    bench_conn *k = p->data;
    k->head_bytes += len;
    return k->head_bytes > HEAD_MAX_BYTES ? stop(p, BENCH_ERR_PROTOCOL, "response head over 64 KiB")
                                          : 0;
}

static int on_message_begin(llhttp_t *p) {
    bench_conn *k = p->data;
    bench_call *c = k->call;
    k->head_bytes = 0;
    k->msg_done = 0;
    c->status = 0;
    c->resp_len = 0;
    if (c->resp)
        c->resp[0] = '\0';
    return 0;
}

static int on_data_head(llhttp_t *p, const char *at, size_t len) {
    (void)at;
    return count_head(p, len);
}

static int on_headers_complete(llhttp_t *p) {
    bench_conn *k = p->data;
    bench_call *c = k->call;
    c->status = p->status_code;
    k->body_sse = c->stream && c->status == 200;
    k->body_max = c->status == 200 ? PLAIN_BODY_MAX_BYTES : ERROR_BODY_MAX_BYTES;
    if (k->body_sse)
        bench_sse_reset(&k->sse);
    if (k->body_sse && c->abort_mode == BENCH_ABORT_AFTER && c->abort_events <= 0)
        return stop(p, BENCH_ERR_ABORTED, "aborted by the client at the response head");
    return 0;
}

static int keep_body(bench_conn *k, const char *at, size_t len) {
    bench_call *c = k->call;
    if (c->resp_len + len > k->body_max) {
        if (c->status != 200) {
            len = k->body_max - c->resp_len; /* an error body: its start is enough */
        } else {
            return -1;
        }
    }
    char *r = realloc(c->resp, c->resp_len + len + 1);
    if (!r)
        return -1;
    c->resp = r;
    memcpy(r + c->resp_len, at, len);
    c->resp_len += len;
    r[c->resp_len] = '\0';
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
    bench_conn *k = p->data;
    if (!k->body_sse) {
        if (keep_body(k, at, len) < 0)
            return stop(p, BENCH_ERR_PROTOCOL, "response body too large");
        return 0;
    }
    int rc = bench_sse_feed(&k->sse, at, len);
    if (rc == BENCH_SSE_STOPPED)
        return HPE_USER; /* the event callback said why */
    if (rc == BRISK_ENOSPC)
        return stop(p, BENCH_ERR_PROTOCOL, "an SSE line or event over the size bound");
    if (rc < 0)
        return stop(p, BENCH_ERR_PROTOCOL, "out of memory in the SSE parser");
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    bench_conn *k = p->data;
    bench_call *c = k->call;
    int st = c->status;
    if (st >= 100 && st < 200 && st != 101) {
        /* An interim response (100 Continue, 103 Early Hints): the real one follows. */
        c->status = 0;
        return 0;
    }
    k->msg_done = 1;
    k->keep_alive = llhttp_should_keep_alive(p);
    return HPE_PAUSED;
}

/* One SSE event of a 200 stream. */
static int on_sse_event(void *user, const char *data, size_t len) {
    bench_conn *k = user;
    bench_call *c = k->call;
    bench_chunk ch;
    bench_chunk_parse(data, len, c->chat, &ch);
    switch (ch.kind) {
    case BENCH_CHUNK_DONE: c->done_seen = 1; return 0;
    case BENCH_CHUNK_ERROR:
        if (c->err == BENCH_OK) {
            c->err = BENCH_ERR_STREAM;
            snprintf(c->err_msg, sizeof c->err_msg, "error event: %s", ch.err);
        }
        return 0;
    case BENCH_CHUNK_INVALID:
        k->fail_kind = BENCH_ERR_PROTOCOL;
        snprintf(k->fail_msg, sizeof k->fail_msg, "bad stream chunk: %.120s", ch.err);
        return 1;
    case BENCH_CHUNK_DATA: break;
    }
    if (c->done_seen)
        return 0; /* nothing counts after [DONE] */
    if (ch.has_content) {
        if (c->n_content == 0)
            c->t_first = k->now;
        else if (c->itl)
            bench_dvec_push(c->itl, k->now - c->t_last);
        c->t_last = k->now;
        c->n_content++;
        if (c->events)
            (*c->events)++;
        if (c->abort_mode == BENCH_ABORT_AFTER && c->n_content >= c->abort_events) {
            k->fail_kind = BENCH_ERR_ABORTED;
            snprintf(k->fail_msg, sizeof k->fail_msg, "aborted by the client after %d tokens",
                     c->n_content);
            return 1;
        }
    }
    if (ch.usage_completion >= 0)
        c->usage_completion = ch.usage_completion;
    if (ch.usage_prompt >= 0)
        c->usage_prompt = ch.usage_prompt;
    return 0;
}

/* ---- libuv callbacks ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    bench_conn *k = h->data;
    buf->base = k->cl->rbuf;
    buf->len = sizeof k->cl->rbuf;
}

static void on_eof(bench_conn *k, ssize_t nread) {
    if (!k->call) {
        conn_close(k);
        return;
    }
    if (conn_retry(k))
        return;
    if (k->call->got_bytes && !k->msg_done) {
        /* A body that runs to the end of the connection ends here. */
        llhttp_errno_t e = llhttp_finish(&k->parser);
        if (k->msg_done && (e == HPE_OK || e == HPE_PAUSED)) {
            k->keep_alive = 0;
            conn_complete(k);
            return;
        }
    }
    char msg[160];
    snprintf(msg, sizeof msg, "connection %s before the response ended",
             nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
    conn_fail(k, BENCH_ERR_CLOSED, msg);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    bench_conn *k = s->data;
    if (nread == 0 || k->closing)
        return;
    k->now = bench_now();
    if (nread < 0) {
        on_eof(k, nread);
        return;
    }
    bench_call *c = k->call;
    if (!c) {
        conn_close(k); /* bytes nobody asked for: do not trust this connection */
        return;
    }
    c->got_bytes = 1;
    llhttp_errno_t e = llhttp_execute(&k->parser, buf->base, (size_t)nread);
    if (e == HPE_OK)
        return;
    if (e == HPE_PAUSED && k->msg_done) {
        const char *pos = llhttp_get_error_pos(&k->parser);
        if (!pos || pos < buf->base || pos != buf->base + nread)
            k->keep_alive = 0; /* bytes after the response: nothing may follow it */
        conn_complete(k);
        return;
    }
    char msg[200];
    if (k->fail_kind) {
        /* One of our callbacks stopped the parser (HPE_USER, or
         * HPE_CB_HEADERS_COMPLETE from the head callback) and said why. */
        conn_fail(k, k->fail_kind, k->fail_msg);
        return;
    }
    const char *reason = llhttp_get_error_reason(&k->parser);
    snprintf(msg, sizeof msg, "malformed HTTP response: %s (%.80s)", llhttp_errno_name(e),
             reason ? reason : "");
    conn_fail(k, BENCH_ERR_PROTOCOL, msg);
}

typedef struct wreq {
    uv_write_t req;
    uint64_t seq; /* the connection's n_sent when it was written */
    char data[];
} wreq;

static void on_write(uv_write_t *req, int status) {
    wreq *w = (wreq *)req;
    bench_conn *k = req->data;
    /* The call this write belongs to, if it is still the connection's: a
     * server may answer (and the connection carry the next call) before the
     * write of a request is reported done. */
    int current = w->seq == k->n_sent;
    free(w);
    if (status < 0 && status != UV_ECANCELED && !k->closing && k->call) {
        if (conn_retry(k))
            return;
        char msg[160];
        snprintf(msg, sizeof msg, "write failed: %s", uv_strerror(status));
        conn_fail(k, BENCH_ERR_CLOSED, msg);
        return;
    }
    if (status == 0 && current && !k->closing && k->call &&
        k->call->abort_mode == BENCH_ABORT_BEFORE_HEAD)
        conn_fail(k, BENCH_ERR_ABORTED, "aborted by the client before the response head");
}

static void on_connect(uv_connect_t *req, int status) {
    bench_conn *k = req->data;
    if (k->closing)
        return;
    if (status < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "connect to %.80s: %.60s", k->cl->target.host_header,
                 uv_strerror(status));
        conn_fail(k, BENCH_ERR_CONNECT, msg);
        return;
    }
    k->connected = 1;
    uv_tcp_nodelay(&k->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read);
    if (rc == 0 && k->call)
        rc = conn_send(k);
    if (rc < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s", uv_strerror(rc));
        conn_fail(k, BENCH_ERR_CONNECT, msg);
    }
}

static void on_timeout(uv_timer_t *t) {
    bench_conn *k = t->data;
    if (k->call)
        conn_fail(k, BENCH_ERR_TIMEOUT, "no complete response within --timeout");
}

static void on_closed(uv_handle_t *h) {
    bench_conn *k = h->data;
    if (++k->n_closed < 2)
        return;
    bench_client *cl = k->cl;
    if (k->prev)
        k->prev->next = k->next;
    else
        cl->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    bench_sse_free(&k->sse);
    free(k);
    if (--cl->n_alloc == 0 && cl->freeing) {
        free(cl->api_key);
        free(cl);
    }
}

static void conn_close(bench_conn *k) {
    if (k->closing)
        return;
    k->closing = 1;
    idle_remove(k->cl, k);
    k->cl->n_open--;
    uv_close((uv_handle_t *)&k->tcp, on_closed);
    uv_close((uv_handle_t *)&k->timer, on_closed);
}

/* A new connection (connecting). NULL with rc set when it cannot start. */
static bench_conn *conn_open(bench_client *cl, int *rc) {
    bench_conn *k = calloc(1, sizeof *k);
    if (!k) {
        *rc = BRISK_ENOMEM;
        return NULL;
    }
    k->cl = cl;
    bench_sse_init(&k->sse, 0, on_sse_event, k);
    int r = uv_tcp_init(cl->loop, &k->tcp);
    if (r < 0) {
        free(k);
        *rc = r;
        return NULL;
    }
    r = uv_timer_init(cl->loop, &k->timer);
    if (r < 0) {
        /* The tcp handle is initialised: it must be closed, then freed. */
        k->tcp.data = k;
        k->n_closed = 1;
        k->closing = 1;
        cl->n_alloc++;
        k->next = cl->conns;
        if (cl->conns)
            cl->conns->prev = k;
        cl->conns = k;
        uv_close((uv_handle_t *)&k->tcp, on_closed);
        *rc = r;
        return NULL;
    }
    k->tcp.data = k;
    k->timer.data = k;
    k->connect_req.data = k;
    k->next = cl->conns;
    if (cl->conns)
        cl->conns->prev = k;
    cl->conns = k;
    cl->n_alloc++;
    cl->n_open++;
    r = uv_tcp_connect(&k->connect_req, &k->tcp, (const struct sockaddr *)&cl->target.addr,
                       on_connect);
    if (r < 0) {
        conn_close(k);
        *rc = r;
        return NULL;
    }
    return k;
}

/* Writes the call's request (head and body in one buffer, one write). */
static int conn_send(bench_conn *k) {
    bench_call *c = k->call;
    bench_client *cl = k->cl;
    char head[1024 + 512];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: brisk-bench/%s\r\n"
                     "Accept: %s\r\n",
                     c->method, c->path, cl->target.host_header, BRISK_VERSION,
                     c->stream ? "text/event-stream" : "application/json");
    if (n < 0 || (size_t)n >= sizeof head)
        return BRISK_EINVAL;
    size_t hlen = (size_t)n;
    if (c->body_len) {
        n = snprintf(head + hlen, sizeof head - hlen,
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n", c->body_len);
        if (n < 0 || (size_t)n >= sizeof head - hlen)
            return BRISK_EINVAL;
        hlen += (size_t)n;
    }
    size_t klen = cl->api_key ? strlen(cl->api_key) : 0;
    size_t total = hlen + (klen ? klen + 25 : 0) + 2 + c->body_len;
    wreq *w = malloc(sizeof *w + total);
    if (!w)
        return BRISK_ENOMEM;
    char *p = w->data;
    memcpy(p, head, hlen);
    p += hlen;
    if (klen) {
        memcpy(p, "Authorization: Bearer ", 22);
        memcpy(p + 22, cl->api_key, klen);
        memcpy(p + 22 + klen, "\r\n", 2);
        p += 24 + klen;
    }
    memcpy(p, "\r\n", 2);
    p += 2;
    if (c->body_len)
        memcpy(p, c->body, c->body_len);
    p += c->body_len;
    llhttp_init(&k->parser, HTTP_RESPONSE, &cl->settings);
    k->parser.data = k;
    k->msg_done = 0;
    k->keep_alive = 0;
    k->fail_kind = 0;
    k->body_sse = 0;
    bench_sse_reset(&k->sse);
    w->req.data = k;
    w->seq = ++k->n_sent;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)(p - w->data));
    int rc = uv_write(&w->req, (uv_stream_t *)&k->tcp, &b, 1, on_write);
    if (rc < 0)
        free(w);
    return rc;
}

bench_client *bench_client_create(uv_loop_t *loop, const bench_target *t, const char *api_key,
                                  char *err, size_t err_len) {
    if (!t->addr_len) {
        brisk_set_err(err, err_len, BRISK_EINVAL, "target not resolved");
        return NULL;
    }
    bench_client *cl = calloc(1, sizeof *cl);
    if (!cl || (api_key && !(cl->api_key = strdup(api_key)))) {
        free(cl);
        brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory");
        return NULL;
    }
    cl->loop = loop;
    cl->target = *t;
    /* A write to a connection the server has reset must fail with EPIPE, not
     * kill the process: ignore SIGPIPE, as srv_http_listen() does. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    llhttp_settings_init(&cl->settings);
    cl->settings.on_message_begin = on_message_begin;
    cl->settings.on_status = on_data_head;
    cl->settings.on_header_field = on_data_head;
    cl->settings.on_header_value = on_data_head;
    cl->settings.on_headers_complete = on_headers_complete;
    cl->settings.on_body = on_body;
    cl->settings.on_message_complete = on_message_complete;
    return cl;
}

/* Starts c; a retry (c->retried set) keeps its t_start and its timeout budget. */
static int call_start(bench_client *cl, bench_call *c) {
    if (!c->retried)
        c->t_start = bench_now();
    c->got_bytes = 0;
    c->t_first = c->t_last = c->t_end = 0;
    c->status = 0;
    c->err = BENCH_OK;
    c->err_msg[0] = '\0';
    c->n_content = 0;
    c->done_seen = 0;
    c->usage_prompt = c->usage_completion = -1;
    c->resp_len = 0;
    c->conn = NULL;
    if (cl->freeing) {
        c->err = BENCH_ERR_CANCELLED;
        snprintf(c->err_msg, sizeof c->err_msg, "client closing");
        return BRISK_EINVAL;
    }
    /* A retry goes on a fresh connection: another idle one may be just as stale. */
    bench_conn *k = c->retried ? NULL : cl->idle;
    int rc = 0;
    if (k) {
        cl->idle = k->idle_next;
        k->idle_next = NULL;
        k->idle = 0;
    } else {
        k = conn_open(cl, &rc);
        if (!k) {
            c->err = BENCH_ERR_CONNECT;
            snprintf(c->err_msg, sizeof c->err_msg, "cannot open a connection: %s",
                     rc == BRISK_ENOMEM ? "out of memory" : uv_strerror(rc));
            return rc == BRISK_ENOMEM ? BRISK_ENOMEM : BRISK_EIO;
        }
    }
    k->call = c;
    c->conn = k;
    if (c->timeout_s > 0) {
        double left = c->timeout_s - (bench_now() - c->t_start);
        uint64_t ms = left > 0 ? (uint64_t)(left * 1000.0) + 1 : 1;
        uv_timer_start(&k->timer, on_timeout, ms, 0);
    }
    if (k->connected) {
        rc = conn_send(k);
        if (rc < 0) {
            k->call = NULL;
            c->conn = NULL;
            uv_timer_stop(&k->timer);
            conn_close(k);
            c->err = BENCH_ERR_CLOSED;
            snprintf(c->err_msg, sizeof c->err_msg, "cannot send: %s",
                     rc == BRISK_ENOMEM ? "out of memory" : uv_strerror(rc));
            return BRISK_EIO;
        }
    }
    return 0;
}

int bench_call_start(bench_client *cl, bench_call *c) {
    c->retried = 0;
    return call_start(cl, c);
}

void bench_client_cancel_all(bench_client *cl) {
    /* Connections are unlinked only in close callbacks: the list is stable. */
    for (bench_conn *k = cl->conns; k; k = k->next) {
        if (k->call && !k->closing)
            conn_fail(k, BENCH_ERR_CANCELLED, "cancelled");
    }
}

void bench_client_free(bench_client *cl) {
    if (!cl || cl->freeing)
        return;
    bench_client_cancel_all(cl);
    cl->freeing = 1;
    for (bench_conn *k = cl->conns; k; k = k->next)
        conn_close(k);
    if (cl->n_alloc == 0) {
        free(cl->api_key);
        free(cl);
    }
}

int bench_client_n_open(const bench_client *cl) {
    return cl->n_open;
}
