/* srv_schema_num.c - integers and numbers with minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (draft 6 numbers, or draft 4 booleans
 * beside minimum/maximum) and multipleOf (see srv_schema.h).
 *
 * A range becomes a grammar of the digits themselves: [lo, hi] splits by
 * sign, by number of digits, and at the first digit where the bounds part
 * (the usual construction of a regular expression for a numeric range), so
 * every integer of the range and nothing else can be written. Numbers are
 * written as decimals (no exponent) with at most SN_FRAC fraction digits:
 * their integer part is such a range and their fraction is bounded the same
 * way at the two ends.
 *
 * Bounds arrive as doubles (cJSON), and validators compare either exactly
 * (Python compares an integer output with the bound exactly) or as doubles
 * (a fraction is parsed into a double). A bound is therefore read as the
 * decimal that its double is: an integral double exactly, another as its
 * shortest round-trip form, which every decimal at or beyond it rounds to a
 * double at or beyond it. Where this cannot be exact the grammar is
 * tightened, never widened: an exclusive bound becomes the next double past
 * it; a bound of 2^53 or more (where the double may not be the integer the
 * client wrote) moves one double inwards; a bound finer than SN_FRAC
 * decimals is rounded inwards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "server/api/srv_schema_internal.h"

#define SN_INT_DIGITS 16 /* integer digits where no bound asks more: as ji and jn */
/* Multiples stay below 2^53 (15 digits): a validator given a multipleOf of
 * 5.0 divides the value as a double, exact only there. */
#define SN_MULT_DIGITS 15
#define SN_MAX_DIGITS 40              /* the most integer digits a bound may ask */
#define SN_FRAC 16                    /* fraction digits at most, as jn */
#define SN_MAX_LIST 256               /* multiples written out one by one */
#define SN_MAX_DFA 40                 /* the largest multipleOf taken by a remainder automaton */
#define SN_EXACT (9007199254740992.0) /* 2^53: every integer below is a double */

/* A signed decimal with SN_FRAC fraction digits. */
typedef struct sdec {
    int neg;
    char ip[SN_MAX_DIGITS + 2]; /* integer digits, no leading zero, "0" for zero */
    char fp[SN_FRAC + 1];       /* SN_FRAC digits, padded with zeros */
} sdec;

/* ---- decimals ---------------------------------------------------------------- */

static int all_of(const char *s, size_t n, char ch) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch)
            return 0;
    return 1;
}

/* Adds one to the digit string s of n digits (s has room for n + 1). */
static void digits_inc(char *s) {
    size_t n = strlen(s);
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '9') {
            s[i]++;
            return;
        }
        s[i] = '0';
    }
    memmove(s + 1, s, n + 1);
    s[0] = '1';
}

/* Subtracts one from the positive integer digit string s. */
static void digits_dec(char *s) {
    size_t n = strlen(s);
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '0') {
            s[i]--;
            break;
        }
        s[i] = '9';
    }
    if (n > 1 && s[0] == '0')
        memmove(s, s + 1, n);
}

static int mag_cmp(const sdec *a, const sdec *b) {
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb)
        return la < lb ? -1 : 1;
    int k = strcmp(a->ip, b->ip);
    return k ? k : strcmp(a->fp, b->fp);
}

static int dec_cmp(const sdec *a, const sdec *b) {
    if (a->neg != b->neg)
        return a->neg ? -1 : 1;
    return a->neg ? -mag_cmp(a, b) : mag_cmp(a, b);
}

static void dec_normalize(sdec *d) {
    if (!strcmp(d->ip, "0") && all_of(d->fp, SN_FRAC, '0'))
        d->neg = 0;
}

/* The largest magnitude with n integer digits: 9...9.9...9. */
static void dec_extreme(sdec *d, int neg, int n, int with_fraction) {
    d->neg = neg;
    memset(d->ip, '9', (size_t)n);
    d->ip[n] = '\0';
    memset(d->fp, with_fraction ? '9' : '0', SN_FRAC);
    d->fp[SN_FRAC] = '\0';
}

/* The decimal that double b is (see the top): 0, or 1 when its integer part
 * has more than SN_MAX_DIGITS digits. A fraction finer than SN_FRAC digits
 * is rounded towards +infinity (up > 0) or -infinity. */
static int dec_from_double(double b, int up, sdec *d) {
    char buf[128];
    double a = fabs(b);
    memset(d, 0, sizeof *d);
    d->neg = b < 0;
    memset(d->fp, '0', SN_FRAC);
    if (!(a < 1e40)) /* 41 digits or more */
        return 1;
    if (a == floor(a)) {
        snprintf(d->ip, sizeof d->ip, "%.0f", a); /* exact: glibc prints every digit */
        dec_normalize(d);
        return 0;
    }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, a);
        if (strtod(buf, NULL) == a)
            break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, a);
    char m[24];
    int nm = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            m[nm++] = *q;
    int e = atoi(q + 1); /* digit i of m weighs 10^(e - i) */
    int ni = 0, dropped = 0;
    for (int i = 0; i <= e; i++)
        d->ip[ni++] = i < nm ? m[i] : '0';
    if (ni == 0)
        d->ip[ni++] = '0';
    d->ip[ni] = '\0';
    for (int i = e + 1 > 0 ? e + 1 : 0; i < nm; i++) {
        int j = i - e; /* fraction digit j weighs 10^-j */
        if (j <= SN_FRAC)
            d->fp[j - 1] = m[i];
        else if (m[i] != '0')
            dropped = 1;
    }
    /* rounding away from zero when the direction and the sign agree */
    if (dropped && (up > 0) != d->neg) {
        int i = SN_FRAC - 1;
        for (; i >= 0 && d->fp[i] == '9'; i--)
            d->fp[i] = '0';
        if (i >= 0)
            d->fp[i]++;
        else
            digits_inc(d->ip);
    }
    dec_normalize(d);
    return 0;
}

/* ---- digit grammars ------------------------------------------------------------ */

static int put_lit(brisk_buf *o, const char *s, size_t n) {
    if (n == 0)
        return 0;
    int rc = sch_str(o, " \"");
    rc = rc ? rc : sch_add(o, s, n);
    return rc ? rc : sch_str(o, "\"");
}

static int put_class(brisk_buf *o, char lo, char hi) {
    if (lo == hi)
        return sch_fmt(o, " \"%c\"", lo);
    return sch_fmt(o, " [%c-%c]", lo, hi);
}

/* Exactly n digits. */
static int put_digits(brisk_buf *o, size_t n) {
    return n == 0 ? 0 : n == 1 ? sch_str(o, " [0-9]") : sch_fmt(o, " [0-9]{%zu}", n);
}

/* 0 to n digits (a shared rule). */
static int put_upto(sctx *c, brisk_buf *o, size_t n) {
    if (n == 0)
        return 0;
    int rc = sch_str(o, " ");
    return rc ? rc : sch_digits_upto(c, o, (int)n, 0);
}

/* 0 to n zeros (a shared rule). */
static int put_zeros(sctx *c, brisk_buf *o, size_t n) {
    if (n == 0)
        return 0;
    int rc = sch_str(o, " ");
    return rc ? rc : sch_digits_upto(c, o, (int)n, 1);
}

/* An optional fraction of zeros after an integer part: ".0", ".00", ... */
static int put_zero_fraction(sctx *c, brisk_buf *o) {
    int rc = sch_str(o, " ( \".0\"");
    rc = rc ? rc : put_zeros(c, o, SN_FRAC - 1);
    return rc ? rc : sch_str(o, " )?");
}

/* n-digit strings >= a. */
static int g_ge(sctx *c, brisk_buf *o, const char *a, size_t n) {
    if (n == 0)
        return 0;
    if (all_of(a, n, '0'))
        return put_digits(o, n);
    int rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, a, 1);
    rc = rc ? rc : g_ge(c, o, a + 1, n - 1);
    if (rc == 0 && a[0] < '9') {
        rc = sch_str(o, " |");
        rc = rc ? rc : put_class(o, (char)(a[0] + 1), '9');
        rc = rc ? rc : put_digits(o, n - 1);
    }
    return rc ? rc : sch_str(o, " )");
}

/* n-digit strings <= b. */
static int g_le(sctx *c, brisk_buf *o, const char *b, size_t n) {
    if (n == 0)
        return 0;
    if (all_of(b, n, '9'))
        return put_digits(o, n);
    int rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, b, 1);
    rc = rc ? rc : g_le(c, o, b + 1, n - 1);
    if (rc == 0 && b[0] > '0') {
        rc = sch_str(o, " |");
        rc = rc ? rc : put_class(o, '0', (char)(b[0] - 1));
        rc = rc ? rc : put_digits(o, n - 1);
    }
    return rc ? rc : sch_str(o, " )");
}

/* n-digit strings in [a, b] (a <= b). */
static int g_same(sctx *c, brisk_buf *o, const char *a, const char *b, size_t n) {
    size_t p = 0;
    while (p < n && a[p] == b[p])
        p++;
    int rc = put_lit(o, a, p);
    if (rc || p == n)
        return rc;
    size_t rest = n - p - 1;
    if (all_of(a + p + 1, rest, '0') && all_of(b + p + 1, rest, '9')) {
        rc = put_class(o, a[p], b[p]);
        return rc ? rc : put_digits(o, rest);
    }
    rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, a + p, 1);
    rc = rc ? rc : g_ge(c, o, a + p + 1, rest);
    if (rc == 0 && a[p] + 1 <= b[p] - 1) {
        rc = sch_str(o, " |");
        rc = rc ? rc : put_class(o, (char)(a[p] + 1), (char)(b[p] - 1));
        rc = rc ? rc : put_digits(o, rest);
    }
    rc = rc ? rc : sch_str(o, " |");
    rc = rc ? rc : put_lit(o, b + p, 1);
    rc = rc ? rc : g_le(c, o, b + p + 1, rest);
    return rc ? rc : sch_str(o, " )");
}

/* The integers a..b (digit strings without leading zeros, a <= b). */
static int g_uint(sctx *c, brisk_buf *o, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la == lb)
        return g_same(c, o, a, b, la);
    char top[SN_MAX_DIGITS + 2], low[SN_MAX_DIGITS + 2];
    memset(top, '9', la);
    top[la] = '\0';
    memset(low, '0', lb);
    low[0] = '1';
    low[lb] = '\0';
    int rc = sch_str(o, " (");
    rc = rc ? rc : g_same(c, o, a, top, la);
    if (rc == 0 && lb - la >= 2) { /* every length strictly between */
        rc = sch_str(o, " | [1-9]");
        rc = rc ? rc : put_digits(o, la);
        rc = rc ? rc : put_upto(c, o, lb - la - 2);
    }
    rc = rc ? rc : sch_str(o, " |");
    rc = rc ? rc : g_same(c, o, low, b, lb);
    return rc ? rc : sch_str(o, " )");
}

/* Fractions: digit strings of 1..k digits (read with zeros after them)
 * within [a, b], both given as k digits. *_body: at least one digit; *_opt:
 * the rest of a fraction after some digits, which may be empty. */
static int f_ge_body(sctx *c, brisk_buf *o, const char *a, size_t k);
static int f_le_body(sctx *c, brisk_buf *o, const char *b, size_t k);

static int f_ge_opt(sctx *c, brisk_buf *o, const char *a, size_t k) {
    if (k == 0)
        return 0;
    if (all_of(a, k, '0'))
        return put_upto(c, o, k);
    return f_ge_body(c, o, a, k);
}

static int f_le_opt(sctx *c, brisk_buf *o, const char *b, size_t k) {
    if (k == 0)
        return 0;
    if (all_of(b, k, '0'))
        return put_zeros(c, o, k);
    int rc = sch_str(o, " (");
    rc = rc ? rc : f_le_body(c, o, b, k);
    return rc ? rc : sch_str(o, " )?");
}

/* 1..k digits >= a (a not all zeros, or any then). */
static int f_ge_body(sctx *c, brisk_buf *o, const char *a, size_t k) {
    if (all_of(a, k, '0')) {
        int rc = sch_str(o, " [0-9]");
        return rc ? rc : put_upto(c, o, k - 1);
    }
    int rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, a, 1);
    rc = rc ? rc : f_ge_opt(c, o, a + 1, k - 1);
    if (rc == 0 && a[0] < '9') {
        rc = sch_str(o, " |");
        rc = rc ? rc : put_class(o, (char)(a[0] + 1), '9');
        rc = rc ? rc : put_upto(c, o, k - 1);
    }
    return rc ? rc : sch_str(o, " )");
}

/* 1..k digits <= b (b not all zeros). */
static int f_le_body(sctx *c, brisk_buf *o, const char *b, size_t k) {
    if (all_of(b, k, '9')) {
        int rc = sch_str(o, " [0-9]");
        return rc ? rc : put_upto(c, o, k - 1);
    }
    int rc = sch_str(o, " (");
    if (b[0] > '0') {
        rc = rc ? rc : put_class(o, '0', (char)(b[0] - 1));
        rc = rc ? rc : put_upto(c, o, k - 1);
        rc = rc ? rc : sch_str(o, " |");
    }
    rc = rc ? rc : put_lit(o, b, 1);
    rc = rc ? rc : f_le_opt(c, o, b + 1, k - 1);
    return rc ? rc : sch_str(o, " )");
}

/* 1..k digits within [a, b] (a <= b, b not all zeros). */
static int f_rng_body(sctx *c, brisk_buf *o, const char *a, const char *b, size_t k) {
    if (all_of(a, k, '0'))
        return f_le_body(c, o, b, k);
    if (all_of(b, k, '9'))
        return f_ge_body(c, o, a, k);
    int rc;
    if (a[0] == b[0]) {
        rc = put_lit(o, a, 1);
        if (rc || k == 1)
            return rc;
        if (all_of(a + 1, k - 1, '0')) /* the digit alone, or more up to b */
            return f_le_opt(c, o, b + 1, k - 1);
        return f_rng_body(c, o, a + 1, b + 1, k - 1);
    }
    rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, a, 1);
    rc = rc ? rc : f_ge_opt(c, o, a + 1, k - 1);
    if (rc == 0 && a[0] + 1 <= b[0] - 1) {
        rc = sch_str(o, " |");
        rc = rc ? rc : put_class(o, (char)(a[0] + 1), (char)(b[0] - 1));
        rc = rc ? rc : put_upto(c, o, k - 1);
    }
    rc = rc ? rc : sch_str(o, " |");
    rc = rc ? rc : put_lit(o, b, 1);
    rc = rc ? rc : f_le_opt(c, o, b + 1, k - 1);
    return rc ? rc : sch_str(o, " )");
}

/* Non-negative decimals in [a, b] (magnitudes, a <= b). */
static int g_udec(sctx *c, brisk_buf *o, const sdec *a, const sdec *b) {
    size_t la = strlen(a->ip);
    int az = all_of(a->fp, SN_FRAC, '0'), bz = all_of(b->fp, SN_FRAC, '0'), rc;
    if (!strcmp(a->ip, b->ip)) {
        rc = put_lit(o, a->ip, la);
        if (rc || bz)
            return rc ? rc : put_zero_fraction(c, o);
        rc = sch_str(o, az ? " ( \".\"" : " \".\"");
        rc = rc ? rc : f_rng_body(c, o, a->fp, b->fp, SN_FRAC);
        return rc ? rc : sch_str(o, az ? " )?" : "");
    }
    rc = sch_str(o, " (");
    rc = rc ? rc : put_lit(o, a->ip, la);
    rc = rc ? rc : sch_str(o, az ? " ( \".\"" : " \".\"");
    rc = rc ? rc : f_ge_body(c, o, a->fp, SN_FRAC);
    rc = rc ? rc : sch_str(o, az ? " )?" : "");
    char lo[SN_MAX_DIGITS + 2], hi[SN_MAX_DIGITS + 2];
    snprintf(lo, sizeof lo, "%s", a->ip);
    snprintf(hi, sizeof hi, "%s", b->ip);
    digits_inc(lo);
    digits_dec(hi);
    size_t nl = strlen(lo), nh = strlen(hi);
    if (rc == 0 && (nl < nh || (nl == nh && strcmp(lo, hi) <= 0))) {
        rc = sch_str(o, " |");
        rc = rc ? rc : g_uint(c, o, lo, hi);
        rc = rc ? rc : sch_str(o, " ( \".\" [0-9]");
        rc = rc ? rc : put_upto(c, o, SN_FRAC - 1);
        rc = rc ? rc : sch_str(o, " )?");
    }
    rc = rc ? rc : sch_str(o, " |");
    rc = rc ? rc : put_lit(o, b->ip, strlen(b->ip));
    if (rc == 0 && bz)
        rc = put_zero_fraction(c, o);
    if (rc == 0 && !bz) {
        rc = sch_str(o, " ( \".\"");
        rc = rc ? rc : f_le_body(c, o, b->fp, SN_FRAC);
        rc = rc ? rc : sch_str(o, " )?");
    }
    return rc ? rc : sch_str(o, " )");
}

/* Magnitude of d, as a non-negative decimal. */
static sdec dec_abs(const sdec *d) {
    sdec m = *d;
    m.neg = 0;
    return m;
}

/* Decimals (integers when !frac) in [lo, hi], lo <= hi. */
static int g_range(sctx *c, brisk_buf *o, const sdec *lo, const sdec *hi, int frac) {
    sdec zero = {0}, one = {0};
    strcpy(zero.ip, "0");
    strcpy(one.ip, "1");
    memset(zero.fp, '0', SN_FRAC);
    memset(one.fp, '0', SN_FRAC);
    sdec alo = dec_abs(lo), ahi = dec_abs(hi);
    int rc;
    if (!lo->neg)
        return frac ? g_udec(c, o, &alo, &ahi) : g_uint(c, o, alo.ip, ahi.ip);
    if (hi->neg) {
        rc = sch_str(o, " \"-\"");
        return rc ? rc : frac ? g_udec(c, o, &ahi, &alo) : g_uint(c, o, ahi.ip, alo.ip);
    }
    /* both signs; "-0.5" and the like, and for decimals "-0" (zero, in range) */
    rc = sch_str(o, " ( \"-\"");
    rc = rc ? rc : frac ? g_udec(c, o, &zero, &alo) : g_uint(c, o, one.ip, alo.ip);
    rc = rc ? rc : sch_str(o, " |");
    rc = rc ? rc : frac ? g_udec(c, o, &zero, &ahi) : g_uint(c, o, zero.ip, ahi.ip);
    return rc ? rc : sch_str(o, " )");
}

/* ---- the keywords ---------------------------------------------------------------- */

/* A number keyword of s: 1 and *v, 0 when absent, or an error. */
static int get_number(sctx *c, const cJSON *s, const char *key, double *v) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!k)
        return 0;
    if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble))
        return sch_fail(c, "'%s' must be a number", key);
    *v = k->valuedouble;
    return 1;
}

/* The bounds of s as decimals: *has_lo / *has_hi say which it sets. For
 * integers (integral) both are integers. */
static int get_bounds(sctx *c, const cJSON *s, int integral, sdec *lo, int *has_lo, sdec *hi,
                      int *has_hi) {
    double min = 0, max = 0, xmin = 0, xmax = 0;
    int rc, has_min, has_max, has_xmin = 0, has_xmax = 0;
    if ((has_min = get_number(c, s, "minimum", &min)) < 0 ||
        (has_max = get_number(c, s, "maximum", &max)) < 0)
        return has_min < 0 ? has_min : has_max;
    /* draft 6 on: a number; draft 4: a boolean that makes minimum exclusive */
    const cJSON *x[2] = {cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum"),
                         cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")};
    int xbool[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "exclusiveMaximum" : "exclusiveMinimum";
        if (!x[i])
            continue;
        if (cJSON_IsBool(x[i])) {
            if (!(i ? has_max : has_min))
                return sch_fail(c, "'%s' as a boolean needs '%s'", name, i ? "maximum" : "minimum");
            xbool[i] = cJSON_IsTrue(x[i]);
        } else if ((rc = get_number(c, s, name, i ? &xmax : &xmin)) < 0) {
            return rc;
        } else {
            *(i ? &has_xmax : &has_xmin) = 1;
        }
    }
    /* the effective lower bound as a double and whether it is exclusive */
    int lo_set = has_min || has_xmin, hi_set = has_max || has_xmax;
    double l = has_xmin && (!has_min || xmin >= min) ? xmin : min;
    int lx = (has_xmin && (!has_min || xmin >= min)) || xbool[0];
    double h = has_xmax && (!has_max || xmax <= max) ? xmax : max;
    int hx = (has_xmax && (!has_max || xmax <= max)) || xbool[1];
    *has_lo = *has_hi = 0;
    if (lo_set) {
        if (integral)
            l = fabs(l) >= SN_EXACT ? nextafter(l, INFINITY) : lx ? floor(l) + 1 : ceil(l);
        else if (lx || fabs(l) >= SN_EXACT)
            l = nextafter(l, INFINITY);
        if (dec_from_double(l, 1, lo)) { /* beyond 10^40 */
            if (l > 0)
                return sch_fail(c, "'minimum' is beyond the numbers brisk writes (%d digits)",
                                SN_MAX_DIGITS);
        } else {
            *has_lo = 1;
        }
    }
    if (hi_set) {
        if (integral)
            h = fabs(h) >= SN_EXACT ? nextafter(h, -INFINITY) : hx ? ceil(h) - 1 : floor(h);
        else if (hx || fabs(h) >= SN_EXACT)
            h = nextafter(h, -INFINITY);
        if (dec_from_double(h, -1, hi)) {
            if (h < 0)
                return sch_fail(c, "'maximum' is beyond the numbers brisk writes (%d digits)",
                                SN_MAX_DIGITS);
        } else {
            *has_hi = 1;
        }
    }
    return 0;
}

/* The range of s with its defaults: a missing bound is the widest number of
 * as many digits as the other bound (at least SN_INT_DIGITS). */
static int full_range(sctx *c, const cJSON *s, int integral, sdec *lo, sdec *hi) {
    int has_lo = 0, has_hi = 0;
    int rc = get_bounds(c, s, integral, lo, &has_lo, hi, &has_hi);
    if (rc < 0)
        return rc;
    size_t n = SN_INT_DIGITS;
    if (has_lo && strlen(lo->ip) > n)
        n = strlen(lo->ip);
    if (has_hi && strlen(hi->ip) > n)
        n = strlen(hi->ip);
    if (!has_lo)
        dec_extreme(lo, 1, (int)n, !integral);
    if (!has_hi)
        dec_extreme(hi, 0, (int)n, !integral);
    if (dec_cmp(lo, hi) > 0)
        return sch_fail(c, "no %s lies within 'minimum'..'maximum'",
                        integral ? "integer" : "number of at most 16 decimals");
    return 0;
}

static int has_range(const cJSON *s) {
    static const char *const k[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, k[i]))
            return 1;
    return 0;
}

/* The range of s as a grammar of integers (integral) or decimals. */
static int gen_range(sctx *c, const cJSON *s, int integral, brisk_buf *out) {
    sdec lo, hi;
    int rc = full_range(c, s, integral, &lo, &hi);
    return rc ? rc : g_range(c, out, &lo, &hi, !integral);
}

/* ---- multipleOf ---------------------------------------------------------------- */

/* Positive multiples of m with at most n digits, by a remainder automaton:
 * rule (j, r) takes up to j more digits from remainder r and may end at
 * remainder 0. Only states that can still reach remainder 0 are written. */
static int g_multiples_dfa(sctx *c, brisk_buf *o, long m, int n) {
    /* live[j][r]: from remainder r, some string of at most j digits ends at 0 */
    unsigned char live[SN_MAX_DIGITS + 1][SN_MAX_DFA];
    memset(live, 0, sizeof live);
    for (int j = 0; j <= n; j++)
        for (long r = 0; r < m; r++) {
            live[j][r] = r == 0;
            for (int d = 0; d <= 9 && j > 0 && !live[j][r]; d++)
                live[j][r] = live[j - 1][(10 * r + d) % m];
        }
    int base = c->next_id;
    c->next_id += n * (int)m;
    int rc = 0;
    /* rule (j, r) for j = 1..n-1 (j digits may follow), id base + j * m + r */
    for (int j = 1; j < n && rc == 0; j++)
        for (long r = 0; r < m && rc == 0; r++) {
            if (!live[j][r])
                continue;
            brisk_buf body = {0};
            int first = 1;
            for (long t = 0; t < m && rc == 0; t++) {
                char ds[11]; /* the digits taking remainder r to t */
                int nd = 0;
                for (int d = 0; d <= 9; d++)
                    if ((10 * r + d) % m == t && live[j - 1][t])
                        ds[nd++] = (char)('0' + d);
                if (nd == 0)
                    continue;
                ds[nd] = '\0';
                rc = sch_fmt(&body, nd == 1 ? "%s\"%s\"" : "%s[%s]", first ? "" : " | ", ds);
                if (rc == 0 && j - 1 > 0)
                    rc = sch_fmt(&body, " %ss%d", c->prefix, base + (j - 1) * (int)m + (int)t);
                first = 0;
            }
            brisk_buf wrapped = {0}; /* at remainder 0 the number may end here */
            if (rc == 0 && r == 0 && body.len)
                rc = sch_fmt(&wrapped, "( %s )?", body.p ? body.p : "");
            if (rc == 0)
                rc = sch_add_rule(c, base + j * (int)m + (int)r, r == 0 ? &wrapped : &body);
            free(body.p);
            free(wrapped.p);
        }
    /* the first digit, 1-9, then the rule of its remainder with n - 1 digits left */
    rc = rc ? rc : sch_str(o, " (");
    int first = 1;
    for (int d = 1; d <= 9 && rc == 0; d++) {
        long r = d % m;
        if (!live[n - 1][r])
            continue;
        rc = sch_fmt(o, first ? " \"%d\"" : " | \"%d\"", d);
        if (rc == 0 && n > 1)
            rc = sch_fmt(o, " %ss%d", c->prefix, base + (n - 1) * (int)m + (int)r);
        first = 0;
    }
    return rc ? rc : sch_str(o, " )");
}

/* multipleOf m (a positive integer; for a number, its integer multiples, a
 * subset) within the range of s. */
static int g_multiple_of(sctx *c, const cJSON *s, brisk_buf *o) {
    double md = 0;
    int rc = get_number(c, s, "multipleOf", &md);
    if (rc < 0)
        return rc;
    if (!(md > 0) || md != floor(md) || md > 1e15)
        return sch_fail(c, "'multipleOf' other than a positive integer is not supported");
    long long m = (long long)md;
    if (m == 1) /* every integer */
        return has_range(s) ? gen_range(c, s, 1, o) : sch_str(o, "ji");
    sdec lo, hi;
    if ((rc = full_range(c, s, 1, &lo, &hi)) < 0)
        return rc;
    if (strlen(lo.ip) > 17 || strlen(hi.ip) > 17)
        return sch_fail(c, "'multipleOf' with a bound beyond 17 digits is not supported");
    long long l = atoll(lo.ip) * (lo.neg ? -1 : 1), h = atoll(hi.ip) * (hi.neg ? -1 : 1);
    long long widest = 999999999999999LL; /* SN_MULT_DIGITS nines: no bound within */
    /* the first and last multiples of the range */
    long long fm = l >= 0 ? (l + m - 1) / m * m : -((-l) / m * m);
    long long lm = h >= 0 ? h / m * m : -((-h + m - 1) / m * m);
    if (fm > lm)
        return sch_fail(c, "no multiple of 'multipleOf' lies within 'minimum'..'maximum'");
    if ((lm - fm) / m < SN_MAX_LIST) { /* few enough to list */
        rc = sch_str(o, " (");
        for (long long v = fm; v <= lm && rc == 0; v += m)
            rc = sch_fmt(o, v == fm ? " \"%lld\"" : " | \"%lld\"", v);
        return rc ? rc : sch_str(o, " )");
    }
    /* Otherwise the range may only choose signs: each bound is absent, or
     * within one multiple of zero. */
    int neg = l <= -widest, zero = l <= 0 && h >= 0, pos = h >= widest;
    if (!((l <= -widest || (l > -m && l <= m)) && (h >= widest || (h < m && h >= -m))))
        return sch_fail(c,
                        "'multipleOf' with a range of more than %d multiples that does not "
                        "only choose the sign is not supported",
                        SN_MAX_LIST);
    long long k = 1;
    int digits = 0; /* m divides 10^digits */
    for (; digits <= 6 && k % m; digits++)
        k *= 10;
    int suffix = k % m == 0 && k / m <= 64;
    if (!suffix && m > SN_MAX_DFA)
        return sch_fail(c,
                        "'multipleOf' %lld is not supported (at most %d, or a divisor of a "
                        "power of ten)",
                        m, SN_MAX_DFA);
    brisk_buf p = {0}; /* the positive multiples */
    if (suffix) {
        /* those below 10^digits one by one, the others as any digits then
         * one of the endings that are multiples */
        rc = sch_str(&p, " (");
        int first = 1;
        for (long long v = m; v < k && rc == 0; v += m, first = 0)
            rc = sch_fmt(&p, first ? " \"%lld\"" : " | \"%lld\"", v);
        rc = rc ? rc : sch_str(&p, first ? " [1-9]" : " | [1-9]");
        rc = rc ? rc : put_upto(c, &p, SN_MULT_DIGITS - 1 - digits);
        rc = rc ? rc : sch_str(&p, " (");
        for (long long v = 0; v < k && rc == 0; v += m)
            rc = sch_fmt(&p, v ? " | \"%0*lld\"" : " \"%0*lld\"", digits, v);
        rc = rc ? rc : sch_str(&p, " ) )");
    } else {
        rc = g_multiples_dfa(c, &p, (long)m, SN_MULT_DIGITS);
    }
    int first = 1;
    rc = rc ? rc : sch_str(o, " (");
    if (rc == 0 && neg) {
        rc = sch_fmt(o, " \"-\"%s", p.p);
        first = 0;
    }
    if (rc == 0 && zero) {
        rc = sch_str(o, first ? " \"0\"" : " | \"0\"");
        first = 0;
    }
    if (rc == 0 && pos)
        rc = sch_fmt(o, "%s%s", first ? "" : " |", p.p);
    free(p.p);
    return rc ? rc : sch_str(o, " )");
}

/* ---- entry points ---------------------------------------------------------------- */

int sch_gen_integer(sctx *c, const cJSON *s, brisk_buf *out) {
    if (cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
        return g_multiple_of(c, s, out);
    return has_range(s) ? gen_range(c, s, 1, out) : sch_str(out, "ji");
}

int sch_gen_number(sctx *c, const cJSON *s, brisk_buf *out) {
    if (cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
        return g_multiple_of(c, s, out);
    return has_range(s) ? gen_range(c, s, 0, out) : sch_str(out, "jn");
}
