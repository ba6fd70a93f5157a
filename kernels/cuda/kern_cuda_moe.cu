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
    if (threadIdx.x == 0) {
        for (int k = 0; k < K; k++) { // insertion sort of the slots by expert id
            int j = k;
            while (j > 0 && ids[t * K + order[j - 1]] > ids[t * K + k]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = k;
        }
    }
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

extern "C" size_t kern_cuda_moe_ws_bytes(const kern_cuda_moe *m, int n_tok) {
    if (!moe_shape_ok(m) || n_tok < 0)
        return (size_t)-1;
    const size_t P = (size_t)n_tok * m->n_used;
    return MOE_ALIGN(P * sizeof(int32_t)) + MOE_ALIGN(P * sizeof(float)) +
           MOE_ALIGN(P * m->hidden * sizeof(float));
}

extern "C" int kern_cuda_moe_ffn(const kern_cuda_moe *m, const float *x, int n_tok, float *y,
                                 void *ws, size_t ws_bytes, int32_t *ids_out, float *w_out,
                                 cudaStream_t stream) {
    if (!moe_shape_ok(m) || n_tok < 0 || (n_tok > 0 && (!x || !y || !ws)))
        return BRISK_EINVAL;
    if (n_tok == 0)
        return 0;
    if (ws_bytes < kern_cuda_moe_ws_bytes(m, n_tok) || !kern_cuda_aligned(ws, 256))
        return BRISK_EINVAL;
    const int K = m->n_used, E = m->n_expert, dim = m->dim, H = m->hidden;
    const size_t P = (size_t)n_tok * K;
    if (P > 0x7fffffffu)
        return BRISK_EINVAL;
    uint8_t *b = (uint8_t *)ws;
    int32_t *ids = ids_out ? ids_out : (int32_t *)b;
    b += MOE_ALIGN(P * sizeof(int32_t));
    float *wts = w_out ? w_out : (float *)b;
    b += MOE_ALIGN(P * sizeof(float));
    float *h = (float *)b;

    moe_route_kernel<<<n_tok, MOE_THREADS, 0, stream>>>(ids, wts, m->router, x, dim, E, K,
                                                        m->norm_topk != 0);
    int rc = KERN_CUDA_LAUNCH_CHECK("moe_route_kernel");
    if (rc)
        return rc;
    dim3 gu((unsigned)P, (unsigned)((H + MOE_ROWS - 1) / MOE_ROWS));
    moe_gate_up_kernel<<<gu, MOE_THREADS, 0, stream>>>(h, *m->gate, *m->up, x, ids, K, E, dim, H,
                                                       m->gelu != 0);
    if ((rc = KERN_CUDA_LAUNCH_CHECK("moe_gate_up_kernel")) != 0)
        return rc;
    dim3 dn((unsigned)n_tok, (unsigned)((dim + MOE_ROWS - 1) / MOE_ROWS));
    moe_down_kernel<<<dn, MOE_THREADS, 0, stream>>>(y, *m->down, h, ids, wts, K, E, dim, H);
    return KERN_CUDA_LAUNCH_CHECK("moe_down_kernel");
}
