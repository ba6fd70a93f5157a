/* tok_hfjson.h - a Hugging Face tokenizer.json (and tokenizer_config.json)
 * written as the tokenizer.ggml.* keys of a GGUF, which
 * tok_vocab_create_from_gguf then reads as it reads any model's.
 *
 * Two kinds are taken, both "model": {"type": "BPE"}:
 *   - byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM): a ByteLevel
 *     pre-tokenizer, alone (GPT-2's expression) or after a Split whose
 *     regular expression is one brisk has a hand-written pre-tokenizer for
 *     (tok_pretok.c), recognised by its text; SmolLM's Digits + ByteLevel.
 *     A Split with another expression is refused naming it;
 *   - SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma):
 *     a Metaspace pre-tokenizer or a Replace(" ", "▁") normalizer (with
 *     or without Prepend("▁")); merge ranks become SentencePiece scores.
 * Merges in both forms ("a b" and ["a", "b"]); added tokens at their ids,
 * special ones as control tokens. tokenizer_config.json gives the chat
 * template (a string, or the "default" of a list), bos/eos and
 * add_bos_token (without it, a TemplateProcessing post-processor that
 * starts with a special token means BOS is added). Anything else is refused
 * by name (BRISK_EUNSUPPORTED); malformed JSON is BRISK_EFORMAT. */
#ifndef TOK_HFJSON_H
#define TOK_HFJSON_H

#include <stddef.h>

#include "models/gguf_write.h"

/* Reads dir/tokenizer.json and dir/tokenizer_config.json (optional) and
 * sets the tokenizer keys on w (everything copied). 0 or a BRISK_E* code
 * with one line in err. */
int tok_hfjson_to_gguf(const char *dir, gguf_writer *w, char *err, size_t err_len);

/* The same from texts in memory (tests, fuzzing): tok_json (len bytes) and
 * cfg_json (NULL when absent). */
int tok_hfjson_to_gguf_mem(const char *tok_json, size_t tok_len, const char *cfg_json,
                           size_t cfg_len, gguf_writer *w, char *err, size_t err_len);

#endif
