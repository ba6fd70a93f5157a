/* spec_propose.c - prompt lookup and suffix matching, the deterministic
 * proposers of speculative decoding (spec_propose.h). */
#include "scheduler/spec_propose.h"

#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"

/* How many tokens before and at position i equal the last ones of
 * t[0, n), up to max (i < n - 1: an earlier position). */
static int match_len(const int32_t *t, int n, int i, int max) {
    int l = 0;
    while (l < max && i - l >= 0 && t[i - l] == t[n - 1 - l])
        l++;
    return l;
}

int spec_ngram_propose(const int32_t *tokens, int n_tokens, int min_n, int max_n, int k,
                       int32_t *out) {
    if (!tokens || n_tokens < 2 || k <= 0 || min_n < 1 || max_n < min_n)
        return 0;
    /* The longest match (capped at max_n), the latest among equals: the
     * same as trying n = max_n, ..., min_n in turn and taking the latest
     * occurrence of the first n that has one. */
    int best = -1, best_len = 0;
    for (int i = n_tokens - 2; i >= 0; i--) {
        if (tokens[i] != tokens[n_tokens - 1])
            continue;
        int l = match_len(tokens, n_tokens, i, max_n);
        if (l > best_len) {
            best_len = l;
            best = i;
            if (l == max_n)
                break; /* nothing later can be longer, nothing earlier wins a tie */
        }
    }
    if (best < 0 || best_len < min_n)
        return 0;
    int n = 0;
    for (int j = best + 1; j < n_tokens && n < k; j++)
        out[n++] = tokens[j];
    return n;
}

/* ---- the index of recent outputs -------------------------------------------- */

typedef struct sfx_node {
    int32_t token;
    int32_t count;   /* suffixes through this node */
    int32_t child;   /* first child, or -1 */
    int32_t sibling; /* next child of the same parent, or -1 */
} sfx_node;

typedef struct sfx_output {
    int32_t *tok;
    int n;
} sfx_output;

struct spec_suffix {
    int depth, n_vocab;
    long long max_bytes;
    int32_t *root; /* [n_vocab]: the root's child for each token, or -1 */
    sfx_node *nodes;
    long cap_nodes, n_used;
    int32_t free_head; /* freed nodes, linked through sibling */
    sfx_output *outs;  /* a ring of the outputs held, oldest at head */
    int cap_outs, n_outs, head;
    long long out_tokens; /* tokens held in outs */
};

/* What a kept output costs besides its nodes. */
#define SFX_OUT_BYTES ((long long)sizeof(sfx_output))

long long spec_suffix_bytes(const spec_suffix *x) {
    return (long long)x->n_vocab * 4 + (long long)x->n_used * (long long)sizeof(sfx_node) +
           x->out_tokens * 4 + (long long)x->n_outs * SFX_OUT_BYTES;
}

spec_suffix *spec_suffix_create(long long max_bytes, int depth, int n_vocab) {
    if (depth < 2 || depth > 64 || n_vocab <= 0 ||
        max_bytes < (long long)n_vocab * 4 + 64 * (long long)sizeof(sfx_node))
        return NULL;
    spec_suffix *x = brisk_calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->depth = depth;
    x->n_vocab = n_vocab;
    x->max_bytes = max_bytes;
    x->free_head = -1;
    x->root = brisk_malloc((size_t)n_vocab * sizeof *x->root);
    if (!x->root) {
        free(x);
        return NULL;
    }
    memset(x->root, 0xff, (size_t)n_vocab * sizeof *x->root);
    return x;
}

void spec_suffix_free(spec_suffix *x) {
    if (!x)
        return;
    for (int i = 0; i < x->n_outs; i++)
        free(x->outs[(x->head + i) % x->cap_outs].tok);
    free(x->outs);
    free(x->nodes);
    free(x->root);
    free(x);
}

long spec_suffix_nodes(const spec_suffix *x) {
    return x->n_used;
}

int spec_suffix_outputs(const spec_suffix *x) {
    return x->n_outs;
}

/* The child of node (-1: the root) with this token, or -1. */
static int32_t sfx_child(const spec_suffix *x, int32_t node, int32_t token) {
    if (node < 0)
        return x->root[token];
    for (int32_t c = x->nodes[node].child; c >= 0; c = x->nodes[c].sibling)
        if (x->nodes[c].token == token)
            return c;
    return -1;
}

/* A node from the free list or the array's tail; the caller checked that
 * the array holds one more (sfx_reserve). */
static int32_t sfx_alloc(spec_suffix *x, int32_t token) {
    int32_t id;
    if (x->free_head >= 0) {
        id = x->free_head;
        x->free_head = x->nodes[id].sibling;
    } else {
        id = (int32_t)x->n_used; /* no hole: every node below n_used is in use */
    }
    x->n_used++;
    x->nodes[id] = (sfx_node){token, 0, -1, -1};
    return id;
}

static void sfx_release(spec_suffix *x, int32_t id) {
    x->nodes[id].sibling = x->free_head;
    x->free_head = id;
    x->n_used--;
}

/* Room in the node array for `more` nodes beyond those in use. */
static int sfx_reserve(spec_suffix *x, long more) {
    long need = x->n_used + more;
    if (need <= x->cap_nodes)
        return 0;
    /* The array itself stays within the budget (the add's eviction already
     * made the nodes in use fit it). */
    long lim = (long)((x->max_bytes - (long long)x->n_vocab * 4) / (long long)sizeof(sfx_node));
    long cap = x->cap_nodes ? x->cap_nodes : 4096;
    while (cap < need)
        cap *= 2;
    if (cap > lim)
        cap = lim;
    if (cap < need)
        return BRISK_ENOMEM;
    sfx_node *n = brisk_realloc(x->nodes, (size_t)cap * sizeof *n);
    if (!n)
        return BRISK_ENOMEM;
    x->nodes = n;
    x->cap_nodes = cap;
    return 0;
}

/* Takes the oldest output out: each of its suffixes' counts go down by one,
 * and the nodes no suffix passes through any more are freed (a node whose
 * count reaches 0 had only this suffix below it, so its chain down is
 * freed with it). */
static void sfx_drop_oldest(spec_suffix *x) {
    sfx_output o = x->outs[x->head];
    x->head = (x->head + 1) % x->cap_outs;
    x->n_outs--;
    x->out_tokens -= o.n;
    for (int i = 0; i < o.n; i++) {
        int32_t parent = -1, node = x->root[o.tok[i]];
        for (int d = 0; node >= 0 && d < x->depth && i + d < o.n; d++) {
            int32_t next =
                i + d + 1 < o.n && d + 1 < x->depth ? sfx_child(x, node, o.tok[i + d + 1]) : -1;
            if (--x->nodes[node].count == 0) {
                /* unlink from the parent, then free the chain below */
                if (parent < 0) {
                    x->root[o.tok[i]] = -1;
                } else {
                    int32_t *link = &x->nodes[parent].child;
                    while (*link != node)
                        link = &x->nodes[*link].sibling;
                    *link = x->nodes[node].sibling;
                }
                for (int32_t c = node; c >= 0;) {
                    int32_t down = x->nodes[c].child;
                    sfx_release(x, c);
                    c = down;
                }
                break;
            }
            parent = node;
            node = next;
        }
    }
    free(o.tok);
}

/* Nodes an output of n tokens may add at most. */
static long sfx_worst_nodes(const spec_suffix *x, int n) {
    long d = x->depth, total = 0;
    for (long i = 0; i < n; i++)
        total += n - i < d ? n - i : d;
    return total;
}

int spec_suffix_add(spec_suffix *x, const int32_t *tokens, int n) {
    int m = 0;
    while (m < n && tokens[m] >= 0 && tokens[m] < x->n_vocab)
        m++;
    n = m;
    if (n <= 0)
        return 0;
    long long fixed = (long long)x->n_vocab * 4;
    /* An output the whole budget cannot hold keeps its last tokens that fit. */
    while (n > 0 && fixed + sfx_worst_nodes(x, n) * (long long)sizeof(sfx_node) + (long long)n * 4 +
                            SFX_OUT_BYTES >
                        x->max_bytes) {
        int cut = n / 8 > 0 ? n / 8 : 1;
        tokens += cut;
        n -= cut;
    }
    if (n <= 0)
        return 0;
    long worst = sfx_worst_nodes(x, n);
    while (x->n_outs > 0 && spec_suffix_bytes(x) + worst * (long long)sizeof(sfx_node) +
                                    (long long)n * 4 + SFX_OUT_BYTES >
                                x->max_bytes)
        sfx_drop_oldest(x);
    if (x->n_outs == x->cap_outs) {
        int cap = x->cap_outs ? x->cap_outs * 2 : 64;
        sfx_output *o = brisk_malloc((size_t)cap * sizeof *o);
        if (!o)
            return BRISK_ENOMEM;
        for (int i = 0; i < x->n_outs; i++)
            o[i] = x->outs[(x->head + i) % x->cap_outs];
        free(x->outs);
        x->outs = o;
        x->cap_outs = cap;
        x->head = 0;
    }
    int32_t *copy = brisk_malloc((size_t)n * sizeof *copy);
    if (!copy || sfx_reserve(x, worst) < 0) {
        free(copy);
        return BRISK_ENOMEM;
    }
    memcpy(copy, tokens, (size_t)n * sizeof *copy);
    x->outs[(x->head + x->n_outs) % x->cap_outs] = (sfx_output){copy, n};
    x->n_outs++;
    x->out_tokens += n;
    for (int i = 0; i < n; i++) {
        int32_t node = -1;
        for (int d = 0; d < x->depth && i + d < n; d++) {
            int32_t t = copy[i + d], c = sfx_child(x, node, t);
            if (c < 0) {
                c = sfx_alloc(x, t);
                if (node < 0) {
                    x->root[t] = c;
                } else {
                    x->nodes[c].sibling = x->nodes[node].child;
                    x->nodes[node].child = c;
                }
            }
            x->nodes[c].count++;
            node = c;
        }
    }
    return 0;
}

/* ---- proposals ----------------------------------------------------------------- */

/* The index's proposal: the node of the longest suffix of ctx it holds,
 * then its most frequent children. Returns the tokens written; *score gets
 * their summed path probabilities. */
static int sfx_propose_index(const spec_suffix *x, const int32_t *ctx, int n_ctx,
                             const spec_suffix_opts *o, int32_t *out, double *score) {
    *score = 0;
    int node = -1, m;
    for (m = n_ctx < x->depth - 1 ? n_ctx : x->depth - 1; m > 0; m--) {
        node = -1;
        for (int j = n_ctx - m; j < n_ctx; j++) {
            int32_t t = ctx[j];
            node = t >= 0 && t < x->n_vocab ? sfx_child(x, node, t) : -1;
            if (node < 0)
                break;
        }
        if (node >= 0)
            break;
    }
    if (m == 0 || node < 0)
        return 0;
    int limit = o->k;
    if ((double)m * o->max_factor < limit)
        limit = (int)((double)m * o->max_factor);
    double prob = 1.0;
    int n = 0;
    while (n < limit && m + n < x->depth) {
        int32_t best = -1;
        for (int32_t c = x->nodes[node].child; c >= 0; c = x->nodes[c].sibling)
            if (best < 0 || x->nodes[c].count > x->nodes[best].count ||
                (x->nodes[c].count == x->nodes[best].count &&
                 x->nodes[c].token < x->nodes[best].token))
                best = c;
        if (best < 0)
            break;
        prob *= (double)x->nodes[best].count / (double)x->nodes[node].count;
        if (prob < o->min_prob)
            break;
        out[n++] = x->nodes[best].token;
        *score += prob;
        node = best;
    }
    return n;
}

/* The sequence's own proposal: the earlier occurrences of the longest suffix
 * of own (up to depth - 1 tokens), then the continuation most of them share,
 * step by step. *score as above. */
static int sfx_propose_own(const int32_t *own, int n_own, int depth, const spec_suffix_opts *o,
                           int32_t *out, double *score) {
    *score = 0;
    if (n_own < 2)
        return 0;
    int max_m = depth - 1, best = 0;
    for (int i = n_own - 2; i >= 0 && best < max_m; i--)
        if (own[i] == own[n_own - 1]) {
            int l = match_len(own, n_own, i, max_m);
            best = l > best ? l : best;
        }
    if (best == 0)
        return 0;
    /* The occurrences' end positions, kept while they agree; at most the
     * latest 64: enough to count frequencies, bounded work. */
    int at[64], n = 0, n_at = 0;
    for (int i = n_own - 2; i >= 0 && n_at < 64; i--)
        if (own[i] == own[n_own - 1] && match_len(own, n_own, i, max_m) == best)
            at[n_at++] = i;
    int limit = o->k;
    if ((double)best * o->max_factor < limit)
        limit = (int)((double)best * o->max_factor);
    double prob = 1.0;
    while (n < limit && best + n < depth) {
        /* the most frequent next token among the occurrences that have one */
        int32_t tok = -1;
        int cnt = 0, valid = 0;
        for (int a = 0; a < n_at; a++) {
            int p = at[a] + 1 + n;
            if (p >= n_own)
                continue;
            valid++;
            int c = 0;
            for (int b = 0; b < n_at; b++)
                c += at[b] + 1 + n < n_own && own[at[b] + 1 + n] == own[p];
            if (c > cnt || (c == cnt && own[p] < tok)) {
                cnt = c;
                tok = own[p];
            }
        }
        if (valid == 0)
            break;
        prob *= (double)cnt / (double)valid;
        if (prob < o->min_prob)
            break;
        out[n++] = tok;
        *score += prob;
        int keep = 0;
        for (int a = 0; a < n_at; a++)
            if (at[a] + 1 + (n - 1) < n_own && own[at[a] + n] == tok)
                at[keep++] = at[a];
        n_at = keep;
    }
    return n;
}

int spec_suffix_propose(const spec_suffix *x, const int32_t *own, int n_own,
                        const spec_suffix_opts *o, int32_t *out) {
    if (!own || n_own < 1 || !o || o->k <= 0)
        return 0;
    int depth = x ? x->depth : 24;
    int32_t mine[64], theirs[64];
    int k = o->k < 64 ? o->k : 64;
    spec_suffix_opts oo = *o;
    oo.k = k;
    double s_own, s_idx = 0;
    int n_own_p = sfx_propose_own(own, n_own, depth, &oo, mine, &s_own);
    int n_idx = x ? sfx_propose_index(x, own, n_own, &oo, theirs, &s_idx) : 0;
    if (n_idx > 0 && s_idx > s_own) {
        memcpy(out, theirs, (size_t)n_idx * sizeof *out);
        return n_idx;
    }
    memcpy(out, mine, (size_t)n_own_p * sizeof *out);
    return n_own_p;
}
