/* bench_sse.c - SSE parsing and OpenAI stream chunks (see bench_sse.h). */
#include "clients/bench_sse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"

void bench_sse_init(bench_sse *p, size_t max_bytes, bench_sse_event_fn on_event, void *user) {
    memset(p, 0, sizeof *p);
    p->max_bytes = max_bytes ? max_bytes : BENCH_SSE_MAX_BYTES_DEFAULT;
    p->on_event = on_event;
    p->user = user;
}

void bench_sse_reset(bench_sse *p) {
    p->line_len = 0;
    p->data_len = 0;
    p->after_cr = 0;
    p->has_data = 0;
    p->bom_state = 0;
    p->failed = 0;
}

void bench_sse_free(bench_sse *p) {
    free(p->line);
    free(p->data);
    p->line = p->data = NULL;
    p->line_cap = p->data_cap = p->line_len = p->data_len = 0;
}

/* Appends n bytes to a NUL-terminated buffer that may hold at most max bytes.
 * Capacity doubles from 256 bytes, so a stream of small events allocates once. */
static int buf_append(char **buf, size_t *len, size_t *cap, const char *src, size_t n, size_t max) {
    if (*len > max || n > max - *len)
        return BRISK_ENOSPC;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return BRISK_ENOMEM;
        *buf = b;
        *cap = c;
    }
    if (n)
        memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int fail(bench_sse *p, int code) {
    p->failed = code;
    return code;
}

/* One complete line, without its line end. */
static int process_line(bench_sse *p, const char *s, size_t n) {
    if (n == 0) {
        if (!p->has_data)
            return 0;
        /* Every data line was stored with a '\n'; the last one is dropped. */
        size_t len = p->data_len ? p->data_len - 1 : 0;
        p->data[len] = '\0';
        p->has_data = 0;
        p->data_len = 0;
        int rc = p->on_event ? p->on_event(p->user, p->data, len) : 0;
        return rc ? BENCH_SSE_STOPPED : 0;
    }
    if (s[0] == ':')
        return 0; /* comment, e.g. a keep-alive ": ping" */
    const char *colon = memchr(s, ':', n);
    size_t flen = colon ? (size_t)(colon - s) : n;
    if (flen != 4 || memcmp(s, "data", 4) != 0)
        return 0; /* event, id, retry and unknown fields do not matter here */
    const char *v = colon ? colon + 1 : s + n;
    size_t vlen = (size_t)(s + n - v);
    if (vlen && *v == ' ') {
        v++;
        vlen--;
    }
    int rc = buf_append(&p->data, &p->data_len, &p->data_cap, v, vlen, p->max_bytes);
    if (rc == 0)
        rc = buf_append(&p->data, &p->data_len, &p->data_cap, "\n", 1, p->max_bytes);
    if (rc < 0)
        return fail(p, rc);
    p->has_data = 1;
    return 0;
}

/* Skips a UTF-8 BOM at the very start of the stream, even when it is split
 * across feeds. Bytes that began like a BOM but were not one go to the line. */
static int skip_bom(bench_sse *p, const char *buf, size_t len, size_t *i) {
    static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
    while (p->bom_state >= 0 && *i < len) {
        if ((unsigned char)buf[*i] == bom[p->bom_state]) {
            (*i)++;
            if (++p->bom_state == 3)
                p->bom_state = -1;
            continue;
        }
        int matched = p->bom_state;
        p->bom_state = -1;
        if (matched > 0) {
            int rc = buf_append(&p->line, &p->line_len, &p->line_cap, (const char *)bom,
                                (size_t)matched, p->max_bytes);
            if (rc < 0)
                return fail(p, rc);
        }
    }
    return 0;
}

int bench_sse_feed(bench_sse *p, const char *buf, size_t len) {
    if (p->failed)
        return p->failed;
    size_t i = 0;
    int rc = skip_bom(p, buf, len, &i);
    if (rc < 0)
        return rc;
    if (p->after_cr && i < len) {
        if (buf[i] == '\n')
            i++;
        p->after_cr = 0;
    }
    while (i < len) {
        const char *s = buf + i;
        size_t rem = len - i;
        /* The line ends at the first CR or LF. */
        const char *nl = memchr(s, '\n', rem);
        const char *cr = memchr(s, '\r', nl ? (size_t)(nl - s) : rem);
        const char *end = cr ? cr : nl;
        if (!end) {
            rc = buf_append(&p->line, &p->line_len, &p->line_cap, s, rem, p->max_bytes);
            return rc < 0 ? fail(p, rc) : 0;
        }
        size_t k = (size_t)(end - s);
        if (p->line_len) {
            rc = buf_append(&p->line, &p->line_len, &p->line_cap, s, k, p->max_bytes);
            if (rc < 0)
                return fail(p, rc);
            size_t n = p->line_len;
            p->line_len = 0;
            rc = process_line(p, p->line, n);
        } else {
            if (k > p->max_bytes)
                return fail(p, BRISK_ENOSPC);
            rc = process_line(p, s, k);
        }
        i += k + 1;
        if (*end == '\r') {
            if (i < len) {
                if (buf[i] == '\n')
                    i++;
            } else {
                p->after_cr = 1;
            }
        }
        if (rc)
            return rc;
    }
    return 0;
}

int bench_sse_pending(const bench_sse *p) {
    return p->has_data || p->line_len > 0;
}

/* ---- chunks ---- */

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void set_msg(bench_chunk *out, const char *msg) {
    /* A server's message goes to a terminal and a JSON file: one line,
     * no control characters. */
    size_t j = 0;
    for (size_t i = 0; msg[i] && j + 1 < sizeof out->err; i++) {
        unsigned char c = (unsigned char)msg[i];
        out->err[j++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    out->err[j] = '\0';
}

static void invalid(bench_chunk *out, const char *why) {
    out->kind = BENCH_CHUNK_INVALID;
    out->has_content = 0;
    out->content_bytes = 0;
    out->usage_prompt = out->usage_completion = -1;
    set_msg(out, why);
}

/* A non-empty string field counts as content; null or absent is no content;
 * any other type is malformed. Returns -1 when malformed. */
static int content_field(const cJSON *obj, const char *name, size_t *bytes) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v) || !v->valuestring)
        return -1;
    size_t n = strlen(v->valuestring);
    *bytes += n;
    return n > 0;
}

/* A token count: an integral number in [0, 1e12]. 1 when set, 0 when absent, -1 bad. */
static int count_field(const cJSON *obj, const char *name, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > 1e12 || d != floor(d))
        return -1;
    *out = (int64_t)d;
    return 1;
}

static void parse_error_field(const cJSON *e, bench_chunk *out) {
    out->kind = BENCH_CHUNK_ERROR;
    const char *msg = "error event without a message";
    if (cJSON_IsString(e) && e->valuestring) {
        msg = e->valuestring;
    } else if (cJSON_IsObject(e)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        if (cJSON_IsString(m) && m->valuestring)
            msg = m->valuestring;
    }
    set_msg(out, msg);
}

static void parse_object(const cJSON *j, int chat, bench_chunk *out) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e && !cJSON_IsNull(e)) {
        parse_error_field(e, out);
        return;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (choices && !cJSON_IsNull(choices)) {
        if (!cJSON_IsArray(choices)) {
            invalid(out, "'choices' is not an array");
            return;
        }
        const cJSON *c0 = choices->child;
        if (c0) {
            if (!cJSON_IsObject(c0)) {
                invalid(out, "'choices[0]' is not an object");
                return;
            }
            int has = 0;
            if (chat) {
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(c0, "delta");
                if (d && !cJSON_IsNull(d)) {
                    if (!cJSON_IsObject(d)) {
                        invalid(out, "'choices[0].delta' is not an object");
                        return;
                    }
                    static const char *fields[] = {"content", "reasoning_content", "reasoning"};
                    for (int i = 0; i < 3; i++) {
                        int r = content_field(d, fields[i], &out->content_bytes);
                        if (r < 0) {
                            invalid(out, "a 'choices[0].delta' text field is not a string");
                            return;
                        }
                        has |= r;
                    }
                }
            } else {
                int r = content_field(c0, "text", &out->content_bytes);
                if (r < 0) {
                    invalid(out, "'choices[0].text' is not a string");
                    return;
                }
                has = r;
            }
            out->has_content = has;
        }
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (u && !cJSON_IsNull(u)) {
        if (!cJSON_IsObject(u)) {
            invalid(out, "'usage' is not an object");
            return;
        }
        if (count_field(u, "prompt_tokens", &out->usage_prompt) < 0 ||
            count_field(u, "completion_tokens", &out->usage_completion) < 0) {
            invalid(out, "'usage' token counts are not integers in [0, 1e12]");
            return;
        }
    }
}

void bench_chunk_parse(const char *data, size_t len, int chat, bench_chunk *out) {
    memset(out, 0, sizeof *out);
    out->kind = BENCH_CHUNK_DATA;
    out->usage_prompt = out->usage_completion = -1;
    while (len && is_space(data[0])) {
        data++;
        len--;
    }
    while (len && is_space(data[len - 1]))
        len--;
    if (len == 0)
        return; /* an empty event: nothing to count */
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        out->kind = BENCH_CHUNK_DONE;
        return;
    }
    if (data[0] != '{') {
        invalid(out, "event data is not a JSON object");
        return;
    }
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!j) {
        invalid(out, "event data is not valid JSON");
        return;
    }
    if (!cJSON_IsObject(j))
        invalid(out, "event data is not a JSON object");
    else
        parse_object(j, chat, out);
    cJSON_Delete(j);
}
