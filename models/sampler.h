/* sampler.h - turns a row of logits into the next token.
 *
 * Order of operations (as vLLM): logit bias -> repetition / presence /
 * frequency penalties over the history -> greedy if temperature <= 0, else
 * temperature -> top-k -> top-p -> min-p -> draw from the seeded RNG.
 * The same seed and inputs reproduce the same tokens exactly. */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct model_sampling {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off; > 1 discourages tokens seen in the history */
    float presence_penalty;   /* 0: off; subtracted once per token seen */
    float frequency_penalty;  /* 0: off; subtracted per occurrence */
    int penalty_last_n;       /* history window for penalties; <= 0: all of it */
    /* Presence and frequency penalties count only history tokens from this
     * index on (inside the window): the HTTP API sets the prompt's length,
     * so that, as in vLLM and OpenAI, they see the output alone while the
     * repetition penalty sees prompt and output. 0: the whole window. */
    int pf_from;
    uint64_t seed;
    int n_logit_bias;
    const int32_t *logit_bias_ids; /* borrowed for the sampler's lifetime */
    const float *logit_bias;
} model_sampling;

/* Defaults: temperature 1, every filter and penalty off, seed 0. */
model_sampling model_sampling_default(void);

typedef struct model_sampler model_sampler;

/* Copies p (not the bias arrays). Returns NULL on allocation failure or if
 * n_vocab <= 0. */
model_sampler *model_sampler_create(const model_sampling *p, int n_vocab);
void model_sampler_free(model_sampler *s);

/* Samples from logits (n_vocab floats, modified in place). history holds the
 * tokens the penalties look at (prompt and generated so far). Returns the
 * token, or BRISK_ENOMEM when the edit list (below) could not grow for a
 * long penalty window. */
int32_t model_sampler_sample(model_sampler *s, float *logits, const int32_t *history,
                             int n_history);

/* Speculative decoding with a draft model: samples as model_sampler_sample
 * does (the same edits, filters and one draw when temperature > 0), and
 *   probs (n_vocab floats, or NULL) gets the distribution the token is drawn
 *     from: each token's probability after the mask, bans, edits,
 *     temperature, top-k, top-p and min-p, 0 for the tokens they remove
 *     (greedy: 1 at the argmax). It is the draft's q when the draft samples.
 *   q (n_vocab floats, or NULL) is the draft's distribution at this position
 *     and x the token it proposed: *p_x (when p_x is not NULL) gets p(x),
 *     this row's probability of x, and the token returned is drawn from the
 *     residual max(0, p - q) normalised (from p itself when that is zero
 *     everywhere): what speculative rejection sampling emits when it
 *     rejects x (accepting x with probability min(1, p(x) / q(x)) is the
 *     caller's). Greedy: the argmax, and *p_x is 1 if x is it, else 0.
 * With q and probs NULL this is model_sampler_sample. */
int32_t model_sampler_sample_spec(model_sampler *s, float *logits, const int32_t *history,
                                  int n_history, const float *q, int32_t x, float *p_x,
                                  float *probs);

/* The generator's state. Every sample with temperature > 0 makes exactly one
 * draw from it (on every path: a row with no candidate too; a GPU sampler
 * draws through model_sampler_next_uniform, once per row), a greedy one
 * none. So a speculative step that samples several positions of one
 * sequence at once, of which only the first n are kept, saves the state
 * before and restores it advanced by n samples: the state plain decoding of
 * those n tokens leaves, and the seed keeps reproducing the output. */
typedef struct model_sampler_rng {
    uint64_t s[4];
} model_sampler_rng;
void model_sampler_rng_save(const model_sampler *s, model_sampler_rng *out);
void model_sampler_rng_restore(model_sampler *s, const model_sampler_rng *saved, int n_samples);

/* Tokens the next samples may not take: their logits become -inf before
 * anything else (vLLM's min_tokens bars EOS and stop_token_ids so). ids
 * is borrowed until the next call; n = 0 (or ids NULL) clears the ban. */
void model_sampler_set_banned(model_sampler *s, const int32_t *ids, int n);
/* Only the tokens whose bit is set (bit i of allowed[i / 32]) may be taken:
 * the others' logits become -inf first (a grammar's mask). Borrowed until
 * the next call; NULL allows every token. */
void model_sampler_set_allowed(model_sampler *s, const uint32_t *allowed);
/* 1 when a ban or a mask is set: a backend that samples elsewhere (the
 * GPU) must apply model_sampler_mask's bitmask to such a row. */
int model_sampler_constrained(const model_sampler *s);
/* The tokens the next sample may take, as one bitmask: n_vocab bits, bit i
 * of mask[i / 32], (n_vocab + 31) / 32 words, the bits past n_vocab 0. It is
 * the grammar's mask (model_sampler_set_allowed; none: every token) less the
 * banned ids: exactly the tokens whose logits model_sampler_sample leaves as
 * they are before its edits, all the others becoming -inf. So a backend that
 * sets every logit outside the mask to -inf as its first step, then samples
 * as for an unconstrained row (edits, filters, draw), samples the same row
 * model_sampler_sample would. Returns how many tokens are allowed; 0 means
 * none, and the sampler then picks id 0 (as for a row of -inf logits). */
int model_sampler_mask(const model_sampler *s, uint32_t *mask);

/* ---- the edits: one description for every backend -----------------------
 *
 * Before its filters, sampling edits a few logits of the row: the logit bias
 * (l += bias) and the penalties over the history. The sampler writes these
 * as one list, and every backend applies that list: model_sampler_sample
 * through model_sample_edits_apply on the host, the CUDA backend by
 * uploading it for its kernel (kern_cuda_sample.cuh's steps 1-2). So the
 * penalty window, pf_from and the merging of bias ids are decided here once.
 *
 * The list: ids[0, n_bias) with vals = the bias of that id (an id given
 * twice: the sum of its values, in the order given), then ids[n_bias,
 * n_bias + n_pen): every distinct id of the penalty window (the repetition
 * penalty's window, or with only presence and frequency penalties their part
 * of it) with vals = its occurrences in the presence/frequency window (from
 * pf_from on; 0: the repetition penalty alone edits it). Ids outside the
 * vocabulary are left out. Applying: bias edits first, l += val; then each
 * penalty edit, l = l > 0 ? l / rep : l * rep (rep != 1), and when val > 0,
 * l -= presence + frequency * val. Each id appears at most once in each
 * part, so the order inside a part does not change the result. */
typedef struct model_sample_edits {
    const int32_t *ids; /* [n_bias + n_pen], owned by the sampler */
    const float *vals;  /* [n_bias + n_pen], owned by the sampler */
    int n_bias, n_pen;
} model_sample_edits;

/* The edits of the next sample with this history (prompt and generated so
 * far). The arrays stay valid until the next call on s (or its free); each
 * sampler has its own, so a batch's lists can be held together. Returns 0,
 * or BRISK_ENOMEM (no list is made). */
int model_sampler_edits(model_sampler *s, const int32_t *history, int n_history,
                        model_sample_edits *out);
/* Applies e to logits (n_vocab floats) with p's penalty factors. */
void model_sample_edits_apply(const model_sampling *p, const model_sample_edits *e, float *logits);

/* The settings the sampler was made with (for backends that sample
 * elsewhere, e.g. on the GPU). */
const model_sampling *model_sampler_params(const model_sampler *s);
/* The next uniform double in [0, 1) from the sampler's seeded generator: the
 * draw a GPU sampler makes with it, one per sampled token. */
double model_sampler_next_uniform(model_sampler *s);

#endif
