/* test_engine_mask.c - grammar masks computed off the engine step
 * (scheduler/engine_mask.h) on a real model (stories260K): the same
 * constrained and plain sequences, greedy and seeded, with log-probs, run
 * with the masks computed by the engine itself (no workers), by a worker,
 * and by a worker with every mask held back one or three steps (each row sits
 * out and is sampled later from its kept logits), in a batch of four and
 * with two slots (queueing), give the same tokens, log-probs and finishes;
 * the step trace shows that rows did sit out. A grammar whose state
 * outgrows its limit ends its sequence with an error marked grammar_cost,
 * however its masks were computed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/llama2c.h"
#include "scheduler/engine.h"
#include "stories_gguf.h"

#define N_SEQ 5

typedef struct result {
    char text[2048];
    size_t len;
    int32_t ids[256];
    float lps[256];
    int n_tokens, done, grammar_cost;
    sched_finish finish;
} result;

static uv_loop_t loop;
static uv_async_t async;
static sched_engine *eng;
static result res[N_SEQ];
static int n_target;

static void on_async(uv_async_t *a) {
    (void)a;
    if (!eng)
        return;
    for (sched_event *ev = sched_engine_drain(eng), *n; ev; ev = n) {
        n = ev->next;
        result *r = ev->user;
        if (r->len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->len, ev->text, ev->text_len);
            r->len += ev->text_len;
        }
        for (int i = 0; i < ev->n_tokens && r->n_tokens < 256; i++, r->n_tokens++) {
            r->ids[r->n_tokens] = ev->tokens[i].id;
            r->lps[r->n_tokens] = ev->tokens[i].logprob;
        }
        if (ev->finish != SCHED_FINISH_NONE) {
            r->done = 1;
            r->finish = ev->finish;
            r->grammar_cost = ev->grammar_cost;
        }
        sched_event_free(ev);
    }
    int all = 1;
    for (int i = 0; i < n_target; i++)
        all &= res[i].done;
    if (all)
        uv_stop(&loop);
}

static model_grammar *compile(const char *text) {
    model_grammar *g = NULL;
    char err[256];
    CHECK(model_grammar_compile(text, strlen(text), NULL, &g, err, sizeof err) == 0, "%s", err);
    return g;
}

/* One sequence: prompt "Once" (BOS, 2 tokens), max_tokens, the grammar (a
 * reference is taken), temperature and seed, log-probs or -1. */
static void submit(int i, const char *grammar, int max_tokens, float temp, int seed, int lp) {
    sched_seq_params p;
    memset(&p, 0, sizeof p);
    p.prompt = malloc(2 * sizeof *p.prompt);
    p.prompt[0] = 1;   /* BOS */
    p.prompt[1] = 403; /* "Once" in tok512 */
    p.n_prompt = 2;
    p.max_tokens = max_tokens;
    p.sampling = model_sampling_default();
    p.sampling.temperature = temp;
    p.sampling.seed = (uint64_t)seed;
    p.logprobs = lp;
    p.ignore_eos = grammar == NULL;
    p.grammar = grammar ? compile(grammar) : NULL;
    p.user = &res[i];
    CHECK(sched_engine_submit(eng, &p) == 0, "submit %d", i);
}

/* Counts the rows that sat out in a step trace. */
static long count_parked(const char *path, long *unparked) {
    FILE *f = fopen(path, "r");
    long parked = 0, up = 0;
    char line[2048];
    while (f && fgets(line, sizeof line, f)) {
        const char *a = strstr(line, "\"parked\":"), *b = strstr(line, "\"unparked\":");
        parked += a ? atol(a + 9) : 0;
        up += b ? atol(b + 11) : 0;
    }
    if (f)
        fclose(f);
    *unparked = up;
    return parked;
}

static const char *SENTENCE = "root ::= \"Once\" ( \" \" [a-z]{2,8} ){10,14} \".\"";
static const char *RECORD =
    "root ::= \"{\" pair ( \", \" pair ){0,3} \"}\"\npair ::= [a-z]{1,6} \": \" [0-9]{1,3}";

/* Runs the five sequences on an engine with these mask settings; results in
 * res[]. trace: a step-trace path or NULL. */
static void run_set(const char *gguf, int workers, int delay, int max_seqs, const char *trace) {
    memset(res, 0, sizeof res);
    n_target = N_SEQ;
    sched_engine_config cfg = sched_engine_config_default();
    cfg.model_path = gguf;
    cfg.weights = MODEL_WEIGHTS_F32;
    cfg.n_threads = 2;
    cfg.max_seqs = max_seqs;
    cfg.max_ctx = 256;
    cfg.max_batch_tokens = 64;
    cfg.mask_workers = workers;
    cfg.mask_delay_steps = delay;
    cfg.step_trace = trace;
    char err[256];
    CHECK(sched_engine_create(&cfg, &async, &eng, err, sizeof err) == 0, "create: %s", err);
    while (sched_engine_state(eng, NULL, 0) == SCHED_LOADING)
        uv_run(&loop, UV_RUN_ONCE);
    submit(0, SENTENCE, 80, 0, 0, -1);
    submit(1, SENTENCE, 80, 0.9f, 7, -1);
    submit(2, RECORD, 60, 1.0f, 3, 2);
    submit(3, NULL, 40, 0, 0, -1);
    submit(4, RECORD, 60, 0, 0, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    sched_engine *e = eng;
    eng = NULL;
    sched_engine_free(e);
}

static int same(const result *a, const result *b) {
    return a->len == b->len && !memcmp(a->text, b->text, a->len) && a->n_tokens == b->n_tokens &&
           !memcmp(a->ids, b->ids, (size_t)a->n_tokens * sizeof *a->ids) &&
           !memcmp(a->lps, b->lps, (size_t)a->n_tokens * sizeof *a->lps) && a->finish == b->finish;
}

int main(void) {
    char dir[] = "/tmp/brisk-test-engine-mask-XXXXXX", path[1100];
    char trace[1100];
    int ready = bt_stories_gguf("test_engine_mask", dir, path, sizeof path);
    if (ready <= 0)
        return ready < 0;
    char err[256];
    uv_loop_init(&loop);
    uv_async_init(&loop, &async, on_async);

    /* 1. The reference: the engine computes every mask itself when it samples. */
    result ref[N_SEQ];
    snprintf(trace, sizeof trace, "%s/ref.jsonl", dir);
    run_set(path, 0, 0, 4, trace);
    memcpy(ref, res, sizeof ref);
    long unparked = 0;
    CHECK(count_parked(trace, &unparked) == 0, "no workers: no row sits out");
    for (int i = 0; i < N_SEQ; i++)
        CHECK(ref[i].done && ref[i].n_tokens > 3 && ref[i].finish != SCHED_FINISH_ERROR,
              "reference %d: %d tokens, finish %s ('%.*s')", i, ref[i].n_tokens,
              sched_finish_name(ref[i].finish), (int)ref[i].len, ref[i].text);
    for (int i = 0; i < N_SEQ; i++)
        printf("reference %d: %d tokens: %.*s\n", i, ref[i].n_tokens, (int)ref[i].len, ref[i].text);
    CHECK(ref[0].finish == SCHED_FINISH_STOP && ref[0].text[ref[0].len - 1] == '.',
          "the sentence ends where its grammar does: '%.*s'", (int)ref[0].len, ref[0].text);

    /* 2. Workers, masks late or not, a full batch or two slots: the same. */
    static const struct {
        int workers, delay, max_seqs;
    } sets[] = {{1, 0, 4}, {1, 1, 4}, {2, 3, 4}, {1, 1, 2}, {0, 2, 4}};
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        snprintf(trace, sizeof trace, "%s/set%zu.jsonl", dir, k);
        run_set(path, sets[k].workers, sets[k].delay, sets[k].max_seqs, trace);
        for (int i = 0; i < N_SEQ; i++)
            CHECK(same(&res[i], &ref[i]),
                  "workers %d, masks %d steps late, %d slots: sequence %d as the reference "
                  "('%.*s' / '%.*s')",
                  sets[k].workers, sets[k].delay, sets[k].max_seqs, i, (int)res[i].len, res[i].text,
                  (int)ref[i].len, ref[i].text);
        long parked = count_parked(trace, &unparked);
        printf("workers %d, masks %d steps late, %d slots: %ld rows sat out\n", sets[k].workers,
               sets[k].delay, sets[k].max_seqs, parked);
        if (sets[k].delay > 0)
            CHECK(parked > 0 && unparked > 0, "masks %d steps late: %ld rows sat out, %ld resumed",
                  sets[k].delay, parked, unparked);
    }

    /* 3. A grammar whose state grows without bound (every split of the
     * letters into runs is a parse stack) ends with a grammar_cost error,
     * whether the engine or a worker hits the limit. */
    for (int workers = 0; workers <= 1; workers++) {
        memset(res, 0, sizeof res);
        n_target = 1;
        sched_engine_config cfg = sched_engine_config_default();
        cfg.model_path = path;
        cfg.weights = MODEL_WEIGHTS_F32;
        cfg.n_threads = 2;
        cfg.max_seqs = 2;
        cfg.max_ctx = 256;
        cfg.mask_workers = workers;
        CHECK(sched_engine_create(&cfg, &async, &eng, err, sizeof err) == 0, "create: %s", err);
        while (sched_engine_state(eng, NULL, 0) == SCHED_LOADING)
            uv_run(&loop, UV_RUN_ONCE);
        submit(0, "root ::= ( [a-z]{1,90} ){1,90}", 200, 0, 0, -1);
        uv_run(&loop, UV_RUN_DEFAULT);
        CHECK(res[0].finish == SCHED_FINISH_ERROR && res[0].grammar_cost,
              "workers %d: finish %s, grammar_cost %d after %d tokens", workers,
              sched_finish_name(res[0].finish), res[0].grammar_cost, res[0].n_tokens);
        sched_engine *e = eng;
        eng = NULL;
        sched_engine_free(e);
    }

    uv_close((uv_handle_t *)&async, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("test_engine_mask: could not remove %s\n", dir);
    return BT_SUMMARY("test_engine_mask");
}
