/* srv_metrics.h - Prometheus metrics for GET /metrics (text exposition format 0.0.4).
 *
 * Names, meanings, HELP texts and histogram bucket boundaries follow vLLM
 * (vllm/v1/metrics/loggers.py), so dashboards and autoscalers written for vLLM
 * work unchanged. Every series carries model_name="<served model name>".
 *
 * vLLM families (counters end in _total, as prometheus_client exposes them):
 *   vllm:num_requests_running         gauge      from the snapshot (srv_metrics_gauges)
 *   vllm:num_requests_waiting         gauge      from the snapshot
 *   vllm:kv_cache_usage_perc          gauge      from the snapshot, 0..1
 *   vllm:num_preemptions_total        counter    from the snapshot
 *   vllm:prefix_cache_queries_total   counter    from the snapshot (tokens queried)
 *   vllm:prefix_cache_hits_total      counter    from the snapshot (tokens hit)
 *   vllm:prompt_tokens_total          counter    srv_metrics_observe_tokens
 *   vllm:generation_tokens_total      counter    srv_metrics_observe_tokens
 *   vllm:request_success_total        counter    srv_metrics_observe_request, one series per
 *                                                finished_reason: stop, length, abort, error
 *   vllm:request_prompt_tokens        histogram  srv_metrics_observe_request; 1-2-5 buckets
 *   vllm:request_generation_tokens    histogram  up to max_model_len, as vLLM
 *   vllm:time_to_first_token_seconds  histogram  srv_metrics_observe_ttft
 *   vllm:inter_token_latency_seconds  histogram  srv_metrics_observe_itl
 *   vllm:e2e_request_latency_seconds  histogram  srv_metrics_observe_request
 *   vllm:request_queue_time_seconds   histogram  srv_metrics_observe_request
 *   vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
 *   vllm:spec_decode_num_accepted_tokens_total  counters from the snapshot (speculative
 *                                                decoding on)
 *   vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}  counter
 *   vllm:cache_config_info            gauge 1    labels block_size, cache_dtype (the KV
 *                                                dtype: f16, q8_0, fp8, ...),
 *                                                enable_prefix_caching, num_gpu_blocks
 *                                                (the pool's blocks); when the engine runs
 * Histogram buckets are cumulative, `le` is inclusive (a value equal to a bound
 * counts in that bucket), and the le strings are written as prometheus_client
 * writes them ("0.5", "1.0", "2560.0", "+Inf") so label matchers such as
 * le="1.0" written against vLLM keep matching.
 *
 * brisk families (gauges over the sliding window, see below):
 *   brisk_time_to_first_token_p50_seconds   brisk_time_to_first_token_p95_seconds
 *   brisk_time_to_first_token_p99_seconds   brisk_inter_token_latency_p50_seconds
 *   brisk_inter_token_latency_p95_seconds   brisk_inter_token_latency_p99_seconds
 *   brisk_e2e_request_latency_p50_seconds   brisk_e2e_request_latency_p95_seconds
 *   brisk_e2e_request_latency_p99_seconds
 *   brisk_prompt_tokens_per_second          brisk_generation_tokens_per_second
 *   brisk_http_requests_total{code="200"}   counter, one series per status code seen
 *   brisk_unknown_request_fields_total      counter
 *   brisk_kv_cache_blocks{state="total|used|cached|free"}  gauge (when the engine runs)
 *   brisk_kv_cache_slots_allocated_total    counter: positions in used KV blocks, summed per step
 *   brisk_kv_cache_slots_filled_total       counter: of those, positions holding a token; the
 *                                           KV waste of a period = 1 - d(filled) / d(allocated)
 *   brisk_engine_busy_seconds_total         counter: engine-thread time spent on steps
 *   brisk_engine_forward_seconds_total      counter: of it, inside the forward pass
 *   brisk_engine_steps_total, brisk_engine_batch_tokens_total  counters
 *   brisk_audit_log_lines_total, brisk_audit_log_errors_total, brisk_audit_log_dropped_total
 *                                           counters (with --audit-log): lines written, failed
 *                                           writes, lines lost to a full buffer
 * The quantiles are separate gauge families rather than one gauge with a
 * `quantile` label: promtool rejects `quantile` on anything but a summary, and
 * a summary's _sum/_count would duplicate the histograms.
 *
 * The window. A latency sample stays in its window while now - t < window_s,
 * and each series also keeps at most max_samples samples (the oldest go first),
 * so memory is bounded whatever the request rate. Quantiles are exact order
 * statistics by the nearest-rank rule: p_q = the ceil(q * n)-th smallest of
 * the n samples in the window. An empty window renders 0, so a dashboard shows
 * an idle server as 0 rather than as a gap.
 * Tokens per second = tokens observed inside the window / the span the window
 * actually covers, which is min(window_s, now - created), so a server younger
 * than the window is not diluted by time it did not exist.
 * Token events closer together than window_s / max_samples are merged into
 * one, so the expiry of token counts is exact to within that resolution.
 *
 * Threading: every function here runs on one thread (the loop thread); there
 * is no locking. Debug builds assert that the thread does not change after
 * the first observe or render call. The engine-owned values (running, waiting,
 * KV usage, preemptions, prefix cache counters) are not stored here: the
 * caller reads them (from the engine's atomics) and passes them to render.
 * Time is always the caller's `now`, monotonic seconds (brisk_now()), which
 * keeps the tests deterministic. */
#ifndef SRV_METRICS_H
#define SRV_METRICS_H

#include "kv/kv_cache.h"
#include "server/ops/srv_proc.h"

#include <stddef.h>

/* The most proposal positions the per-position family shows (speculative
 * decoding's longest run: scheduler/spec.h's SCHED_SPEC_MAX_TOKENS). */
#define SRV_METRICS_SPEC_MAX_POS 32

/* The Content-Type of the rendered text. */
#define SRV_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct srv_metrics_config {
    const char *model_name; /* served model name; copied; required (may be "") */
    int max_model_len;      /* largest token-count bucket (1-2-5 series); <= 0: 8192 */
    double window_s;        /* sliding window of the brisk_ gauges; <= 0: 60 s */
    int max_samples;        /* samples kept per windowed series; <= 0: 8192 */
    /* brisk_build_info{version,commit,backends} 1; NULL: "unknown". Copied. */
    const char *version, *commit, *backends;
} srv_metrics_config;

/* model_name NULL, everything else defaulted. */
srv_metrics_config srv_metrics_config_default(void);

typedef struct srv_metrics srv_metrics;

/* Creates the registry; `now` starts the tokens-per-second window. Returns
 * NULL if cfg or cfg->model_name is NULL, a value is not finite, or an
 * allocation fails. Free with srv_metrics_free. */
srv_metrics *srv_metrics_create(const srv_metrics_config *cfg, double now);
void srv_metrics_free(srv_metrics *m);
/* A request ended by its deadline: refused while waiting (running 0) or cut
 * short while running (1); brisk_deadline_exceeded_total{state}. */
void srv_metrics_observe_deadline(srv_metrics *m, int running);

/* The `model_name="..."` label every sample carries (escaped; owned by m). */
const char *srv_metrics_label(const srv_metrics *m);

/* Why a request (one choice of it) finished; the finished_reason label. */
typedef enum srv_metrics_finish {
    SRV_METRICS_FINISH_STOP = 0, /* "stop": EOS or a stop string */
    SRV_METRICS_FINISH_LENGTH,   /* "length": max_tokens or the context */
    SRV_METRICS_FINISH_ABORT,    /* "abort": the client went away or cancelled */
    SRV_METRICS_FINISH_ERROR,    /* "error": the engine failed it */
    SRV_METRICS_FINISH_COUNT
} srv_metrics_finish;

/* A finished request. Times in seconds; a negative or non-finite time is not
 * observed (e.g. queue_s < 0 when the request never left the queue). */
typedef struct srv_metrics_request {
    srv_metrics_finish finish; /* out of range: counted as error */
    int prompt_tokens;         /* < 0: not observed */
    int generation_tokens;     /* < 0: not observed */
    double queue_s;            /* arrival -> first scheduled */
    double e2e_s;              /* arrival -> finished */
} srv_metrics_request;

/* Once per finished request: request_success_total, the two token-count
 * histograms, e2e and queue time (histograms) and the e2e window. Token
 * totals are not touched here; they come from srv_metrics_observe_tokens. */
void srv_metrics_observe_request(srv_metrics *m, const srv_metrics_request *r, double now);

/* Once per request, when its first token is produced: the TTFT histogram and
 * window. Negative or non-finite values are ignored. */
void srv_metrics_observe_ttft(srv_metrics *m, double ttft_s, double now);

/* Once per gap between two consecutive tokens of a request: the inter-token
 * latency histogram and window. Negative or non-finite values are ignored. */
void srv_metrics_observe_itl(srv_metrics *m, double itl_s, double now);

/* As work happens (e.g. once per engine step): adds to the prompt/generation
 * token totals and to the tokens-per-second window. Negative counts are
 * treated as 0. */
void srv_metrics_observe_tokens(srv_metrics *m, long long prompt_tokens,
                                long long generation_tokens, double now);

/* The route label of brisk_http_requests_total: the three API endpoints,
 * the probes (/health, /livez, /readyz) together, /metrics, and everything
 * else (404s, unknown paths) as "other", so that a client cannot grow the
 * label set. */
typedef enum {
    SRV_ROUTE_COMPLETIONS,
    SRV_ROUTE_CHAT,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_PROBE,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_OTHER,
    SRV_ROUTE_COUNT
} srv_metrics_route;

/* The route class of a request path (the target without its query). */
srv_metrics_route srv_metrics_route_of(const char *path);

/* Once per HTTP response: brisk_http_requests_total{route,code}. Codes
 * outside 100..599 and routes outside the enum are ignored. The API routes'
 * common codes (200, 400, 401, 429, 500, 503) are exported from the start at
 * 0, so that rate() sees their first increment. */
void srv_metrics_observe_http(srv_metrics *m, srv_metrics_route route, int status);

/* Adds n (> 0) unknown fields seen in request bodies. */
void srv_metrics_count_unknown_fields(srv_metrics *m, int n);

/* The engine-owned values, read by the caller at render time. The three
 * counters must only grow over the process lifetime. */
typedef struct srv_metrics_gauges {
    int running;           /* requests in the running batch */
    int waiting;           /* requests queued */
    double kv_usage;       /* KV cache blocks in use, 0..1 */
    long long preemptions; /* cumulative preemptions */
    /* The KV cache's counters as the cache keeps them: prefix_queries and
     * prefix_hits (cumulative tokens); the brisk_ engine families below are
     * rendered only when kv.blocks_total > 0. */
    kv_cache_stats kv;
    long long kv_slots_allocated, kv_slots_filled; /* summed over engine steps */
    double engine_busy_s, engine_forward_s;        /* cumulative engine-thread seconds */
    long long engine_steps, engine_batch_tokens;
    /* vllm:spec_decode_* families (rendered only when spec is 1: the server
     * speculates): drafts verified, tokens proposed, tokens accepted, and
     * per proposal position (0 .. spec_positions - 1) the drafts whose token
     * there was accepted. Cumulative. */
    int spec, spec_positions;
    long long spec_drafts, spec_draft_tokens, spec_accepted_tokens;
    long long spec_accepted_per_pos[SRV_METRICS_SPEC_MAX_POS];
    /* vllm:cache_config_info (rendered only when kv_dtype is set): the KV
     * cache's dtype name (static), block size, prefix caching on. */
    const char *kv_dtype;
    int kv_block_size;
    int prefix_caching;
    /* brisk_audit_log_* families (rendered only when audit_log is 1) */
    int audit_log;
    long long audit_lines, audit_errors, audit_dropped;
    /* process_* families (rendered only when process is 1; srv_proc.h) */
    int process;
    srv_proc_stats proc;
} srv_metrics_gauges;

/* Renders the whole exposition. g may be NULL (all zero). Expires window
 * samples older than the window as of `now`. Returns a malloc'd,
 * NUL-terminated string the caller frees, and its length in *len (len may be
 * NULL); NULL if an allocation fails. */
char *srv_metrics_render(srv_metrics *m, const srv_metrics_gauges *g, double now, size_t *len);

/* Formats v as prometheus_client writes a float (Python repr, with its
 * exponent rule above 1e6): "0.001", "1.0", "1e+06", "+Inf", "NaN". Writes at
 * most n bytes including the NUL; returns the length it needed (as snprintf).
 * Exposed for the tests. */
int srv_metrics_format_float(char *out, size_t n, double v);

#endif
