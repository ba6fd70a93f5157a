/* bench_run.h - drives one load level: decides when each request is sent
 * (closed loop at a fixed concurrency, or arrivals at a rate), keeps the
 * per-request records, prints the progress line, and stops on --duration,
 * after --num-prompts, or on Ctrl-C (the in-flight requests are cancelled and
 * what finished is reported).
 *
 * Runs on the loop thread; bench_runner_level() runs the loop until the level
 * is over. */
#ifndef BENCH_RUN_H
#define BENCH_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "clients/bench_http.h"
#include "clients/bench_stats.h"
#include "clients/bench_workload.h"

/* One load level. */
typedef struct bench_level {
    int max_concurrency; /* requests in flight at most; <= 0: unlimited */
    double request_rate; /* arrivals per second; <= 0 or infinite: all at once */
} bench_level;

typedef struct bench_run_cfg {
    const char *path; /* e.g. "/v1/completions". Borrowed. */
    int chat;
    int64_t num_prompts;    /* requests per level; <= 0: until duration_s */
    double duration_s;      /* stop sending after this long; <= 0: no limit */
    double burstiness;      /* gamma shape of the arrival gaps (1: Poisson) */
    double timeout_s;       /* per request; <= 0: none */
    uint64_t seed;          /* arrival times */
    int progress;           /* 1: a progress line on stderr */
    size_t max_itl_samples; /* bound on ITL samples kept per level (0: none) */
    double interval_s;      /* > 0: figures per interval of this many seconds (--interval) */
} bench_run_cfg;

/* The figures of one --interval: the requests that ended in it and the ITL
 * gaps whose second token arrived in it, computed as for a whole level (no
 * SLO, no price). */
typedef struct bench_interval {
    double t_start, t_end; /* seconds since the level began */
    int partial;           /* the last one, cut short by the end of the level */
    bench_metrics m;
} bench_interval;

/* Intervals kept per level at most (a week of 1-second intervals); beyond it
 * intervals_truncated is set. */
#define BENCH_MAX_INTERVALS ((size_t)1 << 20)

/* Everything measured at one level. Owns recs, itl and samples. */
typedef struct bench_level_result {
    bench_level level;
    bench_rec *recs;
    size_t n_recs, cap_recs;
    bench_dvec itl;        /* seconds */
    double duration_s;     /* first send to last completion (or to Ctrl-C) */
    double cpu_s;          /* CPU time brisk-bench used meanwhile */
    int interrupted;       /* Ctrl-C ended it */
    char first_error[200]; /* the first failure's message; "" if none */
    bench_metrics m;       /* filled by bench_level_result_compute() */
    bench_samples samples;
    /* The server's speculative decoding over the level (bench_spec: the
     * difference of /metrics before and after; found 0: not exported). */
    bench_spec spec;
    bench_interval *intervals; /* [n_intervals] in time order, with cfg.interval_s > 0 */
    size_t n_intervals, cap_intervals;
    int intervals_truncated;
} bench_level_result;

void bench_level_result_free(bench_level_result *res);

/* Computes res->m and res->samples. 0 or BRISK_ENOMEM. */
int bench_level_result_compute(bench_level_result *res, const bench_slo *slo,
                               double price_per_hour);

/* GET /metrics at the server's root: its speculative decoding counters into
 * *out (found 0 when the server has none or the scrape fails: not an
 * error). */
void bench_fetch_spec(uv_loop_t *loop, bench_client *cl, double timeout_s, bench_spec *out);

typedef struct bench_runner bench_runner;

/* handle_sigint: Ctrl-C ends the level in progress (a second one exits at
 * once). The runner borrows loop, client and workload. NULL on ENOMEM. */
bench_runner *bench_runner_create(uv_loop_t *loop, bench_client *cl, bench_workload *w,
                                  const bench_run_cfg *cfg, int handle_sigint);

/* Sends n warm-up requests (closed loop, at most `concurrency` at a time),
 * counts nothing, and calibrates the workload's words per token from their
 * usage. Returns the number that succeeded; *first_error gets the first
 * failure's message. */
int bench_runner_warmup(bench_runner *r, int n, int concurrency, char *first_error, size_t err_len);

/* Runs one level to its end. Returns 0 or BRISK_ENOMEM. */
int bench_runner_level(bench_runner *r, const bench_level *lv, bench_level_result *out);

/* 1 once Ctrl-C was pressed. */
int bench_runner_interrupted(const bench_runner *r);

/* Closes the runner's handles; run the loop afterwards to release them. */
void bench_runner_free(bench_runner *r);

/* GET <prefix>/models and the first model's id into out. 0, or a negative
 * BRISK_E* code with a message in err. Runs the loop until it is answered. */
int bench_fetch_model(uv_loop_t *loop, bench_client *cl, const char *prefix, double timeout_s,
                      char *out, size_t out_len, char *err, size_t err_len);

#endif
