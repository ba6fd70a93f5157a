/* test_engine.c - the engine thread on a real model (stories260K): the
 * golden greedy text through the engine, alone and with concurrent
 * sequences (batching must not change a token), stop strings across token
 * boundaries, cancellation, log-probs, max_tokens, the waiting-queue cap;
 * then the paged KV cache under pressure: 16 different prompts batched give
 * each one's solo tokens, a pool for about 4 sequences runs 16 with
 * preemptions and unchanged outputs, prefix-cache reuse, forks (n > 1) with
 * seeded sampling equal to solo runs, and KV blocks freed by cancellation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "kv/kv_cache.h"
#include "models/llama2c.h"
#include "moe_model.h"
#include "scheduler/engine.h"
#include "stories_gguf.h"
#include "tiny_model.h"

static const char *GOLDEN =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
    "She said, \"I want to play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what "
    "to do.\"\nLily didn't want to help her mom, so she";

typedef struct result {
    char *text;
    size_t len;
    int n_tokens, n_events, done;
    sched_finish finish;
    int completion_len;
    int lp_ok;
    float *emb; /* a pooling sequence's embedding */
    int n_emb;
    int stop_index; /* the final event's: the stop string that ended it, or -1 */
} result;

static uv_loop_t loop;
static uv_async_t async;
static sched_engine *eng;
static result res[32];
static int n_done_target;

static void on_async(uv_async_t *a) {
    (void)a;
    if (!eng)
        return; /* a wake-up left over from an engine already freed */
    for (sched_event *ev = sched_engine_drain(eng), *n; ev; ev = n) {
        n = ev->next;
        result *r = ev->user;
        r->text = realloc(r->text, r->len + ev->text_len + 1);
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
        r->text[r->len] = '\0';
        r->n_tokens += ev->n_tokens;
        r->n_events++;
        for (int i = 0; i < ev->n_tokens; i++) {
            const sched_token *t = &ev->tokens[i];
            if (t->n_top > 0) {
                int ok = t->logprob <= 1e-6f && t->top_logprob[0] >= t->logprob - 1e-6f;
                for (int k = 1; k < t->n_top; k++)
                    ok &= t->top_logprob[k] <= t->top_logprob[k - 1];
                r->lp_ok &= ok;
            }
        }
        if (ev->embedding) {
            free(r->emb);
            r->emb = ev->embedding;
            r->n_emb = ev->n_embedding;
            ev->embedding = NULL;
        }
        if (ev->finish != SCHED_FINISH_NONE) {
            r->done = 1;
            r->finish = ev->finish;
            r->completion_len = ev->completion_len;
            r->stop_index = ev->stop_index;
        }
        sched_event_free(ev);
    }
    int all = 1;
    for (int i = 0; i < n_done_target; i++)
        all &= res[i].done;
    if (all && n_done_target)
        uv_stop(&loop);
}

static sched_seq_params params(int32_t *prompt, int n, int max_tokens, result *user) {
    sched_seq_params p;
    memset(&p, 0, sizeof p);
    p.prompt = malloc((size_t)n * sizeof *p.prompt);
    memcpy(p.prompt, prompt, (size_t)n * sizeof *p.prompt);
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.sampling = model_sampling_default();
    p.sampling.temperature = 0;
    p.logprobs = -1;
    p.ignore_eos = 1;
    p.user = user;
    return p;
}

static void reset(int n) {
    for (int i = 0; i < 32; i++) {
        free(res[i].text);
        free(res[i].emb);
        memset(&res[i], 0, sizeof res[i]);
        res[i].lp_ok = 1;
    }
    n_done_target = n;
}

static void run_until_done(void) {
    uv_run(&loop, UV_RUN_DEFAULT);
}

static char **stops(const char *a, const char *b) {
    char **s = malloc(2 * sizeof *s);
    s[0] = strdup(a);
    s[1] = b ? strdup(b) : NULL;
    return s;
}

static kern_kv_dtype g_kv_dtype;                        /* start_engine: the KV cache dtype */
static model_weights_fmt g_weights = MODEL_WEIGHTS_F32; /* start_engine: the weights */

static sched_engine *start_engine(const char *path, int max_seqs, long long kv_bytes, int mbt) {
    char err[256];
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = path;
    cfg.weights = g_weights;
    cfg.n_threads = 2;
    cfg.max_seqs = max_seqs;
    cfg.max_ctx = 256;
    cfg.max_batch_tokens = mbt;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.kv_dtype = g_kv_dtype;
    sched_engine *e = NULL;
    CHECK(sched_engine_create(&cfg, &async, &e, err, sizeof err) == 0, "create: %s", err);
    eng = e; /* on_async drains the current engine */
    while (e && sched_engine_state(e, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(e && sched_engine_state(e, err, sizeof err) == SCHED_READY, "ready: %s", err);
    return e;
}

/* 16 different prompts (a BOS then pseudo-random tokens of varied lengths). */
static int prompt16(int i, int32_t *out) {
    int n = 1 + (i * 7) % 23;
    out[0] = 1;
    for (int k = 1; k < n; k++)
        out[k] = 3 + (i * 131 + k * 57) % 500;
    return n;
}

/* Runs the 16 prompts (greedy, 120 tokens; seeded when temp > 0) on eng and
 * returns their texts (malloc'd). */
static void run16(char **out, float temp) {
    reset(16);
    for (int i = 0; i < 16; i++) {
        int32_t pr[32];
        int n = prompt16(i, pr);
        sched_seq_params p = params(pr, n, 120, &res[i]);
        p.sampling.temperature = temp;
        p.sampling.seed = 1000 + (uint64_t)i;
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    run_until_done();
    for (int i = 0; i < 16; i++) {
        out[i] = res[i].text ? strdup(res[i].text) : strdup("");
        CHECK(res[i].finish == SCHED_FINISH_LENGTH && res[i].n_tokens == 120,
              "seq %d: finish %d, %d tokens", i, res[i].finish, res[i].n_tokens);
    }
}

/* Batch invariance through the engine on the model at path (layers, KV
 * width and head size given for the pool's arithmetic) with the cache in
 * g_kv_dtype: 16 prompts alone == together == in a pool so small that they
 * preempt one another (also seeded), a prefix-cache hit, 4 forks == their
 * solo runs. stories: the file is stories260K (its golden text is checked
 * with an f16 cache too). */
static void test_paged(const char *path, int n_layers, int kv_dim, int head_dim, int stories) {
    char *solo[16], *batched[16], *tight[16];
    /* Each prompt alone (one sequence at a time). */
    eng = NULL; /* the previous engine was freed */
    eng = start_engine(path, 1, 0, 64);
    for (int i = 0; i < 16; i++) {
        reset(1);
        int32_t pr[32];
        int n = prompt16(i, pr);
        sched_seq_params p = params(pr, n, 120, &res[0]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
        run_until_done();
        solo[i] = strdup(res[0].text ? res[0].text : "");
    }
    sched_engine_free(eng);
    eng = NULL;
    /* All 16 at once: the same tokens (batch invariance). */
    eng = start_engine(path, 16, 0, 64);
    run16(batched, 0);
    sched_engine_stats st;
    sched_engine_get_stats(eng, &st);
    CHECK(st.preemptions == 0 && st.kv.blocks_used == 0,
          "roomy pool: %lld preemptions, %d blocks left", st.preemptions, st.kv.blocks_used);
    for (int i = 0; i < 16; i++)
        CHECK(!strcmp(solo[i], batched[i]), "prompt %d batched differs", i);

    /* Cancelling frees every block in the step: 8 long ones, cancelled mid-way. */
    reset(8);
    for (int i = 0; i < 8; i++) {
        int32_t pr[32];
        int n = prompt16(i, pr);
        sched_seq_params p = params(pr, n, 250, &res[i]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    while (res[0].n_tokens < 5)
        uv_run(&loop, UV_RUN_ONCE);
    for (int i = 0; i < 8; i++)
        sched_engine_cancel(eng, &res[i]);
    run_until_done();
    usleep(20000);
    sched_engine_get_stats(eng, &st);
    CHECK(st.kv.blocks_used == 0 && st.running == 0, "after cancel: %d blocks used",
          st.kv.blocks_used);
    sched_engine_free(eng);
    eng = NULL;

    /* A pool of 40 blocks (640 positions) for 16 sequences needing up to 9
     * blocks each: preemptions, and still every sequence's solo tokens. */
    long long block_bytes =
        (long long)kv_cache_pool_bytes_kv(g_kv_dtype, n_layers, kv_dim, head_dim, 16, 1);
    eng = start_engine(path, 16, 40 * block_bytes, 64);
    run16(tight, 0);
    sched_engine_get_stats(eng, &st);
    CHECK(st.kv.blocks_total == 40 && st.preemptions > 0, "tight pool: %d blocks, %lld preemptions",
          st.kv.blocks_total, st.preemptions);
    for (int i = 0; i < 16; i++)
        CHECK(!strcmp(solo[i], tight[i]), "prompt %d differs after preemption", i);
    printf(
        "test_engine: 16 sequences in a 40-block pool: %lld preemptions, all outputs unchanged\n",
        st.preemptions);
    for (int i = 0; i < 16; i++) {
        free(batched[i]);
        free(tight[i]);
    }
    /* Seeded sampling under preemption: equal to the roomy pool's. */
    run16(tight, 0.9f);
    sched_engine_free(eng);
    eng = NULL;
    eng = start_engine(path, 16, 0, 64);
    run16(batched, 0.9f);
    for (int i = 0; i < 16; i++)
        CHECK(!strcmp(batched[i], tight[i]), "seeded prompt %d differs", i);

    /* Prefix cache: a 100-token prompt, then the same prompt again. */
    int32_t longp[100];
    for (int k = 0; k < 100; k++)
        longp[k] = k ? 3 + (k * 37) % 500 : 1;
    sched_engine_get_stats(eng, &st);
    long long hits0 = st.kv.prefix_hits;
    for (int rep = 0; rep < 2; rep++) {
        reset(1);
        sched_seq_params p = params(longp, 100, 10, &res[0]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
        run_until_done();
    }
    sched_engine_get_stats(eng, &st);
    CHECK(st.kv.prefix_hits - hits0 == 96, "prefix hits %lld (want 6 blocks = 96)",
          st.kv.prefix_hits - hits0);

    /* Forks: 4 seeded choices of one prompt share its blocks and each equals
     * the same seed run alone. */
    reset(4);
    for (int j = 0; j < 4; j++) {
        sched_seq_params p = params(longp, 45, 60, &res[j]);
        p.sampling.temperature = 0.9f;
        p.sampling.seed = 77 + (uint64_t)j;
        p.fork_of = j ? &res[0] : NULL;
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    run_until_done();
    char *forked[4];
    for (int j = 0; j < 4; j++)
        forked[j] = strdup(res[j].text ? res[j].text : "");
    for (int j = 0; j < 4; j++) {
        reset(1);
        sched_seq_params p = params(longp, 45, 60, &res[0]);
        p.sampling.temperature = 0.9f;
        p.sampling.seed = 77 + (uint64_t)j;
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
        run_until_done();
        CHECK(!strcmp(forked[j], res[0].text ? res[0].text : ""),
              "fork %d differs from its solo run", j);
        free(forked[j]);
    }
    CHECK(strcmp(res[0].text ? res[0].text : "", solo[0]) != 0, "%s",
          "sanity: seeded differs from greedy");
    sched_engine_get_stats(eng, &st);
    CHECK(st.kv.blocks_used == 0, "blocks left %d", st.kv.blocks_used);
    sched_engine_free(eng);
    eng = NULL;

    for (int i = 0; !stories && i < 16; i++) {
        free(solo[i]);
        free(batched[i]);
        free(tight[i]);
    }
    if (!stories)
        return;
    /* An f16 KV cache (half the memory) keeps the golden greedy text. */
    g_kv_dtype = KERN_KV_F16;
    eng = start_engine(path, 4, 0, 64);
    reset(1);
    int32_t bos = 1;
    sched_seq_params p = params(&bos, 1, 200, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    run_until_done();
    CHECK(res[0].text && strcmp(res[0].text, GOLDEN) == 0, "f16 KV golden: got '%s'", res[0].text);
    sched_engine_free(eng);
    eng = NULL;
    g_kv_dtype = KERN_KV_F32;
    for (int i = 0; i < 16; i++) {
        free(solo[i]);
        free(batched[i]);
        free(tight[i]);
    }
}

int main(void) {
    char dir[] = "/tmp/brisk-test-engine-XXXXXX", path[1100];
    int ready = bt_stories_gguf("test_engine", dir, path, sizeof path);
    if (ready <= 0)
        return ready < 0;
    char err[256];

    uv_loop_init(&loop);
    uv_async_init(&loop, &async, on_async);
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = path;
    cfg.weights = MODEL_WEIGHTS_F32;
    cfg.n_threads = 2;
    cfg.max_seqs = 4;
    cfg.max_ctx = 256;
    cfg.max_batch_tokens = 16; /* small: prompts are chunked */
    cfg.max_waiting = 8;
    cfg.max_waiting_tokens = 200;
    CHECK(sched_engine_create(&cfg, &async, &eng, err, sizeof err) == 0, "create: %s", err);
    while (sched_engine_state(eng, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(sched_engine_state(eng, err, sizeof err) == SCHED_READY, "ready: %s", err);
    CHECK_COND(sched_engine_max_ctx(eng) == 256);

    int32_t bos = 1;
    /* 1. The golden, alone. */
    reset(1);
    sched_seq_params p = params(&bos, 1, 200, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    run_until_done();
    CHECK(res[0].text && strcmp(res[0].text, GOLDEN) == 0, "golden alone: got '%s'", res[0].text);
    CHECK(res[0].finish == SCHED_FINISH_LENGTH && res[0].completion_len == 200 &&
              res[0].n_tokens == 200,
          "finish %d, %d tokens", res[0].finish, res[0].n_tokens);

    /* 2. Six at once (4 slots, 2 wait), with log-probs on some, prompts of
     * different lengths in the same batches: the BOS ones match the golden. */
    reset(6);
    int32_t longp[40];
    for (int i = 0; i < 40; i++)
        longp[i] = 3 + (i * 37) % 500;
    longp[0] = 1;
    for (int i = 0; i < 6; i++) {
        p = i % 2 ? params(longp, 20 + i * 3, 50, &res[i]) : params(&bos, 1, 200, &res[i]);
        p.logprobs = i == 2 ? 5 : -1;
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    run_until_done();
    for (int i = 0; i < 6; i += 2)
        CHECK(res[i].text && strcmp(res[i].text, GOLDEN) == 0, "golden batched %d: '%s'", i,
              res[i].text);
    for (int i = 1; i < 6; i += 2)
        CHECK(res[i].n_tokens == 50, "seq %d: %d tokens", i, res[i].n_tokens);
    CHECK_COND(res[2].lp_ok);

    /* 3. Stop strings: "little girl" spans tokens; the text ends before it. */
    reset(2);
    p = params(&bos, 1, 200, &res[0]);
    p.stop = stops("little girl", NULL);
    p.n_stop = 1;
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    p = params(&bos, 1, 200, &res[1]);
    p.stop = stops("zzz", "park.");
    p.n_stop = 2;
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    run_until_done();
    CHECK(res[0].finish == SCHED_FINISH_STOP &&
              !strcmp(res[0].text, "Once upon a time, there was a "),
          "stop 1: '%s'", res[0].text);
    CHECK(res[1].finish == SCHED_FINISH_STOP &&
              !strcmp(res[1].text,
                      "Once upon a time, there was a little girl named Lily. She loved to play "
                      "outside in the "),
          "stop 2: '%s'", res[1].text);
    /* The final event names the string that matched (the second of stop 2's). */
    CHECK(res[0].stop_index == 0 && res[1].stop_index == 1, "stop_index %d, %d", res[0].stop_index,
          res[1].stop_index);

    /* 4. Cancellation: one running, one waiting; each gets one ABORT. */
    reset(6);
    for (int i = 0; i < 6; i++) {
        p = params(&bos, 1, 250, &res[i]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    sched_engine_cancel(eng, &res[0]);
    sched_engine_cancel(eng, &res[5]);
    run_until_done();
    CHECK(res[0].finish == SCHED_FINISH_ABORT && res[5].finish == SCHED_FINISH_ABORT,
          "aborts %d %d", res[0].finish, res[5].finish);
    CHECK(res[1].finish == SCHED_FINISH_LENGTH && res[1].n_tokens == 250, "others run on");
    CHECK(res[1].stop_index == -1, "no stop string ended a LENGTH sequence: %d", res[1].stop_index);

    /* 4b. A stale cancel: the server cancels a choice whose final event is
     * already on its way (the client went away meanwhile), frees the request
     * once that event is drained, and the next request's choice can get the
     * same address. Here the first sequence has ended and its event is
     * drained when the cancel is sent, and a new sequence with the same user
     * pointer follows at once: it must run to its end, however the engine
     * interleaves the two (an engine matching cancels by pointer alone
     * stopped it: a 200 stream with no tokens). */
    int stale_ok = 0;
    for (int rep = 0; rep < 40; rep++) {
        reset(1);
        p = params(&bos, 1, 2, &res[0]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
        run_until_done();
        sched_engine_cancel(eng, &res[0]);
        reset(1);
        p = params(&bos, 1, 8, &res[0]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
        run_until_done();
        stale_ok += res[0].finish == SCHED_FINISH_LENGTH && res[0].n_tokens == 8;
    }
    CHECK(stale_ok == 40, "a stale cancel stopped %d of 40 later requests", 40 - stale_ok);

    /* 4c. Pooling sequences (embeddings). Causal attention makes the state
     * at position k depend on tokens 0..k only, so the mean over a prompt
     * equals the mean of the last-token states of its prefixes: the engine
     * against itself, through chunked prefill (16 tokens a step) and the
     * prefix cache (LAST may reuse blocks, MEAN may not). Submitted 4 at a
     * time: the engine lets 8 wait. */
    {
        enum { NP = 23 };
        int32_t pr[NP];
        for (int i = 0; i < NP; i++)
            pr[i] = i ? 3 + (i * 53) % 500 : 1;
        float *embs[NP + 2] = {0};
        int dim = -1, ok = 1;
        for (int k0 = 0; k0 < NP + 2; k0 += 4) {
            int n = NP + 2 - k0 < 4 ? NP + 2 - k0 : 4;
            reset(n);
            for (int j = 0; j < n; j++) {
                int k = k0 + j; /* k < NP: LAST of pr[0..k]; NP: MEAN; NP + 1: LAST again */
                p = params(pr, k < NP ? k + 1 : NP, 1, &res[j]);
                p.pooling = k == NP ? SCHED_POOL_MEAN : SCHED_POOL_LAST;
                CHECK_COND(sched_engine_submit(eng, &p) == 0);
            }
            run_until_done();
            for (int j = 0; j < n; j++) {
                if (dim < 0)
                    dim = res[j].n_emb;
                ok &= res[j].finish == SCHED_FINISH_STOP && res[j].n_emb == dim && dim > 0 &&
                      res[j].n_tokens == 0 && res[j].completion_len == 0;
                embs[k0 + j] = res[j].emb;
                res[j].emb = NULL;
            }
        }
        CHECK(ok, "pooling: every sequence ends with an embedding of %d floats", dim);
        double worst = 0, norm = 0;
        for (int d = 0; ok && d < dim; d++) {
            double m = 0;
            for (int k = 0; k < NP; k++)
                m += embs[k][d];
            m /= NP;
            worst = fmax(worst, fabs(m - embs[NP][d]));
            norm += m * m;
        }
        CHECK(ok && norm > 0 && worst < 1e-5 * fmax(1.0, sqrt(norm)),
              "MEAN = mean of the prefixes' LAST: worst %g", worst);
        CHECK(ok && !memcmp(embs[NP + 1], embs[NP - 1], (size_t)dim * sizeof(float)),
              "LAST after prefix-cache reuse: the same bits");
        for (int k = 0; k < NP + 2; k++)
            free(embs[k]);
        p = params(pr, 4, 1, &res[0]);
        p.pooling = 3; /* cls: not served */
        CHECK_COND(sched_engine_submit(eng, &p) == BRISK_EUNSUPPORTED);
        sched_seq_params_free(&p);
    }

    /* 5. The waiting-tokens cap (200): a 201-token prompt is refused, a
     * 200-token one runs (timing-independent, unlike the count cap). */
    int32_t *toks = calloc(256, sizeof *toks);
    for (int i = 0; i < 256; i++)
        toks[i] = 3 + i;
    reset(1);
    p = params(toks, 201, 10, &res[1]);
    CHECK_COND(sched_engine_submit(eng, &p) == BRISK_ENOSPC);
    sched_seq_params_free(&p);
    p = params(toks, 200, 10, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    run_until_done();
    CHECK(res[0].finish == SCHED_FINISH_LENGTH && res[0].n_tokens == 10, "200-token prompt");
    free(toks);
    /* A prompt that leaves no room, and bad arguments. */
    int32_t *huge = calloc(256, sizeof *huge);
    p = params(huge, 256, 10, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == BRISK_ERANGE);
    sched_seq_params_free(&p);
    free(huge);
    p = params(&bos, 1, 0, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == BRISK_EINVAL);
    sched_seq_params_free(&p);

    sched_engine_stats stats;
    sched_engine_get_stats(eng, &stats);
    CHECK(stats.running == 0 && stats.waiting == 0 && stats.generation_tokens > 1000,
          "stats %d %d %lld", stats.running, stats.waiting, stats.generation_tokens);

    /* 6. Freeing with work in flight drops it cleanly. */
    reset(0);
    for (int i = 0; i < 3; i++) {
        p = params(&bos, 1, 250, &res[i]);
        sched_engine_submit(eng, &p);
    }
    sched_engine_free(eng);
    eng = NULL;
    reset(0);
    test_paged(path, 5, 32, 8, 1);
    if (BT_TSAN) {
        /* The repeats below change the numbers, not the threads. */
        printf("test_engine: under TSan the quantized KV caches and the MoE model are left to "
               "the Release and ASan passes\n");
        goto done;
    }
    /* The quantized dtypes of the CPU on a model whose heads hold their
     * 32-value groups (stories260K's are 8 wide): every invariance above. */
    char tiny[1100];
    snprintf(tiny, sizeof tiny, "%s/tiny.gguf", dir);
    CHECK(tiny_model_write(tiny, 3, 4, 2, 32, 0, err, sizeof err) == 0, "tiny: %s", err);
    const kern_kv_dtype quant[] = {KERN_KV_Q8_0, KERN_KV_Q4_0};
    for (int i = 0; i < 2; i++) {
        g_kv_dtype = quant[i];
        test_paged(tiny, 3, 64, 32, 0);
        printf("test_engine: %s KV cache: batching, preemption, prefix hits and forks unchanged\n",
               kern_kv_dtype_name(quant[i]));
    }
    g_kv_dtype = KERN_KV_F32;
    unlink(tiny);
    /* A mixture of experts (qwen3moe, 8 experts of 64, top 2, stored q4_0,
     * run as int8 in the X8 layout): the experts grouped over whichever
     * sequences share a step, and still every sequence's solo tokens. */
    char moe[1100];
    snprintf(moe, sizeof moe, "%s/moe.gguf", dir);
    moe_spec ms = {"qwen3moe", 2, 4, 2, 32, 8, 2, 64, KERN_TYPE_Q4_0, -1, M_NONE};
    uint8_t *img = NULL;
    size_t img_len = 0;
    FILE *f = moe_image(&ms, &img, &img_len) == 0 ? fopen(moe, "wb") : NULL;
    CHECK(f && fwrite(img, 1, img_len, f) == img_len, "writing the MoE model");
    if (f)
        fclose(f);
    free(img);
    g_weights = MODEL_WEIGHTS_INT8;
    test_paged(moe, 2, 64, 32, 0);
    printf("test_engine: qwen3moe (8 experts, top 2): batching, preemption, prefix hits and "
           "forks unchanged\n");
    g_weights = MODEL_WEIGHTS_F32;
    unlink(moe);
done:
    uv_close((uv_handle_t *)&async, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    reset(0);
    unlink(path);
    rmdir(dir);
    return BT_SUMMARY("test_engine");
}
