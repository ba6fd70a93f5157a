/* test_bench_stats.c - brisk-bench's metric arithmetic on synthetic
 * timelines, against figures worked out by hand and numpy's percentiles:
 * TTFT, TPOT (including one-token outputs), ITL, E2E, throughputs, goodput
 * under each SLO, errors by status and kind, cost, and empty samples. */
#include <math.h>
#include <string.h>

#include "brisk_test.h"
#include "clients/bench_stats.h"

static int near(double a, double b) {
    return fabs(a - b) <= 1e-9 * (1.0 + fabs(b));
}

static void test_percentile(void) {
    /* numpy.percentile([1, 2, 3, 4], q) */
    const double v[] = {1, 2, 3, 4};
    const double q[] = {0, 25, 50, 90, 99, 100};
    const double want[] = {1, 1.75, 2.5, 3.7, 3.97, 4};
    for (int i = 0; i < 6; i++)
        CHECK(near(bench_percentile(v, 4, q[i]), want[i]), "p%g of 1..4: %.17g want %g", q[i],
              bench_percentile(v, 4, q[i]), want[i]);
    /* numpy.percentile([15, 20, 35, 40, 50], [5, 40]) = [16, 29] */
    const double w[] = {15, 20, 35, 40, 50};
    CHECK(near(bench_percentile(w, 5, 5), 16), "p5");
    CHECK(near(bench_percentile(w, 5, 40), 29), "p40");
    const double one[] = {7};
    CHECK(bench_percentile(one, 1, 0) == 7 && bench_percentile(one, 1, 99) == 7, "one value");
    CHECK(bench_percentile(one, 0, 50) == 0, "empty sample gives 0");

    /* bench_dist_of sorts, and its std is numpy's population std. */
    double x[] = {9, 2, 4, 5, 4, 7, 4, 5};
    bench_dist d;
    bench_dist_of(x, 8, &d);
    CHECK(d.n == 8 && near(d.mean, 5) && near(d.std, 2), "mean %g std %g", d.mean, d.std);
    CHECK(d.min == 2 && d.max == 9 && near(d.median, 4.5) && near(d.p50, 4.5), "min/max/median");
    /* numpy.percentile([2,4,4,4,5,5,7,9], [90, 95, 99]) = [7.6, 8.3, 8.86] */
    CHECK(near(d.p90, 7.6) && near(d.p95, 8.3) && near(d.p99, 8.86),
          "p90 %.17g p95 %.17g p99 %.17g", d.p90, d.p95, d.p99);
    bench_dist_of(x, 0, &d);
    CHECK(d.n == 0 && d.mean == 0 && d.p99 == 0, "empty dist is zeros");
}

static bench_rec rec(double t0, double ttft, double e2e, int64_t in, int64_t out, int err,
                     int status) {
    bench_rec r;
    memset(&r, 0, sizeof r);
    r.t_start = t0;
    r.ttft = ttft;
    r.e2e = e2e;
    r.in_tokens = in;
    r.out_tokens = out;
    r.expected_out = (int32_t)out;
    r.err = err;
    r.status = status;
    r.usage_seen = 1;
    return r;
}

/* A: sent at 0, tokens at 0.100 0.120 0.150 0.200, ends 0.210 (4 tokens)
 * B: sent at 0.05, one token at 0.300, ends 0.310
 * C: 429;  D: connection refused;  E: cancelled by Ctrl-C
 * F: sent at 0.2, tokens at 0.25 and 0.35, ends 0.36 */
static void timeline(bench_rec *r, double *itl, size_t *n_itl) {
    r[0] = rec(0.0, 0.100, 0.210, 10, 4, BENCH_OK, 200);
    r[1] = rec(0.05, 0.250, 0.260, 20, 1, BENCH_OK, 200);
    r[2] = rec(0.1, -1, 0.01, 0, 0, BENCH_ERR_HTTP, 429);
    r[3] = rec(0.1, -1, 0.001, 0, 0, BENCH_ERR_CONNECT, 0);
    r[4] = rec(0.1, 0.2, 0.3, 7, 3, BENCH_ERR_CANCELLED, 200);
    r[5] = rec(0.2, 0.050, 0.160, 5, 2, BENCH_OK, 200);
    const double gaps[] = {0.020, 0.030, 0.050, 0.100};
    memcpy(itl, gaps, sizeof gaps);
    *n_itl = 4;
}

static void test_timeline(void) {
    bench_rec r[6];
    double itl[4];
    size_t n_itl;
    timeline(r, itl, &n_itl);
    bench_metrics m;
    bench_samples s;
    CHECK(bench_metrics_compute(r, 6, itl, n_itl, 1.0, NULL, 0, &m, &s) == 0, "compute");
    CHECK(m.completed == 3 && m.failed == 2 && m.cancelled == 1, "counts %lld %lld %lld",
          (long long)m.completed, (long long)m.failed, (long long)m.cancelled);
    CHECK(m.total_input == 35 && m.total_output == 7, "totals %lld %lld", (long long)m.total_input,
          (long long)m.total_output);
    CHECK(near(m.request_throughput, 3) && near(m.output_throughput, 7) &&
              near(m.total_token_throughput, 42),
          "throughputs");
    /* TTFT {50, 100, 250} ms */
    CHECK(m.ttft_ms.n == 3 && near(m.ttft_ms.mean, 400.0 / 3) && near(m.ttft_ms.median, 100),
          "ttft mean %g", m.ttft_ms.mean);
    CHECK(near(m.ttft_ms.p90, 220) && near(m.ttft_ms.p99, 247) && m.ttft_ms.min == 50 &&
              near(m.ttft_ms.max, 250),
          "ttft p90 %g p99 %g", m.ttft_ms.p90, m.ttft_ms.p99);
    /* TPOT: A (210-100)/3, F (160-50)/1; B has one token and no TPOT. */
    CHECK(m.tpot_ms.n == 2, "one-token requests have no TPOT: n=%lld", (long long)m.tpot_ms.n);
    CHECK(near(m.tpot_ms.min, 110.0 / 3) && near(m.tpot_ms.max, 110), "tpot %g..%g", m.tpot_ms.min,
          m.tpot_ms.max);
    CHECK(near(m.tpot_ms.mean, (110.0 / 3 + 110) / 2), "tpot mean");
    /* ITL {20, 30, 50, 100} */
    CHECK(m.itl_ms.n == 4 && near(m.itl_ms.mean, 50) && near(m.itl_ms.median, 40) &&
              near(m.itl_ms.p90, 85),
          "itl mean %g median %g p90 %g", m.itl_ms.mean, m.itl_ms.median, m.itl_ms.p90);
    /* E2E {160, 210, 260}: std = sqrt(2 * 50^2 / 3) */
    CHECK(near(m.e2e_ms.mean, 210) && near(m.e2e_ms.std, sqrt(5000.0 / 3)), "e2e std %g",
          m.e2e_ms.std);
    CHECK(s.n_ttft == 3 && s.n_itl == 4 && s.n_e2e == 3 && s.n_tpot == 2, "samples");
    CHECK(s.ttft_ms[0] == 50 && near(s.ttft_ms[2], 250) && s.itl_ms[0] == 20, "samples sorted");
    /* Errors. */
    CHECK(m.by_kind[BENCH_ERR_HTTP] == 1 && m.by_kind[BENCH_ERR_CONNECT] == 1, "kinds");
    CHECK(m.n_status == 1 && m.by_status[0].status == 429 && m.by_status[0].n == 1, "statuses");
    /* Without an SLO every success is good. */
    CHECK(!m.has_slo && m.good == 3 && near(m.slo_attainment, 3.0 / 5), "no slo");
    CHECK(m.cost_per_1m_output_usd < 0 && m.cost_per_1k_requests_usd < 0, "no price, no cost");
    bench_samples_free(&s);
}

static void test_goodput(void) {
    bench_rec r[6];
    double itl[4];
    size_t n_itl;
    timeline(r, itl, &n_itl);
    bench_metrics m;
    /* TTFT <= 100 ms (A exactly at it: inclusive) and TPOT <= 50 ms: only A. */
    bench_slo slo = {100, 50, 0};
    bench_metrics_compute(r, 6, itl, n_itl, 2.0, &slo, 0, &m, NULL);
    CHECK(m.has_slo && m.good == 1 && near(m.request_goodput, 0.5), "ttft+tpot: good %lld",
          (long long)m.good);
    CHECK(near(m.slo_attainment, 1.0 / 5), "attainment %g", m.slo_attainment);
    /* TPOT only: B's single token counts as TPOT 0, so A and B pass, F fails. */
    bench_slo tpot = {0, 50, 0};
    bench_metrics_compute(r, 6, itl, n_itl, 1.0, &tpot, 0, &m, NULL);
    CHECK(m.good == 2, "tpot only: good %lld", (long long)m.good);
    /* E2E <= 210 ms: A (exactly) and F. */
    bench_slo e2e = {0, 0, 210};
    bench_metrics_compute(r, 6, itl, n_itl, 1.0, &e2e, 0, &m, NULL);
    CHECK(m.good == 2, "e2e: good %lld", (long long)m.good);
    /* Per-request check, the rule sweeps use. */
    CHECK(bench_rec_meets_slo(&r[0], &slo) && !bench_rec_meets_slo(&r[5], &slo), "per request");
    bench_rec one = rec(0, 0.01, 5.0, 1, 1, BENCH_OK, 200);
    bench_slo tight = {0, 0.001, 0};
    CHECK(bench_rec_meets_slo(&one, &tight), "a one-token request has TPOT 0");
}

static void test_cost(void) {
    bench_rec r[6];
    double itl[4];
    size_t n_itl;
    timeline(r, itl, &n_itl);
    bench_metrics m;
    /* $3.60/h = $0.001/s; 7 tok/s and 3 req/s. */
    bench_metrics_compute(r, 6, itl, n_itl, 1.0, NULL, 3.6, &m, NULL);
    CHECK(near(m.cost_per_1m_output_usd, 0.001 / 7 * 1e6), "per 1M tokens %g",
          m.cost_per_1m_output_usd);
    CHECK(near(m.cost_per_1k_requests_usd, 0.001 / 3 * 1e3), "per 1k requests %g",
          m.cost_per_1k_requests_usd);
}

static void test_edges(void) {
    bench_metrics m;
    bench_samples s;
    CHECK(bench_metrics_compute(NULL, 0, NULL, 0, 0, NULL, 1.0, &m, &s) == 0, "nothing at all");
    CHECK(m.completed == 0 && m.request_throughput == 0 && m.ttft_ms.n == 0, "zeros");
    CHECK(m.cost_per_1m_output_usd < 0, "no throughput, no cost");
    bench_samples_free(&s);

    /* Only failures, with more distinct statuses than are tallied one by one. */
    bench_rec r[BENCH_MAX_STATUSES + 3];
    for (int i = 0; i < BENCH_MAX_STATUSES + 3; i++)
        r[i] = rec(0, -1, 0.1, 0, 0, BENCH_ERR_HTTP, 400 + i);
    bench_metrics_compute(r, BENCH_MAX_STATUSES + 3, NULL, 0, 1.0, NULL, 0, &m, NULL);
    CHECK(m.failed == BENCH_MAX_STATUSES + 3 && m.n_status == BENCH_MAX_STATUSES &&
              m.status_other == 3,
          "status overflow");
    CHECK(m.slo_attainment == 0 && m.good == 0, "no success, no goodput");

    /* Output length checks: usage missing and a mismatch are counted. */
    bench_rec a = rec(0, 0.1, 0.2, 3, 5, BENCH_OK, 200);
    a.expected_out = 6;
    a.usage_seen = 0;
    bench_metrics_compute(&a, 1, NULL, 0, 1.0, NULL, 0, &m, NULL);
    CHECK(m.out_mismatch == 1 && m.usage_missing == 1 && m.expected_output == 6, "mismatch");
    CHECK(m.itl_ms.n == 0 && m.itl_ms.mean == 0, "no ITL samples");

    /* The ITL vector's bound. */
    bench_dvec d = {0};
    d.max = 3;
    for (int i = 0; i < 10; i++)
        bench_dvec_push(&d, i);
    CHECK(d.n == 3 && d.truncated, "dvec bound");
    bench_dvec_free(&d);
    CHECK(!strcmp(bench_err_name(BENCH_ERR_TIMEOUT), "timeout") &&
              !strcmp(bench_err_name(99), "unknown"),
          "names");
}

/* The speculative decoding counters out of /metrics text: vLLM's names, any
 * labels, series summed, other families and broken lines ignored. */
static void test_spec_parse(void) {
    const char *t = "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
                    "# TYPE vllm:spec_decode_num_drafts_total counter\n"
                    "vllm:spec_decode_num_drafts_total{model_name=\"m\"} 10.0\n"
                    "vllm:spec_decode_num_drafts_total_other{model_name=\"m\"} 99.0\n"
                    "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 40.0\n"
                    "vllm:spec_decode_num_draft_tokens_total{model_name=\"x\"} 2\n"
                    "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 25\n"
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 9\n"
                    "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} junk\n"
                    "vllm:num_requests_running{model_name=\"m\"} 3";
    bench_spec sp;
    bench_spec_parse(t, strlen(t), &sp);
    CHECK(sp.found && sp.drafts == 10 && sp.draft_tokens == 42 && sp.accepted == 25,
          "spec parse: %d %g %g %g", sp.found, sp.drafts, sp.draft_tokens, sp.accepted);
    const char *none = "vllm:num_requests_running{model_name=\"m\"} 3\n";
    bench_spec_parse(none, strlen(none), &sp);
    CHECK_COND(!sp.found && sp.drafts == 0);
    /* a line cut at the buffer's end, and no NUL after it */
    char cut[] = {'v', 'l', 'l', 'm', ':', 's'};
    bench_spec_parse(cut, sizeof cut, &sp);
    CHECK_COND(!sp.found);
}

int main(void) {
    test_spec_parse();
    test_percentile();
    test_timeline();
    test_goodput();
    test_cost();
    test_edges();
    return BT_SUMMARY("test_bench_stats");
}
