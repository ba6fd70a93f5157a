/* srv_anthropic.c - Anthropic's Messages API: the request's translation
 * into a chat request, the message object, its stream events and error
 * bodies (srv_anthropic.h). */
#include "server/api/srv_anthropic.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "server/api/srv_api_json.h"
#include "server/api/srv_tools.h"

/* Anthropic's bound on temperature (its API reference): [0, 1]. */
#define ANTH_TEMPERATURE_MAX 1.0

void srv_anth_req_free(srv_anth_req *ar) {
    if (!ar)
        return;
    for (int i = 0; i < ar->n_stop; i++)
        free(ar->stop[i]);
    free(ar->stop);
    free(ar);
}

/* ---- request: small helpers ------------------------------------------------------ */

/* The translation under way: the chat request's JSON and what the
 * Anthropic fields asked for beside it. */
typedef struct anth_conv {
    cJSON *chat;             /* the chat request's body */
    cJSON *msgs;             /* its messages array */
    srv_anth_think thinking; /* the thinking field */
    long long budget;        /* thinking.budget_tokens (0: none) */
    int omit_thinking;       /* thinking.display "omitted" */
    double max_tokens;       /* max_tokens as given (0: none) */
} anth_conv;

/* A copy of v added to obj as key; 0 or an out-of-memory error. */
static int put_copy(cJSON *obj, const char *key, const cJSON *v, srv_api_error *err) {
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d || !cJSON_AddItemToObject(obj, key, d)) {
        cJSON_Delete(d);
        return srv_api_oom(err);
    }
    return 0;
}

static int put_str(cJSON *obj, const char *key, const char *s, srv_api_error *err) {
    return cJSON_AddStringToObject(obj, key, s) ? 0 : srv_api_oom(err);
}

/* Refuses every member of obj whose name is not in known[n]; path names obj. */
static int only_keys(const cJSON *obj, const char *const *known, size_t n, const char *path,
                     srv_api_error *err) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t k = 0;
        while (k < n && strcmp(c->string, known[k]))
            k++;
        if (k == n) {
            char q[API_SNIP_BYTES + 1];
            return srv_api_fail(err, "unsupported_parameter", path,
                                "%s.%s: Extra inputs are not permitted (brisk does not implement "
                                "this field)",
                                path, srv_api_snip(c->string, q));
        }
    }
    return 0;
}

/* cache_control on a block or a tool: an object (Anthropic's "ephemeral"
 * breakpoint), accepted and neutral - brisk's prefix cache needs no marks. */
static int check_cache_control(const cJSON *obj, const char *path, srv_api_error *err) {
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(obj, "cache_control");
    if (cc && !cJSON_IsNull(cc) && !cJSON_IsObject(cc))
        return srv_api_fail(err, "invalid_type", path, "%s.cache_control: must be an object", path);
    return 0;
}

/* A block's "type" string, or NULL after failing. */
static const char *block_type(const cJSON *b, const char *path, srv_api_error *err) {
    if (!cJSON_IsObject(b)) {
        srv_api_fail(err, "invalid_type", path, "%s: each content block must be an object", path);
        return NULL;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "type");
    if (!cJSON_IsString(t)) {
        srv_api_fail(err, "invalid_value", path, "%s.type: a string is required", path);
        return NULL;
    }
    return t->valuestring;
}

/* The refusal of a block type brisk cannot read. */
static int refuse_block(const char *type, const char *path, srv_api_error *err) {
    char q[API_SNIP_BYTES + 1];
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        return srv_api_fail(err, "unsupported_value", path,
                            "%s: content blocks of type '%s' are not supported: brisk serves text "
                            "models",
                            path, type);
    return srv_api_fail(err, "unsupported_value", path,
                        "%s: content blocks of type '%s' are not supported here", path,
                        srv_api_snip(type, q));
}

/* A text block's text, appended to b (after a newline when b has text). */
static int text_block(const cJSON *blk, const char *path, brisk_buf *b, srv_api_error *err) {
    static const char *const keys[] = {"type", "text", "cache_control", "citations"};
    int rc = only_keys(blk, keys, sizeof keys / sizeof keys[0], path, err);
    if (rc < 0 || (rc = check_cache_control(blk, path, err)) < 0)
        return rc;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(blk, "text");
    if (!cJSON_IsString(t))
        return srv_api_fail(err, "invalid_value", path, "%s.text: a string is required", path);
    /* Citations are where an earlier answer's text came from: metadata of
     * the history that no prompt shows. */
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(blk, "citations");
    if (ci && !cJSON_IsNull(ci) && !cJSON_IsArray(ci))
        return srv_api_fail(err, "invalid_type", path, "%s.citations: must be an array", path);
    if (b->len)
        brisk_buf_str(b, "\n");
    brisk_buf_str(b, t->valuestring);
    return b->oom ? srv_api_oom(err) : 0;
}

/* Text as a string or text blocks (system, a tool_result's content) into
 * *out (malloc'd). */
static int text_or_blocks(const cJSON *v, const char *path, char **out, srv_api_error *err) {
    *out = NULL;
    if (cJSON_IsString(v)) {
        *out = brisk_strdup(v->valuestring);
        return *out ? 0 : srv_api_oom(err);
    }
    if (!cJSON_IsArray(v))
        return srv_api_fail(err, "invalid_type", path,
                            "%s: must be a string or an array of text blocks", path);
    brisk_buf b = {0};
    brisk_buf_str(&b, "");
    int i = 0, rc = 0;
    for (const cJSON *blk = v->child; blk && rc == 0; blk = blk->next, i++) {
        char p[96];
        snprintf(p, sizeof p, "%s.%d", path, i);
        const char *ty = block_type(blk, p, err);
        if (!ty)
            rc = BRISK_EINVAL;
        else if (strcmp(ty, "text"))
            rc = refuse_block(ty, p, err);
        else
            rc = text_block(blk, p, &b, err);
    }
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *out = brisk_buf_take(&b, NULL);
    return *out ? 0 : srv_api_oom(err);
}

/* Appends the chat message {"role", "content"} to c->msgs. */
static int add_msg(anth_conv *c, const char *role, const char *content, srv_api_error *err) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(c->msgs, m)) {
        cJSON_Delete(m);
        return srv_api_oom(err);
    }
    return 0;
}

/* ---- request: messages ------------------------------------------------------------ */

/* A tool_use block into the open assistant message's tool_calls. */
static int tool_use_block(const cJSON *blk, const char *path, cJSON *calls, srv_api_error *err) {
    static const char *const keys[] = {"type", "id", "name", "input", "cache_control"};
    int rc = only_keys(blk, keys, sizeof keys / sizeof keys[0], path, err);
    if (rc < 0 || (rc = check_cache_control(blk, path, err)) < 0)
        return rc;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(blk, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
    if (!cJSON_IsString(id) || !id->valuestring[0])
        return srv_api_fail(err, "invalid_value", path, "%s.id: a non-empty string is required",
                            path);
    if (!cJSON_IsString(name) || !srv_tools_valid_name(name->valuestring))
        return srv_api_fail(err, "invalid_value", path,
                            "%s.name: 1 to 64 of a-z, A-Z, 0-9, '_' and '-' are required", path);
    if (!cJSON_IsObject(input))
        return srv_api_fail(err, "invalid_value", path, "%s.input: an object is required", path);
    char *args = cJSON_PrintUnformatted(input);
    cJSON *call = cJSON_CreateObject(), *fn = NULL;
    int ok = args && call && cJSON_AddStringToObject(call, "id", id->valuestring) &&
             cJSON_AddStringToObject(call, "type", "function") &&
             (fn = cJSON_AddObjectToObject(call, "function")) &&
             cJSON_AddStringToObject(fn, "name", name->valuestring) &&
             cJSON_AddStringToObject(fn, "arguments", args) && cJSON_AddItemToArray(calls, call);
    cJSON_free(args);
    if (!ok) {
        cJSON_Delete(call);
        return srv_api_oom(err);
    }
    return 0;
}

/* A tool_result block as a tool message. is_error has no place in the chat
 * formats' result blocks, so the result's text says it: "Error: ...". */
static int tool_result_block(anth_conv *c, const cJSON *blk, const char *path, srv_api_error *err) {
    static const char *const keys[] = {"type", "tool_use_id", "content", "is_error",
                                       "cache_control"};
    int rc = only_keys(blk, keys, sizeof keys / sizeof keys[0], path, err);
    if (rc < 0 || (rc = check_cache_control(blk, path, err)) < 0)
        return rc;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "tool_use_id");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(blk, "content");
    const cJSON *is_err = cJSON_GetObjectItemCaseSensitive(blk, "is_error");
    if (!cJSON_IsString(id) || !id->valuestring[0])
        return srv_api_fail(err, "invalid_value", path,
                            "%s.tool_use_id: a non-empty string is required", path);
    if (is_err && !cJSON_IsNull(is_err) && !cJSON_IsBool(is_err))
        return srv_api_fail(err, "invalid_type", path, "%s.is_error: must be a boolean", path);
    char *text = NULL;
    char cp[112];
    snprintf(cp, sizeof cp, "%s.content", path);
    if (content && !cJSON_IsNull(content) && (rc = text_or_blocks(content, cp, &text, err)) < 0)
        return rc;
    brisk_buf b = {0};
    brisk_buf_str(&b, cJSON_IsTrue(is_err) ? "Error: " : "");
    brisk_buf_str(&b, text ? text : "");
    free(text);
    cJSON *m = cJSON_CreateObject();
    int ok = !b.oom && m && cJSON_AddStringToObject(m, "role", "tool") &&
             cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) &&
             cJSON_AddStringToObject(m, "content", b.p) && cJSON_AddItemToArray(c->msgs, m);
    free(b.p);
    if (!ok) {
        cJSON_Delete(m);
        return srv_api_oom(err);
    }
    return 0;
}

/* A thinking block of an earlier answer: dropped, as the chat templates
 * drop earlier thoughts from the history (its signature is Anthropic's to
 * check, and brisk signs nothing). */
static int thinking_block(const cJSON *blk, const char *type, const char *path,
                          srv_api_error *err) {
    static const char *const keys[] = {"type", "thinking", "signature", "data", "cache_control"};
    int rc = only_keys(blk, keys, sizeof keys / sizeof keys[0], path, err);
    if (rc < 0)
        return rc;
    const cJSON *t =
        cJSON_GetObjectItemCaseSensitive(blk, !strcmp(type, "thinking") ? "thinking" : "data");
    if (!cJSON_IsString(t))
        return srv_api_fail(err, "invalid_value", path, "%s.%s: a string is required", path,
                            !strcmp(type, "thinking") ? "thinking" : "data");
    return 0;
}

/* A user message's blocks: runs of text blocks become user messages, each
 * tool_result block a tool message, in their order. */
static int user_blocks(anth_conv *c, const cJSON *content, const char *path, srv_api_error *err) {
    brisk_buf b = {0};
    int have_text = 0, i = 0, rc = 0;
    for (const cJSON *blk = content->child; blk && rc == 0; blk = blk->next, i++) {
        char p[96];
        snprintf(p, sizeof p, "%s.%d", path, i);
        const char *ty = block_type(blk, p, err);
        if (!ty) {
            rc = BRISK_EINVAL;
        } else if (!strcmp(ty, "text")) {
            rc = text_block(blk, p, &b, err);
            have_text = 1;
        } else if (!strcmp(ty, "tool_result")) {
            if (have_text && (rc = add_msg(c, "user", b.p ? b.p : "", err)) < 0)
                break;
            b.len = 0;
            have_text = 0;
            rc = tool_result_block(c, blk, p, err);
        } else if (!strcmp(ty, "tool_use") || !strcmp(ty, "thinking") ||
                   !strcmp(ty, "redacted_thinking")) {
            rc = srv_api_fail(err, "invalid_value", p,
                              "%s: '%s' blocks belong to assistant messages", p, ty);
        } else {
            rc = refuse_block(ty, p, err);
        }
    }
    if (rc == 0 && have_text)
        rc = add_msg(c, "user", b.p ? b.p : "", err);
    free(b.p);
    return rc;
}

/* An assistant message's blocks: its text blocks joined as the content,
 * its tool_use blocks as the tool_calls, thinking dropped. */
static int assistant_blocks(anth_conv *c, const cJSON *content, const char *path,
                            srv_api_error *err) {
    brisk_buf b = {0};
    brisk_buf_str(&b, "");
    cJSON *m = cJSON_CreateObject();
    cJSON *calls = cJSON_CreateArray();
    int i = 0, rc = (m && calls) ? 0 : srv_api_oom(err);
    for (const cJSON *blk = content->child; blk && rc == 0; blk = blk->next, i++) {
        char p[96];
        snprintf(p, sizeof p, "%s.%d", path, i);
        const char *ty = block_type(blk, p, err);
        if (!ty)
            rc = BRISK_EINVAL;
        else if (!strcmp(ty, "text"))
            rc = text_block(blk, p, &b, err);
        else if (!strcmp(ty, "tool_use"))
            rc = tool_use_block(blk, p, calls, err);
        else if (!strcmp(ty, "thinking") || !strcmp(ty, "redacted_thinking"))
            rc = thinking_block(blk, ty, p, err);
        else if (!strcmp(ty, "tool_result"))
            rc = srv_api_fail(err, "invalid_value", p,
                              "%s: 'tool_result' blocks belong to user messages", p);
        else
            rc = refuse_block(ty, p, err);
    }
    if (rc == 0) {
        int has_calls = cJSON_GetArraySize(calls) > 0;
        if (!cJSON_AddStringToObject(m, "role", "assistant") ||
            !cJSON_AddStringToObject(m, "content", b.oom ? "" : b.p) || b.oom ||
            (has_calls && !cJSON_AddItemToObject(m, "tool_calls", calls))) {
            rc = srv_api_oom(err);
        } else {
            if (has_calls)
                calls = NULL; /* m holds it now */
            if (!cJSON_AddItemToArray(c->msgs, m))
                rc = srv_api_oom(err);
            else
                m = NULL;
        }
    }
    cJSON_Delete(calls);
    cJSON_Delete(m);
    free(b.p);
    return rc;
}

/* One message of messages[i]; last: it is the final one. */
static int conv_message(anth_conv *c, const cJSON *msg, int i, int last, srv_api_error *err) {
    char path[48];
    snprintf(path, sizeof path, "messages.%d", i);
    if (!cJSON_IsObject(msg))
        return srv_api_fail(err, "invalid_type", path, "%s: must be an object", path);
    static const char *const keys[] = {"role", "content"};
    int rc = only_keys(msg, keys, sizeof keys / sizeof keys[0], path, err);
    if (rc < 0)
        return rc;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    const char *r = cJSON_IsString(role) ? role->valuestring : "";
    int user = !strcmp(r, "user");
    if (!user && strcmp(r, "assistant"))
        return srv_api_fail(err, "invalid_value", path,
                            "%s.role: must be 'user' or 'assistant' (system goes in the top-level "
                            "'system' field)",
                            path);
    /* Anthropic continues a final assistant message (prefill); brisk's chat
     * templates can only close it and answer anew, which is another output. */
    if (last && !user)
        return srv_api_fail(err, "unsupported_value", path,
                            "%s: a final assistant message (prefill) is not supported; end with a "
                            "user message",
                            path);
    char cp[64];
    snprintf(cp, sizeof cp, "%s.content", path);
    if (cJSON_IsString(content))
        return add_msg(c, r, content->valuestring, err);
    if (!cJSON_IsArray(content))
        return srv_api_fail(err, "invalid_type", cp,
                            "%s: a string or an array of content blocks is required", cp);
    if (!content->child)
        return srv_api_fail(err, "invalid_value", cp, "%s: must not be empty", cp);
    return user ? user_blocks(c, content, cp, err) : assistant_blocks(c, content, cp, err);
}

static int conv_messages(anth_conv *c, const cJSON *v, const srv_api_limits *lim,
                         srv_api_error *err) {
    if (!cJSON_IsArray(v))
        return srv_api_fail(err, "invalid_type", "messages", "messages: an array is required");
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return srv_api_fail(err, "invalid_value", "messages", "messages: must not be empty");
    if (n > lim->max_messages)
        return srv_api_fail(err, "invalid_value", "messages",
                            "messages: at most %d messages are allowed", lim->max_messages);
    int i = 0, rc = 0;
    for (const cJSON *m = v->child; m && rc == 0; m = m->next, i++)
        rc = conv_message(c, m, i, m->next == NULL, err);
    if (rc == 0 && cJSON_GetArraySize(c->msgs) > lim->max_messages)
        rc =
            srv_api_fail(err, "invalid_value", "messages",
                         "messages: the blocks make more than %d chat messages", lim->max_messages);
    return rc;
}

/* ---- request: the other fields ------------------------------------------------------ */

static int conv_system(anth_conv *c, const cJSON *v, srv_api_error *err) {
    char *text = NULL;
    int rc = text_or_blocks(v, "system", &text, err);
    /* An empty system prompt renders no system turn, as if absent. */
    if (rc == 0 && text[0])
        rc = add_msg(c, "system", text, err);
    free(text);
    return rc;
}

static int conv_tools(anth_conv *c, const cJSON *v, srv_api_error *err) {
    if (!cJSON_IsArray(v))
        return srv_api_fail(err, "invalid_type", "tools", "tools: an array is required");
    cJSON *tools = cJSON_AddArrayToObject(c->chat, "tools");
    if (!tools)
        return srv_api_oom(err);
    int i = 0;
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        char path[32];
        snprintf(path, sizeof path, "tools.%d", i);
        if (!cJSON_IsObject(t))
            return srv_api_fail(err, "invalid_type", path, "%s: must be an object", path);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (ty && !cJSON_IsNull(ty) &&
            !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "custom"))) {
            char q[API_SNIP_BYTES + 1];
            return srv_api_fail(err, "unsupported_value", path,
                                "%s.type: '%s' tools are not supported (Anthropic's own tools run "
                                "on its side); define a custom tool with an input_schema",
                                path, cJSON_IsString(ty) ? srv_api_snip(ty->valuestring, q) : "?");
        }
        static const char *const keys[] = {"type",         "name",          "description",
                                           "input_schema", "cache_control", "strict"};
        int rc = only_keys(t, keys, sizeof keys / sizeof keys[0], path, err);
        if (rc < 0 || (rc = check_cache_control(t, path, err)) < 0)
            return rc;
        /* brisk holds a tool's input to its schema only when the grammar
         * does (tool_choice any or tool); under auto the model writes freely. */
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (strict && !cJSON_IsNull(strict) && !cJSON_IsFalse(strict))
            return srv_api_fail(err, "unsupported_value", path,
                                "%s.strict: strict tool use is not supported (tool_choice any or "
                                "tool holds the input to the schema)",
                                path);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsString(name))
            return srv_api_fail(err, "invalid_value", path, "%s.name: a string is required", path);
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
            return srv_api_fail(err, "invalid_type", path, "%s.description: must be a string",
                                path);
        if (!cJSON_IsObject(schema))
            return srv_api_fail(err, "invalid_value", path,
                                "%s.input_schema: an object is required", path);
        cJSON *o = cJSON_CreateObject(), *fn = NULL;
        int ok = o && cJSON_AddStringToObject(o, "type", "function") &&
                 (fn = cJSON_AddObjectToObject(o, "function")) &&
                 cJSON_AddStringToObject(fn, "name", name->valuestring) &&
                 (!cJSON_IsString(desc) ||
                  cJSON_AddStringToObject(fn, "description", desc->valuestring)) &&
                 put_copy(fn, "parameters", schema, err) == 0 && cJSON_AddItemToArray(tools, o);
        if (!ok) {
            cJSON_Delete(o);
            return srv_api_oom(err);
        }
    }
    return 0;
}

static int conv_tool_choice(anth_conv *c, const cJSON *v, srv_api_error *err) {
    if (!cJSON_IsObject(v))
        return srv_api_fail(err, "invalid_type", "tool_choice",
                            "tool_choice: an object is required");
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use"};
    int rc = only_keys(v, keys, sizeof keys / sizeof keys[0], "tool_choice", err);
    if (rc < 0)
        return rc;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(v, "name");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(v, "disable_parallel_tool_use");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
    if (dp && !cJSON_IsNull(dp)) {
        if (!cJSON_IsBool(dp))
            return srv_api_fail(err, "invalid_type", "tool_choice",
                                "tool_choice.disable_parallel_tool_use: must be a boolean");
        if (!cJSON_AddBoolToObject(c->chat, "parallel_tool_calls", cJSON_IsFalse(dp)))
            return srv_api_oom(err);
    }
    if (!strcmp(t, "tool")) {
        if (!cJSON_IsString(name))
            return srv_api_fail(err, "invalid_value", "tool_choice",
                                "tool_choice.name: a string is required with type 'tool'");
        cJSON *o = cJSON_AddObjectToObject(c->chat, "tool_choice"), *fn = NULL;
        if (!o || !cJSON_AddStringToObject(o, "type", "function") ||
            !(fn = cJSON_AddObjectToObject(o, "function")) ||
            !cJSON_AddStringToObject(fn, "name", name->valuestring))
            return srv_api_oom(err);
        return 0;
    }
    if (name && !cJSON_IsNull(name))
        return srv_api_fail(err, "invalid_value", "tool_choice",
                            "tool_choice.name: only type 'tool' names a tool");
    const char *chat = !strcmp(t, "auto")   ? "auto"
                       : !strcmp(t, "any")  ? "required"
                       : !strcmp(t, "none") ? "none"
                                            : NULL;
    if (!chat)
        return srv_api_fail(err, "invalid_value", "tool_choice",
                            "tool_choice.type: must be 'auto', 'any', 'tool' or 'none'");
    return put_str(c->chat, "tool_choice", chat, err);
}

static int conv_thinking(anth_conv *c, const cJSON *v, srv_api_error *err) {
    if (!cJSON_IsObject(v))
        return srv_api_fail(err, "invalid_type", "thinking", "thinking: an object is required");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
    if (!strcmp(t, "disabled")) {
        static const char *const keys[] = {"type"};
        c->thinking = SRV_ANTH_THINK_OFF;
        return only_keys(v, keys, 1, "thinking", err);
    }
    if (strcmp(t, "enabled") && strcmp(t, "adaptive"))
        return srv_api_fail(err, "invalid_value", "thinking",
                            "thinking.type: must be 'enabled', 'adaptive' or 'disabled'");
    static const char *const keys[] = {"type", "budget_tokens", "display"};
    int rc = only_keys(v, keys, sizeof keys / sizeof keys[0], "thinking", err);
    if (rc < 0)
        return rc;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(v, "budget_tokens");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(v, "display");
    c->thinking = !strcmp(t, "enabled") ? SRV_ANTH_THINK_ON : SRV_ANTH_THINK_ADAPTIVE;
    if (c->thinking == SRV_ANTH_THINK_ON) {
        /* The budget bounds the thoughts within max_tokens, which bounds the
         * whole answer: brisk enforces only max_tokens (docs/API.md). Anthropic
         * asks for 1,024 at least, which small local models' contexts may not
         * hold beside the answer: any positive budget below max_tokens goes. */
        if (!cJSON_IsNumber(b) || b->valuedouble != floor(b->valuedouble) || b->valuedouble < 1 ||
            b->valuedouble > 1e9)
            return srv_api_fail(err, "invalid_value", "thinking",
                                "thinking.budget_tokens: a positive integer is required");
        c->budget = (long long)b->valuedouble;
    } else if (b && !cJSON_IsNull(b)) {
        return srv_api_fail(err, "invalid_value", "thinking",
                            "thinking.budget_tokens: only type 'enabled' takes a budget");
    }
    if (d && !cJSON_IsNull(d)) {
        const char *s = cJSON_IsString(d) ? d->valuestring : "";
        if (strcmp(s, "summarized") && strcmp(s, "omitted"))
            return srv_api_fail(err, "invalid_value", "thinking",
                                "thinking.display: must be 'summarized' or 'omitted'");
        c->omit_thinking = !strcmp(s, "omitted");
    }
    return 0;
}

/* output_config: format (a JSON Schema the answer follows) becomes
 * response_format; effort has no counterpart in brisk. */
static int conv_output_config(anth_conv *c, const cJSON *v, srv_api_error *err) {
    if (!cJSON_IsObject(v))
        return srv_api_fail(err, "invalid_type", "output_config",
                            "output_config: an object is required");
    static const char *const keys[] = {"format", "effort"};
    int rc = only_keys(v, keys, sizeof keys / sizeof keys[0], "output_config", err);
    if (rc < 0)
        return rc;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(v, "effort");
    if (e && !cJSON_IsNull(e))
        return srv_api_fail(err, "unsupported_parameter", "output_config",
                            "output_config.effort: not supported (brisk's models have no effort "
                            "setting)");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "format");
    if (!f || cJSON_IsNull(f))
        return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(f, "type");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    if (!cJSON_IsObject(f) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "json_schema") ||
        !cJSON_IsObject(schema))
        return srv_api_fail(err, "invalid_value", "output_config",
                            "output_config.format: {\"type\": \"json_schema\", \"schema\": {...}} "
                            "is required");
    static const char *const fkeys[] = {"type", "schema"};
    if ((rc = only_keys(f, fkeys, 2, "output_config.format", err)) < 0)
        return rc;
    cJSON *rf = cJSON_AddObjectToObject(c->chat, "response_format"), *js = NULL;
    if (!rf || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
        !(js = cJSON_AddObjectToObject(rf, "json_schema")) ||
        !cJSON_AddStringToObject(js, "name", "output"))
        return srv_api_oom(err);
    return put_copy(js, "schema", schema, err);
}

static int conv_metadata(const cJSON *v, srv_api_error *err) {
    if (!cJSON_IsObject(v))
        return srv_api_fail(err, "invalid_type", "metadata", "metadata: an object is required");
    static const char *const keys[] = {"user_id"};
    int rc = only_keys(v, keys, 1, "metadata", err);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "user_id");
    if (rc == 0 && u && !cJSON_IsNull(u) && !cJSON_IsString(u))
        rc = srv_api_fail(err, "invalid_type", "metadata", "metadata.user_id: must be a string");
    return rc;
}

/* Fields of brisk's chat endpoint that a Messages request may carry too
 * (the SDK's extra_body), read and checked by the chat parser. */
static const char *const anth_extensions[] = {
    "seed",       "min_p",      "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logit_bias", "ignore_eos", "min_tokens",       "priority",          "timeout",
};

/* One top-level member of the request. */
static int conv_member(anth_conv *c, const cJSON *v, srv_api_error *err) {
    const char *k = v->string;
    if (!strcmp(k, "model")) {
        if (!cJSON_IsString(v))
            return srv_api_fail(err, "invalid_type", "model", "model: must be a string");
        return put_copy(c->chat, "model", v, err);
    }
    if (!strcmp(k, "messages"))
        return 0; /* after the system prompt */
    if (!strcmp(k, "max_tokens")) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
            v->valuedouble > INT32_MAX)
            return srv_api_fail(err, "invalid_value", "max_tokens",
                                "max_tokens: a positive integer (at most %d) is required",
                                INT32_MAX);
        c->max_tokens = v->valuedouble;
        return put_copy(c->chat, "max_tokens", v, err);
    }
    if (!strcmp(k, "temperature")) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= ANTH_TEMPERATURE_MAX))
            return srv_api_fail(err, "invalid_value", "temperature",
                                "temperature: a number in [0, 1] is required");
        return put_copy(c->chat, "temperature", v, err);
    }
    if (!strcmp(k, "top_p") || !strcmp(k, "top_k") || !strcmp(k, "stream"))
        return put_copy(c->chat, k, v, err); /* the chat parser checks them */
    if (!strcmp(k, "stop_sequences")) {
        if (!cJSON_IsArray(v))
            return srv_api_fail(err, "invalid_type", "stop_sequences",
                                "stop_sequences: an array of strings is required");
        return cJSON_GetArraySize(v) ? put_copy(c->chat, "stop", v, err) : 0;
    }
    if (!strcmp(k, "system"))
        return 0; /* first among the messages */
    if (!strcmp(k, "tools"))
        return conv_tools(c, v, err);
    if (!strcmp(k, "tool_choice"))
        return conv_tool_choice(c, v, err);
    if (!strcmp(k, "thinking"))
        return conv_thinking(c, v, err);
    if (!strcmp(k, "output_config"))
        return conv_output_config(c, v, err);
    if (!strcmp(k, "metadata"))
        return conv_metadata(v, err);
    if (!strcmp(k, "cache_control")) {
        if (!cJSON_IsObject(v))
            return srv_api_fail(err, "invalid_type", "cache_control",
                                "cache_control: must be an object");
        return 0;
    }
    if (!strcmp(k, "service_tier")) {
        /* Which capacity serves the request: brisk has one. */
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "auto") && strcmp(v->valuestring, "standard_only")))
            return srv_api_fail(err, "invalid_value", "service_tier",
                                "service_tier: must be 'auto' or 'standard_only'");
        return 0;
    }
    for (size_t i = 0; i < sizeof anth_extensions / sizeof anth_extensions[0]; i++)
        if (!strcmp(k, anth_extensions[i]))
            return put_copy(c->chat, k, v, err);
    char q[API_SNIP_BYTES + 1];
    return srv_api_fail(err, "unsupported_parameter", k,
                        "%s: Extra inputs are not permitted (not a Messages API field brisk "
                        "implements)",
                        srv_api_snip(k, q));
}

/* The chat parser's field names back in the Messages API's terms. */
static void map_error(srv_api_error *err) {
    static const char *const map[][2] = {
        {"stop", "stop_sequences"},
        {"response_format", "output_config.format"},
        {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
        {"tool_choice", "tool_choice"},
        {"tools", "tools"},
        {"messages", "messages"}};
    const char *name = err->param[0] ? err->param : NULL;
    for (size_t i = 0; name && i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i][0]);
        if (!strncmp(name, map[i][0], n) && (!name[n] || name[n] == '[' || name[n] == '.')) {
            name = map[i][1];
            break;
        }
    }
    if (!name)
        return;
    /* "name: message", the message cut to fit (at a byte: srv_api_put_str
     * writes a cut character as U+FFFD). */
    char msg[sizeof err->message];
    size_t nl = strlen(name), ml = strlen(err->message);
    if (nl + 2 + ml >= sizeof msg)
        ml = nl + 3 < sizeof msg ? sizeof msg - nl - 3 : 0;
    memcpy(msg, name, nl);
    memcpy(msg + nl, ": ", 2);
    memcpy(msg + nl + 2, err->message, ml);
    msg[nl + 2 + ml] = '\0';
    memcpy(err->message, msg, nl + 3 + ml);
    snprintf(err->param, sizeof err->param, "%s", name);
}

int srv_anthropic_parse(const char *body, size_t len, const srv_api_limits *lim, int count_only,
                        srv_chat_req *chat, srv_anth_req **out, srv_api_error *err) {
    memset(chat, 0, sizeof *chat);
    memset(err, 0, sizeof *err);
    *out = NULL;
    cJSON *root = NULL;
    anth_conv c = {0};
    srv_anth_req *ar = NULL;
    char *text = NULL;
    int rc = srv_api_parse_json(body, len, lim, &root, err);
    if (rc < 0)
        return rc;
    if ((rc = srv_api_check_finite(root, err)) < 0)
        goto done;
    if (!(c.chat = cJSON_CreateObject()) || !(c.msgs = cJSON_CreateArray())) {
        rc = srv_api_oom(err);
        goto done;
    }
    /* JSON null is "not given", as everywhere in brisk. */
    for (const cJSON *v = root->child; v && rc == 0; v = v->next)
        if (!cJSON_IsNull(v))
            rc = conv_member(&c, v, err);
    if (rc < 0)
        goto done;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (!cJSON_IsString(model)) {
        rc = srv_api_fail(err, "missing_required_parameter", "model", "model: Field required");
        goto done;
    }
    if (!count_only && c.max_tokens == 0) {
        rc = srv_api_fail(err, "missing_required_parameter", "max_tokens",
                          "max_tokens: Field required");
        goto done;
    }
    if (!msgs || cJSON_IsNull(msgs)) {
        rc =
            srv_api_fail(err, "missing_required_parameter", "messages", "messages: Field required");
        goto done;
    }
    if (c.thinking == SRV_ANTH_THINK_ON && c.max_tokens > 0 && c.budget >= c.max_tokens) {
        rc = srv_api_fail(err, "invalid_value", "thinking",
                          "thinking.budget_tokens: must be less than max_tokens");
        goto done;
    }
    if ((sys && !cJSON_IsNull(sys) && (rc = conv_system(&c, sys, err)) < 0) ||
        (rc = conv_messages(&c, msgs, lim, err)) < 0)
        goto done;
    if (!cJSON_AddItemToObject(c.chat, "messages", c.msgs)) {
        rc = srv_api_oom(err);
        goto done;
    }
    c.msgs = NULL; /* c.chat holds it now */
    if (!(text = cJSON_PrintUnformatted(c.chat))) {
        rc = srv_api_oom(err);
        goto done;
    }
    /* The translation nests a tool's schema one level deeper than the body
     * did; Anthropic allows more stop sequences than OpenAI's 4. */
    srv_api_limits l2 = *lim;
    l2.max_json_depth = lim->max_json_depth + 2;
    if (l2.max_stop < SRV_ANTH_MAX_STOP)
        l2.max_stop = SRV_ANTH_MAX_STOP;
    if ((rc = srv_api_parse_chat(text, strlen(text), &l2, chat, err)) < 0) {
        map_error(err);
        goto done;
    }
    /* Thinking is off unless asked for, as Anthropic's models answer. */
    chat->enable_thinking = c.thinking != SRV_ANTH_THINK_OFF;
    chat->include_reasoning = !c.omit_thinking;
    if (!(ar = brisk_calloc(1, sizeof *ar)) ||
        (chat->params.n_stop &&
         !(ar->stop = brisk_calloc((size_t)chat->params.n_stop, sizeof *ar->stop)))) {
        rc = srv_api_oom(err);
        goto done;
    }
    for (int i = 0; i < chat->params.n_stop; i++, ar->n_stop++)
        if (!(ar->stop[i] = brisk_strdup(chat->params.stop[i]))) {
            rc = srv_api_oom(err);
            goto done;
        }
    ar->thinking = c.thinking;
    ar->count_only = count_only;
    *out = ar;
    ar = NULL;
done:
    cJSON_free(text);
    cJSON_Delete(c.msgs);
    cJSON_Delete(c.chat);
    cJSON_Delete(root);
    srv_anth_req_free(ar);
    if (rc < 0)
        srv_chat_req_free(chat);
    return rc;
}

/* ---- answers ------------------------------------------------------------------------ */

const char *srv_anthropic_stop_reason(const srv_anth_req *ar, int length, int n_calls,
                                      int stop_index, const char **seq) {
    *seq = NULL;
    if (length)
        return "max_tokens";
    if (n_calls > 0)
        return "tool_use";
    if (stop_index >= 0 && stop_index < ar->n_stop) {
        *seq = ar->stop[stop_index];
        return "stop_sequence";
    }
    return "end_turn";
}

/* A tool_use block's id: brisk's call ids are "call_" and random letters
 * and digits; Anthropic's clients expect "toolu_" before them. */
static void w_tool_id(brisk_buf *w, const char *id) {
    char buf[96];
    snprintf(buf, sizeof buf, "toolu_%.80s", !strncmp(id, "call_", 5) ? id + 5 : id);
    srv_api_put_str(w, buf, strlen(buf));
}

/* A call's input as compact JSON (malloc'd; NULL: out of memory). The
 * arguments are the JSON text of an object, as the tool formats parse
 * them; anything else would not be an input, and is shown as {}. */
static char *call_input(const srv_tool_call *tc) {
    unsigned long oom0 = brisk_alloc_cjson_failures();
    cJSON *parsed = tc->arguments ? cJSON_Parse(tc->arguments) : NULL;
    if (!parsed && brisk_alloc_cjson_failures() != oom0)
        return NULL;
    char *s = cJSON_IsObject(parsed) ? cJSON_PrintUnformatted(parsed) : brisk_strdup("{}");
    cJSON_Delete(parsed);
    return s;
}

/* {"type":"tool_use","id","name","input":...}; with_input 0: input {} (a
 * stream's block start, the input following as deltas). */
static void w_tool_use(brisk_buf *w, const srv_tool_call *tc, int with_input) {
    brisk_buf_str(w, "{\"type\":\"tool_use\",\"id\":");
    w_tool_id(w, tc->id ? tc->id : "");
    brisk_buf_str(w, ",\"name\":");
    srv_api_put_str(w, tc->name, strlen(tc->name));
    brisk_buf_str(w, ",\"input\":");
    char *in = with_input ? call_input(tc) : NULL;
    if (with_input && !in)
        w->oom = 1;
    brisk_buf_str(w, in ? in : "{}");
    free(in);
    brisk_buf_str(w, "}");
}

static void w_usage(brisk_buf *w, const srv_usage *u) {
    int cached = u->cached_tokens < u->prompt_tokens ? u->cached_tokens : u->prompt_tokens;
    brisk_buf_str(w, "{\"input_tokens\":");
    srv_api_put_int(w, u->prompt_tokens - cached);
    brisk_buf_str(w, ",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
    srv_api_put_int(w, cached);
    brisk_buf_str(w, ",\"output_tokens\":");
    srv_api_put_int(w, u->completion_tokens);
    brisk_buf_str(w, "}");
}

/* "stop_reason":..,"stop_sequence":.. */
static void w_stop(brisk_buf *w, const char *reason, const char *seq) {
    brisk_buf_str(w, "\"stop_reason\":");
    if (reason)
        srv_api_put_str(w, reason, strlen(reason));
    else
        brisk_buf_str(w, "null");
    brisk_buf_str(w, ",\"stop_sequence\":");
    if (seq)
        srv_api_put_str(w, seq, strlen(seq));
    else
        brisk_buf_str(w, "null");
}

char *srv_anthropic_json(const char *id, const char *model, const srv_anth_result *res) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"id\":");
    srv_api_put_str(&w, id, strlen(id));
    brisk_buf_str(&w, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    srv_api_put_str(&w, model, strlen(model));
    brisk_buf_str(&w, ",\"content\":[");
    int k = 0;
    if (res->thinking && res->thinking_len) {
        brisk_buf_str(&w, "{\"type\":\"thinking\",\"thinking\":");
        srv_api_put_str(&w, res->thinking, res->thinking_len);
        brisk_buf_str(&w, ",\"signature\":\"\"}");
        k++;
    }
    if (res->text && res->text_len) {
        brisk_buf_str(&w, k++ ? "," : "");
        brisk_buf_str(&w, "{\"type\":\"text\",\"text\":");
        srv_api_put_str(&w, res->text, res->text_len);
        brisk_buf_str(&w, "}");
    }
    for (int i = 0; i < res->n_calls; i++) {
        brisk_buf_str(&w, k++ ? "," : "");
        w_tool_use(&w, &res->calls[i], 1);
    }
    brisk_buf_str(&w, "],");
    w_stop(&w, res->stop_reason, res->stop_sequence);
    brisk_buf_str(&w, ",\"usage\":");
    w_usage(&w, &res->usage);
    brisk_buf_str(&w, "}");
    return brisk_buf_take(&w, NULL);
}

/* ---- streams ------------------------------------------------------------------------- */

/* Starts an event: "event: <type>\ndata: {"type":"<type>"". */
static void ev_open(brisk_buf *w, const char *type) {
    brisk_buf_printf(w, "event: %s\ndata: {\"type\":\"%s\"", type, type);
}

static void ev_close(brisk_buf *w) {
    brisk_buf_str(w, "}\n\n");
}

static void ev_block_stop(brisk_buf *w, int index) {
    ev_open(w, "content_block_stop");
    brisk_buf_printf(w, ",\"index\":%d", index);
    ev_close(w);
}

char *srv_anthropic_sse_start(srv_anth_req *ar, const char *id, const char *model, int input_tokens,
                              size_t *len) {
    (void)ar;
    brisk_buf w = {0};
    ev_open(&w, "message_start");
    brisk_buf_str(&w, ",\"message\":{\"id\":");
    srv_api_put_str(&w, id, strlen(id));
    brisk_buf_str(&w, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    srv_api_put_str(&w, model, strlen(model));
    brisk_buf_str(&w, ",\"content\":[],");
    w_stop(&w, NULL, NULL);
    brisk_buf_str(&w, ",\"usage\":");
    srv_usage u = {input_tokens, 0, 0};
    w_usage(&w, &u);
    brisk_buf_str(&w, "}");
    ev_close(&w);
    ev_open(&w, "ping");
    ev_close(&w);
    return brisk_buf_take(&w, len);
}

/* Closes the open block, if any. */
static void close_open(brisk_buf *w, srv_anth_req *ar) {
    if (ar->open != SRV_ANTH_OPEN_NONE)
        ev_block_stop(w, ar->n_blocks - 1);
    ar->open = SRV_ANTH_OPEN_NONE;
}

char *srv_anthropic_sse_delta(srv_anth_req *ar, int thinking, const char *text, size_t n,
                              size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "");
    srv_anth_open want = thinking ? SRV_ANTH_OPEN_THINKING : SRV_ANTH_OPEN_TEXT;
    if (n > 0 && ar->open != want) {
        close_open(&w, ar);
        ev_open(&w, "content_block_start");
        brisk_buf_printf(&w, ",\"index\":%d,\"content_block\":", ar->n_blocks++);
        brisk_buf_str(&w, thinking ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"
                                   : "{\"type\":\"text\",\"text\":\"\"}");
        ev_close(&w);
        ar->open = want;
    }
    if (n > 0) {
        ev_open(&w, "content_block_delta");
        brisk_buf_printf(&w, ",\"index\":%d,\"delta\":", ar->n_blocks - 1);
        brisk_buf_str(&w, thinking ? "{\"type\":\"thinking_delta\",\"thinking\":"
                                   : "{\"type\":\"text_delta\",\"text\":");
        srv_api_put_str(&w, text, n);
        brisk_buf_str(&w, "}");
        ev_close(&w);
    }
    return brisk_buf_take(&w, len);
}

char *srv_anthropic_sse_call(srv_anth_req *ar, const char *id, const char *name, const char *frag,
                             size_t n, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "");
    if (id && name) {
        close_open(&w, ar);
        srv_tool_call tc = {(char *)id, (char *)name, NULL};
        ev_open(&w, "content_block_start");
        brisk_buf_printf(&w, ",\"index\":%d,\"content_block\":", ar->n_blocks++);
        w_tool_use(&w, &tc, 0);
        ev_close(&w);
        ar->open = SRV_ANTH_OPEN_TOOL;
        ar->n_calls++;
    }
    if (ar->open == SRV_ANTH_OPEN_TOOL && frag && n > 0) {
        ev_open(&w, "content_block_delta");
        brisk_buf_printf(&w, ",\"index\":%d,\"delta\":{\"type\":\"input_json_delta\",",
                         ar->n_blocks - 1);
        brisk_buf_str(&w, "\"partial_json\":");
        srv_api_put_str(&w, frag, n);
        brisk_buf_str(&w, "}");
        ev_close(&w);
    }
    return brisk_buf_take(&w, len);
}

char *srv_anthropic_sse_finish(srv_anth_req *ar, const srv_anth_result *res, size_t *len) {
    brisk_buf w = {0};
    close_open(&w, ar);
    ev_open(&w, "message_delta");
    brisk_buf_str(&w, ",\"delta\":{");
    w_stop(&w, res->stop_reason, res->stop_sequence);
    brisk_buf_str(&w, "},\"usage\":");
    w_usage(&w, &res->usage);
    ev_close(&w);
    ev_open(&w, "message_stop");
    ev_close(&w);
    return brisk_buf_take(&w, len);
}

/* ---- errors ------------------------------------------------------------------------ */

const char *srv_anthropic_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static void w_error(brisk_buf *w, int status, const char *message) {
    const char *t = srv_anthropic_error_type(status);
    brisk_buf_str(w, "{\"type\":\"error\",\"error\":{\"type\":\"");
    brisk_buf_str(w, t);
    brisk_buf_str(w, "\",\"message\":");
    srv_api_put_str(w, message ? message : "", message ? strlen(message) : 0);
    brisk_buf_str(w, "}}");
}

char *srv_anthropic_error_json(int status, const char *type, const char *code, const char *param,
                               const char *message) {
    (void)type;
    (void)code;
    (void)param;
    brisk_buf w = {0};
    w_error(&w, status, message);
    return brisk_buf_take(&w, NULL);
}

char *srv_anthropic_sse_error(int status, const char *message, size_t *len) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "event: error\ndata: ");
    w_error(&w, status, message);
    brisk_buf_str(&w, "\n\n");
    return brisk_buf_take(&w, len);
}

char *srv_anthropic_count_json(int input_tokens) {
    brisk_buf w = {0};
    brisk_buf_str(&w, "{\"input_tokens\":");
    srv_api_put_int(&w, input_tokens);
    brisk_buf_str(&w, "}");
    return brisk_buf_take(&w, NULL);
}
