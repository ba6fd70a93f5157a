/* test_brisk_buf.c - the shared growable text buffer (common/brisk_buf.h)
 * against a plain reference: random sequences of appends (bytes with NULs,
 * C strings, printf, in-place writes through reserve/commit) must give exactly
 * the bytes of the reference, NUL-terminated after every step; take hands the
 * text over and leaves the buffer empty; an impossible size sets oom, after
 * which every append is a no-op and take gives NULL. With the fault injector
 * compiled in (the ASan build), a failed allocation at every point of a
 * sequence must also end in NULL from take, without leaks.
 *
 * brisk_grow / brisk_grow_libc (common/brisk_grow.h), the arrays' growth
 * rule: random pushes keep every element, the capacity starts at `first`,
 * doubles, never passes `max`; need > max is BRISK_ERANGE and a size that
 * overflows is BRISK_ENOMEM, both leaving the array and its capacity as they
 * were; an injected failure (ASan build) does the same for brisk_grow only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"

/* xorshift64*: the tests' own repeatable random numbers. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

typedef struct ref {
    char *p;
    size_t len;
} ref;

static void ref_put(ref *r, const char *s, size_t n) {
    r->p = realloc(r->p, r->len + n + 1);
    if (!r->p)
        abort(); /* the test's own reference: not brisk code */
    memcpy(r->p + r->len, s, n);
    r->len += n;
}

/* One random append, done to both. */
static void step(brisk_buf *b, ref *r) {
    char tmp[700];
    size_t most = rnd() % 8 == 0 ? sizeof tmp - 1 : 24;
    size_t n = rnd() % most;
    for (size_t i = 0; i < n; i++)
        tmp[i] = (char)(rnd() & 0xff); /* any byte, NUL included */
    switch (rnd() % 4) {
    case 0:
        brisk_buf_put(b, tmp, n);
        ref_put(r, tmp, n);
        break;
    case 1: {
        for (size_t i = 0; i < n; i++)
            if (tmp[i] == '\0')
                tmp[i] = 'x';
        tmp[n] = '\0';
        brisk_buf_str(b, tmp);
        ref_put(r, tmp, n);
        break;
    }
    case 2: {
        long long v = (long long)rnd();
        v -= (long long)rnd() * 4096;
        double d = (double)rnd() / 7.0;
        char want[96];
        int w = snprintf(want, sizeof want, "[%lld|%.6g|%s]", v, d, n % 2 ? "odd" : "even");
        brisk_buf_printf(b, "[%lld|%.6g|%s]", v, d, n % 2 ? "odd" : "even");
        ref_put(r, want, (size_t)w);
        break;
    }
    default: {
        /* Reserve more than is written, as the JSON string writer does. */
        char *o = brisk_buf_reserve(b, n + 16);
        CHECK(o != NULL, "reserve %zu failed", n + 16);
        if (o) {
            memcpy(o, tmp, n);
            brisk_buf_commit(b, n);
        }
        ref_put(r, tmp, n);
        break;
    }
    }
}

static void test_random_sequences(void) {
    for (int seq = 0; seq < 200; seq++) {
        brisk_buf b = {0};
        ref r = {0};
        int steps = (int)(rnd() % 60);
        int ok = 1;
        for (int s = 0; s < steps; s++) {
            step(&b, &r);
            ok &= !b.oom && b.len == r.len && b.cap > b.len && b.p[b.len] == '\0' &&
                  (r.len == 0 || memcmp(b.p, r.p, r.len) == 0);
        }
        CHECK(ok, "sequence %d: buffer differs from the reference", seq);
        size_t len = 12345;
        char *t = brisk_buf_take(&b, &len);
        CHECK(t != NULL && len == r.len && t[len] == '\0' && (r.len == 0 || !memcmp(t, r.p, len)),
              "sequence %d: take gave the wrong text", seq);
        CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && !b.oom, "sequence %d: not emptied", seq);
        free(t);
        free(r.p);
    }
}

static void test_empty_take(void) {
    brisk_buf b = {0};
    size_t len = 99;
    char *t = brisk_buf_take(&b, &len);
    CHECK(t != NULL && len == 0 && t[0] == '\0', "take of an empty buffer: want \"\"");
    free(t);
    /* An empty put still yields a terminated (empty) text. */
    brisk_buf_put(&b, "", 0);
    CHECK(b.p != NULL && b.len == 0 && b.p[0] == '\0', "empty put");
    t = brisk_buf_take(&b, NULL);
    CHECK(t != NULL && t[0] == '\0', "take after an empty put");
    free(t);
}

static void test_oom_is_sticky(void) {
    brisk_buf b = {0};
    brisk_buf_str(&b, "kept?");
    CHECK(brisk_buf_reserve(&b, SIZE_MAX - 2) == NULL && b.oom, "an impossible reserve");
    brisk_buf_str(&b, "more");
    brisk_buf_printf(&b, "%d", 42);
    CHECK(brisk_buf_reserve(&b, 1) == NULL, "reserve after oom");
    brisk_buf_commit(&b, 1);
    CHECK(b.len == 5, "appends after oom must do nothing (len %zu)", b.len);
    size_t len = 7;
    CHECK(brisk_buf_take(&b, &len) == NULL && len == 0, "take after oom must give NULL");
    CHECK(b.p == NULL && !b.oom, "take after oom must free and reset");
    /* Reusable after the reset. */
    brisk_buf_str(&b, "again");
    char *t = brisk_buf_take(&b, &len);
    CHECK(t && len == 5 && !strcmp(t, "again"), "reuse after take");
    free(t);
}

static void test_injected_failures(void) {
    if (!brisk_fault_compiled()) {
        printf("test_brisk_buf: SKIP injected failures (built without -DBRISK_FAULT_INJECT)\n");
        return;
    }
    /* A fixed sequence whose growth needs several reallocations. */
    unsigned long total = 0;
    for (unsigned long nth = 0;; nth++) {
        char spec[32];
        snprintf(spec, sizeof spec, nth ? "nth:%lu" : "count", nth);
        CHECK(brisk_fault_configure(spec, NULL, 0) == 0, "configure %s", spec);
        brisk_fault_arm(1);
        brisk_buf b = {0};
        for (int i = 0; i < 400; i++) {
            brisk_buf_printf(&b, "line %d of the sequence\n", i);
            brisk_buf_put(&b, "0123456789abcdef", 16);
        }
        char *t = brisk_buf_take(&b, NULL);
        brisk_fault_arm(0);
        if (nth == 0) {
            total = brisk_fault_seen();
            CHECK(t != NULL && total >= 4, "count run: %lu allocations", total);
        } else {
            CHECK(brisk_fault_injected() == 1 && t == NULL, "%s: a failed growth must spoil", spec);
        }
        free(t);
        if (nth >= total)
            break;
    }
    brisk_fault_configure("off", NULL, 0);
}

typedef int (*grow_fn)(void *, size_t *, size_t, size_t, size_t, size_t);

static void test_grow_with(grow_fn grow, const char *name) {
    uint64_t *v = NULL;
    size_t cap = 0, n = 0;
    for (int round = 0; round < 200; round++) {
        size_t want = n + 1 + rnd() % 40;
        size_t old_cap = cap;
        CHECK(grow(&v, &cap, want, sizeof *v, 8, 0) == 0 && v, "%s: grow to %zu", name, want);
        CHECK(cap >= want, "%s: cap %zu < %zu", name, cap, want);
        if (old_cap == 0)
            CHECK(cap >= 8, "%s: first capacity %zu", name, cap);
        else if (want > old_cap)
            CHECK(cap >= 2 * old_cap && (cap / 2 < want || cap == 2 * old_cap),
                  "%s: %zu -> %zu for %zu is not doubling", name, old_cap, cap, want);
        else
            CHECK(cap == old_cap, "%s: grew without need", name);
        for (; n < want; n++)
            v[n] = (uint64_t)n * 0x9e3779b97f4a7c15ull;
    }
    int intact = 1;
    for (size_t i = 0; i < n; i++)
        intact &= v[i] == (uint64_t)i * 0x9e3779b97f4a7c15ull;
    CHECK(intact, "%s: elements kept across growth", name);
    uint64_t *keep = v;
    size_t keep_cap = cap;
    CHECK(grow(&v, &cap, SIZE_MAX / 4, sizeof *v, 8, 0) == BRISK_ENOMEM && v == keep &&
              cap == keep_cap,
          "%s: overflow refused, array untouched", name);
    CHECK(grow(&v, &cap, keep_cap + 1, sizeof *v, 8, keep_cap) == BRISK_ERANGE && v == keep &&
              cap == keep_cap,
          "%s: need over max refused, array untouched", name);
    free(v);
    /* max caps the doubling: 1000 elements at most, asked 700 from 512. */
    char *c = NULL;
    size_t cc = 0;
    CHECK(grow(&c, &cc, 300, 1, 512, 1000) == 0 && cc == 512, "%s: first 512 (%zu)", name, cc);
    CHECK(grow(&c, &cc, 700, 1, 512, 1000) == 0 && cc == 1000, "%s: capped at max (%zu)", name, cc);
    memset(c, 'x', cc);
    free(c);
}

static void test_grow_injected(void) {
    if (!brisk_fault_compiled()) {
        printf("test_brisk_buf: SKIP brisk_grow injected failure (built without "
               "-DBRISK_FAULT_INJECT)\n");
        return;
    }
    int *v = NULL;
    size_t cap = 0;
    CHECK(brisk_grow(&v, &cap, 10, sizeof *v, 16, 0) == 0, "grow");
    int *keep = v;
    CHECK(brisk_fault_configure("nth:1", NULL, 0) == 0, "configure");
    brisk_fault_arm(1);
    int rc = brisk_grow(&v, &cap, 100, sizeof *v, 16, 0);
    brisk_fault_arm(0);
    CHECK(rc == BRISK_ENOMEM && v == keep && cap == 16, "injected failure leaves the array (%d)",
          rc);
    /* brisk_grow_libc is outside the seam. */
    CHECK(brisk_fault_configure("nth:1", NULL, 0) == 0, "configure");
    brisk_fault_arm(1);
    rc = brisk_grow_libc(&v, &cap, 100, sizeof *v, 16, 0);
    brisk_fault_arm(0);
    CHECK(rc == 0 && cap >= 100 && brisk_fault_injected() == 0, "libc growth is not injected");
    brisk_fault_configure("off", NULL, 0);
    free(v);
}

int main(void) {
    test_grow_with(brisk_grow, "brisk_grow");
    test_grow_with(brisk_grow_libc, "brisk_grow_libc");
    test_grow_injected();
    test_random_sequences();
    test_empty_take();
    test_oom_is_sticky();
    test_injected_failures();
    return BT_SUMMARY("test_brisk_buf");
}
