/* test_engine_spec.c - speculative decoding through the engine thread on a
 * real model (stories260K, whose text repeats itself: prompt lookup and
 * suffix matching find plenty): every request's tokens and log-probs, bit
 * for bit, and its finish equal the run without speculation, for ngram,
 * suffix and a draft model (the target itself, greedy and seeded with
 * deterministic proposals): greedy and seeded sampling with top-p and
 * penalties, log-probs (the position-by-position path), n = 2 forks, stop
 * strings, min_tokens, a pool small enough to preempt, a prefix-cache hit
 * after speculation; a draft model sampling (rejection sampling) gives the
 * same tokens twice with one seed; the counters add up; no KV block is
 * left behind. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kv/kv_cache.h"
#include "models/llama2c.h"
#include "scheduler/engine.h"
#include "stories_gguf.h"

#define MAX_OUT 256
/* A pool no scenario fills (4 MB: 400 blocks of stories260K's f16 K/V), so
 * that only the tight scenario preempts, whatever the timing. */
#define ROOMY (4LL << 20)

typedef struct result {
    int32_t ids[MAX_OUT];
    float lp[MAX_OUT];
    int n_tokens, done;
    sched_finish finish;
    char text[4096];
    size_t len;
} result;

static uv_loop_t loop;
static uv_async_t async;
static sched_engine *eng;
static result res[16];
static int n_target;

static void on_async(uv_async_t *a) {
    (void)a;
    if (!eng)
        return;
    for (sched_event *ev = sched_engine_drain(eng), *n; ev; ev = n) {
        n = ev->next;
        result *r = ev->user;
        for (int i = 0; i < ev->n_tokens && r->n_tokens < MAX_OUT; i++) {
            r->ids[r->n_tokens] = ev->tokens[i].id;
            r->lp[r->n_tokens++] = ev->tokens[i].logprob;
        }
        if (r->len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->len, ev->text, ev->text_len);
            r->len += ev->text_len;
        }
        if (ev->finish != SCHED_FINISH_NONE) {
            r->done = 1;
            r->finish = ev->finish;
        }
        sched_event_free(ev);
    }
    int all = 1;
    for (int i = 0; i < n_target; i++)
        all &= res[i].done;
    if (all && n_target)
        uv_stop(&loop);
}

/* One request of a scenario. */
typedef struct req {
    int n_prompt;
    const int32_t *prompt;
    int max_tokens;
    float temp, top_p, rep_pen, presence;
    uint64_t seed;
    int logprobs;
    const char *stop;
    int min_tokens;
    int fork_of; /* index + 1 of the request it forks, or 0 */
} req;

static const char *g_path;

static sched_engine *start(int max_seqs, long long kv_bytes, const sched_spec_config *spec) {
    char err[256];
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = g_path;
    cfg.weights = MODEL_WEIGHTS_F32;
    cfg.n_threads = 2;
    cfg.max_seqs = max_seqs;
    cfg.max_ctx = 320;
    cfg.max_batch_tokens = 64;
    cfg.kv_cache_bytes = kv_bytes;
    if (spec)
        cfg.spec = *spec;
    sched_engine *e = NULL;
    CHECK(sched_engine_create(&cfg, &async, &e, err, sizeof err) == 0, "create: %s", err);
    eng = e;
    while (e && sched_engine_state(e, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(e && sched_engine_state(e, err, sizeof err) == SCHED_READY, "ready: %s", err);
    return e;
}

/* Runs n requests at once on eng; results in res[0, n). */
static void run(const req *rq, int n) {
    for (int i = 0; i < 16; i++)
        memset(&res[i], 0, sizeof res[i]);
    n_target = n;
    for (int i = 0; i < n; i++) {
        sched_seq_params p;
        memset(&p, 0, sizeof p);
        p.prompt = malloc((size_t)rq[i].n_prompt * sizeof *p.prompt);
        memcpy(p.prompt, rq[i].prompt, (size_t)rq[i].n_prompt * sizeof *p.prompt);
        p.n_prompt = rq[i].n_prompt;
        p.max_tokens = rq[i].max_tokens;
        p.sampling = model_sampling_default();
        p.sampling.temperature = rq[i].temp;
        p.sampling.top_p = rq[i].top_p > 0 ? rq[i].top_p : 1.0f;
        p.sampling.repetition_penalty = rq[i].rep_pen > 0 ? rq[i].rep_pen : 1.0f;
        p.sampling.presence_penalty = rq[i].presence;
        p.sampling.pf_from = rq[i].n_prompt;
        p.sampling.seed = rq[i].seed;
        p.logprobs = rq[i].logprobs ? 3 : -1;
        p.ignore_eos = 1;
        p.min_tokens = rq[i].min_tokens;
        if (rq[i].min_tokens) {
            p.ignore_eos = 0;
            p.stop_ids = malloc(sizeof *p.stop_ids);
            p.stop_ids[0] = 13; /* "\n" in tok512: banned until min_tokens */
            p.n_stop_ids = 1;
        }
        if (rq[i].stop) {
            p.stop = malloc(sizeof *p.stop);
            p.stop[0] = strdup(rq[i].stop);
            p.n_stop = 1;
        }
        p.fork_of = rq[i].fork_of ? &res[rq[i].fork_of - 1] : NULL;
        p.user = &res[i];
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
}

static result base[16];

/* The scenario without speculation, then with spec: equal token for token. */
static void compare(const char *what, const req *rq, int n, int max_seqs, long long kv_bytes,
                    const sched_spec_config *spec, long long *accepted) {
    eng = start(max_seqs, kv_bytes, NULL);
    run(rq, n);
    memcpy(base, res, sizeof base);
    sched_engine_free(eng);
    eng = start(max_seqs, kv_bytes, spec);
    run(rq, n);
    for (int i = 0; i < n; i++) {
        CHECK(res[i].n_tokens == base[i].n_tokens && res[i].finish == base[i].finish,
              "%s %s req %d: %d tokens finish %d, without speculation %d finish %d", what,
              sched_spec_method_name(spec->method), i, res[i].n_tokens, res[i].finish,
              base[i].n_tokens, base[i].finish);
        int same = res[i].n_tokens == base[i].n_tokens &&
                   !memcmp(res[i].ids, base[i].ids, (size_t)res[i].n_tokens * sizeof(int32_t)) &&
                   !memcmp(res[i].lp, base[i].lp, (size_t)res[i].n_tokens * sizeof(float)) &&
                   res[i].len == base[i].len && !memcmp(res[i].text, base[i].text, res[i].len);
        CHECK(same, "%s %s req %d: tokens, log-probs or text differ", what,
              sched_spec_method_name(spec->method), i);
    }
    sched_engine_stats st;
    usleep(10000);
    sched_engine_get_stats(eng, &st);
    CHECK(st.kv.blocks_used == 0, "%s: %d blocks left", what, st.kv.blocks_used);
    long long per = 0;
    for (int p = 0; p < SCHED_SPEC_MAX_TOKENS; p++)
        per += st.spec.per_pos[p];
    CHECK(st.spec.enabled && st.spec.accepted_tokens == per &&
              st.spec.accepted_tokens <= st.spec.draft_tokens &&
              st.spec.drafts <= st.spec.draft_tokens,
          "%s: counters drafts %lld tokens %lld accepted %lld per-pos sum %lld", what,
          st.spec.drafts, st.spec.draft_tokens, st.spec.accepted_tokens, per);
    if (kv_bytes < ROOMY) /* the tight pool: speculation under preemption */
        CHECK(st.preemptions > 0, "%s: no preemption", what);
    *accepted += st.spec.accepted_tokens;
    sched_engine_free(eng);
    eng = NULL;
}

int main(void) {
    char dir[] = "/tmp/brisk-test-spec-XXXXXX", path[1100];
    int ready = bt_stories_gguf("test_engine_spec", dir, path, sizeof path);
    if (ready <= 0)
        return ready < 0;
    char err[256];
    g_path = path;
    uv_loop_init(&loop);
    uv_async_init(&loop, &async, on_async);

    /* Prompts: BOS alone (the golden story, which repeats its sentences),
     * and the story's first 80 tokens (so the continuation quotes it). */
    int32_t bos[1] = {1}, story[80];
    eng = start(4, 0, NULL);
    req r0 = {.n_prompt = 1, .prompt = bos, .max_tokens = 80};
    run(&r0, 1);
    CHECK_COND(res[0].n_tokens == 80);
    story[0] = 1;
    memcpy(story + 1, res[0].ids, 79 * sizeof *story);
    sched_engine_free(eng);
    eng = NULL;

    req greedy[] = {
        {.n_prompt = 1, .prompt = bos, .max_tokens = 200},
        {.n_prompt = 80, .prompt = story, .max_tokens = 150},
        {.n_prompt = 40, .prompt = story, .max_tokens = 120, .logprobs = 1},
        {.n_prompt = 60, .prompt = story, .max_tokens = 100, .stop = "didn't know"},
        {.n_prompt = 30, .prompt = story, .max_tokens = 90, .min_tokens = 40},
    };
    req sampled[] = {
        {.n_prompt = 80, .prompt = story, .max_tokens = 150, .temp = 0.8f, .seed = 7},
        {.n_prompt = 80,
         .prompt = story,
         .max_tokens = 120,
         .temp = 0.6f,
         .top_p = 0.9f,
         .seed = 8},
        {.n_prompt = 50,
         .prompt = story,
         .max_tokens = 120,
         .temp = 0.7f,
         .rep_pen = 1.1f,
         .presence = 0.3f,
         .seed = 9,
         .logprobs = 1},
        {.n_prompt = 1, .prompt = bos, .max_tokens = 150, .temp = 0.5f, .seed = 10},
    };
    req forks[] = {
        {.n_prompt = 80, .prompt = story, .max_tokens = 100, .temp = 0.7f, .seed = 21},
        {.n_prompt = 80,
         .prompt = story,
         .max_tokens = 100,
         .temp = 0.7f,
         .seed = 22,
         .fork_of = 1},
        {.n_prompt = 70, .prompt = story, .max_tokens = 100},
        {.n_prompt = 70, .prompt = story, .max_tokens = 100, .fork_of = 3},
    };
    /* 8 sequences of up to 80 + 150 positions in a 40-block pool (640
     * positions): preemptions, proposals at block boundaries. */
    req tight[8];
    for (int i = 0; i < 8; i++)
        tight[i] = (req){.n_prompt = 20 + 7 * i,
                         .prompt = story,
                         .max_tokens = 150,
                         .temp = i % 2 ? 0.7f : 0.0f,
                         .seed = 100 + (uint64_t)i};
    long long block_bytes = (long long)kv_cache_pool_bytes_dtype(5, 32, 16, 1, 1); /* f16 */

    sched_spec_method methods[] = {SCHED_SPEC_NGRAM, SCHED_SPEC_SUFFIX, SCHED_SPEC_DRAFT};
    for (int m = 0; m < 3; m++) {
        sched_spec_config sc = sched_spec_config_default();
        sc.method = methods[m];
        sc.num_tokens = 6;
        sc.lookup_min = 2;
        sc.lookup_max = 4;
        sc.max_batch_tokens = 64; /* speculate whatever the batch: the test is exactness */
        sc.fixed_len = 1;
        if (sc.method == SCHED_SPEC_DRAFT)
            sc.draft_model = path; /* the target as its own draft: a perfect proposer */
        long long acc = 0;
        compare("greedy", greedy, 5, 4, ROOMY, &sc, &acc);
        if (sc.method != SCHED_SPEC_DRAFT) { /* a sampling draft differs by design */
            compare("sampled", sampled, 4, 4, ROOMY, &sc, &acc);
            compare("forks", forks, 4, 4, ROOMY, &sc, &acc);
            compare("tight pool", tight, 8, 8, 40 * block_bytes, &sc, &acc);
        }
        CHECK(acc > 100, "%s: %lld tokens accepted in all", sched_spec_method_name(sc.method), acc);
        printf("test_engine_spec: %s: %lld proposed tokens kept, outputs unchanged\n",
               sched_spec_method_name(sc.method), acc);
    }

    /* A draft model sampling: rejection sampling, reproducible with its seed. */
    sched_spec_config sc = sched_spec_config_default();
    sc.method = SCHED_SPEC_DRAFT;
    sc.num_tokens = 4;
    sc.max_batch_tokens = 64;
    sc.fixed_len = 1;
    sc.draft_model = path;
    /* One request at a time: the proposal lengths (and so the draws) then
     * depend on the request alone (spec_verify.h). */
    result first[4], again[4];
    for (int rep = 0; rep < 2; rep++) {
        eng = start(4, 0, &sc);
        for (int i = 0; i < 4; i++) {
            run(&sampled[i], 1);
            (rep == 0 ? first : again)[i] = res[0];
        }
        sched_engine_stats st;
        sched_engine_get_stats(eng, &st);
        /* the target drafting for itself: p == q, every proposal kept */
        CHECK(st.spec.draft_tokens > 0 && st.spec.accepted_tokens == st.spec.draft_tokens,
              "self-draft sampling: %lld of %lld kept", st.spec.accepted_tokens,
              st.spec.draft_tokens);
        sched_engine_free(eng);
        eng = NULL;
    }
    for (int i = 0; i < 4; i++)
        CHECK(first[i].n_tokens == again[i].n_tokens &&
                  !memcmp(first[i].ids, again[i].ids, (size_t)again[i].n_tokens * sizeof(int32_t)),
              "draft sampling req %d: a second run with the seed differs", i);

    /* A draft whose vocabulary differs is refused at load, naming the token. */
    sc.draft_model = "/nonexistent/draft.gguf";
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = path;
    cfg.spec = sc;
    sched_engine *e = NULL;
    CHECK_COND(sched_engine_create(&cfg, &async, &e, err, sizeof err) == 0);
    eng = e;
    while (sched_engine_state(e, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(sched_engine_state(e, err, sizeof err) == SCHED_FAILED && strstr(err, "draft"),
          "a missing draft: %s", err);
    sched_engine_free(e);
    eng = NULL;

    uv_close((uv_handle_t *)&async, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    unlink(path);
    rmdir(dir);
    return BT_SUMMARY("test_engine_spec");
}
