/* srv_schema.h - a JSON Schema from a request into GBNF text for the grammar
 * engine (models/grammar.h): structured outputs (response_format
 * json_schema, vLLM's guided_json and structured_outputs.json, llama.cpp's
 * json_schema).
 *
 * Supported: type (one or a list), properties (in the schema's order; the
 * output keeps that order), required, additionalProperties (false, true or a
 * schema; absent = true as JSON Schema says), items, minItems, maxItems,
 * enum, const, anyOf and oneOf (both as "any of"), allOf of one schema,
 * $ref to "#/$defs/..." or "#/definitions/..." (recursion allowed), string
 * minLength and maxLength, format date, time, date-time and uuid, nullable
 * (OpenAPI), and the annotations (title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly), which change
 * nothing. Refused with an error naming the keyword and where it is: pattern,
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf,
 * patternProperties, propertyNames, minProperties, maxProperties,
 * prefixItems, contains, minContains, maxContains, uniqueItems, not, if,
 * then, else, dependentRequired, dependentSchemas, unevaluatedProperties,
 * unevaluatedItems, other formats, remote $refs, and allOf of several
 * schemas, a $ref that reaches itself before any value (a rule that would
 * be left-recursive), and strings that are not valid UTF-8. Other unknown
 * keywords are ignored, as JSON Schema asks.
 *
 * The input is hostile: sizes are bounded (SRV_SCHEMA_MAX_NODES schemas,
 * the grammar's own limits on its text), recursion is bounded by the JSON
 * nesting the request parser allows, and every failure is an error. */
#ifndef SRV_SCHEMA_H
#define SRV_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define SRV_SCHEMA_MAX_NODES 4096 /* subschemas visited, $ref targets included */

/* Writes *out (malloc'd GBNF, NUL-terminated; its "root" rule is the
 * schema's value surrounded by optional whitespace) and returns 0; or
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
