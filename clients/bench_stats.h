/* bench_stats.h - the metric arithmetic of brisk-bench, as pure functions over
 * per-request records, defined exactly as vLLM's benchmark_serving does:
 *
 *   TTFT  first content event - request sent
 *   ITL   every gap between two consecutive content events of a request
 *   E2E   end of the response - request sent
 *   TPOT  (E2E - TTFT) / (output tokens - 1), for requests with > 1 token
 *   throughput = totals over successful requests / benchmark duration
 *   goodput    = successful requests meeting every SLO / duration, where a
 *                request with <= 1 output token has TPOT 0 for the SLO test
 *   percentiles: numpy's default (linear interpolation between ranks)
 *
 * No clock and no I/O here: tests/unit/test_bench_stats.c feeds synthetic
 * timelines. */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Why a request did not succeed. */
typedef enum {
    BENCH_OK = 0,
    BENCH_ERR_HTTP,               /* a status other than 200 (tallied per status) */
    BENCH_ERR_CONNECT,            /* the TCP connection could not be made */
    BENCH_ERR_CLOSED,             /* the connection closed or reset before the response ended */
    BENCH_ERR_TIMEOUT,            /* --timeout passed */
    BENCH_ERR_PROTOCOL,           /* malformed HTTP, SSE or JSON, or a size bound hit */
    BENCH_ERR_STREAM,             /* an {"error": ...} event inside a 200 stream */
    BENCH_ERR_NO_CONTENT,         /* a 200 stream that ended without a single token */
    BENCH_ERR_INVALID_UNEXPECTED, /* a deliberately invalid request (--invalid-rate)
                                     answered with a status other than 4xx */
    BENCH_ERR_CANCELLED,          /* cut off by Ctrl-C: neither success nor failure */
    BENCH_ERR_ABORTED,    /* the client aborted it on purpose (--abort-rate): not a failure */
    BENCH_ERR_INVALID_OK, /* a deliberately invalid request answered 4xx, as it should be */
    BENCH_ERR_N
} bench_err_kind;

/* "http", "connect", "closed", ... (static). */
const char *bench_err_name(int kind);

/* 1 for the kinds that count as failed requests: not BENCH_OK, cancelled,
 * aborted on purpose, or an invalid request answered 4xx. */
int bench_err_is_failure(int kind);

/* A growable array of doubles. max bounds the count (0: no bound); a push
 * beyond it is dropped and sets truncated, so a hostile server that streams
 * forever cannot exhaust memory through the ITL samples. */
typedef struct bench_dvec {
    double *v;
    size_t n, cap, max;
    int truncated;
} bench_dvec;

/* 0, or BRISK_ENOMEM (the value is dropped and truncated set). */
int bench_dvec_push(bench_dvec *d, double x);
void bench_dvec_free(bench_dvec *d);

/* One finished request, times in seconds. */
typedef struct bench_rec {
    double t_start;       /* when it was sent, since the level began */
    double ttft;          /* < 0: no content event arrived */
    double e2e;           /* end of the response (or of the failure) - sent */
    int64_t in_tokens;    /* usage.prompt_tokens, or the workload's estimate */
    int64_t out_tokens;   /* usage.completion_tokens, or the count of content events */
    int32_t expected_out; /* max_tokens that was asked */
    int32_t status;       /* HTTP status; 0 when no response head arrived */
    int32_t err;          /* bench_err_kind */
    int32_t n_content;    /* content events received */
    int32_t usage_seen;   /* 1: out_tokens/in_tokens came from the server's usage */
    int32_t words;        /* prompt words sent (random workload; for calibration) */
    int32_t kind;         /* bench_req_kind: normal, abort or invalid (bench_workload.h) */
    int32_t abort_at;     /* abort requests: -1 before the response head, else after
                             this many content events */
    int32_t invalid;      /* invalid requests: bench_invalid_kind */
    int64_t index;        /* the request's workload index (its body depends only on it) */
} bench_rec;

/* Latency targets in milliseconds; <= 0 means "not set". */
typedef struct bench_slo {
    double ttft_ms, tpot_ms, e2e_ms;
} bench_slo;

/* Summary of a sample: numpy's mean, std (population), median, percentiles. */
typedef struct bench_dist {
    int64_t n; /* 0: every figure below is 0 (vLLM reports 0 for an empty sample) */
    double mean, std, median, p50, p90, p95, p99, min, max;
} bench_dist;

/* numpy.percentile(sorted, pct) with the default linear method; sorted
 * ascending, n > 0, pct in [0, 100]. */
double bench_percentile(const double *sorted, size_t n, double pct);

/* Sorts v (n values) in place and summarises it. */
void bench_dist_of(double *v, size_t n, bench_dist *out);

#define BENCH_MAX_STATUSES 16

typedef struct bench_metrics {
    int64_t completed, failed, cancelled, good;
    int64_t aborted;            /* aborted on purpose by the client (--abort-rate) */
    int64_t invalid_ok;         /* invalid on purpose (--invalid-rate) and answered 4xx */
    int64_t invalid_unexpected; /* invalid on purpose and answered otherwise (a failure) */
    int64_t total_input, total_output;
    int64_t expected_output; /* sum of max_tokens over successful requests */
    int64_t out_mismatch;    /* successful requests whose output tokens != max_tokens */
    int64_t usage_missing;   /* successful requests without a usage field */
    double duration_s;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    int has_slo;
    double slo_attainment; /* good / (completed + failed); 0 when there were none */
    bench_dist ttft_ms, tpot_ms, itl_ms, e2e_ms;
    bench_dist invalid_ms; /* time to the 4xx answer of the invalid_ok requests */
    double cost_per_1m_output_usd, cost_per_1k_requests_usd; /* < 0: no price given */
    int64_t by_kind[BENCH_ERR_N];
    struct {
        int status;
        int64_t n;
    } by_status[BENCH_MAX_STATUSES];
    int n_status;
    int64_t status_other; /* statuses beyond the first BENCH_MAX_STATUSES distinct ones */
} bench_metrics;

/* A server's speculative decoding counters, as vLLM names them on /metrics
 * (vllm:spec_decode_num_drafts_total, _num_draft_tokens_total,
 * _num_accepted_tokens_total; every series of a family summed). found: at
 * least one of them was there. Over a level: the difference of two scrapes,
 * acceptance rate = accepted / draft_tokens, mean accepted length = 1 +
 * accepted / drafts (vLLM's figures). */
typedef struct bench_spec {
    int found;
    double drafts, draft_tokens, accepted;
} bench_spec;

/* Reads the counters out of Prometheus text (text[0, len), any bytes:
 * lines that do not parse are skipped). Pure. */
void bench_spec_parse(const char *text, size_t len, bench_spec *out);

/* The sorted samples (milliseconds) behind the distributions, for CDF charts.
 * Owned by the caller: bench_samples_free(). */
typedef struct bench_samples {
    double *ttft_ms, *tpot_ms, *itl_ms, *e2e_ms;
    size_t n_ttft, n_tpot, n_itl, n_e2e;
} bench_samples;

void bench_samples_free(bench_samples *s);

/* Computes every figure from n records, the ITL samples (seconds, any order)
 * and the duration. Successes are BENCH_OK records; aborted, invalid_ok and
 * cancelled records are counted apart and are in no latency figure; a failed
 * record is tallied by kind, and by status when it has one (BENCH_ERR_HTTP,
 * BENCH_ERR_INVALID_UNEXPECTED). slo may be NULL; price_per_hour <= 0 means no cost
 * figures. samples may be NULL. Returns 0 or BRISK_ENOMEM. */
int bench_metrics_compute(const bench_rec *recs, size_t n, const double *itl_s, size_t n_itl,
                          double duration_s, const bench_slo *slo, double price_per_hour,
                          bench_metrics *m, bench_samples *samples);

/* Does a request meet the SLO (vLLM's goodput rule)? rec must be a success. */
int bench_rec_meets_slo(const bench_rec *r, const bench_slo *slo);

#endif
