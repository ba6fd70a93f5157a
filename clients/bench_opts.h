/* bench_opts.h - brisk-bench's settings, as parsed from the command line by
 * bench_main.c and written back into the JSON report by bench_report.c. */
#ifndef BENCH_OPTS_H
#define BENCH_OPTS_H

#include <stdint.h>

#include "clients/bench_stats.h"

#define BENCH_MAX_SWEEP 64

typedef enum { BENCH_SWEEP_NONE = 0, BENCH_SWEEP_CONCURRENCY, BENCH_SWEEP_RATE } bench_sweep_kind;

/* Strings are borrowed from argv or point into the struct. */
typedef struct bench_opts {
    const char *base_url;
    const char *api_key; /* NULL: no Authorization header */
    const char *model;   /* NULL until given or discovered */
    char model_buf[256]; /* a discovered model id */
    int chat;            /* --endpoint chat */
    char path[600];      /* the endpoint's request path, e.g. "/v1/completions" */
    char url[900];       /* base URL + path, for the report */
    /* workload */
    int input_len, output_len;
    double range_ratio;
    int shared_prefix_len;
    const char *dataset;
    double temperature;
    int ignore_eos;
    const char *extra_body;
    double abort_rate;   /* fraction aborted on purpose by the client */
    double invalid_rate; /* fraction made invalid on purpose (a 4xx is expected) */
    /* load */
    double request_rate; /* INFINITY: all at once */
    double burstiness;
    int max_concurrency; /* 0: unlimited */
    int64_t num_prompts; /* 0: until --duration */
    double duration_s;   /* 0: none */
    int warmup;
    uint64_t seed;
    double timeout_s;
    /* judging */
    bench_slo slo;
    double slo_attainment; /* a sweep level passes when good / sent >= this */
    double price_per_hour; /* USD; 0: none */
    bench_sweep_kind sweep;
    double sweep_levels[BENCH_MAX_SWEEP];
    int n_sweep;
    /* output */
    const char *json_path;
    const char *plot_dir;
    const char *label;
    int quiet;
    int json_requests; /* per-request records in the JSON */
    double interval_s; /* > 0: per-interval figures ("intervals" in the JSON) */
} bench_opts;

#endif
