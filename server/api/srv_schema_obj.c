/* srv_schema_obj.c - objects (properties, required, additionalProperties,
 * minProperties, maxProperties, a discriminator's tag) and arrays (items,
 * prefixItems, minItems, maxItems, uniqueItems) (see srv_schema.h).
 *
 * An object's properties come in the schema's order, each optional one
 * present or not, through rules R(i, k): "property i is next and k members
 * are written" (k counts up to maxProperties, or to minProperties when there
 * is no maximum; k > 0 says a comma comes first). Only states from which the
 * bounds can still be met are written, so the model can never reach a dead
 * end. Additional members come last; their keys are never a declared
 * property's name (a repeated key would take the declared value's place),
 * and since two of them could repeat each other, at most one counts towards
 * minProperties.
 *
 * uniqueItems is exact when the items have a small set of values (an enum,
 * a const, booleans, null: at most SO_MAX_UNIQUE values): a rule per set of
 * values already written. Over any other items it is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "common/brisk_utf8.h"
#include "server/api/srv_schema_internal.h"

#define SO_MAX_RULES 2048     /* rules an object's member counting may take */
#define SO_MAX_UNIQUE 8       /* values of uniqueItems' items: 2^8 states */
#define SO_MAX_KEY_NODES 1024 /* characters of declared names behind additional keys */
#define SO_MAX_PREFIX 256     /* prefixItems */

/* ---- additional keys ------------------------------------------------------------ */

/* A trie of the declared names' characters. */
typedef struct knode {
    unsigned cp;
    int first, next; /* first child, next sibling (-1: none) */
    int word;        /* a declared name ends here */
    int id;          /* its rule */
} knode;

typedef struct ktrie {
    knode *n;
    size_t len, cap;
} ktrie;

static int kt_add(ktrie *t, unsigned cp) {
    if (brisk_grow(&t->n, &t->cap, t->len + 1, sizeof *t->n, 16, 0) < 0)
        return BRISK_ENOMEM;
    t->n[t->len] = (knode){cp, -1, -1, 0, 0};
    return (int)t->len++;
}

/* One code point of valid UTF-8 at *s. */
static unsigned utf8_cp(const char **s) {
    const unsigned char *p = (const unsigned char *)*s;
    int n = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3 : 4;
    unsigned v = n == 1 ? p[0] : p[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++)
        v = v << 6 | (p[i] & 0x3Fu);
    *s += n;
    return v;
}

static int json_special(unsigned cp) {
    return cp < 0x20 || cp == '"' || cp == '\\';
}

/* The GBNF literal of the one spelling brisk allows for code point cp in a
 * key near a declared name: the character itself, or for '"', '\' and the
 * controls their escape. */
static int put_spelling(brisk_buf *o, unsigned cp) {
    static const char esc[][2] = {{'"', '"'},  {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'},
                                  {'\n', 'n'}, {'\r', 'r'},  {'\t', 't'}};
    if (!json_special(cp))
        return sch_fmt(o, cp <= 0xFFFF ? "\"\\u%04X\"" : "\"\\U%08X\"", cp);
    for (size_t i = 0; i < sizeof esc / sizeof *esc; i++)
        if ((unsigned char)esc[i][0] == cp)
            return sch_fmt(o, "\"\\\\%s%c\"", cp == '"' || cp == '\\' ? "\\" : "", esc[i][1]);
    return sch_fmt(o, "\"\\\\u%04X\"", cp);
}

/* Rule of trie node v: the rest of a key whose characters so far spell v's
 * path. Either it ends here (when that is no declared name), or goes on
 * along a child, or leaves the trie with a character (or an escape) that no
 * child spells, and then anything may follow. Unicode escapes are offered
 * only where no child is ("\u0061" would spell 'a'). */
static int kt_rule(sctx *c, const ktrie *t, int v) {
    brisk_buf b = {0}, cls = {0};
    int rc = 0, alts = 0;
    if (!t->n[v].word) {
        rc = sch_str(&b, "\"\\\"\"");
        alts++;
    }
    int nkids = 0;
    for (int k = t->n[v].first; k >= 0 && rc == 0; k = t->n[k].next, nkids++) {
        rc = sch_str(&b, alts++ ? " | " : "");
        rc = rc ? rc : put_spelling(&b, t->n[k].cp);
        rc = rc ? rc : sch_fmt(&b, " %ss%d", c->prefix, t->n[k].id);
    }
    if (nkids > 200)
        rc = sch_fail(c, "more than 200 property names differ at one character beside "
                         "additionalProperties");
    /* the characters leaving the trie */
    rc = rc ? rc : sch_str(&cls, "[^\"\\\\\\x00-\\x1F");
    for (int k = t->n[v].first; k >= 0 && rc == 0; k = t->n[k].next)
        if (!json_special(t->n[k].cp))
            rc = sch_fmt(&cls, t->n[k].cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", t->n[k].cp);
    rc = rc ? rc : sch_str(&cls, "]");
    static const char short_esc[][2] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {'\b', 'b'},
                                        {'\f', 'f'}, {'\n', 'n'},  {'\r', 'r'}, {'\t', 't'}};
    char letters[16];
    int nl = 0;
    for (size_t i = 0; i < sizeof short_esc / sizeof *short_esc; i++) {
        int taken = 0;
        for (int k = t->n[v].first; k >= 0; k = t->n[k].next)
            taken |= t->n[k].cp == (unsigned char)short_esc[i][0];
        if (!taken) {
            if (short_esc[i][1] == '"' || short_esc[i][1] == '\\')
                letters[nl++] = '\\';
            letters[nl++] = short_esc[i][1];
        }
    }
    letters[nl] = '\0';
    rc = rc ? rc : sch_str(&b, alts ? " | ( " : "( ");
    rc = rc ? rc : sch_str(&b, cls.p);
    if (rc == 0 && nl)
        rc = sch_fmt(&b, " | \"\\\\\" [%s]", letters);
    if (rc == 0 && nkids == 0) /* no child for an escape to spell */
        rc = sch_str(&b, " | \"\\\\u\" [0-9a-fA-F]{4}");
    rc = rc ? rc : sch_str(&b, " ) jc* \"\\\"\"");
    rc = rc ? rc : sch_add_rule(c, t->n[v].id, &b);
    free(b.p);
    free(cls.p);
    return rc;
}

/* The expression of a key that is none of the names of props. */
static int gen_other_key(sctx *c, const cJSON *props, brisk_buf *out) {
    ktrie t = {0};
    int rc = kt_add(&t, 0) < 0 ? BRISK_ENOMEM : 0;
    for (const cJSON *p = props->child; p && rc == 0; p = p->next) {
        if (!brisk_utf8_valid(p->string, strlen(p->string))) {
            rc = sch_fail(c, "a property name is not valid UTF-8");
            break;
        }
        int at = 0;
        for (const char *s = p->string; *s && rc == 0;) {
            unsigned cp = utf8_cp(&s);
            int k = t.n[at].first;
            while (k >= 0 && t.n[k].cp != cp)
                k = t.n[k].next;
            if (k < 0) {
                if (t.len >= SO_MAX_KEY_NODES) {
                    rc = sch_fail(c,
                                  "more than %d characters of property names beside "
                                  "additionalProperties",
                                  SO_MAX_KEY_NODES);
                    break;
                }
                if ((k = kt_add(&t, cp)) < 0) {
                    rc = BRISK_ENOMEM;
                    break;
                }
                t.n[k].next = t.n[at].first;
                t.n[at].first = k;
            }
            at = k;
        }
        if (rc == 0)
            t.n[at].word = 1;
    }
    for (size_t i = 0; i < t.len && rc == 0; i++)
        t.n[i].id = c->next_id++;
    for (size_t i = 0; i < t.len && rc == 0; i++)
        rc = kt_rule(c, &t, (int)i);
    if (rc == 0)
        rc = sch_fmt(out, "\"\\\"\" %ss%d", c->prefix, t.n[0].id);
    free(t.n);
    return rc;
}

/* ---- objects ----------------------------------------------------------------------- */

static int is_required(const cJSON *req, const char *name) {
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
            return 1;
    return 0;
}

/* Whether the value v is allowed by a discriminator property's own schema
 * (a const or an enum there must hold it; other schemas are not checked
 * against the tag, which the branch's author chose). */
static int tag_allowed(const cJSON *prop, const cJSON *v) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(prop, "const");
    if (k)
        return cJSON_Compare(k, v, 1);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(prop, "enum");
    if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next)
            if (cJSON_Compare(x, v, 1))
                return 1;
        return 0;
    }
    return 1;
}

typedef struct oplan {
    int n;          /* declared properties */
    int cap;        /* counts kept: 0..cap */
    long lo, hi;    /* minProperties, maxProperties (-1: none) */
    int extra;      /* additional members allowed */
    int *req_after; /* [n + 1]: required properties among i..n-1 */
    int base;       /* rule R(i, k) is base + i * (cap + 1) + k */
} oplan;

static int live(const oplan *p, int i, int k) {
    if (p->hi >= 0 && k + p->req_after[i] > p->hi)
        return 0;
    return k + (p->n - i) + (p->extra ? 1 : 0) >= p->lo;
}

static int next_k(const oplan *p, int k) {
    return k + 1 > p->cap ? p->cap : k + 1;
}

/* The text of "up to j more additional members, each after a comma": rule
 * xbase + j (nothing for j = 0), or xbase alone when there is no maximum. */
static void chain_name(sctx *c, const oplan *p, long j, int xbase, char *buf, size_t n) {
    if (p->hi < 0)
        snprintf(buf, n, " %ss%d", c->prefix, xbase);
    else if (j <= 0)
        buf[0] = '\0';
    else
        snprintf(buf, n, " %ss%d", c->prefix, xbase + (int)j);
}

/* Rule R(n, k): the additional members, e_min..e_max of them, where e_min
 * is 0 or 1 (live() allows no more). */
static int extras_rule(sctx *c, const oplan *p, int k, const char *xm, int xbase, brisk_buf *b) {
    long e_min = p->lo > k ? p->lo - k : 0;
    long e_max = p->hi >= 0 ? p->hi - k : -1;
    char chain[48];
    if (!p->extra || e_max == 0)
        return 0;
    if (k == 0) { /* the first member has no comma */
        chain_name(c, p, e_max - 1, xbase, chain, sizeof chain);
        return e_min ? sch_fmt(b, "%s%s", xm, chain) : sch_fmt(b, "( %s%s )?", xm, chain);
    }
    if (e_min) {
        chain_name(c, p, e_max - 1, xbase, chain, sizeof chain);
        return sch_fmt(b, "\",\" ws %s%s", xm, chain);
    }
    chain_name(c, p, e_max, xbase, chain, sizeof chain);
    return sch_str(b, chain[0] ? chain + 1 : "");
}

static int gen_object_in(sctx *c, const cJSON *s, brisk_buf *out) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    /* a discriminator's branch: the tag is fixed here and not below */
    const char *tag = c->disc_prop;
    const cJSON *tag_value = c->disc_value;
    c->disc_prop = NULL;
    c->disc_value = NULL;
    if (props && !cJSON_IsObject(props))
        return sch_fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return sch_fail(c, "'required' must be an array");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return sch_fail(c, "required property '%.40s' is not in 'properties'",
                            cJSON_IsString(r) ? r->valuestring : "?");
    if (tag && !cJSON_GetObjectItemCaseSensitive(props, tag))
        return sch_fail(c,
                        "the discriminator's property '%.40s' is not in the branch's "
                        "'properties'",
                        tag);
    oplan p = {.lo = 0, .hi = -1};
    int rc;
    if ((rc = sch_get_count(c, s, "minProperties", &p.lo)) < 0 ||
        (rc = sch_get_count(c, s, "maxProperties", &p.hi)) < 0)
        return rc;
    rc = 0;
    if (p.hi >= 0 && p.hi < p.lo)
        return sch_fail(c, "maxProperties is below minProperties");
    for (const cJSON *q = props ? props->child : NULL; q; q = q->next)
        p.n++;
    /* Extra members: additionalProperties true or a schema. Absent counts as
     * false where properties are listed (the output then still validates),
     * and as any object where none are. */
    brisk_buf extra = {0}, key = {0};
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return sch_fail(c, "'additionalProperties' must be a boolean or a schema");
    if (cJSON_IsObject(ap)) {
        size_t at = sch_path_push(c, "/additionalProperties", "");
        rc = sch_gen_rule(c, ap, &extra);
        c->path[at] = '\0';
    } else if (cJSON_IsTrue(ap) || (!ap && p.n == 0)) {
        rc = sch_str(&extra, "jv");
    }
    p.extra = extra.len > 0;
    if (rc == 0 && p.extra)
        rc = p.n ? gen_other_key(c, props, &key) : sch_str(&key, "js");
    char *xm = NULL; /* one additional member */
    if (rc == 0 && p.extra) {
        brisk_buf m = {0};
        rc = sch_fmt(&m, "%s ws \":\" ws ", key.p);
        rc = rc ? rc : sch_str(&m, extra.p);
        rc = rc ? rc : sch_str(&m, " ws");
        size_t n;
        xm = rc == 0 ? brisk_buf_take(&m, &n) : NULL;
        free(m.p);
        if (rc == 0 && !xm)
            rc = BRISK_ENOMEM;
    }
    free(key.p);
    free(extra.p);
    if (rc < 0) {
        free(xm);
        return rc;
    }
    if (p.n == 0 && !p.extra) {
        free(xm);
        if (p.lo > 0)
            return sch_fail(c, "'minProperties' cannot be met without properties");
        return sch_str(out, "\"{\" ws \"}\"");
    }
    if (p.extra && p.lo > p.n + 1) {
        free(xm);
        return sch_fail(c, "'minProperties' above the declared properties plus one is not "
                           "supported (additional keys could repeat each other)");
    }
    /* counts kept: up to the maximum, or the minimum (beyond it no count
     * matters), never more than the members there can be; at least 1, which
     * says whether a comma comes first */
    p.cap = (int)(p.hi >= 0 ? p.hi : p.lo);
    if (!p.extra && p.cap > p.n)
        p.cap = p.n;
    if (p.cap < 1)
        p.cap = 1;
    if ((long)(p.n + 1) * (p.cap + 1) > SO_MAX_RULES) {
        free(xm);
        return sch_fail(c, "'maxProperties' over %d properties makes too large a grammar", p.n);
    }
    p.req_after = brisk_calloc((size_t)p.n + 1, sizeof *p.req_after);
    if (!p.req_after) {
        free(xm);
        return BRISK_ENOMEM;
    }
    {
        int i = 0;
        for (const cJSON *q = props ? props->child : NULL; q; q = q->next, i++)
            p.req_after[i] = is_required(req, q->string) || (tag && !strcmp(q->string, tag));
        for (i = p.n - 1; i >= 0; i--) /* suffix sums */
            p.req_after[i] += p.req_after[i + 1];
    }
    if (!live(&p, 0, 0)) {
        free(xm);
        free(p.req_after);
        return sch_fail(c, "no object meets 'minProperties'/'maxProperties' with these "
                           "properties");
    }
    p.base = c->next_id;
    c->next_id += (p.n + 1) * (p.cap + 1);
    /* the chain rules of additional members, X0..X(hi), or one for no bound */
    int xbase = c->next_id;
    if (p.extra) {
        int nx = p.hi >= 0 ? (int)p.hi + 1 : 1;
        c->next_id += nx;
        for (int j = 0; j < nx && rc == 0; j++) {
            brisk_buf b = {0};
            if (p.hi < 0)
                rc = sch_fmt(&b, "( \",\" ws %s )*", xm);
            else if (j > 0)
                rc = sch_fmt(&b, "( \",\" ws %s %ss%d )?", xm, c->prefix, xbase + j - 1);
            rc = rc ? rc : sch_add_rule(c, xbase + j, &b);
            free(b.p);
        }
    }
    int i = 0;
    for (const cJSON *q = props ? props->child : NULL; rc == 0 && i <= p.n;
         q = q ? q->next : NULL, i++) {
        brisk_buf member = {0}, val = {0};
        int opt = 1;
        if (i < p.n) {
            opt = !is_required(req, q->string) && !(tag && !strcmp(q->string, tag));
            size_t at = sch_path_push(c, "/properties/", q->string);
            if (tag && !strcmp(q->string, tag)) {
                if (!tag_allowed(q, tag_value))
                    rc = sch_fail(c, "the discriminator's mapping gives a value its "
                                     "property does not allow");
                else
                    rc = sch_json_literal(c, &val, tag_value);
            } else {
                rc = sch_gen_rule(c, q, &val);
            }
            c->path[at] = '\0';
            cJSON *kj = rc == 0 ? cJSON_CreateString(q->string) : NULL;
            if (rc == 0 && !kj)
                rc = BRISK_ENOMEM;
            if (rc == 0)
                rc = sch_json_literal(c, &member, kj);
            cJSON_Delete(kj);
            if (rc == 0)
                rc = sch_fmt(&member, " ws \":\" ws ");
            rc = rc ? rc : sch_str(&member, val.p);
            rc = rc ? rc : sch_str(&member, " ws");
        }
        for (int k = 0; k <= p.cap && rc == 0; k++) {
            if (!live(&p, i, k))
                continue;
            brisk_buf b = {0};
            if (i == p.n) {
                rc = extras_rule(c, &p, k, xm, xbase, &b);
            } else {
                int alts = 0, k1 = next_k(&p, k);
                if ((p.hi < 0 || k + 1 <= p.hi) && live(&p, i + 1, k1)) {
                    rc = sch_fmt(&b, "%s", k ? "\",\" ws " : "");
                    rc = rc ? rc : sch_str(&b, member.p);
                    rc = rc ? rc
                            : sch_fmt(&b, " %ss%d", c->prefix, p.base + (i + 1) * (p.cap + 1) + k1);
                    alts++;
                }
                if (rc == 0 && opt && live(&p, i + 1, k)) {
                    rc = sch_fmt(&b, "%s%ss%d", alts ? " | " : "", c->prefix,
                                 p.base + (i + 1) * (p.cap + 1) + k);
                    alts++;
                }
            }
            rc = rc ? rc : sch_add_rule(c, p.base + i * (p.cap + 1) + k, &b);
            free(b.p);
        }
        free(member.p);
        free(val.p);
    }
    free(xm);
    free(p.req_after);
    return rc ? rc : sch_fmt(out, "\"{\" ws %ss%d \"}\"", c->prefix, p.base);
}

/* ---- arrays ------------------------------------------------------------------------ */

/* The values of a schema with a small finite set of them, deduplicated (as
 * JSON compares: 1 and 1.0 are one value), into vals (at most max; the ones
 * made here are owned by holder). 1 when finite, 0 when not (or too many),
 * BRISK_ENOMEM. */
static int add_value(const cJSON *v, const cJSON **vals, int *n, int max) {
    for (int i = 0; i < *n; i++)
        if (cJSON_Compare(vals[i], v, 1))
            return 1;
    if (*n >= max)
        return 0;
    vals[(*n)++] = v;
    return 1;
}

/* A value made here (true, false, null): into holder, then the set. */
static int add_made(cJSON *v, cJSON *holder, const cJSON **vals, int *n, int max) {
    if (!v)
        return BRISK_ENOMEM;
    cJSON_AddItemToArray(holder, v);
    return add_value(v, vals, n, max);
}

static int finite_values(sctx *c, const cJSON *s, cJSON *holder, const cJSON **vals, int *n,
                         int max, int depth) {
    if (!cJSON_IsObject(s) || depth > 8)
        return 0;
    const cJSON *v;
    int rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const cJSON *t = cJSON_IsString(v) ? sch_resolve(c->root, v->valuestring) : NULL;
        return t ? finite_values(c, t, holder, vals, n, max, depth + 1) : 0;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable")) &&
        (rc = add_made(cJSON_CreateNull(), holder, vals, n, max)) <= 0)
        return rc;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "const")))
        return add_value(v, vals, n, max);
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next)
            if (!add_value(e, vals, n, max))
                return 0;
        return cJSON_IsArray(v) && v->child;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) ||
        (v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next)
            if ((rc = finite_values(c, e, holder, vals, n, max, depth + 1)) <= 0)
                return rc;
        return cJSON_IsArray(v) && v->child;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int ok = 0;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : (cJSON *)t; e;
         e = cJSON_IsArray(t) ? e->next : NULL) {
        if (!cJSON_IsString(e))
            return 0;
        if (!strcmp(e->valuestring, "boolean")) {
            if ((rc = add_made(cJSON_CreateFalse(), holder, vals, n, max)) <= 0 ||
                (rc = add_made(cJSON_CreateTrue(), holder, vals, n, max)) <= 0)
                return rc;
        } else if (!strcmp(e->valuestring, "null")) {
            if ((rc = add_made(cJSON_CreateNull(), holder, vals, n, max)) <= 0)
                return rc;
        } else {
            return 0;
        }
        ok = 1;
    }
    return ok;
}

/* uniqueItems over a finite item set: rule U(S) for each set S of values
 * already written; lo..hi items. */
static int gen_unique(sctx *c, const cJSON **vals, int nv, long lo, long hi, brisk_buf *out) {
    if (lo > nv)
        return sch_fail(c, "'minItems' above the %d distinct values 'uniqueItems' allows", nv);
    int base = c->next_id, rc = 0;
    c->next_id += 1 << nv;
    brisk_buf lit[SO_MAX_UNIQUE];
    memset(lit, 0, sizeof lit);
    for (int i = 0; i < nv && rc == 0; i++)
        rc = sch_json_literal(c, &lit[i], vals[i]);
    for (int set = 0; set < (1 << nv) && rc == 0; set++) {
        int size = __builtin_popcount((unsigned)set), alts = 0;
        brisk_buf b = {0};
        for (int i = 0; i < nv && rc == 0 && (hi < 0 || size < hi); i++)
            if (!(set & (1 << i))) {
                rc = sch_fmt(&b, "%s%s", alts ? " | " : "( ", size ? "\",\" ws " : "");
                rc = rc ? rc : sch_str(&b, lit[i].p);
                rc = rc ? rc : sch_fmt(&b, " ws %ss%d", c->prefix, base + (set | 1 << i));
                alts++;
            }
        if (rc == 0 && alts) /* the array may end here when it holds enough */
            rc = sch_str(&b, size >= lo ? " )?" : " )");
        rc = rc ? rc : sch_add_rule(c, base + set, &b);
        free(b.p);
    }
    for (int i = 0; i < nv; i++)
        free(lit[i].p);
    return rc ? rc : sch_fmt(out, "\"[\" ws %ss%d \"]\"", c->prefix, base);
}

static int gen_array_in(sctx *c, const cJSON *s, brisk_buf *out) {
    long lo = 0, hi = -1;
    int rc, has_hi;
    if ((rc = sch_get_count(c, s, "minItems", &lo)) < 0 ||
        (rc = has_hi = sch_get_count(c, s, "maxItems", &hi)) < 0)
        return rc;
    rc = 0;
    if (!has_hi)
        hi = -1;
    if (hi >= 0 && hi < lo)
        return sch_fail(c, "maxItems is below minItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (prefix && (!cJSON_IsArray(prefix) || cJSON_GetArraySize(prefix) > SO_MAX_PREFIX))
        return sch_fail(c, "'prefixItems' must be an array of at most %d schemas", SO_MAX_PREFIX);
    if (uniq && !cJSON_IsBool(uniq))
        return sch_fail(c, "'uniqueItems' must be a boolean");
    int n_prefix = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (cJSON_IsFalse(items)) { /* nothing after the prefix */
        if (lo > n_prefix)
            return sch_fail(c, "'minItems' above the prefixItems with 'items' false");
        if (hi < 0 || hi > n_prefix)
            hi = n_prefix;
    }
    if (cJSON_IsTrue(uniq) && (hi < 0 || hi > 1)) {
        const cJSON *vals[SO_MAX_UNIQUE];
        int nv = 0;
        cJSON *holder = cJSON_CreateArray();
        if (!holder)
            return BRISK_ENOMEM;
        int finite =
            !prefix && items ? finite_values(c, items, holder, vals, &nv, SO_MAX_UNIQUE, 0) : 0;
        rc = finite < 0 ? finite
             : finite   ? gen_unique(c, vals, nv, lo, hi, out)
                        : sch_fail(c,
                                   "'uniqueItems' is supported over items of at most %d values "
                                     "(an enum, const, boolean or null), without prefixItems",
                                   SO_MAX_UNIQUE);
        cJSON_Delete(holder);
        return rc;
    }
    brisk_buf item = {0};
    size_t at = sch_path_push(c, "/items", "");
    if (cJSON_IsFalse(items))
        rc = 0;
    else
        rc = items ? sch_gen_rule(c, items, &item) : sch_str(&item, "jv");
    c->path[at] = '\0';
    if (rc == 0 && !prefix) {
        if (hi == 0)
            rc = sch_str(out, "\"[\" ws \"]\"");
        else if (lo == 0)
            rc = hi < 0
                     ? sch_fmt(out, "\"[\" ws ( %s ws ( \",\" ws %s ws )* )? \"]\"", item.p, item.p)
                     : sch_fmt(out, "\"[\" ws ( %s ws ( \",\" ws %s ws ){0,%ld} )? \"]\"", item.p,
                               item.p, hi - 1);
        else
            rc = hi < 0 ? sch_fmt(out, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,} \"]\"", item.p,
                                  item.p, lo - 1)
                        : sch_fmt(out, "\"[\" ws %s ws ( \",\" ws %s ws ){%ld,%ld} \"]\"", item.p,
                                  item.p, lo - 1, hi - 1);
        free(item.p);
        return rc;
    }
    /* A tuple: rule T(j) has j items written, j = 0..n_prefix; T(n_prefix)
     * takes the items after the prefix. */
    int base = c->next_id;
    c->next_id += n_prefix + 1;
    int j = 0;
    for (const cJSON *e = prefix ? prefix->child : NULL; e && rc == 0; e = e->next, j++) {
        char idx[24];
        snprintf(idx, sizeof idx, "/prefixItems/%d", j);
        brisk_buf v = {0}, b = {0};
        size_t at2 = sch_path_push(c, idx, "");
        rc = sch_gen_rule(c, e, &v);
        c->path[at2] = '\0';
        if (rc == 0 && (hi < 0 || j < hi))
            rc = sch_fmt(&b, "( %s%s ws %ss%d )%s", j ? "\",\" ws " : "", v.p, c->prefix,
                         base + j + 1, j >= lo ? "?" : "");
        rc = rc ? rc : sch_add_rule(c, base + j, &b);
        free(v.p);
        free(b.p);
    }
    if (rc == 0) {
        brisk_buf b = {0};
        long e_min = lo > n_prefix ? lo - n_prefix : 0;
        long e_max = hi < 0 ? -1 : hi - n_prefix;
        if (item.len && e_max != 0) {
            if (n_prefix == 0 && e_min == 0)
                rc = e_max < 0 ? sch_fmt(&b, "( %s ws ( \",\" ws %s ws )* )?", item.p, item.p)
                               : sch_fmt(&b, "( %s ws ( \",\" ws %s ws ){0,%ld} )?", item.p, item.p,
                                         e_max - 1);
            else if (n_prefix == 0)
                rc = e_max < 0
                         ? sch_fmt(&b, "%s ws ( \",\" ws %s ws ){%ld,}", item.p, item.p, e_min - 1)
                         : sch_fmt(&b, "%s ws ( \",\" ws %s ws ){%ld,%ld}", item.p, item.p,
                                   e_min - 1, e_max - 1);
            else
                rc = e_max < 0 ? sch_fmt(&b, "( \",\" ws %s ws ){%ld,}", item.p, e_min)
                               : sch_fmt(&b, "( \",\" ws %s ws ){%ld,%ld}", item.p, e_min, e_max);
        }
        rc = rc ? rc : sch_add_rule(c, base + n_prefix, &b);
        free(b.p);
    }
    free(item.p);
    return rc ? rc : sch_fmt(out, "\"[\" ws %ss%d \"]\"", c->prefix, base);
}

/* An object or array opens with "{" or "[": the $ref chain starts over inside. */
int sch_gen_array(sctx *c, const cJSON *s, brisk_buf *out) {
    int saved = c->n_chain;
    c->n_chain = 0;
    int rc = gen_array_in(c, s, out);
    c->n_chain = saved;
    return rc;
}

int sch_gen_object(sctx *c, const cJSON *s, brisk_buf *out) {
    int saved = c->n_chain;
    c->n_chain = 0;
    int rc = gen_object_in(c, s, out);
    c->n_chain = saved;
    return rc;
}
