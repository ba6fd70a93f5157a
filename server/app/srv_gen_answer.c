/* srv_gen_answer.c - a generation's answer out of the engine's output, for
 * every shape: the log-probs of its tokens (echoed prompt included), its
 * text split into reasoning and answer, its tool calls, and the whole
 * answer of a request that did not stream (srv_gen_respond_choices).
 * Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "server/api/srv_reason.h"
#include "server/api/srv_tools.h"
#include "server/app/srv_app.h"

#include "server/app/srv_gen_int.h"

/* ---- log-probs ------------------------------------------------------------------- */

/* The piece text of a token (raw bytes, may be partial UTF-8). */
static char *piece(const tok_vocab *v, int32_t id, size_t *len) {
    char buf[256];
    int n = tok_token_to_piece(v, id, TOK_PARSE_SPECIAL, buf, sizeof buf);
    if (n < 0)
        n = 0;
    char *s = brisk_malloc((size_t)n + 1);
    if (!s)
        return NULL;
    if (n <= (int)sizeof buf)
        memcpy(s, buf, (size_t)n);
    else if (tok_token_to_piece(v, id, TOK_PARSE_SPECIAL, s, (size_t)n + 1) != n)
        n = 0;
    s[n] = '\0';
    *len = (size_t)n;
    return s;
}

void srv_gen_lps_free(gen_lps *s) {
    for (int i = 0; i < s->n_strs; i++)
        free(s->strs[i]);
    free(s->strs);
    free(s->lps);
    free(s->tops);
    memset(s, 0, sizeof *s);
}

/* Bytes id adds to the text (0 for control tokens). */
static size_t text_len(const tok_vocab *v, int32_t id) {
    int n = tok_token_to_piece(v, id, 0, NULL, 0);
    return n > 0 ? (size_t)n : 0;
}

int srv_gen_lps_build(const tok_vocab *v, const sched_token *toks, int n, int first_null,
                      size_t *off, int *strip, gen_lps *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0)
        return 0;
    int n_top = 0;
    for (int i = 0; i < n; i++)
        n_top += toks[i].n_top;
    out->lps = brisk_calloc((size_t)n, sizeof *out->lps);
    out->tops = brisk_calloc((size_t)n_top + 1, sizeof *out->tops);
    out->strs = brisk_calloc((size_t)(n + n_top), sizeof *out->strs);
    if (!out->lps || !out->tops || !out->strs)
        return BRISK_ENOMEM;
    int t = 0;
    for (int i = 0; i < n; i++) {
        srv_token_logprob *l = &out->lps[i];
        size_t len;
        char *s = piece(v, toks[i].id, &len);
        if (!s)
            return BRISK_ENOMEM;
        out->strs[out->n_strs++] = s;
        size_t tl = text_len(v, toks[i].id);
        int first_text = tl && *strip && tok_vocab_drops_first_space(v);
        if (tl)
            *strip = 0;
        if (first_text && s[0] == ' ') {
            memmove(s, s + 1, len); /* the NUL too */
            len--;
            tl--;
        }
        l->token = s;
        l->token_len = len;
        l->logprob = toks[i].logprob;
        l->has_logprob = !(first_null && i == 0);
        l->text_offset = *off;
        *off += tl;
        l->top = &out->tops[t];
        l->n_top = toks[i].n_top;
        for (int k = 0; k < toks[i].n_top; k++) {
            char *ts = piece(v, toks[i].top_id[k], &len);
            if (!ts)
                return BRISK_ENOMEM;
            if (first_text && ts[0] == ' ') { /* alternatives at the same place */
                memmove(ts, ts + 1, len);
                len--;
            }
            out->strs[out->n_strs++] = ts;
            out->tops[t].token = ts;
            out->tops[t].token_len = len;
            out->tops[t].logprob = toks[i].top_logprob[k];
            t++;
        }
    }
    return 0;
}

sched_token *srv_gen_echo_tokens(const gen_req *g, const gen_choice *c, const sched_token *extra,
                                 int n_extra, int *n) {
    int np = g->echo ? g->n_pids[c->prompt_idx] : 0;
    sched_token *all = brisk_calloc((size_t)(np + n_extra) + 1, sizeof *all);
    if (!all)
        return NULL;
    if (np) {
        all[0].id = g->pids[c->prompt_idx][0];
        for (int k = 1; k < np; k++) {
            if (c->ptoks && k - 1 < c->n_ptoks)
                all[k] = c->ptoks[k - 1];
            else
                all[k].id = g->pids[c->prompt_idx][k];
        }
    }
    if (n_extra)
        memcpy(all + np, extra, (size_t)n_extra * sizeof *all);
    *n = np + n_extra;
    return all;
}

/* ---- tool calls ------------------------------------------------------------------ */

/* A tool call id as OpenAI's look: "call_" and 24 letters and digits. */
static void make_call_id(void *ctx, char out[32]) {
    srv_app *app = ctx;
    srv_http_make_id(app->http, "call_", 24, out, 32);
}

int srv_gen_tools_begin(gen_req *g, gen_choice *c) {
    c->tools = srv_tools_stream_new(g->tools_kind, g->tools_forced, make_call_id, g->app);
    return c->tools ? 0 : BRISK_ENOMEM;
}

int srv_gen_tools_feed(gen_req *g, gen_choice *c, const char *text, size_t len, srv_tools_end end,
                       const srv_tools_piece **pieces, int *n) {
    *pieces = NULL;
    *n = 0;
    if (!c->tools || srv_tools_stream_feed(c->tools, text, len, end, pieces, n) < 0) {
        srv_gen_fail(g, "out of memory");
        return BRISK_ENOMEM;
    }
    /* The list is over (a repeated call, or the most calls an answer
     * holds): what the model writes next would be thrown away. */
    if (srv_tools_stream_ended(c->tools) && !c->tools_stopped && end == SRV_TOOLS_MORE) {
        c->tools_stopped = 1;
        sched_engine_cancel(g->app->eng, c);
    }
    return 0;
}

const char *srv_gen_choice_finish(const gen_req *g, const gen_choice *c, sched_finish f,
                                  int deadline) {
    int n = 0;
    if (g->tools_on && c->tools) {
        srv_tools_stream_calls(c->tools, &n);
        if (n && srv_tools_stream_complete(c->tools))
            return "tool_calls";
    }
    if (deadline)
        return srv_finish_deadline;
    if (f == SCHED_FINISH_LENGTH)
        return "length";
    return n ? "tool_calls" : "stop";
}

/* ---- the whole answer ------------------------------------------------------------- */

/* What the choices' answers borrow until the body is made: per choice its
 * log-probs and its text split ([2i] reasoning, [2i+1] answer; with
 * reasoning). Calls and content (tools offered) are the parsers'. */
typedef struct gen_answers {
    srv_choice *ch;
    gen_lps *lps;
    brisk_buf *split;
} gen_answers;

static void answers_free(const gen_req *g, gen_answers *a) {
    for (int i = 0; a->lps && i < g->n_choices; i++)
        srv_gen_lps_free(&a->lps[i]);
    for (int i = 0; a->split && i < 2 * g->n_choices; i++)
        free(a->split[i].p);
    free(a->split);
    free(a->lps);
    free(a->ch);
}

/* Choice i's answer into a->ch[i]; 0, or BRISK_ENOMEM. */
static int answer_choice(gen_req *g, gen_answers *a, int i) {
    srv_app *app = g->app;
    gen_choice *c = &g->choices[i];
    srv_choice *ch = &a->ch[i];
    ch->index = c->index;
    ch->text = c->text.p ? c->text.p : "";
    ch->text_len = c->text.len;
    if (g->reason) {
        srv_reason rz;
        srv_reason_init(&rz);
        brisk_buf *rs = &a->split[2 * i], *ct = &a->split[2 * i + 1];
        brisk_buf_str(rs, "");
        brisk_buf_str(ct, "");
        srv_reason_feed(&rz, c->text.p ? c->text.p : "", c->text.len, 1, rs, ct);
        if (rs->oom || ct->oom)
            return BRISK_ENOMEM;
        ch->text = ct->p;
        ch->text_len = ct->len;
        if (g->include_reasoning && rs->len) {
            ch->reasoning = rs->p;
            ch->reasoning_len = rs->len;
        }
    }
    ch->finish_reason = srv_gen_choice_finish(g, c, c->finish, c->deadline);
    if (g->tools_on && c->tools) {
        /* The parser read the answer as it came: its calls, and the text
         * outside them (NULL when none). */
        int nc = 0;
        const srv_tool_call *calls = srv_tools_stream_calls(c->tools, &nc);
        ch->text = srv_tools_stream_content(c->tools, &ch->text_len);
        ch->calls = nc ? calls : NULL;
        ch->n_calls = nc;
    }
    if (g->logprobs >= 0) {
        /* echo: prompt tokens (first without a log-prob), then output */
        int np = g->echo ? g->n_pids[c->prompt_idx] : 0, n_all = 0;
        sched_token *all = srv_gen_echo_tokens(g, c, c->toks, c->n_toks, &n_all);
        if (!all)
            return BRISK_ENOMEM;
        /* OpenAI never shows the end-of-sequence token (chat). */
        if (g->is_chat && n_all > np && c->finish == SCHED_FINISH_STOP &&
            tok_is_eog(app->vocab, all[n_all - 1].id))
            n_all--;
        size_t off = 0;
        int strip = np > 0 || !tok_ids_have_text(app->vocab, g->pids[c->prompt_idx],
                                                 g->n_pids[c->prompt_idx]);
        int rc = srv_gen_lps_build(app->vocab, all, n_all, np > 0, &off, &strip, &a->lps[i]);
        free(all);
        ch->lps = a->lps[i].lps;
        ch->n_lps = n_all;
        if (rc < 0)
            return rc;
    }
    return 0;
}

void srv_gen_respond_choices(gen_req *g, const srv_usage *u) {
    int n = g->n_choices;
    gen_answers a;
    memset(&a, 0, sizeof a);
    a.ch = brisk_calloc((size_t)n, sizeof *a.ch);
    a.lps = brisk_calloc((size_t)n, sizeof *a.lps);
    if (g->reason)
        a.split = brisk_calloc((size_t)n * 2, sizeof *a.split);
    int ok = a.ch && a.lps && (!g->reason || a.split);
    for (int i = 0; ok && i < n; i++)
        ok = answer_choice(g, &a, i) == 0;
    char *json = ok ? g->shape->body(g, a.ch, u) : NULL;
    if (json)
        srv_respond(g->http, 200, "application/json", json, strlen(json), NULL);
    else
        srv_respond_code(g->http, BRISK_ENOMEM, NULL);
    free(json);
    answers_free(g, &a);
}
