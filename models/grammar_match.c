/* grammar_match.c - the matcher of a compiled grammar and the token masks
 * (see grammar.h).
 *
 * State: a set of parse stacks, each a persistent linked list of element
 * positions (the top is the next character class to match; below it, where
 * to go on when a rule ends) in an arena of nodes, plus the bytes of a
 * UTF-8 character begun but not finished. The stack -1 is the empty one:
 * the grammar is complete there. Advancing over a code point keeps the
 * stacks whose top class holds it, moves each past that class and expands
 * it (rule references push their alternatives, rule ends pop) until every
 * top is a class again; a reference in tail position pushes nothing, so
 * right recursion (repetitions) does not grow the stacks.
 *
 * Masks: the vocabulary is a trie of token bytes, walked depth first from
 * the current state; a branch ends where no stack survives its bytes, so
 * the walk visits only the prefixes the grammar allows. Nodes and sets made
 * during the walk live above a mark in the arenas and are dropped on the way
 * back. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/grammar_internal.h"

/* ---- the vocabulary trie ---------------------------------------------------------- */

struct model_grammar_vocab {
    int n_vocab;
    int32_t n_nodes;
    uint8_t *byte;      /* [n_nodes]: the byte leading into the node */
    int32_t *child;     /* first child, -1 none */
    int32_t *sibling;   /* next sibling, -1 none */
    int32_t *tok_first; /* first token whose bytes end here, -1 none */
    int32_t *tok_next;  /* [n_vocab] */
    int32_t *eog;       /* end-of-generation ids */
    int n_eog;
    uint32_t *piece_off; /* [n_vocab + 1]: token id's bytes are pieces[off[id], off[id + 1]) */
    char *pieces;
    int max_depth; /* longest token in bytes */
};

void model_grammar_vocab_free(model_grammar_vocab *gv) {
    if (!gv)
        return;
    free(gv->byte);
    free(gv->child);
    free(gv->sibling);
    free(gv->tok_first);
    free(gv->tok_next);
    free(gv->eog);
    free(gv->piece_off);
    free(gv->pieces);
    free(gv);
}

model_grammar_vocab *model_grammar_vocab_create(const tok_vocab *v) {
    int nv = tok_n_vocab(v);
    model_grammar_vocab *gv = brisk_calloc(1, sizeof *gv);
    if (!gv || nv <= 0)
        goto fail;
    gv->n_vocab = nv;
    size_t cap = 0, total = 1;
    char buf[512];
    for (int id = 0; id < nv; id++) {
        int n = tok_token_to_piece(v, id, 0, buf, sizeof buf);
        if (n > 0 && n <= (int)sizeof buf)
            total += (size_t)n;
    }
    cap = total;
    gv->byte = brisk_malloc(cap);
    gv->child = brisk_malloc(cap * sizeof *gv->child);
    gv->sibling = brisk_malloc(cap * sizeof *gv->sibling);
    gv->tok_first = brisk_malloc(cap * sizeof *gv->tok_first);
    gv->tok_next = brisk_malloc((size_t)nv * sizeof *gv->tok_next);
    gv->eog = brisk_malloc((size_t)nv * sizeof *gv->eog);
    gv->piece_off = brisk_malloc(((size_t)nv + 1) * sizeof *gv->piece_off);
    gv->pieces = brisk_malloc(total);
    if (!gv->byte || !gv->child || !gv->sibling || !gv->tok_first || !gv->tok_next || !gv->eog ||
        !gv->piece_off || !gv->pieces || total > 0xffffffffu)
        goto fail;
    uint32_t at_piece = 0;
    gv->n_nodes = 1;
    gv->byte[0] = 0;
    gv->child[0] = gv->sibling[0] = gv->tok_first[0] = -1;
    for (int id = 0; id < nv; id++) {
        gv->tok_next[id] = -1;
        gv->piece_off[id] = at_piece;
        if (tok_is_eog(v, id)) {
            gv->eog[gv->n_eog++] = id;
            continue;
        }
        int n = tok_token_to_piece(v, id, 0, buf, sizeof buf);
        if (n <= 0 || n > (int)sizeof buf)
            continue; /* no bytes (control tokens), or longer than any real one */
        memcpy(gv->pieces + at_piece, buf, (size_t)n);
        at_piece += (uint32_t)n;
        int32_t at = 0;
        for (int i = 0; i < n; i++) {
            uint8_t c = (uint8_t)buf[i];
            int32_t ch = gv->child[at];
            while (ch >= 0 && gv->byte[ch] != c)
                ch = gv->sibling[ch];
            if (ch < 0) {
                ch = gv->n_nodes++;
                gv->byte[ch] = c;
                gv->child[ch] = gv->tok_first[ch] = -1;
                gv->sibling[ch] = gv->child[at];
                gv->child[at] = ch;
            }
            at = ch;
        }
        gv->tok_next[id] = gv->tok_first[at];
        gv->tok_first[at] = id;
        if (n > gv->max_depth)
            gv->max_depth = n;
    }
    gv->piece_off[nv] = at_piece;
    return gv;
fail:
    model_grammar_vocab_free(gv);
    return NULL;
}

/* ---- matcher ------------------------------------------------------------------------- */

typedef struct gnode {
    int32_t pos, parent; /* parent: node index, -1 the bottom */
} gnode;

typedef struct gutf8 {
    uint32_t part; /* bits of the character so far */
    int need;      /* continuation bytes still to come (0: none pending) */
    int len;       /* the character's length in bytes */
} gutf8;

typedef struct gframe { /* one level of the trie walk */
    int32_t tnode, next_child;
    size_t set_off, set_n;
    gutf8 u;
    size_t node_mark, set_mark;
} gframe;

struct model_grammar_matcher {
    model_grammar *g;
    const model_grammar_vocab *gv;
    int max_stacks;
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
};

static int32_t node_new(model_grammar_matcher *m, int32_t pos, int32_t parent) {
    if (brisk_grow(&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes, 1024, 0) < 0 ||
        m->n_nodes >= 0x7fffffff)
        return BRISK_ENOMEM - 1000; /* below -1: an error, not a stack */
    m->nodes[m->n_nodes] = (gnode){pos, parent};
    return (int32_t)m->n_nodes++;
}

static uint64_t stack_hash(const model_grammar_matcher *m, int32_t s) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int d = 0; s >= 0 && d < 16; d++, s = m->nodes[s].parent)
        h = (h ^ (uint64_t)(uint32_t)m->nodes[s].pos) * 0x100000001b3ull;
    return h ^ (uint64_t)(s >= 0);
}

static int stack_eq(const model_grammar_matcher *m, int32_t a, int32_t b) {
    while (a >= 0 && b >= 0) {
        if (a == b)
            return 1;
        if (m->nodes[a].pos != m->nodes[b].pos)
            return 0;
        a = m->nodes[a].parent;
        b = m->nodes[b].parent;
    }
    return a == b;
}

/* Starts a set at the end of sets[]: returns its offset. */
static size_t set_begin(model_grammar_matcher *m) {
    if (++m->gen == 0) { /* wrapped: clear the stamps */
        memset(m->ht_gen, 0, m->ht_cap * sizeof *m->ht_gen);
        m->gen = 1;
    }
    return m->n_sets;
}

/* Adds stack s to the set begun at off unless there already. */
static int set_add(model_grammar_matcher *m, size_t off, int32_t s) {
    size_t mask = m->ht_cap - 1, i = (size_t)stack_hash(m, s) & mask;
    for (; m->ht_gen[i] == m->gen; i = (i + 1) & mask)
        if (stack_eq(m, m->sets[m->ht_idx[i]], s))
            return 0;
    if (m->n_sets - off >= (size_t)m->max_stacks)
        return BRISK_ERANGE;
    if (brisk_grow(&m->sets, &m->cap_sets, m->n_sets + 1, sizeof *m->sets, 256, 0) < 0)
        return BRISK_ENOMEM;
    m->ht_gen[i] = m->gen;
    m->ht_idx[i] = (int32_t)m->n_sets;
    m->sets[m->n_sets++] = s;
    return 0;
}

/* Expands stack s until every top is a character class; adds the results
 * to the set begun at off. */
static int expand(model_grammar_matcher *m, size_t off, int32_t s) {
    const model_grammar *g = m->g;
    size_t n_work = 0;
    long budget = 64L * m->max_stacks; /* bounds ambiguous expansions */
    if (brisk_grow(&m->work, &m->cap_work, 1, sizeof *m->work, 64, 0) < 0)
        return BRISK_ENOMEM;
    m->work[n_work++] = s;
    while (n_work > 0) {
        if (--budget < 0)
            return BRISK_ERANGE;
        s = m->work[--n_work];
        int rc;
        if (s < 0) {
            if ((rc = set_add(m, off, -1)) < 0)
                return rc;
            continue;
        }
        int32_t p = m->nodes[s].pos;
        const gelem *e = &g->elems[p];
        if (e->type == GE_SET) {
            if ((rc = set_add(m, off, s)) < 0)
                return rc;
            continue;
        }
        if (e->type == GE_END) {
            m->work[n_work++] = m->nodes[s].parent; /* room: the popped slot */
            continue;
        }
        int32_t parent = m->nodes[s].parent, cont = parent;
        if (g->elems[p + 1].type != GE_END && (cont = node_new(m, p + 1, parent)) < -1)
            return BRISK_ENOMEM;
        int32_t a0 = g->rule_alt[e->arg], a1 = g->rule_alt[e->arg + 1];
        if (brisk_grow(&m->work, &m->cap_work, n_work + (size_t)(a1 - a0), sizeof *m->work, 64, 0) <
            0)
            return BRISK_ENOMEM;
        for (int32_t a = a1 - 1; a >= a0; a--) {
            int32_t ns = node_new(m, g->alt_start[a], cont);
            if (ns < -1)
                return BRISK_ENOMEM;
            m->work[n_work++] = ns;
        }
    }
    return 0;
}

/* The set of stacks after code point cp from the set at [in, in + n):
 * appended to sets[], *out its offset. An empty result is a valid answer
 * (the code point is not allowed). */
static int advance_cp(model_grammar_matcher *m, size_t in, size_t n, uint32_t cp, size_t *out) {
    const model_grammar *g = m->g;
    size_t off = set_begin(m);
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[in + i];
        if (s < 0)
            continue;
        int32_t p = m->nodes[s].pos;
        if (!gset_match(g, g->elems[p].arg, cp))
            continue;
        int32_t ns = node_new(m, p + 1, m->nodes[s].parent);
        if (ns < -1)
            return BRISK_ENOMEM;
        int rc = expand(m, off, ns);
        if (rc < 0)
            return rc;
    }
    *out = off;
    return 0;
}

/* Whether some stack of the set can take a character beginning with the
 * pending bytes of u (the range of code points they can still become). */
static int partial_viable(const model_grammar_matcher *m, size_t in, size_t n, const gutf8 *u) {
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = u->part << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
    if (lo < min[u->len])
        lo = min[u->len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[in + i];
        if (s >= 0 && gset_meets(m->g, m->g->elems[m->nodes[s].pos].arg, lo, hi))
            return 1;
    }
    return 0;
}

/* One byte from state (set [in, in + n), u): the new set's offset and size
 * (the same set while a character is pending) and UTF-8 state. Returns 1 if
 * some stack survives (or the character may still complete), 0 if not, or
 * a negative code. */
static int advance_byte(model_grammar_matcher *m, size_t in, size_t n, gutf8 *u, uint8_t b,
                        size_t *out, size_t *out_n) {
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t cp;
    if (u->need == 0) {
        if (b < 0x80) {
            cp = b;
        } else {
            int len = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
            if (len == 0)
                return 0;
            u->part = b & (0x7Fu >> len);
            u->need = len - 1;
            u->len = len;
            *out = in;
            *out_n = n;
            return partial_viable(m, in, n, u);
        }
    } else {
        if ((b & 0xC0) != 0x80)
            return 0;
        u->part = u->part << 6 | (b & 0x3Fu);
        if (--u->need > 0) {
            *out = in;
            *out_n = n;
            return partial_viable(m, in, n, u);
        }
        cp = u->part;
        if (cp < min[u->len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    u->part = 0;
    u->len = 0;
    int rc = advance_cp(m, in, n, cp, out);
    if (rc < 0)
        return rc;
    *out_n = m->n_sets - *out;
    return *out_n > 0;
}

model_grammar_matcher *model_grammar_matcher_create(model_grammar *g, const model_grammar_vocab *gv,
                                                    const model_grammar_limits *lim) {
    model_grammar_limits dl = model_grammar_limits_default();
    if (!lim)
        lim = &dl;
    model_grammar_matcher *m = brisk_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = model_grammar_ref(g);
    m->gv = gv;
    m->max_stacks = lim->max_stacks > 0 ? lim->max_stacks : 1;
    m->ht_cap = 16;
    while (m->ht_cap < 2 * (size_t)m->max_stacks)
        m->ht_cap *= 2;
    m->ht_gen = brisk_calloc(m->ht_cap, sizeof *m->ht_gen);
    m->ht_idx = brisk_malloc(m->ht_cap * sizeof *m->ht_idx);
    m->frames = brisk_malloc(((size_t)(gv ? gv->max_depth : 0) + 2) * sizeof *m->frames);
    if (!m->ht_gen || !m->ht_idx || !m->frames) {
        model_grammar_matcher_free(m);
        return NULL;
    }
    /* The start: root's alternatives, expanded. */
    size_t off = set_begin(m);
    int32_t a0 = g->rule_alt[g->root], a1 = g->rule_alt[g->root + 1];
    for (int32_t a = a0; a < a1; a++) {
        int32_t s = node_new(m, g->alt_start[a], -1);
        if (s < -1 || expand(m, off, s) < 0) {
            model_grammar_matcher_free(m);
            return NULL;
        }
    }
    m->n_cur = m->n_sets;
    return m;
}

void model_grammar_matcher_free(model_grammar_matcher *m) {
    if (!m)
        return;
    model_grammar_unref(m->g);
    free(m->nodes);
    free(m->sets);
    free(m->work);
    free(m->ht_gen);
    free(m->ht_idx);
    free(m->frames);
    free(m->remap);
    free(m);
}

int model_grammar_complete(const model_grammar_matcher *m) {
    if (m->u.need)
        return 0;
    for (size_t i = 0; i < m->n_cur; i++)
        if (m->sets[i] < 0)
            return 1;
    return 0;
}

int model_grammar_finished(const model_grammar_matcher *m) {
    return model_grammar_complete(m) && m->n_cur == 1;
}

/* Copies the live stacks into a fresh arena when the old one is mostly
 * garbage (nodes made by accepted steps stay until then). */
static int compact(model_grammar_matcher *m) {
    if (m->n_nodes < 65536)
        return 0;
    if (brisk_grow(&m->remap, &m->cap_remap, m->n_nodes, sizeof *m->remap, 1024, 0) < 0)
        return BRISK_ENOMEM;
    gnode *fresh = brisk_malloc(m->n_nodes * sizeof *fresh);
    if (!fresh)
        return BRISK_ENOMEM;
    for (size_t i = 0; i < m->n_nodes; i++)
        m->remap[i] = -2;
    size_t n = 0;
    for (size_t i = 0; i < m->n_cur; i++) {
        int32_t s = m->sets[i];
        /* copy the chain bottom-up: walk to the first copied node (or the
         * bottom), then copy down to s */
        while (s >= 0 && m->remap[s] == -2) {
            int32_t t = s;
            while (m->nodes[t].parent >= 0 && m->remap[m->nodes[t].parent] == -2)
                t = m->nodes[t].parent;
            int32_t par = m->nodes[t].parent;
            fresh[n] = (gnode){m->nodes[t].pos, par >= 0 ? m->remap[par] : -1};
            m->remap[t] = (int32_t)n++;
        }
        if (s >= 0)
            m->sets[i] = m->remap[s];
    }
    free(m->nodes);
    m->nodes = fresh;
    m->cap_nodes = m->n_nodes;
    m->n_nodes = n;
    return 0;
}

int model_grammar_accept_bytes(model_grammar_matcher *m, const char *bytes, size_t n) {
    size_t node_mark = m->n_nodes, off = 0, cnt = m->n_cur;
    gutf8 u = m->u;
    int rc = 1;
    for (size_t i = 0; i < n && rc > 0; i++)
        rc = advance_byte(m, off, cnt, &u, (uint8_t)bytes[i], &off, &cnt);
    if (rc <= 0) {
        m->n_nodes = node_mark;
        m->n_sets = m->n_cur;
        return rc < 0 ? rc : BRISK_EINVAL;
    }
    /* the final set becomes the state */
    memmove(m->sets, m->sets + off, cnt * sizeof *m->sets);
    m->n_sets = m->n_cur = cnt;
    m->u = u;
    return compact(m);
}

int model_grammar_allows_bytes(model_grammar_matcher *m, const char *bytes, size_t n) {
    size_t node_mark = m->n_nodes, off = 0, cnt = m->n_cur;
    gutf8 u = m->u;
    int rc = 1;
    for (size_t i = 0; i < n && rc > 0; i++)
        rc = advance_byte(m, off, cnt, &u, (uint8_t)bytes[i], &off, &cnt);
    m->n_nodes = node_mark;
    m->n_sets = m->n_cur;
    return rc;
}

int model_grammar_accept(model_grammar_matcher *m, int32_t id) {
    const model_grammar_vocab *gv = m->gv;
    if (!gv || id < 0 || id >= gv->n_vocab)
        return BRISK_EINVAL;
    for (int i = 0; i < gv->n_eog; i++)
        if (gv->eog[i] == id)
            return model_grammar_complete(m) ? 0 : BRISK_EINVAL;
    uint32_t a = gv->piece_off[id], b = gv->piece_off[id + 1];
    if (a == b)
        return BRISK_EINVAL; /* no bytes: never allowed under a grammar */
    return model_grammar_accept_bytes(m, gv->pieces + a, b - a);
}

/* ---- the mask cache ------------------------------------------------------------------
 *
 * A mask depends only on the state: the set of stacks (as position
 * sequences, in any order) and the pending UTF-8 bytes. The key is that
 * state written out exactly - stacks sorted - so equal keys mean equal masks;
 * its hash only finds the entry. States repeat constantly (inside a string,
 * between array items, the same key of every object), so most steps copy a
 * mask instead of walking the vocabulary. */

#define GMASK_ENTRIES 256

typedef struct gmask_entry {
    uint64_t hash;
    int32_t *key;
    size_t key_len;
    uint32_t *mask;
    int count;
    unsigned long long used;
} gmask_entry;

struct gmask_cache {
    const model_grammar_vocab *gv; /* the vocabulary the masks are for */
    gmask_entry e[GMASK_ENTRIES];
    int n;
    unsigned long long clock;
    long long lookups, hits;
};

void gmask_cache_free(struct gmask_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].mask);
    }
    free(c);
}

typedef struct gkey_stack {
    uint64_t hash;
    int32_t s;
} gkey_stack;

/* qsort has no context argument in C11: the matcher being sorted, per thread. */
static _Thread_local const model_grammar_matcher *g_sort_m;

static int cmp_stack(const void *a, const void *b) {
    const model_grammar_matcher *m = g_sort_m;
    const gkey_stack *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    int32_t p = x->s, q = y->s;
    while (p >= 0 && q >= 0) {
        if (m->nodes[p].pos != m->nodes[q].pos)
            return m->nodes[p].pos < m->nodes[q].pos ? -1 : 1;
        p = m->nodes[p].parent;
        q = m->nodes[q].parent;
    }
    return (p >= 0) - (q >= 0);
}

/* The state's exact key (malloc'd, *len ints) and its hash; NULL on out of
 * memory. Layout: the UTF-8 state, then each stack's positions top to
 * bottom ended by -1, stacks in sorted order (the empty stack is just -1). */
static int32_t *state_key(const model_grammar_matcher *m, size_t *len, uint64_t *hash) {
    size_t n = m->n_cur, total = 3;
    gkey_stack *st = malloc((n ? n : 1) * sizeof *st);
    if (!st)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[i];
        uint64_t h = 1469598103934665603ull;
        for (; s >= 0; s = m->nodes[s].parent, total++)
            h = (h ^ (uint64_t)(uint32_t)m->nodes[s].pos) * 0x100000001b3ull;
        total++;
        st[i] = (gkey_stack){h, m->sets[i]};
    }
    g_sort_m = m;
    qsort(st, n, sizeof *st, cmp_stack);
    int32_t *k = malloc(total * sizeof *k);
    if (!k) {
        free(st);
        return NULL;
    }
    size_t j = 0;
    k[j++] = (int32_t)m->u.part;
    k[j++] = m->u.need;
    k[j++] = m->u.len;
    for (size_t i = 0; i < n; i++) {
        for (int32_t s = st[i].s; s >= 0; s = m->nodes[s].parent)
            k[j++] = m->nodes[s].pos;
        k[j++] = -1;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < j; i++)
        h = (h ^ (uint64_t)(uint32_t)k[i]) * 0x100000001b3ull;
    free(st);
    *len = j;
    *hash = h;
    return k;
}

static int mask_walk(model_grammar_matcher *m, uint32_t *mask);

int model_grammar_mask(model_grammar_matcher *m, uint32_t *mask) {
    const model_grammar_vocab *gv = m->gv;
    if (!gv)
        return BRISK_EINVAL;
    size_t words = ((size_t)gv->n_vocab + 31) / 32, key_len = 0;
    uint64_t hash = 0;
    int32_t *key = state_key(m, &key_len, &hash);
    if (!key)
        return BRISK_ENOMEM;
    model_grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    if (g->cache && g->cache->gv != gv) {
        gmask_cache_free(g->cache);
        g->cache = NULL;
    }
    if (!g->cache && (g->cache = calloc(1, sizeof *g->cache)))
        g->cache->gv = gv;
    struct gmask_cache *c = g->cache;
    if (c) {
        c->lookups++;
        for (int i = 0; i < c->n; i++) {
            gmask_entry *en = &c->e[i];
            if (en->hash == hash && en->key_len == key_len &&
                !memcmp(en->key, key, key_len * sizeof *key)) {
                memcpy(mask, en->mask, words * sizeof *mask);
                en->used = ++c->clock;
                c->hits++;
                int count = en->count;
                pthread_mutex_unlock(&g->mu);
                free(key);
                return count;
            }
        }
    }
    pthread_mutex_unlock(&g->mu);
    int count = mask_walk(m, mask);
    if (count < 0) {
        free(key);
        return count;
    }
    uint32_t *copy = malloc(words * sizeof *copy);
    pthread_mutex_lock(&g->mu);
    if (c && copy) {
        int slot = c->n;
        if (c->n == GMASK_ENTRIES) {
            slot = 0;
            for (int i = 1; i < c->n; i++)
                if (c->e[i].used < c->e[slot].used)
                    slot = i;
            free(c->e[slot].key);
            free(c->e[slot].mask);
        } else {
            c->n++;
        }
        memcpy(copy, mask, words * sizeof *copy);
        c->e[slot] = (gmask_entry){hash, key, key_len, copy, count, ++c->clock};
        key = NULL;
        copy = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    free(key);
    free(copy);
    return count;
}

void model_grammar_cache_counts(model_grammar *g, long long *lookups, long long *hits) {
    pthread_mutex_lock(&g->mu);
    *lookups = g->cache ? g->cache->lookups : 0;
    *hits = g->cache ? g->cache->hits : 0;
    pthread_mutex_unlock(&g->mu);
}

/* The walk itself: every token whose bytes the state can take. */
static int mask_walk(model_grammar_matcher *m, uint32_t *mask) {
    const model_grammar_vocab *gv = m->gv;
    memset(mask, 0, (((size_t)gv->n_vocab + 31) / 32) * sizeof *mask);
    int count = 0;
    if (model_grammar_complete(m))
        for (int i = 0; i < gv->n_eog; i++, count++)
            mask[gv->eog[i] >> 5] |= 1u << (gv->eog[i] & 31);
    gframe *f = m->frames;
    int depth = 0;
    f[0] = (gframe){0, gv->child[0], 0, m->n_cur, m->u, m->n_nodes, m->n_sets};
    int rc = 0;
    while (depth >= 0 && rc >= 0) {
        gframe *fr = &f[depth];
        int32_t c = fr->next_child;
        if (c < 0) { /* done with this node: drop what its children made */
            m->n_nodes = fr->node_mark;
            m->n_sets = fr->set_mark;
            depth--;
            continue;
        }
        fr->next_child = gv->sibling[c];
        size_t node_mark = m->n_nodes, set_mark = m->n_sets, off = 0, n = 0;
        gutf8 u = fr->u;
        rc = advance_byte(m, fr->set_off, fr->set_n, &u, gv->byte[c], &off, &n);
        if (rc <= 0) {
            m->n_nodes = node_mark;
            m->n_sets = set_mark;
            continue;
        }
        for (int32_t t = gv->tok_first[c]; t >= 0; t = gv->tok_next[t], count++)
            mask[t >> 5] |= 1u << (t & 31);
        /* Deeper only if some stack can take more bytes. */
        int more = u.need > 0;
        for (size_t i = 0; i < n && !more; i++)
            more = m->sets[off + i] >= 0;
        if (more && gv->child[c] >= 0 && depth + 1 <= gv->max_depth) {
            f[++depth] = (gframe){c, gv->child[c], off, n, u, node_mark, set_mark};
        } else {
            m->n_nodes = node_mark;
            m->n_sets = set_mark;
        }
    }
    m->n_nodes = f[0].node_mark;
    m->n_sets = m->n_cur;
    return rc < 0 ? rc : count;
}
