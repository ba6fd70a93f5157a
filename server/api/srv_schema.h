/* srv_schema.h - a JSON Schema from a request into GBNF text for the grammar
 * engine (models/grammar.h): structured outputs (response_format
 * json_schema, vLLM's guided_json and structured_outputs.json, llama.cpp's
 * json_schema) and tools' parameters.
 *
 * Supported: type (one or a list; without one, the types its keywords
 * speak of), properties (in the schema's order; the output keeps that
 * order), required, additionalProperties (false, true or a schema; absent =
 * false where properties are listed; additional keys never repeat a
 * declared name), minProperties, maxProperties, items, prefixItems,
 * minItems, maxItems, uniqueItems (over at most 8 enum/const/boolean/null
 * values), enum, const, anyOf and oneOf (both as "any of"), a discriminator
 * (OpenAPI: its mapping fixes each branch's tag), allOf of one schema, $ref
 * to "#/$defs/..." or "#/definitions/..." (recursion allowed), minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum (integers exactly, numbers as
 * decimals of up to 16 places), multipleOf (integers), string minLength,
 * maxLength, pattern and format (date, time, date-time, uuid, email, uri,
 * ipv4, ipv6, hostname), nullable (OpenAPI), and the annotations (title,
 * description, default, examples, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly), which change nothing. Where a grammar can only
 * approximate a keyword it writes a subset of the valid values, never an
 * invalid one (srv_schema_num.c and srv_schema_str.c say where). Refused
 * with an error naming the keyword and where it is: patternProperties,
 * propertyNames, contains, minContains, maxContains, not, if, then, else,
 * dependentRequired, dependentSchemas, dependencies, unevaluatedProperties,
 * unevaluatedItems, additionalItems, contentEncoding, contentMediaType, other
 * formats, remote $refs, allOf of several schemas, a $ref that reaches
 * itself before any value (a rule that would be left-recursive), strings
 * that are not valid UTF-8, and the combinations no grammar can keep
 * exactly (multipleOf other than a positive integer, uniqueItems over other
 * items, minProperties above the declared properties plus one beside
 * additional ones, a format or pattern with lengths it does not meet, ...).
 * Other unknown keywords are ignored, as JSON Schema asks.
 *
 * The input is hostile: sizes are bounded (SRV_SCHEMA_MAX_NODES schemas,
 * the grammar's own limits on its text), recursion is bounded by the JSON
 * nesting the request parser allows, and every failure is an error. */
#ifndef SRV_SCHEMA_H
#define SRV_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define SRV_SCHEMA_MAX_NODES 4096 /* subschemas visited, $ref targets included */

/* Writes *out (malloc'd GBNF, NUL-terminated; its "root" rule is optional
 * whitespace then the schema's value, which ends the text: nothing may
 * follow its last character) and returns 0; or
 * returns BRISK_EINVAL with a one-line reason in err (the keyword and its
 * JSON pointer), or BRISK_ENOMEM. */
int srv_schema_to_gbnf(const cJSON *schema, char **out, char *err, size_t err_len);

/* The same as parts to combine: the rules of the schema (every name starting
 * with prefix, so several schemas can share one grammar) and the GBNF
 * expression of its value, both malloc'd; they use the shared rules of
 * srv_schema_base() (ws, the JSON primitives), which the caller appends
 * once. Errors as above. */
int srv_schema_rules(const cJSON *schema, const char *prefix, char **rules, char **expr, char *err,
                     size_t err_len);
const char *srv_schema_base(void);

#endif
