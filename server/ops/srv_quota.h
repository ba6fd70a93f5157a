/* srv_quota.h - per-key limits: requests and tokens per window, concurrent
 * requests, as token buckets with an injected clock (no test waits a minute).
 *
 * Limits file (--limits-file): one rule a line, `ID field=value ...`, where ID
 * is an API key id (srv_keys.h) or `*` for every key the file does not name;
 * blank lines and lines whose first non-blank character is '#' are ignored; a
 * trailing CR is dropped. Fields (each at most once a line, all optional):
 *   rpm=N          requests per window (1..10^9)
 *   tpm=N          prompt + completion tokens per window (1..10^12)
 *   concurrency=N  requests running at once (1..10^6)
 *   window=S       the window in seconds (1..86400; default 60)
 *   priority=N     the key's default request priority (-10^6..10^6; 0)
 *   priority_floor=N  the most urgent (lowest) priority the key may ask for;
 *                  a request asking for less gets this (-10^6..10^6)
 * A missing field is no limit. Any other line is an error naming its line
 * number (never its content). At most SRV_QUOTA_MAX_RULES rules; ids must be
 * unique.
 *
 * Buckets: a key's request bucket holds rpm and refills at rpm / window per
 * second (likewise tokens). A request is admitted when one request, its
 * prompt's tokens and a concurrency slot are there; it takes them at once.
 * Completion tokens are charged as they are generated, so the token bucket
 * may go below zero: a stream admitted with budget left runs to its end (at
 * most its max_tokens past the budget), and the key's next request waits
 * until the bucket is back above its prompt. A cancelled request pays only
 * what it used.
 *
 * Loop thread only; times are seconds on any monotonic clock the caller
 * passes. */
#ifndef SRV_QUOTA_H
#define SRV_QUOTA_H

#include <stddef.h>

#define SRV_QUOTA_MAX_RULES 1001 /* SRV_KEYS_MAX keys and the default */
#define SRV_QUOTA_MAX_FILE_BYTES (1 << 20)

typedef struct srv_quota srv_quota;

/* One rule (a parsed line). Limits of 0 mean none. */
typedef struct srv_quota_rule {
    char id[65]; /* a key id, or "*" */
    long long rpm, tpm;
    long long concurrency;
    double window_s;
    int has_priority, priority;             /* the key's default priority */
    int has_priority_floor, priority_floor; /* the lowest it may ask for */
} srv_quota_rule;

/* Parses a limits file's text into rules (malloc'd, *n of them; the caller
 * frees). An empty file gives 0 rules. Returns 0 or BRISK_EINVAL /
 * BRISK_ENOMEM with err naming the first bad line. */
int srv_quota_parse(const char *text, size_t len, srv_quota_rule **rules, int *n, char *err,
                    size_t err_len);

/* An empty set of limits (every key unlimited). NULL when out of memory. */
srv_quota *srv_quota_create(void);
void srv_quota_free(srv_quota *q);

/* Replaces the rules (copied). A key whose limits stay keeps its buckets
 * (levels clipped to the new sizes); running requests keep their slots. */
int srv_quota_set_rules(srv_quota *q, const srv_quota_rule *rules, int n, double now);

/* Reads path (at most SRV_QUOTA_MAX_FILE_BYTES), parses it, and sets its
 * rules; on failure the old rules stay. */
int srv_quota_load_file(srv_quota *q, const char *path, double now, char *err, size_t err_len);

/* What admission decided. */
typedef struct srv_quota_verdict {
    int limited;          /* the key has limits: the x-ratelimit-* headers apply */
    int ok;               /* admitted (slot, request and prompt tokens taken) */
    int too_large;        /* the prompt alone exceeds the key's tokens per window */
    const char *which;    /* refused: "requests", "tokens" or "concurrency" */
    double retry_after_s; /* refused: when it would be admitted (concurrency: 1 s) */
    long long limit_requests, limit_tokens;         /* -1: none */
    long long remaining_requests, remaining_tokens; /* after this request */
    double reset_requests_s, reset_tokens_s;        /* until the buckets are full */
} srv_quota_verdict;

/* Admission of one request of key id (NULL: auth off, never limited) with
 * prompt_tokens. */
void srv_quota_admit(srv_quota *q, const char *id, long long prompt_tokens, double now,
                     srv_quota_verdict *v);
/* What admission would say now for a request of id with no prompt, taking
 * nothing: the headers of a limited key's other responses. */
void srv_quota_peek(srv_quota *q, const char *id, double now, srv_quota_verdict *v);
/* Completion tokens generated for an admitted request of id. */
void srv_quota_charge(srv_quota *q, const char *id, long long tokens, double now);
/* An admitted request of id ended (its concurrency slot comes back). */
void srv_quota_release(srv_quota *q, const char *id);

/* The priority a request of key id runs with: requested when has_requested
 * (raised to the key's priority_floor), else the key's default, else 0. */
int srv_quota_priority(const srv_quota *q, const char *id, int requested, int has_requested);

/* The response headers of a verdict ("Name: v\r\n" lines, OpenAI's
 * x-ratelimit-* and, when refused, Retry-After and retry-after-ms) into out;
 * "" when the key is not limited. */
void srv_quota_headers(const srv_quota_verdict *v, char *out, size_t cap);

#endif
