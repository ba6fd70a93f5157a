/* test_engine.c - the engine thread on a real model (stories260K): the
 * golden greedy text through the engine, alone and with concurrent
 * sequences (batching must not change a token), stop strings across token
 * boundaries, cancellation, log-probs, max_tokens, the waiting-queue cap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/llama2c.h"
#include "scheduler/engine.h"

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
} result;

static uv_loop_t loop;
static uv_async_t async;
static sched_engine *eng;
static result res[16];
static int n_done_target;

static void on_async(uv_async_t *a) {
    (void)a;
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
                for (int k = 1; k < t->n_top; k++) ok &= t->top_logprob[k] <= t->top_logprob[k - 1];
                r->lp_ok &= ok;
            }
        }
        if (ev->finish != SCHED_FINISH_NONE) {
            r->done = 1;
            r->finish = ev->finish;
            r->completion_len = ev->completion_len;
        }
        sched_event_free(ev);
    }
    int all = 1;
    for (int i = 0; i < n_done_target; i++) all &= res[i].done;
    if (all && n_done_target) uv_stop(&loop);
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
    for (int i = 0; i < 16; i++) {
        free(res[i].text);
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

int main(void) {
    char src[1024], tok[1024], dir[] = "/tmp/brisk-test-engine-XXXXXX", path[1100];
    snprintf(src, sizeof src, "%s/models/stories260K.bin", bt_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", bt_shared_dir());
    if (access(src, R_OK) != 0) {
        printf("test_engine: SKIP: %s not found (set BRISK_SHARED_DIR)\n", src);
        return 0;
    }
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
    char err[256];
    CHECK(model_convert_llama2c(src, tok, path, err, sizeof err) == 0, "convert: %s", err);

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
    while (sched_engine_state(eng, NULL, 0) == SCHED_LOADING) uv_run(&loop, UV_RUN_ONCE);
    CHECK(sched_engine_state(eng, err, sizeof err) == SCHED_READY, "ready: %s", err);
    CHECK_COND(sched_engine_max_ctx(eng) == 256);

    int32_t bos = 1;
    /* 1. The golden, alone. */
    reset(1);
    sched_seq_params p = params(&bos, 1, 200, &res[0]);
    CHECK_COND(sched_engine_submit(eng, &p) == 0);
    run_until_done();
    CHECK(res[0].text && strcmp(res[0].text, GOLDEN) == 0, "golden alone: got '%s'", res[0].text);
    CHECK(res[0].finish == SCHED_FINISH_LENGTH && res[0].completion_len == 200 && res[0].n_tokens == 200,
          "finish %d, %d tokens", res[0].finish, res[0].n_tokens);

    /* 2. Six at once (4 slots, 2 wait), with log-probs on some, prompts of
     * different lengths in the same batches: the BOS ones match the golden. */
    reset(6);
    int32_t longp[40];
    for (int i = 0; i < 40; i++) longp[i] = 3 + (i * 37) % 500;
    longp[0] = 1;
    for (int i = 0; i < 6; i++) {
        p = i % 2 ? params(longp, 20 + i * 3, 50, &res[i]) : params(&bos, 1, 200, &res[i]);
        p.logprobs = i == 2 ? 5 : -1;
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    run_until_done();
    for (int i = 0; i < 6; i += 2)
        CHECK(res[i].text && strcmp(res[i].text, GOLDEN) == 0, "golden batched %d: '%s'", i, res[i].text);
    for (int i = 1; i < 6; i += 2) CHECK(res[i].n_tokens == 50, "seq %d: %d tokens", i, res[i].n_tokens);
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
    CHECK(res[0].finish == SCHED_FINISH_STOP && !strcmp(res[0].text, "Once upon a time, there was a "),
          "stop 1: '%s'", res[0].text);
    CHECK(res[1].finish == SCHED_FINISH_STOP &&
              !strcmp(res[1].text, "Once upon a time, there was a little girl named Lily. She loved to play "
                                   "outside in the "),
          "stop 2: '%s'", res[1].text);

    /* 4. Cancellation: one running, one waiting; each gets one ABORT. */
    reset(6);
    for (int i = 0; i < 6; i++) {
        p = params(&bos, 1, 250, &res[i]);
        CHECK_COND(sched_engine_submit(eng, &p) == 0);
    }
    sched_engine_cancel(eng, &res[0]);
    sched_engine_cancel(eng, &res[5]);
    run_until_done();
    CHECK(res[0].finish == SCHED_FINISH_ABORT && res[5].finish == SCHED_FINISH_ABORT, "aborts %d %d",
          res[0].finish, res[5].finish);
    CHECK(res[1].finish == SCHED_FINISH_LENGTH && res[1].n_tokens == 250, "others run on");

    /* 5. The waiting-tokens cap (200): a 201-token prompt is refused, a
     * 200-token one runs (timing-independent, unlike the count cap). */
    int32_t *toks = calloc(256, sizeof *toks);
    for (int i = 0; i < 256; i++) toks[i] = 3 + i;
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
    CHECK(stats.running == 0 && stats.waiting == 0 && stats.generation_tokens > 1000, "stats %d %d %lld",
          stats.running, stats.waiting, stats.generation_tokens);

    /* 6. Freeing with work in flight drops it cleanly. */
    reset(0);
    for (int i = 0; i < 3; i++) {
        p = params(&bos, 1, 250, &res[i]);
        sched_engine_submit(eng, &p);
    }
    sched_engine_free(eng);
    uv_close((uv_handle_t *)&async, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    reset(0);
    unlink(path);
    rmdir(dir);
    return BT_SUMMARY("test_engine");
}
