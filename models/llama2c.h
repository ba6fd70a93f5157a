/* llama2c.h - converts a llama2.c checkpoint and tokenizer to a GGUF file.
 *
 * Input: karpathy/llama2.c's "legacy" checkpoint (7 int32 header fields then
 * fp32 weights; a negative vocab_size means an unshared classifier) and its
 * tokenizer.bin (int32 max_token_length, then per token f32 score, int32
 * length, bytes). Both files are hostile: every header value and length is
 * checked, and the checkpoint's size must match its header exactly.
 *
 * Output: a GGUF v3 "llama" model, all tensors F32, with the SentencePiece
 * vocabulary (spaces as U+2581, byte tokens <0xNN>, BOS 1, EOS 2, UNK 0)
 * that brisk and other GGUF readers load as they would a converted Llama.
 * llama2.c's [out][in] row-major matrices are GGUF's layout as they are, and
 * its adjacent-pair RoPE is what GGUF "llama" means, so nothing is permuted.
 *
 * Ownership: borrows the paths; the output is written to out_path.tmp and
 * renamed, so out_path is either the complete new file or untouched. */
#ifndef LLAMA2C_H
#define LLAMA2C_H

#include <stddef.h>

/* Returns 0, or a negative BRISK_E* code with a one-line reason in err:
 * BRISK_EIO (cannot read or write), BRISK_EFORMAT (malformed input),
 * BRISK_EUNSUPPORTED (a llama2.c export version other than legacy),
 * BRISK_ENOMEM. */
int model_convert_llama2c(const char *model_path, const char *tokenizer_path, const char *out_path,
                          char *err, size_t err_len);

#endif
