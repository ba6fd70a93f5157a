/* bench_report.c - the table, the JSON report and the gnuplot charts (see
 * bench_report.h). */
#include "clients/bench_report.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "brisk_config.h"
#include "common/brisk_error.h"

extern char **environ;

/* ---- describing the load ---- */

static void describe_level(const bench_opts *o, const bench_level *lv, char *out, size_t n) {
    char conc[48] = "";
    if (lv->max_concurrency > 0)
        snprintf(conc, sizeof conc, "max concurrency %d", lv->max_concurrency);
    if (lv->request_rate > 0 && isfinite(lv->request_rate)) {
        snprintf(out, n, "request rate %.3g/s (%s)%s%s", lv->request_rate,
                 o->burstiness == 1.0 ? "Poisson" : "gamma arrivals", conc[0] ? ", " : "", conc);
    } else if (conc[0]) {
        snprintf(out, n, "%s (closed loop)", conc);
    } else {
        snprintf(out, n, "all requests at once");
    }
}

static void describe_workload(const bench_opts *o, char *out, size_t n) {
    int w;
    if (o->dataset)
        w = snprintf(out, n, "dataset %s", o->dataset);
    else
        w = snprintf(out, n, "random, %d in / %d out tokens (range ratio %g)", o->input_len,
                     o->output_len, o->range_ratio);
    if (w > 0 && (size_t)w < n && o->shared_prefix_len > 0)
        snprintf(out + w, n - (size_t)w, ", shared prefix of %d tokens", o->shared_prefix_len);
}

static double level_value(const bench_opts *o, const bench_level *lv) {
    return o->sweep == BENCH_SWEEP_RATE ? lv->request_rate : (double)lv->max_concurrency;
}

static const char *level_name(const bench_opts *o) {
    return o->sweep == BENCH_SWEEP_RATE ? "rate" : "concurrency";
}

/* ---- the table ---- */

static void dist_row(FILE *f, const char *name, const bench_dist *d) {
    if (d->n == 0) {
        fprintf(f, "%-6s %9s\n", name, "-");
        return;
    }
    fprintf(f, "%-6s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, d->mean, d->std,
            d->median, d->p90, d->p95, d->p99, d->min, d->max);
}

static void errors_line(FILE *f, const bench_metrics *m) {
    int any = 0;
    for (int i = 0; i < m->n_status; i++) {
        fprintf(f, "%sHTTP %d: %lld", any ? ", " : "", m->by_status[i].status,
                (long long)m->by_status[i].n);
        any = 1;
    }
    if (m->status_other) {
        fprintf(f, "%sHTTP other: %lld", any ? ", " : "", (long long)m->status_other);
        any = 1;
    }
    if (m->invalid_unexpected)
        fprintf(f, " (%lld of them answers to deliberately invalid requests)",
                (long long)m->invalid_unexpected);
    for (int k = BENCH_ERR_HTTP + 1; k < BENCH_ERR_N; k++) {
        /* invalid_unexpected requests are in the statuses above */
        if (!bench_err_is_failure(k) || k == BENCH_ERR_INVALID_UNEXPECTED || !m->by_kind[k])
            continue;
        fprintf(f, "%s%s: %lld", any ? ", " : "", bench_err_name(k), (long long)m->by_kind[k]);
        any = 1;
    }
    if (!any)
        fprintf(f, "none");
}

#define ROW "%-40s "

void bench_report_table(FILE *f, const bench_opts *o, const bench_level_result *res) {
    const bench_metrics *m = &res->m;
    char buf[512];
    fprintf(f, "============ brisk-bench: serving benchmark result ============\n");
    if (o->label)
        fprintf(f, ROW "%s\n", "Label:", o->label);
    fprintf(f, ROW "%s\n", "Endpoint:", o->url);
    fprintf(f, ROW "%s\n", "Model:", o->model ? o->model : "(none)");
    describe_level(o, &res->level, buf, sizeof buf);
    fprintf(f, ROW "%s\n", "Load:", buf);
    describe_workload(o, buf, sizeof buf);
    fprintf(f, ROW "%s\n", "Workload:", buf);
    if (res->interrupted)
        fprintf(f, ROW "%s\n", "Status:", "INTERRUPTED (partial results)");
    fprintf(f, ROW "%lld\n", "Successful requests:", (long long)m->completed);
    fprintf(f, ROW "%lld\n", "Failed requests:", (long long)m->failed);
    if (m->cancelled)
        fprintf(f, ROW "%lld\n", "Cancelled requests (not counted):", (long long)m->cancelled);
    if (o->abort_rate > 0)
        fprintf(f, ROW "%lld\n", "Aborted by the client (not counted):", (long long)m->aborted);
    if (o->invalid_rate > 0) {
        fprintf(f, ROW "%lld\n", "Invalid requests answered 4xx:", (long long)m->invalid_ok);
        fprintf(f, ROW "%lld\n",
                "Invalid requests answered otherwise:", (long long)m->invalid_unexpected);
    }
    fprintf(f, ROW "%.2f\n", "Benchmark duration (s):", m->duration_s);
    fprintf(f, ROW "%lld\n", "Total input tokens:", (long long)m->total_input);
    fprintf(f, ROW "%lld\n", "Total generated tokens:", (long long)m->total_output);
    fprintf(f, ROW "%.2f\n", "Request throughput (req/s):", m->request_throughput);
    if (m->has_slo) {
        fprintf(f, ROW "%.2f\n", "Request goodput (req/s):", m->request_goodput);
        fprintf(f, ROW "%.1f\n", "SLO attainment (%):", 100.0 * m->slo_attainment);
    }
    fprintf(f, ROW "%.2f\n", "Output token throughput (tok/s):", m->output_throughput);
    fprintf(f, ROW "%.2f\n", "Total token throughput (tok/s):", m->total_token_throughput);
    if (o->price_per_hour > 0) {
        if (m->cost_per_1m_output_usd >= 0)
            fprintf(f, ROW "%.4f\n", "Cost per 1M output tokens (USD):", m->cost_per_1m_output_usd);
        if (m->cost_per_1k_requests_usd >= 0)
            fprintf(f, ROW "%.4f\n", "Cost per 1,000 requests (USD):", m->cost_per_1k_requests_usd);
    }
    if (m->duration_s > 0)
        fprintf(f, ROW "%.1f\n", "Client CPU (% of one core):", 100.0 * res->cpu_s / m->duration_s);
    if (res->spec.found && res->spec.drafts > 0) { /* the server speculates (vLLM's figures) */
        fprintf(f, ROW "%.1f\n", "Spec decode acceptance rate (%):",
                100.0 * res->spec.accepted / res->spec.draft_tokens);
        fprintf(f, ROW "%.2f\n",
                "Spec decode mean accepted length:", 1.0 + res->spec.accepted / res->spec.drafts);
    }
    fprintf(f, "---------------------------------------------------------------\n");
    fprintf(f, "%-6s %9s %9s %9s %9s %9s %9s %9s %9s\n", "ms", "mean", "std", "median", "p90",
            "p95", "p99", "min", "max");
    dist_row(f, "TTFT", &m->ttft_ms);
    dist_row(f, "TPOT", &m->tpot_ms);
    dist_row(f, "ITL", &m->itl_ms);
    dist_row(f, "E2E", &m->e2e_ms);
    if (m->invalid_ms.n)
        dist_row(f, "4xx", &m->invalid_ms);
    fprintf(f, "---------------------------------------------------------------\n");
    fprintf(f, "Errors: ");
    errors_line(f, m);
    fprintf(f, "\n");
    if (res->first_error[0])
        fprintf(f, "First error: %s\n", res->first_error);
    if (m->out_mismatch)
        fprintf(f, "Note: %lld successful requests got a token count other than max_tokens\n",
                (long long)m->out_mismatch);
    if (m->usage_missing)
        fprintf(f,
                "Note: %lld responses had no usage; their token counts are content events and "
                "prompt estimates\n",
                (long long)m->usage_missing);
    if (res->itl.truncated)
        fprintf(f, "Note: ITL samples were capped at %zu\n", res->itl.n);
    if (m->duration_s > 0 && res->cpu_s > 0.9 * m->duration_s)
        fprintf(f, "Warning: brisk-bench used %.0f%% of a core: the client may be the bottleneck\n",
                100.0 * res->cpu_s / m->duration_s);
    fprintf(f, "===============================================================\n");
}

void bench_report_intervals(FILE *f, const bench_level_result *res) {
    fprintf(f, "============ brisk-bench: intervals ============\n");
    fprintf(f, "%-15s %6s %5s %5s %6s %6s %9s %8s %8s %7s %7s %8s %8s\n", "seconds", "ok", "fail",
            "abort", "inv4xx", "invbad", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
            "E2E p50", "E2E p99");
    for (size_t i = 0; i < res->n_intervals; i++) {
        const bench_interval *iv = &res->intervals[i];
        const bench_metrics *m = &iv->m;
        char span[48];
        snprintf(span, sizeof span, "%.1f-%.1f%s", iv->t_start, iv->t_end, iv->partial ? "*" : "");
        fprintf(f,
                "%-15s %6lld %5lld %5lld %6lld %6lld %9.1f %8.1f %8.1f %7.2f %7.2f %8.1f %8.1f\n",
                span, (long long)m->completed, (long long)m->failed, (long long)m->aborted,
                (long long)m->invalid_ok, (long long)m->invalid_unexpected, m->output_throughput,
                m->ttft_ms.p50, m->ttft_ms.p99, m->itl_ms.p50, m->itl_ms.p99, m->e2e_ms.p50,
                m->e2e_ms.p99);
    }
    fprintf(f,
            "(the requests that ended in each interval and their tokens, the ITL gaps that "
            "arrived in it;\n ms; * the last, partial interval; inv4xx / invbad: invalid "
            "requests answered 4xx / otherwise%s)\n",
            res->intervals_truncated ? "; intervals were truncated" : "");
    fprintf(f, "===============================================================\n");
}

int bench_level_passes(const bench_opts *o, const bench_level_result *res) {
    const bench_metrics *m = &res->m;
    if (res->interrupted || m->completed + m->failed == 0)
        return 0;
    return m->slo_attainment + 1e-12 >= o->slo_attainment;
}

int bench_report_best(const bench_opts *o, const bench_level_result *res, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (bench_level_passes(o, &res[i]) &&
            (best < 0 || level_value(o, &res[i].level) > level_value(o, &res[best].level)))
            best = i;
    return best;
}

void bench_report_sweep(FILE *f, const bench_opts *o, const bench_level_result *res, int n,
                        int best) {
    fprintf(f, "============ brisk-bench: sweep over %s ============\n", level_name(o));
    fprintf(f, "%-11s %6s %6s %9s %10s %9s %9s %9s %9s %7s %6s\n", level_name(o), "ok", "fail",
            "req/s", "out tok/s", "TTFT p95", "TPOT p95", "ITL p95", "E2E p95", "SLO %", "meets");
    for (int i = 0; i < n; i++) {
        const bench_metrics *m = &res[i].m;
        fprintf(f, "%-11.4g %6lld %6lld %9.2f %10.1f %9.1f %9.2f %9.2f %9.1f %7.1f %6s\n",
                level_value(o, &res[i].level), (long long)m->completed, (long long)m->failed,
                m->request_throughput, m->output_throughput, m->ttft_ms.p95, m->tpot_ms.p95,
                m->itl_ms.p95, m->e2e_ms.p95, 100.0 * m->slo_attainment,
                res[i].interrupted               ? "intr"
                : bench_level_passes(o, &res[i]) ? "yes"
                                                 : "no");
    }
    /* "TTFT <= 500 ms, TPOT <= 50 ms for 95% of requests" */
    char slo[200] = "";
    size_t w = 0;
    const char *names[3] = {"TTFT", "TPOT", "E2E"};
    const double lim[3] = {o->slo.ttft_ms, o->slo.tpot_ms, o->slo.e2e_ms};
    for (int i = 0; i < 3; i++) {
        if (lim[i] > 0 && w < sizeof slo) {
            int k =
                snprintf(slo + w, sizeof slo - w, "%s%s <= %g ms", w ? ", " : "", names[i], lim[i]);
            w += k > 0 ? (size_t)k : 0;
        }
    }
    if (w < sizeof slo)
        snprintf(slo + w, sizeof slo - w, "%s%.0f%% of requests", w ? " for " : "success for ",
                 100.0 * o->slo_attainment);
    if (best >= 0)
        fprintf(f, "Highest %s meeting the SLO (%s): %g\n", level_name(o), slo,
                level_value(o, &res[best].level));
    else
        fprintf(f, "No %s met the SLO (%s)\n", level_name(o), slo);
    fprintf(f, "===============================================================\n");
}

/* ---- JSON ---- */

static void add_num_or_null(cJSON *o, const char *name, double v, int valid) {
    if (valid && isfinite(v))
        cJSON_AddNumberToObject(o, name, v);
    else
        cJSON_AddNullToObject(o, name);
}

static cJSON *dist_json(const bench_dist *d) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = d->n > 0;
    cJSON_AddNumberToObject(o, "n", (double)d->n);
    add_num_or_null(o, "mean", d->mean, ok);
    add_num_or_null(o, "std", d->std, ok);
    add_num_or_null(o, "median", d->median, ok);
    add_num_or_null(o, "p50", d->p50, ok);
    add_num_or_null(o, "p90", d->p90, ok);
    add_num_or_null(o, "p95", d->p95, ok);
    add_num_or_null(o, "p99", d->p99, ok);
    add_num_or_null(o, "min", d->min, ok);
    add_num_or_null(o, "max", d->max, ok);
    return o;
}

/* {"by_status": {...}, "by_kind": {...}}: by_status counts every failed
 * request that had a status (invalid_unexpected ones included). */
static cJSON *errors_json(const bench_metrics *m) {
    cJSON *err = cJSON_CreateObject();
    if (!err)
        return NULL;
    cJSON *st = cJSON_AddObjectToObject(err, "by_status");
    for (int i = 0; st && i < m->n_status; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", m->by_status[i].status);
        cJSON_AddNumberToObject(st, k, (double)m->by_status[i].n);
    }
    if (st && m->status_other)
        cJSON_AddNumberToObject(st, "other", (double)m->status_other);
    cJSON *kind = cJSON_AddObjectToObject(err, "by_kind");
    for (int k = BENCH_ERR_HTTP; kind && k < BENCH_ERR_N; k++)
        if (bench_err_is_failure(k))
            cJSON_AddNumberToObject(kind, bench_err_name(k), (double)m->by_kind[k]);
    return err;
}

static cJSON *interval_json(const bench_interval *iv) {
    const bench_metrics *m = &iv->m;
    cJSON *x = cJSON_CreateObject();
    if (!x)
        return NULL;
    cJSON_AddNumberToObject(x, "t_start_s", iv->t_start);
    cJSON_AddNumberToObject(x, "t_end_s", iv->t_end);
    cJSON_AddBoolToObject(x, "partial", iv->partial);
    cJSON_AddNumberToObject(x, "completed", (double)m->completed);
    cJSON_AddNumberToObject(x, "failed", (double)m->failed);
    cJSON_AddNumberToObject(x, "aborted", (double)m->aborted);
    cJSON_AddNumberToObject(x, "invalid_ok", (double)m->invalid_ok);
    cJSON_AddNumberToObject(x, "invalid_unexpected", (double)m->invalid_unexpected);
    cJSON_AddNumberToObject(x, "total_input_tokens", (double)m->total_input);
    cJSON_AddNumberToObject(x, "total_output_tokens", (double)m->total_output);
    cJSON_AddNumberToObject(x, "request_throughput", m->request_throughput);
    cJSON_AddNumberToObject(x, "output_throughput", m->output_throughput);
    cJSON_AddItemToObject(x, "ttft_ms", dist_json(&m->ttft_ms));
    cJSON_AddItemToObject(x, "tpot_ms", dist_json(&m->tpot_ms));
    cJSON_AddItemToObject(x, "itl_ms", dist_json(&m->itl_ms));
    cJSON_AddItemToObject(x, "e2e_ms", dist_json(&m->e2e_ms));
    cJSON_AddItemToObject(x, "errors", errors_json(m));
    return x;
}

static cJSON *level_json(const bench_opts *o, const bench_level_result *res) {
    const bench_metrics *m = &res->m;
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    if (o->sweep != BENCH_SWEEP_NONE)
        cJSON_AddNumberToObject(r, "level", level_value(o, &res->level));
    add_num_or_null(r, "max_concurrency", res->level.max_concurrency,
                    res->level.max_concurrency > 0);
    add_num_or_null(r, "request_rate", res->level.request_rate,
                    res->level.request_rate > 0 && isfinite(res->level.request_rate));
    cJSON_AddBoolToObject(r, "interrupted", res->interrupted);
    cJSON_AddNumberToObject(r, "completed", (double)m->completed);
    cJSON_AddNumberToObject(r, "failed", (double)m->failed);
    cJSON_AddNumberToObject(r, "cancelled", (double)m->cancelled);
    cJSON_AddNumberToObject(r, "aborted", (double)m->aborted);
    cJSON_AddNumberToObject(r, "invalid_ok", (double)m->invalid_ok);
    cJSON_AddNumberToObject(r, "invalid_unexpected", (double)m->invalid_unexpected);
    cJSON_AddNumberToObject(r, "duration_s", m->duration_s);
    cJSON_AddNumberToObject(r, "total_input_tokens", (double)m->total_input);
    cJSON_AddNumberToObject(r, "total_output_tokens", (double)m->total_output);
    cJSON_AddNumberToObject(r, "expected_output_tokens", (double)m->expected_output);
    cJSON_AddNumberToObject(r, "output_len_mismatches", (double)m->out_mismatch);
    cJSON_AddNumberToObject(r, "usage_missing", (double)m->usage_missing);
    if (res->spec.found && res->spec.drafts > 0) {
        cJSON *sd = cJSON_AddObjectToObject(r, "spec_decode");
        if (sd) {
            cJSON_AddNumberToObject(sd, "drafts", res->spec.drafts);
            cJSON_AddNumberToObject(sd, "draft_tokens", res->spec.draft_tokens);
            cJSON_AddNumberToObject(sd, "accepted_tokens", res->spec.accepted);
            cJSON_AddNumberToObject(sd, "acceptance_rate",
                                    res->spec.accepted / res->spec.draft_tokens);
            cJSON_AddNumberToObject(sd, "mean_accepted_length",
                                    1.0 + res->spec.accepted / res->spec.drafts);
        }
    } else {
        cJSON_AddNullToObject(r, "spec_decode");
    }
    cJSON_AddNumberToObject(r, "request_throughput", m->request_throughput);
    cJSON_AddNumberToObject(r, "output_throughput", m->output_throughput);
    cJSON_AddNumberToObject(r, "total_token_throughput", m->total_token_throughput);
    add_num_or_null(r, "request_goodput", m->request_goodput, m->has_slo);
    cJSON_AddNumberToObject(r, "slo_attainment", m->slo_attainment);
    cJSON_AddBoolToObject(r, "meets_slo", bench_level_passes(o, res));
    cJSON_AddItemToObject(r, "ttft_ms", dist_json(&m->ttft_ms));
    cJSON_AddItemToObject(r, "tpot_ms", dist_json(&m->tpot_ms));
    cJSON_AddItemToObject(r, "itl_ms", dist_json(&m->itl_ms));
    cJSON_AddItemToObject(r, "e2e_ms", dist_json(&m->e2e_ms));
    cJSON_AddItemToObject(r, "invalid_ms", dist_json(&m->invalid_ms));
    cJSON_AddBoolToObject(r, "itl_truncated", res->itl.truncated);
    cJSON *cost = cJSON_AddObjectToObject(r, "cost_usd");
    if (cost) {
        add_num_or_null(cost, "per_1m_output_tokens", m->cost_per_1m_output_usd,
                        m->cost_per_1m_output_usd >= 0);
        add_num_or_null(cost, "per_1000_requests", m->cost_per_1k_requests_usd,
                        m->cost_per_1k_requests_usd >= 0);
    }
    cJSON *err = errors_json(m);
    if (err) {
        cJSON_AddItemToObject(r, "errors", err);
        if (res->first_error[0])
            cJSON_AddStringToObject(err, "first", res->first_error);
        else
            cJSON_AddNullToObject(err, "first");
    }
    cJSON_AddNumberToObject(r, "client_cpu_s", res->cpu_s);
    if (o->interval_s > 0) {
        cJSON *ivs = cJSON_AddArrayToObject(r, "intervals");
        for (size_t i = 0; ivs && i < res->n_intervals; i++)
            cJSON_AddItemToArray(ivs, interval_json(&res->intervals[i]));
        cJSON_AddBoolToObject(r, "intervals_truncated", res->intervals_truncated);
    }
    if (o->json_requests) {
        cJSON *reqs = cJSON_AddArrayToObject(r, "requests");
        for (size_t i = 0; reqs && i < res->n_recs; i++) {
            const bench_rec *q = &res->recs[i];
            cJSON *x = cJSON_CreateObject();
            if (!x)
                break;
            cJSON_AddNumberToObject(x, "t_start_s", q->t_start);
            add_num_or_null(x, "ttft_ms", q->ttft * 1000.0, q->ttft >= 0);
            cJSON_AddNumberToObject(x, "e2e_ms", q->e2e * 1000.0);
            cJSON_AddNumberToObject(x, "input_tokens", (double)q->in_tokens);
            cJSON_AddNumberToObject(x, "output_tokens", (double)q->out_tokens);
            cJSON_AddNumberToObject(x, "max_tokens", q->expected_out);
            cJSON_AddNumberToObject(x, "content_events", q->n_content);
            cJSON_AddNumberToObject(x, "status", q->status);
            cJSON_AddStringToObject(x, "result", bench_err_name(q->err));
            cJSON_AddNumberToObject(x, "index", (double)q->index);
            cJSON_AddStringToObject(x, "kind",
                                    q->kind == BENCH_REQ_ABORT     ? "abort"
                                    : q->kind == BENCH_REQ_INVALID ? "invalid"
                                                                   : "normal");
            if (q->kind == BENCH_REQ_ABORT)
                cJSON_AddNumberToObject(x, "abort_at", q->abort_at);
            if (q->kind == BENCH_REQ_INVALID)
                cJSON_AddStringToObject(x, "invalid", bench_invalid_name(q->invalid));
            cJSON_AddItemToArray(reqs, x);
        }
    }
    return r;
}

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(out, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

static cJSON *params_json(const bench_opts *o) {
    cJSON *p = cJSON_CreateObject();
    if (!p)
        return NULL;
    cJSON_AddStringToObject(p, "base_url", o->base_url);
    cJSON_AddStringToObject(p, "endpoint", o->chat ? "chat" : "completions");
    cJSON_AddStringToObject(p, "url", o->url);
    if (o->model)
        cJSON_AddStringToObject(p, "model", o->model);
    else
        cJSON_AddNullToObject(p, "model");
    cJSON_AddBoolToObject(p, "api_key_set", o->api_key != NULL);
    if (o->dataset)
        cJSON_AddStringToObject(p, "dataset", o->dataset);
    else
        cJSON_AddNullToObject(p, "dataset");
    cJSON_AddNumberToObject(p, "input_len", o->input_len);
    cJSON_AddNumberToObject(p, "output_len", o->output_len);
    cJSON_AddNumberToObject(p, "range_ratio", o->range_ratio);
    cJSON_AddNumberToObject(p, "shared_prefix_len", o->shared_prefix_len);
    cJSON_AddNumberToObject(p, "temperature", o->temperature);
    cJSON_AddBoolToObject(p, "ignore_eos", o->ignore_eos);
    cJSON_AddNumberToObject(p, "abort_rate", o->abort_rate);
    cJSON_AddNumberToObject(p, "invalid_rate", o->invalid_rate);
    add_num_or_null(p, "interval_s", o->interval_s, o->interval_s > 0);
    add_num_or_null(p, "request_rate", o->request_rate, isfinite(o->request_rate));
    cJSON_AddNumberToObject(p, "burstiness", o->burstiness);
    add_num_or_null(p, "max_concurrency", o->max_concurrency, o->max_concurrency > 0);
    add_num_or_null(p, "num_prompts", (double)o->num_prompts, o->num_prompts > 0);
    add_num_or_null(p, "duration_s", o->duration_s, o->duration_s > 0);
    cJSON_AddNumberToObject(p, "warmup", o->warmup);
    cJSON_AddNumberToObject(p, "seed", (double)o->seed);
    add_num_or_null(p, "timeout_s", o->timeout_s, o->timeout_s > 0);
    cJSON *slo = cJSON_AddObjectToObject(p, "slo");
    if (slo) {
        add_num_or_null(slo, "ttft_ms", o->slo.ttft_ms, o->slo.ttft_ms > 0);
        add_num_or_null(slo, "tpot_ms", o->slo.tpot_ms, o->slo.tpot_ms > 0);
        add_num_or_null(slo, "e2e_ms", o->slo.e2e_ms, o->slo.e2e_ms > 0);
        cJSON_AddNumberToObject(slo, "attainment", o->slo_attainment);
    }
    add_num_or_null(p, "price_per_hour_usd", o->price_per_hour, o->price_per_hour > 0);
    if (o->label)
        cJSON_AddStringToObject(p, "label", o->label);
    return p;
}

int bench_report_json(const char *path, const bench_opts *o, const bench_level_result *res, int n,
                      int best, char *err, size_t err_len) {
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory");
    cJSON_AddStringToObject(root, "tool", "brisk-bench");
    cJSON_AddStringToObject(root, "version", BRISK_VERSION);
    cJSON_AddStringToObject(root, "commit", BRISK_GIT_COMMIT);
    char date[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(root, "date", date);
    cJSON *mach = cJSON_AddObjectToObject(root, "machine");
    if (mach) {
        char host[256] = "unknown", cpu[256];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        read_cpu_model(cpu, sizeof cpu);
        struct utsname u;
        cJSON_AddStringToObject(mach, "hostname", host);
        cJSON_AddStringToObject(mach, "cpu", cpu);
        cJSON_AddNumberToObject(mach, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
        if (uname(&u) == 0) {
            char os[200];
            snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
            cJSON_AddStringToObject(mach, "os", os);
        }
    }
    cJSON_AddItemToObject(root, "params", params_json(o));
    if (o->sweep != BENCH_SWEEP_NONE) {
        cJSON *sw = cJSON_AddObjectToObject(root, "sweep");
        if (sw) {
            cJSON_AddStringToObject(sw, "kind", level_name(o));
            cJSON *lv = cJSON_AddArrayToObject(sw, "levels");
            for (int i = 0; lv && i < o->n_sweep; i++)
                cJSON_AddItemToArray(lv, cJSON_CreateNumber(o->sweep_levels[i]));
            add_num_or_null(sw, "best_level", best >= 0 ? level_value(o, &res[best].level) : 0,
                            best >= 0);
        }
    } else {
        cJSON_AddNullToObject(root, "sweep");
    }
    int interrupted = 0;
    cJSON *runs = cJSON_AddArrayToObject(root, "runs");
    for (int i = 0; runs && i < n; i++) {
        cJSON_AddItemToArray(runs, level_json(o, &res[i]));
        interrupted |= res[i].interrupted;
    }
    cJSON_AddBoolToObject(root, "interrupted", interrupted);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory writing JSON");
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
        rc = brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && rc == 0)
        rc = brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", path, strerror(errno));
    free(text);
    return rc;
}

/* ---- gnuplot ---- */

/* A gnuplot single-quoted string: '' is a quote, nothing else is special;
 * control characters (from a server's model name, say) become spaces. */
static void gp_str(FILE *f, const char *s) {
    fputc('\'', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'')
            fputs("''", f);
        else
            fputc(c < 0x20 || c == 0x7f ? ' ' : (int)c, f);
    }
    fputc('\'', f);
}

static void gp_head(FILE *f, const char *png, const char *title, const char *xlabel,
                    const char *ylabel, const bench_opts *o) {
    fprintf(f, "set terminal pngcairo size 960,600 noenhanced font ',10'\nset output ");
    gp_str(f, png);
    char t[400];
    snprintf(t, sizeof t, "%s - %s%s%s", title, o->model ? o->model : "", o->label ? " - " : "",
             o->label ? o->label : "");
    fprintf(f, "\nset title ");
    gp_str(f, t);
    fprintf(f, "\nset xlabel ");
    gp_str(f, xlabel);
    fprintf(f, "\nset ylabel ");
    gp_str(f, ylabel);
    fprintf(f, "\nset grid\nset key bottom right\n");
}

/* The CDF of a sorted sample as at most 2000 points (x, fraction <= x). */
static void gp_cdf_block(FILE *f, int id, const double *v, size_t n) {
    fprintf(f, "$d%d << EOD\n", id);
    size_t pts = n < 2000 ? n : 2000;
    for (size_t k = 0; k < pts; k++) {
        size_t i = pts == n ? k : (size_t)((double)k * (double)(n - 1) / (double)(pts - 1));
        fprintf(f, "%.6g %.6g\n", v[i], (double)(i + 1) / (double)n);
    }
    fprintf(f, "EOD\n");
}

static int run_gnuplot(const char *script, char *err, size_t err_len) {
    pid_t pid;
    char *argv[] = {"gnuplot", (char *)script, NULL};
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc != 0)
        return brisk_set_err(err, err_len, BRISK_EIO,
                             "cannot run gnuplot (%s); install it (Debian: gnuplot-nox)",
                             strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return brisk_set_err(err, err_len, BRISK_EIO, "waitpid: %s", strerror(errno));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "gnuplot failed on %s", script);
    return 0;
}

static void level_title(const bench_opts *o, const bench_level_result *r, char *out, size_t n) {
    if (o->sweep == BENCH_SWEEP_RATE)
        snprintf(out, n, "rate %g/s", r->level.request_rate);
    else if (r->level.max_concurrency > 0)
        snprintf(out, n, "concurrency %d", r->level.max_concurrency);
    else if (r->level.request_rate > 0 && isfinite(r->level.request_rate))
        snprintf(out, n, "rate %g/s", r->level.request_rate);
    else
        snprintf(out, n, "all at once");
}

static int plot_cdf(const char *dir, const char *name, const char *title, const char *xlabel,
                    const bench_opts *o, const bench_level_result *res, int n, int which, char *err,
                    size_t err_len) {
    char gp[1200], png[1200];
    snprintf(gp, sizeof gp, "%s/%s.gp", dir, name);
    snprintf(png, sizeof png, "%s/%s.png", dir, name);
    FILE *f = fopen(gp, "w");
    if (!f)
        return brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", gp, strerror(errno));
    gp_head(f, png, title, xlabel, "fraction of samples <= x", o);
    int curves = 0;
    for (int i = 0; i < n; i++) {
        const bench_samples *s = &res[i].samples;
        const double *v = which == 0 ? s->ttft_ms : which == 1 ? s->itl_ms : s->e2e_ms;
        size_t cnt = which == 0 ? s->n_ttft : which == 1 ? s->n_itl : s->n_e2e;
        if (cnt == 0)
            continue;
        gp_cdf_block(f, i, v, cnt);
        curves++;
    }
    if (curves == 0) {
        /* Nothing measured: an empty chart still says so. */
        fprintf(f, "set label 1 'no samples' at graph 0.5, graph 0.5 center\n"
                   "set xrange [0:1]\nset yrange [0:1]\nplot NaN notitle\n");
    } else {
        fprintf(f, "set yrange [0:1]\nplot ");
        int first = 1;
        for (int i = 0; i < n; i++) {
            const bench_samples *s = &res[i].samples;
            size_t cnt = which == 0 ? s->n_ttft : which == 1 ? s->n_itl : s->n_e2e;
            if (cnt == 0)
                continue;
            char t[64];
            level_title(o, &res[i], t, sizeof t);
            fprintf(f, "%s$d%d with lines lw 2 title ", first ? "" : ", ", i);
            gp_str(f, t);
            first = 0;
        }
        fprintf(f, "\n");
    }
    if (fclose(f) != 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", gp, strerror(errno));
    return run_gnuplot(gp, err, err_len);
}

static int plot_sweep(const char *dir, const bench_opts *o, const bench_level_result *res, int n,
                      int latency, char *err, size_t err_len) {
    const char *name = latency ? "sweep_p95" : "sweep_throughput";
    char gp[1200], png[1200];
    snprintf(gp, sizeof gp, "%s/%s.gp", dir, name);
    snprintf(png, sizeof png, "%s/%s.png", dir, name);
    FILE *f = fopen(gp, "w");
    if (!f)
        return brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", gp, strerror(errno));
    char xl[64];
    snprintf(xl, sizeof xl,
             o->sweep == BENCH_SWEEP_RATE ? "request rate (req/s)" : "max concurrency");
    gp_head(f, png, latency ? "P95 latency" : "throughput", xl,
            latency ? "P95 latency (ms)" : "output tokens/s", o);
    double lo = INFINITY, hi = 0;
    fprintf(f, "$d << EOD\n");
    for (int i = 0; i < n; i++) {
        const bench_metrics *m = &res[i].m;
        double x = level_value(o, &res[i].level);
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        fprintf(f, "%.6g %.6g %.6g %.6g %.6g %.6g %.6g\n", x, m->output_throughput,
                m->request_throughput, m->ttft_ms.p95, m->tpot_ms.p95, m->itl_ms.p95,
                m->e2e_ms.p95);
    }
    fprintf(f, "EOD\n");
    if (lo > 0 && hi / lo >= 8)
        fprintf(f, "set logscale x 2\n");
    if (latency) {
        fprintf(f, "set logscale y\nset key top left\n"
                   "plot $d using 1:($4>0?$4:NaN) with linespoints lw 2 title 'TTFT', "
                   "$d using 1:($5>0?$5:NaN) with linespoints lw 2 title 'TPOT', "
                   "$d using 1:($6>0?$6:NaN) with linespoints lw 2 title 'ITL', "
                   "$d using 1:($7>0?$7:NaN) with linespoints lw 2 title 'E2E'\n");
    } else {
        fprintf(f, "set key top left\nset y2label 'requests/s'\nset ytics nomirror\n"
                   "set y2tics\nset yrange [0:*]\nset y2range [0:*]\n"
                   "plot $d using 1:2 with linespoints lw 2 title 'output tok/s', "
                   "$d using 1:3 axes x1y2 with linespoints lw 2 title 'req/s'\n");
    }
    if (fclose(f) != 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", gp, strerror(errno));
    return run_gnuplot(gp, err, err_len);
}

int bench_report_plot(const char *dir, const bench_opts *o, const bench_level_result *res, int n,
                      char *err, size_t err_len) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return brisk_set_err(err, err_len, BRISK_EIO, "%s: %s", dir, strerror(errno));
    int rc = plot_cdf(dir, "ttft_cdf", "TTFT CDF", "time to first token (ms)", o, res, n, 0, err,
                      err_len);
    if (rc == 0)
        rc = plot_cdf(dir, "itl_cdf", "ITL CDF", "inter-token latency (ms)", o, res, n, 1, err,
                      err_len);
    if (rc == 0)
        rc = plot_cdf(dir, "e2e_cdf", "E2E latency CDF", "end-to-end latency (ms)", o, res, n, 2,
                      err, err_len);
    if (rc == 0 && o->sweep != BENCH_SWEEP_NONE) {
        rc = plot_sweep(dir, o, res, n, 0, err, err_len);
        if (rc == 0)
            rc = plot_sweep(dir, o, res, n, 1, err, err_len);
    }
    return rc;
}
