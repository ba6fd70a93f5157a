/* bench_workload.c - random numbers, prompts, datasets, arrivals (see
 * bench_workload.h). */
#include "clients/bench_workload.h"

#include "common/brisk_rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"

/* ---- random numbers ---- */

void bench_rng_seed(bench_rng *r, uint64_t seed) {
    brisk_rng_seed(r->s, seed);
}

uint64_t bench_rng_next(bench_rng *r) {
    return brisk_rng_next(r->s);
}

double bench_rng_uniform(bench_rng *r) {
    return brisk_rng_uniform(r->s);
}

int64_t bench_rng_range(bench_rng *r, int64_t lo, int64_t hi) {
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    /* Rejection sampling: no modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do {
        x = bench_rng_next(r);
    } while (x >= limit);
    return lo + (int64_t)(x % span);
}

static double rng_normal(bench_rng *r) {
    /* Box-Muller; 1 - u keeps the log's argument in (0, 1]. */
    double u1 = 1.0 - bench_rng_uniform(r), u2 = bench_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double bench_rng_gamma(bench_rng *r, double shape, double scale) {
    if (!(shape > 0) || !(scale > 0))
        return 0;
    if (shape < 1) {
        /* Gamma(k) = Gamma(k + 1) * U^(1/k) (Marsaglia and Tsang, section 6). */
        double u = 1.0 - bench_rng_uniform(r);
        return bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - bench_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v * scale;
    }
}

double bench_arrival_gap(bench_rng *r, double rate, double burstiness) {
    if (!(rate > 0) || isinf(rate))
        return 0;
    if (!(burstiness > 0))
        burstiness = 1;
    return bench_rng_gamma(r, burstiness, 1.0 / (rate * burstiness));
}

int bench_sample_len(bench_rng *r, int len, double ratio, int min) {
    int lo = (int)floor((double)len * (1.0 - ratio));
    int hi = (int)floor((double)len * (1.0 + ratio));
    if (lo < min)
        lo = min;
    if (hi < lo)
        hi = lo;
    return (int)bench_rng_range(r, lo, hi);
}

/* ---- prompts ---- */

/* Common English words; with a leading space each is a single token in the
 * GPT-2, Llama 3, Qwen2 and SmolLM vocabularies. */
static const char *const WORDS[] = {
    "the",     "of",      "and",    "to",      "in",       "is",      "was",      "he",
    "for",     "it",      "with",   "as",      "his",      "on",      "be",       "at",
    "by",      "had",     "are",    "but",     "from",     "or",      "have",     "an",
    "they",    "which",   "one",    "you",     "were",     "her",     "all",      "she",
    "there",   "would",   "their",  "we",      "him",      "been",    "has",      "when",
    "who",     "will",    "more",   "no",      "if",       "out",     "so",       "said",
    "what",    "up",      "its",    "about",   "into",     "than",    "them",     "can",
    "only",    "other",   "new",    "some",    "could",    "time",    "these",    "two",
    "may",     "then",    "do",     "first",   "any",      "my",      "now",      "such",
    "like",    "our",     "over",   "man",     "me",       "even",    "most",     "made",
    "after",   "also",    "did",    "many",    "before",   "must",    "through",  "back",
    "years",   "where",   "much",   "your",    "way",      "well",    "down",     "should",
    "because", "each",    "just",   "those",   "people",   "how",     "too",      "little",
    "state",   "good",    "very",   "make",    "world",    "still",   "own",      "see",
    "men",     "work",    "long",   "get",     "here",     "between", "both",     "life",
    "being",   "under",   "never",  "day",     "same",     "another", "know",     "while",
    "last",    "might",   "us",     "great",   "old",      "year",    "off",      "come",
    "since",   "against", "go",     "came",    "right",    "used",    "take",     "three",
    "house",   "water",   "light",  "city",    "tree",     "river",   "road",     "music",
    "table",   "story",   "game",   "book",    "friend",   "family",  "school",   "night",
    "morning", "green",   "blue",   "red",     "small",    "large",   "happy",    "quick",
    "slow",    "open",    "close",  "start",   "stop",     "line",    "part",     "place",
    "point",   "group",   "number", "home",    "hand",     "eye",     "head",     "face",
    "word",    "side",    "money",  "power",   "war",      "area",    "air",      "end",
    "case",    "fact",    "week",   "company", "system",   "program", "question", "service",
    "change",  "order",   "sound",  "answer",  "field",    "heart",   "color",    "plant",
    "food",    "sun",     "earth",  "ship",    "car",      "bird",    "dog",      "cat",
    "horse",   "fish",    "king",   "love",    "mind",     "south",   "north",    "east",
    "west",    "summer",  "winter", "paper",   "stone",    "glass",   "bread",    "garden",
    "market",  "village", "island", "forest",  "mountain",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return BRISK_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* n random words joined by single spaces (malloc'd), or NULL. */
static char *random_words(bench_rng *r, int n) {
    sbuf b = {0};
    if (sb_add(&b, "", 0) < 0)
        return NULL;
    for (int i = 0; i < n; i++) {
        const char *w = WORDS[bench_rng_next(r) % N_WORDS];
        if ((i && sb_add(&b, " ", 1) < 0) || sb_add(&b, w, strlen(w)) < 0) {
            free(b.p);
            return NULL;
        }
    }
    return b.p;
}

static int words_for(const bench_workload *w, int tokens) {
    double n = (double)tokens / (w->tokens_per_word > 0 ? w->tokens_per_word : 1.0);
    int k = (int)lround(n);
    return k < 1 ? 1 : k;
}

static int build_prefix(bench_workload *w) {
    free(w->prefix);
    w->prefix = NULL;
    w->prefix_words = 0;
    if (w->cfg.shared_prefix_len <= 0)
        return 0;
    bench_rng r;
    bench_rng_seed(&r, w->cfg.seed ^ 0x5052454649585f31ull); /* its own stream */
    w->prefix_words = words_for(w, w->cfg.shared_prefix_len);
    w->prefix = random_words(&r, w->prefix_words);
    return w->prefix ? 0 : BRISK_ENOMEM;
}

/* ---- datasets ---- */

static int load_dataset(bench_workload *w, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return brisk_set_err(err, err_len, BRISK_EIO, "dataset %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, n_cap = 0;
    ssize_t got;
    long lineno = 0;
    int rc = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            n--;
        size_t s = 0;
        while (s < n && (line[s] == ' ' || line[s] == '\t'))
            s++;
        if (s == n)
            continue;
        cJSON *j = cJSON_ParseWithLength(line + s, n - s);
        const cJSON *p = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
        const cJSON *o = j ? cJSON_GetObjectItemCaseSensitive(j, "output_len") : NULL;
        if (j && !o)
            o = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
        if (!j || !cJSON_IsObject(j) || !cJSON_IsString(p) || !p->valuestring[0] ||
            !cJSON_IsNumber(o) || o->valuedouble < 1 || o->valuedouble > 1e7 ||
            o->valuedouble != floor(o->valuedouble)) {
            cJSON_Delete(j);
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "dataset %s line %ld: want {\"prompt\": non-empty string, "
                               "\"output_len\": integer in [1, 1e7]}",
                               path, lineno);
            break;
        }
        if (w->n_items == n_cap) {
            size_t c = n_cap ? 2 * n_cap : 64;
            bench_item *it = realloc(w->items, c * sizeof *it);
            if (!it) {
                cJSON_Delete(j);
                rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "dataset: out of memory");
                break;
            }
            w->items = it;
            n_cap = c;
        }
        char *prompt = strdup(p->valuestring);
        if (!prompt) {
            cJSON_Delete(j);
            rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "dataset: out of memory");
            break;
        }
        w->items[w->n_items].prompt = prompt;
        w->items[w->n_items].output_len = (int)o->valuedouble;
        w->n_items++;
        cJSON_Delete(j);
    }
    free(line);
    if (rc == 0 && ferror(f))
        rc = brisk_set_err(err, err_len, BRISK_EIO, "dataset %s: read error", path);
    fclose(f);
    if (rc == 0 && w->n_items == 0)
        rc = brisk_set_err(err, err_len, BRISK_EFORMAT, "dataset %s: no prompts", path);
    return rc;
}

int bench_workload_init(bench_workload *w, const bench_workload_cfg *cfg, char *err,
                        size_t err_len) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    w->tokens_per_word = 1.0;
    if (!cfg->dataset_path && (cfg->input_len < 1 || cfg->output_len < 1))
        return brisk_set_err(err, err_len, BRISK_EINVAL, "input and output lengths must be >= 1");
    if (!(cfg->range_ratio >= 0 && cfg->range_ratio < 1))
        return brisk_set_err(err, err_len, BRISK_EINVAL, "--range-ratio must be in [0, 1)");
    if (!(cfg->abort_rate >= 0 && cfg->abort_rate <= 1) ||
        !(cfg->invalid_rate >= 0 && cfg->invalid_rate <= 1) ||
        cfg->abort_rate + cfg->invalid_rate > 1 + 1e-9)
        return brisk_set_err(err, err_len, BRISK_EINVAL,
                             "--abort-rate and --invalid-rate must be in [0, 1] and sum to <= 1");
    if (cfg->extra_body) {
        cJSON *e = cJSON_Parse(cfg->extra_body);
        if (!e || !cJSON_IsObject(e)) {
            cJSON_Delete(e);
            return brisk_set_err(err, err_len, BRISK_EINVAL, "--extra-body is not a JSON object");
        }
        w->extra = e;
    }
    int rc = 0;
    if (cfg->dataset_path)
        rc = load_dataset(w, cfg->dataset_path, err, err_len);
    if (rc == 0 && build_prefix(w) < 0)
        rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory");
    if (rc < 0)
        bench_workload_free(w);
    return rc;
}

void bench_workload_free(bench_workload *w) {
    for (size_t i = 0; i < w->n_items; i++)
        free(w->items[i].prompt);
    free(w->items);
    free(w->prefix);
    cJSON_Delete(w->extra);
    memset(w, 0, sizeof *w);
}

void bench_workload_calibrate(bench_workload *w, int64_t words, int64_t tokens) {
    if (words <= 0 || tokens <= 0 || w->cfg.dataset_path)
        return;
    double tpw = (double)tokens / (double)words;
    /* A server that counts absurdly is not worth following. */
    if (tpw < 0.05 || tpw > 20)
        return;
    w->tokens_per_word = tpw;
    build_prefix(w); /* on failure the prefix is simply left out */
}

/* Adds (or replaces) every field of extra in o. */
static int merge_extra(cJSON *o, const cJSON *extra) {
    for (const cJSON *it = extra ? extra->child : NULL; it; it = it->next) {
        cJSON *dup = cJSON_Duplicate(it, 1);
        if (!dup)
            return BRISK_ENOMEM;
        if (cJSON_GetObjectItemCaseSensitive(o, it->string))
            cJSON_ReplaceItemInObjectCaseSensitive(o, it->string, dup);
        else
            cJSON_AddItemToObject(o, it->string, dup);
    }
    return 0;
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* ---- aborted and invalid requests ---- */

const char *bench_invalid_name(int kind) {
    switch (kind) {
    case BENCH_INVALID_BAD_JSON: return "bad_json";
    case BENCH_INVALID_RANGE: return "out_of_range";
    case BENCH_INVALID_MODEL: return "unknown_model";
    case BENCH_INVALID_TYPE: return "wrong_type";
    default: return "unknown";
    }
}

/* Request index's kind, abort point and invalid variant, from a random
 * stream of their own (the prompt's stream is untouched by the rates). */
static void pick_kind(const bench_workload *w, uint64_t index, bench_body *out, bench_rng *r) {
    out->kind = BENCH_REQ_NORMAL;
    if (index >= BENCH_WARMUP_INDEX)
        return;
    bench_rng_seed(r, w->cfg.seed ^ (index * 0xd1b54a32d192ed03ull + 0x4b494e44ull));
    double u = bench_rng_uniform(r);
    if (u < w->cfg.invalid_rate) {
        out->kind = BENCH_REQ_INVALID;
        out->invalid = (int)bench_rng_range(r, 0, BENCH_INVALID_N - 1);
    } else if (u < w->cfg.invalid_rate + w->cfg.abort_rate) {
        out->kind = BENCH_REQ_ABORT;
        if (bench_rng_range(r, 1, BENCH_ABORT_HEAD_ONE_IN) == 1)
            out->abort_at = -1;
        else
            out->abort_at = (int)bench_rng_range(r, 0, out->expected_out - 1);
    }
}

/* Sets o[name] = item, replacing a field of that name. Takes item. */
static int set_field(cJSON *o, const char *name, cJSON *item) {
    if (!item)
        return BRISK_ENOMEM;
    if (cJSON_GetObjectItemCaseSensitive(o, name)
            ? !cJSON_ReplaceItemInObjectCaseSensitive(o, name, item)
            : !cJSON_AddItemToObject(o, name, item)) {
        cJSON_Delete(item);
        return BRISK_ENOMEM;
    }
    return 0;
}

/* Makes a valid body invalid in the way out->invalid says; BAD_JSON is done
 * on the printed text instead. */
static int spoil_body(cJSON *o, const bench_body *out, bench_rng *r) {
    switch (out->invalid) {
    case BENCH_INVALID_RANGE:
        switch (bench_rng_range(r, 0, 2)) {
        case 0: return set_field(o, "max_tokens", cJSON_CreateNumber(0));
        case 1: return set_field(o, "top_p", cJSON_CreateNumber(1.5));
        default: return set_field(o, "temperature", cJSON_CreateNumber(-1));
        }
    case BENCH_INVALID_MODEL:
        return set_field(o, "model", cJSON_CreateString(BENCH_INVALID_MODEL_NAME));
    case BENCH_INVALID_TYPE:
        if (bench_rng_range(r, 0, 1) == 0)
            return set_field(o, "max_tokens", cJSON_CreateString("many"));
        return set_field(o, "temperature", cJSON_CreateString("warm"));
    default: return 0;
    }
}

int bench_workload_body(bench_workload *w, uint64_t index, bench_body *out) {
    memset(out, 0, sizeof *out);
    const bench_workload_cfg *c = &w->cfg;
    char *own = NULL;
    const char *prompt;
    if (w->n_items) {
        const bench_item *it = &w->items[index % w->n_items];
        prompt = it->prompt;
        out->expected_out = it->output_len;
        /* About 4 bytes a token in English BPE: only a fallback for servers
         * that send no usage. */
        out->in_estimate = (int64_t)(strlen(prompt) / 4 + 1);
    } else {
        bench_rng r;
        bench_rng_seed(&r, c->seed ^ (index * 0x9e3779b97f4a7c15ull + 0x42454e4348ull));
        int in_len = bench_sample_len(&r, c->input_len, c->range_ratio, 1);
        out->expected_out = bench_sample_len(&r, c->output_len, c->range_ratio, 1);
        out->words = words_for(w, in_len);
        own = random_words(&r, out->words);
        if (!own)
            return BRISK_ENOMEM;
        prompt = own;
        out->in_estimate = in_len;
    }
    if (w->prefix) {
        out->words += w->prefix_words;
        out->in_estimate += c->shared_prefix_len;
    }
    int rc = BRISK_ENOMEM;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        goto done;
    if (c->model && !cJSON_AddStringToObject(o, "model", c->model))
        goto done;
    if (c->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        cJSON *m;
        if (!msgs)
            goto done;
        if (w->prefix) {
            if (!(m = message("system", w->prefix)))
                goto done;
            cJSON_AddItemToArray(msgs, m);
        }
        if (!(m = message("user", prompt)))
            goto done;
        cJSON_AddItemToArray(msgs, m);
    } else if (w->prefix) {
        sbuf b = {0};
        if (sb_add(&b, w->prefix, strlen(w->prefix)) < 0 || sb_add(&b, " ", 1) < 0 ||
            sb_add(&b, prompt, strlen(prompt)) < 0) {
            free(b.p);
            goto done;
        }
        cJSON *s = cJSON_AddStringToObject(o, "prompt", b.p);
        free(b.p);
        if (!s)
            goto done;
    } else if (!cJSON_AddStringToObject(o, "prompt", prompt)) {
        goto done;
    }
    if (!cJSON_AddNumberToObject(o, "max_tokens", out->expected_out) ||
        !cJSON_AddNumberToObject(o, "temperature", c->temperature) ||
        !cJSON_AddBoolToObject(o, "stream", 1))
        goto done;
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    if (!so || !cJSON_AddBoolToObject(so, "include_usage", 1))
        goto done;
    if (c->ignore_eos && !cJSON_AddBoolToObject(o, "ignore_eos", 1))
        goto done;
    if (merge_extra(o, w->extra) < 0)
        goto done;
    bench_rng kr;
    pick_kind(w, index, out, &kr);
    if (out->kind == BENCH_REQ_INVALID && spoil_body(o, out, &kr) < 0)
        goto done;
    out->json = cJSON_PrintUnformatted(o);
    if (out->json) {
        out->len = strlen(out->json);
        rc = 0;
        /* Any proper prefix of a JSON object is not JSON: it never closes. */
        if (out->kind == BENCH_REQ_INVALID && out->invalid == BENCH_INVALID_BAD_JSON &&
            out->len > 1) {
            out->len = (size_t)bench_rng_range(&kr, 1, (int64_t)out->len - 1);
            out->json[out->len] = '\0';
        }
    }
done:
    cJSON_Delete(o);
    free(own);
    return rc;
}
