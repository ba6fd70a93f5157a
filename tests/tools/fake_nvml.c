/* fake_nvml.c - a stand-in for libnvidia-ml.so.1 for the GPU-metrics tests on
 * machines without an NVIDIA GPU: the NVML entry points brisk resolves
 * (server/ops/srv_nvml.c), answering from a text file so a test can set values
 * and failures and change them while brisk runs. Built as
 * build/tests/libfake_nvml.so; brisk loads it through $BRISK_NVML_LIB.
 *
 * $FAKE_NVML_FILE names the file; it is read again by nvmlInit_v2 and by
 * every nvmlDeviceGetCount_v2 (the start of each brisk sample). One setting a
 * line, "key value" or "key.INDEX value"; unknown lines are ignored:
 *   init_rc N          nvmlInit_v2's return code (0)
 *   count N            device count, any unsigned value (0)
 *   count_rc N         nvmlDeviceGetCount_v2's return code (0)
 *   stall_ms N         nvmlDeviceGetCount_v2 sleeps this long first (0)
 *   name.I TEXT        device I's name (the rest of the line)
 *   uuid.I TEXT        device I's UUID
 *   name_raw.I 1       the name fills the whole buffer: no NUL, control bytes
 *   total.I N  used.I N         memory in bytes
 *   util.I N  memutil.I N       utilisation rates in percent (any unsigned value)
 *   handle_rc.I N  name_rc.I N  mem_rc.I N  util_rc.I N   return codes (0)
 *   temp.I N           temperature, degrees C
 *   power.I N          power draw, milliwatts
 *   power_limit.I N    enforced power limit, milliwatts
 *   sm_clock.I N       current SM clock, MHz
 *   sm_clock_max.I N   maximum SM clock, MHz
 *   reasons.I N        clock event reasons mask (0x... allowed)
 *                      (any unsigned value; without its line a device answers
 *                      NVML_ERROR_NOT_SUPPORTED (3) for that reading)
 *   legacy_reasons.I N what the pre-535 name nvmlDeviceGetCurrentClocks-
 *                      ThrottleReasons answers (default: reasons.I)
 *   temp_rc.I N  power_rc.I N  power_limit_rc.I N  sm_clock_rc.I N
 *   sm_clock_max_rc.I N  reasons_rc.I N   return codes, over the values
 * Devices 0..63 can be configured; a handle for an index at or past the count,
 * or of a device with no line, is refused with NVML_ERROR_INVALID_ARGUMENT (2),
 * and so are a temperature sensor other than NVML_TEMPERATURE_GPU (0) and a
 * clock type other than NVML_CLOCK_SM (1). nvmlShutdown appends "shutdown" to
 * $FAKE_NVML_SHUTDOWN_FILE when that is set.
 *
 * Both names of the reasons call are exported; a test that needs one of
 * them, or any other optional entry point, missing from the library renames
 * it in a copy of this file's .so (test_srv_gpu.c, fake_hide). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FAKE_MAX = 64, FAKE_STR = 128 };

typedef struct {
    char name[FAKE_STR], uuid[FAKE_STR];
    int configured; /* some key.I line named it */
    int name_raw;
    unsigned long long total, used;
    unsigned int util, memutil;
    int handle_rc, name_rc, mem_rc, util_rc;
    /* Thermal and power state: value, whether a line set it, return code. */
    unsigned int temp, power, power_limit, sm_clock, sm_clock_max;
    unsigned long long reasons, legacy_reasons;
    int has_temp, has_power, has_power_limit, has_sm_clock, has_sm_clock_max, has_reasons,
        has_legacy_reasons;
    int temp_rc, power_rc, power_limit_rc, sm_clock_rc, sm_clock_max_rc, reasons_rc;
} fake_dev;

static struct {
    int init_rc, count_rc;
    unsigned long long count;
    long stall_ms;
    fake_dev dev[FAKE_MAX];
} fake;

typedef struct {
    unsigned long long total, free, used;
} fake_memory;

typedef struct {
    unsigned int gpu, memory;
} fake_util;

/* The exported entry points, as NVML declares them (int-sized return code,
 * device handles are opaque pointers). */
int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_dev **device);
int nvmlDeviceGetMemoryInfo(fake_dev *device, fake_memory *memory);
int nvmlDeviceGetUtilizationRates(fake_dev *device, fake_util *util);
int nvmlDeviceGetName(fake_dev *device, char *name, unsigned int length);
int nvmlDeviceGetUUID(fake_dev *device, char *uuid, unsigned int length);
int nvmlDeviceGetTemperature(fake_dev *device, int sensor, unsigned int *temp);
int nvmlDeviceGetPowerUsage(fake_dev *device, unsigned int *power);
int nvmlDeviceGetEnforcedPowerLimit(fake_dev *device, unsigned int *limit);
int nvmlDeviceGetClockInfo(fake_dev *device, int type, unsigned int *clock);
int nvmlDeviceGetMaxClockInfo(fake_dev *device, int type, unsigned int *clock);
int nvmlDeviceGetCurrentClocksEventReasons(fake_dev *device, unsigned long long *reasons);
int nvmlDeviceGetCurrentClocksThrottleReasons(fake_dev *device, unsigned long long *reasons);
const char *nvmlErrorString(int rc);

static void fake_load(void) {
    memset(&fake, 0, sizeof fake);
    const char *path = getenv("FAKE_NVML_FILE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        const char *val = sp + 1;
        unsigned long long num = strtoull(val, NULL, 0);
        char *dot = strchr(line, '.');
        if (!dot) {
            if (!strcmp(line, "init_rc"))
                fake.init_rc = (int)num;
            else if (!strcmp(line, "count"))
                fake.count = num;
            else if (!strcmp(line, "count_rc"))
                fake.count_rc = (int)num;
            else if (!strcmp(line, "stall_ms"))
                fake.stall_ms = (long)num;
            continue;
        }
        *dot = '\0';
        long i = strtol(dot + 1, NULL, 10);
        if (i < 0 || i >= FAKE_MAX)
            continue;
        fake_dev *d = &fake.dev[i];
        d->configured = 1;
        if (!strcmp(line, "name"))
            snprintf(d->name, sizeof d->name, "%s", val);
        else if (!strcmp(line, "uuid"))
            snprintf(d->uuid, sizeof d->uuid, "%s", val);
        else if (!strcmp(line, "name_raw"))
            d->name_raw = (int)num;
        else if (!strcmp(line, "total"))
            d->total = num;
        else if (!strcmp(line, "used"))
            d->used = num;
        else if (!strcmp(line, "util"))
            d->util = (unsigned int)num;
        else if (!strcmp(line, "memutil"))
            d->memutil = (unsigned int)num;
        else if (!strcmp(line, "handle_rc"))
            d->handle_rc = (int)num;
        else if (!strcmp(line, "name_rc"))
            d->name_rc = (int)num;
        else if (!strcmp(line, "mem_rc"))
            d->mem_rc = (int)num;
        else if (!strcmp(line, "util_rc"))
            d->util_rc = (int)num;
        else if (!strcmp(line, "temp"))
            d->temp = (unsigned int)num, d->has_temp = 1;
        else if (!strcmp(line, "power"))
            d->power = (unsigned int)num, d->has_power = 1;
        else if (!strcmp(line, "power_limit"))
            d->power_limit = (unsigned int)num, d->has_power_limit = 1;
        else if (!strcmp(line, "sm_clock"))
            d->sm_clock = (unsigned int)num, d->has_sm_clock = 1;
        else if (!strcmp(line, "sm_clock_max"))
            d->sm_clock_max = (unsigned int)num, d->has_sm_clock_max = 1;
        else if (!strcmp(line, "reasons"))
            d->reasons = num, d->has_reasons = 1;
        else if (!strcmp(line, "legacy_reasons"))
            d->legacy_reasons = num, d->has_legacy_reasons = 1;
        else if (!strcmp(line, "temp_rc"))
            d->temp_rc = (int)num;
        else if (!strcmp(line, "power_rc"))
            d->power_rc = (int)num;
        else if (!strcmp(line, "power_limit_rc"))
            d->power_limit_rc = (int)num;
        else if (!strcmp(line, "sm_clock_rc"))
            d->sm_clock_rc = (int)num;
        else if (!strcmp(line, "sm_clock_max_rc"))
            d->sm_clock_max_rc = (int)num;
        else if (!strcmp(line, "reasons_rc"))
            d->reasons_rc = (int)num;
    }
    fclose(f);
}

int nvmlInit_v2(void) {
    fake_load();
    return fake.init_rc;
}

int nvmlShutdown(void) {
    const char *path = getenv("FAKE_NVML_SHUTDOWN_FILE");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fputs("shutdown\n", f);
        fclose(f);
    }
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    fake_load();
    if (fake.stall_ms > 0) {
        struct timespec ts = {fake.stall_ms / 1000, (fake.stall_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (fake.count_rc)
        return fake.count_rc;
    *count = (unsigned int)fake.count;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_dev **device) {
    if (index >= FAKE_MAX || index >= fake.count || !fake.dev[index].configured)
        return 2;
    if (fake.dev[index].handle_rc)
        return fake.dev[index].handle_rc;
    *device = &fake.dev[index];
    return 0;
}

int nvmlDeviceGetMemoryInfo(fake_dev *d, fake_memory *m) {
    if (d->mem_rc)
        return d->mem_rc;
    m->total = d->total;
    m->used = d->used;
    m->free = d->total > d->used ? d->total - d->used : 0;
    return 0;
}

int nvmlDeviceGetUtilizationRates(fake_dev *d, fake_util *u) {
    if (d->util_rc)
        return d->util_rc;
    u->gpu = d->util;
    u->memory = d->memutil;
    return 0;
}

/* NVML's documented behaviour: the string and its NUL must fit in length,
 * else NVML_ERROR_INSUFFICIENT_SIZE (7). name_raw breaks that rule. */
static int fake_str(const char *s, char *out, unsigned int length, int rc) {
    if (rc)
        return rc;
    if (strlen(s) + 1 > length)
        return 7;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

int nvmlDeviceGetName(fake_dev *d, char *name, unsigned int length) {
    if (d->name_raw && !d->name_rc) {
        for (unsigned int i = 0; i < length; i++)
            name[i] = (char)(i % 8 == 3 ? 0x07 : 'N'); /* BEL every 8 bytes, no NUL */
        return 0;
    }
    return fake_str(d->name, name, length, d->name_rc);
}

int nvmlDeviceGetUUID(fake_dev *d, char *uuid, unsigned int length) {
    return fake_str(d->uuid, uuid, length, 0);
}

/* One unsigned value: its return code if set, else NOT_SUPPORTED (3) when
 * no line gave it, else the value. */
static int fake_uint(unsigned int v, int has, int rc, unsigned int *out) {
    if (rc)
        return rc;
    if (!has)
        return 3;
    *out = v;
    return 0;
}

int nvmlDeviceGetTemperature(fake_dev *d, int sensor, unsigned int *temp) {
    if (sensor != 0) /* NVML_TEMPERATURE_GPU */
        return 2;
    return fake_uint(d->temp, d->has_temp, d->temp_rc, temp);
}

int nvmlDeviceGetPowerUsage(fake_dev *d, unsigned int *power) {
    return fake_uint(d->power, d->has_power, d->power_rc, power);
}

int nvmlDeviceGetEnforcedPowerLimit(fake_dev *d, unsigned int *limit) {
    return fake_uint(d->power_limit, d->has_power_limit, d->power_limit_rc, limit);
}

int nvmlDeviceGetClockInfo(fake_dev *d, int type, unsigned int *clock) {
    if (type != 1) /* NVML_CLOCK_SM */
        return 2;
    return fake_uint(d->sm_clock, d->has_sm_clock, d->sm_clock_rc, clock);
}

int nvmlDeviceGetMaxClockInfo(fake_dev *d, int type, unsigned int *clock) {
    if (type != 1)
        return 2;
    return fake_uint(d->sm_clock_max, d->has_sm_clock_max, d->sm_clock_max_rc, clock);
}

int nvmlDeviceGetCurrentClocksEventReasons(fake_dev *d, unsigned long long *reasons) {
    if (d->reasons_rc)
        return d->reasons_rc;
    if (!d->has_reasons)
        return 3;
    *reasons = d->reasons;
    return 0;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(fake_dev *d, unsigned long long *reasons) {
    if (d->reasons_rc)
        return d->reasons_rc;
    if (!d->has_reasons && !d->has_legacy_reasons)
        return 3;
    *reasons = d->has_legacy_reasons ? d->legacy_reasons : d->reasons;
    return 0;
}

const char *nvmlErrorString(int rc) {
    switch (rc) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}
