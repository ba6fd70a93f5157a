/* fake_nvml.c - a stand-in for libnvidia-ml.so.1 for the GPU-metrics tests on
 * machines without an NVIDIA GPU: the NVML entry points brisk resolves
 * (server/srv_nvml.c), answering from a text file so a test can set values
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
 * Devices 0..63 can be configured; a handle for an index at or past the count,
 * or of a device with no line, is refused with NVML_ERROR_INVALID_ARGUMENT (2). nvmlShutdown appends "shutdown" to
 * $FAKE_NVML_SHUTDOWN_FILE when that is set. */
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

const char *nvmlErrorString(int rc) {
    switch (rc) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}
