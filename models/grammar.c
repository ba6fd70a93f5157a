/* grammar.c - GBNF text into the compiled form of grammar_internal.h, and
 * the built-in JSON and choice grammars (see grammar.h).
 *
 * A recursive-descent parser builds rules as lists of alternatives, each a
 * growable run of elements; groups and the operand of a postfix operator
 * become rules of their own, so an operator always applies to one element:
 *   x*     ->  R ::= x R |          (right recursion: matchers do not grow)
 *   x+     ->  x R
 *   x?     ->  R ::= x |
 *   x{m,n} ->  m copies of x, then n - m nested optional rules (x{m,}: then R)
 * Then the rules are flattened, every referenced rule must be defined, and
 * left recursion (a rule reaching itself before any character) is refused. */
#include "models/grammar_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"

#define ERR(code, ...) brisk_set_err(b->err, b->err_len, code, __VA_ARGS__)

model_grammar_limits model_grammar_limits_default(void) {
    model_grammar_limits l = {.max_text = 64 * 1024,
                              .max_rules = 4096,
                              .max_elements = 1 << 18,
                              .max_nesting = 64,
                              .max_repeat = 1000,
                              .max_stacks = 4096,
                              .max_work = MODEL_GRAMMAR_MAX_WORK};
    return l;
}

/* ---- builder ---------------------------------------------------------------- */

typedef struct bseq { /* one alternative being built */
    gelem *e;
    size_t n, cap;
} bseq;

typedef struct brule {
    char *name; /* NULL for a synthetic rule */
    size_t name_len;
    int defined;
    bseq *alts;
    size_t n_alts, cap_alts;
} brule;

typedef struct builder {
    const char *s, *end, *start; /* the text */
    const model_grammar_limits *lim;
    char *err;
    size_t err_len;
    brule *rules;
    size_t n_rules, cap_rules;
    grange *ranges;
    size_t n_ranges, cap_ranges;
    gset *sets;
    size_t n_sets, cap_sets;
    long n_elems; /* across every alternative */
    int depth;
} builder;

static int b_rule_new(builder *b, const char *name, size_t len) {
    if ((long)b->n_rules >= b->lim->max_rules)
        return ERR(BRISK_EINVAL, "grammar: more than %d rules (repetitions count)",
                   b->lim->max_rules);
    if (brisk_grow(&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules, 16, 0) < 0)
        return BRISK_ENOMEM;
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        if (!(r->name = brisk_malloc(len + 1)))
            return BRISK_ENOMEM;
        memcpy(r->name, name, len);
        r->name[len] = '\0';
        r->name_len = len;
    }
    return (int)b->n_rules++;
}

/* The id of a named rule, made on first sight. */
static int b_rule_id(builder *b, const char *name, size_t len) {
    for (size_t i = 0; i < b->n_rules; i++)
        if (b->rules[i].name && b->rules[i].name_len == len && !memcmp(b->rules[i].name, name, len))
            return (int)i;
    return b_rule_new(b, name, len);
}

static int b_push(builder *b, bseq *q, uint8_t type, int32_t arg) {
    if (++b->n_elems > b->lim->max_elements)
        return ERR(BRISK_EINVAL, "grammar: more than %d elements after expanding repetitions",
                   b->lim->max_elements);
    if (brisk_grow(&q->e, &q->cap, q->n + 1, sizeof *q->e, 8, 0) < 0)
        return BRISK_ENOMEM;
    q->e[q->n++] = (gelem){type, arg};
    return 0;
}

/* Adds alternative q (taken over) to rule r. */
static int b_add_alt(builder *b, int r, bseq *q) {
    brule *ru = &b->rules[r];
    if (brisk_grow(&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof *ru->alts, 2, 0) < 0)
        return BRISK_ENOMEM;
    ru->alts[ru->n_alts++] = *q;
    memset(q, 0, sizeof *q);
    return 0;
}

/* A set of one range (a literal character when lo == hi). */
static int b_set(builder *b, const grange *rg, int n, int negated) {
    if (brisk_grow(&b->ranges, &b->cap_ranges, b->n_ranges + (size_t)n, sizeof *b->ranges, 64, 0) <
            0 ||
        brisk_grow(&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets, 64, 0) < 0)
        return BRISK_ENOMEM;
    if (n > 0) /* '.' has no range (rg NULL) */
        memcpy(b->ranges + b->n_ranges, rg, (size_t)n * sizeof *rg);
    b->sets[b->n_sets] = (gset){(int32_t)b->n_ranges, n, (uint8_t)negated};
    b->n_ranges += (size_t)n;
    return (int)b->n_sets++;
}

/* ---- lexing ------------------------------------------------------------------- */

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips spaces, tabs, comments and (when newlines) line breaks. */
static void skip_space(builder *b, int newlines) {
    while (b->s < b->end) {
        char c = *b->s;
        if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
            b->s++;
        } else if (c == '#') {
            while (b->s < b->end && *b->s != '\n' && *b->s != '\r')
                b->s++;
        } else {
            break;
        }
    }
}

/* One UTF-8 code point of the text; 0 with an error for bad UTF-8. */
static int next_cp(builder *b, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)b->s;
    size_t left = (size_t)(b->end - b->s);
    if (left == 0)
        return ERR(BRISK_EINVAL, "grammar: unexpected end of text");
    unsigned c = p[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || (size_t)n > left)
        return ERR(BRISK_EINVAL, "grammar: invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return ERR(BRISK_EINVAL, "grammar: invalid UTF-8");
        v = v << 6 | (p[i] & 0x3Fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return ERR(BRISK_EINVAL, "grammar: invalid UTF-8");
    b->s += n;
    *cp = v;
    return 0;
}

static int hex_digits(builder *b, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (b->s >= b->end)
            return ERR(BRISK_EINVAL, "grammar: short escape");
        char c = *b->s++;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return ERR(BRISK_EINVAL, "grammar: bad hex digit in an escape");
        v = v << 4 | (uint32_t)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return ERR(BRISK_EINVAL, "grammar: escape U+%X is not a character", (unsigned)v);
    *out = v;
    return 0;
}

/* A character of a literal or class, escapes decoded. */
/* A byte of the grammar text for an error message: itself when printable
 * ASCII, else <0xHH> (a message is one line of valid UTF-8). */
static const char *show_byte(char c, char buf[8]) {
    unsigned char u = (unsigned char)c;
    if (u >= 0x20 && u < 0x7f)
        snprintf(buf, 8, "%c", c);
    else
        snprintf(buf, 8, "<0x%02X>", u);
    return buf;
}

static int parse_char(builder *b, uint32_t *cp) {
    *cp = 0;
    if (b->s < b->end && *b->s == '\\') {
        b->s++;
        if (b->s >= b->end)
            return ERR(BRISK_EINVAL, "grammar: unterminated escape");
        char e = *b->s++;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'x': return hex_digits(b, 2, cp);
        case 'u': return hex_digits(b, 4, cp);
        case 'U': return hex_digits(b, 8, cp);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^': *cp = (uint32_t)e; return 0;
        default: {
            char shown[8];
            return ERR(BRISK_EINVAL, "grammar: unknown escape '\\%s'", show_byte(e, shown));
        }
        }
    }
    return next_cp(b, cp);
}

/* ---- parsing --------------------------------------------------------------------- */

static int parse_alternatives(builder *b, int rule, int nested);

/* Rewrites the last element of q by the postfix operator at b->s. */
static int apply_postfix(builder *b, bseq *q) {
    char op = *b->s;
    long m = 0, n = -1; /* {m,n}; n -1: no upper bound */
    b->s++;
    if (op == '*') {
        m = 0;
    } else if (op == '+') {
        m = 1;
    } else if (op == '?') {
        m = 0;
        n = 1;
    } else { /* '{' */
        skip_space(b, 0);
        for (; b->s < b->end && *b->s >= '0' && *b->s <= '9'; b->s++)
            if ((m = m * 10 + (*b->s - '0')) > b->lim->max_repeat)
                return ERR(BRISK_EINVAL, "grammar: a repetition count is above %d",
                           b->lim->max_repeat);
        skip_space(b, 0);
        n = m;
        if (b->s < b->end && *b->s == ',') {
            b->s++;
            skip_space(b, 0);
            if (b->s < b->end && *b->s >= '0' && *b->s <= '9') {
                n = 0;
                for (; b->s < b->end && *b->s >= '0' && *b->s <= '9'; b->s++)
                    if ((n = n * 10 + (*b->s - '0')) > b->lim->max_repeat)
                        return ERR(BRISK_EINVAL, "grammar: a repetition count is above %d",
                                   b->lim->max_repeat);
            } else {
                n = -1;
            }
            skip_space(b, 0);
        }
        if (b->s >= b->end || *b->s != '}')
            return ERR(BRISK_EINVAL, "grammar: expected '}' after a repetition count");
        b->s++;
        if (n >= 0 && n < m)
            return ERR(BRISK_EINVAL, "grammar: repetition {%ld,%ld} has max below min", m, n);
    }
    gelem u = q->e[--q->n]; /* the operand */
    b->n_elems--;
    int rc;
    for (long i = 0; i < m; i++)
        if ((rc = b_push(b, q, u.type, u.arg)) < 0)
            return rc;
    if (n < 0) { /* R ::= u R | (empty) */
        int r = b_rule_new(b, NULL, 0);
        if (r < 0)
            return r;
        bseq a = {0}, e = {0};
        if ((rc = b_push(b, &a, u.type, u.arg)) < 0 || (rc = b_push(b, &a, GE_RULE, r)) < 0 ||
            (rc = b_add_alt(b, r, &a)) < 0 || (rc = b_add_alt(b, r, &e)) < 0) {
            free(a.e);
            return rc;
        }
        return b_push(b, q, GE_RULE, r);
    }
    /* n - m optional copies, nested: R1 ::= u | ; Rk ::= u R(k-1) | */
    int prev = -1;
    for (long k = 0; k < n - m; k++) {
        int r = b_rule_new(b, NULL, 0);
        if (r < 0)
            return r;
        bseq a = {0}, e = {0};
        if ((rc = b_push(b, &a, u.type, u.arg)) < 0 ||
            (prev >= 0 && (rc = b_push(b, &a, GE_RULE, prev)) < 0) ||
            (rc = b_add_alt(b, r, &a)) < 0 || (rc = b_add_alt(b, r, &e)) < 0) {
            free(a.e);
            return rc;
        }
        prev = r;
    }
    return prev >= 0 ? b_push(b, q, GE_RULE, prev) : 0;
}

/* [...] after the '['. */
static int parse_class(builder *b, bseq *q) {
    int negated = 0, rc;
    if (b->s < b->end && *b->s == '^') {
        negated = 1;
        b->s++;
    }
    grange rg[256];
    int n = 0;
    for (;;) {
        if (b->s >= b->end)
            return ERR(BRISK_EINVAL, "grammar: unterminated character class");
        if (*b->s == ']') {
            b->s++;
            break;
        }
        uint32_t lo = 0, hi = 0;
        if ((rc = parse_char(b, &lo)) < 0)
            return rc;
        hi = lo;
        if (b->end - b->s >= 2 && b->s[0] == '-' && b->s[1] != ']') {
            b->s++;
            if ((rc = parse_char(b, &hi)) < 0)
                return rc;
            if (hi < lo)
                return ERR(BRISK_EINVAL, "grammar: character range %X-%X is backwards",
                           (unsigned)lo, (unsigned)hi);
        }
        if (n == (int)(sizeof rg / sizeof rg[0]))
            return ERR(BRISK_EINVAL, "grammar: more than 256 ranges in a character class");
        rg[n++] = (grange){lo, hi};
    }
    int set = b_set(b, rg, n, negated);
    return set < 0 ? set : b_push(b, q, GE_SET, set);
}

/* One alternative: elements up to '|', ')' or the end of the rule's line. */
static int parse_sequence(builder *b, bseq *q, int nested) {
    int rc;
    for (;;) {
        skip_space(b, nested);
        if (b->s >= b->end)
            return 0;
        char c = *b->s;
        size_t start = q->n;
        if (c == '"') {
            b->s++;
            while (b->s < b->end && *b->s != '"') {
                uint32_t cp;
                if ((rc = parse_char(b, &cp)) < 0)
                    return rc;
                grange one = {cp, cp};
                int set = b_set(b, &one, 1, 0);
                if (set < 0 || (rc = b_push(b, q, GE_SET, set)) < 0)
                    return set < 0 ? set : rc;
            }
            if (b->s >= b->end)
                return ERR(BRISK_EINVAL, "grammar: unterminated string literal");
            b->s++;
        } else if (c == '[') {
            b->s++;
            if ((rc = parse_class(b, q)) < 0)
                return rc;
        } else if (c == '.') {
            b->s++;
            int set = b_set(b, NULL, 0, 1);
            if (set < 0 || (rc = b_push(b, q, GE_SET, set)) < 0)
                return set < 0 ? set : rc;
        } else if (c == '(') {
            b->s++;
            if (++b->depth > b->lim->max_nesting)
                return ERR(BRISK_EINVAL, "grammar: groups nest deeper than %d",
                           b->lim->max_nesting);
            int r = b_rule_new(b, NULL, 0);
            if (r < 0 || (rc = parse_alternatives(b, r, 1)) < 0)
                return r < 0 ? r : rc;
            skip_space(b, 1);
            if (b->s >= b->end || *b->s != ')')
                return ERR(BRISK_EINVAL, "grammar: expected ')'");
            b->s++;
            b->depth--;
            if ((rc = b_push(b, q, GE_RULE, r)) < 0)
                return rc;
        } else if (is_word(c)) {
            const char *w = b->s;
            while (b->s < b->end && is_word(*b->s))
                b->s++;
            /* "name ::=" starts the next rule: this sequence ends before it */
            const char *save = b->s;
            skip_space(b, 0);
            if (b->end - b->s >= 3 && !memcmp(b->s, "::=", 3)) {
                b->s = w;
                return 0;
            }
            b->s = save;
            int r = b_rule_id(b, w, (size_t)(save - w));
            if (r < 0 || (rc = b_push(b, q, GE_RULE, r)) < 0)
                return r < 0 ? r : rc;
        } else {
            return 0; /* '|', ')', a newline or something the caller judges */
        }
        skip_space(b, nested);
        /* A postfix operator applies to the element just parsed; a literal
         * of several characters becomes a rule first. */
        if (b->s < b->end && (*b->s == '*' || *b->s == '+' || *b->s == '?' || *b->s == '{')) {
            if (q->n == start) /* an empty literal "" */
                return ERR(BRISK_EINVAL, "grammar: '%c' follows an empty literal", *b->s);
            if (q->n - start > 1) {
                int r = b_rule_new(b, NULL, 0);
                if (r < 0)
                    return r;
                bseq a = {0};
                for (size_t i = start; i < q->n; i++)
                    if ((rc = b_push(b, &a, q->e[i].type, q->e[i].arg)) < 0) {
                        free(a.e);
                        return rc;
                    }
                b->n_elems -= (long)(q->n - start);
                q->n = start;
                if ((rc = b_add_alt(b, r, &a)) < 0 || (rc = b_push(b, q, GE_RULE, r)) < 0) {
                    free(a.e);
                    return rc;
                }
            }
            if ((rc = apply_postfix(b, q)) < 0)
                return rc;
        }
    }
}

static int parse_alternatives(builder *b, int rule, int nested) {
    for (;;) {
        bseq q = {0};
        int rc = parse_sequence(b, &q, nested);
        if (rc == 0)
            rc = b_add_alt(b, rule, &q);
        if (rc < 0) {
            free(q.e);
            return rc;
        }
        skip_space(b, nested);
        const char *save = b->s;
        if (!nested) /* an alternative may also start a following line with '|' */
            skip_space(b, 1);
        if (b->s < b->end && *b->s == '|') {
            b->s++;
            skip_space(b, 1);
            continue;
        }
        b->s = save;
        return 0;
    }
}

static int parse_rules(builder *b) {
    int rc;
    for (;;) {
        skip_space(b, 1);
        if (b->s >= b->end)
            return 0;
        const char *w = b->s;
        while (b->s < b->end && is_word(*b->s))
            b->s++;
        if (b->s == w)
            return ERR(BRISK_EINVAL, "grammar: expected a rule name at byte %ld",
                       (long)(w - b->start));
        size_t len = (size_t)(b->s - w);
        skip_space(b, 0);
        if (b->end - b->s < 3 || memcmp(b->s, "::=", 3))
            return ERR(BRISK_EINVAL, "grammar: expected '::=' after rule '%.*s'",
                       (int)(len > 40 ? 40 : len), w);
        b->s += 3;
        int r = b_rule_id(b, w, len);
        if (r < 0)
            return r;
        if (b->rules[r].defined)
            return ERR(BRISK_EINVAL, "grammar: rule '%.*s' is defined twice",
                       (int)(len > 40 ? 40 : len), w);
        b->rules[r].defined = 1;
        if ((rc = parse_alternatives(b, r, 0)) < 0)
            return rc;
        skip_space(b, 0);
        if (b->s < b->end && *b->s != '\n' && *b->s != '\r') {
            char shown[8];
            return ERR(BRISK_EINVAL, "grammar: unexpected '%s' in rule '%.*s'",
                       show_byte(*b->s, shown), (int)(len > 40 ? 40 : len), w);
        }
    }
}

/* ---- checks and flattening ---------------------------------------------------- */

/* Left recursion: rule r reaching itself through references at positions
 * where everything before can be empty. nullable[] first, by fixpoint; then
 * each rule's "first" references; then a depth-first search for a cycle. */
static int check_left_recursion(builder *b) {
    size_t n = b->n_rules, n_edges = 0;
    uint8_t *nullable = calloc(n ? n : 1, 1), *state = calloc(n ? n : 1, 1);
    int32_t *first = malloc((n + 1) * sizeof *first), *edges = NULL, *path = NULL, *cursor = NULL;
    int rc = nullable && state && first ? 0 : BRISK_ENOMEM;
    for (int changed = 1; rc == 0 && changed;) {
        changed = 0;
        for (size_t r = 0; r < n; r++) {
            for (size_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const bseq *q = &b->rules[r].alts[a];
                size_t i = 0;
                while (i < q->n && q->e[i].type == GE_RULE && nullable[q->e[i].arg])
                    i++;
                if (i == q->n)
                    nullable[r] = changed = 1;
            }
        }
    }
    for (size_t r = 0; rc == 0 && r < n; r++)
        for (size_t a = 0; a < b->rules[r].n_alts; a++)
            for (size_t i = 0; i < b->rules[r].alts[a].n; i++) {
                const gelem *e = &b->rules[r].alts[a].e[i];
                if (e->type != GE_RULE)
                    break;
                n_edges++;
                if (!nullable[e->arg])
                    break;
            }
    if (rc == 0) {
        edges = malloc((n_edges ? n_edges : 1) * sizeof *edges);
        path = malloc((n ? n : 1) * sizeof *path);
        cursor = malloc((n ? n : 1) * sizeof *cursor);
        rc = edges && path && cursor ? 0 : BRISK_ENOMEM;
    }
    size_t k = 0;
    for (size_t r = 0; rc == 0 && r < n; r++) {
        first[r] = (int32_t)k;
        for (size_t a = 0; a < b->rules[r].n_alts; a++)
            for (size_t i = 0; i < b->rules[r].alts[a].n; i++) {
                const gelem *e = &b->rules[r].alts[a].e[i];
                if (e->type != GE_RULE)
                    break;
                edges[k++] = e->arg;
                if (!nullable[e->arg])
                    break;
            }
    }
    if (rc == 0)
        first[n] = (int32_t)k;
    for (size_t root = 0; rc == 0 && root < n; root++) {
        if (state[root])
            continue;
        size_t top = 0;
        path[top] = (int32_t)root;
        cursor[top++] = first[root];
        state[root] = 1;
        while (top > 0 && rc == 0) {
            int32_t r = path[top - 1];
            if (cursor[top - 1] == first[r + 1]) {
                state[r] = 2;
                top--;
                continue;
            }
            int32_t s = edges[cursor[top - 1]++];
            if (state[s] == 1) {
                const char *nm = b->rules[s].name;
                rc = ERR(BRISK_EINVAL, "grammar: rule '%.40s' is left-recursive",
                         nm ? nm : "(a group or repetition)");
            } else if (state[s] == 0) {
                state[s] = 1;
                path[top] = s;
                cursor[top++] = first[s];
            }
        }
    }
    free(nullable);
    free(state);
    free(first);
    free(edges);
    free(path);
    free(cursor);
    return rc;
}

static int flatten(builder *b, model_grammar *g) {
    size_t n_alts = 0;
    long n_elems = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (size_t a = 0; a < b->rules[r].n_alts; a++)
            n_elems += (long)b->rules[r].alts[a].n + 1;
    }
    g->elems = brisk_malloc((size_t)n_elems * sizeof *g->elems);
    g->alt_start = brisk_malloc((n_alts ? n_alts : 1) * sizeof *g->alt_start);
    g->rule_alt = brisk_malloc((b->n_rules + 1) * sizeof *g->rule_alt);
    if (!g->elems || !g->alt_start || !g->rule_alt)
        return BRISK_ENOMEM;
    int e = 0, k = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = k;
        for (size_t a = 0; a < b->rules[r].n_alts; a++) {
            const bseq *q = &b->rules[r].alts[a];
            g->alt_start[k++] = e;
            if (q->n) /* an empty alternative has no array */
                memcpy(g->elems + e, q->e, q->n * sizeof *q->e);
            e += (int)q->n;
            g->elems[e++] = (gelem){GE_END, 0};
        }
    }
    g->rule_alt[b->n_rules] = k;
    g->n_elems = e;
    g->n_alts = k;
    g->n_rules = (int)b->n_rules;
    g->ranges = b->ranges;
    g->n_ranges = (int)b->n_ranges;
    g->sets = b->sets;
    g->n_sets = (int)b->n_sets;
    b->ranges = NULL;
    b->sets = NULL;
    return 0;
}

static void builder_free(builder *b) {
    for (size_t r = 0; r < b->n_rules; r++) {
        free(b->rules[r].name);
        for (size_t a = 0; a < b->rules[r].n_alts; a++)
            free(b->rules[r].alts[a].e);
        free(b->rules[r].alts);
    }
    free(b->rules);
    free(b->ranges);
    free(b->sets);
}

int model_grammar_compile(const char *text, size_t len, const model_grammar_limits *lim,
                          model_grammar **out, char *err, size_t err_len) {
    model_grammar_limits dl = model_grammar_limits_default();
    builder bb = {0}, *b = &bb;
    b->lim = lim ? lim : &dl;
    b->err = err;
    b->err_len = err_len;
    *out = NULL;
    if (!text)
        return ERR(BRISK_EINVAL, "grammar: no text");
    if (len > b->lim->max_text)
        return ERR(BRISK_EINVAL, "grammar: %zu bytes, more than %zu", len, b->lim->max_text);
    b->s = b->start = text;
    b->end = text + len;
    int rc = parse_rules(b);
    int root = -1;
    for (size_t r = 0; rc == 0 && r < b->n_rules; r++) {
        if (b->rules[r].name && !b->rules[r].defined)
            rc = ERR(BRISK_EINVAL, "grammar: rule '%.40s' is used but not defined",
                     b->rules[r].name);
        if (b->rules[r].name && !strcmp(b->rules[r].name, "root"))
            root = (int)r;
    }
    if (rc == 0 && root < 0)
        rc = ERR(BRISK_EINVAL, "grammar: no 'root' rule");
    if (rc == 0)
        rc = check_left_recursion(b);
    model_grammar *g = NULL;
    if (rc == 0 && !(g = brisk_calloc(1, sizeof *g)))
        rc = BRISK_ENOMEM;
    if (rc == 0 && (rc = flatten(b, g)) == 0) {
        atomic_init(&g->refs, 1);
        pthread_mutex_init(&g->mu, NULL);
        pthread_mutex_init(&g->dfa_mu, NULL);
        g->root = root;
        *out = g;
    } else if (g) {
        atomic_init(&g->refs, 1);
        pthread_mutex_init(&g->mu, NULL);
        pthread_mutex_init(&g->dfa_mu, NULL);
        model_grammar_unref(g);
    }
    if (rc == BRISK_ENOMEM)
        brisk_set_err(err, err_len, rc, "grammar: out of memory");
    builder_free(b);
    return rc;
}

model_grammar *model_grammar_ref(model_grammar *g) {
    if (g)
        atomic_fetch_add(&g->refs, 1);
    return g;
}

void model_grammar_unref(model_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    gmask_cache_free(g->cache);
    gdfa_free(g->dfa);
    gci_cache_free(g->ci);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->dfa_mu);
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->ranges);
    free(g->sets);
    free(g);
}

int model_grammar_n_rules(const model_grammar *g) {
    return g->n_rules;
}

/* ---- built-in grammars ---------------------------------------------------------- */

/* JSON (RFC 8259). Whitespace between tokens is bounded (at most one
 * newline and a few spaces) so a model cannot pad forever. */
static const char JSON_GBNF[] =
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* "
    ")? "
    "\"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} "
    ") )* "
    "\"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? "
    "[0-9]{1,3} )?\n"
    "ws ::= [ \\t]{0,8} ( \"\\n\" [ \\t]{0,16} )?\n";

char *model_grammar_json_text(int object_only) {
    /* Nothing after the value: the answer ends at its last character (a
     * model given trailing whitespace pads it until max_tokens). */
    const char *root = object_only ? "root ::= ws object\n" : "root ::= ws value\n";
    size_t a = strlen(root), n = sizeof JSON_GBNF - 1;
    char *t = brisk_malloc(a + n + 1);
    if (t) {
        memcpy(t, root, a);
        memcpy(t + a, JSON_GBNF, n + 1);
    }
    return t;
}

char *model_grammar_choice_text(const char *const *choices, const size_t *lens, int n) {
    size_t cap = 16;
    for (int i = 0; i < n; i++)
        cap += 4 * lens[i] + 8; /* every byte may need an escape (\xHH) */
    char *t = brisk_malloc(cap), *p = t;
    if (!t)
        return NULL;
    p += sprintf(p, "root ::= ");
    for (int i = 0; i < n; i++) {
        if (i)
            p += sprintf(p, " | ");
        *p++ = '"';
        for (size_t k = 0; k < lens[i]; k++) {
            unsigned char c = (unsigned char)choices[i][k];
            if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f)
                p += sprintf(p, "\\x%02X", c);
            else
                *p++ = (char)c;
        }
        *p++ = '"';
    }
    *p++ = '\n';
    *p = '\0';
    return t;
}
