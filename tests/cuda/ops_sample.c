/* ops_sample.c - kern_cuda_sample against a plain-C reference of its
 * contract (kernels/cuda/kern_cuda_sample.cuh).
 *
 * The reference is not models/sampler.c: the contract's draw walks the
 * survivors in id order, the CPU sampler in its own candidate order, so the
 * same u picks different (equally distributed) tokens. It is the contract
 * written out plainly: the edits in float, l / temperature, a full sort by
 * (value desc, id asc), top-k, top-p over the kept set with double sums in
 * sorted order, min-p, and the draw r -= exp(l - max) over the survivors
 * sorted by id. Greedy rows are also checked against model_sampler_sample
 * itself, exactly.
 *
 * Bounds: the ids must be EQUAL, row by row. Everything before the draw is
 * exact on both sides (float edits, the division, the comparisons, integer
 * counts); the only differences are the order of the double sums (a tree
 * on the GPU, sequential here) and exp's last bit (the GPU's double exp is
 * within 1 ulp, glibc's within 1 ulp): ~1e-16 relative, which can change a
 * top-p cut, a min-p comparison or the draw only when top_p, min_p or
 * u * total lands that close to a cumulative value. The reference notes a
 * row whose comparison came within 1e-9 (relative) of flipping; with these
 * seeds none should, and a mismatch on a noted row would not be a bug.
 *
 * The distribution check draws 20000 times from one row (temperature 1,
 * top_k 50) with different u: every count within 5 sigma of its
 * probability (binomial), besides every id equal to the reference's.
 *
 * Masks (a grammar's allowed tokens less the bans, step 0): the words come
 * from model_sampler_mask, as in the backend, for masks that allow about 1
 * id in 64, 15 in 16, one id, none, and no grammar with bans alone
 * (min_tokens); the bans take the best allowed logit and the id a +30 bias
 * raises. The same exactness: ids equal to the reference (which sets the
 * masked logits to -inf before the edits, as models/sampler.c), greedy rows
 * equal to model_sampler_sample with that grammar mask and those bans set,
 * and no id outside its mask (a row that allows nothing gives id 0). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "kernels/cuda/kern_cuda_buf.h"
#include "kernels/cuda/kern_cuda_sample.cuh"
#include "models/sampler.h"
#include "tests/cuda/cuda_test.h"

/* ---- reference ----------------------------------------------------------- */

typedef struct samp_cand {
    float v;
    int32_t id;
} samp_cand;

/* value desc, id asc: the contract's order (-0 == +0: a tie, by id) */
static int samp_desc(const void *a, const void *b) {
    const samp_cand *x = a, *y = b;
    if (x->v != y->v)
        return x->v < y->v ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

static int samp_by_id(const void *a, const void *b) {
    const samp_cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* Whether a double comparison a >= b (or a < b) came within rel of flipping. */
static int samp_close(double a, double b, double rel) {
    return fabs(a - b) <= rel * fmax(fabs(b), 1e-300);
}

/* Steps 0-2 on a copy: l = the row's logits, -inf outside its mask (masks:
 * every row's words, read at p->mask_first when that is >= 0), after its
 * bias and penalty edits. */
static void samp_edit(float *l, const float *logits, int n_vocab, const kern_cuda_sample_row *p,
                      const int32_t *edit_ids, const float *edit_vals, const uint32_t *masks) {
    memcpy(l, logits, (size_t)n_vocab * sizeof(float));
    if (p->mask_first >= 0)
        for (int i = 0; i < n_vocab; i++)
            if (!(masks[(size_t)p->mask_first + (size_t)(i >> 5)] >> (i & 31) & 1u))
                l[i] = -INFINITY;
    for (int e = 0; e < p->n_bias; e++) {
        int32_t id = edit_ids[p->bias_first + e];
        if (id >= 0 && id < n_vocab)
            l[id] += edit_vals[p->bias_first + e];
    }
    for (int e = 0; e < p->n_pen; e++) {
        int32_t id = edit_ids[p->pen_first + e];
        if (id < 0 || id >= n_vocab)
            continue;
        float x = l[id];
        if (p->repetition_penalty != 1.0f)
            x = x > 0.0f ? x / p->repetition_penalty : x * p->repetition_penalty;
        if (edit_vals[p->pen_first + e] > 0.0f) /* 0: repetition window only */
            x -= p->presence_penalty + p->frequency_penalty * edit_vals[p->pen_first + e];
        l[id] = x;
    }
}

/* Steps 4-7: the survivors into c[0, return), sorted by id; *max_l the top
 * value; *near set when a top-p or min-p comparison was within 1e-9. 0 when
 * there is no candidate. l: the edited row. */
static int samp_survivors(samp_cand *c, const float *l, int n_vocab, const kern_cuda_sample_row *p,
                          double *max_l, int *near) {
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!(l[i] > -INFINITY))
            continue;
        float v = l[i] / p->temperature;
        if (isnan(v))
            continue;
        c[n].v = v;
        c[n].id = i;
        n++;
    }
    if (n == 0)
        return 0;
    qsort(c, (size_t)n, sizeof *c, samp_desc);
    int k = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    *max_l = c[0].v;
    if (p->top_p < 1.0f) {
        double all = 0.0, cum = 0.0;
        for (int j = 0; j < k; j++)
            all += exp((double)c[j].v - *max_l);
        for (int j = 0; j < k; j++) {
            cum += exp((double)c[j].v - *max_l);
            if (samp_close(cum / all, (double)p->top_p, 1e-9))
                *near = 1;
            if (cum / all >= (double)p->top_p) {
                k = j + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int keep = 1;
        while (keep < k) {
            double e = exp((double)c[keep].v - *max_l);
            if (samp_close(e, (double)p->min_p, 1e-9))
                *near = 1;
            if (!(e >= (double)p->min_p))
                break;
            keep++;
        }
        k = keep;
    }
    qsort(c, (size_t)k, sizeof *c, samp_by_id);
    return k;
}

/* Step 8 over survivors sorted by id. */
static int32_t samp_draw(const samp_cand *c, int n, double max_l, double u, int *near) {
    double total = 0.0;
    for (int j = 0; j < n; j++)
        total += exp((double)c[j].v - max_l);
    double r = u * total;
    for (int j = 0; j < n; j++) {
        r -= exp((double)c[j].v - max_l);
        if (fabs(r) <= 1e-9 * total)
            *near = 1;
        if (r < 0.0)
            return c[j].id;
    }
    return c[n - 1].id;
}

/* The contract's id for row p; c: n_vocab scratch candidates, l: n_vocab
 * scratch floats. */
static int32_t samp_ref(const float *logits, int n_vocab, const kern_cuda_sample_row *p,
                        const int32_t *edit_ids, const float *edit_vals, const uint32_t *masks,
                        float *l, samp_cand *c, int *near) {
    samp_edit(l, logits, n_vocab, p, edit_ids, edit_vals, masks);
    if (p->temperature <= 0.0f) {
        int32_t best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (l[i] > l[best])
                best = i;
        return best;
    }
    double max_l = 0.0;
    int n = samp_survivors(c, l, n_vocab, p, &max_l, near);
    return n == 0 ? 0 : samp_draw(c, n, max_l, p->u, near);
}

/* ---- cases ----------------------------------------------------------------- */

enum { SAMP_PLAIN, SAMP_QUANT, SAMP_HOLES, SAMP_TIES, SAMP_ALL_NEG_INF, SAMP_KINDS };

/* One logit row: normal * 3 (never zero), then by kind: QUANT rounds to
 * quarters (ties everywhere, zeros and -0 included); HOLES puts NaN at id 0
 * and ~1% NaN and ~1% -inf elsewhere; TIES copies the largest value to
 * another id and the 40th largest to three more (ties at the top and at the
 * top-40 cut); ALL_NEG_INF is -inf throughout. */
static void samp_fill_row(float *x, int n, int kind, samp_cand *scratch) {
    fill(x, (size_t)n, 3.0f);
    switch (kind) {
    case SAMP_QUANT:
        for (int i = 0; i < n; i++)
            x[i] = roundf(x[i] * 4.0f) / 4.0f;
        break;
    case SAMP_HOLES:
        x[0] = NAN;
        for (int q = 0; q < 1 + n / 100; q++) {
            x[1 + rng_int(n - 1)] = NAN;
            x[1 + rng_int(n - 1)] = -INFINITY;
        }
        break;
    case SAMP_TIES: {
        for (int i = 0; i < n; i++) {
            scratch[i].v = x[i];
            scratch[i].id = i;
        }
        qsort(scratch, (size_t)n, sizeof *scratch, samp_desc);
        x[rng_int(n)] = scratch[0].v;
        if (n > 40)
            for (int q = 0; q < 3; q++)
                x[rng_int(n)] = scratch[39].v;
        break;
    }
    case SAMP_ALL_NEG_INF:
        for (int i = 0; i < n; i++)
            x[i] = -INFINITY;
        break;
    default: break;
    }
}

#define SAMP_HIST 64
#define SAMP_BANS 6 /* bans of a masked row at most */

/* A batch under construction: rows, the edits they point into, and each
 * row's history (for model_sampler_sample on greedy rows); for masked rows
 * the words the kernel reads (model_sampler_mask's) and what they were made
 * of, for model_sampler_sample: the grammar's allowed words at the same
 * offsets (has_allow 0: no grammar) and the bans. */
typedef struct samp_batch {
    kern_cuda_sample_row *rows;
    int n_rows, cap_rows;
    int32_t *edit_ids;
    float *edit_vals;
    int n_edits, cap_edits;
    int32_t *hist; /* SAMP_HIST per row */
    int *n_hist;
    uint32_t *masks, *allow;
    int n_mask_words, cap_mask_words;
    uint8_t *has_allow; /* per row */
    int32_t *bans;      /* SAMP_BANS per row */
    int *n_ban;
} samp_batch;

/* Presence and frequency count the history from here (model_sampling.pf_from:
 * the prompt is left to the repetition penalty). */
#define SAMP_PF_FROM 20

static void samp_edit_push(samp_batch *b, int32_t id, float v) {
    if (b->n_edits == b->cap_edits) {
        b->cap_edits = b->cap_edits ? 2 * b->cap_edits : 256;
        int32_t *ni = realloc(b->edit_ids, (size_t)b->cap_edits * sizeof *ni);
        float *nv = realloc(b->edit_vals, (size_t)b->cap_edits * sizeof *nv);
        if (!ni || !nv) {
            fprintf(stderr, "test_cuda_ops: out of host memory\n");
            exit(1);
        }
        b->edit_ids = ni;
        b->edit_vals = nv;
    }
    b->edit_ids[b->n_edits] = id;
    b->edit_vals[b->n_edits] = v;
    b->n_edits++;
}

/* Index of the largest non-NaN logit (the bias bans it). */
static int samp_top_id(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
            best = i;
    return best < 0 ? 0 : best;
}

/* Appends a row. bias: 0 none, else edits that ban the top logit (-inf),
 * raise a random id by +30 (bias 1) or +10 (bias 2), nudge four ids by up
 * to +-5, and name two ids out of range (ignored). pen: a random history of
 * SAMP_HIST tokens drawn mostly from a pool of the top id, the biased ids
 * (an id with both edits: the order matters) and random ones, plus two out
 * of range, turned into (id, count) edits with repetition 1.3, presence 0.5,
 * frequency 0.2. */
static void samp_add_row(samp_batch *b, const float *logits, int n_vocab, int logit_row, float temp,
                         int top_k, float top_p, float min_p, int bias, int pen) {
    if (b->n_rows == b->cap_rows) {
        fprintf(stderr, "test_cuda_ops: samp_add_row: too many rows\n");
        exit(1);
    }
    const float *x = logits + (size_t)logit_row * n_vocab;
    kern_cuda_sample_row *p = &b->rows[b->n_rows];
    memset(p, 0, sizeof *p);
    p->logit_row = logit_row;
    p->temperature = temp;
    p->top_k = top_k;
    p->top_p = top_p;
    p->min_p = min_p;
    p->repetition_penalty = 1.0f;
    p->u = rng_uniform();
    p->mask_first = -1;
    p->q_row = -1;
    b->has_allow[b->n_rows] = 0;
    b->n_ban[b->n_rows] = 0;
    p->bias_first = b->n_edits;
    int used[6], n_used = 0;
    if (bias) {
        used[0] = samp_top_id(x, n_vocab);
        samp_edit_push(b, used[0], -INFINITY);
        for (int q = 1; q < 6; q++) {
            int id, dup;
            do { /* distinct ids: the contract's hosts sum duplicates */
                id = rng_int(n_vocab);
                dup = 0;
                for (int w = 0; w < q; w++)
                    dup |= used[w] == id;
            } while (dup);
            used[q] = id;
            samp_edit_push(
                b, id, q == 1 ? (bias == 1 ? 30.0f : 10.0f) : (float)(rng_uniform() * 10.0 - 5.0));
        }
        n_used = 6;
        samp_edit_push(b, -1, 1.0f);
        samp_edit_push(b, n_vocab + 3, 1.0f);
    }
    p->n_bias = b->n_edits - p->bias_first;
    p->pen_first = b->n_edits;
    int32_t *h = b->hist + (size_t)b->n_rows * SAMP_HIST;
    b->n_hist[b->n_rows] = 0;
    if (pen) {
        p->repetition_penalty = 1.3f;
        p->presence_penalty = 0.5f;
        p->frequency_penalty = 0.2f;
        int32_t pool[12]; /* the top id, the biased ids (both edits on one id), random */
        pool[0] = samp_top_id(x, n_vocab);
        for (int q = 1; q < 12; q++)
            pool[q] = q < n_used ? used[q] : rng_int(n_vocab);
        for (int t = 0; t < SAMP_HIST - 2; t++)
            h[t] = rng_int(4) ? pool[rng_int(12)] : rng_int(n_vocab);
        h[SAMP_HIST - 2] = -1;
        h[SAMP_HIST - 1] = n_vocab + 7;
        b->n_hist[b->n_rows] = SAMP_HIST;
        /* (id, count) over the in-range ids, each once; one bogus edit */
        for (int t = 0; t < SAMP_HIST; t++) {
            int32_t id = h[t];
            if (id < 0 || id >= n_vocab)
                continue;
            int seen = 0, count = 0;
            for (int w = 0; w < t; w++)
                seen |= h[w] == id;
            if (seen)
                continue;
            for (int w = t > SAMP_PF_FROM ? t : SAMP_PF_FROM; w < SAMP_HIST; w++)
                count += h[w] == id;
            samp_edit_push(b, id, (float)count);
        }
        samp_edit_push(b, n_vocab + 7, 2.0f);
    }
    p->n_pen = b->n_edits - p->pen_first;
    b->n_rows++;
}

/* model_sampler_sample on a greedy row (bias and history as the row's). */
static int32_t samp_cpu_greedy(const samp_batch *b, int r, const float *logits, int n_vocab,
                               float *scratch) {
    const kern_cuda_sample_row *p = &b->rows[r];
    model_sampling s = model_sampling_default();
    s.temperature = 0.0f;
    s.repetition_penalty = p->repetition_penalty;
    s.presence_penalty = p->presence_penalty;
    s.frequency_penalty = p->frequency_penalty;
    s.pf_from = b->n_hist[r] ? SAMP_PF_FROM : 0;
    s.n_logit_bias = p->n_bias;
    s.logit_bias_ids = b->edit_ids + p->bias_first;
    s.logit_bias = b->edit_vals + p->bias_first;
    model_sampler *ms = model_sampler_create(&s, n_vocab);
    if (!ms) {
        fprintf(stderr, "test_cuda_ops: model_sampler_create failed\n");
        exit(1);
    }
    if (p->mask_first >= 0) { /* the grammar's mask and the bans the row's words came from */
        model_sampler_set_allowed(ms, b->has_allow[r] ? b->allow + p->mask_first : NULL);
        model_sampler_set_banned(ms, b->bans + (size_t)r * SAMP_BANS, b->n_ban[r]);
    }
    memcpy(scratch, logits + (size_t)p->logit_row * n_vocab, (size_t)n_vocab * sizeof(float));
    int32_t id = model_sampler_sample(ms, scratch, b->hist + (size_t)r * SAMP_HIST, b->n_hist[r]);
    model_sampler_free(ms);
    return id;
}

/* Runs the batch on the GPU; got: n_rows ids. */
static void samp_run(const samp_batch *b, const float *logits, int n_lrows, int n_vocab,
                     int32_t *got) {
    size_t ws_bytes = kern_cuda_sample_ws_bytes(b->n_rows, n_vocab);
    float *d_l = dev_from(logits, (size_t)n_lrows * n_vocab * sizeof(float));
    kern_cuda_sample_row *d_rows = dev_from(b->rows, (size_t)b->n_rows * sizeof *b->rows);
    int32_t *d_eid =
        b->n_edits ? dev_from(b->edit_ids, (size_t)b->n_edits * sizeof(int32_t)) : NULL;
    float *d_ev = b->n_edits ? dev_from(b->edit_vals, (size_t)b->n_edits * sizeof(float)) : NULL;
    uint32_t *d_mask =
        b->n_mask_words ? dev_from(b->masks, (size_t)b->n_mask_words * sizeof(uint32_t)) : NULL;
    int32_t *d_ids = dev_alloc((size_t)b->n_rows * sizeof(int32_t));
    void *d_ws = dev_alloc(ws_bytes);
    must(kern_cuda_memset(d_ids, 0x7f, (size_t)b->n_rows * sizeof(int32_t), g_stream),
         "kern_cuda_memset");
    must(kern_cuda_sample(d_ids, d_l, n_lrows, n_vocab, d_rows, b->n_rows, d_eid, d_ev, b->n_edits,
                          d_mask, b->n_mask_words, NULL, 0, NULL, d_ws, ws_bytes, g_stream),
         "kern_cuda_sample");
    to_host(got, d_ids, (size_t)b->n_rows * sizeof(int32_t));
    dev_free(d_l), dev_free(d_rows), dev_free(d_eid), dev_free(d_ev), dev_free(d_ids);
    dev_free(d_mask), dev_free(d_ws);
}

static void samp_batch_init(samp_batch *b, int cap_rows) {
    memset(b, 0, sizeof *b);
    b->cap_rows = cap_rows;
    b->rows = xmalloc((size_t)cap_rows * sizeof *b->rows);
    b->hist = xmalloc((size_t)cap_rows * SAMP_HIST * sizeof(int32_t));
    b->n_hist = xmalloc((size_t)cap_rows * sizeof(int));
    b->has_allow = xmalloc((size_t)cap_rows);
    b->bans = xmalloc((size_t)cap_rows * SAMP_BANS * sizeof(int32_t));
    b->n_ban = xmalloc((size_t)cap_rows * sizeof(int));
}

static void samp_batch_free(samp_batch *b) {
    free(b->rows), free(b->hist), free(b->n_hist), free(b->edit_ids), free(b->edit_vals);
    free(b->masks), free(b->allow), free(b->has_allow), free(b->bans), free(b->n_ban);
}

enum { MASK_SPARSE, MASK_DENSE, MASK_ONE, MASK_NONE, MASK_BANS_ONLY, MASK_KINDS };
static const char *const k_mask_names[MASK_KINDS] = {"sparse", "dense", "one", "none", "bans only"};

/* Gives row r (the last added) a mask of this kind: a grammar's mask that
 * allows about 1 id in 64 and the best logit (SPARSE), about 15 in 16
 * (DENSE), one random id (ONE), nothing (NONE), or no grammar and bans alone
 * (BANS_ONLY, min_tokens' case). Bans, except for NONE: the best allowed
 * logit, the id the row's +30/+10 bias raises (it must stay out), two random
 * ids, and -1 and n_vocab + 2 (ignored). The words the kernel reads come
 * from model_sampler_mask, as in the backend. */
static void samp_mask_row(samp_batch *b, const float *logits, int n_vocab, int kind) {
    const int r = b->n_rows - 1, words = (n_vocab + 31) / 32;
    kern_cuda_sample_row *p = &b->rows[r];
    const float *x = logits + (size_t)p->logit_row * n_vocab;
    if (b->n_mask_words + words > b->cap_mask_words) {
        int cap = b->cap_mask_words ? b->cap_mask_words : 4096;
        while (cap < b->n_mask_words + words)
            cap *= 2;
        uint32_t *nm = realloc(b->masks, (size_t)cap * sizeof *nm);
        uint32_t *na = nm ? realloc(b->allow, (size_t)cap * sizeof *na) : NULL;
        if (nm)
            b->masks = nm;
        if (!nm || !na) {
            fprintf(stderr, "test_cuda_ops: out of host memory\n");
            exit(1);
        }
        b->allow = na;
        b->cap_mask_words = cap;
    }
    const int off = b->n_mask_words;
    uint32_t *al = b->allow + off;
    memset(al, 0, (size_t)words * sizeof *al);
    int top = samp_top_id(x, n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        int on = kind == MASK_SPARSE  ? rng_int(64) == 0 || i == top
                 : kind == MASK_DENSE ? rng_int(16) != 0
                                      : 0;
        al[i >> 5] |= (uint32_t)on << (i & 31);
    }
    if (kind == MASK_ONE) {
        const int one = rng_int(n_vocab);
        al[one >> 5] |= 1u << (one & 31);
    }
    b->has_allow[r] = kind != MASK_BANS_ONLY;
    int32_t *ban = b->bans + (size_t)r * SAMP_BANS;
    int n_ban = 0;
    if (kind != MASK_NONE) {
        int best = -1; /* the best allowed logit */
        for (int i = 0; i < n_vocab; i++)
            if ((kind == MASK_BANS_ONLY || (al[i >> 5] >> (i & 31) & 1u)) && !isnan(x[i]) &&
                (best < 0 || x[i] > x[best]))
                best = i;
        if (best >= 0 && kind != MASK_ONE) /* ONE keeps its one id */
            ban[n_ban++] = best;
        if (p->n_bias >= 2)
            ban[n_ban++] = b->edit_ids[p->bias_first + 1];
        ban[n_ban++] = rng_int(n_vocab);
        ban[n_ban++] = rng_int(n_vocab);
        ban[n_ban++] = -1;
        ban[n_ban++] = n_vocab + 2;
    }
    b->n_ban[r] = n_ban;
    model_sampling sd = model_sampling_default();
    model_sampler *ms = model_sampler_create(&sd, n_vocab);
    if (!ms) {
        fprintf(stderr, "test_cuda_ops: model_sampler_create failed\n");
        exit(1);
    }
    model_sampler_set_allowed(ms, b->has_allow[r] ? al : NULL);
    model_sampler_set_banned(ms, ban, n_ban);
    model_sampler_mask(ms, b->masks + off);
    model_sampler_free(ms);
    p->mask_first = off;
    b->n_mask_words += words;
}

/* Whether id is one row p may give: allowed by its mask, or 0 when no
 * allowed logit is left above -inf (the mask allows nothing, or the edits
 * and the row's own -inf and NaN leave nothing: no candidate); any id
 * without a mask. l: the row after the mask and the edits (samp_edit). */
static int samp_in_mask(const samp_batch *b, const kern_cuda_sample_row *p, int n_vocab, int32_t id,
                        const float *l) {
    if (p->mask_first < 0)
        return 1;
    const uint32_t *m = b->masks + p->mask_first;
    int any = 0;
    for (int i = 0; i < n_vocab && !any; i++)
        any = l[i] > -INFINITY; /* outside the mask l is -inf */
    if (!any)
        return id == 0;
    return id >= 0 && id < n_vocab && (m[id >> 5] >> (id & 31) & 1u);
}

static void samp_describe(const kern_cuda_sample_row *p, char *buf, size_t len) {
    snprintf(buf, len, "lrow=%d T=%g k=%d p=%g minp=%g bias=%d pen=%d mask=%d u=%.17g",
             p->logit_row, (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p,
             p->n_bias, p->n_pen, p->mask_first, p->u);
}

/* Runs batch b on the GPU and reports its ids against the reference, its
 * greedy rows against model_sampler_sample, and (with masks) ids outside
 * their row's mask. what: "" or "mask " (the report lines' prefix);
 * c, l: n_vocab scratch. */
static void samp_check(const samp_batch *b, const float *logits, int n_lrows, int n_vocab,
                       const char *what, samp_cand *c, float *l) {
    int32_t *got = xmalloc((size_t)b->n_rows * sizeof(int32_t));
    samp_run(b, logits, n_lrows, n_vocab, got);
    int wrong = 0, wrong_greedy = 0, n_greedy = 0, near = 0, outside = 0;
    for (int r = 0; r < b->n_rows; r++) {
        const kern_cuda_sample_row *p = &b->rows[r];
        int nr = 0;
        int32_t ref = samp_ref(logits + (size_t)p->logit_row * n_vocab, n_vocab, p, b->edit_ids,
                               b->edit_vals, b->masks, l, c, &nr);
        near += nr;
        char desc[160];
        if (got[r] != ref) {
            samp_describe(p, desc, sizeof desc);
            if (wrong++ < 5)
                fprintf(stderr, "    row %d (%s): gpu %d, ref %d%s\n", r, desc, got[r], ref,
                        nr ? " (near a boundary)" : "");
        }
        if (nr) {
            samp_describe(p, desc, sizeof desc);
            printf("    note: row %d (%s) is within 1e-9 of a boundary\n", r, desc);
        }
        if (!samp_in_mask(b, p, n_vocab, got[r], l) && outside++ < 5)
            fprintf(stderr, "    row %d: gpu %d is outside its mask\n", r, got[r]);
        if (p->temperature <= 0.0f) {
            n_greedy++;
            int32_t cpu = samp_cpu_greedy(b, r, logits, n_vocab, l);
            if (cpu != got[r] && wrong_greedy++ < 5)
                fprintf(stderr, "    row %d: gpu %d, model_sampler_sample %d\n", r, got[r], cpu);
        }
    }
    report("SAMPLE", wrong, 0.0, "%svocab=%d,rows=%d; %d ids differ from the reference, %d near",
           what, n_vocab, b->n_rows, wrong, near);
    report("SAMPLE", wrong_greedy, 0.0, "%svocab=%d,greedy rows=%d; %d differ from the CPU sampler",
           what, n_vocab, n_greedy, wrong_greedy);
    if (b->n_mask_words)
        report("SAMPLE", outside, 0.0, "%svocab=%d,rows=%d; %d ids outside their mask", what,
               n_vocab, b->n_rows, outside);
    free(got);
}

/* Every combination of temperature (greedy, 0.7, 1.5), top_k (off, 1, 40,
 * n_vocab + 5), top_p (off, 0.9, 0.5), min_p (off, 0.05), penalties and
 * bias (each off/on) - 288 rows over 20 logit rows of the five kinds -
 * plus, for large vocabularies, rows whose top-k or top-p set is larger
 * than the kernel's 4096-entry head (its other paths), the all -inf row
 * greedy and sampled, and a few edges (below). */
static void samp_vocab_case(int n_vocab) {
    const int n_lrows = 20;
    const float temps[] = {0.0f, 0.7f, 1.5f}, top_ps[] = {1.0f, 0.9f, 0.5f},
                min_ps[] = {0.0f, 0.05f};
    const int top_ks[] = {0, 1, 40, n_vocab + 5};
    float *logits = xmalloc((size_t)n_lrows * n_vocab * sizeof(float));
    samp_cand *c = xmalloc((size_t)n_vocab * sizeof *c);
    float *l = xmalloc((size_t)n_vocab * sizeof(float));
    for (int lr = 0; lr < n_lrows; lr++) /* the last row is the all -inf one */
        samp_fill_row(logits + (size_t)lr * n_vocab, n_vocab,
                      lr == n_lrows - 1 ? SAMP_ALL_NEG_INF : lr % SAMP_ALL_NEG_INF, c);
    samp_batch b;
    samp_batch_init(&b, 400);
    int combo = 0;
    for (size_t ti = 0; ti < ARRAY_LEN(temps); ti++)
        for (size_t ki = 0; ki < ARRAY_LEN(top_ks); ki++)
            for (size_t pi = 0; pi < ARRAY_LEN(top_ps); pi++)
                for (size_t mi = 0; mi < ARRAY_LEN(min_ps); mi++)
                    for (int pen = 0; pen < 2; pen++)
                        for (int bias = 0; bias < 2; bias++, combo++)
                            samp_add_row(&b, logits, n_vocab, combo % (n_lrows - 1), temps[ti],
                                         top_ks[ki], top_ps[pi], min_ps[mi],
                                         bias ? 1 + (combo / 2) % 2 : 0, pen);
    if (n_vocab >= 20000) {
        const struct {
            float t, p, minp;
            int k;
        } big[] = {
            {1.5f, 1.0f, 0.0f, 5000},    {1.5f, 0.9f, 0.0f, 5000}, {1.5f, 0.99f, 0.0f, 5000},
            {1.5f, 1.0f, 0.05f, 5000},   {1.5f, 0.99f, 0.0f, 0},   {1.0f, 1.0f, 0.0f, 0},
            {1.0f, 0.95f, 0.01f, 20000}, {1.5f, 0.9f, 0.001f, 0},  {0.7f, 0.999f, 0.0f, 0},
        };
        for (size_t q = 0; q < ARRAY_LEN(big); q++)
            for (int lr = 0; lr < 4; lr++) /* one logit row of each kind */
                samp_add_row(&b, logits, n_vocab, lr, big[q].t, big[q].k, big[q].p, big[q].minp,
                             (int)(q % 2), (int)(q % 3 == 0));
    }
    samp_add_row(&b, logits, n_vocab, n_lrows - 1, 0.0f, 0, 1.0f, 0.0f, 0, 0);
    samp_add_row(&b, logits, n_vocab, n_lrows - 1, 1.0f, 0, 1.0f, 0.0f, 0, 0);
    samp_add_row(&b, logits, n_vocab, n_lrows - 1, 0.7f, 40, 0.9f, 0.05f, 0, 1);
    /* Edges: min_p > 1 keeps only the top one (a tied maximum: the lower
     * id); u = 0 (the lowest-id survivor); top_p 0
     * keeps the top one; a NaN temperature drops every candidate (id 0). */
    samp_add_row(&b, logits, n_vocab, SAMP_TIES, 1.0f, 0, 1.0f, 2.0f, 0, 0);
    samp_add_row(&b, logits, n_vocab, SAMP_TIES, 1.0f, 0, 0.9f, 2.0f, 0, 0);
    samp_add_row(&b, logits, n_vocab, SAMP_PLAIN, 0.7f, 40, 1.0f, 0.0f, 0, 0);
    b.rows[b.n_rows - 1].u = 0.0;
    samp_add_row(&b, logits, n_vocab, SAMP_QUANT, 1.5f, 3, 1.0f, 0.0f, 0, 0);
    b.rows[b.n_rows - 1].u = 0.0;
    samp_add_row(&b, logits, n_vocab, SAMP_HOLES, 1.0f, 0, 0.0f, 0.0f, 1, 0);
    samp_add_row(&b, logits, n_vocab, SAMP_PLAIN, NAN, 40, 0.9f, 0.0f, 0, 0);

    samp_check(&b, logits, n_lrows, n_vocab, "", c, l);
    samp_batch_free(&b);
    free(logits), free(c), free(l);
}

/* Masked rows: each kind of mask (samp_mask_row) with every temperature
 * (greedy, 0.7, 1.5), top_k (off, 40, n_vocab + 5), top_p (off, 0.9) and
 * min_p (off, 0.05), the bias and the penalties on alternate rows: 180 rows
 * over logit rows of every kind; for large vocabularies also dense masks
 * whose top-k or top-p set outgrows the kernel's 4096-entry head. */
static void samp_mask_case(int n_vocab) {
    const int n_lrows = 8;
    const float temps[] = {0.0f, 0.7f, 1.5f}, top_ps[] = {1.0f, 0.9f}, min_ps[] = {0.0f, 0.05f};
    const int top_ks[] = {0, 40, n_vocab + 5};
    float *logits = xmalloc((size_t)n_lrows * n_vocab * sizeof(float));
    samp_cand *c = xmalloc((size_t)n_vocab * sizeof *c);
    float *l = xmalloc((size_t)n_vocab * sizeof(float));
    for (int lr = 0; lr < n_lrows; lr++) /* no all -inf row: the masks make empty rows */
        samp_fill_row(logits + (size_t)lr * n_vocab, n_vocab, lr % SAMP_ALL_NEG_INF, c);
    samp_batch b;
    samp_batch_init(&b, 220);
    int combo = 0;
    for (int kind = 0; kind < MASK_KINDS; kind++)
        for (size_t ti = 0; ti < ARRAY_LEN(temps); ti++)
            for (size_t ki = 0; ki < ARRAY_LEN(top_ks); ki++)
                for (size_t pi = 0; pi < ARRAY_LEN(top_ps); pi++)
                    for (size_t mi = 0; mi < ARRAY_LEN(min_ps); mi++, combo++) {
                        samp_add_row(&b, logits, n_vocab, combo % n_lrows, temps[ti], top_ks[ki],
                                     top_ps[pi], min_ps[mi], combo % 2 ? 1 + (combo / 2) % 2 : 0,
                                     (combo / 3) % 2);
                        samp_mask_row(&b, logits, n_vocab, kind);
                    }
    if (n_vocab >= 20000) {
        const struct {
            float t, p, minp;
            int k;
        } big[] = {{1.5f, 0.99f, 0.0f, 0},
                   {1.0f, 1.0f, 0.0f, 0},
                   {1.5f, 1.0f, 0.05f, 5000},
                   {1.0f, 0.95f, 0.01f, 20000}};
        for (size_t q = 0; q < ARRAY_LEN(big); q++)
            for (int lr = 0; lr < 4; lr++) {
                samp_add_row(&b, logits, n_vocab, lr, big[q].t, big[q].k, big[q].p, big[q].minp,
                             (int)(q % 2), lr % 2);
                samp_mask_row(&b, logits, n_vocab, lr % 2 ? MASK_DENSE : MASK_BANS_ONLY);
            }
    }
    char what[96];
    snprintf(what, sizeof what, "mask (%s, %s, %s, %s, %s) ", k_mask_names[0], k_mask_names[1],
             k_mask_names[2], k_mask_names[3], k_mask_names[4]);
    samp_check(&b, logits, n_lrows, n_vocab, what, c, l);
    samp_batch_free(&b);
    free(logits), free(c), free(l);
}

/* 20000 draws from one row, temperature 1, top_k 50, u random. */
static void samp_distribution(void) {
    const int n_vocab = 1000, n = 20000, k = 50;
    float *x = xmalloc((size_t)n_vocab * sizeof(float));
    samp_cand *c = xmalloc((size_t)n_vocab * sizeof *c);
    fill(x, (size_t)n_vocab, 3.0f);
    samp_batch b;
    samp_batch_init(&b, n);
    for (int r = 0; r < n; r++)
        samp_add_row(&b, x, n_vocab, 0, 1.0f, k, 1.0f, 0.0f, 0, 0);
    int32_t *got = xmalloc((size_t)n * sizeof(int32_t));
    samp_run(&b, x, 1, n_vocab, got);

    int near = 0;
    double max_l = 0.0;
    int ns = samp_survivors(c, x, n_vocab, &b.rows[0], &max_l, &near);
    double total = 0.0;
    for (int j = 0; j < ns; j++)
        total += exp((double)c[j].v - max_l);
    int wrong = 0, outside = 0;
    int *count = xmalloc((size_t)ns * sizeof(int));
    memset(count, 0, (size_t)ns * sizeof(int));
    for (int r = 0; r < n; r++) {
        wrong += got[r] != samp_draw(c, ns, max_l, b.rows[r].u, &near);
        int j = 0;
        while (j < ns && c[j].id != got[r])
            j++;
        if (j == ns)
            outside++;
        else
            count[j]++;
    }
    double max_z = outside ? INFINITY : 0.0;
    for (int j = 0; j < ns; j++) {
        double pj = exp((double)c[j].v - max_l) / total;
        double sd = sqrt((double)n * pj * (1.0 - pj));
        double z = fabs(count[j] - n * pj) / (sd > 0 ? sd : 1.0);
        max_z = z > max_z ? z : max_z;
    }
    report("SAMPLE", wrong, 0.0, "vocab=%d,T=1,top_k=%d: %d draws, %d differ, %d near", n_vocab, k,
           n, wrong, near);
    report("SAMPLE", max_z, 5.0, "distribution: max |count - n p| / sigma over %d candidates", ns);
    samp_batch_free(&b);
    free(x), free(c), free(got), free(count);
}

/* Argument checks: each bad call returns BRISK_EINVAL before any launch, so
 * host addresses stand in for device memory. */
static void samp_invalid_args(void) {
    static double ws_space[64]; /* 8-byte aligned; "ws" of 512 bytes */
    static kern_cuda_sample_row rows[2];
    float f[8] = {0};
    int32_t ids[8], eid[2] = {0, 1};
    float ev[2] = {1.0f, 1.0f};
    static uint32_t mask_space[4];
    const uint32_t *mk = mask_space;
    void *ws = ws_space;
    const size_t need = kern_cuda_sample_ws_bytes(2, 64); /* 512 */
    struct {
        const char *what;
        int32_t *ids;
        const float *logits;
        int n_lrows, n_vocab;
        const kern_cuda_sample_row *rows;
        int n_rows;
        const int32_t *eid;
        const float *ev;
        int n_edits;
        const uint32_t *mask;
        int n_mask;
        void *ws;
        size_t ws_bytes;
        int want;
    } cases[] = {
        {"ok,n_rows=0", ids, f, 1, 64, rows, 0, NULL, NULL, 0, NULL, 0, NULL, 0, BRISK_OK},
        {"n_vocab=0", ids, f, 1, 0, rows, 2, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"n_vocab=-1", ids, f, 1, -1, rows, 0, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"n_rows=-1", ids, f, 1, 64, rows, -1, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"n_edits=-1", ids, f, 1, 64, rows, 2, eid, ev, -1, NULL, 0, ws, need, BRISK_EINVAL},
        {"n_logit_rows=0", ids, f, 0, 64, rows, 2, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"ids=NULL", NULL, f, 1, 64, rows, 2, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"logits=NULL", ids, NULL, 1, 64, rows, 2, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"rows=NULL", ids, f, 1, 64, NULL, 2, eid, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"edit_ids=NULL", ids, f, 1, 64, rows, 2, NULL, ev, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"edit_vals=NULL", ids, f, 1, 64, rows, 2, eid, NULL, 2, NULL, 0, ws, need, BRISK_EINVAL},
        {"ws=NULL", ids, f, 1, 64, rows, 2, eid, ev, 2, NULL, 0, NULL, need, BRISK_EINVAL},
        {"ws small", ids, f, 1, 64, rows, 2, eid, ev, 2, NULL, 0, ws, need - 4, BRISK_EINVAL},
        {"n_mask_words=-1", ids, f, 1, 64, rows, 2, eid, ev, 2, mk, -1, ws, need, BRISK_EINVAL},
        {"mask=NULL", ids, f, 1, 64, rows, 2, eid, ev, 2, NULL, 2, ws, need, BRISK_EINVAL},
        {"mask misaligned", ids, f, 1, 64, rows, 2, eid, ev, 2,
         (const uint32_t *)((const char *)mk + 2), 2, ws, need, BRISK_EINVAL},
        {"ws misaligned", ids, f, 1, 64, rows, 2, eid, ev, 2, NULL, 0, (char *)ws + 2, need,
         BRISK_EINVAL},
    };
    for (size_t q = 0; q < ARRAY_LEN(cases); q++) {
        int rc = kern_cuda_sample(cases[q].ids, cases[q].logits, cases[q].n_lrows, cases[q].n_vocab,
                                  cases[q].rows, cases[q].n_rows, cases[q].eid, cases[q].ev,
                                  cases[q].n_edits, cases[q].mask, cases[q].n_mask, NULL, 0, NULL,
                                  cases[q].ws, cases[q].ws_bytes, g_stream);
        report("SAMPLE", rc != cases[q].want, 0.0, "args:%s -> %d (want %d)", cases[q].what, rc,
               cases[q].want);
    }
    int bad = (kern_cuda_sample_ws_bytes(-1, 64) != (size_t)-1) +
              (kern_cuda_sample_ws_bytes(1, 0) != (size_t)-1) +
              (kern_cuda_sample_ws_bytes(0, 64) != 0) + (need != 2 * 64 * sizeof(uint32_t));
    report("SAMPLE", bad, 0.0, "ws_bytes: sizes and invalid sizes");
}

/* Rows the kernel must refuse (id -1, nothing read through them) among
 * valid ones: logit_row -1 and == n_logit_rows, a bias range past n_edits,
 * a negative count, a negative first, a mask_first of -2 and a mask that
 * runs one word past n_mask_words; the valid rows (two of them masked) must
 * still match. */
static void samp_invalid_rows(void) {
    const int n_vocab = 1000, n_lrows = 2;
    float *x = xmalloc((size_t)n_lrows * n_vocab * sizeof(float));
    samp_cand *c = xmalloc((size_t)n_vocab * sizeof *c);
    float *l = xmalloc((size_t)n_vocab * sizeof(float));
    fill(x, (size_t)n_lrows * n_vocab, 3.0f);
    samp_batch b;
    samp_batch_init(&b, 16);
    samp_add_row(&b, x, n_vocab, 0, 0.7f, 40, 0.9f, 0.0f, 1, 1); /* valid */
    samp_add_row(&b, x, n_vocab, 1, 0.0f, 0, 1.0f, 0.0f, 1, 0);  /* valid */
    for (int r = 2; r <= 6; r++)                                 /* made invalid below */
        samp_add_row(&b, x, n_vocab, r % 2, r % 2 ? 1.0f : 0.0f, 0, 1.0f, 0.0f, 0, 0);
    samp_add_row(&b, x, n_vocab, 1, 1.5f, 5, 1.0f, 0.05f, 0, 1); /* valid */
    samp_add_row(&b, x, n_vocab, 0, 0.0f, 0, 1.0f, 0.0f, 1, 0);  /* valid, masked */
    samp_mask_row(&b, x, n_vocab, MASK_SPARSE);
    samp_add_row(&b, x, n_vocab, 1, 0.7f, 0, 1.0f, 0.0f, 0, 0); /* valid, masked */
    samp_mask_row(&b, x, n_vocab, MASK_DENSE);
    samp_add_row(&b, x, n_vocab, 0, 0.0f, 0, 1.0f, 0.0f, 0, 0); /* made invalid below */
    samp_add_row(&b, x, n_vocab, 1, 1.0f, 0, 1.0f, 0.0f, 0, 0); /* made invalid below */
    b.rows[2].logit_row = -1;
    b.rows[3].logit_row = n_lrows;
    b.rows[4].bias_first = b.n_edits - 1; /* one edit left, two asked for */
    b.rows[4].n_bias = 2;
    b.rows[5].n_pen = -1;
    b.rows[6].pen_first = -2;
    b.rows[6].n_pen = 1;
    b.rows[10].mask_first = -2;
    b.rows[11].mask_first = b.n_mask_words - (n_vocab + 31) / 32 + 1;
    int32_t got[16];
    samp_run(&b, x, n_lrows, n_vocab, got);
    int bad = 0, near = 0;
    for (int r = 0; r < b.n_rows; r++) {
        int invalid = (r >= 2 && r <= 6) || r >= 10;
        int32_t want = invalid
                           ? -1
                           : samp_ref(x + (size_t)b.rows[r].logit_row * n_vocab, n_vocab,
                                      &b.rows[r], b.edit_ids, b.edit_vals, b.masks, l, c, &near);
        if (got[r] != want) {
            bad++;
            fprintf(stderr, "    row %d: gpu %d, want %d\n", r, got[r], want);
        }
    }
    report("SAMPLE", bad, 0.0, "invalid rows -> -1 among valid rows (%d rows)", b.n_rows);
    samp_batch_free(&b);
    free(x), free(c), free(l);
}

/* Draft-model verification rows (step 9: speculative decoding): against the
 * reference's survivors, p(x) within 1e-6 (relative, the sums' order) and
 * the id drawn from max(0, p - q) with the same u and the same walk (ids
 * ascending) equal; greedy rows give the argmax and p(x) 1 or 0; a row
 * whose q is at least p (the residual has no mass) draws from p; x outside the
 * survivors has p(x) 0; a q_row out of range and a draft_id out of the
 * vocabulary give -1. The rows cover the head path (top-k/top-p), the
 * whole-row path (min-p, none) and greedy, plain rows mixed in. */
static void samp_draft_case(int n_vocab) {
    const int n_lrows = 8;
    float *x = xmalloc((size_t)n_lrows * n_vocab * sizeof(float));
    float *q = xmalloc((size_t)n_lrows * n_vocab * sizeof(float));
    samp_cand *c = xmalloc((size_t)n_vocab * sizeof *c);
    float *l = xmalloc((size_t)n_vocab * sizeof(float));
    fill(x, (size_t)n_lrows * n_vocab, 3.0f);
    samp_batch b;
    samp_batch_init(&b, 16);
    const struct {
        float t, p, minp;
        int k;
    } modes[] = {{1.0f, 1.0f, 0.0f, 0}, {0.8f, 0.9f, 0.0f, 50}, {0.7f, 1.0f, 0.05f, 0},
                 {0.0f, 1.0f, 0.0f, 0}, {1.2f, 0.95f, 0.0f, 0}, {0.9f, 1.0f, 0.0f, 20},
                 {1.0f, 1.0f, 0.0f, 0}, {0.8f, 0.9f, 0.0f, 50}};
    for (int r = 0; r < n_lrows; r++) {
        samp_add_row(&b, x, n_vocab, r, modes[r].t, modes[r].k, modes[r].p, modes[r].minp, r % 3,
                     r % 2);
        kern_cuda_sample_row *p = &b.rows[r];
        /* q: the reference's own p for row 6 (no residual mass), else a
         * softmax of the row's logits shaken (a related draft). */
        float *qr = q + (size_t)r * n_vocab;
        double mx = -INFINITY, sum = 0.0;
        for (int i = 0; i < n_vocab; i++) {
            qr[i] = x[(size_t)r * n_vocab + i] + (float)(rng_uniform() * 2.0 - 1.0);
            if (!(qr[i] > -INFINITY) || isnan(qr[i]))
                qr[i] = -INFINITY;
            mx = qr[i] > mx ? qr[i] : mx;
        }
        for (int i = 0; i < n_vocab; i++)
            sum += qr[i] > -INFINITY ? exp((double)qr[i] - mx) : 0.0;
        for (int i = 0; i < n_vocab; i++)
            qr[i] = qr[i] > -INFINITY ? (float)(exp((double)qr[i] - mx) / sum) : 0.0f;
        p->q_row = r;
        p->draft_id = r == 5 ? n_vocab - 1 : rng_int(n_vocab);
    }
    int near = 0;
    { /* row 6: q = 2p (q need not be normalised), so the residual is empty */
        samp_edit(l, x + 6 * (size_t)n_vocab, n_vocab, &b.rows[6], b.edit_ids, b.edit_vals,
                  b.masks);
        double mxl;
        int n = samp_survivors(c, l, n_vocab, &b.rows[6], &mxl, &near);
        double tot = 0.0;
        for (int j = 0; j < n; j++)
            tot += exp((double)c[j].v - mxl);
        memset(q + 6 * (size_t)n_vocab, 0, (size_t)n_vocab * sizeof(float));
        for (int j = 0; j < n; j++)
            q[6 * (size_t)n_vocab + c[j].id] = (float)(2.0 * exp((double)c[j].v - mxl) / tot);
        b.rows[6].draft_id = n > 0 ? c[0].id : 0;
    }
    /* plain rows among them, and two the kernel must refuse */
    samp_add_row(&b, x, n_vocab, 0, 0.9f, 0, 1.0f, 0.0f, 0, 0);
    samp_add_row(&b, x, n_vocab, 1, 0.9f, 0, 1.0f, 0.0f, 0, 0);
    b.rows[9].q_row = n_lrows; /* out of range */
    b.rows[9].draft_id = 0;
    samp_add_row(&b, x, n_vocab, 2, 0.9f, 0, 1.0f, 0.0f, 0, 0);
    b.rows[10].q_row = 0;
    b.rows[10].draft_id = n_vocab; /* outside the vocabulary */

    size_t ws_bytes = kern_cuda_sample_ws_bytes(b.n_rows, n_vocab);
    float *d_l = dev_from(x, (size_t)n_lrows * n_vocab * sizeof(float));
    float *d_q = dev_from(q, (size_t)n_lrows * n_vocab * sizeof(float));
    kern_cuda_sample_row *d_rows = dev_from(b.rows, (size_t)b.n_rows * sizeof *b.rows);
    int32_t *d_eid = b.n_edits ? dev_from(b.edit_ids, (size_t)b.n_edits * sizeof(int32_t)) : NULL;
    float *d_ev = b.n_edits ? dev_from(b.edit_vals, (size_t)b.n_edits * sizeof(float)) : NULL;
    int32_t *d_ids = dev_alloc((size_t)b.n_rows * sizeof(int32_t));
    float *d_pout = dev_alloc((size_t)b.n_rows * sizeof(float));
    void *d_ws = dev_alloc(ws_bytes);
    must(kern_cuda_sample(d_ids, d_l, n_lrows, n_vocab, d_rows, b.n_rows, d_eid, d_ev, b.n_edits,
                          NULL, 0, d_q, n_lrows, d_pout, d_ws, ws_bytes, g_stream),
         "kern_cuda_sample");
    int32_t got[16];
    float pout[16];
    to_host(got, d_ids, (size_t)b.n_rows * sizeof(int32_t));
    to_host(pout, d_pout, (size_t)b.n_rows * sizeof(float));
    int bad = 0;
    double perr = 0.0;
    for (int r = 0; r < b.n_rows; r++) {
        const kern_cuda_sample_row *p = &b.rows[r];
        if (r >= 9) { /* refused */
            bad += got[r] != -1;
            continue;
        }
        samp_edit(l, x + (size_t)p->logit_row * n_vocab, n_vocab, p, b.edit_ids, b.edit_vals,
                  b.masks);
        if (r == 8) { /* a plain row */
            int32_t want = samp_ref(x + (size_t)p->logit_row * n_vocab, n_vocab, p, b.edit_ids,
                                    b.edit_vals, b.masks, l, c, &near);
            bad += got[r] != want;
            continue;
        }
        const float *qr = q + (size_t)p->q_row * n_vocab;
        int32_t want;
        double px = 0.0;
        if (p->temperature <= 0.0f) {
            want = 0;
            for (int i = 1; i < n_vocab; i++)
                want = l[i] > l[want] ? i : want;
            px = want == p->draft_id ? 1.0 : 0.0;
        } else {
            double mxl = 0.0;
            int n = samp_survivors(c, l, n_vocab, p, &mxl, &near);
            double tot = 0.0, res = 0.0;
            for (int j = 0; j < n; j++)
                tot += exp((double)c[j].v - mxl);
            for (int j = 0; j < n; j++) {
                double pj = exp((double)c[j].v - mxl) / tot;
                if (c[j].id == p->draft_id)
                    px = pj;
                res += fmax(0.0, pj - (double)qr[c[j].id]);
            }
            want = n == 0 ? 0 : c[n - 1].id;
            if (n > 0 && !(res > 0.0)) {
                want = samp_draw(c, n, mxl, p->u, &near);
            } else if (n > 0) {
                double rr = p->u * res;
                for (int j = 0; j < n; j++) {
                    double w = fmax(0.0, exp((double)c[j].v - mxl) / tot - (double)qr[c[j].id]);
                    if (w <= 0.0)
                        continue;
                    rr -= w;
                    want = c[j].id;
                    if (fabs(rr) <= 1e-9 * res)
                        near = 1;
                    if (rr < 0.0)
                        break;
                }
            }
        }
        if (got[r] != want) {
            bad++;
            fprintf(stderr, "    draft row %d (V=%d): gpu %d, want %d\n", r, n_vocab, got[r], want);
        }
        double e = fabs((double)pout[r] - px) / fmax(px, 1e-30);
        perr = e > perr && px > 0 ? e : perr;
        if (px == 0.0 && pout[r] != 0.0f)
            perr = 1.0;
    }
    report("SAMPLE", bad, 0.0, "draft rows: residual ids, V=%d (%d rows)%s", n_vocab, b.n_rows,
           near ? " (a comparison came within 1e-9)" : "");
    report("SAMPLE", perr, 1e-6, "draft rows: p(x), V=%d", n_vocab);
    dev_free(d_l), dev_free(d_q), dev_free(d_rows), dev_free(d_eid), dev_free(d_ev);
    dev_free(d_ids), dev_free(d_pout), dev_free(d_ws);
    samp_batch_free(&b);
    free(x), free(q), free(c), free(l);
}

void test_sample(void) {
    const int vocabs[] = {64, 1000, 49152, 151936};
    for (size_t v = 0; v < CASES_LEN(vocabs); v++)
        samp_vocab_case(vocabs[v]);
    for (size_t v = 0; v < CASES_LEN(vocabs); v++)
        samp_mask_case(vocabs[v]);
    samp_distribution();
    samp_invalid_args();
    samp_invalid_rows();
    for (size_t v = 0; v < CASES_LEN(vocabs); v++)
        samp_draft_case(vocabs[v]);
}

/* ---- perf ------------------------------------------------------------------ */

typedef struct samp_perf {
    int32_t *ids;
    float *logits;
    kern_cuda_sample_row *rows;
    uint32_t *mask;
    void *ws;
    size_t ws_bytes;
    int n_rows, n_vocab, n_mask_words;
} samp_perf;

static int samp_perf_call(void *ctx) {
    const samp_perf *s = ctx;
    return kern_cuda_sample(s->ids, s->logits, s->n_rows, s->n_vocab, s->rows, s->n_rows, NULL,
                            NULL, 0, s->n_mask_words ? s->mask : NULL, s->n_mask_words, NULL, 0,
                            NULL, s->ws, s->ws_bytes, g_stream);
}

/* llama-3-8b's vocabulary, 1, 64 and 256 rows of logits (normal, scale 3),
 * no edits: greedy; temperature 0.8 with top_k 50 and top_p 0.9 (the head
 * path); temperature 0.8 with min_p 0.05 (a draw over the whole row); the
 * first two again with a mask per row (a grammar's: about 15 ids in 16
 * allowed, what JSON string content allows), whose cost is the difference.
 * Bytes: the logits (and masks) read once, the least any sampler moves. */
void perf_sample(double copy_bw) {
    if (!selected("sample"))
        return;
    const int n_vocab = 128256, batches[] = {1, 64, 256}, words = (n_vocab + 31) / 32;
    const struct {
        const char *name;
        float t, p, minp;
        int k, masked;
    } modes[] = {{"greedy", 0.0f, 1.0f, 0.0f, 0, 0},
                 {"k50,p0.9", 0.8f, 0.9f, 0.0f, 50, 0},
                 {"minp0.05", 0.8f, 1.0f, 0.05f, 0, 0},
                 {"greedy,mask", 0.0f, 1.0f, 0.0f, 0, 1},
                 {"k50,p0.9,mask", 0.8f, 0.9f, 0.0f, 50, 1}};
    for (size_t bi = 0; bi < ARRAY_LEN(batches); bi++) {
        samp_perf s = {.n_rows = batches[bi], .n_vocab = n_vocab};
        s.logits = dev_random((size_t)s.n_rows * n_vocab, 3.0f);
        s.ids = dev_alloc((size_t)s.n_rows * sizeof(int32_t));
        s.ws_bytes = kern_cuda_sample_ws_bytes(s.n_rows, n_vocab);
        s.ws = dev_alloc(s.ws_bytes);
        uint32_t *hm = xmalloc((size_t)s.n_rows * words * sizeof *hm);
        for (size_t w = 0; w < (size_t)s.n_rows * words; w++) {
            uint32_t v = 0;
            for (int q = 0; q < 32; q++)
                v |= (uint32_t)(rng_int(16) != 0) << q;
            hm[w] = v;
        }
        s.mask = dev_from(hm, (size_t)s.n_rows * words * sizeof *hm);
        free(hm);
        kern_cuda_sample_row *rows = xmalloc((size_t)s.n_rows * sizeof *rows);
        for (size_t m = 0; m < ARRAY_LEN(modes); m++) {
            for (int r = 0; r < s.n_rows; r++) {
                memset(&rows[r], 0, sizeof rows[r]);
                rows[r].logit_row = r;
                rows[r].temperature = modes[m].t;
                rows[r].top_k = modes[m].k;
                rows[r].top_p = modes[m].p;
                rows[r].min_p = modes[m].minp;
                rows[r].repetition_penalty = 1.0f;
                rows[r].mask_first = modes[m].masked ? r * words : -1;
                rows[r].q_row = -1;
                rows[r].u = rng_uniform();
            }
            s.n_mask_words = modes[m].masked ? s.n_rows * words : 0;
            s.rows = dev_from(rows, (size_t)s.n_rows * sizeof *rows);
            char shape[64];
            snprintf(shape, sizeof shape, "%s,V=%d,rows=%d", modes[m].name, n_vocab, s.n_rows);
            double t = cuda_test_time(samp_perf_call, &s, "kern_cuda_sample");
            perf_line("sample", shape,
                      (double)s.n_rows * n_vocab * sizeof(float) +
                          (double)s.n_mask_words * sizeof(uint32_t),
                      t, copy_bw);
            dev_free(s.rows);
        }
        dev_free(s.logits), dev_free(s.ids), dev_free(s.ws), dev_free(s.mask);
        free(rows);
    }
}
