/* grammar_regex.c - a regular expression into GBNF (see grammar.h,
 * model_grammar_regex_text and model_grammar_regex_expr): vLLM's
 * guided_regex and structured_outputs regex, and JSON Schema's pattern. The
 * whole string must match (anchors ^ and $ at the ends are accepted and
 * change nothing).
 *
 * Supported: literals and escapes (\n \r \t \f \v \0 \xHH \uHHHH and any
 * escaped punctuation), . (any character but a newline), classes [...] with
 * ranges, negation and the escapes above, \d \w \s and (outside classes)
 * \D \W \S, groups ( ), (?: ) and named (?P<n> ) / (?<n> ), alternation |,
 * and the quantifiers * + ? {m} {m,} {m,n}, lazy or not (the same language).
 * Refused with an error naming the construct: backreferences, lookarounds,
 * \b \B \A \Z, inline flags, possessive quantifiers, \D \W \S inside a
 * class, anchors anywhere but the ends, and an unbounded repetition of
 * something that can match the empty string.
 *
 * In JSON-string mode (JSON Schema's pattern) the grammar writes each
 * matched character as it appears between the quotes of a JSON string:
 * '"', '\' and the control characters as escapes, so the JSON text stays
 * valid whatever the pattern matches. Every character set is therefore
 * kept as a list of ranges until it is written. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "models/grammar.h"

#define RX_MAX_DEPTH 64
#define RX_MAX_TEXT (60 * 1024)
#define RX_MAX_RANGES 200 /* per class: the GBNF compiler takes 256, escapes add a few */
#define RX_INF (1L << 40) /* a length "without bound": past any count the grammar allows */

typedef struct rx {
    const char *s, *end, *start;
    char *out;
    size_t n, cap;
    int depth;
    int json;     /* JSON-string mode */
    long cap_rep; /* > 0: unbounded repetitions stop at max(m, cap_rep) */
    char *err;
    size_t err_len;
} rx;

/* The lengths (in characters) of the strings an expression matches. */
typedef struct rxlen {
    long lo, hi; /* hi RX_INF: no bound */
} rxlen;

/* A character set: ranges of code points, negated or not. */
typedef struct rxset {
    unsigned lo[RX_MAX_RANGES], hi[RX_MAX_RANGES];
    int n, negated;
} rxset;

static int rx_fail(rx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int rx_fail(rx *r, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    brisk_set_err(r->err, r->err_len, BRISK_EINVAL, "regex: %s at byte %ld", msg,
                  (long)(r->s - r->start));
    return BRISK_EINVAL;
}

static int put(rx *r, const char *t, size_t n) {
    if (r->n + n + 1 > RX_MAX_TEXT)
        return rx_fail(r, "the grammar grows past %d bytes", RX_MAX_TEXT);
    if (brisk_grow(&r->out, &r->cap, r->n + n + 1, 1, 256, 0) < 0)
        return BRISK_ENOMEM;
    memcpy(r->out + r->n, t, n);
    r->n += n;
    r->out[r->n] = '\0';
    return 0;
}

static int puts_(rx *r, const char *t) {
    return put(r, t, strlen(t));
}

/* Saturating arithmetic on lengths: RX_INF stays RX_INF. */
static long len_add(long a, long b) {
    return a >= RX_INF || b >= RX_INF || a + b >= RX_INF ? RX_INF : a + b;
}

static long len_mul(long a, long k) {
    if (a == 0 || k == 0)
        return 0;
    return a >= RX_INF || k >= RX_INF || a > RX_INF / k ? RX_INF : a * k;
}

/* A code point as a GBNF escape (inside a literal or a class). */
static int put_cp(rx *r, unsigned cp) {
    char b[16];
    if (cp < 0x80 && cp >= 0x20 && cp != '"' && cp != '\\' && cp != ']' && cp != '[' && cp != '-' &&
        cp != '^' && cp != 0x7f) {
        b[0] = (char)cp;
        return put(r, b, 1);
    }
    snprintf(b, sizeof b, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
    return puts_(r, b);
}

/* The characters a JSON string cannot hold as themselves: '"', '\' and the
 * controls U+0000-U+001F. */
static int json_special(unsigned cp) {
    return cp < 0x20 || cp == '"' || cp == '\\';
}

/* The GBNF literal of the JSON escape of special character cp. */
static int put_json_escape(rx *r, unsigned cp) {
    static const char short_esc[][2] = {{'"', '"'},  {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'},
                                        {'\n', 'n'}, {'\r', 'r'},  {'\t', 't'}};
    char b[24];
    for (size_t i = 0; i < sizeof short_esc / sizeof *short_esc; i++)
        if ((unsigned char)short_esc[i][0] == cp) {
            /* GBNF "\\" is one backslash; a quote or backslash after it is escaped too */
            snprintf(b, sizeof b, "\"\\\\%s%c\"", cp == '"' || cp == '\\' ? "\\" : "",
                     short_esc[i][1]);
            return puts_(r, b);
        }
    snprintf(b, sizeof b, "\"\\\\u%04X\"", cp);
    return puts_(r, b);
}

/* One literal character. */
static int put_char(rx *r, unsigned cp) {
    if (r->json && json_special(cp))
        return put_json_escape(r, cp);
    int rc = puts_(r, "\"");
    rc = rc ? rc : put_cp(r, cp);
    return rc ? rc : puts_(r, "\"");
}

static int set_add(rx *r, rxset *cs, unsigned lo, unsigned hi) {
    if (cs->n == RX_MAX_RANGES)
        return rx_fail(r, "a class of more than %d ranges", RX_MAX_RANGES);
    cs->lo[cs->n] = lo;
    cs->hi[cs->n] = hi;
    cs->n++;
    return 0;
}

static int set_has(const rxset *cs, unsigned cp) {
    int in = 0;
    for (int i = 0; i < cs->n && !in; i++)
        in = cp >= cs->lo[i] && cp <= cs->hi[i];
    return in != cs->negated;
}

static int put_ranges(rx *r, const rxset *cs, int negated) {
    int rc = puts_(r, negated ? "[^" : "[");
    for (int i = 0; i < cs->n && rc == 0; i++) {
        rc = put_cp(r, cs->lo[i]);
        if (rc == 0 && cs->hi[i] != cs->lo[i])
            rc = puts_(r, "-");
        if (rc == 0 && cs->hi[i] != cs->lo[i])
            rc = put_cp(r, cs->hi[i]);
    }
    return rc ? rc : puts_(r, "]");
}

/* A character set as GBNF. In JSON-string mode: the set without the special
 * characters as a class, or'ed with the escape of each special character in
 * the set. */
static int put_set(rx *r, const rxset *cs) {
    if (!r->json)
        return put_ranges(r, cs, cs->negated);
    rxset plain = {.n = 0, .negated = cs->negated};
    int rc = 0;
    for (int i = 0; i < cs->n && rc == 0; i++) {
        if (cs->negated) { /* the specials join the excluded ranges below */
            rc = set_add(r, &plain, cs->lo[i], cs->hi[i]);
            continue;
        }
        /* cut the range around U+0000-U+001F, '"' (0x22) and '\' (0x5C) */
        unsigned lo = cs->lo[i] < 0x20 ? 0x20 : cs->lo[i], hi = cs->hi[i];
        static const unsigned cut[] = {0x22, 0x5C};
        for (size_t k = 0; k < 2 && lo <= hi && rc == 0; k++)
            if (cut[k] >= lo && cut[k] <= hi) {
                if (cut[k] > lo)
                    rc = set_add(r, &plain, lo, cut[k] - 1);
                lo = cut[k] + 1;
            }
        if (rc == 0 && lo <= hi)
            rc = set_add(r, &plain, lo, hi);
    }
    if (rc == 0 && cs->negated) {
        rc = set_add(r, &plain, 0, 0x1F);
        rc = rc ? rc : set_add(r, &plain, '"', '"');
        rc = rc ? rc : set_add(r, &plain, '\\', '\\');
    }
    if (rc)
        return rc;
    int alts = 0;
    rc = puts_(r, "(");
    if (rc == 0 && (plain.n > 0 || plain.negated)) {
        rc = puts_(r, " ");
        rc = rc ? rc : put_ranges(r, &plain, plain.negated);
        alts++;
    }
    for (unsigned cp = 0; cp <= '\\' && rc == 0; cp++)
        if (json_special(cp) && set_has(cs, cp)) {
            rc = puts_(r, alts++ ? " | " : " ");
            rc = rc ? rc : put_json_escape(r, cp);
        }
    if (rc == 0 && alts == 0)
        return rx_fail(r, "a class that matches no character");
    return rc ? rc : puts_(r, " )");
}

static int hexn(rx *r, int n, unsigned *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (r->s >= r->end)
            return rx_fail(r, "short escape");
        char c = *r->s++;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return rx_fail(r, "bad hex digit");
        *v = *v << 4 | (unsigned)d;
    }
    if (*v > 0x10FFFF || (*v >= 0xD800 && *v <= 0xDFFF))
        return rx_fail(r, "escape is not a character");
    return 0;
}

/* One UTF-8 character of the pattern. */
static int next_cp(rx *r, unsigned *cp) {
    const unsigned char *p = (const unsigned char *)r->s;
    unsigned c = p[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || r->end - r->s < n)
        return rx_fail(r, "invalid UTF-8");
    unsigned v = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return rx_fail(r, "invalid UTF-8");
        v = v << 6 | (p[i] & 0x3Fu);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return rx_fail(r, "invalid UTF-8");
    r->s += n;
    *cp = v;
    return 0;
}

/* The ranges of a shorthand class (\d \w \s), added to cs. */
static int add_shorthand(rx *r, rxset *cs, char c) {
    static const unsigned d[] = {'0', '9'};
    static const unsigned w[] = {'a', 'z', 'A', 'Z', '0', '9', '_', '_'};
    static const unsigned s[] = {' ', ' ', '\t', '\r'}; /* \t \n \v \f \r */
    const unsigned *t = c == 'd' ? d : c == 'w' ? w : s;
    size_t n = c == 'd' ? 2 : c == 'w' ? 8 : 4;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += 2)
        rc = set_add(r, cs, t[i], t[i + 1]);
    return rc;
}

/* \D \W \S outside a class. Their complements hold every character but the
 * ASCII digits, word characters or spaces; engines that check JSON Schema
 * patterns (ECMA-262, Python's re on str, Rust's regex) read \d \w \s as
 * Unicode classes, so in JSON-string mode the complements keep to ASCII,
 * where every engine agrees (a subset of what each takes). */
static int negated_shorthand(rx *r, rxset *cs, char c) {
    if (!r->json) {
        cs->negated = 1;
        return add_shorthand(r, cs, c);
    }
    static const unsigned D[] = {0x00, 0x2F, 0x3A, 0x7F};
    static const unsigned W[] = {0x00, 0x2F, 0x3A, 0x40, 0x5B, 0x5E, 0x60, 0x60, 0x7B, 0x7F};
    static const unsigned S[] = {0x21, 0x7E};
    const unsigned *t = c == 'd' ? D : c == 'w' ? W : S;
    size_t n = c == 'd' ? 4 : c == 'w' ? 10 : 2;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += 2)
        rc = set_add(r, cs, t[i], t[i + 1]);
    return rc;
}

/* An escape after '\' (outside or inside a class): a single code point in
 * *cp, or a shorthand (*sh set to d, w or s; *negated for D, W, S). */
static int escape(rx *r, unsigned *cp, char *sh, int *negated) {
    *sh = 0;
    *negated = 0;
    if (r->s >= r->end)
        return rx_fail(r, "a trailing backslash");
    char e = *r->s++;
    switch (e) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexn(r, 2, cp);
    case 'u': return hexn(r, 4, cp);
    case 'd':
    case 'w':
    case 's': *sh = e; return 0;
    case 'D':
    case 'W':
    case 'S':
        *sh = (char)(e + ('a' - 'A'));
        *negated = 1;
        return 0;
    default:
        if ((e >= '1' && e <= '9') || e == 'k')
            return rx_fail(r, "backreferences are not supported");
        if (strchr("bBAZzG", e))
            return rx_fail(r, "'\\%c' is not supported", e);
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_fail(r, "unknown escape '\\%c'", e);
        r->s--;
        return next_cp(r, cp);
    }
}

static int parse_alt(rx *r, rxlen *len);

static int parse_class(rx *r) {
    rxset cs = {.n = 0, .negated = 0};
    int rc = 0;
    if (r->s < r->end && *r->s == '^') {
        r->s++;
        cs.negated = 1;
    }
    int first = 1;
    while (rc == 0) {
        if (r->s >= r->end)
            return rx_fail(r, "unterminated class");
        if (*r->s == ']' && !first) {
            r->s++;
            break;
        }
        first = 0;
        unsigned lo;
        char sh = 0;
        int neg = 0;
        if (*r->s == '\\') {
            r->s++;
            if ((rc = escape(r, &lo, &sh, &neg)) < 0)
                return rc;
            if (neg)
                return rx_fail(r, "a negated shorthand inside a class is not supported");
            if (sh) {
                rc = add_shorthand(r, &cs, sh);
                continue;
            }
        } else if (*r->s == '[' && r->end - r->s > 1 && r->s[1] == ':') {
            return rx_fail(r, "POSIX classes are not supported");
        } else if ((rc = next_cp(r, &lo)) < 0) {
            return rc;
        }
        unsigned hi = lo;
        if (r->end - r->s >= 2 && r->s[0] == '-' && r->s[1] != ']') {
            r->s++;
            if (*r->s == '\\') {
                r->s++;
                if ((rc = escape(r, &hi, &sh, &neg)) < 0)
                    return rc;
                if (sh)
                    return rx_fail(r, "a range ending in a shorthand");
            } else if ((rc = next_cp(r, &hi)) < 0) {
                return rc;
            }
            if (hi < lo)
                return rx_fail(r, "a backwards range");
        }
        rc = set_add(r, &cs, lo, hi);
    }
    return rc ? rc : put_set(r, &cs);
}

/* A quantifier after an atom, if any: *len is the atom's lengths on entry,
 * the quantified atom's on return. An unbounded repetition of an atom that
 * can match the empty string ((a|)*, (a*)+) is refused: as a grammar it
 * would be left-recursive, and it matches what the atom without its empty
 * match repeated does. */
static int parse_quant(rx *r, rxlen *len) {
    if (r->s >= r->end)
        return 0;
    char c = *r->s;
    long m, n; /* n -1: unbounded */
    const char *after;
    if (c == '*' || c == '+' || c == '?') {
        m = c == '+' ? 1 : 0;
        n = c == '?' ? 1 : -1;
        after = r->s + 1;
    } else if (c == '{') {
        const char *p = r->s + 1;
        int digits = 0;
        m = 0;
        for (; p < r->end && *p >= '0' && *p <= '9'; p++, digits++)
            if ((m = m * 10 + (*p - '0')) > 1000)
                return rx_fail(r, "a repetition count above 1000");
        if (!digits) /* a literal '{' */
            return 0;
        n = m;
        if (p < r->end && *p == ',') {
            p++;
            n = -1;
            if (p < r->end && *p >= '0' && *p <= '9') {
                n = 0;
                for (; p < r->end && *p >= '0' && *p <= '9'; p++)
                    if ((n = n * 10 + (*p - '0')) > 1000)
                        return rx_fail(r, "a repetition count above 1000");
            }
        }
        if (p >= r->end || *p != '}')
            return 0; /* a literal '{' */
        if (n >= 0 && n < m)
            return rx_fail(r, "repetition {%ld,%ld} has max below min", m, n);
        after = p + 1;
    } else {
        return 0;
    }
    if (n < 0 && len->lo == 0)
        return rx_fail(r, "a repetition of something that can match the empty string");
    if (n < 0 && r->cap_rep > 0) /* the caller asked for bounded repetitions */
        n = m > r->cap_rep ? m : r->cap_rep;
    r->s = after;
    char b[48];
    if (n < 0 && m <= 1)
        snprintf(b, sizeof b, "%s", m ? "+" : "*");
    else if (n < 0)
        snprintf(b, sizeof b, "{%ld,}", m);
    else if (m == 0 && n == 1)
        snprintf(b, sizeof b, "?");
    else
        snprintf(b, sizeof b, "{%ld,%ld}", m, n);
    int rc = puts_(r, b);
    len->hi = n < 0 ? (len->hi > 0 ? RX_INF : 0) : len_mul(len->hi, n);
    len->lo = len_mul(len->lo, m);
    if (rc == 0 && r->s < r->end && *r->s == '?')
        r->s++; /* lazy: the same language */
    if (rc == 0 && r->s < r->end && (*r->s == '+' || *r->s == '*' || *r->s == '{'))
        return rx_fail(r, "a quantifier follows a quantifier");
    return rc;
}

/* One atom of a sequence at r->s; *len its lengths. *skip: it was an anchor
 * (nothing written, no quantifier). */
static int parse_atom(rx *r, rxlen *len, int *skip) {
    char c = *r->s;
    int rc;
    *len = (rxlen){1, 1};
    *skip = 0;
    if (c == '(') {
        r->s++;
        if (++r->depth > RX_MAX_DEPTH)
            return rx_fail(r, "groups nest deeper than %d", RX_MAX_DEPTH);
        if (r->s < r->end && *r->s == '?') {
            r->s++;
            if (r->s < r->end && *r->s == ':') {
                r->s++;
            } else if (r->s < r->end && (*r->s == 'P' || *r->s == '<') &&
                       !(r->end - r->s > 1 && *r->s == '<' && (r->s[1] == '=' || r->s[1] == '!'))) {
                r->s += *r->s == 'P' ? 1 : 0;
                if (r->s >= r->end || *r->s != '<')
                    return rx_fail(r, "'(?P' must name a group");
                while (r->s < r->end && *r->s != '>')
                    r->s++;
                if (r->s >= r->end)
                    return rx_fail(r, "unterminated group name");
                r->s++;
            } else {
                return rx_fail(r, "lookarounds and inline flags are not supported");
            }
        }
        if ((rc = parse_alt(r, len)) < 0)
            return rc;
        if (r->s >= r->end || *r->s != ')')
            return rx_fail(r, "expected ')'");
        r->s++;
        r->depth--;
        return 0;
    }
    if (c == '[') {
        r->s++;
        return parse_class(r);
    }
    if (c == '.') {
        /* JSON Schema's patterns are ECMA-262's: '.' takes no line
         * terminator (\n \r U+2028 U+2029); Python's re only excludes \n */
        rxset cs = {.n = 0, .negated = 1};
        r->s++;
        rc = set_add(r, &cs, '\n', '\n');
        if (r->json && rc == 0)
            rc = set_add(r, &cs, '\r', '\r');
        if (r->json && rc == 0)
            rc = set_add(r, &cs, 0x2028, 0x2029);
        return rc ? rc : put_set(r, &cs);
    }
    if (c == '\\') {
        r->s++;
        unsigned cp;
        char sh;
        int neg;
        if ((rc = escape(r, &cp, &sh, &neg)) < 0)
            return rc;
        if (!sh)
            return put_char(r, cp);
        rxset cs = {.n = 0, .negated = 0};
        rc = neg ? negated_shorthand(r, &cs, sh) : add_shorthand(r, &cs, sh);
        return rc ? rc : put_set(r, &cs);
    }
    if (c == '^' || c == '$') {
        /* accepted only as the first / last character of the pattern */
        if ((c == '^' && r->s != r->start) || (c == '$' && r->s + 1 != r->end))
            return rx_fail(r, "'%c' inside the pattern is not supported", c);
        r->s++;
        *len = (rxlen){0, 0};
        *skip = 1;
        return 0;
    }
    if (c == '*' || c == '+' || c == '?')
        return rx_fail(r, "'%c' follows nothing", c);
    unsigned cp;
    if ((rc = next_cp(r, &cp)) < 0)
        return rc;
    return put_char(r, cp);
}

static int parse_seq(rx *r, rxlen *len) {
    int rc = puts_(r, "(");
    *len = (rxlen){0, 0};
    while (rc == 0 && r->s < r->end && *r->s != '|' && *r->s != ')') {
        rxlen a;
        int skip;
        if ((rc = puts_(r, " ")) < 0 || (rc = parse_atom(r, &a, &skip)) < 0)
            return rc;
        if (!skip)
            rc = parse_quant(r, &a);
        len->lo = len_add(len->lo, a.lo);
        len->hi = len_add(len->hi, a.hi);
    }
    return rc ? rc : puts_(r, " )");
}

static int parse_alt(rx *r, rxlen *len) {
    int rc = puts_(r, "(");
    for (int first = 1; rc == 0; first = 0) {
        if (!first)
            rc = puts_(r, " |");
        rxlen s = {0, 0};
        rc = rc ? rc : parse_seq(r, &s);
        if (first || s.lo < len->lo)
            len->lo = s.lo;
        if (first || s.hi > len->hi)
            len->hi = s.hi;
        if (rc || r->s >= r->end || *r->s != '|')
            break;
        r->s++;
    }
    return rc ? rc : puts_(r, " )");
}

int model_grammar_regex_expr(const char *re, size_t len, const model_regex_opts *o, char **out,
                             long *min_len, long *max_len, char *err, size_t err_len) {
    rx r = {.s = re,
            .end = re + len,
            .start = re,
            .json = o && o->json_string,
            .cap_rep = o && o->cap_unbounded > 0 ? o->cap_unbounded : 0,
            .err = err,
            .err_len = err_len};
    *out = NULL;
    rxlen l = {0, 0};
    int rc = parse_alt(&r, &l);
    if (rc == 0 && r.s < r.end)
        rc = rx_fail(&r, "unbalanced ')'");
    if (rc == BRISK_ENOMEM)
        brisk_set_err(err, err_len, rc, "regex: out of memory");
    if (rc < 0) {
        free(r.out);
        return rc;
    }
    if (min_len)
        *min_len = l.lo >= RX_INF ? -1 : l.lo;
    if (max_len)
        *max_len = l.hi >= RX_INF ? -1 : l.hi;
    *out = r.out;
    return 0;
}

int model_grammar_regex_text(const char *re, size_t len, char **out, char *err, size_t err_len) {
    char *expr = NULL;
    *out = NULL;
    int rc = model_grammar_regex_expr(re, len, NULL, &expr, NULL, NULL, err, err_len);
    if (rc < 0)
        return rc;
    size_t n = strlen(expr) + 16;
    char *t = brisk_malloc(n);
    if (!t) {
        free(expr);
        brisk_set_err(err, err_len, BRISK_ENOMEM, "regex: out of memory");
        return BRISK_ENOMEM;
    }
    snprintf(t, n, "root ::= %s\n", expr);
    free(expr);
    *out = t;
    return 0;
}
