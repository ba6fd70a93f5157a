/* seq_text.c - detokenized output with stop strings (see seq_text.h). */
#include "scheduler/seq_text.h"

#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"

int seq_text_init(seq_text *t, const tok_vocab *v, const char *const *stop, int n_stop,
                  int continuation) {
    memset(t, 0, sizeof *t);
    tok_decoder_init(&t->dec, v, continuation ? TOK_CONTINUATION : 0);
    t->stop = stop;
    t->n_stop = n_stop;
    t->stop_which = -1;
    if (n_stop > 0) {
        t->stop_len = brisk_malloc((size_t)n_stop * sizeof *t->stop_len);
        if (!t->stop_len)
            return BRISK_ENOMEM;
        for (int i = 0; i < n_stop; i++)
            t->stop_len[i] = strlen(stop[i]);
    }
    return 0;
}

void seq_text_free(seq_text *t) {
    free(t->pend);
    free(t->stop_len);
    memset(t, 0, sizeof *t);
}

static int reserve(seq_text *t, size_t extra) {
    return brisk_grow(&t->pend, &t->cap, t->len + extra + 1, 1, 256, 0);
}

/* First position where a stop string occurs in pend, or -1; *which gets the
 * index of that string. Matches cannot start before pend (everything taken
 * earlier was outside any possible match), so the search covers pend alone. */
static long find_stop(const seq_text *t, size_t *match_len, int *which) {
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        size_t n = t->stop_len[i];
        if (n == 0 || n > t->len)
            continue;
        for (size_t p = 0; p + n <= t->len; p++) {
            if (best >= 0 && (long)p >= best)
                break;
            if (memcmp(t->pend + p, t->stop[i], n) == 0) {
                best = (long)p;
                *match_len = n;
                *which = i;
                break;
            }
        }
    }
    return best;
}

int seq_text_push(seq_text *t, int32_t id) {
    if (t->stopped)
        return 1;
    size_t max = tok_decoder_max_out(t->dec.v);
    if (reserve(t, max) < 0)
        return BRISK_ENOMEM;
    int n = tok_decoder_push(&t->dec, id, t->pend + t->len, t->cap - t->len - 1);
    if (n < 0)
        return n == BRISK_ENOMEM ? n : 0; /* an id the vocab can't print adds nothing */
    t->len += (size_t)n;
    t->pend[t->len] = '\0';
    size_t match_len = 0;
    int which = -1;
    long at = t->n_stop && !t->stops_off ? find_stop(t, &match_len, &which) : -1;
    if (at >= 0) {
        t->len = (size_t)at + (t->keep_stop ? match_len : 0);
        t->pend[t->len] = '\0';
        t->stopped = 1;
        t->stop_which = which;
        return 1;
    }
    return 0;
}

/* Bytes at the end of pend that begin some stop string (longest such). */
static size_t held_back(const seq_text *t) {
    size_t hold = 0;
    if (t->stops_off)
        return 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t n = t->stop_len[i];
        size_t k = n - 1 < t->len ? n - 1 : t->len;
        for (; k > hold; k--)
            if (memcmp(t->pend + t->len - k, t->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

int seq_text_take(seq_text *t, int final, char **out, size_t *len) {
    if (final && !t->stopped) {
        char tail[8];
        int n = tok_decoder_flush(&t->dec, tail, sizeof tail);
        if (n > 0) {
            if (reserve(t, (size_t)n) < 0)
                return BRISK_ENOMEM;
            memcpy(t->pend + t->len, tail, (size_t)n);
            t->len += (size_t)n;
        }
    }
    size_t take = t->len;
    if (!final && !t->stopped)
        take -= held_back(t);
    char *s = brisk_malloc(take + 1);
    if (!s)
        return BRISK_ENOMEM;
    if (take)
        memcpy(s, t->pend, take);
    s[take] = '\0';
    if (t->len > take)
        memmove(t->pend, t->pend + take, t->len - take);
    t->len -= take;
    *out = s;
    *len = take;
    return 0;
}
