/* fuzz_vocab.h - the vocabularies the tokenizer and SSE fuzz targets run
 * over, built once at init.
 *
 * Synthetic ones are generated in memory (gguf_writer + the real loader), so
 * a target is self-contained and behaves the same on every machine: a
 * SentencePiece-style "llama" vocab (<unk> <s> </s>, the 256 <0xNN> byte
 * tokens, pieces with scores, control and user-defined tokens) and a GPT-2
 * byte-level "gpt2" vocab (256 byte characters, ranked merges, control and
 * user-defined tokens) under each pre-tokenizer brisk implements. Pieces and
 * merges are learnt by a few hundred steps of BPE over a fixed text mixing
 * English, code, digits and non-ASCII scripts.
 *
 * The real vocabularies of llama.cpp's tests (ggml-vocab-llama-spm.gguf,
 * ggml-vocab-gpt-2.gguf in $BRISK_SHARED_DIR/vocab or ../shared/vocab) are
 * used too when they are there; where they are not, their slots fall back
 * to the synthetic vocab of the same type. */
#ifndef FUZZ_VOCAB_H
#define FUZZ_VOCAB_H

#include "models/tokenizer.h"

enum {
    FUZZ_VOCAB_SPM = 0,
    FUZZ_VOCAB_BPE_GPT2,
    FUZZ_VOCAB_BPE_LLAMA3,
    FUZZ_VOCAB_BPE_QWEN2,
    FUZZ_VOCAB_BPE_SMOLLM,
    FUZZ_VOCAB_REAL_SPM,  /* ggml-vocab-llama-spm.gguf, else FUZZ_VOCAB_SPM */
    FUZZ_VOCAB_REAL_GPT2, /* ggml-vocab-gpt-2.gguf, else FUZZ_VOCAB_BPE_GPT2 */
    FUZZ_VOCAB_COUNT
};

/* Builds every vocabulary (once; later calls return at once). Returns 0, or
 * a negative code when a synthetic one cannot be built (a bug: the target
 * then aborts at init). The vocabularies live until the process ends. */
int fuzz_vocabs_init(void);

/* Vocabulary `which` modulo FUZZ_VOCAB_COUNT; never NULL after init. */
const tok_vocab *fuzz_vocab(unsigned which);

/* Whether slot `which` holds a real vocabulary file. */
int fuzz_vocab_is_real(unsigned which);

#endif
