/* test_srv_proc.c - process_* figures: the /proc/PID/stat parser on written
 * lines (hostile ones included) and a live sample of this process checked
 * against what the test itself can observe. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "server/ops/srv_proc.h"

static void test_parse(void) {
    /* pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice threads itrealvalue
     * starttime vsize rss ... */
    const char *line =
        "4242 (br isk) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 "
        "3 0 12345 987654321 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1\n";
    srv_proc_stats st;
    memset(&st, 0, sizeof st);
    CHECK(srv_proc_parse_stat(line, 1700000000, 100, 4096, &st) == 0, "parse");
    CHECK(st.cpu_seconds == 3.0, "cpu %f", st.cpu_seconds);
    CHECK(fabs(st.start_time_s - (1700000000.0 + 123.45)) < 1e-6, "start %f", st.start_time_s);
    CHECK(st.vsize_bytes == 987654321.0, "vsize %f", st.vsize_bytes);
    CHECK(st.rss_bytes == 2500.0 * 4096, "rss %f", st.rss_bytes);

    /* Refused: truncated lines, no ')', non-numbers, bad rates. */
    const char *bad[] = {
        "",
        "4242 br isk S 1",
        "4242 (brisk) S 1 2 3",
        "4242 (brisk) S 1 4242 4242 0 -1 4194560 1000 0 0 0 2x0 50 0 0 20 0 3 0 12345 9 25\n",
        "4242 (brisk) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0 12345 "
        "99999999999999999999999 25\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(srv_proc_parse_stat(bad[i], 1700000000, 100, 4096, &st) == -1, "bad line %zu", i);
    CHECK(srv_proc_parse_stat(line, 0, 100, 4096, &st) == -1, "btime 0");
    CHECK(srv_proc_parse_stat(line, 1, 0, 4096, &st) == -1, "ticks 0");
    CHECK(srv_proc_parse_stat(NULL, 1, 100, 4096, &st) == -1, "NULL line");
}

static void test_live(void) {
    srv_proc_stats a, b;
    CHECK(srv_proc_sample(&a) == 0, "sample");
    /* Touch 64 MiB of fresh memory and open 20 more descriptors: both must
     * show in the next sample. */
    size_t n = 64u << 20;
    unsigned char *mem = malloc(n);
    CHECK(mem != NULL, "malloc");
    if (!mem)
        return;
    for (size_t i = 0; i < n; i += 4096)
        mem[i] = (unsigned char)(i * 31 + 7);
    int fds[20];
    for (int i = 0; i < 20; i++)
        fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(srv_proc_sample(&b) == 0, "sample 2");
    CHECK(b.rss_bytes - a.rss_bytes > 48.0 * (1 << 20), "rss grew by %.0f",
          b.rss_bytes - a.rss_bytes);
    CHECK(b.open_fds - a.open_fds == 20, "fds %f -> %f", a.open_fds, b.open_fds);
    CHECK(b.max_fds == -1 || b.max_fds >= b.open_fds, "max fds %f", b.max_fds);
    double now = (double)time(NULL);
    CHECK(b.start_time_s > now - 3600 && b.start_time_s <= now + 1, "start %f now %f",
          b.start_time_s, now);
    CHECK(b.cpu_seconds >= a.cpu_seconds && b.cpu_seconds >= 0, "cpu");
    CHECK(b.vsize_bytes >= b.rss_bytes, "vsize >= rss");
    for (int i = 0; i < 20; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    volatile unsigned char sink = mem[4096 * 3];
    (void)sink;
    free(mem);
}

int main(void) {
    test_parse();
    test_live();
    return BT_SUMMARY("test_srv_proc");
}
