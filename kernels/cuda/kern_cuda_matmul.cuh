/* kern_cuda_matmul.cuh - the weight matmuls on the GPU: FP16 and INT8
 * weight-only (W8A16) weights through brisk's tensor-core GEMV for a few
 * tokens, cuBLAS and brisk's W8A16 kernels beyond (C header; the code is in
 * kern_cuda_matmul.cu, kern_cuda_gemv.cu and kern_cuda_w8a16.cu).
 *
 * Every matmul is y[t][o] = sum_i W[o][i] * x16[t][i] for t < n_tok, o < n_out:
 *   W:   a kern_cuda_weight on the device (n_out rows of n_in, row-major).
 *   x:   n_tok rows of n_in f32 activations (row stride n_in). They are
 *        rounded to f16 (round to nearest even) first - x16 above - so the
 *        products are those of f16 activations (A16), summed in f32.
 *   y:   n_tok rows of f32, row stride ldy >= n_out (the rest of a row is
 *        left alone). Must not overlap x or the workspace.
 *   ws:  device workspace of kern_cuda_matmul_ws_bytes(n_in, n_tok) bytes,
 *        for the f16 copy of x (required on every path, used where there is
 *        a conversion pass).
 * INT8 weights: int8 values with one f16 scale per block of 32 consecutive
 * weights of a row (the Q8_0 grouping, stored as two arrays: the int8 values
 * row-major and the scales [n_out][n_in / 32]), w = scale * q; n_in must be
 * a multiple of 32.
 * The kernels, by the number of tokens (KERN_CUDA_MM_AUTO):
 *   n_tok <= KERN_CUDA_GEMV_MAX_TOK (16) on sm_80 and later, shapes and
 *     alignment permitting: the tensor-core GEMV (kern_cuda_gemv.cuh), F16
 *     and INT8, reading x as f32 (no conversion pass);
 *   F16 otherwise: x rounded to f16 (one kernel), then cublasGemmEx (f16 A
 *     and B, f32 C, f32 compute) on the context's stream;
 *   INT8 from KERN_CUDA_W8A16_DEQUANT_MIN_TOK tokens, when the context has a
 *     dequantisation workspace (kern_cuda_matmul_ctx_dequant_ws): row chunks
 *     of the weight dequantised to f16 (kern_cuda_w8a16_dequant) and
 *     multiplied by cuBLAS chunk by chunk;
 *   INT8 otherwise: brisk's W8A16 kernels (kern_cuda_w8a16.cuh: GEMV <= 8
 *     tokens, SKINNY <= 128, TILED beyond).
 * Every tensor-core path multiplies INT8 weights as f16(s * q); the W8A16
 * GEMV (sm_75, or unaligned inputs) multiplies the exact s * q.
 * All calls are asynchronous on the context's stream and capture into a CUDA
 * graph (no allocation, no synchronisation; cuBLAS gets a fixed workspace at
 * context creation). Return 0, BRISK_EINVAL for bad sizes or pointers, or a
 * CUDA/cuBLAS error code (kern_cuda_last_error() says which). */
#ifndef KERN_CUDA_MATMUL_CUH
#define KERN_CUDA_MATMUL_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kern_types.h"

#define KERN_CUDA_W8A16_GEMV_MAX_TOK 8 /* the W8A16 CUDA-core GEMV (kern_cuda_w8a16.cuh) */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KERN_CUDA_W_F16 = 0, KERN_CUDA_W_INT8 = 1 } kern_cuda_wfmt;

typedef struct kern_cuda_weight {
    kern_cuda_wfmt fmt;
    int n_out, n_in;
    void *data;       /* F16: n_out * n_in halves; INT8: n_out * n_in int8 (device) */
    uint16_t *scales; /* INT8: n_out * (n_in / 32) f16 scales (device); F16: NULL */
} kern_cuda_weight;

/* Converts n_out rows of n_in values of src_type (F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1; host memory, e.g. the mmap) into fmt on the host, a bounded
 * slice of rows at a time, and uploads them into new device memory. Q8_0 into
 * INT8 is copied exactly (values and scales), and Q4_0 is exact too (q - 8
 * with the same scale, as kern_requantize_row_q8 and the CPU's int8 weights
 * make it); any other source into INT8 is quantised as
 * kern_quantize_row(KERN_TYPE_Q8_0) does. On failure *w is zeroed and
 * nothing is left allocated. Synchronous. Equivalent to
 * kern_cuda_weight_alloc + kern_cuda_weight_upload_rows of every row. */
int kern_cuda_weight_upload(kern_cuda_weight *w, kern_cuda_wfmt fmt, kern_type src_type,
                            const void *src, int n_out, int n_in);
/* A weight of n_out x n_in in fmt with device memory allocated (uploaded
 * by kern_cuda_weight_upload_rows; contents undefined until then), owned by
 * the caller (kern_cuda_weight_free). On failure *w is zeroed. The fused
 * projections (Q|K|V and gate|up) are built this way: one allocation, each
 * source matrix uploaded into its row range, whatever its own type. */
int kern_cuda_weight_alloc(kern_cuda_weight *w, kern_cuda_wfmt fmt, int n_out, int n_in);
/* Uploads n_rows rows of src (src_type, as kern_cuda_weight_upload converts
 * them; n_in values each) into rows [row0, row0 + n_rows) of w. BRISK_EINVAL
 * for a range outside w or a type that cannot fill it; w is left as it was
 * on any failure but the copy's own. Synchronous. */
int kern_cuda_weight_upload_rows(kern_cuda_weight *w, int row0, kern_type src_type, const void *src,
                                 int n_rows);
/* *view = rows [row0, row0 + n_rows) of w as a weight of its own, borrowing
 * w's memory (never freed through the view; valid while w is). BRISK_EINVAL
 * for a range outside w. */
int kern_cuda_weight_rows(const kern_cuda_weight *w, int row0, int n_rows, kern_cuda_weight *view);
/* Device bytes of a weight in fmt; 0 for an invalid fmt or size. */
size_t kern_cuda_weight_bytes(kern_cuda_wfmt fmt, int n_out, int n_in);
void kern_cuda_weight_free(kern_cuda_weight *w); /* NULL or zeroed: no-op */

typedef struct kern_cuda_matmul_ctx kern_cuda_matmul_ctx;

/* A cuBLAS handle bound to stream, with its own fixed workspace; it records
 * the device's multiprocessor count and compute capability, which steer the
 * kernel choice. */
int kern_cuda_matmul_ctx_create(kern_cuda_matmul_ctx **out, cudaStream_t stream);
void kern_cuda_matmul_ctx_free(kern_cuda_matmul_ctx *c);
/* Gives the context a device workspace of `bytes` (owned by the context,
 * freed with it; a second call replaces the first) for dequantising INT8
 * weights at large batches (KERN_CUDA_MM_DEQUANT): each call then runs in
 * chunks of bytes / (2 n_in) rows (rounded down to a multiple of 64), so
 * any size works and KERN_CUDA_MM_DEQUANT_WS_BYTES keeps a chunk inside a
 * large L2 between the pass that writes it and the GEMM that reads it.
 * Allocated here, never inside a call (graph capture). 0 or BRISK_ENOMEM. */
#define KERN_CUDA_MM_DEQUANT_WS_BYTES ((size_t)32 << 20)
int kern_cuda_matmul_ctx_dequant_ws(kern_cuda_matmul_ctx *c, size_t bytes);

/* Workspace bytes for n_tok rows of n_in (any alignment of ws will do); 0
 * for no tokens, (size_t)-1 for invalid sizes. */
size_t kern_cuda_matmul_ws_bytes(int n_in, int n_tok);

int kern_cuda_matmul(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w, const float *x, int n_tok,
                     float *y, size_t ldy, void *ws, size_t ws_bytes);

/* INT8 from this many tokens runs dequantised through cuBLAS (when the
 * context has the workspace). A constant to tune from `test_cuda_ops perf`
 * (its int8 lines at 16 to 512 tokens, W8A16 kernels against dequant). */
#define KERN_CUDA_W8A16_DEQUANT_MIN_TOK 64

/* kern_cuda_matmul with the path forced, for the tests and the perf mode's
 * side-by-side; BRISK_EINVAL when the forced path cannot take the call:
 *   AUTO     the choice above (kern_cuda_matmul);
 *   LEGACY   the kernels before the GEMV and the dequant path existed: x
 *            rounded by the conversion pass, then cuBLAS (F16) or the W8A16
 *            kernels' own choice (INT8);
 *   GEMV     the tensor-core GEMV (kern_cuda_gemv_fits must hold);
 *   DEQUANT  INT8 weights dequantised in chunks + cuBLAS (needs the
 *            context's dequantisation workspace). */
typedef enum {
    KERN_CUDA_MM_AUTO = 0,
    KERN_CUDA_MM_LEGACY,
    KERN_CUDA_MM_GEMV,
    KERN_CUDA_MM_DEQUANT,
} kern_cuda_mm_path;

int kern_cuda_matmul_ex(kern_cuda_matmul_ctx *c, const kern_cuda_weight *w, const float *x,
                        int n_tok, float *y, size_t ldy, void *ws, size_t ws_bytes,
                        kern_cuda_mm_path path);

#ifdef __cplusplus
}
#endif

#endif
