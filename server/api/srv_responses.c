/* srv_responses.c - the Responses API's request translation and response
 * shapes (srv_responses.h). */
#include "server/api/srv_responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "server/api/srv_api_json.h"

void srv_resp_req_free(srv_resp_req *rr) {
    if (!rr)
        return;
    free(rr->echo.p);
    free(rr->text.p);
    free(rr->call.id);
    free(rr->call.name);
    free(rr->call_args.p);
    free(rr);
}

/* ---- request --------------------------------------------------------------------- */

/* Fields a stateless server cannot honour, or that change the output and
 * brisk lacks: refused unless null (or their neutral value). */
static int resp_refused(const cJSON *root, srv_api_error *err) {
    static const char *const never[] = {"previous_response_id", "conversation", "prompt",
                                        "max_tool_calls"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, never[i]);
        if (v && !cJSON_IsNull(v))
            return srv_api_fail(err, "unsupported_parameter", never[i],
                                "'%s' is not supported: brisk keeps no conversation state (each "
                                "request carries its whole input)",
                                never[i]);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "background");
    if (v && cJSON_IsTrue(v))
        return srv_api_fail(err, "unsupported_parameter", "background",
                            "'background' is not supported: brisk answers each request directly");
    v = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return srv_api_fail(err, "unsupported_parameter", "top_logprobs",
                            "'top_logprobs' is not supported on /v1/responses; use "
                            "/v1/chat/completions");
    /* One answer per response: chat's n and logprobs have no place in it. */
    v = cJSON_GetObjectItemCaseSensitive(root, "n");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return srv_api_fail(err, "unsupported_parameter", "n",
                            "'n' is not a Responses API field: a response holds one answer");
    v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return srv_api_fail(err, "unsupported_parameter", "logprobs",
                            "'logprobs' is not supported on /v1/responses; use "
                            "/v1/chat/completions");
    v = cJSON_GetObjectItemCaseSensitive(root, "include");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        return srv_api_fail(err, "unsupported_parameter", "include",
                            "'include' is not supported (nothing extra can be included)");
    v = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "disabled")))
        return srv_api_fail(err, "unsupported_parameter", "truncation",
                            "'truncation' must be 'disabled': brisk never drops input");
    v = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *e = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "effort") : NULL;
        const cJSON *s = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "summary") : NULL;
        if (!cJSON_IsObject(v) || (e && !cJSON_IsNull(e)) || (s && !cJSON_IsNull(s)))
            return srv_api_fail(err, "unsupported_parameter", "reasoning",
                                "'reasoning' effort and summary are not supported");
    }
    return 0;
}

/* Appends a chat message {"role", "content"} to msgs. */
static int add_msg(cJSON *msgs, const char *role, const char *content, srv_api_error *err) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return srv_api_oom(err);
    }
    return 0;
}

/* A message item's content (a string, or parts of input_text / output_text)
 * as one chat content string, malloc'd. */
static int item_text(const cJSON *content, const char *param, char **out, srv_api_error *err) {
    *out = NULL;
    if (cJSON_IsString(content)) {
        if (!(*out = brisk_strdup(content->valuestring)))
            return srv_api_oom(err);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return srv_api_fail(err, "invalid_type", param,
                            "'content' must be a string or an array of text parts");
    brisk_buf b = {0};
    brisk_buf_str(&b, "");
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *ty = cJSON_IsString(t) ? t->valuestring : "";
        if (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) {
            char sn[API_SNIP_BYTES + 1];
            free(b.p);
            return srv_api_fail(err, "unsupported_value", param,
                                "content parts of type '%s' are not supported: brisk serves "
                                "text models (input_text and output_text are)",
                                srv_api_snip(ty, sn));
        }
        if (!cJSON_IsString(x)) {
            free(b.p);
            return srv_api_fail(err, "invalid_type", param, "a text part needs a string 'text'");
        }
        brisk_buf_str(&b, x->valuestring);
    }
    if (b.oom) {
        free(b.p);
        return srv_api_oom(err);
    }
    *out = b.p;
    return 0;
}

/* Input items -> chat messages. Consecutive function_call items become one
 * assistant message with several tool_calls. */
static int conv_input(const cJSON *input, cJSON *msgs, srv_api_error *err) {
    if (cJSON_IsString(input))
        return add_msg(msgs, "user", input->valuestring, err);
    if (!cJSON_IsArray(input))
        return srv_api_fail(err, "invalid_type", "input",
                            "'input' must be a string or an array of items");
    cJSON *calls = NULL; /* the tool_calls array of the open assistant message */
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        char param[40];
        snprintf(param, sizeof param, "input[%d]", i++);
        if (!cJSON_IsObject(it))
            return srv_api_fail(err, "invalid_type", param, "each input item must be an object");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type");
        const char *ty = cJSON_IsString(t) ? t->valuestring : t ? "" : "message";
        if (!strcmp(ty, "function_call")) {
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
            if (!cJSON_IsString(cid) || !cJSON_IsString(name) || !cJSON_IsString(args))
                return srv_api_fail(err, "invalid_value", param,
                                    "a function_call item needs string 'call_id', 'name' and "
                                    "'arguments'");
            if (!calls) {
                cJSON *m = cJSON_CreateObject();
                if (!m || !cJSON_AddStringToObject(m, "role", "assistant") ||
                    !cJSON_AddNullToObject(m, "content") ||
                    !(calls = cJSON_AddArrayToObject(m, "tool_calls")) ||
                    !cJSON_AddItemToArray(msgs, m)) {
                    cJSON_Delete(m);
                    return srv_api_oom(err);
                }
            }
            cJSON *c = cJSON_CreateObject(), *f = NULL;
            if (!c || !cJSON_AddStringToObject(c, "id", cid->valuestring) ||
                !cJSON_AddStringToObject(c, "type", "function") ||
                !(f = cJSON_AddObjectToObject(c, "function")) ||
                !cJSON_AddStringToObject(f, "name", name->valuestring) ||
                !cJSON_AddStringToObject(f, "arguments", args->valuestring) ||
                !cJSON_AddItemToArray(calls, c)) {
                cJSON_Delete(c);
                return srv_api_oom(err);
            }
            continue;
        }
        calls = NULL;
        if (!strcmp(ty, "function_call_output")) {
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            const cJSON *outp = cJSON_GetObjectItemCaseSensitive(it, "output");
            if (!cJSON_IsString(cid) || !outp)
                return srv_api_fail(err, "invalid_value", param,
                                    "a function_call_output item needs a string 'call_id' and "
                                    "an 'output'");
            char *text = NULL;
            int rc = item_text(outp, param, &text, err);
            if (rc < 0)
                return rc;
            cJSON *m = cJSON_CreateObject();
            int ok = m && cJSON_AddStringToObject(m, "role", "tool") &&
                     cJSON_AddStringToObject(m, "tool_call_id", cid->valuestring) &&
                     cJSON_AddStringToObject(m, "content", text) && cJSON_AddItemToArray(msgs, m);
            free(text);
            if (!ok) {
                cJSON_Delete(m);
                return srv_api_oom(err);
            }
            continue;
        }
        if (!strcmp(ty, "reasoning"))
            continue; /* earlier thoughts: templates drop them from the history */
        char sn[API_SNIP_BYTES + 1];
        if (strcmp(ty, "message"))
            return srv_api_fail(err, "unsupported_value", param,
                                "input items of type '%s' are not supported (message, "
                                "function_call, function_call_output and reasoning are)",
                                srv_api_snip(ty, sn));
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") &&
            strcmp(r, "developer"))
            return srv_api_fail(err, "invalid_value", param,
                                "a message's 'role' must be user, assistant, system or developer");
        char *text = NULL;
        int rc = item_text(cJSON_GetObjectItemCaseSensitive(it, "content"), param, &text, err);
        if (rc < 0)
            return rc;
        rc = add_msg(msgs, r, text, err);
        free(text);
        if (rc < 0)
            return rc;
    }
    if (cJSON_GetArraySize(msgs) == 0)
        return srv_api_fail(err, "invalid_value", "input", "'input' holds no message");
    return 0;
}

/* text.format -> response_format. */
static int conv_format(const cJSON *text, cJSON *chat, srv_api_error *err) {
    if (!text || cJSON_IsNull(text))
        return 0;
    const cJSON *fmt =
        cJSON_IsObject(text) ? cJSON_GetObjectItemCaseSensitive(text, "format") : NULL;
    if (!cJSON_IsObject(text) || (fmt && !cJSON_IsNull(fmt) && !cJSON_IsObject(fmt)))
        return srv_api_fail(err, "invalid_type", "text.format", "'text.format' must be an object");
    if (!fmt || cJSON_IsNull(fmt))
        return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    const char *ty = cJSON_IsString(t) ? t->valuestring : "";
    cJSON *rf = NULL;
    if (!strcmp(ty, "text"))
        return 0;
    if (!strcmp(ty, "json_object")) {
        rf = cJSON_CreateObject();
        if (!rf || !cJSON_AddStringToObject(rf, "type", "json_object"))
            goto oom;
    } else if (!strcmp(ty, "json_schema")) {
        /* Responses flattens what chat nests under json_schema. */
        cJSON *js = NULL;
        rf = cJSON_CreateObject();
        if (!rf || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
            !(js = cJSON_AddObjectToObject(rf, "json_schema")))
            goto oom;
        static const char *const keys[] = {"name", "schema", "strict", "description"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(fmt, keys[i]);
            cJSON *d = v ? cJSON_Duplicate(v, 1) : NULL;
            if (v && (!d || !cJSON_AddItemToObject(js, keys[i], d))) {
                cJSON_Delete(d);
                goto oom;
            }
        }
    } else {
        return srv_api_fail(err, "invalid_value", "text.format",
                            "'text.format.type' must be text, json_object or json_schema");
    }
    if (!cJSON_AddItemToObject(chat, "response_format", rf))
        goto oom;
    return 0;
oom:
    cJSON_Delete(rf);
    return srv_api_oom(err);
}

/* Function tools {type, name, description, parameters, strict} -> chat's
 * {type, function: {...}}; tool_choice {type: function, name} likewise. */
static int conv_tools(const cJSON *tools, const cJSON *choice, cJSON *chat, srv_api_error *err) {
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools))
            return srv_api_fail(err, "invalid_type", "tools", "'tools' must be an array");
        cJSON *out = cJSON_AddArrayToObject(chat, "tools");
        if (!out)
            return srv_api_oom(err);
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            char param[32];
            snprintf(param, sizeof param, "tools[%d]", i++);
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
                return srv_api_fail(err, "unsupported_value", param,
                                    "only tools of type 'function' are supported (built-in tools "
                                    "such as web_search run on OpenAI's side)");
            cJSON *c = cJSON_CreateObject(), *f = NULL;
            if (!c || !cJSON_AddStringToObject(c, "type", "function") ||
                !(f = cJSON_AddObjectToObject(c, "function")) || !cJSON_AddItemToArray(out, c)) {
                cJSON_Delete(c);
                return srv_api_oom(err);
            }
            static const char *const keys[] = {"name", "description", "parameters", "strict"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, keys[k]);
                cJSON *d = v ? cJSON_Duplicate(v, 1) : NULL;
                if (v && (!d || !cJSON_AddItemToObject(f, keys[k], d))) {
                    cJSON_Delete(d);
                    return srv_api_oom(err);
                }
            }
        }
    }
    if (choice && !cJSON_IsNull(choice)) {
        cJSON *d = NULL;
        if (cJSON_IsObject(choice)) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(choice, "type");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(name))
                return srv_api_fail(err, "invalid_value", "tool_choice",
                                    "'tool_choice' must be none, auto, required or "
                                    "{\"type\": \"function\", \"name\": ...}");
            cJSON *f = NULL;
            d = cJSON_CreateObject();
            if (!d || !cJSON_AddStringToObject(d, "type", "function") ||
                !(f = cJSON_AddObjectToObject(d, "function")) ||
                !cJSON_AddStringToObject(f, "name", name->valuestring)) {
                cJSON_Delete(d);
                return srv_api_oom(err);
            }
        } else if (!(d = cJSON_Duplicate(choice, 1))) {
            return srv_api_oom(err);
        }
        if (!cJSON_AddItemToObject(chat, "tool_choice", d)) {
            cJSON_Delete(d);
            return srv_api_oom(err);
        }
    }
    return 0;
}

/* One echoed member: ,"name": the request's value, or dflt (JSON text). */
static void echo_member(brisk_buf *b, const cJSON *root, const char *name, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    brisk_buf_printf(b, ",\"%s\":", name);
    char *s = v && !cJSON_IsNull(v) ? cJSON_PrintUnformatted(v) : NULL;
    if (v && !cJSON_IsNull(v) && !s)
        b->oom = 1;
    brisk_buf_str(b, s ? s : dflt);
    cJSON_free(s);
}

/* The chat fields a Responses request is translated into, and their
 * Responses names: a chat error's param names one, and so does its text.
 * quoted: only where the name is quoted ('messages[2].content'), since the
 * word also stands in prose; path: the name's [i] and .field that follow
 * belong to it (the chat message's place, which has no Responses
 * counterpart). Longest first. */
static const struct {
    const char *chat, *resp;
    int quoted, path;
} resp_names[] = {
    {"response_format.json_schema.schema", "text.format.schema", 0, 0},
    {"response_format.json_schema", "text.format", 0, 0},
    {"response_format", "text.format", 0, 0},
    {"max_tokens", "max_output_tokens", 0, 0},
    {"messages", "input", 1, 1},
    {".function.", ".", 0, 0}, /* tools[i].function.name: tools[i].name */
};
#define N_RESP_NAMES (sizeof resp_names / sizeof resp_names[0])

static int ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* text with every chat field name in it made a Responses one, into out. */
static void rename_fields(const char *text, char *out, size_t cap) {
    brisk_buf b = {0};
    for (const char *p = text; *p;) {
        size_t k = 0;
        for (; k < N_RESP_NAMES; k++) {
            const char *c = resp_names[k].chat;
            size_t n = strlen(c);
            int start = p == text || !ident_char(p[-1]) || c[0] == '.';
            if (strncmp(p, c, n) || !start || (ident_char(c[n - 1]) && ident_char(p[n])) ||
                (resp_names[k].quoted && (p == text || p[-1] != '\'')))
                continue;
            brisk_buf_str(&b, resp_names[k].resp);
            p += n;
            while (resp_names[k].path && (*p == '[' || *p == '.')) {
                p++;
                while (*p && (ident_char(*p) || *p == ']'))
                    p++;
            }
            break;
        }
        if (k == N_RESP_NAMES)
            brisk_buf_put(&b, p++, 1);
    }
    if (!b.oom && b.p)
        snprintf(out, cap, "%s", b.p);
    free(b.p);
}

void srv_responses_map_error(srv_api_error *err) {
    char m[sizeof err->message];
    rename_fields(err->message, m, sizeof m);
    snprintf(err->message, sizeof err->message, "%s", m);
    /* The param: the field as a whole (a chat message's place is not an
     * input item's), tools[i] as it is. */
    static const char *const whole[][2] = {{"max_tokens", "max_output_tokens"},
                                           {"messages", "input"},
                                           {"response_format", "text.format"}};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (!strncmp(err->param, whole[i][0], strlen(whole[i][0]))) {
            snprintf(err->param, sizeof err->param, "%s", whole[i][1]);
            return;
        }
}

int srv_responses_parse(const char *body, size_t len, const srv_api_limits *lim, srv_chat_req *chat,
                        srv_resp_req **out, srv_api_error *err) {
    memset(chat, 0, sizeof *chat);
    memset(err, 0, sizeof *err);
    *out = NULL;
    cJSON *root = NULL, *c = NULL;
    srv_resp_req *rr = NULL;
    char *text = NULL;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc < 0)
        return rc;
    if ((rc = resp_refused(root, err)) < 0 || (rc = srv_api_check_finite(root, err)) < 0)
        goto done;
    /* Everything but the Responses API's own fields goes to the chat parser
     * as it is, which validates sampling fields or refuses them by name. */
    if (!(c = cJSON_Duplicate(root, 1))) {
        rc = srv_api_oom(err);
        goto done;
    }
    static const char *const own[] = {"input",
                                      "instructions",
                                      "max_output_tokens",
                                      "text",
                                      "tools",
                                      "tool_choice",
                                      "store",
                                      "metadata",
                                      "reasoning",
                                      "truncation",
                                      "include",
                                      "background",
                                      "service_tier",
                                      "user",
                                      "safety_identifier",
                                      "prompt_cache_key",
                                      "stream_options",
                                      "top_logprobs",
                                      "previous_response_id",
                                      "conversation",
                                      "prompt",
                                      "max_tool_calls"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(c, own[i]);
    cJSON *msgs = cJSON_AddArrayToObject(c, "messages");
    if (!msgs) {
        rc = srv_api_oom(err);
        goto done;
    }
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    if (ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins)) {
        rc = srv_api_fail(err, "invalid_type", "instructions", "'instructions' must be a string");
        goto done;
    }
    if (cJSON_IsString(ins) && (rc = add_msg(msgs, "system", ins->valuestring, err)) < 0)
        goto done;
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!input) {
        rc = srv_api_fail(err, "missing_required_parameter", "input", "'input' is required");
        goto done;
    }
    if ((rc = conv_input(input, msgs, err)) < 0)
        goto done;
    const cJSON *mot = cJSON_GetObjectItemCaseSensitive(root, "max_output_tokens");
    cJSON *d = mot ? cJSON_Duplicate(mot, 1) : NULL;
    if (mot && (!d || !cJSON_AddItemToObject(c, "max_tokens", d))) {
        cJSON_Delete(d);
        rc = srv_api_oom(err);
        goto done;
    }
    if ((rc = conv_format(cJSON_GetObjectItemCaseSensitive(root, "text"), c, err)) < 0 ||
        (rc = conv_tools(cJSON_GetObjectItemCaseSensitive(root, "tools"),
                         cJSON_GetObjectItemCaseSensitive(root, "tool_choice"), c, err)) < 0)
        goto done;
    if (!(text = cJSON_PrintUnformatted(c))) {
        rc = srv_api_oom(err);
        goto done;
    }
    /* The translation may nest one level deeper than the body did. */
    srv_api_limits l2 = *lim;
    l2.max_json_depth = lim->max_json_depth + 2;
    if ((rc = srv_api_parse_chat(text, strlen(text), &l2, chat, err)) < 0) {
        srv_responses_map_error(err);
        goto done;
    }
    if (!(rr = brisk_calloc(1, sizeof *rr))) {
        rc = srv_api_oom(err);
        goto done;
    }
    brisk_buf *e = &rr->echo;
    brisk_buf_str(e, "");
    echo_member(e, root, "instructions", "null");
    echo_member(e, root, "max_output_tokens", "null");
    echo_member(e, root, "metadata", "{}");
    echo_member(e, root, "parallel_tool_calls", "true");
    echo_member(e, root, "temperature", "1.0");
    echo_member(e, root, "text", "{\"format\":{\"type\":\"text\"}}");
    echo_member(e, root, "tool_choice", "\"auto\"");
    echo_member(e, root, "tools", "[]");
    echo_member(e, root, "top_p", "1.0");
    if (e->oom) {
        rc = srv_api_oom(err);
        goto done;
    }
    *out = rr;
    rr = NULL;
done:
    cJSON_free(text);
    cJSON_Delete(c);
    cJSON_Delete(root);
    srv_resp_req_free(rr);
    if (rc < 0)
        srv_chat_req_free(chat);
    return rc;
}

/* ---- response shapes --------------------------------------------------------------- */

static void w_usage(brisk_buf *w, const srv_usage *u) {
    brisk_buf_str(w, ",\"usage\":{\"input_tokens\":");
    srv_api_put_int(w, u->prompt_tokens);
    brisk_buf_str(w, ",\"input_tokens_details\":{\"cached_tokens\":");
    srv_api_put_int(w, u->cached_tokens);
    brisk_buf_str(w, "},\"output_tokens\":");
    srv_api_put_int(w, u->completion_tokens);
    brisk_buf_str(w, ",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":");
    srv_api_put_int(w, (long long)u->prompt_tokens + u->completion_tokens);
    brisk_buf_str(w, "}");
}

static void w_text_part(brisk_buf *w, const char *text, size_t n) {
    brisk_buf_str(w, "{\"type\":\"output_text\",\"text\":");
    srv_api_put_str(w, text ? text : "", text ? n : 0);
    brisk_buf_str(w, ",\"annotations\":[],\"logprobs\":[]}");
}

static void w_msg_item(brisk_buf *w, const srv_resp_req *rr, const char *status, const char *text,
                       size_t n, int with_part) {
    brisk_buf_str(w, "{\"id\":");
    srv_api_put_str(w, rr->msg_id, strlen(rr->msg_id));
    brisk_buf_printf(w,
                     ",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\","
                     "\"content\":[",
                     status);
    if (with_part)
        w_text_part(w, text, n);
    brisk_buf_str(w, "]}");
}

static void w_call_item(brisk_buf *w, const srv_tool_call *c, const char *status, int with_args) {
    /* The item id shares the call id's random part: fc_<...> for call_<...>. */
    const char *tail = strncmp(c->id, "call_", 5) == 0 ? c->id + 5 : c->id;
    brisk_buf_str(w, "{\"id\":\"fc_");
    brisk_buf_str(w, tail);
    brisk_buf_printf(w, "\",\"type\":\"function_call\",\"status\":\"%s\",\"call_id\":", status);
    srv_api_put_str(w, c->id, strlen(c->id));
    brisk_buf_str(w, ",\"name\":");
    srv_api_put_str(w, c->name, strlen(c->name));
    brisk_buf_str(w, ",\"arguments\":");
    const char *a = with_args && c->arguments ? c->arguments : "";
    srv_api_put_str(w, a, strlen(a));
    brisk_buf_str(w, "}");
}

/* The response object; res NULL: in progress, no output yet. */
static void w_response(brisk_buf *w, const srv_resp_req *rr, const char *id, int64_t created,
                       const char *model, const srv_resp_result *res) {
    const char *status = !res ? "in_progress" : res->incomplete ? "incomplete" : "completed";
    brisk_buf_str(w, "{\"id\":");
    srv_api_put_str(w, id, strlen(id));
    brisk_buf_str(w, ",\"object\":\"response\",\"created_at\":");
    srv_api_put_int(w, (long long)created);
    brisk_buf_printf(
        w, ",\"status\":\"%s\",\"error\":null,\"incomplete_details\":%s,\"model\":", status,
        res && res->incomplete ? "{\"reason\":\"max_output_tokens\"}" : "null");
    srv_api_put_str(w, model, strlen(model));
    brisk_buf_str(w, ",\"output\":[");
    int k = 0;
    if (res && res->reasoning && res->reasoning_len) {
        brisk_buf_str(w, "{\"id\":");
        srv_api_put_str(w, rr->rs_id, strlen(rr->rs_id));
        brisk_buf_str(w, ",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":"
                         "\"reasoning_text\",\"text\":");
        srv_api_put_str(w, res->reasoning, res->reasoning_len);
        brisk_buf_str(w, "}]}");
        k++;
    }
    /* Every item shares the response's end: a cut answer's are incomplete. */
    const char *item_status = res && res->incomplete ? "incomplete" : "completed";
    int with_msg = res && (res->text || !res->n_calls);
    for (int i = 0; res && i <= res->n_calls; i++) {
        if (i == (res->msg_after < res->n_calls ? res->msg_after : res->n_calls) && with_msg) {
            brisk_buf_str(w, k++ ? "," : "");
            w_msg_item(w, rr, item_status, res->text, res->text_len, 1);
        }
        if (i < res->n_calls) {
            brisk_buf_str(w, k++ ? "," : "");
            w_call_item(w, &res->calls[i], item_status, 1);
        }
    }
    brisk_buf_str(w, "],\"previous_response_id\":null,\"store\":false,\"truncation\":\"disabled\"");
    brisk_buf_put(w, rr->echo.p ? rr->echo.p : "", rr->echo.len);
    if (res)
        w_usage(w, &res->usage);
    else
        brisk_buf_str(w, ",\"usage\":null");
    brisk_buf_str(w, "}");
}

char *srv_responses_json(const srv_resp_req *rr, const char *id, int64_t created, const char *model,
                         const srv_resp_result *res) {
    brisk_buf w = {0};
    w_response(&w, rr, id, created, model, res);
    return brisk_buf_take(&w, NULL);
}

/* ---- streams ----------------------------------------------------------------------- */

/* Starts an event: "event: <type>\ndata: {"type":..,"sequence_number":..". */
static void ev_open(brisk_buf *w, srv_resp_req *rr, const char *type) {
    brisk_buf_printf(w, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type,
                     rr->seq++);
}

static void ev_close(brisk_buf *w) {
    brisk_buf_str(w, "}\n\n");
}

/* ,"item_id":..,"output_index":k,"content_index":0 */
static void ev_where(brisk_buf *w, const char *item_id, int k, int content) {
    brisk_buf_str(w, ",\"item_id\":");
    srv_api_put_str(w, item_id, strlen(item_id));
    brisk_buf_printf(w, ",\"output_index\":%d", k);
    if (content)
        brisk_buf_str(w, ",\"content_index\":0");
}

char *srv_responses_sse_start(srv_resp_req *rr, const char *id, int64_t created, const char *model,
                              size_t *len) {
    brisk_buf w = {0};
    static const char *const types[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        ev_open(&w, rr, types[i]);
        brisk_buf_str(&w, ",\"response\":");
        w_response(&w, rr, id, created, model, NULL);
        ev_close(&w);
    }
    return brisk_buf_take(&w, len);
}

/* Closes the open call item: its arguments' done event and the item's. */
static void sse_call_close(brisk_buf *w, srv_resp_req *rr, const char *status) {
    if (!rr->call_open)
        return;
    rr->call_open = 0;
    const srv_tool_call *c = &rr->call;
    const char *a = rr->call_args.p ? rr->call_args.p : "";
    char fc[48];
    snprintf(fc, sizeof fc, "fc_%.40s", strncmp(c->id, "call_", 5) == 0 ? c->id + 5 : c->id);
    ev_open(w, rr, "response.function_call_arguments.done");
    ev_where(w, fc, rr->call_index, 0);
    brisk_buf_str(w, ",\"name\":");
    srv_api_put_str(w, c->name, strlen(c->name));
    brisk_buf_str(w, ",\"arguments\":");
    srv_api_put_str(w, a, rr->call_args.len);
    ev_close(w);
    ev_open(w, rr, "response.output_item.done");
    brisk_buf_printf(w, ",\"output_index\":%d,\"item\":", rr->call_index);
    srv_tool_call done = {c->id, c->name, (char *)a};
    w_call_item(w, &done, status, 1);
    ev_close(w);
}

/* Announces the message item (once): it stays open to the end, text
 * arriving after calls included, so the response holds one message. */
static void sse_text_open(brisk_buf *w, srv_resp_req *rr) {
    if (rr->text_open)
        return;
    rr->text_open = 1;
    rr->msg_after = rr->n_calls;
    brisk_buf_str(&rr->text, "");
    int k = rr->msg_index = rr->n_items++;
    ev_open(w, rr, "response.output_item.added");
    brisk_buf_printf(w, ",\"output_index\":%d,\"item\":", k);
    w_msg_item(w, rr, "in_progress", NULL, 0, 0);
    ev_close(w);
    ev_open(w, rr, "response.content_part.added");
    ev_where(w, rr->msg_id, k, 1);
    brisk_buf_str(w, ",\"part\":");
    w_text_part(w, "", 0);
    ev_close(w);
}

static void sse_delta(brisk_buf *w, srv_resp_req *rr, const char *text, size_t n) {
    sse_call_close(w, rr, "completed");
    sse_text_open(w, rr);
    if (!n)
        return;
    ev_open(w, rr, "response.output_text.delta");
    ev_where(w, rr->msg_id, rr->msg_index, 1);
    brisk_buf_str(w, ",\"delta\":");
    srv_api_put_str(w, text, n);
    brisk_buf_str(w, ",\"logprobs\":[]");
    ev_close(w);
    brisk_buf_put(&rr->text, text, n);
    if (rr->text.oom)
        w->oom = 1;
}

char *srv_responses_sse_delta(srv_resp_req *rr, const char *text, size_t n, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "");
    sse_delta(&w, rr, text, n);
    return brisk_buf_take(&w, len);
}

char *srv_responses_sse_call(srv_resp_req *rr, const char *id, const char *name, const char *args,
                             size_t n, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "");
    if (id) {
        sse_call_close(&w, rr, "completed");
        free(rr->call.id);
        free(rr->call.name);
        rr->call.id = brisk_strdup(id);
        rr->call.name = brisk_strdup(name ? name : "");
        rr->call_args.len = 0;
        brisk_buf_str(&rr->call_args, "");
        if (!rr->call.id || !rr->call.name) {
            free(w.p);
            return NULL;
        }
        rr->call_open = 1;
        rr->call_index = rr->n_items++;
        rr->n_calls++;
        ev_open(&w, rr, "response.output_item.added");
        brisk_buf_printf(&w, ",\"output_index\":%d,\"item\":", rr->call_index);
        w_call_item(&w, &rr->call, "in_progress", 0);
        ev_close(&w);
    }
    if (n && rr->call_open) {
        const srv_tool_call *c = &rr->call;
        char fc[48];
        snprintf(fc, sizeof fc, "fc_%.40s", strncmp(c->id, "call_", 5) == 0 ? c->id + 5 : c->id);
        ev_open(&w, rr, "response.function_call_arguments.delta");
        ev_where(&w, fc, rr->call_index, 0);
        brisk_buf_str(&w, ",\"delta\":");
        srv_api_put_str(&w, args, n);
        ev_close(&w);
        brisk_buf_put(&rr->call_args, args, n);
        if (rr->call_args.oom)
            w.oom = 1;
    }
    return brisk_buf_take(&w, len);
}

char *srv_responses_sse_finish(srv_resp_req *rr, const char *id, int64_t created, const char *model,
                               const srv_resp_result *res, size_t *len) {
    brisk_buf w = {0};
    srv_resp_result r = *res;
    const char *status = r.incomplete ? "incomplete" : "completed";
    r.reasoning = NULL; /* a stream carries no reasoning item */
    r.reasoning_len = 0;
    sse_call_close(&w, rr, status);
    /* An answer with neither text nor calls still has its message item. */
    if (!rr->text_open && !rr->n_calls && !r.n_calls)
        sse_delta(&w, rr, r.text ? r.text : "", r.text ? r.text_len : 0);
    if (rr->text_open) {
        int k = rr->msg_index;
        const char *t = rr->text.p ? rr->text.p : "";
        ev_open(&w, rr, "response.output_text.done");
        ev_where(&w, rr->msg_id, k, 1);
        brisk_buf_str(&w, ",\"text\":");
        srv_api_put_str(&w, t, rr->text.len);
        brisk_buf_str(&w, ",\"logprobs\":[]");
        ev_close(&w);
        ev_open(&w, rr, "response.content_part.done");
        ev_where(&w, rr->msg_id, k, 1);
        brisk_buf_str(&w, ",\"part\":");
        w_text_part(&w, t, rr->text.len);
        ev_close(&w);
        ev_open(&w, rr, "response.output_item.done");
        brisk_buf_printf(&w, ",\"output_index\":%d,\"item\":", k);
        w_msg_item(&w, rr, status, t, rr->text.len, 1);
        ev_close(&w);
        r.text = t; /* the final object holds what was streamed, where it was */
        r.text_len = rr->text.len;
        r.msg_after = rr->msg_after;
    } else {
        r.text = NULL;
    }
    ev_open(&w, rr, r.incomplete ? "response.incomplete" : "response.completed");
    brisk_buf_str(&w, ",\"response\":");
    w_response(&w, rr, id, created, model, &r);
    ev_close(&w);
    return brisk_buf_take(&w, len);
}

char *srv_responses_sse_error(srv_resp_req *rr, const char *message, size_t *len) {
    brisk_buf w = {0};
    ev_open(&w, rr, "error");
    brisk_buf_str(&w, ",\"code\":\"server_error\",\"message\":");
    srv_api_put_str(&w, message, strlen(message));
    brisk_buf_str(&w, ",\"param\":null");
    ev_close(&w);
    return brisk_buf_take(&w, len);
}
