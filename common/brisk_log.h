/* brisk_log.h - leveled logging to stderr, thread-safe (one fprintf a line). */
#ifndef BRISK_LOG_H
#define BRISK_LOG_H

typedef enum {
    BRISK_LOG_DEBUG = 0,
    BRISK_LOG_INFO,
    BRISK_LOG_WARN,
    BRISK_LOG_ERROR
} brisk_log_level;

void brisk_log_set_level(brisk_log_level level);
void brisk_log(brisk_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define BRISK_DEBUG(...) brisk_log(BRISK_LOG_DEBUG, __VA_ARGS__)
#define BRISK_INFO(...) brisk_log(BRISK_LOG_INFO, __VA_ARGS__)
#define BRISK_WARN(...) brisk_log(BRISK_LOG_WARN, __VA_ARGS__)
#define BRISK_ERROR(...) brisk_log(BRISK_LOG_ERROR, __VA_ARGS__)

/* Monotonic clock in seconds, for timing and rates. */
double brisk_now(void);

#endif
