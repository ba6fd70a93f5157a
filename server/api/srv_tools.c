/* srv_tools.c - tool calling (see srv_tools.h): the request's tools,
 * tool_choice and history calls. The formats the calls are written and
 * parsed in are srv_tools_fmt.c's. */
#include "server/api/srv_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "server/api/srv_api_json.h"
#include "server/api/srv_schema.h"

static char *t_dup(const char *s) {
    return s ? brisk_strdup(s) : NULL;
}

int srv_tools_valid_name(const char *s) {
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
    if (!cJSON_IsString(name) || !srv_tools_valid_name(name->valuestring))
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
    } else if (!(t->args_expr = t_dup("\"{\" ws \"}\""))) {
        /* OpenAI reads a function without parameters as one that takes
         * none: its arguments are {} */
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
        if (!cJSON_IsObject(c) || !cJSON_IsString(name) ||
            !srv_tools_valid_name(name->valuestring) ||
            (args && !cJSON_IsString(args) && !cJSON_IsNull(args)) ||
            (id && !cJSON_IsString(id) && !cJSON_IsNull(id)))
            return srv_api_fail(err, "invalid_value", p,
                                "each of '%s' must be {\"id\": ..., \"type\": \"function\", "
                                "\"function\": {\"name\": ..., \"arguments\": \"<JSON text>\"}}",
                                p);
        /* the arguments are JSON text: rendered as the JSON they hold (a
         * parse that ran out of memory is a 500, not the client's 400) */
        unsigned long oom0 = brisk_alloc_cjson_failures();
        cJSON *parsed =
            cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_CreateObject();
        if (!parsed && brisk_alloc_cjson_failures() != oom0)
            return srv_api_oom(err);
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
