/* srv_http.h - brisk's HTTP/1.1 layer: connections, strict parsing, limits,
 * a declarative route table and a response API (whole and chunked streaming
 * responses, finished synchronously or later).
 *
 * It knows nothing about LLMs or the OpenAI API beyond the shape of its error
 * bodies. Everything here runs on ONE libuv loop thread: once the loop runs,
 * every function below must be called on the thread that runs `loop` (debug
 * builds assert it), and every callback (handler, abort callback) is called on
 * it. Create and listen may happen before the loop thread starts.
 *
 * Request lifecycle and ownership
 * -------------------------------
 * The layer reads one request at a time per connection (pipelined requests are
 * buffered and parsed after the previous response is complete), then calls the
 * route's handler with a `srv_req *`. From that moment the APPLICATION owns the
 * duty to finish the request exactly once, with one of:
 *   - srv_respond() / srv_respond_error()   a whole response;
 *   - srv_stream_end()                      after srv_stream_begin();
 *   - srv_req_release()                     no response (for aborted requests).
 * The finishing call frees the request; the pointer is invalid afterwards. The
 * handler may return without finishing and finish later (e.g. from a uv_async
 * callback), still on the loop thread.
 *
 * If the connection goes away first (client closed it, a write failed, a limit
 * such as max_write_queue_bytes was hit, or srv_http_free() was called), the
 * request becomes ABORTED: srv_req_aborted() returns 1, writes are dropped, and
 * the abort callback (srv_req_on_abort) is called exactly once, on the loop
 * thread, never from inside one of the calls above. The request object stays
 * valid until the application calls a finishing function; on an aborted
 * request those calls only free it (srv_req_release() is the natural one). A
 * request the application finishes before the abort is noticed gets no abort
 * callback. A client that half-closes (EOF) while its request is being served
 * is treated as gone, as nginx does, so that engine work can be cancelled:
 * to notice it, the socket is still read while a request is served, into a
 * bounded buffer (16 KiB) that is parsed only after the response; reading
 * stops when it is full.
 *
 * Errors the layer answers itself (400, 401, 404, 405, 408, 413, 414, 431,
 * 503, 505) never reach a handler.
 *
 * Out of memory: the layer answers 503 where it still can and otherwise
 * closes the connection (a new one it cannot take is accepted and closed at
 * once); it never stops accepting. A write that cannot get memory closes its
 * connection, which aborts the request as a departed client would. */
#ifndef SRV_HTTP_H
#define SRV_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct srv_http srv_http;
typedef struct srv_req srv_req;

typedef enum { SRV_LOG_TEXT = 0, SRV_LOG_JSON = 1 } srv_log_format;

typedef struct srv_http_config {
    size_t max_header_bytes;      /* URL + header names + values; over: 431 (32 KiB) */
    size_t max_uri_bytes;         /* request target; over: 414 (8 KiB) */
    int max_headers;              /* header lines; over: 431 (100) */
    size_t max_body_bytes;        /* Content-Length or chunked total; over: 413 (4 MiB) */
    int head_timeout_ms;          /* whole head must arrive within; else 408 + close (10 s) */
    int body_idle_timeout_ms;     /* longest gap between body bytes; else 408 + close (5 s) */
    int body_total_timeout_ms;    /* whole body must arrive within, from the head's end; else
                                   * 408 + close (60 s): a body dribbled just under the idle
                                   * timeout cannot hold a connection for ever */
    int keepalive_idle_ms;        /* idle keep-alive connection closed silently (75 s) */
    int max_requests_per_conn;    /* the last response carries Connection: close (1000) */
    int max_connections;          /* beyond: 503 + Connection: close (1024) */
    size_t max_write_queue_bytes; /* unsent stream bytes; over: the connection is closed (8 MiB) */
    const char *api_key;          /* NULL or "": no auth. Copied by srv_http_create; its id
                                   * is derived (srv_keys.h). Ignored when api_keys is set. */
    srv_log_format log_format;    /* access-log line format (SRV_LOG_TEXT) */
    int access_log;               /* 1: one INFO line per finished request (1) */
    /* Several keys with ids (srv_keys.h), borrowed: the set must outlive the
     * srv_http. NULL or empty: api_key decides. */
    const struct srv_keys *api_keys;
    /* Called once per finished request (answered or aborted: 499) with its
     * status, on the loop thread, e.g. to count responses or write an audit
     * line; r is still valid during the call (its accessors work) and freed
     * after it. NULL: none. */
    void (*on_finish)(void *app, const srv_req *r, int status);
    /* Called once per request just before its handler runs (after auth), on
     * the loop thread, e.g. to add headers every response of the key carries
     * (srv_req_set_headers). NULL: none. */
    void (*on_dispatch)(void *app, srv_req *r);
    /* CORS, off when NULL or "": origins allowed to call from a browser,
     * comma-separated exact values ("https://chat.example.com"), or "*" for
     * any. Copied by srv_http_create. A request whose Origin is allowed gets
     * Access-Control-Allow-Origin, Vary: Origin and Access-Control-Expose-
     * Headers (X-Request-Id, Retry-After and the rate-limit headers); a
     * preflight (OPTIONS with Origin and Access-Control-Request-Method) to a
     * known path is answered by the layer, before any auth: 204 with the
     * allowed methods and headers, or 403 for an origin not allowed. */
    const char *allowed_origins;
    /* The body of every error answered on a route flagged
     * SRV_ROUTE_ERROR_BODY (srv_respond_error, srv_respond_code, the
     * layer's own 401, 413, ...), for an API whose clients expect another
     * shape than OpenAI's (Anthropic's Messages API): a malloc'd JSON text
     * (the layer frees it) made of the status, OpenAI's type and code
     * (NULL: the status's default type; none), the param (NULL: none) and
     * the message; NULL when out of memory (OpenAI's shape goes out). NULL:
     * every route answers in OpenAI's shape. */
    char *(*error_body)(int status, const char *type, const char *code, const char *param,
                        const char *message);
} srv_http_config;

srv_http_config srv_http_config_default(void);

/* A handler is called on the loop thread once the whole request (head and
 * body) has arrived; see the ownership rules above. */
typedef void (*srv_handler_fn)(srv_req *r);

enum {
    /* requires an API key when keys are set: `Authorization: Bearer <key>`, or
     * `x-api-key: <key>` (Anthropic's header) when no bearer token is given */
    SRV_ROUTE_AUTH = 1u << 0,
    /* errors answered on the route are in srv_http_config.error_body's shape */
    SRV_ROUTE_ERROR_BODY = 1u << 1,
};

/* One row of the route table: exact match of `path` (without the query
 * string) and `method` ("GET", "POST", ...); a path ending in a slash and
 * an asterisk matches every path that begins with what precedes the
 * asterisk and goes on (so "/v1/models/" + "*" takes "/v1/models/org/name",
 * never "/v1/models/"). A GET
 * row answers HEAD too (the head alone goes out). Unknown path: 404; known
 * path with another method: 405 with `Allow:`. The strings are borrowed for
 * the lifetime of the srv_http; the array itself is copied. */
typedef struct srv_route {
    const char *method;
    const char *path;
    srv_handler_fn handler;
    unsigned flags;
} srv_route;

/* Creates the server on `loop` (not yet listening). `app` is handed back by
 * srv_req_app(). Returns NULL and writes err on invalid arguments or when
 * memory runs out. */
srv_http *srv_http_create(uv_loop_t *loop, const srv_http_config *cfg, const srv_route *routes,
                          int n_routes, void *app, char *err, size_t err_len);

/* Binds host (numeric IPv4/IPv6 address or a name such as "localhost") and
 * starts accepting. port 0 picks an ephemeral port (see srv_http_port).
 * Returns 0 or a negative BRISK_E* code with a message in err. Sets SIGPIPE
 * to ignored for the process: a write to a reset socket must fail, not kill
 * the server. */
int srv_http_listen(srv_http *h, const char *host, int port, char *err, size_t err_len);

/* The bound port, or -1 when not listening. */
int srv_http_port(const srv_http *h);

uv_loop_t *srv_http_loop(const srv_http *h);

/* Draining: closes the listener, closes idle keep-alive connections; every
 * response started afterwards carries `Connection: close`. */
void srv_http_stop_accepting(srv_http *h);

/* Requests handed to handlers and not yet finished or aborted. */
int srv_http_n_active(const srv_http *h);

/* Calls the abort callback of every unfinished request (synchronously, here),
 * then closes the listener and every connection. The memory is released by the
 * close callbacks: run the loop afterwards (uv_run) until it returns, then
 * uv_loop_close() succeeds. Do not call from inside a handler or callback of
 * this layer. NULL is a no-op. */
void srv_http_free(srv_http *h);

/* 1 if a parser set up exactly as connections set theirs up has no lenient
 * flag enabled (llhttp strict: no llhttp_set_lenient_* is ever called). */
int srv_http_parser_is_strict(void);

/* Replaces the API keys (a reload of the key file): requests from now on are
 * checked against keys, which is borrowed and must outlive its use (the
 * caller frees the old set: requests keep copies of their key ids). A NULL
 * or empty set is ignored (auth stays on). */
void srv_http_set_keys(srv_http *h, const struct srv_keys *keys);

/* ---- ids ---- */

/* 64 random bits from the server's generator (seeded by the OS at create). */
uint64_t srv_http_random_u64(srv_http *h);
/* out = prefix and n_chars random letters and digits (OpenAI's id shape,
 * e.g. "chatcmpl-" + 29), truncated to cap - 1 bytes, NUL-terminated. */
void srv_http_make_id(srv_http *h, const char *prefix, int n_chars, char *out, size_t cap);

/* ---- statistics ---- */

/* The status codes counted one by one in srv_http_stats_t.by_code. */
#define SRV_HTTP_STAT_CODES                                                                        \
    { 200, 400, 401, 404, 405, 408, 413, 414, 429, 431, 500, 503, 505 }
#define SRV_HTTP_N_STAT_CODES 13

typedef struct srv_http_stats_t {
    int open_connections;          /* accepted and not yet closed (rejected ones excluded) */
    int active_requests;           /* = srv_http_n_active() */
    uint64_t total_connections;    /* accepted, including rejected ones */
    uint64_t rejected_connections; /* answered 503 because of max_connections */
    uint64_t total_requests;       /* requests finished (answered or aborted) */
    uint64_t aborted_requests;     /* requests whose connection went away first */
    uint64_t by_class[6];          /* responses by status class: [2] = 2xx ... [5] = 5xx */
    uint64_t by_code[SRV_HTTP_N_STAT_CODES]; /* parallel to SRV_HTTP_STAT_CODES */
} srv_http_stats_t;

void srv_http_stats(const srv_http *h, srv_http_stats_t *out);

/* ---- the request (borrowed views, valid until the request is finished) ---- */

const char *srv_req_method(const srv_req *r); /* "GET", "POST", ... */
const char *srv_req_path(const srv_req *r);   /* target without the query, e.g. "/v1/models" */
const char *srv_req_query(const srv_req *r);  /* after '?', "" when none */
/* The body (chunked bodies decoded), NUL-terminated for convenience; never
 * NULL ("" with *len 0 when there is none). len may be NULL. */
const char *srv_req_body(const srv_req *r, size_t *len);
/* The first header named `name` (case-insensitive), NUL-terminated, trailing
 * whitespace trimmed; NULL if absent. len may be NULL. */
const char *srv_req_header(const srv_req *r, const char *name, size_t *len);
void *srv_req_app(const srv_req *r);
/* The client's X-Request-Id if it is 1..64 visible ASCII characters, else
 * a fresh random one (32 hex digits). Echoed in the X-Request-Id response
 * header and logged; never used as a response body's id. */
const char *srv_req_id(const srv_req *r);
/* When the first byte of the request arrived: uv_hrtime() in seconds (the
 * same monotonic clock as brisk_now()). */
double srv_req_t_start(const srv_req *r);
int srv_req_aborted(const srv_req *r);
/* The id of the API key the request presented (borrowed from the srv_http's
 * key set), or NULL: auth is off, the route needs none, or the key was wrong. */
const char *srv_req_key_id(const srv_req *r);
/* The peer's address ("192.0.2.1", "::1"), "" when unknown; the port, or 0. */
const char *srv_req_remote(const srv_req *r, int *port);
/* 1 once a streaming response has begun (srv_stream_begin). */
int srv_req_streaming(const srv_req *r);
/* The access-log token counts (-1: not set). */
void srv_req_log_tokens(const srv_req *r, int *prompt_tokens, int *completion_tokens);
/* An application pointer carried by the request (NULL until set), e.g. for
 * on_finish to find the application's state of the request; borrowed. */
void srv_req_set_user(srv_req *r, void *user);
void *srv_req_user(const srv_req *r);

/* Header lines ("Name: v\r\n", trusted: never raw client input) that the
 * response head of r carries, after the others; replaces any set before.
 * 0, or BRISK_ENOMEM (the old ones stay). */
int srv_req_set_headers(srv_req *r, const char *lines);

/* Registers the callback for an abort (see the top of this file); replaces a
 * previous one. Registering on a request already aborted and notified does not
 * call it: check srv_req_aborted(). The callback may call srv_req_release(r). */
void srv_req_on_abort(srv_req *r, void (*cb)(srv_req *r, void *user), void *user);

/* Fields of the access-log line (optional); route is copied (NULL: the
 * matched route's path); tokens < 0 and ttft_s < 0 print as "-". */
void srv_req_set_log_fields(srv_req *r, const char *route, int prompt_tokens, int completion_tokens,
                            double ttft_s);

/* ---- responses (each finishing call frees r) ---- */

/* A whole response: status line, Content-Length, Server, Date, X-Request-Id,
 * Connection, Content-Type (when not NULL), then extra_headers ("Name:
 * v\r\n..." or NULL, trusted: the caller must not put raw client input in
 * it). body is copied; it may be NULL when len is 0. To a HEAD request only
 * the head goes out. Finishes r. */
void srv_respond(srv_req *r, int status, const char *content_type, const char *body, size_t len,
                 const char *extra_headers);

/* An OpenAI-shaped error: {"error":{"message":...,"type":...,"param":...,
 * "code":...}}; param/code NULL print as JSON null; type NULL picks
 * authentication_error for 401, server_error for 5xx and
 * invalid_request_error otherwise. 401 adds `WWW-Authenticate: Bearer`, 405
 * adds `Allow:` from the route table. Finishes r. */
void srv_respond_error(srv_req *r, int status, const char *type, const char *param,
                       const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The one mapping from a BRISK_E* code (common/brisk_error.h) to an HTTP
 * error: status, OpenAI error type and code, and extra headers.
 *   EINVAL, ERANGE, EFORMAT, EUNSUPPORTED  400 invalid_request_error
 *   ENOTFOUND                              404 invalid_request_error, code not_found
 *   ENOSPC (a queue or cache is full)      429 rate_limit_error, code queue_full, Retry-After: 1
 *   ENOMEM                                 500 server_error, "out of memory"
 *   EIO and anything else                  500 server_error */
typedef struct srv_error_map {
    int status;
    const char *type;    /* OpenAI error type */
    const char *code;    /* OpenAI error code, or NULL */
    const char *headers; /* extra response headers ("Name: v\r\n"), or NULL */
    const char *message; /* the default message */
} srv_error_map;
srv_error_map srv_error_for_code(int code);

/* An OpenAI-shaped error for a BRISK_E* code through srv_error_for_code;
 * fmt NULL gives the code's default message. Finishes r. */
void srv_respond_code(srv_req *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Streaming: sends the head with Transfer-Encoding: chunked (HTTP/1.0
 * clients get the raw bytes and the connection closes at the end). Returns 0,
 * or BRISK_EIO when the request is aborted (the app still finishes it). */
int srv_stream_begin(srv_req *r, int status, const char *content_type, const char *extra_headers);
/* Sends one chunk (data copied; len 0 is a no-op). Returns 0, or BRISK_EIO
 * when the request is aborted, including when this write pushed the unsent
 * bytes over max_write_queue_bytes (the connection is then closed and the
 * abort callback follows later on the loop). */
int srv_stream_write(srv_req *r, const char *data, size_t len);
/* Sends the terminating chunk and finishes r. */
void srv_stream_end(srv_req *r);

/* Finishes r without a response. Meant for aborted requests; on a live one
 * the connection is closed (the client sees no response). */
void srv_req_release(srv_req *r);

#endif
