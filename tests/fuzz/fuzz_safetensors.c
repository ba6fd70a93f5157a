/* fuzz_safetensors.c - a hostile Hugging Face weights file: the safetensors
 * header (models/safetensors.c: the length field, the JSON, the tensor
 * table's dtypes, shapes and offsets) and the sharded index
 * (model.safetensors.index.json's weight_map), as brisk reads a folder given
 * to --model.
 *
 * Byte 0 picks the reader: even, the rest is a safetensors file, copied
 * into a buffer of exactly its size; odd, the rest is an index's JSON text.
 * Properties checked:
 *   - a refusal is a negative code with a one-line message, nothing else;
 *   - an accepted file's tensors lie inside the buffer after the header,
 *     in offset order, covering the data without overlap; each has a known
 *     dtype, at most SAFETENSORS_MAX_DIMS dims whose product is n_elems and
 *     n_elems * dtype size == nbytes; each is found by its name; the float
 *     ones read back (a prefix of them) without touching outside the buffer;
 *   - an accepted index calls back with non-empty names and shard names
 *     that are plain file names (no '/', no leading '.'). */
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "models/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static void check_refusal(int rc, const char *err) {
    FUZZ_CHECK(rc < 0);
    FUZZ_CHECK(err[0] != '\0');
    FUZZ_CHECK(!strchr(err, '\n') && !strchr(err, '\r'));
}

static void fuzz_file(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    safetensors_file *f = NULL;
    char err[512] = "";
    int rc = safetensors_open_memory(buf, size, &f, err, sizeof err);
    if (rc) {
        check_refusal(rc, err);
        FUZZ_CHECK(f == NULL);
        free(buf);
        return;
    }
    size_t off = safetensors_data_offset(f);
    FUZZ_CHECK(off >= 8 && off <= size);
    uint64_t pos = 0;
    for (int64_t i = 0; i < safetensors_n_tensors(f); i++) {
        const safetensors_tensor *t = safetensors_tensor_at(f, i);
        FUZZ_CHECK(t && t->name && t->name[0]);
        FUZZ_CHECK((unsigned)t->dtype < SAFETENSORS_N_DTYPES);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= SAFETENSORS_MAX_DIMS);
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) {
            FUZZ_CHECK(t->shape[d] >= 0);
            n = t->shape[d] == 0 || n == 0 ? 0 : n * t->shape[d];
        }
        FUZZ_CHECK(n == t->n_elems);
        FUZZ_CHECK(t->nbytes == (size_t)t->n_elems * safetensors_dtype_size(t->dtype));
        FUZZ_CHECK(t->offset == pos);
        pos += t->nbytes;
        FUZZ_CHECK((const uint8_t *)t->data == buf + off + t->offset);
        FUZZ_CHECK(t->offset + t->nbytes <= size - off);
        FUZZ_CHECK(safetensors_find(f, t->name) == t);
        if (safetensors_dtype_is_float(t->dtype)) {
            float v[64];
            int64_t k = t->n_elems < 64 ? t->n_elems : 64;
            FUZZ_CHECK(safetensors_read_f32(t, t->n_elems - k, k, v) == 0);
            FUZZ_CHECK(safetensors_read_f32(t, t->n_elems, 1, v) == BRISK_ERANGE);
        } else {
            float v[1];
            FUZZ_CHECK(safetensors_read_f32(t, 0, 0, v) == BRISK_EUNSUPPORTED);
        }
    }
    FUZZ_CHECK(pos == size - off);
    (void)safetensors_metadata(f, "format");
    safetensors_close(f);
    free(buf);
}

static int on_entry(const char *name, const char *shard, void *ud) {
    FUZZ_CHECK(name[0] && shard[0] && shard[0] != '.' && !strchr(shard, '/'));
    (*(int *)ud)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0) {
        fuzz_file(data + 1, size - 1);
        return 0;
    }
    int n = 0;
    char err[512] = "";
    int rc =
        safetensors_index_parse((const char *)data + 1, size - 1, on_entry, &n, err, sizeof err);
    if (rc)
        check_refusal(rc, err);
    else
        FUZZ_CHECK(n > 0);
    return 0;
}
