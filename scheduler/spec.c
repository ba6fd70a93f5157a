/* spec.c - speculative decoding's engine side: the configuration, each
 * step's proposals through the policy and the proposer, and the counters
 * (spec.h). */
#include "scheduler/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "scheduler/spec_draft.h"
#include "scheduler/spec_policy.h"
#include "scheduler/spec_propose.h"
#include "scheduler/spec_verify.h"

struct sched_spec_seq {
    spec_policy_seq pol;
    uint64_t rng[4];    /* draft-model acceptance draws (spec_verify.h) */
    spec_draft_seq *ds; /* draft_model: its draft state */
    int sampled;        /* temperature > 0 */
    const float *q;     /* this step's draft distributions, or NULL */
};

struct sched_spec {
    sched_spec_config cfg;
    int threshold;
    double cost;
    int n_vocab, max_seqs;
    size_t target_bytes; /* the weights a target decode step reads */
    double base_cost;    /* c: SCHED_SPEC_COST_* until measured (sched_spec_step_time) */
    /* The fit of the small steps' forward time against their tokens,
     * t = t1 (1 + c (tokens - 1)): sums of x = tokens - 1 and y = seconds,
     * each step weighing SPEC_FIT_KEEP times the one after it. */
    double fw, fx, fy, fxx, fxy;
    double t1_s;   /* the fitted one-token step (0: not yet) */
    double t1_one; /* the one-token steps' moving average (before the fit) */
    spec_suffix *suffix;
    spec_suffix_opts sopts;
    spec_draft *draft;
    spec_draft_job *djobs; /* [max_seqs] */
    int *djob_cand;
    int *djob_qrow; /* its first row of q, or -1 (greedy: none kept) */
    /* [max_seqs] each: the batch rule's inputs and lengths (spec_policy_share) */
    int *want, *probe, *len;
    float *acc;
    float *q; /* [q_rows][n_vocab]: the step's draft distributions */
    int q_rows;
    sched_spec_stats stats;
};

const char *sched_spec_method_name(sched_spec_method m) {
    switch (m) {
    case SCHED_SPEC_NGRAM: return "ngram";
    case SCHED_SPEC_SUFFIX: return "suffix";
    case SCHED_SPEC_DRAFT: return "draft_model";
    default: return "none";
    }
}

sched_spec_config sched_spec_config_default(void) {
    sched_spec_config c;
    memset(&c, 0, sizeof c);
    c.lookup_min = 5;
    c.lookup_max = 5;
    c.suffix_bytes = SCHED_SPEC_SUFFIX_BYTES;
    c.suffix_depth = SCHED_SPEC_SUFFIX_DEPTH;
    c.suffix_factor = 1.0f;
    c.suffix_min_prob = 0.1f;
    return c;
}

int sched_spec_config_check(const sched_spec_config *c, char *err, size_t err_len) {
    if (c->method == SCHED_SPEC_NONE)
        return 0;
    if (c->method < SCHED_SPEC_NONE || c->method > SCHED_SPEC_DRAFT)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "speculative decoding: unknown method");
    if (c->num_tokens < 1 || c->num_tokens > SCHED_SPEC_MAX_TOKENS)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: num_speculative_tokens must be 1 to %d",
                             SCHED_SPEC_MAX_TOKENS);
    if (c->method == SCHED_SPEC_NGRAM &&
        (c->lookup_min < 1 || c->lookup_max < c->lookup_min || c->lookup_max > 64))
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: 1 <= prompt_lookup_min <= prompt_lookup_max "
                             "<= 64");
    if (c->method == SCHED_SPEC_DRAFT && (!c->draft_model || !c->draft_model[0]))
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: draft_model needs a model file");
    if (c->method != SCHED_SPEC_DRAFT && c->draft_model)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: a model is only for method draft_model");
    if (c->draft_min < 0 || c->draft_min > c->num_tokens)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: the minimum proposal length must be 0 to "
                             "num_speculative_tokens");
    if (c->method == SCHED_SPEC_SUFFIX &&
        (c->suffix_bytes < (1LL << 20) || c->suffix_depth < 2 || c->suffix_depth > 64 ||
         !(c->suffix_factor > 0.0f && c->suffix_factor <= 64.0f) ||
         !(c->suffix_min_prob >= 0.0f && c->suffix_min_prob <= 1.0f)))
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: suffix needs an index of at least 1 MiB, a "
                             "tree depth of 2 to 64, a spec factor in (0, 64] and a minimum token "
                             "probability in [0, 1]");
    if (c->max_batch_tokens < 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "speculative decoding: the threshold must not be negative");
    return 0;
}

int sched_spec_create(const sched_spec_config *cfg, const sched_spec_env *env, sched_spec **out,
                      char *err, size_t err_len) {
    *out = NULL;
    if (cfg->method == SCHED_SPEC_NONE)
        return 0;
    int rc = sched_spec_config_check(cfg, err, err_len);
    if (rc < 0)
        return rc;
    sched_spec *sp = calloc(1, sizeof *sp);
    if (!sp)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "speculative decoding: out of memory");
    sp->cfg = *cfg;
    sp->cfg.draft_model = NULL; /* borrowed: the draft runner holds what it needs */
    int cuda = env->be->device == MODEL_DEVICE_CUDA;
    sp->threshold = cfg->max_batch_tokens > 0 ? cfg->max_batch_tokens
                    : cuda                    ? SCHED_SPEC_THRESHOLD_CUDA
                                              : SCHED_SPEC_THRESHOLD_CPU;
    sp->cost = sp->base_cost = cuda ? SCHED_SPEC_COST_CUDA : SCHED_SPEC_COST_CPU;
    sp->n_vocab = model_get_config(env->target)->n_vocab;
    sp->target_bytes = env->be->weight_bytes;
    sp->max_seqs = env->max_seqs;
    sp->stats.enabled = 1;
    sp->stats.num_tokens = cfg->num_tokens;
    sp->sopts = (spec_suffix_opts){cfg->num_tokens, cfg->suffix_min_prob, cfg->suffix_factor};
    sp->djobs = calloc((size_t)env->max_seqs, sizeof *sp->djobs);
    sp->djob_cand = calloc((size_t)env->max_seqs, sizeof *sp->djob_cand);
    sp->djob_qrow = calloc((size_t)env->max_seqs, sizeof *sp->djob_qrow);
    sp->want = calloc((size_t)env->max_seqs * 3, sizeof *sp->want);
    sp->acc = calloc((size_t)env->max_seqs, sizeof *sp->acc);
    if (sp->want) {
        sp->probe = sp->want + env->max_seqs;
        sp->len = sp->probe + env->max_seqs;
    }
    if (!sp->djobs || !sp->djob_cand || !sp->djob_qrow || !sp->want || !sp->acc) {
        sched_spec_free(sp);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "speculative decoding: out of memory");
    }
    if (cfg->method == SCHED_SPEC_SUFFIX) {
        int nv = sp->n_vocab;
        sp->suffix = spec_suffix_create(cfg->suffix_bytes, cfg->suffix_depth, nv);
        if (!sp->suffix) {
            sched_spec_free(sp);
            return brisk_set_err(err, err_len, BRISK_ENOMEM,
                                 "speculative decoding: cannot make the suffix index (%lld bytes "
                                 "for a vocabulary of %d)",
                                 cfg->suffix_bytes, nv);
        }
    }
    *out = sp;
    return 0;
}

void sched_spec_set_draft(sched_spec *sp, spec_draft *d) {
    spec_draft_free(sp->draft);
    sp->draft = d;
    /* A proposal also costs a draft step: decode reads the weights, so one
     * draft step is about the draft's bytes over the target's of a target
     * step (SmolLM2 Q4_0 for F16: 0.29). */
    size_t db = d ? spec_draft_weight_bytes(d) : 0;
    if (db && sp->target_bytes)
        sp->cost += (double)db / (double)sp->target_bytes;
}

void sched_spec_free(sched_spec *sp) {
    if (!sp)
        return;
    spec_suffix_free(sp->suffix);
    spec_draft_free(sp->draft);
    free(sp->djobs);
    free(sp->djob_cand);
    free(sp->djob_qrow);
    free(sp->want);
    free(sp->acc);
    free(sp->q);
    free(sp);
}

int sched_spec_threshold(const sched_spec *sp) {
    return sp->threshold;
}

double sched_spec_cost(const sched_spec *sp) {
    return sp->cost;
}

/* Weight of a step in the fit relative to the next (~100 steps remembered),
 * the fit's minimum weight and spread of x before it replaces the prior,
 * and the range of c it may give. */
#define SPEC_FIT_KEEP 0.99
#define SPEC_FIT_MIN_W 20.0
#define SPEC_FIT_MIN_VAR 0.25
#define SPEC_FIT_C_MIN 0.02
#define SPEC_FIT_C_MAX 2.0

/* c: the fitted (or prior) cost of a proposal in the target, plus with a
 * draft model its step over the target's (measured once both are; their
 * weight bytes' ratio before). */
static void spec_cost_update(sched_spec *sp) {
    sp->cost = sp->base_cost;
    if (!sp->draft)
        return;
    double ds = spec_draft_step_s(sp->draft), t1 = sp->t1_s > 0 ? sp->t1_s : sp->t1_one;
    if (ds > 0 && t1 > 0)
        sp->cost += ds / t1;
    else if (sp->target_bytes)
        sp->cost += (double)spec_draft_weight_bytes(sp->draft) / (double)sp->target_bytes;
}

void sched_spec_step_time(sched_spec *sp, int tokens, double forward_s) {
    if (!sp || tokens < 1 || tokens > sp->threshold || !(forward_s > 0) || forward_s > 10.0)
        return;
    if (tokens == 1) /* a draft's cost needs a target step before the fit has one */
        sp->t1_one = sp->t1_one > 0 ? sp->t1_one + (forward_s - sp->t1_one) / 8.0 : forward_s;
    double x = tokens - 1;
    sp->fw = sp->fw * SPEC_FIT_KEEP + 1.0;
    sp->fx = sp->fx * SPEC_FIT_KEEP + x;
    sp->fy = sp->fy * SPEC_FIT_KEEP + forward_s;
    sp->fxx = sp->fxx * SPEC_FIT_KEEP + x * x;
    sp->fxy = sp->fxy * SPEC_FIT_KEEP + x * forward_s;
    double mx = sp->fx / sp->fw, my = sp->fy / sp->fw, var = sp->fxx / sp->fw - mx * mx;
    double slope = var > 0 ? (sp->fxy / sp->fw - mx * my) / var : 0.0, t1 = my - slope * mx;
    /* Steps of one size only (nothing proposed yet): the prior stands. */
    if (sp->fw >= SPEC_FIT_MIN_W && var >= SPEC_FIT_MIN_VAR && t1 > 0) {
        double c = slope / t1;
        sp->base_cost = c < SPEC_FIT_C_MIN   ? SPEC_FIT_C_MIN
                        : c > SPEC_FIT_C_MAX ? SPEC_FIT_C_MAX
                                             : c;
        sp->t1_s = t1;
    }
    spec_cost_update(sp);
}

sched_spec_seq *sched_spec_seq_create(sched_spec *sp, const model_sampling *p) {
    sched_spec_seq *ss = brisk_calloc(1, sizeof *ss);
    if (!ss)
        return NULL;
    spec_policy_init(&ss->pol);
    spec_verify_seed(ss->rng, p->seed);
    ss->sampled = p->temperature > 0.0f;
    if (sp->draft) {
        ss->ds = spec_draft_seq_create(sp->draft, p);
        if (!ss->ds) {
            free(ss);
            return NULL;
        }
    }
    return ss;
}

void sched_spec_seq_end(sched_spec *sp, sched_spec_seq *ss, const int32_t *output, int n) {
    if (!sp || !ss)
        return;
    if (ss->ds)
        spec_draft_seq_release(sp->draft, ss->ds);
    /* A failed add leaves the index as it was: speed only, never output. */
    if (sp->suffix && output && n > 0)
        (void)spec_suffix_add(sp->suffix, output, n);
}

void sched_spec_seq_free(sched_spec_seq *ss) {
    if (!ss)
        return;
    spec_draft_seq_free(ss->ds);
    free(ss);
}

const float *sched_spec_seq_q(const sched_spec_seq *ss) {
    return ss ? ss->q : NULL;
}

uint64_t *sched_spec_seq_rng(sched_spec_seq *ss) {
    return ss && ss->q ? ss->rng : NULL;
}

/* Room for `rows` draft distributions (made on the first sampled draft step). */
static int spec_q_reserve(sched_spec *sp, int rows) {
    if (rows <= sp->q_rows)
        return 0;
    float *q = brisk_malloc((size_t)rows * (size_t)sp->n_vocab * sizeof *q);
    if (!q)
        return BRISK_ENOMEM;
    free(sp->q);
    sp->q = q;
    sp->q_rows = rows;
    return 0;
}

/* A draft first computes every token of the sequence it does not hold (the
 * whole prompt before its first proposal): worth it only when the steps
 * left can repay it. The R tokens left take R target steps alone and
 * R (1 + c k) / E(k) with k proposals a step; the catch-up costs its tokens times the draft's prefill per token
 * in target steps (measured; before, a third of a draft step, as a small
 * model's CPU prefill per token measures against its decode step). */
#define SPEC_DRAFT_PREFILL_PRIOR 0.33
static int spec_draft_start_pays(const sched_spec *sp, const sched_spec_cand *c, int k) {
    int behind = spec_draft_seq_behind(c->ss->ds, c->n_tokens);
    if (behind <= 2)
        return 1; /* the one or two tokens the last verification emitted */
    double t1 = sp->t1_s > 0 ? sp->t1_s : sp->t1_one, ds = spec_draft_step_s(sp->draft);
    double pre = spec_draft_prefill_s(sp->draft), per_tok;
    double step = ds > 0 && t1 > 0 ? ds / t1 : sp->cost - sp->base_cost;
    per_tok = pre > 0 && t1 > 0 ? pre / t1 : SPEC_DRAFT_PREFILL_PRIOR * step;
    double a = c->ss->pol.accept, e = 1.0, pw = a;
    for (int j = 1; j <= k; j++, pw *= a)
        e += pw;
    /* The room's tokens cost room steps alone, room (1 + c k) / E drafted. */
    double saved = 1.0 - (1.0 + sp->cost * k) / e;
    return saved > 0 && saved * (double)c->room > per_tok * (double)behind;
}

void sched_spec_propose(sched_spec *sp, sched_spec_cand *cands, int n, int base_tokens) {
    n = n < sp->max_seqs ? n : sp->max_seqs;
    for (int i = 0; i < n; i++) {
        cands[i].n_prop = 0;
        if (cands[i].ss)
            cands[i].ss->q = NULL;
    }
    if (spec_policy_budget(sp->threshold, base_tokens) <= 0)
        return;
    /* Each sequence's own length; the lookups (cheap) run at once, so the
     * step's share below goes to proposals that exist. */
    for (int i = 0; i < n; i++) {
        sched_spec_cand *c = &cands[i];
        int k = 0;
        sp->probe[i] = 0;
        sp->acc[i] = 0.0f;
        if (c->ss && c->room > 0) {
            k = sp->cfg.fixed_len
                    ? sp->cfg.num_tokens
                    : spec_policy_len(&c->ss->pol, sp->cfg.num_tokens, sp->cost, !sp->draft);
            k = k < c->room ? k : c->room;
            sp->probe[i] = c->ss->pol.probing;
            sp->acc[i] = c->ss->pol.accept;
        }
        int32_t *out = c->tokens + c->n_tokens;
        if (k > 0 && sp->cfg.method == SCHED_SPEC_NGRAM)
            k = spec_ngram_propose(c->tokens, c->n_tokens, sp->cfg.lookup_min, sp->cfg.lookup_max,
                                   k, out);
        else if (k > 0 && sp->cfg.method == SCHED_SPEC_SUFFIX) {
            spec_suffix_opts o = sp->sopts;
            o.k = k;
            k = spec_suffix_propose(sp->suffix, c->tokens, c->n_tokens, &o, out);
        } else if (sp->cfg.method == SCHED_SPEC_DRAFT && (!sp->draft || !c->ss || !c->ss->ds))
            k = 0;
        else if (k > 0 && sp->cfg.method == SCHED_SPEC_DRAFT && !sp->cfg.fixed_len &&
                 !spec_draft_start_pays(sp, c, k))
            k = 0;
        if (k > 0 && k < sp->cfg.draft_min)
            k = 0;
        sp->want[i] = k;
    }
    spec_policy_share(sp->acc, sp->want, sp->probe, n, base_tokens, sp->base_cost, sp->cost,
                      sp->threshold, sp->cfg.draft_min, sp->cfg.fixed_len, sp->len);
    int n_dj = 0, q_used = 0;
    for (int i = 0; i < n; i++) {
        sched_spec_cand *c = &cands[i];
        int k = sp->len[i];
        if (k <= 0)
            continue;
        if (sp->cfg.method != SCHED_SPEC_DRAFT) {
            /* A shorter share keeps the lookup's first k (any prefix of a
             * proposal is one). */
            c->n_prop = k < sp->cfg.draft_min ? 0 : k;
            continue;
        }
        sp->djobs[n_dj] = (spec_draft_job){c->ss->ds, c->tokens, c->n_tokens, k, NULL, 0};
        /* the draft's distributions, for rejection sampling: rows placed below */
        sp->djob_qrow[n_dj] = c->ss->sampled ? q_used : -1;
        q_used += c->ss->sampled ? k : 0;
        sp->djob_cand[n_dj++] = i;
    }
    if (n_dj == 0)
        return;
    /* The distributions' rows, now that the step's total is known. */
    int have_q = q_used == 0 || spec_q_reserve(sp, q_used) == 0;
    for (int j = 0; j < n_dj; j++) {
        spec_draft_job *dj = &sp->djobs[j];
        if (sp->djob_qrow[j] < 0)
            continue;
        if (have_q)
            dj->q = sp->q + (size_t)sp->djob_qrow[j] * (size_t)sp->n_vocab;
        else
            dj->want = 0; /* no room for its distributions: no proposal */
    }
    spec_draft_propose(sp->draft, sp->djobs, n_dj);
    for (int j = 0; j < n_dj; j++) {
        sched_spec_cand *c = &cands[sp->djob_cand[j]];
        int got = sp->djobs[j].got;
        c->n_prop = got >= sp->cfg.draft_min ? got : 0;
        c->ss->q = c->n_prop > 0 ? sp->djobs[j].q : NULL;
    }
}

void sched_spec_observe(sched_spec *sp, sched_spec_seq *ss, int proposed, int accepted,
                        int n_valid) {
    if (!sp || proposed <= 0)
        return;
    sp->stats.drafts++;
    sp->stats.draft_tokens += proposed;
    sp->stats.accepted_tokens += accepted;
    for (int i = 0; i < accepted && i < SCHED_SPEC_MAX_TOKENS; i++)
        sp->stats.per_pos[i]++;
    if (!ss)
        return;
    spec_policy_observe(&ss->pol, proposed, accepted);
    if (ss->ds)
        spec_draft_keep(sp->draft, ss->ds, n_valid);
}

void sched_spec_get_stats(const sched_spec *sp, sched_spec_stats *out) {
    if (!sp) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = sp->stats;
}
