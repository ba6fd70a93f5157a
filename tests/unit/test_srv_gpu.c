/* test_srv_gpu.c - GPU metrics through NVML (server/ops/srv_nvml.c, srv_gpu.c)
 * against libfake_nvml.so (tests/tools/fake_nvml.c), which answers from a
 * file: loading (missing library, not NVML, init failure), the auto/on/off
 * choice, rendered values against random configured ones, hostile answers
 * (unterminated names with control bytes, impossible memory and utilisation,
 * a huge device count, failing calls) counted and left out, staleness, the
 * sampler thread picking up changes, /metrics not blocked by a stalled NVML
 * call, nvmlShutdown at free, and promtool on the rendered text. The thermal
 * and power readings (temperature, power draw and limit, SM clock, clock
 * event reasons): rendered values, plausibility limits at and past their
 * edges, NOT_SUPPORTED and FUNCTION_NOT_FOUND left out uncounted, and
 * entry points missing from the library (a copy of the fake with their
 * names renamed), including the fall-back to the pre-535 reasons name. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "server/ops/srv_gpu.h"

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

/* The value of brisk_gpu_clock_throttle_reason for GPU `gpu` and `reason`,
 * NAN if absent. */
static double reason_value(const char *text, int gpu, const char *reason) {
    char series[256];
    snprintf(series, sizeof series,
             "brisk_gpu_clock_throttle_reason{model_name=\"m\\\"1\",gpu=\"%d\",reason=\"%s\"} ",
             gpu, reason);
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
    unsigned temp, power_mw, limit_mw, clock_mhz, clock_max_mhz;
    unsigned long long reasons;
} dev_vals;

static void random_devs(dev_vals *v, int n, char *buf, size_t cap, const char *extra) {
    size_t k = (size_t)snprintf(buf, cap, "count %d\n", n);
    for (int i = 0; i < n; i++) {
        v[i].total = (8ull + rnd() % 140) << 30;
        v[i].used = 1 + rnd() % v[i].total;
        v[i].util = 1 + (unsigned)(rnd() % 100);
        v[i].memutil = 1 + (unsigned)(rnd() % 100);
        v[i].temp = 20 + (unsigned)(rnd() % 70);
        v[i].limit_mw = 300000 + (unsigned)(rnd() % 400001);
        v[i].power_mw = 50000 + (unsigned)(rnd() % (v[i].limit_mw - 49999));
        v[i].clock_max_mhz = 1400 + (unsigned)(rnd() % 700);
        v[i].clock_mhz = 200 + (unsigned)(rnd() % (v[i].clock_max_mhz - 199));
        v[i].reasons = rnd() & 0x1ff;
        k += (size_t)snprintf(buf + k, cap - k,
                              "name.%d NVIDIA H100 \"80GB\" \\%d\nuuid.%d GPU-%08llx\n"
                              "total.%d %llu\nused.%d %llu\nutil.%d %u\nmemutil.%d %u\n",
                              i, i, i, (unsigned long long)(rnd() & 0xffffffffu), i, v[i].total, i,
                              v[i].used, i, v[i].util, i, v[i].memutil);
        k += (size_t)snprintf(buf + k, cap - k,
                              "temp.%d %u\npower.%d %u\npower_limit.%d %u\nsm_clock.%d %u\n"
                              "sm_clock_max.%d %u\nreasons.%d 0x%llx\n",
                              i, v[i].temp, i, v[i].power_mw, i, v[i].limit_mw, i, v[i].clock_mhz,
                              i, v[i].clock_max_mhz, i, v[i].reasons);
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
        CHECK(gpu_value(t, "brisk_gpu_temperature_celsius", i) == v[i].temp, "temp %d", i);
        CHECK(fabs(gpu_value(t, "brisk_gpu_power_draw_watts", i) - v[i].power_mw / 1000.0) < 1e-9,
              "power %d", i);
        CHECK(fabs(gpu_value(t, "brisk_gpu_power_limit_watts", i) - v[i].limit_mw / 1000.0) < 1e-9,
              "power limit %d", i);
        CHECK(gpu_value(t, "brisk_gpu_sm_clock_hertz", i) == v[i].clock_mhz * 1e6, "clock %d: %g",
              i, gpu_value(t, "brisk_gpu_sm_clock_hertz", i));
        CHECK(gpu_value(t, "brisk_gpu_sm_clock_max_hertz", i) == v[i].clock_max_mhz * 1e6,
              "max clock %d", i);
        for (int r = 0; r < SRV_NVML_N_REASONS; r++)
            CHECK(reason_value(t, i, srv_nvml_reasons[r].name) ==
                      ((v[i].reasons & srv_nvml_reasons[r].mask) ? 1 : 0),
                  "gpu %d reason %s (mask 0x%llx)", i, srv_nvml_reasons[r].name, v[i].reasons);
        CHECK(reason_value(t, i, "other") == 0, "gpu %d other", i);
    }
    CHECK(strstr(t, "# TYPE brisk_gpu_clock_throttle_reason gauge\n") != NULL, "reason type");
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "errors");
    CHECK(strstr(t, "# TYPE brisk_gpu_metrics_errors_total counter\n") != NULL, "counter type");
    free(t);

    /* Stale: a sample older than 3 intervals + 1 s (interval 0 here: 1 s)
     * is not rendered; the error counter still is. */
    t = render(g, brisk_now() + 1.5);
    CHECK(isnan(gpu_value(t, "brisk_gpu_memory_used_bytes", 0)), "stale value rendered");
    CHECK(isnan(gpu_value(t, "brisk_gpu_temperature_celsius", 0)), "stale temperature rendered");
    CHECK(!strstr(t, "brisk_gpu_clock_throttle_reason"), "stale reasons rendered");
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

/* Thermal and power readings straight from srv_nvml and through /metrics:
 * gpu 0 plausible with an unnamed reason bit, gpu 1 offering none (NOT_
 * SUPPORTED, FUNCTION_NOT_FOUND), gpu 2 every reading implausible or failing,
 * gpu 3 at the plausibility limits, gpu 4 one past them. */
static void test_thermal(void) {
    write_cfg("count 5\n"
              "name.0 A\nuuid.0 GPU-0\ntotal.0 1000\nused.0 10\nutil.0 5\nmemutil.0 6\n"
              "temp.0 71\npower.0 612345\npower_limit.0 700000\nsm_clock.0 1755\n"
              "sm_clock_max.0 1980\nreasons.0 0x10060\nlegacy_reasons.0 0x4\n"
              "name.1 B\nuuid.1 GPU-1\ntotal.1 1000\nused.1 10\nutil.1 5\nmemutil.1 6\n"
              "temp_rc.1 13\nsm_clock_rc.1 3\n"
              "name.2 C\nuuid.2 GPU-2\ntotal.2 1000\nused.2 10\nutil.2 5\nmemutil.2 6\n"
              "temp.2 4294967251\npower.2 10000001\npower_limit.2 0\nsm_clock.2 10001\n"
              "sm_clock_max.2 0\nreasons_rc.2 15\n"
              "name.3 D\nuuid.3 GPU-3\ntotal.3 1000\nused.3 10\nutil.3 5\nmemutil.3 6\n"
              "temp.3 200\npower.3 10000000\npower_limit.3 10000000\nsm_clock.3 10000\n"
              "sm_clock_max.3 10000\nreasons.3 0\n"
              "name.4 E\nuuid.4 GPU-4\ntotal.4 1000\nused.4 10\nutil.4 5\nmemutil.4 6\n"
              "temp.4 201\npower.4 0\npower_limit.4 1\nsm_clock.4 0\nsm_clock_max.4 1\n");
    char err[512] = "";
    srv_nvml *n = NULL;
    int rc = srv_nvml_open(FAKE_NVML_LIB, &n, err, sizeof err);
    CHECK(rc == 0 && n, "open: %d %s", rc, err);
    if (!n)
        return;
    int count = 0, capped = 0;
    CHECK(srv_nvml_count(n, &count, &capped, err, sizeof err) == 0 && count == 5, "count %d",
          count);
    srv_nvml_gpu d;
    err[0] = '\0';
    CHECK(srv_nvml_read(n, 0, &d, err, sizeof err) == 0, "gpu 0: %s", err);
    CHECK(d.have_temp && d.temp_c == 71, "temp %u", d.temp_c);
    CHECK(d.have_power && d.power_mw == 612345, "power %u", d.power_mw);
    CHECK(d.have_power_limit && d.power_limit_mw == 700000, "limit %u", d.power_limit_mw);
    CHECK(d.have_sm_clock && d.sm_clock_mhz == 1755, "clock %u", d.sm_clock_mhz);
    CHECK(d.have_sm_clock_max && d.sm_clock_max_mhz == 1980, "max %u", d.sm_clock_max_mhz);
    /* The current name is preferred over the pre-535 one (which says 0x4). */
    CHECK(d.have_reasons && d.reasons == 0x10060, "reasons 0x%llx", d.reasons);

    CHECK(srv_nvml_read(n, 1, &d, err, sizeof err) == 0, "gpu 1: %s", err);
    CHECK(d.have_mem && !d.have_temp && !d.have_power && !d.have_power_limit && !d.have_sm_clock &&
              !d.have_sm_clock_max && !d.have_reasons,
          "gpu 1 has thermal parts");

    err[0] = '\0';
    CHECK(srv_nvml_read(n, 2, &d, err, sizeof err) == 6, "gpu 2: %s", err);
    CHECK(bt_one_line(err) && strstr(err, "GPU 2: nvmlDeviceGetTemperature: 4294967251 C is not "
                                          "plausible"),
          "%s", err);
    CHECK(d.have_mem && d.have_util && !d.have_temp && !d.have_power && !d.have_power_limit &&
              !d.have_sm_clock && !d.have_sm_clock_max && !d.have_reasons,
          "gpu 2 kept a refused value");

    CHECK(srv_nvml_read(n, 3, &d, err, sizeof err) == 0, "gpu 3: %s", err);
    CHECK(d.have_temp && d.have_power && d.have_power_limit && d.have_sm_clock &&
              d.have_sm_clock_max && d.have_reasons && d.reasons == 0,
          "gpu 3 at the limits refused");

    err[0] = '\0';
    CHECK(srv_nvml_read(n, 4, &d, err, sizeof err) == 1, "gpu 4: %s", err);
    CHECK(strstr(err, "201 C") != NULL, "%s", err);
    CHECK(!d.have_temp && d.have_power && d.power_mw == 0 && d.have_power_limit &&
              d.have_sm_clock && d.sm_clock_mhz == 0 && d.have_sm_clock_max && !d.have_reasons,
          "gpu 4");
    srv_nvml_close(n);

    srv_gpu *g = NULL;
    srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0, FAKE_NVML_LIB);
    CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g, "create: %s", err);
    if (!g)
        return;
    char *t = render(g, brisk_now());
    CHECK(gpu_value(t, "brisk_gpu_temperature_celsius", 0) == 71, "temp");
    CHECK(gpu_value(t, "brisk_gpu_power_draw_watts", 0) == 612.345, "power %g",
          gpu_value(t, "brisk_gpu_power_draw_watts", 0));
    CHECK(gpu_value(t, "brisk_gpu_power_limit_watts", 0) == 700, "limit");
    CHECK(gpu_value(t, "brisk_gpu_sm_clock_hertz", 0) == 1755e6, "clock");
    CHECK(gpu_value(t, "brisk_gpu_sm_clock_max_hertz", 0) == 1980e6, "max clock");
    CHECK(strstr(t, "brisk_gpu_sm_clock_max_hertz{model_name=\"m\\\"1\",gpu=\"0\"} 1.98e+09\n"),
          "max clock text");
    static const char *const on0[] = {"sw_thermal_slowdown", "hw_thermal_slowdown", "other"};
    for (int r = 0; r <= SRV_NVML_N_REASONS; r++) {
        const char *name = r < SRV_NVML_N_REASONS ? srv_nvml_reasons[r].name : "other";
        int want = 0;
        for (size_t k = 0; k < sizeof on0 / sizeof on0[0]; k++)
            want |= !strcmp(name, on0[k]);
        CHECK(reason_value(t, 0, name) == want, "gpu 0 reason %s", name);
        CHECK(reason_value(t, 3, name) == 0, "gpu 3 reason %s", name);
        CHECK(isnan(reason_value(t, 1, name)), "gpu 1 reason %s rendered", name);
        CHECK(isnan(reason_value(t, 2, name)), "gpu 2 reason %s rendered", name);
        CHECK(isnan(reason_value(t, 4, name)), "gpu 4 reason %s rendered", name);
    }
    static const char *const thermal[] = {
        "brisk_gpu_temperature_celsius", "brisk_gpu_power_draw_watts",
        "brisk_gpu_power_limit_watts", "brisk_gpu_sm_clock_hertz", "brisk_gpu_sm_clock_max_hertz"};
    for (size_t k = 0; k < sizeof thermal / sizeof thermal[0]; k++) {
        CHECK(isnan(gpu_value(t, thermal[k], 1)), "gpu 1 %s rendered", thermal[k]);
        CHECK(isnan(gpu_value(t, thermal[k], 2)), "gpu 2 %s rendered", thermal[k]);
        CHECK(!isnan(gpu_value(t, thermal[k], 3)), "gpu 3 %s missing", thermal[k]);
    }
    CHECK(gpu_value(t, "brisk_gpu_temperature_celsius", 3) == 200, "200 C");
    CHECK(gpu_value(t, "brisk_gpu_power_draw_watts", 3) == 10000, "10 kW");
    CHECK(gpu_value(t, "brisk_gpu_sm_clock_hertz", 3) == 1e10, "10 GHz");
    CHECK(isnan(gpu_value(t, "brisk_gpu_temperature_celsius", 4)), "201 C rendered");
    CHECK(gpu_value(t, "brisk_gpu_power_draw_watts", 4) == 0, "0 W");
    CHECK(gpu_value(t, "brisk_gpu_sm_clock_hertz", 4) == 0, "0 Hz");
    CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 2) == 10, "gpu 2 memory");
    /* gpu 2's six and gpu 4's temperature; gpu 1's are capabilities. */
    CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 7, "errors %g",
          gpu_value(t, "brisk_gpu_metrics_errors_total", -1));
    free(t);
    srv_gpu_free(g);
}

/* Writes a copy of the fake library in which each of the NULL-terminated
 * `names` is renamed in the symbol string tables (first letter to 'X', at
 * NUL-delimited whole-string matches), so dlsym no longer finds it. Returns
 * 0 and the copy's path in out, or -1 (a check has failed). */
static int fake_hide(const char *const *names, const char *tag, char *out, size_t out_len) {
    FILE *f = fopen(FAKE_NVML_LIB, "rb");
    CHECK(f != NULL, "open %s", FAKE_NVML_LIB);
    if (!f)
        return -1;
    struct stat st;
    char *img = NULL;
    size_t len = 0;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && (img = malloc((size_t)st.st_size)))
        len = fread(img, 1, (size_t)st.st_size, f);
    fclose(f);
    CHECK(img && len == (size_t)st.st_size, "read %s", FAKE_NVML_LIB);
    if (!img || len != (size_t)st.st_size) {
        free(img);
        return -1;
    }
    int ok = 1;
    for (const char *const *nm = names; *nm; nm++) {
        size_t nl = strlen(*nm);
        int hits = 0;
        for (size_t i = 1; i + nl < len; i++) {
            if (img[i - 1] == '\0' && img[i + nl] == '\0' && !memcmp(img + i, *nm, nl)) {
                img[i] = 'X';
                hits++;
            }
        }
        CHECK(hits > 0, "%s not found in %s", *nm, FAKE_NVML_LIB);
        ok &= hits > 0;
    }
    /* Beside the original: a directory that allows mapping code. */
    snprintf(out, out_len, "%s.%s.%d.so", FAKE_NVML_LIB, tag, (int)getpid());
    f = fopen(out, "wb");
    CHECK(f != NULL, "create %s", out);
    if (f) {
        ok &= fwrite(img, 1, len, f) == len;
        ok &= fclose(f) == 0;
    } else {
        ok = 0;
    }
    free(img);
    return ok ? 0 : -1;
}

static void test_missing_symbols(void) {
    char path[512], err[512];
    write_cfg("count 1\nname.0 A\nuuid.0 GPU-0\ntotal.0 1000\nused.0 10\nutil.0 5\nmemutil.0 6\n"
              "temp.0 50\npower.0 100000\npower_limit.0 300000\nsm_clock.0 1000\n"
              "sm_clock_max.0 2000\nreasons.0 0x4\nlegacy_reasons.0 0x20\n");
    /* A driver before 535: only the old name of the reasons call. */
    static const char *const new_name[] = {"nvmlDeviceGetCurrentClocksEventReasons", NULL};
    if (fake_hide(new_name, "old", path, sizeof path) == 0) {
        srv_gpu *g = NULL;
        srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0, path);
        CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g, "create: %s", err);
        if (g) {
            char *t = render(g, brisk_now());
            CHECK(reason_value(t, 0, "sw_thermal_slowdown") == 1, "legacy reasons not read:\n%s",
                  t);
            CHECK(reason_value(t, 0, "sw_power_cap") == 0, "current name read from a copy without");
            CHECK(gpu_value(t, "brisk_gpu_temperature_celsius", 0) == 50, "temp");
            CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "errors");
            free(t);
            srv_gpu_free(g);
        }
    }
    unlink(path);
    /* An NVML with none of the optional entry points: memory and
     * utilisation as before, no thermal family, nothing counted. */
    static const char *const all[] = {"nvmlDeviceGetCurrentClocksEventReasons",
                                      "nvmlDeviceGetCurrentClocksThrottleReasons",
                                      "nvmlDeviceGetTemperature",
                                      "nvmlDeviceGetPowerUsage",
                                      "nvmlDeviceGetEnforcedPowerLimit",
                                      "nvmlDeviceGetClockInfo",
                                      "nvmlDeviceGetMaxClockInfo",
                                      NULL};
    if (fake_hide(all, "none", path, sizeof path) == 0) {
        srv_gpu *g = NULL;
        srv_gpu_config c = cfg_of(SRV_GPU_METRICS_ON, 0, path);
        CHECK(srv_gpu_create(&c, &g, err, sizeof err) == 0 && g, "create: %s", err);
        if (g) {
            char *t = render(g, brisk_now());
            CHECK(gpu_value(t, "brisk_gpu_memory_used_bytes", 0) == 10, "memory");
            CHECK(gpu_value(t, "brisk_gpu_utilization_ratio", 0) == 0.05, "util");
            CHECK(!strstr(t, "temperature") && !strstr(t, "power") && !strstr(t, "clock"),
                  "thermal family without its entry point:\n%s", t);
            CHECK(gpu_value(t, "brisk_gpu_metrics_errors_total", -1) == 0, "errors");
            free(t);
            srv_gpu_free(g);
        }
    }
    unlink(path);
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
    test_thermal();
    test_missing_symbols();
    test_thread();
    test_promtool();
    unlink(cfg_path);
    unlink(shutdown_path);
    return BT_SUMMARY("test_srv_gpu");
}
