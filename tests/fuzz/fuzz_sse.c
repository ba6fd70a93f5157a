/* fuzz_sse.c - the streaming encoder: token bytes -> text chunks (the UTF-8
 * hold-back of brisk_utf8_complete_prefix, or the engine's seq_text with its
 * detokenizer, stop strings and hold-back) -> OpenAI chunk JSON with
 * log-probs (srv_api_*_chunk_json) -> SSE events (srv_sse_event), then the
 * whole-response bodies of the same text.
 *
 * Input: byte 0 flags (bit 0 chat, bit 1 log-probs, bit 2 vocabulary mode,
 * bit 3 include_usage, bit 4 TOK_CONTINUATION, bits 5-7 the vocabulary),
 * byte 1 the number of top alternatives per token (mod 4) and, in
 * vocabulary mode, of stop strings (bits 2-3). Then
 *   raw mode: tokens as {length byte: low 5 bits the length, high 3 bits the
 *     log-prob kind (finite, -inf, NaN, huge, ...)} + bytes: any bytes,
 *     partial UTF-8 split across tokens, NULs, control characters;
 *   vocabulary mode: stop strings as {length byte} + bytes, then token ids
 *     as little-endian u16 (mod the vocabulary size).
 *
 * Every event must be "data: " + one line of JSON + "\n\n" whose JSON parses
 * back (cJSON) to the right object and is valid UTF-8 (checked here by an
 * independent checker); the streamed text must be what sanitising the whole
 * output gives (chunking never changes the text); chat log-probs' "bytes"
 * must be the token's raw bytes; a top_logprobs object never repeats a key;
 * every number is finite. In vocabulary mode each chunk of seq_text is valid
 * UTF-8, the streamed text never contains a stop string, and it is the
 * decoded text up to the first stop string (all of it when none matched). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "common/brisk_utf8.h"
#include "models/tokenizer.h"
#include "scheduler/seq_text.h"
#include "server/api/srv_api.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/fuzz_vocab.h"

#define FUZZ_SSE_MAX_BYTES 8192
#define FUZZ_SSE_MAX_TOKENS 1024
#define FUZZ_SSE_MAX_TOP 3

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    if (fuzz_vocabs_init() < 0) {
        fprintf(stderr, "fuzz_sse: cannot build the vocabularies\n");
        abort();
    }
    return 0;
}

/* ---- a growable byte buffer --------------------------------------------- */

typedef struct bbuf {
    char *p;
    size_t n, cap;
} bbuf;

static int bput(bbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* ---- one stream --------------------------------------------------------- */

typedef struct stream {
    int chat, want_lp, first;
    bbuf raw;  /* the bytes given as chunk texts, concatenated */
    bbuf sent; /* their sanitised forms, chunk by chunk */
    int n_events;
} stream;

static float logprob_of(uint8_t kind, uint8_t salt) {
    switch (kind & 7) {
    case 0: return -(float)salt / 16.0f;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return -3.4e38f;
    case 4: return 0.0f;
    case 5: return INFINITY;
    case 6: return -1e-45f;
    default: return -12345.678f;
    }
}

/* The JSON string of an item, or "" when it is not one. */
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* Every number under j is finite. */
static void check_numbers(const cJSON *j) {
    for (const cJSON *c = j; c; c = c->next) {
        if (cJSON_IsNumber(c))
            FUZZ_CHECK(isfinite(c->valuedouble));
        if (c->child)
            check_numbers(c->child);
    }
}

/* Checks an event and returns its JSON object (caller deletes). */
static cJSON *check_event(const char *ev, size_t n) {
    FUZZ_CHECK(ev != NULL);
    FUZZ_CHECK(n > 8 && strlen(ev) == n);
    FUZZ_CHECK(!memcmp(ev, "data: ", 6) && !memcmp(ev + n - 2, "\n\n", 2));
    const char *j = ev + 6;
    size_t jl = n - 8;
    /* One line: a newline inside would end the SSE event early. */
    FUZZ_CHECK(fuzz_no_byte(j, jl, '\n') && fuzz_no_byte(j, jl, '\r'));
    FUZZ_CHECK(fuzz_utf8_valid(j, jl));
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(j, jl, &end, 0);
    FUZZ_CHECK(o != NULL && cJSON_IsObject(o) && end == j + jl);
    check_numbers(o->child);
    return o;
}

/* The logprobs of one choice against what was given. */
static void check_logprobs(const stream *s, const cJSON *lp, const srv_token_logprob *lps, int n) {
    if (!s->want_lp) {
        FUZZ_CHECK(cJSON_IsNull(lp));
        return;
    }
    FUZZ_CHECK(cJSON_IsObject(lp));
    if (s->chat) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(lp, "content");
        FUZZ_CHECK(cJSON_GetArraySize(content) == n);
        int i = 0;
        for (const cJSON *c = content ? content->child : NULL; c; c = c->next, i++) {
            const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(c, "bytes");
            FUZZ_CHECK(cJSON_IsArray(bytes));
            FUZZ_CHECK(cJSON_GetArraySize(bytes) == (int)lps[i].token_len);
            size_t k = 0;
            for (const cJSON *b = bytes->child; b; b = b->next, k++)
                FUZZ_CHECK(cJSON_IsNumber(b) &&
                           b->valuedouble == (double)(unsigned char)lps[i].token[k]);
            FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "top_logprobs")) ==
                       lps[i].n_top);
        }
        return;
    }
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    FUZZ_CHECK(cJSON_GetArraySize(tokens) == n && cJSON_GetArraySize(tops) == n);
    FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs")) == n);
    /* A JSON object must not repeat a key: each top_logprobs object has one
     * key per distinct text among the alternatives (texts compared as they
     * are sent, sanitised). cJSON keeps repeated keys as separate members,
     * so the count tells; keys are compared by cJSON only when no text holds
     * a NUL, at which cJSON cuts a string. */
    int i = 0;
    for (const cJSON *t = tops ? tops->child : NULL; t; t = t->next, i++) {
        const srv_token_logprob *l = &lps[i];
        char *san[FUZZ_SSE_MAX_TOP];
        size_t sl[FUZZ_SSE_MAX_TOP];
        int distinct = 0, nul = 0, ok = 1;
        for (int a = 0; a < l->n_top; a++) {
            san[a] = brisk_utf8_sanitize_dup(l->top[a].token, l->top[a].token_len, &sl[a]);
            ok &= san[a] != NULL;
        }
        for (int a = 0; ok && a < l->n_top; a++) {
            int seen = 0;
            for (int b = 0; b < a && !seen; b++)
                seen = sl[a] == sl[b] && !memcmp(san[a], san[b], sl[a]);
            distinct += !seen;
            nul |= memchr(san[a], '\0', sl[a]) != NULL;
        }
        for (int a = 0; a < l->n_top; a++)
            free(san[a]);
        if (!ok)
            continue;
        FUZZ_CHECK(cJSON_GetArraySize(t) == distinct);
        for (const cJSON *a = t->child; !nul && a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                FUZZ_CHECK(strcmp(a->string, b->string) != 0);
    }
}

/* Sends one chunk: text (len bytes, may be NULL in chat) with n lps. */
static void send_chunk(stream *s, const char *text, size_t len, const srv_token_logprob *lps, int n,
                       const char *finish) {
    srv_choice ch = {0, text, len, finish, lps, s->want_lp ? n : 0, NULL, 0, NULL, 0, 0};
    char *json = s->chat ? srv_api_chat_chunk_json("chatcmpl-req-1", 1700000000, "fuzz-model", &ch,
                                                   s->first, NULL, s->want_lp)
                         : srv_api_completion_chunk_json("cmpl-req-1", 1700000000, "fuzz-model",
                                                         &ch, NULL, s->want_lp);
    if (!json)
        return;
    size_t n_ev = 0;
    char *ev = srv_sse_event(json, &n_ev);
    free(json);
    if (!ev)
        return;
    cJSON *o = check_event(ev, n_ev);
    free(ev);
    FUZZ_CHECK(!strcmp(jstr(o, "object") ? jstr(o, "object") : "",
                       s->chat ? "chat.completion.chunk" : "text_completion"));
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    FUZZ_CHECK(cJSON_GetArraySize(choices) == 1);
    const cJSON *c = choices->child;
    const char *got;
    if (s->chat) {
        const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c, "delta");
        got = jstr(delta, "content");
        FUZZ_CHECK((got != NULL) == (text != NULL || s->first));
        FUZZ_CHECK(s->first == (jstr(delta, "role") != NULL));
    } else {
        got = jstr(c, "text");
        FUZZ_CHECK(got != NULL);
    }
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
    FUZZ_CHECK(finish ? cJSON_IsString(fr) && !strcmp(fr->valuestring, finish) : cJSON_IsNull(fr));
    /* The text as sent is the sanitised chunk; cJSON cuts a string at an
     * escaped NUL, so it is compared up to the first one. */
    char *san = brisk_utf8_sanitize_dup(text ? text : "", text ? len : 0, NULL);
    if (san) {
        size_t sl = strlen(san);
        FUZZ_CHECK(got == NULL || (strlen(got) == sl && !memcmp(got, san, sl)));
        free(san);
    }
    check_logprobs(s, cJSON_GetObjectItemCaseSensitive(c, "logprobs"), lps, n);
    cJSON_Delete(o);
    if (text) {
        bput(&s->raw, text, len);
        char *sd = brisk_utf8_sanitize_dup(text, len, &len);
        if (sd)
            bput(&s->sent, sd, len);
        free(sd);
    }
    s->first = 0;
    s->n_events++;
}

/* The include_usage chunk ("choices": []), [DONE], and the whole response
 * of the same text. */
static void finish_stream(stream *s, int include_usage, const char *text, size_t len,
                          const char *finish) {
    srv_usage u = {7, s->n_events, 0};
    if (include_usage) {
        char *json = s->chat ? srv_api_chat_chunk_json("chatcmpl-x", 1, "m", NULL, 0, &u, 0)
                             : srv_api_completion_chunk_json("cmpl-x", 1, "m", NULL, &u, 0);
        size_t n = 0;
        char *ev = json ? srv_sse_event(json, &n) : NULL;
        free(json);
        if (ev) {
            cJSON *o = check_event(ev, n);
            FUZZ_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "choices")) == 0);
            FUZZ_CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "usage")));
            cJSON_Delete(o);
        }
        free(ev);
    }
    size_t dn = 0;
    const char *done = srv_sse_done(&dn);
    FUZZ_CHECK(dn == strlen(done) && !strcmp(done, "data: [DONE]\n\n"));
    /* Streaming in chunks changes nothing: the text sent is the whole
     * output sanitised at once. */
    size_t al = 0;
    char *all = brisk_utf8_sanitize_dup(s->raw.p ? s->raw.p : "", s->raw.n, &al);
    if (all) {
        FUZZ_CHECK(al == s->sent.n && (al == 0 || !memcmp(all, s->sent.p, al)));
        FUZZ_CHECK(fuzz_utf8_valid(all, al));
    }
    free(all);
    srv_choice ch = {0, text, len, finish, NULL, 0, NULL, 0, NULL, 0, 0};
    char *json = s->chat ? srv_api_chat_json("chatcmpl-x", 1, "m", &ch, 1, &u, 0)
                         : srv_api_completion_json("cmpl-x", 1, "m", &ch, 1, &u, 0);
    size_t n = 0;
    char *ev = json ? srv_sse_event(json, &n) : NULL;
    free(json);
    if (ev)
        cJSON_Delete(check_event(ev, n));
    free(ev);
}

static void stream_free(stream *s) {
    free(s->raw.p);
    free(s->sent.p);
}

/* ---- raw mode: token bytes held back at incomplete UTF-8 ------------------ */

typedef struct rtok {
    const char *p;
    size_t n;
    uint8_t kind;
} rtok;

static void run_raw(fuzz_in *in, int chat, int want_lp, int n_top, int include_usage) {
    rtok toks[FUZZ_SSE_MAX_TOKENS];
    int nt = 0;
    while (in->n > 0 && nt < FUZZ_SSE_MAX_TOKENS) {
        uint8_t h = fuzz_u8(in);
        size_t got;
        const uint8_t *p = fuzz_take(in, h & 31, &got);
        toks[nt++] = (rtok){(const char *)p, got, (uint8_t)(h >> 5)};
    }
    stream s = {chat, want_lp, chat, {0}, {0}, 0};
    bbuf pend = {0};
    if (chat) /* the role comes first, as srv_gen sends it */
        send_chunk(&s, NULL, 0, NULL, 0, NULL);
    for (int i = 0; i < nt; i++) {
        if (bput(&pend, toks[i].p, toks[i].n) < 0)
            break;
        size_t k = brisk_utf8_complete_prefix(pend.p, pend.n);
        FUZZ_CHECK(k <= pend.n && pend.n - k <= 3);
        /* The tokens this chunk reports, with alternatives from the tokens
         * before (any bytes make a valid alternative). */
        srv_top_logprob top[FUZZ_SSE_MAX_TOP];
        int nt_i = n_top < i ? n_top : i;
        for (int t = 0; t < nt_i; t++)
            top[t] = (srv_top_logprob){toks[i - 1 - t].p, toks[i - 1 - t].n,
                                       logprob_of(toks[i - 1 - t].kind, (uint8_t)t)};
        srv_token_logprob lp = {toks[i].p, toks[i].n, logprob_of(toks[i].kind, (uint8_t)i), 1, nt_i,
                                top,       s.raw.n};
        const char *text = pend.p;
        int last = i == nt - 1;
        size_t len = last ? pend.n : k;
        send_chunk(&s, text, len, &lp, 1, last ? "length" : NULL);
        memmove(pend.p, pend.p + len, pend.n - len);
        pend.n -= len;
    }
    if (nt == 0)
        send_chunk(&s, "", 0, NULL, 0, "stop");
    finish_stream(&s, include_usage, s.raw.p, s.raw.n, "length");
    free(pend.p);
    stream_free(&s);
}

/* ---- vocabulary mode: the engine's seq_text with stop strings ------------ */

/* Whether needle occurs in hay (bytes, NULs included). */
static int has_sub(const char *hay, size_t hn, const char *needle, size_t nn) {
    for (size_t i = 0; nn && i + nn <= hn; i++)
        if (!memcmp(hay + i, needle, nn))
            return 1;
    return 0;
}

static void run_vocab(fuzz_in *in, const tok_vocab *v, int flags, int n_stop_in, int n_top,
                      int want_lp, int chat, int include_usage) {
    char *stops[4];
    int n_stop = 0;
    for (int i = 0; i < n_stop_in; i++) {
        size_t got;
        uint8_t h = fuzz_u8(in);
        const uint8_t *p = fuzz_take(in, h & 15, &got);
        /* As the API admits them: non-empty UTF-8 without NUL. */
        if (got == 0 || !fuzz_utf8_valid((const char *)p, got) ||
            !fuzz_no_byte((const char *)p, got, '\0'))
            continue;
        stops[n_stop] = malloc(got + 1);
        if (!stops[n_stop])
            break;
        memcpy(stops[n_stop], p, got);
        stops[n_stop][got] = '\0';
        n_stop++;
    }
    int32_t nv = tok_n_vocab(v);
    int32_t ids[FUZZ_SSE_MAX_TOKENS];
    int n = 0;
    while (in->n >= 2 && n < FUZZ_SSE_MAX_TOKENS)
        ids[n++] = (int32_t)(fuzz_u16(in) % (uint32_t)nv);

    /* What the ids decode to without any stop string. */
    bbuf full = {0};
    tok_decoder d;
    tok_decoder_init(&d, v, flags);
    size_t max = tok_decoder_max_out(v);
    char *tmp = malloc(max + 4);
    for (int i = 0; tmp && i < n; i++) {
        int k = tok_decoder_push(&d, ids[i], tmp, max);
        FUZZ_CHECK(k >= 0);
        bput(&full, tmp, (size_t)k);
    }
    if (tmp) {
        int k = tok_decoder_flush(&d, tmp, 4);
        FUZZ_CHECK(k >= 0);
        bput(&full, tmp, (size_t)k);
    }
    free(tmp);

    seq_text st;
    stream s = {chat, want_lp, chat, {0}, {0}, 0};
    if (seq_text_init(&st, v, (const char *const *)stops, n_stop, (flags & TOK_CONTINUATION) != 0) <
        0)
        goto out;
    if (chat)
        send_chunk(&s, NULL, 0, NULL, 0, NULL);
    int stopped = 0;
    char pieces[FUZZ_SSE_MAX_TOP + 1][256];
    for (int i = 0; i < n && !stopped; i++) {
        int rc = seq_text_push(&st, ids[i]);
        if (rc < 0)
            break;
        stopped = rc == 1;
        char *text = NULL;
        size_t len = 0;
        if (seq_text_take(&st, stopped || i == n - 1, &text, &len) < 0)
            break;
        FUZZ_CHECK(strlen(text) <= len && fuzz_utf8_valid(text, len));
        /* Log-prob strings are raw token pieces: partial UTF-8 included. */
        srv_top_logprob top[FUZZ_SSE_MAX_TOP];
        int nt_i = n_top < i ? n_top : i;
        size_t plen[FUZZ_SSE_MAX_TOP + 1];
        for (int t = 0; t <= nt_i; t++) {
            int k = tok_token_to_piece(v, ids[i - t], TOK_PARSE_SPECIAL, pieces[t], 256);
            plen[t] = k < 0 ? 0 : k > 256 ? 256 : (size_t)k;
        }
        for (int t = 0; t < nt_i; t++)
            top[t] = (srv_top_logprob){pieces[t + 1], plen[t + 1], -(float)t};
        srv_token_logprob lp = {pieces[0], plen[0], -0.5f, 1, nt_i, top, s.raw.n};
        send_chunk(&s, text, len, &lp, 1, stopped ? "stop" : i == n - 1 ? "length" : NULL);
        free(text);
    }
    const char *txt = s.raw.p ? s.raw.p : "";
    for (int i = 0; i < n_stop; i++)
        FUZZ_CHECK(!has_sub(txt, s.raw.n, stops[i], strlen(stops[i])));
    /* The streamed text is the decoded text up to the stop. */
    FUZZ_CHECK(s.raw.n <= full.n && (s.raw.n == 0 || !memcmp(s.raw.p, full.p, s.raw.n)));
    if (!stopped && n > 0)
        FUZZ_CHECK(s.raw.n == full.n);
    if (stopped) {
        int at_stop = 0;
        for (int i = 0; i < n_stop; i++) {
            size_t l = strlen(stops[i]);
            at_stop |= full.n - s.raw.n >= l && !memcmp(full.p + s.raw.n, stops[i], l);
        }
        FUZZ_CHECK(at_stop);
    }
    finish_stream(&s, include_usage, txt, s.raw.n, stopped ? "stop" : "length");
    seq_text_free(&st);
out:
    stream_free(&s);
    free(full.p);
    for (int i = 0; i < n_stop; i++)
        free(stops[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_SSE_MAX_BYTES)
        return 0;
    fuzz_in in = {data, size};
    uint8_t f = fuzz_u8(&in), g = fuzz_u8(&in);
    int chat = f & 1, want_lp = (f >> 1) & 1, include_usage = (f >> 3) & 1;
    int n_top = g & 3;
    if (f & 4)
        run_vocab(&in, fuzz_vocab(f >> 5), f & 16 ? TOK_CONTINUATION : 0, (g >> 2) & 3, n_top,
                  want_lp, chat, include_usage);
    else
        run_raw(&in, chat, want_lp, n_top, include_usage);
    return 0;
}
