/* test_sampler.c - the sampler against its definition: greedy, filters,
 * penalties, bias, seeded reproducibility, and the sampled distribution
 * against softmax on random logits. */
#include <math.h>
#include <string.h>

#include "brisk_test.h"
#include "models/sampler.h"

#define NV 1000

static uint64_t rng_state = 12345;
static float rnd_normal(void) {
    /* Box-Muller over a xorshift generator: deterministic random logits. */
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        u[i] = ((double)(rng_state >> 11) + 0.5) * 0x1.0p-53;
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static void fill(float *l, float scale) {
    for (int i = 0; i < NV; i++)
        l[i] = rnd_normal() * scale;
}

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < NV; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

static int32_t sample_once(const model_sampling *p, const float *logits, const int32_t *hist,
                           int nh) {
    float tmp[NV];
    memcpy(tmp, logits, sizeof tmp);
    model_sampler *s = model_sampler_create(p, NV);
    int32_t t = model_sampler_sample(s, tmp, hist, nh);
    model_sampler_free(s);
    return t;
}

/* The bias and penalty edits written out plainly: each distinct bias id's
 * values summed, then added (an id given twice is the list's one deviation
 * from adding the values one after another, and the API cannot send one:
 * logit_bias is an object whose keys are canonical token ids); then each
 * distinct id of the window edited once. */
static void edits_reference(const model_sampling *p, float *l, int nv, const int32_t *hist, int n) {
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias_ids[i];
        int first = id >= 0 && id < nv;
        for (int j = 0; first && j < i; j++)
            first = p->logit_bias_ids[j] != id;
        if (!first)
            continue;
        float sum = 0.0f;
        for (int j = i; j < p->n_logit_bias; j++)
            sum += p->logit_bias_ids[j] == id ? p->logit_bias[j] : 0.0f;
        l[id] += sum;
    }
    int rep = p->repetition_penalty != 1.0f;
    if (!rep && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    int start = (p->penalty_last_n > 0 && n > p->penalty_last_n) ? n - p->penalty_last_n : 0;
    int pf_start = p->pf_from > start ? p->pf_from : start;
    int lo = rep ? start : pf_start;
    for (int i = lo; i < n; i++) {
        int32_t id = hist[i];
        int first = id >= 0 && id < nv;
        for (int j = lo; first && j < i; j++)
            first = hist[j] != id;
        if (!first)
            continue;
        int count = 0;
        for (int j = pf_start; j < n; j++)
            count += hist[j] == id;
        float x = l[id];
        if (rep)
            x = x > 0.0f ? x / p->repetition_penalty : x * p->repetition_penalty;
        if (count > 0)
            x -= p->presence_penalty + p->frequency_penalty * (float)count;
        l[id] = x;
    }
}

/* model_sampler_edits on random settings and histories (ids out of range,
 * repeats, windows, pf_from past the end, duplicate bias ids with exactly
 * representable sums): every id in range and distinct within its part, and
 * the list applied equals the reference bit for bit. */
static void test_edit_list(void) {
    enum { V = 97, H = 80 };
    int ok_apply = 1, ok_ids = 1, n_pen_rows = 0;
    for (int t = 0; t < 400; t++) {
        model_sampling p = model_sampling_default();
        static const int last_n[] = {0, 5, 20, 200};
        static const int pf[] = {0, 7, 40, 500};
        p.penalty_last_n = last_n[t % 4];
        p.pf_from = pf[(t / 4) % 4];
        p.repetition_penalty = (t / 16) % 2 ? 1.3f : 1.0f;
        p.presence_penalty = (t / 32) % 2 ? 0.5f : 0.0f;
        p.frequency_penalty = (t / 64) % 2 ? 0.25f : 0.0f;
        int32_t bias_ids[6];
        float bias[6];
        p.n_logit_bias = t % 7 == 0 ? 0 : 6;
        for (int i = 0; i < 6; i++) {
            /* a few repeats and two out of range */
            bias_ids[i] = i == 4 ? -1 : i == 5 ? V + 2 : (int32_t)(fabsf(rnd_normal()) * 9) % V;
            bias[i] = (float)((int)(rnd_normal() * 8)) * 0.5f;
        }
        p.logit_bias_ids = bias_ids;
        p.logit_bias = bias;
        int32_t hist[H];
        int n = t % H;
        for (int i = 0; i < n; i++)
            hist[i] = (i % 13 == 12) ? V + i : (int32_t)(fabsf(rnd_normal()) * 12) % V;
        float a[V], b[V];
        for (int i = 0; i < V; i++)
            a[i] = b[i] = rnd_normal() * 3.0f;
        model_sampler *s = model_sampler_create(&p, V);
        model_sample_edits e;
        CHECK(s && model_sampler_edits(s, hist, n, &e) == 0, "edits %d", t);
        if (!s)
            continue;
        int seen[2][V];
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < e.n_bias + e.n_pen; i++) {
            int part = i >= e.n_bias;
            if (e.ids[i] < 0 || e.ids[i] >= V || seen[part][e.ids[i]]++)
                ok_ids = 0;
        }
        n_pen_rows += e.n_pen > 0;
        model_sample_edits_apply(&p, &e, a);
        edits_reference(&p, b, V, hist, n);
        ok_apply &= memcmp(a, b, sizeof a) == 0;
        model_sampler_free(s);
    }
    CHECK(ok_ids, "edit ids in range and distinct within each part");
    CHECK(ok_apply, "the edit list applied == the reference, bit for bit");
    CHECK(n_pen_rows > 100, "penalty edits made in %d rows", n_pen_rows);
}

int main(void) {
    float logits[NV], tmp[NV];
    fill(logits, 3.0f);
    int best = argmax(logits);

    /* Greedy, and the filters that must reduce to greedy. */
    model_sampling p = model_sampling_default();
    p.temperature = 0.0f;
    CHECK(sample_once(&p, logits, NULL, 0) == best, "greedy");
    p = model_sampling_default();
    p.top_k = 1;
    p.seed = 7;
    CHECK(sample_once(&p, logits, NULL, 0) == best, "top_k=1");
    p = model_sampling_default();
    p.top_p = 1e-6f;
    CHECK(sample_once(&p, logits, NULL, 0) == best, "tiny top_p");
    p = model_sampling_default();
    p.min_p = 0.999999f;
    CHECK(sample_once(&p, logits, NULL, 0) == best, "min_p ~1");

    /* Logit bias: -inf removes the best token, +100 forces another. */
    int32_t ids[2] = {best, 3};
    float bias[2] = {-INFINITY, 0.0f};
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.n_logit_bias = 1;
    p.logit_bias_ids = ids;
    p.logit_bias = bias;
    CHECK(sample_once(&p, logits, NULL, 0) != best, "bias -inf");
    bias[0] = 0.0f;
    bias[1] = 100.0f;
    p.n_logit_bias = 2;
    CHECK(sample_once(&p, logits, NULL, 0) == 3, "bias +100");

    /* A ban (min_tokens' EOS) and a mask (a grammar's): greedy and seeded
     * draws never leave what is allowed, and the bias cannot bring a banned
     * token back. */
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.n_logit_bias = 2;
    p.logit_bias_ids = ids;
    p.logit_bias = bias; /* token 3 at +100 */
    model_sampler *s = model_sampler_create(&p, NV);
    int32_t banned[2] = {3, best};
    model_sampler_set_banned(s, banned, 2);
    memcpy(tmp, logits, sizeof tmp);
    int32_t got = model_sampler_sample(s, tmp, NULL, 0);
    CHECK(got != 3 && got != best && model_sampler_constrained(s), "banned: %d", got);
    model_sampler_set_banned(s, NULL, 0);
    memcpy(tmp, logits, sizeof tmp);
    CHECK(model_sampler_sample(s, tmp, NULL, 0) == 3 && !model_sampler_constrained(s), "unbanned");
    model_sampler_free(s);
    uint32_t allowed[(NV + 31) / 32] = {0};
    allowed[17 >> 5] |= 1u << (17 & 31);
    allowed[40 >> 5] |= 1u << (40 & 31);
    p = model_sampling_default();
    p.seed = 5;
    s = model_sampler_create(&p, NV);
    model_sampler_set_allowed(s, allowed);
    int only = 1;
    for (int i = 0; i < 500; i++) {
        memcpy(tmp, logits, sizeof tmp);
        int32_t t = model_sampler_sample(s, tmp, NULL, 0);
        only &= t == 17 || t == 40;
    }
    CHECK(only && model_sampler_constrained(s), "mask: only tokens 17 and 40");
    model_sampler_free(s);

    /* Penalties: a huge presence penalty on the best token moves greedy off it;
     * repetition penalty lowers positive and negative logits alike. */
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.presence_penalty = 1000.0f;
    int32_t hist[3] = {best, best, 5};
    CHECK(sample_once(&p, logits, hist, 3) != best, "presence penalty");
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    memcpy(tmp, logits, sizeof tmp);
    tmp[10] = 4.0f;
    tmp[11] = -4.0f;
    int32_t h2[2] = {10, 11};
    s = model_sampler_create(&p, NV);
    model_sampler_sample(s, tmp, h2, 2);
    model_sampler_free(s);
    CHECK(tmp[10] == 2.0f && tmp[11] == -8.0f, "repetition penalty %g %g", tmp[10], tmp[11]);
    /* Frequency penalty scales with the count; the window limits the history. */
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.frequency_penalty = 0.5f;
    p.penalty_last_n = 2;
    memcpy(tmp, logits, sizeof tmp);
    float before20 = tmp[20], before21 = tmp[21];
    int32_t h3[4] = {20, 21, 21, 9};
    s = model_sampler_create(&p, NV);
    model_sampler_sample(s, tmp, h3, 4);
    model_sampler_free(s);
    CHECK(tmp[20] == before20 && fabsf(tmp[21] - (before21 - 0.5f)) < 1e-6f, "frequency window");
    /* pf_from: presence and frequency count the output only (from index 2),
     * the repetition penalty the whole history; each token edited once. */
    p = model_sampling_default();
    p.temperature = 0.0f;
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.25f;
    p.repetition_penalty = 2.0f;
    p.pf_from = 2;
    for (int rep = 0; rep < 2; rep++) {
        p.repetition_penalty = rep ? 2.0f : 1.0f;
        memcpy(tmp, logits, sizeof tmp);
        tmp[30] = 4.0f; /* prompt only */
        tmp[31] = 4.0f; /* prompt and output, twice in the output */
        tmp[32] = 4.0f; /* output only */
        tmp[33] = 4.0f; /* nowhere */
        int32_t h4[5] = {30, 31, 31, 32, 31};
        s = model_sampler_create(&p, NV);
        model_sampler_sample(s, tmp, h4, 5);
        model_sampler_free(s);
        float r = rep ? 2.0f : 1.0f;
        CHECK(tmp[30] == 4.0f / r && tmp[31] == 4.0f / r - 1.5f && tmp[32] == 4.0f / r - 1.25f &&
                  tmp[33] == 4.0f,
              "pf_from (rep %g): %g %g %g %g", r, tmp[30], tmp[31], tmp[32], tmp[33]);
    }

    /* Seeded reproducibility: same seed, same sequence; other seed, other sequence. */
    p = model_sampling_default();
    p.temperature = 1.0f;
    p.top_k = 50;
    p.top_p = 0.9f;
    p.seed = 42;
    model_sampler *a = model_sampler_create(&p, NV), *b = model_sampler_create(&p, NV);
    p.seed = 43;
    model_sampler *c = model_sampler_create(&p, NV);
    int same = 1, differ = 0;
    for (int i = 0; i < 200; i++) {
        float la[NV], lb[NV], lc[NV];
        memcpy(la, logits, sizeof la);
        memcpy(lb, logits, sizeof lb);
        memcpy(lc, logits, sizeof lc);
        int32_t ta = model_sampler_sample(a, la, NULL, 0),
                tb = model_sampler_sample(b, lb, NULL, 0);
        int32_t tc = model_sampler_sample(c, lc, NULL, 0);
        same &= ta == tb;
        differ |= ta != tc;
    }
    CHECK(same, "same seed reproduces");
    CHECK(differ, "other seed differs");
    model_sampler_free(a);
    model_sampler_free(b);
    model_sampler_free(c);

    /* Distribution: frequencies of 200k draws at temperature 0.7 match softmax
     * within 5 standard errors per token that has mass >= 0.5%. */
    float small[NV];
    fill(small, 1.0f);
    for (int i = 0; i < NV; i++)
        small[i] = i < 20 ? small[i] + 4.0f : small[i] - 10.0f;
    double pr[NV], z = 0;
    float mx = small[argmax(small)];
    for (int i = 0; i < NV; i++)
        z += pr[i] = exp((small[i] - mx) / 0.7);
    for (int i = 0; i < NV; i++)
        pr[i] /= z;
    static int cnt[NV];
    p = model_sampling_default();
    p.temperature = 0.7f;
    p.seed = 99;
    s = model_sampler_create(&p, NV);
    const int draws = 200000;
    for (int i = 0; i < draws; i++) {
        memcpy(tmp, small, sizeof tmp);
        cnt[model_sampler_sample(s, tmp, NULL, 0)]++;
    }
    model_sampler_free(s);
    int bad = 0;
    for (int i = 0; i < NV; i++) {
        if (pr[i] < 0.005)
            continue;
        double se = sqrt(pr[i] * (1 - pr[i]) / draws);
        if (fabs((double)cnt[i] / draws - pr[i]) > 5 * se)
            bad++;
    }
    CHECK(bad == 0, "%d tokens off their softmax probability", bad);

    /* top_k: only the k best ever come out; top_p: the kept set is the
     * smallest prefix of the sorted distribution reaching p. */
    p = model_sampling_default();
    p.top_k = 5;
    p.seed = 1;
    s = model_sampler_create(&p, NV);
    int ok = 1;
    for (int i = 0; i < 2000; i++) {
        memcpy(tmp, small, sizeof tmp);
        int32_t t = model_sampler_sample(s, tmp, NULL, 0);
        int rank = 0;
        for (int j = 0; j < NV; j++)
            rank += small[j] > small[t];
        ok &= rank < 5;
    }
    model_sampler_free(s);
    CHECK(ok, "top_k=5 stays in the top 5");
    p = model_sampling_default();
    p.top_p = 0.5f;
    p.seed = 2;
    s = model_sampler_create(&p, NV);
    ok = 1;
    double pt[NV], zz = 0;
    for (int j = 0; j < NV; j++)
        zz += pt[j] = exp(small[j] - mx);
    for (int i = 0; i < 2000; i++) {
        memcpy(tmp, small, sizeof tmp);
        int32_t t = model_sampler_sample(s, tmp, NULL, 0);
        /* Mass strictly above t must be < 0.5, else t would have been cut. */
        double above = 0;
        for (int j = 0; j < NV; j++)
            if (small[j] > small[t])
                above += pt[j] / zz;
        ok &= above < 0.5;
    }
    model_sampler_free(s);
    CHECK(ok, "top_p=0.5 keeps only the nucleus");
    test_edit_list();
    return BT_SUMMARY("test_sampler");
}
