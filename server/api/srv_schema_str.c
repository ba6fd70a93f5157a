/* srv_schema_str.c - strings: minLength, maxLength, format and pattern (see
 * srv_schema.h).
 *
 * Formats whose full grammar is impractical are written as a subset of their
 * RFC's, so that every value written is valid (and, as far as the checks
 * clients use go, accepted: Python's ipaddress, pydantic's URLs):
 *   ipv4      dotted quad, 0-255, no leading zeros (RFC 3986 dec-octet)
 *   ipv6      RFC 4291 text forms with "::" and an IPv4 tail (RFC 3986's
 *             IPv6address), no zone
 *   hostname  RFC 1123 labels of letters, digits and inner hyphens, 1-63
 *             characters, at most four, the last starting with a letter (so
 *             it is never an IPv4 address), at most 253 characters
 *   email     RFC 5321 dot-atom local part (1-3 atoms of 1-20 atext
 *             characters) @ a domain of two or three labels whose last is
 *             2-63 letters; at most 254 characters
 *   uri       RFC 3986 scheme "://" host (a hostname as above, IPv4 or
 *             [IPv6]) [":" port of 1-4 digits] path ["?" query] ["#"
 *             fragment], the last three without percent-escapes; with a
 *             maxLength (pydantic writes 2083) the path holds at most 64
 *             characters, the query 64 and the fragment 32.
 * A format beside minLength/maxLength is taken when every value the format
 * writes already has an allowed length. A pattern goes through the regex
 * engine (models/grammar_regex.c) in JSON-string mode; it must match the
 * whole string (JSON Schema searches: a full match is one of the strings a
 * search accepts). A maxLength below what the pattern can reach bounds its
 * unbounded repetitions (a subset); a minLength above its shortest match is
 * refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/grammar.h"
#include "server/api/srv_schema_internal.h"

/* Bits of sctx.formats: the helper rules already written. */
enum {
    SF_LABEL = 1u << 0,
    SF_LAST = 1u << 1,
    SF_IPV4 = 1u << 2,
    SF_IPV6 = 1u << 3,
    SF_HOST = 1u << 4,
    SF_EMAIL = 1u << 5,
    SF_URI = 1u << 6,
    SF_URI_BOUNDED = 1u << 7,
};

#define SS_MAX_LENGTH (1L << 30) /* the largest minLength/maxLength read */
#define SF_URI_FIXED 277         /* scheme 16 + "://" + a host of 253 + ":" and a 4-digit port */
#define SF_URI_TAIL 163          /* "/" path 63 + "?" query 64 + "#" fragment 32 */

/* Writes helper rule name ::= body (name after the prefix) once. */
static int put_helper(sctx *c, unsigned bit, const char *name, const char *body) {
    if (c->formats & bit)
        return 0;
    c->formats |= bit;
    int rc = sch_fmt(&c->rules, "%s%s ::= ", c->prefix, name);
    rc = rc ? rc : sch_str(&c->rules, body);
    return rc ? rc : sch_str(&c->rules, "\n");
}

/* The same, with every "@" in the body standing for the prefix. */
static int put_helper_p(sctx *c, unsigned bit, const char *name, const char *body) {
    if (c->formats & bit)
        return 0;
    brisk_buf b = {0};
    int rc = 0;
    for (const char *p = body; *p && rc == 0; p++)
        rc = *p == '@' ? sch_str(&b, c->prefix) : sch_add(&b, p, 1);
    rc = rc ? rc : put_helper(c, bit, name, b.p ? b.p : "");
    free(b.p);
    return rc;
}

/* The helper rules of a format and the ones it uses. */
static int need(sctx *c, unsigned bits) {
    int rc = 0;
    if (bits & (SF_HOST | SF_EMAIL | SF_URI | SF_URI_BOUNDED | SF_LABEL))
        rc = put_helper(c, SF_LABEL, "flab", "[A-Za-z0-9] ( [A-Za-z0-9\\-]{0,61} [A-Za-z0-9] )?");
    if (rc == 0 && (bits & (SF_HOST | SF_URI | SF_URI_BOUNDED | SF_LAST)))
        rc = put_helper(c, SF_LAST, "flast", "[A-Za-z] ( [A-Za-z0-9\\-]{0,59} [A-Za-z0-9] )?");
    if (rc == 0 && (bits & (SF_IPV4 | SF_IPV6 | SF_URI | SF_URI_BOUNDED)))
        rc = put_helper_p(c, SF_IPV4, "fip4",
                          "@foct \".\" @foct \".\" @foct \".\" @foct\n"
                          "@foct ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | "
                          "[1-9] [0-9] | [0-9]");
    if (rc == 0 && (bits & (SF_IPV6 | SF_URI | SF_URI_BOUNDED)))
        /* RFC 3986's IPv6address, one line per count of groups before "::" */
        rc = put_helper_p(c, SF_IPV6, "fip6",
                          "@fh16c{6} @fls32 | \"::\" @fh16c{5} @fls32 | @fh16? \"::\" @fh16c{4} "
                          "@fls32 | ( @fh16c? @fh16 )? \"::\" @fh16c{3} @fls32 | ( @fh16c{0,2} "
                          "@fh16 )? \"::\" @fh16c{2} @fls32 | ( @fh16c{0,3} @fh16 )? \"::\" "
                          "@fh16c @fls32 | ( @fh16c{0,4} @fh16 )? \"::\" @fls32 | ( @fh16c{0,5} "
                          "@fh16 )? \"::\" @fh16 | ( @fh16c{0,6} @fh16 )? \"::\"\n"
                          "@fh16 ::= [0-9a-fA-F]{1,4}\n"
                          "@fh16c ::= @fh16 \":\"\n"
                          "@fls32 ::= @fh16 \":\" @fh16 | @fip4");
    if (rc == 0 && (bits & (SF_HOST | SF_URI | SF_URI_BOUNDED)))
        rc = put_helper_p(c, SF_HOST, "fhost", "( @flab \".\" ){0,3} @flast");
    if (rc == 0 && (bits & SF_EMAIL))
        rc = put_helper_p(c, SF_EMAIL, "femail",
                          "@fatom ( \".\" @fatom ){0,2} \"\\x40\" @flab ( \".\" @flab )? \".\" "
                          "[A-Za-z]{2,63}\n"
                          "@fatom ::= [A-Za-z0-9!#$%&'*+/=?\\x5E_`{|}~\\-]{1,20}");
    /* the URI's path, query and fragment characters: RFC 3986 pchar without
     * percent-escapes, and "/" ("?" too after the path) */
    if (rc == 0 && (bits & SF_URI))
        rc = put_helper_p(c, SF_URI, "furi",
                          "[A-Za-z] [A-Za-z0-9+.\\-]{0,15} \"://\" ( @fhost | @fip4 | \"[\" @fip6 "
                          "\"]\" ) ( \":\" [1-9] [0-9]{0,3} )? ( \"/\" @fpc* )? ( \"?\" @fqc* )? ( "
                          "\"#\" @fqc* )?\n"
                          "@fpc ::= [A-Za-z0-9._~!$&'()*+,;=:\\x40/\\-]\n"
                          "@fqc ::= @fpc | \"?\"");
    if (rc == 0 && (bits & SF_URI_BOUNDED))
        rc = put_helper_p(c, SF_URI_BOUNDED, "furib",
                          "[A-Za-z] [A-Za-z0-9+.\\-]{0,15} \"://\" ( @fhost | @fip4 | \"[\" @fip6 "
                          "\"]\" ) ( \":\" [1-9] [0-9]{0,3} )? ( \"/\" @fpcb{0,63} )? ( \"?\" "
                          "@fqcb{0,64} )? ( \"#\" @fqcb{0,32} )?\n"
                          "@fpcb ::= [A-Za-z0-9._~!$&'()*+,;=:\\x40/\\-]\n"
                          "@fqcb ::= @fpcb | \"?\"");
    return rc;
}

typedef struct sformat {
    const char *name;
    const char *rule; /* in the shared base, or a helper (prefixed) when bits */
    unsigned bits;
    long min_len, max_len; /* of the values it writes, in characters (-1: none) */
} sformat;

static const sformat SF_TABLE[] = {
    {"date", "jday", 0, 10, 10},
    {"time", "jclock", 0, 9, 21},
    {"date-time", "jday \"T\" jclock", 0, 20, 32},
    {"uuid",
     "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12}",
     0, 36, 36},
    {"ipv4", "fip4", SF_IPV4, 7, 15},
    {"ipv6", "fip6", SF_IPV6, 2, 45},
    {"hostname", "fhost", SF_HOST, 1, 253},
    {"email", "femail", SF_EMAIL, 6, 254},
    {"uri", "furi", SF_URI, 5, -1},
};

static int gen_format(sctx *c, const cJSON *fmt, long lo, long hi, int has_hi, brisk_buf *out) {
    const sformat *f = NULL;
    for (size_t i = 0; cJSON_IsString(fmt) && i < sizeof SF_TABLE / sizeof *SF_TABLE; i++)
        if (!strcmp(fmt->valuestring, SF_TABLE[i].name))
            f = &SF_TABLE[i];
    if (!f)
        return sch_fail(c,
                        "format '%.40s' is not supported (date, time, date-time, uuid, ipv4, "
                        "ipv6, hostname, email, uri are)",
                        cJSON_IsString(fmt) ? fmt->valuestring : "?");
    sformat use = *f;
    if (!strcmp(f->name, "uri") && has_hi) { /* a bounded path, query and fragment */
        use.rule = "furib";
        use.bits = SF_URI_BOUNDED;
        use.max_len = SF_URI_FIXED + SF_URI_TAIL;
    }
    if (lo > use.min_len)
        return sch_fail(c,
                        "'minLength' above the shortest value of format '%s' (%ld) is not "
                        "supported",
                        f->name, use.min_len);
    if (has_hi && hi < use.max_len)
        return sch_fail(c,
                        "'maxLength' below the longest value brisk writes for format '%s' (%ld) "
                        "is not supported",
                        f->name, use.max_len);
    int rc = need(c, use.bits);
    rc = rc ? rc : sch_str(out, "\"\\\"\" ");
    if (rc == 0)
        rc = use.bits ? sch_fmt(out, "%s%s", c->prefix, use.rule) : sch_str(out, use.rule);
    return rc ? rc : sch_str(out, " \"\\\"\"");
}

/* The pattern's expression; with a maxLength hi below its longest match,
 * its unbounded repetitions stop at the largest count that keeps every
 * match within hi. */
static int gen_pattern(sctx *c, const cJSON *pat, long lo, long hi, int has_hi, brisk_buf *out) {
    if (!cJSON_IsString(pat))
        return sch_fail(c, "'pattern' must be a string");
    const char *re = pat->valuestring;
    size_t n = strlen(re);
    model_regex_opts o = {.json_string = 1, .cap_unbounded = 0};
    char *expr = NULL, why[200] = "";
    long rmin = 0, rmax = 0;
    int rc = model_grammar_regex_expr(re, n, &o, &expr, &rmin, &rmax, why, sizeof why);
    if (rc == BRISK_ENOMEM)
        return rc;
    if (rc < 0)
        return sch_fail(c, "'pattern' is not supported: %s", why);
    if (has_hi && (rmax < 0 || rmax > hi)) {
        /* the largest cap in 1..hi that fits: rmax grows with the cap */
        long good = 0, a = 1, b = hi > SCH_MAX_REPEAT ? SCH_MAX_REPEAT : hi;
        while (a <= b && rc == 0) {
            long mid = a + (b - a) / 2, mx = 0;
            char *e = NULL;
            o.cap_unbounded = (int)mid;
            rc = model_grammar_regex_expr(re, n, &o, &e, &rmin, &mx, why, sizeof why);
            free(e);
            if (rc == 0 && mx >= 0 && mx <= hi) {
                good = mid;
                a = mid + 1;
            } else {
                b = mid - 1;
            }
        }
        free(expr);
        expr = NULL;
        if (rc < 0)
            return rc == BRISK_ENOMEM ? rc : sch_fail(c, "'pattern' is not supported: %s", why);
        if (good == 0)
            return sch_fail(c, "'maxLength' is below what 'pattern' must write");
        o.cap_unbounded = (int)good;
        rc = model_grammar_regex_expr(re, n, &o, &expr, &rmin, &rmax, why, sizeof why);
        if (rc < 0)
            return rc == BRISK_ENOMEM ? rc : sch_fail(c, "'pattern' is not supported: %s", why);
    }
    if (rmin < lo) {
        free(expr);
        return sch_fail(c, "'minLength' above the shortest match of 'pattern' is not supported");
    }
    rc = sch_str(out, "\"\\\"\" ");
    rc = rc ? rc : sch_str(out, expr);
    free(expr);
    return rc ? rc : sch_str(out, " \"\\\"\"");
}

int sch_gen_string(sctx *c, const cJSON *s, brisk_buf *out) {
    /* lengths up to SS_MAX_LENGTH: a format or a pattern bounds its own
     * repetitions; a plain string's {m,n} stops at SCH_MAX_REPEAT */
    long lo = 0, hi = -1;
    int rc, has_hi;
    if ((rc = sch_get_count_max(c, s, "minLength", SS_MAX_LENGTH, &lo)) < 0 ||
        (rc = has_hi = sch_get_count_max(c, s, "maxLength", SS_MAX_LENGTH, &hi)) < 0)
        return rc;
    if (has_hi && hi < lo)
        return sch_fail(c, "maxLength is below minLength");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (fmt && pat)
        return sch_fail(c, "'pattern' beside 'format' is not supported");
    if (fmt)
        return gen_format(c, fmt, lo, hi, has_hi, out);
    if (pat)
        return gen_pattern(c, pat, lo, hi, has_hi, out);
    if (lo > SCH_MAX_REPEAT || hi > SCH_MAX_REPEAT)
        return sch_fail(c, "'%s' above %d is not supported",
                        lo > SCH_MAX_REPEAT ? "minLength" : "maxLength", SCH_MAX_REPEAT);
    if (lo == 0 && !has_hi)
        return sch_str(out, "js");
    return !has_hi ? sch_fmt(out, "\"\\\"\" jc{%ld,} \"\\\"\"", lo)
                   : sch_fmt(out, "\"\\\"\" jc{%ld,%ld} \"\\\"\"", lo, hi);
}
