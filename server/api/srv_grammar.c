/* srv_grammar.c - the compiled-grammar cache (see srv_grammar.h). A linear
 * scan: the cache holds a few dozen entries, and comparing lengths first
 * makes a miss cheap next to compiling. */
#include "server/api/srv_grammar.h"

#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"

typedef struct entry {
    char *text;
    size_t len;
    model_grammar *g; /* the cache's reference */
    unsigned long long used;
} entry;

struct srv_grammar_cache {
    entry *e;
    int cap, n;
    unsigned long long clock;
    long long lookups, hits;
};

srv_grammar_cache *srv_grammar_cache_create(int cap) {
    srv_grammar_cache *c = brisk_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cap = cap > 0 ? cap : 1;
    c->e = brisk_calloc((size_t)c->cap, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    return c;
}

void srv_grammar_cache_free(srv_grammar_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].text);
        model_grammar_unref(c->e[i].g);
    }
    free(c->e);
    free(c);
}

model_grammar *srv_grammar_get(srv_grammar_cache *c, const char *text, size_t len, int *rc,
                               char *err, size_t err_len) {
    c->lookups++;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].len == len && !memcmp(c->e[i].text, text, len)) {
            c->e[i].used = ++c->clock;
            c->hits++;
            *rc = 0;
            return model_grammar_ref(c->e[i].g);
        }
    model_grammar *g = NULL;
    *rc = model_grammar_compile(text, len, NULL, &g, err, err_len);
    if (*rc < 0)
        return NULL;
    char *copy = brisk_malloc(len + 1);
    if (!copy) /* served, not cached */
        return g;
    memcpy(copy, text, len);
    copy[len] = '\0';
    int slot = c->n;
    if (c->n == c->cap) { /* evict the least recently used */
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used)
                slot = i;
        free(c->e[slot].text);
        model_grammar_unref(c->e[slot].g);
    } else {
        c->n++;
    }
    c->e[slot] = (entry){copy, len, model_grammar_ref(g), ++c->clock};
    return g;
}

void srv_grammar_cache_counts(const srv_grammar_cache *c, long long *lookups, long long *hits) {
    *lookups = c->lookups;
    *hits = c->hits;
}
