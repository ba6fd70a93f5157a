/* srv_audit.c - the audit log: line formatting (pure) and the loop-owned,
 * buffered, non-blocking writer with its flush timer and reopen (see
 * srv_audit.h). */
#include "server/ops/srv_audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_log.h"
#include "common/brisk_utf8.h"

/* ---- formatting ----------------------------------------------------------- */

/* A JSON string: well-formed UTF-8 is copied, each ill-formed subpart (and a
 * sequence cut at the end) becomes U+FFFD, '"', '\\' and every control
 * character (NUL and DEL included) are escaped. Not the API's writer
 * (srv_api_put_str, server/api): a log line holds no raw control byte, so
 * DEL is escaped here and not there, and \b and \f are \u0008 and \u000c. */
static void ab_json_str(brisk_buf *b, const char *s, size_t len) {
    brisk_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            char esc[8];
            if (c == '"' || c == '\\') {
                esc[0] = '\\';
                esc[1] = (char)c;
                brisk_buf_put(b, esc, 2);
            } else if (c == '\n') {
                brisk_buf_put(b, "\\n", 2);
            } else if (c == '\r') {
                brisk_buf_put(b, "\\r", 2);
            } else if (c == '\t') {
                brisk_buf_put(b, "\\t", 2);
            } else if (c < 0x20 || c == 0x7f) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                brisk_buf_put(b, esc, 6);
            } else {
                brisk_buf_put(b, (const char *)&s[i], 1);
            }
            i++;
            continue;
        }
        size_t n = 0;
        int ok = brisk_utf8_next(s + i, len - i, &n);
        if (n == 0)
            n = 1;
        if (ok == 1)
            brisk_buf_put(b, s + i, n);
        else
            brisk_buf_put(b, "\xEF\xBF\xBD", 3);
        i += n;
    }
    brisk_buf_put(b, "\"", 1);
}

static void ab_key(brisk_buf *b, const char *name) {
    brisk_buf_put(b, ",\"", 2);
    brisk_buf_str(b, name);
    brisk_buf_put(b, "\":", 2);
}

static void ab_opt_str(brisk_buf *b, const char *name, const char *v) {
    ab_key(b, name);
    if (v)
        ab_json_str(b, v, strlen(v));
    else
        brisk_buf_str(b, "null");
}

static void ab_opt_int(brisk_buf *b, const char *name, long long v) {
    ab_key(b, name);
    char num[32];
    if (v < 0)
        snprintf(num, sizeof num, "null");
    else
        snprintf(num, sizeof num, "%lld", v);
    brisk_buf_str(b, num);
}

void srv_audit_format_time(double wall_s, char *out, size_t cap) {
    if (!(wall_s >= 0) || wall_s > 253402300799.0) /* NaN, negative, or past year 9999 */
        wall_s = 0;
    /* Whole milliseconds, rounded: 0.999 s stored as 0.99899.. is still 999 ms. */
    long long ms_total = (long long)(wall_s * 1000.0 + 0.5);
    time_t sec = (time_t)(ms_total / 1000);
    int ms = (int)(ms_total % 1000);
    struct tm tm;
    char day[24] = "1970-01-01T00:00:00";
    if (gmtime_r(&sec, &tm))
        strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03dZ", day, ms);
}

static void ab_prompt(brisk_buf *b, const srv_audit_prompt *p) {
    if (p->text) {
        ab_json_str(b, p->text, p->len);
        return;
    }
    brisk_buf_put(b, "[", 1);
    for (int i = 0; i < p->n_ids; i++) {
        char num[16];
        snprintf(num, sizeof num, "%s%" PRId32, i ? "," : "", p->ids[i]);
        brisk_buf_str(b, num);
    }
    brisk_buf_put(b, "]", 1);
}

char *srv_audit_format(const srv_audit_rec *r, size_t *len) {
    brisk_buf b = {0};
    char t[40];
    srv_audit_format_time(r->wall_s, t, sizeof t);
    brisk_buf_str(&b, "{\"time\":\"");
    brisk_buf_str(&b, t);
    brisk_buf_str(&b, "\"");
    ab_opt_str(&b, "request_id", r->request_id);
    ab_opt_str(&b, "api_key_id", r->api_key_id);
    ab_opt_str(&b, "endpoint", r->endpoint);
    ab_opt_str(&b, "model", r->model);
    ab_opt_int(&b, "status", r->status);
    ab_opt_str(&b, "finish", r->finish);
    ab_opt_int(&b, "prompt_tokens", r->prompt_tokens);
    ab_opt_int(&b, "completion_tokens", r->completion_tokens);
    ab_key(&b, "duration_ms");
    char num[48];
    snprintf(num, sizeof num, "%.3f",
             r->duration_ms >= 0 && r->duration_ms < 1e12 ? r->duration_ms : 0.0);
    brisk_buf_str(&b, num);
    ab_opt_str(&b, "remote_addr", r->remote_addr && r->remote_addr[0] ? r->remote_addr : NULL);
    ab_opt_int(&b, "remote_port", r->remote_port > 0 ? r->remote_port : -1);
    if (r->content) {
        if (r->n_msgs > 0) {
            ab_key(&b, "messages");
            brisk_buf_put(&b, "[", 1);
            for (int i = 0; i < r->n_msgs; i++) {
                brisk_buf_str(&b, i ? ",{\"role\":" : "{\"role\":");
                const char *role = r->msgs[i].role ? r->msgs[i].role : "";
                ab_json_str(&b, role, strlen(role));
                brisk_buf_str(&b, ",\"content\":");
                ab_json_str(&b, r->msgs[i].content ? r->msgs[i].content : "",
                            r->msgs[i].content ? r->msgs[i].len : 0);
                brisk_buf_put(&b, "}", 1);
            }
            brisk_buf_put(&b, "]", 1);
        } else if (r->n_prompts > 0) {
            ab_key(&b, "prompt");
            if (r->n_prompts > 1)
                brisk_buf_put(&b, "[", 1);
            for (int i = 0; i < r->n_prompts; i++) {
                if (i)
                    brisk_buf_put(&b, ",", 1);
                ab_prompt(&b, &r->prompts[i]);
            }
            if (r->n_prompts > 1)
                brisk_buf_put(&b, "]", 1);
        }
        ab_key(&b, "completion");
        if (r->n_completions == 0)
            brisk_buf_str(&b, "null");
        if (r->n_completions > 1)
            brisk_buf_put(&b, "[", 1);
        for (int i = 0; i < r->n_completions; i++) {
            if (i)
                brisk_buf_put(&b, ",", 1);
            const srv_audit_text *c = &r->completions[i];
            ab_json_str(&b, c->text ? c->text : "", c->text ? c->len : 0);
        }
        if (r->n_completions > 1)
            brisk_buf_put(&b, "]", 1);
    }
    brisk_buf_str(&b, "}\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}

/* ---- the writer ------------------------------------------------------------- */

struct srv_audit {
    char *path; /* NULL: stdout */
    int fd;
    int is_stream; /* a pipe, socket or terminal: write only what poll() allows */
    char *buf;
    size_t len, cap;
    int failing; /* the last write failed: the next error is not logged again */
    srv_audit_stats stats;
    uv_timer_t timer;
    int open_handles;
};

static int open_path(const char *path, int *is_stream, char *err, size_t err_len) {
    /* O_NONBLOCK: a FIFO without a reader fails now (ENXIO) instead of
     * blocking the start; on a regular file it changes nothing. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "--audit-log: cannot open '%s': %s", path,
                             strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0) {
        *is_stream = !S_ISREG(st.st_mode);
        if (S_ISREG(st.st_mode) && (st.st_mode & 077))
            BRISK_WARN("--audit-log: '%s' is open to its group or others (mode %03o); the "
                       "audit log may hold private data",
                       path, (unsigned)(st.st_mode & 0777));
    }
    return fd;
}

static void on_timer(uv_timer_t *t) {
    srv_audit_flush(t->data);
}

srv_audit *srv_audit_open(uv_loop_t *loop, const char *path, int flush_ms, char *err,
                          size_t err_len) {
    srv_audit *a = brisk_calloc(1, sizeof *a);
    if (!a) {
        brisk_set_err(err, err_len, BRISK_ENOMEM, "--audit-log: out of memory");
        return NULL;
    }
    if (strcmp(path, "-") == 0) {
        a->fd = STDOUT_FILENO;
        struct stat st;
        a->is_stream = fstat(a->fd, &st) != 0 || !S_ISREG(st.st_mode);
    } else {
        size_t n = strlen(path);
        a->path = brisk_malloc(n + 1);
        if (!a->path) {
            free(a);
            brisk_set_err(err, err_len, BRISK_ENOMEM, "--audit-log: out of memory");
            return NULL;
        }
        memcpy(a->path, path, n + 1);
        a->fd = open_path(path, &a->is_stream, err, err_len);
        if (a->fd < 0) {
            free(a->path);
            free(a);
            return NULL;
        }
    }
    uv_timer_init(loop, &a->timer);
    a->timer.data = a;
    if (flush_ms < 1 || flush_ms > 1000)
        flush_ms = 1000;
    uv_timer_start(&a->timer, on_timer, (uint64_t)flush_ms, (uint64_t)flush_ms);
    a->open_handles = 1;
    return a;
}

static void on_closed(uv_handle_t *h) {
    srv_audit *a = h->data;
    if (--a->open_handles == 0) {
        free(a->buf);
        free(a->path);
        free(a);
    }
}

void srv_audit_close(srv_audit *a) {
    if (!a)
        return;
    srv_audit_flush(a);
    if (a->len)
        BRISK_WARN("audit log: %zu bytes could not be written at exit", a->len);
    if (a->path && a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    uv_close((uv_handle_t *)&a->timer, on_closed);
}

static void note_error(srv_audit *a, const char *what, int e) {
    a->stats.errors++;
    if (!a->failing)
        BRISK_ERROR("audit log: %s failed: %s (counted in brisk_audit_log_errors_total; retried at "
                    "each flush)",
                    what, strerror(e));
    a->failing = 1;
}

static long long count_lines(const char *s, size_t n) {
    long long k = 0;
    for (const char *p = s; (p = memchr(p, '\n', (size_t)(s + n - p))) != NULL; p++)
        k++;
    return k;
}

void srv_audit_flush(srv_audit *a) {
    size_t off = 0;
    while (a->fd >= 0 && off < a->len) {
        size_t n = a->len - off;
        if (a->is_stream) {
            /* A pipe that poll() calls writable takes PIPE_BUF bytes without
             * blocking; a full one keeps the rest for the next flush. */
            struct pollfd pfd = {a->fd, POLLOUT, 0};
            if (poll(&pfd, 1, 0) != 1)
                break;
            if (pfd.revents & POLLNVAL) { /* e.g. stdout closed */
                note_error(a, "write", EBADF);
                break;
            }
            /* POLLERR / POLLHUP: the write below fails and is counted. */
            if (!(pfd.revents & (POLLOUT | POLLERR | POLLHUP)))
                break;
            if (n > 4096)
                n = 4096;
        }
        ssize_t w = write(a->fd, a->buf + off, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) {
            note_error(a, "write", w < 0 ? errno : EIO);
            break;
        }
        if (a->failing)
            BRISK_INFO("audit log: writing again");
        a->failing = 0;
        a->stats.lines += count_lines(a->buf + off, (size_t)w);
        off += (size_t)w;
    }
    if (off) {
        memmove(a->buf, a->buf + off, a->len - off);
        a->len -= off;
    }
}

void srv_audit_write(srv_audit *a, const char *line, size_t len) {
    if (!a)
        return;
    if (!line || a->len + len > SRV_AUDIT_MAX_BUFFER) {
        a->stats.dropped++;
        return;
    }
    if (brisk_grow(&a->buf, &a->cap, a->len + len, 1, 16384, 0) < 0) {
        a->stats.dropped++;
        return;
    }
    memcpy(a->buf + a->len, line, len);
    a->len += len;
    if (a->len >= SRV_AUDIT_FLUSH_BYTES)
        srv_audit_flush(a);
}

int srv_audit_reopen(srv_audit *a) {
    if (!a || !a->path)
        return 0;
    srv_audit_flush(a);
    char err[512];
    int is_stream = 0;
    int fd = open_path(a->path, &is_stream, err, sizeof err);
    if (fd < 0) {
        a->stats.errors++;
        BRISK_ERROR("audit log: reopen: %s (still writing to the old file)", err);
        return fd;
    }
    /* What the old file could not take goes to the new one. */
    if (a->fd >= 0)
        close(a->fd);
    a->fd = fd;
    a->is_stream = is_stream;
    return 0;
}

void srv_audit_get_stats(const srv_audit *a, srv_audit_stats *out) {
    if (a)
        *out = a->stats;
    else
        memset(out, 0, sizeof *out);
}
