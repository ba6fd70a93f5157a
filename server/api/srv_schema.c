/* srv_schema.c - JSON Schema into GBNF (see srv_schema.h): the walk over a
 * schema, $ref, the alternatives (anyOf, oneOf, allOf of one, a
 * discriminator's mapping), the keywords refused, and the entry points. The
 * values by type are in srv_schema_num.c (integer, number), srv_schema_str.c
 * (string) and srv_schema_obj.c (object, array).
 *
 * Every subschema becomes one rule "sN ::= ..." (a $ref target one rule
 * however often it is used, so recursive schemas are recursive rules); the
 * JSON primitives are shared rules (j*: any value, object, array, string,
 * string character, number, integer, boolean, null, the date and time
 * pieces; ws: the bounded whitespace between tokens). The root value is the
 * whole answer: nothing may follow its last character. */
#include "server/api/srv_schema.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_utf8.h"
#include "server/api/srv_schema_internal.h"

static const char SCH_BASE[] =
    /* At most 8 spaces or tabs, a newline and 16 more: enough for a value
     * laid out over lines 8 levels deep, and as json_object's, so a model
     * cannot spend its budget on whitespace. */
    "ws ::= [ \\t]{0,8} ( \"\\n\" [ \\t]{0,16} )?\n"
    "jv ::= jo | ja | js | jn | \"true\" | \"false\" | \"null\"\n"
    "jo ::= \"{\" ws ( js ws \":\" ws jv ws ( \",\" ws js ws \":\" ws jv ws )* )? \"}\"\n"
    "ja ::= \"[\" ws ( jv ws ( \",\" ws jv ws )* )? \"]\"\n"
    "js ::= \"\\\"\" jc* \"\\\"\"\n"
    "jc ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "jn ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} "
    ")?\n"
    "ji ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "jb ::= \"true\" | \"false\"\n"
    "jz ::= \"null\"\n"
    /* a day that exists (February stops at 28: leap years are left out), in
     * years 1000-9999 (Python's date takes no year 0) */
    "jday ::= [1-9] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] "
    "[0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
    "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )\n"
    "jclock ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n";

/* Validation keywords brisk cannot honour: refused, never ignored. */
static const char *const SCH_REFUSED[] = {
    "patternProperties",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "dependencies",
    "contentEncoding",
    "contentMediaType",
};

int sch_fail(sctx *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a client's text quoted in it (a type, a format) stays on one line */
    for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    brisk_set_err(c->err, c->err_len, BRISK_EINVAL, "%s (at '%s')", msg, c->path);
    return BRISK_EINVAL;
}

/* The grammar's text goes into brisk_bufs (common/brisk_buf.h) through
 * these, which keep every text under SCH_MAX_TEXT and report at each
 * append: 0, BRISK_ERANGE (too big) or BRISK_ENOMEM. */
int sch_add(brisk_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > SCH_MAX_TEXT)
        return BRISK_ERANGE;
    brisk_buf_put(b, s, n);
    return b->oom ? BRISK_ENOMEM : 0;
}

int sch_str(brisk_buf *b, const char *s) {
    return sch_add(b, s, strlen(s));
}

/* A piece of at most 255 bytes (longer counts as too big, BRISK_ERANGE). */
int sch_fmt(brisk_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= sizeof tmp ? BRISK_ERANGE : sch_add(b, tmp, (size_t)n);
}

/* A GBNF literal of bytes s: quotes, backslashes and control bytes as \xHH;
 * the rest (valid UTF-8, as the request parser checked) as is. */
int sch_literal(brisk_buf *b, const char *s) {
    int rc = sch_str(b, "\"");
    for (; *s && rc == 0; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\' || ch < 0x20 || ch == 0x7f)
            rc = sch_fmt(b, "\\x%02X", ch);
        else
            rc = sch_add(b, s, 1);
    }
    return rc ? rc : sch_str(b, "\"");
}

int sch_json_literal(sctx *c, brisk_buf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t)
        return BRISK_ENOMEM;
    /* The grammar's literals must be well-formed UTF-8: a lone surrogate
     * escape, say, is not. */
    if (!brisk_utf8_valid(t, strlen(t))) {
        cJSON_free(t);
        return sch_fail(c, "a string is not valid UTF-8");
    }
    int rc = sch_literal(b, t);
    cJSON_free(t);
    return rc;
}

int sch_add_rule(sctx *c, int id, const brisk_buf *body) {
    int rc = sch_fmt(&c->rules, "%ss%d ::= ", c->prefix, id);
    return rc ? rc
           : (rc = sch_add(&c->rules, body->p ? body->p : "", body->len))
               ? rc
               : sch_str(&c->rules, "\n");
}

/* Control characters of a client's property name become '?': the path goes
 * into one-line error messages. */
size_t sch_path_push(sctx *c, const char *prefix, const char *name) {
    size_t at = strlen(c->path);
    snprintf(c->path + at, sizeof c->path - at, "%s%s", prefix, name);
    for (char *q = c->path + at; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    return at;
}

int sch_gen_rule(sctx *c, const cJSON *s, brisk_buf *out) {
    brisk_buf body = {0};
    int id = c->next_id++;
    int rc = sch_gen(c, s, &body);
    if (rc == 0)
        rc = sch_add_rule(c, id, &body);
    free(body.p);
    return rc ? rc : sch_fmt(out, "%ss%d", c->prefix, id);
}

static int is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "default",    "examples", "$schema",
                                      "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                      "$defs", "definitions", "strict"};
    for (size_t i = 0; i < sizeof ann / sizeof *ann; i++)
        if (!strcmp(k, ann[i]))
            return 1;
    return 0;
}

int sch_get_count(sctx *c, const cJSON *s, const char *key, long *out) {
    return sch_get_count_max(c, s, key, SCH_MAX_REPEAT, out);
}

int sch_get_count_max(sctx *c, const cJSON *s, const char *key, long max, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v)
        return 0;
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !(d >= 0)) /* NaN too */
        return sch_fail(c, "'%s' must be a non-negative integer", key);
    if (d > (double)max) /* before converting: a huge double has no long */
        return sch_fail(c, "'%s' above %ld is not supported", key, max);
    if (d != (double)(long)d)
        return sch_fail(c, "'%s' must be a non-negative integer", key);
    *out = (long)d;
    return 1;
}

/* One rule per k, shared by every use in this schema: a repetition {0,k}
 * costs k rules when the grammar is compiled. */
int sch_digits_upto(sctx *c, brisk_buf *out, int k, int zeros) {
    uint64_t *have = zeros ? &c->zeros_upto : &c->digits_upto;
    const char *name = zeros ? "z" : "d";
    if (k < 1 || k > 63)
        return BRISK_ERANGE;
    if (!(*have & (1ull << k))) {
        *have |= 1ull << k;
        int rc = sch_fmt(&c->rules, "%s%s%d ::= %s{0,%d}\n", c->prefix, name, k,
                         zeros ? "\"0\"" : "[0-9]", k);
        if (rc)
            return rc;
    }
    return sch_fmt(out, "%s%s%d", c->prefix, name, k);
}

/* ---- the types ------------------------------------------------------------------- */

static int gen_type(sctx *c, const cJSON *s, const char *t, brisk_buf *out) {
    if (!strcmp(t, "string"))
        return sch_gen_string(c, s, out);
    if (!strcmp(t, "number"))
        return sch_gen_number(c, s, out);
    if (!strcmp(t, "integer"))
        return sch_gen_integer(c, s, out);
    if (!strcmp(t, "boolean"))
        return sch_str(out, "jb");
    if (!strcmp(t, "null"))
        return sch_str(out, "jz");
    if (!strcmp(t, "object"))
        return sch_gen_object(c, s, out);
    if (!strcmp(t, "array"))
        return sch_gen_array(c, s, out);
    return sch_fail(c, "type '%.40s' is unknown", t);
}

/* A schema without "type": the types its keywords speak of (a string's
 * minLength, a number's minimum, ...), as "any of" them; any value when
 * there are none. Values of the other types would validate too: leaving
 * them out keeps to a subset. */
static int gen_implied(sctx *c, const cJSON *s, brisk_buf *out) {
    static const struct {
        const char *type, *keys[6];
    } fam[] = {
        {"object", {"properties", "additionalProperties", "minProperties", "maxProperties"}},
        {"array", {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}},
        {"string", {"minLength", "maxLength", "pattern", "format"}},
        {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
    };
    int n = 0, rc = 0;
    for (size_t f = 0; f < sizeof fam / sizeof *fam && rc == 0; f++) {
        int has = 0;
        for (int k = 0; k < 6 && fam[f].keys[k]; k++)
            has |= cJSON_GetObjectItemCaseSensitive(s, fam[f].keys[k]) != NULL;
        if (!has)
            continue;
        rc = sch_str(out, n++ ? " | " : "( ");
        rc = rc ? rc : gen_type(c, s, fam[f].type, out);
    }
    if (rc == 0)
        rc = n ? sch_str(out, " )") : sch_str(out, "jv"); /* no constraint: any JSON value */
    return rc;
}

/* ---- $ref ------------------------------------------------------------------------ */

const cJSON *sch_resolve(const cJSON *root, const char *ref) {
    if (ref[0] != '#')
        return NULL;
    const cJSON *at = root;
    const char *p = ref + 1;
    char tok[256];
    while (*p == '/' && at) {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') {
                if (p[1] != '0' && p[1] != '1')
                    return NULL;
                ch = p[1] == '0' ? '~' : '/';
                p++;
            }
            if (n + 1 >= sizeof tok)
                return NULL;
            tok[n++] = ch;
        }
        tok[n] = '\0';
        at = cJSON_GetObjectItemCaseSensitive(at, tok);
    }
    return *p ? NULL : at;
}

/* A discriminator's branch (c->disc_prop set) is written afresh: its tag
 * differs from the shared rule of the same target. */
static int gen_ref(sctx *c, const cJSON *ref, brisk_buf *out) {
    const cJSON *target = cJSON_IsString(ref) ? sch_resolve(c->root, ref->valuestring) : NULL;
    if (!target)
        return sch_fail(c, "$ref '%.60s' is not a local reference brisk can resolve",
                        cJSON_IsString(ref) ? ref->valuestring : "?");
    for (int i = 0; i < c->n_chain; i++)
        if (c->chain[i] == target)
            return sch_fail(c, "$ref '%.60s' reaches itself before any value", ref->valuestring);
    int shared = c->disc_prop == NULL;
    for (size_t i = 0; shared && i < c->n_refs; i++)
        if (c->refs[i].node == target)
            return sch_fmt(out, "%ss%d", c->prefix, c->refs[i].id);
    int id = c->next_id++;
    if (shared) {
        if (brisk_grow(&c->refs, &c->cap_refs, c->n_refs + 1, sizeof *c->refs, 8, 0) < 0)
            return BRISK_ENOMEM;
        c->refs[c->n_refs++] = (sref){target, id}; /* before the body: recursion finds it */
    }
    brisk_buf body = {0};
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref->valuestring);
    if (c->n_chain >= SCH_MAX_DEPTH)
        return sch_fail(c, "$refs nest deeper than %d", SCH_MAX_DEPTH);
    c->chain[c->n_chain++] = target;
    int rc = sch_gen(c, target, &body);
    c->n_chain--;
    memcpy(c->path, saved, sizeof saved);
    if (rc == 0)
        rc = sch_add_rule(c, id, &body);
    free(body.p);
    return rc ? rc : sch_fmt(out, "%ss%d", c->prefix, id);
}

/* ---- alternatives ------------------------------------------------------------------- */

static int gen_alternatives(sctx *c, const cJSON *list, const char *key, brisk_buf *out) {
    if (!cJSON_IsArray(list) || !list->child)
        return sch_fail(c, "'%s' must be a non-empty array", key);
    if (c->disc_prop && list->child->next)
        return sch_fail(c, "a discriminator's branch is '%s' of several schemas", key);
    int rc = sch_str(out, "( "), k = 0;
    for (const cJSON *a = list->child; a && rc == 0; a = a->next, k++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", k);
        size_t at = sch_path_push(c, "/", key);
        sch_path_push(c, "/", idx);
        if (k)
            rc = sch_str(out, " | ");
        if (rc == 0)
            rc = sch_gen_rule(c, a, out);
        c->path[at] = '\0';
    }
    return rc ? rc : sch_str(out, " )");
}

/* One branch of a discriminated union with its tag fixed to tag. */
static int gen_tagged(sctx *c, const cJSON *branch, const char *prop, const char *tag,
                      brisk_buf *out) {
    cJSON *v = cJSON_CreateString(tag);
    if (!v)
        return BRISK_ENOMEM;
    c->disc_prop = prop;
    c->disc_value = v;
    int rc = sch_gen_rule(c, branch, out);
    if (rc == 0 && c->disc_prop) /* nothing took the tag */
        rc = sch_fail(c, "a discriminator's branch is not an object with properties");
    c->disc_prop = NULL;
    c->disc_value = NULL;
    cJSON_Delete(v);
    return rc;
}

/* oneOf/anyOf with an OpenAPI discriminator (as pydantic writes a union
 * discriminated by a Literal field): each branch once per value that the
 * mapping gives its $ref, with the tag property required and holding that
 * value, so the value picks the branch. A branch the mapping does not name
 * is written as it is (its own schema of the tag decides). */
static int gen_discriminated(sctx *c, const cJSON *list, const char *key, const cJSON *d,
                             brisk_buf *out) {
    const cJSON *prop = cJSON_GetObjectItemCaseSensitive(d, "propertyName");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(d, "mapping");
    if (!cJSON_IsObject(d) || !cJSON_IsString(prop))
        return sch_fail(c, "'discriminator' must be an object with a 'propertyName' string");
    if (map && !cJSON_IsObject(map))
        return sch_fail(c, "'discriminator.mapping' must be an object");
    if (!cJSON_IsArray(list) || !list->child)
        return sch_fail(c, "'%s' must be a non-empty array", key);
    /* each branch looks through the mapping: both bounded, so the work is */
    if (cJSON_GetArraySize(list) > SCH_MAX_BRANCHES ||
        (map && cJSON_GetArraySize(map) > SCH_MAX_BRANCHES))
        return sch_fail(c, "a discriminated '%s' or its mapping of more than %d entries", key,
                        SCH_MAX_BRANCHES);
    int rc = sch_str(out, "( "), k = 0, alts = 0;
    for (const cJSON *a = list->child; a && rc == 0; a = a->next, k++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", k);
        size_t at = sch_path_push(c, "/", key);
        sch_path_push(c, "/", idx);
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(a, "$ref");
        int tagged = 0;
        for (const cJSON *m = map ? map->child : NULL; m && rc == 0 && cJSON_IsString(ref);
             m = m->next)
            if (cJSON_IsString(m) && !strcmp(m->valuestring, ref->valuestring)) {
                rc = sch_str(out, alts++ ? " | " : "");
                rc = rc ? rc : gen_tagged(c, a, prop->valuestring, m->string, out);
                tagged = 1;
            }
        if (rc == 0 && !tagged) {
            rc = sch_str(out, alts++ ? " | " : "");
            rc = rc ? rc : sch_gen_rule(c, a, out);
        }
        c->path[at] = '\0';
    }
    return rc ? rc : sch_str(out, " )");
}

/* ---- a schema ------------------------------------------------------------------- */

int sch_gen(sctx *c, const cJSON *s, brisk_buf *out) {
    if (++c->n_nodes > SRV_SCHEMA_MAX_NODES)
        return sch_fail(c, "more than %d subschemas", SRV_SCHEMA_MAX_NODES);
    if (c->depth >= SCH_MAX_DEPTH)
        return sch_fail(c, "schemas nest deeper than %d", SCH_MAX_DEPTH);
    if (cJSON_IsTrue(s))
        return sch_str(out, "jv");
    if (cJSON_IsFalse(s))
        return sch_fail(c, "the schema false admits no value");
    if (!cJSON_IsObject(s))
        return sch_fail(c, "a schema must be an object or a boolean");
    for (const cJSON *k = s->child; k; k = k->next)
        for (size_t i = 0; i < sizeof SCH_REFUSED / sizeof *SCH_REFUSED; i++)
            if (!strcmp(k->string, SCH_REFUSED[i]))
                return sch_fail(c, "'%s' is not supported", k->string);
    c->depth++;
    int rc;
    const cJSON *v, *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
    const cJSON *disc = cJSON_GetObjectItemCaseSensitive(s, "discriminator");
    int or_null = cJSON_IsTrue(nullable);
    if (or_null && (rc = sch_str(out, "( jz | ")) < 0)
        goto done;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        for (const cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, "$ref") && strcmp(k->string, "nullable") &&
                !is_annotation(k->string)) {
                rc = sch_fail(c, "'%s' beside $ref is not supported", k->string);
                goto done;
            }
        rc = gen_ref(c, v, out);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        rc = sch_json_literal(c, out, v);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(v) || !v->child) {
            rc = sch_fail(c, "'enum' must be a non-empty array");
            goto done;
        }
        rc = sch_str(out, "( ");
        for (const cJSON *e = v->child; e && rc == 0; e = e->next)
            if ((rc = e != v->child ? sch_str(out, " | ") : 0) == 0)
                rc = sch_json_literal(c, out, e);
        if (rc == 0)
            rc = sch_str(out, " )");
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) ||
               (v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        rc = disc && !c->disc_prop ? gen_discriminated(c, v, v->string, disc, out)
                                   : gen_alternatives(c, v, v->string, out);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 1) {
            rc = sch_fail(c, "'allOf' of several schemas is not supported");
            goto done;
        }
        rc = gen_alternatives(c, v, "allOf", out);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        if (cJSON_IsString(v)) {
            rc = gen_type(c, s, v->valuestring, out);
        } else if (cJSON_IsArray(v) && v->child) {
            rc = sch_str(out, "( ");
            for (const cJSON *t = v->child; t && rc == 0; t = t->next) {
                if (!cJSON_IsString(t)) {
                    rc = sch_fail(c, "'type' must hold strings");
                    break;
                }
                if ((rc = t != v->child ? sch_str(out, " | ") : 0) == 0)
                    rc = gen_type(c, s, t->valuestring, out);
            }
            if (rc == 0)
                rc = sch_str(out, " )");
        } else {
            rc = sch_fail(c, "'type' must be a string or a non-empty array");
        }
    } else {
        rc = gen_implied(c, s, out);
    }
    if (rc == 0 && or_null)
        rc = sch_str(out, " )");
done:
    c->depth--;
    return rc;
}

int srv_schema_rules(const cJSON *schema, const char *prefix, char **rules, char **expr, char *err,
                     size_t err_len) {
    sctx c = {.root = schema, .err = err, .err_len = err_len, .path = "#", .prefix = prefix};
    *rules = *expr = NULL;
    brisk_buf top = {0};
    int rc = sch_gen(&c, schema, &top);
    free(c.refs);
    size_t n;
    char *r = rc == 0 ? brisk_buf_take(&c.rules, &n) : NULL; /* "" when there is no rule */
    char *x = rc == 0 ? brisk_buf_take(&top, &n) : NULL;
    if (rc == 0 && (!r || !x))
        rc = BRISK_ENOMEM;
    if (rc == BRISK_ERANGE)
        rc = sch_fail(&c, "the schema makes a grammar of more than %d bytes", SCH_MAX_TEXT);
    else if (rc == BRISK_ENOMEM)
        brisk_set_err(err, err_len, rc, "out of memory converting the schema");
    if (rc < 0) {
        free(r);
        free(x);
        free(c.rules.p);
        free(top.p);
        return rc;
    }
    *rules = r;
    *expr = x;
    return 0;
}

const char *srv_schema_base(void) {
    return SCH_BASE;
}

int srv_schema_to_gbnf(const cJSON *schema, char **out, char *err, size_t err_len) {
    char *rules = NULL, *expr = NULL;
    *out = NULL;
    int rc = srv_schema_rules(schema, "", &rules, &expr, err, err_len);
    if (rc < 0)
        return rc;
    size_t n = strlen(rules) + strlen(expr) + sizeof SCH_BASE + 32;
    char *t = brisk_malloc(n);
    /* Whitespace may come before the value but nothing after it: the answer
     * ends at the value's last character (a closing brace), where the
     * grammar is finished and generation stops. */
    if (t)
        snprintf(t, n, "%sroot ::= ws %s\n%s", rules, expr, SCH_BASE);
    free(rules);
    free(expr);
    if (!t) {
        brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory converting the schema");
        return BRISK_ENOMEM;
    }
    *out = t;
    return 0;
}
