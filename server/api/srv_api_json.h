/* srv_api_json.h - helpers the request parsers and response writers of the
 * API room share (srv_api_req.c, srv_api_tok.c, srv_responses.c,
 * srv_tools.c): OpenAI-shaped 400s and the guarded JSON parse (srv_api_json.c),
 * the JSON string and integer writers (srv_api_resp.c). Internal to
 * server/api/. */
#ifndef SRV_API_JSON_H
#define SRV_API_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "common/brisk_buf.h"
#include "server/api/srv_api.h"

/* Fills err with a 400 invalid_request_error (code and param may be NULL)
 * and returns BRISK_EINVAL. */
int srv_api_fail(srv_api_error *err, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A short, printable, one-line quote of a user string (valid UTF-8, no NUL)
 * for an error message: cut at a character boundary, controls as '?'. */
#define API_SNIP_BYTES 40 /* user text quoted in an error message */
const char *srv_api_snip(const char *s, char out[API_SNIP_BYTES + 1]);

/* Fills err with a 500 for a failed allocation; returns BRISK_ENOMEM. */
int srv_api_oom(srv_api_error *err);
/* Scans the body against lim's depth and value limits, then parses it:
 * 0 with *root a JSON object the caller deletes, or a code with err set. */
int srv_api_parse_json(const char *body, size_t len, const srv_api_limits *lim, cJSON **root,
                       srv_api_error *err);

/* Refuses a number that is not finite anywhere in v (1e999 parses as an
 * infinity): 0, or a 400 naming the member holding it. The endpoints that
 * translate their body into a chat request (Responses, Anthropic's
 * Messages) need it: cJSON prints an infinity as null - "not given" - so a
 * required max_tokens or a checked range would slip through. The nesting is
 * bounded by srv_api_parse_json's depth limit. */
int srv_api_check_finite(const cJSON *v, srv_api_error *err);

/* JSON writers (srv_api_resp.c): a string of the bytes s[0, n) with
 * ill-formed UTF-8 as U+FFFD (s NULL: null), and an integer. */
void srv_api_put_str(brisk_buf *w, const char *s, size_t n);
void srv_api_put_int(brisk_buf *w, long long v);

#endif
