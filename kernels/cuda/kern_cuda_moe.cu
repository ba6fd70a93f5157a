// kern_cuda_moe.cu - the mixture-of-experts MLP on the GPU
// (kern_cuda_moe.cuh): routing, the experts' gated MLPs per (token, slot)
// pair, and the weighted sum per token.
#include <cuda_fp16.h>

#include "kernels/cuda/kern_cuda_common.cuh"
#include "kernels/cuda/kern_cuda_moe.cuh"

#define MOE_THREADS 256 // 8 warps a block
#define MOE_WARPS (MOE_THREADS / KERN_CUDA_WARP)
#define MOE_ROWS (2 * MOE_WARPS)                  // output rows a block of a pair computes
#define MOE_ALIGN(b) (((b) + 255) & ~(size_t)255) // workspace regions on 256 bytes

// ---- routing -----------------------------------------------------------------

// model_moe_route, statement for statement, for logits with a NaN: a NaN
// never compares greater, so which NaN is chosen depends on the order of
// the scan, and only the serial scan reproduces the CPU's choice.
__device__ static void moe_route_serial(const float *lg, int E, int K, int norm, int32_t *ids,
                                        float *w) {
    unsigned taken[KERN_CUDA_MOE_MAX_EXPERT / 32] = {0};
    float mx = lg[0];
    for (int e = 1; e < E; e++)
        if (lg[e] > mx)
            mx = lg[e];
    float sum = 0.0f;
    for (int e = 0; e < E; e++)
        sum += expf(lg[e] - mx);
    float wk[KERN_CUDA_MOE_MAX_USED];
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if ((taken[e / 32] >> (e % 32)) & 1u)
                continue;
            if (best < 0 || lg[e] > lg[best])
                best = e;
        }
        taken[best / 32] |= 1u << (best % 32);
        ids[k] = best;
        wk[k] = expf(lg[best] - mx) / sum;
    }
    float s = 0.0f;
    for (int k = 0; k < K; k++)
        s += wk[k];
    for (int k = 0; k < K; k++)
        w[k] = norm ? wk[k] / s : wk[k];
}

// One block of MOE_THREADS per token: warp w computes the logits of experts
// w, w + 8, ... (lanes stride over dim, f32), then warp 0 chooses. Lane l
// owns experts l + 32 j; the k-th choice is the warp's best unchosen
// (logit, index) pair, larger logit first and the lower index on equal
// logits: a total order over non-NaN values, so the butterfly leaves every
// lane with the same, the CPU's, choice.
__global__ static void moe_route_kernel(int32_t *__restrict__ ids, float *__restrict__ wts,
                                        const float *__restrict__ R, const float *__restrict__ x,
                                        int dim, int E, int K, int norm) {
    __shared__ float lg[KERN_CUDA_MOE_MAX_EXPERT];
    const int t = blockIdx.x, lane = threadIdx.x % KERN_CUDA_WARP,
              warp = threadIdx.x / KERN_CUDA_WARP;
    const float *xt = x + (size_t)t * dim;
    for (int e = warp; e < E; e += MOE_WARPS) {
        const float *r = R + (size_t)e * dim;
        float acc = 0.0f;
        for (int i = lane; i < dim; i += KERN_CUDA_WARP)
            acc += r[i] * xt[i];
        acc = kern_warp_sum(acc);
        if (lane == 0)
            lg[e] = acc;
    }
    __syncthreads();
    if (warp != 0)
        return;
    int32_t *id = ids + (size_t)t * K;
    float *w = wts + (size_t)t * K;
    bool nan = false;
    for (int e = lane; e < E; e += KERN_CUDA_WARP)
        nan |= isnan(lg[e]);
    if (__any_sync(0xffffffffu, nan)) {
        if (lane == 0)
            moe_route_serial(lg, E, K, norm, id, w);
        return;
    }
    float mx = -INFINITY;
    for (int e = lane; e < E; e += KERN_CUDA_WARP)
        mx = fmaxf(mx, lg[e]);
    mx = kern_warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += KERN_CUDA_WARP)
        sum += expf(lg[e] - mx);
    sum = kern_warp_sum(sum);
    unsigned mine = 0; // bit j: expert lane + 32 j is chosen
    float wk[KERN_CUDA_MOE_MAX_USED];
    for (int k = 0; k < K; k++) {
        float bv = 0.0f;
        int bi = -1;
        for (int j = 0, e = lane; e < E; j++, e += KERN_CUDA_WARP)
            if (!((mine >> j) & 1u) && (bi < 0 || lg[e] > bv))
                bv = lg[e], bi = e;
        for (int o = KERN_CUDA_WARP / 2; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi)))
                bv = ov, bi = oi;
        }
        if (bi % KERN_CUDA_WARP == lane)
            mine |= 1u << (bi / KERN_CUDA_WARP);
        wk[k] = expf(bv - mx) / sum;
        if (lane == 0)
            id[k] = bi;
    }
    if (lane == 0) {
        float s = 0.0f;
        for (int k = 0; k < K; k++)
            s += wk[k];
        for (int k = 0; k < K; k++)
            w[k] = norm ? wk[k] / s : wk[k];
    }
}

// ---- the experts' products -----------------------------------------------------

// Row `row` of weight W (F16 or INT8 with per-32 scales) times x[n_in],
// summed by one warp in f32; every lane returns the sum. INT8: four values
// a lane a step (rows are whole blocks of 32, so 4-byte aligned); F16: two
// when n_in is even (rows 4-byte aligned), else one.
__device__ static float moe_dot(const kern_cuda_weight &W, int row, const float *__restrict__ x,
                                int lane) {
    const int n = W.n_in;
    float acc = 0.0f;
    if (W.fmt == KERN_CUDA_W_INT8) {
        const char4 *q = (const char4 *)((const int8_t *)W.data + (size_t)row * n);
        const uint16_t *sc = W.scales + (size_t)row * (n / 32);
        for (int i = lane; i < n / 4; i += KERN_CUDA_WARP) {
            const char4 c = q[i];
            const float s = __half2float(__ushort_as_half(sc[i / 8]));
            const float *xi = x + 4 * i;
            acc += s * ((float)c.x * xi[0] + (float)c.y * xi[1] + (float)c.z * xi[2] +
                        (float)c.w * xi[3]);
        }
    } else if (n % 2 == 0) {
        const __half2 *h = (const __half2 *)((const __half *)W.data + (size_t)row * n);
        for (int i = lane; i < n / 2; i += KERN_CUDA_WARP) {
            const float2 f = __half22float2(h[i]);
            acc += f.x * x[2 * i] + f.y * x[2 * i + 1];
        }
    } else {
        const __half *h = (const __half *)W.data + (size_t)row * n;
        for (int i = lane; i < n; i += KERN_CUDA_WARP)
            acc += __half2float(h[i]) * x[i];
    }
    return kern_warp_sum(acc);
}

// The CPU's activations (kern_silu_mul, kern_gelu_tanh_mul).
__device__ __forceinline__ float moe_act(float g, float u, int gelu) {
    if (gelu)
        return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g))) * u;
    return g / (1.0f + expf(-g)) * u;
}

// Block (p, tile): pair p = token p / K, slot p % K, expert ids[p]; rows
// [tile * MOE_ROWS, + MOE_ROWS) of the expert's hidden, a warp per row:
// h[p][r] = act(gate_e[r] . x_t) * (up_e[r] . x_t).
__global__ static void moe_gate_up_kernel(float *__restrict__ h, kern_cuda_weight G,
                                          kern_cuda_weight U, const float *__restrict__ x,
                                          const int32_t *__restrict__ ids, int K, int E, int dim,
                                          int H, int gelu) {
    const size_t p = blockIdx.x;
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    const int e = ids[p];
    const float *xt = x + (p / K) * (size_t)dim;
    const int r_end = min(H, (int)(blockIdx.y + 1) * MOE_ROWS);
    for (int r = blockIdx.y * MOE_ROWS + warp; r < r_end; r += MOE_WARPS) {
        float v = 0.0f;
        if (e >= 0 && e < E) { // always, for ids from moe_route_kernel
            const float g = moe_dot(G, e * H + r, xt, lane);
            const float u = moe_dot(U, e * H + r, xt, lane);
            v = moe_act(g, u, gelu);
        }
        if (lane == 0)
            h[p * H + r] = v;
    }
}

// order[0..K) = token's slots 0..K-1 sorted by expert id (insertion sort,
// stable): the ascending-expert order of every weighted sum.
__device__ static void moe_slots_by_expert(int *order, const int32_t *ids, int K) {
    for (int k = 0; k < K; k++) {
        int j = k;
        while (j > 0 && ids[order[j - 1]] > ids[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
}

// Block (t, tile): token t's output rows of the tile, a warp per row:
// y[t][r] = sum over its slots in ascending expert order of
// w * (down_e[r] . h[pair]), from 0 and in that order as the CPU adds, so
// a token's bits do not depend on the rest of the batch.
__global__ static void moe_down_kernel(float *__restrict__ y, kern_cuda_weight D,
                                       const float *__restrict__ h, const int32_t *__restrict__ ids,
                                       const float *__restrict__ wts, int K, int E, int dim,
                                       int H) {
    __shared__ int order[KERN_CUDA_MOE_MAX_USED];
    const size_t t = blockIdx.x;
    const int lane = threadIdx.x % KERN_CUDA_WARP, warp = threadIdx.x / KERN_CUDA_WARP;
    if (threadIdx.x == 0)
        moe_slots_by_expert(order, ids + t * K, K);
    __syncthreads();
    const int r_end = min(dim, (int)(blockIdx.y + 1) * MOE_ROWS);
    for (int r = blockIdx.y * MOE_ROWS + warp; r < r_end; r += MOE_WARPS) {
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            const size_t p = t * K + order[j];
            const int e = ids[p];
            if (e >= 0 && e < E) // always, for ids from moe_route_kernel
                acc += wts[p] * moe_dot(D, e * dim + r, h + p * H, lane);
        }
        if (lane == 0)
            y[t * dim + r] = acc;
    }
}

// ---- the grouped path ---------------------------------------------------------
// The pairs of a chunk of tokens sorted by expert (a counting sort: counts per
// block of pairs and expert, offsets, a scatter), then per expert a tiled GEMM
// over its gathered tokens (gate and up with the activation, then down, each
// pair's output to its own place), then the weighted sum per token in
// ascending expert order as moe_down_kernel adds. Every output element is one
// thread's f32 FMA chain over k ascending, whatever tile or chunk its pair
// lands in: a token's bits depend on its own row only (batch invariance
// within the path), and no atomics anywhere (deterministic).

#define MG_SORT 1024      // pairs a block of the counting sort reads
#define MG_BT 32          // gathered tokens (pairs) a GEMM tile holds
#define MG_BN 64          // weight rows a GEMM tile holds
#define MG_BK 32          // k a step (one INT8 scale block)
#define MG_LD (MG_BK + 1) // padded shared rows: a warp's 16 weight rows in 16 banks

// Block c reads pairs [c * MG_SORT, + MG_SORT) of ids[P]; thread e (one per
// expert: blockDim >= E) scans them in ascending pair order and either
// counts its expert's pairs into cnt[c][e] (scatter 0) or writes their pair
// indices at cnt[c][e], cnt[c][e] + 1, ... (scatter 1, after
// moe_offsets_kernel made cnt the block's first position per expert): the
// sorted order is (expert, pair) ascending, the same at every run.
__global__ static void moe_sort_kernel(int32_t *__restrict__ cnt, int32_t *__restrict__ sorted,
                                       const int32_t *__restrict__ ids, int P, int E, int scatter) {
    __shared__ int32_t sid[MG_SORT];
    const int p0 = blockIdx.x * MG_SORT, n = min(MG_SORT, P - p0);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        sid[i] = ids[p0 + i];
    __syncthreads();
    const int e = threadIdx.x;
    if (e >= E)
        return;
    int32_t *c = cnt + (size_t)blockIdx.x * E + e;
    if (!scatter) {
        int k = 0;
        for (int i = 0; i < n; i++)
            k += sid[i] == e;
        *c = k;
    } else {
        int pos = *c;
        for (int i = 0; i < n; i++)
            if (sid[i] == e)
                sorted[pos++] = p0 + i;
    }
}

// One block (blockDim >= E): cnt[c][e] (counts of n_ch sort blocks) becomes
// each block's first position for expert e in the sorted list; off[e] the
// expert's first position (off[E] the pairs sorted); tiles[] every expert's
// tiles of MG_BT sorted pairs as (expert, first position), experts
// ascending; *n_tiles their number (at most P / MG_BT + E, which the
// workspace holds).
__global__ static void moe_offsets_kernel(int32_t *__restrict__ cnt, int32_t *__restrict__ off,
                                          int2 *__restrict__ tiles, int32_t *__restrict__ n_tiles,
                                          int n_ch, int E) {
    __shared__ int32_t tot[KERN_CUDA_MOE_MAX_EXPERT];
    __shared__ int32_t base[KERN_CUDA_MOE_MAX_EXPERT + 1], tbase[KERN_CUDA_MOE_MAX_EXPERT + 1];
    const int e = threadIdx.x;
    if (e < E) {
        int s = 0;
        for (int c = 0; c < n_ch; c++) {
            const int k = cnt[(size_t)c * E + e];
            cnt[(size_t)c * E + e] = s;
            s += k;
        }
        tot[e] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) { // E <= 256 terms: serial
        base[0] = tbase[0] = 0;
        for (int i = 0; i < E; i++) {
            base[i + 1] = base[i] + tot[i];
            tbase[i + 1] = tbase[i] + (tot[i] + MG_BT - 1) / MG_BT;
        }
        *n_tiles = tbase[E];
        off[E] = base[E];
    }
    __syncthreads();
    if (e < E) {
        for (int c = 0; c < n_ch; c++)
            cnt[(size_t)c * E + e] += base[e];
        off[e] = base[e];
        for (int j = 0; j < tbase[e + 1] - tbase[e]; j++)
            tiles[tbase[e] + j] = make_int2(e, base[e] + j * MG_BT);
    }
}

// Rows [row0, row0 + nrows) (nrows <= MG_BN), columns [k0, k0 + MG_BK) of W
// into s as f32 (F16 values, INT8 s * q), zeros past nrows and past n_in.
__device__ static void moe_load_w(float (*s)[MG_LD], const kern_cuda_weight &W, size_t row0,
                                  int nrows, int k0) {
    const int n = W.n_in;
    if (W.fmt == KERN_CUDA_W_INT8) { // n % 32 == 0: the step is one whole scale block
        for (int i = threadIdx.x; i < MG_BN * (MG_BK / 4); i += MOE_THREADS) {
            const int r = i / (MG_BK / 4), c = i % (MG_BK / 4);
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nrows) {
                const size_t row = row0 + r;
                const char4 q = ((const char4 *)((const int8_t *)W.data + row * n + k0))[c];
                const float sc = __half2float(__ushort_as_half(W.scales[row * (n / 32) + k0 / 32]));
                v = make_float4(sc * (float)q.x, sc * (float)q.y, sc * (float)q.z, sc * (float)q.w);
            }
            s[r][4 * c] = v.x, s[r][4 * c + 1] = v.y, s[r][4 * c + 2] = v.z, s[r][4 * c + 3] = v.w;
        }
    } else if (n % 2 == 0) { // rows 4-byte aligned: pairs of halves
        for (int i = threadIdx.x; i < MG_BN * (MG_BK / 2); i += MOE_THREADS) {
            const int r = i / (MG_BK / 2), c = i % (MG_BK / 2), col = k0 + 2 * c;
            float2 f = make_float2(0.0f, 0.0f);
            if (r < nrows && col < n) // col even, n even: col + 1 < n too
                f = __half22float2(
                    *(const __half2 *)((const __half *)W.data + (row0 + r) * n + col));
            s[r][2 * c] = f.x, s[r][2 * c + 1] = f.y;
        }
    } else {
        for (int i = threadIdx.x; i < MG_BN * MG_BK; i += MOE_THREADS) {
            const int r = i / MG_BK, c = i % MG_BK, col = k0 + c;
            s[r][c] = r < nrows && col < n
                          ? __half2float(((const __half *)W.data)[(row0 + r) * n + col])
                          : 0.0f;
        }
    }
}

// Block (tile, row tile): tile `blockIdx.x` of the list (expert e, sorted
// positions [s0, min(s0 + MG_BT, off[e + 1]))), weight rows [r0, r0 + MG_BN)
// of the expert's n_rows. Pair p's input row is X[p / div] (n_in wide);
// out[p][r0 + r] (rows n_rows wide) = act(A_e[r] . x, B_e[r] . x) when GU
// (gate A, up B), else A_e[r] . x. Thread (tx, ty) = (tid % 16, tid / 16)
// holds tokens ty, ty + 16 and rows tx + 16 j, j < 4; each weight element is
// read once per tile of MG_BT tokens.
template <bool GU>
__global__ static void __launch_bounds__(MOE_THREADS)
    moe_grouped_kernel(float *__restrict__ out, kern_cuda_weight A, kern_cuda_weight B,
                       const float *__restrict__ X, const int32_t *__restrict__ sorted,
                       const int32_t *__restrict__ off, const int2 *__restrict__ tiles,
                       const int32_t *__restrict__ n_tiles, int div, int n_in, int n_rows,
                       int gelu) {
    __shared__ float xs[MG_BT][MG_LD];
    __shared__ float as[MG_BN][MG_LD];
    __shared__ float bs[GU ? MG_BN : 1][MG_LD];
    __shared__ int32_t pr[MG_BT];
    if ((int)blockIdx.x >= *n_tiles)
        return;
    const int2 tl = tiles[blockIdx.x];
    const int e = tl.x, s0 = tl.y, nt = min(MG_BT, off[e + 1] - s0);
    const int r0 = blockIdx.y * MG_BN, nr = min(MG_BN, n_rows - r0);
    const size_t row0 = (size_t)e * n_rows + r0;
    if (threadIdx.x < MG_BT)
        pr[threadIdx.x] = (int)threadIdx.x < nt ? sorted[s0 + threadIdx.x] : -1;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[2][4] = {{0.0f}}, accb[2][4] = {{0.0f}};
    for (int k0 = 0; k0 < n_in; k0 += MG_BK) {
        __syncthreads(); // pr written; the previous step's tiles read
        for (int i = threadIdx.x; i < MG_BT * MG_BK; i += MOE_THREADS) {
            const int t = i / MG_BK, c = i % MG_BK;
            xs[t][c] =
                pr[t] >= 0 && k0 + c < n_in ? X[(size_t)(pr[t] / div) * n_in + k0 + c] : 0.0f;
        }
        moe_load_w(as, A, row0, nr, k0);
        if constexpr (GU)
            moe_load_w(bs, B, row0, nr, k0);
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < MG_BK; kk++) {
            const float x0 = xs[ty][kk], x1 = xs[ty + 16][kk];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float a = as[tx + 16 * j][kk];
                acc[0][j] = fmaf(x0, a, acc[0][j]);
                acc[1][j] = fmaf(x1, a, acc[1][j]);
                if constexpr (GU) {
                    const float b = bs[tx + 16 * j][kk];
                    accb[0][j] = fmaf(x0, b, accb[0][j]);
                    accb[1][j] = fmaf(x1, b, accb[1][j]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = ty + 16 * i;
        if (t >= nt)
            continue;
        float *o = out + (size_t)pr[t] * n_rows + r0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = tx + 16 * j;
            if (r < nr)
                o[r] = GU ? moe_act(acc[i][j], accb[i][j], gelu) : acc[i][j];
        }
    }
}

// Block (t, tile of MOE_THREADS rows): y[t][r] = sum over token t's slots in
// ascending expert order of w * o[pair][r], from 0 (moe_down_kernel's sum
// over the grouped path's products).
__global__ static void moe_sum_kernel(float *__restrict__ y, const float *__restrict__ o,
                                      const int32_t *__restrict__ ids,
                                      const float *__restrict__ wts, int K, int E, int dim) {
    __shared__ int order[KERN_CUDA_MOE_MAX_USED];
    const size_t t = blockIdx.x;
    if (threadIdx.x == 0)
        moe_slots_by_expert(order, ids + t * K, K);
    __syncthreads();
    const int r = blockIdx.y * MOE_THREADS + threadIdx.x;
    if (r >= dim)
        return;
    float acc = 0.0f;
    for (int j = 0; j < K; j++) {
        const size_t p = t * K + order[j];
        const int e = ids[p];
        if (e >= 0 && e < E) // always, for ids from moe_route_kernel
            acc += wts[p] * o[p * dim + r];
    }
    y[t * dim + r] = acc;
}

// The grouped path's workspace after the GEMV path's (ids, weights, hidden
// rows) for chunks of at most KERN_CUDA_MOE_GROUP_TOKENS tokens: the down
// products o[Pc][dim], the sort's counts [n_ch][E], off[E + 1], the sorted
// pairs [Pc], the tile list [max tiles] and its length.
typedef struct moe_group_ws {
    size_t pc, n_ch, max_tiles; // pairs, sort blocks and tiles of a full chunk
    float *o;
    int32_t *cnt, *off, *sorted, *n_tiles;
    int2 *tiles;
} moe_group_ws;

static size_t moe_tiles_max(size_t pairs, int E) {
    return pairs / MG_BT + (size_t)E + 1; // sum of ceil(count_e / MG_BT)
}

static void *moe_at(uint8_t *b, size_t at) {
    return b ? b + at : nullptr;
}

static size_t moe_group_layout(moe_group_ws *g, uint8_t *b, int n_tok, int K, int E, int dim) {
    const int tc = n_tok < KERN_CUDA_MOE_GROUP_TOKENS ? n_tok : KERN_CUDA_MOE_GROUP_TOKENS;
    g->pc = (size_t)tc * K;
    g->n_ch = (g->pc + MG_SORT - 1) / MG_SORT;
    g->max_tiles = moe_tiles_max(g->pc, E);
    size_t at = 0;
    g->o = (float *)moe_at(b, at), at += MOE_ALIGN(g->pc * dim * sizeof(float));
    g->cnt = (int32_t *)moe_at(b, at), at += MOE_ALIGN(g->n_ch * E * sizeof(int32_t));
    g->off = (int32_t *)moe_at(b, at), at += MOE_ALIGN(((size_t)E + 1) * sizeof(int32_t));
    g->sorted = (int32_t *)moe_at(b, at), at += MOE_ALIGN(g->pc * sizeof(int32_t));
    g->tiles = (int2 *)moe_at(b, at), at += MOE_ALIGN(g->max_tiles * sizeof(int2));
    g->n_tiles = (int32_t *)moe_at(b, at), at += MOE_ALIGN(sizeof(int32_t));
    return at;
}

// The grouped path for tokens [0, n_tok) whose routing is in ids / wts and
// whose hidden rows go to h (n_tok * K rows at least), a chunk at a time.
static int moe_grouped(const kern_cuda_moe *m, const float *x, int n_tok, float *y,
                       const int32_t *ids, const float *wts, float *h, const moe_group_ws *g,
                       cudaStream_t stream) {
    const int K = m->n_used, E = m->n_expert, dim = m->dim, H = m->hidden;
    int rc = 0;
    for (int t0 = 0; t0 < n_tok; t0 += KERN_CUDA_MOE_GROUP_TOKENS) {
        const int tn = min(KERN_CUDA_MOE_GROUP_TOKENS, n_tok - t0), pc = tn * K;
        const unsigned n_ch = (unsigned)((pc + MG_SORT - 1) / MG_SORT);
        const int32_t *cid = ids + (size_t)t0 * K;
        const unsigned tiles = (unsigned)moe_tiles_max((size_t)pc, E);
        moe_sort_kernel<<<n_ch, MOE_THREADS, 0, stream>>>(g->cnt, g->sorted, cid, pc, E, 0);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_sort_kernel")) != 0)
            return rc;
        moe_offsets_kernel<<<1, MOE_THREADS, 0, stream>>>(g->cnt, g->off, g->tiles, g->n_tiles,
                                                          (int)n_ch, E);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_offsets_kernel")) != 0)
            return rc;
        moe_sort_kernel<<<n_ch, MOE_THREADS, 0, stream>>>(g->cnt, g->sorted, cid, pc, E, 1);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_sort_kernel")) != 0)
            return rc;
        dim3 gu(tiles, (unsigned)((H + MG_BN - 1) / MG_BN));
        moe_grouped_kernel<true>
            <<<gu, MOE_THREADS, 0, stream>>>(h, *m->gate, *m->up, x + (size_t)t0 * dim, g->sorted,
                                             g->off, g->tiles, g->n_tiles, K, dim, H, m->gelu != 0);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_grouped_kernel<gate_up>")) != 0)
            return rc;
        dim3 dn(tiles, (unsigned)((dim + MG_BN - 1) / MG_BN));
        moe_grouped_kernel<false><<<dn, MOE_THREADS, 0, stream>>>(
            g->o, *m->down, *m->down, h, g->sorted, g->off, g->tiles, g->n_tiles, 1, H, dim, 0);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_grouped_kernel<down>")) != 0)
            return rc;
        dim3 sm((unsigned)tn, (unsigned)((dim + MOE_THREADS - 1) / MOE_THREADS));
        moe_sum_kernel<<<sm, MOE_THREADS, 0, stream>>>(y + (size_t)t0 * dim, g->o, cid,
                                                       wts + (size_t)t0 * K, K, E, dim);
        if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_sum_kernel")) != 0)
            return rc;
    }
    return 0;
}

// ---- C entries -------------------------------------------------------------------

static bool moe_weight_ok(const kern_cuda_weight *w, long long n_out, int n_in) {
    if (!w || !w->data || w->n_out != n_out || w->n_in != n_in)
        return false;
    if (w->fmt == KERN_CUDA_W_INT8)
        return w->scales && n_in % 32 == 0;
    return w->fmt == KERN_CUDA_W_F16;
}

static bool moe_shape_ok(const kern_cuda_moe *m) {
    if (!m || !m->router || m->n_expert < 1 || m->n_expert > KERN_CUDA_MOE_MAX_EXPERT ||
        m->n_used < 1 || m->n_used > m->n_expert || m->n_used > KERN_CUDA_MOE_MAX_USED ||
        m->dim < 1 || m->hidden < 1)
        return false;
    const long long E = m->n_expert;
    return moe_weight_ok(m->gate, E * m->hidden, m->dim) &&
           moe_weight_ok(m->up, E * m->hidden, m->dim) &&
           moe_weight_ok(m->down, E * m->dim, m->hidden);
}

// The GEMV path's regions (ids, weights, hidden rows) of n_tok tokens.
static size_t moe_gemv_bytes(const kern_cuda_moe *m, size_t P) {
    return MOE_ALIGN(P * sizeof(int32_t)) + MOE_ALIGN(P * sizeof(float)) +
           MOE_ALIGN(P * m->hidden * sizeof(float));
}

extern "C" size_t kern_cuda_moe_ws_bytes(const kern_cuda_moe *m, int n_tok) {
    if (!moe_shape_ok(m) || n_tok < 0 || (size_t)n_tok * m->n_used > 0x7fffffffu)
        return (size_t)-1;
    moe_group_ws g;
    return moe_gemv_bytes(m, (size_t)n_tok * m->n_used) +
           moe_group_layout(&g, NULL, n_tok, m->n_used, m->n_expert, m->dim);
}

extern "C" int kern_cuda_moe_ffn(const kern_cuda_moe *m, const float *x, int n_tok, float *y,
                                 void *ws, size_t ws_bytes, int32_t *ids_out, float *w_out,
                                 cudaStream_t stream) {
    return kern_cuda_moe_ffn_path(m, x, n_tok, y, ws, ws_bytes, ids_out, w_out,
                                  KERN_CUDA_MOE_PATH_AUTO, stream);
}

extern "C" int kern_cuda_moe_ffn_path(const kern_cuda_moe *m, const float *x, int n_tok, float *y,
                                      void *ws, size_t ws_bytes, int32_t *ids_out, float *w_out,
                                      kern_cuda_moe_path path, cudaStream_t stream) {
    if (!moe_shape_ok(m) || n_tok < 0 || (n_tok > 0 && (!x || !y || !ws)))
        return BRISK_EINVAL;
    if (path != KERN_CUDA_MOE_PATH_AUTO && path != KERN_CUDA_MOE_PATH_GEMV &&
        path != KERN_CUDA_MOE_PATH_GROUPED)
        return BRISK_EINVAL;
    if (n_tok == 0)
        return 0;
    const size_t need = kern_cuda_moe_ws_bytes(m, n_tok); // (size_t)-1 past 2^31 pairs
    if (need == (size_t)-1 || ws_bytes < need || !kern_cuda_aligned(ws, 256))
        return BRISK_EINVAL;
    const int K = m->n_used, E = m->n_expert, dim = m->dim, H = m->hidden;
    const size_t P = (size_t)n_tok * K;
    uint8_t *b = (uint8_t *)ws;
    int32_t *ids = ids_out ? ids_out : (int32_t *)b;
    b += MOE_ALIGN(P * sizeof(int32_t));
    float *wts = w_out ? w_out : (float *)b;
    b += MOE_ALIGN(P * sizeof(float));
    float *h = (float *)b;
    b += MOE_ALIGN(P * H * sizeof(float));

    moe_route_kernel<<<n_tok, MOE_THREADS, 0, stream>>>(ids, wts, m->router, x, dim, E, K,
                                                        m->norm_topk != 0);
    int rc = KERN_CUDA_LAUNCH_CHECK("moe_route_kernel");
    if (rc)
        return rc;
    if (path == KERN_CUDA_MOE_PATH_GROUPED ||
        (path == KERN_CUDA_MOE_PATH_AUTO && n_tok > KERN_CUDA_MOE_GROUPED_MIN)) {
        moe_group_ws g;
        moe_group_layout(&g, b, n_tok, K, E, dim);
        return moe_grouped(m, x, n_tok, y, ids, wts, h, &g, stream);
    }
    dim3 gu((unsigned)P, (unsigned)((H + MOE_ROWS - 1) / MOE_ROWS));
    moe_gate_up_kernel<<<gu, MOE_THREADS, 0, stream>>>(h, *m->gate, *m->up, x, ids, K, E, dim, H,
                                                       m->gelu != 0);
    if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_gate_up_kernel")) != 0)
        return rc;
    dim3 dn((unsigned)n_tok, (unsigned)((dim + MOE_ROWS - 1) / MOE_ROWS));
    moe_down_kernel<<<dn, MOE_THREADS, 0, stream>>>(y, *m->down, h, ids, wts, K, E, dim, H);
    return KERN_CUDA_LAUNCH_CHECK("moe_down_kernel");
}
