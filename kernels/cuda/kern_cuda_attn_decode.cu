// kern_cuda_attn_decode.cu - split-K paged decode attention over the KV
// cache (GQA), f16 or int8 / fp8 codes (kern_cuda_kv_fmt.cuh): partition
// kernel, combine kernel, launcher, C entries.
#include <cuda_fp16.h>
#include <limits.h>

#include "kernels/cuda/kern_cuda_attn_decode.cuh"
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_kv_fmt.cuh"

#define ATTN_PART KERN_CUDA_ATTN_PART
#define ATTN_THREADS 256 // 8 warps
#define ATTN_HG 8        // query heads of one GQA group a block serves at most

// ---- helpers ------------------------------------------------------------------

// Eight consecutive values of position p, KV head g from lane's offset in
// the pool (kern_cuda_kv_fmt.cuh's addressing) as floats: f16 as one 16-byte
// load when VEC (the launcher checked the alignment of the pool and of every
// offset), else eight 2-byte loads; codes as one 8-byte load and their scale.
template <int FMT, bool VEC>
static __device__ __forceinline__ void
attn_load8(const void *__restrict__ pool, const int32_t *__restrict__ bt, int p, int block_size,
           size_t block_stride, size_t row_stride, size_t head_off, size_t scale_off,
           int n_kv_heads, int g, float *f) {
    const int r = p % block_size;
    const size_t blk = (size_t)bt[p / block_size] * block_stride;
    kvf_unpack8<FMT>(kvf_load8<FMT, VEC>(pool, blk, (size_t)r * row_stride + head_off,
                                         scale_off + 2 * ((size_t)r * n_kv_heads + g)),
                     f);
}

// The sequence's length as the kernels use it: negative -> 0, and never past
// the blocks its table row can name.
static __device__ __forceinline__ int attn_len(const int32_t *ctx_lens, int s, int max_ctx) {
    int len = ctx_lens[s];
    return len < 0 ? 0 : (len > max_ctx ? max_ctx : len);
}

// ---- partition kernel -------------------------------------------------------
// grid.x: (sequence, KV head, chunk of <= ATTN_HG query heads of its group);
// grid.y: partition of ATTN_PART positions. Blocks past a sequence's last
// partition exit at once (the grid is sized for the longest table row, since
// the lengths are in device memory).
//
// A block of 256 threads works in "row groups" of tp threads (tp = head_dim/8
// rounded up to a power of two, <= 32, so a group lies within one warp);
// thread `lane` of a group owns elements [8*lane, 8*lane + 8) of a K or V row
// (lanes past head_dim/8 idle). Each K row is loaded once for all the
// chunk's query heads:
//   1. scores: row group r takes positions r, r + n_grp, ...; per head an
//      8-term f32 dot plus an xor-shuffle tree over the group; * scale into
//      shared memory. The loop is warp-uniform (shuffles need every lane).
//   2. softmax per head (one warp a head): the partition's max m and
//      l = sum exp(s - m); the scores become exp(s - m) in place.
//   3. V: every row group sums exp(s - m) * V over its positions in registers
//      (8 per head per thread); the groups' sums meet in shared memory.
// With one partition the block writes out = acc / l; otherwise the
// unnormalised acc and (m, l) go to the workspace for the combine kernel.
template <int FMT, bool VEC>
static __global__ __launch_bounds__(ATTN_THREADS) void attn_decode_part_kernel(
    float *__restrict__ out, const float *__restrict__ q, const void *__restrict__ kp,
    const void *__restrict__ vp, const int32_t *__restrict__ block_tables, int max_blocks,
    const int32_t *__restrict__ ctx_lens, int n_heads, int n_kv_heads, int head_dim, int block_size,
    size_t block_stride, size_t row_stride, size_t scale_off, float scale, int window,
    float softcap, int tp, int max_parts, float *__restrict__ ws_o, float *__restrict__ ws_ml) {
    __shared__ float s_score[ATTN_HG][ATTN_PART];
    __shared__ float s_red[ATTN_THREADS * 8];
    __shared__ float s_l[ATTN_HG];

    const int group = n_heads / n_kv_heads;
    const int n_chunks = (group + ATTN_HG - 1) / ATTN_HG;
    unsigned bx = blockIdx.x;
    const int chunk = (int)(bx % (unsigned)n_chunks);
    bx /= (unsigned)n_chunks;
    const int g = (int)(bx % (unsigned)n_kv_heads);
    const int s = (int)(bx / (unsigned)n_kv_heads);
    const int part = (int)blockIdx.y;
    const int h0 = g * group + chunk * ATTN_HG;
    const int hg = min(ATTN_HG, group - chunk * ATTN_HG); // block-uniform
    const size_t q_stride = (size_t)n_heads * (size_t)head_dim;

    const int len = attn_len(ctx_lens, s, max_blocks * block_size);
    const int n_parts = (len + ATTN_PART - 1) / ATTN_PART;
    if (len == 0) {
        if (part == 0)
            for (int i = threadIdx.x; i < hg * head_dim; i += blockDim.x)
                out[(size_t)s * q_stride + (size_t)h0 * head_dim + i] = 0.0f;
        return;
    }
    if (part >= n_parts)
        return;
    const int p0 = part * ATTN_PART, n_pos = min(ATTN_PART, len - p0);
    // A sliding window: positions before pstart get zero weight. A partition
    // wholly before it (never the last, which holds position len - 1) adds
    // nothing: m = -inf, l = 0, acc = 0 for the combine.
    const int pstart = window > 0 ? max(0, len - window) : 0;
    if (p0 + n_pos <= pstart) {
        for (int i = threadIdx.x; i < hg * head_dim; i += blockDim.x)
            ws_o[(((size_t)s * n_heads + h0 + i / head_dim) * max_parts + part) * head_dim +
                 i % head_dim] = 0.0f;
        if (threadIdx.x < hg) {
            float *ml = ws_ml + (((size_t)s * n_heads + h0 + threadIdx.x) * max_parts + part) * 2;
            ml[0] = -INFINITY;
            ml[1] = 0.0f;
        }
        return;
    }
    const int lane = threadIdx.x & (tp - 1), grp = threadIdx.x / tp;
    const int n_grp = blockDim.x / tp;
    const bool active = lane * 8 < head_dim;
    const int32_t *bt = block_tables + (size_t)s * (size_t)max_blocks;
    const size_t head_off = (size_t)g * head_dim + (size_t)lane * 8;

    // 1. scores
    float qr[ATTN_HG][8];
#pragma unroll
    for (int h = 0; h < ATTN_HG; h++) {
        const float *qh = q + (size_t)s * q_stride + (size_t)(h0 + h) * head_dim + lane * 8;
        if (h < hg && active) {
            if (VEC) {
                const kern_cuda_vec<float, 4> a =
                    *reinterpret_cast<const kern_cuda_vec<float, 4> *>(qh);
                const kern_cuda_vec<float, 4> b =
                    *reinterpret_cast<const kern_cuda_vec<float, 4> *>(qh + 4);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    qr[h][j] = a.v[j];
                    qr[h][j + 4] = b.v[j];
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    qr[h][j] = qh[j];
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                qr[h][j] = 0.0f;
        }
    }
    for (int i0 = 0; i0 < n_pos; i0 += n_grp) {
        const int i = i0 + grp;
        float kf[8];
        if (i < n_pos && active) {
            attn_load8<FMT, VEC>(kp, bt, p0 + i, block_size, block_stride, row_stride, head_off,
                                 scale_off, n_kv_heads, g, kf);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                kf[j] = 0.0f;
        }
#pragma unroll
        for (int h = 0; h < ATTN_HG; h++) {
            if (h < hg) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++)
                    d += qr[h][j] * kf[j];
                for (int o = tp / 2; o > 0; o >>= 1)
                    d += __shfl_xor_sync(0xffffffffu, d, o);
                if (lane == 0 && i < n_pos) {
                    // the CPU's order: scale, soft-cap (Gemma 2), then the window
                    float sc = d * scale;
                    if (softcap > 0.0f)
                        sc = softcap * tanhf(sc / softcap);
                    s_score[h][i] = p0 + i < pstart ? -INFINITY : sc;
                }
            }
        }
    }
    __syncthreads();

    // 2. softmax within the partition, one warp per head
    const int warp = threadIdx.x / KERN_CUDA_WARP, wl = threadIdx.x % KERN_CUDA_WARP;
    const int n_warps = blockDim.x / KERN_CUDA_WARP;
    for (int h = warp; h < hg; h += n_warps) {
        float m = -INFINITY;
        for (int i = wl; i < n_pos; i += KERN_CUDA_WARP)
            m = fmaxf(m, s_score[h][i]);
        m = kern_warp_max(m);
        float l = 0.0f;
        for (int i = wl; i < n_pos; i += KERN_CUDA_WARP) {
            const float e = expf(s_score[h][i] - m);
            s_score[h][i] = e;
            l += e;
        }
        l = kern_warp_sum(l);
        if (wl == 0) {
            s_l[h] = l;
            if (n_parts > 1) {
                float *ml = ws_ml + (((size_t)s * n_heads + h0 + h) * max_parts + part) * 2;
                ml[0] = m;
                ml[1] = l;
            }
        }
    }
    __syncthreads();

    // 3. weighted V sum
    float acc[ATTN_HG][8];
#pragma unroll
    for (int h = 0; h < ATTN_HG; h++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[h][j] = 0.0f;
    if (active)
        for (int i = grp; i < n_pos; i += n_grp) {
            float vf[8];
            attn_load8<FMT, VEC>(vp, bt, p0 + i, block_size, block_stride, row_stride, head_off,
                                 scale_off, n_kv_heads, g, vf);
#pragma unroll
            for (int h = 0; h < ATTN_HG; h++)
                if (h < hg) {
                    const float w = s_score[h][i];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[h][j] += w * vf[j];
                }
        }
#pragma unroll
    for (int h = 0; h < ATTN_HG; h++) {
        if (h < hg) {
            if (active)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    s_red[grp * head_dim + lane * 8 + j] = acc[h][j];
            __syncthreads();
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
                float sum = 0.0f;
                for (int r = 0; r < n_grp; r++)
                    sum += s_red[r * head_dim + d];
                if (n_parts == 1)
                    out[(size_t)s * q_stride + (size_t)(h0 + h) * head_dim + d] = sum / s_l[h];
                else
                    ws_o[(((size_t)s * n_heads + h0 + h) * max_parts + part) * head_dim + d] = sum;
            }
            __syncthreads();
        }
    }
}

// ---- combine kernel -----------------------------------------------------------
// One block per (sequence, query head) with more than one partition:
//   M = max_p m_p,  out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p.
// Every thread recomputes M and the denominator over the (few) partitions,
// so no block-level exchange is needed.
static __global__ void attn_decode_combine_kernel(float *__restrict__ out,
                                                  const int32_t *__restrict__ ctx_lens, int n_heads,
                                                  int head_dim, int max_ctx, int max_parts,
                                                  const float *__restrict__ ws_o,
                                                  const float *__restrict__ ws_ml) {
    const int s = (int)(blockIdx.x / (unsigned)n_heads), h = (int)(blockIdx.x % (unsigned)n_heads);
    const int len = attn_len(ctx_lens, s, max_ctx);
    const int n_parts = (len + ATTN_PART - 1) / ATTN_PART;
    if (n_parts <= 1)
        return; // the partition kernel wrote the row
    const size_t row = (size_t)s * n_heads + h;
    const float *ml = ws_ml + row * max_parts * 2;
    const float *o = ws_o + row * max_parts * head_dim;
    float m = -INFINITY;
    for (int p = 0; p < n_parts; p++)
        m = fmaxf(m, ml[2 * p]);
    float l = 0.0f;
    for (int p = 0; p < n_parts; p++)
        l += expf(ml[2 * p] - m) * ml[2 * p + 1];
    const float inv = 1.0f / l;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int p = 0; p < n_parts; p++)
            acc += expf(ml[2 * p] - m) * o[(size_t)p * head_dim + d];
        out[row * head_dim + d] = acc * inv;
    }
}

// ---- launcher -----------------------------------------------------------------

static int attn_max_parts(int max_blocks, int block_size) {
    return (max_blocks * block_size + ATTN_PART - 1) / ATTN_PART;
}

template <int FMT>
static int attn_decode_launch_fmt(const dim3 grid, bool vec, float *out, const float *q,
                                  const void *kp, const void *vp, const int32_t *block_tables,
                                  int max_blocks, const int32_t *ctx_lens, int n_heads,
                                  int n_kv_heads, int head_dim, int block_size, size_t block_stride,
                                  size_t row_stride, size_t scale_off, float scale, int window,
                                  float softcap, int tp, int max_parts, float *ws_o, float *ws_ml,
                                  cudaStream_t stream) {
    if (vec)
        attn_decode_part_kernel<FMT, true><<<grid, ATTN_THREADS, 0, stream>>>(
            out, q, kp, vp, block_tables, max_blocks, ctx_lens, n_heads, n_kv_heads, head_dim,
            block_size, block_stride, row_stride, scale_off, scale, window, softcap, tp, max_parts,
            ws_o, ws_ml);
    else
        attn_decode_part_kernel<FMT, false><<<grid, ATTN_THREADS, 0, stream>>>(
            out, q, kp, vp, block_tables, max_blocks, ctx_lens, n_heads, n_kv_heads, head_dim,
            block_size, block_stride, row_stride, scale_off, scale, window, softcap, tp, max_parts,
            ws_o, ws_ml);
    return KERN_CUDA_LAUNCH_CHECK("attn_decode_part_kernel");
}

static int attn_decode_launch(float *out, const float *q, const void *kp, const void *vp, int fmt,
                              size_t scale_off, const int32_t *block_tables, int max_blocks,
                              const int32_t *ctx_lens, int n_seq, int n_heads, int n_kv_heads,
                              int head_dim, int block_size, size_t block_stride, size_t row_stride,
                              float scale, int window, float softcap, float *workspace,
                              cudaStream_t stream) {
    const int max_parts = attn_max_parts(max_blocks, block_size);
    const int group = n_heads / n_kv_heads;
    const int n_chunks = (group + ATTN_HG - 1) / ATTN_HG;
    int tp = 1;
    while (tp * 8 < head_dim)
        tp *= 2;
    float *ws_o = NULL, *ws_ml = NULL;
    if (max_parts > 1) {
        ws_o = workspace;
        ws_ml = workspace + (size_t)n_seq * n_heads * max_parts * head_dim;
    }
    // 16-byte f16 loads need every row start 8-element aligned: the pools,
    // the strides (head_dim already is a multiple of 8); q then is too. The
    // codes' 8-byte loads always are (kern_cuda_kv_fmt.cuh).
    const bool vec = kern_cuda_aligned(kp, 16) && kern_cuda_aligned(vp, 16) &&
                     kern_cuda_aligned(q, 16) && block_stride % 8 == 0 && row_stride % 8 == 0;
    const dim3 grid((unsigned)((size_t)n_seq * n_kv_heads * n_chunks), (unsigned)max_parts);
    int rc;
    if (fmt == KVF_I8)
        rc = attn_decode_launch_fmt<KVF_I8>(grid, vec, out, q, kp, vp, block_tables, max_blocks,
                                            ctx_lens, n_heads, n_kv_heads, head_dim, block_size,
                                            block_stride, row_stride, scale_off, scale, window,
                                            softcap, tp, max_parts, ws_o, ws_ml, stream);
    else if (fmt == KVF_F8)
        rc = attn_decode_launch_fmt<KVF_F8>(grid, vec, out, q, kp, vp, block_tables, max_blocks,
                                            ctx_lens, n_heads, n_kv_heads, head_dim, block_size,
                                            block_stride, row_stride, scale_off, scale, window,
                                            softcap, tp, max_parts, ws_o, ws_ml, stream);
    else
        rc = attn_decode_launch_fmt<KVF_F16>(grid, vec, out, q, kp, vp, block_tables, max_blocks,
                                             ctx_lens, n_heads, n_kv_heads, head_dim, block_size,
                                             block_stride, row_stride, scale_off, scale, window,
                                             softcap, tp, max_parts, ws_o, ws_ml, stream);
    if (rc != 0 || max_parts <= 1)
        return rc;
    const int threads = kern_cuda_row_threads(head_dim, 1, 256);
    attn_decode_combine_kernel<<<(unsigned)((size_t)n_seq * n_heads), threads, 0, stream>>>(
        out, ctx_lens, n_heads, head_dim, max_blocks * block_size, max_parts, ws_o, ws_ml);
    return KERN_CUDA_LAUNCH_CHECK("attn_decode_combine_kernel");
}

// ---- entries ------------------------------------------------------------------

static bool attn_sizes_ok(int n_seq, int n_heads, int head_dim, int max_blocks, int block_size) {
    return n_seq >= 0 && n_heads > 0 && head_dim >= 8 && head_dim <= KERN_CUDA_ATTN_MAX_DIM &&
           head_dim % 8 == 0 && max_blocks > 0 && block_size > 0 &&
           (long long)max_blocks * block_size <= INT_MAX - ATTN_PART;
}

extern "C" size_t kern_cuda_attn_decode_workspace(int n_seq, int n_heads, int head_dim,
                                                  int max_blocks, int block_size) {
    if (!attn_sizes_ok(n_seq, n_heads, head_dim, max_blocks, block_size))
        return (size_t)-1;
    const int max_parts = attn_max_parts(max_blocks, block_size);
    if (max_parts <= 1)
        return 0;
    return (size_t)n_seq * n_heads * max_parts * ((size_t)head_dim + 2) * sizeof(float);
}

extern "C" int kern_cuda_attn_decode_kv(float *out, const float *q, const void *k_pool,
                                        const void *v_pool, kern_kv_dtype dtype, size_t scale_off,
                                        const int32_t *block_tables, int max_blocks,
                                        const int32_t *ctx_lens, int n_seq, int n_heads,
                                        int n_kv_heads, int head_dim, int block_size,
                                        size_t block_stride, size_t row_stride, float scale,
                                        int window, float softcap, float *workspace,
                                        size_t workspace_bytes, cudaStream_t stream) {
    const int fmt = kvf_of(dtype);
    if (fmt < 0 || !attn_sizes_ok(n_seq, n_heads, head_dim, max_blocks, block_size) ||
        n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || window < 0 || !(softcap >= 0.0f))
        return BRISK_EINVAL;
    if (n_seq == 0)
        return BRISK_OK;
    const size_t kv_row = (size_t)n_kv_heads * head_dim;
    if (row_stride < kv_row)
        return BRISK_EINVAL;
    if (fmt == KVF_F16 ? block_stride < (size_t)(block_size - 1) * row_stride + kv_row
                       : head_dim % 16 != 0 || row_stride % 16 != 0 ||
                             scale_off < (size_t)block_size * row_stride ||
                             block_stride < scale_off + (size_t)block_size * n_kv_heads * 2 ||
                             block_stride % 8 != 0 || scale_off % 2 != 0)
        return BRISK_EINVAL;
    if (!out || !q || !k_pool || !v_pool || !block_tables || !ctx_lens)
        return BRISK_EINVAL;
    const int group = n_heads / n_kv_heads;
    const size_t blocks_x = (size_t)n_seq * n_kv_heads * ((group + ATTN_HG - 1) / ATTN_HG);
    if (blocks_x > 0x7fffffffu || (size_t)n_seq * n_heads > 0x7fffffffu ||
        attn_max_parts(max_blocks, block_size) > 65535)
        return BRISK_EINVAL; // past CUDA's grid limits
    const size_t need =
        kern_cuda_attn_decode_workspace(n_seq, n_heads, head_dim, max_blocks, block_size);
    if (need > 0 && (!workspace || workspace_bytes < need || !kern_cuda_aligned(workspace, 4)))
        return BRISK_EINVAL;
    return attn_decode_launch(out, q, k_pool, v_pool, fmt, scale_off, block_tables, max_blocks,
                              ctx_lens, n_seq, n_heads, n_kv_heads, head_dim, block_size,
                              block_stride, row_stride, scale, window, softcap, workspace, stream);
}

extern "C" int kern_cuda_attn_decode_ex(float *out, const float *q, const uint16_t *k16,
                                        const uint16_t *v16, const int32_t *block_tables,
                                        int max_blocks, const int32_t *ctx_lens, int n_seq,
                                        int n_heads, int n_kv_heads, int head_dim, int block_size,
                                        size_t block_stride, size_t row_stride, float scale,
                                        int window, float softcap, float *workspace,
                                        size_t workspace_bytes, cudaStream_t stream) {
    return kern_cuda_attn_decode_kv(out, q, k16, v16, KERN_KV_F16, 0, block_tables, max_blocks,
                                    ctx_lens, n_seq, n_heads, n_kv_heads, head_dim, block_size,
                                    block_stride, row_stride, scale, window, softcap, workspace,
                                    workspace_bytes, stream);
}

extern "C" int kern_cuda_attn_decode(float *out, const float *q, const uint16_t *k16,
                                     const uint16_t *v16, const int32_t *block_tables,
                                     int max_blocks, const int32_t *ctx_lens, int n_seq,
                                     int n_heads, int n_kv_heads, int head_dim, int block_size,
                                     size_t block_stride, size_t row_stride, float scale,
                                     float *workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
    return kern_cuda_attn_decode_ex(out, q, k16, v16, block_tables, max_blocks, ctx_lens, n_seq,
                                    n_heads, n_kv_heads, head_dim, block_size, block_stride,
                                    row_stride, scale, 0, 0.0f, workspace, workspace_bytes, stream);
}
