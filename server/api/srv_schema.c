/* srv_schema.c - JSON Schema into GBNF (see srv_schema.h).
 *
 * Every subschema becomes one rule "sN ::= ..." (a $ref target one rule
 * however often it is used, so recursive schemas are recursive rules); the
 * JSON primitives are shared rules (j*: any value, object, array, string,
 * string character, number, integer, boolean, null, the formats; ws: the
 * bounded whitespace between tokens). An object's properties come in the
 * schema's order, each optional one present or not:
 *   start_i ::= p_i tail_(i+1) | start_(i+1)      (the "|..." only if optional)
 *   tail_i  ::= "," ws p_i tail_(i+1) | tail_(i+1)
 * so commas only ever separate members that are there. */
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

#define SCH_MAX_DEPTH 64
#define SCH_MAX_REPEAT 1000 /* the grammar's largest {m,n} */
#define SCH_MAX_TEXT (60 * 1024)

static const char SCH_BASE[] =
    "ws ::= [ \\t]{0,8} ( \"\\n\" [ \\t]{0,40} )?\n"
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
    "jday ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
    "\"3\" "
    "[01] )\n"
    "jclock ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "jdate ::= \"\\\"\" jday \"\\\"\"\n"
    "jtime ::= \"\\\"\" jclock \"\\\"\"\n"
    "jdatetime ::= \"\\\"\" jday \"T\" jclock \"\\\"\"\n"
    "juuid ::= \"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
    "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"\n";

/* Validation keywords brisk cannot honour: refused, never ignored. */
static const char *const SCH_REFUSED[] = {
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "prefixItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
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

typedef struct sref {
    const cJSON *node;
    int id;
} sref;

typedef struct sctx {
    const cJSON *root;
    brisk_buf rules;
    int next_id;
    int n_nodes, depth;
    sref *refs;
    size_t n_refs, cap_refs;
    char path[512];
    const char *prefix; /* of every rule name ("" for a whole grammar) */
    /* $ref targets entered since the last "{" or "[": one met again before
     * any value would be a rule reaching itself (left recursion) */
    const cJSON *chain[SCH_MAX_DEPTH];
    int n_chain;
    char *err;
    size_t err_len;
} sctx;

static int sch_fail(sctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int sch_fail(sctx *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    brisk_set_err(c->err, c->err_len, BRISK_EINVAL, "%s (at '%s')", msg, c->path);
    return BRISK_EINVAL;
}

/* The grammar's text goes into brisk_bufs (common/brisk_buf.h) through
 * these, which keep every text under SCH_MAX_TEXT and report at each
 * append: 0, BRISK_ERANGE (too big) or BRISK_ENOMEM. */
static int sb_add(brisk_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > SCH_MAX_TEXT)
        return BRISK_ERANGE;
    brisk_buf_put(b, s, n);
    return b->oom ? BRISK_ENOMEM : 0;
}

static int sb_str(brisk_buf *b, const char *s) {
    return sb_add(b, s, strlen(s));
}

static int sb_fmt(brisk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A piece of at most 255 bytes (longer counts as too big, BRISK_ERANGE). */
static int sb_fmt(brisk_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= sizeof tmp ? BRISK_ERANGE : sb_add(b, tmp, (size_t)n);
}

/* A GBNF literal of bytes s: quotes, backslashes and control bytes as \xHH;
 * the rest (valid UTF-8, as the request parser checked) as is. */
static int sb_literal(brisk_buf *b, const char *s) {
    int rc = sb_str(b, "\"");
    for (; *s && rc == 0; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\' || ch < 0x20 || ch == 0x7f)
            rc = sb_fmt(b, "\\x%02X", ch);
        else
            rc = sb_add(b, s, 1);
    }
    return rc ? rc : sb_str(b, "\"");
}

/* The literal of a JSON value written compactly (a key, an enum member). */
static int sb_json_literal(sctx *c, brisk_buf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t)
        return BRISK_ENOMEM;
    /* The grammar's literals must be well-formed UTF-8: a lone surrogate
     * escape, say, is not. */
    if (!brisk_utf8_valid(t, strlen(t))) {
        cJSON_free(t);
        return sch_fail(c, "a string is not valid UTF-8");
    }
    int rc = sb_literal(b, t);
    cJSON_free(t);
    return rc;
}

/* Appends "sN ::= body\n" as a new rule; *id gets N. */
static int add_rule(sctx *c, int id, const brisk_buf *body) {
    int rc = sb_fmt(&c->rules, "%ss%d ::= ", c->prefix, id);
    return rc                                                            ? rc
           : (rc = sb_add(&c->rules, body->p ? body->p : "", body->len)) ? rc
                                                                         : sb_str(&c->rules, "\n");
}

/* Appends prefix then name to the error path; returns where to cut it back.
 * Control characters of a client's property name become '?': the path goes
 * into one-line error messages. */
static size_t path_push(sctx *c, const char *prefix, const char *name) {
    size_t at = strlen(c->path);
    snprintf(c->path + at, sizeof c->path - at, "%s%s", prefix, name);
    for (char *q = c->path + at; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    return at;
}

static int gen(sctx *c, const cJSON *s, brisk_buf *out);

/* A new rule for subschema s; its name goes into out. */
static int gen_rule(sctx *c, const cJSON *s, brisk_buf *out) {
    brisk_buf body = {0};
    int id = c->next_id++;
    int rc = gen(c, s, &body);
    if (rc == 0)
        rc = add_rule(c, id, &body);
    free(body.p);
    return rc ? rc : sb_fmt(out, "%ss%d", c->prefix, id);
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

static int get_count(sctx *c, const cJSON *s, const char *key, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v)
        return 0;
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || !(d >= 0)) /* NaN too */
        return sch_fail(c, "'%s' must be a non-negative integer", key);
    if (d > SCH_MAX_REPEAT) /* before converting: a huge double has no long */
        return sch_fail(c, "'%s' above %d is not supported", key, SCH_MAX_REPEAT);
    if (d != (double)(long)d)
        return sch_fail(c, "'%s' must be a non-negative integer", key);
    *out = (long)d;
    return 1;
}

/* ---- the types ------------------------------------------------------------------- */

static int gen_string(sctx *c, const cJSON *s, brisk_buf *out) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    if (fmt) {
        static const char *const names[][2] = {
            {"date", "jdate"}, {"time", "jtime"}, {"date-time", "jdatetime"}, {"uuid", "juuid"}};
        for (size_t i = 0; cJSON_IsString(fmt) && i < sizeof names / sizeof *names; i++)
            if (!strcmp(fmt->valuestring, names[i][0]))
                return sb_str(out, names[i][1]);
        return sch_fail(c, "format '%.40s' is not supported (date, time, date-time, uuid are)",
                        cJSON_IsString(fmt) ? fmt->valuestring : "?");
    }
    long lo = 0, hi = -1;
    int rc;
    if ((rc = get_count(c, s, "minLength", &lo)) < 0 ||
        (rc = get_count(c, s, "maxLength", &hi)) < 0)
        return rc;
    if (hi >= 0 && hi < lo)
        return sch_fail(c, "maxLength is below minLength");
    if (lo == 0 && hi < 0)
        return sb_str(out, "js");
    return hi < 0 ? sb_fmt(out, "\"\\\"\" jc{%ld,} \"\\\"\"", lo)
                  : sb_fmt(out, "\"\\\"\" jc{%ld,%ld} \"\\\"\"", lo, hi);
}

static int gen_object_in(sctx *c, const cJSON *s, brisk_buf *out);
static int gen_array_in(sctx *c, const cJSON *s, brisk_buf *out);

/* An object or array opens with "{" or "[": the $ref chain starts over inside. */
static int gen_array(sctx *c, const cJSON *s, brisk_buf *out) {
    int saved = c->n_chain;
    c->n_chain = 0;
    int rc = gen_array_in(c, s, out);
    c->n_chain = saved;
    return rc;
}

static int gen_object(sctx *c, const cJSON *s, brisk_buf *out) {
    int saved = c->n_chain;
    c->n_chain = 0;
    int rc = gen_object_in(c, s, out);
    c->n_chain = saved;
    return rc;
}

static int gen_array_in(sctx *c, const cJSON *s, brisk_buf *out) {
    long lo = 0, hi = -1;
    int rc;
    if ((rc = get_count(c, s, "minItems", &lo)) < 0 || (rc = get_count(c, s, "maxItems", &hi)) < 0)
        return rc;
    if (hi >= 0 && hi < lo)
        return sch_fail(c, "maxItems is below minItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    brisk_buf item = {0};
    size_t at = path_push(c, "/items", "");
    rc = items ? gen_rule(c, items, &item) : sb_str(&item, "jv");
    c->path[at] = '\0';
    if (rc == 0) {
        if (hi == 0)
            rc = sb_str(out, "\"[\" ws \"]\"");
        else if (lo == 0)
            rc = hi < 0
                     ? sb_fmt(out, "\"[\" ws ( %s ws ( \",\" ws %s ws )* )? \"]\"", item.p, item.p)
                     : sb_fmt(out, "\"[\" ws ( %s ws ( \",\" ws %s ws ){0,%ld} )? \"]\"", item.p,
                              item.p, hi - 1);
        else
            rc = hi < 0 ? sb_fmt(out, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,} \"]\"", item.p,
                                 item.p, lo - 1)
                        : sb_fmt(out, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,%ld} \"]\"", item.p,
                                 item.p, lo - 1, hi - 1);
    }
    free(item.p);
    return rc;
}

static int is_required(const cJSON *req, const char *name) {
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
            return 1;
    return 0;
}

static int gen_object_in(sctx *c, const cJSON *s, brisk_buf *out) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return sch_fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return sch_fail(c, "'required' must be an array");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return sch_fail(c, "required property '%.40s' is not in 'properties'",
                            cJSON_IsString(r) ? r->valuestring : "?");
    int n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        n++;
    /* Extra members: additionalProperties true or a schema. Absent counts as
     * false where properties are listed (the output then still validates),
     * and as any object where none are. */
    brisk_buf extra = {0};
    int rc = 0;
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return sch_fail(c, "'additionalProperties' must be a boolean or a schema");
    if (cJSON_IsObject(ap)) {
        size_t at = path_push(c, "/additionalProperties", "");
        rc = gen_rule(c, ap, &extra);
        c->path[at] = '\0';
    } else if (cJSON_IsTrue(ap) || (!ap && n == 0)) {
        rc = sb_str(&extra, "jv");
    }
    if (rc < 0) {
        free(extra.p);
        return rc;
    }
    if (n == 0) {
        rc =
            extra.len
                ? sb_fmt(
                      out,
                      "\"{\" ws ( js ws \":\" ws %s ws ( \",\" ws js ws \":\" ws %s ws )* )? \"}\"",
                      extra.p, extra.p)
                : sb_str(out, "\"{\" ws \"}\"");
        free(extra.p);
        return rc;
    }
    /* start_i and tail_i for i = 0..n; their ids are base + i and base + n + 1 + i. */
    int base = c->next_id;
    c->next_id += 2 * (n + 1);
    int i = 0;
    for (const cJSON *p = props->child; p && rc == 0; p = p->next, i++) {
        brisk_buf member = {0}, val = {0}, start = {0}, tail = {0};
        size_t at = path_push(c, "/properties/", p->string);
        rc = gen_rule(c, p, &val);
        c->path[at] = '\0';
        cJSON *key = rc == 0 ? cJSON_CreateString(p->string) : NULL;
        if (rc == 0 && !key)
            rc = BRISK_ENOMEM;
        if (rc == 0)
            rc = sb_json_literal(c, &member, key);
        cJSON_Delete(key);
        if (rc == 0)
            rc = sb_fmt(&member, " ws \":\" ws %s ws", val.p);
        int opt = !is_required(req, p->string);
        if (rc == 0)
            rc = sb_fmt(&start, "%s %ss%d", member.p, c->prefix, base + n + 1 + i + 1);
        if (rc == 0 && opt)
            rc = sb_fmt(&start, " | %ss%d", c->prefix, base + i + 1);
        if (rc == 0)
            rc = add_rule(c, base + i, &start);
        if (rc == 0)
            rc = sb_fmt(&tail, "\",\" ws %s %ss%d", member.p, c->prefix, base + n + 1 + i + 1);
        if (rc == 0 && opt)
            rc = sb_fmt(&tail, " | %ss%d", c->prefix, base + n + 1 + i + 1);
        if (rc == 0)
            rc = add_rule(c, base + n + 1 + i, &tail);
        free(member.p);
        free(val.p);
        free(start.p);
        free(tail.p);
    }
    /* start_n, tail_n: the extra members, or nothing */
    brisk_buf start = {0}, tail = {0};
    if (rc == 0 && extra.len)
        rc = sb_fmt(&start, "( js ws \":\" ws %s ws ( \",\" ws js ws \":\" ws %s ws )* )?", extra.p,
                    extra.p);
    if (rc == 0)
        rc = add_rule(c, base + n, &start);
    if (rc == 0 && extra.len)
        rc = sb_fmt(&tail, "( \",\" ws js ws \":\" ws %s ws )*", extra.p);
    if (rc == 0)
        rc = add_rule(c, base + 2 * n + 1, &tail);
    free(start.p);
    free(tail.p);
    free(extra.p);
    return rc ? rc : sb_fmt(out, "\"{\" ws %ss%d \"}\"", c->prefix, base);
}

static int gen_type(sctx *c, const cJSON *s, const char *t, brisk_buf *out) {
    if (!strcmp(t, "string"))
        return gen_string(c, s, out);
    if (!strcmp(t, "number"))
        return sb_str(out, "jn");
    if (!strcmp(t, "integer"))
        return sb_str(out, "ji");
    if (!strcmp(t, "boolean"))
        return sb_str(out, "jb");
    if (!strcmp(t, "null"))
        return sb_str(out, "jz");
    if (!strcmp(t, "object"))
        return gen_object(c, s, out);
    if (!strcmp(t, "array"))
        return gen_array(c, s, out);
    return sch_fail(c, "type '%.40s' is unknown", t);
}

/* ---- $ref ------------------------------------------------------------------------ */

/* The node a local JSON pointer ("#/$defs/A", "~0" "~1" escapes) names. */
static const cJSON *resolve(const cJSON *root, const char *ref) {
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

static int gen_ref(sctx *c, const cJSON *ref, brisk_buf *out) {
    const cJSON *target = cJSON_IsString(ref) ? resolve(c->root, ref->valuestring) : NULL;
    if (!target)
        return sch_fail(c, "$ref '%.60s' is not a local reference brisk can resolve",
                        cJSON_IsString(ref) ? ref->valuestring : "?");
    for (int i = 0; i < c->n_chain; i++)
        if (c->chain[i] == target)
            return sch_fail(c, "$ref '%.60s' reaches itself before any value", ref->valuestring);
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == target)
            return sb_fmt(out, "%ss%d", c->prefix, c->refs[i].id);
    if (brisk_grow(&c->refs, &c->cap_refs, c->n_refs + 1, sizeof *c->refs, 8, 0) < 0)
        return BRISK_ENOMEM;
    int id = c->next_id++;
    c->refs[c->n_refs++] = (sref){target, id}; /* before the body: recursion finds it */
    brisk_buf body = {0};
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref->valuestring);
    if (c->n_chain >= SCH_MAX_DEPTH)
        return sch_fail(c, "$refs nest deeper than %d", SCH_MAX_DEPTH);
    c->chain[c->n_chain++] = target;
    int rc = gen(c, target, &body);
    c->n_chain--;
    memcpy(c->path, saved, sizeof saved);
    if (rc == 0)
        rc = add_rule(c, id, &body);
    free(body.p);
    return rc ? rc : sb_fmt(out, "%ss%d", c->prefix, id);
}

/* ---- a schema ------------------------------------------------------------------- */

static int gen_alternatives(sctx *c, const cJSON *list, const char *key, brisk_buf *out) {
    if (!cJSON_IsArray(list) || !list->child)
        return sch_fail(c, "'%s' must be a non-empty array", key);
    int rc = sb_str(out, "( "), k = 0;
    for (const cJSON *a = list->child; a && rc == 0; a = a->next, k++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", k);
        size_t at = path_push(c, "/", key);
        path_push(c, "/", idx);
        if (k)
            rc = sb_str(out, " | ");
        if (rc == 0)
            rc = gen_rule(c, a, out);
        c->path[at] = '\0';
    }
    return rc ? rc : sb_str(out, " )");
}

static int gen(sctx *c, const cJSON *s, brisk_buf *out) {
    if (++c->n_nodes > SRV_SCHEMA_MAX_NODES)
        return sch_fail(c, "more than %d subschemas", SRV_SCHEMA_MAX_NODES);
    if (c->depth >= SCH_MAX_DEPTH)
        return sch_fail(c, "schemas nest deeper than %d", SCH_MAX_DEPTH);
    if (cJSON_IsTrue(s))
        return sb_str(out, "jv");
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
    int or_null = cJSON_IsTrue(nullable);
    if (or_null && (rc = sb_str(out, "( jz | ")) < 0)
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
        rc = sb_json_literal(c, out, v);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(v) || !v->child) {
            rc = sch_fail(c, "'enum' must be a non-empty array");
            goto done;
        }
        rc = sb_str(out, "( ");
        for (const cJSON *e = v->child; e && rc == 0; e = e->next)
            if ((rc = e != v->child ? sb_str(out, " | ") : 0) == 0)
                rc = sb_json_literal(c, out, e);
        if (rc == 0)
            rc = sb_str(out, " )");
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) ||
               (v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        rc = gen_alternatives(c, v, v->string, out);
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
            rc = sb_str(out, "( ");
            for (const cJSON *t = v->child; t && rc == 0; t = t->next) {
                if (!cJSON_IsString(t)) {
                    rc = sch_fail(c, "'type' must hold strings");
                    break;
                }
                if ((rc = t != v->child ? sb_str(out, " | ") : 0) == 0)
                    rc = gen_type(c, s, t->valuestring, out);
            }
            if (rc == 0)
                rc = sb_str(out, " )");
        } else {
            rc = sch_fail(c, "'type' must be a string or a non-empty array");
        }
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") ||
               cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) {
        rc = gen_object(c, s, out);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items")) {
        rc = gen_array(c, s, out);
    } else {
        rc = sb_str(out, "jv"); /* no constraint: any JSON value */
    }
    if (rc == 0 && or_null)
        rc = sb_str(out, " )");
done:
    c->depth--;
    return rc;
}

int srv_schema_rules(const cJSON *schema, const char *prefix, char **rules, char **expr, char *err,
                     size_t err_len) {
    sctx c = {.root = schema, .err = err, .err_len = err_len, .path = "#", .prefix = prefix};
    *rules = *expr = NULL;
    brisk_buf top = {0};
    int rc = gen(&c, schema, &top);
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
    if (t)
        snprintf(t, n, "%sroot ::= ws %s ws\n%s", rules, expr, SCH_BASE);
    free(rules);
    free(expr);
    if (!t) {
        brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory converting the schema");
        return BRISK_ENOMEM;
    }
    *out = t;
    return 0;
}
