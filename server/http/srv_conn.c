/* srv_conn.c - one HTTP/1.1 connection: reading into a bounded buffer,
 * strict llhttp parsing with head/body limits, one request at a time
 * (the parser pauses at each message end, pipelined bytes wait), the
 * timers (head, body idle, keep-alive idle, closing), writes, lingering
 * close, and the abort of a request whose connection goes away.
 *
 * Safe points: a connection is closed with srv_conn_close(), which only marks
 * it and calls uv_close(); its memory and the application's abort callback
 * wait for the close callbacks, so nothing is freed under a caller's feet. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "server/http/srv_http_int.h"

typedef struct srv_wbuf {
    uv_write_t req;
    size_t len;
    char data[];
} srv_wbuf;

static void conn_process(srv_conn *c);
static void conn_update_reading(srv_conn *c);

static void conn_timer_cb(uv_timer_t *t);

static void conn_timer(srv_conn *c, srv_timer_mode mode, int ms) {
    if (c->closing)
        return;
    c->tmode = mode;
    if (mode == SRV_T_NONE)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, conn_timer_cb, (uint64_t)(ms > 0 ? ms : 0), 0);
}

/* The body timer: the idle gap, but never past the body's total deadline. */
static void conn_body_timer(srv_conn *c) {
    uint64_t now = uv_now(c->h->loop);
    uint64_t left = c->body_deadline > now ? c->body_deadline - now : 0;
    uint64_t idle = (uint64_t)c->h->cfg.body_idle_timeout_ms;
    conn_timer(c, SRV_T_BODY, (int)(left < idle ? left : idle));
}

/* ---- llhttp callbacks: build c->req, enforce the limits ---- */

static int fail(llhttp_t *p, int status, const char *reason) {
    srv_conn *c = p->data;
    c->parse_status = status;
    c->parse_reason = reason; /* llhttp replaces the reason of *_complete callbacks */
    llhttp_set_error_reason(p, reason);
    return HPE_USER;
}

static int count_head(llhttp_t *p, size_t len) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    r->head_bytes += len;
    if (r->head_bytes > c->h->cfg.max_header_bytes)
        return fail(p, 431, "request header fields too large");
    return 0;
}

static int on_message_begin(llhttp_t *p) {
    srv_conn *c = p->data;
    assert(c->req == NULL);
    c->req = srv_req_create(c);
    if (!c->req)
        return fail(p, 503, "out of memory");
    c->n_requests++;
    /* A fresh connection's head timer runs since accept; keep that budget. */
    if (c->tmode != SRV_T_HEAD)
        conn_timer(c, SRV_T_HEAD, c->h->cfg.head_timeout_ms);
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    r->url_len += len;
    if (r->url_len > c->h->cfg.max_uri_bytes)
        return fail(p, 414, "request target too long");
    if (count_head(p, len))
        return HPE_USER;
    if (srv_req_append_head(r, at, len) < 0)
        return fail(p, 503, "out of memory");
    return 0;
}

static int on_url_complete(llhttp_t *p) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    r->url_off = r->head_len - r->url_len;
    if (srv_req_append_head(r, "", 1) < 0)
        return fail(p, 503, "out of memory");
    r->url_done = 1;
    r->method = llhttp_method_name((llhttp_method_t)p->method);
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    if (!r->in_field) {
        if (r->n_hdrs >= c->h->cfg.max_headers)
            return fail(p, 431, "too many header fields");
        if (brisk_grow(&r->hdrs, &r->cap_hdrs, (size_t)r->n_hdrs + 1, sizeof *r->hdrs, 16, 0) < 0)
            return fail(p, 503, "out of memory");
        memset(&r->hdrs[r->n_hdrs], 0, sizeof r->hdrs[0]);
        r->hdrs[r->n_hdrs].name_off = (uint32_t)r->head_len;
        r->in_field = 1;
    }
    if (count_head(p, len))
        return HPE_USER;
    if (srv_req_append_head(r, at, len) < 0)
        return fail(p, 503, "out of memory");
    return 0;
}

static int on_header_field_complete(llhttp_t *p) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    /* llhttp, even strict, lets a line ": v" through with an empty name;
     * a field name is a token of at least one character (RFC 9110 5.1). */
    if (!r->in_field || r->head_len == r->hdrs[r->n_hdrs].name_off)
        return fail(p, 400, "empty header field name");
    srv_hdr *hd = &r->hdrs[r->n_hdrs];
    hd->name_len = (uint32_t)(r->head_len - hd->name_off);
    hd->val_off = hd->val_len = 0;
    if (srv_req_append_head(r, "", 1) < 0)
        return fail(p, 503, "out of memory");
    r->in_field = 0;
    r->n_hdrs++;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    if (r->n_hdrs == 0)
        return fail(p, 400, "header value without a name");
    if (!r->in_value) {
        r->hdrs[r->n_hdrs - 1].val_off = (uint32_t)r->head_len;
        r->in_value = 1;
    }
    if (count_head(p, len))
        return HPE_USER;
    if (srv_req_append_head(r, at, len) < 0)
        return fail(p, 503, "out of memory");
    return 0;
}

static int on_header_value_complete(llhttp_t *p) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    if (r->n_hdrs == 0)
        return fail(p, 400, "header value without a name");
    srv_hdr *hd = &r->hdrs[r->n_hdrs - 1];
    if (!r->in_value)
        hd->val_off = (uint32_t)r->head_len; /* empty value */
    size_t end = r->head_len;
    while (end > hd->val_off && (r->head[end - 1] == ' ' || r->head[end - 1] == '\t'))
        end--;
    r->head_len = end;
    hd->val_len = (uint32_t)(end - hd->val_off);
    /* A value with a line break must never reach a handler that might echo
     * it. Folded lines are refused before parsing (conn_scan_head); this is
     * the backstop should llhttp ever pass one through. */
    if (memchr(r->head + hd->val_off, '\r', hd->val_len) ||
        memchr(r->head + hd->val_off, '\n', hd->val_len))
        return fail(p, 400, "obsolete line folding in a header value");
    if (srv_req_append_head(r, "", 1) < 0)
        return fail(p, 503, "out of memory");
    r->in_value = 0;
    return 0;
}

/* Splits the target into path and query in place: "/a?b=1#f" -> "/a", "b=1". */
static void split_target(srv_req *r) {
    char *u = r->head + r->url_off;
    char *hash = memchr(u, '#', r->url_len);
    if (hash)
        *hash = '\0';
    char *q = strchr(u, '?');
    if (q) {
        *q = '\0';
        r->query_off = (size_t)(q + 1 - r->head);
    }
}

static void take_request_id(srv_req *r) {
    size_t n = 0;
    const char *v = srv_req_header(r, "X-Request-Id", &n);
    if (!v || n == 0 || n > 64)
        return;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
            return;
    memcpy(r->id, v, n);
    r->id[n] = '\0';
}

static int on_headers_complete(llhttp_t *p) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    srv_http *h = c->h;
    if (!r->url_done)
        return fail(p, 400, "missing request target");
    split_target(r);
    take_request_id(r);
    r->http_minor = p->http_minor;
    if (p->http_major != 1 || p->http_minor > 1)
        return fail(p, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    r->keep_alive = llhttp_should_keep_alive(p);
    /* No protocol upgrades: answer the request, then close. */
    if (p->upgrade)
        r->force_close = 1;
    int has_body = (p->flags & F_CHUNKED) || p->content_length > 0;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > h->cfg.max_body_bytes)
        return fail(p, 413, "request body too large");
    int st = 0;
    size_t olen = 0;
    const char *origin = srv_req_header(r, "Origin", &olen);
    r->cors_origin = srv_http_cors_origin(h, origin, olen);
    /* A CORS preflight is the layer's to answer, before any auth. */
    r->preflight = h->n_origins && origin && strcmp(r->method, "OPTIONS") == 0 &&
                   srv_req_header(r, "Access-Control-Request-Method", NULL);
    if (!r->preflight)
        r->route = srv_http_route_for(h, r, &st);
    if (st) {
        r->err_status = st;
        /* Refuse before reading a body we would throw away (and that an
         * unauthenticated client could make large): answer and close. */
        if (has_body)
            return fail(p, st, "refused before the body");
    }
    if (has_body) {
        size_t n = 0;
        const char *e = srv_req_header(r, "Expect", &n);
        if (e && n == 12 && strncasecmp(e, "100-continue", 12) == 0 && r->http_minor == 1) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            if (srv_conn_write(c, cont, sizeof cont - 1, NULL, 0, NULL, 0, 0) < 0)
                return fail(p, 503, "write failed");
        }
        c->body_deadline = uv_now(h->loop) + (uint64_t)h->cfg.body_total_timeout_ms;
        conn_body_timer(c);
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
    srv_conn *c = p->data;
    srv_req *r = c->req;
    size_t max = c->h->cfg.max_body_bytes;
    if (len > max || r->body_len > max - len)
        return fail(p, 413, "request body too large");
    /* Grow geometrically as bytes arrive; never trust a declared length for
     * the allocation, and never beyond the limit (+1 for the NUL). */
    if (brisk_grow(&r->body, &r->body_cap, r->body_len + len + 1, 1, 1024, max + 1) < 0)
        return fail(p, 503, "out of memory");
    memcpy(r->body + r->body_len, at, len);
    r->body_len += len;
    r->body[r->body_len] = '\0';
    conn_body_timer(c);
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    srv_conn *c = p->data;
    conn_timer(c, SRV_T_NONE, 0);
    c->hs = SRV_HS_START; /* the next message's head gets scanned */
    /* One request at a time: stop here, serve it, then resume. */
    return HPE_PAUSED;
}

void srv_conn_parser_settings(llhttp_settings_t *s) {
    llhttp_settings_init(s);
    s->on_message_begin = on_message_begin;
    s->on_url = on_url;
    s->on_url_complete = on_url_complete;
    s->on_header_field = on_header_field;
    s->on_header_field_complete = on_header_field_complete;
    s->on_header_value = on_header_value;
    s->on_header_value_complete = on_header_value_complete;
    s->on_headers_complete = on_headers_complete;
    s->on_body = on_body;
    s->on_message_complete = on_message_complete;
}

/* Strict: no llhttp_set_lenient_* call, ever. */
void srv_conn_parser_init(llhttp_t *p, const llhttp_settings_t *s, void *data) {
    llhttp_init(p, HTTP_REQUEST, s);
    p->data = data;
}

/* ---- dispatch and errors ---- */

void srv_conn_dispatch(srv_conn *c) {
    srv_req *r = c->req;
    srv_http *h = c->h;
    c->serving = 1;
    conn_timer(c, SRV_T_NONE, 0);
    r->dispatched = 1;
    r->counted_active = 1;
    h->n_active++;
    if (r->preflight) {
        srv_respond_preflight(r);
    } else if (r->err_status) {
        srv_respond_layer_error(r, NULL);
    } else {
        if (h->cfg.on_dispatch)
            h->cfg.on_dispatch(h->app, r);
        r->route->handler(r);
    }
}

/* The layer answers an error itself and closes the connection afterwards. */
static void conn_fail(srv_conn *c, int status, const char *msg) {
    if (c->closing || c->serving || c->close_after_write)
        return;
    srv_req *r = c->req;
    if (!r) {
        r = c->req = srv_req_create(c);
        if (!r) {
            srv_conn_close(c);
            return;
        }
    }
    r->err_status = status;
    r->force_close = 1;
    c->rlen = 0;
    c->serving = 1;
    conn_timer(c, SRV_T_NONE, 0);
    r->dispatched = 1;
    r->counted_active = 1;
    c->h->n_active++;
    srv_respond_layer_error(r, msg);
}

static void conn_parse_error(srv_conn *c, llhttp_errno_t e) {
    int st = c->parse_status;
    const char *reason = c->parse_reason ? c->parse_reason : llhttp_get_error_reason(&c->parser);
    /* A well-formed but unsupported version (HTTP/1.2) is 505; a malformed
     * one is 400. llhttp tells them apart only by its reason text. */
    if (!st)
        st = e == HPE_INVALID_VERSION && reason && strcmp(reason, "Invalid HTTP version") == 0
                 ? 505
                 : 400;
    BRISK_DEBUG("http: parse error %s (%s) -> %d", llhttp_errno_name(e), reason ? reason : "", st);
    if (st == 503 && !c->req) {
        srv_conn_close(c);
        return;
    }
    conn_fail(c, st, st == 400 ? reason : NULL);
}

/* ---- reading ---- */

static void conn_consume(srv_conn *c, size_t used) {
    assert(used <= c->rlen);
    memmove(c->rbuf, c->rbuf + used, c->rlen - used);
    c->rlen -= used;
    c->hs_off = c->hs_off > used ? c->hs_off - used : 0;
}

/* Two head shapes llhttp accepts even in strict mode, which a proxy in front
 * may read differently (that is how requests get smuggled), so brisk refuses
 * them with 400 (RFC 9112 allows either choice for both):
 *   - obsolete line folding: a header line starting with SP or HT continues
 *     the previous one; llhttp unfolds it, "Transfer-Encoding:\r\n chunked"
 *     included (5.2);
 *   - a bare LF as the empty line that ends the head (2.2); llhttp refuses
 *     bare LF everywhere else.
 * llhttp's callbacks cannot see either (a fold after an empty value leaves no
 * trace), so the head's bytes are scanned here before llhttp parses them. The
 * scan stops at the empty line ending the head and resumes with the next
 * message; body bytes are never scanned. Returns NULL, or the reason. */
static const char *conn_scan_head(srv_conn *c) {
    for (; c->hs_off < c->rlen && c->hs != SRV_HS_BODY; c->hs_off++) {
        char ch = c->rbuf[c->hs_off];
        switch (c->hs) {
        case SRV_HS_START:
            if (ch != '\r' && ch != '\n') {
                c->hs = SRV_HS_LINE;
                c->rl_line = 1;
                c->rl_spaces = c->rl_proto_len = 0;
            }
            break;
        case SRV_HS_LINE:
            if (c->rl_line) { /* the request line: method, target, protocol */
                if (ch == '\r' || ch == '\n') {
                    c->rl_line = 0;
                    if (c->rl_spaces >= 2 &&
                        (c->rl_proto_len < 5 || memcmp(c->rl_proto, "HTTP/", 5) != 0))
                        return "the request line's protocol is not HTTP";
                } else if (ch == ' ') {
                    c->rl_spaces++;
                    c->rl_proto_len = 0;
                } else if (c->rl_spaces >= 2 && c->rl_proto_len < 5) {
                    c->rl_proto[c->rl_proto_len++] = ch;
                }
            }
            if (ch == '\n')
                c->hs = SRV_HS_BOL;
            break;
        case SRV_HS_BOL:
            if (ch == ' ' || ch == '\t')
                return "obsolete line folding in the request head";
            if (ch == '\n')
                return "bare LF ending the request head";
            c->hs = ch == '\r' ? SRV_HS_EOH : SRV_HS_LINE;
            break;
        case SRV_HS_EOH: c->hs = SRV_HS_BODY; break;
        case SRV_HS_BODY: break;
        }
    }
    return NULL;
}

/* Whether so many response bytes wait unsent that the next pipelined
 * request must wait too (see SRV_PIPELINE_MAX_UNSENT). */
static int conn_backlogged(srv_conn *c) {
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > SRV_PIPELINE_MAX_UNSENT;
}

/* Parses buffered bytes until a request is complete (then dispatches it) or
 * the buffer is empty. Iterative: a handler that answers at once lets the
 * loop go on to the next pipelined request without recursion. */
static void conn_process(srv_conn *c) {
    if (c->in_process)
        return;
    c->in_process = 1;
    while (!c->closing && !c->close_after_write && !c->serving && c->rlen > 0 &&
           !conn_backlogged(c)) {
        const char *bad = conn_scan_head(c);
        if (bad) {
            conn_fail(c, 400, bad);
            break;
        }
        llhttp_errno_t e = llhttp_execute(&c->parser, c->rbuf, c->rlen);
        if (e == HPE_OK) {
            c->rlen = 0;
            c->hs_off = 0;
        } else if (e == HPE_PAUSED && c->req) {
            const char *pos = llhttp_get_error_pos(&c->parser);
            size_t used = pos ? (size_t)(pos - c->rbuf) : c->rlen;
            llhttp_resume(&c->parser);
            conn_consume(c, used);
            srv_conn_dispatch(c);
        } else {
            conn_parse_error(c, e);
        }
    }
    c->in_process = 0;
    if (!c->closing && !c->close_after_write && !c->serving && !c->req && c->tmode != SRV_T_IDLE &&
        c->tmode != SRV_T_HEAD && c->tmode != SRV_T_PROCESS)
        conn_timer(c, SRV_T_IDLE, c->h->cfg.keepalive_idle_ms);
    conn_update_reading(c);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    srv_conn *c = handle->data;
    if (c->lingering) {
        *buf = uv_buf_init(c->rbuf, SRV_RBUF_BYTES);
        return;
    }
    *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(SRV_RBUF_BYTES - c->rlen));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
    srv_conn *c = stream->data;
    if (c->closing || nread == 0)
        return;
    if (nread == UV_ENOBUFS) {
        conn_update_reading(c);
        return;
    }
    if (nread < 0) {
        /* EOF or error. While serving, the request is aborted (the client is
         * gone or half-closed: nginx treats both alike). Otherwise a partial
         * request or an idle connection just ends. */
        if (nread != UV_EOF && nread != UV_ECONNRESET)
            BRISK_DEBUG("http: read: %s", uv_strerror((int)nread));
        srv_conn_close(c);
        return;
    }
    if (c->lingering) {
        c->discarded += (size_t)nread;
        if (c->discarded > SRV_LINGER_MAX_BYTES)
            srv_conn_close(c);
        return;
    }
    c->rlen += (size_t)nread;
    assert(c->rlen <= SRV_RBUF_BYTES);
    if (c->serving || c->close_after_write)
        conn_update_reading(c);
    else
        conn_process(c);
}

/* Reading goes on while a request is served, so that a client that goes
 * away is noticed (and its engine work cancelled); the bytes wait unparsed
 * and reading stops when the buffer is full. */
static void conn_update_reading(srv_conn *c) {
    int want = !c->closing && !c->rejected &&
               (c->lingering || (!c->close_after_write && c->rlen < SRV_RBUF_BYTES));
    if (want && !c->reading) {
        int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc < 0) {
            srv_conn_close(c);
            return;
        }
        c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

/* ---- writing and closing ---- */

static void conn_shutdown(srv_conn *c);

static void on_write(uv_write_t *req, int status) {
    srv_wbuf *w = (srv_wbuf *)req;
    srv_conn *c = req->data;
    free(w);
    c->n_writes--;
    if (c->closing)
        return;
    if (status < 0) {
        BRISK_DEBUG("http: write: %s", uv_strerror(status));
        srv_conn_close(c);
        return;
    }
    if (c->close_after_write && c->n_writes == 0 && !c->shutting_down) {
        conn_shutdown(c);
        return;
    }
    /* Pipelined requests held back by unsent responses go on once the
     * client has read enough (a libuv callback: a safe point to parse). */
    if (!c->serving && !c->in_process && c->rlen > 0 && !conn_backlogged(c))
        conn_process(c);
}

int srv_conn_write(srv_conn *c, const char *a, size_t alen, const char *b, size_t blen,
                   const char *t, size_t tlen, int limit_queue) {
    if (c->closing)
        return BRISK_EIO;
    size_t total = alen + blen + tlen;
    if (total < alen || total > 0xffffffffu) {
        srv_conn_close(c);
        return BRISK_ERANGE;
    }
    srv_wbuf *w = brisk_malloc(sizeof *w + total);
    if (!w) {
        srv_conn_close(c);
        return BRISK_ENOMEM;
    }
    if (alen)
        memcpy(w->data, a, alen);
    if (blen)
        memcpy(w->data + alen, b, blen);
    if (tlen)
        memcpy(w->data + alen + blen, t, tlen);
    w->len = total;
    w->req.data = c;
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)total);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc < 0) {
        free(w);
        srv_conn_close(c);
        return BRISK_EIO;
    }
    c->n_writes++;
    /* A client that does not read its stream must not make us buffer
     * without bound: bytes not yet accepted by the kernel are counted.
     * (Whole responses are bounded by the request; pipelined ones by
     * SRV_PIPELINE_MAX_UNSENT.) */
    if (limit_queue &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > c->h->cfg.max_write_queue_bytes) {
        BRISK_WARN("http: client is not reading; closing the connection");
        srv_conn_close(c);
        return BRISK_EIO;
    }
    return 0;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    srv_conn *c = req->data;
    if (c->closing)
        return;
    if (status < 0 || c->rejected) {
        srv_conn_close(c);
        return;
    }
    /* Our FIN is out; drain what the client still sends for a moment so
     * that closing does not reset the connection under its response. */
    c->lingering = 1;
    c->rlen = 0;
    c->discarded = 0;
    int ms = c->h->cfg.head_timeout_ms < SRV_LINGER_MS ? c->h->cfg.head_timeout_ms : SRV_LINGER_MS;
    conn_timer(c, SRV_T_LINGER, ms);
    conn_update_reading(c);
}

static void conn_shutdown(srv_conn *c) {
    c->shutting_down = 1;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
        srv_conn_close(c);
}

void srv_conn_request_done(srv_conn *c, int close_after) {
    c->req = NULL;
    c->serving = 0;
    if (c->closing)
        return;
    if (close_after || c->h->stopping) {
        c->close_after_write = 1;
        c->rlen = 0;
        conn_update_reading(c);
        /* Bounds how long an unread final response may hold the slot. */
        conn_timer(c, SRV_T_LINGER, c->h->cfg.head_timeout_ms);
        if (c->n_writes == 0 && !c->shutting_down)
            conn_shutdown(c);
        return;
    }
    if (c->rlen > 0) {
        /* Pipelined bytes wait; parse them from the loop, not from inside
         * the application's call that finished this request. */
        if (!c->in_process)
            conn_timer(c, SRV_T_PROCESS, 0);
    } else {
        conn_timer(c, SRV_T_IDLE, c->h->cfg.keepalive_idle_ms);
    }
    conn_update_reading(c);
}

static void conn_timer_cb(uv_timer_t *t) {
    srv_conn *c = t->data;
    srv_timer_mode mode = c->tmode;
    c->tmode = SRV_T_NONE;
    switch (mode) {
    case SRV_T_IDLE: srv_conn_close(c); break;
    case SRV_T_HEAD: conn_fail(c, 408, "request head not received in time"); break;
    case SRV_T_BODY: conn_fail(c, 408, "request body not received in time"); break;
    case SRV_T_LINGER: srv_conn_close(c); break;
    case SRV_T_PROCESS: conn_process(c); break;
    case SRV_T_NONE: break;
    }
}

static void on_handle_closed(uv_handle_t *handle) {
    srv_conn *c = handle->data;
    if (--c->open_handles > 0)
        return;
    srv_http *h = c->h;
    srv_req *r = c->req;
    c->req = NULL;
    if (r) {
        if (r->dispatched) {
            /* The application still owns r: detach it and tell it. */
            r->conn = NULL;
            void (*cb)(srv_req *, void *) = r->abort_cb;
            r->abort_cb = NULL;
            if (cb)
                cb(r, r->abort_user);
        } else {
            srv_req_free(r);
        }
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->rejected)
        h->n_rejecting--;
    else
        h->n_conns--;
    free(c->rbuf);
    free(c);
    srv_http_handle_closed(h);
}

void srv_conn_close(srv_conn *c) {
    if (c->closing)
        return;
    c->closing = 1;
    c->reading = 0;
    if (c->req && c->req->dispatched)
        srv_req_mark_aborted(c->h, c->req);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

void srv_conn_close_idle(srv_conn *c) {
    if (!c->closing && !c->serving && !c->req && !c->close_after_write && c->rlen == 0)
        srv_conn_close(c);
}

void srv_conn_abort_now(srv_conn *c) {
    srv_req *r = c->req;
    if (!r || !r->dispatched)
        return;
    srv_req_mark_aborted(c->h, r);
    c->req = NULL;
    r->conn = NULL;
    void (*cb)(srv_req *, void *) = r->abort_cb;
    r->abort_cb = NULL;
    if (cb)
        cb(r, r->abort_user);
}

/* A connection with its handles initialised and linked into h, counted
 * against max_connections (*over: it is beyond the limit). NULL when out of
 * memory. Its socket is attached by the caller, then conn_start(). */
static srv_conn *conn_create(srv_http *h, int *over) {
    srv_conn *c = brisk_calloc(1, sizeof *c);
    if (!c) {
        BRISK_WARN("http: out of memory accepting a connection");
        return NULL;
    }
    c->h = h;
    if (uv_tcp_init(h->loop, &c->tcp) < 0) {
        free(c);
        return NULL;
    }
    uv_timer_init(h->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    h->open_handles++;
    h->stats.total_connections++;
    *over = h->n_conns >= h->cfg.max_connections;
    if (*over) {
        c->rejected = 1;
        h->n_rejecting++;
    } else {
        h->n_conns++;
    }
    return c;
}

/* Serves c once its socket is attached: 503 and close beyond the limit,
 * else the read buffer, the parser, the head timer and reading. */
static void conn_start(srv_conn *c, int over) {
    srv_http *h = c->h;
    if (over) {
        h->stats.rejected_connections++;
        if (h->n_rejecting > SRV_MAX_REJECTING) {
            srv_conn_close(c);
            return;
        }
        c->req = srv_req_create(c);
        if (!c->req) {
            srv_conn_close(c);
            return;
        }
        conn_fail(c, 503, "too many connections");
        return;
    }
    c->rbuf = brisk_malloc(SRV_RBUF_BYTES);
    if (!c->rbuf) {
        srv_conn_close(c);
        return;
    }
    srv_conn_parser_init(&c->parser, &h->settings, c);
    uv_tcp_nodelay(&c->tcp, 1);
    conn_timer(c, SRV_T_HEAD, h->cfg.head_timeout_ms);
    conn_update_reading(c);
    return;
}

/* The peer's address, kept for the audit log (a socket already reset may
 * not tell it later). */
static void conn_note_peer(srv_conn *c) {
    struct sockaddr_storage ss;
    int len = (int)sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        if (uv_ip4_name(a, c->peer, sizeof c->peer) == 0)
            c->peer_port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        if (uv_ip6_name(a, c->peer, sizeof c->peer) == 0)
            c->peer_port = ntohs(a->sin6_port);
    }
    if (!c->peer_port)
        c->peer[0] = '\0';
}

int srv_conn_accept(srv_http *h) {
    int over;
    srv_conn *c = conn_create(h, &over);
    if (!c)
        return BRISK_ENOMEM; /* the caller accepts and drops the socket: libuv needs the accept */
    if (uv_accept((uv_stream_t *)&h->listener, (uv_stream_t *)&c->tcp) < 0) {
        srv_conn_close(c);
        return 0;
    }
    conn_note_peer(c);
    conn_start(c, over);
    return 0;
}

int srv_conn_adopt(srv_http *h, int fd) {
    int over;
    srv_conn *c = conn_create(h, &over);
    if (!c)
        return BRISK_ENOMEM;
    if (uv_tcp_open(&c->tcp, fd) < 0) {
        srv_conn_close(c);
        return BRISK_EIO;
    }
    conn_start(c, over);
    return 0;
}

size_t srv_conn_inject(srv_conn *c, const char *data, size_t len) {
    if (c->closing || !c->reading)
        return 0;
    uv_buf_t buf;
    on_alloc((uv_handle_t *)&c->tcp, len, &buf);
    if (len == 0) {
        on_read((uv_stream_t *)&c->tcp, UV_EOF, &buf);
        return 0;
    }
    size_t n = len < buf.len ? len : buf.len;
    if (n == 0)
        return 0;
    memcpy(buf.base, data, n);
    on_read((uv_stream_t *)&c->tcp, (ssize_t)n, &buf);
    return n;
}
