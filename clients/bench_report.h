/* bench_report.h - what brisk-bench prints and writes: the human table on
 * stdout, the JSON report (every figure, the run's parameters, the machine,
 * commit and date) and PNG charts drawn by gnuplot.
 *
 * The results are borrowed; metrics must have been computed
 * (bench_level_result_compute). */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include <stdio.h>

#include "clients/bench_opts.h"
#include "clients/bench_run.h"

/* The table of one level. */
void bench_report_table(FILE *f, const bench_opts *o, const bench_level_result *res);

/* The --interval time series of one level: one row per interval. */
void bench_report_intervals(FILE *f, const bench_level_result *res);

/* A sweep: one row per level and the verdict. best: index of the highest
 * level that meets the SLO, or -1. */
void bench_report_sweep(FILE *f, const bench_opts *o, const bench_level_result *res, int n,
                        int best);

/* Does a level meet the SLO? Its SLO attainment (requests that succeeded and
 * met every --slo target, over the requests that finished) must reach
 * o->slo_attainment; without --slo every success counts. An interrupted
 * level never passes. */
int bench_level_passes(const bench_opts *o, const bench_level_result *res);

/* The highest passing level of a sweep (levels in the order run), or -1. */
int bench_report_best(const bench_opts *o, const bench_level_result *res, int n);

/* Writes the JSON report. 0, or BRISK_EIO / BRISK_ENOMEM with a message. */
int bench_report_json(const char *path, const bench_opts *o, const bench_level_result *res, int n,
                      int best, char *err, size_t err_len);

/* Writes PNG charts (and the gnuplot scripts that draw them) into dir:
 * ttft_cdf, itl_cdf, e2e_cdf (one curve per level) and, for a sweep,
 * sweep_throughput and sweep_p95. 0, or a negative code with a message (no
 * gnuplot, a failed plot). */
int bench_report_plot(const char *dir, const bench_opts *o, const bench_level_result *res, int n,
                      char *err, size_t err_len);

#endif
