/* bench_main.c - brisk-bench, the load generator: the command line, then a
 * warm-up, one level or a sweep of levels, and the reports. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <uv.h>

#include "brisk_config.h"
#include "clients/bench_http.h"
#include "clients/bench_opts.h"
#include "clients/bench_report.h"
#include "clients/bench_run.h"
#include "clients/bench_workload.h"

static void usage(FILE *f) {
    fprintf(
        f, "usage: brisk-bench [options]   load-tests an OpenAI-compatible server (brisk, vLLM,\n"
           "                               llama.cpp, TGI) with streamed completions\n"
           "server:\n"
           "  --base-url URL            http://HOST:PORT[/v1] (http://127.0.0.1:8080)\n"
           "  --api-key KEY             Bearer key (default: $OPENAI_API_KEY if set)\n"
           "  --model NAME              model field (default: the first of GET /v1/models)\n"
           "  --endpoint completions|chat   /v1/completions or /v1/chat/completions (completions)\n"
           "workload:\n"
           "  --input-len N             prompt tokens of random prompts (128)\n"
           "  --output-len N            max_tokens, sent with ignore_eos (128)\n"
           "  --range-ratio R           lengths uniform in [L(1-R), L(1+R)], R in [0,1) (0)\n"
           "  --dataset FILE.jsonl      one {\"prompt\": str, \"output_len\": N} per line instead\n"
           "  --shared-prefix-len N     every prompt starts with the same N-token system prompt\n"
           "  --temperature T           (0)\n"
           "  --no-ignore-eos           do not send ignore_eos (outputs may end early)\n"
           "  --extra-body JSON         fields merged into every request body\n"
           "  --abort-rate F            this fraction of requests is aborted by the client: a\n"
           "                            quarter before the response head, the rest after k\n"
           "                            tokens, k uniform in [0, output length) (0)\n"
           "  --invalid-rate F          this fraction is deliberately invalid (bad JSON, a value\n"
           "                            out of range, an unknown model, a wrong type): a 4xx\n"
           "                            is right, anything else an error (0)\n"
           "load:\n"
           "  --request-rate R          arrivals per second, Poisson (inf: all at once) (inf)\n"
           "  --burstiness K            gamma-distributed gaps with shape K, mean 1/R (1)\n"
           "  --max-concurrency C       requests in flight at most: a closed loop (unlimited)\n"
           "  --num-prompts N           requests per level (100; 0 = until --duration)\n"
           "  --duration S              stop sending after S seconds\n"
           "  --warmup N                N requests first, not counted; they also calibrate\n"
           "                            words per token so prompts have about --input-len tokens\n"
           "  --seed S                  prompts and arrival times (0)\n"
           "  --timeout S               per request, 0 = none (600)\n"
           "judging and output:\n"
           "  --slo ttft:MS,tpot:MS,e2e:MS   latency targets for goodput\n"
           "  --slo-attainment F        a sweep level passes when this fraction of requests\n"
           "                            succeeds within the SLO (0.95)\n"
           "  --price-per-hour USD      cost per 1M output tokens and per 1,000 requests\n"
           "  --sweep-concurrency LIST  run each concurrency, e.g. 1,2,4,8, and report the\n"
           "  --sweep-rate LIST         highest level meeting the SLO (or each rate)\n"
           "  --json FILE               every figure and the run's parameters\n"
           "  --json-requests           ... with one record per request\n"
           "  --interval S              figures per S seconds of a long run (\"intervals\" in\n"
           "                            the JSON, a line on stderr and a table on stdout)\n"
           "  --plot DIR                PNG charts through gnuplot: latency CDFs, sweep curves\n"
           "  --label TEXT              a name for this run in the report and charts\n"
           "  --quiet                   no progress line on stderr\n"
           "  --version, --help\n"
           "Ctrl-C stops the run and prints what finished; a second Ctrl-C quits at once.\n");
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "brisk-bench: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    exit(2);
}

static double parse_num(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v) || v < lo || v > hi)
        die_usage("%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
    return v;
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die_usage("%s: '%s' is not an integer in [%lld, %lld]", flag, s, lo, hi);
    return v;
}

static void parse_slo(const char *s, bench_slo *slo) {
    char buf[256];
    if (strlen(s) >= sizeof buf)
        die_usage("--slo: too long");
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon)
            die_usage("--slo: '%s' is not NAME:MS", tok);
        *colon = '\0';
        double v = parse_num("--slo", colon + 1, 1e-6, 1e9);
        if (!strcmp(tok, "ttft"))
            slo->ttft_ms = v;
        else if (!strcmp(tok, "tpot"))
            slo->tpot_ms = v;
        else if (!strcmp(tok, "e2e") || !strcmp(tok, "e2el"))
            slo->e2e_ms = v;
        else
            die_usage("--slo: unknown metric '%s' (ttft, tpot, e2e)", tok);
    }
}

static void parse_list(const char *flag, const char *s, int integers, bench_opts *o) {
    char buf[1024];
    if (strlen(s) >= sizeof buf)
        die_usage("%s: too long", flag);
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    o->n_sweep = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_sweep == BENCH_MAX_SWEEP)
            die_usage("%s: at most %d levels", flag, BENCH_MAX_SWEEP);
        o->sweep_levels[o->n_sweep++] =
            integers ? (double)parse_int(flag, tok, 1, 1000000) : parse_num(flag, tok, 1e-6, 1e9);
    }
    if (o->n_sweep == 0)
        die_usage("%s: no levels", flag);
}

static int has_ctl(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

static void parse_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->base_url = "http://127.0.0.1:8080";
    o->input_len = 128;
    o->output_len = 128;
    o->ignore_eos = 1;
    o->request_rate = INFINITY;
    o->burstiness = 1.0;
    o->num_prompts = 100;
    o->timeout_s = 600;
    o->slo_attainment = 0.95;
    const char *env_key = getenv("OPENAI_API_KEY");
    if (env_key && env_key[0])
        o->api_key = env_key;
    int have_prompts = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VAL() (i + 1 < argc ? argv[++i] : (die_usage("%s needs a value", a), ""))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
            printf("brisk-bench %s (commit %s)\n", BRISK_VERSION, BRISK_GIT_COMMIT);
            exit(0);
        } else if (!strcmp(a, "--base-url")) {
            o->base_url = VAL();
        } else if (!strcmp(a, "--api-key")) {
            o->api_key = VAL();
        } else if (!strcmp(a, "--model")) {
            o->model = VAL();
        } else if (!strcmp(a, "--endpoint")) {
            const char *v = VAL();
            if (!strcmp(v, "completions") || !strcmp(v, "/v1/completions"))
                o->chat = 0;
            else if (!strcmp(v, "chat") || !strcmp(v, "/v1/chat/completions"))
                o->chat = 1;
            else
                die_usage("--endpoint: '%s' is not completions or chat", v);
        } else if (!strcmp(a, "--input-len")) {
            o->input_len = (int)parse_int(a, VAL(), 1, 10000000);
        } else if (!strcmp(a, "--output-len")) {
            o->output_len = (int)parse_int(a, VAL(), 1, 10000000);
        } else if (!strcmp(a, "--range-ratio")) {
            o->range_ratio = parse_num(a, VAL(), 0, 0.999999);
        } else if (!strcmp(a, "--dataset")) {
            o->dataset = VAL();
        } else if (!strcmp(a, "--shared-prefix-len")) {
            o->shared_prefix_len = (int)parse_int(a, VAL(), 0, 10000000);
        } else if (!strcmp(a, "--temperature")) {
            o->temperature = parse_num(a, VAL(), 0, 100);
        } else if (!strcmp(a, "--no-ignore-eos")) {
            o->ignore_eos = 0;
        } else if (!strcmp(a, "--extra-body")) {
            o->extra_body = VAL();
        } else if (!strcmp(a, "--abort-rate")) {
            o->abort_rate = parse_num(a, VAL(), 0, 1);
        } else if (!strcmp(a, "--invalid-rate")) {
            o->invalid_rate = parse_num(a, VAL(), 0, 1);
        } else if (!strcmp(a, "--request-rate")) {
            const char *v = VAL();
            o->request_rate = !strcmp(v, "inf") ? INFINITY : parse_num(a, v, 1e-6, 1e9);
        } else if (!strcmp(a, "--burstiness")) {
            o->burstiness = parse_num(a, VAL(), 1e-3, 1e3);
        } else if (!strcmp(a, "--max-concurrency")) {
            o->max_concurrency = (int)parse_int(a, VAL(), 1, 1000000);
        } else if (!strcmp(a, "--num-prompts")) {
            o->num_prompts = parse_int(a, VAL(), 0, (long long)1 << 40);
            have_prompts = 1;
        } else if (!strcmp(a, "--duration")) {
            o->duration_s = parse_num(a, VAL(), 1e-3, 1e7);
        } else if (!strcmp(a, "--warmup")) {
            o->warmup = (int)parse_int(a, VAL(), 0, 1000000);
        } else if (!strcmp(a, "--seed")) {
            o->seed = (uint64_t)parse_int(a, VAL(), 0, INT64_MAX);
        } else if (!strcmp(a, "--timeout")) {
            o->timeout_s = parse_num(a, VAL(), 0, 1e7);
        } else if (!strcmp(a, "--slo")) {
            parse_slo(VAL(), &o->slo);
        } else if (!strcmp(a, "--slo-attainment")) {
            o->slo_attainment = parse_num(a, VAL(), 1e-6, 1);
        } else if (!strcmp(a, "--price-per-hour")) {
            o->price_per_hour = parse_num(a, VAL(), 0, 1e9);
        } else if (!strcmp(a, "--sweep-concurrency")) {
            o->sweep = BENCH_SWEEP_CONCURRENCY;
            parse_list(a, VAL(), 1, o);
        } else if (!strcmp(a, "--sweep-rate")) {
            o->sweep = BENCH_SWEEP_RATE;
            parse_list(a, VAL(), 0, o);
        } else if (!strcmp(a, "--json")) {
            o->json_path = VAL();
        } else if (!strcmp(a, "--json-requests")) {
            o->json_requests = 1;
        } else if (!strcmp(a, "--interval")) {
            o->interval_s = parse_num(a, VAL(), 0.01, 1e7);
        } else if (!strcmp(a, "--plot")) {
            o->plot_dir = VAL();
        } else if (!strcmp(a, "--label")) {
            o->label = VAL();
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o->quiet = 1;
        } else {
            die_usage("unknown option '%s'", a);
        }
#undef VAL
    }
    if (o->api_key && (!o->api_key[0] || has_ctl(o->api_key) || strlen(o->api_key) > 4096))
        die_usage("--api-key: 1 to 4096 printable characters");
    if (o->model && (!o->model[0] || strlen(o->model) >= sizeof o->model_buf))
        die_usage("--model: 1 to %zu characters", sizeof o->model_buf - 1);
    if (o->duration_s > 0 && !have_prompts)
        o->num_prompts = 0; /* --duration alone: as many as fit */
    if (o->num_prompts == 0 && o->duration_s <= 0)
        die_usage("--num-prompts 0 needs --duration");
    if (o->abort_rate + o->invalid_rate > 1 + 1e-9)
        die_usage("--abort-rate + --invalid-rate: %g is over 1", o->abort_rate + o->invalid_rate);
    int rate_sweep = o->sweep == BENCH_SWEEP_RATE;
    int conc_sweep = o->sweep == BENCH_SWEEP_CONCURRENCY;
    if (o->num_prompts == 0 && !isfinite(o->request_rate) && o->max_concurrency == 0 &&
        !rate_sweep && !conc_sweep)
        die_usage("an open-ended --duration run needs --request-rate or --max-concurrency");
}

/* More sockets than the default 1024: a run at concurrency 4096 needs them. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv) {
    bench_opts o;
    parse_args(argc, argv, &o);
    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN); /* a write to a reset socket must fail, not kill us */
    setvbuf(stdout, NULL, _IOLBF, 0);

    char err[512];
    bench_target tgt;
    if (bench_target_parse(o.base_url, &tgt, err, sizeof err) < 0 ||
        bench_target_resolve(&tgt, err, sizeof err) < 0) {
        fprintf(stderr, "brisk-bench: error: %s\n", err);
        return 1;
    }
    snprintf(o.path, sizeof o.path, "%.511s%s", tgt.prefix,
             o.chat ? "/chat/completions" : "/completions");
    snprintf(o.url, sizeof o.url, "http://%.290s%.600s", tgt.host_header, o.path);

    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        fprintf(stderr, "brisk-bench: error: cannot create the event loop\n");
        return 1;
    }
    bench_client *cl = bench_client_create(&loop, &tgt, o.api_key, err, sizeof err);
    if (!cl) {
        fprintf(stderr, "brisk-bench: error: %s\n", err);
        return 1;
    }
    int rc = 0;
    bench_workload w;
    int have_w = 0;
    bench_runner *r = NULL;
    bench_level_result *res = NULL;
    int n_res = 0;
    if (!o.model) {
        double t = o.timeout_s > 0 && o.timeout_s < 30 ? o.timeout_s : 30;
        if (bench_fetch_model(&loop, cl, tgt.prefix, t, o.model_buf, sizeof o.model_buf, err,
                              sizeof err) < 0) {
            fprintf(stderr, "brisk-bench: error: %s\n", err);
            rc = 1;
            goto out;
        }
        o.model = o.model_buf;
    }
    bench_workload_cfg wc = {
        o.chat,        o.model, o.input_len,   o.output_len, o.range_ratio, o.shared_prefix_len,
        o.dataset,     o.seed,  o.temperature, o.ignore_eos, o.extra_body,  o.abort_rate,
        o.invalid_rate};
    if (bench_workload_init(&w, &wc, err, sizeof err) < 0) {
        fprintf(stderr, "brisk-bench: error: %s\n", err);
        rc = 1;
        goto out;
    }
    have_w = 1;
    bench_run_cfg rcfg = {
        o.path,      o.chat, o.num_prompts, o.duration_s,     o.burstiness,
        o.timeout_s, o.seed, !o.quiet,      (size_t)64 << 20, /* 512 MiB of ITL samples at most */
        o.interval_s};
    r = bench_runner_create(&loop, cl, &w, &rcfg, 1);
    if (!r) {
        fprintf(stderr, "brisk-bench: error: out of memory\n");
        rc = 1;
        goto out;
    }
    int n_levels = o.sweep != BENCH_SWEEP_NONE ? o.n_sweep : 1;
    res = calloc((size_t)n_levels, sizeof *res);
    if (!res) {
        fprintf(stderr, "brisk-bench: error: out of memory\n");
        rc = 1;
        goto out;
    }
    /* Everything sent derives from --seed and nothing from the clock: the arrival
     * gaps (bench_run.c) and each request's prompt, lengths, abort and invalid
     * choice (bench_workload.c, by request index). Two runs with the same --seed
     * and --warmup send the same requests at the same offsets from their start
     * (bench/soak.sh relies on it): the warm-up takes the first indices and
     * calibrates the words per token of the prompts. */
    if (o.warmup > 0) {
        int c = o.sweep == BENCH_SWEEP_CONCURRENCY ? (int)o.sweep_levels[0] : o.max_concurrency;
        if (c <= 0 || c > o.warmup)
            c = o.warmup;
        char first[200];
        int ok = bench_runner_warmup(r, o.warmup, c, first, sizeof first);
        if (bench_runner_interrupted(r)) {
            rc = 130;
            goto out;
        }
        if (ok == 0) {
            fprintf(stderr, "brisk-bench: error: every warm-up request failed: %s\n", first);
            rc = 1;
            goto out;
        }
    }
    for (int i = 0; i < n_levels; i++) {
        bench_level lv = {o.max_concurrency, o.request_rate};
        if (o.sweep == BENCH_SWEEP_CONCURRENCY)
            lv.max_concurrency = (int)o.sweep_levels[i];
        else if (o.sweep == BENCH_SWEEP_RATE)
            lv.request_rate = o.sweep_levels[i];
        if (!o.quiet && o.sweep != BENCH_SWEEP_NONE)
            fprintf(stderr, "brisk-bench: level %d/%d: %s %g\n", i + 1, n_levels,
                    o.sweep == BENCH_SWEEP_RATE ? "request rate" : "concurrency",
                    o.sweep_levels[i]);
        /* The server's speculative decoding counters around the level. */
        double ts = o.timeout_s > 0 && o.timeout_s < 10 ? o.timeout_s : 10;
        bench_spec s0, s1;
        bench_fetch_spec(&loop, cl, ts, &s0);
        bench_runner_level(r, &lv, &res[i]);
        n_res++;
        bench_fetch_spec(&loop, cl, ts, &s1);
        if (s0.found && s1.found)
            res[i].spec = (bench_spec){1, s1.drafts - s0.drafts, s1.draft_tokens - s0.draft_tokens,
                                       s1.accepted - s0.accepted};
        if (bench_level_result_compute(&res[i], &o.slo, o.price_per_hour) < 0) {
            fprintf(stderr, "brisk-bench: error: out of memory computing metrics\n");
            rc = 1;
            goto out;
        }
        bench_report_table(stdout, &o, &res[i]);
        if (o.interval_s > 0)
            bench_report_intervals(stdout, &res[i]);
        if (bench_runner_interrupted(r))
            break;
    }
    int best = -1;
    if (o.sweep != BENCH_SWEEP_NONE) {
        best = bench_report_best(&o, res, n_res);
        bench_report_sweep(stdout, &o, res, n_res, best);
    }
    if (o.json_path && bench_report_json(o.json_path, &o, res, n_res, best, err, sizeof err) < 0) {
        fprintf(stderr, "brisk-bench: error: %s\n", err);
        rc = 1;
    }
    if (o.plot_dir && bench_report_plot(o.plot_dir, &o, res, n_res, err, sizeof err) < 0) {
        fprintf(stderr, "brisk-bench: error: plots: %s\n", err);
        rc = 1;
    }
    if (rc == 0) {
        /* Aborts and invalid requests answered 4xx went as planned too. */
        int64_t ok = 0;
        for (int i = 0; i < n_res; i++)
            ok += res[i].m.completed + res[i].m.aborted + res[i].m.invalid_ok;
        if (bench_runner_interrupted(r))
            rc = 130;
        else if (ok == 0)
            rc = 3; /* nothing succeeded: a script must not take this for a result */
    }
out:
    for (int i = 0; i < n_res; i++)
        bench_level_result_free(&res[i]);
    free(res);
    bench_runner_free(r);
    bench_client_free(cl);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        fprintf(stderr, "brisk-bench: warning: event loop not closed cleanly\n");
    if (have_w)
        bench_workload_free(&w);
    return rc;
}
