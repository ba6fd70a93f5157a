/* srv_grammar.h - compiled grammars by their text: a small least-recently-
 * used cache on the loop thread, so requests repeating a constraint (a
 * client's fixed schema, a guided_choice) compile it once.
 *
 * Threads: the loop thread alone calls these. The grammars it hands out are
 * reference-counted and immutable: the engine thread holds its own
 * references (models/grammar.h). */
#ifndef SRV_GRAMMAR_H
#define SRV_GRAMMAR_H

#include <stddef.h>

#include "models/grammar.h"

typedef struct srv_grammar_cache srv_grammar_cache;

/* cap entries (>= 1). NULL on out of memory. */
srv_grammar_cache *srv_grammar_cache_create(int cap);
void srv_grammar_cache_free(srv_grammar_cache *c);

/* A new reference to the grammar of text[0, len): from the cache, else
 * compiled now (and cached). On failure returns NULL, sets *rc (BRISK_EINVAL
 * for a bad grammar, BRISK_ENOMEM) and writes a one-line reason to err. */
model_grammar *srv_grammar_get(srv_grammar_cache *c, const char *text, size_t len, int *rc,
                               char *err, size_t err_len);

/* Lookups so far, and those answered from the cache (tests, metrics). */
void srv_grammar_cache_counts(const srv_grammar_cache *c, long long *lookups, long long *hits);

#endif
