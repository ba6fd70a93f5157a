/* srv_audit.h - the audit log (--audit-log FILE): one JSON line per finished
 * request under /v1/, written by the loop thread.
 *
 * Lines are appended to a buffer (srv_audit_write) and written with write(2)
 * by a timer (every second, or --audit-log-flush-ms), when the buffer holds 64 KiB, and at srv_audit_close,
 * so a request never waits for the disk. A pipe or socket (--audit-log - on a
 * pipe) is written only as far as poll() says it will take without
 * blocking; the rest waits for the next flush. A failed write keeps the data
 * buffered for the next flush and counts one error (logged once until a write
 * succeeds again); beyond 4 MiB buffered, new lines are dropped and counted.
 * SIGHUP closes and reopens the file (after logrotate renamed it): the
 * server's reload (srv_app.c) calls srv_audit_reopen.
 *
 * srv_audit_format is pure (no I/O, no clock) and unit-tested. */
#ifndef SRV_AUDIT_H
#define SRV_AUDIT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct srv_audit srv_audit;

#define SRV_AUDIT_FLUSH_BYTES (64 * 1024)
#define SRV_AUDIT_MAX_BUFFER (4 * 1024 * 1024)

/* One prompt of /v1/completions: text (UTF-8 expected, anything escaped
 * safely) or token ids. */
typedef struct srv_audit_prompt {
    const char *text;
    size_t len;
    const int32_t *ids; /* used when text is NULL */
    int n_ids;
} srv_audit_prompt;

typedef struct srv_audit_msg {
    const char *role;
    const char *content;
    size_t len;
} srv_audit_msg;

typedef struct srv_audit_text {
    const char *text;
    size_t len;
} srv_audit_text;

/* Everything one line says; strings are borrowed. NULL strings and negative
 * numbers print as JSON null. */
typedef struct srv_audit_rec {
    double wall_s;          /* when the request finished, seconds since the Unix epoch */
    const char *request_id; /* the X-Request-Id brisk answered with */
    const char *api_key_id;
    const char *endpoint; /* the request's path */
    const char *model;
    int status;         /* the HTTP status sent (499: the client left before any) */
    const char *finish; /* "stop", "length", "client_abort", "error", or NULL */
    int prompt_tokens, completion_tokens;
    double duration_ms;
    const char *remote_addr; /* "" or NULL: null */
    int remote_port;         /* 0: null */
    /* Content, written only when content is 1. */
    int content;
    const srv_audit_prompt *prompts; /* /v1/completions: "prompt" (a string, or an array) */
    int n_prompts;
    const srv_audit_msg *msgs; /* /v1/chat/completions: "messages" */
    int n_msgs;
    const srv_audit_text *completions; /* "completion": a string, an array when n > 1 */
    int n_completions;
} srv_audit_rec;

/* The line for rec: malloc'd, one line of valid UTF-8 JSON ending in "\n"
 * (invalid UTF-8 is replaced by U+FFFD, control characters escaped); *len its
 * length. NULL when out of memory. */
char *srv_audit_format(const srv_audit_rec *rec, size_t *len);

/* RFC 3339 UTC with milliseconds, e.g. "2026-11-21T23:02:46.123Z", into out
 * (at least 32 bytes). */
void srv_audit_format_time(double wall_s, char *out, size_t cap);

/* Opens path (O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC, mode 0600; "-": stdout)
 * and starts the flush timer on loop (every flush_ms, 1..1000; others mean
 * 1000). The server's SIGHUP handler calls srv_audit_reopen (srv_app.c). NULL
 * with a one-line reason in err when the file
 * cannot be opened or memory runs out. */
srv_audit *srv_audit_open(uv_loop_t *loop, const char *path, int flush_ms, char *err,
                          size_t err_len);

/* Flushes what it can, closes the file and the handles; the memory goes in
 * their close callbacks (run the loop afterwards). NULL is a no-op. */
void srv_audit_close(srv_audit *a);

/* Appends one line (copied); may flush. */
void srv_audit_write(srv_audit *a, const char *line, size_t len);

/* Writes the buffer (as far as a pipe takes it without blocking). */
void srv_audit_flush(srv_audit *a);

/* Flushes, closes and opens the path again (SIGHUP). Returns 0 or a negative
 * BRISK_E* code; on failure the old file stays in use. */
int srv_audit_reopen(srv_audit *a);

typedef struct srv_audit_stats {
    long long lines;   /* lines fully written */
    long long errors;  /* failed write(2) calls and failed reopens */
    long long dropped; /* lines lost to a full buffer (or no memory) */
} srv_audit_stats;

void srv_audit_get_stats(const srv_audit *a, srv_audit_stats *out);

#endif
