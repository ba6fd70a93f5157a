/* srv_usage.h - usage accounting per API key id for /metrics (never the key):
 * requests by finish reason, prompt and generation tokens, and requests
 * refused by the key's limits (srv_quota.h), as Prometheus counters.
 *
 * Cardinality is bounded: the first SRV_USAGE_MAX_KEYS ids seen get their
 * own key_id label (ids come from the configured key set, so in practice
 * every configured key up to that cap); later ones share key_id="_other".
 * Requests without a key (auth off) are not counted here. Loop thread only. */
#ifndef SRV_USAGE_H
#define SRV_USAGE_H

#include <stddef.h>

#define SRV_USAGE_MAX_KEYS 256

typedef struct srv_usage_acct srv_usage_acct;

srv_usage_acct *srv_usage_create(void);
void srv_usage_free(srv_usage_acct *u);

/* A finished request of key id: finish is "stop", "length", "abort" or "error". */
void srv_usage_observe(srv_usage_acct *u, const char *id, const char *finish,
                       long long prompt_tokens, long long generation_tokens);
/* A request of key id refused by its limits; which: "requests", "tokens",
 * "concurrency". */
void srv_usage_limited(srv_usage_acct *u, const char *id, const char *which);

/* Appends the families to *text (malloc'd, *len bytes; realloc'd), each
 * sample labelled with label (e.g. `model_name="x"`, already escaped).
 * Returns 0, or BRISK_ENOMEM with *text untouched. */
int srv_usage_render_append(const srv_usage_acct *u, const char *label, char **text, size_t *len);

#endif
