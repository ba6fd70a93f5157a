/* srv_tools.c - tool calling (see srv_tools.h). */
#include "server/api/srv_tools.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "server/api/srv_api_json.h"
#include "server/api/srv_schema.h"

static char *t_dup(const char *s) {
    return s ? brisk_strdup(s) : NULL;
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

void srv_tools_free(srv_tool *t, int n) {
    for (int i = 0; t && i < n; i++) {
        free(t[i].name);
        free(t[i].description);
        free(t[i].parameters);
        free(t[i].args_rules);
        free(t[i].args_expr);
    }
    free(t);
}

void srv_tool_calls_free(srv_tool_call *c, int n) {
    for (int i = 0; c && i < n; i++) {
        free(c[i].id);
        free(c[i].name);
        free(c[i].arguments);
    }
    free(c);
}

/* ---- parsing the request -------------------------------------------------------------- */

static int parse_tool(const cJSON *it, int i, srv_tool *t, srv_api_error *err) {
    char param[48];
    snprintf(param, sizeof param, "tools[%d]", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
    if (!cJSON_IsObject(it) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
        !cJSON_IsObject(fn))
        return srv_api_fail(err, "invalid_value", param,
                            "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return srv_api_fail(err, "invalid_value", param,
                            "'%s.function.name' must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-'",
                            param);
    if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
        return srv_api_fail(err, "invalid_type", param,
                            "'%s.function.description' must be a string", param);
    if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
        return srv_api_fail(err, "invalid_type", param,
                            "'%s.function.parameters' must be an object", param);
    if (!(t->name = t_dup(name->valuestring)))
        return srv_api_oom(err);
    if (cJSON_IsString(desc) && !(t->description = t_dup(desc->valuestring)))
        return srv_api_oom(err);
    if (cJSON_IsObject(params)) {
        if (!(t->parameters = cJSON_PrintUnformatted(params)))
            return srv_api_oom(err);
        char prefix[16], why[200] = "";
        snprintf(prefix, sizeof prefix, "t%d", i);
        int rc = srv_schema_rules(params, prefix, &t->args_rules, &t->args_expr, why, sizeof why);
        if (rc == BRISK_ENOMEM)
            return srv_api_oom(err);
        if (rc < 0)
            return srv_api_fail(err, "invalid_schema", param, "'%s.function.parameters': %s", param,
                                why);
    } else if (!(t->args_expr = t_dup("jo"))) {
        return srv_api_oom(err);
    }
    return 0;
}

int srv_tools_parse(const cJSON *tools, const cJSON *tool_choice, const cJSON *parallel,
                    srv_chat_req *r, srv_api_error *err) {
    r->parallel_tool_calls = 1;
    r->tool_choice = SRV_TOOL_CHOICE_NONE;
    if (parallel && !cJSON_IsNull(parallel)) {
        if (!cJSON_IsBool(parallel))
            return srv_api_fail(err, "invalid_type", "parallel_tool_calls",
                                "'parallel_tool_calls' must be a boolean");
        r->parallel_tool_calls = cJSON_IsTrue(parallel);
    }
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools))
            return srv_api_fail(err, "invalid_type", "tools", "'tools' must be an array");
        int n = cJSON_GetArraySize(tools);
        if (n > SRV_MAX_TOOLS)
            return srv_api_fail(err, "invalid_value", "tools", "at most %d tools are allowed",
                                SRV_MAX_TOOLS);
        if (n > 0 && !(r->tools = brisk_calloc((size_t)n, sizeof *r->tools)))
            return srv_api_oom(err);
        for (const cJSON *c = tools->child; c; c = c->next) {
            int rc = parse_tool(c, r->n_tools, &r->tools[r->n_tools], err);
            r->n_tools++;
            if (rc < 0)
                return rc;
            for (int k = 0; k < r->n_tools - 1; k++)
                if (!strcmp(r->tools[k].name, r->tools[r->n_tools - 1].name))
                    return srv_api_fail(err, "invalid_value", "tools", "two tools are named '%s'",
                                        r->tools[k].name);
        }
    }
    if (r->n_tools > 0)
        r->tool_choice = SRV_TOOL_CHOICE_AUTO;
    if (!tool_choice || cJSON_IsNull(tool_choice))
        return 0;
    if (cJSON_IsString(tool_choice)) {
        const char *s = tool_choice->valuestring;
        if (!strcmp(s, "none")) {
            r->tool_choice = SRV_TOOL_CHOICE_NONE;
            return 0;
        }
        if (!strcmp(s, "auto") || !strcmp(s, "required")) {
            if (r->n_tools == 0)
                return !strcmp(s, "auto")
                           ? 0
                           : srv_api_fail(err, "invalid_value", "tool_choice",
                                          "'tool_choice' \"required\" needs 'tools'");
            r->tool_choice = !strcmp(s, "auto") ? SRV_TOOL_CHOICE_AUTO : SRV_TOOL_CHOICE_REQUIRED;
            return 0;
        }
        return srv_api_fail(err, "invalid_value", "tool_choice",
                            "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
    }
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool_choice, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(tool_choice) || !cJSON_IsString(name))
        return srv_api_fail(err, "invalid_value", "tool_choice",
                            "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (int k = 0; k < r->n_tools; k++)
        if (!strcmp(r->tools[k].name, name->valuestring)) {
            r->tool_choice = SRV_TOOL_CHOICE_NAMED;
            r->tool_named = k;
            return 0;
        }
    return srv_api_fail(err, "invalid_value", "tool_choice",
                        "'tool_choice' names no tool in 'tools'");
}

int srv_tools_parse_calls(const cJSON *calls, const char *param, srv_chat_msg *m,
                          srv_api_error *err) {
    char p[96];
    snprintf(p, sizeof p, "%s.tool_calls", param);
    if (!cJSON_IsArray(calls))
        return srv_api_fail(err, "invalid_type", p, "'%s' must be an array", p);
    int n = cJSON_GetArraySize(calls);
    if (n > SRV_MAX_TOOLS)
        return srv_api_fail(err, "invalid_value", p, "at most %d calls in '%s'", SRV_MAX_TOOLS, p);
    if (n > 0 && !(m->calls = brisk_calloc((size_t)n, sizeof *m->calls)))
        return srv_api_oom(err);
    for (const cJSON *c = calls->child; c; c = c->next) {
        srv_tool_call *t = &m->calls[m->n_calls++];
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(c) || !cJSON_IsString(name) || !valid_name(name->valuestring) ||
            (args && !cJSON_IsString(args) && !cJSON_IsNull(args)) ||
            (id && !cJSON_IsString(id) && !cJSON_IsNull(id)))
            return srv_api_fail(err, "invalid_value", p,
                                "each of '%s' must be {\"id\": ..., \"type\": \"function\", "
                                "\"function\": {\"name\": ..., \"arguments\": \"<JSON text>\"}}",
                                p);
        /* the arguments are JSON text: rendered as the JSON they hold */
        cJSON *parsed =
            cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_CreateObject();
        if (!parsed)
            return srv_api_fail(err, "invalid_value", p, "the arguments in '%s' are not valid JSON",
                                p);
        t->arguments = cJSON_PrintUnformatted(parsed);
        cJSON_Delete(parsed);
        t->name = t_dup(name->valuestring);
        t->id = t_dup(cJSON_IsString(id) ? id->valuestring : "");
        if (!t->arguments || !t->name || !t->id)
            return srv_api_oom(err);
    }
    return 0;
}

/* ---- rendering -------------------------------------------------------------------- */

static int hermes(model_chat_kind kind) {
    return kind == MODEL_CHAT_CHATML;
}

/* Llama 3.1's JSON tool calls: tools in the first user turn, a call as
 * {"name": ..., "parameters": {...}}, results in "ipython" turns. */
static int llama3(model_chat_kind kind) {
    return kind == MODEL_CHAT_LLAMA3;
}

/* Mistral's: [AVAILABLE_TOOLS] before the last user turn, a call list after
 * [TOOL_CALLS], results in [TOOL_RESULTS] blocks (as its v3 template). */
static int mistral(model_chat_kind kind) {
    return kind == MODEL_CHAT_MISTRAL;
}

/* Mistral's call ids are 9 letters and digits: the last 9 of id's, padded. */
static void mistral_id(const char *id, char out[10]) {
    char alnum[64];
    size_t n = 0;
    for (; *id && n < sizeof alnum; id++)
        if ((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') || (*id >= '0' && *id <= '9'))
            alnum[n++] = *id;
    for (int k = 0; k < 9; k++)
        out[k] = n >= (size_t)(9 - k) ? alnum[n - (size_t)(9 - k)] : '0';
    out[9] = '\0';
}

/* Keeps s in the arena; returns it, or NULL on out of memory. */
static const char *keep(srv_tools_arena *a, brisk_buf *b) {
    if (b->oom || brisk_grow(&a->s, &a->cap, a->n + 1, sizeof *a->s, 8, 0) < 0) {
        free(b->p);
        return NULL;
    }
    if (!b->p)
        brisk_buf_str(b, "");
    if (b->oom)
        return NULL;
    a->s[a->n++] = b->p;
    return b->p;
}

void srv_tools_arena_free(srv_tools_arena *a) {
    for (size_t i = 0; i < a->n; i++)
        free(a->s[i]);
    free(a->s);
    free(a->msgs);
    memset(a, 0, sizeof *a);
}

/* One tool as JSON: {"type": "function", "function": {...}} (Hermes) or
 * {"name", "description", "parameters"} (generic). */
static void tool_json(brisk_buf *b, const srv_tool *t, int wrap) {
    cJSON *o = cJSON_CreateObject(), *fn = wrap ? cJSON_CreateObject() : o;
    if (!o || !fn) {
        b->oom = 1;
        cJSON_Delete(o);
        if (fn != o)
            cJSON_Delete(fn);
        return;
    }
    if (wrap) {
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddItemToObject(o, "function", fn);
    }
    cJSON_AddStringToObject(fn, "name", t->name);
    if (t->description)
        cJSON_AddStringToObject(fn, "description", t->description);
    cJSON *p = t->parameters ? cJSON_Parse(t->parameters) : cJSON_CreateObject();
    if (p)
        cJSON_AddItemToObject(fn, "parameters", p);
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        brisk_buf_str(b, s);
    else
        b->oom = 1;
    cJSON_free(s);
    cJSON_Delete(o);
}

static void tools_block(brisk_buf *b, const srv_chat_req *r, model_chat_kind kind) {
    if (mistral(kind)) {
        brisk_buf_str(b, "[AVAILABLE_TOOLS] [");
        for (int i = 0; i < r->n_tools; i++) {
            if (i)
                brisk_buf_str(b, ", ");
            tool_json(b, &r->tools[i], 1);
        }
        brisk_buf_str(b, "][/AVAILABLE_TOOLS]");
        return;
    }
    if (llama3(kind)) { /* the words of Llama 3.1's template (tools in the user turn) */
        brisk_buf_str(b, "Given the following functions, please respond with a JSON for a "
                         "function call with its proper arguments that best answers the given "
                         "prompt.\n\nRespond in the format {\"name\": function name, "
                         "\"parameters\": dictionary of argument name and its value}.Do not use "
                         "variables.\n\n");
        for (int i = 0; i < r->n_tools; i++) {
            tool_json(b, &r->tools[i], 1);
            brisk_buf_str(b, "\n\n");
        }
        return;
    }
    if (hermes(kind)) {
        brisk_buf_str(b, "# Tools\n\nYou may call one or more functions to assist with the user "
                         "query.\n\nYou are provided with function signatures within "
                         "<tools></tools> XML tags:\n<tools>");
        for (int i = 0; i < r->n_tools; i++) {
            brisk_buf_str(b, "\n");
            tool_json(b, &r->tools[i], 1);
        }
        brisk_buf_str(b, "\n</tools>\n\nFor each function call, return a json object with "
                         "function name and arguments within <tool_call></tool_call> XML "
                         "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                         "<args-json-object>}\n</tool_call>");
        return;
    }
    brisk_buf_str(b, "You can call these tools:\n[");
    for (int i = 0; i < r->n_tools; i++) {
        if (i)
            brisk_buf_str(b, ", ");
        tool_json(b, &r->tools[i], 0);
    }
    brisk_buf_str(b, "]\nAnswer with one JSON object: {\"tool_calls\": [{\"name\": <tool name>, "
                     "\"arguments\": {<arguments>}}]} to call tools, or {\"response\": <your "
                     "answer>} to answer.");
}

/* An assistant message's calls written in the format, after its content. */
static void calls_text(brisk_buf *b, const srv_chat_msg *m, model_chat_kind kind) {
    if (mistral(kind)) {
        brisk_buf_str(b, "[TOOL_CALLS] [");
        for (int k = 0; k < m->n_calls; k++) {
            char id[10];
            mistral_id(m->calls[k].id, id);
            brisk_buf_printf(b, "%s{\"name\": \"%s\", \"arguments\": ", k ? ", " : "",
                             m->calls[k].name);
            brisk_buf_str(b, m->calls[k].arguments);
            brisk_buf_printf(b, ", \"id\": \"%s\"}", id);
        }
        brisk_buf_str(b, "]");
        return;
    }
    if (llama3(kind)) { /* one JSON object per call, a line each */
        for (int k = 0; k < m->n_calls; k++) {
            brisk_buf_str(b, k ? "\n{\"name\": \"" : "{\"name\": \"");
            brisk_buf_str(b, m->calls[k].name);
            brisk_buf_str(b, "\", \"parameters\": ");
            brisk_buf_str(b, m->calls[k].arguments);
            brisk_buf_str(b, "}");
        }
        return;
    }
    if (hermes(kind)) {
        if (m->content_len)
            brisk_buf_put(b, m->content, m->content_len);
        for (int k = 0; k < m->n_calls; k++) {
            brisk_buf_str(b, (m->content_len || k) ? "\n<tool_call>\n{\"name\": \""
                                                   : "<tool_call>\n{\"name\": \"");
            brisk_buf_str(b, m->calls[k].name);
            brisk_buf_str(b, "\", \"arguments\": ");
            brisk_buf_str(b, m->calls[k].arguments);
            brisk_buf_str(b, "}\n</tool_call>");
        }
        return;
    }
    brisk_buf_str(b, "{\"tool_calls\": [");
    for (int k = 0; k < m->n_calls; k++) {
        brisk_buf_str(b, k ? ", {\"name\": \"" : "{\"name\": \"");
        brisk_buf_str(b, m->calls[k].name);
        brisk_buf_str(b, "\", \"arguments\": ");
        brisk_buf_str(b, m->calls[k].arguments);
        brisk_buf_str(b, "}");
    }
    brisk_buf_str(b, "]}");
}

int srv_tools_render_msgs(const srv_chat_req *r, model_chat_kind kind, srv_tools_arena *a,
                          const model_chat_msg **out, int *n_out) {
    memset(a, 0, sizeof *a);
    int offered = r->n_tools > 0 && r->tool_choice != SRV_TOOL_CHOICE_NONE;
    a->msgs = brisk_calloc((size_t)r->n_msgs + 1, sizeof *a->msgs);
    if (!a->msgs)
        return BRISK_ENOMEM;
    int n = 0, i = 0;
    if (mistral(kind)) {
        /* more messages: the tools block, and [TOOL_CALLS] closing the prompt */
        model_chat_msg *more = brisk_realloc(a->msgs, ((size_t)r->n_msgs + 3) * sizeof *more);
        if (!more)
            return BRISK_ENOMEM;
        a->msgs = more;
        int last_user = -1;
        for (int k = 0; k < r->n_msgs; k++)
            if (!strcmp(r->msgs[k].role, "user"))
                last_user = k;
        for (i = 0; i < r->n_msgs; i++) {
            const srv_chat_msg *m = &r->msgs[i];
            if (offered && i == (last_user >= 0 ? last_user : 0)) {
                brisk_buf b = {0};
                tools_block(&b, r, kind);
                const char *s = keep(a, &b);
                if (!s)
                    return BRISK_ENOMEM;
                a->msgs[n++] = (model_chat_msg){"raw", s, strlen(s)};
            }
            brisk_buf b = {0};
            if (!strcmp(m->role, "tool")) {
                char id[10];
                mistral_id(m->tool_call_id ? m->tool_call_id : "", id);
                cJSON *str = cJSON_CreateString(m->content);
                char *js = str ? cJSON_PrintUnformatted(str) : NULL;
                cJSON_Delete(str);
                if (!js)
                    return BRISK_ENOMEM;
                brisk_buf_printf(&b,
                                 "[TOOL_RESULTS] {\"content\": %s, \"call_id\": \"%s\"}"
                                 "[/TOOL_RESULTS]",
                                 js, id);
                cJSON_free(js);
            } else if (m->n_calls > 0) {
                calls_text(&b, m, kind);
            } else {
                a->msgs[n++] = (model_chat_msg){m->role, m->content, m->content_len};
                continue;
            }
            const char *s = keep(a, &b);
            if (!s)
                return BRISK_ENOMEM;
            a->msgs[n++] =
                (model_chat_msg){!strcmp(m->role, "tool") ? "raw" : "assistant", s, strlen(s)};
        }
        if (offered &&
            (r->tool_choice == SRV_TOOL_CHOICE_REQUIRED || r->tool_choice == SRV_TOOL_CHOICE_NAMED))
            a->msgs[n++] = (model_chat_msg){"raw", "[TOOL_CALLS]", 12};
        *out = a->msgs;
        *n_out = n;
        return 0;
    }
    if (offered && llama3(kind)) { /* the tools before the first user turn's text */
        int placed = 0;
        for (; i < r->n_msgs && !placed; i++) {
            const srv_chat_msg *m = &r->msgs[i];
            if (!strcmp(m->role, "user")) {
                brisk_buf b = {0};
                tools_block(&b, r, kind);
                brisk_buf_put(&b, m->content, m->content_len);
                const char *s = keep(a, &b);
                if (!s)
                    return BRISK_ENOMEM;
                a->msgs[n++] = (model_chat_msg){"user", s, strlen(s)};
                placed = 1;
                continue;
            }
            if (!strcmp(m->role, "tool") || m->n_calls > 0)
                break; /* calls before any user turn: rendered below */
            a->msgs[n++] = (model_chat_msg){m->role, m->content, m->content_len};
        }
        if (!placed) { /* no user turn to put them in: one of their own */
            brisk_buf b = {0};
            tools_block(&b, r, kind);
            const char *s = keep(a, &b);
            if (!s)
                return BRISK_ENOMEM;
            a->msgs[n++] = (model_chat_msg){"user", s, strlen(s)};
        }
        offered = 0;
    }
    if (offered) { /* the tools, in (or as) the first system turn */
        brisk_buf b = {0};
        if (r->n_msgs > 0 && !strcmp(r->msgs[0].role, "system")) {
            brisk_buf_put(&b, r->msgs[0].content, r->msgs[0].content_len);
            brisk_buf_str(&b, "\n\n");
            i = 1;
        }
        tools_block(&b, r, kind);
        const char *s = keep(a, &b);
        if (!s)
            return BRISK_ENOMEM;
        a->msgs[n++] = (model_chat_msg){"system", s, strlen(s)};
    }
    for (; i < r->n_msgs; i++) {
        const srv_chat_msg *m = &r->msgs[i];
        if (!strcmp(m->role, "tool") && llama3(kind)) { /* Llama 3: an ipython turn each */
            a->msgs[n++] = (model_chat_msg){"ipython", m->content, m->content_len};
        } else if (!strcmp(m->role, "tool")) { /* consecutive results: one user turn */
            brisk_buf b = {0};
            for (; i < r->n_msgs && !strcmp(r->msgs[i].role, "tool"); i++) {
                const srv_chat_msg *t = &r->msgs[i];
                if (hermes(kind)) {
                    brisk_buf_str(&b, b.len ? "\n<tool_response>\n" : "<tool_response>\n");
                    brisk_buf_put(&b, t->content, t->content_len);
                    brisk_buf_str(&b, "\n</tool_response>");
                } else {
                    brisk_buf_str(&b, b.len ? "\nTool result: " : "Tool result: ");
                    brisk_buf_put(&b, t->content, t->content_len);
                }
            }
            i--;
            const char *s = keep(a, &b);
            if (!s)
                return BRISK_ENOMEM;
            a->msgs[n++] = (model_chat_msg){"user", s, strlen(s)};
        } else if (!strcmp(m->role, "assistant") && m->n_calls > 0) {
            brisk_buf b = {0};
            calls_text(&b, m, kind);
            const char *s = keep(a, &b);
            if (!s)
                return BRISK_ENOMEM;
            a->msgs[n++] = (model_chat_msg){"assistant", s, strlen(s)};
        } else {
            a->msgs[n++] = (model_chat_msg){m->role, m->content, m->content_len};
        }
    }
    *out = a->msgs;
    *n_out = n;
    return 0;
}

/* ---- the grammar --------------------------------------------------------------------- */

char *srv_tools_grammar(const srv_chat_req *r, model_chat_kind kind, int *none) {
    *none = 0;
    int offered = r->n_tools > 0 && r->tool_choice != SRV_TOOL_CHOICE_NONE;
    if (!offered || (r->tool_choice == SRV_TOOL_CHOICE_AUTO &&
                     (hermes(kind) || llama3(kind) || mistral(kind)))) {
        *none = 1;
        return NULL;
    }
    brisk_buf b = {0};
    /* call ::= one alternative per allowed tool: its name, then arguments
     * that follow its parameters schema */
    brisk_buf_str(&b, "tcall ::= ");
    int first = 1;
    const char *args_key = llama3(kind) ? "parameters" : "arguments";
    for (int i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == SRV_TOOL_CHOICE_NAMED && i != r->tool_named)
            continue;
        brisk_buf_str(&b, first ? "" : " | ");
        first = 0;
        brisk_buf_printf(&b, "\"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" %s \"}\"",
                         r->tools[i].name, args_key, r->tools[i].args_expr);
    }
    brisk_buf_str(&b, "\n");
    const char *more = r->parallel_tool_calls ? "*" : "{0}";
    if (llama3(kind)) {
        brisk_buf_printf(&b, "root ::= tcall ( \"\\n\" tcall )%s\n", more);
    } else if (mistral(kind)) { /* after the [TOOL_CALLS] the prompt ends with */
        brisk_buf_printf(&b, "root ::= \" \"? \"[\" tcall ( \", \" tcall )%s \"]\"\n", more);
    } else if (hermes(kind)) {
        brisk_buf_printf(&b,
                         "hcall ::= \"<tool_call>\\n\" tcall \"\\n</tool_call>\"\n"
                         "root ::= hcall ( \"\\n\" hcall )%s\n",
                         more);
    } else {
        brisk_buf_printf(
            &b, "calls ::= \"{\\\"tool_calls\\\": [\" tcall ( \", \" tcall )%s \"]}\"\n", more);
        if (r->tool_choice == SRV_TOOL_CHOICE_AUTO)
            brisk_buf_str(&b, "root ::= calls | \"{\\\"response\\\": \" js \"}\"\n");
        else
            brisk_buf_str(&b, "root ::= calls\n");
    }
    for (int i = 0; i < r->n_tools; i++)
        if (r->tools[i].args_rules)
            brisk_buf_str(&b, r->tools[i].args_rules);
    brisk_buf_str(&b, srv_schema_base());
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ---- parsing an answer ----------------------------------------------------------------- */

static const char *find(const char *s, const char *end, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = s; p + n <= end; p++)
        if (!memcmp(p, needle, n))
            return p;
    return NULL;
}

/* One call object {"name": "...", "arguments": {...} or "<JSON>"} into *c. */
static int call_from_json(const cJSON *o, srv_tool_call *c, void (*make_id)(void *, char[32]),
                          void *ctx) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) /* Llama 3's key */
        args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !valid_name(name->valuestring))
        return 0;
    cJSON *parsed = NULL;
    if (cJSON_IsString(args))
        args = parsed = cJSON_Parse(args->valuestring);
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(parsed);
        return 0;
    }
    char id[32];
    make_id(ctx, id);
    c->arguments = cJSON_PrintUnformatted(args);
    c->name = t_dup(name->valuestring);
    c->id = t_dup(id);
    cJSON_Delete(parsed);
    return c->arguments && c->name && c->id ? 1 : BRISK_ENOMEM;
}

static char *trimmed_dup(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    if (!n)
        return NULL;
    char *d = brisk_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The calls parsed so far from one answer. */
typedef struct call_list {
    srv_tool_call *v;
    size_t cap;
    int n;
    void (*make_id)(void *, char[32]);
    void *id_ctx;
} call_list;

/* Appends the call o describes: 1, 0 when o is not a call, or BRISK_ENOMEM
 * (nothing half-made is left behind). */
static int add_call(call_list *l, const cJSON *o) {
    if (brisk_grow(&l->v, &l->cap, (size_t)l->n + 1, sizeof *l->v, 4, 0) < 0)
        return BRISK_ENOMEM;
    srv_tool_call *c = &l->v[l->n];
    memset(c, 0, sizeof *c);
    int ok = call_from_json(o, c, l->make_id, l->id_ctx);
    if (ok < 0) {
        free(c->id);
        free(c->name);
        free(c->arguments);
        memset(c, 0, sizeof *c);
    }
    l->n += ok == 1;
    return ok;
}

/* Forgets the calls (the answer turned out to be text). */
static void drop_calls(call_list *l) {
    srv_tool_calls_free(l->v, l->n);
    l->v = NULL;
    l->cap = 0;
    l->n = 0;
}

int srv_tools_parse_output(model_chat_kind kind, const char *text, size_t len,
                           void (*make_id)(void *ctx, char out[32]), void *id_ctx,
                           srv_tool_call **calls, char **content) {
    *calls = NULL;
    *content = NULL;
    const char *end = text + len;
    call_list l = {NULL, 0, 0, make_id, id_ctx};
    int rc = 0;
    brisk_buf rest = {0};
    if (mistral(kind) || llama3(kind)) {
        /* Mistral: [TOOL_CALLS] (a control token: no text) then a JSON list;
         * Llama 3: JSON objects one after another. Anything else: text. */
        const char *p = text;
        while (p < end && strchr(" \t\r\n", *p))
            p++;
        if (mistral(kind) && end - p >= 12 && !memcmp(p, "[TOOL_CALLS]", 12))
            p += 12;
        int all = 1;
        if (mistral(kind)) {
            cJSON *list = cJSON_ParseWithLength(p, (size_t)(end - p));
            all = cJSON_IsArray(list) && list->child;
            for (const cJSON *c = all ? list->child : NULL; c && all && rc == 0; c = c->next) {
                int ok = add_call(&l, c);
                rc = ok < 0 ? ok : 0;
                all = ok == 1;
            }
            cJSON_Delete(list);
        } else {
            while (all && rc == 0) {
                while (p < end && strchr(" \t\r\n;", *p))
                    p++;
                if (p >= end)
                    break;
                const char *stop = NULL;
                cJSON *o = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
                int ok = o ? add_call(&l, o) : 0;
                cJSON_Delete(o);
                rc = ok < 0 ? ok : 0;
                all = ok == 1 && stop && stop > p;
                p = all ? stop : end;
            }
        }
        if ((!all || l.n == 0) && rc == 0) {
            drop_calls(&l);
            brisk_buf_put(&rest, text, len);
        }
    } else if (hermes(kind)) {
        const char *p = text;
        for (;;) {
            const char *open = find(p, end, "<tool_call>");
            if (!open) {
                brisk_buf_put(&rest, p, (size_t)(end - p));
                break;
            }
            brisk_buf_put(&rest, p, (size_t)(open - p));
            const char *body = open + strlen("<tool_call>");
            const char *close = find(body, end, "</tool_call>");
            const char *stop = close ? close : end;
            cJSON *o = cJSON_ParseWithLength(body, (size_t)(stop - body));
            int ok = o ? add_call(&l, o) : 0;
            cJSON_Delete(o);
            if (ok < 0) {
                rc = ok;
                break;
            }
            if (ok != 1) /* not a call: it stays text */
                brisk_buf_put(&rest, open, (size_t)(stop - open) + (close ? 12 : 0));
            p = close ? close + strlen("</tool_call>") : end;
        }
    } else {
        cJSON *o = cJSON_ParseWithLength(text, len);
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "tool_calls");
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
        if (cJSON_IsArray(list)) {
            for (const cJSON *c = list->child; c && rc == 0; c = c->next) {
                int ok = add_call(&l, c);
                rc = ok < 0 ? ok : 0;
            }
        } else if (cJSON_IsString(resp)) {
            brisk_buf_str(&rest, resp->valuestring);
        } else {
            brisk_buf_put(&rest, text, len);
        }
        cJSON_Delete(o);
    }
    if (rc == 0 && !rest.oom && rest.len) {
        *content = trimmed_dup(rest.p, rest.len);
        size_t k = 0; /* NULL with non-blank text: out of memory */
        while (k < rest.len && strchr(" \n\t\r", rest.p[k]))
            k++;
        if (!*content && k < rest.len)
            rc = BRISK_ENOMEM;
    }
    free(rest.p);
    if (rc < 0 || rest.oom) {
        free(*content);
        *content = NULL;
        drop_calls(&l);
        return BRISK_ENOMEM;
    }
    if (l.n == 0)
        drop_calls(&l);
    *calls = l.v;
    return l.n;
}
