/* fuzz_limits.c - the limits file (srv_quota_parse) and the buckets fed
 * with its rules (srv_quota.h).
 *
 * Input: the file's text up to a 0x00 byte, then admission steps (3 bytes
 * each: a key among the rule ids and two unnamed ones, a prompt size, a time
 * step). Properties checked:
 *   - a refused file gives BRISK_EINVAL (or ENOMEM), no rules and one line
 *     naming a line number; a parsed one has ids of 1..64 characters, unique,
 *     and fields within their documented ranges;
 *   - admissions never report negative remaining counts, a refusal names what
 *     ran out and (unless too large) a positive retry time, and the headers
 *     are printable ASCII lines;
 *   - a key's admitted requests never exceed its burst plus its refill over
 *     the time elapsed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "server/ops/srv_quota.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16))
        return 0;
    const uint8_t *zero = memchr(data, 0, size);
    size_t tlen = zero ? (size_t)(zero - data) : size;
    char *text = malloc(tlen ? tlen : 1);
    if (!text)
        return 0;
    memcpy(text, data, tlen);
    srv_quota_rule *rules = NULL;
    int n = -1;
    char err[256] = "";
    int rc = srv_quota_parse(text, tlen, &rules, &n, err, sizeof err);
    free(text);
    if (rc < 0) {
        FUZZ_CHECK(rc == BRISK_EINVAL || rc == BRISK_ENOMEM);
        FUZZ_CHECK(!rules && n == 0 && err[0] && !strchr(err, '\n'));
        FUZZ_CHECK(rc == BRISK_ENOMEM || strstr(err, "line ") != NULL);
        return 0;
    }
    FUZZ_CHECK(n >= 0 && n <= SRV_QUOTA_MAX_RULES);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(rules[i].id);
        FUZZ_CHECK(l >= 1 && l <= 64);
        FUZZ_CHECK(rules[i].rpm >= 0 && rules[i].rpm <= 1000000000LL);
        FUZZ_CHECK(rules[i].tpm >= 0 && rules[i].tpm <= 1000000000000LL);
        FUZZ_CHECK(rules[i].concurrency >= 0 && rules[i].concurrency <= 1000000);
        FUZZ_CHECK(rules[i].window_s >= 1 && rules[i].window_s <= 86400);
        FUZZ_CHECK(!rules[i].has_priority ||
                   (rules[i].priority >= -1000000 && rules[i].priority <= 1000000));
        FUZZ_CHECK(!rules[i].has_priority_floor ||
                   (rules[i].priority_floor >= -1000000 && rules[i].priority_floor <= 1000000));
        int pr = srv_quota_priority(NULL, NULL, 5, 1);
        FUZZ_CHECK(pr == 5);
        for (int k = 0; k < i; k++)
            FUZZ_CHECK(strcmp(rules[i].id, rules[k].id) != 0);
    }
    srv_quota *q = srv_quota_create();
    if (!q || srv_quota_set_rules(q, rules, n, 0) < 0) {
        srv_quota_free(q);
        free(rules);
        return 0;
    }
    const uint8_t *in = zero ? zero + 1 : data + size;
    size_t left = (size_t)(data + size - in);
    double t = 0;
    long long admitted[3] = {0, 0, 0};
    for (; left >= 3; in += 3, left -= 3) {
        int k = in[0] % 3;
        const char *id = k == 0 && n > 0 ? rules[in[0] % n].id : k == 1 ? "x-unnamed" : "y-unnamed";
        if (k == 0 && n == 0)
            id = "x-unnamed";
        t += (double)(in[2] % 16) * 0.25;
        srv_quota_verdict v;
        srv_quota_admit(q, id, in[1], t, &v);
        FUZZ_CHECK(!v.limited || v.limit_requests == -1 || v.remaining_requests >= 0);
        FUZZ_CHECK(!v.limited || v.limit_tokens == -1 || v.remaining_tokens >= 0);
        if (!v.ok) {
            FUZZ_CHECK(v.which != NULL);
            FUZZ_CHECK(v.too_large || (v.retry_after_s > 0 && isfinite(v.retry_after_s)));
        }
        char h[640];
        srv_quota_headers(&v, h, sizeof h);
        for (const char *p = h; *p; p++)
            FUZZ_CHECK((*p >= 0x20 && *p < 0x7f) || *p == '\r' || *p == '\n');
        if (v.ok && k == 1)
            admitted[1]++;
        if (v.ok) {
            srv_quota_charge(q, id, in[1] / 2, t);
            if (in[2] & 0x80)
                srv_quota_release(q, id);
        }
    }
    /* "x-unnamed" falls under the default rule, if any: its requests stay
     * within the burst plus the refill. */
    int named = 0;
    for (int i = 0; i < n; i++)
        named |= !strcmp(rules[i].id, "x-unnamed");
    for (int i = 0; i < n && !named; i++)
        if (!strcmp(rules[i].id, "*") && rules[i].rpm)
            FUZZ_CHECK((double)admitted[1] <=
                       (double)rules[i].rpm * (1.0 + t / rules[i].window_s) + 1e-6);
    srv_quota_free(q);
    free(rules);
    return 0;
}
