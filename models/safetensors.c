/* safetensors.c - the safetensors reader (safetensors.h): header
 * validation, the tensor table, float reads, and folder sets of shards. */
#include "models/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/brisk_error.h"
#include "common/brisk_file.h"
#include "common/brisk_utf8.h"
#include "kernels/cpu/kern_types.h"

/* Integers a JSON number (a double in cJSON) holds exactly: offsets and
 * dims at or above 2^53 are refused rather than rounded. */
#define ST_MAX_EXACT 9007199254740992.0
#define ST_MAX_NAME 65535
/* model.safetensors.index.json is a name -> shard map: a few MB for the
 * largest models (DeepSeek-V3's is 9 MB); 64 MiB bounds a hostile one. */
#define ST_MAX_INDEX_BYTES (64u << 20)

static const struct {
    const char *name;
    size_t size;
} k_dtypes[SAFETENSORS_N_DTYPES] = {
    [SAFETENSORS_BOOL] = {"BOOL", 1},       [SAFETENSORS_U8] = {"U8", 1},
    [SAFETENSORS_I8] = {"I8", 1},           [SAFETENSORS_F8_E4M3] = {"F8_E4M3", 1},
    [SAFETENSORS_F8_E5M2] = {"F8_E5M2", 1}, [SAFETENSORS_I16] = {"I16", 2},
    [SAFETENSORS_U16] = {"U16", 2},         [SAFETENSORS_F16] = {"F16", 2},
    [SAFETENSORS_BF16] = {"BF16", 2},       [SAFETENSORS_I32] = {"I32", 4},
    [SAFETENSORS_U32] = {"U32", 4},         [SAFETENSORS_F32] = {"F32", 4},
    [SAFETENSORS_I64] = {"I64", 8},         [SAFETENSORS_U64] = {"U64", 8},
    [SAFETENSORS_F64] = {"F64", 8},
};

const char *safetensors_dtype_name(safetensors_dtype t) {
    return (unsigned)t < SAFETENSORS_N_DTYPES ? k_dtypes[t].name : "?";
}

size_t safetensors_dtype_size(safetensors_dtype t) {
    return (unsigned)t < SAFETENSORS_N_DTYPES ? k_dtypes[t].size : 0;
}

int safetensors_dtype_is_float(safetensors_dtype t) {
    return t == SAFETENSORS_F32 || t == SAFETENSORS_F16 || t == SAFETENSORS_BF16;
}

struct safetensors_file {
    const uint8_t *base;
    size_t size;
    int mapped; /* 1: base is our mmap and safetensors_close unmaps it */
    size_t data_off;
    safetensors_tensor *tensors;        /* [n], by offset */
    const safetensors_tensor **by_name; /* [n] the same tensors, by name */
    int64_t n;
    char **meta; /* [2 * n_meta]: key, value, ... */
    int64_t n_meta;
};

/* A tensor name for a message: at most 80 bytes, control bytes as '?'. */
static void fmt_name(char *dst, size_t cap, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap && i < 80; i++)
        dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    dst[i] = '\0';
}

/* Reads a JSON number that must be an integer in [0, 2^53). */
static int get_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d >= ST_MAX_EXACT || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int read_tensor(const cJSON *e, safetensors_tensor *t, size_t data_size, char *err,
                       size_t err_len) {
    char nm[96];
    fmt_name(nm, sizeof nm, t->name);
    if (!cJSON_IsObject(e))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: entry '%s' is not an object", nm);
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *m = e->child; m; m = m->next) {
        const cJSON **slot = !strcmp(m->string, "dtype")          ? &dt
                             : !strcmp(m->string, "shape")        ? &shape
                             : !strcmp(m->string, "data_offsets") ? &offs
                                                                  : NULL;
        if (!slot || *slot)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "safetensors: tensor '%s': %s member '%.40s'", nm,
                                 slot ? "repeated" : "unknown", m->string);
        *slot = m;
    }
    if (!dt || !shape || !offs)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "safetensors: tensor '%s' lacks '%s'", nm,
                             !dt      ? "dtype"
                             : !shape ? "shape"
                                      : "data_offsets");
    if (!cJSON_IsString(dt))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': dtype is not a string", nm);
    int found = 0;
    for (int i = 0; i < SAFETENSORS_N_DTYPES; i++)
        if (!strcmp(dt->valuestring, k_dtypes[i].name)) {
            t->dtype = (safetensors_dtype)i;
            found = 1;
        }
    if (!found)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': unknown dtype '%.20s'", nm,
                             dt->valuestring);
    if (!cJSON_IsArray(shape))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': shape is not an array", nm);
    int nd = cJSON_GetArraySize(shape);
    if (nd > SAFETENSORS_MAX_DIMS)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s' has %d dims (at most %d)", nm, nd,
                             SAFETENSORS_MAX_DIMS);
    t->n_dims = nd;
    /* The byte count is checked against the data size at each step, so the
     * product cannot overflow: every factor is below 2^53 and the running
     * product stays at most the data size (a zero dim makes it 0). */
    uint64_t elems = 1;
    int zero = 0, d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t v;
        if (get_uint(x, &v) < 0)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "safetensors: tensor '%s': dim %d is not an integer in [0, 2^53)",
                                 nm, d);
        t->shape[d] = (int64_t)v;
        if (v == 0)
            zero = 1;
        else if (!zero) {
            if (elems > data_size / v)
                return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                     "safetensors: tensor '%s' is larger than the file", nm);
            elems *= v;
        }
    }
    if (zero)
        elems = 0;
    size_t es = k_dtypes[t->dtype].size;
    if (elems > data_size / es)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s' is larger than the file", nm);
    t->n_elems = (int64_t)elems;
    t->nbytes = (size_t)elems * es;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': data_offsets is not [begin, end]", nm);
    uint64_t b, en;
    if (get_uint(offs->child, &b) < 0 || get_uint(offs->child->next, &en) < 0)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': data_offsets are not integers in [0, 2^53)",
                             nm);
    if (en < b || en > data_size)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': data_offsets [%llu, %llu] outside the %zu "
                             "bytes of data",
                             nm, (unsigned long long)b, (unsigned long long)en, data_size);
    if (en - b != t->nbytes)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: tensor '%s': %llu bytes of data for %s %lld elements "
                             "(%zu bytes)",
                             nm, (unsigned long long)(en - b), k_dtypes[t->dtype].name,
                             (long long)t->n_elems, t->nbytes);
    t->offset = b;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const safetensors_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    /* Empty tensors share offsets with their neighbours; the larger last. */
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const safetensors_tensor *const *)a)->name,
                  (*(const safetensors_tensor *const *)b)->name);
}

static int read_metadata(safetensors_file *f, const cJSON *md, char *err, size_t err_len) {
    if (!cJSON_IsObject(md))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: __metadata__ is not an object");
    int64_t n = cJSON_GetArraySize(md);
    f->meta = calloc((size_t)(2 * n + 1), sizeof *f->meta);
    if (!f->meta)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
    for (const cJSON *m = md->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "safetensors: __metadata__ value of '%.40s' is not a string",
                                 m->string);
        char *k = strdup(m->string), *v = strdup(m->valuestring);
        f->meta[2 * f->n_meta] = k;
        f->meta[2 * f->n_meta + 1] = v;
        f->n_meta++;
        if (!k || !v)
            return brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
    }
    return 0;
}

static int check_table(safetensors_file *f, size_t data_size, char *err, size_t err_len) {
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_offset);
    uint64_t pos = 0;
    for (int64_t i = 0; i < f->n; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        char nm[96];
        fmt_name(nm, sizeof nm, t->name);
        if (t->offset != pos)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "safetensors: tensor '%s' at offset %llu %s the tensor before it "
                                 "(ends at %llu)",
                                 nm, (unsigned long long)t->offset,
                                 t->offset < pos ? "overlaps" : "leaves a hole after",
                                 (unsigned long long)pos);
        pos += t->nbytes;
    }
    if (pos != data_size)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: the tensors cover %llu of the %zu bytes of data",
                             (unsigned long long)pos, data_size);
    for (int64_t i = 0; i < f->n; i++) {
        f->tensors[i].data = f->base + f->data_off + f->tensors[i].offset;
        f->by_name[i] = &f->tensors[i];
    }
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    for (int64_t i = 1; i < f->n; i++) {
        const char *a = f->by_name[i - 1]->name, *b = f->by_name[i]->name;
        if (!strcmp(a, b)) {
            char nm[96];
            fmt_name(nm, sizeof nm, a);
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "safetensors: duplicate tensor name '%s'", nm);
        }
    }
    return 0;
}

/* Refuses the escape \u0000 (any case) outside a string's backslash pairs:
 * cJSON would decode it into a name that a C string cuts short. */
static int has_nul_escape(const char *h, size_t n) {
    for (size_t i = 0; i + 5 < n; i++) {
        if (h[i] != '\\')
            continue;
        if (h[i + 1] == 'u' && h[i + 2] == '0' && h[i + 3] == '0' && h[i + 4] == '0' &&
            h[i + 5] == '0')
            return 1;
        i++; /* skip the escaped character (a backslash pair included) */
    }
    return 0;
}

static int parse(safetensors_file *f, char *err, size_t err_len) {
    if (f->size < 8)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: %zu bytes, shorter than the 8-byte header length",
                             f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f->base[i];
    if (hlen > SAFETENSORS_MAX_HEADER)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: header of %llu bytes (at most %u)",
                             (unsigned long long)hlen, SAFETENSORS_MAX_HEADER);
    if (hlen > f->size - 8)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: header of %llu bytes in a file of %zu",
                             (unsigned long long)hlen, f->size);
    const char *h = (const char *)f->base + 8;
    size_t n = (size_t)hlen;
    if (n < 2 || h[0] != '{')
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: the header does not start with '{'");
    if (memchr(h, '\0', n) || !brisk_utf8_valid(h, n) || has_nul_escape(h, n))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: the header is not UTF-8 text without NUL");
    f->data_off = 8 + n;
    size_t data_size = f->size - f->data_off;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, n, &end, 0);
    if (!root)
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: the header is not valid JSON");
    int rc = 0;
    for (const char *p = end; p < h + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "safetensors: bytes after the header's JSON object");
            goto out;
        }
    if (!cJSON_IsObject(root)) {
        rc = brisk_set_err(err, err_len, BRISK_EFORMAT, "safetensors: the header is not an object");
        goto out;
    }
    int64_t cap = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)cap + 1, sizeof *f->tensors);
    f->by_name = calloc((size_t)cap + 1, sizeof *f->by_name);
    if (!f->tensors || !f->by_name) {
        rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
        goto out;
    }
    int seen_meta = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (seen_meta++) {
                rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                                   "safetensors: __metadata__ given twice");
                goto out;
            }
            if ((rc = read_metadata(f, e, err, err_len)) < 0)
                goto out;
            continue;
        }
        size_t len = strlen(e->string);
        if (len == 0 || len > ST_MAX_NAME) {
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "safetensors: a tensor name of %zu bytes (1 to %d)", len,
                               ST_MAX_NAME);
            goto out;
        }
        safetensors_tensor *t = &f->tensors[f->n];
        char *name = strdup(e->string);
        if (!name) {
            rc = brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
            goto out;
        }
        t->name = name;
        f->n++;
        if ((rc = read_tensor(e, t, data_size, err, err_len)) < 0)
            goto out;
    }
    rc = check_table(f, data_size, err, err_len);
out:
    cJSON_Delete(root);
    return rc;
}

void safetensors_close(safetensors_file *f) {
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->base, f->size);
    for (int64_t i = 0; i < f->n; i++)
        free((char *)f->tensors[i].name);
    for (int64_t i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->tensors);
    free(f->by_name);
    free(f);
}

static int open_common(const uint8_t *base, size_t size, int mapped, safetensors_file **out,
                       char *err, size_t err_len) {
    safetensors_file *f = calloc(1, sizeof *f);
    if (!f)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
    f->base = base;
    f->size = size;
    int rc = parse(f, err, err_len);
    if (rc) {
        safetensors_close(f); /* not mapped yet: the caller unmaps */
        return rc;
    }
    f->mapped = mapped;
    *out = f;
    return 0;
}

int safetensors_open_memory(const void *buf, size_t len, safetensors_file **out, char *err,
                            size_t err_len) {
    if (!out)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "safetensors: out is NULL");
    *out = NULL;
    if (!buf && len > 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "safetensors: buffer is NULL");
    return open_common(buf, len, 0, out, err, err_len);
}

int safetensors_open(const char *path, safetensors_file **out, char *err, size_t err_len) {
    struct stat st;
    if (!out)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "safetensors: out is NULL");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "safetensors: cannot open '%s': %s", path,
                             strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EIO, "safetensors: '%s' is not a regular file",
                             path);
    }
    if (st.st_size < 8) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors: '%s' is %lld bytes, too short", path,
                             (long long)st.st_size);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EIO, "safetensors: '%s' is too large to map",
                             path);
    }
    size_t size = (size_t)st.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (m == MAP_FAILED)
        return brisk_set_err(err, err_len, BRISK_EIO, "safetensors: cannot map '%s': %s", path,
                             strerror(e));
    int rc = open_common(m, size, 1, out, err, err_len);
    if (rc)
        munmap(m, size);
    return rc;
}

void safetensors_release_pages(const safetensors_file *f, const safetensors_tensor *t) {
    if (!f || !f->mapped || !t || t->nbytes == 0)
        return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return;
    /* Only whole pages inside the tensor: a neighbour may still be read from
     * a page it shares. The mapping is private and read-only, so dropping
     * its pages loses nothing. */
    uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int64_t safetensors_n_tensors(const safetensors_file *f) {
    return f->n;
}

const safetensors_tensor *safetensors_tensor_at(const safetensors_file *f, int64_t i) {
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    int64_t lo = 0, hi = f->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *safetensors_metadata(const safetensors_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}

size_t safetensors_data_offset(const safetensors_file *f) {
    return f->data_off;
}

size_t safetensors_file_size(const safetensors_file *f) {
    return f->size;
}

int safetensors_read_f32(const safetensors_tensor *t, int64_t first, int64_t n, float *dst) {
    if (!safetensors_dtype_is_float(t->dtype))
        return BRISK_EUNSUPPORTED;
    if (first < 0 || n < 0 || first > t->n_elems || n > t->n_elems - first)
        return BRISK_ERANGE;
    const uint8_t *p = (const uint8_t *)t->data + (size_t)first * k_dtypes[t->dtype].size;
    if (t->dtype == SAFETENSORS_F32) {
        memcpy(dst, p, (size_t)n * sizeof(float));
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = t->dtype == SAFETENSORS_F16 ? kern_fp16_to_fp32(h) : kern_bf16_to_fp32(h);
    }
    return 0;
}

/* ---- sets ---------------------------------------------------------------- */

struct safetensors_set {
    safetensors_file **files;
    char **names; /* [n_files] shard file names */
    int n_files;
    size_t cap;
};

/* A shard must be a plain file name of the folder: no path, no "..", no
 * hidden name, and no control bytes. */
static int shard_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20)
            return 0;
    return 1;
}

int safetensors_index_parse(const char *text, size_t len,
                            int (*fn)(const char *name, const char *shard, void *ud), void *ud,
                            char *err, size_t err_len) {
    if (!brisk_utf8_valid(text, len) || memchr(text, '\0', len) || has_nul_escape(text, len))
        return brisk_set_err(err, err_len, BRISK_EFORMAT,
                             "safetensors index: not UTF-8 text without NUL");
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "safetensors index: not valid JSON");
    int rc = 0;
    const cJSON *wm =
        cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm) || !wm->child) {
        rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                           "safetensors index: no weight_map object with entries");
        goto out;
    }
    for (const cJSON *e = wm->child; e; e = e->next) {
        char nm[96];
        fmt_name(nm, sizeof nm, e->string);
        if (!e->string[0] || strlen(e->string) > ST_MAX_NAME) {
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "safetensors index: a tensor name of %zu bytes (1 to %d)",
                               strlen(e->string), ST_MAX_NAME);
            goto out;
        }
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
            rc = brisk_set_err(err, err_len, BRISK_EFORMAT,
                               "safetensors index: tensor '%s': the shard is not a plain file "
                               "name of the folder",
                               nm);
            goto out;
        }
        if ((rc = fn(e->string, e->valuestring, ud)) < 0)
            goto out;
    }
out:
    cJSON_Delete(root);
    return rc;
}

void safetensors_set_free(safetensors_set *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_files; i++) {
        safetensors_close(s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    free(s);
}

typedef struct set_build {
    safetensors_set *s;
    const char *dir;
    char *err;
    size_t err_len;
} set_build;

static int set_add_file(set_build *b, const char *shard, safetensors_file **out) {
    safetensors_set *s = b->s;
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->names[i], shard)) {
            *out = s->files[i];
            return 0;
        }
    if ((size_t)s->n_files == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        safetensors_file **nf = realloc(s->files, cap * sizeof *nf);
        if (nf)
            s->files = nf;
        char **nn = nf ? realloc(s->names, cap * sizeof *nn) : NULL;
        if (!nn)
            return brisk_set_err(b->err, b->err_len, BRISK_ENOMEM, "safetensors: out of memory");
        s->names = nn;
        s->cap = cap;
    }
    size_t pl = strlen(b->dir) + strlen(shard) + 2;
    char *path = malloc(pl);
    char *name = strdup(shard);
    if (!path || !name) {
        free(path);
        free(name);
        return brisk_set_err(b->err, b->err_len, BRISK_ENOMEM, "safetensors: out of memory");
    }
    snprintf(path, pl, "%s/%s", b->dir, shard);
    safetensors_file *f = NULL;
    int rc = safetensors_open(path, &f, b->err, b->err_len);
    free(path);
    if (rc < 0) {
        free(name);
        return rc;
    }
    s->files[s->n_files] = f;
    s->names[s->n_files] = name;
    s->n_files++;
    *out = f;
    return 0;
}

static int set_index_entry(const char *name, const char *shard, void *ud) {
    set_build *b = ud;
    safetensors_file *f;
    int rc = set_add_file(b, shard, &f);
    if (rc < 0)
        return rc;
    if (!safetensors_find(f, name)) {
        char nm[96];
        fmt_name(nm, sizeof nm, name);
        return brisk_set_err(b->err, b->err_len, BRISK_EFORMAT,
                             "safetensors index: tensor '%s' is not in its shard '%s'", nm, shard);
    }
    return 0;
}

/* No tensor name in two files of the set. */
static int set_check_unique(const safetensors_set *s, char *err, size_t err_len) {
    for (int i = 1; i < s->n_files; i++)
        for (int64_t k = 0; k < s->files[i]->n; k++)
            for (int j = 0; j < i; j++)
                if (safetensors_find(s->files[j], s->files[i]->tensors[k].name)) {
                    char nm[96];
                    fmt_name(nm, sizeof nm, s->files[i]->tensors[k].name);
                    return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                         "safetensors: tensor '%s' is in both '%s' and '%s'", nm,
                                         s->names[j], s->names[i]);
                }
    return 0;
}

int safetensors_set_open_dir(const char *dir, safetensors_set **out, char *err, size_t err_len) {
    *out = NULL;
    safetensors_set *s = calloc(1, sizeof *s);
    if (!s)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
    set_build b = {s, dir, err, err_len};
    size_t pl = strlen(dir) + 64;
    char *path = malloc(pl);
    if (!path) {
        free(s);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "safetensors: out of memory");
    }
    snprintf(path, pl, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(path, F_OK) == 0) {
        char *text = NULL;
        size_t len = 0;
        rc = brisk_file_read(path, ST_MAX_INDEX_BYTES, "safetensors index", &text, &len, err,
                             err_len);
        if (rc == 0) {
            rc = safetensors_index_parse(text, len, set_index_entry, &b, err, err_len);
            free(text);
        }
        if (rc == 0)
            rc = set_check_unique(s, err, err_len);
    } else {
        safetensors_file *f;
        rc = set_add_file(&b, "model.safetensors", &f);
    }
    free(path);
    if (rc < 0) {
        safetensors_set_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int safetensors_set_n_files(const safetensors_set *s) {
    return s->n_files;
}

const safetensors_file *safetensors_set_file(const safetensors_set *s, int i) {
    return i >= 0 && i < s->n_files ? s->files[i] : NULL;
}

const safetensors_tensor *safetensors_set_find(const safetensors_set *s, const char *name) {
    for (int i = 0; i < s->n_files; i++) {
        const safetensors_tensor *t = safetensors_find(s->files[i], name);
        if (t)
            return t;
    }
    return NULL;
}

int64_t safetensors_set_n_tensors(const safetensors_set *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_files; i++)
        n += s->files[i]->n;
    return n;
}
