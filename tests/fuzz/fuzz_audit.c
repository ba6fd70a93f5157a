/* fuzz_audit.c - the audit log's hostile inputs: API key files
 * (srv_keys_parse, server/ops/srv_keys.c) and audit lines built from request and
 * model text (srv_audit_format, server/ops/srv_audit.c).
 *
 * Input: byte 0 the mode. Even: the rest is a key file. Odd: fields separated
 * by 0x1E - a prompt, a chat message's content, then up to 4 completions;
 * bit 1 of byte 0 picks chat (messages) or completions (prompt), bit 2 a
 * token-id prompt alongside.
 *
 * Key files: a refusal is one non-empty line; an accepted file has keys,
 * every id is 1 to 64 of [A-Za-z0-9._-] and unique, and matching the whole
 * file as a key gives -1 or a valid index. Audit lines: one line ending in
 * "\n" with no raw control byte, valid UTF-8 (an independent checker), that
 * cJSON parses; each text field reads back as brisk's sanitising of the input
 * (checked when the input holds no NUL, where cJSON's C strings stop). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/brisk_utf8.h"
#include "server/api/srv_api.h"
#include "server/ops/srv_audit.h"
#include "server/ops/srv_keys.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static int id_ok(const char *id) {
    size_t n = strlen(id);
    if (n == 0 || n > SRV_KEYS_MAX_ID_BYTES)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static void fuzz_keys(const char *text, size_t len) {
    srv_keys *k = srv_keys_create();
    if (!k)
        return;
    char err[256] = "";
    int rc = srv_keys_parse(k, text, len, err, sizeof err);
    if (rc < 0) {
        FUZZ_CHECK(err[0] && !strchr(err, '\n') && !strchr(err, '\r'));
    } else {
        int n = srv_keys_count(k);
        FUZZ_CHECK(n > 0);
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(id_ok(srv_keys_id(k, i)));
            for (int j = 0; j < i; j++)
                FUZZ_CHECK(strcmp(srv_keys_id(k, i), srv_keys_id(k, j)) != 0);
        }
        int m = srv_keys_match(k, text, len);
        FUZZ_CHECK(m >= -1 && m < n);
    }
    srv_keys_free(k);
}

/* The string v must be brisk's sanitising of s[0..n) (when s has no NUL). */
static void check_text(const cJSON *v, const char *s, size_t n) {
    FUZZ_CHECK(cJSON_IsString(v));
    if (!fuzz_no_byte(s, n, '\0'))
        return;
    size_t sl;
    char *want = brisk_utf8_sanitize_dup(s, n, &sl);
    if (!want)
        return;
    FUZZ_CHECK(strlen(v->valuestring) == sl && memcmp(v->valuestring, want, sl) == 0);
    free(want);
}

static void fuzz_line(uint8_t mode, fuzz_in *in) {
    size_t pl, ml;
    const char *prompt = (const char *)fuzz_field(in, 0x1e, &pl);
    const char *msg = (const char *)fuzz_field(in, 0x1e, &ml);
    srv_audit_text outs[4];
    int n_outs = 0;
    while (in->n && n_outs < 4) {
        outs[n_outs].text = (const char *)fuzz_field(in, 0x1e, &outs[n_outs].len);
        n_outs++;
    }
    static const int32_t ids[3] = {0, 7, 2147483647};
    srv_audit_prompt prompts[2] = {{prompt, pl, NULL, 0}, {NULL, 0, ids, 3}};
    srv_audit_msg msgs[2] = {{"system", prompt, pl}, {"user", msg, ml}};
    srv_audit_rec r;
    memset(&r, 0, sizeof r);
    r.wall_s = (double)mode * 1e7;
    r.request_id = "req-1";
    r.endpoint = "/v1/x";
    r.status = 200;
    r.prompt_tokens = -1;
    r.completion_tokens = mode;
    r.content = 1;
    int chat = (mode >> 1) & 1;
    if (chat) {
        r.msgs = msgs;
        r.n_msgs = 2;
    } else {
        r.prompts = prompts;
        r.n_prompts = (mode >> 2) & 1 ? 2 : 1;
    }
    r.completions = outs;
    r.n_completions = n_outs;
    size_t len = 0;
    char *line = srv_audit_format(&r, &len);
    if (!line)
        return;
    FUZZ_CHECK(len > 0 && line[len - 1] == '\n' && strlen(line) == len);
    for (size_t i = 0; i + 1 < len; i++)
        FUZZ_CHECK((unsigned char)line[i] >= 0x20 && line[i] != 0x7f);
    FUZZ_CHECK(fuzz_utf8_valid(line, len));
    cJSON *o = cJSON_ParseWithLength(line, len);
    FUZZ_CHECK(o != NULL);
    if (chat) {
        const cJSON *ma = cJSON_GetObjectItemCaseSensitive(o, "messages");
        FUZZ_CHECK(cJSON_GetArraySize(ma) == 2);
        check_text(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ma, 0), "content"), prompt,
                   pl);
        check_text(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ma, 1), "content"), msg, ml);
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        check_text(r.n_prompts == 2 ? cJSON_GetArrayItem(p, 0) : p, prompt, pl);
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "completion");
    if (n_outs == 0)
        FUZZ_CHECK(cJSON_IsNull(c));
    else if (n_outs == 1)
        check_text(c, outs[0].text, outs[0].len);
    else
        for (int i = 0; i < n_outs; i++)
            check_text(cJSON_GetArrayItem(c, i), outs[i].text, outs[i].len);
    cJSON_Delete(o);
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    uint8_t mode = fuzz_u8(&in);
    if (mode & 1)
        fuzz_line(mode, &in);
    else
        fuzz_keys((const char *)in.p, in.n);
    return 0;
}
