/* grammar_regex.c - a regular expression into GBNF (see grammar.h,
 * model_grammar_regex_text): vLLM's guided_regex and structured_outputs
 * regex. The whole output must match (anchors ^ and $ at the ends are
 * accepted and change nothing).
 *
 * Supported: literals and escapes (\n \r \t \f \v \0 \xHH \uHHHH and any
 * escaped punctuation), . (any character but a newline), classes [...] with
 * ranges, negation and the escapes above, \d \w \s and (outside classes)
 * \D \W \S, groups ( ), (?: ) and named (?P<n> ) / (?<n> ), alternation |,
 * and the quantifiers * + ? {m} {m,} {m,n}, lazy or not (the same language).
 * Refused with an error naming the construct: backreferences, lookarounds,
 * \b \B \A \Z, inline flags, possessive quantifiers, \D \W \S inside a
 * class, anchors anywhere but the ends, and an unbounded repetition of
 * something that can match the empty string. */
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

typedef struct rx {
    const char *s, *end, *start;
    char *out;
    size_t n, cap;
    int depth;
    char *err;
    size_t err_len;
} rx;

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

/* Classes of the shorthand escapes, as GBNF class bodies. */
static const char *shorthand(char c) {
    switch (c) {
    case 'd': return "0-9";
    case 'w': return "a-zA-Z0-9_";
    case 's': return " \\t\\n\\r\\x0C\\x0B";
    default: return NULL;
    }
}

/* An escape after '\' (outside or inside a class): a single code point in
 * *cp, or a shorthand (*cls set). */
static int escape(rx *r, unsigned *cp, const char **cls, int *negated) {
    *cls = NULL;
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
    case 's': *cls = shorthand(e); return 0;
    case 'D':
    case 'W':
    case 'S':
        *cls = shorthand((char)(e + ('a' - 'A')));
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

static int parse_alt(rx *r, int *nullable);

static int parse_class(rx *r) {
    int rc = puts_(r, "[");
    if (r->s < r->end && *r->s == '^') {
        r->s++;
        rc = rc ? rc : puts_(r, "^");
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
        const char *cls = NULL;
        int neg = 0;
        if (*r->s == '\\') {
            r->s++;
            if ((rc = escape(r, &lo, &cls, &neg)) < 0)
                return rc;
            if (neg)
                return rx_fail(r, "a negated shorthand inside a class is not supported");
            if (cls) {
                rc = puts_(r, cls);
                continue;
            }
        } else if (*r->s == '[' && r->end - r->s > 1 && r->s[1] == ':') {
            return rx_fail(r, "POSIX classes are not supported");
        } else if ((rc = next_cp(r, &lo)) < 0) {
            return rc;
        }
        if ((rc = put_cp(r, lo)) < 0)
            return rc;
        if (r->end - r->s >= 2 && r->s[0] == '-' && r->s[1] != ']') {
            r->s++;
            unsigned hi;
            if (*r->s == '\\') {
                r->s++;
                if ((rc = escape(r, &hi, &cls, &neg)) < 0)
                    return rc;
                if (cls)
                    return rx_fail(r, "a range ending in a shorthand");
            } else if ((rc = next_cp(r, &hi)) < 0) {
                return rc;
            }
            if (hi < lo)
                return rx_fail(r, "a backwards range");
            rc = puts_(r, "-");
            rc = rc ? rc : put_cp(r, hi);
        }
    }
    return rc ? rc : puts_(r, "]");
}

/* A quantifier after an atom, if any. nullable: whether the atom can match
 * the empty string; *after: whether it can with the quantifier. An
 * unbounded repetition of such an atom ((a|)*, (a*)+) is refused: as a
 * grammar it would be left-recursive, and it matches what the atom without
 * its empty match repeated does. */
static int parse_quant(rx *r, int nullable, int *after) {
    *after = nullable;
    if (r->s >= r->end)
        return 0;
    char c = *r->s;
    int rc = 0, unbounded = 0;
    if (c == '*' || c == '+' || c == '?') {
        unbounded = c != '?';
        *after = c == '+' ? nullable : 1;
        if (unbounded && nullable)
            return rx_fail(r, "a repetition of something that can match the empty string");
        r->s++;
        char b[2] = {c, 0};
        rc = puts_(r, b);
    } else if (c == '{') {
        const char *p = r->s + 1;
        long m = 0, n = -1;
        int digits = 0;
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
        unbounded = n < 0;
        *after = m == 0 ? 1 : nullable;
        if (unbounded && nullable)
            return rx_fail(r, "a repetition of something that can match the empty string");
        r->s = p + 1;
        char b[48];
        if (n < 0)
            snprintf(b, sizeof b, "{%ld,}", m);
        else
            snprintf(b, sizeof b, "{%ld,%ld}", m, n);
        rc = puts_(r, b);
    } else {
        return 0;
    }
    if (rc == 0 && r->s < r->end && *r->s == '?')
        r->s++; /* lazy: the same language */
    if (rc == 0 && r->s < r->end && (*r->s == '+' || *r->s == '*' || *r->s == '{'))
        return rx_fail(r, "a quantifier follows a quantifier");
    return rc;
}

static int parse_seq(rx *r, int *nullable) {
    int rc = puts_(r, "(");
    int any = 0, atom_null = 0;
    *nullable = 1;
    while (rc == 0 && r->s < r->end && *r->s != '|' && *r->s != ')') {
        char c = *r->s;
        rc = puts_(r, " ");
        if (rc)
            break;
        any = 1;
        if (c == '(') {
            r->s++;
            if (++r->depth > RX_MAX_DEPTH)
                return rx_fail(r, "groups nest deeper than %d", RX_MAX_DEPTH);
            if (r->s < r->end && *r->s == '?') {
                r->s++;
                if (r->s < r->end && *r->s == ':') {
                    r->s++;
                } else if (r->s < r->end && (*r->s == 'P' || *r->s == '<') &&
                           !(r->end - r->s > 1 && *r->s == '<' &&
                             (r->s[1] == '=' || r->s[1] == '!'))) {
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
            if ((rc = parse_alt(r, &atom_null)) < 0)
                return rc;
            if (r->s >= r->end || *r->s != ')')
                return rx_fail(r, "expected ')'");
            r->s++;
            r->depth--;
        } else if (c == '[') {
            r->s++;
            rc = parse_class(r);
        } else if (c == '.') {
            r->s++;
            rc = puts_(r, "[^\\n]");
        } else if (c == '\\') {
            r->s++;
            unsigned cp;
            const char *cls;
            int neg;
            if ((rc = escape(r, &cp, &cls, &neg)) < 0)
                return rc;
            if (cls) {
                rc = puts_(r, neg ? "[^" : "[");
                rc = rc ? rc : puts_(r, cls);
                rc = rc ? rc : puts_(r, "]");
            } else {
                rc = puts_(r, "\"");
                rc = rc ? rc : put_cp(r, cp);
                rc = rc ? rc : puts_(r, "\"");
            }
        } else if (c == '^' || c == '$') {
            /* accepted only as the first / last character of the pattern */
            if ((c == '^' && r->s != r->start) || (c == '$' && r->s + 1 != r->end))
                return rx_fail(r, "'%c' inside the pattern is not supported", c);
            r->s++;
            continue;
        } else if (c == '*' || c == '+' || c == '?') {
            return rx_fail(r, "'%c' follows nothing", c);
        } else {
            unsigned cp;
            if ((rc = next_cp(r, &cp)) < 0)
                return rc;
            rc = puts_(r, "\"");
            rc = rc ? rc : put_cp(r, cp);
            rc = rc ? rc : puts_(r, "\"");
        }
        if (rc == 0) {
            int after = 0;
            rc = parse_quant(r, c == '(' ? atom_null : 0, &after);
            *nullable &= after;
        }
    }
    (void)any;
    return rc ? rc : puts_(r, " )");
}

static int parse_alt(rx *r, int *nullable) {
    int rc = puts_(r, "(");
    *nullable = 0;
    for (int first = 1; rc == 0; first = 0) {
        if (!first)
            rc = puts_(r, " |");
        int seq_null = 0;
        rc = rc ? rc : parse_seq(r, &seq_null);
        *nullable |= seq_null;
        if (rc || r->s >= r->end || *r->s != '|')
            break;
        r->s++;
    }
    return rc ? rc : puts_(r, " )");
}

int model_grammar_regex_text(const char *re, size_t len, char **out, char *err, size_t err_len) {
    rx r = {.s = re, .end = re + len, .start = re, .err = err, .err_len = err_len};
    *out = NULL;
    int rc = puts_(&r, "root ::= "), nullable = 0;
    rc = rc ? rc : parse_alt(&r, &nullable);
    if (rc == 0 && r.s < r.end)
        rc = rx_fail(&r, "unbalanced ')'");
    rc = rc ? rc : puts_(&r, "\n");
    if (rc == BRISK_ENOMEM)
        brisk_set_err(err, err_len, rc, "regex: out of memory");
    if (rc < 0) {
        free(r.out);
        return rc;
    }
    *out = r.out;
    return 0;
}
