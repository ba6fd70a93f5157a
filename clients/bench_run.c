/* bench_run.c - the load driver: arrivals, concurrency, records, progress,
 * Ctrl-C (see bench_run.h). */
#include "clients/bench_run.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"

/* One request in flight. Slots are recycled through a free list. */
typedef struct slot {
    bench_call call;
    bench_body body;
    uint64_t index; /* the request's workload index */
    struct bench_runner *r;
    struct slot *next_free;
    struct slot *next_all;
} slot;

struct bench_runner {
    uv_loop_t *loop;
    bench_client *cl;
    bench_workload *w;
    bench_run_cfg cfg;
    uv_timer_t arrival_timer, duration_timer, progress_timer, interval_timer;
    uv_signal_t sigint;
    int n_handles; /* handles initialised (closed in bench_runner_free) */
    int handle_sigint;
    slot *free_slots, *all_slots;
    bench_rng arrival_rng;
    uint64_t next_index; /* the next request's workload index, across levels */

    /* The level in progress. */
    bench_level lv;
    bench_level_result *res;
    int warm;        /* a warm-up level: records only for calibration */
    int64_t limit;   /* requests to send; INT64_MAX: until stopped */
    int64_t arrived; /* requests allowed to start so far */
    int64_t issued, in_flight, done, errors;
    int64_t events; /* content events (progress) */
    double t0, t_next_arrival, t_last_end;
    double cpu0;
    int stop_issuing, level_done, interrupted;
    int tty;
    double last_progress_t;
    int64_t last_progress_events;
    size_t progress_len;
    /* The --interval in progress: it began at t_interval (since t0) with the
     * records and ITL samples from these marks on. */
    double t_interval;
    size_t rec_mark, itl_mark;
};

/* CPU time of this thread: brisk-bench's whole load runs on it (and a test
 * may run a server on another thread of the same process). */
static double cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_level_result_free(bench_level_result *res) {
    free(res->recs);
    free(res->intervals);
    bench_dvec_free(&res->itl);
    bench_samples_free(&res->samples);
    memset(res, 0, sizeof *res);
}

int bench_level_result_compute(bench_level_result *res, const bench_slo *slo,
                               double price_per_hour) {
    bench_samples_free(&res->samples);
    return bench_metrics_compute(res->recs, res->n_recs, res->itl.v, res->itl.n, res->duration_s,
                                 slo, price_per_hour, &res->m, &res->samples);
}

static int push_rec(bench_level_result *res, const bench_rec *rec) {
    if (res->n_recs == res->cap_recs) {
        size_t cap = res->cap_recs ? 2 * res->cap_recs : 256;
        bench_rec *p = realloc(res->recs, cap * sizeof *p);
        if (!p)
            return BRISK_ENOMEM;
        res->recs = p;
        res->cap_recs = cap;
    }
    res->recs[res->n_recs++] = *rec;
    return 0;
}

/* ---- progress ---- */

static void progress_clear(bench_runner *r) {
    if (r->tty && r->progress_len) {
        fprintf(stderr, "\r%*s\r", (int)r->progress_len, "");
        r->progress_len = 0;
    }
}

static void progress_print(bench_runner *r, int final) {
    double now = bench_now();
    double dt = now - r->last_progress_t;
    double rate = dt > 0 ? (double)(r->events - r->last_progress_events) / dt : 0;
    r->last_progress_t = now;
    r->last_progress_events = r->events;
    char lim[32] = "";
    if (r->limit != INT64_MAX)
        snprintf(lim, sizeof lim, "/%lld", (long long)r->limit);
    char line[256];
    int n = snprintf(line, sizeof line,
                     "brisk-bench: %s%lld%s done, %lld errors, %lld in flight, %.0f tok/s, %.1f s",
                     r->warm ? "warm-up " : "", (long long)r->done, lim, (long long)r->errors,
                     (long long)r->in_flight, rate, now - r->t0);
    if (n < 0)
        return;
    if (r->tty) {
        size_t len = strlen(line);
        fprintf(stderr, "\r%s%*s", line, (int)(r->progress_len > len ? r->progress_len - len : 0),
                "");
        r->progress_len = len;
        if (final)
            progress_clear(r);
    } else if (!final) {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

static void on_progress(uv_timer_t *t) {
    bench_runner *r = t->data;
    if (!r->level_done)
        progress_print(r, 0);
}

/* ---- intervals ---- */

/* Closes the interval in progress at t (seconds since t0): its figures are
 * the records that ended since the last mark (records are appended as
 * requests end) and the ITL samples pushed since (gaps are pushed as their
 * second token arrives). */
static void interval_close(bench_runner *r, double t, int partial) {
    bench_level_result *res = r->res;
    if (res->n_intervals == BENCH_MAX_INTERVALS) {
        res->intervals_truncated = 1;
        return;
    }
    if (res->n_intervals == res->cap_intervals) {
        size_t cap = res->cap_intervals ? 2 * res->cap_intervals : 64;
        bench_interval *p = realloc(res->intervals, cap * sizeof *p);
        if (!p) {
            res->intervals_truncated = 1;
            return;
        }
        res->intervals = p;
        res->cap_intervals = cap;
    }
    bench_interval *iv = &res->intervals[res->n_intervals];
    memset(iv, 0, sizeof *iv);
    iv->t_start = r->t_interval;
    iv->t_end = t;
    iv->partial = partial;
    size_t n_itl = res->itl.n > r->itl_mark ? res->itl.n - r->itl_mark : 0;
    if (bench_metrics_compute(res->recs + r->rec_mark, res->n_recs - r->rec_mark,
                              res->itl.v ? res->itl.v + r->itl_mark : NULL, n_itl,
                              t - r->t_interval, NULL, 0, &iv->m, NULL) < 0) {
        res->intervals_truncated = 1;
        return;
    }
    res->n_intervals++;
    r->t_interval = t;
    r->rec_mark = res->n_recs;
    r->itl_mark = res->itl.n;
    if (r->cfg.progress) {
        const bench_metrics *m = &iv->m;
        progress_clear(r);
        fprintf(stderr,
                "brisk-bench: [%.0f-%.0f s] %lld ok, %lld failed, %lld aborted, %lld invalid 4xx, "
                "%.1f tok/s, p99 TTFT %.0f ms, ITL %.1f ms, E2E %.0f ms\n",
                iv->t_start, iv->t_end, (long long)m->completed, (long long)m->failed,
                (long long)m->aborted, (long long)m->invalid_ok, m->output_throughput,
                m->ttft_ms.p99, m->itl_ms.p99, m->e2e_ms.p99);
    }
}

static void on_interval(uv_timer_t *t) {
    bench_runner *r = t->data;
    if (!r->level_done)
        interval_close(r, bench_now() - r->t0, 0);
}

/* ---- the level ---- */

static void level_end(bench_runner *r) {
    if (r->level_done)
        return;
    r->level_done = 1;
    uv_timer_stop(&r->arrival_timer);
    uv_timer_stop(&r->duration_timer);
    uv_timer_stop(&r->progress_timer);
    uv_timer_stop(&r->interval_timer);
    if (r->cfg.progress)
        progress_print(r, 1);
    uv_stop(r->loop);
}

static void check_end(bench_runner *r) {
    if (r->in_flight == 0 && (r->stop_issuing || r->issued >= r->limit))
        level_end(r);
}

static void record(bench_runner *r, slot *s) {
    bench_call *c = &s->call;
    bench_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.t_start = c->t_start - r->t0;
    rec.ttft = c->n_content > 0 ? c->t_first - c->t_start : -1;
    rec.e2e = (c->t_end > c->t_start ? c->t_end : bench_now()) - c->t_start;
    rec.usage_seen = c->usage_completion >= 0;
    rec.out_tokens = c->usage_completion >= 0 ? c->usage_completion : c->n_content;
    rec.in_tokens = c->usage_prompt >= 0 ? c->usage_prompt : s->body.in_estimate;
    rec.expected_out = s->body.expected_out;
    rec.status = c->status;
    rec.err = c->err;
    rec.n_content = c->n_content;
    rec.words = s->body.words;
    rec.kind = s->body.kind;
    rec.abort_at = s->body.abort_at;
    rec.invalid = s->body.invalid;
    rec.index = (int64_t)s->index;
    if (s->body.kind == BENCH_REQ_INVALID && c->status != 0 &&
        (c->err == BENCH_OK || c->err == BENCH_ERR_HTTP || c->err == BENCH_ERR_STREAM ||
         c->err == BENCH_ERR_NO_CONTENT)) {
        /* A whole answer to a deliberately invalid request: only a 4xx is right. */
        if (c->status >= 400 && c->status < 500) {
            rec.err = BENCH_ERR_INVALID_OK;
        } else {
            rec.err = BENCH_ERR_INVALID_UNEXPECTED;
            snprintf(c->err_msg, sizeof c->err_msg, "invalid request (%s) answered HTTP %d",
                     bench_invalid_name(s->body.invalid), c->status);
        }
    }
    if (bench_err_is_failure(rec.err)) {
        r->errors++;
        if (!r->res->first_error[0])
            snprintf(r->res->first_error, sizeof r->res->first_error, "%s: %.180s",
                     bench_err_name(rec.err), c->err_msg);
    }
    if (c->t_end > r->t_last_end)
        r->t_last_end = c->t_end;
    if (push_rec(r->res, &rec) < 0 && !r->res->first_error[0])
        snprintf(r->res->first_error, sizeof r->res->first_error, "out of memory for records");
}

static void release(bench_runner *r, slot *s) {
    free(s->body.json);
    s->body.json = NULL;
    bench_call_clear(&s->call);
    s->next_free = r->free_slots;
    r->free_slots = s;
}

static void dispatch(bench_runner *r);

static void on_call_done(bench_call *c) {
    slot *s = c->user;
    bench_runner *r = s->r;
    record(r, s);
    release(r, s);
    r->in_flight--;
    r->done++;
    dispatch(r);
    check_end(r);
}

static slot *get_slot(bench_runner *r) {
    slot *s = r->free_slots;
    if (s) {
        r->free_slots = s->next_free;
        return s;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->r = r;
    s->next_all = r->all_slots;
    r->all_slots = s;
    return s;
}

/* Starts one request. 0, or -1 when the level has to stop (out of memory). */
static int start_one(bench_runner *r) {
    slot *s = get_slot(r);
    if (!s)
        return -1;
    uint64_t index = r->warm ? BENCH_WARMUP_INDEX + r->next_index : r->next_index;
    if (bench_workload_body(r->w, index, &s->body) < 0) {
        s->next_free = r->free_slots;
        r->free_slots = s;
        return -1;
    }
    s->index = index;
    r->next_index++;
    bench_call *c = &s->call;
    memset(c, 0, sizeof *c);
    c->method = "POST";
    c->path = r->cfg.path;
    c->body = s->body.json;
    c->body_len = s->body.len;
    c->stream = 1;
    c->chat = r->cfg.chat;
    c->timeout_s = r->cfg.timeout_s;
    /* An aborted request is in no latency figure: its gaps are not kept. */
    c->itl = s->body.kind == BENCH_REQ_ABORT ? NULL : &r->res->itl;
    c->events = &r->events;
    if (s->body.kind == BENCH_REQ_ABORT) {
        c->abort_mode = s->body.abort_at < 0 ? BENCH_ABORT_BEFORE_HEAD : BENCH_ABORT_AFTER;
        c->abort_events = s->body.abort_at;
    }
    c->on_done = on_call_done;
    c->user = s;
    r->issued++;
    r->in_flight++;
    if (bench_call_start(r->cl, c) < 0) {
        /* Nothing started, so on_done will not come: record it here. */
        c->t_end = bench_now();
        record(r, s);
        release(r, s);
        r->in_flight--;
        r->done++;
    }
    return 0;
}

static void dispatch(bench_runner *r) {
    while (!r->stop_issuing && r->issued < r->limit && r->issued < r->arrived &&
           (r->lv.max_concurrency <= 0 || r->in_flight < r->lv.max_concurrency)) {
        if (start_one(r) < 0) {
            if (!r->res->first_error[0])
                snprintf(r->res->first_error, sizeof r->res->first_error,
                         "out of memory building a request");
            r->stop_issuing = 1;
            break;
        }
    }
}

static int rate_mode(const bench_runner *r) {
    return r->lv.request_rate > 0 && isfinite(r->lv.request_rate);
}

static void on_arrival(uv_timer_t *t) {
    bench_runner *r = t->data;
    if (r->stop_issuing || r->level_done)
        return;
    double now = bench_now();
    /* Every arrival that is due, including any the loop was late for. */
    while (r->arrived < r->limit && r->t_next_arrival <= now) {
        r->arrived++;
        r->t_next_arrival +=
            bench_arrival_gap(&r->arrival_rng, r->lv.request_rate, r->cfg.burstiness);
    }
    dispatch(r);
    if (r->arrived < r->limit) {
        double wait = r->t_next_arrival - bench_now();
        /* Rounded up: a timer that fires early would only spin until the arrival is due. */
        uv_timer_start(&r->arrival_timer, on_arrival, wait > 0 ? (uint64_t)ceil(wait * 1000.0) : 0,
                       0);
    }
    check_end(r);
}

static void on_duration(uv_timer_t *t) {
    bench_runner *r = t->data;
    r->stop_issuing = 1;
    check_end(r);
}

static void on_sigint(uv_signal_t *h, int signum) {
    bench_runner *r = h->data;
    (void)signum;
    if (r->interrupted) {
        /* A second Ctrl-C: the user does not want the report. */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    r->interrupted = 1;
    if (r->cfg.progress)
        progress_clear(r);
    fprintf(stderr,
            "brisk-bench: interrupted; cancelling %lld requests in flight "
            "(Ctrl-C again to quit at once)\n",
            (long long)r->in_flight);
    r->stop_issuing = 1;
    if (!r->level_done) {
        bench_client_cancel_all(r->cl);
        check_end(r);
    }
}

static void run_level(bench_runner *r, const bench_level *lv, bench_level_result *out, int warm,
                      int64_t limit, double duration_s, double interval_s) {
    r->lv = *lv;
    r->res = out;
    r->warm = warm;
    r->limit = limit > 0 ? limit : INT64_MAX;
    r->issued = r->in_flight = r->done = r->errors = r->events = 0;
    r->stop_issuing = r->interrupted;
    r->level_done = 0;
    r->t0 = bench_now();
    r->t_last_end = 0;
    r->last_progress_t = r->t0;
    r->last_progress_events = 0;
    r->cpu0 = cpu_seconds();
    r->t_interval = 0;
    r->rec_mark = r->itl_mark = 0;
    out->level = *lv;
    if (rate_mode(r)) {
        /* vLLM sends the first request at once, then waits a gap before each next one. */
        r->arrived = 0;
        r->t_next_arrival = r->t0;
        uv_timer_start(&r->arrival_timer, on_arrival, 0, 0);
    } else {
        r->arrived = INT64_MAX;
    }
    if (duration_s > 0)
        uv_timer_start(&r->duration_timer, on_duration, (uint64_t)(duration_s * 1000.0), 0);
    if (r->cfg.progress) {
        /* A terminal gets a live line each second; a log a line every 10 s. */
        uint64_t every = r->tty ? 1000 : 10000;
        uv_timer_start(&r->progress_timer, on_progress, every, every);
    }
    if (interval_s > 0) {
        uint64_t ms = (uint64_t)ceil(interval_s * 1000.0);
        uv_timer_start(&r->interval_timer, on_interval, ms, ms);
    }
    dispatch(r);
    check_end(r);
    if (!r->level_done)
        uv_run(r->loop, UV_RUN_DEFAULT);
    double t_end = r->t_last_end > 0 ? r->t_last_end : bench_now();
    if (r->interrupted)
        t_end = bench_now();
    out->duration_s = t_end - r->t0;
    out->cpu_s = cpu_seconds() - r->cpu0;
    out->interrupted = r->interrupted;
    /* The rest: requests that ended after the last full interval. */
    if (interval_s > 0 && (out->n_recs > r->rec_mark || out->duration_s > r->t_interval + 1e-3))
        interval_close(r, out->duration_s > r->t_interval ? out->duration_s : r->t_interval, 1);
}

int bench_runner_level(bench_runner *r, const bench_level *lv, bench_level_result *out) {
    memset(out, 0, sizeof *out);
    out->itl.max = r->cfg.max_itl_samples;
    run_level(r, lv, out, 0, r->cfg.num_prompts, r->cfg.duration_s, r->cfg.interval_s);
    return 0;
}

int bench_runner_warmup(bench_runner *r, int n, int concurrency, char *first_error,
                        size_t err_len) {
    bench_level_result res;
    memset(&res, 0, sizeof res);
    res.itl.max = 1; /* warm-up gaps are not kept */
    bench_level lv = {concurrency > 0 ? concurrency : 1, 0};
    run_level(r, &lv, &res, 1, n, 0, 0);
    int ok = 0;
    int64_t words = 0, tokens = 0;
    for (size_t i = 0; i < res.n_recs; i++) {
        const bench_rec *rec = &res.recs[i];
        if (rec->err != BENCH_OK)
            continue;
        ok++;
        if (rec->usage_seen && rec->words > 0) {
            words += rec->words;
            tokens += rec->in_tokens;
        }
    }
    if (!r->interrupted)
        bench_workload_calibrate(r->w, words, tokens);
    if (first_error && err_len)
        snprintf(first_error, err_len, "%s", res.first_error);
    bench_level_result_free(&res);
    return ok;
}

int bench_runner_interrupted(const bench_runner *r) {
    return r->interrupted;
}

bench_runner *bench_runner_create(uv_loop_t *loop, bench_client *cl, bench_workload *w,
                                  const bench_run_cfg *cfg, int handle_sigint) {
    bench_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->loop = loop;
    r->cl = cl;
    r->w = w;
    r->cfg = *cfg;
    r->tty = isatty(STDERR_FILENO);
    bench_rng_seed(&r->arrival_rng, cfg->seed ^ 0x4152524956414c53ull);
    uv_timer_init(loop, &r->arrival_timer);
    uv_timer_init(loop, &r->duration_timer);
    uv_timer_init(loop, &r->progress_timer);
    uv_timer_init(loop, &r->interval_timer);
    r->arrival_timer.data = r->duration_timer.data = r->progress_timer.data = r;
    r->interval_timer.data = r;
    r->n_handles = 4;
    if (handle_sigint) {
        uv_signal_init(loop, &r->sigint);
        r->sigint.data = r;
        uv_signal_start(&r->sigint, on_sigint, SIGINT);
        uv_unref((uv_handle_t *)&r->sigint);
        r->handle_sigint = 1;
        r->n_handles++;
    }
    return r;
}

static void on_handle_closed(uv_handle_t *h) {
    bench_runner *r = h->data;
    if (--r->n_handles == 0) {
        for (slot *s = r->all_slots, *n; s; s = n) {
            n = s->next_all;
            free(s->body.json);
            bench_call_clear(&s->call);
            free(s);
        }
        free(r);
    }
}

void bench_runner_free(bench_runner *r) {
    if (!r)
        return;
    uv_close((uv_handle_t *)&r->arrival_timer, on_handle_closed);
    uv_close((uv_handle_t *)&r->duration_timer, on_handle_closed);
    uv_close((uv_handle_t *)&r->progress_timer, on_handle_closed);
    uv_close((uv_handle_t *)&r->interval_timer, on_handle_closed);
    if (r->handle_sigint)
        uv_close((uv_handle_t *)&r->sigint, on_handle_closed);
}

/* ---- model discovery ---- */

typedef struct fetch_ctx {
    uv_loop_t *loop;
    int done;
} fetch_ctx;

static void on_fetch_done(bench_call *c) {
    fetch_ctx *f = c->user;
    f->done = 1;
    uv_stop(f->loop);
}

void bench_fetch_spec(uv_loop_t *loop, bench_client *cl, double timeout_s, bench_spec *out) {
    memset(out, 0, sizeof *out);
    fetch_ctx f = {loop, 0};
    bench_call c;
    memset(&c, 0, sizeof c);
    c.method = "GET";
    c.path = "/metrics";
    c.timeout_s = timeout_s;
    c.on_done = on_fetch_done;
    c.user = &f;
    if (bench_call_start(cl, &c) < 0)
        return;
    while (!f.done)
        uv_run(loop, UV_RUN_DEFAULT);
    if (c.err == BENCH_OK && c.resp)
        bench_spec_parse(c.resp, c.resp_len, out);
    bench_call_clear(&c);
}

int bench_fetch_model(uv_loop_t *loop, bench_client *cl, const char *prefix, double timeout_s,
                      char *out, size_t out_len, char *err, size_t err_len) {
    char path[600];
    snprintf(path, sizeof path, "%s/models", prefix);
    fetch_ctx f = {loop, 0};
    bench_call c;
    memset(&c, 0, sizeof c);
    c.method = "GET";
    c.path = path;
    c.timeout_s = timeout_s;
    c.on_done = on_fetch_done;
    c.user = &f;
    if (bench_call_start(cl, &c) < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "GET %s: %s", path, c.err_msg);
    while (!f.done)
        uv_run(loop, UV_RUN_DEFAULT);
    int rc = 0;
    if (c.err != BENCH_OK) {
        rc = brisk_set_err(err, err_len, BRISK_EIO, "GET %s: %s", path, c.err_msg);
    } else {
        cJSON *j = cJSON_ParseWithLength(c.resp ? c.resp : "", c.resp_len);
        const cJSON *data = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
        const cJSON *m0 = cJSON_IsArray(data) ? data->child : NULL;
        const cJSON *id = cJSON_IsObject(m0) ? cJSON_GetObjectItemCaseSensitive(m0, "id") : NULL;
        if (!cJSON_IsString(id) || !id->valuestring[0] || strlen(id->valuestring) >= out_len)
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "GET %s: no model id in the answer; pass --model", path);
        else
            snprintf(out, out_len, "%s", id->valuestring);
        cJSON_Delete(j);
    }
    bench_call_clear(&c);
    return rc;
}
