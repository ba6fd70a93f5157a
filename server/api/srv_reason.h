/* srv_reason.h - splits a reasoning model's output into its reasoning and its
 * answer, as vLLM's and llama.cpp's reasoning parsers do for Qwen3: an output
 * that opens with "<think>" (after optional whitespace) is reasoning up to
 * "</think>", and the rest, its leading whitespace dropped, is the answer
 * ("content"); an output that does not open with "<think>" is all answer, and
 * one that never closes its block is all reasoning.
 *
 * Streaming-safe: the text may arrive in pieces cut anywhere (inside a tag, a
 * UTF-8 sequence or the leading whitespace); bytes that could still be part
 * of a tag are held back until the next piece or the final call decides. The
 * output is the same whatever the cuts (tests/unit/test_srv_reason.c). */
#ifndef SRV_REASON_H
#define SRV_REASON_H

#include <stddef.h>

#include "common/brisk_buf.h"

typedef struct srv_reason {
    int state; /* see srv_reason.c */
    char hold
        [80]; /* undecided bytes: leading whitespace + part of "<think>", or part of "</think>" */
    size_t n_hold;
} srv_reason;

void srv_reason_init(srv_reason *r);

/* Feeds n bytes of output; appends the decided reasoning bytes to *reasoning
 * and answer bytes to *content (either may get nothing). final: the output
 * ends here, flush what is held. Allocation failures show in the buffers'
 * oom flags. */
void srv_reason_feed(srv_reason *r, const char *s, size_t n, int final, brisk_buf *reasoning,
                     brisk_buf *content);

#endif
