/* bench_sse.h - the response side of a streaming completion, as pure code:
 * a Server-Sent Events parser (bytes in any split -> one callback per event)
 * and the interpretation of one OpenAI stream chunk (content? usage? error?).
 *
 * Nothing here does I/O or looks at a clock, so both are unit-tested on every
 * split point (tests/unit/test_bench_sse.c). Every byte fed in comes from the
 * server and is treated as hostile: lines and events are bounded, garbage
 * gives an error code, nothing asserts or aborts on input. */
#ifndef BENCH_SSE_H
#define BENCH_SSE_H

#include <stddef.h>
#include <stdint.h>

/* Default bound on one line and on one event's data: 1 MiB. An OpenAI chunk
 * is a few hundred bytes (a few KiB with log-probs); a megabyte without a
 * line end is a broken or hostile server, not a token. */
#define BENCH_SSE_MAX_BYTES_DEFAULT ((size_t)1 << 20)

/* Called once per dispatched event with its data (the "data:" lines joined by
 * "\n", the final line end removed), NUL-terminated for convenience. The
 * buffer is borrowed until the callback returns. Return 0 to go on, non-zero
 * to stop: bench_sse_feed() then returns BENCH_SSE_STOPPED. */
typedef int (*bench_sse_event_fn)(void *user, const char *data, size_t len);

enum {
    BENCH_SSE_STOPPED = 1, /* the callback asked to stop; parser state is undefined after */
};

/* The parser. Lines end in LF, CRLF or a lone CR (the SSE grammar); a line
 * starting with ':' is a comment; fields other than "data" (event, id, retry,
 * unknown ones) are ignored; one space after the colon is dropped; an empty
 * line dispatches the event if it had at least one data line; a UTF-8 BOM at
 * the start of the stream is skipped. Owns its two buffers. */
typedef struct bench_sse {
    char *line; /* bytes of a line cut by the end of a feed */
    size_t line_len, line_cap;
    char *data; /* data of the event being built, each line followed by '\n' */
    size_t data_len, data_cap;
    size_t max_bytes; /* bound on line_len and data_len */
    int after_cr;     /* the last byte seen was CR: a leading LF is its pair */
    int has_data;     /* the current event has had a data line */
    int bom_state;    /* 0..3: bytes of a leading BOM matched; -1 once past the start */
    int failed;       /* a bound was hit: every later feed fails */
    bench_sse_event_fn on_event;
    void *user;
} bench_sse;

/* max_bytes 0 picks BENCH_SSE_MAX_BYTES_DEFAULT. Allocates nothing yet. */
void bench_sse_init(bench_sse *p, size_t max_bytes, bench_sse_event_fn on_event, void *user);

/* Ready for a new stream (a new response); keeps the buffers. */
void bench_sse_reset(bench_sse *p);

void bench_sse_free(bench_sse *p);

/* Parses len bytes. Returns 0, BENCH_SSE_STOPPED, BRISK_ENOSPC (a line or an
 * event over max_bytes) or BRISK_ENOMEM; after an error every later call
 * returns it again. */
int bench_sse_feed(bench_sse *p, const char *buf, size_t len);

/* End of the stream: 1 if it ended inside an event (data without the blank
 * line, or a partial line), which the SSE rules discard; else 0. */
int bench_sse_pending(const bench_sse *p);

/* ---- one OpenAI streaming chunk ---- */

typedef enum {
    BENCH_CHUNK_DATA = 0, /* a JSON object: see has_content / usage */
    BENCH_CHUNK_DONE,     /* the "[DONE]" marker */
    BENCH_CHUNK_ERROR,    /* {"error": ...}: the server reports a failure in-stream */
    BENCH_CHUNK_INVALID,  /* not JSON, not an object, or fields of the wrong type */
} bench_chunk_kind;

typedef struct bench_chunk {
    bench_chunk_kind kind;
    /* choices[0].text (completions) or choices[0].delta.content (chat; also
     * reasoning_content / reasoning) is a non-empty string. Chunks that carry
     * only a role, a finish_reason or an empty text are not tokens, as in
     * SGLang's bench_serving and earlier vLLM benchmark_serving. (Recent
     * vLLM counts any chunk with choices, which makes a chat server's
     * immediate role chunk the "first token" and TTFT look better than it is.) */
    int has_content;
    size_t content_bytes;
    /* usage.prompt_tokens / usage.completion_tokens; -1 when absent. */
    int64_t usage_prompt, usage_completion;
    char err[160]; /* ERROR: the server's message; INVALID: what was wrong */
} bench_chunk;

/* Interprets one event's data. chat selects delta.content over text. Never
 * fails: garbage gives BENCH_CHUNK_INVALID with a reason in err. */
void bench_chunk_parse(const char *data, size_t len, int chat, bench_chunk *out);

#endif
