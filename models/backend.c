/* backend.c - choosing a backend: --device parsing, AUTO's rule, and the
 * CUDA entry points of a build without CUDA. */
#include "models/backend.h"

#include <stdio.h>
#include <string.h>

#include "brisk_config.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"

int model_device_parse(const char *s, model_device *out) {
    if (!s)
        return BRISK_EINVAL;
    if (!strcmp(s, "cpu"))
        *out = MODEL_DEVICE_CPU;
    else if (!strcmp(s, "cuda"))
        *out = MODEL_DEVICE_CUDA;
    else if (!strcmp(s, "auto"))
        *out = MODEL_DEVICE_AUTO;
    else
        return BRISK_EINVAL;
    return 0;
}

const char *model_device_name(model_device d) {
    switch (d) {
    case MODEL_DEVICE_CPU: return "cpu";
    case MODEL_DEVICE_CUDA: return "cuda";
    default: return "auto";
    }
}

const char *model_pass_kind_name(model_pass_kind k) {
    switch (k) {
    case MODEL_PASS_WARMUP: return "warmup";
    case MODEL_PASS_CAPTURE: return "capture";
    case MODEL_PASS_REPLAY: return "replay";
    default: return "eager";
    }
}

/* AUTO: CUDA when it is there and the weights take at most the memory
 * budget less a margin for scratch and a useful KV pool (1/8 of it). */
static model_device backend_pick(const model *m, const model_backend_opts *o) {
    size_t free_b = 0, total_b = 0;
    if (!model_config_cuda_validated(model_get_config(m))) {
        BRISK_INFO("device auto: cpu (the CUDA path of this %s model has not yet been checked on "
                   "a GPU; --device cuda runs it)",
                   model_get_config(m)->arch->name);
        return MODEL_DEVICE_CPU;
    }
    if (!model_backend_cuda_available(&free_b, &total_b)) {
        BRISK_INFO("device auto: cpu (%s)",
                   BRISK_HAVE_CUDA ? "no CUDA device found" : "brisk was built without CUDA");
        return MODEL_DEVICE_CPU;
    }
    double util = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.9;
    double budget = util * (double)total_b - (double)(total_b - free_b);
    size_t need = model_backend_cuda_weight_bytes(m);
    if ((double)need > budget * 0.875) {
        BRISK_INFO(
            "device auto: cpu (the weights need %.2f GB, the GPU budget is %.2f GB of %.2f GB)",
            need / 1e9, budget / 1e9, total_b / 1e9);
        return MODEL_DEVICE_CPU;
    }
    BRISK_INFO("device auto: cuda (weights %.2f GB of a %.2f GB budget)", need / 1e9, budget / 1e9);
    return MODEL_DEVICE_CUDA;
}

int model_backend_create(const model *m, const model_backend_opts *o, model_backend **out,
                         char *err, size_t err_len) {
    *out = NULL;
    if (!m || !o || o->max_batch_tokens <= 0 || o->max_ctx <= 0 || o->max_seqs <= 0) {
        snprintf(err, err_len, "bad backend options");
        return BRISK_EINVAL;
    }
    model_device d = o->device == MODEL_DEVICE_AUTO ? backend_pick(m, o) : o->device;
    if (d == MODEL_DEVICE_CUDA)
        return model_backend_cuda_create(m, o, out, err, err_len);
    return model_backend_cpu_create(m, o, out, err, err_len);
}

int model_device_is_cpu(model_device d) {
    return d == MODEL_DEVICE_CPU ||
           (d == MODEL_DEVICE_AUTO && !model_backend_cuda_available(NULL, NULL));
}

void model_backend_free(model_backend *be) {
    if (be)
        be->ops->free(be);
}

#if !BRISK_HAVE_CUDA
int model_backend_cuda_create(const model *m, const model_backend_opts *o, model_backend **out,
                              char *err, size_t err_len) {
    (void)m, (void)o;
    *out = NULL;
    snprintf(err, err_len,
             "--device cuda: this brisk was built without CUDA (no CUDA toolkit at "
             "configure time)");
    return BRISK_EUNSUPPORTED;
}

int model_backend_cuda_available(size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes)
        *free_bytes = 0;
    if (total_bytes)
        *total_bytes = 0;
    return 0;
}

size_t model_backend_cuda_weight_bytes(const model *m) {
    (void)m;
    return 0;
}
#endif
