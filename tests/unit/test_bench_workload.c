/* test_bench_workload.c - what brisk-bench sends and when: arrival gaps
 * (Poisson and gamma: mean 1/rate, squared coefficient of variation
 * 1/burstiness), lengths as vLLM's random dataset draws them, request bodies
 * (fields, determinism, shared prefix, chat, extra fields, calibration),
 * aborted and invalid requests (--abort-rate, --invalid-rate) and JSONL
 * datasets, good and bad. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "clients/bench_workload.h"
#include "common/brisk_error.h"

static void moments(bench_rng *r, double rate, double k, int n, double *mean, double *cv2) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double g = bench_arrival_gap(r, rate, k);
        s += g;
        s2 += g * g;
    }
    *mean = s / n;
    double var = s2 / n - *mean * *mean;
    *cv2 = var / (*mean * *mean);
}

static void test_arrivals(void) {
    bench_rng r;
    bench_rng_seed(&r, 1);
    const double ks[] = {0.25, 1.0, 4.0};
    for (int i = 0; i < 3; i++) {
        double mean, cv2;
        moments(&r, 10.0, ks[i], 400000, &mean, &cv2);
        CHECK(fabs(mean - 0.1) < 0.002, "burstiness %g: mean gap %g, want 0.1", ks[i], mean);
        CHECK(fabs(cv2 - 1.0 / ks[i]) < 0.06 / ks[i], "burstiness %g: CV^2 %g, want %g", ks[i], cv2,
              1.0 / ks[i]);
    }
    CHECK(bench_arrival_gap(&r, INFINITY, 1) == 0 && bench_arrival_gap(&r, 0, 1) == 0,
          "infinite rate: no gaps");
    double g = bench_arrival_gap(&r, 5, 0); /* a bad burstiness falls back to Poisson */
    CHECK(g >= 0 && isfinite(g), "gap %g", g);

    bench_rng a, b;
    bench_rng_seed(&a, 42);
    bench_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= bench_rng_next(&a) == bench_rng_next(&b);
    CHECK(same, "same seed, same numbers");
}

static void test_lengths(void) {
    bench_rng r;
    bench_rng_seed(&r, 7);
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 20000; i++) {
        int v = bench_sample_len(&r, 100, 0.5, 1);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CHECK(lo == 50 && hi == 150, "ratio 0.5 of 100: [%d, %d], want [50, 150]", lo, hi);
    int fixed = 1;
    for (int i = 0; i < 100; i++)
        fixed &= bench_sample_len(&r, 128, 0, 1) == 128;
    CHECK(fixed, "ratio 0: fixed");
    int min_ok = 1;
    for (int i = 0; i < 1000; i++)
        min_ok &= bench_sample_len(&r, 1, 0.9, 1) >= 1;
    CHECK(min_ok, "never below the minimum");
    int64_t v = bench_rng_range(&r, 5, 5);
    CHECK(v == 5, "a one-value range");
}

static int count_words(const char *s) {
    int n = 0, in = 0;
    for (; *s; s++) {
        int sp = *s == ' ';
        if (!sp && !in)
            n++;
        in = !sp;
    }
    return n;
}

static bench_workload_cfg base_cfg(void) {
    bench_workload_cfg c;
    memset(&c, 0, sizeof c);
    c.model = "m";
    c.input_len = 32;
    c.output_len = 16;
    c.seed = 3;
    c.ignore_eos = 1;
    return c;
}

static cJSON *body(bench_workload *w, uint64_t i, bench_body *b) {
    CHECK(bench_workload_body(w, i, b) == 0, "body %llu", (unsigned long long)i);
    cJSON *j = cJSON_Parse(b->json);
    CHECK(j != NULL && strlen(b->json) == b->len, "body is JSON");
    return j;
}

static void test_bodies(void) {
    bench_workload w;
    char err[256];
    bench_workload_cfg c = base_cfg();
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "init: %s", err);
    bench_body b1, b2, b3;
    cJSON *j = body(&w, 0, &b1);
    const cJSON *p = cJSON_GetObjectItem(j, "prompt");
    CHECK(cJSON_IsString(p) && count_words(p->valuestring) == 32, "32 words");
    CHECK(cJSON_GetObjectItem(j, "max_tokens")->valueint == 16 && b1.expected_out == 16,
          "max_tokens");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "model")->valuestring, "m"), "model");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "stream")), "stream");
    CHECK(cJSON_IsTrue(
              cJSON_GetObjectItem(cJSON_GetObjectItem(j, "stream_options"), "include_usage")),
          "include_usage");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "ignore_eos")), "ignore_eos");
    CHECK(cJSON_GetObjectItem(j, "temperature")->valuedouble == 0, "temperature");
    CHECK(b1.words == 32 && b1.in_estimate == 32, "words %d", b1.words);
    cJSON_Delete(j);
    cJSON_Delete(body(&w, 0, &b2));
    cJSON_Delete(body(&w, 1, &b3));
    CHECK(!strcmp(b1.json, b2.json), "same index, same body");
    CHECK(strcmp(b1.json, b3.json) != 0, "another index, another prompt");
    free(b1.json);
    free(b2.json);
    free(b3.json);

    /* Calibration: a tokenizer that makes 2 tokens of every word. */
    bench_workload_calibrate(&w, 1000, 2000);
    j = body(&w, 5, &b1);
    CHECK(count_words(cJSON_GetObjectItem(j, "prompt")->valuestring) == 16, "calibrated: 16 words");
    cJSON_Delete(j);
    free(b1.json);
    bench_workload_calibrate(&w, 10, 100000); /* absurd: ignored */
    CHECK(w.tokens_per_word == 2.0, "absurd calibration ignored");
    bench_workload_free(&w);

    /* Range ratio: lengths vary, inside the range. */
    c.range_ratio = 0.5;
    bench_workload_init(&w, &c, err, sizeof err);
    int lo = 1 << 30, hi = 0;
    for (uint64_t i = 0; i < 300; i++) {
        bench_body b;
        bench_workload_body(&w, i, &b);
        lo = b.expected_out < lo ? b.expected_out : lo;
        hi = b.expected_out > hi ? b.expected_out : hi;
        free(b.json);
    }
    CHECK(lo >= 8 && hi <= 24 && lo < hi, "output lengths in [8, 24]: [%d, %d]", lo, hi);
    bench_workload_free(&w);
}

static void test_prefix_chat_extra(void) {
    bench_workload w;
    char err[256];
    bench_workload_cfg c = base_cfg();
    c.shared_prefix_len = 50;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "init");
    bench_body b1, b2;
    cJSON *j1 = body(&w, 1, &b1), *j2 = body(&w, 2, &b2);
    const char *p1 = cJSON_GetObjectItem(j1, "prompt")->valuestring;
    const char *p2 = cJSON_GetObjectItem(j2, "prompt")->valuestring;
    CHECK(w.prefix && !strncmp(p1, w.prefix, strlen(w.prefix)) &&
              !strncmp(p2, w.prefix, strlen(w.prefix)),
          "both prompts start with the prefix");
    CHECK(count_words(p1) == 82 && b1.words == 82 && b1.in_estimate == 82, "50 + 32 words: %d",
          count_words(p1));
    CHECK(strcmp(p1, p2) != 0, "their own parts differ");
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    free(b1.json);
    free(b2.json);
    bench_workload_free(&w);

    c.chat = 1;
    c.extra_body = "{\"temperature\":0.7,\"top_k\":5,\"stream\":true}";
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "init chat");
    cJSON *j = body(&w, 0, &b1);
    const cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    CHECK(cJSON_GetArraySize(msgs) == 2, "system + user");
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "role")->valuestring, "system"),
          "system first");
    CHECK(
        !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring, w.prefix),
        "system = prefix");
    CHECK(count_words(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content")->valuestring) ==
              32,
          "user part");
    CHECK(cJSON_GetObjectItem(j, "prompt") == NULL, "no prompt in chat");
    CHECK(cJSON_GetObjectItem(j, "temperature")->valuedouble == 0.7, "extra overrides");
    CHECK(cJSON_GetObjectItem(j, "top_k")->valueint == 5, "extra adds");
    CHECK(cJSON_GetArraySize(j) == 8, "no duplicate keys: %d fields", cJSON_GetArraySize(j));
    cJSON_Delete(j);
    free(b1.json);
    bench_workload_free(&w);

    c = base_cfg();
    c.extra_body = "[1]";
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == BRISK_EINVAL && bt_one_line(err),
          "extra body must be an object");
    c.extra_body = NULL;
    c.range_ratio = 1.0;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == BRISK_EINVAL, "ratio must be < 1");
    c.range_ratio = 0;
    c.model = NULL;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "no model");
    j = body(&w, 0, &b1);
    CHECK(cJSON_GetObjectItem(j, "model") == NULL, "no model field");
    cJSON_Delete(j);
    free(b1.json);
    bench_workload_free(&w);
}

/* --abort-rate and --invalid-rate: the fractions, the abort points, the
 * invalid variants (each really invalid, and only in its own way), the
 * determinism, and prompts that do not depend on the rates. */
static void test_kinds(void) {
    bench_workload w, plain;
    char err[256];
    bench_workload_cfg c = base_cfg();
    CHECK(bench_workload_init(&plain, &c, err, sizeof err) == 0, "plain");
    c.abort_rate = 0.2;
    c.invalid_rate = 0.1;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "rates: %s", err);
    const int n = 20000;
    int kinds[3] = {0}, head = 0, variants[BENCH_INVALID_N] = {0};
    int at_seen[16] = {0}, bad_at = 0, same_prompt = 1, bad_invalid = 0;
    for (int i = 0; i < n; i++) {
        bench_body b, p;
        CHECK_COND(bench_workload_body(&w, (uint64_t)i, &b) == 0);
        CHECK_COND(bench_workload_body(&plain, (uint64_t)i, &p) == 0);
        CHECK_COND(p.kind == BENCH_REQ_NORMAL);
        kinds[b.kind]++;
        if (b.kind == BENCH_REQ_ABORT) {
            if (b.abort_at == -1)
                head++;
            else if (b.abort_at < 0 || b.abort_at >= b.expected_out)
                bad_at++;
            else
                at_seen[b.abort_at]++;
        }
        if (b.kind != BENCH_REQ_INVALID) {
            /* The same request as without the rates. */
            same_prompt &= !strcmp(b.json, p.json);
        } else {
            variants[b.invalid]++;
            cJSON *j = cJSON_ParseWithLength(b.json, b.len);
            cJSON *pj = cJSON_Parse(p.json);
            const cJSON *mt = j ? cJSON_GetObjectItem(j, "max_tokens") : NULL;
            const cJSON *t = j ? cJSON_GetObjectItem(j, "temperature") : NULL;
            const cJSON *tp = j ? cJSON_GetObjectItem(j, "top_p") : NULL;
            const cJSON *m = j ? cJSON_GetObjectItem(j, "model") : NULL;
            int ok = 0;
            switch (b.invalid) {
            case BENCH_INVALID_BAD_JSON:
                ok = !j && b.len >= 1 && b.len < strlen(p.json) &&
                     !strncmp(b.json, p.json, b.len) && strlen(b.json) == b.len;
                break;
            case BENCH_INVALID_RANGE:
                ok = j && ((cJSON_IsNumber(mt) && mt->valuedouble == 0) ||
                           (cJSON_IsNumber(tp) && tp->valuedouble > 1) ||
                           (cJSON_IsNumber(t) && t->valuedouble < 0));
                break;
            case BENCH_INVALID_MODEL:
                ok = j && cJSON_IsString(m) && !strcmp(m->valuestring, BENCH_INVALID_MODEL_NAME) &&
                     cJSON_IsNumber(mt) && mt->valuedouble >= 1;
                break;
            case BENCH_INVALID_TYPE:
                ok = j && (cJSON_IsString(mt) || cJSON_IsString(t)) &&
                     !strcmp(cJSON_GetObjectItem(j, "model")->valuestring, "m");
                break;
            }
            /* Apart from its one fault, an invalid body is the valid one. */
            if (ok && j && b.invalid != BENCH_INVALID_BAD_JSON)
                ok = cJSON_GetArraySize(j) == cJSON_GetArraySize(pj) + (tp != NULL) &&
                     !strcmp(cJSON_GetObjectItem(j, "prompt")->valuestring,
                             cJSON_GetObjectItem(pj, "prompt")->valuestring);
            bad_invalid += !ok;
            if (!ok && bad_invalid < 4)
                fprintf(stderr, "bad invalid body (%s): %.*s\n", bench_invalid_name(b.invalid),
                        (int)b.len, b.json);
            cJSON_Delete(j);
            cJSON_Delete(pj);
        }
        free(b.json);
        free(p.json);
    }
    /* Binomial: 5 standard deviations. */
    CHECK(abs(kinds[BENCH_REQ_ABORT] - 4000) < 5 * 57, "aborts %d of 20000", kinds[1]);
    CHECK(abs(kinds[BENCH_REQ_INVALID] - 2000) < 5 * 43, "invalid %d of 20000", kinds[2]);
    CHECK(abs(head * 4 - kinds[BENCH_REQ_ABORT]) < 4 * 5 * 28, "a quarter before the head: %d",
          head);
    CHECK(bad_at == 0, "abort points in [0, output length)");
    int all_at = 1;
    for (int k = 0; k < 16; k++)
        all_at &= at_seen[k] > 100; /* 3000 over 16 points: about 190 each */
    CHECK(all_at, "every abort point from 0 to 15 drawn");
    for (int v = 0; v < BENCH_INVALID_N; v++)
        CHECK(abs(variants[v] - 500) < 5 * 19, "variant %s: %d", bench_invalid_name(v),
              variants[v]);
    CHECK(bad_invalid == 0, "%d invalid bodies not invalid in their way", bad_invalid);
    CHECK(same_prompt, "valid bodies do not depend on the rates");

    /* Deterministic per seed, different for another seed; warm-up is normal. */
    bench_workload w2;
    CHECK(bench_workload_init(&w2, &c, err, sizeof err) == 0, "again");
    int same = 1, warm_normal = 1;
    for (uint64_t i = 0; i < 500; i++) {
        bench_body a, b;
        bench_workload_body(&w, i, &a);
        bench_workload_body(&w2, i, &b);
        same &= a.kind == b.kind && a.abort_at == b.abort_at && a.invalid == b.invalid &&
                a.len == b.len && !memcmp(a.json, b.json, a.len);
        free(a.json);
        free(b.json);
        bench_workload_body(&w, BENCH_WARMUP_INDEX + i, &a);
        warm_normal &= a.kind == BENCH_REQ_NORMAL;
        free(a.json);
    }
    CHECK(same, "same seed, same kinds and bodies");
    CHECK(warm_normal, "warm-up requests are never aborted or invalid");
    bench_workload_free(&w2);
    c.seed = 4;
    CHECK(bench_workload_init(&w2, &c, err, sizeof err) == 0, "seed 4");
    int differ = 0;
    for (uint64_t i = 0; i < 200; i++) {
        bench_body a, b;
        bench_workload_body(&w, i, &a);
        bench_workload_body(&w2, i, &b);
        differ += a.kind != b.kind;
        free(a.json);
        free(b.json);
    }
    CHECK(differ > 20, "another seed, other kinds: %d of 200 differ", differ);
    bench_workload_free(&w2);
    bench_workload_free(&w);
    bench_workload_free(&plain);

    /* Everything invalid; everything aborted; bad rates. */
    c = base_cfg();
    c.invalid_rate = 1;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "all invalid");
    int all = 1;
    for (uint64_t i = 0; i < 100; i++) {
        bench_body b;
        bench_workload_body(&w, i, &b);
        all &= b.kind == BENCH_REQ_INVALID;
        free(b.json);
    }
    CHECK(all, "rate 1: every request invalid");
    bench_workload_free(&w);
    const double bad[][2] = {{-0.1, 0}, {0, 1.5}, {0.6, 0.5}, {NAN, 0}};
    for (int i = 0; i < 4; i++) {
        c.abort_rate = bad[i][0];
        c.invalid_rate = bad[i][1];
        CHECK(bench_workload_init(&w, &c, err, sizeof err) == BRISK_EINVAL && bt_one_line(err),
              "rates %g + %g rejected", bad[i][0], bad[i][1]);
    }
}

static const char *write_file(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/test_bench_ds_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_dataset(void) {
    bench_workload w;
    char err[256];
    bench_workload_cfg c = base_cfg();
    const char *path = write_file("{\"prompt\": \"Hello \\\"there\\\"\", \"output_len\": 5}\n"
                                  "\n"
                                  "  {\"prompt\": \"second\", \"output_len\": 7}  \r\n");
    CHECK(path != NULL, "temp file");
    c.dataset_path = path;
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == 0, "dataset: %s", err);
    CHECK(w.n_items == 2, "two prompts");
    bench_body b;
    cJSON *j = body(&w, 2, &b); /* wraps to the first */
    CHECK(!strcmp(cJSON_GetObjectItem(j, "prompt")->valuestring, "Hello \"there\""),
          "escaped prompt round-trips");
    CHECK(b.expected_out == 5 && cJSON_GetObjectItem(j, "max_tokens")->valueint == 5, "length");
    CHECK(b.words == 0, "datasets are not calibrated");
    cJSON_Delete(j);
    free(b.json);
    bench_workload_free(&w);
    unlink(path);

    const char *bad[] = {
        "{\"prompt\": \"a\", \"output_len\": 5}\nnot json\n",
        "{\"prompt\": \"\", \"output_len\": 5}\n",
        "{\"prompt\": \"a\", \"output_len\": 0}\n",
        "{\"prompt\": \"a\", \"output_len\": 2.5}\n",
        "{\"prompt\": 3, \"output_len\": 5}\n",
        "[\"prompt\"]\n",
        "\n\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_file(bad[i]);
        c.dataset_path = path;
        int rc = bench_workload_init(&w, &c, err, sizeof err);
        CHECK(rc < 0 && bt_one_line(err), "bad dataset %zu rejected (%d): %s", i, rc, err);
        unlink(path);
    }
    path = write_file("{\"prompt\": \"a\", \"output_len\": 5}\nnot json\n");
    c.dataset_path = path;
    bench_workload_init(&w, &c, err, sizeof err);
    CHECK(strstr(err, "line 2") != NULL, "the line is named: %s", err);
    unlink(path);
    c.dataset_path = "/nonexistent/x.jsonl";
    CHECK(bench_workload_init(&w, &c, err, sizeof err) == BRISK_EIO, "missing file");
}

int main(void) {
    test_arrivals();
    test_lengths();
    test_bodies();
    test_prefix_chat_extra();
    test_kinds();
    test_dataset();
    return BT_SUMMARY("test_bench_workload");
}
