/* fuzz_replay.c - a main() for the fuzz targets outside libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file of the directories (and files)
 * named on the command line, in name order, so that every build (Release,
 * ASan+UBSan, TSan, gcc) has each target as a plain program and CTest
 * replays the corpora in tests/fuzz/corpus/ as regression tests.
 *
 *   build/tests/fuzz_gguf tests/fuzz/corpus/fuzz_gguf [more dirs or files]
 *
 * Arguments starting with '-' are libFuzzer options and are ignored, so one
 * command line (`fuzz_x -runs=0 DIR`) replays under both drivers. A broken
 * property traps (see fuzz_util.h) and a sanitizer report aborts: either
 * fails the test. Naming nothing, or a path that does not exist, or
 * directories without a single input, is an error too: an empty replay
 * would pass without testing anything. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_util.h"

/* A target may leave out LLVMFuzzerInitialize. */
#pragma weak LLVMFuzzerInitialize

/* Corpus files stay small (docs/FUZZING.md); anything bigger is not a fuzz
 * input. */
#define REPLAY_MAX_BYTES (16u << 20)

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = cap <= REPLAY_MAX_BYTES ? realloc(buf, cap) : NULL;
            if (!nb) {
                fprintf(stderr, "fuzz_replay: %s is too large or memory ran out\n", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    /* An exact-size copy, so that a read past the input's end is caught by
     * ASan here as it is under libFuzzer. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    if (len)
        memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir (not recursing, skipping dot files) in
 * name order; returns how many ran or -1. */
static long run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(l)))
            break;
        snprintf(names[n], l, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    long ran = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (ran >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            ran = run_file(names[i]) < 0 ? -1 : ran + 1;
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    long total = 0;
    int paths = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        paths++;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: %s does not exist\n", argv[i]);
            return 1;
        }
        long ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) < 0 ? -1 : 1);
        if (ran < 0)
            return 1;
        total += ran;
    }
    if (paths == 0 || total == 0) {
        fprintf(stderr, "usage: %s CORPUS_DIR|FILE... (found no input to replay)\n", argv[0]);
        return 1;
    }
    printf("%s: replayed %ld inputs from %d path(s)\n", argv[0], total, paths);
    return 0;
}
