/* test_sampler_mask.c - model_sampler_mask, the bitmask a backend that
 * samples elsewhere (the GPU) applies to a constrained row, against
 * model_sampler_sample itself.
 *
 * The claim (models/sampler.h): setting every logit outside the mask to -inf
 * and then sampling as an unconstrained row gives what model_sampler_sample
 * gives with the grammar's mask and the bans set. Checked along random walks
 * of real grammars (any JSON object, a schema's object, a list, a choice) on
 * two real vocabularies (byte-level GPT-2 and SentencePiece with byte
 * fallback), with random logits and random settings (greedy, temperature,
 * top-k, top-p, min-p, penalties, a bias that tries to raise a masked and a
 * banned token, bans of the end-of-generation tokens and of the best token):
 * the ids must be equal, the edited rows equal bit for bit, and both
 * samplers' generators must stay in step (the same next uniform). Also: the
 * mask's bits are the grammar's less the bans, the count is their number,
 * bits past n_vocab are 0, and a row where nothing is allowed gives id 0
 * both ways. The cost of the mask per row is printed (with the grammar
 * mask's, cache hits and misses apart). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "brisk_test.h"
#include "models/gguf.h"
#include "models/grammar.h"
#include "models/sampler.h"
#include "models/tokenizer.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Uniform in (-6, 6) on a 2^-24 * 12 grid: never 0, ties rare, cheap. */
static float rnd_logit(void) {
    return ((float)rnd(1u << 24) + 0.5f) * (12.0f / 16777216.0f) - 6.0f;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int bit(const uint32_t *m, int i) {
    return (int)(m[i >> 5] >> (i & 31) & 1u);
}

/* One of a few settings of every kind, chosen by k. */
static model_sampling pick_settings(int k, uint64_t seed) {
    static const float temps[] = {0.0f, 0.7f, 1.0f, 1.5f}, top_ps[] = {1.0f, 0.9f, 0.5f},
                       min_ps[] = {0.0f, 0.05f};
    static const int top_ks[] = {0, 1, 40};
    model_sampling p = model_sampling_default();
    p.temperature = temps[k % 4];
    p.top_k = top_ks[(k / 4) % 3];
    p.top_p = top_ps[(k / 12) % 3];
    p.min_p = min_ps[(k / 36) % 2];
    if ((k / 72) % 2) {
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.2f;
        p.pf_from = 4;
    }
    p.seed = seed;
    return p;
}

typedef struct walk_stats {
    int rows, same_id, same_row, same_rng, mask_ok, allowed_ok, steps;
    double t_gmask_hit, t_gmask_miss, t_mask;
    int n_hit, n_miss;
} walk_stats;

/* One random walk of grammar g: at each step the grammar's mask, random
 * logits and bans, then sampler a (mask and bans set) against sampler b
 * (unconstrained, the same settings and seed) on a row already masked with
 * model_sampler_mask's bits. The walk takes a's token. */
static void walk(const tok_vocab *v, const model_grammar_vocab *gv, model_grammar *g, int k,
                 walk_stats *st) {
    const int nv = tok_n_vocab(v), words = (nv + 31) / 32;
    uint32_t *allowed = calloc((size_t)words, sizeof *allowed);
    uint32_t *mask = calloc((size_t)words, sizeof *mask);
    float *logits = malloc((size_t)nv * sizeof *logits), *la = malloc((size_t)nv * sizeof *la),
          *lb = malloc((size_t)nv * sizeof *lb);
    int32_t hist[64], ban[8], bias_ids[3];
    float bias_vals[3] = {30.0f, 30.0f, -2.0f};
    int n_hist = 0;
    model_sampling p = pick_settings(k, 1000 + (uint64_t)k);
    /* The bias names ids fixed for the walk (the sampler borrows them). */
    for (int i = 0; i < 3; i++)
        bias_ids[i] = (int32_t)rnd((uint32_t)nv);
    if (k % 3 == 0) {
        p.n_logit_bias = 3;
        p.logit_bias_ids = bias_ids;
        p.logit_bias = bias_vals;
    }
    model_sampler *a = model_sampler_create(&p, nv), *b = model_sampler_create(&p, nv);
    model_grammar_matcher *m = model_grammar_matcher_create(g, gv, NULL);
    if (!a || !b || !m || !allowed || !mask || !logits || !la || !lb) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int i = 0; i < 8; i++) /* a prompt for the penalties */
        hist[n_hist++] = (int32_t)rnd((uint32_t)nv);
    model_sampler_set_allowed(a, allowed);
    for (int step = 0; step < 16; step++) {
        long long lk0, h0, lk1, h1;
        model_grammar_cache_counts(g, &lk0, &h0);
        double t0 = now_s();
        int count = model_grammar_mask(m, allowed);
        double t1 = now_s();
        model_grammar_cache_counts(g, &lk1, &h1);
        if (h1 > h0)
            st->t_gmask_hit += t1 - t0, st->n_hit++;
        else
            st->t_gmask_miss += t1 - t0, st->n_miss++;
        if (count <= 0)
            break;
        for (int i = 0; i < nv; i++)
            logits[i] = rnd_logit();
        int best = -1; /* the best allowed token: banning it changes the answer */
        for (int i = 0; i < nv; i++)
            if (bit(allowed, i) && (best < 0 || logits[i] > logits[best]))
                best = i;
        int n_ban = 0;
        if ((step + k / 2) % 2 == 0) { /* min_tokens' ban: the end-of-generation tokens, and more */
            for (int i = 0; i < nv && n_ban < 3; i++)
                if (tok_is_eog(v, i))
                    ban[n_ban++] = i;
            ban[n_ban++] = best;
            ban[n_ban++] = bias_ids[0]; /* the bias cannot bring it back */
            ban[n_ban++] = -1;          /* out of range: ignored */
            ban[n_ban++] = nv + 3;
        }
        model_sampler_set_banned(a, ban, n_ban);

        double t2 = now_s();
        int n_mask = model_sampler_mask(a, mask);
        st->t_mask += now_s() - t2;
        /* The bits: the grammar's less the bans; the count; the tail. */
        int ok = 1, pop = 0;
        for (int i = 0; i < nv; i++) {
            int banned = 0;
            for (int q = 0; q < n_ban; q++)
                banned |= ban[q] == i;
            ok &= bit(mask, i) == (bit(allowed, i) && !banned);
            pop += bit(mask, i);
        }
        for (int i = nv; i < words * 32; i++)
            ok &= !bit(mask, i);
        st->mask_ok += ok && pop == n_mask;

        memcpy(la, logits, (size_t)nv * sizeof *la);
        for (int i = 0; i < nv; i++)
            lb[i] = bit(mask, i) ? logits[i] : -INFINITY;
        int32_t ia = model_sampler_sample(a, la, hist, n_hist);
        int32_t ib = model_sampler_sample(b, lb, hist, n_hist);
        st->same_id += ia == ib;
        st->same_row += memcmp(la, lb, (size_t)nv * sizeof *la) == 0;
        /* The generators drew alike (each copy of the state advances once). */
        st->same_rng += model_sampler_next_uniform(a) == model_sampler_next_uniform(b);
        st->allowed_ok += n_mask > 0 ? (ia >= 0 && ia < nv && bit(mask, ia)) : ia == 0;
        st->rows++;
        if (ia != ib && st->rows - st->same_id <= 3)
            fprintf(stderr, "  step %d settings %d: constrained %d, masked row %d\n", step, k, ia,
                    ib);
        if (ia < 0 || ia >= nv || tok_is_eog(v, ia) || model_grammar_accept(m, ia) < 0 ||
            model_grammar_finished(m))
            break;
        if (n_hist < 64)
            hist[n_hist++] = ia;
        st->steps++;
    }
done:
    model_grammar_matcher_free(m);
    model_sampler_free(a);
    model_sampler_free(b);
    free(allowed), free(mask), free(logits), free(la), free(lb);
}

static const char *SCHEMA =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws string \",\" ws \"\\\"age\\\"\" ws \":\" ws "
    "int \",\" ws \"\\\"tags\\\"\" ws \":\" ws \"[\" ws (string (\",\" ws string)*)? \"]\" ws "
    "\"}\"\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\" ws\n"
    "int ::= \"-\"? [0-9]{1,12} ws\n"
    "ws ::= [ \\t\\n]{0,4}\n";

static void test_vocab(const char *file) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/vocab/%s", bt_shared_dir(), file);
    gguf_file *gf = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(path, &gf, err, sizeof err) < 0 ||
        tok_vocab_create_from_gguf(gf, &v, err, sizeof err) < 0) {
        printf("SKIP %s: %s\n", file, err);
        gguf_close(gf);
        return;
    }
    model_grammar_vocab *gv = model_grammar_vocab_create(v);
    CHECK(gv != NULL, "%s: trie", file);
    char *json = model_grammar_json_text(1);
    const char *choices[] = {"yes", "no", "maybe later", "caf\xc3\xa9"};
    const size_t lens[] = {3, 2, 11, 5};
    char *choice = model_grammar_choice_text(choices, lens, 4);
    const char *texts[] = {json, SCHEMA, "root ::= \"<\" [a-z]{1,6} (\", \" [0-9]+)* \">\"",
                           choice};
    const char *names[] = {"json object", "schema", "list", "choice"};
    for (int gi = 0; gi < 4 && gv && json && choice; gi++) {
        model_grammar *g = NULL;
        model_grammar_compile(texts[gi], strlen(texts[gi]), NULL, &g, err, sizeof err);
        CHECK(g != NULL, "%s: %s", names[gi], err);
        walk_stats st = {0};
        /* Half of the 144 settings (every temperature, top-k, top-p, min-p
         * and penalty combination), the other half with the next grammar; a
         * bias on every third. */
        for (int k = gi % 2; g && k < 144; k += 2)
            walk(v, gv, g, k, &st);
        CHECK(st.rows >= 72 && st.steps > 0, "%s / %s: %d rows, %d steps", file, names[gi], st.rows,
              st.steps);
        CHECK(st.same_id == st.rows, "%s / %s: %d of %d ids equal", file, names[gi], st.same_id,
              st.rows);
        CHECK(st.same_row == st.rows, "%s / %s: %d of %d edited rows equal", file, names[gi],
              st.same_row, st.rows);
        CHECK(st.same_rng == st.rows, "%s / %s: generators in step in %d of %d", file, names[gi],
              st.same_rng, st.rows);
        CHECK(st.mask_ok == st.rows, "%s / %s: mask bits right in %d of %d", file, names[gi],
              st.mask_ok, st.rows);
        CHECK(st.allowed_ok == st.rows, "%s / %s: sampled token allowed in %d of %d", file,
              names[gi], st.allowed_ok, st.rows);
        printf("%s / %s: %d rows; model_sampler_mask %.1f us a row; grammar mask %.1f us a hit "
               "(%d), %.2f ms a miss (%d)\n",
               file, names[gi], st.rows, st.t_mask / st.rows * 1e6,
               st.n_hit ? st.t_gmask_hit / st.n_hit * 1e6 : 0.0, st.n_hit,
               st.n_miss ? st.t_gmask_miss / st.n_miss * 1e3 : 0.0, st.n_miss);
        model_grammar_unref(g);
    }
    free(json);
    free(choice);
    model_grammar_vocab_free(gv);
    tok_vocab_free(v);
    gguf_close(gf);
}

/* No grammar: bans alone (min_tokens), the tail bits past n_vocab, and a
 * row where every token is banned (id 0 both ways, greedy and sampled). */
static void test_edges(void) {
    enum { NV = 1000 }; /* 1000 = 31 words + 8 bits: a partial last word */
    uint32_t mask[(NV + 31) / 32 + 1];
    model_sampling p = model_sampling_default();
    model_sampler *s = model_sampler_create(&p, NV);
    mask[(NV + 31) / 32] = 0x5a5a5a5au; /* past the mask: must stay untouched */
    int n = model_sampler_mask(s, mask);
    int tail_ok = mask[(NV + 31) / 32 - 1] == 0xffu && mask[(NV + 31) / 32] == 0x5a5a5a5au;
    CHECK(n == NV && tail_ok && !model_sampler_constrained(s), "unconstrained: %d allowed", n);
    int32_t ban[3] = {2, 999, 1000};
    model_sampler_set_banned(s, ban, 3);
    n = model_sampler_mask(s, mask);
    CHECK(n == NV - 2 && !bit(mask, 2) && !bit(mask, 999) && bit(mask, 998) &&
              model_sampler_constrained(s),
          "bans alone: %d allowed", n);
    model_sampler_free(s);

    uint32_t none[(NV + 31) / 32] = {0};
    float l[NV], lm[NV];
    for (int t = 0; t < 2; t++) {
        p = model_sampling_default();
        p.temperature = t ? 1.0f : 0.0f;
        s = model_sampler_create(&p, NV);
        model_sampler *u = model_sampler_create(&p, NV);
        model_sampler_set_allowed(s, none);
        n = model_sampler_mask(s, mask);
        for (int i = 0; i < NV; i++) {
            l[i] = rnd_logit();
            lm[i] = bit(mask, i) ? l[i] : -INFINITY;
        }
        int32_t a = model_sampler_sample(s, l, NULL, 0), b = model_sampler_sample(u, lm, NULL, 0);
        CHECK(n == 0 && a == 0 && b == 0, "nothing allowed (T=%d): count %d, ids %d %d", t, n, a,
              b);
        model_sampler_free(s);
        model_sampler_free(u);
    }
}

int main(void) {
    test_edges();
    test_vocab("ggml-vocab-gpt-2.gguf");
    test_vocab("ggml-vocab-llama-spm.gguf");
    return BT_SUMMARY("test_sampler_mask");
}
