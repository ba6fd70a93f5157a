/* tok_pretok.c - pre-tokenizer split rules, written out by hand.
 *
 * Byte-level BPE never merges across the words a regular expression cuts the
 * text into. The expressions are fixed per model family, so instead of a
 * regex engine each is a small hand-written matcher over code points. They
 * follow the leftmost-first alternation of the original expressions: at each
 * position the first alternative that matches wins, and the next word starts
 * where it ended.
 *
 * A matcher works on a segment [ini, end) of the decoded text and may not
 * look past it: positions outside read as "no character" (flags 0), which is
 * what makes the SmolLM two-pass rule (digits first, then GPT-2 on the rest)
 * behave like a second expression applied to each piece of the first. */
#include <stdlib.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/tok_internal.h"
#include "models/tok_unicode.h"

/* Set for every character inside the segment, so that a character with no
 * class (punctuation, symbols, invalid bytes) differs from "outside". */
#define CP_IN 8
#define NO_CP 0xFFFFFFFFu

typedef struct split {
    const uint32_t *cp;  /* code point per character (TOK_CP_INVALID for a bad byte) */
    const uint8_t *fl;   /* tok_cp_flags | CP_IN per character */
    const uint32_t *off; /* byte offset of each character; off[n] = text length */
    size_t ini, end;     /* the segment being split */
    size_t prev;         /* end of the last word emitted */
    uint32_t **spans;
    size_t *n_spans, *cap_spans;
    int rc;
} split;

static uint32_t cp_at(const split *s, size_t i) {
    return i >= s->ini && i < s->end ? s->cp[i] : NO_CP;
}
static int fl_at(const split *s, size_t i) {
    return i >= s->ini && i < s->end ? s->fl[i] : 0;
}

/* Ends the current word at character index e (no-op for an empty word). */
static void emit(split *s, size_t e) {
    if (e <= s->prev)
        return;
    /* Two uint32 (start, end) per span: the element is the pair. */
    if (brisk_grow_libc(s->spans, s->cap_spans, *s->n_spans + 1, 2 * sizeof **s->spans, 64, 0) <
        0) {
        s->rc = BRISK_ENOMEM;
        s->prev = e;
        return;
    }
    uint32_t *w = *s->spans + 2 * *s->n_spans;
    w[0] = s->off[s->prev];
    w[1] = s->off[e] - s->off[s->prev];
    (*s->n_spans)++;
    s->prev = e;
}

/* Length of the contraction ('s 't 're 've 'm 'll 'd) at i, or 0. With
 * fold, case-insensitively as (?i:...) does: ASCII letters, and U+017F
 * (long s), which simple case folding also maps to 's'. */
static uint32_t fold_ascii(uint32_t c) {
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if (c == 0x17F)
        return 's';
    return c;
}

static size_t contraction(const split *s, size_t i, int fold) {
    if (cp_at(s, i) != '\'')
        return 0;
    uint32_t a = cp_at(s, i + 1), b = cp_at(s, i + 2);
    if (fold) {
        a = fold_ascii(a);
        b = fold_ascii(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

static int is_other(int f) {
    return (f & CP_IN) && !(f & (TOK_CP_LETTER | TOK_CP_NUMBER | TOK_CP_SPACE));
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(split *s) {
    size_t i = s->ini;
    while (i < s->end) {
        size_t c = contraction(s, i, 0);
        if (c) {
            i += c;
            emit(s, i);
            continue;
        }
        /* The optional leading space belongs to the class of what follows. */
        size_t j = i + (cp_at(s, i) == ' ');
        int f = fl_at(s, j);
        if (f & TOK_CP_LETTER) {
            while (fl_at(s, j) & TOK_CP_LETTER)
                j++;
            emit(s, i = j);
            continue;
        }
        if (f & TOK_CP_NUMBER) {
            while (fl_at(s, j) & TOK_CP_NUMBER)
                j++;
            emit(s, i = j);
            continue;
        }
        if (is_other(f)) {
            while (is_other(fl_at(s, j)))
                j++;
            emit(s, i = j);
            continue;
        }
        /* Whitespace: \s+(?!\S) backs off one character when the run is
         * followed by a non-space, leaving that space to start the next
         * word; a run of one before a non-space is taken by \s+. */
        size_t n = 0;
        while (fl_at(s, i + n) & TOK_CP_SPACE)
            n++;
        if (n > 1 && cp_at(s, i + n) != NO_CP) {
            emit(s, i += n - 1);
            continue;
        }
        if (n > 0) {
            emit(s, i += n);
            continue;
        }
        emit(s, ++i); /* unreachable with the classes above; keeps progress */
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with D = 3 (Llama-3) or 1 (Qwen2). */
static void split_llama3(split *s, size_t max_digits) {
    size_t i = s->ini;
    while (i < s->end) {
        uint32_t c0 = cp_at(s, i);
        int f0 = fl_at(s, i);
        size_t c = contraction(s, i, 1);
        if (c) {
            i += c;
            emit(s, i);
            continue;
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (c0 != '\r' && c0 != '\n' && !(f0 & TOK_CP_NUMBER) &&
            ((f0 & TOK_CP_LETTER) || (fl_at(s, i + 1) & TOK_CP_LETTER))) {
            i++;
            while (fl_at(s, i) & TOK_CP_LETTER)
                i++;
            emit(s, i);
            continue;
        }
        /* \p{N}{1,D}: a run of digits becomes words of D, the last shorter. */
        if (f0 & TOK_CP_NUMBER) {
            size_t start = i;
            while (fl_at(s, i) & TOK_CP_NUMBER) {
                i++;
                if (i - start == max_digits) {
                    emit(s, i);
                    start = i;
                }
            }
            emit(s, i);
            continue;
        }
        /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
        size_t j = i + (c0 == ' ');
        if (is_other(fl_at(s, j))) {
            while (is_other(fl_at(s, j)))
                j++;
            while (cp_at(s, j) == '\r' || cp_at(s, j) == '\n')
                j++;
            emit(s, i = j);
            continue;
        }
        /* Whitespace run; \s*[\r\n]+ takes it up to its last line break. */
        size_t n = 0, last_nl = 0;
        while (fl_at(s, i + n) & TOK_CP_SPACE) {
            uint32_t cn = cp_at(s, i + n);
            n++;
            if (cn == '\r' || cn == '\n')
                last_nl = n;
        }
        if (last_nl) {
            emit(s, i += last_nl);
            continue;
        }
        if (n > 1 && cp_at(s, i + n) != NO_CP) {
            emit(s, i += n - 1);
            continue;
        }
        if (n > 0) {
            emit(s, i += n);
            continue;
        }
        emit(s, ++i);
    }
}

/* SmolLM (and StarCoder): \p{N} first, each digit its own word; then the
 * GPT-2 rules on each stretch between digits, which therefore never see a
 * digit and cannot attach a space to one. */
static void split_smollm(split *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && !(s->fl[i] & TOK_CP_NUMBER))
            continue;
        if (i > run) {
            s->ini = run;
            s->end = i;
            split_gpt2(s);
        }
        if (i < n) {
            s->ini = i;
            s->end = i + 1;
            emit(s, i + 1);
        }
        run = i + 1;
    }
}

int tok_pretok_split(tok_pre_kind kind, const char *text, size_t len, uint32_t **spans,
                     size_t *n_spans, size_t *cap_spans) {
    if (len == 0)
        return 0;
    /* One allocation for the three per-character arrays; a character is at
     * least one byte, so len + 1 entries always suffice. */
    size_t cap = len + 1;
    void *mem = malloc(cap * (2 * sizeof(uint32_t) + 1));
    if (!mem)
        return BRISK_ENOMEM;
    uint32_t *cp = mem;
    uint32_t *off = cp + cap;
    uint8_t *fl = (uint8_t *)(off + cap);
    const unsigned char *u = (const unsigned char *)text;
    size_t n = 0;
    for (size_t p = 0; p < len;) {
        uint32_t c;
        int l = tok_utf8_next(u + p, len - p, &c);
        cp[n] = c;
        off[n] = (uint32_t)p;
        fl[n] = (uint8_t)(tok_cp_flags(c) | CP_IN);
        n++;
        p += (size_t)l;
    }
    off[n] = (uint32_t)len;

    split s = {cp, fl, off, 0, n, 0, spans, n_spans, cap_spans, 0};
    switch (kind) {
    case TOK_PRE_LLAMA3: split_llama3(&s, 3); break;
    case TOK_PRE_QWEN2: split_llama3(&s, 1); break;
    case TOK_PRE_SMOLLM: split_smollm(&s, n); break;
    case TOK_PRE_GPT2:
    default: split_gpt2(&s); break;
    }
    free(mem);
    return s.rc;
}
