/* hf_folder.h - a Hugging Face model folder (config.json, *.safetensors,
 * tokenizer.json, tokenizer_config.json, generation_config.json) turned into
 * the GGUF image model_load reads, so that the folder and the GGUF the
 * llama.cpp converter would write from it fill one model description by one
 * path.
 *
 * The translation is data: a table of the Hugging Face architectures brisk
 * runs (`architectures` in config.json) onto rows of the architecture table
 * (model_arch.h), a table of config.json keys onto the GGUF metadata keys,
 * and a table of tensor names. On the way it applies what llama.cpp's
 * converter changes: the q and k rows of Llama-style checkpoints are
 * permuted so that RoPE rotates adjacent pairs (the llama row's
 * KERN_ROPE_ADJACENT), Gemma's norm weights w become w + 1, an lm_head tied
 * to the embeddings is dropped, norms and biases are stored as F32. Weights
 * keep their dtype (F32, F16, BF16), so --weights converts them at load
 * exactly as it converts a GGUF's.
 *
 * Every file of the folder is hostile input: a refusal is a negative
 * BRISK_E* code with one line in err naming the file and what is wrong; an
 * architecture, rope scaling, activation or tokenizer brisk does not run is
 * BRISK_EUNSUPPORTED naming it (and, for an architecture, listing those it
 * runs). The JSON stays here (cJSON): the engine never sees it. */
#ifndef HF_FOLDER_H
#define HF_FOLDER_H

#include <stddef.h>
#include <stdint.h>

/* 1 when path is a directory, or a file named config.json (its folder is
 * the model); 0 otherwise (a GGUF or llama2.c file). */
int model_hf_is_folder(const char *path);

/* Builds the GGUF image of the folder at path (a directory or its
 * config.json) into *image (malloc'ed, *len bytes; the caller frees it,
 * after the model or gguf_file read from it). vocab_only: the metadata and
 * tokenizer without the weights (`brisk tokenize`). 0 or a BRISK_E* code
 * with err set. */
int model_hf_build_gguf(const char *path, int vocab_only, uint8_t **image, size_t *len, char *err,
                        size_t err_len);

/* The Hugging Face architectures brisk runs, "LlamaForCausalLM, ...", into
 * buf (always NUL-terminated when len > 0); returns buf. */
const char *model_hf_arch_list(char *buf, size_t len);

#endif
