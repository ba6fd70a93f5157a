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

struct gdfa;
struct gci_cache;

/* A stack cut off below its top nodes (grammar_walk.c's context-free walks)
 * ends in GNODE_CTX where a whole one ends in -1: expanding down to it means
 * the parse goes on in a context the walk does not see. In a set of stacks,
 * GNODE_CTX alone is such a stack popped to its cut. */
#define GNODE_CTX (-3)

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
    /* Masks already computed, by exact state (grammar_walk.c): shared by
     * every matcher of this grammar, under mu. */
    pthread_mutex_t mu;
    struct gmask_cache *cache;
    /* The byte automaton the mask walks build and share (grammar_walk.c),
     * under dfa_mu, which a walk holds from its start to its end. */
    pthread_mutex_t dfa_mu;
    struct gdfa *dfa;
    struct gci_cache *ci; /* the walks of cut-off states, under dfa_mu too */
};

/* Frees the mask cache, the automaton and the cut-off states' walks
 * (grammar_walk.c). */
void gmask_cache_free(struct gmask_cache *c);
void gdfa_free(struct gdfa *d);
void gci_cache_free(struct gci_cache *c);

/* ---- the matcher's insides, shared by grammar_match.c (state, advancing,
 * accepting) and grammar_walk.c (masks) ---------------------------------- */

/* A trie node: the byte leading into it, one past the last node of its
 * subtree, and where its tokens start in toks[] (they end where the next
 * node's start: node n_nodes is a sentinel). One array of these, not four,
 * so a walk that visits most of the trie reads one cache line for several
 * nodes. */
typedef struct gtnode {
    int32_t end, tok_off;
    uint32_t byte;
} gtnode;

/* The vocabulary as a trie of token bytes (see grammar.h), its nodes in
 * depth-first order: node 0 is the root; node i's children are i + 1 (when
 * i + 1 < end), then each next one at the previous one's end. */
struct model_grammar_vocab {
    int n_vocab;
    int32_t n_nodes;
    gtnode *node;  /* [n_nodes + 1] */
    int32_t *toks; /* token ids, grouped by the node they end at */
    int32_t *eog;  /* end-of-generation ids */
    int n_eog;
    uint32_t *piece_off; /* [n_vocab + 1]: token id's bytes are pieces[off[id], off[id + 1]) */
    char *pieces;
    int max_depth; /* longest token in bytes */
};

typedef struct gnode {
    int32_t pos, parent; /* parent: node index, -1 the bottom */
} gnode;

typedef struct gutf8 {
    uint32_t part; /* bits of the character so far */
    int need;      /* continuation bytes still to come (0: none pending) */
    int len;       /* the character's length in bytes */
} gutf8;

struct gdfa_state;

typedef struct gframe {         /* one level of the trie walk (grammar_walk.c) */
    int32_t next_child, end;    /* the node's next child to visit; one past its last */
    int32_t state;              /* the automaton's state here */
    int mat;                    /* 1: its stacks are in the arena: sets[set_off, + set_n) */
    struct gdfa_state *st;      /* the state itself */
    size_t set_off, set_n;      /* (mat only, as the three below) */
    gutf8 u;                    /* the pending UTF-8 bytes */
    size_t node_mark, set_mark; /* the arena before its stacks were put there */
    int in_esc;                 /* a walk of escapes: inside one's subtree */
} gframe;

typedef struct gkey_stack { /* sorting a state's stacks into its key */
    uint64_t hash;
    int32_t s;
} gkey_stack;

struct model_grammar_matcher {
    model_grammar *g;
    const model_grammar_vocab *gv;
    int max_stacks;
    long long max_work; /* work units one mask or one accepted token may take */
    long long steps;    /* work units counted so far (only differences matter) */
    long long last_work;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *sets; /* sets[0, n_cur) is the current state; scratch above */
    size_t n_sets, cap_sets;
    size_t n_cur;
    gutf8 u;
    int32_t *work;
    size_t cap_work;
    uint32_t *ht_gen; /* dedup table of one set under construction */
    int32_t *ht_idx;
    size_t ht_cap;
    uint32_t gen;
    gframe *frames;
    int32_t *remap; /* compaction scratch */
    size_t cap_remap;
    int32_t *key; /* a state's key under construction (grammar_walk.c) */
    size_t cap_key;
    gkey_stack *sort;
    size_t cap_sort;
    int32_t *tkey; /* a cut-off key's stacks before sorting (grammar_walk.c) */
    size_t cap_tkey;
    int32_t *toff; /* and where each starts */
    size_t cap_toff;
    int32_t *esc; /* the escapes a walk of a cut-off state records */
    size_t cap_esc, n_esc;
};

/* One byte from the state (set [in, in + n), u): the new set's offset and
 * size (the same set while a character is pending) and UTF-8 state. Returns
 * 1 if some stack survives (or the character may still complete), 0 if not,
 * or a negative code. Counts its work in m->steps: one unit per stack looked
 * at and per expansion step, the same whatever the order of the stacks. */
int gmatch_advance_byte(model_grammar_matcher *m, size_t in, size_t n, gutf8 *u, uint8_t b,
                        size_t *out, size_t *out_n);
/* A new node on top of parent: its index, or below -1 on out of memory. */
int32_t gmatch_node_new(model_grammar_matcher *m, int32_t pos, int32_t parent);
/* Appends stack s to sets[] without the duplicate check. 0 or BRISK_ENOMEM. */
int gmatch_set_push(model_grammar_matcher *m, int32_t s);

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
