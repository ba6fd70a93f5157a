/* srv_nvml.h - the NVIDIA Management Library (NVML), loaded at run time.
 *
 * brisk never links libnvidia-ml: the CPU build and CI have no NVIDIA driver.
 * srv_nvml_open() dlopen()s it, resolves the few functions used here and
 * initialises it; the types are declared in srv_nvml.c from NVIDIA's
 * documented ABI (NVML API reference: nvmlMemory_t, nvmlUtilization_t,
 * nvmlReturn_t), not from nvml.h.
 *
 * Everything the library returns is treated as outside input: counts are
 * capped, strings are read from a bounded buffer whether or not they end in a
 * NUL and reduced to printable ASCII, and values that cannot be true (used
 * memory above total, a utilisation above 100 %, a temperature above
 * 200 C, a power above 10 kW, a clock above 10 GHz) are refused like a failed
 * call. A refused or failed read leaves that part of the sample unset; it
 * never ends the process. NVML_ERROR_NOT_SUPPORTED from the utilisation call
 * (a GPU in MIG mode has none) leaves it unset without counting as a failure.
 *
 * Thermal and power state (temperature, power draw, enforced power limit,
 * current and maximum SM clock, clock event/throttle reasons) is optional:
 * each function is resolved on its own and may be absent from an old
 * library, and NOT_SUPPORTED or FUNCTION_NOT_FOUND from the driver is a
 * capability, not a failure. Either leaves that part unset (its have_* flag
 * 0) without failing the sample or counting an error. The reasons come from
 * nvmlDeviceGetCurrentClocksEventReasons (drivers >= 535), else from its
 * older name nvmlDeviceGetCurrentClocksThrottleReasons.
 *
 * Threading: NVML is thread-safe; one srv_nvml is used by one thread at a
 * time (srv_gpu.c's sampler after open). */
#ifndef SRV_NVML_H
#define SRV_NVML_H

#include <stddef.h>

/* Devices sampled at most. A larger count from the library is capped (the
 * first 64 are sampled): no node has more, and a garbage count must not turn
 * into a huge loop or allocation. */
#define SRV_NVML_MAX_GPUS 64
/* Name and UUID buffers: NVML_DEVICE_NAME_V2_BUFFER_SIZE and
 * NVML_DEVICE_UUID_V2_BUFFER_SIZE are both 96 bytes, NUL included. */
#define SRV_NVML_STR_LEN 96

/* The library opened by default when no path is given and $BRISK_NVML_LIB is
 * unset or empty. */
#define SRV_NVML_DEFAULT_LIB "libnvidia-ml.so.1"

/* One device read. The have_* flags say which parts are valid. */
typedef struct srv_nvml_gpu {
    int have_ids;                /* name and uuid read */
    char name[SRV_NVML_STR_LEN]; /* printable ASCII, NUL-terminated */
    char uuid[SRV_NVML_STR_LEN];
    int have_mem;
    unsigned long long mem_used, mem_total; /* bytes; used <= total, total > 0 */
    int have_util;
    double util_gpu; /* 0..1: time a kernel ran over NVML's last sample period */
    double util_mem; /* 0..1: time device memory was read or written */
    int have_temp;
    unsigned temp_c; /* GPU die (NVML_TEMPERATURE_GPU), degrees C, <= 200 */
    int have_power;
    unsigned power_mw; /* board power draw, milliwatts, <= 10 kW */
    int have_power_limit;
    unsigned power_limit_mw; /* enforced power limit, milliwatts, 1 mW..10 kW */
    int have_sm_clock;
    unsigned sm_clock_mhz; /* current SM clock, MHz, <= 10 GHz */
    int have_sm_clock_max;
    unsigned sm_clock_max_mhz; /* maximum SM clock, MHz, 1 MHz..10 GHz */
    int have_reasons;
    unsigned long long reasons; /* SRV_NVML_REASON_* bits; others kept, unnamed */
} srv_nvml_gpu;

/* Clock event (throttle) reasons: the bits of NVML's nvmlClocksEventReason*
 * (formerly nvmlClocksThrottleReason*) masks, from the NVML API reference. */
enum {
    SRV_NVML_REASON_GPU_IDLE = 0x1,
    SRV_NVML_REASON_APPLICATIONS_CLOCKS_SETTING = 0x2,
    SRV_NVML_REASON_SW_POWER_CAP = 0x4,
    SRV_NVML_REASON_HW_SLOWDOWN = 0x8,
    SRV_NVML_REASON_SYNC_BOOST = 0x10,
    SRV_NVML_REASON_SW_THERMAL_SLOWDOWN = 0x20,
    SRV_NVML_REASON_HW_THERMAL_SLOWDOWN = 0x40,
    SRV_NVML_REASON_HW_POWER_BRAKE_SLOWDOWN = 0x80,
    SRV_NVML_REASON_DISPLAY_CLOCK_SETTING = 0x100,
};

/* The named reasons, in bit order: mask and a snake_case name (the suffix of
 * nvidia-smi's clocks_event_reasons.* query fields; the `reason` label of
 * /metrics). Static storage. */
#define SRV_NVML_N_REASONS 9
typedef struct srv_nvml_reason {
    unsigned long long mask;
    const char *name;
} srv_nvml_reason;
extern const srv_nvml_reason srv_nvml_reasons[SRV_NVML_N_REASONS];

/* Plausibility limits: a value above one of these is refused. */
#define SRV_NVML_MAX_TEMP_C 200u
#define SRV_NVML_MAX_POWER_MW 10000000u /* 10 kW */
#define SRV_NVML_MAX_CLOCK_MHZ 10000u   /* 10 GHz */

typedef struct srv_nvml srv_nvml;

/* Opens `path` (NULL: $BRISK_NVML_LIB, else SRV_NVML_DEFAULT_LIB), resolves
 * the functions and calls nvmlInit_v2. On success *out owns the library
 * (free with srv_nvml_close) and returns 0; on failure returns a negative
 * BRISK_E* code, *out = NULL and a one-line reason in err. */
int srv_nvml_open(const char *path, srv_nvml **out, char *err, size_t err_len);

/* nvmlShutdown and dlclose. NULL is fine. */
void srv_nvml_close(srv_nvml *n);

/* The library path that was opened (owned by n). */
const char *srv_nvml_path(const srv_nvml *n);

/* The number of devices, capped at SRV_NVML_MAX_GPUS (*capped = 1 when the
 * library reported more). Returns 0, or a negative code with the reason in
 * err when the call failed. */
int srv_nvml_count(srv_nvml *n, int *count, int *capped, char *err, size_t err_len);

/* Reads device `index` into *g (fully overwritten). Returns the number of
 * failed or refused reads (0: everything valid); the first reason goes to
 * err. */
int srv_nvml_read(srv_nvml *n, int index, srv_nvml_gpu *g, char *err, size_t err_len);

/* Copies at most `len` bytes of an NVML string buffer into out[out_len]:
 * stops at the first NUL or at len, turns bytes outside printable ASCII into
 * '?', and always terminates. Exposed for the tests. */
void srv_nvml_clean_str(char *out, size_t out_len, const char *buf, size_t len);

#endif
