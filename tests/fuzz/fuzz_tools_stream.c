/* fuzz_tools_stream.c - the parser that finds tool calls in an answer as it
 * is generated (server/api/srv_tools_stream.c), on a model's hostile
 * output: a free model writes anything, and a forced one anything its
 * grammar allows, cut anywhere.
 *
 * Input: byte 0 the setup - bits 0-1 the tool format (a family using it),
 * bit 2 forced (a grammar holds the answer), bit 3 the end (the model
 * stopped, or its budget cut it); byte 1 the size of the pieces the answer
 * arrives in (0: whole); then the answer's text.
 *
 * Properties: the answer fed whole and fed in pieces gives the same pieces
 * (joined per target), calls, content and flags; the pieces joined are the
 * calls' arguments and the content; a call's first piece comes before its
 * fragments, and calls open in order; at most SRV_TOOLS_MAX_CALLS calls,
 * each with a valid name and an id from make_id; the content has no
 * leading or trailing whitespace and is valid UTF-8 when the answer is
 * (the generic format's \u escapes included); a free answer that stopped
 * has calls whose arguments are a JSON object; a list the parser ended is
 * complete. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "models/chat_template.h"
#include "server/api/srv_tools.h"
#include "tests/fuzz/fuzz_util.h"

/* One family per tool format. */
static const model_chat_kind KINDS[4] = {MODEL_CHAT_CHATML, MODEL_CHAT_LLAMA3, MODEL_CHAT_MISTRAL,
                                         MODEL_CHAT_GEMMA};

static void make_id(void *ctx, char out[32]) {
    int *n = ctx;
    snprintf(out, 32, "call_%d", (*n)++);
}

/* What one run gave: the transcript of its pieces, one line per piece run
 * ("T<text>", "C<i> <id> <name>", "A<i><fragment>", adjacent runs of one
 * target joined) and the parser's final state. */
typedef struct run {
    brisk_buf log, content, args[SRV_TOOLS_MAX_CALLS];
    int n_calls, ended, complete, last_call;
    char last;
} run;

static void run_free(run *r) {
    free(r->log.p);
    free(r->content.p);
    for (int i = 0; i < SRV_TOOLS_MAX_CALLS; i++)
        free(r->args[i].p);
}

static void add_piece(run *r, const srv_tools_piece *p) {
    char kind = p->call < 0 ? 'T' : p->id ? 'C' : 'A';
    if (kind == 'C') {
        FUZZ_CHECK(p->call == r->n_calls && p->call < SRV_TOOLS_MAX_CALLS && p->name &&
                   p->len == 0 && srv_tools_valid_name(p->name));
        r->n_calls++;
        brisk_buf_printf(&r->log, "\nC%d %s %s", p->call, p->id, p->name);
        brisk_buf_str(&r->args[p->call], "");
    } else {
        if (kind == 'A')
            FUZZ_CHECK(p->call == r->n_calls - 1); /* fragments of the open call only */
        if (kind != r->last || p->call != r->last_call) {
            brisk_buf_printf(&r->log, "\n%c", kind);
            if (kind == 'A')
                brisk_buf_printf(&r->log, "%d ", p->call);
        }
        brisk_buf_put(&r->log, p->text, p->len);
        brisk_buf_put(kind == 'T' ? &r->content : &r->args[p->call], p->text, p->len);
    }
    r->last = kind;
    r->last_call = p->call;
}

static void feed(model_chat_kind k, int forced, srv_tools_end end, const char *text, size_t len,
                 size_t piece, run *r) {
    memset(r, 0, sizeof *r);
    r->last_call = -2;
    int ids = 0;
    srv_tools_stream *s = srv_tools_stream_new(k, forced, make_id, &ids);
    if (!s)
        return;
    size_t at = 0;
    do {
        size_t n = piece && len - at > piece ? piece : len - at;
        const srv_tools_piece *p;
        int np = 0;
        int rc =
            srv_tools_stream_feed(s, text + at, n, at + n == len ? end : SRV_TOOLS_MORE, &p, &np);
        FUZZ_CHECK(rc == 0 || rc == BRISK_ENOMEM);
        if (rc < 0)
            break;
        for (int i = 0; i < np; i++)
            add_piece(r, &p[i]);
        at += n;
    } while (at < len);
    int nc = 0;
    const srv_tool_call *c = srv_tools_stream_calls(s, &nc);
    FUZZ_CHECK(nc == r->n_calls && nc <= SRV_TOOLS_MAX_CALLS);
    for (int i = 0; i < nc; i++) {
        char id[32];
        snprintf(id, sizeof id, "call_%d", i);
        FUZZ_CHECK(!strcmp(c[i].id, id) && srv_tools_valid_name(c[i].name));
        FUZZ_CHECK(strlen(c[i].arguments) == r->args[i].len &&
                   !memcmp(c[i].arguments, r->args[i].p ? r->args[i].p : "", r->args[i].len));
        /* a free answer's calls are checked JSON once whole */
        if (!forced && end == SRV_TOOLS_END_STOP) {
            cJSON *o = cJSON_Parse(c[i].arguments);
            FUZZ_CHECK(cJSON_IsObject(o) || !o); /* NULL only when cJSON ran out of memory */
            cJSON_Delete(o);
        }
    }
    size_t cl = 0;
    const char *ct = srv_tools_stream_content(s, &cl);
    FUZZ_CHECK(cl == r->content.len && (!cl || !memcmp(ct, r->content.p, cl)));
    if (cl) {
        static const char ws[4] = {' ', '\t', '\r', '\n'}; /* memchr: ct may hold NULs */
        FUZZ_CHECK(!memchr(ws, ct[0], 4) && !memchr(ws, ct[cl - 1], 4));
        if (fuzz_utf8_valid(text, len))
            FUZZ_CHECK(fuzz_utf8_valid(ct, cl));
    }
    r->ended = srv_tools_stream_ended(s);
    r->complete = srv_tools_stream_complete(s);
    FUZZ_CHECK(!r->ended || r->complete);
    srv_tools_stream_free(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    uint8_t setup = fuzz_u8(&in), piece = fuzz_u8(&in);
    model_chat_kind k = KINDS[setup & 3];
    int forced = (setup >> 2) & 1;
    srv_tools_end end = (setup >> 3) & 1 ? SRV_TOOLS_END_CUT : SRV_TOOLS_END_STOP;
    const char *text = (const char *)in.p;
    run whole, cut;
    feed(k, forced, end, text, in.n, 0, &whole);
    feed(k, forced, end, text, in.n, piece, &cut);
    FUZZ_CHECK(whole.log.len == cut.log.len &&
               (!whole.log.len || !memcmp(whole.log.p, cut.log.p, whole.log.len)));
    FUZZ_CHECK(whole.n_calls == cut.n_calls && whole.ended == cut.ended &&
               whole.complete == cut.complete);
    run_free(&whole);
    run_free(&cut);
    return 0;
}
