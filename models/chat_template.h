/* chat_template.h - chat templates without Jinja: recognise the family of a
 * model's `tokenizer.chat_template` and render messages with a hand-written
 * renderer per family (the approach of llama.cpp's llama_chat_apply_template).
 *
 * Detection reads distinctive substrings of the Jinja text and records, next
 * to the family, the few details in which the real templates of one family
 * differ (whether BOS is written, Llama-2's per-turn BOS and strip(), the
 * Mistral [INST] spacing generation, Llama 3.1+'s dated system turn, a ChatML
 * default system prompt such as SmolLM2's or Qwen2's).
 * model_chat_format_detect() returns all of that;
 * model_chat_detect() only the family. A format chosen by name (--chat-template)
 * is the family's canonical template, model_chat_format_default().
 *
 * Rendering rules shared by every family (decisions where templates differ or
 * would raise an exception; llama.cpp's own renderer is as lenient):
 *   - roles are exactly "system", "user" or "assistant" (and, in the Llama 3
 *     family, "ipython": its tool results; in the Mistral family, "raw":
 *     text written as is between turns, its tool blocks); anything else is BRISK_EINVAL (a
 *     role is written literally by several templates, so an unchecked one
 *     could inject control text).
 *   - at least one message. User/assistant alternation is NOT enforced (the
 *     Llama-2, Mistral and Gemma templates raise on it; llama.cpp does not):
 *     consecutive turns of one role are rendered one after the other, each
 *     well-formed.
 *   - families without a system role (Llama-2 puts it in <<SYS>>, Mistral and
 *     Gemma into the user turn) merge a system message into the next user turn
 *     (Mistral v3 styles: into the last user turn, as their templates do);
 *     several pending system messages are joined with "\n\n"; one with no user
 *     turn after it gets an empty user turn of its own.
 *   - content may be empty (content NULL with content_len 0 is ""); content
 *     holding a NUL byte is BRISK_EINVAL: no template author meant it, and
 *     C-string consumers of the prompt would silently cut it.
 *   - content is not escaped: control-token text inside a message is written
 *     as is (as every Jinja template does); tokenising user text without
 *     special-token parsing is the caller's business.
 *   - the assistant generation prompt is always added (add_generation_prompt
 *     = true); Llama-2 and Mistral have none: their prompt ends with [/INST].
 *   - strip()/trim in templates is Python's str.strip(); here it strips ASCII
 *     whitespace only (space, \t, \n, \v, \f, \r).
 *   - Gemma follows Gemma 3's template (the one of the family that accepts a
 *     system message: its text + "\n\n" prefixes the first user turn); every
 *     Phi-3 writes a <|system|> turn, as Phi-3.5 and the later Phi-3-mini
 *     templates do (the 2024-06 Phi-3-mini one silently dropped it).
 *   - tool calls, tools and multimodal content are not rendered here: the
 *     server writes them into the messages in the family's tool-call
 *     convention (model_chat_tool_format, server/api/srv_tools.h).
 *
 * Each family is one row of a table in chat_template.c (name, canonical
 * flags, the extra role its renderer takes, tool-call convention, stop
 * strings, detail detection, renderer); every function below reads it.
 * Thread-safety: every function is reentrant; formats are plain values. */
#ifndef CHAT_TEMPLATE_H
#define CHAT_TEMPLATE_H

#include <stddef.h>

typedef enum {
    MODEL_CHAT_NONE = 0,
    MODEL_CHAT_CHATML,
    MODEL_CHAT_LLAMA2,
    MODEL_CHAT_LLAMA3,
    MODEL_CHAT_MISTRAL,
    MODEL_CHAT_ZEPHYR,
    MODEL_CHAT_GEMMA,
    MODEL_CHAT_PHI3,
} model_chat_kind;

/* Family of a Jinja chat template; MODEL_CHAT_NONE when unrecognised or NULL. */
model_chat_kind model_chat_detect(const char *jinja_template);

/* "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3" (exact,
 * lower case); BRISK_EINVAL otherwise, *out untouched. */
int model_chat_kind_parse(const char *name, model_chat_kind *out);
/* Static name as accepted by model_chat_kind_parse; "none" for NONE,
 * "unknown" for a value that is no family. */
const char *model_chat_kind_name(model_chat_kind k);

/* The families in table order, for walking them all: the kind of row i,
 * 0 <= i < model_chat_n_families() (MODEL_CHAT_NONE outside). */
int model_chat_n_families(void);
model_chat_kind model_chat_family_at(int i);

/* The tool-call convention of family k's templates, by the static name
 * server/api/srv_tools.h knows it under: "hermes" (ChatML), "llama3",
 * "mistral", or "json" for a family without one of its own (and NONE). */
const char *model_chat_tool_format(model_chat_kind k);

typedef struct model_chat_msg {
    const char *role; /* "system" | "user" | "assistant" */
    const char *content;
    size_t content_len;
} model_chat_msg;

/* ---- formats: a family plus the details its real templates vary in ------ */

enum {
    MODEL_CHAT_F_BOS = 1u << 0,               /* BOS text written once at the start */
    MODEL_CHAT_F_BOS_EACH_TURN = 1u << 1,     /* Llama-2: BOS before every [INST] */
    MODEL_CHAT_F_STRIP = 1u << 2,             /* Llama-2: strip() turn contents */
    MODEL_CHAT_F_SKIP_EMPTY_SYSTEM = 1u << 3, /* Phi-3.5: no turn for an empty system */
    MODEL_CHAT_F_DEFAULT_SYSTEM = 1u << 4,    /* ChatML: default_system when none given */
    /* Llama 3.1/3.2/3.3: a system turn is always written and begins with
     * "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n".
     * 26 Jul 2024 is the templates' own default date_string; transformers
     * gives 3.2 today's date instead, which would make prompts vary by day. */
    MODEL_CHAT_F_DATE_HEADER = 1u << 5,
    /* Qwen3 (a ChatML template that knows "<think>"): the model may open its
     * answer with "<think>...</think>", which the server returns as
     * reasoning_content; and enable_thinking = false (MODEL_CHAT_F_NO_THINK,
     * set per request on a copy) ends the generation prompt with the empty
     * block "<think>\n\n</think>\n\n", as the template does. */
    MODEL_CHAT_F_THINK = 1u << 6,
    MODEL_CHAT_F_NO_THINK = 1u << 7,
};

/* Mistral's template generations (tokenizer_config.json of mistralai models):
 *   V0  Mistral-7B-Instruct v0.1/v0.2 original: "[INST] u [/INST]a</s>"
 *       (no system role: system text + "\n\n" opens the next user turn)
 *   V1  " [INST] s\n\nu [/INST] a</s>"
 *   V3  "[INST] u[/INST] a</s>", assistant trimmed, the system text on the
 *       last user turn (v0.3, Large-2407)
 *   V3_TEKKEN  "[INST]u[/INST]a</s>", system on the last user turn (Nemo)
 *   V7  "[SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] u[/INST] a</s>" (Large-2411) */
typedef enum {
    MODEL_CHAT_MISTRAL_V0 = 0,
    MODEL_CHAT_MISTRAL_V1,
    MODEL_CHAT_MISTRAL_V3,
    MODEL_CHAT_MISTRAL_V3_TEKKEN,
    MODEL_CHAT_MISTRAL_V7,
} model_chat_mistral_style;

/* Longest default system prompt kept (bytes); a longer one is ignored with a
 * warning (no real template comes near it). */
#define MODEL_CHAT_DEFAULT_SYSTEM_MAX 1024

typedef struct model_chat_format {
    model_chat_kind kind;
    unsigned flags;                   /* MODEL_CHAT_F_* */
    model_chat_mistral_style mistral; /* MISTRAL only */
    /* ChatML with MODEL_CHAT_F_DEFAULT_SYSTEM: the system prompt the template
     * inserts when messages[0] is not a system message (unescaped text). */
    char default_system[MODEL_CHAT_DEFAULT_SYSTEM_MAX];
} model_chat_format;

/* Fills *out from a Jinja template (kind NONE when unrecognised or NULL). */
void model_chat_format_detect(const char *jinja_template, model_chat_format *out);
/* The canonical format of a family: ChatML without default system;
 * Meta's Llama-2 (BOS before every [INST], strip()); Llama-3 with BOS;
 * Mistral v0 with BOS; Zephyr; Gemma with BOS; Phi-3 (3.5 style, no BOS). */
void model_chat_format_default(model_chat_kind k, model_chat_format *out);

/* Renders msgs + the assistant generation prompt in format f. bos/eos are
 * the vocab's BOS/EOS token texts (NULL or "" when the vocab has none):
 * several templates write them literally. On success returns 0, *out is a
 * malloc'd NUL-terminated string the caller frees, *out_len its length, and
 * *starts_with_bos tells whether the text begins with the (non-empty) BOS
 * text, in which case the caller must not add another BOS token. On failure
 * returns BRISK_EINVAL (bad arguments or messages), BRISK_EUNSUPPORTED (kind
 * NONE) or BRISK_ENOMEM, *out is NULL and err (may be NULL) holds one line. */
int model_chat_format_render(const model_chat_format *f, const model_chat_msg *msgs, int n,
                             const char *bos, const char *eos, char **out, size_t *out_len,
                             int *starts_with_bos, char *err, size_t err_len);

/* model_chat_format_render with the canonical format of family k. */
int model_chat_render(model_chat_kind k, const model_chat_msg *msgs, int n, const char *bos,
                      const char *eos, char **out, size_t *out_len, int *starts_with_bos, char *err,
                      size_t err_len);

/* The stop strings a family ends an assistant turn with, beyond the vocab's
 * end-of-generation tokens: a static NULL-terminated list (just {NULL} for
 * NONE). */
const char *const *model_chat_stop_strings(model_chat_kind k);

#endif
