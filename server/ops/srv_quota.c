/* srv_quota.c - per-key token buckets and the limits file (srv_quota.h). */
#include "server/ops/srv_quota.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_file.h"
#include "common/brisk_grow.h"

/* ---- the limits file ---------------------------------------------------------------- */

static int id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* The fields of a rule line, as data: the name, what the value counts, its
 * range (lo < 0: a leading '-' is allowed; the magnitude is then at most
 * -lo), whole numbers only or not, and where in srv_quota_rule it applies
 * (a long long, a double, or an int with the int that says it was given). */
typedef enum { QF_LLONG, QF_DOUBLE, QF_INT } qf_kind;

typedef struct quota_field {
    const char *name;  /* as the file spells it */
    const char *unit;  /* what the value counts (srv_quota.h says the same) */
    double lo, hi;     /* the range of the value */
    int integer;       /* 1: digits only; else a decimal point too */
    const char *range; /* how the error message says the range */
    qf_kind kind;      /* the C type at off */
    size_t off;        /* the value */
    size_t has_off;    /* QF_INT: the int set to 1 when the field is given */
} quota_field;

#define QF_AT(f) offsetof(srv_quota_rule, f)

static const quota_field FIELDS[] = {
    {"rpm", "requests per window", 1, 1e9, 1, "rpm 1..1e9", QF_LLONG, QF_AT(rpm), 0},
    {"tpm", "prompt + completion tokens per window", 1, 1e12, 1, "tpm 1..1e12", QF_LLONG,
     QF_AT(tpm), 0},
    {"concurrency", "requests running at once", 1, 1e6, 1, "concurrency 1..1e6", QF_LLONG,
     QF_AT(concurrency), 0},
    {"window", "seconds", 1, 86400, 0, "window 1..86400 seconds", QF_DOUBLE, QF_AT(window_s), 0},
    {"priority", "the key's default request priority", -1e6, 1e6, 1, "priorities -1e6..1e6", QF_INT,
     QF_AT(priority), QF_AT(has_priority)},
    {"priority_floor", "the most urgent priority the key may ask for", -1e6, 1e6, 1,
     "priorities -1e6..1e6", QF_INT, QF_AT(priority_floor), QF_AT(has_priority_floor)},
};
#define N_FIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))
_Static_assert(sizeof FIELDS / sizeof FIELDS[0] <= 32, "parse_line marks the fields seen in bits");

/* The error of line `line`: BRISK_EINVAL with "limits file: line N: why". */
static int bad_line(char *err, size_t err_len, int line, const char *why) {
    return brisk_set_err(err, err_len, BRISK_EINVAL, "limits file: line %d: %s", line, why);
}

/* "unknown field (rpm, tpm, ... and priority_floor are known)" and "a value
 * out of range (rpm 1..1e9, ...)", from the table: each range said once. */
static int bad_field(char *err, size_t err_len, int line, int unknown) {
    char why[400];
    size_t k = (size_t)snprintf(why, sizeof why, "%s",
                                unknown ? "unknown field (" : "a value out of range (");
    for (int i = 0; i < N_FIELDS && k < sizeof why; i++) {
        const char *t = unknown ? FIELDS[i].name : FIELDS[i].range;
        if (!unknown && i > 0 && !strcmp(t, FIELDS[i - 1].range))
            continue;
        const char *sep = i == 0 ? "" : unknown && i == N_FIELDS - 1 ? " and " : ", ";
        k += (size_t)snprintf(why + k, sizeof why - k, "%s%s", sep, t);
    }
    if (k < sizeof why)
        snprintf(why + k, sizeof why - k, "%s", unknown ? " are known)" : ")");
    return bad_line(err, err_len, line, why);
}

/* A whole decimal number in s[0, n) within [lo, hi]: 0, or BRISK_EINVAL. */
static int parse_num(const char *s, size_t n, double lo, double hi, int integer, double *out) {
    if (n == 0 || n > 24)
        return BRISK_EINVAL;
    char buf[32];
    memcpy(buf, s, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!((buf[i] >= '0' && buf[i] <= '9') || (!integer && buf[i] == '.')))
            return BRISK_EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || end != buf + n || !isfinite(v) || v < lo || v > hi)
        return BRISK_EINVAL;
    *out = v;
    return 0;
}

/* The value text num[0, n) of field f into r. */
static int set_field(const quota_field *f, const char *num, size_t n, srv_quota_rule *r) {
    int neg = f->lo < 0 && n > 0 && num[0] == '-';
    double v;
    if (parse_num(num + neg, n - (size_t)neg, f->lo < 0 ? 0 : f->lo, neg ? -f->lo : f->hi,
                  f->integer, &v) < 0)
        return BRISK_EINVAL;
    if (neg)
        v = -v;
    char *at = (char *)r + f->off;
    switch (f->kind) {
    case QF_LLONG: *(long long *)at = (long long)v; break;
    case QF_DOUBLE: *(double *)at = v; break;
    case QF_INT:
        *(int *)at = (int)v;
        *(int *)((char *)r + f->has_off) = 1;
        break;
    }
    return 0;
}

/* One non-comment line (number `line`) into r: 0, or BRISK_EINVAL with why
 * in err. */
static int parse_line(const char *s, size_t n, int line, srv_quota_rule *r, char *err,
                      size_t err_len) {
    memset(r, 0, sizeof *r);
    r->window_s = 60.0;
    size_t i = 0;
    while (i < n && s[i] != ' ' && s[i] != '\t')
        i++;
    if (i == 0 || i > 64)
        return bad_line(err, err_len, line, "the id must be 1 to 64 characters");
    if (!(i == 1 && s[0] == '*'))
        for (size_t k = 0; k < i; k++)
            if (!id_char(s[k]))
                return bad_line(err, err_len, line, "the id must be '*' or of [A-Za-z0-9._-]");
    memcpy(r->id, s, i);
    r->id[i] = '\0';
    unsigned seen = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t'))
            i++;
        if (i == n)
            break;
        size_t a = i;
        while (i < n && s[i] != ' ' && s[i] != '\t')
            i++;
        const char *f = s + a, *eq = memchr(f, '=', i - a);
        if (!eq)
            return bad_line(err, err_len, line, "a field must be name=value");
        size_t fl = (size_t)(eq - f), vl = i - a - fl - 1;
        int k = -1;
        for (int j = 0; j < N_FIELDS; j++)
            if (strlen(FIELDS[j].name) == fl && !memcmp(f, FIELDS[j].name, fl))
                k = j;
        if (k < 0)
            return bad_field(err, err_len, line, 1);
        if (seen & (1u << k))
            return bad_line(err, err_len, line, "a field given twice");
        seen |= 1u << k;
        if (set_field(&FIELDS[k], eq + 1, vl, r) < 0)
            return bad_field(err, err_len, line, 0);
    }
    return 0;
}

int srv_quota_parse(const char *text, size_t len, srv_quota_rule **rules, int *n, char *err,
                    size_t err_len) {
    *rules = NULL;
    *n = 0;
    srv_quota_rule *out = NULL;
    size_t cap = 0;
    int cnt = 0, line = 0, rc = 0;
    size_t i = 0;
    while (i < len && rc == 0) {
        size_t a = i;
        while (i < len && text[i] != '\n')
            i++;
        size_t e = i;
        if (i < len)
            i++;
        line++;
        if (e > a && text[e - 1] == '\r')
            e--;
        while (a < e && (text[a] == ' ' || text[a] == '\t'))
            a++;
        while (e > a && (text[e - 1] == ' ' || text[e - 1] == '\t'))
            e--;
        if (a == e || text[a] == '#')
            continue;
        for (size_t k = a; k < e && rc == 0; k++)
            if ((unsigned char)text[k] < 0x20 && text[k] != '\t')
                rc = bad_line(err, err_len, line, "a control character");
        if (rc == 0 && cnt == SRV_QUOTA_MAX_RULES)
            rc = brisk_set_err(err, err_len, BRISK_EINVAL,
                               "limits file: line %d: more than %d rules", line,
                               SRV_QUOTA_MAX_RULES);
        if (rc == 0 && brisk_grow(&out, &cap, (size_t)cnt + 1, sizeof *out, 16, 0) < 0)
            rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "limits file: out of memory");
        if (rc == 0)
            rc = parse_line(text + a, e - a, line, &out[cnt], err, err_len);
        for (int k = 0; rc == 0 && k < cnt; k++)
            if (!strcmp(out[k].id, out[cnt].id))
                rc = bad_line(err, err_len, line, "an id given twice");
        if (rc == 0)
            cnt++;
    }
    if (rc < 0) {
        free(out);
        return rc;
    }
    *rules = out;
    *n = cnt;
    return 0;
}

/* ---- buckets ----------------------------------------------------------------------- */

typedef struct qstate {
    char id[65];     /* "" = a free slot */
    double req, tok; /* bucket levels */
    double t;        /* when they were last refilled */
    long long running;
    int fresh; /* never refilled: full */
} qstate;

#define QUOTA_SLOTS 4096 /* > 2 x SRV_QUOTA_MAX_RULES keys: linear probing stays short */

struct srv_quota {
    srv_quota_rule *rules; /* sorted by id */
    int n_rules;
    const srv_quota_rule *dflt; /* "*", or NULL */
    qstate *st;                 /* [QUOTA_SLOTS] */
    int n_st;
};

srv_quota *srv_quota_create(void) {
    srv_quota *q = brisk_calloc(1, sizeof *q);
    if (q && !(q->st = brisk_calloc(QUOTA_SLOTS, sizeof *q->st))) {
        free(q);
        q = NULL;
    }
    return q;
}

void srv_quota_free(srv_quota *q) {
    if (!q)
        return;
    free(q->rules);
    free(q->st);
    free(q);
}

static int rule_cmp(const void *a, const void *b) {
    return strcmp(((const srv_quota_rule *)a)->id, ((const srv_quota_rule *)b)->id);
}

static const srv_quota_rule *rule_for(const srv_quota *q, const char *id) {
    srv_quota_rule key;
    snprintf(key.id, sizeof key.id, "%s", id);
    const srv_quota_rule *r =
        q->n_rules ? bsearch(&key, q->rules, (size_t)q->n_rules, sizeof *q->rules, rule_cmp) : NULL;
    return r ? r : q->dflt;
}

static uint32_t id_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The state of id; create: make one (NULL when the table is full). */
static qstate *state_of(srv_quota *q, const char *id, int create) {
    uint32_t h = id_hash(id) & (QUOTA_SLOTS - 1);
    for (int probe = 0; probe < QUOTA_SLOTS; probe++, h = (h + 1) & (QUOTA_SLOTS - 1)) {
        qstate *s = &q->st[h];
        if (!s->id[0]) {
            if (!create || q->n_st >= QUOTA_SLOTS / 2)
                return NULL;
            snprintf(s->id, sizeof s->id, "%s", id);
            s->fresh = 1;
            q->n_st++;
            return s;
        }
        if (!strcmp(s->id, id))
            return s;
    }
    return NULL;
}

/* Brings both buckets of s up to now under rule r. */
static void refill(qstate *s, const srv_quota_rule *r, double now) {
    if (s->fresh) {
        s->req = (double)r->rpm;
        s->tok = (double)r->tpm;
        s->t = now;
        s->fresh = 0;
        return;
    }
    double dt = now > s->t ? now - s->t : 0;
    s->t = now > s->t ? now : s->t;
    if (r->rpm)
        s->req = fmin((double)r->rpm, s->req + dt * (double)r->rpm / r->window_s);
    if (r->tpm)
        s->tok = fmin((double)r->tpm, s->tok + dt * (double)r->tpm / r->window_s);
}

int srv_quota_set_rules(srv_quota *q, const srv_quota_rule *rules, int n, double now) {
    srv_quota_rule *copy = NULL;
    if (n > 0) {
        copy = brisk_malloc((size_t)n * sizeof *copy);
        if (!copy)
            return BRISK_ENOMEM;
        memcpy(copy, rules, (size_t)n * sizeof *copy);
        qsort(copy, (size_t)n, sizeof *copy, rule_cmp);
    }
    /* Bring every bucket up to now under its old rule before the sizes change. */
    for (int i = 0; i < QUOTA_SLOTS; i++)
        if (q->st[i].id[0]) {
            const srv_quota_rule *r = rule_for(q, q->st[i].id);
            if (r)
                refill(&q->st[i], r, now);
        }
    free(q->rules);
    q->rules = copy;
    q->n_rules = n;
    q->dflt = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(copy[i].id, "*"))
            q->dflt = &copy[i];
    for (int i = 0; i < QUOTA_SLOTS; i++) {
        qstate *s = &q->st[i];
        const srv_quota_rule *r = s->id[0] ? rule_for(q, s->id) : NULL;
        if (r && !s->fresh) {
            s->req = fmin(s->req, (double)r->rpm);
            s->tok = fmin(s->tok, (double)r->tpm);
        }
    }
    return 0;
}

int srv_quota_load_file(srv_quota *q, const char *path, double now, char *err, size_t err_len) {
    char *text, why[1024];
    size_t len;
    int rc = brisk_file_read(path, SRV_QUOTA_MAX_FILE_BYTES, NULL, &text, &len, why, sizeof why);
    if (rc < 0)
        return brisk_set_err(err, err_len, rc, "--limits-file: %s", why);
    srv_quota_rule *rules = NULL;
    int n = 0;
    rc = srv_quota_parse(text, len, &rules, &n, err, err_len);
    free(text);
    if (rc == 0 && (rc = srv_quota_set_rules(q, rules, n, now)) < 0)
        brisk_set_err(err, err_len, rc, "--limits-file: out of memory");
    free(rules);
    return rc;
}

/* ---- admission ---------------------------------------------------------------------- */

static void fill_verdict(srv_quota_verdict *v, const srv_quota_rule *r, const qstate *s) {
    double rq = (double)r->rpm / r->window_s, rt = (double)r->tpm / r->window_s;
    v->limit_requests = r->rpm ? r->rpm : -1;
    v->limit_tokens = r->tpm ? r->tpm : -1;
    v->remaining_requests = r->rpm ? (long long)fmax(0, floor(s->req)) : -1;
    v->remaining_tokens = r->tpm ? (long long)fmax(0, floor(s->tok)) : -1;
    v->reset_requests_s = r->rpm ? fmax(0, ((double)r->rpm - s->req) / rq) : 0;
    v->reset_tokens_s = r->tpm ? fmax(0, ((double)r->tpm - s->tok) / rt) : 0;
}

void srv_quota_admit(srv_quota *q, const char *id, long long prompt_tokens, double now,
                     srv_quota_verdict *v) {
    memset(v, 0, sizeof *v);
    v->ok = 1;
    const srv_quota_rule *r = id && q ? rule_for(q, id) : NULL;
    if (!r || (!r->rpm && !r->tpm && !r->concurrency))
        return;
    qstate *s = state_of(q, id, 1);
    if (!s) /* cannot happen with at most SRV_KEYS_MAX keys; never lock a key out */
        return;
    v->limited = 1;
    refill(s, r, now);
    if (r->concurrency && s->running >= r->concurrency) {
        v->ok = 0;
        v->which = "concurrency";
        v->retry_after_s = 1.0;
    } else if (r->rpm && s->req < 1.0) {
        v->ok = 0;
        v->which = "requests";
        v->retry_after_s = (1.0 - s->req) * r->window_s / (double)r->rpm;
    } else if (r->tpm && prompt_tokens > r->tpm) {
        v->ok = 0;
        v->too_large = 1;
        v->which = "tokens";
    } else if (r->tpm && s->tok < (double)prompt_tokens) {
        v->ok = 0;
        v->which = "tokens";
        v->retry_after_s = ((double)prompt_tokens - s->tok) * r->window_s / (double)r->tpm;
    }
    if (v->ok) {
        if (r->rpm)
            s->req -= 1.0;
        if (r->tpm)
            s->tok -= (double)prompt_tokens;
        s->running++;
    }
    fill_verdict(v, r, s);
}

void srv_quota_peek(srv_quota *q, const char *id, double now, srv_quota_verdict *v) {
    memset(v, 0, sizeof *v);
    v->ok = 1;
    const srv_quota_rule *r = id && q ? rule_for(q, id) : NULL;
    qstate *s = r && (r->rpm || r->tpm || r->concurrency) ? state_of(q, id, 1) : NULL;
    if (!s)
        return;
    v->limited = 1;
    refill(s, r, now);
    fill_verdict(v, r, s);
}

void srv_quota_charge(srv_quota *q, const char *id, long long tokens, double now) {
    const srv_quota_rule *r = id && q ? rule_for(q, id) : NULL;
    qstate *s = r && r->tpm ? state_of(q, id, 0) : NULL;
    if (!s)
        return;
    refill(s, r, now);
    s->tok -= (double)tokens;
}

void srv_quota_release(srv_quota *q, const char *id) {
    qstate *s = id && q ? state_of(q, id, 0) : NULL;
    if (s && s->running > 0)
        s->running--;
}

/* OpenAI's reset durations: "250ms", "12s", "6m0s". */
static void fmt_dur(double s, char *out, size_t cap) {
    if (s < 1.0)
        snprintf(out, cap, "%dms", (int)ceil(s * 1000.0));
    else if (s < 60.0)
        snprintf(out, cap, "%ds", (int)ceil(s));
    else
        snprintf(out, cap, "%dm%ds", (int)(ceil(s) / 60), (int)ceil(s) % 60);
}

void srv_quota_headers(const srv_quota_verdict *v, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    if (!v->limited)
        return;
    char d[32];
    if (v->limit_requests >= 0) {
        fmt_dur(v->reset_requests_s, d, sizeof d);
        k += (size_t)snprintf(out + k, cap - k,
                              "x-ratelimit-limit-requests: %lld\r\nx-ratelimit-remaining-requests: "
                              "%lld\r\nx-ratelimit-reset-requests: %s\r\n",
                              v->limit_requests, v->remaining_requests, d);
    }
    if (k < cap && v->limit_tokens >= 0) {
        fmt_dur(v->reset_tokens_s, d, sizeof d);
        k += (size_t)snprintf(out + k, cap - k,
                              "x-ratelimit-limit-tokens: %lld\r\nx-ratelimit-remaining-tokens: "
                              "%lld\r\nx-ratelimit-reset-tokens: %s\r\n",
                              v->limit_tokens, v->remaining_tokens, d);
    }
    if (k < cap && !v->ok && !v->too_large)
        snprintf(out + k, cap - k, "Retry-After: %d\r\nretry-after-ms: %d\r\n",
                 (int)fmax(1, ceil(v->retry_after_s)), (int)ceil(v->retry_after_s * 1000.0));
}

int srv_quota_priority(const srv_quota *q, const char *id, int requested, int has_requested) {
    const srv_quota_rule *r = id && q ? rule_for(q, id) : NULL;
    int p = has_requested ? requested : r && r->has_priority ? r->priority : 0;
    if (r && r->has_priority_floor && p < r->priority_floor)
        p = r->priority_floor;
    return p;
}
