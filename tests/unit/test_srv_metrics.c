/* test_srv_metrics.c - the /metrics registry: number formatting as
 * prometheus_client writes it, histogram buckets (inclusive le, cumulative,
 * _sum/_count) on random data, label escaping, the sliding window (expiry,
 * nearest-rank quantiles against a sorted reference, the sample bound, tokens
 * per second), HELP/TYPE for every family, and `promtool check metrics` on a
 * rendered exposition when promtool is installed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "brisk_test.h"
#include "server/ops/srv_metrics.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* Log-uniform in [lo, hi): latencies span decades. */
static double rnd_log(double lo, double hi) {
    return lo * pow(hi / lo, rnd_uniform());
}

static srv_metrics *make(const char *name, double window_s, int max_samples, int max_len) {
    srv_metrics_config c = srv_metrics_config_default();
    c.model_name = name;
    c.window_s = window_s;
    c.max_samples = max_samples;
    c.max_model_len = max_len;
    return srv_metrics_create(&c, 0.0);
}

static char *render(srv_metrics *m, const srv_metrics_gauges *g, double now) {
    size_t len = 0;
    char *s = srv_metrics_render(m, g, now, &len);
    if (!s) {
        fprintf(stderr, "render failed\n");
        exit(1);
    }
    if (strlen(s) != len)
        fprintf(stderr, "render length mismatch\n");
    return s;
}

/* The value of the sample line that starts with exactly `series` (name and
 * labels), or NAN when there is none. */
static double value_of(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        if ((size_t)(end - line) > n && strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = *end ? end + 1 : end;
    }
    return NAN;
}

/* value_of for `name{model_name="m"<,extra>}`. */
static double val(const char *text, const char *name, const char *extra) {
    char series[512];
    snprintf(series, sizeof series, "%s{model_name=\"m\"%s%s}", name, extra ? "," : "",
             extra ? extra : "");
    return value_of(text, series);
}

static void test_format(void) {
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        /* Expected strings from prometheus_client's floatToGoString. */
        {0.001, "0.001"},
        {0.005, "0.005"},
        {1.0, "1.0"},
        {2560.0, "2560.0"},
        {0.3, "0.3"},
        {7680.0, "7680.0"},
        {1e-05, "1e-05"},
        {1.5e-07, "1.5e-07"},
        {0.0001, "0.0001"},
        {100000.0, "100000.0"},
        {1000000.0, "1e+06"},
        {1234567.5, "1.2345675e+06"},
        {12345678.0, "1.2345678e+07"},
        {2000000000.0, "2e+09"},
        {123456789012.0, "1.23456789012e+011"},
        {1e+16, "1e+16"},
        {1.5e+16, "1.5e+16"},
        {1.2345678901234566e+17, "1.2345678901234566e+17"},
        {-2.5, "-2.5"},
        {-1234567.0, "-1234567.0"},
        {0.30000000000000004, "0.30000000000000004"},
        {0.3333333333333333, "0.3333333333333333"},
        {5e-324, "5e-324"},
        {1.7976931348623157e+308, "1.7976931348623157e+308"},
        {8192, "8192.0"},
        {0.00314159, "0.00314159"},
        {42, "42.0"},
        {0.0, "0.0"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_metrics_format_float(buf, sizeof buf, cases[i].v);
        CHECK(strcmp(buf, cases[i].want) == 0, "format %.17g: got %s want %s", cases[i].v, buf,
              cases[i].want);
    }
    /* Random doubles read back exactly (shortest round-trip digits). */
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        double v = rnd_log(1e-9, 1e12) * (rnd_uniform() < 0.5 ? -1 : 1);
        srv_metrics_format_float(buf, sizeof buf, v);
        if (strtod(buf, NULL) != v)
            bad++;
    }
    CHECK(bad == 0, "%d random doubles did not round-trip", bad);
    /* snprintf contract: a short buffer truncates, the needed length returns. */
    char tiny[4];
    int need = srv_metrics_format_float(tiny, sizeof tiny, 1234.5);
    CHECK(need == 6 && strcmp(tiny, "123") == 0, "truncation: need %d got %s", need, tiny);
}

/* The reference bucket count of a histogram: values <= bound. */
static int count_le(const double *v, int n, double bound) {
    int c = 0;
    for (int i = 0; i < n; i++)
        c += v[i] <= bound;
    return c;
}

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};

static void test_histograms(void) {
    srv_metrics *m = make("m", 60, 0, 4096);
    CHECK(m != NULL, "create");
    if (!m)
        return;
    enum { N = 3000 };
    static double v[N];
    int nb = (int)(sizeof ttft_bounds / sizeof ttft_bounds[0]);
    /* A third of the values sit exactly on a bound: le is inclusive. */
    double sum = 0;
    for (int i = 0; i < N; i++) {
        v[i] = i % 3 == 0 ? ttft_bounds[(int)(rnd_uniform() * nb)] : rnd_log(1e-4, 5000);
        sum += v[i];
        srv_metrics_observe_ttft(m, v[i], 1.0);
    }
    srv_metrics_observe_ttft(m, -1.0, 1.0); /* ignored */
    srv_metrics_observe_ttft(m, NAN, 1.0);  /* ignored */
    char *t = render(m, NULL, 2.0);
    char le[96], num[64];
    int bad = 0;
    double prev = 0;
    for (int i = 0; i < nb; i++) {
        srv_metrics_format_float(num, sizeof num, ttft_bounds[i]);
        snprintf(le, sizeof le, "le=\"%s\"", num);
        double got = val(t, "vllm:time_to_first_token_seconds_bucket", le);
        int want = count_le(v, N, ttft_bounds[i]);
        if (got != want || got < prev) {
            bad++;
            fprintf(stderr, "bucket %s: got %g want %d\n", le, got, want);
        }
        prev = got;
    }
    CHECK(bad == 0, "%d TTFT buckets wrong", bad);
    CHECK(val(t, "vllm:time_to_first_token_seconds_bucket", "le=\"+Inf\"") == N, "+Inf bucket");
    CHECK(val(t, "vllm:time_to_first_token_seconds_count", NULL) == N, "_count");
    double got_sum = val(t, "vllm:time_to_first_token_seconds_sum", NULL);
    CHECK(fabs(got_sum - sum) <= 1e-9 * sum, "_sum %.17g vs %.17g", got_sum, sum);
    /* Bounds come out as prometheus_client writes them. */
    CHECK(strstr(t, "le=\"0.001\"") && strstr(t, "le=\"1.0\"") && strstr(t, "le=\"2560.0\""),
          "le spelling");
    CHECK(!isnan(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"80.0\"")), "itl 80");
    CHECK(!isnan(val(t, "vllm:e2e_request_latency_seconds_bucket", "le=\"7680.0\"")), "e2e 7680");
    free(t);

    /* Exactly on a bound vs just above it. */
    srv_metrics_observe_itl(m, 0.1, 3.0);
    srv_metrics_observe_itl(m, nextafter(0.1, 1.0), 3.0);
    srv_metrics_observe_itl(m, 100.0, 3.0); /* above the last bound: +Inf only */
    t = render(m, NULL, 3.0);
    CHECK(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"0.075\"") == 0, "itl 0.075");
    CHECK(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"0.1\"") == 1, "itl 0.1");
    CHECK(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"0.15\"") == 2, "itl 0.15");
    CHECK(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"80.0\"") == 2, "itl 80");
    CHECK(val(t, "vllm:inter_token_latency_seconds_bucket", "le=\"+Inf\"") == 3, "itl inf");
    free(t);

    /* Requests: success by reason, token-count buckets (1-2-5 up to 4096). */
    srv_metrics_request r = {SRV_METRICS_FINISH_STOP, 2, 5, 0.3, 0.3};
    srv_metrics_observe_request(m, &r, 4.0);
    r.finish = SRV_METRICS_FINISH_LENGTH;
    r.prompt_tokens = 4096;
    r.generation_tokens = 5000;
    r.queue_s = -1; /* not observed */
    srv_metrics_observe_request(m, &r, 4.0);
    r.finish = (srv_metrics_finish)17; /* out of range: error */
    r.prompt_tokens = -1;
    r.generation_tokens = -1;
    r.e2e_s = NAN;
    srv_metrics_observe_request(m, &r, 4.0);
    t = render(m, NULL, 4.0);
    CHECK(val(t, "vllm:request_success_total", "finished_reason=\"stop\"") == 1, "stop");
    CHECK(val(t, "vllm:request_success_total", "finished_reason=\"length\"") == 1, "length");
    CHECK(val(t, "vllm:request_success_total", "finished_reason=\"abort\"") == 0, "abort");
    CHECK(val(t, "vllm:request_success_total", "finished_reason=\"error\"") == 1, "error");
    CHECK(val(t, "vllm:request_prompt_tokens_bucket", "le=\"1.0\"") == 0, "prompt le 1");
    CHECK(val(t, "vllm:request_prompt_tokens_bucket", "le=\"2.0\"") == 1, "prompt le 2");
    CHECK(val(t, "vllm:request_prompt_tokens_bucket", "le=\"2000.0\"") == 1, "prompt le 2000");
    CHECK(isnan(val(t, "vllm:request_prompt_tokens_bucket", "le=\"5000.0\"")), "no 5000 bound");
    CHECK(val(t, "vllm:request_prompt_tokens_bucket", "le=\"+Inf\"") == 2, "prompt inf");
    CHECK(val(t, "vllm:request_prompt_tokens_sum", NULL) == 4098, "prompt sum");
    CHECK(val(t, "vllm:request_generation_tokens_bucket", "le=\"5.0\"") == 1, "gen le 5");
    CHECK(val(t, "vllm:request_generation_tokens_count", NULL) == 2, "gen count");
    CHECK(val(t, "vllm:e2e_request_latency_seconds_bucket", "le=\"0.3\"") == 2, "e2e 0.3");
    CHECK(val(t, "vllm:e2e_request_latency_seconds_count", NULL) == 2, "e2e count");
    CHECK(val(t, "vllm:request_queue_time_seconds_count", NULL) == 1, "queue count");
    free(t);
    srv_metrics_free(m);
}

static void test_escaping_and_counters(void) {
    srv_metrics *m = make("we\"ird\\na\nme", 60, 0, 0);
    CHECK(m != NULL, "create");
    if (!m)
        return;
    char *t = render(m, NULL, 1.0);
    CHECK(strstr(t, "vllm:num_requests_running{model_name=\"we\\\"ird\\\\na\\nme\"} 0.0\n") != NULL,
          "escaped label:\n%.300s", t);
    free(t);
    srv_metrics_free(m);

    m = make("m", 60, 0, 0);
    if (!m)
        return;
    for (int i = 0; i < 3; i++)
        srv_metrics_observe_http(m, srv_metrics_route_of("/v1/completions"), 200);
    srv_metrics_observe_http(m, srv_metrics_route_of("/v1/chat/completions"), 200);
    srv_metrics_observe_http(m, srv_metrics_route_of("/readyz"), 503);
    srv_metrics_observe_http(m, srv_metrics_route_of("/no/such/path"), 404);
    srv_metrics_observe_http(m, SRV_ROUTE_OTHER, 99);        /* ignored */
    srv_metrics_observe_http(m, SRV_ROUTE_OTHER, 600);       /* ignored */
    srv_metrics_observe_http(m, SRV_ROUTE_OTHER, -200);      /* ignored */
    srv_metrics_observe_http(m, SRV_ROUTE_COUNT, 200);       /* ignored */
    srv_metrics_observe_http(m, (srv_metrics_route)-1, 200); /* ignored */
    srv_metrics_count_unknown_fields(m, 2);
    srv_metrics_count_unknown_fields(m, -5); /* ignored */
    srv_metrics_count_unknown_fields(m, 1);
    srv_metrics_observe_tokens(m, 100, 7, 1.0);
    srv_metrics_observe_tokens(m, -3, 2, 2.0);
    srv_metrics_gauges g = {.running = 3,
                            .waiting = 4,
                            .kv_usage = 0.25,
                            .preemptions = 5,
                            .kv = {.prefix_queries = 1000,
                                   .prefix_hits = 600,
                                   .blocks_total = 10,
                                   .blocks_used = 4,
                                   .blocks_cached = 3},
                            .kv_slots_allocated = 1000,
                            .kv_slots_filled = 900,
                            .engine_busy_s = 2.5,
                            .engine_forward_s = 2.0,
                            .engine_steps = 7,
                            .engine_batch_tokens = 70};
    t = render(m, &g, 2.0);
    CHECK(strstr(t, "vllm:cache_config_info") == NULL, "no cache_config_info without a dtype");
    free(t);
    g.kv_dtype = "q8_0"; /* vLLM's info gauge: the configuration as labels, value 1 */
    g.kv_block_size = 16;
    g.prefix_caching = 1;
    t = render(m, &g, 2.0);
    CHECK(val(t, "vllm:cache_config_info",
              "block_size=\"16\",cache_dtype=\"q8_0\",enable_prefix_caching=\"True\","
              "num_gpu_blocks=\"10\"") == 1 &&
              strstr(t, "# TYPE vllm:cache_config_info gauge\n"),
          "cache_config_info");
    CHECK(val(t, "brisk_kv_cache_blocks", "state=\"total\"") == 10 &&
              val(t, "brisk_kv_cache_blocks", "state=\"used\"") == 4 &&
              val(t, "brisk_kv_cache_blocks", "state=\"cached\"") == 3 &&
              val(t, "brisk_kv_cache_blocks", "state=\"free\"") == 3,
          "kv blocks");
    CHECK(val(t, "brisk_kv_cache_slots_allocated_total", NULL) == 1000 &&
              val(t, "brisk_kv_cache_slots_filled_total", NULL) == 900 &&
              val(t, "brisk_engine_busy_seconds_total", NULL) == 2.5 &&
              val(t, "brisk_engine_forward_seconds_total", NULL) == 2.0 &&
              val(t, "brisk_engine_steps_total", NULL) == 7 &&
              val(t, "brisk_engine_batch_tokens_total", NULL) == 70,
          "engine families");
    CHECK(val(t, "brisk_http_requests_total", "route=\"/v1/completions\",code=\"200\"") == 3,
          "200");
    CHECK(val(t, "brisk_http_requests_total", "route=\"/v1/chat/completions\",code=\"200\"") == 1,
          "chat 200");
    CHECK(val(t, "brisk_http_requests_total", "route=\"probe\",code=\"503\"") == 1, "probe 503");
    CHECK(val(t, "brisk_http_requests_total", "route=\"other\",code=\"404\"") == 1, "404");
    /* The API routes' common codes are there at 0 before any such answer;
     * other routes and codes appear with their first response. */
    CHECK(val(t, "brisk_http_requests_total", "route=\"/v1/completions\",code=\"500\"") == 0 &&
              val(t, "brisk_http_requests_total", "route=\"/v1/models\",code=\"429\"") == 0,
          "preset codes at 0");
    CHECK(isnan(val(t, "brisk_http_requests_total", "route=\"probe\",code=\"500\"")) &&
              isnan(val(t, "brisk_http_requests_total", "route=\"/v1/completions\",code=\"404\"")),
          "no other zero series");
    CHECK(strstr(t, "code=\"600\"") == NULL && strstr(t, "code=\"99\"") == NULL, "ignored codes");
    int n_other = 0;
    for (const char *q = t; (q = strstr(q, "route=\"other\"")) != NULL; q++)
        n_other++;
    CHECK(n_other == 1, "ignored routes and codes add no series");
    CHECK(srv_metrics_route_of("/health") == SRV_ROUTE_PROBE &&
              srv_metrics_route_of("/livez") == SRV_ROUTE_PROBE &&
              srv_metrics_route_of("/metrics") == SRV_ROUTE_METRICS &&
              srv_metrics_route_of("/v1/models") == SRV_ROUTE_MODELS &&
              srv_metrics_route_of("/v1/completions/") == SRV_ROUTE_OTHER &&
              srv_metrics_route_of(NULL) == SRV_ROUTE_OTHER,
          "route classes");
    CHECK(val(t, "brisk_unknown_request_fields_total", NULL) == 3, "unknown fields");
    CHECK(val(t, "brisk_build_info",
              "version=\"unknown\",commit=\"unknown\",backends=\"unknown\"") == 1,
          "build info defaults");
    CHECK(strstr(t, "process_") == NULL, "no process families without g.process");
    CHECK(val(t, "vllm:prompt_tokens_total", NULL) == 100, "prompt total");
    CHECK(val(t, "vllm:generation_tokens_total", NULL) == 9, "gen total");
    CHECK(val(t, "vllm:num_requests_running", NULL) == 3, "running");
    CHECK(val(t, "vllm:num_requests_waiting", NULL) == 4, "waiting");
    CHECK(val(t, "vllm:kv_cache_usage_perc", NULL) == 0.25, "kv");
    CHECK(val(t, "vllm:num_preemptions_total", NULL) == 5, "preemptions");
    CHECK(val(t, "vllm:prefix_cache_queries_total", NULL) == 1000, "prefix queries");
    CHECK(val(t, "vllm:prefix_cache_hits_total", NULL) == 600, "prefix hits");
    free(t);
    srv_metrics_free(m);

    srv_metrics_free(NULL);
    CHECK(srv_metrics_create(NULL, 0) == NULL, "NULL cfg");
    srv_metrics_config c = srv_metrics_config_default();
    CHECK(srv_metrics_create(&c, 0) == NULL, "NULL model name");
    c.model_name = "x";
    c.window_s = NAN;
    CHECK(srv_metrics_create(&c, 0) == NULL, "NaN window");
}

/* Nearest-rank reference, written as the definition: the smallest sorted
 * value v[k-1] with k / n >= q. */
static double ref_quantile(const double *sorted, int n, double q) {
    if (n == 0)
        return 0;
    for (int k = 1; k <= n; k++)
        if ((double)k >= q * n - 1e-9)
            return sorted[k - 1];
    return sorted[n - 1];
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void check_quantiles(const char *t, const char *stem, double *vals, int n,
                            const char *what) {
    if (n > 0)
        qsort(vals, (size_t)n, sizeof *vals, cmp_d);
    static const double qs[3] = {0.5, 0.95, 0.99};
    static const char *const qn[3] = {"p50", "p95", "p99"};
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, "brisk_%s_%s_seconds", stem, qn[i]);
        double got = val(t, name, NULL);
        double want = ref_quantile(vals, n, qs[i]);
        CHECK(got == want, "%s %s (n=%d): got %.17g want %.17g", what, name, n, got, want);
    }
}

static void test_window(void) {
    /* Quantiles on random sets of random sizes vs a sorted reference. */
    for (int trial = 0; trial < 20; trial++) {
        srv_metrics *m = make("m", 60, 0, 0);
        if (!m)
            return;
        int n = 1 + (int)(rnd_uniform() * 1500);
        double *ttft = malloc((size_t)n * sizeof *ttft);
        double *itl = malloc((size_t)n * sizeof *itl);
        for (int i = 0; i < n; i++) {
            ttft[i] = rnd_log(0.001, 30);
            itl[i] = rnd_log(0.001, 0.5);
            srv_metrics_observe_ttft(m, ttft[i], 10.0 + i * 0.01);
            srv_metrics_observe_itl(m, itl[i], 10.0 + i * 0.01);
        }
        char *t = render(m, NULL, 30.0);
        check_quantiles(t, "time_to_first_token", ttft, n, "ttft");
        check_quantiles(t, "inter_token_latency", itl, n, "itl");
        check_quantiles(t, "e2e_request_latency", NULL, 0, "e2e empty");
        free(t);
        free(ttft);
        free(itl);
        srv_metrics_free(m);
    }

    /* Expiry: a sample stays while now - t < window. */
    srv_metrics *m = make("m", 60, 0, 0);
    if (!m)
        return;
    srv_metrics_request r = {SRV_METRICS_FINISH_STOP, 1, 1, 0.0, 5.0};
    srv_metrics_observe_request(m, &r, 0.0);
    r.e2e_s = 1.0;
    srv_metrics_observe_request(m, &r, 30.0);
    char *t = render(m, NULL, 59.9);
    CHECK(val(t, "brisk_e2e_request_latency_p50_seconds", NULL) == 1.0, "p50 of {1,5}");
    CHECK(val(t, "brisk_e2e_request_latency_p99_seconds", NULL) == 5.0, "p99 of {1,5}");
    free(t);
    t = render(m, NULL, 60.0);
    CHECK(val(t, "brisk_e2e_request_latency_p99_seconds", NULL) == 1.0, "t=0 sample expired");
    free(t);
    t = render(m, NULL, 95.0);
    CHECK(val(t, "brisk_e2e_request_latency_p50_seconds", NULL) == 0.0, "empty window -> 0");
    CHECK(val(t, "vllm:e2e_request_latency_seconds_count", NULL) == 2, "histogram keeps all");
    free(t);
    srv_metrics_free(m);

    /* The sample bound: 16 kept, the newest. */
    m = make("m", 60, 16, 0);
    if (!m)
        return;
    for (int i = 1; i <= 100; i++)
        srv_metrics_observe_itl(m, i, 1.0);
    t = render(m, NULL, 2.0);
    /* Window holds 85..100: p50 is the 8th = 92, p95 the 16th = 100. */
    CHECK(val(t, "brisk_inter_token_latency_p50_seconds", NULL) == 92, "bounded p50");
    CHECK(val(t, "brisk_inter_token_latency_p95_seconds", NULL) == 100, "bounded p95");
    CHECK(val(t, "vllm:inter_token_latency_seconds_count", NULL) == 100, "histogram all");
    free(t);
    srv_metrics_free(m);
}

static void test_token_rate(void) {
    srv_metrics *m = make("m", 60, 0, 0); /* created at t = 0 */
    if (!m)
        return;
    /* A young server divides by its age, not by the whole window. */
    srv_metrics_observe_tokens(m, 100, 0, 1.0);
    char *t = render(m, NULL, 5.0);
    CHECK(val(t, "brisk_prompt_tokens_per_second", NULL) == 20, "100 over 5 s");
    CHECK(val(t, "brisk_generation_tokens_per_second", NULL) == 0, "no gen");
    free(t);
    srv_metrics_observe_tokens(m, 500, 0, 10.0);
    srv_metrics_observe_tokens(m, 0, 1200, 50.0);
    t = render(m, NULL, 60.0);
    CHECK(val(t, "brisk_prompt_tokens_per_second", NULL) == 10, "600 over 60 s");
    CHECK(val(t, "brisk_generation_tokens_per_second", NULL) == 20, "1200 over 60 s");
    free(t);
    t = render(m, NULL, 70.5); /* t=1 and t=10 expired */
    CHECK(val(t, "brisk_prompt_tokens_per_second", NULL) == 0, "prompt expired");
    CHECK(val(t, "brisk_generation_tokens_per_second", NULL) == 20, "gen kept");
    free(t);
    t = render(m, NULL, 200.0);
    CHECK(val(t, "brisk_generation_tokens_per_second", NULL) == 0, "all expired");
    CHECK(val(t, "vllm:generation_tokens_total", NULL) == 1200, "total kept");
    free(t);
    srv_metrics_free(m);

    /* Many events, few slots: merging keeps the window's sum exact. */
    m = make("m", 60, 8, 0);
    if (!m)
        return;
    long long want = 0;
    for (int i = 0; i < 5000; i++) {
        double now = 100.0 + i * 0.02; /* 100 s .. 200 s */
        srv_metrics_observe_tokens(m, 0, 3, now);
        if (now > 200.0 - 60.0 + 7.5)
            want += 3; /* surely inside, beyond merge slack */
    }
    t = render(m, NULL, 200.0);
    double rate = val(t, "brisk_generation_tokens_per_second", NULL);
    /* Merging groups events into 7.5 s slots, so the window edge is exact to
     * one slot: 60 s at 150 tokens/s, give or take 7.5 s of tokens. */
    CHECK(rate * 60 >= (double)want && rate * 60 <= (double)want + 150 * 15,
          "merged rate %g (want about 150)", rate);
    free(t);
    srv_metrics_free(m);
}

/* Every sample belongs to a family announced by HELP then TYPE. */
static void test_help_type(void) {
    srv_metrics *m = make("m", 60, 0, 0);
    if (!m)
        return;
    srv_metrics_observe_http(m, SRV_ROUTE_COMPLETIONS, 200);
    char *t = render(m, NULL, 1.0);
    char family[128] = "", type[32] = "", help_for[128] = "";
    int bad = 0, families = 0;
    for (char *line = t; *line;) {
        char *end = strchr(line, '\n');
        CHECK(end != NULL, "every line ends in a newline");
        if (!end)
            break;
        *end = '\0';
        if (strncmp(line, "# HELP ", 7) == 0) {
            sscanf(line + 7, "%127s", help_for);
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            if (sscanf(line + 7, "%127s %31s", family, type) != 2 || strcmp(family, help_for) != 0)
                bad++;
            families++;
            if (strcmp(type, "counter") == 0 && strcmp(family + strlen(family) - 6, "_total") != 0)
                bad++;
        } else {
            char name[160];
            size_t k = strcspn(line, "{ ");
            snprintf(name, sizeof name, "%.*s", (int)k, line);
            size_t fl = strlen(family);
            int ok = strcmp(name, family) == 0;
            if (!ok && strcmp(type, "histogram") == 0 && strncmp(name, family, fl) == 0)
                ok = !strcmp(name + fl, "_bucket") || !strcmp(name + fl, "_sum") ||
                     !strcmp(name + fl, "_count");
            if (!ok) {
                bad++;
                fprintf(stderr, "sample %s outside family %s\n", name, family);
            }
        }
        line = end + 1;
    }
    CHECK(bad == 0, "%d HELP/TYPE problems", bad);
    CHECK(families == 30, "%d families", families); /* 29 + brisk_build_info */
    free(t);
    srv_metrics_free(m);
}

/* Runs promtool check metrics on `text`; returns its exit status (-1 if it
 * could not run) and its output in out. */
static int promtool_check(const char *text, char *out, size_t out_len) {
    char path[] = "/tmp/brisk_metrics_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    out[0] = '\0';
    int status = -1;
    if (ok) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
        FILE *p = popen(cmd, "r");
        if (p) {
            size_t n = fread(out, 1, out_len - 1, p);
            out[n] = '\0';
            int st = pclose(p);
            status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
    }
    unlink(path);
    return status;
}

static void test_promtool(void) {
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        printf("SKIP: promtool not found\n");
        return;
    }
    srv_metrics *m = make("model \"x\"\\y", 60, 0, 32768);
    if (!m)
        return;
    for (int i = 0; i < 500; i++) {
        double now = i * 0.1;
        srv_metrics_request r = {(srv_metrics_finish)(i % 4), (int)rnd_log(1, 30000),
                                 (int)rnd_log(1, 3000), rnd_log(1e-4, 100), rnd_log(0.1, 5000)};
        srv_metrics_observe_ttft(m, rnd_log(1e-4, 3000), now);
        srv_metrics_observe_itl(m, rnd_log(1e-3, 100), now);
        srv_metrics_observe_request(m, &r, now);
        srv_metrics_observe_tokens(m, r.prompt_tokens, r.generation_tokens, now);
        srv_metrics_observe_http(m, (srv_metrics_route)(i % SRV_ROUTE_COUNT),
                                 i % 7 ? 200 : 400 + i % 100);
    }
    srv_metrics_count_unknown_fields(m, 3);
    /* The last four: the audit log families rendered (12 lines, 1 error, 0 dropped). */
    srv_metrics_gauges g = {.running = 7,
                            .waiting = 2,
                            .kv_usage = 0.625,
                            .preemptions = 12,
                            .kv = {.prefix_queries = 123456789,
                                   .prefix_hits = 98765432,
                                   .blocks_total = 64,
                                   .blocks_used = 40,
                                   .blocks_cached = 20},
                            .kv_slots_allocated = 5000,
                            .kv_slots_filled = 4800,
                            .engine_busy_s = 12.5,
                            .engine_forward_s = 11.0,
                            .engine_steps = 99,
                            .engine_batch_tokens = 999,
                            .kv_dtype = "fp8",
                            .kv_block_size = 16,
                            .audit_log = 1,
                            .audit_lines = 12,
                            .audit_errors = 1,
                            .spec = 1,
                            .spec_positions = 3,
                            .spec_drafts = 10,
                            .spec_draft_tokens = 30,
                            .spec_accepted_tokens = 12,
                            .spec_accepted_per_pos = {7, 4, 1}};
    /* The process families from this test process's own /proc. */
    CHECK(srv_proc_sample(&g.proc) == 0, "srv_proc_sample");
    g.process = 1;
    char *t = render(m, &g, 50.0);
    CHECK(strstr(t, "process_resident_memory_bytes{") && strstr(t, "process_open_fds{") &&
              strstr(t, "process_start_time_seconds{") && strstr(t, "process_cpu_seconds_total{"),
          "process families rendered");
    static char out[65536];
    int rc = promtool_check(t, out, sizeof out);
    /* promtool's linter rejects ':' in names, which vLLM's own names carry;
     * those are kept on purpose for compatibility. Every other line is a
     * real problem. */
    int other = 0;
    for (char *line = out; *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        if (*line && !(strncmp(line, "vllm:", 5) == 0 &&
                       strstr(line, "metric names should not contain ':'"))) {
            other++;
            fprintf(stderr, "promtool: %s\n", line);
        }
        if (!end)
            break;
        line = end + 1;
    }
    CHECK(rc == 0 || rc == 3, "promtool rc %d (3 = lint findings, else a parse error)", rc);
    CHECK(other == 0, "%d promtool findings besides vLLM's ':' names", other);

    /* The same text with vllm: spelled vllm_ must be entirely clean: this
     * applies every other lint rule to the vLLM families too. */
    for (char *p = t; (p = strstr(p, "vllm:")) != NULL; p += 5)
        p[4] = '_';
    rc = promtool_check(t, out, sizeof out);
    CHECK(rc == 0 && out[0] == '\0', "promtool on vllm_ names: rc %d, output:\n%s", rc, out);
    free(t);
    srv_metrics_free(m);
}

/* Speculative decoding's counters: vLLM's names and position label, only
 * when the server speculates. */
static void test_spec_decode(void) {
    srv_metrics *m = make("m", 60, 0, 0);
    if (!m)
        return;
    srv_metrics_gauges g = {.spec = 1,
                            .spec_positions = 4,
                            .spec_drafts = 100,
                            .spec_draft_tokens = 400,
                            .spec_accepted_tokens = 220,
                            .spec_accepted_per_pos = {90, 70, 40, 20, 999}};
    char *t = render(m, &g, 1.0);
    CHECK(val(t, "vllm:spec_decode_num_drafts_total", NULL) == 100 &&
              val(t, "vllm:spec_decode_num_draft_tokens_total", NULL) == 400 &&
              val(t, "vllm:spec_decode_num_accepted_tokens_total", NULL) == 220,
          "spec counters:\n%s", t);
    CHECK(val(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\"") == 90 &&
              val(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"3\"") == 20,
          "per position");
    CHECK(isnan(val(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"4\"")),
          "only the configured positions");
    CHECK_COND(strstr(t, "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"));
    free(t);
    g.spec = 0;
    t = render(m, &g, 2.0);
    CHECK(!strstr(t, "spec_decode"), "no spec families without speculation");
    free(t);
    srv_metrics_free(m);
}

/* brisk_build_info carries the configured strings, escaped. */
static void test_build_info(void) {
    srv_metrics_config c = srv_metrics_config_default();
    c.model_name = "m";
    c.version = "1.2.3";
    c.commit = "abc\"def";
    c.backends = "cpu(avx2 fma) cuda(sm_90)";
    srv_metrics *m = srv_metrics_create(&c, 0.0);
    CHECK(m != NULL, "create");
    if (!m)
        return;
    char *t = render(m, NULL, 1.0);
    CHECK(val(t, "brisk_build_info",
              "version=\"1.2.3\",commit=\"abc\\\"def\",backends=\"cpu(avx2 fma) cuda(sm_90)\"") ==
              1,
          "build info labels:\n%s", t);
    free(t);
    srv_metrics_free(m);
}

int main(void) {
    test_format();
    test_build_info();
    test_histograms();
    test_escaping_and_counters();
    test_window();
    test_token_rate();
    test_help_type();
    test_promtool();
    test_spec_decode();
    return BT_SUMMARY("test_srv_metrics");
}
