/* fuzz_chat_template.c - chat template detection and rendering
 * (models/chat_template.c) with fuzzer-chosen formats, roles and contents.
 *
 * Input: byte 0 picks the format (low 3 bits: 0 = detect it from a Jinja
 * text, else the family's canonical format; the high 5 bits then OR flags
 * into it), byte 1 the Mistral style (out-of-range values included), then
 * fields separated by 0x1E: the Jinja text (or a ChatML default system
 * prompt), the BOS text, the EOS text, and one field per message: a role
 * byte then the content (which may hold NUL bytes or invalid UTF-8).
 *
 * Properties: detection gives a known family and a terminated default
 * system prompt; rendering succeeds exactly when the format is a family,
 * there is a message and every role is system/user/assistant with no NUL in
 * any content (else BRISK_EUNSUPPORTED / BRISK_EINVAL with one line); the
 * text has the returned length, starts with BOS when it says so, holds
 * every message's content (whole or strip()ped) and is valid UTF-8
 * whenever every input text was. */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

#define FUZZ_CHAT_MAX_MSGS 64
#define FUZZ_CHAT_SEP 0x1E

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

/* Role byte -> role: mostly the three valid ones, and the kinds of wrong
 * role a caller could pass. NULL is a missing role. */
static const char *role_of(uint8_t b) {
    static const char *const roles[] = {"system",    "user",      "assistant", "user",
                                        "assistant", "developer", "tool",      NULL,
                                        "User",      "system\n",  "",          " user"};
    return roles[b % (sizeof roles / sizeof roles[0])];
}

static int valid_role(const char *r) {
    return r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant"));
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static char *dup_cstr(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (s) {
        if (n)
            memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 64 * 1024)
        return 0;
    fuzz_in in = {data, size};
    uint8_t mode = fuzz_u8(&in), style = fuzz_u8(&in);
    size_t jl, bl, el;
    const uint8_t *jp = fuzz_field(&in, FUZZ_CHAT_SEP, &jl);
    const uint8_t *bp = fuzz_field(&in, FUZZ_CHAT_SEP, &bl);
    const uint8_t *ep = fuzz_field(&in, FUZZ_CHAT_SEP, &el);
    /* Texts the renderer takes as C strings: cut at a NUL, as a caller's
     * strings would be. */
    char *jinja = dup_cstr(jp, jl), *bos = dup_cstr(bp, bl), *eos = dup_cstr(ep, el);
    model_chat_msg msgs[FUZZ_CHAT_MAX_MSGS];
    int n = 0;
    while (in.n > 0 && n < FUZZ_CHAT_MAX_MSGS) {
        size_t len;
        const uint8_t *p = fuzz_field(&in, FUZZ_CHAT_SEP, &len);
        uint8_t rb = len ? p[0] : 0;
        msgs[n].role = role_of(rb);
        msgs[n].content = len > 1 ? (const char *)p + 1 : (rb & 0x80) ? NULL : "";
        msgs[n].content_len = len > 1 ? len - 1 : 0;
        n++;
    }
    if (!jinja || !bos || !eos)
        goto out;

    model_chat_format f;
    int kind = mode & 7;
    if (kind == 0) {
        model_chat_format_detect(jinja, &f);
        FUZZ_CHECK(f.kind == model_chat_detect(jinja));
    } else {
        model_chat_format_default((model_chat_kind)kind, &f);
        f.flags |= (unsigned)(mode >> 3);
        f.mistral = (model_chat_mistral_style)(style % 7);
        if ((f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM) && jl < sizeof f.default_system)
            memcpy(f.default_system, jinja, strlen(jinja) + 1);
    }
    FUZZ_CHECK((int)f.kind >= MODEL_CHAT_NONE && (int)f.kind <= MODEL_CHAT_PHI3);
    FUZZ_CHECK(memchr(f.default_system, '\0', sizeof f.default_system) != NULL);
    model_chat_kind back;
    if (f.kind != MODEL_CHAT_NONE)
        FUZZ_CHECK(model_chat_kind_parse(model_chat_kind_name(f.kind), &back) == 0 &&
                   back == f.kind);
    const char *const *stops = model_chat_stop_strings(f.kind);
    for (int i = 0; stops[i]; i++)
        FUZZ_CHECK(i < 8 && stops[i][0] != '\0');

    int expect_ok = f.kind != MODEL_CHAT_NONE && n > 0;
    int all_utf8 = fuzz_utf8_valid(bos, strlen(bos)) && fuzz_utf8_valid(eos, strlen(eos)) &&
                   fuzz_utf8_valid(f.default_system, strlen(f.default_system));
    for (int i = 0; i < n; i++) {
        const model_chat_msg *m = &msgs[i];
        if (!valid_role(m->role) || !fuzz_no_byte(m->content, m->content_len, '\0'))
            expect_ok = 0;
        if (m->content && !fuzz_utf8_valid(m->content, m->content_len))
            all_utf8 = 0;
    }
    char *out = NULL, err[256] = "";
    size_t len = 0;
    int starts = 0;
    int rc = model_chat_format_render(&f, msgs, n, bos, eos, &out, &len, &starts, err, sizeof err);
    if (rc == BRISK_ENOMEM)
        goto out;
    if (!expect_ok) {
        FUZZ_CHECK(rc == (f.kind == MODEL_CHAT_NONE ? BRISK_EUNSUPPORTED : BRISK_EINVAL));
        FUZZ_CHECK(out == NULL && err[0] && !strchr(err, '\n'));
        goto out;
    }
    FUZZ_CHECK(rc == 0 && out != NULL);
    FUZZ_CHECK(strlen(out) == len);
    size_t bn = strlen(bos);
    FUZZ_CHECK(starts == (bn > 0 && len >= bn && !memcmp(out, bos, bn)));
    if (all_utf8)
        FUZZ_CHECK(fuzz_utf8_valid(out, len));
    for (int i = 0; i < n; i++) {
        const char *c = msgs[i].content;
        size_t s = 0, e = msgs[i].content_len;
        while (s < e && is_ws(c[s]))
            s++;
        while (e > s && is_ws(c[e - 1]))
            e--;
        int found = e == s;
        for (size_t p = 0; !found && p + (e - s) <= len; p++)
            found = !memcmp(out + p, c + s, e - s);
        FUZZ_CHECK(found);
    }
    free(out);
out:
    free(jinja);
    free(bos);
    free(eos);
    return 0;
}
