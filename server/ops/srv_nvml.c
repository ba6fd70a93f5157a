/* srv_nvml.c - NVML through dlopen: the declarations brisk needs, written from
 * NVIDIA's NVML API reference (the ABI is C, stable across drivers for these
 * versioned entry points), and validated reads. See srv_nvml.h. */
#include "server/ops/srv_nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"

/* ---- the ABI ---------------------------------------------------------------
 * nvmlReturn_t is a C enum (int-sized); 0 is NVML_SUCCESS. nvmlDevice_t is an
 * opaque pointer. nvmlMemory_t (v1) and nvmlUtilization_t are plain structs
 * of unsigned long long and unsigned int fields in this order.
 * nvmlTemperatureSensors_t and nvmlClockType_t are C enums too (int);
 * temperatures are whole degrees C, power milliwatts, clocks MHz, all
 * unsigned int; the clock event reasons an unsigned long long bit mask. */
typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;
enum { NVML_OK = 0, NVML_ERR_NOT_SUPPORTED = 3, NVML_ERR_FUNCTION_NOT_FOUND = 13 };
enum { NVML_TEMPERATURE_GPU = 0 }; /* nvmlTemperatureSensors_t */
enum { NVML_CLOCK_SM = 1 };        /* nvmlClockType_t */

typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

typedef struct {
    unsigned int gpu, memory; /* percent over the driver's last sample period */
} nvml_utilization;

typedef nvml_return (*nvml_init_fn)(void);
typedef nvml_return (*nvml_shutdown_fn)(void);
typedef nvml_return (*nvml_count_fn)(unsigned int *);
typedef nvml_return (*nvml_handle_fn)(unsigned int, nvml_device *);
typedef nvml_return (*nvml_memory_fn)(nvml_device, nvml_memory *);
typedef nvml_return (*nvml_util_fn)(nvml_device, nvml_utilization *);
typedef nvml_return (*nvml_str_fn)(nvml_device, char *, unsigned int);
typedef nvml_return (*nvml_temp_fn)(nvml_device, int, unsigned int *);
typedef nvml_return (*nvml_uint_fn)(nvml_device, unsigned int *);
typedef nvml_return (*nvml_clock_fn)(nvml_device, int, unsigned int *);
typedef nvml_return (*nvml_reasons_fn)(nvml_device, unsigned long long *);
typedef const char *(*nvml_error_string_fn)(nvml_return);

struct srv_nvml {
    void *lib;
    char *path;
    nvml_shutdown_fn shutdown;
    nvml_count_fn count;
    nvml_handle_fn handle;
    nvml_memory_fn memory;
    nvml_util_fn util;
    nvml_str_fn name;
    nvml_str_fn uuid;
    nvml_error_string_fn error_string; /* optional: NULL if absent */
    /* Optional (NULL if absent): thermal and power state. */
    nvml_temp_fn temp;
    nvml_uint_fn power;
    nvml_uint_fn power_limit;
    nvml_clock_fn clock;
    nvml_clock_fn clock_max;
    nvml_reasons_fn reasons;
    const char *reasons_call; /* the name `reasons` was resolved from */
};

const srv_nvml_reason srv_nvml_reasons[SRV_NVML_N_REASONS] = {
    {SRV_NVML_REASON_GPU_IDLE, "gpu_idle"},
    {SRV_NVML_REASON_APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"},
    {SRV_NVML_REASON_SW_POWER_CAP, "sw_power_cap"},
    {SRV_NVML_REASON_HW_SLOWDOWN, "hw_slowdown"},
    {SRV_NVML_REASON_SYNC_BOOST, "sync_boost"},
    {SRV_NVML_REASON_SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"},
    {SRV_NVML_REASON_HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"},
    {SRV_NVML_REASON_HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"},
    {SRV_NVML_REASON_DISPLAY_CLOCK_SETTING, "display_clock_setting"},
};

/* dlsym returns void *; POSIX guarantees it converts to a function pointer.
 * The memcpy keeps -Wpedantic-style warnings about that conversion away. */
static int nvml_sym(void *lib, const char *name, void *fn_ptr, size_t fn_size) {
    void *p = dlsym(lib, name);
    if (!p)
        return -1;
    memcpy(fn_ptr, &p, fn_size);
    return 0;
}

/* A one-line description of an NVML code: its own text when the library
 * offers nvmlErrorString (cleaned: it is outside input too), else the
 * number. */
static void nvml_describe(const srv_nvml *n, const char *call, nvml_return rc, char *err,
                          size_t err_len) {
    char text[128] = "";
    if (n && n->error_string) {
        const char *s = n->error_string(rc);
        if (s)
            srv_nvml_clean_str(text, sizeof text, s, sizeof text - 1);
    }
    if (err && err_len)
        snprintf(err, err_len, "%s failed: NVML error %d%s%s", call, rc, text[0] ? ": " : "", text);
}

void srv_nvml_clean_str(char *out, size_t out_len, const char *buf, size_t len) {
    if (!out || out_len == 0)
        return;
    size_t k = 0;
    for (size_t i = 0; i < len && buf[i] && k + 1 < out_len; i++) {
        unsigned char c = (unsigned char)buf[i];
        out[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    out[k] = '\0';
}

int srv_nvml_open(const char *path, srv_nvml **out, char *err, size_t err_len) {
    *out = NULL;
    if (!path) {
        const char *env = getenv("BRISK_NVML_LIB");
        path = env && env[0] ? env : SRV_NVML_DEFAULT_LIB;
    }
    srv_nvml *n = calloc(1, sizeof *n);
    if (!n || !(n->path = strdup(path))) {
        free(n);
        snprintf(err, err_len, "out of memory");
        return BRISK_ENOMEM;
    }
    /* RTLD_LOCAL: NVML's symbols stay out of the global namespace. */
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        char clean[256];
        srv_nvml_clean_str(clean, sizeof clean, why ? why : "unknown error", 255);
        snprintf(err, err_len, "cannot load %s: %s", path, clean);
        srv_nvml_close(n);
        return BRISK_ENOTFOUND;
    }
    nvml_init_fn init = NULL;
    static const char *const names[] = {"nvmlInit_v2",
                                        "nvmlShutdown",
                                        "nvmlDeviceGetCount_v2",
                                        "nvmlDeviceGetHandleByIndex_v2",
                                        "nvmlDeviceGetMemoryInfo",
                                        "nvmlDeviceGetUtilizationRates",
                                        "nvmlDeviceGetName",
                                        "nvmlDeviceGetUUID"};
    int miss = -1;
    if (nvml_sym(n->lib, names[0], &init, sizeof init))
        miss = 0;
    else if (nvml_sym(n->lib, names[1], &n->shutdown, sizeof n->shutdown))
        miss = 1;
    else if (nvml_sym(n->lib, names[2], &n->count, sizeof n->count))
        miss = 2;
    else if (nvml_sym(n->lib, names[3], &n->handle, sizeof n->handle))
        miss = 3;
    else if (nvml_sym(n->lib, names[4], &n->memory, sizeof n->memory))
        miss = 4;
    else if (nvml_sym(n->lib, names[5], &n->util, sizeof n->util))
        miss = 5;
    else if (nvml_sym(n->lib, names[6], &n->name, sizeof n->name))
        miss = 6;
    else if (nvml_sym(n->lib, names[7], &n->uuid, sizeof n->uuid))
        miss = 7;
    if (miss >= 0) {
        snprintf(err, err_len, "%s has no %s (not NVML, or too old a driver)", path, names[miss]);
        n->shutdown = NULL; /* never initialised: nothing to shut down */
        srv_nvml_close(n);
        return BRISK_EUNSUPPORTED;
    }
    if (nvml_sym(n->lib, "nvmlErrorString", &n->error_string, sizeof n->error_string))
        n->error_string = NULL;
    /* Optional: a missing one leaves that part of every sample unset. */
    if (nvml_sym(n->lib, "nvmlDeviceGetTemperature", &n->temp, sizeof n->temp))
        n->temp = NULL;
    if (nvml_sym(n->lib, "nvmlDeviceGetPowerUsage", &n->power, sizeof n->power))
        n->power = NULL;
    if (nvml_sym(n->lib, "nvmlDeviceGetEnforcedPowerLimit", &n->power_limit, sizeof n->power_limit))
        n->power_limit = NULL;
    if (nvml_sym(n->lib, "nvmlDeviceGetClockInfo", &n->clock, sizeof n->clock))
        n->clock = NULL;
    if (nvml_sym(n->lib, "nvmlDeviceGetMaxClockInfo", &n->clock_max, sizeof n->clock_max))
        n->clock_max = NULL;
    n->reasons_call = "nvmlDeviceGetCurrentClocksEventReasons";
    if (nvml_sym(n->lib, n->reasons_call, &n->reasons, sizeof n->reasons)) {
        /* The name before driver 535; same signature and bits. */
        n->reasons_call = "nvmlDeviceGetCurrentClocksThrottleReasons";
        if (nvml_sym(n->lib, n->reasons_call, &n->reasons, sizeof n->reasons))
            n->reasons = NULL;
    }
    nvml_return rc = init();
    if (rc != NVML_OK) {
        nvml_describe(n, "nvmlInit_v2", rc, err, err_len);
        n->shutdown = NULL;
        srv_nvml_close(n);
        return BRISK_EIO;
    }
    *out = n;
    return 0;
}

void srv_nvml_close(srv_nvml *n) {
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    if (n->lib)
        dlclose(n->lib);
    free(n->path);
    free(n);
}

const char *srv_nvml_path(const srv_nvml *n) {
    return n->path;
}

int srv_nvml_count(srv_nvml *n, int *count, int *capped, char *err, size_t err_len) {
    unsigned int c = 0;
    *count = 0;
    *capped = 0;
    nvml_return rc = n->count(&c);
    if (rc != NVML_OK) {
        nvml_describe(n, "nvmlDeviceGetCount_v2", rc, err, err_len);
        return BRISK_EIO;
    }
    if (c > SRV_NVML_MAX_GPUS) {
        c = SRV_NVML_MAX_GPUS;
        *capped = 1;
    }
    *count = (int)c;
    return 0;
}

/* Reads one string property through a buffer one byte larger than the length
 * NVML is told, so an unterminated answer still ends in a NUL here. */
static int nvml_read_str(srv_nvml *n, nvml_str_fn fn, const char *call, nvml_device d, char *out,
                         char *err, size_t err_len) {
    char buf[SRV_NVML_STR_LEN + 1];
    memset(buf, 0, sizeof buf);
    nvml_return rc = fn(d, buf, SRV_NVML_STR_LEN);
    if (rc != NVML_OK) {
        nvml_describe(n, call, rc, err, err_len);
        return -1;
    }
    srv_nvml_clean_str(out, SRV_NVML_STR_LEN, buf, SRV_NVML_STR_LEN);
    if (!out[0]) {
        snprintf(err, err_len, "%s returned an empty string", call);
        return -1;
    }
    return 0;
}

/* The outcome of one optional read: the value is valid, the device or
 * library does not offer it (not counted), or it failed or was refused. */
enum { NVML_GOT = 0, NVML_ABSENT, NVML_BAD };

/* Classifies an optional call's return code. NOT_SUPPORTED (the product or
 * mode lacks it) and FUNCTION_NOT_FOUND (this driver's NVML does not
 * implement it) are capabilities; anything else is a failure, described in
 * ebuf. */
static int nvml_optional_rc(const srv_nvml *n, const char *call, nvml_return rc, char *ebuf,
                            size_t ebuf_len) {
    if (rc == NVML_OK)
        return NVML_GOT;
    if (rc == NVML_ERR_NOT_SUPPORTED || rc == NVML_ERR_FUNCTION_NOT_FOUND)
        return NVML_ABSENT;
    nvml_describe(n, call, rc, ebuf, ebuf_len);
    return NVML_BAD;
}

/* Checks one unsigned reading: the call's code `rc` as nvml_optional_rc does,
 * then the value `v`, refused outside lo..hi (`unit` names it in the
 * reason). */
static int nvml_read_uint(const srv_nvml *n, nvml_return rc, const char *call, unsigned v,
                          unsigned lo, unsigned hi, const char *unit, char *ebuf, size_t ebuf_len) {
    int r = nvml_optional_rc(n, call, rc, ebuf, ebuf_len);
    if (r != NVML_GOT)
        return r;
    if (v < lo || v > hi) {
        snprintf(ebuf, ebuf_len, "%s: %u %s is not plausible (%u..%u)", call, v, unit, lo, hi);
        return NVML_BAD;
    }
    return NVML_GOT;
}

/* Reads the optional thermal and power state of device d into g; returns
 * the number of failed or refused reads, the first reason in ebuf. */
static int nvml_read_thermal(const srv_nvml *n, nvml_device d, srv_nvml_gpu *g, char *ebuf,
                             size_t ebuf_len) {
    int bad = 0;
    char e[256];
#define NVML_OUTCOME(r, flag)                                                                      \
    do {                                                                                           \
        int r_ = (r);                                                                              \
        if (r_ == NVML_GOT)                                                                        \
            (flag) = 1;                                                                            \
        else if (r_ == NVML_BAD && bad++ == 0)                                                     \
            snprintf(ebuf, ebuf_len, "%s", e);                                                     \
    } while (0)
    unsigned v = 0;
    /* One unsigned reading: the call, then its checks; have and out set. */
#define NVML_READ_UINT(call, name, lo, hi, unit, have, out)                                        \
    do {                                                                                           \
        v = 0;                                                                                     \
        nvml_return rc_ = (call);                                                                  \
        NVML_OUTCOME(nvml_read_uint(n, rc_, name, v, lo, hi, unit, e, sizeof e), have);            \
        (out) = (have) ? v : 0;                                                                    \
    } while (0)
    if (n->temp)
        NVML_READ_UINT(n->temp(d, NVML_TEMPERATURE_GPU, &v), "nvmlDeviceGetTemperature", 0,
                       SRV_NVML_MAX_TEMP_C, "C", g->have_temp, g->temp_c);
    if (n->power)
        NVML_READ_UINT(n->power(d, &v), "nvmlDeviceGetPowerUsage", 0, SRV_NVML_MAX_POWER_MW, "mW",
                       g->have_power, g->power_mw);
    if (n->power_limit)
        NVML_READ_UINT(n->power_limit(d, &v), "nvmlDeviceGetEnforcedPowerLimit", 1,
                       SRV_NVML_MAX_POWER_MW, "mW", g->have_power_limit, g->power_limit_mw);
    if (n->clock)
        NVML_READ_UINT(n->clock(d, NVML_CLOCK_SM, &v), "nvmlDeviceGetClockInfo(SM)", 0,
                       SRV_NVML_MAX_CLOCK_MHZ, "MHz", g->have_sm_clock, g->sm_clock_mhz);
    if (n->clock_max)
        NVML_READ_UINT(n->clock_max(d, NVML_CLOCK_SM, &v), "nvmlDeviceGetMaxClockInfo(SM)", 1,
                       SRV_NVML_MAX_CLOCK_MHZ, "MHz", g->have_sm_clock_max, g->sm_clock_max_mhz);
#undef NVML_READ_UINT
    if (n->reasons) {
        /* Any mask is possible: bits NVML adds later are kept, not named. */
        unsigned long long mask = 0;
        nvml_return rc = n->reasons(d, &mask);
        NVML_OUTCOME(nvml_optional_rc(n, n->reasons_call, rc, e, sizeof e), g->have_reasons);
        g->reasons = g->have_reasons ? mask : 0;
    }
#undef NVML_OUTCOME
    return bad;
}

int srv_nvml_read(srv_nvml *n, int index, srv_nvml_gpu *g, char *err, size_t err_len) {
    memset(g, 0, sizeof *g);
    char e[256] = "";
    int bad = 0;
#define NVML_NOTE(...)                                                                             \
    do {                                                                                           \
        if (bad++ == 0)                                                                            \
            snprintf(e, sizeof e, __VA_ARGS__);                                                    \
    } while (0)
    nvml_device d = NULL;
    nvml_return rc = n->handle((unsigned int)index, &d);
    if (rc != NVML_OK || !d) {
        if (rc != NVML_OK)
            nvml_describe(n, "nvmlDeviceGetHandleByIndex_v2", rc, e, sizeof e);
        else
            snprintf(e, sizeof e, "nvmlDeviceGetHandleByIndex_v2 returned no handle");
        snprintf(err, err_len, "GPU %d: %s", index, e);
        return 1;
    }
    char ebuf[256];
    if (nvml_read_str(n, n->name, "nvmlDeviceGetName", d, g->name, ebuf, sizeof ebuf) == 0 &&
        nvml_read_str(n, n->uuid, "nvmlDeviceGetUUID", d, g->uuid, ebuf, sizeof ebuf) == 0)
        g->have_ids = 1;
    else
        NVML_NOTE("%s", ebuf);

    nvml_memory mem;
    memset(&mem, 0, sizeof mem);
    rc = n->memory(d, &mem);
    if (rc != NVML_OK) {
        nvml_describe(n, "nvmlDeviceGetMemoryInfo", rc, ebuf, sizeof ebuf);
        NVML_NOTE("%s", ebuf);
    } else if (mem.total == 0 || mem.used > mem.total) {
        NVML_NOTE("nvmlDeviceGetMemoryInfo: used %llu of total %llu bytes is impossible", mem.used,
                  mem.total);
    } else {
        g->have_mem = 1;
        g->mem_used = mem.used;
        g->mem_total = mem.total;
    }

    nvml_utilization u;
    memset(&u, 0, sizeof u);
    rc = n->util(d, &u);
    if (rc == NVML_ERR_NOT_SUPPORTED) {
        /* A capability, not a failure: e.g. a GPU in MIG mode has no
         * device-wide utilisation. Left out without counting an error. */
    } else if (rc != NVML_OK) {
        nvml_describe(n, "nvmlDeviceGetUtilizationRates", rc, ebuf, sizeof ebuf);
        NVML_NOTE("%s", ebuf);
    } else if (u.gpu > 100 || u.memory > 100) {
        NVML_NOTE("nvmlDeviceGetUtilizationRates: %u %% / %u %% is not a percentage", u.gpu,
                  u.memory);
    } else {
        g->have_util = 1;
        g->util_gpu = u.gpu / 100.0;
        g->util_mem = u.memory / 100.0;
    }

    int tb = nvml_read_thermal(n, d, g, ebuf, sizeof ebuf);
    if (tb > 0) {
        NVML_NOTE("%s", ebuf);
        bad += tb - 1;
    }
#undef NVML_NOTE
    if (bad)
        snprintf(err, err_len, "GPU %d: %s", index, e);
    return bad;
}
