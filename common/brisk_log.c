#include "common/brisk_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static _Atomic int g_level = BRISK_LOG_INFO;

void brisk_log_set_level(brisk_log_level level) {
    atomic_store(&g_level, (int)level);
}

void brisk_log(brisk_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if ((int)level < atomic_load(&g_level))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line so that lines from different threads never interleave. */
    fprintf(stderr, "brisk %s: %s\n", names[level], line);
}

double brisk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
