/* srv_proc.h - the process's own resource figures for GET /metrics, in the
 * names every Prometheus client library uses (process_*), read from Linux's
 * /proc on each scrape: resident and virtual memory, open file descriptors
 * and their limit, CPU seconds, and the start time. They let an operator
 * see memory growth, fd leaks and restarts (process_start_time_seconds
 * changes) without kube-state-metrics or cAdvisor.
 *
 * Reading costs one open/read of /proc/self/stat, one of /proc/stat (boot
 * time, cached after the first read) and a readdir of /proc/self/fd: tens of
 * microseconds at brisk's fd counts, on the loop thread at scrape rate. */
#ifndef SRV_PROC_H
#define SRV_PROC_H

typedef struct srv_proc_stats {
    double rss_bytes;    /* resident set size */
    double vsize_bytes;  /* virtual memory size */
    double open_fds;     /* entries of /proc/self/fd, -1 if unreadable */
    double max_fds;      /* RLIMIT_NOFILE soft limit, -1 if unlimited/unknown */
    double cpu_seconds;  /* user + system CPU time */
    double start_time_s; /* Unix time the process started */
} srv_proc_stats;

/* Fills *out for this process. Returns 0, or -1 (out zeroed) when /proc is
 * missing or unparsable: the caller then leaves the families out. */
int srv_proc_sample(srv_proc_stats *out);

/* Parses the text of a /proc/PID/stat line and /proc/stat's "btime" into
 * *out (fds left as they are), with the clock tick rate and page size given.
 * Split out for the unit tests. Returns 0, or -1 if a field is missing or
 * out of range. */
int srv_proc_parse_stat(const char *stat_line, long long btime, long ticks_per_s, long page_size,
                        srv_proc_stats *out);

#endif
