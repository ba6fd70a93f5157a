/* test_fault_engine.c - the engine's per-sequence work with each of its
 * allocations failing in turn, on stories260K. One workload - a sequence with
 * log-probs of its prompt and output and a stop string, a seeded fork of it
 * (n > 1), and a sequence cancelled as soon as it is submitted - runs once
 * counting the allocations it makes through brisk_alloc.h (submit, the
 * sequence records, token histories, samplers, stop-string state, events,
 * cancel messages), then once for every N = 1..total with the N-th failing.
 *
 * Every run must end cleanly: a submit that fails returns BRISK_ENOMEM and
 * the sequence never produces an event; every submitted sequence gets
 * exactly one final event, which is its reference result, or ERROR after
 * text that is a prefix of the reference; the cancelled one ends ABORT (or,
 * when the cancel message itself could not be allocated, runs to its
 * length); afterwards nothing runs or waits and no KV block is in use.
 * LeakSanitizer checks the memory at exit (the ASan build has the injector).
 *
 * SKIP without -DBRISK_FAULT_INJECT or without the model. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "models/llama2c.h"
#include "scheduler/engine.h"
#include "stories_gguf.h"

#define N_SEQ 3
#define RUN_TIMEOUT_MS 30000 /* a lost final event shows as a hung run */

typedef struct result {
    int submitted;
    char text[4096];
    size_t len;
    int n_tokens, n_final, completion_len;
    sched_finish finish;
} result;

static uv_loop_t loop;
static uv_async_t async;
static uv_timer_t timer;
static sched_engine *eng;
static result res[N_SEQ];
static int timed_out;

static int all_done(void) {
    for (int i = 0; i < N_SEQ; i++)
        if (res[i].submitted && res[i].n_final == 0)
            return 0;
    return 1;
}

static void on_async(uv_async_t *a) {
    (void)a;
    for (sched_event *ev = sched_engine_drain(eng), *n; ev; ev = n) {
        n = ev->next;
        result *r = ev->user;
        size_t room = sizeof r->text - 1 - r->len;
        size_t k = ev->text_len < room ? ev->text_len : room;
        if (k) /* a final event that ends in an error may have no text */
            memcpy(r->text + r->len, ev->text, k);
        r->len += k;
        r->text[r->len] = '\0';
        r->n_tokens += ev->n_tokens;
        if (ev->finish != SCHED_FINISH_NONE) {
            r->n_final++;
            r->finish = ev->finish;
            r->completion_len = ev->completion_len;
        }
        sched_event_free(ev);
    }
    if (all_done())
        uv_stop(&loop);
}

static void on_timeout(uv_timer_t *t) {
    (void)t;
    timed_out = 1;
    uv_stop(&loop);
}

/* A params struct the engine may own: every pointer from plain malloc. */
static sched_seq_params params(const int32_t *prompt, int n, int max_tokens, result *user) {
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

static void submit(sched_seq_params *p, result *r) {
    int rc = sched_engine_submit(eng, p);
    CHECK(rc == 0 || rc == BRISK_ENOMEM, "submit: rc %d", rc);
    if (rc < 0)
        sched_seq_params_free(p); /* a failed submit leaves ownership here */
    r->submitted = rc == 0;
}

/* The workload; returns once every submitted sequence has ended (or the
 * run timed out) and the engine is idle again. */
static void run_workload(void) {
    memset(res, 0, sizeof res);
    timed_out = 0;
    static const int32_t prompt[] = {1, 403, 89, 300, 28, 415};
    int np = (int)(sizeof prompt / sizeof prompt[0]);
    /* 0: greedy, log-probs of the output (top 2) and of the prompt, a stop string */
    sched_seq_params p = params(prompt, np, 24, &res[0]);
    p.logprobs = 2;
    p.prompt_logprobs = 1;
    p.n_stop = 1;
    p.stop = malloc(sizeof *p.stop);
    p.stop[0] = strdup("zzz never");
    submit(&p, &res[0]);
    /* 1: a seeded fork of 0's prompt */
    p = params(prompt, np, 24, &res[1]);
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 7;
    p.fork_of = &res[0];
    submit(&p, &res[1]);
    /* 2: cancelled at once */
    static const int32_t bos = 1;
    p = params(&bos, 1, 40, &res[2]);
    submit(&p, &res[2]);
    if (res[2].submitted)
        sched_engine_cancel(eng, &res[2]);
    uv_timer_start(&timer, on_timeout, RUN_TIMEOUT_MS, 0);
    if (!all_done())
        uv_run(&loop, UV_RUN_DEFAULT);
    uv_timer_stop(&timer);
}

/* Polls the engine's published stats until idle (they follow each step). */
static int engine_idle(void) {
    for (int i = 0; i < 2000; i++) {
        sched_engine_stats st;
        sched_engine_get_stats(eng, &st);
        if (st.running == 0 && st.waiting == 0 && st.kv.blocks_used == 0)
            return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void check_run(const result *ref, const char *spec) {
    CHECK(!timed_out, "%s: a final event never came", spec);
    for (int i = 0; i < N_SEQ; i++) {
        const result *r = &res[i];
        if (!r->submitted) {
            CHECK(r->n_final == 0 && r->len == 0, "%s seq %d: events after a failed submit", spec,
                  i);
            continue;
        }
        CHECK(r->n_final == 1, "%s seq %d: %d final events", spec, i, r->n_final);
        if (i == 2) {
            /* ABORT, or the whole length when the cancel was lost */
            CHECK(r->finish == SCHED_FINISH_ABORT || r->finish == SCHED_FINISH_ERROR ||
                      (r->finish == SCHED_FINISH_LENGTH && r->completion_len == 40),
                  "%s cancelled seq: finish %d after %d tokens", spec, r->finish,
                  r->completion_len);
            continue;
        }
        if (r->finish == SCHED_FINISH_ERROR) {
            CHECK(r->len <= ref[i].len && !memcmp(r->text, ref[i].text, r->len),
                  "%s seq %d: text before the error is not the reference's start: '%s'", spec, i,
                  r->text);
            continue;
        }
        CHECK(r->finish == ref[i].finish && r->len == ref[i].len && !strcmp(r->text, ref[i].text) &&
                  r->n_tokens == ref[i].n_tokens,
              "%s seq %d: finish %d, %d tokens, '%s'; want finish %d, %d tokens, '%s'", spec, i,
              r->finish, r->n_tokens, r->text, ref[i].finish, ref[i].n_tokens, ref[i].text);
    }
    CHECK(engine_idle(), "%s: the engine is not idle afterwards", spec);
}

int main(void) {
    if (!brisk_fault_compiled()) {
        printf("test_fault_engine: SKIP: built without -DBRISK_FAULT_INJECT\n");
        return 0;
    }
    char dir[] = "/tmp/brisk-test-fault-engine-XXXXXX", path[1100];
    int ready = bt_stories_gguf("test_fault_engine", dir, path, sizeof path);
    if (ready <= 0)
        return ready < 0;
    char err[256];
    brisk_log_set_level(BRISK_LOG_ERROR);

    uv_loop_init(&loop);
    uv_async_init(&loop, &async, on_async);
    uv_timer_init(&loop, &timer);
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = path;
    cfg.weights = MODEL_WEIGHTS_F32;
    cfg.n_threads = 2;
    cfg.max_seqs = 4;
    cfg.max_ctx = 128;
    cfg.max_batch_tokens = 8; /* the prompt takes a step or two */
    CHECK(sched_engine_create(&cfg, &async, &eng, err, sizeof err) == 0, "create: %s", err);
    while (eng && sched_engine_state(eng, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    CHECK(eng && sched_engine_state(eng, err, sizeof err) == SCHED_READY, "ready: %s", err);
    if (!eng || sched_engine_state(eng, NULL, 0) != SCHED_READY)
        return BT_SUMMARY("test_fault_engine");

    /* The reference, counting allocations. */
    CHECK(brisk_fault_configure("count", err, sizeof err) == 0, "%s", err);
    brisk_fault_arm(1);
    run_workload();
    brisk_fault_arm(0);
    unsigned long total = brisk_fault_seen();
    static result ref[N_SEQ];
    memcpy(ref, res, sizeof res);
    CHECK(!timed_out && ref[0].n_final == 1 && ref[1].n_final == 1 && ref[2].n_final == 1,
          "reference run did not finish");
    CHECK(ref[0].finish == SCHED_FINISH_LENGTH && ref[0].n_tokens == 24 && ref[0].len > 0,
          "reference seq 0: finish %d, %d tokens", ref[0].finish, ref[0].n_tokens);
    CHECK(ref[1].finish == SCHED_FINISH_LENGTH && ref[1].n_tokens == 24, "reference seq 1");
    CHECK(total > 20, "only %lu allocations counted", total);
    CHECK(engine_idle(), "not idle after the reference");

    int n_error = 0, n_submit_failed = 0, n_same = 0;
    for (unsigned long n = 1; n <= total; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "nth:%lu", n);
        CHECK(brisk_fault_configure(spec, err, sizeof err) == 0, "%s", err);
        brisk_fault_arm(1);
        run_workload();
        brisk_fault_arm(0);
        check_run(ref, spec);
        for (int i = 0; i < 2; i++) {
            n_submit_failed += !res[i].submitted;
            n_error += res[i].submitted && res[i].finish == SCHED_FINISH_ERROR;
            n_same += res[i].submitted && res[i].finish == ref[i].finish &&
                      !strcmp(res[i].text, ref[i].text);
        }
        if (timed_out)
            break; /* the engine is stuck: later runs would only time out too */
    }
    printf("  %lu allocations; over the runs: %d failed submits, %d errors, %d unchanged\n", total,
           n_submit_failed, n_error, n_same);
    brisk_fault_configure("off", NULL, 0);

    sched_engine_free(eng);
    eng = NULL;
    uv_close((uv_handle_t *)&async, NULL);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    unlink(path);
    rmdir(dir);
    return BT_SUMMARY("test_fault_engine");
}
