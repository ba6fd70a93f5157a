/* srv_resp.c - the request object handed to handlers (accessors, abort
 * registration, log fields) and the response API: whole responses, OpenAI
 * error bodies, chunked streaming, release, and the access-log line written
 * when a request is finished or aborted. Loop thread only. */
#include <assert.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "server/http/srv_http_int.h"

/* ---- the request object ---- */

srv_req *srv_req_create(srv_conn *c) {
    srv_req *r = brisk_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    srv_http *h = c->h;
    r->conn = c;
    r->app = h->app;
    r->method = "-";
    r->query_off = SIZE_MAX;
    r->http_minor = 1;
    r->t_start = (double)uv_hrtime() * 1e-9;
    snprintf(r->id, sizeof r->id, "%016llx%016llx", (unsigned long long)srv_http_random_u64(h),
             (unsigned long long)srv_http_random_u64(h));
    r->log_prompt_tokens = -1;
    r->log_completion_tokens = -1;
    r->log_ttft_s = -1.0;
    /* The peer is copied too: an aborted request outlives its connection. */
    memcpy(r->peer, c->peer, sizeof r->peer);
    r->peer_port = c->peer_port;
    return r;
}

void srv_req_free(srv_req *r) {
    if (!r)
        return;
    free(r->head);
    free(r->hdrs);
    free(r->body);
    free(r->extra_hdrs);
    free(r);
}

int srv_req_append_head(srv_req *r, const char *at, size_t len) {
    if (len > SIZE_MAX - r->head_len - 1 ||
        brisk_grow(&r->head, &r->head_cap, r->head_len + len + 1, 1, 512, 0) < 0)
        return BRISK_ENOMEM;
    if (len)
        memcpy(r->head + r->head_len, at, len);
    r->head_len += len;
    r->head[r->head_len] = '\0';
    return 0;
}

const char *srv_req_method(const srv_req *r) {
    return r->method;
}

const char *srv_req_path(const srv_req *r) {
    return r->url_done ? r->head + r->url_off : "";
}

const char *srv_req_query(const srv_req *r) {
    return r->url_done && r->query_off != SIZE_MAX ? r->head + r->query_off : "";
}

const char *srv_req_body(const srv_req *r, size_t *len) {
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

const char *srv_req_header(const srv_req *r, const char *name, size_t *len) {
    size_t n = strlen(name);
    for (int i = 0; i < r->n_hdrs; i++) {
        const srv_hdr *hd = &r->hdrs[i];
        if (hd->name_len == n && strncasecmp(r->head + hd->name_off, name, n) == 0) {
            if (len)
                *len = hd->val_len;
            return r->head + hd->val_off;
        }
    }
    if (len)
        *len = 0;
    return NULL;
}

void *srv_req_app(const srv_req *r) {
    return r->app;
}

const char *srv_req_id(const srv_req *r) {
    return r->id;
}

double srv_req_t_start(const srv_req *r) {
    return r->t_start;
}

int srv_req_aborted(const srv_req *r) {
    return r->aborted;
}

int srv_req_set_headers(srv_req *r, const char *lines) {
    char *t = brisk_strdup(lines);
    if (!t)
        return BRISK_ENOMEM;
    free(r->extra_hdrs);
    r->extra_hdrs = t;
    return 0;
}

const char *srv_req_key_id(const srv_req *r) {
    return r->key_id;
}

const char *srv_req_remote(const srv_req *r, int *port) {
    if (port)
        *port = r->peer_port;
    return r->peer;
}

int srv_req_streaming(const srv_req *r) {
    return r->streaming;
}

void srv_req_log_tokens(const srv_req *r, int *prompt_tokens, int *completion_tokens) {
    *prompt_tokens = r->log_prompt_tokens;
    *completion_tokens = r->log_completion_tokens;
}

void srv_req_set_user(srv_req *r, void *user) {
    r->user = user;
}

void *srv_req_user(const srv_req *r) {
    return r->user;
}

void srv_req_on_abort(srv_req *r, void (*cb)(srv_req *r, void *user), void *user) {
    r->abort_cb = cb;
    r->abort_user = user;
}

void srv_req_set_log_fields(srv_req *r, const char *route, int prompt_tokens, int completion_tokens,
                            double ttft_s) {
    if (route)
        snprintf(r->log_route, sizeof r->log_route, "%s", route);
    else
        r->log_route[0] = '\0';
    r->log_prompt_tokens = prompt_tokens;
    r->log_completion_tokens = completion_tokens;
    r->log_ttft_s = ttft_s;
}

/* ---- access log ---- */

/* name: v, or null when v < 0 (not known). 0 when out of memory. */
static int log_add_opt(cJSON *o, const char *name, double v) {
    return (v >= 0 ? cJSON_AddNumberToObject(o, name, v) : cJSON_AddNullToObject(o, name)) != NULL;
}

void srv_req_log(srv_http *h, const srv_req *r) {
    /* 499: the client went away before any response (nginx's convention). */
    int status = r->head_sent ? r->status : (r->aborted ? 499 : r->status);
    if (h->cfg.on_finish)
        h->cfg.on_finish(h->app, r, status);
    if (!h->cfg.access_log)
        return;
    const char *path = srv_req_path(r);
    if (!path[0])
        path = "-";
    const char *route = r->log_route[0] ? r->log_route : r->route ? r->route->path : "-";
    double dur = (double)uv_hrtime() * 1e-9 - r->t_start;
    char pt[24] = "-", ct[24] = "-", tt[32] = "-";
    if (r->log_prompt_tokens >= 0)
        snprintf(pt, sizeof pt, "%d", r->log_prompt_tokens);
    if (r->log_completion_tokens >= 0)
        snprintf(ct, sizeof ct, "%d", r->log_completion_tokens);
    if (r->log_ttft_s >= 0)
        snprintf(tt, sizeof tt, "%.4f", r->log_ttft_s);
    if (h->cfg.log_format == SRV_LOG_JSON) {
        /* A line missing fields would mislead whoever reads the log: when
         * memory runs out, a short warning replaces it. */
        cJSON *o = cJSON_CreateObject();
        int ok = o && cJSON_AddStringToObject(o, "event", "access") &&
                 cJSON_AddStringToObject(o, "id", r->id) &&
                 cJSON_AddStringToObject(o, "method", r->method) &&
                 cJSON_AddStringToObject(o, "path", path) &&
                 cJSON_AddNumberToObject(o, "status", status) &&
                 cJSON_AddStringToObject(o, "route", route) &&
                 (r->key_id ? cJSON_AddStringToObject(o, "api_key_id", r->key_id)
                            : cJSON_AddNullToObject(o, "api_key_id"));
        ok = ok && log_add_opt(o, "prompt_tokens", r->log_prompt_tokens) &&
             log_add_opt(o, "completion_tokens", r->log_completion_tokens) &&
             log_add_opt(o, "ttft_s", r->log_ttft_s);
        ok = ok && cJSON_AddNumberToObject(o, "duration_s", dur) &&
             cJSON_AddNumberToObject(o, "bytes", (double)r->bytes_out) &&
             cJSON_AddBoolToObject(o, "aborted", r->aborted);
        char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
        if (s)
            BRISK_INFO("%s", s);
        else
            BRISK_WARN("access log: out of memory for the line of %s (status %d)", r->id, status);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        /* The log line is bounded (brisk_log truncates at 1 KiB): long paths
         * are cut here so that the fields after them survive. */
        BRISK_INFO("access id=%s method=%s path=%.200s status=%d route=%.64s key=%s "
                   "prompt_tokens=%s completion_tokens=%s ttft=%s duration=%.4f bytes=%zu%s",
                   r->id, r->method, path, status, route, r->key_id ? r->key_id : "-", pt, ct, tt,
                   dur, r->bytes_out, r->aborted ? " aborted=1" : "");
    }
}

void srv_req_mark_aborted(srv_http *h, srv_req *r) {
    if (r->aborted)
        return;
    r->aborted = 1;
    if (r->counted_active) {
        h->n_active--;
        r->counted_active = 0;
    }
    h->stats.total_requests++;
    h->stats.aborted_requests++;
    srv_req_log(h, r);
}

/* ---- building responses ---- */

const char *srv_status_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: break;
    }
    if (status >= 200 && status < 300)
        return "OK";
    if (status >= 400 && status < 500)
        return "Client Error";
    return "Server Error";
}

/* Whether this response ends the connection. */
static int wants_close(const srv_req *r) {
    const srv_conn *c = r->conn;
    const srv_http *h = c->h;
    return r->force_close || !r->keep_alive || h->stopping ||
           c->n_requests >= h->cfg.max_requests_per_conn;
}

/* The response head in a malloc'ed string; framing: 0 Content-Length (len),
 * 1 chunked, 2 none (body ends with the connection). NULL when out of memory. */
static char *build_head(srv_req *r, int status, const char *ctype, const char *extra, int framing,
                        size_t len, int close, size_t *out_len) {
    srv_http *h = r->conn->h;
    size_t elen = extra ? strlen(extra) : 0;
    int need_crlf = elen >= 1 && (elen < 2 || strcmp(extra + elen - 2, "\r\n") != 0);
    /* Fixed lines below fit in 512 bytes with the 64-byte id and a 40-byte date. */
    static const char expose[] =
        "X-Request-Id, Retry-After, retry-after-ms, x-ratelimit-limit-requests, "
        "x-ratelimit-limit-tokens, x-ratelimit-remaining-requests, "
        "x-ratelimit-remaining-tokens, x-ratelimit-reset-requests, x-ratelimit-reset-tokens";
    char cors[1024] = "";
    if (r->cors_origin && !r->preflight)
        snprintf(cors, sizeof cors,
                 "Access-Control-Allow-Origin: %.600s\r\nVary: Origin\r\n"
                 "Access-Control-Expose-Headers: %s\r\n",
                 r->cors_origin, expose);
    const char *more = r->extra_hdrs ? r->extra_hdrs : "";
    size_t cap = 512 + (ctype ? strlen(ctype) : 0) + elen + strlen(cors) + strlen(more);
    char *s = brisk_malloc(cap);
    if (!s)
        return NULL;
    char cl[48] = "";
    if (framing == 0)
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", len);
    else if (framing == 1)
        snprintf(cl, sizeof cl, "Transfer-Encoding: chunked\r\n");
    int n =
        snprintf(s, cap,
                 "HTTP/1.1 %d %s\r\nServer: brisk\r\nDate: %s\r\nX-Request-Id: %s\r\n"
                 "%s%s%s%s%sConnection: %s\r\n%s%s%s\r\n",
                 status, srv_status_reason(status), srv_http_date(h), r->id,
                 ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "", cl, cors,
                 close ? "close" : "keep-alive", extra ? extra : "", need_crlf ? "\r\n" : "", more);
    if (n < 0 || (size_t)n >= cap) {
        free(s);
        return NULL;
    }
    *out_len = (size_t)n;
    return s;
}

/* Frees a request that no connection waits for any more. */
static void finish_detached(srv_req *r) {
    if (r->conn && r->conn->req == r)
        r->conn->req = NULL;
    srv_req_free(r);
}

static void finish_live(srv_req *r, int close) {
    srv_conn *c = r->conn;
    srv_http *h = c->h;
    if (r->counted_active) {
        h->n_active--;
        r->counted_active = 0;
    }
    h->stats.total_requests++;
    srv_req_log(h, r);
    srv_req_free(r);
    srv_conn_request_done(c, close);
}

static void note_head(srv_req *r, int status) {
    r->head_sent = 1;
    r->status = status;
    srv_http_count_response(r->conn->h, status);
}

void srv_respond(srv_req *r, int status, const char *content_type, const char *body, size_t len,
                 const char *extra_headers) {
    if (!r)
        return;
    if (r->aborted || !r->conn) {
        finish_detached(r);
        return;
    }
    SRV_ASSERT_LOOP(r->conn->h);
    assert(r->dispatched);
    if (r->head_sent) {
        /* Misuse (a whole response after srv_stream_begin): end the stream. */
        assert(!"srv_respond after srv_stream_begin");
        if (len)
            srv_stream_write(r, body, len);
        srv_stream_end(r);
        return;
    }
    if (status < 100 || status > 999)
        status = 500;
    int close = wants_close(r);
    size_t hlen = 0;
    char *head = build_head(r, status, content_type, extra_headers, 0, len, close, &hlen);
    if (!head) {
        srv_conn_close(r->conn); /* marks r aborted */
        finish_detached(r);
        return;
    }
    note_head(r, status);
    /* A response to HEAD announces the length but carries no body. */
    if (strcmp(r->method, "HEAD") == 0)
        len = 0;
    r->bytes_out = len;
    srv_conn_write(r->conn, head, hlen, body, len, NULL, 0, 0);
    free(head);
    if (r->aborted) {
        finish_detached(r);
        return;
    }
    finish_live(r, close);
}

static const char *default_type(int status) {
    if (status == 401)
        return "authentication_error";
    if (status >= 500)
        return "server_error";
    return "invalid_request_error";
}

static void respond_error_msg(srv_req *r, int status, const char *type, const char *param,
                              const char *code, const char *msg, const char *headers) {
    if (r->aborted || !r->conn) {
        finish_detached(r);
        return;
    }
    char extra[512] = "";
    if (headers) {
        snprintf(extra, sizeof extra, "%s", headers);
    } else if (status == 401) {
        snprintf(extra, sizeof extra, "WWW-Authenticate: Bearer\r\n");
    } else if (status == 405) {
        char allow[400];
        if (srv_http_allow_list(r->conn->h, srv_req_path(r), allow, sizeof allow) == 0 && allow[0])
            snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
    }
    /* A route of another API answers in its own error shape, even an error
     * found before the route was matched (by its path then). */
    srv_http *h = r->conn->h;
    unsigned flags = r->route ? r->route->flags : srv_http_path_flags(h, srv_req_path(r));
    if ((flags & SRV_ROUTE_ERROR_BODY) && h->cfg.error_body) {
        char *b = h->cfg.error_body(status, type, code, param, msg);
        if (b) {
            srv_respond(r, status, "application/json", b, strlen(b), extra[0] ? extra : NULL);
            free(b);
            return;
        }
    }
    char *s = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *e = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    if (e && cJSON_AddStringToObject(e, "message", msg) &&
        cJSON_AddStringToObject(e, "type", type ? type : default_type(status)) &&
        (param ? cJSON_AddStringToObject(e, "param", param) : cJSON_AddNullToObject(e, "param")) &&
        (code ? cJSON_AddStringToObject(e, "code", code) : cJSON_AddNullToObject(e, "code")))
        s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (s) {
        srv_respond(r, status, "application/json", s, strlen(s), extra[0] ? extra : NULL);
        cJSON_free(s);
    } else {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        srv_respond(r, 500, "application/json", oom, sizeof oom - 1, NULL);
    }
}

/* Whether s[0, n) is a plain header-name list ("content-type, x-a"): safe to
 * echo in Access-Control-Allow-Headers. */
static int header_list_ok(const char *s, size_t n) {
    if (n == 0 || n > 512)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!(ch == ',' || ch == ' ' || ch == '-' || ch == '_' || (ch >= '0' && ch <= '9') ||
              ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')))
            return 0;
    }
    return 1;
}

void srv_respond_preflight(srv_req *r) {
    char allow[400];
    if (srv_http_allow_list(r->conn->h, srv_req_path(r), allow, sizeof allow) < 0 || !allow[0]) {
        respond_error_msg(r, 404, NULL, NULL, NULL, "Unknown path", NULL);
        return;
    }
    if (!r->cors_origin) {
        respond_error_msg(r, 403, NULL, NULL, "cors_origin_not_allowed",
                          "the request's Origin is not in --allowed-origins", NULL);
        return;
    }
    size_t hn = 0;
    const char *want = srv_req_header(r, "Access-Control-Request-Headers", &hn);
    char extra[2048];
    snprintf(extra, sizeof extra,
             "Access-Control-Allow-Origin: %.600s\r\nVary: Origin\r\n"
             "Access-Control-Allow-Methods: %s\r\nAccess-Control-Allow-Headers: %.*s\r\n"
             "Access-Control-Max-Age: 600\r\n",
             r->cors_origin, allow, want && header_list_ok(want, hn) ? (int)hn : 43,
             want && header_list_ok(want, hn) ? want : "Authorization, Content-Type, X-Request-Id");
    srv_respond(r, 204, NULL, NULL, 0, extra);
}

void srv_respond_error(srv_req *r, int status, const char *type, const char *param,
                       const char *code, const char *fmt, ...) {
    if (!r)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    respond_error_msg(r, status, type, param, code, msg, NULL);
}

srv_error_map srv_error_for_code(int code) {
    switch (code) {
    case BRISK_EINVAL:
    case BRISK_ERANGE:
    case BRISK_EFORMAT:
    case BRISK_EUNSUPPORTED:
        return (srv_error_map){400, "invalid_request_error", NULL, NULL, brisk_strerror(code)};
    case BRISK_ENOTFOUND:
        return (srv_error_map){404, "invalid_request_error", "not_found", NULL,
                               brisk_strerror(code)};
    case BRISK_ENOSPC:
        return (srv_error_map){429, "rate_limit_error", "queue_full", "Retry-After: 1\r\n",
                               "the server's waiting queue is full; retry later"};
    case BRISK_ENOMEM: return (srv_error_map){500, "server_error", NULL, NULL, "out of memory"};
    default: return (srv_error_map){500, "server_error", NULL, NULL, brisk_strerror(code)};
    }
}

void srv_respond_code(srv_req *r, int code, const char *fmt, ...) {
    if (!r)
        return;
    srv_error_map m = srv_error_for_code(code);
    char msg[1024];
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    } else {
        snprintf(msg, sizeof msg, "%s", m.message);
    }
    respond_error_msg(r, m.status, m.type, NULL, m.code, msg, m.headers);
}

void srv_respond_layer_error(srv_req *r, const char *detail) {
    int st = r->err_status;
    char msg[320];
    const char *path = srv_req_path(r);
    switch (st) {
    case 400:
        snprintf(msg, sizeof msg, "Malformed HTTP request%s%s%s", detail ? " (" : "",
                 detail ? detail : "", detail ? ")" : "");
        break;
    case 401:
        snprintf(msg, sizeof msg,
                 "Missing or invalid API key (Authorization: Bearer <key>, or x-api-key: <key>)");
        break;
    case 404: snprintf(msg, sizeof msg, "Unknown path: %.200s", path); break;
    case 405:
        snprintf(msg, sizeof msg, "Method %s is not allowed for %.200s", r->method, path);
        break;
    case 408: snprintf(msg, sizeof msg, "Request timeout: %s", detail ? detail : "too slow"); break;
    case 413: snprintf(msg, sizeof msg, "Request body too large"); break;
    case 414: snprintf(msg, sizeof msg, "Request target too long"); break;
    case 431: snprintf(msg, sizeof msg, "Request header fields too large or too many"); break;
    case 503:
        snprintf(msg, sizeof msg, "Service unavailable: %s", detail ? detail : "overloaded");
        break;
    case 505: snprintf(msg, sizeof msg, "Only HTTP/1.0 and HTTP/1.1 are supported"); break;
    default: snprintf(msg, sizeof msg, "%s", srv_status_reason(st)); break;
    }
    respond_error_msg(r, st, NULL, NULL, NULL, msg, NULL);
}

/* ---- streaming ---- */

int srv_stream_begin(srv_req *r, int status, const char *content_type, const char *extra_headers) {
    if (r->aborted || !r->conn)
        return BRISK_EIO;
    SRV_ASSERT_LOOP(r->conn->h);
    assert(r->dispatched && !r->head_sent);
    if (r->head_sent)
        return BRISK_EINVAL;
    if (status < 100 || status > 999)
        status = 500;
    r->streaming = 1;
    /* HTTP/1.0 has no chunked coding: the body ends when the connection does. */
    r->chunked = r->http_minor >= 1;
    r->head_only = strcmp(r->method, "HEAD") == 0;
    if (!r->chunked)
        r->force_close = 1;
    int close = wants_close(r);
    if (close)
        r->force_close = 1;
    size_t hlen = 0;
    char *head =
        build_head(r, status, content_type, extra_headers, r->chunked ? 1 : 2, 0, close, &hlen);
    if (!head) {
        srv_conn_close(r->conn);
        return BRISK_EIO;
    }
    note_head(r, status);
    srv_conn_write(r->conn, head, hlen, NULL, 0, NULL, 0, 1);
    free(head);
    return r->aborted ? BRISK_EIO : 0;
}

int srv_stream_write(srv_req *r, const char *data, size_t len) {
    if (r->aborted || !r->conn)
        return BRISK_EIO;
    SRV_ASSERT_LOOP(r->conn->h);
    assert(r->head_sent && r->streaming);
    if (!r->head_sent)
        return BRISK_EINVAL;
    if (len == 0 || r->head_only)
        return 0;
    if (r->chunked) {
        char line[32];
        int n = snprintf(line, sizeof line, "%zx\r\n", len);
        srv_conn_write(r->conn, line, (size_t)n, data, len, "\r\n", 2, 1);
    } else {
        srv_conn_write(r->conn, data, len, NULL, 0, NULL, 0, 1);
    }
    r->bytes_out += len;
    return r->aborted ? BRISK_EIO : 0;
}

void srv_stream_end(srv_req *r) {
    if (!r)
        return;
    if (r->aborted || !r->conn) {
        finish_detached(r);
        return;
    }
    assert(r->head_sent && r->streaming);
    if (!r->head_sent) {
        srv_respond(r, 500, NULL, NULL, 0, NULL);
        return;
    }
    if (r->chunked && !r->head_only)
        srv_conn_write(r->conn, "0\r\n\r\n", 5, NULL, 0, NULL, 0, 0);
    if (r->aborted) {
        finish_detached(r);
        return;
    }
    finish_live(r, r->force_close);
}

void srv_req_release(srv_req *r) {
    if (!r)
        return;
    if (!r->aborted && r->conn) {
        /* A live request given up without an answer: the client can only
         * learn it from the connection closing. */
        srv_conn_close(r->conn);
    }
    finish_detached(r);
}
