/* safetensors.h - a validating reader of Hugging Face safetensors files over
 * a read-only mmap, single files and the sharded sets that
 * model.safetensors.index.json names.
 *
 * The format: 8 bytes, the little-endian u64 length N of a JSON header, then
 * N bytes of JSON, then the tensor data. The header is one object whose
 * members are tensors, {"dtype": "BF16", "shape": [2048, 64],
 * "data_offsets": [begin, end]} with offsets relative to the first byte
 * after the header, plus an optional "__metadata__" object of strings.
 *
 * The file is hostile: safetensors_open() checks everything before anything
 * is used and returns BRISK_EFORMAT with a one-line reason in err on any
 * violation: the header length (at most SAFETENSORS_MAX_HEADER and inside
 * the file), the JSON (an object of objects, each with exactly dtype, shape
 * and data_offsets), a known dtype, at most SAFETENSORS_MAX_DIMS dims of
 * integers in [0, 2^53), byte counts that agree with dtype and shape without
 * overflow, offsets in order, inside the data and covering it exactly (no
 * overlap, no hole, as the reference implementation requires), names
 * non-empty, at most 65535 bytes, without NUL, unique. After a successful
 * open every accessor is safe: nothing handed out lies outside the mapping.
 *
 * Tensor data is NOT aligned in general (the offsets are byte offsets after
 * a header of any length): read it with safetensors_read_f32, which copies.
 *
 * Ownership: safetensors_file owns the mapping (or borrows the buffer given
 * to safetensors_open_memory) and every name and index it built; pointers
 * handed out live until safetensors_close(). safetensors_set owns its
 * files. */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* The spec's limit on the JSON header (100 MB), which also bounds what a
 * hostile header can make the parser allocate. */
#define SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)
#define SAFETENSORS_MAX_DIMS 8

typedef enum safetensors_dtype {
    SAFETENSORS_BOOL,
    SAFETENSORS_U8,
    SAFETENSORS_I8,
    SAFETENSORS_F8_E4M3,
    SAFETENSORS_F8_E5M2,
    SAFETENSORS_I16,
    SAFETENSORS_U16,
    SAFETENSORS_F16,
    SAFETENSORS_BF16,
    SAFETENSORS_I32,
    SAFETENSORS_U32,
    SAFETENSORS_F32,
    SAFETENSORS_I64,
    SAFETENSORS_U64,
    SAFETENSORS_F64,
    SAFETENSORS_N_DTYPES
} safetensors_dtype;

/* The file's spelling of a dtype ("BF16"); "?" outside the enum. */
const char *safetensors_dtype_name(safetensors_dtype t);
/* Bytes of one element (1 for BOOL and the F8 types); 0 outside the enum. */
size_t safetensors_dtype_size(safetensors_dtype t);
/* 1 for F32, F16 and BF16, the types brisk loads weights from. */
int safetensors_dtype_is_float(safetensors_dtype t);

typedef struct safetensors_tensor {
    const char *name; /* NUL-terminated, owned by the file */
    safetensors_dtype dtype;
    int n_dims;                          /* 0 for a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* row-major: shape[n_dims-1] is the fastest */
    int64_t n_elems;                     /* product of the shape (1 for a scalar) */
    uint64_t offset;                     /* relative to the data section */
    size_t nbytes;                       /* n_elems * dtype size */
    const void *data;                    /* inside the mapping; not aligned */
} safetensors_tensor;

typedef struct safetensors_file safetensors_file;

/* Opens and validates path. On failure *out is NULL and err holds the reason. */
int safetensors_open(const char *path, safetensors_file **out, char *err, size_t err_len);
/* The same over a caller buffer that must outlive the file (fuzzing, tests). */
int safetensors_open_memory(const void *buf, size_t len, safetensors_file **out, char *err,
                            size_t err_len);
void safetensors_close(safetensors_file *f);

int64_t safetensors_n_tensors(const safetensors_file *f);
/* Tensors in the order of their offsets. */
const safetensors_tensor *safetensors_tensor_at(const safetensors_file *f, int64_t i);
/* NULL if absent. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);
/* A "__metadata__" string (e.g. "format"), NUL-terminated, owned by the
 * file; NULL if absent. */
const char *safetensors_metadata(const safetensors_file *f, const char *key);
/* Offset of the data section (8 + header length) and the file's size. */
size_t safetensors_data_offset(const safetensors_file *f);
size_t safetensors_file_size(const safetensors_file *f);

/* Converts n elements of t starting at element `first` (F32, F16 or BF16)
 * to floats in dst. BRISK_EUNSUPPORTED for another dtype, BRISK_ERANGE when
 * [first, first + n) is not inside the tensor. */
int safetensors_read_f32(const safetensors_tensor *t, int64_t first, int64_t n, float *dst);

/* Tells the kernel that the whole pages of t's bytes will not be read again
 * (the model converted them into its own buffer), so they leave the
 * resident set; a later read faults them back in from the file. t must be
 * one of f's tensors, or a copy of one whose data and nbytes name a slice
 * of its bytes (one expert of a fused tensor). No-op for
 * safetensors_open_memory files. */
void safetensors_release_pages(const safetensors_file *f, const safetensors_tensor *t);

/* ---- a set of files: a folder's model.safetensors or its shards -------- */

typedef struct safetensors_set safetensors_set;

/* Opens the weights of the folder dir: model.safetensors.index.json when
 * present (its weight_map's shard names must be plain file names in dir;
 * each tensor it names must be in the shard it names), else
 * model.safetensors. A tensor name held by two shards is refused. */
int safetensors_set_open_dir(const char *dir, safetensors_set **out, char *err, size_t err_len);
/* The index check alone, for the fuzz target and the tests: parses the
 * index JSON text (len bytes, no NUL needed) and calls fn(name, shard, ud)
 * for each weight_map entry (both NUL-terminated, valid during the call);
 * fn returns 0 or a negative code that stops the walk and is returned.
 * Shard names are checked as safetensors_set_open_dir does. */
int safetensors_index_parse(const char *text, size_t len,
                            int (*fn)(const char *name, const char *shard, void *ud), void *ud,
                            char *err, size_t err_len);
void safetensors_set_free(safetensors_set *s);

int safetensors_set_n_files(const safetensors_set *s);
const safetensors_file *safetensors_set_file(const safetensors_set *s, int i);
/* Searches every file; NULL if absent. */
const safetensors_tensor *safetensors_set_find(const safetensors_set *s, const char *name);
/* Tensors over all files. */
int64_t safetensors_set_n_tensors(const safetensors_set *s);

#endif
