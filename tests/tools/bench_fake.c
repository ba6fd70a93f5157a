/* bench_fake.c - the fake OpenAI streaming server (see bench_fake.h). */
#include "tests/tools/bench_fake.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <llhttp.h>

#define MAX_BODY (4u << 20)
#define MAX_EVENTS_PER_WRITE 64

typedef enum {
    M_NORMAL,
    M_BATCH,
    M_SPLIT,
    M_CRLF,
    M_SLOW,
    M_NOUSAGE,
    M_NOALIVE,
    M_EOFBODY,
    M_500,
    M_429,
    M_ERROREVENT,
    M_NOCONTENT,
    M_GARBAGE,
    M_BADHTTP,
    M_CLOSE,
    M_HANG,
    M_HUGE,
    M_ONCE,
    M_JUNK,
    M_BIGHEAD,
    M_LENIENT,
    M_STRICT500,
    M_DRIP,
} fake_mode;

static const struct {
    const char *name;
    fake_mode mode;
} MODES[] = {
    {"fake-batch", M_BATCH},
    {"fake-split", M_SPLIT},
    {"fake-crlf", M_CRLF},
    {"fake-slow", M_SLOW},
    {"fake-nousage", M_NOUSAGE},
    {"fake-noalive", M_NOALIVE},
    {"fake-eof-body", M_EOFBODY},
    {"fake-500", M_500},
    {"fake-429", M_429},
    {"fake-error-event", M_ERROREVENT},
    {"fake-nocontent", M_NOCONTENT},
    {"fake-garbage", M_GARBAGE},
    {"fake-badhttp", M_BADHTTP},
    {"fake-close", M_CLOSE},
    {"fake-hang", M_HANG},
    {"fake-huge", M_HUGE},
    {"fake-once", M_ONCE},
    {"fake-junk", M_JUNK},
    {"fake-bighead", M_BIGHEAD},
    {"fake-lenient", M_LENIENT},
    {"fake-strict500", M_STRICT500},
    {"fake-drip", M_DRIP},
};

/* Stages of a stream. */
enum { S_ROLE, S_TOKENS, S_FINISH, S_USAGE, S_DONE, S_END, S_OVER };

struct bench_fake {
    uv_loop_t *loop;
    uv_tcp_t listener;
    llhttp_settings_t settings;
    int port;
    int closing;
    int open_handles;
    struct fconn *conns;
    bench_fake_stats stats;
    char rbuf[64 * 1024]; /* shared by the connections: a read is consumed at once */
};

typedef struct fconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    llhttp_t parser;
    bench_fake *f;
    struct fconn *prev, *next;
    int n_closed, closing;
    char url[256];
    size_t url_len;
    char *body;
    size_t body_len;
    int too_big;
    /* The response in progress. */
    int active;
    int n_streams; /* streams this connection has served */
    fake_mode mode;
    int chat, stage, tokens_left, n_sent, prompt_tokens, include_usage;
    uint64_t id;
    char *split_buf; /* fake-split: the write being dribbled out */
    size_t split_len, split_off;
} fconn;

typedef struct sb {
    char *p;
    size_t len, cap;
} sb;

static void sb_put(sb *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            abort(); /* test tool: out of memory is fatal */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_fmt(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sb *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---- connections ---- */

/* The client went away while a stream was being sent: count the cut. */
static void note_cut(fconn *c) {
    if (c->active && !c->closing)
        c->f->stats.cut++;
}

static void on_conn_closed(uv_handle_t *h) {
    fconn *c = h->data;
    if (++c->n_closed < 2)
        return;
    bench_fake *f = c->f;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->body);
    free(c->split_buf);
    free(c);
    if (--f->open_handles == 0 && f->closing)
        free(f);
}

static void conn_close(fconn *c) {
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

typedef struct wr {
    uv_write_t req;
    size_t len;
    char data[];
} wr;

static void pump(fconn *c);

static void on_written(uv_write_t *req, int status) {
    fconn *c = req->data;
    free(req);
    if (status < 0) {
        note_cut(c);
        conn_close(c);
        return;
    }
    if (!c->closing && c->active)
        pump(c);
}

static void on_written_free(uv_write_t *req, int status) {
    (void)status;
    free(req);
}

/* Writes data; the next piece of the stream follows when it is written. */
static void send_piece(fconn *c, const char *data, size_t len) {
    wr *w = malloc(sizeof *w + len);
    if (!w)
        abort();
    memcpy(w->data, data, len);
    w->req.data = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
        free(w);
        note_cut(c);
        conn_close(c);
    }
}

/* Writes data and forgets it. */
static void send_once(fconn *c, const char *data, size_t len) {
    wr *w = malloc(sizeof *w + len);
    if (!w)
        abort();
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written_free) < 0) {
        free(w);
        note_cut(c);
        conn_close(c);
    }
}

/* ---- the stream ---- */

static const char *eol(const fconn *c) {
    return c->mode == M_CRLF ? "\r\n" : "\n";
}

/* One SSE event (data line + blank line), chunk-framed unless fake-eof-body. */
static void put_event(fconn *c, sb *b, const char *json) {
    sb ev = {0};
    if (c->mode == M_CRLF)
        sb_put(&ev, ": ping\r\n", 8);
    sb_fmt(&ev, "data: %s%s%s", json, eol(c), eol(c));
    if (c->mode == M_EOFBODY) {
        sb_put(b, ev.p, ev.len);
    } else {
        sb_fmt(b, "%zx\r\n", ev.len);
        sb_put(b, ev.p, ev.len);
        sb_put(b, "\r\n", 2);
    }
    free(ev.p);
}

static void put_chunk(fconn *c, sb *b, const char *text, const char *finish, int role) {
    char json[768];
    if (c->chat)
        snprintf(json, sizeof json,
                 "{\"id\":\"chatcmpl-fake-%llu\",\"object\":\"chat.completion.chunk\","
                 "\"created\":1700000000,\"model\":\"fake\",\"choices\":[{\"index\":0,"
                 "\"delta\":{%s\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":%s%s%s}]}",
                 (unsigned long long)c->id, role ? "\"role\":\"assistant\"," : "", text,
                 finish ? "\"" : "", finish ? finish : "null", finish ? "\"" : "");
    else
        snprintf(json, sizeof json,
                 "{\"id\":\"cmpl-fake-%llu\",\"object\":\"text_completion\",\"created\":1700000000,"
                 "\"model\":\"fake\",\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,"
                 "\"finish_reason\":%s%s%s}]}",
                 (unsigned long long)c->id, text, finish ? "\"" : "", finish ? finish : "null",
                 finish ? "\"" : "");
    put_event(c, b, json);
}

/* Appends the stream's next event to b; 0 when the stream is over. */
static int next_event(fconn *c, sb *b) {
    char json[512];
    switch (c->stage) {
    case S_ROLE:
        c->stage = S_TOKENS;
        if (c->chat) {
            put_chunk(c, b, "", NULL, 1);
            return 1;
        }
        /* fall through */
    case S_TOKENS:
        if (c->tokens_left > 0) {
            if (c->mode == M_ERROREVENT && c->n_sent == 2) {
                put_event(c, b, "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}");
                c->stage = S_DONE;
                return 1;
            }
            if (c->mode == M_GARBAGE && c->n_sent == 1) {
                put_event(c, b, "{oops");
                c->stage = S_DONE;
                return 1;
            }
            put_chunk(c, b, " tok", NULL, 0);
            c->tokens_left--;
            c->n_sent++;
            c->f->stats.tokens++;
            return 1;
        }
        c->stage = S_FINISH;
        /* fall through */
    case S_FINISH:
        c->stage = S_USAGE;
        if (c->mode != M_NOCONTENT) {
            put_chunk(c, b, "", "length", 0);
            return 1;
        }
        /* fall through */
    case S_USAGE:
        c->stage = S_DONE;
        if (c->include_usage && c->mode != M_NOUSAGE) {
            snprintf(json, sizeof json,
                     "{\"id\":\"cmpl-fake-%llu\",\"object\":\"%s\",\"created\":1700000000,"
                     "\"model\":\"fake\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                     "\"completion_tokens\":%d,\"total_tokens\":%d}}",
                     (unsigned long long)c->id,
                     c->chat ? "chat.completion.chunk" : "text_completion", c->prompt_tokens,
                     c->n_sent, c->prompt_tokens + c->n_sent);
            put_event(c, b, json);
            return 1;
        }
        /* fall through */
    case S_DONE:
        c->stage = S_END;
        put_event(c, b, "[DONE]");
        return 1;
    case S_END:
        c->stage = S_OVER;
        if (c->mode != M_EOFBODY) {
            sb_put(b, "0\r\n\r\n", 5);
            return 1;
        }
        return 0;
    default: return 0;
    }
}

static void stream_over(fconn *c) {
    c->active = 0;
    if (c->mode == M_EOFBODY || c->mode == M_NOALIVE) {
        conn_close(c);
        return;
    }
    c->body_len = 0;
    c->url_len = 0;
    llhttp_resume(&c->parser);
}

static void on_timer(uv_timer_t *t) {
    fconn *c = t->data;
    if (!c->closing && c->active)
        pump(c);
}

static void pump(fconn *c) {
    if (c->mode == M_SPLIT && c->split_buf && c->split_off < c->split_len) {
        size_t n = c->split_len - c->split_off;
        if (n > 17)
            n = 17;
        size_t off = c->split_off;
        c->split_off += n;
        if (c->split_off < c->split_len) {
            send_once(c, c->split_buf + off, n);
            uv_timer_start(&c->timer, on_timer, 1, 0);
        } else {
            send_piece(c, c->split_buf + off, n);
        }
        return;
    }
    if (c->mode == M_CLOSE && c->n_sent == 2) {
        conn_close(c);
        return;
    }
    sb b = {0};
    int more = next_event(c, &b);
    if (more && c->mode == M_BATCH)
        for (int i = 1; i < MAX_EVENTS_PER_WRITE && next_event(c, &b);)
            i++;
    if (!more) {
        free(b.p);
        stream_over(c);
        return;
    }
    if (c->mode == M_SPLIT) {
        free(c->split_buf);
        c->split_buf = b.p;
        c->split_len = b.len;
        c->split_off = 0;
        pump(c);
        return;
    }
    /* The stream's last bytes are queued: the connection may take the next
     * request now (a client may send it as soon as it has read them, before
     * our write callback runs). Not for the modes that close after the
     * stream: a close would cancel the queued write. */
    int last = c->stage == S_OVER && c->mode != M_EOFBODY && c->mode != M_NOALIVE;
    if (c->mode == M_SLOW || c->mode == M_DRIP) {
        send_once(c, b.p, b.len);
        free(b.p);
        if (last)
            stream_over(c);
        else
            uv_timer_start(&c->timer, on_timer, c->mode == M_DRIP ? 20 : 2, 0);
        return;
    }
    if (last) {
        send_once(c, b.p, b.len);
        free(b.p);
        stream_over(c);
        return;
    }
    send_piece(c, b.p, b.len);
    free(b.p);
}

/* ---- requests ---- */

static int count_words(const char *s) {
    int n = 0, in = 0;
    for (; s && *s; s++) {
        int sp = *s == ' ' || *s == '\n' || *s == '\t';
        if (!sp && !in)
            n++;
        in = !sp;
    }
    return n;
}

/* The first of max_tokens, temperature and top_p that is present and not a
 * number in its range ([1, inf) integer, [0, 2], (0, 1]), or NULL. */
static const char *invalid_field(const cJSON *j) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "temperature");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(j, "top_p");
    if (mt && (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e9 ||
               mt->valuedouble != (double)(int64_t)mt->valuedouble))
        return "max_tokens";
    if (t && (!cJSON_IsNumber(t) || !(t->valuedouble >= 0 && t->valuedouble <= 2)))
        return "temperature";
    if (tp && (!cJSON_IsNumber(tp) || !(tp->valuedouble > 0 && tp->valuedouble <= 1)))
        return "top_p";
    return NULL;
}

static void respond(fconn *c, int status, const char *ctype, const char *body, int close) {
    sb b = {0};
    sb_fmt(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
           status == 200 ? "OK" : "Error", ctype, strlen(body),
           close ? "Connection: close\r\n" : "");
    sb_put(&b, body, strlen(body));
    send_once(c, b.p, b.len);
    free(b.p);
    if (close)
        conn_close(c);
    else
        llhttp_resume(&c->parser);
}

static void handle(fconn *c) {
    bench_fake *f = c->f;
    f->stats.requests++;
    c->url[c->url_len < sizeof c->url ? c->url_len : sizeof c->url - 1] = '\0';
    const char *method = llhttp_method_name((llhttp_method_t)c->parser.method);
    if (c->too_big) {
        respond(c, 413, "application/json", "{\"error\":{\"message\":\"too big\"}}", 1);
        return;
    }
    if (!strcmp(method, "GET") && !strcmp(c->url, "/v1/models")) {
        respond(c, 200, "application/json",
                "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"object\":\"model\"}]}", 0);
        return;
    }
    if (!strcmp(method, "GET") && !strcmp(c->url, "/stats")) {
        char js[256];
        snprintf(js, sizeof js,
                 "{\"connections\":%llu,\"requests\":%llu,\"tokens\":%llu,\"cut\":%llu}",
                 (unsigned long long)f->stats.connections, (unsigned long long)f->stats.requests,
                 (unsigned long long)f->stats.tokens, (unsigned long long)f->stats.cut);
        respond(c, 200, "application/json", js, 0);
        return;
    }
    int chat = !strcmp(c->url, "/v1/chat/completions");
    if (strcmp(method, "POST") || (!chat && strcmp(c->url, "/v1/completions"))) {
        respond(c, 404, "application/json", "{\"error\":{\"message\":\"not found\"}}", 0);
        return;
    }
    cJSON *j = cJSON_ParseWithLength(c->body ? c->body : "", c->body_len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        respond(c, 400, "application/json", "{\"error\":{\"message\":\"bad json\"}}", 0);
        return;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    const cJSON *iu =
        cJSON_IsObject(so) ? cJSON_GetObjectItemCaseSensitive(so, "include_usage") : NULL;
    c->mode = M_NORMAL;
    int known = !cJSON_IsString(model) || !strcmp(model->valuestring, "fake");
    for (size_t i = 0; cJSON_IsString(model) && i < sizeof MODES / sizeof MODES[0]; i++)
        if (!strcmp(model->valuestring, MODES[i].name)) {
            c->mode = MODES[i].mode;
            known = 1;
        }
    if (!known) {
        cJSON_Delete(j);
        respond(c, 404, "application/json",
                "{\"error\":{\"message\":\"no such model\",\"code\":\"model_not_found\"}}", 0);
        return;
    }
    const char *bad = c->mode == M_LENIENT ? NULL : invalid_field(j);
    if (bad) {
        char msg[160];
        snprintf(msg, sizeof msg, "{\"error\":{\"message\":\"%s is invalid\",\"param\":\"%s\"}}",
                 bad, bad);
        cJSON_Delete(j);
        respond(c, c->mode == M_STRICT500 ? 500 : 400, "application/json", msg, 0);
        return;
    }
    c->chat = chat;
    c->tokens_left = cJSON_IsNumber(mt) && mt->valuedouble >= 0 ? (int)mt->valuedouble : 16;
    c->include_usage = cJSON_IsTrue(iu);
    c->n_sent = 0;
    c->prompt_tokens = 0;
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        for (const cJSON *m = cJSON_IsArray(msgs) ? msgs->child : NULL; m; m = m->next) {
            const cJSON *ct = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (cJSON_IsString(ct))
                c->prompt_tokens += count_words(ct->valuestring);
        }
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (cJSON_IsString(p))
            c->prompt_tokens = count_words(p->valuestring);
    }
    cJSON_Delete(j);
    if (c->mode == M_NOCONTENT)
        c->tokens_left = 0;
    if (c->mode == M_ONCE && c->n_streams > 0) {
        /* As a server whose keep-alive timeout struck just as the request came. */
        conn_close(c);
        return;
    }
    c->n_streams++;
    if (c->mode == M_500 || c->mode == M_429) {
        int st = c->mode == M_500 ? 500 : 429;
        respond(c, st, "application/json",
                st == 500
                    ? "{\"error\":{\"message\":\"internal failure\",\"type\":\"server_error\"}}"
                    : "{\"error\":{\"message\":\"too many requests\",\"type\":"
                      "\"rate_limit_error\"}}",
                0);
        return;
    }
    c->id++;
    c->stage = S_ROLE;
    c->active = 1;
    if (c->mode == M_JUNK) {
        /* 4 KiB of noise instead of a response, then the connection closes. */
        char junk[4096];
        uint64_t x = 0x9e3779b97f4a7c15ull * (c->id + (uint64_t)c->f->stats.requests);
        for (size_t i = 0; i < sizeof junk; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            junk[i] = (char)(x >> 24);
        }
        send_once(c, junk, sizeof junk);
        conn_close(c);
        return;
    }
    if (c->mode == M_BIGHEAD) {
        /* A header line of 100 KiB: over any sane bound on a response head. */
        size_t n = 100 * 1024;
        char *h = malloc(n + 128);
        if (!h)
            abort();
        int k = snprintf(h, 128, "HTTP/1.1 200 OK\r\nX-Big: ");
        memset(h + k, 'b', n);
        memcpy(h + k + n, "\r\n\r\n", 4);
        send_once(c, h, (size_t)k + n + 4);
        free(h);
        return;
    }
    if (c->mode == M_EOFBODY) {
        const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        "Connection: close\r\n\r\n";
        send_once(c, h, strlen(h));
    } else {
        char h[256];
        snprintf(h, sizeof h,
                 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 "Transfer-Encoding: chunked\r\n%s\r\n",
                 c->mode == M_NOALIVE ? "Connection: close\r\n" : "");
        send_once(c, h, strlen(h));
    }
    switch (c->mode) {
    case M_BADHTTP: send_once(c, "zz\r\n", 4); return;
    case M_HANG: return;
    case M_HUGE: {
        size_t n = (size_t)2 << 20;
        char *big = malloc(n + 64);
        if (!big)
            abort();
        int k = snprintf(big, 64, "%zx\r\ndata: ", n + 6);
        memset(big + k, 'a', n);
        send_once(c, big, (size_t)k + n);
        free(big);
        return;
    }
    default: pump(c);
    }
}

/* ---- llhttp (request mode) ---- */

static int on_url(llhttp_t *p, const char *at, size_t len) {
    fconn *c = p->data;
    if (c->url_len + len < sizeof c->url)
        memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
    fconn *c = p->data;
    if (c->body_len + len > MAX_BODY) {
        c->too_big = 1;
        return 0;
    }
    char *b = realloc(c->body, c->body_len + len + 1);
    if (!b)
        abort();
    c->body = b;
    memcpy(b + c->body_len, at, len);
    c->body_len += len;
    b[c->body_len] = '\0';
    return 0;
}

static int on_message_begin(llhttp_t *p) {
    fconn *c = p->data;
    c->url_len = 0;
    c->body_len = 0;
    c->too_big = 0;
    return 0;
}

static int on_message_complete(llhttp_t *p) {
    (void)p;
    return HPE_PAUSED;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    fconn *c = h->data;
    (void)suggested;
    buf->base = c->f->rbuf;
    buf->len = sizeof c->f->rbuf;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    fconn *c = s->data;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        note_cut(c);
        conn_close(c);
        return;
    }
    if (c->active || llhttp_get_errno(&c->parser) == HPE_PAUSED) {
        conn_close(c); /* no pipelining here */
        return;
    }
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (e == HPE_PAUSED) {
        if (llhttp_get_error_pos(&c->parser) != buf->base + nread) {
            conn_close(c);
            return;
        }
        handle(c);
    } else if (e != HPE_OK) {
        conn_close(c);
    }
}

static void on_connection(uv_stream_t *server, int status) {
    bench_fake *f = server->data;
    if (status < 0 || f->closing)
        return;
    fconn *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->f = f;
    uv_tcp_init(f->loop, &c->tcp);
    uv_timer_init(f->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    f->open_handles++;
    c->next = f->conns;
    if (f->conns)
        f->conns->prev = c;
    f->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    f->stats.connections++;
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &f->settings);
    c->parser.data = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_listener_closed(uv_handle_t *h) {
    bench_fake *f = h->data;
    if (--f->open_handles == 0 && f->closing)
        free(f);
}

bench_fake *bench_fake_create(uv_loop_t *loop, const char *host, int port) {
    bench_fake *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->loop = loop;
    llhttp_settings_init(&f->settings);
    f->settings.on_url = on_url;
    f->settings.on_body = on_body;
    f->settings.on_message_begin = on_message_begin;
    f->settings.on_message_complete = on_message_complete;
    struct sockaddr_in addr;
    if (uv_ip4_addr(host, port, &addr) < 0 || uv_tcp_init(loop, &f->listener) < 0) {
        free(f);
        return NULL;
    }
    f->listener.data = f;
    f->open_handles = 1;
    if (uv_tcp_bind(&f->listener, (const struct sockaddr *)&addr, 0) < 0 ||
        uv_listen((uv_stream_t *)&f->listener, 1024, on_connection) < 0) {
        f->closing = 1;
        uv_close((uv_handle_t *)&f->listener, on_listener_closed);
        return NULL;
    }
    struct sockaddr_in got;
    int len = sizeof got;
    uv_tcp_getsockname(&f->listener, (struct sockaddr *)&got, &len);
    f->port = ntohs(got.sin_port);
    return f;
}

int bench_fake_port(const bench_fake *f) {
    return f->port;
}

void bench_fake_get_stats(const bench_fake *f, bench_fake_stats *out) {
    *out = f->stats;
}

void bench_fake_free(bench_fake *f) {
    if (!f || f->closing)
        return;
    f->closing = 1;
    for (fconn *c = f->conns; c; c = c->next)
        conn_close(c);
    uv_close((uv_handle_t *)&f->listener, on_listener_closed);
}

/* ---- on a thread ---- */

struct bench_fake_thread {
    uv_thread_t thread;
    uv_loop_t loop;
    uv_async_t stop;
    uv_sem_t ready;
    bench_fake *f;
    int port;
    bench_fake_stats stats;
};

static void on_stop(uv_async_t *a) {
    bench_fake_thread *t = a->data;
    bench_fake_get_stats(t->f, &t->stats);
    bench_fake_free(t->f);
    uv_close((uv_handle_t *)&t->stop, NULL);
}

static void thread_main(void *arg) {
    bench_fake_thread *t = arg;
    t->f = bench_fake_create(&t->loop, "127.0.0.1", 0);
    t->port = t->f ? bench_fake_port(t->f) : -1;
    uv_sem_post(&t->ready);
    if (t->f)
        uv_run(&t->loop, UV_RUN_DEFAULT);
}

bench_fake_thread *bench_fake_thread_start(int *port) {
    bench_fake_thread *t = calloc(1, sizeof *t);
    if (!t || uv_loop_init(&t->loop) < 0) {
        free(t);
        return NULL;
    }
    uv_async_init(&t->loop, &t->stop, on_stop);
    t->stop.data = t;
    uv_sem_init(&t->ready, 0);
    if (uv_thread_create(&t->thread, thread_main, t) < 0) {
        free(t);
        return NULL;
    }
    uv_sem_wait(&t->ready);
    if (t->port < 0) {
        uv_close((uv_handle_t *)&t->stop, NULL);
        uv_run(&t->loop, UV_RUN_DEFAULT);
        uv_thread_join(&t->thread);
        uv_loop_close(&t->loop);
        free(t);
        return NULL;
    }
    *port = t->port;
    return t;
}

void bench_fake_thread_stop(bench_fake_thread *t, bench_fake_stats *stats) {
    uv_async_send(&t->stop);
    uv_thread_join(&t->thread);
    uv_loop_close(&t->loop);
    uv_sem_destroy(&t->ready);
    if (stats)
        *stats = t->stats;
    free(t);
}
