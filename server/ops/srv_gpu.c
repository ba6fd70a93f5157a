/* srv_gpu.c - the GPU metrics sampler: NVML read on its own thread every
 * interval, the latest sample cached under a mutex, and the Prometheus text
 * of the GPU families rendered from that cache. See srv_gpu.h. */
#include "server/ops/srv_gpu.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/brisk_alloc.h"
#include "common/brisk_buf.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "server/ops/srv_metrics.h"

struct srv_gpu {
    srv_nvml *nvml;
    double interval_s;
    double stale_s;    /* a sample older than this is not rendered */
    char *model_label; /* model_name="<escaped>", owned */

    /* Sampler-owned (the sampler thread, or the caller with interval <= 0). */
    srv_nvml_gpu work[SRV_NVML_MAX_GPUS];
    char last_err[256]; /* the last reason logged, to log each change once */
    int warned_cap;

    /* Shared: under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: the sampler's sleep and free's wait */
    srv_nvml_gpu cache[SRV_NVML_MAX_GPUS];
    int n_cache;
    double t_sample; /* brisk_now() of the published sample */
    uint64_t errors;
    int stop, exited;

    pthread_t thread;
    int thread_started;
};

int srv_gpu_mode_parse(const char *s, srv_gpu_mode *out) {
    if (!s)
        return BRISK_EINVAL;
    if (!strcmp(s, "auto"))
        *out = SRV_GPU_METRICS_AUTO;
    else if (!strcmp(s, "on"))
        *out = SRV_GPU_METRICS_ON;
    else if (!strcmp(s, "off"))
        *out = SRV_GPU_METRICS_OFF;
    else
        return BRISK_EINVAL;
    return 0;
}

/* ---- sampling -------------------------------------------------------------- */

void srv_gpu_sample(srv_gpu *g) {
    char err[256] = "", first[256] = "";
    int n = 0, capped = 0, bad = 0;
    if (srv_nvml_count(g->nvml, &n, &capped, err, sizeof err) < 0) {
        bad = 1;
        snprintf(first, sizeof first, "%s", err);
        n = 0;
    }
    if (capped && !g->warned_cap) {
        BRISK_WARN("GPU metrics: NVML reports more than %d GPUs; sampling the first %d",
                   SRV_NVML_MAX_GPUS, SRV_NVML_MAX_GPUS);
        g->warned_cap = 1;
    }
    for (int i = 0; i < n; i++) {
        int b = srv_nvml_read(g->nvml, i, &g->work[i], err, sizeof err);
        if (b > 0 && bad == 0)
            snprintf(first, sizeof first, "%s", err);
        bad += b;
    }
    pthread_mutex_lock(&g->mu);
    memcpy(g->cache, g->work, (size_t)n * sizeof g->work[0]);
    g->n_cache = n;
    g->t_sample = brisk_now();
    g->errors += (uint64_t)bad;
    pthread_mutex_unlock(&g->mu);
    /* A failing GPU fails the same way every interval: log each new reason
     * once, and the recovery. */
    if (bad && strcmp(first, g->last_err) != 0) {
        BRISK_WARN("GPU metrics: %s (%d failed reads this sample; those values are left out)",
                   first, bad);
        snprintf(g->last_err, sizeof g->last_err, "%s", first);
    } else if (!bad && g->last_err[0]) {
        BRISK_INFO("GPU metrics: NVML reads succeed again");
        g->last_err[0] = '\0';
    }
}

/* A deadline `s` seconds from now on the monotonic clock. */
static struct timespec gpu_deadline(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = floor(s);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void *gpu_thread_main(void *arg) {
    srv_gpu *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec dl = gpu_deadline(g->interval_s);
        while (!g->stop && pthread_cond_timedwait(&g->cv, &g->mu, &dl) != ETIMEDOUT) {
        }
        if (g->stop)
            break;
        pthread_mutex_unlock(&g->mu);
        srv_gpu_sample(g); /* NVML calls run without the lock */
        pthread_mutex_lock(&g->mu);
    }
    g->exited = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- create / free --------------------------------------------------------- */

/* Label value escaping of the text format: \ -> \\, " -> \", newline -> \n.
 * Returns the bytes written (without the NUL), truncating to fit. */
static size_t gpu_escape(char *out, size_t cap, const char *s) {
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[k++] = '\\';
            out[k++] = *s;
        } else if (*s == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else {
            out[k++] = *s;
        }
    }
    out[k] = '\0';
    return k;
}

static void gpu_destroy(srv_gpu *g) {
    srv_nvml_close(g->nvml);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->model_label);
    free(g);
}

int srv_gpu_create(const srv_gpu_config *cfg, srv_gpu **out, char *err, size_t err_len) {
    *out = NULL;
    if (cfg->mode == SRV_GPU_METRICS_OFF) {
        BRISK_INFO("GPU metrics: off (--gpu-metrics off)");
        return 0;
    }
    int on = cfg->mode == SRV_GPU_METRICS_ON;
    char why[512];
    srv_nvml *nvml = NULL;
    int rc = srv_nvml_open(cfg->lib_path, &nvml, why, sizeof why);
    if (rc < 0) {
        if (on) {
            snprintf(err, err_len, "--gpu-metrics on: %s", why);
            return rc;
        }
        BRISK_INFO("GPU metrics: off (auto: %s)", why);
        return 0;
    }
    int n = 0, capped = 0;
    rc = srv_nvml_count(nvml, &n, &capped, why, sizeof why);
    if (rc == 0 && n == 0) {
        snprintf(why, sizeof why, "NVML (%s) sees no GPU", srv_nvml_path(nvml));
        rc = BRISK_ENOTFOUND;
    }
    if (rc < 0) {
        srv_nvml_close(nvml);
        if (on) {
            snprintf(err, err_len, "--gpu-metrics on: %s", why);
            return rc;
        }
        BRISK_INFO("GPU metrics: off (auto: %s)", why);
        return 0;
    }

    srv_gpu *g = calloc(1, sizeof *g);
    const char *mn = cfg->model_name ? cfg->model_name : "";
    size_t label_cap = strlen(mn) * 2 + 16;
    pthread_condattr_t ca;
    int ca_ok = pthread_condattr_init(&ca) == 0;
    if (!g || !ca_ok || !(g->model_label = malloc(label_cap)) ||
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_mutex_init(&g->mu, NULL) != 0) {
        if (ca_ok)
            pthread_condattr_destroy(&ca);
        if (g)
            free(g->model_label);
        free(g);
        srv_nvml_close(nvml);
        snprintf(err, err_len, "GPU metrics: out of memory");
        return BRISK_ENOMEM;
    }
    if (pthread_cond_init(&g->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&g->mu);
        free(g->model_label);
        free(g);
        srv_nvml_close(nvml);
        snprintf(err, err_len, "GPU metrics: cannot create a condition variable");
        return BRISK_ENOMEM;
    }
    pthread_condattr_destroy(&ca);
    memcpy(g->model_label, "model_name=\"", 12);
    size_t k = 12 + gpu_escape(g->model_label + 12, label_cap - 14, mn);
    g->model_label[k++] = '"';
    g->model_label[k] = '\0';
    g->nvml = nvml;
    g->interval_s = cfg->interval_s;
    /* Three missed intervals, plus a second for slow calls. */
    g->stale_s = 3.0 * (cfg->interval_s > 0 ? cfg->interval_s : 0.0) + 1.0;

    srv_gpu_sample(g);
    if (cfg->interval_s > 0) {
        if (pthread_create(&g->thread, NULL, gpu_thread_main, g) != 0) {
            gpu_destroy(g);
            snprintf(err, err_len, "GPU metrics: cannot start the sampler thread");
            return BRISK_ENOMEM;
        }
        g->thread_started = 1;
    }
    char first[SRV_NVML_STR_LEN] = "?";
    pthread_mutex_lock(&g->mu);
    if (g->n_cache > 0 && g->cache[0].have_ids)
        snprintf(first, sizeof first, "%s", g->cache[0].name);
    pthread_mutex_unlock(&g->mu);
    BRISK_INFO("GPU metrics: on (%s, %d GPU%s%s, first: %s; sampled every %g s)",
               srv_nvml_path(nvml), n, n == 1 ? "" : "s", capped ? " (capped)" : "", first,
               cfg->interval_s);
    *out = g;
    return 0;
}

void srv_gpu_free(srv_gpu *g) {
    if (!g)
        return;
    if (g->thread_started) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_broadcast(&g->cv);
        struct timespec dl = gpu_deadline(SRV_GPU_STOP_WAIT_S);
        while (!g->exited && pthread_cond_timedwait(&g->cv, &g->mu, &dl) != ETIMEDOUT) {
        }
        int exited = g->exited;
        pthread_mutex_unlock(&g->mu);
        if (!exited) {
            /* Stuck in an NVML call: shutting NVML down or freeing under it
             * would be worse than leaving it to the process exit. */
            BRISK_WARN("GPU metrics: the sampler is stuck in an NVML call; leaving it");
            pthread_detach(g->thread);
            return;
        }
        pthread_join(g->thread, NULL);
    }
    gpu_destroy(g);
}

int srv_gpu_count(srv_gpu *g) {
    pthread_mutex_lock(&g->mu);
    int n = g->n_cache;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* ---- rendering ------------------------------------------------------------- */

enum {
    GPU_F_USED = 0,
    GPU_F_TOTAL,
    GPU_F_UTIL,
    GPU_F_MEMUTIL,
    GPU_F_TEMP,
    GPU_F_POWER,
    GPU_F_POWER_LIMIT,
    GPU_F_SM_CLOCK,
    GPU_F_SM_CLOCK_MAX,
    GPU_F_COUNT
};

static const struct {
    const char *name, *help;
} gpu_families[GPU_F_COUNT] = {
    {"brisk_gpu_memory_used_bytes", "GPU device memory allocated, in bytes (NVML used)."},
    {"brisk_gpu_memory_total_bytes", "GPU device memory installed, in bytes (NVML total)."},
    {"brisk_gpu_utilization_ratio",
     "Fraction of NVML's last sample period during which a kernel ran on the GPU, 0..1."},
    {"brisk_gpu_memory_utilization_ratio",
     "Fraction of NVML's last sample period during which device memory was read or written, "
     "0..1 (not used/total)."},
    {"brisk_gpu_temperature_celsius", "GPU die temperature, in degrees Celsius (NVML)."},
    {"brisk_gpu_power_draw_watts", "GPU board power draw, in watts (NVML power usage)."},
    {"brisk_gpu_power_limit_watts", "GPU enforced power limit, in watts (NVML)."},
    {"brisk_gpu_sm_clock_hertz", "Current SM clock of the GPU, in hertz (NVML)."},
    {"brisk_gpu_sm_clock_max_hertz", "Maximum SM clock of the GPU, in hertz (NVML)."},
};

/* Family f's value for device d in *v; 0 when d has none. Memory is exact
 * as an integer below 2^53 bytes (8 PiB), so a double carries it. */
static int gpu_value(const srv_nvml_gpu *d, int f, double *v) {
    switch (f) {
    case GPU_F_USED: *v = (double)d->mem_used; return d->have_mem;
    case GPU_F_TOTAL: *v = (double)d->mem_total; return d->have_mem;
    case GPU_F_UTIL: *v = d->util_gpu; return d->have_util;
    case GPU_F_MEMUTIL: *v = d->util_mem; return d->have_util;
    case GPU_F_TEMP: *v = d->temp_c; return d->have_temp;
    case GPU_F_POWER: *v = d->power_mw / 1000.0; return d->have_power;
    case GPU_F_POWER_LIMIT: *v = d->power_limit_mw / 1000.0; return d->have_power_limit;
    case GPU_F_SM_CLOCK: *v = d->sm_clock_mhz * 1e6; return d->have_sm_clock;
    case GPU_F_SM_CLOCK_MAX: *v = d->sm_clock_max_mhz * 1e6; return d->have_sm_clock_max;
    default: return 0;
    }
}

static void gpu_put_value(brisk_buf *b, const srv_gpu *g, int f, int i, const srv_nvml_gpu *d) {
    if (f == GPU_F_USED || f == GPU_F_TOTAL) {
        brisk_buf_printf(b, "%s{%s,gpu=\"%d\"} %llu\n", gpu_families[f].name, g->model_label, i,
                         f == GPU_F_USED ? d->mem_used : d->mem_total);
        return;
    }
    double v = 0;
    char num[64];
    gpu_value(d, f, &v);
    srv_metrics_format_float(num, sizeof num, v);
    brisk_buf_printf(b, "%s{%s,gpu=\"%d\"} %s\n", gpu_families[f].name, g->model_label, i, num);
}

/* brisk_gpu_clock_throttle_reason{reason}: one 0/1 series per named NVML
 * clock event reason, and reason="other" for any bit NVML may add later,
 * for each device whose reasons were read. */
static void gpu_put_reasons(brisk_buf *b, const srv_gpu *g, int n) {
    int header = 0;
    unsigned long long named = 0;
    for (int r = 0; r < SRV_NVML_N_REASONS; r++)
        named |= srv_nvml_reasons[r].mask;
    for (int i = 0; i < n; i++) {
        const srv_nvml_gpu *d = &g->cache[i];
        if (!d->have_reasons)
            continue;
        if (!header) {
            brisk_buf_printf(b, "# HELP brisk_gpu_clock_throttle_reason 1 while NVML reports this "
                                "clock event (throttle) reason for the GPU, else 0; other: a bit "
                                "without a name here.\n"
                                "# TYPE brisk_gpu_clock_throttle_reason gauge\n");
            header = 1;
        }
        for (int r = 0; r <= SRV_NVML_N_REASONS; r++) {
            int on = r < SRV_NVML_N_REASONS ? (d->reasons & srv_nvml_reasons[r].mask) != 0
                                            : (d->reasons & ~named) != 0;
            brisk_buf_printf(b, "brisk_gpu_clock_throttle_reason{%s,gpu=\"%d\",reason=\"%s\"} %s\n",
                             g->model_label, i,
                             r < SRV_NVML_N_REASONS ? srv_nvml_reasons[r].name : "other",
                             on ? "1.0" : "0.0");
        }
    }
}

int srv_gpu_render_append(srv_gpu *g, double now, char **text, size_t *len) {
    brisk_buf b = {0};
    pthread_mutex_lock(&g->mu);
    int fresh = now - g->t_sample <= g->stale_s;
    int n = fresh ? g->n_cache : 0;
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= g->cache[i].have_ids;
    if (any) {
        brisk_buf_printf(&b,
                         "# HELP brisk_gpu_info GPUs sampled through NVML: index, name and UUID.\n"
                         "# TYPE brisk_gpu_info gauge\n");
        for (int i = 0; i < n; i++) {
            const srv_nvml_gpu *d = &g->cache[i];
            if (!d->have_ids)
                continue;
            char name[SRV_NVML_STR_LEN * 2], uuid[SRV_NVML_STR_LEN * 2];
            gpu_escape(name, sizeof name, d->name);
            gpu_escape(uuid, sizeof uuid, d->uuid);
            brisk_buf_printf(&b, "brisk_gpu_info{%s,gpu=\"%d\",name=\"%s\",uuid=\"%s\"} 1\n",
                             g->model_label, i, name, uuid);
        }
    }
    for (int f = 0; f < GPU_F_COUNT; f++) {
        int header = 0;
        for (int i = 0; i < n; i++) {
            double v;
            if (!gpu_value(&g->cache[i], f, &v))
                continue;
            if (!header) {
                brisk_buf_printf(&b, "# HELP %s %s\n# TYPE %s gauge\n", gpu_families[f].name,
                                 gpu_families[f].help, gpu_families[f].name);
                header = 1;
            }
            gpu_put_value(&b, g, f, i, &g->cache[i]);
        }
    }
    gpu_put_reasons(&b, g, n);
    char num[64];
    srv_metrics_format_float(num, sizeof num, (double)g->errors);
    pthread_mutex_unlock(&g->mu);
    brisk_buf_printf(&b,
                     "# HELP brisk_gpu_metrics_errors_total NVML reads that failed or returned "
                     "impossible values.\n"
                     "# TYPE brisk_gpu_metrics_errors_total counter\n"
                     "brisk_gpu_metrics_errors_total{%s} %s\n",
                     g->model_label, num);
    if (b.oom) {
        free(b.p);
        return BRISK_ENOMEM;
    }
    char *p = brisk_realloc(*text, *len + b.len + 1);
    if (!p) {
        free(b.p);
        return BRISK_ENOMEM;
    }
    memcpy(p + *len, b.p, b.len + 1);
    *text = p;
    *len += b.len;
    free(b.p);
    return 0;
}
