/* brisk_file.c - see brisk_file.h. */
#include "common/brisk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"

void brisk_wipe(void *p, size_t n) {
    volatile unsigned char *q = p;
    for (size_t i = 0; i < n; i++)
        q[i] = 0;
}

int brisk_file_read(const char *path, size_t max, const char *what, char **text, size_t *len,
                    char *err, size_t err_len) {
    const char *w = what ? what : "", *sp = what ? " " : "";
    *text = NULL;
    *len = 0;
    if (max >= SIZE_MAX)
        return brisk_set_err(err, err_len, BRISK_EINVAL, "%s%s'%s': no size limit", w, sp, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return brisk_set_err(err, err_len, BRISK_EIO, "cannot open %s%s'%s': %s", w, sp, path,
                             strerror(errno));
    /* One byte more than allowed: reading it tells an over-long file. */
    char *buf = brisk_malloc(max + 1);
    if (!buf) {
        close(fd);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "out of memory");
    }
    size_t n = 0;
    int rc = 0;
    while (n <= max) {
        ssize_t got = read(fd, buf + n, max + 1 - n);
        if (got == 0)
            break;
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = brisk_set_err(err, err_len, BRISK_EIO, "cannot read %s%s'%s': %s", w, sp, path,
                               strerror(errno));
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    if (rc == 0 && n > max)
        rc = brisk_set_err(err, err_len, BRISK_EINVAL, "%s%s'%s' is over %zu bytes", w, sp, path,
                           max);
    if (rc < 0) {
        brisk_wipe(buf, n);
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}
