/* test_bench_client.c - brisk-bench's client and driver against the fake
 * OpenAI server (tests/tools/bench_fake.h) running on a thread of its own:
 * URL parsing; streams that are whole, batched, split into 17-byte pieces,
 * CRLF, without usage, on connections that close after each response or
 * whose body ends at close; every hostile answer (HTTP errors, error events,
 * garbage, bad chunking, cut connections, silence, a 2 MiB line) counted as
 * the right kind of failure without a crash; connection reuse; arrivals at a
 * rate; and 256 connections from one client thread, whose streamed tokens
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
    CHECK(bench_workload_init(&w, &wc, err, sizeof err) == 0, "workload");
    bench_run_cfg rc;
    memset(&rc, 0, sizeof rc);
    rc.path = ro->chat ? "/v1/chat/completions" : "/v1/completions";
    rc.chat = ro->chat;
    rc.num_prompts = ro->n;
    rc.burstiness = 1;
    rc.timeout_s = ro->timeout_s > 0 ? ro->timeout_s : 10;
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
    }
    cJSON_Delete(j);
    bench_call_clear(&c);
    bench_client_free(cl);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

static void expect_ok(const char *model, int chat, int n, int conc, int out_len) {
    run_opts ro = {model, chat, n, conc, out_len, 0, 0, 0};
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
    run_opts ro = {model, 0, 4, 2, 6, 0, timeout_s, 0};
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
    run_opts ro = {"fake-slow", 0, 4, 4, 20, 0, 0, 0};
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
    run_opts ro = {"fake", 0, 3, 2, 4, 0, 2, dead};
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
    run_opts ro = {"fake", 0, 20, 0, 4, 200, 0, 0};
    bench_level_result res;
    run(&ro, &res);
    CHECK(res.m.completed == 20, "rate: %lld done", (long long)res.m.completed);
    double last = 0;
    for (size_t i = 0; i < res.n_recs; i++)
        last = res.recs[i].t_start > last ? res.recs[i].t_start : last;
    CHECK(last > 0.03 && last < 1.0, "arrivals spread over %g s", last);
    bench_level_result_free(&res);
}

static void test_256_connections(void) {
    const int n = 2048, out = 64, conc = 256;
    run_opts ro = {"fake", 0, n, conc, out, 0, 60, 0};
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
    test_256_connections();
    bench_fake_stats st;
    bench_fake_thread_stop(ft, &st);
    CHECK(st.requests > 2000, "the fake server saw %llu requests", (unsigned long long)st.requests);
    return BT_SUMMARY("test_bench_client");
}
