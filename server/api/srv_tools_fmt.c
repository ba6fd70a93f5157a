/* srv_tools_fmt.c - the tool-call formats (see srv_tools.h): one row,
 * srv_tool_format, per convention a model family was trained on, and the
 * code every row shares that reads it: the messages with the tools, the
 * history's calls and results written in, and the answer's grammar. The
 * calls are found in an answer by srv_tools_stream.c, from the row's
 * markup.
 *
 * Which row a family uses is named by the family's row in
 * models/chat_template.c (model_chat_tool_format); adding a format is a row
 * in tool_formats[] below, its few functions, and its test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "server/api/srv_schema.h"
#include "server/api/srv_tools.h"
#include "server/api/srv_tools_int.h"

/* ---- the rows' types ------------------------------------------------------------------ */

/* A list written as text: open, then each item between item_open and
 * item_close with sep between two items, then close (NULL: nothing). */
typedef struct tools_list {
    const char *open, *item_open, *sep, *item_close, *close;
} tools_list;

/* Where the tools' description goes: before message at (n_msgs: after the
 * last; -1: nowhere), either as a turn of its own or merged into message at. */
typedef enum {
    TOOLS_OWN_TURN = 0,
    TOOLS_AFTER_CONTENT, /* message at's content, "\n\n", the tools */
    TOOLS_BEFORE_CONTENT /* the tools, then message at's content */
} tools_merge;

typedef struct tools_spot {
    int at;
    tools_merge merge;
} tools_spot;

typedef struct srv_tool_format {
    const char *name; /* as model_chat_tool_format names it */

    /* The tools' description: each tool as JSON in a list. */
    tools_list tools;
    int tools_wrapped; /* each as {"type": "function", "function": {...}}, else the function */
    tools_spot (*tools_at)(const srv_chat_req *r);
    const char *tools_role; /* the role of the turn that holds it */
    /* "required" and named choices: text closing the prompt after the last
     * turn (Mistral's [TOOL_CALLS], a control token no grammar can make), or
     * NULL. It goes in as a "raw" message, which only a family whose row
     * takes that role (Mistral's) renders. */
    const char *forced_tail;

    /* An assistant's calls in the history: each {"name": ..., "<args_key>": ...}. */
    tools_list calls;
    const char *args_key;
    int keeps_content; /* the assistant's text stays, before its calls */
    /* Mistral: a call carries an "id" of 9 letters and digits, and a result
     * is {"content": <JSON string>, "call_id": ...} (else its text as is). */
    int call_ids;

    /* Tool results: a turn in result_role each, or, joined, consecutive
     * results as the items of one turn. */
    tools_list results;
    const char *result_role;
    int results_joined;

    /* The answer's grammar. auto_free: "auto" needs none (the model writes
     * text or calls as it was trained to; the calls are found as it writes).
     * Else gbnf_root writes the root over "tcall" (one call object,
     * args_key), more being the repetition of the calls after the first
     * ("{0,15}", or "{0}" without parallel_tool_calls). */
    int auto_free;
    void (*gbnf_root)(brisk_buf *b, const char *more, srv_tool_choice choice);

    /* How an answer holds its calls, for the parser that finds them as they
     * are written (srv_tools_stream.c). */
    srv_tools_markup markup;
} srv_tool_format;

static const srv_tool_format *format_of(model_chat_kind kind);

/* ---- writing ------------------------------------------------------------------------ */

static void put_opt(brisk_buf *b, const char *s) {
    if (s)
        brisk_buf_str(b, s);
}

/* The list s around n items, item(b, i, ctx) writing item i. started: text
 * already stands before the list's first item, which then gets a sep too. */
static void put_list(brisk_buf *b, const tools_list *s, int n, int started,
                     void (*item)(brisk_buf *, int, const void *), const void *ctx) {
    put_opt(b, s->open);
    for (int i = 0; i < n; i++) {
        if (i || started)
            put_opt(b, s->sep);
        put_opt(b, s->item_open);
        item(b, i, ctx);
        put_opt(b, s->item_close);
    }
    put_opt(b, s->close);
}

/* Mistral's call ids are 9 letters and digits: the last 9 of id's, padded. */
static void short_call_id(const char *id, char out[10]) {
    char alnum[64];
    size_t n = 0;
    for (; *id && n < sizeof alnum; id++)
        if ((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') || (*id >= '0' && *id <= '9'))
            alnum[n++] = *id;
    for (int k = 0; k < 9; k++)
        out[k] = n >= (size_t)(9 - k) ? alnum[n - (size_t)(9 - k)] : '0';
    out[9] = '\0';
}

/* A tool's function object, {"name", "description", "parameters"}; NULL
 * when out of memory. */
static cJSON *tool_function(const srv_tool *t) {
    cJSON *fn = cJSON_CreateObject();
    cJSON *p = t->parameters ? cJSON_Parse(t->parameters) : cJSON_CreateObject();
    if (fn && p && cJSON_AddStringToObject(fn, "name", t->name) &&
        (!t->description || cJSON_AddStringToObject(fn, "description", t->description)) &&
        cJSON_AddItemToObject(fn, "parameters", p))
        return fn;
    cJSON_Delete(fn); /* p is not in it: adding it was the last step */
    cJSON_Delete(p);
    return NULL;
}

/* One tool as JSON: {"type": "function", "function": {...}} (wrap) or the
 * function object alone. An allocation that fails sets b->oom: a tool
 * missing a part must not reach the prompt. */
static void tool_json(brisk_buf *b, const srv_tool *t, int wrap) {
    cJSON *fn = tool_function(t), *o = fn;
    if (fn && wrap) {
        o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "type", "function") ||
            !cJSON_AddItemToObject(o, "function", fn)) {
            cJSON_Delete(o); /* fn is not in it: adding it was the last step */
            cJSON_Delete(fn);
            o = NULL;
        }
    }
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    if (s)
        brisk_buf_str(b, s);
    else
        b->oom = 1;
    cJSON_free(s);
    cJSON_Delete(o);
}

typedef struct {
    const srv_tool_format *f;
    const srv_chat_req *r;
    const srv_chat_msg *m;
} item_ctx;

static void tool_item(brisk_buf *b, int i, const void *ctx) {
    const item_ctx *c = ctx;
    tool_json(b, &c->r->tools[i], c->f->tools_wrapped);
}

static void call_item(brisk_buf *b, int i, const void *ctx) {
    const item_ctx *c = ctx;
    const srv_tool_call *call = &c->m->calls[i];
    brisk_buf_printf(b, "{\"name\": \"%s\", \"%s\": ", call->name, c->f->args_key);
    brisk_buf_str(b, call->arguments);
    if (c->f->call_ids) {
        char id[10];
        short_call_id(call->id, id);
        brisk_buf_printf(b, ", \"id\": \"%s\"", id);
    }
    brisk_buf_str(b, "}");
}

/* Item i of a run of tool results starting at message c->m. */
static void result_item(brisk_buf *b, int i, const void *ctx) {
    const item_ctx *c = ctx;
    const srv_chat_msg *m = &c->m[i];
    if (!c->f->call_ids) {
        brisk_buf_put(b, m->content, m->content_len);
        return;
    }
    char id[10];
    short_call_id(m->tool_call_id ? m->tool_call_id : "", id);
    cJSON *str = cJSON_CreateString(m->content);
    char *js = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!js) {
        b->oom = 1;
        return;
    }
    brisk_buf_printf(b, "{\"content\": %s, \"call_id\": \"%s\"}", js, id);
    cJSON_free(js);
}

/* ---- the messages ------------------------------------------------------------------- */

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

/* Appends a message of role whose text b holds (kept in the arena). */
static int add_msg(srv_tools_arena *a, int *n, const char *role, brisk_buf *b) {
    const char *s = keep(a, b);
    if (!s)
        return BRISK_ENOMEM;
    a->msgs[(*n)++] = (model_chat_msg){role, s, strlen(s)};
    return 0;
}

int srv_tools_render_msgs(const srv_chat_req *r, model_chat_kind kind, srv_tools_arena *a,
                          const model_chat_msg **out, int *n_out) {
    const srv_tool_format *f = format_of(kind);
    memset(a, 0, sizeof *a);
    int offered = r->n_tools > 0 && r->tool_choice != SRV_TOOL_CHOICE_NONE;
    /* at most two more than the request's: the tools' turn, the forced tail */
    a->msgs = brisk_calloc((size_t)r->n_msgs + 2, sizeof *a->msgs);
    if (!a->msgs)
        return BRISK_ENOMEM;
    tools_spot spot = offered ? f->tools_at(r) : (tools_spot){-1, TOOLS_OWN_TURN};
    int n = 0;
    for (int i = 0; i <= r->n_msgs; i++) {
        const srv_chat_msg *m = i < r->n_msgs ? &r->msgs[i] : NULL;
        if (i == spot.at) {
            brisk_buf b = {0};
            if (spot.merge == TOOLS_AFTER_CONTENT) {
                brisk_buf_put(&b, m->content, m->content_len);
                brisk_buf_str(&b, "\n\n");
            }
            put_list(&b, &f->tools, r->n_tools, 0, tool_item, &(item_ctx){f, r, NULL});
            if (spot.merge == TOOLS_BEFORE_CONTENT)
                brisk_buf_put(&b, m->content, m->content_len);
            if (add_msg(a, &n, f->tools_role, &b) < 0)
                return BRISK_ENOMEM;
            if (spot.merge != TOOLS_OWN_TURN)
                continue;
        }
        if (!m)
            break;
        brisk_buf b = {0};
        if (!strcmp(m->role, "tool")) {
            int run = 1; /* the results written into this one turn */
            while (f->results_joined && i + run < r->n_msgs &&
                   !strcmp(r->msgs[i + run].role, "tool"))
                run++;
            put_list(&b, &f->results, run, 0, result_item, &(item_ctx){f, r, m});
            i += run - 1;
            if (add_msg(a, &n, f->result_role, &b) < 0)
                return BRISK_ENOMEM;
        } else if (m->n_calls > 0) {
            int started = f->keeps_content && m->content_len;
            if (started)
                brisk_buf_put(&b, m->content, m->content_len);
            put_list(&b, &f->calls, m->n_calls, started, call_item, &(item_ctx){f, r, m});
            if (add_msg(a, &n, "assistant", &b) < 0)
                return BRISK_ENOMEM;
        } else {
            a->msgs[n++] = (model_chat_msg){m->role, m->content, m->content_len};
        }
    }
    if (offered && f->forced_tail &&
        (r->tool_choice == SRV_TOOL_CHOICE_REQUIRED || r->tool_choice == SRV_TOOL_CHOICE_NAMED))
        a->msgs[n++] = (model_chat_msg){"raw", f->forced_tail, strlen(f->forced_tail)};
    *out = a->msgs;
    *n_out = n;
    return 0;
}

/* ---- the grammar --------------------------------------------------------------------- */

int srv_tools_forced(const srv_chat_req *r, model_chat_kind kind) {
    int offered = r->n_tools > 0 && r->tool_choice != SRV_TOOL_CHOICE_NONE;
    return offered && !(r->tool_choice == SRV_TOOL_CHOICE_AUTO && format_of(kind)->auto_free);
}

char *srv_tools_grammar(const srv_chat_req *r, model_chat_kind kind, int *none) {
    const srv_tool_format *f = format_of(kind);
    *none = 0;
    if (!srv_tools_forced(r, kind)) {
        *none = 1;
        return NULL;
    }
    brisk_buf b = {0};
    /* call ::= one alternative per allowed tool: its name, then arguments
     * that follow its parameters schema */
    brisk_buf_str(&b, "tcall ::= ");
    int first = 1;
    for (int i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == SRV_TOOL_CHOICE_NAMED && i != r->tool_named)
            continue;
        brisk_buf_str(&b, first ? "" : " | ");
        first = 0;
        brisk_buf_printf(&b, "\"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" %s \"}\"",
                         r->tools[i].name, f->args_key, r->tools[i].args_expr);
    }
    brisk_buf_str(&b, "\n");
    /* The calls after the first: bounded, so that a model that keeps
     * calling cannot fill its budget with calls none of which is returned. */
    char more[32];
    snprintf(more, sizeof more, "{0,%d}", r->parallel_tool_calls ? SRV_TOOLS_MAX_CALLS - 1 : 0);
    f->gbnf_root(&b, more, r->tool_choice);
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

/* ---- the formats ------------------------------------------------------------------------ */

/* In (or as) the first system turn. */
static tools_spot tools_in_system(const srv_chat_req *r) {
    int merge = r->n_msgs > 0 && !strcmp(r->msgs[0].role, "system");
    return (tools_spot){0, merge ? TOOLS_AFTER_CONTENT : TOOLS_OWN_TURN};
}

/* Before the first user turn's text (Llama 3.1's tools_in_user_message);
 * a user turn of their own when a call or result comes before any user
 * turn, or there is none. */
static tools_spot tools_in_first_user(const srv_chat_req *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        if (!strcmp(r->msgs[i].role, "user"))
            return (tools_spot){i, TOOLS_BEFORE_CONTENT};
        if (!strcmp(r->msgs[i].role, "tool") || r->msgs[i].n_calls > 0)
            return (tools_spot){i, TOOLS_OWN_TURN};
    }
    return (tools_spot){r->n_msgs, TOOLS_OWN_TURN};
}

/* A block of its own before the last user turn (Mistral v3), or the first
 * message when there is no user turn. */
static tools_spot tools_before_last_user(const srv_chat_req *r) {
    int last_user = -1;
    for (int i = 0; i < r->n_msgs; i++)
        if (!strcmp(r->msgs[i].role, "user"))
            last_user = i;
    return (tools_spot){r->n_msgs ? (last_user >= 0 ? last_user : 0) : -1, TOOLS_OWN_TURN};
}

/* Hermes / Qwen2.5: calls in <tool_call> tags, each on lines of its own. */
static void hermes_root(brisk_buf *b, const char *more, srv_tool_choice choice) {
    (void)choice;
    brisk_buf_printf(b,
                     "hcall ::= \"<tool_call>\\n\" tcall \"\\n</tool_call>\"\n"
                     "root ::= hcall ( \"\\n\" hcall )%s\n",
                     more);
}

/* Llama 3.1: JSON objects, a line each. */
static void llama3_root(brisk_buf *b, const char *more, srv_tool_choice choice) {
    (void)choice;
    brisk_buf_printf(b, "root ::= tcall ( \"\\n\" tcall )%s\n", more);
}

/* Mistral: after the [TOOL_CALLS] the prompt ends with, a JSON list. */
static void mistral_root(brisk_buf *b, const char *more, srv_tool_choice choice) {
    (void)choice;
    brisk_buf_printf(b, "root ::= \" \"? \"[\" tcall ( \", \" tcall )%s \"]\"\n", more);
}

/* The generic format: one JSON object, the calls or the answer. */
static void json_root(brisk_buf *b, const char *more, srv_tool_choice choice) {
    brisk_buf_printf(b, "calls ::= \"{\\\"tool_calls\\\": [\" tcall ( \", \" tcall )%s \"]}\"\n",
                     more);
    if (choice == SRV_TOOL_CHOICE_AUTO)
        brisk_buf_str(b, "root ::= calls | \"{\\\"response\\\": \" js \"}\"\n");
    else
        brisk_buf_str(b, "root ::= calls\n");
}

static const srv_tool_format tool_formats[] = {
    /* ChatML families (Qwen2/2.5, Hermes, SmolLM): Qwen2.5's template. */
    {
        .name = "hermes",
        .tools = {.open = "# Tools\n\nYou may call one or more functions to assist with the "
                          "user query.\n\nYou are provided with function signatures within "
                          "<tools></tools> XML tags:\n<tools>",
                  .item_open = "\n",
                  .close = "\n</tools>\n\nFor each function call, return a json object with "
                           "function name and arguments within <tool_call></tool_call> XML "
                           "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                           "<args-json-object>}\n</tool_call>"},
        .tools_wrapped = 1,
        .tools_at = tools_in_system,
        .tools_role = "system",
        .calls = {.item_open = "<tool_call>\n", .sep = "\n", .item_close = "\n</tool_call>"},
        .args_key = "arguments",
        .keeps_content = 1,
        .results = {.item_open = "<tool_response>\n",
                    .sep = "\n",
                    .item_close = "\n</tool_response>"},
        .result_role = "user",
        .results_joined = 1,
        .auto_free = 1,
        .gbnf_root = hermes_root,
        .markup = {.item_open = "<tool_call>", .item_close = " </tool_call>"},
    },
    /* Llama 3.1's JSON calls, in its template's words. */
    {
        .name = "llama3",
        .tools = {.open = "Given the following functions, please respond with a JSON for a "
                          "function call with its proper arguments that best answers the "
                          "given prompt.\n\nRespond in the format {\"name\": function name, "
                          "\"parameters\": dictionary of argument name and its value}.Do not "
                          "use variables.\n\n",
                  .item_close = "\n\n"},
        .tools_wrapped = 1,
        .tools_at = tools_in_first_user,
        .tools_role = "user",
        .calls = {.sep = "\n"},
        .args_key = "parameters",
        .result_role = "ipython",
        .auto_free = 1,
        .gbnf_root = llama3_root,
        .markup = {.list_open = {NULL}},
    },
    /* Mistral's v3 format (its v3 template). */
    {
        .name = "mistral",
        .tools = {.open = "[AVAILABLE_TOOLS] [", .sep = ", ", .close = "][/AVAILABLE_TOOLS]"},
        .tools_wrapped = 1,
        .tools_at = tools_before_last_user,
        .tools_role = "raw",
        .forced_tail = "[TOOL_CALLS]",
        .calls = {.open = "[TOOL_CALLS] [", .sep = ", ", .close = "]"},
        .args_key = "arguments",
        .call_ids = 1,
        .results = {.item_open = "[TOOL_RESULTS] ", .item_close = "[/TOOL_RESULTS]"},
        .result_role = "raw",
        .auto_free = 1,
        .gbnf_root = mistral_root,
        /* [TOOL_CALLS] is a control token, not text; a model may write it
         * as text all the same. */
        .markup = {.list_open = {" [TOOL_CALLS] [", " ["}, .sep = " ,", .list_close = " ]"},
    },
    /* Every family without a format of its own, as llama.cpp does for
     * templates without one: the answer is one JSON object, the grammar
     * holds even "auto" answers to it. */
    {
        .name = "json",
        .tools = {.open = "You can call these tools:\n[",
                  .sep = ", ",
                  .close = "]\nAnswer with one JSON object: {\"tool_calls\": [{\"name\": <tool "
                           "name>, \"arguments\": {<arguments>}}]} to call tools, or "
                           "{\"response\": <your answer>} to answer."},
        .tools_at = tools_in_system,
        .tools_role = "system",
        .calls = {.open = "{\"tool_calls\": [", .sep = ", ", .close = "]}"},
        .args_key = "arguments",
        .results = {.item_open = "Tool result: ", .sep = "\n"},
        .result_role = "user",
        .results_joined = 1,
        .gbnf_root = json_root,
        .markup = {.list_open = {" { \"tool_calls\" : ["},
                   .sep = " ,",
                   .list_close = " ] }",
                   .text_open = " { \"response\" : \"",
                   .text_close = " }"},
    },
};
#define N_TOOL_FORMATS ((int)(sizeof tool_formats / sizeof tool_formats[0]))

/* The row of family kind's format. */
static const srv_tool_format *format_of(model_chat_kind kind) {
    const char *name = model_chat_tool_format(kind);
    for (int i = 0; i < N_TOOL_FORMATS; i++)
        if (!strcmp(tool_formats[i].name, name))
            return &tool_formats[i];
    return &tool_formats[N_TOOL_FORMATS - 1]; /* json: every family can answer in it */
}

const char *srv_tools_format_name(model_chat_kind kind) {
    return format_of(kind)->name;
}

const srv_tools_markup *srv_tools_markup_of(model_chat_kind kind) {
    return &format_of(kind)->markup;
}
