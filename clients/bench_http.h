/* bench_http.h - brisk-bench's HTTP/1.1 client on libuv: a pool of keep-alive
 * connections to one server, strict llhttp in response mode (chunked bodies
 * decoded by llhttp), and streamed completions read as SSE events whose
 * arrival times give TTFT and ITL.
 *
 * One loop thread does everything; every callback runs on it. Every byte the
 * server sends is hostile: the response head is bounded (64 KiB), one SSE
 * event is bounded (bench_sse), bodies kept for error messages are bounded,
 * a malformed response fails its request (BENCH_ERR_PROTOCOL) and closes the
 * connection; nothing asserts on input.
 *
 * Timing: the clock is read once per socket read (uv_hrtime), so events that
 * arrive in one TCP read share a timestamp, as they would for any client. */
#ifndef BENCH_HTTP_H
#define BENCH_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "clients/bench_stats.h"

/* Where requests go: parsed from --base-url, e.g. "http://10.0.0.5:8000/v1". */
typedef struct bench_target {
    char host[256];        /* name or address as given (an IPv6 address without brackets) */
    int port;              /* 80 when the URL has none */
    char host_header[300]; /* the Host header: "host:port" */
    char prefix[512];      /* path up to and including "/v1", no trailing '/' */
    struct sockaddr_storage addr;
    int addr_len; /* 0 until bench_target_resolve() */
} bench_target;

/* Parses an http:// URL ("https" is refused: brisk-bench speaks plain HTTP;
 * put a TLS proxy in front). The path gets "/v1" appended unless it already
 * ends with it. Returns 0 or BRISK_EINVAL with a message in err. */
int bench_target_parse(const char *base_url, bench_target *t, char *err, size_t err_len);

/* Resolves host (getaddrinfo, once, before the run). 0 or BRISK_EIO. */
int bench_target_resolve(bench_target *t, char *err, size_t err_len);

/* When a call aborts on purpose (bench_call.abort_mode). */
enum {
    BENCH_ABORT_NONE = 0,
    BENCH_ABORT_BEFORE_HEAD, /* as soon as the request is written, before any answer */
    BENCH_ABORT_AFTER,       /* after abort_events content events */
};

typedef struct bench_client bench_client;
typedef struct bench_call bench_call;
struct bench_conn;

/* One HTTP exchange. The caller owns the struct and fills the first block;
 * the client fills the results and calls on_done exactly once (unless
 * bench_call_start() failed), never from inside bench_call_start(). */
struct bench_call {
    const char *method; /* "POST" or "GET" */
    const char *path;   /* e.g. "/v1/completions"; copied into the request at start */
    const char *body;   /* copied at start; may be NULL with body_len 0 */
    size_t body_len;
    int stream;       /* 1: a 200 body is an SSE stream of OpenAI chunks */
    int chat;         /* chunks are chat.completion.chunk (delta.content) */
    double timeout_s; /* the whole exchange, connect included; <= 0: none */
    bench_dvec *itl;  /* gaps between content events are pushed here (s); may be NULL */
    int64_t *events;  /* incremented at every content event (progress); may be NULL */
    /* An abort on purpose (--abort-rate): the client closes the connection
     * at the chosen point and the call ends with BENCH_ERR_ABORTED. A
     * response that ends first, or fails first, ends the call as it would
     * without the abort. */
    int abort_mode;   /* BENCH_ABORT_NONE (0), BENCH_ABORT_BEFORE_HEAD, BENCH_ABORT_AFTER */
    int abort_events; /* BENCH_ABORT_AFTER: after this many content events of a 200
                         stream (0: as soon as its head has arrived) */
    void (*on_done)(bench_call *c);
    void *user;

    /* Results (valid in on_done). Times are uv_hrtime() in seconds. */
    double t_start, t_first, t_last, t_end; /* t_first/t_last: 0 without content */
    int status;                             /* HTTP status; 0 if no response head arrived */
    int err;                                /* bench_err_kind: BENCH_OK or why it failed */
    char err_msg[200];                      /* one line; "" when fine */
    int n_content;                          /* content events (tokens as the server grouped them) */
    int done_seen;                          /* the "[DONE]" marker arrived */
    int64_t usage_prompt, usage_completion; /* -1: no usage in the stream */
    char *resp; /* a non-stream body or an error body, NUL-terminated, bounded; owned
                          by the call: free with bench_call_clear() */
    size_t resp_len;

    /* Internal. */
    struct bench_conn *conn;
    int retried, got_bytes;
};

/* Frees resp; the call may be reused afterwards. */
void bench_call_clear(bench_call *c);

/* Creates a client for target t (resolved) on loop. api_key (NULL: none) is
 * copied. Sets SIGPIPE to ignored for the process. Returns NULL with a
 * message in err. */
bench_client *bench_client_create(uv_loop_t *loop, const bench_target *t, const char *api_key,
                                  char *err, size_t err_len);

/* Sends c on an idle keep-alive connection, or on a new one. A request whose
 * connection was idle and is found closed before any response byte is sent
 * again once on a fresh connection (the server closed it while idle), as
 * browsers and aiohttp do. Returns 0, or a negative BRISK_E* code when
 * nothing could be started (c->err and err_msg say why; on_done will not be
 * called). */
int bench_call_start(bench_client *cl, bench_call *c);

/* Finishes every call in flight with BENCH_ERR_CANCELLED (their on_done runs
 * here) and closes their connections. */
void bench_client_cancel_all(bench_client *cl);

/* Cancels what is in flight, closes every connection and frees the client
 * once the close callbacks have run: run the loop afterwards. */
void bench_client_free(bench_client *cl);

/* Connections open (idle or busy). */
int bench_client_n_open(const bench_client *cl);

/* The monotonic clock the client stamps events with, in seconds. */
double bench_now(void);

#endif
