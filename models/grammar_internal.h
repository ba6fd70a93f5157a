/* grammar_internal.h - the compiled form of a GBNF grammar, shared by the
 * compiler (grammar.c) and the matcher (grammar_match.c).
 *
 * A grammar is a flat array of elements. Each alternative of each rule is a
 * run of GE_SET and GE_RULE elements ended by one GE_END; alt_start[a] is
 * where alternative a begins, rule r owns alternatives [rule_alt[r],
 * rule_alt[r + 1]). A GE_SET names a character class: ranges [first, first
 * + n) of the ranges array, negated or not. Repetition operators were
 * rewritten into rules by the compiler. */
#ifndef MODEL_GRAMMAR_INTERNAL_H
#define MODEL_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "models/grammar.h"

enum { GE_END = 0, GE_RULE = 1, GE_SET = 2 };

typedef struct gelem {
    uint8_t type;
    int32_t arg; /* GE_RULE: rule id; GE_SET: set id */
} gelem;

typedef struct grange {
    uint32_t lo, hi; /* inclusive code points */
} grange;

typedef struct gset {
    int32_t first, n; /* ranges */
    uint8_t negated;
} gset;

struct model_grammar {
    atomic_int refs;
    gelem *elems;
    int n_elems;
    int32_t *alt_start; /* [n_alts] */
    int n_alts;
    int32_t *rule_alt; /* [n_rules + 1] */
    int n_rules;
    grange *ranges;
    int n_ranges;
    gset *sets;
    int n_sets;
    int root;
    /* Masks already computed, by exact state (grammar_match.c): shared by
     * every matcher of this grammar, under mu. */
    pthread_mutex_t mu;
    struct gmask_cache *cache;
};

/* Frees the mask cache (grammar_match.c). */
void gmask_cache_free(struct gmask_cache *c);

/* 1 if code point c is in set s of g. */
static inline int gset_match(const model_grammar *g, int32_t s, uint32_t c) {
    const gset *cs = &g->sets[s];
    int in = 0;
    for (int i = 0; i < cs->n && !in; i++)
        in = c >= g->ranges[cs->first + i].lo && c <= g->ranges[cs->first + i].hi;
    return in != cs->negated;
}

/* 1 if set s of g holds some code point in [lo, hi]. */
static inline int gset_meets(const model_grammar *g, int32_t s, uint32_t lo, uint32_t hi) {
    const gset *cs = &g->sets[s];
    if (!cs->negated) {
        for (int i = 0; i < cs->n; i++)
            if (g->ranges[cs->first + i].lo <= hi && g->ranges[cs->first + i].hi >= lo)
                return 1;
        return 0;
    }
    /* Negated: some point of [lo, hi] outside every range. Walk lo upwards
     * past the ranges covering it (ranges may overlap and are unsorted). */
    for (int moved = 1; moved && lo <= hi;) {
        moved = 0;
        for (int i = 0; i < cs->n; i++) {
            const grange *r = &g->ranges[cs->first + i];
            if (r->lo <= lo && r->hi >= lo) {
                if (r->hi >= hi)
                    return 0;
                lo = r->hi + 1;
                moved = 1;
            }
        }
    }
    return lo <= hi;
}

#endif
