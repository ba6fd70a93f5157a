/* gguf.c - the validating GGUF v2/v3 reader (contract in gguf.h).
 *
 * Layout of a GGUF v2/v3 file (all little-endian):
 *   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { str key, u32 type, value },
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to the alignment, then the data section; tensor offsets are
 *   relative to the start of the data section.
 * A str is { u64 len, len bytes }. An array value is { u32 elem_type,
 * u64 n, n elements }, where elements may themselves be strings or arrays.
 *
 * The whole header is parsed in one linear pass that checks every length
 * against the bytes left before it moves on, so that a hostile count or
 * length fails at once instead of driving a huge allocation or a read past
 * the end. Arrays of entries grow as entries are actually parsed, so memory
 * use is bounded by the file size, not by the counts the file claims. */
#include "models/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/brisk_error.h"
#include "common/brisk_grow.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values in place and needs a little-endian host"
#endif

/* "GGUF" read as a little-endian u32. */
#define GGUF_MAGIC 0x46554747u
/* Arrays of arrays are legal GGUF but no model we load uses more than one
 * level; a bound keeps the recursion (and the stack) small on hostile input. */
#define GGUF_MAX_ARRAY_DEPTH 8
/* Keys and tensor names are short identifiers; 64 KiB is far above any real
 * one and keeps error messages and hash work bounded. */
#define GGUF_MAX_NAME_LEN 65535u
/* The smallest possible kv: 8-byte key length, 1 key byte, 4-byte type,
 * 1 value byte (a u8, i8 or bool). Used to refuse counts the file cannot hold. */
#define GGUF_MIN_KV_BYTES 14u
/* The smallest tensor info: 8-byte name length, 1 name byte, 4-byte n_dims,
 * one 8-byte dim, 4-byte type, 8-byte offset. */
#define GGUF_MIN_TENSOR_INFO_BYTES 33u
/* The smallest array element that is a string (its length) or an array
 * (element type + count). */
#define GGUF_MIN_STR_BYTES 8u
#define GGUF_MIN_ARR_BYTES 12u

/* One parsed kv. key is the first member so that kvs and tensors can share
 * the name index code below (both start with a gguf_str). All pointers point
 * into the file. */
typedef struct gguf_kv {
    gguf_str key;
    gguf_type type;
    const uint8_t *val; /* the value bytes, just after the type field */
    /* For GGUF_TYPE_STRING. */
    gguf_str str;
    /* For GGUF_TYPE_ARRAY: element type, count and the first element. */
    gguf_type arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;
} gguf_kv;

/* Open-addressing hash index from a name to an entry index; slots hold
 * entry index + 1 so that a zeroed table is empty. */
typedef struct name_index {
    uint64_t *slots;
    size_t cap; /* a power of two, at least twice the entry count */
} name_index;

struct gguf_file {
    const uint8_t *base; /* the mapping or the caller's buffer */
    size_t size;
    int mapped; /* 1: base is our mmap and gguf_close unmaps it */
    uint32_t version;
    uint32_t alignment;
    size_t data_off; /* start of the data section, from base */
    int64_t n_kv;
    gguf_kv *kvs; /* owned */
    int64_t n_tensors;
    gguf_tensor *tensors; /* owned */
    name_index kv_index;  /* owned */
    name_index t_index;   /* owned */
};

/* ---- error context --------------------------------------------------- */

/* The cursor over the file plus what is being read, for error messages. */
typedef struct rd {
    const uint8_t *p;
    size_t size;
    size_t pos;
    char *err;
    size_t err_len;
    const char *sect; /* "header", "kv" or "tensor" */
    int64_t idx;      /* index of the kv or tensor being read */
    gguf_str name;    /* its key or name once read, else len 0 */
} rd;

/* Writes a name for a message: at most 64 bytes, with anything that is not
 * printable ASCII (newlines included) replaced so that the message stays
 * one line of plain text whatever the file contains. */
static void fmt_name(char *out, size_t out_len, gguf_str s) {
    size_t n = 0;
    uint64_t lim = s.len < 64 ? s.len : 64;
    for (uint64_t i = 0; i < lim && n + 1 < out_len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        out[n++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (s.len > lim && n + 4 < out_len) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static void rd_where(const rd *r, char *buf, size_t len) {
    char name[80];
    if (r->name.len > 0) {
        fmt_name(name, sizeof name, r->name);
        snprintf(buf, len, "%s '%s'", strcmp(r->sect, "kv") == 0 ? "key" : r->sect, name);
    } else if (r->idx >= 0) {
        snprintf(buf, len, "%s %lld", r->sect, (long long)r->idx);
    } else {
        snprintf(buf, len, "%s", r->sect);
    }
}

static int rd_fail(const rd *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rd_fail(const rd *r, int code, const char *fmt, ...) {
    char where[128], msg[256];
    rd_where(r, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return brisk_set_err(r->err, r->err_len, code, "gguf: %s: %s", where, msg);
}

/* ---- primitive reads ------------------------------------------------- */

static size_t rd_left(const rd *r) {
    return r->size - r->pos;
}

static int rd_need(rd *r, uint64_t n, const char *what) {
    if (n > rd_left(r))
        return rd_fail(r, BRISK_EFORMAT,
                       "truncated: %s needs %llu bytes at offset %zu but %zu are left", what,
                       (unsigned long long)n, r->pos, rd_left(r));
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    int rc = rd_need(r, 4, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    int rc = rd_need(r, 8, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int rd_str(rd *r, gguf_str *s, const char *what) {
    uint64_t len;
    int rc = rd_u64(r, &len, what);
    if (rc)
        return rc;
    if (len > rd_left(r))
        return rd_fail(r, BRISK_EFORMAT, "%s length %llu exceeds the %zu bytes left", what,
                       (unsigned long long)len, rd_left(r));
    s->len = len;
    s->data = (const char *)r->p + r->pos;
    r->pos += (size_t)len;
    return 0;
}

/* ---- value types ----------------------------------------------------- */

const char *gguf_type_name(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: return "u8";
    case GGUF_TYPE_INT8: return "i8";
    case GGUF_TYPE_UINT16: return "u16";
    case GGUF_TYPE_INT16: return "i16";
    case GGUF_TYPE_UINT32: return "u32";
    case GGUF_TYPE_INT32: return "i32";
    case GGUF_TYPE_FLOAT32: return "f32";
    case GGUF_TYPE_BOOL: return "bool";
    case GGUF_TYPE_STRING: return "string";
    case GGUF_TYPE_ARRAY: return "array";
    case GGUF_TYPE_UINT64: return "u64";
    case GGUF_TYPE_INT64: return "i64";
    case GGUF_TYPE_FLOAT64: return "f64";
    }
    return "unknown";
}

size_t gguf_type_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static int type_known(uint32_t t) {
    return t <= GGUF_TYPE_FLOAT64;
}

/* Bools are one byte that must be 0 or 1: anything else means the file was
 * written by something we do not understand, so it is refused rather than
 * silently read as true. */
static int check_bools(rd *r, const uint8_t *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return rd_fail(r, BRISK_EFORMAT, "bool value %u is not 0 or 1", b[i]);
    return 0;
}

/* Validates and skips an array body (after its element type and count have
 * been read). depth counts the enclosing arrays. */
static int skip_array(rd *r, uint32_t elem, uint64_t n, int depth) {
    int rc;
    if (!type_known(elem))
        return rd_fail(r, BRISK_EFORMAT, "array element type %u is not a GGUF value type", elem);
    size_t es = gguf_type_size(elem);
    if (es > 0) {
        if (n > rd_left(r) / es)
            return rd_fail(r, BRISK_EFORMAT, "array of %llu %s elements exceeds the %zu bytes left",
                           (unsigned long long)n, gguf_type_name((gguf_type)elem), rd_left(r));
        if (elem == GGUF_TYPE_BOOL && (rc = check_bools(r, r->p + r->pos, n)))
            return rc;
        r->pos += (size_t)n * es;
        return 0;
    }
    if (elem == GGUF_TYPE_STRING) {
        if (n > rd_left(r) / GGUF_MIN_STR_BYTES)
            return rd_fail(r, BRISK_EFORMAT, "array of %llu strings exceeds the %zu bytes left",
                           (unsigned long long)n, rd_left(r));
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s;
            if ((rc = rd_str(r, &s, "array string")))
                return rc;
        }
        return 0;
    }
    /* An array of arrays. */
    if (depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
        return rd_fail(r, BRISK_EFORMAT, "arrays nested deeper than %d", GGUF_MAX_ARRAY_DEPTH);
    if (n > rd_left(r) / GGUF_MIN_ARR_BYTES)
        return rd_fail(r, BRISK_EFORMAT, "array of %llu arrays exceeds the %zu bytes left",
                       (unsigned long long)n, rd_left(r));
    for (uint64_t i = 0; i < n; i++) {
        uint32_t sub_elem;
        uint64_t sub_n;
        if ((rc = rd_u32(r, &sub_elem, "nested array type")))
            return rc;
        if ((rc = rd_u64(r, &sub_n, "nested array count")))
            return rc;
        if ((rc = skip_array(r, sub_elem, sub_n, depth + 1)))
            return rc;
    }
    return 0;
}

static int parse_kv(rd *r, gguf_kv *kv) {
    int rc;
    uint32_t type;
    if ((rc = rd_str(r, &kv->key, "key")))
        return rc;
    if (kv->key.len == 0)
        return rd_fail(r, BRISK_EFORMAT, "empty key");
    if (kv->key.len > GGUF_MAX_NAME_LEN)
        return rd_fail(r, BRISK_EFORMAT, "key length %llu exceeds %u",
                       (unsigned long long)kv->key.len, GGUF_MAX_NAME_LEN);
    r->name = kv->key;
    if ((rc = rd_u32(r, &type, "value type")))
        return rc;
    if (!type_known(type))
        return rd_fail(r, BRISK_EFORMAT, "value type %u is not a GGUF value type", type);
    kv->type = (gguf_type)type;
    kv->val = r->p + r->pos;
    if (type == GGUF_TYPE_STRING)
        return rd_str(r, &kv->str, "string value");
    if (type == GGUF_TYPE_ARRAY) {
        uint32_t elem;
        if ((rc = rd_u32(r, &elem, "array element type")))
            return rc;
        if ((rc = rd_u64(r, &kv->arr_n, "array count")))
            return rc;
        kv->arr_type = (gguf_type)elem;
        kv->arr_data = r->p + r->pos;
        return skip_array(r, elem, kv->arr_n, 0);
    }
    size_t ts = gguf_type_size(type);
    if ((rc = rd_need(r, ts, "value")))
        return rc;
    if (type == GGUF_TYPE_BOOL && (rc = check_bools(r, r->p + r->pos, 1)))
        return rc;
    r->pos += ts;
    return 0;
}

/* ---- name index ------------------------------------------------------ */

static uint64_t hash_name(const char *s, uint64_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64-bit */
    for (uint64_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static const gguf_str *name_at(const void *items, size_t stride, int64_t i) {
    return (const gguf_str *)(const void *)((const char *)items + (size_t)i * stride);
}

static int64_t index_find(const name_index *ix, const void *items, size_t stride, const char *s,
                          uint64_t len) {
    if (ix->cap == 0)
        return -1;
    size_t mask = ix->cap - 1;
    for (size_t h = (size_t)hash_name(s, len) & mask;; h = (h + 1) & mask) {
        uint64_t v = ix->slots[h];
        if (v == 0)
            return -1;
        const gguf_str *e = name_at(items, stride, (int64_t)(v - 1));
        if (e->len == len && memcmp(e->data, s, (size_t)len) == 0)
            return (int64_t)(v - 1);
    }
}

/* Builds the index over n items; on a duplicate name returns 1 with the
 * index of the second occurrence in *dup. */
static int index_build(name_index *ix, const void *items, size_t stride, int64_t n, int64_t *dup) {
    size_t cap = 8;
    while (cap < (size_t)n * 2)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return BRISK_ENOMEM;
    ix->cap = cap;
    for (int64_t i = 0; i < n; i++) {
        const gguf_str *e = name_at(items, stride, i);
        if (index_find(ix, items, stride, e->data, e->len) >= 0) {
            *dup = i;
            return 1;
        }
        size_t h = (size_t)hash_name(e->data, e->len) & (cap - 1);
        while (ix->slots[h])
            h = (h + 1) & (cap - 1);
        ix->slots[h] = (uint64_t)i + 1;
    }
    return 0;
}

/* ---- tensors --------------------------------------------------------- */

/* GGML type names for ids brisk does not load, so that the refusal names the
 * type the user will recognise (e.g. a Q4_K model). */
static const char *ggml_type_name(uint32_t id) {
    static const char *const names[] = {
        "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
        "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
        "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",       "I16",      "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
        "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0",
    };
    return id < sizeof names / sizeof names[0] ? names[id] : NULL;
}

static int parse_tensor_info(rd *r, gguf_tensor *t) {
    int rc;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    if ((rc = rd_str(r, &t->name, "name")))
        return rc;
    if (t->name.len == 0)
        return rd_fail(r, BRISK_EFORMAT, "empty tensor name");
    if (t->name.len > GGUF_MAX_NAME_LEN)
        return rd_fail(r, BRISK_EFORMAT, "name length %llu exceeds %u",
                       (unsigned long long)t->name.len, GGUF_MAX_NAME_LEN);
    r->name = t->name;
    if ((rc = rd_u32(r, &t->n_dims, "n_dims")))
        return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, BRISK_EFORMAT, "n_dims %u is not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
    /* Empty tensors (a dim of 0) are refused: no model needs one, and
     * allowing them would make zero-byte tensors that the overlap and
     * pointer rules would have to special-case. */
    int64_t total = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        ne[d] = 1;
        if (d < t->n_dims && (rc = rd_u64(r, &ne[d], "dim")))
            return rc;
        if (ne[d] < 1 || ne[d] > (uint64_t)INT64_MAX)
            return rd_fail(r, BRISK_EFORMAT, "dim %u is %llu, not in 1..2^63-1", d,
                           (unsigned long long)ne[d]);
        if ((int64_t)ne[d] > INT64_MAX / total)
            return rd_fail(r, BRISK_EFORMAT, "element count overflows int64 at dim %u", d);
        total *= (int64_t)ne[d];
        t->ne[d] = (int64_t)ne[d];
    }
    if ((rc = rd_u32(r, &type, "type")))
        return rc;
    if (!kern_type_valid(type)) {
        const char *tn = ggml_type_name(type);
        if (tn)
            return rd_fail(r, BRISK_EUNSUPPORTED,
                           "type %u (%s) is unsupported (brisk loads F32, F16, BF16, "
                           "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS)",
                           type, tn);
        return rd_fail(r, BRISK_EFORMAT, "type %u is unknown and unsupported", type);
    }
    t->type = (kern_type)type;
    int64_t bs = kern_type_block_size(t->type);
    if (t->ne[0] % bs != 0)
        return rd_fail(r, BRISK_EFORMAT, "ne[0] %lld is not a multiple of the %s block size %lld",
                       (long long)t->ne[0], kern_type_name(t->type), (long long)bs);
    /* Byte size, checked against size_t; the bounds check against the file
     * later makes the result small, but it must not wrap on the way. */
    size_t bb = kern_type_block_bytes(t->type);
    uint64_t blocks_per_row = (uint64_t)t->ne[0] / (uint64_t)bs;
    uint64_t rows = (uint64_t)(total / t->ne[0]);
    if (blocks_per_row > SIZE_MAX / bb || rows > SIZE_MAX / (blocks_per_row * bb))
        return rd_fail(r, BRISK_EFORMAT, "byte size overflows");
    t->nbytes = (size_t)(blocks_per_row * bb * rows);
    if ((rc = rd_u64(r, &t->offset, "offset")))
        return rc;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places every tensor in the data section: aligned, inside the file, and
 * not overlapping another. */
static int place_tensors(gguf_file *gf, rd *r) {
    char a[80], b[80];
    size_t data_len = gf->data_off <= gf->size ? gf->size - gf->data_off : 0;
    if (gf->n_tensors == 0)
        return 0;
    if (gf->data_off > gf->size)
        return brisk_set_err(
            r->err, r->err_len, BRISK_EFORMAT,
            "gguf: data section starts at %zu, past the end of the file (%zu bytes)", gf->data_off,
            gf->size);
    for (int64_t i = 0; i < gf->n_tensors; i++) {
        gguf_tensor *t = &gf->tensors[i];
        fmt_name(a, sizeof a, t->name);
        if (t->offset % gf->alignment != 0)
            return brisk_set_err(r->err, r->err_len, BRISK_EFORMAT,
                                 "gguf: tensor '%s': offset %llu is not aligned to %u", a,
                                 (unsigned long long)t->offset, gf->alignment);
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            return brisk_set_err(r->err, r->err_len, BRISK_EFORMAT,
                                 "gguf: tensor '%s': bytes [%llu, +%zu) run past the end of the "
                                 "data section (%zu bytes)",
                                 a, (unsigned long long)t->offset, t->nbytes, data_len);
        t->data = gf->base + gf->data_off + t->offset;
    }
    gguf_tensor **order = malloc((size_t)gf->n_tensors * sizeof *order);
    if (!order)
        return brisk_set_err(r->err, r->err_len, BRISK_ENOMEM, "gguf: out of memory");
    for (int64_t i = 0; i < gf->n_tensors; i++)
        order[i] = &gf->tensors[i];
    qsort(order, (size_t)gf->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (int64_t i = 0; i + 1 < gf->n_tensors; i++) {
        if (order[i]->offset + order[i]->nbytes > order[i + 1]->offset) {
            fmt_name(a, sizeof a, order[i]->name);
            fmt_name(b, sizeof b, order[i + 1]->name);
            rc = brisk_set_err(r->err, r->err_len, BRISK_EFORMAT,
                               "gguf: tensor '%s' (offset %llu, %zu bytes) overlaps tensor '%s' "
                               "(offset %llu)",
                               a, (unsigned long long)order[i]->offset, order[i]->nbytes, b,
                               (unsigned long long)order[i + 1]->offset);
            break;
        }
    }
    free(order);
    return rc;
}

/* ---- open / close ---------------------------------------------------- */

static int parse(gguf_file *gf, char *err, size_t err_len) {
    rd r = {.p = gf->base,
            .size = gf->size,
            .err = err,
            .err_len = err_len,
            .sect = "header",
            .idx = -1};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    int rc;
    int64_t dup;

    if ((rc = rd_u32(&r, &magic, "magic")))
        return rc;
    if (magic != GGUF_MAGIC)
        return rd_fail(&r, BRISK_EFORMAT, "bad magic 0x%08x (not a GGUF file)", magic);
    if ((rc = rd_u32(&r, &gf->version, "version")))
        return rc;
    if (gf->version == 1)
        return rd_fail(&r, BRISK_EUNSUPPORTED, "version 1 is unsupported (only 2 and 3)");
    if (gf->version != 2 && gf->version != 3)
        return rd_fail(&r, BRISK_EFORMAT, "version %u is unknown (only 2 and 3 are supported)%s",
                       gf->version, (gf->version & 0xffff) == 0 ? "; big-endian file?" : "");
    if ((rc = rd_u64(&r, &n_tensors, "tensor count")))
        return rc;
    if ((rc = rd_u64(&r, &n_kv, "kv count")))
        return rc;
    if (n_kv > rd_left(&r) / GGUF_MIN_KV_BYTES)
        return rd_fail(&r, BRISK_EFORMAT, "kv count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)n_kv, rd_left(&r));
    if (n_tensors > rd_left(&r) / GGUF_MIN_TENSOR_INFO_BYTES)
        return rd_fail(&r, BRISK_EFORMAT, "tensor count %llu cannot fit in the %zu bytes left",
                       (unsigned long long)n_tensors, rd_left(&r));

    /* The arrays grow as entries parse (doubling, never past the declared
     * count), so a file that lies about its counts costs no memory upfront. */
    size_t cap = 0;
    r.sect = "kv";
    for (uint64_t i = 0; i < n_kv; i++) {
        if (brisk_grow_libc(&gf->kvs, &cap, (size_t)i + 1, sizeof *gf->kvs, 16, (size_t)n_kv))
            return brisk_set_err(err, err_len, BRISK_ENOMEM, "gguf: out of memory");
        r.idx = (int64_t)i;
        r.name.len = 0;
        memset(&gf->kvs[i], 0, sizeof gf->kvs[i]);
        if ((rc = parse_kv(&r, &gf->kvs[i])))
            return rc;
        gf->n_kv = (int64_t)i + 1;
    }
    rc = index_build(&gf->kv_index, gf->kvs, sizeof *gf->kvs, gf->n_kv, &dup);
    if (rc < 0)
        return brisk_set_err(err, err_len, rc, "gguf: out of memory");
    if (rc > 0) {
        char k[80];
        fmt_name(k, sizeof k, gf->kvs[dup].key);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "gguf: duplicate key '%s'", k);
    }

    gf->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_key(gf, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &gf->kvs[ai];
        uint32_t a = 0;
        if (kv->type != GGUF_TYPE_UINT32)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "gguf: key 'general.alignment': type %s, expected u32",
                                 gguf_type_name(kv->type));
        memcpy(&a, kv->val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return brisk_set_err(err, err_len, BRISK_EFORMAT,
                                 "gguf: key 'general.alignment': %u is not a power of two", a);
        gf->alignment = a;
    }

    cap = 0;
    r.sect = "tensor";
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (brisk_grow_libc(&gf->tensors, &cap, (size_t)i + 1, sizeof *gf->tensors, 16,
                            (size_t)n_tensors))
            return brisk_set_err(err, err_len, BRISK_ENOMEM, "gguf: out of memory");
        r.idx = (int64_t)i;
        r.name.len = 0;
        memset(&gf->tensors[i], 0, sizeof gf->tensors[i]);
        if ((rc = parse_tensor_info(&r, &gf->tensors[i])))
            return rc;
        gf->n_tensors = (int64_t)i + 1;
    }
    rc = index_build(&gf->t_index, gf->tensors, sizeof *gf->tensors, gf->n_tensors, &dup);
    if (rc < 0)
        return brisk_set_err(err, err_len, rc, "gguf: out of memory");
    if (rc > 0) {
        char k[80];
        fmt_name(k, sizeof k, gf->tensors[dup].name);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "gguf: duplicate tensor name '%s'", k);
    }

    /* The data section starts at the next multiple of the alignment; r.pos
     * is at most the file size, so adding alignment - 1 cannot wrap unless
     * the file is within 4 GiB of SIZE_MAX, which no mapping can be. */
    if (r.pos > SIZE_MAX - (gf->alignment - 1))
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "gguf: header too large");
    gf->data_off = (r.pos + gf->alignment - 1) / gf->alignment * gf->alignment;
    return place_tensors(gf, &r);
}

static int open_common(const uint8_t *base, size_t size, int mapped, gguf_file **out, char *err,
                       size_t err_len) {
    gguf_file *gf = calloc(1, sizeof *gf);
    if (!gf)
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "gguf: out of memory");
    gf->base = base;
    gf->size = size;
    gf->mapped = mapped;
    int rc = parse(gf, err, err_len);
    if (rc) {
        /* The caller keeps its buffer; an mmap made by gguf_open is undone
         * there, so it is not unmapped here. */
        gf->mapped = 0;
        gguf_close(gf);
        return rc;
    }
    *out = gf;
    return 0;
}

int gguf_open_memory(const void *buf, size_t len, gguf_file **out, char *err, size_t err_len) {
    if (!out)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "gguf: out is NULL");
    *out = NULL;
    if (!buf && len > 0)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "gguf: buffer is NULL");
    return open_common(buf, len, 0, out, err, err_len);
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t err_len) {
    struct stat st;
    if (!out)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "gguf: out is NULL");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "gguf: cannot open '%s': %s", path,
                             strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EIO, "gguf: '%s' is not a regular file%s%s", path,
                             e ? ": " : "", e ? strerror(e) : "");
    }
    if (st.st_size == 0) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EFORMAT, "gguf: '%s' is empty", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_EIO, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (m == MAP_FAILED)
        return brisk_set_err(err, err_len, BRISK_EIO, "gguf: cannot map '%s': %s", path,
                             strerror(e));
    int rc = open_common(m, size, 1, out, err, err_len);
    if (rc)
        munmap(m, size);
    return rc;
}

void gguf_close(gguf_file *gf) {
    if (!gf)
        return;
    if (gf->mapped)
        munmap((void *)gf->base, gf->size);
    free(gf->kv_index.slots);
    free(gf->t_index.slots);
    free(gf->kvs);
    free(gf->tensors);
    free(gf);
}

/* ---- accessors ------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *gf) {
    return gf->version;
}
uint32_t gguf_alignment(const gguf_file *gf) {
    return gf->alignment;
}
size_t gguf_file_size(const gguf_file *gf) {
    return gf->size;
}
size_t gguf_data_offset(const gguf_file *gf) {
    return gf->data_off;
}
int64_t gguf_n_kv(const gguf_file *gf) {
    return gf->n_kv;
}
int64_t gguf_n_tensors(const gguf_file *gf) {
    return gf->n_tensors;
}

int64_t gguf_find_key(const gguf_file *gf, const char *key) {
    return index_find(&gf->kv_index, gf->kvs, sizeof *gf->kvs, key, strlen(key));
}

gguf_str gguf_key_at(const gguf_file *gf, int64_t i) {
    gguf_str none = {0, ""};
    return i >= 0 && i < gf->n_kv ? gf->kvs[i].key : none;
}

gguf_type gguf_kv_type(const gguf_file *gf, int64_t i) {
    return i >= 0 && i < gf->n_kv ? gf->kvs[i].type : (gguf_type)-1;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *gf, int64_t i) {
    return i >= 0 && i < gf->n_tensors ? &gf->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *gf, const char *name) {
    int64_t i = index_find(&gf->t_index, gf->tensors, sizeof *gf->tensors, name, strlen(name));
    return i >= 0 ? &gf->tensors[i] : NULL;
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.data, c, n) == 0;
}

static const gguf_kv *kv_get(const gguf_file *gf, const char *key) {
    int64_t i = gguf_find_key(gf, key);
    return i >= 0 ? &gf->kvs[i] : NULL;
}

/* Reads an integer kv as either a signed or an unsigned 64-bit value.
 * Returns 0, or BRISK_EFORMAT for a non-integer type. */
static int kv_int(const gguf_kv *kv, int *is_signed, int64_t *s, uint64_t *u) {
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: *is_signed = 0; break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: *is_signed = 1; break;
    default: return BRISK_EFORMAT;
    }
    /* Little-endian host: the value's bytes are the low bytes of raw; a
     * narrower signed value is then sign-extended by hand. */
    size_t n = gguf_type_size(kv->type);
    uint64_t raw = 0;
    memcpy(&raw, kv->val, n);
    if (*is_signed && n < 8 && ((raw >> (8 * n - 1)) & 1))
        raw |= ~0ull << (8 * n);
    *u = raw;
    *s = (int64_t)raw;
    return 0;
}

int gguf_get_u32(const gguf_file *gf, const char *key, uint32_t *out) {
    const gguf_kv *kv = kv_get(gf, key);
    int is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv_int(kv, &is_signed, &s, &u))
        return BRISK_EFORMAT;
    if (is_signed ? (s < 0 || s > (int64_t)UINT32_MAX) : u > UINT32_MAX)
        return BRISK_EFORMAT;
    *out = is_signed ? (uint32_t)s : (uint32_t)u;
    return 0;
}

int gguf_get_i64(const gguf_file *gf, const char *key, int64_t *out) {
    const gguf_kv *kv = kv_get(gf, key);
    int is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv_int(kv, &is_signed, &s, &u))
        return BRISK_EFORMAT;
    if (!is_signed && u > (uint64_t)INT64_MAX)
        return BRISK_EFORMAT;
    *out = is_signed ? s : (int64_t)u;
    return 0;
}

int gguf_get_f32(const gguf_file *gf, const char *key, float *out) {
    const gguf_kv *kv = kv_get(gf, key);
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(out, kv->val, 4);
        return 0;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
        return 0;
    }
    return BRISK_EFORMAT;
}

int gguf_get_bool(const gguf_file *gf, const char *key, int *out) {
    const gguf_kv *kv = kv_get(gf, key);
    int is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv->type == GGUF_TYPE_BOOL) {
        *out = kv->val[0] != 0;
        return 0;
    }
    /* Some writers store flags as integers; 0 and 1 are unambiguous. */
    if (kv_int(kv, &is_signed, &s, &u))
        return BRISK_EFORMAT;
    if (is_signed ? (s != 0 && s != 1) : u > 1)
        return BRISK_EFORMAT;
    *out = is_signed ? (int)s : (int)u;
    return 0;
}

int gguf_get_str(const gguf_file *gf, const char *key, gguf_str *out) {
    const gguf_kv *kv = kv_get(gf, key);
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv->type != GGUF_TYPE_STRING)
        return BRISK_EFORMAT;
    *out = kv->str;
    return 0;
}

int gguf_get_arr(const gguf_file *gf, const char *key, gguf_type *elem_type, uint64_t *n,
                 const void **data) {
    const gguf_kv *kv = kv_get(gf, key);
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv->type != GGUF_TYPE_ARRAY)
        return BRISK_EFORMAT;
    *elem_type = kv->arr_type;
    *n = kv->arr_n;
    *data = kv->arr_data;
    return 0;
}

int gguf_get_arr_str(const gguf_file *gf, const char *key, gguf_str **out, uint64_t *n) {
    const gguf_kv *kv = kv_get(gf, key);
    if (!kv)
        return BRISK_ENOTFOUND;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return BRISK_EFORMAT;
    /* The count was checked against the file at open (each string takes at
     * least 8 bytes), so this size cannot overflow. */
    gguf_str *v = malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof *v);
    if (!v)
        return BRISK_ENOMEM;
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        memcpy(&v[i].len, p, 8);
        v[i].data = (const char *)p + 8;
        p += 8 + v[i].len;
    }
    *out = v;
    *n = kv->arr_n;
    return 0;
}

void gguf_release_tensor_pages(const gguf_file *gf, const gguf_tensor *t) {
    if (!gf->mapped || !t || t->nbytes == 0)
        return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return;
    /* Only whole pages inside the tensor: a page shared with a neighbour that
     * is still used from the mapping must stay. */
    uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)page - 1);
    if (hi <= lo)
        return;
    /* The mapping is private and read-only, so dropping its pages loses
     * nothing: a later read faults them back in from the file. */
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
