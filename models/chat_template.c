/* chat_template.c - chat template detection (substrings of the Jinja text)
 * and one hand-written renderer per family. See chat_template.h for the
 * rules every renderer follows. */
#include "models/chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"

/* ---- detection ----------------------------------------------------------- */

static int has(const char *t, const char *s) {
    return strstr(t, s) != NULL;
}

/* 1 if the Jinja text holds the string literal s, in single or double quotes. */
static int has_literal(const char *t, const char *s) {
    char q[64];
    size_t n = strlen(s);
    if (n + 3 > sizeof q)
        return 0;
    for (int i = 0; i < 2; i++) {
        q[0] = i ? '"' : '\'';
        memcpy(q + 1, s, n);
        q[n + 1] = q[0];
        q[n + 2] = '\0';
        if (has(t, q))
            return 1;
    }
    return 0;
}

/* 1 if some "|>" in t is followed by a newline inside the same output:
 * directly ('<|user|>\n', a real or an escaped newline) or through a string
 * concatenation ('<|' + message['role'] + '|>' + '\n'). Phi-3 writes the
 * newline, Phi-4-mini (same tags, a different format) does not. */
static int has_tag_newline(const char *t) {
    for (const char *p = strstr(t, "|>"); p; p = strstr(p + 2, "|>")) {
        const char *q = p + 2;
        if (*q == '\n' || (q[0] == '\\' && q[1] == 'n'))
            return 1;
        if (*q != '\'' && *q != '"')
            continue;
        q++;
        while (*q == ' ')
            q++;
        if (*q != '+')
            continue;
        q++;
        while (*q == ' ')
            q++;
        if (*q != '\'' && *q != '"')
            continue;
        q++;
        if (*q == '\n' || (q[0] == '\\' && q[1] == 'n'))
            return 1;
    }
    return 0;
}

static size_t count(const char *t, const char *s) {
    size_t c = 0, n = strlen(s);
    for (const char *p = strstr(t, s); p; p = strstr(p + n, s))
        c++;
    return c;
}

/* Finds a default system prompt in a ChatML template: a string literal
 * '<|im_start|>system\n...<|im_end|>' whose middle is plain text (SmolLM2,
 * Qwen2, Qwen2.5 write the default this way inside an
 * `if messages[0]['role'] != 'system'` branch; the literal that concatenates
 * messages[0]['content'] ends at its quote and is skipped). Jinja escapes in
 * the literal are decoded. Returns 1 and fills out when found. */
static int chat_find_default_system(const char *t, char *out, size_t cap) {
    static const char head[] = "<|im_start|>system";
    static const char tail[] = "<|im_end|>";
    for (const char *p = strstr(t, head); p; p = strstr(p + 1, head)) {
        if (p == t || (p[-1] != '\'' && p[-1] != '"'))
            continue;
        char quote = p[-1];
        const char *q = p + sizeof head - 1;
        if (*q == '\n')
            q++;
        else if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else
            continue;
        size_t len = 0;
        int ok = 0, too_long = 0;
        while (*q) {
            if (strncmp(q, tail, sizeof tail - 1) == 0) {
                ok = 1;
                break;
            }
            if (*q == quote)
                break;
            char c = *q++;
            if (c == '\\' && *q) {
                char e = *q++;
                switch (e) {
                case 'n': c = '\n'; break;
                case 't': c = '\t'; break;
                case 'r': c = '\r'; break;
                case '\\':
                case '\'':
                case '"': c = e; break;
                default: /* not an escape Jinja decodes: keep both bytes */
                    if (len + 1 < cap)
                        out[len] = '\\';
                    len++;
                    c = e;
                    break;
                }
            }
            if (len + 1 < cap)
                out[len] = c;
            else
                too_long = 1;
            len++;
        }
        if (!ok)
            continue;
        if (too_long) {
            BRISK_WARN("chat template: default system prompt of %zu bytes ignored (max %zu)", len,
                       cap - 1);
            out[0] = '\0';
            return 0;
        }
        out[len] = '\0';
        return 1;
    }
    return 0;
}

static model_chat_mistral_style chat_mistral_style(const char *t) {
    if (has(t, "[SYSTEM_PROMPT]"))
        return MODEL_CHAT_MISTRAL_V7;
    if (has_literal(t, " [INST] "))
        return MODEL_CHAT_MISTRAL_V1;
    if (has_literal(t, "[INST]"))
        return MODEL_CHAT_MISTRAL_V3_TEKKEN;
    if (has_literal(t, "[/INST]"))
        return MODEL_CHAT_MISTRAL_V3;
    return MODEL_CHAT_MISTRAL_V0;
}

static model_chat_kind chat_detect_kind(const char *t) {
    if (!t)
        return MODEL_CHAT_NONE;
    /* Phi-4 writes "<|im_start|>user<|im_sep|>": ChatML tags, another format. */
    if (has(t, "<|im_start|>"))
        return has(t, "<|im_sep|>") ? MODEL_CHAT_NONE : MODEL_CHAT_CHATML;
    if (has(t, "<|start_header_id|>") && has(t, "<|eot_id|>"))
        return MODEL_CHAT_LLAMA3;
    if (has(t, "<start_of_turn>"))
        return MODEL_CHAT_GEMMA;
    if (has(t, "[INST]"))
        return has(t, "<<SYS>>") ? MODEL_CHAT_LLAMA2 : MODEL_CHAT_MISTRAL;
    /* Phi-3 and Zephyr share <|user|>/<|assistant|> tags (Phi-3-small and
     * -vision build them as '<|' + role + '|>'); Phi-3 ends turns with <|end|>,
     * Zephyr with eos_token after every turn (Tulu, ChatGLM and GLM-Edge use the
     * same tags with other endings and stay unrecognised). */
    int tags = has(t, "<|user|>") || has(t, "'<|' + message['role'] + '|>'") ||
               has(t, "\"<|\" + message[\"role\"] + \"|>\"");
    if (!tags || !has_tag_newline(t))
        return MODEL_CHAT_NONE;
    if (has(t, "<|end|>"))
        return MODEL_CHAT_PHI3;
    if (has(t, "<|user|>") && has(t, "<|assistant|>") && count(t, "eos_token") >= 2)
        return MODEL_CHAT_ZEPHYR;
    return MODEL_CHAT_NONE;
}

/* The details in which one family's real templates differ, read from the
 * Jinja text once its family is known (MODEL_CHAT_F_BOS is read for every
 * family before). */
static void detect_chatml(const char *t, model_chat_format *f) {
    if (chat_find_default_system(t, f->default_system, sizeof f->default_system))
        f->flags |= MODEL_CHAT_F_DEFAULT_SYSTEM;
    if (has(t, "<think>"))
        f->flags |= MODEL_CHAT_F_THINK;
}

static void detect_llama2(const char *t, model_chat_format *f) {
    /* Meta's template writes bos_token + '[INST] ' for every user turn. */
    if (has(t, "bos_token + '[INST]") || has(t, "bos_token + \"[INST]"))
        f->flags = (f->flags & ~MODEL_CHAT_F_BOS) | MODEL_CHAT_F_BOS_EACH_TURN;
    if (has(t, ".strip()") || has(t, "|trim") || has(t, "| trim"))
        f->flags |= MODEL_CHAT_F_STRIP;
}

static void detect_llama3(const char *t, model_chat_format *f) {
    if (has(t, "Cutting Knowledge Date"))
        f->flags |= MODEL_CHAT_F_DATE_HEADER;
}

static void detect_mistral(const char *t, model_chat_format *f) {
    f->mistral = chat_mistral_style(t);
}

static void detect_phi3(const char *t, model_chat_format *f) {
    if (has(t, "'system' and message['content']"))
        f->flags |= MODEL_CHAT_F_SKIP_EMPTY_SYSTEM;
}

/* ---- output buffer --------------------------------------------------------- */

/* brisk_buf_str for a string that may be absent. */
static void buf_puts(brisk_buf *b, const char *s) {
    if (s)
        brisk_buf_str(b, s);
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Python's str.strip() over the bytes written since mark (ASCII whitespace). */
static void buf_strip_from(brisk_buf *b, size_t mark) {
    if (b->oom || !b->p)
        return;
    size_t s = mark;
    while (s < b->len && is_ws(b->p[s]))
        s++;
    size_t e = b->len;
    while (e > s && is_ws(b->p[e - 1]))
        e--;
    memmove(b->p + mark, b->p + s, e - s);
    b->len = mark + (e - s);
    b->p[b->len] = '\0';
}

/* ---- messages -------------------------------------------------------------- */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_RAW } chat_role;

static chat_role role_of(const model_chat_msg *m) {
    if (strcmp(m->role, "system") == 0)
        return ROLE_SYSTEM;
    if (strcmp(m->role, "user") == 0)
        return ROLE_USER;
    if (strcmp(m->role, "raw") == 0)
        return ROLE_RAW;
    return ROLE_ASSISTANT;
}

static const char *content_of(const model_chat_msg *m) {
    return m->content ? m->content : "";
}

static void put_content(brisk_buf *b, const model_chat_msg *m) {
    brisk_buf_put(b, content_of(m), m->content_len);
}

static void put_content_trimmed(brisk_buf *b, const model_chat_msg *m) {
    size_t mark = b->len;
    put_content(b, m);
    buf_strip_from(b, mark);
}

/* extra_role: the one role beyond system/user/assistant the family renders
 * (its row's extra_role), or NULL. */
static int chat_validate(const model_chat_msg *msgs, int n, const char *extra_role, char *err,
                         size_t err_len) {
    if (n <= 0 || !msgs)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "no messages to render");
    for (int i = 0; i < n; i++) {
        const model_chat_msg *m = &msgs[i];
        if (!m->role || (strcmp(m->role, "system") != 0 && strcmp(m->role, "user") != 0 &&
                         strcmp(m->role, "assistant") != 0 &&
                         !(extra_role && strcmp(m->role, extra_role) == 0)))
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "message %d: role must be system, user or assistant", i);
        if (!m->content && m->content_len > 0)
            return brisk_set_err(err, err_len, BRISK_EINVAL, "message %d: content is NULL", i);
        if (m->content_len > 0 && memchr(m->content, '\0', m->content_len))
            return brisk_set_err(err, err_len, BRISK_EINVAL,
                                 "message %d: content contains a NUL byte", i);
    }
    return 0;
}

/* Writes the system messages msgs[from..to) joined by "\n\n" (the pending
 * system text of families that merge it into a user turn). */
static void put_systems(brisk_buf *b, const model_chat_msg *msgs, int from, int to) {
    int first = 1;
    for (int i = from; i < to; i++) {
        if (role_of(&msgs[i]) != ROLE_SYSTEM)
            continue;
        if (!first)
            buf_puts(b, "\n\n");
        put_content(b, &msgs[i]);
        first = 0;
    }
}

/* ---- renderers ------------------------------------------------------------- */

typedef struct {
    const model_chat_format *f;
    const model_chat_msg *msgs;
    int n;
    const char *bos, *eos; /* never NULL ("" when absent) */
} chat_ctx;

static void render_chatml(const chat_ctx *c, brisk_buf *b) {
    if ((c->f->flags & MODEL_CHAT_F_DEFAULT_SYSTEM) && role_of(&c->msgs[0]) != ROLE_SYSTEM) {
        buf_puts(b, "<|im_start|>system\n");
        buf_puts(b, c->f->default_system);
        buf_puts(b, "<|im_end|>\n");
    }
    for (int i = 0; i < c->n; i++) {
        buf_puts(b, "<|im_start|>");
        buf_puts(b, c->msgs[i].role);
        buf_puts(b, "\n");
        put_content(b, &c->msgs[i]);
        buf_puts(b, "<|im_end|>\n");
    }
    buf_puts(b, "<|im_start|>assistant\n");
    if ((c->f->flags & MODEL_CHAT_F_THINK) && (c->f->flags & MODEL_CHAT_F_NO_THINK))
        buf_puts(b, "<think>\n\n</think>\n\n");
}

/* Meta: bos + '[INST] ' + strip('<<SYS>>\n' + s + '\n<</SYS>>\n\n' + u) + ' [/INST]',
 * then ' ' + strip(a) + ' ' + eos. */
static void render_llama2(const chat_ctx *c, brisk_buf *b) {
    int strip = (c->f->flags & MODEL_CHAT_F_STRIP) != 0;
    int each = (c->f->flags & MODEL_CHAT_F_BOS_EACH_TURN) != 0;
    int pending = -1; /* first unmerged system message */
    for (int i = 0; i <= c->n; i++) {
        int end = i == c->n;
        chat_role r = end ? ROLE_USER : role_of(&c->msgs[i]);
        if (end && pending < 0)
            break;
        if (r == ROLE_SYSTEM) {
            if (pending < 0)
                pending = i;
            continue;
        }
        if (r == ROLE_USER) {
            if (each)
                buf_puts(b, c->bos);
            buf_puts(b, "[INST] ");
            size_t mark = b->len;
            if (pending >= 0) {
                buf_puts(b, "<<SYS>>\n");
                put_systems(b, c->msgs, pending, i);
                buf_puts(b, "\n<</SYS>>\n\n");
                pending = -1;
            }
            if (!end)
                put_content(b, &c->msgs[i]);
            if (strip)
                buf_strip_from(b, mark);
            buf_puts(b, " [/INST]");
        } else {
            buf_puts(b, " ");
            if (strip)
                put_content_trimmed(b, &c->msgs[i]);
            else
                put_content(b, &c->msgs[i]);
            buf_puts(b, " ");
            buf_puts(b, c->eos);
        }
    }
}

static void render_llama3(const chat_ctx *c, brisk_buf *b) {
    int first = 0;
    if (c->f->flags & MODEL_CHAT_F_DATE_HEADER) {
        /* Llama 3.1+: messages[0], when a system message, is folded into the
         * system turn the template always writes. */
        buf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (role_of(&c->msgs[0]) == ROLE_SYSTEM) {
            put_content_trimmed(b, &c->msgs[0]);
            first = 1;
        }
        buf_puts(b, "<|eot_id|>");
    }
    for (int i = first; i < c->n; i++) {
        buf_puts(b, "<|start_header_id|>");
        buf_puts(b, c->msgs[i].role);
        buf_puts(b, "<|end_header_id|>\n\n");
        put_content_trimmed(b, &c->msgs[i]);
        buf_puts(b, "<|eot_id|>");
    }
    buf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

typedef struct {
    const char *inst_open, *inst_close, *asst_prefix;
    int asst_trim;
    int sys_last_user;     /* system text goes on the last user turn */
    int sys_prompt_blocks; /* v7: [SYSTEM_PROMPT] blocks in place */
} mistral_style_def;

static const mistral_style_def mistral_styles[] = {
    [MODEL_CHAT_MISTRAL_V0] = {"[INST] ", " [/INST]", "", 0, 0, 0},
    [MODEL_CHAT_MISTRAL_V1] = {" [INST] ", " [/INST]", " ", 0, 0, 0},
    [MODEL_CHAT_MISTRAL_V3] = {"[INST] ", "[/INST]", " ", 1, 1, 0},
    [MODEL_CHAT_MISTRAL_V3_TEKKEN] = {"[INST]", "[/INST]", "", 0, 1, 0},
    [MODEL_CHAT_MISTRAL_V7] = {"[INST] ", "[/INST]", " ", 0, 0, 1},
};

static void render_mistral(const chat_ctx *c, brisk_buf *b) {
    int style = (int)c->f->mistral;
    if (style < 0 || style >= (int)(sizeof mistral_styles / sizeof mistral_styles[0]))
        style = 0;
    const mistral_style_def *s = &mistral_styles[style];
    int last_user = -1, n_sys = 0;
    for (int i = 0; i < c->n; i++) {
        chat_role r = role_of(&c->msgs[i]);
        if (r == ROLE_USER)
            last_user = i;
        if (r == ROLE_SYSTEM)
            n_sys++;
    }
    int pending = -1;
    for (int i = 0; i <= c->n; i++) {
        int end = i == c->n;
        chat_role r = end ? ROLE_USER : role_of(&c->msgs[i]);
        if (r == ROLE_RAW) {
            put_content(b, &c->msgs[i]);
            continue;
        }
        if (r == ROLE_SYSTEM && s->sys_prompt_blocks) {
            buf_puts(b, "[SYSTEM_PROMPT] ");
            put_content(b, &c->msgs[i]);
            buf_puts(b, "[/SYSTEM_PROMPT]");
            continue;
        }
        if (r == ROLE_SYSTEM) {
            if (pending < 0)
                pending = i;
            continue;
        }
        if (r == ROLE_ASSISTANT) {
            buf_puts(b, s->asst_prefix);
            if (s->asst_trim)
                put_content_trimmed(b, &c->msgs[i]);
            else
                put_content(b, &c->msgs[i]);
            buf_puts(b, c->eos);
            continue;
        }
        /* A user turn, or the closing empty one for system text left over. */
        int with_sys;
        if (s->sys_prompt_blocks)
            with_sys = 0;
        else if (s->sys_last_user)
            with_sys = n_sys > 0 && (i == last_user || (end && last_user < 0));
        else
            with_sys = pending >= 0;
        if (end && !with_sys)
            break;
        buf_puts(b, s->inst_open);
        if (with_sys) {
            if (s->sys_last_user)
                put_systems(b, c->msgs, 0, c->n);
            else
                put_systems(b, c->msgs, pending, i);
            buf_puts(b, "\n\n");
            pending = -1;
        }
        if (!end)
            put_content(b, &c->msgs[i]);
        buf_puts(b, s->inst_close);
    }
}

static void render_zephyr(const chat_ctx *c, brisk_buf *b) {
    for (int i = 0; i < c->n; i++) {
        buf_puts(b, "<|");
        buf_puts(b, c->msgs[i].role);
        buf_puts(b, "|>\n");
        put_content(b, &c->msgs[i]);
        buf_puts(b, c->eos);
        buf_puts(b, "\n");
    }
    buf_puts(b, "<|assistant|>\n");
}

/* Gemma 3's template (the one of the family that takes a system message):
 * the system text + "\n\n" prefixes the first user turn, contents trimmed. */
static void render_gemma(const chat_ctx *c, brisk_buf *b) {
    int pending = -1;
    for (int i = 0; i <= c->n; i++) {
        int end = i == c->n;
        chat_role r = end ? ROLE_USER : role_of(&c->msgs[i]);
        if (end && pending < 0)
            break;
        if (r == ROLE_SYSTEM) {
            if (pending < 0)
                pending = i;
            continue;
        }
        buf_puts(b, r == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (r == ROLE_USER && pending >= 0) {
            put_systems(b, c->msgs, pending, i);
            buf_puts(b, "\n\n");
            pending = -1;
        }
        if (!end)
            put_content_trimmed(b, &c->msgs[i]);
        buf_puts(b, "<end_of_turn>\n");
    }
    buf_puts(b, "<start_of_turn>model\n");
}

static void render_phi3(const chat_ctx *c, brisk_buf *b) {
    int skip_empty = (c->f->flags & MODEL_CHAT_F_SKIP_EMPTY_SYSTEM) != 0;
    for (int i = 0; i < c->n; i++) {
        if (skip_empty && role_of(&c->msgs[i]) == ROLE_SYSTEM && c->msgs[i].content_len == 0)
            continue;
        buf_puts(b, "<|");
        buf_puts(b, c->msgs[i].role);
        buf_puts(b, "|>\n");
        put_content(b, &c->msgs[i]);
        buf_puts(b, "<|end|>\n");
    }
    buf_puts(b, "<|assistant|>\n");
}

/* ---- the families ------------------------------------------------------------ */

/* One row per family: everything brisk knows of it. Adding a family is a
 * model_chat_kind value, its renderer (and detail detection, if its
 * templates vary), a row here, and its test in chat_detect_kind. */
typedef struct model_chat_family {
    model_chat_kind kind;
    const char *name; /* as --chat-template takes it */
    unsigned flags;   /* the canonical format's MODEL_CHAT_F_* */
    /* The one role beyond system/user/assistant its renderer takes (Llama
     * 3's "ipython": tool results; Mistral's "raw": its tool blocks), or NULL. */
    const char *extra_role;
    const char *tool_format;         /* its tool-call convention (server/api/srv_tools.h) */
    const char *const *stop_strings; /* NULL-terminated */
    /* The details its real templates vary in (model_chat_format_detect), or NULL. */
    void (*detect)(const char *jinja, model_chat_format *f);
    void (*render)(const chat_ctx *c, brisk_buf *b);
} model_chat_family;

static const char *const stops_chatml[] = {"<|im_end|>", NULL};
static const char *const stops_eos[] = {"</s>", NULL};
static const char *const stops_llama3[] = {"<|eot_id|>", "<|end_of_text|>", NULL};
static const char *const stops_gemma[] = {"<end_of_turn>", NULL};
static const char *const stops_phi3[] = {"<|end|>", "<|endoftext|>", NULL};

static const model_chat_family chat_families[] = {
    {.kind = MODEL_CHAT_CHATML,
     .name = "chatml",
     .tool_format = "hermes",
     .stop_strings = stops_chatml,
     .detect = detect_chatml,
     .render = render_chatml},
    {.kind = MODEL_CHAT_LLAMA2,
     .name = "llama2",
     .flags = MODEL_CHAT_F_BOS_EACH_TURN | MODEL_CHAT_F_STRIP,
     .tool_format = "json",
     .stop_strings = stops_eos,
     .detect = detect_llama2,
     .render = render_llama2},
    {.kind = MODEL_CHAT_LLAMA3,
     .name = "llama3",
     .flags = MODEL_CHAT_F_BOS,
     .extra_role = "ipython",
     .tool_format = "llama3",
     .stop_strings = stops_llama3,
     .detect = detect_llama3,
     .render = render_llama3},
    {.kind = MODEL_CHAT_MISTRAL,
     .name = "mistral",
     .flags = MODEL_CHAT_F_BOS,
     .extra_role = "raw",
     .tool_format = "mistral",
     .stop_strings = stops_eos,
     .detect = detect_mistral,
     .render = render_mistral},
    {.kind = MODEL_CHAT_ZEPHYR,
     .name = "zephyr",
     .tool_format = "json",
     .stop_strings = stops_eos,
     .render = render_zephyr},
    {.kind = MODEL_CHAT_GEMMA,
     .name = "gemma",
     .flags = MODEL_CHAT_F_BOS,
     .tool_format = "json",
     .stop_strings = stops_gemma,
     .render = render_gemma},
    {.kind = MODEL_CHAT_PHI3,
     .name = "phi3",
     .tool_format = "json",
     .stop_strings = stops_phi3,
     .detect = detect_phi3,
     .render = render_phi3},
};
#define CHAT_N_FAMILIES ((int)(sizeof chat_families / sizeof chat_families[0]))

/* The row of kind k; NULL for NONE and values outside the enum. */
static const model_chat_family *chat_family_of(model_chat_kind k) {
    for (int i = 0; i < CHAT_N_FAMILIES; i++)
        if (chat_families[i].kind == k)
            return &chat_families[i];
    return NULL;
}

int model_chat_n_families(void) {
    return CHAT_N_FAMILIES;
}

model_chat_kind model_chat_family_at(int i) {
    return i >= 0 && i < CHAT_N_FAMILIES ? chat_families[i].kind : MODEL_CHAT_NONE;
}

const char *model_chat_kind_name(model_chat_kind k) {
    const model_chat_family *fam = chat_family_of(k);
    return fam ? fam->name : k == MODEL_CHAT_NONE ? "none" : "unknown";
}

int model_chat_kind_parse(const char *name, model_chat_kind *out) {
    if (!name || !out)
        return BRISK_EINVAL;
    for (int i = 0; i < CHAT_N_FAMILIES; i++) {
        if (strcmp(name, chat_families[i].name) == 0) {
            *out = chat_families[i].kind;
            return 0;
        }
    }
    return BRISK_EINVAL;
}

const char *const *model_chat_stop_strings(model_chat_kind k) {
    static const char *const none[] = {NULL};
    const model_chat_family *fam = chat_family_of(k);
    return fam ? fam->stop_strings : none;
}

const char *model_chat_tool_format(model_chat_kind k) {
    const model_chat_family *fam = chat_family_of(k);
    return fam ? fam->tool_format : "json";
}

model_chat_kind model_chat_detect(const char *jinja_template) {
    return chat_detect_kind(jinja_template);
}

void model_chat_format_default(model_chat_kind k, model_chat_format *out) {
    const model_chat_family *fam = chat_family_of(k);
    memset(out, 0, sizeof *out);
    out->kind = k;
    out->flags = fam ? fam->flags : 0;
}

void model_chat_format_detect(const char *t, model_chat_format *out) {
    model_chat_format_default(MODEL_CHAT_NONE, out);
    const model_chat_family *fam = chat_family_of(chat_detect_kind(t));
    if (!fam)
        return;
    out->kind = fam->kind;
    if (has(t, "bos_token"))
        out->flags |= MODEL_CHAT_F_BOS;
    if (fam->detect)
        fam->detect(t, out);
}

int model_chat_format_render(const model_chat_format *f, const model_chat_msg *msgs, int n,
                             const char *bos, const char *eos, char **out, size_t *out_len,
                             int *starts_with_bos, char *err, size_t err_len) {
    if (!out || !out_len || !starts_with_bos)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "chat render: NULL output argument");
    *out = NULL;
    *out_len = 0;
    *starts_with_bos = 0;
    if (!f || f->kind == MODEL_CHAT_NONE)
        return brisk_set_err(err, err_len, BRISK_EUNSUPPORTED, "no chat template to render with");
    const model_chat_family *fam = chat_family_of(f->kind);
    int rc = chat_validate(msgs, n, fam ? fam->extra_role : NULL, err, err_len);
    if (rc < 0)
        return rc;
    if (!fam)
        return brisk_set_err(err, err_len, BRISK_EUNSUPPORTED, "unknown chat template kind %d",
                             (int)f->kind);

    chat_ctx c = {f, msgs, n, bos ? bos : "", eos ? eos : ""};
    brisk_buf b = {0};
    if (f->flags & MODEL_CHAT_F_BOS)
        buf_puts(&b, c.bos);
    fam->render(&c, &b);
    size_t len;
    char *text = brisk_buf_take(&b, &len);
    if (!text)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory rendering the chat");
    size_t bl = strlen(c.bos);
    *starts_with_bos = bl > 0 && len >= bl && memcmp(text, c.bos, bl) == 0;
    *out = text;
    *out_len = len;
    return 0;
}

int model_chat_render(model_chat_kind k, const model_chat_msg *msgs, int n, const char *bos,
                      const char *eos, char **out, size_t *out_len, int *starts_with_bos, char *err,
                      size_t err_len) {
    model_chat_format f;
    model_chat_format_default(k, &f);
    return model_chat_format_render(&f, msgs, n, bos, eos, out, out_len, starts_with_bos, err,
                                    err_len);
}
