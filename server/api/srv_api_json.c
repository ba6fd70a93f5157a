/* srv_api_json.c - what every request parser of the API room shares
 * (srv_api_req.c, srv_api_tok.c, srv_responses.c, srv_tools.c): the
 * OpenAI-shaped 400s and the guarded JSON parse of a hostile body.
 *
 * The parse is three passes:
 *   1. a byte scan, before cJSON sees anything: nesting depth (a clean 400
 *      long before cJSON's own recursion limit), the number of values (cJSON
 *      would spend time and memory on each), strict number grammar,
 *      string escapes, no NUL (raw or \u0000: cJSON strings are C strings),
 *      no raw control characters, well-formed UTF-8 in every string and key;
 *   2. cJSON builds the tree; nothing but whitespace may follow the value;
 *      no object at any depth may repeat a key (cJSON keeps both);
 *   3. (the callers) each known field is read with its type and range checked. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_utf8.h"
#include "server/api/srv_api.h"
#include "server/api/srv_api_json.h"

/* ---------------------------------------------------------------- errors */

int srv_api_fail(srv_api_error *err, const char *code, const char *param, const char *fmt, ...) {
    err->status = 400;
    err->type = "invalid_request_error";
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return BRISK_EINVAL;
}

int srv_api_oom(srv_api_error *err) {
    err->status = 500;
    err->type = "server_error";
    err->code = NULL;
    err->param[0] = '\0';
    snprintf(err->message, sizeof err->message, "out of memory while parsing the request");
    return BRISK_ENOMEM;
}

const char *srv_api_snip(const char *s, char out[API_SNIP_BYTES + 1]) {
    size_t n = strlen(s);
    if (n > API_SNIP_BYTES)
        n = brisk_utf8_complete_prefix(s, API_SNIP_BYTES);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[n] = '\0';
    return out;
}

/* ---------------------------------------------------------------- byte scan */

static int scan_is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int scan_is_hex(char c) {
    return scan_is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A JSON number at s[*i] (RFC 8259 grammar): cJSON alone would take "01",
 * "1." or "+1". Advances *i past it; 0 if ill-formed. */
static int scan_number(const char *s, size_t len, size_t *i) {
    size_t p = *i;
    if (s[p] == '-')
        p++;
    if (p >= len || !scan_is_digit(s[p]))
        return 0;
    if (s[p] == '0') {
        p++;
    } else {
        while (p < len && scan_is_digit(s[p]))
            p++;
    }
    if (p < len && s[p] == '.') {
        p++;
        if (p >= len || !scan_is_digit(s[p]))
            return 0;
        while (p < len && scan_is_digit(s[p]))
            p++;
    }
    if (p < len && (s[p] == 'e' || s[p] == 'E')) {
        p++;
        if (p < len && (s[p] == '+' || s[p] == '-'))
            p++;
        if (p >= len || !scan_is_digit(s[p]))
            return 0;
        while (p < len && scan_is_digit(s[p]))
            p++;
    }
    if (p < len && (scan_is_digit(s[p]) || strchr("+-.eE", s[p])))
        return 0;
    *i = p;
    return 1;
}

/* A string at s[*i] == '"'. Advances *i past the closing quote. */
static int scan_string(const char *s, size_t len, size_t *i, srv_api_error *err) {
    size_t p = *i + 1, n;
    for (;;) {
        if (p >= len)
            return srv_api_fail(err, NULL, NULL, "invalid JSON body: unterminated string");
        unsigned char c = (unsigned char)s[p];
        if (c == '"')
            break;
        if (c == '\\') {
            if (p + 1 >= len)
                return srv_api_fail(err, NULL, NULL, "invalid JSON body: unterminated string");
            char e = s[p + 1];
            if (e == 'u') {
                if (p + 6 > len || !scan_is_hex(s[p + 2]) || !scan_is_hex(s[p + 3]) ||
                    !scan_is_hex(s[p + 4]) || !scan_is_hex(s[p + 5]))
                    return srv_api_fail(err, NULL, NULL,
                                        "invalid JSON body: bad \\u escape at byte %zu", p);
                if (!memcmp(s + p + 2, "0000", 4))
                    return srv_api_fail(err, NULL, NULL,
                                        "invalid JSON body: strings must not contain NUL "
                                        "characters (\\u0000 at byte %zu)",
                                        p);
                p += 6;
            } else if (e && strchr("\"\\/bfnrt", e)) {
                p += 2;
            } else {
                return srv_api_fail(err, NULL, NULL, "invalid JSON body: bad escape at byte %zu",
                                    p);
            }
        } else if (c == 0) {
            return srv_api_fail(err, NULL, NULL,
                                "invalid JSON body: strings must not contain NUL characters "
                                "(byte %zu)",
                                p);
        } else if (c < 0x20) {
            return srv_api_fail(err, NULL, NULL,
                                "invalid JSON body: unescaped control character in a string at "
                                "byte %zu",
                                p);
        } else if (c < 0x80) {
            p++;
        } else {
            if (brisk_utf8_next(s + p, len - p, &n) != 1)
                return srv_api_fail(err, NULL, NULL, "invalid JSON body: invalid UTF-8 at byte %zu",
                                    p);
            p += n;
        }
    }
    *i = p + 1;
    return 0;
}

static int scan_is_lower(unsigned char c) {
    return c >= 'a' && c <= 'z';
}

static int scan_body(const char *s, size_t len, int max_depth, int max_values, srv_api_error *err) {
    int depth = 0, rc;
    long n_values = 0;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        /* A value starts here: a string, a number, an object, an array or a
         * literal (its first letter; a bad one fails in cJSON). */
        if ((c == '"' || c == '-' || scan_is_digit((char)c) || c == '{' || c == '[' ||
             (scan_is_lower(c) && !(i > 0 && scan_is_lower((unsigned char)s[i - 1])))) &&
            ++n_values > max_values)
            return srv_api_fail(err, NULL, NULL, "invalid JSON body: more than %d values",
                                max_values);
        if (c == '"') {
            if ((rc = scan_string(s, len, &i, err)) < 0)
                return rc;
            continue;
        }
        if (c == '-' || scan_is_digit((char)c)) {
            if (!scan_number(s, len, &i))
                return srv_api_fail(err, NULL, NULL, "invalid JSON body: bad number at byte %zu",
                                    i);
            continue;
        }
        if (c == '{' || c == '[') {
            if (++depth > max_depth)
                return srv_api_fail(err, NULL, NULL,
                                    "invalid JSON body: nesting is deeper than %d levels",
                                    max_depth);
        } else if (c == '}' || c == ']') {
            if (depth > 0)
                depth--;
        } else if (c == 0) {
            return srv_api_fail(err, NULL, NULL, "invalid JSON body: NUL byte at byte %zu", i);
        } else if (c >= 0x80) {
            return srv_api_fail(err, NULL, NULL, "invalid JSON body: unexpected byte at byte %zu",
                                i);
        }
        i++;
    }
    return 0;
}

/* ---------------------------------------------------------------- tree checks */

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int dup_found(const char *name, int top, srv_api_error *err) {
    char q[API_SNIP_BYTES + 1];
    return srv_api_fail(err, "duplicate_key", top ? name : NULL,
                        "invalid JSON body: duplicate key '%s' in an object",
                        srv_api_snip(name, q));
}

/* Duplicate keys anywhere under node. Small objects compare pairwise; large
 * ones sort their names, so 100k keys cost n log n, not n^2. The recursion
 * is bounded by the scanned nesting depth. */
static int check_dups(const cJSON *node, int top, srv_api_error *err) {
    int rc;
    if (cJSON_IsObject(node)) {
        size_t n = 0;
        for (const cJSON *c = node->child; c; c = c->next)
            n++;
        if (n <= 8) {
            for (const cJSON *a = node->child; a; a = a->next)
                for (const cJSON *b = a->next; b; b = b->next)
                    if (!strcmp(a->string, b->string))
                        return dup_found(a->string, top, err);
        } else {
            const char **names = brisk_malloc(n * sizeof *names);
            if (!names)
                return srv_api_oom(err);
            size_t k = 0;
            for (const cJSON *c = node->child; c; c = c->next)
                names[k++] = c->string;
            qsort(names, n, sizeof *names, cmp_names);
            for (k = 1; k < n; k++) {
                if (!strcmp(names[k - 1], names[k])) {
                    rc = dup_found(names[k], top, err);
                    free(names);
                    return rc;
                }
            }
            free(names);
        }
    }
    if (cJSON_IsObject(node) || cJSON_IsArray(node))
        for (const cJSON *c = node->child; c; c = c->next)
            if ((rc = check_dups(c, 0, err)) < 0)
                return rc;
    return 0;
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Scan, parse and check the body; *root is an object the caller deletes. */
int srv_api_parse_json(const char *body, size_t len, const srv_api_limits *lim, cJSON **root,
                       srv_api_error *err) {
    *root = NULL;
    size_t i = 0;
    while (i < len && is_ws(body[i]))
        i++;
    if (i == len)
        return srv_api_fail(err, NULL, NULL, "invalid JSON body: the body is empty");
    int rc = scan_body(body, len, lim->max_json_depth, lim->max_json_values, err);
    if (rc < 0)
        return rc;
    /* cJSON returns NULL both for a syntax error (after the scan, a missing
     * comma or colon) and for a failed allocation; brisk's cJSON hooks count
     * the failures, which tells the two apart. */
    const char *end = NULL;
    unsigned long oom_before = brisk_alloc_cjson_failures();
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!j && brisk_alloc_cjson_failures() != oom_before)
        return srv_api_oom(err);
    if (!j)
        return srv_api_fail(err, NULL, NULL, "invalid JSON body: the body is not valid JSON");
    for (const char *p = end; p < body + len; p++) {
        if (!is_ws(*p)) {
            cJSON_Delete(j);
            return srv_api_fail(
                err, NULL, NULL,
                "invalid JSON body: unexpected data after the JSON value at byte %zu",
                (size_t)(p - body));
        }
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return srv_api_fail(err, "invalid_type", NULL, "the request body must be a JSON object");
    }
    if ((rc = check_dups(j, 1, err)) < 0) {
        cJSON_Delete(j);
        return rc;
    }
    *root = j;
    return 0;
}

int srv_api_check_finite(const cJSON *v, srv_api_error *err) {
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
        char q[API_SNIP_BYTES + 1];
        const char *k = v->string ? srv_api_snip(v->string, q) : "a value";
        return srv_api_fail(err, "invalid_value", v->string ? q : NULL,
                            "%s: numbers must be finite", k);
    }
    for (const cJSON *c = v->child; c; c = c->next) {
        int rc = srv_api_check_finite(c, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}
