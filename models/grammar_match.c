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

void model_grammar_vocab_free(model_grammar_vocab *gv) {
    if (!gv)
        return;
    free(gv->node);
    free(gv->toks);
    free(gv->eog);
    free(gv->piece_off);
    free(gv->pieces);
    free(gv);
}

/* The trie is built as linked nodes (child and sibling lists, tokens by
 * their last node), then laid out in depth-first order: a walk then reads
 * the arrays almost in sequence, which matters when it visits most of a
 * 150,000-node trie (a JSON string's state): ~4x faster than following
 * the links. */
typedef struct vtrie {
    uint8_t *byte;
    int32_t *child, *sibling, *tok_first, *tok_next;
    int32_t n;
} vtrie;

static int vocab_layout(model_grammar_vocab *gv, const vtrie *t, int n_toks) {
    int32_t n = t->n;
    int32_t *order = brisk_malloc((size_t)n * sizeof *order);
    int32_t *stack = brisk_malloc(((size_t)gv->max_depth + 2) * sizeof *stack);
    int32_t *iter = brisk_malloc(((size_t)gv->max_depth + 2) * sizeof *iter);
    int32_t *newid = brisk_malloc((size_t)n * sizeof *newid);
    gv->node = brisk_malloc(((size_t)n + 1) * sizeof *gv->node);
    gv->toks = brisk_malloc(((size_t)n_toks + 1) * sizeof *gv->toks);
    int rc = order && stack && iter && newid && gv->node && gv->toks ? 0 : BRISK_ENOMEM;
    if (rc == 0) {
        int32_t k = 0, d = 0;
        stack[0] = 0;
        iter[0] = t->child[0];
        newid[0] = k;
        order[k++] = 0;
        while (d >= 0) {
            int32_t c = iter[d];
            if (c < 0) {
                gv->node[newid[stack[d]]].end = k;
                d--;
                continue;
            }
            iter[d] = t->sibling[c];
            newid[c] = k;
            order[k++] = c;
            stack[++d] = c;
            iter[d] = t->child[c];
        }
        int32_t at = 0;
        for (int32_t i = 0; i < n; i++) {
            gv->node[i].byte = t->byte[order[i]];
            gv->node[i].tok_off = at;
            for (int32_t id = t->tok_first[order[i]]; id >= 0; id = t->tok_next[id])
                gv->toks[at++] = id;
        }
        gv->node[n] = (gtnode){n, at, 0};
        gv->n_nodes = n;
    }
    free(order);
    free(stack);
    free(iter);
    free(newid);
    return rc;
}

model_grammar_vocab *model_grammar_vocab_create(const tok_vocab *v) {
    int nv = tok_n_vocab(v);
    vtrie t = {0};
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
    t.byte = brisk_malloc(cap);
    t.child = brisk_malloc(cap * sizeof *t.child);
    t.sibling = brisk_malloc(cap * sizeof *t.sibling);
    t.tok_first = brisk_malloc(cap * sizeof *t.tok_first);
    t.tok_next = brisk_malloc((size_t)nv * sizeof *t.tok_next);
    gv->eog = brisk_malloc((size_t)nv * sizeof *gv->eog);
    gv->piece_off = brisk_malloc(((size_t)nv + 1) * sizeof *gv->piece_off);
    gv->pieces = brisk_malloc(total);
    if (!t.byte || !t.child || !t.sibling || !t.tok_first || !t.tok_next || !gv->eog ||
        !gv->piece_off || !gv->pieces || total > 0x7fffffffu)
        goto fail;
    uint32_t at_piece = 0;
    int n_toks = 0;
    t.n = 1;
    t.byte[0] = 0;
    t.child[0] = t.sibling[0] = t.tok_first[0] = -1;
    for (int id = 0; id < nv; id++) {
        t.tok_next[id] = -1;
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
            int32_t ch = t.child[at];
            while (ch >= 0 && t.byte[ch] != c)
                ch = t.sibling[ch];
            if (ch < 0) {
                ch = t.n++;
                t.byte[ch] = c;
                t.child[ch] = t.tok_first[ch] = -1;
                t.sibling[ch] = t.child[at];
                t.child[at] = ch;
            }
            at = ch;
        }
        t.tok_next[id] = t.tok_first[at];
        t.tok_first[at] = id;
        n_toks++;
        if (n > gv->max_depth)
            gv->max_depth = n;
    }
    gv->piece_off[nv] = at_piece;
    if (vocab_layout(gv, &t, n_toks) < 0)
        goto fail;
    free(t.byte);
    free(t.child);
    free(t.sibling);
    free(t.tok_first);
    free(t.tok_next);
    return gv;
fail:
    free(t.byte);
    free(t.child);
    free(t.sibling);
    free(t.tok_first);
    free(t.tok_next);
    model_grammar_vocab_free(gv);
    return NULL;
}

/* ---- matcher ------------------------------------------------------------------------- */

int32_t gmatch_node_new(model_grammar_matcher *m, int32_t pos, int32_t parent) {
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

int gmatch_set_push(model_grammar_matcher *m, int32_t s) {
    if (brisk_grow(&m->sets, &m->cap_sets, m->n_sets + 1, sizeof *m->sets, 256, 0) < 0)
        return BRISK_ENOMEM;
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
        m->steps++;
        s = m->work[--n_work];
        int rc;
        if (s < 0) { /* the bottom: complete (-1), or a cut-off stack's context */
            if ((rc = set_add(m, off, s)) < 0)
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
        if (g->elems[p + 1].type != GE_END && (cont = gmatch_node_new(m, p + 1, parent)) < -1)
            return BRISK_ENOMEM;
        int32_t a0 = g->rule_alt[e->arg], a1 = g->rule_alt[e->arg + 1];
        if (brisk_grow(&m->work, &m->cap_work, n_work + (size_t)(a1 - a0), sizeof *m->work, 64, 0) <
            0)
            return BRISK_ENOMEM;
        for (int32_t a = a1 - 1; a >= a0; a--) {
            int32_t ns = gmatch_node_new(m, g->alt_start[a], cont);
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
    m->steps += (long long)n;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[in + i];
        if (s < 0)
            continue;
        int32_t p = m->nodes[s].pos;
        if (!gset_match(g, g->elems[p].arg, cp))
            continue;
        int32_t ns = gmatch_node_new(m, p + 1, m->nodes[s].parent);
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
static int partial_viable(model_grammar_matcher *m, size_t in, size_t n, const gutf8 *u) {
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = u->part << (6 * u->need), hi = lo | ((1u << (6 * u->need)) - 1);
    if (lo < min[u->len])
        lo = min[u->len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return 0;
    m->steps += (long long)n;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[in + i];
        if (s >= 0 && gset_meets(m->g, m->g->elems[m->nodes[s].pos].arg, lo, hi))
            return 1;
    }
    return 0;
}

/* One byte from a state (grammar_internal.h). */
int gmatch_advance_byte(model_grammar_matcher *m, size_t in, size_t n, gutf8 *u, uint8_t b,
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
    m->max_work = lim->max_work > 0 ? lim->max_work : 1;
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
        int32_t s = gmatch_node_new(m, g->alt_start[a], -1);
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
    free(m->key);
    free(m->sort);
    free(m->tkey);
    free(m->toff);
    free(m->esc);
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

/* Advances a copy of the state over bytes: 1 (the set at *off, *cnt, UTF-8
 * state *u), 0 if they leave the grammar, or a negative code; BRISK_ERANGE
 * when it took more than max_work units (the same count on every machine). */
static int advance_bytes(model_grammar_matcher *m, const char *bytes, size_t n, size_t *off,
                         size_t *cnt, gutf8 *u) {
    long long start = m->steps;
    int rc = 1;
    *off = 0;
    *cnt = m->n_cur;
    *u = m->u;
    for (size_t i = 0; i < n && rc > 0; i++) {
        rc = gmatch_advance_byte(m, *off, *cnt, u, (uint8_t)bytes[i], off, cnt);
        if (rc >= 0 && m->steps - start > m->max_work)
            rc = BRISK_ERANGE;
    }
    m->last_work = m->steps - start;
    return rc;
}

int model_grammar_accept_bytes(model_grammar_matcher *m, const char *bytes, size_t n) {
    size_t node_mark = m->n_nodes, off = 0, cnt = 0;
    gutf8 u;
    int rc = advance_bytes(m, bytes, n, &off, &cnt, &u);
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
    size_t node_mark = m->n_nodes, off = 0, cnt = 0;
    gutf8 u;
    int rc = advance_bytes(m, bytes, n, &off, &cnt, &u);
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
