/* tokenizer.h - tokenizers built from GGUF metadata.
 *
 *   tokenizer.ggml.model = "llama": SentencePiece-style BPE driven by token
 *     scores, with byte fallback (<0xNN> tokens) and the "▁" space marker;
 *     a leading space is added when tokenizer.ggml.add_space_prefix says so
 *     (default true for this model type).
 *   tokenizer.ggml.model = "gpt2": byte-level BPE with ranked merges and the
 *     pre-tokenizer split rules named by tokenizer.ggml.pre (gpt2/default,
 *     llama3 / llama-bpe, qwen2, smollm, ...).
 *
 * Special (control) tokens such as <|im_start|> are matched in the text only
 * when TOK_PARSE_SPECIAL is passed; otherwise they are tokenised as plain text.
 *
 * Ownership: tok_vocab copies everything it needs out of the gguf_file, so the
 * file may be closed after tok_vocab_create_from_gguf() returns. */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "models/gguf.h"

typedef struct tok_vocab tok_vocab;

typedef enum { TOK_TYPE_SPM = 1, TOK_TYPE_BPE = 2 } tok_type;

enum {
    TOK_ADD_BOS = 1 << 0,       /* prepend BOS (if the vocab has one) */
    TOK_PARSE_SPECIAL = 1 << 1, /* recognise control tokens written in the text */
    TOK_CONTINUATION = 1 << 2,  /* decoder: the text continues earlier text, so the
                                   first piece keeps its leading space (SPM) */
};

int tok_vocab_create_from_gguf(const gguf_file *gf, tok_vocab **out, char *err, size_t err_len);
void tok_vocab_free(tok_vocab *v);

tok_type tok_vocab_type(const tok_vocab *v);
int32_t tok_n_vocab(const tok_vocab *v);
int32_t tok_bos(const tok_vocab *v); /* -1 if none */
int32_t tok_eos(const tok_vocab *v); /* -1 if none */
/* 1 if id ends generation: EOS, EOT, <|im_end|>, <|eot_id|>, <|endoftext|> ... */
int tok_is_eog(const tok_vocab *v, int32_t id);
/* 1 if the GGUF asks for BOS to be added (tokenizer.ggml.add_bos_token;
 * default true for SPM, false for BPE). */
int tok_add_bos_default(const tok_vocab *v);
/* 1 if decoding drops the leading space of the first text piece (SPM with
 * a space prefix, as SentencePiece does). */
int tok_vocab_drops_first_space(const tok_vocab *v);
/* 1 if ids decode (without control-token text) to at least one byte: text
 * generated after them continues a text (see TOK_CONTINUATION). */
int tok_ids_have_text(const tok_vocab *v, const int32_t *ids, int n);
/* The longest token text in bytes, at least 4 (one unknown UTF-8 character
 * becomes one token). No token stands for more bytes of input text, so a text
 * of n bytes needs at least n / this tokens, unless the vocabulary drops bytes
 * it has no token for. */
size_t tok_max_token_bytes(const tok_vocab *v);
/* Token id of an exact piece text (e.g. "<|im_end|>"), or -1. */
int32_t tok_find_piece(const tok_vocab *v, const char *text, size_t len);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled, never
 * rejected with a crash). Writes up to cap ids; returns the total number of
 * ids the text needs (which may exceed cap: call again with a bigger buffer),
 * or a negative BRISK_E* code. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, int flags, int32_t *out, int cap);

/* The raw bytes a token stands for (byte-fallback and byte-level decoded,
 * "▁" -> ' '). Control tokens give their text only with TOK_PARSE_SPECIAL
 * in flags (otherwise nothing). Returns the byte count (may exceed cap:
 * nothing is written past cap), or a negative code for an invalid id. */
int tok_token_to_piece(const tok_vocab *v, int32_t id, int flags, char *buf, size_t cap);

/* Streaming detokeniser: pushes ids one at a time and emits only complete
 * UTF-8 characters; bytes of a character split across tokens are held back.
 * For SPM vocabularies the leading space of the very first piece is dropped
 * when the vocab adds a space prefix (as SentencePiece decoding does). */
typedef struct tok_decoder {
    const tok_vocab *v;
    int flags;
    int n_pushed;
    unsigned char pending[8];
    int n_pending;
} tok_decoder;

void tok_decoder_init(tok_decoder *d, const tok_vocab *v, int flags);
/* Appends the complete UTF-8 produced by id to out (up to cap bytes);
 * returns the bytes written or a negative code (BRISK_ENOSPC if cap is too
 * small: a cap of 256 always suffices for one token). */
int tok_decoder_push(tok_decoder *d, int32_t id, char *out, size_t cap);
/* (Added.) The most bytes one tok_decoder_push can write for this vocab,
 * invalid UTF-8 becoming 3-byte U+FFFDs included; flush writes at most 3.
 * It is under 256 for the Llama SPM, GPT-2 and SmolLM2 vocabularies; a
 * caller facing an unusual vocab can size its buffer with this. */
size_t tok_decoder_max_out(const tok_vocab *v);
/* Emits whatever is held back (invalid trailing bytes become U+FFFD). */
int tok_decoder_flush(tok_decoder *d, char *out, size_t cap);

/* Decodes a whole id sequence to a malloc'ed NUL-terminated string (the
 * caller frees it with free(); NULL on bad arguments or out of memory). The
 * bytes are the pieces as they are (not UTF-8-checked, unlike the streaming
 * decoder), with the SPM first-piece space dropped as above; ids outside the
 * vocab decode to nothing. */
char *tok_decode_all(const tok_vocab *v, const int32_t *ids, int n, int flags);

#endif
