// kern_cuda_attn_prefill.cu - causal attention for runs of query rows over
// the paged KV cache (f16, or int8 / fp8 codes with their scales,
// kern_cuda_kv_fmt.cuh), tiled with an online softmax (flash-attention
// style): kernel, launcher, C entry.
//
// A block serves M "query vectors" - R consecutive rows of one run times HB
// query heads of one GQA group (HB a power of two <= 8 dividing the group,
// R = M / HB) - so every K and V row it stages serves all M of them. It walks
// the key positions [0, kend) in tiles of BK (kend = 1 + the last position of
// its last row) and keeps, per query vector, a running max m, a running sum
// l and an unnormalised output acc:
//   1. K tile: BK rows of head_dim values from the block table (f16, or
//      codes times their scale), as f32 into shared memory (positions >= kend
//      as zeros).
//   2. scores S[M][BK] = (q * scale) . K in f32, each a sequential
//      head_dim-term FMA chain; key k > p (the row's position) -> -inf.
//   3. per query vector: m' = max(m, max_j S), alpha = e^(m - m'),
//      P = e^(S - m'), l = l * alpha + sum_j P (one row of TPR lanes each).
//   4. V tile into the same shared buffer; acc = acc * alpha + P . V.
// At the end out = acc / l. K/V global loads are issued one phase early into
// registers (raw f16 bits) so their latency hides behind the arithmetic:
// the V tile's loads fly during the scores, the next K tile's during P . V.
//
// Threads: 128 = an 8 x 16 grid (ty, tx). For the scores a thread owns TM
// consecutive query vectors x TN keys (tx, tx + 16, ...): per 4 dims it
// reads TM float4 of Q (a broadcast: a quarter warp shares ty) and TN float4
// of K (rows head_dim + 4 floats apart: 16 * odd bytes mod 128, so the eight
// rows a quarter warp reads hit distinct bank groups) for TM*TN*4 FMAs. For
// P . V the same thread owns TM query vectors x KD float4 groups of dims
// (tx*4 + 64*kd): per key a float4 of V per group, conflict-free.
//
// Configurations (f32 shared memory, row pitch head_dim + 4; bytes at the
// largest head_dim of each; registers as ptxas reports them, no spills):
//   head_dim <= 64:  TM 4, TN 4 (M 32, BK 64), KD 1: 35200 B, 128 regs
//   head_dim <= 128: TM 4, TN 4 (M 32, BK 64), KD 2: 59776 B, 168 regs
//   head_dim <= 256: TM 2, TN 2 (M 16, BK 32), KD 4: 52672 B, 128 regs
// All fit sm_75's 64 KiB a block; above 48 KiB the launcher opts in with
// cudaFuncSetAttribute. Registers hold 16-32 accumulators, TM*TN scores and
// up to 32 words of prefetched f16. Blocks an SM for head_dim 128: H100 3
// (12 warps; shared memory and registers both allow 3), A100 2, T4 1 - few
// warps, so the latency hiding comes from ILP: TM*TN = 16 independent FMA
// chains a thread in the scores, TM*KD*4 = 32 in P . V. The positions, plus
// a key tile, must fit an int (max_blocks * block_size <= INT_MAX - 256).
//
// Grid: one flat x over (tile slot, head chunk); slots run the runs' last
// tiles first (the longest causal ranges) so the short ones fill the tail.
// Tiles past a run's n exit at once.
#include <cuda_fp16.h>
#include <limits.h>

#include "kernels/cuda/kern_cuda_attn_prefill.cuh"
#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_kv_fmt.cuh"

#define PF_THREADS 128 // 4 warps, an 8 x 16 thread grid
#define PF_MAX_DIM 256
#define PF_MAX_HB 8 // query heads of one GQA group a block serves at most

// ---- helpers ------------------------------------------------------------------

typedef kvf_raw pf_raw; // 8 values, as loaded (kern_cuda_kv_fmt.cuh)

// ---- kernel -------------------------------------------------------------------
// See the top comment. TM query vectors and TN keys a thread for the scores,
// KD float4 dim groups a thread for P . V; lh = log2(heads a block).
template <int FMT, int TM, int TN, int KD, bool VEC>
static __global__ __launch_bounds__(PF_THREADS) void attn_prefill_kernel(
    float *__restrict__ out, const float *__restrict__ q, size_t q_stride,
    const void *__restrict__ kp, const void *__restrict__ vp,
    const int32_t *__restrict__ block_tables, int max_blocks, const int32_t *__restrict__ runs,
    int n_runs, int tiles_per_run, int n_heads, int n_kv_heads, int head_dim, int block_size,
    size_t block_stride, size_t row_stride, size_t scale_off, float scale, int window,
    float softcap, int lh) {
    constexpr int M = 8 * TM;                     // query vectors a block
    constexpr int BK = 16 * TN;                   // keys a tile
    constexpr int SP = BK + 16 / TM;              // score row pitch: TM*SP = 16 mod 32 banks
    constexpr int TPR = PF_THREADS / M;           // softmax lanes a query vector
    constexpr int NCH = BK * 8 * KD / PF_THREADS; // 8-element chunks a thread a tile, at most
    static_assert(NCH * PF_THREADS == BK * 8 * KD, "chunks must tile the K/V tile");
    static_assert(TPR >= 1 && TPR <= KERN_CUDA_WARP, "a softmax row lies within a warp");

    extern __shared__ float4 pf_smem4[];
    const int dp = head_dim + 4; // row pitch of Q and K/V: 16-byte aligned, odd in float4s
    float *s_q = reinterpret_cast<float *>(pf_smem4); // [M][dp], q * scale
    float *s_kv = s_q + M * dp;                       // [BK][dp], K then V
    float *s_s = s_kv + BK * dp;                      // [M][SP], scores then P
    float *s_alpha = s_s + M * SP;                    // [M]
    float *s_l = s_alpha + M;                         // [M]
    int *s_pos = reinterpret_cast<int *>(s_l + M);    // [M], -1: no keys, no output

    // Which tile, run and heads.
    const int group = n_heads / n_kv_heads, hb = 1 << lh, n_hc = group >> lh;
    const int n_y = n_kv_heads * n_hc;
    unsigned bx = blockIdx.x;
    const int hc = (int)(bx % (unsigned)n_y);
    bx /= (unsigned)n_y;
    const int run = (int)(bx % (unsigned)n_runs);
    const int tile = tiles_per_run - 1 - (int)(bx / (unsigned)n_runs);
    const int g = hc / n_hc, h0 = g * group + (hc % n_hc) * hb;
    const int first = runs[3 * run], n = runs[3 * run + 1], pos0 = runs[3 * run + 2];
    const int R = M >> lh, r0 = tile * R;
    if (n <= r0)
        return; // also a run with n <= 0; block-uniform, before any barrier

    // Keys the tile needs: positions up to its last row's, never past the
    // table (rows at or past max_ctx, or at negative positions, get zeros).
    const int max_ctx = max_blocks * block_size;
    const long long p_lo = (long long)pos0 + r0;
    const long long p_hi = (long long)pos0 + min(n, r0 + R) - 1;
    const int kend = (p_lo < max_ctx && p_hi >= 0) ? (int)min(p_hi, (long long)max_ctx - 1) + 1 : 0;
    const int n_kt = (kend + BK - 1) / BK;
    // A sliding window: no row of the tile sees keys before kstart, so the
    // key tiles before it are skipped (the rows' own limits are in the mask).
    const int kt0 = window > 0 && p_lo - window + 1 > 0 ? (int)((p_lo - window + 1) / BK) : 0;

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int32_t *bt = block_tables + (size_t)run * (size_t)max_blocks;
    const int cpr = head_dim >> 3, n_chunk = BK * cpr; // 8-element chunks a row, a tile
    const size_t head_off = (size_t)g * head_dim;

    // Raw bits of one K or V tile, this thread's chunks (zeros past kend: a
    // quantized chunk's scale 0 too, so its values are 0).
    pf_raw raw[NCH];
    auto load_tile = [&](const void *__restrict__ pool, int k0) {
#pragma unroll
        for (int c = 0; c < NCH; c++) {
            const int u = tid + c * PF_THREADS;
            raw[c].v[0] = raw[c].v[1] = raw[c].v[2] = raw[c].v[3] = 0u;
            if (u < n_chunk) {
                const int j = u / cpr, part = u - j * cpr, p = k0 + j;
                if (p < kend) {
                    const int r = p % block_size;
                    raw[c] =
                        kvf_load8<FMT, VEC>(pool, (size_t)bt[p / block_size] * block_stride,
                                            (size_t)r * row_stride + head_off + (size_t)part * 8,
                                            scale_off + 2 * ((size_t)r * n_kv_heads + g));
                }
            }
        }
    };
    auto store_tile = [&]() {
#pragma unroll
        for (int c = 0; c < NCH; c++) {
            const int u = tid + c * PF_THREADS;
            if (u < n_chunk) {
                const int j = u / cpr, part = u - j * cpr;
                float f[8];
                kvf_unpack8<FMT>(raw[c], f);
                float4 *dst = reinterpret_cast<float4 *>(s_kv + j * dp + part * 8);
                dst[0] = make_float4(f[0], f[1], f[2], f[3]);
                dst[1] = make_float4(f[4], f[5], f[6], f[7]);
            }
        }
    };

    if (n_kt > kt0)
        load_tile(kp, kt0 * BK); // in flight while Q is staged

    // Q rows times scale (zeros for rows past the run), and the positions.
    for (int u = tid; u < M * head_dim; u += PF_THREADS) {
        const int m = u / head_dim, d = u - m * head_dim, i = r0 + (m >> lh);
        float x = 0.0f;
        if (i < n)
            x = q[(size_t)((long long)first + i) * q_stride +
                  (size_t)(h0 + (m & (hb - 1))) * head_dim + d] *
                scale;
        s_q[m * dp + d] = x;
    }
    if (tid < M) {
        const int i = r0 + (tid >> lh);
        const long long p = (long long)pos0 + i;
        s_pos[tid] = (i < n && p >= 0 && p < max_ctx) ? (int)p : -1;
    }

    bool dval[KD]; // this thread's dim groups that exist
#pragma unroll
    for (int kd = 0; kd < KD; kd++)
        dval[kd] = tx * 4 + 64 * kd < head_dim;
    float acc[TM][KD][4];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int kd = 0; kd < KD; kd++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][kd][e] = 0.0f;
    // The softmax state of query vector sm_row, kept alike by its TPR lanes.
    const int sm_row = tid / TPR, sm_sub = tid % TPR;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int kt = kt0; kt < n_kt; kt++) {
        const int k0 = kt * BK;
        __syncthreads();   // the previous P . V is done with s_kv and s_s (and Q is staged)
        store_tile();      // K
        load_tile(vp, k0); // V: in flight during the scores
        __syncthreads();

        // 2. scores
        float s[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int k = 0; k < TN; k++)
                s[i][k] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < head_dim; d += 4) {
            float4 qv[TM], kv[TN];
#pragma unroll
            for (int i = 0; i < TM; i++)
                qv[i] = *reinterpret_cast<const float4 *>(s_q + (ty * TM + i) * dp + d);
#pragma unroll
            for (int k = 0; k < TN; k++)
                kv[k] = *reinterpret_cast<const float4 *>(s_kv + (tx + 16 * k) * dp + d);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int k = 0; k < TN; k++) {
                    float t = s[i][k];
                    t = fmaf(qv[i].x, kv[k].x, t);
                    t = fmaf(qv[i].y, kv[k].y, t);
                    t = fmaf(qv[i].z, kv[k].z, t);
                    s[i][k] = fmaf(qv[i].w, kv[k].w, t);
                }
        }
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int m = ty * TM + i, pm = s_pos[m];
#pragma unroll
            for (int k = 0; k < TN; k++) {
                const int j = tx + 16 * k;
                // the CPU's order: soft-cap (Gemma 2), then the causal and window masks
                float sc = s[i][k];
                if (softcap > 0.0f)
                    sc = softcap * tanhf(sc / softcap);
                const bool in = k0 + j <= pm && (window <= 0 || k0 + j > pm - window);
                s_s[m * SP + j] = in ? sc : -INFINITY;
            }
        }
        __syncthreads(); // S complete; K no longer read

        store_tile(); // V (waits for its loads)

        // 3. online softmax, TPR lanes a query vector. A vector with no key
        // yet (m' = -inf: every key so far masked) keeps acc = 0, l = 0.
        {
            float *srow = s_s + sm_row * SP;
            float tmax = -INFINITY;
#pragma unroll
            for (int j = sm_sub; j < BK; j += TPR)
                tmax = fmaxf(tmax, srow[j]);
#pragma unroll
            for (int o = TPR / 2; o > 0; o >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
            const float m_new = fmaxf(m_run, tmax);
            float alpha = 1.0f, sum = 0.0f;
            if (m_new == -INFINITY) {
#pragma unroll
                for (int j = sm_sub; j < BK; j += TPR)
                    srow[j] = 0.0f;
            } else {
                alpha = expf(m_run - m_new); // 0 the first time (m_run = -inf)
#pragma unroll
                for (int j = sm_sub; j < BK; j += TPR) {
                    const float e = expf(srow[j] - m_new); // masked: e^-inf = 0
                    srow[j] = e;
                    sum += e;
                }
            }
#pragma unroll
            for (int o = TPR / 2; o > 0; o >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            l_run = l_run * alpha + sum;
            m_run = m_new;
            if (sm_sub == 0) {
                s_alpha[sm_row] = alpha;
                s_l[sm_row] = l_run;
            }
        }
        __syncthreads(); // V, P and alpha visible

        // 4. acc = acc * alpha + P . V over the tile's keys below kend (the
        // rest of a last tile has P = 0 and V = 0 up to the next 4), while
        // the next K tile is in flight.
        if (kt + 1 < n_kt)
            load_tile(kp, k0 + BK);
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const float a = s_alpha[ty * TM + i];
#pragma unroll
            for (int kd = 0; kd < KD; kd++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[i][kd][e] *= a;
        }
        const int nk = min(BK, kend - k0);
        for (int j = 0; j < nk; j += 4) {
            float pr[TM][4];
#pragma unroll
            for (int i = 0; i < TM; i++) {
                const float4 p4 = *reinterpret_cast<const float4 *>(s_s + (ty * TM + i) * SP + j);
                pr[i][0] = p4.x, pr[i][1] = p4.y, pr[i][2] = p4.z, pr[i][3] = p4.w;
            }
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                const float *vrow = s_kv + (j + jj) * dp + tx * 4;
#pragma unroll
                for (int kd = 0; kd < KD; kd++)
                    if (dval[kd]) {
                        const float4 v = *reinterpret_cast<const float4 *>(vrow + 64 * kd);
#pragma unroll
                        for (int i = 0; i < TM; i++) {
                            acc[i][kd][0] = fmaf(pr[i][jj], v.x, acc[i][kd][0]);
                            acc[i][kd][1] = fmaf(pr[i][jj], v.y, acc[i][kd][1]);
                            acc[i][kd][2] = fmaf(pr[i][jj], v.z, acc[i][kd][2]);
                            acc[i][kd][3] = fmaf(pr[i][jj], v.w, acc[i][kd][3]);
                        }
                    }
            }
        }
    }
    // out = acc / l for rows with keys, zeros for rows out of the table's
    // range; rows past the run are not this block's. Without a key tile no
    // barrier has yet made the other threads' s_pos visible.
    if (n_kt <= kt0)
        __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int m = ty * TM + i, row = r0 + (m >> lh);
        if (row >= n)
            continue;
        const int pm = s_pos[m];
        const float l = pm >= 0 ? s_l[m] : 1.0f;
        float *o = out + (size_t)((long long)first + row) * q_stride +
                   (size_t)(h0 + (m & (hb - 1))) * head_dim + tx * 4;
#pragma unroll
        for (int kd = 0; kd < KD; kd++)
            if (dval[kd])
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[64 * kd + e] = pm >= 0 ? acc[i][kd][e] / l : 0.0f;
    }
}

// ---- launcher -----------------------------------------------------------------

// The tile shape for a head_dim: query vectors a block (M = 8 * tm), and the
// log2 of the query heads a block serves (the largest power of two <= 8 that
// divides the group and leaves at least one row).
static int pf_tm(int head_dim) {
    return head_dim <= 128 ? 4 : 2;
}

static int pf_lh(int group) {
    int lh = 0;
    while ((2 << lh) <= PF_MAX_HB && group % (2 << lh) == 0)
        lh++;
    return lh;
}

template <int FMT, int TM, int TN, int KD>
static int pf_launch_cfg(float *out, const float *q, size_t q_stride, const void *kp,
                         const void *vp, const int32_t *block_tables, int max_blocks,
                         const int32_t *runs, int n_runs, int max_run, int n_heads, int n_kv_heads,
                         int head_dim, int block_size, size_t block_stride, size_t row_stride,
                         size_t scale_off, float scale, int window, float softcap,
                         cudaStream_t stream) {
    constexpr int M = 8 * TM, BK = 16 * TN, SP = BK + 16 / TM;
    const int group = n_heads / n_kv_heads, lh = pf_lh(group);
    const int rows = M >> lh, tiles = (max_run + rows - 1) / rows;
    const size_t blocks = (size_t)n_runs * tiles * (size_t)n_kv_heads * (group >> lh);
    const size_t dp = (size_t)head_dim + 4;
    const size_t smem = sizeof(float) * ((M + BK) * dp + (size_t)M * SP + 3 * (size_t)M);
    // 16-byte f16 loads need every K/V row start 8-element aligned: the
    // pools and the strides (the head offsets are multiples of head_dim).
    // The codes' 8-byte loads always are (kern_cuda_kv_fmt.cuh).
    const bool vec = kern_cuda_aligned(kp, 16) && kern_cuda_aligned(vp, 16) &&
                     block_stride % 8 == 0 && row_stride % 8 == 0;
    void (*kern)(float *, const float *, size_t, const void *, const void *, const int32_t *, int,
                 const int32_t *, int, int, int, int, int, int, size_t, size_t, size_t, float, int,
                 float, int) = vec ? attn_prefill_kernel<FMT, TM, TN, KD, true>
                                   : attn_prefill_kernel<FMT, TM, TN, KD, false>;
    // Past the default 48 KiB a block must opt in (per kernel; cheap, and
    // allowed while a stream is being captured).
    if (smem > 48 * 1024) {
        const int rc = KERN_CUDA_CALL(
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        if (rc != 0)
            return rc;
    }
    kern<<<(unsigned)blocks, PF_THREADS, smem, stream>>>(
        out, q, q_stride, kp, vp, block_tables, max_blocks, runs, n_runs, tiles, n_heads,
        n_kv_heads, head_dim, block_size, block_stride, row_stride, scale_off, scale, window,
        softcap, lh);
    return KERN_CUDA_LAUNCH_CHECK("attn_prefill_kernel");
}

template <int FMT>
static int attn_prefill_launch(float *out, const float *q, size_t q_stride, const void *kp,
                               const void *vp, const int32_t *block_tables, int max_blocks,
                               const int32_t *runs, int n_runs, int max_run, int n_heads,
                               int n_kv_heads, int head_dim, int block_size, size_t block_stride,
                               size_t row_stride, size_t scale_off, float scale, int window,
                               float softcap, cudaStream_t stream) {
    if (head_dim <= 64)
        return pf_launch_cfg<FMT, 4, 4, 1>(out, q, q_stride, kp, vp, block_tables, max_blocks, runs,
                                           n_runs, max_run, n_heads, n_kv_heads, head_dim,
                                           block_size, block_stride, row_stride, scale_off, scale,
                                           window, softcap, stream);
    if (head_dim <= 128)
        return pf_launch_cfg<FMT, 4, 4, 2>(out, q, q_stride, kp, vp, block_tables, max_blocks, runs,
                                           n_runs, max_run, n_heads, n_kv_heads, head_dim,
                                           block_size, block_stride, row_stride, scale_off, scale,
                                           window, softcap, stream);
    return pf_launch_cfg<FMT, 2, 2, 4>(out, q, q_stride, kp, vp, block_tables, max_blocks, runs,
                                       n_runs, max_run, n_heads, n_kv_heads, head_dim, block_size,
                                       block_stride, row_stride, scale_off, scale, window, softcap,
                                       stream);
}

// ---- entry --------------------------------------------------------------------

extern "C" int kern_cuda_attn_prefill_kv(float *out, const float *q, size_t q_stride,
                                         const void *k_pool, const void *v_pool,
                                         kern_kv_dtype dtype, size_t scale_off,
                                         const int32_t *block_tables, int max_blocks,
                                         const int32_t *runs, int n_runs, int max_run, int n_heads,
                                         int n_kv_heads, int head_dim, int block_size,
                                         size_t block_stride, size_t row_stride, float scale,
                                         int window, float softcap, cudaStream_t stream) {
    const int fmt = kvf_of(dtype);
    if (fmt < 0 || window < 0 || !(softcap >= 0.0f))
        return BRISK_EINVAL;
    if (n_runs < 0 || max_run < 0 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
        head_dim < 8 || head_dim > PF_MAX_DIM || head_dim % 8 != 0 || max_blocks <= 0 ||
        block_size <= 0 || (long long)max_blocks * block_size > INT_MAX - PF_MAX_DIM)
        return BRISK_EINVAL;
    const size_t kv_row = (size_t)n_kv_heads * head_dim;
    if (q_stride < (size_t)n_heads * head_dim || row_stride < kv_row)
        return BRISK_EINVAL;
    if (fmt == KVF_F16 ? block_stride < (size_t)(block_size - 1) * row_stride + kv_row
                       : head_dim % 16 != 0 || row_stride % 16 != 0 ||
                             scale_off < (size_t)block_size * row_stride ||
                             block_stride < scale_off + (size_t)block_size * n_kv_heads * 2 ||
                             block_stride % 8 != 0 || scale_off % 2 != 0)
        return BRISK_EINVAL;
    if (n_runs == 0 || max_run == 0)
        return BRISK_OK;
    if (!out || !q || !k_pool || !v_pool || !block_tables || !runs || out == q)
        return BRISK_EINVAL;
    const int group = n_heads / n_kv_heads, lh = pf_lh(group);
    const int rows = (8 * pf_tm(head_dim)) >> lh;
    const size_t blocks = (size_t)n_runs * (size_t)((max_run + rows - 1) / rows) *
                          (size_t)n_kv_heads * (size_t)(group >> lh);
    if (blocks > 0x7fffffffu)
        return BRISK_EINVAL; // past CUDA's grid limit
    if (fmt == KVF_I8)
        return attn_prefill_launch<KVF_I8>(out, q, q_stride, k_pool, v_pool, block_tables,
                                           max_blocks, runs, n_runs, max_run, n_heads, n_kv_heads,
                                           head_dim, block_size, block_stride, row_stride,
                                           scale_off, scale, window, softcap, stream);
    if (fmt == KVF_F8)
        return attn_prefill_launch<KVF_F8>(out, q, q_stride, k_pool, v_pool, block_tables,
                                           max_blocks, runs, n_runs, max_run, n_heads, n_kv_heads,
                                           head_dim, block_size, block_stride, row_stride,
                                           scale_off, scale, window, softcap, stream);
    return attn_prefill_launch<KVF_F16>(out, q, q_stride, k_pool, v_pool, block_tables, max_blocks,
                                        runs, n_runs, max_run, n_heads, n_kv_heads, head_dim,
                                        block_size, block_stride, row_stride, 0, scale, window,
                                        softcap, stream);
}

extern "C" int kern_cuda_attn_prefill_ex(float *out, const float *q, size_t q_stride,
                                         const uint16_t *k16, const uint16_t *v16,
                                         const int32_t *block_tables, int max_blocks,
                                         const int32_t *runs, int n_runs, int max_run, int n_heads,
                                         int n_kv_heads, int head_dim, int block_size,
                                         size_t block_stride, size_t row_stride, float scale,
                                         int window, float softcap, cudaStream_t stream) {
    return kern_cuda_attn_prefill_kv(out, q, q_stride, k16, v16, KERN_KV_F16, 0, block_tables,
                                     max_blocks, runs, n_runs, max_run, n_heads, n_kv_heads,
                                     head_dim, block_size, block_stride, row_stride, scale, window,
                                     softcap, stream);
}

extern "C" int kern_cuda_attn_prefill(float *out, const float *q, size_t q_stride,
                                      const uint16_t *k16, const uint16_t *v16,
                                      const int32_t *block_tables, int max_blocks,
                                      const int32_t *runs, int n_runs, int max_run, int n_heads,
                                      int n_kv_heads, int head_dim, int block_size,
                                      size_t block_stride, size_t row_stride, float scale,
                                      cudaStream_t stream) {
    return kern_cuda_attn_prefill_ex(out, q, q_stride, k16, v16, block_tables, max_blocks, runs,
                                     n_runs, max_run, n_heads, n_kv_heads, head_dim, block_size,
                                     block_stride, row_stride, scale, 0, 0.0f, stream);
}
