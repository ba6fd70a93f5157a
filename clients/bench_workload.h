/* bench_workload.h - what brisk-bench sends and when: a seeded random number
 * generator, request bodies (random prompts with chosen lengths, a JSONL
 * dataset, a shared system prompt) and arrival gaps (Poisson or gamma).
 *
 * Pure and deterministic: request i's body depends only on the seed and i
 * (and the calibration), never on the order requests are sent in. */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

/* xoshiro256**, seeded through splitmix64. */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;

void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng *r);
double bench_rng_uniform(bench_rng *r);                           /* [0, 1) */
int64_t bench_rng_range(bench_rng *r, int64_t lo, int64_t hi);    /* [lo, hi]; lo <= hi */
double bench_rng_gamma(bench_rng *r, double shape, double scale); /* shape, scale > 0 */

/* The gap before the next arrival, in seconds, as vLLM draws it: gamma with
 * shape = burstiness and scale = 1 / (rate * burstiness), so the mean is
 * 1 / rate; burstiness 1 is a Poisson process, < 1 burstier, > 1 steadier.
 * rate <= 0 or infinite: 0 (everything at once). */
double bench_arrival_gap(bench_rng *r, double rate, double burstiness);

/* Lengths like vLLM's random dataset: uniform integers in
 * [floor(len * (1 - ratio)), floor(len * (1 + ratio))], at least min. */
int bench_sample_len(bench_rng *r, int len, double ratio, int min);

/* What a request is for. Most are ordinary; --abort-rate and --invalid-rate
 * make a seeded fraction of them requests the client aborts on purpose, or
 * deliberately invalid requests that a correct server answers with a 4xx. */
typedef enum { BENCH_REQ_NORMAL = 0, BENCH_REQ_ABORT, BENCH_REQ_INVALID } bench_req_kind;

/* The ways an invalid request is invalid, each a quarter of them. */
typedef enum {
    BENCH_INVALID_BAD_JSON = 0, /* the body cut short at a random byte: not JSON */
    BENCH_INVALID_RANGE,        /* max_tokens 0, top_p 1.5 or temperature -1 */
    BENCH_INVALID_MODEL,        /* a model no server serves */
    BENCH_INVALID_TYPE,         /* max_tokens or temperature a string */
    BENCH_INVALID_N
} bench_invalid_kind;

/* "bad_json", "out_of_range", "unknown_model", "wrong_type" (static). */
const char *bench_invalid_name(int kind);

/* The model name of BENCH_INVALID_MODEL requests. */
#define BENCH_INVALID_MODEL_NAME "brisk-bench-no-such-model"

/* An abort request is aborted before the response head (as soon as the
 * request is written) one time in BENCH_ABORT_HEAD_ONE_IN; otherwise after k
 * content events, k uniform in [0, output length): k = 0 aborts at the
 * response head, before the first token. */
#define BENCH_ABORT_HEAD_ONE_IN 4

typedef struct bench_workload_cfg {
    int chat;                 /* 1: /v1/chat/completions bodies, else /v1/completions */
    const char *model;        /* "model" field; NULL leaves it out. Borrowed. */
    int input_len;            /* random workload: prompt tokens asked (>= 1) */
    int output_len;           /* random workload: max_tokens (>= 1) */
    double range_ratio;       /* [0, 1) */
    int shared_prefix_len;    /* tokens of one system prompt every request starts with (0: none) */
    const char *dataset_path; /* JSONL of {"prompt": str, "output_len": int}; NULL: random */
    uint64_t seed;
    double temperature;
    int ignore_eos;         /* send "ignore_eos": true so outputs have max_tokens tokens */
    const char *extra_body; /* a JSON object merged into every body, or NULL. Borrowed. */
    double abort_rate;      /* fraction of requests aborted on purpose, [0, 1] */
    double invalid_rate;    /* fraction of requests made invalid on purpose, [0, 1]; the
                               two rates sum to at most 1 */
} bench_workload_cfg;

typedef struct bench_item {
    char *prompt;
    int output_len;
} bench_item;

/* Owns every pointer. */
typedef struct bench_workload {
    bench_workload_cfg cfg;
    bench_item *items; /* the dataset, [n_items] */
    size_t n_items;
    char *prefix; /* the shared system prompt, or NULL */
    int prefix_words;
    double tokens_per_word; /* 1 until bench_workload_calibrate() */
    void *extra;            /* cJSON object parsed from cfg.extra_body, or NULL */
} bench_workload;

/* One request body. json is malloc'd (the caller frees it). */
typedef struct bench_body {
    char *json;
    size_t len;
    int expected_out;    /* max_tokens */
    int words;           /* random workload: words in the prompt(s); 0 for a dataset */
    int64_t in_estimate; /* prompt tokens we expect, used when the server sends no usage */
    int kind;            /* bench_req_kind */
    int abort_at;        /* BENCH_REQ_ABORT: -1 before the response head, else after this
                            many content events (0: at the head); 0 otherwise */
    int invalid;         /* BENCH_REQ_INVALID: bench_invalid_kind; 0 otherwise */
} bench_body;

/* Loads the dataset (if any), parses extra_body and builds the prefix.
 * Returns 0 or a negative BRISK_E* code with a one-line message in err. */
int bench_workload_init(bench_workload *w, const bench_workload_cfg *cfg, char *err,
                        size_t err_len);
void bench_workload_free(bench_workload *w);

/* Body of request `index` (warm-up requests use indices from
 * BENCH_WARMUP_INDEX up). Its kind, abort point and invalid variant depend
 * only on the seed and the index, drawn from a stream of their own, so the
 * prompt of request i is the same whatever the rates; warm-up requests are
 * always normal. Returns 0 or BRISK_ENOMEM. */
#define BENCH_WARMUP_INDEX ((uint64_t)1 << 62)
int bench_workload_body(bench_workload *w, uint64_t index, bench_body *out);

/* Random prompts are built from common English words, each one token in the
 * usual BPE vocabularies. Other tokenizers split them differently; given the
 * words sent and the prompt tokens the server counted (usage) over the
 * warm-up requests, later prompts use input_len / (tokens per word) words so
 * they come out at about input_len tokens. Rebuilds the shared prefix. */
void bench_workload_calibrate(bench_workload *w, int64_t words, int64_t tokens);

#endif
