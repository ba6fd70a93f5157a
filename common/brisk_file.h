/* brisk_file.h - reading a small file whole (the API key file, the limits
 * file), with one size limit and one set of errors, and wiping memory that
 * held secrets before it goes back to malloc. */
#ifndef BRISK_FILE_H
#define BRISK_FILE_H

#include <stddef.h>

/* Reads the file at path, at most max bytes, into *text: allocated through
 * brisk_malloc (the request path's seam: a SIGHUP reload runs there),
 * NUL-terminated, *len bytes before the NUL; the caller frees it. `what`
 * names the file in the messages ("api key file"), or NULL for the path
 * alone. Returns 0, or, with *text NULL and one line in err:
 *   BRISK_EIO     "cannot open <what> '<path>': <reason>",
 *                 "cannot read <what> '<path>': <reason>";
 *   BRISK_EINVAL  "<what> '<path>' is over <max> bytes";
 *   BRISK_ENOMEM  "out of memory".
 * What was read is wiped before a failure frees it (a key file's text is
 * secret); a caller holding secrets wipes *text itself (brisk_wipe). */
int brisk_file_read(const char *path, size_t max, const char *what, char **text, size_t *len,
                    char *err, size_t err_len);

/* Zeroes p[0..n) with stores the compiler may not drop as dead (volatile):
 * API keys, their digests and the text of key files, before free. p may be
 * NULL when n is 0. */
void brisk_wipe(void *p, size_t n);

#endif
