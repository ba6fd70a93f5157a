/* srv_http_int.h - internals shared by srv_http.c (server, routing),
 * srv_conn.c (one connection: reading, parsing, timers, writing, closing) and
 * srv_resp.c (the request object and the response API). Not a public API. */
#ifndef SRV_HTTP_INT_H
#define SRV_HTTP_INT_H

#include <llhttp.h>
#include <stdint.h>
#include <uv.h>

#include "server/http/srv_http.h"
#include "server/ops/srv_keys.h"

/* Bytes read from a socket and not yet parsed. While a request is being
 * served, pipelined bytes wait here; reading stops once it is full. */
#define SRV_RBUF_BYTES (16 * 1024)
/* After the last response of a connection: how long we keep draining what the
 * client still sends before closing (lingering close, RFC 9112 9.6), and how
 * much we are willing to throw away. */
#define SRV_LINGER_MS 2000
#define SRV_LINGER_MAX_BYTES (256 * 1024)
/* Connections answered 503 at the same time; beyond, they are just closed. */
#define SRV_MAX_REJECTING 64
/* The next pipelined request is parsed only while fewer response bytes than
 * this wait unsent: a client that pipelines requests and never reads the
 * answers must not make us queue them without bound (1,000 pipelined
 * GET /metrics would otherwise hold 17 MB per connection). A connection then
 * holds at most this, one response and its 16 KiB read buffer. */
#define SRV_PIPELINE_MAX_UNSENT (64 * 1024)

typedef struct srv_conn srv_conn;

/* Where the scan of a request head's bytes for folded lines and a bare-LF
 * end stands (srv_conn.c, conn_scan_head). */
typedef enum {
    SRV_HS_START = 0, /* before the request line (empty lines are skipped) */
    SRV_HS_LINE,      /* inside a line */
    SRV_HS_BOL,       /* at the start of a header line */
    SRV_HS_EOH,       /* the CR of the empty line that ends the head */
    SRV_HS_BODY,      /* past the head: nothing scanned until the message ends */
} srv_head_scan;

typedef struct srv_hdr {
    uint32_t name_off, name_len, val_off, val_len; /* into srv_req.head */
} srv_hdr;

struct srv_req {
    srv_conn *conn; /* NULL once detached from an aborted connection */
    void *app;
    const char *method; /* static string from llhttp, "-" until parsed */

    /* URL and header bytes, each piece NUL-terminated: offsets below. */
    char *head;
    size_t head_len, head_cap;
    size_t head_bytes; /* counted against max_header_bytes (NULs excluded) */
    size_t url_off, url_len, query_off;
    int url_done;
    srv_hdr *hdrs;
    int n_hdrs;
    size_t cap_hdrs;
    int in_field, in_value;

    char *body;
    size_t body_len, body_cap;

    char id[72];
    double t_start;
    int http_minor;
    int keep_alive;  /* what the client asked for (llhttp_should_keep_alive) */
    int force_close; /* this layer decided the connection ends after it */

    const srv_route *route;  /* matched route, NULL for layer errors */
    const char *cors_origin; /* CORS: the Allow-Origin value (h's copy or "*"), or NULL */
    int preflight;           /* a CORS preflight the layer answers */
    int err_status;          /* != 0: the layer answers this instead of a handler */

    int dispatched; /* handed to the application (it must finish it) */
    int aborted;
    int counted_active; /* included in srv_http.n_active */
    int head_sent, streaming, chunked;
    int head_only; /* HEAD request: the head is sent, never a body */
    int status;
    size_t bytes_out;

    void (*abort_cb)(srv_req *r, void *user);
    void *abort_user;

    char log_route[64];
    int log_prompt_tokens, log_completion_tokens;
    double log_ttft_s;
    const char *key_id;  /* key_id_buf, or NULL: none presented or matched */
    char key_id_buf[72]; /* a copy: the key set may be replaced while r lives */
    char *extra_hdrs;    /* srv_req_set_headers: lines the response head carries (owned) */
    void *user;          /* srv_req_set_user */
    char peer[48];       /* copied from the connection: an aborted request outlives it */
    int peer_port;
};

typedef enum {
    SRV_T_NONE = 0,
    SRV_T_IDLE,    /* keep-alive wait for the next request */
    SRV_T_HEAD,    /* the head must be complete before it fires */
    SRV_T_BODY,    /* reset by every body byte, within the body's total deadline */
    SRV_T_LINGER,  /* closing: bounds the final write + drain */
    SRV_T_PROCESS, /* 0 ms: parse buffered pipelined bytes at a safe point */
} srv_timer_mode;

struct srv_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shutdown_req;
    srv_http *h;
    srv_conn *prev, *next;
    llhttp_t parser;

    char *rbuf; /* SRV_RBUF_BYTES, unparsed input */
    size_t rlen;
    size_t discarded; /* bytes drained while lingering */

    srv_req *req;   /* the request being parsed or served */
    int n_requests; /* requests started on this connection */
    int serving;    /* req dispatched, parsing paused */
    int in_process; /* inside conn_process (re-entrancy guard) */
    int reading;    /* uv_read_start active */
    int rejected;   /* over max_connections: 503 then close */
    int close_after_write;
    int shutting_down; /* uv_shutdown issued */
    int lingering;
    int closing;      /* uv_close issued */
    int open_handles; /* tcp + timer still to close */
    int n_writes;     /* uv_write requests in flight */
    srv_timer_mode tmode;
    int parse_status;         /* status chosen by a parser callback that failed */
    const char *parse_reason; /* and its reason (static string) */
    uint64_t body_deadline;   /* uv_now() by which the body must be complete */
    srv_head_scan hs;         /* head scan state of the message being parsed */
    size_t hs_off;            /* rbuf bytes already scanned */
    /* The request line's protocol as scanned: spaces seen, and the first
     * bytes after the last one (llhttp 8 takes RTSP/1.0 and ICE/1.0 too). */
    int rl_line, rl_spaces, rl_proto_len;
    char rl_proto[5];
    char peer[48]; /* the peer's address as text, "" when unknown */
    int peer_port;
};

struct srv_http {
    uv_loop_t *loop;
    srv_http_config cfg;
    const srv_keys *keys; /* NULL: no auth; cfg.api_keys or own_keys */
    srv_keys *own_keys;   /* built from cfg.api_key */
    srv_route *routes;
    int n_routes;
    char *origins;  /* CORS: the allowed origins, NUL-separated (a copy), or NULL */
    int n_origins;  /* 0: CORS off */
    int any_origin; /* "*" among them */
    void *app;
    llhttp_settings_t settings;

    uv_tcp_t listener;
    int listener_open; /* initialised and not yet closed */
    int listening;
    int port;
    int open_handles; /* listener (if open) + connections still to be freed */

    /* A connection that cannot get memory is accepted into `spare` and
     * closed at once: libuv stops watching the listener until every
     * connection it announced has been taken with uv_accept(), so leaving
     * one there would make the server deaf. One announced while the spare is
     * still closing waits (accept_waiting) for its close callback. */
    uv_tcp_t spare;
    int spare_busy;
    int accept_waiting;

    srv_conn *conns;
    int n_conns; /* excluding rejected */
    int n_rejecting;
    int n_active;
    int stopping;    /* stop_accepting called */
    int freeing;     /* srv_http_free called */
    uint64_t rng[4]; /* ids: xoshiro256** seeded from the OS at create */

    /* The loop thread, learnt from the first accept; debug builds assert
     * that public calls come from it. */
    uv_thread_t loop_thread;
    int loop_thread_known;

    srv_http_stats_t stats;
    time_t date_sec;
    char date[40];
};

#ifndef NDEBUG
#define SRV_ASSERT_LOOP(h) srv_http_assert_loop(h)
#else
#define SRV_ASSERT_LOOP(h) ((void)0)
#endif

/* srv_http.c */
void srv_http_assert_loop(const srv_http *h);
void srv_http_handle_closed(srv_http *h);
const srv_route *srv_http_route_for(srv_http *h, srv_req *r, int *status);
int srv_http_allow_list(const srv_http *h, const char *path, char *out, size_t cap);
/* The flags of every route whose path takes path, or-ed (0: none): what an
 * error answered before its route was matched (a 413 on Content-Length, a
 * 405) goes by. */
unsigned srv_http_path_flags(const srv_http *h, const char *path);
/* CORS: the Access-Control-Allow-Origin value for a request's Origin
 * (origin[0, len)): h's copy of the matching entry, "*", or NULL when CORS
 * is off or the origin is not allowed. */
const char *srv_http_cors_origin(const srv_http *h, const char *origin, size_t len);
void srv_http_count_response(srv_http *h, int status);
const char *srv_http_date(srv_http *h);

/* srv_conn.c */
/* Takes the connection the listener announced. Returns 0, or a negative
 * BRISK_E* code when it could not (out of memory), leaving it announced. */
int srv_conn_accept(srv_http *h);
void srv_conn_close(srv_conn *c);
void srv_conn_close_idle(srv_conn *c);
/* Queues a+b+t (copied) as one write. limit_queue: close the connection
 * when the unsent bytes exceed max_write_queue_bytes. Returns 0 or a negative
 * BRISK_E* code, in which case the connection is being closed. */
int srv_conn_write(srv_conn *c, const char *a, size_t alen, const char *b, size_t blen,
                   const char *t, size_t tlen, int limit_queue);
void srv_conn_request_done(srv_conn *c, int close_after);
void srv_conn_abort_now(srv_conn *c);
void srv_conn_dispatch(srv_conn *c);
void srv_conn_parser_settings(llhttp_settings_t *s);
void srv_conn_parser_init(llhttp_t *p, const llhttp_settings_t *s, void *data);
/* Serves fd, an already connected stream (or any descriptor libuv can poll
 * and write, such as a pipe), as if it had just been accepted; the
 * connection owns fd from then on, closed with it. Returns 0, BRISK_ENOMEM,
 * or BRISK_EIO when libuv refuses fd (then the caller still owns it). The
 * HTTP fuzz target drives connections this way, without a socket. */
int srv_conn_adopt(srv_http *h, int fd);
/* Delivers len bytes (len 0: EOF) as if read from c's socket, through the
 * same buffer and read callback as a real read, and only when c is reading
 * (its buffer has room, it is not closing), as a socket would. Returns the
 * bytes taken; the rest is for a later call. May close c: after the loop
 * has run, c may be gone (it leaves h->conns). Fuzzing and tests only. */
size_t srv_conn_inject(srv_conn *c, const char *data, size_t len);

/* srv_resp.c */
srv_req *srv_req_create(srv_conn *c);
void srv_req_free(srv_req *r);
void srv_req_log(srv_http *h, const srv_req *r);
const char *srv_status_reason(int status);
int srv_req_append_head(srv_req *r, const char *at, size_t len);
void srv_req_mark_aborted(srv_http *h, srv_req *r);
void srv_respond_layer_error(srv_req *r, const char *msg);
/* Answers a CORS preflight (r->preflight): 204, 403 or 404. Finishes r. */
void srv_respond_preflight(srv_req *r);

#endif
