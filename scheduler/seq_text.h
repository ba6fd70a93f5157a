/* seq_text.h - a sequence's output text: the streaming detokenizer, stop
 * strings matched across token boundaries, and the hold-back that keeps a
 * possible stop string's first bytes out of the stream until it is decided.
 *
 * Text is valid UTF-8 throughout (tok_decoder emits whole characters; stop
 * strings are UTF-8, so a held-back stop prefix starts on a character). */
#ifndef SEQ_TEXT_H
#define SEQ_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer.h"

typedef struct seq_text {
    tok_decoder dec;
    char *pend; /* decoded, not yet taken */
    size_t len, cap;
    const char *const *stop; /* borrowed */
    size_t *stop_len;
    int n_stop;
    int stopped;    /* a stop string matched: pend ends before it (or after, keep_stop) */
    int stop_which; /* stopped: the index of the stop string that matched (the earliest in
                       the text; among those starting there, the first given); else -1 */
    int keep_stop; /* the matched stop string stays in the text (vLLM's include_stop_str_in_output) */
    int stops_off; /* stop strings are not looked for (before vLLM's min_tokens) */
} seq_text;

/* stop (n_stop non-empty strings) must outlive t. continuation: the output
 * continues a prompt with text, so an SPM first piece keeps its leading space
 * (from BOS alone it is dropped, as SentencePiece decoding does). */
int seq_text_init(seq_text *t, const tok_vocab *v, const char *const *stop, int n_stop,
                  int continuation);
void seq_text_free(seq_text *t);
/* Decodes id. Returns 1 when a stop string is now complete (the text is cut
 * where it begins and nothing more may be pushed), 0, or BRISK_ENOMEM. */
int seq_text_push(seq_text *t, int32_t id);
/* Takes the text that can be sent: all of it when final (or stopped), else
 * up to where a stop string could still begin. *out is malloc'd (NUL-
 * terminated, possibly empty); BRISK_ENOMEM on failure. */
int seq_text_take(seq_text *t, int final, char **out, size_t *len);

#endif
