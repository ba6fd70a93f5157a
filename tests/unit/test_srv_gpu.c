/* test_srv_gpu.c - GPU metrics through NVML (server/srv_nvml.c, srv_gpu.c)
 * against libfake_nvml.so (tests/tools/fake_nvml.c), which answers from a
 * file: loading (missing library, not NVML, init failure), the auto/on/off
 * choice, rendered values against random configured ones, hostile answers
 * (unterminated names with control bytes, impossible memory and utilisation,
 * a huge device count, failing calls) counted and left out, staleness, the
 * sampler thread picking up changes, /metrics not blocked by a stalled NVML
 * call, nvmlShutdown at free, and promtool on the rendered text. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "server/srv_gpu.h"

#ifndef FAKE_NVML_LIB
#error "FAKE_NVML_LIB: the path of libfake_nvml.so (CMakeLists.txt sets it)"
#endif

static char cfg_path[256], shutdown_path[256];

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Writes the fake's settings atomically (a sampler thread may be reading). */
static void write_cfg(const char *text) {
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg_path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    if (rename(tmp, cfg_path) != 0) {
        perror("rename");
        exit(1);
    }
}

static srv_gpu_config cfg_of(srv_gpu_mode mode, double interval, const char *lib) {
    srv_gpu_config c = {mode, interval, lib, "m\"1"};
    return c;
}

static char *render(srv_gpu *g, double now) {
    char *t = malloc(1);
    size_t len = 0;
    t[0] = '\0';
    if (srv_gpu_render_append(g, now, &t, &len) < 0) {
        fprintf(stderr, "render failed\n");
        exit(1);
    }
    if (strlen(t) != len)
        fprintf(stderr, "render length mismatch\n");
    return t;
}

/* The value of the sample `name{model_name="m\"1",gpu="I"}`, NAN if absent. */
static double gpu_value(const char *text, const char *name, int gpu) {
    char series[256];
    if (gpu >= 0)
        snprintf(series, sizeof series, "%s{model_name=\"m\\\"1\",gpu=\"%d\"} ", name, gpu);
    else
        snprintf(series, sizeof series, "%s{model_name=\"m\\\"1\"} ", name);
    const char *p = strstr(text, series);
    if (!p || (p != text && p[-1] != '\n'))
        return NAN;
    return strtod(p + strlen(series), NULL);
}

static void test_clean_str(void) {
    char out[SRV_NVML_STR_LEN], buf[SRV_NVML_STR_LEN];
    memset(buf, 'A', sizeof buf); /* no NUL anywhere */
    buf[5] = '\x01';
    buf[6] = (char)0xc3;
    srv_nvml_clean_str(out, sizeof out, buf, sizeof buf);
    CHECK(strlen(out) == SRV_NVML_STR_LEN - 1, "len %zu", strlen(out));
    CHECK(out[5] == '?' && out[6] == '?' && out[7] == 'A', "%.8s", out);
    srv_nvml_clean_str(out, sizeof out, "H100\0junk", 9);
    CHECK(!strcmp(out, "H100"), "%s", out);
    srv_nvml_clean_str(out, 3, "abcdef", 6);
    CHECK(!strcmp(out, "ab"), "%s", out);
    srv_gpu_mode m = SRV_GPU_METRICS_OFF;
    CHECK(srv_gpu_mode_parse("auto", &m) == 0 && m == SRV_GPU_METRICS_AUTO, "auto");
    CHECK(srv_gpu_mode_parse("on", &m) == 0 && m == SRV_GPU_METRICS_ON, "on");
    CHECK(srv_gpu_mode_parse("off", &m) == 0 && m == SRV_GPU_METRICS_OFF, "off");
    CHECK(srv_gpu_mode_parse("yes", &m) == BRISK_EINVAL, "yes");
    CHECK(srv_gpu_mode_parse("", &m) == BRISK_EINVAL, "empty");
}

static void test_open_failures(void) {
    char err[512];
    srv_nvml *n = (srv_nvml *)1;
    int rc = srv_nvml_open("/nonexistent/libnvidia-ml.so.1", &n, err, sizeof err);
    CHECK(rc == BRISK_ENOTFOUND && n == NULL, "rc %d", rc);
    CHECK(bt_one_line(err) && strstr(err, "/nonexistent/libnvidia-ml.so.1"), "%s", err);
    /* A real library that is not NVML. */
    rc = srv_nvml_open("libm.so.6", &n, err, sizeof err);
    CHECK(rc == BRISK_EUNSUPPORTED && n == NULL, "rc %d", rc);
    CHECK(bt_one_line(err) && strstr(err, "nvmlInit_v2"), "%s", err);
    write_cfg("init_rc 9\ncount 1\n");
    rc = srv_nvml_open(FAKE_NVML_LIB, &n, err, sizeof err);
    CHECK(rc == BRISK_EIO && n == NULL, "rc %d", rc);
    CHECK(bt_one_line(err) && strstr(err, "nvmlInit_v2") && strstr(err, "Driver Not Loaded"), "%s",
          err);

    /* The mode decides what a missing library or no GPU means. */
    srv_gpu *g = (srv_gpu *)1;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_AUTO, 0, "/nonexistent/libnvidia-ml.so.1");
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g == NULL, "auto, missing");
    c.mode = SRV_GPU_METRICS_ON;
    err[0] = '\0';
    rc = srv_gpu_create(&c, &g, err, sizeof err);
    CHECK(rc < 0 && g == NULL && bt_one_line(err) && strstr(err, "--gpu-metrics on"), "%d %s", rc,
          err);
    c.mode = SRV_GPU_METRICS_OFF;
    c.lib_path = FAKE_NVML_LIB;
    write_cfg("count 2\nname.0 A\nuuid.0 GPU-a\ntotal.0 100\nused.0 1\n");
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g == NULL, "off");
    write_cfg("count 0\n");
    c.mode = SRV_GPU_METRICS_AUTO;
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g == NULL, "auto, no GPU");
    c.mode = SRV_GPU_METRICS_ON;
    rc = srv_gpu_create(&c, &g, err, sizeof err);
    CHECK(rc < 0 && g == NULL && strstr(err, "no GPU"), "on, no GPU: %d %s", rc, err);
}

/* Random plausible devices; returns the settings text in buf. */
typedef struct {
    unsigned long long total, used;
    unsigned util, memutil;
} dev_vals;

static void random_devs(dev_vals *v, int n, char *buf, size_t cap, const char *extra) {
    size_t k = (size_t)snprintf(buf, cap, "count %d\n", n);
    for (int i = 0; i < n; i++) {
        v[i].total = (8ull + rnd() % 140) << 30;
        v[i].used = 1 + rnd() % v[i].total;
        v[i].util = 1 + (unsigned)(rnd() % 100);
        v[i].memutil = 1 + (unsigned)(rnd() % 100);
        k += (size_t)snprintf(buf + k, cap - k,
                              "name.%d NVIDIA H100 \"80GB\" \\%d\nuuid.%d GPU-%08llx\n"
                              "total.%d %llu\nused.%d %llu\nutil.%d %u\nmemutil.%d %u\n",
                              i, i, i, (unsigned long long)(rnd() & 0xffffffffu), i, v[i].total, i,
                              v[i].used, i, v[i].util, i, v[i].memutil);
    }
    snprintf(buf + k, cap - k, "%s", extra);
}

static void test_values(void) {
    dev_vals v[4];
    char buf[4096], err[512];
    random_devs(v, 4, buf, sizeof buf, "");
    write_cfg(buf);
    srv_gpu *g = NULL;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0, FAKE_NVML_LIB);
    int rc = srv_gpu_create(&c, &g, err, sizeof err);
    CHECK(rc == 0 && g, "create: %d %s", rc, err);
    if (!g)
        return;
    CHECK(srv_gpu_count(g) == 4, "count %d", srv_gpu_count(g));
    char *t = render(g, brisk_now());
    for (int i = 0; i < 4; i++) {
        CHECK(gpu_value(t, "brisk_gpu_memory_total_bytes", i) == (double)v[i].total, "total %d", i);
        CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", i) == (double)v[i].used, "used %d", i);
        CHECK(fabs(gpu_value(t, "brisk_gpu_utilization_ratio", i) - v[i].util / 100.0) < 1e-12,
              "util %d", i);
        CHECK(fabs(gpu_value(t, "brisk_gpu_memory_utilization_ratio", i) - v[i].memutil / 100.0) <
                  1e-12,
              "memutil %d", i);
        char info[256];
        snprintf(info, sizeof info,
                 "brisk_gpu_info{model_name=\"m\\\"1\",gpu=\"%d\",name=\"NVIDIA "
                 "H100 \\\"80GB\\\" \\\\%d\",uuid=\"GPU-",
                 i, i);
        CHECK(strstr(t, info) != NULL, "info line of gpu %d missing:\n%s", i, t);
    }
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "errors");
    CHECK(strstr(t, "# TYPE brisk_gpu_metrics_errors_total counter\n") != NULL, "counter type");
    free(t);

    /* Stale: a sample older than 3 intervals + 1 s (interval 0 here: 1 s)
     * is not rendered; the error counter still is. */
    t = render(g, brisk_now() + 1.5);
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_used_bytes", 0)), "stale value rendered");
    CHECK(!strstr(t, "brisk_gpu_info"), "stale info rendered");
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "errors when stale");
    free(t);
    srv_gpu_free(g);
}

static void test_hostile(void) {
    dev_vals v[3];
    char buf[4096], err[512];
    /* gpu 0: unterminated name with control bytes; gpu 1: used > total and
     * utilisation 250 %; gpu 2: memory read fails (GPU lost), name fails. */
    random_devs(v, 3, buf, sizeof buf,
                "name_raw.0 1\nused.1 99999999999999\ntotal.1 1000\nutil.1 250\nmem_rc.2 15\n"
                "name_rc.2 3\n");
    write_cfg(buf);
    srv_gpu *g = NULL;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_AUTO, 0, FAKE_NVML_LIB);
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g, "create: %s", err);
    if (!g)
        return;
    char *t = render(g, brisk_now());
    /* 95 bytes of the 96 NVML may fill, control bytes as '?'. */
    const char *name = strstr(t, "gpu=\"0\",name=\"");
    CHECK(name != NULL, "gpu 0 info missing");
    if (name) {
        name += strlen("gpu=\"0\",name=\"");
        size_t len = strcspn(name, "\"");
        CHECK(len == SRV_NVML_STR_LEN - 1, "name length %zu", len);
        CHECK(!strncmp(name, "NNN?NNNNNNN?", 12), "%.12s", name);
    }
    CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 0) == (double)v[0].used, "gpu 0 used");
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_used_bytes", 1)), "impossible memory rendered");
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_total_bytes", 1)), "impossible total rendered");
    CHECK(isnan(gpu_value(t, "brisk_gpu_utilization_ratio", 1)), "250 %% rendered");
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_used_bytes", 2)), "failed read rendered");
    CHECK(!strstr(t, "gpu=\"2\",name="), "gpu 2 info without a name");
    CHECK(gpu_value(t, "brisk_gpu_utilization_ratio", 2) == v[2].util / 100.0, "gpu 2 util");
    /* Failed or refused: gpu 1 memory, gpu 1 utilisation, gpu 2 memory, gpu 2 name. */
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 4, "errors %g",
          gpu_value(t, "brisk_gpu_metrics_errors_total", -1));
    free(t);

    /* A count NVML cannot mean: capped at 64; the fake refuses handles past
     * its 3 devices, so 61 more errors; the 3 real ones still render. */
    random_devs(v, 3, buf, sizeof buf, "count 4294967295\n");
    write_cfg(buf);
    srv_gpu_sample(g);
    CHECK(srv_gpu_count(g) == SRV_NVML_MAX_GPUS, "count %d", srv_gpu_count(g));
    t = render(g, brisk_now());
    CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 2) == (double)v[2].used, "gpu 2 used");
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_used_bytes", 3)), "gpu 3 rendered");
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 4 + 61, "errors %g",
          gpu_value(t, "brisk_gpu_metrics_errors_total", -1));
    free(t);

    /* The count itself fails mid-run: nothing per GPU, one more error, and
     * the next good sample brings everything back. */
    write_cfg("count_rc 15\n");
    srv_gpu_sample(g);
    t = render(g, brisk_now());
    CHECK(!strstr(t, "brisk_gpu_memory_used_bytes"), "values after a failed count");
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 66, "errors");
    free(t);
    random_devs(v, 1, buf, sizeof buf, "");
    write_cfg(buf);
    srv_gpu_sample(g);
    t = render(g, brisk_now());
    CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 0) == (double)v[0].used, "recovered");
    free(t);
    srv_gpu_free(g);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_thread(void) {
    dev_vals v[2];
    char buf[4096], err[512];
    random_devs(v, 2, buf, sizeof buf, "");
    write_cfg(buf);
    FILE *f = fopen(shutdown_path, "w"); /* empty the marker */
    if (f)
        fclose(f);
    srv_gpu *g = NULL;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0.05, FAKE_NVML_LIB);
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g, "create: %s", err);
    if (!g)
        return;
    /* The sampler picks a change up within a few intervals. */
    unsigned long long want = v[1].used / 2 + 1;
    char line[64];
    snprintf(line, sizeof line, "used.1 %llu\n", want);
    strncat(buf, line, sizeof buf - strlen(buf) - 1);
    write_cfg(buf);
    double t0 = brisk_now(), got = NAN;
    while (brisk_now() - t0 < 5.0) {
        char *t = render(g, brisk_now());
        got = gpu_value(t, "brisk_gpu_memory_used_bytes", 1);
        free(t);
        if (got == (double)want)
            break;
        sleep_s(0.01);
    }
    CHECK(got == (double)want, "sampler did not pick up the change: %g", got);

    /* A stalled NVML call does not block rendering. */
    strncat(buf, "stall_ms 600\n", sizeof buf - strlen(buf) - 1);
    write_cfg(buf);
    sleep_s(0.2); /* the sampler is now inside the stall */
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        double a = brisk_now();
        char *t = render(g, a);
        double d = brisk_now() - a;
        worst = d > worst ? d : worst;
        free(t);
        sleep_s(0.01);
    }
    CHECK(worst < 0.05, "render took %.3f s during a stall", worst);
    random_devs(v, 2, buf, sizeof buf, "");
    write_cfg(buf);
    double a = brisk_now();
    srv_gpu_free(g); /* waits for the stalled call (< SRV_GPU_STOP_WAIT_S) */
    double d = brisk_now() - a;
    CHECK(d < SRV_GPU_STOP_WAIT_S + 0.5, "free took %.2f s", d);
    f = fopen(shutdown_path, "r");
    char mark[32] = "";
    if (f) {
        if (!fgets(mark, sizeof mark, f))
            mark[0] = '\0';
        fclose(f);
    }
    CHECK(!strcmp(mark, "shutdown\n"), "nvmlShutdown not called: '%s'", mark);
}

static void test_promtool(void) {
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        printf("SKIP: promtool not found\n");
        return;
    }
    dev_vals v[2];
    char buf[4096], err[512];
    random_devs(v, 2, buf, sizeof buf, "util_rc.1 3\n");
    write_cfg(buf);
    srv_gpu *g = NULL;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0, FAKE_NVML_LIB);
    if (srv_gpu_create(&c, &g, err, sizeof err) < 0 || !g) {
        CHECK(0, "create: %s", err);
        return;
    }
    char *t = render(g, brisk_now());
    /* Not supported (MIG mode) is left out without counting as an error. */
    CHECK(isnan(gpu_value(t, "brisk_gpu_utilization_ratio", 1)), "unsupported util rendered");
    CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 1) == (double)v[1].used, "gpu 1 used");
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "not supported counted");
    char path[] = "/tmp/brisk_gpu_metrics_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        size_t len = strlen(t);
        CHECK(write(fd, t, len) == (ssize_t)len, "write");
        close(fd);
        char cmd[128], out[4096] = "";
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
        FILE *p = popen(cmd, "r");
        int st = -1;
        if (p) {
            size_t n = fread(out, 1, sizeof out - 1, p);
            out[n] = '\0';
            st = pclose(p);
        }
        unlink(path);
        CHECK(st == 0 && out[0] == '\0', "promtool: status %d, output:\n%s\non:\n%s", st, out, t);
    }
    free(t);
    srv_gpu_free(g);
}

int main(void) {
    brisk_log_set_level(BRISK_LOG_ERROR);
    snprintf(cfg_path, sizeof cfg_path, "/tmp/brisk_fake_nvml_%d.cfg", (int)getpid());
    snprintf(shutdown_path, sizeof shutdown_path, "/tmp/brisk_fake_nvml_%d.down", (int)getpid());
    /* Set once, before any thread: the fake reads them on every sample. */
    setenv("FAKE_NVML_FILE", cfg_path, 1);
    setenv("FAKE_NVML_SHUTDOWN_FILE", shutdown_path, 1);
    test_clean_str();
    test_open_failures();
    test_values();
    test_hostile();
    test_thread();
    test_promtool();
    unlink(cfg_path);
    unlink(shutdown_path);
    return BT_SUMMARY("test_srv_gpu");
}
