/* srv_gpu.h - GPU metrics for GET /metrics: a sampler thread reads every
 * visible GPU through NVML (srv_nvml.h) every interval and keeps the latest
 * values; /metrics renders that cache and never calls NVML itself.
 *
 * Why a thread of its own, not a libuv timer with uv_queue_work: NVML calls
 * usually take microseconds but can block for seconds (a GPU fallen off the
 * bus, a driver busy with a reset). On libuv's small shared threadpool a
 * stuck call would hold a worker other loop work needs, and the loop could
 * not close until it returned. Here the loop thread only takes a mutex that
 * the sampler holds for a memcpy, and shutdown waits a bounded time for the
 * sampler (SRV_GPU_STOP_WAIT_S) before leaving a stuck one behind.
 *
 * Families (gauges unless marked; per-GPU ones carry model_name and gpu, the
 * NVML index; brisk_gpu_info also name and uuid):
 *   brisk_gpu_info{gpu,name,uuid} 1
 *   brisk_gpu_memory_used_bytes            device memory allocated (NVML used)
 *   brisk_gpu_memory_total_bytes           device memory installed
 *   brisk_gpu_utilization_ratio            0..1, time a kernel ran (NVML utilization.gpu)
 *   brisk_gpu_memory_utilization_ratio     0..1, time memory was read or written
 *                                          (NVML utilization.memory; not used/total)
 *   brisk_gpu_temperature_celsius          GPU die temperature
 *   brisk_gpu_power_draw_watts             board power draw
 *   brisk_gpu_power_limit_watts            enforced power limit
 *   brisk_gpu_sm_clock_hertz               current SM clock
 *   brisk_gpu_sm_clock_max_hertz           maximum SM clock
 *   brisk_gpu_clock_throttle_reason{reason} 0/1 per NVML clock event reason
 *                                          (srv_nvml_reasons' names, and "other")
 *   brisk_gpu_metrics_errors_total         counter: failed or refused NVML reads
 * A value whose read failed in the latest sample is left out (its series goes
 * stale in Prometheus), and so is every per-GPU value when the latest sample
 * is older than 3 intervals + 1 s (the sampler is stuck in a call). The error
 * counter is always rendered.
 *
 * Threading: create, render and free run on one thread (the loop thread);
 * the sampler thread only touches the cache under the mutex. */
#ifndef SRV_GPU_H
#define SRV_GPU_H

#include <stddef.h>

#include "server/ops/srv_nvml.h"

/* --gpu-metrics: auto (the zero value) = on when NVML loads and sees a GPU,
 * silently off otherwise; on = refuse to start without them; off. */
typedef enum {
    SRV_GPU_METRICS_AUTO = 0,
    SRV_GPU_METRICS_ON,
    SRV_GPU_METRICS_OFF,
} srv_gpu_mode;

/* Parses "auto", "on" or "off"; returns 0, or BRISK_EINVAL. */
int srv_gpu_mode_parse(const char *s, srv_gpu_mode *out);

/* Default sampling interval, seconds: finer than any usual scrape interval
 * (15-60 s) at a cost of a few microseconds of NVML calls per GPU. */
#define SRV_GPU_DEFAULT_INTERVAL_S 5.0
/* How long srv_gpu_free waits for a sampler stuck in an NVML call. */
#define SRV_GPU_STOP_WAIT_S 2.0

typedef struct srv_gpu_config {
    srv_gpu_mode mode;
    double interval_s;      /* > 0: sampler thread; <= 0: no thread, the caller
                               samples with srv_gpu_sample (tests) */
    const char *lib_path;   /* NULL: $BRISK_NVML_LIB or libnvidia-ml.so.1 */
    const char *model_name; /* the model_name label; copied; NULL: "" */
} srv_gpu_config;

typedef struct srv_gpu srv_gpu;

/* Starts GPU metrics as cfg->mode says, logging the choice. Returns 0 with
 * *out a running sampler (free with srv_gpu_free), or 0 with *out = NULL when
 * they are off (mode off, or auto without NVML or without a GPU). With mode
 * on and no NVML or no GPU, returns a negative BRISK_E* code and a one-line
 * reason in err. The first sample is taken before this returns. */
int srv_gpu_create(const srv_gpu_config *cfg, srv_gpu **out, char *err, size_t err_len);

/* Stops the sampler (waiting at most SRV_GPU_STOP_WAIT_S), shuts NVML down
 * and frees. A sampler still stuck in NVML after that is left running and its
 * memory is not freed (the process is about to exit). NULL is fine. */
void srv_gpu_free(srv_gpu *g);

/* The number of GPUs the latest sample saw. */
int srv_gpu_count(srv_gpu *g);

/* Takes one sample now on the calling thread and publishes it (what the
 * sampler thread does each interval). Exposed for tests with interval 0. */
void srv_gpu_sample(srv_gpu *g);

/* Renders the GPU families as of `now` (brisk_now() seconds) and appends them
 * to the malloc'd, NUL-terminated *text of length *len (which is realloc'd).
 * Returns 0, or BRISK_ENOMEM (then *text is unchanged and still owned by the
 * caller). */
int srv_gpu_render_append(srv_gpu *g, double now, char **text, size_t *len);

#endif
