/* test_brisk_file.c - reading a small file whole (common/brisk_file.h): the
 * text and its length, NUL-terminated (an empty file too); a file of exactly
 * the limit read, one byte more refused; a missing file and a directory
 * refused with one line naming the file (with and without `what`); with the
 * fault injector compiled in (the ASan build), a failed allocation is
 * BRISK_ENOMEM. brisk_wipe zeroes what it is given. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_file.h"

/* Writes n bytes of c (and then tail) into a new temporary file; its path
 * goes into path (at least 64 bytes). */
static int temp_file(char *path, char c, size_t n, const char *tail) {
    snprintf(path, 64, "/tmp/test_brisk_file_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        fputc(c, f);
    fputs(tail, f);
    return fclose(f);
}

static void test_read(void) {
    char path[64], err[256];
    char *text = (char *)1;
    size_t len = 99;
    CHECK_COND(temp_file(path, 'x', 0, "a b\nc\0ignored") == 0);
    CHECK(brisk_file_read(path, 100, "test file", &text, &len, err, sizeof err) == 0 && text &&
              len == 5 && !memcmp(text, "a b\nc", 6),
          "a small file: %s", err);
    free(text);
    unlink(path);

    CHECK_COND(temp_file(path, 'x', 0, "") == 0);
    CHECK(brisk_file_read(path, 100, NULL, &text, &len, err, sizeof err) == 0 && text && len == 0 &&
              text[0] == '\0',
          "an empty file");
    free(text);
    unlink(path);

    CHECK_COND(temp_file(path, 'k', 4096, "") == 0);
    CHECK(brisk_file_read(path, 4096, NULL, &text, &len, err, sizeof err) == 0 && len == 4096 &&
              text[4095] == 'k' && text[4096] == '\0',
          "exactly the limit");
    free(text);
    char want[160];
    snprintf(want, sizeof want, "key file '%s' is over 4095 bytes", path);
    CHECK(brisk_file_read(path, 4095, "key file", &text, &len, err, sizeof err) == BRISK_EINVAL &&
              !text && len == 0 && !strcmp(err, want),
          "one byte over: %s", err);
    unlink(path);

    CHECK(brisk_file_read("/nonexistent/f", 10, "key file", &text, &len, err, sizeof err) ==
                  BRISK_EIO &&
              !text && !strncmp(err, "cannot open key file '/nonexistent/f': ", 39) &&
              bt_one_line(err),
          "missing: %s", err);
    CHECK(brisk_file_read("/nonexistent/f", 10, NULL, &text, &len, err, sizeof err) == BRISK_EIO &&
              !strncmp(err, "cannot open '/nonexistent/f': ", 30),
          "missing, no what: %s", err);
    CHECK(brisk_file_read(".", 10, NULL, &text, &len, err, sizeof err) == BRISK_EIO && !text &&
              !strncmp(err, "cannot read '.': ", 17) && bt_one_line(err),
          "a directory: %s", err);
}

static void test_fault(void) {
    if (!brisk_fault_compiled())
        return;
    char path[64], err[256];
    char *text = NULL;
    size_t len = 0;
    CHECK_COND(temp_file(path, 'x', 10, "") == 0);
    CHECK_COND(brisk_fault_configure("nth:1", err, sizeof err) == 0);
    brisk_fault_arm(1);
    int rc = brisk_file_read(path, 100, NULL, &text, &len, err, sizeof err);
    brisk_fault_arm(0);
    brisk_fault_configure("off", err, sizeof err);
    CHECK(rc == BRISK_ENOMEM && !text && !strcmp(err, "out of memory"), "injected: %d", rc);
    unlink(path);
}

static void test_wipe(void) {
    unsigned char b[37];
    memset(b, 0xa5, sizeof b);
    brisk_wipe(b + 1, 35);
    int ok = b[0] == 0xa5 && b[36] == 0xa5;
    for (int i = 1; i < 36; i++)
        ok &= b[i] == 0;
    CHECK(ok, "wiped exactly the bytes given");
    brisk_wipe(NULL, 0);
}

int main(void) {
    test_read();
    test_fault();
    test_wipe();
    return BT_SUMMARY("test_brisk_file");
}
