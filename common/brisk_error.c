#include "common/brisk_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *brisk_strerror(int code) {
    switch (code) {
    case BRISK_OK: return "ok";
    case BRISK_EINVAL: return "invalid argument";
    case BRISK_ENOMEM: return "out of memory";
    case BRISK_EIO: return "I/O error";
    case BRISK_EFORMAT: return "malformed file";
    case BRISK_EUNSUPPORTED: return "unsupported";
    case BRISK_ENOTFOUND: return "not found";
    case BRISK_ERANGE: return "out of range";
    case BRISK_ENOSPC: return "no space";
    default: return "unknown error";
    }
}

int brisk_set_err(char *err, size_t err_len, int code, const char *fmt, ...) {
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}
