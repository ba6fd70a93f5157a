/* srv_tools_stream.c - the calls in an answer, found as it is generated
 * (srv_tools.h): one byte at a time, so that a streamed answer and a whole
 * one give the same calls and content however the text is cut into pieces.
 * What each format's answer looks like is its row's markup
 * (srv_tools_int.h); this file only reads it.
 *
 * The parser holds back the bytes that could still turn out to be markup
 * (pending): a prefix of a call's opening, or, when the model is free, a
 * whole call until its JSON is complete. When what they began fails, they
 * are released as text and parsing goes on from the byte that failed it. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_grow.h"
#include "server/api/srv_tools.h"
#include "server/api/srv_tools_int.h"

/* Where the parser is. */
enum {
    S_TEXT,      /* blocks: text, watching for item_open */
    S_TEXT_ONLY, /* text to the end: no call can follow */
    S_MATCH,     /* matching one of a few patterns (s->alts) */
    S_CALL,      /* inside a call's JSON object (s->co) */
    S_SEP_WS,    /* a list without sep: whitespace or ';' before the next call */
    S_STRING,    /* the generic format's text, inside its JSON string */
    S_DONE       /* the parser ended the list: nothing more is read */
};

/* Where a completed pattern leads. */
enum { T_CALL, T_STRING, T_CLOSED, T_TEXT };

/* Inside a call object. */
enum { CO_OPEN, CO_KEY, CO_KEY_STR, CO_KEY_ESC, CO_COLON, CO_NAME_Q, CO_NAME, CO_VALUE, CO_NEXT };

/* The end of one JSON value, found byte by byte: its kind ('{' for an
 * object or array, '"' a string, 's' a number or literal; 0 before its
 * first byte), nesting and string state. Validity is checked at the end,
 * where it matters (a free answer's arguments). */
typedef struct jscan {
    int kind, depth, in_str, esc;
} jscan;

enum { J_SKIP, J_MORE, J_END_IN, J_END_OUT, J_BAD };

#define MAX_ALTS 3
#define KEY_MAX 16 /* longer keys are none the parser looks for */

typedef struct alt {
    const char *pat;
    int target;
    int pos; /* the next pattern byte; -1: failed; -2: matched whole */
} alt;

/* One piece released by the current feed: offsets into out, made into
 * srv_tools_piece pointers when the feed returns (out may move meanwhile). */
typedef struct raw_piece {
    int call, first;
    size_t off, len;
} raw_piece;

struct srv_tools_stream {
    const srv_tools_markup *m;
    int forced;
    void (*make_id)(void *, char[32]);
    void *id_ctx;
    int state;
    int fallback;      /* S_TEXT or S_TEXT_ONLY: where a failed parse goes on */
    brisk_buf pending; /* held back: text if what it began fails */
    int markup;        /* pending is past a call's opening: markup, never text at a cut */
    alt alts[MAX_ALTS];
    int n_alts, done_alt;
    size_t done_at;

    /* the call being read */
    int co;
    char key[KEY_MAX + 1];
    size_t key_len;
    int key_long, n_members, has_name, has_args, recording;
    char name[65];
    size_t name_len;
    brisk_buf args;
    jscan js;
    int emitted; /* its first piece is out (forced answers release calls as they come) */
    int index;   /* its index once emitted */

    /* the generic format's text: a JSON string's escapes */
    int esc;        /* 0, 1 after '\', 2 in \uXXXX */
    unsigned u, hi; /* the \u value so far; a high surrogate waiting for its pair */
    int u_n;

    /* the calls released: calls[i].arguments points into args_of[i] */
    srv_tool_call *calls;
    brisk_buf *args_of;
    int n_calls;
    size_t cap_calls, cap_args;
    int ended, complete;

    /* content: leading whitespace skipped, trailing whitespace held */
    int content_started;
    brisk_buf ws, content;

    /* the current feed's pieces */
    raw_piece *raw;
    size_t cap_raw;
    int n_raw;
    srv_tools_piece *pieces;
    size_t cap_pieces;
    brisk_buf out;
    int oom;
};

static void step(srv_tools_stream *s, unsigned char b);

static int is_ws(unsigned char b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

/* ---- releasing pieces ------------------------------------------------------------- */

/* Appends n bytes to the feed's output as part of target call (-1: text);
 * first opens a call's first piece. Adjacent bytes of one target join. */
static void out_piece(srv_tools_stream *s, int call, int first, const char *p, size_t n) {
    raw_piece *last = s->n_raw ? &s->raw[s->n_raw - 1] : NULL;
    if (first || !last || last->call != call || (last->first && call >= 0)) {
        if (brisk_grow(&s->raw, &s->cap_raw, (size_t)s->n_raw + 1, sizeof *s->raw, 8, 0) < 0) {
            s->oom = 1;
            return;
        }
        last = &s->raw[s->n_raw++];
        *last = (raw_piece){call, first, s->out.len, 0};
    }
    if (first)
        return;
    brisk_buf_put(&s->out, p, n);
    last->len += n;
}

static void out_content(srv_tools_stream *s, const char *p, size_t n) {
    out_piece(s, -1, 0, p, n);
    brisk_buf_put(&s->content, p, n);
}

/* Text of the answer: leading whitespace is dropped and whitespace is held
 * until text follows it, so the content never starts or ends with any. */
static void put_text(srv_tools_stream *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (is_ws((unsigned char)p[i])) {
            if (s->content_started)
                brisk_buf_put(&s->ws, p + i, 1);
            continue;
        }
        size_t j = i;
        while (j < n && !is_ws((unsigned char)p[j]))
            j++;
        if (s->ws.len) {
            out_content(s, s->ws.p, s->ws.len);
            s->ws.len = 0;
        }
        out_content(s, p + i, j - i);
        s->content_started = 1;
        i = j - 1;
    }
}

/* Holds byte b back; -1 when out of memory (the parser stops there: the
 * feed reports it). */
static int hold(srv_tools_stream *s, unsigned char b) {
    brisk_buf_put(&s->pending, (const char *)&b, 1);
    if (s->pending.oom)
        s->oom = 1;
    return s->oom ? -1 : 0;
}

/* Gives pending away: as text (release) or not at all. */
static void pending_clear(srv_tools_stream *s, int release) {
    if (release && s->pending.len)
        put_text(s, s->pending.p, s->pending.len);
    s->pending.len = 0;
    s->markup = 0;
}

/* ---- the calls -------------------------------------------------------------------- */

/* Whether the current call repeats an earlier one of the same name:
 * whole: its arguments equal that call's; else they begin that call's. */
static int repeats(const srv_tools_stream *s, const char *args, size_t len, int whole) {
    for (int i = 0; i < s->n_calls; i++) {
        const brisk_buf *a = &s->args_of[i];
        if (!strcmp(s->calls[i].name, s->name) && (whole ? a->len == len : a->len >= len) &&
            (len == 0 || !memcmp(a->p, args, len)))
            return 1;
    }
    return 0;
}

/* Releases the current call's first piece (a fresh id, its name), then
 * args (len bytes) as its first fragment. */
static void emit_call(srv_tools_stream *s, const char *args, size_t len) {
    if (brisk_grow(&s->calls, &s->cap_calls, (size_t)s->n_calls + 1, sizeof *s->calls, 4, 0) < 0 ||
        brisk_grow(&s->args_of, &s->cap_args, (size_t)s->n_calls + 1, sizeof *s->args_of, 4, 0) <
            0) {
        s->oom = 1;
        return;
    }
    char id[32];
    s->make_id(s->id_ctx, id);
    srv_tool_call *c = &s->calls[s->n_calls];
    brisk_buf *a = &s->args_of[s->n_calls];
    memset(a, 0, sizeof *a);
    brisk_buf_str(a, "");
    c->id = brisk_strdup(id);
    c->name = brisk_strdup(s->name);
    c->arguments = NULL;
    if (!c->id || !c->name || a->oom) {
        free(c->id);
        free(c->name);
        free(a->p);
        s->oom = 1;
        return;
    }
    s->index = s->n_calls++;
    s->emitted = 1;
    out_piece(s, s->index, 1, NULL, 0);
    if (len) {
        brisk_buf_put(a, args, len);
        out_piece(s, s->index, 0, args, len);
    }
}

/* Arguments bytes of an emitted call. */
static void emit_args(srv_tools_stream *s, const char *p, size_t n) {
    brisk_buf_put(&s->args_of[s->index], p, n);
    out_piece(s, s->index, 0, p, n);
}

static void call_begin(srv_tools_stream *s) {
    s->state = S_CALL;
    s->co = CO_OPEN;
    s->n_members = s->has_name = s->has_args = s->recording = s->emitted = 0;
    s->name_len = 0;
    s->name[0] = '\0';
    s->args.len = 0;
}

/* After a call: its list's separator or close, its block's close, or
 * (Llama 3) whitespace before the next one. */
static void after_call(srv_tools_stream *s);

static void list_end(srv_tools_stream *s) {
    s->ended = s->complete = 1;
    pending_clear(s, 0);
    s->state = S_DONE;
}

/* A free answer's arguments, checked now that they are whole: a JSON
 * object, or a JSON string holding one (what some models write). Returns
 * the text the call's arguments are (malloc'd) or NULL: not a call. */
static char *free_args(srv_tools_stream *s) {
    const char *p = s->args.p ? s->args.p : "";
    cJSON *v = cJSON_ParseWithLength(p, s->args.len);
    char *out = NULL;
    int want = 0;
    if (cJSON_IsObject(v)) {
        want = 1;
        if ((out = brisk_malloc(s->args.len + 1))) {
            memcpy(out, p, s->args.len);
            out[s->args.len] = '\0';
        }
    } else if (cJSON_IsString(v)) {
        cJSON *inner = cJSON_Parse(v->valuestring);
        if ((want = cJSON_IsObject(inner)))
            out = brisk_strdup(v->valuestring);
        cJSON_Delete(inner);
    }
    cJSON_Delete(v);
    if (want && !out)
        s->oom = 1; /* a call, lost for want of memory: the feed says so */
    return out;
}

/* The current call's object is whole (or, lenient, ended with the answer
 * just before its closing brace). Returns 0, or -1 when it is no call. */
static int call_done(srv_tools_stream *s) {
    if (!s->has_name || !s->has_args)
        return -1;
    if (s->forced) {
        if (!s->emitted) {
            if (repeats(s, s->args.p, s->args.len, 1)) {
                list_end(s);
                return 0;
            }
            emit_call(s, s->args.p, s->args.len);
        }
    } else {
        char *args = free_args(s);
        if (!args)
            return -1;
        if (repeats(s, args, strlen(args), 1)) {
            free(args);
            list_end(s);
            return 0;
        }
        pending_clear(s, 0);
        emit_call(s, args, strlen(args));
        free(args);
    }
    if (s->n_calls >= SRV_TOOLS_MAX_CALLS) {
        list_end(s);
        return 0;
    }
    after_call(s);
    return 0;
}

/* What pending began failed at byte b: pending becomes text (a forced
 * answer's never: it is markup the grammar made), and b is read again
 * where text goes on. */
static void fail(srv_tools_stream *s, unsigned char b) {
    pending_clear(s, !s->forced);
    s->state = s->fallback;
    step(s, b);
}

/* ---- patterns ----------------------------------------------------------------------- */

static void match_begin(srv_tools_stream *s, const char *const *pats, const int *targets, int n) {
    s->n_alts = 0;
    for (int i = 0; i < n && s->n_alts < MAX_ALTS; i++)
        if (pats[i])
            s->alts[s->n_alts++] = (alt){pats[i], targets[i], 0};
    s->done_alt = -1;
    s->state = S_MATCH;
}

/* b against pattern a: a space in it takes any whitespace, or none. */
static void alt_step(alt *a, unsigned char b) {
    if (a->pat[a->pos] == ' ') {
        if (is_ws(b))
            return;
        a->pos++;
    }
    if (a->pat[a->pos] == (char)b)
        a->pos = a->pat[a->pos + 1] ? a->pos + 1 : -2;
    else
        a->pos = -1;
}

static void go_target(srv_tools_stream *s, int target) {
    switch (target) {
    case T_CALL:
        s->markup = 1;
        call_begin(s);
        break;
    case T_STRING:
        pending_clear(s, 0);
        s->state = S_STRING;
        s->esc = 0;
        s->hi = 0;
        break;
    case T_CLOSED:
        pending_clear(s, 0);
        s->complete = 1;
        s->state = S_TEXT_ONLY;
        break;
    default: /* T_TEXT: a block closed */
        pending_clear(s, 0);
        s->state = S_TEXT;
        break;
    }
}

/* The longest pattern wins: one that matched whole waits while a longer
 * one may still match ("[TOOL_CALLS] [" against "["); the bytes read after
 * it are read again in the state it leads to. */
static void match_step(srv_tools_stream *s, unsigned char b) {
    if (hold(s, b) < 0)
        return;
    int alive = 0;
    for (int i = 0; i < s->n_alts; i++) {
        alt *a = &s->alts[i];
        if (a->pos < 0)
            continue;
        alt_step(a, b);
        if (a->pos == -2) {
            s->done_alt = i;
            s->done_at = s->pending.len;
        }
        alive += a->pos >= 0;
    }
    if (alive)
        return;
    if (s->done_alt < 0) {
        s->pending.len--;
        fail(s, b);
        return;
    }
    size_t n = s->pending.len - s->done_at;
    char again[64];
    if (n > sizeof again) { /* cannot be: patterns are short */
        s->pending.len--;
        fail(s, b);
        return;
    }
    memcpy(again, s->pending.p + s->done_at, n);
    s->pending.len = s->done_at;
    go_target(s, s->alts[s->done_alt].target);
    for (size_t i = 0; i < n && !s->oom; i++)
        step(s, (unsigned char)again[i]);
}

static void after_call(srv_tools_stream *s) {
    const srv_tools_markup *m = s->m;
    s->markup = 1;
    if (m->item_open) {
        const char *pats[1] = {m->item_close};
        const int targets[1] = {T_TEXT};
        if (m->item_close)
            match_begin(s, pats, targets, 1);
        else
            go_target(s, T_TEXT);
    } else if (m->sep) {
        const char *pats[2] = {m->sep, m->list_close};
        const int targets[2] = {T_CALL, T_CLOSED};
        match_begin(s, pats, targets, 2);
    } else {
        s->state = S_SEP_WS;
    }
}

/* ---- JSON ----------------------------------------------------------------------------- */

static int jscan_step(jscan *j, unsigned char b) {
    if (b == 0) /* never JSON; and a call's arguments are a C string */
        return J_BAD;
    switch (j->kind) {
    case 0:
        if (is_ws(b))
            return J_SKIP;
        if (b == '{' || b == '[') {
            j->kind = '{';
            j->depth = 1;
            j->in_str = j->esc = 0;
        } else if (b == '"') {
            j->kind = '"';
            j->esc = 0;
        } else if (b == '-' || (b >= '0' && b <= '9') || b == 't' || b == 'f' || b == 'n') {
            j->kind = 's';
        } else {
            return J_BAD;
        }
        return J_MORE;
    case '{':
        if (j->in_str) {
            if (j->esc)
                j->esc = 0;
            else if (b == '\\')
                j->esc = 1;
            else if (b == '"')
                j->in_str = 0;
        } else if (b == '"') {
            j->in_str = 1;
        } else if (b == '{' || b == '[') {
            j->depth++;
        } else if (b == '}' || b == ']') {
            if (--j->depth == 0)
                return J_END_IN;
        }
        return J_MORE;
    case '"':
        if (j->esc)
            j->esc = 0;
        else if (b == '\\')
            j->esc = 1;
        else if (b == '"')
            return J_END_IN;
        return J_MORE;
    default: /* a number or literal ends at the first byte not of it */
        if ((b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
            b == '+' || b == '-' || b == '.')
            return J_MORE;
        return J_END_OUT;
    }
}

static int name_char(unsigned char b) {
    return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_' ||
           b == '-';
}

/* The name is whole: a forced answer's call is one from here on, its
 * opening markup is dropped, and it is released unless it may repeat an
 * earlier call (then it waits until its arguments differ). */
static void on_name(srv_tools_stream *s) {
    s->has_name = 1;
    if (!s->forced)
        return;
    pending_clear(s, 0);
    if (!repeats(s, "", 0, 0))
        emit_call(s, NULL, 0);
}

/* One byte of a value: recorded when it is the arguments. */
static void value_byte(srv_tools_stream *s, unsigned char b) {
    if (!s->recording)
        return;
    brisk_buf_put(&s->args, (const char *)&b, 1);
    if (!s->forced)
        return;
    if (s->emitted)
        emit_args(s, (const char *)&b, 1);
    else if (!repeats(s, s->args.p, s->args.len, 0))
        emit_call(s, s->args.p, s->args.len);
}

static void call_step(srv_tools_stream *s, unsigned char b) {
    if ((!s->forced || !s->has_name) && hold(s, b) < 0)
        return;
    switch (s->co) {
    case CO_OPEN:
        if (is_ws(b))
            return;
        if (b != '{')
            break;
        s->co = CO_KEY;
        return;
    case CO_KEY:
        if (is_ws(b))
            return;
        if (b != '"')
            break;
        s->key_len = 0;
        s->key_long = 0;
        s->co = CO_KEY_STR;
        return;
    case CO_KEY_STR:
        if (b == '"') {
            s->key[s->key_len] = '\0';
            s->co = CO_COLON;
        } else if (b == '\\') {
            s->key_long = 1; /* no key we look for has an escape */
            s->co = CO_KEY_ESC;
        } else if (s->key_len < KEY_MAX) {
            s->key[s->key_len++] = (char)b;
        } else {
            s->key_long = 1;
        }
        return;
    case CO_KEY_ESC: s->co = CO_KEY_STR; return;
    case CO_COLON: {
        if (is_ws(b))
            return;
        if (b != ':')
            break;
        const char *k = s->key_long ? "" : s->key;
        int first = s->n_members++ == 0;
        if (first != !strcmp(k, "name")) /* "name" first, and once */
            break;
        memset(&s->js, 0, sizeof s->js);
        if (first) {
            s->co = CO_NAME_Q;
        } else {
            s->recording = !s->has_args && (!strcmp(k, "arguments") || !strcmp(k, "parameters"));
            s->has_args |= s->recording;
            s->co = CO_VALUE;
        }
        return;
    }
    case CO_NAME_Q:
        if (is_ws(b))
            return;
        if (b != '"')
            break;
        s->co = CO_NAME;
        return;
    case CO_NAME:
        if (b == '"' && s->name_len > 0) {
            s->name[s->name_len] = '\0';
            s->co = CO_NEXT;
            on_name(s);
            return;
        }
        if (!name_char(b) || s->name_len >= 64)
            break;
        s->name[s->name_len++] = (char)b;
        return;
    case CO_VALUE: {
        int r = jscan_step(&s->js, b);
        if (r == J_SKIP)
            return;
        if (r == J_BAD || (s->recording && s->js.kind != '{' && s->js.kind != '"'))
            break;
        if (r == J_END_OUT) {
            if (!s->forced || !s->has_name)
                s->pending.len--; /* b is not the value's: read it again */
            s->co = CO_NEXT;
            s->recording = 0;
            step(s, b);
            return;
        }
        value_byte(s, b);
        if (r == J_END_IN) {
            s->co = CO_NEXT;
            s->recording = 0;
        }
        return;
    }
    case CO_NEXT:
        if (is_ws(b))
            return;
        if (b == ',') {
            s->co = CO_KEY;
            return;
        }
        if (b != '}' || call_done(s) < 0)
            break;
        return;
    }
    /* not a call */
    if (!s->forced || !s->has_name)
        s->pending.len--;
    s->recording = 0;
    fail(s, b);
}

/* ---- the generic format's text -------------------------------------------------------- */

static void put_code(srv_tools_stream *s, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    put_text(s, u, n);
}

/* A high surrogate without its pair stands as U+FFFD, as decoders do. */
static void lone_high(srv_tools_stream *s) {
    if (s->hi)
        put_code(s, 0xFFFD);
    s->hi = 0;
}

static int hex(unsigned char b) {
    return b >= '0' && b <= '9'   ? b - '0'
           : b >= 'a' && b <= 'f' ? b - 'a' + 10
           : b >= 'A' && b <= 'F' ? b - 'A' + 10
                                  : -1;
}

static void string_step(srv_tools_stream *s, unsigned char b) {
    if (s->esc == 2) {
        int h = hex(b);
        if (h >= 0) {
            s->u = s->u * 16 + (unsigned)h;
            if (++s->u_n < 4)
                return;
            s->esc = 0;
            if (s->u >= 0xD800 && s->u < 0xDC00) {
                lone_high(s);
                s->hi = s->u;
            } else if (s->u >= 0xDC00 && s->u < 0xE000) {
                if (s->hi)
                    put_code(s, 0x10000 + ((s->hi - 0xD800) << 10) + (s->u - 0xDC00));
                else
                    put_code(s, 0xFFFD);
                s->hi = 0;
            } else {
                lone_high(s);
                put_code(s, s->u);
            }
            return;
        }
        s->esc = 0; /* a broken escape: its character stands as U+FFFD */
        lone_high(s);
        put_code(s, 0xFFFD);
    }
    if (s->esc == 1) {
        static const char from[] = "nrtbf/\\\"", to[] = "\n\r\t\b\f/\\\"";
        const char *k = b ? strchr(from, b) : NULL;
        s->esc = 0;
        if (b == 'u') {
            s->esc = 2;
            s->u = 0;
            s->u_n = 0;
            return;
        }
        lone_high(s);
        if (k)
            put_text(s, &to[k - from], 1);
        else
            put_text(s, (const char *)&b, 1);
        return;
    }
    if (b == '\\') {
        s->esc = 1;
        return;
    }
    lone_high(s);
    if (b == '"') {
        const char *pats[1] = {s->m->text_close};
        const int targets[1] = {T_CLOSED};
        s->markup = 1;
        match_begin(s, pats, targets, 1);
        return;
    }
    put_text(s, (const char *)&b, 1);
}

/* ---- the parser ---------------------------------------------------------------------- */

static void step(srv_tools_stream *s, unsigned char b) {
    switch (s->state) {
    case S_TEXT:
        if (s->m->item_open && b == (unsigned char)s->m->item_open[0]) {
            const char *pats[1] = {s->m->item_open};
            const int targets[1] = {T_CALL};
            match_begin(s, pats, targets, 1);
            match_step(s, b);
        } else {
            put_text(s, (const char *)&b, 1);
        }
        return;
    case S_TEXT_ONLY: put_text(s, (const char *)&b, 1); return;
    case S_MATCH: match_step(s, b); return;
    case S_CALL: call_step(s, b); return;
    case S_SEP_WS:
        if (is_ws(b) || b == ';') {
            hold(s, b);
        } else if (b == '{') {
            call_begin(s);
            call_step(s, b);
        } else { /* the calls are over; what separated them is not text */
            pending_clear(s, 0);
            s->state = S_TEXT_ONLY;
            step(s, b);
        }
        return;
    case S_STRING: string_step(s, b); return;
    default: /* S_DONE */ return;
    }
}

/* The answer ended: what pending held is text only where it could still
 * have been ordinary text (a free answer, not yet past a call's opening);
 * a call that had its name is kept, cut or (when the model stopped just
 * before its closing brace) whole. */
static void finish(srv_tools_stream *s, srv_tools_end end) {
    if (s->state == S_DONE || s->state == S_TEXT || s->state == S_TEXT_ONLY ||
        s->state == S_STRING) {
        if (s->state == S_STRING)
            lone_high(s);
        return;
    }
    if (s->state == S_CALL && s->has_name) {
        if (end == SRV_TOOLS_END_STOP && s->co == CO_NEXT && s->has_args && call_done(s) == 0)
            return;
        if (s->forced || end == SRV_TOOLS_END_CUT) {
            if (!s->emitted && !repeats(s, s->args.p, s->args.len, 0))
                emit_call(s, s->args.p, s->args.len);
            pending_clear(s, 0);
            return;
        }
        pending_clear(s, 1); /* the model stopped inside it: no call, text */
        return;
    }
    if (s->state == S_CALL)
        pending_clear(s, !s->forced && (end == SRV_TOOLS_END_STOP || !s->markup));
    else
        pending_clear(s, !s->forced && !s->markup);
}

/* ---- the API -------------------------------------------------------------------------- */

srv_tools_stream *srv_tools_stream_new(model_chat_kind kind, int forced,
                                       void (*make_id)(void *ctx, char out[32]), void *id_ctx) {
    srv_tools_stream *s = brisk_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->m = srv_tools_markup_of(kind);
    s->forced = forced;
    s->make_id = make_id;
    s->id_ctx = id_ctx;
    if (s->m->item_open) {
        s->state = s->fallback = S_TEXT;
    } else {
        s->fallback = S_TEXT_ONLY;
        const char *pats[MAX_ALTS];
        int targets[MAX_ALTS], n = 0;
        for (int i = 0; s->m->list_open[i] && n < MAX_ALTS; i++) {
            pats[n] = s->m->list_open[i];
            targets[n++] = T_CALL;
        }
        if (s->m->text_open && n < MAX_ALTS) {
            pats[n] = s->m->text_open;
            targets[n++] = T_STRING;
        }
        if (n)
            match_begin(s, pats, targets, n);
        else
            call_begin(s);
    }
    return s;
}

void srv_tools_stream_free(srv_tools_stream *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_calls; i++) {
        free(s->calls[i].id);
        free(s->calls[i].name);
        free(s->args_of[i].p);
    }
    free(s->calls);
    free(s->args_of);
    free(s->pending.p);
    free(s->args.p);
    free(s->ws.p);
    free(s->content.p);
    free(s->raw);
    free(s->pieces);
    free(s->out.p);
    free(s);
}

int srv_tools_stream_feed(srv_tools_stream *s, const char *text, size_t len, srv_tools_end end,
                          const srv_tools_piece **pieces, int *n) {
    *pieces = NULL;
    *n = 0;
    if (s->oom)
        return BRISK_ENOMEM;
    s->n_raw = 0;
    s->out.len = 0;
    for (size_t i = 0; i < len && !s->oom; i++)
        step(s, (unsigned char)text[i]);
    if (end != SRV_TOOLS_MORE && !s->oom)
        finish(s, end);
    s->oom |= s->pending.oom || s->args.oom || s->ws.oom || s->content.oom || s->out.oom;
    for (int i = 0; i < s->n_calls; i++)
        s->oom |= s->args_of[i].oom;
    if (s->oom ||
        brisk_grow(&s->pieces, &s->cap_pieces, (size_t)s->n_raw + 1, sizeof *s->pieces, 8, 0) < 0) {
        s->oom = 1;
        return BRISK_ENOMEM;
    }
    for (int i = 0; i < s->n_raw; i++) {
        const raw_piece *r = &s->raw[i];
        srv_tools_piece *p = &s->pieces[i];
        p->call = r->call;
        p->id = r->first ? s->calls[r->call].id : NULL;
        p->name = r->first ? s->calls[r->call].name : NULL;
        p->text = s->out.p ? s->out.p + r->off : "";
        p->len = r->len;
    }
    *pieces = s->pieces;
    *n = s->n_raw;
    return 0;
}

int srv_tools_stream_ended(const srv_tools_stream *s) {
    return s->ended;
}

int srv_tools_stream_complete(const srv_tools_stream *s) {
    return s->complete;
}

const srv_tool_call *srv_tools_stream_calls(srv_tools_stream *s, int *n) {
    for (int i = 0; i < s->n_calls; i++)
        s->calls[i].arguments = s->args_of[i].p;
    *n = s->n_calls;
    return s->calls;
}

const char *srv_tools_stream_content(const srv_tools_stream *s, size_t *len) {
    *len = s->content.len;
    return s->content.len ? s->content.p : NULL;
}

int srv_tools_parse_output(model_chat_kind kind, const char *text, size_t len,
                           void (*make_id)(void *ctx, char out[32]), void *id_ctx,
                           srv_tool_call **calls, char **content) {
    *calls = NULL;
    *content = NULL;
    srv_tools_stream *s = srv_tools_stream_new(kind, 0, make_id, id_ctx);
    const srv_tools_piece *p;
    int np;
    if (!s || srv_tools_stream_feed(s, text, len, SRV_TOOLS_END_STOP, &p, &np) < 0) {
        srv_tools_stream_free(s);
        return BRISK_ENOMEM;
    }
    size_t clen;
    const char *c = srv_tools_stream_content(s, &clen);
    if (c && !(*content = brisk_malloc(clen + 1))) {
        srv_tools_stream_free(s);
        return BRISK_ENOMEM;
    }
    if (c) {
        memcpy(*content, c, clen);
        (*content)[clen] = '\0';
    }
    int n = 0;
    srv_tools_stream_calls(s, &n);
    /* The calls are handed over: their strings move to the caller. */
    if (n) {
        *calls = s->calls;
        for (int i = 0; i < n; i++) {
            s->calls[i].arguments = s->args_of[i].p;
            s->args_of[i].p = NULL;
        }
        s->calls = NULL;
        s->n_calls = 0;
    }
    srv_tools_stream_free(s);
    return n;
}
