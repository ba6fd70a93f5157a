/* test_spec_verify.c - speculative rejection sampling (spec_verify.h) keeps
 * the target's distribution: on a 16-token vocabulary, a draft with other
 * logits (and its own settings) proposes x ~ q, the target keeps it with
 * probability min(1, p(x)/q(x)) or emits a token of the residual; over
 * 200,000 draws per case the emitted tokens' frequencies match p (the
 * target's distribution after temperature, top-k, top-p, min-p, penalties
 * and bias, model_sampler_sample_spec's probs) by a chi-square test at
 * alpha = 1e-4, the keep rate matches sum(min(p, q)), and the same test
 * rejects the distribution of the proposals themselves (the test can
 * fail). Also: greedy keeps exactly the argmax, the generator's save and
 * restore give the state plain sampling leaves, and a row with no
 * candidate still makes its one draw. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_rng.h"
#include "models/sampler.h"
#include "scheduler/spec_verify.h"

#define V 16
#define DRAWS 200000

/* The chi-square critical value for df degrees of freedom at alpha = 1e-4
 * (Wilson-Hilferty: within 1% for df >= 3). */
static double chi2_crit(int df) {
    double z = 3.719, a = 2.0 / (9.0 * df);
    double t = 1.0 - a + z * sqrt(a);
    return df * t * t * t;
}

/* Chi-square of counts against probabilities p (tokens with p = 0 must
 * have no count: +inf otherwise); *df gets the support's size - 1. */
static double chi2(const long *cnt, const float *p, long n, int *df) {
    double x = 0;
    int support = 0;
    *df = 0;
    for (int i = 0; i < V; i++) {
        if (p[i] <= 0) {
            if (cnt[i] > 0)
                return INFINITY;
            continue;
        }
        support++;
        double e = (double)n * p[i];
        x += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
    }
    *df = support - 1;
    return x;
}

typedef struct vcase {
    const char *name;
    model_sampling target, draft;
    int n_hist;
} vcase;

static void run_case(const vcase *c, const float *lt, const float *ld, const int32_t *hist) {
    model_sampler *ts = model_sampler_create(&c->target, V);
    model_sampler *ds = model_sampler_create(&c->draft, V);
    model_sampler *ps = model_sampler_create(&c->target, V);
    float p[V], q[V], row[V];
    /* The target's distribution: the same edits and filters, probs out. */
    memcpy(row, lt, sizeof row);
    model_sampler_sample_spec(ps, row, hist, c->n_hist, NULL, -1, NULL, p);
    uint64_t rng[4];
    spec_verify_seed(rng, 42);
    long cnt[V] = {0}, prop_cnt[V] = {0}, kept_n = 0;
    for (long d = 0; d < DRAWS; d++) {
        memcpy(row, ld, sizeof row);
        int32_t x = model_sampler_sample_spec(ds, row, hist, c->n_hist, NULL, -1, NULL, q);
        memcpy(row, lt, sizeof row);
        int kept;
        int32_t t = spec_verify_draft_position(ts, row, hist, c->n_hist, q, x, rng, &kept);
        cnt[t]++;
        prop_cnt[x]++;
        kept_n += kept;
    }
    int df = 0;
    double x2 = chi2(cnt, p, DRAWS, &df);
    CHECK(df >= 1 && x2 < chi2_crit(df), "%s: chi-square %.1f over %d df (critical %.1f)", c->name,
          x2, df, chi2_crit(df));
    /* The keep rate is sum(min(p, q)) (q from the last draw: its settings
     * and logits are the same every draw). */
    double want = 0;
    for (int i = 0; i < V; i++)
        want += p[i] < q[i] ? p[i] : q[i];
    double got = (double)kept_n / DRAWS, se = sqrt(want * (1 - want) / DRAWS);
    CHECK(fabs(got - want) < 5 * se + 1e-9, "%s: keep rate %.4f, want %.4f", c->name, got, want);
    /* The proposals alone are q, not p: the same test rejects them. */
    int df2 = 0;
    double x2q = chi2(prop_cnt, p, DRAWS, &df2);
    CHECK(x2q > 10 * chi2_crit(df2 > 0 ? df2 : 1), "%s: the test cannot tell q from p (%.1f)",
          c->name, x2q);
    printf("test_spec_verify: %s: chi-square %.1f (df %d, critical %.1f), keep rate %.3f\n",
           c->name, x2, df, chi2_crit(df), got);
    model_sampler_free(ts);
    model_sampler_free(ds);
    model_sampler_free(ps);
}

int main(void) {
    float lt[V], ld[V];
    uint64_t r[4];
    brisk_rng_seed(r, 7);
    for (int i = 0; i < V; i++) {
        lt[i] = (float)(4.0 * brisk_rng_uniform(r) - 2.0);
        ld[i] = lt[i] + (float)(3.0 * brisk_rng_uniform(r) - 1.5); /* a related, worse model */
    }
    int32_t hist[] = {1, 3, 3, 5, 7, 3, 11, 2, 1, 0};
    int32_t bias_ids[] = {4, 9};
    float bias_vals[] = {1.5f, -100.0f};
    vcase cases[5];
    for (int i = 0; i < 5; i++) {
        cases[i].target = model_sampling_default();
        cases[i].draft = model_sampling_default();
        cases[i].target.seed = 100 + (uint64_t)i;
        cases[i].draft.seed = 200 + (uint64_t)i;
        cases[i].n_hist = 0;
    }
    cases[0].name = "temperature 1";
    cases[1].name = "temperature 0.6";
    cases[1].target.temperature = cases[1].draft.temperature = 0.6f;
    cases[2].name = "top-p 0.8";
    cases[2].target.temperature = 0.9f;
    cases[2].target.top_p = 0.8f;
    cases[2].draft.temperature = 1.2f;
    cases[3].name = "penalties, top-k, min-p";
    cases[3].target.repetition_penalty = 1.4f;
    cases[3].target.presence_penalty = 0.5f;
    cases[3].target.frequency_penalty = 0.3f;
    cases[3].target.top_k = 8;
    cases[3].target.min_p = 0.05f;
    cases[3].draft.repetition_penalty = 1.1f;
    cases[3].n_hist = 10;
    cases[4].name = "logit bias";
    cases[4].target.n_logit_bias = 2;
    cases[4].target.logit_bias_ids = bias_ids;
    cases[4].target.logit_bias = bias_vals;
    cases[4].target.temperature = 0.8f;
    for (int i = 0; i < 5; i++)
        run_case(&cases[i], lt, ld, hist);

    /* Greedy: p is the argmax alone; a proposal is kept iff it is the argmax. */
    model_sampling g = model_sampling_default();
    g.temperature = 0;
    model_sampler *gs = model_sampler_create(&g, V);
    int best = 0;
    for (int i = 1; i < V; i++)
        best = lt[i] > lt[best] ? i : best;
    float q[V], row[V];
    for (int i = 0; i < V; i++)
        q[i] = 1.0f / V;
    uint64_t rng[4];
    spec_verify_seed(rng, 1);
    for (int x = 0; x < V; x++) {
        memcpy(row, lt, sizeof row);
        int kept;
        int32_t t = spec_verify_draft_position(gs, row, NULL, 0, q, x, rng, &kept);
        CHECK(t == best && kept == (x == best), "greedy x %d: token %d kept %d", x, t, kept);
    }
    model_sampler_free(gs);

    /* Save, three samples, restore with 2: the state two plain samples leave. */
    model_sampling s = model_sampling_default();
    s.seed = 9;
    model_sampler *a = model_sampler_create(&s, V), *b = model_sampler_create(&s, V);
    model_sampler_rng saved;
    model_sampler_rng_save(a, &saved);
    for (int i = 0; i < 3; i++) {
        memcpy(row, lt, sizeof row);
        model_sampler_sample(a, row, NULL, 0);
    }
    model_sampler_rng_restore(a, &saved, 2);
    for (int i = 0; i < 2; i++) {
        memcpy(row, lt, sizeof row);
        model_sampler_sample(b, row, NULL, 0);
    }
    int same = 1;
    for (int i = 0; i < 20; i++) {
        float r1[V], r2[V];
        memcpy(r1, lt, sizeof r1);
        memcpy(r2, lt, sizeof r2);
        same &= model_sampler_sample(a, r1, NULL, 0) == model_sampler_sample(b, r2, NULL, 0);
    }
    CHECK(same, "%s", "restore(saved, 2) continues as two plain samples do");
    /* A row with no candidate makes its one draw too. */
    float none[V];
    for (int i = 0; i < V; i++)
        none[i] = -INFINITY;
    model_sampler_rng_save(a, &saved);
    CHECK_COND(model_sampler_sample(a, none, NULL, 0) == 0);
    model_sampler_rng after, want;
    model_sampler_rng_save(a, &after);
    model_sampler_rng_restore(b, &saved, 1);
    model_sampler_rng_save(b, &want);
    CHECK_COND(!memcmp(&after, &want, sizeof after));
    model_sampler_free(a);
    model_sampler_free(b);
    /* spec_verify_keep: p >= q keeps without a draw; p = 0 never keeps. */
    uint64_t k1[4], k2[4];
    spec_verify_seed(k1, 3);
    memcpy(k2, k1, sizeof k2);
    CHECK_COND(spec_verify_keep(0.5f, 0.4f, k1) == 1 && !memcmp(k1, k2, sizeof k1));
    CHECK_COND(spec_verify_keep(0.0f, 0.4f, k1) == 0);
    return BT_SUMMARY("test_spec_verify");
}
