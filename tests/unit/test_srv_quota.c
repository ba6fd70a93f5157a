/* test_srv_quota.c - per-key limits (srv_quota.h) on an injected clock: the
 * limits file (fields, defaults, comments, CRLF, every kind of bad line),
 * request and token buckets refilling at limit / window, completion tokens
 * charged after admission (the bucket below zero, then recovering), a prompt
 * over the whole budget, concurrency slots, the default rule, keys without
 * limits, a reload that keeps levels (clipped) and slots, the headers, and a
 * randomised check of the long-run rate against a simple model. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "server/ops/srv_quota.h"

static int parse_ok(const char *text, srv_quota_rule **r, int *n) {
    char err[200];
    return srv_quota_parse(text, strlen(text), r, n, err, sizeof err);
}

static void test_parse(void) {
    srv_quota_rule *r = NULL;
    int n = 0;
    CHECK(parse_ok("# limits\n\n  team-a rpm=60 tpm=10000 concurrency=2\r\n*\twindow=10 rpm=5\n"
                   "b.c_d tpm=1\n",
                   &r, &n) == 0 &&
              n == 3,
          "three rules");
    if (n == 3) {
        CHECK(!strcmp(r[0].id, "team-a") && r[0].rpm == 60 && r[0].tpm == 10000 &&
                  r[0].concurrency == 2 && r[0].window_s == 60.0,
              "team-a");
        CHECK(!strcmp(r[1].id, "*") && r[1].rpm == 5 && r[1].tpm == 0 && r[1].window_s == 10.0,
              "default");
        CHECK(!strcmp(r[2].id, "b.c_d") && r[2].tpm == 1 && r[2].rpm == 0, "b.c_d");
    }
    free(r);
    CHECK(parse_ok("", &r, &n) == 0 && n == 0 && !r, "empty file: no rules");
    static const char *const bad[] = {
        "a rpm=0\n",
        "a rpm=-1\n",
        "a rpm=1e3\n",
        "a rpm=1000000001\n",
        "a tpm=x\n",
        "a rpm=1 rpm=2\n",
        "a speed=3\n",
        "a rpm\n",
        "a =3\n",
        "bad/id rpm=1\n",
        "a rpm=1\na tpm=2\n",
        "a window=0\n",
        "a window=86401\n",
        "a rpm=1\x01\n",
        "a rpm=\n",
        "ab*c rpm=1\n",
        "a concurrency=1.5\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[200] = "";
        r = NULL;
        int rc = srv_quota_parse(bad[i], strlen(bad[i]), &r, &n, err, sizeof err);
        CHECK(rc == BRISK_EINVAL && !r && strstr(err, "line ") && !strchr(err, '\n'),
              "bad line %zu refused: %s", i, err);
    }
    char big[80 * 1100];
    size_t k = 0;
    for (int i = 0; i < SRV_QUOTA_MAX_RULES + 1; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "k%d rpm=1\n", i);
    CHECK(srv_quota_parse(big, k, &r, &n, big, 100) == BRISK_EINVAL, "too many rules");
}

static void set(srv_quota *q, const char *text, double now) {
    srv_quota_rule *r = NULL;
    int n = 0;
    char err[200];
    CHECK(srv_quota_parse(text, strlen(text), &r, &n, err, sizeof err) == 0, "parse: %s", err);
    CHECK_COND(srv_quota_set_rules(q, r, n, now) == 0);
    free(r);
}

static void test_buckets(void) {
    srv_quota *q = srv_quota_create();
    srv_quota_verdict v;
    set(q, "a rpm=3 tpm=100\nc concurrency=2\n* rpm=1 window=10\n", 0);
    /* Unknown to the file but covered by "*"; NULL (auth off) never limited. */
    srv_quota_admit(q, NULL, 5, 0, &v);
    CHECK(v.ok && !v.limited, "no key: not limited");
    /* Three requests, then the fourth waits 20 s (3 per 60 s). */
    for (int i = 0; i < 3; i++) {
        srv_quota_admit(q, "a", 10, 0, &v);
        CHECK(v.ok && v.limited && v.remaining_requests == 2 - i &&
                  v.remaining_tokens == 100 - 10 * (i + 1),
              "a #%d", i);
    }
    srv_quota_admit(q, "a", 10, 0, &v);
    CHECK(!v.ok && !strcmp(v.which, "requests") && fabs(v.retry_after_s - 20.0) < 1e-9,
          "a #4: requests, retry %g", v.retry_after_s);
    char h[512];
    srv_quota_headers(&v, h, sizeof h);
    CHECK(strstr(h, "x-ratelimit-limit-requests: 3\r\n") &&
              strstr(h, "x-ratelimit-remaining-requests: 0\r\n") &&
              strstr(h, "x-ratelimit-reset-requests: 1m0s\r\n") &&
              strstr(h, "x-ratelimit-limit-tokens: 100\r\n") && strstr(h, "Retry-After: 20\r\n") &&
              strstr(h, "retry-after-ms: 20000\r\n"),
          "headers:\n%s", h);
    srv_quota_admit(q, "a", 10, 19.9, &v);
    CHECK(!v.ok, "19.9 s: still refused");
    srv_quota_admit(q, "a", 10, 20.0, &v);
    CHECK(v.ok, "20 s: admitted");
    /* Completion tokens after admission take the bucket below zero. */
    srv_quota_charge(q, "a", 150, 20.0);
    srv_quota_admit(q, "a", 5, 40.0, &v);
    CHECK(!v.ok && !strcmp(v.which, "tokens") && v.remaining_tokens == 0,
          "tokens below zero: refused (%s)", v.which ? v.which : "-");
    /* level at 20 s: 100 - 30 - 10 + 20 s x 100/60 refill (capped at 100)... */
    double t_ok = 40.0 + v.retry_after_s;
    srv_quota_admit(q, "a", 5, t_ok - 0.01, &v);
    CHECK(!v.ok, "just before the retry time: refused");
    srv_quota_admit(q, "a", 5, t_ok + 1e-6, &v);
    CHECK(v.ok, "at the retry time: admitted");
    /* A prompt over the whole budget is never admitted, and has no Retry-After. */
    srv_quota_admit(q, "a", 101, 1000, &v);
    CHECK(!v.ok && v.too_large, "too large");
    srv_quota_headers(&v, h, sizeof h);
    CHECK(!strstr(h, "Retry-After"), "too large: no Retry-After");
    /* Concurrency: two slots, the third waits for a release. */
    srv_quota_admit(q, "c", 1, 0, &v);
    CHECK(v.ok, "c 1");
    srv_quota_admit(q, "c", 1, 0, &v);
    CHECK(v.ok, "c 2");
    srv_quota_admit(q, "c", 1, 0, &v);
    CHECK(!v.ok && !strcmp(v.which, "concurrency"), "c 3: concurrency");
    srv_quota_release(q, "c");
    srv_quota_admit(q, "c", 1, 0, &v);
    CHECK(v.ok, "c after a release");
    /* The default rule: its own bucket per key. */
    srv_quota_admit(q, "x", 1, 0, &v);
    CHECK(v.ok, "x 1");
    srv_quota_admit(q, "y", 1, 0, &v);
    CHECK(v.ok, "y 1: its own bucket");
    srv_quota_admit(q, "x", 1, 5, &v);
    CHECK(!v.ok && fabs(v.retry_after_s - 5) < 1e-9, "x 2 at 5 s: wait 5 s more");
    /* Reload: x keeps its (empty) bucket under the new rule; a key removed
     * from the file is unlimited at once. */
    set(q, "* rpm=2 window=10\n", 6);
    srv_quota_admit(q, "x", 1, 6, &v);
    CHECK(!v.ok, "reload keeps x's level");
    srv_quota_admit(q, "a", 1000, 6, &v);
    CHECK(v.ok && v.limited && v.limit_tokens == -1, "a now under '*' (rpm only)");
    set(q, "", 7);
    srv_quota_admit(q, "x", 1, 7, &v);
    CHECK(v.ok && !v.limited, "no rules: unlimited");
    srv_quota_free(q);
}

/* Randomised: over 10 simulated minutes of a greedy client, the admitted
 * requests stay within the bucket's bound (burst + rate x time). */
static void test_rate(void) {
    srv_quota *q = srv_quota_create();
    set(q, "k rpm=120 tpm=6000\n", 0);
    uint64_t x = 88172645463325252ull;
    double t = 0;
    long long reqs = 0, toks = 0;
    while (t < 600) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long long prompt = 1 + (long long)(x % 100);
        srv_quota_verdict v;
        srv_quota_admit(q, "k", prompt, t, &v);
        if (v.ok) {
            reqs++;
            toks += prompt;
            srv_quota_charge(q, "k", (long long)(x >> 40) % 50, t);
            toks += (long long)(x >> 40) % 50;
            srv_quota_release(q, "k");
        }
        t += 0.05;
    }
    CHECK(reqs <= 120 + 120 * 10 && reqs >= 1000, "requests in 10 min: %lld", reqs);
    /* One completion may overrun (at most 49 tokens) before the bucket refuses. */
    CHECK(toks <= 6000 + 6000 * 10 + 49 && toks >= 60000 * 0.95, "tokens in 10 min: %lld", toks);
    srv_quota_free(q);
}

/* Priorities: the key's default, a request's own, raised to the floor. */
static void test_priority(void) {
    srv_quota *q = srv_quota_create();
    set(q, "batch priority=10\nvip priority=-5 priority_floor=-5\n* priority_floor=0\n", 0);
    CHECK_COND(srv_quota_priority(q, "batch", 0, 0) == 10);
    CHECK_COND(srv_quota_priority(q, "batch", -3, 1) == -3); /* no floor of its own */
    CHECK_COND(srv_quota_priority(q, "vip", 0, 0) == -5);
    CHECK_COND(srv_quota_priority(q, "vip", -50, 1) == -5);
    CHECK_COND(srv_quota_priority(q, "other", -50, 1) == 0);
    CHECK_COND(srv_quota_priority(q, "other", 7, 1) == 7);
    CHECK_COND(srv_quota_priority(q, NULL, -2, 1) == -2); /* no key: as asked */
    srv_quota_verdict v;
    srv_quota_admit(q, "vip", 1000000, 0, &v);
    CHECK(v.ok && !v.limited, "priorities alone limit nothing");
    srv_quota_rule *r = NULL;
    int n = 0;
    CHECK(parse_ok("a priority=-1000000 priority_floor=1000000\n", &r, &n) == 0 && n == 1 &&
              r[0].priority == -1000000 && r[0].priority_floor == 1000000,
          "priority bounds");
    free(r);
    char err[200];
    CHECK(srv_quota_parse("a priority=1000001\n", 19, &r, &n, err, sizeof err) == BRISK_EINVAL,
          "priority out of range");
    CHECK(srv_quota_parse("a priority=--1\n", 15, &r, &n, err, sizeof err) == BRISK_EINVAL,
          "a double minus");
    srv_quota_free(q);
}

/* The messages a refused limits file gives, word for word (the field table
 * writes the lists), and the file reader's (common/brisk_file.h) with the
 * option's name in front. */
static void test_messages(void) {
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"a speed=3\n", "limits file: line 1: unknown field (rpm, tpm, concurrency, window, "
                        "priority and priority_floor are known)"},
        {"\na rpm=0\n", "limits file: line 2: a value out of range (rpm 1..1e9, tpm 1..1e12, "
                        "concurrency 1..1e6, window 1..86400 seconds, priorities -1e6..1e6)"},
        {"a rpm=1 rpm=1\n", "limits file: line 1: a field given twice"},
        {"a rpm\n", "limits file: line 1: a field must be name=value"},
        {"bad/id\n", "limits file: line 1: the id must be '*' or of [A-Za-z0-9._-]"},
        {"a\x02\n", "limits file: line 1: a control character"},
        {"a\nb\na\n", "limits file: line 3: an id given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_quota_rule *r = NULL;
        int n = 0;
        char err[300] = "";
        int rc = srv_quota_parse(cases[i].text, strlen(cases[i].text), &r, &n, err, sizeof err);
        CHECK(rc == BRISK_EINVAL && !r && !strcmp(err, cases[i].err), "case %zu: %s", i, err);
    }
    srv_quota *q = srv_quota_create();
    char err[300] = "";
    int rc = srv_quota_load_file(q, "/nonexistent/limits", 0, err, sizeof err);
    CHECK(rc == BRISK_EIO &&
              !strncmp(err, "--limits-file: cannot open '/nonexistent/limits': ", 50) &&
              bt_one_line(err),
          "a missing file: %s", err);
    rc = srv_quota_load_file(q, ".", 0, err, sizeof err);
    CHECK(rc == BRISK_EIO && !strncmp(err, "--limits-file: cannot read '.': ", 32),
          "a directory: %s", err);
    srv_quota_free(q);
}

int main(void) {
    test_messages();
    test_priority();
    test_parse();
    test_buckets();
    test_rate();
    return BT_SUMMARY("test_srv_quota");
}
