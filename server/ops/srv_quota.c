/* srv_quota.c - per-key token buckets and the limits file (srv_quota.h). */
#include "server/ops/srv_quota.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"

/* ---- the limits file ---------------------------------------------------------------- */

static int id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* A whole decimal number in s[0, n) within [lo, hi]. */
static int parse_num(const char *s, size_t n, double lo, double hi, int integer, double *out) {
    if (n == 0 || n > 24)
        return -1;
    char buf[32];
    memcpy(buf, s, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!((buf[i] >= '0' && buf[i] <= '9') || (!integer && buf[i] == '.')))
            return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || end != buf + n || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* One non-comment line into r; 0, or -1 with why. */
static int parse_line(const char *s, size_t n, srv_quota_rule *r, const char **why) {
    memset(r, 0, sizeof *r);
    r->window_s = 60.0;
    size_t i = 0;
    while (i < n && s[i] != ' ' && s[i] != '\t')
        i++;
    if (i == 0 || i > 64) {
        *why = "the id must be 1 to 64 characters";
        return -1;
    }
    if (!(i == 1 && s[0] == '*'))
        for (size_t k = 0; k < i; k++)
            if (!id_char(s[k])) {
                *why = "the id must be '*' or of [A-Za-z0-9._-]";
                return -1;
            }
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
        if (!eq) {
            *why = "a field must be name=value";
            return -1;
        }
        size_t fl = (size_t)(eq - f), vl = i - a - fl - 1;
        static const char *const names[] = {"rpm",    "tpm",      "concurrency",
                                            "window", "priority", "priority_floor"};
        static const double hi[] = {1e9, 1e12, 1e6, 86400, 1e6, 1e6};
        int k = -1;
        for (int j = 0; j < 6; j++)
            if (strlen(names[j]) == fl && !memcmp(f, names[j], fl))
                k = j;
        if (k < 0) {
            *why = "unknown field (rpm, tpm, concurrency, window, priority and priority_floor "
                   "are known)";
            return -1;
        }
        if (seen & (1u << k)) {
            *why = "a field given twice";
            return -1;
        }
        seen |= 1u << k;
        double v;
        const char *num = eq + 1;
        int neg = k >= 4 && vl > 0 && num[0] == '-';
        if (parse_num(num + neg, vl - (size_t)neg, k >= 4 ? 0 : 1, hi[k], k != 3, &v) < 0) {
            *why = "a value out of range (rpm 1..1e9, tpm 1..1e12, concurrency 1..1e6, "
                   "window 1..86400 seconds, priorities -1e6..1e6)";
            return -1;
        }
        if (neg)
            v = -v;
        if (k == 0)
            r->rpm = (long long)v;
        else if (k == 1)
            r->tpm = (long long)v;
        else if (k == 2)
            r->concurrency = (long long)v;
        else if (k == 3)
            r->window_s = v;
        else if (k == 4)
            r->has_priority = 1, r->priority = (int)v;
        else
            r->has_priority_floor = 1, r->priority_floor = (int)v;
    }
    return 0;
}

int srv_quota_parse(const char *text, size_t len, srv_quota_rule **rules, int *n, char *err,
                    size_t err_len) {
    *rules = NULL;
    *n = 0;
    srv_quota_rule *out = NULL;
    int cnt = 0, cap = 0, line = 0;
    size_t i = 0;
    while (i < len) {
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
        for (size_t k = a; k < e; k++)
            if ((unsigned char)text[k] < 0x20 && text[k] != '\t') {
                free(out);
                return brisk_set_err(err, err_len, BRISK_EINVAL,
                                     "limits file: line %d: a control character", line);
            }
        if (cnt == SRV_QUOTA_MAX_RULES) {
            free(out);
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "limits file: line %d: more than %d rules", line,
                                 SRV_QUOTA_MAX_RULES);
        }
        if (cnt == cap) {
            int nc = cap ? 2 * cap : 16;
            srv_quota_rule *t = brisk_realloc(out, (size_t)nc * sizeof *t);
            if (!t) {
                free(out);
                return brisk_set_err(err, err_len, BRISK_ENOMEM, "limits file: out of memory");
            }
            out = t;
            cap = nc;
        }
        const char *why = NULL;
        if (parse_line(text + a, e - a, &out[cnt], &why) < 0) {
            free(out);
            return brisk_set_err(err, err_len, BRISK_EINVAL, "limits file: line %d: %s", line, why);
        }
        for (int k = 0; k < cnt; k++)
            if (!strcmp(out[k].id, out[cnt].id)) {
                free(out);
                return brisk_set_err(err, err_len, BRISK_EINVAL,
                                     "limits file: line %d: an id given twice", line);
            }
        cnt++;
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "--limits-file: cannot open '%s': %s", path,
                             strerror(errno));
    char *buf = brisk_malloc(SRV_QUOTA_MAX_FILE_BYTES + 1);
    if (!buf) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "--limits-file: out of memory");
    }
    size_t len = 0;
    ssize_t got;
    while (len <= SRV_QUOTA_MAX_FILE_BYTES &&
           (got = read(fd, buf + len, SRV_QUOTA_MAX_FILE_BYTES + 1 - len)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return brisk_set_err(err, err_len, BRISK_EIO, "--limits-file: cannot read '%s': %s",
                                 path, strerror(e));
        }
        len += (size_t)got;
    }
    close(fd);
    if (len > SRV_QUOTA_MAX_FILE_BYTES) {
        free(buf);
        return brisk_set_err(err, err_len, BRISK_EINVAL, "--limits-file: '%s' is over %d bytes",
                             path, SRV_QUOTA_MAX_FILE_BYTES);
    }
    srv_quota_rule *rules = NULL;
    int n = 0;
    int rc = srv_quota_parse(buf, len, &rules, &n, err, err_len);
    free(buf);
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
