/* gguf.h - a validating GGUF v2/v3 reader over a read-only mmap.
 *
 * The file is hostile: gguf_open() checks everything before anything is
 * used (magic, version, counts and string/array lengths against the bytes
 * left, value types, alignment, tensor dims/types/sizes, offsets inside the
 * data section and not overlapping) and returns BRISK_EFORMAT with a
 * one-line reason in err on any violation (BRISK_EUNSUPPORTED for a
 * well-formed file brisk cannot load: GGUF v1, or a tensor type such as Q4_K
 * outside the six of kern_types.h). After a successful open every accessor
 * is safe: it never reads outside the mapping.
 *
 * Decisions on what GGUF leaves open: keys and tensor names are non-empty and
 * at most 65535 bytes; bool values must be 0 or 1; arrays may nest up to 8
 * deep; every dim is >= 1 (empty tensors are refused); tensor data pointers
 * are aligned relative to the start of the file or buffer (the buffer given
 * to gguf_open_memory is not required to be aligned itself).
 *
 * Ownership: gguf_file owns the mapping (or the borrowed buffer for
 * gguf_open_memory) and every index it built. All gguf_str / data pointers
 * returned point into the mapping and live until gguf_close(). */
#ifndef GGUF_H
#define GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

/* A length-counted string inside the file; not NUL-terminated. */
typedef struct gguf_str {
    uint64_t len;
    const char *data;
} gguf_str;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest); unused dims are 1 */
    kern_type type;
    uint64_t offset; /* relative to the data section */
    size_t nbytes;
    const void *data; /* inside the mapping, aligned to the file's alignment */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens and validates path. On failure *out is NULL and err holds the reason. */
int gguf_open(const char *path, gguf_file **out, char *err, size_t err_len);
/* Same over a caller buffer that must outlive the gguf_file (fuzzing, tests). */
int gguf_open_memory(const void *buf, size_t len, gguf_file **out, char *err, size_t err_len);
void gguf_close(gguf_file *gf);

uint32_t gguf_version(const gguf_file *gf);
uint32_t gguf_alignment(const gguf_file *gf);
size_t gguf_file_size(const gguf_file *gf);
/* Offset of the data section from the start of the file (header + padding). */
size_t gguf_data_offset(const gguf_file *gf);
/* Static short name of a value type ("u32", "string", ...; "unknown"). */
const char *gguf_type_name(gguf_type t);

/* ---- metadata --------------------------------------------------------- */
int64_t gguf_n_kv(const gguf_file *gf);
/* Index of key, or -1. */
int64_t gguf_find_key(const gguf_file *gf, const char *key);
gguf_str gguf_key_at(const gguf_file *gf, int64_t i);
gguf_type gguf_kv_type(const gguf_file *gf, int64_t i);

/* Typed getters return 0, BRISK_ENOTFOUND if the key is absent, or
 * BRISK_EFORMAT if its type does not fit. Integer getters accept any integer
 * type whose value fits the destination (range-checked); float getters accept
 * FLOAT32 or FLOAT64. */
int gguf_get_u32(const gguf_file *gf, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *gf, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *gf, const char *key, float *out);
int gguf_get_bool(const gguf_file *gf, const char *key, int *out);
int gguf_get_str(const gguf_file *gf, const char *key, gguf_str *out);

/* Arrays: element type and count; for numeric element types *data points to
 * the packed little-endian values in the file (possibly unaligned: read with
 * memcpy). String arrays are read with gguf_get_arr_str(). For STRING and
 * ARRAY element types *data points to the serialised elements as in the file
 * ({u64 len, bytes} per string; {u32 type, u64 n, elements} per nested
 * array), all validated at open. */
int gguf_get_arr(const gguf_file *gf, const char *key, gguf_type *elem_type, uint64_t *n,
                 const void **data);
/* Fills a newly malloc'ed array of n gguf_str (caller frees *out with free()). */
int gguf_get_arr_str(const gguf_file *gf, const char *key, gguf_str **out, uint64_t *n);

/* ---- tensors ---------------------------------------------------------- */
int64_t gguf_n_tensors(const gguf_file *gf);
const gguf_tensor *gguf_tensor_at(const gguf_file *gf, int64_t i);
/* NULL if absent. */
const gguf_tensor *gguf_find_tensor(const gguf_file *gf, const char *name);

/* Tells the kernel that t's bytes in the mapping will not be read again
 * (the model converted them into its own buffer), so their pages leave the
 * resident set. Reading them later still works: pages fault back in from
 * the file. No-op for gguf_open_memory files. */
void gguf_release_tensor_pages(const gguf_file *gf, const gguf_tensor *t);

/* Bytes of a fixed-size value type; 0 for strings, arrays and unknown ids. */
size_t gguf_type_size(uint32_t type);

/* 1 if s equals the C string c. */
int gguf_str_eq(gguf_str s, const char *c);

#endif
