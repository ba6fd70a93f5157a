/* test_bench_client.c - brisk-bench's client and driver against the fake
 * OpenAI server (tests/tools/bench_fake.h) running on a thread of its own:
 * URL parsing; streams that are whole, batched, split into 17-byte pieces,
 * CRLF, without usage, on connections that close after each response or
 * whose body ends at close; every hostile answer (HTTP errors, error events,
 * garbage, bad chunking, cut connections, silence, a 2 MiB line) counted as
 * the right kind of failure without a crash; connection reuse; arrivals at a
 * rate; aborts on purpose (every one at its point, seen by the server),
 * deliberately invalid requests against correct, lenient and buggy servers,
 * per-interval figures; and 256 connections from one client thread, whose streamed tokens
 * per second is printed (the >= 50,000 tok/s claim is measured by
 * bench/client_overhead.sh, not asserted here: sanitizer builds are slower). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "clients/bench_http.h"
#include "clients/bench_run.h"
#include "clients/bench_workload.h"
#include "common/brisk_error.h"
#include "tests/tools/bench_fake.h"

static int g_port;

static void test_urls(void) {
    bench_target t;
    char err[256];
    CHECK(bench_target_parse("http://127.0.0.1:8080", &t, err, sizeof err) == 0, "plain");
    CHECK(!strcmp(t.host, "127.0.0.1") && t.port == 8080 && !strcmp(t.prefix, "/v1") &&
              !strcmp(t.host_header, "127.0.0.1:8080"),
          "host %s port %d prefix %s", t.host, t.port, t.prefix);
    CHECK(bench_target_parse("http://h/v1/", &t, err, sizeof err) == 0 && t.port == 80 &&
              !strcmp(t.prefix, "/v1"),
          "default port, /v1/ kept once: %s", t.prefix);
    CHECK(bench_target_parse("http://h:9/openai", &t, err, sizeof err) == 0 &&
              !strcmp(t.prefix, "/openai/v1"),
          "a path prefix: %s", t.prefix);
    CHECK(bench_target_parse("HTTP://[::1]:8000/v1", &t, err, sizeof err) == 0 &&
              !strcmp(t.host, "::1") && !strcmp(t.host_header, "[::1]:8000"),
          "IPv6: %s %s", t.host, t.host_header);
    const char *bad[] = {"https://h",   "ftp://h",     "http://",        "http://:80",
                         "http://h:",   "http://h:0",  "http://h:99999", "http://u@h",
                         "http://h/?q", "http://[::1", "http://h:8a",    NULL};
    for (int i = 0; bad[i]; i++) {
        int rc = bench_target_parse(bad[i], &t, err, sizeof err);
        CHECK(rc == BRISK_EINVAL && bt_one_line(err), "'%s' rejected", bad[i]);
    }
    CHECK(bench_target_parse(NULL, &t, err, sizeof err) == BRISK_EINVAL, "NULL");
}

typedef struct run_opts {
    const char *model;
    int chat;
    int n, conc, out_len;
    double rate, timeout_s;
    int port; /* 0: the fake server */
    double abort_rate, invalid_rate, interval_s, duration_s;
    uint64_t seed;
} run_opts;

/* Runs one level against the fake server; res owns the records. */
static void run(const run_opts *ro, bench_level_result *res) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    bench_target t;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ro->port ? ro->port : g_port);
    CHECK(bench_target_parse(url, &t, err, sizeof err) == 0 &&
              bench_target_resolve(&t, err, sizeof err) == 0,
          "target: %s", err);
    bench_client *cl = bench_client_create(&loop, &t, "secret", err, sizeof err);
    bench_workload w;
    bench_workload_cfg wc;
    memset(&wc, 0, sizeof wc);
    wc.chat = ro->chat;
    wc.model = ro->model;
    wc.input_len = 8;
    wc.output_len = ro->out_len;
    wc.ignore_eos = 1;
    wc.abort_rate = ro->abort_rate;
    wc.invalid_rate = ro->invalid_rate;
    wc.seed = ro->seed;
    CHECK(bench_workload_init(&w, &wc, err, sizeof err) == 0, "workload");
    bench_run_cfg rc;
    memset(&rc, 0, sizeof rc);
    rc.path = ro->chat ? "/v1/chat/completions" : "/v1/completions";
    rc.chat = ro->chat;
    rc.num_prompts = ro->n;
    rc.burstiness = 1;
    rc.timeout_s = ro->timeout_s > 0 ? ro->timeout_s : 10;
    rc.interval_s = ro->interval_s;
    rc.duration_s = ro->duration_s;
    rc.seed = ro->seed;
    bench_runner *r = bench_runner_create(&loop, cl, &w, &rc, 0);
    bench_level lv = {ro->conc, ro->rate};
    bench_runner_level(r, &lv, res);
    CHECK(bench_level_result_compute(res, NULL, 0) == 0, "compute");
    bench_runner_free(r);
    bench_client_free(cl);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0, "%s: every handle closed", ro->model);
    bench_workload_free(&w);
}

static void on_stats_done(bench_call *c) {
    *(int *)c->user = 1;
}

/* The fake server's counters, through GET /stats. */
static void fake_stats(bench_fake_stats *st) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    bench_target t;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", g_port);
    bench_target_parse(url, &t, err, sizeof err);
    bench_target_resolve(&t, err, sizeof err);
    bench_client *cl = bench_client_create(&loop, &t, NULL, err, sizeof err);
    bench_call c;
    memset(&c, 0, sizeof c);
    c.method = "GET";
    c.path = "/stats";
    c.timeout_s = 5;
    int done = 0;
    c.user = &done;
    c.on_done = on_stats_done;
    memset(st, 0, sizeof *st);
    if (bench_call_start(cl, &c) == 0)
        while (!done)
            uv_run(&loop, UV_RUN_ONCE);
    cJSON *j = c.resp ? cJSON_Parse(c.resp) : NULL;
    CHECK(j != NULL, "stats answered");
    if (j) {
        st->connections = (uint64_t)cJSON_GetObjectItem(j, "connections")->valuedouble;
        st->requests = (uint64_t)cJSON_GetObjectItem(j, "requests")->valuedouble;
        st->tokens = (uint64_t)cJSON_GetObjectItem(j, "tokens")->valuedouble;
        st->cut = (uint64_t)cJSON_GetObjectItem(j, "cut")->valuedouble;
    }
    cJSON_Delete(j);
    bench_call_clear(&c);
    bench_client_free(cl);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static void expect_ok(const char *model, int chat, int n, int conc, int out_len) {
    run_opts ro = {.model = model, .chat = chat, .n = n, .conc = conc, .out_len = out_len};
    bench_level_result res;
    run(&ro, &res);
    const bench_metrics *m = &res.m;
    CHECK(m->completed == n && m->failed == 0, "%s: %lld ok, %lld failed (%s)", model,
          (long long)m->completed, (long long)m->failed, res.first_error);
    CHECK(m->total_output == (int64_t)n * out_len, "%s: %lld tokens", model,
          (long long)m->total_output);
    CHECK(m->out_mismatch == 0, "%s: every request got its max_tokens", model);
    int usage = strcmp(model, "fake-nousage") != 0;
    CHECK(m->usage_missing == (usage ? 0 : n), "%s: usage", model);
    if (usage)
        CHECK(m->total_input == (int64_t)n * 8, "%s: prompt tokens from usage %lld", model,
              (long long)m->total_input);
    /* n requests of out_len events: n * (out_len - 1) gaps. */
    CHECK(m->itl_ms.n == (int64_t)n * (out_len - 1), "%s: %lld ITL samples", model,
          (long long)m->itl_ms.n);
    CHECK(m->ttft_ms.n == n && m->ttft_ms.min > 0 && m->e2e_ms.min >= m->ttft_ms.min, "%s: times",
          model);
    bench_level_result_free(&res);
}

static void expect_fail(const char *model, int kind, int status, double timeout_s) {
    run_opts ro = {.model = model, .n = 4, .conc = 2, .out_len = 6, .timeout_s = timeout_s};
    bench_level_result res;
    run(&ro, &res);
    const bench_metrics *m = &res.m;
    CHECK(m->completed == 0 && m->failed == 4, "%s: %lld ok, %lld failed", model,
          (long long)m->completed, (long long)m->failed);
    CHECK(m->by_kind[kind] == 4, "%s: kind %s, first error: %s", model, bench_err_name(kind),
          res.first_error);
    if (status)
        CHECK(m->n_status == 1 && m->by_status[0].status == status && m->by_status[0].n == 4,
              "%s: status %d", model, status);
    CHECK(res.first_error[0] && bt_one_line(res.first_error), "%s: a one-line reason", model);
    bench_level_result_free(&res);
}

static void test_streams(void) {
    bench_fake_stats before, after;
    fake_stats(&before);
    expect_ok("fake", 0, 40, 4, 8);
    fake_stats(&after);
    /* 4 keep-alive connections carry the 40 requests (+1 for the stats call). */
    CHECK(after.connections - before.connections <= 5, "keep-alive: %llu new connections",
          (unsigned long long)(after.connections - before.connections));
    expect_ok("fake", 1, 20, 4, 8); /* chat */
    expect_ok("fake-batch", 0, 20, 4, 100);
    expect_ok("fake-split", 0, 4, 2, 4);
    expect_ok("fake-crlf", 1, 10, 2, 5);
    expect_ok("fake-nousage", 0, 10, 2, 5);
    fake_stats(&before);
    expect_ok("fake-noalive", 0, 10, 2, 5);
    fake_stats(&after);
    CHECK(after.connections - before.connections >= 10, "Connection: close honoured");
    expect_ok("fake-eof-body", 0, 10, 2, 5);
    /* A reused connection found closed before any answer: sent again, once. */
    fake_stats(&before);
    expect_ok("fake-once", 0, 12, 3, 5);
    fake_stats(&after);
    CHECK(after.connections - before.connections >= 12, "one fresh connection per request: %llu",
          (unsigned long long)(after.connections - before.connections));
    expect_ok("fake", 0, 5, 1, 1); /* one token: no ITL, no TPOT */

    /* ITL is measured: 2 ms between events. */
    run_opts ro = {.model = "fake-slow", .n = 4, .conc = 4, .out_len = 20};
    bench_level_result res;
    run(&ro, &res);
    CHECK(res.m.completed == 4 && res.m.itl_ms.median > 1.5 && res.m.itl_ms.median < 20,
          "slow: ITL median %g ms", res.m.itl_ms.median);
    CHECK(res.m.tpot_ms.mean > 1.5, "slow: TPOT %g ms", res.m.tpot_ms.mean);
    bench_level_result_free(&res);
}

static void test_failures(void) {
    expect_fail("fake-500", BENCH_ERR_HTTP, 500, 0);
    expect_fail("fake-429", BENCH_ERR_HTTP, 429, 0);
    expect_fail("fake-error-event", BENCH_ERR_STREAM, 0, 0);
    expect_fail("fake-nocontent", BENCH_ERR_NO_CONTENT, 0, 0);
    expect_fail("fake-garbage", BENCH_ERR_PROTOCOL, 0, 0);
    expect_fail("fake-badhttp", BENCH_ERR_PROTOCOL, 0, 0);
    expect_fail("fake-close", BENCH_ERR_CLOSED, 0, 0);
    expect_fail("fake-huge", BENCH_ERR_PROTOCOL, 0, 0);
    expect_fail("fake-hang", BENCH_ERR_TIMEOUT, 0, 0.3);
    expect_fail("fake-junk", BENCH_ERR_PROTOCOL, 0, 0);
    expect_fail("fake-bighead", BENCH_ERR_PROTOCOL, 0, 0);
    /* Nobody listening: connect errors, and the run still ends. */
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_tcp_t probe;
    struct sockaddr_in a;
    uv_tcp_init(&loop, &probe);
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_bind(&probe, (const struct sockaddr *)&a, 0);
    int len = sizeof a;
    uv_tcp_getsockname(&probe, (struct sockaddr *)&a, &len);
    int dead = ntohs(a.sin_port); /* bound, not listening: connections are refused */
    run_opts ro = {.model = "fake", .n = 3, .conc = 2, .out_len = 4, .timeout_s = 2, .port = dead};
    bench_level_result res;
    run(&ro, &res);
    CHECK(res.m.failed == 3 && res.m.by_kind[BENCH_ERR_CONNECT] == 3, "refused: %s",
          res.first_error);
    bench_level_result_free(&res);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static void test_rate(void) {
    /* 20 arrivals at 200/s: about 0.1 s, all complete. */
    run_opts ro = {.model = "fake", .n = 20, .out_len = 4, .rate = 200};
    bench_level_result res;
    run(&ro, &res);
    CHECK(res.m.completed == 20, "rate: %lld done", (long long)res.m.completed);
    double last = 0;
    for (size_t i = 0; i < res.n_recs; i++)
        last = res.recs[i].t_start > last ? res.recs[i].t_start : last;
    CHECK(last > 0.03 && last < 1.0, "arrivals spread over %g s", last);
    bench_level_result_free(&res);
}

/* What the workload says request index is. */
static bench_body kind_of(const run_opts *ro, uint64_t index) {
    bench_workload w;
    bench_workload_cfg wc;
    char err[256];
    memset(&wc, 0, sizeof wc);
    wc.model = ro->model;
    wc.input_len = 8;
    wc.output_len = ro->out_len;
    wc.abort_rate = ro->abort_rate;
    wc.invalid_rate = ro->invalid_rate;
    wc.seed = ro->seed;
    bench_body b;
    memset(&b, 0, sizeof b);
    if (bench_workload_init(&w, &wc, err, sizeof err) == 0) {
        bench_workload_body(&w, index, &b);
        free(b.json);
        b.json = NULL;
        bench_workload_free(&w);
    }
    return b;
}

/* --abort-rate against a server that streams slowly (20 ms a token, so every
 * abort lands mid-stream): exactly the requests the workload marks are
 * aborted, at their point, the server sees each cut, and no aborted request
 * is in a latency figure. */
static void test_aborts(void) {
    run_opts ro = {
        .model = "fake-drip", .n = 80, .conc = 16, .out_len = 8, .abort_rate = 0.4, .seed = 11};
    bench_fake_stats before, after;
    /* Earlier tests' cut connections (fake-hang's timeouts) may still be on their way. */
    fake_stats(&before);
    for (int i = 0; i < 20; i++) {
        uv_sleep(100);
        fake_stats(&after);
        if (after.cut == before.cut)
            break;
        before = after;
    }
    bench_level_result res;
    run(&ro, &res);
    fake_stats(&after);
    const bench_metrics *m = &res.m;
    int64_t want = 0, head = 0, wrong = 0;
    for (size_t i = 0; i < res.n_recs; i++) {
        const bench_rec *q = &res.recs[i];
        bench_body b = kind_of(&ro, (uint64_t)q->index);
        if (b.kind != q->kind || b.abort_at != q->abort_at)
            wrong++;
        if (q->kind != BENCH_REQ_ABORT) {
            wrong += q->err != BENCH_OK;
            continue;
        }
        want++;
        head += q->abort_at < 0;
        /* Aborted after k events: exactly k arrived (none before the head). */
        wrong += q->err != BENCH_ERR_ABORTED || q->n_content != (q->abort_at < 0 ? 0 : q->abort_at);
        wrong += q->abort_at < 0 && q->status != 0;
    }
    CHECK(res.n_recs == 80 && wrong == 0, "%zu records, %lld wrong", res.n_recs, (long long)wrong);
    CHECK(want > 18 && want < 48 && head > 0 && head < want, "%lld aborts, %lld before the head",
          (long long)want, (long long)head);
    CHECK(m->aborted == want && m->failed == 0 && m->completed == 80 - want,
          "%lld aborted, %lld failed, %lld ok (%s)", (long long)m->aborted, (long long)m->failed,
          (long long)m->completed, res.first_error);
    CHECK(m->ttft_ms.n == m->completed && m->e2e_ms.n == m->completed &&
              m->itl_ms.n == m->completed * (8 - 1),
          "only completed requests in TTFT/E2E/ITL: %lld %lld %lld", (long long)m->ttft_ms.n,
          (long long)m->e2e_ms.n, (long long)m->itl_ms.n);
    CHECK(m->total_output == m->completed * 8, "tokens of completed requests only");
    /* The server notices a cut when the close reaches it, which may be after
     * the client is done: give it 2 s. */
    for (int i = 0; i < 200 && (int64_t)(after.cut - before.cut) < want; i++) {
        uv_sleep(10);
        fake_stats(&after);
    }
    CHECK((int64_t)(after.cut - before.cut) == want, "the server saw %llu cuts, want %lld",
          (unsigned long long)(after.cut - before.cut), (long long)want);
    /* An aborted connection is not reused: a new one for each abort. */
    CHECK((int64_t)(after.connections - before.connections) >= want,
          "%llu new connections for %lld aborts",
          (unsigned long long)(after.connections - before.connections), (long long)want);
    bench_level_result_free(&res);
}

/* --invalid-rate: a correct server's 4xx are invalid_ok; a lenient one's
 * 200 and a buggy one's 500 are invalid_unexpected failures, tallied by
 * status. */
static void test_invalid(void) {
    run_opts ro = {.model = "fake",
                   .chat = 1,
                   .n = 80,
                   .conc = 4,
                   .out_len = 4,
                   .invalid_rate = 0.5,
                   .seed = 5};
    bench_level_result res;
    run(&ro, &res);
    const bench_metrics *m = &res.m;
    int64_t inv = 0, per_variant[BENCH_INVALID_N] = {0};
    for (size_t i = 0; i < res.n_recs; i++)
        if (res.recs[i].kind == BENCH_REQ_INVALID) {
            inv++;
            per_variant[res.recs[i].invalid]++;
            CHECK(res.recs[i].err == BENCH_ERR_INVALID_OK &&
                      res.recs[i].status ==
                          (res.recs[i].invalid == BENCH_INVALID_MODEL ? 404 : 400),
                  "invalid (%s) answered %d", bench_invalid_name(res.recs[i].invalid),
                  res.recs[i].status);
        }
    CHECK(inv > 25 && inv < 55 && m->invalid_ok == inv && m->invalid_unexpected == 0 &&
              m->failed == 0 && m->completed == 80 - inv,
          "%lld invalid: %lld 4xx, %lld failed, %lld ok", (long long)inv, (long long)m->invalid_ok,
          (long long)m->failed, (long long)m->completed);
    for (int v = 0; v < BENCH_INVALID_N; v++)
        CHECK(per_variant[v] > 0, "variant %s sent", bench_invalid_name(v));
    CHECK(m->invalid_ms.n == inv && m->ttft_ms.n == m->completed, "4xx times apart");
    bench_level_result_free(&res);

    /* A lenient server streams the out-of-range and wrong-type ones. */
    ro.model = "fake-lenient";
    run(&ro, &res);
    int64_t lenient = 0;
    for (size_t i = 0; i < res.n_recs; i++) {
        const bench_rec *q = &res.recs[i];
        if (q->kind != BENCH_REQ_INVALID)
            continue;
        int streams = q->invalid == BENCH_INVALID_RANGE || q->invalid == BENCH_INVALID_TYPE;
        lenient += streams;
        CHECK(q->err == (streams ? BENCH_ERR_INVALID_UNEXPECTED : BENCH_ERR_INVALID_OK),
              "lenient, %s: %s", bench_invalid_name(q->invalid), bench_err_name(q->err));
    }
    CHECK(lenient > 0 && res.m.invalid_unexpected == lenient && res.m.failed == lenient &&
              res.m.by_kind[BENCH_ERR_INVALID_UNEXPECTED] == lenient,
          "lenient: %lld unexpected", (long long)res.m.invalid_unexpected);
    CHECK(res.m.n_status == 1 && res.m.by_status[0].status == 200 &&
              res.m.by_status[0].n == lenient,
          "tallied as HTTP 200");
    CHECK(strstr(res.first_error, "invalid_unexpected: invalid request (") != NULL &&
              bt_one_line(res.first_error),
          "first error: %s", res.first_error);
    bench_level_result_free(&res);

    /* A buggy server answers 500: a 5xx the soak must see. */
    ro.model = "fake-strict500";
    run(&ro, &res);
    CHECK(res.m.invalid_unexpected == lenient && res.m.n_status == 1 &&
              res.m.by_status[0].status == 500 && res.m.by_status[0].n == lenient,
          "strict500: %lld unexpected, status %d", (long long)res.m.invalid_unexpected,
          res.m.n_status ? res.m.by_status[0].status : 0);
    bench_level_result_free(&res);
}

/* --interval: the intervals partition the level: every record, token and
 * ITL gap is in exactly one, and they tile the time. */
static void test_intervals(void) {
    run_opts ro = {.model = "fake-slow",
                   .out_len = 10,
                   .rate = 60,
                   .abort_rate = 0.1,
                   .invalid_rate = 0.1,
                   .interval_s = 0.25,
                   .duration_s = 1.1,
                   .seed = 3};
    bench_level_result res;
    run(&ro, &res);
    const bench_metrics *m = &res.m;
    CHECK(res.n_intervals >= 5 && res.n_intervals <= 6, "%zu intervals", res.n_intervals);
    int64_t ok = 0, ab = 0, inv = 0, tok = 0, itl = 0, ttft = 0;
    int tiled = 1;
    double t = 0;
    for (size_t i = 0; i < res.n_intervals; i++) {
        const bench_interval *iv = &res.intervals[i];
        ok += iv->m.completed;
        ab += iv->m.aborted;
        inv += iv->m.invalid_ok;
        tok += iv->m.total_output;
        itl += iv->m.itl_ms.n;
        ttft += iv->m.ttft_ms.n;
        tiled &= fabs(iv->t_start - t) < 1e-9 && iv->t_end > iv->t_start;
        tiled &= iv->partial == (i == res.n_intervals - 1);
        if (i + 1 < res.n_intervals)
            tiled &= fabs(iv->t_end - iv->t_start - 0.25) < 0.1;
        t = iv->t_end;
    }
    CHECK(tiled, "intervals of 0.25 s one after another, the last one partial");
    CHECK(fabs(t - res.duration_s) < 1e-9, "they end with the level: %g vs %g", t, res.duration_s);
    CHECK(ok == m->completed && ab == m->aborted && inv == m->invalid_ok && tok == m->total_output,
          "sums: %lld/%lld ok, %lld/%lld aborted, %lld/%lld tokens", (long long)ok,
          (long long)m->completed, (long long)ab, (long long)m->aborted, (long long)tok,
          (long long)m->total_output);
    CHECK(itl == m->itl_ms.n && ttft == m->ttft_ms.n, "ITL %lld/%lld, TTFT %lld/%lld",
          (long long)itl, (long long)m->itl_ms.n, (long long)ttft, (long long)m->ttft_ms.n);
    CHECK(m->completed > 30 && m->aborted > 0 && m->invalid_ok > 0, "%lld ok",
          (long long)m->completed);
    const bench_interval *mid = &res.intervals[1];
    CHECK(mid->m.output_throughput > 0 &&
              fabs(mid->m.output_throughput * (mid->t_end - mid->t_start) -
                   (double)mid->m.total_output) < 1e-6,
          "per-interval throughput over the interval's own duration");
    bench_level_result_free(&res);
}

static void test_256_connections(void) {
    const int n = 2048, out = 64, conc = 256;
    run_opts ro = {.model = "fake", .n = n, .conc = conc, .out_len = out, .timeout_s = 60};
    bench_level_result res;
    run(&ro, &res);
    CHECK(res.m.completed == n && res.m.failed == 0, "256 connections: %lld ok, first error %s",
          (long long)res.m.completed, res.first_error);
    CHECK(res.m.total_output == (int64_t)n * out, "256 connections: %lld tokens",
          (long long)res.m.total_output);
    printf("test_bench_client: %d requests x %d tokens over %d connections: %.0f streamed "
           "tokens/s, client CPU %.0f%% of a core (fake server on another thread)\n",
           n, out, conc, res.m.output_throughput,
           res.m.duration_s > 0 ? 100.0 * res.cpu_s / res.m.duration_s : 0);
    bench_level_result_free(&res);
}

int main(void) {
    test_urls();
    bench_fake_thread *ft = bench_fake_thread_start(&g_port);
    CHECK(ft != NULL, "fake server started");
    if (!ft)
        return BT_SUMMARY("test_bench_client");
    test_streams();
    test_failures();
    test_rate();
    test_aborts();
    test_invalid();
    test_intervals();
    test_256_connections();
    bench_fake_stats st;
    bench_fake_thread_stop(ft, &st);
    CHECK(st.requests > 2000, "the fake server saw %llu requests", (unsigned long long)st.requests);
    return BT_SUMMARY("test_bench_client");
}
