/* brisk_error.h - the one error taxonomy used across modules.
 *
 * Internal calls return 0 on success or a negative BRISK_E* code. Functions
 * that can fail for a reason worth telling a user also take a caller-owned
 * `char *err, size_t err_len` buffer and write a one-line message into it.
 * The HTTP layer maps these codes to a status, an OpenAI error type and code
 * in one function, srv_error_for_code (server/http/srv_http.h; srv_respond_code
 * answers with it); nothing else should invent its own codes. */
#ifndef BRISK_ERROR_H
#define BRISK_ERROR_H

#include <stddef.h>

enum {
    BRISK_OK = 0,
    BRISK_EINVAL = -1,       /* invalid argument or malformed input */
    BRISK_ENOMEM = -2,       /* allocation failed */
    BRISK_EIO = -3,          /* file or OS I/O error */
    BRISK_EFORMAT = -4,      /* a file is malformed (GGUF, tokenizer, ...) */
    BRISK_EUNSUPPORTED = -5, /* well-formed but not supported (arch, type) */
    BRISK_ENOTFOUND = -6,    /* a key, tensor or token is missing */
    BRISK_ERANGE = -7,       /* a value is out of its allowed range */
    BRISK_ENOSPC = -8,       /* a caller buffer or cache is too small */
};

/* Returns a static short name for a code ("invalid argument", ...). */
const char *brisk_strerror(int code);

/* printf into err (may be NULL), always NUL-terminated; returns `code`. */
int brisk_set_err(char *err, size_t err_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
