/* srv_metrics.c - the metrics registry behind GET /metrics: vLLM-compatible
 * histograms and counters, sliding-window quantiles and token rates, and the
 * Prometheus text renderer. See srv_metrics.h for the names and definitions. */
#include "server/ops/srv_metrics.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"

#ifndef NDEBUG
#include <pthread.h>
#endif

/* Defaults of srv_metrics_config: vLLM's 1-2-5 buckets stop at the model's
 * context; 8192 tokens is a common one. 60 s and 8192 samples per series keep
 * the windows at 128 KiB each whatever the load. */
enum { METRICS_DEFAULT_MAX_MODEL_LEN = 8192, METRICS_DEFAULT_MAX_SAMPLES = 8192 };
#define METRICS_DEFAULT_WINDOW_S 60.0

/* vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), in seconds. */
static const double metrics_ttft_buckets[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                              0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                              20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double metrics_itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                             0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                             7.5,  10.0,  20.0, 40.0,  80.0};
static const double metrics_request_latency_buckets[] = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define METRICS_COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const metrics_finish_names[SRV_METRICS_FINISH_COUNT] = {"stop", "length",
                                                                           "abort", "error"};

/* HTTP status codes counted: 100..599, per route class. */
enum { METRICS_HTTP_MIN = 100, METRICS_HTTP_MAX = 599 };
enum { METRICS_HTTP_CODES = METRICS_HTTP_MAX - METRICS_HTTP_MIN + 1 };

static const char *const metrics_route_names[SRV_ROUTE_COUNT] = {
    "/v1/completions", "/v1/chat/completions", "/v1/models", "probe", "/metrics", "other"};

/* Codes shown at 0 before their first response on the API routes. */
static const int metrics_http_preset[] = {200, 400, 401, 429, 500, 503};

/* A histogram: counts[i] holds values in (bounds[i-1], bounds[i]]; counts[n]
 * holds values above the last bound. Cumulated only when rendered. */
typedef struct {
    double *bounds; /* [n], ascending, owned */
    int n;
    uint64_t *counts; /* [n + 1], owned */
    double sum;
    uint64_t count;
} metrics_hist;

/* A ring of timed samples, oldest first. */
typedef struct {
    double *t; /* [cap] observation times */
    double *v; /* [cap] values */
    int cap, head, n;
} metrics_window;

/* A ring of token events for the tokens-per-second window. */
typedef struct {
    double t;
    long long prompt, gen;
} metrics_token_event;

typedef struct {
    metrics_token_event *ev; /* [cap] */
    int cap, head, n;
    double start; /* creation time, or the newest event pushed out by cap */
} metrics_token_window;

enum { METRICS_W_TTFT = 0, METRICS_W_ITL, METRICS_W_E2E, METRICS_W_COUNT };

struct srv_metrics {
    char *label;     /* `model_name="<escaped>"`, owned */
    char *build;     /* `version="..",commit="..",backends=".."`, owned */
    double window_s; /* sliding window length */
    double merge_s;  /* token events closer than this are merged */
    int max_samples;

    metrics_hist ttft, itl, e2e, queue, prompt_len, gen_len;
    metrics_window win[METRICS_W_COUNT];
    metrics_token_window tokens;
    double *scratch; /* [max_samples] for the quantile sort */

    uint64_t prompt_total, gen_total;
    uint64_t deadline[2]; /* requests ended by their deadline: [0] waiting, [1] running */
    uint64_t success[SRV_METRICS_FINISH_COUNT];
    uint64_t http[SRV_ROUTE_COUNT][METRICS_HTTP_CODES];
    uint64_t unknown_fields;

#ifndef NDEBUG
    /* Debug builds check the one-thread contract: the first observe or
     * render call binds the thread (create may run on another). */
    int owner_set;
    pthread_t owner;
#endif
};

static void metrics_check_thread(srv_metrics *m) {
#ifndef NDEBUG
    if (!m->owner_set) {
        m->owner = pthread_self();
        m->owner_set = 1;
    }
    assert(pthread_equal(m->owner, pthread_self()) && "srv_metrics used from two threads");
#else
    (void)m;
#endif
}

/* ---- number formatting ------------------------------------------------- */

/* Python's repr(v) for a finite, non-zero v: the shortest digits that read
 * back as v, positional for exponents -4..15, else d.ddde+XX. */
static void metrics_python_repr(char *out, size_t n, double v) {
    char e[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "[-]d[.ddd]e[+-]XX": collect the digits and the exponent. */
    char digits[32];
    int nd = 0, neg = 0;
    const char *c = e;
    if (*c == '-') {
        neg = 1;
        c++;
    }
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9' && nd < (int)sizeof digits - 1)
            digits[nd++] = *c;
    int exp10 = *c == 'e' ? atoi(c + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';

    char s[64];
    size_t k = 0;
    if (neg)
        s[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                s[k++] = i < nd ? digits[i] : '0';
            s[k++] = '.';
            if (nd > exp10 + 1) {
                for (int i = exp10 + 1; i < nd; i++)
                    s[k++] = digits[i];
            } else {
                s[k++] = '0';
            }
        } else {
            s[k++] = '0';
            s[k++] = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                s[k++] = '0';
            for (int i = 0; i < nd; i++)
                s[k++] = digits[i];
        }
        s[k] = '\0';
    } else {
        s[k++] = digits[0];
        if (nd > 1) {
            s[k++] = '.';
            for (int i = 1; i < nd; i++)
                s[k++] = digits[i];
        }
        snprintf(s + k, sizeof s - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(out, n, "%s", s);
}

int srv_metrics_format_float(char *out, size_t n, double v) {
    if (isnan(v))
        return snprintf(out, n, "NaN");
    if (isinf(v))
        return snprintf(out, n, "%s", v > 0 ? "+Inf" : "-Inf");
    if (v == 0)
        return snprintf(out, n, "%s", signbit(v) ? "-0.0" : "0.0");
    char s[64];
    metrics_python_repr(s, sizeof s, v);
    /* prometheus_client switches to an exponent once more than 6 digits lead
     * the point: d.ddd with trailing zeros and point stripped, then e+0<k>. */
    const char *dot = strchr(s, '.');
    if (v > 0 && dot && dot - s > 6) {
        int lead = (int)(dot - s);
        char mant[64];
        size_t k = 0;
        mant[k++] = s[0];
        mant[k++] = '.';
        for (int i = 1; i < lead; i++)
            mant[k++] = s[i];
        for (const char *c = dot + 1; *c; c++)
            mant[k++] = *c;
        while (k > 0 && (mant[k - 1] == '0' || mant[k - 1] == '.'))
            k--;
        mant[k] = '\0';
        return snprintf(out, n, "%se+0%d", mant, lead - 1);
    }
    return snprintf(out, n, "%s", s);
}

/* ---- histograms and windows ------------------------------------------- */

static int metrics_hist_init(metrics_hist *h, const double *bounds, int n) {
    h->n = n;
    h->bounds = brisk_malloc((size_t)(n > 0 ? n : 1) * sizeof *h->bounds);
    h->counts = brisk_calloc((size_t)n + 1, sizeof *h->counts);
    if (!h->bounds || !h->counts)
        return -1;
    if (n > 0)
        memcpy(h->bounds, bounds, (size_t)n * sizeof *bounds);
    return 0;
}

/* vLLM's build_1_2_5_buckets(max): 1, 2, 5, 10, 20, 50, ... while <= max. */
static int metrics_hist_init_125(metrics_hist *h, int max_value) {
    double b[64];
    int n = 0;
    static const int mant[3] = {1, 2, 5};
    for (double scale = 1; n < 64; scale *= 10) {
        int i = 0;
        for (; i < 3 && n < 64; i++) {
            double v = mant[i] * scale;
            if (v > max_value)
                break;
            b[n++] = v;
        }
        if (i < 3)
            break;
    }
    return metrics_hist_init(h, b, n);
}

static void metrics_hist_free(metrics_hist *h) {
    free(h->bounds);
    free(h->counts);
}

static void metrics_hist_observe(metrics_hist *h, double v) {
    /* Bounds are few (at most ~30): a linear scan is as fast as a search. */
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static int metrics_window_init(metrics_window *w, int cap) {
    w->cap = cap;
    w->t = brisk_malloc((size_t)cap * sizeof *w->t);
    w->v = brisk_malloc((size_t)cap * sizeof *w->v);
    return w->t && w->v ? 0 : -1;
}

static void metrics_window_free(metrics_window *w) {
    free(w->t);
    free(w->v);
}

static void metrics_window_push(metrics_window *w, double t, double v) {
    if (w->n == w->cap) { /* full: the oldest sample makes room */
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
    int i = (w->head + w->n) % w->cap;
    w->t[i] = t;
    w->v[i] = v;
    w->n++;
}

static void metrics_window_expire(metrics_window *w, double now, double window_s) {
    while (w->n > 0 && now - w->t[w->head] >= window_s) {
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
}

static void metrics_tokens_push(metrics_token_window *w, double t, long long p, long long g,
                                double merge_s) {
    if (w->n > 0) {
        metrics_token_event *last = &w->ev[(w->head + w->n - 1) % w->cap];
        if (t - last->t < merge_s) {
            last->prompt += p;
            last->gen += g;
            return;
        }
    }
    /* Merging and expiry keep at most about max_samples events, so the ring
     * (max_samples + 2) does not fill in practice; if it ever does, the oldest
     * event goes and the covered span starts where it was, so the rate stays
     * tokens counted / time they were counted over. */
    if (w->n == w->cap) {
        double gone = w->ev[w->head].t;
        if (gone > w->start)
            w->start = gone;
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
    metrics_token_event *e = &w->ev[(w->head + w->n) % w->cap];
    e->t = t;
    e->prompt = p;
    e->gen = g;
    w->n++;
}

static void metrics_tokens_expire(metrics_token_window *w, double now, double window_s) {
    while (w->n > 0 && now - w->ev[w->head].t >= window_s) {
        w->head = (w->head + 1) % w->cap;
        w->n--;
    }
}

/* ---- create / free ----------------------------------------------------- */

srv_metrics_config srv_metrics_config_default(void) {
    srv_metrics_config c;
    memset(&c, 0, sizeof c);
    c.max_model_len = METRICS_DEFAULT_MAX_MODEL_LEN;
    c.window_s = METRICS_DEFAULT_WINDOW_S;
    c.max_samples = METRICS_DEFAULT_MAX_SAMPLES;
    return c;
}

/* Label value escaping of the text format: \ -> \\, " -> \", newline -> \n. */
static char *metrics_label_pair(const char *name, const char *value) {
    size_t n = strlen(name) + 4;
    for (const char *c = value; *c; c++)
        n += (*c == '\\' || *c == '"' || *c == '\n') ? 2 : 1;
    char *s = brisk_malloc(n);
    if (!s)
        return NULL;
    size_t k = 0;
    for (const char *c = name; *c; c++)
        s[k++] = *c;
    s[k++] = '=';
    s[k++] = '"';
    for (const char *c = value; *c; c++) {
        if (*c == '\\' || *c == '"') {
            s[k++] = '\\';
            s[k++] = *c;
        } else if (*c == '\n') {
            s[k++] = '\\';
            s[k++] = 'n';
        } else {
            s[k++] = *c;
        }
    }
    s[k++] = '"';
    s[k] = '\0';
    return s;
}

srv_metrics *srv_metrics_create(const srv_metrics_config *cfg, double now) {
    if (!cfg || !cfg->model_name || !isfinite(cfg->window_s) || !isfinite(now))
        return NULL;
    srv_metrics *m = brisk_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->window_s = cfg->window_s > 0 ? cfg->window_s : METRICS_DEFAULT_WINDOW_S;
    m->max_samples = cfg->max_samples > 0 ? cfg->max_samples : METRICS_DEFAULT_MAX_SAMPLES;
    m->merge_s = m->window_s / m->max_samples;
    int max_len = cfg->max_model_len > 0 ? cfg->max_model_len : METRICS_DEFAULT_MAX_MODEL_LEN;

    int bad = 0;
    m->label = metrics_label_pair("model_name", cfg->model_name);
    bad |= !m->label;
    char *bv = metrics_label_pair("version", cfg->version ? cfg->version : "unknown");
    char *bc = metrics_label_pair("commit", cfg->commit ? cfg->commit : "unknown");
    char *bb = metrics_label_pair("backends", cfg->backends ? cfg->backends : "unknown");
    if (bv && bc && bb) {
        size_t n = strlen(bv) + strlen(bc) + strlen(bb) + 3;
        m->build = brisk_malloc(n);
        if (m->build)
            snprintf(m->build, n, "%s,%s,%s", bv, bc, bb);
    }
    free(bv);
    free(bc);
    free(bb);
    bad |= !m->build;
    bad |=
        metrics_hist_init(&m->ttft, metrics_ttft_buckets, METRICS_COUNT_OF(metrics_ttft_buckets));
    bad |= metrics_hist_init(&m->itl, metrics_itl_buckets, METRICS_COUNT_OF(metrics_itl_buckets));
    bad |= metrics_hist_init(&m->e2e, metrics_request_latency_buckets,
                             METRICS_COUNT_OF(metrics_request_latency_buckets));
    bad |= metrics_hist_init(&m->queue, metrics_request_latency_buckets,
                             METRICS_COUNT_OF(metrics_request_latency_buckets));
    bad |= metrics_hist_init_125(&m->prompt_len, max_len);
    bad |= metrics_hist_init_125(&m->gen_len, max_len);
    for (int i = 0; i < METRICS_W_COUNT; i++)
        bad |= metrics_window_init(&m->win[i], m->max_samples);
    /* Merging keeps at most about max_samples events inside the window; two
     * spare slots keep the boundary events from evicting each other. */
    m->tokens.cap = m->max_samples + 2;
    m->tokens.ev = brisk_malloc((size_t)m->tokens.cap * sizeof *m->tokens.ev);
    m->tokens.start = now;
    m->scratch = brisk_malloc((size_t)m->max_samples * sizeof *m->scratch);
    bad |= !m->tokens.ev || !m->scratch;
    if (bad) {
        srv_metrics_free(m);
        return NULL;
    }
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m)
        return;
    free(m->label);
    free(m->build);
    metrics_hist_free(&m->ttft);
    metrics_hist_free(&m->itl);
    metrics_hist_free(&m->e2e);
    metrics_hist_free(&m->queue);
    metrics_hist_free(&m->prompt_len);
    metrics_hist_free(&m->gen_len);
    for (int i = 0; i < METRICS_W_COUNT; i++)
        metrics_window_free(&m->win[i]);
    free(m->tokens.ev);
    free(m->scratch);
    free(m);
}

/* ---- observations ------------------------------------------------------ */

static int metrics_valid_time(double s) {
    return isfinite(s) && s >= 0;
}

void srv_metrics_observe_request(srv_metrics *m, const srv_metrics_request *r, double now) {
    metrics_check_thread(m);
    int f = (int)r->finish;
    if (f < 0 || f >= SRV_METRICS_FINISH_COUNT)
        f = SRV_METRICS_FINISH_ERROR;
    m->success[f]++;
    if (r->prompt_tokens >= 0)
        metrics_hist_observe(&m->prompt_len, r->prompt_tokens);
    if (r->generation_tokens >= 0)
        metrics_hist_observe(&m->gen_len, r->generation_tokens);
    if (metrics_valid_time(r->queue_s))
        metrics_hist_observe(&m->queue, r->queue_s);
    if (metrics_valid_time(r->e2e_s)) {
        metrics_hist_observe(&m->e2e, r->e2e_s);
        metrics_window_push(&m->win[METRICS_W_E2E], now, r->e2e_s);
    }
}

void srv_metrics_observe_ttft(srv_metrics *m, double ttft_s, double now) {
    metrics_check_thread(m);
    if (!metrics_valid_time(ttft_s))
        return;
    metrics_hist_observe(&m->ttft, ttft_s);
    metrics_window_push(&m->win[METRICS_W_TTFT], now, ttft_s);
}

void srv_metrics_observe_itl(srv_metrics *m, double itl_s, double now) {
    metrics_check_thread(m);
    if (!metrics_valid_time(itl_s))
        return;
    metrics_hist_observe(&m->itl, itl_s);
    metrics_window_push(&m->win[METRICS_W_ITL], now, itl_s);
}

void srv_metrics_observe_tokens(srv_metrics *m, long long prompt_tokens,
                                long long generation_tokens, double now) {
    metrics_check_thread(m);
    long long p = prompt_tokens > 0 ? prompt_tokens : 0;
    long long g = generation_tokens > 0 ? generation_tokens : 0;
    if (p == 0 && g == 0)
        return;
    m->prompt_total += (uint64_t)p;
    m->gen_total += (uint64_t)g;
    metrics_tokens_expire(&m->tokens, now, m->window_s);
    metrics_tokens_push(&m->tokens, now, p, g, m->merge_s);
}

srv_metrics_route srv_metrics_route_of(const char *path) {
    if (!path)
        return SRV_ROUTE_OTHER;
    for (int r = 0; r <= SRV_ROUTE_MODELS; r++)
        if (strcmp(path, metrics_route_names[r]) == 0)
            return (srv_metrics_route)r;
    if (!strcmp(path, "/health") || !strcmp(path, "/livez") || !strcmp(path, "/readyz"))
        return SRV_ROUTE_PROBE;
    if (!strcmp(path, "/metrics"))
        return SRV_ROUTE_METRICS;
    return SRV_ROUTE_OTHER;
}

void srv_metrics_observe_http(srv_metrics *m, srv_metrics_route route, int status) {
    metrics_check_thread(m);
    if ((int)route < 0 || route >= SRV_ROUTE_COUNT || status < METRICS_HTTP_MIN ||
        status > METRICS_HTTP_MAX)
        return;
    m->http[route][status - METRICS_HTTP_MIN]++;
}

static int metrics_http_is_preset(int route, int status) {
    if (route > SRV_ROUTE_MODELS)
        return 0;
    for (int i = 0; i < METRICS_COUNT_OF(metrics_http_preset); i++)
        if (metrics_http_preset[i] == status)
            return 1;
    return 0;
}

void srv_metrics_count_unknown_fields(srv_metrics *m, int n) {
    metrics_check_thread(m);
    if (n > 0)
        m->unknown_fields += (uint64_t)n;
}

/* ---- rendering --------------------------------------------------------- */

/* HELP text escaping: \ -> \\, newline -> \n. */
static void metrics_put_family(brisk_buf *b, const char *name, const char *type, const char *help) {
    brisk_buf_printf(b, "# HELP %s ", name);
    for (const char *c = help; *c; c++) {
        if (*c == '\\')
            brisk_buf_str(b, "\\\\");
        else if (*c == '\n')
            brisk_buf_str(b, "\\n");
        else
            brisk_buf_put(b, c, 1);
    }
    brisk_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* One sample line: name{model_name="..."[,extra]} value. */
static void metrics_put_sample(brisk_buf *b, const srv_metrics *m, const char *name,
                               const char *extra, double v) {
    char num[64];
    srv_metrics_format_float(num, sizeof num, v);
    brisk_buf_printf(b, "%s{%s%s%s} %s\n", name, m->label, extra ? "," : "", extra ? extra : "",
                     num);
}

static void metrics_put_scalar(brisk_buf *b, const srv_metrics *m, const char *name,
                               const char *type, const char *help, double v) {
    metrics_put_family(b, name, type, help);
    metrics_put_sample(b, m, name, NULL, v);
}

static void metrics_put_hist(brisk_buf *b, const srv_metrics *m, const char *name, const char *help,
                             const metrics_hist *h) {
    metrics_put_family(b, name, "histogram", help);
    char series[160], le[96], num[64];
    snprintf(series, sizeof series, "%s_bucket", name);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        if (i < h->n) {
            srv_metrics_format_float(num, sizeof num, h->bounds[i]);
            snprintf(le, sizeof le, "le=\"%s\"", num);
        } else {
            snprintf(le, sizeof le, "le=\"+Inf\"");
        }
        metrics_put_sample(b, m, series, le, (double)cum);
    }
    snprintf(series, sizeof series, "%s_sum", name);
    metrics_put_sample(b, m, series, NULL, h->sum);
    snprintf(series, sizeof series, "%s_count", name);
    metrics_put_sample(b, m, series, NULL, (double)h->count);
}

static int metrics_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantiles in per-mille, so the nearest rank is exact integer arithmetic. */
static const int metrics_quantiles_pm[3] = {500, 950, 990};
static const char *const metrics_quantile_names[3] = {"p50", "p95", "p99"};

/* The window's samples sorted into m->scratch; returns their count. */
static int metrics_window_sorted(srv_metrics *m, const metrics_window *w) {
    for (int i = 0; i < w->n; i++)
        m->scratch[i] = w->v[(w->head + i) % w->cap];
    qsort(m->scratch, (size_t)w->n, sizeof *m->scratch, metrics_cmp_double);
    return w->n;
}

/* Nearest rank: the ceil(q * n)-th smallest, 1-based; 0 for an empty window. */
static double metrics_nearest_rank(const double *sorted, int n, int q_pm) {
    if (n == 0)
        return 0.0;
    long long k = ((long long)q_pm * n + 999) / 1000;
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

static void metrics_put_window_quantiles(brisk_buf *b, srv_metrics *m, int which, const char *stem,
                                         const char *what) {
    int n = metrics_window_sorted(m, &m->win[which]);
    for (int q = 0; q < 3; q++) {
        char name[128], help[256];
        snprintf(name, sizeof name, "brisk_%s_%s_seconds", stem, metrics_quantile_names[q]);
        snprintf(help, sizeof help,
                 "%s, %d.%02d quantile (nearest rank) over a sliding %g s window, in seconds; 0 "
                 "when the window is empty.",
                 what, metrics_quantiles_pm[q] / 1000, (metrics_quantiles_pm[q] % 1000) / 10,
                 m->window_s);
        metrics_put_scalar(b, m, name, "gauge", help,
                           metrics_nearest_rank(m->scratch, n, metrics_quantiles_pm[q]));
    }
}

char *srv_metrics_render(srv_metrics *m, const srv_metrics_gauges *g, double now, size_t *len) {
    metrics_check_thread(m);
    srv_metrics_gauges zero;
    if (!g) {
        memset(&zero, 0, sizeof zero);
        g = &zero;
    }
    for (int i = 0; i < METRICS_W_COUNT; i++)
        metrics_window_expire(&m->win[i], now, m->window_s);
    metrics_tokens_expire(&m->tokens, now, m->window_s);

    brisk_buf b = {0};
    /* Engine state, passed in by the caller. */
    metrics_put_scalar(&b, m, "vllm:num_requests_running", "gauge",
                       "Number of requests in model execution batches.", g->running);
    metrics_put_scalar(&b, m, "vllm:num_requests_waiting", "gauge",
                       "Number of requests waiting to be processed.", g->waiting);
    metrics_put_scalar(&b, m, "vllm:kv_cache_usage_perc", "gauge",
                       "KV-cache usage. 1 means 100 percent usage.", g->kv_usage);
    metrics_put_scalar(&b, m, "vllm:num_preemptions_total", "counter",
                       "Cumulative number of preemption from the engine.", (double)g->preemptions);
    metrics_put_scalar(&b, m, "vllm:prefix_cache_queries_total", "counter",
                       "Prefix cache queries, in terms of number of queried tokens.",
                       (double)g->kv.prefix_queries);
    metrics_put_scalar(&b, m, "vllm:prefix_cache_hits_total", "counter",
                       "Prefix cache hits, in terms of number of cached tokens.",
                       (double)g->kv.prefix_hits);

    if (g->kv_dtype) { /* vLLM's info gauge: the configuration as labels, value 1 */
        char labels[256], *dt = metrics_label_pair("cache_dtype", g->kv_dtype);
        if (dt) {
            snprintf(labels, sizeof labels,
                     "block_size=\"%d\",%s,enable_prefix_caching=\"%s\",num_gpu_blocks=\"%d\"",
                     g->kv_block_size, dt, g->prefix_caching ? "True" : "False",
                     g->kv.blocks_total);
            metrics_put_family(&b, "vllm:cache_config_info", "gauge",
                               "Information of the LLMEngine CacheConfig");
            metrics_put_sample(&b, m, "vllm:cache_config_info", labels, 1.0);
        }
        free(dt);
    }
    if (g->kv.blocks_total > 0) {
        metrics_put_family(
            &b, "brisk_kv_cache_blocks", "gauge",
            "KV cache blocks by state: used (referenced), cached (reusable prefix), free.");
        metrics_put_sample(&b, m, "brisk_kv_cache_blocks", "state=\"total\"", g->kv.blocks_total);
        metrics_put_sample(&b, m, "brisk_kv_cache_blocks", "state=\"used\"", g->kv.blocks_used);
        metrics_put_sample(&b, m, "brisk_kv_cache_blocks", "state=\"cached\"", g->kv.blocks_cached);
        metrics_put_sample(&b, m, "brisk_kv_cache_blocks", "state=\"free\"",
                           g->kv.blocks_total - g->kv.blocks_used - g->kv.blocks_cached);
        metrics_put_scalar(&b, m, "brisk_kv_cache_slots_allocated_total", "counter",
                           "KV positions in used blocks, summed over engine steps.",
                           (double)g->kv_slots_allocated);
        metrics_put_scalar(
            &b, m, "brisk_kv_cache_slots_filled_total", "counter",
            "KV positions in used blocks that hold a token, summed over engine steps.",
            (double)g->kv_slots_filled);
        metrics_put_scalar(&b, m, "brisk_kv_cache_window_released_blocks_total", "counter",
                           "KV blocks sliding-window layers gave back before their sequence "
                           "ended (the positions behind the window).",
                           (double)g->kv.window_released);
        metrics_put_scalar(
            &b, m, "brisk_engine_busy_seconds_total", "counter",
            "Engine-thread seconds spent on steps (scheduling, forward pass, sampling).",
            g->engine_busy_s);
        metrics_put_scalar(&b, m, "brisk_engine_forward_seconds_total", "counter",
                           "Engine-thread seconds inside the forward pass.", g->engine_forward_s);
        metrics_put_scalar(&b, m, "brisk_engine_steps_total", "counter",
                           "Engine steps (forward passes).", (double)g->engine_steps);
        metrics_put_scalar(&b, m, "brisk_engine_batch_tokens_total", "counter",
                           "Tokens computed by forward passes, summed over steps.",
                           (double)g->engine_batch_tokens);
    }
    if (g->spec) { /* vLLM's speculative decoding counters */
        metrics_put_scalar(&b, m, "vllm:spec_decode_num_drafts_total", "counter",
                           "Number of spec decoding drafts.", (double)g->spec_drafts);
        metrics_put_scalar(&b, m, "vllm:spec_decode_num_draft_tokens_total", "counter",
                           "Number of draft tokens.", (double)g->spec_draft_tokens);
        metrics_put_scalar(&b, m, "vllm:spec_decode_num_accepted_tokens_total", "counter",
                           "Number of accepted tokens.", (double)g->spec_accepted_tokens);
        metrics_put_family(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                           "Accepted tokens per draft position.");
        int n_pos = g->spec_positions < SRV_METRICS_SPEC_MAX_POS ? g->spec_positions
                                                                 : SRV_METRICS_SPEC_MAX_POS;
        for (int i = 0; i < n_pos; i++) {
            char label[32];
            snprintf(label, sizeof label, "position=\"%d\"", i);
            metrics_put_sample(&b, m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", label,
                               (double)g->spec_accepted_per_pos[i]);
        }
    }
    if (g->audit_log) {
        metrics_put_scalar(&b, m, "brisk_audit_log_lines_total", "counter",
                           "Audit log lines written.", (double)g->audit_lines);
        metrics_put_scalar(&b, m, "brisk_audit_log_errors_total", "counter",
                           "Audit log writes that failed (the data stays buffered and is retried).",
                           (double)g->audit_errors);
        metrics_put_scalar(&b, m, "brisk_audit_log_dropped_total", "counter",
                           "Audit log lines lost because the buffer was full.",
                           (double)g->audit_dropped);
    }

    /* Token and request counters. */
    metrics_put_scalar(&b, m, "vllm:prompt_tokens_total", "counter",
                       "Number of prefill tokens processed.", (double)m->prompt_total);
    metrics_put_scalar(&b, m, "vllm:generation_tokens_total", "counter",
                       "Number of generation tokens processed.", (double)m->gen_total);
    metrics_put_family(&b, "vllm:request_success_total", "counter",
                       "Count of successfully processed requests.");
    for (int f = 0; f < SRV_METRICS_FINISH_COUNT; f++) {
        char extra[64];
        snprintf(extra, sizeof extra, "finished_reason=\"%s\"", metrics_finish_names[f]);
        metrics_put_sample(&b, m, "vllm:request_success_total", extra, (double)m->success[f]);
    }

    /* Histograms. */
    metrics_put_hist(&b, m, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                     &m->prompt_len);
    metrics_put_hist(&b, m, "vllm:request_generation_tokens",
                     "Number of generation tokens processed.", &m->gen_len);
    metrics_put_hist(&b, m, "vllm:time_to_first_token_seconds",
                     "Histogram of time to first token in seconds.", &m->ttft);
    metrics_put_hist(&b, m, "vllm:inter_token_latency_seconds",
                     "Histogram of inter-token latency in seconds.", &m->itl);
    metrics_put_hist(&b, m, "vllm:e2e_request_latency_seconds",
                     "Histogram of e2e request latency in seconds.", &m->e2e);
    metrics_put_hist(&b, m, "vllm:request_queue_time_seconds",
                     "Histogram of time spent in WAITING phase for request.", &m->queue);

    /* Sliding-window gauges. */
    metrics_put_window_quantiles(&b, m, METRICS_W_TTFT, "time_to_first_token",
                                 "Time to first token");
    metrics_put_window_quantiles(&b, m, METRICS_W_ITL, "inter_token_latency",
                                 "Inter-token latency");
    metrics_put_window_quantiles(&b, m, METRICS_W_E2E, "e2e_request_latency",
                                 "End-to-end request latency");
    long long wp = 0, wg = 0;
    for (int i = 0; i < m->tokens.n; i++) {
        const metrics_token_event *e = &m->tokens.ev[(m->tokens.head + i) % m->tokens.cap];
        wp += e->prompt;
        wg += e->gen;
    }
    double span = now - m->tokens.start;
    if (span > m->window_s)
        span = m->window_s;
    double rate_p = span > 0 ? (double)wp / span : 0.0;
    double rate_g = span > 0 ? (double)wg / span : 0.0;
    metrics_put_scalar(&b, m, "brisk_prompt_tokens_per_second", "gauge",
                       "Prompt tokens processed per second over the sliding window.", rate_p);
    metrics_put_scalar(&b, m, "brisk_generation_tokens_per_second", "gauge",
                       "Generation tokens produced per second over the sliding window.", rate_g);

    /* HTTP side. */
    metrics_put_family(&b, "brisk_http_requests_total", "counter",
                       "HTTP responses sent, by route class and status code.");
    for (int r = 0; r < SRV_ROUTE_COUNT; r++) {
        for (int s = METRICS_HTTP_MIN; s <= METRICS_HTTP_MAX; s++) {
            uint64_t c = m->http[r][s - METRICS_HTTP_MIN];
            if (c == 0 && !metrics_http_is_preset(r, s))
                continue;
            char extra[64];
            snprintf(extra, sizeof extra, "route=\"%s\",code=\"%d\"", metrics_route_names[r], s);
            metrics_put_sample(&b, m, "brisk_http_requests_total", extra, (double)c);
        }
    }
    metrics_put_family(&b, "brisk_deadline_exceeded_total", "counter",
                       "Requests ended by their deadline (timeout, --request-timeout): refused "
                       "while waiting, or cut short while running.");
    metrics_put_sample(&b, m, "brisk_deadline_exceeded_total", "state=\"waiting\"",
                       (double)m->deadline[0]);
    metrics_put_sample(&b, m, "brisk_deadline_exceeded_total", "state=\"running\"",
                       (double)m->deadline[1]);
    metrics_put_scalar(&b, m, "brisk_unknown_request_fields_total", "counter",
                       "Unknown fields seen in request bodies (ignored).",
                       (double)m->unknown_fields);

    metrics_put_family(&b, "brisk_build_info", "gauge",
                       "1, with brisk's version, git commit and compiled backends as labels.");
    metrics_put_sample(&b, m, "brisk_build_info", m->build, 1.0);
    if (g->process) {
        const srv_proc_stats *p = &g->proc;
        metrics_put_scalar(&b, m, "process_resident_memory_bytes", "gauge",
                           "Resident memory size in bytes.", p->rss_bytes);
        metrics_put_scalar(&b, m, "process_virtual_memory_bytes", "gauge",
                           "Virtual memory size in bytes.", p->vsize_bytes);
        metrics_put_scalar(&b, m, "process_cpu_seconds_total", "counter",
                           "Total user and system CPU time spent in seconds.", p->cpu_seconds);
        metrics_put_scalar(&b, m, "process_start_time_seconds", "gauge",
                           "Start time of the process since the Unix epoch in seconds.",
                           p->start_time_s);
        if (p->open_fds >= 0)
            metrics_put_scalar(&b, m, "process_open_fds", "gauge",
                               "Number of open file descriptors.", p->open_fds);
        if (p->max_fds >= 0)
            metrics_put_scalar(&b, m, "process_max_fds", "gauge",
                               "Maximum number of open file descriptors.", p->max_fds);
    }

    return brisk_buf_take(&b, len);
}

const char *srv_metrics_label(const srv_metrics *m) {
    return m->label;
}

void srv_metrics_observe_deadline(srv_metrics *m, int running) {
    metrics_check_thread(m);
    m->deadline[running ? 1 : 0]++;
}
