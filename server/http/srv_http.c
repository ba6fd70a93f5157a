/* srv_http.c - the HTTP server object: configuration, the listener, the
 * route table (matching, 404/405, bearer-key auth), draining, statistics and
 * teardown. Connections live in srv_conn.c, requests and responses in
 * srv_resp.c. Everything runs on the loop thread. */
#include <assert.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "common/brisk_rng.h"
#include "server/http/srv_http_int.h"

srv_http_config srv_http_config_default(void) {
    srv_http_config c;
    memset(&c, 0, sizeof c);
    c.max_header_bytes = 32 * 1024;
    c.max_uri_bytes = 8 * 1024;
    c.max_headers = 100;
    c.max_body_bytes = 4 * 1024 * 1024;
    c.head_timeout_ms = 10000;
    c.body_idle_timeout_ms = 5000;
    c.body_total_timeout_ms = 60000;
    c.keepalive_idle_ms = 75000;
    c.max_requests_per_conn = 1000;
    c.max_connections = 1024;
    c.max_write_queue_bytes = 8 * 1024 * 1024;
    c.api_key = NULL;
    c.log_format = SRV_LOG_TEXT;
    c.access_log = 1;
    return c;
}

static int config_check(const srv_http_config *c, char *err, size_t err_len) {
    if (c->max_header_bytes == 0 || c->max_uri_bytes == 0 || c->max_headers <= 0 ||
        c->head_timeout_ms <= 0 || c->body_idle_timeout_ms <= 0 || c->body_total_timeout_ms <= 0 ||
        c->keepalive_idle_ms <= 0 || c->max_requests_per_conn <= 0 || c->max_connections <= 0 ||
        c->max_write_queue_bytes == 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "http config: limits and timeouts must be positive");
    /* Header offsets are stored in 32 bits; 1 GiB of head is absurd anyway. */
    if (c->max_header_bytes > (1u << 30) || c->max_uri_bytes > (1u << 30) ||
        c->max_headers > (1 << 20))
        return brisk_set_err(err, err_len, BRISK_EINVAL, "http config: head limits too large");
    if (c->log_format != SRV_LOG_TEXT && c->log_format != SRV_LOG_JSON)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "http config: unknown log format");
    return 0;
}

srv_http *srv_http_create(uv_loop_t *loop, const srv_http_config *cfg, const srv_route *routes,
                          int n_routes, void *app, char *err, size_t err_len) {
    if (!loop || n_routes < 0 || (n_routes > 0 && !routes)) {
        brisk_set_err(err, err_len, BRISK_EINVAL, "http: invalid arguments");
        return NULL;
    }
    srv_http_config c = cfg ? *cfg : srv_http_config_default();
    if (config_check(&c, err, err_len) < 0)
        return NULL;
    for (int i = 0; i < n_routes; i++) {
        const srv_route *rt = &routes[i];
        if (!rt->method || !rt->method[0] || !rt->path || rt->path[0] != '/' || !rt->handler) {
            brisk_set_err(err, err_len, BRISK_EINVAL,
                          "http: route %d needs a method, a path starting with '/' and a handler",
                          i);
            return NULL;
        }
    }
    srv_http *h = brisk_calloc(1, sizeof *h);
    if (!h)
        goto oom;
    h->loop = loop;
    h->cfg = c;
    /* Ids must not repeat across restarts or replicas: seeded by the OS. */
    uint64_t seed = 0;
    if (uv_random(NULL, NULL, &seed, sizeof seed, 0, NULL) != 0)
        seed = uv_hrtime() ^ ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)h;
    brisk_rng_seed(h->rng, seed);
    h->app = app;
    h->port = -1;
    if (c.api_keys && srv_keys_count(c.api_keys) > 0) {
        h->keys = c.api_keys;
    } else if (c.api_key && c.api_key[0]) {
        h->own_keys = srv_keys_create();
        if (!h->own_keys)
            goto oom;
        char why[160];
        if (srv_keys_add(h->own_keys, NULL, c.api_key, strlen(c.api_key), why, sizeof why) < 0) {
            brisk_set_err(err, err_len, BRISK_EINVAL, "http config: api key: %s", why);
            srv_keys_free(h->own_keys);
            free(h);
            return NULL;
        }
        h->keys = h->own_keys;
    }
    /* The config keeps no pointer to the caller's key string. */
    h->cfg.api_key = NULL;
    if (n_routes > 0) {
        h->routes = brisk_malloc((size_t)n_routes * sizeof *h->routes);
        if (!h->routes)
            goto oom;
        memcpy(h->routes, routes, (size_t)n_routes * sizeof *h->routes);
    }
    h->n_routes = n_routes;
    if (c.allowed_origins && c.allowed_origins[0]) {
        /* "a, b" -> "a\0b\0": trimmed, empty items skipped */
        size_t n = strlen(c.allowed_origins);
        h->origins = brisk_malloc(n + 1);
        if (!h->origins)
            goto oom;
        size_t w = 0;
        for (const char *p = c.allowed_origins; *p;) {
            while (*p == ' ' || *p == ',')
                p++;
            const char *e = p;
            while (*e && *e != ',')
                e++;
            const char *t = e;
            while (t > p && t[-1] == ' ')
                t--;
            if (t > p) {
                memcpy(h->origins + w, p, (size_t)(t - p));
                h->any_origin |= t - p == 1 && *p == '*';
                w += (size_t)(t - p);
                h->origins[w++] = '\0';
                h->n_origins++;
            }
            p = e;
        }
    }
    h->cfg.allowed_origins = NULL;
    srv_conn_parser_settings(&h->settings);
    return h;
oom:
    if (h) {
        srv_keys_free(h->own_keys);
        free(h->routes);
        free(h);
    }
    brisk_set_err(err, err_len, BRISK_ENOMEM, "http: out of memory");
    return NULL;
}

static void free_now(srv_http *h) {
    srv_keys_free(h->own_keys); /* wipes the digests */
    free(h->routes);
    free(h->origins);
    free(h);
}

void srv_http_handle_closed(srv_http *h) {
    assert(h->open_handles > 0);
    h->open_handles--;
    if (h->freeing && h->open_handles == 0)
        free_now(h);
}

static void on_listener_closed(uv_handle_t *handle) {
    srv_http_handle_closed(handle->data);
}

static void close_listener(srv_http *h) {
    if (!h->listener_open)
        return;
    h->listener_open = 0;
    h->listening = 0;
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
}

static void take_connection(srv_http *h);

static void on_spare_closed(uv_handle_t *handle) {
    srv_http *h = handle->data;
    h->spare_busy = 0;
    if (h->accept_waiting && h->listening) {
        h->accept_waiting = 0;
        take_connection(h);
    }
    srv_http_handle_closed(h);
}

/* Out of memory for a connection: accept it into the spare handle and close
 * it, so that the listener keeps being watched (see srv_http_int.h). */
static void drop_connection(srv_http *h) {
    /* uv_tcp_init creates no socket here (AF_UNSPEC), so it does not fail. */
    if (h->spare_busy || uv_tcp_init(h->loop, &h->spare) < 0) {
        h->accept_waiting = 1; /* taken when the spare has closed */
        return;
    }
    h->spare.data = h;
    h->spare_busy = 1;
    h->open_handles++;
    h->stats.total_connections++;
    h->stats.rejected_connections++;
    uv_accept((uv_stream_t *)&h->listener, (uv_stream_t *)&h->spare);
    uv_close((uv_handle_t *)&h->spare, on_spare_closed);
    BRISK_WARN("http: out of memory: a new connection was closed");
}

static void take_connection(srv_http *h) {
    if (srv_conn_accept(h) < 0)
        drop_connection(h);
}

static void on_connection(uv_stream_t *server, int status) {
    srv_http *h = server->data;
    if (status < 0) {
        BRISK_WARN("http: accept failed: %s", uv_strerror(status));
        return;
    }
    if (!h->listening)
        return;
    take_connection(h);
}

int srv_http_listen(srv_http *h, const char *host, int port, char *err, size_t err_len) {
    if (!h || !host || port < 0 || port > 65535)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "http: invalid listen address");
    if (h->listener_open || h->stopping || h->freeing)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "http: already listening or stopped");
    /* A write to a socket the peer has reset must fail with EPIPE, not kill
     * the server: ignore SIGPIPE for the process (as every server must). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0 || !res)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "http: cannot resolve '%s': %s", host,
                             gai_strerror(gai));
    int rc = uv_tcp_init(h->loop, &h->listener);
    if (rc < 0) {
        freeaddrinfo(res);
        return brisk_set_err(err, err_len, BRISK_EIO, "http: %s", uv_strerror(rc));
    }
    h->listener.data = h;
    h->listener_open = 1;
    h->open_handles++;
    rc = UV_EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        rc = uv_tcp_bind(&h->listener, ai->ai_addr, 0);
        if (rc == 0)
            break;
    }
    freeaddrinfo(res);
    /* Listen backlog: the kernel caps it at somaxconn anyway. */
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->listener, 511, on_connection);
    if (rc < 0) {
        close_listener(h);
        return brisk_set_err(err, err_len, BRISK_EIO, "http: cannot listen on %s:%d: %s", host,
                             port, uv_strerror(rc));
    }
    struct sockaddr_storage ss;
    int sslen = (int)sizeof ss;
    rc = uv_tcp_getsockname(&h->listener, (struct sockaddr *)&ss, &sslen);
    if (rc < 0) {
        close_listener(h);
        return brisk_set_err(err, err_len, BRISK_EIO, "http: getsockname: %s", uv_strerror(rc));
    }
    if (ss.ss_family == AF_INET6)
        h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    h->listening = 1;
    BRISK_INFO("http: listening on %s port %d", host, h->port);
    return 0;
}

void srv_http_assert_loop(const srv_http *h) {
    if (!h->loop_thread_known)
        return;
    uv_thread_t self = uv_thread_self();
    assert(uv_thread_equal(&self, &h->loop_thread) && "srv_http used off its loop thread");
    (void)self;
}

int srv_http_port(const srv_http *h) {
    return h && h->listening ? h->port : -1;
}

uv_loop_t *srv_http_loop(const srv_http *h) {
    return h->loop;
}

int srv_http_n_active(const srv_http *h) {
    SRV_ASSERT_LOOP(h);
    return h->n_active;
}

void srv_http_stop_accepting(srv_http *h) {
    if (!h || h->stopping)
        return;
    SRV_ASSERT_LOOP(h);
    h->stopping = 1;
    close_listener(h);
    /* Connections are unlinked only in close callbacks, so the list is stable. */
    for (srv_conn *c = h->conns; c; c = c->next)
        srv_conn_close_idle(c);
}

void srv_http_free(srv_http *h) {
    if (!h || h->freeing)
        return;
    SRV_ASSERT_LOOP(h);
    h->freeing = 1;
    h->stopping = 1;
    /* Abort callbacks first, while the application can still cancel work;
     * then close every handle. Memory goes in the close callbacks. */
    for (srv_conn *c = h->conns; c; c = c->next)
        srv_conn_abort_now(c);
    for (srv_conn *c = h->conns; c; c = c->next)
        srv_conn_close(c);
    close_listener(h);
    if (h->open_handles == 0)
        free_now(h);
}

int srv_http_parser_is_strict(void) {
    llhttp_settings_t s;
    llhttp_t p;
    srv_conn_parser_settings(&s);
    srv_conn_parser_init(&p, &s, NULL);
    return p.lenient_flags == 0;
}

static const int stat_codes[SRV_HTTP_N_STAT_CODES] = SRV_HTTP_STAT_CODES;

void srv_http_count_response(srv_http *h, int status) {
    if (status >= 100 && status < 600)
        h->stats.by_class[status / 100]++;
    for (int i = 0; i < SRV_HTTP_N_STAT_CODES; i++)
        if (stat_codes[i] == status)
            h->stats.by_code[i]++;
}

void srv_http_stats(const srv_http *h, srv_http_stats_t *out) {
    SRV_ASSERT_LOOP(h);
    *out = h->stats;
    out->open_connections = h->n_conns;
    out->active_requests = h->n_active;
}

const char *srv_http_date(srv_http *h) {
    time_t now = time(NULL);
    if (now != h->date_sec || !h->date[0]) {
        struct tm tm;
        if (gmtime_r(&now, &tm) &&
            strftime(h->date, sizeof h->date, "%a, %d %b %Y %H:%M:%S GMT", &tm) > 0) {
            h->date_sec = now;
        } else {
            snprintf(h->date, sizeof h->date, "Thu, 01 Jan 1970 00:00:00 GMT");
        }
    }
    return h->date;
}

/* Matches the presented key against every key (srv_keys_match: its
 * SHA-256 against every key's, in time that does not depend on which key
 * matched or how much of it); sets r->key_id on a match. The key is the
 * bearer token, or without one the x-api-key header, which Anthropic's
 * clients send instead: one key set, two ways to present a key. */
static int auth_ok(const srv_http *h, srv_req *r) {
    size_t n = 0;
    const char *v = srv_req_header(r, "Authorization", &n);
    const char *tok = "";
    size_t tlen = 0;
    /* The scheme is case-insensitive (RFC 9110 11.1); spaces before the token. */
    if (v && n > 6 && strncasecmp(v, "Bearer", 6) == 0 && (v[6] == ' ' || v[6] == '\t')) {
        size_t i = 6;
        while (i < n && (v[i] == ' ' || v[i] == '\t'))
            i++;
        tok = v + i;
        tlen = n - i;
    } else {
        const char *x = srv_req_header(r, "x-api-key", &n);
        if (x) {
            tok = x;
            tlen = n;
        }
    }
    int i = srv_keys_match(h->keys, tok, tlen);
    r->key_id = NULL;
    if (i >= 0) {
        snprintf(r->key_id_buf, sizeof r->key_id_buf, "%s", srv_keys_id(h->keys, i));
        r->key_id = r->key_id_buf;
    }
    return i >= 0;
}

/* Whether a route's path (exact, or a prefix ending in a slash and an
 * asterisk) takes path. */
static int route_path_match(const char *pattern, const char *path) {
    size_t n = strlen(pattern);
    if (n >= 2 && pattern[n - 1] == '*' && pattern[n - 2] == '/')
        return strncmp(pattern, path, n - 1) == 0 && path[n - 1] != '\0';
    return strcmp(pattern, path) == 0;
}

/* Whether a row's method takes method (a GET row takes HEAD). */
static int route_method_match(const char *row, const char *method) {
    return strcmp(row, method) == 0 || (strcmp(method, "HEAD") == 0 && strcmp(row, "GET") == 0);
}

const srv_route *srv_http_route_for(srv_http *h, srv_req *r, int *status) {
    const char *path = srv_req_path(r);
    const char *method = srv_req_method(r);
    const srv_route *match = NULL;
    int path_known = 0;
    for (int i = 0; i < h->n_routes && !match; i++) {
        if (!route_path_match(h->routes[i].path, path))
            continue;
        path_known = 1;
        if (route_method_match(h->routes[i].method, method))
            match = &h->routes[i];
    }
    *status = 0;
    if (!match) {
        *status = path_known ? 405 : 404;
        return NULL;
    }
    if ((match->flags & SRV_ROUTE_AUTH) && h->keys && !auth_ok(h, r))
        *status = 401;
    return match;
}

unsigned srv_http_path_flags(const srv_http *h, const char *path) {
    unsigned f = 0;
    for (int i = 0; path && i < h->n_routes; i++)
        if (route_path_match(h->routes[i].path, path))
            f |= h->routes[i].flags;
    return f;
}

int srv_http_allow_list(const srv_http *h, const char *path, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    int has_get = 0, has_head = 0;
    for (int i = 0; i <= h->n_routes; i++) {
        const char *m;
        if (i < h->n_routes) {
            if (!route_path_match(h->routes[i].path, path))
                continue;
            m = h->routes[i].method;
            int dup = 0;
            for (int j = 0; j < i && !dup; j++)
                dup = route_path_match(h->routes[j].path, path) &&
                      strcmp(h->routes[j].method, m) == 0;
            if (dup)
                continue;
            has_get |= strcmp(m, "GET") == 0;
            has_head |= strcmp(m, "HEAD") == 0;
        } else if (has_get && !has_head) {
            m = "HEAD"; /* GET rows answer HEAD */
        } else {
            break;
        }
        int w = snprintf(out + len, cap - len, "%s%s", len ? ", " : "", m);
        if (w < 0 || (size_t)w >= cap - len) {
            out[len] = '\0';
            return BRISK_ENOSPC;
        }
        len += (size_t)w;
    }
    return 0;
}

const char *srv_http_cors_origin(const srv_http *h, const char *origin, size_t len) {
    if (!h->n_origins || !origin)
        return NULL;
    if (h->any_origin)
        return "*";
    const char *o = h->origins;
    for (int i = 0; i < h->n_origins; i++) {
        size_t n = strlen(o);
        if (n == len && memcmp(o, origin, n) == 0)
            return o;
        o += n + 1;
    }
    return NULL;
}

void srv_http_set_keys(srv_http *h, const struct srv_keys *keys) {
    if (keys && srv_keys_count(keys) > 0)
        h->keys = keys;
}

/* ---- ids ---- */

uint64_t srv_http_random_u64(srv_http *h) {
    return brisk_rng_next(h->rng);
}

void srv_http_make_id(srv_http *h, const char *prefix, int n_chars, char *out, size_t cap) {
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t pl = strlen(prefix), k = 0;
    if (cap == 0)
        return;
    for (; k < pl && k + 1 < cap; k++)
        out[k] = prefix[k];
    uint64_t w = 0;
    for (int i = 0; i < n_chars && k + 1 < cap; i++, k++) {
        if (i % 10 == 0) /* 10 characters per 64 random bits (62^10 < 2^64) */
            w = brisk_rng_next(h->rng);
        out[k] = abc[w % 62];
        w /= 62;
    }
    out[k] = '\0';
}
