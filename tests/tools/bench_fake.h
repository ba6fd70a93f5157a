/* bench_fake.h - a fake OpenAI streaming server for brisk-bench's tests and
 * bench/client_overhead.sh: libuv, one thread, streams tokens as fast as the
 * socket takes them, one SSE event per write.
 *
 * It answers GET /v1/models, GET /stats ({"connections", "requests",
 * "tokens", "cut"}) and streaming POST /v1/completions and
 * /v1/chat/completions with max_tokens events (" tok" each), a finish chunk,
 * a usage chunk when stream_options.include_usage is set, and [DONE].
 * prompt_tokens is the number of space-separated words of the prompt (or of
 * every message). It validates as a real server does: a body that is not a
 * JSON object is a 400, a model not named below a 404, and max_tokens (an
 * integer >= 1), temperature ([0, 2]) or top_p ((0, 1]) of another type or
 * out of range a 400. "cut" counts streams the client cut off (its
 * connection closed while a stream was being sent).
 *
 * The request's "model" picks a behaviour, so one server covers every case:
 *   fake            normal (no "model" field is the same)
 *   fake-batch      up to 64 events per write (several events per read)
 *   fake-split      every write cut into 17-byte pieces 1 ms apart
 *   fake-crlf       CRLF line ends and ": ping" comments
 *   fake-slow       2 ms between events
 *   fake-drip       20 ms between events (a client that aborts mid-stream is
 *                   sure to cut it, however loaded the machine)
 *   fake-nousage    no usage chunk
 *   fake-noalive    Connection: close on every response
 *   fake-eof-body   neither chunked nor Content-Length: the body ends at close
 *   fake-500, fake-429   an OpenAI error response with that status
 *   fake-error-event     an {"error": ...} event after 2 tokens
 *   fake-nocontent       only usage and [DONE]
 *   fake-garbage    an event that is not JSON after 1 token
 *   fake-badhttp    a malformed chunk size after the head
 *   fake-close      the connection closed after 2 tokens
 *   fake-hang       the head, then silence
 *   fake-huge       a 2 MiB line without an end
 *   fake-junk       4 KiB of random bytes instead of a response, then close
 *   fake-bighead    a response head with a 100 KiB header
 *   fake-once       a keep-alive connection closed, without an answer, when a
 *                   second request arrives on it (an idle timeout that struck
 *                   just as the client reused it)
 *   fake-lenient    no validation of max_tokens, temperature, top_p: streams anyway
 *   fake-strict500  a 500 instead of a 400 for an invalid field (a buggy server)
 * Test code only: it trusts its client more than brisk does, but still
 * bounds what it reads. */
#ifndef BENCH_FAKE_H
#define BENCH_FAKE_H

#include <stdint.h>
#include <uv.h>

typedef struct bench_fake bench_fake;

typedef struct bench_fake_stats {
    uint64_t connections, requests, tokens, cut;
} bench_fake_stats;

/* Listens on host:port (0: an ephemeral port) on loop. NULL on failure. */
bench_fake *bench_fake_create(uv_loop_t *loop, const char *host, int port);
int bench_fake_port(const bench_fake *f);
void bench_fake_get_stats(const bench_fake *f, bench_fake_stats *out);
/* Closes the listener and every connection; freed in the close callbacks. */
void bench_fake_free(bench_fake *f);

/* The server on a thread of its own (for C tests). */
typedef struct bench_fake_thread bench_fake_thread;
bench_fake_thread *bench_fake_thread_start(int *port);
/* Stops the server, joins the thread, and returns its final counters. */
void bench_fake_thread_stop(bench_fake_thread *t, bench_fake_stats *stats);

#endif
