/* test_srv_http_conn.c - the HTTP/1.1 layer's connections over time, driven
 * over real sockets (the rig: test_srv_http_util.h): keep-alive and
 * pipelining, streaming, aborts (client gone, slow reader, server freed),
 * timeouts, connection limits and draining. Single requests (parsing,
 * routing, auth, CORS, limits, the error map) are test_srv_http.c's. */
#include "test_srv_http_util.h"

/* ---- tests ---- */

static void test_keepalive_pipelining(int port) {
    cli c;
    resp r;
    CHECK(cli_open(&c, port) == 0, "connect");
    for (int i = 0; i < 2; i++) {
        cli_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "keep-alive request %d", i);
        resp_free(&r);
    }
    /* Three requests in one send, the first answered later by a timer: the
     * answers come in order. */
    cli_sends(&c, "GET /async?ms=100 HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\npipe");
    const char *want[3] = {"async", "hello", "pipe"};
    for (int i = 0; i < 3; i++) {
        int rc = cli_read_response(&c, &r);
        CHECK(rc == 0 && r.status == 200 && r.body && strcmp(r.body, want[i]) == 0,
              "pipelined %d: rc %d body %s", i, rc, r.body ? r.body : "(null)");
        resp_free(&r);
    }
    /* Pipelined after Connection: close: only the first is answered. */
    cli_sends(&c, "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\nGET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "close request");
    CHECK(resp_hdr_is(&r, "Connection", "close"), "Connection: close echoed");
    resp_free(&r);
    CHECK(cli_closed(&c), "closed after Connection: close");
    cli_close(&c);

    /* Random pipelines: N requests of random kinds in pieces of random size,
     * with random bodies; each answer matches its request, in order. */
    for (int round = 0; round < 20; round++) {
        CHECK(cli_open(&c, port) == 0, "connect");
        int n = 1 + (int)(rnd() % 6);
        size_t cap = 1 << 20, len = 0;
        char *all = malloc(cap);
        char bodies[6][2100];
        size_t blen[6];
        for (int i = 0; i < n; i++) {
            blen[i] = rnd() % 2000;
            for (size_t k = 0; k < blen[i]; k++)
                bodies[i][k] = (char)(rnd() & 0xff);
            if (rnd() % 2) {
                len +=
                    (size_t)snprintf(all + len, cap - len,
                                     "POST /echo HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", blen[i]);
                memcpy(all + len, bodies[i], blen[i]);
                len += blen[i];
            } else {
                len +=
                    (size_t)snprintf(all + len, cap - len,
                                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
                size_t off = 0;
                while (off < blen[i]) {
                    size_t piece = 1 + rnd() % 300;
                    if (piece > blen[i] - off)
                        piece = blen[i] - off;
                    len += (size_t)snprintf(all + len, cap - len, "%zx\r\n", piece);
                    memcpy(all + len, bodies[i] + off, piece);
                    len += piece;
                    memcpy(all + len, "\r\n", 2);
                    len += 2;
                    off += piece;
                }
                memcpy(all + len, "0\r\n\r\n", 5);
                len += 5;
            }
        }
        size_t off = 0;
        while (off < len) {
            size_t piece = 1 + rnd() % 700;
            if (piece > len - off)
                piece = len - off;
            cli_send(&c, all + off, piece);
            off += piece;
        }
        free(all);
        for (int i = 0; i < n; i++) {
            int rc = cli_read_response(&c, &r);
            CHECK(rc == 0 && r.status == 200 && r.body_len == blen[i] &&
                      memcmp(r.body, bodies[i], blen[i]) == 0,
                  "random pipeline round %d request %d/%d (rc %d, %zu vs %zu bytes)", round, i, n,
                  rc, r.body_len, blen[i]);
            resp_free(&r);
        }
        cli_close(&c);
    }
}

static void test_streaming(int port) {
    resp r;
    cli c;
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=5&ms=5 HTTP/1.1\r\n\r\n");
    int rc = cli_read_response(&c, &r);
    CHECK(rc == 0 && r.status == 200, "stream rc %d", rc);
    CHECK(resp_hdr_is(&r, "Transfer-Encoding", "chunked"), "chunked");
    CHECK(resp_hdr_is(&r, "Cache-Control", "no-cache"), "extra header");
    CHECK(resp_hdr_is(&r, "Content-Type", "text/event-stream"), "content type");
    CHECK(!resp_hdr(&r, "Content-Length", (char[8]){0}, 8), "no Content-Length");
    CHECK(r.chunks == 5, "5 chunks, got %d", r.chunks);
    CHECK(r.body && strcmp(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n") == 0,
          "stream body %s", r.body);
    resp_free(&r);
    /* The connection is reusable after a stream. */
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "after stream");
    resp_free(&r);
    cli_close(&c);
    /* HTTP/1.0 has no chunked coding: raw bytes, then close. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=3&ms=2 HTTP/1.0\r\n\r\n");
    rc = cli_read_response(&c, &r);
    CHECK(rc == 0 && r.status == 200 && !resp_hdr(&r, "Transfer-Encoding", (char[8]){0}, 8) &&
              resp_hdr_is(&r, "Connection", "close") && r.body &&
              strcmp(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\n") == 0,
          "1.0 stream rc %d body %s", rc, r.body ? r.body : "");
    resp_free(&r);
    cli_close(&c);
}

static void active_fn(tsrv *ts, void *arg) {
    *(int *)arg = srv_http_n_active(ts->h);
}

static int n_active(tsrv *ts) {
    int n = -1;
    on_loop(ts, active_fn, &n);
    return n;
}

static void test_aborts(tsrv *ts) {
    int port = ts->port;
    cli c;
    /* Every request so far (async and streamed ones included) was finished
     * before its connection closed: no abort callback may have run. */
    CHECK(atomic_load(&n_abort) == 0, "aborts before the abort tests: %d", atomic_load(&n_abort));
    CHECK(atomic_load(&n_async_done) >= 1 && atomic_load(&n_stream_done) >= 2,
          "async and stream routes ran");
    /* Client gone while an async request waits: one abort callback. */
    int a0 = atomic_load(&n_abort), s0 = atomic_load(&n_async_started);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=30000 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "async dispatched");
    CHECK(n_active(ts) == 1, "one active request");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "abort on disconnect");
    nap_ms(50);
    CHECK(atomic_load(&n_abort) == a0 + 1, "exactly one abort");
    CHECK(n_active(ts) == 0, "no active request after abort");

    /* The app finishes after the abort: srv_respond only frees. */
    a0 = atomic_load(&n_abort);
    s0 = atomic_load(&n_async_started);
    int l0 = atomic_load(&n_late_finished);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=300&late=1 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "late dispatched");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "late abort");
    CHECK(wait_count(&n_late_finished, l0 + 1, 10), "finished after abort");

    /* Client gone during a stream. */
    a0 = atomic_load(&n_abort);
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /stream?n=100000&ms=5 HTTP/1.1\r\n\r\n");
    char b[256];
    CHECK(recv(c.fd, b, sizeof b, 0) > 0, "stream started");
    cli_close(&c);
    CHECK(wait_count(&n_abort, a0 + 1, 10), "abort during stream");
    nap_ms(50);
    CHECK(atomic_load(&n_abort) == a0 + 1, "exactly one stream abort");

    /* A client that does not read its stream: closed once the write queue
     * passes max_write_queue_bytes (256 KiB here). */
    a0 = atomic_load(&n_abort);
    CHECK(cli_open_af(&c, port, AF_INET, 4096) == 0, "connect");
    cli_sends(&c, "GET /stream?n=1000000&ms=1&size=65536 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_abort, a0 + 1, 60), "slow reader aborted");
    cli_close(&c);

    /* A live request released by the app: the client sees a close. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /drop HTTP/1.1\r\n\r\n");
    CHECK(cli_closed(&c), "released request closes the connection");
    cli_close(&c);
    CHECK(atomic_load(&n_abort_flag_wrong) == 0, "srv_req_aborted inside the abort callback");
    CHECK(n_active(ts) == 0, "nothing active");
}

static void test_timeouts(int port) {
    cli c;
    resp r;
    /* The head must arrive within head_timeout_ms (300 ms here). */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    double t0 = now_s();
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408, "head timeout 408 (%d)", r.status);
    CHECK(now_s() - t0 > 0.15, "head timeout not early");
    CHECK(resp_hdr_is(&r, "Connection", "close") && cli_closed(&c), "head timeout closes");
    resp_free(&r);
    cli_close(&c);
    /* A connection that sends nothing at all. */
    CHECK(cli_open(&c, port) == 0, "connect");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408 && cli_closed(&c), "silent client 408");
    resp_free(&r);
    cli_close(&c);
    /* Body bytes stall. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 408, "body timeout 408 (%d)", r.status);
    CHECK(body_has_type(&r, "invalid_request_error") && cli_closed(&c), "body timeout closes");
    resp_free(&r);
    cli_close(&c);
    /* An idle keep-alive connection is closed silently. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 200, "before idle");
    resp_free(&r);
    t0 = now_s();
    CHECK(cli_closed(&c), "idle connection closed");
    CHECK(now_s() - t0 > 0.15, "idle close not early");
    cli_close(&c);
    /* Trickling a body keeps it alive: the body timer is per gap. */
    CHECK(cli_open(&c, port) == 0, "connect");
    cli_sends(&c, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\n");
    for (int i = 0; i < 4; i++) {
        nap_ms(50);
        cli_sends(&c, "x");
    }
    CHECK(cli_read_response(&c, &r) == 0 && (r.status == 200 || r.status == 408),
          "trickled body (%d)", r.status);
    resp_free(&r);
    cli_close(&c);
}

static void test_conn_limits(tsrv *ts) {
    int port = ts->port;
    cli a, b, c;
    resp r;
    /* max_requests_per_conn = 2: the second response closes. */
    CHECK(cli_open(&a, port) == 0, "connect");
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && resp_hdr_is(&r, "Connection", "keep-alive"), "first");
    resp_free(&r);
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && r.status == 200 &&
              resp_hdr_is(&r, "Connection", "close"),
          "second carries close");
    resp_free(&r);
    CHECK(cli_closed(&a), "closed after max requests");
    cli_close(&a);

    /* max_connections = 2: a third one is answered 503 and closed. The two
     * live ones are made to have been accepted by a request each. */
    srv_http_stats_t st;
    double t0 = now_s();
    do {
        on_loop(ts, stats_fn, &st);
    } while (st.open_connections > 0 && now_s() - t0 < 10 && (nap_ms(5), 1));
    CHECK(st.open_connections == 0, "connections drained (%d)", st.open_connections);
    CHECK(cli_open(&a, port) == 0 && cli_open(&b, port) == 0, "connect 2");
    cli_sends(&a, "GET /hello HTTP/1.1\r\n\r\n");
    cli_sends(&b, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&a, &r) == 0 && r.status == 200, "a");
    resp_free(&r);
    CHECK(cli_read_response(&b, &r) == 0 && r.status == 200, "b");
    resp_free(&r);
    CHECK(cli_open(&c, port) == 0, "connect 3");
    cli_sends(&c, "GET /hello HTTP/1.1\r\n\r\n");
    CHECK(cli_read_response(&c, &r) == 0 && r.status == 503, "503 (%d)", r.status);
    CHECK(resp_hdr_is(&r, "Connection", "close") && body_has_type(&r, "server_error"), "503 close");
    CHECK(cli_closed(&c), "503 connection closed");
    resp_free(&r);
    cli_close(&c);
    on_loop(ts, stats_fn, &st);
    CHECK(st.rejected_connections >= 1 && st.open_connections == 2, "stats: rejected %llu open %d",
          (unsigned long long)st.rejected_connections, st.open_connections);

    /* Draining: an idle keep-alive connection is closed, an in-flight
     * request finishes with Connection: close, new connections fail. */
    int s0 = atomic_load(&n_async_started);
    cli_sends(&b, "GET /async?ms=300 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "async in flight");
    on_loop(ts, stop_accepting_fn, NULL);
    CHECK(cli_closed(&a), "idle connection closed on drain");
    CHECK(cli_read_response(&b, &r) == 0 && r.status == 200 &&
              resp_hdr_is(&r, "Connection", "close"),
          "in-flight answered with close");
    resp_free(&r);
    CHECK(cli_closed(&b), "drained connection closed");
    cli_close(&a);
    cli_close(&b);
    CHECK(cli_open(&c, port) != 0, "no new connections after stop_accepting");
    cli_close(&c);
}

/* The aborted requests of test_aborts in the server's counts. */
static void test_stats(tsrv *ts) {
    srv_http_stats_t st;
    on_loop(ts, stats_fn, &st);
    CHECK(st.total_requests >= st.by_class[2] && st.aborted_requests >= 4,
          "totals %llu aborted %llu", (unsigned long long)st.total_requests,
          (unsigned long long)st.aborted_requests);
}

int main(void) {
    /* A hang is a failure: the whole test must end in 5 minutes. */
    alarm(300);

    srv_http_config cfg = srv_http_config_default();
    cfg.api_key = API_KEY;
    cfg.error_body = other_error_body;
    cfg.max_body_bytes = 64 * 1024;
    cfg.max_write_queue_bytes = 256 * 1024;
    tsrv a;
    if (tsrv_start(&a, &cfg, "127.0.0.1") != 0)
        return BT_SUMMARY("test_srv_http_conn");
    test_keepalive_pipelining(a.port);
    test_streaming(a.port);
    brisk_log_set_level(BRISK_LOG_WARN);
    test_aborts(&a);
    test_stats(&a);
    /* Freed with a request in flight: its abort callback runs first, and
     * the loop still finishes. */
    int a0 = atomic_load(&n_abort), s0 = atomic_load(&n_async_started);
    cli c;
    CHECK(cli_open(&c, a.port) == 0, "connect");
    cli_sends(&c, "GET /async?ms=600000 HTTP/1.1\r\n\r\n");
    CHECK(wait_count(&n_async_started, s0 + 1, 10), "dispatched before free");
    tsrv_stop(&a);
    CHECK(atomic_load(&n_abort) == a0 + 1, "abort callback on srv_http_free");
    CHECK(cli_closed(&c), "client sees the close");
    cli_close(&c);

    brisk_log_set_level(BRISK_LOG_INFO);
    cfg = srv_http_config_default();
    cfg.head_timeout_ms = 300;
    cfg.body_idle_timeout_ms = 300;
    cfg.keepalive_idle_ms = 300;
    cfg.log_format = SRV_LOG_JSON;
    tsrv b;
    if (tsrv_start(&b, &cfg, "127.0.0.1") == 0) {
        test_timeouts(b.port);
        tsrv_stop(&b);
    }

    brisk_log_set_level(BRISK_LOG_WARN);
    cfg = srv_http_config_default();
    cfg.max_requests_per_conn = 2;
    cfg.max_connections = 2;
    tsrv l;
    if (tsrv_start(&l, &cfg, "127.0.0.1") == 0) {
        test_conn_limits(&l);
        tsrv_stop(&l);
    }

    return BT_SUMMARY("test_srv_http_conn");
}
