/* srv_usage.c - per-key usage counters (srv_usage.h). */
#include "server/ops/srv_usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"

static const char *const FINISH[] = {"stop", "length", "abort", "error"};
static const char *const LIMIT[] = {"requests", "tokens", "concurrency"};
#define N_FINISH 4
#define N_LIMIT 3

typedef struct ukey {
    char id[72];
    long long requests[N_FINISH];
    long long prompt, generation;
    long long limited[N_LIMIT];
} ukey;

struct srv_usage_acct {
    ukey keys[SRV_USAGE_MAX_KEYS + 1]; /* the last one: "_other" */
    int n;
};

srv_usage_acct *srv_usage_create(void) {
    srv_usage_acct *u = brisk_calloc(1, sizeof *u);
    if (u)
        snprintf(u->keys[SRV_USAGE_MAX_KEYS].id, sizeof u->keys[0].id, "_other");
    return u;
}

void srv_usage_free(srv_usage_acct *u) {
    free(u);
}

static ukey *key_of(srv_usage_acct *u, const char *id) {
    if (!u || !id || !id[0])
        return NULL;
    for (int i = 0; i < u->n; i++)
        if (!strcmp(u->keys[i].id, id))
            return &u->keys[i];
    if (u->n == SRV_USAGE_MAX_KEYS)
        return &u->keys[SRV_USAGE_MAX_KEYS];
    ukey *k = &u->keys[u->n++];
    snprintf(k->id, sizeof k->id, "%s", id);
    return k;
}

static int index_of(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

void srv_usage_observe(srv_usage_acct *u, const char *id, const char *finish,
                       long long prompt_tokens, long long generation_tokens) {
    ukey *k = key_of(u, id);
    if (!k)
        return;
    int f = index_of(FINISH, N_FINISH, finish);
    k->requests[f < 0 ? N_FINISH - 1 : f]++;
    k->prompt += prompt_tokens > 0 ? prompt_tokens : 0;
    k->generation += generation_tokens > 0 ? generation_tokens : 0;
}

void srv_usage_limited(srv_usage_acct *u, const char *id, const char *which) {
    ukey *k = key_of(u, id);
    int w = index_of(LIMIT, N_LIMIT, which);
    if (k && w >= 0)
        k->limited[w]++;
}

int srv_usage_render_append(const srv_usage_acct *u, const char *label, char **text, size_t *len) {
    if (!u)
        return 0;
    int n_rows = u->n;
    int other = 0;
    const ukey *o = &u->keys[SRV_USAGE_MAX_KEYS];
    for (int f = 0; f < N_FINISH; f++)
        other |= o->requests[f] != 0;
    for (int w = 0; w < N_LIMIT; w++)
        other |= o->limited[w] != 0;
    brisk_buf b = {0};
    brisk_buf_put(&b, *text, *len);
    static const char *const fam[][3] = {
        {"brisk_key_requests_total", "Finished requests per API key id, by finish reason.", "f"},
        {"brisk_key_prompt_tokens_total", "Prompt tokens of finished requests per API key id.",
         "p"},
        {"brisk_key_generation_tokens_total",
         "Generated tokens of finished requests per API key id.", "g"},
        {"brisk_key_rate_limited_total",
         "Requests refused by the key's limits (--limits-file), by the limit that ran out.", "l"},
    };
    for (int i = 0; i < 4; i++) {
        brisk_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n", fam[i][0], fam[i][1], fam[i][0]);
        for (int r = 0; r <= SRV_USAGE_MAX_KEYS; r++) {
            if (r >= n_rows && r < SRV_USAGE_MAX_KEYS)
                continue;
            if (r == SRV_USAGE_MAX_KEYS && !other)
                continue;
            const ukey *k = &u->keys[r];
            char c = fam[i][2][0];
            if (c == 'f')
                for (int f = 0; f < N_FINISH; f++)
                    brisk_buf_printf(&b, "%s{%s,key_id=\"%s\",finished_reason=\"%s\"} %lld\n",
                                     fam[i][0], label, k->id, FINISH[f], k->requests[f]);
            else if (c == 'l')
                for (int w = 0; w < N_LIMIT; w++)
                    brisk_buf_printf(&b, "%s{%s,key_id=\"%s\",limit=\"%s\"} %lld\n", fam[i][0],
                                     label, k->id, LIMIT[w], k->limited[w]);
            else
                brisk_buf_printf(&b, "%s{%s,key_id=\"%s\"} %lld\n", fam[i][0], label, k->id,
                                 c == 'p' ? k->prompt : k->generation);
        }
    }
    size_t n = 0;
    char *t = brisk_buf_take(&b, &n);
    if (!t)
        return BRISK_ENOMEM;
    free(*text);
    *text = t;
    *len = n;
    return 0;
}
