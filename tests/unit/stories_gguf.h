/* stories_gguf.h - the engine tests' model: ../shared's stories260K converted
 * to a GGUF in a fresh temporary folder. */
#ifndef BRISK_TEST_STORIES_GGUF_H
#define BRISK_TEST_STORIES_GGUF_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "brisk_test.h"
#include "models/llama2c.h"

/* Converts stories260K into dir_tmpl (a mkdtemp template, filled in) and
 * writes the GGUF's path into path. 1: ready; 0: the shared model is
 * missing (a SKIP line naming `test` printed); -1: a failure (recorded). */
static inline int bt_stories_gguf(const char *test, char *dir_tmpl, char *path, size_t path_len) {
    char src[1024], tok[1024], err[256];
    snprintf(src, sizeof src, "%s/models/stories260K.bin", bt_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", bt_shared_dir());
    if (access(src, R_OK) != 0) {
        printf("%s: SKIP: %s not found (set BRISK_SHARED_DIR)\n", test, src);
        return 0;
    }
    CHECK(mkdtemp(dir_tmpl) != NULL, "mkdtemp %s", dir_tmpl);
    if (bt_failed)
        return -1;
    snprintf(path, path_len, "%s/stories260K.gguf", dir_tmpl);
    int rc = model_convert_llama2c(src, tok, path, err, sizeof err);
    CHECK(rc == 0, "convert: %s", err);
    return rc == 0 ? 1 : -1;
}

#endif
