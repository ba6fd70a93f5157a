// kern_cuda_matmul.cu - the weight matmuls: weight upload (host-side
// conversion, staged copies, row ranges of fused weights), the cuBLAS
// context, the f32 -> f16 activation kernel, and kern_cuda_matmul, which
// picks a path per call: the tensor-core GEMV (kern_cuda_gemv.cu), cuBLAS,
// the W8A16 kernels (kern_cuda_w8a16.cu), or INT8 dequantised into cuBLAS.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <dlfcn.h>
#include <limits.h>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_gemv.cuh"
#include "kernels/cuda/kern_cuda_matmul.cuh"
#include "kernels/cuda/kern_cuda_w8a16.cuh"

// Output bytes converted per slice: large enough that the per-copy overhead
// vanishes, small enough to be a bounded extra host allocation while a
// multi-GiB model loads.
#define MM_SLICE_BYTES ((size_t)32 << 20)
// cuBLAS's own scratch, fixed at context creation so that no call allocates
// (graph capture); 32 MiB is what cuBLAS asks for on Hopper.
#define MM_BLAS_WS_BYTES ((size_t)32 << 20)
// The f16 copy of x starts at this alignment inside the caller's workspace,
// whatever the workspace pointer: 16-byte vector loads, cuBLAS's preference.
#define MM_WS_ALIGN 256

struct kern_cuda_matmul_ctx {
    cublasHandle_t blas;
    cudaStream_t stream;
    void *blas_ws;
    int n_sm;     // steers the INT8 tile choice and the GEMV's split of K
    int cc_major; // the GEMV needs sm_80
    void *dq_ws;  // INT8 dequantisation workspace (KERN_CUDA_MM_DEQUANT), or NULL
    size_t dq_bytes;
};

// ---- cuBLAS, loaded when first needed ----------------------------------------------
// brisk does not link cuBLAS: libcublas + libcublasLt are ~600 MB that the
// loader would map (and partly relocate) at every start, CPU runs and
// `brisk tokenize` included. The first matmul context dlopens the soname this
// build was compiled against and takes the seven entry points it uses.

struct mm_blas_api {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSetMathMode) set_math_mode;
    // The C entry point (cublas_api.h also declares a C++ overload taking a
    // cudaDataType compute type, so decltype cannot name it).
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasGetStatusName) status_name;
};
static mm_blas_api g_blas;
static char g_blas_err[200];
static std::once_flag g_blas_once;

static void mm_blas_load(void) {
    char soname[32];
    snprintf(soname, sizeof soname, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_blas_err, sizeof g_blas_err, "%s", dlerror());
        return;
    }
    mm_blas_api a;
    a.create = (decltype(a.create))dlsym(h, "cublasCreate_v2");
    a.destroy = (decltype(a.destroy))dlsym(h, "cublasDestroy_v2");
    a.set_stream = (decltype(a.set_stream))dlsym(h, "cublasSetStream_v2");
    a.set_workspace = (decltype(a.set_workspace))dlsym(h, "cublasSetWorkspace_v2");
    a.set_math_mode = (decltype(a.set_math_mode))dlsym(h, "cublasSetMathMode");
    a.gemm_ex = (decltype(a.gemm_ex))dlsym(h, "cublasGemmEx");
    a.status_name = (decltype(a.status_name))dlsym(h, "cublasGetStatusName");
    if (!a.create || !a.destroy || !a.set_stream || !a.set_workspace || !a.set_math_mode ||
        !a.gemm_ex || !a.status_name) {
        snprintf(g_blas_err, sizeof g_blas_err, "%s lacks a cuBLAS entry point brisk uses", soname);
        dlclose(h);
        return;
    }
    g_blas = a; // the handle stays open for the process's life
}

// 0 once cuBLAS is loaded; BRISK_EUNSUPPORTED (with the loader's reason) if not.
static int mm_blas_ready(void) {
    std::call_once(g_blas_once, mm_blas_load);
    if (g_blas.create)
        return BRISK_OK;
    return kern_cuda_fail(BRISK_EUNSUPPORTED, "dlopen(libcublas)", __FILE__, __LINE__, g_blas_err);
}

// ---- cuBLAS status ----------------------------------------------------------------

// A cuBLAS failure as a BRISK_E* code, recorded like kern_cuda_status's:
// "cublasGemmEx (kern_cuda_matmul.cu:200): CUBLAS_STATUS_EXECUTION_FAILED".
// Out of memory and "cannot run here" keep their meaning (kern_cuda_buf.h);
// anything else is BRISK_EIO (arguments were validated before the call).
static int mm_blas_status(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS)
        return BRISK_OK;
    // cuBLAS may leave a runtime error behind (a failed launch inside it):
    // clear it so that the next kernel's launch check is not blamed.
    cudaGetLastError();
    int code = BRISK_EIO;
    if (st == CUBLAS_STATUS_ALLOC_FAILED)
        code = BRISK_ENOMEM;
    else if (st == CUBLAS_STATUS_NOT_INITIALIZED || st == CUBLAS_STATUS_ARCH_MISMATCH)
        code = BRISK_EUNSUPPORTED; // no driver or device; a GPU cuBLAS cannot run on
    return kern_cuda_fail(code, what, file, line, g_blas.status_name(st));
}
#define MM_BLAS(call, name) mm_blas_status((call), name, __FILE__, __LINE__)

// ---- weights ----------------------------------------------------------------------

static bool mm_fmt_ok(kern_cuda_wfmt fmt) {
    return fmt == KERN_CUDA_W_F16 || fmt == KERN_CUDA_W_INT8;
}

// Device bytes of one row: F16 values, or INT8 values plus their scales.
static size_t mm_row_bytes(kern_cuda_wfmt fmt, int n_in) {
    return fmt == KERN_CUDA_W_F16 ? (size_t)n_in * 2
                                  : (size_t)n_in + (size_t)(n_in / KERN_QK) * sizeof(uint16_t);
}

// 0 for an invalid format or size (INT8 needs n_in % 32 == 0).
extern "C" size_t kern_cuda_weight_bytes(kern_cuda_wfmt fmt, int n_out, int n_in) {
    if (!mm_fmt_ok(fmt) || n_out <= 0 || n_in <= 0 ||
        (fmt == KERN_CUDA_W_INT8 && n_in % KERN_QK != 0))
        return 0;
    return (size_t)n_out * mm_row_bytes(fmt, n_in);
}

extern "C" void kern_cuda_weight_free(kern_cuda_weight *w) {
    if (!w)
        return;
    // cudaFree fails only on a device already lost; nothing to tell a
    // void caller, but the error must not linger for the next launch check.
    if (w->data && cudaFree(w->data) != cudaSuccess)
        cudaGetLastError();
    if (w->scales && cudaFree(w->scales) != cudaSuccess)
        cudaGetLastError();
    memset(w, 0, sizeof *w);
}

// Host scratch for converting one row: the f32 values and one row of Q8_0
// blocks (a Q8_0 source row into INT8 needs neither).
typedef struct {
    float *f32;
    kern_block_q8_0 *q8;
} mm_row_scratch;

// rows source rows from src (row stride src_row bytes) into one staging
// slice: F16 as rows * n_in halves; INT8 as rows * n_in int8 followed by
// rows * (n_in / 32) scales (the two device arrays' slices, back to back).
static void mm_convert_rows(kern_cuda_wfmt fmt, kern_type src_type, const uint8_t *src,
                            size_t src_row, int rows, int n_in, uint8_t *out,
                            const mm_row_scratch *tmp) {
    if (fmt == KERN_CUDA_W_F16) {
        uint16_t *h = (uint16_t *)out;
        for (int r = 0; r < rows; r++) {
            kern_dequantize_row(src_type, src + (size_t)r * src_row, tmp->f32, n_in);
            kern_quantize_row(KERN_TYPE_F16, tmp->f32, h + (size_t)r * n_in, n_in);
        }
        return;
    }
    const int nb = n_in / KERN_QK;
    int8_t *qv = (int8_t *)out;
    uint16_t *sv = (uint16_t *)(out + (size_t)rows * n_in); // 2-aligned: n_in is even
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)r * src_row;
        const uint8_t *blocks; // nb Q8_0 blocks, read bytewise: no alignment
                               // is assumed of the source
        if (src_type == KERN_TYPE_Q8_0) {
            blocks = row; // exact: values and scales as stored
        } else if (kern_int8_type(src_type) == KERN_TYPE_Q8_0 &&
                   kern_requantize_row_q8(src_type, row, tmp->q8, n_in) == 0) {
            // The codes carried over with the block's scale, as the CPU's
            // --weights int8 conversion does: exact for Q4_0, Q5_0 and
            // IQ4_NL, IQ4_XS's scales rounded to fp16 (kern_kquant.h).
            blocks = (const uint8_t *)tmp->q8;
        } else {
            kern_dequantize_row(src_type, row, tmp->f32, n_in);
            kern_quantize_row(KERN_TYPE_Q8_0, tmp->f32, tmp->q8, n_in);
            blocks = (const uint8_t *)tmp->q8;
        }
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = blocks + (size_t)b * sizeof(kern_block_q8_0);
            memcpy(&sv[(size_t)r * nb + b], blk + offsetof(kern_block_q8_0, d), sizeof(uint16_t));
            memcpy(&qv[(size_t)r * n_in + (size_t)b * KERN_QK], blk + offsetof(kern_block_q8_0, qs),
                   KERN_QK);
        }
    }
}

// Converts slice after slice of n_rows source rows into the host staging
// buffer and copies each into rows row0.. of w. The buffer is pageable on
// purpose: page-locking tens of MiB costs milliseconds, paid again for each
// of a model's hundreds of tensors, while the single-threaded conversion,
// not the copy, bounds the rate. cudaMemcpy returns once the runtime has
// taken the data, so the buffer is free for the next slice.
static int mm_upload_slices(kern_cuda_weight *w, int row0, int n_rows, kern_type src_type,
                            const uint8_t *src, uint8_t *stage, int rows_per_slice,
                            const mm_row_scratch *tmp) {
    const int n_in = w->n_in;
    const size_t src_row = kern_row_bytes(src_type, n_in);
    const size_t val_row = w->fmt == KERN_CUDA_W_F16 ? (size_t)n_in * 2 : (size_t)n_in;
    const size_t sc_row = (size_t)(n_in / KERN_QK) * sizeof(uint16_t);
    int rc = BRISK_OK;
    for (int r0 = 0; r0 < n_rows && rc == BRISK_OK; r0 += rows_per_slice) {
        const int rows = n_rows - r0 < rows_per_slice ? n_rows - r0 : rows_per_slice;
        const size_t dst_row = (size_t)row0 + (size_t)r0;
        mm_convert_rows(w->fmt, src_type, src + (size_t)r0 * src_row, src_row, rows, n_in, stage,
                        tmp);
        rc = KERN_CUDA_CALL(cudaMemcpy((uint8_t *)w->data + dst_row * val_row, stage,
                                       (size_t)rows * val_row, cudaMemcpyHostToDevice));
        if (rc == BRISK_OK && w->fmt == KERN_CUDA_W_INT8)
            rc = KERN_CUDA_CALL(cudaMemcpy((uint8_t *)w->scales + dst_row * sc_row,
                                           stage + (size_t)rows * val_row, (size_t)rows * sc_row,
                                           cudaMemcpyHostToDevice));
    }
    return rc;
}

extern "C" int kern_cuda_weight_alloc(kern_cuda_weight *w, kern_cuda_wfmt fmt, int n_out,
                                      int n_in) {
    if (!w)
        return BRISK_EINVAL;
    memset(w, 0, sizeof *w);
    if (kern_cuda_weight_bytes(fmt, n_out, n_in) == 0)
        return BRISK_EINVAL;
    kern_cuda_weight dw = {fmt, n_out, n_in, NULL, NULL};
    const size_t n_vals = (size_t)n_out * (size_t)n_in;
    int rc = KERN_CUDA_CALL(cudaMalloc(&dw.data, fmt == KERN_CUDA_W_F16 ? n_vals * 2 : n_vals));
    if (rc == BRISK_OK && fmt == KERN_CUDA_W_INT8)
        rc = KERN_CUDA_CALL(cudaMalloc((void **)&dw.scales, n_vals / KERN_QK * sizeof(uint16_t)));
    if (rc != BRISK_OK) {
        kern_cuda_weight_free(&dw);
        return rc;
    }
    *w = dw;
    return BRISK_OK;
}

extern "C" int kern_cuda_weight_upload_rows(kern_cuda_weight *w, int row0, kern_type src_type,
                                            const void *src, int n_rows) {
    if (!w || !w->data || !mm_fmt_ok(w->fmt) || !src || !kern_type_known((uint32_t)src_type) ||
        row0 < 0 || n_rows <= 0 || n_rows > w->n_out - row0 ||
        w->n_in % kern_type_block_size(src_type) != 0 ||
        (w->fmt == KERN_CUDA_W_INT8 && (w->n_in % KERN_QK != 0 || !w->scales)))
        return BRISK_EINVAL;
    const int n_in = w->n_in;
    int rc;
    if (w->fmt == KERN_CUDA_W_F16 && src_type == KERN_TYPE_F16) {
        // Already the device format: straight from the source, no staging.
        rc = KERN_CUDA_CALL(cudaMemcpy((uint16_t *)w->data + (size_t)row0 * n_in, src,
                                       (size_t)n_rows * n_in * 2, cudaMemcpyHostToDevice));
    } else {
        const size_t row_bytes = mm_row_bytes(w->fmt, n_in);
        size_t rows = MM_SLICE_BYTES / row_bytes;
        rows = rows < 1 ? 1 : rows > (size_t)n_rows ? (size_t)n_rows : rows;
        uint8_t *stage = (uint8_t *)malloc(rows * row_bytes);
        mm_row_scratch tmp = {
            (float *)malloc((size_t)n_in * sizeof(float)),
            (kern_block_q8_0 *)malloc((size_t)(n_in / KERN_QK + 1) * sizeof(kern_block_q8_0))};
        if (!stage || !tmp.f32 || !tmp.q8)
            rc = kern_cuda_fail(BRISK_ENOMEM, "kern_cuda_weight_upload", __FILE__, __LINE__,
                                "out of host memory for the staging buffer");
        else
            rc = mm_upload_slices(w, row0, n_rows, src_type, (const uint8_t *)src, stage, (int)rows,
                                  &tmp);
        free(stage);
        free(tmp.f32);
        free(tmp.q8);
    }
    // cudaMemcpy from pageable memory returns once the source is staged, not
    // when it has landed, and the compute streams are non-blocking (they do
    // not wait for the legacy stream): finish the copies here.
    if (rc == BRISK_OK)
        rc = KERN_CUDA_CALL(cudaDeviceSynchronize());
    return rc;
}

extern "C" int kern_cuda_weight_upload(kern_cuda_weight *w, kern_cuda_wfmt fmt, kern_type src_type,
                                       const void *src, int n_out, int n_in) {
    if (!w)
        return BRISK_EINVAL;
    memset(w, 0, sizeof *w);
    if (!src || !mm_fmt_ok(fmt) || !kern_type_known((uint32_t)src_type) || n_out <= 0 ||
        n_in <= 0 || n_in % kern_type_block_size(src_type) != 0 ||
        (fmt == KERN_CUDA_W_INT8 && n_in % KERN_QK != 0))
        return BRISK_EINVAL;
    kern_cuda_weight dw;
    int rc = kern_cuda_weight_alloc(&dw, fmt, n_out, n_in);
    if (rc != BRISK_OK)
        return rc;
    rc = kern_cuda_weight_upload_rows(&dw, 0, src_type, src, n_out);
    if (rc != BRISK_OK) {
        kern_cuda_weight_free(&dw);
        return rc;
    }
    *w = dw;
    return BRISK_OK;
}

extern "C" int kern_cuda_weight_rows(const kern_cuda_weight *w, int row0, int n_rows,
                                     kern_cuda_weight *view) {
    if (!view)
        return BRISK_EINVAL;
    memset(view, 0, sizeof *view);
    if (!w || !w->data || !mm_fmt_ok(w->fmt) || row0 < 0 || n_rows <= 0 ||
        n_rows > w->n_out - row0 || (w->fmt == KERN_CUDA_W_INT8 && !w->scales))
        return BRISK_EINVAL;
    const size_t first = (size_t)row0 * (size_t)w->n_in;
    *view = *w;
    view->n_out = n_rows;
    if (w->fmt == KERN_CUDA_W_F16) {
        view->data = (uint16_t *)w->data + first;
    } else {
        view->data = (int8_t *)w->data + first;
        view->scales = w->scales + first / KERN_QK;
    }
    return BRISK_OK;
}

// ---- context ----------------------------------------------------------------------

extern "C" void kern_cuda_matmul_ctx_free(kern_cuda_matmul_ctx *c) {
    if (!c)
        return;
    if (c->blas)
        g_blas.destroy(c->blas); // fails only on a lost device: nothing to do then
    // cudaFree synchronises the device: no call still uses the workspaces.
    if (c->blas_ws && cudaFree(c->blas_ws) != cudaSuccess)
        cudaGetLastError();
    if (c->dq_ws && cudaFree(c->dq_ws) != cudaSuccess)
        cudaGetLastError();
    free(c);
}

extern "C" int kern_cuda_matmul_ctx_dequant_ws(kern_cuda_matmul_ctx *c, size_t bytes) {
    if (!c || bytes == 0)
        return BRISK_EINVAL;
    if (c->dq_ws && cudaFree(c->dq_ws) != cudaSuccess)
        cudaGetLastError();
    c->dq_ws = NULL;
    c->dq_bytes = 0;
    int rc = KERN_CUDA_CALL(cudaMalloc(&c->dq_ws, bytes));
    if (rc != BRISK_OK) {
        c->dq_ws = NULL;
        return rc;
    }
    c->dq_bytes = bytes;
    return BRISK_OK;
}

extern "C" int kern_cuda_matmul_ctx_create(kern_cuda_matmul_ctx **out, cudaStream_t stream) {
    if (!out)
        return BRISK_EINVAL;
    *out = NULL;
    kern_cuda_matmul_ctx *c = (kern_cuda_matmul_ctx *)calloc(1, sizeof *c);
    if (!c)
        return kern_cuda_fail(BRISK_ENOMEM, "kern_cuda_matmul_ctx_create", __FILE__, __LINE__,
                              "out of host memory");
    c->stream = stream;
    int dev = 0;
    int rc = mm_blas_ready();
    if (rc == BRISK_OK)
        rc = KERN_CUDA_CALL(cudaGetDevice(&dev));
    if (rc == BRISK_OK)
        rc = KERN_CUDA_CALL(cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, dev));
    if (rc == BRISK_OK)
        rc = KERN_CUDA_CALL(
            cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    if (rc == BRISK_OK)
        rc = KERN_CUDA_CALL(cudaMalloc(&c->blas_ws, MM_BLAS_WS_BYTES));
    if (rc == BRISK_OK)
        rc = MM_BLAS(g_blas.create(&c->blas), "cublasCreate");
    // cublasSetStream resets the workspace to cuBLAS's own pool (which
    // allocates on first use): the stream first, then the fixed workspace.
    if (rc == BRISK_OK)
        rc = MM_BLAS(g_blas.set_stream(c->blas, stream), "cublasSetStream");
    if (rc == BRISK_OK)
        rc = MM_BLAS(g_blas.set_workspace(c->blas, c->blas_ws, MM_BLAS_WS_BYTES),
                     "cublasSetWorkspace");
    // The default math mode: f16 inputs with f32 compute run on tensor
    // cores, products exact and sums in f32 (no reduced-precision reduction
    // applies to an f32 output). The default atomics mode (not allowed)
    // keeps results independent of the run.
    if (rc == BRISK_OK)
        rc = MM_BLAS(g_blas.set_math_mode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (rc != BRISK_OK) {
        kern_cuda_matmul_ctx_free(c);
        return rc;
    }
    *out = c;
    return BRISK_OK;
}

// ---- activations to f16 -------------------------------------------------------------

// f16(x), round to nearest even, with |x| past the largest half (65504)
// clamped to it rather than made infinite: Gemma's MLP products reach beyond
// f16's range on real weights (as transformers and MLX found), and one inf
// would turn the whole output row into NaN. NaN stays NaN (the comparisons
// are false for it).
static __device__ __forceinline__ uint16_t mm_f16_sat(float x) {
    x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x;
    return __half_as_ushort(__float2half_rn(x));
}

// x16 = mm_f16_sat(x). Grid-stride over groups of VEC, then the n % VEC tail
// one element a thread.
template <int VEC>
static __global__ void mm_f32_to_f16_kernel(uint16_t *__restrict__ out,
                                            const float *__restrict__ in, size_t n) {
    const size_t n_vec = n / VEC;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const kern_cuda_vec<float, VEC> v =
            reinterpret_cast<const kern_cuda_vec<float, VEC> *>(in)[i];
        kern_cuda_vec<uint16_t, VEC> h;
#pragma unroll
        for (int k = 0; k < VEC; k++)
            h.v[k] = mm_f16_sat(v.v[k]);
        reinterpret_cast<kern_cuda_vec<uint16_t, VEC> *>(out)[i] = h;
    }
    for (size_t i = n_vec * VEC + first; i < n; i += stride)
        out[i] = mm_f16_sat(in[i]);
}

static int mm_to_f16(uint16_t *out, const float *in, size_t n, cudaStream_t stream) {
    const int threads = 256;
    // out is MM_WS_ALIGN-aligned; in needs 16 bytes for float4 loads.
    const bool vec4 = kern_cuda_aligned(in, 16);
    const unsigned grid = kern_cuda_grid(vec4 ? n / 4 + 1 : n, threads, 4096);
    if (vec4)
        mm_f32_to_f16_kernel<4><<<grid, threads, 0, stream>>>(out, in, n);
    else
        mm_f32_to_f16_kernel<1><<<grid, threads, 0, stream>>>(out, in, n);
    return KERN_CUDA_LAUNCH_CHECK("mm_f32_to_f16_kernel");
}

// ---- matmul -------------------------------------------------------------------------

// n_tok * n_in halves, plus the slack that lets the f16 copy start on an
// MM_WS_ALIGN boundary whatever ws is; 0 for no tokens, (size_t)-1 for
// invalid sizes.
extern "C" size_t kern_cuda_matmul_ws_bytes(int n_in, int n_tok) {
    if (n_in <= 0 || n_tok < 0)
        return (size_t)-1;
    if (n_tok == 0)
        return 0;
    return (size_t)n_tok * (size_t)n_in * sizeof(uint16_t) + MM_WS_ALIGN;
}

// What kern_cuda_matmul needs of a weight: a known format, sizes the
// kernels take, device arrays with the alignment the uploader gives them
// (cudaMalloc: 256 bytes) and the kernels' vector loads rely on.
static bool mm_weight_ok(const kern_cuda_weight *w) {
    if (!mm_fmt_ok(w->fmt) || w->n_out <= 0 || w->n_in <= 0 || !w->data)
        return false;
    if (w->fmt == KERN_CUDA_W_F16)
        return kern_cuda_aligned(w->data, 2);
    return w->n_in % KERN_QK == 0 && w->scales && kern_cuda_aligned(w->data, 16) &&
           kern_cuda_aligned(w->scales, 2);
}

// y = W x16 through cuBLAS for F16 rows already in the device format:
// row-major W[n_out][n_in] is the column-major n_in x n_out matrix W^T
// (lda n_in), so op(A) = A^T is W; x16 is column-major n_in x n_tok (ldb
// n_in); y column-major n_out x n_tok with ldc = ldy. beta = 0: y is not
// read.
static int mm_blas_f16(kern_cuda_matmul_ctx *c, const void *w16, int n_out, int n_in,
                       const uint16_t *x16, int n_tok, float *y, size_t ldy) {
    const float alpha = 1.0f, beta = 0.0f;
    return MM_BLAS(g_blas.gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, n_tok, n_in, &alpha,
                                  w16, CUDA_R_16F, n_in, x16, CUDA_R_16F, n_in, &beta, y,
                                  CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
}

// Rows of an INT8 weight that one dequantised chunk holds in the context's
// workspace: a multiple of 64 when that many fit; 0 when not one row does.
static int mm_dequant_rows(const kern_cuda_matmul_ctx *c, int n_out, int n_in) {
    const size_t fit = c->dq_ws ? c->dq_bytes / ((size_t)n_in * sizeof(uint16_t)) : 0;
    size_t rows = fit >= 64 ? fit / 64 * 64 : fit;
    return rows > (size_t)n_out ? n_out : (int)rows;
}

// INT8 at large batches: chunk after chunk of rows dequantised to f16 into
// the workspace, then one cuBLAS GEMM on the chunk. The chunk is sized so
// that it stays in a large L2 between the pass that writes it and the GEMM
// that reads it; both are on the one stream, so the next chunk's pass waits
// for the GEMM that reads the workspace.
static int mm_dequant_matmul(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w,
                             const uint16_t *x16, int n_tok, float *y, size_t ldy, int chunk) {
    const int n_out = w->n_out, n_in = w->n_in;
    for (int r0 = 0; r0 < n_out; r0 += chunk) {
        const int rows = n_out - r0 < chunk ? n_out - r0 : chunk;
        const size_t first = (size_t)r0 * (size_t)n_in;
        int rc = kern_cuda_w8a16_dequant((uint16_t *)c->dq_ws, (const int8_t *)w->data + first,
                                         w->scales + first / KERN_QK, rows, n_in, c->stream);
        if (rc == BRISK_OK)
            rc = mm_blas_f16(c, c->dq_ws, rows, n_in, x16, n_tok, y + r0, ldy);
        if (rc != BRISK_OK)
            return rc;
    }
    return BRISK_OK;
}

extern "C" int kern_cuda_matmul_ex(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w,
                                   const float *x, int n_tok, float *y, size_t ldy, void *ws,
                                   size_t ws_bytes, kern_cuda_mm_path path) {
    if (!c || !w || !mm_weight_ok(w) || n_tok < 0 || path < KERN_CUDA_MM_AUTO ||
        path > KERN_CUDA_MM_DEQUANT)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return BRISK_OK;
    const int n_out = w->n_out, n_in = w->n_in;
    // ldy is cuBLAS's int ldc; 4-byte alignment for f32 stores.
    if (!x || !y || ldy < (size_t)n_out || ldy > (size_t)INT_MAX || !kern_cuda_aligned(x, 4) ||
        !kern_cuda_aligned(y, 4))
        return BRISK_EINVAL;
    const size_t need = kern_cuda_matmul_ws_bytes(n_in, n_tok);
    if (!ws || ws_bytes < need)
        return BRISK_EINVAL;
    const int int8 = w->fmt == KERN_CUDA_W_INT8;
    const int gemv_ok = kern_cuda_gemv_fits(w, x, n_tok, c->cc_major);
    const int dq_rows = int8 ? mm_dequant_rows(c, n_out, n_in) : 0;
    if (path == KERN_CUDA_MM_AUTO)
        path = gemv_ok                                                   ? KERN_CUDA_MM_GEMV
               : dq_rows > 0 && n_tok >= KERN_CUDA_W8A16_DEQUANT_MIN_TOK ? KERN_CUDA_MM_DEQUANT
                                                                         : KERN_CUDA_MM_LEGACY;
    if ((path == KERN_CUDA_MM_GEMV && !gemv_ok) || (path == KERN_CUDA_MM_DEQUANT && dq_rows == 0))
        return BRISK_EINVAL;
    if (path == KERN_CUDA_MM_GEMV) // x read as f32: no conversion pass
        return kern_cuda_gemv(y, ldy, w, x, n_tok, c->n_sm, c->cc_major, c->stream);

    uint16_t *x16 = (uint16_t *)(((uintptr_t)ws + MM_WS_ALIGN - 1) & ~(uintptr_t)(MM_WS_ALIGN - 1));
    int rc = mm_to_f16(x16, x, (size_t)n_tok * (size_t)n_in, c->stream);
    if (rc != BRISK_OK)
        return rc;
    if (path == KERN_CUDA_MM_DEQUANT)
        return mm_dequant_matmul(c, w, x16, n_tok, y, ldy, dq_rows);
    if (int8)
        return kern_cuda_w8a16(y, ldy, (const int8_t *)w->data, w->scales, x16, n_out, n_in, n_tok,
                               KERN_CUDA_W8A16_AUTO, c->n_sm, c->stream);
    return mm_blas_f16(c, w->data, n_out, n_in, x16, n_tok, y, ldy);
}

extern "C" int kern_cuda_matmul(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w, const float *x,
                                int n_tok, float *y, size_t ldy, void *ws, size_t ws_bytes) {
    return kern_cuda_matmul_ex(c, w, x, n_tok, y, ldy, ws, ws_bytes, KERN_CUDA_MM_AUTO);
}
