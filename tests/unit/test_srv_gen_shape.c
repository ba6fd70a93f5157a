/* test_srv_gen_shape.c - the output shapes of the generation lifecycle
 * (server/app/srv_gen_int.h) keep the contract the lifecycle relies on, as
 * it calls through them without checking: every shape answers a whole
 * request and an error; one that streams has every stream writer, one that
 * does not has none; a shape that answers with srv_gen_respond_choices has
 * the body it calls; its response id fits the request's; endpoints and id
 * prefixes are distinct. And the errors a failed or expired request ends
 * with are the ones the API promises (500 "generation failed: ...", 504
 * deadline_exceeded). A new shape is one more row in shapes[]. */
#include <stdio.h>
#include <string.h>

#include "brisk_test.h"
#include "server/app/srv_gen_int.h"

static const srv_gen_shape *const shapes[] = {
    &srv_gen_shape_completions, &srv_gen_shape_chat,      &srv_gen_shape_responses,
    &srv_gen_shape_embeddings,  &srv_gen_shape_anthropic,
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static void check_shape(const srv_gen_shape *s) {
    const char *name = s->endpoint ? s->endpoint : "(no endpoint)";
    CHECK(s->endpoint && s->endpoint[0] == '/', "%s: endpoint", name);
    CHECK(s->id_prefix && s->id_prefix[0], "%s: id prefix", name);
    gen_req g;
    CHECK(s->id_prefix && s->id_chars >= 20 &&
              strlen(s->id_prefix) + (size_t)s->id_chars < sizeof g.id,
          "%s: an id of %d characters after its prefix fits %zu bytes", name, s->id_chars,
          sizeof g.id);
    CHECK(s->respond && s->error, "%s: answers a whole request and an error", name);
    CHECK(s->respond != srv_gen_respond_choices || s->body,
          "%s: srv_gen_respond_choices needs the body writer", name);
    int n_stream = !!s->stream_begin + !!s->stream_chunk + !!s->stream_end;
    CHECK(n_stream == 0 || n_stream == 3, "%s: %d of the 3 stream writers", name, n_stream);
    CHECK(s->chat == 0 || s->chat == 1, "%s: chat is a flag", name);
}

int main(void) {
    for (int i = 0; i < N_SHAPES; i++) {
        check_shape(shapes[i]);
        for (int j = 0; j < i; j++) {
            CHECK(strcmp(shapes[i]->endpoint, shapes[j]->endpoint) != 0, "%s twice",
                  shapes[i]->endpoint);
            CHECK(strcmp(shapes[i]->id_prefix, shapes[j]->id_prefix) != 0, "id prefix %s twice",
                  shapes[i]->id_prefix);
        }
    }
    /* The facts the lifecycle reads from the shapes it has today. */
    CHECK_COND(!srv_gen_shape_completions.chat && srv_gen_shape_chat.chat);
    CHECK_COND(srv_gen_shape_responses.chat && !srv_gen_shape_embeddings.chat);
    CHECK_COND(srv_gen_shape_responses.free_state != NULL);
    CHECK_COND(srv_gen_shape_embeddings.stream_chunk == NULL);

    /* The errors a request ends with. */
    gen_req g;
    memset(&g, 0, sizeof g);
    srv_api_error e;
    const srv_api_error *p = srv_gen_failure(&g, &e);
    CHECK(p == &e && e.status == 500 && !strcmp(e.type, "server_error") && e.param[0] == '\0' &&
              e.code == NULL && !strcmp(e.message, "generation failed: internal error"),
          "%d %s %s", e.status, e.type, e.message);
    snprintf(g.err, sizeof g.err, "out of memory");
    srv_gen_failure(&g, &e);
    CHECK(!strcmp(e.message, "generation failed: out of memory"), "%s", e.message);
    p = srv_gen_expiry(&e);
    CHECK(p == &e && e.status == 504 && !strcmp(e.type, "timeout_error") &&
              !strcmp(e.param, "timeout") && e.code && !strcmp(e.code, "deadline_exceeded") &&
              !strcmp(e.message, "the request's deadline passed before it ran"),
          "%d %s %s", e.status, e.type, e.message);
    return BT_SUMMARY("test_srv_gen_shape");
}
