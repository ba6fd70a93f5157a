/* sampler.c - logits -> token: bias, penalties, temperature, top-k, top-p,
 * min-p, and a seeded xoshiro256** generator so a seed reproduces output. */
#include "models/sampler.h"

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit;
    int32_t id;
} cand;

struct model_sampler {
    model_sampling p;
    int n_vocab;
    uint64_t rng[4];
    cand *cands;           /* [n_vocab] */
    int32_t *seen;         /* [n_vocab] 0, or 1 + the id's place in the edit list being built */
    const int32_t *banned; /* borrowed, [n_banned] */
    int n_banned;
    const uint32_t *allowed; /* borrowed bitset of n_vocab bits, or NULL */
    int32_t *edit_ids;       /* the last model_sampler_edits list */
    float *edit_vals;
    size_t edit_cap;
};

void model_sampler_set_banned(model_sampler *s, const int32_t *ids, int n) {
    s->banned = n > 0 ? ids : NULL;
    s->n_banned = ids && n > 0 ? n : 0;
}

void model_sampler_set_allowed(model_sampler *s, const uint32_t *allowed) {
    s->allowed = allowed;
}

int model_sampler_constrained(const model_sampler *s) {
    return s->n_banned > 0 || s->allowed != NULL;
}

/* Set bits of a word (no compiler builtin: plain C11). */
static int sampler_popcount(uint32_t x) {
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0f0f0f0fu;
    return (int)((x * 0x01010101u) >> 24);
}

int model_sampler_mask(const model_sampler *s, uint32_t *mask) {
    const int nv = s->n_vocab;
    const size_t words = ((size_t)nv + 31) / 32;
    if (s->allowed)
        memcpy(mask, s->allowed, words * sizeof *mask);
    else
        memset(mask, 0xff, words * sizeof *mask);
    if (nv % 32) /* a grammar's mask leaves these 0; a full one must too */
        mask[words - 1] &= (1u << (nv % 32)) - 1u;
    for (int i = 0; i < s->n_banned; i++)
        if (s->banned[i] >= 0 && s->banned[i] < nv)
            mask[s->banned[i] >> 5] &= ~(1u << (s->banned[i] & 31));
    int count = 0;
    for (size_t w = 0; w < words; w++)
        count += sampler_popcount(mask[w]);
    return count;
}

model_sampling model_sampling_default(void) {
    model_sampling p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

static double sampler_uniform(uint64_t s[4]) {
    return brisk_rng_uniform(s);
}

/* Room for n edits; the arrays keep their contents only when not grown. */
static int sampler_edits_reserve(model_sampler *s, size_t n) {
    if (n <= s->edit_cap)
        return 0;
    size_t cap = s->edit_cap ? s->edit_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *ids = brisk_malloc(cap * sizeof *ids);
    float *vals = brisk_malloc(cap * sizeof *vals);
    if (!ids || !vals) {
        free(ids);
        free(vals);
        return BRISK_ENOMEM;
    }
    free(s->edit_ids);
    free(s->edit_vals);
    s->edit_ids = ids;
    s->edit_vals = vals;
    s->edit_cap = cap;
    return 0;
}

model_sampler *model_sampler_create(const model_sampling *p, int n_vocab) {
    if (n_vocab <= 0)
        return NULL;
    model_sampler *s = brisk_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cands = brisk_malloc((size_t)n_vocab * sizeof *s->cands);
    s->seen = brisk_calloc((size_t)n_vocab, sizeof *s->seen);
    /* The edit list's room for the bias and a short penalty window, so that
     * most samplers never allocate while sampling. */
    size_t n_bias = p->n_logit_bias > 0 ? (size_t)p->n_logit_bias : 0;
    if (!s->cands || !s->seen || sampler_edits_reserve(s, n_bias + 64) < 0) {
        model_sampler_free(s);
        return NULL;
    }
    brisk_rng_seed(s->rng, p->seed); /* splitmix64 expands the seed into the 256-bit state */
    return s;
}

const model_sampling *model_sampler_params(const model_sampler *s) {
    return &s->p;
}

double model_sampler_next_uniform(model_sampler *s) {
    return sampler_uniform(s->rng);
}

void model_sampler_free(model_sampler *s) {
    if (!s)
        return;
    free(s->cands);
    free(s->seen);
    free(s->edit_ids);
    free(s->edit_vals);
    free(s);
}

int model_sampler_edits(model_sampler *s, const int32_t *hist, int n, model_sample_edits *out) {
    const model_sampling *p = &s->p;
    const int nv = s->n_vocab;
    memset(out, 0, sizeof *out);
    int rep = p->repetition_penalty != 1.0f;
    int pen = rep || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    /* The repetition penalty's window is the last penalty_last_n tokens; the
     * presence and frequency penalties see its part from pf_from on. */
    int start = (p->penalty_last_n > 0 && n > p->penalty_last_n) ? n - p->penalty_last_n : 0;
    int pf_start = p->pf_from > start ? p->pf_from : start;
    int lo = rep ? start : (pf_start < n ? pf_start : n);
    size_t need =
        (size_t)(p->n_logit_bias > 0 ? p->n_logit_bias : 0) + (pen ? (size_t)(n - lo) : 0);
    if (sampler_edits_reserve(s, need) < 0)
        return BRISK_ENOMEM;
    int32_t *ids = s->edit_ids, *seen = s->seen; /* all 0 between calls */
    float *vals = s->edit_vals;
    int k = 0;
    /* Bias: one edit per distinct id, its values summed in the order given. */
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias_ids[i];
        if (id < 0 || id >= nv)
            continue;
        if (seen[id] == 0) {
            seen[id] = k + 1;
            ids[k] = id;
            vals[k++] = p->logit_bias[i];
        } else {
            vals[seen[id] - 1] += p->logit_bias[i];
        }
    }
    for (int e = 0; e < k; e++)
        seen[ids[e]] = 0;
    out->n_bias = k;
    /* Penalties: the distinct ids from lo on, each with its count in the
     * presence/frequency window. */
    for (int i = lo; pen && i < n; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= nv)
            continue;
        if (seen[id] == 0) {
            seen[id] = k + 1;
            ids[k] = id;
            vals[k++] = 0.0f;
        }
        if (i >= pf_start)
            vals[seen[id] - 1] += 1.0f;
    }
    for (int e = out->n_bias; e < k; e++)
        seen[ids[e]] = 0;
    out->n_pen = k - out->n_bias;
    out->ids = ids;
    out->vals = vals;
    return 0;
}

void model_sample_edits_apply(const model_sampling *p, const model_sample_edits *e, float *logits) {
    for (int i = 0; i < e->n_bias; i++)
        logits[e->ids[i]] += e->vals[i];
    int rep = p->repetition_penalty != 1.0f;
    for (int i = e->n_bias; i < e->n_bias + e->n_pen; i++) {
        float l = logits[e->ids[i]];
        /* The repetition penalty divides positive logits and multiplies
         * negative ones so that it always lowers the token's probability. */
        if (rep)
            l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
        if (e->vals[i] > 0.0f)
            l -= p->presence_penalty + p->frequency_penalty * e->vals[i];
        logits[e->ids[i]] = l;
    }
}

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Moves the k largest candidates to the front (unordered): quickselect. */
static void sampler_select_top(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_desc(&c[i], &pivot) < 0)
                i++;
            while (cand_desc(&c[j], &pivot) > 0)
                j--;
            if (i <= j) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Draws one of c[0..n) with probability proportional to exp(logit - max_l). */
static int32_t sampler_draw(model_sampler *s, const cand *c, int n, double max_l) {
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += exp((double)c[i].logit - max_l);
    double r = sampler_uniform(s->rng) * total;
    for (int i = 0; i < n; i++) {
        r -= exp((double)c[i].logit - max_l);
        if (r < 0.0)
            return c[i].id;
    }
    return c[n - 1].id; /* rounding left r >= 0: the last candidate */
}

/* Bans, the grammar's mask and the edits, in place: every step before the
 * choice (sampler.h's order). 0, or BRISK_ENOMEM. */
static int sampler_edit(model_sampler *s, float *logits, const int32_t *history, int n_history) {
    int nv = s->n_vocab;
    if (s->allowed)
        for (int i = 0; i < nv; i++)
            if (!(s->allowed[i >> 5] >> (i & 31) & 1u))
                logits[i] = -INFINITY;
    for (int i = 0; i < s->n_banned; i++)
        if (s->banned[i] >= 0 && s->banned[i] < nv)
            logits[s->banned[i]] = -INFINITY;
    model_sample_edits e;
    int rc = model_sampler_edits(s, history, n_history, &e);
    if (rc < 0)
        return rc;
    model_sample_edits_apply(&s->p, &e, logits);
    return 0;
}

/* Greedy: the first maximum wins, so ties resolve to the lowest id. */
static int32_t sampler_argmax(const float *logits, int nv) {
    int32_t best = 0;
    for (int i = 1; i < nv; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* The candidates a draw chooses among (temperature > 0): s->cands[0, *n)
 * at logit / temperature after top-k, top-p and min-p, and in *max_l the
 * largest of them (the draw's weights are exp(l - max_l)). *n = 0: none. */
static void sampler_filter(model_sampler *s, const float *logits, int *n_out, double *max_out) {
    const model_sampling *p = &s->p;
    int nv = s->n_vocab;
    cand *c = s->cands;
    int n = 0;
    *n_out = 0;
    *max_out = 0;
    for (int i = 0; i < nv; i++) {
        /* -inf (e.g. a logit_bias of -100 and below) removes the token. */
        if (!(logits[i] > -INFINITY))
            continue;
        c[n].logit = logits[i] / p->temperature;
        c[n].id = i;
        n++;
    }
    if (n == 0)
        return;
    if (p->top_k > 0 && p->top_k < n) {
        sampler_select_top(c, n, p->top_k);
        n = p->top_k;
    }
    if (p->top_p >= 1.0f && p->min_p <= 0.0f) {
        /* No probability truncation: draw from every candidate, in any order. */
        double max_l = c[0].logit;
        for (int i = 1; i < n; i++)
            if (c[i].logit > max_l)
                max_l = c[i].logit;
        *n_out = n;
        *max_out = max_l;
        return;
    }
    /* top-p and min-p need candidates in descending order, but sorting all
     * 50k costs more than a small model's forward pass: sort a prefix that
     * grows until it holds every candidate that can survive. */
    int sorted = n < 64 ? n : 64;
    double max_l, all;
    for (;;) {
        sampler_select_top(c, n, sorted);
        qsort(c, (size_t)sorted, sizeof *c, cand_desc);
        max_l = c[0].logit;
        all = 0.0;
        for (int i = 0; i < n; i++)
            all += exp((double)c[i].logit - max_l);
        if (sorted == n)
            break;
        double prefix = 0.0;
        for (int i = 0; i < sorted; i++)
            prefix += exp((double)c[i].logit - max_l);
        if (p->top_p < 1.0f && prefix / all >= (double)p->top_p)
            break;
        if (p->min_p > 0.0f && exp((double)c[sorted - 1].logit - max_l) < (double)p->min_p)
            break;
        sorted = sorted * 4 < n ? sorted * 4 : n;
    }
    n = sorted;
    if (p->top_p < 1.0f) {
        /* Smallest prefix whose probability (over all candidates) reaches top_p. */
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - max_l) / all;
            if (cum >= (double)p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* min_p keeps tokens whose probability is at least min_p times the top one. */
        int keep = 1;
        while (keep < n && exp((double)c[keep].logit - max_l) >= (double)p->min_p)
            keep++;
        n = keep;
    }
    *n_out = n;
    *max_out = max_l;
}

int32_t model_sampler_sample(model_sampler *s, float *logits, const int32_t *history,
                             int n_history) {
    return model_sampler_sample_spec(s, logits, history, n_history, NULL, -1, NULL, NULL);
}

int32_t model_sampler_sample_spec(model_sampler *s, float *logits, const int32_t *history,
                                  int n_history, const float *q, int32_t x, float *p_x,
                                  float *probs) {
    int nv = s->n_vocab;
    int rc = sampler_edit(s, logits, history, n_history);
    if (rc < 0)
        return rc;
    if (p_x)
        *p_x = 0.0f;
    if (probs)
        memset(probs, 0, (size_t)nv * sizeof *probs);
    if (s->p.temperature <= 0.0f) {
        int32_t best = sampler_argmax(logits, nv);
        if (probs)
            probs[best] = 1.0f;
        if (p_x && q)
            *p_x = best == x ? 1.0f : 0.0f;
        return best;
    }
    int n;
    double max_l;
    sampler_filter(s, logits, &n, &max_l);
    if (n == 0) {
        /* No candidate: id 0, after the one draw every sample makes, so the
         * generator advances alike on every path (a speculative step puts it
         * back by counting samples). */
        (void)sampler_uniform(s->rng);
        return 0;
    }
    const cand *c = s->cands;
    if (!q && !probs)
        return sampler_draw(s, c, n, max_l);
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += exp((double)c[i].logit - max_l);
    if (probs)
        for (int i = 0; i < n; i++)
            probs[c[i].id] = (float)(exp((double)c[i].logit - max_l) / total);
    if (!q)
        return sampler_draw(s, c, n, max_l);
    /* The residual max(0, p - q) over the candidates (p is 0 elsewhere, so is
     * the residual), drawn with this sample's one draw. */
    double res = 0.0;
    for (int i = 0; i < n; i++) {
        double pi = exp((double)c[i].logit - max_l) / total;
        if (p_x && c[i].id == x)
            *p_x = (float)pi;
        double r = pi - (double)q[c[i].id];
        res += r > 0.0 ? r : 0.0;
    }
    if (!(res > 0.0)) /* p <= q everywhere: p itself (only reached when p == q) */
        return sampler_draw(s, c, n, max_l);
    double r = sampler_uniform(s->rng) * res;
    for (int i = 0; i < n; i++) {
        double d = exp((double)c[i].logit - max_l) / total - (double)q[c[i].id];
        if (d > 0.0 && (r -= d) < 0.0)
            return c[i].id;
    }
    for (int i = n - 1; i >= 0; i--) /* rounding left r >= 0: the last with residual */
        if (exp((double)c[i].logit - max_l) / total - (double)q[c[i].id] > 0.0)
            return c[i].id;
    return c[n - 1].id;
}

void model_sampler_rng_save(const model_sampler *s, model_sampler_rng *out) {
    memcpy(out->s, s->rng, sizeof out->s);
}

void model_sampler_rng_restore(model_sampler *s, const model_sampler_rng *saved, int n_samples) {
    memcpy(s->rng, saved->s, sizeof s->rng);
    if (s->p.temperature > 0.0f)
        for (int i = 0; i < n_samples; i++)
            (void)sampler_uniform(s->rng);
}
