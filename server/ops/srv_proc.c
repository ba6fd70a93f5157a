/* srv_proc.c - process_* figures from /proc (see srv_proc.h). */
#define _GNU_SOURCE
#include "server/ops/srv_proc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Reads a small /proc file whole into buf (NUL-terminated). Returns its
 * length or -1. */
static long proc_read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    int err = ferror(f);
    fclose(f);
    if (err)
        return -1;
    buf[n] = '\0';
    return (long)n;
}

int srv_proc_parse_stat(const char *line, long long btime, long ticks_per_s, long page_size,
                        srv_proc_stats *out) {
    if (!line || !out || btime <= 0 || ticks_per_s <= 0 || page_size <= 0)
        return -1;
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
     * the fields start after the last ')'. Field 3 (state) is then first. */
    const char *p = strrchr(line, ')');
    if (!p)
        return -1;
    p++;
    /* fields 3..24: state, then 21 numbers; we want utime (14), stime (15),
     * starttime (22), vsize (23), rss (24). */
    unsigned long long v[25] = {0};
    int field = 3;
    while (field <= 24) {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            return -1;
        if (field == 3) {
            while (*p && *p != ' ')
                p++;
        } else {
            char *end;
            errno = 0;
            long long x = strtoll(p, &end, 10);
            if (end == p || errno == ERANGE || (*end != ' ' && *end != '\n' && *end != '\0'))
                return -1;
            v[field] = x < 0 ? 0 : (unsigned long long)x; /* rss can read -1 briefly */
            p = end;
        }
        field++;
    }
    out->cpu_seconds = (double)(v[14] + v[15]) / (double)ticks_per_s;
    out->start_time_s = (double)btime + (double)v[22] / (double)ticks_per_s;
    out->vsize_bytes = (double)v[23];
    out->rss_bytes = (double)v[24] * (double)page_size;
    return 0;
}

static long long proc_boot_time(void) {
    static long long cached;
    if (cached > 0)
        return cached;
    char buf[16384];
    if (proc_read_file("/proc/stat", buf, sizeof buf) < 0)
        return -1;
    const char *b = strstr(buf, "\nbtime ");
    if (!b)
        return -1;
    long long t = strtoll(b + 7, NULL, 10);
    if (t <= 0)
        return -1;
    cached = t;
    return t;
}

static double proc_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return (double)(n > 0 ? n - 1 : 0); /* not the fd of the opendir itself */
}

int srv_proc_sample(srv_proc_stats *out) {
    memset(out, 0, sizeof *out);
    char line[1024];
    long long btime = proc_boot_time();
    if (btime < 0 || proc_read_file("/proc/self/stat", line, sizeof line) < 0 ||
        srv_proc_parse_stat(line, btime, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), out) < 0) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->open_fds = proc_count_fds();
    struct rlimit rl;
    out->max_fds = (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                       ? (double)rl.rlim_cur
                       : -1;
    return 0;
}
