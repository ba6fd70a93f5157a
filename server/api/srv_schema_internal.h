/* srv_schema_internal.h - what the parts of the JSON Schema converter share
 * (srv_schema.c: the walk, $ref, alternatives; srv_schema_num.c: integers
 * and numbers with ranges and multipleOf; srv_schema_str.c: strings with
 * lengths, formats and pattern; srv_schema_obj.c: objects and arrays).
 *
 * Every generator appends the GBNF expression of one value to out and may
 * add rules to c->rules (each "<prefix>sN ::= ...", N from c->next_id); it
 * returns 0, BRISK_EINVAL after sch_fail (the reason names the keyword and
 * c->path says where), BRISK_ERANGE (the text grew past SCH_MAX_TEXT) or
 * BRISK_ENOMEM. Output written before a failure is the caller's to free. */
#ifndef SRV_SCHEMA_INTERNAL_H
#define SRV_SCHEMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/brisk_buf.h"

#define SCH_MAX_DEPTH 64
#define SCH_MAX_REPEAT 1000 /* the grammar's largest {m,n} */
#define SCH_MAX_TEXT (60 * 1024)
#define SCH_MAX_BRANCHES 256 /* a discriminated union's branches, and its mapping */

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
    /* Shared helper rules already written (bit k: that rule exists):
     * digits_upto, "[0-9]{0,k}"; zeros_upto, "\"0\"{0,k}"; formats, one
     * bit per string format. */
    uint64_t digits_upto, zeros_upto;
    uint32_t formats;
    /* A discriminator's branch being written: the next object must hold
     * property disc_prop with the value disc_value (srv_schema_obj.c). */
    const char *disc_prop;
    const cJSON *disc_value;
    char *err;
    size_t err_len;
} sctx;

int sch_fail(sctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appending to a text under SCH_MAX_TEXT: 0, BRISK_ERANGE or BRISK_ENOMEM. */
int sch_add(brisk_buf *b, const char *s, size_t n);
int sch_str(brisk_buf *b, const char *s);
/* A piece of at most 255 bytes. */
int sch_fmt(brisk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF literal of the bytes of s (quotes, backslashes, controls escaped). */
int sch_literal(brisk_buf *b, const char *s);
/* The GBNF literal of JSON value v written compactly. */
int sch_json_literal(sctx *c, brisk_buf *b, const cJSON *v);

/* Appends "<prefix>s<id> ::= body" to c->rules. */
int sch_add_rule(sctx *c, int id, const brisk_buf *body);
/* The node a local JSON pointer ("#/$defs/A", "~0" "~1" escapes) names in
 * root, or NULL. */
const cJSON *sch_resolve(const cJSON *root, const char *ref);
/* A new rule for subschema s; its name goes into out. */
int sch_gen_rule(sctx *c, const cJSON *s, brisk_buf *out);
/* The expression of subschema s, into out. */
int sch_gen(sctx *c, const cJSON *s, brisk_buf *out);
/* Appends prefix then name to c->path; returns the length to cut it back to. */
size_t sch_path_push(sctx *c, const char *prefix, const char *name);
/* A count keyword (minLength, maxItems, ...) of s: 1 and *out when present,
 * 0 when absent, or an error when not an integer in 0..SCH_MAX_REPEAT. */
int sch_get_count(sctx *c, const cJSON *s, const char *key, long *out);
/* The same with another ceiling than SCH_MAX_REPEAT. */
int sch_get_count_max(sctx *c, const cJSON *s, const char *key, long max, long *out);
/* The name of a helper rule "[0-9]{0,k}" (k <= 63), written once; with
 * zeros, "\"0\"{0,k}". */
int sch_digits_upto(sctx *c, brisk_buf *out, int k, int zeros);

/* The value generators by type. */
int sch_gen_integer(sctx *c, const cJSON *s, brisk_buf *out);
int sch_gen_number(sctx *c, const cJSON *s, brisk_buf *out);
int sch_gen_string(sctx *c, const cJSON *s, brisk_buf *out);
int sch_gen_object(sctx *c, const cJSON *s, brisk_buf *out);
int sch_gen_array(sctx *c, const cJSON *s, brisk_buf *out);

#endif
