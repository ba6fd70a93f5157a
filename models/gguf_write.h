/* gguf_write.h - builds a GGUF v3 file in memory and writes it out.
 *
 * Used by `brisk convert-llama2c` and by tests that need small valid files.
 * The writer copies every key, string and array it is given; tensor data is
 * borrowed (the pointer must stay valid until gguf_writer_write returns). */
#ifndef GGUF_WRITE_H
#define GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "models/gguf.h"

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_create(void);
void gguf_writer_free(gguf_writer *w);

/* Each setter returns 0 or BRISK_ENOMEM. Keys must be unique and non-empty
 * (BRISK_EINVAL). "general.alignment" set with gguf_writer_set_u32 must be a
 * power of two and becomes the data alignment (default 32). */
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, int v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Numeric array of n elements of elem_type (packed, native little-endian). */
int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data,
                        uint64_t n);
/* String array: n strings with explicit lengths (may contain any bytes). */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t n);
/* The tokenizer.ggml.* keys of a SentencePiece ("llama") vocabulary of n
 * pieces in llama2.c's layout: <unk> 0, BOS 1, EOS 2, BOS added and EOS
 * not, a space prefix. Used by convert-llama2c and the dummy models' synthetic
 * vocabulary; everything is copied. 0 or the first setter's error. */
int gguf_writer_set_spm_vocab(gguf_writer *w, const char *const *pieces, const uint64_t *lens,
                              const float *scores, const int32_t *types, uint64_t n);
/* Any value given as the bytes that follow the type field in the file (e.g.
 * a u64 scalar, an f64, or an array of arrays). Not validated: tests use it
 * to write malformed values. It does not change the layout, so a raw
 * "general.alignment" is written as given while the data stays aligned to
 * the default (or the value set with gguf_writer_set_u32). */
int gguf_writer_set_raw(gguf_writer *w, const char *key, uint32_t type, const void *val,
                        size_t len);

/* Adds a tensor: ne[0] is the row length; data holds kern_row_bytes(type, ne[0])
 * * ne[1] * ... bytes and is borrowed. BRISK_EINVAL for a duplicate or empty
 * name, an invalid type, n_dims outside 1..4, a dim < 1 or ne[0] not a
 * multiple of the type's block size. Tensors are written in the order added. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, kern_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data);

/* Serialises to a malloc'ed buffer (*out, *len; caller frees). */
int gguf_writer_to_buffer(gguf_writer *w, uint8_t **out, size_t *len);
/* Writes the file (via a temporary and rename). */
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t err_len);

#endif
