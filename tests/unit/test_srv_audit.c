/* test_srv_audit.c - the audit log's pieces: SHA-256 against the FIPS 180-4
 * example vectors (one-shot and fed in random pieces), API key files (ids,
 * derived ids, comments, CRLF, every kind of hostile line, errors that never
 * quote a key), the constant-time match, audit line formatting (JSON escaping
 * of quotes, control characters, NUL, invalid UTF-8; arrays for n > 1; nulls),
 * the RFC 3339 time, and the writer: mode 0600, flush, reopen after a rename,
 * a bad path, write errors counted on /dev/full and the buffer bound. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "brisk_test.h"
#include "common/brisk_sha256.h"
#include "common/brisk_utf8.h"
#include "server/ops/srv_audit.h"
#include "server/ops/srv_keys.h"
#include "server/ops/srv_metrics.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void hex_of(const void *msg, size_t len, char out[65]) {
    uint8_t d[32];
    brisk_sha256(msg, len, d);
    brisk_sha256_hex(d, 32, out);
}

/* ---- SHA-256 -------------------------------------------------------------- */

static void test_sha256_vectors(void) {
    /* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf"). */
    static const struct {
        const char *msg;
        const char *hex;
    } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrl"
         "m"
         "nopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char hex[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        hex_of(v[i].msg, strlen(v[i].msg), hex);
        CHECK(strcmp(hex, v[i].hex) == 0, "vector %zu: %s", i, hex);
    }
    /* One million 'a' (FIPS 180-2 appendix B.3), fed in random pieces. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    brisk_sha256_ctx s;
    brisk_sha256_init(&s);
    size_t off = 0;
    while (off < 1000000) {
        size_t n = rnd() % 200;
        if (n > 1000000 - off)
            n = 1000000 - off;
        brisk_sha256_update(&s, a + off, n);
        off += n;
    }
    uint8_t d[32];
    brisk_sha256_final(&s, d);
    brisk_sha256_hex(d, 32, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
          "million a: %s", hex);
    free(a);
    /* Every length around the padding boundaries: pieces give the one-shot digest. */
    uint8_t msg[200];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (uint8_t)rnd();
    int same = 1;
    for (size_t len = 0; len <= sizeof msg; len++) {
        uint8_t d1[32], d2[32];
        brisk_sha256(msg, len, d1);
        brisk_sha256_init(&s);
        size_t cut = len ? rnd() % len : 0;
        brisk_sha256_update(&s, msg, cut);
        brisk_sha256_update(&s, msg + cut, len - cut);
        brisk_sha256_final(&s, d2);
        same &= memcmp(d1, d2, 32) == 0;
    }
    CHECK(same, "split updates differ from the one-shot digest");
    /* A message differing in one bit has another digest. */
    char h1[65], h2[65];
    hex_of("abd", 3, h1);
    hex_of("abc", 3, h2);
    CHECK(strcmp(h1, h2) != 0, "digests of abc and abd are equal");
}

/* ---- key files ---------------------------------------------------------- */

static srv_keys *parse(const char *text, int *rc, char *err, size_t cap) {
    srv_keys *k = srv_keys_create();
    *rc = srv_keys_parse(k, text, strlen(text), err, cap);
    return k;
}

static void test_keys_good(void) {
    char err[256] = "";
    int rc;
    const char *file = "# production keys\r\n"
                       "alice   sk-alice-1\r\n"
                       "\n"
                       "   \t  \n"
                       "\tsk-anon-2  \n"
                       "  # indented comment\n"
                       "team.ml_2-x\tsk-#not-a-comment";
    srv_keys *k = parse(file, &rc, err, sizeof err);
    CHECK(rc == 0, "parse: %s", err);
    CHECK(srv_keys_count(k) == 3, "count %d", srv_keys_count(k));
    CHECK(strcmp(srv_keys_id(k, 0), "alice") == 0, "id0 %s", srv_keys_id(k, 0));
    CHECK(strcmp(srv_keys_id(k, 1), "key-b60d443a") == 0, "derived id %s", srv_keys_id(k, 1));
    CHECK(strcmp(srv_keys_id(k, 2), "team.ml_2-x") == 0, "id2 %s", srv_keys_id(k, 2));
    CHECK(srv_keys_id(k, 3) == NULL && srv_keys_id(k, -1) == NULL, "out of range id");
    CHECK(srv_keys_match(k, "sk-alice-1", 10) == 0, "alice");
    CHECK(srv_keys_match(k, "sk-anon-2", 9) == 1, "anon");
    CHECK(srv_keys_match(k, "sk-#not-a-comment", 17) == 2, "third");
    CHECK(srv_keys_match(k, "sk-alice-", 9) == -1, "a prefix matched");
    CHECK(srv_keys_match(k, "sk-alice-12", 11) == -1, "a longer key matched");
    CHECK(srv_keys_match(k, "sk-alice-2", 10) == -1, "a wrong key matched");
    CHECK(srv_keys_match(k, "", 0) == -1, "empty matched");
    CHECK(srv_keys_match(k, "alice", 5) == -1, "an id matched as a key");
    char id[13];
    srv_keys_derive_id("sk-test-123", 11, id);
    CHECK(strcmp(id, "key-e0dbaa0c") == 0, "derived %s", id);
    srv_keys_free(k);
    /* An empty set matches nothing. */
    k = srv_keys_create();
    CHECK(srv_keys_match(k, "x", 1) == -1 && srv_keys_count(k) == 0, "empty set");
    srv_keys_free(k);
}

static void test_keys_hostile(void) {
    static const struct {
        const char *text;
        size_t len; /* 0: strlen */
        const char *want;
    } bad[] = {
        {"", 0, "no key"},
        {"# only a comment\n\n", 0, "no key"},
        {"a b c\n", 0, "line 1"},
        {"ok1 key-one\nid key two\n", 0, "line 2"},
        {"bad/id sk-1\n", 0, "line 1"},
        {"b\xc3\xa9 sk-1\n", 0, "line 1"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa sk-1\n", 0, "line 1"},
        {"id sk-\x01-ctl\n", 0, "line 1"},
        {"id sk-\x7f\n", 0, "line 1"},
        {"sk-\xff\xfe\n", 0, "line 1"},
        {"x sk-1\ny sk-1\n", 0, "line 2"},
        {"x sk-1\nx sk-2\n", 0, "line 2"},
        {"sk-1\nsk-1\n", 0, "line 2"},
        {"id sk\0nul\n", 9, "line 1"},
        {"i\0d sk-nul\n", 10, "line 1"},
        {"\n\n\nk\rk\n", 0, "line 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        srv_keys *k = srv_keys_create();
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
        int rc = srv_keys_parse(k, bad[i].text, len, err, sizeof err);
        CHECK(rc < 0, "case %zu accepted", i);
        CHECK(strstr(err, bad[i].want) != NULL && bt_one_line(err), "case %zu: %s", i, err);
        CHECK(!strstr(err, "sk-"), "case %zu: the error quotes a key: %s", i, err);
        srv_keys_free(k);
    }
    /* A 4097-byte key and 1001 keys are refused; 4096 and 1000 are not. */
    char *big = malloc(SRV_KEYS_MAX_KEY_BYTES + 3);
    memset(big, 'k', SRV_KEYS_MAX_KEY_BYTES + 1);
    char err[256];
    srv_keys *k = srv_keys_create();
    CHECK(srv_keys_add(k, NULL, big, SRV_KEYS_MAX_KEY_BYTES + 1, err, sizeof err) < 0, "long key");
    CHECK(srv_keys_add(k, NULL, big, SRV_KEYS_MAX_KEY_BYTES, err, sizeof err) == 0, "%s", err);
    CHECK(srv_keys_match(k, big, SRV_KEYS_MAX_KEY_BYTES) == 0, "long key match");
    free(big);
    srv_keys_free(k);
    k = srv_keys_create();
    int ok = 1;
    for (int i = 0; i < SRV_KEYS_MAX && ok; i++) {
        char key[32];
        int n = snprintf(key, sizeof key, "sk-%d", i);
        ok = srv_keys_add(k, NULL, key, (size_t)n, err, sizeof err) == 0;
    }
    CHECK(ok && srv_keys_count(k) == SRV_KEYS_MAX, "%d keys: %s", srv_keys_count(k), err);
    CHECK(srv_keys_add(k, NULL, "one-more", 8, err, sizeof err) < 0, "over the key limit");
    CHECK(srv_keys_match(k, "sk-999", 6) == 999 && srv_keys_match(k, "sk-0", 4) == 0, "match");
    srv_keys_free(k);
    /* A missing file is a one-line error. */
    k = srv_keys_create();
    CHECK(srv_keys_load_file(k, "/nonexistent/keys", err, sizeof err) < 0 && bt_one_line(err),
          "missing file: %s", err);
    srv_keys_free(k);
}

/* ---- audit lines ----------------------------------------------------------- */

static cJSON *parse_line(const char *line, size_t len) {
    CHECK(len > 0 && line[len - 1] == '\n', "line does not end in a newline");
    CHECK(memchr(line, '\n', len - 1) == NULL, "a newline inside the line");
    CHECK(brisk_utf8_valid(line, len), "the line is not valid UTF-8");
    for (size_t i = 0; i + 1 < len; i++)
        CHECK((unsigned char)line[i] >= 0x20 && line[i] != 0x7f, "raw control byte at %zu", i);
    cJSON *o = cJSON_ParseWithLength(line, len);
    CHECK(o != NULL, "not JSON: %s", line);
    return o;
}

static const char *jstr(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jnull(const cJSON *o, const char *name) {
    return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, name));
}

static void test_format(void) {
    /* Hostile prompt: quotes, backslash, every control character, DEL, a NUL,
     * then invalid UTF-8 (a lone continuation byte, a cut sequence, an
     * overlong encoding, a surrogate) between valid multi-byte characters. */
    char prompt[128];
    size_t pl = 0;
    const char *head = "say \"hi\" \\ ";
    memcpy(prompt, head, strlen(head));
    pl = strlen(head);
    for (int c = 1; c < 0x20; c++)
        prompt[pl++] = (char)c;
    prompt[pl++] = 0x7f;
    prompt[pl++] = '\0';
    const char *tail = "\xc3\xa9|\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xf0\x9f\x98\x80";
    memcpy(prompt + pl, tail, strlen(tail));
    pl += strlen(tail);
    const char *want_tail = "\xc3\xa9|\xef\xbf\xbd|\xef\xbf\xbd|";
    srv_audit_prompt pr[2] = {{prompt, pl, NULL, 0}, {NULL, 0, (const int32_t[]){5, 0, 511}, 3}};
    srv_audit_text outs[2] = {{"one\n", 4}, {"two\xff", 4}};
    srv_audit_rec r;
    memset(&r, 0, sizeof r);
    r.wall_s = 1700000000.5;
    r.request_id = "req-\"7\"";
    r.api_key_id = "alice";
    r.endpoint = "/v1/completions";
    r.model = "stories";
    r.status = 200;
    r.finish = "stop";
    r.prompt_tokens = 12;
    r.completion_tokens = 0;
    r.duration_ms = 12.25;
    r.remote_addr = "::1";
    r.remote_port = 4242;
    r.content = 1;
    r.prompts = pr;
    r.n_prompts = 2;
    r.completions = outs;
    r.n_completions = 2;
    size_t len = 0;
    char *line = srv_audit_format(&r, &len);
    CHECK(line && len == strlen(line), "format");
    cJSON *o = parse_line(line, len);
    CHECK(o && strcmp(jstr(o, "time"), "2023-11-14T22:13:20.500Z") == 0, "time %s",
          jstr(o, "time"));
    CHECK(o && strcmp(jstr(o, "request_id"), "req-\"7\"") == 0, "request_id");
    CHECK(o && strcmp(jstr(o, "api_key_id"), "alice") == 0, "api_key_id");
    CHECK(o && strcmp(jstr(o, "remote_addr"), "::1") == 0, "remote_addr");
    CHECK(o && cJSON_GetObjectItem(o, "remote_port")->valueint == 4242, "port");
    CHECK(o && cJSON_GetObjectItem(o, "completion_tokens")->valueint == 0, "0 tokens is not null");
    CHECK(o && cJSON_GetObjectItem(o, "duration_ms")->valuedouble == 12.25, "duration");
    const cJSON *pa = o ? cJSON_GetObjectItem(o, "prompt") : NULL;
    CHECK(cJSON_IsArray(pa) && cJSON_GetArraySize(pa) == 2, "two prompts: an array");
    const cJSON *p0 = cJSON_GetArrayItem(pa, 0);
    /* cJSON stops a string at \u0000, so compare up to it, then check the raw line. */
    CHECK(cJSON_IsString(p0) && strncmp(p0->valuestring, prompt, strlen(head) + 31) == 0 &&
              p0->valuestring[strlen(head) + 31] == 0x7f,
          "prompt text");
    CHECK(strstr(line, "\\u0000") && strstr(line, "\\u007f") && strstr(line, "\\u001f") &&
              strstr(line, "\\n") && strstr(line, "\\t"),
          "control escapes: %s", line);
    CHECK(strstr(line, want_tail) != NULL, "invalid UTF-8 replaced: %s", line);
    CHECK(strstr(line, "\xf0\x9f\x98\x80") != NULL, "a valid 4-byte character kept");
    const cJSON *p1 = cJSON_GetArrayItem(pa, 1);
    CHECK(cJSON_IsArray(p1) && cJSON_GetArraySize(p1) == 3 &&
              cJSON_GetArrayItem(p1, 2)->valueint == 511,
          "token prompt");
    const cJSON *ca = o ? cJSON_GetObjectItem(o, "completion") : NULL;
    CHECK(cJSON_IsArray(ca) && cJSON_GetArraySize(ca) == 2 &&
              strcmp(cJSON_GetArrayItem(ca, 0)->valuestring, "one\n") == 0 &&
              strcmp(cJSON_GetArrayItem(ca, 1)->valuestring, "two\xef\xbf\xbd") == 0,
          "completions");
    cJSON_Delete(o);
    free(line);

    /* Without content: no prompt/completion keys even when given; nulls. */
    r.content = 0;
    r.api_key_id = NULL;
    r.model = NULL;
    r.finish = NULL;
    r.prompt_tokens = -1;
    r.completion_tokens = -1;
    r.remote_addr = "";
    r.remote_port = 0;
    r.status = 401;
    line = srv_audit_format(&r, &len);
    o = parse_line(line, len);
    CHECK(o && jnull(o, "api_key_id") && jnull(o, "model") && jnull(o, "finish") &&
              jnull(o, "prompt_tokens") && jnull(o, "completion_tokens") &&
              jnull(o, "remote_addr") && jnull(o, "remote_port"),
          "nulls: %s", line);
    CHECK(o && !cJSON_GetObjectItem(o, "prompt") && !cJSON_GetObjectItem(o, "completion") &&
              !strstr(line, "say"),
          "content without --audit-log-content: %s", line);
    CHECK(o && cJSON_GetObjectItem(o, "status")->valueint == 401, "status");
    cJSON_Delete(o);
    free(line);

    /* Chat: messages; one choice: a string. */
    srv_audit_msg msgs[2] = {{"system", "be \"brief\"", 10}, {"user", "\x01hi\xc3", 4}};
    memset(&r, 0, sizeof r);
    r.status = 200;
    r.content = 1;
    r.msgs = msgs;
    r.n_msgs = 2;
    r.completions = outs;
    r.n_completions = 1;
    line = srv_audit_format(&r, &len);
    o = parse_line(line, len);
    const cJSON *ma = o ? cJSON_GetObjectItem(o, "messages") : NULL;
    CHECK(cJSON_IsArray(ma) && cJSON_GetArraySize(ma) == 2, "messages");
    const cJSON *m1 = cJSON_GetArrayItem(ma, 1);
    CHECK(m1 && strcmp(jstr(m1, "role"), "user") == 0 &&
              strcmp(jstr(m1, "content"), "\x01hi\xef\xbf\xbd") == 0,
          "message 1");
    CHECK(o && cJSON_IsString(cJSON_GetObjectItem(o, "completion")), "one completion: a string");
    CHECK(o && !cJSON_GetObjectItem(o, "prompt"), "chat has no prompt key");
    cJSON_Delete(o);
    free(line);

    char t[40];
    srv_audit_format_time(0, t, sizeof t);
    CHECK(strcmp(t, "1970-01-01T00:00:00.000Z") == 0, "%s", t);
    srv_audit_format_time(951782400.999, t, sizeof t); /* 2000-02-29 */
    CHECK(strcmp(t, "2000-02-29T00:00:00.999Z") == 0, "%s", t);
    srv_audit_format_time(-5, t, sizeof t);
    CHECK(strcmp(t, "1970-01-01T00:00:00.000Z") == 0, "negative: %s", t);
}

/* ---- the writer ------------------------------------------------------------ */

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = calloc(1, 1 << 20);
    *len = fread(b, 1, (1 << 20) - 1, f);
    fclose(f);
    return b;
}

static void close_and_run(uv_loop_t *loop, srv_audit *a) {
    srv_audit_close(a);
    uv_run(loop, UV_RUN_DEFAULT);
}

static void test_writer(void) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    char dir[] = "/tmp/brisk-audit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], moved[256];
    snprintf(path, sizeof path, "%s/audit.log", dir);
    snprintf(moved, sizeof moved, "%s/audit.log.1", dir);
    mode_t old = umask(0);
    char err[512];
    srv_audit *a = srv_audit_open(&loop, path, 1000, err, sizeof err);
    umask(old);
    CHECK(a != NULL, "open: %s", err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode %o", st.st_mode & 0777);
    srv_audit_write(a, "{\"n\":1}\n", 8);
    size_t len = 0;
    char *got = slurp(path, &len);
    CHECK(got && len == 0, "written before a flush (%zu bytes)", len);
    free(got);
    srv_audit_flush(a);
    got = slurp(path, &len);
    CHECK(got && len == 8 && memcmp(got, "{\"n\":1}\n", 8) == 0, "after flush: %zu", len);
    free(got);
    /* logrotate: rename, then SIGHUP's reopen creates a new file. */
    CHECK(rename(path, moved) == 0, "rename");
    srv_audit_write(a, "{\"n\":2}\n", 8);
    CHECK(srv_audit_reopen(a) == 0, "reopen");
    srv_audit_write(a, "{\"n\":3}\n", 8);
    close_and_run(&loop, a);
    got = slurp(moved, &len);
    CHECK(got && len == 16 && memcmp(got + 8, "{\"n\":2}\n", 8) == 0, "old file: %zu", len);
    free(got);
    got = slurp(path, &len);
    CHECK(got && len == 8 && memcmp(got, "{\"n\":3}\n", 8) == 0, "new file: %zu", len);
    free(got);
    unlink(path);
    unlink(moved);

    /* The timer flushes by itself (every 5 ms here). */
    a = srv_audit_open(&loop, path, 5, err, sizeof err);
    CHECK(a != NULL, "open: %s", err);
    srv_audit_write(a, "{\"n\":4}\n", 8);
    for (int i = 0; i < 200; i++) {
        got = slurp(path, &len);
        int done = got && len == 8;
        free(got);
        if (done)
            break;
        uv_run(&loop, UV_RUN_ONCE);
    }
    got = slurp(path, &len);
    CHECK(got && len == 8 && memcmp(got, "{\"n\":4}\n", 8) == 0, "timer flush: %zu", len);
    free(got);
    srv_audit_stats ts;
    srv_audit_get_stats(a, &ts);
    CHECK(ts.lines == 1 && ts.errors == 0, "lines %lld", ts.lines);
    close_and_run(&loop, a);
    unlink(path);

    /* A path that cannot be opened: NULL and one line. */
    a = srv_audit_open(&loop, "/nonexistent-dir/audit.log", 1000, err, sizeof err);
    CHECK(a == NULL && bt_one_line(err) && strstr(err, "/nonexistent-dir/audit.log"), "%s", err);

    /* Write errors (a full disk): counted, data kept, then lines dropped at the bound. */
    a = srv_audit_open(&loop, "/dev/full", 1000, err, sizeof err);
    CHECK(a != NULL, "open /dev/full: %s", err);
    if (a) {
        char line[1024];
        memset(line, 'x', sizeof line - 1);
        line[sizeof line - 1] = '\n';
        srv_audit_write(a, line, sizeof line);
        srv_audit_flush(a);
        srv_audit_stats s;
        srv_audit_get_stats(a, &s);
        CHECK(s.errors == 1 && s.lines == 0 && s.dropped == 0, "errors %lld", s.errors);
        for (int i = 0; i < SRV_AUDIT_MAX_BUFFER / 1024 + 10; i++)
            srv_audit_write(a, line, sizeof line);
        srv_audit_get_stats(a, &s);
        CHECK(s.errors > 1 && s.dropped >= 10, "errors %lld dropped %lld", s.errors, s.dropped);
        close_and_run(&loop, a);
    }
    rmdir(dir);
    CHECK(uv_loop_close(&loop) == 0, "handles left open");
}

static void test_metrics(void) {
    srv_metrics_config c = srv_metrics_config_default();
    c.model_name = "m";
    srv_metrics *m = srv_metrics_create(&c, 0.0);
    srv_metrics_gauges g;
    memset(&g, 0, sizeof g);
    char *s = srv_metrics_render(m, &g, 1.0, NULL);
    CHECK(s && !strstr(s, "brisk_audit_log"), "audit families without --audit-log");
    free(s);
    g.audit_log = 1;
    g.audit_lines = 7;
    g.audit_errors = 3;
    g.audit_dropped = 2;
    s = srv_metrics_render(m, &g, 1.0, NULL);
    CHECK(s && strstr(s, "brisk_audit_log_lines_total{model_name=\"m\"} 7.0") &&
              strstr(s, "brisk_audit_log_errors_total{model_name=\"m\"} 3.0") &&
              strstr(s, "brisk_audit_log_dropped_total{model_name=\"m\"} 2.0"),
          "audit families");
    free(s);
    srv_metrics_free(m);
}

int main(void) {
    test_sha256_vectors();
    test_keys_good();
    test_keys_hostile();
    test_format();
    test_writer();
    test_metrics();
    return BT_SUMMARY("test_srv_audit");
}
