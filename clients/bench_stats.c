/* bench_stats.c - metric arithmetic (see bench_stats.h for the definitions). */
#include "clients/bench_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

const char *bench_err_name(int kind) {
    switch (kind) {
    case BENCH_OK: return "ok";
    case BENCH_ERR_HTTP: return "http";
    case BENCH_ERR_CONNECT: return "connect";
    case BENCH_ERR_CLOSED: return "closed";
    case BENCH_ERR_TIMEOUT: return "timeout";
    case BENCH_ERR_PROTOCOL: return "protocol";
    case BENCH_ERR_STREAM: return "stream_error";
    case BENCH_ERR_NO_CONTENT: return "no_content";
    case BENCH_ERR_INVALID_UNEXPECTED: return "invalid_unexpected";
    case BENCH_ERR_CANCELLED: return "cancelled";
    case BENCH_ERR_ABORTED: return "aborted";
    case BENCH_ERR_INVALID_OK: return "invalid_ok";
    default: return "unknown";
    }
}

int bench_err_is_failure(int kind) {
    return kind != BENCH_OK && kind != BENCH_ERR_CANCELLED && kind != BENCH_ERR_ABORTED &&
           kind != BENCH_ERR_INVALID_OK;
}

int bench_dvec_push(bench_dvec *d, double x) {
    if (d->max && d->n >= d->max) {
        d->truncated = 1;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 1024;
        double *v = realloc(d->v, cap * sizeof *v);
        if (!v) {
            d->truncated = 1;
            return BRISK_ENOMEM;
        }
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

void bench_dvec_free(bench_dvec *d) {
    free(d->v);
    d->v = NULL;
    d->n = d->cap = 0;
    d->truncated = 0;
}

double bench_percentile(const double *sorted, size_t n, double pct) {
    if (n == 0)
        return 0;
    if (pct <= 0)
        return sorted[0];
    if (pct >= 100)
        return sorted[n - 1];
    /* numpy "linear": the value at fractional rank pct/100 * (n - 1). */
    double rank = pct / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_dist_of(double *v, size_t n, bench_dist *out) {
    memset(out, 0, sizeof *out);
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    double mean = sum / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    out->n = (int64_t)n;
    out->mean = mean;
    out->std = sqrt(ss / (double)n); /* numpy's default ddof=0 */
    out->median = bench_percentile(v, n, 50);
    out->p50 = out->median;
    out->p90 = bench_percentile(v, n, 90);
    out->p95 = bench_percentile(v, n, 95);
    out->p99 = bench_percentile(v, n, 99);
    out->min = v[0];
    out->max = v[n - 1];
}

void bench_samples_free(bench_samples *s) {
    if (!s)
        return;
    free(s->ttft_ms);
    free(s->tpot_ms);
    free(s->itl_ms);
    free(s->e2e_ms);
    memset(s, 0, sizeof *s);
}

static double rec_tpot(const bench_rec *r) {
    if (r->out_tokens <= 1)
        return 0;
    return (r->e2e - r->ttft) / (double)(r->out_tokens - 1);
}

int bench_rec_meets_slo(const bench_rec *r, const bench_slo *slo) {
    if (!slo)
        return 1;
    /* vLLM compares slo >= value: a request exactly at the target is good. */
    if (slo->ttft_ms > 0 && r->ttft * 1000.0 > slo->ttft_ms)
        return 0;
    if (slo->tpot_ms > 0 && rec_tpot(r) * 1000.0 > slo->tpot_ms)
        return 0;
    if (slo->e2e_ms > 0 && r->e2e * 1000.0 > slo->e2e_ms)
        return 0;
    return 1;
}

static void tally_status(bench_metrics *m, int status) {
    for (int i = 0; i < m->n_status; i++) {
        if (m->by_status[i].status == status) {
            m->by_status[i].n++;
            return;
        }
    }
    if (m->n_status < BENCH_MAX_STATUSES) {
        m->by_status[m->n_status].status = status;
        m->by_status[m->n_status].n = 1;
        m->n_status++;
    } else {
        m->status_other++;
    }
}

int bench_metrics_compute(const bench_rec *recs, size_t n, const double *itl_s, size_t n_itl,
                          double duration_s, const bench_slo *slo, double price_per_hour,
                          bench_metrics *m, bench_samples *samples) {
    memset(m, 0, sizeof *m);
    if (samples)
        memset(samples, 0, sizeof *samples);
    m->duration_s = duration_s;
    m->has_slo = slo && (slo->ttft_ms > 0 || slo->tpot_ms > 0 || slo->e2e_ms > 0);
    size_t n_ok = 0, n_inv = 0;
    for (size_t i = 0; i < n; i++) {
        n_ok += recs[i].err == BENCH_OK;
        n_inv += recs[i].err == BENCH_ERR_INVALID_OK;
    }
    /* +1: malloc(0) may return NULL, which must not read as a failure. */
    double *ttft = malloc((n_ok + 1) * sizeof *ttft);
    double *tpot = malloc((n_ok + 1) * sizeof *tpot);
    double *e2e = malloc((n_ok + 1) * sizeof *e2e);
    double *itl = malloc((n_itl + 1) * sizeof *itl);
    double *inv = malloc((n_inv + 1) * sizeof *inv);
    if (!ttft || !tpot || !e2e || !itl || !inv) {
        free(ttft);
        free(tpot);
        free(e2e);
        free(itl);
        free(inv);
        return BRISK_ENOMEM;
    }
    size_t n_tpot = 0;
    n_ok = n_inv = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_rec *r = &recs[i];
        if (r->err == BENCH_ERR_CANCELLED) {
            m->cancelled++;
            continue;
        }
        if (r->err == BENCH_ERR_ABORTED) {
            m->aborted++;
            continue;
        }
        if (r->err == BENCH_ERR_INVALID_OK) {
            m->invalid_ok++;
            inv[n_inv++] = r->e2e * 1000.0;
            continue;
        }
        if (r->err != BENCH_OK) {
            m->failed++;
            if (r->err >= 0 && r->err < BENCH_ERR_N)
                m->by_kind[r->err]++;
            if (r->err == BENCH_ERR_INVALID_UNEXPECTED)
                m->invalid_unexpected++;
            if (r->err == BENCH_ERR_HTTP || (r->err == BENCH_ERR_INVALID_UNEXPECTED && r->status))
                tally_status(m, r->status);
            continue;
        }
        m->completed++;
        m->total_input += r->in_tokens;
        m->total_output += r->out_tokens;
        m->expected_output += r->expected_out;
        m->out_mismatch += r->out_tokens != r->expected_out;
        m->usage_missing += !r->usage_seen;
        ttft[n_ok] = r->ttft * 1000.0;
        e2e[n_ok] = r->e2e * 1000.0;
        n_ok++;
        if (r->out_tokens > 1)
            tpot[n_tpot++] = rec_tpot(r) * 1000.0;
        if (bench_rec_meets_slo(r, m->has_slo ? slo : NULL))
            m->good++;
    }
    for (size_t i = 0; i < n_itl; i++)
        itl[i] = itl_s[i] * 1000.0;
    bench_dist_of(ttft, n_ok, &m->ttft_ms);
    bench_dist_of(tpot, n_tpot, &m->tpot_ms);
    bench_dist_of(itl, n_itl, &m->itl_ms);
    bench_dist_of(e2e, n_ok, &m->e2e_ms);
    bench_dist_of(inv, n_inv, &m->invalid_ms);
    free(inv);
    if (duration_s > 0) {
        m->request_throughput = (double)m->completed / duration_s;
        m->request_goodput = (double)m->good / duration_s;
        m->output_throughput = (double)m->total_output / duration_s;
        m->total_token_throughput = (double)(m->total_input + m->total_output) / duration_s;
    }
    int64_t judged = m->completed + m->failed;
    m->slo_attainment = judged ? (double)m->good / (double)judged : 0;
    m->cost_per_1m_output_usd = m->cost_per_1k_requests_usd = -1;
    if (price_per_hour > 0) {
        /* At the measured rates, one hour of the machine buys 3600 * rate. */
        double per_s = price_per_hour / 3600.0;
        m->cost_per_1m_output_usd =
            m->output_throughput > 0 ? per_s / m->output_throughput * 1e6 : -1;
        m->cost_per_1k_requests_usd =
            m->request_throughput > 0 ? per_s / m->request_throughput * 1e3 : -1;
    }
    if (samples) {
        samples->ttft_ms = ttft;
        samples->n_ttft = n_ok;
        samples->tpot_ms = tpot;
        samples->n_tpot = n_tpot;
        samples->itl_ms = itl;
        samples->n_itl = n_itl;
        samples->e2e_ms = e2e;
        samples->n_e2e = n_ok;
    } else {
        free(ttft);
        free(tpot);
        free(itl);
        free(e2e);
    }
    return 0;
}

void bench_spec_parse(const char *text, size_t len, bench_spec *out) {
    static const char *const names[3] = {"vllm:spec_decode_num_drafts_total",
                                         "vllm:spec_decode_num_draft_tokens_total",
                                         "vllm:spec_decode_num_accepted_tokens_total"};
    memset(out, 0, sizeof *out);
    double *dst[3] = {&out->drafts, &out->draft_tokens, &out->accepted};
    for (size_t at = 0; at < len;) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        for (int k = 0; k < 3; k++) {
            size_t nk = strlen(names[k]);
            if (n <= nk || memcmp(line, names[k], nk) != 0 || (line[nk] != '{' && line[nk] != ' '))
                continue;
            /* the value: after the line's last space */
            size_t sp = n;
            while (sp > nk && line[sp - 1] != ' ')
                sp--;
            char num[64];
            size_t m = n - sp;
            if (sp == nk || m == 0 || m >= sizeof num)
                break;
            memcpy(num, line + sp, m);
            num[m] = '\0';
            char *end;
            double v = strtod(num, &end);
            if (*end == '\0' && isfinite(v) && v >= 0) {
                *dst[k] += v;
                out->found = 1;
            }
            break;
        }
    }
}
