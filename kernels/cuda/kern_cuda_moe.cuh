/* kern_cuda_moe.cuh - the mixture-of-experts MLP on the GPU (C header; the
 * kernels are in kern_cuda_moe.cu). The same computation as the CPU's
 * model_moe_ffn (models/model_moe.h), for each token x (a row of dim f32):
 *   1. router logits r = R x in f32 (R: [n_expert][dim] f32 on the device;
 *      x is not rounded, so the routing reads the same precision as the
 *      CPU's and only true near-ties can route differently);
 *   2. p = softmax(r) over all experts; the n_used largest chosen, a lower
 *      expert index first among equal logits (NaN logits: the CPU's serial
 *      rule, model_moe_route, exactly); weights p, or p / sum of the chosen
 *      p when norm_topk;
 *   3. y = sum over the chosen experts e, in ascending e (deterministic:
 *      the same bits whatever else is in the batch), of
 *      weight_e * down_e(act(gate_e x) * up_e x).
 * The experts are stacks as the CPU holds them (model_matrix_expert):
 * gate and up [n_expert * hidden][dim], down [n_expert * dim][hidden],
 * each a kern_cuda_weight in F16 or INT8 (per-32 f16 scales), each stack in
 * its own format. Weights are multiplied as f32 (f16 values, or s * q
 * exactly) with f32 x and f32 sums.
 *
 * The kernels (all on `stream`, no allocation, no host synchronisation, so
 * a pass that calls them captures into a CUDA graph):
 *   route:   one block per token: logits, softmax, top-k;
 *   gate_up: one block per (token, slot) pair and tile of 16 hidden rows:
 *            a warp per row, gate and up dot products, the activation, into
 *            the pair's hidden row (workspace);
 *   down:    one block per token and tile of 16 output rows: a warp per row,
 *            the down rows of the token's experts in ascending expert order,
 *            each weighted and added (no atomics: deterministic).
 * That per-pair GEMV (an expert-aware GEMV) serves small batches: each pair
 * reads its expert's rows itself, so at large batches the same expert's
 * rows are read once per token that picked it. Above
 * KERN_CUDA_MOE_GROUPED_MIN tokens the grouped path runs instead, a chunk of
 * at most KERN_CUDA_MOE_GROUP_TOKENS tokens at a time:
 *   sort:    the chunk's (token, slot) pairs grouped by expert (a counting
 *            sort without atomics: by expert, then pair, ascending);
 *   grouped: per expert, a shared-memory tiled f32 GEMM over its gathered
 *            tokens (32 tokens x 64 weight rows a block, each weight read
 *            once per tile): gate and up with the activation into the
 *            pair's hidden row, then down into the pair's output row;
 *   sum:     per token, the weighted sum of its pairs' rows in ascending
 *            expert order, as the down kernel adds.
 * Both paths compute each output element as one f32 chain that depends on
 * the token's own row only: batch invariant bit for bit within a path; the
 * two paths differ by f32 summation order (~1e-7 relative).
 * The workspace holds n_tok * n_used hidden rows (f32) and the routing, and
 * for the grouped path a chunk's down products (chunk x n_used x dim f32),
 * the sort and the tile list.
 *
 * Limits: 1 <= n_used <= min(n_expert, KERN_CUDA_MOE_MAX_USED), n_expert <=
 * KERN_CUDA_MOE_MAX_EXPERT; otherwise BRISK_EINVAL. */
#ifndef KERN_CUDA_MOE_CUH
#define KERN_CUDA_MOE_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kern_cuda_matmul.cuh"

#define KERN_CUDA_MOE_MAX_EXPERT 256
#define KERN_CUDA_MOE_MAX_USED 16
/* The grouped path runs when a call has more tokens than this (below, the
 * per-pair GEMV). 16 is a first guess, to be measured on the GPU
 * (`test_cuda_ops perf -o moe` times both paths at 1 to 512 tokens). */
#define KERN_CUDA_MOE_GROUPED_MIN 16
/* Tokens the grouped path sorts and multiplies at once: bounds its share of
 * the workspace (the down products, chunk x top-k x dim f32) whatever the
 * batch; an expert's weights are read once per 32 of its tokens in a chunk. */
#define KERN_CUDA_MOE_GROUP_TOKENS 1024

/* Which path kern_cuda_moe_ffn_path takes. */
typedef enum kern_cuda_moe_path {
    KERN_CUDA_MOE_PATH_AUTO = 0, /* grouped above KERN_CUDA_MOE_GROUPED_MIN tokens */
    KERN_CUDA_MOE_PATH_GEMV,     /* the per-pair GEMV at any size */
    KERN_CUDA_MOE_PATH_GROUPED   /* the grouped GEMM at any size */
} kern_cuda_moe_path;

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's experts on the device, borrowed. */
typedef struct kern_cuda_moe {
    const float *router;               /* [n_expert][dim] f32 */
    const kern_cuda_weight *gate, *up; /* [n_expert * hidden][dim] each */
    const kern_cuda_weight *down;      /* [n_expert * dim][hidden] */
    int n_expert, n_used, dim, hidden;
    int norm_topk; /* 1: the chosen weights renormalised to sum 1 */
    int gelu;      /* 1: GELU (tanh) gating, 0: SiLU */
} kern_cuda_moe;

/* Device workspace bytes kern_cuda_moe_ffn needs for n_tok tokens of m's
 * shape; (size_t)-1 for invalid sizes. */
size_t kern_cuda_moe_ws_bytes(const kern_cuda_moe *m, int n_tok);

/* y[n_tok][dim] = the MLP of x[n_tok][dim] (steps 1-3); y must not overlap
 * x or ws. ws: device memory of at least kern_cuda_moe_ws_bytes(m, n_tok)
 * bytes (ws_bytes says how many), 256-byte aligned. ids_out / w_out (device,
 * [n_tok][n_used], may be NULL): each token's chosen experts, largest weight
 * first, and their weights, for tests and traces. Returns 0, BRISK_EINVAL
 * (sizes, formats, pointers, a short workspace) or the launch error;
 * asynchronous on stream. */
int kern_cuda_moe_ffn(const kern_cuda_moe *m, const float *x, int n_tok, float *y, void *ws,
                      size_t ws_bytes, int32_t *ids_out, float *w_out, cudaStream_t stream);

/* kern_cuda_moe_ffn on a chosen path (tests force each; the same workspace
 * serves both); an unknown path is BRISK_EINVAL. */
int kern_cuda_moe_ffn_path(const kern_cuda_moe *m, const float *x, int n_tok, float *y, void *ws,
                           size_t ws_bytes, int32_t *ids_out, float *w_out, kern_cuda_moe_path path,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
