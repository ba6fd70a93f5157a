/* grammar_walk.c - token masks (model_grammar_mask, see grammar.h): a walk of
 * the vocabulary's trie from the matcher's state, two caches that make it
 * cheap, and the work it may take.
 *
 * The walk: depth first over the trie of token bytes; a branch ends where
 * no stack survives its bytes, so only the prefixes the grammar allows are
 * visited, and every token ending at a visited node is allowed.
 *
 * The mask cache: a mask depends only on the state (the set of stacks as
 * position sequences, in any order, and the pending UTF-8 bytes). The key is
 * that state written out exactly, stacks sorted, so equal keys mean equal
 * masks; its hash only finds the entry. States repeat constantly (inside a
 * string, between array items, the same key of every object), so most steps
 * copy a mask instead of walking.
 *
 * The automaton: what the walk does at each trie node is advance a set of
 * stacks over one byte, and the same (state, byte) pairs come back over and
 * over: within one walk (every letter inside a JSON string leads to the same
 * state) and across walks (the walk from the state after one more character
 * of a bounded string meets the states the previous walk met one level
 * down). So each grammar keeps a byte automaton built lazily, as a lazy DFA
 * is: its states are interned exact states (the key above), each with the
 * 256 transitions computed so far. A walk follows transitions that exist
 * (an array load), and computes only the missing ones on the stacks,
 * materialized in the matcher's arena from the key when needed. A first
 * walk over a JSON string state computes a few thousand transitions instead
 * of advancing stacks at each of ~150,000 trie nodes, and the walks after
 * it mostly only read. Everything the automaton holds is independent of the
 * sequence that computed it, and shared by every sequence of the grammar.
 *
 * Context-free walks: a state is first cut to the top GCUT_DEPTH nodes of
 * its stacks, and the walk of that cut state (kept per cut state) gives the
 * tokens its top decides and the trie nodes where it needs the stack below;
 * only those subtrees are walked from the whole state (see "context-free
 * walks" below). States that differ only below the cut - the same string in
 * every item of an array - share the big walk.
 *
 * Work, and its limit: a walk counts units as a walk with an empty automaton
 * of its own would do them: one per trie node visited, each transition's own
 * cost (matcher steps) the first time the walk uses it, and 512 for each
 * automaton state it meets first (a state's memory is 2.3 KB, so the limit
 * also bounds what a walk can add). The count is therefore the same whether
 * other sequences filled the automaton before or not, on every machine and
 * under any load; a walk past the matcher's max_work stops with
 * BRISK_ERANGE, and the mask cache keeps each mask's count, so a cached
 * mask is judged by the same number as a computed one.
 *
 * Threads: the mask cache is under the grammar's mu (held for lookups and
 * stores, never during a walk); the automaton under dfa_mu, held by one
 * walk from its start to its end (walks of different grammars run in
 * parallel; walks of one grammar take turns, and a walk that waited looks in
 * the mask cache again first, since the walk before it may have computed
 * the very state). */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/grammar_internal.h"

/* ---- state keys -------------------------------------------------------------------- */

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
    if (p >= 0 || q >= 0)
        return (p >= 0) - (q >= 0);
    return (p > q) - (p < q); /* a whole stack's end (-1) or a context (GNODE_CTX) */
}

static uint64_t hash_ints(const int32_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)k[i]) * 0x100000001b3ull;
    return h;
}

/* The key of the state (set [off, off + n), u) into m->key: the UTF-8
 * state, then each stack's positions top to bottom ended by -1 (or -2 for a
 * cut-off stack's context), stacks in sorted order (the empty stack is a
 * lone -1). Returns its length, with its hash in *hash, or 0 on out of
 * memory. */
static size_t state_key(model_grammar_matcher *m, size_t off, size_t n, gutf8 u, uint64_t *hash) {
    size_t total = 3;
    if (brisk_grow(&m->sort, &m->cap_sort, n ? n : 1, sizeof *m->sort, 16, 0) < 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sets[off + i];
        uint64_t h = 1469598103934665603ull;
        for (; s >= 0; s = m->nodes[s].parent, total++)
            h = (h ^ (uint64_t)(uint32_t)m->nodes[s].pos) * 0x100000001b3ull;
        total++;
        m->sort[i] = (gkey_stack){h, m->sets[off + i]};
    }
    if (n > 1) {
        g_sort_m = m;
        qsort(m->sort, n, sizeof *m->sort, cmp_stack);
    }
    if (brisk_grow(&m->key, &m->cap_key, total, sizeof *m->key, 64, 0) < 0)
        return 0;
    size_t j = 0;
    m->key[j++] = (int32_t)u.part;
    m->key[j++] = u.need;
    m->key[j++] = u.len;
    for (size_t i = 0; i < n; i++) {
        int32_t s = m->sort[i].s;
        for (; s >= 0; s = m->nodes[s].parent)
            m->key[j++] = m->nodes[s].pos;
        m->key[j++] = s == GNODE_CTX ? -2 : -1;
    }
    *hash = hash_ints(m->key, j);
    return j;
}

/* How many nodes of each stack a context-free walk keeps (see the walk of
 * escapes below). Three hold what a JSON string, a number or a literal key
 * needs until its closing character and the member's separator after it:
 * the same cut state serves that string at every depth of nesting, in every
 * item of an array. */
#define GCUT_DEPTH 3

static _Thread_local const int32_t *g_sort_seqs;

/* Orders stack sequences of tkey (each ended by a negative value, which
 * counts too). */
static int cmp_seq(const void *a, const void *b) {
    const int32_t *x = g_sort_seqs + *(const int32_t *)a, *y = g_sort_seqs + *(const int32_t *)b;
    for (;; x++, y++) {
        if (*x != *y)
            return *x < *y ? -1 : 1;
        if (*x < 0)
            return 0;
    }
}

/* The key of the cut-off state into m->key: as state_key's, each stack cut
 * to its top GCUT_DEPTH positions and ended by -2 when more followed (or it
 * ended in a context), by -1 when it ended there; equal cut stacks once. */
static size_t cut_key(model_grammar_matcher *m, size_t off, size_t n, gutf8 u, uint64_t *hash) {
    if (brisk_grow(&m->tkey, &m->cap_tkey, n * (GCUT_DEPTH + 1) + 1, sizeof *m->tkey, 64, 0) < 0 ||
        brisk_grow(&m->toff, &m->cap_toff, n ? n : 1, sizeof *m->toff, 16, 0) < 0 ||
        brisk_grow(&m->key, &m->cap_key, 3 + n * (GCUT_DEPTH + 1), sizeof *m->key, 64, 0) < 0)
        return 0;
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        m->toff[i] = (int32_t)t;
        int32_t s = m->sets[off + i];
        for (int d = 0; s >= 0 && d < GCUT_DEPTH; s = m->nodes[s].parent, d++)
            m->tkey[t++] = m->nodes[s].pos;
        m->tkey[t++] = s == -1 ? -1 : -2;
    }
    if (n > 1) {
        g_sort_seqs = m->tkey;
        qsort(m->toff, n, sizeof *m->toff, cmp_seq);
    }
    size_t j = 0;
    m->key[j++] = (int32_t)u.part;
    m->key[j++] = u.need;
    m->key[j++] = u.len;
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            g_sort_seqs = m->tkey;
            if (cmp_seq(&m->toff[i - 1], &m->toff[i]) == 0)
                continue;
        }
        const int32_t *q = m->tkey + m->toff[i];
        do
            m->key[j++] = *q;
        while (*q++ >= 0);
    }
    *hash = hash_ints(m->key, j);
    return j;
}

/* ---- the automaton ------------------------------------------------------------------ */

#define GDFA_NONE (-1)             /* transition not computed yet */
#define GDFA_DEAD (-2)             /* no stack survives the byte */
#define GDFA_STATE_WORK 512        /* units for each state a walk meets (~2.3 KB each) */
#define GDFA_FLUSH_BYTES (8 << 20) /* emptied at a walk's start past this */

typedef struct gdfa_state {
    uint64_t hash;
    size_t key_off; /* its key: keys[key_off, + key_len) */
    uint32_t key_len;
    int32_t n_stacks;
    int more;             /* a stack can take more bytes, or a character is pending */
    uint8_t esc;          /* a cut-off stack was popped to its context here */
    uint8_t seen;         /* the walk that last met it */
    int32_t next[256];    /* GDFA_NONE, GDFA_DEAD, or a state */
    uint32_t cost[256];   /* matcher steps its computation took */
    uint8_t charged[256]; /* the walk that last counted that cost */
} gdfa_state;

struct gdfa {
    gdfa_state **st; /* pointers, so a state stays put as the array grows */
    size_t n, cap;
    int32_t *keys;
    size_t n_keys, cap_keys;
    int32_t *ht; /* state ids by hash, -1 empty; at most half full */
    size_t ht_cap;
    size_t bytes;
    uint8_t walk; /* the current walk's stamp, 1..255 */
};

static void gdfa_clear(struct gdfa *d) {
    for (size_t i = 0; i < d->n; i++)
        free(d->st[i]);
    free(d->st);
    free(d->keys);
    free(d->ht);
    memset(d, 0, sizeof *d);
}

void gdfa_free(struct gdfa *d) {
    if (!d)
        return;
    gdfa_clear(d);
    free(d);
}

/* The state with this key (len ints, hash h), added if new: its id, or
 * BRISK_ENOMEM. n: its stacks; more: whether it can take more bytes; esc:
 * whether a cut-off stack reached its context. */
static int32_t gdfa_intern(struct gdfa *d, const int32_t *key, size_t len, uint64_t h, size_t n,
                           int more, int esc) {
    for (size_t i = d->ht_cap ? (size_t)h & (d->ht_cap - 1) : 0; d->ht_cap && d->ht[i] >= 0;
         i = (i + 1) & (d->ht_cap - 1)) {
        const gdfa_state *s = d->st[d->ht[i]];
        if (s->hash == h && s->key_len == len &&
            !memcmp(d->keys + s->key_off, key, len * sizeof *key))
            return d->ht[i];
    }
    if ((d->n + 1) * 2 > d->ht_cap) { /* rehash into twice the room */
        size_t cap = d->ht_cap ? d->ht_cap * 2 : 64;
        int32_t *ht = brisk_malloc(cap * sizeof *ht);
        if (!ht)
            return BRISK_ENOMEM;
        memset(ht, 0xff, cap * sizeof *ht);
        for (size_t id = 0; id < d->n; id++) {
            size_t i = (size_t)d->st[id]->hash & (cap - 1);
            while (ht[i] >= 0)
                i = (i + 1) & (cap - 1);
            ht[i] = (int32_t)id;
        }
        free(d->ht);
        d->ht = ht;
        d->bytes += (cap - d->ht_cap) * sizeof *ht;
        d->ht_cap = cap;
    }
    if (d->n >= 0x7fffffff || len > 0xffffffffu ||
        brisk_grow(&d->st, &d->cap, d->n + 1, sizeof *d->st, 64, 0) < 0 ||
        brisk_grow(&d->keys, &d->cap_keys, d->n_keys + len, sizeof *d->keys, 1024, 0) < 0)
        return BRISK_ENOMEM;
    gdfa_state *s = brisk_malloc(sizeof *s);
    if (!s)
        return BRISK_ENOMEM;
    s->hash = h;
    s->key_off = d->n_keys;
    s->key_len = (uint32_t)len;
    s->n_stacks = n > 0x7fffffff ? 0x7fffffff : (int32_t)n;
    s->more = more;
    s->esc = (uint8_t)esc;
    s->seen = 0;
    memset(s->next, 0xff, sizeof s->next); /* GDFA_NONE */
    memset(s->cost, 0, sizeof s->cost);
    memset(s->charged, 0, sizeof s->charged);
    memcpy(d->keys + d->n_keys, key, len * sizeof *key);
    d->n_keys += len;
    d->bytes += sizeof *s + len * sizeof *key + sizeof *d->st;
    int32_t id = (int32_t)d->n;
    d->st[d->n++] = s;
    size_t i = (size_t)h & (d->ht_cap - 1);
    while (d->ht[i] >= 0)
        i = (i + 1) & (d->ht_cap - 1);
    d->ht[i] = id;
    return id;
}

/* The state of set [off, off + n) with UTF-8 state u, interned. */
static int32_t gdfa_intern_set(model_grammar_matcher *m, struct gdfa *d, size_t off, size_t n,
                               gutf8 u) {
    uint64_t h = 0;
    size_t len = state_key(m, off, n, u, &h);
    if (len == 0)
        return BRISK_ENOMEM;
    int more = u.need > 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        more |= m->sets[off + i] >= 0;
        esc |= m->sets[off + i] == GNODE_CTX;
    }
    return gdfa_intern(d, m->key, len, h, n, more, esc);
}

/* The state of a key (len ints, hash h) already in m->key, interned. */
static int32_t gdfa_intern_key(struct gdfa *d, const int32_t *key, size_t len, uint64_t h) {
    size_t n = 0;
    int more = key[1] > 0, esc = 0;
    for (size_t i = 3, start = 3; i < len; i++) {
        if (key[i] >= 0)
            continue;
        n++;
        more |= i > start;
        esc |= i == start && key[i] == -2;
        start = i + 1;
    }
    return gdfa_intern(d, key, len, h, n, more, esc);
}

/* Rebuilds frame fr's state in the arena from its key: fresh nodes for each
 * stack (bottom up), their tops appended to sets[]. 0 or BRISK_ENOMEM. */
static int gdfa_materialize(model_grammar_matcher *m, const struct gdfa *d, gframe *fr) {
    const gdfa_state *s = fr->st;
    const int32_t *k = d->keys + s->key_off;
    size_t len = s->key_len, off = m->n_sets;
    fr->node_mark = m->n_nodes;
    fr->set_mark = m->n_sets;
    fr->u = (gutf8){(uint32_t)k[0], k[1], k[2]};
    for (size_t i = 3; i < len;) {
        size_t j = i;
        while (k[j] >= 0)
            j++;
        int32_t top = k[j] == -2 ? GNODE_CTX : -1;
        for (size_t t = j; t > i; t--)
            if ((top = gmatch_node_new(m, k[t - 1], top)) < -1)
                return BRISK_ENOMEM;
        if (gmatch_set_push(m, top) < 0)
            return BRISK_ENOMEM;
        i = j + 1;
    }
    fr->set_off = off;
    fr->set_n = m->n_sets - off;
    fr->mat = 1;
    return 0;
}

/* ---- the walk ------------------------------------------------------------------------ */

/* A walk of escapes visits only the subtrees of these trie nodes (and the
 * paths to them), in increasing order as the walk meets them. */
typedef struct walk_filter {
    const int32_t *esc;
    int n, at;
} walk_filter;

/* Records trie node c as an escape of the walk (m->esc). */
static int esc_push(model_grammar_matcher *m, int32_t c) {
    if (brisk_grow(&m->esc, &m->cap_esc, m->n_esc + 1, sizeof *m->esc, 256, 0) < 0)
        return BRISK_ENOMEM;
    m->esc[m->n_esc++] = c;
    return 0;
}

/* Sets the bit of every token whose bytes the automaton's state root can
 * take (root_mat: the state is the matcher's own, already in the arena);
 * returns 0 or a negative code (BRISK_ERANGE past limit units). *work: the
 * units counted (see the top of the file). With record, the trie nodes where
 * a cut-off stack reached its context are appended to m->esc; with flt, the
 * walk visits only the filter's subtrees. The caller holds dfa_mu.
 *
 * The loop's common case is a transition that exists: a few loads, the
 * tokens' bits, maybe a frame to push. Only a missing transition touches the
 * stacks: its frame's state is rebuilt in the arena if it is not there, the
 * byte is advanced, the result interned; a frame drops what it put in the
 * arena when it is popped. */
static int mask_walk(model_grammar_matcher *m, struct gdfa *d, int32_t root, int root_mat,
                     uint32_t *mask, long long limit, walk_filter *flt, int record,
                     long long *work) {
    const model_grammar_vocab *gv = m->gv;
    const gtnode *node = gv->node;
    const int32_t *toks = gv->toks;
    long long w = 0;
    *work = 0;
    if (++d->walk == 0) { /* the stamps wrapped: clear them */
        for (size_t i = 0; i < d->n; i++) {
            d->st[i]->seen = 0;
            memset(d->st[i]->charged, 0, sizeof d->st[i]->charged);
        }
        d->walk = 1;
    }
    const uint8_t walk = d->walk;
    d->st[root]->seen = walk;
    w += GDFA_STATE_WORK;
    gframe *f = m->frames;
    int depth = 0, rc = 0;
    const int max_depth = gv->max_depth;
    const size_t nodes0 = m->n_nodes, sets0 = m->n_sets;
    f[0] = (gframe){1,    node[0].end, root,      root_mat, d->st[root], 0, m->n_cur,
                    m->u, m->n_nodes,  m->n_sets, 0};
    while (depth >= 0) {
        gframe *fr = &f[depth];
        int32_t c = fr->next_child;
        if (c >= fr->end) { /* done with this node: drop what it put in the arena */
            if (fr->mat) {
                m->n_nodes = fr->node_mark;
                m->n_sets = fr->set_mark;
            }
            depth--;
            continue;
        }
        const gtnode *tn = &node[c];
        fr->next_child = tn->end;
        int is_esc = 0;
        w++;
        if (flt && !fr->in_esc) { /* only toward an escape */
            while (flt->at < flt->n && flt->esc[flt->at] < c)
                flt->at++;
            if (flt->at == flt->n || flt->esc[flt->at] >= tn->end)
                continue;
            is_esc = flt->esc[flt->at] == c;
        }
        uint8_t b = (uint8_t)tn->byte;
        gdfa_state *st = fr->st;
        int32_t nx = st->next[b];
        size_t node_mark = 0, set_mark = 0, off = 0, n = 0;
        gutf8 u = {0, 0, 0};
        int child_mat = 0;
        if (nx == GDFA_NONE) { /* compute it on the stacks */
            if (!fr->mat && (rc = gdfa_materialize(m, d, fr)) < 0)
                break;
            node_mark = m->n_nodes;
            set_mark = m->n_sets;
            u = fr->u;
            long long s0 = m->steps;
            rc = gmatch_advance_byte(m, fr->set_off, fr->set_n, &u, b, &off, &n);
            if (rc < 0)
                break;
            long long cost = m->steps - s0;
            nx = GDFA_DEAD;
            if (rc > 0 && (nx = gdfa_intern_set(m, d, off, n, u)) < 0) {
                rc = nx; /* out of memory */
                break;
            }
            st->next[b] = nx;
            st->cost[b] = cost > 0xffffffffLL ? 0xffffffffu : (uint32_t)cost;
            st->charged[b] = walk;
            w += cost;
            child_mat = nx >= 0;
            if (!child_mat) { /* nothing below: the advance's scratch goes */
                m->n_nodes = node_mark;
                m->n_sets = set_mark;
            }
        } else if (st->charged[b] != walk) {
            st->charged[b] = walk;
            w += st->cost[b];
        }
        if (nx == GDFA_DEAD) {
            if (w > limit) {
                rc = BRISK_ERANGE;
                break;
            }
            continue;
        }
        gdfa_state *ns = d->st[nx];
        if (ns->seen != walk) {
            ns->seen = walk;
            w += GDFA_STATE_WORK;
            if (ns->n_stacks > m->max_stacks) /* computed under a larger limit */
                w = limit + 1;
        }
        if (w > limit) {
            rc = BRISK_ERANGE;
            break;
        }
        for (int32_t i = tn->tok_off; i < tn[1].tok_off; i++)
            mask[toks[i] >> 5] |= 1u << (toks[i] & 31);
        if (record && ns->esc && (rc = esc_push(m, c)) < 0)
            break;
        /* Deeper only if some stack can take more bytes. */
        if (ns->more && c + 1 < tn->end && depth + 1 <= max_depth) {
            gframe *cf = &f[++depth];
            cf->next_child = c + 1;
            cf->end = tn->end;
            cf->state = nx;
            cf->st = ns;
            cf->mat = child_mat;
            cf->in_esc = fr->in_esc || is_esc;
            if (child_mat) {
                cf->set_off = off;
                cf->set_n = n;
                cf->u = u;
                cf->node_mark = node_mark;
                cf->set_mark = set_mark;
            }
        } else if (child_mat) {
            m->n_nodes = node_mark;
            m->n_sets = set_mark;
        }
    }
    m->n_nodes = nodes0;
    m->n_sets = sets0;
    *work = w;
    return rc < 0 ? rc : 0;
}

/* ---- context-free walks ---------------------------------------------------------------
 *
 * XGrammar's split of a mask into what the state's top decides and what
 * depends on the stack below it, done lazily per cut-off state. A state's
 * stacks are cut to their top GCUT_DEPTH nodes, ending in a context
 * (GNODE_CTX) where more followed; a walk of that cut state finds (1) every
 * token it takes without leaving the cut part, which the whole state takes
 * too, and (2) its escapes: the trie nodes where a cut stack was popped to
 * its context. A token ending at an escape is taken too (a context always
 * has a next element, or is the end of the grammar); a token below one
 * depends on the context, and only those subtrees are then walked from the
 * whole state. Every other token is refused by the cut part alone, so by
 * the whole state too. The cut walk's mask and escapes are kept per cut
 * state (256, least recently used), shared by every state with that top: a
 * JSON string's walk is done once, not once per array item or nesting depth,
 * and only the tokens that close the string are walked in context. */

#define GCI_ENTRIES 256

typedef struct gci_entry {
    uint64_t hash;
    int32_t *key;
    size_t key_len;
    uint32_t *mask;
    int32_t *esc;
    int n_esc;
    long long work;
    unsigned long long used;
} gci_entry;

struct gci_cache {
    const model_grammar_vocab *gv;
    gci_entry e[GCI_ENTRIES];
    int n;
    unsigned long long clock;
};

void gci_cache_free(struct gci_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].mask);
        free(c->e[i].esc);
    }
    free(c);
}

/* Stores a cut state's walk: key taken over, mask and escapes copied. The
 * entry, or NULL on out of memory (key freed). */
static gci_entry *gci_store(struct gci_cache *c, int32_t *key, size_t len, uint64_t h,
                            const uint32_t *mask, size_t words, const int32_t *esc, int n_esc,
                            long long work) {
    uint32_t *mcopy = malloc(words * sizeof *mcopy);
    int32_t *ecopy = malloc((n_esc ? (size_t)n_esc : 1) * sizeof *ecopy);
    if (!mcopy || !ecopy) {
        free(mcopy);
        free(ecopy);
        free(key);
        return NULL;
    }
    memcpy(mcopy, mask, words * sizeof *mcopy);
    if (n_esc > 0) /* (esc may be NULL then) */
        memcpy(ecopy, esc, (size_t)n_esc * sizeof *ecopy);
    int slot = c->n;
    if (c->n == GCI_ENTRIES) { /* the least recently used goes */
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used)
                slot = i;
        free(c->e[slot].key);
        free(c->e[slot].mask);
        free(c->e[slot].esc);
    } else {
        c->n++;
    }
    c->e[slot] = (gci_entry){h, key, len, mcopy, ecopy, n_esc, work, ++c->clock};
    return &c->e[slot];
}

/* The matcher's mask, its cut state's walk first (from the cache, or done
 * and kept), then its escapes' subtrees from the whole state; the count
 * allowed, or a negative code. The caller holds dfa_mu. */
static int mask_split(model_grammar_matcher *m, model_grammar *g, struct gdfa *d, uint32_t *mask,
                      long long limit, long long *work) {
    const model_grammar_vocab *gv = m->gv;
    size_t words = ((size_t)gv->n_vocab + 31) / 32;
    *work = 0;
    if (g->ci && g->ci->gv != gv) {
        gci_cache_free(g->ci);
        g->ci = NULL;
    }
    if (!g->ci && (g->ci = calloc(1, sizeof *g->ci)))
        g->ci->gv = gv;
    uint64_t h = 0;
    size_t len = cut_key(m, 0, m->n_cur, m->u, &h);
    if (len == 0)
        return BRISK_ENOMEM;
    gci_entry *e = NULL;
    for (int i = 0; g->ci && i < g->ci->n && !e; i++)
        if (g->ci->e[i].hash == h && g->ci->e[i].key_len == len &&
            !memcmp(g->ci->e[i].key, m->key, len * sizeof *m->key))
            e = &g->ci->e[i];
    long long w = 0, w2 = 0;
    const int32_t *esc;
    int n_esc, rc;
    if (e) {
        e->used = ++g->ci->clock;
        memcpy(mask, e->mask, words * sizeof *mask);
        w = e->work;
        esc = e->esc;
        n_esc = e->n_esc;
    } else {
        int32_t *key = malloc(len * sizeof *key); /* m->key is the walk's scratch */
        if (!key)
            return BRISK_ENOMEM;
        memcpy(key, m->key, len * sizeof *key);
        int32_t root = gdfa_intern_key(d, key, len, h);
        memset(mask, 0, words * sizeof *mask);
        m->n_esc = 0;
        rc = root < 0 ? root : mask_walk(m, d, root, 0, mask, limit, NULL, 1, &w);
        if (rc < 0) {
            free(key);
            return rc;
        }
        esc = m->esc;
        n_esc = (int)m->n_esc;
        if (g->ci)
            gci_store(g->ci, key, len, h, mask, words, m->esc, n_esc, w);
        else
            free(key);
    }
    if (w > limit)
        return BRISK_ERANGE; /* kept under a larger limit: judged by the same count */
    if (n_esc > 0) {
        int32_t root = gdfa_intern_set(m, d, 0, m->n_cur, m->u);
        walk_filter flt = {esc, n_esc, 0};
        rc = root < 0 ? root : mask_walk(m, d, root, 1, mask, limit - w, &flt, 0, &w2);
        w += w2;
        if (rc < 0)
            return rc;
    }
    if (model_grammar_complete(m))
        for (int i = 0; i < gv->n_eog; i++)
            mask[gv->eog[i] >> 5] |= 1u << (gv->eog[i] & 31);
    int count = 0;
    for (size_t i = 0; i < words; i++)
        count += __builtin_popcount(mask[i]);
    *work = w;
    return count;
}

/* ---- the mask cache ------------------------------------------------------------------ */

#define GMASK_ENTRIES 256

typedef struct gmask_entry {
    uint64_t hash;
    int32_t *key;
    size_t key_len;
    uint32_t *mask;
    int count;
    long long work; /* the walk's units: a hit is judged by them too */
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

/* Under g->mu: the cache for gv (made, or remade for another vocabulary). */
static struct gmask_cache *cache_for(model_grammar *g, const model_grammar_vocab *gv) {
    if (g->cache && g->cache->gv != gv) {
        gmask_cache_free(g->cache);
        g->cache = NULL;
    }
    if (!g->cache && (g->cache = calloc(1, sizeof *g->cache)))
        g->cache->gv = gv;
    return g->cache;
}

/* Under g->mu: the mask for key into mask; its count, or -1 if absent. */
static int cache_find(struct gmask_cache *c, const int32_t *key, size_t len, uint64_t hash,
                      uint32_t *mask, size_t words, long long *work) {
    for (int i = 0; c && i < c->n; i++) {
        gmask_entry *en = &c->e[i];
        if (en->hash == hash && en->key_len == len && !memcmp(en->key, key, len * sizeof *key)) {
            memcpy(mask, en->mask, words * sizeof *mask);
            en->used = ++c->clock;
            *work = en->work;
            return en->count;
        }
    }
    return -1;
}

/* Stores a computed mask under its key (taken over); under nothing. */
static void cache_store(model_grammar *g, const model_grammar_vocab *gv, int32_t *key,
                        size_t key_len, uint64_t hash, const uint32_t *mask, int count,
                        long long work) {
    size_t words = ((size_t)gv->n_vocab + 31) / 32;
    uint32_t *copy = malloc(words * sizeof *copy);
    pthread_mutex_lock(&g->mu);
    struct gmask_cache *c = cache_for(g, gv);
    if (c && copy) {
        int slot = c->n;
        if (c->n == GMASK_ENTRIES) { /* the least recently used goes */
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
        c->e[slot] = (gmask_entry){hash, key, key_len, copy, count, work, ++c->clock};
        key = NULL;
        copy = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    free(copy);
    free(key);
}

/* model_grammar_mask, or with budget >= 0 model_grammar_mask_try. */
static int mask_compute(model_grammar_matcher *m, uint32_t *mask, long long budget) {
    const model_grammar_vocab *gv = m->gv;
    if (!gv)
        return BRISK_EINVAL;
    if (budget >= 0 && m->n_cur > 64)
        return BRISK_ENOSPC;
    size_t words = ((size_t)gv->n_vocab + 31) / 32;
    uint64_t hash = 0;
    size_t key_len = state_key(m, 0, m->n_cur, m->u, &hash);
    if (key_len == 0)
        return BRISK_ENOMEM;
    model_grammar *g = m->g;
    long long work = 0;
    pthread_mutex_lock(&g->mu);
    struct gmask_cache *c = cache_for(g, gv);
    if (c)
        c->lookups++;
    int count = cache_find(c, m->key, key_len, hash, mask, words, &work);
    if (count >= 0 && c)
        c->hits++;
    pthread_mutex_unlock(&g->mu);
    if (count < 0 && budget == 0)
        return BRISK_ENOSPC;
    if (count < 0) {
        int32_t *key = malloc(key_len * sizeof *key); /* m->key is the walk's scratch */
        if (!key)
            return BRISK_ENOMEM;
        memcpy(key, m->key, key_len * sizeof *key);
        if (budget < 0) {
            pthread_mutex_lock(&g->dfa_mu);
        } else if (pthread_mutex_trylock(&g->dfa_mu) != 0) {
            free(key);
            return BRISK_ENOSPC; /* another walk of this grammar: not worth waiting for */
        }
        /* The walk this one waited for may have made this very mask. */
        pthread_mutex_lock(&g->mu);
        count = cache_find(cache_for(g, gv), key, key_len, hash, mask, words, &work);
        pthread_mutex_unlock(&g->mu);
        int walked = count < 0;
        if (walked) {
            if (g->dfa && g->dfa->bytes > GDFA_FLUSH_BYTES)
                gdfa_clear(g->dfa); /* past its room: start afresh */
            if (!g->dfa)
                g->dfa = calloc(1, sizeof *g->dfa);
            long long limit = budget >= 0 && budget < m->max_work ? budget : m->max_work;
            count = g->dfa ? mask_split(m, g, g->dfa, mask, limit, &work) : BRISK_ENOMEM;
            if (count == BRISK_ERANGE && limit < m->max_work)
                count = BRISK_ENOSPC; /* over the budget, not the limit */
        }
        pthread_mutex_unlock(&g->dfa_mu);
        if (walked && count >= 0)
            cache_store(g, gv, key, key_len, hash, mask, count, work);
        else
            free(key);
    }
    m->last_work = work;
    if (count >= 0 && work > m->max_work)
        return BRISK_ERANGE; /* cached under a larger limit: judged by the same count */
    return count;
}

int model_grammar_mask(model_grammar_matcher *m, uint32_t *mask) {
    return mask_compute(m, mask, -1);
}

int model_grammar_mask_try(model_grammar_matcher *m, uint32_t *mask, long long budget) {
    return mask_compute(m, mask, budget < 0 ? 0 : budget);
}

long long model_grammar_last_work(const model_grammar_matcher *m) {
    return m->last_work;
}

void model_grammar_cache_counts(model_grammar *g, long long *lookups, long long *hits) {
    pthread_mutex_lock(&g->mu);
    *lookups = g->cache ? g->cache->lookups : 0;
    *hits = g->cache ? g->cache->hits : 0;
    pthread_mutex_unlock(&g->mu);
}
